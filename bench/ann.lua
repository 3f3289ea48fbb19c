-- bench/ann.lua [DIR] [--n N --dim D --nq Q --rank R --noise X --seed S
--   --dtype f32|f16|i8 --remove F --peer]: rag.hnsw (issue 6) against exact
-- search (rag.vec) and, with --peer, against hnswlib and FAISS on the same
-- vectors: build time, memory per vector, recall@10 and queries/s over an ef
-- sweep, exact search speed as a share of the machine's memory bandwidth.
--
-- Data: DIR/base.f32 and DIR/query.f32 (raw little-endian float32 rows; --dim
-- is required) and DIR/gt.i32 (int32, the exact top-k row numbers, 0-based,
-- per query; the first 10 are used; computed with exact search and written
-- when missing). Without DIR the data is generated from --seed (default 1)
-- with a splitmix64 PRNG and Box-Muller Gaussians written in Lua, so it is
-- the same on every run: a basis of R (--rank, default 32) Gaussian rows
-- of length about 1; each vector is Gaussian coefficients times the basis
-- plus isotropic Gaussian noise whose norm is X (--noise, default 0.5) times
-- the signal's, then scaled to unit length. Queries are drawn the same way
-- (they are not base rows). Defaults: n 20000, dim 128, nq 1000. The files
-- go to $TMPDIR/rag-ann-<params>/ (reused when present, as generating is
-- slow in Lua) with gt.i32 recomputed every run by exact search, so the peer
-- reads the very same float32 vectors.
--
-- Index: rag.hnsw.new{ metric = "dot" (unit vectors: the peers' inner
-- product), dtype = --dtype (default f32), M = 16, ef_construction = 200,
-- seed = 100, capacity = n }; row i is added as id tostring(i - 1), so ids
-- are gt's row numbers. Exact: rag.vec.new{ metric = "dot" }, f32.
-- Single thread; times are os.clock (CPU time of this process); build and
-- remove are timed once, every query figure is the median of 3 passes over
-- all queries, one h:search(q, 10, { ef = ef }) call per query (queries are
-- packed float32 strings). --remove F removes a seeded random F of the ids
-- after the sweep and reports recall@10 at ef 64 and 128 against exact
-- search over the remaining rows, failing if a removed id comes back.
-- Memory bandwidth: bench/membw.c (built with cc -O2 -mavx2), one thread
-- summing 1 GiB, median of 5 passes.
-- Peers (--peer): bench/peers/ann_peer.py under /usr/bin/python3 with
-- Debian's python3-hnswlib 0.6.2 (M 16, ef_construction 200, seed 100,
-- space 'ip') and python3-faiss 1.7.3 (IndexFlatIP), one thread, timed with
-- time.process_time (CPU time, like os.clock); a Python loop of single-row
-- queries, as ours is a Lua loop. Both Debian builds are generic x86-64
-- (SSE, no AVX); rag picks AVX2 kernels at run time, so part of any speed
-- ratio is the wider SIMD.
--   lua5.4 bench/ann.lua --peer
--   lua5.4 bench/ann.lua --n 100000 --dim 384 --peer --remove 0.2
local rag = require("rag")
local util = require("bench.util")

local clock = os.clock
local median, sh = util.median, util.sh

local K = 10
local PASSES = 3
local EFS = { 16, 24, 32, 48, 64, 96, 128, 192, 256 }
local M = 16
local ELT = { f32 = 4, f16 = 2, i8 = 1 }
local PYTHON = "/usr/bin/python3"
local USAGE = "usage: lua5.4 bench/ann.lua [DIR] [--n N --dim D --nq Q --rank R --noise X"
  .. " --seed S --dtype f32|f16|i8 --remove F --peer]"

