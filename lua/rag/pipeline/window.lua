--- rag.pipeline.window: sentence-window retrieval with contextual
-- compression (seed 003, recipe 3). The index is searched with `expand =
-- { window = n }`, so each hit is read with the `n` chunks before and after
-- it; then each window is compressed to what helps answer the question:
-- by default offline (the sentences sharing a term with the question),
-- with `compress = true` by the LLM's compress prompt, or by a function.
-- See docs/pipelines.md.
-- @module rag.pipeline.window
local base = require("rag.pipeline.base")

local EXTRA = {
  window = { "number", default = 2, int = true, min = 0 },
  compress = { "function|boolean" },
}

local function gather(self, run, question)
  local o = self.o
  local hits, msg, code = self:search(run, question, o.rerank and o.fetch_k or o.k, "retrieve",
    { expand = { window = o.window } })
  if not hits then
    return nil, msg, code
  end
  hits, msg, code = self:rerank(run, question, hits, o.k)
  if not hits then
    return nil, msg, code
  end
  if #hits > o.k then
    local cut = {}
    for i = 1, o.k do
      cut[i] = hits[i]
    end
    hits = cut
  end
  if o.compress == nil then
    return base.keep_relevant(run, question, hits)
  end
  return self:compress(run, question, hits)
end

--- A sentence-window pipeline: the common options and `window` (chunks
-- read on each side of a hit, default 2), `compress` (default: offline,
-- the sentences sharing a term with the question; `true`: the LLM's
-- compress prompt; a function `(question, hits) -> hits`; `false`: none).
-- @return pipeline
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.window", opts, EXTRA, 2)
  return base.new("window", o, gather)
end
