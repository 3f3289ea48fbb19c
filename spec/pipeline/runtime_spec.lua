-- rag.pipeline.runtime: each limit ends a run with "budget" (the LLMs here
-- never stop asking for more), the trace's fields, JSON lines, results.
-- Token counts use a tokenizer of one token a word, so every number below
-- is worked by hand: a prompt string of w words is estimated at w + 3 + 3
-- tokens (3 a message, 3 for the reply).
local rag = require("rag")
local support = require("spec.support.llm")
local helpers = require("spec.helpers")

local runtime = rag.pipeline.runtime
local json = rag.json

-- A run with a fake clock and the one-word tokenizer.
local function new_run(limits, clock)
  clock = clock or support.clock()
  return runtime.new({ limits = limits, clock = clock.now, tokenizer = support.words }), clock
end

-- A pipeline that keeps asking: each round one step holding one LLM call,
-- until something fails. Returns the failure and the number of rounds done.
local function ask_forever(run, llm)
  local rounds = 0
  while true do
    local out, msg, code = run:step("ask", function(inputs)
      return run:chat(llm, "more " .. inputs.round)
    end, { round = rounds + 1 })
    if out == nil then
      return msg, code, rounds
    end
    rounds = rounds + 1
    assert(rounds < 1000, "the run did not stop")
  end
end

local function kinds(trace)
  local out = {}
  for i, e in ipairs(trace) do
    out[i] = e.kind
  end
  return table.concat(out, " ")
end

