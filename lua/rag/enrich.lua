--- rag.enrich: what rag.index keeps about each chunk besides its text, so
-- that search matches what users ask and not only the author's words:
-- keywords, a summary and the questions the chunk answers (and a title for
-- a document without one). Each step is written by an LLM (prompts as
-- data, English and Chinese), by an offline default (keywords by the
-- corpus's BM25 weights, the lead sentence as summary, the first line as
-- title) or by a function `(chunk, doc) -> value`. What an LLM or a
-- function wrote is cached by content hash, so an unchanged chunk never
-- costs a call again, and saved with the index. Keywords and summaries are
-- searched as BM25 fields (rag.core.bm25), questions as vectors pointing at
-- their chunk; rag.core.index merges them into its lists. See
-- docs/index.md (Enrichment).
-- @module rag.enrich
local core = require("rag.core")
local opts_check = require("rag.opts").check

local M = {}

local json, fs = core.json, core.fs
local type, pairs, ipairs, tostring, error, setmetatable, next, getmetatable = type, pairs,
  ipairs, tostring, error, setmetatable, next, getmetatable
local concat, sort = table.concat, table.sort

-- The format of the saved enrichment (enrich-N.rag, JSON) and of the cache keys.
local FORMAT_VERSION = 1

--- The steps, in the order they run.
M.STEPS = { "keywords", "summary", "questions", "title", "doc_summary" }

-- What each step may be: `true` (the LLM when the index has one, else the
-- offline default), "llm", "offline", a function, or false.
local KINDS = { keywords = { llm = true, offline = true }, summary = { llm = true, offline = true },
  questions = { llm = true }, title = { llm = true, offline = true },
  doc_summary = { llm = true, offline = true } }

local SCHEMA = {
  keywords = { "boolean|string|function", default = false },
  summary = { "boolean|string|function", default = false },
  questions = { "boolean|string|function", default = false },
  title = { "boolean|string|function", default = false },
  doc_summary = { "boolean|string|function", default = false },
  lang = { "string", default = "auto", enum = { "auto", "en", "zh" } },
  prompts = { "table" },
  n_keywords = { "number", default = 8, int = true, min = 1, max = 100 },
  n_questions = { "number", default = 3, int = true, min = 1, max = 20 },
  sections = { "number", default = 1024, int = true, min = 1 },
  levels = { "number", default = 0, int = true, min = 0, max = 8 },
  cluster_size = { "number", default = 8, int = true, min = 2 },
  weights = { "table" },
  tag = { "string", default = "" },
}

local WEIGHTS = {
  keywords = { "number", min = 0 },
  summary = { "number", min = 0 },
}

--- The field weights when `enrich.weights` does not say: a field's BM25
-- score counts this much of the text's (docs/index.md gives the measurement).
M.WEIGHTS = { keywords = 0.1, summary = 0.05 }

-- The longest text a step sends to an LLM, in bytes (a document's title
-- step reads its beginning).
local MAX_INPUT = 6000
-- The longest summary, title and keyword kept, in bytes; a document's
-- offline summary takes chunks' lead sentences up to MAX_DOC_LEAD bytes.
local MAX_SUMMARY, MAX_TITLE, MAX_KEYWORD, MAX_DOC, MAX_DOC_LEAD = 1000, 200, 80, 2000, 600

--- Checks `enrich` (true for keywords and summary; a list of step names; or
-- a table of steps and options) and resolves each step against `llm`.
-- @return settings | nil when nothing is enriched
-- @raise on a bad option, or an LLM step without an LLM
function M._settings(fname, enrich, llm, level)
  level = (level or 1) + 1
  if enrich == nil or enrich == false then
    return nil
  end
  if enrich == true then
    enrich = { keywords = true, summary = true }
  elseif type(enrich) == "table" and enrich[1] ~= nil then
    local t = {}
    for _, name in ipairs(enrich) do
      if not KINDS[name] then
        error(fname .. ": unknown enrichment step '" .. tostring(name) .. "'", level)
      end
      t[name] = true
    end
    enrich = t
  elseif type(enrich) ~= "table" then
    error(fname .. ": option 'enrich' must be true, a list of steps or a table, got "
      .. type(enrich), level)
  end
  local o = opts_check(fname .. ": enrich", enrich, SCHEMA, level)
  local w = opts_check(fname .. ": enrich.weights", o.weights, WEIGHTS, level)
  o.weights = { keywords = w.keywords or M.WEIGHTS.keywords,
    summary = w.summary or M.WEIGHTS.summary }
  o.kinds = {}
  local any = false
  for _, step in ipairs(M.STEPS) do
    local v = o[step]
    local kind
    if v == true then
      kind = llm and "llm" or (KINDS[step].offline and "offline")
      if not kind then
        error(fname .. ": enrichment step '" .. step .. "' needs option 'llm' or a function", level)
      end
    elseif type(v) == "function" then
      kind = "function"
    elseif type(v) == "string" then
      if not KINDS[step][v] then
        error(fname .. ": enrichment step '" .. step .. "' cannot be '" .. v .. "'", level)
      end
      kind = v
    end
    if kind == "llm" and not llm then
      error(fname .. ": enrichment step '" .. step .. "' is written by an LLM: pass option 'llm'",
        level)
    end
    o.kinds[step] = kind or nil
    any = any or kind ~= nil
  end
  if not any then
    return nil
  end
  return o
end

--- The settings as a manifest records them (no functions).
function M._record(o)
  return { version = FORMAT_VERSION, kinds = json.object(o.kinds), lang = o.lang,
    n_keywords = o.n_keywords, n_questions = o.n_questions, sections = o.sections,
    levels = o.levels, cluster_size = o.cluster_size,
    weights = json.object(o.weights), tag = o.tag, prompts = o.prompts }
end

