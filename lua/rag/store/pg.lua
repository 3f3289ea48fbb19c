--- rag.store.pg: a PostgreSQL client in Lua (frontend/backend protocol 3.0)
-- over LuaSocket in plain Lua and over `ngx.socket.tcp` under OpenResty, by
-- one code path. SCRAM-SHA-256 (RFC 5802, 7677), md5 and (when asked)
-- cleartext passwords; TLS by SSLRequest; the simple and the extended query
-- protocol with text parameters and typed results; transactions; a pool.
-- Failures return `nil, msg, code, sqlstate`; misuse raises.
-- @module rag.store.pg
-- luacheck: globals ngx

local core = require("rag.core")
local opts_check = require("rag.opts").check

local type, tostring, tonumber, error, pcall, select = type, tostring, tonumber, error, pcall,
  select
local setmetatable, ipairs, pairs = setmetatable, ipairs, pairs
local byte, char, sub, format = string.byte, string.char, string.sub, string.format
local concat, remove = table.concat, table.remove
local floor, huge = math.floor, math.huge
local hmac, pbkdf2, md5 = core.text.hmac_sha256, core.text.pbkdf2_sha256, core.text.md5
local sha256hex, random = core.text.hash, core.text.random
local json = core.json

local M = {}

--- The value that stands for SQL NULL, in parameters and in rows.
M.null = setmetatable({}, {
  __tostring = function()
    return "rag.store.pg.null"
  end,
  __newindex = function()
    error("rag.store.pg.null is read-only", 2)
  end,
})
local null = M.null

local DEFAULT_PORT = 5432
local PROTOCOL = 196608           -- 3.0
local SSL_REQUEST = 80877103
local MAX_MESSAGE = 1024 * 1024 * 1024 -- the server's own limit on one message
local MAX_SCRAM_ITERATIONS = 10000000   -- refuse a server that would stall the client

-- ngx.get_phase() values in which cosockets work (as rag.transport.ngx).
local COSOCKET_PHASES = {
  rewrite = true, access = true, content = true, timer = true, ssl_cert = true,
  ssl_session_fetch = true, ssl_client_hello = true, preread = true,
}

local CONNECT_SCHEMA = {
  dsn = { "string" },
  host = { "string", default = "127.0.0.1" },
  port = { "number", default = DEFAULT_PORT, int = true, min = 1, max = 65535 },
  user = { "string" },
  password = { "string" },
  database = { "string" },
  connect_timeout = { "number", default = 10, above = 0 },
  timeout = { "number", default = 60, above = 0 },
  ssl = { "string", default = "prefer", enum = { "disable", "prefer", "require", "verify" } },
  cafile = { "string" },
  cleartext = { "boolean", default = false },
  application_name = { "string", default = "rag" },
  params = { "table" },
  keepalive = { "number", default = 60, min = 0 },
  pool_size = { "number", default = 8, int = true, min = 0, max = 10000 },
}

-- {====== Bytes ======}

local function u16(n)
  return char(floor(n / 256) % 256, n % 256)
end

