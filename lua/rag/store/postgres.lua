--- rag.store.postgres: rag.index on PostgreSQL + pgvector. The same
-- add/update/remove/sync/search API and hits as the local index; the
-- documents, their chunks, a tsvector and a vector per leaf chunk live in
-- two tables that the library creates and migrates (a version table,
-- `rag_schema`). Chunking and embedding run here, as for the local index
-- (a scratch rag.core.index cuts the documents); each batch of changes is
-- one transaction; a search is one SQL statement: full-text rank and vector
-- distance lists, each filtered, fused with RRF. See docs/postgres.md.
-- @module rag.store.postgres

local core = require("rag.core")
local opts_check = require("rag.opts").check
local pg = require("rag.store.pg")

local type, pairs, ipairs, tostring, error, setmetatable, pcall =
  type, pairs, ipairs, tostring, error, setmetatable, pcall
local concat, sort = table.concat, table.sort
local format = string.format
local floor, huge = math.floor, math.huge
local json, cindex = core.json, core.index

local M = {}

--- The schema version this library writes; older tables are migrated.
M.SCHEMA_VERSION = 3

-- A chunk's length for BM25 and its lexemes' counts above one, from the
-- positions of its tsvector `tsv` (a tsvector without positions counts
-- each lexeme once).
local DL_SQL = "(SELECT sum(coalesce(array_length(positions, 1), 1))::integer FROM unnest(tsv))"
local TF_SQL = "(SELECT jsonb_object_agg(lexeme, array_length(positions, 1)) FROM unnest(tsv) "
  .. "WHERE array_length(positions, 1) > 1)"

-- The inverted index BM25 searches: a row per lexeme of each leaf chunk,
-- with its count, the chunk's length and the term's BM25 weight (k1 1.2,
-- b 0.75) at the average length of its time, in that weight's order per
-- lexeme, so that a search reads a lexeme's best chunks first.
local function postings_sql(t)
  return {
    "CREATE TABLE " .. t .. "_postings (lexeme text COLLATE \"C\" NOT NULL, chunk_id text "
      .. "COLLATE \"C\" NOT NULL, tf integer NOT NULL, dl integer NOT NULL, impact real NOT NULL)",
    "CREATE INDEX " .. t .. "_postings_lexeme ON " .. t .. "_postings (lexeme, impact DESC, "
      .. "chunk_id) INCLUDE (tf, dl)",
    "CREATE INDEX " .. t .. "_postings_chunk ON " .. t .. "_postings (chunk_id)",
  }
end

-- Inserts into table `t` the postings of the rows of `from` (with id, tsv,
-- tf and dl), weighted at the average length `avgdl` (an SQL expression).
local function postings_insert(t, from, avgdl)
  return "INSERT INTO " .. t .. " (lexeme, chunk_id, tf, dl, impact) SELECT x.lexeme, r.id, "
    .. "x.tf, r.dl, x.tf / (x.tf + 1.2 * (0.25 + 0.75 * r.dl / a.avgdl)) FROM " .. from .. " r "
    .. "CROSS JOIN (SELECT " .. avgdl .. " AS avgdl) a CROSS JOIN LATERAL (SELECT lexeme, "
    .. "coalesce((r.tf ->> lexeme)::integer, 1) AS tf FROM unnest(tsvector_to_array(r.tsv)) "
    .. "AS lexeme) x WHERE r.tsv IS NOT NULL"
end

-- The term statistics BM25 ranks with: each lexeme's document frequency
-- among the leaf chunks, and their count and total length.
local function terms_sql(t)
  return {
    "CREATE TABLE " .. t .. "_terms (lexeme text COLLATE \"C\" PRIMARY KEY, "
      .. "df integer NOT NULL)",
    "CREATE TABLE " .. t .. "_stats (id integer PRIMARY KEY CHECK (id = 1), n bigint NOT NULL, "
      .. "len bigint NOT NULL)",
  }
end

-- Migrations from version v to v + 1: SQL with {t} for the table prefix.
local MIGRATIONS = {
  -- 1 -> 2: term statistics, counted from the chunks there are
  [1] = {
    terms_sql("{t}")[1], terms_sql("{t}")[2],
    "INSERT INTO {t}_terms (lexeme, df) SELECT word, ndoc FROM ts_stat('SELECT tsv FROM "
      .. "{t}_chunks WHERE tsv IS NOT NULL')",
    "INSERT INTO {t}_stats (id, n, len) SELECT 1, count(*), coalesce(sum(length(tsv)), 0) "
      .. "FROM {t}_chunks WHERE tsv IS NOT NULL",
  },
  -- 2 -> 3: term counts and lengths (see recount), and postings in place
  -- of the GIN index
  [2] = {
    "ALTER TABLE {t}_chunks ADD COLUMN dl integer, ADD COLUMN tf jsonb",
    "UPDATE {t}_chunks SET dl = " .. DL_SQL .. ", tf = " .. TF_SQL .. " WHERE tsv IS NOT NULL",
    "recount",
    "UPDATE {t}_stats SET len = (SELECT coalesce(sum(dl), 0) FROM {t}_chunks "
      .. "WHERE tsv IS NOT NULL)",
    "DROP INDEX IF EXISTS {t}_chunks_tsv",
    postings_sql("{t}")[1], postings_sql("{t}")[2], postings_sql("{t}")[3],
    postings_insert("{t}_postings", "{t}_chunks",
      "(SELECT greatest(len::float8 / greatest(n, 1), 1) FROM {t}_stats)"),
  },
}

local STORE = {
  table = { "string", default = "rag" },
  dim = { "number", int = true, min = 1, max = 16000 },
  language = { "string", default = "rag" },
  hnsw = { "table" },
  replicas = { "table" },
  retry_after = { "number", above = 0 },
  candidates = { "table" },
}

-- How far a BM25 search reads each lexeme's postings, best first, and how
-- many of the chunks found it scores in full (each at least fetch_k).
local CANDIDATES = {
  depth = { "number", int = true, min = 1, default = 200 },
  rescore = { "number", int = true, min = 1, default = 100 },
}

local HNSW = {
  m = { "number", int = true, min = 2, max = 100, default = 16 },
  ef_construction = { "number", int = true, min = 4, max = 1000, default = 64 },
  ef_search = { "number", int = true, min = 1, max = 1000, default = 40 },
}

-- pgvector's operator and operator class per metric; the score a distance gives.
local METRICS = {
  cosine = { op = "<=>", class = "vector_cosine_ops", score = "1 - %s" },
  dot = { op = "<#>", class = "vector_ip_ops", score = "-(%s)" },
  l2 = { op = "<->", class = "vector_l2_ops", score = "-(%s)" },
}

local Store = {}
Store.__index = Store

local function fail(code, fname, fmt, ...)
  return nil, fname .. ": " .. format(fmt, ...), code
end

