--- rag.load._util: what the loaders share: reading a file whole, the UTF-8
-- check, document options, shell quoting and the "starts" lists that keep
-- offsets in a document's meta (rag.index's meta holds lists of strings only).
-- @module rag.load._util
local core = require("rag.core")
local errors = require("rag.errors")
local opts = require("rag.opts")

local open, type, tostring = io.open, type, tostring
local valid = core.text.valid

local M = {}

--- The bytes of a file | nil, msg, "io".
function M.read(fname, path)
  local f, err = open(path, "rb")
  if not f then
    return errors.fail("io", "%s: %s", fname, (err or path):lower())
  end
  local s = f:read("*a")
  f:close()
  if s == nil then
    return errors.fail("io", "%s: '%s': cannot read", fname, path)
  end
  return s
end

--- s | nil, msg, "encoding" when s is not UTF-8 (`what` names it in the message).
function M.utf8(fname, what, s)
  local ok, pos = valid(s)
  if ok then
    return s
  end
  return errors.fail("encoding", "%s: %s: invalid utf-8 at byte %d", fname, what, pos)
end

--- Reads a file and checks that it is UTF-8 (a byte order mark is dropped).
function M.read_text(fname, path)
  local s, msg, code = M.read(fname, path)
  if not s then
    return nil, msg, code
  end
  if s:sub(1, 3) == "\239\187\191" then
    s = s:sub(4)
  end
  return M.utf8(fname, "'" .. path .. "'", s)
end

-- The options every single-document loader takes.
M.DOC = {
  id = { "string" },
  source = { "string" },
  title = { "string" },
  meta = { "table" },
}

--- Checks `o` against M.DOC plus `extra`; raises at the caller's caller.
function M.check(fname, o, extra, level)
  local schema = {}
  for k, v in pairs(M.DOC) do
    schema[k] = v
  end
  for k, v in pairs(extra or {}) do
    schema[k] = v
  end
  return opts.check(fname, o, schema, (level or 1) + 1)
end

--- A document from the checked options: id defaults to source, then `def`.
function M.doc(o, text, def)
  local meta = {}
  for k, v in pairs(o.meta or {}) do
    meta[k] = v
  end
  local id = o.id or o.source or def
  return { id = id, text = text, source = o.source or id, title = o.title, meta = meta }
end

--- A string quoted for the POSIX shell, never read as an option.
function M.shell_quote(s)
  if s:sub(1, 1) == "-" then
    s = "./" .. s
  end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- s without trailing white space (a loop: "%s+$" is quadratic on long runs).
function M.trim_end(s)
  local i = #s
  local byte = string.byte
  while i > 0 do
    local c = byte(s, i)
    if c ~= 32 and (c < 9 or c > 13) then
      break
    end
    i = i - 1
  end
  return s:sub(1, i)
end

--- Integers as the list of strings meta can hold.
function M.numbers(list)
  local out = {}
  for i = 1, #list do
    out[i] = tostring(list[i])
  end
  return out
end

--- A field of a record as text: strings as they are, numbers with tostring,
-- anything else (nil, JSON null, tables) nil.
function M.field(v)
  local t = type(v)
  if t == "string" then
    return v
  elseif t == "number" then
    if v == math.floor(v) and v >= -2 ^ 53 and v <= 2 ^ 53 then
      return string.format("%d", v)
    end
    return tostring(v)
  end
  return nil
end

return M
