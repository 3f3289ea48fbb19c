--- rag.eval.compare: two systems' per-query scores side by side, per metric:
-- the means, their difference, a paired two-sided p-value (randomization
-- test by sign flips, or bootstrap) and the queries that changed most.
-- Reproducible: a seeded generator, queries in id order. See
-- docs/evaluation.md; Smucker, Allan and Carterette, CIKM 2007.
-- @module rag.eval.compare
local opts_check = require("rag.opts").check

local type, pairs, ipairs, tostring, tonumber, error = type, pairs, ipairs, tostring, tonumber,
  error
local format = string.format
local abs, floor, sort = math.abs, math.floor, table.sort

local M = {}

local FNAME = "rag.eval.compare"

local SCHEMA = {
  test = { "string", enum = { "randomization", "bootstrap" }, default = "randomization" },
  rounds = { "number", int = true, min = 1, max = 1e7, default = 10000 },
  seed = { "number", int = true, min = 0, max = 2 ^ 53, default = 1 },
  top = { "number", int = true, min = 0, default = 5 },
}

-- {====== A seeded generator ======}
-- L'Ecuyer's combined LCG (CACM 31(6), 1988): period ~2.3e18, every product
-- below 2^53, so it is exact in doubles on every Lua (5.1 to 5.4, LuaJIT).

local M1, M2 = 2147483563, 2147483399

local function generator(seed)
  local s1 = seed % (M1 - 1) + 1
  local s2 = floor(seed / (M1 - 1)) % (M2 - 1) + 1
  -- uniform in [0, 1)
  return function()
    s1 = (40014 * s1) % M1
    s2 = (40692 * s2) % M2
    local z = (s1 - s2) % (M1 - 1)
    return z / (M1 - 1)
  end
end

-- {====== Tests ======}

-- Two-sided paired randomization p-value of the differences d (sum of d as
-- the statistic): exact over all 2^n sign flips when 2^n <= rounds, else
-- (count + 1) / (rounds + 1) over random flips.
local function randomization(d, rounds, rnd)
  local n = #d
  local observed, scale = 0, 0
  for i = 1, n do
    observed, scale = observed + d[i], scale + abs(d[i])
  end
  if scale == 0 then
    return 1
  end
  local bar = abs(observed) - 1e-9 * scale -- a flip that only reorders sums ties
  if 2 ^ n <= rounds then
    local count = 0
    for mask = 0, 2 ^ n - 1 do
      local sum, m = 0, mask
      for i = 1, n do
        if m % 2 == 1 then
          sum = sum - d[i]
        else
          sum = sum + d[i]
        end
        m = floor(m / 2)
      end
      if abs(sum) >= bar then
        count = count + 1
      end
    end
    return count / 2 ^ n
  end
  local count = 0
  for _ = 1, rounds do
    local sum = 0
    for i = 1, n do
      if rnd() < 0.5 then
        sum = sum - d[i]
      else
        sum = sum + d[i]
      end
    end
    if abs(sum) >= bar then
      count = count + 1
    end
  end
  return (count + 1) / (rounds + 1)
end

-- Two-sided paired bootstrap p-value: resamples of the differences shifted
-- to mean 0, against the observed mean.
local function bootstrap(d, rounds, rnd)
  local n = #d
  local mean, scale = 0, 0
  for i = 1, n do
    mean, scale = mean + d[i], scale + abs(d[i])
  end
  if scale == 0 then
    return 1
  end
  mean = mean / n
  local bar = abs(mean) - 1e-9 * scale / n
  local count = 0
  for _ = 1, rounds do
    local sum = 0
    for _ = 1, n do
      sum = sum + d[floor(rnd() * n) + 1] - mean
    end
    if abs(sum / n) >= bar then
      count = count + 1
    end
  end
  return (count + 1) / (rounds + 1)
end

-- {====== Per-query tables ======}

