-- rag.store.pg.router against the cluster of spec/pg/run.sh (make test-pg):
-- the primary in RAG_PG_DSN and its streaming replica in
-- RAG_PG_REPLICA_DSN, which RAG_PG_REPLICA_CTL stops and starts. Which
-- server answered is read from the server itself (inet_server_port(),
-- pg_is_in_recovery()), never from the router.
local pg = require("rag.store.pg")

local DSN = os.getenv("RAG_PG_DSN")

if not DSN then
  describe("rag.store.pg.router against PostgreSQL", function()
    it("needs a server", function()
      pending("no PostgreSQL: RAG_PG_DSN is unset (make test-pg starts one)")
    end)
  end)
  return
end

local socket = require("socket")

local REPLICA = os.getenv("RAG_PG_REPLICA_DSN")
local CTL = os.getenv("RAG_PG_REPLICA_CTL")

local function port_of(dsn)
  return tonumber(dsn:match("@[^:/]+:(%d+)/"))
end

local PRIMARY_PORT = port_of(DSN)
local REPLICA_PORT = REPLICA and port_of(REPLICA)

-- The replica specs fail, saying why, when run.sh could not start one.
local function need_replica()
  if not REPLICA or not CTL then
    error("no streaming replica: " .. (os.getenv("RAG_PG_REPLICA_ERROR")
      or "RAG_PG_REPLICA_DSN is unset (run spec/pg/run.sh)"), 2)
  end
end

local function password_of(dsn)
  return dsn:match("^postgres://[^:]+:([^@]*)@")
end

