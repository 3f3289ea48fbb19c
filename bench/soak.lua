-- bench/soak.lua: long runs that must not grow. A rag.index of 2,000
-- generated documents (a 3,000-word vocabulary, 40 to 160 words each,
-- hashing embedder dim 64, HNSW) takes 1,000,000 hybrid searches, then
-- 100,000 churn cycles (remove a document, add a new one, search), with the
-- process's RSS (VmRSS, after a full collection; and again after the
-- allocator returned its free pages, "trimmed"), the Lua heap and the
-- index's own memory sampled at every tenth of each run. The RSS at the end
-- must be within 2% of the RSS at the 10% mark (the first tenth warms the
-- allocator's and the index's pools). Exit 1 when it is not.
--
-- Usage: lua5.4 bench/soak.lua [SEARCHES [CYCLES]]   (make soak)
local rag = require("rag")
local util = require("bench.util")

local SEARCHES = tonumber(arg[1]) or 1000000
local CYCLES = tonumber(arg[2]) or 100000
local LIMIT = 0.02

local seed = 12345
local function rand(n) -- a small LCG: the same documents on every machine
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed % n + 1
end
local words = {}
for i = 1, 3000 do
  local w = {}
  for j = 1, 3 + i % 6 do
    w[j] = string.char(96 + (i * 7 + j * 13) % 26 + 1)
  end
  words[i] = table.concat(w) .. i
end
local function text(n)
  local t = {}
  for i = 1, n do
    t[i] = words[rand(#words)]
  end
  return table.concat(t, " ") .. "."
end


local idx = rag.index.new({ embedder = rag.embed.hashing({ dim = 64 }), vector = "hnsw",
  chunk = { size = 128, overlap = 16 } })
local live = {}
local docs = {}
for i = 1, 2000 do
  docs[i] = { id = "d" .. i, text = text(40 + rand(120)) }
  live[#live + 1] = "d" .. i
end
local next_id = 2000
assert(idx:add_many(docs))
local queries = {}
for i = 1, 500 do
  queries[i] = text(2 + i % 4)
end

print(("soak: %s, %s; %d documents, %d chunks"):format(util.cpu(), _VERSION, idx:count(),
  idx:stats().chunks))

-- runs `n` steps of `step`, sampling at each tenth; returns the growth
local function run(name, n, step)
  local marks = {}
  local t0 = os.clock()
  for tenth = 1, 10 do
    for i = (tenth - 1) * n / 10 + 1, tenth * n / 10 do
      step(i)
    end
    collectgarbage()
    collectgarbage()
    local rss = util.rss_kb()
    rag.core.index.trim() -- what stays once the allocator returns its free pages
    marks[tenth] = { rss = rss, trimmed = util.rss_kb(), heap = collectgarbage("count"),
      index = idx:stats().memory or 0 }
    print(("  %-7s %3d%%  rss %6.1f MB (trimmed %6.1f)  lua heap %5.1f MB  index %6.1f MB  %6.1f s")
      :format(name, tenth * 10, rss / 1024, marks[tenth].trimmed / 1024, marks[tenth].heap / 1024,
        marks[tenth].index / 1048576, os.clock() - t0))
    io.stdout:flush()
  end
  local growth = (marks[10].rss - marks[1].rss) / marks[1].rss
  print(("  %s: %d steps, RSS %+.2f%% between the 10%% and 100%% marks (limit %.0f%%)"):format(
    name, n, 100 * growth, 100 * LIMIT))
  return growth
end

local g1 = run("search", SEARCHES, function(i)
  local hits = idx:search(queries[i % #queries + 1], { k = 10 })
  assert(#hits > 0)
end)

local g2 = run("churn", CYCLES, function(i)
  local at = rand(#live)
  assert(idx:remove(live[at]))
  next_id = next_id + 1
  live[at] = "d" .. next_id
  assert(idx:add({ id = live[at], text = text(40 + rand(120)) }) == "added")
  idx:search(queries[i % #queries + 1], { k = 5 })
end)
assert(idx:count() == 2000)

if g1 > LIMIT or g2 > LIMIT then
  print("soak: FAILED: the RSS grew more than " .. 100 * LIMIT .. "%")
  os.exit(1)
end
print("soak: ok")