-- {========================================================== arguments

local function parse_args(argv)
  local o = { dtype = "f32", seed = 1, peer = false }
  local numeric = { n = true, dim = true, nq = true, rank = true, noise = true, seed = true,
    remove = true }
  local i = 1
  while i <= #argv do
    local a = argv[i]
    local key = a:match("^%-%-(.+)$")
    if key == "peer" then
      o.peer = true
      i = i + 1
    elseif key == "dtype" then
      o.dtype = argv[i + 1]
      i = i + 2
    elseif numeric[key] then
      o[key] = tonumber(argv[i + 1])
      if not o[key] then
        error(USAGE .. "\n--" .. key .. " needs a number", 0)
      end
      i = i + 2
    elseif not key and not o.dir then
      o.dir = a
      i = i + 1
    else
      error(USAGE .. "\nunexpected argument: " .. a, 0)
    end
  end
  if not ELT[o.dtype] then
    error(USAGE .. "\n--dtype must be f32, f16 or i8", 0)
  end
  if o.remove and not (o.remove > 0 and o.remove < 1) then
    error("--remove must be a fraction between 0 and 1", 0)
  end
  if o.dir then
    if not o.dim then
      error(USAGE .. "\n--dim is required with DIR", 0)
    end
    for _, gen in ipairs({ "n", "nq", "rank", "noise" }) do
      if o[gen] then
        error("--" .. gen .. " is for generated data; DIR's files fix it", 0)
      end
    end
  end
  o.n, o.dim, o.nq = o.n or 20000, o.dim or 128, o.nq or 1000
  o.rank, o.noise = o.rank or 32, o.noise or 0.5
  for _, key in ipairs({ "n", "dim", "nq", "rank", "seed" }) do
    if math.type(o[key]) ~= "integer" or o[key] < (key == "seed" and 0 or 1) then
      error("--" .. key .. " must be a positive integer", 0)
    end
  end
  return o
end

-- }==========================================================
-- {========================================================== data

-- splitmix64 (Steele, Lea, Flood 2014) on Lua 5.4's wrapping 64-bit integers.
local function prng(seed)
  local s = seed
  local function next64()
    s = s + 0x9E3779B97F4A7C15
    local z = s
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    return z ~ (z >> 31)
  end
  local function uniform() -- in (0, 1]
    return ((next64() >> 11) + 1) * 2.0 ^ -53
  end
  local spare
  local function gauss() -- Box-Muller, both values used
    if spare then
      local g = spare
      spare = nil
      return g
    end
    local r = math.sqrt(-2 * math.log(uniform()))
    local t = 2 * math.pi * uniform()
    spare = r * math.sin(t)
    return r * math.cos(t)
  end
  local function below(m) -- an integer in [0, m)
    return (next64() >> 1) % m
  end
  return { gauss = gauss, below = below }
end

local function file_size(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local size = f:seek("end")
  f:close()
  return size
end

local function read_file(path)
  local f, err = io.open(path, "rb")
  if not f then
    error("bench/ann.lua: " .. err, 0)
  end
  local s = f:read("a")
  f:close()
  return s
end

-- Writes through a temporary name, so a crashed run leaves no half file.
local function write_file(path, parts)
  local f = assert(io.open(path .. ".part", "wb"))
  for _, s in ipairs(parts) do
    f:write(s)
  end
  assert(f:close())
  assert(os.rename(path .. ".part", path))
end

-- The rows of a float32 file as packed strings of dim floats.
local function read_rows(path, dim)
  local s = read_file(path)
  local len = dim * 4
  if #s % len ~= 0 then
    error(string.format("bench/ann.lua: %s: %d bytes is not a multiple of dim %d * 4", path,
      #s, dim), 0)
  end
  local rows = {}
  for i = 1, #s // len do
    rows[i] = s:sub((i - 1) * len + 1, i * len)
  end
  return rows
end

local function generate(o)
  local rng = prng(o.seed)
  local dim, rank = o.dim, o.rank
  local basis = {}
  for r = 1, rank do
    local row = {}
    for j = 1, dim do
      row[j] = rng.gauss() / math.sqrt(dim)
    end
    basis[r] = row
  end
  -- The signal's squared norm is about rank, the noise's dim * sigma^2.
  local sigma = o.noise * math.sqrt(rank / dim)
  local fmt = "<" .. string.rep("f", dim)
  local function draw()
    local x = {}
    for j = 1, dim do
      x[j] = sigma * rng.gauss()
    end
    for r = 1, rank do
      local c, b = rng.gauss(), basis[r]
      for j = 1, dim do
        x[j] = x[j] + c * b[j]
      end
    end
    local ss = 0
    for j = 1, dim do
      ss = ss + x[j] * x[j]
    end
    local inv = 1 / math.sqrt(ss)
    for j = 1, dim do
      x[j] = x[j] * inv
    end
    return string.pack(fmt, table.unpack(x))
  end
  local base, queries = {}, {}
  for i = 1, o.n do
    base[i] = draw()
  end
  for i = 1, o.nq do
    queries[i] = draw()
  end
  return base, queries
end

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- Base and query rows: DIR's files, or generated ones (cached in a temp dir).
local function load_data(o)
  if o.dir then
    return o.dir, read_rows(o.dir .. "/base.f32", o.dim), read_rows(o.dir .. "/query.f32", o.dim)
  end
  local dir = string.format("%s/rag-ann-%dx%d-q%d-r%d-noise%g-s%d", os.getenv("TMPDIR") or "/tmp",
    o.n, o.dim, o.nq, o.rank, o.noise, o.seed)
  local len = o.dim * 4
  if file_size(dir .. "/base.f32") == o.n * len and file_size(dir .. "/query.f32") == o.nq * len
  then
    o.reused = true
    return dir, read_rows(dir .. "/base.f32", o.dim), read_rows(dir .. "/query.f32", o.dim)
  end
  local t0 = clock()
  local base, queries = generate(o)
  o.gen_s = clock() - t0
  assert(os.execute("mkdir -p " .. shell_quote(dir)))
  write_file(dir .. "/base.f32", base)
  write_file(dir .. "/query.f32", queries)
  return dir, base, queries
end

-- gt as lists of row numbers (0-based), from an exact hit list per query.
local function gt_of(results)
  local gt = {}
  for q, hits in ipairs(results) do
    local row = {}
    for i = 1, math.min(K, #hits) do
      row[i] = tonumber(hits[i].id)
    end
    gt[q] = row
  end
  return gt
end

local function write_gt(path, gt)
  local parts = {}
  for q, row in ipairs(gt) do
    assert(#row == K, "fewer than 10 rows for a query")
    parts[q] = string.pack("<" .. string.rep("i4", K), table.unpack(row))
  end
  write_file(path, parts)
end

local function read_gt(path, nq)
  local s = read_file(path)
  if nq == 0 or #s % (4 * nq) ~= 0 or #s // (4 * nq) < K then
    error(string.format("bench/ann.lua: %s: %d bytes is not >= %d int32 per query for %d"
      .. " queries", path, #s, K, nq), 0)
  end
  local kk = #s // (4 * nq)
  local gt = {}
  for q = 1, nq do
    local row = {}
    for i = 1, K do
      row[i] = string.unpack("<i4", s, ((q - 1) * kk + i - 1) * 4 + 1)
    end
    gt[q] = row
  end
  return gt
end

-- }==========================================================
-- {========================================================== measuring

-- gt rows as sets of ids, for recall.
local function id_sets(gt)
  local sets = {}
  for q, row in ipairs(gt) do
    local set = {}
    for _, r in ipairs(row) do
      set[tostring(r)] = true
    end
    sets[q] = set
  end
  return sets
end

local function recall(results, sets)
  local found = 0
  for q, hits in ipairs(results) do
    local set = sets[q]
    for i = 1, math.min(K, #hits) do
      if set[hits[i].id] then
        found = found + 1
      end
    end
  end
  return found / (K * #sets)
end

-- The median seconds of PASSES runs of fn(results), and the last results.
local function timed(fn)
  local times, results = {}, nil
  for r = 1, PASSES do
    results = {}
    collectgarbage()
    local t0 = clock()
    fn(results)
    times[r] = clock() - t0
  end
  return median(times), results
end

local function search_all(index, queries, opts)
  if not opts then
    return timed(function(results)
      for q = 1, #queries do
        results[q] = index:search(queries[q], K)
      end
    end)
  end
  return timed(function(results)
    for q = 1, #queries do
      results[q] = index:search(queries[q], K, opts)
    end
  end)
end

-- Exact top-10 in Lua (double precision) for the first few queries: checks
-- the C kernels without trusting them.
local function reference_agreement(base, queries, gt, nref)
  local dim = #base[1] // 4
  local fmt = "<" .. string.rep("f", dim)
  local qs, tops = {}, {}
  for q = 1, nref do
    qs[q] = { string.unpack(fmt, queries[q]) }
    tops[q] = {}
  end
  for i = 1, #base do
    local x = { string.unpack(fmt, base[i]) }
    for q = 1, nref do
      local y, s = qs[q], 0
      for j = 1, dim do
        s = s + x[j] * y[j]
      end
      local top = tops[q]
      if #top < K or s > top[#top].s then
        local p = math.min(#top + 1, K)
        while p > 1 and top[p - 1].s < s do
          top[p] = top[p - 1]
          p = p - 1
        end
        top[p] = { s = s, row = i - 1 }
      end
    end
  end
  local agree = 0
  for q = 1, nref do
    local set = {}
    for _, r in ipairs(gt[q]) do
      set[r] = true
    end
    for _, t in ipairs(tops[q]) do
      agree = agree + (set[t.row] and 1 or 0)
    end
  end
  return agree, nref * K
end

-- }==========================================================
-- {========================================================== peers

local function run_peer(dir, dim)
  local cmd = string.format("%s bench/peers/ann_peer.py %s --dim %d 2>&1", PYTHON,
    shell_quote(dir), dim)
  local peer = { ef = {} }
  local p = assert(io.popen(cmd))
  for line in p:lines() do
    print(line)
    local v = line:match("^hnswlib build_s (%S+)")
    if v then
      peer.build_s = tonumber(v)
    end
    local ef, r, q = line:match("^hnswlib ef (%d+) recall (%S+) qps (%S+)")
    if ef then
      peer.ef[#peer.ef + 1] = { ef = tonumber(ef), recall = tonumber(r), qps = tonumber(q) }
    end
    local fq, bq, fr = line:match("^faiss flat_qps (%S+) batch_qps (%S+) recall (%S+)")
    if fq then
      peer.flat_qps, peer.batch_qps, peer.flat_recall = tonumber(fq), tonumber(bq), tonumber(fr)
    end
  end
  if not p:close() then
    print("peer failed; it needs: apt-get install -y python3-hnswlib python3-faiss python3-numpy")
  end
  return peer
end

-- The first row of a sweep with recall@10 >= 0.95 (rows in ef order).
local function first_good(rows)
  for _, row in ipairs(rows) do
    if row.recall >= 0.95 then
      return row
    end
  end
end

local function compare(ours, peer)
  print("comparison (one thread, one query per call; ratio = rag / peer speed):")
  local a, b = first_good(ours.ef), first_good(peer.ef)
  local function fmt_row(row)
    return row and string.format("ef %3d recall %.4f %8.0f q/s", row.ef, row.recall, row.qps)
      or "recall@10 never reaches 0.95"
  end
  print(string.format("  smallest ef with recall@10 >= 0.95: rag.hnsw  %s", fmt_row(a)))
  print(string.format("  smallest ef with recall@10 >= 0.95: hnswlib   %s", fmt_row(b)))
  if a and b then
    print(string.format("  hnsw queries/s at recall >= 0.95: rag / hnswlib = %.2f", a.qps / b.qps))
  end
  if peer.build_s then
    print(string.format("  build: rag %.2f s, hnswlib %.2f s: speed ratio (hnswlib s / rag s)"
      .. " = %.2f", ours.build_s, peer.build_s, peer.build_s / ours.build_s))
  end
  if peer.flat_qps then
    print(string.format("  exact one at a time: rag.vec %.0f q/s, faiss IndexFlatIP %.0f q/s:"
      .. " ratio %.2f", ours.exact_qps, peer.flat_qps, ours.exact_qps / peer.flat_qps))
    print(string.format("  exact batch: rag.vec search_batch %.0f q/s, faiss %.0f q/s: ratio %.2f",
      ours.batch_qps, peer.batch_qps, ours.batch_qps / peer.batch_qps))
  end
end

-- }==========================================================
-- {========================================================== main

local function machine()
  local cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"):gsub("^%s+", "")
  local l3 = sh("lscpu | grep 'L3 cache' | cut -d: -f2"):gsub("^%s+", "")
  print(string.format("machine: %s, %s cores, L3 %s; %s", cpu, sh("nproc"),
    l3 ~= "" and l3 or "?", _VERSION))
  local line = util.membw()
  local bw = tonumber(line:match("^([%d.]+) GB/s"))
  print("memory read bandwidth (bench/membw.c): " .. (bw and line or "unavailable: " .. line))
  return bw
end

local function build_exact(base, dim, keep)
  local v = rag.vec.new({ dim = dim, metric = "dot" })
  for i = 1, #base do
    if not keep or keep[i] then
      v:add(tostring(i - 1), base[i])
    end
  end
  return v
end

local function bench_hnsw(o, base, queries, sets, ours)
  local n, dim = #base, o.dim
  collectgarbage()
  local t0 = clock()
  local h = rag.hnsw.new({ dim = dim, metric = "dot", dtype = o.dtype, M = M,
    ef_construction = 200, seed = 100, capacity = n })
  for i = 1, n do
    h:add(tostring(i - 1), base[i])
  end
  ours.build_s = clock() - t0
  print(string.format("hnsw build (%s, M %d, ef_construction 200): %.2f s, %.0f vectors/s",
    o.dtype, M, ours.build_s, n / ours.build_s))
  local st = h:stats()
  local budget = dim * ELT[o.dtype] + M * 2 * 4 + 64
  print(string.format("hnsw memory: %d bytes, %.1f per vector; budget dim*%d + M*2*4 + 64 = %d"
    .. " (%s)", st.memory, st.memory / n, ELT[o.dtype], budget,
    st.memory / n <= budget and "within" or "OVER"))
  local keys = {}
  for key in pairs(st) do
    keys[#keys + 1] = key
  end
  table.sort(keys)
  for i, key in ipairs(keys) do
    keys[i] = key .. "=" .. tostring(st[key])
  end
  print("hnsw stats: " .. table.concat(keys, " "))
  assert(#h == n, "#h is not n")
  print(string.format("%6s %10s %10s %12s", "ef", "recall@10", "queries/s", "ms/query"))
  ours.ef = {}
  for _, ef in ipairs(EFS) do
    local t, results = search_all(h, queries, { ef = ef })
    local row = { ef = ef, recall = recall(results, sets), qps = #queries / t }
    ours.ef[#ours.ef + 1] = row
    print(string.format("%6d %10.4f %10.0f %12.4f", ef, row.recall, row.qps, 1e3 * t / #queries))
  end
  return h
end

local function bench_exact(v, o, n, queries, qpacked, sets, bw, ours)
  local nq = #queries
  local bytes = nq * n * o.dim * 4
  -- search reads the rows' high halves and norms (f32 two-pass scan, docs/api.md)
  local sbytes = nq * n * (o.dim * 2 + 4)
  local t, results = search_all(v, queries)
  local tb, bresults = timed(function(res)
    res[1] = v:search_batch(qpacked, K)
  end)
  bresults = bresults[1]
  ours.exact_qps, ours.batch_qps = nq / t, nq / tb
  local function share(gbs)
    return bw and string.format(", %.0f%% of %.2f GB/s read bandwidth", 100 * gbs / bw, bw) or ""
  end
  print(string.format("exact one at a time (v:search): %.0f queries/s, reads %.2f GB/s%s"
    .. " (the rows' high halves)", nq / t, sbytes / t / 1e9, share(sbytes / t / 1e9)))
  print(string.format("exact batch (v:search_batch): %.0f queries/s, scan %.2f GB/s%s",
    nq / tb, bytes / tb / 1e9, share(bytes / tb / 1e9)))
  print(string.format("  (the base is %.1f MB; a scan faster than memory means it came from"
    .. " cache)", n * o.dim * 4 / 1e6))
  print(string.format("exact correctness: recall@10 vs gt: search %.4f, search_batch %.4f",
    recall(results, sets), recall(bresults, sets)))
end

local function bench_remove(o, h, base, queries, qpacked)
  local n = #base
  local rng = prng(o.seed + 1)
  local order = {}
  for i = 1, n do
    order[i] = i
  end
  local m = math.floor(o.remove * n + 0.5)
  for i = 1, m do -- a partial Fisher-Yates shuffle: order[1..m] is the sample
    local j = i + rng.below(n - i + 1)
    order[i], order[j] = order[j], order[i]
  end
  local removed, keep = {}, {}
  for i = 1, n do
    keep[i] = true
  end
  local t0 = clock()
  for i = 1, m do
    local id = tostring(order[i] - 1)
    assert(h:remove(id), "h:remove returned false for a live id")
  end
  local t = clock() - t0
  for i = 1, m do
    removed[tostring(order[i] - 1)] = true
    keep[order[i]] = nil
  end
  assert(not h:remove(tostring(order[1] - 1)), "removing twice returned true")
  assert(#h == n - m, "#h after removing is not n - removed")
  local st = h:stats()
  print(string.format("remove %d of %d ids (%.0f%%, seed %d): %.3f s, %.0f removes/s; #h %d,"
    .. " stats count %s dead %s", m, n, 100 * o.remove, o.seed + 1, t, m / t, #h,
    tostring(st.count), tostring(st.dead)))
  local v = build_exact(base, o.dim, keep)
  local sets = id_sets(gt_of(v:search_batch(qpacked, K)))
  v:close()
  for _, ef in ipairs({ 64, 128 }) do
    local tq, results = search_all(h, queries, { ef = ef })
    for _, hits in ipairs(results) do
      for _, hit in ipairs(hits) do
        if removed[hit.id] then
          error("removed id " .. hit.id .. " returned at ef " .. ef, 0)
        end
      end
    end
    print(string.format("after remove: ef %d recall@10 %.4f vs exact over the remaining rows,"
      .. " %.0f queries/s; no removed id returned", ef, recall(results, sets), #queries / tq))
  end
end

local function main()
  local o = parse_args(arg)
  local bw = machine()
  local dir, base, queries = load_data(o)
  local n, nq = #base, #queries
  if n < K or nq == 0 then
    error("bench/ann.lua: need at least 10 base rows and one query", 0)
  end
  if o.dir then
    print(string.format("data: %s: n %d, dim %d, nq %d", dir, n, o.dim, nq))
  else
    print(string.format("data: generated: n %d, dim %d, nq %d; rank %d, noise %g, seed %d, unit"
      .. " length; %s (%s)", n, o.dim, nq, o.rank, o.noise, o.seed, dir,
      o.reused and "reused" or string.format("generated in %.1f s", o.gen_s)))
  end
  local qpacked = table.concat(queries)
  local v = build_exact(base, o.dim)
  local gt
  if o.dir and file_size(dir .. "/gt.i32") then
    gt = read_gt(dir .. "/gt.i32", nq)
  else
    local t0 = clock()
    gt = gt_of(v:search_batch(qpacked, K))
    write_gt(dir .. "/gt.i32", gt)
    print(string.format("gt: exact top-%d by rag.vec search_batch in %.2f s, written to %s/gt.i32",
      K, clock() - t0, dir))
  end
  local nref = math.min(5, nq)
  local agree, total = reference_agreement(base, queries, gt, nref)
  print(string.format("gt check: a double-precision Lua scan agrees on %d of %d top-%d rows"
    .. " (first %d queries)", agree, total, K, nref))
  local sets = id_sets(gt)
  local ours = {}
  local h = bench_hnsw(o, base, queries, sets, ours)
  bench_exact(v, o, n, queries, qpacked, sets, bw, ours)
  v:close()
  if o.remove then
    bench_remove(o, h, base, queries, qpacked)
  end
  h:close()
  if o.peer then
    compare(ours, run_peer(dir, o.dim))
  end
end

main()
