--- rag.providers.rerank: cross-encoder rerank APIs (Cohere, Jina, Voyage,
-- Hugging Face TEI) behind one call: `:rerank(query, docs [, { top_n }])`
-- -> hits `{ {index=, score=}, ... }` best first, `index` 1-based.
-- @module rag.providers.rerank
local http = require("rag.providers.http")
local opts_mod = require("rag.opts")

local check = opts_mod.check
local type, setmetatable, sort = type, setmetatable, table.sort

local M = {}

local FNAME = "rag.providers.rerank"

-- Each kind: default base URL, path, key variables, default model, how the
-- body is built and where the results are in the reply.
local KINDS = {
  cohere = {
    base = "https://api.cohere.com", path = "/v2/rerank", env = { "COHERE_API_KEY", "CO_API_KEY" },
    model = "rerank-v3.5",
    body = function(self, q, docs, top)
      return { model = self.model, query = q, documents = docs, top_n = top }
    end,
    list = "results", score = "relevance_score",
  },
  jina = {
    base = "https://api.jina.ai", path = "/v1/rerank", env = { "JINA_API_KEY" },
    model = "jina-reranker-v2-base-multilingual",
    body = function(self, q, docs, top)
      return { model = self.model, query = q, documents = docs, top_n = top,
        return_documents = false }
    end,
    list = "results", score = "relevance_score",
  },
  voyage = {
    base = "https://api.voyageai.com", path = "/v1/rerank", env = { "VOYAGE_API_KEY" },
    model = "rerank-2",
    body = function(self, q, docs, top)
      return { model = self.model, query = q, documents = docs, top_k = top,
        return_documents = false }
    end,
    list = "data", score = "relevance_score",
  },
  tei = {
    path = "/rerank", env = { "TEI_API_KEY" },
    body = function(_, q, docs)
      return { query = q, texts = docs, raw_scores = false, return_text = false }
    end,
    score = "score",
  },
}

local SCHEMA = http.schema({
  kind = { "string", enum = { "cohere", "jina", "tei", "voyage" } },
  base_url = { "string" },
  api_key = { "string" },
  model = { "string" },
})

local Provider = {}
Provider.__index = Provider

--- A rerank provider. `kind` is required; `base_url` is the server root
-- (required for "tei"); `api_key` defaults to the kind's usual environment
-- variable; `model` to the kind's current general model.
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
  local self = setmetatable({ kind = o.kind, model = o.model or kind.model,
    base_url = http.trim_base(base) }, Provider)
  self.client = http.client(o, http.key(o.api_key, (table.unpack or unpack)(kind.env)))
  return self
end

function Provider:__tostring()
  return http.describe(FNAME, self)
end

local CALL = { top_n = { "number", int = true, min = 1 } }

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
  if type(docs) ~= "table" then
    error(fname .. ": docs must be a list, got " .. type(docs), 2)
  end
  local texts = {}
  for i = 1, #docs do
    local d = docs[i]
    if type(d) == "table" then
      d = d.text
    end
    if type(d) ~= "string" then
      error(fname .. ": docs[" .. i .. "] must be a string or a table with a string 'text'", 2)
    end
    texts[i] = d
  end
  if #texts == 0 then
    return {}
  end
  local kind = KINDS[self.kind]
  local v, msg, code = http.post(self.client, fname, self.base_url .. kind.path,
    kind.body(self, query, texts, o.top_n))
  if v == nil then
    return nil, msg, code
  end
  local list = v
  if kind.list then
    list = type(v) == "table" and v[kind.list]
  end
  if type(list) ~= "table" or (next(list) ~= nil and list[1] == nil) then
    return nil, fname .. ": the reply has no result list", "decode"
  end
  local hits, seen = {}, {}
  for i = 1, #list do
    local r = list[i]
    local at = type(r) == "table" and r.index
    local score = type(r) == "table" and r[kind.score]
    if type(at) ~= "number" or at ~= math.floor(at) or at < 0 or at >= #texts or seen[at]
      or type(score) ~= "number" or score ~= score then
      return nil, fname .. ": result " .. i .. " of the reply is not a valid {index, "
        .. kind.score .. "}", "decode"
    end
    seen[at] = true
    local hit = { index = at + 1, score = score }
    if type(docs[at + 1]) == "table" then
      hit.id = docs[at + 1].id
    end
    hits[#hits + 1] = hit
  end
  sort(hits, function(a, b)
    if a.score ~= b.score then
      return a.score > b.score
    end
    return a.index < b.index
  end)
  if o.top_n then
    for i = #hits, o.top_n + 1, -1 do
      hits[i] = nil
    end
  end
  return hits
end

return M
