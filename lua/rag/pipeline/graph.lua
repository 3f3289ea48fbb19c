--- rag.pipeline.graph: Graph RAG (seeds 003 and 004). The index's entity
-- graph (rag.graph; built on first use when the index has none: with the
-- offline heuristic when `llm` is rag.llm.extractive, else by the LLM) is
-- walked from the question's entities up to `hops`; the chunks behind the
-- edges reached are ranked and fused (RRF) with the index's own search, and
-- the answer cites them. `mode = "global"` answers corpus-wide questions
-- from the graph's communities instead: each community is described (by
-- the LLM's `graph_community` prompt, or from its entities and relations
-- offline), the ones the question is about are picked, and their chunks
-- answer it with the descriptions as notes. See docs/pipelines.md.
-- @module rag.pipeline.graph
local base = require("rag.pipeline.base")
local graph = require("rag.graph")

local type, ipairs, pairs, format = type, ipairs, pairs, string.format
local concat = table.concat

local EXTRA = {
  hops = { "number", default = 2, int = true, min = 0, max = 10 },
  mode = { "string", default = "local", enum = { "local", "global" } },
  extract = { "string|function" },
  rrf_k = { "number", default = 60, min = 0 },
  max_entities = { "number", default = 200, int = true, min = 1 },
  communities = { "number", default = 3, int = true, min = 1 },
  method = { "string", default = "labels", enum = { "labels", "components" } },
}

-- Is the LLM the offline extractive one (no model to ask for JSON)?
local function offline(llm)
  return type(llm) == "table" and llm.extractive == true
end

-- The index's graph; built first when it has none.
local function ensure(self, run)
  local idx = self.o.index
  if idx.graph then
    return idx.graph
  end
  return run:step("graph_build", function()
    local extract = self.o.extract
    if extract == nil then
      extract = offline(self.o.llm) and "heuristic" or "llm"
    end
    local counts, msg, code = graph.build(idx, { extract = extract, llm = self.o.llm,
      run = run })
    if not counts then
      return nil, msg, code
    end
    run:branch("graph_built", format("built the graph (%s): %d documents, %d entities, %d "
      .. "edges", type(extract) == "string" and extract or "custom", counts.extracted,
      counts.entities, counts.edges))
    return idx.graph
  end, { extract = type(self.o.extract) == "string" and self.o.extract or nil })
end

