-- rag.bm25: scores against hand-computed values for every variant, the
-- search contract (ties, k, filters, explain), incremental changes against
-- an index built from scratch, persistence (round trips, every truncation,
-- bit flips, newer versions, a save killed midway) and out-of-memory paths.
-- RAG_FULL=1 (make fuzz) runs every truncation and 10,000 bit flips of a
-- larger file instead of a sample.
local rag = require("rag")
local helpers = require("spec.helpers")

local bm25 = rag.bm25
local FULL = os.getenv("RAG_FULL") == "1"
local rng, tmpname, spit = helpers.rng, helpers.tmpname, helpers.write

local WORDS = {}
do
  local r = rng(7)
  local letters = "abcdefghijklmnoprstuvwy"
  for i = 1, 400 do
    local w = {}
    for j = 1, 3 + r(6) do
      local k = r(#letters)
      w[j] = letters:sub(k, k)
    end
    WORDS[i] = table.concat(w) .. (i % 7 == 0 and "ing" or "")
  end
end

-- A document of n words, Zipf-like: low word numbers are common.
local function gen_text(r, n)
  local t = {}
  for i = 1, n do
    local a = r(#WORDS)
    t[i] = WORDS[r(a)]
  end
  if r(10) == 1 then
    t[#t + 1] = "\229\144\145\233\135\143\230\163\128\231\180\162" -- CJK: 向量检索
  end
  return table.concat(t, " ")
end

local function corpus(seed, n, len)
  local r, docs = rng(seed), {}
  for i = 1, n do
    docs[i] = { id = "doc" .. i, text = gen_text(r, len or (5 + r(60))) }
  end
  return docs
end

local function queries(seed, n)
  local r, qs = rng(seed), {}
  for i = 1, n do
    qs[i] = gen_text(r, 1 + r(6))
  end
  return qs
end

local function build(docs, opts)
  local b = bm25.new(opts)
  for _, d in ipairs(docs) do
    assert(b:add(d.id, d.text))
  end
  return b
end

local slurp = helpers.read

local PLAIN = { stem = false, stopwords = false }

describe("rag.bm25 scores", function()
  local docs = {
    { id = "d1", text = "apple banana apple" },
    { id = "d2", text = "banana cherry" },
    { id = "d3", text = "apple cherry cherry date" },
    { id = "d4", text = "date" },
    { id = "d5", text = "elder fig grape apple banana" },
  }
  -- Computed by hand (Python, the formulas of Kamphuis et al. 2020 as bm25s
  -- writes them, summing over every query token), k1 = 1.2, b = 0.75,
  -- N = 5, avgdl = 3; bm25l delta 0.5, bm25+ delta 1.
  local expected = {
    ["apple cherry"] = {
      lucene = { d3 = 0.715866450209589, d2 = 0.460773019659947, d1 = 0.336872812957929,
        d5 = 0.192498750261674 },
      robertson = { d3 = 0.192269849497836, d2 = 0.17709065085327, d1 = 0, d5 = 0 },
      atire = { d3 = 1.60143489755587, d2 = 1.06096821585428, d1 = 0.702385232678237,
        d5 = 0.40136299010185 },
      bm25l = { d3 = 1.84226822913365, d2 = 1.51284724626399, d1 = 1.36769078583164,
        d5 = 1.1510252720236 },
      ["bm25+"] = { d3 = 3.78284157958929, d2 = 3.06383685610692, d1 = 2.74483684249798,
        d5 = 2.33637511109658 },
    },
    ["date banana banana"] = {
      lucene = { d2 = 0.567364737613355, d4 = 0.547167960846187, d1 = 0.489996818847897,
        d5 = 0.384997500523348, d3 = 0.35018749494156 },
      robertson = { d4 = 0.210295147888258, d3 = 0.134588894648485, d1 = 0, d2 = 0, d5 = 0 },
      atire = { d4 = 1.25989975632696, d2 = 1.18296460240545, d1 = 1.02165124753198,
        d3 = 0.806335844049257, d5 = 0.8027259802037 },
      bm25l = { d2 = 1.99985508086977, d4 = 1.99889733071908, d1 = 1.88402677302001,
        d5 = 1.7355707728182, d3 = 1.69906111883399 },
      ["bm25+"] = { d2 = 4.09008959424261, d4 = 3.99549854670665, d1 = 3.87120101090789,
        d5 = 3.57413793352506, d3 = 3.45168546381594 },
    },
  }
  local order = {
    ["apple cherry"] = {
      lucene = { "d3", "d2", "d1", "d5" },
      robertson = { "d3", "d2", "d1", "d5" },
      atire = { "d3", "d2", "d1", "d5" },
      bm25l = { "d3", "d2", "d1", "d5" },
      ["bm25+"] = { "d3", "d2", "d1", "d5" },
    },
    ["date banana banana"] = {
      lucene = { "d2", "d4", "d1", "d5", "d3" },
      robertson = { "d4", "d3", "d1", "d2", "d5" },
      atire = { "d4", "d2", "d1", "d3", "d5" },
      bm25l = { "d2", "d4", "d1", "d5", "d3" },
      ["bm25+"] = { "d2", "d4", "d1", "d5", "d3" },
    },
  }

  for _, variant in ipairs({ "lucene", "robertson", "atire", "bm25l", "bm25+" }) do
    it("equal hand-computed values for " .. variant, function()
      local b = build(docs, { variant = variant, analyzer = rag.text.analyzer(PLAIN) })
      for q, want in pairs(expected) do
        local hits = b:search(q, 10)
        local ids = {}
        for i, h in ipairs(hits) do
          ids[i] = h.id
          assert.near(want[variant][h.id], h.score, 1e-12)
          assert.equal(h.score, b:explain(q, h.id).score) -- bit for bit
        end
        assert.same(order[q][variant], ids) -- equal scores (robertson's zeros) by id
      end
    end)
  end

  it("use k1, b and delta as given", function()
    local b = build(docs, { k1 = 2, b = 0, analyzer = rag.text.analyzer(PLAIN) })
    -- b = 0: no length normalisation; d1 has apple twice: idf * 2 / (2 + 2)
    local idf = math.log(1 + (5 - 3 + 0.5) / (3 + 0.5))
    assert.near(idf * 2 / 4, b:explain("apple", "d1").score, 1e-15)
    local p = build(docs, { variant = "bm25+", delta = 0.25, analyzer = rag.text.analyzer(PLAIN) })
    local ex = p:explain("elder", "d1") -- absent: idf * delta
    assert.near(math.log(6 / 1) * 0.25, ex.score, 1e-15)
    assert.equal(0.25, p:stats().delta)
    assert.equal(1, bm25.new({ variant = "bm25+" }):stats().delta)
    assert.equal(0.5, bm25.new({ variant = "bm25l" }):stats().delta)
  end)
end)

describe("rag.bm25 search", function()
  it("returns hits best first with ties broken by id, at most k", function()
    local b = bm25.new()
    for _, id in ipairs({ "b", "c", "a", "aa", "ab" }) do
      b:add(id, "same words here")
    end
    b:add("z", "other text entirely")
    local hits = b:search("words", 10)
    local ids = {}
    for i, h in ipairs(hits) do
      ids[i] = h.id
      assert.equal(hits[1].score, h.score)
    end
    assert.same({ "a", "aa", "ab", "b", "c" }, ids)
    assert.equal(2, #b:search("words", 2))
    assert.same({ "a", "aa" }, { b:search("words", 2)[1].id, b:search("words", 2)[2].id })
    assert.equal(5, #b:search("words")) -- k defaults to 10
    assert.same({}, b:search("absent", 10))
    assert.same({}, b:search("", 10))
    assert.same({}, b:search("the and of", 10)) -- stopwords only
  end)

  -- Lucene's formula worked out here, summed over the query's terms in order.
  local function lucene(docs, terms)
    local n, total, df, dl, tf = #docs, 0, {}, {}, {}
    for i, d in ipairs(docs) do
      tf[i] = {}
      local c = 0
      for w in d.text:gmatch("%S+") do
        c = c + 1
        tf[i][w] = (tf[i][w] or 0) + 1
      end
      dl[i], total = c, total + c
      for w in pairs(tf[i]) do df[w] = (df[w] or 0) + 1 end
    end
    local avg, want = total / n, {}
    for i, d in ipairs(docs) do
      local s, hit = 0, false
      for _, w in ipairs(terms) do
        local f = tf[i][w]
        if f then
          local idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
          s, hit = s + idf * (f / (f + 1.2 * (1 - 0.75 + 0.75 * dl[i] / avg))), true
        end
      end
      if hit then want[#want + 1] = { id = d.id, score = s } end
    end
    table.sort(want, function(a, b)
      if a.score ~= b.score then return a.score > b.score end
      return a.id < b.id
    end)
    return want
  end

  it("scores term frequencies across the posting format's boundaries", function()
    -- a tf of 1 has no byte of its own; 127, 128 and 16384 cross varint lengths
    local docs = {}
    for i, f in ipairs({ 1, 2, 1, 127, 128, 129, 1, 300, 16383, 16384, 1, 3 }) do
      docs[i] = { id = ("t%02d"):format(i), text = ("x "):rep(f) .. "pad" .. ("y "):rep(i) }
    end
    local b = build(docs, { analyzer = rag.text.analyzer(PLAIN) })
    for _, q in ipairs({ "x", "y", "x y", "pad x" }) do
      local terms = {}
      for w in q:gmatch("%S+") do terms[#terms + 1] = w end
      local want, hits = lucene(docs, terms), b:search(q, 20)
      assert.equal(#want, #hits)
      for i, h in ipairs(hits) do
        assert.equal(want[i].id, h.id)
        assert.near(want[i].score, h.score, 1e-12 * want[i].score)
      end
    end
  end)

  it("keeps the k best of thousands of matches, ties at the k-th place by id", function()
    -- three texts only, so scores tie in large groups; every k crosses a group
    local r, docs = rng(11), {}
    local texts = { "alpha beta", "alpha gamma gamma", "alpha beta gamma delta" }
    for i = 1, 3000 do
      docs[i] = { id = ("d%05d"):format(r(99999)) .. "-" .. i, text = texts[r(3)] }
    end
    local b = build(docs, { analyzer = rag.text.analyzer(PLAIN) })
    for _, q in ipairs({ "alpha", "alpha beta", "gamma delta", "beta gamma" }) do
      local terms = {}
      for w in q:gmatch("%S+") do terms[#terms + 1] = w end
      local want = lucene(docs, terms)
      for _, k in ipairs({ 1, 7, 50, 199, 600, 1001 }) do
        local hits = b:search(q, k)
        assert.equal(math.min(k, #want), #hits)
        for i, h in ipairs(hits) do
          assert.equal(want[i].id, h.id)
          assert.near(want[i].score, h.score, 1e-12 * want[i].score)
        end
      end
    end
    -- fewer than k strong matches, all where a sample of every 16th match
    -- looks: a floor guessed from that sample is reached by too few
    local few = {}
    for i = 1, 1000 do
      local strong = (i - 1) % 16 == 0 and i <= 320
      few[i] = { id = ("f%04d"):format(i), text = strong and "alpha beta gamma" or "alpha gamma" }
    end
    local f = build(few, { analyzer = rag.text.analyzer(PLAIN) })
    local want, hits = lucene(few, { "alpha", "beta" }), f:search("alpha beta", 50)
    assert.equal(50, #hits)
    for i, h in ipairs(hits) do
      assert.equal(want[i].id, h.id)
    end
    assert.equal("f0305", hits[20].id)
  end)

  it("matches every document of a loaded index with every term (scratch sized exactly)", function()
    -- a load sizes the document tables to the count; every document touched,
    -- then touched again by the next term, fills the search's scratch
    local b = bm25.new({ analyzer = rag.text.analyzer(PLAIN) })
    for i = 1, 100 do b:add(("d%03d"):format(i), "alpha beta " .. ("gamma "):rep(i % 3)) end
    local path = tmpname()
    assert(b:save(path))
    local l = assert(bm25.load(path))
    os.remove(path)
    for _, q in ipairs({ "alpha beta", "beta alpha gamma", "alpha alpha" }) do
      assert.same(b:search(q, 100), l:search(q, 100))
      assert.equal(100, #l:search(q, 100))
    end
  end)

  it("weighs a repeated query term by its count", function()
    local b = build({ { id = "1", text = "alpha beta" }, { id = "2", text = "alpha gamma" },
      { id = "3", text = "delta" } }, { analyzer = rag.text.analyzer(PLAIN) })
    local one = b:explain("beta", "1").score
    local ex = b:explain("beta beta alpha", "1")
    assert.equal(2, ex.terms[1].qtf)
    assert.equal("beta", ex.terms[1].term)
    assert.near(2 * one, ex.terms[1].weight, 1e-15)
  end)

  it("restricts to opts.filter, a set or a list of ids", function()
    local docs = corpus(11, 60)
    local b = build(docs)
    local q = docs[1].text
    local all = b:search(q, 100)
    local set, list, want = {}, {}, {}
    for i = 1, #all, 3 do
      set[all[i].id] = true
      list[#list + 1] = all[i].id
      want[#want + 1] = all[i]
    end
    set["no-such-id"] = true
    set["doc2"] = false -- false excludes
    assert.same(want, b:search(q, 100, { filter = set }))
    assert.same(want, b:search(q, 100, { filter = list }))
    assert.same({}, b:search(q, 100, { filter = {} }))
    local nums = bm25.new()
    nums:add(7, "seven")
    nums:add(8, "seven")
    assert.same({ "7" }, { nums:search("seven", 5, { filter = { [7] = true } })[1].id })
    assert.equal(1, #nums:search("seven", 5, { filter = { 7 } }))
  end)

  it("explains per-term contributions that add up to the score", function()
    local docs = corpus(12, 40)
    local b = build(docs)
    local q = docs[3].text:sub(1, 40) .. " zzzunknown"
    for _, h in ipairs(b:search(q, 40)) do
      local ex = b:explain(q, h.id)
      assert.equal(h.score, ex.score)
      assert.equal(h.id, ex.id)
      assert.equal(40, ex.docs)
      local sum = 0
      for _, t in ipairs(ex.terms) do
        sum = sum + t.weight
        assert.is_true(t.df >= 0 and t.qtf >= 1 and t.tf >= 0)
        if t.df == 0 then
          assert.equal(0, t.weight)
        end
      end
      assert.near(ex.score, sum, 1e-12)
      assert.equal("zzzunknown", ex.terms[#ex.terms].term)
      assert.equal(0, ex.terms[#ex.terms].df)
    end
    assert.is_nil(b:explain(q, "missing"))
  end)
end)

describe("rag.bm25 changes", function()
  it("replaces a document added again under its id", function()
    local b = bm25.new()
    b:add("x", "first version about cats")
    b:add("x", "second version about dogs")
    assert.equal(1, #b)
    assert.same({}, b:search("cats", 5))
    assert.equal("x", b:search("dogs", 5)[1].id)
    assert.equal(1, b:stats().docs)
  end)

  it("removes: true once, then false; the document never comes back", function()
    local b = build(corpus(13, 30))
    b:add("gone", "unicorns everywhere")
    assert.is_true(b:remove("gone"))
    assert.is_false(b:remove("gone"))
    assert.is_false(b:remove("never-added"))
    assert.equal(30, #b)
    assert.same({}, b:search("unicorns", 10))
    assert.is_nil(b:explain("unicorns", "gone"))
    for i = 1, 30 do
      b:remove("doc" .. i)
    end
    assert.equal(0, #b)
    assert.same({}, b:search(WORDS[1] .. " " .. WORDS[2], 10))
    local s = b:stats()
    assert.equal(0, s.docs)
    assert.equal(0, s.terms)
    assert.equal(0, s.postings)
  end)

  it("converts number ids with tostring", function()
    local b = bm25.new()
    b:add(42, "answer")
    b:add(1.5, "answer")
    local ids = {}
    for _, h in ipairs(b:search("answer", 5)) do
      ids[#ids + 1] = h.id
    end
    table.sort(ids)
    assert.same({ tostring(1.5), "42" }, ids)
    assert.is_true(b:remove("42"))
  end)

  it("returns nil, msg, 'encoding' for invalid UTF-8 and stays unchanged", function()
    local b = build(corpus(14, 10))
    local before = b:search(WORDS[1], 10)
    local ok, msg, code = b:add("doc1", "valid \255 text")
    assert.is_nil(ok)
    assert.equal("encoding", code)
    assert.matches("^rag.bm25.add: invalid utf%-8 at byte 7", msg)
    assert.equal(10, #b)
    assert.same(before, b:search(WORDS[1], 10))
    ok, msg, code = b:search("\192\128", 5)
    assert.is_nil(ok)
    assert.equal("encoding", code)
    assert.matches("^rag.bm25.search:", msg)
    assert.equal("encoding", select(3, b:explain("\255", "doc1")))
  end)

  -- Acceptance C: after any sequence of adds, removes and replacements the
  -- scores equal those of an index built from scratch over the live documents.
  local function same_as_scratch(b, live, opts, qs)
    local docs = {}
    for id, text in pairs(live) do
      docs[#docs + 1] = { id = id, text = text }
    end
    table.sort(docs, function(x, y)
      return x.id < y.id
    end)
    local fresh = build(docs, opts)
    assert.equal(#fresh, #b)
    local s, f = b:stats(), fresh:stats()
    assert.equal(f.postings, s.postings)
    assert.equal(f.terms, s.terms)
    assert.equal(f.avgdl, s.avgdl)
    for _, q in ipairs(qs) do
      local got, want = b:search(q, 1000), fresh:search(q, 1000)
      assert.equal(#want, #got)
      for i = 1, #want do
        assert.equal(want[i].id, got[i].id)
        assert.near(want[i].score, got[i].score, 1e-9 * math.max(1, math.abs(want[i].score)))
        assert.is_not_nil(live[got[i].id]) -- a removed document never comes back
      end
    end
    fresh:close()
  end

  for _, variant in ipairs({ "lucene", "robertson", "atire", "bm25l", "bm25+" }) do
    it("equal an index built from scratch after random changes (" .. variant .. ")", function()
      local r = rng(variant == "lucene" and 101 or #variant * 977)
      local opts = { variant = variant }
      local b, live = bm25.new(opts), {}
      local qs = queries(55, 12)
      local removed = 0
      for step = 1, 1500 do
        local id = "id" .. r(120)
        local op = r(10)
        if op <= 5 then
          local text = gen_text(r, 1 + r(40))
          b:add(id, text)
          live[id] = text
        elseif op <= 9 then
          local was = live[id] ~= nil
          assert.equal(was, b:remove(id))
          live[id] = nil
          removed = removed + (was and 1 or 0)
        else
          b:search(qs[r(#qs)], r(20))
        end
        if step % 300 == 0 then
          same_as_scratch(b, live, opts, qs)
        end
      end
      assert.is_true(removed > 200) -- enough to compact lists and renumber documents
      same_as_scratch(b, live, opts, qs)
      -- empty it, fill it again
      for id in pairs(live) do
        b:remove(id)
      end
      live = {}
      assert.equal(0, #b)
      for i = 1, 50 do
        live["n" .. i] = gen_text(r, 10)
        b:add("n" .. i, live["n" .. i])
      end
      same_as_scratch(b, live, opts, qs)
    end)
  end
end)

describe("rag.bm25 under churn", function()
  it("keeps memory bounded: terms of removed documents are dropped", function()
    local b = build(corpus(15, 20))
    local function churn(from, to)
      for i = from, to do
        b:add("churn", "unique" .. i .. "x fresh" .. i .. "y")
      end
    end
    churn(1, 2000)
    local m1 = b:stats().memory
    churn(2001, 12000)
    local s = b:stats()
    assert.equal(21, s.docs)
    assert.is_true(s.memory <= m1 * 1.25, s.memory .. " > " .. m1)
    assert.equal("churn", b:search("unique12000x", 5)[1].id)
    assert.same({}, b:search("unique11999x", 5))
  end)

  it("gives finite scores in degenerate parameter corners", function()
    for _, v in ipairs({ "lucene", "robertson", "atire", "bm25l", "bm25+" }) do
      for _, p in ipairs({ { k1 = 0, b = 0, delta = 0 }, { k1 = 0, b = 1, delta = 0 },
        { k1 = 1e6, b = 1, delta = 1e6 } }) do
        local b = bm25.new({ variant = v, k1 = p.k1, b = p.b, delta = p.delta })
        b:add("b", "x y")
        b:add("a", "x")
        b:add("c", "z")
        for _, h in ipairs(b:search("x y", 5)) do
          assert.is_true(h.score == h.score and h.score > -math.huge and h.score < math.huge,
            v .. " " .. tostring(h.score))
        end
      end
    end
  end)
end)

describe("rag.bm25 stats", function()
  it("count documents, terms, postings and bytes", function()
    local b = build({ { id = "a", text = "x y y z" }, { id = "b", text = "y w" } },
      { analyzer = rag.text.analyzer(PLAIN) })
    local s = b:stats()
    assert.equal(2, s.docs)
    assert.equal(4, s.terms) -- w x y z
    assert.equal(5, s.postings) -- a: x y z; b: y w
    assert.equal(0, s.dead)
    assert.equal(3, s.avgdl)
    assert.equal(6, s.bytes) -- a byte a posting, one more for y's tf of 2
    assert.is_true(s.memory > s.bytes)
    assert.equal("lucene", s.variant)
    assert.equal(1.2, s.k1)
    assert.equal(0.75, s.b)
    assert.equal("english", s.lang)
    b:remove("a")
    s = b:stats()
    assert.equal(1, s.docs)
    assert.equal(2, s.terms)
    assert.equal(2, s.postings)
    assert.equal(3, s.dead)
  end)

  it("stay within 6 bytes per posting on a generated corpus", function()
    local b = build(corpus(21, 2000))
    local s = b:stats()
    assert.is_true(s.bytes / s.postings <= 6, s.bytes / s.postings)
  end)
end)

describe("rag.bm25 persistence", function()
  it("refuses a directory, a device and a FIFO at once, with code io", function()
    helpers.rejects_irregular(bm25.load, "rag.bm25.load")
  end)

  it("round-trips: identical results, stats and later changes", function()
    local docs = corpus(31, 300)
    local b = build(docs, { variant = "bm25l", k1 = 1.7, b = 0.6,
      analyzer = rag.text.analyzer({ stopwords = { "the", WORDS[1] }, cjk = "unigram" }) })
    for i = 1, 300, 4 do
      b:remove("doc" .. i)
    end
    b:add("doc2", "replaced text " .. WORDS[3])
    local path = tmpname()
    assert.is_true(b:save(path))
    local c = assert(bm25.load(path))
    local qs = queries(32, 30)
    qs[#qs + 1] = "\229\144\145\233\135\143" -- CJK unigrams
    for _, q in ipairs(qs) do
      assert.same(b:search(q, 50), c:search(q, 50))
    end
    local s, t = b:stats(), c:stats()
    s.memory, t.memory = nil, nil
    assert.same(s, t)
    assert.same(b:explain(qs[1], "doc3"), c:explain(qs[1], "doc3"))
    -- the same changes on both keep them equal
    for _, x in ipairs({ b, c }) do
      x:remove("doc3")
      x:add("new", qs[2])
    end
    for _, q in ipairs(qs) do
      assert.same(b:search(q, 50), c:search(q, 50))
    end
    -- saving the loaded index gives the same bytes as saving the original
    local p2 = tmpname()
    assert.is_true(b:save(path))
    assert.is_true(c:save(p2))
    assert.equal(slurp(path), slurp(p2))
    os.remove(path)
    os.remove(p2)
  end)

  it("refuses a path with a NUL byte instead of shortening it", function()
    local path = tmpname()
    os.remove(path)
    local b = bm25.new()
    b:add("a", "text")
    local ok, err = pcall(b.save, b, path .. "\0.idx")
    assert.is_false(ok)
    assert.matches("rag.bm25.save: path contains a NUL byte", tostring(err))
    assert.is_nil(io.open(path, "rb")) -- nothing written under the shortened name
    assert.is_true(b:save(path))
    ok, err = pcall(bm25.load, path .. "\0.y")
    assert.is_false(ok)
    assert.matches("rag.bm25.load: path contains a NUL byte", tostring(err))
    os.remove(path)
  end)

  it("saves and loads an empty index", function()
    local path = tmpname()
    assert.is_true(bm25.new():save(path))
    local c = assert(bm25.load(path))
    assert.equal(0, #c)
    assert.same({}, c:search("anything", 5))
    os.remove(path)
  end)

  it("report io, format and version failures as nil, msg, code", function()
    local ok, msg, code = bm25.load("/nonexistent/x.bm25")
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.matches("^rag.bm25.load: '/nonexistent/x.bm25': ", msg)
    assert.equal("io", select(3, bm25.load("/tmp")))
    ok, msg, code = bm25.new():save("/nonexistent/dir/x.bm25")
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.matches("^rag.bm25.save: ", msg)
    local path = tmpname()
    spit(path, "not an index at all, just text")
    ok, msg, code = bm25.load(path)
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("bad magic", msg)
    os.remove(path)
  end)

  it("checks its CRC-32 against the standard value", function()
    assert.equal(0xcbf43926, helpers.crc32("123456789"))
  end)

  it("rejects a file from a newer version with 'version'", function()
    local path = tmpname()
    assert.is_true(build(corpus(33, 5)):save(path))
    spit(path, helpers.with_version(slurp(path), 3))
    local ok, msg, code = bm25.load(path)
    assert.is_nil(ok)
    assert.equal("version", code)
    assert.matches("newer version", msg)
    os.remove(path)
  end)

  it("reads a version 1 file (spec/fixtures/bm25/v1.rag) and saves it as version 2", function()
    -- v1.rag: the documents below, and one removed before the save, by rag 1's format
    local docs = {
      { id = "a", text = "Retrieval augmented generation joins search and language models." },
      { id = "b", text = "BM25 ranks documents by term frequency and inverse document frequency." },
      { id = "c", text = "Dense vectors capture meaning; sparse terms capture exact words." },
      { id = "d", text = "\229\144\145\233\135\143\230\163\128\231\180\162 and keyword"
        .. " search work together in hybrid retrieval." },
      { id = "e", text = "Running runners run: stemming folds running and runs together." },
      { id = "f", text = "The quick brown fox jumps over the lazy dog, again and again and"
        .. " again." },
      { id = "g", text = "Chunking splits long documents into passages that fit a token budget." },
      { id = "h", text = "Reciprocal rank fusion merges ranked lists with k = 60." },
      { id = "i", text = "A removed document leaves dead postings until the index compacts them." },
      { id = "j", text = "Na\195\175ve caf\195\169 \195\188ber stra\195\159e: Unicode words are"
        .. " folded and stemmed." },
    }
    local v1 = slurp("spec/fixtures/bm25/v1.rag")
    local b1, b2, b3, b4 = v1:byte(9, 12) -- the version, u32 little-endian
    assert.are.equal(1, b1 + 256 * (b2 + 256 * (b3 + 256 * b4)))
    local fresh = build(docs)
    local old = assert(bm25.load("spec/fixtures/bm25/v1.rag"))
    local qs = { "running fox again", "document frequency", "\229\144\145\233\135\143",
      "stra\195\159e caf\195\169 unicode", "retrieval retrieval search", "missing words" }
    for _, q in ipairs(qs) do
      assert.are.same(fresh:search(q, 10), old:search(q, 10), q)
    end
    local path = tmpname()
    assert.is_true(old:save(path))
    local bytes = slurp(path)
    local c1, c2, c3, c4 = bytes:byte(9, 12)
    assert.are.equal(2, c1 + 256 * (c2 + 256 * (c3 + 256 * c4)))
    local back = assert(bm25.load(path))
    for _, q in ipairs(qs) do
      assert.are.same(fresh:search(q, 10), back:search(q, 10), q)
    end
    assert.is_true(fresh:save(path))
    assert.are.equal(bytes, slurp(path))
    os.remove(path)
  end)

  it("rejects counts that disagree even with every checksum right", function()
    local b = bm25.new()
    b:add("a", "apple pie")
    b:add("b", "apple tart crumble")
    local path = tmpname()
    assert.is_true(b:save(path))
    local good = slurp(path)
    local sec = {}
    for _, x in ipairs(helpers.sections(good)) do
      sec[x.tag] = x
    end
    -- DOCS: ndocs, then id:str dl:varint; here "\2", "\1a" dl, "\1b" dl
    local d = sec.DOCS.at
    assert.equal("\2\1a", good:sub(d, d + 2))
    assert.equal("\1b", good:sub(d + 4, d + 5))
    local function refused(bytes, why)
      helpers.refused_resigned(bm25.load, "rag.bm25.load", path, bytes, why)
    end
    refused(helpers.splice(good, d + 5, "a"), "two documents named a")
    refused(helpers.splice(good, d + 3, string.char(good:byte(d + 3) + 1)), "a length off by one")
    -- TERM: nterms, nslots, then entries of pool:u32 post:u64 df:u32
    -- "apple" (in both) and the next term (in one) trade a document: the
    -- frequencies still add up, but neither is its list's length
    local df1, df2 = sec.TERM.at + 8 + 12, sec.TERM.at + 8 + 16 + 12
    assert.same({ 2, 1 }, { helpers.le(good, df1, 4), helpers.le(good, df2, 4) })
    refused(helpers.splice(helpers.splice(good, df1, helpers.u32(1)), df2, helpers.u32(2)),
      "document frequencies traded")
    helpers.write(path, helpers.resign(good)) -- re-signing alone changes nothing
    assert.equal(2, #assert(bm25.load(path)))
    os.remove(path)
  end)

  it("rejects every truncation of a saved file", function()
    local path = tmpname()
    local b = build(FULL and corpus(34, 400) or corpus(34, 12, 8))
    assert.is_true(b:save(path))
    local s = slurp(path)
    local bad = tmpname()
    for n = 0, #s - 1 do
      helpers.rejected(bm25.load, bad, s:sub(1, n))
    end
    helpers.rejected(bm25.load, bad, s .. "\0") -- and an extension
    os.remove(path)
    os.remove(bad)
  end)

  it("rejects single-bit flips anywhere in a saved file", function()
    local path = tmpname()
    local b = build(corpus(35, FULL and 400 or 60))
    for i = 1, 60, 5 do
      b:remove("doc" .. i)
    end
    assert.is_true(b:save(path))
    local s = slurp(path)
    local bad = tmpname()
    local r = rng(36)
    for _ = 1, FULL and 10000 or 300 do
      local pos, bit = r(#s), 2 ^ (r(8) - 1)
      local byte = s:byte(pos)
      local flipped = (math.floor(byte / bit) % 2 == 1) and byte - bit or byte + bit
      helpers.rejected(bm25.load, bad, s:sub(1, pos - 1) .. string.char(flipped) .. s:sub(pos + 1))
    end
    assert.is_truthy(bm25.load(path)) -- the original still loads
    os.remove(path)
    os.remove(bad)
  end)

  it("leaves the previous file loadable when a save is killed midway", function()
    local lua = arg and arg[-1]
    if not lua then
      pending("needs the interpreter's path (arg[-1])")
      return
    end
    local path = tmpname()
    local child = tmpname() .. ".lua"
    spit(child, string.format([[
package.path = %q
package.cpath = %q
local rag = require("rag")
local b = rag.bm25.new()
local words = {}
for i = 1, 3000 do words[i] = "w" .. i end
local x = 1
for d = 1, 20000 do
  local t = {}
  for j = 1, 40 do x = (16807 * x) %% 2147483647; t[j] = words[x %% 3000 + 1] end
  b:add("d" .. d, table.concat(t, " "))
end
assert(b:save(%q))
io.open(%q, "w"):close()
local n = 0
while true do
  n = n + 1
  if n %% 2 == 0 then b:remove("extra") else b:add("extra", "an extra document") end
  assert(b:save(%q))
end
]], package.path, package.cpath, path, path .. ".ready", path))
    for round = 1, 3 do
      os.remove(path .. ".ready")
      -- wait for the child to be ready, let it save for a while, kill it
      local cmd = string.format(
        "%s %s & pid=$!; i=0; while [ ! -e %s.ready ] && [ $i -lt 1200 ]; do sleep 0.05;"
          .. " i=$((i+1)); done; sleep 0.%d; kill -9 $pid; wait $pid 2>/dev/null; true",
        lua, child, path, 1 + round * 2)
      os.execute(cmd)
      local c, msg = bm25.load(path)
      assert.is_truthy(c, msg)
      assert.is_truthy(#c == 20000 or #c == 20001, #c)
      c:close()
    end
    os.execute("rm -f " .. path .. " " .. path .. ".ready " .. path .. ".tmp-* " .. child)
  end)
end)

describe("rag.bm25 misuse", function()
  it("raises for bad options and arguments", function()
    local function raises(pat, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pat)
      assert.matches(pat, tostring(err))
    end
    raises("unknown option 'k'", function() bm25.new({ k = 1 }) end)
    raises("option 'variant' must be \"lucene\"", function() bm25.new({ variant = "okapi" }) end)
    raises("'k1' must be in", function() bm25.new({ k1 = -1 }) end)
    raises("'b' must be in", function() bm25.new({ b = 1.5 }) end)
    raises("'b' must be a number", function() bm25.new({ b = "x" }) end)
    raises("'delta' must be in", function() bm25.new({ delta = -0.1 }) end)
    raises("'k1' must be in", function() bm25.new({ k1 = 1e7 }) end)
    raises("'k1' must be in", function() bm25.new({ k1 = 0 / 0 }) end)
    raises("option 'analyzer' must be", function() bm25.new({ analyzer = { stem = false } }) end)
    raises("opts must be a table", function() bm25.new("x") end)
    local b = bm25.new()
    raises("id must be a string or a number", function() b:add(nil, "x") end)
    raises("id must be a string or a number", function() b:add({}, "x") end)
    raises("text must be a string", function() b:add("a", 5) end)
    raises("query must be a string", function() b:search(5) end)
    raises("k must be a positive integer", function() b:search("x", 0) end)
    raises("k must be a positive integer", function() b:search("x", 1.5) end)
    raises("k must be a positive integer", function() b:search("x", "3") end)
    raises("unknown option 'filters'", function() b:search("x", 3, { filters = {} }) end)
    raises("filter must be a table", function() b:search("x", 3, { filter = "a" }) end)
    raises("filter must be a set", function() b:search("x", 3, { filter = { a = 1 } }) end)
    raises("id must be", function() b:remove(true) end)
    raises("id must be", function() b:explain("x", nil) end)
  end)

  it("takes its analyzer's options and outlives it", function()
    local a = rag.text.analyzer({ lang = "french", stopwords = false })
    local b = bm25.new({ analyzer = a })
    a:close()
    b:add("1", "les chevaux mangent")
    assert.equal("1", b:search("cheval", 5)[1].id) -- French stems
    assert.equal("french", b:stats().lang)
  end)

  it("raises once closed; close is idempotent", function()
    local b = bm25.new()
    b:add("a", "text")
    assert.equal("rag.bm25 (1 documents)", tostring(b))
    b:close()
    b:close()
    assert.equal("rag.bm25 (closed)", tostring(b))
    for _, f in ipairs({
      function() b:add("a", "x") end, function() b:search("x") end,
      function() b:remove("a") end, function() return #b end,
      function() b:stats() end, function() b:save("/tmp/x") end,
      function() b:explain("x", "a") end,
    }) do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches("index is closed", tostring(err))
    end
  end)
end)

describe("rag.bm25 out of memory", function()
  local fail_alloc = rag.core._fail_alloc
  if not fail_alloc then
    it("needs a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  local function snapshot(b, qs)
    local s = b:stats()
    s.memory = nil
    local t = { stats = s, n = #b, hits = {} }
    for i, q in ipairs(qs) do
      t.hits[i] = b:search(q, 20)
    end
    return t
  end

  -- Each failure ("not enough memory") must leave the index exactly as before.
  local function walk_unchanged(b, qs, op)
    local before = snapshot(b, qs)
    return helpers.oom_walk(op, function()
      assert.same(before, snapshot(b, qs))
    end)
  end

  it("add, replace, search, save and load fail cleanly at every fault point", function()
    assert.is_true(helpers.oom_walk(function() bm25.new():close() end) >= 2)
    local qs = queries(41, 5)
    local b = build(corpus(42, 40))
    local text = gen_text(rng(43), 200) .. " brandnewterm anothernewterm"
    assert.is_true(walk_unchanged(b, qs, function() b:add("fresh", text) end) >= 3)
    assert.is_true(b:remove("fresh"))
    walk_unchanged(b, qs, function() b:add("doc5", text) end) -- a replacement
    local big = bm25.new()
    walk_unchanged(big, qs, function() big:add("first", text) end)
    helpers.oom_walk(function() b:search(qs[1], 10, { filter = { doc1 = true } }) end)
    helpers.oom_walk(function() b:explain(qs[1] .. " unknownword", "doc1") end)
    local path = tmpname()
    assert.is_true(b:save(path))
    local before = slurp(path)
    b:remove("doc7") -- save renumbers first, which allocates
    helpers.oom_walk(function() assert(b:save(path)) end)
    assert.is_truthy(#slurp(path) < #before)
    assert.is_true(helpers.oom_walk(function() assert(bm25.load(path)):close() end) >= 5)
    os.execute("rm -f " .. path .. " " .. path .. ".tmp-*")
  end)
end)
