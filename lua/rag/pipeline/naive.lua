--- rag.pipeline.naive: search, pack, answer. The question (condensed with
-- the history, rewritten when asked to) is searched once; the best `k`
-- hits (after the user's `rerank` and `compress`, if any) are packed and
-- the LLM answers from them with citations. See docs/pipelines.md.
-- @module rag.pipeline.naive
local base = require("rag.pipeline.base")

local function gather(self, run, question)
  local o = self.o
  local hits, msg, code = self:search(run, question, o.rerank and o.fetch_k or o.k)
  if not hits then
    return nil, msg, code
  end
  return self:refine(run, question, hits)
end

--- A naive pipeline.
-- @tparam table opts the common options (docs/pipelines.md)
-- @return pipeline with `:retrieve(q [, opts])` and `:answer(q [, opts])`
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.naive", opts, nil, 2)
  return base.new("naive", o, gather)
end
