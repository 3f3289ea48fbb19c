-- Seeded vectors for the vector-index specs: embedding-like data (a low-rank
-- signal plus noise), plain random vectors, and exact references computed in
-- Lua. The same numbers on every Lua version.
local helpers = require("spec.helpers")

local M = {}

--- A generator of uniform numbers in (0, 1) and Gaussians from seed.
function M.source(seed)
  local r = helpers.rng(seed)
  local function unif()
    return r(2147483646) / 2147483647
  end
  local function gauss()
    return math.sqrt(-2 * math.log(unif())) * math.cos(2 * math.pi * unif())
  end
  return unif, gauss
end

--- n vectors of dim components: rank-`rank` signal plus noise (sigma).
function M.lowrank(seed, n, dim, rank, sigma)
  local _, gauss = M.source(seed)
  local basis = {}
  for i = 1, rank do
    basis[i] = {}
    for d = 1, dim do
      basis[i][d] = gauss()
    end
  end
  local out = {}
  for i = 1, n do
    local c, v = {}, {}
    for j = 1, rank do
      c[j] = gauss()
    end
    for d = 1, dim do
      local s = (sigma or 0.3) * gauss()
      for j = 1, rank do
        s = s + c[j] * basis[j][d]
      end
      v[d] = s
    end
    out[i] = v
  end
  return out
end

--- n vectors with Gaussian components.
function M.random(seed, n, dim)
  local _, gauss = M.source(seed)
  local out = {}
  for i = 1, n do
    local v = {}
    for d = 1, dim do
      v[d] = gauss()
    end
    out[i] = v
  end
  return out
end

function M.normalize(v)
  local s = 0
  for _, x in ipairs(v) do
    s = s + x * x
  end
  s = math.sqrt(s)
  local out = {}
  for i, x in ipairs(v) do
    out[i] = x / s
  end
  return out
end

--- The score rag gives a stored vector x for query q: dot (cosine: both
--- unit length) or the negated squared distance.
function M.score(metric, q, x)
  local s = 0
  if metric == "l2" then
    for i = 1, #q do
      local d = q[i] - x[i]
      s = s + d * d
    end
    return -s
  end
  if metric == "cosine" then
    q = M.normalize(q)
  end
  for i = 1, #q do
    s = s + q[i] * x[i]
  end
  return s
end

--- The ids of `items` ({ id = vector }) best for q: exact, ties by id.
function M.topk(metric, items, q, k)
  local all = {}
  for id, x in pairs(items) do
    all[#all + 1] = { id = id, score = M.score(metric, q, x) }
  end
  table.sort(all, function(a, b)
    if a.score ~= b.score then
      return a.score > b.score
    end
    return a.id < b.id
  end)
  local out = {}
  for i = 1, math.min(k, #all) do
    out[i] = all[i]
  end
  return out
end

--- recall@k of hits against the reference hits.
function M.recall(hits, ref)
  local want, got = {}, 0
  for _, h in ipairs(ref) do
    want[h.id] = true
  end
  for _, h in ipairs(hits) do
    if want[h.id] then
      got = got + 1
    end
  end
  return got / #ref
end

return M
