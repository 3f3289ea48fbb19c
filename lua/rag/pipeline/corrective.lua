--- rag.pipeline.corrective: Corrective RAG (seed 004). Each retrieved hit
-- is graded in [0, 1]: at or above `upper` it is correct (kept, refined
-- to its relevant sentences), below `lower` incorrect (discarded), else
-- ambiguous (kept as it is). When no hit is correct the `fallback`
-- retriever (a web search, another index) adds its hits. The answer is
-- then checked for grounding and, when the check fails, regenerated once
-- under the strict prompt. See docs/pipelines.md.
-- @module rag.pipeline.corrective
local base = require("rag.pipeline.base")
local offline = require("rag.pipeline._offline")

local type, ipairs, pairs, tostring, tonumber, error = type, ipairs, pairs, tostring, tonumber,
  error
local format, min, max = string.format, math.min, math.max

local EXTRA = {
  grade = { "function|boolean", default = false },
  upper = { "number", default = 0.7, min = 0, max = 1 },
  lower = { "number", default = 0.3, min = 0, max = 1 },
  fallback = { "function|table|userdata" },
  check = { "function|boolean", default = false },
  compress = { "function|boolean" },
}

local function copy(h)
  local c = {}
  for k, v in pairs(h) do
    c[k] = v
  end
  return c
end

-- {====== Grading ======}

-- One hit's grade in [0, 1]: the user's function, the LLM's grade prompt,
-- or the offline term overlap.
local function grade_one(self, run, question, hit)
  local g = self.o.grade
  local score
  if g == true then
    local text, msg, code = self:ask(run, "grade_one", "grade", { question = question,
      document = hit.text or "" }, question)
    if not text then
      return nil, msg, code
    end
    score = tonumber(text:match("%d*%.?%d+")) or 0
  elseif g then
    local msg, code
    score, msg, code = g(question, hit)
    if score == nil then
      return nil, msg, code
    end
    if type(score) ~= "number" then
      error("rag.pipeline.corrective: grade returned " .. type(score) .. ", not a number", 0)
    end
  else
    score = offline.grade(question, hit)
  end
  return max(0, min(1, score))
end

