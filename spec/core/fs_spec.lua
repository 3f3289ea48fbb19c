-- rag.core.fs.exec: the process becomes another program (rag serve's
-- supervising shell); a failure returns nil, msg, "io"; misuse raises.
local helpers = require("spec.helpers")

describe("rag.core.fs.exec", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  local lua = helpers.lua_command()

  local function run(code)
    return helpers.spawn(lua .. " -e '" .. code .. "'")
  end

  it("replaces the process: the program's output, never the code after it", function()
    local out, err, status = run([[io.write("before ") ]]
      .. [[require("rag").core.fs.exec("sh", "-c", "printf \"%s|%s\" \"$0\" \"$1\"; exit 3", ]]
      .. [["zero", "a b") print("after")]])
    assert.equal("before zero|a b", out) -- Lua's buffered output flushed first
    assert.equal("", err)
    assert.equal(3, status)
  end)

  it("returns nil, msg, 'io' when the program cannot run", function()
    local fs = require("rag").core.fs
    local ok, msg, code = fs.exec("/nonexistent/program", "x")
    assert.is_nil(ok)
    assert.matches("^rag%.fs%.exec: '/nonexistent/program': ", msg)
    assert.equal("io", code)
  end)

  it("raises on arguments that are not strings", function()
    local fs = require("rag").core.fs
    assert.has_error(function() fs.exec() end)
    assert.has_error(function() fs.exec("sh", {}) end)
  end)
end)
