--- rag.tokenizer: exact tiktoken-compatible BPE (in C) and a fast estimate.
-- The cl100k_base and o200k_base vocabularies ship with the module (MIT,
-- from OpenAI's tiktoken; sha256 checked in the specs) in `rag/vocab/`
-- beside this file, which is where `luarocks make` installs them too.
-- @module rag.tokenizer
local core = require("rag.core")
local json = core.json

local M = {}

-- The pre-tokenization rules implemented in C, by encoding name.
local PATTERNS = { cl100k_base = true, o200k_base = true }

-- Their special tokens, as the vocabularies' meta files list them.
local SPECIALS = {
  cl100k_base = {
    ["<|endoftext|>"] = 100257,
    ["<|fim_prefix|>"] = 100258,
    ["<|fim_middle|>"] = 100259,
    ["<|fim_suffix|>"] = 100260,
    ["<|endofprompt|>"] = 100276,
  },
  o200k_base = { ["<|endoftext|>"] = 199999, ["<|endofprompt|>"] = 200018 },
}

local cache = {}

--- The directory the bundled vocabularies are read from: `rag/vocab/` next
-- to this module, unless the environment variable `RAG_VOCAB_DIR` is set.
-- @function vocab_dir
-- @treturn string a directory path, with no trailing slash
function M.vocab_dir()
  local env = os.getenv("RAG_VOCAB_DIR")
  if env and env ~= "" then
    return (env:gsub("/+$", ""))
  end
  local src = debug.getinfo(1, "S").source
  local dir = src:sub(1, 1) == "@" and src:sub(2):match("^(.*)[/\\]") or "."
  return dir .. "/vocab"
end

-- "'path': reason", lowercase as every message, from io.open's "path:
-- Reason" or a read's "Reason".
local function io_failure(fname, path, err)
  local why = tostring(err)
  if why:sub(1, #path + 2) == path .. ": " then
    why = why:sub(#path + 3)
  end
  return nil, fname .. ": '" .. path .. "': " .. why:sub(1, 1):lower() .. why:sub(2), "io"
end

local function read_file(path, fname)
  local f, err = io.open(path, "rb")
  if not f then
    return io_failure(fname, path, err)
  end
  local data, rerr = f:read("*a")
  f:close()
  if not data then -- a directory opens, then fails to read
    return io_failure(fname, path, rerr)
  end
  return data
end

local function check_name(name, fname)
  if type(name) ~= "string" then
    error(fname .. ": encoding name must be a string", 3)
  end
  if not PATTERNS[name] then
    error(fname .. ": unknown encoding '" .. name .. "' (cl100k_base or o200k_base)", 3)
  end
end

--- Loads a vocabulary in tiktoken's format ("base64 rank" per line) and
-- tokenizes with the pre-tokenization rules and special tokens of the
-- encoding `name`.
-- @function load
-- @tparam string path a .tiktoken file
-- @tparam string name "cl100k_base" or "o200k_base": which split rules apply
-- @tparam[opt] table opts `special_tokens` = `{ [text] = id }` (default:
--   the encoding's own); `name` = the name `info()` reports (default `name`);
--   `cache` = how many short pieces (up to 16 bytes) the tokenizer keeps the
--   tokens of, an integer from 0 (none) to 1048576, default 65536 (2 MB)
-- @treturn userdata a tokenizer with `encode`, `decode`, `count`, `info`, `close`
-- @return nil, msg, "io" when the file cannot be read, or "format" when it
--   is not a vocabulary
-- @raise on a bad argument or an unknown encoding name
function M.load(path, name, opts)
  if type(path) ~= "string" then
    error("rag.tokenizer.load: path must be a string", 2)
  end
  check_name(name, "rag.tokenizer.load")
  if opts ~= nil and type(opts) ~= "table" then
    error("rag.tokenizer.load: opts must be a table", 2)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "special_tokens" and k ~= "name" and k ~= "cache" then
      error("rag.tokenizer.load: unknown option '" .. tostring(k) .. "'", 2)
    end
  end
  if opts.special_tokens ~= nil and type(opts.special_tokens) ~= "table" then
    error("rag.tokenizer.load: special_tokens must be a table { [text] = id }", 2)
  end
  if opts.name ~= nil and type(opts.name) ~= "string" then
    error("rag.tokenizer.load: name must be a string", 2)
  end
  local size = opts.cache
  if size ~= nil and (type(size) ~= "number" or size ~= math.floor(size) or size < 0
      or size > 1048576) then
    error("rag.tokenizer.load: cache must be an integer from 0 to 1048576", 2)
  end
  return core.tokenizer.load(path, name, opts.special_tokens or SPECIALS[name], opts.name or name,
    size)
end

--- The bundled tokenizer for an encoding, loaded once per process and
-- shared (it is immutable; do not close it).
-- @function get
-- @tparam string name "cl100k_base" (GPT-3.5, GPT-4, text-embedding-3) or
--   "o200k_base" (GPT-4o, o1, o3)
-- @treturn userdata the tokenizer
-- @return nil, msg, "io" or "format" when the bundled file is missing or bad
-- @raise on an unknown name
function M.get(name)
  check_name(name, "rag.tokenizer.get")
  local tok = cache[name]
  if tok and pcall(tok.info, tok) then -- reloaded if someone closed it
    return tok
  end
  local path = M.vocab_dir() .. "/" .. name .. ".tiktoken"
  local err, code
  tok, err, code = M.load(path, name)
  if not tok then
    return nil, "rag.tokenizer.get" .. err:sub(#"rag.tokenizer.load" + 1), code
  end
  cache[name] = tok
  return tok
end

--- A fast estimate of cl100k_base counts, without a vocabulary (C, one
-- pass, no allocation for `count`). Its "tokens" are pseudo-tokens: byte
-- strings cut from the input, so `approx:encode(s)` returns strings,
-- `approx:decode(pieces)` concatenates them, `decode(encode(s)) == s` and
-- `#approx:encode(s) == approx:count(s)`. Error against exact cl100k counts
-- is stated in docs/api.md and measured by bench/tokenizer.lua.
-- @function approx
-- @treturn userdata the estimator, with `count`, `encode`, `decode`, `info`
function M.approx()
  return core.tokenizer.approx()
end

--- The special tokens of the bundled encoding `name`, read from its meta
-- file (the regex there is documentation: the rules are implemented in C).
-- @function meta
-- @tparam string name "cl100k_base" or "o200k_base"
-- @treturn table `{ pat_str =, special_tokens = { [text] = id } }`
-- @return nil, msg, "io" when the file is missing, or "format" when it is
--   not JSON
function M.meta(name)
  check_name(name, "rag.tokenizer.meta")
  local path = M.vocab_dir() .. "/" .. name .. ".meta.json"
  local data, err, code = read_file(path, "rag.tokenizer.meta")
  if not data then
    return nil, err, code
  end
  local meta, jerr = json.decode(data)
  if meta == nil then
    return nil, "rag.tokenizer.meta: '" .. path .. "': " .. tostring(jerr), "format"
  end
  return meta
end

return M