-- Settings back from a manifest's record; function steps come from `given`
-- (rag.index.open's `enrich`), LLM steps need `llm` only to add documents.
local function from_record(fname, r, given)
  if type(r) ~= "table" or type(r.kinds) ~= "table" or type(r.version) ~= "number" then
    return nil, fname .. ": the manifest's enrichment settings are damaged", "corrupt"
  end
  if r.version > FORMAT_VERSION then
    return nil, fname .. ": the enrichment was written by a newer version of rag", "version"
  end
  -- the recorded options must be ones _settings takes: else they raise from
  -- a later search or add, far from the damaged manifest
  local ok, why = pcall(function()
    local t = {}
    for _, k in ipairs({ "lang", "prompts", "n_keywords", "n_questions", "sections", "levels",
      "cluster_size", "weights", "tag" }) do
      t[k] = r[k]
    end
    opts_check("", t, SCHEMA, 1)
    opts_check("", r.weights, WEIGHTS, 1)
    for step, kind in pairs(r.kinds) do
      if not KINDS[step] or not (kind == "function" or KINDS[step][kind]) then
        error("unknown step or kind " .. tostring(step) .. " = " .. tostring(kind), 0)
      end
    end
  end)
  if not ok then
    return nil, fname .. ": the manifest's enrichment settings are damaged ("
      .. tostring(why):gsub("^[^:]*:%d+: ", ""):gsub("^: ", "") .. ")", "corrupt"
  end
  local o = { kinds = {}, lang = r.lang or "auto", n_keywords = r.n_keywords or 8,
    n_questions = r.n_questions or 3, tag = r.tag or "", sections = r.sections or 1024,
    levels = r.levels or 0, cluster_size = r.cluster_size or 8,
    prompts = type(r.prompts) == "table" and r.prompts or nil,
    weights = { keywords = (r.weights or {}).keywords or M.WEIGHTS.keywords,
      summary = (r.weights or {}).summary or M.WEIGHTS.summary } }
  for _, step in ipairs(M.STEPS) do
    local kind = r.kinds[step]
    if kind ~= nil then
      o.kinds[step] = kind
      if kind == "function" then
        o[step] = type(given) == "table" and type(given[step]) == "function" and given[step] or nil
      end
    end
  end
  return o
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do
    ks[#ks + 1] = k
  end
  sort(ks)
  return ks
end

-- {====== Cleaning what a step wrote ======}

-- s with invalid UTF-8 replaced and surrounding space trimmed.
local function clean_text(s, limit)
  if type(s) ~= "string" then
    return nil
  end
  if not core.text.valid(s) then
    s = core.text.normalize(s, { form = false, invalid = "replace" })
  end
  s = s:gsub("^%s+", ""):gsub("%s+$", "")
  if #s > limit then -- cut at a character boundary
    local i = limit
    while i > 1 and s:byte(i + 1) and s:byte(i + 1) >= 0x80 and s:byte(i + 1) < 0xC0 do
      i = i - 1
    end
    s = s:sub(1, i)
  end
  return s
end

-- Quotes and bullets an item may start or end with, as whole UTF-8
-- sequences (a Lua character class would cut a multi-byte one in two).
local OPENERS = { '"', "'", "“", "‘", "「", "《" }
local CLOSERS = { '"', "'", "”", "’", "」", "》" }
local BULLETS = { "-", "*", "•", "·" }

-- s without one of `marks` at its start (or with `tail`, its end).
local function strip(s, marks, tail)
  for _, m in ipairs(marks) do
    if tail and #s >= #m and s:sub(-#m) == m then
      return s:sub(1, -#m - 1)
    elseif not tail and s:sub(1, #m) == m then
      return s:sub(#m + 1)
    end
  end
  return s
end

-- An item of a list as kept: numbering, a bullet and quotes dropped.
local function clean_item(s, limit)
  s = clean_text(s, limit)
  if not s then
    return nil
  end
  s = s:gsub("^%d+[%.%)]%s*", "")
  s = strip(s, BULLETS):gsub("^%s+", "")
  s = strip(strip(s, OPENERS), CLOSERS, true)
  return clean_text(s, limit)
end

-- A list of at most n distinct non-empty strings, from a list or from a
-- reply's lines (or comma-separated items, for keywords: ASCII and CJK
-- commas and semicolons).
local function clean_list(v, n, limit, split_commas)
  local items = {}
  if type(v) == "string" then
    local j = require("rag.prompts").json(v)
    if type(j) == "table" then
      v = j
    else
      if split_commas then
        v = v:gsub("，", ","):gsub("；", ","):gsub("、", ","):gsub(";", ",")
      end
      for item in v:gmatch(split_commas and "[^\n,]+" or "[^\n]+") do
        items[#items + 1] = item
      end
      v = items
    end
  end
  if type(v) ~= "table" then
    return {}
  end
  local out, seen = {}, {}
  for _, item in ipairs(v) do
    if #out >= n then
      break
    end
    local s = type(item) == "string" and clean_item(item, limit)
    if s then
      local key = s:lower()
      if s ~= "" and not seen[key] then
        seen[key] = true
        out[#out + 1] = s
      end
    end
  end
  return out
end

-- The value of step `step` as kept: keywords and questions lists, summary
-- and title strings; nil for nothing usable.
local function clean(o, step, v)
  if step == "keywords" then
    return clean_list(v, o.n_keywords, MAX_KEYWORD, true)
  elseif step == "questions" then
    return clean_list(v, o.n_questions, MAX_SUMMARY, false)
  end
  local s = clean_text(v, step == "title" and MAX_TITLE or step == "doc_summary" and MAX_DOC
    or MAX_SUMMARY)
  if s and step == "title" then
    s = clean_item(s:match("^[^\n]*"):gsub("^#+%s*", ""), MAX_TITLE)
  elseif s then -- a summary in quotes
    s = clean_text(strip(strip(s, OPENERS), CLOSERS, true), MAX_DOC)
  end
  return s ~= "" and s or nil
end

-- {====== Offline defaults ======}

-- The first sentence of text (its first line when no sentence ends).
local function lead(text, limit)
  local s = core.text.sentences(clean_text(text, 2 * limit) or "")
  local first = clean_text(s[1] and s[1].text or text:match("^[^\n]*"), limit)
  return first ~= "" and first or nil
end

-- {====== The enrichment of an index ======}

local Enrich = {}
Enrich.__index = Enrich

-- The summary level's embedder: the index's, except that a batch's node
-- vectors, made before anything is put (an embedder may fail), are given
-- back from `pending` when the level's index asks for them.
local function proxy(real)
  if not real then
    return false
  end
  local mt = getmetatable(real)
  local p = { pending = {}, lexical = real.lexical, real = real,
    name = type(real.name) == "string" and real.name or (mt and mt.__name) or "custom" }
  function p.embed(self, texts, opts)
    local out = {}
    for i, t in ipairs(texts) do
      out[i] = self.pending[t]
      if not out[i] then
        return real:embed(texts, opts)
      end
    end
    return out
  end
  return p
end

--- The enrichment part of a new index.
-- @param o settings (M._settings)
-- @tparam table bm25_opts the index's BM25 options (the fields use its analyzer)
-- @param llm the LLM of the LLM steps, or nil
-- @param tree a function(embedder) making the summary level's rag.index
-- @param embedder the index's embedder (or false)
function M._new(o, bm25_opts, llm, tree, embedder)
  local e = setmetatable({ o = o, llm = llm, cache = {}, fresh = {}, chunks = {}, docs = {},
    bm25_opts = bm25_opts }, Enrich)
  if o.kinds.doc_summary then
    e.embed = proxy(embedder)
    e.tree = tree(e.embed)
  end
  if o.kinds.keywords then
    e.kw = core.bm25.new(bm25_opts)
  end
  if o.kinds.summary then
    e.sum = core.bm25.new(bm25_opts)
  end
  return e
end

-- The cache key of step `step` over `text`: its settings and the text.
local function key(self, step, kind, lang, text)
  local o = self.o
  local parts = { "rag.enrich", FORMAT_VERSION, step, kind, o.tag, lang,
    step == "keywords" and o.n_keywords or step == "questions" and o.n_questions or 0 }
  if kind == "llm" then
    local p = require("rag.prompts").get(lang, o.prompts)["enrich_" .. step]
    parts[#parts + 1] = p.system or ""
    parts[#parts + 1] = p.user
  end
  parts[#parts + 1] = text
  for i, v in ipairs(parts) do
    parts[i] = #tostring(v) .. ":" .. tostring(v)
  end
  return core.text.hash(concat(parts))
end

-- The text a step reads, cut to MAX_INPUT bytes at a character boundary.
local function input(text)
  return clean_text(text, MAX_INPUT) or ""
end

-- Runs an LLM or function step for one chunk or document through the
-- cache. Returns the cleaned value (maybe nil), nil, nil, its cache key |
-- nil, msg, code.
local function run_step(self, step, text, chunk, doc, run, tick)
  local o = self.o
  local kind = o.kinds[step]
  local lang = o.lang == "auto" and require("rag.prompts").detect(text) or o.lang
  local k = key(self, step, kind, lang, text)
  local hit = self.cache[k]
  if hit ~= nil then
    self.fresh[k] = true -- paid for: kept at the next save even if nothing uses it yet
    return hit.v, nil, nil, k
  end
  local v, msg, code
  if kind == "function" then
    local fn = o[step]
    if not fn then
      error("rag.index.add: enrichment step '" .. step .. "' is a function: pass it again as "
        .. "rag.index.open(dir, { enrich = { " .. step .. " = fn } })", 0)
    end
    v, msg, code = fn(chunk, doc)
    if v == nil and msg ~= nil then
      return nil, msg, code or "provider"
    end
  else
    if not self.llm then
      error("rag.index.add: enrichment step '" .. step .. "' is written by an LLM: pass it as "
        .. "rag.index.open(dir, { llm = chat })", 0)
    end
    local prompts = require("rag.prompts")
    local set = prompts.get(lang, o.prompts)
    local messages = prompts.messages(set, "enrich_" .. step, { text = text,
      n = step == "keywords" and o.n_keywords or o.n_questions })
    local reply
    reply, msg, code = run:chat(self.llm, messages)
    if tick then
      tick()
    end
    if not reply then
      return nil, msg, code
    end
    v = reply.text
  end
  v = clean(o, step, v)
  self.cache[k] = { v = v }
  self.fresh[k] = true
  return v, nil, nil, k
end

-- A document's offline summary: its chunks' lead sentences, in order,
-- up to MAX_DOC_LEAD bytes (at least the first).
local function offline_doc_summary(leaves)
  local parts, size = {}, 0
  for _, leaf in ipairs(leaves) do
    local l = leaf.summary or lead(leaf.body, MAX_SUMMARY)
    if l and l ~= "" then
      if #parts > 0 and size + #l > MAX_DOC_LEAD then
        break
      end
      parts[#parts + 1] = l
      size = size + #l + 1
    end
  end
  return #parts > 0 and concat(parts, " ") or nil
end

-- What a document's summary is written from: its chunks' summaries in
-- order when the summary step made them, else the beginning of its text.
local function doc_input(text, leaves)
  local parts = {}
  for _, leaf in ipairs(leaves) do
    parts[#parts + 1] = leaf.summary
  end
  if #parts > 0 then
    return input(concat(parts, "\n"))
  end
  return input(text)
end

-- The long sections of staged document d (a hierarchical chunker's): the
-- chunks with children of at least `min` tokens whose span is neither the
-- whole text nor their parent's; each `{ n, start, stop, leaves }`, with
-- the leaf records under it in order.
local function long_sections(d, len, min, leaf_at)
  local out, at = {}, {}
  for n, c in ipairs(d.chunks) do
    local p = c.parent > 0 and d.chunks[c.parent]
    if not c.leaf and c.tokens >= min and not (c.start <= 1 and c.stop >= len)
        and not (p and p.start == c.start and p.stop == c.stop) then
      out[#out + 1] = { n = n, start = c.start, stop = c.stop, leaves = {} }
      at[n] = out[#out]
    end
  end
  if #out > 0 then
    for n, c in ipairs(d.chunks) do
      local a = c.leaf and c.parent or 0
      while a > 0 do
        if at[a] then
          local l = at[a].leaves
          l[#l + 1] = leaf_at[n]
        end
        a = d.chunks[a].parent
      end
    end
  end
  return out
end

--- Runs the LLM and function steps of a chunked batch, before it is put:
-- `docs` are rag.core.index's staged documents, `texts` their leaf texts
-- in order (title and text, as BM25 sees them), `originals` the documents
-- by id. Every result is cached as soon as it is known, so a run stopped
-- by a limit loses nothing it paid for. `progress(n)` follows each LLM
-- call, n the documents of the batch done so far.
-- @return the batch's values `{ [doc id] = { title =, leaves = { { name =,
--   text =, keywords =, summary =, questions = } } } }` | nil, msg, code
function Enrich:prepare(docs, texts, originals, run, progress)
  local kinds = self.o.kinds
  local out, t = {}, 0
  local done = 0 -- documents of the batch prepared
  local tick = progress and function()
    progress(done)
  end
  for _, d in ipairs(docs) do
    local orig = originals[d.id]
    local doc = { id = d.id, text = orig.text, title = orig.title, source = orig.source,
      meta = orig.meta }
    local rec = { leaves = {}, doc = doc }
    local leaf_at = {} -- chunk number -> its leaf record
    out[d.id] = rec
    if kinds.title and kinds.title ~= "offline" and (doc.title == nil or doc.title == "") then
      local v, msg, code, k = run_step(self, "title", input(doc.text), nil, doc, run, tick)
      if v == nil and msg ~= nil then
        return nil, msg, code
      end
      rec.title, rec.title_key = v, k
    end
    for n, c in ipairs(d.chunks) do
      if c.leaf then
        t = t + 1
        local body = doc.text:sub(c.start, c.stop)
        local leaf = { name = d.id .. "#" .. n, text = texts[t], body = body, keys = {} }
        local chunk = { id = leaf.name, doc_id = d.id, text = body, start = c.start,
          stop = c.stop, title = doc.title, source = doc.source, meta = doc.meta }
        for _, step in ipairs({ "keywords", "summary", "questions" }) do
          local kind = kinds[step]
          if kind == "offline" and step == "summary" then
            leaf.summary = lead(body, MAX_SUMMARY)
          elseif kind == "llm" or kind == "function" then
            local v, msg, code, k = run_step(self, step, input(leaf.text), chunk, doc, run, tick)
            if v == nil and msg ~= nil then
              return nil, msg, code
            end
            leaf[step], leaf.keys[step] = v, k
          end
        end
        rec.leaves[#rec.leaves + 1] = leaf
        leaf_at[n] = leaf
      end
    end
    if kinds.title == "offline" and (doc.title == nil or doc.title == "") then
      rec.title = lead(doc.text:match("^%s*([^\n]*)") or "", MAX_TITLE)
    end
    if kinds.doc_summary == "offline" then
      rec.doc_summary = offline_doc_summary(rec.leaves)
    elseif kinds.doc_summary then
      local v, msg, code, k = run_step(self, "doc_summary", doc_input(doc.text, rec.leaves), nil,
        doc, run, tick)
      if v == nil and msg ~= nil then
        return nil, msg, code
      end
      rec.doc_summary, rec.doc_summary_key = v, k
    end
    if kinds.doc_summary then -- and its long sections'
      rec.sections = long_sections(d, #doc.text, self.o.sections, leaf_at)
      for _, sec in ipairs(rec.sections) do
        if kinds.doc_summary == "offline" then
          sec.summary = offline_doc_summary(sec.leaves)
        else
          local text = doc.text:sub(sec.start, sec.stop)
          local chunk = { id = d.id .. "#" .. sec.n, doc_id = d.id, text = text,
            start = sec.start, stop = sec.stop, title = doc.title, source = doc.source,
            meta = doc.meta }
          local v, msg, code, k = run_step(self, "doc_summary", doc_input(text, sec.leaves),
            chunk, doc, run, tick)
          if v == nil and msg ~= nil then
            return nil, msg, code
          end
          sec.summary, sec.key = v, k
        end
        sec.leaves = nil
      end
    end
    done = done + 1
  end
  return out
end

-- The separator of a section node's name on the summary level:
-- "<doc id>\31<chunk n>" (a document node is named by its id).
local SEP = "\31"

-- A document's nodes on the summary level: its own (when it has a
-- summary), then its long sections'.
local function nodes_of(doc, rec)
  local title = doc.title
  if title == nil or title == "" then
    title = rec.title
  end
  local out = {}
  if rec.doc_summary and rec.doc_summary ~= "" then
    out[1] = { id = doc.id, text = rec.doc_summary, title = title, source = doc.source,
      meta = doc.meta }
  end
  for _, sec in ipairs(rec.sections or {}) do
    if sec.summary and sec.summary ~= "" then
      out[#out + 1] = { id = doc.id .. SEP .. sec.n, text = sec.summary, title = title,
        source = doc.source, meta = doc.meta }
    end
  end
  return out
end

-- Embeds the texts of new summary-level nodes with `embedder` into the
-- pending vectors the level's index will ask for. true | nil, msg, code.
local function pend(self, embedder, texts)
  if #texts == 0 then
    return true
  end
  local vs, msg, code = embedder:embed(texts, { packed = true })
  if not vs then
    return nil, msg, code
  end
  for i, t in ipairs(texts) do
    self.embed.pending[t] = vs[i]
  end
  return true
end

--- Embeds a prepared batch's summary nodes that an LLM or a function
-- wrote (before anything is put), for the summary level.
-- @return true | nil, msg, code
function Enrich:embed_nodes(prepared, embedder)
  if not (self.tree and embedder) then
    return true
  end
  self.embed.pending = {} -- none left from a batch that failed after this step
  local texts = {}
  for _, rec in pairs(prepared) do
    for _, node in ipairs(nodes_of(rec.doc, rec)) do
      texts[#texts + 1] = node.title and node.title ~= "" and node.title .. "\n" .. node.text
        or node.text
    end
  end
  sort(texts)
  return pend(self, embedder, texts)
end

--- The questions of a prepared batch (`docs`: the staged documents, in
-- order), for the embedder; and where each goes (`{ name, k }`).
function Enrich.questions(_, prepared, docs)
  local texts, where = {}, {}
  for _, d in ipairs(docs) do
    local rec = prepared[d.id]
    for _, leaf in ipairs(rec and rec.leaves or {}) do
      for k, q in ipairs(leaf.questions or {}) do
        texts[#texts + 1] = q
        where[#where + 1] = { leaf.name, k }
      end
    end
  end
  return texts, where
end

-- Takes document id's chunks out of the fields.
local function drop(self, id)
  local d = self.docs[id]
  if not d then
    return
  end
  for _, name in ipairs(d.names) do
    local ch = self.chunks[name]
    if self.kw then
      self.kw:remove(name)
    end
    if self.sum then
      self.sum:remove(name)
    end
    if self.q and ch and ch.questions then
      for k = 1, #ch.questions do
        self.q:remove(name .. "?" .. k)
      end
    end
    self.chunks[name] = nil
  end
  self.docs[id] = nil
  self.dirty = true
  if self.tree then
    self.tree:remove(id)
    for _, sec in ipairs(d.sections or {}) do
      self.tree:remove(id .. SEP .. sec.n)
    end
  end
end

--- Removes a document's enrichment (its chunks left the index).
function Enrich:remove(id)
  drop(self, id)
end

-- The vector part for questions, made on the first vectors (the index's kind).
local function question_part(self, index, dim)
  if not self.q then
    local st = index.c:stats()
    if st.vector == "hnsw" then
      local h = { dim = dim, metric = index.o.metric }
      for k, v in pairs(index.o.hnsw or {}) do
        h[k] = v
      end
      self.q = core.hnsw.new(h)
    else
      self.q = core.vec.new({ dim = dim, metric = index.o.metric })
    end
  end
  return self.q
end

--- Puts the enrichment of documents that were just put in the index:
-- the prepared values, the offline steps (which read the index's BM25, now
-- holding the chunks), the fields and the question vectors.
-- @param index the rag.index
-- @tparam table ids the staged documents' ids that the index now holds
-- @param prepared what `prepare` returned
-- @param qvecs the questions' vectors (packed), in `questions` order, or nil
function Enrich:commit(index, ids, prepared, qvecs, where)
  local kinds, o = self.o.kinds, self.o
  local qv = {}
  for i, w in ipairs(where or {}) do
    qv[w[1] .. "?" .. w[2]] = qvecs and qvecs[i]
  end
  for _, id in ipairs(ids) do
    drop(self, id)
    local rec = prepared[id]
    local names = {}
    for _, leaf in ipairs(rec.leaves) do
      local name = leaf.name
      names[#names + 1] = name
      if kinds.keywords == "offline" then
        leaf.keywords = index.c:keywords(name, o.n_keywords)
      end
      local ch = { keywords = leaf.keywords, summary = leaf.summary, keys = leaf.keys }
      -- values are valid UTF-8 (clean_text), so adding cannot fail but for memory
      if self.kw and leaf.keywords and #leaf.keywords > 0 then
        assert(self.kw:add(name, concat(leaf.keywords, ", ")))
      end
      if self.sum and leaf.summary then
        assert(self.sum:add(name, leaf.summary))
      end
      if leaf.questions and #leaf.questions > 0 then
        ch.questions = leaf.questions
        for k in ipairs(leaf.questions) do
          local v = qv[name .. "?" .. k]
          if v then
            question_part(self, index, math.floor(#v / 4)):add(name .. "?" .. k, v)
          end
        end
      end
      self.chunks[name] = ch
    end
    local sections
    for _, sec in ipairs(rec.sections or {}) do
      if sec.summary and sec.summary ~= "" then -- a node on the summary level
        sections = sections or {}
        sections[#sections + 1] = { n = sec.n, start = sec.start, stop = sec.stop, key = sec.key }
      end
    end
    self.docs[id] = { names = names, title = rec.title, title_key = rec.title_key,
      doc_summary_key = rec.doc_summary_key, sections = sections }
    self.dirty = true -- the clusters of documents are made again
    for _, node in ipairs(self.tree and nodes_of(rec.doc, rec) or {}) do
      assert(self.tree:add(node)) -- its vector is pending, its text valid
    end
  end
  if self.embed then
    self.embed.pending = {}
  end
end

--- The parts rag.core.index's search merges, for search options `opts`
-- (`fields = { keywords =, summary = }` overrides the weights).
function Enrich:parts(opts)
  local w = self.o.weights
  local f = opts and opts.fields
  if f ~= nil then
    if type(f) ~= "table" then
      error("rag.index.search: option 'fields' must be a table, got " .. type(f), 3)
    end
    f = opts_check("rag.index.search: fields", f, WEIGHTS, 3)
    w = { keywords = f.keywords or w.keywords, summary = f.summary or w.summary }
  end
  return { keywords = self.kw, summary = self.sum, weights = w, questions = self.q,
    qmax = self.o.n_questions }
end

-- {====== Higher levels: clusters of documents ======}

-- The dimension of the offline vectors clustering compares when the index
-- has no embedder (hashing vectors of the summaries), and the rounds of
-- k-means.
local CLUSTER_DIM, ROUNDS = 256, 10

-- v scaled to length 1, or nil for a zero vector.
local function unit(v)
  local n = 0
  for i = 1, #v do
    n = n + v[i] * v[i]
  end
  if n == 0 then
    return nil
  end
  n = math.sqrt(n)
  local out = {}
  for i = 1, #v do
    out[i] = v[i] / n
  end
  return out
end

-- Groups items (each with a unit vector `vec`, in id order) into at most k
-- clusters: spherical k-means from items spread evenly in that order,
-- ROUNDS rounds at most, each item to its most similar centre (ties to the
-- lower one, by rag.vec); deterministic. Returns lists of item numbers,
-- ordered by their first item.
local function kmeans(items, k)
  local n, dim = #items, #items[1].vec
  local centres, assign = {}, {}
  for c = 1, k do
    centres[c] = items[math.floor((c - 1) * n / k) + 1].vec
  end
  for _ = 1, ROUNDS do
    local cv = core.vec.new({ dim = dim, metric = "dot" })
    for c = 1, k do
      cv:add(string.format("%06d", c), centres[c])
    end
    local changed = false
    for i, it in ipairs(items) do
      local c = tonumber(cv:search(it.vec, 1)[1].id)
      changed = changed or assign[i] ~= c
      assign[i] = c
    end
    cv:close()
    if not changed then
      break
    end
    local sums = {}
    for i, it in ipairs(items) do
      local sum = sums[assign[i]]
      if not sum then
        sum = {}
        for d = 1, dim do
          sum[d] = 0
        end
        sums[assign[i]] = sum
      end
      for d = 1, dim do
        sum[d] = sum[d] + it.vec[d]
      end
    end
    for c = 1, k do
      centres[c] = sums[c] and unit(sums[c]) or centres[c]
    end
  end
  local groups, at = {}, {}
  for i = 1, n do
    local c = assign[i]
    if not at[c] then
      groups[#groups + 1] = {}
      at[c] = groups[#groups]
    end
    local g = at[c]
    g[#g + 1] = i
  end
  return groups
end

-- The unit vectors of the items' texts: the summary level's embedder's,
-- else offline hashing vectors. Returns true | nil, msg, code.
local function item_vectors(self, items)
  local texts = {}
  for i, it in ipairs(items) do
    texts[i] = it.text
  end
  local embedder = self.embed and self.embed.real or require("rag.embed").hashing({
    dim = CLUSTER_DIM })
  local vs, msg, code = embedder:embed(texts)
  if not vs then
    return nil, msg, code
  end
  for i, it in ipairs(items) do
    local v = vs[i]
    if type(v) == "string" then
      v = core.vec.unpack(v)
    end
    it.vec = unit(v)
    if not it.vec then -- nothing to compare: a vector of its own
      it.vec = {}
      for d = 1, #v do
        it.vec[d] = d == (i % #v) + 1 and 1 or 0
      end
    end
  end
  return true
end

--- Makes the higher levels of the summary level again when documents
-- changed (`enrich.levels` > 0): the document nodes are clustered in
-- groups of about `cluster_size` (k-means over their vectors), each group
-- summarised by the doc_summary step from its members' summaries (a
-- function gets `({ id, text, members }, nil)`), and so on up to `levels`
-- levels or until one group is left. Cluster summaries go through the
-- cache and the run like the other steps.
-- @return true | nil, msg, code (the old clusters stay)
function Enrich:cluster(run, tick)
  local o = self.o
  if not self.tree or (o.levels or 0) == 0 or not self.dirty then
    return true
  end
  local items = {}
  for _, id in ipairs(sorted_keys(self.docs)) do
    local node = self.tree:get(id)
    if node then
      items[#items + 1] = { id = id, text = node.text, members = { id } }
    end
  end
  local made = {}
  for level = 1, o.levels do
    if #items <= o.cluster_size then
      break
    end
    local ok, msg, code = item_vectors(self, items)
    if not ok then
      return nil, msg, code
    end
    local next_items = {}
    for g, group in ipairs(kmeans(items, math.ceil(#items / o.cluster_size))) do
      local members, texts = {}, {}
      for _, i in ipairs(group) do
        for _, m in ipairs(items[i].members) do
          members[#members + 1] = m
        end
        texts[#texts + 1] = items[i].text
      end
      local id = SEP .. "c" .. level .. ":" .. g
      local summary, ckey
      if o.kinds.doc_summary == "offline" then
        local leads = {}
        for i, t in ipairs(texts) do
          leads[i] = { body = t }
        end
        summary = offline_doc_summary(leads)
      else
        local joined = input(concat(texts, "\n"))
        summary, msg, code, ckey = run_step(self, "doc_summary", joined,
          { id = "cluster:" .. level .. ":" .. g, text = joined, members = members }, nil, run,
          tick)
        if summary == nil and msg ~= nil then
          return nil, msg, code
        end
      end
      made[#made + 1] = { id = id, level = level, members = members, summary = summary,
        key = ckey }
      next_items[#next_items + 1] = { id = id, text = summary or "", members = members }
    end
    items = next_items
  end
  if self.embed and self.embed.real then -- the new nodes' vectors first: an embedder may fail
    local texts = {}
    for _, c in ipairs(made) do
      texts[#texts + 1] = c.summary
    end
    local ok, msg, code = pend(self, self.embed.real, texts)
    if not ok then
      return nil, msg, code
    end
  end
  for _, c in ipairs(self.clusters or {}) do
    self.tree:remove(c.id)
  end
  for _, c in ipairs(made) do
    if c.summary then
      assert(self.tree:add({ id = c.id, text = c.summary }))
    end
  end
  if self.embed then
    self.embed.pending = {}
  end
  self.clusters, self.dirty = made, false
  return true
end

-- A copy of a list (nil for nil): a hit's lists are the caller's to change.
local function copy_list(t)
  if not t then
    return nil
  end
  local out = {}
  for i, v in ipairs(t) do
    out[i] = v
  end
  return out
end

--- Searches the summary level: one node per document, its summary under
-- its title (`opts` as rag.index.search's, without `level` and `fields`).
-- @return hits `{ id = "<doc id>#summary", doc_id, level = "summary", score,
--   text, title, source, meta, ranks }` | nil, msg, code
function Enrich:search_summaries(query, opts)
  local o = {}
  for k, v in pairs(opts) do
    if k ~= "level" and k ~= "fields" then
      o[k] = v
    end
  end
  local f = o.filter
  if type(f) == "table" and f.doc_id ~= nil then -- a document's sections are its too
    local ids = type(f.doc_id) == "table" and f.doc_id or { f.doc_id }
    local nodes = {}
    for _, id in ipairs(ids) do
      id = tostring(id)
      nodes[#nodes + 1] = id
      for _, sec in ipairs(self.docs[id] and self.docs[id].sections or {}) do
        nodes[#nodes + 1] = id .. SEP .. sec.n
      end
    end
    local g = {}
    for k, v in pairs(f) do
      g[k] = v
    end
    g.doc_id = nodes
    o.filter = g
  end
  local hits, msg, code = self.tree:search(query, o)
  if not hits then
    return nil, msg, code
  end
  local clusters = {}
  for _, c in ipairs(self.clusters or {}) do
    clusters[c.id] = c
  end
  for _, h in ipairs(hits) do
    local doc, n = h.doc_id:match("^(.*)" .. SEP .. "(%d+)$")
    local c = clusters[h.doc_id]
    local sec
    for _, x in ipairs(doc and self.docs[doc] and self.docs[doc].sections or {}) do
      if x.n == tonumber(n) then
        sec = x
      end
    end
    if c then
      h.id = "cluster:" .. c.level .. ":" .. c.id:match(":(%d+)$") .. "#summary"
      h.doc_id, h.node, h.start, h.stop = nil, "cluster", nil, nil
      h.members = copy_list(c.members)
    elseif sec then
      h.doc_id, h.id, h.node, h.start, h.stop = doc, doc .. "#" .. n .. "#summary", "section",
        sec.start, sec.stop
    else
      h.id, h.node, h.start, h.stop = h.doc_id .. "#summary", "document", nil, nil
    end
    h.level = "summary"
  end
  return hits
end

--- Adds `enrich = { keywords =, summary =, questions =, title = }` to each
-- hit that has any.
function Enrich:decorate(hits)
  for _, h in ipairs(hits) do
    local ch = self.chunks[h.id]
    local d = self.docs[h.doc_id]
    local title = d and d.title
    if ch or title then
      h.enrich = { keywords = ch and copy_list(ch.keywords), summary = ch and ch.summary,
        questions = ch and copy_list(ch.questions), title = title }
    end
  end
  return hits
end

--- What the enrichment covers: `{ steps = { step = kind }, chunks =,
-- keywords =, summary =, questions =, titles =, cached = }`.
function Enrich:coverage()
  local c = { steps = {}, chunks = 0, keywords = 0, summary = 0, questions = 0, titles = 0,
    cached = 0 }
  for step, kind in pairs(self.o.kinds) do
    c.steps[step] = kind
  end
  for _, ch in pairs(self.chunks) do
    c.chunks = c.chunks + 1
    c.keywords = c.keywords + ((ch.keywords and #ch.keywords > 0) and 1 or 0)
    c.summary = c.summary + (ch.summary and 1 or 0)
    c.questions = c.questions + (ch.questions and #ch.questions or 0)
  end
  for _, d in pairs(self.docs) do
    c.titles = c.titles + (d.title and 1 or 0)
  end
  c.doc_summaries, c.sections = 0, 0
  for _, d in pairs(self.docs) do
    c.sections = c.sections + (d.sections and #d.sections or 0)
  end
  c.clusters = self.clusters and #self.clusters or 0
  c.doc_summaries = self.tree and math.max(0, self.tree:count() - c.sections - c.clusters) or 0
  for _ in pairs(self.cache) do
    c.cached = c.cached + 1
  end
  return c
end

-- {====== Saving and opening ======}

-- The saved cache: the entries the live chunks' and documents' values
-- came from, and those made since the index was opened that nothing uses
-- yet (a run stopped by a limit before their documents were put: the next
-- run finds them). Unused entries saved by an earlier session are dropped.
local function kept_cache(self)
  local keep = {}
  for k in pairs(self.fresh) do
    keep[k] = true
  end
  for _, ch in pairs(self.chunks) do
    for _, k in pairs(ch.keys or {}) do
      keep[k] = true
    end
  end
  for _, d in pairs(self.docs) do
    if d.title_key then
      keep[d.title_key] = true
    end
    if d.doc_summary_key then
      keep[d.doc_summary_key] = true
    end
    for _, sec in ipairs(d.sections or {}) do
      if sec.key then
        keep[sec.key] = true
      end
    end
  end
  for _, c in ipairs(self.clusters or {}) do
    if c.key then
      keep[c.key] = true
    end
  end
  local out = {}
  for k in pairs(keep) do
    local entry = self.cache[k]
    if entry then
      out[k] = entry.v == nil and json.null or entry.v
    end
  end
  return out
end


--- Saves the enrichment's parts as `paths` = { enrich =, keywords =,
-- summary =, questions = } (those it has). @return sums | nil, msg, code
function Enrich:save(paths)
  local sums = {}
  local docs = {}
  for _, id in ipairs(sorted_keys(self.docs)) do
    local d = self.docs[id]
    local chunks = {}
    for i, name in ipairs(d.names) do
      local ch = self.chunks[name] or {}
      chunks[i] = json.object({ keywords = ch.keywords, summary = ch.summary,
        questions = ch.questions, keys = ch.keys and next(ch.keys) and ch.keys or nil })
    end
    docs[#docs + 1] = { id = id, title = d.title, title_key = d.title_key, chunks = chunks,
      names = d.names, doc_summary_key = d.doc_summary_key, sections = d.sections }
  end
  local body, msg, code = json.encode({ format = "rag.enrich", version = FORMAT_VERSION,
    docs = docs, cache = json.object(kept_cache(self)), clusters = self.clusters,
    dirty = self.dirty or nil,
    questions = self.q and getmetatable(self.q).__name or nil })
  if not body then
    return nil, "rag.index.save: the enrichment: " .. tostring(msg), code
  end
  local ok
  ok, msg, code = fs.write(paths.enrich, body .. "\n")
  if not ok then
    return nil, msg, code
  end
  local size, crc = fs.sum(paths.enrich)
  if not size then
    return nil, crc, "io"
  end
  sums.enrich = { size = size, crc32 = crc }
  if self.tree then
    local ts
    ts, msg, code = self.tree.c:save({ store = paths.treestore, bm25 = paths.treebm25,
      vectors = paths.treevectors })
    if not ts then
      return nil, msg, code
    end
    sums.treestore, sums.treebm25, sums.treevectors = ts.store, ts.bm25, ts.vectors
  end
  for part, obj in pairs({ keywords = self.kw, summary = self.sum, questions = self.q }) do
    if paths[part] then
      ok, msg, code = obj:save(paths[part])
      if not ok then
        return nil, msg, code
      end
      size, crc = fs.sum(paths[part])
      if not size then
        return nil, crc, "io"
      end
      sums[part] = { size = size, crc32 = crc }
    end
  end
  return sums
end

--- The parts this enrichment saves, by name (for the manifest's files).
function Enrich:part_names()
  local names = { "enrich" }
  if self.tree then
    names[#names + 1] = "treestore"
    names[#names + 1] = "treebm25"
    if self.tree.c:stats().vector ~= "none" then
      names[#names + 1] = "treevectors"
    end
  end
  if self.kw then
    names[#names + 1] = "keywords"
  end
  if self.sum then
    names[#names + 1] = "summary"
  end
  if self.q then
    names[#names + 1] = "questions"
  end
  return names
end

local function opt_type(v, t)
  return v == nil or type(v) == t
end

local function strings(t)
  if type(t) ~= "table" then
    return false
  end
  for _, v in pairs(t) do
    if type(v) ~= "string" then
      return false
    end
  end
  return true
end

-- Whether a document entry of the enrichment part has the shape _save
-- writes: every field read later is checked here, once.
local function entry_ok(d)
  if type(d) ~= "table" or type(d.id) ~= "string" or not strings(d.names)
      or type(d.chunks) ~= "table" or not opt_type(d.title, "string")
      or not opt_type(d.title_key, "string") or not opt_type(d.doc_summary_key, "string") then
    return false
  end
  for _, ch in pairs(d.chunks) do
    if type(ch) ~= "table" or not (ch.keywords == nil or strings(ch.keywords))
        or not opt_type(ch.summary, "string")
        or not (ch.questions == nil or strings(ch.questions))
        or not (ch.keys == nil or strings(ch.keys)) then
      return false
    end
  end
  return true
end

--- Opens the enrichment saved with an index.
-- @tparam table record the manifest's `enrich`
-- @tparam table paths the parts' paths
-- @tparam table opts rag.index.open's `{ llm =, enrich = }`
-- @param tree function(embedder, paths) opening the summary level
-- @param embedder the index's embedder (or false)
-- @return Enrich | nil, msg, code
function M._open(fname, record, paths, opts, bm25_opts, tree, embedder)
  local o, msg, code = from_record(fname, record, opts.enrich)
  if not o then
    return nil, msg, code
  end
  if not paths.enrich then
    return nil, fname .. ": the enrichment part is missing", "corrupt"
  end
  local f, err = io.open(paths.enrich, "rb")
  if not f then
    return nil, fname .. ": the enrichment part is missing: " .. tostring(err), "corrupt"
  end
  local s = f:read("*a")
  f:close()
  local t = json.decode(s)
  if type(t) ~= "table" or t.format ~= "rag.enrich" or type(t.docs) ~= "table"
      or type(t.cache) ~= "table" then
    return nil, fname .. ": '" .. paths.enrich .. "': not an enrichment part", "corrupt"
  end
  local e = setmetatable({ o = o, llm = opts.llm, cache = {}, fresh = {}, chunks = {}, docs = {},
    bm25_opts = bm25_opts }, Enrich)
  for k, v in pairs(t.cache) do
    e.cache[k] = { v = v ~= json.null and v or nil }
  end
  e.clusters = type(t.clusters) == "table" and t.clusters or nil
  e.dirty = t.dirty == true
  for _, d in ipairs(t.docs) do
    if not entry_ok(d) then
      return nil, fname .. ": '" .. paths.enrich .. "': a document entry is damaged", "corrupt"
    end
    for i, name in ipairs(d.names) do
      local ch = d.chunks[i] or {}
      e.chunks[name] = { keywords = ch.keywords, summary = ch.summary, questions = ch.questions,
        keys = ch.keys }
    end
    e.docs[d.id] = { names = d.names, title = d.title, title_key = d.title_key,
      doc_summary_key = d.doc_summary_key,
      sections = type(d.sections) == "table" and d.sections or nil }
  end
  for part, load in pairs({ keywords = core.bm25.load, summary = core.bm25.load,
    questions = t.questions == "rag.hnsw" and core.hnsw.load or core.vec.load }) do
    if paths[part] then
      local obj
      obj, msg, code = load(paths[part])
      if not obj then
        return nil, msg, code
      end
      e[part == "keywords" and "kw" or part == "summary" and "sum" or "q"] = obj
    end
  end
  if o.kinds.doc_summary then
    e.embed = proxy(embedder)
    if paths.treestore then
      e.tree, msg, code = tree(e.embed, paths)
      if not e.tree then
        e:close()
        return nil, msg, code
      end
    else
      e.tree = tree(e.embed)
    end
  end
  if o.kinds.keywords and not e.kw then
    e.kw = core.bm25.new(bm25_opts)
  end
  if o.kinds.summary and not e.sum then
    e.sum = core.bm25.new(bm25_opts)
  end
  return e
end

--- Closes the fields; idempotent.
function Enrich:close()
  for _, k in ipairs({ "kw", "sum", "q", "tree" }) do
    if self[k] then
      self[k]:close()
      self[k] = nil
    end
  end
end

return M
