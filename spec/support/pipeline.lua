--- spec/support/pipeline.lua: what the pipeline specs share: the fixture
-- corpus, an index that records its searches, and readers of results and
-- traces. Not public.
local rag = require("rag")
local helpers = require("spec.helpers")

local M = {}

local corpora = {}

--- The first 40 SciFact documents (source "scifact/<id>") in a rag.index
-- with hashing vectors (256 dims), built once per kind: "plain" (the
-- default chunker) or "sentences" (sentences, at most 64 tokens a chunk).
-- @return index, docs
function M.corpus(kind)
  kind = kind or "plain"
  local c = corpora[kind]
  if c then
    return c.idx, c.docs
  end
  local all = helpers.scifact()
  local docs = {}
  for i = 1, math.min(40, #all) do
    local d = all[i]
    docs[i] = { id = d.id, title = d.title, text = d.text, source = "scifact/" .. d.id }
  end
  local opts = { embedder = rag.embed.hashing({ dim = 256 }) }
  if kind == "sentences" then
    opts.chunker, opts.chunk = "sentences", { size = 64 }
  end
  local idx = rag.index.new(opts)
  assert(idx:add_many(docs))
  corpora[kind] = { idx = idx, docs = docs }
  return idx, docs
end

--- An index that records each search's query, options and hits.
function M.recording(inner)
  local rec = { queries = {}, opts = {}, results = {} }
  function rec.search(_, q, opts)
    local hits, msg, code = inner:search(q, opts)
    rec.queries[#rec.queries + 1] = q
    rec.opts[#rec.opts + 1] = opts
    rec.results[#rec.results + 1] = hits
    return hits, msg, code
  end
  return rec
end

--- The hits' ids, as strings.
function M.ids(hits)
  local out = {}
  for i, h in ipairs(hits) do
    out[i] = tostring(h.id)
  end
  return out
end

--- The document ids an answer cites, sorted.
function M.cited_docs(result)
  local docs = {}
  for _, c in pairs(result.citations) do
    docs[#docs + 1] = c.doc_id
  end
  table.sort(docs)
  return docs
end

--- The first trace entry of a kind (and name, when given), or nil.
function M.find(trace, kind, name)
  for _, e in ipairs(trace) do
    if e.kind == kind and (name == nil or e.name == name) then
      return e
    end
  end
  return nil
end

--- The last message's content of a recorded LLM call.
function M.user_message(call)
  local m = call.messages
  return m[#m].content
end

return M
