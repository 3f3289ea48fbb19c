-- rag.providers.openai against a real HTTP server on 127.0.0.1 that speaks
-- the OpenAI wire format (spec/fixtures/llmd.py), over the default transport.
local rag = require("rag")
local helpers = require("spec.helpers")

local json = rag.json
local KEY = "sk-CANARY-7f3a9c"

-- What llmd.py embeds for a text: { #text, sum((i) * byte), 1, 0 ... }.
local function expected(text, dim)
  local s = 0
  for i = 1, #text do
    s = s + i * text:byte(i)
  end
  local v = { #text, s, 1 }
  for i = 4, dim or 4 do
    v[i] = 0
  end
  for i = #v, (dim or 4) + 1, -1 do
    v[i] = nil
  end
  return v
end

describe("rag.providers.openai", function()
  local base, stop

  setup(function()
    base, stop = helpers.start_httpd("llmd.py")
  end)

  teardown(function()
    stop()
  end)

  local uniq = helpers.uniq_model

  local function log(model)
    return helpers.llmd_log(base, model)
  end

  local function provider(model, extra)
    local o = { base_url = base .. "/v1", api_key = KEY, model = model }
    for k, v in pairs(extra or {}) do
      o[k] = v
    end
    return rag.providers.openai(o)
  end

  it("embeds texts and keeps their order", function()
    local p = provider(uniq("ok:"))
    local texts = { "alpha", "b", "gamma ray", "", "ünïcode ✓" }
    local vecs, info = assert(p:embed(texts))
    assert.equal(#texts, #vecs)
    for i, t in ipairs(texts) do
      assert.same(expected(t), vecs[i])
    end
    assert.equal(1, info.requests)
    assert.equal(5, info.sent)
    assert.is_number(info.usage.prompt_tokens)
    local l = log(p.model)
    assert.equal(1, #l)
    assert.is_true(l[1].auth)
    assert.equal("float", l[1].body.encoding_format)
  end)

  it("sends 1,000 texts as 16 requests of at most 64, results in order", function()
    local p = provider(uniq("ok:"), { batch_size = 64 })
    local texts = {}
    for i = 1, 1000 do
      texts[i] = "text number " .. i
    end
    local vecs, info = assert(p:embed(texts))
    assert.equal(16, info.requests)
    assert.equal(1000, #vecs)
    for i = 1, 1000 do
      assert.same(expected(texts[i]), vecs[i])
    end
    local l = log(p.model)
    assert.equal(16, #l)
    for i = 1, 15 do
      assert.equal(64, l[i].n)
    end
    assert.equal(1000 - 15 * 64, l[16].n)
  end)

  it("also splits batches by batch_tokens", function()
    local tok = rag.tokenizer.get("cl100k_base")
    local p = provider(uniq("ok:"), { batch_size = 100, batch_tokens = 10, tokenizer = tok })
    local texts = {}
    for i = 1, 12 do
      texts[i] = "one two three" -- 3 tokens
      texts[i] = texts[i] .. " " .. i
    end
    local vecs, info = assert(p:embed(texts))
    assert.equal(12, #vecs)
    local l = log(p.model)
    assert.equal(info.requests, #l)
    for _, r in ipairs(l) do
      local sum = 0
      for _, t in ipairs(r.body.input) do
        sum = sum + tok:count(t)
      end
      assert.truthy(sum <= 10, sum)
    end
    assert.truthy(#l >= 5)
  end)

  it("retries a 429 after its Retry-After, then succeeds", function()
    local p = provider(uniq("e429x1:"))
    local t0 = helpers.now()
    local vecs = assert(p:embed({ "x" }))
    local dt = helpers.now() - t0
    assert.same(expected("x"), vecs[1])
    assert.equal(2, #log(p.model))
    assert.truthy(dt >= 1 and dt < 3, dt) -- llmd says Retry-After: 1
  end)

  it("retries two 500s with backoff, then succeeds", function()
    local sleeps = {}
    local p = provider(uniq("e500x2:"), { sleep = function(s) sleeps[#sleeps + 1] = s end })
    assert(p:embed({ "x" }))
    assert.equal(3, #log(p.model))
    assert.equal(2, #sleeps)
    assert.truthy(sleeps[1] > 0.375 - 1e-9 and sleeps[1] <= 0.5)
    assert.truthy(sleeps[2] > 0.75 - 1e-9 and sleeps[2] <= 1)
  end)

  it("gives up on endless 500s after max_retries with code http", function()
    local p = provider(uniq("e500:"), { max_retries = 2, sleep = function() end })
    local v, msg, code = p:embed({ "x" })
    assert.is_nil(v)
    assert.equal("http", code)
    assert.equal(3, #log(p.model))
    assert.truthy(msg:find("^rag%.providers%.openai%.embed: POST http://127%.0%.0%.1:%d+/v1/"
      .. "embeddings: HTTP 500"), msg)
  end)

  it("reports a slow reply as timeout", function()
    local p = provider(uniq("slow3:"), { timeout = 0.3, max_retries = 1,
      sleep = function() end })
    local t0 = helpers.now()
    local v, _, code = p:embed({ "x" })
    assert.is_nil(v)
    assert.equal("timeout", code)
    assert.truthy(helpers.now() - t0 < 2)
  end)

  it("reports malformed JSON as decode", function()
    local v, msg, code = provider(uniq("badjson:")):embed({ "x" })
    assert.is_nil(v)
    assert.equal("decode", code)
    assert.truthy(msg:find("bad JSON", 1, true))
    v, msg, code = provider(uniq("badshape:")):embed({ "x" })
    assert.is_nil(v)
    assert.equal("decode", code)
    assert.truthy(msg:find("no 'data'", 1, true))
  end)

  it("reports 401 as auth without retrying, and 400 as provider", function()
    local p = provider(uniq("e401:"))
    local v, msg, code = p:embed({ "x" })
    assert.is_nil(v)
    assert.equal("auth", code)
    assert.equal(1, #log(p.model))
    assert.truthy(msg:find("Incorrect API key provided: [redacted]", 1, true), msg)
    v, msg, code = provider(uniq("e400:")):chat("hi")
    assert.is_nil(v)
    assert.equal("provider", code)
    assert.truthy(msg:find("^rag%.providers%.openai%.chat: .*HTTP 400: Incorrect API key"), msg)
  end)

  it("returns connection failures as http", function()
    local p = rag.providers.openai({ base_url = "http://127.0.0.1:" .. helpers.free_port(),
      model = "m", max_retries = 1, sleep = function() end })
    local v, msg, code = p:embed({ "x" })
    assert.is_nil(v)
    assert.equal("http", code)
    assert.truthy(msg:find("(after 2 attempts)", 1, true), msg)
  end)

  it("chats, returning the text, usage and finish reason", function()
    local p = provider(uniq("ok:"))
    local reply = assert(p:chat({ { role = "system", content = "be brief" },
      { role = "user", content = "hello there" } }, { temperature = 0, max_tokens = 5 }))
    assert.equal("echo: hello there", reply.text)
    assert.equal("stop", reply.finish_reason)
    assert.equal(10, reply.usage.total_tokens)
    local body = log(p.model)[1].body
    assert.equal(0, body.temperature)
    assert.equal(5, body.max_tokens)
    assert.equal(2, #body.messages)
    assert.is_nil(body.stream)
  end)

  it("streams chat deltas in order and they join to the full text", function()
    local p = provider(uniq("ok:"))
    local words = {}
    for i = 1, 40 do
      words[i] = "w" .. i
    end
    local prompt = table.concat(words, " ")
    local deltas = {}
    local reply = assert(p:chat(prompt, { stream = function(d) deltas[#deltas + 1] = d end }))
    local text, info = reply.text, reply
    assert.equal("echo: " .. prompt, text)
    assert.equal(41, #deltas)
    assert.equal("echo: ", deltas[1])
    for i = 1, 40 do
      assert.equal("w" .. i, (deltas[i + 1]:gsub(" $", "")))
    end
    assert.equal(text, table.concat(deltas))
    assert.equal("stop", info.finish_reason)
    assert.is_number(info.usage.total_tokens)
    assert.is_true(log(p.model)[1].body.stream)
  end)

  it("lets an error raised by the stream function through", function()
    local p = provider(uniq("ok:"))
    assert.has_error(function()
      p:chat("a b c", { stream = function() error("stop here") end })
    end, nil)
    local ok, err = pcall(p.chat, p, "a b c", { stream = function() error("stop here") end })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("stop here", 1, true))
  end)

  it("never shows the key in errors, traces or tostring", function()
    local events = {}
    local trace = function(e) events[#events + 1] = e end
    local msgs = {}
    for _, m in ipairs({ "e401:", "e403:", "e400:", "e500:", "badjson:", "slow2:" }) do
      local p = provider(uniq(m), { trace = trace, sleep = function() end, timeout = 0.3 })
      local _, msg = p:embed({ "x" })
      msgs[#msgs + 1] = msg
      _, msg = p:chat("hi", { stream = function() end })
      msgs[#msgs + 1] = msg
      msgs[#msgs + 1] = tostring(p)
    end
    for _, s in ipairs(msgs) do
      assert.falsy(tostring(s):find("CANARY", 1, true), s)
    end
    assert.truthy(#events > 10)
    for _, e in ipairs(events) do
      assert.falsy(json.encode(e):find("CANARY", 1, true))
    end
    assert.truthy(tostring(provider("m")):find("^rag%.providers%.openai{ model = m"))
  end)

  it("takes the key from OPENAI_API_KEY when none is given", function()
    -- The environment of this process cannot be changed from Lua; the
    -- default is checked through a child process.
    if os.getenv("RAG_ASAN") then
      return -- the child would need the sanitizer runtime preloaded
    end
    local lua = arg and arg[-1] or "lua5.4"
    local function run(env)
      local cmd = env .. " " .. lua .. " -e \"package.path='" .. package.path
        .. "'; package.cpath='" .. package.cpath .. "'\" -e \""
        .. "local p=require('rag').providers.openai{model='m', max_retries=0, "
        .. "transport=function(r) print(r.headers.authorization ~= nil) end}; "
        .. "p:embed({'x'})\" 2>&1"
      local f = io.popen(cmd)
      local out = f:read("*a")
      f:close()
      return out
    end
    assert.equal("true\n", run("OPENAI_API_KEY=sk-from-env"))
    assert.equal("false\n", run("env -u OPENAI_API_KEY"))
  end)

  it("sends dimensions, organization and project, and normalizes on request", function()
    local p = provider(uniq("ok:"), { dimensions = 3, organization = "org-1", project = "p-1",
      normalize = true })
    local v = assert(p:embed({ "ab" }))[1]
    local e = expected("ab", 3)
    local norm = math.sqrt(e[1] ^ 2 + e[2] ^ 2 + e[3] ^ 2)
    for i = 1, 3 do
      assert.near(e[i] / norm, v[i], 1e-12)
    end
    assert.equal(3, log(p.model)[1].body.dimensions)
  end)

  it("returns packed float32 strings on request", function()
    local p = provider(uniq("ok:"))
    local v = assert(p:embed({ "abc" }, { packed = true }))[1]
    assert.equal("string", type(v))
    assert.same(expected("abc"), rag.vec.unpack(v))
  end)

  it("sends each distinct text once and nothing for an empty list", function()
    local p = provider(uniq("ok:"))
    local vecs, info = assert(p:embed({ "a", "b", "a", "a" }))
    assert.equal(2, info.sent)
    assert.same(vecs[1], vecs[3])
    assert.are_not.equal(vecs[1], vecs[3]) -- copies, not one shared table
    vecs, info = assert(p:embed({}))
    assert.same({}, vecs)
    assert.equal(0, info.requests)
  end)

  it("raises on misuse", function()
    local p = provider("m")
    assert.has_error(function() rag.providers.openai({ base_url = base }) end,
      "rag.providers.openai: 'model' is required")
    assert.has_error(function() rag.providers.openai({ model = "m", bogus = 1 }) end,
      "rag.providers.openai: unknown option 'bogus'")
    assert.has_error(function() rag.providers.openai({ model = "m", batch_size = 0 }) end,
      "rag.providers.openai: 'batch_size' must be in [1, 100000]")
    assert.has_error(function() rag.providers.openai({ model = "m", timeout = 0 }) end,
      "rag.providers.openai: 'timeout' must be in (0, 1000000]")
    assert.has_error(function() rag.providers.openai({ model = "m", max_retries = 1.5 }) end,
      "rag.providers.openai: 'max_retries' must be an integer")
    assert.has_error(function() p:embed("x") end,
      "rag.providers.openai.embed: texts must be a list of strings, got string")
    assert.has_error(function() p:embed({ "x", 1 }) end,
      "rag.providers.openai.embed: texts[2] must be a string, got number")
    assert.has_error(function() p:embed({ "x" }, { bogus = true }) end,
      "rag.providers.openai.embed: unknown option 'bogus'")
    assert.has_error(function() p:chat({}) end,
      "rag.providers.openai.chat: messages must be a string or a non-empty list of messages")
    assert.has_error(function() p:chat({ { content = "x" } }) end,
      "rag.providers.openai.chat: messages[1] must be a table with a string 'role'")
    assert.has_error(function() p:chat("x", { temperature = 3 }) end,
      "rag.providers.openai.chat: 'temperature' must be in [0, 2]")
    assert.has_error(function() p:chat("x", { stream = "yes" }) end,
      "rag.providers.openai.chat: 'stream' must be a function, got string")
  end)
end)

describe("provider misuse", function()
  it("is blamed on the caller's line", function()
    local p = rag.providers.openai({ model = "m" })
    local r = rag.providers.rerank({ kind = "tei", base_url = "http://127.0.0.1:9" })
    local calls = {
      function() rag.providers.openai({ bogus = 1 }) end,
      function() rag.providers.ollama({}) end,
      function() rag.providers.rerank({}) end,
      function() p:embed("x") end,
      function() p:embed({ "x" }, { bogus = true }) end,
      function() p:chat({}) end,
      function() p:chat("x", { bogus = 1 }) end,
      function() rag.providers.ollama({ model = "m" }):chat({ 1 }) end,
      function() r:rerank("q", { 1 }) end,
    }
    for i, f in ipairs(calls) do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.truthy(err:find("openai_spec%.lua:%d+: rag%.providers%."),
        i .. ": " .. err)
    end
  end)
end)

describe("the embedding cache", function()
  local base, stop
  local dir = os.tmpname()

  setup(function()
    base, stop = helpers.start_httpd("llmd.py")
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
  end)

  teardown(function()
    stop()
    os.execute("rm -rf " .. dir)
  end)

  local function requests(model)
    local res = assert(rag.http.request({ url = base .. "/_log?model=" .. model }))
    return #json.decode(res.body)
  end

  it("sends no request for text embedded before", function()
    local model = "cache-mem-" .. os.time()
    local p = rag.providers.openai({ base_url = base .. "/v1", model = model, cache = true })
    local a = assert(p:embed({ "one", "two" }))
    assert.equal(1, requests(model))
    local b, info = assert(p:embed({ "two", "one", "three" }))
    assert.equal(2, requests(model))
    assert.equal(2, info.cached)
    assert.equal(1, info.sent)
    assert.same(a[1], b[2])
    assert.same(a[2], b[1])
    assert(p:embed({ "three", "one" }))
    assert.equal(2, requests(model))
  end)

  it("keys by model and dimensions", function()
    local cache = rag.embed.cache()
    local model = "cache-key-" .. os.time()
    local p1 = rag.providers.openai({ base_url = base .. "/v1", model = model, cache = cache })
    local p2 = rag.providers.openai({ base_url = base .. "/v1", model = model, cache = cache,
      dimensions = 3 })
    assert(p1:embed({ "x" }))
    local v = assert(p2:embed({ "x" }))
    assert.equal(2, requests(model))
    assert.equal(3, #v[1])
    assert.equal(2, cache:count())
  end)

  it("persists on disk and survives a torn last record", function()
    local model = "cache-disk-" .. os.time()
    local cache = assert(rag.embed.cache({ dir = dir }))
    local p = rag.providers.openai({ base_url = base .. "/v1", model = model, cache = cache })
    local first = assert(p:embed({ "alpha", "beta" }))
    assert.equal(1, requests(model))
    -- a fresh cache object reads the file: no request
    local cache2 = assert(rag.embed.cache({ dir = dir }))
    assert.equal(2, cache2:count())
    local p2 = rag.providers.openai({ base_url = base .. "/v1", model = model, cache = cache2 })
    assert.same(first, assert(p2:embed({ "alpha", "beta" })))
    assert.equal(1, requests(model))
    -- cut the file inside the last record: that record is dropped, the rest kept
    local path = dir .. "/embeddings.cache"
    local s = helpers.read(path)
    helpers.write(path, s:sub(1, #s - 5))
    local cache3 = assert(rag.embed.cache({ dir = dir }))
    assert.equal(1, cache3:count())
    local p3 = rag.providers.openai({ base_url = base .. "/v1", model = model, cache = cache3 })
    assert.same(first, assert(p3:embed({ "alpha", "beta" })))
    assert.equal(2, requests(model))
    assert.equal(2, assert(rag.embed.cache({ dir = dir })):count())
  end)

  it("refuses a directory with a NUL byte instead of using the shortened one", function()
    local sub = dir .. "/nul-check"
    os.execute("rm -rf '" .. sub .. "'")
    local ok, err = pcall(rag.embed.cache, { dir = sub .. "\0x" })
    assert.is_false(ok)
    assert.matches("rag.embed.cache: option 'dir' contains a NUL byte", tostring(err))
    assert.is_nil(io.open(sub .. "/embeddings.cache", "rb"))
  end)

  it("rejects garbage and reports an unusable directory", function()
    local path = dir .. "/embeddings.cache"
    helpers.write(path, "not a cache at all")
    local c = assert(rag.embed.cache({ dir = dir }))
    assert.equal(0, c:count())
    assert.equal("", helpers.read(path))
    local v, msg, code = rag.embed.cache({ dir = dir .. "/missing/deeper" })
    assert.is_nil(v)
    assert.equal("io", code)
    assert.truthy(msg:find("^rag%.embed%.cache: "))
    assert.has_error(function() rag.embed.cache({ bogus = 1 }) end,
      "rag.embed.cache: unknown option 'bogus'")
  end)
end)