-- A loopback port where nothing listens.
local function dead_port()
  local s = assert(socket.bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return tonumber(port)
end

local function dead_dsn()
  return (DSN:gsub("@127%.0%.0%.1:%d+/", "@127.0.0.1:" .. dead_port() .. "/"))
end

local function ok(rows, msg, code)
  assert(rows, tostring(msg) .. " " .. tostring(code))
  return rows[1]
end

-- The port of the server that answered `read` / `query`.
local function read_port(r)
  return ok(r:read("SELECT inet_server_port() AS p")).p
end

local function query_port(r)
  return ok(r:query("SELECT inet_server_port() AS p")).p
end

-- Waits until the replica has replayed the primary's WAL up to now.
local function caught_up()
  local p = assert(pg.connect({ dsn = DSN }))
  local lsn = ok(p:query("SELECT pg_current_wal_lsn()::text AS l")).l
  p:close()
  local c = assert(pg.connect({ dsn = REPLICA }))
  local deadline = socket.gettime() + 10
  local done
  repeat
    done = ok(c:query("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok", { lsn })).ok
    if not done then
      socket.sleep(0.02)
    end
  until done or socket.gettime() > deadline
  c:close()
  return done
end

-- stats() by server name, for the replica entries in order.
local function stat(r, i)
  return r:stats()[i]
end

describe("rag.store.pg.router", function()
  it("writes to the primary and reads from the replica once it has caught up", function()
    need_replica()
    local r = pg.router({ primary = DSN, replicas = { REPLICA } })
    assert(r:exec("DROP TABLE IF EXISTS router_t; CREATE TABLE router_t (id int PRIMARY KEY, "
      .. "v text)"))
    assert(r:query("INSERT INTO router_t VALUES ($1::int, $2)", { 1, "one" }))
    assert.equal(PRIMARY_PORT, query_port(r))
    assert.is_true(caught_up(), "the replica did not catch up within 10 s")
    assert.is_true(ok(r:read("SELECT pg_is_in_recovery() AS rec")).rec)
    assert.is_false(ok(r:query("SELECT pg_is_in_recovery() AS rec")).rec)
    assert.equal(REPLICA_PORT, read_port(r))
    assert.equal("one", ok(r:read("SELECT v FROM router_t WHERE id = $1::int", { 1 })).v)
    local s = r:stats()
    assert.equal(2, #s)
    assert.same({ server = "127.0.0.1:" .. PRIMARY_PORT, database = "rag", role = "primary",
      reads = 0, queries = 4, failures = 0, down = false }, s[1])
    assert.same({ server = "127.0.0.1:" .. REPLICA_PORT, database = "rag", role = "replica",
      reads = 3, queries = 0, failures = 0, down = false }, s[2])
    assert(r:exec("DROP TABLE router_t"))
    r:close()
  end)

  it("returns a statement error from a replica as it is, not retried elsewhere", function()
    need_replica()
    local r = pg.router({ primary = DSN, replicas = { REPLICA, REPLICA } })
    assert(r:exec("DROP TABLE IF EXISTS router_never"))
    local rows, msg, code, state = r:read("SELEC 1")
    assert.is_nil(rows)
    assert.equal("provider", code)
    assert.equal("42601", state)
    assert.matches("^rag.store.pg.query: ERROR 42601: syntax error", msg)
    -- A write on a hot standby: refused there (25006), not sent to the primary.
    rows, msg, code, state = r:read("CREATE TABLE router_never (id int)")
    assert.is_nil(rows)
    assert.equal("provider", code)
    assert.equal("25006", state)
    assert.matches("read%-only transaction", msg)
    assert.equal(pg.null, ok(r:query("SELECT to_regclass('router_never') AS t")).t)
    local s = r:stats()
    assert.same({ 0, 2 }, { s[1].reads, s[1].queries })
    assert.same({ 1, 0, false }, { s[2].reads, s[2].failures, s[2].down })
    assert.same({ 1, 0, false }, { s[3].reads, s[3].failures, s[3].down })
    r:close()
  end)

  it("reads from the primary when there are no replicas", function()
    local r = pg.router({ primary = DSN })
    assert.equal(PRIMARY_PORT, read_port(r))
    assert.is_false(ok(r:read("SELECT pg_is_in_recovery() AS rec")).rec)
    local rows, _, code, state = r:read("SELEC 1")
    assert.is_nil(rows)
    assert.equal("provider", code)
    assert.equal("42601", state)
    local s = r:stats()
    assert.equal(1, #s)
    assert.same({ 3, 0, 0 }, { s[1].reads, s[1].queries, s[1].failures })
    r:close()
  end)

  it("takes the replicas in turn", function()
    need_replica()
    local r = pg.router({ primary = DSN, replicas = {
      { dsn = REPLICA, application_name = "rag_first" },
      { dsn = REPLICA, application_name = "rag_second" } } })
    local seen = {}
    for i = 1, 5 do
      seen[i] = ok(r:read("SELECT current_setting('application_name') AS a")).a
    end
    assert.same({ "rag_first", "rag_second", "rag_first", "rag_second", "rag_first" }, seen)
    assert.same({ 0, 3, 2 }, { stat(r, 1).reads, stat(r, 2).reads, stat(r, 3).reads })
    r:close()
  end)

  it("skips a replica that cannot be reached, marks it down and tries it again after "
    .. "retry_after", function()
    need_replica()
    local dead = dead_dsn()
    local r = pg.router({ primary = DSN, replicas = { dead, REPLICA }, retry_after = 0.5 })
    -- 1st read: the dead one first, then the same read on the next replica
    assert.equal(REPLICA_PORT, read_port(r))
    local s = stat(r, 2)
    assert.same({ 0, 1, true }, { s.reads, s.failures, s.down })
    assert.is_true(s.retry_in > 0 and s.retry_in <= 0.5)
    assert.equal(1, stat(r, 3).reads)
    -- 2nd and 3rd: the live one, then the dead one's turn, skipped untried
    assert.equal(REPLICA_PORT, read_port(r))
    assert.equal(REPLICA_PORT, read_port(r))
    assert.same({ 1, true }, { stat(r, 2).failures, stat(r, 2).down })
    assert.equal(3, stat(r, 3).reads)
    socket.sleep(0.55)
    -- 4th: the live one's turn; 5th: the dead one's, tried again and failed
    assert.equal(REPLICA_PORT, read_port(r))
    assert.equal(1, stat(r, 2).failures)
    assert.equal(REPLICA_PORT, read_port(r))
    assert.same({ 2, true }, { stat(r, 2).failures, stat(r, 2).down })
    assert.same({ 0, 0 }, { stat(r, 1).reads, stat(r, 1).failures })
    r:close()
  end)

  it("reads from the primary when no replica can be reached", function()
    local r = pg.router({ primary = DSN, replicas = { dead_dsn(), dead_dsn() },
      retry_after = 60 })
    assert.equal(PRIMARY_PORT, read_port(r))
    assert.is_false(ok(r:read("SELECT pg_is_in_recovery() AS rec")).rec)
    local s = r:stats()
    assert.same({ 2, 0 }, { s[1].reads, s[1].failures })
    assert.same({ 0, 1, true }, { s[2].reads, s[2].failures, s[2].down })
    assert.same({ 0, 1, true }, { s[3].reads, s[3].failures, s[3].down })
    r:close()
  end)

  it("falls back to the primary while the replica is stopped and returns to it once it is "
    .. "back", function()
    need_replica()
    local r = pg.router({ primary = DSN, replicas = { REPLICA }, retry_after = 0.5 })
    finally(function()
      os.execute(CTL .. " start") -- harmless when it runs
      r:close()
    end)
    assert.equal(REPLICA_PORT, read_port(r))
    assert.equal(1, #r.replicas[1].pool.idle) -- an idle connection the stop will kill
    assert.truthy(os.execute(CTL .. " stop"))
    local t0 = socket.gettime()
    assert.equal(PRIMARY_PORT, read_port(r))
    assert.same({ 1, true }, { stat(r, 2).failures, stat(r, 2).down })
    assert.equal(PRIMARY_PORT, read_port(r)) -- skipped, not tried
    assert.equal(1, stat(r, 2).failures)
    assert.truthy(os.execute(CTL .. " start"))
    local wait = 0.55 - (socket.gettime() - t0)
    if wait > 0 then
      socket.sleep(wait)
    end
    assert.equal(REPLICA_PORT, read_port(r))
    assert.is_true(ok(r:read("SELECT pg_is_in_recovery() AS rec")).rec)
    local s = r:stats()
    assert.same({ 2, 0 }, { s[1].reads, s[1].failures })
    assert.same({ 3, 1, false }, { s[2].reads, s[2].failures, s[2].down })
    assert.is_nil(s[2].retry_in)
  end)

  it("applies its options to every server, under each one's own", function()
    need_replica()
    local r = pg.router({ primary = DSN, application_name = "rag_shared",
      params = { statement_timeout = "1234ms", lock_timeout = "2s" },
      replicas = { { dsn = REPLICA, application_name = "rag_own",
        params = { lock_timeout = "3s" } } } })
    local q = "SELECT current_setting('application_name') AS a, "
      .. "current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt"
    assert.same({ a = "rag_shared", st = "1234ms", lt = "2s" }, ok(r:query(q)))
    assert.same({ a = "rag_own", st = "1234ms", lt = "3s" }, ok(r:read(q)))
    r:close()
  end)

  it("configures a replica as its primary unless the router or the replica says "
    .. "otherwise", function()
    need_replica()
    -- the primary's URL says sslmode, its table application_name, pool_size
    -- and params; the router application_name and params
    local r = pg.router({ primary = { dsn = DSN .. "?sslmode=disable",
      application_name = "rag_primary", pool_size = 3,
      params = { statement_timeout = "4321ms", lock_timeout = "2s" } },
      application_name = "rag_router", params = { lock_timeout = "7s" },
      replicas = { REPLICA, REPLICA .. "?application_name=rag_url&sslmode=require" } })
    local q = "SELECT current_setting('application_name') AS a, "
      .. "current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt, "
      .. "(SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()) AS ssl"
    assert.same({ a = "rag_primary", st = "4321ms", lt = "2s", ssl = false }, ok(r:query(q)))
    assert.same({ a = "rag_router", st = "4321ms", lt = "7s", ssl = false }, ok(r:read(q)))
    assert.same({ a = "rag_url", st = "4321ms", lt = "7s", ssl = true }, ok(r:read(q)))
    assert.equal(3, r.replicas[1].pool.opts.pool_size)
    r:close()
  end)

  it("keeps passwords out of its stats", function()
    need_replica()
    local r = pg.router({ primary = DSN, replicas = { REPLICA, dead_dsn() } })
    read_port(r)
    read_port(r)
    for _, s in ipairs(r:stats()) do
      for _, v in pairs(s) do
        assert.is_nil(tostring(v):find(password_of(DSN), 1, true))
      end
    end
    r:close()
  end)

  it("runs transactions and pooled connections on the primary", function()
    local r = pg.router({ primary = DSN, replicas = { dead_dsn() } })
    local port = r:transaction(function(tx)
      return ok(tx:query("SELECT inet_server_port() AS p")).p
    end)
    assert.equal(PRIMARY_PORT, port)
    local c = assert(r:acquire())
    assert.equal(PRIMARY_PORT, ok(c:query("SELECT inet_server_port() AS p")).p)
    r:release(c)
    assert.equal(1, #r.primary.pool.idle)
    assert.same({ 0, 0 }, { stat(r, 2).failures, stat(r, 2).reads })
    r:close()
  end)

  it("raises on misuse", function()
    assert.has_error(function() pg.router({ replicas = { DSN } }) end,
      "rag.store.pg.router: 'primary' is required")
    assert.has_error(function() pg.router({ primary = DSN, replicas = DSN }) end)
    assert.has_error(function() pg.router({ primary = DSN, replicas = { 5 } }) end,
      "rag.store.pg.router: a server must be a postgres:// URL or an options table, got number")
    assert.has_error(function() pg.router({ primary = DSN, replicas = { "mysql://x" } }) end,
      "rag.store.pg.router: not a postgres:// URL")
    assert.has_error(function() pg.router({ primary = DSN, replicas = { x = DSN } }) end,
      "rag.store.pg.router: 'replicas' must be a list")
    assert.has_error(function() pg.router({ primary = DSN, retry_after = -1 }) end)
    assert.has_error(function() pg.router({ primary = DSN, host = "x" }) end)
    assert.has_error(function() pg.router({ primary = { dsn = DSN, retry_after = 1 } }) end)
    local r = pg.router({ primary = DSN })
    assert.has_error(function() r:read(5) end,
      "rag.store.pg.read: sql must be a string, got number")
    assert.has_error(function() r:read("SELECT 1", 5) end)
    r:close()
    assert.has_error(function() r:read("SELECT 1") end, "rag.store.pg.read: router is closed")
    assert.has_error(function() r:query("SELECT 1") end, "rag.store.pg.query: router is closed")
  end)
end)

describe("rag.store.pg pool:read", function()
  it("is pool:query, so that a pool stands in for a router", function()
    local pool = pg.pool({ dsn = DSN })
    assert.equal(PRIMARY_PORT, ok(pool:read("SELECT inet_server_port() AS p")).p)
    assert.equal(7, ok(pool:read("SELECT $1::int AS n", { 7 })).n)
    pool:close()
  end)
end)
