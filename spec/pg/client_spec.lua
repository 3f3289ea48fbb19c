-- rag.store.pg against a real PostgreSQL with pgvector: the cluster that
-- spec/pg/run.sh (make test-pg) starts and names in RAG_PG_DSN (SCRAM
-- role), RAG_PG_MD5_DSN (md5 role) and RAG_PG_CLEAR_DSN (cleartext role).
local pg = require("rag.store.pg")

local DSN = os.getenv("RAG_PG_DSN")

if not DSN then
  describe("rag.store.pg against PostgreSQL", function()
    it("needs a server", function()
      pending("no PostgreSQL: RAG_PG_DSN is unset (make test-pg starts one)")
    end)
  end)
  return
end

local socket = require("socket")

local function connect(dsn, extra)
  local o = { dsn = dsn or DSN }
  for k, v in pairs(extra or {}) do
    o[k] = v
  end
  local c, msg, code = pg.connect(o)
  assert(c, tostring(msg) .. " " .. tostring(code))
  return c
end

-- The DSN with another password.
local function wrong(dsn)
  return (dsn:gsub("^(postgres://[^:]+:)[^@]*@", "%1not-the-password@"))
end

local function one(c, sql, params)
  local rows, msg, code = c:query(sql, params)
  assert(rows, tostring(msg) .. " " .. tostring(code))
  return rows[1]
end