-- { [id] = { metric = number } } with ids as strings; raises on a bad shape
-- or an id given both as a number and a string.
local function normalize(t, what)
  if type(t) ~= "table" then
    error(FNAME .. ": " .. what .. " must be a table of per-query scores, got " .. type(t), 3)
  end
  local out = {}
  for q, row in pairs(t) do
    if type(q) ~= "string" and type(q) ~= "number" then
      error(FNAME .. ": " .. what .. " has a query id that is a " .. type(q), 3)
    end
    if type(row) ~= "table" then
      error(FNAME .. ": " .. what .. "[" .. tostring(q) .. "] must be a table, got "
        .. type(row), 3)
    end
    local id = tostring(q)
    if out[id] then
      error(FNAME .. ": " .. what .. " holds query '" .. id .. "' twice", 3)
    end
    out[id] = row
  end
  return out
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do
    keys[#keys + 1] = k
  end
  sort(keys)
  return keys
end

-- The metric names with a number in some query of either side, sorted.
local function metric_names(a, b)
  local found, out = {}, {}
  for _, t in ipairs({ a, b }) do
    for _, row in pairs(t) do
      for m, v in pairs(row) do
        if type(m) == "string" and type(v) == "number" and not found[m] then
          found[m] = true
          out[#out + 1] = m
        end
      end
    end
  end
  sort(out)
  return out
end

-- The queries that changed most: top `k` by |difference| (to 12 significant
-- digits, so that 0.3 - 0.1 and 0.2 tie), ties by id.
local function most_changed(rows, k)
  local order = {}
  for i, r in ipairs(rows) do
    order[i] = r
    r.key = tonumber(format("%.12g", abs(r.diff)))
  end
  sort(order, function(x, y)
    if x.key ~= y.key then
      return x.key > y.key
    end
    return x.query < y.query
  end)
  local out = {}
  for _, r in ipairs(order) do
    if #out < k and r.key > 0 then
      out[#out + 1] = { query = r.query, a = r.a, b = r.b, diff = r.diff }
    end
  end
  return out
end

local function compare_metric(a, b, queries, m, o)
  local rows, d = {}, {}
  local sum_a, sum_b = 0, 0
  for _, q in ipairs(queries) do
    local x, y = a[q][m], b[q][m]
    if type(x) == "number" and type(y) == "number" and x == x and y == y then
      rows[#rows + 1] = { query = q, a = x, b = y, diff = y - x }
      d[#d + 1] = y - x
      sum_a, sum_b = sum_a + x, sum_b + y
    end
  end
  local n = #rows
  if n == 0 then
    return nil
  end
  local rnd = generator(o.seed)
  local p = o.test == "bootstrap" and bootstrap(d, o.rounds, rnd) or randomization(d, o.rounds, rnd)
  return { n = n, a = sum_a / n, b = sum_b / n, diff = sum_b / n - sum_a / n, p = p,
    changed = most_changed(rows, o.top) }
end

--- Compares per-query scores of two systems (see docs/evaluation.md).
-- @tparam table a `a[query][metric] = number` (rag.eval.ir's per_query,
--   rag.eval.ragas's per_sample)
-- @tparam table b the same for the other system
-- @tparam[opt] table opts `test` ("randomization" or "bootstrap"),
--   `rounds` (10000), `seed` (1), `top` (5)
-- @treturn table `{ metrics = { [m] = { n =, a =, b =, diff =, p =,
--   changed = { { query =, a =, b =, diff = }, ... } } }, only_a =, only_b =,
--   test =, rounds =, seed = }`
-- @raise on a bad argument or option
function M.compare(a, b, opts)
  local o = opts_check(FNAME, opts, SCHEMA, 2)
  a, b = normalize(a, "a"), normalize(b, "b")
  local both, only_a, only_b = {}, {}, {}
  for _, q in ipairs(sorted_keys(a)) do
    if b[q] then
      both[#both + 1] = q
    else
      only_a[#only_a + 1] = q
    end
  end
  for _, q in ipairs(sorted_keys(b)) do
    if not a[q] then
      only_b[#only_b + 1] = q
    end
  end
  local ta, tb = {}, {}
  for _, q in ipairs(both) do
    ta[q], tb[q] = a[q], b[q]
  end
  local metrics = {}
  for _, m in ipairs(metric_names(ta, tb)) do
    metrics[m] = compare_metric(ta, tb, both, m, o)
  end
  return { metrics = metrics, only_a = only_a, only_b = only_b, test = o.test,
    rounds = o.rounds, seed = o.seed }
end

return M
