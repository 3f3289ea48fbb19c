-- Out-of-memory paths, SQLite style: fail the 1st, 2nd, ... allocation of an
-- operation until it completes; each failure must raise "not enough memory",
-- leak nothing (make asan runs LeakSanitizer) and leave the module usable.
-- Needs a RAG_TESTING build, which `make asan` provides.
local rag = require("rag")
local helpers = require("spec.helpers")

local fail_alloc = rag.core._fail_alloc

local function walk(op)
  local points = 0
  for n = 1, 10000 do
    fail_alloc(n)
    local ok, err = pcall(op)
    fail_alloc(0)
    if ok then
      return points
    end
    assert.truthy(tostring(err):find("not enough memory", 1, true), tostring(err))
    points = points + 1
  end
  error("operation never completed")
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
    local expected = rag.json.encode(value)
    local points = walk(function() return rag.json.encode(value) end)
    assert.is_true(points >= 3, "fault points: " .. points)
    assert.equal(expected, rag.json.encode(value))
  end)

  it("text.normalize raises and recovers at every fault point", function()
    local s = "Ｈｅｌｌｏ\255  world\r\n\n\n"
    local expected = rag.text.normalize(s)
    local points = walk(function() return rag.text.normalize(s) end)
    assert.is_true(points >= 2, "fault points: " .. points)
    assert.equal(expected, rag.text.normalize(s))
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
