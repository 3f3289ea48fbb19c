-- bin/rag and rag.cli: each command's output, and the exit status rule:
-- 0 ok, 1 the world failed, 2 usage, every error one line on standard error.
local rag = require("rag")
local helpers = require("spec.helpers")

local read = helpers.read

describe("bin/rag", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  local lua = helpers.lua_command()

  -- stdout, stderr and the exit status of `rag ARGS`, with optional input
  local function rag_cmd(args, input)
    local cmd = lua .. " bin/rag " .. args
    if input then
      cmd = "printf '" .. input .. "' | " .. cmd -- input is a printf format
    elseif not args:find("<", 1, true) then
      cmd = cmd .. " < /dev/null"
    end
    return helpers.spawn(cmd)
  end

  it("prints usage for --help and exits 0", function()
    for _, a in ipairs({ "--help", "-h", "help" }) do
      local out, err, status = rag_cmd(a)
      assert.truthy(out:match("^usage: rag"), a)
      assert.truthy(out:find("Exit status: 0 ok, 1 a failure", 1, true), a)
      assert.equal("", err)
      assert.equal(0, status, a)
    end
    local out, err, status = rag_cmd("tokens --help")
    assert.equal("usage: rag tokens [-e ENC] [FILE]\n", out)
    assert.equal("", err)
    assert.equal(0, status)
  end)

  it("prints the manual with each command's part indented as a whole", function()
    local out, _, status = rag_cmd("help")
    assert.equal(0, status)
    local manual = out:match("RAG%(1%)\n(.*)$")
    assert.truthy(manual)
    assert.falsy(manual:find("\n[ \t]+\n"), "a line of only spaces")
    for _, name in ipairs({ "index", "search", "ask", "eval", "serve", "info", "chunk" }) do
      local own = rag_cmd("help " .. name) -- the part alone: text at 2 spaces
      assert.truthy(own:find("\n\n  %u"), name)
      local want = own:gsub("[^\n]+", "  %0") -- in the manual: every line 2 more
      assert.truthy(manual:find(want, 1, true), name)
    end
  end)

  it("prints the version", function()
    local out, _, status = rag_cmd("version")
    assert.equal("rag " .. rag._VERSION .. " (" .. _VERSION .. ")\n", out)
    assert.equal(0, status)
  end)

  it("hashes and canonicalises JSON from standard input", function()
    assert.equal(rag.text.hash("") .. "\n", (rag_cmd("hash")))
    assert.equal(rag.text.hash("abc") .. "\n", (rag_cmd("hash", "abc")))
    assert.equal(rag.text.hash("abc") .. "\n", (rag_cmd("hash -", "abc")))
    assert.equal('{"a":[true,null],"b":1}\n', (rag_cmd("json", '{"b": 1, "a": [true, null]}')))
  end)

  it("counts tokens and splits sentences", function()
    assert.equal("2\n", (rag_cmd("tokens", "hello world")))
    assert.equal("2\n", (rag_cmd("tokens -e o200k_base", "hello world")))
    assert.equal("2\n", (rag_cmd("tokens --encoding approx", "hello world")))
    assert.equal("2\n", (rag_cmd("tokens --encoding=approx", "hello world")))
    local out, _, status = rag_cmd("tokens spec/fixtures/httpd.py")
    assert.equal(0, status)
    local want = rag.tokenizer.get("cl100k_base"):count(read("spec/fixtures/httpd.py"))
    assert.equal(want .. "\n", out)
    assert.equal(want .. "\n", (rag_cmd("tokens -- spec/fixtures/httpd.py")))
    out = rag_cmd("sentences", "Dr. Who came. He left.\\n\\n你好。")
    assert.equal("1\t13\tDr. Who came.\n15\t22\tHe left.\n25\t33\t你好。\n", out)
  end)

  -- misuse: exit 2, nothing on standard output, one line on standard error
  local misuse = {
    { "", "rag: no command (try 'rag --help')" },
    { "frobnicate", "rag: unknown command 'frobnicate' (try 'rag --help')" },
    { "--bogus", "rag: unknown option '--bogus' (try 'rag --help')" },
    { "tokens -x", "rag tokens: unknown option '-x' (usage: rag tokens [-e ENC] [FILE])" },
    { "tokens --frob", "rag tokens: unknown option '--frob' (usage: rag tokens [-e ENC] [FILE])" },
    { "tokens -e", "rag tokens: option '-e' needs a value (usage: rag tokens [-e ENC] [FILE])" },
    { "tokens -e nope", "rag tokens: unknown encoding 'nope', expected cl100k_base, o200k_base"
      .. " or approx (usage: rag tokens [-e ENC] [FILE])" },
    { "tokens a b", "rag tokens: unexpected argument 'b' (usage: rag tokens [-e ENC] [FILE])" },
    { "hash a b", "rag hash: unexpected argument 'b' (usage: rag hash [FILE])" },
    { "hash -x", "rag hash: unknown option '-x' (usage: rag hash [FILE])" },
    { "json a b", "rag json: unexpected argument 'b' (usage: rag json [FILE])" },
    { "sentences -e x", "rag sentences: unknown option '-e' (usage: rag sentences [FILE])" },
    { "version now", "rag version: unexpected argument 'now' (usage: rag version)" },
    { "help me", "rag help: unknown command 'me' (try 'rag help')" },
  }
  for _, case in ipairs(misuse) do
    it("exits 2 with one line for 'rag " .. case[1] .. "'", function()
      local out, err, status = rag_cmd(case[1])
      assert.equal("", out)
      assert.equal(case[2] .. "\n", err)
      assert.equal(2, status)
    end)
  end

  -- failures of the world: exit 1, one line naming the command and the cause
  local failures = {
    { "hash /nonexistent/file", nil, "rag hash: '/nonexistent/file': no such file or directory" },
    { "tokens spec", nil, "rag tokens: 'spec': is a directory" },
    { "json", "[1,", "rag json: rag.json.decode: " },
    { "tokens", "\\377", "rag tokens: rag.tokenizer.count: invalid utf-8" },
    { "sentences", "\\377", "rag sentences: rag.text.sentences: invalid utf-8" },
  }
  for _, case in ipairs(failures) do
    it("exits 1 with one line for 'rag " .. case[1] .. "' when the input is bad", function()
      local out, err, status = rag_cmd(case[1], case[2])
      assert.equal("", out)
      assert.equal(1, status)
      assert.truthy(err:find(case[3], 1, true), err)
      assert.truthy(err:match("^[^\n]*\n$"), err)
    end)
  end
end)

