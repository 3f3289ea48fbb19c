--- rag.providers.http: the one request path of every provider: JSON over a
-- transport, the retry policy, the error codes, traces, and keeping API
-- keys out of messages and traces.
-- @module rag.providers.http
local core = require("rag.core")
local transport = require("rag.transport")

local json = core.json
local type, tostring, tonumber, pairs, setmetatable = type, tostring, tonumber, pairs, setmetatable
local floor, random = math.floor, math.random

local M = {}

--- Statuses worth another attempt: 408, 409, 429 and every 5xx.
function M.retryable(status)
  return status == 408 or status == 409 or status == 429 or (status >= 500 and status <= 599)
end

--- Seconds to wait before retry number `n + 1` (n = 0, 1, ...): 0.5 s × 2^n,
-- capped at 8 s, less up to a quarter at random (`rnd()` in [0, 1)).
function M.backoff(n, rnd)
  local d = 0.5 * 2 ^ n
  if d > 8 then
    d = 8
  end
  return d * (1 - 0.25 * (rnd or random)())
end

local MONTHS = { Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6,
  Jul = 7, Aug = 8, Sep = 9, Oct = 10, Nov = 11, Dec = 12 }

-- Seconds since 1970 of a UTC civil date (days_from_civil, proleptic Gregorian).
local function epoch(y, m, d, hh, mm, ss)
  if m <= 2 then
    y = y - 1
  end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return ((era * 146097 + doe - 719468) * 24 + hh) * 3600 + mm * 60 + ss
end

--- The wait a response asks for, in seconds, or nil: `retry-after-ms`, or
-- `retry-after` as seconds or as an HTTP date (against `now`, seconds since
-- 1970, default `os.time()`).
function M.retry_after(headers, now)
  local ms = tonumber(headers["retry-after-ms"] or "")
  if ms then
    return ms / 1000
  end
  local v = headers["retry-after"]
  if type(v) ~= "string" then
    return nil
  end
  local s = tonumber(v)
  if s then
    return s
  end
  local d, mon, y, hh, mm, ss = v:match("^%a+, (%d%d?) (%a+) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT$")
  if not d or not MONTHS[mon] then
    return nil
  end
  return epoch(tonumber(y), MONTHS[mon], tonumber(d), tonumber(hh), tonumber(mm), tonumber(ss))
    - (now or os.time())
end

--- scheme://host[:port]/path of a URL: no user info, query or fragment.
function M.safe_url(url)
  local scheme, rest = url:match("^(%a[%w+.-]*://)(.*)$")
  if not scheme then
    return (url:gsub("[?#].*$", ""))
  end
  local authority, path = rest:match("^([^/?#]*)([^?#]*)")
  authority = authority:gsub("^.*@", "")
  return scheme .. authority .. path
end