local function u32(n)
  if n < 0 then
    n = n + 4294967296
  end
  return char(floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
end

local function get16(s, i)
  local a, b = byte(s, i, i + 1)
  return a * 256 + b
end

local function get32(s, i) -- signed, as the protocol's Int32
  local a, b, c, d = byte(s, i, i + 3)
  local n = ((a * 256 + b) * 256 + c) * 256 + d
  return n >= 2147483648 and n - 4294967296 or n
end

-- The NUL-terminated string at i and the index after its NUL.
local function cstring(s, i)
  local z = s:find("\0", i, true)
  if not z then
    return nil
  end
  return sub(s, i, z - 1), z + 1
end

local function xor(a, b)
  local out = {}
  for i = 1, #a do
    local x, y, r, bit = byte(a, i), byte(b, i), 0, 1
    while x > 0 or y > 0 do
      if x % 2 ~= y % 2 then
        r = r + bit
      end
      x, y, bit = floor(x / 2), floor(y / 2), bit * 2
    end
    out[i] = char(r)
  end
  return concat(out)
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64_INDEX = {}
for i = 1, 64 do
  B64_INDEX[byte(B64, i)] = i - 1
end

local function b64encode(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = { floor(n / 262144) % 64, floor(n / 4096) % 64, floor(n / 64) % 64, n % 64 }
    out[#out + 1] = sub(B64, q[1] + 1, q[1] + 1) .. sub(B64, q[2] + 1, q[2] + 1)
      .. (b and sub(B64, q[3] + 1, q[3] + 1) or "=") .. (c and sub(B64, q[4] + 1, q[4] + 1) or "=")
  end
  return concat(out)
end

-- Standard base64 with padding, or nil when `s` is not that.
local function b64decode(s)
  if #s % 4 ~= 0 or s:find("[^%w+/=]") or s:find("=[^=]") then
    return nil
  end
  local out = {}
  for i = 1, #s, 4 do
    local n, pad = 0, 0
    for j = i, i + 3 do
      local c = byte(s, j)
      local v = B64_INDEX[c]
      if c == 61 then
        pad, v = pad + 1, 0
      end
      n = n * 64 + v
    end
    local bytes = char(floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
    out[#out + 1] = sub(bytes, 1, 3 - pad)
  end
  return concat(out)
end

local function unhex(h)
  return (h:gsub("..", function(x)
    return char(tonumber(x, 16))
  end))
end

M._b64encode, M._b64decode, M._xor = b64encode, b64decode, xor

-- {====== Errors ======}

-- SQLSTATEs and classes with a code of their own; any other server error
-- is "provider" (the server refused the request).
local SQLSTATE_CODES = {
  ["28P01"] = "auth", ["28000"] = "auth", ["57014"] = "timeout", ["55P03"] = "timeout",
  ["25P03"] = "timeout", ["57P01"] = "io", ["57P02"] = "io", ["57P03"] = "io",
  ["53300"] = "ratelimit", ["22021"] = "encoding", ["08P01"] = "decode",
}
local SQLSTATE_CLASSES = { ["08"] = "io", ["28"] = "auth", ["53"] = "io", ["58"] = "io" }

local function fail(code, fname, fmt, ...)
  if select("#", ...) > 0 then
    fmt = format(fmt, ...)
  end
  return nil, fname .. ": " .. fmt, code
end

-- ErrorResponse / NoticeResponse fields: { S=, V=, C=, M=, D=, H=, P=, ... }
local function parse_fields(body)
  local f, i = {}, 1
  while i <= #body do
    local t = sub(body, i, i)
    if t == "\0" then
      break
    end
    local v, nxt = cstring(body, i + 1)
    if not v then
      break
    end
    f[t] = v
    i = nxt
  end
  return f
end

-- nil, "fname: ERROR 42601: message (detail; hint)", code, sqlstate
local function server_error(fname, f)
  local state = f.C or "XX000"
  local code = SQLSTATE_CODES[state] or SQLSTATE_CLASSES[sub(state, 1, 2)] or "provider"
  local msg = format("%s: %s %s: %s", fname, f.V or f.S or "ERROR", state, f.M or "")
  local extra = {}
  if f.D then extra[#extra + 1] = f.D end
  if f.H then extra[#extra + 1] = "hint: " .. f.H end
  if f.P then extra[#extra + 1] = "at character " .. f.P end
  if #extra > 0 then
    msg = msg .. " (" .. concat(extra, "; ") .. ")"
  end
  return nil, msg, code, state
end

-- {====== Sockets: LuaSocket or an nginx cosocket ======}

local function use_cosocket()
  return type(ngx) == "table" and type(ngx.socket) == "table" and type(ngx.get_phase) ==
    "function" and COSOCKET_PHASES[ngx.get_phase()] == true
end

local Sock = {}
Sock.__index = Sock

local function set_timeout(s, seconds)
  if s.ngx then
    s.raw:settimeout(floor(seconds * 1000 + 0.5))
  else
    s.raw:settimeout(seconds)
  end
end

-- opts: host, port, connect_timeout, timeout, pool_name, pool_size.
local function sock_connect(o)
  local s = setmetatable({ ngx = use_cosocket() }, Sock)
  local raw, err, ok
  if s.ngx then
    raw = ngx.socket.tcp()
  else
    local found, socket = pcall(require, "socket")
    if not found then
      error("rag.store.pg: LuaSocket is missing (Debian package lua-socket, luarocks "
        .. "luasocket); under nginx, call from a phase with cosockets", 3)
    end
    raw, err = socket.tcp()
    if not raw then
      return nil, err
    end
  end
  s.raw = raw
  set_timeout(s, o.connect_timeout)
  if s.ngx then
    -- Our own pool name (never nginx's default "host:port"), so that a
    -- reused connection is one this library logged in with these credentials.
    ok, err = raw:connect(o.host, o.port, { pool = o.pool_name, pool_size = o.pool_size })
  else
    ok, err = raw:connect(o.host, o.port)
  end
  if not ok then
    raw:close()
    return nil, err
  end
  if s.ngx then
    s.reused = (raw:getreusedtimes() or 0) > 0
  else
    raw:setoption("tcp-nodelay", true)
  end
  set_timeout(s, o.timeout)
  return s
end

-- LuaSec reports a timeout as the TLS layer's wish to read or write more.
local TIMEOUTS = { timeout = true, wantread = true, wantwrite = true }

function Sock:send(data)
  local n, err = self.raw:send(data)
  if not n then
    return nil, TIMEOUTS[err] and "timeout" or err
  end
  return true
end

function Sock:receive(n)
  local data, err = self.raw:receive(n)
  if not data then
    return nil, TIMEOUTS[err] and "timeout" or err
  end
  return data
end

function Sock:close()
  if self.raw then
    self.raw:close()
    self.raw = nil
  end
end

-- Whether an idle connection has something to read (a FATAL message, EOF):
-- then the server has dropped it and it must not be reused.
-- (Under nginx, idle connections wait in nginx's pool, which closes them itself.)
function Sock:stale()
  if self.ngx then
    return false
  end
  local socket = require("socket")
  local readable = socket.select({ self.raw }, nil, 0)
  return readable ~= nil and #readable > 0
end

-- Whether the certificate (LuaSec's x509 object) names `host`: its
-- subjectAltName IP addresses and DNS names (one leftmost "*" label), or
-- its subject's CN when it has no subjectAltName (RFC 6125).
local function cert_names_host(cert, host)
  local lhost = host:lower()
  local ext = cert:extensions() or {}
  local san = ext["2.5.29.17"]
  if san then
    for _, ip in ipairs(san.iPAddress or {}) do
      if ip == host then
        return true
      end
    end
    for _, name in ipairs(san.dNSName or {}) do
      name = name:lower()
      local suffix = name:match("^%*(%.[^*]+%.[^*]+)$")
      if name == lhost or (suffix and #lhost > #suffix and sub(lhost, -#suffix) == suffix
        and not sub(lhost, 1, #lhost - #suffix):find(".", 1, true)) then
        return true
      end
    end
    return false
  end
  for _, e in ipairs(cert:subject() or {}) do
    if e.name == "CN" and e.value:lower() == lhost then
      return true
    end
  end
  return false
end

-- TLS on the connected socket: LuaSec for LuaSocket, sslhandshake under nginx.
function Sock:tls(o)
  local verify = o.ssl == "verify"
  if self.ngx then
    local ok, err = self.raw:sslhandshake(nil, o.host, verify)
    if not ok then
      return nil, err
    end
    return true
  end
  local found, ssl = pcall(require, "ssl")
  if not found then
    return nil, "TLS needs LuaSec (Debian package lua-sec)"
  end
  local conn, err = ssl.wrap(self.raw, {
    mode = "client", protocol = "any", options = { "all", "no_sslv3" },
    verify = verify and "peer" or "none", cafile = o.cafile,
  })
  if not conn then
    return nil, err
  end
  if conn.sni then
    conn:sni(o.host)
  end
  conn:settimeout(o.timeout)
  local ok, herr = conn:dohandshake()
  if not ok then
    conn:close()
    self.raw = nil
    return nil, herr
  end
  self.raw = conn
  if verify then
    local cert = conn:getpeercertificate()
    if not cert or not cert_names_host(cert, o.host) then
      return nil, "the server's certificate is not for " .. o.host
    end
  end
  return true
end

-- {====== Connection: messages ======}

local Conn = {}
Conn.__index = Conn

-- Marks the connection unusable and closes its socket.
function Conn:_break()
  self.broken = true
  if self.sock then
    self.sock:close()
  end
end

-- The I/O failure's code: "timeout" for a timeout, else "io".
function Conn:_io(fname, what, err)
  self:_break()
  local code = err == "timeout" and "timeout" or "io"
  return fail(code, fname, "%s %s:%d: %s", what, self.host, self.port, tostring(err))
end

function Conn:_send(fname, data)
  local ok, err = self.sock:send(data)
  if not ok then
    return self:_io(fname, "sending to", err)
  end
  return true
end

-- The next message: type (one character), body | nil, msg, code.
function Conn:_read(fname)
  local head, err = self.sock:receive(5)
  if not head then
    return self:_io(fname, "reading from", err == "closed" and "connection closed" or err)
  end
  local len = get32(head, 2)
  if len < 4 or len > MAX_MESSAGE then
    self:_break()
    return fail("decode", fname, "bad message length %d from the server", len)
  end
  local body = ""
  if len > 4 then
    body, err = self.sock:receive(len - 4)
    if not body then
      return self:_io(fname, "reading from", err == "closed" and "connection closed" or err)
    end
  end
  return sub(head, 1, 1), body
end

local function message(t, body)
  return t .. u32(#body + 4) .. body
end

-- {====== Connection: startup and authentication ======}

-- SCRAM-SHA-256's arithmetic (RFC 5802, section 3): from the password, the
-- user name and nonce of the client-first-message, and the
-- server-first-message: the client-final-message and the server signature
-- to expect | nil, why. PostgreSQL takes the user from the startup message
-- and the client sends an empty one.
local function scram_final(user, password, nonce, server_first)
  local r = server_first:match("^r=([^,]+)")
  local s, i = server_first:match(",s=([^,]+),i=(%d+)")
  local salt = s and b64decode(s)
  i = tonumber(i)
  if not r or not salt or not i or sub(r, 1, #nonce) ~= nonce or #r == #nonce then
    return nil, "bad SCRAM server-first-message"
  end
  if i < 1 or i > MAX_SCRAM_ITERATIONS then
    return nil, format("SCRAM iteration count %d out of range", i)
  end
  local salted = pbkdf2(password, salt, i)
  local client_key = hmac(salted, "Client Key")
  local stored_key = unhex(sha256hex(client_key))
  local final_bare = "c=biws,r=" .. r
  local auth_message = "n=" .. user .. ",r=" .. nonce .. "," .. server_first .. "," .. final_bare
  local proof = xor(client_key, hmac(stored_key, auth_message))
  return final_bare .. ",p=" .. b64encode(proof), hmac(hmac(salted, "Server Key"), auth_message)
end
M._scram_final = scram_final

-- The next authentication message: its body after the Int32 kind | nil, msg, code.
function Conn:_auth_step(fname, want)
  local t, body, code = self:_read(fname)
  if not t then
    return nil, body, code
  end
  if t == "E" then
    self:_break()
    return server_error(fname, parse_fields(body))
  end
  if t ~= "R" or get32(body, 1) ~= want then
    self:_break()
    return fail("decode", fname, "unexpected message '%s' in SCRAM", t)
  end
  return sub(body, 5)
end

-- SCRAM-SHA-256 (RFC 7677) with a nonce of 18 random bytes; true once the
-- server's signature checks out (it proves the server holds the password).
function Conn:_scram(fname, mechanisms, password)
  if not mechanisms:find("SCRAM-SHA-256\0", 1, true) then
    self:_break()
    return fail("auth", fname, "the server offers no supported SASL mechanism (%s)",
      (mechanisms:gsub("%z", " ")))
  end
  local nonce = b64encode(random(18))
  local first = "n,,n=,r=" .. nonce
  local ok, err, code = self:_send(fname, message("p", "SCRAM-SHA-256\0" .. u32(#first) .. first))
  if not ok then
    return nil, err, code
  end
  local server_first, c2, state
  server_first, err, c2, state = self:_auth_step(fname, 11)
  if not server_first then
    return nil, err, c2, state
  end
  local final, server_sig = scram_final("", password, nonce, server_first)
  if not final then
    self:_break()
    return fail("auth", fname, server_sig)
  end
  ok, err, code = self:_send(fname, message("p", final))
  if not ok then
    return nil, err, code
  end
  local server_final
  server_final, err, code, state = self:_auth_step(fname, 12)
  if not server_final then
    return nil, err, code, state
  end
  local v = server_final:match("v=([^,]+)")
  if not v or b64decode(v) ~= server_sig then
    self:_break()
    return fail("auth", fname, "the server's SCRAM signature does not match: not the server "
      .. "that holds this password")
  end
  return true
end

-- AuthenticationXXX requests until AuthenticationOk; true | nil, msg, code.
function Conn:_authenticate(fname, o)
  while true do
    local t, body, code = self:_read(fname)
    if not t then
      return nil, body, code
    end
    if t == "E" then
      self:_break()
      return server_error(fname, parse_fields(body))
    end
    if t ~= "R" then
      self:_break()
      return fail("decode", fname, "unexpected message '%s' during authentication", t)
    end
    local kind = get32(body, 1)
    if kind == 0 then
      return true
    end
    local password = o.password
    if password == nil then
      self:_break()
      return fail("auth", fname, "the server asks for a password and none was given")
    end
    local ok, err, state
    if kind == 3 then
      if not o.cleartext then
        self:_break()
        return fail("auth", fname, "the server asks for the password in clear text; "
          .. "pass cleartext = true to allow it")
      end
      ok, err, code = self:_send(fname, message("p", password .. "\0"))
    elseif kind == 5 then
      local inner = md5(password .. o.user)
      ok, err, code = self:_send(fname, message("p", "md5" .. md5(inner .. sub(body, 5, 8))
        .. "\0"))
    elseif kind == 10 then
      ok, err, code, state = self:_scram(fname, sub(body, 5), password)
    else
      self:_break()
      return fail("auth", fname, "unsupported authentication request %d", kind)
    end
    if not ok then
      return nil, err, code, state
    end
  end
end

-- ParameterStatus, BackendKeyData, notices until ReadyForQuery.
function Conn:_until_ready(fname)
  while true do
    local t, body, code = self:_read(fname)
    if not t then
      return nil, body, code
    end
    if t == "Z" then
      self.status = body
      return true
    elseif t == "S" then
      local k, nxt = cstring(body, 1)
      self.parameters[k] = cstring(body, nxt)
    elseif t == "K" then
      self.pid, self.secret = get32(body, 1), sub(body, 5, 8)
    elseif t == "E" then
      self:_break()
      return server_error(fname, parse_fields(body))
    elseif t ~= "N" then
      self:_break()
      return fail("decode", fname, "unexpected message '%s' at startup", t)
    end
  end
end

function Conn:_ssl(fname, o)
  local ok, err, code = self:_send(fname, u32(8) .. u32(SSL_REQUEST))
  if not ok then
    return nil, err, code
  end
  local answer, rerr = self.sock:receive(1)
  if not answer then
    return self:_io(fname, "reading from", rerr)
  end
  if answer == "S" then
    local tok, terr = self.sock:tls(o)
    if not tok then
      self:_break()
      return fail("io", fname, "tls with %s:%d: %s", o.host, o.port, tostring(terr))
    end
    self.tls = true
  elseif answer ~= "N" then
    self:_break()
    return fail("decode", fname, "bad answer to SSLRequest")
  elseif o.ssl ~= "prefer" then
    self:_break()
    return fail("io", fname, "%s:%d does not accept TLS (ssl = \"%s\")", o.host, o.port, o.ssl)
  end
  return true
end

-- {====== Connecting ======}

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h)
    return char(tonumber(h, 16))
  end))
end

local DSN_KEYS = {
  sslmode = "ssl", connect_timeout = "connect_timeout", application_name = "application_name",
}
local SSLMODES = { disable = "disable", allow = "prefer", prefer = "prefer",
  require = "require", ["verify-ca"] = "verify", ["verify-full"] = "verify" }

--- Splits a connection URL into options.
-- `postgres[ql]://user:password@host:port/database?sslmode=&connect_timeout=&application_name=`;
-- user, password and database are percent-decoded.
-- @tparam string dsn the URL
-- @treturn table `{ host=, port=, user=, password=, database=, ssl=, ... }`
-- @raise when `dsn` is not such a URL
function M.parse_dsn(dsn)
  if type(dsn) ~= "string" then
    error("rag.store.pg.parse_dsn: dsn must be a string, got " .. type(dsn), 2)
  end
  local rest = dsn:match("^postgres://(.*)$") or dsn:match("^postgresql://(.*)$")
  if not rest then
    error("rag.store.pg.parse_dsn: not a postgres:// URL", 2)
  end
  local o = {}
  local query
  rest, query = rest:match("^([^?]*)%??(.*)$")
  local auth, hostpart = rest:match("^(.*)@([^@]*)$")
  hostpart = hostpart or rest
  if auth then
    local u, p = auth:match("^([^:]*):(.*)$")
    o.user = unescape(u or auth)
    o.password = p and unescape(p) or nil
  end
  local hostport, db = hostpart:match("^([^/]*)/?(.*)$")
  local host, port = hostport:match("^%[(.-)%]:?(%d*)$")
  if not host then
    host, port = hostport:match("^([^:]*):?(%d*)$")
  end
  if not host then
    error("rag.store.pg.parse_dsn: bad host and port in the URL", 2)
  end
  if host ~= "" then o.host = unescape(host) end
  if port ~= "" then o.port = tonumber(port) end
  if db ~= "" then o.database = unescape(db) end
  for k, v in query:gmatch("([^&=]+)=([^&]*)") do
    local key = DSN_KEYS[k]
    v = unescape(v)
    if key == "ssl" then
      v = SSLMODES[v] or error("rag.store.pg.parse_dsn: unknown sslmode '" .. v .. "'", 2)
    elseif key == "connect_timeout" then
      v = tonumber(v)
    elseif not key then
      o.params = o.params or {}
      o.params[k] = v -- any other key: a run-time parameter (statement_timeout=...)
      key = nil
    end
    if key then
      o[key] = v
    end
  end
  return o
end

-- The checked options: dsn fields first, then explicit options over them.
local function connect_options(fname, opts, level)
  local o = opts_check(fname, opts, CONNECT_SCHEMA, level + 1)
  if o.dsn then
    local d = M.parse_dsn(o.dsn)
    for k, v in pairs(d) do
      if opts[k] == nil or (k == "host" and opts.host == nil) then
        o[k] = v
      end
    end
  end
  o.user = o.user or "postgres"
  o.database = o.database or o.user
  local params = {}
  if o.params then
    for k, v in pairs(o.params) do
      if type(k) ~= "string" or (type(v) ~= "string" and type(v) ~= "number") then
        error(fname .. ": params must map names to strings", level + 1)
      end
      params[#params + 1] = k .. "=" .. v
    end
  end
  table.sort(params)
  -- Connections in nginx's pool are shared by everything that opens them
  -- with the same server, credentials and session parameters.
  o.pool_name = format("rag.pg:%s:%d:%s:%s:%s:%s", o.host, o.port, o.user, o.database,
    sha256hex(o.password or ""):sub(1, 16), sha256hex(concat(params, "\0")):sub(1, 16))
  return o
end

local function startup_message(o)
  local parts = { u32(PROTOCOL), "user\0", o.user, "\0", "database\0", o.database, "\0",
    "application_name\0", o.application_name, "\0", "client_encoding\0UTF8\0" }
  if o.params then
    local keys = {}
    for k in pairs(o.params) do
      keys[#keys + 1] = k
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
      parts[#parts + 1] = k .. "\0" .. tostring(o.params[k]) .. "\0"
    end
  end
  parts[#parts + 1] = "\0"
  local body = concat(parts)
  return u32(#body + 4) .. body
end

-- A connected, authenticated connection on options already checked.
local function open(fname, o)
  local sock, err = sock_connect(o)
  if not sock then
    local code = err == "timeout" and "timeout" or "io"
    return fail(code, fname, "connecting to %s:%d: %s", o.host, o.port, tostring(err))
  end
  local c = setmetatable({ sock = sock, host = o.host, port = o.port, opts = o,
    parameters = {}, status = "I", broken = false }, Conn)
  if sock.reused then -- a cosocket from nginx's pool: already past startup
    return c
  end
  local ok, msg, code, state
  if o.ssl ~= "disable" then
    ok, msg, code = c:_ssl(fname, o)
    if not ok then
      return nil, msg, code
    end
  end
  ok, msg, code = c:_send(fname, startup_message(o))
  if ok then
    ok, msg, code, state = c:_authenticate(fname, o)
  end
  if ok then
    ok, msg, code, state = c:_until_ready(fname)
  end
  if not ok then
    c:_break()
    return nil, msg, code, state
  end
  return c
end

--- Opens a connection.
-- @tparam table opts `dsn` (a postgres:// URL) or `host` ("127.0.0.1"),
--   `port` (5432), `user` ("postgres"), `password`, `database` (the user);
--   `connect_timeout` (10 s), `timeout` (60 s, each read or write),
--   `ssl` = "prefer" (default: TLS when the server offers it) | "disable" |
--   "require" | "verify" (certificate and name checked; `cafile`),
--   `cleartext` (false: refuse to send the password unencrypted),
--   `application_name` ("rag"), `params` (run-time parameters sent at
--   startup, e.g. `{ statement_timeout = "5s" }`)
-- @return conn | nil, msg, code ("io", "timeout", "auth", "decode"), sqlstate
-- @raise on a bad option
function M.connect(opts)
  local o = connect_options("rag.store.pg.connect", opts, 2)
  -- Under nginx: a pool name that nothing keeps connections under, so the
  -- connection is new and the pools' idle ones stay theirs.
  o.pool_name = o.pool_name .. ":direct"
  return open("rag.store.pg.connect", o)
end

-- {====== Values ======}

local mtype = math.type

local function is_integer(v)
  if mtype then
    return mtype(v) == "integer"
  end
  return v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53
end

-- The text form of a Lua value as a parameter; nil for SQL NULL.
local function encode_param(fname, v, i)
  local t = type(v)
  if v == nil or v == null then
    return nil
  elseif t == "string" then
    return v
  elseif t == "boolean" then
    return v and "true" or "false"
  elseif t == "number" then
    if v ~= v then
      return "NaN"
    elseif v == huge then
      return "Infinity"
    elseif v == -huge then
      return "-Infinity"
    elseif is_integer(v) then
      return format("%d", v)
    end
    for _, p in ipairs({ "%.15g", "%.16g" }) do
      local s = format(p, v)
      if tonumber(s) == v then
        return s
      end
    end
    return format("%.17g", v)
  elseif t == "table" then
    local s, err = json.encode(v)
    if not s then
      error(format("%s: parameter %d: %s", fname, i, err), 4)
    end
    return s
  end
  error(format("%s: parameter %d: cannot send a %s", fname, i, t), 4)
end

local function parse_float(s)
  if s == "NaN" then
    return 0 / 0
  elseif s == "Infinity" then
    return huge
  elseif s == "-Infinity" then
    return -huge
  end
  return tonumber(s)
end

local function parse_json(s)
  local v = json.decode(s)
  if v == nil then
    return s
  end
  return v
end

-- Type OID -> parser of the text form (any other type stays a string).
local DECODERS = {
  [16] = function(s) return s == "t" end,
  [20] = tonumber, [21] = tonumber, [23] = tonumber, [26] = tonumber,
  [700] = parse_float, [701] = parse_float,
  [114] = parse_json, [3802] = parse_json,
}

-- {====== Queries ======}

-- RowDescription -> columns { { name=, type=, decode= }, ... }
local function parse_columns(body)
  local n, i, cols = get16(body, 1), 3, {}
  for k = 1, n do
    local name, nxt = cstring(body, i)
    local oid = get32(body, nxt + 6)
    cols[k] = { name = name, type = oid, decode = DECODERS[oid] }
    i = nxt + 18
  end
  return cols
end

local function parse_row(body, cols)
  local row, i = {}, 3
  for k = 1, #cols do
    local len = get32(body, i)
    i = i + 4
    local col = cols[k]
    if len < 0 then
      row[col.name] = null
    else
      local s = sub(body, i, i + len - 1)
      i = i + len
      if col.decode then
        row[col.name] = col.decode(s)
      else
        row[col.name] = s
      end
    end
  end
  return row
end

local function new_result(cols)
  local names = {}
  for k, c in ipairs(cols or {}) do
    names[k] = c.name
  end
  return { columns = names }
end

-- Reads one request's replies until ReadyForQuery: the last statement's
-- result | nil, msg, code, sqlstate (the first error).
function Conn:_results(fname)
  local res, cols = new_result(), nil
  local err_fields
  while true do
    local t, body, code = self:_read(fname)
    if not t then
      return nil, body, code
    end
    if t == "D" then
      if not err_fields then
        res[#res + 1] = parse_row(body, cols)
      end
    elseif t == "T" then
      cols = parse_columns(body)
      res = new_result(cols)
    elseif t == "C" then
      local tag = cstring(body, 1)
      res.command = tag
      res.affected = tonumber(tag:match("(%d+)$"))
    elseif t == "Z" then
      self.status = body
      if err_fields then
        return server_error(fname, err_fields)
      end
      return res
    elseif t == "E" then
      err_fields = err_fields or parse_fields(body)
      local sev = err_fields.V or err_fields.S
      if sev == "FATAL" or sev == "PANIC" then
        self:_break()
        local _, msg, code2, state = server_error(fname, err_fields)
        if code2 ~= "auth" then
          code2 = "io"
        end
        return nil, msg, code2, state
      end
    elseif t == "I" then
      res = new_result()
    elseif t == "n" then
      cols = nil
      res = new_result()
    elseif t == "S" then
      local k, nxt = cstring(body, 1)
      self.parameters[k] = cstring(body, nxt)
    elseif t == "G" then -- COPY FROM STDIN: refused, the server then errors
      local ok, msg, c2 = self:_send(fname, message("f", "rag.store.pg does not support COPY\0"))
      if not ok then
        return nil, msg, c2
      end
    elseif t ~= "1" and t ~= "2" and t ~= "3" and t ~= "N" and t ~= "A" and t ~= "s"
      and t ~= "H" and t ~= "d" and t ~= "c" then
      self:_break()
      return fail("decode", fname, "unexpected message '%s'", t)
    end
  end
end

function Conn:_check_open(fname, level)
  if self.closed then
    error(fname .. ": connection is closed", level + 1)
  end
  if self.broken then
    return fail("io", fname, "the connection to %s:%d is broken", self.host, self.port)
  end
  return true
end

--- Runs SQL by the simple query protocol: one or more statements, no
-- parameters. @return the last statement's result (see `conn:query`) |
-- nil, msg, code, sqlstate
function Conn:exec(sql)
  local fname = "rag.store.pg.exec"
  if type(sql) ~= "string" then
    error(fname .. ": sql must be a string, got " .. type(sql), 2)
  end
  local ok, msg, code = self:_check_open(fname, 2)
  if not ok then
    return nil, msg, code
  end
  ok, msg, code = self:_send(fname, message("Q", sql .. "\0"))
  if not ok then
    return nil, msg, code
  end
  return self:_results(fname)
end

--- Runs one statement by the extended protocol (Parse, Bind, Describe,
-- Execute, Sync in one round trip) with `$1, $2, ...` bound to `params`.
-- @tparam string sql one statement
-- @tparam[opt] table params values: strings, numbers, booleans, tables
--   (sent as JSON), `rag.store.pg.null` or nil up to `params.n`
-- @return rows `{ { col = value, ... }, ..., columns = { names },
--   command = "SELECT 2", affected = 2 }` | nil, msg, code, sqlstate
function Conn:query(sql, params)
  local fname = "rag.store.pg.query"
  if type(sql) ~= "string" then
    error(fname .. ": sql must be a string, got " .. type(sql), 2)
  end
  if params ~= nil and type(params) ~= "table" then
    error(fname .. ": params must be a table, got " .. type(params), 2)
  end
  local ok, msg, code = self:_check_open(fname, 2)
  if not ok then
    return nil, msg, code
  end
  params = params or {}
  local n = params.n or #params
  if n > 65535 then
    error(fname .. ": at most 65535 parameters", 2)
  end
  local bind = { "\0\0", u16(0), u16(n) }
  for i = 1, n do
    local s = encode_param(fname, params[i], i)
    bind[#bind + 1] = s and (u32(#s) .. s) or u32(-1)
  end
  bind[#bind + 1] = u16(0)
  local out = concat({
    message("P", "\0" .. sql .. "\0" .. u16(0)), message("B", concat(bind)),
    message("D", "P\0"), message("E", "\0" .. u32(0)), message("S", ""),
  })
  ok, msg, code = self:_send(fname, out)
  if not ok then
    return nil, msg, code
  end
  return self:_results(fname)
end

local unpack = table.unpack or unpack

local function pack(...)
  return { n = select("#", ...), ... }
end

--- Runs `fn(conn)` in a transaction: COMMIT when it returns a true first
-- value, ROLLBACK when it returns nil or false (its `nil, msg, code` are
-- returned), when a statement in it failed, or when it raises (the error is
-- raised again after the rollback).
-- @return fn's values | nil, msg, code, sqlstate
function Conn:transaction(fn)
  local fname = "rag.store.pg.transaction"
  if type(fn) ~= "function" then
    error(fname .. ": fn must be a function, got " .. type(fn), 2)
  end
  if self.status ~= "I" and not self.broken then
    error(fname .. ": already in a transaction", 2)
  end
  local ok, msg, code, state = self:exec("BEGIN")
  if not ok then
    return nil, msg, code, state
  end
  local res = pack(pcall(fn, self))
  local status = self.status
  if res[1] and res[2] and status == "T" and not self.broken then
    ok, msg, code, state = self:exec("COMMIT")
    if not ok then
      return nil, msg, code, state
    end
    return unpack(res, 2, res.n)
  end
  if not self.broken and status ~= "I" then
    self:exec("ROLLBACK")
  end
  if not res[1] then
    error(res[2], 0)
  end
  if self.broken then
    return fail("io", fname, "the connection to %s:%d broke; nothing was committed",
      self.host, self.port)
  end
  if res[2] then
    return fail("provider", fname, status == "E" and "a statement failed; rolled back"
      or "fn ended the transaction itself")
  end
  return unpack(res, 2, res.n)
end

--- Closes the connection (Terminate); idempotent.
function Conn:close()
  if self.closed then
    return
  end
  self.closed = true
  if self.sock and not self.broken then
    self.sock:send(message("X", ""))
  end
  if self.sock then
    self.sock:close()
  end
end

--- `{ pid=, status=, tls=, parameters= }`: the backend's process id (for
-- pg_terminate_backend), "I" idle | "T" in a transaction | "E" in a failed
-- one, whether TLS is on, and the server's ParameterStatus values.
function Conn:info()
  return { pid = self.pid, status = self.status, tls = self.tls == true,
    parameters = self.parameters, broken = self.broken }
end

-- {====== Pool ======}

local Pool = {}
Pool.__index = Pool

--- A pool of connections with the options of `connect` plus `pool_size`
-- (8 idle connections kept) and `keepalive` (60 s: idle time before one is
-- closed). Under nginx the idle connections live in the cosocket pool
-- (setkeepalive), elsewhere in the pool object.
-- @return pool
-- @raise on a bad option
function M.pool(opts)
  local o = connect_options("rag.store.pg.pool", opts, 2)
  return setmetatable({ opts = o, idle = {} }, Pool)
end

local function now()
  if use_cosocket() then
    return ngx.now()
  end
  local ok, socket = pcall(require, "socket")
  return ok and socket.gettime() or os.time()
end

--- A connection from the pool: an idle one that the server has not
-- dropped, or a new one. @return conn | nil, msg, code, sqlstate
function Pool:acquire()
  if self.closed then
    error("rag.store.pg.pool: pool is closed", 2)
  end
  local t = now()
  while #self.idle > 0 do
    local c = remove(self.idle)
    if c.idle_since + self.opts.keepalive >= t and not c.sock:stale() then
      set_timeout(c.sock, self.opts.timeout)
      return c
    end
    c:_break()
  end
  return open("rag.store.pg.acquire", self.opts)
end

--- Gives a connection back: kept when it is healthy and idle, closed otherwise.
function Pool:release(c)
  if c.broken or c.closed or c.status ~= "I" then
    c:close()
    return
  end
  if c.sock.ngx then
    local ok = c.sock.raw:setkeepalive(floor(self.opts.keepalive * 1000), self.opts.pool_size)
    if not ok then
      c:_break()
    end
    c.closed = true
    return
  end
  if #self.idle >= self.opts.pool_size or self.closed then
    c:close()
    return
  end
  c.idle_since = now()
  self.idle[#self.idle + 1] = c
end

local function pooled(pool, method, ...)
  local c, msg, code, state = pool:acquire()
  if not c then
    return nil, msg, code, state
  end
  local res = pack(pcall(c[method], c, ...))
  pool:release(c)
  if not res[1] then
    error(res[2], 0)
  end
  return unpack(res, 2, res.n)
end

--- `conn:query(sql, params)` on a pooled connection.
function Pool:query(sql, params)
  return pooled(self, "query", sql, params)
end

--- `conn:exec(sql)` on a pooled connection.
function Pool:exec(sql)
  return pooled(self, "exec", sql)
end

--- `conn:transaction(fn)` on a pooled connection.
function Pool:transaction(fn)
  return pooled(self, "transaction", fn)
end

--- Closes the idle connections; the pool can no longer be used.
function Pool:close()
  self.closed = true
  for _, c in ipairs(self.idle) do
    c:close()
  end
  self.idle = {}
end

return M
