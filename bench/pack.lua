-- bench/pack.lua [DATA_DIR [RUNS]]: rag.pack over 200 retrieved chunks into
-- a 4,000-token budget counted with the exact cl100k_base tokenizer (the
-- fusion issue's target: <= 1 ms a call), and the other options for
-- reference.
--
-- Data: the SciFact abstracts (DATA_DIR/scifact/corpus.jsonl) cut by
-- rag.chunk.recursive into chunks of at most 256 cl100k tokens; 200 of them
-- are drawn with a seeded Park-Miller generator (each with its neighbours in
-- the same abstract often drawn too, so
-- merge_adjacent has work) and given seeded scores, so every run packs the
-- same items. Without the data directory, seeded synthetic English (words
-- from a fixed list) is chunked instead. Timing: one thread, os.clock (the
-- process's CPU time); each figure is the median of RUNS (default 301)
-- calls after 20 untimed ones, and includes reading the 200 Lua item tables
-- and building the result table, which is what a caller pays.
--   make bench-pack DATA=../shared/data   (or: lua5.4 bench/pack.lua ../shared/data)
local rag = require("rag")
local util = require("bench.util")

local data = arg[1] or "(none given)"
local RUNS = tonumber(arg[2]) or 301
local N, BUDGET, CHUNK = 200, 4000, 256

local cl100k = assert(rag.tokenizer.get("cl100k_base"))

local seed = 42
local function rng(n)
  seed = (16807 * seed) % 2147483647
  return seed % n + 1
end

-- The documents: SciFact abstracts, or seeded synthetic ones.
local docs, source = {}, "SciFact abstracts"
local f = io.open(data .. "/scifact/corpus.jsonl", "rb")
if f then
  for line in f:lines() do
    local d = rag.json.decode(line)
    docs[#docs + 1] = { id = tostring(d._id), text = d.title .. "\n\n" .. d.text }
    if #docs >= 2000 then
      break
    end
  end
  f:close()
else
  source = "synthetic English (no " .. data .. "/scifact)"
  local words = {}
  for w in ([[the of and to in a is that for it as was with be by on not he this are or
    his from at which but have an they you were her she there been one all we their has
    would when if so no what more out up into do any can could about than only other time
    new some these two may first then do any like my now over such our man me even most made
    after also did many before must through back years where much your way well down should
    because each just those people how too little state good very make world still own see
    men work long get here between both life being under never day same another know while
    last might us great old year off come since against go came right used take three cells
    protein gene patients study results increased expression cell mice risk treatment]]):
      gmatch("%a+") do
    words[#words + 1] = w
  end
  for d = 1, 600 do
    local t = {}
    for s = 1, rng(12) + 4 do
      local sent = {}
      for w = 1, rng(18) + 5 do
        sent[w] = words[rng(#words)]
      end
      t[s] = sent[1]:sub(1, 1):upper() .. table.concat(sent, " "):sub(2) .. "."
    end
    docs[d] = { id = "d" .. d, text = table.concat(t, " ") }
  end
end

-- Chunks of the documents, then 200 of them with seeded scores.
local chunks = {}
for _, d in ipairs(docs) do
  local list = rag.chunk.recursive(d.text, { size = CHUNK, tokenizer = cl100k })
  for _, c in ipairs(list) do
    chunks[#chunks + 1] = { id = d.id .. "#" .. c.index, text = c.text, start = c.start,
      stop = c.stop, source = d.id, tokens = c.tokens }
  end
end
local items, taken, tokens, bytes = {}, {}, 0, 0
while #items < N do
  local i = rng(#chunks)
  if rng(3) == 1 and i < #chunks and taken[i] then
    i = i + 1 -- a neighbour of a chunk already drawn
  end
  if not taken[i] then
    taken[i] = true
    local c = chunks[i]
    items[#items + 1] = { id = c.id, text = c.text, start = c.start, stop = c.stop,
      source = c.source, score = rng(1000000) / 1000000 }
    tokens = tokens + c.tokens
    bytes = bytes + #c.text
  end
end

local function time(fn)
  return util.time_us(fn, RUNS)
end

print(string.format("machine: %s, %s cores; %s", util.cpu(), util.sh("nproc"), _VERSION))
print(string.format("data: %d chunks of %s (<= %d cl100k tokens each; %d tokens, %d bytes in all)",
  #items, source, CHUNK, tokens, bytes))

local function row(name, opts, target)
  local res = rag.pack(items, opts)
  local us = time(function() rag.pack(items, opts) end)
  print(string.format("%-46s %8.1f us median of %d; %2d passages, %4d tokens%s", name, us, RUNS,
    #res.citations, res.tokens, util.target(us, target)))
  return res
end

local base = { budget = BUDGET, tokenizer = cl100k }
local function with(extra)
  local t = {}
  for k, v in pairs(base) do
    t[k] = v
  end
  for k, v in pairs(extra) do
    t[k] = v
  end
  return t
end

local res = row("pack, cl100k, budget 4000, relevance", base, 1000)
assert(cl100k:count(res.text) == res.tokens and res.tokens <= BUDGET)
row("pack, cl100k, order = \"edges\"", with({ order = "edges" }))
row("pack, cl100k, merge_adjacent + truncate", with({ merge_adjacent = true, truncate = true }))
row("pack, cl100k, per_source = 1", with({ per_source = 1 }))
row("pack, cl100k, budget 8000", with({ budget = 8000 }))
row("pack, approx counter", with({ tokenizer = rag.tokenizer.approx() }))
local us = time(function() cl100k:count(res.text) end)
print(string.format("%-46s %8.1f us median of %d (the floor: counting the output once)",
  "for reference: cl100k:count(result.text)", us, RUNS))
