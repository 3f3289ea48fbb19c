-- bench/cli.lua: `rag index` end to end over SciFact's corpus written as
-- 5,183 text files (title, a blank line, the text), with the hashing
-- embedder, on one core (make bench-cli pins it with taskset): files read,
-- loaded, chunked, embedded, indexed and saved, in a fresh process each
-- round, wall clock including the interpreter's start. Also a re-run over
-- the unchanged files and one after changing one file. Issue 23's target:
-- >= 5,000 files/s.
--   make bench-cli DATA=../shared/data
local rag = require("rag")
local util = require("bench.util")

local dir = util.data_dir(arg[1], "corpus.jsonl", "bench-cli")
local ROUNDS = tonumber(arg[2]) or 5
local work = os.getenv("BENCH_DIR") or "build/bench-cli"
local files_dir = work .. "/scifact"
local into = work .. "/index"
local lua = os.getenv("BENCH_LUA") or "lua5.4"
local pin = os.getenv("BENCH_PIN") or "taskset -c 0"

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok == true or ok == 0, "failed: " .. cmd)
end

-- the corpus as files, once
sh("mkdir -p " .. files_dir)
local n = 0
for line in io.lines(dir .. "/corpus.jsonl") do
  local d = rag.json.decode(line)
  n = n + 1
  local path = string.format("%s/%s.txt", files_dir, d._id)
  local f = io.open(path, "rb")
  if f then
    f:close()
  else
    f = assert(io.open(path, "wb"))
    f:write(d.title or "", "\n\n", d.text or "", "\n")
    f:close()
  end
end

local function timed(cmd)
  local t0 = rag.transport.now()
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("*a")
  local ok = p:close()
  assert(ok, "failed: " .. cmd .. "\n" .. out)
  return rag.transport.now() - t0, out
end

local index = string.format("%s %s bin/rag index %s --into %s", pin, lua, files_dir, into)
local fresh, again, out = {}, {}, ""
for r = 1, ROUNDS do
  sh("rm -rf " .. into)
  fresh[r], out = timed(index)
  again[r] = timed(index)
end
print(string.format("rag index: %d SciFact abstracts as text files, hashing embedder (dim 512),"
  .. " one core (%s), %s, median of %d fresh processes", n, pin, _VERSION, ROUNDS))
io.write("  last run said: ", out)
local tf, ta = util.median(fresh), util.median(again)
print(string.format("  new index      %6.3f s  %7.0f files/s  (target >= 5,000: %s)", tf, n / tf,
  n / tf >= 5000 and "met" or "MISSED"))
print(string.format("  all unchanged  %6.3f s  %7.0f files/s", ta, n / ta))
