--- rag.providers._embed (internal, not API): the `embed` of every provider:
-- argument checks, each distinct text sent once, what the cache
-- (rag.embed.cache) holds skipped, batches by count and tokens, replies
-- checked, usage summed.
-- @module rag.providers._embed
local core = require("rag.core")
local opts_mod = require("rag.opts")

local check, strings = opts_mod.check, opts_mod.strings
local pack, unpack_vec, sha256 = core.vec.pack, core.vec.unpack, core.text.hash
local type, tonumber = type, tonumber
local sqrt, huge = math.sqrt, math.huge

local M = {}

--- The embedding options of a provider (merge into its schema).
M.SCHEMA = {
  batch_size = { "number", default = 64, int = true, min = 1, max = 100000 },
  batch_tokens = { "number", int = true, min = 1 },
  dimensions = { "number", int = true, min = 1, max = 65536 },
  normalize = { "boolean", default = false },
  tokenizer = { "userdata|table" },
  cache = { "table|boolean" },
}

--- A provider's embedding settings from its checked options.
function M.settings(o)
  return {
    model = o.model, dimensions = o.dimensions, batch_size = o.batch_size,
    batch_tokens = o.batch_tokens, normalize = o.normalize, tokenizer = o.tokenizer,
    cache = o.cache == true and require("rag.embed").cache() or o.cache or nil,
  }
end

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

-- The length of v when it is a non-empty list of finite numbers, else nil.
local function vector_len(v)
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

-- The next batch of todo[b...]: at most o.batch_size texts and, with
-- o.batch_tokens, at most that many tokens (a longer text goes alone).
-- Returns the texts, their indexes into `texts`, and the next b.
local function next_batch(texts, todo, b, o)
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
  return batch, idx, b
end

-- Adds the numbers of a reply's usage table `u` to `sum`.
local function add_usage(sum, u)
  if type(u) == "table" then
    sum.prompt_tokens = sum.prompt_tokens + (tonumber(u.prompt_tokens) or 0)
    sum.total_tokens = sum.total_tokens + (tonumber(u.total_tokens) or 0)
  end
end

-- Embeds `texts` in batches through `send`, skipping what the cache holds
-- and sending each distinct text once. `o`: `model` (cache key), `cache`,
-- `batch_size`, `batch_tokens`, `count` (text -> tokens), `normalize`,
-- `packed`. `send(batch) -> vectors [, usage] | nil, msg, code`.
local function batched(fname, texts, o, send)
  local n = #texts
  local out, hashes, todo, first = {}, {}, {}, {}
  local info = { requests = 0, cached = 0, sent = 0,
    usage = { prompt_tokens = 0, total_tokens = 0 } }
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
    local batch, idx
    batch, idx, b = next_batch(texts, todo, b, o)
    info.requests = info.requests + 1
    local vecs, usage, code = send(batch)
    if vecs == nil then
      return nil, usage, code
    end
    add_usage(info.usage, usage)
    if #vecs ~= #batch then
      return nil, fname .. ": the reply has " .. #vecs .. " embeddings for " .. #batch
        .. " inputs", "decode"
    end
    local store = {}
    for j = 1, #batch do
      local d = vector_len(vecs[j])
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

--- A provider's `embed(texts [, opts])`: checks the arguments (raising,
-- blamed on the provider's caller), then embeds with the settings `s` (see
-- `settings`) through `send(batch) -> vectors [, usage] | nil, msg, code`,
-- where usage is `{ prompt_tokens =, total_tokens = }` of that request.
-- @return vectors, info `{ requests=, cached=, sent=, usage= }` | nil, msg, code
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
  return batched(fname, texts, {
    model = s.model .. (s.dimensions and ("@" .. s.dimensions) or ""), cache = s.cache,
    batch_size = s.batch_size, batch_tokens = s.batch_tokens, count = count,
    normalize = s.normalize, packed = co.packed,
  }, send)
end

return M
