-- rag.core.hashing (rag.embed.hashing): the feature definition checked
-- against a second implementation written here in plain Lua 5.1 arithmetic
-- (64-bit words as eight bytes, no integer or bit operators), bit for bit,
-- on random texts and options; a vector derived by hand; the behaviour a
-- user relies on (unit length, case folding, similarity, packed form,
-- UTF-8, the empty text); errors; and allocation failures.
local rag = require("rag")
local helpers = require("spec.helpers")

local hashing = rag.core.hashing
local pack = rag.vec.pack

local function embed1(h, text, opts)
  local out = h:embed({ text }, opts)
  return out[1]
end

local function dot(a, b)
  local s = 0
  for i = 1, #a do
    s = s + a[i] * b[i]
  end
  return s
end

local function nonzero(v)
  local n = 0
  for i = 1, #v do
    if v[i] ~= 0 then
      n = n + 1
    end
  end
  return n
end

-- {====== The reference implementation ======}

-- a xor b for bytes, as XOR[a * 256 + b + 1]; built on first use.
local XOR

local function build_xor()
  XOR = {}
  for a = 0, 255 do
    for b = 0, 255 do
      local r, p, x, y = 0, 1, a, b
      for _ = 1, 8 do
        if x % 2 ~= y % 2 then
          r = r + p
        end
        x, y, p = (x - x % 2) / 2, (y - y % 2) / 2, p * 2
      end
      XOR[a * 256 + b + 1] = r
    end
  end
end

-- A 64-bit word from 16 hex digits: eight bytes, least significant first.
local function word(hex)
  local w = {}
  for i = 1, 8 do
    w[i] = tonumber(hex:sub(17 - 2 * i, 18 - 2 * i), 16)
  end
  return w
end

