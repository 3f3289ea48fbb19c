--- rag.store.pg: a PostgreSQL client in Lua (frontend/backend protocol 3.0)
-- over LuaSocket in plain Lua and over `ngx.socket.tcp` under OpenResty, by
-- one code path. SCRAM-SHA-256 (RFC 5802, 7677), md5 and (when asked)
-- cleartext passwords; TLS by SSLRequest; the simple and the extended query
-- protocol with text parameters and typed results; transactions; a pool.
-- Failures return `nil, msg, code, sqlstate`; misuse raises.
-- @module rag.store.pg

local core = require("rag.core")
local opts_check = require("rag.opts").check
local codec = require("rag.store._pgcodec")
local sockets = require("rag.store._pgsock")

local type, tostring, tonumber, error, pcall, select = type, tostring, tonumber, error, pcall,
  select
local setmetatable, getmetatable, ipairs, pairs = setmetatable, getmetatable, ipairs, pairs
local char, sub, format = string.char, string.sub, string.format
local concat, remove = table.concat, table.remove
local floor, max = math.floor, math.max
local md5, sha256hex, random = core.text.md5, core.text.hash, core.text.random
local u16, u32, get32, cstring = codec.u16, codec.u32, codec.get32, codec.cstring
local b64encode, b64decode = codec.b64encode, codec.b64decode
local parse_fields, server_error = codec.parse_fields, codec.server_error
local scram_final, encode_param = codec.scram_final, codec.encode_param
local parse_columns, parse_row, new_result = codec.parse_columns, codec.parse_row,
  codec.new_result
local now = sockets.now

local M = {}

--- The value that stands for SQL NULL, in parameters and in rows.
M.null = codec.null

local DEFAULT_PORT = 5432
local PROTOCOL = 196608           -- 3.0
local SSL_REQUEST = 80877103
local CANCEL_REQUEST = 80877102
local MAX_MESSAGE = 1024 * 1024 * 1024 -- the server's own limit on one message
local MAX_STATEMENTS = 100              -- prepared statements kept per connection

-- Under nginx a pooled session outlives the connection object, so its
-- prepared statements cannot be listed per connection: a statement gets a
-- name made from its text, and runs by that name, prepared only when the
-- server says it has none. A worker names at most MAX_STATEMENTS texts
-- (each session then holds at most as many); the rest run unnamed.
local named = { n = 0 }
local function name_of(sql)
  local name = named[sql]
  if not name and named.n < MAX_STATEMENTS then
    name = "rag_n_" .. core.text.hash(sql):sub(1, 24)
    named[sql], named.n = name, named.n + 1
  end
  return name
end

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
  prepare = { "boolean", default = true },
  params = { "table" },
  keepalive = { "number", default = 60, min = 0 },
  pool_size = { "number", default = 8, int = true, min = 0, max = 10000 },
}

-- {====== Errors ======}

local function fail(code, fname, fmt, ...)
  if select("#", ...) > 0 then
    fmt = format(fmt, ...)
  end
  return nil, fname .. ": " .. fmt, code
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

-- The I/O failure's code: "timeout" for a timeout, else "io". A timeout
-- after startup also asks the server to cancel the statement, which would
-- otherwise run on until it next writes to the closed connection.
function Conn:_io(fname, what, err)
  if err == "timeout" and self.pid and not self.broken then
    self:cancel()
  end
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
  local sock, err = sockets.connect(o)
  if not sock then
    local code = err == "timeout" and "timeout" or "io"
    return fail(code, fname, "connecting to %s:%d: %s", o.host, o.port, tostring(err))
  end
  local c = setmetatable({ sock = sock, host = o.host, port = o.port, opts = o,
    parameters = {}, status = "I", broken = false, closing = {} }, Conn)
  -- Prepared statements, unless off or under nginx, whose pool hands the
  -- server's session from request to request without this table.
  if o.prepare and not sock.ngx then
    c.stmts, c.stmt_order, c.seq = {}, {}, 0
    c.stmt_prefix = "rag_" .. codec.hex(random(4)) .. "_"
  end
  c.named = o.prepare and sock.ngx or nil
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

-- {====== Queries ======}