-- The hits of chunk ids (in order), as the index gives them.
local function chunk_hits(idx, ranked, n)
  local out = {}
  for _, r in ipairs(ranked) do
    if #out >= n then
      break
    end
    local c = idx:chunk(r.id)
    if c and c.leaf ~= false then
      c.score = r.score
      out[#out + 1] = c
    end
  end
  return out
end

-- Local mode: the question's entities, their neighbourhood, its chunks
-- fused with the search.
local function gather_local(self, run, question, g)
  local o = self.o
  local keys = run:step("entities", function()
    return graph.entities_of(g, question)
  end, { question = question })
  local graph_hits = {}
  if #keys > 0 then
    graph_hits = run:step("expand", function()
      local nb = g:neighbours(keys, o.hops, { limit = o.max_entities })
      run:branch("neighbourhood", format("%d entities named in the question, %d reached "
        .. "within %d hops, %d edges", #keys, #nb.entities, o.hops, #nb.edges))
      return chunk_hits(o.index, graph.rank_chunks(g, nb, keys), o.fetch_k)
    end, { entities = keys, hops = o.hops })
  else
    run:branch("no_entities", "the question names no entity of the graph: search alone")
  end
  local searched, msg, code = self:search(run, question, o.fetch_k)
  if not searched then
    return nil, msg, code
  end
  local hits = searched
  if #graph_hits > 0 then
    hits = base.fuse(run, { graph_hits, searched }, o.fetch_k, o.rrf_k)
  end
  return self:refine(run, question, hits)
end

-- The words of a text that can match (lowercase, three letters or more).
local function terms(text)
  local t = {}
  for w in text:lower():gmatch("[%w][%w%-]+") do
    if #w > 2 then
      t[w] = true
    end
  end
  return t
end

-- Global mode: the communities the question is about (by the words their
-- descriptions share with it, then size), their descriptions and chunks.
local function communities(self, run, question, g)
  local o = self.o
  return run:step("communities", function()
    local list = g:communities({ method = o.method })
    local q = terms(question)
    local scored = {}
    for i, keys in ipairs(list) do
      local d = graph.describe(g, keys)
      local hit = 0
      for w in pairs(terms(concat(d.names, " ") .. " " .. concat(d.relations, " "))) do
        if q[w] then
          hit = hit + 1
        end
      end
      scored[#scored + 1] = { keys = keys, d = d, hit = hit, i = i }
    end
    table.sort(scored, function(a, b)
      if a.hit ~= b.hit then
        return a.hit > b.hit
      end
      return a.i < b.i -- the graph's order: largest first
    end)
    local picked = {}
    for i = 1, math.min(o.communities, #scored) do
      picked[i] = scored[i]
    end
    run:branch("communities", format("%d communities; the question's %d picked", #list,
      #picked))
    return picked
  end, { question = question })
end

-- A community's summary: the LLM's, or offline its entities and relations.
local function summary(self, run, question, c)
  local d = c.d
  local offline_text = "Entities: " .. concat(d.names, ", ")
    .. (#d.relations > 0 and (". Relations: " .. concat(d.relations, "; ")) or "")
  if offline(self.o.llm) then
    return offline_text
  end
  local cache = self.summaries
  local key = concat(c.keys, "\0")
  if cache[key] then
    return cache[key]
  end
  local text, msg, code = self:ask(run, "summarize", "graph_community",
    { entities = concat(d.names, ", "), relations = concat(d.relations, "\n") }, question)
  if not text then
    return nil, msg, code
  end
  cache[key] = text
  return text
end

local function gather_global(self, run, question, g)
  local o = self.o
  local picked, msg, code = communities(self, run, question, g)
  if not picked then
    return nil, msg, code
  end
  local notes, lists = {}, {}
  for i, c in ipairs(picked) do
    local s
    s, msg, code = summary(self, run, question, c)
    if not s then
      return nil, msg, code
    end
    notes[i] = "- " .. s
    local nb = g:neighbours(c.keys, 0, { limit = #c.keys })
    lists[i] = chunk_hits(o.index, graph.rank_chunks(g, nb, c.keys), o.fetch_k)
  end
  local hits = #lists > 0 and base.fuse(run, lists, o.fetch_k, o.rrf_k) or {}
  local refined
  refined, msg, code = self:refine(run, question, hits)
  if not refined then
    return nil, msg, code
  end
  return refined, #notes > 0 and ("What the collection's communities are about:\n"
    .. concat(notes, "\n")) or nil
end

local function gather(self, run, question)
  local g, msg, code = ensure(self, run)
  if not g then
    return nil, msg, code
  end
  if self.o.mode == "global" then
    return gather_global(self, run, question, g)
  end
  return gather_local(self, run, question, g)
end

local function respond(self, run, question, partial, stream)
  local hits, note, code = gather(self, run, question)
  if not hits then
    return nil, note, code
  end
  return self:reply(run, question, hits, partial, stream, nil, note)
end

--- A Graph RAG pipeline: the common options and `hops` (2), `mode`
-- ("local" | "global"), `extract` (how to build the graph when the index
-- has none: "heuristic", "llm" or a function; by default the heuristic with
-- the extractive LLM, else "llm"), `rrf_k` (60), `max_entities` (200: the
-- neighbourhood's size), `communities` (3: how many a global answer uses),
-- `method` ("labels" | "components": how communities are found).
-- @return pipeline
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.graph", opts, EXTRA, 2)
  if type(o.index.chunks) ~= "function" or type(o.index.ids) ~= "function" then
    error("rag.pipeline.graph: option 'index' must be a rag.index", 2)
  end
  local p = base.new("graph", o, gather, respond)
  p.summaries = {}
  return p
end
