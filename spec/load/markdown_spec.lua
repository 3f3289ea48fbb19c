-- rag.load.markdown: front matter as meta, headings as sections.
local load = require("rag.load")

local F = "spec/fixtures/load/"

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

describe("rag.load.markdown", function()
  it("takes front matter as meta and title, and keeps the body byte for byte", function()
    local src = read(F .. "notes.md")
    local d = assert(load.file(F .. "notes.md", { root = F }))[1]
    assert.equal("notes.md", d.id)
    assert.equal("Field notes", d.title)
    assert.equal("Ana Reis", d.meta.author)
    assert.same({ "tides", "moon" }, d.meta.tags)
    assert.equal(false, d.meta.draft)
    assert.equal(2024, d.meta.year)
    assert.equal(91, d.meta.text_start)
    assert.equal(src:sub(91), d.text)
    assert.equal("Intro paragraph", d.text:sub(1, 15))
  end)

  it("gives sections whose offsets map back into the text", function()
    local d = assert(load.file(F .. "notes.md"))[1]
    assert.same({ "Tides", "Spring tides", "Neap tides" }, d.meta.sections)
    assert.same({ "38", "72", "152" }, d.meta.section_starts)
    assert.same({ "1", "2", "2" }, d.meta.section_levels)
    local s = load.sections(d)
    assert.same({ title = "Tides", level = 1, start = 38, stop = 71 }, s[1])
    assert.equal("# Tides\n\nThe moon pulls the sea.\n\n", d.text:sub(s[1].start, s[1].stop))
    assert.equal("## Spring tides\n\nStrongest when aligned.\n\n"
      .. "```\n# not a heading, inside code\n```\n\n",
      d.text:sub(s[2].start, s[2].stop))
    assert.equal("## Neap tides\n\nWeakest at the quarters.\n", d.text:sub(s[3].start, s[3].stop))
  end)

  it("takes the first H1 as title without front matter", function()
    local d = load.markdown("intro\n\n## Two\n\n# One #\n\ntext", { id = "m" })[1]
    assert.equal("One", d.title)
    assert.equal("m", d.id)
    assert.equal("m", d.source)
    assert.is_nil(d.meta.text_start)
    assert.same({ "Two", "One" }, d.meta.sections)
    d = load.markdown("no headings", { title = "T", meta = { lang = "en" } })[1]
    assert.equal("T", d.title)
    assert.equal("en", d.meta.lang)
    assert.is_nil(d.meta.sections)
  end)

  it("leaves a text whose first line is not a fence alone, and an unclosed one", function()
    local d = load.markdown("---\ntitle: x\nno closing fence\n")[1]
    assert.equal("---\ntitle: x\nno closing fence\n", d.text)
    assert.is_nil(d.title)
  end)

  it("refuses invalid UTF-8", function()
    local ok, _, code = load.markdown("# x\255")
    assert.is_nil(ok)
    assert.equal("encoding", code)
  end)
end)
