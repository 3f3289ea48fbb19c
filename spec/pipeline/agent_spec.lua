-- rag.pipeline.agent (issue 27, acceptance B): driven by scripted LLMs in
-- both protocols (ReAct text, and function calling, scripted and through
-- rag.providers.openai / ollama against spec/fixtures/llmd.py), the agent
-- calls the tools in the scripted order with the scripted arguments,
-- reports a tool's error back to the LLM and goes on, gives a malformed
-- call one corrective message and stops at the second in a row, and stops
-- at each limit with "budget". Offline with rag.llm.extractive it searches
-- once and answers with a citation.
local rag = require("rag")
local helpers = require("spec.helpers")
local support = require("spec.support.llm")
local shared = require("spec.support.pipeline")
local find, user_message = shared.find, shared.user_message

local BM25 = "BM25 ranks documents by term frequency and inverse document frequency. "
  .. "The parameter k1 controls term-frequency saturation."
local RRF = "Reciprocal rank fusion adds 1/(k + rank) over lists. The constant k is usually 60."

local DOCS = {
  bm25 = { id = "bm25", source = "bm25.md", text = BM25 },
  rrf = { id = "rrf", source = "rrf.md", text = RRF },
}

-- An index with fixed answers: "k1" finds the BM25 chunk, "fusion" the
-- RRF one; it records each search.
local function fake_index()
  local idx = { searches = {} }
  function idx.search(_, q, opts)
    idx.searches[#idx.searches + 1] = { q = q, opts = opts }
    if q:find("k1") then
      return { { id = "bm25#1", doc_id = "bm25", source = "bm25.md", text = BM25, start = 1,
        stop = #BM25 } }
    elseif q:find("fusion") then
      return { { id = "rrf#1", doc_id = "rrf", source = "rrf.md", text = RRF, start = 1,
        stop = #RRF } }
    end
    return {}
  end
  function idx.get(_, id)
    return DOCS[id]
  end
  return idx
end

-- What the search and read tools show, worked out from the layout
-- "[n] source (id: doc id)" and the text.
local SHOW_BM25 = "[1] bm25.md (id: bm25)\n" .. BM25
local SHOW_RRF_2 = "[2] rrf.md (id: rrf)\n" .. RRF

-- A user tool that records what it got.
local function calc_tool(log, fn)
  return { name = "calc", description = "Adds two numbers.",
    parameters = { type = "object", properties = { a = { type = "number" },
      b = { type = "number" } }, required = { "a", "b" } },
    fn = fn or function(args)
      log[#log + 1] = args
      return tostring(args.a + args.b)
    end }
end

-- The tool steps of a trace: { name, arguments, error, code, outputs }.
local function tool_steps(trace)
  local out = {}
  for _, e in ipairs(trace) do
    if e.kind == "step" and e.name == "tool" then
      out[#out + 1] = { name = e.inputs.name, arguments = e.inputs.arguments, error = e.error,
        code = e.code, outputs = e.outputs }
    end
  end
  return out
end

local function branches(trace, name)
  local out = {}
  for _, e in ipairs(trace) do
    if e.kind == "branch" and e.name == name then
      out[#out + 1] = e.why
    end
  end
  return out
end

-- {====== Scripts in both protocols ======}

-- A ReAct reply calling `name` with the input text `input`, and a final one.
local function act(name, input)
  return "Thought: I need the tool.\nAction: " .. name .. "\nAction Input: " .. input
end
local function final(text)
  return "Thought: I now know the final answer.\nFinal Answer: " .. text
end

-- The same script for function calling: a call is { name, arguments
-- table or text }.
local function fc_call(name, args, id)
  return { text = "", tool_calls = { { id = id or ("c-" .. name), name = name,
    arguments = type(args) == "table" and args or nil,
    raw = type(args) == "string" and args or nil } } }
end

-- A scripted LLM for `protocol` from steps { "call", name, args } or
-- { "final", text }; ReAct gets the args as JSON text (or the text given).
local function scripted(protocol, steps, opts)
  local replies = {}
  for i, s in ipairs(steps) do
    if s[1] == "final" then
      replies[i] = protocol == "react" and final(s[2]) or s[2]
    elseif protocol == "react" then
      replies[i] = act(s[2], type(s[3]) == "string" and s[3]
        or rag.json.encode(next(s[3]) and s[3] or rag.json.object()))
    else
      replies[i] = fc_call(s[2], s[3])
    end
  end
  local llm = support.scripted(replies, opts)
  if protocol == "tools" then
    llm.supports_tools = true
  end
  return llm
end

-- The observation the LLM saw for its turn `n` (1-based), in either
-- protocol: the text after the n-th "Observation: " of the last call's
-- scratchpad, or the n-th tool message.
local function observations(llm)
  local last = llm.calls[#llm.calls].messages
  local out = {}
  if #last == 2 then -- ReAct: one system and one user message
    local pad = last[2].content
    for obs in (pad .. "Thought:"):gmatch("\nObservation: (.-)\nThought:") do
      out[#out + 1] = obs
    end
  else
    for _, m in ipairs(last) do
      if m.role == "tool" then
        out[#out + 1] = m.content
      end
    end
  end
  return out
end

local Q = "What does k1 control in BM25?"

for _, protocol in ipairs({ "react", "tools" }) do
  describe("rag.pipeline.agent (" .. protocol .. ", scripted)", function()
    it("calls the tools in the scripted order with the scripted arguments", function()
      local idx, got = fake_index(), {}
      local llm = scripted(protocol, {
        { "call", "search", { query = "k1 saturation" } },
        { "call", "calc", { a = 2, b = 3 } },
        { "call", "read", { id = "rrf" } },
        { "final", "k1 controls term-frequency saturation [1]. RRF adds 1/(k + rank) [2]. "
          .. "See also [7]." },
      })
      local p = rag.pipeline.agent({ index = idx, llm = llm, tools = { calc_tool(got) } })
      local r = assert(p:answer(Q))
      assert.equal(protocol, r.protocol)
      -- the order and the arguments each tool got
      assert.equal(1, #idx.searches)
      assert.equal("k1 saturation", idx.searches[1].q)
      assert.same({ { a = 2, b = 3 } }, got)
      local steps = tool_steps(r.trace)
      assert.same({ "search", "calc", "read" }, { steps[1].name, steps[2].name, steps[3].name })
      assert.same({ query = "k1 saturation" }, steps[1].arguments)
      assert.same({ a = 2, b = 3 }, steps[2].arguments)
      assert.same({ id = "rrf" }, steps[3].arguments)
      assert.equal(4, #llm.calls)
      -- each observation went back to the LLM
      assert.same({ SHOW_BM25, "5", SHOW_RRF_2 }, observations(llm))
      -- [7] points at nothing and is removed; [1] and [2] are the snippets
      assert.equal("k1 controls term-frequency saturation [1]. RRF adds 1/(k + rank) [2]. "
        .. "See also.", r.text)
      assert.equal(2, #r.contexts)
      assert.equal("bm25#1", r.citations[1].id)
      assert.equal("bm25", r.citations[1].doc_id)
      assert.equal("rrf", r.citations[2].id)
      assert.equal(1, r.citations[2].start)
      assert.equal(#RRF, r.citations[2].stop)
      assert.is_true(r.grounded)
      assert.same({ "markers pointing at no context: [7]" }, branches(r.trace, "removed_citations"))
      assert.equal(4, r.usage.llm_calls)
      assert.equal(3, r.usage.steps)
    end)

    it("keeps a snippet's number when a tool shows it again", function()
      local llm = scripted(protocol, {
        { "call", "search", { query = "k1" } },
        { "call", "search", { query = "fusion" } },
        { "call", "search", { query = "k1 again" } },
        { "final", "Both [1][2]." },
      })
      local r = assert(rag.pipeline.agent({ index = fake_index(), llm = llm }):answer(Q))
      assert.same({ SHOW_BM25, "[2] rrf.md (id: rrf)\n" .. RRF, SHOW_BM25 }, observations(llm))
      assert.equal(2, #r.contexts)
    end)

    it("reports a tool's error to the LLM and goes on", function()
      local llm = scripted(protocol, {
        { "call", "calc", { a = 1, b = 0 } },
        { "call", "boom", { } },
        { "call", "search", { query = "k1" } },
        { "final", "k1 controls saturation [1]." },
      })
      local p = rag.pipeline.agent({ index = fake_index(), llm = llm, tools = {
        calc_tool(nil, function() return nil, "calc: division by zero", "provider" end),
        { name = "boom", description = "Always fails.", fn = function() error("it broke") end },
      } })
      local r = assert(p:answer(Q))
      local obs = observations(llm)
      assert.equal("Error: calc: division by zero", obs[1])
      assert.truthy(obs[2]:find("^Error: rag%.pipeline%.agent: tool 'boom' raised: .*it broke"))
      assert.equal(SHOW_BM25, obs[3])
      local steps = tool_steps(r.trace)
      assert.equal("calc: division by zero", steps[1].error)
      assert.equal("provider", steps[1].code)
      assert.truthy(steps[2].error:find("it broke", 1, true))
      assert.equal("k1 controls saturation [1].", r.text)
      assert.is_true(r.grounded)
    end)

    it("gives a malformed call one corrective message, then goes on", function()
      for _, bad in ipairs({
        { { "call", "nosuch", { query = "x" } }, 'there is no tool "nosuch" (the tools are: '
          .. "search, read, calc)" },
        { { "call", "calc", { a = 1 } }, "the arguments of 'calc' do not fit its parameters: "
          .. "argument 'b' is required" },
        { { "call", "calc", { a = 1, b = "two" } }, "the arguments of 'calc' do not fit its "
          .. "parameters: argument 'b' must be of type number" },
        { { "call", "search", "{query: k1}" }, "the arguments of 'search' are not a JSON object: "
          .. '"{query: k1}"' },
      }) do
        local got = {}
        local llm = scripted(protocol, { bad[1], { "call", "calc", { a = 2, b = 2 } },
          { "final", "four" } })
        local p = rag.pipeline.agent({ index = fake_index(), llm = llm, tools = {
          calc_tool(got) } })
        local r = assert(p:answer(Q))
        local want = "Your last reply could not be used: " .. bad[2] .. ". Call one of the "
          .. "tools (search, read, calc) with arguments that match its parameters, or give "
          .. "your final answer."
        assert.same({ want, "4" }, observations(llm))
        assert.same({ { a = 2, b = 2 } }, got) -- the malformed call ran nothing
        assert.same({ bad[2] }, branches(r.trace, "malformed"))
        assert.equal(1, #tool_steps(r.trace))
        assert.equal("four", r.text)
      end
    end)

    it("stops at a second malformed call in a row, with code 'provider'", function()
      local got = {}
      local llm = scripted(protocol, { { "call", "nosuch", {} }, { "call", "calc", { a = 1 } },
        { "final", "never asked" } })
      local p = rag.pipeline.agent({ index = fake_index(), llm = llm, tools = {
        calc_tool(got) } })
      local r, msg, code, partial = p:answer(Q)
      assert.is_nil(r)
      assert.equal("provider", code)
      assert.equal("rag.pipeline.agent: a second malformed tool call in a row: the arguments "
        .. "of 'calc' do not fit its parameters: argument 'b' is required", msg)
      assert.equal(2, #llm.calls)
      assert.same({}, got)
      assert.equal(0, #tool_steps(partial.trace))
      assert.equal(2, #branches(partial.trace, "malformed"))
    end)

    it("forgives a malformed call once a good one came between", function()
      local llm = scripted(protocol, { { "call", "nosuch", {} }, { "call", "search",
        { query = "k1" } }, { "call", "nosuch", {} }, { "final", "k1 [1]" } })
      local r = assert(rag.pipeline.agent({ index = fake_index(), llm = llm }):answer(Q))
      assert.equal("k1 [1]", r.text)
      assert.equal(2, #branches(r.trace, "malformed"))
    end)

    describe("stops at each limit with code 'budget'", function()
      -- an LLM that searches forever
      local function forever(o)
        local l = scripted(protocol, {}, o)
        l.forever = protocol == "react" and act("search", '{"query": "k1"}')
          or fc_call("search", { query = "k1" })
        return l
      end

      local function stopped(partial, limit)
        local e = find(partial.trace, "stop")
        assert.is_table(e, "no stop entry")
        assert.equal(limit, e.limit)
        assert.equal("budget", e.code)
      end

      it("steps: each tool call is a step", function()
        local llm = forever()
        local r, msg, code, partial = rag.pipeline.agent({ index = fake_index(), llm = llm,
          limits = { steps = 2 } }):answer(Q)
        assert.is_nil(r)
        assert.equal("budget", code)
        assert.equal("rag.pipeline.agent: step limit reached (2 steps)", msg)
        assert.equal(2, #tool_steps(partial.trace))
        assert.equal(3, #llm.calls) -- the third call's tool was refused
        stopped(partial, "steps")
        assert.equal(1, #partial.contexts) -- what the tools showed so far
      end)

      it("llm_calls", function()
        local llm = forever()
        local r, msg, code, partial = rag.pipeline.agent({ index = fake_index(), llm = llm,
          limits = { llm_calls = 3 } }):answer(Q)
        assert.is_nil(r)
        assert.equal("budget", code)
        assert.equal("rag.pipeline.agent: llm call limit reached (3 calls)", msg)
        assert.equal(3, #llm.calls)
        assert.equal(3, #tool_steps(partial.trace))
        stopped(partial, "llm_calls")
      end)

      it("tokens", function()
        -- each reply reports 1000 + 10 tokens; the second call's prompt
        -- (well over 90 tokens) would pass 1100
        local llm = forever({ usage = { prompt_tokens = 1000, completion_tokens = 10 } })
        if protocol == "tools" then
          llm.forever.usage = { prompt_tokens = 1000, completion_tokens = 10 }
        end
        local r, msg, code, partial = rag.pipeline.agent({ index = fake_index(), llm = llm,
          limits = { tokens = 1100 } }):answer(Q)
        assert.is_nil(r)
        assert.equal("budget", code)
        assert.truthy(msg:find("^rag%.pipeline%.agent: token limit reached %(1010 used"))
        assert.equal(1, #llm.calls)
        assert.equal(1, #tool_steps(partial.trace))
        stopped(partial, "tokens")
      end)

      it("deadline_ms", function()
        -- each LLM call takes 0.4 s: the third ends at 1.2 s, past 1000 ms
        local clock = support.clock()
        local llm = forever({ clock = clock, latency = 0.4 })
        local r, msg, code, partial = rag.pipeline.agent({ index = fake_index(), llm = llm,
          clock = clock.now, limits = { deadline_ms = 1000 } }):answer(Q)
        assert.is_nil(r)
        assert.equal("budget", code)
        assert.equal("rag.pipeline.agent: deadline of 1000 ms passed during an llm call", msg)
        assert.equal(3, #llm.calls)
        assert.equal(2, #tool_steps(partial.trace))
        stopped(partial, "deadline_ms")
      end)

      it("max_steps: the turns of the loop", function()
        local llm = forever()
        local r, msg, code, partial = rag.pipeline.agent({ index = fake_index(), llm = llm,
          max_steps = 2 }):answer(Q)
        assert.is_nil(r)
        assert.equal("budget", code)
        assert.equal("rag.pipeline.agent: no final answer after 2 turns (max_steps)", msg)
        assert.equal(2, #llm.calls)
        assert.equal(2, #tool_steps(partial.trace))
      end)
    end)

    it("retrieves the snippets the tools showed, and streams the final answer once",
      function()
        local llm = scripted(protocol, { { "call", "search", { query = "k1" } },
          { "call", "search", { query = "fusion" } }, { "final", "Both [1][2][3]." },
          { "call", "search", { query = "fusion" } }, { "final", "RRF [1]." } })
        local p = rag.pipeline.agent({ index = fake_index(), llm = llm })
        local pieces = {}
        local r = assert(p:answer(Q, { stream = function(d) pieces[#pieces + 1] = d end }))
        assert.same({ "Both [1][2]." }, pieces) -- validated: [3] is gone
        local hits = assert(p:retrieve(Q))
        assert.same({ "rrf#1" }, shared.ids(hits))
        assert.equal(2, #r.contexts)
      end)
  end)
end

describe("rag.pipeline.agent with rag.llm.record and replay", function()
  it("replays a function-calling run: the same calls and answer", function()
    local path = os.tmpname()
    local function run(llm)
      local got = {}
      local r = assert(rag.pipeline.agent({ index = fake_index(), llm = llm,
        tools = { calc_tool(got) } }):answer(Q))
      return r, got
    end
    local live = scripted("tools", { { "call", "search", { query = "k1" } },
      { "call", "calc", { a = 1, b = 2 } }, { "final", "k1 [1], 3" } })
    local rec = assert(rag.llm.record(live, path))
    assert.is_true(rec.supports_tools)
    local r1, got1 = run(rec)
    local again = assert(rag.llm.replay(path))
    assert.is_true(again.supports_tools)
    local r2, got2 = run(again)
    os.remove(path)
    assert.equal("tools", r2.protocol)
    assert.equal(r1.text, r2.text)
    assert.same({ { a = 1, b = 2 } }, got1)
    assert.same(got1, got2)
  end)
end)

describe("rag.pipeline.agent (ReAct parsing)", function()
  it("reads an Action Input in a code fence and ignores a made-up observation", function()
    local idx = fake_index()
    local llm = support.scripted({
      "Thought: search\nAction: `search`\nAction Input: ```json\n{\"query\": \"k1\"}\n```\n"
        .. "Observation: I made this up",
      final("k1 [1]"),
    })
    local r = assert(rag.pipeline.agent({ index = idx, llm = llm }):answer(Q))
    assert.equal("k1", idx.searches[1].q)
    assert.equal("Question: " .. Q .. "\nThought: search\nAction: `search`\nAction Input: "
      .. "```json\n{\"query\": \"k1\"}\n```\nObservation: " .. SHOW_BM25 .. "\n",
      user_message(llm.calls[2]))
    assert.equal("k1 [1]", r.text)
  end)

  it("takes a reply with neither Action nor Final Answer as malformed", function()
    local llm = support.scripted({ "I think the answer is 42.", final("42") })
    local r = assert(rag.pipeline.agent({ index = fake_index(), llm = llm }):answer(Q))
    assert.same({ "the reply has neither an 'Action:' nor a 'Final Answer:'" },
      branches(r.trace, "malformed"))
    assert.equal("42", r.text)
    assert.is_false(r.grounded)
  end)

  it("asks in Chinese for a Chinese question, with the same labels", function()
    local llm = support.scripted({ final("不知道") })
    assert(rag.pipeline.agent({ index = fake_index(), llm = llm }):answer("k1 控制什么？"))
    local sys = llm.calls[1].messages[1].content
    assert.truthy(sys:find("你借助工具回答用户的问题", 1, true))
    assert.truthy(sys:find("Action Input:", 1, true))
  end)
end)

describe("rag.pipeline.agent offline (rag.llm.extractive)", function()
  it("searches the question once, then answers citing what it found", function()
    local idx = rag.index.new({})
    assert(idx:add_many({ { id = "bm25", source = "bm25.md", text = BM25 },
      { id = "rrf", source = "rrf.md", text = RRF } }))
    local r = assert(rag.pipeline.agent({ index = idx }):answer(Q))
    assert.equal("react", r.protocol)
    assert.equal("The parameter k1 controls term-frequency saturation. [1] BM25 ranks documents "
      .. "by term frequency and inverse document frequency. [1]", r.text)
    assert.equal("bm25", r.citations[1].doc_id)
    assert.is_true(r.grounded)
    local steps = tool_steps(r.trace)
    assert.equal(1, #steps)
    assert.same({ query = Q }, steps[1].arguments)
    assert.equal(2, r.usage.llm_calls)
  end)

  it("gives the refusal when the search finds nothing useful", function()
    local idx = rag.index.new({})
    assert(idx:add({ id = "bm25", source = "bm25.md", text = BM25 }))
    local r = assert(rag.pipeline.agent({ index = idx }):answer("Who painted the Mona Lisa?"))
    assert.equal("I don't have enough information to answer this.", r.text)
    assert.is_false(r.grounded)
  end)
end)

describe("rag.pipeline.agent options", function()
  it("raises on bad tools and options", function()
    local idx = fake_index()
    local function bad(tools, pattern, extra)
      local o = { index = idx, tools = tools }
      for k, v in pairs(extra or {}) do
        o[k] = v
      end
      local ok, err = pcall(rag.pipeline.agent, o)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(pattern, 1, true), tostring(err))
    end
    bad({ { name = "x", description = "d" } }, "tools[1]: 'fn' must be a function")
    bad({ { name = "search", description = "d", fn = print } },
      "tools[1]: a tool named 'search' already exists")
    bad({ { name = "two words", description = "d", fn = print } }, "tools[1]: 'name' must be")
    bad({ { name = "x", description = "d", fn = print, extra = 1 } },
      "tools[1] has an unknown field 'extra'")
    bad({ { name = "x", description = "d", fn = print, parameters = { type = "string" } } },
      "tools[1]: 'parameters' must be a JSON schema table")
    bad({ { name = "x", description = "d", fn = print, parameters = { required = "a" } } },
      "tools[1]: 'parameters.required' must be a list of strings")
    bad({ { name = "x", description = "d", fn = print, parameters = { properties = 1 } } },
      "tools[1]: 'parameters.properties' must be a table")
    bad(nil, "option 'answer' is not used", { answer = function() end })
    bad(nil, "'websearch' must have a :search", { websearch = {} })
    bad(nil, "'protocol' must be one of", { protocol = "xml" })
  end)

  it("works with user tools only, without an index", function()
    local llm = support.scripted({ act("calc", '{"a": 1, "b": 2}'), final("3") })
    local r = assert(rag.pipeline.agent({ llm = llm, tools = { calc_tool({}) } }):answer("1+2?"))
    assert.equal("3", r.text)
    assert.truthy(llm.calls[1].messages[1].content:find("one of [calc]", 1, true))
  end)

  it("lets a user tool show citable snippets through ctx.cite; read reports a missing id",
    function()
      local seen
      local lookup = { name = "lookup", description = "Looks up a term.",
        parameters = { type = "object", properties = { term = { type = "string" } } },
        fn = function(args, ctx)
          seen = ctx.question
          return ctx.cite({ { id = "glossary#" .. args.term, source = "glossary",
            text = args.term .. " is a parameter." } })
        end }
      local llm = support.scripted({ act("read", '{"id": "nope"}'),
        act("lookup", '{"term": "k1"}'), final("k1 is a parameter [1].") })
      local r = assert(rag.pipeline.agent({ index = fake_index(), llm = llm,
        tools = { lookup } }):answer(Q))
      assert.same({ "Error: rag.pipeline.agent: read: no document with id 'nope'",
        "[1] glossary\nk1 is a parameter." }, observations(llm))
      assert.equal(Q, seen)
      assert.equal("glossary#k1", r.citations[1].id)
      assert.is_true(r.grounded)
    end)

  it("searches the web with the websearch option", function()
    local web = { search = function(_, q, o)
      return { { id = "https://example.org/mmr", source = "https://example.org/mmr",
        doc_id = "https://example.org/mmr", text = "MMR picks passages. " .. q .. " " .. o.k } }
    end }
    local llm = support.scripted({ act("websearch", '{"query": "mmr"}'), final("MMR [1]") })
    local r = assert(rag.pipeline.agent({ index = fake_index(), llm = llm, websearch = web,
      k = 2 }):answer(Q))
    assert.same({ "[1] https://example.org/mmr\nMMR picks passages. mmr 2" }, observations(llm))
    assert.equal("https://example.org/mmr", r.citations[1].id)
  end)
end)

describe("rag.pipeline.agent with function calling over HTTP (llmd.py)", function()
  local base, stop

  setup(function()
    base, stop = helpers.start_httpd("llmd.py")
  end)

  teardown(function()
    stop()
  end)

  -- Scripts llmd.py's replies for a new model; returns the model name.
  local function script(replies)
    local model = helpers.uniq_model("agent-")
    assert(rag.http.request({ url = base .. "/_script", headers = {
      ["Content-Type"] = "application/json" },
      body = rag.json.encode({ model = model, replies = replies }) }))
    return model
  end

  local function call(id, name, args)
    return { content = rag.json.null, tool_calls = { { id = id, name = name,
      arguments = args } } }
  end

  for _, kind in ipairs({ "openai", "ollama" }) do
    local function llm(model)
      return rag.providers[kind]({ base_url = base .. (kind == "openai" and "/v1" or ""),
        model = model, api_key = "none", timeout = 5, max_retries = 0 })
    end

    it(kind .. ": calls the tools in order; tool results go back by call id", function()
      local model = script({ call("c1", "search", '{"query": "k1"}'),
        call("c2", "calc", '{"a": 20, "b": 22}'),
        { content = "k1 controls saturation [1]; the sum is 42." } })
      local got = {}
      local p = rag.pipeline.agent({ index = fake_index(), llm = llm(model),
        tools = { calc_tool(got) } })
      local r = assert(p:answer(Q))
      assert.equal("tools", r.protocol)
      assert.equal("k1 controls saturation [1]; the sum is 42.", r.text)
      assert.is_true(r.grounded)
      assert.same({ { a = 20, b = 22 } }, got)
      local log = helpers.llmd_log(base, model)
      assert.equal(3, #log)
      local names = {}
      for i, t in ipairs(log[1].body.tools) do
        assert.equal("function", t.type)
        names[i] = t["function"].name
      end
      assert.same({ "search", "read", "calc" }, names)
      assert.same({ "a", "b" }, log[1].body.tools[3]["function"].parameters.required)
      local m = log[3].body.messages
      -- system, user, assistant (c1), tool (c1), assistant (c2), tool (c2)
      assert.equal(6, #m)
      assert.equal("assistant", m[3].role)
      assert.equal("search", m[3].tool_calls[1]["function"].name)
      assert.equal("tool", m[4].role)
      assert.equal(SHOW_BM25, m[4].content)
      assert.equal("42", m[6].content)
      if kind == "openai" then
        assert.equal("c1", m[3].tool_calls[1].id)
        assert.equal('{"query":"k1"}', m[3].tool_calls[1]["function"].arguments)
        assert.equal("c1", m[4].tool_call_id)
        assert.equal("c2", m[6].tool_call_id)
        assert.equal("auto", log[1].body.tool_choice)
      else
        assert.same({ query = "k1" }, m[3].tool_calls[1]["function"].arguments)
        assert.equal("search", m[4].tool_name)
        assert.equal("calc", m[6].tool_name)
      end
      -- the server's usage, not estimates
      assert.equal(3, r.usage.llm_calls)
      assert.is_false(r.usage.estimated)
    end)

    it(kind .. ": a malformed call gets one retry, a second one in a row stops", function()
      local model = script({ call("c1", "search", "{query: k1"), call("c2", "search",
        '{"query": "k1"}'), call("c3", "nosuch", "{}"), call("c4", "read", '{"id": 7}') })
      local r, msg, code, partial = rag.pipeline.agent({ index = fake_index(),
        llm = llm(model) }):answer(Q)
      assert.is_nil(r)
      assert.equal("provider", code)
      assert.equal("rag.pipeline.agent: a second malformed tool call in a row: the arguments "
        .. "of 'read' do not fit its parameters: argument 'id' must be of type string", msg)
      local log = helpers.llmd_log(base, model)
      assert.equal(4, #log)
      local m = log[2].body.messages
      if kind == "openai" then
        assert.equal("c1", m[4].tool_call_id)
        assert.equal("Your last reply could not be used: the arguments of 'search' are not a "
          .. "JSON object: \"{query: k1\". Call one of the tools (search, read) with arguments "
          .. "that match its parameters, or give your final answer.", m[4].content)
      else -- Ollama's server decodes the arguments: it sends the text as it is
        assert.truthy(m[4].content:find("^Your last reply could not be used: the arguments "
          .. "of 'search' are not a JSON object"))
      end
      assert.equal(1, #tool_steps(partial.trace))
      assert.equal(3, #branches(partial.trace, "malformed"))
    end)
  end
end)
