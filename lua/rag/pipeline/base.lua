--- rag.pipeline.base: what every pipeline shares (internal). Option
-- checking, the run, condensing a conversation, searching, the answer tail
-- (pack, ask, validate citations) and the pipeline object whose
-- :retrieve and :answer call a pipeline's own `gather`. See
-- docs/pipelines.md.
local opts_check = require("rag.opts").check
local offline = require("rag.pipeline._offline")
local prompts = require("rag.prompts")
local runtime = require("rag.pipeline.runtime")

local type, pairs, ipairs, tostring, tonumber, error, setmetatable =
  type, pairs, ipairs, tostring, tonumber, error, setmetatable
local format, concat, min = string.format, table.concat, math.min

local M = {}

-- The options every pipeline takes; a pipeline adds its own.
local COMMON = {
  index = { "table|userdata" },
  llm = { "table|userdata" },
  limits = { "table" },
  k = { "number", default = 5, int = true, min = 1 },
  fetch_k = { "number", int = true, min = 1 },
  budget = { "number", default = 3000, int = true, min = 0 },
  lang = { "string", default = "auto", enum = { "auto", "en", "zh" } },
  prompts = { "table" },
  search = { "table" },
  tokenizer = { "table|userdata" },
  clock = { "function" },
  rewrite = { "function|boolean", default = false },
  retrieve = { "function" },
  rerank = { "function|table|userdata" },
  compress = { "function|boolean", default = false },
  answer = { "function" },
}

-- Search options a pipeline sets itself, refused in `search`.
local OWN_SEARCH = { k = true }

local Pipeline = {}
Pipeline.__index = Pipeline

--- Checks a pipeline's options: the common ones plus `extra`.
-- @return the checked options (a new table), with `prompts` made into the
--   overrides table and a prompt set per language made on demand
function M.options(fname, opts, extra, level, no_index)
  local schema = {}
  for k, v in pairs(COMMON) do
    schema[k] = v
  end
  for k, v in pairs(extra or {}) do
    schema[k] = v
  end
  level = (level or 1) + 1
  local o = opts_check(fname, opts, schema, level)
  if o.index == nil and o.retrieve == nil and not no_index then
    error(fname .. ": option 'index' is required (anything with :search(query, opts))", level)
  end
  if o.index ~= nil and type(o.index.search) ~= "function" then
    error(fname .. ": option 'index' must have a :search(query, opts) method", level)
  end
  if o.llm == nil then
    o.llm = require("rag.llm").extractive()
  elseif type(o.llm.chat) ~= "function" then
    error(fname .. ": option 'llm' must have a :chat(messages, opts) method", level)
  end
  local r = o.rerank
  if r ~= nil and type(r) ~= "function" and type(r.rerank) ~= "function" then
    error(fname .. ": option 'rerank' must be a function or have a :rerank(query, docs) "
      .. "method", level)
  end
  for key in pairs(o.search or {}) do
    if OWN_SEARCH[key] then
      error(format("%s: option 'search' must not set '%s' (use the pipeline's own)", fname,
        key), level)
    end
  end
  o.fetch_k = o.fetch_k or math.max(20, 4 * o.k)
  if o.fetch_k < o.k then
    error(format("%s: 'fetch_k' (%d) must be at least 'k' (%d)", fname, o.fetch_k, o.k), level)
  end
  -- a bad override raises now, not at the first question
  prompts.get("en", o.prompts)
  prompts.get("zh", o.prompts)
  return o
end

--- A pipeline object: `gather(self, run, question) -> hits | nil, msg, code`
-- is the pipeline's own retrieval; everything else is shared.
-- `respond(self, run, question, partial, stream) -> true | nil, msg, code`,
-- when given, replaces the answer after condensing (gather, pack, answer,
-- cite: `Pipeline:respond`), filling `partial`.
function M.new(name, o, gather, respond)
  return setmetatable({ name = name, o = o, gather = gather, respond = respond, sets = {} },
    Pipeline)
end