-- Every occurrence of `secret` in s replaced by "[redacted]".
local function redact(s, secret)
  if not secret or secret == "" then
    return s
  end
  local out, i = {}, 1
  while true do
    local a, b = s:find(secret, i, true)
    if not a then
      break
    end
    out[#out + 1] = s:sub(i, a - 1)
    out[#out + 1] = "[redacted]"
    i = b + 1
  end
  out[#out + 1] = s:sub(i)
  return table.concat(out)
end

-- The error text of a reply body in the shapes servers use: OpenAI's
-- {error={message=}}, Ollama's and TEI's {error=}, Cohere's {message=},
-- FastAPI's {detail=}; else the start of the body.
local function server_message(body)
  local v = json.decode(body)
  local text
  if type(v) == "table" then
    local e = v.error
    if type(e) == "table" then
      e = e.message
    end
    text = e or v.message or v.detail
    if type(text) == "table" then
      text = json.encode(text)
    end
  end
  if type(text) ~= "string" then
    text = body
  end
  text = text:gsub("[%c]+", " "):gsub("^%s+", ""):gsub("%s+$", "")
  if #text > 300 then
    text = text:sub(1, 300) .. "..."
  end
  return text
end

local CODES = { io = true, format = true, version = true, corrupt = true, encoding = true,
  http = true, timeout = true, auth = true, ratelimit = true, provider = true, decode = true,
  budget = true }

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

-- Keys live here, not in the client tables users can print or dump.
local secrets = setmetatable({}, { __mode = "k" })

--- A client: the settings one provider object sends with.
-- @tparam table o `transport`, `timeout`, `max_retries`, `sleep`, `now`,
--   `trace`, `headers` (extra, not secret), `random`
-- @tparam[opt] string key the API key
-- @tparam[opt] string auth_header header name (default "authorization")
-- @tparam[opt] string auth_prefix value prefix (default "Bearer ")
function M.client(o, key, auth_header, auth_prefix)
  local c = {
    transport = o.transport or transport.default,
    timeout = o.timeout or 60,
    max_retries = o.max_retries or 2,
    sleep = o.sleep or transport.sleep,
    now = o.now or transport.now,
    random = o.random or random,
    trace = o.trace,
    headers = o.headers or {},
    auth_header = auth_header or "authorization",
    auth_prefix = auth_prefix or "Bearer ",
  }
  if key and key ~= "" then
    secrets[c] = key
  end
  return c
end

--- `s` with the client's key replaced by "[redacted]".
function M.clean(c, s)
  return redact(s, secrets[c])
end

--- Whether the client sends a key.
function M.has_key(c)
  return secrets[c] ~= nil
end

local function trace(c, ev)
  if c.trace then
    c.trace(ev)
  end
end

-- The failure after the last attempt, as nil, msg, code.
local function failure(c, fname, method, url, attempts, res, msg, code)
  local where = method .. " " .. M.safe_url(url)
  local after = attempts > 1 and (" (after " .. attempts .. " attempts)") or ""
  if res == nil then
    msg = tostring(msg or "no response"):gsub("^rag%.http%.request: ", "")
    if msg:sub(1, #where) ~= where then
      msg = where .. ": " .. msg
    end
    code = CODES[code] and code or "http"
    return nil, redact(fname .. ": " .. msg .. after, secrets[c]), code
  end
  local text = server_message(res.body or "")
  msg = fname .. ": " .. where .. ": HTTP " .. res.status
  if text ~= "" then
    msg = msg .. ": " .. text
  end
  return nil, redact(msg .. after, secrets[c]), status_code(res.status)
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
-- @return value, res | nil, msg, code
function M.post(c, fname, url, body, stream)
  local payload, emsg = json.encode(body)
  if payload == nil then
    return nil, fname .. ": " .. tostring(emsg):gsub("^rag%.json%.encode: ", ""), "encoding"
  end
  local headers = { ["content-type"] = "application/json", accept = "application/json" }
  for k, v in pairs(c.headers) do
    headers[k] = v
  end
  if secrets[c] then
    headers[c.auth_header] = c.auth_prefix .. secrets[c]
  end
  local streamed = false
  local req = { method = "POST", url = url, headers = headers, body = payload,
    timeout = c.timeout }
  if stream then
    req.stream = function(piece)
      streamed = true
      stream(piece)
    end
  end
  local safe = M.safe_url(url)
  local attempt = 0
  while true do
    attempt = attempt + 1
    local t0 = c.now()
    local res, msg, code = c.transport(req)
    local status = res and res.status
    local ok = status ~= nil and status >= 200 and status <= 299
    local ev = { event = "request", op = fname, method = "POST", url = safe,
      attempt = attempt, status = status, seconds = c.now() - t0 }
    if not ok then
      ev.code = res and status_code(status) or (CODES[code] and code or "http")
    end
    trace(c, ev)
    if ok then
      if stream then
        return res, res
      end
      local v, derr = json.decode(res.body)
      if v == nil then
        return nil, redact(fname .. ": POST " .. safe .. ": bad JSON in the reply: "
          .. tostring(derr):gsub("^rag%.json%.decode: ", ""), secrets[c]), "decode"
      end
      return v, res
    end
    local retry
    if res == nil then
      retry = code == "timeout" or code == "http" or not CODES[code]
    else
      retry = M.retryable(status)
    end
    if not retry or streamed or attempt > c.max_retries then
      return failure(c, fname, "POST", url, attempt, res, msg, code)
    end
    local delay = res and M.retry_after(res.headers or {})
    if not (delay and delay >= 0 and delay <= 60) then
      delay = M.backoff(attempt - 1, c.random)
    end
    trace(c, { event = "retry", op = fname, url = safe, attempt = attempt, delay = delay })
    c.sleep(delay)
  end
end

-- Appends `piece` to `buf`, passes each complete line (without its LF or
-- CRLF) to on_line, and returns what is left after the last LF.
local function split_lines(buf, piece, on_line)
  buf = buf .. piece
  local i = 1
  while true do
    local j = buf:find("\n", i, true)
    if not j then
      break
    end
    local l = buf:sub(i, j - 1)
    if l:sub(-1) == "\r" then
      l = l:sub(1, -2)
    end
    on_line(l)
    i = j + 1
  end
  return buf:sub(i)
end

--- A server-sent-events reader: `feed(piece)` takes body pieces in order,
-- and `on_data(data)` gets each event's data (its "data:" lines joined with
-- "\n"). Comments and other fields are skipped; LF or CRLF line ends.
-- @treturn function feed
-- @treturn function finish, which flushes a last event lacking its blank line
function M.sse(on_data)
  local buf, data = "", nil
  local function line(l)
    if l == "" then
      if data then
        local d = data
        data = nil
        on_data(d)
      end
    elseif l:sub(1, 5) == "data:" then
      local v = l:sub(6):gsub("^ ", "")
      data = data and (data .. "\n" .. v) or v
    end
  end
  local function feed(piece)
    buf = split_lines(buf, piece, line)
  end
  local function finish()
    if buf ~= "" then
      line((buf:gsub("\r$", "")))
      buf = ""
    end
    line("")
  end
  return feed, finish
end

--- Reads newline-delimited JSON: `feed(piece)`; `on_line(text)` per line.
function M.lines(on_line)
  local buf = ""
  local function nonblank(l)
    if l:find("%S") then
      on_line(l)
    end
  end
  local function feed(piece)
    buf = split_lines(buf, piece, nonblank)
  end
  local function finish()
    if buf:find("%S") then
      on_line(buf)
    end
    buf = ""
  end
  return feed, finish
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

--- The options every provider takes, merged into `schema` (a new table).
function M.schema(schema)
  local out = {
    timeout = { "number", default = 60, above = 0, max = 1e6 },
    max_retries = { "number", default = 2, int = true, min = 0, max = 20 },
    transport = { "function" },
    sleep = { "function" },
    trace = { "function" },
    headers = { "table" },
  }
  for k, v in pairs(schema) do
    out[k] = v
  end
  return out
end

--- What `tostring` shows of a provider: its kind, model and base URL
-- (without query or user info), never its key.
function M.describe(fname, p)
  return fname .. "{ " .. (p.kind and ("kind = " .. p.kind .. ", ") or "") .. "model = "
    .. tostring(p.model) .. ", base_url = " .. M.safe_url(p.base_url) .. " }"
end

--- `base` without trailing slashes.
function M.trim_base(base)
  return (base:gsub("/+$", ""))
end

return M
