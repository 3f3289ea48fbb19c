-- bench/icount.lua PART DATA_DIR: a fixed workload whose instruction count
-- (valgrind --tool=callgrind) compares two builds when the machine is too
-- busy for wall-clock timing; counts do not depend on load. PART is bm25
-- (index 1,500 SciFact documents, 300 top-10 queries), bm25add (index all
-- 5,183 SciFact documents, JSON-decoded, title .. "\n" .. text, as
-- rag.index adds them; nothing else), tok (cl100k counts of
-- them), chunk (recursive, 64 chars), vec (3,000 seeded 64-dim vectors into
-- rag.hnsw and rag.vec, 300 searches each), fusepack (rag.fuse.rrf of two
-- 1,000-hit lists x 100, rag.pack of 200 chunks into 4,000 tokens x 20),
-- doccount or docchunk (all 5,183 documents as title .. "\n\n" .. text, as
-- a document index takes them, in one pass: cl100k counts, or
-- rag.chunk.recursive at 512 cl100k tokens with 64 of overlap).
--   valgrind --tool=callgrind lua5.4 bench/icount.lua bm25 ../shared/data
-- then callgrind_annotate --inclusive=yes on both builds' outputs.
local rag = require("rag")
local util = require("bench.util")
local part = arg[1]
local dir = util.data_dir(arg[2], "scifact/corpus.jsonl", "bench-icount")
local docs = {}
for line in io.lines(dir .. "/scifact/corpus.jsonl") do
  local title = line:match('"title":%s*"(.-)"') or ""
  local text = line:match('"text":%s*"(.-)"%s*[,}]') or ""
  docs[#docs + 1] = { id = tostring(#docs + 1), text = title .. " " .. text }
  if #docs == 1500 then break end
end
if part == "bm25add" then
  local b = rag.bm25.new()
  local n = 0
  for line in io.lines(dir .. "/scifact/corpus.jsonl") do
    local d = rag.json.decode(line)
    n = n + 1
    b:add(d._id, (d.title or "") .. "\n" .. d.text)
  end
  io.stderr:write(("bm25add: %d documents, %d in the index\n"):format(n, #b))
elseif part == "bm25" then
  local b = rag.bm25.new()
  for _, d in ipairs(docs) do b:add(d.id, d.text) end
  for i = 1, 300 do b:search(docs[i].text:sub(1, 80), 10) end
elseif part == "tok" then
  local tok = rag.tokenizer.get("cl100k_base")
  for _, d in ipairs(docs) do tok:count(d.text) end
elseif part == "chunk" then
  for i = 1, 300 do rag.chunk.recursive(docs[i].text, { size = 64, overlap = 8 }) end
elseif part == "doccount" or part == "docchunk" then
  local tok = rag.tokenizer.get("cl100k_base")
  local all = {}
  for line in io.lines(dir .. "/scifact/corpus.jsonl") do
    local d = rag.json.decode(line)
    all[#all + 1] = d.title .. "\n\n" .. d.text
  end
  local opts = { size = 512, overlap = 64, tokenizer = tok }
  for i = 1, #all do
    if part == "doccount" then
      tok:count(all[i])
    else
      rag.chunk.recursive(all[i], opts)
    end
  end
elseif part == "vec" then
  local v = rag.hnsw.new({ dim = 64, seed = 1 })
  local x = 1
  local function rnd() x = (x * 1103515245 + 12345) % 2147483648; return x / 2147483648 - 0.5 end
  local vs = {}
  for i = 1, 3000 do
    local t = {}
    for j = 1, 64 do t[j] = rnd() end
    vs[i] = rag.vec.pack(t)
    v:add(tostring(i), vs[i])
  end
  for i = 1, 300 do v:search(vs[i], 10) end
  local e = rag.vec.new({ dim = 64 })
  for i = 1, 3000 do e:add(tostring(i), vs[i]) end
  for i = 1, 300 do e:search(vs[i], 10) end
elseif part == "fusepack" then
  local a, b = {}, {}
  for i = 1, 1000 do
    a[i] = { id = "d" .. i, score = 1000 - i }
    b[i] = { id = "d" .. (i * 7 % 1331), score = 1000 - i }
  end
  for _ = 1, 100 do rag.fuse.rrf({ a, b }, { limit = 100 }) end
  local items = {}
  for i = 1, 200 do items[i] = { id = tostring(i), text = docs[i].text, score = 200 - i } end
  for _ = 1, 20 do rag.pack(items, { budget = 4000 }) end
end
