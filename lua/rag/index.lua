--- rag.index: a document collection that keeps chunk texts, BM25 and
-- vectors in step. Lua does the options, embedding, batching and the
-- manifest of a save; the C core (rag.core.index) hashes, chunks and keeps
-- the documents and searches them. See docs/index.md.
-- @module rag.index
local core = require("rag.core")
local opts_check = require("rag.opts").check

local M = {}

local cindex, fs, json = core.index, core.fs, core.json
local type, pairs, ipairs, tostring, error, select = type, pairs, ipairs, tostring, error, select
local sort = table.sort
local now = core.http.now -- monotonic seconds: a step's budget is wall time

local FORMAT, FORMAT_VERSION = "rag.index", 1
local MANIFEST = "manifest.json"
-- the parts of an index without enrichment (rag.enrich adds its own)
local PLAIN_PARTS = { store = true, bm25 = true, vectors = true, graph = true }

-- The vector index a default ("auto") collection uses: exact below this many
-- chunks, HNSW from there (docs/index.md gives the measurement).
M.HNSW_FROM = 20000

local Index = {}
Index.__index = Index
M._Index = Index -- rag.store.postgres's index class extends it

local SCHEMA = {
  chunker = { "function|string", default = "recursive" },
  chunk = { "table" },
  embedder = { "table|userdata|boolean" },
  vector = { "string", default = "auto", enum = { "auto", "exact", "hnsw" } },
  analyzer = { "userdata" },
  bm25 = { "table" },
  hnsw = { "table" },
  metric = { "string", default = "cosine", enum = { "cosine", "dot", "l2" } },
  batch = { "number", default = 256, int = true, min = 1 },
  enrich = { "boolean|table" },
  llm = { "table|userdata" },
}

-- {====== Settings ======}

-- The name of a rag.chunk function, or nil for another function.
local function chunker_name(fn)
  for name, f in pairs(core.chunk) do
    if f == fn then
      return name
    end
  end
end

-- The tokenizer option of chunk options, as a name for the manifest.
local function tokenizer_name(tok)
  if tok == nil or type(tok) == "string" then
    return tok
  end
  local ok, info = pcall(function()
    return tok:info()
  end)
  return ok and info and info.name or "custom"
end

-- What an embedder is, for the manifest: { name, dim, config }.
local function describe(e)
  if not e then
    return nil
  end
  local mt = getmetatable(e)
  local d = { name = (type(e.name) == "string" and e.name) or (mt and mt.__name) or "custom" }
  if type(e.dim) == "function" then
    d.dim = e:dim()
  end
  if type(e.config) == "function" then
    d.config = e:config()
  end
  return d
end

-- Equal as JSON (what a manifest holds).
local function same(a, b)
  return json.encode(a) == json.encode(b)
end

-- An embedder rebuilt from the manifest's description, for the offline ones.
local function rebuild(desc)
  if desc and desc.name == "rag.hashing" then
    local embed = require("rag.embed")
    return embed.hashing(desc.config)
  end
end

local function check_embedder(fname, e)
  if e and type(e.embed) ~= "function" then
    error(fname .. ": option 'embedder' must have an :embed(texts) method, or be false", 3)
  end
end

local function new_hnsw(fname, o, dim)
  local h = { dim = dim, metric = o.metric }
  for k, v in pairs(o.hnsw or {}) do
    h[k] = v
  end
  local ok, v = pcall(core.hnsw.new, h)
  if not ok then
    error(fname .. ": " .. tostring(v):gsub("^rag%.hnsw%.new: ", "option hnsw: "), 4)
  end
  return v
end

