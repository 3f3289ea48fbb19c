-- rag.pipeline against a real OpenAI-compatible server on 127.0.0.1
-- (spec/fixtures/llmd.py) through rag.providers.openai over libcurl
-- (issue 22, acceptance D): hybrid answers with citations and streams; a
-- timeout, a 429, a 5xx and a cut or stalled reply end the answer in
-- `nil, msg, code, partial` with the trace so far, well within a bound on
-- the wall time (a no-hang check, not a speed target); a failure in the
-- middle of a multi-call pipeline keeps the earlier trace entries.
local rag = require("rag")
local helpers = require("spec.helpers")
local shared = require("spec.support.pipeline")
local corpus, find = shared.corpus, shared.find

local KEY = "sk-CANARY-pipeD"
-- The client's timeout, in seconds; every failure must come back within
-- three times this.
local TIMEOUT = 0.5

local function steps(trace)
  local out = {}
  for _, e in ipairs(trace) do
    if e.kind == "step" then
      out[#out + 1] = e.name
    end
  end
  return table.concat(out, " ")
end

describe("rag.pipeline with a loopback LLM server (libcurl)", function()
  local base, stop

  setup(function()
    base, stop = helpers.start_httpd("llmd.py")
  end)

  teardown(function()
    stop()
  end)

  -- An OpenAI provider for a fresh model name: `prefix` picks llmd.py's
  -- behaviour, the "rag" tag makes it answer like an LLM in a pipeline.
  local function llm(prefix, extra)
    local o = { base_url = base .. "/v1", api_key = KEY, model = helpers.uniq_model(prefix),
      timeout = TIMEOUT, max_retries = 0 }
    for k, v in pairs(extra or {}) do
      o[k] = v
    end
    return rag.providers.openai(o)
  end

  local function hybrid(l, extra)
    local o = { index = corpus(), llm = l }
    for k, v in pairs(extra or {}) do
      o[k] = v
    end
    return rag.pipeline.hybrid(o)
  end

  it("hybrid answers through the server with citations that point at contexts", function()
    local index, d = corpus()
    local l = llm("ok:rag")
    local r = assert(hybrid(l):answer(d[3].title))
    assert.equal("The context answers the question [1]. It says more in [2].", r.text)
    assert.is_true(r.grounded)
    assert.is_true(#r.contexts >= 2)
    assert.same({ 1, 2 }, (function()
      local ns = {}
      for n in pairs(r.citations) do
        ns[#ns + 1] = n
      end
      table.sort(ns)
      return ns
    end)())
    for n, c in pairs(r.citations) do
      assert.equal(tostring(r.contexts[n].id), c.id)
      assert.equal(r.contexts[n].doc_id, c.doc_id)
    end
    assert.equal("retrieve rerank pack answer", steps(r.trace))
    local call = find(r.trace, "llm", "chat")
    assert.is_nil(call.error)
    assert.equal(7, call.prompt_tokens) -- the server's usage, not an estimate
    assert.equal(1, r.usage.llm_calls)
    local log = helpers.llmd_log(base, l.model)
    assert.equal(1, #log)
    assert.equal("/v1/chat/completions", log[1].path)
    local sent = log[1].body.messages
    assert.equal("system", sent[1].role)
    assert.truthy(sent[#sent].content:find("^Context:\n%[1%]"))
    assert.truthy(sent[#sent].content:find("Question: " .. d[3].title, 1, true))
    assert.is_true(index:count() > 0)
  end)

  it("hybrid streams the answer: the deltas join to the text", function()
    local _, d = corpus()
    local l = llm("ok:rag")
    local deltas = {}
    local r = assert(hybrid(l):answer(d[10].title, { stream = function(s)
      deltas[#deltas + 1] = s
    end }))
    assert.is_true(#deltas > 1)
    assert.equal(r.text, table.concat(deltas))
    assert.equal("The context answers the question [1]. It says more in [2].", r.text)
    assert.equal(tostring(r.contexts[1].id), r.citations[1].id)
    assert.is_true(helpers.llmd_log(base, l.model)[1].body.stream)
  end)

  -- name, llmd.py behaviour, the code, whether to stream, provider options
  local FAILURES = {
    { "a reply slower than the timeout", "slow5:rag", "timeout" },
    { "a streamed reply slower than the timeout", "slow5:rag", "timeout", true },
    { "a stream that stalls after two events", "stall5:rag", "timeout", true },
    { "429 with Retry-After", "e429x9r5:rag", "ratelimit" },
    { "429, one retry after Retry-After 0.2 s, 429 again", "e429x9r0.2:rag", "ratelimit",
      false, { max_retries = 1 } },
    { "500", "e500:rag", "http" },
    { "503", "e503:rag", "http" },
    { "503 on a streamed call", "e503:rag", "http", true },
    { "500 twice with retries", "e500x9:rag", "http", false, { max_retries = 2,
      sleep = function() end } },
    { "a reply cut in the middle of its body", "cut:rag", "http" },
    { "a stream cut after two events", "cut:rag", "http", true },
  }

  for _, f in ipairs(FAILURES) do
    local name, prefix, want, stream, extra = f[1], f[2], f[3], f[4], f[5]
    it("hybrid ends in nil, msg, '" .. want .. "' with the trace so far on " .. name, function()
      local _, d = corpus()
      local l = llm(prefix, extra)
      local deltas = {}
      local t0 = helpers.now()
      local r, msg, code, partial = hybrid(l):answer(d[3].title, stream and {
        stream = function(s) deltas[#deltas + 1] = s end } or nil)
      local took = helpers.now() - t0
      assert.is_nil(r)
      assert.equal(want, code, msg)
      assert.is_true(rag.errors.is_code(code))
      assert.truthy(msg:find("^rag%.providers%.openai%.chat: "), msg)
      assert.falsy(msg:find(KEY, 1, true), msg) -- e5xx bodies repeat the key
      assert.is_true(took < 3 * TIMEOUT, ("took %.2f s"):format(took))
      -- the partial result: what retrieval found and the trace up to the failure
      assert.is_table(partial)
      assert.is_true(#partial.contexts > 0)
      assert.same({}, partial.citations)
      assert.is_false(partial.grounded)
      assert.equal("retrieve rerank pack answer", steps(partial.trace))
      local retrieve = find(partial.trace, "step", "retrieve")
      assert.is_nil(retrieve.error)
      assert.is_true(retrieve.outputs.count > 0)
      local answer = find(partial.trace, "step", "answer")
      assert.equal(want, answer.code)
      assert.equal(msg, answer.error)
      assert.equal(want, find(partial.trace, "llm", "chat").code)
      assert.equal(1, partial.usage.llm_calls)
      assert.truthy(partial.trace:jsonl())
      if want == "ratelimit" then
        assert.truthy(msg:find("HTTP 429", 1, true), msg)
      end
      if stream and prefix:find("^cut") then
        assert.is_true(#deltas >= 1) -- what came before the cut was delivered
      end
      local log = helpers.llmd_log(base, l.model)
      assert.equal(extra and extra.max_retries and extra.max_retries + 1 or 1, #log)
    end)
  end

  it("a run's deadline cuts an llm call in flight, retries and their waits included", function()
    local _, d = corpus()
    for _, stream in ipairs({ false, true }) do
      -- the provider would wait 10 s and retry twice; the run allows 0.4 s
      local l = llm("slow5:rag", { timeout = 10, max_retries = 2 })
      local t0 = helpers.now()
      local r, msg, code, partial = hybrid(l, { limits = { deadline_ms = 400 } }):answer(
        d[3].title, stream and { stream = function() end } or nil)
      local took = helpers.now() - t0
      assert.is_nil(r)
      assert.equal("budget", code, msg)
      assert.truthy(msg:find("deadline of 400 ms passed during an llm call", 1, true), msg)
      assert.is_true(took < 1.2, ("took %.2f s"):format(took))
      assert.equal("timeout", find(partial.trace, "llm", "chat").code)
      assert.equal("deadline_ms", find(partial.trace, "stop", "chat").limit)
      assert.equal(1, #helpers.llmd_log(base, l.model)) -- no retry after the deadline
    end
  end)

  it("hybrid with rewrite: the rewrite call succeeds, the answer call times out", function()
    local _, d = corpus()
    local l = llm("okx1slow5:rag")
    local t0 = helpers.now()
    local r, msg, code, partial = hybrid(l, { rewrite = true }):answer(d[3].title)
    local took = helpers.now() - t0
    assert.is_nil(r)
    assert.equal("timeout", code, msg)
    assert.is_true(took < 3 * TIMEOUT, ("took %.2f s"):format(took))
    assert.equal("rewrite retrieve rerank pack answer", steps(partial.trace))
    local rewrite = find(partial.trace, "step", "rewrite")
    assert.is_nil(rewrite.error)
    assert.equal(d[3].title, rewrite.outputs) -- the server answers with the question
    assert.equal("timeout", find(partial.trace, "step", "answer").code)
    assert.equal(2, partial.usage.llm_calls)
  end)

  it("fusion: the multi-query call succeeds, the answer call gets 503; the trace keeps both",
    function()
      local index, d = corpus()
      local l = llm("okx1e503:rag")
      local p = rag.pipeline.fusion({ index = index, llm = l })
      local t0 = helpers.now()
      local r, msg, code, partial = p:answer(d[10].title)
      local took = helpers.now() - t0
      assert.is_nil(r)
      assert.equal("http", code, msg)
      assert.truthy(msg:find("HTTP 503", 1, true), msg)
      assert.is_true(took < 3 * TIMEOUT, ("took %.2f s"):format(took))
      local trace = partial.trace
      assert.equal("expand retrieve fuse pack answer", steps(trace))
      local expand = find(trace, "step", "expand")
      assert.is_nil(expand.error)
      assert.equal(1, expand.llm_calls)
      assert.is_nil(find(trace, "step", "retrieve").error)
      assert.is_nil(find(trace, "step", "fuse").error)
      assert.equal("http", find(trace, "step", "answer").code)
      local calls = {}
      for _, e in ipairs(trace) do
        if e.kind == "llm" then
          calls[#calls + 1] = e.code or "ok"
        end
      end
      assert.same({ "ok", "http" }, calls)
      assert.equal(2, partial.usage.llm_calls)
      assert.is_true(partial.usage.total_tokens > 0) -- the first call's usage counts
      local log = helpers.llmd_log(base, l.model)
      assert.equal(2, #log)
    end)

  it("a 503 from the server's embedder ends retrieval in 'http' before any LLM call",
    function()
      local emb = rag.providers.openai({ base_url = base .. "/v1", api_key = KEY,
        model = helpers.uniq_model("e503:rag"), timeout = TIMEOUT, max_retries = 0 })
      local index = rag.index.new({ embedder = emb })
      local l = llm("ok:rag")
      local p = rag.pipeline.hybrid({ index = index, llm = l, embedder = false })
      local r, msg, code, partial = p:answer("anything")
      assert.is_nil(r)
      assert.equal("http", code, msg)
      assert.truthy(msg:find("^rag%.providers%.openai%.embed: .*HTTP 503"), msg)
      assert.equal("retrieve", steps(partial.trace))
      assert.equal("http", find(partial.trace, "step", "retrieve").code)
      assert.equal(0, partial.usage.llm_calls)
      assert.equal(0, #helpers.llmd_log(base, l.model))
    end)
end)
