--- rag.eval.diagnose: what to change, from the high/low pattern of the
-- answer-level metrics. Rows 1-4 are seed 002's table ("why is my AI still
-- dumb with RAG": answer correctness x context recall x context precision);
-- the others read faithfulness, answer relevancy, recall and precision on
-- their own, as RAGAS defines them. See docs/evaluation.md.
-- @module rag.eval.diagnose
local opts_check = require("rag.opts").check

local type, ipairs, pairs, error, format, concat = type, ipairs, pairs, error, string.format,
  table.concat

local M = {}

local FNAME = "rag.eval.diagnose"

--- The default thresholds: a metric at or above its threshold is high,
-- below it low. Seed 004's targets (faithfulness > 0.85, answer relevancy
-- > 0.80, context precision > 0.75, context recall > 0.80; its lines
-- 345-348); answer
-- correctness 0.7 (0.75 x F1 + 0.25 x similarity: about two statements in
-- three right).
M.THRESHOLDS = {
  faithfulness = 0.85,
  answer_relevancy = 0.80,
  context_precision = 0.75,
  context_recall = 0.80,
  answer_correctness = 0.70,
}

local THRESHOLDS = {}
for k, v in pairs(M.THRESHOLDS) do
  THRESHOLDS[k] = { "number", min = 0, max = 1, default = v }
end

local SCHEMA = { thresholds = { "table" } }

-- Each row: `when` = { metric = "high" | "low" }, all present and matching;
-- `unless` = metrics whose low value an earlier row already explained
-- (the row is then left out, so one cause is not said twice).
M.ROWS = {
  { -- seed 002 (002_a4cab80abd24db44.txt), row 1: line 159, remedy line 168
    id = "generator",
    when = { answer_correctness = "low", context_recall = "high", context_precision = "high" },
    cause = "the model fails although the right context was retrieved and ranked first: the "
      .. "LLM is too weak, or the chunks lack the surrounding text they need",
    suggestions = {
      "use a larger or stronger LLM",
      "give the chunks their context: a sliding window (rag.chunk.window, "
        .. "search expand = { window = }) or larger, structure-aware chunks",
    },
  },
  { -- seed 002, row 2: line 160, remedy line 170
    id = "noise",
    when = { answer_correctness = "low", context_recall = "high", context_precision = "low" },
    cause = "too much noise: contexts unrelated to the question and answer are retrieved, "
      .. "possibly ranked before the useful ones",
    suggestions = {
      "add a reranker (rag.rerank.cross_encoder or a rerank provider) and keep only its top hits",
      "retrieve with several methods (mode = \"hybrid\": vectors and BM25, or tags) "
        .. "and rerank the union",
      "use smaller chunks so that each holds one topic",
    },
  },
  { -- seed 002, row 3: line 161, remedy line 177
    id = "coverage",
    when = { answer_correctness = "low", context_recall = "low", context_precision = "high" },
    cause = "too few contexts retrieved: what is retrieved is relevant but does not cover "
      .. "everything the answer needs",
    suggestions = {
      "retrieve more contexts: raise k (e.g. from 1 to 5) and the packing budget",
      "retrieve with several queries (rag.pipeline.fusion or multihop) to cover each part",
    },
  },
  { -- seed 002, row 4: line 162, remedies lines 179-201
    id = "pipeline",
    when = { answer_correctness = "low", context_recall = "low", context_precision = "low" },
    cause = "retrieval misses and what it finds is mostly noise: the problem is upstream, in "
      .. "parsing, chunking, embedding or retrieval",
    suggestions = {
      "check the parsed text (e.g. two-column PDFs, tables) and fix the loader",
      "choose a chunker that fits the documents (sentences, markdown sections, semantic), "
        .. "remove duplicates first",
      "use a newer embedding model and re-embed the index",
      "retrieve with hybrid search, expand hits with their neighbours (window) and rerank",
    },
  },
  {
    id = "ignores_context",
    when = { faithfulness = "low", context_recall = "high" },
    cause = "the generator ignores the context: the facts were retrieved but the answer "
      .. "states things the contexts do not support",
    suggestions = {
      "use the strict answer prompt (answer_strict) or tell the model to answer only from the "
        .. "context",
      "check answers against the context and regenerate (rag.pipeline.corrective, check = true)",
      "lower the LLM's temperature",
    },
  },
  {
    id = "unfaithful",
    when = { faithfulness = "low" },
    unless = { "faithfulness" },
    cause = "answers are not grounded in the contexts: the model adds what it was not given",
    suggestions = {
      "use the strict answer prompt (answer_strict) and a grounding check",
      "improve retrieval so that the context holds the facts (see context recall)",
    },
  },
  {
    id = "off_topic", -- question rewriting: seed 002, line 205
    when = { answer_relevancy = "low" },
    cause = "answers do not address the question, or are noncommittal",
    suggestions = {
      "rewrite or expand unclear questions before retrieval (rewrite, multi_query, stepback); "
        .. "seed 002: ask for more detail when the question is vague",
      "tell the model to answer the question directly and briefly",
    },
  },
  {
    id = "recall",
    when = { context_recall = "low" },
    unless = { "context_recall" },
    cause = "retrieval misses: the contexts lack facts the ground truth needs",
    suggestions = {
      "use hybrid search (BM25 and vectors) and a larger k",
      "expand the query (multi_query, hyde) or use a better embedding model",
    },
  },
  {
    id = "precision",
    when = { context_precision = "low" },
    unless = { "context_precision" },
    cause = "too much noise: irrelevant contexts are retrieved or ranked first",
    suggestions = {
      "add a reranker and keep fewer, better contexts",
      "use smaller chunks",
    },
  },
}

