--- rag.embed: offline embedders (hashing, Model2Vec) and the embedding
-- cache that providers consult (their batching is rag.providers._embed).
-- @module rag.embed
local core = require("rag.core")
local opts_mod = require("rag.opts")

local check = opts_mod.check

local sha256 = core.text.hash
local tostring, tonumber, pairs, setmetatable = tostring, tonumber, pairs, setmetatable
local io_open, os_rename, os_remove, concat = io.open, os.rename, os.remove, table.concat

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

--- A BERT-family sentence embedder run in C from a model folder as
-- downloaded (config.json, tokenizer.json, model.safetensors in F32 or
-- F16, and sentence-transformers' modules.json, 1_Pooling/config.json and
-- sentence_bert_config.json). See docs/models.md.
-- @tparam string path the folder
-- @tparam[opt] table opts `quantize` ("int8" or "none"), `portable` (true:
--   plain C kernels)
-- @return embedder with `:embed(texts [, { packed = }])`, `:dim()`,
--   `:max_tokens()`, `:tokenize(text)`, `:stats()`, `:close()` | nil, msg, code
function M.bert(path, opts)
  local m, msg, code = core.bert.load(path, opts)
  if not m then
    return nil, (msg:gsub("^rag%.bert%.load", "rag.embed.bert")), code
  end
  if m:stats().kind ~= "embedder" then
    m:close()
    return nil, "rag.embed.bert: '" .. path .. "' is a cross-encoder (load it with "
      .. "rag.rerank.cross_encoder)", "format"
  end
  return m
end

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
  if o.dir and o.dir:find("\0", 1, true) then -- io.open would open a shorter path
    error("rag.embed.cache: option 'dir' contains a NUL byte", 2)
  end
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

return M
