-- rag.text.sentences: table-driven cases (input, expected sentence texts),
-- the span invariants on every case, generated strings and SciFact
-- documents (a sample; all under make quality), misuse, and an
-- out-of-memory walk in RAG_TESTING builds.
local rag = require("rag")
local helpers = require("spec.helpers")

local sentences = rag.text.sentences

-- Whitespace beyond ASCII: NEL, NBSP, U+1680, U+2000-200A, U+2028, U+2029,
-- U+202F, U+205F, U+3000 (the categories Zs, Zl, Zp).
local WIDE = {
  "\194\133", "\194\160", "\225\154\128", "\226\128[\128-\138\168\169\175]",
  "\226\129\159", "\227\128\128",
}

local function is_blank(g)
  g = g:gsub("%s", "")
  for _, p in ipairs(WIDE) do
    g = g:gsub(p, "")
  end
  return g == ""
end

local function edge_space(text)
  if text:find("^%s") or text:find("%s$") then
    return true
  end
  for _, p in ipairs(WIDE) do
    if text:find("^" .. p) or text:find(p .. "$") then
      return true
    end
  end
  return false
end

-- The contract of every result: text == s:sub(start, stop), spans in order
-- and disjoint, no sentence begins or ends with whitespace, and only
-- whitespace lies outside the sentences.
local function check_invariants(s, r, name)
  name = name or ("%q"):format(s:sub(1, 60))
  assert.equal("table", type(r), name)
  local last = 0
  for i, x in ipairs(r) do
    local where = name .. " sentence " .. i
    assert.equal("number", type(x.start), where)
    assert.is_true(x.start > last and x.start <= x.stop and x.stop <= #s, where)
    assert.equal(s:sub(x.start, x.stop), x.text, where)
    assert.is_true(is_blank(s:sub(last + 1, x.start - 1)), where .. ": gap before it is not blank")
    assert.is_false(edge_space(x.text), where .. ": starts or ends with whitespace")
    last = x.stop
  end
  assert.is_true(is_blank(s:sub(last + 1)), name .. ": text after the last sentence")
end

local function texts(r)
  local t = {}
  for i, x in ipairs(r) do
    t[i] = x.text
  end
  return t
end

describe("rag.text.sentences", function()
  local cases = {
    -- name, input, expected sentence texts
    -- English: terminators
    { "two sentences", "Hello world. This is a test.", { "Hello world.", "This is a test." } },
    { "no terminator", "Hello world", { "Hello world" } },
    { "trailing text without terminator", "It rains. More to come",
      { "It rains.", "More to come" } },
    { "question and exclamation", "Is it? Yes! Good.", { "Is it?", "Yes!", "Good." } },
    { "runs of ?! and !!!", "Really?! I know. Wow!!! Fine",
      { "Really?!", "I know.", "Wow!!!", "Fine" } },
    { "?/! before a lowercase word do not break",
      '"Are you sure?" she asked. "Yes!" he said.',
      { '"Are you sure?" she asked.', '"Yes!" he said.' } },
    { "unknown abbreviation before lowercase", "Mix the ingr. and stir. Done.",
      { "Mix the ingr. and stir.", "Done." } },
    { "tabs and runs of spaces", "One.\tTwo.    Three.", { "One.", "Two.", "Three." } },
    -- English: abbreviations
    { "titles", "Mr. Smith met Dr. Jones and Mrs. Brown. They talked.",
      { "Mr. Smith met Dr. Jones and Mrs. Brown.", "They talked." } },
    { "Prof. and St. before a name", "Prof. Lee lives on St. Mark's Place. It is quiet.",
      { "Prof. Lee lives on St. Mark's Place.", "It is quiet." } },
    { "St. ends a sentence before a starter", "She lives on Main St. The shop is near.",
      { "She lives on Main St.", "The shop is near." } },
    { "e.g. and i.e. before capitals",
      "Some fruits, e.g. Apples and pears, are sweet. Others, i.e. Lemons, are not.",
      { "Some fruits, e.g. Apples and pears, are sweet.", "Others, i.e. Lemons, are not." } },
    { "cf. vs. Fig. Eq.", "See Fig. 3 and Eq. 2 (cf. Table 1). Drug vs. Placebo was tested.",
      { "See Fig. 3 and Eq. 2 (cf. Table 1).", "Drug vs. Placebo was tested." } },
    { "Vol. and No. before numbers; no. as a word",
      "It is in Vol. 2, No. 5. The answer is no. Then we left.",
      { "It is in Vol. 2, No. 5.", "The answer is no.", "Then we left." } },
    { "No. as a one-word sentence", "No. I disagree.", { "No.", "I disagree." } },
    { "pp. and p.", "See pp. 10-12 and p. 5. Next page.",
      { "See pp. 10-12 and p. 5.", "Next page." } },
    { "Inc. before a name, Corp. at the end",
      "Acme Inc. Board members met. He works at Foo Corp. The firm grew.",
      { "Acme Inc. Board members met.", "He works at Foo Corp.", "The firm grew." } },
    { "months", "It opened on Jan. 5, 2020. Sales rose in Feb. The end.",
      { "It opened on Jan. 5, 2020.", "Sales rose in Feb.", "The end." } },
    { "a.m. before a name, p.m. at the end",
      "We meet at 9 a.m. Eastern time. It ends at 5 p.m. We leave.",
      { "We meet at 9 a.m. Eastern time.", "It ends at 5 p.m.", "We leave." } },
    { "U.S. before a name, U.K. at the end", "The U.S. Army trained in the U.K. Then it left.",
      { "The U.S. Army trained in the U.K.", "Then it left." } },
    { "U.S. before a pronoun", "He moved to the U.S. It was 1990.",
      { "He moved to the U.S.", "It was 1990." } },
    { "Ph.D. before lowercase", "She earned a Ph.D. in 2001 at MIT. Her thesis won.",
      { "She earned a Ph.D. in 2001 at MIT.", "Her thesis won." } },
    { "etc. before a capital ends", "We sold apples, pears, etc. Bananas were out.",
      { "We sold apples, pears, etc.", "Bananas were out." } },
    { "etc. before lowercase continues", "We sold apples, etc. and more. Done.",
      { "We sold apples, etc. and more.", "Done." } },
    { "et al.", "Smith et al. found it. Jones et al. (2010) agreed. We cite Lee et al. The end.",
      { "Smith et al. found it.", "Jones et al. (2010) agreed.",
        "We cite Lee et al.", "The end." } },
    { "journal abbreviations", "See Proc. Natl. Acad. Sci. USA 85, 2444. It works.",
      { "See Proc. Natl. Acad. Sci. USA 85, 2444.", "It works." } },
    { "all-caps and capitalised forms", "DR. SMITH ARRIVED. Approx. 5 people came.",
      { "DR. SMITH ARRIVED.", "Approx. 5 people came." } },
    { "abbreviation at the very end", "Call Mr.", { "Call Mr." } },
    -- English: initials
    { "initials", "J. R. R. Tolkien wrote it. John F. Kennedy spoke.",
      { "J. R. R. Tolkien wrote it.", "John F. Kennedy spoke." } },
    { "initials after a title", "Dr. J. A. Smith came. He left.",
      { "Dr. J. A. Smith came.", "He left." } },
    { "initial before a starter ends", "We need vitamin C. It helps.",
      { "We need vitamin C.", "It helps." } },
    { "initial A. before the article A", "We need vitamin A. A study agrees.",
      { "We need vitamin A.", "A study agrees." } },
    { "the pronoun I ends", "So do I. Really.", { "So do I.", "Really." } },
    { "non-ASCII initial", "Á. Smith arrived. Ł. Nowak too.",
      { "Á. Smith arrived.", "Ł. Nowak too." } },
    -- English: numbers, versions, URLs, e-mail
    { "decimals", "Pi is 3.14 and e is 2.718. Both are irrational.",
      { "Pi is 3.14 and e is 2.718.", "Both are irrational." } },
    { "money and percent", "It cost $3.50. That was 12.5% more.",
      { "It cost $3.50.", "That was 12.5% more." } },
    { "version numbers", "Install v1.2.3. The old 1.0.9 release is gone.",
      { "Install v1.2.3.", "The old 1.0.9 release is gone." } },
    { "URLs", "Visit example.com. Or see https://www.example.org/a.b?x=1. Done!",
      { "Visit example.com.", "Or see https://www.example.org/a.b?x=1.", "Done!" } },
    { "e-mail address", "Write to jane.doe@example.co.uk. She replies fast.",
      { "Write to jane.doe@example.co.uk.", "She replies fast." } },
    { "a digit starts a sentence", "The cohort had 40 people. 25 were women.",
      { "The cohort had 40 people.", "25 were women." } },
    { "number split by a stray space", "Seventy (10. 4%) athletes. Fine.",
      { "Seventy (10. 4%) athletes.", "Fine." } },
    { "citation number after the period", "Mutations were found.4,5 A family was studied.",
      { "Mutations were found.4,5", "A family was studied." } },
    { "no space, no break", "Hello.World and a?b and c!d.", { "Hello.World and a?b and c!d." } },
    -- English: ellipses
    { "ellipsis before lowercase and uppercase", "Well... maybe not. Wait... Then go.",
      { "Well... maybe not.", "Wait...", "Then go." } },
    { "unicode ellipsis", "Hmm… let me think. Okay… So yes.",
      { "Hmm… let me think.", "Okay…", "So yes." } },
    { "unicode ellipsis with no space", "wait…what? No…Yes.", { "wait…what?", "No…", "Yes." } },
    { "spaced ellipsis", "And then . . . nothing. Next.", { "And then . . . nothing.", "Next." } },
    -- English: quotes and brackets
    { "closing double quote stays", 'He said "Stop." Then he left.',
      { 'He said "Stop."', "Then he left." } },
    { "closing single quote stays", "She wrote 'done.' We agreed.",
      { "She wrote 'done.'", "We agreed." } },
    { "brackets", "(This is aside.) Main point here. [Another one!] End.",
      { "(This is aside.)", "Main point here.", "[Another one!]", "End." } },
    { "curly quotes", "“Is it?” “Yes.” ‘Fine.’", { "“Is it?”", "“Yes.”", "‘Fine.’" } },
    { "opening quote then lowercase continues", 'Fine. "and then" he said.',
      { 'Fine. "and then" he said.' } },
    { "French guillemets", "Il a dit «Bonjour.» Puis il est parti.",
      { "Il a dit «Bonjour.»", "Puis il est parti." } },
    -- lists
    { "enumerators inline", "Steps: 1. Open the box. 2. Remove the item.",
      { "Steps: 1. Open the box.", "2. Remove the item." } },
    { "enumerators on lines", "1. Preheat the oven.\n2. Bake it.\n3. Serve.",
      { "1. Preheat the oven.", "2. Bake it.", "3. Serve." } },
    { "bullets with terminators", "- Buy milk.\n- Walk the dog.",
      { "- Buy milk.", "- Walk the dog." } },
    { "bullets without terminators are one sentence", "- milk\n- eggs\n- bread",
      { "- milk\n- eggs\n- bread" } },
    { "bullets separated by blank lines", "* milk\n\n* eggs", { "* milk", "* eggs" } },
    -- line breaks and whitespace
    { "single line break does not break", "This line\ncontinues here. Next.",
      { "This line\ncontinues here.", "Next." } },
    { "blank line breaks", "Title\n\nBody text here", { "Title", "Body text here" } },
    { "blank line holding spaces and tabs", "One\n \t \nTwo", { "One", "Two" } },
    { "blank line after an abbreviation", "Dr.\n\nSmith", { "Dr.", "Smith" } },
    { "CRLF single line break", "a line\r\nthe same. Next.\r\n",
      { "a line\r\nthe same.", "Next." } },
    { "CRLF blank line", "One\r\n\r\nTwo", { "One", "Two" } },
    { "CR CR blank line", "One\r\rTwo", { "One", "Two" } },
    { "paragraph separator U+2029", "One\226\128\169Two", { "One", "Two" } },
    { "line separator U+2028 is one break", "One\226\128\168two", { "One\226\128\168two" } },
    { "two NEL are a blank line", "One\194\133\194\133Two", { "One", "Two" } },
    { "leading and trailing whitespace", "  \t Hello. World!  \n ", { "Hello.", "World!" } },
    { "NBSP and ideographic space", "Hello.\194\160World.\227\128\128Again",
      { "Hello.", "World.", "Again" } },
    { "whitespace only", " \n\t\r\n ", {} },
    { "unicode whitespace only", "\194\160\227\128\128\226\128\169", {} },
    { "empty", "", {} },
    { "terminators only", "...", { "..." } },
    { "lone terminator", "!", { "!" } },
    -- Chinese
    { "Chinese", "检索增强生成很有用。它结合了检索和生成！你知道吗？",
      { "检索增强生成很有用。", "它结合了检索和生成！", "你知道吗？" } },
    { "Chinese semicolon", "第一点；第二点。", { "第一点；", "第二点。" } },
    { "Chinese quotes stay", "他说：“你好。”我回答：“再见！”", { "他说：“你好。”", "我回答：“再见！”" } },
    { "Chinese ellipsis run", "他想了想……然后走了。", { "他想了想……", "然后走了。" } },
    { "Chinese ？！ run", "真的吗？！太好了。", { "真的吗？！", "太好了。" } },
    { "Chinese without terminator", "这是一个标题", { "这是一个标题" } },
    { "Chinese with ASCII terminators", "你好!我很好.谢谢", { "你好!", "我很好.", "谢谢" } },
    { "Chinese with spaced ASCII periods", "这是第一句. 这是第二句.", { "这是第一句.", "这是第二句." } },
    { "full-width decimal point and stop", "圆周率约为３．１４。下一句．再下一句",
      { "圆周率约为３．１４。", "下一句．", "再下一句" } },
    { "Chinese brackets", "（注意。）这是正文。【完】", { "（注意。）", "这是正文。", "【完】" } },
    { "Chinese title marks", "我读了《三体》。很好看！", { "我读了《三体》。", "很好看！" } },
    { "Chinese blank line", "第一段\n\n第二段", { "第一段", "第二段" } },
    -- Japanese and Korean
    { "Japanese", "今日は晴れです。明日は雨でしょう！本当ですか？",
      { "今日は晴れです。", "明日は雨でしょう！", "本当ですか？" } },
    { "Japanese quotation followed by と", "「はい。」と彼は言った。それから帰った。",
      { "「はい。」と彼は言った。", "それから帰った。" } },
    { "Japanese quotation followed by って", "「無理だ！」って言った。", { "「無理だ！」って言った。" } },
    { "Japanese quotation then a new sentence", "『終わり。』次の章。", { "『終わり。』", "次の章。" } },
    { "half-width ideographic stop", "ｶﾀｶﾅ｡ひらがな", { "ｶﾀｶﾅ｡", "ひらがな" } },
    { "Korean", "안녕하세요. 반갑습니다.", { "안녕하세요.", "반갑습니다." } },
    -- mixed scripts and others
    { "English then Chinese", "RAG is useful. 它很有用。Really!",
      { "RAG is useful.", "它很有用。", "Really!" } },
    { "Chinese with English abbreviation", "我们使用 BM25 和 e.g. 向量检索。效果很好。",
      { "我们使用 BM25 和 e.g. 向量检索。", "效果很好。" } },
    { "Latin right after 。", "中文。English here. 再来。", { "中文。", "English here.", "再来。" } },
    { "Hindi danda", "यह पहला वाक्य है। यह दूसरा है।", { "यह पहला वाक्य है।", "यह दूसरा है।" } },
    { "Arabic question mark", "هل أنت بخير؟ نعم.", { "هل أنت بخير؟", "نعم." } },
    { "Russian, ? before lowercase", "Привет. Как дела? хорошо.",
      { "Привет.", "Как дела? хорошо." } },
    { "German z.B.", "Das ist z.B. gut. Er kommt.", { "Das ist z.B. gut.", "Er kommt." } },
    { "emoji", "Great job 🎉. Next 👍!", { "Great job 🎉.", "Next 👍!" } },
  }

  for _, c in ipairs(cases) do
    it(c[1], function()
      local r = sentences(c[2])
      check_invariants(c[2], r, c[1])
      assert.same(c[3], texts(r))
    end)
  end

  it("has enough cases", function()
    assert.is_true(#cases >= 60, #cases .. " cases")
  end)

  it("gives 1-based inclusive byte offsets", function()
    assert.same({
      { text = "中文。", start = 1, stop = 9 },
      { text = "Next one.", start = 10, stop = 18 },
      { text = "Last", start = 21, stop = 24 },
    }, sentences("中文。Next one.  Last  "))
  end)

  it("returns nil, msg, 'encoding' for invalid UTF-8", function()
    local bad = {
      -- input, 1-based offset of the first invalid byte
      { "ok\255", 3 },
      { "ab\228\184", 3 },           -- truncated sequence
      { "\237\160\128", 1 },         -- encoded surrogate
      { "a\192\175", 2 },            -- overlong
      { "\244\144\128\128", 1 },     -- above U+10FFFF
      { "Fine. Good.\128", 12 },     -- after complete sentences
      { "a \255 b", 3 },             -- inside whitespace
      { "Dr.\255", 4 },              -- right after a terminator
      { "好。\226\128", 7 },          -- truncated after a CJK terminator
    }
    for _, b in ipairs(bad) do
      local r, msg, code = sentences(b[1])
      assert.is_nil(r, ("%q"):format(b[1]))
      assert.equal("rag.text.sentences: invalid utf-8 at byte " .. b[2], msg)
      assert.equal("encoding", code)
    end
  end)

  it("accepts exactly the well-formed UTF-8 of Unicode's table 3-7", function()
    -- the table's byte ranges: lead range, then the range of each next byte
    local forms = {
      { 0x00, 0x7F },
      { 0xC2, 0xDF, { 0x80, 0xBF } },
      { 0xE0, 0xE0, { 0xA0, 0xBF }, { 0x80, 0xBF } },
      { 0xE1, 0xEC, { 0x80, 0xBF }, { 0x80, 0xBF } },
      { 0xED, 0xED, { 0x80, 0x9F }, { 0x80, 0xBF } },
      { 0xEE, 0xEF, { 0x80, 0xBF }, { 0x80, 0xBF } },
      { 0xF0, 0xF0, { 0x90, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } },
      { 0xF1, 0xF3, { 0x80, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } },
      { 0xF4, 0xF4, { 0x80, 0x8F }, { 0x80, 0xBF }, { 0x80, 0xBF } },
    }
    -- the length of the well-formed sequence at s[i], or nil
    local function seq(str, i)
      local c = str:byte(i)
      for _, f in ipairs(forms) do
        if c >= f[1] and c <= f[2] then
          for k = 3, #f do
            local b = str:byte(i + k - 2)
            if not b or b < f[k][1] or b > f[k][2] then
              return nil
            end
          end
          return #f - 1
        end
      end
    end
    local function first_invalid(str)
      local i = 1
      while i <= #str do
        local n = seq(str, i)
        if not n then
          return i
        end
        i = i + n
      end
    end
    local seconds = { 0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF }
    local thirds = { 0x41, 0x80, 0xBF, 0xC0 }
    local fourths = { 0x41, 0x80, 0xBF, 0xC0, 0xFF }
    local checked, valid = 0, 0
    for lead = 0, 255 do
      for _, b2 in ipairs(seconds) do
        for _, b3 in ipairs(thirds) do
          for _, b4 in ipairs(fourths) do
            local str = "a" .. string.char(lead, b2, b3, b4) .. "."
            local at = first_invalid(str)
            local r, msg, code = sentences(str)
            if at then
              assert.same({ nil, "rag.text.sentences: invalid utf-8 at byte " .. at, "encoding" },
                { r, msg, code }, ("%q"):format(str))
            else
              assert.is_table(r, ("%q"):format(str))
              valid = valid + 1
            end
            checked = checked + 1
          end
        end
      end
    end
    assert.equal(256 * 11 * 4 * 5, checked)
    assert.is_true(valid > 800, "valid inputs: " .. valid)
  end)

  it("raises on misuse", function()
    assert.has_error(function() sentences() end,
      "bad argument #1 to 'sentences' (string expected, got no value)")
    assert.has_error(function() sentences(nil) end,
      "bad argument #1 to 'sentences' (string expected, got nil)")
    assert.has_error(function() sentences(42) end,
      "bad argument #1 to 'sentences' (string expected, got number)")
    assert.has_error(function() sentences({}) end,
      "bad argument #1 to 'sentences' (string expected, got table)")
    assert.has_error(function() sentences(true) end,
      "bad argument #1 to 'sentences' (string expected, got boolean)")
  end)

  it("handles large input", function()
    local s = string.rep("Sentence one. ", 100000)
    local r = sentences(s)
    assert.equal(100000, #r)
    assert.same({ text = "Sentence one.", start = #s - 13, stop = #s - 1 }, r[#r])
  end)

  it("keeps the invariants on generated strings", function()
    local pieces = {
      "word", "Word", "the", "Dr.", "U.S.", "e.g.", "etc.", "J.", "A.", "I.", "1.", "3.14",
      "v1.2", "p.m.", "No.", "example.com", ".4,5", "10.", "中文", "日本語", "かな", "한국어",
      ".", "!", "?", "?!", "...", "…", "……", "。", "！", "？", "；", "．", "｡",
      "\"", "'", "(", ")", "[", "]", "“", "”", "「", "」", "『", "』", "（", "）", "と",
      " ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\n \n", "\194\160",
      "\227\128\128", "\226\128\169", "\226\128\168", "\194\133", "é", "É", "ß", "🎉",
    }
    math.randomseed(20240601)
    for n = 1, 2000 do
      local parts = {}
      for i = 1, math.random(0, 40) do
        parts[i] = pieces[math.random(#pieces)]
      end
      local s = table.concat(parts)
      local r = sentences(s)
      check_invariants(s, r, "generated #" .. n .. (" %q"):format(s))
      if not is_blank(s) then
        assert.is_true(#r >= 1, ("%q"):format(s))
      end
    end
  end)

  -- the 40-document sample under make test, all 5,183 under make quality
  it("splits SciFact documents plausibly #data", function()
    local docs = helpers.scifact()
    local ndocs, nsent, tiny, huge, lens = 0, 0, 0, 0, {}
    for _, doc in ipairs(docs) do
      local r = sentences(doc.text)
      check_invariants(doc.text, r, "doc " .. doc.id)
      if not is_blank(doc.text) then
        assert.is_true(#r >= 1, "doc " .. doc.id)
      end
      ndocs, nsent = ndocs + 1, nsent + #r
      for _, x in ipairs(r) do
        lens[#lens + 1] = #x.text
        if #x.text < 10 then tiny = tiny + 1 end
        if #x.text > 1000 then huge = huge + 1 end
      end
    end
    table.sort(lens)
    local median = lens[math.floor(#lens / 2) + 1]
    assert.equal(helpers.data_dir() and 5183 or 40, ndocs)
    -- abstracts of about 8-10 sentences of about 25 words each
    assert.is_true(nsent / ndocs > 6 and nsent / ndocs < 12, "sentences per doc: " .. nsent / ndocs)
    assert.is_true(median > 100 and median < 220, "median sentence length: " .. median)
    -- under one in a thousand (at most one in the sample's few hundred)
    assert.is_true(tiny < math.max(2, nsent / 1000), tiny .. " sentences under 10 bytes")
    assert.is_true(huge < math.max(2, nsent / 1000), huge .. " sentences over 1000 bytes")
  end)
end)

-- Allocation failures (RAG_TESTING builds only; `make asan` provides one):
-- each failure raises "not enough memory", leaks nothing and the next call
-- gives the same result as before the walk.
if rag.core._fail_alloc then
  local walk = helpers.oom_walk

  describe("rag.text.sentences allocation failures", function()
    it("raises and recovers at every fault point", function()
      local s = string.rep("One sentence here. 第二句。", 300)
      local expected = sentences(s)
      local points = walk(function() return sentences(s) end)
      assert.is_true(points >= 5, "fault points: " .. points)
      assert.same(expected, sentences(s))
    end)
  end)
end
