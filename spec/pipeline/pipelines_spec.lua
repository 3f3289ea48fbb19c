-- rag.pipeline.naive, hybrid, fusion, hyde, stepback: (A) each answers
-- offline from SciFact with rag.llm.extractive, citing only returned
-- contexts; (B) with scripted LLMs, the searches each issues (fusion's RRF
-- k = 60 checked against rag.fuse.rrf), citation validation and condensing;
-- (C) each limit ends each pipeline with "budget" and a trace.
local rag = require("rag")
local helpers = require("spec.helpers")
local support = require("spec.support.llm")
local shared = require("spec.support.pipeline")
local recording, ids = shared.recording, shared.ids
local find, user_message = shared.find, shared.user_message

-- The fixture; docs is its documents once corpus() has run.
local docs
local function corpus()
  local index, d = shared.corpus()
  docs = d
  return index, d
end

local NAMES = { "naive", "hybrid", "fusion", "hyde", "stepback" }
-- LLM calls of one answer: the pipeline's own (multi-query, hypothetical
-- passage, step-back question) and the answer.
local CALLS = { naive = 1, hybrid = 1, fusion = 2, hyde = 2, stepback = 2 }

describe("rag.pipeline", function()
  describe("offline on SciFact with rag.llm.extractive", function()
    for _, name in ipairs(NAMES) do
      it(name .. " answers with citations that point at returned contexts", function()
        local index, d = corpus()
        local p = rag.pipeline[name]({ index = index, llm = rag.llm.extractive() })
        for _, i in ipairs({ 3, 10 }) do
          local r = assert(p:answer(d[i].title))
          assert.are_not.equal(rag.prompts.get("en").refusal, r.text)
          assert.is_true(r.grounded)
          assert.is_true(#r.contexts > 0)
          local n = 0
          for c, cit in pairs(r.citations) do
            n = n + 1
            local ctx = r.contexts[c]
            assert.is_table(ctx)
            assert.equal(tostring(ctx.id), cit.id)
            assert.equal(ctx.doc_id, cit.doc_id)
            assert.equal(ctx.source, cit.source)
            assert.equal(ctx.start, cit.start)
            assert.equal(ctx.stop, cit.stop)
            assert.truthy(r.text:find("[" .. c .. "]", 1, true))
          end
          assert.is_true(n > 0)
          for m in r.text:gmatch("%[(%d+)%]") do
            assert.is_table(r.citations[tonumber(m)])
          end
          -- the document the question is the title of is cited
          local docs_cited = {}
          for _, cit in pairs(r.citations) do
            docs_cited[cit.doc_id] = true
          end
          assert.is_true(docs_cited[d[i].id])
          assert.is_table(find(r.trace, "step", "pack"))
          local lines = assert(r.trace:jsonl())
          assert.equal(#r.trace, select(2, lines:gsub("\n", "")))
          assert.equal(CALLS[name], r.usage.llm_calls)
          local hits, run = assert(p:retrieve(d[i].title))
          assert.is_true(#hits > 0)
          assert.is_table(find(run.trace, "step"))
          assert.is_table(run.usage)
        end
      end)
    end

    it("raises on a missing index, unknown options and bad values", function()
      local index = corpus()
      assert.has_error(function()
        rag.pipeline.naive({})
      end, "rag.pipeline.naive: option 'index' is required (anything with :search(query, opts))")
      assert.has_error(function()
        rag.pipeline.fusion({ index = index, nope = 1 })
      end, "rag.pipeline.fusion: unknown option 'nope'")
      assert.has_error(function()
        rag.pipeline.hybrid({ index = index, k = 0 })
      end)
      assert.has_error(function()
        rag.pipeline.naive({ index = index, llm = {} })
      end, "rag.pipeline.naive: option 'llm' must have a :chat(messages, opts) method")
      assert.has_error(function()
        rag.pipeline.naive({ index = index, prompts = { answer = { user = "{nope}" } } })
      end)
      assert.has_error(function()
        rag.pipeline.naive({ index = index }):answer(42)
      end, "rag.pipeline.naive:answer: question must be a string, got number")
    end)
  end)

  describe("docs/pipelines.md", function()
    it("runs the examples of the Pipelines section and prints what they say", function()
      local text = helpers.read("docs/pipelines.md")
      local section = assert(text:match("\n## Pipelines\n(.*)$"))
      local out, want = {}, {}
      local env = setmetatable({ print = function(...)
        local parts = {}
        for i = 1, select("#", ...) do
          parts[i] = tostring((select(i, ...)))
        end
        out[#out + 1] = table.concat(parts, "\t")
      end }, { __index = _G })
      local n = 0
      for code in section:gmatch("```lua\n(.-)```") do
        if code:find("rag.index.new", 1, true) or code:find("assert(p:answer(", 1, true) then
          n = n + 1
          for line in code:gmatch("[^\n]+") do
            local w = line:match("%-%-> (.*)$")
            if w then
              want[#want + 1] = w
            end
          end
          -- the first example's rag and idx serve the others
          code = code:gsub("^local rag = ", "rag = "):gsub("\nlocal idx = ", "\nidx = ")
          local chunk = assert((loadstring or load)(code, "=example " .. n, "t", env))
          if setfenv then
            setfenv(chunk, env)
          end
          chunk()
        end
      end
      assert.equal(13, n)
      assert.same(want, out)
    end)
  end)

  describe("with a scripted LLM", function()
    it("fusion searches the original and each generated query once and fuses "
      .. "them by RRF with k = 60", function()
      local index, d = corpus()
      local rec = recording(index)
      local q = d[3].title
      local generated = { d[5].title, d[6].title, d[7].title }
      local llm = support.scripted({ table.concat(generated, "\n"), "Yes [1]." })
      local p = rag.pipeline.fusion({ index = rec, llm = llm, k = 5, fetch_k = 10 })
      local hits = assert(p:retrieve(q))
      -- the original first, then each generated query, each exactly once
      assert.same({ q, generated[1], generated[2], generated[3] }, rec.queries)
      for _, o in ipairs(rec.opts) do
        assert.equal(10, o.k)
      end
      assert.truthy(user_message(llm.calls[1]):find(q, 1, true))
      local want = rag.fuse.rrf(rec.results, { k = 60, limit = 5 })
      assert.same(ids(want), ids(hits))
      for i, h in ipairs(hits) do
        assert.equal(want[i].score, h.score)
      end
      -- the top fused hit of 4 lists scores at most 4 / 61
      assert.is_true(hits[1].score <= 4 / 61 + 1e-12)
    end)

    it("fusion answers from the fused contexts", function()
      local index, d = corpus()
      local rec = recording(index)
      local llm = support.scripted({ d[5].title .. "\n" .. d[6].title, "An answer [2]." })
      local p = rag.pipeline.fusion({ index = rec, llm = llm, k = 3 })
      local r = assert(p:answer(d[3].title))
      assert.equal(3, #rec.queries)
      local want = rag.fuse.rrf(rec.results, { k = 60, limit = 3 })
      assert.same(ids(want), ids(r.contexts))
      assert.equal(r.contexts[2].id, r.citations[2].id)
      assert.equal(2, #llm.calls)
    end)

    it("hyde searches with the hypothetical passage, then the question", function()
      local index, d = corpus()
      local rec = recording(index)
      local passage = d[10].text:sub(1, 300)
      local llm = support.scripted({ "  " .. passage .. "\n", "An answer [1]." })
      local p = rag.pipeline.hyde({ index = rec, llm = llm, k = 3 })
      local r = assert(p:answer("a question"))
      assert.same({ passage, "a question" }, rec.queries)
      assert.truthy(user_message(llm.calls[1]):find("a question", 1, true))
      assert.same(ids(rag.fuse.rrf(rec.results, { k = 60, limit = 3 })), ids(r.contexts))
      rec = recording(index)
      p = rag.pipeline.hyde({ index = rec, llm = support.scripted({ passage, "A [1]." }),
        with_question = false, k = 3 })
      r = assert(p:answer("a question"))
      assert.same({ passage }, rec.queries)
      assert.same(ids(rag.fuse.rrf({ rec.results[1] }, { limit = 3 })), ids(r.contexts))
    end)

    it("stepback searches the question and the step-back question, answering from both",
      function()
        local index, d = corpus()
        local rec = recording(index)
        local llm = support.scripted({ d[20].title, "An answer [1]." })
        local p = rag.pipeline.stepback({ index = rec, llm = llm, k = 2 })
        local r = assert(p:answer(d[3].title))
        assert.same({ d[3].title, d[20].title }, rec.queries)
        local want = ids(rec.results[1])
        for _, id in ipairs(ids(rec.results[2])) do
          local dup = false
          for _, w in ipairs(want) do
            dup = dup or w == id
          end
          if not dup then
            want[#want + 1] = id
          end
        end
        assert.same(want, ids(r.contexts))
        assert.is_true(#r.contexts > 2)
      end)

    it("hybrid asks the index for fetch_k hybrid hits and reranks them by MMR to k",
      function()
        local index, d = corpus()
        local rec = recording(index)
        local p = rag.pipeline.hybrid({ index = rec, llm = support.scripted({ "A [1]." }), k = 3,
          fetch_k = 12, lambda = 0.3, embedder = index.embedder })
        local r = assert(p:answer(d[3].title))
        assert.equal("hybrid", rec.opts[1].mode)
        assert.equal(12, rec.opts[1].k)
        local hits = rec.results[1]
        local texts = { d[3].title }
        for i, h in ipairs(hits) do
          texts[i + 1] = h.text
        end
        local vs = index.embedder:embed(texts, { packed = true })
        local vectors = {}
        for i = 1, #hits do
          vectors[i] = vs[i + 1]
        end
        local want = rag.rerank.mmr(hits, { vectors = vectors, query = vs[1], lambda = 0.3, k = 3 })
        assert.same(ids(want), ids(r.contexts))
        assert.are_not.same({ hits[1].id, hits[2].id, hits[3].id }, ids(r.contexts))
        assert.is_table(find(r.trace, "branch", "mmr"))
        -- by default the index's own embedder gives the vectors
        r = assert(rag.pipeline.hybrid({ index = index, llm = support.scripted({ "A [1]." }),
          k = 3, fetch_k = 12, lambda = 0.3 }):answer(d[3].title))
        assert.same(ids(want), ids(r.contexts))
        -- with no vectors, the first k
        r = assert(rag.pipeline.hybrid({ index = index, llm = support.scripted({ "A [1]." }),
          k = 3, fetch_k = 12, embedder = false }):answer(d[3].title))
        assert.same({ hits[1].id, hits[2].id, hits[3].id }, ids(r.contexts))
        assert.is_table(find(r.trace, "branch", "no_rerank"))
        -- a rerank function replaces MMR
        local seen
        p = rag.pipeline.hybrid({ index = index, llm = support.scripted({ "A [1]." }), k = 2,
          rerank = function(question, list)
            seen = question
            local rev = {}
            for i = #list, 1, -1 do
              rev[#rev + 1] = list[i]
            end
            return rev
          end })
        r = assert(p:answer(d[3].title))
        assert.equal(d[3].title, seen)
        assert.equal(2, #r.contexts)
        assert.is_nil(find(r.trace, "branch", "mmr"))
      end)

    it("hybrid takes the hits' vectors from the index when MMR uses the index's embedder",
      function()
        local _, d = corpus()
        local base = rag.embed.hashing({ dim = 64 })
        local calls = {}
        local counting = { embed = function(_, texts, opts)
          calls[#calls + 1] = #texts
          return base:embed(texts, opts)
        end }
        local idx = rag.index.new({ embedder = counting })
        assert(idx:add_many(d))
        calls = {}
        local p = rag.pipeline.hybrid({ index = idx, k = 3, fetch_k = 12,
          llm = support.scripted({}, { forever = "A [1]." }) })
        local r = assert(p:answer(d[3].title))
        assert.same({ 1, 1 }, calls) -- the question, for the search and for MMR; no hit
        -- MMR over the vectors the index keeps (title and chunk, as indexed)
        local hits = assert(idx:search(d[3].title, { mode = "hybrid", k = 12, fetch_k = 12 }))
        local want = rag.rerank.mmr(hits, { vectors = idx:vectors(ids(hits)),
          query = base:embed({ d[3].title }, { packed = true })[1], lambda = 0.5, k = 3 })
        assert.same(ids(want), ids(r.contexts))
      end)

    it("hybrid keeps the hits' vectors for MMR by id while their text is the same", function()
      local index, d = corpus()
      local embedded = {}
      local counting = { embed = function(_, texts, opts)
        embedded[#embedded + 1] = #texts
        return index.embedder:embed(texts, opts)
      end }
      local p = rag.pipeline.hybrid({ index = index, embedder = counting, k = 3, fetch_k = 12,
        llm = support.scripted({}, { forever = "A [1]." }), vector_cache = 20 })
      local first = ids(assert(p:answer(d[3].title)).contexts)
      assert.same({ 13 }, embedded)
      assert.same(first, ids(assert(p:answer(d[3].title)).contexts))
      assert.same({ 13, 1 }, embedded) -- the question only
      -- 12 more entries would pass 20: the cache starts again
      assert(p:answer(d[10].title))
      assert(p:answer(d[3].title))
      assert.equal(13, embedded[4])
      -- a hit whose text changed is embedded again
      local changed = { search = function(_, q, o)
        local hits = index:search(q, o)
        hits[1].text = hits[1].text .. " (changed)"
        return hits
      end }
      embedded = {}
      p.o.index = changed
      assert(p:answer(d[3].title))
      assert.same({ 2 }, embedded)
      -- vector_cache = 0 keeps nothing
      embedded = {}
      p = rag.pipeline.hybrid({ index = index, embedder = counting, k = 3, fetch_k = 12,
        llm = support.scripted({}, { forever = "A [1]." }), vector_cache = 0 })
      assert(p:answer(d[3].title))
      assert(p:answer(d[3].title))
      assert.same({ 13, 13 }, embedded)
    end)

    it("removes citation markers that point at no context and reports them", function()
      local index, d = corpus()
      local llm = support.scripted({ "First [1]. Second [2][7]. Third [0]. Fourth [12]." })
      local p = rag.pipeline.naive({ index = index, llm = llm, k = 2 })
      local r = assert(p:answer(d[3].title))
      assert.equal(2, #r.contexts)
      assert.equal("First [1]. Second [2]. Third. Fourth.", r.text)
      assert.same({ 1, 2 }, (function()
        local out = {}
        for n in pairs(r.citations) do
          out[#out + 1] = n
        end
        table.sort(out)
        return out
      end)())
      assert.equal(tostring(r.contexts[1].id), r.citations[1].id)
      assert.equal(r.contexts[2].doc_id, r.citations[2].doc_id)
      local b = find(r.trace, "branch", "removed_citations")
      assert.is_table(b)
      assert.equal("markers pointing at no context: [7] [0] [12]", b.why)
      assert.is_true(r.grounded)
      -- an answer left with no real citation is not grounded
      r = assert(rag.pipeline.naive({ index = index, llm = support.scripted({ "Made up [9]." }) })
        :answer(d[3].title))
      assert.equal("Made up.", r.text)
      assert.is_nil(next(r.citations))
      assert.is_false(r.grounded)
    end)

    it("condenses the history into a standalone question before retrieval", function()
      local index, d = corpus()
      local standalone = d[3].title
      local history = {
        { role = "user", content = "Tell me about BC1 RNA." },
        { role = "assistant", content = "It is a small RNA [1]." },
      }
      for _, name in ipairs(NAMES) do
        local rec = recording(index)
        local llm = support.scripted({ standalone .. "\n" }, { forever = "An answer [1]." })
        local r = assert(rag.pipeline[name]({ index = rec, llm = llm }):answer("Can it prime "
          .. "its own reverse transcription?", { history = history }))
        local first = user_message(llm.calls[1])
        assert.truthy(first:find("Conversation:\nuser: Tell me about BC1 RNA.\nassistant: It is "
          .. "a small RNA [1].", 1, true), name)
        assert.truthy(first:find("Follow-up question: Can it prime its own reverse "
          .. "transcription?", 1, true), name)
        assert.equal(standalone, r.question)
        -- hyde searches its passage first, then the question
        assert.equal(standalone, rec.queries[name == "hyde" and 2 or 1], name)
        assert.truthy(user_message(llm.calls[#llm.calls]):find("Question: " .. standalone, 1,
          true), name)
        assert.equal("condense", r.trace[1].name)
      end
    end)

    it("passes stream to the answer call only", function()
      local index, d = corpus()
      local got = {}
      local llm = support.scripted({ "Step back?", "Streamed [1]." })
      local r = assert(rag.pipeline.stepback({ index = index, llm = llm })
        :answer(d[3].title, { stream = function(s) got[#got + 1] = s end }))
      assert.same({ "Streamed [1]." }, got)
      assert.equal("Streamed [1].", r.text)
      assert.is_nil(llm.calls[1].opts.stream)
    end)
  end)

  describe("replaceable steps", function()
    local function hit(id, text, score)
      return { id = id, doc_id = id, text = text, source = id .. ".md", score = score }
    end
    local HITS = { hit("a", "Alpha is the first letter.", 3), hit("b", "Beta is second.", 2),
      hit("c", "Gamma is third.", 1) }

    it("retrieve replaces the index; answer replaces the LLM", function()
      local asked = {}
      local p = rag.pipeline.naive({ k = 2,
        retrieve = function(q, opts)
          asked[#asked + 1] = { q, opts.k, opts.fetch_k }
          return HITS
        end,
        answer = function(q, context, contexts)
          assert.equal("which letter?", q)
          assert.truthy(context:find("[1] a.md\nAlpha is the first letter.", 1, true))
          assert.equal(2, #contexts)
          return "Alpha [1]. Nope [3]."
        end })
      local r = assert(p:answer("which letter?"))
      assert.same({ { "which letter?", 2, 20 } }, asked)
      assert.equal("Alpha [1]. Nope.", r.text)
      assert.same({ "a", "b" }, ids(r.contexts))
      assert.same({ [1] = { id = "a", doc_id = "a", source = "a.md" } }, r.citations)
      assert.equal(0, r.usage.llm_calls)
    end)

    it("rerank may be a provider with :rerank(query, docs, { top_n })", function()
      local provider = { seen = nil }
      function provider.rerank(_, query, texts, opts)
        provider.seen = { query, texts, opts.top_n }
        return { { index = 3, score = 0.9 }, { index = 1, score = 0.5 } }
      end
      local p = rag.pipeline.hybrid({ k = 2, rerank = provider, retrieve = function()
        return HITS
      end, answer = function() return "x [1]" end })
      local r = assert(p:answer("q"))
      assert.same({ "q", { HITS[1].text, HITS[2].text, HITS[3].text }, 2 }, provider.seen)
      assert.same({ "c", "a" }, ids(r.contexts))
      assert.equal(0.9, r.contexts[1].score)
      assert.equal(1, HITS[3].score) -- the caller's hit is not changed
      -- a provider's failure ends the run with its code
      function provider.rerank()
        return nil, "rerank: 429", "ratelimit"
      end
      local res, msg, code, partial = p:answer("q")
      assert.is_nil(res)
      assert.equal("rerank: 429", msg)
      assert.equal("ratelimit", code)
      assert.equal("rerank", partial.trace[#partial.trace].name)
    end)

    it("compress: a function, or the LLM's compress prompt on each hit", function()
      local p = rag.pipeline.naive({ k = 3, retrieve = function() return HITS end,
        compress = function(_, hits) return { hits[2] } end,
        answer = function() return "B [1]" end })
      assert.same({ "b" }, ids(assert(p:answer("q")).contexts))
      local llm = support.scripted({ "Alpha.", "NONE", "Gamma is third.", "A [1] G [2]." })
      p = rag.pipeline.naive({ k = 3, llm = llm, retrieve = function() return HITS end,
        compress = true })
      local r = assert(p:answer("q"))
      assert.same({ "a", "c" }, ids(r.contexts))
      assert.equal("Alpha.", r.contexts[1].text)
      assert.equal("Alpha is the first letter.", HITS[1].text)
      assert.truthy(user_message(llm.calls[2]):find("Document:\nBeta is second.", 1, true))
      assert.truthy(user_message(llm.calls[4]):find("[1] a.md\nAlpha.\n\n[2] c.md\nGamma",
        1, true))
    end)

    it("rewrite: true asks the rewrite prompt, a function is called", function()
      local got = {}
      local p = rag.pipeline.naive({ retrieve = function(q)
        got[#got + 1] = q
        return HITS
      end, llm = support.scripted({ "rewritten query\n", "A [1]." }), rewrite = true })
      local r = assert(p:answer("raw question?"))
      assert.same({ "rewritten query" }, got)
      assert.equal("rewritten query", r.question)
      p = rag.pipeline.naive({ retrieve = function(q)
        got[#got + 1] = q
        return HITS
      end, llm = support.scripted({ "A [1]." }), rewrite = function(q) return q:upper() end })
      assert(p:answer("raw"))
      assert.equal("RAW", got[2])
    end)

    it("asks in Chinese for a Chinese question", function()
      local llm = support.scripted({ "一个回答 [1]。" })
      local p = rag.pipeline.naive({ llm = llm, retrieve = function() return HITS end })
      local r = assert(p:answer("什么是第一个字母？"))
      assert.truthy(llm.calls[1].messages[1].content:find(rag.prompts.zh.refusal, 1, true))
      assert.same({ 1 }, (function()
        local out = {}
        for n in pairs(r.citations) do out[#out + 1] = n end
        return out
      end)())
    end)

    it("refuses without an LLM call when nothing is retrieved", function()
      local llm = support.scripted({})
      local streamed = {}
      local r = assert(rag.pipeline.naive({ llm = llm, retrieve = function() return {} end })
        :answer("anything?", { stream = function(t) streamed[#streamed + 1] = t end }))
      assert.equal(rag.prompts.en.refusal, r.text)
      assert.same({ r.text }, streamed)
      assert.is_false(r.grounded)
      assert.equal(0, #llm.calls)
      assert.is_table(find(r.trace, "branch", "no_context"))
    end)

    it("returns the index's and the LLM's failures with the run so far", function()
      local failing = { search = function() return nil, "search: disk gone", "io" end }
      for _, name in ipairs(NAMES) do
        local res, msg, code, partial = rag.pipeline[name]({ index = failing,
          llm = support.scripted({}, { forever = "more" }) }):answer("q")
        assert.is_nil(res)
        assert.equal("search: disk gone", msg)
        assert.equal("io", code)
        assert.is_table(find(partial.trace, "step"))
        assert.equal("io", partial.trace[#partial.trace].code)
        local hits, m2, c2, run = rag.pipeline[name]({ index = failing,
          llm = support.scripted({}, { forever = "more" }) }):retrieve("q")
        assert.is_nil(hits)
        assert.equal("search: disk gone", m2)
        assert.equal("io", c2)
        assert.same({}, run.hits)
        assert.is_table(run.trace)
      end
      local index = corpus()
      local down = support.scripted({}, { forever = function()
        return nil, "llm: 503", "http"
      end })
      for _, name in ipairs(NAMES) do
        local res, msg, code, partial = rag.pipeline[name]({ index = index, llm = down })
          :answer(docs[3].title)
        assert.is_nil(res)
        assert.equal("llm: 503", msg)
        assert.equal("http", code)
        assert.equal("chat", partial.trace[#partial.trace].name)
      end
    end)

    it("checks k and fetch_k", function()
      assert.has_error(function()
        rag.pipeline.naive({ retrieve = function() return {} end, k = 10, fetch_k = 5 })
      end, "rag.pipeline.naive: 'fetch_k' (5) must be at least 'k' (10)")
    end)
  end)

  describe("limits", function()
    -- An LLM that always asks for more: every reply is "more more ...",
    -- as long as max_tokens allows (so a token limit can be kept), and each
    -- call takes 10 ms on the fake clock.
    local function greedy(clock)
      return support.scripted({}, { clock = clock, latency = 0.01,
        forever = function(_, opts)
          local n = math.min(opts and opts.max_tokens or 40, 40)
          return { text = string.rep("more ", n) }
        end })
    end

    local function run(name, limits)
      local clock = support.clock()
      local p = rag.pipeline[name]({ index = corpus(), llm = greedy(clock), clock = clock.now,
        limits = limits })
      return p:answer(docs[3].title)
    end

    for _, name in ipairs(NAMES) do
      it(name .. " ends within each limit with code budget and a trace", function()
        corpus()
        local full = assert(run(name, { steps = 1000, llm_calls = 1000 })).usage
        assert.is_true(full.llm_calls >= 1)
        local cases = {
          { "steps", full.steps - 1, "steps" },
          { "llm_calls", full.llm_calls - 1, "llm_calls" },
          { "tokens", full.prompt_tokens, "total_tokens" },
          { "deadline_ms", full.ms - 5, "ms" },
        }
        for _, c in ipairs(cases) do
          local limit, value, used = c[1], c[2], c[3]
          local r, msg, code, partial = run(name, { [limit] = value })
          assert.is_nil(r, name .. " " .. limit)
          assert.equal("budget", code, name .. " " .. limit)
          assert.matches("^rag%.pipeline%." .. name .. ": ", msg)
          local stop = find(partial.trace, "stop")
          assert.is_table(stop, name .. " " .. limit)
          assert.equal(limit, stop.limit)
          assert.equal("budget", stop.code)
          local slack = limit == "deadline_ms" and 10 or 0 -- a call started in time ends late
          assert.is_true(partial.usage[used] <= value + slack, name .. " " .. limit)
          assert.is_table(partial.contexts)
          assert.is_table(partial.citations)
        end
      end)
    end
  end)
end)
