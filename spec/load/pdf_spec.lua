-- rag.load.pdf through pdftotext (Debian's poppler-utils, a test package:
-- these specs fail, not skip, without it). Acceptance E of issue 23.
local load = require("rag.load")

local F = "spec/fixtures/load/"

describe("rag.load.pdf", function()
  it("has pdftotext (install poppler-utils: make deps)", function()
    local r = os.execute("command -v pdftotext >/dev/null 2>&1")
    assert.truthy(r == true or r == 0,
      "pdftotext is missing: install Debian's poppler-utils (make deps)")
  end)

  it("gives one document with the pages' starts in meta", function()
    local docs = assert(load.pdf(F .. "two_pages.pdf"))
    assert.equal(1, #docs)
    local d = docs[1]
    local p1 = "Page one talks about tides.\nThe moon pulls the sea."
    local p2 = "Page two talks about volcanoes.\nLava cools into basalt."
    assert.equal(p1 .. "\n\n" .. p2, d.text)
    assert.equal(2, d.meta.pages)
    assert.same({ "1", tostring(#p1 + 3) }, d.meta.page_starts)
    assert.equal(F .. "two_pages.pdf", d.id)
  end)

  it("maps offsets to pages", function()
    local d = assert(load.file(F .. "two_pages.pdf", { root = F }))[1]
    assert.equal("two_pages.pdf", d.id)
    assert.equal(1, load.page_of(d, 1))
    assert.equal(1, load.page_of(d, d.text:find("sea.", 1, true)))
    assert.equal(2, load.page_of(d, d.text:find("volcanoes", 1, true)))
    assert.equal(2, load.page_of(d, #d.text))
    assert.is_nil(load.page_of({ meta = {} }, 1))
  end)

  it("reports a broken PDF as format, with pdftotext's reason", function()
    local ok, msg, code = load.file(F .. "broken.pdf")
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("^rag.load.pdf: 'spec/fixtures/load/broken.pdf': pdftotext exit 1: ", msg)
    assert.matches("trailer", msg)
  end)

  it("refuses a file that is not a PDF and a missing file", function()
    local ok, msg, code = load.pdf(F .. "notes.md")
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("not a pdf", msg)
    ok, msg, code = load.pdf(F .. "missing.pdf")
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.matches("^rag.load.pdf: ", msg)
  end)

  it("quotes the path for the shell", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    local odd = dir .. "/-it's $(touch rag-load-pwned) `touch rag-load-pwned` a.pdf"
    local src = assert(io.open(F .. "two_pages.pdf", "rb"))
    local dst = assert(io.open(odd, "wb"))
    dst:write(src:read("*a"))
    src:close()
    dst:close()
    local d = assert(load.pdf(odd))[1]
    assert.equal(2, d.meta.pages)
    assert.is_nil(io.open("rag-load-pwned"))
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
