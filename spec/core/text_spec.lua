-- rag.text.normalize: table-driven cases (input, options, expected).
local rag = require("rag")

local normalize = rag.text.normalize

describe("rag.text.normalize", function()
  local cases = {
    -- name, input, opts, expected
    { "empty", "", nil, "" },
    { "only whitespace", " \n\t \r\n ", nil, "" },
    { "plain ASCII untouched", "Hello, world.", nil, "Hello, world." },
    { "trims both ends", "  \t hello \n ", nil, "hello" },
    { "keeps inner tabs", "a\tb", nil, "a\tb" },
    { "folds runs of spaces", "a    b  c", nil, "a b c" },
    { "keeps one and two newlines", "a\nb\n\nc", nil, "a\nb\n\nc" },
    { "folds 3+ newlines to 2", "a\n\n\n\n\nb", nil, "a\n\nb" },
    { "blank lines with spaces count as blank", "a\n \n \n b", nil, "a\n \n b" },
    { "CRLF becomes LF", "a\r\nb\r\n\r\n\r\nc", nil, "a\nb\n\nc" },
    { "lone CR becomes LF", "a\rb", nil, "a\nb" },
    { "drops C0 controls", "a\0b\1c\8d\11e\12f\27g\31h", nil, "abcdefgh" },
    { "drops DEL and C1 controls", "a\127b\194\133c\194\159d", nil, "abcd" },
    { "control between spaces leaves one space", "a \1 b", nil, "a b" },
    { "full-width ASCII to ASCII", "Ｈｅｌｌｏ１２３！", nil, "Hello123!" },
    { "ideographic space folds", "中文　　文本", nil, "中文 文本" },
    { "no-break space to space", "a\194\160\194\160b", nil, "a b" },
    { "ligature split under NFKC", "ﬁne", nil, "fine" },
    { "ligature kept under NFC", "ﬁne", { form = "NFC" }, "ﬁne" },
    { "composes e + acute", "e\204\129", nil, "\195\169" },
    { "NFC composes too", "e\204\129", { form = "NFC" }, "\195\169" },
    { "form=false leaves decomposed", "e\204\129", { form = false }, "e\204\129" },
    { "form=false keeps full-width", "Ａ", { form = false }, "Ａ" },
    { "form=false still cleans", " a  \1b ", { form = false }, "a b" },
    { "half-width katakana to full", "ｶﾀｶﾅ", nil, "カタカナ" },
    { "circled digits", "①②", nil, "12" },
    { "superscript", "x²", nil, "x2" },
    { "Chinese untouched", "检索增强生成。", nil, "检索增强生成。" },
    { "Japanese untouched", "日本語のテキスト", nil, "日本語のテキスト" },
    { "emoji ZWJ sequence kept", "👩‍💻 ok", nil, "👩‍💻 ok" },
    { "flag kept", "🇫🇷", nil, "🇫🇷" },
    { "Arabic kept", "مرحبا  بالعالم", nil, "مرحبا بالعالم" },
    { "Devanagari kept", "नमस्ते", nil, "नमस्ते" },
    { "invalid byte replaced", "a\255b", nil, "a\239\191\189b" },
    { "each invalid byte replaced", "\192\175", nil, "\239\191\189\239\191\189" },
    { "truncated sequence replaced", "ab\228\184", nil, "ab\239\191\189\239\191\189" },
    { "encoded surrogate replaced", "\237\160\128", nil, "\239\191\189\239\191\189\239\191\189" },
    { "leading BOM kept (not whitespace)", "\239\187\191x", nil, "\239\187\191x" },
    { "trailing ideographic space trimmed", "x\227\128\128", { form = false }, "x" },
  }

  for _, c in ipairs(cases) do
    it(c[1], function()
      assert.equal(c[4], normalize(c[2], c[3]))
    end)
  end

  it("is idempotent on every case", function()
    for _, c in ipairs(cases) do
      local once = normalize(c[2], c[3])
      assert.equal(once, normalize(once, c[3]), c[1])
    end
  end)

  it("returns nil, msg, 'encoding' for invalid UTF-8 when asked", function()
    local r, msg, code = normalize("ok\255", { invalid = "error" })
    assert.is_nil(r)
    assert.equal("rag.text.normalize: invalid utf-8 at byte 3", msg)
    assert.equal("encoding", code)
    assert.equal("ok", normalize("ok", { invalid = "error" }))
    assert.equal("ok\239\191\189", normalize("ok\255", { invalid = "replace" }))
  end)

  it("handles large input", function()
    local s = string.rep("Ａb  c\r\n\n\n", 50000)
    local out = normalize(s)
    assert.equal(string.rep("Ab c\n\n", 50000):sub(1, -3), out)
  end)

  it("raises on misuse", function()
    assert.has_error(function() normalize() end,
      "bad argument #1 to 'normalize' (string expected, got no value)")
    assert.has_error(function() normalize({}) end,
      "bad argument #1 to 'normalize' (string expected, got table)")
    assert.has_error(function() normalize("x", { form = "NFD" }) end,
      "rag.text.normalize: option 'form' must be \"NFKC\", \"NFC\" or false")
    assert.has_error(function() normalize("x", { form = true }) end,
      "rag.text.normalize: option 'form' must be \"NFKC\", \"NFC\" or false")
    assert.has_error(function() normalize("x", { invalid = "drop" }) end,
      "rag.text.normalize: option 'invalid' must be \"replace\" or \"error\"")
    assert.has_error(function() normalize("x", { bogus = 1 }) end,
      "rag.text.normalize: unknown option 'bogus'")
    assert.has_error(function() normalize("x", "NFC") end,
      "rag.text.normalize: opts must be a table, got string")
  end)
end)
