-- The analyzer's term cache (src/rag_termcache.c): an analyzer remembers
-- what each word it stemmed or folded became, so its results must never
-- depend on what it saw before. The oracle is a fresh one-off analyzer per
-- word (rag.text.tokenize(word, opts)), which never finds a word in its
-- cache; every case also runs twice through one long-lived analyzer.
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
    else
      out[i] = string.char(0xE0 + math.floor(cp / 0x1000),
        0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
    end
  end
  return table.concat(out)
end

-- The terms of each word analyzed alone, by a new analyzer, concatenated.
local function oracle(words, opts)
  local out = {}
  for _, w in ipairs(words) do
    for _, t in ipairs(tokenize(w, opts or {})) do
      out[#out + 1] = t
    end
  end
  return out
end

-- The words analyzed as one text by `a`, twice (cold, then warm), and once
-- more in reverse order, must give the oracle's terms.
local function same_as_oracle(a, words, opts)
  local expected = oracle(words, opts)
  local text = table.concat(words, " ")
  assert.same(expected, a:tokenize(text))
  assert.same(expected, a:tokenize(text))
  local rev, rexp = {}, {}
  for i = #words, 1, -1 do
    rev[#rev + 1] = words[i]
  end
  for _, t in ipairs(oracle(rev, opts)) do
    rexp[#rexp + 1] = t
  end
  assert.same(rexp, a:tokenize(table.concat(rev, " ")))
end

local FULLWIDTH_ABC = u(0xFF21, 0xFF22, 0xFF23)
local SHARP = u(0xDF)           -- ß
local CAPITAL_SHARP = u(0x1E9E) -- ẞ
local RSQUO = u(0x2019)         -- ’
local LIGATURE = u(0xFDFA)      -- a letter whose folding is 33 bytes long

local MIXED_CASE = {
  "Running", "RUNNING", "running", "rUnNiNg", "The", "THE", "the", "tHE",
  "Cells", "cells", "CELLS", "Cell", "It", "IT", "Generously", "generously",
}

local NON_ASCII = {
  "Stra" .. SHARP .. "e", "STRASSE", "stra" .. SHARP .. "e", "STRA" .. CAPITAL_SHARP .. "E",
  FULLWIDTH_ABC, "abc", "ABC", "na" .. u(0xEF) .. "ve", "NA" .. u(0xCF) .. "VE",
  "caf" .. u(0xE9), "CAF" .. u(0xC9), "don" .. RSQUO .. "t", "Don't", "DON" .. RSQUO .. "T",
  u(0x0391, 0x03B8, 0x03AE, 0x03BD, 0x03B1), u(0x0391, 0x0398, 0x0397, 0x039D, 0x0391),
  "soft" .. u(0xAD) .. "hyphen", u(0xAD),
}

local CJK = {
  u(0x4E2D, 0x6587, 0x5B57, 0x7B26), u(0xFF76, 0xFF80, 0xFF76, 0xFF85),
  u(0x30AB, 0x30BF, 0x30AB, 0x30CA), u(0xD55C, 0xAD6D, 0xC5B4), "GPT" .. u(0x6A21, 0x578B) .. "RAG",
  u(0x4E2D), u(0x4E2D, 0x6587, 0x4E2D, 0x6587),
}

local ab32 = string.rep("ab", 32)
local LONG = {
  ab32:sub(1, 60) .. "ing", ab32:sub(1, 61) .. "ing", ab32:sub(1, 62) .. "ing", -- 63, 64, 65 bytes
  ab32 .. ab32 .. "running", ab32 .. ab32 .. "jumping", -- equal in their first 128 bytes
  string.rep(u(0xFF41), 21), string.rep(u(0xFF41), 22), -- fullwidth: 63 and 66 bytes
  string.rep(LIGATURE, 21), string.rep(LIGATURE, 22), -- 63 and 66 bytes: 693 and 726 folded
  string.rep("Z", 64), string.rep("Z", 65),
}

local NOT_KEPT = { "error_code", "x_y", "3.14", "1,000", "COVID19", "covid19", "2024", "A1" }

-- Each list's terms, joined by newlines, hashed (rag.text.hash, first 12
-- hex digits), as the analyzer gave them before it had a term cache; in the
-- order MIXED_CASE, NON_ASCII, CJK, LONG, NOT_KEPT.
local CONFIGS = {
  { name = "the defaults",
    golden = { "307c20475c83", "17d34a5a5159", "48034d8721b8", "fe83f9d3110b", "6e017db9549a" } },
  { name = "no lowercasing", opts = { lowercase = false },
    golden = { "9d3d7d39663a", "009d46bf3587", "205bcf8e0a40", "5234b44938f0", "69b8b959f9bd" } },
  { name = "no stemming", opts = { stem = false },
    golden = { "2d695c2d4ff2", "e5fc5fd5891e", "48034d8721b8", "f708459f790c", "6e017db9549a" } },
  { name = "a stopword list", opts = { stopwords = { "the", "Stra" .. SHARP .. "e", "CELLS" } },
    golden = { "e164eecc55d5", "fe931d964158", "48034d8721b8", "fe83f9d3110b", "6e017db9549a" } },
  { name = "cjk both", opts = { cjk = "both" },
    golden = { "307c20475c83", "17d34a5a5159", "56abff3b21e3", "fe83f9d3110b", "6e017db9549a" } },
  { name = "cjk unigrams", opts = { cjk = "unigram" },
    golden = { "307c20475c83", "17d34a5a5159", "4032706232db", "fe83f9d3110b", "6e017db9549a" } },
  { name = "cjk runs", opts = { cjk = false },
    golden = { "307c20475c83", "17d34a5a5159", "67f0240cf1ed", "fe83f9d3110b", "6e017db9549a" } },
  { name = "german", opts = { lang = "german", stopwords = false },
    golden = { "dfa1c6eab9b5", "ba065318f9a7", "48034d8721b8", "f708459f790c", "6e017db9549a" } },
}

local ALL = {}
for _, list in ipairs({ MIXED_CASE, NON_ASCII, CJK, LONG, NOT_KEPT }) do
  for _, w in ipairs(list) do
    ALL[#ALL + 1] = w
  end
end

describe("analyzer term cache", function()
  it("gives the terms of the hand-made cases, cold and warm", function()
    local a = analyzer()
    local text = "Running RUNNING running rUnNiNg The THE the Cells cells CELLS"
    local expected = { "run", "run", "run", "run", "cell", "cell", "cell" }
    assert.same(expected, a:tokenize(text))
    assert.same(expected, a:tokenize(text))
    assert.same({ "cell", "run", "run" }, a:tokenize("CELLS rUnNiNg Running the THE"))
    assert.same({ "abc", "abc", "abc" }, a:tokenize(FULLWIDTH_ABC .. " ABC abc"))
    assert.same({ "abc" }, a:tokenize(FULLWIDTH_ABC))
    assert.same({ "strass", "strass" }, a:tokenize("Stra" .. SHARP .. "e STRASSE"))
    local kept = analyzer({ lowercase = false })
    text = "Running RUNNING running rUnNiNg Cells CELLS cells The the"
    expected = { "Run", "RUNNING", "run", "rUnNiNg", "Cell", "CELLS", "cell", "The" }
    assert.same(expected, kept:tokenize(text))
    assert.same(expected, kept:tokenize(text))
  end)

  for _, c in ipairs(CONFIGS) do
    it("agrees with a fresh analyzer per word: " .. c.name, function()
      local a = analyzer(c.opts)
      for _, list in ipairs({ MIXED_CASE, NON_ASCII, CJK, LONG, NOT_KEPT, ALL }) do
        same_as_oracle(a, list, c.opts)
      end
    end)

    it("gives the terms it gave before it had a cache, cold and warm: " .. c.name, function()
      local a = analyzer(c.opts)
      for round = 1, 2 do
        for i, list in ipairs({ MIXED_CASE, NON_ASCII, CJK, LONG, NOT_KEPT }) do
          local terms = a:tokenize(table.concat(list, " "))
          assert.equal(c.golden[i], rag.text.hash(table.concat(terms, "\n")):sub(1, 12),
            "list " .. i .. ", round " .. round)
        end
      end
    end)
  end

  it("tells apart long words that share their first bytes", function()
    local a = analyzer()
    local p = ab32 .. ab32
    local t = a:tokenize(p .. "running " .. p .. "jumping " .. p .. "running")
    assert.equal(3, #t)
    assert.not_equal(t[1], t[2])
    assert.equal(t[1], t[3])
    local lig = a:tokenize(string.rep(LIGATURE, 21) .. " " .. string.rep(LIGATURE, 21))
    assert.equal(693, #lig[1])
    assert.same(lig[1], lig[2])
  end)

  it("tells apart words whose hashes are equal", function()
    -- pairs with equal 32-bit FNV-1a hashes, of different and of equal lengths
    local words = { "costarring", "liquid", "altarages", "zinkes", "lsexqzd", "ztxtxde" }
    local a = analyzer()
    same_as_oracle(a, words)
    local t = a:tokenize(table.concat(words, " "))
    assert.same({ "costar", "liquid", "altarag", "zink", "lsexqzd", "ztxtxde" }, t)
  end)

  it("keeps spans right on a warm analyzer", function()
    local a = analyzer({ cjk = "both" })
    local text = table.concat(ALL, " ")
    local t1, s1, e1 = a:tokenize(text, { spans = true })
    local t2, s2, e2 = a:tokenize(text, { spans = true })
    assert.same(t1, t2)
    assert.same(s1, s2)
    assert.same(e1, e2)
    local fresh, fs, fe = tokenize(text, { cjk = "both" }, { spans = true })
    assert.same(fresh, t2)
    assert.same(fs, s2)
    assert.same(fe, e2)
  end)

  it("grows only with the words it keeps", function()
    local a = analyzer()
    local s = a:stats()
    assert.same({ cache_entries = 0, cache_bytes = 0, cache_limit = 3 * 1024 * 1024 }, s)
    a:tokenize("2024 x_y 3.14 error_code")
    assert.equal(0, a:stats().cache_entries) -- numbers and identifiers are cheap: not kept
    a:tokenize("running runs running")
    assert.equal(2, a:stats().cache_entries)
    a:tokenize("Running")
    assert.equal(3, a:stats().cache_entries) -- "Running", found as "running"
    a:tokenize(string.rep("z", 65))
    assert.equal(3, a:stats().cache_entries) -- over the 64-byte key limit
    local bytes = a:stats().cache_bytes
    assert.is_true(bytes > 0 and bytes < 64 * 1024)
    local fresh = analyzer()
    fresh:tokenize(string.rep(LIGATURE, 22) .. " " .. string.rep("a", 65))
    assert.equal(0, fresh:stats().cache_entries)
  end)

  -- 65,536 words or 2 MiB of entries, whichever comes first, then it empties
  -- and starts over (docs/api.md). Each word below is kept once (lowercase,
  -- stemmed), and appears once per pass, so the first pass never finds one.
  local function letters(i, width)
    local out = {}
    for k = 1, width do
      out[k] = string.char(97 + i % 26)
      i = math.floor(i / 26)
    end
    return table.concat(out)
  end

  it("empties itself when it holds 65,536 words, and stays right", function()
    local n, words = 70000, {}
    for i = 1, n do
      words[i] = "q" .. letters(i, 4) .. "ing"
    end
    local text = table.concat(words, " ")
    local a = analyzer()
    local cold = a:tokenize(text)
    assert.equal(n, #cold)
    local s = a:stats()
    assert.equal(n - 65536, s.cache_entries)
    assert.is_true(s.cache_bytes <= s.cache_limit)
    assert.same(cold, a:tokenize(text))
    assert.is_true(a:stats().cache_bytes <= s.cache_limit)
    assert.same(oracle({ words[1], words[65536], words[65537], words[n] }),
      a:tokenize(table.concat({ words[1], words[65536], words[65537], words[n] }, " ")))
    -- mixed case across the point where it empties
    local mixed = {}
    for i = 1, 200 do
      mixed[#mixed + 1] = i % 2 == 0 and words[i]:upper() or words[i]
    end
    assert.same(oracle(mixed), a:tokenize(table.concat(mixed, " ")))
  end)

  it("empties itself when its entries fill 2 MiB, and stays right", function()
    local n, words = 20000, {}
    for i = 1, n do
      words[i] = letters(i, 4) .. string.rep("x", 52) .. "ations" -- 62 bytes
    end
    local text = table.concat(words, " ")
    local a = analyzer()
    local cold = a:tokenize(text)
    local s = a:stats()
    -- about 16,600 entries fill it: what is left is the words after that
    assert.is_true(s.cache_entries > 0 and s.cache_entries < n / 2, "entries: " .. s.cache_entries)
    assert.is_true(s.cache_bytes <= s.cache_limit)
    assert.same(cold, a:tokenize(text))
    assert.same(oracle({ words[1], words[n] }), a:tokenize(words[1] .. " " .. words[n]))
  end)

  it("is one per index: two indexes built from one analyzer agree with a fresh one", function()
    local opts = { cjk = "both", stopwords = { "the", "Stra" .. SHARP .. "e" } }
    local a = analyzer(opts)
    local b1, b2 = rag.bm25.new({ analyzer = a }), rag.bm25.new({ analyzer = a })
    local fresh = rag.bm25.new({ analyzer = analyzer(opts) })
    local docs = {}
    for i = 1, 60 do
      docs[i] = table.concat({ ALL[i % #ALL + 1], ALL[(i * 7) % #ALL + 1],
        MIXED_CASE[i % #MIXED_CASE + 1], CJK[i % #CJK + 1], "Running cells THE",
        NON_ASCII[i % #NON_ASCII + 1] }, " ")
    end
    for i, d in ipairs(docs) do
      b1:add("d" .. i, d)
      a:tokenize(d)
      b2:add("d" .. (#docs + 1 - i), docs[#docs + 1 - i])
    end
    for i, d in ipairs(docs) do
      fresh:add("d" .. i, d)
    end
    local queries = { "running cells", "RUNNING", CJK[1], NON_ASCII[1] .. " " .. NON_ASCII[9],
      "generously abc" }
    for _, q in ipairs(queries) do
      local want = fresh:search(q, 20)
      assert.is_true(#want > 0, q)
      assert.same(want, b1:search(q, 20))
      assert.same(want, b2:search(q, 20))
    end
    local p1, p2 = helpers.tmpname(), helpers.tmpname()
    assert(b1:save(p1))
    assert(fresh:save(p2))
    local f1, f2 = io.open(p1, "rb"), io.open(p2, "rb")
    assert.equal(f2:read("*a"), f1:read("*a"))
    f1:close()
    f2:close()
    os.remove(p1)
    os.remove(p2)
  end)
end)

describe("analyzer term cache allocation failures", function()
  local fail_alloc = rag.core._fail_alloc
  if not fail_alloc then
    it("need a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  -- Fails the 1st, 2nd, ... allocation of a fresh analyzer's run (until one
  -- past the last): a failure the cache absorbs gives the right terms; any
  -- other raises "not enough memory". LeakSanitizer checks nothing leaks.
  it("a cache that cannot grow stops remembering, and the run succeeds", function()
    local text = table.concat(ALL, " ") .. " " .. table.concat(MIXED_CASE, " ")
    local expected = analyzer():tokenize(text)
    local absorbed, raised, n, fired = 0, 0, 0, true
    while fired do
      n = n + 1
      local a = analyzer()
      fail_alloc(n)
      local ok, res = pcall(a.tokenize, a, text)
      fired = fail_alloc(0) == 0
      if not ok then
        assert.truthy(tostring(res):find("not enough memory", 1, true), tostring(res))
        raised = raised + 1
      else
        assert.same(expected, res)
        if fired then
          absorbed = absorbed + 1
        end
      end
      assert.same(expected, a:tokenize(text))
      a:close()
    end
    assert.is_true(absorbed >= 2, "absorbed: " .. absorbed)
    assert.is_true(raised >= 2, "raised: " .. raised)
  end)
end)
