--- bench/util.lua: what every benchmark shares. Benchmarks run from the
-- project root (`make bench-*`), where `require("bench.util")` finds this.
local M = {}

--- This process's resident set size (VmRSS), KB.
function M.rss_kb()
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)"))
end

--- The median of a list of numbers (sorts it in place).
function M.median(t)
  table.sort(t)
  return t[math.floor((#t + 1) / 2)]
end

--- The first line a shell command prints ("" when it prints nothing).
function M.sh(cmd)
  local p = io.popen(cmd)
  local s = p and p:read("*l") or ""
  if p then
    p:close()
  end
  return s or ""
end

--- Microseconds one call of fn takes: the median of `runs` timed calls
-- (os.clock, the process's CPU time) after `warm` (default 20) untimed ones.
function M.time_us(fn, runs, warm)
  for _ = 1, warm or 20 do
    fn()
  end
  local t = {}
  for i = 1, runs do
    local t0 = os.clock()
    fn()
    t[i] = os.clock() - t0
  end
  return M.median(t) * 1e6
end

--- "  (target <= N us: met)" or "... MISSED", or "" without a target.
function M.target(us, target)
  if not target then
    return ""
  end
  return string.format("  (target <= %d us: %s)", target, us <= target and "met" or "MISSED")
end

--- The data folder given on the command line, when `file` (a path inside
-- it, such as "scifact/corpus.jsonl") is there. Otherwise prints why the
-- script is skipped, naming the make target, and exits 0: the data sets are
-- not part of a clone (in this repository's setup they are ../shared/data).
function M.data_dir(dir, file, target)
  local hint = "pass the data folder, e.g. make " .. target .. " DATA=../shared/data"
  if dir == nil or dir == "" then
    print("skipped: no data folder given; " .. hint)
    os.exit(0)
  end
  dir = dir:gsub("/+$", "")
  local f = io.open(dir .. "/" .. file, "rb")
  if not f then
    print("skipped: " .. dir .. "/" .. file .. " not found; " .. hint)
    os.exit(0)
  end
  f:close()
  return dir
end

--- The first line bench/membw.c prints with `args` (built on first use
-- into /tmp/rag-membw), or "unavailable: " and why.
function M.membw(args)
  if not M.membw_built then
    local out = M.sh("cc -O2 -mavx2 -o /tmp/rag-membw bench/membw.c 2>&1")
    if out ~= "" then
      return "unavailable: " .. out
    end
    M.membw_built = true
  end
  return M.sh("/tmp/rag-membw " .. (args or "") .. " 2>&1")
end

--- The CPU's model name, from /proc/cpuinfo.
function M.cpu()
  return (M.sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"):gsub("^%s+", ""))
end

--- A BEIR folder as rag.eval.beir reads it, with its corpus as documents
-- sorted by id and its judged query ids sorted: data, docs, qids.
function M.beir(dir)
  local data = assert(require("rag").eval.beir(dir))
  local docs = {}
  for id, d in pairs(data.corpus) do
    docs[#docs + 1] = { id = id, title = d.title, text = d.text }
  end
  table.sort(docs, function(a, b)
    return a.id < b.id
  end)
  local qids = {}
  for q in pairs(data.qrels) do
    qids[#qids + 1] = q
  end
  table.sort(qids)
  return data, docs, qids
end

return M
