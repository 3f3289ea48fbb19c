--- rag.llm: LLMs that need no server. `extractive{}` answers from the
-- context in the prompt by citing its most relevant sentences, and plays
-- every other prompt of rag.prompts offline; `record(llm, path)` and
-- `replay(path)` make runs reproducible. Every LLM here has the one
-- contract: `llm:chat(messages, opts)` -> `{ text =, usage = }` | nil, msg, code.
-- @module rag.llm
local core = require("rag.core")
local prompts = require("rag.prompts")
local opts_check = require("rag.opts").check

local json, text = core.json, core.text
local type, pairs, ipairs, tostring, tonumber, error, setmetatable =
  type, pairs, ipairs, tostring, tonumber, error, setmetatable
local format, concat, sort, max = string.format, table.concat, table.sort, math.max
local find, ssub = string.find, string.sub

local M = {}

-- {====== Reading a rendered prompt back ======}

-- Slots that hold long text of any shape (matched greedily, so that they
-- may contain the template's own separators); the others are short.
local LONG = { context = true, document = true, history = true, answer = true,
  tools = true, scratchpad = true }

local function escape(s)
  return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
end

-- A template as an anchored Lua pattern, and its slot names in order.
local function compile(template)
  local parts, names, pos = { "^" }, {}, 1
  for s, name, e in template:gmatch("(){([%l_][%l%d_]*)}()") do
    parts[#parts + 1] = escape(template:sub(pos, s - 1))
    parts[#parts + 1] = name == "n" and "(%d+)" or LONG[name] and "(.*)" or "(.-)"
    names[#names + 1] = name
    pos = e
  end
  parts[#parts + 1] = escape(template:sub(pos)) .. "$"
  return { pattern = concat(parts), names = names }
end

-- Fills `slots` from `s` if it matches the compiled template `c`.
local function unrender(c, s, slots)
  local caps = { s:match(c.pattern) } -- the whole match when there are no slots
  if caps[1] == nil then
    return false
  end
  for i, name in ipairs(c.names) do
    slots[name] = caps[i]
  end
  return true
end

-- The prompt of `sets` that rendered `messages`: name, slots, set; or nil.
local function recognise(self, messages)
  local sys, user
  if #messages == 2 and messages[1].role == "system" and messages[2].role == "user" then
    sys, user = messages[1].content, messages[2].content
  elseif #messages == 1 and messages[1].role == "user" then
    user = messages[1].content
  else
    return nil
  end
  if type(user) ~= "string" or (sys ~= nil and type(sys) ~= "string") then
    return nil
  end
  for _, entry in ipairs(self.compiled) do
    local slots = {}
    if (entry.system == nil) == (sys == nil)
        and (sys == nil or unrender(entry.system, sys, slots))
        and unrender(entry.user, user, slots) then
      return entry.name, slots, entry.set
    end
  end
  return nil
end

-- {====== Terms and sentences ======}

-- Question words, removed before a question's terms are taken, so that
-- "what" or "什么" does not count as something to find in the context.
local EN_QUESTION = { "what", "which", "who", "whom", "whose", "when", "where", "why", "how",
  "do", "does", "did", "can", "could", "would", "should", "shall", "may", "might", "tell",
  "me", "please", "explain", "describe", "i", "you", "we", "my", "your", "our", "us", "about" }
local ZH_QUESTION = { "为什么", "怎么样", "是不是", "告诉我", "介绍一下", "解释一下", "什么",
  "怎么", "怎样", "如何", "为何", "哪些", "哪个", "哪里", "是否", "请问", "一下", "吗", "呢",
  "吧", "哪", "请" }

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function strip_question_words(q)
  q = q:lower()
  for _, w in ipairs(EN_QUESTION) do
    q = q:gsub("%f[%w]" .. w .. "%f[%W]", " ")
  end
  for _, w in ipairs(ZH_QUESTION) do
    q = q:gsub(w, " ")
  end
  return q
end

-- A lone CJK character: a unigram the analyzer makes of an isolated
-- character, nearly always a function word (是, 的).
local function is_cjk_unigram(t)
  return #t == 3 and t:byte(1) >= 0xE3 and t:byte(1) <= 0xE9
end

-- The distinct terms of `s` as a set, and their number.
local function termset(self, s)
  local terms = self.analyzer:tokenize(s) or {}
  local set, n = {}, 0
  for _, t in ipairs(terms) do
    if not set[t] and not is_cjk_unigram(t) then
      set[t], n = true, n + 1
    end
  end
  return set, n
end

-- The terms to look for: those of the question without question words, or
-- all of them when nothing else is left; and the text to search BM25 with.
local function question_terms(self, q)
  local cleaned = strip_question_words(q)
  local set, n = termset(self, cleaned)
  if n == 0 then
    cleaned = q
    set, n = termset(self, q)
  end
  return set, n, cleaned
end

-- The numbered passages of a packed context, as rag.pack lays it out with
-- its default template: "[n] source" on a line of its own, then the text,
-- up to the next "[n+1]" that starts a line. Numbers run 1, 2, 3...; a
-- "[k]" line that is not the next number is text.
function M._contexts(s)
  local src, heads = "\n" .. s, {}
  for at, num, rest, stop in src:gmatch("\n()%[(%d+)%]([^\n]*)()") do
    if tonumber(num) == #heads + 1 then
      heads[#heads + 1] = { n = #heads + 1, at = at - 1, source = trim(rest), body = stop }
    end
  end
  local out = {}
  for i, h in ipairs(heads) do
    local last = heads[i + 1] and heads[i + 1].at - 1 or #s
    out[i] = { n = h.n, source = h.source, text = trim(s:sub(h.body, last)) }
  end
  return out
end

-- The prose of a passage: Markdown fenced code blocks and table rows
-- become paragraph breaks, so that no quoted sentence holds them (a table
-- has no full stops, so the sentence splitter would keep it whole).
local function prose(s)
  s = ("\n" .. s .. "\n"):gsub("\n[ \t]*```.-\n[ \t]*```[^\n]*", "\n\n")
  return (s:gsub("\n[ \t]*```[^\n]*", "\n\n"):gsub("\n[ \t]*|[^\n]*", "\n\n"))
end

-- Sentences of `passages` ({ {n=, text=} }) ranked against the question
-- and chosen: best first, at most max_sentences, each sharing a term with
-- the question and either covering a term not covered yet or scoring at
-- least half the best. Returns the chosen { text=, n=, i= } and the share
-- of the question's terms they cover.
local function choose(self, question, passages)
  local q, nq, query = question_terms(self, question)
  if nq == 0 then
    return {}, 0
  end
  local bm25 = core.bm25.new({ analyzer = self.analyzer })
  local byid = {}
  for _, p in ipairs(passages) do
    for i, s in ipairs(text.sentences(prose(p.text)) or {}) do
      local id = format("%06d:%06d", p.n, i)
      byid[id] = { text = s.text, n = p.n, i = i }
      bm25:add(id, s.text)
    end
  end
  local hits = bm25:search(query, max(20, 4 * self.max_sentences)) or {}
  bm25:close()
  local chosen, covered, ncovered = {}, {}, 0
  for _, h in ipairs(hits) do
    if #chosen >= self.max_sentences then
      break
    end
    local s = byid[h.id]
    local terms = termset(self, s.text)
    local shared, new = 0, {}
    for t in pairs(q) do
      if terms[t] then
        shared = shared + 1
        if not covered[t] then
          new[#new + 1] = t
        end
      end
    end
    if shared > 0 and (#new > 0 or h.score >= 0.5 * hits[1].score) then
      chosen[#chosen + 1] = s
      for _, t in ipairs(new) do
        covered[t], ncovered = true, ncovered + 1
      end
    end
  end
  return chosen, ncovered / nq
end

-- Joins sentences: with a space, except between two CJK ends.
local function join(parts, lang)
  return concat(parts, lang == "zh" and "" or " ")
end

-- {====== What extractive replies to each prompt ======}

local HANDLERS = {}

local function answer(self, slots, set)
  local passages = M._contexts(slots.context or "")
  local chosen, coverage = choose(self, slots.question or "", passages)
  if #chosen == 0 or coverage < self.min_coverage then
    return set.refusal
  end
  -- one sentence found in several passages is shown once, citing them all
  local parts, seen = {}, {}
  for _, s in ipairs(chosen) do
    local k = seen[s.text]
    if k then
      parts[k] = parts[k] .. "[" .. s.n .. "]"
    else
      parts[#parts + 1] = s.text .. " [" .. s.n .. "]"
      seen[s.text] = #parts
    end
  end
  return join(parts, set.lang)
end

HANDLERS.answer = answer
HANDLERS.answer_strict = answer

function HANDLERS.direct(_, _, set)
  return set.refusal
end

local function same_question(_, slots)
  return trim(slots.question)
end

HANDLERS.rewrite = same_question
HANDLERS.multi_query = same_question
HANDLERS.hyde = same_question
HANDLERS.stepback = same_question
HANDLERS.decompose = same_question

-- The labels of the ReAct steps in rag.pipeline.agent's scratchpad.
local REACT_LABELS = { "Thought:", "Action:", "Action Input:", "Final Answer:" }

-- The text of every "Observation:" in a ReAct scratchpad, joined.
local function observations(pad)
  local out, inside = {}, false
  for line in (pad .. "\n"):gmatch("([^\n]*)\n") do
    if line:find("^Observation:") then
      inside = true
      line = line:gsub("^Observation:[ \t]*", "")
    else
      for _, label in ipairs(REACT_LABELS) do
        if line:find(label, 1, true) == 1 then
          inside = false
        end
      end
    end
    if inside then
      out[#out + 1] = line
    end
  end
  return concat(out, "\n")
end

-- rag.pipeline.agent's ReAct prompt: first search the question (with
-- "search", else "websearch"), then answer from the observations as
-- `answer` does.
function HANDLERS.agent(self, slots, set)
  local q = trim(slots.question or "")
  if not (slots.scratchpad or ""):find("Observation:", 1, true) then
    local names = {}
    for name in (slots.tool_names or ""):gmatch("[^,%s]+") do
      names[name] = true
    end
    local tool = names.search and "search" or names.websearch and "websearch"
    if tool then
      return "Thought: I should search for the question.\nAction: " .. tool
        .. "\nAction Input: " .. json.encode({ query = q })
    end
    return "Thought: I have no tool to search with.\nFinal Answer: " .. set.refusal
  end
  return "Thought: I now know the final answer.\nFinal Answer: "
    .. answer(self, { question = q, context = observations(slots.scratchpad) }, set)
end

function HANDLERS.grade(self, slots)
  local q, nq = question_terms(self, slots.question)
  if nq == 0 then
    return "0"
  end
  local d = termset(self, slots.document)
  local shared = 0
  for t in pairs(q) do
    if d[t] then
      shared = shared + 1
    end
  end
  return (format("%.2f", shared / nq):gsub("0+$", ""):gsub("%.$", ""))
end

function HANDLERS.compress(self, slots, set)
  local chosen = choose(self, slots.question, { { n = 1, text = slots.document } })
  if #chosen == 0 then
    return "NONE"
  end
  sort(chosen, function(a, b)
    return a.i < b.i
  end)
  local parts = {}
  for i, s in ipairs(chosen) do
    parts[i] = s.text
  end
  return join(parts, set.lang)
end

-- A claim is grounded when at least half its terms occur in the context.
local GROUNDED = 0.5

function HANDLERS.check(self, slots)
  local bare = trim((slots.answer:gsub("%s*%[%d+%]", "")))
  for _, set in ipairs(self.sets) do
    if bare == trim(set.refusal) then
      return "yes"
    end
  end
  local ctx = termset(self, slots.context)
  for _, s in ipairs(text.sentences(bare) or {}) do
    local terms, n = termset(self, s.text)
    local found = 0
    for t in pairs(terms) do
      if ctx[t] then
        found = found + 1
      end
    end
    if n > 0 and found / n < GROUNDED then
      return "no: " .. s.text
    end
  end
  return "yes"
end

local GREETINGS = { "hello", "hi", "hey", "thanks", "thank you", "good morning", "bye",
  "你好", "您好", "谢谢", "再见", "早上好" }
local MULTI = { "compare", "comparison", "differ", "difference", "differences", "versus", "vs",
  "relationship", "both", "and then", "step by step", "比较", "区别", "差异", "不同", "关系",
  "以及", "然后", "分别" }

-- none: a greeting or nothing to look for; iterative: a comparison, several
-- questions or several parts; single otherwise.
function HANDLERS.classify(self, slots)
  local q = trim(slots.question):lower()
  local bare = trim((q:gsub("[%p%s]+", " ")))
  for _, g in ipairs(GREETINGS) do
    if bare == g then
      return "none"
    end
  end
  local _, n = question_terms(self, q)
  if n == 0 then
    return "none"
  end
  local _, marks = q:gsub("[%?？]", "")
  if marks > 1 then
    return "iterative"
  end
  for _, w in ipairs(MULTI) do
    if (w:byte(1) < 0x80 and q:find("%f[%w]" .. w .. "%f[%W]")) or (w:byte(1) >= 0x80
        and q:find(w, 1, true)) then
      return "iterative"
    end
  end
  return "single"
end

local PRONOUNS = { "it", "its", "this", "that", "these", "those", "they", "them", "their",
  "he", "she", "his", "her", "它", "这", "那", "他", "她", "其" }

-- The question as it is, unless it refers back (a pronoun) and the
-- history has an earlier user turn: then that turn follows in brackets.
function HANDLERS.condense(_, slots)
  local q = trim(slots.question)
  local last
  for line in (slots.history .. "\n"):gmatch("([^\n]*)\n") do
    local said = line:match("^%s*[Uu]ser:%s*(.-)%s*$") or line:match("^%s*用户[:：]%s*(.-)%s*$")
    if said and said ~= "" then
      last = said
    end
  end
  if not last then
    return q
  end
  local lower = q:lower()
  for _, w in ipairs(PRONOUNS) do
    if (w:byte(1) < 0x80 and lower:find("%f[%w]" .. w .. "%f[%W]"))
        or (w:byte(1) >= 0x80 and q:find(w, 1, true)) then
      return q .. " (" .. last .. ")"
    end
  end
  return q
end

-- {====== rag.llm.extractive ======}

local Extractive = {}
Extractive.__index = Extractive
Extractive.__name = "rag.llm.extractive"
--- True: this LLM is the offline extractive one (pipelines that need a
-- model's free text, such as a graph extractor, take their offline path).
Extractive.extractive = true

local EXTRACTIVE = {
  max_sentences = { "number", default = 3, int = true, min = 1, max = 100 },
  min_coverage = { "number", default = 0.5, min = 0, max = 1 },
  analyzer = { "userdata" },
  prompts = { "table" },
}

-- The last "Question:" (or "问题：") label's text in `s`, else its last
-- paragraph; and the text before it.
local function find_question(s)
  local best
  for _, label in ipairs({ "Question:", "问题：", "问题:" }) do
    local from = 1
    while true do
      local a, b = s:find(label, from, true)
      if not a then
        break
      end
      if not best or a > best[1] then
        best = { a, b + 1 }
      end
      from = b + 1
    end
  end
  if best then
    return trim(s:sub(best[2])), s:sub(1, best[1] - 1)
  end
  local at = s:find("[^\n]*%S[^\n]*%s*$")
  if not at then
    return trim(s), ""
  end
  return trim(s:sub(at)), s:sub(1, at - 1)
end

--- An LLM that answers from the context in its prompt, offline. It reads
-- the prompts of rag.prompts back from the rendered messages (both
-- languages, or the sets given) and replies to each as docs/pipelines.md
-- says: `answer` by citing the context's most relevant sentences as "[n]",
-- or the set's refusal when they cover too little of the question.
-- @tparam[opt] table opts `max_sentences` (3), `min_coverage` (0.5), `analyzer`
--   (a `rag.text.analyzer`, default English), `prompts` (a list of sets from
--   `rag.prompts.get`, default English and Chinese)
-- @treturn table an llm with `:chat(messages [, opts])`
-- @raise on an unknown option or a bad value
function M.extractive(opts)
  local fname = "rag.llm.extractive"
  local o = opts_check(fname, opts, EXTRACTIVE, 2)
  local sets = o.prompts or { prompts.get("en"), prompts.get("zh") }
  local names = {}
  for name in pairs(prompts.slots) do
    if HANDLERS[name] then -- not the judge's eval_* prompts: it does not judge
      names[#names + 1] = name
    end
  end
  sort(names)
  local compiled = {}
  for i, set in ipairs(sets) do
    if type(set) ~= "table" or type(set.refusal) ~= "string" then
      error(format("%s: prompts[%d] must be a set from rag.prompts.get", fname, i), 2)
    end
    for _, name in ipairs(names) do
      local p = set[name]
      if type(p) == "table" and type(p.user) == "string" then
        compiled[#compiled + 1] = { name = name, set = set, user = compile(p.user),
          system = p.system and p.system ~= "" and compile(p.system) or nil }
      end
    end
  end
  return setmetatable({ max_sentences = o.max_sentences, min_coverage = o.min_coverage,
    analyzer = o.analyzer or text.analyzer(), sets = sets, compiled = compiled }, Extractive)
end

local function as_messages(fname, messages)
  if type(messages) == "string" then
    return { { role = "user", content = messages } }
  end
  if type(messages) ~= "table" or #messages == 0 then
    error(fname .. ": messages must be a string or a non-empty list of messages", 3)
  end
  for i, m in ipairs(messages) do
    if type(m) ~= "table" or type(m.role) ~= "string" then
      error(format("%s: messages[%d] must be a table with a string 'role'", fname, i), 3)
    end
  end
  return messages
end

--- Replies to `messages`. Options other than `stream` are accepted and
-- ignored (`temperature`, `max_tokens`, ... mean nothing here).
-- @tparam string|table messages
-- @tparam[opt] table opts `stream = function(delta)` gets the reply in
--   pieces that join to the text: a word and the spaces after it each
-- @treturn table `{ text =, task =, lang =, model = "extractive",
--   finish_reason = "stop" }` (no `usage`: a run estimates it)
-- @raise on bad messages or options
function Extractive:chat(messages, opts)
  local fname = "rag.llm.extractive.chat"
  messages = as_messages(fname, messages)
  if opts ~= nil and type(opts) ~= "table" then
    error(fname .. ": options must be a table, got " .. type(opts), 2)
  end
  local stream = opts and opts.stream
  if stream ~= nil and type(stream) ~= "function" then
    error(fname .. ": 'stream' must be a function, got " .. type(stream), 2)
  end
  local name, slots, set = recognise(self, messages)
  if not name then
    -- not a known prompt: answer the last user message from its contexts
    local user = ""
    for _, m in ipairs(messages) do
      if m.role == "user" and type(m.content) == "string" then
        user = m.content
      end
    end
    local q, before = find_question(user)
    name, slots = "answer", { context = before, question = q }
    set = self.sets[1]
    for _, s in ipairs(self.sets) do
      if s.lang == prompts.detect(q) then
        set = s
        break
      end
    end
  end
  local out = HANDLERS[name](self, slots, set)
  if stream then -- word by word, as a model's tokens come: pieces that join to the text
    local at = 1
    while at <= #out do
      local stop = select(2, find(out, "^%s*%S+%s*", at)) or #out
      stream(ssub(out, at, stop))
      at = stop + 1
    end
  end
  return { text = out, task = name, lang = set.lang, model = "extractive",
    finish_reason = "stop" }
end

-- {====== Record and replay ======}

local function is_callable_llm(llm)
  local t = type(llm)
  return (t == "table" or t == "userdata") and llm.chat ~= nil
end

-- The request as recorded: messages as a list, options without functions.
local function request_of(messages, opts)
  local ms = {}
  if type(messages) == "string" then
    ms[1] = { role = "user", content = messages }
  else
    for i, m in ipairs(messages) do
      local c = json.object()
      for k, v in pairs(m) do
        if type(k) == "string" and type(v) ~= "function" then
          c[k] = v
        end
      end
      ms[i] = c
    end
  end
  local o = json.object()
  for k, v in pairs(opts or {}) do
    if type(v) ~= "function" and k ~= "timeout" then -- the time left varies between runs
      o[k] = v
    end
  end
  return { messages = ms, opts = o }
end

local REPLY_FIELDS = { "text", "usage", "finish_reason", "model", "id", "task", "lang",
  "tool_calls" }

local function reply_of(reply)
  local r = json.object()
  for _, k in ipairs(REPLY_FIELDS) do
    if reply[k] ~= nil then
      r[k] = reply[k]
    end
  end
  return r
end

local Recorder = {}
Recorder.__index = Recorder

--- Wraps an LLM so that each request and its reply (or failure) is
-- appended to a JSON-lines file, which `replay` plays back.
-- @param llm anything with `:chat(messages, opts)`
-- @tparam string path the file, created (emptied) now
-- @return an llm | nil, msg, "io"
-- @raise on a bad argument
function M.record(llm, path)
  if not is_callable_llm(llm) then
    error("rag.llm.record: llm must have a :chat(messages, opts) method", 2)
  end
  if type(path) ~= "string" then
    error("rag.llm.record: path must be a string, got " .. type(path), 2)
  end
  local f, err = io.open(path, "wb")
  if not f then
    return nil, "rag.llm.record: " .. tostring(err), "io"
  end
  f:close()
  -- function calling as the wrapped LLM has it (rag.pipeline.agent reads it)
  local s = llm.supports_tools
  if type(s) == "function" then
    s = s(llm)
  end
  return setmetatable({ llm = llm, path = path, n = 0, supports_tools = s == true }, Recorder)
end

--- Calls the wrapped LLM and records the exchange.
-- @return what the LLM returns | nil, msg, "io" or "encoding" when the
--   exchange cannot be recorded
function Recorder:chat(messages, opts)
  local reply, msg, code = self.llm:chat(messages, opts)
  self.n = self.n + 1
  local entry = { n = self.n, request = request_of(messages, opts) }
  if reply == nil then
    entry.error = { message = tostring(msg), code = code }
  elseif type(reply) == "table" then
    entry.reply = reply_of(reply)
  else
    error("rag.llm.record: the llm returned " .. type(reply) .. ", not a reply table", 2)
  end
  local line, jerr, jcode = json.encode(entry)
  if not line then
    return nil, "rag.llm.record: request " .. self.n .. ": " .. tostring(jerr), jcode
  end
  local f, err = io.open(self.path, "ab")
  if not f then
    return nil, "rag.llm.record: " .. tostring(err), "io"
  end
  local ok, werr = f:write(line, "\n")
  local closed, cerr = f:close()
  if not ok or not closed then
    return nil, format("rag.llm.record: '%s': %s", self.path, tostring(werr or cerr)), "io"
  end
  return reply, msg, code
end

-- The first place where `a` (live) and `b` (recorded) differ, as a path
-- ("messages[2].content"), or nil when they are equal as JSON.
local function differ(a, b, path)
  if type(a) ~= "table" or type(b) ~= "table" then
    return a ~= b and path or nil
  end
  local keys, seen = {}, {}
  for _, t in ipairs({ a, b }) do
    for k in pairs(t) do
      if not seen[k] then
        seen[k] = true
        keys[#keys + 1] = k
      end
    end
  end
  sort(keys, function(x, y)
    if type(x) == type(y) then
      return x < y
    end
    return type(x) == "number"
  end)
  for _, k in ipairs(keys) do
    local sub = type(k) == "number" and format("%s[%d]", path, k)
      or (path == "" and k or path .. "." .. k)
    local d = differ(a[k], b[k], sub)
    if d then
      return d
    end
  end
  return nil
end

-- The first byte at which strings a and b differ (one past the shorter's
-- end when it is the other's beginning).
local function first_difference(a, b)
  local i, n = 1, math.min(#a, #b)
  while i + 63 <= n and a:sub(i, i + 63) == b:sub(i, i + 63) do
    i = i + 64
  end
  while i <= n and a:byte(i) == b:byte(i) do
    i = i + 1
  end
  return i
end

local function continuation(s, i)
  local c = s:byte(i)
  return c ~= nil and c >= 0x80 and c < 0xC0
end

-- v quoted, at most about 60 bytes of it: from 20 bytes before byte `from`
-- (where it differs from the other side) when given, cut between characters.
local function shown(v, from)
  if v == nil then
    return "nothing"
  end
  local s = type(v) == "string" and v or json.encode(v) or tostring(v)
  local i = 1
  if from and from > 21 then
    i = from - 20
    while i > 1 and continuation(s, i) do
      i = i - 1
    end
  end
  local j = i + 56
  if #s - i + 1 <= 60 then
    j = #s
  end
  while j > i and continuation(s, j + 1) do
    j = j - 1
  end
  local out = (i > 1 and "..." or "") .. s:sub(i, j) .. (j < #s and "..." or "")
  return (format("%q", out):gsub("\\\n", "\\n"))
end

local Replayer = {}
Replayer.__index = Replayer

--- An LLM that answers from a recording, in order: request n gets the
-- reply (or failure) recorded for request n, if the requests are equal.
-- @tparam string path a file written through `record`
-- @return an llm | nil, msg, "io" | nil, msg, "format" (a line that is not
--   a recorded exchange)
function M.replay(path)
  local fname = "rag.llm.replay"
  if type(path) ~= "string" then
    error(fname .. ": path must be a string, got " .. type(path), 2)
  end
  local f, err = io.open(path, "rb")
  if not f then
    return nil, fname .. ": " .. tostring(err), "io"
  end
  local data, rerr = f:read("*a")
  f:close()
  if not data then
    return nil, format("%s: '%s': %s", fname, path, tostring(rerr)), "io"
  end
  local entries, n = {}, 0
  for line in data:gmatch("[^\n]+") do
    n = n + 1
    local e = json.decode(line)
    if type(e) ~= "table" or type(e.request) ~= "table"
        or (type(e.reply) ~= "table" and type(e.error) ~= "table") then
      return nil, format("%s: '%s': line %d is not a recorded exchange", fname, path, n),
        "format"
    end
    entries[n] = e
  end
  -- function calling when the recorded requests offered tools
  local tools = false
  for _, e in ipairs(entries) do
    tools = tools or type(e.request.opts) == "table" and e.request.opts.tools ~= nil
  end
  return setmetatable({ path = path, entries = entries, n = 0, supports_tools = tools },
    Replayer)
end

--- The recorded reply to the next request.
-- @return the recorded reply | the recorded nil, msg, code | nil, msg,
--   "provider" when the request differs from the recorded one or the
--   recording has no more
function Replayer:chat(messages, opts)
  local fname = "rag.llm.replay"
  as_messages(fname .. ".chat", messages)
  self.n = self.n + 1
  local e = self.entries[self.n]
  if not e then
    return nil, format("%s: request %d, but '%s' records %d", fname, self.n, self.path,
      #self.entries), "provider"
  end
  local live = request_of(messages, opts)
  local where = differ(live, e.request, "")
  if where then
    local function at(t)
      for part in where:gmatch("[^%.%[%]]+") do
        if type(t) ~= "table" then
          return nil
        end
        t = t[tonumber(part) or part]
      end
      return t
    end
    local a, b = at(live), at(e.request)
    local from = type(a) == "string" and type(b) == "string" and first_difference(a, b) or nil
    return nil, format("%s: request %d differs from '%s' at %s%s: %s, recorded %s", fname,
      self.n, self.path, where, from and format(" (byte %d)", from) or "", shown(a, from),
      shown(b, from)), "provider"
  end
  if e.error then
    return nil, e.error.message, e.error.code
  end
  local stream = opts and opts.stream
  if type(stream) == "function" and type(e.reply.text) == "string" and e.reply.text ~= "" then
    stream(e.reply.text)
  end
  return e.reply
end

return M