describe("rag.pipeline.runtime", function()
  describe("limits", function()
    it("defaults to 100 steps and 50 llm calls, no tokens or deadline", function()
      local run = runtime.new()
      assert.same({ steps = 100, llm_calls = 50 }, run.limits)
      local r = run:remaining()
      assert.equal(100, r.steps)
      assert.equal(50, r.llm_calls)
      assert.equal(math.huge, r.tokens)
      assert.equal(math.huge, r.ms)
    end)

    it("raises clear errors for bad limits and options", function()
      local cases = {
        { { limits = { steps = -1 } }, "'steps' must be in %[0, inf%]" },
        { { limits = { llm_calls = 1.5 } }, "'llm_calls' must be an integer" },
        { { limits = { tokens = "many" } }, "'tokens' must be a number, got string" },
        { { limits = { deadline_ms = -5 } }, "'deadline_ms' must be in %[0, inf%]" },
        { { limits = { step = 3 } }, "unknown option 'step'" },
        { { limit = {} }, "unknown option 'limit'" },
        { { limits = 5 }, "'limits' must be a table" },
        { { tokenizer = {} }, "'tokenizer' must have a :count%(s%) method" },
      }
      for _, c in ipairs(cases) do
        local ok, err = pcall(runtime.new, c[1])
        assert.is_false(ok)
        assert.truthy(tostring(err):find("^[^\n]*rag%.pipeline%.runtime%.new") and
          tostring(err):find(c[2]), tostring(err) .. " / " .. c[2])
      end
      assert.has_no.errors(function()
        runtime.new({ limits = { steps = 0, llm_calls = 0, tokens = 0, deadline_ms = 0.5 } })
        runtime.new({ limits = { steps = math.huge } })
      end)
    end)

    it("ends at the step limit with 'budget' and a trace", function()
      local run = new_run({ steps = 3 })
      local llm = support.scripted({}, { forever = "more" })
      local msg, code, rounds = ask_forever(run, llm)
      assert.equal("budget", code)
      assert.equal("rag.pipeline: step limit reached (3 steps)", msg)
      assert.equal(3, rounds)
      assert.equal(3, #llm.calls)
      assert.equal("step llm step llm step llm stop", kinds(run.trace))
      local last = run.trace[#run.trace]
      assert.equal("steps", last.limit)
      assert.equal("ask", last.name)
      assert.equal("budget", last.code)
      assert.equal(msg, last.error)
      -- the run stays stopped: even a chat, with calls left, is refused
      local v, msg2, code2 = run:chat(llm, "one more")
      assert.is_nil(v)
      assert.equal(msg, msg2)
      assert.equal("budget", code2)
      assert.equal(3, #llm.calls)
      assert.is_nil((run:check()))
    end)

    it("ends at the llm call limit with 'budget'", function()
      local run = new_run({ llm_calls = 2 })
      local llm = support.scripted({}, { forever = "more" })
      local msg, code, rounds = ask_forever(run, llm)
      assert.equal("budget", code)
      assert.equal("rag.pipeline: llm call limit reached (2 calls)", msg)
      assert.equal(2, rounds)
      assert.equal(2, #llm.calls)
      -- the third step started, its chat was refused
      assert.equal("step llm step llm step stop", kinds(run.trace))
      assert.equal("llm_calls", run.trace[#run.trace].limit)
      assert.equal("budget", run.trace[#run.trace - 1].code)
    end)

    it("ends at the token limit before a prompt that would reach it", function()
      -- "more N" is 2 words: estimated 2 + 3 + 3 = 8 tokens; the reply
      -- "more" is 1: each call costs 9. Call 1: 0 + 8 < 20, max_tokens
      -- 20 - 8 = 12; call 2: 9 + 8 < 20, max_tokens 3; call 3: 18 + 8 >= 20.
      local run = new_run({ tokens = 20 })
      local llm = support.scripted({}, { forever = "more" })
      local msg, code, rounds = ask_forever(run, llm)
      assert.equal("budget", code)
      assert.equal("rag.pipeline: token limit reached (18 used, 8 more for the next prompt, "
        .. "limit 20)", msg)
      assert.equal(2, rounds)
      assert.equal(2, #llm.calls)
      assert.equal(12, llm.calls[1].opts.max_tokens)
      assert.equal(3, llm.calls[2].opts.max_tokens)
      local u = run:usage()
      assert.equal(16, u.prompt_tokens)
      assert.equal(2, u.completion_tokens)
      assert.equal(18, u.total_tokens)
      assert.is_true(u.estimated)
      assert.equal("tokens", run.trace[#run.trace].limit)
    end)

    it("stops a run whose reply goes over the token limit, returning the reply 4th", function()
      -- the LLM reports its usage and ignores max_tokens
      local run = new_run({ tokens = 20 })
      local llm = support.scripted({}, { forever = "more",
        usage = { prompt_tokens = 8, completion_tokens = 30 } })
      local v, msg, code, late = run:chat(llm, "more please")
      assert.is_nil(v)
      assert.equal("budget", code)
      assert.equal("rag.pipeline: token limit exceeded by an llm reply (38 used, limit 20)", msg)
      assert.equal("more", late.text)
      assert.is_false(run:usage().estimated)
      assert.is_nil((run:chat(llm, "again")))
      assert.equal(1, #llm.calls)
    end)

    it("ends at the deadline, checked before and after each llm call", function()
      -- each call takes 0.4 s of the fake clock: they end at 0.4, 0.8, 1.2
      local clock = support.clock()
      local run = new_run({ deadline_ms = 1000 }, clock)
      local llm = support.scripted({}, { forever = "more", clock = clock, latency = 0.4 })
      local msg, code, rounds = ask_forever(run, llm)
      assert.equal("budget", code)
      assert.equal("rag.pipeline: deadline of 1000 ms passed during an llm call", msg)
      assert.equal(2, rounds)
      assert.equal(3, #llm.calls)
      assert.equal("deadline_ms", run.trace[#run.trace].limit)
      -- steps without llm calls: 0.6 s each; the third may not start
      clock = support.clock()
      run = new_run({ deadline_ms = 1000 }, clock)
      local done = 0
      for _ = 1, 10 do
        local ok, m, c = run:step("work", function()
          clock.advance(0.6)
          done = done + 1
          return true
        end)
        if not ok then
          assert.equal("rag.pipeline: deadline of 1000 ms passed", m)
          assert.equal("budget", c)
          break
        end
      end
      assert.equal(2, done)
      assert.equal(0, run:remaining().ms)
    end)

    it("uses a real monotonic clock by default", function()
      local run = runtime.new({ limits = { deadline_ms = 0 } })
      local v, _, code = run:step("never", function() error("must not run") end)
      assert.is_nil(v)
      assert.equal("budget", code)
    end)

    it("names the pipeline in its messages", function()
      local run = runtime.new({ name = "rag.pipeline.corrective", limits = { steps = 0 } })
      local _, msg = run:check()
      assert.equal("rag.pipeline.corrective: step limit reached (0 steps)", msg)
    end)
  end)

  describe("the trace", function()
    it("records steps in brief: strings cut, hits counted, time, tokens, branches", function()
      local clock = support.clock()
      local run = new_run(nil, clock)
      -- 201 bytes; byte 160 starts an "é", so the cut backs up to 159
      local long = "a" .. string.rep("é", 100)
      local llm = support.scripted({ "two words" })
      local hits = assert(run:step("retrieve", function(inputs)
        clock.advance(0.25)
        run:branch("fallback", "no hit above 0.5")
        local reply = assert(run:chat(llm, { { role = "system", content = "be brief" },
          { role = "user", content = inputs.query } }))
        return { { id = "c1", score = 2, text = reply.text }, { id = "c2", score = 1 } }
      end, { query = "find it", note = long, k = 5, fn = print, ascii = string.rep("x", 200),
        none = json.null }))
      assert.equal(2, #hits)
      local step, branch, chat = run.trace[1], run.trace[2], run.trace[3]
      assert.equal(3, #run.trace)
      assert.same({ kind = "step", name = "retrieve", depth = 0, at = 0, ms = 250,
        llm_calls = 1, tokens = 15,
        inputs = { query = "find it", note = "a" .. string.rep("é", 79) .. "…", k = 5,
          fn = "<function>", ascii = string.rep("x", 160) .. "…" },
        outputs = { count = 2, ids = { "c1", "c2" } },
        branch = "fallback", why = "no hit above 0.5" }, step)
      assert.same({ kind = "branch", name = "fallback", why = "no hit above 0.5", depth = 1,
        at = 250 }, branch)
      -- prompt: 3 + (3 + 2) + (3 + 2) = 13 tokens; reply: 2
      assert.same({ kind = "llm", name = "chat", depth = 1, at = 250, ms = 0, llm_calls = 1,
        tokens = 15, prompt_tokens = 13, completion_tokens = 2, estimated = true,
        inputs = { messages = 2, last = "find it" }, outputs = "two words" }, chat)
    end)

    it("records a step's failure and passes it on; the run goes on", function()
      local run = new_run()
      local llm = support.scripted({ function()
        return nil, "rag.providers.openai.chat: HTTP 500", "http"
      end, "fine" })
      local v, msg, code = run:step("answer", function()
        return run:chat(llm, "hi")
      end)
      assert.is_nil(v)
      assert.equal("rag.providers.openai.chat: HTTP 500", msg)
      assert.equal("http", code)
      assert.equal("http", run.trace[1].code)
      assert.equal(msg, run.trace[1].error)
      assert.equal("http", run.trace[2].code)
      assert.equal(0, run.trace[2].tokens)
      assert.equal("fine", assert(run:chat(llm, "hi")).text)
      assert.equal(2, run:usage().llm_calls)
    end)

    it("passes options and streaming through to the llm, as a copy", function()
      local run = new_run()
      local llm = support.scripted({ "a b c" })
      local deltas = {}
      local opts = { temperature = 0, stream = function(d) deltas[#deltas + 1] = d end }
      assert(run:chat(llm, "x", opts))
      assert.same({ "a b c" }, deltas)
      assert.equal(0, llm.calls[1].opts.temperature)
      assert.are_not.equal(opts, llm.calls[1].opts)
      assert.is_nil(llm.calls[1].opts.max_tokens) -- no token limit, no max_tokens
    end)

    it("round-trips through JSON lines", function()
      local run = new_run()
      local llm = support.scripted({ "yes" })
      run:step("outer", function()
        run:step("inner", function()
          return run:chat(llm, "is it \"quoted\"\nand 检索?")
        end, { list = { "a", "b", "c", "d" }, empty = {} })
        run:branch("keep", "grade 0.9 >= 0.7")
        return { text = "done", grounded = true }
      end)
      local s = assert(run.trace:jsonl())
      local lines = {}
      for line in s:gmatch("([^\n]*)\n") do
        lines[#lines + 1] = line
      end
      assert.equal(#run.trace, #lines)
      assert.equal(4, #lines)
      for i, line in ipairs(lines) do
        assert.same(run.trace[i], json.decode(line))
      end
      assert.same({ count = 4, items = { "a", "b", "c" } }, run.trace[2].inputs.list)
      assert.equal(1, run.trace[2].depth)
      local back = assert(runtime.trace(s))
      assert.same(run.trace, back)
      assert.equal(s, back:jsonl())
      -- to a file, and appended
      local path = helpers.tmpname()
      assert(run.trace:write(path))
      assert.equal(s, helpers.read(path))
      assert(run.trace:write(path, { append = true }))
      assert.equal(s .. s, helpers.read(path))
      os.remove(path)
      local ok, msg, code = run.trace:write("/nonexistent-dir/trace.jsonl")
      assert.is_nil(ok)
      assert.equal("io", code)
      assert.truthy(msg:find("^rag%.pipeline%.trace%.write: "), msg)
      local bad, bmsg, bcode = runtime.trace('{"kind":"step"}\nnot json\n')
      assert.is_nil(bad)
      assert.equal("decode", bcode)
      assert.truthy(bmsg:find("line 2", 1, true), bmsg)
      assert.equal("", runtime.new().trace:jsonl())
    end)
  end)

  describe("results", function()
    it("finish attaches the trace and usage; with a failure it returns it 4th", function()
      local clock = support.clock()
      local run = new_run(nil, clock)
      local llm = support.scripted({ "x y", "x y" }, { usage = { prompt_tokens = 7,
        completion_tokens = 2, total_tokens = 9 } })
      for _ = 1, 2 do
        run:step("answer", function()
          clock.advance(0.25)
          return run:chat(llm, "q")
        end)
      end
      -- each step counts its own call and tokens
      assert.equal(9, run.trace[3].tokens)
      assert.equal(1, run.trace[3].llm_calls)
      local r = run:finish({ text = "x y" })
      assert.equal(run.trace, r.trace)
      assert.same({ steps = 2, llm_calls = 2, prompt_tokens = 14, completion_tokens = 4,
        total_tokens = 18, ms = 500, estimated = false }, r.usage)
      local v, msg, code, partial = run:finish({ contexts = {} }, "rag.pipeline: x", "budget")
      assert.is_nil(v)
      assert.equal("rag.pipeline: x", msg)
      assert.equal("budget", code)
      assert.equal(run.trace, partial.trace)
      assert.same({}, partial.contexts)
    end)

    it("takes usage from total_tokens when a part is missing", function()
      local run = new_run()
      local llm = support.scripted({ { text = "a", usage = { total_tokens = 50,
        prompt_tokens = 40 } }, { text = "b", usage = { total_tokens = 30,
        completion_tokens = 5 } } })
      assert(run:chat(llm, "q"))
      assert(run:chat(llm, "q"))
      local u = run:usage()
      assert.equal(65, u.prompt_tokens)
      assert.equal(15, u.completion_tokens)
      assert.is_false(u.estimated)
    end)

    it("remaining counts down", function()
      local clock = support.clock()
      local run = new_run({ steps = 5, llm_calls = 4, tokens = 100, deadline_ms = 2000 }, clock)
      run:step("a", function()
        clock.advance(0.5)
        return run:chat(support.scripted({ "one" }), "q") -- 7 + 1 tokens
      end)
      assert.same({ steps = 4, llm_calls = 3, tokens = 92, ms = 1500 }, run:remaining())
    end)
  end)

  describe("misuse", function()
    it("raises on bad arguments and replies that break the contract", function()
      local run = new_run()
      assert.has_error(function() run:step(1, function() end) end,
        "rag.pipeline.runtime: step name must be a string, got number")
      assert.has_error(function() run:step("x", "f") end,
        "rag.pipeline.runtime: step function must be a function, got string")
      assert.has_error(function() run:step("x", function() end, "in") end,
        "rag.pipeline.runtime: step inputs must be a table, got string")
      assert.has_error(function() run:chat({}, "q") end,
        "rag.pipeline.runtime: llm must have a :chat(messages, opts) method")
      assert.has_error(function() run:chat(support.scripted({ "x" }), 5) end,
        "rag.pipeline.runtime: messages must be a string or a list, got number")
      assert.has_error(function() run:branch(nil) end,
        "rag.pipeline.runtime: branch name must be a string, got nil")
      local llm = support.scripted({ function() return "just text" end,
        function() return { content = "x" } end })
      assert.has_error(function() run:chat(llm, "q") end,
        "rag.pipeline.runtime: llm:chat returned string, not a reply { text = string, usage = }")
      assert.has_error(function() run:chat(llm, "q") end, "rag.pipeline.runtime: llm:chat "
        .. "returned a table without a string 'text', not a reply { text = string, usage = }")
    end)
  end)
end)
