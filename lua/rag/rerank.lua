--- rag.rerank: reranking without a model (MMR, lost-in-the-middle order,
-- cutoffs; in C) and with one, a cross-encoder run in C.
-- @module rag.rerank
local core = require("rag.core")
local opts_mod = require("rag.opts")

local check = opts_mod.check
local sort = table.sort

local M = {}
for k, v in pairs(core.rerank) do
  M[k] = v
end

local CE = {}
CE.__index = CE

-- The texts of `docs` (strings, or tables with a string `text`); raises at
-- `level` for anything else. Shared with rag.providers.rerank.
function M._texts(fname, docs, level)
  if type(docs) ~= "table" then
    error(fname .. ": docs must be a list, got " .. type(docs), level + 1)
  end
  local texts = {}
  for i = 1, #docs do
    local d = docs[i]
    if type(d) == "table" then
      d = d.text
    end
    if type(d) ~= "string" then
      error(fname .. ": docs[" .. i .. "] must be a string or a table with a string 'text'",
        level + 1)
    end
    texts[i] = d
  end
  return texts
end

-- Hits `{ index =, score = [, id =] }` best first, ties by index, cut to
-- top_n (nil: all), in place. Shared with rag.providers.rerank.
function M._rank(hits, top_n)
  sort(hits, function(a, b)
    if a.score ~= b.score then
      return a.score > b.score
    end
    return a.index < b.index
  end)
  for i = #hits, (top_n or #hits) + 1, -1 do
    hits[i] = nil
  end
  return hits
end

--- A cross-encoder (BertForSequenceClassification with one label, as
-- ms-marco-MiniLM-L-6-v2 or a bge reranker of BERT shape) run in C from a
-- model folder as downloaded. See docs/models.md.
-- @tparam string path the folder
-- @tparam[opt] table opts `quantize` ("int8" or "none"), `portable` (true:
--   plain C kernels)
-- @return reranker with `:score(query, texts)`, `:rerank(query, docs [, k | opts])`,
--   `:stats()`, `:close()` | nil, msg, code
function M.cross_encoder(path, opts)
  local m, msg, code = core.bert.load(path, opts)
  if not m then
    return nil, (msg:gsub("^rag%.bert%.load", "rag.rerank.cross_encoder")), code
  end
  if m:stats().kind ~= "cross-encoder" then
    m:close()
    return nil, "rag.rerank.cross_encoder: '" .. path .. "' is an embedder, not a "
      .. "cross-encoder (load it with rag.embed.bert)", "format"
  end
  return setmetatable({ model = m }, CE)
end

--- The model's logit for `query` with each text, in order.
-- @return `{ score, ... }` | nil, msg, code
function CE:score(query, texts)
  return self.model:score(query, texts)
end

local CALL = { top_n = { "number", int = true, min = 1 } }

--- Scores `docs` (strings, or tables with a string `text`, as hits are)
-- against `query`, best first (ties by position): the contract of
-- rag.providers.rerank, so the pipelines' `rerank` option takes it.
-- @param k at most this many (a number), or `{ top_n = }`
-- @return `{ {index=, score= [, id=]}, ... }` | nil, msg, code
function CE:rerank(query, docs, k)
  local fname = "rag.rerank.cross_encoder: rerank"
  if type(query) ~= "string" then
    error(fname .. ": query must be a string, got " .. type(query), 2)
  end
  local texts = M._texts(fname, docs, 2)
  local top = type(k) == "number" and check(fname, { top_n = k }, CALL, 2).top_n
    or check(fname, k, CALL, 2).top_n
  local scores, msg, code = self.model:score(query, texts)
  if not scores then
    return nil, msg, code
  end
  local hits = {}
  for i, s in ipairs(scores) do
    hits[i] = { index = i, score = s, id = type(docs[i]) == "table" and docs[i].id or nil }
  end
  return M._rank(hits, top)
end

function CE:stats()
  return self.model:stats()
end

function CE:close()
  self.model:close()
end

return M
