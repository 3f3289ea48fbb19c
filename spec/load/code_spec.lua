-- rag.load.code: source cut at top-level definitions; parts are slices.
local load = require("rag.load")

local F = "spec/fixtures/load/"

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

describe("rag.load.code", function()
  it("cuts Lua at top-level functions, with the comments above them", function()
    local src = read(F .. "sample.lua")
    local docs = assert(load.file(F .. "sample.lua", { root = F }))
    local ids, symbols, lines = {}, {}, {}
    for i, d in ipairs(docs) do
      ids[i], symbols[i], lines[i] = d.id, d.meta.symbol or "", d.meta.line
      assert.equal(d.text, src:sub(d.meta.start, d.meta.start + #d.text - 1))
      assert.equal("lua", d.meta.language)
    end
    assert.same({ "sample.lua#1", "sample.lua#2", "sample.lua#3", "sample.lua#4" }, ids)
    assert.same({ "", "function M.add(a, b)", "local function helper(x)", "function M.double(x)" },
      symbols)
    assert.same({ 1, 4, 9, 13 }, lines)
    assert.equal("-- Adds two numbers.\nfunction M.add(a, b)\n  return a + b\nend\n\n",
      docs[2].text)
    assert.equal("sample.lua: function M.add(a, b)", docs[2].title)
    assert.equal("sample.lua", docs[1].title)
  end)

  it("cuts Python at def and class, with decorators and comments", function()
    local docs = assert(load.file(F .. "sample.py", { root = F }))
    assert.equal(3, #docs)
    assert.equal("def area(r):", docs[2].meta.symbol)
    assert.equal("class Shape:", docs[3].meta.symbol)
    assert.equal("# A shape with a name.\n@dataclass\nclass Shape:", docs[3].text:sub(1, 46))
    assert.equal(9, docs[3].meta.line)
  end)

  it("cuts C, Go and Rust, and other languages by lines", function()
    local c = load.code("#include <x.h>\n\nstatic int f(int a) {\n  return a;\n}\n\n"
      .. "int main(void)\n{\n  return f(1);\n}\n",
      { id = "x.c", language = "c" })
    assert.equal(3, #c)
    assert.equal("static int f(int a)", c[2].meta.symbol)
    assert.equal("int main(void)", c[3].meta.symbol)
    local go = load.code("package x\n\nfunc A() {}\n\nfunc B() {}\n",
      { id = "x.go", language = "go" })
    assert.equal(3, #go)
    local rs = load.code("/// doc\npub fn a() {}\n\nfn b() {}\n",
      { id = "x.rs", language = "rust" })
    assert.equal(2, #rs)
    assert.equal("x.rs#1", rs[1].id)
    assert.equal("/// doc\npub fn a() {}\n\n", rs[1].text)
    local other = load.code("1\n2\n3\n4\n5\n", { id = "x.txt", lines = 2 })
    assert.equal(3, #other)
    assert.equal("3\n4\n", other[2].text)
    local one = load.code("just one line", { id = "one.lua", language = "lua" })
    assert.equal(1, #one)
    assert.equal("one.lua", one[1].id)
  end)
end)
