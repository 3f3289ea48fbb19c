-- examples/05_vectors.lua: exact and HNSW vector search, offline, over
-- seeded embedding-like vectors: build, search, filter, remove, save and load.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' lua5.4 examples/05_vectors.lua
local rag = require("rag")

-- Seeded vectors near a few "topics" (a real program would embed text).
local dim, x = 32, 42
local function rand()
  x = (16807 * x) % 2147483647
  return x / 2147483647 - 0.5
end
local topics = {}
for t = 1, 4 do
  topics[t] = {}
  for d = 1, dim do
    topics[t][d] = rand()
  end
end
local function near(t)
  local v = {}
  for d = 1, dim do
    v[d] = topics[t][d] + 0.2 * rand()
  end
  return v
end

local exact = rag.vec.new({ dim = dim, metric = "cosine" })
local graph = rag.hnsw.new({ dim = dim, M = 16, ef_construction = 200, seed = 100 })
for i = 1, 2000 do
  local v = rag.vec.pack(near(i % 4 + 1)) -- packed float32 strings work as well as tables
  exact:add("doc" .. i, v)
  graph:add("doc" .. i, v)
end
print(("%d vectors in each index, kernels: %s"):format(#graph, exact:stats().kernel))

local q = near(2)
local want = exact:search(q, 5)
local got = graph:search(q, 5, { ef = 64 })
for i = 1, 5 do
  print(("  %d. exact %-8s %.4f   hnsw %-8s %.4f"):format(i, want[i].id, want[i].score,
    got[i].id, got[i].score))
end

local only = {}
for i = 1, 2000, 10 do
  only["doc" .. i] = true
end
print("filtered to every tenth doc:", graph:search(q, 3, { filter = only })[1].id)

for i = 1, 2000, 2 do
  graph:remove("doc" .. i)
end
print(("after removing half: %d live, %d tombstones"):format(#graph, graph:stats().dead))

local path = os.tmpname()
assert(graph:save(path))
local again = assert(rag.hnsw.load(path))
print(("loaded %d vectors; same top hit: %s"):format(#again,
  tostring(again:search(q, 1)[1].id == graph:search(q, 1)[1].id)))
os.remove(path)

local ok, msg, code = rag.hnsw.load("/nonexistent/vectors.hnsw")
print(("a missing file: %s %s (%s)"):format(tostring(ok), msg, code))
local v = near(1)
v[5] = 0 / 0
print("a NaN component:", select(2, pcall(graph.add, graph, "nan", v)))
