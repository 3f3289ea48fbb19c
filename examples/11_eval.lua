-- examples/11_eval.lua: evaluation offline. Two search modes compared per
-- query with a paired significance test (rag.eval.ir, rag.eval.compare);
-- answers scored by rag.eval.ragas with a toy judge that matches words (any
-- object with :chat is a judge: use a real LLM for real numbers); what the
-- scores say to change (rag.eval.diagnose).
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' \
--     lua5.4 examples/11_eval.lua
local rag = require("rag")

-- {====== Retrieval: bm25 against vectors ======}

local notes = {
  { id = "bm25", text = "BM25 ranks documents by the query terms they contain. The parameter "
    .. "k1 controls term-frequency saturation." },
  { id = "rrf", text = "Reciprocal rank fusion sums 1 / (k + rank) over ranked lists. The "
    .. "constant k is usually 60." },
  { id = "hnsw", text = "HNSW graphs find approximate nearest neighbours. The parameter M "
    .. "sets how many links a vector keeps." },
  { id = "mmr", text = "Maximal marginal relevance picks results that are relevant and unlike "
    .. "the ones already picked." },
  { id = "litm", text = "Models read the start and the end of a long context best, so the "
    .. "packer puts the strongest passages at the edges." },
  { id = "chunk", text = "Chunks are cut at sentence and paragraph boundaries, with a hard "
    .. "limit in tokens." },
}
local idx = rag.index.new({ embedder = rag.embed.hashing({ dim = 64 }) })
assert(idx:add_many(notes))

local queries = {
  q1 = "what does k1 control", q2 = "constant of reciprocal rank fusion",
  q3 = "links per vector in HNSW", q4 = "diverse results", q5 = "lost in the middle",
  q6 = "where are documents split",
}
local qrels = { q1 = { bm25 = 1 }, q2 = { rrf = 1 }, q3 = { hnsw = 1 }, q4 = { mmr = 1 },
  q5 = { litm = 1 }, q6 = { chunk = 1 } }

local function per_query(mode)
  local run = {}
  for q, text in pairs(queries) do
    run[q] = {}
    for i, h in ipairs(idx:search(text, { k = 3, mode = mode, group = "doc" })) do
      run[q][i] = h.doc_id
    end
  end
  local _, per = rag.eval.ir(run, qrels, { "mrr", "ndcg@3" }, { per_query = true })
  return per
end

local cmp = rag.eval.compare(per_query("bm25"), per_query("vector"))
for _, m in ipairs({ "mrr", "ndcg@3" }) do
  local r = cmp.metrics[m]
  print(string.format("%-7s bm25 %.3f  vector %.3f  diff %+.3f  p %.3f  (n %d)", m, r.a, r.b,
    r.diff, r.p, r.n))
end

-- {====== Answers: a toy judge ======}

-- The words of s of four letters or more, lowercased.
local function words(s)
  local out = {}
  for w in s:lower():gmatch("%a%a%a%a+") do
    out[w] = true
  end
  return out
end

-- How many words of a are in b.
local function shared(a, b)
  local wb, n = words(b), 0
  for w in pairs(words(a)) do
    n = n + (wb[w] and 1 or 0)
  end
  return n
end

-- Replies as the judge prompts ask, by word overlap.
local judge = {}
function judge.chat(_, messages)
  local user = messages[#messages].content
  local reply
  local text = user:match("\nText:\n(.*)$")
  local context, list = user:match("^Context:\n(.-)\n\nStatements:\n(.*)$")
  local reference, passages = user:match("\nReference answer:\n(.-)\n\nContext passages:\n(.*)$")
  if text then -- eval_statements: one statement a sentence
    local st = {}
    for _, s in ipairs(rag.text.sentences(text)) do
      st[#st + 1] = s.text
    end
    reply = { statements = st }
  elseif context then -- eval_support: all of a statement's words in the context
    local vs = {}
    for s in list:gmatch("%d+%. ([^\n]+)") do
      local ok = shared(s, context) == shared(s, s)
      vs[#vs + 1] = { statement = s, verdict = ok and 1 or 0, reason = "word match" }
    end
    reply = { verdicts = vs }
  elseif reference then -- eval_context: two words shared with the reference
    local vs = {}
    for p in passages:gmatch("%[%d+%] ([^\n]+)") do
      vs[#vs + 1] = { verdict = shared(p, reference) >= 2 and 1 or 0, reason = "word match" }
    end
    reply = { verdicts = vs }
  else
    reply = {} -- a prompt this judge does not play: the verdict fails
  end
  return { text = rag.json.encode(reply) }
end

local samples = {
  { question = "What does k1 control in BM25?",
    answer = "In BM25, k1 controls term-frequency saturation. Its default is 2.0.",
    contexts = { notes[1].text, notes[2].text },
    ground_truth = "The parameter k1 controls term-frequency saturation in BM25." },
  { question = "How many links does an HNSW vector keep?",
    answer = "The parameter M sets how many links a vector keeps.",
    contexts = { notes[4].text, notes[3].text },
    ground_truth = "The parameter M sets how many links each HNSW vector keeps." },
}
local r = assert(rag.eval.ragas(samples, { llm = judge,
  metrics = { "faithfulness", "context_precision", "context_recall" } }))
for _, m in ipairs(r.metrics) do
  print(string.format("%-17s %.3f over %d samples", m, r.scores[m], r.counts[m]))
end
print("sample 1, statement 2: " .. r.per_sample[1].verdicts.faithfulness[2].statement
  .. " -> " .. r.per_sample[1].verdicts.faithfulness[2].verdict)
print("judge calls: " .. r.usage.llm_calls)

-- without a judge nothing is guessed
local offline = assert(rag.eval.ragas(samples))
print("no llm: faithfulness " .. offline.unavailable.faithfulness)

-- {====== What to change ======}

for _, f in ipairs(rag.eval.diagnose(r.scores)) do
  print(f.id .. ": " .. f.evidence)
  print("  try: " .. f.suggestions[1])
end
