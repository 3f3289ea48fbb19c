-- rag.vec's file format version 3 and mapped loads: the layout (row
-- sections on 64-byte lines, zero pads, planes and the sketch as the index
-- holds them), round trips bit for bit, mapped loads searching as copied
-- ones do, version 1 and 2 files written here from their grammars, damaged
-- files (every section, pads, lengths) refused by both loads, and changes to
-- a mapped index copying its rows first, never touching the file.
local rag = require("rag")
local helpers = require("spec.helpers")
local data = require("spec.vecdata")

local vec = rag.vec
local METRICS = { "cosine", "dot", "l2" }
local DTYPES = { "f32", "f16", "i8" }
local METRIC_CODE = { cosine = 0, dot = 1, l2 = 2 }
local DTYPE_CODE = { f32 = 0, f16 = 1, i8 = 2 }
local ROW_TAGS = { "ROWS", "LOWS", "NORM", "SCAL", "SKCD", "SKSW" }
local SKR = 128 -- rows in a block of the sketch
-- every kind of index: each dtype, and f32 with the sketch
local KINDS = { { dtype = "f32" }, { dtype = "f16" }, { dtype = "i8" },
  { dtype = "f32", sketch = true } }

local function build(opts, vectors)
  local v = vec.new(opts)
  for i, x in ipairs(vectors) do
    v:add("v" .. i, x)
  end
  return v
end

-- {====== The container, read and written here ======}

local function le(s, at, n) -- n bytes little-endian at 1-based position at
  local v = 0
  for k = n, 1, -1 do
    v = v * 256 + s:byte(at + k - 1)
  end
  return v
end

local function u64(n)
  return helpers.u32(n % 4294967296) .. helpers.u32(math.floor(n / 4294967296))
end

