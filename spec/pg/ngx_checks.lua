-- rag.store.pg over nginx cosockets (spec/pg/run.sh serves this from
-- content_by_lua): the checks of spec/pg/client_spec.lua that differ under
-- nginx, one "ok NAME" or "FAIL NAME: why" line each.
-- luacheck: globals ngx
local pg = require("rag.store.pg")

local M = {}

local DSN = os.getenv("RAG_PG_DSN")

local function wrong(dsn)
  return (dsn:gsub("^(postgres://[^:]+:)[^@]*@", "%1not-the-password@"))
end

local checks = {}
local function check(name, fn)
  checks[#checks + 1] = { name, fn }
end

local function connect(extra)
  local o = { dsn = DSN }
  for k, v in pairs(extra or {}) do
    o[k] = v
  end
  return assert(pg.connect(o))
end

check("cosocket_scram_tls", function()
  local c = connect()
  assert(c.sock.ngx == true, "not a cosocket")
  assert(c:info().tls == true, "no TLS")
  local r = assert(c:query("SELECT current_user AS u, $1::int8 AS n, $2::jsonb AS j, "
    .. "'[1,2,3]'::vector <-> '[1,2,4]' AS d", { 42, { a = true } }))[1]
  assert(r.u == "rag" and r.n == 42 and r.j.a == true and r.d == 1, "values")
  c:close()
end)

check("cosocket_verify", function()
  local c = connect({ ssl = "verify" }) -- lua_ssl_trusted_certificate is the test CA
  assert(c:info().tls == true)
  c:close()
  local c2, _, code = pg.connect({ dsn = DSN, ssl = "verify", host = "127.0.0.2" })
  assert(c2 == nil and code == "io", "connected to a name the certificate lacks: "
    .. tostring(code))
end)

check("cosocket_md5_plain", function()
  local c = assert(pg.connect({ dsn = os.getenv("RAG_PG_MD5_DSN"), ssl = "disable" }))
  assert(c:info().tls == false)
  assert(assert(c:query("SELECT current_user AS u"))[1].u == "rag_md5")
  c:close()
end)

check("cosocket_wrong_password", function()
  local c, msg, code, state = pg.connect({ dsn = wrong(DSN) })
  assert(c == nil and code == "auth" and state == "28P01", tostring(msg))
end)

check("cosocket_errors", function()
  local c = connect({ params = { statement_timeout = "100ms" } })
  local rows, msg, code, state = c:query("SELEC 1")
  assert(not rows and code == "provider" and state == "42601", msg)
  rows, msg, code, state = c:query("SELECT pg_sleep(2)")
  assert(not rows and code == "timeout" and state == "57014", msg)
  assert(assert(c:query("SELECT 1 AS one"))[1].one == 1)
  c:close()
  c = connect({ timeout = 0.2 })
  rows, msg, code = c:query("SELECT pg_sleep(2)")
  assert(not rows and code == "timeout" and c:info().broken, tostring(msg))
end)

check("cosocket_pool_keepalive", function()
  local pool = pg.pool({ dsn = DSN })
  local p1 = assert(pool:query("SELECT pg_backend_pid() AS pid"))[1].pid
  local c = assert(pool:acquire())
  assert(c.sock.reused, "not taken from nginx's pool")
  local p2 = assert(c:query("SELECT pg_backend_pid() AS pid"))[1].pid
  pool:release(c)
  assert(p1 == p2, "another backend")
  local killer = connect()
  assert(killer:query("SELECT pg_terminate_backend($1::int, 5000)", { p1 }))
  killer:close()
  local p3 = assert(pool:query("SELECT pg_backend_pid() AS pid"))[1].pid
  assert(p3 ~= p1, "the killed connection came back")
end)

-- A pooled session keeps a statement prepared under a name made from its
-- text across requests (connection objects); a session without it (new,
-- or after DISCARD ALL) or with other result columns prepares it again.
check("cosocket_named_statements", function()
  local pool = pg.pool({ dsn = DSN, pool_size = 1 })
  local sql = "SELECT $1::int + 1 AS v, pg_backend_pid() AS pid"
  local function prepared(c)
    return assert(c:query("SELECT count(*)::int AS n FROM pg_prepared_statements WHERE "
      .. "name LIKE 'rag_n_%' AND statement = $1", { sql }))[1].n
  end
  local c = assert(pool:acquire())
  local r = assert(c:query(sql, { 1 }))[1]
  assert(r.v == 2, "first run")
  assert(prepared(c) == 1, "not prepared by name")
  pool:release(c)
  c = assert(pool:acquire())
  assert(c.sock.reused, "not taken from nginx's pool")
  local r2 = assert(c:query(sql, { 41 }))[1]
  assert(r2.v == 42 and r2.pid == r.pid, "another session or value")
  assert(prepared(c) == 1, "prepared twice")
  assert(c:exec("DISCARD ALL"))
  assert(assert(c:query(sql, { 2 }))[1].v == 3, "after DISCARD ALL")
  assert(prepared(c) == 1, "not prepared again")
  -- other result columns: a temporary table altered under the statement
  assert(c:exec("CREATE TEMP TABLE named_t (a int); INSERT INTO named_t VALUES (7)"))
  assert(assert(c:query("SELECT * FROM named_t"))[1].a == 7)
  assert(c:exec("ALTER TABLE named_t ADD COLUMN b int DEFAULT 8"))
  local row = assert(c:query("SELECT * FROM named_t"))[1]
  assert(row.a == 7 and row.b == 8, "the old columns")
  -- in a transaction a new text runs unnamed: a missing statement would abort it
  assert(c:transaction(function(tx)
    assert(tx:query("SELECT $1::int AS in_tx", { 5 }))
    return assert(tx:query("SELECT 1 AS one"))
  end))
  assert(assert(c:query("SELECT count(*)::int AS n FROM pg_prepared_statements WHERE "
    .. "statement LIKE $1", { "%AS in_tx%" }))[1].n == 0, "named inside a transaction")
  assert(c:exec("DROP TABLE named_t"))
  pool:release(c)
end)

check("cosocket_transaction", function()
  local c = connect()
  assert(c:exec("CREATE TEMP TABLE t (v int)"))
  local ok = c:transaction(function(tx)
    assert(tx:query("INSERT INTO t VALUES (1)"))
    return nil, "no", "provider"
  end)
  assert(ok == nil)
  assert(assert(c:query("SELECT count(*) AS n FROM t"))[1].n == 0)
  c:close()
end)

-- Two queries of 0.3 s in two light threads end together in well under 0.6 s.
check("cosocket_nonblocking", function()
  local t0 = ngx.now()
  local function sleeper()
    local c = connect()
    local rows, msg = c:query("SELECT pg_sleep(0.3)")
    c:close()
    return rows ~= nil, msg
  end
  local a, b = ngx.thread.spawn(sleeper), ngx.thread.spawn(sleeper)
  local _, ok1 = ngx.thread.wait(a)
  local _, ok2 = ngx.thread.wait(b)
  ngx.update_time()
  local took = ngx.now() - t0
  assert(ok1 and ok2, "a query failed")
  assert(took < 0.55, string.format("took %.3f s", took))
end)

function M.run()
  local out = {}
  for _, c in ipairs(checks) do
    local ok, err = pcall(c[2])
    out[#out + 1] = ok and ("ok " .. c[1]) or ("FAIL " .. c[1] .. ": " .. tostring(err))
  end
  return table.concat(out, "\n") .. "\n"
end

return M
