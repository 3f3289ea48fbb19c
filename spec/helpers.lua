-- Shared spec helpers: the loopback HTTP server and a wall clock.
local M = {}

local system = require("system") -- lua-system, a dependency of busted

--- Seconds from a monotonic clock.
function M.now()
  return system.monotime()
end

--- Starts spec/fixtures/httpd.py (or another server there, such as
-- "llmd.py") on 127.0.0.1; returns its base URL and a function that stops
-- it. Sanitizer preloads are not passed to python.
function M.start_httpd(script)
  local proc = assert(io.popen("exec env -u LD_PRELOAD python3 spec/fixtures/"
    .. (script or "httpd.py") .. " --lifetime 300", "r"))
  local line = assert(proc:read("*l"), "httpd did not start")
  local port, pid = line:match("^(%d+) (%d+)$")
  assert(port, "httpd said: " .. line)
  local function stop()
    os.execute("exec kill " .. pid .. " 2>/dev/null")
    proc:close()
  end
  return "http://127.0.0.1:" .. port, stop
end

local model_serial = 0

--- A model name for spec/fixtures/llmd.py that no other test uses:
-- `prefix` (which picks the server's behaviour) and a serial number.
function M.uniq_model(prefix)
  model_serial = model_serial + 1
  return prefix .. "m" .. model_serial .. "-" .. tostring(os.time())
end

--- The requests llmd.py at `base` saw for `model`, in order.
function M.llmd_log(base, model)
  local rag = require("rag")
  local res = assert(rag.http.request({ url = base .. "/_log?model=" .. model }))
  return rag.json.decode(res.body)
end

--- A loopback port on which nothing listens (bound, then released).
function M.free_port()
  local p = assert(io.popen("exec env -u LD_PRELOAD python3 -c " ..
    "'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); " ..
    "print(s.getsockname()[1])'"))
  local port = tonumber(p:read("*l"))
  p:close()
  return port
end

--- The whole file at path, as bytes (raises when it cannot be read).
function M.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

--- The shell words that run a Lua script with the interpreter running the
-- specs and this build's paths: `helpers.lua_command() .. " bin/rag version"`.
-- Sanitizer preloads are not passed on.
function M.lua_command()
  local lua = ({ ["Lua 5.1"] = "lua5.1", ["Lua 5.2"] = "lua5.2", ["Lua 5.3"] = "lua5.3",
    ["Lua 5.4"] = "lua5.4" })[_VERSION]
  if rawget(_G, "jit") then
    lua = "luajit"
  end
  local cpath = package.searchpath and package.searchpath("rag.core", package.cpath)
  if not cpath then -- Lua 5.1 has no package.searchpath
    for dir in package.cpath:gmatch("[^;]+") do
      local p = dir:gsub("%?", "rag/core")
      if M.exists(p) then
        cpath = p
        break
      end
    end
  end
  cpath = assert(cpath, "rag.core is not on package.cpath"):gsub("rag/core%.so$", "?.so")
  local env = "env -u LD_PRELOAD"
  for _, v in ipairs({ "", "_5_2", "_5_3", "_5_4" }) do
    env = env .. " LUA_PATH" .. v .. "='lua/?.lua;lua/?/init.lua;;' LUA_CPATH" .. v
      .. "='" .. cpath .. ";;'"
  end
  return env .. " " .. lua
end

--- In a fresh interpreter (lua_command), whether a shared library whose path
-- holds `lib` is mapped after the Lua chunk `load`, then after `use` too:
-- "false true" when `use` is what opens it. Raises when the child fails.
function M.maps_lib(lib, load, use)
  local script = "local function mapped() for l in io.lines('/proc/self/maps') do "
    .. "if l:find('" .. lib .. "', 1, true) then return true end end return false end "
    .. load .. " local before = mapped() " .. use
    .. " print(tostring(before) .. ' ' .. tostring(mapped()))"
  local out, err, status = M.spawn(M.lua_command() .. " -e \"" .. script .. "\"")
  assert(status == 0, err)
  return (out:gsub("\n$", ""))
end

--- Runs a shell command; returns its standard output, its standard error
-- and its exit status (io.popen's close does not report it on Lua 5.1).
function M.spawn(cmd)
  local err = M.tmpname()
  local p = assert(io.popen("(" .. cmd .. ") 2>" .. err .. "; echo \"exit=$?\""))
  local out = p:read("*a")
  p:close()
  local f = io.open(err, "rb")
  local stderr = f and f:read("*a") or ""
  if f then
    f:close()
  end
  os.remove(err)
  local body, status = out:match("^(.-)exit=(%d+)\n$")
  return body, stderr, tonumber(status)
end

-- {====== Data: samples in spec/fixtures, or the full sets for make quality ======}

--- The folder of the full data sets (`scifact/`, `model2vec/`) when the
-- quality run gives one (`make quality DATA=...` sets RAG_DATA); nil under
-- `make test`, whose specs read only the samples in spec/fixtures.
function M.data_dir()
  local d = os.getenv("RAG_DATA")
  if d and d ~= "" then
    return (d:gsub("/+$", ""))
  end
  return nil
end

--- SciFact documents `{ {id=, title=, text=}, ... }` in file order: the
-- first 40 (spec/fixtures/texts/scifact40.jsonl) or, with a data folder,
-- all 5,183. Also returns the file read.
function M.scifact()
  local data = M.data_dir()
  local path = data and data .. "/scifact/corpus.jsonl" or "spec/fixtures/texts/scifact40.jsonl"
  local json = require("rag").json
  local docs = {}
  for line in io.lines(path) do
    local d = json.decode(line)
    docs[#docs + 1] = { id = d._id, title = d.title, text = d.text }
  end
  return docs, path
end

--- The seed documents `{ {name=, text=}, ... }` (sorted by file name) from
-- the folder in RAG_SEEDS, which only the quality run sets; otherwise none.
function M.seeds()
  local dir = os.getenv("RAG_SEEDS")
  if not dir or dir == "" then
    return {}
  end
  local p = assert(io.popen("ls '" .. dir .. "'"))
  local out = {}
  for name in p:lines() do
    if name:match("%.txt$") then
      out[#out + 1] = { name = name, text = M.read(dir .. "/" .. name) }
    end
  end
  p:close()
  return out
end

--- Whether a file can be opened for reading.
function M.exists(path)
  local f = io.open(path, "rb")
  if f then
    f:close()
  end
  return f ~= nil
end

--- Out-of-memory walk, SQLite style: fails the 1st, 2nd, ... allocation of
-- `op` until it completes. Each failure must raise "not enough memory" (make
-- asan's LeakSanitizer checks that nothing leaks). Returns the number of
-- fault points. Needs a RAG_TESTING build (`rag.core._fail_alloc`).
-- `after_failure`, when given, runs after each failure (to check that
-- nothing changed).
function M.oom_walk(op, after_failure)
  local fail_alloc = require("rag.core")._fail_alloc
  local points = 0
  for n = 1, 10000 do
    fail_alloc(n)
    local ok, err = pcall(op)
    fail_alloc(0)
    if ok then
      return points
    end
    assert(tostring(err):find("not enough memory", 1, true), tostring(err))
    if after_failure then
      after_failure()
    end
    points = points + 1
  end
  error("operation never completed")
end

-- One round under each allocator's failures: fired (whether the nth
-- allocation was reached), ok, and op's first value or its error.
local round = {
  -- the Lua state's, persistent: every growth from the nth on fails
  lua = function(n, op, state)
    collectgarbage()
    local fired, ok, err = require("rag.core")._lua_oom(n, op, state)
    return fired > 0, ok, err
  end,
  -- the core's rag_malloc, transient: only the nth fails
  core = function(n, op, state)
    local fail_alloc = require("rag.core")._fail_alloc
    fail_alloc(n)
    local ok, err = pcall(op, state)
    return fail_alloc(0) == 0, ok, err -- the countdown reached the nth
  end,
}

--- Out-of-memory walk, SQLite style, of `mode` "lua" (the Lua state's own
-- allocator, persistent: every allocation that grows memory fails from the
-- nth on; Lua 5.4 retries once after an emergency collection, so failing
-- one only would rarely reach an error path) or "core" (rag_malloc,
-- transient: only the nth allocation fails), for n = 1, 2, ... until `op`
-- runs without meeting a failure. Each round `setup()` (with memory) makes
-- fresh state and `op(state)` runs under failure; it must then succeed
-- (when it recovers by itself) or raise "not enough memory".
-- `check(state, ok, result)` (result: op's first value when ok) runs with
-- memory back: after a failure the state must be as before and usable.
-- Returns the number of fault points. Needs a RAG_TESTING build of Lua 5.4
-- (`rag.core._lua_oom`, `rag.core._fail_alloc`); make asan's
-- LeakSanitizer finds what leaked.
function M.oom_sweep(mode, setup, op, check)
  local points = 0
  for n = 1, 1000000 do
    local state = setup and setup()
    local fired, ok, err = round[mode](n, op, state)
    if not ok then
      assert(tostring(err):find("not enough memory", 1, true),
        mode .. " round " .. n .. ": " .. tostring(err))
    end
    if check then
      check(state, ok, ok and err or nil)
    end
    if not fired then
      assert(ok, err)
      return points
    end
    points = points + 1
  end
  error("operation never completed")
end

--- The cosine of two vectors (Lua arrays), in doubles: a reference for
-- what the C kernels compute.
function M.cosine(a, b)
  local dot, na, nb = 0, 0, 0
  for i = 1, #a do
    dot, na, nb = dot + a[i] * b[i], na + a[i] * a[i], nb + b[i] * b[i]
  end
  return dot / math.sqrt(na * nb)
end

--- A chunker for rag.index: one chunk per paragraph (split at blank
-- lines), with exact spans and its bytes as tokens.
function M.paragraphs(text)
  local out, pos = {}, 1
  while pos <= #text do
    local s, e = text:find("\n\n", pos, true)
    local stop = s and s - 1 or #text
    if stop >= pos then
      out[#out + 1] = { text = text:sub(pos, stop), start = pos, stop = stop,
        tokens = stop - pos + 1 }
    end
    if not s then
      break
    end
    pos = e + 1
  end
  return out
end

--- Base64 of a string (standard alphabet, padded), for writing .tiktoken
-- files.
function M.base64(s)
  local chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local quad = {}
    for k = 1, 4 do
      local v = math.floor(n / 64 ^ (4 - k)) % 64
      quad[k] = chars:sub(v + 1, v + 1)
    end
    if not b then
      quad[3] = "="
    end
    if not c then
      quad[4] = "="
    end
    out[#out + 1] = table.concat(quad)
  end
  return table.concat(out)
end

--- Writes bytes to a file (raises when it cannot).
function M.write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

--- A fresh temporary path (the file itself removed).
function M.tmpname()
  local p = os.tmpname()
  os.remove(p)
  return p
end

--- Park-Miller: the same numbers on every Lua (no integer or bit operators).
-- Returns r(n), a number in 1..n.
function M.rng(seed)
  local x = seed
  return function(n)
    x = (16807 * x) % 2147483647
    return x % n + 1
  end
end

local function xor32(a, b)
  local r, p = 0, 1
  for _ = 1, 32 do
    local x, y = a % 2, b % 2
    if x ~= y then
      r = r + p
    end
    a, b, p = (a - x) / 2, (b - y) / 2, p * 2
  end
  return r
end

--- CRC-32 (zlib's) in plain arithmetic, so files can be patched and re-sealed.
function M.crc32(s)
  local c = 0xffffffff
  for i = 1, #s do
    c = xor32(c, s:byte(i))
    for _ = 1, 8 do
      local lsb = c % 2
      c = (c - lsb) / 2
      if lsb == 1 then
        c = xor32(c, 0xedb88320)
      end
    end
  end
  return xor32(c, 0xffffffff)
end

--- n as 4 little-endian bytes.
function M.u32(n)
  local t = {}
  for i = 1, 4 do
    t[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(t)
end

--- The little-endian unsigned integer of n bytes at s[at].
function M.le(s, at, n)
  local v = 0
  for i = n, 1, -1 do
    v = v * 256 + s:byte(at + i - 1)
  end
  return v
end

--- The sections of a file in rag's container (src/rag_file.h):
-- { { tag=, at=, len= }, ... }, at the payload's first byte (1-based).
function M.sections(s)
  local out, pos = {}, 29
  while pos + 12 <= #s do
    local len = M.le(s, pos + 4, 8)
    out[#out + 1] = { tag = s:sub(pos, pos + 3), at = pos + 12, len = len }
    pos = pos + 12 + len + 4
  end
  return out
end

--- The file's bytes with its header's and every section's CRC made right
-- again: for damage that must reach the checks behind the checksums.
function M.resign(s)
  local head = s:sub(1, 24)
  local out = { head, M.u32(M.crc32(head)) }
  for _, sec in ipairs(M.sections(s)) do
    local body = s:sub(sec.at - 12, sec.at + sec.len - 1)
    out[#out + 1] = body
    out[#out + 1] = M.u32(M.crc32(body))
  end
  return table.concat(out)
end

--- Asserts that load(path) refuses `bytes` re-signed (their checksums made
-- right): nil, a message naming `fname`, and the code "corrupt". `why` says
-- what the damage was, for the failure message.
function M.refused_resigned(load, fname, path, bytes, why)
  M.write(path, M.resign(bytes))
  local x, msg, code = load(path)
  assert(x == nil, why .. ": loaded")
  assert(code == "corrupt", why .. ": code " .. tostring(code))
  assert(msg:find(fname .. ": ", 1, true) == 1, msg)
end

--- s with the bytes at `at` (1-based) replaced by `bytes`.
function M.splice(s, at, bytes)
  return s:sub(1, at - 1) .. bytes .. s:sub(at + #bytes)
end

--- The saved file at path with its header's version set to v (CRC re-sealed).
function M.with_version(s, v)
  local head = s:sub(1, 8) .. M.u32(v) .. s:sub(13, 24)
  return head .. M.u32(M.crc32(head)) .. s:sub(29)
end

--- Asserts that load(path) refuses the bytes: nil, a message, and a code of
-- corrupt, format or version.
function M.rejected(load, path, bytes)
  M.write(path, bytes)
  local ok, msg, code = load(path)
  assert(ok == nil, "a damaged file loaded")
  assert(type(msg) == "string", "no message")
  assert(code == "corrupt" or code == "format" or code == "version", code)
end

--- Asserts that load refuses every truncation of the file at path (and the
-- file with one byte more), then `flips` single-bit flips drawn from seed.
function M.rejects_damage(load, path, flips, seed)
  local s, bad, r = M.read(path), M.tmpname(), M.rng(seed)
  for n = 0, #s - 1 do
    M.rejected(load, bad, s:sub(1, n))
  end
  M.rejected(load, bad, s .. "\0")
  for _ = 1, flips do
    local pos, bit = r(#s), 2 ^ (r(8) - 1)
    local byte = s:byte(pos)
    local flipped = (math.floor(byte / bit) % 2 == 1) and byte - bit or byte + bit
    M.rejected(load, bad, s:sub(1, pos - 1) .. string.char(flipped) .. s:sub(pos + 1))
  end
  os.remove(bad)
end

--- A temporary directory holding a FIFO: returns the directory and the
-- FIFO's path. A writer that gives up after 5 s is started on the FIFO, so
-- that a loader which waits in open() for a writer (the bug this guards
-- against) fails its spec instead of hanging it.
function M.fifo()
  local dir = M.tmpname()
  os.execute("mkdir " .. dir)
  local fifo = dir .. "/fifo"
  os.execute("mkfifo " .. fifo)
  os.execute("(timeout 5 sh -c 'exec 3> " .. fifo .. "; sleep 1' &) >/dev/null 2>&1")
  return dir, fifo
end

--- Asserts that load refuses what is not a regular file, at once, with
-- nil, "fname: 'path': what it is", "io": a directory, /dev/zero and a FIFO.
function M.rejects_irregular(load, fname)
  local dir, fifo = M.fifo()
  local cases = {
    { dir, "is a directory" },
    { "/dev/zero", "not a regular file (character device)" },
    { fifo, "is a fifo" },
  }
  for _, c in ipairs(cases) do
    local t0 = os.time()
    local ok, msg, code = load(c[1])
    assert(ok == nil, c[1] .. " loaded")
    assert(msg == fname .. ": '" .. c[1] .. "': " .. c[2], msg)
    assert(code == "io", code)
    assert(os.time() - t0 <= 2, c[1] .. ": the load waited")
  end
  os.execute("rm -rf " .. dir)
end

return M
