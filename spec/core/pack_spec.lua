-- rag.pack: a property spec over 1,000 seeded random cases (ASCII, CJK,
-- emoji; random budgets, templates, separators and options) that rebuilds
-- every returned text from the citations and the source documents and
-- counts it with the exact cl100k tokenizer; long texts around every seam
-- rule with cl100k and o200k; hand-made examples for each option; misuse,
-- encoding errors and allocation failures.
local rag = require("rag")
local helpers = require("spec.helpers")

local pack = rag.pack
local cl100k = rag.tokenizer.get("cl100k_base")
local approx = rag.tokenizer.approx()

-- {====== Random data ======}

-- Park-Miller, exact in doubles (Lua 5.1 and LuaJIT too).
local function rng(seed)
  local s = seed
  return function(a, b)
    s = (16807 * s) % 2147483647
    if a == nil then
      return s / 2147483647
    end
    return a + s % (b - a + 1)
  end
end

local function utf8char(cp)
  local f = math.floor
  if cp < 0x80 then
    return string.char(cp)
  elseif cp < 0x800 then
    return string.char(0xC0 + f(cp / 64), 0x80 + cp % 64)
  elseif cp < 0x10000 then
    return string.char(0xE0 + f(cp / 4096), 0x80 + f(cp / 64) % 64, 0x80 + cp % 64)
  end
  return string.char(0xF0 + f(cp / 262144), 0x80 + f(cp / 4096) % 64, 0x80 + f(cp / 64) % 64,
    0x80 + cp % 64)
end

-- Pieces chosen to sit on both sides of every seam rule: apostrophes,
-- slashes after newlines, CJK punctuation, digits, marks, odd spaces.
local ATOMS = {
  " ", " ", " ", ". ", ", ", "\n", "\n\n", "'s", "'re", "'", "/", "\n/", "123", "45678", "\t",
  "  ", "-", "(", ")", "\"", ":", "?", "http://x.org/a/b", "e\204\129", "caf\195\169",
  "na\195\175ve", "\194\160", "\227\128\128", "\239\188\140", "\227\128\130", "\227\128\129",
  "\239\188\129", "\239\188\159", "\226\128\156", "\226\128\157", "\240\159\152\128",
  "\240\159\142\137", "\240\159\145\141\240\159\143\189",
  "\240\159\145\168\226\128\141\240\159\145\169\226\128\141\240\159\145\167",
  "\240\159\135\186\240\159\135\184", "\226\157\164\239\184\143", "\227\129\147\227\130\147",
  "\227\130\171\227\130\191", "\208\191\209\128\208\184", "\240\160\128\128", "\r\n",
  "\194\133", "\225\154\128", "\226\128\131", "\226\128\168", "\226\128\175",
  "\226\129\159", "\n\194\160", "\n\227\128\128", "\n ", " \n", "\236\149\136\235\133\149 ",
  "12 ", ". ", "\n\n\n", "\239\184\143 ",
}

local function word(r)
  local t = {}
  for i = 1, r(1, 9) do
    local c = r(0, 51)
    t[i] = string.char(c < 26 and 97 + c or 65 + c - 26)
  end
  return table.concat(t)
end

local function han(r)
  local t = {}
  for i = 1, r(1, 6) do
    local k = r(1, 20)
    t[i] = utf8char(k == 1 and r(0x3400, 0x4DB5) or k == 2 and r(0x9FA6, 0x9FEF)
      or r(0x4E00, 0x9FA5))
  end
  return table.concat(t)
end

