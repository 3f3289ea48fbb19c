-- bench/chunk.lua DATA_DIR [ROUNDS [SEMANTIC_DOCS]]: speed of every chunker.
--
-- Data: the SciFact corpus (DATA_DIR/scifact/corpus.jsonl; skipped, exit 0,
-- when absent), each document as title .. "\n\n" .. text. Two modes:
-- one call per document (what indexing a corpus does) and the whole corpus
-- joined with "\n\n" as one text. Single thread; MB/s is input bytes over
-- the median of ROUNDS (default 5) passes, timed with os.clock as in
-- bench/tokenizer.lua: the process's CPU time, which never goes back and,
-- as the chunkers run on this thread without I/O, is the wall time less
-- what the (2-core, shared) machine gave to other processes. An untimed
-- first pass checks that every chunk is text == src:sub(start, stop), so
-- the bench cannot measure broken output, and counts the chunks.
-- The semantic chunker runs over the first SEMANTIC_DOCS (default 500)
-- documents with a cheap deterministic embedder (words hashed into 64
-- dimensions, in Lua); its time is mostly that embedder.
-- Targets (the chunking issue): recursive by characters >= 200 MB/s,
-- recursive by exact cl100k_base tokens >= 10 MB/s.
-- Peer: LangChain.js does about 21 MB/s here: @langchain/textsplitters
-- 1.0.2, RecursiveCharacterTextSplitter, chunkSize 1000, chunkOverlap 200,
-- default separators, one splitText per document (20.0, 21.4 and 21.8 MB/s
-- in three runs of bench/peers/langchain_chunk.mjs, each a median of 5;
-- about 18 MB/s on the corpus as one text; the same 14808 and 14325 chunks
-- as the langchain preset). Measured 2026-11-21 with node 20.20.2 on this
-- project's machine: 2 cores of "Intel(R) Xeon(R) Processor", 24 GiB,
-- Linux 6.18 x86_64. Compare "recursive preset=langchain".
--   make bench-chunk DATA=../shared/data
--   node bench/peers/langchain_chunk.mjs ../shared/data /tmp/lc/node_modules
local rag = require("rag")
local util = require("bench.util")

local data = util.data_dir(arg[1], "scifact/corpus.jsonl", "bench-chunk")
local ROUNDS = tonumber(arg[2]) or 5
local SEMANTIC_DOCS = tonumber(arg[3]) or 500
local clock = os.clock

local median = util.median

local sh = util.sh

