-- Keys never reach a caller: every form in which a server or a transport can
-- echo a provider's key is shown as "[redacted]" in messages, traces,
-- raised errors and tostring (the rule is in docs/api.md, rag.providers).
-- Each case drives a public provider through a scripted transport.
local rag = require("rag")

local json = rag.json

-- '/', '+' and '=' change under URL and JSON encoding.
local KEY = "sk-CANARY/7f+3a=9cQx8Z"

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

-- RFC 4648 base64 with padding, in arithmetic (no bit operators: Lua 5.1).
local function base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = { math.floor(n / 262144) % 64, math.floor(n / 4096) % 64,
      math.floor(n / 64) % 64, n % 64 }
    for j = 1, 4 do
      out[#out + 1] = B64:sub(q[j] + 1, q[j] + 1)
    end
    if not b then
      out[#out - 1], out[#out] = "=", "="
    elseif not c then
      out[#out] = "="
    end
  end
  return table.concat(out)
end

local function percent(s, all)
  return (s:gsub(all and "." or "[^%w%-_.~]", function(ch)
    return ("%%%02X"):format(ch:byte())
  end))
end

-- A provider whose transport answers every request with `res`, or is `res`.
local function provider(res, extra)
  local events = {}
  local o = { model = "m", api_key = KEY, base_url = "http://127.0.0.1:9/v1", max_retries = 0,
    sleep = function() end, trace = function(e) events[#events + 1] = e end,
    transport = type(res) == "function" and res or function(req)
      if req.stream and res.status == 200 then -- a 2xx goes to the stream function
        req.stream(res.body)
        return { status = 200, headers = {}, body = "" }
      end
      return res
    end }
  for k, v in pairs(extra or {}) do
    o[k] = v
  end
  return rag.providers.openai(o), events
end

local function reply(body, status)
  return { status = status or 401, headers = {}, body = body }
end

-- All a caller sees of a provider whose server answers `res`: tostring, the
-- messages of a failed embed, chat and streamed chat, and the traces.
local function seen(res, extra)
  local p, events = provider(res, extra)
  local out = { tostring(p) }
  out[#out + 1] = select(2, p:embed({ "x" }))
  out[#out + 1] = select(2, p:chat("hi"))
  out[#out + 1] = select(2, p:chat("hi", { stream = function() end }))
  for _, e in ipairs(events) do
    out[#out + 1] = json.encode(e)
  end
  return table.concat(out, "\n")
end

local function hides(form, s)
  assert.falsy(s:find(form, 1, true), "shows " .. form .. " in:\n" .. s)
  assert.truthy(s:find("[redacted]", 1, true), s)
end

describe("key redaction", function()
  it("hides the exact key in a base URL's path, in tostring, traces and messages", function()
    local s = seen(reply("{}", 500), { base_url = "http://127.0.0.1:9/t/" .. KEY .. "/v1" })
    hides(KEY, s)
    hides("CANARY", s)
    assert.truthy(s:find("http://127.0.0.1:9/t/[redacted]/v1", 1, true), s)
  end)

  it("hides the key percent-encoded, in either case and partly or fully", function()
    local lower = percent(KEY):gsub("%%%x%x", string.lower)
    local mixed = "sk-CANARY%2F7f+3a%3d9cQx8Z"
    for _, form in ipairs({ percent(KEY), lower, percent(KEY, true), mixed }) do
      hides(form, seen(reply("bad key " .. form .. "; see the docs")))
      hides(form, seen(reply('{"error":{"message":"key=' .. form .. ' rejected"}}', 403)))
    end
  end)

  it("hides the key JSON-escaped, with \\/ or \\u escapes", function()
    for _, form in ipairs({ "sk-CANARY\\/7f+3a=9cQx8Z", "sk-CANARY\\u002f7f\\u002b3a\\u003d9cQx8Z",
      "sk-CANARY\\u002F7f+3a\\u003D9cQx8Z", "\\u0073k-CANARY\\/7f+3a=9cQx8Z" }) do
      -- a proxy's text page quoting the JSON it forwarded
      hides(form, seen(reply('upstream said {"api_key":"' .. form .. '"}', 502)))
      -- an error event inside a stream, whose message is itself JSON
      local ev = "data: " .. json.encode({ error = { message = '{"key":"' .. form .. '"}' } })
      local p = provider(reply(ev .. "\n\n", 200))
      local _, msg, code = p:chat("hi", { stream = function() end })
      assert.equal("provider", code)
      hides(form, msg)
    end
  end)

  it("hides the key inside base64 of user:key (Basic auth), at every alignment", function()
    for _, user in ipairs({ "", "u", "us", "use", "apikey" }) do
      local b = base64(user .. ":" .. KEY)
      local s = seen(reply("rejected Authorization: Basic " .. b))
      hides(b, s)
      -- nor any run of it long enough to carry a part of the key
      assert.falsy(s:find(b:sub(5, 16), 1, true), s)
      local url = b:gsub("%+", "-"):gsub("/", "_") -- base64url
      hides(url, seen(reply("token " .. url .. " rejected")))
    end
  end)

  it("hides partly masked echoes that show a prefix and a suffix of the key", function()
    for _, form in ipairs({ "sk-CAN*****************Qx8Z", "sk-CANA...Qx8Z", "sk-CA***...x8Z",
      "sk-C\226\128\1668Z", "sk-CANARY/7f+****", "****************Qx8Z", "sk-C**8Z" }) do
      local s = seen(reply('{"error":{"message":"Incorrect API key provided: ' .. form
        .. '. You can find your API key at https://platform.openai.com/account/api-keys."}}'))
      hides(form, s)
      assert.falsy(s:find("8Z", 1, true), s)
      assert.truthy(s:find("You can find your API key", 1, true), s)
    end
  end)

  it("hides any run of 8 or more characters of the key, as in a message cut short", function()
    local s = seen(reply("fragment 'Y/7f+3a=9' revoked"))
    hides("Y/7f+3a=9", s)
    -- the server's message is cut at 300 characters, in the middle of the key
    s = seen(reply(("x"):rep(290) .. " " .. KEY))
    hides("sk-CANARY", s)
  end)

  it("leaves text that does not carry the key alone", function()
    local p = provider(reply("key sk-...wxyz or ***; Basic dXNlcjpwYXNz; sk-CAN; 8Z; 7f+3a=9"))
    local _, msg = p:embed({ "x" })
    assert.truthy(msg:find("key sk-...wxyz or ***; Basic dXNlcjpwYXNz; sk-CAN; 8Z; 7f+3a=9",
      1, true), msg)
  end)

  it("scrubs an error raised by a custom transport and raises it again", function()
    local forms = { KEY, percent(KEY), "sk-CANARY\\/7f+3a=9cQx8Z", base64("u:" .. KEY),
      "sk-CAN***Qx8Z" }
    for _, form in ipairs(forms) do
      local p = provider(function(req)
        error("my transport: cannot send " .. req.headers.authorization .. " as " .. form)
      end)
      local ok, err = pcall(p.embed, p, { "x" })
      assert.is_false(ok)
      assert.equal("string", type(err))
      hides(form, err)
      hides("CANARY", err)
      assert.truthy(err:find("my transport: cannot send Bearer [redacted] as [redacted]", 1,
        true), err)
      ok, err = pcall(p.chat, p, "hi", { stream = function() end })
      assert.is_false(ok)
      hides(form, err)
    end
    -- an error value that is not a string is raised again as it is
    local obj = { reason = "mine" }
    local p = provider(function() error(obj) end)
    local ok, err = pcall(p.embed, p, { "x" })
    assert.is_false(ok)
    assert.equal(obj, err)
  end)
end)
