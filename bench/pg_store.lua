-- bench/pg_store.lua BEIR_DIR: rag.store.postgres against the local
-- rag.index (issue 26, acceptance B and C), on the cluster that
-- `make bench-pg-store` starts (spec/pg/run.sh; RAG_PG_DSN).
--
-- B. SciFact (BEIR_DIR: corpus.jsonl, 5,183 documents; queries.jsonl; the
--    300 queries of qrels/test.tsv), the default chunker (recursive, 512
--    cl100k tokens, overlap 64), rag.embed.hashing{ dim = 384 }, indexed
--    into a local rag.index (vector "exact") and into PostgreSQL (vector
--    "exact" and "hnsw"): ingest documents/s (wall time of rag.index.new +
--    add_many of the whole corpus, median of RUNS); for every test query
--    the top-10 overlap of each PostgreSQL index with the local one in each
--    mode: |common chunk ids| / 10 of k = 10 searches, and |common doc
--    ids| / 10 of k = 10, group = "doc" searches; nDCG@10 (rag.eval.ir,
--    documents: group = "doc", a document's score its best chunk's) per mode.
--    And a fourth, BM25-only index with PostgreSQL's "english" text search
--    configuration: its bm25-mode nDCG@10 next to the local index's.
-- C. SciFact chunked smaller (recursive, 108 tokens, no overlap: 20,046
--    chunks, 384 dims), PostgreSQL with an HNSW index (m = 16,
--    ef_construction = 64, ef_search = 40): CLIENTS (8) processes of this
--    interpreter, forked by the shell, each with its own
--    rag.index.open(dsn .. "?table=...") and the hashing embedder (each
--    query embedded in the client, as a user's is), run N queries
--    (SciFact's 1,109 query texts in turn, each client from its own offset)
--    after a common start time; q/s = all queries / (last client's end -
--    start); p50 and p99 over every query's latency. Then the same searches
--    under nginx + ngx_lua (cosockets; 2 workers, one pooled store per
--    worker, POST /search?mode=M with the query as the body) driven by wrk
--    with 8 connections for SECS seconds: requests/s, p50, p99.
-- The machine has 2 cores shared by PostgreSQL, the clients, nginx and
-- wrk: every figure is what it gives with all of them. Medians of RUNS
-- (default 3) runs. Env: RAG_PG_DSN (set by spec/pg/run.sh), RUNS,
-- CLIENTS, SECS, PARTS ("B C ngx" by default).
--   make bench-pg-store DATA=../shared/data
local rag = require("rag")
local pg = require("rag.store.pg")
local socket = require("socket")
local util = require("bench.util")

local gettime, format, concat = socket.gettime, string.format, table.concat
local median = util.median

local DSN = os.getenv("RAG_PG_DSN")
local RUNS = tonumber(os.getenv("RUNS")) or 3
local CLIENTS = tonumber(os.getenv("CLIENTS")) or 8
local SECS = tonumber(os.getenv("SECS")) or 10
local LUA = arg[-1] or "lua5.4"
local C_TABLE, C_CHUNK = "bench_c", { size = 108, overlap = 0 }
local C_HNSW = { m = 16, ef_construction = 64, ef_search = 40 }
-- The searches of part C: the store's defaults (pgvector's own ef_search,
-- 40), and a higher-recall setting a user may choose (ef_search 100).
local CONFIGS = {
  default = { name = "default", ef_search = 40, fetch_k = {} },
  ef100 = { name = "ef100", ef_search = 100, fetch_k = {} },
}
local CONFIG_ORDER = { "default", "ef100" }

-- The query texts of queries.jsonl, in file order.
local function query_texts(dir)
  local out = {}
  for line in io.lines(dir .. "/queries.jsonl") do
    out[#out + 1] = rag.json.decode(line).text
  end
  return out
end

local function percentile(sorted, p)
  return sorted[math.max(1, math.ceil(#sorted * p))]
end

-- {====== A client of part C (a child process) ======}

if arg[1] == "--client" then
  local dir, mode, n, start, me, cfg = arg[2], arg[3], tonumber(arg[4]), tonumber(arg[5]),
    tonumber(arg[6]), CONFIGS[arg[7]]
  local texts = query_texts(dir)
  local idx = assert(rag.index.open(DSN .. "?table=" .. C_TABLE, {
    embedder = rag.embed.hashing({ dim = 384 }), readonly = true,
    hnsw = { ef_search = cfg.ef_search } }))
  local at = (me * 137) % #texts
  local sopts = { mode = mode, k = 10, fetch_k = cfg.fetch_k[mode] }
  local function q()
    at = at % #texts + 1
    local hits = assert(idx:search(texts[at], sopts))
    assert(#hits == 10, "fewer than 10 hits")
  end
  for _ = 1, 5 do
    q()
  end
  local late = gettime() > start
  if not late then
    socket.sleep(start - gettime())
  end
  local lat = {}
  for i = 1, n do
    local t0 = gettime()
    q()
    lat[i] = format("%.3f", (gettime() - t0) * 1e3)
  end
  print(format("client %d %.6f %s %s", n, gettime(), late and "late" or "ok", concat(lat, ",")))
  idx:close()
  os.exit(0)
end

-- {====== Setup ======}

if not DSN then
  print("skipped: RAG_PG_DSN is unset; run make bench-pg-store DATA=../shared/data")
  return
end
local dir = arg[1]
if dir then
  dir = dir:gsub("/+$", "")
  local base, leaf = dir:match("^(.*)/([^/]+)$")
  util.data_dir(base or ".", (leaf or dir) .. "/corpus.jsonl", "bench-pg-store")
else
  util.data_dir(nil, "", "bench-pg-store")
end
local PARTS = {}
for p in (os.getenv("PARTS") or "B C ngx"):gmatch("%S+") do
  PARTS[p] = true
end

local data, docs, qids = util.beir(dir)

local admin = assert(pg.connect({ dsn = DSN }))
local server = assert(admin:query("SELECT version() AS v, (SELECT extversion FROM pg_extension "
  .. "WHERE extname = 'vector') AS pgv"))[1]
print(format("rag.store.postgres on %s: %d documents, %d test queries", dir, #docs, #qids))
print(format("machine: %s, %s CPUs, %s; %s; %s, pgvector %s over loopback TCP (TLS)",
  util.cpu(), util.sh("nproc"), util.sh("free -g | awk '/^Mem:/ { print $2 \" GB\" }'"),
  _VERSION .. (jit and (" (" .. jit.version .. ")") or ""), server.v:match("^(%S+ %S+)"),
  tostring(server.pgv)))

-- Drops a store's tables and its settings row.
local function drop(name)
  local st = rag.store.postgres({ dsn = DSN, table = name })
  assert(st:drop())
  st:close()
end

local function store(name, hnsw, language)
  return rag.store.postgres({ dsn = DSN, table = name, hnsw = hnsw, language = language })
end

local results = {} -- { part, what, local, postgres, target }
local function result(part, what, loc, pgv, target)
  results[#results + 1] = { part, what, loc or "", pgv or "", target or "" }
end

-- {====== B: SciFact, local against PostgreSQL ======}

if PARTS.B then
  local emb = rag.embed.hashing({ dim = 384 })
  -- Ingest RUNS times, wall time; returns docs/s (median) and the last index.
  local function ingest(label, make)
    local times, idx = {}, nil
    for r = 1, RUNS do
      if idx then
        idx:close()
      end
      collectgarbage()
      local t0 = gettime()
      idx = make()
      assert(idx:add_many(docs))
      times[r] = gettime() - t0
    end
    local st = idx:stats()
    local rate = #docs / median(times)
    print(format("B ingest %-34s %7.0f docs/s  (%d chunks, vectors %s; runs: %s s)", label,
      rate, st.leaves, st.vector, concat((function()
        local t = {}
        for i, x in ipairs(times) do
          t[i] = format("%.2f", x)
        end
        return t
      end)(), " ")))
    return rate, idx
  end
  local lrate, lidx = ingest("local rag.index (exact)", function()
    return rag.index.new({ embedder = emb, vector = "exact" })
  end)
  local erate, eidx = ingest("postgres, vector exact", function()
    drop("bench_b_exact")
    return assert(rag.index.new({ store = store("bench_b_exact"), embedder = emb,
      vector = "exact" }))
  end)
  local hrate, hidx = ingest("postgres, vector hnsw", function()
    drop("bench_b_hnsw")
    return assert(rag.index.new({ store = store("bench_b_hnsw", C_HNSW), embedder = emb,
      vector = "hnsw" }))
  end)
  -- PostgreSQL's English configuration for the lexemes (bm25 mode only)
  local _, gidx = ingest("postgres, english, no vectors", function()
    drop("bench_b_english")
    return assert(rag.index.new({ store = store("bench_b_english", nil, "english"),
      embedder = false }))
  end)
  for _, t in ipairs({ "bench_b_exact", "bench_b_hnsw", "bench_b_english" }) do
    for _, part in ipairs({ "_chunks", "_docs", "_postings", "_terms" }) do
      assert(admin:exec("VACUUM ANALYZE " .. t .. part))
    end
  end
  result("B", "ingest SciFact, docs/s (wall)", format("%.0f", lrate),
    format("%.0f exact / %.0f hnsw", erate, hrate))

  -- Top-10 overlaps and nDCG@10 per mode.
  local function runs(idx, mode)
    local chunks, bydoc, run, t0 = {}, {}, {}, gettime()
    for _, q in ipairs(qids) do
      chunks[q] = assert(idx:search(data.queries[q], { mode = mode, k = 10 }))
    end
    local qps = #qids / (gettime() - t0)
    for _, q in ipairs(qids) do
      bydoc[q] = assert(idx:search(data.queries[q], { mode = mode, k = 10, group = "doc" }))
      run[q] = {}
      for i, h in ipairs(bydoc[q]) do
        run[q][i] = { id = h.doc_id, score = h.score }
      end
    end
    return { chunks = chunks, docs = bydoc, qps = qps,
      ndcg = rag.eval.ir(run, data.qrels, { "ndcg@10" })["ndcg@10"] }
  end
  local function overlap(a, b, key)
    local sum = 0
    for _, q in ipairs(qids) do
      local seen, common = {}, 0
      for _, h in ipairs(a[q]) do
        seen[h[key]] = true
      end
      for _, h in ipairs(b[q]) do
        if seen[h[key]] then
          common = common + 1
        end
      end
      sum = sum + common / 10
    end
    return sum / #qids
  end
  for _, mode in ipairs({ "hybrid", "bm25", "vector" }) do
    local l, e, h = runs(lidx, mode), runs(eidx, mode), runs(hidx, mode)
    local oc_e, od_e = overlap(l.chunks, e.chunks, "id"), overlap(l.docs, e.docs, "doc_id")
    local oc_h, od_h = overlap(l.chunks, h.chunks, "id"), overlap(l.docs, h.docs, "doc_id")
    print(format("B %-6s overlap with local: exact chunks %.3f docs %.3f; hnsw chunks %.3f "
      .. "docs %.3f | nDCG@10 local %.4f, pg exact %.4f, pg hnsw %.4f | one client q/s "
      .. "local %.0f, pg exact %.0f, pg hnsw %.0f", mode, oc_e, od_e, oc_h, od_h, l.ndcg, e.ndcg,
      h.ndcg, l.qps, e.qps, h.qps))
    result("B", mode .. " top-10 overlap, chunk ids", "-",
      format("%.3f exact / %.3f hnsw", oc_e, oc_h), mode == "hybrid" and ">= 0.8" or "")
    result("B", mode .. " top-10 overlap, doc ids", "-",
      format("%.3f exact / %.3f hnsw", od_e, od_h), mode == "hybrid" and ">= 0.8" or "")
    result("B", mode .. " nDCG@10 (documents)", format("%.4f", l.ndcg),
      format("%.4f exact / %.4f hnsw", e.ndcg, h.ndcg), mode == "bm25" and "reported" or "")
  end
  local l, g = runs(lidx, "bm25"), runs(gidx, "bm25")
  local og = overlap(l.docs, g.docs, "doc_id")
  print(format("B bm25 with PostgreSQL's english configuration: doc overlap with local %.3f | "
    .. "nDCG@10 local %.4f, pg english %.4f", og, l.ndcg, g.ndcg))
  result("B", "bm25 nDCG@10, PostgreSQL's english configuration", format("%.4f", l.ndcg),
    format("%.4f", g.ndcg), "reported")
  lidx:close()
  eidx:close()
  hidx:close()
  gidx:close()
end

-- {====== C: 20,000 chunks x 384, 8 clients ======}

local function c_index()
  -- reuses the table when it holds what this part would make
  local ok, idx = pcall(rag.index.open, DSN .. "?table=" .. C_TABLE, { readonly = true,
    embedder = rag.embed.hashing({ dim = 384 }) })
  if ok and idx then
    local st = idx:stats()
    idx:close()
    if st and st.documents == #docs and st.vector == "hnsw" and st.dim == 384 then
      return st, nil
    end
  end
  drop(C_TABLE)
  local t0 = gettime()
  idx = assert(rag.index.new({ store = store(C_TABLE, C_HNSW),
    embedder = rag.embed.hashing({ dim = 384 }), vector = "hnsw", chunk = C_CHUNK }))
  assert(idx:add_many(docs))
  local took = gettime() - t0
  -- what a DBA runs after a bulk load (autovacuum gets there later): the
  -- planner's statistics, and the visibility map the postings' index-only
  -- scans need (one statement each: VACUUM refuses a transaction block)
  for _, t in ipairs({ "_chunks", "_docs", "_postings", "_terms" }) do
    assert(admin:exec("VACUUM ANALYZE " .. C_TABLE .. t))
  end
  local st = idx:stats()
  idx:close()
  return st, took
end

if PARTS.C or PARTS.ngx then
  local st, took = c_index()
  print(format("C index: %d documents, %d chunks x %d dims, HNSW m = %d, ef_construction = %d, "
    .. "ef_search = %d%s", st.documents, st.leaves, st.dim, C_HNSW.m, C_HNSW.ef_construction,
    C_HNSW.ef_search, took and format("; built in %.1f s (%.0f docs/s, %.0f chunks/s)", took,
      #docs / took, st.leaves / took) or " (reused)"))
  result("C", "index: chunks x dims", "", format("%d x %d", st.leaves, st.dim))
end

-- (i, mode, config name) of part C's measurements, in order.
local function combos()
  local list = {}
  for _, cname in ipairs(CONFIG_ORDER) do
    for _, mode in ipairs({ "vector", "hybrid" }) do
      list[#list + 1] = { mode, cname }
    end
  end
  local i = 0
  return function()
    i = i + 1
    if list[i] then
      return i, list[i][1], list[i][2]
    end
  end
end

if PARTS.C then
  local N = { vector = tonumber(os.getenv("N_VECTOR")) or 1000,
    hybrid = tonumber(os.getenv("N_HYBRID")) or 100 }
  for _, mode, cname in combos() do
    local rates, p50s, p99s = {}, {}, {}
    for r = 1, RUNS do
      local start = gettime() + 3 + 0.25 * CLIENTS
      local cmd = {}
      for i = 1, CLIENTS do
        cmd[#cmd + 1] = format("%s bench/pg_store.lua --client %s %s %d %.3f %d %s &", LUA, dir,
          mode, N[mode], start, i, cname)
      end
      local p = assert(io.popen("(" .. concat(cmd, " ") .. " wait)"))
      local total, last, late, lat = 0, 0, 0, {}
      for line in p:lines() do
        local n, t_end, state, list = line:match("^client (%d+) (%S+) (%S+) (%S+)$")
        if n then
          total, last = total + tonumber(n), math.max(last, tonumber(t_end))
          late = late + (state == "late" and 1 or 0)
          for x in list:gmatch("[^,]+") do
            lat[#lat + 1] = tonumber(x)
          end
        else
          io.stderr:write(line, "\n")
        end
      end
      p:close()
      assert(total == CLIENTS * N[mode], "a client failed")
      table.sort(lat)
      rates[r], p50s[r], p99s[r] = total / (last - start), percentile(lat, 0.5),
        percentile(lat, 0.99)
      print(format("C %-6s %-7s run %d: %d clients x %d queries: %.0f q/s, p50 %.2f ms, "
        .. "p99 %.2f ms%s", mode, cname, r, CLIENTS, N[mode], rates[r], p50s[r], p99s[r],
        late > 0 and format(" (%d clients started late)", late) or ""))
    end
    result("C", format("%s top-10 %s, %d Lua clients (%s), q/s", mode, cname, CLIENTS, LUA),
      "",
      format("%.0f (p50 %.2f ms, p99 %.2f ms)", median(rates), median(p50s), median(p99s)),
      cname ~= "default" and "" or mode == "vector" and ">= 1000" or ">= 350")
  end
end

-- {====== C under nginx cosockets, driven by wrk ======}

local function ngx_part()
  local nginx, modules = os.getenv("NGINX") or "/usr/sbin/nginx",
    os.getenv("NGINX_MODULES") or "/usr/lib/nginx/modules"
  local f = io.open(modules .. "/ngx_http_lua_module.so")
  if not f or util.sh("command -v wrk") == "" or util.sh("ls build/jit/rag/core.so") == "" then
    print("C nginx: skipped (nginx-light, libnginx-mod-http-lua, wrk or build/jit missing)")
    return
  end
  f:close()
  local repo = util.sh("pwd")
  local d = repo .. "/build/pg-store-bench"
  os.execute("rm -rf " .. d .. " && mkdir -p " .. d .. "/logs " .. d .. "/tmp")
  local port = util.sh("python3 -c 'import socket; s = socket.socket(); "
    .. "s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])'")
  local conf = [[
load_module MODULES/ndk_http_module.so;
load_module MODULES/ngx_http_lua_module.so;
daemon off;
master_process on;
worker_processes 2;
pid D/nginx.pid;
error_log D/logs/error.log warn;
env RAG_PG_DSN;
events {
  worker_connections 256;
}
http {
  access_log off;
  client_body_temp_path D/tmp/body;
  client_body_buffer_size 16k;
  proxy_temp_path D/tmp/proxy;
  fastcgi_temp_path D/tmp/fastcgi;
  uwsgi_temp_path D/tmp/uwsgi;
  scgi_temp_path D/tmp/scgi;
  lua_package_path "REPO/lua/?.lua;REPO/lua/?/init.lua;;";
  lua_package_cpath "REPO/build/jit/?.so;;";
  server {
    listen 127.0.0.1:PORT backlog=1024;
    default_type text/plain;
    location = /ping {
      return 200 "pong";
    }
    location = /search {
      content_by_lua_block {
        -- one store (a pool of cosockets) per worker, opened by its first request
        local state = package.loaded.pg_store_bench
        if not state then
          state = {}
          package.loaded.pg_store_bench = state
        end
        local rag = require("rag")
        local ef, fetch = tonumber(ngx.var.arg_ef), tonumber(ngx.var.arg_fetch)
        local idx = state[ef]
        if not idx then
          idx = assert(rag.index.open(os.getenv("RAG_PG_DSN") .. "?table=TABLE",
            { embedder = rag.embed.hashing({ dim = 384 }), readonly = true, pool_size = 16,
              hnsw = { ef_search = ef } }))
          state[ef] = idx
        end
        ngx.req.read_body()
        local hits, msg = idx:search(ngx.req.get_body_data(),
          { mode = ngx.var.arg_mode, k = 10, fetch_k = fetch })
        if not hits or #hits ~= 10 then
          ngx.status = 500
          ngx.say(msg or "fewer than 10 hits")
          return
        end
        local ids = {}
        for i, h in ipairs(hits) do
          ids[i] = h.id
        end
        ngx.say(table.concat(ids, " "))
      }
    }
  }
}
]]
  conf = conf:gsub("MODULES", modules):gsub("REPO", repo):gsub("PORT", port)
    :gsub("TABLE", C_TABLE):gsub("D/", d .. "/")
  local cf = assert(io.open(d .. "/nginx.conf", "w"))
  cf:write(conf)
  cf:close()
  -- wrk's script: the query texts as POST bodies, each connection from its own offset
  local texts = query_texts(dir)
  local ws = assert(io.open(d .. "/search.lua", "w"))
  ws:write("local bodies = {\n")
  for _, t in ipairs(texts) do
    ws:write(format("  %q,\n", t))
  end
  ws:write([[}
local n = 0
init = function()
  n = math.random(#bodies)
end
request = function()
  n = n % #bodies + 1
  return wrk.format("POST", nil, nil, bodies[n])
end
]])
  ws:close()
  os.execute(format("%s -p %s/ -c %s/nginx.conf -e %s/logs/error.log > %s/logs/nginx.out 2>&1 & "
    .. "echo $! > %s/master.pid", nginx, d, d, d, d, d))
  local pid = util.sh("cat " .. d .. "/master.pid")
  local url = "http://127.0.0.1:" .. port
  local ok, err = pcall(function()
    for _ = 1, 100 do
      if os.execute("curl -sf -o /dev/null " .. url .. "/ping") then
        break
      end
      socket.sleep(0.1)
    end
    for _, mode, cname in combos() do
      local cfg = CONFIGS[cname]
      local target = url .. "/search?mode=" .. mode .. "&ef=" .. cfg.ef_search
        .. (cfg.fetch_k[mode] and ("&fetch=" .. cfg.fetch_k[mode]) or "")
      local body = util.sh("curl -s -d 'vitamin D and bone fractures' '" .. target .. "'")
      assert(select(2, body:gsub("%S+", "")) == 10, "nginx answered: " .. body)
      os.execute(format("wrk -t2 -c8 -d2s -s %s/search.lua '%s' > /dev/null 2>&1", d, target))
      local rates, p50s, p99s = {}, {}, {}
      for r = 1, RUNS do
        local p = assert(io.popen(format("wrk -t2 -c8 -d%ds --latency -s %s/search.lua '%s'",
          SECS, d, target)))
        local out = p:read("*a")
        p:close()
        local function ms(v)
          local x, unit = v:match("^([%d.]+)(%a+)$")
          x = tonumber(x)
          return unit == "us" and x / 1e3 or unit == "s" and x * 1e3 or x
        end
        rates[r] = tonumber(out:match("Requests/sec:%s*([%d.]+)"))
        p50s[r] = ms(out:match("\n%s*50%%%s+(%S+)"))
        p99s[r] = ms(out:match("\n%s*99%%%s+(%S+)"))
        local bad = out:match("Non%-2xx or 3xx responses:%s*(%d+)")
        local sock = out:match("Socket errors:[^\n]*")
        print(format("C nginx %-6s %-7s run %d: wrk 8 connections %d s: %.0f req/s, p50 %.2f ms, "
          .. "p99 %.2f ms%s%s", mode, cname, r, SECS, rates[r], p50s[r], p99s[r],
          bad and (", non-2xx " .. bad) or "", sock and (", " .. sock) or ""))
      end
      result("C", format("%s top-10 %s, nginx (2 workers), wrk 8 conns, req/s", mode, cname),
        "",
        format("%.0f (p50 %.2f ms, p99 %.2f ms)", median(rates), median(p50s), median(p99s)),
        (cname == "default" and mode == "vector") and ">= 1200" or "")
    end
  end)
  os.execute("kill " .. pid .. " 2>/dev/null; sleep 0.5")
  local errs = util.sh("grep -cE '\\[(error|alert|crit|emerg)\\]' " .. d .. "/logs/error.log")
  if errs ~= "0" and errs ~= "" then
    print("nginx error log: " .. errs .. " error lines, e.g.: "
      .. util.sh("grep -m1 -E '\\[(error|alert|crit)\\]' " .. d .. "/logs/error.log"))
  end
  if not ok then
    error(err, 0)
  end
end

if PARTS.ngx then
  ngx_part()
end

-- {====== The table ======}

print()
print(format("%-4s %-64s %-8s %-40s %s", "part", "measure", "local", "postgres", "target"))
for _, r in ipairs(results) do
  print(format("%-4s %-64s %-8s %-40s %s", r[1], r[2], r[3], r[4], r[5]))
end
admin:close()