local function check_scores(scores)
  if type(scores) ~= "table" then
    error(FNAME .. ": scores must be a table, got " .. type(scores), 3)
  end
  if type(scores.scores) == "table" then -- a rag.eval.ragas result
    scores = scores.scores
  end
  for _, m in ipairs({ "faithfulness", "answer_relevancy", "context_precision",
    "context_recall", "answer_correctness" }) do
    local v = scores[m]
    if v ~= nil and (type(v) ~= "number" or v ~= v) then
      error(format("%s: scores.%s must be a number, got %s", FNAME, m, type(v)), 3)
    end
  end
  return scores
end

-- The metrics of a row in a fixed order: seed 002's first, then the rest.
local ORDER = { "answer_correctness", "context_recall", "context_precision", "faithfulness",
  "answer_relevancy" }

local function matches(row, level)
  for m, want in pairs(row.when) do
    if level[m] ~= want then
      return false
    end
  end
  return true
end

--- Diagnoses metric means by seed 002's table and the rows after it.
-- @tparam table scores `{ faithfulness =, answer_relevancy =,
--   context_precision =, context_recall =, answer_correctness = }` (any
--   subset; a rag.eval.ragas result is read through its `scores`)
-- @tparam[opt] table opts `thresholds = { metric = number in [0, 1] }`
-- @treturn table `{ { id =, cause =, suggestions = { ... }, evidence = }, ... }`
--   in the order of `ROWS`; empty when no row matches
-- @raise on a bad argument or option
function M.diagnose(scores, opts)
  scores = check_scores(scores)
  local o = opts_check(FNAME, opts, SCHEMA, 2)
  local t = opts_check(FNAME .. ": thresholds", o.thresholds, THRESHOLDS, 2)
  local level = {}
  for m, th in pairs(t) do
    if scores[m] ~= nil then
      level[m] = scores[m] >= th and "high" or "low"
    end
  end
  local out, explained = {}, {}
  for _, row in ipairs(M.ROWS) do
    local skip = false
    for _, m in ipairs(row.unless or {}) do
      skip = skip or explained[m]
    end
    if not skip and matches(row, level) then
      local ev = {}
      for _, m in ipairs(ORDER) do
        if row.when[m] then
          ev[#ev + 1] = format("%s %.2f %s", m, scores[m], level[m])
          if level[m] == "low" then
            explained[m] = true
          end
        end
      end
      local sug = {}
      for i, s in ipairs(row.suggestions) do
        sug[i] = s
      end
      out[#out + 1] = { id = row.id, cause = row.cause, suggestions = sug,
        evidence = concat(ev, ", ") }
    end
  end
  return out
end

return M
