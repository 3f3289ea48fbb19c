-- The behaviour every rag.index store shares, as one suite that
-- spec/index/behaviour_spec.lua runs on the local index and spec/pg/
-- store_spec.lua on rag.store.postgres against a real server: the
-- add/update/remove contract by content hash, incremental changes against
-- an index built from scratch (no ghost chunks), sync, filters against
-- brute force, the three modes, hybrid against rag.fuse.rrf over the
-- index's own lists, grouping, sentence windows and bad options.
--
-- run(name, make, env): `make(opts)` returns a new, empty index with the
-- options of rag.index.new (the store is make's business); env gives the
-- spec's busted functions (describe, it, setup, teardown, assert), which a
-- required module does not see, and optionally check(idx), a store's own
-- consistency check run after changes.
local rag = require("rag")
local helpers = require("spec.helpers")

local M = {}

local rng = helpers.rng
local describe, it, setup, teardown -- the calling spec's, set by run
local assert = require("luassert")
local check = function() end

local function hashing(dim)
  return rag.embed.hashing({ dim = dim or 64 })
end

--- The 40 SciFact documents of the fixture, with metadata to filter on.
function M.fixture()
  local docs = helpers.scifact()
  local out = {}
  for i = 1, 40 do
    local d = docs[i]
    out[i] = { id = d.id, title = d.title, text = d.text,
      meta = { year = 2000 + i % 7, kind = i % 3 == 0 and "review" or "study",
        tags = { "t" .. (i % 4), "t" .. (i % 5 + 10) }, open = i % 2 == 0, score = i / 8 } }
  end
  return out
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do
    c[k] = type(v) == "table" and copy(v) or v
  end
  return c
end

M.QUERIES = { "cerebral white matter diffusion", "cancer cells", "vitamin D deficiency",
  "protein expression in mice", "randomized controlled trial", "zzzz" }
local QUERIES = M.QUERIES

--- Asserts two hit lists are the same ranking (ids, spans, scores to 1e-9).
function M.same_hits(a, b, what)
  assert.are.equal(#a, #b, what)
  for i = 1, #a do
    assert.are.equal(a[i].id, b[i].id, what)
    assert.are.equal(a[i].start, b[i].start, what)
    assert.are.equal(a[i].stop, b[i].stop, what)
    assert.is_true(math.abs(a[i].score - b[i].score) <= 1e-9 * math.max(1, math.abs(a[i].score)),
      what)
  end
end
local same_hits = M.same_hits

-- Does the document pass the filter? Written from the docs, not the index.
local function passes(d, f)
  for k, want in pairs(f) do
    local v = k == "doc_id" and d.id or d.meta[k]
    local function eq(x)
      if type(v) == "table" then
        for _, e in ipairs(v) do
          if e == x then
            return true
          end
        end
        return false
      end
      return v == x
    end
    if type(want) == "table" and (want.gte or want.lte) then
      if type(v) ~= "number" or (want.gte and v < want.gte) or (want.lte and v > want.lte) then
        return false
      end
    elseif type(want) == "table" then
      local any = false
      for _, x in ipairs(want) do
        any = any or eq(x)
      end
      if not any then
        return false
      end
    elseif not eq(want) then
      return false
    end
  end
  return true
end

function M.run(name, make, env)
  describe, it, setup, teardown, assert = env.describe, env.it, env.setup, env.teardown,
    env.assert
  check = env.check or check
  describe(name .. " documents", function()
    it("says added, updated or unchanged by the hash of text, title and meta", function()
      local idx = make({ embedder = hashing() })
      local d = { id = "a", text = "The cat sat on the mat.", title = "Cats", meta = { n = 1 } }
      assert.are.equal("added", idx:add(d))
      assert.are.equal("unchanged", idx:add(copy(d)))
      local d2 = copy(d)
      d2.meta.n = 2
      assert.are.equal("updated", idx:add(d2))
      local d3 = copy(d2)
      d3.title = "Felines"
      assert.are.equal("updated", idx:add(d3))
      local d4 = copy(d3)
      d4.source = "elsewhere.txt" -- not part of the content hash
      assert.are.equal("unchanged", idx:add(d4))
      assert.are.equal("added", idx:add({ id = 7, text = "numbers become strings" }))
      assert.are.equal(2, idx:count())
      if _VERSION ~= "Lua 5.1" then -- 5.1 and LuaJIT ignore __len on tables
        assert.are.equal(2, #idx)
      end
      local got = idx:get("a")
      assert.are.equal("The cat sat on the mat.", got.text)
      assert.are.equal("Felines", got.title)
      assert.are.same({ n = 2 }, got.meta)
      assert.is_truthy(idx:get(7))
      assert.is_nil(idx:get("nope"))
      assert.is_true(idx:remove("a"))
      assert.is_false(idx:remove("a"))
      assert.are.equal(1, idx:count())
      check(idx)
      idx:close()
    end)

    it("keeps metadata types: strings, integers, floats, booleans, lists of strings", function()
      local idx = make({ embedder = false })
      local meta = { s = "x", i = 42, f = 0.5, t = true, no = false, l = { "a", "b" } }
      idx:add({ id = "m", text = "some text", meta = meta })
      local got = idx:get("m").meta
      assert.are.same(meta, got)
      if math.type then
        assert.are.equal("integer", math.type(got.i))
        assert.are.equal("float", math.type(got.f))
      end
      local hit = idx:search("text")[1]
      assert.are.same(meta, hit.meta)
      idx:close()
    end)

    it("raises for bad documents and leaves the index unchanged on bad text", function()
      local idx = make({ embedder = hashing() })
      local function raises(pat, doc)
        local ok, err = pcall(idx.add, idx, doc)
        assert.is_false(ok, pat)
        assert.matches(pat, tostring(err))
      end
      raises("document must be a table", "x")
      raises("document id must be a string or a number", { text = "x" })
      raises("document text must be a string", { id = "x" })
      raises("unknown field 'metadata'", { id = "x", text = "y", metadata = {} })
      raises("meta.f must be a string, number, boolean or list of strings",
        { id = "x", text = "y", meta = { f = function() end } })
      raises("meta.l must be a list of strings", { id = "x", text = "y", meta = { l = { 1 } } })
      raises("meta.n must be a finite number", { id = "x", text = "y", meta = { n = 0 / 0 } })
      raises("document meta keys must be strings", { id = "x", text = "y", meta = { "a" } })
      idx:add({ id = "ok", text = "good text" })
      local ok, msg, code = idx:add({ id = "ok", text = "bad \255 text" })
      assert.is_nil(ok)
      assert.are.equal("encoding", code)
      assert.matches("invalid utf%-8", msg)
      assert.are.equal("good text", idx:get("ok").text)
      assert.are.equal(1, #idx:search("good"))
      check(idx)
      idx:close()
    end)

    it("gives each hit its chunk's span of the document's text and its list rank", function()
      local docs = M.fixture()
      local idx = make({ embedder = false, chunk = { size = 96, overlap = 16 } })
      assert.is_truthy(idx:add_many(docs))
      local tok = rag.tokenizer.get("cl100k_base")
      local spans = {}
      for _, d in ipairs(docs) do
        for n, c in ipairs(rag.chunk.recursive(d.text, { size = 96, overlap = 16,
            tokenizer = tok })) do
          spans[d.id .. "#" .. n] = c
        end
      end
      for _, q in ipairs(QUERIES) do
        local got = idx:search(q, { mode = "bm25", k = 10 })
        for i, h in ipairs(got) do
          local c = assert(spans[h.id], h.id)
          assert.are.equal(c.start, h.start)
          assert.are.equal(c.stop, h.stop)
          assert.are.equal(idx:get(h.doc_id).text:sub(h.start, h.stop), h.text)
          assert.are.equal(i, h.ranks.bm25)
          assert.is_nil(h.ranks.vector)
          if i > 1 then
            assert.is_true(got[i - 1].score > h.score or (got[i - 1].score == h.score
              and got[i - 1].id < h.id), q)
          end
        end
      end
      idx:close()
    end)
  end)

  describe(name .. " chunks", function()
    it("gives a chunk by id and a document's chunks, with the spans the chunker cut", function()
      local docs = M.fixture()
      local idx = make({ embedder = false, chunk = { size = 64, overlap = 8 } })
      assert(idx:add_many({ docs[1], docs[2] }))
      local tok = rag.tokenizer.get("cl100k_base")
      for _, d in ipairs({ docs[1], docs[2] }) do
        local want = rag.chunk.recursive(d.text, { size = 64, overlap = 8, tokenizer = tok })
        local got = idx:chunks(d.id)
        assert.are.equal(#want, #got)
        for n, c in ipairs(want) do
          local g = got[n]
          assert.are.equal(d.id .. "#" .. n, g.id)
          assert.are.equal(d.id, g.doc_id)
          assert.are.equal(c.start, g.start)
          assert.are.equal(c.stop, g.stop)
          assert.are.equal(c.text, g.text)
          assert.are.equal(d.title, g.title)
          assert.is_true(g.leaf)
          assert.are.same(g, idx:chunk(g.id))
        end
        assert.is_nil(idx:chunk(d.id .. "#" .. (#want + 1)))
        assert.is_nil(idx:chunk(d.id .. "#0"))
        assert.is_nil(idx:chunk(d.id))
      end
      assert.is_nil(idx:chunks("nope"))
      -- the content hash add compares: text, title and meta, as rag.core.index.hash gives it
      for _, d in ipairs({ docs[1], docs[2] }) do
        assert.are.equal(rag.core.index.hash(d, "spec"), idx:hash(d.id))
        assert.are.equal(64, #idx:hash(d.id))
      end
      assert.is_nil(idx:hash("nope"))
      assert.is_nil(idx:chunk("nope#1"))
      idx:close()
    end)
  end)

  describe(name .. " incremental changes", function()
    it("after random adds, updates and removals equals an index built from scratch", function()
      local pool = M.fixture()
      local r = rng(11)
      local o = { embedder = hashing(), vector = "exact", chunk = { size = 128, overlap = 16 } }
      local idx = make(o)
      local live, old_marks = {}, {}
      for step = 1, 160 do
        local i = r(#pool)
        local d = pool[i]
        local op = r(10)
        if op <= 2 then
          idx:remove(d.id)
          live[d.id] = nil
        else
          local doc = copy(d)
          if live[d.id] and live[d.id].mark then
            old_marks[#old_marks + 1] = live[d.id].mark
          end
          if op <= 5 then -- an update with a word only this version has
            local mark = "oldmark" .. step .. "x"
            doc.text = doc.text .. " " .. mark
            live[d.id] = { doc = doc, mark = mark }
          else
            live[d.id] = { doc = doc }
          end
          assert.is_truthy(idx:add(doc))
        end
        if step % 40 == 0 then
          check(idx)
          local fresh = make(o)
          local docs = {}
          for _, l in pairs(live) do
            docs[#docs + 1] = l.doc
          end
          fresh:add_many(docs)
          assert.are.equal(fresh:count(), idx:count())
          assert.are.same(fresh:stats().leaves, idx:stats().leaves)
          for _, q in ipairs(QUERIES) do
            for _, mode in ipairs({ "bm25", "vector", "hybrid" }) do
              local so = { mode = mode, k = 10 }
              same_hits(fresh:search(q, so), idx:search(q, so), mode .. ": " .. q)
            end
          end
          for _, mark in ipairs(old_marks) do -- no ghost of a replaced or removed text
            local still = false
            for _, l in pairs(live) do
              still = still or l.mark == mark
            end
            if not still then
              assert.are.same({}, idx:search(mark, { mode = "bm25" }), mark)
            end
          end
          fresh:close()
        end
      end
      idx:close()
    end)

    it("sync adds, updates, keeps and removes, and returns the four counts", function()
      local docs = M.fixture()
      local idx = make({ embedder = false })
      local first = {}
      for i = 1, 30 do
        first[i] = docs[i]
      end
      assert.are.same({ added = 30, updated = 0, unchanged = 0, removed = 0 }, idx:sync(first))
      local second = {}
      for i = 11, 40 do
        second[#second + 1] = i == 20 and copy(docs[i]) or docs[i]
      end
      second[10].text = second[10].text .. " changed"
      local n = 0
      local function iter()
        n = n + 1
        return second[n]
      end
      assert.are.same({ added = 10, updated = 1, unchanged = 19, removed = 10 }, idx:sync(iter))
      assert.are.equal(30, idx:count())
      assert.is_nil(idx:get(docs[1].id))
      assert.are.same({}, idx:search("", { mode = "bm25" }))
      idx:close()
    end)

    it("gives the vectors it keeps for chunk ids, as the embedder made them", function()
      local docs = M.fixture()
      local e = hashing(32)
      local idx = make({ embedder = e, chunk = { size = 64, overlap = 8 } })
      assert(idx:add_many({ docs[1], docs[2] }))
      local hits = assert(idx:search("cerebral white matter", { k = 3, mode = "vector" }))
      local asked = { hits[1].id, "nope#1", hits[2].id }
      local vs = idx:vectors(asked)
      assert.equal(3, #vs)
      assert.is_false(vs[2])
      for _, i in ipairs({ 1, 3 }) do
        local h = hits[i == 1 and 1 or 2]
        -- what was embedded for the chunk: the title, a newline, the chunk
        local want = e:embed({ h.title .. "\n" .. h.text }, { packed = true })[1]
        assert.equal(want, vs[i], h.id)
      end
      assert.same({}, idx:vectors({}))
      assert.has_error(function() idx:vectors("x") end,
        "rag.index.vectors: ids must be a list of chunk ids, got string")
      idx:close()
      local plain = make({ embedder = false })
      assert(plain:add(docs[1]))
      assert.is_nil(plain:vectors({ docs[1].id .. "#1" }))
      plain:close()
    end)

    it("lists the document ids, sorted bytewise", function()
      local idx = make({ embedder = false })
      for _, id in ipairs({ "b", "a#2", "B", "a", "a\xc3\xa9", "ab" }) do
        idx:add({ id = id, text = "text of " .. id })
      end
      idx:remove("b")
      assert.are.same({ "B", "a", "a#2", "ab", "a\xc3\xa9" }, idx:ids())
      idx:close()
    end)

    it("sync keeps the unseen documents that opts.keep names, and removes the rest", function()
      local docs = M.fixture()
      local idx = make({ embedder = false })
      assert(idx:sync({ docs[1], docs[2], docs[3], docs[4] }))
      local asked = {}
      local counts = idx:sync({ docs[1] }, { keep = function(id)
        asked[#asked + 1] = id
        return id == docs[3].id
      end })
      assert.are.same({ added = 0, updated = 0, unchanged = 1, removed = 2 }, counts)
      table.sort(asked)
      local want = { docs[2].id, docs[3].id, docs[4].id }
      table.sort(want)
      assert.are.same(want, asked) -- asked only about the unseen ones
      assert.is_table(idx:get(docs[3].id))
      assert.is_nil(idx:get(docs[2].id))
      assert.is_nil(idx:get(docs[4].id))
      assert.has_error(function() idx:sync({}, { keep = true }) end,
        "rag.index.sync: 'keep' must be a function, got boolean")
      idx:close()
    end)

    it("add_many reports progress and leaves earlier batches in when the embedder fails",
      function()
        local docs = M.fixture()
        local calls, seen = 0, {}
        local emb = hashing()
        local failing = { embed = function(_, texts, o)
          calls = calls + 1
          if calls == 3 then
            return nil, "embed failed", "provider"
          end
          return emb:embed(texts, o)
        end, dim = function() return 64 end }
        local idx = make({ embedder = failing, batch = 5 })
        local ok, msg, code = idx:add_many(docs, { progress = function(done, total)
          seen[#seen + 1] = done .. "/" .. total
        end })
        assert.is_nil(ok)
        assert.are.equal("embed failed", msg)
        assert.are.equal("provider", code)
        assert.are.same({ "5/40", "10/40" }, seen)
        assert.are.equal(10, idx:count())
        check(idx)
        idx:close()
      end)
  end)

  describe(name .. " search", function()
    local docs = M.fixture()
    local idx
    local byid = {}
    for _, d in ipairs(docs) do
      byid[d.id] = d
    end
    setup(function()
      idx = make({ embedder = hashing(), vector = "exact" })
      assert(idx:add_many(docs))
    end)
    teardown(function()
      idx:close()
    end)

    local FILTERS = {
      { kind = "review" }, { year = { gte = 2002, lte = 2004 } }, { tags = "t1" },
      { tags = { "t2", "t13" }, open = true }, { score = { gte = 2.5 } },
      { open = false, kind = "study" },
      { doc_id = { docs[3].id, docs[7].id, docs[9].id, "missing" } },
      { year = 2003, kind = "review" },
      { year = { lte = 2001 } }, { kind = "none" },
    }

    it("filters inside each list: equal to brute force over the matching documents", function()
      for _, f in ipairs(FILTERS) do
        for _, q in ipairs(QUERIES) do
          for _, mode in ipairs({ "bm25", "vector" }) do
            local all = idx:search(q, { mode = mode, k = 1000 })
            local want = {}
            for _, h in ipairs(all) do
              if passes(byid[h.doc_id], f) and #want < 10 then
                want[#want + 1] = h
              end
            end
            local got = idx:search(q, { mode = mode, k = 10, filter = f })
            same_hits(want, got, mode .. " " .. q)
          end
        end
      end
    end)

    it("returns k hits whenever k documents match the filter (vector mode)", function()
      for _, f in ipairs(FILTERS) do
        local matching = 0
        for _, d in ipairs(docs) do
          matching = matching + (passes(d, f) and 1 or 0)
        end
        local got = idx:search("anything at all", { mode = "vector", k = 5, filter = f })
        assert.are.equal(math.min(5, matching), #got)
      end
    end)

    it("hybrid is rag.fuse.rrf over the index's own two lists", function()
      for _, q in ipairs(QUERIES) do
        local b = idx:search(q, { mode = "bm25", k = 50 })
        local v = idx:search(q, { mode = "vector", k = 50 })
        local fused = rag.fuse.rrf({ b, v })
        local got = idx:search(q, { mode = "hybrid", k = 10 })
        assert.are.equal(math.min(10, #fused), #got, q)
        for i = 1, #got do
          assert.are.equal(fused[i].id, got[i].id, q)
          assert.is_true(math.abs(fused[i].score - got[i].score) < 1e-12, q)
          local rb, rv
          for r, h in ipairs(b) do
            rb = rb or (h.id == got[i].id and r or nil)
          end
          for r, h in ipairs(v) do
            rv = rv or (h.id == got[i].id and r or nil)
          end
          assert.are.same({ bm25 = rb, vector = rv }, got[i].ranks, q)
        end
        local w = rag.fuse.rrf({ b, v }, { weights = { 0.7, 0.3 } })
        got = idx:search(q, { mode = "hybrid", k = 10, weights = { bm25 = 0.7, vector = 0.3 } })
        for i = 1, #got do
          assert.are.equal(w[i].id, got[i].id, q)
        end
        local k20 = rag.fuse.rrf({ b, v }, { k = 20 })
        got = idx:search(q, { mode = "hybrid", k = 10, rrf = { k = 20 } })
        for i = 1, #got do
          assert.are.equal(k20[i].id, got[i].id, q)
          assert.is_true(math.abs(k20[i].score - got[i].score) < 1e-12, q)
        end
      end
    end)

    it("defaults to bm25 with the lexical hashing embedder and without one", function()
      assert.are.equal("bm25", idx:default_mode())
      same_hits(idx:search(QUERIES[1], { mode = "bm25" }), idx:search(QUERIES[1]), "default")
      local semantic = { embed = function(_, texts, o) return hashing():embed(texts, o) end,
        dim = function() return 64 end, name = "semantic-test" }
      local s = make({ embedder = semantic })
      assert.are.equal("hybrid", s:default_mode())
      s:close()
      local b = make({ embedder = false })
      assert.are.equal("bm25", b:default_mode())
      b:close()
    end)

    it("groups by document: the best chunk of each, k documents", function()
      local small = make({ embedder = hashing(), vector = "exact",
        chunk = { size = 48, overlap = 0 } })
      small:add_many(docs)
      assert.is_true(small:stats().leaves > 2 * #docs)
      for _, q in ipairs(QUERIES) do
        local all = small:search(q, { mode = "vector", k = 10000 })
        local want, seen = {}, {}
        for _, h in ipairs(all) do
          if not seen[h.doc_id] and #want < 7 then
            seen[h.doc_id] = true
            want[#want + 1] = h
          end
        end
        local got = small:search(q, { mode = "vector", k = 7, group = "doc", fetch_k = 5 })
        same_hits(want, got, q)
        assert.are.equal(7, #got)
      end
      small:close()
    end)

    it("widens hits to their neighbouring sentences (sentence windows)", function()
      local text = "One fish swims. Two birds fly. Red apples grow. Blue whales sing. "
        .. "Old trees stand."
      local w = make({ embedder = false, chunker = "sentences", chunk = { size = 8 } })
      w:add({ id = "s", text = text })
      local tok = rag.tokenizer.get("cl100k_base")
      local chunks = rag.chunk.sentences(text, { size = 8, tokenizer = tok })
      assert.are.equal(5, #chunks)
      local hit = w:search("apples", { expand = { window = 1 } })[1]
      assert.are.equal("s#3", hit.id)
      assert.are.equal(chunks[2].start, hit.start)
      assert.are.equal(chunks[4].stop, hit.stop)
      assert.are.equal("Two birds fly. Red apples grow. Blue whales sing.", hit.text)
      hit = w:search("fish", { expand = { window = 2 } })[1]
      assert.are.equal(1, hit.start)
      assert.are.equal(chunks[3].stop, hit.stop)
      hit = w:search("trees", { expand = { window = 9 } })[1]
      assert.are.equal(text, hit.text)
      w:close()
    end)

    it("raises for bad search options", function()
      local function raises(pat, o)
        local ok, err = pcall(idx.search, idx, "q", o)
        assert.is_false(ok, pat)
        assert.matches(pat, tostring(err))
      end
      raises("unknown option 'top'", { top = 3 })
      raises("option 'mode' must be \"hybrid\"", { mode = "fuzzy" })
      raises("option 'group' must be \"doc\"", { group = "chunk" })
      raises("filter.year: a range is", { filter = { year = { gte = 1, x = 2 } } })
      raises("filter.kind must be a value, a non%-empty list or a range",
        { filter = { kind = {} } })
      raises("expand: unknown option 'sentences'", { expand = { sentences = 2 } })
      local bm = make({ embedder = false })
      local ok, err = pcall(bm.search, bm, "q", { mode = "vector" })
      assert.is_false(ok)
      assert.matches("needs the embedder", err)
      bm:close()
    end)
  end)
end

return M