local function hex(w)
  local t = {}
  for i = 8, 1, -1 do
    t[#t + 1] = string.format("%02x", w[i])
  end
  return table.concat(t)
end

local function mul(a, b) -- a * b mod 2^64
  local r, carry = {}, 0
  for k = 1, 8 do
    local s = carry
    for i = 1, k do
      s = s + a[i] * b[k - i + 1]
    end
    r[k] = s % 256
    carry = (s - r[k]) / 256
  end
  return r
end

local function xor_shr33(a) -- a xor (a >> 33)
  local r = {}
  for i = 1, 8 do
    local hi, nx = a[i + 4] or 0, a[i + 5] or 0
    r[i] = XOR[a[i] * 256 + (hi - hi % 2) / 2 + (nx % 2) * 128 + 1]
  end
  return r
end

local BASIS = word("cbf29ce484222325")
local PRIME = word("00000100000001b3")
local C1, C2 = word("ff51afd7ed558ccd"), word("c4ceb9fe1a85ec53")

local function absorb(h, s) -- FNV-1a 64 over the bytes of s
  for i = 1, #s do
    h = { XOR[h[1] * 256 + s:byte(i) + 1], h[2], h[3], h[4], h[5], h[6], h[7], h[8] }
    h = mul(h, PRIME)
  end
  return h
end

local function fmix64(h)
  h = mul(xor_shr33(h), C1)
  h = mul(xor_shr33(h), C2)
  return xor_shr33(h)
end

-- FNV-1a 64 of seed (4 bytes, little-endian), the domain byte and s; fmix64.
local function feature_hash(seed, domain, s)
  local h, pre = BASIS, {}
  for i = 1, 4 do
    pre[i] = string.char(seed % 256)
    seed = (seed - seed % 256) / 256
  end
  return fmix64(absorb(h, table.concat(pre) .. string.char(domain) .. s))
end

local WORD, NGRAM, EMPTY = 1, 2, 3

-- The bucket (1-based) and sign of a feature.
local function bucket(seed, dim, domain, s)
  local h = feature_hash(seed, domain, s)
  local low = h[1] + h[2] * 256 + h[3] * 65536 + h[4] * 16777216
  return math.floor(low * dim / 4294967296) + 1, h[8] >= 128 and -1 or 1
end

-- Classes and case folding of the characters the random texts use.
local CLASS = {
  ["é"] = "word", ["É"] = "word", ["ü"] = "word", ["Ü"] = "word", ["ß"] = "word",
  ["ñ"] = "word", ["中"] = "cjk", ["文"] = "cjk", ["信"] = "cjk", ["息"] = "cjk",
  ["の"] = "cjk", ["한"] = "cjk", ["🍕"] = "emoji", ["🎉"] = "emoji", ["—"] = "sep",
  ["€"] = "sep", ["«"] = "sep",
}
local FOLD = { ["É"] = { "é" }, ["Ü"] = { "ü" }, ["ß"] = { "s", "s" } }

local function chars_of(text, lowercase)
  local out = {}
  for c in text:gmatch("[%z\1-\127\194-\244][\128-\191]*") do
    if lowercase and FOLD[c] then
      for _, f in ipairs(FOLD[c]) do
        out[#out + 1] = f
      end
    elseif lowercase and #c == 1 then
      out[#out + 1] = c:lower()
    else
      out[#out + 1] = c
    end
  end
  return out
end

local function class_of(c)
  if #c == 1 then
    return c:find("^%w$") and "word" or "sep"
  end
  return assert(CLASS[c], "no class for " .. c)
end

-- Features as { domain, bytes } in text order, by the documented rules.
local function features(text, o)
  local cs, out, i, prev = chars_of(text, o.lowercase), {}, 1, nil
  local function add(domain, s)
    out[#out + 1] = { domain, s }
  end
  while i <= #cs do
    local c = class_of(cs[i])
    if c == "word" then
      local j = i
      while j + 1 <= #cs and class_of(cs[j + 1]) == "word" do
        j = j + 1
      end
      local w = { "<" }
      for k = i, j do
        w[#w + 1] = cs[k]
      end
      w[#w + 1] = ">"
      if o.words then
        add(WORD, table.concat(w, "", 2, #w - 1))
      end
      if o.ngrams then
        for s = 1, #w do
          for n = o.ngram_min, o.ngram_max do
            if s + n - 1 <= #w then
              add(NGRAM, table.concat(w, "", s, s + n - 1))
            end
          end
        end
      end
      prev, i = nil, j + 1
    else
      if c == "cjk" then
        if o.words then
          add(WORD, cs[i])
        end
        if o.ngrams and prev then
          add(NGRAM, prev .. cs[i])
        end
        prev = cs[i]
      else
        if c == "emoji" and o.words then
          add(WORD, cs[i])
        end
        prev = nil
      end
      i = i + 1
    end
  end
  return out
end

local DEFAULTS = {
  dim = 512, words = true, ngrams = true, ngram_min = 3, ngram_max = 5,
  word_weight = 1, ngram_weight = 1, tf = "sqrt", seed = 0, lowercase = true,
}

local function with_defaults(opts)
  local o = {}
  for k, v in pairs(DEFAULTS) do
    o[k] = v
  end
  for k, v in pairs(opts or {}) do
    o[k] = v
  end
  return o
end

-- The signed sums per bucket, before damping.
local function reference_sums(text, opts)
  local o = with_defaults(opts)
  local acc, any = {}, false
  for i = 1, o.dim do
    acc[i] = 0
  end
  for _, f in ipairs(features(text, o)) do
    local i, sign = bucket(o.seed, o.dim, f[1], f[2])
    acc[i] = acc[i] + sign * (f[1] == WORD and o.word_weight or o.ngram_weight)
  end
  for i = 1, o.dim do
    any = any or acc[i] ~= 0
  end
  if not any then
    local i, sign = bucket(o.seed, o.dim, EMPTY, "")
    acc[i] = sign
  end
  return acc, o
end

local function reference(text, opts)
  local acc, o = reference_sums(text, opts)
  local sum = 0
  for i = 1, o.dim do
    local x = acc[i]
    if o.tf == "sqrt" then
      if x > 0 then
        x = math.sqrt(x)
      elseif x < 0 then
        x = -math.sqrt(-x)
      end
      acc[i] = x
    end
    sum = sum + x * x
  end
  local norm = math.sqrt(sum)
  for i = 1, o.dim do
    acc[i] = acc[i] / norm
  end
  return acc
end

-- {====== Specs ======}

describe("rag.embed.hashing", function()
  setup(build_xor)

  describe("the reference implementation", function()
    it("computes FNV-1a 64 (published test vectors)", function()
      assert.equal("cbf29ce484222325", hex(absorb(BASIS, "")))
      assert.equal("af63dc4c8601ec8c", hex(absorb(BASIS, "a")))
      assert.equal("85944171f73967e8", hex(absorb(BASIS, "foobar")))
    end)

    it("computes fmix64 and the feature hash (values from a Python big-integer version)", function()
      assert.equal("efd01f60ba992926", hex(fmix64(BASIS)))
      assert.equal("82a2a958a9bece5b", hex(fmix64(absorb(BASIS, "a"))))
      assert.equal("f1c23bf8bbbecb72", hex(feature_hash(0, WORD, "hi")))
      assert.equal("1261e5c0cd052793", hex(feature_hash(0, NGRAM, "<hi")))
      assert.same({ 12, -1 }, { bucket(0, 16, WORD, "hi") })
      assert.same({ 13, 1 }, { bucket(0, 16, NGRAM, "<hi") })
    end)
  end)

  describe("the feature definition", function()
    it("gives the vector derived by hand for a short text", function()
      -- Signed counts per bucket of "Hello, World!" at dim 16: the words
      -- hello and world, and the 3- to 5-grams of <hello> and <world>.
      local counts = { 1, -1, 0, 3, 3, 2, -2, 1, 3, 1, 1, 0, 0, 0, -1, -1 }
      local sq, raw, sqrt_sum = 0, {}, 0
      for i = 1, 16 do
        sq = sq + counts[i] * counts[i]
        sqrt_sum = sqrt_sum + math.abs(counts[i])
      end
      for i = 1, 16 do
        raw[i] = counts[i] / math.sqrt(sq)
      end
      local h = hashing.new({ dim = 16, tf = "raw" })
      local v = embed1(h, "Hello, World!")
      for i = 1, 16 do
        assert.is_true(math.abs(v[i] - raw[i]) < 1e-7, "component " .. i)
      end
      v = embed1(hashing.new({ dim = 16 }), "Hello, World!")
      for i = 1, 16 do
        local c = counts[i]
        local want = (c < 0 and -1 or 1) * math.sqrt(math.abs(c)) / math.sqrt(sqrt_sum)
        assert.is_true(math.abs(v[i] - want) < 1e-7, "component " .. i)
      end
      assert.same(counts, (reference_sums("Hello, World!", { dim = 16 })))
    end)

    it("gives the hand-derived sums for accents, CJK and emoji", function()
      -- straße folds to strasse; 中 and 文 are words and 中文 a bigram; 🍕 a word
      assert.same({ 0, 2, 0, 0, -1, -1, 1, -2 }, (reference_sums("Straße 中文 🍕", { dim = 8 })))
      assert.equal(pack(reference("Straße 中文 🍕", { dim = 8 })),
        embed1(hashing.new({ dim = 8 }), "Straße 中文 🍕", { packed = true }))
    end)

    it("matches the reference bit for bit on random texts and options", function()
      local r = helpers.rng(20240607)
      local alphabet = {
        "a", "b", "c", "d", "e", "i", "n", "o", "r", "s", "t", "A", "E", "R", "Z", "x", "q",
        "0", "1", "7", " ", " ", " ", " ", ",", ".", "-", "'", "\n", "_", "é", "É", "ü",
        "Ü", "ß", "ñ", "中", "文", "信", "息", "の", "한", "🍕", "🎉", "—", "€", "«",
      }
      local weights = { 0.25, 0.5, 1, 1.5, 2, 3 } -- sums of these are exact in any order
      for round = 1, 60 do
        local opts = {
          dim = ({ 1, 2, 7, 16, 64, 100, 512, 2048, 2049, 4096 })[r(10)], -- both sides of DENSE
          seed = ({ 0, 1, 255, 65536, 4294967295 })[r(5)],
          tf = r(2) == 1 and "sqrt" or "raw",
          lowercase = r(4) ~= 1,
          word_weight = weights[r(6)],
          ngram_weight = weights[r(6)],
        }
        opts.ngram_min = r(4)
        opts.ngram_max = opts.ngram_min + r(4) - 1
        local which = r(5)
        opts.words, opts.ngrams = which ~= 1, which ~= 2
        local t = {}
        for i = 1, r(60) - 1 do
          t[i] = alphabet[r(#alphabet)]
        end
        local text = table.concat(t)
        local got = embed1(hashing.new(opts), text, { packed = true })
        assert.equal(pack(reference(text, opts)), got,
          string.format("round %d: %q", round, text))
      end
    end)
  end)

  describe("vectors", function()
    local h = hashing.new()
    local texts = {
      "The quick brown fox jumps over the lazy dog.",
      "", "!!! ... ???", "a", string.rep("word ", 2000), "检索增强生成（RAG）结合了检索与生成。",
      "😀 🍕 ❤️", "naïve café, Ærøskøbing", string.rep("x", 10000),
    }

    it("are unit vectors of dim numbers, in order", function()
      local vs = h:embed(texts)
      assert.equal(#texts, #vs)
      assert.equal(512, h:dim())
      for i, v in ipairs(vs) do
        assert.equal(512, #v)
        assert.is_true(math.abs(dot(v, v) - 1) < 1e-5, "text " .. i)
        assert.same(embed1(h, texts[i]), v)
      end
      assert.same({}, h:embed({}))
    end)

    it("are deterministic: same text, same bits, whatever came before", function()
      local a = h:embed(texts, { packed = true })
      local b = hashing.new():embed(texts, { packed = true })
      local reversed = {}
      for i = #texts, 1, -1 do
        reversed[#reversed + 1] = texts[i]
      end
      local c = h:embed(reversed, { packed = true })
      for i = 1, #texts do
        assert.equal(a[i], b[i])
        assert.equal(a[i], c[#texts - i + 1])
      end
    end)

    it("packed is rag.vec.pack of the table form", function()
      local tv = h:embed(texts)
      local pv = h:embed(texts, { packed = true })
      for i = 1, #texts do
        assert.equal(512 * 4, #pv[i])
        assert.equal(pack(tv[i]), pv[i])
        assert.same(tv[i], rag.vec.unpack(pv[i]))
      end
      assert.same(tv, h:embed(texts, { packed = false }))
    end)

    it("fold case and compatibility forms, unless lowercase is false", function()
      local base = embed1(h, "hello world straße", { packed = true })
      for _, s in ipairs({ "Hello World STRASSE", "HELLO WORLD Strasse", "ＨＥＬＬＯ　ｗｏｒｌｄ straße" }) do
        assert.equal(base, embed1(h, s, { packed = true }), s)
      end
      local cased = hashing.new({ lowercase = false })
      assert.are_not.equal(embed1(cased, "Hello", { packed = true }),
        embed1(cased, "hello", { packed = true }))
      assert.equal(embed1(cased, "hello", { packed = true }), embed1(h, "hello", { packed = true }))
      -- composed and decomposed accents, invisible characters
      assert.equal(embed1(h, "café", { packed = true }),
        embed1(h, "cafe\204\129", { packed = true }))
      assert.equal(embed1(h, "cooperate", { packed = true }),
        embed1(h, "co\194\173operate", { packed = true }))
      -- marks after the ASCII letter they compose with, several in one text, an
      -- invisible character between (folding goes by pieces around ASCII)
      assert.equal(embed1(h, "naïve café résumé", { packed = true }),
        embed1(h, "nai\204\136ve cafe\204\129 re\204\129sume\204\129", { packed = true }))
      assert.equal(embed1(h, "Ångström", { packed = true }),
        embed1(h, "A\204\138ngstro\204\136m", { packed = true }))
      assert.equal(embed1(h, "aä", { packed = true }),
        embed1(h, "a\194\173a\204\136", { packed = true }))
    end)

    it("score texts that share words above unrelated ones", function()
      local function cos(a, b)
        return dot(embed1(h, a), embed1(h, b))
      end
      local q = "the cat sat on the mat"
      local near = cos(q, "a cat was sitting on a mat")
      local far = cos(q, "quantum chromodynamics on a lattice")
      assert.is_true(near > 0.3, "near " .. near)
      assert.is_true(near > far + 0.25, near .. " vs " .. far)
      -- shared spelling, not meaning: retrieval ~ retrieve, not ~ search
      assert.is_true(cos("retrieval", "retrieve") > cos("retrieval", "search") + 0.3)
      assert.is_true(cos("信息检索系统", "检索系统") > cos("信息检索系统", "今天天气很好") + 0.3)
      assert.is_true(cos("I love 🍕", "🍕 party") > cos("I love 🍕", "party"))
      assert.is_true(math.abs(cos("hello", "hello") - 1) < 1e-6)
    end)

    it("handle accents, CJK and emoji as features", function()
      local empty = embed1(h, "", { packed = true })
      for _, s in ipairs({ "中", "の", "한국어", "🍕", "❤", "é", "Ω" }) do
        assert.are_not.equal(empty, embed1(h, s, { packed = true }), s)
      end
      -- emoji variation selector and ZWJ are invisible
      assert.equal(embed1(h, "❤", { packed = true }), embed1(h, "❤\239\184\143", { packed = true }))
      -- each CJK character is a word, and each pair a bigram
      local cjk = hashing.new({ dim = 65536, ngrams = false })
      assert.equal(2, nonzero(embed1(cjk, "中文")))
      assert.equal(embed1(cjk, "中 文", { packed = true }), embed1(cjk, "中文", { packed = true }))
      local bi = hashing.new({ dim = 65536, words = false })
      assert.equal(1, nonzero(embed1(bi, "中文")))
      assert.equal(2, nonzero(embed1(bi, "中文字")))
      assert.equal(empty, embed1(h, "©─│", { packed = true })) -- other symbols separate
    end)

    it("of texts without features are one fixed unit feature", function()
      local v = embed1(h, "")
      assert.equal(1, nonzero(v))
      assert.is_true(math.abs(dot(v, v) - 1) < 1e-12)
      for _, s in ipairs({ "   ", "!?.,;", "\n\t", "— « »", "©" }) do
        assert.same(v, embed1(h, s), s)
      end
      local one = hashing.new({ dim = 1 })
      for _, s in ipairs({ "", "a", "hello world", "中文" }) do
        local x = embed1(one, s)[1]
        assert.is_true(x == 1 or x == -1, s) -- never a zero vector, even when all cancel
      end
    end)

    it("depend on the seed", function()
      local a = embed1(hashing.new({ seed = 1 }), "hello", { packed = true })
      assert.are_not.equal(embed1(h, "hello", { packed = true }), a)
      assert.equal(a, embed1(hashing.new({ seed = 1 }), "hello", { packed = true }))
    end)

    it("work at the largest dim and on long input", function()
      local big = hashing.new({ dim = 65536 })
      local v = embed1(big, string.rep("lorem ipsum dolor ", 5000) .. string.rep("ü", 10000))
      assert.equal(65536, #v)
      assert.is_true(math.abs(dot(v, v) - 1) < 1e-5)
      assert.equal(65536 * 4, #embed1(big, "x", { packed = true }))
    end)
  end)

  describe("invalid UTF-8", function()
    it("returns nil, msg, \"encoding\" and leaves the embedder usable", function()
      local h = hashing.new({ dim = 8 })
      local before = embed1(h, "ok", { packed = true })
      local bads = { "a\255b", "\192\128", "x\237\160\128", "\244\144\128\128", "é\195" }
      for _, bad in ipairs(bads) do
        local v, msg, code = h:embed({ "fine", bad })
        assert.is_nil(v)
        assert.equal("encoding", code)
        assert.equal("rag.embed.hashing:", msg:sub(1, 18))
        assert.truthy(msg:find("text 2", 1, true), msg)
      end
      local _, msg = h:embed({ "a\255" })
      assert.truthy(msg:find("byte 2", 1, true), msg)
      assert.equal(before, embed1(h, "ok", { packed = true }))
    end)
  end)

  describe("misuse", function()
    local function raises(fn, pattern)
      local ok, err = pcall(fn)
      assert.is_false(ok)
      err = tostring(err)
      assert.truthy(err:find("rag.embed.hashing", 1, true), err)
      if pattern then
        assert.truthy(err:find(pattern, 1, true), err)
      end
    end

    it("bad options raise", function()
      local bad = {
        { { dimension = 3 }, "unknown option 'dimension'" },
        { { dim = 0 }, "dim" }, { { dim = 65537 }, "dim" }, { { dim = 1.5 }, "dim" },
        { { dim = "512" }, "dim" }, { { ngram_min = 0 }, "ngram_min" },
        { { ngram_max = 17 }, "ngram_max" }, { { ngram_min = 4, ngram_max = 3 }, "ngram_min" },
        { { word_weight = 0 }, "word_weight" }, { { ngram_weight = -1 }, "ngram_weight" },
        { { word_weight = 0 / 0 }, "word_weight" }, { { word_weight = math.huge }, "word_weight" },
        { { ngram_weight = "1" }, "ngram_weight" }, { { tf = "log" }, "tf" },
        { { tf = true }, "tf" }, { { seed = -1 }, "seed" }, { { seed = 4294967296 }, "seed" },
        { { seed = 0.5 }, "seed" }, { { words = false, ngrams = false }, "both be false" },
        { { lowercase = "yes" }, "lowercase" }, { { words = 1 }, "words" },
        { { [1] = 512 }, "keys" },
      }
      for _, c in ipairs(bad) do
        raises(function() hashing.new(c[1]) end, c[2])
      end
      raises(function() hashing.new("dim=3") end, "opts must be a table")
    end)

    it("non-string texts and bad embed options raise", function()
      local h = hashing.new({ dim = 4 })
      raises(function() h:embed("text") end, "texts must be a list of strings")
      raises(function() h:embed() end, "texts")
      raises(function() h:embed({ "a", 1 }) end, "text 2 must be a string, got number")
      raises(function() h:embed({ "a", {} }) end, "text 2 must be a string")
      raises(function() h:embed({ true }) end, "text 1 must be a string")
      raises(function() h:embed({ "a" }, { pack = true }) end, "unknown option 'pack'")
      raises(function() h:embed({ "a" }, { packed = 1 }) end, "packed")
      raises(function() h:embed({ "a" }, "packed") end, "opts must be a table")
      -- misuse raises even when a later text is invalid UTF-8 (and vice versa)
      raises(function() h:embed({ "\255", 3 }) end, "text 2 must be a string")
    end)
  end)

  describe("the object", function()
    it("has dim, config, tostring, and closes idempotently", function()
      local opts = { dim = 100, words = false, ngrams = true, ngram_min = 2, ngram_max = 4,
        word_weight = 2, ngram_weight = 0.5, tf = "raw", seed = 7, lowercase = false }
      local h = hashing.new(opts)
      assert.equal(100, h:dim())
      assert.same(opts, h:config())
      assert.same(DEFAULTS, hashing.new():config())
      assert.equal(embed1(h, "Round Trip", { packed = true }),
        embed1(hashing.new(h:config()), "Round Trip", { packed = true }))
      assert.equal("rag.hashing (dim 100)", tostring(h))
      h:close()
      h:close()
      assert.equal("rag.hashing (closed)", tostring(h))
      for _, m in ipairs({ "embed", "dim", "config" }) do
        local ok, err = pcall(h[m], h, { "x" })
        assert.is_false(ok)
        assert.truthy(tostring(err):find("rag.embed.hashing: embedder is closed", 1, true))
      end
    end)

    it("works with <close> (Lua 5.4)", function()
      if _VERSION ~= "Lua 5.4" then
        pending("<close> needs Lua 5.4")
        return
      end
      local chunk = assert((loadstring or load)([[
        local hashing = ...
        local keep
        do
          local h <close> = hashing.new({ dim = 4 })
          keep = h
        end
        return tostring(keep)
      ]]))
      assert.equal("rag.hashing (closed)", chunk(hashing))
    end)
  end)

  describe("allocation failures", function()
    local fail_alloc = rag.core._fail_alloc
    if not fail_alloc then
      it("need a RAG_TESTING build", function()
        pending("run make asan")
      end)
      return
    end

    it("new and embed raise \"not enough memory\" and recover", function()
      local texts = { "plain ascii text", "naïve café 中文 🍕", string.rep("ü", 3000) }
      local expected = hashing.new({ dim = 64 }):embed(texts, { packed = true })
      local points = helpers.oom_walk(function()
        local h = hashing.new({ dim = 64 })
        assert.same(expected, h:embed(texts, { packed = true }))
      end)
      assert.is_true(points >= 3, "fault points: " .. points)
      -- a failure inside embed leaves a working embedder
      local h = hashing.new({ dim = 64 })
      points = helpers.oom_walk(function()
        assert.same(expected, h:embed(texts, { packed = true }))
      end, function()
        assert.equal(expected[1], embed1(h, texts[1], { packed = true }))
      end)
      assert.is_true(points >= 1, "fault points: " .. points)
    end)
  end)
end)
