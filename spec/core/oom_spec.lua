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
