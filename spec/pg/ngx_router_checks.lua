-- rag.store.pg.router over nginx cosockets (spec/pg/run.sh serves this
-- after spec/pg/ngx_checks.lua): reads on the streaming replica in
-- RAG_PG_REPLICA_DSN, a dead replica skipped, writes on the primary, reads
-- that do not block the worker; one "ok NAME" or "FAIL NAME: why" line each.
-- luacheck: globals ngx
local pg = require("rag.store.pg")

local M = {}

local DSN = os.getenv("RAG_PG_DSN")
local REPLICA = os.getenv("RAG_PG_REPLICA_DSN")

local function port_of(dsn)
  return tonumber(dsn:match("@[^:/]+:(%d+)/"))
end

-- The primary's URL with a loopback port where nothing listens.
local function dead_dsn()
  return (DSN:gsub("@127%.0%.0%.1:%d+/", "@127.0.0.1:1/"))
end

local checks = {}
local function check(name, fn)
  checks[#checks + 1] = { name, fn }
end

local function first(rows, msg)
  assert(rows, tostring(msg))
  return rows[1]
end

check("router_cosocket_replica", function()
  assert(REPLICA, "no streaming replica (RAG_PG_REPLICA_DSN is unset)")
  local r = pg.router({ primary = DSN, replicas = { dead_dsn(), REPLICA }, retry_after = 30 })
  local q = "SELECT inet_server_port() AS p, pg_is_in_recovery() AS rec"
  for _ = 1, 3 do
    local row = first(r:read(q))
    assert(row.p == port_of(REPLICA) and row.rec == true, "a read not on the replica")
  end
  local row = first(r:query(q))
  assert(row.p == port_of(DSN) and row.rec == false, "a query not on the primary")
  local s = r:stats()
  assert(s[2].down == true and s[2].failures == 1, "the dead replica is not down once")
  assert(s[3].reads == 3 and s[1].queries == 1 and s[1].reads == 0, "counts")
  r:close()
end)

-- Two reads of 0.3 s in two light threads end together in well under 0.6 s.
check("router_cosocket_nonblocking", function()
  assert(REPLICA, "no streaming replica (RAG_PG_REPLICA_DSN is unset)")
  local r = pg.router({ primary = DSN, replicas = { REPLICA } })
  local t0 = ngx.now()
  local function sleeper()
    local rows, msg = r:read("SELECT pg_sleep(0.3)")
    return rows ~= nil, msg
  end
  local a, b = ngx.thread.spawn(sleeper), ngx.thread.spawn(sleeper)
  local _, ok1, msg1 = ngx.thread.wait(a)
  local _, ok2, msg2 = ngx.thread.wait(b)
  ngx.update_time()
  local took = ngx.now() - t0
  assert(ok1 and ok2, "a read failed: " .. tostring(msg1 or msg2))
  assert(took < 0.55, string.format("took %.3f s", took))
  assert(r:stats()[2].reads == 2, "not both on the replica")
  r:close()
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
