-- bench/tokenizer.lua DATA_DIR: token counting speed and the approx error.
--
-- Data: the "text" of every SciFact abstract (DATA_DIR/scifact/corpus.jsonl;
-- skipped, exit 0, when absent) and, for Chinese, the seeds' paragraphs that
-- are mostly CJK (DATA_DIR/../seeds, when there). Single thread, os.clock CPU time, median
-- of 5 rounds, whole documents per call (as a chunker or packer calls it).
-- Peers, as measured on this machine for the issue: the official tiktoken
-- WASM port (npm tiktoken) about 3 MB/s, js-tiktoken about 1.4 MB/s.
-- Targets: exact cl100k counting >= 10 MB/s, approx >= 200 MB/s.
local rag = require("rag")
local util = require("bench.util")

local data = util.data_dir(arg[1], "scifact/corpus.jsonl", "bench-tokenizer")
local seeds = data .. "/../seeds"

local median = util.median

local docs, bytes = {}, 0
for line in io.lines(data .. "/scifact/corpus.jsonl") do
  local text = rag.json.decode(line).text
  docs[#docs + 1] = text
  bytes = bytes + #text
end

local zh = {}
local p = assert(io.popen("ls '" .. seeds .. "' 2>/dev/null"))
for file in p:lines() do
  local f = assert(io.open(seeds .. "/" .. file, "rb"))
  local text = f:read("*a")
  f:close()
  for para in (text .. "\n\n"):gmatch("(.-)\n\n+") do
    local cjk = select(2, para:gsub("[\228-\233][\128-\191][\128-\191]", ""))
    local chars = utf8 and utf8.len(para) or #para / 2
    if chars and chars >= 40 and cjk / chars > 0.5 then
      zh[#zh + 1] = para
    end
  end
end
p:close()

local function speed(label, fn)
  local times = {}
  for r = 1, 5 do
    local t0 = os.clock()
    for i = 1, #docs do
      fn(docs[i])
    end
    times[r] = os.clock() - t0
  end
  local t = median(times)
  print(("%-28s %8.1f MB/s  (%.3f s per pass over %.1f MB)"):format(label, bytes / t / 1e6, t,
    bytes / 1e6))
end

print(("SciFact: %d documents, %.1f MB; Chinese paragraphs: %d"):format(#docs, bytes / 1e6, #zh))
print(("machine: %s, %s"):format(io.popen("uname -srm"):read("*l"),
  (io.popen("grep -m1 \"model name\" /proc/cpuinfo"):read("*l") or ""):gsub("^.*: ", "")))

local t0 = os.clock()
local cl = assert(rag.tokenizer.get("cl100k_base"))
local o2 = assert(rag.tokenizer.get("o200k_base"))
print(("load both vocabularies: %.3f s"):format(os.clock() - t0))

local approx = rag.tokenizer.approx()
speed("cl100k_base count", function(s) return cl:count(s) end)
speed("cl100k_base encode", function(s) return cl:encode(s) end)
speed("o200k_base count", function(s) return o2:count(s) end)
speed("approx count", function(s) return approx:count(s) end)

local function error_report(label, texts)
  local est, exact, rel = 0, 0, {}
  for i, s in ipairs(texts) do
    local a, e = approx:count(s), cl:count(s)
    est, exact = est + a, exact + e
    rel[i] = math.abs(a - e) / e
  end
  table.sort(rel)
  print(("approx vs cl100k, %-8s total %+.2f%%, per text: median %.1f%%, p90 %.1f%%, "
    .. "p95 %.1f%%, max %.1f%%  (%d texts)")
    :format(label, (est / exact - 1) * 100, median(rel) * 100, rel[math.ceil(#rel * 0.9)] * 100,
      rel[math.ceil(#rel * 0.95)] * 100, rel[#rel] * 100, #rel))
end

error_report("English", docs)
if #zh > 0 then
  error_report("Chinese", zh)
else
  print("approx vs cl100k, Chinese: skipped: no seeds in " .. seeds)
end
