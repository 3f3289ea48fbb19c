--- rag.providers._request (internal, not API): the one request path of
-- every provider: building a provider and its client, sending JSON over a
-- transport with the retry policy (rag.providers._retry), mapping failures
-- to codes, traces, and keeping the key out of all a caller sees
-- (rag.transport._redact).
-- @module rag.providers._request
local core = require("rag.core")
local transport = require("rag.transport")
local redact = require("rag.transport._redact")
local retry = require("rag.providers._retry")
local decode = require("rag.providers._decode")
local check = require("rag.opts").check
local is_code = require("rag.errors").is_code

local json = core.json
local type, tostring, pairs, setmetatable, select = type, tostring, pairs, setmetatable, select
local error, pcall, concat, random = error, pcall, table.concat, math.random

local M = {}

-- {====== Providers and clients ======}

--- `base` without trailing slashes.
function M.trim_base(base)
  return (base:gsub("/+$", ""))
end

--- A new table with the fields of every table given, later ones winning.
function M.merge(...)
  local out = {}
  for i = 1, select("#", ...) do
    for k, v in pairs((select(i, ...))) do
      out[k] = v
    end
  end
  return out
end

-- The options every provider takes.
local COMMON = {
  timeout = { "number", default = 60, above = 0, max = 1e6 },
  max_retries = { "number", default = 2, int = true, min = 0, max = 20 },
  transport = { "function" },
  sleep = { "function" },
  trace = { "function" },
  headers = { "table" },
  base_url = { "string" },
  api_key = { "string" },
  model = { "string" },
}

--- The options every provider takes, merged with the given schemas.
function M.schema(...)
  return M.merge(COMMON, ...)
end

--- The checked options of a provider's constructor (a new table); raises,
-- blamed on the constructor's caller, on a bad option or when the option
-- named `required` is missing or empty.
function M.options(fname, opts, schema, required)
  local o = check(fname, opts, schema, 3)
  if required and (o[required] == nil or o[required] == "") then
    error(fname .. ": '" .. required .. "' is required", 3)
  end
  return o
end

--- Reads the key from opts or the first set environment variable.
function M.key(opt, ...)
  if opt ~= nil then
    return opt
  end
  for i = 1, select("#", ...) do
    local v = os.getenv((select(i, ...)))
    if v and v ~= "" then
      return v
    end
  end
  return nil
end

-- Keys and their scrubbers live here, not in the client tables users can
-- print or dump.
local secrets = setmetatable({}, { __mode = "k" })

--- A client: the settings one provider object sends with.
-- @tparam table o `transport`, `timeout`, `max_retries`, `sleep`, `now`,
--   `trace`, `headers` (extra, not secret), `random`
-- @tparam[opt] string key the API key
function M.client(o, key)
  local c = {
    transport = o.transport or transport.default,
    timeout = o.timeout or 60,
    max_retries = o.max_retries or 2,
    sleep = o.sleep or transport.sleep,
    now = o.now or transport.now,
    random = o.random or random,
    trace = o.trace,
    headers = o.headers or {},
  }
  if key == "" then
    key = nil
  end
  secrets[c] = { key = key, scrub = redact.scrubber(key) }
  return c
end

--- `s` with every form of the client's key replaced by "[redacted]".
function M.scrub(c, s)
  return secrets[c].scrub(s)
end

--- What `tostring` shows of a provider: its kind, model and base URL
-- (without query or user info), never its key.
local function describe(fname, p)
  return fname .. "{ " .. (p.kind and ("kind = " .. p.kind .. ", ") or "") .. "model = "
    .. tostring(p.model) .. ", base_url = " .. M.scrub(p.client, redact.url(p.base_url)) .. " }"
end

--- A provider class: methods go in it, `tostring` describes its objects.
function M.class(fname)
  local class = {}
  class.__index = class
  class.__tostring = function(self)
    return describe(fname, self)
  end
  return class
end

--- A provider object of `class`: `fields` and a client built from the
-- checked options `o`, with the key from `o.api_key` or the first set
-- environment variable named after it.
function M.new(class, o, fields, ...)
  fields.client = M.client(o, M.key(o.api_key, ...))
  return setmetatable(fields, class)
end

--- The messages as a list of `{ role=, content= }` tables (a string is one
-- user message); raises on anything else, blamed on the caller of the
-- caller.
function M.messages(fname, messages)
  if type(messages) == "string" then
    return { { role = "user", content = messages } }
  end
  if type(messages) ~= "table" or #messages == 0 then
    error(fname .. ": messages must be a string or a non-empty list of messages", 3)
  end
  for i = 1, #messages do
    local m = messages[i]
    if type(m) ~= "table" or type(m.role) ~= "string" then
      error(fname .. ": messages[" .. i .. "] must be a table with a string 'role'", 3)
    end
  end
  return messages
end

-- {====== Sending ======}

local function status_code(status)
  if status == 401 or status == 403 then
    return "auth"
  elseif status == 429 then
    return "ratelimit"
  elseif status == 408 then
    return "timeout"
  elseif status >= 500 then
    return "http"
  end
  return "provider"
end

-- Calls the transport. An error it raises is misuse (a transport returns
-- nil, msg, code for failures) and is raised again, a string scrubbed of the
-- key; an error raised by the caller's stream function passes untouched.
local function send(c, req, state)
  local ok, res, msg, code = pcall(c.transport, req)
  if ok then
    return res, msg, code
  end
  if type(res) == "string" and not state.in_stream then
    res = M.scrub(c, res)
  end
  error(res, 0)
end

-- At most 300 bytes of a server's text, "..." marking a cut (a little more
-- rather than cut a "[redacted]" in two).
local function shorten(text)
  local n = 300
  local a = text:find("[redacted]", n - 9, true)
  if a and a <= n then
    n = a + 9
  end
  if #text <= n then
    return text
  end
  return text:sub(1, n) .. "..."
