--- rag.load.sqlite: the rows of a query on an SQLite database, one
-- document per row, through Debian's `sqlite3` command (-json, read-only).
-- @module rag.load.sqlite
local core = require("rag.core")
local errors = require("rag.errors")
local records = require("rag.load._records")
local util = require("rag.load._util")

local popen, remove, tmpname, open = io.popen, os.remove, os.tmpname, io.open
local match = string.match

local M = {}

local FNAME = "rag.load.sqlite"

local function quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- One document per row of `sql` run on the database at `dbpath`.
-- @tparam string dbpath the database file (opened read-only)
-- @tparam string sql one query
-- @tparam[opt] table o `text` (column or list, default "text"), `id`
--   (default "id"), `title` (default "title"), `meta` (columns copied)
-- @return docs | nil, msg, code ("io", "format", "encoding")
function M.load(dbpath, sql, o)
  o = records.check(FNAME, o, nil, 2)
  if type(dbpath) ~= "string" then
    error(FNAME .. ": dbpath must be a string, got " .. type(dbpath), 2)
  end
  if type(sql) ~= "string" then
    error(FNAME .. ": sql must be a string, got " .. type(sql), 2)
  end
  local f, ferr = open(dbpath, "rb")
  if not f then
    return errors.fail("io", "%s: %s", FNAME, (ferr or dbpath):lower())
  end
  f:close()
  local err = tmpname()
  local cmd = "sqlite3 -readonly -bail -json " .. util.shell_quote(dbpath) .. " "
    .. quote(sql) .. " </dev/null 2>" .. quote(err) .. "; printf '\\nRAGEXIT%d' $?"
  local p = popen(cmd, "r")
  local out = p and p:read("*a") or ""
  if p then
    p:close()
  end
  local ef = open(err, "rb")
  local why = ef and ef:read("*a") or ""
  if ef then
    ef:close()
  end
  remove(err)
  local body, status = match(out, "^(.-)\n?RAGEXIT(%d+)$")
  status = tonumber(status or 1)
  if status == 127 then
    return errors.fail("io", "%s: sqlite3 not found (Debian package sqlite3)", FNAME)
  elseif status ~= 0 then
    why = match(why, "^%s*([^\n]-)%s*$") or why
    return errors.fail("format", "%s: '%s': %s", FNAME, dbpath,
      why ~= "" and why:lower() or "sqlite3 exit " .. status)
  end
  local ok, msg, code = util.utf8(FNAME, "'" .. dbpath .. "'", body)
  if not ok then
    return nil, msg, code
  end
  if not body:find("%S") then
    return {}
  end
  local rows, jmsg = core.json.decode(body)
  if type(rows) ~= "table" then
    return errors.fail("format", "%s: '%s': sqlite3 output: %s", FNAME, dbpath, tostring(jmsg))
  end
  local docs = {}
  for i, row in ipairs(rows) do
    docs[#docs + 1] = records.doc(row, i, o, dbpath, dbpath)
  end
  return docs
end

return M