-- The hits graded and sorted into correct, ambiguous and incorrect.
local function grade(self, run, question, hits)
  local o = self.o
  return run:step("grade", function()
    local verdicts = { correct = {}, ambiguous = {}, incorrect = {}, kept = {}, grades = {} }
    for _, h in ipairs(hits) do
      local score, msg, code = grade_one(self, run, question, h)
      if not score then
        return nil, msg, code
      end
      local c = copy(h)
      c.grade = score
      local v = score >= o.upper and "correct" or score < o.lower and "incorrect" or "ambiguous"
      local list = verdicts[v]
      list[#list + 1] = c
      if v ~= "incorrect" then
        verdicts.kept[#verdicts.kept + 1] = c
      end
      verdicts.grades[#verdicts.grades + 1] = { id = tostring(h.id), grade = score, verdict = v }
    end
    run:branch("graded", format("%d correct (kept, refined), %d ambiguous (kept), %d incorrect "
      .. "(discarded); upper %g, lower %g", #verdicts.correct, #verdicts.ambiguous,
      #verdicts.incorrect, o.upper, o.lower))
    return verdicts
  end, { question = question, hits = hits })
end

-- {====== Refining and falling back ======}

-- The correct hits refined: offline by default, or the `compress` option.
local function refine(self, run, question, correct)
  if #correct == 0 or self.o.compress == false then
    return correct
  end
  if self.o.compress == nil then
    return base.keep_relevant(run, question, correct, "refine")
  end
  return self:compress(run, question, correct)
end

-- The fallback's hits (a function, or anything with :search).
local function fallback(self, run, question)
  local f = self.o.fallback
  return run:step("fallback", function()
    local hits, msg, code
    if type(f) == "function" then
      hits, msg, code = f(question)
    else
      hits, msg, code = f:search(question, { k = self.o.k })
    end
    if hits == nil then
      return nil, msg or "rag.pipeline.corrective: fallback returned nothing", code or "provider"
    end
    if type(hits) ~= "table" then
      error("rag.pipeline.corrective: fallback returned " .. type(hits) .. ", not a hit list", 0)
    end
    return hits
  end, { question = question })
end

local function gather(self, run, question)
  local o = self.o
  local hits, msg, code = self:search(run, question, o.rerank and o.fetch_k or o.k)
  if hits then
    hits, msg, code = self:rerank(run, question, hits, o.k)
  end
  if not hits then
    return nil, msg, code
  end
  local v
  v, msg, code = grade(self, run, question, hits)
  if not v then
    return nil, msg, code
  end
  local refined
  refined, msg, code = refine(self, run, question, v.correct)
  if not refined then
    return nil, msg, code
  end
  -- the kept hits in their retrieval order, the correct ones refined
  local by_id, out, seen = {}, {}, {}
  for _, h in ipairs(refined) do
    by_id[tostring(h.id)] = h
  end
  for _, h in ipairs(v.kept) do
    local id = tostring(h.id)
    if h.grade < o.upper then
      out[#out + 1] = h
      seen[id] = true
    elseif by_id[id] then
      out[#out + 1] = by_id[id]
      seen[id] = true
    end
  end
  if #v.correct > 0 then
    run:branch("correct", #v.correct .. " correct hit(s): no fallback")
    return out
  end
  if not o.fallback then
    run:branch("no_fallback", "no hit is correct and there is no fallback")
    return out
  end
  run:branch("fallback", format("no hit is correct (%d ambiguous): the fallback retriever",
    #v.ambiguous))
  local more
  more, msg, code = fallback(self, run, question)
  if not more then
    return nil, msg, code
  end
  local added = 0
  for _, h in ipairs(more) do
    local id = tostring(h.id)
    if not seen[id] and added < o.k then
      seen[id] = true
      added = added + 1
      out[#out + 1] = h
    end
  end
  return out
end

-- {====== Checking the answer ======}

-- Is the answer grounded in its contexts? The user's function, the LLM's
-- check prompt, or offline: every sentence cites a context.
local function check(self, run, question, partial)
  local c = self.o.check
  if c == true then
    local text, msg, code = self:ask(run, "check", "check", { context = partial.packed or "",
      answer = partial.text }, question)
    if not text then
      return nil, msg, code
    end
    local t = text:match("^%s*(.-)%s*$")
    if t:lower():match("^yes") then
      return true, "the LLM found it grounded"
    end
    return false, t:match("^[Nn][Oo]%s*[:：]%s*(.*)$") or t
  end
  return run:step("check", function()
    local ok, why
    if c then
      ok, why = c(partial.text, partial.contexts)
    else
      ok, why = offline.check(partial.text, partial.contexts)
    end
    return ok == true, why or (ok and "every sentence cites a context" or "not grounded")
  end, { answer = partial.text, contexts = partial.contexts })
end

local function respond(self, run, question, partial, stream)
  local hits, msg, code = self:gather(run, question)
  if not hits then
    return nil, msg, code
  end
  local ok
  ok, msg, code = self:reply(run, question, hits, partial, stream)
  if not ok then
    return nil, msg, code
  end
  for attempt = 1, 2 do
    if #partial.contexts == 0 or partial.text:match("^%s*(.-)%s*$")
        == self:set(question).refusal then
      run:branch("refusal", "the answer is the refusal: nothing to check")
      partial.grounded = false
      return true
    end
    local good, why
    good, why, code = check(self, run, question, partial)
    if good == nil then
      return nil, why, code
    end
    partial.grounded = good
    partial.check = why
    if good or attempt == 2 then
      if not good then
        run:branch("ungrounded", "the strict answer failed the check too: " .. tostring(why))
      end
      return true
    end
    run:branch("regenerate", "the check failed: " .. tostring(why))
    partial.first_answer = partial.text
    ok, msg, code = self:reply(run, question, hits, partial, nil, "answer_strict")
    if not ok then
      return nil, msg, code
    end
  end
  return true
end

--- A corrective pipeline: the common options and `grade` (false: offline,
-- the share of the question's terms in the hit; true: the LLM's grade
-- prompt; or a function `(question, hit) -> [0, 1]`), `upper` (0.7),
-- `lower` (0.3), `fallback` (a function `(question) -> hits`, or anything
-- with `:search(query, { k = })`), `check` (false: offline, every sentence
-- cites a context; true: the LLM's check prompt; or a function `(answer,
-- contexts) -> boolean, reason`), `compress` (how correct hits are
-- refined: offline by default, true for the LLM, a function, false: not).
-- @return pipeline; `result.check` is the last check's reason,
--   `result.first_answer` the answer that failed it, if any
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.corrective", opts, EXTRA, 2)
  if o.lower > o.upper then
    error(format("rag.pipeline.corrective: 'lower' (%g) must not be above 'upper' (%g)",
      o.lower, o.upper), 2)
  end
  local f = o.fallback
  if f ~= nil and type(f) ~= "function" and type(f.search) ~= "function" then
    error("rag.pipeline.corrective: option 'fallback' must be a function or have a "
      .. ":search(query, opts) method", 2)
  end
  return base.new("corrective", o, gather, respond)
end
