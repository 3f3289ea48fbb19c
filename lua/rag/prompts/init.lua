--- rag.prompts: the pipelines' prompts as data, in English and Chinese.
-- A prompt is `{ system =, user = }`, two templates whose `{slot}`
-- placeholders `render` fills; `get(lang, overrides)` returns a set with any
-- prompt replaced. Every `{name}` of lowercase letters, digits and `_` in a
-- template is a slot; any other text, braces included, is literal.
-- @module rag.prompts
local json = require("rag.core").json

local M = {}

local type, pairs, ipairs, tostring, error = type, pairs, ipairs, tostring, error
local format, concat = string.format, table.concat

--- The built-in sets, by language (read them; `get` returns copies).
M.en = require("rag.prompts.en")
M.zh = require("rag.prompts.zh")

local LANGS = { en = M.en, zh = M.zh }

--- The slots each prompt is rendered with, by prompt name. `refusal` comes
-- from the set unless given.
M.slots = {
  answer = { "question", "context", "refusal" },
  answer_strict = { "question", "context", "refusal" },
  direct = { "question", "refusal" },
  rewrite = { "question" },
  multi_query = { "question", "n" },
  hyde = { "question" },
  stepback = { "question" },
  decompose = { "question", "n" },
  grade = { "question", "document" },
  check = { "context", "answer" },
  compress = { "question", "document" },
  classify = { "question" },
  condense = { "history", "question" },
  agent = { "tools", "tool_names", "question", "scratchpad", "refusal" },
  agent_tools = { "question", "refusal" },
  agent_retry = { "error", "tool_names" },
  graph_extract = { "text" },
  enrich_keywords = { "text", "n" },
  enrich_summary = { "text" },
  enrich_questions = { "text", "n" },
  enrich_title = { "text" },
  enrich_doc_summary = { "text" },
  graph_community = { "entities", "relations" },
  eval_statements = { "question", "text" },
  eval_support = { "context", "statements" },
  eval_questions = { "answer", "n" },
  eval_context = { "question", "reference", "context" },
  eval_correctness = { "question", "answer", "truth" },
}

local SLOT = "{([%l_][%l%d_]*)}"

-- Templates cut at their slots: { literal, name, literal, ..., literal },
-- by template; emptied when it holds MAX_PARSED (templates are few).
local parsed, nparsed, MAX_PARSED = {}, 0, 256

