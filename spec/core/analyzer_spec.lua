-- rag.text.analyzer and rag.text.tokenize: table-driven cases (input,
-- analyzer options, expected terms), spans, every option, the object's
-- lifetime, misuse, and an out-of-memory walk in RAG_TESTING builds.
-- Stems are the Snowball English algorithm's published outputs.
local rag = require("rag")
local helpers = require("spec.helpers")

local analyzer, tokenize = rag.text.analyzer, rag.text.tokenize

-- UTF-8 for code points, so the file stays valid Lua 5.1 (no "\u{...}").
local function u(...)
  local out = {}
  for i, cp in ipairs({ ... }) do
    if cp < 0x80 then
      out[i] = string.char(cp)
    elseif cp < 0x800 then
      out[i] = string.char(0xC0 + math.floor(cp / 0x40), 0x80 + cp % 0x40)
    elseif cp < 0x10000 then
      out[i] = string.char(0xE0 + math.floor(cp / 0x1000),
        0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
    else
      out[i] = string.char(0xF0 + math.floor(cp / 0x40000),
        0x80 + math.floor(cp / 0x1000) % 0x40,
        0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
    end
  end
  return table.concat(out)
end

local NOSTEM = { stem = false }
local unpack = table.unpack or unpack

local cases = {
  -- name, input, analyzer options, expected terms
  -- English words, stems and stopwords
  { "empty input", "", nil, {} },
  { "only spaces and punctuation", "  ... !!! --- ?? ", nil, {} },
  { "lowercases ASCII", "Hello World", nil, { "hello", "world" } },
  { "stems running", "running", nil, { "run" } },
  { "stems generously", "generously", nil, { "generous" } },
  { "stems studies", "studies", nil, { "studi" } },
  { "stems plurals", "caresses ponies ties cats", nil, { "caress", "poni", "tie", "cat" } },
  { "one stem for a family", "connection connected connecting connections", nil,
    { "connect", "connect", "connect", "connect" } },
  { "y becomes i", "happy happiness", nil, { "happi", "happi" } },
  { "plural acronym", "APIs", nil, { "api" } },
  { "drops built-in stopwords", "the cat and the hat", nil, { "cat", "hat" } },
  { "stopwords in any case", "The THE tHe", nil, {} },
  { "the bm25s list is short: pronouns stay", "i me my we", nil, { "i", "me", "my", "we" } },
  { "stopwords go before stemming", "will willing", nil, { "will" } },
  { "apostrophe between letters stays", "don't", nil, { "don't" } },
  { "possessive removed by the stemmer", "dog's", nil, { "dog" } },
  { "typographic apostrophe is the ASCII one", "don" .. u(0x2019) .. "t", nil, { "don't" } },
  { "outer apostrophes separate", "'quoted' dogs'", nil, { "quot", "dog" } },
  { "several inner apostrophes", "rock'n'roll", NOSTEM, { "rock'n'roll" } },
  { "hyphen separates", "state-of-the-art", nil, { "state", "art" } },
  { "en dash separates numbers", "2010" .. u(0x2013) .. "2020", nil, { "2010", "2020" } },
  { "identifier stays whole", "error_code", nil, { "error_code" } },
  { "identifier is not stemmed", "running_jobs", nil, { "running_jobs" } },
  { "leading and trailing underscores", "__init__", nil, { "__init__" } },
  { "underscore-only runs are dropped", "__ _ ___", nil, {} },
  { "markdown emphasis with underscores stays attached", "**bold** _it_ `code`", nil,
    { "bold", "_it_", "code" } },
  { "number", "4012", nil, { "4012" } },
  { "decimal point between digits", "pi is 3.14", nil, { "pi", "3.14" } },
  { "thousands separators", "1,000,000 cells", nil, { "1,000,000", "cell" } },
  { "comma before a space splits", "1, 2", nil, { "1", "2" } },
  { "sentence-final period", "Version 2.", nil, { "version", "2" } },
  { "dotted version", "v1.2.3", nil, { "v1.2.3" } },
  { "IP address", "192.168.0.1", nil, { "192.168.0.1" } },
  { "period between letters separates", "e.g. U.S.", nil, { "e", "g", "u", "s" } },
  { "minus sign separates", "-5", nil, { "5" } },
  { "words with digits are not stemmed", "1990s covid19 running2", nil,
    { "1990s", "covid19", "running2" } },
  { "ordinal", "21st", nil, { "21st" } },
  { "mixed-case identifiers", "HTTP2 IPv6", nil, { "http2", "ipv6" } },
  { "camelCase is one word", "getElementById", nil, { "getelementbyid" } },
  { "URL", "https://example.com/a_b", nil, { "https", "exampl", "com", "a_b" } },
  { "email", "user@example.org", nil, { "user", "exampl", "org" } },
  { "currency and percent separate", "$100 50%", nil, { "100", "50" } },
  { "hashtag and mention", "#rag @lua", nil, { "rag", "lua" } },
  { "tabs and line breaks separate", "a\tb\nc\r\nd", nil, { "b", "c", "d" } },
  -- Latin beyond ASCII
  { "accented upper and lower case", "CAF" .. u(0xC9) .. " caf" .. u(0xE9), NOSTEM,
    { "caf" .. u(0xE9), "caf" .. u(0xE9) } },
  { "combining acute composes", "cafe" .. u(0x301), NOSTEM, { "caf" .. u(0xE9) } },
  { "combining mark keeps the word whole", "e" .. u(0x301) .. "tude", NOSTEM,
    { u(0xE9) .. "tude" } },
  { "sharp s folds to ss", "Stra" .. u(0xDF) .. "e", NOSTEM, { "strasse" } },
  { "sharp s folds before stemming", "Stra" .. u(0xDF) .. "e", nil, { "strass" } },
  { "diaeresis survives the English stemmer", "na" .. u(0xEF) .. "ve", nil,
    { "na" .. u(0xEF) .. "v" } },
  { "ligature splits", u(0xFB01) .. "nance", NOSTEM, { "finance" } },
  { "soft hyphen is invisible", "co" .. u(0xAD) .. "operation", NOSTEM, { "cooperation" } },
  { "Greek final sigma folds", "ΣΊΣΥΦΟΣ Σίσυφος", NOSTEM, { "σίσυφοσ", "σίσυφοσ" } },
  { "Cyrillic", "Привет, МИР", NOSTEM, { "привет", "мир" } },
  { "Arabic", "مرحبا بالعالم", NOSTEM, { "مرحبا", "بالعالم" } },
  { "Devanagari vowel signs stay in the word", "नमस्ते दुनिया", NOSTEM, { "नमस्ते", "दुनिया" } },
  { "Thai has no spaces: one word", "สวัสดีครับ", NOSTEM, { "สวัสดีครับ" } },
  -- Chinese, Japanese, Korean
  { "Chinese bigrams", "检索增强生成", nil, { "检索", "索增", "增强", "强生", "生成" } },
  { "one Han character is a unigram", "中", nil, { "中" } },
  { "CJK punctuation separates runs", "你好，世界。", nil, { "你好", "世界" } },
  { "digits split from Han", "2024年", nil, { "2024", "年" } },
  { "kanji and kana form one run", "日本語です", nil, { "日本", "本語", "語で", "です" } },
  { "prolonged sound mark is katakana", "データ", nil, { "デー", "ータ" } },
  { "katakana middle dot separates", "ロバート・スミス", nil,
    { "ロバ", "バー", "ート", "スミ", "ミス" } },
  { "half-width katakana folds to full-width", "ｶﾀｶﾅ", nil, { "カタ", "タカ", "カナ" } },
  { "half-width voiced mark stays with its kana", "ｶﾞｲﾄﾞ", nil, { "ガイ", "イド" } },
  { "Korean bigrams within words", "한국어 처리", nil, { "한국", "국어", "처리" } },
  { "conjoining jamo form one syllable each",
    u(0x1112, 0x1161, 0x11AB, 0x1100, 0x1173, 0x11AF), nil, { "한글" } },
  { "compatibility ideograph folds", u(0xF900), nil, { u(0x8C48) } },
  { "invisible Hangul filler folds to nothing", "x" .. u(0xFFA0) .. " " .. u(0xFFA0, 0xFFA0), nil,
    { "x" } },
  { "iteration mark is Han", "時々", nil, { "時々" } },
  { "extension B ideographs", u(0x20000, 0x20001), nil, { u(0x20000, 0x20001) } },
  -- mixed scripts, full-width, emoji
  { "Latin and Han in one string", "GPT模型的RAG系统", nil, { "gpt", "模型", "型的", "rag", "系统" } },
  { "Latin inside a Han run splits it", "使用Lua编写", nil, { "使用", "lua", "编写" } },
  { "full-width Latin folds to ASCII", "ＡＢＣ ABC abc", nil, { "abc", "abc", "abc" } },
  { "full-width digits fold", "２０２４年", nil, { "2024", "年" } },
  { "emoji separate words", "I " .. u(0x2764, 0xFE0F) .. " RAG " .. u(0x1F680), nil,
    { "i", "rag" } },
  { "emoji ZWJ sequence", u(0x1F469, 0x200D, 0x1F4BB) .. "coder", nil, { "coder" } },
  { "keycap digit is the digit", "1" .. u(0xFE0F, 0x20E3), nil, { "1" } },
  { "skin tone modifier", u(0x1F44D, 0x1F3FD) .. "ok", nil, { "ok" } },
  { "byte order mark", u(0xFEFF) .. "hello", nil, { "hello" } },
  -- options
  { "stem=false", "running dogs", NOSTEM, { "running", "dogs" } },
  { "stopwords=false", "the cat", { stopwords = false }, { "the", "cat" } },
  { "lowercase=false keeps case", "Hello WORLD", { lowercase = false, stem = false },
    { "Hello", "WORLD" } },
  { "lowercase=false keeps full-width", "ＡＢＣ", { lowercase = false }, { "ＡＢＣ" } },
  { "lowercase=false: stopwords match exactly", "The the", { lowercase = false, stem = false },
    { "The" } },
  { "cjk=unigram", "中文字", { cjk = "unigram" }, { "中", "文", "字" } },
  { "cjk=both", "中文字", { cjk = "both" }, { "中", "中文", "文", "文字", "字" } },
  { "cjk=both on one character", "中", { cjk = "both" }, { "中" } },
  { "cjk=false keeps runs whole", "中文字 日本", { cjk = false }, { "中文字", "日本" } },
  { "cjk=false still splits Latin off", "GPT模型", { cjk = false }, { "gpt", "模型" } },
  { "custom stopwords are folded like terms", "foo bar baz", { stopwords = { "foo", "BAR" } },
    { "baz" } },
  { "custom CJK stopword", "我的书", { cjk = "unigram", stopwords = { "的" } }, { "我", "书" } },
  { "empty stopword list", "the cat", { stopwords = {} }, { "the", "cat" } },
  { "only empty stopwords", "the cat", { stopwords = { "", "" } }, { "the", "cat" } },
  { "French stemmer, no stopwords by default", "Les chevaux continuellement",
    { lang = "french" }, { "le", "cheval", "continuel" } },
  { "French with its own stopwords", "les chevaux", { lang = "french", stopwords = { "les" } },
    { "cheval" } },
  { "German stemmer", "Häuser Bücher", { lang = "german" }, { "haus", "buch" } },
  { "Porter stemmer", "generalization running", { lang = "porter" }, { "gener", "run" } },
  { "Russian stemmer", "книги", { lang = "russian" }, { "книг" } },
}

describe("rag.text.tokenize", function()
  for _, c in ipairs(cases) do
    it(c[1], function()
      assert.same(c[4], tokenize(c[2], c[3]))
    end)
  end

  it("gives the same terms through an analyzer object", function()
    for _, c in ipairs(cases) do
      assert.same(c[4], analyzer(c[3]):tokenize(c[2]), c[1])
    end
  end)

  it("scans ASCII words of any length, capitals and digits anywhere in them", function()
    -- 7 to 24 bytes, across the scanner's steps of eight; Snowball takes
    -- "-ing" from zz..running and then one n of the double; a digit
    -- anywhere stops the stemming, but not one in the next word
    for k = 0, 17 do
      local word = ("z"):rep(k) .. "running"
      local stem = ("z"):rep(k) .. "run"
      for p = 1, #word do
        local up = word:sub(1, p - 1) .. word:sub(p, p):upper() .. word:sub(p + 1)
        local dig = word:sub(1, p - 1) .. "7" .. word:sub(p + 1)
        for _, tail in ipairs({ "", " zebra", ". Zebra", ",zebra", "\tZEBRA", " 42", "!7" }) do
          local more = tail == "" and {} or { tail:match("%d+") or "zebra" }
          assert.same({ stem, unpack(more) }, tokenize(up .. tail), up .. tail)
          assert.same({ dig, unpack(more) }, tokenize(dig .. tail), dig .. tail)
        end
      end
    end
  end)

  it("returns spans that slice out each term's source", function()
    local s = "Running dogs' GPT模型 3.14"
    local terms, starts, stops = tokenize(s, nil, { spans = true })
    assert.same({ "run", "dog", "gpt", "模型", "3.14" }, terms)
    local src = {}
    for i = 1, #terms do
      src[i] = s:sub(starts[i], stops[i])
    end
    assert.same({ "Running", "dogs", "GPT", "模型", "3.14" }, src)
    assert.same({ 1, 9, 15, 18, 25 }, starts)
    assert.same({ 7, 12, 17, 23, 28 }, stops)
  end)

  it("spans re-tokenize to their term and never go backwards", function()
    for _, c in ipairs(cases) do
      local a = analyzer(c[3])
      local terms, starts, stops = a:tokenize(c[2], { spans = true })
      assert.equal(#terms, #starts, c[1])
      assert.equal(#terms, #stops, c[1])
      for i = 1, #terms do
        assert.is_true(starts[i] >= 1 and starts[i] <= stops[i] and stops[i] <= #c[2], c[1])
        if i > 1 then
          assert.is_true(starts[i] >= starts[i - 1] and stops[i] >= stops[i - 1], c[1])
        end
        -- the source of one term analyzes to that term alone (in "both"
        -- mode a bigram's source gives its unigrams too: tested below)
        if not (c[3] and c[3].cjk == "both") then
          assert.same({ terms[i] }, a:tokenize(c[2]:sub(starts[i], stops[i])), c[1])
        end
      end
    end
  end)

  it("gives spans of both unigrams and bigrams in cjk=both mode", function()
    local terms, starts, stops = tokenize("中文字", { cjk = "both" }, { spans = true })
    assert.same({ "中", "中文", "文", "文字", "字" }, terms)
    assert.same({ 1, 1, 4, 4, 7 }, starts)
    assert.same({ 3, 6, 6, 9, 9 }, stops)
  end)

  it("spans=false or absent returns one value", function()
    assert.equal(1, select("#", tokenize("a b", nil, { spans = false })))
    assert.equal(1, select("#", tokenize("a b")))
    assert.equal(3, select("#", tokenize("", nil, { spans = true })))
  end)

  it("returns nil, msg, 'encoding' for invalid UTF-8", function()
    local bad = {
      { "ok\255", 3 },
      { "\192\175", 1 },            -- overlong '/'
      { "ab\228\184", 3 },          -- truncated
      { "\237\160\128", 1 },        -- encoded surrogate
      { "中文\255", 7 },
      { "fine text " .. string.rep("x", 100) .. "\128", 111 },
    }
    for _, b in ipairs(bad) do
      local r, msg, code = tokenize(b[1])
      assert.is_nil(r)
      assert.equal("rag.text.tokenize: invalid utf-8 at byte " .. b[2], msg)
      assert.equal("encoding", code)
    end
    local r, msg, code = analyzer():tokenize("ok\255", { spans = true })
    assert.is_nil(r)
    assert.equal("rag.analyzer.tokenize: invalid utf-8 at byte 3", msg)
    assert.equal("encoding", code)
  end)

  it("handles large input", function()
    local s = string.rep("The Running dogs' 模型 3.14 Straße ", 20000)
    local terms = tokenize(s)
    assert.equal(20000 * 5, #terms)
    assert.same({ "run", "dog", "模型", "3.14", "strass", "run" },
      { terms[1], terms[2], terms[3], terms[4], terms[5], terms[6] })
    assert.equal("strass", terms[#terms])
  end)

  it("handles a very long word", function()
    local w = string.rep("Ab", 100000)
    assert.same({ w:lower() }, tokenize(w))
    local h = string.rep("é", 100000)
    assert.same({ h }, tokenize(h))
  end)

  it("uses the English analyzer by default", function()
    local s = "The Studies of GPT模型 don't"
    assert.same(analyzer():tokenize(s), tokenize(s))
    assert.same(analyzer({ lang = "english" }):tokenize(s), tokenize(s, {}))
  end)

  it("raises on misuse", function()
    assert.has_error(function() tokenize() end,
      "bad argument #1 to 'tokenize' (string expected, got no value)")
    assert.has_error(function() tokenize({}) end,
      "bad argument #1 to 'tokenize' (string expected, got table)")
    assert.has_error(function() tokenize(true) end,
      "bad argument #1 to 'tokenize' (string expected, got boolean)")
    assert.has_error(function() tokenize("x", 42) end,
      "bad argument #2 to 'tokenize' (rag.analyzer or table expected, got number)")
    assert.has_error(function() tokenize("x", "english") end,
      "bad argument #2 to 'tokenize' (rag.analyzer or table expected, got string)")
    assert.has_error(function() tokenize("x", nil, { bogus = true }) end,
      "rag.text.tokenize: unknown option 'bogus'")
    assert.has_error(function() tokenize("x", nil, { spans = 1 }) end,
      "rag.text.tokenize: option 'spans' must be a boolean, got number")
    assert.has_error(function() tokenize("x", nil, "spans") end,
      "rag.text.tokenize: opts must be a table, got string")
    assert.has_error(function() tokenize("x", { cjk = "trigram" }) end,
      "rag.text.analyzer: option 'cjk' must be \"bigram\", \"unigram\" or \"both\"")
    -- Lua 5.1 names the other userdata's type "userdata", later ones "FILE*"
    assert.error_matches(function() tokenize("x", io.stdout) end,
      "bad argument #2 to 'tokenize' %(rag%.analyzer expected, got [%w*]+%)$")
  end)
end)

describe("rag.text.analyzer", function()
  it("builds with defaults", function()
    local a = analyzer()
    assert.equal("rag.analyzer (english)", tostring(a))
    assert.same({ lang = "english", stem = true, stopwords = true, cjk = "bigram",
      lowercase = true }, a:config())
  end)

  it("reports its options and round-trips them", function()
    local opts = { lang = "french", stem = false, stopwords = { "le", "La", "les" },
      cjk = "both", lowercase = false }
    local a = analyzer(opts)
    local cfg = a:config()
    assert.same(opts, cfg)
    local b = analyzer(cfg)
    assert.same(cfg, b:config())
    local s = "La maison LES chevaux 中文字"
    assert.same(a:tokenize(s), b:tokenize(s))
    assert.same({ "maison", "LES", "chevaux", "中", "中文", "文", "文字", "字" }, a:tokenize(s))
    assert.same(false, analyzer({ cjk = false }):config().cjk)
    assert.same("unigram", analyzer({ cjk = "unigram" }):config().cjk)
    assert.same(false, analyzer({ lang = "german" }):config().stopwords)
    assert.same(true, analyzer({ lang = "porter" }):config().stopwords)
  end)

  it("copies the stopword list", function()
    local words = { "foo" }
    local a = analyzer({ stopwords = words })
    words[1] = "bar"
    assert.same({ "bar" }, a:tokenize("foo bar"))
    assert.same({ "foo" }, a:config().stopwords)
  end)

  it("accepts every libstemmer language", function()
    for _, lang in ipairs({ "arabic", "danish", "dutch", "english", "finnish", "french",
      "german", "greek", "hungarian", "italian", "norwegian", "porter", "portuguese",
      "romanian", "russian", "spanish", "swedish", "turkish" }) do
      assert.equal(lang, analyzer({ lang = lang }):config().lang)
    end
  end)

  it("closes idempotently; a closed analyzer raises", function()
    local a = analyzer()
    assert.same({ "run" }, a:tokenize("running"))
    a:close()
    a:close()
    assert.equal("rag.analyzer (closed)", tostring(a))
    local ok, err = pcall(a.tokenize, a, "x")
    assert.is_false(ok)
    assert.truthy(tostring(err):find("closed rag.analyzer", 1, true))
    assert.has_error(function() a:config() end, "attempt to use a closed rag.analyzer")
    assert.has_error(function() tokenize("x", a) end, "attempt to use a closed rag.analyzer")
    local mt = getmetatable(a)
    mt.__gc(a)
    mt.__close(a)
    assert.equal("rag.analyzer (closed)", tostring(a))
  end)

  it("keeps the default analyzer across calls", function()
    collectgarbage()
    assert.same({ "run" }, tokenize("running"))
    collectgarbage()
    assert.same({ "run" }, tokenize("running"))
  end)

  it("raises on misuse", function()
    local ok, err = pcall(analyzer, { lang = "xx" })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("rag.text.analyzer: unknown language 'xx'", 1, true))
    ok, err = pcall(analyzer, { bogus = 1 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("unknown option 'bogus'", 1, true))
    assert.has_error(function() analyzer("english") end,
      "rag.text.analyzer: opts must be a table, got string")
    assert.has_error(function() analyzer({ lang = 1 }) end,
      "rag.text.analyzer: option 'lang' must be a string, got number")
    assert.has_error(function() analyzer({ lang = "English" }) end,
      "rag.text.analyzer: unknown language 'English'")
    assert.has_error(function() analyzer({ stem = "yes" }) end,
      "rag.text.analyzer: option 'stem' must be a boolean, got string")
    assert.has_error(function() analyzer({ lowercase = 0 }) end,
      "rag.text.analyzer: option 'lowercase' must be a boolean, got number")
    assert.has_error(function() analyzer({ cjk = "trigram" }) end,
      "rag.text.analyzer: option 'cjk' must be \"bigram\", \"unigram\" or \"both\"")
    assert.has_error(function() analyzer({ cjk = 2 }) end,
      "rag.text.analyzer: option 'cjk' must be \"bigram\", \"unigram\" or \"both\"")
    assert.has_error(function() analyzer({ stopwords = "the" }) end,
      "rag.text.analyzer: option 'stopwords' must be a boolean or a list of strings, got string")
    assert.has_error(function() analyzer({ stopwords = { "a", 1 } }) end,
      "rag.text.analyzer: stopwords[2] must be a string, got number")
    assert.has_error(function() analyzer({ stopwords = { "a\0b" } }) end,
      "rag.text.analyzer: stopwords[1] contains a NUL byte")
    assert.has_error(function() analyzer({ stopwords = true, lang = "french" }) end,
      "rag.text.analyzer: the built-in stopwords are English; give a list for 'french'")
    assert.has_error(function() analyzer({ [1] = "english" }) end,
      "rag.text.analyzer: option keys must be strings")
    assert.has_error(function() analyzer().tokenize({}, "x") end,
      "bad argument #1 to 'tokenize' (rag.analyzer expected, got table)")
    assert.has_error(function() analyzer():tokenize({}) end,
      "bad argument #1 to 'tokenize' (string expected, got table)")
    assert.has_error(function() analyzer():tokenize("x", { bogus = 1 }) end,
      "rag.analyzer.tokenize: unknown option 'bogus'")
    assert.error_matches(function() analyzer().config(io.stdout) end,
      "bad argument #1 to 'config' %(rag%.analyzer expected, got [%w*]+%)$")
  end)
end)

describe("analyzer allocation failures", function()
  local fail_alloc = rag.core._fail_alloc
  if not fail_alloc then
    it("need a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  -- Fails the 1st, 2nd, ... allocation of op until it completes; each failure
  -- must raise "not enough memory" (LeakSanitizer checks nothing leaks).
  local walk = helpers.oom_walk

  local function walk_same(fn, min_points)
    local expected = fn()
    local points = walk(fn)
    assert.is_true(points >= min_points, "fault points: " .. points)
    assert.same(expected, fn())
  end

  -- enough distinct words to allocate the stem cache, with folding and CJK
  local words = {}
  for i = 1, 700 do
    words[i] = "Word" .. string.char(97 + i % 26, 97 + math.floor(i / 26) % 26) .. "s"
  end
  local text = table.concat(words, " ") .. " Straße ＡＢＣ GPT模型的RAG系统 don’t"

  it("analyzer construction raises and recovers", function()
    walk_same(function()
      return analyzer({ stopwords = { "the", "Straße", "模型" }, cjk = "both" }):config()
    end, 4)
  end)

  it("one-off tokenize raises and recovers", function()
    walk_same(function()
      return tokenize(text, { stopwords = { "Straße" } }, { spans = true })
    end, 6)
  end)

  it("a fresh analyzer's first run raises and recovers", function()
    walk_same(function()
      return analyzer():tokenize(text)
    end, 4)
  end)

  it("a failed run leaves the analyzer usable", function()
    local a = analyzer()
    local expected = analyzer():tokenize(text)
    local points = walk(function() return a:tokenize(text) end)
    assert.is_true(points >= 1)
    assert.same(expected, a:tokenize(text))
  end)
end)
