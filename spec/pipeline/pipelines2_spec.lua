-- rag.pipeline.window, multihop, adaptive, corrective, router: (A) each
-- answers offline from SciFact with rag.llm.extractive, citing only
-- returned contexts; (B) with scripted LLMs, the branches each takes;
-- (C) each limit ends each pipeline with "budget" and a trace.
local rag = require("rag")
local helpers = require("spec.helpers")
local support = require("spec.support.llm")

local NAMES = { "window" }

-- The first 40 SciFact documents, chunked into sentences (at most 64
-- tokens a chunk), with hashing vectors.
local docs, idx
local function corpus()
  if idx then
    return idx, docs
  end
  local all = helpers.scifact()
  docs = {}
  for i = 1, math.min(40, #all) do
    local d = all[i]
    docs[i] = { id = d.id, title = d.title, text = d.text, source = "scifact/" .. d.id }
  end
  idx = rag.index.new({ chunker = "sentences", chunk = { size = 64 },
    embedder = rag.embed.hashing({ dim = 256 }) })
  assert(idx:add_many(docs))
  return idx, docs
end

-- An index that records each search's query, options and hits.
local function recording(inner)
  local rec = { queries = {}, opts = {}, results = {} }
  function rec.search(_, q, opts)
    local hits, msg, code = inner:search(q, opts)
    rec.queries[#rec.queries + 1] = q
    rec.opts[#rec.opts + 1] = opts
    rec.results[#rec.results + 1] = hits
    return hits, msg, code
  end
  return rec
end

local function ids(hits)
  local out = {}
  for i, h in ipairs(hits) do
    out[i] = tostring(h.id)
  end
  return out
end

local function find(trace, kind, name)
  for _, e in ipairs(trace) do
    if e.kind == kind and (name == nil or e.name == name) then
      return e
    end
  end
  return nil
end

local function user_message(call)
  local m = call.messages
  return m[#m].content
end

-- The options each pipeline needs besides index and llm.
local function extra(name)
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
  return rag.pipeline[name](opts)
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
    for _, name in ipairs(NAMES) do
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

  describe("limits", function()
    -- An LLM that always asks for more: every reply is "more more ...",
    -- as long as max_tokens allows, each call taking 10 ms on the clock.
    local function greedy(clock)
      return support.scripted({}, { clock = clock, latency = 0.01,
        forever = function(_, opts)
          local n = math.min(opts and opts.max_tokens or 40, 40)
          return { text = string.rep("more ", n) }
        end })
    end

    local function run(name, limits)
      local clock = support.clock()
      local p = make(name, { index = corpus(), llm = greedy(clock), clock = clock.now,
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
          local slack = limit == "deadline_ms" and 10 or 0
          assert.is_true(partial.usage[used] <= value + slack, name .. " " .. limit)
          assert.is_table(partial.contexts)
          assert.is_table(partial.citations)
        end
      end)
    end
  end)
end)
