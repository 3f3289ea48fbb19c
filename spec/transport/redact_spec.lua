-- rag.transport._redact: the URL cut every message and trace shows (the
-- same cut rag.http.request makes in C) and the key scrubber's edges; the
-- forms of a key are checked through providers in spec/providers/redact_spec.
local redact = require("rag.transport._redact")
local rag = require("rag")

describe("rag.transport._redact.url", function()
  it("strips user info, query and fragment from URLs", function()
    assert.equal("https://h:1/a/b", redact.url("https://u:sk-x@h:1/a/b?key=sk-x#f"))
    assert.equal("http://h", redact.url("http://h?k=1"))
    assert.equal("/p", redact.url("/p?x"))
    assert.equal("http://h/a@b", redact.url("http://u:p@x@h/a@b?c@d"))
    assert.equal("http://[::1]:8/p", redact.url("http://u@[::1]:8/p#f"))
    assert.equal("h/p", redact.url("u:p@h/p?k"))
    assert.equal("", redact.url("?k=sk-x"))
  end)

  it("makes the cut rag.http.request makes in its messages", function()
    -- ftp:// fails at once, before any connection, with the URL in the message
    for _, url in ipairs({ "ftp://u:sk-x@h:1/a/b?key=sk-x#f", "ftp://h?k=1", "ftp://u:p@x@h/a@b?c",
      "ftp://u@[::1]:8/p#f", "ftp://h/p#f?g" }) do
      local res, msg = rag.http.request({ url = url })
      assert.is_nil(res)
      assert.truthy(msg:find("GET " .. redact.url(url) .. ":", 1, true), url .. " -> " .. msg)
    end
  end)
end)

describe("rag.transport._redact.scrubber", function()
  it("passes text through when there is no key", function()
    assert.equal("a sk-x b", redact.scrubber(nil)("a sk-x b"))
    assert.equal("a sk-x b", redact.scrubber("")("a sk-x b"))
    assert.equal("42", redact.scrubber(nil)(42))
  end)

  it("hides a key shorter than 8 characters only whole", function()
    local scrub = redact.scrubber("k1")
    assert.equal("[redacted] k [redacted]", scrub("k1 k k1k1"))
    assert.equal("k%31 = [redacted]", redact.scrubber("k-1")("k%31 = k%2D1"))
  end)

  it("joins touching occurrences into one [redacted]", function()
    local key = "sk-0123456789abcdef"
    assert.equal("<[redacted]>", redact.scrubber(key)("<" .. key .. key .. ">"))
    assert.equal("x [redacted] y", redact.scrubber(key)("x " .. key:sub(3, 12) .. " y"))
  end)
end)
