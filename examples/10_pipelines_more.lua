-- examples/10_pipelines_more.lua: the other pipelines, offline: sentence
-- windows with compression, multi-hop, adaptive (three questions, three
-- paths), corrective with a fallback retriever, and a router, all with
-- rag.llm.extractive (no server), each printing its answer, sources and
-- the branches its trace took.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' \
--     lua5.4 examples/10_pipelines_more.lua
local rag = require("rag")

local notes = {
  { id = "bm25", source = "notes/bm25.md", text = "BM25 ranks documents by the query terms "
    .. "they contain. Rare terms weigh more than common ones. The parameter k1 controls "
    .. "term-frequency saturation. The parameter b controls length normalisation." },
  { id = "rrf", source = "notes/rrf.md", text = "Reciprocal rank fusion sums 1 / (k + rank) "
    .. "over ranked lists. The constant k is usually 60. No single list dominates the result." },
  { id = "hnsw", source = "notes/hnsw.md", text = "HNSW graphs find approximate nearest "
    .. "neighbours. Each layer links a vector to its nearest neighbours. The parameter M sets "
    .. "how many links a vector keeps." },
}
-- sentence-sized chunks, so that a window is a few sentences around a hit
local idx = rag.index.new({ chunker = "sentences", chunk = { size = 24 },
  embedder = rag.embed.hashing({ dim = 256 }) })
assert(idx:add_many(notes))

local function show(name, r)
  print(string.format("%-10s %s", name, r.text))
  local ns = {}
  for n in pairs(r.citations) do
    ns[#ns + 1] = n
  end
  table.sort(ns)
  for _, n in ipairs(ns) do
    local c = r.citations[n]
    print(string.format("           [%d] %s (%s%s)", n, c.id, c.source,
      c.start and string.format(", bytes %d-%d", c.start, c.stop) or ""))
  end
  local branches = {}
  for _, e in ipairs(r.trace) do
    if e.kind == "branch" then
      branches[#branches + 1] = e.name
    end
  end
  print("           branches: " .. table.concat(branches, " > ") .. "; llm calls "
    .. r.usage.llm_calls)
end

-- window: one sentence found, read with its neighbours, cut to what helps
local p = rag.pipeline.window({ index = idx, k = 2, window = 1 })
show("window", assert(p:answer("What does the parameter k1 control?")))

-- multihop: two sub-questions (given here; an LLM writes them with the
-- decompose prompt), the first's finding carried into the second
p = rag.pipeline.multihop({ index = idx, k = 2, decompose = function()
  return { "What does the parameter k1 control?", "What is the usual constant k?" }
end })
show("multihop", assert(p:answer("What do k1 in BM25 and k in fusion do?")))

-- adaptive: the offline classifier picks no retrieval, one, or several
p = rag.pipeline.adaptive({ index = idx, k = 2 })
for _, q in ipairs({ "Hello!", "What does the parameter M set?",
    "Compare the parameter k1 and the constant k" }) do
  local r = assert(p:answer(q))
  show("adaptive", r)
  print("           path: " .. r.path)
end

-- corrective: a question the notes only half answer; the "web" (here a
-- second index standing in for rag.providers.websearch) fills the gap
local web = rag.index.new()
assert(web:add({ id = "web-mmr", source = "https://example.org/mmr", text = "Maximal "
  .. "marginal relevance picks passages that are relevant and unlike those already picked." }))
p = rag.pipeline.corrective({ index = idx, k = 2, fallback = web })
show("corrective", assert(p:answer("Which passages does maximal marginal relevance pick?")))

-- router: questions about ranking go to one pipeline, about vectors to another
p = rag.pipeline.router({ index = idx, routes = {
  { name = "ranking", examples = { "How are documents ranked?", "How are lists fused?" },
    pipeline = rag.pipeline.naive({ index = idx, k = 2 }) },
  { name = "vectors", examples = { "How are nearest neighbours found?" },
    pipeline = rag.pipeline.window({ index = idx, k = 1 }) },
} })
local r = assert(p:answer("How does HNSW find nearest neighbours?"))
show("router", r)
print("           route: " .. r.route)
