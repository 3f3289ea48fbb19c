--- rag.providers.websearch: web search APIs (SearXNG, Brave, Tavily) as a
-- retriever: `:search(query [, { k = }])` -> hits shaped like
-- `idx:search`'s (`id`, `doc_id`, `source` are the page's URL), so that a
-- pipeline can use it as its `fallback` or `retrieve`.
-- @module rag.providers.websearch
local request = require("rag.providers._request")
local check = require("rag.opts").check

local type, ipairs, pairs, tostring, error, format =
  type, ipairs, pairs, tostring, error, string.format
local unpack = table.unpack or unpack

local M = {}

local FNAME = "rag.providers.websearch"

-- Each kind: default base URL, path, method, key variables and header,
-- the list in the reply and the text field of a result.
local KINDS = {
  searxng = { path = "/search", method = "GET", env = {},
    list = { "results" }, text = "content" },
  brave = { base = "https://api.search.brave.com", path = "/res/v1/web/search",
    method = "GET", env = { "BRAVE_API_KEY", "BRAVE_SEARCH_API_KEY" },
    key_header = "x-subscription-token", list = { "web", "results" }, text = "description" },
  tavily = { base = "https://api.tavily.com", path = "/search", method = "POST",
    env = { "TAVILY_API_KEY" }, list = { "results" }, text = "content" },
}

local SCHEMA = request.schema({
  kind = { "string", enum = { "brave", "searxng", "tavily" } },
  k = { "number", default = 5, int = true, min = 1, max = 100 },
  params = { "table" },
})

local Provider = request.class(FNAME)

--- A web search provider (also `rag.providers.websearch(opts)`). `kind`
-- is required; `base_url` is the server root (required for "searxng",
-- a self-hosted instance with the JSON format enabled); `api_key`
-- defaults to the kind's environment variable (`BRAVE_API_KEY`,
-- `TAVILY_API_KEY`); `k` (5) is the default number of hits; `params` are
-- more query parameters (GET) or body fields (Tavily) sent as they are.
-- @raise on an unknown option, a bad value, no `kind`, or no `base_url`
--   for "searxng"
function M.new(opts)
  local o = check(FNAME, opts, SCHEMA, 2)
  if not o.kind then
    error(FNAME .. ": 'kind' is required (brave, searxng or tavily)", 2)
  end
  local kind = KINDS[o.kind]
  local base = o.base_url or kind.base
  if not base then
    error(FNAME .. ": 'base_url' is required for kind '" .. o.kind .. "'", 2)
  end
  return request.new(Provider, o, { kind = o.kind, k = o.k, params = o.params or {},
    base_url = request.trim_base(base) }, unpack(kind.env))
end

-- A URL's query component, percent-encoded (RFC 3986 unreserved kept).
local function escape(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(ch)
    return format("%%%02X", ch:byte())
  end))
end

local ENTITIES = { amp = "&", lt = "<", gt = ">", quot = '"', ["#39"] = "'", apos = "'" }

-- Text without HTML tags and with the common entities decoded (Brave
-- marks the matched words with <strong>).
local function plain(s)
  s = s:gsub("<[^>]*>", "")
  return (s:gsub("&(#?%w+);", function(e)
    return ENTITIES[e]
  end))
end

-- The hits of a reply `v`: best first as the engine ranks them.
local function hits_of(kind, v, k)
  local list = v
  for _, key in ipairs(kind.list) do
    list = type(list) == "table" and list[key] or nil
  end
  if list == nil and kind.list[1] == "web" and type(v) == "table" and v.type == "search" then
    list = {} -- Brave leaves out "web" when nothing is found
  end
  if type(list) ~= "table" then
    return nil, "the reply has no result list"
  end
  local hits, seen = {}, {}
  for i, r in ipairs(list) do
    if type(r) ~= "table" or type(r.url) ~= "string" then
      return nil, "result " .. i .. " of the reply has no url"
    end
    if not seen[r.url] and #hits < k then
      seen[r.url] = true
      local text = type(r[kind.text]) == "string" and plain(r[kind.text]) or ""
      local title = type(r.title) == "string" and plain(r.title) or nil
      hits[#hits + 1] = { id = r.url, doc_id = r.url, source = r.url, title = title,
        text = text, score = type(r.score) == "number" and r.score or 1 / i,
        meta = { engine = type(r.engine) == "string" and r.engine or nil, rank = i } }
    end
  end
  return hits
end

local CALL = { k = { "number", int = true, min = 1, max = 100 }, fetch_k = { "number" } }

--- Searches the web.
-- @tparam string query
-- @tparam[opt] table opts `k` (the provider's `k` by default); `fetch_k`
--   is accepted and ignored, so that a pipeline can pass its search options
-- @return hits `{ { id = url, doc_id = url, source = url, title =, text =,
--   score =, meta = { engine =, rank = } }, ... }` | nil, msg, code
function Provider:search(query, opts)
  local fname = FNAME .. ".search"
  if type(query) ~= "string" then
    error(fname .. ": query must be a string, got " .. type(query), 2)
  end
  local o = check(fname, opts, CALL, 2)
  local k = o.k or self.k
  local kind = KINDS[self.kind]
  local url, body = self.base_url .. kind.path, nil
  if kind.method == "GET" then
    local q = { "q=" .. escape(query) }
    if self.kind == "searxng" then
      q[#q + 1] = "format=json"
    else
      q[#q + 1] = "count=" .. k
    end
    for name, v in pairs(self.params) do
      q[#q + 1] = escape(name) .. "=" .. escape(v)
    end
    table.sort(q)
    url = url .. "?" .. table.concat(q, "&")
  else
    body = request.merge(self.params, { query = query, max_results = k })
  end
  return request.call(self.client, fname, url, body, function(v)
    return hits_of(kind, v, k)
  end, { method = kind.method, key_header = kind.key_header })
end

return M
