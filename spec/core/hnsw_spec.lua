-- rag.hnsw: recall against exact search on seeded embedding-like data,
-- determinism for a seed, removals (tombstones never returned, recall over
-- the rest, rebuilds), replacement, filters (exact and through the graph),
-- refused vectors, memory per vector, persistence (round trips, resumed
-- building, every truncation, bit flips) and out-of-memory paths.
local rag = require("rag")
local helpers = require("spec.helpers")
local data = require("spec.vecdata")

local hnsw = rag.hnsw

local function build(opts, vectors, first)
  local h = hnsw.new(opts)
  for i = first or 1, #vectors do
    h:add("v" .. i, vectors[i])
  end
  return h
end

-- Mean recall@k of h against an exact rag.vec over the same live vectors.
local function recall(h, exact, qs, k, ef)
  local sum = 0
  local ref = exact:search_batch(qs, k)
  for i, q in ipairs(qs) do
    sum = sum + data.recall(h:search(q, k, { ef = ef }), ref[i])
  end
  return sum / #qs
end

local function exact_of(opts, vectors, skip)
  local v = rag.vec.new({ dim = opts.dim, metric = opts.metric, dtype = opts.dtype })
  for i, x in ipairs(vectors) do
    if not (skip and skip["v" .. i]) then
      v:add("v" .. i, x)
    end
  end
  return v
end

local DIM = 24
local VS = data.lowrank(21, 3000, DIM, 8)
local QS = data.lowrank(22, 100, DIM, 8)

