-- Shared spec helpers: the loopback HTTP server and a wall clock.
local M = {}

local system = require("system") -- lua-system, a dependency of busted

--- Seconds from a monotonic clock.
function M.now()
  return system.monotime()
end

--- Starts spec/fixtures/httpd.py on 127.0.0.1; returns its base URL and a
-- function that stops it. Sanitizer preloads are not passed to python.
function M.start_httpd()
  local proc = assert(io.popen(
    "exec env -u LD_PRELOAD python3 spec/fixtures/httpd.py --lifetime 300", "r"))
  local line = assert(proc:read("*l"), "httpd did not start")
  local port, pid = line:match("^(%d+) (%d+)$")
  assert(port, "httpd said: " .. line)
  local function stop()
    os.execute("exec kill " .. pid .. " 2>/dev/null")
    proc:close()
  end
  return "http://127.0.0.1:" .. port, stop
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

return M
