-- rag.eval.diagnose: every row of seed 002's table (answer correctness x
-- context recall x context precision, 002_a4cab80abd24db44.txt lines
-- 157-162, remedies lines 168-194) and each row after it is reached by a
-- case; thresholds, evidence and bad input.
local rag = require("rag")

local diagnose = rag.eval.diagnose

local function ids(list)
  local out = {}
  for i, d in ipairs(list) do
    out[i] = d.id
  end
  return out
end

describe("rag.eval.diagnose", function()
  it("reaches each row of seed 002's table", function()
    local rows = {
      -- answer, recall, precision -> row
      { 0.3, 0.9, 0.9, "generator" }, -- 1: low, high, high
      { 0.3, 0.9, 0.2, "noise" }, -- 2: low, high, low
      { 0.3, 0.2, 0.9, "coverage" }, -- 3: low, low, high
      { 0.3, 0.2, 0.2, "pipeline" }, -- 4: low, low, low
    }
    for _, r in ipairs(rows) do
      local got = diagnose({ answer_correctness = r[1], context_recall = r[2],
        context_precision = r[3] })
      assert.same({ r[4] }, ids(got))
      assert.is_string(got[1].cause)
      assert.truthy(#got[1].suggestions >= 2)
    end
    local got = diagnose({ answer_correctness = 0.3, context_recall = 0.91,
      context_precision = 0.2 })
    assert.equal("answer_correctness 0.30 low, context_recall 0.91 high, context_precision "
      .. "0.20 low", got[1].evidence)
    assert.matches("reranker", got[1].suggestions[1])
    assert.matches("raise k", diagnose({ answer_correctness = 0.3, context_recall = 0.2,
      context_precision = 0.9 })[1].suggestions[1])
  end)

  it("reaches the rows on faithfulness, relevancy, recall and precision", function()
    local got = diagnose({ context_recall = 0.91, faithfulness = 0.42 })
    assert.same({ "ignores_context" }, ids(got))
    assert.equal("context_recall 0.91 high, faithfulness 0.42 low", got[1].evidence)
    assert.same({ "unfaithful" }, ids(diagnose({ faithfulness = 0.5 })))
    assert.same({ "unfaithful", "recall" }, ids(diagnose({ faithfulness = 0.5,
      context_recall = 0.1 })))
    assert.same({ "off_topic" }, ids(diagnose({ answer_relevancy = 0.5 })))
    assert.same({ "recall" }, ids(diagnose({ context_recall = 0.5 })))
    assert.same({ "precision" }, ids(diagnose({ context_precision = 0.5 })))
    -- a seed row explains low recall and precision: not said again
    assert.same({ "pipeline" }, ids(diagnose({ answer_correctness = 0.1, context_recall = 0.1,
      context_precision = 0.1 })))
    assert.same({ "generator", "ignores_context" }, ids(diagnose({ answer_correctness = 0.1,
      context_recall = 0.9, context_precision = 0.9, faithfulness = 0.3 })))
  end)

  it("finds nothing when every metric is high, or none is given", function()
    assert.same({}, diagnose({ faithfulness = 0.9, answer_relevancy = 0.9,
      context_precision = 0.9, context_recall = 0.9, answer_correctness = 0.9 }))
    assert.same({}, diagnose({}))
  end)

  it("takes thresholds (at the threshold is high) and a ragas result", function()
    assert.same({}, diagnose({ context_recall = 0.8 }))
    assert.same({ "recall" }, ids(diagnose({ context_recall = 0.8 },
      { thresholds = { context_recall = 0.81 } })))
    assert.same({ "recall" }, ids(diagnose({ scores = { context_recall = 0.1 } })))
    assert.equal(0.85, require("rag.eval.diagnose").THRESHOLDS.faithfulness)
  end)

  it("raises on bad input", function()
    assert.has_error(function()
      diagnose({ faithfulness = "high" })
    end, "rag.eval.diagnose: scores.faithfulness must be a number, got string")
    assert.has_error(function()
      diagnose({}, { thresholds = { faithfulness = 2 } })
    end, "rag.eval.diagnose: thresholds: 'faithfulness' must be in [0, 1]")
    assert.has_error(function()
      diagnose({}, { thresholds = { bleu = 0.5 } })
    end, "rag.eval.diagnose: thresholds: unknown option 'bleu'")
    assert.has_error(function()
      diagnose(nil)
    end, "rag.eval.diagnose: scores must be a table, got nil")
  end)
end)
