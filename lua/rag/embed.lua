--- rag.embed: offline embedders (hashing, Model2Vec), the embedding cache,
-- and the batching every embedder shares.
-- @module rag.embed
local core = require("rag.core")
local opts_mod = require("rag.opts")

local check, strings = opts_mod.check, opts_mod.strings

local pack, unpack_vec, sha256 = core.vec.pack, core.vec.unpack, core.text.hash
local type, tostring, tonumber, pairs, setmetatable = type, tostring, tonumber, pairs, setmetatable
local io_open, os_rename, os_remove, concat = io.open, os.rename, os.remove, table.concat
local sqrt, huge = math.sqrt, math.huge

local M = {}

-- {====== Offline embedders ======}

--- The hashing embedder (in C): signed feature hashing of words and
-- character n-grams, L2-normalised; lexical, not semantic. See docs/api.md.
-- @function hashing
-- @tparam[opt] table opts `dim` (512), `words`, `ngrams`, `ngram_min`,
--   `ngram_max`, `word_weight`, `ngram_weight`, `tf`, `seed`, `lowercase`
-- @return embedder with `:embed(texts [, { packed = }])`, `:dim()`, `:config()`
M.hashing = core.hashing.new

--- A Model2Vec model directory (config.json, model.safetensors,
-- tokenizer.json) loaded in C: static token embeddings, mean-pooled.
-- @function model2vec
-- @tparam string dir
-- @return embedder with `:embed(texts [, { packed =, max_length = }])`,
--   `:tokenize(text)`, `:dim()`, `:stats()` | nil, msg, code
M.model2vec = core.model2vec.load

--- The embedder used when no provider is configured: `hashing{ dim = 512 }`.
function M.default()
  return M.hashing({ dim = 512 })
end

-- {====== The cache ======}

