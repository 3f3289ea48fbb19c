--- rag.graph: an entity graph kept with a rag.index, for Graph RAG. The
-- graph itself is C (rag.core.graph: entities with string keys, aliases,
-- relations that keep the chunk ids they came from, neighbourhoods,
-- communities, a checksummed file saved in the index's directory under its
-- manifest); this module extracts entities and relations from an index's
-- chunks (an offline heuristic in C, or an LLM prompt returning JSON,
-- validated), resolves names to keys, and keeps the graph in step with the
-- index: only new or changed documents are extracted, removed ones take
-- their edges with them. See docs/pipelines.md (Graph RAG).
-- @module rag.graph
local core = require("rag.core")
local opts_check = require("rag.opts").check

local type, pairs, ipairs, tostring, error, pcall = type, pairs, ipairs, tostring, error, pcall
local format = string.format
local json = core.json

local M = {}

local function cg()
  return core.graph
end

--- A new, empty graph (rag.core.graph.new).
function M.new()
  return cg().new()
end

--- The entity key of a surface name (rag.core.graph.normalize).
function M.normalize(name)
  return cg().normalize(name)
end

--- The offline extractor's mentions in a text (rag.core.graph.mentions).
function M.mentions(text, opts)
  return cg().mentions(text, opts)
end

-- {====== Extraction results ======}

local MAX_NAME = 200

-- A name of an extraction result, trimmed, or nil when unusable.
local function clean(s)
  if type(s) ~= "string" then
    return nil
  end
  s = s:match("^%s*(.-)%s*$")
  if s == "" or #s > MAX_NAME then
    return nil
  end
  return s
end

