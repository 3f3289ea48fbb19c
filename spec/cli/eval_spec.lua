-- `rag eval` through bin/rag (issue 24, deliverable 4): over a BEIR folder
-- its numbers are rag.eval.ir's over the index's own document-level search,
-- computed here through the library; sweeps rebuild the index per chunk
-- setting; --qa offline reports the judge's metrics as unavailable;
-- usage errors exit 2.
local rag = require("rag")
local helpers = require("spec.helpers")

describe("rag eval", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  local lua = helpers.lua_command()
  local root = helpers.tmpname()
  local kb = root .. "/kb"

  local function rag_cmd(args)
    return helpers.spawn("RAG_TTY=0 " .. lua .. " bin/rag " .. args .. " < /dev/null")
  end

  setup(function()
    assert(os.execute("mkdir -p '" .. root .. "'"))
    -- a BEIR folder of the SciFact sample: every other document's first
    -- sentence asks for it and for the document before it, which it finds
    -- lower or not at all
    local corpus, queries, qrels = {}, {}, { "query-id\tcorpus-id\tscore" }
    local n, prev = 0, nil
    for line in io.lines("spec/fixtures/texts/scifact40.jsonl") do
      local d = rag.json.decode(line)
      n = n + 1
      corpus[#corpus + 1] = rag.json.encode({ _id = d._id, title = d.title, text = d.text })
      if n % 2 == 0 then
        queries[#queries + 1] = rag.json.encode({ _id = "q" .. n, text = d.text:match("^[^.]+") })
        qrels[#qrels + 1] = "q" .. n .. "\t" .. d._id .. "\t1"
        qrels[#qrels + 1] = "q" .. n .. "\t" .. prev .. "\t1"
      end
      prev = d._id
    end
    assert(os.execute("mkdir -p '" .. root .. "/beir/qrels'"))
    helpers.write(root .. "/beir/corpus.jsonl", table.concat(corpus, "\n") .. "\n")
    helpers.write(root .. "/beir/queries.jsonl", table.concat(queries, "\n") .. "\n")
    helpers.write(root .. "/beir/qrels/test.tsv", table.concat(qrels, "\n") .. "\n")
    local _, err, status = rag_cmd("index " .. root .. "/beir --into " .. kb)
    assert(status == 0, err)
  end)

  teardown(function()
    os.execute("rm -rf '" .. root .. "'")
  end)

  -- rag.eval.ir over idx's document-level hits for the folder's test queries
  local function expected(idx, mode)
    local data = assert(rag.eval.beir(root .. "/beir", { corpus = false }))
    local run = {}
    for q in pairs(data.qrels) do
      local hits = assert(idx:search(data.queries[q], { mode = mode, k = 100, group = "doc" }))
      local list = {}
      for i, h in ipairs(hits) do
        list[i] = h.doc_id
      end
      run[q] = list
    end
    return rag.eval.ir(run, data.qrels, { "ndcg@10", "recall@100", "mrr", "map", "p@10" })
  end

  it("gives rag.eval.ir's numbers for each mode, and paired tests", function()
    local out, err, status = rag_cmd("eval " .. kb .. " --beir " .. root .. "/beir --json "
      .. root .. "/ev.json")
    assert.equal(0, status, err)
    assert.falsy(err:find("not in the index", 1, true), err)
    assert.falsy(out:find("mode=bm25%s+1%.0000"), out) -- not a trivial test
    assert.truthy(out:find("^setting%s+ndcg@10%s+recall@100%s+mrr%s+map%s+p@10\n"), out)
    local res = rag.json.decode(helpers.read(root .. "/ev.json"))
    local idx = assert(rag.index.open(kb, { readonly = true }))
    local modes = {}
    for i, s in ipairs(res.settings) do
      modes[i] = s.params.mode
      assert.same(expected(idx, s.params.mode), s.scores, s.name)
      local n = 0
      for _ in pairs(s.per_query) do
        n = n + 1
      end
      assert.equal(20, n) -- every test query, scored
      assert.equal(7, #s.curve) -- recall@1, 3, 5, 10, 20, 50, 100
    end
    idx:close()
    assert.same({ "bm25", "vector", "hybrid" }, modes)
    assert.equal(2, #res.comparisons)
    assert.equal("mode=bm25", res.comparisons[1].a)
    assert.equal("mode=vector", res.comparisons[1].b)
    assert.is_number(res.comparisons[1].result.metrics["ndcg@10"].p)
  end)

  it("says how many judged documents the index lacks", function()
    -- the corpus indexed as a plain file: its ids are path#id, none a BEIR id
    local kb2 = root .. "/kb-file"
    local _, err, status = rag_cmd("index " .. root .. "/beir/corpus.jsonl --into " .. kb2)
    assert.equal(0, status, err)
    _, err, status = rag_cmd("eval " .. kb2 .. " --beir " .. root .. "/beir --mode bm25")
    assert.equal(0, status, err)
    -- 20 queries, each judging its document and the one before: all 40
    assert.equal("rag eval: 40 of 40 judged documents are not in the index (they count as"
      .. " misses)\n", err)
  end)

  it("sweeps chunk sizes, rebuilding the index from its documents, into one HTML page", function()
    local out, err, status = rag_cmd("eval " .. kb .. " --beir " .. root .. "/beir --mode bm25"
      .. " --sweep chunk.size=100,200 --json " .. root .. "/sw.json --html " .. root .. "/sw.html")
    assert.equal(0, status, err)
    local res = rag.json.decode(helpers.read(root .. "/sw.json"))
    assert.same({ "chunk.size=100", "chunk.size=200" }, { res.settings[1].name,
      res.settings[2].name })
    -- the 100-token setting equals an index built that way from the same documents
    local idx = assert(rag.index.open(kb))
    local small = rag.index.new({ chunk = { size = 100, overlap = 64 } })
    for _, id in ipairs(idx:ids()) do
      local d = idx:get(id)
      assert(small:add({ id = d.id, text = d.text, title = d.title, source = d.source,
        meta = d.meta }))
    end
    assert.same(expected(small, "bm25"), res.settings[1].scores)
    idx:close()
    local html = helpers.read(root .. "/sw.html")
    local charts = select(2, html:gsub("<svg [^>]*id=\"bar%-%d+\"", ""))
    assert.equal(5, charts, out)
    assert.falsy(html:find("<script", 1, true))
  end)

  it("answers QA questions offline and reports the judge's metrics as unavailable", function()
    helpers.write(root .. "/qa.jsonl", '{"question": "What is the role of fibrinogen?",'
      .. ' "ground_truth": "It helps blood clot."}\n{"question": "What do macrophages do?"}\n')
    local out, err, status = rag_cmd("eval " .. kb .. " --qa " .. root .. "/qa.jsonl --json "
      .. root .. "/qa.json")
    assert.equal(0, status, err)
    assert.truthy(out:find("unavailable: needs an llm", 1, true), out)
    local res = rag.json.decode(helpers.read(root .. "/qa.json"))
    assert.equal(1, #res.settings)
    assert.equal("needs an llm", res.settings[1].unavailable.faithfulness)
  end)

  it("exits 2 on usage errors with one line", function()
    for args, want in pairs({
      ["eval " .. kb] = "give one of %-%-beir FOLDER and %-%-qa FILE",
      ["eval " .. kb .. " --beir x --qa y"] = "give one of",
      ["eval " .. kb .. " --beir x --sweep size=1"] = "bad sweep 'size=1'",
      ["eval " .. kb .. " --beir x --sweep k=0"] = "is not a positive integer",
    }) do
      local out, err, status = rag_cmd(args)
      assert.equal(2, status, args .. ": " .. err)
      assert.equal("", out)
      assert.truthy(err:find(want), err)
    end
    local _, err, status = rag_cmd("eval " .. kb .. " --beir " .. root .. "/nope")
    assert.equal(1, status, err)
  end)
end)
