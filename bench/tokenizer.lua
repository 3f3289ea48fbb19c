-- bench/tokenizer.lua DATA_DIR: token counting speed and the approx error.
--
-- Data: the "text" of every SciFact abstract (DATA_DIR/scifact/corpus.jsonl;
-- skipped, exit 0, when absent) and, for Chinese, the seeds' paragraphs that
-- are mostly CJK (DATA_DIR/../seeds, when there). Single thread, os.clock CPU time, median
-- of 5 rounds, whole documents per call (as a chunker or packer calls it).
-- Peers, as measured on this machine for the issue: the official tiktoken
-- WASM port (npm tiktoken) about 3 MB/s, js-tiktoken about 1.4 MB/s.
-- Targets: exact cl100k counting >= 10 MB/s, approx >= 200 MB/s.
--
-- Then untrusted input: single pieces of many megabytes (one letter, short
-- units repeated, random letters, digits, spaces, CJK, punctuation, mixed
-- symbols, random vocabulary tokens end to end), which the exact tokenizer
-- encodes in linear time. Target: 100 MB of one letter counted in under
-- 5 s with either vocabulary. Median of 3.
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

-- Untrusted input: long single pieces.
local function utf8_char(cp)
  if cp < 0x80 then
    return string.char(cp)
  elseif cp < 0x800 then
    return string.char(0xc0 + math.floor(cp / 64), 0x80 + cp % 64)
  elseif cp < 0x10000 then
    return string.char(0xe0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64,
      0x80 + cp % 64)
  end
  return string.char(0xf0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64,
    0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

local function chars(from, to)
  local t = {}
  for cp = from, to do
    t[#t + 1] = utf8_char(cp)
  end
  return t
end

local function letters(s)
  local t = {}
  for c in s:gmatch(".") do
    t[#t + 1] = c
  end
  return t
end

-- about n bytes of characters drawn at random from the list t
local function random_text(t, n)
  local out, len = {}, 0
  math.randomseed(42)
  while len < n do
    local c = t[math.random(#t)]
    out[#out + 1] = c
    len = len + #c
  end
  return table.concat(out)
end

local MB = 2 ^ 20
local symbols = chars(0x2190, 0x21ff) -- arrows
for _, c in ipairs(chars(0x1f300, 0x1f3ff)) do -- pictographs
  symbols[#symbols + 1] = c
end
for _, c in ipairs(letters("!#$%&()*+,-./:;<=>?@[]^_`{|}~")) do
  symbols[#symbols + 1] = c
end
local mixed = letters("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!?.,;:-_*#")
for _, list in ipairs({ chars(0xe0, 0xff), chars(0x3b1, 0x3c9), chars(0x4e00, 0x4e3f),
  chars(0x1f600, 0x1f64f) }) do
  for _, c in ipairs(list) do
    mixed[#mixed + 1] = c
  end
end

local adversarial = {
  { "'a' x 100 MB", function() return ("a"):rep(100 * MB) end },
  { "'ab' repeated", function() return ("ab"):rep(4 * MB) end },
  { "'abc' repeated", function() return ("abc"):rep(math.floor(8 * MB / 3)) end },
  { "'hello' repeated", function() return ("hello"):rep(math.floor(8 * MB / 5)) end },
  { "random of 'ab'", function() return random_text(letters("ab"), 8 * MB) end },
  { "random of 'abcd'", function() return random_text(letters("abcd"), 8 * MB) end },
  { "random a-z", function() return random_text(letters("abcdefghijklmnopqrstuvwxyz"), 8 * MB) end
  },
  { "random digits", function() return random_text(letters("0123456789"), 8 * MB) end },
  { "spaces", function() return (" "):rep(8 * MB) end },
  { "newlines", function() return ("\n"):rep(8 * MB) end },
  { "dashes", function() return ("-"):rep(8 * MB) end },
  { "one CJK repeated", function() return ("\231\154\132"):rep(math.floor(8 * MB / 3)) end },
  { "random CJK", function() return random_text(chars(0x4e00, 0x4e00 + 299), 8 * MB) end },
  { "random punctuation", function()
    return random_text(letters("!?.,;:-_*#()[]{}<>/\\|"), 8 * MB)
  end },
  { "random symbols", function() return random_text(symbols, 8 * MB) end },
  { "random mixed", function() return random_text(mixed, 8 * MB) end },
}

-- random tokens of cl100k_base that are all lowercase letters (or all
-- ASCII punctuation), end to end: high-entropy text that the search
-- must check pair by pair
local function token_text(pattern)
  local pool = {}
  for r = 0, cl:info().n_ranks - 1 do
    local ok, text = pcall(cl.decode, cl, { r })
    if ok and text:match(pattern) then
      pool[#pool + 1] = text
    end
  end
  return random_text(pool, 4 * MB)
end
adversarial[#adversarial + 1] = { "letter tokens", function() return token_text("^%l+$") end }
adversarial[#adversarial + 1] = { "punctuation tokens", function() return token_text("^%p+$") end }

print("untrusted input: long single pieces (CPU s per count, median of 3; MB/s)")
for _, case in ipairs(adversarial) do
  local s = case[2]()
  local line = { ("%-20s %6.1f MB"):format(case[1], #s / MB) }
  for _, tok in ipairs({ cl, o2 }) do
    local times = {}
    for r = 1, 3 do
      local start = os.clock()
      tok:count(s)
      times[r] = os.clock() - start
    end
    local t = median(times)
    line[#line + 1] = ("%s %7.3f s %7.1f MB/s"):format(tok == cl and "cl100k" or "o200k", t,
      #s / t / 1e6)
    if #s == 100 * MB then
      line[#line + 1] = t < 5 and "(< 5 s: met)" or "(< 5 s: MISSED)"
    end
  end
  print(table.concat(line, "  "))
end
