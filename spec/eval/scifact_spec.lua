-- rag.eval.compare on SciFact (#data, `make quality DATA=../shared/data`):
-- per-query nDCG@10 of the index's bm25 and vector modes over the 300 test
-- queries, paired; the difference is significant (p < 0.05). The vectors
-- are the offline hashing embedder's (the data folder has no semantic
-- model), so the vector mode is the weaker one here.
local rag = require("rag")
local helpers = require("spec.helpers")

describe("rag.eval.compare on SciFact #data", function()
  local dir = helpers.data_dir()
  if not dir then
    it("needs the data folder (make quality)", function()
      pending("make quality DATA=../shared/data")
    end)
    return
  end

  it("finds bm25 and vector nDCG@10 significantly different", function()
    local data = assert(rag.eval.beir(dir .. "/scifact"))
    local docs = {}
    for id, d in pairs(data.corpus) do
      docs[#docs + 1] = { id = id, title = d.title, text = d.text }
    end
    table.sort(docs, function(x, y)
      return x.id < y.id
    end)
    local idx = rag.index.new({ embedder = rag.embed.hashing({ dim = 512 }) })
    assert(idx:add_many(docs))
    local function per_query(mode)
      local run = {}
      for q in pairs(data.qrels) do
        run[q] = idx:search(data.queries[q], { k = 10, group = "doc", mode = mode })
        for _, h in ipairs(run[q]) do
          h.id = h.doc_id
        end
      end
      local means, per = rag.eval.ir(run, data.qrels, { "ndcg@10" }, { per_query = true })
      return per, means["ndcg@10"]
    end
    local bm, bm_mean = per_query("bm25")
    local vec, vec_mean = per_query("vector")
    local r = rag.eval.compare(bm, vec)
    local m = r.metrics["ndcg@10"]
    assert.equal(300, m.n)
    assert.near(bm_mean, m.a, 1e-12)
    assert.near(vec_mean, m.b, 1e-12)
    assert.truthy(m.p < 0.05, "p = " .. m.p)
    assert.equal(5, #m.changed)
    print(string.format("\nscifact ndcg@10: bm25 %.4f, vector %.4f, diff %.4f, p %.4g (n %d)",
      m.a, m.b, m.diff, m.p, m.n))
    local boot = rag.eval.compare(bm, vec, { test = "bootstrap" })
    assert.truthy(boot.metrics["ndcg@10"].p < 0.05)
  end)
end)
