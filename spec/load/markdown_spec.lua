-- rag.load.markdown: front matter as meta, headings as sections.
local load = require("rag.load")
local unpack = table.unpack or unpack

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

  it("finds headings as the CommonMark spec does", function()
    -- the examples of CommonMark 0.31's section 4.2 (ATX headings), with the
    -- headings the spec's HTML shows: { text, { heading, level }... }
    local cases = {
      { "# foo\n## foo\n### foo\n#### foo\n##### foo\n###### foo",
        { "foo", 1 }, { "foo", 2 }, { "foo", 3 }, { "foo", 4 }, { "foo", 5 }, { "foo", 6 } },
      { "####### foo" },                 -- seven: a paragraph
      { "####### foo\n###### bar", { "bar", 6 } },
      { "#5 bolt\n\n#hashtag" },       -- no space after the run
      { "\\## foo" },                  -- escaped
      { "#                  foo                     ", { "foo", 1 } },
      { " ### foo\n  ## foo\n   # foo", { "foo", 3 }, { "foo", 2 }, { "foo", 1 } },
      { "    # foo" },                   -- indented code
      { "## foo ##\n  ###   bar    ###", { "foo", 2 }, { "bar", 3 } },
      { "# foo ##################################\n##### foo ##", { "foo", 1 }, { "foo", 5 } },
      { "### foo ###     ", { "foo", 3 } },
      { "### foo ### b", { "foo ### b", 3 } },
      { "# foo#", { "foo#", 1 } },
      { "Foo bar\n# baz\nBar foo", { "baz", 1 } },
      { "## \n#\n### ###", { "", 2 }, { "", 1 }, { "", 3 } },
      { "#\tfoo", { "foo", 1 } },
      -- setext headings, and no heading inside a quote, a list item or code
      { "Foo *bar*\n=========\n\nBaz\n---", { "Foo *bar*", 1 }, { "Baz", 2 } },
      { "> # quoted\n\n- # item\n\n```\n# code\n```" },
      { "``\n# foo\n``", { "foo", 1 } }, -- two backticks open no fence
      { "~~~\n# code\n~~~\n# after", { "after", 1 } },
    }
    for _, c in ipairs(cases) do
      local d = load.markdown(c[1])[1]
      local got = {}
      for i, t in ipairs(d.meta.sections or {}) do
        got[i] = { t, tonumber(d.meta.section_levels[i]) }
      end
      assert.same({ unpack(c, 2) }, got, ("%q"):format(c[1]))
    end
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
