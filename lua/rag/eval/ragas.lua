--- rag.eval.ragas: answer-level metrics in the manner of RAGAS (faithfulness,
-- answer relevancy, context precision and recall, answer correctness as
-- seed 002 gives it), judged by an LLM through a pipeline run, so limits and
-- traces apply. A verdict that does not parse is retried once, then reported
-- as failed, never guessed. Formulas and edge cases: docs/evaluation.md.
-- @module rag.eval.ragas
local opts_check = require("rag.opts").check
local prompts = require("rag.prompts")
local runtime = require("rag.pipeline.runtime")
local vec = require("rag.core").vec

local type, ipairs, pairs, tostring, error = type, ipairs, pairs, tostring, error
local format, concat, sqrt, huge, min = string.format, table.concat, math.sqrt, math.huge, math.min

local M = {}

local FNAME = "rag.eval.ragas"

--- The metrics, in the order they are computed for each sample.
M.METRICS = { "faithfulness", "answer_relevancy", "context_precision", "context_recall",
  "answer_correctness" }

--- Seed 002's weights of answer correctness: factuality (F1 over statements)
-- and similarity (cosine of the answer's and ground truth's embeddings).
M.WEIGHTS = { factuality = 0.75, similarity = 0.25 }

local KNOWN = {}
for _, m in ipairs(M.METRICS) do
  KNOWN[m] = true
end

local SCHEMA = {
  llm = { "table|userdata" },
  embedder = { "table|userdata" },
  metrics = { "table" },
  weights = { "table" },
  limits = { "table" },
  batch = { "number", int = true, min = 1, default = 10 },
  questions = { "number", int = true, min = 1, default = 3 },
  lang = { "string", enum = { "auto", "en", "zh" }, default = "auto" },
  prompts = { "table" },
  chat = { "table" },
  clock = { "function" },
  tokenizer = { "table|userdata" },
}

local WEIGHTS = {
  factuality = { "number", min = 0, default = M.WEIGHTS.factuality },
  similarity = { "number", min = 0, default = M.WEIGHTS.similarity },
}

-- {====== Arguments ======}

local function has_text(s)
  return type(s) == "string" and s:find("%S") ~= nil
end

