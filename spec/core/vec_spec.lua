-- rag.vec: exact search against scores computed in Lua for every metric and
-- dtype, the AVX2 kernels against the portable ones, search_batch against
-- search, ids (replace, swap-remove, ties, filters), refused vectors leaving
-- the index unchanged, persistence (round trips, every truncation, bit
-- flips, versions) and out-of-memory paths.
local rag = require("rag")
local helpers = require("spec.helpers")
local data = require("spec.vecdata")

local vec = rag.vec
local METRICS = { "cosine", "dot", "l2" }
local DTYPES = { "f32", "f16", "i8" }

local function build(opts, vectors)
  local v = vec.new(opts)
  for i, x in ipairs(vectors) do
    v:add("v" .. i, x)
  end
  return v
end

-- The stored (decoded) vectors of v, by id.
local function stored(v, n)
  local t = {}
  for i = 1, n do
    t["v" .. i] = v:get("v" .. i)
  end
  return t
end

-- r1 just above r2 for q, among 50 random rows: the first pass's bound
-- must keep r1 (its exact score above r2's) and rank both exactly.
local function near_tie(v, q, r1, r2, dim)
  v:add("r2", r2)
  v:add("r1", r1)
  for i, x in ipairs(data.random(dim, 50, dim)) do v:add("f" .. i, x) end
  assert.equal("r1", v:search(q, 1)[1].id, "dim " .. dim)
  local got = v:search(q, 2)
  assert.same({ "r1", "r2" }, { got[1].id, got[2].id })
  assert.same(v:search(q, 2, { filter = { "r1", "r2" } }), got)
end

local function near(a, b, tol)
  return math.abs(a - b) <= tol * math.max(1, math.abs(a), math.abs(b))
end

-- v's top k for q against the exact scan of the filter path (every id of
-- all), hit for hit and bit for bit; returns both.
local function exact_hits(v, q, k, all, what)
  local got, want = v:search(q, k), v:search(q, k, { filter = all })
  assert.equal(#want, #got, what)
  for j = 1, #want do
    assert.equal(want[j].id, got[j].id, what .. " hit " .. j)
    assert.equal(want[j].score, got[j].score, what .. " hit " .. j)
  end
  return got, want
end

describe("rag.vec pack and unpack", function()
  it("round-trip float32 values and reject bad input", function()
    local t = { 1, -2.5, 0, 1e-3, 3.4e38 }
    local s = vec.pack(t)
    assert.equal(20, #s)
    assert.equal("\0\0\128\63", s:sub(1, 4)) -- 1.0f, little-endian
    local u = vec.unpack(s)
    assert.equal(5, #u)
    assert.equal(-2.5, u[2])
    assert.is_true(math.abs(u[4] - 1e-3) < 1e-10)
    assert.same({}, vec.unpack(""))
    assert.has_error(function() vec.pack({ 1, "x" }) end,
      "rag.vec.pack: element 2 must be a number, got string")
    assert.has_error(function() vec.unpack("abc") end,
      "rag.vec.unpack: length 3 is not a multiple of 4")
  end)

  it("write vectors as text that reads back to the same float32 values", function()
    assert.equal("[1,-2.5,0,0.001,3.4e+38]", vec.text({ 1, -2.5, 0, 1e-3, 3.4e38 }))
    assert.equal("[0.1,-2.5e-08]", vec.text(vec.pack({ 0.1, -2.5e-8 })))
    assert.equal("[]", vec.text(""))
    local r = helpers.rng(5)
    local t = {}
    for i = 1, 2000 do
      t[i] = (r(2000001) - 1000001) / (r(1000) * 997) * (i % 7 == 0 and 1e-20 or 1)
    end
    local packed = vec.pack(t)
    local back = {}
    for x in vec.text(packed):sub(2, -2):gmatch("[^,]+") do
      back[#back + 1] = tonumber(x)
      assert.is_true(#x <= 15, x) -- at most 9 significant digits, sign and exponent
    end
    assert.equal(packed, vec.pack(back))
    assert.has_error(function() vec.text("abc") end,
      "rag.vec.text: length 3 is not a multiple of 4")
    assert.has_error(function() vec.text({ 1, "x" }) end,
      "rag.vec.text: element 2 must be a number, got string")
    assert.has_error(function() vec.text({ 0 / 0 }) end, "rag.vec.text: element 1 is not finite")
  end)

  it("refuse NaN, infinities and numbers beyond float32, naming the element", function()
    assert.has_error(function() vec.pack({ 1, 2, 0 / 0 }) end, "rag.vec.pack: element 3 is NaN")
    assert.has_error(function() vec.pack({ math.huge }) end, "rag.vec.pack: element 1 is infinite")
    assert.has_error(function() vec.pack({ 0, -math.huge }) end,
      "rag.vec.pack: element 2 is infinite")
    assert.has_error(function() vec.pack({ 1, 1e300 }) end,
      "rag.vec.pack: element 2 is out of float32 range")
    assert.has_error(function() vec.pack({ 1, 2, -3.5e38 }) end,
      "rag.vec.pack: element 3 is out of float32 range")
    local max = 3.4028234663852886e38 -- the largest float32 packs as itself
    assert.same({ max, -max }, vec.unpack(vec.pack({ max, -max })))
  end)
end)

describe("rag.vec search", function()
  it("equals an exact search in Lua for every metric and dtype", function()
    local vs = data.random(1, 120, 19)
    local qs = data.random(2, 12, 19)
    for _, metric in ipairs(METRICS) do
      for _, dtype in ipairs(DTYPES) do
        local v = build({ dim = 19, metric = metric, dtype = dtype }, vs)
        local items = stored(v, #vs)
        for _, q in ipairs(qs) do
          local hits, ref = v:search(q, 10), data.topk(metric, items, q, 10)
          assert.equal(10, #hits)
          for i = 1, 10 do
            assert.equal(ref[i].id, hits[i].id, metric .. " " .. dtype)
            assert.is_true(near(ref[i].score, hits[i].score, 1e-5), metric .. " " .. dtype)
          end
        end
      end
    end
  end)

  it("stores f32 exactly, f16 rounded to nearest even and i8 with a per-row scale", function()
    local v = vec.new({ dim = 4, metric = "dot", dtype = "f16" })
    v:add("a", { 1 / 3, 65504, 1e-8, 3e-8 })
    assert.same({ 0.333251953125, 65504, 0, 2 ^ -24 }, v:get("a"))
    -- halfway between two f16 values rounds to the even one
    v:add("ties", { 1 + 2 ^ -11, 1 + 3 * 2 ^ -11, -(1 + 2 ^ -11), 1 + 2 ^ -11 + 2 ^ -20 })
    assert.same({ 1, 1 + 2 ^ -9, -1, 1 + 2 ^ -10 }, v:get("ties"))
    assert.has_error(function() v:add("b", { 0, 65520, 0, 0 }) end,
      "rag.vec.add: component 2 is out of range")
    -- removing a row moves the last one into its place, with its scale
    local moved = vec.new({ dim = 2, metric = "dot", dtype = "i8" })
    moved:add("big", { 100, 50 })
    moved:add("small", { 0.5, 0.25 })
    local before = moved:search({ 1, 1 }, 2)
    moved:remove("big")
    assert.same({ before[2] }, moved:search({ 1, 1 }, 2))
    local w = vec.new({ dim = 3, metric = "dot", dtype = "i8" })
    w:add("a", { 2, -1, 0.5 })
    local g = w:get("a")
    assert.is_true(near(g[1], 2, 1e-6))
    assert.is_true(near(g[2], -2 * 64 / 127, 1e-6)) -- -1 / (2/127) = -63.5 rounds to -64
    assert.is_true(near(g[3], 2 * 32 / 127, 1e-6))
    -- components so small that max / 127 underflows are stored as zeros
    w:add("tiny", { 1e-44, -1e-45, 0 })
    assert.same({ 0, 0, 0 }, w:get("tiny"))
    assert.equal(2, #w:search({ 1, 1, 1 }, 5))
    local c = vec.new({ dim = 2 })
    c:add("a", { 3, 4 })
    local u = c:get("a")
    assert.is_true(near(u[1], 0.6, 1e-7) and near(u[2], 0.8, 1e-7)) -- normalised at insert
    assert.is_nil(c:get("nope"))
  end)

  it("gives the same scores with the AVX2 kernels as with portable C", function()
    for _, dim in ipairs({ 1, 7, 8, 9, 15, 16, 17, 31, 33, 100 }) do
      local vs, qs = data.random(dim, 40, dim), data.random(dim + 1, 3, dim)
      for _, metric in ipairs(METRICS) do
        for _, dtype in ipairs(DTYPES) do
          local a = build({ dim = dim, metric = metric, dtype = dtype }, vs)
          local b = build({ dim = dim, metric = metric, dtype = dtype, simd = false }, vs)
          assert.equal("portable", b:stats().kernel)
          for _, q in ipairs(qs) do
            local x, y = a:search(q, 40), b:search(q, 40)
            local sx = {}
            for _, h in ipairs(x) do
              sx[h.id] = h.score
            end
            for _, h in ipairs(y) do
              assert.is_true(near(sx[h.id], h.score, 1e-5), dim .. metric .. dtype)
            end
          end
        end
      end
    end
  end)

  it("finds the exact top k of f32 rows from their high halves, hit for hit", function()
    -- f32 searches scan the rows' high 16 bits and score exactly only rows
    -- whose bound reaches the k-th best; the filter path scores every row
    -- exactly, so the two must agree bit for bit. Rows here are made to
    -- break loose bounds: twins that differ only in their low 16 bits,
    -- duplicates, norms from 1e-30 to 1e14, subnormal components, and
    -- components as large as the index takes (1e15).
    local unif, gauss = data.source(77)
    local function twin_of(x, low) -- x as a float with its low 16 bits set to `low`
      return vec.unpack(string.char(low % 256, math.floor(low / 256)) .. vec.pack({ x }):sub(3))[1]
    end
    for _, dim in ipairs({ 1, 3, 29, 64 }) do
      local rows = {}
      for i, x in ipairs(data.lowrank(dim, 150, dim, 4)) do
        local scale = 10 ^ (unif() * 44 - 30)
        local big, twin, sub = {}, {}, {}
        for d = 1, dim do
          big[d] = x[d] * scale
          twin[d] = twin_of(x[d], (i * 7919 + d * 104729) % 65536)
          sub[d] = d % 2 == 0 and x[d] * 1e-41 or x[d]
        end
        rows[#rows + 1], rows[#rows + 2], rows[#rows + 3] = x, twin, big
        rows[#rows + 4], rows[#rows + 5] = sub, x -- x again: a tie
      end
      local qs = { rows[1], rows[7], rows[13] }
      for _ = 1, 4 do
        local q = {}
        for d = 1, dim do q[d] = gauss() end
        qs[#qs + 1] = q
      end
      local huge = {}
      for d = 1, dim do huge[d] = d % 3 == 0 and -1e15 or 1e15 end
      for _, metric in ipairs(METRICS) do
        for _, simd in ipairs({ true, false, "avx2" }) do
          local v = vec.new({ dim = dim, metric = metric, simd = simd })
          local all = {}
          for i, x in ipairs(rows) do
            v:add("r" .. i, x)
            all[i] = "r" .. i
          end
          local function check(q, k)
            local _, want = exact_hits(v, q, k, all, metric .. " dim " .. dim)
            assert.same(want, v:search_batch({ q }, k)[1])
          end
          for _, q in ipairs(qs) do
            for _, k in ipairs({ 1, 10, 60, #rows + 5 }) do check(q, k) end
          end
          if metric ~= "cosine" then check(huge, 10) end
        end
      end
    end
  end)

  it("bounds f32 approximations as tightly as truncation allows, and no tighter", function()
    -- r1's components lose all but 2^-23 of 2^-7 to truncation, so its
    -- approximate score is as far below its exact one as the bound allows;
    -- r2 is exact in its high halves and ranks just below r1. A bound under
    -- about half the true error drops r1 and this fails.
    local function float(x) return vec.unpack(vec.pack({ x }))[1] end
    for _, dim in ipairs({ 16, 64, 100 }) do
      for _, case in ipairs({ { "dot", 1 }, { "l2", 100 } }) do
        for _, simd in ipairs({ true, false, "avx2" }) do
          local v = vec.new({ dim = dim, metric = case[1], simd = simd })
          local q, r1, r2 = {}, {}, {}
          for d = 1, dim do
            q[d] = case[2]
            r1[d] = float(1 + 2 ^ -7 - 2 ^ -23)
            r2[d] = d == 1 and 1 or 1 + 2 ^ -7
          end
          v:add("r2", r2)
          v:add("r1", r1)
          for i, x in ipairs(data.random(dim, 50, dim)) do v:add("f" .. i, x) end
          assert.equal("r1", v:search(q, 1)[1].id)
          local got = v:search(q, 2)
          assert.same({ "r1", "r2" }, { got[1].id, got[2].id })
          assert.same(v:search(q, 2, { filter = { "r1", "r2" } }), got)
        end
      end
    end
  end)

  it("breaks ties by id, takes k beyond the count and accepts packed vectors", function()
    local v = vec.new({ dim = 3, metric = "dot" })
    for _, id in ipairs({ "c", "a", "b", 10, 9 }) do
      v:add(id, { 1, 2, 3 })
    end
    local hits = v:search(vec.pack({ 1, 0, 0 }), 100)
    local ids = {}
    for i, h in ipairs(hits) do
      ids[i] = h.id
      assert.equal(1, h.score)
    end
    assert.same({ "10", "9", "a", "b", "c" }, ids)
    assert.same({}, vec.new({ dim = 3 }):search({ 1, 0, 0 }, 5))
  end)

  it("replaces an existing id and removes by moving the last row", function()
    local vs = data.random(3, 50, 8)
    local v = build({ dim = 8, metric = "l2" }, vs)
    assert.equal(50, #v)
    v:add("v7", vs[20])
    assert.equal(50, #v)
    assert.same(v:get("v20"), v:get("v7"))
    assert.is_true(v:remove("v1"))
    assert.is_false(v:remove("v1"))
    assert.is_true(v:remove("v50")) -- the last row
    assert.equal(48, #v)
    local items = stored(v, 50)
    assert.is_nil(items.v1)
    for i = 1, 10 do
      local q = vs[i]
      local hits, ref = v:search(q, 48), data.topk("l2", items, q, 48)
      assert.equal(48, #hits)
      for j = 1, 48 do
        assert.equal(ref[j].id, hits[j].id)
      end
    end
  end)

  it("filters by a set or a list of ids; unknown ids are ignored", function()
    local vs = data.random(4, 60, 6)
    local v = build({ dim = 6 }, vs)
    local items = stored(v, 60)
    local keep = { v3 = true, v9 = true, v11 = true, nope = true, v12 = false }
    local sub = { v3 = items.v3, v9 = items.v9, v11 = items.v11 }
    local ref = data.topk("cosine", sub, vs[1], 10)
    local a = v:search(vs[1], 10, { filter = keep })
    local b = v:search(vs[1], 10, { filter = { "v3", "v9", "v11", "v11", "nope" } })
    assert.equal(3, #a)
    assert.same(a, b)
    for i = 1, 3 do
      assert.equal(ref[i].id, a[i].id)
    end
    assert.same({}, v:search(vs[1], 10, { filter = {} }))
  end)

  it("search_batch equals one search per query, from lists or packed strings", function()
    local vs = data.lowrank(5, 700, 24, 6)
    for _, dtype in ipairs(DTYPES) do
      local v = build({ dim = 24, dtype = dtype }, vs)
      local qs = data.lowrank(6, 9, 24, 6)
      local packed = {}
      for i, q in ipairs(qs) do
        packed[i] = vec.pack(q)
      end
      local a = v:search_batch(qs, 7)
      local b = v:search_batch(table.concat(packed), 7)
      assert.equal(9, #a)
      for i, q in ipairs(qs) do
        assert.same(v:search(q, 7), a[i])
        assert.same(a[i], b[i])
      end
    end
    assert.same({}, vec.new({ dim = 2 }):search_batch({}, 3))
  end)
end)

describe("rag.vec refused vectors", function()
  it("raise a clear error and leave the index unchanged", function()
    for _, dtype in ipairs(DTYPES) do
      local v = build({ dim = 3, dtype = dtype }, data.random(7, 20, 3))
      local before = v:search({ 1, 1, 1 }, 20)
      local cases = {
        { { 1, 0 / 0, 0 }, "rag.vec.add: component 2 is NaN" },
        { { 1, 0, math.huge }, "rag.vec.add: component 3 is infinite" },
        { { -math.huge, 0, 1 }, "rag.vec.add: component 1 is infinite" },
        { { 0, 0, 0 }, "rag.vec.add: zero vector under cosine" },
        { { 1, 2e15, 0 }, "rag.vec.add: component 2 is out of range" },
        { { 1, 2 }, "rag.vec.add: vector has 2 components, the index has dim 3" },
        { vec.pack({ 1, 2 }), "rag.vec.add: a packed vector must have 12 bytes (dim 3), got 8" },
        { { 1, "2", 3 }, "rag.vec.add: component 2 must be a number, got string" },
        { 5, "rag.vec.add: vector must be a table of numbers or a packed string, got number" },
      }
      for _, c in ipairs(cases) do
        assert.has_error(function() v:add("v1", c[1]) end, c[2])
        assert.has_error(function() v:add("new", c[1]) end, c[2])
      end
      assert.equal(20, #v)
      assert.same(before, v:search({ 1, 1, 1 }, 20))
      assert.has_error(function() v:search({ 0, 0 / 0, 0 }) end,
        "rag.vec.search: component 2 is NaN")
      assert.has_error(function() v:search_batch({ { 1, 1, 1 }, { 0, 0, 0 } }) end,
        "rag.vec.search_batch: zero vector under cosine")
    end
    local d = vec.new({ dim = 2, metric = "dot" })
    d:add("z", { 0, 0 }) -- a zero vector is fine under dot and l2
    assert.equal(0, d:search({ 1, 1 }, 1)[1].score)
  end)

  it("raise for bad options, arguments and a closed index", function()
    local function raises(pat, f)
      local ok, err = pcall(f)
      assert.is_false(ok, pat)
      assert.matches(pat, tostring(err), 1, true)
    end
    raises("option 'dim' is required", function() vec.new({}) end)
    raises("option 'dim' must be an integer in [1, 65536]", function() vec.new({ dim = 0 }) end)
    raises("option 'dim' must be an integer", function() vec.new({ dim = 1.5 }) end)
    raises("option 'metric' must be", function() vec.new({ dim = 2, metric = "cos" }) end)
    raises("option 'dtype' must be", function() vec.new({ dim = 2, dtype = "f64" }) end)
    raises("unknown option 'dims'", function() vec.new({ dim = 2, dims = 3 }) end)
    raises("option 'simd' must be a boolean", function() vec.new({ dim = 2, simd = 1 }) end)
    raises("option 'simd' must be a boolean or \"avx2\", got \"sse\"",
      function() vec.new({ dim = 2, simd = "sse" }) end)
    local v = vec.new({ dim = 2 })
    raises("id must be a string or a number", function() v:add(nil, { 1, 1 }) end)
    raises("k must be a positive integer", function() v:search({ 1, 1 }, 0) end)
    raises("unknown option 'ef'", function() v:search({ 1, 1 }, 1, { ef = 3 }) end)
    raises("filter must be a set", function() v:search({ 1, 1 }, 1, { filter = { a = 1 } }) end)
    raises("packed queries must be a multiple of 8 bytes",
      function() v:search_batch("abc", 1) end)
    v:add("a", { 1, 1 })
    assert.equal("rag.vec (1 vectors, dim 2)", tostring(v))
    v:close()
    v:close()
    assert.equal("rag.vec (closed)", tostring(v))
    for _, f in ipairs({
      function() v:add("a", { 1, 1 }) end, function() v:search({ 1, 1 }) end,
      function() v:remove("a") end, function() return #v end, function() v:stats() end,
      function() v:save("/tmp/x") end, function() v:search_batch({}) end,
      function() v:get("a") end,
    }) do
      raises("index is closed", f)
    end
  end)
end)

describe("rag.vec persistence", function()
  it("refuses a directory, a device and a FIFO at once, with code io", function()
    helpers.rejects_irregular(vec.load, "rag.vec.load")
  end)

  it("round-trips every metric and dtype: same results, same bytes", function()
    local vs = data.random(8, 80, 13)
    for _, metric in ipairs(METRICS) do
      for _, dtype in ipairs(DTYPES) do
        local v = build({ dim = 13, metric = metric, dtype = dtype }, vs)
        v:remove("v5")
        local p, p2 = helpers.tmpname(), helpers.tmpname()
        assert.is_true(v:save(p))
        local w = assert(vec.load(p))
        assert.same(v:stats().count, w:stats().count)
        assert.equal(metric, w:stats().metric)
        assert.equal(dtype, w:stats().dtype)
        for i = 1, 5 do
          assert.same(v:search(vs[i], 20), w:search(vs[i], 20))
        end
        assert.is_true(w:save(p2))
        assert.equal(helpers.read(p), helpers.read(p2))
        os.remove(p)
        os.remove(p2)
      end
    end
    local p = helpers.tmpname()
    assert.is_true(vec.new({ dim = 5 }):save(p))
    assert.equal(0, #assert(vec.load(p)))
    os.remove(p)
  end)

  it("reports io, format and version failures as nil, msg, code", function()
    local ok, msg, code = vec.load("/nonexistent/x.vec")
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.matches("^rag.vec.load: '/nonexistent/x.vec': ", msg)
    ok, msg, code = vec.new({ dim = 2 }):save("/nonexistent/dir/x")
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.matches("^rag.vec.save: ", msg)
    local p = helpers.tmpname()
    helpers.write(p, "RAGBM25\0 not a vector index")
    ok, msg, code = vec.load(p)
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("not a vector index %(bad magic%)", msg)
    assert.is_true(build({ dim = 3 }, data.random(9, 4, 3)):save(p))
    helpers.write(p, helpers.with_version(helpers.read(p), 4))
    ok, msg, code = vec.load(p)
    assert.is_nil(ok)
    assert.equal("version", code)
    assert.matches("newer version", msg)
    os.remove(p)
  end)

  it("raises on a path with a NUL byte, touching no file of the shorter name", function()
    local p = helpers.tmpname()
    local v = build({ dim = 3 }, data.random(9, 4, 3))
    assert.has_error(function() v:save(p .. "\0.vec") end,
      "rag.vec.save: path contains a NUL byte")
    assert.is_false(helpers.exists(p))
    assert.is_true(v:save(p))
    assert.has_error(function() vec.load(p .. "\0.vec") end,
      "rag.vec.load: path contains a NUL byte")
    os.remove(p)
  end)

  it("rejects every truncation and bit flips of a saved file", function()
    for _, dtype in ipairs(DTYPES) do
      local p = helpers.tmpname()
      local v = build({ dim = 5, dtype = dtype, metric = "l2" }, data.random(10, 12, 5))
      assert.is_true(v:save(p))
      helpers.rejects_damage(vec.load, p, 200, 11)
      assert.is_truthy(vec.load(p))
      os.remove(p)
    end
  end)
end)

describe("rag.vec AVX512-BF16 scan", function()
  -- Where the CPU has AVX512-BF16, dot and cosine searches of f32 rows scan
  -- the high plane with VDPBF16PS against the query rounded to bfloat16;
  -- its bound must also cover the query's remainder, the
  -- instruction's rounding and its flushing of subnormals to zero.
  local kernel = vec.new({ dim = 4, metric = "dot" }):stats().kernel
  if kernel ~= "avx512bf16" then
    it("needs a CPU with AVX512-BF16", function()
      pending("skipped: this CPU's kernel is " .. kernel .. ", not avx512bf16")
    end)
    return
  end

  local function float(x) return vec.unpack(vec.pack({ x }))[1] end
  local function with_low(x, low) -- x as a float with its low 16 bits set to `low`
    return vec.unpack(string.char(low % 256, math.floor(low / 256)) .. vec.pack({ x }):sub(3))[1]
  end

  it("finds the exact top k, hit for hit, on data made to break its bound", function()
    -- The filter path scores every row exactly with the same exact kernel;
    -- the scan must agree with it bit for bit. Dims cover VDPBF16PS's 32-wide
    -- steps and masked tails; rows and queries mix subnormal components,
    -- products that underflow, norms from 1e-38 to 1e15, twins differing in
    -- their low 16 bits, rows exact in bfloat16, duplicates and ties.
    local unif, gauss = data.source(4242)
    for _, dim in ipairs({ 1, 2, 17, 31, 32, 33, 64, 65, 100, 512 }) do
      local rows = {}
      for i, x in ipairs(data.lowrank(dim, 60, dim, 3)) do
        local scale = 10 ^ (unif() * 50 - 36)
        local big, twin, sub, exact, tiny = {}, {}, {}, {}, {}
        for d = 1, dim do
          big[d] = float(x[d] * scale)
          twin[d] = with_low(big[d], (i * 7919 + d * 104729) % 65536)
          sub[d] = d % 2 == 0 and x[d] * 1e-41 or x[d]
          exact[d] = with_low(x[d], 0)
          tiny[d] = x[d] * 1e-20 -- times a tiny query: products below 2^-126
        end
        for _, r in ipairs({ x, big, twin, sub, exact, tiny, exact }) do rows[#rows + 1] = r end
      end
      local huge = {}
      for d = 1, dim do huge[d] = d % 3 == 0 and -1e15 or 1e15 end
      rows[#rows + 1] = huge
      local qs = { rows[1], rows[3], rows[4], rows[5], rows[6] }
      for _, s in ipairs({ 1, 1e-25, 1e12, 1e-40 }) do
        local q, full, mixed = {}, {}, {}
        for d = 1, dim do
          q[d] = gauss() * s
          full[d] = with_low(q[d], 32768) -- a tie: the most rounding leaves over
          mixed[d] = d % 2 == 0 and q[d] * 1e-30 or q[d]
        end
        qs[#qs + 1], qs[#qs + 2], qs[#qs + 3] = q, full, mixed
      end
      for _, metric in ipairs({ "dot", "cosine" }) do
        local v = vec.new({ dim = dim, metric = metric })
        assert.equal("avx512bf16", v:stats().kernel)
        local all = {}
        for i, x in ipairs(rows) do
          v:add("r" .. i, x)
          all[i] = "r" .. i
        end
        for qi, q in ipairs(qs) do
          local ok = true
          for d = 1, dim do ok = ok and q[d] ~= 0 end
          if metric == "dot" or ok then
            for _, k in ipairs({ 1, 7, 50, #rows + 3 }) do
              local what = metric .. " dim " .. dim .. " query " .. qi .. " k " .. k
              local _, want = exact_hits(v, q, k, all, what)
              assert.same(want, v:search_batch({ q }, k)[1], what)
            end
          end
        end
      end
    end
  end)

  it("counts query components VDPBF16PS reads as zero", function()
    -- q = (2^-126, 2^-127): the second component is subnormal, so the scan
    -- drops it and scores b as 0, though b's exact score beats a's. Only the
    -- query's remainder in the bound keeps b.
    for _, dim in ipairs({ 2, 33, 64 }) do
      local v = vec.new({ dim = dim, metric = "dot" })
      local q, a, b = {}, {}, {}
      for d = 1, dim do
        q[d] = d % 2 == 1 and 2 ^ -126 or 2 ^ -127
        a[d] = d % 2 == 1 and 4e14 or 0
        b[d] = d % 2 == 1 and 0 or 1e15
      end
      v:add("a", a)
      v:add("b", b)
      local got = v:search(q, 1)
      assert.equal("b", got[1].id, "dim " .. dim)
      assert.same(v:search(q, 1, { filter = { "a", "b" } }), got)
    end
  end)

  it("bounds its approximations as tightly as truncation allows, and no tighter", function()
    -- As the f32 case above, but the query keeps bits beyond its bfloat16
    -- rounding. r1 loses nearly 2^-7 of each component to truncation
    -- and ranks just above r2, which is exact in its high halves; a bound
    -- under about half the true error drops r1 and this fails.
    local c = float(1 + 2 ^ -9 + 2 ^ -17 + 2 ^ -23)
    for _, dim in ipairs({ 16, 64, 100, 512 }) do
      local v = vec.new({ dim = dim, metric = "dot" })
      local q, r1, r2 = {}, {}, {}
      for d = 1, dim do
        q[d] = c
        r1[d] = float(1 + 2 ^ -7 - 2 ^ -23)
        r2[d] = d == 1 and 1 or 1 + 2 ^ -7
      end
      near_tie(v, q, r1, r2, dim)
    end
  end)
end)

describe("rag.vec sketch", function()
  -- With sketch = true, dot and cosine searches of f32 rows scan an int8
  -- copy of the rows first, only the query's nonzero components, and score
  -- exactly the rows its bound cannot rule out: the hits must be the exact
  -- search's, hit for hit and bit for bit, with the SIMD kernels and the
  -- portable ones, after any history of adds, replacements and removes.
  local function float(x) return vec.unpack(vec.pack({ x }))[1] end

  local function agree(v, plain, qs, all, what)
    for qi, q in ipairs(qs) do
      for _, k in ipairs(qi == 1 and { 1, 50, #all + 3 } or { 1, 50 }) do
        local w = what .. " query " .. qi .. " k " .. k
        local got = exact_hits(v, q, k, all, w)
        assert.same(plain:search(q, k), got, w)
      end
    end
  end

  it("finds the exact top k, hit for hit, on data made to break its bound", function()
    -- Rows: embedding-like ones, the same scaled from 1e-30 to 1e13, twins
    -- differing below the int8 step, one large component with the rest
    -- below half a step (all their codes 0), subnormal components, rows so
    -- small that their scale underflows, sparse rows; queries dense,
    -- sparse, subnormal and huge. Counts cross the blocks of 128 rows.
    local unif, gauss = data.source(5151)
    for _, dim in ipairs({ 1, 2, 17, 64, 512 }) do
      local rows = {}
      for i, x in ipairs(data.lowrank(dim + 7, 40, dim, 3)) do
        local scale = 10 ^ (unif() * 43 - 30)
        local big, twin, spike, sub, sparse, tiny = {}, {}, {}, {}, {}, {}
        for d = 1, dim do
          tiny[d] = x[d] * 1e-44 -- subnormal: the scale m / 127 underflows to 0
          big[d] = float(x[d] * scale)
          twin[d] = float(x[d] * (1 + 1e-3 * gauss()))
          spike[d] = d == 1 + i % dim and 100 or x[d] * 0.1
          sub[d] = d % 2 == 0 and x[d] * 1e-41 or x[d]
          sparse[d] = unif() < 0.2 and x[d] or 0
        end
        for _, r in ipairs({ x, big, twin, spike, sub, sparse, tiny }) do rows[#rows + 1] = r end
      end
      local qs = { rows[1], rows[4], rows[6] }
      for _, sc in ipairs({ 1, 1e-25, 1e12, 1e-40 }) do
        local q, sparse = {}, {}
        for d = 1, dim do
          q[d] = gauss() * sc
          sparse[d] = (d == 1 or unif() < 0.1) and q[d] or 0
        end
        qs[#qs + 1], qs[#qs + 2] = q, sparse
      end
      for _, metric in ipairs({ "dot", "cosine" }) do
        for _, simd in ipairs({ true, false, "avx2" }) do
          local v = vec.new({ dim = dim, metric = metric, sketch = true, simd = simd })
          local plain = vec.new({ dim = dim, metric = metric, simd = simd })
          assert.is_true(v:stats().sketch)
          local function zero(x)
            for d = 1, dim do
              if x[d] ~= 0 then return false end
            end
            return true
          end
          local all = {}
          for i, x in ipairs(rows) do
            if not zero(x) then
              v:add("r" .. i, x)
              plain:add("r" .. i, x)
              all[#all + 1] = "r" .. i
            end
          end
          local ok = {}
          for _, q in ipairs(qs) do
            local any = false
            for d = 1, dim do any = any or q[d] ~= 0 end
            if any then ok[#ok + 1] = q end
          end
          local what = metric .. " dim " .. dim .. " simd " .. tostring(simd)
          agree(v, plain, ok, all, what)
          -- churn: removes across blocks (the last row moves into the hole),
          -- replacements, new rows after the removes
          for i = 1, #rows, 3 do
            assert.equal(plain:remove("r" .. i), v:remove("r" .. i))
          end
          for i = 2, #rows, 5 do
            if v:get("r" .. i) and not zero(rows[#rows + 1 - i]) then
              v:add("r" .. i, rows[#rows + 1 - i])
              plain:add("r" .. i, rows[#rows + 1 - i])
            end
          end
          for i = 1, 20 do
            if not zero(rows[i * 2]) then
              v:add("n" .. i, rows[i * 2])
              plain:add("n" .. i, rows[i * 2])
            end
          end
          all = {}
          for i = 1, #rows do
            if v:get("r" .. i) then all[#all + 1] = "r" .. i end
          end
          for i = 1, 20 do
            if v:get("n" .. i) then all[#all + 1] = "n" .. i end
          end
          agree(v, plain, ok, all, what .. " after churn")
        end
      end
    end
  end)

  it("scores the rows its bound keeps best bound first, however many", function()
    -- near twins the int8 copy cannot tell apart: hundreds of rows reach
    -- the exact pass, which goes through them by upper bound and stops at
    -- the first below the k-th exact score, so any disorder drops a hit
    local unif, gauss = data.source(4242)
    local dim, base = 64, {}
    for d = 1, dim do base[d] = gauss() end
    for _, n in ipairs({ 20, 150, 700 }) do
      local v = vec.new({ dim = dim, metric = "dot", sketch = true })
      local plain = vec.new({ dim = dim, metric = "dot" })
      local all = {}
      for i = 1, n do
        local x = {}
        for d = 1, dim do x[d] = base[d] * (1 + 1e-4 * gauss()) + (unif() < 0.02 and 1e-3 or 0) end
        v:add("t" .. i, x)
        plain:add("t" .. i, x)
        all[i] = "t" .. i
      end
      for qi = 1, 6 do
        local q = {}
        for d = 1, dim do q[d] = base[d] + 0.05 * gauss() end
        for _, k in ipairs({ 1, 10, 50 }) do
          local what = ("twins n %d query %d k %d"):format(n, qi, k)
          assert.same(plain:search(q, k), exact_hits(v, q, k, all, what), what)
        end
      end
    end
  end)

  it("carries its threshold across spans of rows, and drops a floor guessed too high", function()
    -- More rows than a span (16,384) are taken span by span, the threshold
    -- carried on. A span starts from a floor guessed from every 16th row;
    -- in `strong` those rows are the only ones near q, fewer than k, so the
    -- guess is too high and must be dropped. Without a sketch too (the
    -- high-plane pass, l2 included).
    local _, gauss = data.source(77)
    local dim, q, wide, strong = 8, {}, {}, {}
    for d = 1, dim do q[d] = gauss() end
    for i = 1, 2 * 16384 + 300 do
      local x = {}
      for d = 1, dim do x[d] = gauss() end
      wide[i] = x
    end
    for i = 1, 2000 do
      local x, close = {}, (i - 1) % 16 == 0 and i <= 320
      for d = 1, dim do x[d] = close and q[d] + 0.01 * gauss() or gauss() end
      strong[i] = x
    end
    for name, set in pairs({ wide = wide, strong = strong }) do
      for _, metric in ipairs({ "dot", "cosine", "l2" }) do
        for _, sketch in ipairs(metric == "l2" and { false } or { true, false }) do
          local v, all = vec.new({ dim = dim, metric = metric, sketch = sketch }), {}
          for i, x in ipairs(set) do
            v:add("r" .. i, x)
            all[i] = "r" .. i
          end
          for _, k in ipairs({ 1, 50, 300 }) do
            local what = ("%s %s sketch %s k %d"):format(name, metric, tostring(sketch), k)
            exact_hits(v, q, k, all, what)
          end
        end
      end
    end
  end)

  it("bounds its approximations tightly enough to keep a near tie, and no tighter", function()
    -- r2 has a first component of 1 and the rest 0.503: int8 rounds each
    -- of these up by about 0.00094, all in the query's direction (the
    -- worst case of the bound). r1, all components equal (its codes exact),
    -- scores a quarter of that error above r2, but its sketch score is below
    -- r2's. A bound under about half the true error drops r1 and this fails.
    for _, dim in ipairs({ 64, 100, 512 }) do
      local q, r1, r2 = {}, {}, {}
      local exact2 = 1
      for d = 1, dim do
        q[d] = 1
        r2[d] = d == 1 and 1 or float(0.503)
        if d > 1 then exact2 = exact2 + r2[d] end
      end
      local err = (dim - 1) * (64 / 127 - float(0.503))
      for d = 1, dim do r1[d] = (exact2 + err / 4) / dim end
      for _, simd in ipairs({ true, false, "avx2" }) do
        local v = vec.new({ dim = dim, metric = "dot", sketch = true, simd = simd })
        near_tie(v, q, r1, r2, dim)
      end
    end
  end)

  it("is an option of f32 rows under cosine or dot, reported by stats", function()
    assert.is_false(vec.new({ dim = 3 }):stats().sketch)
    assert.is_true(vec.new({ dim = 3, sketch = true }):stats().sketch)
    for _, o in ipairs({ { metric = "l2" }, { dtype = "f16" }, { dtype = "i8" } }) do
      o.dim, o.sketch = 3, true
      assert.has_error(function() vec.new(o) end, "rag.vec.new: option 'sketch' needs dtype "
        .. "'f32' and metric 'cosine' or 'dot'")
    end
    assert.has_error(function() vec.new({ dim = 3, sketch = 1 }) end,
      "rag.vec.new: option 'sketch' must be a boolean, got number")
    local v = vec.new({ dim = 3, sketch = true }) -- empty, then one row, then none
    assert.same({}, v:search({ 1, 2, 3 }, 5))
    v:add("a", { 1, 0, 0 })
    assert.equal("a", v:search({ 0, 1, 0 }, 5)[1].id)
    assert.is_true(v:remove("a"))
    assert.same({}, v:search({ 1, 2, 3 }, 5))
  end)
end)

describe("rag.vec out of memory", function()
  if not rag.core._fail_alloc then
    it("needs a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  it("add, search, search_batch, save and load fail cleanly at every fault point", function()
    helpers.oom_walk(function() vec.new({ dim = 4 }):close() end)
    local vs = data.random(12, 70, 4)
    local v = build({ dim = 4, dtype = "i8" }, vs)
    local function same()
      return v:search(vs[1], 70)
    end
    local before = same()
    local function unchanged()
      assert.same(before, same())
    end
    local grow = vec.new({ dim = 4, dtype = "i8" })
    for i = 1, 64 do
      grow:add(i, vs[i])
    end
    helpers.oom_walk(function() grow:add("65th", vs[65]) end, function()
      assert.equal(64, #grow)
    end)
    helpers.oom_walk(function() v:search(vs[2], 5, { filter = { "v1", "v2" } }) end, unchanged)
    helpers.oom_walk(function() v:search_batch({ vs[1], vs[2] }, 5) end, unchanged)
    local p = helpers.tmpname()
    helpers.oom_walk(function() assert(v:save(p)) end, unchanged)
    assert.is_true(helpers.oom_walk(function() assert(vec.load(p)):close() end) >= 3)
    os.execute("rm -f " .. p .. " " .. p .. ".tmp-*")
  end)

  it("with a sketch: new, add (a new block), search, save and load fail cleanly", function()
    helpers.oom_walk(function() vec.new({ dim = 4, sketch = true }):close() end)
    local vs = data.random(13, 140, 4)
    local v = vec.new({ dim = 4, sketch = true })
    for i = 1, 128 do
      v:add("v" .. i, vs[i])
    end
    local before = v:search(vs[1], 20)
    local function unchanged()
      assert.equal(128, #v)
      assert.same(before, v:search(vs[1], 20))
    end
    helpers.oom_walk(function() v:add("129th", vs[129]) end, function()
      assert.is_nil(v:get("129th"))
      unchanged()
    end)
    assert.same(v:search(vs[2], 30), v:search(vs[2], 30, { filter = (function()
      local all = {}
      for i = 1, 128 do all[i] = "v" .. i end
      all[129] = "129th"
      return all
    end)() }))
    helpers.oom_walk(function() v:search(vs[3], 5) end)
    local p = helpers.tmpname()
    helpers.oom_walk(function() assert(v:save(p)) end)
    assert.is_true(helpers.oom_walk(function() assert(vec.load(p)):close() end) >= 3)
    local function mapped() assert(vec.load(p, { map = true })):close() end
    assert.is_true(helpers.oom_walk(mapped) >= 1)
    os.execute("rm -f " .. p .. " " .. p .. ".tmp-*")
  end)
end)
