--- rag.load.beir: a BEIR folder's corpus.jsonl as documents whose ids are
-- the BEIR `_id`s, so that rag.eval scores an index of them.
-- @module rag.load.beir
local jsonl = require("rag.load.jsonl")
local records = require("rag.load._records")
local util = require("rag.load._util")

local M = {}

--- Whether `dir` is a BEIR folder: corpus.jsonl beside qrels/.
function M.is_beir(dir)
  local f = io.open(dir .. "/corpus.jsonl", "rb")
  if not f then
    return false
  end
  f:close()
  local kind = select(1, require("rag.core").fs.stat(dir .. "/qrels"))
  return kind == "dir"
end

--- The documents of `dir`/corpus.jsonl: id `_id`, title `title`, text `text`.
-- @return docs | nil, msg, code
function M.load(dir)
  if type(dir) ~= "string" then
    error("rag.load.beir: dir must be a string, got " .. type(dir), 2)
  end
  local path = dir:gsub("/+$", "") .. "/corpus.jsonl"
  local s, msg, code = util.read_text("rag.load.beir", path)
  if not s then
    return nil, msg, code
  end
  local o = records.check("rag.load.beir", { id = "_id" })
  return jsonl.parse("rag.load.beir", s, path, o)
end

return M
