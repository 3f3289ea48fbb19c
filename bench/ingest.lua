-- bench/ingest.lua DATA_DIR [ROUNDS]: what a document index pays per
-- document on SciFact (DATA_DIR/scifact/corpus.jsonl; skipped, exit 0, when
-- absent): each document, title .. "\n\n" .. text, is cut by
-- rag.chunk.recursive at 512 cl100k_base tokens with 64 of overlap, and its
-- chunks are added to a rag.bm25 index (defaults). Reported: exact cl100k
-- counting of the documents (MB/s), chunking, BM25 of the chunks, and both
-- (documents/s); each "cold" with a tokenizer just loaded, as a new process
-- has it, and "warm" with its cache of short pieces filled by a pass before.
-- Single thread; each figure the median of ROUNDS (default 5) passes, in
-- CPU time (os.clock) and in wall time (lua-system's gettime, busted's
-- dependency; CPU time only without it). On a shared machine CPU time is
-- the steadier of the two.
-- Target (the document index issue): >= 23,000 documents/s for chunking
-- and BM25 together.
--   make bench-ingest DATA=../shared/data
local rag = require("rag")
local util = require("bench.util")

local data = util.data_dir(arg[1], "scifact/corpus.jsonl", "bench-ingest")
local ROUNDS = tonumber(arg[2]) or 5
local median = util.median
local has_system, system = pcall(require, "system")
local wall = has_system and system.gettime or os.clock

local docs, bytes = {}, 0
for line in io.lines(data .. "/scifact/corpus.jsonl") do
  local d = rag.json.decode(line)
  docs[#docs + 1] = d.title .. "\n\n" .. d.text
  bytes = bytes + #docs[#docs]
end
local vocab = rag.tokenizer.vocab_dir() .. "/cl100k_base.tiktoken"

-- fn(tok) timed ROUNDS times; cold: with a tokenizer loaded just before
-- (not timed), else with one that ran fn once before. The collector stops
-- while timing, so that one pass does not pay for another's garbage.
local function measure(cold, fn)
  local cpu, wt = {}, {}
  local warm = not cold and assert(rag.tokenizer.load(vocab, "cl100k_base"))
  if warm then
    fn(warm)
  end
  for r = 1, ROUNDS do
    local tok = warm or assert(rag.tokenizer.load(vocab, "cl100k_base"))
    collectgarbage()
    collectgarbage("stop")
    local c0, w0 = os.clock(), wall()
    fn(tok)
    cpu[r], wt[r] = os.clock() - c0, wall() - w0
    collectgarbage("restart")
    if not warm then
      tok:close()
    end
  end
  if warm then
    warm:close()
  end
  return median(cpu), median(wt)
end

local function count(tok)
  for i = 1, #docs do
    tok:count(docs[i])
  end
end

local chunks = {}
local function chunk(tok)
  local opts = { size = 512, overlap = 64, tokenizer = tok }
  for i = 1, #docs do
    chunks[i] = rag.chunk.recursive(docs[i], opts)
  end
end

local function index()
  local b = rag.bm25.new()
  for i = 1, #docs do
    local cs = chunks[i]
    for j = 1, #cs do
      b:add(i .. ":" .. j, cs[j].text)
    end
  end
  b:close()
end

local function both(tok)
  chunk(tok)
  index()
end

print(("SciFact: %d documents, %.1f MB; %d rounds; machine: %s, %s"):format(#docs, bytes / 1e6,
  ROUNDS, util.sh("uname -srm"), util.cpu()))
print(("times: median CPU s / median wall s%s"):format(has_system and "" or
  " (no lua-system: CPU twice)"))
for _, cold in ipairs({ true, false }) do
  local how = cold and "cold" or "warm"
  local c, w = measure(cold, count)
  print(("cl100k count, %s       %.4f / %.4f s  %6.1f / %6.1f MB/s"):format(how, c, w,
    bytes / c / 1e6, bytes / w / 1e6))
  c, w = measure(cold, chunk)
  print(("chunk.recursive, %s    %.4f / %.4f s  %6.0f / %6.0f documents/s"):format(how, c, w,
    #docs / c, #docs / w))
  if cold then
    c, w = measure(false, function() index() end)
    print(("bm25 of the chunks       %.4f / %.4f s  %6.0f / %6.0f documents/s"):format(c, w,
      #docs / c, #docs / w))
  end
  c, w = measure(cold, both)
  local verdict = #docs / c >= 23000 and "met" or "MISSED"
  print(("chunk + bm25, %s       %.4f / %.4f s  %6.0f / %6.0f documents/s  (target 23,000: %s)")
    :format(how, c, w, #docs / c, #docs / w, verdict))
end
