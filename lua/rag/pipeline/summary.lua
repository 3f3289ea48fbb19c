--- rag.pipeline.summary: documents first, then their chunks (seed 003's
-- hierarchical index). The question is searched on the index's summary
-- level (one node per document: its summary under its title, made by
-- `enrich = { doc_summary = ... }`); the best `docs` documents are kept,
-- and the question is searched again among their chunks only. Where many
-- documents look alike chunk by chunk, the document a question is about is
-- picked by what sets it apart, not by the chunk that happens to rank
-- first. See docs/pipelines.md.
-- @module rag.pipeline.summary
local base = require("rag.pipeline.base")

local format = string.format

local EXTRA = {
  docs = { "number", default = 2, int = true, min = 1 },
}

local function gather(self, run, question)
  local o = self.o
  local nodes, msg, code = run:step("summaries", function()
    local so = { level = "summary", k = o.docs }
    for key, v in pairs(o.search or {}) do
      so[key] = v
    end
    return o.index:search(question, so)
  end, { query = question, k = o.docs })
  if not nodes then
    return nil, msg, code
  end
  local own
  if #nodes > 0 then
    local ids, seen = {}, {}
    for _, n in ipairs(nodes) do -- a cluster's node stands for its documents
      for _, id in ipairs(n.members or { n.doc_id }) do
        if not seen[id] then
          seen[id] = true
          ids[#ids + 1] = id
        end
      end
    end
    run:branch("documents", format("searching the chunks of %d document(s) picked by their "
      .. "summaries: %s", #ids, table.concat(ids, ", ")))
    own = { filter = { doc_id = ids } }
  else
    run:branch("all", "no summary matched: searching every chunk")
  end
  local hits
  hits, msg, code = self:search(run, question, o.rerank and o.fetch_k or o.k, "retrieve", own)
  if not hits then
    return nil, msg, code
  end
  return self:refine(run, question, hits)
end

--- A summary-first pipeline: the common options and `docs` (documents
-- picked by their summaries, default 2). The index must have a summary
-- level (`rag.index.new{ enrich = { doc_summary = ... } }`).
-- @return pipeline
-- @raise on a missing index or one without a summary level, an unknown
--   option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.summary", opts, EXTRA, 2)
  local idx = o.index
  if not (type(idx) == "table" and idx.enrich and idx.enrich.tree) then
    error("rag.pipeline.summary: the index has no summary level (rag.index.new{ enrich = "
      .. "{ doc_summary = true } })", 2)
  end
  if o.search and o.search.filter ~= nil then
    error("rag.pipeline.summary: option 'search' must not set 'filter' (the pipeline picks "
      .. "the documents)", 2)
  end
  return base.new("summary", o, gather)
end
