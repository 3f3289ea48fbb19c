-- bench/graph.lua DATA_DIR [ROUNDS]: building the entity graph of SciFact
-- with the heuristic extractor against building its BM25 index (issue 27,
-- acceptance C: the graph build takes at most 2x the BM25 build).
--
-- Data: DATA_DIR/scifact/corpus.jsonl; each document is one chunk
-- "<id>#1" whose text is title .. "\n" .. text. A graph run is
-- rag.core.graph.new() then g:extract(chunk, text) for every document; a
-- BM25 run is rag.bm25.new() (defaults: lucene, the english analyzer) then
-- b:add(chunk, text) for the same texts. Single thread; times are os.clock
-- (CPU time), each the median of ROUNDS (default 5) runs, the two kinds of
-- run alternating. Also reports the
-- graph's stats, its save and load times, and whether a reload gives the
-- same neighbourhoods.
--   make bench-graph DATA=../shared/data
local rag = require("rag")
local util = require("bench.util")

local dir = util.data_dir(arg[1], "scifact/corpus.jsonl", "bench-graph") .. "/scifact"
local ROUNDS = tonumber(arg[2]) or 5
local clock = os.clock
local graph = rag.core.graph

local ids, texts, bytes = {}, {}, 0
for line in io.lines(dir .. "/corpus.jsonl") do
  local d = rag.json.decode(line)
  ids[#ids + 1] = d._id .. "#1"
  texts[#texts + 1] = (d.title or "") .. "\n" .. d.text
  bytes = bytes + #texts[#texts]
end

local function build_graph()
  local g = graph.new()
  local n = 0
  for i = 1, #ids do
    n = n + g:extract(ids[i], texts[i])
  end
  return g, n
end

local function build_bm25()
  local b = rag.bm25.new()
  for i = 1, #ids do
    b:add(ids[i], texts[i])
  end
  return b
end

-- The two builds alternate, so that a busy machine slows both alike.
local tbs, tgs, g, mentions = {}, {}, nil, 0
for r = 1, ROUNDS do
  collectgarbage()
  local t0 = clock()
  build_bm25():close()
  tbs[r] = clock() - t0
  if g then
    g:close()
  end
  collectgarbage()
  t0 = clock()
  g, mentions = build_graph()
  tgs[r] = clock() - t0
end
local tb, tg = util.median(tbs), util.median(tgs)
local s = g:stats()
print(string.format("SciFact: %d documents, %.1f MB", #ids, bytes / 1e6))
print(string.format("bm25 build:  %.3f s (%.0f docs/s)", tb, #ids / tb))
print(string.format("graph build: %.3f s (%.0f docs/s), %.2fx bm25 (target <= 2x: %s)", tg,
  #ids / tg, tg / tb, tg <= 2 * tb and "met" or "MISSED"))
print(string.format("graph: %d entities, %d edges, %d mentions (%d found), %d aliases",
  s.entities, s.edges, s.mentions, mentions, s.aliases))

local path = os.tmpname()
local t0 = clock()
local sum = assert(g:save(path))
local ts = clock() - t0
t0 = clock()
local h = assert(graph.load(path))
local tl = clock() - t0
print(string.format("save %.3f s, load %.3f s, %.1f MB", ts, tl, sum.size / 1e6))

-- the neighbourhoods of the 200 most mentioned entities, before and after
local keys = g:entities()
table.sort(keys, function(a, b)
  local x, y = #g:get(a).chunks, #g:get(b).chunks
  if x ~= y then
    return x > y
  end
  return a < b
end)
local same = true
for i = 1, math.min(200, #keys) do
  local a = g:neighbours({ keys[i] }, 2, { limit = 200 })
  local b = h:neighbours({ keys[i] }, 2, { limit = 200 })
  same = same and rag.json.encode(a) == rag.json.encode(b)
end
print("reloaded neighbourhoods identical: " .. tostring(same))
print("most mentioned: " .. table.concat(keys, ", ", 1, math.min(15, #keys)))
local cs = g:communities({ method = "components" })
print(string.format("components: %d, the largest %d entities", #cs, cs[1] and #cs[1] or 0))
os.remove(path)
