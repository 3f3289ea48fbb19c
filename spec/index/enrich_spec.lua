-- rag.index's enrichment (issue 29): keywords, summaries, hypothetical
-- questions and titles, written by a scripted LLM, offline defaults or
-- functions; cached, limited, resumable, saved, searched and shown in hits.
local rag = require("rag")
local support = require("spec.support.llm")

local json = rag.json

-- Splits a text at blank lines: one chunk per paragraph (exact spans).
local paragraphs = require("spec.helpers").paragraphs

-- What the scripted LLM writes, by the marker word of a passage.
local SCRIPT = {
  alpha = { keywords = { "xylophonic", "copper gizmo" }, summary = "Quuxly metallurgy overview.",
    questions = { "What metal is the gizmo made of?", "Who forged the gizmo?" },
    title = "The Copper Gizmo" },
  beta = { keywords = { "feline", "naps" }, summary = "Zorbly sleeping habits of cats.",
    questions = { "How long do cats sleep?" }, title = "Cat Sleep" },
  gamma = { keywords = { "ocean", "tides" }, summary = "Blorp lunar forces.",
    questions = { "What causes the tides?" }, title = "Tides" },
}

-- A scripted LLM that answers the enrichment prompts from SCRIPT; `asked`
-- counts the prompts it was sent (by step and marker).
local function scripted()
  local llm
  llm = support.scripted({}, { forever = function(messages)
    local system, user = messages[1].content, messages[#messages].content
    local marker = user:match("(%l+)%-marker") or "none"
    local v = SCRIPT[marker] or { keywords = {}, summary = "", questions = {}, title = "" }
    local step = system:find("search keywords") and "keywords"
      or system:find("summarise") and "summary"
      or system:find("questions") and "questions" or system:find("title") and "title"
    llm.asked[#llm.asked + 1] = step .. ":" .. user
    local out = v[step]
    if type(out) == "table" then
      out = json.encode(out)
    end
    return { text = out, usage = { prompt_tokens = 10, completion_tokens = 5 } }
  end })
  llm.asked = {}
  return llm
end

local DOCS = {
  { id = "a", title = "Metals", text = "The alpha-marker gizmo is made of copper.\n\nIt was forged "
    .. "in alpha-marker 1901 by Ada." },
  { id = "b", text = "The beta-marker cats sleep sixteen hours a day." },
  { id = "c", title = "Sea", text = "The gamma-marker tides follow the moon." },
}

local function copy(docs)
  local out = {}
  for i, d in ipairs(docs) do
    out[i] = { id = d.id, title = d.title, text = d.text }
  end
  return out
end

local ALL = { keywords = true, summary = true, questions = true, title = true }

local function new_index(llm, extra)
  local o = { chunker = paragraphs, embedder = rag.embed.hashing({ dim = 64 }), enrich = ALL,
    llm = llm }
  for k, v in pairs(extra or {}) do
    o[k] = v
  end
  return rag.index.new(o)
end

local function by_id(hits)
  local t = {}
  for _, h in ipairs(hits) do
    t[h.id] = h
  end
  return t
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  return d
end

describe("rag.index enrichment", function()
  it("stores every field the LLM wrote, shows it in hits, saves and reopens it", function()
    local llm = scripted()
    local idx = new_index(llm)
    -- 4 chunks x 3 steps, and a title for "b", the one document without one
    assert.same({ added = 3, updated = 0, unchanged = 0, removed = 0, llm_calls = 13,
      tokens = 195 }, idx:add_many(copy(DOCS)))
    assert.equal(13, #llm.calls)
    local function check(ix)
      local hits = by_id(ix:search("gizmo copper", { mode = "bm25", k = 10 }))
      local h = hits["a#1"]
      assert.same({ "xylophonic", "copper gizmo" }, h.enrich.keywords)
      assert.equal("Quuxly metallurgy overview.", h.enrich.summary)
      assert.same({ "What metal is the gizmo made of?", "Who forged the gizmo?" },
        h.enrich.questions)
      assert.is_nil(h.enrich.title) -- "a" has its own title
      local b = ix:search("zorbly", { mode = "bm25" })[1]
      assert.equal("b#1", b.id)
      assert.equal("Cat Sleep", b.enrich.title)
      assert.same({ summary = 1 }, b.ranks) -- found by its summary alone
      local x = ix:search("xylophonic", { mode = "bm25" })
      assert.equal(2, #x) -- both chunks of "a" have alpha's keywords
      assert.same({ keywords = 1 }, x[1].ranks)
      local q = ix:search("How long do cats sleep?", { mode = "vector", k = 1 })[1]
      assert.equal("b#1", q.id)
      assert.equal(1, q.ranks.questions)
      local st = ix:stats().enrich
      assert.same({ keywords = "llm", summary = "llm", questions = "llm", title = "llm" }, st.steps)
      assert.equal(4, st.chunks)
      assert.equal(4, st.keywords)
      assert.equal(4, st.summary)
      assert.equal(6, st.questions)
      assert.equal(1, st.titles)
    end
    check(idx)
    local dir = tmpdir()
    assert(idx:save(dir))
    local ro = assert(rag.index.open(dir, { readonly = true }))
    check(ro)
    ro:close()
    -- opened with the LLM, an unchanged corpus costs no call
    local llm2 = scripted()
    local again = assert(rag.index.open(dir, { llm = llm2, chunker = paragraphs }))
    assert.same({ added = 0, updated = 0, unchanged = 3, removed = 0, llm_calls = 0, tokens = 0 },
      again:add_many(copy(DOCS)))
    assert.equal(0, #llm2.calls)
    again:close()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("writes search_json for enriched hits: their field ranks, nulls and highlights", function()
    local idx = new_index(scripted())
    idx:add_many(copy(DOCS))
    for _, q in ipairs({ "zorbly", "gizmo copper", "xylophonic cats" }) do
      local hits = idx:search(q, { mode = "bm25", k = 10 })
      assert.is_true(#hits > 0, q)
      local got = json.decode(idx:search_json(q, { mode = "bm25", k = 10, highlight = true }))
      assert.equal(#hits, #got, q)
      for i, h in ipairs(hits) do
        local g = got[i]
        assert.equal(h.id, g.id)
        assert.equal(h.doc_id, g.doc_id)
        assert.equal(h.score, g.score)
        assert.equal(h.text, g.text)
        assert.equal(h.start, g.start)
        assert.equal(h.stop, g.stop)
        assert.equal(h.title or json.null, g.title)
        assert.equal(json.null, g.source)
        assert.equal(h.ranks.bm25 or json.null, g.ranks.bm25)
        assert.equal(json.null, g.ranks.vector)
        assert.equal(h.ranks.keywords, g.ranks.keywords)
        assert.equal(h.ranks.summary, g.ranks.summary)
        assert.same(rag.text.highlights(h.text, q), g.highlights)
      end
    end
  end)

  it("reports progress after every LLM call, not only after each batch", function()
    local idx = new_index(scripted())
    local seen = {}
    assert(idx:add_many(copy(DOCS), { progress = function(done, total, c)
      seen[#seen + 1] = { done, total, c.llm_calls, c.tokens }
    end }))
    -- one batch of 3 documents: a report per call (13), then the batch's
    assert.equal(14, #seen)
    assert.same({ 0, 3, 1, 15 }, seen[1]) -- a's first chunk's keywords
    assert.same({ 1, 3, 7, 105 }, seen[7]) -- a done (6 calls), b's title
    assert.same({ 3, 3, 13, 195 }, seen[14])
    for i = 2, 13 do
      assert.equal(seen[i - 1][3] + 1, seen[i][3])
    end
  end)

  it("asks again only for the chunks whose text changed", function()
    local llm = scripted()
    local idx = new_index(llm)
    assert(idx:add_many(copy(DOCS)))
    local before = #llm.calls
    assert.equal("unchanged", idx:add(copy(DOCS)[1]))
    assert.equal(before, #llm.calls)
    -- the second paragraph of "a" changes, the first does not
    local a = copy(DOCS)[1]
    a.text = a.text:gsub("1901", "1902")
    assert.equal("updated", idx:add(a))
    assert.equal(before + 3, #llm.calls) -- keywords, summary, questions of a#2
    for i = before + 1, #llm.calls do
      assert.truthy(llm.asked[i]:find("1902", 1, true))
    end
    -- the same text under another document id costs nothing either
    local twin = { id = "z", title = "Metals", text = a.text }
    assert.equal("added", idx:add(twin))
    assert.equal(before + 3, #llm.calls)
  end)

  it("stops at exactly the LLM-call limit and resumes without asking anything twice", function()
    for _, cut in ipairs({ 1, 5, 12 }) do
      local llm = scripted()
      local idx = new_index(llm)
      local counts, msg, code = idx:add_many(copy(DOCS), { limits = { llm_calls = cut } })
      assert.is_nil(counts)
      assert.equal("budget", code)
      assert.matches("llm call limit reached", msg)
      assert.equal(cut, #llm.calls)
      assert.equal(0, idx:count()) -- the batch is not put; what the calls wrote is kept
      -- the next run, in another process: saved, opened, run again
      local dir = tmpdir()
      assert(idx:save(dir))
      local llm2 = scripted()
      local again = assert(rag.index.open(dir, { llm = llm2, chunker = paragraphs }))
      local done = assert(again:add_many(copy(DOCS)))
      assert.equal(3, done.added)
      assert.equal(13 - cut, #llm2.calls)
      local seen = {}
      for _, p in ipairs(llm.asked) do
        seen[p] = true
      end
      for _, p in ipairs(llm2.asked) do
        assert.is_nil(seen[p], "asked twice: " .. p)
        seen[p] = true
      end
      local n = 0
      for _ in pairs(seen) do
        n = n + 1
      end
      assert.equal(13, n)
      assert.equal("Cat Sleep", again:search("zorbly", { mode = "bm25" })[1].enrich.title)
      again:close()
      os.execute("rm -rf '" .. dir .. "'")
    end
  end)

  it("needs the LLM and the functions again to add to a reopened index, not to search it",
    function()
    local idx = new_index(scripted(), { enrich = { keywords = true,
      summary = function(chunk) return "sum " .. chunk.doc_id end } })
    assert(idx:add_many(copy(DOCS)))
    local dir = tmpdir()
    assert(idx:save(dir))
    local again = assert(rag.index.open(dir, { chunker = paragraphs }))
    assert.equal("b#1", again:search("sum b", { mode = "bm25" })[1].id)
    local changed = copy(DOCS)[2]
    changed.text = changed.text .. " More."
    assert.has_error(function() again:add(changed) end,
      "rag.index.add: enrichment step 'keywords' is written by an LLM: pass it as "
      .. "rag.index.open(dir, { llm = chat })")
    again:close()
    again = assert(rag.index.open(dir, { chunker = paragraphs, llm = scripted() }))
    assert.has_error(function() again:add(changed) end,
      "rag.index.add: enrichment step 'summary' is a function: pass it again as "
      .. "rag.index.open(dir, { enrich = { summary = fn } })")
    again:close()
    again = assert(rag.index.open(dir, { chunker = paragraphs, llm = scripted(),
      enrich = { summary = function(chunk) return "new " .. chunk.doc_id end } }))
    assert.equal("updated", again:add(changed))
    assert.equal("new b", again:search("new", { mode = "bm25" })[1].enrich.summary)
    again:close()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("keeps what an LLM wrote valid UTF-8, whatever list style it used", function()
    local replies = { keywords = "中国，和平、会议; “统一”", summary = "“一个摘要”",
      questions = "• 什么是数据？\n2. “引号里的问题一”\n- 第三个？" }
    local llm = support.scripted({}, { forever = function(messages)
      local system = messages[1].content
      local step = system:find("关键词") and "keywords" or system:find("概括") and "summary"
        or "questions"
      return { text = replies[step] }
    end })
    local idx = rag.index.new({ embedder = rag.embed.hashing({ dim = 32 }), llm = llm,
      enrich = { keywords = true, summary = true, questions = true, lang = "zh" } })
    assert(idx:add({ id = "z", text = "数据和会议的记录。" }))
    local h = idx:search("会议", { mode = "bm25" })[1]
    assert.same({ "中国", "和平", "会议", "统一" }, h.enrich.keywords)
    assert.equal("一个摘要", h.enrich.summary)
    assert.same({ "什么是数据？", "引号里的问题一", "第三个？" }, h.enrich.questions)
    assert.equal(1, h.ranks.keywords)
    -- a hit's lists are copies: changing them changes nothing stored
    h.enrich.keywords[1] = "changed"
    assert.equal("中国", idx:search("会议", { mode = "bm25" })[1].enrich.keywords[1])
    local dir = tmpdir()
    assert(idx:save(dir))
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("enriches the documents a failing commit put before it raised", function()
    local e = rag.embed.hashing({ dim = 16 })
    local zero = { embed = function(_, texts, opts)
      local out = assert(e:embed(texts, opts))
      for i, t in ipairs(texts) do
        if t:find("beta-marker", 1, true) then
          out[i] = string.rep("\0", 64) -- refused under cosine: commit raises at b
        end
      end
      return out
    end, dim = function() return 16 end }
    local idx = new_index(scripted(), { embedder = zero })
    assert.has_error(function() idx:add_many(copy(DOCS)) end,
      "rag.index.add: zero vector under cosine")
    assert.equal(1, idx:count()) -- a went in before b was refused
    assert.equal(2, idx:stats().enrich.chunks)
    assert.equal("a#1", idx:search("xylophonic", { mode = "bm25" })[1].id)
  end)

  it("keeps every paid-for answer across sessions stopped by limits", function()
    local docs = {}
    for i = 1, 4 do
      docs[i] = { id = "d" .. i, text = "Document number " .. i .. " about gizmos." }
    end
    local dir = tmpdir()
    local asked = {}
    local function session(limit)
      local llm = support.scripted({}, { forever = function(messages)
        asked[#asked + 1] = messages[#messages].content
        return { text = '["k"]' }
      end })
      local idx = rag.index.open(dir, { llm = llm }) or rag.index.new({ embedder = false,
        llm = llm, enrich = { keywords = "llm" } })
      local counts, _, code = idx:add_many(docs, { limits = limit and { llm_calls = limit } })
      assert(idx:save(dir))
      idx:close()
      return counts, code
    end
    assert.same({ nil, "budget" }, { session(2) })
    assert.same({ nil, "budget" }, { session(1) }) -- d1, d2 from the cache; d3 paid
    local counts = session()                       -- d1..d3 from the cache; d4 paid
    assert.equal(4, counts.added)
    assert.equal(4, #asked)
    local seen = {}
    for _, p in ipairs(asked) do
      assert.is_nil(seen[p])
      seen[p] = true
    end
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("asks with the index's own prompts after a reopen", function()
    local prompts = { enrich_summary = { system = "CUSTOM: summarise it", user = "{text}" } }
    local llm = scripted()
    local idx = new_index(llm, { enrich = { summary = "llm", prompts = prompts } })
    assert(idx:add_many(copy(DOCS)))
    assert.equal("CUSTOM: summarise it", llm.calls[1].messages[1].content)
    local dir = tmpdir()
    assert(idx:save(dir))
    local llm2 = scripted()
    local again = assert(rag.index.open(dir, { llm = llm2, chunker = paragraphs }))
    local b = copy(DOCS)[2]
    b.text = b.text .. " Really."
    assert.equal("updated", again:add(b))
    assert.equal("CUSTOM: summarise it", llm2.calls[1].messages[1].content)
    again:close()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("gives long sections their own nodes on the summary level", function()
    local function section(name)
      local body = (name:lower() .. " text here about " .. name .. ". "):rep(120)
      return "# " .. name .. "\n\n" .. body
    end
    local text = "Intro of the handbook.\n\n" .. section("Alpha") .. "\n\n" .. section("Beta")
      .. "\n\n" .. section("Gamma")
    local seen = {}
    local idx = rag.index.new({ embedder = false, chunker = "hierarchy",
      chunk = { sizes = { 512, 128 } },
      enrich = { sections = 300, doc_summary = function(chunk, doc)
        seen[#seen + 1] = chunk and chunk.id or doc.id
        return "About " .. (chunk and chunk.text:match("^(%a+)") or "the handbook " .. doc.id)
      end } })
    assert.equal("added", idx:add({ id = "hb", title = "Handbook", text = text }))
    -- the document, then each section of at least 300 tokens that is not the whole text
    assert.equal(4, #seen)
    assert.equal("hb", seen[1])
    local hits = idx:search("about beta", { level = "summary", k = 5, mode = "bm25" })
    local h = hits[1]
    assert.equal("summary", h.level)
    assert.equal("section", h.node)
    assert.equal("hb", h.doc_id)
    assert.equal("About beta", h.text)
    assert.equal(h.doc_id .. "#" .. seen[3]:match("#(%d+)$") .. "#summary", h.id)
    assert.equal("beta text", text:sub(h.start, h.start + 8))
    assert.equal("document", idx:search("handbook", { level = "summary" })[1].node)
    assert.equal(3, idx:stats().enrich.sections)
    assert.equal(1, idx:stats().enrich.doc_summaries)
    -- a doc_id filter covers the document's sections; saved, reopened, removed
    local dir = tmpdir()
    assert(idx:save(dir))
    local again = assert(rag.index.open(dir, { chunker = "hierarchy" }))
    local g = again:search("about gamma", { level = "summary", k = 1,
      filter = { doc_id = "hb" } })[1]
    assert.equal("About gamma", g.text)
    assert.equal("gamma text", text:sub(g.start, g.start + 9))
    assert.same({}, again:search("about gamma", { level = "summary", filter = { doc_id = "x" } }))
    assert.is_true(again:remove("hb"))
    assert.same({}, again:search("about", { level = "summary" }))
    again:close()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("clusters the documents into higher levels, summarised in turn", function()
    local docs = {
      { id = "cat1", text = "Cats purr and sleep all day long in the sun." },
      { id = "cat2", text = "A cat sleeps sixteen hours and purrs when happy." },
      { id = "cat3", text = "Kittens purr, sleep and play with yarn." },
      { id = "ship1", text = "Ships sail across the ocean with cargo containers." },
      { id = "ship2", text = "A cargo ship crosses the ocean in three weeks." },
      { id = "ship3", text = "Sailing ships carried cargo over the ocean." },
    }
    local asked = {}
    local function summarise(chunk, doc)
      if chunk and chunk.members then -- a cluster: its members' summaries
        asked[#asked + 1] = table.concat(chunk.members, ",")
        return "Group of " .. table.concat(chunk.members, " and ")
      end
      return doc.text
    end
    local idx = rag.index.new({ embedder = false,
      enrich = { doc_summary = summarise, levels = 2, cluster_size = 3 } })
    assert(idx:add_many(docs))
    -- six documents in groups of about three: two clusters, by topic; one
    -- level up there are only two nodes, fewer than a group: no second level
    assert.same({ "cat1,cat2,cat3", "ship1,ship2,ship3" }, asked)
    local hits = idx:search("group ship2", { level = "summary", k = 1 })
    assert.equal("cluster", hits[1].node)
    assert.equal("cluster:1:2#summary", hits[1].id)
    assert.is_nil(hits[1].doc_id)
    assert.same({ "ship1", "ship2", "ship3" }, hits[1].members)
    assert.equal(2, idx:stats().enrich.clusters)
    assert.equal(6, idx:stats().enrich.doc_summaries)
    -- nothing changed: no clustering; a change clusters again, the cache
    -- answers for the groups whose members' summaries are the same
    assert(idx:add_many(docs))
    assert.equal(2, #asked)
    local dir = tmpdir()
    assert(idx:save(dir))
    local again = assert(rag.index.open(dir, { enrich = { doc_summary = summarise } }))
    assert.equal("cluster", again:search("group ship2", { level = "summary", k = 1 })[1].node)
    assert.is_true(again:remove("cat1"))
    assert.equal("added", again:add({ id = "cat4", text = "Cats purr on warm laps." }))
    assert.equal(3, #asked)
    assert.equal("cat2,cat3,cat4", asked[3])
    -- the summary pipeline reads a cluster's documents
    local p = rag.pipeline.summary({ index = again, docs = 1, k = 3 })
    local found = assert(p:retrieve("group ship1"))
    for _, h in ipairs(found) do
      assert.matches("^ship", h.doc_id)
    end
    again:close()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("forgets a removed document's fields", function()
    local idx = new_index(scripted())
    assert(idx:add_many(copy(DOCS)))
    assert.equal(1, #idx:search("zorbly", { mode = "bm25" }))
    assert.is_true(idx:remove("b"))
    assert.same({}, idx:search("zorbly", { mode = "bm25" }))
    assert.same({}, idx:search("feline", { mode = "bm25" }))
    assert.equal(3, idx:stats().enrich.chunks)
    -- and sync's removals too
    assert(idx:sync({ copy(DOCS)[3] }))
    assert.same({}, idx:search("xylophonic", { mode = "bm25" }))
    assert.equal(1, idx:stats().enrich.chunks)
  end)

  it("applies the filter inside the field lists", function()
    local docs = copy(DOCS)
    docs[1].meta = { lang = "en" }
    docs[2].meta = { lang = "fr" }
    docs[3].meta = { lang = "en" }
    local idx = new_index(scripted())
    assert(idx:add_many(docs))
    assert.same({}, idx:search("zorbly feline", { mode = "bm25", filter = { lang = "en" } }))
    assert.equal("b#1", idx:search("zorbly", { mode = "bm25", filter = { lang = "fr" } })[1].id)
    local v = idx:search("How long do cats sleep?", { mode = "vector", k = 10,
      filter = { doc_id = { "c" } } })
    assert.equal(1, #v)
    assert.equal("c#1", v[1].id)
  end)

  it("scores the lexical list as the text's BM25 plus each field's, times its weight", function()
    local kw = { a = "copper metal forge", b = "cat nap sleep", c = "ocean moon metal" }
    local idx = rag.index.new({ embedder = false, chunker = paragraphs,
      enrich = { keywords = function(chunk) return { kw[chunk.doc_id] } end,
        summary = function(chunk) return "summary of " .. chunk.text end,
        weights = { keywords = 0.4, summary = 0.25 } } })
    assert(idx:add_many(copy(DOCS)))
    -- the reference: three separate rag.bm25 indexes over the same texts
    local text, kwi, sumi = rag.bm25.new(), rag.bm25.new(), rag.bm25.new()
    for _, d in ipairs(DOCS) do
      for n, c in ipairs(paragraphs(d.text)) do
        local name = d.id .. "#" .. n
        text:add(name, (d.title and d.title .. "\n" or "") .. c.text)
        kwi:add(name, kw[d.id])
        sumi:add(name, "summary of " .. c.text)
      end
    end
    for _, q in ipairs({ "metal gizmo", "sleep moon", "summary of the tides", "copper" }) do
      local want = {}
      for _, part in ipairs({ { text, 1 }, { kwi, 0.4 }, { sumi, 0.25 } }) do
        for _, h in ipairs(part[1]:search(q, 50)) do
          want[h.id] = (want[h.id] or 0) + part[2] * h.score
        end
      end
      local hits = idx:search(q, { mode = "bm25", k = 10 })
      local n = 0
      for _ in pairs(want) do
        n = n + 1
      end
      assert.equal(n, #hits, q)
      for i, h in ipairs(hits) do
        assert.near(want[h.id], h.score, 1e-12, q .. " " .. h.id)
        if i > 1 then
          local p = hits[i - 1]
          assert.is_true(p.score > h.score or (p.score == h.score and p.id < h.id))
        end
      end
      -- weights 0: the text's BM25 alone
      local plain = idx:search(q, { mode = "bm25", k = 10, fields = { keywords = 0, summary = 0 } })
      local ref = text:search(q, 10)
      assert.equal(#ref, #plain)
      for i, h in ipairs(ref) do
        assert.equal(h.id, plain[i].id)
        assert.near(h.score, plain[i].score, 1e-12)
      end
    end
  end)

  it("scores a chunk's vector by the better of its own and its best question", function()
    local e = rag.embed.hashing({ dim = 64 })
    local qs = { a = { "who made the gizmo", "where is copper mined" }, b = { "why cats nap" },
      c = { "what moves the sea", "how high are tides", "when is low tide" } }
    local idx = rag.index.new({ embedder = e, chunker = paragraphs,
      enrich = { questions = function(chunk) return qs[chunk.doc_id] end, n_questions = 3 } })
    assert(idx:add_many(copy(DOCS)))
    local cos = require("spec.helpers").cosine
    for _, q in ipairs({ "who made the gizmo?", "tides of the sea", "cats" }) do
      local qv = e:embed({ q })[1]
      local want = {}
      for _, d in ipairs(DOCS) do
        for n, c in ipairs(paragraphs(d.text)) do
          local best = cos(qv, e:embed({ (d.title and d.title .. "\n" or "") .. c.text })[1])
          for _, v in ipairs(e:embed(qs[d.id])) do
            best = math.max(best, cos(qv, v))
          end
          want[d.id .. "#" .. n] = best
        end
      end
      local hits = idx:search(q, { mode = "vector", k = 10 })
      assert.equal(4, #hits)
      for _, h in ipairs(hits) do
        assert.near(want[h.id], h.score, 1e-6, q .. " " .. h.id)
      end
    end
  end)

  it("has offline defaults: keywords by BM25 weight, the lead sentence as summary", function()
    local idx = rag.index.new({ embedder = false, chunker = paragraphs,
      enrich = { keywords = "offline", summary = "offline", title = "offline", n_keywords = 2 } })
    assert(idx:add_many({
      { id = "1", text = "Zebras graze. Zebras run and zebras sleep. Lions sleep." },
      { id = "2", text = "Lions sleep all day. Lions hunt." },
      { id = "3", text = "Lions roar at night." },
    }))
    -- doc 1: zebra (tf 3, df 1) outweighs graze and run (tf 1, df 1), then
    -- graze before run (equal weight, bytewise); sleep and lion are common
    local h = idx:search("zebras", { mode = "bm25" })[1]
    assert.same({ "zebras", "graze" }, h.enrich.keywords)
    assert.equal("Zebras graze.", h.enrich.summary)
    assert.equal("Zebras graze.", h.enrich.title)
    local l = idx:search("roar", { mode = "bm25" })[1]
    assert.same({ "night", "roar" }, l.enrich.keywords) -- equal weights: bytewise
    assert.equal("Lions roar at night.", l.enrich.summary)
  end)

  it("refuses bad settings with a clear message", function()
    local e = rag.embed.hashing({ dim = 8 })
    assert.has_error(function() rag.index.new({ embedder = e, enrich = { "colour" } }) end,
      "rag.index.new: unknown enrichment step 'colour'")
    assert.has_error(function() rag.index.new({ embedder = e, enrich = { questions = true } }) end,
      "rag.index.new: enrichment step 'questions' needs option 'llm' or a function")
    assert.has_error(function() rag.index.new({ embedder = e, enrich = { summary = "llm" } }) end,
      "rag.index.new: enrichment step 'summary' is written by an LLM: pass option 'llm'")
    assert.has_error(function()
      rag.index.new({ embedder = e, enrich = { keywords = "maybe" } })
    end,
      "rag.index.new: enrichment step 'keywords' cannot be 'maybe'")
    assert.has_error(function() rag.index.new({ embedder = e, enrich = 3 }) end,
      "rag.index.new: 'enrich' must be a boolean or table, got number")
    assert.has_error(function() rag.index.new({ embedder = e, llm = {}, enrich = true }) end,
      "rag.index.new: option 'llm' must have a :chat(messages, opts) method")
    local plain = rag.index.new({ embedder = e })
    assert.has_error(function() plain:add_many({}, { limits = { llm_calls = 1 } }) end,
      "rag.index.add_many: options 'limits' and 'run' bound an enriched index's LLM calls; "
      .. "this index has no enrichment")
    assert.has_error(function() plain:search("x", { fields = { keywords = 1 } }) end,
      "rag.index.search: option 'fields' weighs an enriched index's fields; this index has no "
      .. "enrichment")
    local idx = rag.index.new({ embedder = e, enrich = true })
    assert.has_error(function() idx:search("x", { fields = { keyword = 1 } }) end,
      "rag.index.search: fields: unknown option 'keyword'")
    assert.has_error(function() idx:search("x", { fields = 2 }) end,
      "rag.index.search: option 'fields' must be a table, got number")
  end)
end)

describe("rag.index enrichment allocation failures", function()
  local helpers = require("spec.helpers")
  if not rag.core._fail_alloc then
    it("need a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  it("searches over the fields and questions, and offline keywords, raise and recover at "
    .. "every fault point", function()
    local idx = rag.index.new({ embedder = rag.embed.hashing({ dim = 16 }), chunker = paragraphs,
      enrich = { keywords = "offline", summary = "offline",
        questions = function(chunk)
          return { "what about " .. chunk.doc_id, "why " .. chunk.id }
        end } })
    assert(idx:add_many(copy(DOCS)))
    local dir = tmpdir()
    assert(idx:save(dir))
    -- every allocation of a search on a fresh copy (whose scratch is empty)
    -- fails in turn: the search raises, or succeeds (the analyzer's cache
    -- may go without), and gives the same hits afterwards either way
    local fail_alloc = rag.core._fail_alloc
    local e = rag.embed.hashing({ dim = 16 })
    local q = "gizmo cats sea what about"
    local qv = e:embed({ q }, { packed = true })[1]
    for _, o in ipairs({ { mode = "hybrid", k = 3 }, { mode = "bm25", k = 2, group = "doc" },
      { mode = "vector", k = 2, filter = { doc_id = { "a", "c" } } } }) do
      local want = idx:search(q, o)
      local function fresh_search(n)
        local fresh = assert(rag.index.open(dir, { chunker = paragraphs }))
        local parts = fresh.enrich:parts(o)
        fail_alloc(n)
        local ok, err = pcall(fresh.c.search, fresh.c, q, o, "bm25", qv, parts)
        local left = fail_alloc(0)
        if not ok then
          assert.matches("not enough memory", err)
        end
        assert.same(want, fresh.enrich:decorate(fresh.c:search(q, o, "bm25", qv, parts)))
        fresh:close()
        return left, ok
      end
      local left = fresh_search(1000000)
      local total, raised = 1000000 - left, 0
      assert.is_true(total > 10, total)
      for n = 1, total do
        local _, ok = fresh_search(n)
        raised = raised + (ok and 0 or 1)
      end
      assert.is_true(raised > 5, raised)
    end
    local want = idx.c:keywords("a#1", 5)
    assert.is_true(#want > 0)
    local fresh = assert(rag.index.open(dir, { chunker = paragraphs }))
    assert.is_true(helpers.oom_walk(function()
      fresh.c:keywords("a#1", 5)
    end) > 0) -- the first allocation has no fallback
    assert.same(want, fresh.c:keywords("a#1", 5))
    fresh:close()
    assert.same(want, idx.c:keywords("a#1", 5))
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
