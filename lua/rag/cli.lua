--- rag.cli: the `rag` command. bin/rag is a launcher that calls `main`.
-- Exit status: 0 ok, 1 the world failed (a missing file, invalid input),
-- 2 usage (an unknown command or option, a missing or extra argument);
-- every error is one line on standard error.
-- @module rag.cli
local rag = require("rag")

local M = {}

local USAGE = [[
usage: rag <command> [args]

commands:
  version            print the version of rag and of Lua
  hash [FILE]        SHA-256 of FILE (or standard input), as hex
  json [FILE]        check that FILE (or standard input) is valid JSON and
                     print it back in canonical form (sorted keys)
  tokens [-e ENC] [FILE]
                     count the tokens of FILE (or standard input); ENC is
                     cl100k_base (default), o200k_base or approx
  sentences [FILE]   print one sentence per line: start, stop, text
  help               show this message

FILE "-" is standard input. Options: -h, --help (also after a command).
Exit status: 0 ok, 1 a failure (missing file, invalid input), 2 usage.
]]

-- What stops a command: a table, so that main can tell it from a bug.
local Stop = {}

local function stop(status, msg)
  error(setmetatable({ status = status, msg = msg }, Stop), 0)
end

-- {====== Commands ======}

local ENCODINGS = { cl100k_base = true, o200k_base = true, approx = true }

-- The value of a call that returns value | nil, msg, code; stops with status 1 on failure.
local function must(value, msg)
  if value == nil and msg then
    stop(1, msg)
  end
  return value
end

local function read_input(path)
  local f, err
  if path == nil or path == "-" then
    f = io.stdin
  else
    f, err = io.open(path, "rb")
    if not f then -- "path: Reason"
      local why = tostring(err)
      if why:sub(1, #path + 2) == path .. ": " then
        why = why:sub(#path + 3)
      end
      stop(1, "'" .. path .. "': " .. why:sub(1, 1):lower() .. why:sub(2))
    end
  end
  local data, rerr = f:read("*a")
  if f ~= io.stdin then
    f:close()
  end
  if not data then -- a directory opens, then fails to read
    local why = tostring(rerr)
    stop(1, "'" .. (path or "-") .. "': " .. why:sub(1, 1):lower() .. why:sub(2))
  end
  return data
end

-- Each command: its synopsis, its options (name -> key, and whether it takes
-- a value), the most positional arguments it takes, and what it does.
local COMMANDS = {
  version = {
    synopsis = "rag version",
    run = function()
      print(("rag %s (%s)"):format(rag._VERSION, _VERSION))
    end,
  },
  hash = {
    synopsis = "rag hash [FILE]",
    nargs = 1,
    run = function(_, args)
      print(rag.text.hash(read_input(args[1])))
    end,
  },
  json = {
    synopsis = "rag json [FILE]",
    nargs = 1,
    run = function(_, args)
      print(rag.json.encode(must(rag.json.decode(read_input(args[1])))))
    end,
  },
  tokens = {
    synopsis = "rag tokens [-e ENC] [FILE]",
    options = { e = "encoding", encoding = "encoding" },
    nargs = 1,
    check = function(opts)
      local enc = opts.encoding
      if enc and not ENCODINGS[enc] then
        return "unknown encoding '" .. enc .. "', expected cl100k_base, o200k_base or approx"
      end
    end,
    run = function(opts, args)
      local enc = opts.encoding or "cl100k_base"
      local tok = enc == "approx" and rag.tokenizer.approx() or must(rag.tokenizer.get(enc))
      print(must(tok:count(read_input(args[1]))))
    end,
  },
  sentences = {
    synopsis = "rag sentences [FILE]",
    nargs = 1,
    run = function(_, args)
      local list = must(rag.text.sentences(read_input(args[1])))
      for _, s in ipairs(list) do
        print(("%d\t%d\t%s"):format(s.start, s.stop, (s.text:gsub("%s+", " "))))
      end
    end,
  },
  help = {
    synopsis = "rag help",
    run = function()
      io.stdout:write(USAGE)
    end,
  },
}

-- {====== Arguments ======}

-- Splits args[from..] into options and positional arguments by the
-- command's table; a usage error stops with status 2.
local function parse(cmd, args, from)
  local function usage(msg)
    stop(2, msg .. " (usage: " .. cmd.synopsis .. ")")
  end
  local opts, pos, i = {}, {}, from
  local known = cmd.options or {}
  while i <= #args do
    local a = args[i]
    if a == "--" then
      for j = i + 1, #args do
        pos[#pos + 1] = args[j]
      end
      break
    elseif a == "-h" or a == "--help" then
      opts.help = true
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      local name, value = a:match("^%-%-([^=]+)=(.*)$")
      name = name or a:match("^%-%-(.+)$") or a:match("^%-(.)$")
      local key = name and known[name]
      if not key then
        usage("unknown option '" .. a .. "'")
      end
      if value == nil then
        i = i + 1
        value = args[i]
        if value == nil then
          usage("option '" .. a .. "' needs a value")
        end
      end
      opts[key] = value
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  if opts.help then
    return opts, pos
  end
  if #pos > (cmd.nargs or 0) then
    usage("unexpected argument '" .. pos[(cmd.nargs or 0) + 1] .. "'")
  end
  local bad = cmd.check and cmd.check(opts)
  if bad then
    usage(bad)
  end
  return opts, pos
end

-- Runs args; a Stop raised inside a command is stamped with its name.
local function run(args)
  local name = args[1]
  if name == nil then
    stop(2, "no command (try 'rag --help')")
  elseif name == "-h" or name == "--help" then
    io.stdout:write(USAGE)
    return
  elseif name:sub(1, 1) == "-" then
    stop(2, "unknown option '" .. name .. "' (try 'rag --help')")
  end
  local cmd = COMMANDS[name]
  if not cmd then
    stop(2, "unknown command '" .. name .. "' (try 'rag --help')")
  end
  local ok, e = pcall(function()
    local opts, pos = parse(cmd, args, 2)
    if opts.help then
      print("usage: " .. cmd.synopsis)
    else
      cmd.run(opts, pos)
    end
  end)
  if not ok then
    if getmetatable(e) == Stop then
      e.cmd = name
    end
    error(e, 0)
  end
end

--- Runs the command line `args` (as the global `arg`: `args[1]` is the
-- command) and returns the exit status: 0 ok, 1 the world failed, 2 usage.
-- Output goes to standard output; an error is one line on standard error.
-- @tparam table args the arguments
-- @treturn integer the exit status
-- @raise when `args` is not a table, or on a bug (not a usage error or a
--   failure of the world)
function M.main(args)
  if type(args) ~= "table" then
    error("rag.cli.main: args must be a table, got " .. type(args), 2)
  end
  local list = {}
  for i = 1, #args do
    list[i] = tostring(args[i])
  end
  local ok, e = pcall(run, list)
  if ok then
    return 0
  end
  if getmetatable(e) ~= Stop then
    error(e, 0)
  end
  io.stderr:write("rag", e.cmd and " " .. e.cmd or "", ": ", e.msg, "\n")
  return e.status
end

return M