--- A PostgreSQL store: where a rag.index keeps its documents. Takes the
-- connection options of `rag.store.pg.pool` (`dsn` or `host`, `port`,
-- `user`, `password`, `database`, `ssl`, `pool_size`, `timeout`, ...) and
-- `table` (the tables' name prefix, default "rag"), `dim` (needed when the
-- embedder has no :dim()), `language` (the text search configuration,
-- "english"), `hnsw` (`m`, `ef_construction`, `ef_search`), `candidates`
-- (`depth`, `rescore`: how a BM25 search finds its chunks), `replicas` (a
-- list of DSNs or option tables searches go to) and `retry_after`.
-- Connects on first use.
-- @tparam table opts
-- @return store
--- A connection URL without its `table` query parameter (the store's, not
-- the server's), and that table name (nil when it has none).
-- @tparam string dsn
-- @treturn string, string|nil
function M.split_url(dsn)
  local base, query = dsn:match("^([^?]*)%??(.*)$")
  local rest, tbl = {}, nil
  for pair in query:gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    if k == "table" then
      tbl = v
    else
      rest[#rest + 1] = pair
    end
  end
  return base .. (#rest > 0 and ("?" .. concat(rest, "&")) or ""), tbl
end

function M.new(opts, level)
  local fname = "rag.store.postgres"
  level = (level or 1) + 1
  if type(opts) ~= "table" then
    error(fname .. ": options must be a table, got " .. type(opts), level)
  end
  local mine, conn = {}, {}
  for k, v in pairs(opts) do
    if STORE[k] then
      mine[k] = v
    else
      conn[k] = v
    end
  end
  if type(conn.dsn) == "string" then
    local tbl
    conn.dsn, tbl = M.split_url(conn.dsn)
    if tbl and mine.table and tbl ~= mine.table then
      error(fname .. ": the URL's table '" .. tbl .. "' differs from option 'table' '"
        .. tostring(mine.table) .. "'", level)
    end
    mine.table = mine.table or tbl
  end
  local o = opts_check(fname, mine, STORE, level)
  if not o.table:find("^[a-z_][a-z0-9_]*$") or #o.table > 40 then
    error(fname .. ": option 'table' must be a lowercase SQL name of at most 40 characters "
      .. "([a-z_][a-z0-9_]*), got '" .. o.table .. "'", level)
  end
  if not o.language:find("^[%w_]+$") then
    error(fname .. ": option 'language' must be \"rag\" or a text search configuration name",
      level)
  end
  o.hnsw = opts_check(fname .. ": hnsw", o.hnsw or {}, HNSW, level)
  o.candidates = opts_check(fname .. ": candidates", o.candidates or {}, CANDIDATES, level)
  conn.params = conn.params or {}
  local params = {}
  for k, v in pairs(conn.params) do
    params[k] = v
  end
  -- a filtered HNSW scan goes on until it has the rows asked for (pgvector 0.8)
  params["hnsw.iterative_scan"] = params["hnsw.iterative_scan"] or "strict_order"
  params["hnsw.ef_search"] = params["hnsw.ef_search"] or tostring(o.hnsw.ef_search)
  -- a search is a few milliseconds: JIT compiling it (which the planner's
  -- guesses about the statistics' rows can trigger) costs a hundred times more
  params.jit = params.jit or "off"
  -- a search's plan does not depend on its values: planning it once per
  -- connection rather than per run saves a sixth of a hybrid search
  params.plan_cache_mode = params.plan_cache_mode or "force_generic_plan"
  conn.params = params
  local db
  if o.replicas then
    if type(pg.router) ~= "function" then
      error(fname .. ": option 'replicas' needs rag.store.pg.router", 2)
    end
    local primary = {}
    for k, v in pairs(conn) do
      primary[k] = v
    end
    db = pg.router({ primary = primary, replicas = o.replicas, retry_after = o.retry_after })
  else
    db = pg.pool(conn)
  end
  local t = o.table
  return setmetatable({ o = o, db = db, docs = t .. "_docs", chunks = t .. "_chunks",
    ef_search = tonumber(params["hnsw.ef_search"]) or o.hnsw.ef_search,
    terms = t .. "_terms", stats = t .. "_stats", postings = t .. "_postings", name = t },
    Store)
end

setmetatable(M, { __call = function(_, opts) return M.new(opts, 2) end })

-- Searches go to a replica when the store has them.
function Store:read(sql, params)
  local db = self.db
  if db.read then
    return db:read(sql, params)
  end
  return db:query(sql, params)
end

--- Drops the store's index: its tables and its row of rag_schema, in one
-- transaction (nothing to drop is not an error). @return true | nil, msg, code
function Store:drop()
  local t = self.name
  return self.db:transaction(function(c)
    local ok, msg, code = c:exec("DROP TABLE IF EXISTS " .. self.chunks .. ", " .. self.docs
      .. ", " .. self.terms .. ", " .. self.stats .. ", " .. self.postings)
    if not ok then
      return nil, msg, code
    end
    ok, msg, code = c:query("SELECT to_regclass('rag_schema') IS NOT NULL AS here")
    if ok and ok[1].here then
      ok, msg, code = c:query("DELETE FROM rag_schema WHERE name = $1", { t })
    end
    if not ok then
      return nil, msg, code
    end
    return true
  end)
end

--- Closes the store's connections.
function Store:close()
  self.db:close()
end

-- {====== Schema ======}

-- A number of the settings row, nil for JSON null.
local function num(x)
  return type(x) == "number" and x or nil
end

local function schema_sql(self, s)
  local docs, chunks, t = self.docs, self.chunks, self.name
  local dim = num(s.dim)
  local list = {
    "CREATE TABLE " .. docs .. " (id text COLLATE \"C\" PRIMARY KEY, hash text NOT NULL, "
      .. "text text NOT NULL, source text, title text, meta jsonb NOT NULL, "
      .. "nchunks integer NOT NULL, updated timestamptz NOT NULL DEFAULT now())",
    "CREATE TABLE " .. chunks .. " (id text COLLATE \"C\" PRIMARY KEY, doc_id text COLLATE \"C\" "
      .. "NOT NULL REFERENCES " .. docs .. " (id) ON DELETE CASCADE, n integer NOT NULL, "
      .. "start integer NOT NULL, stop integer NOT NULL, tokens integer NOT NULL, "
      .. "leaf boolean NOT NULL, parent integer NOT NULL, level integer NOT NULL, "
      .. "text text NOT NULL, meta jsonb NOT NULL, tsv tsvector, dl integer, tf jsonb"
      .. (dim and (", embedding vector(" .. dim .. ")") or "") .. ")",
    "CREATE INDEX " .. t .. "_chunks_doc ON " .. chunks .. " (doc_id, n)",
    terms_sql(t)[1], terms_sql(t)[2],
    postings_sql(t)[1], postings_sql(t)[2], postings_sql(t)[3],
    "INSERT INTO " .. t .. "_stats (id, n, len) VALUES (1, 0, 0)",
  }
  return list
end

-- The HNSW index of the vectors: made after the first writes, not with
-- the table, since building it over rows already there is ten times
-- faster than growing it row by row during a bulk load.
local function hnsw_sql(self, s)
  return format("CREATE INDEX IF NOT EXISTS %s_chunks_hnsw ON %s USING hnsw (embedding %s) "
    .. "WITH (m = %d, ef_construction = %d)", self.name, self.chunks, METRICS[s.metric].class,
    s.hnsw.m, s.hnsw.ef_construction)
end

-- The settings row of an existing index, read without writing (a role
-- that may only read, a standby): settings, version | nil, msg, code.
local function read_schema(self, fname)
  local rows, msg, code, state = self.db:query("SELECT version, settings FROM "
    .. "rag_schema WHERE name = $1", { self.name })
  if not rows then
    if state == "42P01" then -- no rag_schema table: no index in this database
      return fail("format", fname, "no rag index '%s' in this database", self.name)
    end
    return nil, msg, code
  end
  if not rows[1] then
    return fail("format", fname, "no rag index '%s' in this database", self.name)
  end
  return rows[1].settings, rows[1].version
end

-- PostgreSQL refuses longer lexemes.
local MAX_LEXEME = 2046

-- The terms rag's analyzer finds in a text (what the local index's BM25
-- indexes): the distinct ones in order, each one's count, and the count
-- of all (the text's length for BM25) | nil, msg, code.
local function terms_of(text)
  local list, msg, code = require("rag.text").tokenize(text)
  if not list then
    return nil, msg, code
  end
  local tf, out, n = {}, {}, 0
  for _, t in ipairs(list) do
    if #t <= MAX_LEXEME then
      n = n + 1
      if tf[t] then
        tf[t] = tf[t] + 1
      else
        tf[t] = 1
        out[#out + 1] = t
      end
    end
  end
  return out, tf, n
end

-- A tsvector literal of the terms (no positions: the counts are in the
-- chunk's tf column).
local function tsvector_literal(terms)
  local out = {}
  for i, t in ipairs(terms) do
    out[i] = "'" .. t:gsub("\\", "\\\\"):gsub("'", "''") .. "'"
  end
  return concat(out, " ")
end

-- The counts above one, as a JSON object (nil when every term is once).
local function tf_object(terms, tf)
  local o
  for _, t in ipairs(terms) do
    if tf[t] > 1 then
      o = o or {}
      o[t] = tf[t]
    end
  end
  return o and json.object(o)
end

-- Counts again, with rag's analyzer, the terms of every leaf chunk of a
-- table written before version 3 (whose tsvectors have no counts), in
-- batches on the migrating connection `c` | nil, msg, code.
local function recount(c, t)
  local last = ""
  while true do
    local rows, msg, code = c:query("SELECT c.id, c.text, d.title FROM " .. t .. "_chunks c "
      .. "JOIN " .. t .. "_docs d ON d.id = c.doc_id WHERE c.tsv IS NOT NULL AND c.id > $1 "
      .. "ORDER BY c.id LIMIT 1000", { last })
    if not rows then
      return nil, msg, code
    end
    if #rows == 0 then
      return true
    end
    local out = {}
    for i, r in ipairs(rows) do
      local title = r.title ~= pg.null and r.title or ""
      local terms, tf, n = terms_of(title ~= "" and (title .. "\n" .. r.text) or r.text)
      if not terms then
        return nil, tf, n
      end
      out[i] = { id = r.id, dl = n, tf = tf_object(terms, tf) }
      last = r.id
    end
    rows, msg, code = c:query("UPDATE " .. t .. "_chunks c SET dl = x.dl, tf = x.tf FROM "
      .. "jsonb_to_recordset($1::jsonb) AS x(id text, dl integer, tf jsonb) WHERE c.id = x.id",
      { json.encode(out) })
    if not rows then
      return nil, msg, code
    end
  end
end

-- Creates or migrates the tables (under an advisory lock, so that two
-- processes creating one store wait for each other); returns the settings
-- row's settings (a table) or nil for a new store | nil, msg, code.
-- Opening (no `want`) only reads, unless the tables need a migration.
local function ensure_schema(self, fname, want)
  if not want then
    local s, version, code = read_schema(self, fname)
    if not s then
      return nil, version, code
    end
    if version > M.SCHEMA_VERSION then
      return fail("version", fname, "index '%s' has schema version %d, newer than this "
        .. "library's %d", self.name, version, M.SCHEMA_VERSION)
    end
    if version == M.SCHEMA_VERSION then
      return s
    end
  end
  return self.db:transaction(function(c)
    local ok, msg, code = c:query("SELECT pg_advisory_xact_lock(7291, 1)")
    if not ok then
      return nil, msg, code
    end
    ok, msg, code = c:exec("CREATE EXTENSION IF NOT EXISTS vector; "
      .. "CREATE TABLE IF NOT EXISTS rag_schema (name text COLLATE \"C\" PRIMARY KEY, "
      .. "version integer NOT NULL, settings jsonb NOT NULL, "
      .. "created timestamptz NOT NULL DEFAULT now())")
    if not ok then
      return nil, msg, code
    end
    local rows
    rows, msg, code = c:query("SELECT version, settings FROM rag_schema WHERE name = $1",
      { self.name })
    if not rows then
      return nil, msg, code
    end
    local row = rows[1]
    if not row then
      if not want then
        return fail("format", fname, "no rag index '%s' in this database", self.name)
      end
      for _, sql in ipairs(schema_sql(self, want)) do
        ok, msg, code = c:exec(sql)
        if not ok then
          return nil, msg, code
        end
      end
      ok, msg, code = c:query("INSERT INTO rag_schema (name, version, settings) "
        .. "VALUES ($1, $2, $3::jsonb)", { self.name, M.SCHEMA_VERSION, json.encode(want) })
      if not ok then
        return nil, msg, code
      end
      return want
    end
    if row.version > M.SCHEMA_VERSION then
      return fail("version", fname, "index '%s' has schema version %d, newer than this "
        .. "library's %d", self.name, row.version, M.SCHEMA_VERSION)
    end
    for v = row.version, M.SCHEMA_VERSION - 1 do
      for _, sql in ipairs(MIGRATIONS[v]) do
        if sql == "recount" then
          local lang = row.settings.language
          ok, msg, code = true, nil, nil
          if lang == nil or lang == "rag" then
            ok, msg, code = recount(c, self.name)
          end
        else
          ok, msg, code = c:exec((sql:gsub("{t}", self.name)))
        end
        if not ok then
          return nil, msg, code
        end
      end
    end
    if row.version < M.SCHEMA_VERSION then
      ok, msg, code = c:query("UPDATE rag_schema SET version = $2 WHERE name = $1",
        { self.name, M.SCHEMA_VERSION })
      if not ok then
        return nil, msg, code
      end
    end
    return row.settings
  end)
end

-- {====== The index over a store ======}

local P -- the class of an index over PostgreSQL: rag.index's Index, these overriding

local function index_class()
  if not P then
    local Index = require("rag.index")._Index
    P = setmetatable({}, Index) -- Index.__index is Index: what P lacks, Index has
    for k, v in pairs(M._methods) do
      P[k] = v
    end
    P.__index = P
    P.__len = P.count
    P.__close = P.close
    P.__tostring = M._methods.__tostring
  end
  return P
end

-- What the settings row records: what a reopening checks and rebuilds.
local function record(o, edesc, dim, store)
  local chunk = {}
  for k, v in pairs(o.chunk) do
    if k == "tokenizer" and type(v) ~= "string" then
      local ok, info = pcall(function() return v:info() end)
      v = ok and info and info.name or "custom"
    end
    chunk[k] = v
  end
  return {
    chunker = { name = o.chunker_name, options = json.object(chunk) },
    embedder = edesc or false,
    dim = dim or json.null,
    metric = o.metric,
    vector = dim and (o.vector == "exact" and "exact" or "hnsw") or "none",
    language = store.o.language,
    hnsw = json.object({ m = store.o.hnsw.m, ef_construction = store.o.hnsw.ef_construction }),
  }
end

local function new_index(store, o, edesc, s, readonly)
  local scratch = cindex.new(core.bm25.new({}), nil)
  local idx = setmetatable({ c = scratch, o = o, embedder = o.embedder or nil, edesc = edesc,
    readonly = readonly or false, gen = 0, store = store, settings = s,
    dim = num(s.dim) }, index_class())
  idx.metric = METRICS[s.metric or "cosine"] and (s.metric or "cosine") or "cosine"
  return idx
end

--- rag.index.new{ store = ... }: opens or creates the store's tables with
-- the index's settings (a store created by another embedder or chunker
-- raises). Called by rag.index.new.
function Store:index(o, edesc, _)
  local fname = "rag.index.new"
  local dim = (edesc and edesc.dim) or self.o.dim
  if o.embedder and not dim then
    error(fname .. ": the store needs option 'dim' when the embedder has no :dim()", 3)
  end
  if dim and self.o.dim and dim ~= self.o.dim then
    error(fname .. ": the embedder's dim " .. dim .. " differs from the store's dim "
      .. self.o.dim, 3)
  end
  if not o.embedder then
    dim = nil
  end
  local want = record(o, edesc, dim, self)
  local s, msg, code = ensure_schema(self, fname, want)
  if not s then
    return nil, msg, code
  end
  local function chunking(x)
    local ch = x.chunker or {}
    return json.encode({ ch.name or json.null, json.object(ch.options or {}) })
  end
  if chunking(s) ~= chunking(want) then
    error(fname .. ": the store's index '" .. self.name .. "' was made with chunker "
      .. chunking(s) .. "; this index asks for " .. chunking(want) .. " (open it with "
      .. "rag.index.open(url) to use its own, or use another table)", 3)
  end
  local got, wanted = s.embedder or false, want.embedder
  if (got and got.name) ~= (wanted and wanted.name) or num(s.dim) ~= num(want.dim)
      or s.metric ~= want.metric or s.language ~= want.language then
    error(fname .. ": the store's index '" .. self.name .. "' was made with "
      .. (got and (got.name .. "/" .. tostring(s.dim)) or "no embedder") .. ", metric "
      .. tostring(s.metric) .. ", language " .. tostring(s.language) .. "; this index asks for "
      .. (wanted and (wanted.name .. "/" .. tostring(want.dim)) or "no embedder") .. ", metric "
      .. want.metric .. ", language " .. want.language, 3)
  end
  return new_index(self, o, edesc, s)
end

--- rag.index.open("postgres://...?table=name", opts): the index a store
-- holds, with its recorded settings; `opts` as rag.index.open's plus the
-- store's options (`hnsw`, `replicas`, `pool_size`, ...).
function M.open(dsn, opts, lib)
  local fname = "rag.index.open"
  if opts ~= nil and type(opts) ~= "table" then
    error(fname .. ": options must be a table, got " .. type(opts), 3)
  end
  local so, io = { dsn = dsn }, {}
  local INDEX_KEYS = { readonly = true, embedder = true, chunker = true, chunk = true,
    batch = true }
  for k, v in pairs(opts or {}) do
    if INDEX_KEYS[k] then
      io[k] = v
    else
      so[k] = v
    end
  end
  local store = M.new(so, 3)
  local s, msg, code = ensure_schema(store, fname, nil)
  if not s then
    store:close()
    return nil, msg, code
  end
  local edesc = s.embedder or nil
  local embedder = io.embedder
  if embedder == nil then
    embedder = lib.rebuild(edesc) or false
  elseif embedder then
    lib.check_embedder(fname, embedder)
    local d = lib.describe(embedder)
    if not edesc or d.name ~= edesc.name or (d.dim and edesc.dim and d.dim ~= edesc.dim)
        or (d.config and edesc.config and not lib.same(d.config, edesc.config)) then
      store:close()
      error(fname .. ": the embedder " .. d.name .. (d.dim and ("/" .. d.dim) or "")
        .. " differs from the one the index was built with: "
        .. (edesc and (edesc.name .. (edesc.dim and ("/" .. edesc.dim) or "")) or "none"), 3)
    end
  end
  local ch = s.chunker or {}
  local o = { embedder = embedder, chunker = io.chunker or ch.name or "recursive",
    chunk = io.chunk or ch.options, metric = s.metric, batch = io.batch,
    vector = s.vector == "exact" and "exact" or "auto" }
  if type(o.chunker) == "string" and not core.chunk[o.chunker] then
    o.chunker = "recursive"
  end
  if o.chunk and o.chunk.tokenizer == "custom" then
    o.chunk.tokenizer = nil
  end
  o = lib.settings(fname, o)
  if not io.chunker and ch.name then
    o.chunker_name = ch.name
  end
  return new_index(store, o, edesc, s, io.readonly)
end

-- {====== Writing ======}

local methods = {}
M._methods = methods

local function check_live(self, fname)
  if self.c == nil then
    error(fname .. ": index is closed", 3)
  end
end

-- The stored hashes of ids: { [id] = hash } | nil, msg, code.
local function stored_hashes(self, ids)
  local rows, msg, code = self.store.db:query("SELECT id, hash FROM " .. self.store.docs
    .. " WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb))", { json.encode(ids) })
  if not rows then
    return nil, msg, code
  end
  local h = {}
  for _, r in ipairs(rows) do
    h[r.id] = r.hash
  end
  return h
end

-- Reads list[pos .. pos + limit - 1], keeps the documents whose content
-- hash differs from the stored one and stages them in the scratch index.
-- Returns how many it read and how many were unchanged, the batch (nil
-- when nothing changed) and the scratch index | nil, msg, code.
function methods:stage(list, pos, limit, fname)
  local last = math.min(#list, pos + limit - 1)
  local ids, hashes, docs = {}, {}, {}
  for i = pos, last do
    local d = list[i]
    local h = cindex.hash(d, fname) -- raises for a bad document, as a local add does
    local id = tostring(d.id)
    ids[#ids + 1], hashes[#hashes + 1], docs[#docs + 1] = id, h, d
  end
  local stored, msg, code = stored_hashes(self, ids)
  if not stored then
    return nil, msg, code
  end
  local changed, unchanged = {}, 0
  self.pending = {}
  for i, id in ipairs(ids) do
    if stored[id] == hashes[i] then
      unchanged = unchanged + 1
    else
      changed[#changed + 1] = docs[i]
      self.pending[id] = { doc = docs[i], existed = stored[id] ~= nil }
    end
  end
  local n = last - pos + 1
  if #changed == 0 then
    return n, unchanged, nil, self.c
  end
  local _, _, batch = self.c:stage(changed, 1, #changed, fname)
  return n, unchanged, batch, self.c
end

-- pgvector's text form of a vector (a packed float32 string or a list).
local vector_text = core.vec.text

-- Deletes the chunks of the documents in the JSON list $1 and takes them
-- out of the term statistics: one statement.
local function delete_chunks_sql(st)
  return "WITH del AS (DELETE FROM " .. st.chunks .. " WHERE doc_id IN (SELECT "
    .. "jsonb_array_elements_text($1::jsonb)) RETURNING id, tsv, dl), "
    .. "p AS (DELETE FROM " .. st.postings .. " WHERE chunk_id IN (SELECT id FROM del WHERE "
    .. "tsv IS NOT NULL) RETURNING 1), "
    .. "d AS (SELECT lexeme, count(*) AS n FROM del, unnest(tsvector_to_array(del.tsv)) "
    .. "AS lexeme WHERE del.tsv IS NOT NULL GROUP BY lexeme), "
    .. "u AS (UPDATE " .. st.terms .. " t SET df = t.df - d.n FROM d WHERE t.lexeme = d.lexeme "
    .. "RETURNING 1) "
    .. "UPDATE " .. st.stats .. " SET n = n - (SELECT count(*) FROM del WHERE tsv IS NOT NULL), "
    .. "len = len - (SELECT coalesce(sum(dl), 0) FROM del WHERE tsv IS NOT NULL)"
end

-- Writes a chunked batch (and the leaves' vectors) in one transaction:
-- each document replaces its old row and chunks. Returns added, updated.
function methods:put(c, batch, vectors, fname)
  local staged = c:staged(batch)
  local st = self.store
  local lang = self.settings.language
  local own_terms = lang == "rag"
  local drows, crows, ids = {}, {}, {}
  local at, added, updated = 0, 0, 0
  for _, s in ipairs(staged) do
    local p = self.pending[s.id]
    local d = p.doc
    local title = d.title
    ids[#ids + 1] = s.id
    drows[#drows + 1] = { id = s.id, hash = s.hash, text = d.text, source = d.source,
      title = title, meta = json.object(s.meta), nchunks = #s.chunks }
    if p.existed then
      updated = updated + 1
    else
      added = added + 1
    end
    for n, ch in ipairs(s.chunks) do
      local text = d.text:sub(ch.start, ch.stop)
      local row = { id = s.id .. "#" .. n, doc_id = s.id, n = n, start = ch.start,
        stop = ch.stop, tokens = ch.tokens, leaf = ch.leaf, parent = ch.parent,
        level = ch.level, text = text, meta = json.object(s.meta) }
      if ch.leaf then
        row.ftext = (title and title ~= "") and (title .. "\n" .. text) or text
        if own_terms then -- rag's analyzer: the lexemes made here
          local terms, tf, count = assert(terms_of(row.ftext))
          row.tsv, row.tf, row.dl = tsvector_literal(terms), tf_object(terms, tf), count
          row.ftext = nil
        end
        if vectors then
          at = at + 1
          if self.dim then
            row.embedding = vector_text(vectors[at])
          end
        end
      end
      crows[#crows + 1] = row
    end
  end
  local dj, cj, ij = json.encode(drows), json.encode(crows), json.encode(ids)
  local ok, msg, code = st.db:transaction(function(conn)
    local r, m, k = conn:query("INSERT INTO " .. st.docs .. " (id, hash, text, source, title, "
      .. "meta, nchunks) SELECT x.id, x.hash, x.text, x.source, x.title, x.meta, x.nchunks "
      .. "FROM jsonb_to_recordset($1::jsonb) AS x(id text, hash text, text text, source text, "
      .. "title text, meta jsonb, nchunks integer) ORDER BY x.id ON CONFLICT (id) DO UPDATE "
      .. "SET hash = EXCLUDED.hash, text = EXCLUDED.text, source = EXCLUDED.source, "
      .. "title = EXCLUDED.title, meta = EXCLUDED.meta, nchunks = EXCLUDED.nchunks, "
      .. "updated = now()", { dj })
    if not r then
      return nil, m, k
    end
    r, m, k = conn:query(delete_chunks_sql(st), { ij })
    if not r then
      return nil, m, k
    end
    -- the new chunks, and their lexemes into the statistics (in lexeme
    -- order, so that two writers lock the rows they share in one order)
    r, m, k = conn:query("WITH x AS (SELECT x.*, CASE WHEN x.leaf THEN "
      .. (own_terms and "x.tsv::tsvector" or "to_tsvector($2::regconfig, x.ftext)") .. " END AS v "
      .. "FROM jsonb_to_recordset($1::jsonb) AS x(id text, doc_id text, n integer, "
      .. "start integer, stop integer, tokens integer, leaf boolean, parent integer, "
      .. "level integer, text text, ftext text, tsv text, dl integer, tf jsonb, meta jsonb, "
      .. "embedding text)), "
      .. "ins AS (INSERT INTO " .. st.chunks .. " (id, doc_id, n, start, "
      .. "stop, tokens, leaf, parent, level, text, meta, tsv, dl, tf"
      .. (self.dim and ", embedding" or "")
      .. ") SELECT x.id, x.doc_id, x.n, x.start, x.stop, x.tokens, x.leaf, x.parent, x.level, "
      .. "x.text, x.meta, x.v, "
      .. (own_terms and "x.dl, x.tf" or (DL_SQL:gsub("tsv", "x.v") .. ", "
        .. TF_SQL:gsub("tsv", "x.v")))
      .. (self.dim and ", x.embedding::vector" or "")
      .. " FROM x RETURNING id, tsv, tf, dl), "
      .. "p AS (" .. postings_insert(st.postings, "ins", "(SELECT greatest((s.len + "
        .. "(SELECT coalesce(sum(dl), 0) FROM ins WHERE tsv IS NOT NULL))::float8 / greatest(s.n "
        .. "+ (SELECT count(*) FROM ins WHERE tsv IS NOT NULL), 1), 1) FROM " .. st.stats
        .. " s WHERE s.id = 1)") .. " RETURNING 1), "
      .. "d AS (SELECT lexeme, count(*) AS n FROM ins, unnest(tsvector_to_array(ins.tsv)) "
      .. "AS lexeme WHERE ins.tsv IS NOT NULL GROUP BY lexeme), "
      .. "u AS (INSERT INTO " .. st.terms .. " AS t (lexeme, df) SELECT lexeme, n FROM d "
      .. "ORDER BY lexeme ON CONFLICT (lexeme) DO UPDATE SET df = t.df + EXCLUDED.df "
      .. "RETURNING 1) "
      .. "UPDATE " .. st.stats .. " SET n = n + (SELECT count(*) FROM ins WHERE tsv IS NOT NULL), "
      .. "len = len + (SELECT coalesce(sum(dl), 0) FROM ins WHERE tsv IS NOT NULL)",
      own_terms and { cj } or { cj, lang })
    if not r then
      return nil, m, k
    end
    return true
  end)
  self.pending = nil
  if not ok then
    return nil, fname .. ": " .. tostring(msg):gsub("^rag%.store%.pg%.[%w_]+: ", ""), code
  end
  return added, updated
end

-- Removes the documents of the list `ids` and their chunks, in one
-- transaction (the chunks first, out of the term statistics); returns how
-- many documents there were.
local function remove_docs(self, fname, ids)
  local st = self.store
  local list = json.encode(ids)
  local n, msg, code = st.db:transaction(function(conn)
    local r, m, k = conn:query(delete_chunks_sql(st), { list })
    if not r then
      return nil, m, k
    end
    r, m, k = conn:query("DELETE FROM " .. st.docs .. " WHERE id IN (SELECT "
      .. "jsonb_array_elements_text($1::jsonb))", { list })
    if not r then
      return nil, m, k
    end
    return r.affected
  end)
  if not n then
    return nil, fname .. ": " .. tostring(msg):gsub("^rag%.store%.pg%.[%w_]+: ", ""), code
  end
  return n
end

-- After an add or a bulk load: the HNSW index, once, when the store
-- keeps vectors in one and it is not there yet. true | nil, msg, code
function methods:finish()
  local s = self.settings
  if self.hnsw_ready or not self.dim or s.vector ~= "hnsw" then
    return true
  end
  local st = self.store
  local ok, msg, code = st.db:exec(hnsw_sql(st, { metric = s.metric,
    hnsw = { m = num(s.hnsw and s.hnsw.m) or st.o.hnsw.m,
      ef_construction = num(s.hnsw and s.hnsw.ef_construction) or st.o.hnsw.ef_construction } }))
  if not ok then
    return nil, "rag.index.add: " .. tostring(msg):gsub("^rag%.store%.pg%.[%w_]+: ", ""), code
  end
  self.hnsw_ready = true
  return true
end

--- Removes a document and its chunks, in one transaction.
-- @return boolean | nil, msg, code
function methods:remove(id)
  check_live(self, "rag.index.remove")
  if self.readonly then
    error("rag.index.remove: index is read-only", 2)
  end
  local sid = type(id) == "number" and tostring(id) or id
  if type(sid) ~= "string" then
    error("rag.index.remove: id must be a string or a number, got " .. type(id), 2)
  end
  local n, msg, code = remove_docs(self, "rag.index.remove", { sid })
  if not n then
    return nil, msg, code
  end
  return n > 0
end

-- Removes the documents of the list `ids` (sync's end), in one transaction.
function methods:remove_all(ids)
  if #ids == 0 then
    return true
  end
  local n, msg, code = remove_docs(self, "rag.index.sync", ids)
  if not n then
    return nil, msg, code
  end
  return true
end

-- {====== Reading ======}

--- The document ids, sorted bytewise. @return table | nil, msg, code
function methods:ids()
  check_live(self, "rag.index.ids")
  local rows, msg, code = self.store:read("SELECT id FROM " .. self.store.docs
    .. " ORDER BY id")
  if not rows then
    return nil, msg, code
  end
  local t = {}
  for i, r in ipairs(rows) do
    t[i] = r.id
  end
  return t
end

--- The document `id` as `{ id, text, source, title, meta, chunks }`, or nil.
function methods:get(id)
  check_live(self, "rag.index.get")
  local sid = type(id) == "number" and tostring(id) or id
  if type(sid) ~= "string" then
    error("rag.index.get: id must be a string or a number, got " .. type(id), 2)
  end
  local rows, msg, code = self.store:read("SELECT id, text, source, title, meta, nchunks FROM "
    .. self.store.docs .. " WHERE id = $1", { sid })
  if not rows then
    return nil, msg, code
  end
  local r = rows[1]
  if not r then
    return nil
  end
  local null = pg.null
  return { id = r.id, text = r.text, source = r.source ~= null and r.source or nil,
    title = r.title ~= null and r.title or nil, meta = r.meta, chunks = r.nchunks }
end

local CHUNK_COLS = "c.id, c.doc_id, c.start, c.stop, c.leaf, c.level, c.parent, c.text, "
  .. "d.source, d.title, d.meta"

local function chunk_of(r)
  local null = pg.null
  return { id = r.id, doc_id = r.doc_id, text = r.text, start = r.start, stop = r.stop,
    leaf = r.leaf, level = r.level > 0 and r.level or nil,
    parent = r.parent > 0 and r.parent or nil, source = r.source ~= null and r.source or nil,
    title = r.title ~= null and r.title or nil, meta = r.meta }
end

--- A chunk by its id ("doc#n"), as the local index gives it, or nil.
function methods:chunk(id)
  check_live(self, "rag.index.chunk")
  if type(id) ~= "string" then
    error("rag.index.chunk: id must be a string, got " .. type(id), 2)
  end
  local st = self.store
  local rows, msg, code = st:read("SELECT " .. CHUNK_COLS .. " FROM " .. st.chunks .. " c JOIN "
    .. st.docs .. " d ON d.id = c.doc_id WHERE c.id = $1", { id })
  if not rows then
    return nil, msg, code
  end
  return rows[1] and chunk_of(rows[1]) or nil
end

--- The chunks of document `id` in order, or nil.
function methods:chunks(id)
  check_live(self, "rag.index.chunks")
  local sid = type(id) == "number" and tostring(id) or id
  if type(sid) ~= "string" then
    error("rag.index.chunks: id must be a string or a number, got " .. type(id), 2)
  end
  local st = self.store
  local rows, msg, code = st:read("SELECT " .. CHUNK_COLS .. " FROM " .. st.chunks .. " c JOIN "
    .. st.docs .. " d ON d.id = c.doc_id WHERE c.doc_id = $1 ORDER BY c.n", { sid })
  if not rows then
    return nil, msg, code
  end
  if #rows == 0 then
    return nil
  end
  local out = {}
  for i, r in ipairs(rows) do
    out[i] = chunk_of(r)
  end
  return out
end

--- The content hash of document `id`, or nil.
function methods:hash(id)
  check_live(self, "rag.index.hash")
  local sid = type(id) == "number" and tostring(id) or id
  if type(sid) ~= "string" then
    error("rag.index.hash: id must be a string or a number, got " .. type(id), 2)
  end
  local rows, msg, code = self.store:read("SELECT hash FROM " .. self.store.docs
    .. " WHERE id = $1", { sid })
  if not rows then
    return nil, msg, code
  end
  return rows[1] and rows[1].hash or nil
end

--- The number of documents. @return integer | nil, msg, code
function methods:count()
  check_live(self, "rag.index.count")
  local rows, msg, code = self.store:read("SELECT count(*)::integer AS n FROM "
    .. self.store.docs)
  if not rows then
    return nil, msg, code
  end
  return rows[1].n
end

--- Counts and settings. @return table | nil, msg, code
function methods:stats()
  check_live(self, "rag.index.stats")
  local rows, msg, code = self.store:read("SELECT (SELECT count(*) FROM " .. self.store.docs
    .. ")::integer AS documents, count(*)::integer AS chunks, "
    .. "(count(*) FILTER (WHERE leaf))::integer AS leaves FROM " .. self.store.chunks)
  if not rows then
    return nil, msg, code
  end
  local r, s = rows[1], self.settings
  return { documents = r.documents, chunks = r.chunks, leaves = r.leaves,
    vector = s.vector, dim = self.dim, metric = s.metric, store = "postgres",
    table = self.store.name, language = s.language, generation = self.gen,
    readonly = self.readonly, embedder = self.edesc and self.edesc.name or false,
    chunker = self.o.chunker_name, default_mode = self:default_mode() }
end

--- The vectors of chunk ids, as packed float32 strings (false for an id
-- without one); nil for an index without vectors.
function methods:vectors(ids)
  check_live(self, "rag.index.vectors")
  if type(ids) ~= "table" then
    error("rag.index.vectors: ids must be a list of chunk ids, got " .. type(ids), 2)
  end
  if not self.dim then
    return nil
  end
  local rows, msg, code = self.store:read("SELECT id, embedding::text AS e FROM "
    .. self.store.chunks .. " WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb))",
    { json.encode(ids) })
  if not rows then
    return nil, msg, code
  end
  local by = {}
  for _, r in ipairs(rows) do
    if r.e ~= pg.null then
      by[r.id] = core.vec.pack(json.decode(r.e))
    end
  end
  local out = {}
  for i, id in ipairs(ids) do
    out[i] = by[id] or false
  end
  return out
end

-- {====== Search ======}

local SEARCH = {
  mode = { "string" },
  k = { "number", int = true, min = 1, max = 1073741824, default = 10 },
  fetch_k = { "number", int = true, min = 1, max = 1073741824, default = 50 },
  rrf = { "table" },
  weights = { "table" },
  filter = { "table" },
  group = { "string" },
  expand = { "table" },
  ef = { "number", int = true, min = 0, max = 1048576 },
}

-- The filter as SQL over the chunk alias `c`, with named parameters
-- :f1, :f2, ...: returns the condition (or "true") and their values.
local function filter_sql(fname, f)
  if f == nil then
    return "true", {}
  end
  local keys = {}
  for k in pairs(f) do
    if type(k) ~= "string" then
      error(fname .. ": filter keys must be strings, got " .. type(k), 4)
    end
    keys[#keys + 1] = k
  end
  sort(keys)
  local conds, params = {}, {}
  local function param(v)
    params[#params + 1] = v
    return ":f" .. #params
  end
  local function value(k, v)
    local t = type(v)
    if t ~= "string" and t ~= "number" and t ~= "boolean" then
      error(fname .. ": filter." .. k .. ": values must be strings, numbers or booleans, got "
        .. t, 5)
    end
    return v
  end
  for _, k in ipairs(keys) do
    local want = f[k]
    if k == "doc_id" then
      local list = type(want) == "table" and want or { want }
      local ids = {}
      for i, id in ipairs(list) do
        if type(id) ~= "string" and type(id) ~= "number" then
          error(fname .. ": filter.doc_id: ids must be strings or numbers, got " .. type(id), 4)
        end
        ids[i] = tostring(id)
      end
      conds[#conds + 1] = "c.doc_id IN (SELECT jsonb_array_elements_text(" .. param(
        json.encode(ids)) .. "::jsonb))"
    elseif type(want) == "table" and (want.gte ~= nil or want.lte ~= nil) then
      for rk, rv in pairs(want) do
        if (rk ~= "gte" and rk ~= "lte") or type(rv) ~= "number" then
          error(fname .. ": filter." .. k .. ": a range is { gte = number, lte = number }", 4)
        end
      end
      local kp = param(k)
      conds[#conds + 1] = "CASE WHEN jsonb_typeof(c.meta -> " .. kp .. "::text) = 'number' "
        .. "THEN (c.meta ->> " .. kp .. "::text)::float8 BETWEEN " .. param(want.gte or -huge)
        .. "::float8 AND " .. param(want.lte or huge) .. "::float8 ELSE false END"
    elseif type(want) == "table" then
      if #want == 0 then
        error(fname .. ": filter." .. k .. " must be a value, a non-empty list or a range", 4)
      end
      local vals = {}
      for i, v in ipairs(want) do
        vals[i] = value(k, v)
      end
      conds[#conds + 1] = "c.meta -> " .. param(k) .. "::text @> ANY(ARRAY(SELECT "
        .. "jsonb_array_elements(" .. param(json.encode(vals)) .. "::jsonb)))"
    else
      conds[#conds + 1] = "c.meta -> " .. param(k) .. "::text @> " .. param(json.encode(value(k,
        want))) .. "::jsonb"
    end
  end
  if #conds == 0 then
    return "true", params
  end
  return concat(conds, " AND "), params
end

-- SQL with named parameters (:name) as PostgreSQL's $1, $2, ... in the
-- order of their first use, and the names in that order (a statement must
-- use every parameter it is given). `known` says which names are
-- parameters (others, such as ::float8, are left).
local function compile(sql, known)
  local at, names = {}, {}
  local out = sql:gsub(":(%a[%w_]*)", function(name)
    if known[name] == nil then
      return nil
    end
    if not at[name] then
      names[#names + 1] = name
      at[name] = #names
    end
    return "$" .. at[name]
  end)
  return out, names
end

-- One statement for a mode: the lists (each filtered, `fetch` rows), fused
-- by RRF, joined to their chunk and document, best first, ties by id.
local function search_sql(self, mode, where)
  local st = self.store
  local m = METRICS[self.metric]
  local parts = { "WITH " }
  local lists = {}
  if mode ~= "vector" then
    -- statistics as scalar subqueries of their one row (a join of them
    -- would make the planner guess thousands of rows and scan everything)
    local n = "(SELECT n::float8 FROM " .. st.stats .. " WHERE id = 1)"
    local avgdl = "(SELECT greatest(len::float8 / greatest(n, 1), 1) FROM " .. st.stats
      .. " WHERE id = 1)"
    lists[#lists + 1] = "ql AS MATERIALIZED (SELECT t.lexeme, quote_literal(t.lexeme)::tsquery "
      .. "AS tq, x.qtf * ln(1 + (" .. n .. " - t.df + 0.5) / (t.df + 0.5)) AS idf FROM "
      .. (self.settings.language == "rag"
        and "(SELECT key AS lexeme, value::float8 AS qtf FROM jsonb_each_text(:terms::jsonb))"
        or "(SELECT lexeme, coalesce(array_length(positions, 1), 1) AS qtf FROM "
          .. "unnest(to_tsvector(:lang::regconfig, :q)))")
      .. " x JOIN " .. st.terms .. " t ON t.lexeme = x.lexeme AND t.df > 0), "
      -- the candidates: each lexeme's `depth` best postings (among the
      -- chunks that pass the filter), summed; the `rescore` best of them
      .. "p AS MATERIALIZED (SELECT x.chunk_id AS id, sum(ql.idf * x.tf / (x.tf + 1.2 * (0.25 "
      .. "+ 0.75 * x.dl / " .. avgdl .. "))) AS s0 FROM ql CROSS JOIN LATERAL (SELECT "
      .. "p.chunk_id, p.tf, p.dl FROM " .. st.postings .. " p "
      .. (where == "true" and "" or ("JOIN " .. st.chunks .. " c ON c.id = p.chunk_id "))
      .. "WHERE p.lexeme = ql.lexeme" .. (where == "true" and "" or (" AND " .. where))
      .. " ORDER BY p.impact DESC, p.chunk_id LIMIT :depth) x GROUP BY x.chunk_id "
      .. "ORDER BY s0 DESC, x.chunk_id LIMIT :rescore), "
      -- each scored over all the question's lexemes: BM25 with k1 = 1.2,
      -- b = 0.75, as the local index's "lucene" variant
      .. "b AS (SELECT id, s, row_number() OVER (ORDER BY s DESC, id) AS r FROM (SELECT c.id, "
      .. "(SELECT sum(ql.idf * y.tf / (y.tf + 1.2 * (0.25 + 0.75 * c.dl / " .. avgdl .. "))) "
      .. "FROM ql CROSS JOIN LATERAL (SELECT coalesce((c.tf ->> ql.lexeme)::float8, 1) AS tf) "
      .. "y WHERE c.tsv @@ ql.tq) AS s FROM p JOIN " .. st.chunks .. " c ON c.id = p.id "
      .. "ORDER BY s DESC, c.id LIMIT :fetch) b0)"
  end
  if mode ~= "bm25" then
    lists[#lists + 1] = "v AS (SELECT id, d, row_number() OVER (ORDER BY d, id) AS r "
      .. "FROM (SELECT c.id, (c.embedding " .. m.op .. " :qv::vector)::float8 AS d FROM "
      .. st.chunks .. " c WHERE c.embedding IS NOT NULL AND " .. where
      .. " ORDER BY c.embedding " .. m.op .. " :qv::vector LIMIT :vfetch) v0)"
  end
  parts[2] = concat(lists, ", ")
  local fused
  if mode == "hybrid" then
    fused = "f AS (SELECT coalesce(b.id, v.id) AS id, b.r AS rb, v.r AS rv, "
      .. "coalesce(:wb::float8 / (:rk::float8 + :base::float8 + b.r - 1), 0) "
      .. "+ coalesce(:wv::float8 / (:rk::float8 + :base::float8 + v.r - 1), 0) AS score "
      .. "FROM b FULL JOIN v ON b.id = v.id ORDER BY score DESC, id LIMIT :limit)"
  elseif mode == "bm25" then
    fused = "f AS (SELECT id, r AS rb, NULL::bigint AS rv, s AS score FROM b "
      .. "ORDER BY r LIMIT :limit)"
  else
    fused = "f AS (SELECT id, NULL::bigint AS rb, r AS rv, " .. format(m.score, "d")
      .. " AS score FROM v ORDER BY r LIMIT :limit)"
  end
  parts[3] = ", " .. fused
  parts[4] = " SELECT f.id, f.rb, f.rv, f.score, c.doc_id, c.n, c.start, c.stop, c.text, "
    .. "d.source, d.title, d.meta FROM f JOIN " .. st.chunks .. " c ON c.id = f.id JOIN "
    .. st.docs .. " d ON d.id = c.doc_id ORDER BY f.score DESC, f.id"
  return concat(parts)
end

local function to_hits(rows)
  local null = pg.null
  local hits = {}
  for i, r in ipairs(rows) do
    local ranks = {}
    if r.rb ~= null then
      ranks.bm25 = floor(r.rb)
    end
    if r.rv ~= null then
      ranks.vector = floor(r.rv)
    end
    hits[i] = { id = r.id, doc_id = r.doc_id, score = r.score, text = r.text,
      source = r.source ~= null and r.source or nil, title = r.title ~= null and r.title or nil,
      meta = r.meta, start = r.start, stop = r.stop, ranks = ranks, n = r.n }
  end
  return hits
end

-- Widens each hit to its `w` neighbouring leaf chunks on each side, as
-- the local index's sentence windows do.
local function widen(self, hits, w)
  if #hits == 0 then
    return hits
  end
  local docs = {}
  for _, h in ipairs(hits) do
    docs[#docs + 1] = h.doc_id
  end
  local st = self.store
  local rows, msg, code = st:read("SELECT c.doc_id, c.n, c.start, c.stop FROM " .. st.chunks
    .. " c WHERE c.leaf AND c.doc_id IN (SELECT jsonb_array_elements_text($1::jsonb)) "
    .. "ORDER BY c.doc_id, c.n", { json.encode(docs) })
  if not rows then
    return nil, msg, code
  end
  local texts
  texts, msg, code = st:read("SELECT id, text FROM " .. st.docs .. " WHERE id IN "
    .. "(SELECT jsonb_array_elements_text($1::jsonb))", { json.encode(docs) })
  if not texts then
    return nil, msg, code
  end
  local leaves, text = {}, {}
  for _, r in ipairs(rows) do
    local l = leaves[r.doc_id] or {}
    leaves[r.doc_id] = l
    l[#l + 1] = r
  end
  for _, r in ipairs(texts) do
    text[r.id] = r.text
  end
  for _, h in ipairs(hits) do
    local l = leaves[h.doc_id] or {}
    for i, r in ipairs(l) do
      if r.n == h.n then
        local a, b = l[math.max(1, i - w)], l[math.min(#l, i + w)]
        h.start, h.stop = a.start, b.stop
        h.text = text[h.doc_id]:sub(h.start, h.stop)
        break
      end
    end
  end
  return hits
end

--- `search`'s hits as JSON text, as rag.index's search_json gives them
-- (`highlight = true`: by the default analyzer). @return json | nil, msg, code
function methods:search_json(query, opts)
  local index = require("rag.index")
  local o, hl = index._json_opts(self, opts)
  local hits, msg, code = self:search(query, o)
  if not hits then
    return nil, msg, code
  end
  return index._hits_json(hits, query, hl)
end

--- Searches the leaf chunks in one SQL statement (see docs/postgres.md).
-- @return hits | nil, msg, code
function methods:search(query, opts)
  local fname = "rag.index.search"
  check_live(self, fname)
  if type(query) ~= "string" then
    error(fname .. ": query must be a string, got " .. type(query), 2)
  end
  local o = opts_check(fname, opts, SEARCH, 2)
  local mode = o.mode or self:default_mode()
  if mode ~= "hybrid" and mode ~= "bm25" and mode ~= "vector" then
    error(fname .. ": option 'mode' must be \"hybrid\", \"bm25\" or \"vector\"", 2)
  end
  if o.group ~= nil and o.group ~= "doc" then
    error(fname .. ": option 'group' must be \"doc\"", 2)
  end
  local rk, base, wb, wv = 60, 1, 1, 1
  if o.rrf then
    local r = opts_check(fname .. ": rrf", o.rrf, { k = { "number", min = 0 },
      rank_base = { "number", min = 0 } }, 2)
    rk, base = r.k or 60, r.rank_base or 1
    if rk + base <= 0 then
      error(fname .. ": rrf k + rank_base must be > 0", 2)
    end
  end
  if o.weights then
    local w = opts_check(fname .. ": weights", o.weights, { bm25 = { "number", min = 0 },
      vector = { "number", min = 0 } }, 2)
    wb, wv = w.bm25 or 1, w.vector or 1
  end
  local window
  if o.expand then
    local e = opts_check(fname .. ": expand", o.expand, { window = { "number", int = true,
      min = 0 }, merge = { "number", above = 0, max = 1 } }, 2)
    if e.merge then
      error(fname .. ": expand.merge is not supported by the postgres store", 2)
    end
    window = e.window
  end
  local qv = "[]"
  if mode ~= "bm25" then
    if not self.embedder or not self.dim then
      error(fname .. ": mode '" .. mode .. "' needs the embedder; "
        .. (self.edesc and "pass it to rag.index.open" or "this index has none"), 2)
    end
    local vs, msg, code = self.embedder:embed({ query }, { packed = true })
    if not vs then
      return nil, msg, code
    end
    qv = vector_text(vs[1])
  end
  local where, fparams = filter_sql(fname, o.filter)
  local qterms = "{}"
  if mode ~= "vector" and self.settings.language == "rag" then
    local t, tf, code = terms_of(query)
    if not t then
      return nil, tf, code
    end
    qterms = json.encode(json.object(tf))
  end
  local k = o.k
  local fetch = math.max(o.fetch_k, k)
  local cand = self.store.o.candidates
  local want = o.group and k or nil
  while true do
    local limit = o.group and (2 * fetch) or k
    local values = { lang = self.settings.language, q = query, qv = qv, wb = wb, terms = qterms,
      wv = wv, rk = rk, base = base, limit = limit,
      depth = math.max(cand.depth, fetch), rescore = math.max(cand.rescore, fetch),
      fetch = fetch,
      -- a vector list alone needs no more than it returns; in a hybrid
      -- search over HNSW without a filter, no more than one pass of the
      -- graph finds (ef_search rows): the rest would cost a second pass
      -- for ranks whose RRF weight is under 1/100
      vfetch = (mode == "vector" and not o.group) and k
        or (mode == "hybrid" and where == "true" and self.settings.vector == "hnsw"
          and math.min(fetch, self.store.ef_search)) or fetch }
    for i, v in ipairs(fparams) do
      values["f" .. i] = v
    end
    -- the statement of this mode and filter shape, made once per index
    local key = mode .. "\0" .. where
    local cache = self.sql_cache or {}
    self.sql_cache = cache
    local c = cache[key]
    if not c then
      local sql, names = compile(search_sql(self, mode, where), values)
      c = { sql = sql, names = names }
      if (self.sql_count or 0) < 64 then -- filter shapes are few; keep at most 64
        cache[key] = c
        self.sql_count = (self.sql_count or 0) + 1
      end
    end
    local sql, params = c.sql, {}
    for i, name in ipairs(c.names) do
      params[i] = values[name]
    end
    local rows, msg, code = self.store:read(sql, params)
    if not rows then
      return nil, msg, code
    end
    local hits = to_hits(rows)
    if want then
      local seen, out = {}, {}
      for _, h in ipairs(hits) do
        if not seen[h.doc_id] then
          seen[h.doc_id] = true
          out[#out + 1] = h
          if #out == want then
            break
          end
        end
      end
      -- fewer documents than asked while a list was cut short: look further
      if #out < want and #rows >= fetch and fetch < 16777216 then
        fetch = fetch * 4
      else
        hits = out
        want = nil
      end
    end
    if not want then
      if window then
        hits, msg, code = widen(self, hits, window)
        if not hits then
          return nil, msg, code
        end
      end
      for _, h in ipairs(hits) do
        h.n = nil
      end
      return hits
    end
  end
end

-- {====== Saving and closing ======}

--- Every change is committed when add, sync or remove returns: there is
-- nothing to save. @return true
function methods:save()
  check_live(self, "rag.index.save")
  return true
end

--- Closes the index and its store's connections; idempotent.
function methods:close()
  if self.c then
    self.c:close()
    self.c = nil
    self.store:close()
  end
end

function methods:__tostring()
  if not self.c then
    return "rag.index (postgres, closed)"
  end
  return "rag.index (postgres table " .. self.store.name .. ")"
end

return M
