--- rag.pipeline.hyde: Hypothetical Document Embeddings. The LLM writes a
-- short passage that could answer the question (`hyde` prompt, or the
-- `hyde` step); the index is searched with that passage and, by default,
-- with the question too, the two lists fused by RRF (k = 60); the best `k`
-- are packed and answered. See docs/pipelines.md.
-- @module rag.pipeline.hyde
local base = require("rag.pipeline.base")

local EXTRA = {
  hyde = { "function" },
  with_question = { "boolean", default = true },
  rrf_k = { "number", default = 60, min = 0 },
}

local function hypothesis(self, run, question)
  local fn = self.o.hyde
  local text, msg, code
  if fn then
    text, msg, code = run:step("hyde", function()
      return fn(question)
    end, { question = question })
  else
    text, msg, code = self:ask(run, "hyde", "hyde", { question = question }, question)
  end
  if not text then
    return nil, msg, code
  end
  if type(text) ~= "string" then
    error("rag.pipeline.hyde: hyde returned " .. type(text) .. ", not a string", 0)
  end
  text = text:match("^%s*(.-)%s*$")
  if text == "" then
    run:branch("question", "the hypothetical passage is empty; searching the question")
    return question
  end
  return text
end

local function gather(self, run, question)
  local o = self.o
  local passage, msg, code = hypothesis(self, run, question)
  if not passage then
    return nil, msg, code
  end
  local lists = {}
  local limit = o.rerank and o.fetch_k or o.k
  lists[1], msg, code = self:search(run, passage, o.fetch_k, "retrieve_hyde")
  if not lists[1] then
    return nil, msg, code
  end
  if o.with_question and passage ~= question then
    lists[2], msg, code = self:search(run, question, o.fetch_k, "retrieve")
    if not lists[2] then
      return nil, msg, code
    end
  end
  local hits
  hits, msg, code = base.fuse(run, lists, limit, o.rrf_k)
  if not hits then
    return nil, msg, code
  end
  return self:refine(run, question, hits)
end

--- A HyDE pipeline: the common options and `hyde` (a function `(question)
-- -> passage` in place of the LLM), `with_question` (also search the
-- question, default true), `rrf_k` (default 60).
-- @return pipeline
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.hyde", opts, EXTRA, 2)
  return base.new("hyde", o, gather)
end
