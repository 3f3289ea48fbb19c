-- examples/09_pipelines.lua: the first pipelines, offline: naive, hybrid,
-- fusion, HyDE and step-back answer questions with cited sources from a
-- small index with rag.llm.extractive (no server); a follow-up is condensed;
-- a limit ends a run with "budget" and its trace.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' lua5.4 examples/09_pipelines.lua
local rag = require("rag")

local notes = {
  { id = "bm25", title = "BM25", source = "notes/bm25.md",
    text = "BM25 ranks documents by the query terms they contain, weighting rare terms more "
      .. "and saturating repeated ones. The parameter k1 controls term-frequency saturation." },
  { id = "hnsw", title = "HNSW", source = "notes/hnsw.md",
    text = "Hierarchical navigable small world graphs find approximate nearest neighbours "
      .. "of a vector in logarithmic time by greedy search through layered graphs." },
  { id = "rrf", title = "Reciprocal rank fusion", source = "notes/rrf.md",
    text = "Reciprocal rank fusion sums 1 / (k + rank) over ranked lists. The constant k is "
      .. "usually 60, so that no single list dominates." },
  { id = "litm", title = "Lost in the middle", source = "notes/litm.md",
    text = "Language models use context at the start and end of a prompt better than in "
      .. "the middle, so the best passages go to the edges." },
}

local idx = rag.index.new()
assert(idx:add_many(notes))
local llm = rag.llm.extractive()

local question = "What is the usual constant k in reciprocal rank fusion?"
for _, name in ipairs({ "naive", "hybrid", "fusion", "hyde", "stepback" }) do
  local p = rag.pipeline[name]({ index = idx, llm = llm, k = 3 })
  local r = assert(p:answer(question))
  print(string.format("%-8s %s", name, r.text))
  for n, c in pairs(r.citations) do
    print(string.format("         [%d] %s (%s, bytes %d-%d)", n, c.doc_id, c.source, c.start,
      c.stop))
  end
  local steps = {}
  for _, e in ipairs(r.trace) do
    if e.kind == "step" and e.depth == 0 then
      steps[#steps + 1] = e.name
    end
  end
  print(string.format("         steps: %s; llm calls %d", table.concat(steps, " > "),
    r.usage.llm_calls))
end

-- a follow-up question: the conversation is condensed before retrieval
local p = rag.pipeline.naive({ index = idx, llm = llm, k = 3 })
local r = assert(p:answer("What does its parameter k1 control?", { history = {
  { role = "user", content = "How does BM25 rank documents?" },
  { role = "assistant", content = "By the query terms they contain [1]." },
} }))
print("follow-up, retrieved for: " .. r.question)
print("  " .. r.text)

-- no LLM calls allowed: the run stops before the answer, with what it has
local strict = rag.pipeline.fusion({ index = idx, llm = llm, limits = { llm_calls = 1 } })
local res, msg, code, partial = strict:answer(question)
print(string.format("with llm_calls = 1: %s, %s (%s); %d contexts packed", tostring(res), msg,
  code, #partial.contexts))
