--- rag.providers.rerank: cross-encoder rerank APIs (Cohere, Jina, Voyage,
-- Hugging Face TEI) behind one call: `:rerank(query, docs [, { top_n }])`
-- -> hits `{ {index=, score=}, ... }` best first, `index` 1-based.
-- @module rag.providers.rerank
local request = require("rag.providers._request")
local check = require("rag.opts").check

local type, next, error, floor = type, next, error, math.floor
local unpack = table.unpack or unpack

local M = {}

local FNAME = "rag.providers.rerank"

-- Each kind: default base URL, path, key variables, default model, the
-- body's names for the documents and for top_n (none: not sent), whether
-- it takes no model, extra body fields, and where the results are in the
-- reply and their score.
local KINDS = {
  cohere = { base = "https://api.cohere.com", path = "/v2/rerank",
    env = { "COHERE_API_KEY", "CO_API_KEY" }, model = "rerank-v3.5",
    docs = "documents", top = "top_n", list = "results", score = "relevance_score" },
  jina = { base = "https://api.jina.ai", path = "/v1/rerank", env = { "JINA_API_KEY" },
    model = "jina-reranker-v2-base-multilingual", docs = "documents", top = "top_n",
    extra = { return_documents = false }, list = "results", score = "relevance_score" },
  voyage = { base = "https://api.voyageai.com", path = "/v1/rerank", env = { "VOYAGE_API_KEY" },
    model = "rerank-2", docs = "documents", top = "top_k",
    extra = { return_documents = false }, list = "data", score = "relevance_score" },
  tei = { path = "/rerank", env = { "TEI_API_KEY" }, docs = "texts", no_model = true,
    extra = { raw_scores = false, return_text = false }, score = "score" },
}

-- The request body of `kind` for query, texts and top_n.
local function body_of(kind, model, query, texts, top)
  local body = request.merge(kind.extra or {}, { query = query })
  if not kind.no_model then
    body.model = model
  end
  body[kind.docs] = texts
  if kind.top then
    body[kind.top] = top
  end
  return body
end

local SCHEMA = request.schema({
  kind = { "string", enum = { "cohere", "jina", "tei", "voyage" } },
})

local Provider = request.class(FNAME)

--- A rerank provider (also `rag.providers.rerank(opts)`). `kind` is
-- required; `base_url` is the server root (required for "tei"); `api_key`
-- defaults to the kind's usual environment variable; `model` to the kind's
-- current general model.
-- @raise on an unknown option, a bad value, no `kind`, or no `base_url`
--   for "tei"
function M.new(opts)
  local o = check(FNAME, opts, SCHEMA, 2)
  if not o.kind then
    error(FNAME .. ": 'kind' is required (cohere, jina, tei or voyage)", 2)
  end
  local kind = KINDS[o.kind]
  local base = o.base_url or kind.base
  if not base then
    error(FNAME .. ": 'base_url' is required for kind '" .. o.kind .. "'", 2)
  end
  return request.new(Provider, o, { kind = o.kind, model = o.model or kind.model,
    base_url = request.trim_base(base) }, unpack(kind.env))
end

local CALL = { top_n = { "number", int = true, min = 1 } }

local rank, texts_of = require("rag.rerank")._rank, require("rag.rerank")._texts

-- The hits of a reply `v` for `docs`, best first, or nil and why.
local function hits_of(kind, v, docs, top_n)
  local list = v
  if kind.list then
    list = type(v) == "table" and v[kind.list]
  end
  if type(list) ~= "table" or (next(list) ~= nil and list[1] == nil) then
    return nil, "the reply has no result list"
  end
  local hits, seen = {}, {}
  for i = 1, #list do
    local r = list[i]
    local at = type(r) == "table" and r.index
    local score = type(r) == "table" and r[kind.score]
    if type(at) ~= "number" or at ~= floor(at) or at < 0 or at >= #docs or seen[at]
      or type(score) ~= "number" or score ~= score then
      return nil, "result " .. i .. " of the reply is not a valid {index, " .. kind.score .. "}"
    end
    seen[at] = true
    local hit = { index = at + 1, score = score }
    if type(docs[at + 1]) == "table" then
      hit.id = docs[at + 1].id
    end
    hits[#hits + 1] = hit
  end
  return rank(hits, top_n)
end

--- Scores `docs` against `query`, best first.
-- @tparam string query
-- @tparam table docs strings, or tables with a string `text` (their `id`,
--   if any, is copied to the hit)
-- @tparam[opt] table opts `top_n`
-- @return hits `{ {index=, score= [, id=]}, ... }` | nil, msg, code
function Provider:rerank(query, docs, opts)
  local fname = FNAME .. ".rerank"
  if type(query) ~= "string" then
    error(fname .. ": query must be a string, got " .. type(query), 2)
  end
  local o = check(fname, opts, CALL, 2)
  local texts = texts_of(fname, docs, 2)
  if #texts == 0 then
    return {}
  end
  local kind = KINDS[self.kind]
  return request.call(self.client, fname, self.base_url .. kind.path,
    body_of(kind, self.model, query, texts, o.top_n), function(v)
      return hits_of(kind, v, docs, o.top_n)
    end)
end

return M