describe("rag.cli.main", function()
  it("raises on a bad argument", function()
    assert.has_error(function() require("rag.cli").main("version") end,
      "rag.cli.main: args must be a table, got string")
  end)
end)

describe("rag.cli.prepare, save and ask", function()
  local cli = require("rag.cli")
  local fs = rag.core.fs

  local function rmdir(dir)
    for _, name in ipairs(fs.list(dir) or {}) do
      os.remove(dir .. "/" .. name)
    end
    os.remove(dir)
  end

  it("prepares the documents rag index loads, and saves with its settings", function()
    local idx, docs, failed = cli.prepare({ "spec/fixtures/texts" })
    assert.are.same({}, failed)
    -- README.md and the 40 rows of scifact40.jsonl, ids as `rag index` gives them
    assert.are.equal(41, #docs)
    local ids = {}
    for i, d in ipairs(docs) do
      ids[i] = d.id
    end
    table.sort(ids)
    assert.are.equal("spec/fixtures/texts/README.md", ids[1])
    assert.truthy(ids[2]:find("^spec/fixtures/texts/scifact40%.jsonl#"))
    assert.are.equal(0, idx:count())
    local step = idx:add_many(docs, { budget_ms = 2 })
    local done, counts
    repeat
      done, counts = step()
      assert.is_not_nil(done, counts)
    until done
    assert.are.equal(41, counts.added)
    local dir = helpers.tmpname()
    assert.is_true(cli.save(idx, dir))
    assert.are.same({ chunk_size = 512, embedder = "hashing", overlap = 64 },
      rag.json.decode(read(dir .. "/rag.json")))
    local opened = assert(rag.index.open(dir, { readonly = true }))
    assert.are.equal(41, opened:count())
    assert.are.same(idx:search("replication stress", { k = 3 }),
      opened:search("replication stress", { k = 3 }))
    opened:close()
    idx:close()
    rmdir(dir)
  end)

  it("returns nil, msg, code for a missing path; raises on misuse", function()
    local idx, msg, code = cli.prepare({ "spec/fixtures/no-such-folder" })
    assert.is_nil(idx)
    assert.are.equal("rag.cli.prepare: 'spec/fixtures/no-such-folder': no such file or directory",
      msg)
    assert.are.equal("io", code)
    assert.has_error(function() cli.prepare("spec/fixtures/texts") end,
      "rag.cli.prepare: paths must be a non-empty list of strings")
    assert.has_error(function() cli.prepare({}) end,
      "rag.cli.prepare: paths must be a non-empty list of strings")
    assert.has_error(function() cli.save({}, 3) end,
      "rag.cli.save: dir must be a string, got number")
    assert.has_error(function() cli.ask({}, 42) end,
      "rag.cli.ask: question must be a string, got number")
  end)

  it("raises on a bad setting in the folder", function()
    local dir = helpers.tmpname()
    assert(fs.mkdir(dir))
    helpers.write(dir .. "/rag.toml", 'pipeline = "nope"\n')
    local idx = rag.index.new({ embedder = false })
    assert.has_error(function() cli.ask(idx, "why?", dir) end,
      "rag.cli.ask: unknown pipeline 'nope' (expected adaptive, agent, corrective, fusion, graph,"
        .. " hybrid, hyde, multihop, naive, stepback, summary, window)")
    helpers.write(dir .. "/rag.toml", "overlap = 600\n")
    assert.has_error(function() cli.prepare({ "spec/fixtures/texts" }, dir) end,
      "rag.cli.prepare: the overlap (600) must be smaller than the chunk size (512)")
    rmdir(dir)
  end)
end)
