-- A real sweep for the browser check of rag.report (acceptance C of issue
-- 24): BM25 over spec/fixtures/texts/scifact40.jsonl chunked at three sizes,
-- one known-item question per document (four short words of its
-- middle sentence), scored with rag.eval.ir. Writes the HTML report to arg[1] and
-- prints the text table.
local rag = require("rag")
local report = require("rag.report")

local SIZES = { 32, 128, 512 }
local KS = { 1, 3, 5, 10, 20 }
local METRICS = { "ndcg@10", "recall@10", "mrr", "faithfulness" }

local docs, ids = {}, {}
for line in io.lines("spec/fixtures/texts/scifact40.jsonl") do
  local d = assert(rag.json.decode(line))
  d._id = tostring(d._id)
  docs[d._id] = d.title .. "\n\n" .. d.text
  ids[#ids + 1] = d._id
end

local queries, qrels = {}, {}
for _, id in ipairs(ids) do
  local sents = assert(rag.text.sentences(docs[id]))
  local words = {}
  for w in sents[math.ceil(#sents / 2)].text:gmatch("%a+") do
    if #w <= 6 and #words < 4 then
      words[#words + 1] = w
    end
  end
  queries["q" .. id] = table.concat(words, " ")
  qrels["q" .. id] = { [id] = 1 }
end

local measures = { "ndcg@10", "mrr" }
for _, k in ipairs(KS) do
  measures[#measures + 1] = "recall@" .. k
end

local settings = {}
for _, size in ipairs(SIZES) do
  local bm = rag.bm25.new()
  for _, id in ipairs(ids) do
    for n, c in ipairs(assert(rag.chunk.recursive(docs[id], { size = size }))) do
      assert(bm:add(id .. "#" .. n, c.text))
    end
  end
  local run = {}
  for q, text in pairs(queries) do
    local seen, list = {}, {}
    for _, h in ipairs(assert(bm:search(text, 200))) do
      local doc = h.id:match("^(.-)#%d+$")
      if not seen[doc] then
        seen[doc] = true
        list[#list + 1] = doc
      end
    end
    run[q] = list
  end
  bm:close()
  local means, per_query = rag.eval.ir(run, qrels, measures, { per_query = true })
  local curve = {}
  for _, k in ipairs(KS) do
    curve[#curve + 1] = { k = k, value = means["recall@" .. k] }
  end
  local pq = {}
  for q, t in pairs(per_query) do
    pq[q] = { ["ndcg@10"] = t["ndcg@10"], ["recall@10"] = t["recall@10"], mrr = t.mrr }
  end
  settings[#settings + 1] = {
    name = "chunk.size=" .. size,
    params = { ["chunk.size"] = size, mode = "bm25" },
    scores = { ["ndcg@10"] = means["ndcg@10"], ["recall@10"] = means["recall@10"],
      mrr = means.mrr },
    per_query = pq,
    curve = curve,
    unavailable = { faithfulness = "needs an llm (none configured)" },
  }
end

local results = {
  metrics = METRICS,
  settings = settings,
  meta = { index = "bm25 over chunks", data = "scifact40 (spec/fixtures/texts)",
    library = "rag " .. rag._VERSION, questions = #ids },
}
local f = assert(io.open(assert(arg[1], "usage: sweep.lua OUT.html"), "wb"))
f:write(report.html(results, { title = "rag eval: chunk size sweep" }))
f:close()
io.write(report.table(results))
