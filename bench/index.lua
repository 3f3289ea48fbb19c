-- bench/index.lua BEIR_DIR [ROUNDS | --bm25 ROUNDS]: rag.index on a BEIR folder (SciFact:
-- 5,183 documents): ingest speed, query speed in the three modes, memory,
-- size on disk, and document-level quality.
--
-- Data: BEIR_DIR/corpus.jsonl, each document { id, title, text }; the test
-- queries of qrels/test.tsv. Embedder: rag.embed.hashing{ dim = 512 } (the
-- offline default). Chunker: the default (recursive, 512 cl100k tokens,
-- overlap 64; exact token counts included in every ingest figure).
-- Configurations: BM25 only (embedder = false), the default (vector "auto":
-- exact below rag.index.HNSW_FROM chunks), the default given precomputed
-- vectors (the embedding left out of the time, as the peers are given
-- theirs), and vector = "hnsw".
-- Times: os.clock (this process's CPU time; one thread), the median of
-- ROUNDS (default 3) runs; an ingest run is add_many of the whole corpus
-- into a new index; a query run is every test query once with k = 10,
-- hits with texts and metadata. RSS: VmRSS after an ingest (MB). Quality:
-- nDCG@10 and Recall@100 over documents (group = "doc", k = 100), with
-- rag.eval.ir (trec_eval's definitions). Also the size of a save, and the
-- RSS a second, read-only opening adds (deliverable F).
-- Peers in the same run: bench/peers/ (make bench-index-peers). With --bm25,
-- only the BM25-only ingest (bench/peers/ingest_pair.sh alternates it with FTS5's).
--   make bench-index DATA=../shared/data
local rag = require("rag")
local util = require("bench.util")

local dir = arg[1]
if dir then
  dir = dir:gsub("/+$", "")
  local base, leaf = dir:match("^(.*)/([^/]+)$")
  util.data_dir(base or ".", (leaf or dir) .. "/corpus.jsonl", "bench-index")
else
  util.data_dir(nil, "", "bench-index")
end
local BM25_ONLY = arg[2] == "--bm25" -- only the BM25-only ingest (bench/peers/ingest_pair.sh)
local ROUNDS = tonumber(arg[BM25_ONLY and 3 or 2]) or 3
local RSS_ONLY = arg[2] == "--rss" -- the child that measures a fresh process's RSS
local RO_DIR = arg[2] == "--ro" and arg[3] -- the child that opens a saved index read-only
local clock, median = os.clock, util.median

-- This process's memory from /proc/self/smaps_rollup, MB: rss, anon, and
-- private (pages no other process maps: what a process adds to the machine).
local function mem_mb()
  local t = {}
  for line in io.lines("/proc/self/smaps_rollup") do
    local k, kb = line:match("^([%w_]+):%s+(%d+) kB")
    if k then
      t[k] = tonumber(kb) / 1024
    end
  end
  return { rss = t.Rss, anon = t.Anonymous, private = t.Private_Clean + t.Private_Dirty }
end

if RO_DIR then -- a second process: open read-only, run every query, print what it added
  local queries = {} -- only the queries: freed heap from the corpus would hide what open adds
  for line in io.lines(dir .. "/queries.jsonl") do
    queries[#queries + 1] = rag.json.decode(line).text
  end
  collectgarbage()
  collectgarbage()
  local before = mem_mb()
  local ro = assert(rag.index.open(RO_DIR, { readonly = true }))
  for _, q in ipairs(queries) do
    ro:search(q, { mode = "hybrid", k = 10 })
  end
  collectgarbage()
  collectgarbage()
  local after = mem_mb()
  print(string.format("%.2f %.2f %.2f", after.private - before.private,
    after.anon - before.anon, after.rss - before.rss))
  os.exit(0)
end

local data, docs, qids = util.beir(dir)

local function rss_mb()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmRSS:%s+(%d+)")
    if kb then
      return tonumber(kb) / 1024
    end
  end
end

local function du(path)
  return tonumber(util.sh("du -sb " .. path .. " | cut -f1")) / 1e6
end

if RSS_ONLY then -- one ingest in a fresh process, as the peers measure theirs
  local idx = rag.index.new()
  assert(idx:add_many(docs))
  collectgarbage()
  collectgarbage()
  print(string.format("%.1f", rss_mb()))
  os.exit(0)
end

print(string.format("rag.index on %s: %d documents, %d test queries; %s; %s", dir, #docs,
  #qids, util.cpu(), _VERSION))
-- How much cache this process gets, before and after: on a shared machine
-- it moves, and the query figures move with it (docs/performance.md).
if not BM25_ONLY then
  print("at the start, " .. util.membw("--latency"))
end

-- An embedder that returns precomputed hashing vectors, so that an ingest
-- figure can leave the embedding out, as the peers' do (they are given the
-- vectors): the vectors of every text the index will embed, made once here.
local hashing = rag.embed.hashing({ dim = 512 })
local precomputed = { name = "precomputed", lexical = true, vectors = {} }
function precomputed.dim()
  return 512
end
function precomputed.embed(self, texts)
  local out, missing = {}, {}
  for i, t in ipairs(texts) do
    out[i] = self.vectors[t]
    if not out[i] then
      missing[#missing + 1] = t
    end
  end
  if #missing > 0 then -- made here, outside the timed runs (see below)
    local vs = hashing:embed(missing, { packed = true })
    for i, t in ipairs(missing) do
      self.vectors[t] = vs[i]
    end
    return self:embed(texts)
  end
  return out
end
if not BM25_ONLY then -- fill the table: one untimed ingest
  local warm = rag.index.new({ embedder = precomputed })
  assert(warm:add_many(docs))
  warm:close()
end

local CONFIGS = {
  { name = "bm25 only", opts = { embedder = false } },
  { name = "default (auto)", opts = {} },
  { name = "auto, given vectors", opts = { embedder = precomputed }, quick = true },
  { name = "hnsw", opts = { vector = "hnsw" } },
}
if BM25_ONLY then
  CONFIGS = { { name = "bm25 only", opts = { embedder = false }, quick = true } }
end

local results = {}
for _, cfg in ipairs(CONFIGS) do
  local times, idx, rss = {}, nil, 0
  for r = 1, ROUNDS do
    if idx then
      idx:close()
      collectgarbage()
      collectgarbage()
    end
    local t0 = clock()
    idx = rag.index.new(cfg.opts)
    assert(idx:add_many(docs))
    times[r] = clock() - t0
    collectgarbage()
    collectgarbage()
    rss = rss_mb()
  end
  local st = idx:stats()
  local out = { name = cfg.name, docs_s = #docs / median(times), rss = rss, chunks = st.leaves,
    vector = st.vector }
  print(string.format("%-20s ingest %8.0f docs/s  (%d chunks, vectors %s, RSS %.0f MB)",
    cfg.name, out.docs_s, st.leaves, st.vector, rss))
  local modes = (st.vector == "none" or cfg.quick) and {} or { "bm25", "vector", "hybrid" }
  if st.vector == "none" and not cfg.quick then
    modes = { "bm25" }
  end
  for _, mode in ipairs(modes) do
    local qt = {}
    for r = 1, ROUNDS do
      local t0 = clock()
      for _, q in ipairs(qids) do
        idx:search(data.queries[q], { mode = mode, k = 10 })
      end
      qt[r] = clock() - t0
    end
    local run = {}
    for _, q in ipairs(qids) do
      run[q] = idx:search(data.queries[q], { mode = mode, k = 100, group = "doc" })
      for _, h in ipairs(run[q]) do
        h.id = h.doc_id
      end
    end
    local m = rag.eval.ir(run, data.qrels, { "ndcg@10", "recall@100" })
    print(string.format("%-20s %-6s %8.0f queries/s  nDCG@10 %.4f  Recall@100 %.4f", "", mode,
      #qids / median(qt), m["ndcg@10"], m["recall@100"]))
    out[mode] = { qps = #qids / median(qt), ndcg = m["ndcg@10"], recall = m["recall@100"] }
  end
  if cfg.name == "default (auto)" then
    local save = os.tmpname()
    os.remove(save)
    assert(idx:save(save))
    local size = du(save)
    -- a first process (this one) has it open read-only; a second one opens it too
    local ro = assert(rag.index.open(save, { readonly = true }))
    for _, q in ipairs(qids) do
      ro:search(data.queries[q], { mode = "hybrid", k = 10 })
    end
    local lua = arg[-1] or "lua5.4"
    local private, anon, ro_rss = util.sh(lua .. " bench/index.lua " .. dir .. " --ro " .. save)
      :match("(%S+) (%S+) (%S+)")
    private, anon, ro_rss = tonumber(private), tonumber(anon), tonumber(ro_rss)
    print(string.format("%-20s saved %.1f MB on disk; a second process opening it read-only and"
      .. " running every query adds %.2f MB private memory (%.1f%% of the saved size;"
      .. " anonymous %.2f MB; RSS %.1f MB, the rest mapped pages shared with the first)", "",
      size, private, 100 * private / size, anon, ro_rss))
    out.disk, out.ro_private, out.ro_rss = size, private, ro_rss
    ro:close()
    os.execute("rm -rf " .. save)
  end
  idx:close()
  results[#results + 1] = out
end
if BM25_ONLY then
  os.exit(0)
end

-- The raw core on the same chunks: rag.bm25 + rag.hnsw (or rag.vec) + rag.fuse.rrf,
-- 50 hits from each list, what the index layer adds its texts and metadata to.
do
  local e = rag.embed.hashing({ dim = 512 })
  local b, h = rag.bm25.new(), rag.hnsw.new({ dim = 512 })
  local v = rag.vec.new({ dim = 512, sketch = true }) -- as the index keeps its exact vectors
  local tok = rag.tokenizer.get("cl100k_base")
  local ids, texts = {}, {}
  for _, d in ipairs(docs) do
    local chunks = rag.chunk.recursive(d.text, { size = 512, overlap = 64, tokenizer = tok })
    for n, c in ipairs(chunks) do
      ids[#ids + 1] = d.id .. "#" .. n
      texts[#texts + 1] = (d.title ~= "" and d.title .. "\n" or "") .. c.text
    end
  end
  local vecs = e:embed(texts, { packed = true })
  for i, id in ipairs(ids) do
    b:add(id, texts[i])
    h:add(id, vecs[i])
    v:add(id, vecs[i])
  end
  for _, pair in ipairs({ { "hnsw", h, "hnsw" }, { "exact", v, "default (auto)" } }) do
    local qt = {}
    for r = 1, ROUNDS do
      local t0 = clock()
      for _, q in ipairs(qids) do
        local qvec = e:embed({ data.queries[q] }, { packed = true })[1]
        rag.fuse.rrf({ b:search(data.queries[q], 50), pair[2]:search(qvec, 50) }, { limit = 10 })
      end
      qt[r] = clock() - t0
    end
    print(string.format("raw core (bm25 + %s + rrf, ids only) %8.0f queries/s; the index: %s",
      pair[1], #qids / median(qt), pair[3]))
  end
end

do
  local lua = arg[-1] or "lua5.4"
  local rss = util.sh(lua .. " bench/index.lua " .. dir .. " --rss")
  print(string.format("RSS of a fresh process after ingesting with the defaults: %s MB (the"
    .. " documents as Lua tables included, as the peers include theirs)", rss))
end

print("at the end, " .. util.membw("--latency"))

if os.getenv("BENCH_JSON") then
  print(rag.json.encode(results))
end
