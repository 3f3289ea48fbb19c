--- rag.pipeline.stepback: step-back prompting. The LLM writes the more
-- general question behind the question (`stepback` prompt, or the
-- `stepback` step); both are searched (`k` hits each) and the answer is
-- given from both contexts: the question's hits first, then the step-back
-- question's that are new. See docs/pipelines.md.
-- @module rag.pipeline.stepback
local base = require("rag.pipeline.base")

local EXTRA = {
  stepback = { "function" },
}

local function general(self, run, question)
  local fn = self.o.stepback
  local text, msg, code
  if fn then
    text, msg, code = run:step("stepback", function()
      return fn(question)
    end, { question = question })
  else
    text, msg, code = self:ask(run, "stepback", "stepback", { question = question }, question)
  end
  if not text then
    return nil, msg, code
  end
  if type(text) ~= "string" then
    error("rag.pipeline.stepback: stepback returned " .. type(text) .. ", not a string", 0)
  end
  return base.first_line(text) or question
end

local function gather(self, run, question)
  local o = self.o
  local sb, msg, code = general(self, run, question)
  if not sb then
    return nil, msg, code
  end
  local n = o.rerank and o.fetch_k or o.k
  local hits
  hits, msg, code = self:search(run, question, n, "retrieve")
  if not hits then
    return nil, msg, code
  end
  local merged, seen = {}, {}
  for _, h in ipairs(hits) do
    seen[tostring(h.id)] = true
    merged[#merged + 1] = h
  end
  if sb ~= question then
    local more
    more, msg, code = self:search(run, sb, n, "retrieve_stepback")
    if not more then
      return nil, msg, code
    end
    for _, h in ipairs(more) do
      if not seen[tostring(h.id)] then
        seen[tostring(h.id)] = true
        merged[#merged + 1] = h
      end
    end
  else
    run:branch("same_question", "the step-back question is the question")
  end
  local out
  out, msg, code = self:rerank(run, question, merged, 2 * o.k)
  if not out then
    return nil, msg, code
  end
  return self:compress(run, question, out)
end

--- A step-back pipeline: the common options and `stepback` (a function
-- `(question) -> question` in place of the LLM). Up to `2 k` contexts.
-- @return pipeline
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.stepback", opts, EXTRA, 2)
  return base.new("stepback", o, gather)
end
