-- rag.providers.websearch (SearXNG, Brave, Tavily) against
-- spec/fixtures/llmd.py on 127.0.0.1: hits in idx:search's shape, the
-- requests each kind sends, errors as every provider maps them, and its
-- use as the corrective pipeline's fallback.
local rag = require("rag")
local helpers = require("spec.helpers")

local KEY = "sk-CANARY-ws77"

describe("rag.providers.websearch", function()
  local base, stop

  setup(function()
    base, stop = helpers.start_httpd("llmd.py")
  end)

  teardown(function()
    stop()
  end)

  -- A query unique to this run, so that the server's log is ours alone.
  local function query(prefix, words)
    return helpers.uniq_model(prefix) .. " " .. words
  end

  local function log(q)
    return helpers.llmd_log(base, (q:gsub("[^%w]", function(c)
      return string.format("%%%02X", c:byte())
    end)))
  end

  local URLS = { bm25 = "https://example.org/bm25", rrf = "https://example.org/rrf",
    mmr = "https://example.org/mmr" }

  local function check_hits(hits, want)
    assert.equal(#want, #hits)
    for i, h in ipairs(hits) do
      assert.equal(URLS[want[i]], h.id)
      assert.equal(h.id, h.doc_id)
      assert.equal(h.id, h.source)
      assert.is_string(h.text)
      assert.is_number(h.score)
      assert.equal(i, h.meta.rank)
    end
  end

  it("searxng: GET /search?format=json, hits ranked as the engine ranks them", function()
    local ws = rag.providers.websearch({ kind = "searxng", base_url = base .. "/" })
    local q = query("sx:", "reciprocal rank fusion documents")
    local hits = assert(ws:search(q))
    check_hits(hits, { "rrf", "bm25" })
    assert.equal("Reciprocal rank fusion adds 1/(k + rank) over ranked lists.", hits[1].text)
    assert.equal("Reciprocal rank fusion", hits[1].title)
    assert.equal("loopback", hits[1].meta.engine)
    local l = log(q)
    assert.equal("/search", l[1].path)
    assert.same({ q = q, format = "json" }, l[1].body)
    assert.is_false(l[1].auth)
    hits = assert(ws:search(q, { k = 1 }))
    check_hits(hits, { "rrf" })
  end)

  it("brave: GET with count and the key in X-Subscription-Token; HTML made plain", function()
    local ws = rag.providers.websearch({ kind = "brave", base_url = base, api_key = KEY, k = 2 })
    local q = query("br:", "maximal marginal relevance passages ranks")
    local hits = assert(ws:search(q))
    check_hits(hits, { "mmr", "bm25" })
    assert.equal("Maximal marginal relevance picks passages unlike those already picked. & more",
      hits[1].text)
    assert.equal(1, hits[1].score)
    assert.equal(0.5, hits[2].score)
    local l = log(q)[1]
    assert.equal("/res/v1/web/search", l.path)
    assert.same({ q = q, count = "2" }, l.body)
    assert.equal(KEY, l.headers["x-subscription-token"])
    assert.is_nil(l.headers.authorization)
    -- nothing found: no hits
    assert.same({}, assert(ws:search(query("br:", "zzz"))))
  end)

  it("tavily: POST /search with query and max_results, a bearer key", function()
    local ws = rag.providers.websearch({ kind = "tavily", base_url = base, api_key = KEY,
      params = { search_depth = "basic" } })
    local q = query("tv:", "bm25 term frequency")
    local hits = assert(ws:search(q, { k = 3 }))
    check_hits(hits, { "bm25" })
    local l = helpers.llmd_log(base, (q:gsub(" ", "%%20")))[1]
    assert.equal("/search", l.path)
    assert.same({ query = q, max_results = 3, search_depth = "basic" }, l.body)
    assert.is_true(l.auth)
  end)

  it("maps errors as every provider does, never showing the key", function()
    local ws = rag.providers.websearch({ kind = "brave", base_url = base, api_key = KEY })
    local hits, msg, code = ws:search(query("e401:", "x"))
    assert.is_nil(hits)
    assert.equal("auth", code)
    assert.matches("^rag%.providers%.websearch%.search: GET ", msg)
    assert.falsy(msg:find("CANARY", 1, true))
    hits, msg, code = ws:search(query("badshape:", "x"))
    assert.is_nil(hits)
    assert.equal("decode", code)
    assert.matches("no result list", msg)
    ws = rag.providers.websearch({ kind = "searxng", base_url = base, sleep = function() end })
    hits, msg, code = ws:search(query("badshape:", "x"))
    assert.is_nil(hits)
    assert.equal("decode", code)
    assert.matches("no result list", msg)
    assert(ws:search(query("e500x1:", "bm25")))
    ws = rag.providers.websearch({ kind = "searxng", base_url = "http://127.0.0.1:"
      .. helpers.free_port(), max_retries = 0 })
    hits, msg, code = ws:search("q")
    assert.is_nil(hits)
    assert.equal("http", code)
    assert.matches("^rag%.providers%.websearch%.search: GET http://127%.0%.0%.1", msg)
  end)

  it("is a fallback retriever for the corrective pipeline", function()
    local ws = rag.providers.websearch({ kind = "searxng", base_url = base })
    local q = query("cr:", "reciprocal rank fusion")
    local p = rag.pipeline.corrective({ fallback = ws, k = 2,
      retrieve = function() return {} end })
    local r = assert(p:answer(q))
    assert.equal(URLS.rrf, r.contexts[1].id)
    assert.equal(URLS.rrf, r.citations[1].source)
    assert.is_true(r.grounded)
  end)

  it("raises on misuse", function()
    assert.has_error(function() rag.providers.websearch({}) end,
      "rag.providers.websearch: 'kind' is required (brave, searxng or tavily)")
    assert.has_error(function() rag.providers.websearch({ kind = "google" }) end,
      "rag.providers.websearch: 'kind' must be one of brave, searxng, tavily, got 'google'")
    assert.has_error(function() rag.providers.websearch({ kind = "searxng" }) end,
      "rag.providers.websearch: 'base_url' is required for kind 'searxng'")
    local ws = rag.providers.websearch({ kind = "tavily", api_key = KEY })
    assert.has_error(function() ws:search(1) end,
      "rag.providers.websearch.search: query must be a string, got number")
    assert.has_error(function() ws:search("q", { k = 0 }) end,
      "rag.providers.websearch.search: 'k' must be in [1, 100]")
    assert.falsy(tostring(ws):find("CANARY", 1, true))
  end)
end)
