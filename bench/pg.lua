-- bench/pg.lua: rag.store.pg on one connection over loopback, against the
-- cluster that `make bench-pg` starts (spec/pg/run.sh; RAG_PG_DSN): round
-- trips per second of a tiny statement by the extended protocol (prepared
-- once, and parsed every time), by the simple protocol and through a pool;
-- results/s of 100 rows x 3 columns; a pgvector top-10 over 2,000 seeded
-- vectors of 384 dimensions with a vector parameter; logins per second.
-- Each over TLS and plain TCP. Wall time (LuaSocket's gettime), the median
-- of 5 runs of N calls each. Never part of `make test`.
--   bash spec/pg/run.sh -- lua5.4 bench/pg.lua
local pg = require("rag.store.pg")
local socket = require("socket")

local DSN = os.getenv("RAG_PG_DSN")
if not DSN then
  print("skipped: RAG_PG_DSN is unset; run make bench-pg")
  return
end

local function median(t)
  table.sort(t)
  return t[math.floor((#t + 1) / 2)]
end

local function rate(n, fn)
  local runs = {}
  for r = 1, 5 do
    local t0 = socket.gettime()
    for i = 1, n do
      fn(i)
    end
    runs[r] = n / (socket.gettime() - t0)
  end
  return median(runs)
end

-- Park-Miller, so the vectors are the same on every run.
local seed = 42
local function rnd()
  seed = (16807 * seed) % 2147483647
  return seed / 2147483647 - 0.5
end

local function vector(dim)
  local v = {}
  for i = 1, dim do
    v[i] = math.floor(rnd() * 1e4) / 1e4
  end
  return v
end

local setup = assert(pg.connect({ dsn = DSN }))
assert(setup:exec("DROP TABLE IF EXISTS bench_vec; "
  .. "CREATE TABLE bench_vec (id int PRIMARY KEY, v vector(384))"))
assert(setup:transaction(function(tx)
  for i = 1, 2000 do
    assert(tx:query("INSERT INTO bench_vec VALUES ($1::int, $2::vector)", { i, vector(384) }))
  end
  return true
end))
assert(setup:exec("ANALYZE bench_vec"))
local queries = {}
for i = 1, 50 do
  queries[i] = vector(384)
end

print(string.format("%-44s %12s %12s", _VERSION .. (jit and " (" .. jit.version .. ")" or ""),
  "TLS", "plain TCP"))
local function row(name, f)
  local a, b = f("prefer"), f("disable")
  print(string.format("%-44s %10.0f/s %10.0f/s", name, a, b))
end

local function on(ssl, extra)
  local o = { dsn = DSN, ssl = ssl }
  for k, v in pairs(extra or {}) do
    o[k] = v
  end
  return assert(pg.connect(o))
end

row("query SELECT $1::int (prepared)", function(ssl)
  local c = on(ssl)
  return rate(5000, function(i) assert(c:query("SELECT $1::int AS x", { i })) end)
end)
row("query SELECT $1::int (prepare = false)", function(ssl)
  local c = on(ssl, { prepare = false })
  return rate(5000, function(i) assert(c:query("SELECT $1::int AS x", { i })) end)
end)
row("exec SELECT 1 (simple protocol)", function(ssl)
  local c = on(ssl)
  return rate(5000, function() assert(c:exec("SELECT 1")) end)
end)
row("pool:query SELECT $1::int", function(ssl)
  local pool = pg.pool({ dsn = DSN, ssl = ssl })
  return rate(5000, function(i) assert(pool:query("SELECT $1::int AS x", { i })) end)
end)
row("query 100 rows x (int, float8, text)", function(ssl)
  local c = on(ssl)
  return rate(500, function()
    assert(c:query("SELECT g, g::float8 / 3 AS f, 'row ' || g AS s "
      .. "FROM generate_series(1, 100) g"))
  end)
end)
row("vector top-10 of 2,000 x 384 (exact scan)", function(ssl)
  local c = on(ssl)
  return rate(100, function(i)
    local rows = assert(c:query("SELECT id, v <-> $1::vector AS d FROM bench_vec "
      .. "ORDER BY d LIMIT 10", { queries[i % #queries + 1] }))
    assert(#rows == 10)
  end)
end)
row("connect (SCRAM-SHA-256) + close", function(ssl)
  return rate(20, function()
    local c = on(ssl)
    c:close()
  end)
end)
assert(setup:exec("DROP TABLE bench_vec"))
setup:close()