end

-- The failure after the last attempt, as nil, msg, code.
local function failure(c, fname, where, attempts, res, msg, code)
  local after = attempts > 1 and (" (after " .. attempts .. " attempts)") or ""
  if res == nil then
    msg = M.scrub(c, msg or "no response"):gsub("^rag%.http%.request: ", "")
    if msg:sub(1, #where) ~= where then
      msg = where .. ": " .. msg
    end
    return nil, fname .. ": " .. msg .. after, is_code(code) and code or "http"
  end
  local text = shorten(M.scrub(c, decode.server_message(res.body or "")))
  msg = fname .. ": " .. where .. ": HTTP " .. res.status
  if text ~= "" then
    msg = msg .. ": " .. text
  end
  return nil, msg .. after, status_code(res.status)
end

--- Sends `body` (a Lua value, as JSON) and returns the decoded JSON reply,
-- retrying as the policy says.
-- @tparam table c a client
-- @tparam string fname the public operation, for messages
-- @tparam string url
-- @param body
-- @tparam[opt] function stream when given, receives the pieces of a 2xx
--   body as they arrive; the call then returns the response, not JSON. No
--   retry happens once a piece has been delivered.
-- @tparam[opt] table how `method` ("GET": no body is sent; default
--   "POST"), `key_header` (the header that carries the key, as it is;
--   default `authorization: Bearer <key>`) and `timeout` (seconds for the
--   whole call, retries and their waits included: each attempt gets what
--   is left, at most the client's timeout, and no retry starts after it)
-- @return value, res | nil, msg, code
function M.post(c, fname, url, body, stream, how)
  local method = how and how.method or "POST"
  local payload, emsg
  if method ~= "GET" then
    payload, emsg = json.encode(body)
    if payload == nil then
      return nil, fname .. ": " .. tostring(emsg):gsub("^rag%.json%.encode: ", ""), "encoding"
    end
  end
  local headers = { accept = "application/json" }
  if payload then
    headers["content-type"] = "application/json"
  end
  for k, v in pairs(c.headers) do
    headers[k] = v
  end
  local key = secrets[c].key
  if key and how and how.key_header then
    headers[how.key_header] = key
  elseif key then
    headers.authorization = "Bearer " .. key
  end
  local state = { streamed = false, in_stream = false }
  local req = { method = method, url = url, headers = headers, body = payload,
    timeout = c.timeout }
  if stream then
    req.stream = function(piece)
      state.streamed, state.in_stream = true, true
      stream(piece)
      state.in_stream = false
    end
  end
  local safe = M.scrub(c, redact.url(url))
  local where = method .. " " .. safe
  local deadline = how and how.timeout and c.now() + how.timeout
  local attempt = 0
  while true do
    attempt = attempt + 1
    local t0 = c.now()
    if deadline then
      req.timeout = math.min(c.timeout, math.max(deadline - t0, 0.001))
    end
    local res, msg, code = send(c, req, state)
    local status = res and res.status
    local ok = status ~= nil and status >= 200 and status <= 299
    local ev = { event = "request", op = fname, method = method, url = safe,
      attempt = attempt, status = status, seconds = c.now() - t0 }
    if not ok then
      ev.code = res and status_code(status) or (is_code(code) and code or "http")
    end
    if c.trace then
      c.trace(ev)
    end
    if ok then
      if stream then
        return res, res
      end
      local v, derr = decode.json(res.body)
      if v == nil then
        return nil, M.scrub(c, fname .. ": " .. where .. ": bad JSON in the reply: " .. derr),
          "decode"
      end
      return v, res
    end
    local again
    if res == nil then
      again = code == "timeout" or code == "http" or not is_code(code)
    else
      again = retry.retryable(status)
    end
    if not again or state.streamed or attempt > c.max_retries then
      return failure(c, fname, where, attempt, res, msg, code)
    end
    local delay = retry.delay(res, attempt, c.random)
    if deadline and c.now() + delay >= deadline then -- no time left for another attempt
      return failure(c, fname, where, attempt, res, msg, code)
    end
    if c.trace then
      c.trace({ event = "retry", op = fname, url = safe, attempt = attempt, delay = delay })
    end
    c.sleep(delay)
  end
end

--- Posts `body` and returns what `parse(reply)` makes of the JSON reply:
-- its results, or for `nil, why` the failure `nil, fname: why, "decode"`.
-- `how` as for `post`.
function M.call(c, fname, url, body, parse, how)
  local v, msg, code = M.post(c, fname, url, body, nil, how)
  if v == nil then
    return nil, msg, code
  end
  local a, b = parse(v)
  if a == nil then
    return nil, fname .. ": " .. b, "decode"
  end
  return a, b
end

--- Posts `body` and streams the 2xx reply through a reader that
-- `reader(on_item)` makes (rag.providers._decode's sse or lines).
-- `on_item(item)` returns nothing to go on, or a message (without `fname`)
-- and a code, which become the result; later items are skipped.
-- @return the whole body | nil, msg, code
function M.stream(c, fname, url, body, reader, on_item, how)
  local err, raw = nil, {}
  local feed, finish = reader(function(item)
    if not err then
      local msg, code = on_item(item)
      if msg then
        err = { msg, code }
      end
    end
  end)
  local res, msg, code = M.post(c, fname, url, body, function(piece)
    raw[#raw + 1] = piece
    feed(piece)
  end, how)
  if res == nil then
    return nil, msg, code
  end
  finish()
  if err then
    return nil, M.scrub(c, fname .. ": " .. err[1]), err[2]
  end
  return concat(raw)
end

return M