describe("rag.hnsw search", function()
  it("finds at least 95% of the exact top 10 on embedding-like data", function()
    for _, metric in ipairs({ "cosine", "dot", "l2" }) do
      local opts = { dim = DIM, metric = metric }
      local h = build(opts, VS)
      assert.equal(3000, #h)
      local r = recall(h, exact_of(opts, VS), QS, 10, 64)
      assert.is_true(r >= 0.95, metric .. " recall " .. r)
    end
  end)

  it("keeps up to 2 M links a node at level 0", function()
    for _, m in ipairs({ 8, 16 }) do
      local h = build({ dim = DIM, M = m }, VS)
      local s = h:stats()
      assert.equal(2 * m, s.links_max)
      -- every node links to at least one other; a graph capped at M a list
      -- has a mean degree below M
      assert.is_true(s.links >= s.count, "links " .. s.links)
      assert.is_true(s.links / s.count > 0.85 * m, "mean degree " .. s.links / s.count)
    end
  end)

  it("keeps recall with f16 and i8 rows", function()
    for _, dtype in ipairs({ "f16", "i8" }) do
      local opts = { dim = DIM, dtype = dtype }
      local h = build(opts, VS)
      local r = recall(h, exact_of({ dim = DIM }, VS), QS, 10, 64)
      assert.is_true(r >= 0.9, dtype .. " recall " .. r)
      assert.equal(dtype, h:stats().dtype)
    end
  end)

  it("returns every vector once when k and ef cover the index; scores are exact", function()
    local vs = data.random(23, 150, 6)
    local h = build({ dim = 6, metric = "l2", M = 4, ef_construction = 20 }, vs)
    local items = {}
    for i, x in ipairs(vs) do
      items["v" .. i] = x
    end
    local hits = h:search(vs[1], 500, { ef = 500 })
    local ref = data.topk("l2", items, vs[1], 500)
    assert.equal(150, #hits)
    for i = 1, 150 do
      assert.equal(ref[i].id, hits[i].id)
      assert.is_true(math.abs(ref[i].score - hits[i].score) <= 1e-4 * math.max(1, -ref[i].score))
    end
    assert.same({}, hnsw.new({ dim = 3 }):search({ 1, 2, 3 }, 5))
  end)

  -- f32 rows are stored split (high halves, then low halves) and the walk
  -- reads only the high halves; the hits must still carry exact scores, the
  -- same bit for bit as rag.vec's kernels of the same kind give, and the file
  -- must hold the rows as plain float32.
  it("scores f32 hits exactly though the walk reads half of each row", function()
    local dim = 29 -- a 16-wide step, an 8-wide step and a tail of 5
    local vs = data.lowrank(31, 600, dim, 6)
    local qs = data.lowrank(32, 20, dim, 6)
    for _, metric in ipairs({ "cosine", "dot", "l2" }) do
      for _, simd in ipairs({ true, false }) do
        local opts = { dim = dim, metric = metric, simd = simd }
        local h = build(opts, vs)
        local kernel = h:stats().kernel
        local fast = { avx512bf16 = metric ~= "l2", avx512 = true, avx2 = true, portable = true }
        assert.is_true(simd and fast[kernel] or kernel == "portable", kernel)
        local exact = rag.vec.new({ dim = dim, metric = metric, simd = simd })
        for i, x in ipairs(vs) do
          exact:add("v" .. i, x)
        end
        for _, q in ipairs(qs) do
          local hits = h:search(q, 10)
          assert.equal(10, #hits)
          for _, hit in ipairs(hits) do
            local ref = exact:search(q, 1, { filter = { hit.id } })[1]
            assert.equal(ref.score, hit.score, metric .. " " .. kernel .. " " .. hit.id)
          end
        end
        local path = helpers.tmpname()
        assert(h:save(path))
        local bytes = helpers.read(path)
        os.remove(path)
        local row = rag.vec.pack(h:get("v7"))
        assert.is_truthy(bytes:find(row, 1, true), metric)
        if metric ~= "cosine" then
          assert.equal(rag.vec.pack(vs[7]), row)
        end
      end
    end
  end)

  it("breaks ties by id", function()
    local h = hnsw.new({ dim = 2, metric = "dot" })
    for _, id in ipairs({ "d", "b", "a", "c" }) do
      h:add(id, { 1, 1 })
    end
    local ids = {}
    for i, x in ipairs(h:search({ 1, 0 }, 4)) do
      ids[i] = x.id
    end
    assert.same({ "a", "b", "c", "d" }, ids)
  end)

  it("is deterministic for a seed", function()
    local a = build({ dim = DIM, seed = 7 }, VS)
    local b = build({ dim = DIM, seed = 7 }, VS)
    local c = build({ dim = DIM, seed = 8 }, VS)
    local pa, pb, pc = helpers.tmpname(), helpers.tmpname(), helpers.tmpname()
    assert(a:save(pa))
    assert(b:save(pb))
    assert(c:save(pc))
    assert.equal(helpers.read(pa), helpers.read(pb))
    assert.not_equal(helpers.read(pa), helpers.read(pc))
    for i = 1, 20 do
      assert.same(a:search(QS[i], 10), b:search(QS[i], 10))
    end
    os.remove(pa)
    os.remove(pb)
    os.remove(pc)
  end)

  it("filters: every hit passes; a selective filter is searched exactly", function()
    local opts = { dim = DIM }
    local h = build(opts, VS)
    local small, broad = {}, {}
    for i = 1, 3000 do
      if i % 97 == 0 then
        small[#small + 1] = "v" .. i
      end
      if i % 3 == 0 then
        broad["v" .. i] = true
      end
    end
    local exact = exact_of(opts, VS)
    for i = 1, 10 do
      assert.same(exact:search(QS[i], 10, { filter = small }),
        h:search(QS[i], 10, { filter = small }))
      local got = h:search(QS[i], 10, { filter = broad, ef = 128 })
      assert.equal(10, #got)
      for _, x in ipairs(got) do
        assert.is_true(broad[x.id])
      end
      local ref = exact:search(QS[i], 10, { filter = broad })
      assert.is_true(data.recall(got, ref) >= 0.7)
    end
    assert.same({}, h:search(QS[1], 10, { filter = { "nope" } }))
  end)
end)

describe("rag.hnsw changes", function()
  it("grows after a rebuild to a capacity of no whole pages", function()
    -- rows of 4,000 bytes: the 1,100 rows left after the removals fill
    -- 4.4 MB, past the 4 MB from which rows are advised huge pages, and end
    -- inside a page. The advice once split the mapping and every later add
    -- failed with "not enough memory".
    local rows = data.random(31, 2400, 1000)
    local h = hnsw.new({ dim = 1000, M = 4, ef_construction = 8 })
    for i = 1, 2300 do
      h:add("v" .. i, rows[i])
    end
    for i = 1, 1200 do
      h:remove("v" .. i)
    end
    assert.equal(1, h:stats().rebuilds)
    for i = 2301, 2400 do
      h:add("v" .. i, rows[i])
    end
    assert.equal(1200, #h)
    h:close()
  end)

  it("counts its levels: none when empty, at least one with a vector", function()
    for seed = 1, 20 do
      local h = hnsw.new({ dim = 2, seed = seed })
      assert.equal(0, h:stats().levels)
      h:add("a", { 1, 0 })
      assert.is_true(h:stats().levels >= 1, "seed " .. seed)
      h:remove("a")
      h:close()
    end
  end)

  it("never returns removed ids and keeps recall over the rest", function()
    local opts = { dim = DIM }
    local h = build(opts, VS)
    local gone = {}
    local pick = helpers.rng(24)
    while #h > 2400 do
      local id = "v" .. pick(3000)
      if not gone[id] then
        assert.is_true(h:remove(id))
        gone[id] = true
      end
    end
    assert.is_false(h:remove(next(gone)))
    assert.equal(600, h:stats().dead)
    for _, q in ipairs(QS) do
      for _, x in ipairs(h:search(q, 50)) do
        assert.is_nil(gone[x.id])
      end
    end
    local r = recall(h, exact_of(opts, VS, gone), QS, 10, 64)
    assert.is_true(r >= 0.95, "recall after removals " .. r)
  end)

  it("replaces a vector: the new one is found, the old one is gone", function()
    local h = build({ dim = DIM }, VS, 2000)
    h:add("v2500", VS[1])
    assert.equal(1001, #h)
    assert.equal("v2500", h:search(VS[1], 1)[1].id)
    for _, x in ipairs(h:search(VS[2500], 10)) do
      assert.is_true(x.id ~= "v2500" or x.score < 0.999)
    end
    assert.equal(1, h:stats().dead)
  end)

  it("keeps every row intact while its storage grows and moves", function()
    -- rows start on 64-byte lines, so a grown block that lands elsewhere
    -- moves them; odd dims give rows that are not a multiple of 64 bytes
    for _, dim in ipairs({ 1, 3, 29, 67 }) do
      for _, dtype in ipairs({ "f32", "f16", "i8" }) do
        local h = hnsw.new({ dim = dim, metric = "l2", dtype = dtype, M = 4,
          ef_construction = 8 })
        local vs, junk = data.lowrank(30 + dim, 300, dim, 1), {}
        for i, x in ipairs(vs) do
          h:add("v" .. i, x)
          junk[i % 7 + 1] = string.rep("x", i * 37) -- other blocks come and go
          if i % 50 == 0 or i == #vs then
            for j = 1, i do
              local want = rag.vec.new({ dim = dim, metric = "l2", dtype = dtype })
              want:add("w", vs[j])
              assert.equal(rag.vec.pack(want:get("w")), rag.vec.pack(h:get("v" .. j)))
            end
          end
        end
        assert.equal(7, #junk)
        h:close()
      end
    end
  end)

  it("rebuilds once tombstones outnumber live nodes, and on compact()", function()
    local opts = { dim = DIM }
    local h = build(opts, VS, 2001)
    for i = 2001, 2600 do
      h:remove("v" .. i)
    end
    -- the 501st removal left 499 live nodes: rebuilt then; 99 removals since
    assert.equal(1, h:stats().rebuilds)
    assert.equal(99, h:stats().dead)
    assert.equal(400, #h)
    for i = 2601, 2650 do
      h:remove("v" .. i)
    end
    assert.equal(149, h:stats().dead)
    assert.is_true(h:compact())
    local s = h:stats()
    assert.equal(0, s.dead)
    assert.equal(350, s.count)
    assert.equal(2, s.rebuilds)
    local gone = {}
    for i = 1, 2650 do
      gone["v" .. i] = true
    end
    assert.is_true(recall(h, exact_of(opts, VS, gone), QS, 10, 64) >= 0.95)
    for i = 2651, 3000 do
      h:remove("v" .. i)
    end
    assert.equal(0, #h)
    assert.same({}, h:search(QS[1], 5))
    h:add("again", VS[1])
    assert.equal("again", h:search(QS[1], 5)[1].id)
  end)

  it("keeps new vectors reachable after the only live one is replaced", function()
    for seed = 1, 20 do
      local h = hnsw.new({ dim = 2, seed = seed })
      h:add("a", { 1, 0 })
      h:add("a", { 0, 1 })
      for i = 1, 8 do
        h:add("n" .. i, { i, 1 })
      end
      assert.equal(9, #h)
      assert.equal(9, #h:search({ 0, 1 }, 10, { ef = 8 }), "seed " .. seed)
    end
  end)

  it("answers a huge k without a huge beam", function()
    local h = build({ dim = 4, M = 4 }, data.random(30, 50, 4))
    assert.equal(50, #h:search({ 1, 2, 3, 4 }, 1e12))
    assert.is_true(h:stats().memory < 1e6)
  end)

  it("refuses bad vectors with a clear error, leaving the index unchanged", function()
    local h = build({ dim = 3, M = 4 }, data.random(25, 30, 3))
    local before = h:search({ 1, 1, 1 }, 30)
    for _, c in ipairs({
      { { 1, 0 / 0, 0 }, "rag.hnsw.add: component 2 is NaN" },
      { { 1, 0, -math.huge }, "rag.hnsw.add: component 3 is infinite" },
      { { 0, 0, 0 }, "rag.hnsw.add: zero vector under cosine" },
      { { 1, 2 }, "rag.hnsw.add: vector has 2 components, the index has dim 3" },
    }) do
      assert.has_error(function() h:add("v1", c[1]) end, c[2])
      assert.has_error(function() h:add("new", c[1]) end, c[2])
    end
    assert.same(before, h:search({ 1, 1, 1 }, 30))
    assert.equal(0, h:stats().dead)
    assert.has_error(function() h:search({ 0, 0, 0 }) end,
      "rag.hnsw.search: zero vector under cosine")
  end)

  it("stays within dim * 4 + M * 8 + 64 bytes per vector at f32", function()
    local n, dim = 3000, 32
    local vs = data.lowrank(26, n, dim, 8)
    for _, dtype in ipairs({ "f32", "f16", "i8" }) do
      local h = build({ dim = dim, capacity = n, dtype = dtype }, vs)
      local per = h:stats().memory / n
      assert.is_true(per <= dim * 4 + 16 * 8 + 64, dtype .. " " .. per)
      if dtype ~= "f32" then
        assert.is_true(per <= dim * (dtype == "f16" and 2 or 1) + 4 + 16 * 8 + 64)
      end
    end
  end)
end)

describe("rag.hnsw misuse", function()
  it("raises for bad options, arguments and a closed index", function()
    local function raises(pat, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pat)
      assert.matches(pat, tostring(err), 1, true)
    end
    raises("option 'dim' is required", function() hnsw.new({ M = 4 }) end)
    raises("option 'M' must be an integer in [2, 256]", function() hnsw.new({ dim = 2, M = 1 }) end)
    raises("option 'ef_construction' must be", function()
      hnsw.new({ dim = 2, ef_construction = 0 })
    end)
    raises("option 'ef_search' must be", function() hnsw.new({ dim = 2, ef_search = 1.5 }) end)
    raises("option 'seed' must be", function() hnsw.new({ dim = 2, seed = -1 }) end)
    raises("unknown option 'm'", function() hnsw.new({ dim = 2, m = 16 }) end)
    local h = hnsw.new({ dim = 2 })
    raises("option 'ef' must be", function() h:search({ 1, 1 }, 1, { ef = 0 }) end)
    raises("unknown option 'k'", function() h:search({ 1, 1 }, 1, { k = 2 }) end)
    h:add("a", { 1, 1 })
    assert.equal("rag.hnsw (1 vectors, dim 2)", tostring(h))
    h:close()
    h:close()
    assert.equal("rag.hnsw (closed)", tostring(h))
    for _, f in ipairs({
      function() h:add("a", { 1, 1 }) end, function() h:search({ 1, 1 }) end,
      function() h:remove("a") end, function() return #h end, function() h:stats() end,
      function() h:save("/tmp/x") end, function() h:compact() end, function() h:get("a") end,
    }) do
      raises("index is closed", f)
    end
  end)
end)

describe("rag.hnsw persistence", function()
  it("refuses a directory, a device and a FIFO at once, with code io", function()
    helpers.rejects_irregular(hnsw.load, "rag.hnsw.load")
  end)

  it("round-trips with tombstones: same results, same bytes, same later growth", function()
    local opts = { dim = DIM, metric = "l2", dtype = "f16", M = 8, seed = 3 }
    local a = build(opts, VS, 2501)
    for i = 2501, 2600 do
      a:remove("v" .. i)
    end
    local p, p2 = helpers.tmpname(), helpers.tmpname()
    assert.is_true(a:save(p))
    local b = assert(hnsw.load(p))
    local sa, sb = a:stats(), b:stats()
    sa.memory, sb.memory = nil, nil
    assert.same(sa, sb)
    for i = 1, 20 do
      assert.same(a:search(QS[i], 10), b:search(QS[i], 10))
    end
    assert.is_true(b:save(p2))
    assert.equal(helpers.read(p), helpers.read(p2))
    -- building on after a load gives the graph building on without one gives
    for _, x in ipairs({ a, b }) do
      for i = 2001, 2100 do
        x:add("v" .. i, VS[i])
      end
      x:remove("v2700")
    end
    assert.is_true(a:save(p))
    assert.is_true(b:save(p2))
    assert.equal(helpers.read(p), helpers.read(p2))
    os.remove(p)
    os.remove(p2)
  end)

  it("reports io, format and version failures as nil, msg, code", function()
    local ok, msg, code = hnsw.load("/nonexistent/x.hnsw")
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.matches("^rag.hnsw.load: '/nonexistent/x.hnsw': ", msg)
    local p = helpers.tmpname()
    assert.is_true(rag.vec.new({ dim = 2 }):save(p))
    ok, msg, code = hnsw.load(p)
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("not an hnsw index %(bad magic%)", msg)
    assert.is_true(hnsw.new({ dim = 2 }):save(p))
    assert.equal(0, #assert(hnsw.load(p)))
    helpers.write(p, helpers.with_version(helpers.read(p), 9))
    code = select(3, hnsw.load(p))
    assert.equal("version", code)
    os.remove(p)
  end)

  it("raises on a path with a NUL byte, touching no file of the shorter name", function()
    local p = helpers.tmpname()
    local h = build({ dim = 3, M = 4 }, data.random(29, 10, 3))
    assert.has_error(function() h:save(p .. "\0.hnsw") end,
      "rag.hnsw.save: path contains a NUL byte")
    assert.is_false(helpers.exists(p))
    assert.is_true(h:save(p))
    assert.has_error(function() hnsw.load(p .. "\0.hnsw") end,
      "rag.hnsw.load: path contains a NUL byte")
    os.remove(p)
  end)

  it("rejects every truncation and bit flips of a saved file", function()
    local h = build({ dim = 4, M = 2, ef_construction = 8, dtype = "i8" }, data.random(27, 40, 4))
    h:remove("v3")
    assert.is_true(h:stats().levels > 1)
    local p = helpers.tmpname()
    assert.is_true(h:save(p))
    helpers.rejects_damage(hnsw.load, p, 300, 28)
    assert.is_truthy(hnsw.load(p))
    os.remove(p)
  end)

  it("rejects a graph that breaks its rules even with every checksum right", function()
    -- M = 2: a level-0 list is 1 + 4 u32 (count, links), see docs/api.md
    local h = build({ dim = 4, M = 2, ef_construction = 8 }, data.random(29, 40, 4))
    h:remove("v5")
    local p = helpers.tmpname()
    assert.is_true(h:save(p))
    local good = helpers.read(p)
    local sec = {}
    for _, x in ipairs(helpers.sections(good)) do
      sec[x.tag] = x
    end
    -- the nodes: flags (level | 0x80 for a tombstone) and ids
    local nodes, at = {}, sec.NODE.at + 1 -- a count under 128 is one byte
    assert.equal(40, good:byte(sec.NODE.at))
    for i = 0, 39 do
      local len = good:byte(at + 1)
      nodes[i] = { flags = good:byte(at), at = at, len = len }
      at = at + 2 + len
    end
    local entry = helpers.le(good, sec.PARM.at + 34, 4)
    local maxlevel = good:byte(sec.PARM.at + 38)
    assert.equal(maxlevel, nodes[entry].flags % 128)
    assert.is_true(maxlevel > 0)
    local function list(i) -- where node i's level-0 list starts, and its links
      local a = sec.LNK0.at + i * 5 * 4
      local n, links = helpers.le(good, a, 4), {}
      for k = 1, n do
        links[k] = helpers.le(good, a + 4 * k, 4)
      end
      return a, links
    end
    local function refused(bytes, why)
      helpers.refused_resigned(hnsw.load, "rag.hnsw.load", p, bytes, why)
    end
    local a0, links0 = list(0)
    assert.is_true(#links0 >= 2)
    refused(helpers.splice(good, a0 + 4, helpers.u32(0)), "a node linked to itself")
    refused(helpers.splice(good, a0 + 8, helpers.u32(links0[1])), "a link twice in one list")
    for i = 0, 39 do -- the entry point moved to a node below the top level
      if nodes[i].flags % 128 < maxlevel and nodes[i].flags < 128 then
        refused(helpers.splice(good, sec.PARM.at + 34, helpers.u32(i)), "a low entry point")
        break
      end
    end
    for i = 0, 39 do -- a live node marked a tombstone, keeping its id
      if i ~= entry and nodes[i].flags < 128 then
        refused(helpers.splice(good, nodes[i].at, string.char(nodes[i].flags + 128)),
          "a tombstone with an id")
        break
      end
    end
    helpers.write(p, helpers.resign(good)) -- the re-signing itself changes nothing
    assert.equal(39, #assert(hnsw.load(p)))
    os.remove(p)
  end)
end)

describe("rag.hnsw out of memory", function()
  if not rag.core._fail_alloc then
    it("needs a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  it("add, replace, search, compact, save and load fail cleanly at every fault point", function()
    helpers.oom_walk(function() hnsw.new({ dim = 4 }):close() end)
    local vs = data.random(29, 80, 4)
    local h = build({ dim = 4, M = 3, ef_construction = 10 }, vs, 11)
    h:remove("v12")
    local function snap()
      local s = h:stats()
      s.memory = nil
      return { s, h:search(vs[1], 80, { ef = 80 }) }
    end
    local before = snap()
    local function unchanged()
      assert.same(before, snap())
    end
    local p = helpers.tmpname()
    assert(h:save(p))
    local bytes = helpers.read(p)
    helpers.oom_walk(function() h:add("v1", vs[1]) end, unchanged)
    h:remove("v1")
    before = snap()
    helpers.oom_walk(function() h:add("v20", vs[2]) end, unchanged)
    before = snap()
    helpers.oom_walk(function() h:search(vs[3], 5, { filter = { "v20", "v30" } }) end, unchanged)
    helpers.oom_walk(function() h:search(vs[3], 5, { ef = 300 }) end, unchanged)
    helpers.oom_walk(function() assert(h:compact()) end, unchanged)
    assert.equal(0, h:stats().dead)
    helpers.oom_walk(function() assert(h:save(p)) end)
    assert.is_true(helpers.oom_walk(function() assert(hnsw.load(p)):close() end) >= 3)
    assert.is_string(bytes)
    os.execute("rm -f " .. p .. " " .. p .. ".tmp-*")
  end)
end)
