-- rag.transport.ngx outside nginx: it loads under every Lua, checks its
-- request like rag.http.request and says where it can run. The transport
-- itself is tested inside nginx by spec/openresty/run.sh (make test-openresty).
local transport = require("rag.transport.ngx")

describe("rag.transport.ngx outside nginx", function()
  after_each(function()
    _G.ngx = nil
  end)

  it("is a function", function()
    assert.equal("function", type(transport))
  end)

  it("raises, naming rag.http.request, when there is no ngx", function()
    local ok, err = pcall(transport, { url = "http://127.0.0.1:1/" })
    assert.is_false(ok)
    assert.truthy(err:find("rag.http.request: needs nginx with ngx_lua", 1, true), err)
  end)

  it("raises the phase rule in phases without cosockets", function()
    for _, phase in ipairs({ "init", "init_worker", "set", "header_filter", "body_filter",
      "log", "balancer", "exit_worker", "ssl_session_store" }) do
      _G.ngx = { socket = {}, get_phase = function() return phase end }
      local ok, err = pcall(transport, { url = "http://127.0.0.1:1/" })
      assert.is_false(ok)
      local want = "rag.http.request: cosockets are not available in the '" .. phase ..
        "' phase of nginx; call from a content/access/rewrite/timer handler" ..
        " (e.g. ngx.timer.at(0, fn))"
      assert.equal(want, err:sub(-#want))
    end
  end)

  it("raises on misuse before looking at the phase", function()
    local bad = {
      {},
      { url = 1 },
      { url = "http://x/", method = "GET X" },
      { url = "http://x/", timeout = 0 },
      { url = "http://x/", connect_timeout = 2e6 },
      { url = "http://x/", max_body = -1 },
      { url = "http://x/", redirects = 1.5 },
      { url = "http://x/\0z" },
      { url = "http://x/", method = "HEAD", body = "x" },
      { url = "http://x/", headers = { ["X-A"] = "1\r\nX-B: 2" } },
      { url = "http://x/", headers = { ["X-A"] = "a\0b" } },
      { url = "http://x/", headers = { ["Bad Name"] = "1" } },
      { url = "http://x/", headers = { ["Transfer-Encoding"] = "chunked" } },
      { url = "http://x/", stream = true },
      { url = "http://x/", bogus = true },
    }
    for i, req in ipairs(bad) do
      local ok, err = pcall(transport, req)
      assert.is_false(ok, "case " .. i)
      assert.is_nil(err:find("needs nginx", 1, true), "case " .. i .. ": " .. err)
      assert.truthy(err:find("rag.http.request: ", 1, true), err)
    end
    assert.has_error(function() transport() end,
      "rag.http.request: the request must be a table, got nil")
    assert.has_error(function() transport("http://x/") end,
      "rag.http.request: the request must be a table, got string")
  end)
end)
