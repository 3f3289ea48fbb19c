--- rag.load.code: a source file as documents, one per top-level definition
-- (found by simple line rules: a definition starts at column 0), with the
-- comments and decorators just above it; languages without rules are cut
-- every `lines` lines. Each part's text is a slice of the source:
-- `s:sub(meta.start, meta.start + #doc.text - 1) == doc.text`.
-- @module rag.load.code
local util = require("rag.load._util")

local find, sub, match = string.find, string.sub, string.match

local M = {}

-- Per language: the patterns of a definition's first line, and of the
-- comment or decorator lines that belong to the definition below them.
local RULES = {
  lua = { defs = { "^function%s", "^local%s+function%s", "^[%w_.:]+%s*=%s*function" },
    attach = { "^%-%-" } },
  python = { defs = { "^def%s", "^async%s+def%s", "^class%s" }, attach = { "^#", "^@" } },
  c = { defs = { "^[%a_][%w_%s%*]*[%w_%*]%s*%**[%a_][%w_]*%s*%(.*[^;]%s*$", "^struct%s+[%w_]+%s*{",
    "^typedef%s+struct", "^enum%s", "^union%s" },
    attach = { "^/%*", "^%s%*", "^//" }, exclude = { "^else", "^return", "^if%s*%(" } },
  javascript = { defs = { "^function[%s%*]", "^async%s+function", "^export%s", "^class%s",
    "^const%s+[%w_$]+%s*=%s*%(", "^const%s+[%w_$]+%s*=%s*async", "^const%s+[%w_$]+%s*=%s*function",
    "^module%.exports" }, attach = { "^/%*", "^%s%*", "^//", "^@" } },
  go = { defs = { "^func%s", "^type%s", "^var%s*%(", "^const%s*%(" },
    attach = { "^//", "^/%*", "^%s%*" } },
  rust = { defs = { "^pub", "^fn%s", "^impl[%s<]", "^struct%s", "^enum%s", "^trait%s",
    "^mod%s", "^async%s+fn", "^unsafe%s", "^macro_rules!" },
    attach = { "^///", "^//", "^#%[", "^/%*", "^%s%*" } },
}
RULES.typescript = RULES.javascript

--- Languages by file extension (without the dot).
M.EXTENSIONS = {
  lua = "lua", py = "python", c = "c", h = "c", cc = "c", cpp = "c", cxx = "c", hpp = "c",
  js = "javascript", mjs = "javascript", cjs = "javascript", jsx = "javascript",
  ts = "typescript", tsx = "typescript", go = "go", rs = "rust",
  java = "other", rb = "other", sh = "other", php = "other", cs = "other", kt = "other",
  swift = "other", scala = "other", pl = "other", r = "other", sql = "other",
}

local function any(line, pats)
  for _, p in ipairs(pats or {}) do
    if find(line, p) then
      return true
    end
  end
  return false
end

-- The lines of s: starts (1-based offsets) and the lines without breaks.
local function lines_of(s)
  local starts, lines, pos, len = {}, {}, 1, #s
  while pos <= len do
    local stop = find(s, "\n", pos, true) or len
    starts[#starts + 1] = pos
    lines[#lines + 1] = match(sub(s, pos, stop), "^([^\r\n]*)")
    pos = stop + 1
  end
  return starts, lines
end

-- The first line of each part: definitions, moved up over attached lines.
local function cuts(lines, rule, every)
  local out = {}
  if not rule then
    for i = 1, #lines, every do
      out[#out + 1] = i
    end
    return out
  end
  local last = 0
  for i, line in ipairs(lines) do
    if any(line, rule.defs) and not any(line, rule.exclude) then
      local j = i
      while j - 1 > last and find(lines[j - 1], "%S") and any(lines[j - 1], rule.attach) do
        j = j - 1
      end
      if j > last then
        out[#out + 1] = j
        last = j
      end
    end
  end
  if out[1] ~= 1 then
    table.insert(out, 1, 1)
  end
  return out
end

--- The documents of source text `s`.
-- @tparam string s source code (UTF-8)
-- @tparam[opt] table o `id`, `source`, `title`, `meta`, `language` (see
--   M.EXTENSIONS; nil or "other": cut by lines), `lines` (default 100)
-- @return docs | nil, msg, "encoding"
function M.load(s, o)
  o = util.check("rag.load.code", o, { language = { "string" },
    lines = { "number", int = true, min = 1, default = 100 } }, 2)
  if type(s) ~= "string" then
    error("rag.load.code: text must be a string, got " .. type(s), 2)
  end
  local ok, msg, code = util.utf8("rag.load.code", "'" .. (o.source or o.id or "code") .. "'", s)
  if not ok then
    return nil, msg, code
  end
  local rule = RULES[o.language or ""]
  local starts, lines = lines_of(s)
  local parts = cuts(lines, rule, o.lines)
  local base = o.id or o.source or "code"
  local docs = {}
  for k, first in ipairs(parts) do
    local a = starts[first]
    local b = parts[k + 1] and starts[parts[k + 1]] - 1 or #s
    local text = sub(s, a, b)
    if find(text, "%S") then
      local d = util.doc(o, text, base)
      local head
      if rule and (k > 1 or any(lines[first], rule.defs)) then
        for i = first, (parts[k + 1] or #lines + 1) - 1 do
          if any(lines[i], rule.defs) then
            head = match(lines[i], "^%s*(.-)%s*{?%s*$")
            break
          end
        end
      end
      d.title = o.title or (head and base .. ": " .. head) or base
      d.meta.language = o.language or "other"
      d.meta.line = first
      d.meta.start = a
      if head then
        d.meta.symbol = head
      end
      docs[#docs + 1] = d
    end
  end
  if #docs == 1 then
    docs[1].id = base
  else
    for i, d in ipairs(docs) do
      d.id = base .. "#" .. i
    end
  end
  return docs
end

return M
