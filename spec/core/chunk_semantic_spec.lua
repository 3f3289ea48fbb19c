-- rag.chunk.semantic: the acceptance spec. A deterministic embedder (topic
-- words plus hashed filler words) and an independent Lua reference of the
-- four threshold rules give the expected breakpoints; the chunker must put
-- them exactly there for every rule, buffer and amount on English and Chinese
-- texts, call embed once with the sentence groups, apply min_size as
-- LangChain does and never exceed max_size. Then defaults, edge cases,
-- `nil, msg, code` returns and misuse.
--
-- The contract tested here:
-- * sentences s_1..s_n come from rag.text.sentences(text);
-- * group g_i = text:sub(s[max(1, i-b)].start, s[min(n, i+b)].stop),
--   b = opts.buffer (default 1, integer >= 0);
-- * opts.embed({g_1, ..., g_n}) is called once when n >= 2 and returns n
--   vectors; `nil, msg, code` from it is returned unchanged; a wrong count or
--   mismatched dimensions raise; with n <= 1 embed is not called;
-- * d_i = 1 - cos(v_i, v_{i+1}), i = 1..n-1, in double precision;
-- * threshold (opts.threshold, opts.amount):
--   "percentile" (95): T = numpy.percentile(d, amount), linear interpolation;
--   "standard_deviation" (3): T = mean(d) + amount * std(d), population std;
--   "interquartile" (1.5): T = mean(d) + amount * (Q3 - Q1);
--   "gradient" (95): scores g = numpy.gradient(d) ({0} when #d == 1),
--   T = numpy.percentile(g, amount);
-- * a breakpoint follows sentence i when score_i > T; chunks are the runs of
--   sentences between breakpoints, from the first one's start to the last
--   one's stop;
-- * min_size (default 0): walking the breakpoints in order, one is skipped
--   when the run it would close measures less than min_size; the last run
--   is kept whatever its size;
-- * max_size (default 512): a run measuring more is split inside its span
--   by the recursive chunker, so every chunk.tokens <= max_size;
-- * unit "token" (default; opts.tokenizer, default rag.tokenizer.approx())
--   or "char" (code points); chunks have text, start, stop, tokens, index,
--   overlap (0).
local rag = require("rag")

local semantic = rag.chunk.semantic

---------------------------------------------------------------------------
-- The deterministic embedder
---------------------------------------------------------------------------

-- Topic words (English words, single CJK characters) and their dimension.
local TOPIC = {
  ocean = 1, kitchen = 2, orbit = 3, garden = 4, market = 5,
  music = 1, river = 2, chess = 3,
  weather = 1, football = 2, volcano = 3, library = 4,
  ["海"] = 1, ["菜"] = 2, ["星"] = 3, ["股"] = 4,
}
local DIM = 16

-- A polynomial string hash in doubles (exact: no value exceeds 2^53).
local function hash(s)
  local h = 7
  for i = 1, #s do
    h = (h * 31 + s:byte(i)) % 2147483647
  end
  return h
end

-- Words: runs of ASCII letters, lowercased, and every non-ASCII code point.
local function words(s)
  local out = {}
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    if c >= 0xC0 then
      local len = c >= 0xF0 and 4 or c >= 0xE0 and 3 or 2
      out[#out + 1] = s:sub(i, i + len - 1)
      i = i + len
    elseif s:sub(i, i):find("%a") then
      local j = i
      while j < n and s:sub(j + 1, j + 1):find("%a") do
        j = j + 1
      end
      out[#out + 1] = s:sub(i, j):lower()
      i = j + 1
    else
      i = i + 1
    end
  end
  return out
end

-- A topic word adds 4 along its topic's axis; any other word adds a hashed
-- weight in [0.5, 1.5), either sign, along one of the dimensions 6..16. So a
-- group's vector counts its sentences per topic, and the filler words make
-- every distance different.
local function embed_one(s)
  local v = {}
  for d = 1, DIM do
    v[d] = 0
  end
  for _, w in ipairs(words(s)) do
    local t = TOPIC[w]
    if t then
      v[t] = v[t] + 4
    else
      local h = hash(w)
      local d = 6 + h % 11
      local mag = 0.5 + (math.floor(h / 11) % 13) / 13
      if math.floor(h / 143) % 2 == 1 then
        mag = -mag
      end
      v[d] = v[d] + mag
    end
  end
  return v
end

local function embed_all(list)
  local out = {}
  for i, s in ipairs(list) do
    out[i] = embed_one(s)
  end
  return out
end

-- An embed function that records its calls: rec.calls, rec.args[k] (a copy
-- of the list of call k).
local function recorder(fn)
  local rec = { calls = 0, args = {} }
  rec.embed = function(list, ...)
    rec.calls = rec.calls + 1
    local copy = {}
    for i, s in ipairs(list) do
      copy[i] = s
    end
    rec.args[rec.calls] = copy
    rec.nargs = select("#", ...) + 1
    return (fn or embed_all)(list, ...)
  end
  return rec
end

local function never_called()
  error("embed must not be called")
end

---------------------------------------------------------------------------
-- The reference: the four rules, written from the contract
---------------------------------------------------------------------------

local function cosine_distance(a, b)
  local dot, na, nb = 0, 0, 0
  for k = 1, #a do
    dot = dot + a[k] * b[k]
    na = na + a[k] * a[k]
    nb = nb + b[k] * b[k]
  end
  return 1 - dot / (math.sqrt(na) * math.sqrt(nb))
end

-- numpy.percentile(xs, p), default (linear) interpolation.
local function percentile(xs, p)
  local s = {}
  for i, x in ipairs(xs) do
    s[i] = x
  end
  table.sort(s)
  local r = p / 100 * (#s - 1)
  local f, c = math.floor(r), math.ceil(r)
  return s[f + 1] + (s[c + 1] - s[f + 1]) * (r - f)
end

local function mean(xs)
  local sum = 0
  for _, x in ipairs(xs) do
    sum = sum + x
  end
  return sum / #xs
end

-- numpy.std: the population standard deviation.
local function pstd(xs)
  local m, sum = mean(xs), 0
  for _, x in ipairs(xs) do
    sum = sum + (x - m) * (x - m)
  end
  return math.sqrt(sum / #xs)
end

-- numpy.gradient with unit spacing; {0} for one value.
local function gradient(d)
  local m, g = #d, {}
  if m == 1 then
    return { 0 }
  end
  g[1] = d[2] - d[1]
  g[m] = d[m] - d[m - 1]
  for i = 2, m - 1 do
    g[i] = (d[i + 1] - d[i - 1]) / 2
  end
  return g
end

local RULES = { "percentile", "standard_deviation", "interquartile", "gradient" }
local DEFAULT_AMOUNT = {
  percentile = 95, standard_deviation = 3, interquartile = 1.5, gradient = 95,
}
local CUSTOM_AMOUNT = {
  percentile = 70, standard_deviation = 1, interquartile = 0.5, gradient = 80,
}

-- The scores compared and the threshold T of one rule.
local function threshold(rule, d, amount)
  amount = amount or DEFAULT_AMOUNT[rule]
  if rule == "percentile" then
    return d, percentile(d, amount)
  elseif rule == "standard_deviation" then
    return d, mean(d) + amount * pstd(d)
  elseif rule == "interquartile" then
    return d, mean(d) + amount * (percentile(d, 75) - percentile(d, 25))
  end
  local g = gradient(d)
  return g, percentile(g, amount)
end

-- Code points of valid UTF-8.
local function cplen(s)
  local _, cont = s:gsub("[\128-\191]", "")
  return #s - cont
end

-- The expected result of semantic(text, o) with no max_size split:
-- { spans = { {start, stop}, ... }, breaks = {i, ...} (before min_size),
--   groups, sents, margin = min |score_i - T| (math.huge if the scores are
--   all equal, when ties are exact by construction) }.
-- o: buffer, threshold, amount, min_size, measure (default cplen), embed.
local function reference(text, o)
  local sents = rag.text.sentences(text)
  local n = #sents
  local r = { spans = {}, breaks = {}, groups = {}, margin = math.huge, sents = sents }
  if n == 0 then
    return r
  end
  if n == 1 then
    r.spans[1] = { sents[1].start, sents[1].stop }
    return r
  end
  local b = o.buffer or 1
  for i = 1, n do
    r.groups[i] = text:sub(sents[math.max(1, i - b)].start, sents[math.min(n, i + b)].stop)
  end
  local v = (o.embed or embed_all)(r.groups)
  local d = {}
  for i = 1, n - 1 do
    d[i] = cosine_distance(v[i], v[i + 1])
  end
  local scores, t = threshold(o.threshold or "percentile", d, o.amount)
  local all_equal = true
  for i = 2, #scores do
    all_equal = all_equal and scores[i] == scores[1]
  end
  local is_break = {}
  for i = 1, n - 1 do
    if not all_equal and math.abs(scores[i] - t) < r.margin then
      r.margin = math.abs(scores[i] - t)
    end
    if scores[i] > t then
      r.breaks[#r.breaks + 1] = i
      is_break[i] = true
    end
  end
  local measure = o.measure or cplen
  local first = 1
  for i = 1, n - 1 do
    local run = text:sub(sents[first].start, sents[i].stop)
    if is_break[i] and measure(run) >= (o.min_size or 0) then
      r.spans[#r.spans + 1] = { sents[first].start, sents[i].stop }
      first = i + 1
    end
  end
  r.spans[#r.spans + 1] = { sents[first].start, sents[n].stop }
  return r
end

---------------------------------------------------------------------------
-- Texts
---------------------------------------------------------------------------

local TEXTS = {}
local TEXT_NAMES = { "en5", "en3", "en4", "zh" }

-- 23 sentences, five topics in blocks.
TEXTS.en5 = table.concat({
  "The ocean tide rolled over the grey rocks at dawn.",
  "Fishermen watched the ocean swell from the old pier.",
  "Cold ocean currents carry nutrients toward the coast.",
  "A storm over the ocean pushed waves into the harbor.",
  "Seabirds circled above the calm ocean all afternoon.",
  "In the kitchen, onions sizzled in a heavy pan.",
  "She kept the kitchen knives sharp and clean.",
  "Fresh bread cooled on the kitchen counter by the window.",
  "The kitchen smelled of garlic, butter and thyme.",
  "The satellite reached a stable orbit after six hours.",
  "Engineers adjusted the orbit to avoid space debris.",
  "A low orbit lets the telescope image the clouds in detail.",
  "Each orbit of the station takes about ninety minutes.",
  "The probe will leave orbit and head toward Mars next year.",
  "Tomatoes ripened slowly in the back garden.",
  "He watered the garden before the heat of noon.",
  "Bees moved between the roses in the garden.",
  "The garden path was lined with lavender and sage.",
  "Prices on the stock market fell sharply on Monday.",
  "Traders feared the market would not recover soon.",
  "The bond market stayed calm despite the news.",
  "By Friday the market had regained most of its losses.",
  "Analysts expect the market to stay volatile.",
}, " ")

-- 14 sentences, three topics interleaved, with ? and !.
TEXTS.en3 = table.concat({
  "Her music filled the small hall.",
  "The orchestra rehearsed the new music for weeks!",
  "Is this music too loud for the neighbours?",
  "Critics praised the music and the singers.",
  "The river rose after three days of rain.",
  "Children skipped stones across the river.",
  "A chess club meets here on Tuesdays.",
  "The river bends sharply near the mill.",
  "Her chess opening surprised the champion.",
  "Why did he resign that chess game so early?",
  "Endgame chess studies train patience and calculation.",
  "The old chess set was carved from walnut.",
  "Music played softly while they finished the chess match.",
  "Nobody noticed the river outside.",
}, " ")

-- 30 sentences, four topics in paragraphs, leading blanks, trailing newline.
TEXTS.en4 = "  " .. table.concat({
  "The weather turned cold overnight.",
  "Forecasters expect the weather to stay dry until Sunday.",
  "Strange weather patterns confused the farmers this spring.",
  "Bad weather closed the mountain roads again.",
  "The weather in the valley is usually mild.",
  "Pilots check the weather before every flight.",
  "Warm weather brought crowds to the beach.",
  "Nobody trusts the weather report anymore.",
  "By evening the weather cleared completely.",
}, " ") .. "\n\n" .. table.concat({
  "The football season opens next week.",
  "Our football team signed a young striker.",
  "Football fans crowded the square after the final.",
  "The coach changed the football tactics at half time.",
  "Football tickets sold out within an hour.",
  "She has played football since she was six.",
}, " ") .. "\n\n" .. table.concat({
  "The volcano erupted without warning.",
  "Ash from the volcano covered nearby villages.",
  "Scientists monitor the volcano with seismic sensors.",
  "A volcano can stay dormant for centuries.",
  "Lava flowed down the eastern side of the volcano.",
  "Tourists climb the volcano at sunrise.",
  "The last volcano alert was lifted in May.",
  "Hot springs surround the old volcano.",
}, " ") .. "\n\n" .. table.concat({
  "The library opens at nine.",
  "Students fill the library during exams.",
  "The library lends laptops as well as books.",
  "A quiet library room is hard to find.",
  "Volunteers repaired old library maps.",
  "The city library will move to a new building.",
  "Late fees at the library were abolished.",
}, " ") .. "\n"

-- 16 sentences with 。！？ and no spaces, four topics (海 菜 星 股).
TEXTS.zh = "海边的风很大。我们在海上看到了一群海豚！海水今天特别蓝。渔民说海浪明天会更高。" ..
  "妈妈在厨房里做菜。这道菜需要很多大蒜吗？我最喜欢吃青菜和豆腐。做菜的时候要注意火候！" ..
  "夜空中的星星非常明亮。你能找到北极星吗？天文学家发现了一颗新的星系。流星划过天空！" ..
  "今天股市大跌。很多股民感到担心。这只股票明年会涨吗？专家建议长期持有股票。"

local SENTENCE_COUNT = { en5 = 23, en3 = 14, en4 = 30, zh = 16 }

---------------------------------------------------------------------------
-- Checks
---------------------------------------------------------------------------

local function spans_of(chunks)
  local t = {}
  for i, c in ipairs(chunks) do
    t[i] = c.start .. "-" .. c.stop
  end
  return t
end

local function fmt_spans(spans)
  local t = {}
  for i, s in ipairs(spans) do
    t[i] = s[1] .. "-" .. s[2]
  end
  return t
end

local function is_space_byte(c)
  return c == 32 or (c >= 9 and c <= 13)
end

-- Well-formed UTF-8 (shortest forms, no surrogates, <= U+10FFFF).
local function valid_utf8(s)
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    local len, lo, hi
    lo, hi = 0x80, 0xBF
    if c < 0x80 then
      len = 1
    elseif c >= 0xC2 and c <= 0xDF then
      len = 2
    elseif c >= 0xE0 and c <= 0xEF then
      len = 3
      if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then
      len = 4
      if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
    else
      return false
    end
    for k = 1, len - 1 do
      local b = s:byte(i + k)
      if not b then
        return false
      end
      if k == 1 then
        if b < lo or b > hi then
          return false
        end
      elseif b < 0x80 or b > 0xBF then
        return false
      end
    end
    i = i + len
  end
  return true
end

-- Every chunk: fields, text == text:sub(start, stop), valid UTF-8, in order
-- and disjoint, tokens == measure(text) <= max_size; all non-whitespace
-- bytes of `text` are covered.
local function check_chunks(text, chunks, measure, max_size, name)
  assert.equal("table", type(chunks), name)
  local covered = {}
  local last = 0
  for i, c in ipairs(chunks) do
    local where = name .. " chunk " .. i
    assert.equal("number", type(c.start), where)
    assert.equal("number", type(c.stop), where)
    assert.is_true(c.start > last and c.start <= c.stop and c.stop <= #text,
      where .. (": bad span %d-%d after %d"):format(c.start, c.stop, last))
    assert.equal(text:sub(c.start, c.stop), c.text, where)
    assert.is_true(valid_utf8(c.text), where .. ": cut inside a character")
    assert.equal(i, c.index, where .. ": index")
    assert.equal(0, c.overlap, where .. ": overlap")
    assert.equal(measure(c.text), c.tokens, where .. ": tokens")
    if max_size then
      assert.is_true(c.tokens <= max_size,
        where .. (": %d > max_size %d"):format(c.tokens, max_size))
    end
    for k = c.start, c.stop do
      covered[k] = true
    end
    last = c.stop
  end
  for k = 1, #text do
    if not covered[k] and not is_space_byte(text:byte(k)) then
      assert.is_true(false, name .. (": byte %d (%q) is in no chunk"):format(k, text:sub(k, k + 2)))
    end
  end
end

local function same_set(a, b)
  return table.concat(a, ",") == table.concat(b, ",")
end

---------------------------------------------------------------------------

describe("rag.chunk.semantic", function()
  describe("the reference", function()
    it("matches numpy on known values", function()
      assert.is_true(math.abs(percentile({ 4, 1, 3, 2 }, 95) - 3.85) < 1e-12)
      assert.is_true(math.abs(percentile({ 15, 20, 35, 40, 50 }, 40) - 29) < 1e-12)
      assert.equal(50, percentile({ 15, 20, 35, 40, 50 }, 100))
      assert.equal(15, percentile({ 15, 20, 35, 40, 50 }, 0))
      assert.is_true(math.abs(pstd({ 1, 2, 3, 4 }) - 1.118033988749895) < 1e-12)
      assert.same({ 1, 1.5, 2.5, 3.5, 4.5, 5 }, gradient({ 1, 2, 4, 7, 11, 16 }))
      assert.same({ 0 }, gradient({ 0.3 }))
      assert.same({ 0.5, 0.5 }, gradient({ 0.25, 0.75 }))
    end)

    it("sees the sentences the texts were written with", function()
      for _, name in ipairs(TEXT_NAMES) do
        assert.equal(SENTENCE_COUNT[name], #rag.text.sentences(TEXTS[name]), name)
      end
    end)

    it("puts the breakpoints of en4 (buffer 0, default amounts) where the topics change", function()
      -- Topics change after sentences 9, 15 and 23. Gradient peaks one early.
      local want = {
        percentile = { 9, 15 },
        standard_deviation = { 15 },
        interquartile = { 9, 15, 23 },
        gradient = { 14, 22 },
      }
      for _, rule in ipairs(RULES) do
        assert.same(want[rule], reference(TEXTS.en4, { buffer = 0, threshold = rule }).breaks, rule)
      end
    end)

    it("gives four different breakpoint sets for the four rules (the spec can fail)", function()
      local configs = {
        { "en4", 0, DEFAULT_AMOUNT }, { "en4", 1, CUSTOM_AMOUNT },
        { "en5", 1, CUSTOM_AMOUNT }, { "zh", 0, CUSTOM_AMOUNT },
      }
      for _, cfg in ipairs(configs) do
        local sets = {}
        for k, rule in ipairs(RULES) do
          sets[k] = reference(TEXTS[cfg[1]], { buffer = cfg[2], threshold = rule,
            amount = cfg[3][rule] }).breaks
          assert.is_true(#sets[k] > 0, cfg[1] .. " " .. rule .. ": no breakpoint")
        end
        for a = 1, 4 do
          for b = a + 1, 4 do
            assert.is_false(same_set(sets[a], sets[b]),
              cfg[1] .. ": " .. RULES[a] .. " and " .. RULES[b] .. " agree")
          end
        end
      end
    end)
  end)

  describe("breakpoints", function()
    local cases = 0
    for _, name in ipairs(TEXT_NAMES) do
      for buffer = 0, 2 do
        for _, amounts in ipairs({ "default", "custom" }) do
          for _, rule in ipairs(RULES) do
            local amount = amounts == "custom" and CUSTOM_AMOUNT[rule] or nil
            local label = ("%s, buffer %d, %s, amount %s"):format(name, buffer, rule,
              tostring(amount or DEFAULT_AMOUNT[rule] .. " (default)"))
            cases = cases + 1
            it(label, function()
              local text = TEXTS[name]
              local want = reference(text, { buffer = buffer, threshold = rule, amount = amount })
              assert.is_true(want.margin > 1e-9, label .. ": a score lies too close to T")
              local rec = recorder()
              local opts = { embed = rec.embed, buffer = buffer, threshold = rule,
                unit = "char", max_size = 100000 }
              if amount then
                opts.amount = amount
              end
              local chunks, msg, code = semantic(text, opts)
              assert.is_table(chunks, tostring(msg) .. " " .. tostring(code))
              assert.same(fmt_spans(want.spans), spans_of(chunks))
              check_chunks(text, chunks, cplen, nil, label)
              -- embed: once, with exactly the groups
              assert.equal(1, rec.calls)
              assert.same(want.groups, rec.args[1])
            end)
          end
        end
      end
    end
    it("has enough cases", function()
      assert.equal(96, cases)
    end)
  end)

  describe("calls embed", function()
    it("once, with the sentences themselves when buffer is 0", function()
      local text = TEXTS.en3
      local rec = recorder()
      assert.is_table(semantic(text, { embed = rec.embed, buffer = 0, unit = "char" }))
      local want = {}
      for i, s in ipairs(rag.text.sentences(text)) do
        want[i] = s.text
      end
      assert.equal(1, rec.calls)
      assert.same(want, rec.args[1])
    end)

    it("with neighbours on both sides, clipped at the ends, when buffer is 2", function()
      local text = "One ocean. Two kitchen. Three orbit. Four garden. Five market."
      local rec = recorder()
      assert.is_table(semantic(text, { embed = rec.embed, buffer = 2, unit = "char" }))
      assert.same({
        "One ocean. Two kitchen. Three orbit.",
        "One ocean. Two kitchen. Three orbit. Four garden.",
        "One ocean. Two kitchen. Three orbit. Four garden. Five market.",
        "Two kitchen. Three orbit. Four garden. Five market.",
        "Three orbit. Four garden. Five market.",
      }, rec.args[1])
    end)

    it("with buffer 1 by default, keeping the text between sentences", function()
      local text = "The ocean.\n\nThe kitchen!  The orbit?\tThe garden."
      local rec = recorder()
      assert.is_table(semantic(text, { embed = rec.embed }))
      assert.equal(1, rec.calls)
      assert.same({
        "The ocean.\n\nThe kitchen!",
        "The ocean.\n\nThe kitchen!  The orbit?",
        "The kitchen!  The orbit?\tThe garden.",
        "The orbit?\tThe garden.",
      }, rec.args[1])
    end)

    it("with the whole text in every group when buffer >= n", function()
      local text = TEXTS.en3
      local rec = recorder()
      local chunks = semantic(text, { embed = rec.embed, buffer = 50, unit = "char",
        max_size = 100000 })
      assert.equal(14, #rec.args[1])
      for i = 1, 14 do
        assert.equal(text, rec.args[1][i])
      end
      assert.same({ "1-" .. #text }, spans_of(chunks))
    end)

    it("once with two groups for two sentences, which always make one chunk", function()
      local text = "The ocean is deep. The kitchen is warm."
      for _, rule in ipairs(RULES) do
        local rec = recorder()
        local chunks = semantic(text, { embed = rec.embed, threshold = rule, buffer = 0,
          unit = "char" })
        assert.equal(1, rec.calls, rule)
        assert.same({ "The ocean is deep.", "The kitchen is warm." }, rec.args[1], rule)
        assert.same({ "1-" .. #text }, spans_of(chunks), rule)
      end
    end)

    it("for three sentences, each rule as the reference says", function()
      local text = "The ocean is deep. The ocean is cold. The kitchen is warm."
      for _, rule in ipairs(RULES) do
        local want = reference(text, { buffer = 0, threshold = rule })
        local chunks = semantic(text, { embed = embed_all, threshold = rule, buffer = 0,
          unit = "char" })
        assert.same(fmt_spans(want.spans), spans_of(chunks), rule)
      end
      -- percentile 95 of two distances lies below the larger one
      assert.same({ 2 }, reference(text, { buffer = 0 }).breaks)
    end)

    it("and makes one chunk when all vectors are equal, for every rule", function()
      local text = TEXTS.en5
      local function flat(list)
        local out = {}
        for i = 1, #list do
          out[i] = { 1, 0, 0, 0 }
        end
        return out
      end
      for _, rule in ipairs(RULES) do
        local chunks = semantic(text, { embed = flat, threshold = rule, unit = "char",
          max_size = 100000 })
        assert.same({ "1-" .. #text }, spans_of(chunks), rule)
      end
    end)
  end)

  describe("min_size", function()
    local approx = rag.tokenizer.approx()
    local function count(s)
      return approx:count(s)
    end
    local cases = {
      -- text, buffer, rule, amount, unit, min_size
      { "en4", 1, "percentile", 70, "char", 200 },
      { "en5", 0, "interquartile", 1.5, "char", 250 },
      { "en5", 1, "percentile", 70, "char", 120 },
      { "en3", 0, "standard_deviation", 1, "char", 60 },
      { "zh", 0, "percentile", 70, "char", 30 },
      { "zh", 2, "gradient", 80, "char", 20 },
      { "en3", 0, "standard_deviation", 1, "token", 25 },
      { "en4", 1, "gradient", 80, "token", 40 },
    }
    for _, c in ipairs(cases) do
      local name, buffer, rule, amount, unit, min_size = c[1], c[2], c[3], c[4], c[5], c[6]
      local label = ("%s, buffer %d, %s %s, min_size %d %ss"):format(name, buffer, rule,
        tostring(amount), min_size, unit)
      it(label, function()
        local text = TEXTS[name]
        local measure = unit == "char" and cplen or count
        local base = reference(text, { buffer = buffer, threshold = rule, amount = amount })
        local want = reference(text, { buffer = buffer, threshold = rule, amount = amount,
          min_size = min_size, measure = measure })
        assert.is_true(want.margin > 1e-9, label .. ": a score lies too close to T")
        -- min_size changes the result here, and not into a single chunk
        assert.is_true(#want.spans < #base.spans and #want.spans > 1, label .. ": weak case")
        local chunks = semantic(text, { embed = embed_all, buffer = buffer, threshold = rule,
          amount = amount, unit = unit, min_size = min_size, max_size = 100000 })
        assert.is_table(chunks)
        assert.same(fmt_spans(want.spans), spans_of(chunks))
        check_chunks(text, chunks, measure, nil, label)
      end)
    end

    it("keeps a short last run", function()
      local text = TEXTS.en3
      local want = reference(text, { buffer = 0, threshold = "standard_deviation", amount = 1,
        min_size = 60 })
      local sents = rag.text.sentences(text)
      local last = want.spans[#want.spans]
      assert.same({ sents[14].start, sents[14].stop }, last)
      assert.is_true(cplen(sents[14].text) < 60)
      local chunks = semantic(text, { embed = embed_all, buffer = 0,
        threshold = "standard_deviation", amount = 1, unit = "char", min_size = 60 })
      assert.same(fmt_spans(want.spans), spans_of(chunks))
    end)

    it("larger than the text skips every breakpoint", function()
      local text = TEXTS.en4
      local chunks = semantic(text, { embed = embed_all, buffer = 1, threshold = "percentile",
        amount = 50, unit = "char", min_size = 5000, max_size = 100000 })
      local sents = rag.text.sentences(text)
      assert.same({ sents[1].start .. "-" .. sents[30].stop }, spans_of(chunks))
    end)
  end)

  describe("max_size", function()
    local approx = rag.tokenizer.approx()
    local cl100k = rag.tokenizer.get("cl100k_base")
    local cases = {
      -- text, unit, max_size, tokenizer name, rule, amount
      { "en5", "char", 40 }, { "en3", "char", 40 }, { "en4", "char", 40 }, { "zh", "char", 12 },
      { "en5", "char", 150, nil, "percentile", 70 },
      { "en4", "char", 300, nil, "interquartile", 0.5 },
      { "zh", "char", 30, nil, "gradient", 80 },
      { "en5", "token", 30 }, { "en3", "token", 30 }, { "en4", "token", 30 }, { "zh", "token", 30 },
      { "en5", "token", 8 }, { "zh", "token", 6 },
      { "en4", "token", 10, "cl100k" }, { "zh", "token", 10, "cl100k" },
    }
    for _, c in ipairs(cases) do
      local name, unit, max_size, tname, rule, amount = c[1], c[2], c[3], c[4], c[5], c[6]
      local label = ("%s, %s, at most %d %ss%s"):format(name, rule or "percentile", max_size, unit,
        tname and (" of " .. tname) or "")
      it(label, function()
        local text = TEXTS[name]
        local tok = tname and cl100k or approx
        local measure = unit == "char" and cplen or function(s)
          return tok:count(s)
        end
        local opts = { embed = embed_all, unit = unit, max_size = max_size, threshold = rule,
          amount = amount }
        if tname then
          opts.tokenizer = tok
        end
        local chunks = semantic(text, opts)
        check_chunks(text, chunks, measure, max_size, label)
        -- Each chunk lies inside one run; a run that fits is one chunk.
        local ref = reference(text, { threshold = rule, amount = amount })
        assert.is_true(ref.margin > 1e-9, label .. ": a score lies too close to T")
        local runs = ref.spans
        local whole, split = 0, 0
        for _, run in ipairs(runs) do
          local inside = {}
          for _, ch in ipairs(chunks) do
            if ch.start >= run[1] and ch.stop <= run[2] then
              inside[#inside + 1] = ch.start .. "-" .. ch.stop
            end
          end
          if measure(text:sub(run[1], run[2])) <= max_size then
            assert.same({ run[1] .. "-" .. run[2] }, inside, label .. ": a run that fits")
            whole = whole + 1
          else
            assert.is_true(#inside >= 2, label .. ": a long run")
            split = split + #inside
          end
        end
        assert.equal(#chunks, whole + split, label .. ": a chunk crosses a breakpoint")
        assert.is_true(split > 0, label .. ": nothing to split")
        if rule then
          assert.is_true(whole > 0, label .. ": no run fits")
        end
      end)
    end

    it("splits a single sentence longer than max_size", function()
      local text = "This ocean " .. ("wave after wave "):rep(20) .. "came in."
      local chunks = semantic(text, { embed = never_called, unit = "char", max_size = 40 })
      check_chunks(text, chunks, cplen, 40, "one long sentence")
      assert.is_true(#chunks > 1)
    end)
  end)

  describe("defaults", function()
    local approx = rag.tokenizer.approx()
    local function count(s)
      return approx:count(s)
    end

    for _, name in ipairs(TEXT_NAMES) do
      it("buffer 1, percentile 95, approx tokens, max_size 512 on " .. name, function()
        local text = TEXTS[name]
        local want = reference(text, {})
        assert.is_true(want.margin > 1e-9)
        for _, s in ipairs(want.spans) do
          assert.is_true(count(text:sub(s[1], s[2])) <= 512)
        end
        local rec = recorder()
        local chunks = semantic(text, { embed = rec.embed })
        assert.same(fmt_spans(want.spans), spans_of(chunks))
        check_chunks(text, chunks, count, 512, name)
        assert.equal(1, rec.calls)
        assert.same(want.groups, rec.args[1])
      end)
    end
  end)

  describe("edge cases", function()
    it("returns one chunk for one sentence without calling embed", function()
      local text = "  Only one ocean sentence here.  \n"
      local chunks = semantic(text, { embed = never_called })
      assert.same({ "3-31" }, spans_of(chunks))
      assert.equal("Only one ocean sentence here.", chunks[1].text)
      check_chunks(text, chunks, function(s)
        return rag.tokenizer.approx():count(s)
      end, 512, "one sentence")
      local chunks2 = semantic("no terminator at all", { embed = never_called, unit = "char" })
      assert.same({ "1-20" }, spans_of(chunks2))
      assert.equal(20, chunks2[1].tokens)
      local chunks3 = semantic("只有一句话。", { embed = never_called, unit = "char" })
      assert.same({ "1-18" }, spans_of(chunks3))
      assert.equal(6, chunks3[1].tokens)
    end)

    it("returns {} for empty or blank text without calling embed", function()
      assert.same({}, semantic("", { embed = never_called }))
      assert.same({}, semantic("  \n\t \r\n ", { embed = never_called }))
    end)
  end)

  describe("errors", function()
    local text = TEXTS.en3

    it("returns embed's nil, msg, code unchanged", function()
      local r = { semantic(text, { embed = function()
        return nil, "down", "http"
      end }) }
      assert.is_nil(r[1])
      assert.equal("down", r[2])
      assert.equal("http", r[3])
    end)

    it("returns nil, msg, 'encoding' for invalid UTF-8 without calling embed", function()
      local bads = { "The ocean\255 is deep. The kitchen is warm.", "海\228\184。好的。",
        "\192\128. Two." }
      for _, bad in ipairs(bads) do
        local r = { semantic(bad, { embed = never_called }) }
        assert.is_nil(r[1], ("%q"):format(bad))
        assert.equal("string", type(r[2]))
        assert.truthy(r[2]:find("rag.chunk.semantic", 1, true), r[2])
        assert.equal("encoding", r[3])
      end
    end)

    it("propagates an error raised by embed", function()
      local ok, err = pcall(semantic, text, { embed = function()
        error("boom")
      end })
      assert.is_false(ok)
      assert.truthy(tostring(err):find("boom", 1, true))
    end)

    -- The chunker measures with the tokenizer after embed has run: an embed
    -- that closes it must not leave the chunker reading a freed tokenizer.
    it("raises when embed closes the tokenizer", function()
      local tok = rag.tokenizer.load(rag.tokenizer.vocab_dir() .. "/cl100k_base.tiktoken",
        "cl100k_base")
      local ok, err = pcall(semantic, text, { tokenizer = tok, embed = function(list)
        tok:close()
        return embed_all(list)
      end })
      assert.is_false(ok)
      assert.equal("rag.chunk.semantic: tokenizer is closed", err)
    end)

    local function raises(opts_or_fn, what)
      local ok, err
      if type(opts_or_fn) == "function" then
        ok, err = pcall(opts_or_fn)
      else
        ok, err = pcall(semantic, text, opts_or_fn)
      end
      assert.is_false(ok, what .. ": did not raise")
      assert.truthy(tostring(err):find("rag.chunk.semantic", 1, true),
        what .. ": " .. tostring(err))
    end

    it("raises when embed returns the wrong number of vectors", function()
      raises({ embed = function(list)
        local v = embed_all(list)
        v[#v] = nil
        return v
      end }, "one vector short")
      raises({ embed = function(list)
        local v = embed_all(list)
        v[#v + 1] = v[1]
        return v
      end }, "one vector too many")
      raises({ embed = function()
        return {}
      end }, "no vectors")
    end)

    it("raises when embed returns vectors of different dimensions", function()
      raises({ embed = function(list)
        local v = embed_all(list)
        v[3][DIM + 1] = 0.5
        return v
      end }, "one vector longer")
      raises({ embed = function(list)
        local v = embed_all(list)
        v[#v][DIM] = nil
        return v
      end }, "last vector shorter")
    end)

    it("raises when embed returns something other than a list", function()
      raises({ embed = function()
        return "vectors"
      end }, "a string")
    end)

    it("raises on an unknown option key", function()
      raises({ embed = embed_all, bogus = 1 }, "bogus")
      raises({ embed = embed_all, treshold = "percentile" }, "treshold")
    end)

    it("raises when embed is not a function", function()
      raises({ embed = "openai" }, "a string embed")
      raises({ embed = 42 }, "a number embed")
      raises({}, "no embed")
    end)

    it("raises on a bad threshold name", function()
      raises({ embed = embed_all, threshold = "median" }, "median")
      raises({ embed = embed_all, threshold = "Percentile" }, "Percentile")
      raises({ embed = embed_all, threshold = 95 }, "a number")
    end)

    it("raises on a negative buffer", function()
      raises({ embed = embed_all, buffer = -1 }, "buffer -1")
    end)

    it("raises on a fractional buffer", function()
      raises({ embed = embed_all, buffer = 1.5 }, "buffer 1.5")
    end)

    it("raises on a bad unit", function()
      raises({ embed = embed_all, unit = "word" }, "unit word")
    end)

    it("raises on a non-string text or a missing opts table", function()
      raises(function()
        return semantic(42, { embed = embed_all })
      end, "a number text")
      raises(function()
        return semantic(nil, { embed = embed_all })
      end, "nil text")
      raises(function()
        return semantic(text)
      end, "no opts")
    end)
  end)
end)
