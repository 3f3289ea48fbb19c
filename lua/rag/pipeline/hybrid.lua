--- rag.pipeline.hybrid: hybrid search of `fetch_k` candidates (BM25 and
-- vectors fused by the index), rerank to `k` (the given `rerank`, else MMR
-- over the embedder's vectors, else the first `k`), pack, answer. Seed
-- 003, recipe 1. See docs/pipelines.md.
-- @module rag.pipeline.hybrid
local base = require("rag.pipeline.base")

local EXTRA = {
  lambda = { "number", default = 0.5, min = 0, max = 1 },
  embedder = { "table|userdata|boolean" },
  vector_cache = { "number", default = 4096, int = true, min = 0 },
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

-- The vectors the index keeps for the hits, when MMR uses the index's own
-- embedder (what it searched with; nothing to embed again), else nil.
local function stored_of(self, embedder, hits)
  local idx = self.o.index
  if idx == nil or embedder ~= idx.embedder or type(idx.vectors) ~= "function" then
    return nil
  end
  local ids = {}
  for i, h in ipairs(hits) do
    ids[i] = h.id
  end
  return idx:vectors(ids)
end

-- The vectors of the question and the hits: the hits' as the index keeps
-- them, else from the pipeline's cache (by id, while the text is the same),
-- the rest embedded in one call. The cache is emptied when it holds
-- `vector_cache` entries.
local function vectors_of(self, embedder, question, hits)
  local cache, limit = self.vcache, self.o.vector_cache
  local texts, where, vectors = { question }, {}, {}
  local stored = stored_of(self, embedder, hits)
  for i, h in ipairs(hits) do
    local c = cache[h.id]
    if stored and stored[i] then
      vectors[i] = stored[i]
    elseif c and c.text == h.text then
      vectors[i] = c.vec
    else
      texts[#texts + 1] = h.text or ""
      where[#texts] = i
    end
  end
  local vs, msg, code = embedder:embed(texts, { packed = true })
  if not vs then
    return nil, msg, code
  end
  for j = 2, #texts do
    local i = where[j]
    vectors[i] = vs[j]
    if limit > 0 then
      if self.vcount >= limit then
        self.vcache, self.vcount = {}, 0
        cache = self.vcache
      end
      cache[hits[i].id] = { text = hits[i].text, vec = vs[j] }
      self.vcount = self.vcount + 1
    end
  end
  return vs[1], vectors
end

-- MMR over the candidates, as a traced step.
local function mmr(self, run, question, hits, embedder)
  local o = self.o
  return run:step("rerank", function()
    run:branch("mmr", "no rerank given; the embedder gives vectors")
    local qv, vectors, code = vectors_of(self, embedder, question, hits)
    if not qv then
      return nil, vectors, code
    end
    return require("rag").rerank.mmr(hits, { vectors = vectors, query = qv,
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
-- `embedder` (for MMR; default the index's; false for none),
-- `vector_cache` (hit vectors kept for MMR, by id; default 4096; 0: none).
-- @return pipeline
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.hybrid", opts, EXTRA, 2)
  local p = base.new("hybrid", o, gather)
  p.vcache, p.vcount = {}, 0
  return p
end
