-- rag.tokenizer: exact BPE against ids and counts from the official tiktoken
-- (spec/fixtures/tiktoken, made by generate.mjs with the npm WASM port), and
-- the approx estimator's contract.
local rag = require("rag")
local helpers = require("spec.helpers")

local tokenizer = rag.tokenizer
local json = rag.json

local read = helpers.read

local fixtures = json.decode(read("spec/fixtures/tiktoken/cases.json"))
local encodings = { "cl100k_base", "o200k_base" }

local base64 = helpers.base64

describe("rag.tokenizer bundled vocabularies", function()
  it("are the genuine files (tiktoken's own sha256 values)", function()
    local dir = tokenizer.vocab_dir()
    assert.equal("223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
      rag.text.hash(read(dir .. "/cl100k_base.tiktoken")))
    assert.equal("446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
      rag.text.hash(read(dir .. "/o200k_base.tiktoken")))
  end)

  it("carry special tokens equal to their meta files", function()
    for _, name in ipairs(encodings) do
      local meta = assert(tokenizer.meta(name))
      assert.same(meta.special_tokens, tokenizer.get(name):info().special_tokens)
    end
  end)

  it("get caches one tokenizer per encoding", function()
    assert.equal(tokenizer.get("cl100k_base"), tokenizer.get("cl100k_base"))
    assert.are_not.equal(tokenizer.get("cl100k_base"), tokenizer.get("o200k_base"))
  end)

  it("info names the encoding and its size", function()
    local info = tokenizer.get("cl100k_base"):info()
    assert.equal("cl100k_base", info.name)
    assert.equal(100256, info.n_ranks)
    assert.equal(199998, tokenizer.get("o200k_base"):info().n_ranks)
    assert.equal("rag.tokenizer (o200k_base)", tostring(tokenizer.get("o200k_base")))
  end)
end)

