--- rag.load.jsonl: a JSON lines file, one document per object line.
-- @module rag.load.jsonl
local core = require("rag.core")
local errors = require("rag.errors")
local records = require("rag.load._records")
local util = require("rag.load._util")

local decode = core.json.decode
local find, sub = string.find, string.sub

local M = {}

--- Parses JSON lines text `s` (from `path`) into documents.
function M.parse(fname, s, path, o)
  local docs, pos, n, len = {}, 1, 0, #s
  local base = o.base or path
  while pos <= len do
    local stop = find(s, "\n", pos, true) or len + 1
    local line = sub(s, pos, stop - 1)
    n = n + 1
    if find(line, "%S") then
      local row, msg = decode(line)
      if type(row) ~= "table" or not find(line, "^%s*{") then
        return errors.fail("format", "%s: '%s': line %d: %s", fname, path, n,
          row == nil and tostring(msg) or "not an object")
      end
      docs[#docs + 1] = records.doc(row, n, o, base, path)
    end
    pos = stop + 1
  end
  return docs
end

--- One document per line of a JSON lines file.
-- @tparam string path the file
-- @tparam[opt] table o `text` (field or list of fields, default "text"),
--   `id` (default "id"), `title` (default "title"), `meta` (fields copied)
-- @return docs | nil, msg, code ("io", "encoding", "format")
function M.load(path, o)
  o = records.check("rag.load.jsonl", o, { base = { "string" } }, 2)
  if type(path) ~= "string" then
    error("rag.load.jsonl: path must be a string, got " .. type(path), 2)
  end
  local s, msg, code = util.read_text("rag.load.jsonl", path)
  if not s then
    return nil, msg, code
  end
  return M.parse("rag.load.jsonl", s, path, o)
end

return M
