-- The one request path of every provider (rag.providers._request): the retry
-- policy, the error codes, traces and key redaction, with scripted transports.
local request = require("rag.providers._request")
local json = require("rag").json

-- A transport that plays `script` (a list of responses or {nil, msg, code})
-- and records each request.
local function scripted(script)
  local seen = {}
  local function transport(req)
    seen[#seen + 1] = req
    local r = script[math.min(#seen, #script)]
    if r.status then
      r.headers = r.headers or {}
      r.body = r.body or "{}"
      return r
    end
    return nil, r[2], r[3]
  end
  return transport, seen
end

local function client(script, extra)
  local transport, seen = scripted(script)
  local sleeps, events = {}, {}
  local o = { transport = transport, sleep = function(s) sleeps[#sleeps + 1] = s end,
    random = function() return 0 end, trace = function(e) events[#events + 1] = e end }
  for k, v in pairs(extra or {}) do
    o[k] = v
  end
  return request.client(o, "sk-CANARY-42"), seen, sleeps, events
end

local URL = "http://127.0.0.1:9/v1/embeddings?api-key=sk-CANARY-42"

describe("rag.providers._request", function()
  it("returns the decoded reply of a 2xx at once", function()
    local c, seen, sleeps = client({ { status = 200, body = '{"a":[1,2]}' } })
    local v, res = request.post(c, "op", URL, { x = 1 })
    assert.same({ 1, 2 }, v.a)
    assert.equal(200, res.status)
    assert.equal(1, #seen)
    assert.equal(0, #sleeps)
    assert.equal("POST", seen[1].method)
    assert.equal(URL, seen[1].url)
    assert.equal(60, seen[1].timeout)
    assert.equal("Bearer sk-CANARY-42", seen[1].headers.authorization)
    assert.equal("application/json", seen[1].headers["content-type"])
    assert.same({ x = 1 }, json.decode(seen[1].body))
  end)

  it("maps each final status to its code, after the retries it deserves", function()
    local cases = {
      { 400, "provider", 1 }, { 401, "auth", 1 }, { 403, "auth", 1 }, { 404, "provider", 1 },
      { 408, "timeout", 3 }, { 409, "provider", 3 }, { 422, "provider", 1 },
      { 429, "ratelimit", 3 }, { 500, "http", 3 }, { 502, "http", 3 }, { 503, "http", 3 },
    }
    for _, case in ipairs(cases) do
      local c, seen, sleeps = client({ { status = case[1],
        body = '{"error":{"message":"nope: sk-CANARY-42"}}' } })
      local v, msg, code = request.post(c, "rag.x.y", URL, {})
      assert.is_nil(v)
      assert.equal(case[2], code, case[1])
      assert.equal(case[3], #seen, case[1])
      assert.equal(case[3] - 1, #sleeps)
      assert.truthy(msg:find("^rag%.x%.y: POST http://127%.0%.0%.1:9/v1/embeddings: HTTP "
        .. case[1] .. ": nope: %[redacted%]"), msg)
      assert.falsy(msg:find("CANARY", 1, true))
      if case[3] > 1 then
        assert.truthy(msg:find("(after 3 attempts)", 1, true))
        assert.same({ 0.5, 1 }, sleeps)
      end
    end
  end)

  it("retries timeouts and connection errors, keeping the code", function()
    for _, code in ipairs({ "timeout", "http" }) do
      local c, seen = client({ { nil, "rag.http.request: POST " .. URL .. ": down", code } })
      local v, msg, got = request.post(c, "op", URL, {})
      assert.is_nil(v)
      assert.equal(code, got)
      assert.equal(3, #seen)
      assert.falsy(msg:find("CANARY", 1, true), msg)
      assert.truthy(msg:find("^op: POST "), msg)
    end
  end)

  it("honours Retry-After up to 60 s and backs off otherwise", function()
    local c, seen, sleeps = client({
      { status = 429, headers = { ["retry-after"] = "1.5" } },
      { status = 503, headers = { ["retry-after"] = "61" } },
      { status = 200, body = "[]" },
    })
    assert.same({}, (request.post(c, "op", URL, {})))
    assert.equal(3, #seen)
    assert.same({ 1.5, 1 }, sleeps) -- 61 s is beyond the cap: the backoff's 1 s instead
  end)

  it("respects max_retries", function()
    for n = 0, 4 do
      local c, seen, sleeps = client({ { status = 500 } }, { max_retries = n })
      local _, msg = request.post(c, "op", URL, {})
      assert.equal(n + 1, #seen)
      assert.equal(n, #sleeps)
      assert.equal(n > 0, msg:find("attempts") ~= nil)
    end
  end)

  it("reports bad JSON as decode", function()
    local c = client({ { status = 200, body = "{oops" } })
    local v, msg, code = request.post(c, "op", URL, {})
    assert.is_nil(v)
    assert.equal("decode", code)
    assert.truthy(msg:find("^op: POST http://127%.0%.0%.1:9/v1/embeddings: bad JSON"), msg)
  end)

  it("reports text that is not UTF-8 as encoding, sending nothing", function()
    local c, seen = client({ { status = 200 } })
    local v, msg, code = request.post(c, "op", URL, { input = { "ok", "\255" } })
    assert.is_nil(v)
    assert.equal("encoding", code)
    assert.truthy(msg:find("^op: "))
    assert.equal(0, #seen)
  end)

  it("does not retry once streamed pieces were delivered", function()
    local calls = 0
    local c = request.client({ transport = function(req)
      calls = calls + 1
      req.stream("data: partial\n")
      return nil, "rag.http.request: POST x: reset", "http"
    end, sleep = function() end })
    local got = {}
    local v, _, code = request.post(c, "op", URL, {}, function(p) got[#got + 1] = p end)
    assert.is_nil(v)
    assert.equal("http", code)
    assert.equal(1, calls)
    assert.same({ "data: partial\n" }, got)
  end)

  it("traces every attempt and wait without keys, headers or bodies", function()
    local c, _, _, events = client({ { status = 500 }, { status = 200, body = "{}" } })
    request.post(c, "op", URL, { secret = "body" })
    assert.equal(3, #events)
    assert.equal("request", events[1].event)
    assert.equal(500, events[1].status)
    assert.equal("http", events[1].code)
    assert.equal("retry", events[2].event)
    assert.equal(0.5, events[2].delay)
    assert.equal(200, events[3].status)
    assert.equal(2, events[3].attempt)
    for _, e in ipairs(events) do
      local s = json.encode(e)
      assert.falsy(s:find("CANARY", 1, true), s)
      assert.falsy(s:find("body", 1, true), s)
      assert.equal("http://127.0.0.1:9/v1/embeddings", e.url)
    end
  end)

  it("never shows the key in the client table", function()
    local c, sent = client({ { status = 200 } })
    local function walk(t, seen)
      seen = seen or {}
      if seen[t] then
        return
      end
      seen[t] = true
      for k, v in pairs(t) do
        assert.falsy(tostring(k):find("CANARY", 1, true))
        assert.falsy(tostring(v):find("CANARY", 1, true))
        if type(v) == "table" then
          walk(v, seen)
        end
      end
    end
    walk(c)
    request.post(c, "op", URL, {}) -- yet it sends the key
    assert.equal("Bearer sk-CANARY-42", sent[1].headers.authorization)
  end)
end)
