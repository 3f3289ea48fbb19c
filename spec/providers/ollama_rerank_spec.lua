-- rag.providers.ollama (native API) and rag.providers.rerank (Cohere, Jina,
-- Voyage, TEI) against spec/fixtures/llmd.py on 127.0.0.1.
local rag = require("rag")
local helpers = require("spec.helpers")

local KEY = "sk-CANARY-rr81"

describe("providers over their own wire formats", function()
  local base, stop

  setup(function()
    base, stop = helpers.start_httpd("llmd.py")
  end)

  teardown(function()
    stop()
  end)

  local uniq = helpers.uniq_model

  local function log(model)
    return helpers.llmd_log(base, model)
  end

  describe("rag.providers.ollama", function()
    it("embeds through /api/embed in batches, order kept", function()
      local p = rag.providers.ollama({ base_url = base, model = uniq("ok:"), batch_size = 3,
        keep_alive = "5m" })
      local texts = { "a", "bb", "ccc", "dddd", "eeeee", "a" }
      local vecs, info = assert(p:embed(texts))
      for i, t in ipairs(texts) do
        assert.equal(#t, vecs[i][1])
      end
      assert.equal(2, info.requests) -- five distinct texts, three per request
      local l = log(p.model)
      assert.equal("/api/embed", l[1].path)
      assert.equal("5m", l[1].body.keep_alive)
      assert.same({ "a", "bb", "ccc" }, l[1].body.input)
    end)

    it("chats with options and streams NDJSON deltas in order", function()
      local p = rag.providers.ollama({ base_url = base, model = uniq("ok:") })
      local reply = assert(p:chat("hello you", { temperature = 0.2, max_tokens = 9,
        stop = "\n", options = { num_ctx = 2048 } }))
      assert.equal("echo: hello you", reply.text)
      assert.equal("stop", reply.finish_reason)
      assert.equal(7, reply.usage.prompt_tokens)
      local body = log(p.model)[1].body
      assert.is_false(body.stream)
      assert.same({ temperature = 0.2, num_predict = 9, stop = { "\n" }, num_ctx = 2048 },
        body.options)
      local deltas = {}
      reply = assert(p:chat("one two three", { stream = function(d) deltas[#deltas + 1] = d end }))
      assert.equal("echo: one two three", reply.text)
      assert.same({ "echo: ", "one ", "two ", "three" }, deltas)
    end)

    it("maps errors as every provider does", function()
      local p = rag.providers.ollama({ base_url = base, model = uniq("e404:"), api_key = KEY })
      local v, msg, code = p:embed({ "x" })
      assert.is_nil(v)
      assert.equal("provider", code)
      assert.falsy(msg:find("CANARY", 1, true))
      p = rag.providers.ollama({ base_url = base, model = uniq("e500x1:"),
        sleep = function() end })
      assert(p:chat("hi"))
    end)

    it("raises on misuse", function()
      assert.has_error(function() rag.providers.ollama({}) end,
        "rag.providers.ollama: 'model' is required")
      assert.has_error(function() rag.providers.ollama({ model = "m", keep_alive = {} }) end,
        "rag.providers.ollama: 'keep_alive' must be a string or number, got table")
      local p = rag.providers.ollama({ model = "m" })
      assert.has_error(function() p:chat("x", { bogus = 1 }) end,
        "rag.providers.ollama.chat: unknown option 'bogus'")
      assert.truthy(tostring(p):find("http://127.0.0.1:11434", 1, true)
        or os.getenv("OLLAMA_HOST"))
    end)
  end)

  describe("rag.providers.rerank", function()
    local docs = { "the dog barks", "a cat and a dog", "nothing here", "cat" }

    it("speaks Cohere's format: hits best first, 1-based, with top_n", function()
      local r = rag.providers.rerank({ kind = "cohere", base_url = base, api_key = KEY,
        model = uniq("rerank-c:") })
      local hits = assert(r:rerank("cat dog", docs, { top_n = 3 }))
      assert.same({ { index = 2, score = 1 }, { index = 1, score = 0.5 },
        { index = 4, score = 0.5 } }, hits)
      local l = log(r.model)
      assert.equal("/v2/rerank", l[1].path)
      assert.equal(3, l[1].body.top_n)
      assert.same(docs, l[1].body.documents)
      assert.is_true(l[1].auth)
    end)

    it("speaks Jina's, Voyage's and TEI's formats", function()
      local models = { jina = "jina-reranker-v2", voyage = "rerank-2" }
      for _, kind in ipairs({ "jina", "voyage", "tei" }) do
        local r = rag.providers.rerank({ kind = kind, base_url = base, model = models[kind] })
        local hits = assert(r:rerank("cat dog", docs))
        assert.equal(4, #hits, kind)
        assert.same({ index = 2, score = 1 }, hits[1])
        assert.same({ index = 3, score = 0 }, hits[4])
        hits = assert(r:rerank("cat dog", docs, { top_n = 1 }))
        assert.equal(1, #hits)
      end
    end)

    it("carries ids of table documents into the hits", function()
      local r = rag.providers.rerank({ kind = "tei", base_url = base })
      local hits = assert(r:rerank("cat", { { id = "d1", text = "dog" }, { id = "d2",
        text = "cat" } }))
      assert.equal("d2", hits[1].id)
      assert.equal(2, hits[1].index)
      assert.same({}, assert(r:rerank("cat", {})))
    end)

    it("retries, maps errors and keeps the key out of them", function()
      local r = rag.providers.rerank({ kind = "cohere", base_url = base, api_key = KEY,
        model = uniq("e429x1r0.05:") })
      assert(r:rerank("q", { "a" }))
      assert.equal(2, #log(r.model))
      r = rag.providers.rerank({ kind = "cohere", base_url = base, api_key = KEY,
        model = uniq("e401:") })
      local v, msg, code = r:rerank("q", { "a" })
      assert.is_nil(v)
      assert.equal("auth", code)
      assert.falsy(msg:find("CANARY", 1, true))
      assert.falsy(tostring(r):find("CANARY", 1, true))
    end)

    it("rejects replies whose indexes do not fit the documents", function()
      for _, body in ipairs({
        '{"results":[{"index":5,"relevance_score":1}]}',
        '{"results":[{"index":0,"relevance_score":1},{"index":0,"relevance_score":1}]}',
        '{"results":[{"index":0.5,"relevance_score":1}]}',
        '{"results":[{"index":0}]}',
        '{"nothing":1}',
        '{"results":{"a":1}}',
      }) do
        local r = rag.providers.rerank({ kind = "cohere", api_key = "k", transport = function()
          return { status = 200, headers = {}, body = body }
        end })
        local v, _, code = r:rerank("q", { "a", "b" })
        assert.is_nil(v)
        assert.equal("decode", code, body)
      end
    end)

    it("raises on misuse", function()
      assert.has_error(function() rag.providers.rerank({}) end,
        "rag.providers.rerank: 'kind' is required (cohere, jina, tei or voyage)")
      assert.has_error(function() rag.providers.rerank({ kind = "nope" }) end,
        "rag.providers.rerank: 'kind' must be one of cohere, jina, tei, voyage, got 'nope'")
      assert.has_error(function() rag.providers.rerank({ kind = "tei" }) end,
        "rag.providers.rerank: 'base_url' is required for kind 'tei'")
      local r = rag.providers.rerank({ kind = "tei", base_url = base })
      assert.has_error(function() r:rerank(1, { "a" }) end,
        "rag.providers.rerank.rerank: query must be a string, got number")
      assert.has_error(function() r:rerank("q", "a") end,
        "rag.providers.rerank.rerank: docs must be a list, got string")
      assert.has_error(function() r:rerank("q", { 1 }) end,
        "rag.providers.rerank.rerank: docs[1] must be a string or a table with a string 'text'")
      assert.has_error(function() r:rerank("q", { "a" }, { top_n = 0 }) end,
        "rag.providers.rerank.rerank: 'top_n' must be in [1, inf]")
    end)
  end)
end)
