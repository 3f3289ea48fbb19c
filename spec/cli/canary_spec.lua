-- A canary API key through the command line, end to end: `rag index
-- --enrich ... --llm openai`, `rag ask` (with --trace) and `rag eval --qa`
-- (with --json and --html reports) against a loopback model server whose
-- failures repeat the request's bearer key in their bodies (401, 403, 429,
-- 500, bad JSON, cut replies, timeouts). The key must never appear in what
-- the command prints, in a trace, a report or anything it writes into the
-- index directory; each failure must still be reported with its code.
local rag = require("rag")
local helpers = require("spec.helpers")

local CANARY = "sk-CANARY-" .. tostring(os.time()) .. "-q7Zx"

describe("the canary API key", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  local lua = helpers.lua_command()
  local root = helpers.tmpname()
  local docs, kb = root .. "/docs", root .. "/kb"
  local base, stop

  setup(function()
    base, stop = helpers.start_httpd("llmd.py")
    assert(os.execute("mkdir -p '" .. docs .. "'"))
    helpers.write(docs .. "/tides.md", "# Tides\n\nThe moon pulls the sea. Spring tides "
      .. "come when the sun and the moon align.\n")
    helpers.write(docs .. "/bees.md", "# Bees\n\nBees dance to show the hive where the "
      .. "flowers are.\n")
    helpers.write(root .. "/qa.jsonl", rag.json.encode({ question = "When do spring tides come?",
      answer = "When the sun and the moon align." }) .. "\n")
  end)

  teardown(function()
    if stop then
      stop()
    end
    os.execute("rm -rf '" .. root .. "'")
  end)

  -- runs bin/rag with the canary key; returns its exit code and output
  local function rag_cmd(args)
    local out, err, code = helpers.spawn("RAG_TTY=0 OPENAI_API_KEY='" .. CANARY
      .. "' OPENAI_BASE_URL='" .. base .. "/v1' " .. lua .. " bin/rag " .. args .. " < /dev/null")
    return code, out .. err
  end

  local function clean(what, text)
    assert.falsy(text:find("CANARY", 1, true), what .. " shows the key:\n" .. text)
  end

  -- every file under dir, read
  local function files(dir)
    local p = io.popen("find '" .. dir .. "' -type f")
    local list = {}
    for path in p:lines() do
      list[#list + 1] = path
    end
    p:close()
    return list
  end

  it("never shows in output, traces, reports or the index", function()
    local code, out = rag_cmd("index '" .. docs .. "' --into '" .. kb .. "'")
    assert.equal(0, code, out)
    local failures = { "e401:c1", "e403:c2", "e500:c3", "e429x9:c4", "badjson:c5", "cut:c6" }
    for i, model in ipairs(failures) do
      local trace = root .. "/trace" .. i .. ".json"
      code, out = rag_cmd("ask '" .. kb .. "' 'When do spring tides come?' --llm openai"
        .. " --model " .. model .. " --trace '" .. trace .. "'")
      assert.equal(1, code, model .. ": " .. out)
      assert.truthy(out:find("rag ask: ", 1, true), out)
      clean("rag ask with " .. model, out)
      if helpers.exists(trace) then
        clean("the trace of " .. model, helpers.read(trace))
      end
    end
    -- the enrichment's LLM fails: the run stops, saying why
    code, out = rag_cmd("index '" .. docs .. "' --into '" .. kb .. "' --enrich summary:llm"
      .. " --llm openai --model e401:c7")
    assert.equal(1, code, out)
    clean("rag index --enrich", out)
    -- an evaluation whose LLM fails reports it, in its output and reports
    local json, html = root .. "/eval.json", root .. "/eval.html"
    local _, eval_out = rag_cmd("eval '" .. kb .. "' --qa '" .. root .. "/qa.jsonl' --llm openai"
      .. " --model e500:c8 --json '" .. json .. "' --html '" .. html .. "'")
    clean("rag eval", eval_out)
    for _, path in ipairs({ json, html }) do
      if helpers.exists(path) then
        clean(path, helpers.read(path))
      end
    end
    for _, path in ipairs(files(kb)) do
      clean(path, helpers.read(path))
    end
    -- the key did reach the server: the check above is not vacuous
    local log = helpers.llmd_log(base, "e401:c1")
    assert.is_true(#log >= 1 and log[1].auth)
  end)
end)
