-- rag.text.highlights and rag.text.tokenize's `only` option: the spans of
-- a query's terms in a text (what `rag search` marks and /search returns).
local rag = require("rag")

local highlights, tokenize = rag.text.highlights, rag.text.tokenize

-- Asserts that tokenize with `only` gives the terms and spans of a full
-- tokenize that are in the list; returns their number and all terms'.
local function same_as_filtered(text, an, only)
  local want = {}
  for _, t in ipairs(only) do
    want[t] = true
  end
  local all, s0, e0 = tokenize(text, an, { spans = true })
  local terms, starts, stops = {}, {}, {}
  for i, t in ipairs(all) do
    if want[t] then
      terms[#terms + 1], starts[#starts + 1], stops[#stops + 1] = t, s0[i], e0[i]
    end
  end
  local t2, s2, e2 = tokenize(text, an, { spans = true, only = only })
  assert.are.same(terms, t2)
  assert.are.same(starts, s2)
  assert.are.same(stops, e2)
  return #terms, #all
end

describe("rag.text.tokenize only", function()
  it("returns the wanted terms with their spans, in text order", function()
    local terms, starts, stops = tokenize("Spring tides: the tide springs.", nil,
      { spans = true, only = { "tide", "nothing" } })
    assert.are.same({ "tide", "tide" }, terms)
    assert.are.same({ 8, 19 }, starts) -- "tides" at 8..12, "tide" at 19..22
    assert.are.same({ 12, 22 }, stops)
  end)

  it("keeps exactly the terms of a full tokenize that are in the list", function()
    -- the reference: every term with its span, filtered here; words seen
    -- before (cached), capitals, digits, CJK bigrams, non-ASCII letters, and
    -- wanted strings that differ from a term in one byte or share its hash
    -- prefix ("tide" / "tides", "ab" / "a")
    local text = ("Tides TIDES tide tidal 2024 1.5 naïve Naïve café 中文字 the a ab abc x\n")
      :rep(3) .. "Spring springs springing Sprung don't o'clock"
    local only = { "tide", "tides", "naïv", "café", "中文", "2024", "a", "ab", "spring", "x",
      "1.5", "don't", "sprung", "文字", "tidal" }
    local n, all = same_as_filtered(text, nil, only)
    assert.is_true(n > 20 and n < all)
  end)

  it("keeps them with every analyzer, whichever words it passes over", function()
    -- words of ASCII letters whose term cannot start with a wanted term's
    -- first byte go unanalyzed; the reference analyzes them all. Stems that
    -- change more than an ending (skies -> sky, dying -> die), a leading y,
    -- capitals, digits, and analyzers that fold, keep case or stem
    -- otherwise (French: every word is analyzed)
    local helpers = require("spec.helpers")
    local parts = { "Skies SKIES dying Dying lying tying Yelling yes ies s is IDLY early 4th",
      "Ångström naïve ÉCOLE Über x2 X2 v1.2 e.g. U.S.A. o'clock dogs' don't" }
    for i, d in ipairs(helpers.scifact()) do
      if i > 12 then
        break
      end
      parts[#parts + 1] = d.title .. "\n" .. d.text
    end
    local text = table.concat(parts, "\n")
    for _, o in ipairs({ false, { stem = false }, { stem = false, lowercase = false },
      { lang = "porter" }, { lang = "french", stopwords = false } }) do
      local an = rag.text.analyzer(o or nil)
      local all = tokenize(text, an)
      local only, seen = { "sky", "die", "yell", "i", "s", "ie", "zzz", "Sky", "4th" }, {}
      for i, t in ipairs(all) do
        if i % 31 == 0 and not seen[t] then
          only[#only + 1], seen[t] = t, true
        end
      end
      local n = same_as_filtered(text, an, only)
      assert.is_true(n > 30 and n < #all * 0.6, n .. " of " .. #all)
    end
    -- an analyzer that keeps case wants the capital itself
    local cased = rag.text.analyzer({ stem = false, lowercase = false })
    assert.are.same({ "Zebra" }, tokenize("Zebra zebra", cased, { only = { "Zebra" } }))
    -- Irish takes initial mutations off: bhfear's term is fear
    local irish = rag.text.analyzer({ lang = "irish", stopwords = false })
    assert.are.same({ "fear", "bord" }, tokenize("bhfear mbord", irish, { only = { "fear",
      "bord" } }))
  end)

  it("passes over words by their first two bytes, 64 bytes at a time", function()
    -- words whose stems change their second letter (dying -> die, Porter's
    -- ey -> ei) or shorten to one letter (OED -> o, Porter's as -> a),
    -- words that share a first letter or two with a wanted term, and bytes
    -- that only the general scan reads (apostrophes, points after digits,
    -- '_', non-ASCII), at every offset from a 64-byte block's start, so that
    -- wanted and unwanted words run across block ends
    local words = { "tide", "tidal", "Tides", "tie", "ties", "dying", "Dying", "die", "lying",
      "tying", "ty", "ti", "ey", "eying", "OED", "oed", "as", "As", "is", "a", "A", "i", "x",
      "xy", "yx", "cat", "Cat", "CAT", "catalog", "c4t", "a9t", "t0", "z9", "3.5", "v1.2",
      "1,000", "don't", "o'clock", "dogs'", "naïve", "Über", "_x", "a_b", "e.g.", "skies", "sky",
      "abcdefghijklm" }
    local seps = { " ", " ", " ", ", ", ". ", "-", "\n", " '", "'", ".", "; " }
    local rng = 12345
    local function rand(n)
      rng = (rng * 1103515245 + 12345) % 2147483648
      return rng % n + 1
    end
    local texts = {}
    for shift = 0, 65 do
      local parts = { ("z"):rep(shift % 7) .. (" "):rep(shift) }
      for _ = 1, 60 do
        parts[#parts + 1] = words[rand(#words)] .. seps[rand(#seps)]
      end
      texts[#texts + 1] = table.concat(parts)
    end
    local text = table.concat(texts, "\n")
    local lists = { { "die", "tie", "tide", "a", "i", "cat" }, { "ei", "o", "x", "Cat", "3.5" },
      { "ty", "sky", "abcdefghijklm", "don't", "naïv", "zzzzzz" }, { "t" } }
    local checked = 0
    for _, o in ipairs({ {}, { lang = "porter" }, { lowercase = false }, { stem = false },
      { lang = "porter", lowercase = false, stopwords = false } }) do
      for _, simd in ipairs({ true, false }) do
        o.simd = simd
        local an = rag.text.analyzer(o)
        for _, only in ipairs(lists) do
          checked = checked + same_as_filtered(text, an, only)
        end
      end
    end
    assert.is_true(checked > 3000, checked)
    -- the words passed over are not analyzed: the term cache never sees them
    local seen = rag.text.analyzer()
    local many = {}
    for i = 1, 300 do
      many[i] = "word" .. string.char(97 + i % 26, 97 + math.floor(i / 26) % 26) .. "s zeta"
    end
    assert.are.same({ "zeta", "zeta" }, tokenize(table.concat(many, " ", 1, 2), seen,
      { only = { "zeta" } }))
    tokenize(table.concat(many, " "), seen, { only = { "zeta" } })
    assert.are.equal(1, seen:stats().cache_entries)
    local all = rag.text.analyzer()
    tokenize(table.concat(many, " "), all)
    assert.is_true(all:stats().cache_entries > 250)
  end)

  it("an empty list wants nothing; a non-string item raises", function()
    assert.are.same({}, tokenize("a tide", nil, { only = {} }))
    assert.has_error(function() tokenize("a b", nil, { only = { "a", 1 } }) end,
      "rag.text.tokenize: option 'only' must be a list of strings (item 2 is number)")
    assert.has_error(function() tokenize("a b", nil, { only = "a" }) end,
      "rag.text.tokenize: option 'only' must be a table, got string")
  end)
end)

describe("rag.text.highlights", function()
  it("gives 1-based inclusive byte spans of the stemmed, case-folded matches", function()
    local text = "Spring tides: the tide springs."
    local spans = highlights(text, "SPRING tide")
    assert.are.same({ { 1, 6 }, { 8, 12 }, { 19, 22 }, { 24, 30 } }, spans)
    assert.are.equal("springs", text:sub(24, 30))
  end)

  it("merges overlapping CJK bigrams into one span", function()
    -- 中文字 is the bigrams 中文 (1..6) and 文字 (4..9): one span 1..9
    assert.are.same({ { 1, 9 } }, highlights("中文字 abc", "中文字"))
    assert.are.same({ { 1, 6 }, { 17, 22 } }, highlights("中文 and more 中文", "中文"))
  end)

  it("stopwords and no common term give no span; bad arguments raise", function()
    assert.are.same({}, highlights("the cat", "the"))
    assert.are.same({}, highlights("the cat", "dog"))
    assert.are.same({}, highlights("", "dog"))
    assert.has_error(function() highlights(nil, "x") end,
      "rag.text.highlights: text must be a string, got nil")
    assert.has_error(function() highlights("x", 1) end,
      "rag.text.highlights: query must be a string or a list of terms, got number")
  end)

  it("takes the query's terms as a list, analyzed once", function()
    local text = "Spring tides: the tide springs."
    local terms = tokenize("SPRING tide")
    assert.are.same({ "spring", "tide" }, terms)
    assert.are.same(highlights(text, "SPRING tide"), highlights(text, terms))
    assert.are.same({}, highlights(text, {}))
  end)
end)
