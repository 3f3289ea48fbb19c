-- examples/08_index.lua: a document index, offline: add documents with
-- metadata, search in the three modes with a filter, update and remove,
-- save, reopen read-only and search again.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' lua5.4 examples/08_index.lua
local rag = require("rag")

local notes = {
  { id = "bm25", title = "BM25", source = "notes/bm25.md",
    meta = { year = 1994, tags = { "lexical" } },
    text = "BM25 ranks documents by the query terms they contain, weighting rare terms more "
      .. "and saturating repeated ones. It needs no training and is hard to beat." },
  { id = "hnsw", title = "HNSW", source = "notes/hnsw.md",
    meta = { year = 2016, tags = { "vectors" } },
    text = "Hierarchical navigable small world graphs find approximate nearest neighbours "
      .. "of a vector in logarithmic time by greedy search through layered graphs." },
  { id = "rrf", title = "Reciprocal rank fusion", source = "notes/rrf.md",
    meta = { year = 2009, tags = { "fusion", "lexical", "vectors" } },
    text = "RRF fuses ranked lists by summing 1 / (60 + rank): documents ranked well by both "
      .. "BM25 and vector search rise to the top." },
  { id = "litm", title = "Lost in the middle", source = "notes/litm.md", meta = { year = 2023 },
    text = "Language models use context at the start and end of a prompt better than in "
      .. "the middle, so the best passages go to the edges." },
}

-- BM25 plus exact vectors from the offline hashing embedder; chunks of at
-- most 64 cl100k tokens.
local idx = rag.index.new({ chunk = { size = 64, overlap = 8 } })
local counts = assert(idx:add_many(notes))
print(string.format("added %d, updated %d, unchanged %d: %d documents, %d chunks", counts.added,
  counts.updated, counts.unchanged, idx:count(), idx:stats().leaves))
print("default mode with the hashing embedder: " .. idx:default_mode())

local function show(title, hits)
  print(title)
  for i, h in ipairs(hits) do
    -- a rank is nil when the hit is not in that list (shown as "-")
    print(string.format("  %d. %-8s %.4f  %s (%s)  ranks bm25=%s vector=%s", i, h.id, h.score,
      h.title, h.source, h.ranks.bm25 or "-", h.ranks.vector or "-"))
  end
end

for _, mode in ipairs({ "bm25", "vector", "hybrid" }) do
  show(mode .. ": 'ranking documents'", idx:search("ranking documents", { mode = mode, k = 3 }))
end
show("filtered to tags 'vectors', since 2000:", idx:search("ranking documents",
  { k = 3, filter = { tags = "vectors", year = { gte = 2000 } } }))

-- an unchanged document is skipped; an edited one replaces its chunks everywhere
print("again: " .. idx:add(notes[1]))
print("edited: " .. idx:add({ id = "litm", title = "Lost in the middle", source = "notes/litm.md",
  meta = { year = 2023 }, text = "Put the best passages first and last in the prompt." }))
print("old words gone: " .. #idx:search("language models"))
print("removed rrf: " .. tostring(idx:remove("rrf")) .. ", now " .. idx:count()
  .. " documents")

-- save, reopen read-only (the store is mapped, shared between processes)
local dir = os.tmpname()
os.remove(dir)
assert(idx:save(dir))
local ro = assert(rag.index.open(dir, { readonly = true }))
local hit = ro:search("nearest neighbours", { k = 1 })[1]
print(string.format("reopened: %d documents, generation %d, mapped %s; top hit %s: %q",
  ro:count(), ro:stats().generation, tostring(ro:stats().mapped), hit.id, hit.text:sub(1, 40)))
print("read-only add: " .. select(2, pcall(ro.add, ro, notes[3])):gsub("^.-: ", "", 1))
ro:close()
os.execute("rm -rf " .. dir)
