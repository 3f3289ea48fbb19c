--- rag.pipeline.fusion: RAG-Fusion. The LLM writes `queries` rewordings of
-- the question (`multi_query` prompt, or the `expand` step); the original
-- and each distinct rewording are searched once (`fetch_k` hits each) and
-- the lists fused by reciprocal rank fusion (k = 60); the best `k` are
-- packed and answered. Seed 003, recipe 2. See docs/pipelines.md.
-- @module rag.pipeline.fusion
local base = require("rag.pipeline.base")

local EXTRA = {
  queries = { "number", default = 3, int = true, min = 1 },
  rrf_k = { "number", default = 60, min = 0 },
  expand = { "function" },
}

-- The generated queries: the `expand` step's list, else the LLM's lines.
local function expand(self, run, question)
  local o = self.o
  if o.expand then
    return run:step("expand", function()
      local list, msg, code = o.expand(question)
      if list == nil then
        return nil, msg, code
      end
      if type(list) ~= "table" then
        error("rag.pipeline.fusion: expand returned " .. type(list) .. ", not a list", 0)
      end
      return list
    end, { question = question })
  end
  local text, msg, code = self:ask(run, "expand", "multi_query",
    { question = question, n = o.queries }, question)
  if not text then
    return nil, msg, code
  end
  return base.lines(text, o.queries)
end

local function gather(self, run, question)
  local o = self.o
  local generated, msg, code = expand(self, run, question)
  if not generated then
    return nil, msg, code
  end
  local queries, seen = { question }, { [question] = true }
  for _, q in ipairs(generated) do
    if type(q) == "string" and q ~= "" and not seen[q] then
      seen[q] = true
      queries[#queries + 1] = q
    end
  end
  local lists = {}
  for i, q in ipairs(queries) do
    local hits
    hits, msg, code = self:search(run, q, o.fetch_k, i == 1 and "retrieve" or "retrieve_query")
    if not hits then
      return nil, msg, code
    end
    lists[i] = hits
  end
  local fused
  fused, msg, code = base.fuse(run, lists, o.rerank and o.fetch_k or o.k, o.rrf_k)
  if not fused then
    return nil, msg, code
  end
  return self:refine(run, question, fused)
end

--- A fusion pipeline: the common options and `queries` (how many rewordings
-- to ask for, default 3), `rrf_k` (default 60), `expand` (a function
-- `(question) -> { query, ... }` in place of the LLM).
-- @return pipeline
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.fusion", opts, EXTRA, 2)
  return base.new("fusion", o, gather)
end
