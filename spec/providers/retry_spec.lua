-- rag.providers._retry: which statuses are tried again and how long to wait.
local retry = require("rag.providers._retry")

describe("rag.providers._retry", function()
  it("backs off 0.5 s × 2^n, capped at 8 s, less up to a quarter", function()
    local zero, almost = function() return 0 end, function() return 0.999999 end
    local want = { 0.5, 1, 2, 4, 8, 8, 8 }
    for n = 0, 6 do
      assert.equal(want[n + 1], retry.backoff(n, zero))
      assert.near(want[n + 1] * 0.75, retry.backoff(n, almost), 1e-5)
    end
    for _ = 1, 200 do
      local d = retry.backoff(2)
      assert.truthy(d > 1.5 and d <= 2)
    end
  end)

  it("reads Retry-After as seconds, milliseconds or an HTTP date", function()
    assert.equal(3, retry.retry_after({ ["retry-after"] = "3" }))
    assert.equal(0.25, retry.retry_after({ ["retry-after"] = "0.25" }))
    assert.equal(1.5, retry.retry_after({ ["retry-after-ms"] = "1500", ["retry-after"] = "9" }))
    assert.is_nil(retry.retry_after({}))
    assert.is_nil(retry.retry_after({ ["retry-after"] = "soon" }))
    -- 784111777 is Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example).
    assert.equal(7, retry.retry_after({ ["retry-after"] = "Sun, 06 Nov 1994 08:49:44 GMT" },
      784111777))
    assert.equal(-86400, retry.retry_after({ ["retry-after"] = "Sat, 05 Nov 1994 08:49:37 GMT" },
      784111777))
    assert.equal(951782400 - 784111777, retry.retry_after(
      { ["retry-after"] = "Tue, 29 Feb 2000 00:00:00 GMT" }, 784111777))
  end)

  it("retries 408, 409, 429 and 5xx only", function()
    for s = 100, 599 do
      local want = s == 408 or s == 409 or s == 429 or s >= 500
      assert.equal(want, retry.retryable(s), s)
    end
  end)
end)