local docs, bytes = {}, 0
for line in io.lines(data .. "/scifact/corpus.jsonl") do
  local d = rag.json.decode(line)
  local text = d.title .. "\n\n" .. d.text
  docs[#docs + 1] = text
  bytes = bytes + #text
end
local whole = table.concat(docs, "\n\n")

local sem_docs, sem_bytes = {}, 0
for i = 1, math.min(SEMANTIC_DOCS, #docs) do
  sem_docs[i] = docs[i]
  sem_bytes = sem_bytes + #docs[i]
end
local sem_whole = table.concat(sem_docs, "\n\n")

-- The cheap embedder: each word (lowercased %w+ run) adds 1 to one of 64
-- dimensions, picked by a djb2 hash kept per word.
local DIM, dim_of = 64, {}
local embed_time = 0
local function embed(list)
  local t0 = clock()
  local out = {}
  for i = 1, #list do
    local v = {}
    for j = 1, DIM do
      v[j] = 0
    end
    for w in list[i]:lower():gmatch("%w+") do
      local k = dim_of[w]
      if not k then
        local h = 5381
        for j = 1, #w do
          h = (h * 33 + w:byte(j)) % 4294967296
        end
        k = h % DIM + 1
        dim_of[w] = k
      end
      v[k] = v[k] + 1
    end
    out[i] = v
  end
  embed_time = embed_time + (clock() - t0)
  return out
end

-- The untimed pass: every chunk must be the bytes its offsets name.
local function check(label, src, chunks)
  for i = 1, #chunks do
    local c = chunks[i]
    if c.text ~= src:sub(c.start, c.stop) then
      error(("%s: chunk %d [%d, %d] is not src:sub(start, stop)"):format(label, i, c.start,
        c.stop))
    end
  end
  return #chunks
end

-- Median seconds of ROUNDS passes of fn over inputs, the chunk count and
-- the median share of the time spent in embed.
local function measure(label, fn, inputs)
  local nchunks = 0
  for i = 1, #inputs do
    nchunks = nchunks + check(label, inputs[i], assert(fn(inputs[i])))
  end
  local times, shares = {}, {}
  for r = 1, ROUNDS do
    collectgarbage()
    embed_time = 0
    local t0 = clock()
    for i = 1, #inputs do
      fn(inputs[i])
    end
    times[r] = clock() - t0
    shares[r] = embed_time / times[r]
  end
  return median(times), nchunks, median(shares)
end

local approx = rag.tokenizer.approx()
local t0 = clock()
local cl = assert(rag.tokenizer.get("cl100k_base"))
local load_time = clock() - t0

local C = rag.chunk
local configs = {
  { "recursive", "unit=char size=1000 (default rules)", "char",
    function(s) return C.recursive(s, { unit = "char", size = 1000 }) end },
  { "recursive", "preset=langchain size=1000 overlap=200", "langchain",
    function(s) return C.recursive(s, { preset = "langchain", size = 1000, overlap = 200 }) end },
  { "recursive", "cl100k size=256", "cl100k",
    function(s) return C.recursive(s, { tokenizer = cl, size = 256 }) end },
  { "recursive", "approx size=256",
    nil, function(s) return C.recursive(s, { tokenizer = approx, size = 256 }) end },
  { "fixed", "unit=char size=1000",
    nil, function(s) return C.fixed(s, { unit = "char", size = 1000 }) end },
  { "fixed", "cl100k size=256 overlap=32",
    nil, function(s) return C.fixed(s, { tokenizer = cl, size = 256, overlap = 32 }) end },
  { "sentences", "approx size=256",
    nil, function(s) return C.sentences(s, { size = 256 }) end },
  { "window", "approx (size=512 window=3)",
    nil, function(s) return C.window(s) end },
  { "hierarchy", "approx sizes={2048,512,128}",
    nil, function(s) return C.hierarchy(s) end },
  { "markdown", "approx size=256 (plain text)",
    nil, function(s) return C.markdown(s, { size = 256 }) end },
  { "semantic", ("hash-64 embed, first %d docs"):format(#sem_docs), "semantic",
    function(s) return C.semantic(s, { embed = embed }) end },
}

print(("data: %s/scifact/corpus.jsonl, %d documents, %.2f MB (title, blank line, text)")
  :format(data, #docs, bytes / 1e6))
print(("machine: %s, %s, %s cores; %s"):format(sh("uname -srm"),
  sh("grep -m1 'model name' /proc/cpuinfo"):gsub("^.*: ", ""), sh("nproc"), _VERSION))
print(("single thread, os.clock, median of %d; cl100k_base loaded in %.3f s")
  :format(ROUNDS, load_time))
print()
local fmt = "%-10s %-40s %10s %10s %9s %9s"
print(fmt:format("chunker", "config", "per-doc", "one-text", "chunks", "chunks"))
print(fmt:format("", "", "MB/s", "MB/s", "per-doc", "one-text"))

local results, wall0, cpu0 = {}, os.time(), clock()
for _, c in ipairs(configs) do
  local name, config, key, fn = c[1], c[2], c[3], c[4]
  local per_in, one_in, b = docs, { whole }, bytes
  if key == "semantic" then
    per_in, one_in, b = sem_docs, { sem_whole }, sem_bytes
  end
  local tp, np, sp = measure(name .. " per-doc", fn, per_in)
  local to, no, so = measure(name .. " one-text", fn, one_in)
  local r = { per = b / tp / 1e6, one = b / to / 1e6, sp = sp, so = so }
  if key then
    results[key] = r
  end
  print(fmt:format(name, config, ("%.1f"):format(r.per), ("%.1f"):format(r.one), np, no))
end

local sem = results.semantic
print()
print(("semantic: the Lua embedder is %.0f%% (per-doc) and %.0f%% (one text) of its time")
  :format(sem.sp * 100, sem.so * 100))
print("peer: LangChain.js RecursiveCharacterTextSplitter 1000/200 (compare the langchain preset):")
print("  about 21 MB/s per document, 18 MB/s as one text, here on 2026-11-21; to measure it:")
print("  node bench/peers/langchain_chunk.mjs " .. data .. " /tmp/lc/node_modules")
print()

local function target(label, r, goal)
  for _, mode in ipairs({ "per", "one" }) do
    print(("%s  %-44s %-8s %7.1f MB/s (target >= %d)"):format(
      r[mode] >= goal and "PASS" or "FAIL", label, mode == "per" and "per-doc" or "one-text",
      r[mode], goal))
  end
end
target("recursive by characters (unit=char 1000)", results.char, 200)
target("recursive by exact cl100k tokens (256)", results.cl100k, 10)
print(("(the table took %.0f s of CPU time and about %d s of wall time)")
  :format(clock() - cpu0, os.time() - wall0))