local function new_parts(fname, o, dim)
  local b = core.bm25.new(o.bm25_opts)
  if not dim then
    return b
  end
  if o.vector == "hnsw" then
    return b, new_hnsw(fname, o, dim)
  end
  -- the sketch: an int8 copy of the rows that the exact search scans first
  -- (a quarter of the bytes; rag.vec.new's option sketch)
  return b, core.vec.new({ dim = dim, metric = o.metric, sketch = o.metric ~= "l2" })
end

-- With vector = "auto", moves the exact vectors into HNSW once there are
-- HNSW_FROM chunks (after the batch that reaches it, so the point is the
-- same for the same documents).
local function maybe_switch(self, fname)
  if self.o.vector ~= "auto" or self.store then
    return
  end
  local vector, leaves, dim = self.c:shape()
  if vector == "exact" and leaves >= M.HNSW_FROM then
    self.c:to_hnsw(new_hnsw(fname, self.o, dim))
  end
end

local function settings(fname, opts)
  local o = opts_check(fname, opts, SCHEMA, 3)
  if type(o.chunker) == "string" then
    local f = core.chunk[o.chunker]
    if not f then
      error(fname .. ": unknown chunker '" .. o.chunker .. "'", 3)
    end
    o.chunker_name, o.chunker = o.chunker, f
  else
    o.chunker_name = chunker_name(o.chunker) or "custom"
  end
  local c = {}
  for k, v in pairs(o.chunk or {}) do
    c[k] = v
  end
  if o.chunker_name == "recursive" and o.chunk == nil then
    c.size, c.overlap = 512, 64
  end
  if c.tokenizer == nil and c.unit ~= "char" then
    c.tokenizer = require("rag.tokenizer").get("cl100k_base")
  elseif type(c.tokenizer) == "string" then
    c.tokenizer = require("rag.tokenizer").get(c.tokenizer)
  end
  o.chunk = c
  if o.embedder == nil then
    o.embedder = require("rag.embed").default()
  elseif o.embedder == true then
    error(fname .. ": option 'embedder' must be an embedder or false", 3)
  end
  check_embedder(fname, o.embedder)
  local b = {}
  for k, v in pairs(o.bm25 or {}) do
    b[k] = v
  end
  b.analyzer = b.analyzer or o.analyzer
  o.bm25_opts = b
  if o.llm ~= nil and type(o.llm.chat) ~= "function" then
    error(fname .. ": option 'llm' must have a :chat(messages, opts) method", 3)
  end
  o.enrich = require("rag.enrich")._settings(fname, o.enrich, o.llm, 3)
  return o
end

-- The manifest's record of the settings (no functions or userdata).
local function record(self)
  local chunk = {}
  for k, v in pairs(self.o.chunk) do
    if type(v) ~= "function" then -- semantic's embed: given again to rag.index.open
      chunk[k] = k == "tokenizer" and tokenizer_name(v) or v
    end
  end
  local st = self.c:stats()
  return {
    chunker = { name = self.o.chunker_name, options = json.object(chunk) },
    embedder = self.edesc or false,
    vector = st.vector,
    vector_option = self.o.vector,
    hnsw = self.o.hnsw and json.object(self.o.hnsw) or nil,
    metric = self.o.metric,
    enrich = self.enrich and require("rag.enrich")._record(self.enrich.o) or nil,
  }
end

-- {====== Construction ======}

local function wrap(c, o, edesc, readonly)
  return setmetatable({ c = c, o = o, embedder = o.embedder or nil, edesc = edesc,
    readonly = readonly or false, gen = 0 }, Index)
end

-- The summary level's chunker: a node's summary is one chunk.
local function whole(text)
  if text == "" then
    return {}
  end
  return { { text = text, start = 1, stop = #text, tokens = #text } }
end

-- A function(embedder [, paths]) making (or with paths opening) the
-- summary level of an enriched index with settings `o`: a rag.index of one
-- node per document, exact vectors, the index's BM25 settings.
local function tree_of(o, readonly)
  return function(embedder, paths)
    local so = settings("rag.index.new", { chunker = whole, chunk = { unit = "char" },
      embedder = embedder, vector = "exact", metric = o.metric, bm25 = o.bm25_opts })
    if not paths then
      local b, v = new_parts("rag.index.new", so, nil)
      return wrap(cindex.new(b, v), so, describe(embedder))
    end
    if not paths.treebm25 then
      return nil, "rag.index.open: the summary level's part 'treebm25' is missing", "corrupt"
    end
    local c, msg, code = cindex.open({ store = paths.treestore, bm25 = paths.treebm25,
      vectors = paths.treevectors, kind = "exact", map = readonly })
    if not c then
      return nil, msg, code
    end
    return wrap(c, so, describe(embedder), readonly)
  end
end

--- A new, empty index. See docs/index.md for the options.
-- @tparam[opt] table opts
-- @treturn Index
function M.new(opts)
  if type(opts) == "table" and opts.store ~= nil then
    local o = {}
    for k, v in pairs(opts) do
      o[k] = v
    end
    local store = o.store
    o.store = nil
    for _, k in ipairs({ "hnsw", "bm25", "analyzer" }) do
      if o[k] ~= nil then
        error("rag.index.new: option '" .. k .. "' is the store's business with a store"
          .. (k == "hnsw" and " (rag.store.postgres{ hnsw = ... })" or ""), 2)
      end
    end
    o = settings("rag.index.new", o)
    if o.enrich then
      error("rag.index.new: option 'enrich' is not available with a store yet", 2)
    end
    if type(store) ~= "table" or type(store.index) ~= "function" then
      error("rag.index.new: option 'store' must be a store (rag.store.postgres{...}), got "
        .. type(store), 2)
    end
    return store:index(o, describe(o.embedder), wrap)
  end
  local o = settings("rag.index.new", opts)
  local edesc = describe(o.embedder)
  local dim = edesc and edesc.dim
  local b, v = new_parts("rag.index.new", o, dim)
  local idx = wrap(cindex.new(b, v), o, edesc)
  if o.enrich then
    idx.enrich = require("rag.enrich")._new(o.enrich, o.bm25_opts, o.llm, tree_of(o),
      o.embedder)
  end
  return idx
end

local function check_open(self, fname, write)
  local mt = getmetatable(self)
  if mt ~= Index and (type(mt) ~= "table" or getmetatable(mt) ~= Index) then
    error(fname .. ": not an index", 3)
  end
  if self.c == nil then
    error(fname .. ": index is closed", 3)
  end
  if write and self.readonly then
    error(fname .. ": index is read-only", 3)
  end
end

-- {====== Adding ======}

-- Gives the index its vector part on the first vectors, when the embedder
-- has no :dim() to size it by at construction.
local function ensure_vectors(self, dim)
  if self.store or select(3, self.c:shape()) > 0 then
    return
  end
  local _, v = new_parts("rag.index.add", self.o, dim)
  self.c:attach(v)
  self.edesc.dim = dim
end

-- A run without limits for enrichment's LLM calls (add, and add_many
-- without `limits` or `run`).
local function enrich_run(fname, limits)
  local l = { steps = math.huge, llm_calls = math.huge }
  for k, v in pairs(limits or {}) do
    l[k] = v
  end
  return require("rag.pipeline.runtime").new({ name = fname, limits = l })
end

-- Stages the documents list[pos], list[pos + 1], ... that changed, up to
-- `limit` of them; chunks, maybe embeds, and puts them (all in C but the
-- embedder). Returns how many it read and how many were unchanged, added
-- and updated | nil, msg, code. `run` holds the enrichment's LLM calls;
-- `tick(n)`, when given, is called after each of them (n: documents of
-- the batch enriched so far).
local function apply(self, fname, list, pos, limit, run, tick)
  local o, c = self.o, self.c
  local n, unchanged, batch
  if self.stage then -- a store elsewhere: it knows what changed, a scratch index chunks
    n, unchanged, batch, c = self:stage(list, pos, limit, fname)
    if not n then
      return nil, unchanged, batch -- msg, code
    end
  else
    n, unchanged, batch = c:stage(list, pos, limit, fname)
  end
  if not batch then
    return n, unchanged, 0, 0
  end
  if not o.chunker then
    error(fname .. ": the index's chunker '" .. tostring(o.chunker_name) .. "' is not a "
      .. "rag.chunk function; pass it again as rag.index.open(dir, { chunker = f })", 3)
  end
  if o.chunker_name == "semantic" and o.chunk.embed == nil then
    error(fname .. ": the index's semantic chunker needs its embed function again: "
      .. "rag.index.open(dir, { chunk = { embed = f, ... } })", 3)
  end
  if type(o.chunk.tokenizer) == "string" then -- an opened index loads it on its first add
    o.chunk.tokenizer = require("rag.tokenizer").get(o.chunk.tokenizer)
  end
  local embedder, enrich = self.embedder, self.enrich
  local texts, msg, code = c:chunk(batch, o.chunker, o.chunk, fname, (embedder or enrich) and true)
  if not texts then
    return nil, msg, code
  end
  local staged, prepared, qtexts, where, qvecs
  if enrich then -- the LLM's and functions' steps first: they may fail
    staged = c:staged(batch)
    local originals = {}
    for i = pos, pos + n - 1 do
      local d = list[i]
      originals[type(d.id) == "number" and tostring(d.id) or d.id] = d
    end
    prepared, msg, code = enrich:prepare(staged, texts, originals, run or enrich_run(fname), tick)
    if not prepared then
      return nil, msg, code
    end
    qtexts, where = enrich:questions(prepared, staged)
    if embedder and #qtexts > 0 then
      qvecs, msg, code = embedder:embed(qtexts, { packed = true })
      if not qvecs then
        return nil, msg, code
      end
    end
    local ok
    ok, msg, code = enrich:embed_nodes(prepared, embedder)
    if not ok then
      return nil, msg, code
    end
  end
  local vectors
  if embedder and #texts > 0 then
    vectors, msg, code = embedder:embed(texts, { packed = true })
    if not vectors then
      return nil, msg, code
    end
    if #vectors ~= #texts then
      error(fname .. ": the embedder returned " .. #vectors .. " vectors for " .. #texts
        .. " texts", 3)
    end
    local v1 = vectors[1]
    ensure_vectors(self, type(v1) == "string" and math.floor(#v1 / 4) or #v1)
  end
  if self.put then -- a store elsewhere (rag.store.postgres) takes the chunked batch
    local added, updated
    added, updated, code = self:put(c, batch, vectors, fname)
    if not added then
      return nil, updated, code
    end
    return n, unchanged, added, updated
  end
  local added, updated
  if not enrich then
    added, updated, code = c:commit(batch, vectors)
    if not added then
      return nil, updated, code
    end
    return n, unchanged, added, updated
  end
  -- commit may fail or raise after some documents went in: those get
  -- their enrichment whatever happens, or they would stay without it
  local ok
  ok, added, updated, code = pcall(c.commit, c, batch, vectors)
  local ids = {}
  for _, d in ipairs(staged) do
    if c:hash(d.id) == d.hash then
      ids[#ids + 1] = d.id
    end
  end
  enrich:commit(self, ids, prepared, qvecs, where)
  if not ok then
    error(added, 0)
  elseif not added then
    return nil, updated, code
  end
  return n, unchanged, added, updated
end

--- Adds or replaces a document.
-- @tparam table doc `{ id, text, source?, title?, meta? }`
-- @treturn string "added", "updated" or "unchanged" | nil, msg, code
function Index:add(doc)
  check_open(self, "rag.index.add", true)
  local n, unchanged, added = apply(self, "rag.index.add", { doc }, 1, 1)
  if not n then
    return nil, unchanged, added -- msg, code
  elseif unchanged > 0 then
    return "unchanged"
  end
  if self.enrich then
    local ok, msg, code = self.enrich:cluster(enrich_run("rag.index.add"))
    if not ok then
      return nil, msg, code
    end
  end
  maybe_switch(self, "rag.index.add")
  if self.finish then
    local ok, msg, code = self:finish()
    if not ok then
      return nil, msg, code
    end
  end
  return added > 0 and "added" or "updated"
end

-- Collects a list or an iterator of documents, sorted by id (the canonical
-- order); a later document with the same id wins. Returns them and their ids.
local function collect(fname, docs)
  local list = {}
  if type(docs) == "function" then
    for doc in docs do
      list[#list + 1] = doc
    end
  elseif type(docs) == "table" then
    for i = 1, #docs do
      list[i] = docs[i]
    end
  else
    error(fname .. ": documents must be a list or an iterator, got " .. type(docs), 3)
  end
  return cindex.order(list, fname)
end

local ADD_MANY = {
  progress = { "function" },
  budget_ms = { "number", above = 0 },
  batch = { "number", int = true, min = 1 },
  limits = { "table" },
  run = { "table" },
}

-- add_many and sync of at least this many documents end by collecting the
-- batches' Lua garbage (the embedder's vectors: about 11 MB on SciFact) and
-- giving the allocator's free pages back (rag_trim): on SciFact, 7 MB less
-- RSS for each. Without the collection the garbage was freed after the trim
-- and stayed resident (bench/index.lua --rss: 67.7 MB, now 60.5).
local TRIM_FROM = 256

-- During such an add_many or sync on Lua 5.4, the collector runs in
-- generational mode (then goes back to the host's mode): each batch's
-- garbage (its chunk texts and vectors) is young and freed by the next
-- minor collection, before later batches' long-lived allocations are laid
-- around it. In incremental mode it lived until the heap doubled, and the
-- pages it shared with those allocations stayed resident: on SciFact 3 MB
-- more RSS after the trim, for no gain in speed.
local GENERATIONAL = _VERSION == "Lua 5.4"

-- A budgeted step takes at most this many documents per embedding call.
local STEP_DOCS = 8
-- A document's share of a step's fixed costs (the calls into C, the
-- embedder's call), in bytes of text, for predicting what fits.
local DOC_BYTES = 512

-- How many of list[pos], list[pos + 1], ... (at most STEP_DOCS) are
-- predicted to fit in `left` seconds at `rate` seconds per weighted byte;
-- one when nothing is measured yet.
local function fitting(list, pos, total, left, rate)
  if not rate then
    return 1
  end
  local n, cost = 0, 0
  while n < STEP_DOCS and pos + n <= total do
    local text = list[pos + n].text
    cost = cost + rate * (DOC_BYTES + (type(text) == "string" and #text or 0))
    if cost > left then
      break
    end
    n = n + 1
  end
  return n
end

-- The weighted bytes of list[pos .. pos + n - 1].
local function weight(list, pos, n)
  local w = 0
  for i = pos, pos + n - 1 do
    local text = list[i].text
    w = w + DOC_BYTES + (type(text) == "string" and #text or 0)
  end
  return w
end

-- A stepper over sorted documents: each call does one batch, or with a
-- budget (ms) as many documents as fit: what each batch cost per byte of
-- text predicts the next one's cost, so a step ends before its deadline
-- rather than a batch of long documents after it; always at least one
-- document. Returns done, counts | nil, msg, code.
local function stepper(self, fname, list, o)
  local counts = { added = 0, updated = 0, unchanged = 0, removed = 0 }
  local pos, total = 1, #list
  local batch = o.batch or self.o.batch
  if (o.limits or o.run) and not self.enrich then
    error(fname .. ": options 'limits' and 'run' bound an enriched index's LLM calls; this "
      .. "index has no enrichment", 3)
  end
  local run = self.enrich and (o.run or enrich_run(fname, o.limits))
  local function tally() -- what the enrichment's LLM calls cost so far
    local u = run:usage()
    counts.llm_calls, counts.tokens = u.llm_calls, u.total_tokens
  end
  local tick -- progress during a batch's LLM calls, which may take minutes
  if run then
    tally()
    tick = o.progress and function(prepared) -- documents of the batch enriched so far
      tally()
      o.progress(pos - 1 + prepared, total, counts)
    end
  end
  local rate -- seconds per weighted byte, measured
  local run_step
  local function step(budget)
    if budget or not GENERATIONAL or total < TRIM_FROM then
      return run_step(budget)
    end
    local mode = collectgarbage("generational") -- the host's mode, restored whatever happens
    local out = table.pack(pcall(run_step, budget))
    collectgarbage(mode)
    if not out[1] then
      error(out[2], 0)
    end
    return table.unpack(out, 2, out.n)
  end
  function run_step(budget)
    local deadline = budget and (now() + budget / 1000)
    local first = true
    repeat
      local limit, t0 = batch, nil
      if deadline then
        t0 = now()
        limit = math.min(batch, fitting(list, pos, total, deadline - t0, rate))
        if limit == 0 then
          if not first then
            break
          end
          limit = 1
        end
      end
      local n, unchanged, added, updated = apply(self, fname, list, pos, limit, run, tick)
      if run then
        tally()
      end
      if not n then
        pos = total + 1
        return nil, unchanged, added
      end
      if deadline then
        local r = (now() - t0) / weight(list, pos, n)
        rate = rate and (rate + r) / 2 or r
      end
      pos = pos + n
      first = false
      counts.unchanged = counts.unchanged + unchanged
      counts.added = counts.added + added
      counts.updated = counts.updated + updated
      maybe_switch(self, fname)
      if o.progress then
        o.progress(pos - 1, total, counts)
      end
    until pos > total or not deadline or now() >= deadline
    if pos > total and total >= TRIM_FROM then
      if not budget then -- the batches' Lua garbage too (a budgeted step must not pause for it)
        collectgarbage()
      end
      cindex.trim() -- the batches' garbage back to the system, not kept as RSS
    end
    if pos > total and self.enrich then -- the clusters of documents, when they changed
      local ok, msg, code = self.enrich:cluster(run, tick and function()
        tick(0)
      end)
      if not ok then
        return nil, msg, code
      end
    end
    if pos > total and self.finish then -- a store's work after a bulk load
      local ok, msg, code = self:finish()
      if not ok then
        return nil, msg, code
      end
    end
    return pos > total, counts
  end
  return step
end

--- Adds many documents, in id order, embedding in batches.
-- @param docs a list or an iterator of documents
-- @tparam[opt] table opts `progress = fn(done, total, counts)`, `budget_ms`, `batch`
-- @return counts `{ added, updated, unchanged, removed }` | nil, msg, code;
--   with `budget_ms`, a step function `step([ms])` instead (see docs/index.md)
function Index:add_many(docs, opts)
  check_open(self, "rag.index.add_many", true)
  local o = opts_check("rag.index.add_many", opts, ADD_MANY, 2)
  local list = collect("rag.index.add_many", docs)
  local step = stepper(self, "rag.index.add_many", list, o)
  if o.budget_ms then
    return function(ms)
      check_open(self, "rag.index.add_many", true)
      if ms ~= nil and (type(ms) ~= "number" or ms ~= ms or ms <= 0) then
        error("rag.index.add_many: the step's budget must be a number of milliseconds > 0, got "
          .. tostring(ms), 2)
      end
      return step(ms or o.budget_ms)
    end
  end
  while true do
    local done, counts, code = step()
    if done == nil then
      return nil, counts, code
    end
    if done then
      return counts
    end
  end
end

--- Makes the index hold exactly the documents of `docs`: adds and updates
-- what it sees, removes the documents it did not see (except those for
-- which `opts.keep(id)` is true: a source that failed to load).
-- @return counts `{ added, updated, unchanged, removed }` | nil, msg, code
function Index:sync(docs, opts)
  check_open(self, "rag.index.sync", true)
  local o = opts_check("rag.index.sync", opts, { progress = { "function" },
    batch = { "number", int = true, min = 1 }, keep = { "function" }, limits = { "table" },
    run = { "table" } }, 2)
  local list, ids = collect("rag.index.sync", docs)
  local step = stepper(self, "rag.index.sync", list, o)
  local counts
  while true do
    local done, c, code = step()
    if done == nil then
      return nil, c, code
    end
    if done then
      counts = c
      break
    end
  end
  local seen = {}
  for _, id in ipairs(ids) do
    seen[id] = true
  end
  local gone = {}
  local keep = o.keep
  local live, msg, code = self:ids()
  if not live then
    return nil, msg, code
  end
  for _, id in ipairs(live) do
    if not seen[id] and not (keep and keep(id)) then
      gone[#gone + 1] = id
    end
  end
  sort(gone)
  if self.store then
    local ok
    ok, msg, code = self:remove_all(gone)
    if not ok then
      return nil, msg, code
    end
  else
    for _, id in ipairs(gone) do
      self.c:remove(id)
      if self.graph then
        self.graph:remove_doc(id)
      end
      if self.enrich then
        self.enrich:remove(id)
      end
    end
  end
  counts.removed = #gone
  if #gone > 0 and self.enrich then
    local ok
    ok, msg, code = self.enrich:cluster(o.run or enrich_run("rag.index.sync", o.limits))
    if not ok then
      return nil, msg, code
    end
  end
  return counts
end

--- Removes a document and all its chunks. @treturn boolean whether it was there
function Index:remove(id)
  check_open(self, "rag.index.remove", true)
  local removed = self.c:remove(id)
  if removed and self.graph then -- the graph's edges from it go too
    self.graph:remove_doc(type(id) == "number" and tostring(id) or id)
  end
  if removed and self.enrich then
    self.enrich:remove(type(id) == "number" and tostring(id) or id)
  end
  return removed
end

--- The ids of the documents, sorted bytewise. @treturn table
function Index:ids()
  check_open(self, "rag.index.ids")
  local ids = self.c:ids()
  sort(ids)
  return ids
end

--- The vectors the index keeps for chunk ids (hit ids), as packed float32
-- strings, `false` for an id without one (a merged parent, an unknown id);
-- nil for an index without vectors.
-- @tparam table ids
-- @return table | nil
function Index:vectors(ids)
  check_open(self, "rag.index.vectors")
  if type(ids) ~= "table" then
    error("rag.index.vectors: ids must be a list of chunk ids, got " .. type(ids), 2)
  end
  return self.c:vectors(ids)
end

--- A chunk by its id ("doc#n", as hits name them): `{ id, doc_id, text,
-- source, title, meta, start, stop, leaf, level?, parent? }`, or nil.
function Index:chunk(id)
  check_open(self, "rag.index.chunk")
  return self.c:chunk_at(id)
end

--- The chunks of document `id` in order (as `chunk` gives them), or nil.
function Index:chunks(id)
  check_open(self, "rag.index.chunks")
  return self.c:chunks(id)
end

--- The content hash of document `id` (hex SHA-256 of its text, title and
-- meta: what `add` compares), or nil when it is not there.
function Index:hash(id)
  check_open(self, "rag.index.hash")
  return self.c:hash(id)
end

--- The document `id` as `{ id, text, source, title, meta, chunks }`, or nil.
function Index:get(id)
  check_open(self, "rag.index.get")
  return self.c:get(id)
end

--- The number of documents (also `#idx` on Lua 5.2+; Lua 5.1 and LuaJIT
-- ignore __len on tables).
function Index:count()
  check_open(self, "rag.index.count")
  return #self.c
end

Index.__len = Index.count

--- Counts, sizes and settings. @treturn table
function Index:stats()
  check_open(self, "rag.index.stats")
  local s = self.c:stats()
  s.generation = self.gen
  s.readonly = self.readonly
  s.embedder = self.edesc and self.edesc.name or false
  s.chunker = self.o.chunker_name
  s.default_mode = self:default_mode()
  s.enrich = self.enrich and self.enrich:coverage() or nil
  return s
end

-- {====== Search ======}

--- The mode a search without `mode` uses: "hybrid" with a semantic
-- embedder, "bm25" without one or with a lexical one (rag.embed.hashing),
-- whose vectors drag RRF below BM25 alone (docs/index.md).
function Index:default_mode()
  local e = self.edesc
  if not e or not self.embedder or e.name == "rag.hashing" or self.embedder.lexical then
    return "bm25"
  end
  return "hybrid"
end

--- Searches the leaf chunks. See docs/index.md for the options.
-- @return hits | nil, msg, code
-- Checks search's arguments; the default mode and the query's vector when
-- the mode needs one, or nil, msg, code when the embedder fails.
local function query_of(self, fname, query, opts)
  check_open(self, fname)
  if type(query) ~= "string" then
    error(fname .. ": query must be a string, got " .. type(query), 3)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(fname .. ": options must be a table, got " .. type(opts), 3)
  end
  local default = self:default_mode()
  local mode = opts and opts.mode or default
  if mode == "hybrid" or mode == "vector" then
    if not self.embedder then
      error(fname .. ": mode '" .. mode .. "' needs the embedder; "
        .. (self.edesc and "pass it to rag.index.open" or "this index has none"), 3)
    end
    local vs, msg, code = self.embedder:embed({ query }, { packed = true })
    if not vs then
      return nil, msg, code
    end
    return default, vs[1]
  end
  return default
end

function Index:search(query, opts)
  if opts and opts.level ~= nil and opts.level ~= "chunk" then
    check_open(self, "rag.index.search")
    if opts.level ~= "summary" then
      error("rag.index.search: option 'level' must be \"chunk\" or \"summary\", got "
        .. tostring(opts.level), 2)
    end
    if not (self.enrich and self.enrich.tree) then
      error("rag.index.search: this index has no summary level (rag.index.new{ enrich = "
        .. "{ doc_summary = true } })", 2)
    end
    return self.enrich:search_summaries(query, opts)
  end
  local default, qv, code = query_of(self, "rag.index.search", query, opts)
  if not default then
    return nil, qv, code
  end
  local enrich = self.enrich
  if not enrich then
    if opts and opts.fields ~= nil then
      error("rag.index.search: option 'fields' weighs an enriched index's fields; this index "
        .. "has no enrichment", 2)
    end
    return self.c:search(query, opts or {}, default, qv)
  end
  local hits, msg
  hits, msg, code = self.c:search(query, opts or {}, default, qv, enrich:parts(opts))
  if not hits then
    return nil, msg, code
  end
  return enrich:decorate(hits)
end

local function or_null(v)
  if v == nil then
    return json.null
  end
  return v
end

--- search_json's options for `search`: a copy without `highlight`, and
-- the analyzer of the highlights when wanted (owner.highlighter: `analyzer`,
-- or a default one made once).
function M._json_opts(owner, opts, analyzer)
  if not (opts and opts.highlight ~= nil) then
    return opts, nil
  end
  if type(opts.highlight) ~= "boolean" then
    error("rag.index.search_json: option 'highlight' must be a boolean, got "
      .. type(opts.highlight), 3)
  end
  local o = {}
  for k, v in pairs(opts) do
    o[k] = v
  end
  o.highlight = nil
  if not opts.highlight then
    return o, nil
  end
  owner.highlighter = owner.highlighter or analyzer or core.text.analyzer()
  return o, owner.highlighter
end

--- The text `search_json` gives for hits that came as Lua tables (an
-- enriched index's, a store's): the same shape, highlights by `analyzer`
-- (a rag.analyzer) when it is given.
function M._hits_json(hits, query, analyzer)
  local out = {}
  local qterms = analyzer and #hits > 0 and core.text.tokenize(query, analyzer) or nil
  for i, h in ipairs(hits) do
    local r = h.ranks or {}
    out[i] = { id = h.id, doc_id = h.doc_id, score = h.score, text = h.text,
      source = or_null(h.source), title = or_null(h.title), meta = json.object(h.meta or {}),
      start = h.start, stop = h.stop, ranks = { bm25 = or_null(r.bm25),
        vector = or_null(r.vector), keywords = r.keywords, summary = r.summary,
        questions = r.questions },
      highlights = qterms and require("rag.text").highlights(h.text, qterms, analyzer) or nil }
  end
  return json.encode(out)
end

--- `search`'s hits as the text of one JSON array, each hit an object with
-- its keys sorted: `doc_id`, `highlights` (with `highlight = true`), `id`,
-- `meta`, `ranks` (`bm25` and `vector` null when the hit is not in that
-- list), `score`, `source` and `title` (null when the document has none),
-- `start`, `stop`, `text`. Written in C from the index's records, with no
-- Lua table per hit (what `rag serve` answers /search with); the same text
-- as rag.json.encode of those hits. Highlights are rag.text.highlights of
-- each hit's text and the query, by the index's analyzer.
function Index:search_json(query, opts)
  local o, hl = M._json_opts(self, opts, self.o.analyzer)
  if self.enrich or (o and o.level ~= nil and o.level ~= "chunk") then
    -- enriched hits come decorated from Lua: encoded from their tables
    local hits, msg, code = self:search(query, o)
    if not hits then
      return nil, msg, code
    end
    return M._hits_json(hits, query, hl)
  end
  local default, qv, code = query_of(self, "rag.index.search_json", query, o)
  if not default then
    return nil, qv, code
  end
  return self.c:search_json(query, o or {}, default, qv, nil, hl)
end

-- {====== Saving and opening ======}

local function join(dir, name)
  return dir:sub(-1) == "/" and dir .. name or dir .. "/" .. name
end

-- The SHA-256 of a manifest's canonical JSON (without its checksum field).
local function checksum(m)
  return core.text.hash(json.encode(m))
end

-- The checksum of a manifest's text without its checksum field: equal to
-- checksum(m) when an interpreter reads the numbers back otherwise than the
-- writer had them (LuaJIT and Lua 5.1 read Lua 5.4's 1.0 as 1, which
-- encodes as "1"), so an index saved by one interpreter opens in another.
local function text_checksum(s)
  local t = s:gsub("\n$", "")
  local n
  t, n = t:gsub(',"checksum":"%x+"', "", 1)
  if n == 0 then
    t = t:gsub('"checksum":"%x+",?', "", 1)
  end
  return core.text.hash(t)
end

local function read_manifest(fname, dir)
  local path = join(dir, MANIFEST)
  local f, err = io.open(path, "rb")
  if not f then
    return nil, fname .. ": '" .. path .. "': " .. tostring(err):gsub("^[^:]*: ", ""):lower(),
      "io"
  end
  local s = f:read("*a")
  f:close()
  local m = json.decode(s)
  if type(m) ~= "table" or m.format ~= FORMAT then
    return nil, fname .. ": '" .. path .. "': not a rag.index manifest", "format"
  end
  local sum = m.checksum
  m.checksum = nil
  local good = sum == checksum(m) or sum == text_checksum(s)
  if not good or s:sub(-1) ~= "\n" or type(m.generation) ~= "number"
      or type(m.files) ~= "table" then
    return nil, fname .. ": '" .. path .. "': damaged manifest", "corrupt"
  end
  if type(m.version) ~= "number" or m.version > FORMAT_VERSION then
    return nil, fname .. ": '" .. path .. "': written by a newer version of rag", "version"
  end
  return m
end

-- Why rag.index.new would refuse the settings manifest m records (metric,
-- vector, hnsw, chunker: rag.chunk's or "custom", which rag.index.open's
-- `chunker` option gives again), or nil. They are data: a refusal means a damaged
-- manifest, never the caller's misuse, and is found before anything opens
-- rather than on the add that first uses them.
local function recorded_settings_refused(m)
  local ok, why = pcall(function()
    local o = opts_check("", { metric = m.metric, vector = m.vector_option, hnsw = m.hnsw },
      SCHEMA, 1)
    if m.vector ~= nil and m.vector ~= "exact" and m.vector ~= "hnsw" and m.vector ~= "none" then
      error("vector must be exact, hnsw or none", 0)
    end
    if m.hnsw ~= nil then
      new_hnsw("", o, 8):close()
    end
    local ch = m.chunker
    if ch ~= nil and (type(ch) ~= "table" or type(ch.name) ~= "string"
        or not (core.chunk[ch.name] or ch.name == "custom")
        or (ch.options ~= nil and type(ch.options) ~= "table")) then
      error("unknown chunker", 0)
    end
    if ch ~= nil and core.chunk[ch.name] and ch.options ~= nil then
      -- the chunker checks its options; a stand-in for the tokenizer, which
      -- is loaded by name on the first add (a search needs none)
      local copy = {}
      for k, v in pairs(ch.options) do
        copy[k] = v
      end
      if copy.tokenizer ~= nil then
        if type(copy.tokenizer) ~= "string" then
          error("chunker option tokenizer must be a name", 0)
        end
        copy.tokenizer = require("rag.tokenizer").approx()
      end
      if ch.name == "semantic" then -- its embed function is not recorded
        copy.embed = function(texts)
          local out = {}
          for i = 1, #texts do
            out[i] = { 1 }
          end
          return out
        end
      end
      core.chunk[ch.name]("x", copy)
    end
  end)
  if not ok then
    return (tostring(why):gsub("^[^:]*:%d+: ", ""):gsub("^: ", ""))
  end
end

-- The generation number of the newest manifest in dir (0: none).
local function current_gen(dir)
  local m = read_manifest("", dir)
  return m and m.generation or 0
end

--- The generation of the newest complete index saved in dir: the number
-- `idx:save(dir)` wrote last (it grows by one per save), or 0 when dir
-- holds no readable manifest. Reads only the small manifest, so a server
-- can poll it to notice a new generation (`rag serve` does, every 0.5 s).
-- @tparam string dir
-- @treturn integer
-- @raise when `dir` is not a string
function M.generation(dir)
  if type(dir) ~= "string" then
    error("rag.index.generation: dir must be a string, got " .. type(dir), 2)
  end
  return current_gen(dir)
end

local PARTS = { store = true, bm25 = true, vectors = true, graph = true, manifest = true,
  enrich = true, keywords = true, summary = true, questions = true, treestore = true,
  treebm25 = true, treevectors = true }

-- Removes the files of other generations and stale temporary files.
local function tidy(dir, keep)
  local names = fs.list(dir)
  for _, name in ipairs(names or {}) do
    local part = name:match("^(%w+)%-%d+%.rag$") or name:match("^(%w+)%-%d+%.rag%.tmp%-")
      or name:match("^(manifest)%.json%.tmp%-")
    if PARTS[part] and not keep[name] then
      os.remove(join(dir, name))
    end
  end
end

-- Writes generation gen's parts (their names in `names`, by part) and then
-- its manifest into dir; sets done.manifest once the manifest is in place.
-- Returns the names to keep | nil, msg, code.
local function write_generation(self, dir, gen, names, done)
  local st = self.c:stats()
  local paths = {}
  for part, name in pairs(names) do
    paths[part] = join(dir, name)
  end
  local gpath, epaths = paths.graph, nil
  paths.graph = nil
  if self.enrich then
    epaths = {}
    for _, part in ipairs(self.enrich:part_names()) do
      epaths[part], paths[part] = paths[part], nil
    end
  end
  local sums, msg, code = self.c:save(paths)
  if not sums then
    return nil, msg, code
  end
  if gpath then
    local gs
    gs, msg, code = self.graph:save(gpath)
    if not gs then
      return nil, msg, code
    end
    sums.graph = gs
  end
  if epaths then
    local es
    es, msg, code = self.enrich:save(epaths)
    if not es then
      return nil, msg, code
    end
    for part, sum in pairs(es) do
      sums[part] = sum
    end
  end
  local files, keep = {}, { [MANIFEST] = true }
  for part, name in pairs(names) do
    files[part] = { name = name, size = sums[part].size, crc32 = sums[part].crc32 }
    keep[name] = true
  end
  local m = record(self)
  m.format, m.version, m.generation, m.library = FORMAT, FORMAT_VERSION, gen, core.version
  m.files, m.documents, m.chunks = files, st.documents, st.leaves
  m.checksum = checksum(m)
  local ok
  ok, msg, code = fs.write(join(dir, MANIFEST), json.encode(m) .. "\n")
  if not ok then
    return nil, msg, code
  end
  done.manifest = true
  return keep
end

--- Saves every part to new files, then the manifest, atomically; old
-- generations are removed after. A save that fails (or raises, out of
-- memory) removes the files it wrote: the directory keeps the generation
-- it had. @return true | nil, msg, code
function Index:save(dir)
  check_open(self, "rag.index.save")
  if type(dir) ~= "string" then
    error("rag.index.save: dir must be a string, got " .. type(dir), 2)
  end
  local ok, msg, code = fs.mkdir(dir)
  if not ok then
    return nil, msg, code
  end
  local gen = math.max(self.gen, current_gen(dir)) + 1
  local names = { store = "store-" .. gen .. ".rag", bm25 = "bm25-" .. gen .. ".rag" }
  if self.c:stats().vector ~= "none" then
    names.vectors = "vectors-" .. gen .. ".rag"
  end
  if self.graph then -- rag.graph's entity graph, kept with the index
    names.graph = "graph-" .. gen .. ".rag"
  end
  if self.enrich then -- the enrichment's values, cache and fields
    for _, part in ipairs(self.enrich:part_names()) do
      names[part] = part .. "-" .. gen .. ".rag"
    end
  end
  local done = { manifest = false } -- the slot exists: setting it cannot run out of memory
  local keep
  ok, keep, msg, code = pcall(write_generation, self, dir, gen, names, done)
  if not done.manifest then
    for _, name in pairs(names) do
      os.remove(join(dir, name))
    end
    if not ok then
      error(keep, 0)
    end
    return nil, msg, code
  end
  self.gen = gen
  if ok then
    pcall(tidy, dir, keep) -- the new generation is in place; what is left goes next time
  end
  return true
end

local OPEN = {
  readonly = { "boolean", default = false },
  llm = { "table|userdata" },
  enrich = { "table" },
  embedder = { "table|userdata|boolean" },
  chunker = { "function|string" },
  chunk = { "table" },
  batch = { "number", default = 256, int = true, min = 1 },
}

--- Opens the newest complete generation saved in dir.
-- @tparam string dir
-- @tparam[opt] table opts `readonly`, `embedder` (required when the recorded
--   one is not an offline embedder), `chunker` (a custom chunker again)
-- @return Index | nil, msg, code
function M.open(dir, opts)
  local fname = "rag.index.open"
  if type(dir) ~= "string" then
    error(fname .. ": dir must be a string, got " .. type(dir), 2)
  end
  if dir:find("^postgres") and dir:find("^postgres[ql]*://") then
    return require("rag.store.postgres").open(dir, opts, { describe = describe,
      check_embedder = check_embedder, rebuild = rebuild, same = same, wrap = wrap,
      settings = settings })
  end
  local o = opts_check(fname, opts, OPEN, 2)
  local m, msg, code = read_manifest(fname, dir)
  if not m then
    return nil, msg, code
  end
  local bad = recorded_settings_refused(m)
  if bad then
    return nil, fname .. ": '" .. join(dir, MANIFEST) .. "': bad recorded settings (" .. bad
      .. ")", "corrupt"
  end
  local paths = {}
  for part, f in pairs(m.files) do
    if type(f) ~= "table" or type(f.name) ~= "string" or f.name:find("/", 1, true) then
      return nil, fname .. ": '" .. join(dir, MANIFEST) .. "': bad file entry", "corrupt"
    end
    local path = join(dir, f.name)
    local size, crc = fs.sum(path)
    if not size then
      return nil, fname .. ": " .. crc:gsub("^rag%.fs%.sum: ", ""), select(3, fs.sum(path))
    end
    if size ~= f.size or crc ~= f.crc32 then
      return nil, fname .. ": '" .. path .. "': size or checksum differs from the manifest",
        "corrupt"
    end
    paths[part] = path
  end
  if not paths.store or not paths.bm25 then
    return nil, fname .. ": '" .. join(dir, MANIFEST) .. "': a part is missing", "corrupt"
  end
  -- the embedder: the one recorded, rebuilt, or the caller's, which must match
  local edesc = m.embedder or nil
  local embedder = o.embedder
  if embedder == nil then
    -- the manifest's settings are data: settings the embedder refuses are
    -- a damaged manifest, not the caller's misuse
    local ok, e = pcall(rebuild, type(edesc) == "table" and edesc or nil)
    if not ok then
      return nil, fname .. ": '" .. join(dir, MANIFEST) .. "': bad embedder settings ("
        .. tostring(e):gsub("^.-rag%.embed%.hashing: ", "") .. ")", "corrupt"
    end
    embedder = e or false
  elseif embedder then
    check_embedder(fname, embedder)
    local d = describe(embedder)
    if not edesc or d.name ~= edesc.name or (d.dim and edesc.dim and d.dim ~= edesc.dim)
        or (d.config and edesc.config and not same(d.config, edesc.config)) then
      error(fname .. ": the embedder " .. d.name .. (d.dim and ("/" .. d.dim) or "")
        .. " differs from the one the index was built with: "
        .. (edesc and (edesc.name .. (edesc.dim and ("/" .. edesc.dim) or "")) or "none"), 2)
    end
  end
  if (m.vector == "exact" or m.vector == "hnsw") ~= (paths.vectors ~= nil) then
    return nil, fname .. ": '" .. join(dir, MANIFEST) .. "': the vectors part "
      .. (paths.vectors and "is listed for an index without vectors" or "is missing"), "corrupt"
  end
  local c
  c, msg, code = cindex.open({ store = paths.store, bm25 = paths.bm25, vectors = paths.vectors,
    kind = m.vector == "hnsw" and "hnsw" or "exact", map = o.readonly })
  if not c then
    return nil, msg, code
  end
  local _, _, vdim = c:shape()
  local edim = embedder and describe(embedder).dim
  if vdim and vdim > 0 and edim and edim ~= vdim then
    c:close() -- a caller's embedder matched the record above: the record is damaged
    return nil, fname .. ": '" .. join(dir, MANIFEST) .. "': the recorded embedder gives "
      .. edim .. " dimensions; the vectors part has " .. vdim, "corrupt"
  end
  local s = {
    embedder = embedder, metric = m.metric or "cosine", vector = m.vector_option or m.vector,
    hnsw = m.hnsw, batch = o.batch,
  }
  local ch = m.chunker or {}
  if o.chunker then
    s.chunker = type(o.chunker) == "string" and core.chunk[o.chunker] or o.chunker
    s.chunker_name = type(o.chunker) == "string" and o.chunker or chunker_name(o.chunker)
      or "custom"
  else
    s.chunker, s.chunker_name = core.chunk[ch.name or ""], ch.name
  end
  local copts = {}
  for k, v in pairs(o.chunk or ch.options or {}) do
    copts[k] = v
  end
  s.chunk = copts -- a tokenizer by name, loaded on the first add (a search needs none)
  local idx = wrap(c, s, edesc, o.readonly)
  idx.gen = m.generation
  if paths.graph then
    local g
    g, msg, code = core.graph.load(paths.graph, { map = o.readonly })
    if not g then
      c:close()
      return nil, msg, code
    end
    idx.graph = g
  end
  if m.enrich then
    local e
    e, msg, code = require("rag.enrich")._open(fname, m.enrich, paths, o, {},
      tree_of(s, o.readonly), embedder)
    if not e then
      idx:close()
      return nil, msg, code
    end
    idx.enrich = e
  end
  local tree = idx.enrich and idx.enrich.tree
  if tree and paths.vectors and not paths.treevectors and tree.c:stats().leaves > 0 then
    idx:close()
    return nil, fname .. ": '" .. join(dir, MANIFEST) .. "': the summary level's part "
      .. "'treevectors' is missing", "corrupt"
  end
  -- a listed part that the recorded settings do not use means the manifest
  -- lost them: opening would quietly drop that part's data
  local used = {}
  for _, part in ipairs(idx.enrich and idx.enrich:part_names() or {}) do
    used[part] = true
  end
  for part in pairs(paths) do
    if not PLAIN_PARTS[part] and not used[part] then
      idx:close()
      return nil, fname .. ": '" .. join(dir, MANIFEST) .. "': part '" .. tostring(part)
        .. "' is listed but the recorded settings do not use it", "corrupt"
    end
  end
  return idx
end

--- Closes the index; idempotent.
function Index:close()
  if self.c then
    self.c:close()
    self.c = nil
  end
  if self.graph then
    self.graph:close()
    self.graph = nil
  end
  if self.enrich then
    self.enrich:close()
    self.enrich = nil
  end
end

Index.__close = Index.close

function Index:__tostring()
  if not self.c then
    return "rag.index (closed)"
  end
  return "rag.index (" .. #self.c .. " documents)"
end

return M
