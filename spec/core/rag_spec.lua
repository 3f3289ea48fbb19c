-- The facade, rag.text.hash, properties of the build itself, and the examples.
local rag = require("rag")
local helpers = require("spec.helpers")

local read = helpers.read

local function lines(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  local ok, _, code = p:close()
  return out, ok, code
end

describe("rag facade", function()
  it("exposes the C pieces and a version", function()
    assert.equal("string", type(rag._VERSION))
    assert.truthy(rag._VERSION:match("^%d+%.%d+%.%d+$"))
    assert.equal(rag.core.version, rag._VERSION)
    assert.equal(rag.core.json, rag.json)
    assert.equal(rag.core.http, rag.http)
    assert.equal("function", type(rag.text.hash))
    assert.equal(package.loaded["rag.core"], rag.core)
  end)
end)

describe("rag.text.hash", function()
  -- FIPS 180-4 test vectors.
  local cases = {
    { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
    { "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
    { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
    { string.rep("a", 1000000),
      "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0" },
  }
  for i, c in ipairs(cases) do
    it("matches test vector " .. i, function()
      assert.equal(c[2], rag.text.hash(c[1]))
    end)
  end

  it("hashes bytes, embedded NULs included", function()
    assert.are_not.equal(rag.text.hash("a\0b"), rag.text.hash("a"))
    assert.equal(64, #rag.text.hash("a\0b"))
  end)

  it("raises on a non-string", function()
    assert.has_error(function() rag.text.hash({}) end,
      "bad argument #1 to 'hash' (string expected, got table)")
    assert.has_error(function() rag.text.hash() end,
      "bad argument #1 to 'hash' (string expected, got no value)")
  end)
end)

describe("the build", function()
  it("lists every src/*.c in the rockspec", function()
    local spec = read("rockspec/rag-scm-1.rockspec")
    local listed = {}
    for f in spec:gmatch('"(src/[%w_]+%.c)"') do
      listed[f] = true
    end
    local out = lines("ls src/*.c")
    local n = 0
    for f in out:gmatch("[^\n]+") do
      n = n + 1
      assert.is_true(listed[f] == true, f .. " missing from the rockspec")
      listed[f] = nil
    end
    assert.is_true(n > 0)
    assert.is_nil(next(listed), "rockspec lists a file that does not exist")
  end)

  it("lists every lua/rag module in the rockspec", function()
    local spec = read("rockspec/rag-scm-1.rockspec")
    local out = lines("cd lua && find rag -name '*.lua' | sort")
    for f in out:gmatch("[^\n]+") do
      local mod = f:gsub("/init%.lua$", ""):gsub("%.lua$", ""):gsub("/", ".")
      assert.truthy(spec:find('["' .. mod .. '"] = "lua/' .. f .. '"', 1, true),
        mod .. " missing from the rockspec")
    end
  end)

  it("keeps the core free of lua.h", function()
    local out = lines("grep -lE '#include [<\"](lua|lauxlib|lualib)' src/rag*.c src/rag*.h")
    assert.equal("", out)
  end)

  it("exports luaopen_rag_core and nothing else", function()
    local so = package.searchpath("rag.core", package.cpath)
    local out = lines("nm -D --defined-only '" .. so .. "'")
    local funcs = {}
    for kind, name in out:gmatch("%x+ (%a) ([%w_]+)") do
      if kind == "T" then
        funcs[#funcs + 1] = name
      end
    end
    assert.are.same({ "luaopen_rag_core" }, funcs)
  end)
end)

describe("examples", function()
  local run_lua = helpers.lua_command()

  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end

  it("runs examples/02_text_tokens.lua offline", function()
    local out = lines(run_lua .. " examples/02_text_tokens.lua 2>&1; echo \"exit=$?\"")
    assert.truthy(out:find("tokens: cl100k_base 64, o200k_base 56", 1, true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/03_chunk.lua offline", function()
    local out = lines(run_lua .. " examples/03_chunk.lua 2>&1; echo \"exit=$?\"")
    assert.truthy(out:find("recursive, 40 cl100k tokens, overlap 8: 4 chunks", 1, true), out)
    -- the sentence chunker's sizes are in its unit, characters
    local sentences = assert(out:match("\nsentences, 80 characters: %d+ chunks\n(.-)\n%a"))
    assert.truthy(sentences:find("^  +%d+%-%d+ +%d+ chars, "), sentences)
    assert.falsy(sentences:find(" tokens,", 1, true), sentences)
    assert.truthy(out:find("invalid UTF-8: rag.chunk.fixed: invalid utf-8 at byte 5 (encoding)", 1,
      true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/05_vectors.lua offline", function()
    local out = lines(run_lua .. " examples/05_vectors.lua 2>&1; echo \"exit=$?\"")
    assert.truthy(out:find("2000 vectors in each index", 1, true), out)
    assert.truthy(out:find("  1. exact doc997   0.9834   hnsw doc997   0.9834", 1, true), out)
    assert.truthy(out:find("after removing half: 1000 live, 1000 tombstones", 1, true), out)
    assert.truthy(out:find("loaded 1000 vectors; same top hit: true", 1, true), out)
    assert.truthy(out:find("a missing file: nil rag.hnsw.load: '/nonexistent/vectors.hnsw': ", 1,
      true), out)
    assert.truthy(out:find("a NaN component:\trag.hnsw.add: component 5 is NaN", 1, true),
      out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/06_fuse_pack.lua offline", function()
    local out = lines(run_lua .. " examples/06_fuse_pack.lua 2>&1; echo \"exit=$?\"")
    assert.truthy(out:find("1. rrf   0.03279", 1, true), out)
    assert.truthy(out:find("lost-in-the-middle order: rrf, litm, hnsw, bm25", 1, true), out)
    assert.truthy(out:find("packed 4 of 4 notes in 110 tokens:\n[1] notes/rrf.md\n", 1, true),
      out)
    assert.truthy(out:find("[2] -> litm (notes/litm.md)\n[3] -> hnsw (notes/hnsw.md)\n"
      .. "[4] -> bm25 (notes/bm25.md)", 1, true), out)
    assert.truthy(out:find("ndcg@10 1.0000  mrr 1.0000", 1, true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/11_eval.lua offline", function()
    local out = lines(run_lua .. " examples/11_eval.lua 2>&1; echo \"exit=$?\"")
    assert.truthy(out:find("ndcg@3  bm25 0.667  vector 0.833  diff +0.167  p 0.500  (n 6)", 1,
      true), out)
    assert.truthy(out:find("faithfulness      0.750 over 2 samples", 1, true), out)
    assert.truthy(out:find("no llm: faithfulness needs an llm", 1, true), out)
    assert.truthy(out:find("unfaithful: faithfulness 0.75 low", 1, true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/07_embed.lua offline", function()
    local out = lines("env -u OPENAI_API_KEY " .. run_lua .. " examples/07_embed.lua 2>&1; "
      .. "echo \"exit=$?\"")
    assert.truthy(out:find('hashing: "approximate nearest neighbour graph" -> hnsw', 1, true),
      out)
    assert.truthy(out:find("embedded 4 texts of 512 dims in 2 requests", 1, true), out)
    assert.truthy(out:find("again with one new text: 1 request, 2 from the cache", 1, true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/09_pipelines.lua offline", function()
    local out = lines(run_lua .. " examples/09_pipelines.lua 2>&1; echo \"exit=$?\"")
    for _, name in ipairs({ "naive   ", "hybrid  ", "fusion  ", "hyde    ", "stepback" }) do
      assert.truthy(out:find(name .. " Reciprocal rank fusion sums 1 / (k + rank) over ranked "
        .. "lists. [1] The constant k is usually 60, so that no single list dominates. [1]\n"
        .. "         [1] rrf (notes/rrf.md, bytes 1-125)\n", 1, true), out)
    end
    assert.truthy(out:find("steps: expand > retrieve > fuse > pack > answer; llm calls 2", 1,
      true), out)
    assert.truthy(out:find("follow-up, retrieved for: What does its parameter k1 control? (How "
      .. "does BM25 rank documents?)\n  The parameter k1 controls term-frequency saturation. [1]",
      1, true), out)
    assert.truthy(out:find("with llm_calls = 1: nil, rag.pipeline.fusion: llm call limit reached "
      .. "(1 call) (budget); 2 contexts packed", 1, true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/10_pipelines_more.lua offline", function()
    local out = lines(run_lua .. " examples/10_pipelines_more.lua 2>&1; echo \"exit=$?\"")
    assert.truthy(out:find("window     The parameter k1 controls term-frequency saturation. [1]\n"
      .. "           [1] bm25#2 (notes/bm25.md, bytes 95-193)\n", 1, true), out)
    assert.truthy(out:find("           branches: hops > carry; llm calls 3\n", 1, true), out)
    assert.truthy(out:find("adaptive   I don't have enough information to answer this.\n"
      .. "           branches: none; llm calls 1\n           path: none\n", 1, true), out)
    assert.truthy(out:find("branches: single; llm calls 1\n           path: single\n", 1, true),
      out)
    assert.truthy(out:find("branches: iterative > one_hop; llm calls 2\n           path: "
      .. "iterative\n", 1, true), out)
    assert.truthy(out:find("corrective Maximal marginal relevance picks passages that are "
      .. "relevant and unlike those already picked. [1]\n           [1] web-mmr#1 "
      .. "(https://example.org/mmr, bytes 1-92)\n           branches: graded > fallback; llm "
      .. "calls 1\n", 1, true), out)
    assert.truthy(out:find("branches: vectors > sentences; llm calls 1\n           route: "
      .. "vectors\n", 1, true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/08_index.lua offline", function()
    local out = lines(run_lua .. " examples/08_index.lua 2>&1; echo \"exit=$?\"")
    assert.truthy(out:find("added 4, updated 0, unchanged 0: 4 documents, 4 chunks", 1, true), out)
    assert.truthy(out:find("hybrid: 'ranking documents'\n  1. rrf#1    0.0328", 1, true), out)
    assert.truthy(out:find("filtered to tags 'vectors', since 2000:\n  1. rrf#1 ", 1, true), out)
    assert.truthy(out:find("again: unchanged\nedited: updated\nold words gone: 0", 1, true), out)
    assert.truthy(out:find("reopened: 3 documents, generation 1, mapped true; top hit hnsw#1", 1,
      true), out)
    assert.truthy(out:find("read-only add: index is read-only", 1, true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/12_enrich.lua offline", function()
    local out = lines(run_lua .. " examples/12_enrich.lua 2>&1; echo \"exit=$?\"")
    assert.truthy(out:find("limited run: nil (budget); 2 calls\n  rag.index.add_many: llm call "
      .. "limit reached (2 calls)\nnext run: added 3, 6 chunks, 2 more calls\nagain: 3 "
      .. "unchanged, 0 calls\n", 1, true), out)
    assert.truthy(out:find("1. notes-falcon#1   bm25=1 keywords=1\n", 1, true), out)
    assert.truthy(out:find("1. notes-falcon#1   vector=2 questions=1\n", 1, true), out)
    assert.truthy(out:find("summary node notes-heron#summary: These release notes cover the "
      .. "Heron router.", 1, true), out)
    assert.truthy(out:find("[1] notes-osprey\n", 1, true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)

  it("runs examples/04_bm25.lua offline", function()
    local out = lines(run_lua .. " examples/04_bm25.lua 2>&1; echo \"exit=$?\"")
    assert.truthy(out:find("search 'ranking documents with BM25':\n  1. bm25 ", 1, true), out)
    assert.truthy(out:find("removed hnsw:\ttrue\tagain:\tfalse", 1, true), out)
    assert.truthy(out:find("loaded: 4 docs", 1, true), out)
    assert.truthy(out:find("missing file: rag.bm25.load: '/nonexistent/notes.bm25': ", 1, true),
      out)
    assert.truthy(out:find("invalid UTF-8: rag.bm25.add: invalid utf-8 at byte 4 (encoding)", 1,
      true), out)
    assert.truthy(out:find("exit=0\n", 1, true), out)
  end)
end)