-- {====== Small shared pieces ======}

-- The prompt set for a question.
function Pipeline:set(question)
  local lang = self.o.lang
  if lang == "auto" then
    -- a run asks for the same question's set several times: detect once
    if question == self.detected_q then
      lang = self.detected
    else
      lang = prompts.detect(question)
      self.detected_q, self.detected = question, lang
    end
  end
  local s = self.sets[lang]
  if not s then
    s = prompts.get(lang, self.o.prompts)
    self.sets[lang] = s
  end
  return s
end

-- The first non-empty line of an LLM reply, trimmed, without quotes or a
-- list marker; nil when there is none.
local function first_line(text)
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    line = line:gsub("^%s*[%-%*]%s+", ""):gsub("^%s*%d+[%.%)]%s+", "")
    line = line:match("^%s*(.-)%s*$"):gsub('^"(.*)"$', "%1")
    if line ~= "" then
      return line
    end
  end
  return nil
end
M.first_line = first_line

--- The non-empty lines of a reply (list markers and quotes removed), at
-- most `n`, without repeats.
function M.lines(text, n)
  local out, seen = {}, {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local l = first_line(line)
    if l and not seen[l] and #out < n then
      seen[l] = true
      out[#out + 1] = l
    end
  end
  return out
end

--- Asks the LLM one prompt of the question's set, in a step named `step`.
-- `note`, when given, is added to the system message (what earlier steps
-- found, for the LLM to take into account).
-- @return the reply's text | nil, msg, code
function Pipeline:ask(run, step, prompt, slots, question, chat_opts, note)
  local set = self:set(question)
  return run:step(step, function()
    local messages = prompts.messages(set, prompt, slots)
    if note then
      if messages[1].role == "system" then
        messages[1].content = messages[1].content .. "\n\n" .. note
      else
        table.insert(messages, 1, { role = "system", content = note })
      end
    end
    local reply, msg, code = run:chat(self.o.llm, messages, chat_opts)
    if not reply then
      return nil, msg, code
    end
    return reply.text
  end, slots)
end

--- One search of the index, traced: the pipeline's `retrieve` when given,
-- else `index:search(query, { k =, fetch_k =, ...search })`.
function Pipeline:search(run, query, k, step, own)
  local o = self.o
  return run:step(step or "retrieve", function()
    local hits, msg, code
    if o.retrieve then
      hits, msg, code = o.retrieve(query, { k = k, fetch_k = o.fetch_k })
    else
      local so = { k = k, fetch_k = math.max(o.fetch_k, k) }
      for key, v in pairs(own or {}) do
        so[key] = v
      end
      for key, v in pairs(o.search or {}) do
        so[key] = v
      end
      hits, msg, code = o.index:search(query, so)
    end
    if hits == nil then
      return nil, msg or "rag.pipeline: retrieve returned nothing", code or "provider"
    end
    if type(hits) ~= "table" then
      error(format("rag.pipeline.%s: retrieve returned %s, not a hit list", self.name,
        type(hits)), 0)
    end
    return hits
  end, { query = query, k = k })
end

-- {====== Rerank and compress (replaceable) ======}

--- The user's `rerank`, if any: a function `(question, hits) -> hits` or a
-- provider with `:rerank(query, docs, opts)` (hits `{ index =, score = }`).
-- Without one, the hits as they are. At most `k` come back.
function Pipeline:rerank(run, question, hits, k)
  local r = self.o.rerank
  if not r then
    return hits
  end
  return run:step("rerank", function()
    if type(r) == "function" then
      local out, msg, code = r(question, hits)
      if out == nil then
        return nil, msg, code
      end
      local cut = {}
      for i = 1, min(#out, k) do
        cut[i] = out[i]
      end
      return cut
    end
    local docs = {}
    for i, h in ipairs(hits) do
      docs[i] = h.text or ""
    end
    local ranked, msg, code = r:rerank(question, docs, { top_n = k })
    if not ranked then
      return nil, msg, code
    end
    local out = {}
    for _, x in ipairs(ranked) do
      local h = hits[x.index]
      if h and #out < k then
        local c = {}
        for key, v in pairs(h) do
          c[key] = v
        end
        c.score = tonumber(x.score) or c.score
        out[#out + 1] = c
      end
    end
    return out
  end, { question = question, hits = hits })
end

--- `compress`: a function `(question, hits) -> hits`, or true for the LLM
-- `compress` prompt on each hit (NONE drops it; a hit whose text changes
-- loses its span).
function Pipeline:compress(run, question, hits)
  local c = self.o.compress
  if not c then
    return hits
  end
  return run:step("compress", function()
    if type(c) == "function" then
      return c(question, hits)
    end
    local out = {}
    for _, h in ipairs(hits) do
      local text, msg, code = self:ask(run, "compress_one", "compress",
        { question = question, document = h.text or "" }, question)
      if not text then
        return nil, msg, code
      end
      text = text:match("^%s*(.-)%s*$")
      if text ~= "NONE" and text ~= "" then
        local copy = {}
        for key, v in pairs(h) do
          copy[key] = v
        end
        if text ~= h.text then
          copy.text, copy.start, copy.stop = text, nil, nil
        end
        out[#out + 1] = copy
      end
    end
    return out
  end, { question = question, hits = hits })
end

--- The offline compress: each hit cut to its sentences that share a term
-- with the question (a copy; its span moved in when they are one run); a
-- hit with none is dropped, and so is one that is cut to the same text of
-- the same document as an earlier one (overlapping windows).
function M.keep_relevant(run, question, hits, step)
  return run:step(step or "compress", function()
    local out, cut, dropped, seen, repeats = {}, 0, 0, {}, 0
    for _, h in ipairs(hits) do
      local c, kept, of = offline.refine(question, h)
      local key = c and tostring(c.doc_id) .. "\0" .. c.text
      if c and seen[key] then
        repeats = repeats + 1
      elseif c then
        seen[key] = true
        out[#out + 1] = c
        if kept < of then
          cut = cut + 1
        end
      else
        dropped = dropped + 1
      end
    end
    run:branch("sentences", format("kept the sentences sharing a term with the question: "
      .. "%d of %d hits cut, %d dropped, %d repeats dropped", cut, #hits, dropped, repeats))
    return out
  end, { question = question, hits = hits })
end

--- The last retrieval stages every pipeline shares: the user's `rerank`
-- (else the first `k`), then `compress`.
function Pipeline:refine(run, question, hits)
  local k = self.o.k
  local out, msg, code = self:rerank(run, question, hits, k)
  if not out then
    return nil, msg, code
  end
  if #out > k then
    local cut = {}
    for i = 1, k do
      cut[i] = out[i]
    end
    out = cut
  end
  return self:compress(run, question, out)
end

--- Reciprocal rank fusion of hit lists (rag.fuse.rrf, preset "paper",
-- constant `rrf_k`), as a traced step. Each fused hit is a copy of the
-- first hit seen with its id, with `score` the fused score.
-- @return hits (at most `limit`)
function M.fuse(run, lists, limit, rrf_k)
  return run:step("fuse", function()
    local first = {}
    for _, list in ipairs(lists) do
      for _, h in ipairs(list) do
        local id = tostring(h.id)
        if not first[id] then
          first[id] = h
        end
      end
    end
    local fused = require("rag").fuse.rrf(lists, { k = rrf_k, limit = limit })
    local out = {}
    for i, f in ipairs(fused) do
      local c = {}
      for key, v in pairs(first[f.id]) do
        c[key] = v
      end
      c.score = f.score
      out[i] = c
    end
    return out
  end, { lists = #lists, k = rrf_k })
end

-- {====== The answer tail ======}

-- Hits into rag.pack items (ids unique; spans only where they fit the text).
local function pack_items(hits)
  local items, seen, by_id = {}, {}, {}
  for _, h in ipairs(hits) do
    local id = tostring(h.id)
    if not seen[id] and type(h.text) == "string" then
      seen[id] = true
      by_id[id] = h
      local it = { id = id, text = h.text, source = h.source and tostring(h.source)
        or (h.doc_id and tostring(h.doc_id)) or nil, doc = h.doc_id and tostring(h.doc_id) }
      if type(h.start) == "number" and type(h.stop) == "number"
          and h.stop - h.start + 1 == #h.text then
        it.start, it.stop = h.start, h.stop
      end
      items[#items + 1] = it
    end
  end
  return items, by_id
end

--- Packs hits in the order given into the context layout.
-- @return packed (rag.pack's result), contexts (the hits shown, by number)
--   | nil, msg, code
function Pipeline:pack(run, hits)
  local o = self.o
  return run:step("pack", function()
    local items, by_id = pack_items(hits)
    local packed, msg, code = require("rag").pack(items, { budget = o.budget,
      tokenizer = o.tokenizer, order = "given" })
    if not packed then
      return nil, msg, code
    end
    local contexts = {}
    for n, c in ipairs(packed.citations) do
      contexts[n] = by_id[c.id]
    end
    packed.contexts = contexts
    return packed
  end, { hits = hits, budget = o.budget })
end

--- Removes the "[n]" markers of `text` that point at no context (n not in
-- 1..count) and lists the real ones.
-- @return text, cited (sorted numbers), removed (the markers taken out)
function M.validate(text, count)
  local removed, cited, seen = {}, {}, {}
  local out = text:gsub("(%s*)%[(%d+)%]", function(_, d)
    local n = tonumber(d)
    if n >= 1 and n <= count then
      if not seen[n] then
        seen[n] = true
        cited[#cited + 1] = n
      end
      return nil
    end
    removed[#removed + 1] = "[" .. d .. "]"
    return ""
  end)
  table.sort(cited)
  return out, cited, removed
end

-- The answer step: the user's `answer(question, context, hits)` or the LLM
-- with the answer prompt.
function Pipeline:ask_answer(run, question, packed, stream, note)
  local fn = self.o.answer
  if fn then
    return run:step("answer", function()
      local text, msg, code = fn(question, packed.text, packed.contexts)
      if text == nil then
        return nil, msg, code
      end
      if type(text) == "table" then
        text = text.text
      end
      if type(text) ~= "string" then
        error(format("rag.pipeline.%s: answer returned %s, not a string", self.name,
          type(text)), 0)
      end
      return text
    end, { question = question })
  end
  return self:ask(run, "answer", "answer", { question = question, context = packed.text },
    question, stream and { stream = stream } or nil, note)
end

--- Validates the citations of `text` against `contexts`. Not a step, so
-- that it runs even when a limit stopped the run; markers it removes are
-- reported in the trace as a branch "removed_citations".
-- @return { text =, citations =, cited =, removed =, grounded = }
function Pipeline:cite(run, question, text, contexts)
  local refusal = self:set(question).refusal
  local clean, cited, removed = M.validate(text, #contexts)
  if #removed > 0 then
    run:branch("removed_citations", "markers pointing at no context: " .. concat(removed, " "))
  end
  local citations = {}
  for _, n in ipairs(cited) do
    local h = contexts[n]
    citations[n] = { id = tostring(h.id), doc_id = h.doc_id, source = h.source,
      start = h.start, stop = h.stop }
  end
  local trimmed = clean:match("^%s*(.-)%s*$")
  return { text = clean, citations = citations, cited = cited, removed = removed,
    grounded = #cited > 0 and trimmed ~= refusal }
end

-- {====== The pipeline object ======}

local ANSWER_OPTS = { history = { "table" }, stream = { "function" } }

local function new_run(self)
  local o = self.o
  return runtime.new({ name = "rag.pipeline." .. self.name, limits = o.limits,
    tokenizer = o.tokenizer, clock = o.clock })
end

-- The question to retrieve for: condensed with the history, then rewritten
-- when asked to.
local function standalone(self, run, question, history)
  if history and #history > 0 then
    local text, msg, code = self:ask(run, "condense", "condense",
      { history = prompts.history(history), question = question }, question)
    if not text then
      return nil, msg, code
    end
    question = first_line(text) or question
  end
  local rw = self.o.rewrite
  if rw then
    local text, msg, code
    if type(rw) == "function" then
      text, msg, code = run:step("rewrite", function()
        return rw(question)
      end, { question = question })
    else
      text, msg, code = self:ask(run, "rewrite", "rewrite", { question = question }, question)
    end
    if not text then
      return nil, msg, code
    end
    question = first_line(text) or question
  end
  return question
end

local function check_question(fname, q, opts)
  if type(q) ~= "string" then
    error(format("%s: question must be a string, got %s", fname, type(q)), 3)
  end
  return opts_check(fname, opts, ANSWER_OPTS, 3)
end

--- The hits the pipeline answers from, and the run's trace and usage.
-- @return hits, { trace =, usage = } | nil, msg, code, { hits =, trace =, usage = }
function Pipeline:retrieve(q, opts)
  local o = check_question("rag.pipeline." .. self.name .. ":retrieve", q, opts)
  local run = new_run(self)
  local question, msg, code = standalone(self, run, q, o.history)
  local hits
  if question then
    hits, msg, code = self:gather(run, question)
  end
  if not hits then
    return run:finish({ hits = {} }, msg, code)
  end
  return hits, run:finish({})
end

--- Packs `hits`, asks the LLM (the `prompt`, default "answer") and
-- validates the citations, filling `partial` (`contexts`, `text`,
-- `citations`, `grounded`). The refusal without an LLM call when no
-- context is left. `note` as for `ask`.
-- @return true | nil, msg, code
function Pipeline:reply(run, question, hits, partial, stream, prompt, note)
  local packed, msg, code = self:pack(run, hits)
  if not packed then
    return nil, msg, code
  end
  partial.contexts = packed.contexts
  partial.packed = packed.text
  local text
  if #packed.contexts == 0 then
    run:branch("no_context", "nothing was retrieved (or nothing fit the budget): the refusal")
    text = self:set(question).refusal
    if stream then
      stream(text)
    end
  elseif prompt and prompt ~= "answer" then
    text, msg, code = self:ask(run, prompt, prompt, { question = question,
      context = packed.text }, question, stream and { stream = stream } or nil, note)
  else
    text, msg, code = self:ask_answer(run, question, packed, stream, note)
  end
  if not text then
    return nil, msg, code
  end
  partial.text = text
  local c = self:cite(run, question, text, packed.contexts)
  partial.text, partial.citations, partial.grounded = c.text, c.citations, c.grounded
  return true
end

--- The answer to a standalone question in `run`: the pipeline's
-- `respond`, else gather, then `reply`. Pipelines that route to others
-- (adaptive, router) call it on them with their own run.
-- @return true | nil, msg, code (`partial` filled as far as it got)
function Pipeline:respond_in(run, question, partial, stream)
  if self.respond then
    return self:respond(run, question, partial, stream)
  end
  local hits, msg, code = self:gather(run, question)
  if not hits then
    return nil, msg, code
  end
  return self:reply(run, question, hits, partial, stream)
end

--- Answers a question: `{ text, citations, contexts, grounded, trace, usage }`.
-- @return result | nil, msg, code, partial (the result so far, with its trace)
function Pipeline:answer(q, opts)
  local o = check_question("rag.pipeline." .. self.name .. ":answer", q, opts)
  local run = new_run(self)
  local partial = { question = q, contexts = {}, citations = {}, grounded = false }
  local question, msg, code = standalone(self, run, q, o.history)
  if not question then
    return run:finish(partial, msg, code)
  end
  partial.question = question
  local ok
  ok, msg, code = self:respond_in(run, question, partial, o.stream)
  partial.packed = nil
  if not ok then
    return run:finish(partial, msg, code)
  end
  return run:finish(partial)
end

return M
