--- rag.load.csv: a CSV file (RFC 4180: a header row, fields quoted with
-- '"', '""' for a quote inside, line breaks inside quoted fields), one
-- document per row.
-- @module rag.load.csv
local errors = require("rag.errors")
local records = require("rag.load._records")
local util = require("rag.load._util")

local find, sub, gsub, byte = string.find, string.sub, string.gsub, string.byte

local M = {}

--- The rows of CSV text: a list of lists of fields | nil, why.
function M.rows(s, sep)
  local rows, row, pos, len = {}, {}, 1, #s
  local sepb = byte(sep)
  local specials = "[" .. (sep == "%" and "%%" or "%" .. sep) .. "\r\n\"]"
  if len == 0 then
    return rows
  end
  while true do
    local c = byte(s, pos)
    local value
    if c == 34 then -- a quoted field
      local i, parts = pos + 1, {}
      while true do
        local q = find(s, '"', i, true)
        if not q then
          return nil, "row " .. (#rows + 1) .. ": unterminated quoted field"
        end
        parts[#parts + 1] = sub(s, i, q - 1)
        if byte(s, q + 1) == 34 then
          parts[#parts + 1] = '"'
          i = q + 2
        else
          pos = q + 1
          break
        end
      end
      value = table.concat(parts)
      c = byte(s, pos)
      if c and c ~= sepb and c ~= 10 and c ~= 13 then
        return nil, "row " .. (#rows + 1) .. ": text after a closing quote"
      end
    else
      local e = find(s, specials, pos) or len + 1
      if byte(s, e) == 34 then
        e = find(s, "[" .. (sep == "%" and "%%" or "%" .. sep) .. "\r\n]", e) or len + 1
      end
      value = sub(s, pos, e - 1)
      pos = e
      c = byte(s, pos)
    end
    row[#row + 1] = value
    if c == sepb then
      pos = pos + 1
    else -- end of a record: \r\n, \n, \r or the end
      rows[#rows + 1] = row
      row = {}
      if c == 13 and byte(s, pos + 1) == 10 then
        pos = pos + 2
      else
        pos = pos + 1
      end
      if pos > len then
        break
      end
    end
  end
  return rows
end

--- One document per data row of a CSV file with a header row.
-- @tparam string path the file
-- @tparam[opt] table o `text` (column or list of columns, default "text"),
--   `id` (default "id"), `title` (default "title"), `meta` (columns copied),
--   `sep` (default ",")
-- @return docs | nil, msg, code ("io", "encoding", "format")
function M.load(path, o)
  o = records.check("rag.load.csv", o, { sep = { "string", default = "," },
    base = { "string" } }, 2)
  if type(path) ~= "string" then
    error("rag.load.csv: path must be a string, got " .. type(path), 2)
  end
  if #o.sep ~= 1 or find(o.sep, "[\r\n\"]") then
    error("rag.load.csv: 'sep' must be one character other than a quote or line break", 2)
  end
  local s, msg, code = util.read_text("rag.load.csv", path)
  if not s then
    return nil, msg, code
  end
  local rows, why = M.rows(s, o.sep)
  if not rows then
    return errors.fail("format", "rag.load.csv: '%s': %s", path, why)
  end
  local header, docs = rows[1] or {}, {}
  for i = 2, #rows do
    local r = rows[i]
    if not (#r == 1 and r[1] == "") then -- a blank line
      local row = {}
      for j, name in ipairs(header) do
        row[gsub(name, "^%s*(.-)%s*$", "%1")] = r[j]
      end
      docs[#docs + 1] = records.doc(row, i - 1, o, o.base or path, path)
    end
  end
  return docs
end

return M
