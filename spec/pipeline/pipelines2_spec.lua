-- rag.pipeline.window, multihop, adaptive, corrective, router: (A) each
-- answers offline from SciFact with rag.llm.extractive, citing only
-- returned contexts; (B) with scripted LLMs, the branches each takes;
-- (C) each limit ends each pipeline with "budget" and a trace.
local rag = require("rag")
local support = require("spec.support.llm")
local shared = require("spec.support.pipeline")
local recording, ids = shared.recording, shared.ids
local find, user_message = shared.find, shared.user_message

-- The fixture, chunked into sentences (at most 64 tokens a chunk); docs
-- is its documents once corpus() has run.
local docs
local function corpus()
  local index, d = shared.corpus("sentences")
  docs = d
  return index, d
end

-- The pipelines with some variants: "name/variant" (VARIANTS' options).
local RUNS = { "window", "multihop", "adaptive", "adaptive/iterative", "adaptive/llm",
  "corrective", "corrective/llm", "router" }

-- The options each pipeline needs besides index and llm.
local VARIANTS = {
  ["adaptive/iterative"] = { classify = function() return "iterative", "always" end },
  ["adaptive/llm"] = { classify = true },
  ["corrective/llm"] = { grade = true, check = true },
}

local function extra(name)
  local v = VARIANTS[name]
  if v then
    local o = {}
    for k, x in pairs(v) do
      o[k] = x
    end
    return o
  end
  if name == "router" then
    local index = corpus()
    return { routes = {
      { name = "science", examples = { docs[3].title, docs[10].title },
        pipeline = rag.pipeline.naive({ index = index }) },
      { name = "chat", examples = { "hello there", "how are you today" },
        pipeline = rag.pipeline.naive({ index = index }) },
    } }
  end
  return {}
end

local function make(name, o)
  local opts = extra(name)
  for k, v in pairs(o) do
    opts[k] = v
  end
  if name == "router" then
    -- the routes' pipelines take the LLM and limits' run from the router
    for _, r in ipairs(opts.routes) do
      r.pipeline = rag.pipeline.naive({ index = opts.index, llm = opts.llm })
    end
    opts.index = nil
  end
  return rag.pipeline[name:match("^[^/]+")](opts)
end

-- Every citation is a returned context, and every marker a citation.
local function check_citations(r)
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
  for m in r.text:gmatch("%[(%d+)%]") do
    assert.is_table(r.citations[tonumber(m)])
  end
  return n
end

describe("rag.pipeline (window, multihop, adaptive, corrective, router)", function()
  describe("offline on SciFact with rag.llm.extractive", function()
    for _, name in ipairs(RUNS) do
      it(name .. " answers with citations that point at returned contexts", function()
        local index, d = corpus()
        local p = make(name, { index = index, llm = rag.llm.extractive() })
        for _, i in ipairs({ 3, 10 }) do
          local r = assert(p:answer(d[i].title))
          assert.are_not.equal(rag.prompts.get("en").refusal, r.text)
          assert.is_true(r.grounded)
          assert.is_true(#r.contexts > 0)
          assert.is_true(check_citations(r) > 0)
          local cited = {}
          for _, cit in pairs(r.citations) do
            cited[cit.doc_id] = true
          end
          assert.is_true(cited[d[i].id], name)
          -- a context with a span is the document's text there
          for _, c in ipairs(r.contexts) do
            if c.start then
              assert.equal(index:get(c.doc_id).text:sub(c.start, c.stop), c.text)
            end
          end
          local lines = assert(r.trace:jsonl())
          assert.equal(#r.trace, select(2, lines:gsub("\n", "")))
          local hits, run = assert(p:retrieve(d[i].title))
          assert.is_true(#hits > 0)
          assert.is_table(run.trace)
        end
      end)
    end
  end)

  describe("window", function()
    it("returns the expanded spans, cut to the sentences that share a term", function()
      local index, d = corpus()
      local rec = recording(index)
      local q = d[3].title
      local p = rag.pipeline.window({ index = rec, k = 3, window = 1, compress = false,
        llm = support.scripted({ "A [1]." }) })
      local r = assert(p:answer(q))
      assert.same({ window = 1 }, rec.opts[1].expand)
      assert.equal(3, rec.opts[1].k)
      local want = index:search(q, { k = 3, expand = { window = 1 } })
      assert.same(ids(want), ids(r.contexts))
      local plain = index:search(q, { k = 3 })
      local grew = false
      for i, c in ipairs(r.contexts) do
        assert.equal(want[i].text, c.text)
        assert.equal(index:get(c.doc_id).text:sub(c.start, c.stop), c.text)
        grew = grew or #c.text > #plain[i].text
      end
      assert.is_true(grew)
      -- by default each window keeps its sentences that share a term
      p = rag.pipeline.window({ index = index, k = 3, window = 1,
        llm = support.scripted({ "A [1]." }) })
      r = assert(p:answer("BC1 RNA reverse transcription"))
      want = index:search("BC1 RNA reverse transcription", { k = 3, expand = { window = 1 } })
      local qterms = {}
      for _, t in ipairs(rag.text.tokenize("BC1 RNA reverse transcription")) do
        qterms[t] = true
      end
      local cut, spans = false, 0
      for i, c in ipairs(r.contexts) do
        assert.equal(want[i].id, c.id)
        -- one run of sentences keeps its span; several are joined without one
        if c.start then
          assert.equal(index:get(c.doc_id).text:sub(c.start, c.stop), c.text)
          spans = spans + 1
        end
        for _, s in ipairs(rag.text.sentences(c.text)) do
          assert.truthy(want[i].text:find(s.text, 1, true))
          local shares = false
          for _, t in ipairs(rag.text.tokenize(s.text)) do
            shares = shares or qterms[t] == true
          end
          assert.is_true(shares, s.text)
        end
        cut = cut or #c.text < #want[i].text
      end
      assert.is_true(cut)
      assert.is_true(spans > 0 and spans < #r.contexts)
      assert.is_table(find(r.trace, "branch", "sentences"))
      -- overlapping windows cut to the same text are kept once
      local twice = { search = function(_, query, o)
        local hits = index:search(query, o)
        local copy = {}
        for k, v in pairs(hits[1]) do
          copy[k] = v
        end
        copy.id = "again"
        hits[#hits] = copy
        return hits
      end }
      r = assert(rag.pipeline.window({ index = twice, k = 3, window = 1,
        llm = support.scripted({ "A [1]." }) }):answer("BC1 RNA reverse transcription"))
      assert.same({ want[1].id, want[2].id }, ids(r.contexts))
      assert.matches("1 repeats dropped$", find(r.trace, "branch", "sentences").why)
      -- compress = true asks the LLM for each window; NONE drops it
      local llm = support.scripted({ "NONE", "NONE", "NONE" })
      r = assert(rag.pipeline.window({ index = index, k = 3, compress = true, llm = llm })
        :answer(q))
      assert.equal(0, #r.contexts)
      assert.equal(3, #llm.calls)
      want = index:search(q, { k = 3, expand = { window = 2 } })
      assert.truthy(user_message(llm.calls[1]):find("Document:\n" .. want[1].text, 1, true))
    end)
  end)

  describe("multihop", function()
    it("answers the sub-questions in turn, carrying findings into the next search and "
      .. "question, and answers from all hops' contexts", function()
      local index, d = corpus()
      local rec = recording(index)
      local llm = support.scripted({ "1. " .. d[3].title .. "\n2. " .. d[10].title
        .. "\n3. " .. d[20].title, "Finding one [1].", "Finding two [2].", "Final [1] [4] [9]." })
      local p = rag.pipeline.multihop({ index = rec, llm = llm, k = 3, hops = 2 })
      local r = assert(p:answer("the big question"))
      -- at most `hops` sub-questions; the second searched alone and with the
      -- first finding, the two lists fused by RRF
      assert.same({ d[3].title, d[10].title, d[10].title .. " Finding one." }, rec.queries)
      assert.equal(20, rec.opts[2].k)
      assert.truthy(user_message(llm.calls[1]):find("the big question", 1, true))
      assert.truthy(llm.calls[1].messages[1].content:find("at most 2", 1, true))
      assert.truthy(user_message(llm.calls[2]):find("Question: " .. d[3].title, 1, true))
      -- the findings so far go into the instructions of the later calls
      assert.falsy(llm.calls[2].messages[1].content:find("Known so far", 1, true))
      assert.truthy(user_message(llm.calls[3]):find("Question: " .. d[10].title, 1, true))
      assert.truthy(llm.calls[3].messages[1].content:find("\n\nKnown so far (what earlier "
        .. "sub-questions found):\n- " .. d[3].title .. "\n  Finding one.", 1, true))
      assert.truthy(user_message(llm.calls[4]):find("Question: the big question", 1, true))
      assert.truthy(llm.calls[4].messages[1].content:find("\n\nKnown so far (what earlier "
        .. "sub-questions found):\n- " .. d[3].title .. "\n  Finding one.\n- " .. d[10].title
        .. "\n  Finding two.", 1, true))
      -- the contexts are both hops' hits, in order, without repeats
      local want, seen = {}, {}
      local second = rag.fuse.rrf({ rec.results[2], rec.results[3] }, { k = 60, limit = 3 })
      for _, list in ipairs({ rec.results[1], second }) do
        for _, h in ipairs(list) do
          if not seen[h.id] then
            seen[h.id] = true
            want[#want + 1] = h.id
          end
        end
      end
      assert.same(want, ids(r.contexts))
      assert.equal("Final [1] [4].", r.text)
      assert.equal(r.contexts[4].id, r.citations[4].id)
      assert.is_table(find(r.trace, "branch", "carry"))
      assert.equal(4, #llm.calls)
      -- a decomposition into the question itself is one search, one answer
      rec = recording(index)
      llm = support.scripted({ d[3].title, "A [1]." })
      r = assert(rag.pipeline.multihop({ index = rec, llm = llm, k = 3 }):answer(d[3].title))
      assert.same({ d[3].title }, rec.queries)
      assert.equal(2, #llm.calls)
      assert.is_table(find(r.trace, "branch", "one_hop"))
      -- a hop the contexts do not answer adds no finding
      rec = recording(index)
      llm = support.scripted({ "first part\nsecond part", rag.prompts.en.refusal, "B [1].",
        "C [1]." })
      r = assert(rag.pipeline.multihop({ index = rec, llm = llm, k = 2,
        retrieve = function(q) rec.queries[#rec.queries + 1] = q
          return index:search(d[3].title, { k = 2 }) end }):answer("q"))
      assert.same({ "first part", "second part" }, rec.queries)
      assert.is_table(find(r.trace, "branch", "no_finding"))
      assert.falsy(llm.calls[4].messages[1].content:find("first part", 1, true))
      -- decompose may be a function
      rec = recording(index)
      assert(rag.pipeline.multihop({ index = rec,
        llm = support.scripted({}, { forever = "X [1]." }),
        decompose = function() return { d[3].title, d[10].title } end }):answer("q"))
      assert.same({ d[3].title, d[10].title, d[10].title .. " X." }, rec.queries)
    end)
  end)

  describe("adaptive", function()
    it("takes each of its three paths as the LLM classifies", function()
      local index, d = corpus()
      -- none: the direct prompt, no search
      local rec = recording(index)
      local llm = support.scripted({ "none", "Paris." })
      local p = rag.pipeline.adaptive({ index = rec, llm = llm, classify = true })
      local r = assert(p:answer("What is the capital of France?"))
      assert.equal("none", r.path)
      assert.equal("Paris.", r.text)
      assert.equal(0, #rec.queries)
      assert.equal(0, #r.contexts)
      assert.is_false(r.grounded)
      assert.truthy(llm.calls[1].messages[1].content:find("Decide how a question", 1, true))
      assert.truthy(llm.calls[2].messages[1].content:find("Answer the question briefly", 1,
        true))
      assert.equal("the LLM classified it", find(r.trace, "branch", "none").why)
      -- single: one search, then the answer
      rec = recording(index)
      llm = support.scripted({ "Single.", "A [1]." })
      r = assert(rag.pipeline.adaptive({ index = rec, llm = llm, classify = true, k = 3 })
        :answer(d[3].title))
      assert.equal("single", r.path)
      assert.same({ d[3].title }, rec.queries)
      assert.same(ids(rec.results[1]), ids(r.contexts))
      assert.equal(2, #llm.calls)
      assert.is_table(find(r.trace, "branch", "single"))
      -- iterative: decompose, a hop each, the final answer
      rec = recording(index)
      llm = support.scripted({ "iterative", d[3].title .. "\n" .. d[10].title, "F1 [1].",
        "F2 [1].", "Both [1] [4]." })
      r = assert(rag.pipeline.adaptive({ index = rec, llm = llm, classify = true, k = 3 })
        :answer("compare the two"))
      assert.equal("iterative", r.path)
      assert.same({ d[3].title, d[10].title, d[10].title .. " F1." }, rec.queries)
      assert.equal(5, #llm.calls)
      assert.equal("Both [1] [4].", r.text)
      assert.is_table(find(r.trace, "branch", "iterative"))
      -- a reply that is no class: single
      llm = support.scripted({ "perhaps", "A [1]." })
      r = assert(rag.pipeline.adaptive({ index = index, llm = llm, classify = true })
        :answer(d[3].title))
      assert.equal("single", r.path)
    end)

    it("classifies offline by a heuristic, or by a function", function()
      local index, d = corpus()
      local cases = {
        { "Hello!", "none", "heuristic: a greeting" },
        { "what is 12 * 7?", "none", "heuristic: arithmetic" },
        { "Compare BC1 RNA with ID elements", "iterative", "heuristic: a comparison or "
          .. "sequence: 'compare'" },
        { "What is BC1 RNA? Where is it made?", "iterative", "heuristic: several questions" },
        { "BC1 RNA reverse transcription and the risk of hip fracture", "iterative",
          "heuristic: two parts joined by 'and'" },
        { d[3].title, "single", "heuristic: one thing to look up" },
      }
      for _, c in ipairs(cases) do
        local llm = support.scripted({}, { forever = "more [1]." })
        local r = assert(rag.pipeline.adaptive({ index = index, llm = llm }):answer(c[1]))
        assert.equal(c[2], r.path, c[1])
        assert.equal(c[3], find(r.trace, "branch", c[2]).why, c[1])
        assert.is_table(find(r.trace, "step", "classify"))
      end
      local r = assert(rag.pipeline.adaptive({ index = index, classify = function(q)
        return q == "x" and "none" or "single", "mine"
      end }):answer("x"))
      assert.equal("none", r.path)
      assert.equal("mine", find(r.trace, "branch", "none").why)
      assert.equal(rag.prompts.en.refusal, r.text) -- extractive knows nothing without context
      assert.has_error(function()
        rag.pipeline.adaptive({ index = index, classify = function() return "maybe" end })
          :answer("x")
      end, 'rag.pipeline.adaptive: classify returned maybe, not "none", "single" or "iterative"')
    end)
  end)

  describe("corrective", function()
    local function hit(id, text)
      return { id = id, doc_id = id, source = id .. ".md", text = text, start = 1, stop = #text }
    end
    local HITS = {
      hit("a", "Alpha is the first letter. Zebras run fast."),
      hit("b", "Beta comes after alpha."),
      hit("c", "Nothing to see here."),
      hit("d", "The letter alpha starts the alphabet. It is old."),
    }
    local function retrieve()
      return HITS
    end

    it("keeps and refines correct hits, keeps ambiguous ones, discards incorrect ones",
      function()
        local llm = support.scripted({ "0.9", "Grade: 0.5", "0.1", "0.7", "Alpha is first [1]. "
          .. "Old [3]." })
        local fell = false
        local p = rag.pipeline.corrective({ retrieve = retrieve, llm = llm, grade = true,
          fallback = function() fell = true return {} end })
        local r = assert(p:answer("which letter is alpha?"))
        assert.same({ "a", "b", "d" }, ids(r.contexts))
        -- a and d refined to their sentences that share a term; b as it was
        assert.equal("Alpha is the first letter.", r.contexts[1].text)
        assert.equal(1, r.contexts[1].start)
        assert.equal(26, r.contexts[1].stop)
        assert.equal(HITS[2].text, r.contexts[2].text)
        assert.equal("The letter alpha starts the alphabet.", r.contexts[3].text)
        assert.same({ 0.9, 0.5, 0.7 }, { r.contexts[1].grade, r.contexts[2].grade,
          r.contexts[3].grade })
        assert.is_false(fell)
        assert.is_table(find(r.trace, "branch", "correct"))
        assert.equal("2 correct (kept, refined), 1 ambiguous (kept), 1 incorrect (discarded); "
          .. "upper 0.7, lower 0.3", find(r.trace, "branch", "graded").why)
        assert.truthy(user_message(llm.calls[2]):find("Document:\nBeta comes after alpha.", 1,
          true))
        assert.is_true(r.grounded)
        assert.equal(5, #llm.calls)
      end)

    it("falls back when no hit is correct: with the ambiguous ones, or alone", function()
      local web = { hit("w1", "Alpha is a letter, says the web."), hit("a", "dup") }
      local asked
      local grades = { a = 0.5, b = 0.1, c = 0.1, d = 0.2 }
      local p = rag.pipeline.corrective({ retrieve = retrieve,
        llm = support.scripted({}, { forever = "Alpha [1]." }),
        grade = function(_, h) return grades[h.id] end,
        fallback = function(q) asked = q return web end })
      local r = assert(p:answer("which letter is alpha?"))
      assert.equal("which letter is alpha?", asked)
      assert.same({ "a", "w1" }, ids(r.contexts))
      assert.equal(HITS[1].text, r.contexts[1].text)
      assert.is_table(find(r.trace, "step", "fallback"))
      assert.matches("no hit is correct %(1 ambiguous%)", find(r.trace, "branch", "fallback").why)
      grades.a = 0
      r = assert(p:answer("which letter is alpha?"))
      assert.same({ "w1", "a" }, ids(r.contexts))
      assert.equal("dup", r.contexts[2].text)
      -- a fallback may be anything with :search
      local other = { search = function(_, q, o) return { hit("o" .. o.k, q) } end }
      r = assert(rag.pipeline.corrective({ retrieve = retrieve, k = 2, fallback = other,
        llm = support.scripted({}, { forever = "X [1]." }),
        grade = function() return 0 end }):answer("q"))
      assert.same({ "o2" }, ids(r.contexts))
      -- without a fallback, what is kept
      r = assert(rag.pipeline.corrective({ retrieve = retrieve,
        llm = support.scripted({}, { forever = "X [1]." }),
        grade = function() return 0.5 end }):answer("q"))
      assert.same({ "a", "b", "c", "d" }, ids(r.contexts))
      assert.is_table(find(r.trace, "branch", "no_fallback"))
    end)

    it("regenerates once under the strict prompt when the check fails", function()
      local llm = support.scripted({ "Alpha is first [1]. Made up claim.", "Alpha is first [1]." })
      local p = rag.pipeline.corrective({ retrieve = retrieve, llm = llm })
      local r = assert(p:answer("which letter is alpha?"))
      assert.equal(2, #llm.calls)
      assert.truthy(llm.calls[2].messages[1].content:find("strictly from the numbered", 1, true))
      assert.equal("Alpha is first [1].", r.text)
      assert.equal("Alpha is first [1]. Made up claim.", r.first_answer)
      assert.is_true(r.grounded)
      assert.equal("the check failed: cites no context: Made up claim.",
        find(r.trace, "branch", "regenerate").why)
      -- a strict answer that fails too: once only, not grounded
      llm = support.scripted({ "No cite.", "Still none.", "more" })
      r = assert(rag.pipeline.corrective({ retrieve = retrieve, llm = llm })
        :answer("which letter is alpha?"))
      assert.equal(2, #llm.calls)
      assert.is_false(r.grounded)
      assert.equal("Still none.", r.text)
      assert.is_table(find(r.trace, "branch", "ungrounded"))
      -- the LLM's check
      llm = support.scripted({ "Alpha [1].", "no: Alpha is not in it", "Alpha is first [1].",
        "YES" })
      r = assert(rag.pipeline.corrective({ retrieve = retrieve, llm = llm, check = true })
        :answer("which letter is alpha?"))
      assert.equal(4, #llm.calls)
      assert.truthy(user_message(llm.calls[2]):find("Answer:\nAlpha [1].", 1, true))
      assert.equal("the check failed: Alpha is not in it", find(r.trace, "branch",
        "regenerate").why)
      assert.is_true(r.grounded)
      -- a check function; the refusal is not checked
      local seen
      r = assert(rag.pipeline.corrective({ retrieve = retrieve,
        llm = support.scripted({ "Fine [2]." }),
        check = function(a, ctx) seen = { a, #ctx } return true end }):answer("alpha?"))
      assert.same({ "Fine [2].", #r.contexts }, seen)
      assert.is_true(r.grounded)
      llm = support.scripted({ rag.prompts.en.refusal })
      r = assert(rag.pipeline.corrective({ retrieve = retrieve, llm = llm }):answer("alpha?"))
      assert.equal(1, #llm.calls)
      assert.is_false(r.grounded)
      assert.is_table(find(r.trace, "branch", "refusal"))
    end)

    it("checks its options", function()
      assert.has_error(function()
        rag.pipeline.corrective({ retrieve = retrieve, lower = 0.8 })
      end, "rag.pipeline.corrective: 'lower' (0.8) must not be above 'upper' (0.7)")
      assert.has_error(function()
        rag.pipeline.corrective({ retrieve = retrieve, fallback = {} })
      end, "rag.pipeline.corrective: option 'fallback' must be a function or have a "
        .. ":search(query, opts) method")
    end)
  end)

  describe("router", function()
    it("routes each question to the route with the nearest examples, embedded once", function()
      local index, d = corpus()
      local recs = { bio = recording(index), stats = recording(index), other = recording(index) }
      local function via(name)
        return rag.pipeline.naive({ index = recs[name], llm = support.scripted({}, {
          forever = name .. " [1]." }) })
      end
      local embedded = {}
      local hashing = rag.embed.hashing({ dim = 256 })
      local counting = { embed = function(_, texts, o)
        embedded[#embedded + 1] = #texts
        return hashing:embed(texts, o)
      end }
      local p = rag.pipeline.router({ embedder = counting, threshold = 0.3,
        routes = {
          { name = "bio", examples = { d[3].title, d[4].title }, pipeline = via("bio") },
          { name = "stats", examples = { d[10].title }, pipeline = via("stats") },
        }, default = via("other") })
      local r = assert(p:answer(d[10].title))
      assert.equal("stats", r.route)
      assert.equal("stats [1].", r.text)
      assert.same({ d[10].title }, recs.stats.queries)
      assert.equal(0, #recs.bio.queries)
      local want = hashing:embed({ d[10].title, d[3].title, d[4].title })
      local function cos(a, b)
        local dot, na, nb = 0, 0, 0
        for i = 1, #a do
          dot, na, nb = dot + a[i] * b[i], na + a[i] ^ 2, nb + b[i] ^ 2
        end
        return dot / math.sqrt(na * nb)
      end
      assert.near(1, r.scores.stats, 1e-6)
      assert.near(math.max(cos(want[1], want[2]), cos(want[1], want[3])), r.scores.bio, 1e-6)
      local b = find(r.trace, "branch", "stats")
      assert.matches("^nearest examples %(bio 0%.%d+, stats 1%.000%)$", b.why)
      assert.same({ 3, 1 }, embedded)
      -- the second example of a route counts as much as the first
      r = assert(p:answer(d[4].title))
      assert.equal("bio", r.route)
      assert.same({ d[4].title }, recs.bio.queries)
      assert.same({ 3, 1, 1 }, embedded)
      -- near no route: the default
      r = assert(p:answer("zebra stripes at dawn"))
      assert.equal("default", r.route)
      assert.same({ "zebra stripes at dawn" }, recs.other.queries)
      assert.matches("< threshold 0%.3", find(r.trace, "branch", "default").why)
      -- no default: the first route
      p = rag.pipeline.router({ embedder = hashing, threshold = 0.99, routes = {
        { name = "bio", examples = { d[3].title }, pipeline = via("bio") },
        { name = "stats", examples = { d[10].title }, pipeline = via("stats") } } })
      r = assert(p:answer(d[9].title))
      assert.equal("bio", r.route)
      assert.matches("no default: the first route", find(r.trace, "branch", "bio").why)
      -- :retrieve goes through the route too
      local hits = assert(p:retrieve(d[10].title))
      assert.same(ids(index:search(d[10].title, { k = 5 })), ids(hits))
      -- a route may be any object with :answer and :retrieve
      local foreign = { answer = function(_, q) return { text = "foreign: " .. q,
        citations = {}, contexts = {}, grounded = false } end,
        retrieve = function() return {} end }
      p = rag.pipeline.router({ embedder = hashing, routes = {
        { name = "f", examples = { "anything" }, pipeline = foreign } } })
      r = assert(p:answer("q"))
      assert.equal("foreign: q", r.text)
    end)

    it("checks its routes", function()
      local naive = rag.pipeline.naive({ index = corpus() })
      assert.has_error(function()
        rag.pipeline.router({ routes = {} })
      end, "rag.pipeline.router: option 'routes' must be a non-empty list of "
        .. "{ name =, examples =, pipeline = }")
      assert.has_error(function()
        rag.pipeline.router({ routes = { { name = "a", examples = {}, pipeline = naive } } })
      end, "rag.pipeline.router: routes[1].examples must be a non-empty list of questions")
      assert.has_error(function()
        rag.pipeline.router({ routes = { { name = "a", examples = { "x" }, pipeline = {} } } })
      end, "rag.pipeline.router: routes[1].pipeline must be a pipeline (with :answer and "
        .. ":retrieve)")
      assert.has_error(function()
        rag.pipeline.router({ routes = { { name = "a", examples = { "x" }, pipeline = naive,
          extra = 1 } } })
      end, "rag.pipeline.router: routes[1] has an unknown field 'extra'")
    end)
  end)

  describe("limits", function()
    -- An LLM that always asks for more: every reply is "more more ...",
    -- as long as max_tokens allows, each call taking 10 ms on the clock.
    -- The words are the titles' (so that searches find something), six a
    -- line (so that decompose gives several sub-questions).
    local function greedy(clock)
      local words = {}
      for i = 1, 10 do
        for w in docs[i].title:gmatch("%S+") do
          words[#words + 1] = w
        end
      end
      return support.scripted({}, { clock = clock, latency = 0.01,
        forever = function(_, opts)
          local n = math.min(opts and opts.max_tokens or 40, 40)
          local out = {}
          for i = 1, n do
            out[#out + 1] = words[(i - 1) % #words + 1] .. (i % 6 == 0 and "\n" or " ")
          end
          return { text = table.concat(out) }
        end })
    end

    local function run(name, limits)
      local clock = support.clock()
      local p = make(name, { index = corpus(), llm = greedy(clock), clock = clock.now,
        limits = limits })
      return p:answer(docs[3].title)
    end

    for _, name in ipairs(RUNS) do
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
          assert.matches("^rag%.pipeline%." .. name:match("^[^/]+") .. ": ", msg)
          local stop = find(partial.trace, "stop")
          assert.is_table(stop, name .. " " .. limit)
          assert.equal(limit, stop.limit)
          assert.equal("budget", stop.code)
          local slack = limit == "deadline_ms" and 10 or 0
          assert.is_true(partial.usage[used] <= value + slack, name .. " " .. limit)
          assert.is_table(partial.contexts)
          assert.is_table(partial.citations)
        end
      end)
    end
  end)
end)
