-- bench/peers/export_vectors.lua DATA OUTDIR: the vectors that bench/index.lua
-- and its peers (bench/peers/index_*) all index, so that every system
-- searches the same numbers. SciFact (DATA/scifact; skipped, exit 0, when
-- absent) embedded with rag.embed.hashing{ dim = 512 } (the offline
-- default), through h:embed(texts, { packed = true }), which returns
-- little-endian float32 strings ready to write.
--
-- Writes into OUTDIR (created if missing):
--   corpus.f32   one row of 512 float32 per document, in corpus.jsonl order;
--                the text embedded is title .. "\n\n" .. text
--   queries.f32  one row per test query: the queries of queries.jsonl whose
--                id is in qrels/test.tsv, in queries.jsonl order
--   ids.json     { dim, embedder = h:config(), corpus = [ids], queries = [ids] }
--                naming the rows of the two files in order
--   make bench-index-peers DATA=../shared/data
local rag = require("rag")
local util = require("bench.util")

local DIM = 512
local dir = util.data_dir(arg[1], "scifact/corpus.jsonl", "bench-index-peers") .. "/scifact"
local out = arg[2] or error("usage: export_vectors.lua DATA OUTDIR")

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  assert(f:write(s))
  assert(f:close())
end

local ids, texts = {}, {}
for line in io.lines(dir .. "/corpus.jsonl") do
  local d = assert(rag.json.decode(line))
  ids[#ids + 1] = d._id
  texts[#texts + 1] = (d.title or "") .. "\n\n" .. d.text
end

local judged, first = {}, true
for line in io.lines(dir .. "/qrels/test.tsv") do
  if first then
    first = false -- the header
  else
    judged[line:match("^(%S+)\t")] = true
  end
end
local qids, qtexts = {}, {}
for line in io.lines(dir .. "/queries.jsonl") do
  local q = assert(rag.json.decode(line))
  if judged[q._id] then
    qids[#qids + 1] = q._id
    qtexts[#qtexts + 1] = q.text
  end
end

local h = rag.embed.hashing({ dim = DIM })
local t0 = os.clock()
local cvec = assert(h:embed(texts, { packed = true }))
local qvec = assert(h:embed(qtexts, { packed = true }))
local secs = os.clock() - t0

assert(os.execute("mkdir -p '" .. out:gsub("'", "'\\''") .. "'"))
write(out .. "/corpus.f32", table.concat(cvec))
write(out .. "/queries.f32", table.concat(qvec))
write(out .. "/ids.json", rag.json.encode({
  dim = DIM,
  embedder = h:config(),
  corpus = ids,
  queries = qids,
}))
io.stderr:write(string.format("export_vectors: %d documents, %d queries, dim %d, " ..
  "embedded in %.2f s (rag %s) -> %s\n", #ids, #qids, DIM, secs, rag._VERSION, out))