local function varint(n)
  local t = {}
  repeat
    local b = n % 128
    n = math.floor(n / 128)
    t[#t + 1] = string.char(n > 0 and b + 128 or b)
  until n == 0
  return table.concat(t)
end

-- The header's version and the sections: { tag=, payload=, at= } with `at`
-- the payload's 0-based offset in the file.
local function sections(s)
  local out, off = {}, 28
  while off < #s do
    local len = le(s, off + 5, 8)
    out[#out + 1] = { tag = s:sub(off + 1, off + 4), payload = s:sub(off + 13, off + 12 + len),
      at = off + 12 }
    off = off + 16 + len
  end
  return le(s, 9, 4), out
end

-- A file of these sections, with lengths, size and every CRC computed.
local function container(version, secs)
  local size = 28
  for _, sec in ipairs(secs) do
    size = size + 16 + #sec.payload
  end
  local head = "RAGVEC\0\0" .. helpers.u32(version) .. helpers.u32(#secs) .. u64(size)
  local out = { head .. helpers.u32(helpers.crc32(head)) }
  for _, sec in ipairs(secs) do
    local body = sec.tag .. u64(#sec.payload) .. sec.payload
    out[#out + 1] = body .. helpers.u32(helpers.crc32(body))
  end
  return table.concat(out)
end

-- The saved file s with section `tag`'s payload made by edit(payload, sec).
local function edited(s, tag, edit)
  local version, secs = sections(s)
  for _, sec in ipairs(secs) do
    if sec.tag == tag then
      sec.payload = edit(sec.payload, sec)
    end
  end
  return container(version, secs)
end

local function pad_of(sec)
  return (64 - sec.at % 64) % 64
end

-- The bytes of a component of a vector as stored: float32, little-endian.
local function f32_bytes(x)
  return vec.pack({ x })
end

-- Both loads refuse the bytes with code corrupt and this reason.
local function refused(bytes, reason)
  local p = helpers.tmpname()
  helpers.write(p, bytes)
  for _, opts in ipairs({ {}, { map = true } }) do
    local ok, msg, code = vec.load(p, opts)
    assert.is_nil(ok, reason)
    assert.equal("corrupt", code)
    assert.matches(reason, msg, 1, true)
  end
  os.remove(p)
end

-- v saved again gives the bytes s.
local function resaves(v, s)
  local p = helpers.tmpname()
  assert.is_true(v:save(p))
  assert.equal(s, helpers.read(p))
  os.remove(p)
end

local function saved(v)
  local p = helpers.tmpname()
  assert.is_true(v:save(p))
  local s = helpers.read(p)
  return p, s
end

-- The float nearest x (ties to even), as C's float arithmetic rounds.
local function fround(x)
  return vec.unpack(vec.pack({ x }))[1]
end

-- Row x's sketch as rag_vec.c's grammar and sketch_row define it, computed
-- here: codes, scale, and the weight's lower bound (the bound it must reach).
local function sketch_of(x)
  local m = 0
  for _, c in ipairs(x) do
    m = math.max(m, math.abs(c))
  end
  local s = fround(m / 127)
  if s < 2 ^ -126 then -- below the least normal float: no scale, all codes 0
    s = 0
  end
  local inv = s > 0 and fround(1 / s) or 0
  local codes, ee, xn = {}, 0, 0
  for j, c in ipairs(x) do
    local k = 0
    if s > 0 then
      local t = fround(math.abs(c) * inv)
      k = t >= 127 and 127 or math.min(127, math.floor(fround(t + 0.5)))
      if c < 0 then
        k = -k
      end
    end
    codes[j] = k
    ee = ee + (c - s * k) ^ 2
    xn = xn + c * c
  end
  local d, u = #x, 2 ^ -24
  local g = (d + 8) * u / (1 - (d + 8) * u)
  return codes, s, math.sqrt(ee) * (1 + g) + 2 * g * math.sqrt(xn)
end

describe("rag.vec file version 3", function()
  it("holds planes, norms, rows, scales and the sketch as the index does, on lines", function()
    local dim, n = 7, 11
    local vs = data.random(21, n, dim)
    for _, kind in ipairs(KINDS) do
      local dtype = kind.dtype
      local v = build({ dim = dim, metric = kind.sketch and "dot" or "l2", dtype = dtype,
        sketch = kind.sketch }, vs)
      local p, s = saved(v)
      local version, secs = sections(s)
      assert.equal(3, version)
      assert.equal(#s, le(s, 17, 8))
      local tags = {}
      for i, sec in ipairs(secs) do
        tags[i] = sec.tag
      end
      assert.same({ "PARM", "IDS ", "ROWS", "LOWS", "NORM", "SCAL", "SKCD", "SKSW" }, tags)
      assert.equal(helpers.u32(dim) .. string.char(kind.sketch and 1 or 2, DTYPE_CODE[dtype],
        kind.sketch and 1 or 0), secs[1].payload)
      local want = {
        f32 = { n * dim * 2, n * dim * 2, n * 4, 0, 0, 0 },
        f16 = { n * dim * 2, 0, 0, 0, 0, 0 },
        i8 = { n * dim, 0, 0, n * 4, 0, 0 },
        sketch = { n * dim * 2, n * dim * 2, n * 4, 0, SKR * dim, n * 8 },
      }
      for i = 3, 8 do
        local sec, pad = secs[i], pad_of(secs[i])
        assert.equal(0, (sec.at + pad) % 64)
        assert.equal(string.rep("\0", pad), sec.payload:sub(1, pad))
        assert.equal(want[kind.sketch and "sketch" or dtype][i - 2], #sec.payload - pad,
          dtype .. " " .. sec.tag)
      end
      if dtype == "f32" then -- component j of row i: its high half, then its low half
        local hi, lo, norm = secs[3], secs[4], secs[5]
        hi, lo, norm = hi.payload:sub(pad_of(hi) + 1), lo.payload:sub(pad_of(lo) + 1),
          norm.payload:sub(pad_of(norm) + 1)
        for i = 1, n do
          local x = v:get("v" .. i)
          local ss = 0
          for j = 1, dim do
            local b, at = f32_bytes(x[j]), ((i - 1) * dim + j - 1) * 2 + 1
            assert.equal(b:sub(3, 4), hi:sub(at, at + 1))
            assert.equal(b:sub(1, 2), lo:sub(at, at + 1))
            ss = ss + x[j] * x[j]
          end
          local got = vec.unpack(norm:sub(4 * i - 3, 4 * i))[1]
          local below = vec.unpack(helpers.u32(le(norm, 4 * i - 3, 4) - 1))[1]
          assert.is_true(got >= math.sqrt(ss) and below < math.sqrt(ss)) -- rounded up, no further
        end
      end
      if kind.sketch then -- row i's component j: block, component, row
        local cd, sw = secs[7], secs[8]
        cd, sw = cd.payload:sub(pad_of(cd) + 1), sw.payload:sub(pad_of(sw) + 1)
        for i = 1, n do
          local codes, scale, least = sketch_of(v:get("v" .. i))
          for j = 1, dim do
            local at = (math.floor((i - 1) / SKR) * dim + j - 1) * SKR + (i - 1) % SKR + 1
            assert.equal(codes[j] % 256, cd:byte(at), "row " .. i .. " component " .. j)
          end
          assert.equal(scale, vec.unpack(sw:sub(4 * i - 3, 4 * i))[1])
          local w = vec.unpack(sw:sub(4 * (n + i) - 3, 4 * (n + i)))[1]
          assert.is_true(w >= least and w <= least * (1 + 2 ^ -20), "weight of row " .. i)
        end
        for i = n + 1, SKR do -- the block's rows past the count: zero (one block here)
          for j = 1, dim do
            assert.equal(0, cd:byte((j - 1) * SKR + i))
          end
        end
      end
      os.remove(p)
    end
  end)

  it("round-trips every dtype bit for bit, mapped or copied, and saves the same bytes", function()
    local vs = data.lowrank(22, 40, 9, 3)
    vs[41] = { 1e-40, -1e-44, 0.3, -0.0, 0, 1, -1, 60000, 1e-7 } -- subnormals, signed zero
    for _, metric in ipairs(METRICS) do
      for _, kind in ipairs(KINDS) do
        local dtype = kind.dtype
        local v = build({ dim = 9, metric = metric, dtype = dtype,
          sketch = kind.sketch and metric ~= "l2" }, vs)
        v:remove("v" .. #vs) -- the last row itself (its sketch codes must go too)
        v:remove("v5") -- the last row moves into its place
        local p, s = saved(v)
        for _, opts in ipairs({ {}, { map = true } }) do
          local w = assert(vec.load(p, opts))
          assert.equal(#v, #w)
          for i = 1, #vs do
            local a, b = v:get("v" .. i), w:get("v" .. i)
            if i == 5 or i == #vs then
              assert.is_nil(b)
            else
              assert.equal(vec.pack(a), vec.pack(b))
            end
          end
          resaves(w, s)
        end
        os.remove(p)
      end
    end
  end)

  it("maps the rows: searches equal a copied load's, and only the rest is owned", function()
    local dim, n = 24, 300
    local vs = data.lowrank(23, n, dim, 6)
    local qs = data.lowrank(24, 12, dim, 6)
    for _, metric in ipairs(METRICS) do
      for _, kind in ipairs(KINDS) do
        local dtype, sketch = kind.dtype, (kind.sketch and metric ~= "l2") or false
        local v = build({ dim = dim, metric = metric, dtype = dtype, sketch = sketch }, vs)
        v:remove("v17")
        local p = saved(v)
        local c, m = assert(vec.load(p)), assert(vec.load(p, { map = true }))
        local rows = n - 1
        local bytes = ({ f32 = rows * (dim * 4 + 4), f16 = rows * dim * 2,
          i8 = rows * (dim + 4) })[dtype]
        if sketch then -- whole blocks of codes, a scale and a weight a row
          bytes = bytes + math.ceil(rows / SKR) * SKR * dim + rows * 8
        end
        assert.equal(sketch, m:stats().sketch)
        assert.equal(0, c:stats().mapped)
        assert.equal(bytes, m:stats().mapped)
        assert.is_true(m:stats().memory <= c:stats().memory - bytes)
        for _, q in ipairs(qs) do
          assert.same(c:search(q, 10), m:search(q, 10))
          assert.same(c:search(q, n + 5), m:search(q, n + 5))
          assert.same(c:search(q, 5, { filter = { "v1", "v2", "v17", "v300" } }),
            m:search(q, 5, { filter = { "v1", "v2", "v17", "v300" } }))
        end
        assert.same(c:search_batch(qs, 7), m:search_batch(qs, 7))
        assert.same(v:search_batch(qs, 7), m:search_batch(qs, 7))
        assert.equal(bytes, m:stats().mapped) -- searching copies nothing
        m:close()
        m:close()
        os.remove(p)
      end
    end
    local p = saved(vec.new({ dim = 3 })) -- nothing to map
    local m = assert(vec.load(p, { map = true }))
    assert.equal(0, #m)
    assert.equal(0, m:stats().mapped)
    m:add("a", { 1, 2, 3 })
    assert.equal("a", m:search({ 1, 2, 3 }, 1)[1].id)
    os.remove(p)
  end)

  it("takes map as its only option and reports io, format and version failures", function()
    local p = saved(build({ dim = 3 }, data.random(25, 4, 3)))
    assert.has_error(function() vec.load(p, { mapped = true }) end,
      "rag.vec.load: unknown option 'mapped'")
    assert.has_error(function() vec.load(p, { map = 1 }) end,
      "rag.vec.load: option 'map' must be a boolean, got number")
    local ok, msg, code = vec.load("/nonexistent/x.vec", { map = true })
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.matches("^rag.vec.load: '/nonexistent/x.vec': ", msg)
    helpers.rejects_irregular(function(path) return vec.load(path, { map = true }) end,
      "rag.vec.load")
    helpers.write(p, "")
    ok, msg, code = vec.load(p, { map = true })
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("bad magic", msg)
    helpers.write(p, helpers.with_version(helpers.read(saved(vec.new({ dim = 2 }))), 4))
    ok, msg, code = vec.load(p, { map = true })
    assert.is_nil(ok)
    assert.equal("version", code)
    assert.matches("newer version", msg)
    os.remove(p)
  end)
end)

describe("rag.vec file version 1", function()
  -- A version 1 file from its grammar: PARM, IDS, ROWS (plain rows), SCAL.
  local function v1_file(dim, metric, dtype, ids, rows, scales)
    local idsec = { varint(#ids) }
    for _, id in ipairs(ids) do
      idsec[#idsec + 1] = varint(#id) .. id
    end
    return container(1, {
      { tag = "PARM",
        payload = helpers.u32(dim) .. string.char(METRIC_CODE[metric], DTYPE_CODE[dtype]) },
      { tag = "IDS ", payload = table.concat(idsec) },
      { tag = "ROWS", payload = table.concat(rows) },
      { tag = "SCAL", payload = scales and vec.pack(scales) or "" },
    })
  end

  local function u16(n)
    return string.char(n % 256, math.floor(n / 256))
  end

  local function loads(bytes, check)
    local p = helpers.tmpname()
    helpers.write(p, bytes)
    for _, opts in ipairs({ {}, { map = true } }) do
      local v = assert(vec.load(p, opts))
      assert.equal(0, v:stats().mapped) -- converted, so copied
      check(v)
      local p2 = helpers.tmpname() -- saved again as version 3, which loads the same
      assert.is_true(v:save(p2))
      assert.equal(3, (sections(helpers.read(p2))))
      local w = assert(vec.load(p2, { map = true }))
      assert.is_true(w:stats().mapped > 0)
      check(w)
      os.remove(p2)
    end
    os.remove(p)
  end

  it("still loads f32, f16 and i8 rows, converted to the planes", function()
    local f32 = { { 0.6, -0.8, 0 }, { 1e-40, 2.5, -3 }, { 0.25, 0.5, 0.125 } }
    local rows = {}
    for i, x in ipairs(f32) do
      rows[i] = vec.pack(x)
    end
    loads(v1_file(3, "l2", "f32", { "a", "bb", "c" }, rows), function(v)
      assert.equal(3, #v)
      for i, id in ipairs({ "a", "bb", "c" }) do
        assert.equal(vec.pack(f32[i]), vec.pack(v:get(id)))
      end
      assert.equal("c", v:search({ 0.25, 0.5, 0.125 }, 1)[1].id)
      assert.same(v:search({ 1, 2, 3 }, 3, { filter = { "a", "bb", "c" } }),
        v:search({ 1, 2, 3 }, 3))
    end)
    -- f16: 0.5 -1.25 2 | 0.75 -0.125 1
    rows = { u16(0x3800) .. u16(0xBD00) .. u16(0x4000), u16(0x3A00) .. u16(0xB000) .. u16(0x3C00) }
    loads(v1_file(3, "dot", "f16", { "x", "y" }, rows), function(v)
      assert.same({ 0.5, -1.25, 2 }, v:get("x"))
      assert.same({ 0.75, -0.125, 1 }, v:get("y"))
      assert.equal("x", v:search({ 0, 0, 1 }, 1)[1].id)
    end)
    -- i8: codes times the row's scale
    rows = { string.char(1, 255, 127), string.char(129, 0, 2) } -- 1 -1 127 | -127 0 2
    loads(v1_file(3, "dot", "i8", { "p", "q" }, rows, { 0.5, 0.25 }), function(v)
      assert.same({ 0.5, -0.5, 63.5 }, v:get("p"))
      assert.same({ -31.75, 0, 0.5 }, v:get("q"))
      assert.equal("p", v:search({ 0, 0, 1 }, 1)[1].id)
    end)
  end)

  it("still refuses damaged version 1 files", function()
    local rows = { vec.pack({ 1, 2 }), vec.pack({ 3, 4 }) }
    refused(v1_file(2, "dot", "f32", { "a", "a" }, rows), "duplicate id")
    refused(v1_file(2, "dot", "f32", { "a", "b" }, { rows[1] }), "disagrees with the id count")
    refused(v1_file(2, "dot", "f32", { "a", "b" }, { rows[1], f32_bytes(0) .. "\0\0\128\127" }),
      "bad component")
    refused(v1_file(2, "dot", "i8", { "a" }, { "\1\2" }, { 0 }), "bad component")
    refused(v1_file(2, "dot", "i8", { "a" }, { "\1\2" }), "disagrees with the id count")
    local ok = v1_file(2, "dot", "f32", { "a", "b" }, rows)
    local p = helpers.tmpname()
    helpers.write(p, ok)
    assert.is_truthy(vec.load(p))
    -- version 1 claiming the eight sections of version 3
    helpers.write(p, ok:sub(1, 8) .. helpers.u32(1) .. helpers.u32(8) .. ok:sub(17))
    assert.is_nil(vec.load(p))
    os.remove(p)
  end)
end)

describe("rag.vec file version 2", function()
  -- A version 2 file from a version 3 one without a sketch, by the grammar
  -- of version 2: no sketch byte, no SKCD and SKSW, the pads made again.
  local function v2_of(s)
    local _, secs = sections(s)
    local out, at = {}, 28
    for _, sec in ipairs(secs) do
      local payload = sec.payload
      if sec.tag == "PARM" then
        payload = payload:sub(1, 6)
      elseif sec.tag ~= "IDS " then
        local d = payload:sub(pad_of(sec) + 1)
        payload = string.rep("\0", (64 - (at + 12) % 64) % 64) .. d
      end
      if sec.tag ~= "SKCD" and sec.tag ~= "SKSW" then
        out[#out + 1] = { tag = sec.tag, payload = payload }
        at = at + 16 + #payload
      end
    end
    return container(2, out)
  end

  it("still loads, copied or mapped, and saves again as version 3", function()
    local vs = data.lowrank(33, 150, 10, 3)
    local qs = data.lowrank(34, 6, 10, 3)
    for _, metric in ipairs(METRICS) do
      for _, dtype in ipairs(DTYPES) do
        local v = build({ dim = 10, metric = metric, dtype = dtype }, vs)
        local _, s = saved(v)
        local p = helpers.tmpname()
        helpers.write(p, v2_of(s))
        for _, opts in ipairs({ {}, { map = true } }) do
          local w = assert(vec.load(p, opts))
          assert.equal(opts.map and true or false, w:stats().mapped > 0)
          assert.is_false(w:stats().sketch)
          for _, q in ipairs(qs) do
            assert.same(v:search(q, 12), w:search(q, 12))
          end
          resaves(w, s)
        end
        os.remove(p)
      end
    end
  end)

  it("are refused with a sketch byte, or with version 3's sections", function()
    local _, s = saved(build({ dim = 4 }, data.random(35, 5, 4)))
    local v2 = v2_of(s)
    refused(edited(v2, "PARM", function(x) return x .. "\0" end), "bad parameters")
    local _, secs = sections(s)
    refused(container(2, secs), "bad header")
  end)
end)

describe("rag.vec damaged version 3 files", function()
  it("are refused at every truncation and bit flip, mapped or copied", function()
    local sk = saved(build({ dim = 5, sketch = true }, data.random(26, 9, 5)))
    helpers.rejects_damage(function(path) return vec.load(path, { map = true }) end, sk, 60, 36)
    helpers.rejects_damage(vec.load, sk, 20, 37)
    os.remove(sk)
    for _, dtype in ipairs(DTYPES) do
      local p = saved(build({ dim = 5, dtype = dtype, metric = "l2" }, data.random(26, 9, 5)))
      helpers.rejects_damage(function(path) return vec.load(path, { map = true }) end, p, 60, 27)
      helpers.rejects_damage(vec.load, p, 20, 28)
      assert.is_truthy(vec.load(p, { map = true }))
      os.remove(p)
    end
  end)

  it("are refused for what every section says, with checksums that agree", function()
    local vs = data.random(29, 6, 5)
    local f32 = select(2, saved(build({ dim = 5, metric = "l2" }, vs)))
    local f16 = select(2, saved(build({ dim = 5, metric = "l2", dtype = "f16" }, vs)))
    local i8 = select(2, saved(build({ dim = 5, metric = "l2", dtype = "i8" }, vs)))
    local sk = select(2, saved(build({ dim = 5, sketch = true }, vs)))
    local function at(s, pos, bytes) -- s with bytes at 1-based pos
      return s:sub(1, pos - 1) .. bytes .. s:sub(pos + #bytes)
    end
    -- the container re-sealed unchanged loads: the damages below are all there is
    for _, s in ipairs({ f32, f16, i8, sk }) do
      assert.equal(s, edited(s, "PARM", function(x) return x end))
    end
    refused(edited(f32, "PARM", function(x) return at(x, 6, "\3") end), "bad parameters")
    refused(edited(f32, "PARM", function(x) return at(x, 1, helpers.u32(6)) end),
      "disagrees with the id count")
    refused(edited(f32, "IDS ", function(x) return at(x, 7, "1") end), "duplicate id") -- v2 -> v1
    refused(edited(f32, "IDS ", function(x) return x .. "\0" end), "bad id section")
    local function data_at(sec, x, pos, bytes) -- bytes at pos of the data after the pad
      return at(x, pad_of(sec) + pos, bytes)
    end
    -- f32: an infinite component (high half), a low half off its norm, a norm one ulp up
    refused(edited(f32, "ROWS", function(x, sec) return data_at(sec, x, 11, "\128\127") end),
      "bad component")
    refused(edited(f32, "LOWS", function(x, sec)
      local b = pad_of(sec)
      return data_at(sec, x, 1, string.char(x:byte(b + 1), (x:byte(b + 2) + 128) % 256))
    end), "bad norm")
    refused(edited(f32, "NORM", function(x, sec)
      return data_at(sec, x, 5, helpers.u32(le(x, pad_of(sec) + 5, 4) + 1))
    end), "bad norm")
    refused(edited(f16, "ROWS", function(x, sec) return data_at(sec, x, 3, "\0\124") end),
      "bad component")
    refused(edited(i8, "SCAL", function(x, sec) return data_at(sec, x, 5, f32_bytes(0)) end),
      "bad component")
    refused(edited(i8, "SCAL", function(x, sec) return data_at(sec, x, 1, "\0\0\192\127") end),
      "bad component") -- NaN
    -- the sketch: a sketch byte out of range or under l2, a code, a code past
    -- the count, a scale and a weight one ulp down
    refused(edited(sk, "PARM", function(x) return at(x, 7, "\2") end), "bad parameters")
    refused(edited(sk, "PARM", function(x) return at(x, 5, "\2") end), "bad parameters")
    local plain = select(2, saved(build({ dim = 5 }, vs))) -- cosine, no sketch
    refused(edited(plain, "PARM", function(x) return at(x, 7, "\1") end),
      "disagrees with the id count")
    refused(edited(sk, "SKCD", function(x, sec)
      return data_at(sec, x, 1 + SKR, string.char((x:byte(pad_of(sec) + 1 + SKR) + 1) % 256))
    end), "bad sketch")
    refused(edited(sk, "SKCD", function(x, sec) return data_at(sec, x, 7, "\1") end), "bad sketch")
    refused(edited(sk, "SKSW", function(x, sec)
      return data_at(sec, x, 5, helpers.u32(le(x, pad_of(sec) + 5, 4) + 1))
    end), "bad sketch")
    refused(edited(sk, "SKSW", function(x, sec)
      return data_at(sec, x, 6 * 4 + 1, helpers.u32(le(x, pad_of(sec) + 6 * 4 + 1, 4) - 1))
    end), "bad sketch")
    -- pads: nonzero, one byte short or long, data where nothing belongs
    local padded = 0
    for _, s in ipairs({ f32, f16, i8, sk }) do
      for _, tag in ipairs(ROW_TAGS) do
        local _, secs = sections(s)
        local sec
        for _, x in ipairs(secs) do
          if x.tag == tag then
            sec = x
          end
        end
        local pad = pad_of(sec)
        if pad > 0 then
          padded = padded + 1
          refused(edited(s, tag, function(x) return at(x, pad, "\1") end), "nonzero pad")
          refused(edited(s, tag, function(x) return at(x, 1, "\128") end), "nonzero pad")
          refused(edited(s, tag, function(x) return x:sub(2) end), "disagrees with the id count")
        end
        refused(edited(s, tag, function(x) return x .. "\0" end), "disagrees with the id count")
        refused(edited(s, tag, function(x) return x .. string.rep("\0", 64) end),
          "disagrees with the id count")
      end
    end
    assert.is_true(padded >= 8)
    -- the rows of version 3 with the sections of version 1
    local _, secs = sections(f32)
    refused(container(1, secs), "bad header")
  end)
end)

describe("rag.vec changes to a mapped index", function()
  local function pair(dtype)
    local vs = data.lowrank(30, 80, 12, 4)
    local p = saved(build({ dim = 12, dtype = dtype }, vs))
    return p, helpers.read(p), assert(vec.load(p)), assert(vec.load(p, { map = true })), vs
  end

  local function same(c, m, vs)
    assert.equal(#c, #m)
    for i = 1, #vs + 2 do
      local a, b = c:get("v" .. i), m:get("v" .. i)
      assert.equal(a and vec.pack(a), b and vec.pack(b))
    end
    for i = 1, 6 do
      assert.same(c:search(vs[i], 15), m:search(vs[i], 15))
    end
    local p2, p3 = helpers.tmpname(), helpers.tmpname()
    assert.is_true(c:save(p2))
    assert.is_true(m:save(p3))
    assert.equal(helpers.read(p2), helpers.read(p3))
    os.remove(p2)
    os.remove(p3)
  end

  it("copy the rows first and leave the file as it was", function()
    local extra = data.random(31, 3, 12)
    local firsts = {
      function(v) return v:remove("v3") end, -- a hole filled from the last row
      function(v) return v:remove("v80") end, -- the last row
      function(v) return v:add("v7", extra[1]) end, -- a replacement
      function(v) return v:add("new", extra[2]) end, -- a new row
    }
    for _, dtype in ipairs(DTYPES) do
      for _, first in ipairs(firsts) do
        local p, before, c, m, vs = pair(dtype)
        assert.is_false(m:remove("absent")) -- no change, nothing copied
        assert.is_true(m:stats().mapped > 0)
        local mem = m:stats().memory
        assert.equal(first(c), first(m))
        assert.equal(0, m:stats().mapped)
        assert.is_true(m:stats().memory > mem)
        same(c, m, vs)
        for _, v in ipairs({ c, m }) do
          v:add("v81", extra[3])
          assert.is_true(v:remove("v1"))
          v:add("v2", extra[1])
        end
        same(c, m, vs)
        assert.equal(before, helpers.read(p))
        m:close()
        os.remove(p)
      end
    end
  end)

  it("outlive the file's name, and a mapped index handed to rag.index keeps its rows", function()
    local p, before, c, m = pair("f32")
    os.remove(p) -- the mapping holds the pages
    assert.same(c:search({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 }, 5),
      m:search({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 }, 5))
    helpers.write(p, before)
    m = assert(vec.load(p, { map = true }))
    local ix = rag.core.index.new(rag.bm25.new({}), m)
    assert.has_error(function() return #m end, "rag.vec.__len: index is closed")
    collectgarbage()
    local p2 = helpers.tmpname()
    assert.is_table(ix:save({ vectors = p2 }))
    assert.equal(before, helpers.read(p2))
    ix:close()
    os.remove(p)
    os.remove(p2)
  end)
end)

describe("rag.vec mapped out of memory", function()
  if not rag.core._fail_alloc then
    it("needs a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  it("a mapped load and the first change fail cleanly at every fault point", function()
    for _, dtype in ipairs(DTYPES) do
      local vs = data.random(32, 70, 4)
      local p = saved(build({ dim = 4, dtype = dtype }, vs))
      assert.is_true(helpers.oom_walk(function()
        assert(vec.load(p, { map = true })):close()
      end) >= 3)
      local m = assert(vec.load(p, { map = true }))
      local mapped, hits = m:stats().mapped, m:search(vs[1], 70)
      local function unchanged()
        assert.equal(mapped, m:stats().mapped)
        assert.equal(70, #m)
        assert.same(hits, m:search(vs[1], 70))
      end
      assert.is_true(helpers.oom_walk(function() m:remove("v9") end, unchanged) >= 1)
      assert.equal(0, m:stats().mapped)
      m = assert(vec.load(p, { map = true }))
      helpers.oom_walk(function() m:add("v9", vs[2]) end, unchanged)
      m = assert(vec.load(p, { map = true }))
      helpers.oom_walk(function() m:add("new", vs[2]) end, unchanged)
      assert.equal(71, #m)
      os.remove(p)
    end
  end)
end)