-- The contexts of a sample as strings: each given as a string or a hit
-- `{ text = string }` (a pipeline answer's `contexts`).
local function check_contexts(i, contexts)
  if type(contexts) ~= "table" then
    error(format("%s: samples[%d].contexts must be a list, got %s", FNAME, i, type(contexts)), 3)
  end
  local out = {}
  for k = 1, #contexts do
    local c = contexts[k]
    if type(c) == "table" then
      c = c.text
    end
    if type(c) ~= "string" then
      error(format("%s: samples[%d].contexts[%d] must be a string or { text = string }",
        FNAME, i, k), 3)
    end
    out[k] = c
  end
  return out
end

-- The samples checked: copies with contexts as strings.
local function check_samples(samples)
  if type(samples) ~= "table" then
    error(FNAME .. ": samples must be a list, got " .. type(samples), 3)
  end
  local out = {}
  for i = 1, #samples do
    local s = samples[i]
    if type(s) ~= "table" then
      error(format("%s: samples[%d] must be a table, got %s", FNAME, i, type(s)), 3)
    end
    for _, f in ipairs({ "question", "answer", "ground_truth" }) do
      if s[f] ~= nil and type(s[f]) ~= "string" then
        error(format("%s: samples[%d].%s must be a string, got %s", FNAME, i, f, type(s[f])), 3)
      end
    end
    out[i] = { question = s.question, answer = s.answer, ground_truth = s.ground_truth,
      contexts = s.contexts ~= nil and check_contexts(i, s.contexts) or nil }
  end
  return out
end

local function check_metrics(list)
  if list == nil then
    return M.METRICS
  end
  local out, seen = {}, {}
  for i = 1, #list do
    local m = list[i]
    if not KNOWN[m] then
      error(format("%s: unknown metric '%s' (valid: %s)", FNAME, tostring(m),
        concat(M.METRICS, ", ")), 3)
    end
    seen[m] = true
  end
  for _, m in ipairs(M.METRICS) do
    if seen[m] then
      out[#out + 1] = m
    end
  end
  if #out == 0 then
    error(FNAME .. ": 'metrics' must be a non-empty list", 3)
  end
  return out
end

-- {====== The judge ======}

local function numbered(list, fmt)
  local lines = {}
  for i, s in ipairs(list) do
    lines[i] = format(fmt, i, s)
  end
  return concat(lines, fmt:find("\n") and "" or "\n")
end

local function as_verdict(v)
  if v == 1 or v == true or v == "1" then
    return 1
  elseif v == 0 or v == false or v == "0" then
    return 0
  end
  return nil
end

-- Asks the judge one prompt; `read(value)` turns the reply's JSON into the
-- result or returns nil and why not. A reply that does not parse is asked
-- again once. Returns the result | false, why (the verdict failed) | nil,
-- msg, code (the run must stop: a limit, or the LLM failed).
local function judge(ctx, name, slots, read)
  local messages = prompts.messages(ctx.set, name, slots)
  local why
  for attempt = 1, 2 do
    local reply, msg, code = ctx.run:chat(ctx.llm, messages, ctx.chat)
    if not reply then
      return nil, msg, code
    end
    local v, err = prompts.json(reply.text)
    if v ~= nil then
      v, err = read(v)
      if v ~= nil then
        return v
      end
    end
    why = format("%s: %s", name, tostring(err))
    if attempt == 1 then
      ctx.run:branch("retry", why)
    end
  end
  return false, why
end

local function read_statements(v)
  local list = type(v) == "table" and v.statements
  if type(list) ~= "table" then
    return nil, "expected {\"statements\": [...]}"
  end
  local out = {}
  for i = 1, #list do
    if type(list[i]) ~= "string" then
      return nil, format("statement %d is not a string", i)
    end
    if list[i]:find("%S") then
      out[#out + 1] = list[i]
    end
  end
  return out
end

-- The statements of `text` (cached per sample by `key`): a list, or false,
-- why (failed) or nil, msg, code. A text with nothing but spaces has none.
local function statements(ctx, key, text)
  local c = ctx.cache[key]
  if c ~= nil then
    return c[1], c[2]
  end
  if not has_text(text) then
    ctx.cache[key] = { {} }
    return {}
  end
  local list, why, code = judge(ctx, "eval_statements",
    { question = ctx.sample.question or "", text = text }, read_statements)
  if list == nil then
    return nil, why, code
  end
  ctx.cache[key] = { list, why }
  return list, why
end

-- Reads `{ verdicts = [{ verdict =, reason = }] }` with exactly n entries.
local function verdicts_reader(n)
  return function(v)
    local list = type(v) == "table" and v.verdicts
    if type(list) ~= "table" or #list ~= n then
      return nil, format("expected {\"verdicts\": [...]} with %d entries", n)
    end
    local out = {}
    for i = 1, n do
      local e = list[i]
      local verdict = type(e) == "table" and as_verdict(e.verdict)
      if not verdict then
        return nil, format("verdict %d is not 0 or 1", i)
      end
      out[i] = { verdict = verdict, reason = type(e.reason) == "string" and e.reason or "" }
    end
    return out
  end
end

-- Verdicts on `items` in batches of ctx.batch: `ask(first, last)` judges
-- items first..last. Returns the verdicts | false, why | nil, msg, code.
local function batched(ctx, items, ask)
  local all = {}
  for first = 1, #items, ctx.batch do
    local last = min(#items, first + ctx.batch - 1)
    local got, why, code = ask(first, last, verdicts_reader(last - first + 1))
    if not got then
      return got, why, code
    end
    for k, v in ipairs(got) do
      all[first + k - 1] = v
    end
  end
  return all
end

-- Verdicts on whether each statement follows from the contexts.
local function support(ctx, list, contexts)
  local context = numbered(contexts, "[%d] %s\n\n")
  local got, why, code = batched(ctx, list, function(first, last, read)
    local part = {}
    for k = first, last do
      part[#part + 1] = list[k]
    end
    return judge(ctx, "eval_support",
      { context = context, statements = numbered(part, "%d. %s") }, read)
  end)
  if not got then
    return got, why, code
  end
  local supported = 0
  for k, v in ipairs(got) do
    v.statement = list[k]
    supported = supported + v.verdict
  end
  return got, supported
end

-- {====== Embeddings ======}

local function cosine(a, b)
  local dot, na, nb = 0, 0, 0
  for k = 1, #a do
    dot = dot + a[k] * b[k]
    na = na + a[k] * a[k]
    nb = nb + b[k] * b[k]
  end
  if na == 0 or nb == 0 then
    return 0
  end
  return dot / (sqrt(na) * sqrt(nb))
end

-- The embeddings of `texts` as arrays | nil, msg, code.
local function embed(ctx, texts)
  local vs, msg, code = ctx.embedder:embed(texts)
  if vs == nil then
    return nil, msg, code
  end
  if type(vs) ~= "table" or #vs ~= #texts then
    return nil, FNAME .. ": the embedder returned no list of " .. #texts .. " vectors", "provider"
  end
  local out = {}
  for k = 1, #texts do
    local v = vs[k]
    if type(v) == "string" then
      v = vec.unpack(v)
    end
    if type(v) ~= "table" or #v ~= #vs[1] then
      return nil, FNAME .. ": the embedder returned a bad vector", "provider"
    end
    out[k] = v
  end
  return out
end

-- {====== The metrics ======}
-- Each returns { score = } or { unavailable = why } or { failed = why },
-- with `verdicts` where the judge gave any; or nil, msg, code.

local metric = {}

-- What a metric returns when a helper gave false, why (a failed verdict)
-- or nil, msg, code (the run stops).
local function failed(v, why, code)
  if v == false then
    return { failed = why }
  end
  return nil, why, code
end

-- Statement support: faithfulness (the answer's) and recall (the ground truth's).
local function supported_share(ctx, key, text, none)
  local list, why, code = statements(ctx, key, text)
  if not list then
    return failed(list, why, code)
  end
  if #list == 0 then
    return { unavailable = none, verdicts = {} }
  end
  local contexts = ctx.sample.contexts
  if #contexts == 0 then
    local vs = {}
    for k, s in ipairs(list) do
      vs[k] = { statement = s, verdict = 0, reason = "no contexts" }
    end
    return { score = 0, verdicts = vs }
  end
  local vs, n
  vs, n, code = support(ctx, list, contexts)
  if not vs then
    return failed(vs, n, code)
  end
  return { score = n / #list, verdicts = vs }
end

function metric.faithfulness(ctx)
  return supported_share(ctx, "answer", ctx.sample.answer, "no statements in the answer")
end

function metric.context_recall(ctx)
  return supported_share(ctx, "ground_truth", ctx.sample.ground_truth,
    "no statements in the ground truth")
end

function metric.context_precision(ctx)
  local s = ctx.sample
  local ref, against = s.ground_truth, "ground_truth"
  if not has_text(ref) then
    ref, against = s.answer, "answer"
  end
  local contexts = s.contexts
  if #contexts == 0 then
    return { score = 0, verdicts = {} }
  end
  local vs, why, code = batched(ctx, contexts, function(first, last, read)
    local part = {}
    for k = first, last do
      part[#part + 1] = contexts[k]
    end
    return judge(ctx, "eval_context",
      { question = s.question, reference = ref, context = numbered(part, "[%d] %s\n\n") }, read)
  end)
  if not vs then
    return failed(vs, why, code)
  end
  -- average precision: sum over ranks k of precision@k * v_k, over the relevant
  local hits, sum = 0, 0
  for k, v in ipairs(vs) do
    v.context, v.against = k, against
    hits = hits + v.verdict
    sum = sum + v.verdict * hits / k
  end
  return { score = hits > 0 and sum / hits or 0, verdicts = vs }
end

local function read_questions(n)
  return function(v)
    local qs = type(v) == "table" and v.questions
    local nc = type(v) == "table" and as_verdict(v.noncommittal)
    if type(qs) ~= "table" or #qs == 0 or not nc then
      return nil, "expected {\"questions\": [...], \"noncommittal\": 0 or 1}"
    end
    local out = {}
    for k = 1, min(n, #qs) do
      if not has_text(qs[k]) then
        return nil, format("question %d is not a non-empty string", k)
      end
      out[k] = qs[k]
    end
    return { questions = out, noncommittal = nc == 1 }
  end
end

function metric.answer_relevancy(ctx)
  local s = ctx.sample
  if not has_text(s.answer) then
    return { score = 0, verdicts = { noncommittal = true, questions = {} } }
  end
  local got, why, code = judge(ctx, "eval_questions", { answer = s.answer, n = ctx.questions },
    read_questions(ctx.questions))
  if not got then
    return failed(got, why, code)
  end
  local texts = { s.question }
  for k, q in ipairs(got.questions) do
    texts[k + 1] = q
  end
  local vs, msg
  vs, msg, code = embed(ctx, texts)
  if not vs then
    return nil, msg, code
  end
  local sims, sum = {}, 0
  for k = 2, #vs do
    sims[k - 1] = cosine(vs[1], vs[k])
    sum = sum + sims[k - 1]
  end
  got.similarities = sims
  return { score = got.noncommittal and 0 or sum / #sims, verdicts = got }
end

local function read_classes(v)
  if type(v) ~= "table" then
    return nil, "expected {\"TP\": [...], \"FP\": [...], \"FN\": [...]}"
  end
  local out = {}
  for _, c in ipairs({ "TP", "FP", "FN" }) do
    local list = v[c] or v[c:lower()] or {}
    if type(list) ~= "table" then
      return nil, format("%s is not a list", c)
    end
    out[c] = {}
    for k = 1, #list do
      local e = list[k]
      if type(e) == "string" then
        e = { statement = e }
      end
      if type(e) ~= "table" or type(e.statement) ~= "string" then
        return nil, format("%s[%d] is not a statement", c, k)
      end
      out[c][k] = { statement = e.statement,
        reason = type(e.reason) == "string" and e.reason or "" }
    end
  end
  return out
end

-- TP, FP and FN of the answer's against the ground truth's statements.
local function classify(ctx, answer, truth)
  if #answer == 0 or #truth == 0 then
    local function as_entries(list, reason)
      local out = {}
      for k, st in ipairs(list) do
        out[k] = { statement = st, reason = reason }
      end
      return out
    end
    return { TP = {}, FP = as_entries(answer, "the ground truth has no statements"),
      FN = as_entries(truth, "the answer has no statements") }
  end
  return judge(ctx, "eval_correctness", { question = ctx.sample.question or "",
    answer = numbered(answer, "%d. %s"), truth = numbered(truth, "%d. %s") }, read_classes)
end

function metric.answer_correctness(ctx)
  local s = ctx.sample
  local a, why, code = statements(ctx, "answer", s.answer)
  if not a then
    return failed(a, why, code)
  end
  local g
  g, why, code = statements(ctx, "ground_truth", s.ground_truth)
  if not g then
    return failed(g, why, code)
  end
  local c
  c, why, code = classify(ctx, a, g)
  if not c then
    return failed(c, why, code)
  end
  local tp, fp, fn = #c.TP, #c.FP, #c.FN
  c.f1 = tp > 0 and tp / (tp + 0.5 * (fp + fn)) or 0
  local w = ctx.weights
  local sim = 0 -- a blank answer is like nothing (and providers refuse to embed "")
  if w.similarity > 0 and has_text(s.answer) then
    local vs, msg
    vs, msg, code = embed(ctx, { s.answer, s.ground_truth })
    if not vs then
      return nil, msg, code
    end
    sim = cosine(vs[1], vs[2])
  end
  if w.similarity > 0 then
    c.similarity = sim
  end
  return { score = (w.factuality * c.f1 + w.similarity * sim) / (w.factuality + w.similarity),
    verdicts = c }
end

-- {====== Running ======}

-- Why a sample cannot be scored on metric m (a field it needs is missing
-- or empty), or nil.
local function missing(m, s)
  local need = {
    faithfulness = { "answer", "contexts" },
    answer_relevancy = { "question", "answer" },
    context_precision = { "question", "contexts" },
    context_recall = { "ground_truth", "contexts" },
    answer_correctness = { "answer", "ground_truth" },
  }
  for _, f in ipairs(need[m]) do
    if s[f] == nil then
      return "no " .. f
    end
  end
  if (m == "context_recall" or m == "answer_correctness") and not has_text(s.ground_truth) then
    return "empty ground_truth"
  end
  if m == "answer_relevancy" and not has_text(s.question) then
    return "empty question"
  end
  if m == "context_precision" and not has_text(s.ground_truth) and not has_text(s.answer) then
    return "no ground_truth or answer to judge the contexts against"
  end
  return nil
end

-- Sets result.scores[m] and result.counts[m]: the means over the samples
-- with a score, in sample order.
local function means(result, metrics)
  for _, m in ipairs(metrics) do
    local sum, n = 0, 0
    for _, ps in ipairs(result.per_sample) do
      if type(ps[m]) == "number" then
        sum, n = sum + ps[m], n + 1
      end
    end
    result.counts[m] = n
    result.scores[m] = n > 0 and sum / n or nil
  end
end

-- The metrics that can run: the others get a reason in result.unavailable.
local function runnable(o, metrics, w, unavailable)
  local out = {}
  for _, m in ipairs(metrics) do
    local needs_embedder = m == "answer_relevancy"
      or (m == "answer_correctness" and w.similarity > 0)
    if not o.llm then
      unavailable[m] = "needs an llm"
    elseif needs_embedder and not o.embedder then
      unavailable[m] = "needs an embedder"
    else
      out[#out + 1] = m
    end
  end
  return out
end

local function set_for(ctx, o, s)
  local lang = o.lang
  if lang == "auto" then
    lang = prompts.detect((s.question or "") .. " " .. (s.answer or ""))
  end
  ctx.sets[lang] = ctx.sets[lang] or prompts.get(lang, o.prompts)
  return ctx.sets[lang]
end

-- Scores sample i on each metric; nil, msg, code when the run must stop.
local function score_sample(ctx, o, i, s, metrics)
  local ps = { verdicts = {}, unavailable = {}, failed = {} }
  ctx.result.per_sample[i] = ps
  ctx.sample, ctx.cache, ctx.set = s, {}, set_for(ctx, o, s)
  for _, m in ipairs(metrics) do
    local why = missing(m, s)
    if why then
      ps.unavailable[m] = why
    else
      local r, msg, code = ctx.run:step(m, function()
        return metric[m](ctx)
      end, { sample = i })
      if not r then
        return nil, msg, code
      end
      ps.verdicts[m] = r.verdicts
      if r.failed then
        ps.failed[m] = r.failed
        ctx.result.failures[#ctx.result.failures + 1] = { sample = i, metric = m, error = r.failed }
      elseif r.unavailable then
        ps.unavailable[m] = r.unavailable
      else
        ps[m] = r.score
      end
    end
  end
  return true
end

--- Scores question-answer samples on RAGAS metrics (see docs/evaluation.md).
-- @tparam table samples `{ { question =, answer =, contexts = { string |
--   { text = } }, ground_truth = }, ... }`; every field optional
-- @tparam[opt] table opts `llm`, `embedder`, `metrics`, `weights = {
--   factuality =, similarity = }`, `limits`, `batch`, `questions`, `lang`,
--   `prompts`, `chat` (options of each judge call, default `{ temperature = 0 }`),
--   `clock`, `tokenizer`
-- @return `{ scores =, counts =, per_sample =, unavailable =, failures =,
--   usage =, trace = }` | nil, msg, code, partial (a limit: "budget"; or
--   the LLM's or embedder's failure)
-- @raise on a bad argument or option
function M.ragas(samples, opts)
  local list = check_samples(samples)
  local o = opts_check(FNAME, opts, SCHEMA, 2)
  local w = opts_check(FNAME .. ": weights", o.weights, WEIGHTS, 2)
  if w.factuality + w.similarity <= 0 then
    error(FNAME .. ": weights must not both be 0", 2)
  end
  if o.llm and not o.llm.chat then
    error(FNAME .. ": 'llm' must have a :chat(messages, opts) method", 2)
  end
  if o.embedder and not o.embedder.embed then
    error(FNAME .. ": 'embedder' must have an :embed(texts) method", 2)
  end
  local metrics = check_metrics(o.metrics)
  local limits = { steps = huge, llm_calls = huge }
  for k, v in pairs(o.limits or {}) do
    limits[k] = v
  end
  local run = runtime.new({ name = FNAME, limits = limits, clock = o.clock,
    tokenizer = o.tokenizer })
  local result = { metrics = metrics, scores = {}, counts = {}, per_sample = {},
    unavailable = {}, failures = {} }
  local active = runnable(o, metrics, w, result.unavailable)
  local ctx = { run = run, llm = o.llm, embedder = o.embedder, batch = o.batch,
    chat = o.chat or { temperature = 0 },
    questions = o.questions, weights = w, sets = {}, result = result }
  for i, s in ipairs(list) do
    local ok, msg, code = score_sample(ctx, o, i, s, active)
    if not ok then
      means(result, metrics)
      return run:finish(result, msg, code)
    end
  end
  means(result, metrics)
  return run:finish(result)
end

return M
