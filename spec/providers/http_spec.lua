-- The one request path of every provider (rag.providers.http): the retry
-- policy, the error codes, traces and key redaction, with scripted transports.
local http = require("rag.providers.http")
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
  return http.client(o, "sk-CANARY-42"), seen, sleeps, events
end

local URL = "http://127.0.0.1:9/v1/embeddings?api-key=sk-CANARY-42"

describe("rag.providers.http", function()
  it("backs off 0.5 s × 2^n, capped at 8 s, less up to a quarter", function()
    local zero, almost = function() return 0 end, function() return 0.999999 end
    local want = { 0.5, 1, 2, 4, 8, 8, 8 }
    for n = 0, 6 do
      assert.equal(want[n + 1], http.backoff(n, zero))
      assert.near(want[n + 1] * 0.75, http.backoff(n, almost), 1e-5)
    end
    for _ = 1, 200 do
      local d = http.backoff(2)
      assert.truthy(d > 1.5 and d <= 2)
    end
  end)

  it("reads Retry-After as seconds, milliseconds or an HTTP date", function()
    assert.equal(3, http.retry_after({ ["retry-after"] = "3" }))
    assert.equal(0.25, http.retry_after({ ["retry-after"] = "0.25" }))
    assert.equal(1.5, http.retry_after({ ["retry-after-ms"] = "1500", ["retry-after"] = "9" }))
    assert.is_nil(http.retry_after({}))
    assert.is_nil(http.retry_after({ ["retry-after"] = "soon" }))
    -- 784111777 is Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example).
    assert.equal(7, http.retry_after({ ["retry-after"] = "Sun, 06 Nov 1994 08:49:44 GMT" },
      784111777))
    assert.equal(-86400, http.retry_after({ ["retry-after"] = "Sat, 05 Nov 1994 08:49:37 GMT" },
      784111777))
    assert.equal(951782400 - 784111777, http.retry_after(
      { ["retry-after"] = "Tue, 29 Feb 2000 00:00:00 GMT" }, 784111777))
  end)

  it("retries 408, 409, 429 and 5xx only", function()
    for s = 100, 599 do
      local want = s == 408 or s == 409 or s == 429 or s >= 500
      assert.equal(want, http.retryable(s), s)
    end
  end)

  it("returns the decoded reply of a 2xx at once", function()
    local c, seen, sleeps = client({ { status = 200, body = '{"a":[1,2]}' } })
    local v, res = http.post(c, "op", URL, { x = 1 })
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
      local v, msg, code = http.post(c, "rag.x.y", URL, {})
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
      local v, msg, got = http.post(c, "op", URL, {})
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
    assert.same({}, (http.post(c, "op", URL, {})))
    assert.equal(3, #seen)
    assert.same({ 1.5, 1 }, sleeps) -- 61 s is beyond the cap: the backoff's 1 s instead
  end)

  it("respects max_retries", function()
    for n = 0, 4 do
      local c, seen, sleeps = client({ { status = 500 } }, { max_retries = n })
      local _, msg = http.post(c, "op", URL, {})
      assert.equal(n + 1, #seen)
      assert.equal(n, #sleeps)
      assert.equal(n > 0, msg:find("attempts") ~= nil)
    end
  end)

  it("reports bad JSON as decode", function()
    local c = client({ { status = 200, body = "{oops" } })
    local v, msg, code = http.post(c, "op", URL, {})
    assert.is_nil(v)
    assert.equal("decode", code)
    assert.truthy(msg:find("^op: POST http://127%.0%.0%.1:9/v1/embeddings: bad JSON"), msg)
  end)

  it("reports text that is not UTF-8 as encoding, sending nothing", function()
    local c, seen = client({ { status = 200 } })
    local v, msg, code = http.post(c, "op", URL, { input = { "ok", "\255" } })
    assert.is_nil(v)
    assert.equal("encoding", code)
    assert.truthy(msg:find("^op: "))
    assert.equal(0, #seen)
  end)

  it("does not retry once streamed pieces were delivered", function()
    local calls = 0
    local c = http.client({ transport = function(req)
      calls = calls + 1
      req.stream("data: partial\n")
      return nil, "rag.http.request: POST x: reset", "http"
    end, sleep = function() end })
    local got = {}
    local v, _, code = http.post(c, "op", URL, {}, function(p) got[#got + 1] = p end)
    assert.is_nil(v)
    assert.equal("http", code)
    assert.equal(1, calls)
    assert.same({ "data: partial\n" }, got)
  end)

  it("traces every attempt and wait without keys, headers or bodies", function()
    local c, _, _, events = client({ { status = 500 }, { status = 200, body = "{}" } })
    http.post(c, "op", URL, { secret = "body" })
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
    local c = client({ { status = 200 } })
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
    assert.is_true(http.has_key(c))
  end)

  it("strips user info, query and fragment from URLs", function()
    assert.equal("https://h:1/a/b", http.safe_url("https://u:sk-x@h:1/a/b?key=sk-x#f"))
    assert.equal("http://h", http.safe_url("http://h?k=1"))
    assert.equal("/p", http.safe_url("/p?x"))
  end)

  it("reads server-sent events split anywhere", function()
    local stream = ": hi\r\ndata: {\"a\":1}\r\n\r\ndata: x\ndata: y\n\nevent: e\ndata: [DONE]\n\n"
    for cut = 1, #stream do
      for cut2 = cut, #stream, 7 do
        local got = {}
        local feed, finish = http.sse(function(d) got[#got + 1] = d end)
        feed(stream:sub(1, cut))
        feed(stream:sub(cut + 1, cut2))
        feed(stream:sub(cut2 + 1))
        finish()
        assert.same({ '{"a":1}', "x\ny", "[DONE]" }, got)
      end
    end
    local got = {}
    local feed, finish = http.sse(function(d) got[#got + 1] = d end)
    feed("data: last")
    finish()
    assert.same({ "last" }, got)
  end)

  it("reads newline-delimited JSON split anywhere", function()
    local stream = '{"a":1}\n\r\n{"b":2}\r\n{"c":3}'
    for cut = 0, #stream do
      local got = {}
      local feed, finish = http.lines(function(l) got[#got + 1] = l end)
      feed(stream:sub(1, cut))
      feed(stream:sub(cut + 1))
      finish()
      assert.same({ '{"a":1}', '{"b":2}', '{"c":3}' }, got)
    end
  end)
end)