--- Validates what an extractor returned: `{ entities = { { name =, type =?,
-- aliases =? }, ... }, relations = { { source =, relation =, target = }, ...
-- } }`. Items that are not of that shape are dropped (and counted).
-- @return the cleaned result, the number of dropped items
function M.validate(r)
  local out, dropped = { entities = {}, relations = {} }, 0
  if type(r) ~= "table" then
    return out, 1
  end
  for _, e in ipairs(type(r.entities) == "table" and r.entities or {}) do
    local name = type(e) == "table" and clean(e.name) or clean(e)
    if name then
      local aliases = {}
      if type(e) == "table" and type(e.aliases) == "table" then
        for _, a in ipairs(e.aliases) do
          a = clean(a)
          if a then
            aliases[#aliases + 1] = a
          end
        end
      end
      out.entities[#out.entities + 1] = { name = name, aliases = aliases,
        type = type(e) == "table" and clean(e.type) or nil }
    else
      dropped = dropped + 1
    end
  end
  for _, rel in ipairs(type(r.relations) == "table" and r.relations or {}) do
    local s = type(rel) == "table" and clean(rel.source)
    local p = type(rel) == "table" and clean(rel.relation)
    local t = type(rel) == "table" and clean(rel.target)
    if s and p and t then
      out.relations[#out.relations + 1] = { source = s, relation = p:lower(), target = t }
    else
      dropped = dropped + 1
    end
  end
  return out, dropped
end

-- The key a name resolves to in g, adding the entity when new.
local function entity(g, name)
  local key = cg().normalize(name)
  if not key or key == "" then
    return nil
  end
  local k = g:resolve(key)
  if not k then
    g:entity(key, name)
    k = key
  end
  return k
end

--- Puts a validated extraction result of one chunk into the graph: its
-- entities (resolved through aliases), their aliases, their mentions of the
-- chunk and its relations.
function M.apply(g, chunk_id, r)
  for _, e in ipairs(r.entities) do
    local k = entity(g, e.name)
    if k then
      g:mention(k, chunk_id)
      for _, a in ipairs(e.aliases) do
        local ak = cg().normalize(a)
        if ak and ak ~= "" and not g:resolve(ak) then
          g:alias(ak, k)
        end
      end
    end
  end
  for _, rel in ipairs(r.relations) do
    local s, t = entity(g, rel.source), entity(g, rel.target)
    if s and t and s ~= t then
      g:mention(s, chunk_id)
      g:mention(t, chunk_id)
      g:relate(s, t, rel.relation, chunk_id)
    end
  end
end

-- {====== Extractors ======}

-- The first JSON object of a reply (models wrap JSON in prose or fences).
local function json_object(text)
  if type(text) ~= "string" then
    return nil
  end
  local from = text:find("{", 1, true)
  local to
  for i = #text, 1, -1 do
    if text:sub(i, i) == "}" then
      to = i
      break
    end
  end
  if not from or not to or to < from then
    return nil
  end
  local ok, v = pcall(json.decode, text:sub(from, to))
  if ok and type(v) == "table" then
    return v
  end
  return nil
end

--- An extractor that asks `llm` (anything with `:chat(messages, opts)`) for
-- each chunk's entities and relations with the `graph_extract` prompt and
-- validates the JSON; a reply without a JSON object is asked once more,
-- then the chunk counts as having none.
-- @tparam table llm
-- @tparam[opt] table opts `lang` ("en" | "zh" | "auto"), `prompts` (overrides),
--   `run` (a rag.pipeline.runtime run whose limits the calls go through)
-- @return function(chunk) -> result | nil, msg, code
function M.llm_extractor(llm, opts)
  if type(llm) ~= "table" and type(llm) ~= "userdata" or type(llm.chat) ~= "function" then
    error("rag.graph.llm_extractor: llm must have a :chat(messages, opts) method", 2)
  end
  local o = opts_check("rag.graph.llm_extractor", opts, { lang = { "string", default = "auto",
    enum = { "auto", "en", "zh" } }, prompts = { "table" }, run = { "table" } }, 2)
  local prompts = require("rag.prompts")
  return function(chunk)
    local lang = o.lang == "auto" and prompts.detect(chunk.text) or o.lang
    local set = prompts.get(lang, o.prompts)
    local messages = prompts.messages(set, "graph_extract", { text = chunk.text })
    for _ = 1, 2 do
      local reply, msg, code
      if o.run then
        reply, msg, code = o.run:chat(llm, messages)
      else
        reply, msg, code = llm:chat(messages)
      end
      if not reply then
        return nil, msg, code
      end
      local v = json_object(reply.text)
      if v then
        return (M.validate(v))
      end
      messages[#messages + 1] = { role = "assistant", content = tostring(reply.text) }
      messages[#messages + 1] = { role = "user", content = "Reply with the JSON object only." }
    end
    return { entities = {}, relations = {} }
  end
end

-- {====== Building over an index ======}

local BUILD = {
  extract = { "string|function", default = "heuristic" },
  llm = { "table|userdata" },
  progress = { "function" },
  run = { "table" },
  max_words = { "number", int = true, min = 1, max = 8 },
}

-- The text a chunk's extraction reads: its document's title, then the chunk.
local function chunk_text(c)
  if c.title and c.title ~= "" then
    return c.title .. "\n" .. c.text
  end
  return c.text
end

-- Extracts one document's leaf chunks into g; all or nothing: an LLM
-- failure leaves the graph without the document (its old version removed).
local function extract_doc(g, idx, id, extractor, xo)
  local chunks, msg, code = idx:chunks(id)
  if chunks == nil and msg then
    return nil, msg, code
  end
  if extractor == "heuristic" then
    g:remove_doc(id)
    for _, c in ipairs(chunks or {}) do
      if c.leaf then
        g:extract(c.id, chunk_text(c), xo)
      end
    end
    return true
  end
  local results = {}
  for _, c in ipairs(chunks or {}) do
    if c.leaf then
      local r
      r, msg, code = extractor({ id = c.id, doc_id = c.doc_id, text = chunk_text(c),
        title = c.title, meta = c.meta })
      if r == nil then
        return nil, msg, code
      end
      results[#results + 1] = { c.id, (M.validate(r)) }
    end
  end
  g:remove_doc(id)
  for _, x in ipairs(results) do
    M.apply(g, x[1], x[2])
  end
  return true
end

--- Builds or updates the graph of an index (kept as `idx.graph`, saved and
-- opened with the index): documents whose content hash the graph has not
-- seen are extracted, removed documents leave it. A read-only index gets
-- its graph in memory (a later save of a writable index keeps it).
-- @param idx a rag.index
-- @tparam[opt] table opts `extract` ("heuristic", the default; "llm" with
--   `llm`; or a function `(chunk) -> { entities =, relations = } | nil, msg,
--   code`), `progress = fn(done, total)`, `run` (limits for LLM calls),
--   `max_words` (the heuristic's longest noun phrase, 3)
-- @return counts `{ extracted =, unchanged =, removed =, entities =, edges = }`
--   | nil, msg, code (the documents done so far stay in)
function M.build(idx, opts)
  local fname = "rag.graph.build"
  if type(idx) ~= "table" or type(idx.chunks) ~= "function" then
    error(fname .. ": idx must be a rag.index", 2)
  end
  local o = opts_check(fname, opts, BUILD, 2)
  local extractor = o.extract
  if extractor == "llm" then
    if not o.llm then
      error(fname .. ": extract = \"llm\" needs option 'llm'", 2)
    end
    extractor = M.llm_extractor(o.llm, { run = o.run })
  elseif type(extractor) == "string" and extractor ~= "heuristic" then
    error(fname .. ": option 'extract' must be \"heuristic\", \"llm\" or a function", 2)
  end
  local g = idx.graph or cg().new()
  idx.graph = g
  local ids, msg, code = idx:ids()
  if not ids then
    return nil, msg, code
  end
  local counts = { extracted = 0, unchanged = 0, removed = 0 }
  local live = {}
  local xo = o.max_words and { max_words = o.max_words } or nil
  for i, id in ipairs(ids) do
    live[id] = true
    local h
    h, msg, code = idx:hash(id)
    if h then
      if g:marked(id) == h then
        counts.unchanged = counts.unchanged + 1
      else
        local ok
        ok, msg, code = extract_doc(g, idx, id, extractor, xo)
        if not ok then
          return nil, msg, code
        end
        g:mark(id, h)
        counts.extracted = counts.extracted + 1
      end
    elseif msg then
      return nil, msg, code
    end
    if o.progress then
      o.progress(i, #ids)
    end
  end
  local gone = {}
  for id in pairs(g:marks()) do
    if not live[id] then
      gone[#gone + 1] = id
    end
  end
  table.sort(gone)
  for _, id in ipairs(gone) do
    g:remove_doc(id)
    counts.removed = counts.removed + 1
  end
  local st = g:stats()
  counts.entities, counts.edges = st.entities, st.edges
  return counts
end

-- {====== Questions against the graph ======}

-- Words too common to name an entity on their own.
local STOP = {}
for w in ([[a an the of in on at to for and or but is are was were be been by with from
  as that this these those what which who whom whose when where why how does do did it its
  their there than then into about over under between after before during not no yes can
  could would should will shall may might must has have had i you he she we they me him her
  us them my your our any all some each other such only own same so too very]]):gmatch("%a+")
do
  STOP[w] = true
end

--- The graph's entities a question names: its mentions (the heuristic) and
-- its word n-grams (up to 4 words) that are entity keys or aliases,
-- resolved, without repeats, in order of appearance.
-- @return keys
function M.entities_of(g, question)
  local keys, seen = {}, {}
  local function add(k)
    if k and not seen[k] then
      seen[k] = true
      keys[#keys + 1] = k
    end
  end
  for _, m in ipairs(cg().mentions(question) or {}) do
    add(g:resolve(m.key))
  end
  local words = {}
  for w in question:gmatch("[%w][%w%-']*") do
    words[#words + 1] = w
  end
  for n = 4, 1, -1 do
    for i = 1, #words - n + 1 do
      local phrase = table.concat(words, " ", i, i + n - 1)
      if n > 1 or (not STOP[phrase:lower()] and #phrase > 2) then
        local key = cg().normalize(phrase)
        if key and key ~= "" then
          add(g:resolve(key))
        end
      end
    end
  end
  return keys
end

--- The chunks behind a neighbourhood (g:neighbours' result), ranked: each
-- edge gives its chunks 1 / (1 + the hop of its farther end), each seed
-- entity's mentions 1; ties by id.
-- @return `{ { id =, score = }, ... }`
function M.rank_chunks(g, nb, seeds)
  local hop, score = {}, {}
  for _, e in ipairs(nb.entities) do
    hop[e.key] = e.hops
  end
  for _, e in ipairs(nb.edges) do
    local h = math.max(hop[e.src] or 0, hop[e.dst] or 0)
    for _, c in ipairs(e.chunks) do
      score[c] = (score[c] or 0) + 1 / (1 + h)
    end
  end
  for _, k in ipairs(seeds) do
    local ent = g:get(k)
    for _, c in ipairs(ent and ent.chunks or {}) do
      score[c] = (score[c] or 0) + 1
    end
  end
  local out = {}
  for id, s in pairs(score) do
    out[#out + 1] = { id = id, score = s }
  end
  table.sort(out, function(a, b)
    if a.score ~= b.score then
      return a.score > b.score
    end
    return a.id < b.id
  end)
  return out
end

--- A community's description without an LLM: its entities by degree and
-- the relations among them, as text, and those relations' chunk ids.
function M.describe(g, keys, max_entities)
  local ents = {}
  for _, k in ipairs(keys) do
    local e = g:get(k)
    if e then
      ents[#ents + 1] = e
    end
  end
  table.sort(ents, function(a, b)
    if a.degree ~= b.degree then
      return a.degree > b.degree
    end
    return a.key < b.key
  end)
  local names, top = {}, {}
  for i = 1, math.min(#ents, max_entities or 12) do
    names[i] = ents[i].name
    top[#top + 1] = ents[i].key
  end
  local nb = g:neighbours(top, 1, { limit = #keys + 1 })
  local inside, rels = {}, {}
  for _, k in ipairs(keys) do
    inside[k] = true
  end
  for _, e in ipairs(nb.edges) do
    if inside[e.src] and inside[e.dst] and #rels < 20 then
      local a, b = g:get(e.src), g:get(e.dst)
      rels[#rels + 1] = format("%s %s %s", a.name, e.relation, b.name)
    end
  end
  return { names = names, relations = rels, size = #keys }
end

return M