-- About `len` bytes of mixed text.
local function gen_text(r, len)
  local t, n = {}, 0
  local style = r(1, 4) -- 1 English, 2 Chinese, 3 emoji-heavy, 4 anything
  while n < len do
    local k = r(1, 10)
    local s
    if (style == 1 and k <= 6) or (style == 4 and k <= 3) then
      s = word(r)
    elseif (style == 2 and k <= 6) or (style == 4 and k <= 5) then
      s = han(r)
    elseif style == 3 and k <= 4 then
      s = ATOMS[r(36, #ATOMS)]
    else
      s = ATOMS[r(1, #ATOMS)]
    end
    t[#t + 1] = s
    n = n + #s
  end
  return table.concat(t)
end

-- Byte offsets where characters start, plus #s + 1.
local function char_starts(s)
  local t = {}
  for i = 1, #s do
    local b = s:byte(i)
    if b < 0x80 or b >= 0xC0 then
      t[#t + 1] = i
    end
  end
  t[#t + 1] = #s + 1
  return t
end

local TEMPLATES = {
  false, "{text}", "[{n}] {source} ({start}-{stop})\n{text}",
  "<doc n=\"{n}\" id=\"{id}\" doc=\"{doc}\" score=\"{score}\">\n{text}\n</doc>", "{n}. {text}",
  "Source: {source}\n{text}\n", "{text} [{n}]",
}
local SEPARATORS = { false, "\n\n", "", "\n", " ", "\n---\n", "\227\128\130", "/" }

-- One random case: documents, items and options.
local function gen_case(seed)
  local r = rng(seed)
  local docs, names = {}, {}
  for d = 1, r(1, 3) do
    names[d] = "doc" .. d
    docs[names[d]] = gen_text(r, r(0, 500))
  end
  local items, scored = {}, r(1, 10) > 1
  local ids = {}
  for k = 1, r(1, 12) do
    local id = string.format("i%02d", r(0, 99))
    while ids[id] do
      id = id .. "x"
    end
    ids[id] = true
    local it = { id = id }
    if r(1, 10) <= 2 then
      it.id = 1000 + k -- a number id, returned as a string
    end
    if scored then
      it.score = r(1, 3) == 1 and r(1, 4) / 4 or r()
    end
    local d = names[r(1, #names)]
    local doc = docs[d]
    if r(1, 5) > 1 and #doc > 0 then
      local starts = char_starts(doc)
      local a = r(1, #starts - 1)
      local b = math.min(#starts, a + r(0, 60))
      it.start, it.stop = starts[a], starts[b] - 1
      it.text = doc:sub(it.start, it.stop)
      if r(1, 4) == 1 then
        it.doc, it.source = d, "file-" .. d .. ".txt"
      else
        it.source = d
      end
    else
      it.text = gen_text(r, r(0, 120))
      it.source = ({ "d1", "d2", nil })[r(1, 3)]
    end
    items[#items + 1] = it
  end
  local kb = r(1, 10)
  local opts = {
    budget = kb <= 2 and r(0, 12) or kb <= 8 and r(10, 200) or r(500, 3000),
    order = ({ "relevance", "edges", nil })[r(1, 3)],
    merge_adjacent = r(1, 2) == 1,
    truncate = r(1, 10) <= 3,
    per_source = r(1, 5) == 1 and r(1, 3) or nil,
    template = TEMPLATES[r(1, #TEMPLATES)] or nil,
    separator = SEPARATORS[r(1, #SEPARATORS)] or nil,
  }
  local kt = r(1, 20)
  local counter = cl100k
  if kt == 1 then
    opts.tokenizer, counter = approx, approx
  elseif kt == 2 then
    counter = approx -- the default
  else
    opts.tokenizer = cl100k
  end
  return docs, items, opts, counter
end

-- {====== Checks ======}

-- The ranking: score descending, ties by id bytes; list order without scores.
local function ranking(items)
  local order = {}
  for i, it in ipairs(items) do
    order[i] = { id = tostring(it.id), score = it.score, i = i }
  end
  if items[1] and items[1].score then
    table.sort(order, function(a, b)
      if a.score ~= b.score then
        return a.score > b.score
      end
      return a.id < b.id
    end)
  end
  local rank = {}
  for r, o in ipairs(order) do
    rank[o.id] = r
  end
  return rank
end

-- Haystack's LostInTheMiddleRanker on ranks 1..n: position -> rank.
local function edges(n)
  local t = {}
  for r = 1, n, 2 do
    t[#t + 1] = r
  end
  local last = n % 2 == 0 and n - 1 or n - 2
  for r = last + 1, 2, -2 do
    t[#t + 1] = r
  end
  return t
end

local DEFAULT_TEMPLATE = "[{n}] {source}\n{text}"

local function render(template, n, c, text)
  return (template:gsub("{(%l[%l_]*)}", function(name)
    if name == "n" then
      return tostring(n)
    elseif name == "id" then
      return c.id
    elseif name == "source" then
      return c.source or c.id
    elseif name == "doc" then
      return c.doc or c.id
    elseif name == "text" then
      return text
    elseif name == "score" then
      return c.score and string.format("%.4g", c.score) or ""
    elseif name == "start" then
      return c.start and tostring(c.start) or ""
    elseif name == "stop" then
      return c.stop and tostring(c.stop) or ""
    end
  end))
end

local function fail(msg, ...)
  error(string.format(msg, ...), 2)
end

-- Every promise of a result; raises with the reason.
local function check(docs, items, opts, counter, res)
  local byid, rank = {}, ranking(items)
  for _, it in ipairs(items) do
    byid[tostring(it.id)] = it
  end
  -- the count is exact and within the budget
  local exact = counter:count(res.text)
  if exact ~= res.tokens then
    fail("tokens %d but the text counts %d", res.tokens, exact)
  end
  if res.tokens > opts.budget then
    fail("%d tokens over the budget %d", res.tokens, opts.budget)
  end
  -- used and dropped partition the ids
  local seen = {}
  for _, list in ipairs({ res.used, res.dropped }) do
    for _, id in ipairs(list) do
      if type(id) ~= "string" or not byid[id] or seen[id] then
        fail("bad or repeated id %s", tostring(id))
      end
      seen[id] = true
    end
  end
  if #res.used + #res.dropped ~= #items then
    fail("used and dropped hold %d ids of %d", #res.used + #res.dropped, #items)
  end
  -- the text is the citations rendered in order, each passage from its source
  local template, sep = opts.template or DEFAULT_TEMPLATE, opts.separator or "\n\n"
  local before, hole, after = {}, nil, {}
  local u, per = 0, {}
  for n, c in ipairs(res.citations) do
    local lead = byid[c.id]
    if c.ids[1] == nil or c.source ~= lead.source or c.doc ~= (lead.doc or lead.source) then
      fail("citation %d does not describe its lead item", n)
    end
    for _, id in ipairs(c.ids) do
      u = u + 1
      if res.used[u] ~= id then
        fail("used[%d] is %s, citation %d lists %s", u, tostring(res.used[u]), n, id)
      end
      local src = byid[id].source
      if src then
        per[src] = (per[src] or 0) + 1
      end
    end
    if c.truncated and not opts.truncate then
      fail("citation %d truncated without truncate", n)
    end
    local text
    if c.start then
      local doc = docs[c.doc]
      text = doc:sub(c.start, c.stop)
      -- the members cover [start, stop] with no gap, nothing twice
      local spans = {}
      for _, id in ipairs(c.ids) do
        local it = byid[id]
        spans[#spans + 1] = { it.start, it.stop }
      end
      table.sort(spans, function(a, b) return a[1] < b[1] end)
      local hi = spans[1][2]
      if spans[1][1] ~= c.start then
        fail("citation %d starts at %d, its first item at %d", n, c.start, spans[1][1])
      end
      for i = 2, #spans do
        if spans[i][1] > hi + 1 then
          fail("citation %d has a gap before byte %d", n, spans[i][1])
        end
        hi = math.max(hi, spans[i][2])
      end
      if (c.truncated and hi < c.stop) or (not c.truncated and hi ~= c.stop) then
        fail("citation %d stops at %d, its items at %d", n, c.stop, hi)
      end
      if not opts.merge_adjacent and #c.ids > 1 then
        fail("citation %d merged without merge_adjacent", n)
      end
    elseif #c.ids ~= 1 then
      fail("citation %d merges items without spans", n)
    elseif not c.truncated then
      text = lead.text
    else
      hole = lead.text
    end
    local piece = (n > 1 and sep or "") .. render(template, n, c, text or "\0HOLE\0")
    local a, b = piece:find("\0HOLE\0", 1, true)
    if a then
      before[#before + 1] = piece:sub(1, a - 1)
      after[#after + 1] = piece:sub(b + 1)
    elseif hole then
      after[#after + 1] = piece
    else
      before[#before + 1] = piece
    end
  end
  if u ~= #res.used then
    fail("citations list %d ids, used has %d", u, #res.used)
  end
  before, after = table.concat(before), table.concat(after)
  if hole == nil then
    if res.text ~= before then
      fail("text differs from its citations:\n%q\n%q", res.text, before)
    end
  else
    local mid = res.text:sub(#before + 1, #res.text - #after)
    if res.text:sub(1, #before) ~= before or res.text:sub(#res.text - #after + 1) ~= after
      or #mid == 0 or #mid >= #hole or hole:sub(1, #mid) ~= mid then
      fail("text differs from its citations around a cut item")
    end
  end
  -- merged passages never touch another passage of their document
  if opts.merge_adjacent then
    for i, a in ipairs(res.citations) do
      for j, b in ipairs(res.citations) do
        if i < j and a.start and b.start and a.doc == b.doc
          and a.start <= b.stop + 1 and b.start <= a.stop + 1 then
          fail("citations %d and %d touch in %s", i, j, a.doc)
        end
      end
    end
  end
  if opts.per_source then
    for src, k in pairs(per) do
      if k > opts.per_source then
        fail("%d items of source %s", k, src)
      end
    end
  end
  -- citation order: by rank, or the edges arrangement of the ranks
  local ranks = {}
  for n, c in ipairs(res.citations) do
    ranks[n] = rank[c.id]
  end
  local sorted = {}
  for i, v in ipairs(ranks) do
    sorted[i] = v
  end
  table.sort(sorted)
  local want = {}
  if opts.order == "edges" then
    for p, q in ipairs(edges(#sorted)) do
      want[p] = sorted[q]
    end
  else
    want = sorted
  end
  for p = 1, #ranks do
    if ranks[p] ~= want[p] then
      fail("citation %d has rank %d, %s order wants %d", p, ranks[p], opts.order or "relevance",
        want[p])
    end
  end
end

-- The greedy rule, checked from outside for exact relevance packing with
-- nothing merged or cut: a dropped item did not fit after the items taken
-- before it.
local function check_greedy(items, opts, res)
  local rank, byid = ranking(items), {}
  for _, it in ipairs(items) do
    byid[tostring(it.id)] = it
  end
  for _, x in ipairs(res.dropped) do
    local set = { byid[x] }
    for _, id in ipairs(res.used) do
      if rank[id] < rank[x] then
        set[#set + 1] = byid[id]
      end
    end
    table.sort(set, function(a, b) return rank[tostring(a.id)] < rank[tostring(b.id)] end)
    local o = {}
    for k, v in pairs(opts) do
      o[k] = v
    end
    o.budget = 1e9
    local alone = pack(set, o)
    if alone.tokens <= opts.budget then
      error(string.format("%s was dropped but fits: %d <= %d", x, alone.tokens, opts.budget))
    end
  end
end

-- {====== Specs ======}

describe("rag.pack property", function()
  it("holds on 1,000 seeded random cases", function()
    local stats = { cut = 0, merged = 0, dropped = 0, full = 0, edges = 0 }
    for seed = 1, 1000 do
      local docs, items, opts, counter = gen_case(seed)
      local ok, err = pcall(function()
        local res = assert(pack(items, opts))
        check(docs, items, opts, counter, res)
        if opts.tokenizer == cl100k and opts.order ~= "edges" and not opts.merge_adjacent
          and not opts.truncate and not opts.per_source then
          check_greedy(items, opts, res)
        end
        for _, c in ipairs(res.citations) do
          stats.cut = stats.cut + (c.truncated and 1 or 0)
          stats.merged = stats.merged + (#c.ids > 1 and 1 or 0)
        end
        stats.dropped = stats.dropped + (#res.dropped > 0 and 1 or 0)
        stats.full = stats.full + (res.tokens == opts.budget and 1 or 0)
        stats.edges = stats.edges + (opts.order == "edges" and #res.citations > 2 and 1 or 0)
      end)
      if not ok then
        error(string.format("case %d: %s", seed, tostring(err)), 0)
      end
    end
    -- the cases reach every branch often
    assert.is_true(stats.cut >= 50, "cut " .. stats.cut)
    assert.is_true(stats.merged >= 50, "merged " .. stats.merged)
    assert.is_true(stats.dropped >= 300, "dropped " .. stats.dropped)
    assert.is_true(stats.full >= 50, "exactly full " .. stats.full)
    assert.is_true(stats.edges >= 50, "edges " .. stats.edges)
  end)
end)

local function ids(list)
  return table.concat(list, ",")
end

describe("rag.pack", function()
  local items = {
    { id = "a", text = "Alpha is first.", score = 0.9, source = "one.md" },
    { id = "b", text = "Beta comes second.", score = 0.8, source = "two.md" },
    { id = "c", text = "Gamma is third.", score = 0.7 },
  }

  it("renders the default template and separator with exact counts", function()
    local res = pack(items, { budget = 1000, tokenizer = cl100k })
    local want = "[1] one.md\nAlpha is first.\n\n[2] two.md\nBeta comes second.\n\n[3] c\n"
      .. "Gamma is third."
    assert.equal(want, res.text)
    assert.equal(cl100k:count(want), res.tokens)
    assert.equal("a,b,c", ids(res.used))
    assert.same({}, res.dropped)
    assert.same({ id = "a", ids = { "a" }, source = "one.md", doc = "one.md", score = 0.9,
      truncated = false }, res.citations[1])
    assert.same({ id = "c", ids = { "c" }, score = 0.7, truncated = false }, res.citations[3])
  end)

  it("defaults to the approx counter and accepts it explicitly", function()
    local a = pack(items, { budget = 1000 })
    local b = pack(items, { budget = 1000, tokenizer = approx })
    assert.same(a, b)
    assert.equal(approx:count(a.text), a.tokens)
  end)

  it("fills the budget exactly and drops what does not fit", function()
    local full = pack(items, { budget = 1000, tokenizer = cl100k })
    local res = pack(items, { budget = full.tokens, tokenizer = cl100k })
    assert.equal(full.text, res.text)
    res = pack(items, { budget = full.tokens - 1, tokenizer = cl100k })
    assert.equal("a,b", ids(res.used))
    assert.equal("c", ids(res.dropped))
    assert.is_true(res.tokens < full.tokens - 1)
  end)

  it("merges adjacent chunks when the merged text fills the budget exactly", function()
    local doc = "Tides follow the moon. Spring tides are high. Neap tides are low."
    local two = {
      { id = "t1", text = doc:sub(1, 23), score = 0.9, doc = "tides", start = 1, stop = 23 },
      { id = "t2", text = doc:sub(24, 45), score = 0.8, doc = "tides", start = 24, stop = 45 },
    }
    local o = { budget = 1000, tokenizer = cl100k, merge_adjacent = true }
    local full = pack(two, o)
    assert.same({ "t1", "t2" }, full.citations[1].ids)
    o.budget = full.tokens
    local exact = pack(two, o)
    assert.equal(full.text, exact.text)
    assert.equal(full.tokens, exact.tokens)
  end)

  it("skips an item that does not fit and takes smaller ones after it", function()
    local list = {
      { id = "big", text = string.rep("many words here ", 50), score = 2 },
      { id = "small", text = "tiny", score = 1 },
      { id = "top", text = "Best.", score = 3 },
    }
    local res = pack(list, { budget = 20, tokenizer = cl100k })
    assert.equal("top,small", ids(res.used))
    assert.equal("big", ids(res.dropped))
    assert.equal("[1] top\nBest.\n\n[2] small\ntiny", res.text)
  end)

  it("breaks score ties by id and keeps list order without scores", function()
    local tied = {
      { id = "z", text = "z", score = 1 }, { id = "m", text = "m", score = 1 },
      { id = "a", text = "a", score = 1 }, { id = "q", text = "q", score = 2 },
    }
    assert.equal("q,a,m,z", ids(pack(tied, { budget = 100 }).used))
    local plain = { { id = "z", text = "z" }, { id = "m", text = "m" }, { id = "a", text = "a" } }
    local res = pack(plain, { budget = 100, template = "{id}" })
    assert.equal("z,m,a", ids(res.used))
    assert.is_nil(res.citations[1].score)
  end)

  it("orders edges as Haystack's LostInTheMiddleRanker", function()
    for _, case in ipairs({ { 4, "1,3,4,2" }, { 6, "1,3,5,6,4,2" }, { 5, "1,3,5,4,2" },
      { 1, "1" }, { 2, "1,2" } }) do
      local list = {}
      for i = 1, case[1] do
        list[i] = { id = tostring(i), text = "t" .. i, score = 10 - i }
      end
      local res = pack(list, { budget = 1000, order = "edges", template = "{id}" })
      assert.equal(case[2], ids(res.used))
      assert.equal(case[2]:gsub(",", "\n\n"), res.text)
      for n, c in ipairs(res.citations) do
        assert.equal(res.used[n], c.id)
      end
    end
  end)

  it("renders every placeholder; a missing source shows the id", function()
    local list = {
      { id = "x1", text = "body", score = 0.12346, source = "s.md", doc = "D", start = 5,
        stop = 8 },
      { id = 7, text = "more", score = 0.5 },
    }
    local res = pack(list, { budget = 1000, separator = " | ",
      template = "{n}:{id}:{source}:{doc}:{score}:{start}-{stop}:{text}:{nope:{} {Text}" })
    assert.equal("1:7:7:7:0.5:-:more:{nope:{} {Text} | 2:x1:s.md:D:0.1235:5-8:body:{nope:{} "
      .. "{Text}", res.text)
    assert.equal("7", res.used[1])
    assert.same({ id = "x1", ids = { "x1" }, source = "s.md", doc = "D", start = 5, stop = 8,
      score = 0.12346, truncated = false }, res.citations[2])
  end)

  it("counts a template without {text} and one with it twice", function()
    local res = pack(items, { budget = 1000, template = "<{id}>", tokenizer = cl100k })
    assert.equal("<a>\n\n<b>\n\n<c>", res.text)
    res = pack(items, { budget = 1000, template = "{text}|{text}", separator = "",
      tokenizer = cl100k })
    assert.equal("Alpha is first.|Alpha is first.Beta comes second.|Beta comes second."
      .. "Gamma is third.|Gamma is third.", res.text)
    assert.equal(cl100k:count(res.text), res.tokens)
  end)

  it("limits items per source; items without a source are not limited", function()
    local list = {
      { id = "a1", text = "a", score = 6, source = "A" },
      { id = "a2", text = "a", score = 5, source = "A" },
      { id = "b1", text = "b", score = 4, source = "B" },
      { id = "a3", text = "a", score = 3, source = "A" },
      { id = "n1", text = "n", score = 2 },
      { id = "n2", text = "n", score = 1 },
    }
    local res = pack(list, { budget = 1000, per_source = 2 })
    assert.equal("a1,a2,b1,n1,n2", ids(res.used))
    assert.equal("a3", ids(res.dropped))
    res = pack(list, { budget = 1000, per_source = 1 })
    assert.equal("a1,b1,n1,n2", ids(res.used))
    assert.equal("a2,a3", ids(res.dropped))
  end)

  describe("merge_adjacent", function()
    local doc = "One two three. Four five six. Seven eight nine. Ten eleven."
    local function chunk(id, a, b, score, extra)
      local it = { id = id, text = doc:sub(a, b), start = a, stop = b, score = score,
        source = "doc.txt" }
      for k, v in pairs(extra or {}) do
        it[k] = v
      end
      return it
    end

    it("joins touching and overlapping chunks without repeating bytes", function()
      local list = {
        chunk("c2", 15, 29, 0.9), -- " Four five six."
        chunk("c1", 1, 14, 0.8),  -- touches c2 on the left
        chunk("c3", 25, 47, 0.7), -- overlaps c2
        chunk("c4", 5, 9, 0.6),   -- inside c1
      }
      local res = pack(list, { budget = 1000, merge_adjacent = true, tokenizer = cl100k })
      assert.equal("[1] doc.txt\n" .. doc:sub(1, 47), res.text)
      assert.equal("c1,c4,c2,c3", ids(res.used))
      assert.same({ id = "c2", ids = { "c1", "c4", "c2", "c3" }, source = "doc.txt",
        doc = "doc.txt", start = 1, stop = 47, score = 0.9, truncated = false },
        res.citations[1])
      assert.equal(cl100k:count(res.text), res.tokens)
      -- without the option, each chunk is its own passage
      res = pack(list, { budget = 1000, tokenizer = cl100k })
      assert.equal(4, #res.citations)
    end)

    it("bridges two passages into one at the better one's place", function()
      local list = {
        chunk("left", 1, 14, 0.9), chunk("other", 1, 5, 0.8, { source = "x", doc = "X" }),
        chunk("right", 31, 47, 0.7), chunk("bridge", 10, 35, 0.6),
      }
      local res = pack(list, { budget = 1000, merge_adjacent = true, template = "{text}",
        separator = "|" })
      assert.equal(doc:sub(1, 47) .. "|" .. doc:sub(1, 5), res.text)
      assert.equal("left,bridge,right,other", ids(res.used))
      assert.equal(1, res.citations[1].start)
      assert.equal(47, res.citations[1].stop)
    end)

    it("keeps chunks of other documents, without spans or disagreeing apart", function()
      local list = {
        chunk("a", 1, 14, 0.9),
        chunk("b", 15, 29, 0.8, { source = "other.txt" }),
        { id = "c", text = doc:sub(15, 29), score = 0.7, source = "doc.txt" },
        { id = "d", text = "XXXX", start = 13, stop = 16, score = 0.6, source = "doc.txt" },
      }
      local res = pack(list, { budget = 1000, merge_adjacent = true, template = "{text}",
        separator = "|" })
      assert.equal(4, #res.citations)
      assert.equal(doc:sub(1, 14) .. "|" .. doc:sub(15, 29) .. "|" .. doc:sub(15, 29) .. "|XXXX",
        res.text)
    end)

    it("counts the merged passage against the budget", function()
      local list = { chunk("a", 1, 14, 0.9), chunk("b", 10, #doc, 0.8) }
      local small = pack({ list[1] }, { budget = 1000, merge_adjacent = true, tokenizer = cl100k })
      local res = pack(list, { budget = small.tokens, merge_adjacent = true, tokenizer = cl100k })
      assert.equal("a", ids(res.used))
      assert.equal("b", ids(res.dropped))
    end)
  end)

  describe("truncate", function()
    local zh = "这是一个很长的中文句子，用来测试截断😀😀😀，看看会不会切坏字符。"
    local long = {
      { id = "a", text = "First passage here.", score = 2, source = "s", start = 1, stop = 19 },
      { id = "b", text = zh, score = 1, source = "t", start = 101, stop = 100 + #zh },
    }

    it("cuts the first item that does not fit at a character boundary", function()
      local full = pack(long, { budget = 1000, tokenizer = cl100k })
      for budget = 8, full.tokens - 1 do
        local res = pack(long, { budget = budget, tokenizer = cl100k, truncate = true })
        assert.equal(cl100k:count(res.text), res.tokens)
        assert.is_true(res.tokens <= budget)
        local c = res.citations[#res.citations]
        if c.id == "b" then
          assert.is_true(c.truncated)
          local cut = res.text:match("\n%[2%] t\n(.*)$")
          assert.equal(long[2].text:sub(1, #cut), cut)
          assert.equal(101 + #cut - 1, c.stop)
          assert.is_true(#cut > 0 and #cut < #zh)
          assert.is_number(cl100k:count(cut)) -- valid UTF-8: no character split
        end
      end
    end)

    it("cuts only once, and never without the option", function()
      local list = {
        { id = "a", text = string.rep("word ", 40), score = 3 },
        { id = "b", text = string.rep("more ", 40), score = 2 },
        { id = "c", text = "x", score = 1 },
      }
      local res = pack(list, { budget = 30, tokenizer = cl100k, truncate = true })
      assert.equal("a", ids(res.used))
      assert.equal("b,c", ids(res.dropped))
      assert.is_true(res.citations[1].truncated)
      assert.is_true(res.tokens <= 30 and res.tokens >= 28)
      assert.equal("[1] a\n" .. list[1].text:sub(1, #res.text - 6), res.text)
      res = pack(list, { budget = 30, tokenizer = cl100k })
      assert.equal("c", ids(res.used))
      assert.equal("a,b", ids(res.dropped))
    end)

    it("cuts with the approx counter too", function()
      local res = pack(long, { budget = 20, truncate = true })
      assert.is_true(res.tokens <= 20)
      assert.equal(approx:count(res.text), res.tokens)
    end)
  end)

  it("stays exact across seams that merge tokens", function()
    -- "." + "\n\n" and " " + "\n" merge into single tokens; digits regroup
    local list = {
      { id = "1", text = "Ends with a dot.", score = 5 },
      { id = "2", text = "ends with space ", score = 4 },
      { id = "3", text = "123", score = 3 },
      { id = "4", text = "456 and 's", score = 2 },
      { id = "5", text = "\n/path", score = 1 },
    }
    for _, sep in ipairs({ "\n\n", "", "\n", " ", "/" }) do
      for _, tpl in ipairs({ "{text}", "{n}{text}", "{text}\n" }) do
        local full = pack(list, { budget = 1000, separator = sep, template = tpl,
          tokenizer = cl100k })
        assert.equal(cl100k:count(full.text), full.tokens)
        for budget = 0, full.tokens do
          for _, order in ipairs({ "relevance", "edges" }) do
            local res = pack(list, { budget = budget, separator = sep, template = tpl,
              tokenizer = cl100k, order = order })
            assert.equal(cl100k:count(res.text), res.tokens)
            assert.is_true(res.tokens <= budget)
          end
        end
      end
    end
  end)

  it("counts long texts of every seam's neighbours exactly, cl100k and o200k", function()
    -- long enough to be counted in segments, cut at the boundaries the
    -- packer finds; both vocabularies, o200k's '/' after newlines included
    local o200k = rag.tokenizer.get("o200k_base")
    local r = rng(99)
    local tricky = { " ", "  ", "\n", "\n\n", "\n/", "/", "\t", "\r\n", "\194\160",
      "\194\133", "\227\128\128", "\226\128\131", "\226\128\168", "\225\154\128",
      "'s", "'", ".", "\239\188\140", "\227\128\130", "1", "23", "\204\129" }
    for case = 1, 120 do
      local t = {}
      for i = 1, r(300, 1500) do
        local k = r(1, 6)
        t[i] = k <= 2 and tricky[r(1, #tricky)] or k == 3 and word(r) or k == 4 and han(r)
          or ATOMS[r(1, #ATOMS)]
      end
      local text = table.concat(t)
      local cut = 700
      while (text:byte(cut + 1) or 0) >= 0x80 and text:byte(cut + 1) < 0xC0 do
        cut = cut - 1
      end
      for _, tok in ipairs({ cl100k, o200k }) do
        local res = pack({ { id = "x", text = text }, { id = "y", text = text:sub(1, cut) } },
          { budget = 1e7, tokenizer = tok, template = "{text}", separator = "" })
        assert.equal(tok:count(res.text), res.tokens, "case " .. case)
      end
    end
  end)

  it("handles nothing to pack and a zero budget", function()
    local res = pack({}, { budget = 10 })
    assert.same({ text = "", tokens = 0, used = {}, dropped = {}, citations = {} }, res)
    res = pack(items, { budget = 0, tokenizer = cl100k })
    assert.equal("", res.text)
    assert.equal("a,b,c", ids(res.dropped))
    res = pack({ { id = "e", text = "" } }, { budget = 0, template = "{text}" })
    assert.equal("e", ids(res.used))
  end)

  it("reads items through metatables, keeping computed strings alive", function()
    local Hit = {}
    Hit.__index = function(t, k)
      if k == "text" then
        return "text of " .. t.key .. string.rep("!", t.n) -- a new string each time
      elseif k == "id" then
        return "hit-" .. t.key
      elseif k == "source" then
        return "src" .. t.n % 2
      end
    end
    local list = {}
    for i = 1, 50 do
      list[i] = setmetatable({ key = "k" .. i, n = i, score = i }, Hit)
    end
    local pause = collectgarbage("setpause", 0) -- collect at every step
    local res = pack(list, { budget = 10000, tokenizer = cl100k })
    collectgarbage("setpause", pause)
    assert.equal(50, #res.used)
    assert.equal("hit-k50", res.used[1])
    local first = "[1] src0\ntext of k50" .. string.rep("!", 50) .. "\n\n[2] src1\ntext of k49"
    assert.equal(first, res.text:sub(1, #first))
    assert.equal(cl100k:count(res.text), res.tokens)
  end)

  it("works with o200k_base", function()
    local o200k = rag.tokenizer.get("o200k_base")
    local res = pack(items, { budget = 1000, tokenizer = o200k })
    assert.equal(o200k:count(res.text), res.tokens)
  end)
end)

-- order = "given": the caller's order is the ranking, scores or not (issue 20,
-- point 8: packing after rag.rerank.mmr or rag.rerank.litm).
describe("rag.pack order = \"given\"", function()
  local list = {
    { id = "low", text = "Low score, placed first.", score = 0.1 },
    { id = "high", text = "High score, placed second.", score = 0.9 },
    { id = "mid", text = "Middle score, placed last.", score = 0.5 },
  }

  it("keeps the caller's order exactly and still shows the scores", function()
    local res = pack(list, { budget = 1000, order = "given", template = "{id} {score}" })
    assert.equal("low,high,mid", ids(res.used))
    assert.equal("low 0.1\n\nhigh 0.9\n\nmid 0.5", res.text)
    for n, c in ipairs(res.citations) do
      assert.equal(list[n].id, c.id)
      assert.equal(list[n].score, c.score)
    end
  end)

  it("leaves relevance sorting by score", function()
    local res = pack(list, { budget = 1000, order = "relevance", template = "{id}" })
    assert.equal("high,mid,low", ids(res.used))
    assert.equal("high,mid,low", ids(pack(list, { budget = 1000, template = "{id}" }).used))
  end)

  it("takes items greedily in the given order, skipping what does not fit", function()
    local big = string.rep("many words here ", 50)
    local l = {
      { id = "s1", text = "tiny", score = 1 },
      { id = "big1", text = big, score = 3 },
      { id = "s2", text = "also tiny", score = 2 },
      { id = "big2", text = big .. "!", score = 5 },
    }
    local res = pack(l, { budget = 20, tokenizer = cl100k, order = "given" })
    assert.equal("s1,s2", ids(res.used))
    assert.equal("big1,big2", ids(res.dropped)) -- in the given order too
    assert.equal("[1] s1\ntiny\n\n[2] s2\nalso tiny", res.text)
    assert.equal(cl100k:count(res.text), res.tokens)
    local rel = pack(l, { budget = 20, tokenizer = cl100k })
    assert.equal("s2,s1", ids(rel.used))
    assert.equal("big2,big1", ids(rel.dropped))
    -- the first item that does not fit is the one truncate cuts
    res = pack(l, { budget = 30, tokenizer = cl100k, order = "given", truncate = true })
    assert.equal("s1,big1", ids(res.used))
    assert.equal("s2,big2", ids(res.dropped))
    assert.is_true(res.citations[2].truncated)
    assert.equal(30, res.tokens)
  end)

  it("keeps rag.rerank.litm's arrangement when packing after it", function()
    local hits = {}
    for i = 1, 6 do
      hits[i] = { id = "h" .. i, text = "passage " .. i, score = 1 - i / 10 }
    end
    local arranged = rag.rerank.litm(hits)
    local res = pack(arranged, { budget = 1000, order = "given", template = "{id}" })
    assert.equal("h1,h3,h5,h6,h4,h2", ids(res.used))
    res = pack(arranged, { budget = 1000, template = "{id}" }) -- relevance undoes it
    assert.equal("h1,h2,h3,h4,h5,h6", ids(res.used))
  end)

  it("packs as relevance order packs the same list without scores (300 seeded cases)", function()
    local given = 0
    for seed = 1, 300 do
      local _, items, opts = gen_case(seed)
      if opts.template and opts.template:find("{score}", 1, true) then
        opts.template = nil -- {score} is empty without scores
      end
      local plain = {}
      for i, it in ipairs(items) do
        plain[i] = {}
        for k, v in pairs(it) do
          if k ~= "score" then
            plain[i][k] = v
          end
        end
      end
      opts.order = "given"
      local a = assert(pack(items, opts))
      opts.order = "relevance"
      local b = assert(pack(plain, opts))
      local where = "case " .. seed
      assert.equal(b.text, a.text, where)
      assert.equal(b.tokens, a.tokens, where)
      assert.same(b.used, a.used, where)
      assert.same(b.dropped, a.dropped, where)
      assert.equal(#b.citations, #a.citations, where)
      for n, c in ipairs(a.citations) do
        c.score = nil
        assert.same(b.citations[n], c, where)
      end
      given = given + ((items[1] and items[1].score and #a.used > 1) and 1 or 0)
    end
    assert.is_true(given >= 100, "scored cases " .. given)
  end)
end)

describe("rag.pack errors", function()
  local ok = { { id = "a", text = "x" } }
  local function raises(msg, itemlist, opts)
    assert.has_error(function() pack(itemlist, opts) end, msg)
  end

  it("raises on bad options", function()
    raises("rag.pack: opts must be a table with a budget, got nil", ok)
    raises("rag.pack: option 'budget' is required", ok, {})
    raises("rag.pack: option 'budget' must be an integer >= 0", ok, { budget = -1 })
    raises("rag.pack: option 'budget' must be an integer >= 0", ok, { budget = 1.5 })
    raises("rag.pack: option 'budget' must be an integer, got string", ok, { budget = "10" })
    raises("rag.pack: unknown option 'limit'", ok, { budget = 1, limit = 3 })
    raises("rag.pack: option 'order' must be \"relevance\", \"edges\" or \"given\"", ok,
      { budget = 1, order = "middle" })
    raises("rag.pack: option 'tokenizer' must be a rag.tokenizer or rag.tokenizer.approx()", ok,
      { budget = 1, tokenizer = "cl100k_base" })
    raises("rag.pack: option 'template': unknown placeholder '{title}'", ok,
      { budget = 1, template = "{title} {text}" })
    raises("rag.pack: option 'template' must be a string, got number", ok,
      { budget = 1, template = 1 })
    raises("rag.pack: option 'separator' must be a string, got boolean", ok,
      { budget = 1, separator = true })
    raises("rag.pack: option 'per_source' must be an integer >= 1", ok,
      { budget = 1, per_source = 0 })
    raises("rag.pack: option 'merge_adjacent' must be a boolean, got number", ok,
      { budget = 1, merge_adjacent = 1 })
    raises("rag.pack: option 'truncate' must be a boolean, got string", ok,
      { budget = 1, truncate = "yes" })
    local tok = rag.tokenizer.load(rag.tokenizer.vocab_dir() .. "/cl100k_base.tiktoken",
      "cl100k_base")
    tok:close()
    raises("rag.pack: tokenizer is closed", ok, { budget = 1, tokenizer = tok })
  end)

  -- Items are read through __index, which may run any code; the tokenizer
  -- is checked after them, so closing it there cannot leave it freed in use.
  it("raises when reading an item closes the tokenizer", function()
    local tok = rag.tokenizer.load(rag.tokenizer.vocab_dir() .. "/cl100k_base.tiktoken",
      "cl100k_base")
    local item = setmetatable({}, { __index = function(_, k)
      tok:close()
      return ({ id = "a", text = "x" })[k]
    end })
    raises("rag.pack: tokenizer is closed", { item }, { budget = 10, tokenizer = tok })
  end)

  it("raises on bad items", function()
    local o = { budget = 10 }
    raises("rag.pack: items must be a table, got string", "x", o)
    raises("rag.pack: item 2 must be a table, got string", { ok[1], "b" }, o)
    raises("rag.pack: item 1: id must be a string or a number, got nil", { { text = "x" } }, o)
    raises("rag.pack: item 1: text must be a string, got number", { { id = "a", text = 1 } }, o)
    raises("rag.pack: item 2: give a score to every item or to none",
      { { id = "a", text = "x", score = 1 }, { id = "b", text = "y" } }, o)
    raises("rag.pack: item 2: give a score to every item or to none",
      { { id = "a", text = "x" }, { id = "b", text = "y", score = 1 } }, o)
    raises("rag.pack: item 1: score must be a finite number",
      { { id = "a", text = "x", score = 0 / 0 } }, o)
    raises("rag.pack: item 1: score must be a finite number",
      { { id = "a", text = "x", score = "1" } }, o)
    raises("rag.pack: item 1: source must be a string, got number",
      { { id = "a", text = "x", source = 3 } }, o)
    raises("rag.pack: item 1: doc must be a string, got table",
      { { id = "a", text = "x", doc = {} } }, o)
    raises("rag.pack: item 1: start and stop must both be integers, or both absent",
      { { id = "a", text = "x", start = 1 } }, o)
    raises("rag.pack: item 1: start and stop must be integers >= 1 with stop - start + 1 == "
      .. "#text (3)", { { id = "a", text = "xyz", start = 1, stop = 2 } }, o)
    raises("rag.pack: item 1: start and stop must be integers >= 1 with stop - start + 1 == "
      .. "#text (0)", { { id = "a", text = "", start = 0, stop = -1 } }, o)
    raises("rag.pack: item 3: duplicate id 'a'",
      { { id = "a", text = "x" }, { id = "b", text = "y" }, { id = "a", text = "z" } }, o)
    raises("rag.pack: item 2: duplicate id '1'",
      { { id = "1", text = "x" }, { id = 1, text = "y" } }, o)
  end)

  it("returns nil, msg, \"encoding\" for invalid UTF-8", function()
    local o = { budget = 100, tokenizer = cl100k }
    local res, msg, code = pack({ ok[1], { id = "b", text = "ab\255c" } }, o)
    assert.is_nil(res)
    assert.equal("rag.pack: item 2: invalid utf-8 in text at byte 3", msg)
    assert.equal("encoding", code)
    res, msg, code = pack({ { id = "a", text = "x", source = "\192\128" } }, o)
    assert.is_nil(res)
    assert.equal("rag.pack: item 1: invalid utf-8 in source at byte 1", msg)
    assert.equal("encoding", code)
    res, msg = pack({ { id = "a\237\160\128", text = "x" } }, o)
    assert.is_nil(res)
    assert.equal("rag.pack: item 1: invalid utf-8 in id at byte 2", msg)
    res, msg, code = pack(ok, { budget = 100, template = "{text}\254" })
    assert.is_nil(res)
    assert.equal("rag.pack: option 'template': invalid utf-8 at byte 7", msg)
    assert.equal("encoding", code)
    res, msg = pack(ok, { budget = 100, separator = "\128" })
    assert.is_nil(res)
    assert.equal("rag.pack: option 'separator': invalid utf-8 at byte 1", msg)
    -- an item that would never be taken is checked too
    res, msg = pack({ ok[1], { id = "b", text = string.rep("y", 5000) .. "\255" } },
      { budget = 5 })
    assert.is_nil(res)
    assert.equal("rag.pack: item 2: invalid utf-8 in text at byte 5001", msg)
  end)
end)

describe("rag.pack allocation failures", function()
  if not require("rag.core")._fail_alloc then
    it("needs a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  it("raises and recovers at every fault point", function()
    local docs, items = gen_case(7)
    local doc = docs.doc1 .. ""
    local list = {}
    for i, it in ipairs(items) do
      list[i] = it
    end
    list[#list + 1] = { id = "long", text = doc, start = 1, stop = #doc, source = "doc1",
      score = 0.01 }
    for _, o in ipairs({
      { budget = 150, tokenizer = cl100k, merge_adjacent = true, truncate = true },
      { budget = 150, tokenizer = cl100k, order = "edges", merge_adjacent = true },
      { budget = 60, truncate = true, per_source = 2 },
    }) do
      local want = pack(list, o)
      assert.is_true(helpers.oom_walk(function()
        assert.same(want, pack(list, o))
      end) >= 5)
    end
  end)
end)
