-- bench/enrich.lua BEIR_DIR [ROUNDS]: what offline enrichment (keywords by
-- the corpus's BM25 weights, the lead sentence as summary) does to a
-- rag.index on a BEIR folder (SciFact: 5,183 documents): BM25-mode quality
-- with and without it, over a sweep of the field weights, and its cost in
-- ingest speed, query speed and size on disk (issue 29, point B).
--
-- Data: BEIR_DIR/corpus.jsonl (title + text), the test queries of
-- qrels/test.tsv. Index: BM25 only (embedder = false), the default chunker
-- (recursive, 512 cl100k tokens, overlap 64). Times: os.clock (this
-- process's CPU time, one thread), the median of ROUNDS (default 3) runs;
-- an ingest run is add_many of the whole corpus into a new index; a query
-- run is every test query once, k = 10. Quality: nDCG@10 and Recall@100
-- over documents (group = "doc", k = 100) with rag.eval.ir.
--   make bench-enrich DATA=../shared/data
local rag = require("rag")
local util = require("bench.util")

local dir = arg[1]
if dir then
  dir = dir:gsub("/+$", "")
  local base, leaf = dir:match("^(.*)/([^/]+)$")
  util.data_dir(base or ".", (leaf or dir) .. "/corpus.jsonl", "bench-enrich")
else
  util.data_dir(nil, "", "bench-enrich")
end
local ROUNDS = tonumber(arg[2]) or 3
local clock, median = os.clock, util.median

local data, docs, qids = util.beir(dir)

local function du(path)
  local p = io.popen("du -sk '" .. path .. "'")
  local kb = tonumber(p:read("*a"):match("^(%d+)"))
  p:close()
  return kb / 1024
end

local function quality(idx, opts)
  local run = {}
  for _, q in ipairs(qids) do
    local o = { mode = "bm25", k = 100, group = "doc", fields = opts }
    run[q] = idx:search(data.queries[q], o)
    for _, h in ipairs(run[q]) do
      h.id = h.doc_id
    end
  end
  local m = rag.eval.ir(run, data.qrels, { "ndcg@10", "recall@100" })
  return m["ndcg@10"], m["recall@100"]
end

local function qps(idx)
  local t = {}
  for r = 1, ROUNDS do
    local t0 = clock()
    for _, q in ipairs(qids) do
      idx:search(data.queries[q], { mode = "bm25", k = 10 })
    end
    t[r] = clock() - t0
  end
  return #qids / median(t)
end

print(string.format("bench/enrich.lua: %s, %d documents, %d queries; %s; %s", dir, #docs,
  #qids, util.cpu(), _VERSION))
print(string.format("%-34s %10s %10s %10s %10s %8s", "index", "docs/s", "queries/s",
  "nDCG@10", "R@100", "MB"))

local built = {}
for _, cfg in ipairs({
  { name = "plain", opts = { embedder = false } },
  { name = "enriched (offline keywords+summary)",
    opts = { embedder = false, enrich = { keywords = "offline", summary = "offline" } } },
}) do
  local times, idx = {}, nil
  for r = 1, ROUNDS do
    if idx then
      idx:close()
    end
    collectgarbage()
    idx = rag.index.new(cfg.opts)
    local t0 = clock()
    assert(idx:add_many(docs))
    times[r] = clock() - t0
  end
  local save = os.tmpname()
  os.remove(save)
  assert(idx:save(save))
  local mb = du(save)
  os.execute("rm -rf '" .. save .. "'")
  local nd, rc = quality(idx)
  print(string.format("%-34s %10.0f %10.0f %10.4f %10.4f %8.1f", cfg.name, #docs / median(times),
    qps(idx), nd, rc, mb))
  built[cfg.name] = idx
end

-- The field weights: each field alone, and both, at a few weights.
local e = built["enriched (offline keywords+summary)"]
print("\nfield weights (same enriched index, bm25 mode):")
print(string.format("%-10s %-10s %10s %10s", "keywords", "summary", "nDCG@10", "R@100"))
for _, w in ipairs({ { 0, 0 }, { 0.1, 0 }, { 0.2, 0 }, { 0.3, 0 }, { 0.5, 0 }, { 1, 0 },
  { 0, 0.05 }, { 0, 0.1 }, { 0, 0.3 }, { 0, 1 }, { 0.1, 0.05 }, { 0.1, 0.1 }, { 0.2, 0.05 },
  { 0.2, 0.1 }, { 0.2, 0.2 }, { 0.3, 0.1 }, { 0.3, 0.3 } }) do
  local nd, rc = quality(e, { keywords = w[1], summary = w[2] })
  print(string.format("%-10.2f %-10.2f %10.4f %10.4f", w[1], w[2], nd, rc))
end
