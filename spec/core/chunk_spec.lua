-- rag.chunk: the offset invariant and the hard size limit for every chunker
-- on SciFact (a 40-document sample; all of it, and the seeds, under `make
-- quality`: the tests tagged #data), hard fixtures and generated texts; LangChain's
-- RecursiveCharacterTextSplitter chunk for chunk (spec/fixtures/langchain,
-- made by generate.mjs with @langchain/textsplitters); each chunker's own
-- rules; errors. The semantic chunker's breakpoints: chunk_semantic_spec.lua.
local rag = require("rag")
local helpers = require("spec.helpers")

local chunk = rag.chunk
local json = rag.json

local read = helpers.read

-- Code points, without relying on utf8 (absent on Lua 5.1 and LuaJIT).
local function nchars(s)
  local n = 0
  for i = 1, #s do
    local b = s:byte(i)
    if b < 0x80 or b >= 0xC0 then
      n = n + 1
    end
  end
  return n
end

local function is_cont(s, i)
  local b = s:byte(i)
  return b ~= nil and b >= 0x80 and b < 0xC0
end

local function is_space(c)
  return c == " " or c == "\t" or c == "\n" or c == "\r" or c == "\v" or c == "\f"
end

local cl100k = rag.tokenizer.get("cl100k_base")
local approx = rag.tokenizer.approx()

local units = {
  { name = "char", opts = { unit = "char" }, measure = nchars },
  { name = "approx", opts = {}, measure = function(s) return approx:count(s) end },
  { name = "cl100k", opts = { tokenizer = cl100k },
    measure = function(s) return cl100k:count(s) end },
}

local function with(base, extra)
  local t = {}
  for k, v in pairs(base) do
    t[k] = v
  end
  for k, v in pairs(extra) do
    t[k] = v
  end
  return t
end

-- Every promise a chunk list makes about src; returns an error string or nil.
-- limit: the size limit, or a function(chunk) giving it (hierarchy levels).
local function problems(src, chunks, limit, measure, opts)
  opts = opts or {}
  local prev
  for i, c in ipairs(chunks) do
    local where = "chunk " .. i .. ": "
    if c.index ~= i then return where .. "index " .. tostring(c.index) end
    if c.text ~= src:sub(c.start,
      c.stop) then return where .. "text is not src:sub(start, stop)" end
    if c.text == "" then return where .. "empty" end
    if is_cont(src, c.start) or is_cont(src, c.stop + 1) then return where .. "cut inside utf-8" end
    local lim = type(limit) == "function" and limit(c) or limit
    if c.tokens > lim then return where .. c.tokens .. " > " .. lim end
    if measure and c.tokens ~= measure(c.text) then
      return where .. "tokens " .. c.tokens .. " but measures " .. measure(c.text)
    end
    if opts.ordered and prev and c.start < prev.start then return where .. "out of order" end
    if measure and opts.ordered then
      local shared = prev and prev.stop >= c.start and src:sub(c.start, math.min(prev.stop,
        c.stop)) or ""
      local want = shared == "" and 0 or measure(shared)
      if c.overlap ~= want then return where .. "overlap " .. c.overlap .. ", shares " .. want end
    end
    prev = c
  end
  if opts.covers then -- every non-whitespace byte lies in some chunk
    local covered = 0
    for _, c in ipairs(chunks) do
      for j = covered + 1, c.start - 1 do
        if not is_space(src:sub(j, j)) and src:byte(j) < 0x80 then
          return "byte " .. j .. " is in no chunk"
        end
      end
      if c.stop > covered then
        covered = c.stop
      end
    end
    if src:sub(covered + 1):find("[^%s\128-\255]") then return "the tail is in no chunk" end
  end
  return nil
end

local function check(src, chunks, limit, measure, opts)
  local p = problems(src, chunks, limit, measure, opts)
  if p then
    error(p, 2)
  end
end

-- The first n documents of the SciFact sample as one text, in paragraphs.
local function sample_text(n)
  local parts = {}
  for _, d in ipairs(helpers.scifact()) do
    if #parts == 2 * n then
      break
    end
    parts[#parts + 1] = d.title
    parts[#parts + 1] = d.text
  end
  return table.concat(parts, "\n\n")
end

-- A deterministic stand-in for an embedding model: a few byte statistics.
local function cheap_embed(list)
  local v = {}
  for i, t in ipairs(list) do
    v[i] = { #t % 13 + 1, nchars(t) % 7 + 1, t:byte(1) % 5 + 1, t:byte(-1) % 3 }
  end
  return v
end

-- The chunkers, each with options that exercise it and what it promises.
local function runs(u, size)
  local o = function(extra) return with(u.opts, extra) end
  return {
    { "fixed", function(s) return chunk.fixed(s, o({ size = size,
      overlap = math.floor(size / 8) })) end, size,
      { ordered = true, covers = true } },
    { "recursive", function(s) return chunk.recursive(s, o({ size = size,
      overlap = math.floor(size / 5) })) end, size,
      { ordered = true, covers = true } },
    { "markdown", function(s) return chunk.markdown(s, o({ size = size })) end, size,
      { ordered = true, covers = true } },
    { "sentences", function(s) return chunk.sentences(s, o({ size = size, overlap = 1 })) end,
      size, { ordered = true, covers = true } },
    { "window", function(s) return chunk.window(s, o({ size = size, window = 2 })) end, size,
      { ordered = true, covers = true } },
    { "hierarchy", function(s) return chunk.hierarchy(s, o({ sizes = { size * 4, size } })) end,
      function(c) return c.meta.level == 1 and size * 4 or size end, {} },
    { "semantic", function(s)
        return chunk.semantic(s, o({ embed = cheap_embed, max_size = size, min_size = 2 }))
      end, size, { ordered = true, covers = true } },
  }
end

local hard = {
  cjk = "检索增强生成（RAG）是一种结合检索与生成的技术。它先检索，再生成！日本語のテキストを分割します。"
    .. "한국어 텍스트입니다. " .. string.rep("中文没有空格的长句子", 30) .. "。",
  emoji = "👩‍💻 👨‍👩‍👧‍👦 🧑🏽‍🚀 ❤️‍🔥 🇫🇷🇩🇪🇯🇵 " .. string.rep("🙂", 200) .. " end.",
  overlong = "Short. " .. string.rep("a", 3000) .. " " .. string.rep("é",
    700) .. " tail words here.",
  combining = string.rep("e\204\129", 400) .. " Zalgo: " .. string.rep("Z\205\145\205\160", 300),
  whitespace = "   \n\n\n  \t  a  \n\n\n\n   b   \227\128\128\227\128\128c\194\160\194\160  \n",
  crlf = "Line one.\r\nLine two.\r\n\r\nParagraph two has more words in it.\r\n",
  markdown = "# Title\n\nIntro text.\n\n## Part\n\n```lua\n# not a heading\nlocal x = 1\n```\n\n"
    .. "### Deep\n\nBody " .. string.rep("word ", 300) .. "\n\n# Next\n\nLast.",
}

-- Seeded generated texts over characters that stress the cut rules.
local function generated(n, seed)
  local pieces = { "a", "word", "Sentence.", " ", " ", "\n", "\n\n", "é", "检索", "。", "🙂", "👩‍💻",
    "\t", "e\204\129",
    "# ", "```", "Dr.", "3.14", string.rep("x", 40), "!", "?", "\227\128\128" }
  local out = {}
  for i = 1, n do
    local texts = {}
    local len = 1 + seed % 400
    for _ = 1, len do
      seed = (seed * 1103515245 + 12345) % 2147483648
      texts[#texts + 1] = pieces[1 + seed % #pieces]
    end
    out[i] = table.concat(texts)
  end
  return out
end

describe("rag.chunk invariants", function()
  for _, u in ipairs(units) do
    for _, size in ipairs({ 4, 16, 100 }) do
      for _, r in ipairs(runs(u, size)) do
        it(r[1] .. " by " .. u.name .. ", size " .. size .. ": hard fixtures and generated texts",
          function()
          for name, src in pairs(hard) do
            local ok, err = pcall(check, src, assert(r[2](src)), r[3], u.measure, r[4])
            assert(ok, name .. ": " .. tostring(err))
          end
          for i, src in ipairs(generated(60, size * 7 + #u.name)) do
            local ok, err = pcall(check, src, assert(r[2](src)), r[3], u.measure, r[4])
            assert(ok, "generated " .. i .. ": " .. tostring(err) .. "\n" .. ("%q"):format(src))
          end
        end)
      end
    end
  end

  -- SciFact documents as title, blank line, text; then the seeds (make quality)
  local function documents(every)
    local docs = {}
    for i, d in ipairs(helpers.scifact()) do
      if (i - 1) % every == 0 then
        docs[#docs + 1] = { name = "scifact:" .. d.id, text = d.title .. "\n\n" .. d.text }
      end
    end
    for _, f in ipairs(helpers.seeds()) do
      docs[#docs + 1] = { name = "seed:" .. f.name, text = f.text }
    end
    return docs
  end

  for _, u in ipairs(units) do
    -- over all of SciFact, exact BPE is the slow measure: every fifth document
    local every = (u.name == "cl100k" and helpers.data_dir()) and 5 or 1
    local size = u.name == "char" and 300 or 64
    for _, r in ipairs(runs(u, size)) do
      it(r[1] .. " by " .. u.name .. " holds on SciFact documents #data", function()
        local n = 0
        local docs = documents(every)
        for _, d in ipairs(docs) do
          local ok, err = pcall(check, d.text, assert(r[2](d.text)), r[3], u.measure, r[4])
          assert(ok, d.name .. ": " .. tostring(err))
          n = n + 1
        end
        assert.is_true(n >= 40 and n == #docs)
      end)
    end
  end
end)

describe("rag.chunk.recursive preset langchain", function()
  local fixture = json.decode(read("spec/fixtures/langchain/recursive.json"))

  it("reproduces " .. fixture.package .. " " .. fixture.version .. " chunk for chunk #data",
    function()
    -- the fixture covers SciFact's first 200 documents and the 5 seeds; the
    -- sample has the first 40, make quality all of them
    local texts = {}
    for _, d in ipairs(helpers.scifact()) do
      texts["scifact:" .. d.id] = d.title .. "\n\n" .. d.text
    end
    for _, f in ipairs(helpers.seeds()) do
      texts["seed:" .. f.name] = f.text
    end
    local configs, docs, bad = 0, 0, {}
    for _, d in ipairs(fixture.docs) do
      local text = texts[d.name]
      if text then
        docs = docs + 1
        assert.equal(d.sha256, rag.text.hash(text))
        for key, want in pairs(d.chunks) do
          local size, overlap = key:match("^(%d+)/(%d+)$")
          local got = chunk.recursive(text, { preset = "langchain", size = tonumber(size),
            overlap = tonumber(overlap) })
          configs = configs + 1
          local same = #got == #want
          for i = 1, #want do
            same = same and got[i].text == text:sub(want[i][1], want[i][2])
          end
          if not same then
            bad[#bad + 1] = d.name .. " " .. key
          end
        end
      end
    end
    assert.equal(205, #fixture.docs)
    assert.is_true(docs >= (helpers.data_dir() and 200 or 40), docs .. " documents checked")
    assert.equal(docs * 9, configs)
    assert.same({}, bad)
  end)

  it("measures in code points, as Python's len does", function()
    -- node: splitText("ééé ééé") with chunkSize 3 and a code-point length gives these
    local got = chunk.recursive("ééé ééé", { preset = "langchain", size = 3 })
    assert.same({ "ééé", "éé", "é" }, { got[1].text, got[2].text, got[3].text })
    assert.equal(3, got[1].tokens)
  end)

  it("splits a piece of exactly size further, as LangChain does", function()
    -- "abcd" (4 < 4 is false) and " efgh" are cut to characters and re-packed:
    -- node's splitText gives the same three chunks
    local got = chunk.recursive("abcd efgh", { preset = "langchain", size = 4 })
    assert.same({ "abcd", "efg", "h" }, { got[1].text, got[2].text, got[3].text })
  end)
end)

describe("rag.chunk.fixed", function()
  it("makes windows of exactly size code points that overlap by overlap", function()
    local src = string.rep("abcdé", 20) -- 100 code points
    local got = chunk.fixed(src, { unit = "char", size = 30, overlap = 10 })
    for i, c in ipairs(got) do
      if i < #got then
        assert.equal(30, c.tokens)
      end
      assert.equal(i == 1 and 0 or 10, c.overlap)
    end
    assert.equal(#src, got[#got].stop)
    assert.equal(5, #got) -- starts at 0, 20, 40, 60, 80 code points
  end)

  it("fills token windows up to size, never over: one more token would not fit", function()
    local src = sample_text(10)
    -- where the text's own tokens end (1-based byte offsets)
    local ends, pos = {}, 0
    for _, id in ipairs(cl100k:encode(src)) do
      pos = pos + #cl100k:decode({ id })
      ends[pos] = true
    end
    for _, size in ipairs({ 17, 50 }) do
      for _, overlap in ipairs({ 0, 5 }) do
        local got = chunk.fixed(src, { tokenizer = cl100k, size = size, overlap = overlap })
        for i, c in ipairs(got) do
          assert.equal(cl100k:count(c.text), c.tokens)
          assert.is_true(c.tokens <= size)
          if i < #got then
            local next_end = c.stop + 1
            while not ends[next_end] do
              next_end = next_end + 1
            end
            local longer = cl100k:count(src:sub(c.start, next_end))
            assert.is_true(longer > size, ("size %d chunk %d: %d tokens, with the next %d")
              :format(size, i, c.tokens, longer))
          end
          if i > 1 then -- it repeats the text's last `overlap` tokens of the chunk before
            local shared = 0
            for b = c.start, got[i - 1].stop do
              shared = shared + (ends[b] and 1 or 0)
            end
            assert.equal(overlap, shared, ("size %d chunk %d"):format(size, i))
          end
        end
      end
    end
  end)
end)

describe("rag.chunk.recursive", function()
  it("cuts paragraphs, then lines, then sentences, then words", function()
    local src = "First sentence here. Second sentence here.\n\nNext paragraph."
    local got = chunk.recursive(src, { unit = "char", size = 25 })
    assert.same({ "First sentence here.", "Second sentence here.", "Next paragraph." },
      { got[1].text, got[2].text, got[3].text })
  end)

  it("trims no-break spaces at chunk edges like other spaces", function()
    local got = chunk.recursive("alpha\194\160\n\n\194\160beta gamma", { unit = "char", size = 8 })
    assert.same({ { "alpha", 1, 5 }, { "beta", 12, 15 }, { "gamma", 17, 21 } },
      { { got[1].text, got[1].start, got[1].stop }, { got[2].text, got[2].start, got[2].stop },
        { got[3].text, got[3].start, got[3].stop } })
  end)

  it("cuts a word longer than size at code points", function()
    local src = string.rep("é", 25)
    local got = chunk.recursive(src, { unit = "char", size = 10 })
    assert.same({ 10, 10, 5 }, { got[1].tokens, got[2].tokens, got[3].tokens })
  end)

  it("takes custom separators, and keep_separator and trim", function()
    local src = "a;b;c;d"
    local got = chunk.recursive(src, { unit = "char", size = 3, separators = { ";" },
      keep_separator = false })
    assert.same({ "a;b", "c;d" }, { got[1].text, got[2].text })
    got = chunk.recursive(src, { unit = "char", size = 2, separators = { ";" },
      keep_separator = "end" })
    assert.same({ "a;", "b;", "c;", "d" }, { got[1].text, got[2].text, got[3].text, got[4].text })
    got = chunk.recursive(" a b ", { unit = "char", size = 2, separators = { " " }, trim = false })
    assert.equal(" a", got[1].text)
  end)

  it("keeps a text whose exact count fits as one chunk, though its pieces count more", function()
    -- cl100k: "Hello there.\n\nGeneral Kenobi." is 7 tokens whole (".\n\n" is
    -- one), but its paragraphs "Hello there." and "\n\nGeneral Kenobi." are
    -- 3 and 5: packed by that sum they would not fit 7 together
    local tok = rag.tokenizer.get("cl100k_base")
    local src = "Hello there.\n\nGeneral Kenobi."
    assert.same({ 7, 3, 5 }, { tok:count(src), tok:count("Hello there."),
      tok:count("\n\nGeneral Kenobi.") })
    local got = chunk.recursive(src, { size = 7, tokenizer = tok })
    assert.equal(1, #got)
    assert.same({ src, 7 }, { got[1].text, got[1].tokens })
    got = chunk.hierarchy(src, { sizes = { 100, 7 }, tokenizer = tok })
    assert.same({ 1, 2 }, { got[1].meta.level, got[2].meta.level })
    assert.same({ src, 7 }, { got[2].text, got[2].tokens })
    got = chunk.recursive(src, { size = 6, tokenizer = tok })
    assert.same({ "Hello there.", "General Kenobi." }, { got[1].text, got[2].text })
    got = chunk.recursive(" " .. src .. "\n", { size = 7, tokenizer = tok }) -- counted trimmed
    assert.same({ src, 7 }, { got[1].text, got[1].tokens })
  end)

  it("returns no chunks for empty or blank text", function()
    assert.same({}, chunk.recursive("", {}))
    assert.same({}, chunk.recursive(" \n\n\t ", { unit = "char", size = 4 }))
    assert.same({}, chunk.fixed("", {}))
  end)
end)

describe("rag.chunk.markdown", function()
  it("gives each section its heading path; a # in fenced code is no heading", function()
    local got = chunk.markdown(hard.markdown, { unit = "char", size = 200 })
    local paths = {}
    for _, c in ipairs(got) do
      paths[#paths + 1] = table.concat(c.meta.headings, " > ")
    end
    assert.equal("Title", paths[1])
    assert.equal("Title > Part", paths[2])
    assert.truthy(got[2].text:find("# not a heading", 1, true))
    assert.equal("Title > Part > Deep", paths[3])
    assert.equal("Title > Part > Deep", paths[4]) -- the long section, split further
    assert.equal("Next", paths[#paths])
  end)

  it("gives text before the first heading an empty path", function()
    local got = chunk.markdown("Preface.\n\n# One\n\nBody.", { unit = "char", size = 100 })
    assert.same({}, got[1].meta.headings)
    assert.same({ "One" }, got[2].meta.headings)
  end)
end)

describe("rag.chunk.sentences", function()
  it("packs whole sentences and repeats overlap sentences", function()
    local src = "Aa bb. Cc dd. Ee ff. Gg hh. Ii jj."
    local function texts(got)
      local t = {}
      for i, c in ipairs(got) do
        t[i] = c.text
      end
      return t
    end
    local got = chunk.sentences(src, { unit = "char", size = 13, overlap = 1 })
    assert.same({ "Aa bb. Cc dd.", "Cc dd. Ee ff.", "Ee ff. Gg hh.", "Gg hh. Ii jj." }, texts(got))
    assert.same({ 0, 6, 6, 6 }, { got[1].overlap, got[2].overlap, got[3].overlap, got[4].overlap })
    got = chunk.sentences(src, { unit = "char", size = 20, overlap = 0 })
    assert.same({ "Aa bb. Cc dd. Ee ff.", "Gg hh. Ii jj." }, texts(got))
    -- with no room for the overlap sentence and a new one, the overlap shrinks
    got = chunk.sentences(src, { unit = "char", size = 12, overlap = 1 })
    assert.same({ "Aa bb.", "Cc dd.", "Ee ff.", "Gg hh.", "Ii jj." }, texts(got))
  end)
end)

describe("rag.chunk.window", function()
  it("makes one chunk per sentence with the sentences around it as meta.window", function()
    local src = "A one. B two. C three. D four. E five."
    local got = chunk.window(src, { unit = "char", window = 1 })
    assert.equal(5, #got)
    assert.equal("C three.", got[3].text)
    local w = got[3].meta.window
    assert.equal("B two. C three. D four.", src:sub(w.start, w.stop))
    assert.equal("A one. B two.", src:sub(got[1].meta.window.start, got[1].meta.window.stop))
  end)
end)

describe("rag.chunk.hierarchy", function()
  it("nests each level inside its parent", function()
    local src = sample_text(40)
    local got = chunk.hierarchy(src, {})
    local levels = {}
    for _, c in ipairs(got) do
      levels[c.meta.level] = (levels[c.meta.level] or 0) + 1
      local limit = ({ 2048, 512, 128 })[c.meta.level]
      assert.is_true(c.tokens <= limit)
      if c.meta.level > 1 then
        local p = got[c.meta.parent]
        assert.equal(c.meta.level - 1, p.meta.level)
        assert.is_true(c.start >= p.start and c.stop <= p.stop)
        assert.is_true(c.meta.parent < c.index)
      else
        assert.is_nil(c.meta.parent)
      end
    end
    assert.is_true(levels[1] >= 2 and levels[2] > levels[1] and levels[3] > levels[2])
  end)
end)

describe("rag.chunk errors", function()
  it("returns nil, msg, 'encoding' for invalid UTF-8", function()
    for _, name in ipairs({ "fixed", "recursive", "markdown", "sentences", "window",
      "hierarchy" }) do
      local r, msg, code = chunk[name]("ok \255 bad", {})
      assert.is_nil(r)
      assert.equal("encoding", code)
      assert.equal("rag.chunk." .. name .. ": invalid utf-8 at byte 4", msg)
    end
  end)

  it("raises on misuse", function()
    local cases = {
      { "fixed", { size = 0, unit = "char" }, "option 'size' must be an integer >= 1" },
      { "fixed", { size = 3 }, "option 'size' must be an integer >= 4" },
      { "fixed", { size = 1.5 }, "option 'size' must be an integer" },
      { "fixed", { size = 10, overlap = 10 }, "option 'overlap' must be less than 'size'" },
      { "fixed", { bogus = 1 }, "unknown option 'bogus'" },
      { "fixed", { unit = "word" }, "option 'unit' must be \"token\" or \"char\"" },
      { "fixed", { tokenizer = {} }, "option 'tokenizer' must be a rag.tokenizer" },
      { "fixed", { unit = "char", tokenizer = cl100k }, "option 'tokenizer' needs unit \"token\"" },
      { "recursive", { separators = "x" }, "option 'separators' must be a table, got string" },
      { "recursive", { separators = { 1 } }, "separators[1] must be a string" },
      { "recursive", { keep_separator = "middle" }, "option 'keep_separator' must be" },
      { "recursive", { preset = "llamaindex" }, "option 'preset' must be \"langchain\"" },
      { "hierarchy", { sizes = { 100, 200 } },
        "sizes[2] must be an integer >= 4 and at most the size before it" },
      { "hierarchy", { size = 100 }, "unknown option 'size'" },
      { "window", { window = -1 }, "option 'window' must be an integer >= 0" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(chunk[c[1]], "some text", c[2])
      assert.is_false(ok, c[3])
      assert.truthy(tostring(err):find("rag.chunk." .. c[1] .. ": " .. c[3], 1, true),
        tostring(err))
    end
    assert.has_error(function() chunk.fixed(nil, {}) end,
      "rag.chunk.fixed: text must be a string, got nil")
  end)

  it("raises on a closed tokenizer", function()
    local tok = rag.tokenizer.load(rag.tokenizer.vocab_dir() .. "/cl100k_base.tiktoken",
      "cl100k_base")
    tok:close()
    assert.has_error(function() chunk.fixed("text", { tokenizer = tok }) end,
      "rag.chunk.fixed: tokenizer is closed")
  end)
end)

describe("rag.chunk allocation failures", function()
  if not require("rag.core")._fail_alloc then
    it("needs a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  it("every chunker raises and recovers at every fault point", function()
    local src = hard.markdown .. "\n\n" .. hard.cjk .. "\n\n" .. hard.overlong
    local embed = function(list)
      local v = {}
      for i, s in ipairs(list) do
        v[i] = { #s % 7 + 1, nchars(s) % 5 + 1, i % 3 }
      end
      return v
    end
    local calls = {
      function() return chunk.fixed(src, { tokenizer = cl100k, size = 40, overlap = 8 }) end,
      function() return chunk.fixed(src, { size = 40 }) end,
      function() return chunk.recursive(src, { size = 30, overlap = 5 }) end,
      function() return chunk.recursive(src, { preset = "langchain", size = 100,
        separators = { "\n", "" } }) end,
      function() return chunk.markdown(src, { unit = "char", size = 80 }) end,
      function() return chunk.sentences(src, { size = 30, overlap = 1 }) end,
      function() return chunk.window(src, { size = 30 }) end,
      function() return chunk.hierarchy(src, { sizes = { 200, 50, 10 } }) end,
      function() return chunk.semantic(src, { embed = embed, max_size = 40, min_size = 5 }) end,
    }
    for i, call in ipairs(calls) do
      local expected = call()
      local points = helpers.oom_walk(call)
      assert.is_true(points >= 3, "call " .. i .. ": fault points " .. points)
      assert.same(expected, call())
    end
  end)
end)
