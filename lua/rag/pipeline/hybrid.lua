--- rag.pipeline.hybrid: hybrid search of `fetch_k` candidates (BM25 and
-- vectors fused by the index), rerank to `k` (the given `rerank`, else MMR
-- over the embedder's vectors, else the first `k`), pack, answer. Seed
-- 003, recipe 1. See docs/pipelines.md.
-- @module rag.pipeline.hybrid
local base = require("rag.pipeline.base")

local EXTRA = {
  lambda = { "number", default = 0.5, min = 0, max = 1 },
  embedder = { "table|userdata|boolean" },
}

-- The embedder MMR uses: the option, else the index's own; nil for none.
local function embedder_of(o)
  local e = o.embedder
  if e == nil and o.index ~= nil then
    e = o.index.embedder
  end
  if e and (type(e) == "table" or type(e) == "userdata") and e.embed then
    return e
  end
  return nil
end

-- MMR over the candidates, as a traced step.
local function mmr(self, run, question, hits, embedder)
  local o = self.o
  return run:step("rerank", function()
    run:branch("mmr", "no rerank given; the embedder gives vectors")
    local texts = { question }
    for i, h in ipairs(hits) do
      texts[i + 1] = h.text or ""
    end
    local vs, msg, code = embedder:embed(texts, { packed = true })
    if not vs then
      return nil, msg, code
    end
    local vectors = {}
    for i = 1, #hits do
      vectors[i] = vs[i + 1]
    end
    return require("rag").rerank.mmr(hits, { vectors = vectors, query = vs[1],
      lambda = o.lambda, k = o.k })
  end, { question = question, hits = hits, lambda = o.lambda })
end

local function gather(self, run, question)
  local o = self.o
  local hits, msg, code = self:search(run, question, o.fetch_k, "retrieve", { mode = "hybrid" })
  if not hits then
    return nil, msg, code
  end
  local e = not o.rerank and #hits > 0 and embedder_of(o)
  if e then
    hits, msg, code = mmr(self, run, question, hits, e)
    if not hits then
      return nil, msg, code
    end
  elseif not o.rerank then
    run:branch("no_rerank", "no rerank given and no embedder for MMR")
  end
  return self:refine(run, question, hits)
end

--- A hybrid pipeline: the common options and `lambda` (MMR, default 0.5),
-- `embedder` (for MMR; default the index's; false for none).
-- @return pipeline
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.hybrid", opts, EXTRA, 2)
  return base.new("hybrid", o, gather)
end
