-- rag.prompts: every prompt renders in both languages with its slots; the
-- render function and its errors; overriding prompts; language detection.
local rag = require("rag")

local prompts = rag.prompts

local function sorted_names()
  local names = {}
  for name in pairs(prompts.slots) do
    names[#names + 1] = name
  end
  table.sort(names)
  return names
end

-- A value for every slot, each findable in the output.
local function values(name)
  local v = {}
  for _, s in ipairs(prompts.slots[name]) do
    v[s] = s == "n" and 4 or "<" .. s .. " value>"
  end
  v.refusal = nil -- from the set
  return v
end

describe("rag.prompts", function()
  it("has the twenty-eight prompts, the same in English and Chinese", function()
    -- the pipelines' thirteen, rag.pipeline.agent's three, rag.graph's two,
    -- rag.index's five enrichment prompts and rag.eval.ragas's five judge prompts
    assert.same({ "agent", "agent_retry", "agent_tools", "answer", "answer_strict", "check",
      "classify", "compress", "condense", "decompose", "direct", "enrich_doc_summary",
      "enrich_keywords", "enrich_questions", "enrich_summary", "enrich_title", "eval_context",
      "eval_correctness", "eval_questions", "eval_statements", "eval_support", "grade",
      "graph_community", "graph_extract", "hyde", "multi_query", "rewrite", "stepback" },
      sorted_names())
    for _, lang in ipairs({ "en", "zh" }) do
      local base = prompts[lang]
      assert.equal(lang, base.lang)
      for _, name in ipairs(sorted_names()) do
        assert.is_string(base[name].system, lang .. "." .. name)
        assert.is_string(base[name].user, lang .. "." .. name)
      end
    end
    assert.equal("I don't have enough information to answer this.", prompts.en.refusal)
    assert.equal("我没有足够的信息来回答这个问题。", prompts.zh.refusal)
  end)

  it("renders every prompt in both languages, using each of its slots", function()
    for _, lang in ipairs({ "en", "zh" }) do
      local set = prompts.get(lang)
      for _, name in ipairs(sorted_names()) do
        local m = prompts.messages(set, name, values(name))
        assert.equal(2, #m)
        assert.equal("system", m[1].role)
        assert.equal("user", m[2].role)
        local all = m[1].content .. "\n" .. m[2].content
        assert.is_nil(all:find("{[%l_][%l%d_]*}"), lang .. "." .. name .. " left a slot: " .. all)
        for _, s in ipairs(prompts.slots[name]) do
          local want = s == "n" and "4" or s == "refusal" and set.refusal or "<" .. s .. " value>"
          assert.truthy(all:find(want, 1, true), lang .. "." .. name .. " lacks " .. s)
        end
      end
    end
  end)

  it("lays out the answer prompt as the context layout says", function()
    local m = prompts.messages(prompts.get("en"), "answer",
      { question = "Why?", context = "[1] a.md\nBecause." })
    assert.equal("Context:\n[1] a.md\nBecause.\n\nQuestion: Why?", m[2].content)
    assert.truthy(m[1].content:find("like [1] or [2][3]", 1, true))
    assert.truthy(m[1].content:find("reply exactly: I don't have enough information to "
      .. "answer this.\n", 1, true))
    m = prompts.messages(prompts.get("zh"), "answer", { question = "为什么？", context = "[1] a" })
    assert.equal("上下文：\n[1] a\n\n问题：为什么？", m[2].content)
    assert.truthy(m[1].content:find("请原样回复：我没有足够的信息来回答这个问题。", 1, true))
  end)

  describe("json", function()
    it("reads a judge's JSON, bare, fenced or inside a sentence", function()
      assert.same({ a = { 1, 2 } }, prompts.json('{"a": [1, 2]}'))
      assert.same({ a = 1 }, prompts.json('```json\n{"a": 1}\n```'))
      assert.same({ 1 }, prompts.json("Here: [1]. Done"))
      local v, msg, code = prompts.json("no JSON here")
      assert.is_nil(v)
      assert.equal("rag.prompts.json: reply is not JSON", msg)
      assert.equal("decode", code)
      v, msg, code = prompts.json("x {bad} y")
      assert.is_nil(v)
      assert.matches("^rag%.prompts%.json: reply is not JSON: ", msg)
      assert.equal("decode", code)
      assert.has_error(function()
        prompts.json(1)
      end, "rag.prompts.json: text must be a string, got number")
    end)
  end)

  describe("render", function()
    it("fills slots, keeps other braces and ignores extra values", function()
      assert.equal("Q: why? n=3 {\"a\": 1} {Name} {}",
        prompts.render("Q: {question} n={n} {\"a\": 1} {Name} {}",
          { question = "why?", n = 3, unused = "x" }))
      assert.equal("100% {x}", prompts.render("{p} {x}", { p = "100%", x = "{x}" }))
    end)

    it("raises on a missing slot or a bad value", function()
      assert.has_error(function() prompts.render("Q: {question}", {}) end,
        "rag.prompts.render: no value for slot 'question'")
      assert.has_error(function() prompts.render("{n}", { n = true }) end,
        "rag.prompts.render: slot 'n' must be a string or number, got boolean")
      assert.has_error(function() prompts.render(nil, {}) end,
        "rag.prompts.render: template must be a string, got nil")
      assert.has_error(function() prompts.render("x", "y") end,
        "rag.prompts.render: slots must be a table, got string")
      assert.has_error(function()
        prompts.messages(prompts.get("en"), "grade", { question = "q" })
      end, "rag.prompts.messages: no value for slot 'document'")
      assert.has_error(function() prompts.messages(prompts.get("en"), "nope", {}) end,
        "rag.prompts.messages: unknown prompt 'nope'")
    end)
  end)

  describe("overrides", function()
    it("replace a prompt and the refusal in a new set", function()
      local set = prompts.get("en", {
        answer = { system = "S: {refusal}", user = "Sources:\n{context}\n\nQ: {question}" },
        refusal = "No idea.",
      })
      assert.same({ { role = "system", content = "S: No idea." },
        { role = "user", content = "Sources:\n[1] x\n\nQ: why" } },
        prompts.messages(set, "answer", { question = "why", context = "[1] x" }))
      -- a prompt without a system message gives one message
      set = prompts.get("zh", { rewrite = { user = "改写：{question}" } })
      assert.same({ { role = "user", content = "改写：天气" } },
        prompts.messages(set, "rewrite", { question = "天气" }))
      assert.equal("zh", set.lang)
      -- the built-in sets are untouched, also by editing a set
      prompts.get("en").rewrite.user = "edited {question}"
      assert.equal("Question: {question}", prompts.en.rewrite.user)
      assert.equal("Context:\n{context}\n\nQuestion: {question}", prompts.get("en").answer.user)
      -- a slot given by the caller wins over the set's refusal
      local m = prompts.messages(prompts.get("en"), "direct", { question = "q",
        refusal = "Nope." })
      assert.truthy(m[1].content:find("reply exactly: Nope.", 1, true))
    end)

    it("raise on unknown names, unknown slots and bad shapes", function()
      assert.has_error(function() prompts.get("fr") end,
        "rag.prompts.get: unknown language 'fr' (en or zh)")
      assert.has_error(function() prompts.get("en", { answr = { user = "x" } }) end,
        "rag.prompts.get: unknown prompt 'answr'")
      assert.has_error(function() prompts.get("en", { grade = { user = "{questoin}" } }) end,
        "rag.prompts.get: prompt 'grade' uses slot '{questoin}', which it does not get "
        .. "(question, document)")
      assert.has_error(function() prompts.get("en", { grade = "just text" }) end,
        "rag.prompts.get: prompt 'grade' must be { system = string|nil, user = string }")
      assert.has_error(function() prompts.get("en", { grade = { user = "x", sytem = "y" } }) end,
        "rag.prompts.get: prompt 'grade' has an unknown field 'sytem'")
      assert.has_error(function() prompts.get("en", { refusal = "" }) end,
        "rag.prompts.get: 'refusal' must be a non-empty string")
    end)
  end)

  it("lays out a conversation for condense", function()
    assert.equal("user: What is BM25?\nassistant: A ranking function. It scores documents.",
      prompts.history({ { role = "user", content = "What is BM25?" },
        { role = "assistant", content = "A ranking function.\n  It scores documents." } }))
    assert.equal("", prompts.history({}))
    assert.has_error(function() prompts.history({ { role = "user" } }) end,
      "rag.prompts.history: turns[1] must be { role = string, content = string }")
  end)

  it("detects Chinese by the share of Han characters", function()
    assert.equal("zh", prompts.detect("什么是检索增强生成？"))
    assert.equal("zh", prompts.detect("什么是BM25")) -- 3 Han, 2 letters
    assert.equal("zh", prompts.detect("RAG 和 BM25 有什么关系")) -- 6 Han, 5 letters
    assert.equal("en", prompts.detect("What does 检索 mean in this paper?")) -- 2 Han, 23 letters
    assert.equal("en", prompts.detect("hello"))
    assert.equal("en", prompts.detect(""))
  end)
end)
