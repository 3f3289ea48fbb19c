-- rag.providers._decode: server-sent events and newline-delimited JSON
-- arriving in pieces cut anywhere.
local decode = require("rag.providers._decode")

describe("rag.providers._decode", function()
  it("reads server-sent events split anywhere", function()
    local stream = ": hi\r\ndata: {\"a\":1}\r\n\r\ndata: x\ndata: y\n\nevent: e\ndata: [DONE]\n\n"
    for cut = 1, #stream do
      for cut2 = cut, #stream, 7 do
        local got = {}
        local feed, finish = decode.sse(function(d) got[#got + 1] = d end)
        feed(stream:sub(1, cut))
        feed(stream:sub(cut + 1, cut2))
        feed(stream:sub(cut2 + 1))
        finish()
        assert.same({ '{"a":1}', "x\ny", "[DONE]" }, got)
      end
    end
    local got = {}
    local feed, finish = decode.sse(function(d) got[#got + 1] = d end)
    feed("data: last")
    finish()
    assert.same({ "last" }, got)
  end)

  it("reads newline-delimited JSON split anywhere", function()
    local stream = '{"a":1}\n\r\n{"b":2}\r\n{"c":3}'
    for cut = 0, #stream do
      local got = {}
      local feed, finish = decode.lines(function(l) got[#got + 1] = l end)
      feed(stream:sub(1, cut))
      feed(stream:sub(cut + 1))
      finish()
      assert.same({ '{"a":1}', '{"b":2}', '{"c":3}' }, got)
    end
  end)
end)
