-- The main job through bin/rag: `rag index` over a folder of real files
-- (Markdown, HTML, a PDF, a CSV, code, a file with invalid UTF-8 and a
-- broken PDF), re-runs after a change and a deletion, `rag search --json`,
-- `rag ask` offline, `rag info`, configuration and exit statuses; and
-- `make demo`'s script (issue 23, acceptance A, B and C).
local rag = require("rag")
local helpers = require("spec.helpers")

local FIX = "spec/fixtures/load/"

describe("rag index, search, ask", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  local lua = helpers.lua_command()
  local root = helpers.tmpname()
  local docs, into = root .. "/docs", root .. "/kb"

  local function rag_cmd(args, env)
    return helpers.spawn((env or "RAG_TTY=0") .. " " .. lua .. " bin/rag " .. args
      .. " < /dev/null")
  end

  local function copy(name, to)
    helpers.write(docs .. "/" .. (to or name), helpers.read(FIX .. name))
  end

  -- "kb: 9 documents, ...; 1 added, 2 updated, ..." as a table of counts
  local function counts(out)
    local t = {}
    for n, what in out:gsub(", [%d.]+ s%)", ")"):gmatch("(%d+) (%a+)") do
      t[what] = tonumber(n)
    end
    return t
  end

  -- the sources of the JSON lines of `rag search --json`
  local function sources(out)
    local list = {}
    for line in out:gmatch("[^\n]+") do
      local hit = assert(rag.json.decode(line), line)
      list[#list + 1] = hit.source
    end
    return list
  end

  setup(function()
    assert(os.execute("mkdir -p '" .. docs .. "/src'"))
    copy("notes.md")
    copy("page.html")
    copy("two_pages.pdf")
    copy("rows.csv")
    copy("sample.py", "src/sample.py")
    copy("bad_utf8.txt")
    copy("broken.pdf")
    copy("blob.bin")
  end)

  teardown(function()
    os.execute("rm -rf '" .. root .. "'")
  end)

  it("indexes the good files, names the two bad ones with their reasons, and exits 0", function()
    local out, err, status = rag_cmd("index " .. docs .. " --into " .. into)
    assert.equal(0, status, err)
    -- one line per failed file, in walk order, and nothing else on stderr
    local lines = {}
    for line in err:gmatch("[^\n]+") do
      lines[#lines + 1] = line
    end
    assert.equal(2, #lines, err)
    assert.truthy(lines[1]:find("^rag index: '" .. docs:gsub("%p", "%%%0") .. "/bad_utf8.txt': .*"
      .. "invalid utf%-8 at byte 31"), lines[1])
    assert.truthy(lines[2]:find("/broken.pdf': .*pdftotext"), lines[2])
    -- documents: notes, page, the PDF, three CSV rows, the Python file's parts
    local py = assert(rag.load.file(FIX .. "sample.py"))
    local c = counts(out)
    assert.same({ documents = 6 + #py, added = 6 + #py, updated = 0, unchanged = 0, removed = 0,
      failed = 2, files = 8, chunks = c.chunks }, c)
    -- each good file is found by a word only it has
    for word, file in pairs({ gravity = "page.html", volcanoes = "two_pages.pdf",
        weakest = "notes.md", hello = "rows.csv" }) do
      local o, e, st = rag_cmd("search " .. into .. " " .. word .. " --json --k 1")
      assert.equal(0, st, e)
      assert.same({ docs .. "/" .. file }, sources(o), word)
    end
  end)

  it("reports exactly one update after a file changes, and one removal after one goes", function()
    assert(rag_cmd("index " .. docs .. " --into " .. into))
    -- nothing changed: nothing is written, the generation stays
    local gen = rag.json.decode(helpers.read(into .. "/manifest.json")).generation
    local c0 = counts((rag_cmd("index " .. docs .. " --into " .. into)))
    assert.equal(c0.documents, c0.unchanged)
    assert.equal(gen, rag.json.decode(helpers.read(into .. "/manifest.json")).generation)
    helpers.write(docs .. "/notes.md", helpers.read(FIX .. "notes.md")
      .. "\nA new paragraph about lighthouses.\n")
    local out, err, status = rag_cmd("index " .. docs .. " --into " .. into)
    assert.equal(0, status, err)
    local c = counts(out)
    assert.equal(0, c.added)
    assert.equal(1, c.updated)
    assert.equal(0, c.removed)
    assert.equal(c.documents - 1, c.unchanged)
    assert.same({ docs .. "/notes.md" },
      sources((rag_cmd("search " .. into .. " lighthouses --json"))))

    local before = (rag_cmd("search " .. into .. " gravity --json"))
    assert.same({ docs .. "/page.html" }, sources(before))
    assert(os.remove(docs .. "/page.html"))
    out, err, status = rag_cmd("index " .. docs .. " --into " .. into)
    assert.equal(0, status, err)
    c = counts(out)
    assert.equal(1, c.removed)
    assert.equal(0, c.updated)
    assert.equal(0, c.added)
    assert.equal("", (rag_cmd("search " .. into .. " gravity --json")))
    copy("page.html")
  end)

  it("keeps the old version of a file that fails to load this time", function()
    assert(rag_cmd("index " .. docs .. " --into " .. into))
    helpers.write(docs .. "/later.txt", "The albatross glides for hours.\n")
    assert.equal(1, counts((rag_cmd("index " .. docs .. " --into " .. into))).added)
    helpers.write(docs .. "/later.txt", "The albatross \255 glides.\n")
    local out, err = rag_cmd("index " .. docs .. " --into " .. into)
    assert.truthy(err:find("later.txt': .*invalid utf%-8"), err)
    local c = counts(out)
    assert.equal(0, c.removed)
    assert.equal(3, c.failed)
    local found = rag_cmd("search " .. into .. " albatross --json")
    assert.same({ docs .. "/later.txt" }, sources(found))
    assert(os.remove(docs .. "/later.txt"))
    assert.equal(1, counts((rag_cmd("index " .. docs .. " --into " .. into))).removed)
  end)

  it("prints search hits as JSON lines, and as text with a marked snippet", function()
    assert(rag_cmd("index " .. docs .. " --into " .. into))
    local out, err, status = rag_cmd("search " .. into .. " moon tides --json --k 3")
    assert.equal(0, status, err)
    local n = 0
    for line in out:gmatch("[^\n]+") do
      n = n + 1
      local hit = assert(rag.json.decode(line))
      assert.equal(n, hit.rank)
      assert.is_string(hit.id)
      assert.is_number(hit.score)
      -- the span is the document's text, and each highlight a query word
      local doc = assert(rag.load.file(hit.source))[1]
      assert.equal(doc.text:sub(hit.start, hit.stop), hit.text)
      assert.truthy(#hit.highlights > 0)
      for _, h in ipairs(hit.highlights) do
        local w = hit.snippet:sub(h[1], h[2]):lower()
        assert.truthy(w:find("^moon") or w:find("^tide"), w)
      end
    end
    assert.equal(3, n)
    out = rag_cmd("search " .. into .. " volcanoes --k 1")
    assert.truthy(out:find("^1%. " .. docs:gsub("%p", "%%%0") .. "/two_pages%.pdf  %(score "), out)
    assert.truthy(out:find("%*%*volcanoes%*%*"), out)
    out = rag_cmd("search " .. into .. " volcanoes --k 1", "RAG_TTY=1")
    assert.truthy(out:find("\27[1;33mvolcanoes\27[0m", 1, true), out)
  end)

  it("answers offline with [n] markers that match the sources it prints", function()
    assert(rag_cmd("index " .. docs .. " --into " .. into))
    local out, err, status = rag_cmd("ask " .. into .. " 'What pulls the ocean?'")
    assert.equal(0, status, err)
    local answer, listed = out:match("^(.-)\n\nSources:\n(.*)$")
    assert.truthy(answer, out)
    local cited, shown = {}, {}
    for n in answer:gmatch("%[(%d+)%]") do
      cited[tonumber(n)] = true
    end
    for n, src in listed:gmatch("%[(%d+)%] (%S+)") do
      shown[tonumber(n)] = src
    end
    assert.truthy(next(cited), answer)
    for n in pairs(cited) do
      assert.truthy(shown[n], "marker [" .. n .. "] has no source")
    end
    for n in pairs(shown) do
      assert.truthy(cited[n], "source [" .. n .. "] is not cited")
    end
    assert.truthy(answer:lower():find("moon"), answer)
    assert.truthy(err:find("^rag ask: [%d.]+ s, naive, 1 LLM call\n$"), err)
  end)

  it("writes the run's trace, and prints what the index holds", function()
    assert(rag_cmd("index " .. docs .. " --into " .. into))
    local trace = root .. "/trace.jsonl"
    assert.equal(0, select(3, rag_cmd("ask " .. into .. " tides --trace " .. trace)))
    local entries = rag.pipeline.runtime.trace(helpers.read(trace))
    assert.truthy(#entries > 0)
    local out, _, status = rag_cmd("info " .. into)
    assert.equal(0, status)
    assert.truthy(out:find("\ndocuments%s+%d+\n"), out)
    assert.truthy(out:find("\nembedder%s+hashing %(dim 512%)\n"), out)
    assert.truthy(out:find("\nsearch mode%s+bm25\n"), out)
  end)

  it("takes settings from flags, then the environment, then rag.json and rag.toml", function()
    assert(rag_cmd("index " .. docs .. " --into " .. into))
    local function hits(args, env)
      local out, err, status = rag_cmd("search " .. into .. " moon tides sea row --json"
        .. (args or ""), env)
      assert.equal(0, status, err)
      return #sources(out)
    end
    assert.truthy(hits() >= 4)
    helpers.write(into .. "/rag.toml", "# settings\n[rag]\nk = 1\n")
    assert.equal(1, hits())
    assert.equal(2, hits(nil, "RAG_TTY=0 RAG_K=2"))
    assert.equal(3, hits(" --k 3", "RAG_TTY=0 RAG_K=2"))
    helpers.write(into .. "/rag.toml", "k = 'many'\n")
    local _, err, status = rag_cmd("search " .. into .. " moon")
    assert.equal(2, status)
    assert.truthy(err:find("rag.toml: 'k' must be an integer"), err)
    os.remove(into .. "/rag.toml")
    -- rag index recorded its settings for search and ask
    local recorded = rag.json.decode(helpers.read(into .. "/rag.json"))
    assert.same({ embedder = "hashing", chunk_size = 512, overlap = 64 }, recorded)
  end)

  it("indexes everything again when the chunk settings change", function()
    assert(rag_cmd("index " .. docs .. " --into " .. into))
    local out, err, status = rag_cmd("index " .. docs .. " --into " .. into
      .. " --chunk-size 64 --overlap 8")
    assert.equal(0, status, err)
    assert.truthy(err:find("settings changed %(chunks 512/64 %-> 64/8%)"), err)
    local c = counts(out)
    assert.equal(c.documents, c.added)
    assert.equal(64, rag.json.decode(helpers.read(into .. "/rag.json")).chunk_size)
    assert(rag_cmd("index " .. docs .. " --into " .. into .. " --chunk-size 512 --overlap 64"))
  end)

  it("shows a progress bar on a terminal and nothing but the summary in a pipe", function()
    local _, err = rag_cmd("index " .. docs .. " --into " .. root .. "/kb2", "RAG_TTY=1")
    assert.truthy(err:find("\rloading%s+%[#+%] 8/8"), err)
    assert.truthy(err:find("\rindexing%s+%[#+%] (%d+)/%1"), err)
    assert.truthy(err:find("\r\27[K", 1, true), err)
    local out
    out, err = rag_cmd("index " .. docs .. " --into " .. root .. "/kb2")
    assert.falsy(err:find("\r", 1, true))
    assert.equal(1, select(2, out:gsub("\n", "")))
    -- one file of 400 records: the bar counts them and is not redrawn for each
    local lines = {}
    for i = 1, 400 do
      lines[i] = rag.json.encode({ id = "r" .. i, text = "record " .. i .. " about tides" })
    end
    os.execute("mkdir -p '" .. root .. "/one'")
    helpers.write(root .. "/one/records.jsonl", table.concat(lines, "\n") .. "\n")
    _, err = rag_cmd("index " .. root .. "/one --into " .. root .. "/kb3", "RAG_TTY=1")
    assert.truthy(err:find("\rloading%s+%[#+%] 1/1 file, %d+ documents?"), err)
    local draws = select(2, err:gsub("\rloading", ""))
    assert.truthy(draws >= 1 and draws < 40, draws)
  end)

  it("indexes a BEIR folder as its corpus, with the BEIR ids as document ids", function()
    local kb = root .. "/beir-kb"
    local out, err, status = rag_cmd("index " .. FIX .. "beir --into " .. kb)
    assert.equal(0, status, err)
    assert.equal(2, counts(out).added)
    local hit = rag.json.decode((rag_cmd("search " .. kb .. " basalt --json")))
    assert.equal("2", hit.doc_id)
    assert.equal(FIX .. "beir/corpus.jsonl", hit.source)
    out = rag_cmd("search " .. kb .. " moon --k 1")
    assert.truthy(out:find("^1%. " .. (FIX .. "beir/corpus.jsonl#b1"):gsub("%p", "%%%0") .. "  "),
      out)
  end)

  it("exits 1 when the world fails and 2 on usage errors, with one line", function()
    local cases = {
      { "search " .. root .. "/none moon", 1, "^rag search: '.-/none': no index here" },
      { "index " .. root .. "/missing --into " .. into, 1,
        "^rag index: '.-/missing': no such file" },
      { "index " .. docs, 2, "^rag index: option '%-%-into DIR' is required" },
      { "index " .. docs .. " --into " .. into .. " --embedder nope", 2,
        "unknown embedder 'nope'" },
      { "index " .. docs .. " --into " .. into .. " --overlap 600", 2, "must be smaller" },
      { "ask " .. into .. " q --pipeline nope", 2, "unknown pipeline 'nope'" },
      { "ask " .. into .. " q --llm nope", 2, "unknown llm 'nope'" },
      { "search " .. into .. " q --mode nope", 2, "unknown mode 'nope'" },
      { "search " .. into .. " q --filter nope", 2, "bad filter 'nope'" },
      { "search " .. into, 2, "missing argument" },
      { "search " .. into .. " q --k 0", 2, "'k' must be an integer" },
    }
    for _, case in ipairs(cases) do
      local out, err, status = rag_cmd(case[1])
      assert.equal(case[2], status, case[1] .. ": " .. err)
      assert.equal("", out, case[1])
      assert.truthy(err:find(case[3]), case[1] .. ": " .. err)
      assert.equal(1, select(2, err:gsub("\n", "")), err)
    end
  end)
end)

describe("make demo's script", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end

  it("indexes README.md and docs/ and prints three answers, each citing a file of docs/", function()
    local dir = helpers.tmpname()
    local out, err, status = helpers.spawn("RAG_TTY=0 DEMO_INDEX=" .. dir .. " "
      .. helpers.lua_command() .. " examples/demo.lua")
    os.execute("rm -rf '" .. dir .. "'")
    assert.equal(0, status, err)
    local answers = 0
    for sources in out:gmatch("\nSources:\n(.-)\n\n") do
      answers = answers + 1
      assert.truthy(sources:find("^%[%d+%] docs/[%w_]+%.md") or sources:find("\n%[%d+%] docs/"),
        sources)
    end
    assert.equal(3, answers, out)
    assert.equal(3, select(2, err:gsub("rag ask: ", "")), err)
  end)
end)

describe("rag index --graph and rag ask --pipeline graph|agent", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  local lua = helpers.lua_command()
  local function rag_cmd(args)
    return helpers.spawn("RAG_TTY=0 " .. lua .. " bin/rag " .. args .. " < /dev/null")
  end

  it("builds the graph with the index, keeps it in step, and answers from two documents",
    function()
      local root = helpers.tmpname()
      local docs, into = root .. "/docs", root .. "/kb"
      os.execute("mkdir -p '" .. docs .. "' && cp spec/fixtures/multihop/*.txt '" .. docs .. "'")
      local out, err, status = rag_cmd("index '" .. docs .. "' --into '" .. into .. "' --graph")
      assert.equal(0, status, err)
      assert.truthy(out:find("6 added", 1, true), out)
      local m = rag.json.decode(helpers.read(into .. "/manifest.json"))
      assert.is_table(m.files.graph)
      local q = "'Where was the founder of Acme Robotics born?'"
      local trace = root .. "/trace.jsonl"
      out, err, status = rag_cmd("ask '" .. into .. "' " .. q .. " --pipeline graph --k 3 --trace '"
        .. trace .. "'")
      assert.equal(0, status, err)
      assert.truthy(out:find("acme.txt", 1, true), out)
      -- the walk reached the founder's birthplace in the other document (the
      -- extractive LLM quotes sentences; it does not join facts)
      local expand = helpers.read(trace):match('[^\n]*"name":"expand"[^\n]*')
      assert.truthy(expand and expand:find("lopez.txt#1", 1, true), expand)
      -- a removed document leaves the graph at the next run, without --graph
      os.remove(docs .. "/lopez.txt")
      out, err, status = rag_cmd("index '" .. docs .. "' --into '" .. into .. "'")
      assert.equal(0, status, err)
      assert.truthy(out:find("1 removed", 1, true), out)
      local idx = assert(rag.index.open(into))
      assert.is_truthy(idx.graph)
      assert.is_nil(idx.graph:get("madrid")) -- only lopez.txt named it
      assert.is_truthy(idx.graph:get("acme robotics"))
      idx:close()
      out, err, status = rag_cmd("ask '" .. into .. "' " .. q .. " --pipeline agent --k 3")
      assert.equal(0, status, err)
      assert.truthy(out:find("acme.txt", 1, true), out)
      local _, err2, status2 = rag_cmd("ask '" .. into .. "' " .. q .. " --pipeline nope")
      assert.equal(2, status2)
      assert.truthy(err2:find("graph", 1, true), err2)
      os.execute("rm -rf '" .. root .. "'")
    end)
end)

describe("rag index --enrich", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  local lua = helpers.lua_command()
  local base, stop_llmd

  setup(function()
    base, stop_llmd = helpers.start_httpd("llmd.py")
  end)

  teardown(function()
    stop_llmd()
  end)

  it("counts LLM calls in the progress bar, stops at --max-llm-calls, and the next run "
    .. "asks only for the rest", function()
    local root = helpers.tmpname()
    local docs, into = root .. "/docs", root .. "/kb"
    os.execute("mkdir -p '" .. docs .. "' && cp spec/fixtures/multihop/*.txt '" .. docs .. "'")
    local model = helpers.uniq_model("enrich")
    local function rag_cmd(args, tty)
      return helpers.spawn("RAG_TTY=" .. (tty and 1 or 0) .. " OPENAI_BASE_URL=" .. base
        .. "/v1 OPENAI_API_KEY=k " .. lua .. " bin/rag " .. args .. " < /dev/null")
    end
    local flags = "index '" .. docs .. "' --into '" .. into .. "' --enrich keywords,summary"
      .. " --llm openai --model " .. model
    local out, err, status = rag_cmd(flags .. " --max-llm-calls 5")
    assert.equal(1, status, err)
    assert.equal("", out)
    assert.matches("llm call limit reached %(5 calls%); what was done is saved: run the same "
      .. "command again to go on", err)
    assert.equal(5, #helpers.llmd_log(base, model))
    out, err, status = rag_cmd(flags, true)
    assert.equal(0, status, err)
    assert.truthy(out:find("6 added", 1, true), out)
    -- 6 one-chunk documents, 2 steps: 12 prompts in all, none asked twice
    local log = helpers.llmd_log(base, model)
    assert.equal(12, #log)
    local seen = {}
    for _, r in ipairs(log) do
      local msgs = r.body.messages
      local key = msgs[1].content .. msgs[#msgs].content
      assert.is_nil(seen[key], "asked twice")
      seen[key] = true
    end
    assert.truthy(err:find("\rindexing%s+%[#+%] 6/6 7 LLM calls, %d+ tokens"), err)
    out, err, status = rag_cmd("info '" .. into .. "'")
    assert.equal(0, status, err)
    assert.truthy(out:find("enrichment   keywords:llm, summary:llm", 1, true), out)
    assert.truthy(out:find("enriched     6 chunks: keywords 100%, summaries 100%", 1, true), out)
    assert.truthy(out:find("llm cache    12 answers", 1, true), out)
    -- unchanged: no call; without the LLM that wrote them: a usage error
    out, err, status = rag_cmd(flags)
    assert.equal(0, status, err)
    assert.truthy(out:find("6 unchanged", 1, true), out)
    assert.equal(12, #helpers.llmd_log(base, model))
    local _
    _, err, status = rag_cmd("index '" .. docs .. "' --into '" .. into .. "'")
    assert.equal(2, status)
    assert.matches("enrichment step '%a+' is written by an LLM: give %-%-llm openai or ollama",
      err)
    -- offline steps need no LLM; questions do
    _, err, status = rag_cmd("index '" .. docs .. "' --into '" .. root .. "/kb2' --enrich "
      .. "keywords,doc_summary")
    assert.equal(0, status, err)
    out, err, status = rag_cmd("ask '" .. root .. "/kb2' 'Where was the founder of Acme "
      .. "Robotics born?' --pipeline summary")
    assert.equal(0, status, err)
    assert.truthy(out:find("acme.txt", 1, true), out)
    out, err, status = rag_cmd("index '" .. docs .. "' --into '" .. root .. "/kb3' --enrich "
      .. "questions")
    assert.equal(2, status)
    assert.equal("", out)
    assert.truthy(err:find("enrichment step 'questions' needs an LLM", 1, true), err)
    os.execute("rm -rf '" .. root .. "'")
  end)
end)
