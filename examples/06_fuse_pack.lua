-- examples/06_fuse_pack.lua: from two hit lists to the context an LLM sees,
-- offline: BM25 and vector search over a few notes, fused with RRF,
-- reordered for "lost in the middle", packed into a token budget with
-- citations, and the fused ranking scored with trec_eval's nDCG and MRR.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' lua5.4 examples/06_fuse_pack.lua
local rag = require("rag")

local notes = {
  { id = "bm25", source = "notes/bm25.md",
    text = "BM25 ranks documents by term frequency, saturated by k1, and document length." },
  { id = "rrf", source = "notes/rrf.md",
    text = "Reciprocal rank fusion adds 1 / (60 + rank) over the lists a document is in." },
  { id = "hnsw", source = "notes/hnsw.md",
    text = "HNSW is a graph of neighbours in layers; search walks it greedily from the top." },
  { id = "litm", source = "notes/litm.md",
    text = "Models read the start and end of a long context best, the middle worst." },
}

-- Lexical search.
local b = rag.bm25.new()
for _, n in ipairs(notes) do
  b:add(n.id, n.text)
end
local lexical = b:search("how does rank fusion combine lists", 4)

-- Vector search, with a toy embedder (a real program calls a provider).
local function embed(s)
  local v = { 0, 0, 0, 0, 0, 0, 0, 0 }
  for w in s:lower():gmatch("%a+") do
    local h = 0
    for i = 1, #w do
      h = (h * 31 + w:byte(i)) % 8
    end
    v[h + 1] = v[h + 1] + 1
  end
  return v
end
local v = rag.vec.new({ dim = 8, metric = "cosine" })
for _, n in ipairs(notes) do
  v:add(n.id, embed(n.text))
end
local semantic = v:search(embed("how does rank fusion combine lists"), 4)

-- Fuse the two rankings (ties break by id, so this is reproducible).
local fused = rag.fuse.rrf({ lexical, semantic })
for i, h in ipairs(fused) do
  print(string.format("%d. %-5s %.5f", i, h.id, h.score))
end

-- The best at the edges of the prompt.
local ordered = rag.rerank.litm(fused)
local names = {}
for i, h in ipairs(ordered) do
  names[i] = h.id
end
print("lost-in-the-middle order: " .. table.concat(names, ", "))

-- Pack the arranged notes into 120 cl100k tokens, with numbered citations.
-- order = "given" keeps litm's arrangement (the default, "relevance", would
-- sort by score again). When the budget cannot hold them all, pack the
-- fused list with order = "edges" instead: it picks the best first, then
-- arranges them the same way.
local by_id = {}
for _, n in ipairs(notes) do
  by_id[n.id] = n
end
local items = {}
for i, h in ipairs(ordered) do
  local n = by_id[h.id]
  items[i] = { id = n.id, text = n.text, source = n.source, score = h.score }
end
local packed = rag.pack(items, { budget = 120, tokenizer = rag.tokenizer.get("cl100k_base"),
  order = "given" })
print(string.format("packed %d of %d notes in %d tokens:", #packed.used, #items, packed.tokens))
print(packed.text)
for n, c in ipairs(packed.citations) do
  print(string.format("[%d] -> %s (%s)", n, c.id, c.source))
end

-- Score the fused ranking against a judgement: "rrf" is the one answer.
local m = rag.eval.ir({ q1 = fused }, { q1 = { rrf = 1 } }, { "ndcg@10", "mrr" })
print(string.format("ndcg@10 %.4f  mrr %.4f", m["ndcg@10"], m.mrr))
