-- bench/pipeline.lua BEIR_DIR [ROUNDS]: what a pipeline adds to retrieval
-- (issue 22, acceptance E: rag.pipeline.hybrid answers >= 2,000 questions/s
-- on one core with a zero-latency LLM over a 5,000-document index).
--
-- Data: BEIR_DIR/corpus.jsonl (SciFact: 5,183 documents) in a rag.index
-- with the defaults (hashing embedder, exact vectors); the test queries of
-- qrels/test.tsv. LLM: a Lua object answering "... [1]." at once, with
-- usage, so only the pipeline's own work is timed: the hybrid search, MMR
-- reranking, packing, the answer prompt, citation checks and the trace.
-- Times: os.clock (this process's CPU time), the median of ROUNDS (default
-- 5) runs of every query once; the index's own hybrid search at the same
-- k and fetch_k is timed alongside, as the floor.
--   make bench-pipeline DATA=../shared/data
local rag = require("rag")
local util = require("bench.util")

local dir = arg[1]
if dir then
  dir = dir:gsub("/+$", "")
  local base, leaf = dir:match("^(.*)/([^/]+)$")
  util.data_dir(base or ".", (leaf or dir) .. "/corpus.jsonl", "bench-pipeline")
else
  util.data_dir(nil, "", "bench-pipeline")
end
local ROUNDS = tonumber(arg[2]) or 5
local TARGET = 2000

local data = assert(rag.eval.beir(dir))
local docs = {}
for id, d in pairs(data.corpus) do
  docs[#docs + 1] = { id = id, title = d.title, text = d.text }
end
local questions = {}
for q in pairs(data.qrels) do
  questions[#questions + 1] = data.queries[q]
end
table.sort(questions)

local idx = rag.index.new()
assert(idx:add_many(docs))

local llm = {
  chat = function()
    return { text = "The context says so [1].",
      usage = { prompt_tokens = 100, completion_tokens = 6, total_tokens = 106 } }
  end,
}
local p = rag.pipeline.hybrid({ index = idx, llm = llm })
local k, fetch_k = 5, 20 -- the pipeline's defaults: k 5, fetch_k max(20, 4 k)

local function rate(fn)
  local t = {}
  for _ = 1, 1 do -- warm: caches, the JIT
    for _, q in ipairs(questions) do
      fn(q)
    end
  end
  for r = 1, ROUNDS do
    local t0 = os.clock()
    for _, q in ipairs(questions) do
      fn(q)
    end
    t[r] = os.clock() - t0
  end
  return #questions / util.median(t)
end

print(string.format("rag.pipeline.hybrid on %s: %d documents, %d questions; %s; %s", dir, #docs,
  #questions, util.cpu(), _VERSION))
local search = rate(function(q)
  idx:search(q, { mode = "hybrid", k = fetch_k })
end)
local answer = rate(function(q)
  assert(p:answer(q))
end)
print(string.format("index hybrid search (k %d)  %8.0f questions/s", fetch_k, search))
print(string.format("hybrid pipeline answer     %8.0f questions/s (k %d; target >= %d: %s)", answer,
  k, TARGET, answer >= TARGET and "met" or "MISSED"))
