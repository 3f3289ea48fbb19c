-- The bad-input catalogue (docs/reliability.md): for each kind of bad input
-- a user can hand the library, the error the error rule calls for. Misuse
-- raises a message naming the operation; a failure of the world returns
-- nil, that message and its code. Afterwards the object is as it was and
-- still works. Each row names the catalogue's entry.
local rag = require("rag")
local helpers = require("spec.helpers")

local cl100k = rag.tokenizer.get("cl100k_base")

-- nil, msg, code from f(...), msg exactly `want`
local function fails(code, want, f, ...)
  local v, msg, c = f(...)
  assert.is_nil(v)
  assert.equal(want, msg)
  assert.equal(code, c)
end

describe("the bad-input catalogue", function()
  it("1: invalid UTF-8 is refused with its byte, or repaired where asked", function()
    local bad = "a\192\175b" -- an overlong '/'
    local at = "invalid utf-8 at byte 2"
    fails("encoding", "rag.text.tokenize: " .. at, rag.text.tokenize, bad)
    fails("encoding", "rag.text.sentences: " .. at, rag.text.sentences, bad)
    fails("encoding", "rag.chunk.recursive: " .. at, rag.chunk.recursive, bad, {})
    fails("encoding", "rag.tokenizer.count: " .. at, cl100k.count, cl100k, bad)
    fails("encoding", "rag.text.normalize: " .. at, rag.text.normalize, bad, { invalid = "error" })
    assert.equal("a\239\191\189\239\191\189b", rag.text.normalize(bad)) -- U+FFFD each
    local idx = rag.index.new({ embedder = false })
    local v, msg, code = idx:add({ id = "d", text = "fine " .. bad })
    assert.is_nil(v)
    assert.equal("encoding", code)
    assert.truthy(msg:find("^rag%.index%.add: document 'd'"), msg)
    assert.equal(0, idx:count())
  end)

  it("2: NUL bytes are ordinary bytes", function()
    local b = rag.bm25.new()
    b:add("x", "tides\0moon")
    assert.equal("x", b:search("moon", 1)[1].id)
    local idx = rag.index.new({ embedder = false })
    idx:add({ id = "n", text = "a\0b tide" })
    assert.equal("a\0b tide", idx:get("n").text)
  end)

  it("3: a 10 MB word is one term, in linear time", function()
    local b = rag.bm25.new()
    b:add("x", ("w"):rep(10 * 1024 * 1024) .. " tide")
    assert.equal(1, #b)
    assert.equal("x", b:search("tide", 1)[1].id)
  end)

  it("4: empty documents and queries are accepted", function()
    local b = rag.bm25.new()
    b:add("e", "")
    b:add("f", "   ")
    assert.same({}, b:search("", 5))
    assert.same({}, b:search("tide", 5))
    local idx = rag.index.new({ embedder = false })
    assert.equal("added", idx:add({ id = "e", text = "" }))
    assert.same({}, idx:search("", {}))
  end)

  it("6-8: zero, non-finite and mis-sized vectors raise and change nothing", function()
    local v = rag.vec.new({ dim = 2 })
    v:add("a", { 1, 0 })
    local cases = {
      { { 0, 0 }, "rag.vec.add: zero vector under cosine" },
      { { 0 / 0, 1 }, "rag.vec.add: component 1 is NaN" },
      { { 1, math.huge }, "rag.vec.add: component 2 is infinite" },
      { { 1, 2, 3 }, "rag.vec.add: vector has 3 components, the index has dim 2" },
    }
    for _, c in ipairs(cases) do
      assert.has_error(function() v:add("b", c[1]) end, c[2])
      assert.equal(1, #v)
    end
    assert.has_error(function() v:search({ 0 / 0, 1 }, 1) end,
      "rag.vec.search: component 1 is NaN")
    assert.has_error(function() v:search({ 1, 2, 3 }, 1) end,
      "rag.vec.search: vector has 3 components, the index has dim 2")
    assert.is_true(rag.vec.new({ dim = 2, metric = "l2" }):add("z", { 0, 0 }))
    assert.equal("a", v:search({ 1, 0 }, 1)[1].id)
  end)

  it("9-10: a repeated id replaces; removing what is not there is false", function()
    local v = rag.vec.new({ dim = 2 })
    v:add("a", { 1, 0 })
    v:add("a", { 0, 1 })
    assert.equal(1, #v)
    assert.same({ 0, 1 }, v:get("a"))
    assert.is_false(v:remove("zz"))
    local b = rag.bm25.new()
    b:add("a", "x")
    assert.is_true(b:remove("a"))
    assert.is_false(b:remove("a"))
  end)

  it("11: k past the count gives what there is; k not a positive integer raises", function()
    local v = rag.vec.new({ dim = 2 })
    v:add("a", { 1, 0 })
    assert.equal(1, #v:search({ 1, 0 }, 10))
    for _, k in ipairs({ 0, -1, 1.5, 0 / 0 }) do
      assert.has_error(function() v:search({ 1, 0 }, k) end,
        "rag.vec.search: k must be a positive integer")
    end
  end)

  it("12: a budget must be an integer >= 0; 0 or too small packs nothing", function()
    local items = { { id = "a", text = "hello world, a passage of several tokens" } }
    for _, budget in ipairs({ -1, 0 / 0, 1.5 }) do
      assert.has_error(function() rag.pack(items, { budget = budget, tokenizer = cl100k }) end,
        "rag.pack: option 'budget' must be an integer >= 0")
    end
    local r = rag.pack(items, { budget = 0, tokenizer = cl100k })
    assert.same({ "", 0, 0, 1 }, { r.text, r.tokens, #r.used, #r.dropped })
    r = rag.pack(items, { budget = 2, tokenizer = cl100k })
    assert.same({ 0, 1 }, { #r.used, #r.dropped })
  end)

  it("13-14: sizes and graph parameters out of range raise", function()
    assert.has_error(function() rag.chunk.recursive("abc", { size = 0 }) end,
      "rag.chunk.recursive: option 'size' must be an integer >= 4")
    assert.has_error(function() rag.chunk.recursive("abc", { size = 4, overlap = 4 }) end,
      "rag.chunk.recursive: option 'overlap' must be less than 'size'")
    assert.has_error(function() rag.hnsw.new({ dim = 2, M = 1e9 }) end,
      "rag.hnsw.new: option 'M' must be an integer in [2, 256]")
    assert.has_error(function() rag.hnsw.new({ dim = 2, ef_search = 1e12 }) end,
      "rag.hnsw.new: option 'ef_search' must be an integer in [1, 100000]")
  end)

  it("15-16: unreadable, empty and unwritable index files fail with io or format", function()
    local dir = helpers.tmpname()
    assert(os.execute("mkdir -p '" .. dir .. "'"))
    fails("io", "rag.bm25.load: '" .. dir .. "': is a directory", rag.bm25.load, dir)
    fails("io", "rag.bm25.load: '" .. dir .. "/none': no such file or directory", rag.bm25.load,
      dir .. "/none")
    helpers.write(dir .. "/empty", "")
    fails("format", "rag.bm25.load: '" .. dir .. "/empty': not a bm25 index (bad magic)",
      rag.bm25.load, dir .. "/empty")
    local b = rag.bm25.new()
    b:add("a", "x")
    fails("io", "rag.bm25.save: '" .. dir .. "/no/x.rag': no such file or directory", b.save, b,
      dir .. "/no/x.rag")
    assert.equal(1, #b)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("18: JSON nested past 1,000 levels is refused as such", function()
    fails("decode", "rag.json.decode: nesting deeper than 1000 at byte 1001", rag.json.decode,
      ("["):rep(100000))
    assert.is_table(rag.json.decode(("["):rep(1000) .. ("]"):rep(1000)))
    fails("decode", "rag.json.decode: invalid json at byte 4", rag.json.decode, "[1,]")
  end)

  it("22: a closed object raises when used", function()
    local b = rag.bm25.new()
    b:close()
    assert.has_error(function() b:search("x", 1) end, "rag.bm25.search: index is closed")
    local idx = rag.index.new({ embedder = false })
    idx:close()
    assert.has_error(function() idx:search("x") end, "rag.index.search: index is closed")
    idx:close() -- closing again is a no-op
  end)
end)
