-- Out-of-memory paths, SQLite style: fail the 1st, 2nd, ... allocation of an
-- operation until it completes; each failure must raise "not enough memory",
-- leak nothing (make asan runs LeakSanitizer) and leave the module usable.
-- Needs a RAG_TESTING build, which `make asan` provides.
local rag = require("rag")
local helpers = require("spec.helpers")

local fail_alloc = rag.core._fail_alloc

local walk = helpers.oom_walk

-- For a call without side effects: walks it, then checks it still gives
-- the result it gave before the walk.
local function walk_pure(fn, min_points)
  local expected = fn()
  local points = walk(fn)
  assert.is_true(points >= min_points, "fault points: " .. points)
  assert.equal(expected, fn())
end

describe("allocation failures", function()
  if not fail_alloc then
    it("need a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  it("json.encode raises and recovers at every fault point", function()
    local value = { text = string.rep("ü", 5000), list = {} }
    for i = 1, 2000 do
      value.list[i] = i * 0.5
    end
    walk_pure(function() return rag.json.encode(value) end, 3)
  end)

  it("text.normalize raises and recovers at every fault point", function()
    local s = "Ｈｅｌｌｏ\255  world\r\n\n\n"
    walk_pure(function() return rag.text.normalize(s) end, 2)
  end)

  it("the HTML extractor raises and recovers at every fault point", function()
    local f = assert(io.open("spec/fixtures/load/page.html", "rb"))
    local page = f:read("*a")
    f:close()
    walk_pure(function()
      local d = assert(rag.load.html(page))[1]
      return d.title .. "\0" .. d.text .. "\0" .. table.concat(d.meta.section_starts, ",")
    end, 3)
  end)

  it("a vector index's rows growing into mapped pages raise and recover", function()
    -- 128 floats a row: the rows pass 256 KB, where they become mapped
    -- pages (a copy), at 1,024 rows, and grow by mremap at 2,048
    local v = rag.vec.new({ dim = 128 })
    local r = helpers.rng(5)
    local function row()
      local x = {}
      for j = 1, 128 do
        x[j] = r(1000) / 1000 - 0.5
      end
      return x
    end
    local q = row()
    for _, upto in ipairs({ 512, 1024 }) do
      for i = #v + 1, upto do
        v:add("r" .. i, row())
      end
      local before = v:search(q, 5)
      local x = row()
      local points = walk(function() v:add("r" .. (upto + 1), x) end, function()
        assert.equal(upto, #v)
        assert.same(before, v:search(q, 5))
      end)
      assert.is_true(points >= 1, "fault points: " .. points)
      assert.equal(upto + 1, #v)
      assert.equal("r" .. (upto + 1), v:search(x, 1)[1].id)
    end
    v:close()
  end)

  it("http.request raises and recovers at every fault point", function()
    local base, stop = helpers.start_httpd()
    local ok, err = pcall(function()
      local points = walk(function()
        return assert(rag.http.request({ url = base .. "/echo", body = string.rep("x", 20000) }))
      end)
      assert.is_true(points >= 2, "fault points: " .. points)
      assert.equal(200, assert(rag.http.request({ url = base .. "/ok" })).status)
    end)
    stop()
    assert(ok, err)
  end)
end)
