--- rag.pipeline.adaptive: adaptive RAG (seed 004). Each question is
-- classified as "none" (answer without retrieval, the `direct` prompt),
-- "single" (one search, as rag.pipeline.naive) or "iterative" (as
-- rag.pipeline.multihop). The classifier is offline by default (a
-- heuristic on the question's words), the LLM's `classify` prompt with
-- `classify = true`, or a function. The trace says which path and why.
-- See docs/pipelines.md.
-- @module rag.pipeline.adaptive
local base = require("rag.pipeline.base")
local offline = require("rag.pipeline._offline")

local type, pairs, tostring, error = type, pairs, tostring, error

local EXTRA = {
  classify = { "function|boolean", default = false },
  decompose = { "function" },
  hops = { "number", default = 3, int = true, min = 1 },
  rrf_k = { "number", default = 60, min = 0 },
}

local CLASSES = { none = true, single = true, iterative = true }

-- The class of a question and why.
local function classify(self, run, question)
  local c = self.o.classify
  if c == true then
    local text, msg, code = self:ask(run, "classify", "classify", { question = question },
      question)
    if not text then
      return nil, msg, code
    end
    local word = text:lower():match("%a+")
    if CLASSES[word] then
      return word, "the LLM classified it"
    end
    return "single", "the LLM's reply is no class ('" .. text:sub(1, 40) .. "'): single"
  end
  return run:step("classify", function()
    if type(c) == "function" then
      local class, why = c(question)
      if not CLASSES[class] then
        error("rag.pipeline.adaptive: classify returned " .. tostring(class)
          .. ", not \"none\", \"single\" or \"iterative\"", 0)
      end
      return class, type(why) == "string" and why or "the classify function"
    end
    local class, why = offline.classify(question)
    return class, "heuristic: " .. why
  end, { question = question })
end

-- The class, traced as a branch.
local function choose(self, run, question)
  local class, why, code = classify(self, run, question)
  if not class then
    return nil, why, code
  end
  run:branch(class, why)
  return class
end

local function gather(self, run, question)
  local class, msg, code = choose(self, run, question)
  if not class then
    return nil, msg, code
  end
  if class == "none" then
    return {}
  end
  local p = self.paths[class]
  return p:gather(run, question)
end

local function respond(self, run, question, partial, stream)
  local class, msg, code = choose(self, run, question)
  if not class then
    return nil, msg, code
  end
  partial.path = class
  if class ~= "none" then
    return self.paths[class]:respond_in(run, question, partial, stream)
  end
  local text
  text, msg, code = self:ask(run, "answer", "direct", { question = question }, question,
    stream and { stream = stream } or nil)
  if not text then
    return nil, msg, code
  end
  partial.text = text
  return true
end

-- The user's options without the keys of `drop`.
local function without(opts, drop)
  local out = {}
  for k, v in pairs(opts or {}) do
    if not drop[k] then
      out[k] = v
    end
  end
  return out
end

--- An adaptive pipeline: the common options and `classify` (false: the
-- offline heuristic; true: the LLM's classify prompt; or a function
-- `(question) -> "none" | "single" | "iterative" [, why]`), and the
-- iterative path's `hops` (3), `decompose` and `rrf_k` (60).
-- @return pipeline; `result.path` says which path answered
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.adaptive", opts, EXTRA, 2)
  local p = base.new("adaptive", o, gather, respond)
  local shared = without(opts, { classify = true, decompose = true, hops = true,
    rrf_k = true })
  shared.llm = o.llm
  local iter = without(opts, { classify = true })
  iter.llm = o.llm
  p.paths = { single = require("rag.pipeline.naive")(shared),
    iterative = require("rag.pipeline.multihop")(iter) }
  return p
end
