-- rag.rerank: lost-in-the-middle orders against simulations of LangChain's
-- LongContextReorder and Haystack's LostInTheMiddleRanker, MMR against
-- LangChain's maximal_marginal_relevance transcribed into Lua, top-p
-- against Haystack's TopPSampler rule, min_score, and errors.
local rag = require("rag")
local helpers = require("spec.helpers")

local rerank = rag.rerank

-- n hits best first: ids h01, h02, ... (byte order = rank order).
local function hits(n)
  local t = {}
  for i = 1, n do
    t[i] = { id = string.format("h%02d", i), score = n - i + 1 }
  end
  return t
end

local function ranks(list)
  local t = {}
  for i, h in ipairs(list) do
    t[i] = tonumber(h.id:sub(2))
  end
  return t
end

-- LangChain: documents.reverse(); even i -> insert(0), odd i -> append.
local function langchain_litm(n)
  local docs, out = {}, {}
  for i = 1, n do
    docs[i] = n - i + 1
  end
  for i, v in ipairs(docs) do
    if (i - 1) % 2 == 1 then
      out[#out + 1] = v
    else
      table.insert(out, 1, v)
    end
  end
  return out
end

-- Haystack: start with [first]; insert each next at len // 2 + len % 2.
local function haystack_litm(n)
  if n == 0 then
    return {}
  end
  local out = { 1 }
  for r = 2, n do
    local len = #out
    table.insert(out, math.floor(len / 2) + len % 2 + 1, r)
  end
  return out
end

describe("rag.rerank.litm", function()
  it("gives the issue's examples", function()
    assert.are.same({ 2, 4, 3, 1 }, ranks(rerank.litm(hits(4), { best_first = false })))
    assert.are.same({ 2, 4, 6, 5, 3, 1 }, ranks(rerank.litm(hits(6), { best_first = false })))
    assert.are.same({ 1, 3, 4, 2 }, ranks(rerank.litm(hits(4), { best_first = true })))
    assert.are.same({ 1, 3, 5, 6, 4, 2 }, ranks(rerank.litm(hits(6))))
  end)

  it("matches both libraries for n = 0 .. 40", function()
    for n = 0, 40 do
      assert.are.same(langchain_litm(n), ranks(rerank.litm(hits(n), { best_first = false })))
      assert.are.same(haystack_litm(n), ranks(rerank.litm(hits(n), { best_first = true })))
    end
  end)

  it("returns the caller's own hit tables, untouched", function()
    local h = hits(3)
    local r = rerank.litm(h)
    assert.are.equal(h[1], r[1])
    assert.are.equal(h[2], r[3])
    assert.are.equal(3, #h)
  end)

  it("raises on misuse", function()
    assert.has_error(function() rerank.litm("x") end,
      "rag.rerank.litm: hits must be a list of hits, got string")
    assert.has_error(function() rerank.litm({ 1 }) end,
      "rag.rerank.litm: hit 1 must be a table, got number")
    assert.has_error(function() rerank.litm({ {} }) end,
      "rag.rerank.litm: hit 1: id must be a string or a number, got nil")
    assert.has_error(function() rerank.litm(hits(2), { best_first = 1 }) end,
      "rag.rerank.litm: option 'best_first' must be a boolean, got number")
    assert.has_error(function() rerank.litm(hits(2), { best = true }) end,
      "rag.rerank.litm: unknown option 'best'")
  end)
end)

local function cosine(a, b)
  local d, na, nb = 0, 0, 0
  for i = 1, #a do
    d, na, nb = d + a[i] * b[i], na + a[i] * a[i], nb + b[i] * b[i]
  end
  if na == 0 or nb == 0 then
    return 0
  end
  return d / (math.sqrt(na) * math.sqrt(nb))
end

-- LangChain's maximal_marginal_relevance (argmax and strict > keep the
-- first index on ties; ids here sort like indexes, as rag breaks ties by id).
local function langchain_mmr(q, vecs, lambda, k)
  local n = #vecs
  k = math.min(k, n)
  if k <= 0 then
    return {}
  end
  local simq = {}
  local best = 1
  for i = 1, n do
    simq[i] = cosine(q, vecs[i])
    if simq[i] > simq[best] then
      best = i
    end
  end
  local idxs, taken = { best }, { [best] = true }
  while #idxs < k do
    local bs, add = -math.huge, -1
    for i = 1, n do
      if not taken[i] then
        local red = -math.huge
        for _, j in ipairs(idxs) do
          red = math.max(red, cosine(vecs[i], vecs[j]))
        end
        local s = lambda * simq[i] - (1 - lambda) * red
        if s > bs then
          bs, add = s, i
        end
      end
    end
    idxs[#idxs + 1] = add
    taken[add] = true
  end
  return idxs
end

describe("rag.rerank.mmr", function()
  it("matches LangChain's maximal_marginal_relevance on 300 random cases", function()
    local rng = helpers.rng(5)
    for _ = 1, 300 do
      local n, dim = rng(12), 1 + rng(6)
      local h, vecs, byid = hits(n), {}, {}
      for i = 1, n do
        local v = {}
        for j = 1, dim do
          v[j] = (rng(2001) - 1001) / 1000
        end
        vecs[i], byid[h[i].id] = v, v
      end
      local q = {}
      for j = 1, dim do
        q[j] = (rng(2001) - 1001) / 1000
      end
      local lambda, k = (rng(11) - 1) / 10, rng(n + 2) - 1
      local want = langchain_mmr(q, vecs, lambda, k)
      assert.are.same(want, ranks(rerank.mmr(h, { vectors = vecs, query = q, lambda = lambda,
        k = k })))
      local packed = {}
      for i = 1, n do
        packed[h[i].id] = rag.vec.pack(vecs[i])
      end
      assert.are.same(want, ranks(rerank.mmr(h, { vectors = packed, query = rag.vec.pack(q),
        lambda = lambda, k = k })))
      assert.are.same(want, ranks(rerank.mmr(h, { vectors = byid, query = q, lambda = lambda,
        k = k })))
    end
  end)

  it("uses the hits' scores as relevance without a query", function()
    local h = { { id = "a", score = 0.9 }, { id = "b", score = 0.85 }, { id = "c", score = 0.5 } }
    local v = { { 1, 0 }, { 1, 0.01 }, { 0, 1 } }
    -- b is a near copy of a: diversity puts c second
    assert.are.same({ "a", "c", "b" }, { rerank.mmr(h, { vectors = v })[1].id,
      rerank.mmr(h, { vectors = v })[2].id, rerank.mmr(h, { vectors = v })[3].id })
    -- lambda = 1 is relevance alone
    local r = rerank.mmr(h, { vectors = v, lambda = 1 })
    assert.are.same({ "a", "b", "c" }, { r[1].id, r[2].id, r[3].id })
  end)

  it("treats a zero vector as unlike everything, and k = 0 as nothing", function()
    local h = hits(2)
    local r = rerank.mmr(h, { vectors = { { 0, 0 }, { 1, 0 } }, query = { 1, 0 } })
    assert.are.same({ 2, 1 }, ranks(r))
    assert.are.same({}, rerank.mmr(h, { vectors = { { 0, 0 }, { 1, 0 } }, k = 0 }))
    assert.are.same({}, rerank.mmr({}, { vectors = {}, query = { 1 } }))
  end)

  it("raises on misuse", function()
    local h = hits(2)
    local v = { { 1, 0 }, { 0, 1 } }
    local cases = {
      { { h, { query = { 1, 0 } } }, "rag.rerank.mmr: option 'vectors' must be a table, got nil" },
      { { h, { vectors = { { 1, 0 } } } }, "one vector per hit (2), got 1" },
      { { h, { vectors = { a = { 1 } } } },
        "rag.rerank.mmr: no vector for hit 1 (id 'h01')" },
      { { h, { vectors = { { 1, 0 }, { 1 } } } }, "vector 2 has 1 components, expected 2" },
      { { h, { vectors = v, query = { 1, 0, 0 } } },
        "rag.rerank.mmr: vector 1 has 2 components, expected 3" },
      { { h, { vectors = { { 1, 0 / 0 }, { 0, 1 } } } }, "component 2 is not a finite float" },
      { { h, { vectors = v, lambda = 2 } }, "rag.rerank.mmr: option 'lambda' must be in [0, 1]" },
      { { h, { vectors = v, k = 1.5 } }, "rag.rerank.mmr: option 'k' must be an integer" },
      { { h, { vectors = v, top = 1 } }, "rag.rerank.mmr: unknown option 'top'" },
      { { { { id = "a" } }, { vectors = { { 1 } } } }, "hit 1: score must be a finite number" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(rerank.mmr, c[1][1], c[1][2])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err) .. " / " .. c[2])
    end
  end)
end)

-- Haystack's TopPSampler: softmax, sort, cumulative <= p or isclose, at least one.
local function haystack_top_p(h, p)
  local mx = -math.huge
  for _, x in ipairs(h) do
    mx = math.max(mx, x.score)
  end
  local sum, pr = 0, {}
  for i, x in ipairs(h) do
    pr[i] = math.exp(x.score - mx)
    sum = sum + pr[i]
  end
  local idx = {}
  for i = 1, #h do
    pr[i] = pr[i] / sum
    idx[i] = i
  end
  table.sort(idx, function(a, b)
    if pr[a] ~= pr[b] then
      return pr[a] > pr[b]
    end
    return h[a].id < h[b].id
  end)
  local out, cum = {}, 0
  for _, i in ipairs(idx) do
    cum = cum + pr[i]
    if cum <= p or math.abs(cum - p) <= 1e-6 + 1e-5 * p then
      out[#out + 1] = h[i].id
    else
      break
    end
  end
  if #out == 0 and #idx > 0 then
    out[1] = h[idx[1]].id
  end
  return out
end

describe("rag.rerank.cutoff", function()
  it("keeps scores >= min_score, in the given order", function()
    local h = { { id = "a", score = 0.2 }, { id = "b", score = 0.9 }, { id = "c", score = 0.5 } }
    local r = rerank.cutoff(h, { min_score = 0.5 })
    assert.are.same({ "b", "c" }, { r[1].id, r[2].id })
    assert.are.equal(h[2], r[1])
  end)

  it("matches Haystack's TopPSampler rule on 300 random cases", function()
    local rng = helpers.rng(9)
    for _ = 1, 300 do
      local h = {}
      for i = 1, rng(10) - 1 do
        h[i] = { id = string.format("d%02d", rng(50)), score = (rng(41) - 21) / 4 }
      end
      local p = rng(101) / 100 - 0.01
      local got = {}
      for i, x in ipairs(rerank.cutoff(h, { top_p = p })) do
        got[i] = x.id
      end
      assert.are.same(haystack_top_p(h, p), got)
    end
  end)

  it("keeps at least the best hit, and applies min_score before top_p", function()
    local h = { { id = "a", score = 1 }, { id = "b", score = 3 }, { id = "c", score = 2 } }
    local r = rerank.cutoff(h, { top_p = 0 })
    assert.are.same({ "b" }, { r[1].id })
    r = rerank.cutoff(h, { min_score = 1.5, top_p = 1 })
    assert.are.same({ "b", "c" }, { r[1].id, r[2].id })
    assert.are.same({}, rerank.cutoff(h, { min_score = 4, top_p = 0.5 }))
  end)

  it("raises on misuse", function()
    local h = hits(2)
    assert.has_error(function() rerank.cutoff(h, { top_p = 1.5 }) end,
      "rag.rerank.cutoff: option 'top_p' must be in [0, 1]")
    assert.has_error(function() rerank.cutoff(h, { min_score = "x" }) end,
      "rag.rerank.cutoff: option 'min_score' must be a number, got string")
    assert.has_error(function() rerank.cutoff(h, { p = 1 }) end,
      "rag.rerank.cutoff: unknown option 'p'")
    assert.has_error(function() rerank.cutoff({ { id = "a", score = 1 / 0 } }, {}) end,
      "rag.rerank.cutoff: hit 1: score must be a finite number, got a non-finite number")
  end)
end)
