-- A BEIR folder for the browser check of rag.report (spec/browser/report.sh):
-- the 40 SciFact documents of spec/fixtures/texts/scifact40.jsonl as the
-- corpus, and one known-item question per document (the first four words of
-- at most six letters of its middle sentence) judged relevant to it alone.
-- Usage: lua5.4 spec/browser/beir.lua DIR (DIR/qrels must exist).
local rag = require("rag")

local dir = assert(arg[1], "usage: beir.lua DIR")
local corpus = assert(io.open(dir .. "/corpus.jsonl", "wb"))
local queries = assert(io.open(dir .. "/queries.jsonl", "wb"))
local qrels = assert(io.open(dir .. "/qrels/test.tsv", "wb"))
qrels:write("query-id\tcorpus-id\tscore\n")
for line in io.lines("spec/fixtures/texts/scifact40.jsonl") do
  corpus:write(line, "\n")
  local d = assert(rag.json.decode(line))
  local id = tostring(d._id)
  local sents = assert(rag.text.sentences(d.text))
  local words = {}
  for w in sents[math.ceil(#sents / 2)].text:gmatch("%a+") do
    if #w <= 6 and #words < 4 then
      words[#words + 1] = w
    end
  end
  queries:write(rag.json.encode({ _id = "q" .. id, text = table.concat(words, " ") }), "\n")
  qrels:write("q", id, "\t", id, "\t1\n")
end
corpus:close()
queries:close()
qrels:close()