local function parts_of(template)
  local p = parsed[template]
  if p then
    return p
  end
  p = {}
  local pos = 1
  for s, name, e in template:gmatch("()" .. SLOT .. "()") do
    p[#p + 1] = template:sub(pos, s - 1)
    p[#p + 1] = name
    pos = e
  end
  p[#p + 1] = template:sub(pos)
  if nparsed >= MAX_PARSED then
    parsed, nparsed = {}, 0
  end
  parsed[template], nparsed = p, nparsed + 1
  return p
end

-- The template with its slots filled; errors blame the caller of the
-- public function that called this one.
local function fill(fname, template, slots)
  local p = parts_of(template)
  local out = { p[1] }
  for i = 2, #p, 2 do
    local name = p[i]
    local v = slots[name]
    local t = type(v)
    if v == nil then
      error(format("%s: no value for slot '%s'", fname, name), 3)
    elseif t ~= "string" and t ~= "number" then
      error(format("%s: slot '%s' must be a string or number, got %s", fname, name, t), 3)
    end
    out[i], out[i + 1] = tostring(v), p[i + 1]
  end
  return concat(out)
end

--- Fills a template's `{slot}` placeholders.
-- @tparam string template text with `{name}` slots
-- @tparam table slots `{ name = string|number }`; extra entries are ignored
-- @treturn string
-- @raise when a slot has no value, or a value is not a string or number
function M.render(template, slots)
  if type(template) ~= "string" then
    error("rag.prompts.render: template must be a string, got " .. type(template), 2)
  end
  if type(slots) ~= "table" then
    error("rag.prompts.render: slots must be a table, got " .. type(slots), 2)
  end
  return fill("rag.prompts.render", template, slots)
end

-- Raises unless `p` is a prompt whose slots are those of `name`.
local function check_prompt(fname, name, p, level)
  if type(p) ~= "table" or type(p.user) ~= "string"
      or (p.system ~= nil and type(p.system) ~= "string") then
    error(format("%s: prompt '%s' must be { system = string|nil, user = string }", fname, name),
      level + 1)
  end
  for k in pairs(p) do
    if k ~= "system" and k ~= "user" then
      error(format("%s: prompt '%s' has an unknown field '%s'", fname, name, tostring(k)),
        level + 1)
    end
  end
  local known = {}
  for _, s in ipairs(M.slots[name]) do
    known[s] = true
  end
  for _, field in ipairs({ "system", "user" }) do
    for slot in (p[field] or ""):gmatch(SLOT) do
      if not known[slot] then
        error(format("%s: prompt '%s' uses slot '{%s}', which it does not get (%s)", fname,
          name, slot, table.concat(M.slots[name], ", ")), level + 1)
      end
    end
  end
end

--- A prompt set: the built-in prompts of `lang` with `overrides` applied.
-- @tparam[opt="en"] string lang "en" or "zh"
-- @tparam[opt] table overrides `{ [name] = { system =, user = } }` replacing
--   built-in prompts, and `refusal = string`
-- @treturn table a new set `{ lang =, refusal =, [name] = { system =, user = } }`
-- @raise on an unknown language or prompt name, or a prompt that is not a
--   table of templates or uses a slot its name does not get
function M.get(lang, overrides)
  local fname = "rag.prompts.get"
  lang = lang or "en"
  local base = LANGS[lang]
  if not base then
    error(format("%s: unknown language '%s' (en or zh)", fname, tostring(lang)), 2)
  end
  if overrides ~= nil and type(overrides) ~= "table" then
    error(fname .. ": overrides must be a table, got " .. type(overrides), 2)
  end
  local set = { lang = lang, refusal = base.refusal }
  for name in pairs(M.slots) do
    local p = base[name]
    set[name] = { system = p.system, user = p.user }
  end
  for name, p in pairs(overrides or {}) do
    if name == "refusal" then
      if type(p) ~= "string" or p == "" then
        error(fname .. ": 'refusal' must be a non-empty string", 2)
      end
      set.refusal = p
    elseif type(name) ~= "string" or not M.slots[name] then
      error(format("%s: unknown prompt '%s'", fname, tostring(name)), 2)
    else
      check_prompt(fname, name, p, 2)
      set[name] = { system = p.system, user = p.user }
    end
  end
  return set
end

--- The chat messages of one prompt of a set.
-- @tparam table set from `get`
-- @tparam string name a prompt name (a key of `slots`)
-- @tparam table slots its slot values; `refusal` defaults to the set's
-- @treturn table `{ { role = "system", content = }, { role = "user", content = } }`
--   (no system message when the prompt has none)
-- @raise on an unknown name or a missing slot
function M.messages(set, name, slots)
  if type(set) ~= "table" then
    error("rag.prompts.messages: set must be a table, got " .. type(set), 2)
  end
  local p = set[name]
  if not M.slots[name] or type(p) ~= "table" then
    error(format("rag.prompts.messages: unknown prompt '%s'", tostring(name)), 2)
  end
  if type(slots) ~= "table" then
    error("rag.prompts.messages: slots must be a table, got " .. type(slots), 2)
  end
  local fname = "rag.prompts.messages"
  local s = setmetatable({}, { __index = slots })
  if slots.refusal == nil then
    s.refusal = set.refusal
  end
  local out = {}
  if p.system and p.system ~= "" then
    out[1] = { role = "system", content = fill(fname, p.system, s) }
  end
  out[#out + 1] = { role = "user", content = fill(fname, p.user, s) }
  return out
end

--- A conversation as the `{history}` slot of `condense` shows it: one
-- line a turn, "role: content", with the content's line breaks as spaces.
-- @tparam table turns `{ { role =, content = }, ... }`
-- @treturn string
-- @raise when a turn is not a table with string `role` and `content`
function M.history(turns)
  if type(turns) ~= "table" then
    error("rag.prompts.history: turns must be a list, got " .. type(turns), 2)
  end
  local lines = {}
  for i, t in ipairs(turns) do
    if type(t) ~= "table" or type(t.role) ~= "string" or type(t.content) ~= "string" then
      error(format("rag.prompts.history: turns[%d] must be { role = string, content = string }",
        i), 2)
    end
    lines[i] = t.role .. ": " .. (t.content:gsub("%s*\n%s*", " "))
  end
  return table.concat(lines, "\n")
end

--- The JSON value in an LLM's reply: the whole text, or else the part
-- from its first `{` or `[` to the last `}` or `]` (a reply wrapped in a
-- Markdown code fence or in a sentence). Judges asked for JSON reply so.
-- @tparam string text
-- @return the decoded value | nil, msg, "decode"
function M.json(text)
  if type(text) ~= "string" then
    error("rag.prompts.json: text must be a string, got " .. type(text), 2)
  end
  local v = json.decode(text)
  if v ~= nil then
    return v
  end
  local i = text:find("[%[{]")
  local j = #text
  while j > 0 and not text:sub(j, j):find("[%]}]") do
    j = j - 1
  end
  local err
  if i and j > i then
    v, err = json.decode(text:sub(i, j))
    if v ~= nil then
      return v
    end
  end
  return nil, "rag.prompts.json: reply is not JSON"
    .. (err and (": " .. tostring(err):gsub("^rag%.json%.decode: ", "")) or ""), "decode"
end

--- The language to answer `text` in: "zh" when Han characters make up at
-- least a third of its letters (Han characters and ASCII letters), else "en".
-- @tparam string text
-- @treturn string "en" or "zh"
function M.detect(text)
  if type(text) ~= "string" then
    error("rag.prompts.detect: text must be a string, got " .. type(text), 2)
  end
  -- three-byte sequences led by E4..E9: U+4000..U+9FFF, nearly all Han
  local _, han = text:gsub("[\228-\233][\128-\191][\128-\191]", "")
  local _, ascii = text:gsub("%a", "")
  if han > 0 and 3 * han >= han + ascii then
    return "zh"
  end
  return "en"
end

return M
