-- rag.store.postgres against a real PostgreSQL with pgvector (the cluster
-- spec/pg/run.sh starts): the behavioural suite the local index runs
-- (spec/support/index_behaviour.lua), then what only a server has: the
-- schema and its version table, reopening by URL, two writers, and faults
-- (a statement timeout, a dropped connection, a failed update that must
-- leave the old version whole).
local DSN = os.getenv("RAG_PG_DSN")

if not DSN then
  describe("rag.store.postgres against PostgreSQL", function()
    it("needs a server", function()
      pending("no PostgreSQL: RAG_PG_DSN is unset (make test-pg starts one)")
    end)
  end)
  return
end

local rag = require("rag")
local behaviour = require("spec.support.index_behaviour")

-- A table name no other run of these specs uses (runs under two
-- interpreters share the cluster).
local serial = 0
local RUN = (tostring(os.time()) .. tostring(math.random(1e6))):sub(-9)
local function fresh_table(prefix)
  serial = serial + 1
  return (prefix or "b") .. RUN .. "_" .. serial
end

local function make(o, extra)
  local so = { dsn = DSN, table = fresh_table() }
  for k, v in pairs(extra or {}) do
    so[k] = v
  end
  local c = {}
  for k, v in pairs(o) do
    c[k] = v
  end
  c.store = rag.store.postgres(so)
  return assert(rag.index.new(c))
end

behaviour.run("rag.index on rag.store.postgres", make, { describe = describe, it = it,
  setup = setup, teardown = teardown, assert = assert })
