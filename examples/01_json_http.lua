-- 01_json_http.lua: what the foundation offers, offline.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' \
--     lua5.4 examples/01_json_http.lua [BASE_URL]
-- Without BASE_URL it shows JSON and hashing. With the URL of a server that
-- answers /echo and /slow, such as the specs' loopback server (started by
-- `python3 spec/fixtures/httpd.py`, which prints its port first), it also
-- posts a JSON document, reads the reply and shows a timeout.
local rag = require("rag")

print(("rag %s on %s"):format(rag._VERSION, _VERSION))

-- JSON: arrays vs objects, null, big integers, unicode, errors as values.
local doc = {
  id = "doc-1",
  text = "Lua 是一门轻量级脚本语言 🚀",
  tags = {},                    -- an empty table encodes as []
  meta = rag.json.object(),     -- ... unless marked as an object
  views = 9007199254740993,     -- 2^53 + 1 stays exact on Lua 5.3+
  source = rag.json.null,
}
local s = assert(rag.json.encode(doc))
print("encoded:  " .. s)
local back = rag.json.decode(s)
print("decoded:  views = " .. tostring(back.views) .. ", text = " .. back.text)
local _, msg, code = rag.json.decode('{"a": [1, 2,]}')
print(("bad json: %s (%s)"):format(msg, code))

-- Content hash, for caches keyed by text.
print("sha-256:  " .. rag.text.hash(doc.text))

local base = arg[1]
if base then
  local res, err = rag.http.request({
    url = base .. "/echo",
    headers = { ["Content-Type"] = "application/json" },
    body = s,
    timeout = 5,
  })
  assert(res, err)
  local echo = rag.json.decode(res.body)
  print(("http:     %s %s -> %d, server got %d bytes of %s"):format(
    echo.method, echo.path, res.status, #echo.body, echo.headers["content-type"]))
  local none, terr, code2 = rag.http.request({ url = base .. "/slow?s=3", timeout = 0.5 })
  print(("timeout:  %s, %s (%s)"):format(tostring(none), terr, code2))
end
