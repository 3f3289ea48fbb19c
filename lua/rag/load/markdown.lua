--- rag.load.markdown: a Markdown string as one document: YAML front matter
-- as meta, the first H1 (or the front matter's title) as title, the
-- headings (rag.chunk.markdown's, CommonMark's rules, in C) as sections
-- whose offsets map into the text.
-- @module rag.load.markdown
local util = require("rag.load._util")
local headings = require("rag.core").chunk.headings

local find, sub, match = string.find, string.sub, string.match
local tonumber = tonumber

local M = {}

local function scalar(v)
  v = match(v, "^%s*(.-)%s*$")
  local q = match(v, '^"(.*)"$') or match(v, "^'(.*)'$")
  if q then
    return q
  elseif v == "true" or v == "false" then
    return v == "true"
  elseif find(v, "^[-+]?%d+%.?%d*$") then
    return tonumber(v)
  end
  return v
end

local function flow_list(v)
  local inner = match(v, "^%s*%[(.*)%]%s*$")
  if not inner then
    return nil
  end
  local list = {}
  for item in (inner .. ","):gmatch("([^,]*),") do
    item = match(item, "^%s*(.-)%s*$")
    if item ~= "" then
      local s = scalar(item)
      list[#list + 1] = type(s) == "string" and s or tostring(s)
    end
  end
  return list
end

-- Parses the simple YAML of front matter: `key: scalar`, `key: [a, b]`
-- and `key:` followed by `- item` lines. Nested maps are skipped.
local function front_matter(block)
  local meta, list_key = {}, nil
  for line in (block .. "\n"):gmatch("(.-)\r?\n") do
    local item = match(line, "^%s+%-%s+(.*)$") or match(line, "^%-%s+(.*)$")
    local key, value = match(line, "^([%w_%-]+)%s*:%s*(.-)%s*$")
    if item and list_key then
      local s = scalar(item)
      local list = meta[list_key]
      list[#list + 1] = type(s) == "string" and s or tostring(s)
    elseif key then
      list_key = nil
      if value == "" then
        meta[key] = {}
        list_key = key
      elseif not find(value, "^[|>]") then
        meta[key] = flow_list(value) or scalar(value)
      end
    end
  end
  for k, v in pairs(meta) do
    if type(v) == "table" and #v == 0 then
      meta[k] = nil -- a nested map or an empty list: nothing meta can hold
    end
  end
  return meta
end

-- The body start (1-based) and the front matter's text, when the text opens with one.
local function split_front(s)
  local first = match(s, "^%-%-%-[ \t]*\r?\n")
  if not first then
    return 1, nil
  end
  local pos = #first + 1
  while pos <= #s do
    local stop = find(s, "\n", pos, true) or #s
    local line = sub(s, pos, stop)
    if find(line, "^%-%-%-[ \t]*\r?\n?$") or find(line, "^%.%.%.[ \t]*\r?\n?$") then
      return stop + 1, sub(s, #first + 1, pos - 1)
    end
    pos = stop + 1
  end
  return 1, nil
end

--- One document of the Markdown after its front matter.
-- @tparam string s Markdown (UTF-8)
-- @tparam[opt] table o `id`, `source`, `title`, `meta`
-- @return `{ doc }` | nil, msg, "encoding"
function M.load(s, o)
  o = util.check("rag.load.markdown", o, nil, 2)
  if type(s) ~= "string" then
    error("rag.load.markdown: text must be a string, got " .. type(s), 2)
  end
  local ok, msg, code = util.utf8("rag.load.markdown",
    "'" .. (o.source or o.id or "markdown") .. "'", s)
  if not ok then
    return nil, msg, code
  end
  local body_start, fm = split_front(s)
  local text = body_start > 1 and sub(s, body_start) or s
  local doc = util.doc(o, text, "markdown")
  if fm then
    for k, v in pairs(front_matter(fm)) do
      if k == "title" then
        doc.title = o.title or tostring(v)
      elseif doc.meta[k] == nil then
        doc.meta[k] = v
      end
    end
    doc.meta.text_start = body_start
  end
  local heads = headings(text)
  local titles, starts, levels = {}, {}, {}
  for i, h in ipairs(heads) do
    titles[i], starts[i], levels[i] = h.text, h.start, h.level
    if not doc.title and h.level == 1 and h.text ~= "" then
      doc.title = h.text
    end
  end
  if #heads > 0 then
    doc.meta.sections = titles
    doc.meta.section_starts = util.numbers(starts)
    doc.meta.section_levels = util.numbers(levels)
  end
  return { doc }
end

return M