for _, name in ipairs(encodings) do
  describe("rag.tokenizer " .. name .. " equals tiktoken " .. fixtures.tiktoken, function()
    local tok = assert(tokenizer.get(name))

    for _, c in ipairs(fixtures.cases) do
      it(c.name, function()
        assert.same(c[name], tok:encode(c.text))
        assert.equal(#c[name], tok:count(c.text))
        assert.equal(c.text, tok:decode(c[name]))
      end)
    end

    -- the fixture has the counts of all 5,183 SciFact documents and the 5
    -- seeds; make test checks the 40-document sample, make quality all
    it("counts SciFact documents and the seeds as tiktoken does #data", function()
      local want = json.decode(read("spec/fixtures/tiktoken/counts.json"))[name]
      local seen, wrong = 0, {}
      local function compare(key, text)
        seen = seen + 1
        local ids = tok:encode(text)
        if #ids ~= want[key] or tok:count(text) ~= want[key] then
          wrong[#wrong + 1] = key
        end
        if tok:decode(ids) ~= text then
          wrong[#wrong + 1] = key .. " (round trip)"
        end
      end
      for _, doc in ipairs(helpers.scifact()) do
        compare("scifact:" .. doc.id, doc.text)
      end
      local seeds = helpers.seeds()
      for _, f in ipairs(seeds) do
        compare("seed:" .. f.name, f.text)
      end
      assert.equal(helpers.data_dir() and 5183 + #seeds or 40, seen)
      assert.same({}, wrong)
    end)
  end)
end

describe("rag.tokenizer encode", function()
  local tok = tokenizer.get("cl100k_base")
  local eot = "<|endoftext|>"

  it("gives nothing for empty input", function()
    assert.same({}, tok:encode(""))
    assert.equal(0, tok:count(""))
    assert.equal("", tok:decode({}))
  end)

  it("treats special-token text as plain text by default", function()
    local ids = tok:encode(eot)
    assert.is_true(#ids > 1)
    for _, id in ipairs(ids) do
      assert.is_true(id < 100256)
    end
    assert.equal(eot, tok:decode(ids))
  end)

  it("emits special ids only when allowed", function()
    assert.same({ 100257 }, tok:encode(eot, { allowed_special = "all" }))
    assert.same({ 100257 }, tok:encode(eot, { allowed_special = { eot } }))
    assert.same({ 100257 }, tok:encode(eot, { allowed_special = { [eot] = true } }))
    local mixed = tok:encode("a" .. eot .. "b<|fim_prefix|>", { allowed_special = { eot } })
    assert.equal(100257, mixed[2])
    assert.is_nil(({ [100258] = true })[mixed[#mixed]])
    assert.equal("a" .. eot .. "b<|fim_prefix|>", tok:decode(mixed))
    assert.equal(#mixed, tok:count("a" .. eot .. "b<|fim_prefix|>", { allowed_special = { eot } }))
  end)

  it("finds many allowed specials in linear time", function()
    local text = ("<|endoftext|>x"):rep(50000)
    local ids = tok:encode(text, { allowed_special = "all" })
    assert.equal(100000, #ids)
    assert.equal(100257, ids[99999])
  end)

  it("splits ordinary text around an allowed special as tiktoken does", function()
    local text = "Hello world" .. eot .. " again"
    local ids = tok:encode(text, { allowed_special = "all" })
    local want = tok:encode("Hello world")
    want[#want + 1] = 100257
    for _, id in ipairs(tok:encode(" again")) do
      want[#want + 1] = id
    end
    assert.same(want, ids)
  end)

  it("returns nil, msg, 'encoding' on invalid UTF-8", function()
    for _, bad in ipairs({ "a\255b", "\192\175", "ab\228\184", "\237\160\128" }) do
      local ids, msg, code = tok:encode(bad)
      assert.is_nil(ids)
      assert.equal("encoding", code)
      assert.matches("^rag%.tokenizer%.encode: invalid utf%-8 at byte %d+$", msg)
      local n, _, code2 = tok:count(bad)
      assert.is_nil(n)
      assert.equal("encoding", code2)
    end
    assert.equal("rag.tokenizer.encode: invalid utf-8 at byte 2", select(2, tok:encode("a\255")))
  end)

  it("encodes a 1 MB text in one call, and long single pieces", function()
    local text = string.rep("The quick brown fox jumps over the lazy dog. ", 23000)
    assert.equal(10 * 23000 + 1, tok:count(text)) -- the final space is a token of its own
    local blob = string.rep("x", 100000)
    local ids = tok:encode(blob)
    assert.equal(blob, tok:decode(ids))
    assert.equal(#ids, tok:count(blob))
  end)

  it("decodes ids that split a UTF-8 character, byte for byte", function()
    local ids = tok:encode("🦙")
    assert.is_true(#ids > 1)
    local parts = {}
    for i, id in ipairs(ids) do
      parts[i] = tok:decode({ id })
    end
    assert.equal("🦙", table.concat(parts))
  end)
end)

-- Pieces over 128 bytes are encoded by a linear search (see
-- src/rag_tokenizer.c), not by tiktoken's merge loop. These compare it with
-- that loop written here in Lua: plain, quadratic, over the vocabulary's
-- bytes, with no shared code.
describe("rag.tokenizer long pieces", function()
  local HUGE = math.huge
  local vocab = {}

  -- bytes -> rank for every rank of the named encoding
  local function ranks_of(name)
    if not vocab[name] then
      local tok = tokenizer.get(name)
      local ranks = {}
      for r = 0, tok:info().n_ranks - 1 do
        local ok, bytes = pcall(tok.decode, tok, { r })
        if ok then
          ranks[bytes] = r
        end
      end
      vocab[name] = ranks
    end
    return vocab[name]
  end

  -- tiktoken's byte-pair merge of one piece: merge the adjacent pair whose
  -- bytes form the lowest rank, the leftmost on ties, until none is a token
  local function reference(ranks, s)
    local b, r, m = {}, {}, #s + 1 -- part i is s[b[i], b[i+1]); r[i] ranks parts i, i+1
    local function pair(i)
      return ranks[s:sub(b[i], b[i + 2] - 1)] or HUGE
    end
    for i = 1, m do
      b[i] = i
    end
    for i = 1, m - 2 do
      r[i] = pair(i)
    end
    while true do
      local best, at = HUGE, 0
      for i = 1, m - 2 do
        if r[i] < best then
          best, at = r[i], i
        end
      end
      if best == HUGE then
        break
      end
      table.remove(b, at + 1)
      if at + 1 <= #r then
        table.remove(r, at + 1)
      end
      m = m - 1
      if at + 2 <= m then
        r[at] = pair(at)
      else
        r[at] = nil -- the merged part is the last one
      end
      if at > 1 then
        r[at - 1] = pair(at - 1)
      end
    end
    local ids = {}
    for i = 1, m - 1 do
      ids[i] = ranks[s:sub(b[i], b[i + 1] - 1)]
    end
    return ids
  end

  -- a seeded generator that gives the same numbers on every Lua (Park-Miller)
  local function lcg(seed)
    local x = seed
    return function(n)
      x = x * 16807 % 2147483647
      return x % n + 1
    end
  end

  -- strings each of which is one piece under both encodings' rules:
  -- lowercase letters and CJK, runs of punctuation and symbols, spaces
  local alphabets = {
    { "a", "b" }, { "a", "a", "b" }, { "a", "b", "c" }, { "a", "b", "c", "d" },
    { "e", "t", "o", "n" }, { "q", "z" }, { "l", "o", "e", "h" },
    { "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r",
      "s", "t", "u", "v", "w", "x", "y", "z" },
    { "的", "是", "一", "在", "生", "检" }, { "的", "a", "生", "b" }, { "ー", "ン", "ト", "こ" },
    { "а", "б", "в", "о", "н" }, { "α", "β", "ο", "ν" }, { "é", "e", "ü" },
    { "-", "=" }, { "!", "?", "." }, { "*", "#", "/", "(", ")" }, { "😀", "🦙", "→", "★" },
    { " " },
  }

  local function random_piece(rnd)
    local alpha = alphabets[rnd(#alphabets)]
    local n, parts, len = 128 + rnd(1100), {}, 0
    if rnd(3) == 1 then -- a short unit repeated, then a stray character
      local unit = {}
      for i = 1, rnd(6) do
        unit[i] = alpha[rnd(#alpha)]
      end
      unit = table.concat(unit)
      return unit:rep(math.floor(n / #unit) + 1) .. alpha[rnd(#alpha)]
    end
    while len < n do
      parts[#parts + 1] = alpha[rnd(#alpha)]
      len = len + #parts[#parts]
    end
    return table.concat(parts)
  end

  it("the Lua merge reproduces tiktoken's ids on the fixtures' single pieces", function()
    local want = {
      cl100k_base = { "repeated letter", "repeated pair", "long piece 0", "long piece 4",
        "long piece 5" },
      o200k_base = { "repeated letter", "repeated pair" },
    }
    for name, cases in pairs(want) do
      for _, c in ipairs(fixtures.cases) do
        for _, wanted in ipairs(cases) do
          if c.name == wanted then
            assert.same(c[name], reference(ranks_of(name), c.text), name .. " " .. c.name)
          end
        end
      end
    end
  end)


  it("equal the Lua merge with random vocabularies, where BPE cannot reach some tokens", function()
    local rnd, tmp, unreachable = lcg(7), os.tmpname(), 0
    for round = 1, 24 do
      local alpha = ({ "ab", "abc", "abcd" })[rnd(3)]
      local texts, seen = {}, {}
      for b = 0, 255 do
        texts[b + 1] = string.char(b)
        seen[texts[b + 1]] = true
      end
      local longest = round % 4 == 0 and 24 or 8
      for _ = 1, 40 + rnd(80) do
        local t = {}
        for i = 1, 1 + rnd(longest - 1) do
          local j = rnd(#alpha)
          t[i] = alpha:sub(j, j)
        end
        t = table.concat(t)
        if not seen[t] then
          seen[t] = true
          texts[#texts + 1] = t
        end
      end
      for i = #texts, 258, -1 do -- the longer tokens in random rank order
        local j = 256 + rnd(i - 256)
        texts[i], texts[j] = texts[j], texts[i]
      end
      local lines, ranks = {}, {}
      for i, t in ipairs(texts) do
        lines[i] = base64(t) .. " " .. (i - 1)
        ranks[t] = i - 1
      end
      local f = assert(io.open(tmp, "wb"))
      f:write(table.concat(lines, "\n"), "\n")
      f:close()
      for i = 257, #texts do
        if #reference(ranks, texts[i]) > 1 then
          unreachable = unreachable + 1
        end
      end
      local tok = assert(tokenizer.load(tmp, "cl100k_base", { special_tokens = {} }))
      for _ = 1, 3 do
        local t = {}
        for i = 1, 128 + rnd(500) do
          local j = rnd(#alpha)
          t[i] = alpha:sub(j, j)
        end
        t = table.concat(t)
        if rnd(2) == 1 then -- repetitive text
          t = t:sub(1, rnd(7)):rep(200)
        end
        assert.same(reference(ranks, t), tok:encode(t), "vocabulary " .. round .. ": " .. t)
      end
      tok:close()
    end
    os.remove(tmp)
    assert.is_true(unreachable > 100, unreachable .. " unreachable tokens")
  end)

  for _, name in ipairs(encodings) do
    it("equal the Lua merge on random long pieces, " .. name, function()
      local tok, ranks, rnd = tokenizer.get(name), ranks_of(name), lcg(20240611)
      for round = 1, 40 do
        local s = random_piece(rnd)
        local ids = tok:encode(s)
        assert.same(reference(ranks, s), ids, name .. " piece " .. round .. ": " .. s:sub(1, 40))
        assert.equal(#ids, tok:count(s))
        assert.equal(s, tok:decode(ids))
      end
    end)

    it("count a long run of one letter exactly, " .. name, function()
      local tok, ranks = tokenizer.get(name), ranks_of(name)
      -- the Lua merge on short runs: each 8 more letters add one token
      local short = {}
      for m = 1, 40 do
        short[m] = #reference(ranks, ("a"):rep(m))
        if m > 8 then
          assert.equal(short[m - 8] + 1, short[m])
        end
      end
      assert.same(reference(ranks, ("a"):rep(3001)), tok:encode(("a"):rep(3001)))
      local n = 2 ^ 24 + 13 -- 16 MB
      local tail = 8 + n % 8
      assert.equal((n - tail) / 8 + short[tail], tok:count(("a"):rep(n)))
      local ids = tok:encode(("a"):rep(n))
      local a8 = ranks[("a"):rep(8)]
      assert.equal((n - tail) / 8 + short[tail], #ids)
      assert.equal(a8, ids[1])
      assert.equal(a8, ids[#ids - 2])
      assert.same(reference(ranks, ("a"):rep(n % 8)), { ids[#ids - 1], ids[#ids] })
    end)
  end
end)

describe("rag.tokenizer cache of short pieces", function()
  local paths = {}
  for _, name in ipairs(encodings) do
    paths[name] = tokenizer.vocab_dir() .. "/" .. name .. ".tiktoken"
  end

  -- pieces that probe the cache's key and entries: every length around the
  -- 8 and 16 bytes a key holds, pieces equal up to their last byte or past
  -- their eighth, NUL bytes inside and at the end ("!" "!\0" "!\0\0" are
  -- equal once zero-padded), and pieces of more than the 3 tokens an entry
  -- keeps ids for
  local function edge_pieces()
    local t = {}
    for n = 1, 18 do
      t[#t + 1] = ("q"):rep(n)
      t[#t + 1] = " " .. ("x"):rep(n - 1)
      t[#t + 1] = (";"):rep(n)
      t[#t + 1] = ("!"):rep(n - 1) .. "\0"
      t[#t + 1] = "!" .. ("\0"):rep(n - 1)
      t[#t + 1] = ("9"):rep(n)
    end
    for _, w in ipairs({ " internationally", " internationalis", " internationalIs",
      " international", " internationa", " abcdefgh", " abcdefgi", " abcdefg", "abcdefgh",
      " zqxjkvbpwmfhdlt", " zqxjkvbpwmfhdlu", "😀😀😀", "😀😀😀😀", "🦙🦙🦙", "→★→★",
      "ǅʰǅʰ", "ſſſſ", "'s", "'S", "'ſ", " ſſ", "\r\n\r\n", "  ", "\t\t" }) do
      t[#t + 1] = w
    end
    return t
  end

  -- random text of short pieces from a small alphabet: many distinct
  -- pieces, many repeated (U+0301 and U+00A0 as bytes: Lua 5.1 has no \u escapes)
  local ALPHABET = { "a", "b", "e", "A", "Z", " ", "  ", "\n", "\r\n", "'", "'s", "'LL", "1",
    "23", ".", ",", "!?", "é", "É", "ſ", "\204\129", "中", "文", "😀", "\t", "\194\160", "ß", "Ⅻ",
    "_", "-", "x'", "ǅ", "ʰ", "\0" }
  local function random_text(rnd)
    local t = {}
    for j = 1, rnd(40) do
      t[j] = ALPHABET[rnd(#ALPHABET)]
    end
    return table.concat(t)
  end

  it("info gives its size: 65536 pieces unless load's opts.cache says otherwise", function()
    assert.equal(65536, tokenizer.get("cl100k_base"):info().cache)
    for size, want in pairs({ [0] = 0, [1] = 2, [2] = 2, [5] = 4, [1000] = 512 }) do
      local tok = assert(tokenizer.load(paths.cl100k_base, "cl100k_base", { cache = size }))
      assert.equal(want, tok:info().cache)
      tok:close()
    end
  end)

  for _, name in ipairs(encodings) do
    it("never changes a result, whatever it holds or drops, " .. name, function()
      -- off, two entries (every piece evicts one), four, and the shared default
      local plain = assert(tokenizer.load(paths[name], name, { cache = 0 }))
      local toks = { tokenizer.get(name) }
      for _, size in ipairs({ 2, 4 }) do
        toks[#toks + 1] = assert(tokenizer.load(paths[name], name, { cache = size }))
      end
      local texts = edge_pieces()
      for _, c in ipairs(fixtures.cases) do
        texts[#texts + 1] = c.text
      end
      for _, doc in ipairs(helpers.scifact()) do
        texts[#texts + 1] = doc.title .. "\n\n" .. doc.text
      end
      local rnd = helpers.rng(4242)
      for _ = 1, 300 do
        texts[#texts + 1] = random_text(rnd)
      end
      local want = {}
      for i, s in ipairs(texts) do
        want[i] = plain:encode(s)
      end
      local many = 0
      for _, p in ipairs(edge_pieces()) do -- a piece of more than 3 tokens is exercised
        many = math.max(many, #plain:encode(p))
      end
      assert.is_true(many > 3)
      -- counts fill entries that encodes then read, and the other way round,
      -- in three passes: the first cold, the next warm or evicted
      for pass = 1, 3 do
        for _, tok in ipairs(toks) do
          for i, s in ipairs(texts) do
            local label = name .. " cache " .. tok:info().cache .. " pass " .. pass .. ": " .. s
            if (i + pass) % 2 == 0 then
              assert.equal(#want[i], tok:count(s), label)
              assert.same(want[i], tok:encode(s), label)
            else
              assert.same(want[i], tok:encode(s), label)
              assert.equal(#want[i], tok:count(s), label)
            end
          end
        end
      end
      for i = 2, #toks do
        toks[i]:close()
      end
      plain:close()
    end)
  end

  it("moves an entry whole when it evicts one: bytes, length, count and ids", function()
    -- two entries, one set: a new piece takes the first and moves the first
    -- to the second. ";;\0\0" and ";;" are the same bytes zero-padded, so
    -- only the length tells them apart; "\0\0" has their ";;" length and
    -- 2 tokens where ";;" has 1.
    local tok = assert(tokenizer.load(paths.cl100k_base, "cl100k_base", { cache = 2 }))
    local plain = assert(tokenizer.load(paths.cl100k_base, "cl100k_base", { cache = 0 }))
    assert.same({ 2, 1, 3 }, { plain:count("\0\0"), plain:count(";;"), plain:count(";;\0\0") })
    for _, order in ipairs({ { "\0\0", ";;\0\0", "x", ";;" }, { ";;\0\0", "\0\0", "x", ";;" },
      { ";;", "\0\0", ";;\0\0", "x", "\0\0", ";;", ";;\0\0" } }) do
      for _, s in ipairs(order) do
        assert.equal(plain:count(s), tok:count(s), s)
      end
      for _, s in ipairs(order) do
        assert.same(plain:encode(s), tok:encode(s), s)
      end
    end
    tok:close()
    plain:close()
  end)

  it("tells apart strings equal but for trailing NUL bytes", function()
    -- tokens of 3 to 8 bytes are compared as zero-padded words, and cached
    -- pieces as two: only their lengths tell "!!\0" from "!!\0\0"
    local lines = {}
    for b = 0, 255 do
      lines[#lines + 1] = base64(string.char(b)) .. " " .. b
    end
    for i, t in ipairs({ "!!", "!!\0", "\0\0\0\0" }) do
      lines[#lines + 1] = base64(t) .. " " .. (255 + i)
    end
    local vocab = table.concat(lines, "\n")
    for _, size in ipairs({ 0, 2, 65536 }) do
      local tok = assert(rag.core.tokenizer.new(vocab, "cl100k_base", {}, "nul", size))
      for _, case in ipairs({ { "!!\0\0", { 257, 0 } }, { "!!\0", { 257 } }, { "!!", { 256 } },
        { "\0\0\0", { 0, 0, 0 } }, { "\0\0\0\0", { 258 } }, { "\0\0\0\0\0", { 0, 0, 0, 0, 0 } },
        { "!!\0\0", { 257, 0 } }, { "\0\0\0", { 0, 0, 0 } } }) do
        assert.same(case[2], tok:encode(case[1]), size .. ": " .. case[1])
        assert.equal(#case[2], tok:count(case[1]), size .. ": " .. case[1])
      end
      tok:close()
    end
  end)

  it("gives the same ids once full: many more distinct pieces than entries", function()
    local plain = assert(tokenizer.load(paths.cl100k_base, "cl100k_base", { cache = 0 }))
    local small = assert(tokenizer.load(paths.cl100k_base, "cl100k_base", { cache = 64 }))
    local rnd = helpers.rng(99)
    local words = {}
    for i = 1, 5000 do -- distinct pieces: a space and 1 to 15 random letters
      local w = { " " }
      for j = 1, rnd(15) do
        w[j + 1] = string.char(96 + rnd(26))
      end
      words[i] = table.concat(w)
    end
    local text = table.concat(words)
    local want = plain:encode(text)
    assert.same(want, small:encode(text))
    assert.equal(#want, small:count(text))
    assert.same(want, small:encode(text)) -- what the full cache now holds
    small:close()
    plain:close()
  end)
end)

describe("rag.tokenizer misuse", function()
  local tok = tokenizer.get("cl100k_base")

  it("raises on bad arguments", function()
    assert.has_error(function() tok:encode(nil) end,
      "bad argument #1 to 'encode' (string expected, got nil)")
    assert.has_error(function() tok:encode("x", { bogus = 1 }) end,
      "rag.tokenizer.encode: unknown option 'bogus'")
    assert.has_error(function() tok:encode("x", { allowed_special = 1 }) end,
      "rag.tokenizer.encode: option 'allowed_special' must be \"all\" or a table of special tokens")
    assert.has_error(function() tok:encode("x", { allowed_special = { "<|nope|>" } }) end,
      "rag.tokenizer.encode: unknown special token '<|nope|>'")
    assert.has_error(function() tok:decode("x") end,
      "bad argument #1 to 'decode' (table expected, got string)")
    assert.has_error(function() tok:decode({ 1.5 }) end,
      "rag.tokenizer.decode: ids[1] is not a token id")
    assert.has_error(function() tok:decode({ -1 }) end,
      "rag.tokenizer.decode: ids[1] is not a token id")
    assert.has_error(function() tok:decode({ "1" .. "x" }) end,
      "rag.tokenizer.decode: ids[1] is not a token id")
    assert.has_error(function() tokenizer.get("p50k_base") end,
      "rag.tokenizer.get: unknown encoding 'p50k_base' (cl100k_base or o200k_base)")
    assert.has_error(function() tokenizer.get(nil) end,
      "rag.tokenizer.get: encoding name must be a string")
    assert.has_error(function() tokenizer.load(1, "cl100k_base") end,
      "rag.tokenizer.load: path must be a string")
    assert.has_error(function() tokenizer.load("x", "nope") end,
      "rag.tokenizer.load: unknown encoding 'nope' (cl100k_base or o200k_base)")
    assert.has_error(function() tokenizer.load("x", "cl100k_base", { bogus = true }) end,
      "rag.tokenizer.load: unknown option 'bogus'")
  end)

  it("raises on wrong option types with the function's name", function()
    assert.has_error(function() tok:encode("x", "all") end,
      "rag.tokenizer.encode: opts must be a table, got string")
    assert.has_error(function() tokenizer.load("x", "cl100k_base", { special_tokens = "x" }) end,
      "rag.tokenizer.load: special_tokens must be a table { [text] = id }")
    assert.has_error(function() tokenizer.load("x", "cl100k_base", { name = 1 }) end,
      "rag.tokenizer.load: name must be a string")
  end)

  it("takes ids as numbers only, not numeric strings", function()
    assert.has_error(function() tok:decode({ "65" }) end,
      "rag.tokenizer.decode: ids[1] is not a token id")
    assert.equal("b", tok:decode({ 65 }))
  end)

  it("raises on an unknown id, naming it", function()
    local ok, err = pcall(tok.decode, tok, { 1, 100256 })
    assert.is_false(ok)
    assert.matches("unknown token id 100256 at ids%[2%]", err)
  end)
end)

describe("rag.tokenizer.load", function()
  local dir = tokenizer.vocab_dir()

  it("loads a .tiktoken file with the rules of the named encoding", function()
    local path = dir .. "/cl100k_base.tiktoken"
    local tok = assert(tokenizer.load(path, "cl100k_base", { name = "mine" }))
    assert.equal("mine", tok:info().name)
    assert.same(tokenizer.get("cl100k_base"):encode("hello world's"), tok:encode("hello world's"))
    tok:close()
  end)

  it("returns nil, msg, 'io' for a missing file", function()
    local tok, msg, code = tokenizer.load("/nonexistent/x.tiktoken", "cl100k_base")
    assert.is_nil(tok)
    assert.equal("io", code)
    assert.equal("rag.tokenizer.load: '/nonexistent/x.tiktoken': no such file or directory", msg)
    tok, msg, code = tokenizer.load("spec/fixtures", "cl100k_base")
    assert.is_nil(tok)
    assert.equal("io", code)
    assert.equal("rag.tokenizer.load: 'spec/fixtures': is a directory", msg)
  end)

  it("refuses a path with a NUL byte instead of loading the shortened one", function()
    local path = dir .. "/cl100k_base.tiktoken"
    local ok, err = pcall(tokenizer.load, path .. "\0.x", "cl100k_base")
    assert.is_false(ok)
    assert.matches("rag.tokenizer.load: path contains a NUL byte", tostring(err))
  end)

  it("returns nil, msg, 'format' for files that are not vocabularies", function()
    local tmp = os.tmpname()
    local bytes = {}
    for b = 0, 255 do
      local chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
      local function c(i) return chars:sub(i + 1, i + 1) end
      bytes[#bytes + 1] = c(math.floor(b / 4)) .. c(b % 4 * 16) .. "== " .. b
    end
    local good = table.concat(bytes, "\n") .. "\n"
    local cases = {
      { "empty", "" },
      { "no rank", "IQ==\n" },
      { "bad base64", "I!== 0\n" },
      { "negative rank", "IQ== -1\n" },
      { "blank line inside", "IQ== 0\n\nIg== 1\n" },
      { "a byte missing", "IQ== 0\nIg== 1\n" },
      { "duplicate rank", good .. "YWI= 0\n" },
      { "duplicate token", good .. "IQ== 256\n" },
      { "binary junk", "\0\1\2\255" },
    }
    for _, c in ipairs(cases) do
      local f = assert(io.open(tmp, "wb"))
      f:write(c[2])
      f:close()
      local tok, msg, code = tokenizer.load(tmp, "cl100k_base", { special_tokens = {} })
      assert.is_nil(tok, c[1])
      assert.equal("format", code, c[1])
      assert.matches("^rag%.tokenizer%.load: ", msg)
    end
    -- the minimal byte-level vocabulary is valid: every byte is a token
    local f = assert(io.open(tmp, "wb"))
    f:write(good)
    f:close()
    local tok = assert(tokenizer.load(tmp, "o200k_base", { special_tokens = { ["<|x|>"] = 300 } }))
    assert.same({ 104, 105 }, tok:encode("hi"))
    assert.same({ 300 }, tok:encode("<|x|>", { allowed_special = "all" }))
    os.remove(tmp)
  end)

  it("reports a bad file whose path holds a %", function()
    local tmp = os.tmpname() .. "100%"
    local f = assert(io.open(tmp, "wb"))
    f:write("junk\n")
    f:close()
    local tok, msg, code = tokenizer.load(tmp, "cl100k_base")
    os.remove(tmp)
    assert.is_nil(tok)
    assert.equal("format", code)
    assert.equal("rag.tokenizer.load: '" .. tmp .. "': bad vocabulary line 1", msg)
  end)

  it("get reloads a shared tokenizer that someone closed", function()
    local shared = tokenizer.get("o200k_base")
    shared:close()
    local again = tokenizer.get("o200k_base")
    assert.are_not.equal(shared, again)
    assert.equal(2, again:count("hello world"))
  end)

  it("closes: idempotent, and use after close raises", function()
    local tok = assert(tokenizer.load(dir .. "/o200k_base.tiktoken", "o200k_base"))
    tok:close()
    tok:close()
    assert.matches("closed", tostring(tok))
    assert.has_error(function() tok:encode("x") end, "rag.tokenizer.encode: tokenizer is closed")
    assert.has_error(function() tok:count("x") end, "rag.tokenizer.count: tokenizer is closed")
    assert.has_error(function() tok:decode({ 1 }) end, "rag.tokenizer.decode: tokenizer is closed")
  end)
end)

-- The C reader that rag.tokenizer.load is meant to call, so that a path
-- never reaches io.open (which stops at a NUL byte).
describe("rag.core.tokenizer.load", function()
  local load = rag.core.tokenizer.load
  local specials = { ["<|endoftext|>"] = 199999, ["<|endofprompt|>"] = 200018 }
  local path = tokenizer.vocab_dir() .. "/o200k_base.tiktoken"

  it("builds the tokenizer new would build over the file's bytes", function()
    local tok = assert(load(path, "o200k_base", specials, "mine"))
    assert.equal("mine", tok:info().name)
    assert.same(tokenizer.get("o200k_base"):encode("hello world's"), tok:encode("hello world's"))
    local ok, msg, code = load("/nonexistent/x.tiktoken", "o200k_base", specials)
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.equal("rag.tokenizer.load: '/nonexistent/x.tiktoken': no such file or directory", msg)
  end)

  it("raises on a path with a NUL byte instead of reading the shorter one", function()
    assert.has_error(function() load(path .. "\0.bak", "o200k_base", specials) end,
      "rag.tokenizer.load: path contains a NUL byte")
  end)
end)

describe("rag.tokenizer.approx", function()
  local approx = tokenizer.approx()
  local exact = tokenizer.get("cl100k_base")

  local texts = {
    "",
    " ",
    "Hello, world!",
    "The mitochondrial DNA polymerase gamma (POLG) is essential for replication.",
    "检索增强生成（RAG）是一种结合检索与生成的技术。",
    "日本語のテキストを分割します。",
    "👩‍💻 🇫🇷 ok",
    "x = 12345678 -- comment\n\n    indented\r\n",
  }

  it("splits into pieces that concatenate to the input; count == #encode", function()
    for _, s in ipairs(texts) do
      local pieces = approx:encode(s)
      assert.equal(s, approx:decode(pieces))
      assert.equal(#pieces, approx:count(s))
      assert.equal(s == "" and 0 or 1, math.min(1, #pieces))
    end
  end)

  it("stays near exact cl100k on English and Chinese prose", function()
    local en = "Retrieval-augmented generation combines a retriever with a generator. "
      .. "The retriever finds passages; the generator writes an answer grounded in them. "
    local zh = "检索增强生成是一种结合信息检索与文本生成的技术。它先从知识库中找到相关的段落，"
      .. "再让大语言模型根据这些段落生成回答，从而减少幻觉并提高答案的可追溯性。"
    for _, s in ipairs({ en:rep(20), zh:rep(20) }) do
      local a, e = approx:count(s), exact:count(s)
      assert.is_true(math.abs(a - e) / e < 0.15, ("approx %d, exact %d"):format(a, e))
    end
  end)

  it("returns nil, msg, 'encoding' on invalid UTF-8", function()
    local bads = { "a\255", "\192\175", "ab\228\184", "\237\160\128", "\244\144\128\128" }
    for _, bad in ipairs(bads) do
      local n, msg, code = approx:count(bad)
      assert.is_nil(n)
      assert.equal("encoding", code)
      assert.matches("invalid utf%-8 at byte", msg)
      assert.is_nil((approx:encode(bad)))
    end
  end)

  it("raises on misuse", function()
    assert.has_error(function() approx:count(nil) end,
      "bad argument #1 to 'count' (string expected, got nil)")
    assert.has_error(function() approx:decode({ 1 }) end,
      "rag.tokenizer.decode: pieces[1] is not a string")
    assert.error_matches(function() approx.count(exact, "x") end,
      "bad argument #1 to 'count' %(rag%.tokenizer%.approx expected, got [%w.]+%)$")
    assert.equal("approx", approx:info().name)
    approx:close() -- stateless: close changes nothing, <close> works
    assert.equal(2, approx:count("hello world"))
    assert.equal("rag.tokenizer (approx)", tostring(approx))
  end)
end)

describe("rag.tokenizer out of memory", function()
  local fail_alloc = rag.core._fail_alloc
  if not fail_alloc then
    it("needs a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  local walk = helpers.oom_walk

  it("load, encode, decode and approx raise and recover at every fault point", function()
    local path = tokenizer.vocab_dir() .. "/cl100k_base.tiktoken"
    assert.is_true(walk(function() tokenizer.load(path, "cl100k_base"):close() end) >= 3)
    local tok = tokenizer.get("cl100k_base")
    local text = string.rep("naïve tokenizers " .. string.rep("q", 300) .. " ", 50)
    local ids = tok:encode(text)
    assert.is_true(walk(function() assert.same(ids, tok:encode(text)) end) >= 2)
    walk(function() assert.equal(text, tok:decode(ids)) end)
    walk(function() assert.equal(#ids, tok:count(text)) end)
    local approx = tokenizer.approx()
    walk(function() assert.equal(text, approx:decode(approx:encode(text))) end)
  end)
end)
