-- rag.load.html: the readable text of a page (acceptance E of issue 23).
local load = require("rag.load")

local F = "spec/fixtures/load/"

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

describe("rag.load.html", function()
  it("keeps the article and drops navigation, scripts, styles, aside, form and footer", function()
    local docs = assert(load.file(F .. "page.html", { root = "spec/fixtures/load" }))
    assert.equal(1, #docs)
    local d = docs[1]
    assert.equal("page.html", d.id)
    assert.equal(F .. "page.html", d.source)
    assert.equal("Tides and the Moon | Coastal Notes", d.title)
    assert.equal(table.concat({
      "Tides and the Moon",
      "",
      "By Ana Reis",
      "",
      "The moon's gravity pulls the ocean toward it, raising a bulge of water.",
      "",
      "Spring tides",
      "",
      "When the sun and moon align, the tides are strongest & highest.",
      "",
      "Neap tides",
      "",
      "First quarter",
      "Last quarter",
      "",
      "high  07:12",
      "low   13:30",
    }, "\n"), d.text)
    for _, gone in ipairs({ "Home", "Archive", "tracking code", "font-family", "Popular posts",
      "Subscribe", "Hidden promo", "inline script", "enable JavaScript", "Sign up",
      "All rights reserved", "Coastal Notes." }) do
      assert.is_nil(d.text:find(gone, 1, true), gone)
    end
  end)

  it("gives the headings as sections whose offsets map into the text", function()
    local d = assert(load.html(read(F .. "page.html"), { id = "p" }))[1]
    assert.same({ "Tides and the Moon", "Spring tides", "Neap tides" }, d.meta.sections)
    assert.same({ "1", "2", "2" }, d.meta.section_levels)
    local s = load.sections(d)
    assert.equal(3, #s)
    assert.equal("Spring tides\n\nWhen the sun and moon align, the tides are strongest"
      .. " & highest.\n\n",
      d.text:sub(s[2].start, s[2].stop))
    assert.equal(#d.text, s[3].stop)
    assert.equal("Tides and the Moon\n\nBy Ana Reis\n\nThe moon's gravity pulls the ocean"
      .. " toward it,"
      .. " raising a bulge of water.\n\n", d.text:sub(s[1].start, s[1].stop))
  end)

  it("drops the chrome of a page without main or article", function()
    local d = load.html("<html><head><title>T</title><style>p { color: red }</style></head><body>"
      .. "<header><h1>Site</h1><nav>Home About</nav></header><script>var x = 1;</script>"
      .. "<div class='content'><h2>Post</h2><p>Body <i>text</i>.</p><aside>Related</aside>"
      .. "<form>Sign up</form><style>.a{}</style></div><footer>Foot</footer>"
      .. "<noscript>Enable JS</noscript><nav>More links</nav></body></html>")[1]
    assert.equal("Post\n\nBody text.", d.text)
    assert.equal("T", d.title)
    d = load.html("<body><nav><p>menu</p></nav><p>kept</p></body>")[1]
    assert.equal("kept", d.text)
  end)

  it("reads main, else the articles, else the body; title from h1 without <title>", function()
    local d = load.html("<body><div>menu</div><main><h1>M</h1><p>in main</p></main>"
      .. "<p>out</p></body>")[1]
    assert.equal("M\n\nin main", d.text)
    assert.equal("M", d.title)
    d = load.html("<body><p>out</p><article><p>a1</p></article>"
      .. "<div><article>a2</article></div></body>")[1]
    assert.equal("a1\n\na2", d.text)
    d = load.html("<p>one<br>two</p><div>three</div>"
      .. "<table><tr><td>a</td><td>b</td></tr></table>")[1]
    assert.equal("one\ntwo\n\nthree\n\na b", d.text)
    assert.is_nil(d.title)
    d = load.html('<main hidden>x</main><p aria-hidden="true">y</p><p>z</p>')[1]
    assert.equal("z", d.text)
    -- inline styles that hide, with the spacing and case pages use
    d = load.html('<p style="display:none">a</p><p style="Visibility: Hidden">b</p>'
      .. '<p style="color: red; visibility:hidden">c</p><p style="display: block">d</p>')[1]
    assert.equal("d", d.text)
    assert.same({}, load.sections(d))
  end)

  it("returns an empty text for an empty page and refuses invalid UTF-8", function()
    assert.equal("", load.html("")[1].text)
    local ok, msg, code = load.html("<p>\255</p>", { id = "x" })
    assert.is_nil(ok)
    assert.equal("encoding", code)
    assert.matches("^rag.load.html: 'x': invalid utf%-8 at byte 4", msg)
  end)

  it("raises on misuse", function()
    assert.has_error(function() load.html(1) end,
      "rag.load.html: text must be a string, got number")
    assert.has_error(function() load.html("", { bogus = 1 }) end,
      "rag.load.html: unknown option 'bogus'")
  end)
end)

describe("rag.load.html's libxml2", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  it("is opened on the first page, not when rag loads", function()
    assert.equal("false true", require("spec.helpers").maps_lib("libxml2",
      "local load = require('rag.load')", "assert(#load.file('" .. F .. "page.html') == 1)"))
  end)
end)
