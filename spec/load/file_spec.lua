-- rag.load.file: the loader by extension, then by content; failures by code.
local load = require("rag.load")

local F = "spec/fixtures/load/"

local function tmpfile(s)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
  return path
end

describe("rag.load.file", function()
  it("loads plain text as one document, ids relative to root", function()
    local docs = assert(load.file(F .. "tree/a.txt", { root = F .. "tree/" }))
    assert.same({ { id = "a.txt", text = "Alpha text.\n", source = F .. "tree/a.txt", meta = {} } },
      docs)
    docs = assert(load.file(F .. "tree/a.txt"))
    assert.equal(F .. "tree/a.txt", docs[1].id)
  end)

  it("sniffs files without a known extension", function()
    local html = tmpfile("  <!DOCTYPE html><html><body><p>Hi</p><script>x</script></body></html>")
    assert.equal("Hi", assert(load.file(html))[1].text)
    local pdf = tmpfile(io.open(F .. "two_pages.pdf", "rb"):read("*a"))
    assert.equal(2, assert(load.file(pdf))[1].meta.pages)
    local txt = tmpfile("\239\187\191plain with a byte order mark")
    assert.equal("plain with a byte order mark", assert(load.file(txt))[1].text)
    os.remove(html)
    os.remove(pdf)
    os.remove(txt)
  end)

  it("reports binary, invalid UTF-8 and unreadable files", function()
    local ok, msg, code = load.file(F .. "blob.bin")
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.equal("rag.load.file: '" .. F .. "blob.bin': binary file", msg)
    ok, msg, code = load.file(F .. "bad_utf8.txt")
    assert.is_nil(ok)
    assert.equal("encoding", code)
    assert.equal("rag.load.file: '" .. F .. "bad_utf8.txt': invalid utf-8 at byte 31", msg)
    ok, msg, code = load.file(F .. "nothing-here.txt")
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.matches("^rag.load.file: .*nothing%-here.txt: no such file", msg)
    ok, msg, code = load.file(F)
    assert.matches("^rag.load.file: ", msg)
    assert.is_nil(ok)
    assert.equal("io", code)
  end)

  it("takes a forced format and raises on misuse", function()
    local d = assert(load.file(F .. "tree/a.txt", { format = "markdown", root = F }))[1]
    assert.equal("tree/a.txt", d.id)
    local c = assert(load.file(F .. "sample.lua", { format = "code:lua" }))
    assert.equal(4, #c)
    assert.has_error(function() load.file(F .. "tree/a.txt", { format = "docx" }) end,
      "rag.load.file: unknown format 'docx'")
    assert.has_error(function() load.file(F .. "tree/a.txt", { nope = true }) end,
      "rag.load.file: unknown option 'nope'")
    assert.has_error(function() load.file(nil) end, "rag.load.file: path must be a string, got nil")
  end)
end)
