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

-- {====== What only a server has ======}

-- The backends of this database other than the caller's, killed.
local function terminate_others(conn)
  return assert(conn:query("SELECT count(pg_terminate_backend(pid))::integer AS n "
    .. "FROM pg_stat_activity WHERE datname = current_database() "
    .. "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"))[1].n
end

local function admin()
  return assert(require("rag.store.pg").connect({ dsn = DSN }))
end

describe("rag.store.postgres schema", function()
  it("creates its tables, indexes and a version row; reopens by URL with its settings", function()
    local t = fresh_table("s")
    local idx = make({ embedder = rag.embed.hashing({ dim = 48 }), chunk = { size = 64,
      overlap = 0 } }, { table = t, hnsw = { m = 8, ef_construction = 32 } })
    assert.are.equal("added", idx:add({ id = "d", text = "Hello schema world." }))
    local c = admin()
    local row = assert(c:query("SELECT version, settings FROM rag_schema WHERE name = $1",
      { t }))[1]
    assert.are.equal(rag.store.postgres.SCHEMA_VERSION, row.version)
    assert.are.equal(48, row.settings.dim)
    assert.are.equal("rag.hashing", row.settings.embedder.name)
    assert.are.equal("hnsw", row.settings.vector)
    local idxs = {}
    for _, r in ipairs(assert(c:query("SELECT indexname, indexdef FROM pg_indexes "
        .. "WHERE tablename IN ($1, $2)", { t .. "_chunks", t .. "_postings" }))) do
      idxs[r.indexname] = r.indexdef
    end
    assert.matches("%(lexeme, impact DESC, chunk_id%) INCLUDE %(tf, dl%)",
      idxs[t .. "_postings_lexeme"])
    assert.matches("%(chunk_id%)", idxs[t .. "_postings_chunk"])
    assert.matches("USING hnsw %(embedding vector_cosine_ops%) WITH %(m='?8'?, "
      .. "ef_construction='?32'?%)", idxs[t .. "_chunks_hnsw"])
    local col = assert(c:query("SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute "
      .. "WHERE attrelid = $1::regclass AND attname = 'embedding'", { t .. "_chunks" }))[1]
    assert.are.equal("vector(48)", col.t)
    idx:close()
    -- reopened by URL: the recorded embedder is rebuilt, the chunker's options kept
    local again = assert(rag.index.open(DSN .. "?table=" .. t))
    assert.are.equal("unchanged", again:add({ id = "d", text = "Hello schema world." }))
    assert.are.equal("d#1", again:search("schema", { mode = "vector" })[1].id)
    local st = again:stats()
    assert.are.equal("postgres", st.store)
    assert.are.equal(1, st.documents)
    again:close()
    -- a newer schema version is refused, not guessed at
    assert(c:query("UPDATE rag_schema SET version = 99 WHERE name = $1", { t }))
    local none, msg, code = rag.index.open(DSN .. "?table=" .. t)
    assert.is_nil(none)
    assert.are.equal("version", code)
    assert.matches("schema version 99", msg)
    local missing
    -- dropped: the tables and the row go, and a second drop is no error
    local gone = rag.store.postgres({ dsn = DSN, table = t })
    assert.is_true(gone:drop())
    assert.is_true(gone:drop())
    gone:close()
    assert.are.equal(0, assert(c:query("SELECT count(*)::integer AS n FROM pg_tables WHERE "
      .. "tablename LIKE $1", { t .. "%" }))[1].n)
    none, msg, code = rag.index.open(DSN .. "?table=" .. t)
    assert.is_nil(none)
    assert.are.equal("format", code)
    assert.is_string(msg)
    missing, msg, code = rag.index.open(DSN .. "?table=nosuch" .. RUN)
    assert.is_nil(missing)
    assert.are.equal("format", code)
    assert.matches("no rag index 'nosuch", msg)
    c:close()
  end)

  it("migrates a version 1 table (no term statistics, counts or postings) on open, to the "
    .. "same results", function()
    local t = fresh_table("m")
    local idx = make({ embedder = rag.embed.hashing({ dim = 16 }) }, { table = t })
    local docs = require("spec.support.index_behaviour").fixture()
    assert(idx:add_many(docs))
    local queries = { "cerebral white matter", "cancer cells", "vitamin D deficiency" }
    local before = {}
    for i, q in ipairs(queries) do
      before[i] = assert(idx:search(q, { mode = "hybrid", k = 10 }))
    end
    idx:close()
    local c = admin()
    -- version 1's tables: no term statistics, counts or postings; a GIN index
    assert(c:exec("DROP TABLE " .. t .. "_terms; DROP TABLE " .. t .. "_stats; DROP TABLE "
      .. t .. "_postings; ALTER TABLE " .. t .. "_chunks DROP COLUMN dl, DROP COLUMN tf; "
      .. "CREATE INDEX " .. t .. "_chunks_tsv ON " .. t .. "_chunks USING gin (tsv)"))
    assert(c:query("UPDATE rag_schema SET version = 1 WHERE name = $1", { t }))
    local again = assert(rag.index.open(DSN .. "?table=" .. t))
    assert.are.equal(3, assert(c:query("SELECT version FROM rag_schema WHERE name = $1",
      { t }))[1].version)
    for i, q in ipairs(queries) do
      require("spec.support.index_behaviour").same_hits(before[i],
        assert(again:search(q, { mode = "hybrid", k = 10 })), q)
    end
    again:close()
    c:close()
  end)

  it("ranks bm25 as the local index does: the same chunks and scores, with every chunk "
    .. "holding a query lexeme a candidate", function()
    local docs = behaviour.fixture()
    -- every posting read and every chunk found scored in full: exact
    local pgx = make({ embedder = false }, { candidates = { depth = 1e6, rescore = 1e6 } })
    local loc = rag.index.new({ embedder = false })
    assert(pgx:add_many(docs))
    assert(loc:add_many(docs))
    -- words the fixture repeats within a chunk, so that term counts and
    -- lengths matter, and a word repeated in the query
    local queries = { "cells cells tumour growth", "white matter diffusion in the brain" }
    for _, q in ipairs(behaviour.QUERIES) do
      queries[#queries + 1] = q
    end
    for _, q in ipairs(queries) do
      local want = assert(loc:search(q, { mode = "bm25", k = 10 }))
      behaviour.same_hits(want, assert(pgx:search(q, { mode = "bm25", k = 10 })), q)
    end
    pgx:close()
    loc:close()
  end)

  it("refuses another embedder or metric on an existing table", function()
    local t = fresh_table("e")
    local idx = make({ embedder = rag.embed.hashing({ dim = 32 }) }, { table = t })
    idx:close()
    assert.has_error(function()
      make({ embedder = rag.embed.hashing({ dim = 64 }) }, { table = t })
    end)
    assert.has_error(function()
      make({ embedder = rag.embed.hashing({ dim = 32 }), metric = "l2" }, { table = t })
    end)
    assert.has_error(function()
      rag.index.open(DSN .. "?table=" .. t, { embedder = rag.embed.hashing({ dim = 16 }) })
    end)
    assert.has_error(function() rag.store.postgres({ dsn = DSN, table = "Bad-Name" }) end)
    assert.has_error(function()
      rag.store.postgres({ dsn = DSN, candidates = { depth = 0 } })
    end, "rag.store.postgres: candidates: 'depth' must be in [1, inf]")
    assert.has_error(function()
      rag.store.postgres({ dsn = DSN, candidates = { deep = 10 } })
    end)
    assert.has_error(function()
      rag.index.new({ store = rag.store.postgres({ dsn = DSN }), hnsw = { M = 8 } })
    end, "rag.index.new: option 'hnsw' is the store's business with a store "
      .. "(rag.store.postgres{ hnsw = ... })")
  end)

  it("opens and searches without writing (a read-only session, as on a standby)", function()
    local t = fresh_table("o")
    local idx = make({ embedder = false }, { table = t })
    assert(idx:add({ id = "x", text = "read only sessions can search" }))
    idx:close()
    local ro = assert(rag.index.open(DSN .. "?table=" .. t,
      { params = { default_transaction_read_only = "on" }, readonly = true }))
    assert.are.equal("x#1", ro:search("sessions", { mode = "bm25" })[1].id)
    ro:close()
    -- creating needs writes: refused by the server, returned
    local none, msg, code = rag.index.new({ embedder = false, store = rag.store.postgres({
      dsn = DSN, table = fresh_table("o"), params = { default_transaction_read_only = "on" } }) })
    assert.is_nil(none)
    assert.is_string(msg)
    assert.is_string(code)
  end)

  it("takes the table from the URL's ?table=, and refuses two different ones", function()
    local t = fresh_table("u")
    local idx = assert(rag.index.new({ embedder = false,
      store = rag.store.postgres({ dsn = DSN .. "?table=" .. t }) }))
    assert(idx:add({ id = "u", text = "from the url" }))
    assert.are.equal(t, idx:stats().table)
    idx:close()
    assert.has_error(function()
      rag.store.postgres({ dsn = DSN .. "?table=" .. t, table = "other" })
    end)
    local ok, err = pcall(rag.index.open, DSN .. "?table=Bad-Name")
    assert.is_false(ok)
    assert.matches("store_spec%.lua:%d+: rag%.store%.postgres: option 'table' must be", err)
  end)

  it("refuses another chunker on an existing table", function()
    local t = fresh_table("k")
    make({ embedder = false, chunk = { size = 64, overlap = 0 } }, { table = t }):close()
    assert.has_error(function()
      make({ embedder = false, chunk = { size = 128, overlap = 0 } }, { table = t })
    end)
    assert.has_error(function()
      make({ embedder = false, chunker = "sentences" }, { table = t })
    end)
    make({ embedder = false, chunk = { size = 64, overlap = 0 } }, { table = t }):close()
  end)

  it("lets two index objects on one table see each other's writes, one version each", function()
    local t = fresh_table("w")
    local a = make({ embedder = false }, { table = t })
    local b = assert(rag.index.open(DSN .. "?table=" .. t))
    local docs = {}
    for i = 1, 30 do
      docs[i] = { id = "d" .. i, text = "writer text number " .. i }
    end
    assert(a:add_many(docs))
    local counts = assert(b:add_many(docs))
    assert.are.equal(30, counts.unchanged)
    local changed = {}
    for i = 1, 30 do
      changed[i] = { id = "d" .. i, text = "second version " .. i }
    end
    assert(b:add_many(changed))
    assert(a:add_many(docs)) -- back to the first version: a's view of hashes is not cached
    assert.are.equal(30, a:count())
    local c = admin()
    local n = assert(c:query("SELECT count(*)::integer AS n FROM " .. t .. "_chunks WHERE "
      .. "text LIKE 'second version%'"))[1].n
    assert.are.equal(0, n)
    c:close()
    a:close()
    b:close()
  end)
end)

describe("rag.store.postgres faults", function()
  local docs = {}
  for i = 1, 20 do
    docs[i] = { id = string.format("f%02d", i), text = "fault tolerant document number " .. i
      .. " about apples and pears" }
  end

  it("returns nil, msg, 'auth' for a wrong password, and never shows the password", function()
    local bad = DSN:gsub("(//[^:]+:)[^@]+@", "%1wrongsecret@")
    local idx, msg, code = rag.index.new({ embedder = false,
      store = rag.store.postgres({ dsn = bad, table = fresh_table("a") }) })
    assert.is_nil(idx)
    assert.are.equal("auth", code)
    assert.is_nil(msg:find("wrongsecret", 1, true))
    local opened
    opened, msg, code = rag.index.open(bad .. "&table=x")
    assert.is_nil(opened)
    assert.are.equal("auth", code)
    assert.is_nil(msg:find("wrongsecret", 1, true))
  end)

  it("a statement timeout fails the update whole; the old version stays; the pool recovers",
    function()
      local t = fresh_table("t")
      local idx = make({ embedder = rag.embed.hashing({ dim = 16 }) },
        { table = t, params = { statement_timeout = "300" } })
      assert(idx:add_many(docs))
      local before = idx:get("f05")
      -- another session holds f05's chunk: the update writes the document's
      -- row, then waits for the chunk past the timeout
      local c = admin()
      assert(c:exec("BEGIN"))
      assert(c:query("SELECT id FROM " .. t .. "_chunks WHERE doc_id = 'f05' FOR UPDATE"))
      local ok, msg, code = idx:add({ id = "f05", text = "a new version of five" })
      assert.is_nil(ok)
      assert.are.equal("timeout", code)
      assert.matches("^rag%.index%.add: ", msg)
      assert(c:exec("ROLLBACK"))
      assert.are.same(before, idx:get("f05"))
      local chunks = assert(c:query("SELECT text FROM " .. t .. "_chunks WHERE doc_id = 'f05'"))
      assert.are.equal(1, #chunks)
      assert.are.equal(before.text, chunks[1].text)
      local none, why = idx:search("new version", { mode = "bm25" })
      assert.are.equal(0, #assert(none, why))
      -- the same update goes through once the row is free
      assert.are.equal("updated", idx:add({ id = "f05", text = "a new version of five" }))
      assert.are.equal("f05#1", idx:search("new version", { mode = "bm25" })[1].id)
      c:close()
      idx:close()
    end)

  it("a connection dropped in a batch leaves earlier batches whole and the rest absent",
    function()
      local t = fresh_table("d")
      local e = rag.embed.hashing({ dim = 16 })
      local c = admin()
      local calls = 0
      local killer = { name = "killer", dim = function() return 16 end,
        embed = function(_, texts, o)
          calls = calls + 1
          if calls == 2 then -- between the first batch's commit and the second's write
            terminate_others(c)
          end
          return e:embed(texts, o)
        end }
      local idx = make({ embedder = killer, batch = 8 }, { table = t })
      local ok, msg, code = idx:add_many(docs)
      if ok then -- the pool saw the dead connection and took a new one: all in
        assert.are.equal(20, ok.added)
      else
        assert.is_string(msg)
        assert.are.equal("io", code)
      end
      local n = assert(c:query("SELECT count(*)::integer AS n FROM " .. t .. "_docs"))[1].n
      assert.is_true(n == 8 or n == 20, "documents " .. n)
      local bad = assert(c:query("SELECT count(*)::integer AS n FROM " .. t .. "_docs d WHERE "
        .. "d.nchunks <> (SELECT count(*) FROM " .. t .. "_chunks c WHERE c.doc_id = d.id)"))
      assert.are.equal(0, bad[1].n) -- no document without all its chunks
      -- the pool recovers: the rest goes in on the next call
      local counts = assert(idx:add_many(docs))
      assert.are.equal(20 - n, counts.added)
      assert.are.equal(20, idx:count())
      c:close()
      idx:close()
    end)

  it("an idle pooled connection killed by the server costs at most one failed call", function()
    local idx = make({ embedder = false })
    assert(idx:add_many(docs))
    local c = admin()
    assert.is_true(terminate_others(c) >= 1)
    local hits, msg, code = idx:search("apples", { mode = "bm25" })
    if not hits then
      assert.are.equal("io", code)
      assert.is_string(msg)
      hits = assert(idx:search("apples", { mode = "bm25" }))
    end
    assert.are.equal(10, #hits)
    c:close()
    idx:close()
  end)

  it("survives a server restart in the middle of a run", function()
    local restart = os.getenv("RAG_PG_RESTART")
    if not restart then
      pending("RAG_PG_RESTART is unset (spec/pg/run.sh sets it)")
      return
    end
    local idx = make({ embedder = rag.embed.hashing({ dim = 16 }) })
    local half = {}
    for i = 1, 10 do
      half[i] = docs[i]
    end
    assert(idx:add_many(half))
    local r = os.execute(restart .. " >/dev/null 2>&1")
    assert.is_true(r == true or r == 0, "restart: " .. restart)
    local failures = 0
    local counts, msg, code
    for _ = 1, 5 do -- each call either works or says why; none raises
      counts, msg, code = idx:add_many(docs)
      if counts then
        break
      end
      failures = failures + 1
      assert.is_string(msg)
      assert.are.equal("io", code)
    end
    assert.is_true(failures <= 1, "failures " .. failures)
    assert.are.equal(10, counts.added)
    assert.are.equal(10, counts.unchanged)
    assert.are.equal(20, idx:count())
    assert.are.equal(10, #assert(idx:search("pears", { mode = "hybrid" })))
    idx:close()
  end)
end)

describe("rag.store.postgres replicas", function()
  it("sends searches to a streaming replica once it has caught up, writes to the primary",
    function()
      local rdsn = os.getenv("RAG_PG_REPLICA_DSN")
      if not rdsn then
        error("no replica: " .. tostring(os.getenv("RAG_PG_REPLICA_ERROR")
          or "RAG_PG_REPLICA_DSN is unset (spec/pg/run.sh starts one)"))
      end
      local idx = make({ embedder = rag.embed.hashing({ dim = 16 }) },
        { table = fresh_table("r"), replicas = { rdsn }, retry_after = 0.2 })
      local docs = {}
      for i = 1, 12 do
        docs[i] = { id = "r" .. i, text = "replicated document " .. i .. " about plums" }
      end
      assert(idx:add_many(docs))
      local function reads()
        local by = {}
        for _, s in ipairs(idx.store.db:stats()) do
          by[s.role] = s.reads
        end
        return by
      end
      -- until the replica has replayed the writes, it may not have the tables yet
      local socket = require("socket")
      local hits
      for _ = 1, 100 do
        hits = idx:search("plums", { mode = "bm25", k = 20 })
        if hits and #hits == 12 then
          break
        end
        socket.sleep(0.05)
      end
      assert.are.equal(12, #hits)
      local before = reads()
      assert.is_true(before.replica > 0)
      assert.are.equal(0, before.primary or 0)
      assert.are.equal(12, #assert(idx:search("plums", { mode = "hybrid", k = 20 })))
      assert.are.equal(before.replica + 1, reads().replica)
      -- a write is the primary's; the replica sees it once replayed
      assert.are.equal("updated", idx:add({ id = "r1", text = "replicated document one "
        .. "about pears now" }))
      for _ = 1, 100 do
        local h = idx:search("pears", { mode = "bm25" })
        if h and #h == 1 then
          break
        end
        socket.sleep(0.05)
      end
      assert.are.equal("r1#1", idx:search("pears", { mode = "bm25" })[1].id)
      idx:close()
    end)
end)
