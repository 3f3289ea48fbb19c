-- rag.http.request against a real server on 127.0.0.1 (spec/fixtures/httpd.py).
local rag = require("rag")
local helpers = require("spec.helpers")

local http = rag.http

describe("rag.http.request", function()
  local base, stop

  setup(function()
    base, stop = helpers.start_httpd()
  end)

  teardown(function()
    stop()
  end)

  it("returns status, lowercased headers and body for a 200", function()
    local res = assert(http.request({ url = base .. "/ok" }))
    assert.equal(200, res.status)
    assert.equal("application/json", res.headers["content-type"])
    assert.equal("11", res.headers["content-length"])
    assert.equal('{"ok":true}', res.body)
  end)

  it("treats a 404 as a response, not an error", function()
    local res, msg, code = http.request({ url = base .. "/status/404" })
    assert.is_nil(msg)
    assert.is_nil(code)
    assert.equal(404, res.status)
    assert.equal('{"error":"status 404"}', res.body)
  end)

  it("returns 5xx statuses as responses", function()
    local res = assert(http.request({ url = base .. "/status/503" }))
    assert.equal(503, res.status)
  end)

  it("sends method, headers and body", function()
    local body = rag.json.encode({ input = { "a", "b" } })
    local res = assert(http.request({
      method = "PUT",
      url = base .. "/echo?x=1",
      headers = { ["Content-Type"] = "application/json", ["X-Count"] = 3 },
      body = body,
    }))
    local echo = rag.json.decode(res.body)
    assert.equal("PUT", echo.method)
    assert.equal("/echo?x=1", echo.path)
    assert.equal("application/json", echo.headers["content-type"])
    assert.equal("3", echo.headers["x-count"])
    assert.equal(body, echo.body)
    assert.is_nil(echo.headers["expect"])
    assert.truthy(echo.headers["user-agent"]:match("^rag/"))
  end)

  it("defaults to POST when a body is given and GET otherwise", function()
    local post = rag.json.decode(assert(http.request({
      url = base .. "/echo", body = "x" })).body)
    assert.equal("POST", post.method)
    assert.equal("x", post.body)
    local get = rag.json.decode(assert(http.request({ url = base .. "/echo" })).body)
    assert.equal("GET", get.method)
  end)

  it("sends a 2 MB body without an Expect pause", function()
    -- libcurl sends "Expect: 100-continue" for a large body and then waits
    -- up to 1 s for a reply that a plain server never sends
    local big = string.rep("y", 2 * 1024 * 1024)
    local res = assert(http.request({ url = base .. "/echo", body = big }))
    local echo = rag.json.decode(res.body)
    assert.equal(#big, #echo.body)
    assert.is_nil(echo.headers.expect)
  end)

  it("does a HEAD request without a body", function()
    local res = assert(http.request({ method = "HEAD", url = base .. "/ok" }))
    assert.equal(200, res.status)
    assert.equal("", res.body)
  end)

  it("joins repeated headers and trims values", function()
    local res = assert(http.request({ url = base .. "/headers" }))
    assert.equal("a, b", res.headers["x-multi"])
    assert.equal("padded", res.headers["x-mixed-case"])
  end)

  it("does not follow redirects unless asked", function()
    local res = assert(http.request({ url = base .. "/redirect" }))
    assert.equal(302, res.status)
    assert.equal("/ok", res.headers["location"])
    res = assert(http.request({ url = base .. "/redirect", redirects = 1 }))
    assert.equal(200, res.status)
    assert.equal('{"ok":true}', res.body)
    assert.is_nil(res.headers["location"])
  end)

  it("turns POST into GET on 303 and keeps it on 307", function()
    local res = assert(http.request({ url = base .. "/redirect?code=303&to=/echo",
      body = "payload", redirects = 1 }))
    local echo = rag.json.decode(res.body)
    assert.equal("GET", echo.method)
    assert.equal("", echo.body)
    res = assert(http.request({ url = base .. "/redirect?code=307&to=/echo",
      body = "payload", redirects = 1 }))
    echo = rag.json.decode(res.body)
    assert.equal("POST", echo.method)
    assert.equal("payload", echo.body)
  end)

  it("stops after the allowed number of redirects", function()
    local res = assert(http.request({ url = base .. "/redirect?to=/redirect", redirects = 1 }))
    assert.equal(302, res.status)
    assert.equal("/ok", res.headers["location"])
  end)

  it("never follows a redirect to another origin, so keys stay home", function()
    local other = base:gsub("127%.0%.0%.1", "localhost") .. "/echo"
    local res = assert(http.request({ url = base .. "/redirect?to=" .. other, redirects = 3,
      headers = { ["x-api-key"] = "sk-SECRET" } }))
    assert.equal(302, res.status)
    assert.equal(other, res.headers["location"])
  end)

  it("sends headers with empty values", function()
    local res = assert(http.request({ url = base .. "/echo", headers = { ["X-Empty"] = "" } }))
    assert.equal("", rag.json.decode(res.body).headers["x-empty"])
  end)

  it("times out a slow reply after its 1 s timeout, long before the reply", function()
    local t0 = helpers.now()
    local res, msg, code = http.request({ url = base .. "/slow?s=5", timeout = 1 })
    local elapsed = helpers.now() - t0
    assert.is_nil(res)
    assert.equal("timeout", code)
    assert.truthy(msg:match("^rag%.http%.request: GET http://127%.0%.0%.1:%d+/slow: "))
    -- libcurl keeps its timers in milliseconds and may fire one up to a
    -- millisecond early (0.99995 s was seen under ASan); the upper bound
    -- leaves room for a loaded machine and is still far from the 5 s reply
    assert.is_true(elapsed >= 0.998 and elapsed <= 2.5, "elapsed " .. elapsed)
  end)

  it("accepts fractional timeouts", function()
    local t0 = helpers.now()
    local _, _, code = http.request({ url = base .. "/slow?s=3", timeout = 0.3 })
    local elapsed = helpers.now() - t0
    assert.equal("timeout", code)
    assert.is_true(elapsed >= 0.298 and elapsed < 1.5, "elapsed " .. elapsed)
  end)

  it("stops an endless chunked body at max_body, within cap + 64 KiB", function()
    local cap = 1024 * 1024
    local t0 = helpers.now()
    local res, msg, code = http.request({ url = base .. "/endless", max_body = cap })
    assert.is_nil(res)
    assert.equal("http", code)
    local seen = tonumber(msg:match("stopped after (%d+)"))
    assert.truthy(msg:match("exceeds max_body %(1048576 bytes"), msg)
    assert.is_true(seen > cap and seen <= cap + 64 * 1024, "received " .. seen)
    assert.is_true(helpers.now() - t0 < 5)
  end)

  it("fails, without raising, on oversized response headers", function()
    -- one 200 KB line (libcurl's own limit), then 320 KB in all (rag's cap)
    for _, q in ipairs({ "n=1&size=200000", "n=4&size=80000" }) do
      local res, msg, code = http.request({ url = base .. "/bigheader?" .. q })
      assert.is_nil(res)
      assert.equal("http", code)
      assert.truthy(msg:match("^rag%.http%.request: GET "), msg)
    end
    assert.equal(200, assert(http.request({ url = base .. "/bigheader?n=4&size=1000" })).status)
  end)

  describe("libcurl", function()
    if os.getenv("RAG_ASAN") then
      pending("runs a second interpreter; covered by the plain runs")
      return
    end
    it("is opened on the first request, not when rag loads", function()
      assert.equal("false true", helpers.maps_lib("libcurl", "local rag = require('rag')",
        "assert(rag.http.request({ url = '" .. base .. "/ok' }).status == 200)"))
    end)
  end)

  it("reports a refused connection as an http failure", function()
    local port = helpers.free_port()
    local res, msg, code = http.request({ url = "http://127.0.0.1:" .. port .. "/" })
    assert.is_nil(res)
    assert.equal("http", code)
    assert.truthy(msg:match("^rag%.http%.request: GET http://127%.0%.0%.1:%d+/: "), msg)
  end)

  it("keeps query strings and user info out of messages", function()
    local port = helpers.free_port()
    local _, msg = http.request({
      url = "http://user:sk-SECRET1@127.0.0.1:" .. port .. "/v1?api_key=sk-SECRET2",
      headers = { Authorization = "Bearer sk-SECRET3" },
    })
    assert.is_nil(msg:find("SECRET", 1, true), msg)
    assert.truthy(msg:find("127.0.0.1:" .. port .. "/v1", 1, true))
  end)

  it("never shows user info, queries or fragments, however the URL is shaped", function()
    local port = helpers.free_port()
    local urls = {
      "http://127.0.0.1:" .. port .. "#frag@x",
      "http://user:p@ssSECRET@127.0.0.1:" .. port .. "/x",
      "127.0.0.1:" .. port .. "/x?key=sk-SECRET&next=http://y",
      "http://127.0.0.1:" .. port .. "/a?k=SECRET#SECRET",
    }
    for _, url in ipairs(urls) do
      local res, msg, code = http.request({ url = url })
      assert.is_nil(res)
      assert.equal("http", code)
      assert.is_nil(msg:find("SECRET", 1, true), msg)
      assert.is_nil(msg:find("frag", 1, true), msg)
    end
  end)

  it("fails TLS against a plain-HTTP port rather than downgrading", function()
    local res, msg, code = http.request({ url = base:gsub("^http:", "https:") .. "/ok",
      timeout = 5 })
    assert.is_nil(res)
    assert.equal("http", code)
    assert.is_string(msg)
  end)

  it("refuses schemes other than http and https", function()
    for _, url in ipairs({ "file:///etc/passwd", "ftp://127.0.0.1/", "gopher://x/" }) do
      local res, msg, code = http.request({ url = url })
      assert.is_nil(res)
      assert.equal("http", code)
      assert.truthy(msg:match("^rag%.http%.request: "))
    end
  end)

  it("raises on misuse", function()
    local bad = {
      {},
      { url = 1 },
      { url = base, method = "GET X" },
      { url = base, timeout = 0 },
      { url = base, timeout = -1 },
      { url = base, max_body = -1 },
      { url = base, redirects = 100 },
      { url = base, redirects = 1.5 },
      { url = base .. "/ok\0.evil" },
      { url = base, method = "GET\0x" },
      { url = base, method = "HEAD", body = "x" },
      { url = base, headers = "x" },
      { url = base, headers = { ["X-A"] = "1\r\nX-B: 2" } },
      { url = base, headers = { ["Bad Name"] = "1" } },
      { url = base, headers = { [1] = "x" } },
      { url = base, bogus = true },
      { url = base, stream = "x" },
    }
    for _, req in ipairs(bad) do
      assert.has_error(function() http.request(req) end)
    end
    assert.has_error(function() http.request() end,
      "bad argument #1 to 'request' (table expected, got no value)")
    assert.has_error(function() http.request("http://x") end,
      "bad argument #1 to 'request' (table expected, got string)")
  end)

  describe("stream", function()
    it("passes a 2xx body to the function piece by piece and keeps none", function()
      local pieces, total = {}, 0
      local res, msg, code = http.request({ url = base .. "/endless", timeout = 0.5,
        max_body = 1e15, stream = function(p) -- loopback can pass 1 GB in 0.5 s
          pieces[#pieces + 1] = #p
          total = total + #p
        end })
      assert.is_nil(res) -- the body never ends: the deadline stops it
      assert.equal("timeout", code, msg)
      assert.truthy(#pieces > 1)
      assert.truthy(total > 65536)
    end)

    it("delivers the whole body in order", function()
      local body = string.rep("0123456789", 5000)
      local got = {}
      local res = assert(http.request({ url = base .. "/echo", body = body,
        stream = function(p) got[#got + 1] = p end }))
      assert.equal(200, res.status)
      assert.equal("", res.body)
      assert.equal(body, rag.json.decode(table.concat(got)).body)
    end)

    it("keeps the body of other statuses instead", function()
      local called = false
      local res = assert(http.request({ url = base .. "/status/503",
        stream = function() called = true end }))
      assert.equal(503, res.status)
      assert.equal('{"error":"status 503"}', res.body)
      assert.is_false(called)
    end)

    it("raises the function's error again and stops the transfer", function()
      local calls = 0
      local ok, err = pcall(http.request, { url = base .. "/endless", timeout = 5,
        stream = function()
          calls = calls + 1
          error({ mine = true })
        end })
      assert.is_false(ok)
      assert.same({ mine = true }, err)
      assert.equal(1, calls)
      ok, err = pcall(http.request, { url = base .. "/ok", stream = function() error("boom") end })
      assert.is_false(ok)
      assert.truthy(err:find("boom", 1, true))
    end)

    it("counts streamed bytes against max_body", function()
      local n = 0
      local res, msg, code = http.request({ url = base .. "/endless", max_body = 300000,
        stream = function(p) n = n + #p end })
      assert.is_nil(res)
      assert.equal("http", code)
      assert.truthy(msg:find("max_body", 1, true))
      assert.truthy(n <= 300000)
    end)
  end)

  it("sleep waits and now measures it", function()
    local t0 = http.now()
    http.sleep(0.05)
    local dt = http.now() - t0
    assert.truthy(dt >= 0.05 and dt < 1, dt)
    assert.has_error(function() http.sleep(-1) end, "rag.http.sleep: seconds must be in [0, 1e6]")
    assert.has_error(function() http.sleep("x") end,
      "bad argument #1 to 'sleep' (number expected, got string)")
  end)
end)
