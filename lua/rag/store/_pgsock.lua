--- rag.store._pgsock: the socket under rag.store.pg: an nginx cosocket in
-- a phase that has them, LuaSocket elsewhere, both behind one object
-- (connect, send, receive, settimeout, close, keepalive) with TLS by LuaSec
-- or sslhandshake. Errors are LuaSocket's words; timeouts are "timeout".
-- @module rag.store._pgsock
-- luacheck: globals ngx

local type, error, pcall, setmetatable, ipairs = type, error, pcall, setmetatable, ipairs
local floor, sub = math.floor, string.sub

local M = {}

-- ngx.get_phase() values in which cosockets work (as rag.transport.ngx).
local COSOCKET_PHASES = {
  rewrite = true, access = true, content = true, timer = true, ssl_cert = true,
  ssl_session_fetch = true, ssl_client_hello = true, preread = true,
}

-- Whether this runs inside nginx in a phase with cosockets.
function M.cosocket()
  return type(ngx) == "table" and type(ngx.socket) == "table" and type(ngx.get_phase) ==
    "function" and COSOCKET_PHASES[ngx.get_phase()] == true
end

local Sock = {}
Sock.__index = Sock

function Sock:settimeout(seconds)
  if self.ngx then
    self.raw:settimeout(floor(seconds * 1000 + 0.5))
  else
    self.raw:settimeout(seconds)
  end
end

-- A connected socket | nil, why. o: host, port, connect_timeout, timeout,
-- pool_name and pool_size (the cosocket pool); raises without LuaSocket
-- outside nginx.
function M.connect(o)
  local s = setmetatable({ ngx = M.cosocket() }, Sock)
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
  s:settimeout(o.connect_timeout)
  if s.ngx then
    -- Our own pool name (never nginx's default "host:port"), so that a
    -- reused connection is one this library logged in with these credentials.
    ok, err = raw:connect(o.host, o.port, { pool = o.pool_name,
      pool_size = o.pool_size > 0 and o.pool_size or nil })
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
  s:settimeout(o.timeout)
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

-- Puts the idle connection into nginx's pool (cosockets only).
function Sock:keepalive(ms, size)
  local ok = self.raw:setkeepalive(ms, size)
  self.raw = nil
  return ok
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
    -- lua-resty-core before 0.1.31 fails an assertion, instead of returning
    -- the error, when a handshake that completes at once then fails
    -- verification (openresty/lua-resty-core#499): that is a failure too.
    local done, ok, err = pcall(self.raw.sslhandshake, self.raw, nil, o.host, verify)
    if not done then
      return nil, "handshake failed (" .. tostring(ok) .. ")"
    end
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

-- Seconds since the epoch, with a fraction.
function M.now()
  if M.cosocket() then
    return ngx.now()
  end
  local ok, socket = pcall(require, "socket")
  return ok and socket.gettime() or os.time()
end

return M
