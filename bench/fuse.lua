-- bench/fuse.lua [RUNS]: rag.fuse.rrf over two hit lists of 1,000 hits each
-- (the fusion issue's target: <= 100 us a call), and score fusion and the
-- rerankers on the same lists for reference.
--
-- Data: seeded (Park-Miller generator), so the same on every run: two lists
-- of 1,000 { id =, score = } hits whose ids are drawn from 1,500 document
-- ids ("doc" .. n), about two thirds shared, scores descending. Timing: one
-- thread, os.clock (CPU time of the process); each figure is the median of
-- RUNS (default 301) timed calls, after 20 untimed ones; the time includes
-- reading the Lua tables and building the fused list of { id, score } hits,
-- which is what a caller pays. The target is read as fusing the two lists
-- and returning the top 100 (opts.limit); returning all ~1,300 fused hits
-- is reported too, beside what plain Lua takes just to build that many
-- { id =, score = } tables (the floor for any full result on this VM).
--   lua5.4 bench/fuse.lua
local rag = require("rag")
local util = require("bench.util")

local RUNS = tonumber(arg[1]) or 301

local seed = 42
local function rng(n)
  seed = (16807 * seed) % 2147483647
  return seed % n + 1
end

local function list(n, pool)
  local seen, t = {}, {}
  while #t < n do
    local id = "doc" .. rng(pool)
    if not seen[id] then
      seen[id] = true
      t[#t + 1] = { id = id, score = (n - #t) / n }
    end
  end
  return t
end

local A, B = list(1000, 1500), list(1000, 1500)

local function time(f)
  return util.time_us(f, RUNS)
end

print(string.format("machine: %s, %s cores; %s", util.cpu(), util.sh("nproc"), _VERSION))
print(string.format("data: two lists of %d and %d hits, %d distinct ids in all", #A, #B,
  #rag.fuse.rrf({ A, B })))
local function row(name, us, target)
  print(string.format("%-40s %9.1f us median of %d%s", name, us, RUNS, util.target(us, target)))
end
row("fuse.rrf (paper), limit 100", time(function() rag.fuse.rrf({ A, B }, { limit = 100 }) end),
  100)
row("fuse.rrf (paper), every fused hit", time(function() rag.fuse.rrf({ A, B }) end))
local ids = {}
for i, h in ipairs(rag.fuse.rrf({ A, B })) do
  ids[i] = h.id
end
row(string.format("plain Lua: build %d hit tables", #ids), time(function()
  local out = {}
  for i = 1, #ids do
    out[i] = { id = ids[i], score = i * 0.5 }
  end
  return out
end))
row("fuse.rrf (haystack, weights), limit 100",
  time(function() rag.fuse.rrf({ A, B }, { preset = "haystack", weights = { 2, 1 }, limit = 100 })
  end))
row("fuse.scores (dbsf, sum), limit 100",
  time(function() rag.fuse.scores({ A, B }, { method = "dbsf", limit = 100 }) end))
row("rerank.litm (1,000 hits)", time(function() rag.rerank.litm(A) end))
row("rerank.cutoff (top_p 0.9, 1,000 hits)",
  time(function() rag.rerank.cutoff(A, { top_p = 0.9 }) end))