-- Reads one request's replies until ReadyForQuery: the last statement's
-- result | nil, msg, code, sqlstate (the first error).
function Conn:_results(fname, cols)
  local res = new_result(cols)
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
      self._described = cols
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
      self._described = false
    elseif t == "1" then
      self._parsed = true
    elseif t == "S" then
      local k, nxt = cstring(body, 1)
      self.parameters[k] = cstring(body, nxt)
    elseif t == "G" then -- COPY FROM STDIN: refused, the server then errors
      local ok, msg, c2 = self:_send(fname, message("f", "rag.store.pg does not support COPY\0"))
      if not ok then
        return nil, msg, c2
      end
    elseif t ~= "2" and t ~= "3" and t ~= "t" and t ~= "N" and t ~= "A" and t ~= "s"
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

-- Forgets the prepared statement of `sql`; the server's copy is closed with
-- the next request.
function Conn:_unprepare(sql)
  local st = self.stmts[sql]
  if st then
    self.stmts[sql] = nil
    self.closing[#self.closing + 1] = message("C", "S" .. st.name .. "\0")
  end
end

-- Keeps the statement just parsed as `name` for `sql`, closing the oldest
-- one beyond MAX_STATEMENTS.
function Conn:_keep(sql, name, cols)
  self.stmts[sql] = { name = name, cols = cols or nil }
  local order = self.stmt_order
  order[#order + 1] = sql
  while #order > MAX_STATEMENTS do
    local old = remove(order, 1)
    if self.stmts[old] and old ~= sql then
      self:_unprepare(old)
    end
  end
end

--- Runs one statement by the extended protocol with `$1, $2, ...` bound to
-- `params`, in one round trip: Parse (the first time), Bind, Execute, Sync.
-- With `prepare` (the default) each connection keeps up to 100 statements
-- prepared, so later runs skip parsing and planning (under nginx: by names
-- made from their texts, outside transactions).
-- @tparam string sql one statement
-- @tparam[opt] table params values: strings, numbers, booleans, tables
--   (sent as JSON), `rag.store.pg.null` or nil up to `params.n`
-- @return rows `{ { col = value, ... }, ..., columns = { names },
--   command = "SELECT 2", affected = 2 }` | nil, msg, code, sqlstate
function Conn:query(sql, params, reparse)
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
  local st = self.stmts and self.stmts[sql]
  local name, out = "", self.closing
  self.closing = {}
  -- under nginx, outside a transaction (whose first error would abort it)
  local byname = self.named and self.status == "I" and name_of(sql)
  if st then
    name = st.name
  elseif byname then
    name = byname
    if reparse then
      out[#out + 1] = message("C", "S" .. name .. "\0")
      out[#out + 1] = message("P", name .. "\0" .. sql .. "\0" .. u16(0))
    end
  elseif self.stmts then
    self.seq = self.seq + 1
    name = self.stmt_prefix .. self.seq
    out[#out + 1] = message("P", name .. "\0" .. sql .. "\0" .. u16(0))
    out[#out + 1] = message("D", "S" .. name .. "\0")
  else
    out[#out + 1] = message("P", "\0" .. sql .. "\0" .. u16(0))
  end
  local bind = { "\0", name, "\0", u16(0), u16(n) }
  for i = 1, n do
    local s = encode_param(fname, params[i], i)
    bind[#bind + 1] = s and (u32(#s) .. s) or u32(-1)
  end
  bind[#bind + 1] = u16(0)
  out[#out + 1] = message("B", concat(bind))
  if not self.stmts then
    out[#out + 1] = message("D", "P\0")
  end
  out[#out + 1] = message("E", "\0" .. u32(0))
  out[#out + 1] = message("S", "")
  ok, msg, code = self:_send(fname, concat(out))
  if not ok then
    return nil, msg, code
  end
  self._parsed, self._described = false, nil
  local res, state
  res, msg, code, state = self:_results(fname, st and st.cols)
  if self.stmts and not st and self._parsed then
    if self._described ~= nil then
      self:_keep(sql, name, self._described)
    else
      self.closing[#self.closing + 1] = message("C", "S" .. name .. "\0")
    end
  end
  -- A named statement the session does not have yet, or whose result
  -- columns changed: prepared (again), run once more.
  if not res and byname and not reparse and (state == "26000" or state == "0A000")
      and self.status == "I" and not self.broken then
    return self:query(sql, params, true)
  end
  -- A kept statement that the server no longer has (DISCARD ALL), or whose
  -- result columns changed (ALTER TABLE): prepared again, run once more.
  if not res and st and (state == "26000" or state == "0A000") then
    self:_unprepare(sql)
    if self.status == "I" and not self.broken then
      return self:query(sql, params)
    end
  end
  return res, msg, code, state
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

--- Sets the time each later read or write may take on this connection
-- (the `timeout` option), e.g. longer for building an index.
-- @tparam number seconds more than 0
-- @raise on a bad value or a closed connection
function Conn:settimeout(seconds)
  if type(seconds) ~= "number" or seconds ~= seconds or seconds <= 0 then
    error("rag.store.pg.settimeout: seconds must be a number > 0", 2)
  end
  self:_check_open("rag.store.pg.settimeout", 2)
  local o = {}
  for k, v in pairs(self.opts) do
    o[k] = v
  end
  o.timeout = seconds
  self.opts = o
  if not self.broken then
    self.sock:settimeout(seconds)
  end
end

--- Asks the server to cancel the statement this connection is running
-- (a CancelRequest on a new connection, as libpq's PQcancel); the statement
-- then fails with SQLSTATE 57014. Harmless when nothing runs.
-- @return true | nil, msg, code
function Conn:cancel()
  local fname = "rag.store.pg.cancel"
  if not self.pid then
    return fail("io", fname, "the server gave no backend key")
  end
  local o = {}
  for k, v in pairs(self.opts) do
    o[k] = v
  end
  o.pool_name = o.pool_name .. ":cancel"
  local s, err = sockets.connect(o)
  if not s then
    return fail(err == "timeout" and "timeout" or "io", fname, "connecting to %s:%d: %s",
      self.host, self.port, tostring(err))
  end
  local ok
  ok, err = s:send(u32(16) .. u32(CANCEL_REQUEST) .. u32(self.pid) .. self.secret)
  if ok then
    s:receive(1) -- the server closes the connection once it has read the request
  end
  s:close()
  if not ok then
    return fail("io", fname, "sending to %s:%d: %s", self.host, self.port, tostring(err))
  end
  return true
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
      c.sock:settimeout(self.opts.timeout)
      return c
    end
    c:_break()
  end
  return open("rag.store.pg.acquire", self.opts)
end

--- Gives a connection back: kept when it is healthy and idle, closed otherwise.
function Pool:release(c)
  if getmetatable(c) ~= Conn then
    error("rag.store.pg.release: not a connection: " .. tostring(c), 2)
  end
  if c.broken or c.closed or c.status ~= "I" then
    c:close()
    return
  end
  if c.sock.ngx then -- nginx's pool (a keepalive of 0 there would mean forever)
    local o = self.opts
    if o.pool_size > 0 and o.keepalive > 0 and not self.closed then
      if not c.sock:keepalive(floor(o.keepalive * 1000 + 0.5), o.pool_size) then
        c:_break()
      end
      c.closed = true
    else
      c:close()
    end
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

--- `conn:query(sql, params)` on a pooled connection: the same as
-- `pool:query`, so that code written for a `router` runs on a pool too.
function Pool:read(sql, params)
  return pooled(self, "query", sql, params)
end

-- Closes the idle connections and keeps the pool usable.
function Pool:_flush()
  for _, c in ipairs(self.idle) do
    c:close()
  end
  self.idle = {}
end

--- Closes the idle connections; the pool can no longer be used.
function Pool:close()
  self.closed = true
  self:_flush()
end

-- {====== Router: a primary and its streaming replicas ======}

local Router = {}
Router.__index = Router

-- Options a router applies to each of its servers (pool and connection
-- options other than the server and the login).
local SHARED = { "connect_timeout", "timeout", "ssl", "cafile", "cleartext",
  "application_name", "prepare", "keepalive", "pool_size" }

local ROUTER_SCHEMA = {
  primary = { "string|table" },
  replicas = { "table" },
  retry_after = { "number", default = 5, min = 0 },
  params = { "table" },
}
for _, k in ipairs(SHARED) do
  local s = CONNECT_SCHEMA[k]
  ROUTER_SCHEMA[k] = { s[1], int = s.int, min = s.min, max = s.max, above = s.above,
    enum = s.enum } -- no default: a server's own URL or table may set it
end

-- A failure of the server or of the way to it, after which another server
-- is tried: no answer (refused, reset, timed out, broken) or SQLSTATE class
-- 08 (connection exception), 57P01-57P03 (admin or crash shutdown, cannot
-- connect now). Every other error is the statement's own.
local function is_down(code, state)
  if state then
    return sub(state, 1, 2) == "08" or state == "57P01" or state == "57P02" or state == "57P03"
  end
  return code == "io" or code == "timeout"
end

-- One server's pool options: its own table or URL over the router's.
local function server_options(fname, entry, shared, level)
  local o = {}
  if type(entry) == "string" then
    o.dsn = entry
  elseif type(entry) == "table" then
    for k, v in pairs(entry) do
      o[k] = v
    end
  else
    error(fname .. ": a server must be a postgres:// URL or an options table, got "
      .. type(entry), level + 1)
  end
  local d = {}
  if type(o.dsn) == "string" then
    local ok, parsed = pcall(M.parse_dsn, o.dsn)
    if not ok then
      error(fname .. ": " .. tostring(parsed):gsub("^.-rag%.store%.pg%.parse_dsn: ", ""),
        level + 1)
    end
    d = parsed
  end
  for _, k in ipairs(SHARED) do
    if o[k] == nil and d[k] == nil then
      o[k] = shared[k]
    end
  end
  if shared.params then
    local params = {}
    for _, from in ipairs({ shared.params, d.params or {}, o.params or {} }) do
      for k, v in pairs(from) do
        params[k] = v
      end
    end
    o.params = params
  end
  local checked = connect_options(fname, o, level + 1)
  local host = checked.host:find(":", 1, true) and "[" .. checked.host .. "]" or checked.host
  return checked, format("%s:%d", host, checked.port)
end

-- The shared options the replicas take: the router's, else what the
-- primary's own table or URL says (a replica is configured as its primary
-- unless told otherwise); `params` merged, the router's over the primary's.
-- The primary's entry has been checked by server_options already.
local function inherited(primary, shared)
  local o = type(primary) == "string" and { dsn = primary } or primary
  local d = type(o.dsn) == "string" and M.parse_dsn(o.dsn) or {}
  local out = {}
  for _, k in ipairs(SHARED) do
    local v = shared[k]
    if v == nil then
      v = o[k]
    end
    if v == nil then
      v = d[k]
    end
    out[k] = v
  end
  local params, any = {}, false
  for _, from in ipairs({ d.params or {}, o.params or {}, shared.params or {} }) do
    for k, v in pairs(from) do
      params[k], any = v, true
    end
  end
  out.params = any and params or nil
  return out
end

local function new_server(fname, entry, shared, role, level)
  local o, name = server_options(fname, entry, shared, level + 1)
  return { pool = setmetatable({ opts = o, idle = {} }, Pool), role = role, name = name,
    database = o.database, reads = 0, queries = 0, failures = 0 }
end

--- Reads from streaming replicas, everything else on the primary: one
-- `pool` per server. `router:read` goes to the next replica that is not
-- down (round robin); a replica that fails (no connection, a dropped or
-- timed-out one, SQLSTATE 08xxx or 57P01-57P03) is marked down, skipped for
-- `retry_after` seconds, and the same read goes to the next replica, then
-- to the primary. Statement errors (syntax, constraints, 40001 from a
-- conflict with recovery) are returned as they are. Replicas lag: a read
-- may not yet see a write just committed on the primary.
-- @tparam table opts `primary` (a postgres:// URL or `connect` options),
--   `replicas` (a list of such, may be empty), `retry_after` (5 s), and
--   `connect_timeout`, `timeout`, `ssl`, `cafile`, `cleartext`,
--   `application_name`, `prepare`, `params`, `keepalive`, `pool_size`
--   for every server. A server's own table, then its URL, win key by key
--   over the router's options; a replica that sets none of these takes
--   the primary's (from its table or URL); `params` are merged key by key.
-- @return router
-- @raise on a bad option
function M.router(opts)
  local fname = "rag.store.pg.router"
  local o = opts_check(fname, opts, ROUTER_SCHEMA, 2)
  if o.primary == nil then
    error(fname .. ": 'primary' is required", 2)
  end
  local r = setmetatable({ retry_after = o.retry_after, replicas = {}, next = 1 }, Router)
  r.primary = new_server(fname, o.primary, o, "primary", 2)
  local list = o.replicas or {}
  local shared = inherited(o.primary, o)
  for i = 1, #list do
    r.replicas[i] = new_server(fname, list[i], shared, "replica", 2)
  end
  for k in pairs(list) do
    if type(k) ~= "number" or k < 1 or k > #list or k ~= floor(k) then
      error(fname .. ": 'replicas' must be a list", 2)
    end
  end
  return r
end

function Router:_check(fname, level)
  if self.closed then
    error(fname .. ": router is closed", level + 1)
  end
end

-- Runs `method` on server s's pool, counting a failure.
local function run(s, method, ...)
  local res, msg, code, state = s.pool[method](s.pool, ...)
  if not res and is_down(code, state) then
    s.failures = s.failures + 1
  end
  return res, msg, code, state
end

--- `pool:query(sql, params)` on the primary. @return rows | nil, msg, code, sqlstate
function Router:query(sql, params)
  self:_check("rag.store.pg.query", 2)
  self.primary.queries = self.primary.queries + 1
  return run(self.primary, "query", sql, params)
end

--- `pool:exec(sql)` on the primary. @return result | nil, msg, code, sqlstate
function Router:exec(sql)
  self:_check("rag.store.pg.exec", 2)
  self.primary.queries = self.primary.queries + 1
  return run(self.primary, "exec", sql)
end

--- `pool:transaction(fn)` on the primary. @return fn's values | nil, msg, code, sqlstate
function Router:transaction(fn)
  self:_check("rag.store.pg.transaction", 2)
  self.primary.queries = self.primary.queries + 1
  return run(self.primary, "transaction", fn)
end

--- A connection to the primary from its pool (`pool:acquire`).
-- @return conn | nil, msg, code, sqlstate
function Router:acquire()
  self:_check("rag.store.pg.acquire", 2)
  return self.primary.pool:acquire()
end

--- Gives back a connection from `router:acquire` (`pool:release`).
function Router:release(c)
  return self.primary.pool:release(c)
end

--- One statement (as `conn:query`) on a replica, round robin, skipping
-- the ones marked down; on the primary when no replica answers or there are
-- none. A statement error from a replica is returned, not retried.
-- @return rows | nil, msg, code, sqlstate (the primary's, when it was tried)
function Router:read(sql, params)
  local fname = "rag.store.pg.read"
  self:_check(fname, 2)
  if type(sql) ~= "string" then
    error(fname .. ": sql must be a string, got " .. type(sql), 2)
  end
  if params ~= nil and type(params) ~= "table" then
    error(fname .. ": params must be a table, got " .. type(params), 2)
  end
  local replicas = self.replicas
  local n = #replicas
  if n > 0 then
    local first = self.next
    self.next = first % n + 1
    for i = 0, n - 1 do
      local s = replicas[(first - 1 + i) % n + 1]
      if not s.retry_at or s.retry_at <= now() then
        local res, msg, code, state = run(s, "query", sql, params)
        if res or not is_down(code, state) then
          s.reads = s.reads + 1
          s.down, s.retry_at = false, nil
          return res, msg, code, state
        end
        s.down, s.retry_at = true, now() + self.retry_after
        s.pool:_flush() -- its idle connections went with it
      end
    end
  end
  local p = self.primary
  local res, msg, code, state = run(p, "query", sql, params)
  if res or not is_down(code, state) then
    p.reads = p.reads + 1
  end
  return res, msg, code, state
end

--- Each server's counts, the primary first:
-- `{ { server = "host:port", database =, role = "primary" | "replica",
-- reads = (answered reads), queries = (query, exec and transaction calls),
-- failures = (connection failures), down = (a replica skipped until
-- `retry_in` seconds from now or until it next answers) }, ... }`.
-- @treturn table
function Router:stats()
  local out = {}
  local t = now()
  local servers = { self.primary }
  for i, s in ipairs(self.replicas) do
    servers[i + 1] = s
  end
  for i, s in ipairs(servers) do
    out[i] = { server = s.name, database = s.database, role = s.role, reads = s.reads,
      queries = s.queries, failures = s.failures, down = s.down == true,
      retry_in = s.retry_at and max(0, s.retry_at - t) or nil }
  end
  return out
end

--- Closes every server's idle connections; the router can no longer be used.
function Router:close()
  self.closed = true
  self.primary.pool:close()
  for _, s in ipairs(self.replicas) do
    s.pool:close()
  end
end

return M