describe("rag.store.pg connecting", function()
  it("logs in with SCRAM-SHA-256", function()
    local c = connect()
    local r = one(c, "SELECT current_user AS u, current_database() AS d")
    assert.equal("rag", r.u)
    assert.equal("rag", r.d)
    local info = c:info()
    assert.equal("I", info.status)
    assert.equal("number", type(info.pid))
    assert.equal("UTF8", info.parameters.client_encoding)
    assert.matches("^15", info.parameters.server_version)
    c:close()
    c:close()
    assert.has_error(function() c:query("SELECT 1") end, "rag.store.pg.query: connection is closed")
  end)

  it("logs in with md5", function()
    local c = connect(os.getenv("RAG_PG_MD5_DSN"))
    assert.equal("rag_md5", one(c, "SELECT current_user AS u").u)
    c:close()
  end)

  it("sends a cleartext password only when asked", function()
    local dsn = os.getenv("RAG_PG_CLEAR_DSN")
    local c, msg, code = pg.connect({ dsn = dsn })
    assert.is_nil(c)
    assert.equal("auth", code)
    assert.matches("clear text", msg)
    c = connect(dsn, { cleartext = true })
    assert.equal("rag_clear", one(c, "SELECT current_user AS u").u)
    c:close()
  end)

  for _, case in ipairs({ { "SCRAM", DSN }, { "md5", os.getenv("RAG_PG_MD5_DSN") } }) do
    it("returns nil, msg, \"auth\" with SQLSTATE 28P01 for a wrong " .. case[1]
      .. " password", function()
      local c, msg, code, state = pg.connect({ dsn = wrong(case[2]) })
      assert.is_nil(c)
      assert.equal("auth", code)
      assert.equal("28P01", state)
      assert.matches("^rag.store.pg.connect: FATAL 28P01: password authentication failed", msg)
      assert.not_matches("not%-the%-password", msg)
    end)
  end

  it("reports a database that does not exist", function()
    local c, msg, code, state = pg.connect({ dsn = DSN:gsub("/rag$", "/nosuchdb") })
    assert.is_nil(c)
    assert.equal("3D000", state)
    assert.equal("provider", code)
    assert.matches("nosuchdb", msg)
  end)

  it("uses TLS when the server offers it, unless told not to", function()
    local c = connect()
    assert.is_true(c:info().tls)
    assert.equal(1, one(c, "SELECT 1 AS one").one)
    c:close()
    c = connect(DSN, { ssl = "disable" })
    assert.is_false(c:info().tls)
    c:close()
  end)

  it("logs in where the server accepts only TLS", function()
    local tls_dsn = os.getenv("RAG_PG_TLS_DSN")
    local c = connect(tls_dsn)
    assert.is_true(one(c, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").ssl)
    c:close()
    local c2, msg, code, state = pg.connect({ dsn = tls_dsn, ssl = "disable" })
    assert.is_nil(c2)
    assert.equal("auth", code)
    assert.equal("28000", state)
    assert.matches("no encryption", msg)
  end)

  it("verifies the certificate and the host name with ssl = \"verify\"", function()
    local c = connect(DSN, { ssl = "verify", cafile = os.getenv("RAG_PG_CA") })
    assert.is_true(c:info().tls)
    c:close()
    c = connect(DSN, { ssl = "verify", cafile = os.getenv("RAG_PG_CA"), host = "localhost" })
    c:close()
    -- the same server at an address the certificate does not name
    local c3, msg3, code3 = pg.connect({ dsn = DSN, ssl = "verify", host = "127.0.0.2",
      cafile = os.getenv("RAG_PG_CA") })
    assert.is_nil(c3)
    assert.equal("io", code3)
    assert.matches("the server's certificate is not for 127.0.0.2", msg3)
    c = connect(DSN, { host = "127.0.0.2" })
    assert.is_true(c:info().tls)
    c:close()
    local c2, msg, code = pg.connect({ dsn = DSN, ssl = "verify",
      cafile = os.getenv("RAG_PG_OTHER_CA") })
    assert.is_nil(c2)
    assert.equal("io", code)
    assert.matches("^rag.store.pg.connect: tls with 127.0.0.1:%d+: ", msg)
    -- prefer takes any certificate: it guards against eavesdropping, not impostors
    c = connect(DSN, { cafile = os.getenv("RAG_PG_OTHER_CA") })
    c:close()
  end)

  it("refuses a server without TLS when TLS is required", function()
    -- A one-shot server that answers the SSLRequest with "N" (no TLS).
    local srv = io.popen("python3 -c 'import socket, sys\n"
      .. "s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(1)\n"
      .. "print(s.getsockname()[1]); sys.stdout.flush()\n"
      .. "c, _ = s.accept(); c.recv(8); c.sendall(b\"N\"); c.recv(100); c.close()'")
    local port = tonumber(srv:read("*l"))
    local c, msg, code = pg.connect({ port = port, ssl = "require" })
    srv:close()
    assert.is_nil(c)
    assert.equal("io", code)
    assert.matches("does not accept TLS", msg)
  end)
end)

describe("rag.store.pg values", function()
  local c
  setup(function() c = connect() end)
  teardown(function() c:close() end)

  it("round-trips every supported type as a parameter and a result", function()
    local r = one(c, "SELECT $1::int2 AS i2, $2::int4 AS i4, $3::int8 AS i8, $4::float4 AS f4, "
      .. "$5::float8 AS f8, $6::bool AS t, $7::bool AS f, $8::text AS s, $9::jsonb AS j, "
      .. "$10::text AS n, $11::text AS e, $12::float8 AS inf, $13::float8 AS nan, "
      .. "$14::int8 AS neg", {
        -32768, 2147483647, 9007199254740993, 1.5, 0.1, true, false,
        "it's \"quoted\"\n中文 ✓", { a = { 1, 2.5, "x" }, b = true }, pg.null, "",
        -math.huge, 0 / 0, -9007199254740993, n = 14 })
    assert.equal(-32768, r.i2)
    assert.equal(2147483647, r.i4)
    if math.type then
      assert.equal(9007199254740993, r.i8) -- beyond 2^53: exact as a Lua 5.3+ integer
      assert.equal(-9007199254740993, r.neg)
      assert.equal("integer", math.type(r.i4))
    end
    assert.equal(1.5, r.f4)
    assert.equal(0.1, r.f8)
    assert.is_true(r.t)
    assert.is_false(r.f)
    assert.equal("it's \"quoted\"\n中文 ✓", r.s)
    assert.same({ a = { 1, 2.5, "x" }, b = true }, r.j)
    assert.equal(pg.null, r.n)
    assert.equal("", r.e)
    assert.equal(-math.huge, r.inf)
    assert.is_true(r.nan ~= r.nan)
  end)

  it("sends nil up to params.n as NULL and reads NULL of every type", function()
    local r = one(c, "SELECT $1::int4 IS NULL AS a, $2::text AS b, NULL::int8 AS c, "
      .. "NULL::jsonb AS d, NULL::bool AS e", { nil, "x", n = 2 })
    assert.is_true(r.a)
    assert.equal("x", r.b)
    assert.equal(pg.null, r.c)
    assert.equal(pg.null, r.d)
    assert.equal(pg.null, r.e)
  end)

  it("keeps other types as their text", function()
    local r = one(c, "SELECT 12.50::numeric AS n, '2024-01-02'::date AS d, $1::text[] AS a",
      { "{x,y}" })
    assert.equal("12.50", r.n)
    assert.equal("2024-01-02", r.d)
    assert.equal("{x,y}", r.a)
  end)

  it("gives rows in order with column names, the command tag and the count", function()
    local rows = assert(c:query("SELECT g AS x, g * 2 AS y FROM generate_series(1, $1::int) g",
      { 3 }))
    assert.same({ "x", "y" }, rows.columns)
    assert.equal(3, #rows)
    assert.same({ x = 3, y = 6 }, rows[3])
    assert.equal("SELECT 3", rows.command)
    assert.equal(3, rows.affected)
    local none = assert(c:query("SELECT 1 AS x WHERE false"))
    assert.equal(0, #none)
    assert.same({ "x" }, none.columns)
  end)

  it("runs several statements by the simple protocol and returns the last result", function()
    local rows = assert(c:exec("CREATE TEMP TABLE s (v int); INSERT INTO s VALUES (1), (2); "
      .. "SELECT sum(v) AS total FROM s"))
    assert.equal(3, rows[1].total)
    rows = assert(c:exec("DROP TABLE s"))
    assert.equal("DROP TABLE", rows.command)
    assert.equal(0, #assert(c:exec("")))
  end)

  it("computes pgvector distances", function()
    assert.equal(1, one(c, "SELECT '[1,2,3]'::vector <-> '[1,2,4]' AS d").d)
    local r = one(c, "SELECT $1::vector <=> $2::vector AS cos, $1::vector AS v",
      { { 1, 0, 0 }, { 0, 1, 0 } })
    assert.equal(1, r.cos)
    assert.equal("[1,0,0]", r.v)
  end)

  it("raises on a parameter it cannot send", function()
    assert.has_error(function() c:query("SELECT $1", { function() end }) end,
      "rag.store.pg.query: parameter 1: cannot send a function")
    assert.has_error(function() c:query(42) end)
    assert.has_error(function() c:query("SELECT 1", "x") end)
    assert.equal(1, one(c, "SELECT 1 AS one").one)
  end)
end)

describe("rag.store.pg prepared statements", function()
  local function prepared(c)
    return one(c, "SELECT count(*) AS n FROM pg_prepared_statements").n
  end

  it("prepares each statement once per connection", function()
    local c = connect()
    for i = 1, 3 do
      assert.equal(i, one(c, "SELECT $1::int AS x", { i }).x)
    end
    assert.equal(2, prepared(c)) -- that one and the count
    assert.equal(2, prepared(c))
    c:close()
    c = connect(DSN, { prepare = false })
    assert.equal(7, one(c, "SELECT $1::int AS x", { 7 }).x)
    assert.equal(0, prepared(c))
    c:close()
  end)

  it("prepares again after DISCARD ALL and after the columns changed", function()
    local c = connect()
    assert.equal(1, one(c, "SELECT $1::int AS x", { 1 }).x)
    assert(c:exec("DISCARD ALL"))
    assert.equal(2, one(c, "SELECT $1::int AS x", { 2 }).x)
    assert(c:exec("CREATE TEMP TABLE p (a int); INSERT INTO p VALUES (1)"))
    assert.same({ a = 1 }, one(c, "SELECT * FROM p"))
    assert(c:exec("ALTER TABLE p ADD COLUMN b text DEFAULT 'x'"))
    assert.same({ a = 1, b = "x" }, one(c, "SELECT * FROM p"))
    c:close()
  end)

  it("keeps at most 100, closing the oldest", function()
    local c = connect()
    for i = 1, 120 do
      assert.equal(i, one(c, "SELECT " .. i .. " AS x").x)
    end
    local n = prepared(c)
    assert.is_true(n >= 90 and n <= 101, tostring(n))
    c:close()
  end)

  it("keeps no statement that failed to parse, and keeps one whose parameters failed", function()
    local c = connect()
    assert.is_nil(c:query("SELEC $1", { 1 }))
    assert.equal(1, prepared(c)) -- only the count
    assert.is_nil(c:query("SELECT $1::int AS x", { "not a number" }))
    assert.equal(5, one(c, "SELECT $1::int AS x", { 5 }).x)
    assert.equal(2, prepared(c))
    c:close()
  end)
end)

describe("rag.store.pg errors", function()
  it("cancels a running statement with conn:cancel", function()
    local c, other = connect(), connect()
    assert(other:query("SELECT pg_advisory_lock(42)"))
    -- c waits for the lock until cancelled from here, with c's own backend key
    local sql = "SELECT pg_advisory_lock(42)\0"
    assert(c:_send("test", "Q\0\0\0" .. string.char(4 + #sql) .. sql)) -- a Query message
    socket.sleep(0.1)
    assert.is_true(c:cancel())
    local rows, msg, code, state = c:_results("rag.store.pg.query")
    assert.is_nil(rows)
    assert.equal("timeout", code)
    assert.equal("57014", state)
    assert.matches("canceling statement due to user request", msg)
    assert.equal(1, one(c, "SELECT 1 AS one").one)
    other:close()
    c:close()
  end)

  it("gives a syntax error's SQLSTATE and keeps the connection usable", function()
    local c = connect()
    local rows, msg, code, state = c:query("SELEC 1")
    assert.is_nil(rows)
    assert.equal("provider", code)
    assert.equal("42601", state)
    assert.matches('^rag.store.pg.query: ERROR 42601: syntax error at or near "SELEC"', msg)
    assert.equal(1, one(c, "SELECT 1 AS one").one)
    rows, msg, code, state = c:exec("SELECT 1; SELECT nosuchcolumn")
    assert.is_nil(rows)
    assert.equal("42703", state)
    assert.equal("provider", code)
    assert.matches("^rag.store.pg.exec: ERROR 42703: column \"nosuchcolumn\" does not exist", msg)
    assert.equal(2, one(c, "SELECT 2 AS two").two)
    c:close()
  end)

  it("maps statement_timeout to \"timeout\" (57014) and stays usable", function()
    local c = connect(DSN, { params = { statement_timeout = "100ms" } })
    local t0 = socket.gettime()
    local rows, msg, code, state = c:query("SELECT pg_sleep(3)")
    assert.is_nil(rows)
    assert.equal("timeout", code)
    assert.equal("57014", state)
    assert.matches("canceling statement due to statement timeout", msg)
    assert.is_true(socket.gettime() - t0 < 2)
    assert.equal(1, one(c, "SELECT 1 AS one").one)
    c:close()
  end)

  for _, ssl in ipairs({ "prefer", "disable" }) do
    local over = ssl == "prefer" and " (TLS)" or " (plain TCP)"
    it("gives \"timeout\" when the server does not answer in time, and drops the connection"
      .. over, function()
      local c = connect(DSN, { timeout = 0.2, ssl = ssl })
      local t0 = socket.gettime()
      local rows, msg, code = c:query("SELECT pg_sleep(2)")
      assert.is_nil(rows)
      assert.equal("timeout", code)
      assert.matches("^rag.store.pg.query: reading from 127.0.0.1:%d+: timeout$", msg)
      assert.is_true(socket.gettime() - t0 < 1)
      assert.is_true(c:info().broken)
      -- the statement was cancelled on the server, not left to run its 2 s
      local watcher, gone = connect(), false
      for _ = 1, 50 do
        if #assert(watcher:query("SELECT 1 FROM pg_stat_activity WHERE pid = $1::int "
          .. "AND state = 'active'", { c:info().pid })) == 0 then
          gone = true
          break
        end
        socket.sleep(0.01)
      end
      watcher:close()
      assert.is_true(gone)
      rows, msg, code = c:query("SELECT 1")
      assert.is_nil(rows)
      assert.equal("io", code)
      assert.matches("broken", msg)
    end)

    it("applies conn:settimeout to later reads" .. over, function()
      local c = connect(DSN, { ssl = ssl })
      c:settimeout(0.2)
      local rows, _, code = c:query("SELECT pg_sleep(1)")
      assert.is_nil(rows)
      assert.equal("timeout", code)
      assert.has_error(function() c:settimeout(0) end)
      c:close()
      assert.has_error(function() c:settimeout(1) end,
        "rag.store.pg.settimeout: connection is closed")
    end)

    it("gives \"io\" for a connection killed by pg_terminate_backend" .. over, function()
      local victim, killer = connect(DSN, { ssl = ssl }), connect()
      local pid = victim:info().pid
      assert.is_true(one(killer, "SELECT pg_terminate_backend($1::int, 5000) AS ok",
        { pid }).ok)
      local rows, msg, code, state = victim:query("SELECT 1")
      assert.is_nil(rows)
      assert.equal("io", code)
      assert.is_truthy(state == "57P01" or state == nil)
      assert.matches("^rag.store.pg.query: ", msg)
      assert.is_true(victim:info().broken)
      killer:close()
      victim:close()
    end)
  end
end)

describe("rag.store.pg transactions", function()
  local c
  setup(function()
    c = connect()
    assert(c:exec("CREATE TEMP TABLE t (id int PRIMARY KEY, v text)"))
  end)
  teardown(function() c:close() end)

  local function count()
    return one(c, "SELECT count(*) AS n FROM t").n
  end

  it("commits when fn returns a true value, with its values", function()
    local a, b = c:transaction(function(tx)
      assert(tx:query("INSERT INTO t VALUES (1, 'one')"))
      return "done", 2
    end)
    assert.equal("done", a)
    assert.equal(2, b)
    assert.equal(1, count())
    assert.equal("I", c:info().status)
  end)

  it("rolls back when fn returns nil, msg, code: nothing is left", function()
    local ok, msg, code = c:transaction(function(tx)
      assert(tx:query("INSERT INTO t VALUES (2, 'two')"))
      assert.equal(2, one(tx, "SELECT count(*) AS n FROM t").n)
      return nil, "changed my mind", "provider"
    end)
    assert.is_nil(ok)
    assert.equal("changed my mind", msg)
    assert.equal("provider", code)
    assert.equal(1, count())
  end)

  it("rolls back when fn raises, and raises again", function()
    assert.has_error(function()
      c:transaction(function(tx)
        assert(tx:query("INSERT INTO t VALUES (3, 'three')"))
        error("boom", 0)
      end)
    end, "boom")
    assert.equal(1, count())
    assert.equal("I", c:info().status)
  end)

  it("raises on a nested transaction, after rolling back the outer one", function()
    assert.has_error(function()
      c:transaction(function(tx)
        assert(tx:query("INSERT INTO t VALUES (5, 'five')"))
        tx:transaction(function() return true end)
      end)
    end, "rag.store.pg.transaction: already in a transaction")
    assert.equal(1, count())
    assert.equal("I", c:info().status)
    assert.has_error(function() c:transaction("x") end)
  end)

  it("rolls back when a statement in it failed", function()
    local ok, msg, code = c:transaction(function(tx)
      assert(tx:query("INSERT INTO t VALUES (4, 'four')"))
      tx:query("INSERT INTO t VALUES (1, 'duplicate')") -- 23505, ignored by fn
      return true
    end)
    assert.is_nil(ok)
    assert.equal("provider", code)
    assert.matches("a statement failed", msg)
    assert.equal(1, count())
  end)
end)

describe("rag.store.pg pool", function()
  local function pid_of(pool)
    return one(pool, "SELECT pg_backend_pid() AS pid").pid
  end

  it("reuses an idle connection", function()
    local pool = pg.pool({ dsn = DSN })
    local p1 = pid_of(pool)
    assert.equal(p1, pid_of(pool))
    assert.equal(1, #pool.idle)
    pool:close()
  end)

  it("closes a connection idle for longer than keepalive", function()
    local pool = pg.pool({ dsn = DSN, keepalive = 0.05 })
    local p1 = pid_of(pool)
    assert.equal(p1, pid_of(pool))
    socket.sleep(0.1)
    assert.not_equal(p1, pid_of(pool))
    pool:close()
  end)

  it("discards an idle connection the server killed and opens a new one", function()
    local pool = pg.pool({ dsn = DSN })
    local killer = connect()
    local p1 = pid_of(pool)
    assert.is_true(one(killer, "SELECT pg_terminate_backend($1::int, 5000) AS ok", { p1 }).ok)
    local p2 = pid_of(pool)
    assert.not_equal(p1, p2)
    killer:close()
    pool:close()
  end)

  it("returns \"io\" for a connection killed in use, then recovers", function()
    local pool = pg.pool({ dsn = DSN })
    local killer = connect()
    local c = assert(pool:acquire())
    local p1 = c:info().pid
    assert(killer:query("SELECT pg_terminate_backend($1::int, 5000)", { p1 }))
    local rows, _, code = c:query("SELECT 1")
    assert.is_nil(rows)
    assert.equal("io", code)
    pool:release(c)
    assert.equal(0, #pool.idle)
    assert.not_equal(p1, pid_of(pool))
    killer:close()
    pool:close()
  end)

  it("keeps at most pool_size idle connections and drops the ones in a transaction", function()
    local pool = pg.pool({ dsn = DSN, pool_size = 2 })
    local cs = {}
    for i = 1, 3 do
      cs[i] = assert(pool:acquire())
    end
    assert(cs[3]:exec("BEGIN"))
    for i = 1, 3 do
      pool:release(cs[i])
    end
    assert.equal(2, #pool.idle)
    local c = assert(pool:acquire())
    assert.equal("I", c:info().status)
    pool:release(c)
    pool:close()
    assert.has_error(function() pool:acquire() end, "rag.store.pg.pool: pool is closed")
    assert.has_error(function() pool:release({}) end)
  end)

  it("runs a transaction on a pooled connection", function()
    local pool = pg.pool({ dsn = DSN })
    local n = pool:transaction(function(tx)
      return one(tx, "SELECT 41 + 1 AS n").n
    end)
    assert.equal(42, n)
    pool:close()
  end)

  it("returns the login failure from acquire", function()
    local pool = pg.pool({ dsn = wrong(DSN) })
    local rows, _, code, state = pool:query("SELECT 1")
    assert.is_nil(rows)
    assert.equal("auth", code)
    assert.equal("28P01", state)
  end)
end)
