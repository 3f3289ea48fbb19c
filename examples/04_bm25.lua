-- examples/04_bm25.lua: a BM25 index over a few notes, offline: search,
-- filter, explain, change, save and load.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' lua5.4 examples/04_bm25.lua
local rag = require("rag")

local notes = {
  rrf = "Reciprocal rank fusion combines BM25 and vector hits; k = 60 is the usual constant.",
  bm25 = "BM25 ranks documents by term frequency, inverse document frequency and length.",
  chunk = "Chunkers cut documents into passages that fit the model's token budget.",
  hnsw = "HNSW is a graph index for approximate nearest neighbours of vectors.",
  cjk = "中文检索使用二元分词：向量检索和关键词检索可以融合。",
}

local idx = rag.bm25.new({ k1 = 1.2, b = 0.75 }) -- the defaults; variant = "lucene"
local ids = {}
for id in pairs(notes) do
  ids[#ids + 1] = id
end
table.sort(ids)
for _, id in ipairs(ids) do
  assert(idx:add(id, notes[id]))
end
print(("%d documents"):format(#idx))

local function show(title, hits)
  print(title)
  for i, h in ipairs(hits) do
    print(("  %d. %-6s %.4f"):format(i, h.id, h.score))
  end
end

show("search 'ranking documents with BM25':", idx:search("ranking documents with BM25", 3))
show("search '向量检索' (CJK bigrams):", idx:search("向量检索", 3))
show("filtered to {chunk, hnsw}:",
  idx:search("documents vectors", 5, { filter = { chunk = true, hnsw = true } }))

local ex = idx:explain("ranking documents with BM25", "bm25")
print(("explain bm25: score %.4f, %d terms, avgdl %.2f"):format(ex.score, ex.dl, ex.avgdl))
for _, t in ipairs(ex.terms) do
  print(("  %-8s tf %d df %d idf %.4f weight %.4f"):format(t.term, t.tf, t.df, t.idf, t.weight))
end

idx:add("bm25", "Okapi BM25 was developed at City University London.") -- replaces
print("removed hnsw:", idx:remove("hnsw"), "again:", idx:remove("hnsw"))
show("after changes, 'vectors':", idx:search("vectors", 3))

local path = os.tmpname()
assert(idx:save(path))
local copy = assert(rag.bm25.load(path))
local s = copy:stats()
print(("loaded: %d docs, %d terms, %d postings in %d bytes"):format(s.docs, s.terms, s.postings,
  s.bytes))
os.remove(path)

local _, msg, code = rag.bm25.load("/nonexistent/notes.bm25")
print(("missing file: %s (%s)"):format(msg, code))
local ok
ok, msg, code = idx:add("bad", "caf\233") -- Latin-1, not UTF-8
print(("invalid UTF-8: %s (%s)"):format(msg, code), ok)
idx:close()
copy:close()
