-- rag.llm: extractive answers cite only passages that exist and refuse
-- unrelated questions; every prompt of rag.prompts is recognised and played
-- offline; record then replay gives identical replies, and a request that
-- differs is an error.
local rag = require("rag")
local support = require("spec.support.llm")
local helpers = require("spec.helpers")

local llm_mod = rag.llm
local prompts = rag.prompts
local EN, ZH = prompts.get("en"), prompts.get("zh")

local PASSAGES = {
  { id = "bm25", source = "bm25.md", text = "BM25 ranks documents by term frequency and "
    .. "inverse document frequency. The parameter k1 controls term-frequency saturation." },
  { id = "rrf", source = "rrf.md", text = "Reciprocal rank fusion adds 1/(k + rank) over "
    .. "lists. The constant k is usually 60." },
  { id = "zh", source = "zh.md", text = "检索增强生成把检索和生成结合起来。它先检索相关文档，再让模型回答。" },
}

-- The packed context, as a pipeline makes it.
local CTX = assert(rag.pack(PASSAGES, { budget = 1000, order = "given" })).text

local function ask(llm, set, question, context)
  return assert(llm:chat(prompts.messages(set, "answer",
    { question = question, context = context or CTX }))).text
end

-- The [n] markers of a text, in order.
local function markers(s)
  local out = {}
  for n in s:gmatch("%[(%d+)%]") do
    out[#out + 1] = tonumber(n)
  end
  return out
end

describe("rag.llm.extractive", function()
  local llm = llm_mod.extractive()

  it("reads the context layout rag.pack makes", function()
    assert.equal("[1] bm25.md\nBM25 ranks documents by term frequency and inverse document "
      .. "frequency. The parameter k1 controls term-frequency saturation.\n\n[2] rrf.md\n"
      .. "Reciprocal rank fusion adds 1/(k + rank) over lists. The constant k is usually 60."
      .. "\n\n[3] zh.md\n检索增强生成把检索和生成结合起来。它先检索相关文档，再让模型回答。", CTX)
    local c = llm_mod._contexts(CTX)
    assert.equal(3, #c)
    assert.same({ n = 2, source = "rrf.md", text = PASSAGES[2].text }, c[2])
    -- a "[k]" line that is not the next number, or not at a line start, is text
    c = llm_mod._contexts("[1] a\nsee [2] below\n[3] not next\n\n[2] b\ntwo\n[2] again")
    assert.same({ { n = 1, source = "a", text = "see [2] below\n[3] not next" },
      { n = 2, source = "b", text = "two\n[2] again" } }, c)
    assert.same({}, llm_mod._contexts("no passages here"))
  end)

  it("answers with the most relevant sentences, each cited", function()
    -- terms {k1, control, bm25}: the k1 sentence covers two, the first
    -- sentence adds bm25; nothing else adds a term
    assert.equal("The parameter k1 controls term-frequency saturation. [1] BM25 ranks "
      .. "documents by term frequency and inverse document frequency. [1]",
      ask(llm, EN, "What does k1 control in BM25?"))
    assert.equal("The constant k is usually 60. [2]", ask(llm, EN, "What is k usually set to?"))
    assert.equal("检索增强生成把检索和生成结合起来。 [3]", ask(llm, ZH, "什么是检索增强生成？"))
  end)

  it("quotes prose, never a Markdown table or code block", function()
    -- the table and the fenced block hold the question's words more often
    -- than the prose sentence does, and have no full stop to end them
    local ctx = "[1] opts.md\n| option | default |\n| --- | --- |\n| overlap | 64 tokens |\n"
      .. "| overlap | overlap tokens |\n\n[2] more.md\n```\noverlap = 64 -- overlap tokens\n```"
      .. "\nThe overlap is the number of tokens neighbouring chunks share."
    assert.equal("The overlap is the number of tokens neighbouring chunks share. [2]",
      ask(llm, EN, "What is the overlap in tokens?", ctx))
  end)

  it("refuses when the context lacks the answer", function()
    assert.equal(EN.refusal, ask(llm, EN, "What is the capital of France?"))
    assert.equal(ZH.refusal, ask(llm, ZH, "法国的首都是哪里？"))
    -- one term of three is below min_coverage = 0.5
    assert.equal(EN.refusal, ask(llm, EN, "What is the frequency of the Nile river floods?"))
    assert.equal(EN.refusal, ask(llm, EN, "What does k1 control?", ""))
    assert.equal(EN.refusal, ask(llm, EN, "What?"))
  end)

  it("cites only passages that exist", function()
    local questions = { "What does k1 control in BM25?", "How does reciprocal rank fusion "
      .. "combine lists?", "k", "frequency", "检索增强生成", "What is 60?", "documents lists",
      "[4] [9] rank" }
    for _, q in ipairs(questions) do
      for _, n in ipairs(markers(ask(llm, EN, q))) do
        assert.is_true(n >= 1 and n <= 3, q .. " cited [" .. n .. "]")
      end
    end
    -- a question citing a number is not a passage either
    assert.same({ 2 }, markers(ask(llm, EN, "Is rank fusion in [4]?")))
  end)

  it("cites every passage a repeated sentence is in, once", function()
    local ctx = "[1] a\nRefunds take five days.\n\n[2] b\nRefunds take five days."
    assert.equal("Refunds take five days. [1][2]", ask(llm, EN, "How long do refunds take?",
      ctx))
  end)

  it("follows max_sentences and min_coverage", function()
    local one = llm_mod.extractive({ max_sentences = 1 })
    assert.equal("The parameter k1 controls term-frequency saturation. [1]",
      ask(one, EN, "What does k1 control in BM25?"))
    local strict = llm_mod.extractive({ min_coverage = 1 })
    assert.equal(EN.refusal, ask(strict, EN, "What does k1 control in lucene?"))
    assert.has_error(function() llm_mod.extractive({ max_sentences = 0 }) end,
      "rag.llm.extractive: 'max_sentences' must be in [1, 100]")
    assert.has_error(function() llm_mod.extractive({ bogus = true }) end,
      "rag.llm.extractive: unknown option 'bogus'")
  end)

  it("streams the reply and ignores other options", function()
    local deltas = {}
    local reply = assert(llm:chat(prompts.messages(EN, "answer",
      { question = "What is k usually set to?", context = CTX }),
      { stream = function(d) deltas[#deltas + 1] = d end, temperature = 0.2, max_tokens = 9 }))
    assert.equal(reply.text, table.concat(deltas))
    assert.same({ task = "answer", lang = "en", model = "extractive", finish_reason = "stop",
      text = "The constant k is usually 60. [2]" }, reply)
    assert.has_error(function() llm:chat("x", { stream = 1 }) end,
      "rag.llm.extractive.chat: 'stream' must be a function, got number")
    assert.has_error(function() llm:chat({}) end,
      "rag.llm.extractive.chat: messages must be a string or a non-empty list of messages")
  end)

  it("recognises every prompt of both languages but the judge's, two of the agent's, the "
    .. "graph's and the enrichment's",
    function()
    for _, set in ipairs({ EN, ZH }) do
      for name in pairs(prompts.slots) do
        local slots = { question = "q?", context = "[1] s\nt", document = "d", answer = "a",
          history = "user: h", n = 3, text = "t", statements = "1. s", reference = "r",
          truth = "1. g", tools = "search: s", tool_names = "search", scratchpad = "",
          error = "e", entities = "A, B", relations = "A knows B" }
        local reply = assert(llm:chat(prompts.messages(set, name, slots)))
        if name:match("^eval_") or name:match("^graph_") or name:match("^enrich_")
            or name == "agent_tools" or name == "agent_retry" then
          -- (agent_tools is for LLMs with function calling; agent_retry
          -- is sent as an observation, never alone; rag.graph's and
          -- rag.enrich's prompts go to a model, offline indexes take the
          -- heuristic path and the offline steps instead)
          -- not recognised: answered as a question, which no judge reply parses as
          assert.equal("answer", reply.task, set.lang .. "." .. name)
          assert.is_nil(prompts.json(reply.text))
        else
          assert.equal(name, reply.task, set.lang .. "." .. name)
          assert.equal(set.lang, reply.lang)
        end
      end
    end
  end)

  it("plays the other prompts offline", function()
    local function reply(set, name, slots)
      return assert(llm:chat(prompts.messages(set, name, slots))).text
    end
    local q = "How do BM25 and RRF differ?"
    for _, name in ipairs({ "rewrite", "multi_query", "hyde", "stepback", "decompose" }) do
      assert.equal(q, reply(EN, name, { question = "  " .. q, n = 3 }))
    end
    assert.equal(EN.refusal, reply(EN, "direct", { question = q }))
    assert.equal(ZH.refusal, reply(ZH, "direct", { question = "你好" }))
    -- grade: the share of {k1, control, bm25} in the document
    assert.equal("0.67", reply(EN, "grade", { question = "What does k1 control in BM25?",
      document = "The parameter k1 controls saturation." }))
    assert.equal("1", reply(EN, "grade", { question = "k1", document = PASSAGES[1].text }))
    assert.equal("0", reply(EN, "grade", { question = "capital of France",
      document = PASSAGES[1].text }))
    assert.equal("The parameter k1 controls term-frequency saturation.",
      reply(EN, "compress", { question = "What does k1 control?", document = PASSAGES[1].text }))
    assert.equal("NONE", reply(EN, "compress", { question = "capital of France",
      document = PASSAGES[1].text }))
    -- the second sentence adds 回答; Chinese sentences join without a space
    assert.equal(PASSAGES[3].text, reply(ZH, "compress", { question = "检索增强生成如何回答？",
      document = PASSAGES[3].text }))
    -- "是" is left alone once 什么 is removed: a lone character is no term
    assert.equal("1", reply(ZH, "grade", { question = "BM25 是什么？",
      document = PASSAGES[1].text }))
    assert.equal("yes", reply(EN, "check", { context = CTX,
      answer = "The parameter k1 controls saturation [1]. The constant k is 60 [2]." }))
    assert.equal("yes", reply(EN, "check", { context = CTX, answer = EN.refusal }))
    assert.equal("no: Paris is the capital of France.", reply(EN, "check", { context = CTX,
      answer = "k1 controls saturation [1]. Paris is the capital of France [1]." }))
    assert.equal("none", reply(EN, "classify", { question = "Hello!" }))
    assert.equal("none", reply(ZH, "classify", { question = "谢谢" }))
    assert.equal("single", reply(EN, "classify", { question = "What does k1 control?" }))
    assert.equal("iterative", reply(EN, "classify", { question = q }))
    assert.equal("iterative", reply(EN, "classify", { question = "Compare BM25 with RRF." }))
    assert.equal("iterative", reply(ZH, "classify", { question = "BM25 和 RRF 的区别是什么？" }))
    assert.equal("iterative", reply(EN, "classify", { question = "What is BM25? What is k1?" }))
    local history = prompts.history({ { role = "user", content = "What is BM25?" },
      { role = "assistant", content = "A ranking function [1]." } })
    assert.equal("How is it tuned? (What is BM25?)", reply(EN, "condense",
      { history = history, question = "How is it tuned?" }))
    assert.equal("What is RRF?", reply(EN, "condense", { history = history,
      question = "What is RRF?" }))
  end)

  it("answers messages that are no known prompt from their last question", function()
    local r = assert(llm:chat("Sources:\n" .. CTX .. "\n\nQuestion: What is k usually set to?"))
    assert.equal("answer", r.task)
    assert.equal("The constant k is usually 60. [2]", r.text)
    r = assert(llm:chat({ { role = "system", content = "Be helpful." },
      { role = "user", content = CTX .. "\n\n问题：什么是检索增强生成？" } }))
    assert.equal("检索增强生成把检索和生成结合起来。 [3]", r.text)
    assert.equal("zh", r.lang)
    assert.equal(EN.refusal, assert(llm:chat("What is the capital of France?")).text)
  end)

  it("recognises overridden prompts when given their set", function()
    local set = prompts.get("en", { answer = { system = "Cite [n]. Else: {refusal}",
      user = "Sources:\n{context}\n---\nAsk: {question}" }, refusal = "Nope." })
    local custom = llm_mod.extractive({ prompts = { set } })
    local r = assert(custom:chat(prompts.messages(set, "answer",
      { question = "What is k usually set to?", context = CTX })))
    assert.equal("answer", r.task)
    assert.equal("The constant k is usually 60. [2]", r.text)
    assert.equal("Nope.", ask(custom, set, "Capital of France?"))
  end)

  it("runs inside a run, which estimates its tokens", function()
    local run = rag.pipeline.runtime.new({ tokenizer = support.words })
    local r = assert(run:chat(llm, prompts.messages(EN, "answer",
      { question = "What is k usually set to?", context = CTX })))
    assert.equal("The constant k is usually 60. [2]", r.text)
    local u = run:usage()
    assert.is_true(u.estimated)
    assert.equal(7, u.completion_tokens) -- one token a word
  end)
end)

describe("rag.llm.record and rag.llm.replay", function()
  local path

  before_each(function()
    path = helpers.tmpname()
  end)

  after_each(function()
    os.remove(path)
  end)

  local QUESTIONS = { "What does k1 control in BM25?", "What is the capital of France?",
    "什么是检索增强生成？" }

  local function requests()
    local out = {}
    for i, q in ipairs(QUESTIONS) do
      out[i] = prompts.messages(prompts.get(prompts.detect(q)), "answer",
        { question = q, context = CTX })
    end
    return out
  end

  it("replays what was recorded, identically, in order", function()
    local rec = assert(llm_mod.record(llm_mod.extractive(), path))
    local first = {}
    for i, m in ipairs(requests()) do
      first[i] = assert(rec:chat(m, { temperature = 0 }))
    end
    local lines = 0
    for _ in io.lines(path) do
      lines = lines + 1
    end
    assert.equal(3, lines)
    local rep = assert(llm_mod.replay(path))
    for i, m in ipairs(requests()) do
      local r = assert(rep:chat(m, { temperature = 0 }))
      assert.same(first[i], r)
    end
    -- a fresh replay streams the same text
    rep = assert(llm_mod.replay(path))
    local deltas = {}
    local r = assert(rep:chat(requests()[1], { temperature = 0,
      stream = function(d) deltas[#deltas + 1] = d end }))
    assert.equal(first[1].text, table.concat(deltas))
    assert.equal(first[1].text, r.text)
  end)

  it("returns an error for a request that differs, saying where", function()
    local rec = assert(llm_mod.record(llm_mod.extractive(), path))
    for _, m in ipairs(requests()) do
      assert(rec:chat(m))
    end
    local rep = assert(llm_mod.replay(path))
    local reqs = requests()
    assert(rep:chat(reqs[1]))
    local was = reqs[2][2].content
    reqs[2][2].content = was:gsub("France", "Spain")
    local v, msg, code = rep:chat(reqs[2])
    assert.is_nil(v)
    assert.equal("provider", code)
    -- where: the byte of "France" (well past the start), and the text around it
    local at = assert(was:find("France", 1, true))
    assert.is_true(at > 60)
    local around = was:sub(at - 20, at - 1):gsub("\n", "\\n")
    assert.truthy(msg:find("^rag%.llm%.replay: request 2 differs from '.-' at "
      .. "messages%[2%]%.content %(byte " .. at .. "%): \"%.%.%."), msg)
    assert.truthy(msg:find(": \"..." .. around .. "Spain", 1, true), msg)
    assert.truthy(msg:find(", recorded \"..." .. around .. "France", 1, true), msg)
    -- options count as the request too
    rep = assert(llm_mod.replay(path))
    v, msg, code = rep:chat(requests()[1], { max_tokens = 5 })
    assert.is_nil(v)
    assert.equal("provider", code)
    assert.truthy(msg:find("at opts.max_tokens: \"5\", recorded nothing", 1, true), msg)
    -- past the end
    rep = assert(llm_mod.replay(path))
    for _, m in ipairs(requests()) do
      assert(rep:chat(m))
    end
    v, msg, code = rep:chat(requests()[1])
    assert.is_nil(v)
    assert.equal("provider", code)
    assert.truthy(msg:find("request 4, but '.-' records 3$"), msg)
  end)

  it("records failures and replays them as the same nil, msg, code", function()
    local scripted = support.scripted({ "fine", function()
      return nil, "rag.providers.openai.chat: HTTP 429: slow down", "ratelimit"
    end }, { usage = { prompt_tokens = 3, completion_tokens = 1 } })
    local rec = assert(llm_mod.record(scripted, path))
    assert.equal("fine", assert(rec:chat("a")).text)
    local v, msg, code = rec:chat("b")
    assert.is_nil(v)
    assert.equal("ratelimit", code)
    local rep = assert(llm_mod.replay(path))
    assert.same({ text = "fine", usage = { prompt_tokens = 3, completion_tokens = 1 } },
      assert(rep:chat("a")))
    local v2, msg2, code2 = rep:chat("b")
    assert.is_nil(v2)
    assert.equal(msg, msg2)
    assert.equal(code, code2)
  end)

  it("fails with io and format codes on files it cannot use", function()
    local v, msg, code = llm_mod.record(llm_mod.extractive(), "/nonexistent-dir/r.jsonl")
    assert.is_nil(v)
    assert.equal("io", code)
    assert.truthy(msg:find("^rag%.llm%.record: "), msg)
    v, msg, code = llm_mod.replay("/nonexistent-dir/r.jsonl")
    assert.is_nil(v)
    assert.equal("io", code)
    assert.truthy(msg:find("^rag%.llm%.replay: "), msg)
    helpers.write(path, '{"request":{"messages":[]},"reply":{"text":"x"}}\n{"oops":1}\n')
    v, msg, code = llm_mod.replay(path)
    assert.is_nil(v)
    assert.equal("format", code)
    assert.truthy(msg:find("line 2 is not a recorded exchange", 1, true), msg)
    assert.has_error(function() llm_mod.record({}, path) end,
      "rag.llm.record: llm must have a :chat(messages, opts) method")
    assert.has_error(function() llm_mod.replay(nil) end,
      "rag.llm.replay: path must be a string, got nil")
  end)
end)
