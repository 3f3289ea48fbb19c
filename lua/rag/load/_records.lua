--- rag.load._records: rows (JSON lines, CSV, SQLite) to documents, one per
-- row, with the fields named by the options.
-- @module rag.load._records
local opts = require("rag.opts")
local util = require("rag.load._util")

local type, concat = type, table.concat
local field = util.field

local M = {}

-- The options of every record loader: which fields hold what.
M.SCHEMA = {
  text = { "string|table", default = "text" },
  id = { "string", default = "id" },
  title = { "string", default = "title" },
  meta = { "table" },
}

--- Checks the options; `text` may be a field or a list of fields.
function M.check(fname, o, extra, level)
  local schema = {}
  for k, v in pairs(M.SCHEMA) do
    schema[k] = v
  end
  for k, v in pairs(extra or {}) do
    schema[k] = v
  end
  o = opts.check(fname, o, schema, (level or 1) + 1)
  if type(o.text) == "table" then
    opts.strings(fname, "'text'", o.text, (level or 1) + 1)
  end
  if o.meta then
    opts.strings(fname, "'meta'", o.meta, (level or 1) + 1)
  end
  return o
end

local function text_of(row, spec)
  if type(spec) == "string" then
    return field(row[spec])
  end
  local parts = {}
  for _, k in ipairs(spec) do
    local v = field(row[k])
    if v and v ~= "" then
      parts[#parts + 1] = v
    end
  end
  return #parts > 0 and concat(parts, "\n\n") or nil
end

--- The document of row number n | nil when the row has no text.
-- `base` is the id prefix of rows without an id, `source` the file.
function M.doc(row, n, o, base, source)
  local text = text_of(row, o.text)
  if not text or text == "" then
    return nil
  end
  local id = field(row[o.id])
  if not id or id == "" then
    id = base .. "#" .. n
  end
  local title = field(row[o.title])
  local meta = { row = n }
  for _, k in ipairs(o.meta or {}) do
    local v = row[k]
    local t = type(v)
    if t == "string" or t == "number" or t == "boolean" then
      meta[k] = v
    end
  end
  return { id = id, text = text, source = source, title = title ~= "" and title or nil,
    meta = meta }
end

return M
