--- rag.transport.ngx: HTTP(S) over OpenResty cosockets (`ngx.socket.tcp`),
-- the non-blocking twin of `rag.http.request`: the same request table, the
-- same response table, the same `nil, msg, code` failures. Works in the
-- rewrite, access, content, timer, ssl_cert, ssl_session_fetch and
-- ssl_client_hello phases (and stream preread); raises in any other.
-- HTTPS is verified against nginx's `lua_ssl_trusted_certificate`.
-- @module rag.transport.ngx
-- luacheck: globals ngx

local type, tostring, tonumber, pairs, pcall, error = type, tostring, tonumber, pairs, pcall, error
local concat = table.concat
local floor, ceil, huge = math.floor, math.ceil, math.huge
local format = string.format
-- The URL for messages: scheme://host[:port]/path, the cut rag.http.request
-- makes (keys live in the user info and the query).
local safe_url = require("rag.transport._redact").url

local FNAME = "rag.http.request"
local DEFAULT_TIMEOUT = 60
local DEFAULT_CONNECT_TIMEOUT = 10
local DEFAULT_MAX_BODY = 64 * 1024 * 1024
local MAX_HEAD = 256 * 1024      -- one response head, as the libcurl transport allows
local MAX_HEAD_LINE = 100 * 1024 -- one header line (libcurl's own limit)
local MAX_CHUNK_LINE = 4096      -- a chunk-size line with its extensions
local MAX_TRAILERS = 64 * 1024
local READ_SIZE = 65536          -- largest piece read (and streamed) at once
local KEEPALIVE_MS = 30000       -- idle time of a pooled connection
local MAX_STALE_RETRIES = 2      -- pooled connections found dead before any reply

-- ngx.get_phase() values in which cosockets work (ngx_lua 0.10.x).
local COSOCKET_PHASES = {
  rewrite = true, access = true, content = true, timer = true, ssl_cert = true,
  ssl_session_fetch = true, ssl_client_hello = true, preread = true,
}

local OPTIONS = {
  body = true, ca_file = true, connect_timeout = true, headers = true, max_body = true,
  method = true, redirects = true, stream = true, timeout = true, url = true,
}

local USER_AGENT = "rag"
do
  local ok, core = pcall(require, "rag.core")
  if ok and type(core) == "table" and type(core.version) == "string" then
    USER_AGENT = "rag/" .. core.version
  end
end

local function now()
  ngx.update_time()
  return ngx.now()
end

-- {====== Requests: checks and URLs ======}

local function is_token(s)
  return s ~= "" and s:find("^[%w!#$%%&'*+%-.^_`|~]+$") ~= nil
end

-- Checks the headers table; returns { {name, value}, ... } and a set of
-- lowercased names, or nil and what is wrong.
local function check_headers(headers)
  local list, names = {}, {}
  if headers == nil then
    return list, names
  end
  if type(headers) ~= "table" then
    return nil, "option 'headers' must be a table, got " .. type(headers)
  end
  for name, value in pairs(headers) do
    local tv = type(value)
    if type(name) ~= "string" or (tv ~= "string" and tv ~= "number") then
      return nil, "headers must map names to strings"
    end
    if not is_token(name) then
      return nil, "invalid header name '" .. name .. "'"
    end
    value = tostring(value)
    if value:find("[\r\n]") or value:find("\0", 1, true) then
      return nil, "header '" .. name .. "' contains CR, LF or NUL"
    end
    local lname = name:lower()
    if lname == "transfer-encoding" then
      return nil, "header 'Transfer-Encoding' is not supported (bodies are sent whole)"
    end
    if lname ~= "content-length" then -- always computed from the body
      list[#list + 1] = { name, value }
      names[lname] = true
    end
  end
  return list, names
end

local function check_seconds(req, key, def)
  local v = req[key]
  if v == nil then
    return def
  end
  if type(v) ~= "number" then
    return nil, "option '" .. key .. "' must be a number, got " .. type(v)
  end
  if not (v > 0 and v <= 1e6) then
    return nil, "option '" .. key .. "' must be in (0, 1e6] seconds"
  end
  return v
end

-- Checks a request table; returns a normalized copy or nil and what is wrong.
local function check_request(req)
  for k in pairs(req) do
    if type(k) ~= "string" then
      return nil, "option keys must be strings"
    end
    if not OPTIONS[k] then
      return nil, "unknown option '" .. k .. "'"
    end
  end
  local r = {}
  for _, key in ipairs({ "url", "body", "method", "ca_file" }) do
    local v = req[key]
    if v ~= nil and type(v) ~= "string" then
      return nil, "option '" .. key .. "' must be a string, got " .. type(v)
    end
    if key ~= "body" and v ~= nil and v:find("\0", 1, true) then
      return nil, "option '" .. key .. "' must not contain a NUL byte"
    end
    r[key] = v
  end
  if r.url == nil then
    return nil, "option 'url' is required"
  end
  r.method = r.method or (r.body ~= nil and "POST" or "GET")
  if not is_token(r.method) then
    return nil, "invalid method '" .. r.method .. "'"
  end
  if r.body ~= nil and r.method == "HEAD" then
    return nil, "a HEAD request has no body"
  end
  local err
  r.timeout, err = check_seconds(req, "timeout", DEFAULT_TIMEOUT)
  if not r.timeout then
    return nil, err
  end
  r.connect_timeout, err = check_seconds(req, "connect_timeout",
    r.timeout < DEFAULT_CONNECT_TIMEOUT and r.timeout or DEFAULT_CONNECT_TIMEOUT)
  if not r.connect_timeout then
    return nil, err
  end
  r.max_body = req.max_body == nil and DEFAULT_MAX_BODY or req.max_body
  if type(r.max_body) ~= "number" or not (r.max_body >= 0 and r.max_body <= 1e15) then
    return nil, "option 'max_body' must be in [0, 1e+15]"
  end
  r.redirects = req.redirects == nil and 0 or req.redirects
  if type(r.redirects) ~= "number" or not (r.redirects >= 0 and r.redirects <= 50) or
      r.redirects ~= floor(r.redirects) then
    return nil, "option 'redirects' must be an integer in [0, 50]"
  end
  if req.stream ~= nil and type(req.stream) ~= "function" then
    return nil, "option 'stream' must be a function, got " .. type(req.stream)
  end
  r.stream = req.stream
  r.headers, r.header_names = check_headers(req.headers)
  if not r.headers then
    return nil, r.header_names
  end
  return r
end

-- Splits an http(s) URL; returns a table or nil and what is wrong (never
-- quoting the URL itself).
local function parse_url(url)
  local scheme, rest = url:match("^(%a[%w+.%-]*)://(.*)$")
  if not scheme then
    return nil, "unsupported URL (http:// or https:// expected)"
  end
  scheme = scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then
    return nil, "unsupported scheme '" .. scheme:sub(1, 16) .. "'"
  end
  local authority, target = rest:match("^([^/?#]*)(.*)$")
  target = target:match("^[^#]*")
  if target == "" or target:sub(1, 1) == "?" then
    target = "/" .. target
  end
  if target:find("[%c ]") then
    return nil, "malformed URL (spaces or control characters in the path)"
  end
  local userinfo, hostport = authority:match("^(.*)@(.*)$")
  hostport = hostport or authority
  local host, port
  if hostport:sub(1, 1) == "[" then
    host, port = hostport:match("^%[([%x:.]+)%](.*)$")
  else
    host, port = hostport:match("^([%w._%-]+)(.*)$")
  end
  if not host then
    return nil, "malformed URL (bad host)"
  end
  if port == "" then
    port = scheme == "https" and 443 or 80
  else
    port = tonumber(port:match("^:(%d%d?%d?%d?%d?)$"))
    if not port or port < 1 or port > 65535 then
      return nil, "malformed URL (bad port)"
    end
  end
  local ipv6 = hostport:sub(1, 1) == "["
  host = host:lower()
  return {
    scheme = scheme, tls = scheme == "https", host = host, port = port,
    connect_host = ipv6 and "[" .. host .. "]" or host,
    hostport = hostport, userinfo = userinfo, target = target,
    pool = "rag:" .. scheme .. ":" .. host .. ":" .. port,
  }
end

-- Where a Location header points, as an absolute URL relative to `base`.
local function resolve(base, location)
  if location:find("^%a[%w+.%-]*://") then
    return location
  end
  local origin = base.scheme .. "://" .. base.hostport
  if location:sub(1, 2) == "//" then
    return base.scheme .. ":" .. location
  elseif location:sub(1, 1) == "/" then
    return origin .. location
  end
  local dir = base.target:match("^([^?]*/)") or "/"
  return origin .. dir .. location
end

-- The request bytes, as a table for sock:send.
local function build_request(r, p, method, body)
  local out = { method, " ", p.target, " HTTP/1.1\r\n" }
  local names = r.header_names
  local function add(name, value)
    out[#out + 1] = name
    out[#out + 1] = value == "" and ":\r\n" or ": "
    if value ~= "" then
      out[#out + 1] = value
      out[#out + 1] = "\r\n"
    end
  end
  if not names.host then
    add("Host", p.hostport)
  end
  if not names["user-agent"] then
    add("User-Agent", USER_AGENT)
  end
  if p.userinfo and not names.authorization then
    local user, pass = p.userinfo:match("^([^:]*):?(.*)$")
    add("Authorization", "Basic " ..
      ngx.encode_base64(ngx.unescape_uri(user) .. ":" .. ngx.unescape_uri(pass)))
  end
  for _, h in ipairs(r.headers) do
    add(h[1], h[2])
  end
  if body ~= nil then
    add("Content-Length", tostring(#body))
  elseif method == "POST" or method == "PUT" or method == "PATCH" then
    add("Content-Length", "0")
  end
  out[#out + 1] = "\r\n"
  out[#out + 1] = body
  return out
end

-- {====== Deadlines and socket steps ======}

-- Sets every cosocket timeout to what is left before `deadline` (at least
-- 1 ms: 0 would mean nginx's lua_socket_*_timeout). False when none is left.
local function arm(sock, deadline)
  local left = deadline - now()
  if left <= 0 then
    return false
  end
  local ms = ceil(left * 1000)
  if ms > 2147483647 then
    ms = 2147483647
  end
  sock:settimeouts(ms, ms, ms)
  return true
end

-- A failure reason and code for a cosocket error while doing `what`.
local function io_fail(c, err, what)
  if err == "timeout" then
    return format("timed out after %d ms %s", floor((now() - c.start) * 1000 + 0.5), what),
      "timeout"
  elseif err == "closed" then
    return "connection closed by the server " .. what, "http"
  end
  return tostring(err) .. " " .. what, "http"
end

-- Reads up to the next `boundary` (consumed, not returned), at most `max`
-- bytes. Returns the data, or nil, err, got_any.
local function read_until(c, reader, max)
  local parts, n = {}, 0
  while true do
    if not arm(c.sock, c.deadline) then
      return nil, "timeout", n > 0
    end
    local data, err, partial = reader(READ_SIZE)
    if not data then
      if err then
        return nil, err, n > 0 or (partial ~= nil and partial ~= "")
      end
      return concat(parts)
    end
    n = n + #data
    if n > max then
      return nil, "too large", true
    end
    parts[#parts + 1] = data
  end
end

local function connect(c, p)
  local sock, err = ngx.socket.tcp()
  if not sock then
    return nil, "cannot create a cosocket: " .. tostring(err), "http"
  end
  c.sock = sock
  local cdeadline = now() + c.r.connect_timeout
  if cdeadline > c.deadline then
    cdeadline = c.deadline
  end
  if not arm(sock, cdeadline) then
    return nil, io_fail(c, "timeout", "while connecting")
  end
  local ok
  ok, err = sock:connect(p.connect_host, p.port, { pool = p.pool })
  if not ok then
    return nil, io_fail(c, err, "while connecting")
  end
  if p.tls and sock:getreusedtimes() == 0 then
    if not arm(sock, cdeadline) then
      sock:close()
      return nil, io_fail(c, "timeout", "during the TLS handshake")
    end
    ok, err = sock:sslhandshake(false, p.host, true)
    if not ok then
      sock:close()
      if err == "timeout" then
        return nil, io_fail(c, err, "during the TLS handshake")
      end
      local why = "TLS handshake failed"
      if err ~= "handshake failed" then
        why = why .. ": " .. tostring(err)
      end
      if tostring(err):find("unable to get local issuer", 1, true) or
          tostring(err):find("self.signed") or tostring(err):find("too long", 1, true) then
        why = why .. " (nginx trusts only lua_ssl_trusted_certificate, checking chains" ..
          " up to lua_ssl_verify_depth; set both in nginx.conf)"
      end
      return nil, why, "http"
    end
  end
  return sock
end

-- {====== Responses ======}

-- Parses a response head; returns status, version, headers or nil, reason.
local function parse_head(head)
  local pos, n = 1, 0
  local status, version, headers, last
  while pos <= #head + 1 do
    local eol = head:find("\r\n", pos, true) or #head + 1
    local line = head:sub(pos, eol - 1)
    pos = eol + 2
    n = n + 1
    if #line > MAX_HEAD_LINE then
      return nil, "response header line too long"
    end
    if n == 1 then
      local major, minor, code, reason = line:match("^HTTP/(%d)%.(%d) (%d%d%d)(.*)$")
      if not major or (reason ~= "" and reason:sub(1, 1) ~= " ") then
        return nil, "malformed status line"
      end
      status, version, headers = tonumber(code), major * 10 + minor, {}
    elseif line:find("^[ \t]") and last then -- obsolete line folding
      headers[last] = headers[last] .. " " .. line:match("^[ \t]*(.-)[ \t]*$")
    else
      local name, value = line:match("^([^:]+):[ \t]*(.-)[ \t]*$")
      if name then
        name = name:lower()
        local old = headers[name]
        headers[name] = old and old .. ", " .. value or value
        last = name
      end
    end
  end
  return status, version, headers
end

-- How the body is framed: "none", "chunked", "length" (with its size) or
-- "close" (until the server closes), or nil and a reason.
local function framing(method, status, headers)
  if method == "HEAD" or status < 200 or status == 204 or status == 304 then
    return "none"
  end
  local te = headers["transfer-encoding"]
  if te then
    return te:lower():match("([^,%s]+)%s*$") == "chunked" and "chunked" or "close"
  end
  local cl = headers["content-length"]
  if cl == nil then
    return "close"
  end
  local len
  for v in cl:gmatch("[^,]+") do -- repeated headers were joined with ", "
    local n = tonumber(v:match("^%s*(%d+)%s*$"))
    if not n or (len and n ~= len) then
      return nil, "malformed content-length"
    end
    len = n
  end
  return "length", len
end

-- Passes one piece of body to the stream or the buffer; false over max_body.
local function deliver(c, piece)
  c.seen = c.seen + #piece
  if c.seen > c.r.max_body then
    return false
  end
  if c.streaming then
    local ok, err = pcall(c.r.stream, piece)
    if not ok then
      c.sock:close()
      c.sock = nil
      error(err, 0)
    end
  else
    c.parts[#c.parts + 1] = piece
  end
  return true
end

local function too_big(c)
  return format("response body exceeds max_body (%.0f bytes; stopped after %.0f)",
    c.r.max_body, c.seen), "http"
end

-- Delivers the next n bytes (huge: until the server closes).
local function read_bytes(c, n)
  local sock = c.sock
  while n > 0 do
    if not arm(sock, c.deadline) then
      return nil, io_fail(c, "timeout", "while reading the response body")
    end
    local data, err = sock:receiveany(n < READ_SIZE and n or READ_SIZE)
    if not data then
      if err == "closed" and n == huge then
        return true
      end
      return nil, io_fail(c, err, "while reading the response body")
    end
    n = n - #data
    if not deliver(c, data) then
      return nil, too_big(c)
    end
  end
  return true
end

local function read_chunked(c)
  local sock = c.sock
  local line_reader = sock:receiveuntil("\r\n")
  while true do
    local line, err = read_until(c, line_reader, MAX_CHUNK_LINE)
    if not line then
      return nil, io_fail(c, err == "too large" and "chunk size line too long" or err,
        "while reading a chunk size")
    end
    local hex = line:match("^%s*(%x+)%s*[;]?")
    local size = hex and #hex <= 12 and tonumber(hex, 16)
    if not size then
      return nil, "malformed chunk size", "http"
    end
    if size == 0 then
      break
    end
    local ok, why, code = read_bytes(c, size)
    if not ok then
      return nil, why, code
    end
    if not arm(sock, c.deadline) then
      return nil, io_fail(c, "timeout", "while reading the response body")
    end
    local crlf
    crlf, err = sock:receive(2)
    if crlf ~= "\r\n" then
      return nil, io_fail(c, err or "malformed chunk end", "while reading the response body")
    end
  end
  local total = 0
  repeat -- trailers, up to the empty line
    local line, err = read_until(c, line_reader, MAX_TRAILERS)
    if not line then
      return nil, io_fail(c, err, "while reading the chunked trailer")
    end
    total = total + #line + 2
    if total > MAX_TRAILERS then
      return nil, "chunked trailer too large", "http"
    end
  until line == ""
  return true
end

local function has_token(value, token)
  return value ~= nil and (", " .. value:lower() .. ","):find("[, ]" .. token .. "%s*,") ~= nil
end

-- Reads the body framed as `how` (see framing) into the stream or c.parts.
-- Returns true or nil, reason, code.
local function read_body(c, how, len)
  c.parts, c.seen = {}, 0
  if how == "length" then
    if len > c.r.max_body then
      return nil, format("response body exceeds max_body (%.0f bytes; content-length %.0f)",
        c.r.max_body, len), "http"
    end
    return read_bytes(c, len)
  elseif how == "chunked" then
    return read_chunked(c)
  elseif how == "close" then
    return read_bytes(c, huge)
  end
  return true
end

-- Sends the request and reads one response on c.sock. Returns res, or nil,
-- reason, code, stale (stale: nothing came back on a pooled connection).
local function roundtrip(c, request, method)
  local sock = c.sock
  local reused = (sock:getreusedtimes() or 0) > 0 -- nil, "closed" once the socket is closed
  if not arm(sock, c.deadline) then
    return nil, io_fail(c, "timeout", "while sending the request")
  end
  local ok, err = sock:send(request)
  if not ok then
    local why, code = io_fail(c, err, "while sending the request")
    -- a pooled connection the server had closed may already read as closed
    -- here (getreusedtimes then gives nil): "closed" before any byte went
    -- out is stale too, and a fresh connection is tried
    return nil, why, code, (reused or err == "closed") and err ~= "timeout"
  end
  local head_reader = sock:receiveuntil("\r\n\r\n")
  local status, version, headers
  local first = true
  repeat -- 1xx interim responses are skipped
    local head, got
    head, err, got = read_until(c, head_reader, MAX_HEAD)
    if not head then
      if err == "too large" then
        return nil, "response headers too large", "http"
      end
      local why, code = io_fail(c, err, "while reading the response headers")
      return nil, why, code, reused and first and not got and err ~= "timeout"
    end
    first = false
    status, version, headers = parse_head(head)
    if not status then
      return nil, version, "http"
    end
  until status >= 200 or status == 101
  local how, len = framing(method, status, headers)
  if not how then
    return nil, len, "http"
  end
  c.streaming = c.r.stream ~= nil and status >= 200 and status < 300
  local why, code
  ok, why, code = read_body(c, how, len)
  if not ok then
    return nil, why, code
  end
  c.reusable = (how == "length" or how == "chunked") and version >= 11 and
    not has_token(headers.connection, "close") and
    not has_token(c.request_connection, "close")
  return { status = status, headers = headers, body = c.streaming and "" or concat(c.parts) }
end

-- One request to one URL, retrying when a pooled connection proves dead
-- before any byte of reply. Returns res or nil, reason, code.
local function exchange(c, p, method, body)
  local request = build_request(c.r, p, method, body)
  for _ = 0, MAX_STALE_RETRIES do
    c.reusable = false
    local sock, why, code = connect(c, p)
    if not sock then
      return nil, why, code
    end
    local res, stale
    res, why, code, stale = roundtrip(c, request, method)
    if c.sock then -- nil when a stream callback raised (already closed)
      if not (res and c.reusable and c.sock:setkeepalive(KEEPALIVE_MS)) then
        c.sock:close()
      end
      c.sock = nil
    end
    if res or not stale then
      return res, why, code
    end
  end
  return nil, "connection closed by the server before the response", "http"
end

-- {====== The transport ======}

local function check_phase()
  if type(ngx) ~= "table" or type(ngx.socket) ~= "table" then
    return "needs nginx with ngx_lua (ngx.socket.tcp); outside nginx use rag.http.request"
  end
  local phase = ngx.get_phase()
  if not COSOCKET_PHASES[phase] then
    return format("cosockets are not available in the '%s' phase of nginx; call from a " ..
      "content/access/rewrite/timer handler (e.g. ngx.timer.at(0, fn))", tostring(phase))
  end
end

local function same_origin(a, b)
  return a.scheme == b.scheme and a.host == b.host and a.port == b.port
end

--- One HTTP(S) request over a cosocket (see docs/api.md, rag.transport.ngx).
-- @tparam table req `url`, `method`, `headers`, `body`, `timeout`,
--   `connect_timeout`, `max_body`, `redirects`, `stream`, `ca_file` (ignored)
-- @treturn table `{ status =, headers =, body = }`, or nil, msg, code
--   ("timeout" or "http")
-- @raise on misuse, outside nginx, in a phase without cosockets, and with the
--   error of a `stream` callback
local function transport(req)
  if type(req) ~= "table" then
    error(FNAME .. ": the request must be a table, got " .. type(req), 2)
  end
  local r, bad = check_request(req)
  if not r then
    error(FNAME .. ": " .. bad, 2)
  end
  bad = check_phase()
  if bad then
    error(FNAME .. ": " .. bad, 2)
  end
  local start = now()
  local c = { r = r, start = start, deadline = start + r.timeout }
  for _, h in ipairs(r.headers) do
    if h[1]:lower() == "connection" then
      c.request_connection = h[2]
    end
  end
  local function fail(why, code)
    return nil, format("%s: %s %s: %s", FNAME, r.method, safe_url(r.url), why), code
  end
  local p, why = parse_url(r.url)
  if not p then
    return fail(why, "http")
  end
  local method, body = r.method, r.body
  for hops = 0, r.redirects do
    local res, code
    res, why, code = exchange(c, p, method, body)
    if not res then
      return fail(why, code)
    end
    local s = res.status
    local loc = res.headers.location
    if hops >= r.redirects or now() >= c.deadline or not loc or
        not (s == 301 or s == 302 or s == 303 or s == 307 or s == 308) then
      return res
    end
    local nextp = parse_url(resolve(p, loc))
    if not nextp or not same_origin(p, nextp) then
      return res
    end
    if (s == 303 and method ~= "HEAD") or ((s == 301 or s == 302) and method == "POST") then
      method, body = "GET", nil
    end
    p = nextp
  end
end

return transport
