--- rag.eval: IR measures with trec_eval's definitions (computed in C), a
-- loader for BEIR benchmark folders, answer-level metrics judged by an LLM
-- (ragas.lua), seed 002's diagnosis (diagnose.lua) and paired significance
-- tests between two systems (compare.lua). See docs/evaluation.md.
-- @module rag.eval
local core = require("rag.core")

local json = core.json
local io_open, type, tostring, tonumber = io.open, type, tostring, tonumber

local M = {}

--- Means of IR measures over the queries of a run (see docs/api.md).
-- @function ir
-- @tparam table run `run[q]` = a hit list `{ {id=, score=}, ... }` or a list
--   of ids, best first (taken in the order given; scores are not read)
-- @tparam table qrels `qrels[q][doc]` = grade (a finite number)
-- @tparam table measures names such as `"ndcg@10"`, `"recall@100"`, `"p@5"`,
--   `"mrr"`, `"map"`, `"success@1"`
-- @tparam[opt] table opts `per_query` (boolean), `missing` (`"skip"` or
--   `"zero"`), `level` (least relevant grade, default 1)
-- @treturn table means keyed by measure name as given
-- @treturn[opt] table `per_query[q][name]`, when `opts.per_query`
-- @raise on a bad argument, an unknown measure or a bad cutoff
M.ir = core.eval.ir

--- RAGAS metrics of question-answer samples (rag.eval.ragas).
M.ragas = require("rag.eval.ragas").ragas

--- Causes and suggested changes from metric means (rag.eval.diagnose).
M.diagnose = require("rag.eval.diagnose").diagnose

--- Paired comparison of two systems' per-query scores (rag.eval.compare).
M.compare = require("rag.eval.compare").compare

local DEFAULT_SPLIT = "test"
local OPTS = { split = "string", corpus = "boolean" }

local function check_opts(opts)
  if opts == nil then
    return DEFAULT_SPLIT, true
  end
  if type(opts) ~= "table" then
    error("rag.eval.beir: opts must be a table, got " .. type(opts), 3)
  end
  for k, v in pairs(opts) do
    if OPTS[k] == nil then
      error("rag.eval.beir: unknown option '" .. tostring(k) .. "'", 3)
    end
    if type(v) ~= OPTS[k] then
      error("rag.eval.beir: " .. k .. " must be a " .. OPTS[k] .. ", got " .. type(v), 3)
    end
  end
  local split = opts.split or DEFAULT_SPLIT
  if split == "" or split:find("[/\\]") then
    error("rag.eval.beir: split must be a file name such as \"test\"", 3)
  end
  return split, opts.corpus ~= false
end

-- "path: No such file" (io.open's message) or "No such file" (a read's)
-- as "'path': no such file", lowercase as every message.
local function io_failure(path, err)
  local why = tostring(err)
  if why:sub(1, #path + 2) == path .. ": " then
    why = why:sub(#path + 3)
  end
  why = why:sub(1, 1):lower() .. why:sub(2)
  return nil, "rag.eval.beir: '" .. path .. "': " .. why, "io"
end

-- The lines of the file at path, fed to each(line, n); stops at the first
-- error each returns. Returns true or nil, msg, code. Reads with f:read, not
-- f:lines, whose iterator raises on a read error (a directory opens fine on
-- POSIX and fails only when read).
local function each_line(path, each)
  local f, err = io_open(path, "rb")
  if not f then
    return io_failure(path, err)
  end
  local n = 0
  while true do
    local line, rerr = f:read("*l")
    if line == nil then
      f:close()
      if rerr then
        return io_failure(path, rerr)
      end
      return true
    end
    n = n + 1
    line = line:gsub("\r$", "")
    if line:find("%S") then
      local msg = each(line, n)
      if msg then
        f:close()
        return nil, "rag.eval.beir: '" .. path .. "': line " .. n .. ": " .. msg, "decode"
      end
    end
  end
end

local function as_id(v)
  local t = type(v)
  if t == "string" or t == "number" then
    return tostring(v)
  end
  return nil
end

local function as_text(v)
  if v == nil or v == json.null then
    return ""
  end
  return type(v) == "string" and v or nil
end

-- Reads a JSON-lines file of records with "_id" and "text" (and "title").
local function read_jsonl(path, keep)
  local out = {}
  local ok, msg, code = each_line(path, function(line)
    local rec, err = json.decode(line)
    if rec == nil then
      return (err:gsub("^rag%.json%.decode: ", ""))
    end
    if type(rec) ~= "table" then
      return "expected a JSON object"
    end
    local id, text, title = as_id(rec._id), as_text(rec.text), as_text(rec.title)
    if id == nil or text == nil or title == nil then
      return "expected \"_id\" (a string or number) and \"text\" (a string)"
    end
    out[id] = keep(text, title)
  end)
  if not ok then
    return nil, msg, code
  end
  return out
end

-- Reads a qrels TSV: "query-id corpus-id score" per line, an optional header.
local function read_qrels(path)
  local qrels = {}
  local ok, msg, code = each_line(path, function(line, n)
    local q, d, s = line:match("^([^\t]+)\t([^\t]+)\t([^\t]+)$")
    local grade = s and tonumber(s)
    if n == 1 and q and not grade then
      return nil -- the header, "query-id corpus-id score"
    end
    if not grade or grade ~= grade or grade == math.huge or grade == -math.huge then
      return "expected query-id, corpus-id and a numeric score separated by tabs"
    end
    local t = qrels[q]
    if not t then
      t = {}
      qrels[q] = t
    end
    t[d] = grade
  end)
  if not ok then
    return nil, msg, code
  end
  return qrels
end

--- Loads a BEIR folder: `corpus.jsonl`, `queries.jsonl` and
-- `qrels/<split>.tsv`.
-- @tparam string dir the folder
-- @tparam[opt] table opts `split` (default `"test"`), `corpus` (default
--   true; false skips reading the corpus, which can be large)
-- @treturn table `{ corpus = { [id] = { title=, text= } }, queries = { [id] =
--   text }, qrels = { [q] = { [doc] = grade } } }`
-- @return nil, msg, code (`"io"` or `"decode"`) when a file cannot be read
--   or parsed
-- @raise on a bad argument
function M.beir(dir, opts)
  if type(dir) ~= "string" then
    error("rag.eval.beir: dir must be a string, got " .. type(dir), 2)
  end
  local split, with_corpus = check_opts(opts)
  dir = dir:gsub("/+$", "")
  local qrels, msg, code = read_qrels(dir .. "/qrels/" .. split .. ".tsv")
  if not qrels then
    return nil, msg, code
  end
  local queries
  queries, msg, code = read_jsonl(dir .. "/queries.jsonl", function(text)
    return text
  end)
  if not queries then
    return nil, msg, code
  end
  local corpus = {}
  if with_corpus then
    corpus, msg, code = read_jsonl(dir .. "/corpus.jsonl", function(text, title)
      return { title = title, text = text }
    end)
    if not corpus then
      return nil, msg, code
    end
  end
  return { corpus = corpus, queries = queries, qrels = qrels }
end

return M
