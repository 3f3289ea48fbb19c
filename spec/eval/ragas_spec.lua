-- rag.eval.ragas: every metric driven by a scripted judge, each score worked
-- by hand (seed 002's examples among them); the edge cases (no statements,
-- no contexts, empty ground truth, a missing field); offline (no LLM, no
-- embedder); replies that do not parse; limits ending in "budget" with what
-- was scored.
local rag = require("rag")
local support = require("spec.support.llm")

local ragas = rag.eval.ragas

-- An embedder that looks texts up in `vectors` (unknown texts: { 0, 0 }).
local function embedder(vectors)
  local e = { calls = 0 }
  function e.embed(_, texts)
    e.calls = e.calls + 1
    local out = {}
    for i, t in ipairs(texts) do
      out[i] = vectors[t] or { 0, 0 }
    end
    return out
  end
  return e
end

local function statements(...)
  return rag.json.encode({ statements = { ... } })
end

local function verdicts(...)
  local list = {}
  for i, v in ipairs({ ... }) do
    list[i] = { statement = "s" .. i, reason = "why " .. i, verdict = v }
  end
  return rag.json.encode({ verdicts = list })
end

-- The user message of the judge's n-th call.
local function asked(llm, n)
  local m = llm.calls[n].messages
  return m[#m].content
end

describe("rag.eval.ragas", function()
  describe("faithfulness", function()
    it("is the share of the answer's statements the contexts support", function()
      local llm = support.scripted({ statements("A", "B", "C"), verdicts(1, 0), verdicts(1) })
      local r = assert(ragas({ { question = "q?", answer = "A. B. C.",
        contexts = { "c1", "c2" } } },
        { llm = llm, metrics = { "faithfulness" }, batch = 2 }))
      assert.near(2 / 3, r.scores.faithfulness, 1e-12)
      assert.equal(1, r.counts.faithfulness)
      assert.near(2 / 3, r.per_sample[1].faithfulness, 1e-12)
      local v = r.per_sample[1].verdicts.faithfulness
      assert.same({ statement = "B", verdict = 0, reason = "why 2" }, v[2])
      assert.same({ statement = "C", verdict = 1, reason = "why 1" }, v[3])
      -- batch = 2: the statements in two calls, numbered within each
      assert.equal(3, #llm.calls)
      assert.truthy(asked(llm, 2):find("1. A\n2. B", 1, true))
      assert.truthy(asked(llm, 2):find("[1] c1", 1, true))
      assert.truthy(asked(llm, 3):find("1. C", 1, true))
      assert.equal(3, r.usage.llm_calls)
      assert.equal(0, llm.calls[1].opts.temperature) -- a judge at temperature 0
    end)

    it("is 0 with no contexts (no verdict asked) and nil with no statements", function()
      local llm = support.scripted({ statements("A", "B"), statements() })
      local r = assert(ragas({
        { question = "q?", answer = "A and B", contexts = {} },
        { question = "q?", answer = "hello", contexts = { "c" } },
        { question = "q?", contexts = { "c" } },
      }, { llm = llm, metrics = { "faithfulness" } }))
      assert.equal(0, r.per_sample[1].faithfulness)
      assert.equal("no contexts", r.per_sample[1].verdicts.faithfulness[2].reason)
      assert.is_nil(r.per_sample[2].faithfulness)
      assert.equal("no statements in the answer", r.per_sample[2].unavailable.faithfulness)
      assert.equal("no answer", r.per_sample[3].unavailable.faithfulness)
      assert.equal(2, #llm.calls)
      -- the mean is over the samples that have a score
      assert.equal(0, r.scores.faithfulness)
      assert.equal(1, r.counts.faithfulness)
    end)
  end)

  describe("context_precision", function()
    it("is the mean of precision@k over the relevant ranks", function()
      local llm = support.scripted({ verdicts(0, 1), verdicts(1, 0, 1), verdicts(0, 0) })
      local s = { question = "张伟是哪个部门的？", answer = "张伟是教研部的",
        ground_truth = "张伟是教研部的成员" }
      local samples = {
        { question = s.question, answer = s.answer, ground_truth = s.ground_truth,
          contexts = { "牛顿发现了万有引力", "张伟 教研部工程师" } },
        { question = "q?", answer = "a", ground_truth = "g", contexts = { "x", "y", "z" } },
        { question = "q?", answer = "a", contexts = { "x", "y" } },
        { question = "q?", answer = "a", ground_truth = "g", contexts = {} },
      }
      local r = assert(ragas(samples, { llm = llm, metrics = { "context_precision" } }))
      -- seed 002, third row: (0/1 + 1/2) / 1
      assert.near(0.5, r.per_sample[1].context_precision, 1e-12)
      -- (1/1 + 2/3) / 2
      assert.near(5 / 6, r.per_sample[2].context_precision, 1e-12)
      assert.equal(0, r.per_sample[3].context_precision)
      assert.equal(0, r.per_sample[4].context_precision)
      assert.equal(3, #llm.calls)
      -- judged against the ground truth, else against the answer
      assert.truthy(asked(llm, 1):find("张伟是教研部的成员", 1, true))
      assert.truthy(asked(llm, 1):find("参考答案", 1, true)) -- the Chinese prompt
      assert.equal("answer", r.per_sample[3].verdicts.context_precision[1].against)
      assert.truthy(asked(llm, 3):find("Reference answer:\na\n", 1, true))
      assert.equal("ground_truth", r.per_sample[2].verdicts.context_precision[1].against)
      assert.near((0.5 + 5 / 6) / 4, r.scores.context_precision, 1e-12)
    end)
  end)

  describe("context_recall", function()
    it("is the share of the ground truth's statements the contexts support", function()
      local llm = support.scripted({ statements("G1", "G2"), verdicts(1, 0) })
      local r = assert(ragas({
        { question = "q?", answer = "a", ground_truth = "G1. G2.", contexts = { "c" } },
        { question = "q?", answer = "a", ground_truth = " ", contexts = { "c" } },
        { question = "q?", answer = "a", contexts = { "c" } },
      }, { llm = llm, metrics = { "context_recall" } }))
      assert.equal(0.5, r.per_sample[1].context_recall)
      assert.equal("G1", r.per_sample[1].verdicts.context_recall[1].statement)
      assert.equal("empty ground_truth", r.per_sample[2].unavailable.context_recall)
      assert.equal("no ground_truth", r.per_sample[3].unavailable.context_recall)
      assert.equal(0.5, r.scores.context_recall)
      assert.equal(2, #llm.calls)
    end)
  end)

  describe("answer_correctness", function()
    -- seed 002: answer "张伟是教研部负责大模型课程的同事", 2 statements each,
    -- TP 1, FP 1, FN 1: F1 = 1 / (1 + 0.5 x 2) = 0.5
    local answer, truth = "张伟是教研部负责大模型课程的同事。", "张伟是教研部负责大数据方向的同事."
    local function judge()
      return support.scripted({
        statements("张伟是教研部的", "张伟负责大模型课程"),
        statements("张伟是教研部的", "张伟负责大数据方向"),
        rag.json.encode({
          TP = { { statement = "张伟是教研部的", reason = "同" } },
          FP = { { statement = "张伟负责大模型课程", reason = "不同" } },
          FN = { { statement = "张伟负责大数据方向", reason = "缺" } },
        }),
      })
    end
    -- cosine 0.8 between the answer's and the ground truth's vectors
    local vectors = { [answer] = { 1, 0 }, [truth] = { 0.8, 0.6 } }
    local sample = { { question = "张伟是哪个部门的？", answer = answer, ground_truth = truth } }

    it("is 0.75 x F1 + 0.25 x similarity (seed 002)", function()
      local r = assert(ragas(sample, { llm = judge(), embedder = embedder(vectors),
        metrics = { "answer_correctness" } }))
      assert.near(0.75 * 0.5 + 0.25 * 0.8, r.scores.answer_correctness, 1e-12)
      local v = r.per_sample[1].verdicts.answer_correctness
      assert.equal(0.5, v.f1)
      assert.near(0.8, v.similarity, 1e-12)
      assert.equal("不同", v.FP[1].reason)
    end)

    it("takes the weights as options (a weighted mean)", function()
      local r = assert(ragas(sample, { llm = judge(), embedder = embedder(vectors),
        metrics = { "answer_correctness" }, weights = { factuality = 1, similarity = 1 } }))
      assert.near(0.65, r.scores.answer_correctness, 1e-12)
      -- no similarity weight: no embedder needed
      r = assert(ragas(sample, { llm = judge(), metrics = { "answer_correctness" },
        weights = { similarity = 0 } }))
      assert.equal(0.5, r.scores.answer_correctness)
      assert.is_nil(r.unavailable.answer_correctness)
    end)

    it("is F1 0 when the answer has no statements, and unavailable without a ground truth",
      function()
        local llm = support.scripted({ statements("G") })
        local e = embedder({ G = { 0, 1 } })
        local r = assert(ragas({
          { question = "q?", answer = "", ground_truth = "G" },
          { question = "q?", answer = "a", ground_truth = "" },
        }, { llm = llm, embedder = e, metrics = { "answer_correctness" } }))
        assert.equal(0, r.per_sample[1].answer_correctness)
        assert.equal(0, r.per_sample[1].verdicts.answer_correctness.similarity)
        assert.equal(0, e.calls) -- a blank answer's similarity is 0, not embedded
        assert.equal("G", r.per_sample[1].verdicts.answer_correctness.FN[1].statement)
        assert.equal("empty ground_truth", r.per_sample[2].unavailable.answer_correctness)
        assert.equal(1, #llm.calls)
      end)
  end)

  describe("answer_relevancy", function()
    local vectors = { ["q?"] = { 1, 0 }, q1 = { 1, 0 }, q2 = { 0, 1 }, q3 = { 0.6, 0.8 } }

    it("is the mean cosine of the question and the questions made from the answer", function()
      local llm = support.scripted({ '{"questions":["q1","q2","q3","q4"],"noncommittal":0}' })
      local r = assert(ragas({ { question = "q?", answer = "a" } },
        { llm = llm, embedder = embedder(vectors), metrics = { "answer_relevancy" } }))
      assert.near((1 + 0 + 0.6) / 3, r.scores.answer_relevancy, 1e-12)
      assert.same({ "q1", "q2", "q3" }, r.per_sample[1].verdicts.answer_relevancy.questions)
      assert.truthy(asked(llm, 1):find("Answer:\na", 1, true))
      assert.truthy(llm.calls[1].messages[1].content:find("Write 3 questions", 1, true))
    end)

    it("is 0 for a noncommittal or empty answer", function()
      local llm = support.scripted({ '{"questions":["q1"],"noncommittal":1}' })
      local r = assert(ragas({ { question = "q?", answer = "I don't know" },
        { question = "q?", answer = "" }, { question = " ", answer = "a" } },
        { llm = llm, embedder = embedder(vectors), metrics = { "answer_relevancy" },
          questions = 1 }))
      assert.equal(0, r.per_sample[1].answer_relevancy)
      assert.is_true(r.per_sample[1].verdicts.answer_relevancy.noncommittal)
      assert.equal(0, r.per_sample[2].answer_relevancy)
      assert.equal("empty question", r.per_sample[3].unavailable.answer_relevancy)
      assert.equal(1, #llm.calls)
    end)
  end)

  describe("offline", function()
    it("reports the metrics that need an llm or an embedder as unavailable", function()
      local r = assert(ragas({ { question = "q?", answer = "a", contexts = { "c" } } }))
      for _, m in ipairs({ "faithfulness", "answer_relevancy", "context_precision",
        "context_recall", "answer_correctness" }) do
        assert.equal("needs an llm", r.unavailable[m])
      end
      assert.same({}, r.scores)
      local llm = support.scripted({ statements("A"), verdicts(1), verdicts(1) })
      r = assert(ragas({ { question = "q?", answer = "a", contexts = { "c" } } }, { llm = llm }))
      assert.equal("needs an embedder", r.unavailable.answer_relevancy)
      assert.equal("needs an embedder", r.unavailable.answer_correctness)
      assert.equal(1, r.scores.faithfulness)
      assert.equal(1, r.scores.context_precision)
    end)
  end)

  describe("replies that do not parse", function()
    it("are asked again once", function()
      local llm = support.scripted({ "Sure! Here you go.", "```json\n" .. statements("A")
        .. "\n```", "verdict: " .. verdicts(1) })
      local r = assert(ragas({ { question = "q?", answer = "a", contexts = { "c" } } },
        { llm = llm, metrics = { "faithfulness" } }))
      assert.equal(1, r.scores.faithfulness)
      assert.equal(3, #llm.calls)
      assert.same({}, r.failures)
    end)

    it("then count as a failed verdict, reported and not guessed", function()
      local llm = support.scripted({ statements("A", "B"), verdicts(1), '{"verdicts": 1}',
        statements("C"), verdicts(0) })
      local r = assert(ragas({
        { question = "q?", answer = "a", contexts = { "c" } },
        { question = "q?", answer = "b", contexts = { "c" } },
      }, { llm = llm, metrics = { "faithfulness" } }))
      assert.is_nil(r.per_sample[1].faithfulness)
      assert.matches("expected {\"verdicts\": %[...%]} with 2 entries",
        r.per_sample[1].failed.faithfulness)
      assert.equal(1, #r.failures)
      assert.equal(1, r.failures[1].sample)
      assert.equal("faithfulness", r.failures[1].metric)
      assert.equal(0, r.scores.faithfulness)
      assert.equal(1, r.counts.faithfulness)
    end)
  end)

  describe("limits", function()
    it("end with budget and what was scored so far", function()
      local llm = support.scripted({ statements("A"), verdicts(1), statements("B"), verdicts(0) })
      local samples = {
        { question = "q?", answer = "a", contexts = { "c" } },
        { question = "q?", answer = "b", contexts = { "c" } },
      }
      local r, msg, code, partial = ragas(samples, { llm = llm, metrics = { "faithfulness" },
        limits = { llm_calls = 3 } })
      assert.is_nil(r)
      assert.equal("budget", code)
      assert.equal("rag.eval.ragas: llm call limit reached (3 calls)", msg)
      assert.equal(1, partial.per_sample[1].faithfulness)
      assert.equal(1, partial.scores.faithfulness)
      assert.equal(1, partial.counts.faithfulness)
      assert.equal(3, partial.usage.llm_calls)
      assert.equal("stop", partial.trace[#partial.trace].kind)
      -- steps: one per metric and sample
      r, msg, code, partial = ragas(samples, { llm = support.scripted({ statements("A"),
        verdicts(1) }), metrics = { "faithfulness" }, limits = { steps = 1 } })
      assert.is_nil(r)
      assert.equal("budget", code)
      assert.equal("rag.eval.ragas: step limit reached (1 step)", msg)
      assert.equal(1, partial.per_sample[1].faithfulness)
      assert.is_nil(partial.per_sample[2].faithfulness)
    end)

    it("stop at the deadline, by the run's clock", function()
      local clock = support.clock()
      local llm = support.scripted({ statements("A"), verdicts(1), statements("B") },
        { clock = clock, latency = 0.6 })
      local r, msg, code, partial = ragas({
        { question = "q?", answer = "a", contexts = { "c" } },
        { question = "q?", answer = "b", contexts = { "c" } },
      }, { llm = llm, metrics = { "faithfulness" }, clock = clock.now,
        limits = { deadline_ms = 1500 } })
      assert.is_nil(r)
      assert.equal("budget", code)
      assert.equal("rag.eval.ragas: deadline of 1500 ms passed during an llm call", msg)
      assert.equal(1, partial.per_sample[1].faithfulness)
      assert.is_nil(partial.per_sample[2].faithfulness)
    end)

    it("pass an embedder's failure on, and refuse a bad reply from it", function()
      local llm = support.scripted({ '{"questions":["q1"],"noncommittal":0}' }, {
        forever = '{"questions":["q1"],"noncommittal":0}' })
      local e = { embed = function()
        return nil, "rag.providers.openai.embed: timed out", "timeout"
      end }
      local sample = { { question = "q?", answer = "a" } }
      local r, msg, code, partial = ragas(sample, { llm = llm, embedder = e,
        metrics = { "answer_relevancy" } })
      assert.is_nil(r)
      assert.equal("timeout", code)
      assert.equal("rag.providers.openai.embed: timed out", msg)
      assert.is_table(partial.per_sample)
      e.embed = function()
        return { { 1, 0 } }
      end
      r, msg, code = ragas(sample, { llm = llm, embedder = e, metrics = { "answer_relevancy" } })
      assert.is_nil(r)
      assert.equal("provider", code)
      assert.equal("rag.eval.ragas: the embedder returned no list of 2 vectors", msg)
    end)

    it("pass an LLM's failure on with its code", function()
      local llm = support.scripted({ function()
        return nil, "rag.providers.openai: http 500", "http"
      end })
      local r, msg, code, partial = ragas({ { question = "q?", answer = "a", contexts = { "c" } } },
        { llm = llm, metrics = { "faithfulness" } })
      assert.is_nil(r)
      assert.equal("http", code)
      assert.equal("rag.providers.openai: http 500", msg)
      assert.same({}, partial.scores)
    end)
  end)

  describe("misuse", function()
    it("raises", function()
      assert.has_error(function()
        ragas({}, { nope = 1 })
      end, "rag.eval.ragas: unknown option 'nope'")
      assert.has_error(function()
        ragas({}, { metrics = { "bleu" } })
      end, "rag.eval.ragas: unknown metric 'bleu' (valid: faithfulness, answer_relevancy, "
        .. "context_precision, context_recall, answer_correctness)")
      assert.has_error(function()
        ragas({ { answer = 1 } })
      end, "rag.eval.ragas: samples[1].answer must be a string, got number")
      assert.has_error(function()
        ragas({ { contexts = { 1 } } })
      end, "rag.eval.ragas: samples[1].contexts[1] must be a string or { text = string }")
      assert.has_error(function()
        ragas({}, { weights = { factuality = 0, similarity = 0 } })
      end, "rag.eval.ragas: weights must not both be 0")
      assert.has_error(function()
        ragas("x")
      end, "rag.eval.ragas: samples must be a list, got string")
    end)
  end)
end)