--[[ The cache file, `<dir>/embeddings.cache`, is a log of records appended
as embeddings arrive; a record cut short by a crash is dropped when the file
is next opened. Grammar (hexN = N lowercase hex digits):

  file    := record*
  record  := "RAGE1" hex8(#body) body hex8(check)
  body    := hex8(#model) model sha256hex(text) vector
  vector  := little-endian float32 values (rag.vec.pack)
  check   := the first 8 hex digits of sha256hex(body)
]]
local MAGIC = "RAGE1"
local FILE = "embeddings.cache"

local Cache = {}
Cache.__index = Cache

local function hex8(n)
  return string.format("%08x", n)
end

local function record(model, hash, packed)
  local body = hex8(#model) .. model .. hash .. packed
  return MAGIC .. hex8(#body) .. body .. sha256(body):sub(1, 8)
end

-- Parses records from s; returns the entries and the length of the good prefix.
local function parse(s, into)
  local p, n = 1, #s
  while p + 12 < n and s:sub(p, p + 4) == MAGIC do
    local len = tonumber(s:sub(p + 5, p + 12), 16)
    local body_at = p + 13
    if not len or body_at + len + 7 > n then
      break
    end
    local body = s:sub(body_at, body_at + len - 1)
    if s:sub(body_at + len, body_at + len + 7) ~= sha256(body):sub(1, 8) then
      break
    end
    local mlen = tonumber(body:sub(1, 8), 16)
    if not mlen or 8 + mlen + 64 > len or (len - 8 - mlen - 64) % 4 ~= 0 then
      break
    end
    local model = body:sub(9, 8 + mlen)
    local hash = body:sub(9 + mlen, 8 + mlen + 64)
    into[model .. "\n" .. hash] = body:sub(9 + mlen + 64)
    p = body_at + len + 8
  end
  return p - 1
end

--- An embedding cache keyed by (model, SHA-256 of the text), in memory and,
-- with `dir`, in `<dir>/embeddings.cache` as well.
-- @tparam[opt] table opts `dir` (an existing directory)
-- @return cache | nil, msg, "io" when the file cannot be read or repaired
function M.cache(opts)
  local o = check("rag.embed.cache", opts, { dir = { "string" } })
  local self = setmetatable({ mem = {}, n = 0 }, Cache)
  if o.dir then
    self.path = o.dir .. "/" .. FILE
    local f = io_open(self.path, "rb")
    if f then
      local s = f:read("*a")
      f:close()
      local good = parse(s or "", self.mem)
      if good < #(s or "") then -- a torn tail: keep the good records only
        local tmp = self.path .. ".tmp"
        local w, err = io_open(tmp, "wb")
        if not w then
          return nil, "rag.embed.cache: " .. tostring(err), "io"
        end
        w:write(s:sub(1, good))
        w:close()
        local ok, rerr = os_rename(tmp, self.path)
        if not ok then
          os_remove(tmp)
          return nil, "rag.embed.cache: " .. tostring(rerr), "io"
        end
      end
    else
      local w, err = io_open(self.path, "ab")
      if not w then
        return nil, "rag.embed.cache: " .. tostring(err), "io"
      end
      w:close()
    end
  end
  for _ in pairs(self.mem) do
    self.n = self.n + 1
  end
  return self
end

--- The packed vector stored for (model, hash), or nil.
function Cache:get(model, hash)
  return self.mem[model .. "\n" .. hash]
end

--- Stores packed vectors: `entries` = { {hash, packed}, ... } for one model.
-- @return true | nil, msg, "io" (the memory part is stored either way)
function Cache:put(model, entries)
  local recs = {}
  for i = 1, #entries do
    local key = model .. "\n" .. entries[i][1]
    if self.mem[key] == nil then
      self.n = self.n + 1
    end
    self.mem[key] = entries[i][2]
    recs[#recs + 1] = record(model, entries[i][1], entries[i][2])
  end
  if self.path and #recs > 0 then
    local f, err = io_open(self.path, "ab")
    if not f then
      return nil, "rag.embed.cache: " .. tostring(err), "io"
    end
    local ok, werr = f:write(concat(recs))
    f:close()
    if not ok then
      return nil, "rag.embed.cache: " .. tostring(werr), "io"
    end
  end
  return true
end

--- Number of cached vectors (also `#cache` on Lua 5.2 and later).
function Cache:count()
  return self.n
end
Cache.__len = Cache.count

function Cache:__tostring()
  return "rag.embed.cache(" .. self.n .. (self.path and (", " .. self.path) or "") .. ")"
end

-- {====== Batching ======}

local function normalized(v)
  local s = 0
  for i = 1, #v do
    s = s + v[i] * v[i]
  end
  if s == 0 then
    return v
  end
  local inv, out = 1 / sqrt(s), {}
  for i = 1, #v do
    out[i] = v[i] * inv
  end
  return out
end

-- Raises unless v is a non-empty list of finite numbers; returns its length.
local function check_vector(v)
  if type(v) ~= "table" or #v == 0 then
    return nil
  end
  for i = 1, #v do
    local x = v[i]
    if type(x) ~= "number" or x ~= x or x == huge or x == -huge then
      return nil
    end
  end
  return #v
end

--- Embeds `texts` in batches through `send`, skipping what the cache holds
-- and sending each distinct text once. Internal to the embedders.
-- @tparam string fname for messages
-- @tparam table texts strings (checked by the caller)
-- @tparam table o `model` (cache key), `cache`, `batch_size`, `batch_tokens`,
--   `count` (text -> tokens), `normalize`, `packed`
-- @tparam function send `send(batch) -> vectors | nil, msg, code`
-- @return vectors, info `{ requests=, cached=, sent= }` | nil, msg, code
function M.batched(fname, texts, o, send)
  local n = #texts
  local out, hashes, todo, first = {}, {}, {}, {}
  local info = { requests = 0, cached = 0, sent = 0 }
  for i = 1, n do
    local t = texts[i]
    if o.cache then
      hashes[i] = sha256(t)
      local hit = o.cache:get(o.model, hashes[i])
      if hit then
        out[i] = unpack_vec(hit)
        info.cached = info.cached + 1
      end
    end
    if out[i] == nil and first[t] == nil then
      first[t] = i
      todo[#todo + 1] = i
    end
  end
  local dim
  local b = 1
  while b <= #todo do
    local batch, idx, tokens = {}, {}, 0
    while b <= #todo and #batch < o.batch_size do
      local t = texts[todo[b]]
      local c = o.batch_tokens and o.count(t) or 0
      if #batch > 0 and o.batch_tokens and tokens + c > o.batch_tokens then
        break
      end
      tokens = tokens + c
      batch[#batch + 1] = t
      idx[#idx + 1] = todo[b]
      b = b + 1
    end
    info.requests = info.requests + 1
    local vecs, msg, code = send(batch)
    if vecs == nil then
      return nil, msg, code
    end
    if #vecs ~= #batch then
      return nil, fname .. ": the reply has " .. #vecs .. " embeddings for " .. #batch
        .. " inputs", "decode"
    end
    local store = {}
    for j = 1, #batch do
      local d = check_vector(vecs[j])
      if not d or (dim and d ~= dim) then
        return nil, fname .. ": embedding " .. j .. " of the reply is not a list of "
          .. (dim and (dim .. " ") or "") .. "finite numbers", "decode"
      end
      dim = d
      local v = vecs[j]
      if o.cache then
        local p = pack(v)
        store[#store + 1] = { hashes[idx[j]], p }
        v = unpack_vec(p) -- what a cache hit would give, so results never depend on it
      end
      out[idx[j]] = v
    end
    info.sent = info.sent + #batch
    if o.cache then
      local ok, msg2, code2 = o.cache:put(o.model, store)
      if not ok then
        return nil, msg2, code2
      end
    end
  end
  local res = {}
  for i = 1, n do
    local v = out[i]
    if v == nil then -- a repeat of an earlier text: its own copy
      v = {}
      local src = out[first[texts[i]]]
      for j = 1, #src do
        v[j] = src[j]
      end
    end
    if o.normalize then
      v = normalized(v)
    end
    res[i] = o.packed and pack(v) or v
  end
  return res, info
end

local CALL_OPTS = { packed = { "boolean", default = false } }

--- The embedding options of a provider, merged into `schema` (a new table).
function M.schema(schema)
  local out = {
    batch_size = { "number", default = 64, int = true, min = 1, max = 100000 },
    batch_tokens = { "number", int = true, min = 1 },
    dimensions = { "number", int = true, min = 1, max = 65536 },
    normalize = { "boolean", default = false },
    tokenizer = { "userdata|table" },
    cache = { "table|boolean" },
  }
  for k, v in pairs(schema) do
    out[k] = v
  end
  return out
end

--- A provider's embedding settings from its checked options.
function M.settings(o)
  return {
    model = o.model, dimensions = o.dimensions, batch_size = o.batch_size,
    batch_tokens = o.batch_tokens, normalize = o.normalize, tokenizer = o.tokenizer,
    cache = o.cache == true and M.cache() or o.cache or nil,
  }
end

--- A provider's `embed(texts [, opts])`: checks the arguments (raising,
-- blamed on the provider's caller), then runs `batched` with the settings
-- `s` (see `settings`) and `send`.
function M.run(fname, s, texts, opts, send)
  strings(fname, "texts", texts, 3)
  local co = check(fname, opts, CALL_OPTS, 3)
  local count
  if s.batch_tokens then
    local tok = s.tokenizer or require("rag.tokenizer").approx()
    count = function(t)
      return tok:count(t) or #t
    end
  end
  return M.batched(fname, texts, {
    model = s.model .. (s.dimensions and ("@" .. s.dimensions) or ""), cache = s.cache,
    batch_size = s.batch_size, batch_tokens = s.batch_tokens, count = count,
    normalize = s.normalize, packed = co.packed,
  }, send)
end

return M
