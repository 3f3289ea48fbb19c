-- rag.load.glob: the globs of rag.load.dir.
local glob = require("rag.load.glob")

describe("rag.load.glob", function()
  it("matches table-driven cases", function()
    for _, t in ipairs({
      { "*.md", "a.md", true }, { "*.md", "d/a.md", true }, { "*.md", "a.mdx", false },
      { "d/*.md", "d/a.md", true }, { "d/*.md", "d/e/a.md", false },
      { "**/*.md", "a.md", true }, { "**/*.md", "x/y/a.md", true },
      { "docs/**", "docs/a/b", true }, { "docs/**", "doc/a", false },
      { "a?c", "abc", true }, { "a?c", "a/c", false }, { "a?c", "ac", false },
      { "[ab]x", "bx", true }, { "[!ab]x", "bx", false }, { "[!ab]x", "cx", true },
      { "[a-c]x", "cx", true }, { "[a-c]x", "dx", false }, { "[x", "[x", true },
      { "x/**/y", "x/y", true }, { "x/**/y", "x/a/b/y", true }, { "x/**/y", "x/a/b/z", false },
    }) do
      assert.equal(t[3], glob.match(t[1], t[2]), t[1] .. " ~ " .. t[2])
    end
  end)
end)
