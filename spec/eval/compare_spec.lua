-- rag.eval.compare: p-values against an exact enumeration of every sign
-- flip written here (independently of the module), the Monte Carlo and
-- bootstrap paths close to it and reproducible by seed, the means, the
-- queries that changed most, queries on one side only, per-query tables
-- from rag.eval.ir and rag.eval.ragas.
local rag = require("rag")

local compare = rag.eval.compare

-- The two-sided p-value of the paired randomization test by enumerating
-- all 2^n sign vectors recursively: the share whose |mean| reaches the
-- observed |mean|.
local function exact_p(d)
  local n, observed = #d, 0
  for i = 1, n do
    observed = observed + d[i]
  end
  local hits, total = 0, 0
  local function walk(i, sum)
    if i > n then
      total = total + 1
      if math.abs(sum) >= math.abs(observed) - 1e-12 then
        hits = hits + 1
      end
      return
    end
    walk(i + 1, sum + d[i])
    walk(i + 1, sum - d[i])
  end
  walk(1, 0)
  return hits / total
end

-- Per-query tables { q1 = { m = a[1] }, ... } and the differences b - a.
local function tables(xs, ys)
  local a, b, d = {}, {}, {}
  for i = 1, #xs do
    a["q" .. i], b["q" .. i] = { m = xs[i] }, { m = ys[i] }
    d[i] = ys[i] - xs[i]
  end
  return a, b, d
end

local XS = { 0.10, 0.40, 0.35, 0.80, 0.25, 0.50, 0.05, 0.60, 0.30, 0.45, 0.20, 0.70 }
local YS = { 0.30, 0.55, 0.30, 0.95, 0.45, 0.65, 0.25, 0.60, 0.50, 0.40, 0.50, 0.90 }

describe("rag.eval.compare", function()
  it("gives the exact randomization p-value when 2^n <= rounds", function()
    local a, b, d = tables(XS, YS)
    local want = exact_p(d)
    local r = compare(a, b)
    local m = r.metrics.m
    assert.equal(12, m.n)
    assert.equal(want, m.p)
    assert.truthy(want < 0.05) -- b is better on 9 of 12 queries
    local sa, sb = 0, 0
    for i = 1, 12 do
      sa, sb = sa + XS[i], sb + YS[i]
    end
    assert.near(sa / 12, m.a, 1e-12)
    assert.near(sb / 12, m.b, 1e-12)
    assert.near((sb - sa) / 12, m.diff, 1e-12)
    assert.equal("randomization", r.test)
  end)

  it("is exact on small cases worked by hand", function()
    -- differences 0.2, 0.4, -0.1: |sum| >= 0.5 for 4 of the 8 flips
    local r = compare({ q1 = { m = 0.1 }, q2 = { m = 0.5 }, q3 = { m = 0.2 } },
      { q1 = { m = 0.3 }, q2 = { m = 0.9 }, q3 = { m = 0.1 } })
    assert.equal(0.5, r.metrics.m.p)
    -- every difference the same sign: 2 of 2^5 flips
    local a, b = tables({ 0, 0, 0, 0, 0 }, { 1, 1, 1, 1, 1 })
    assert.equal(2 / 32, compare(a, b).metrics.m.p)
    -- no difference at all
    a, b = tables({ 0.5, 0.2 }, { 0.5, 0.2 })
    assert.equal(1, compare(a, b).metrics.m.p)
  end)

  it("estimates it by random flips otherwise, reproducibly by seed", function()
    local a, b, d = tables(XS, YS)
    local want = exact_p(d)
    local r1 = compare(a, b, { rounds = 2000, seed = 7 })
    local r2 = compare(a, b, { rounds = 2000, seed = 7 })
    assert.equal(r1.metrics.m.p, r2.metrics.m.p)
    assert.truthy(math.abs(r1.metrics.m.p - want) < 0.02)
    assert.truthy(r1.metrics.m.p >= 1 / 2001)
    local r3 = compare(a, b, { rounds = 2000, seed = 8 })
    assert.truthy(math.abs(r3.metrics.m.p - want) < 0.02)
    -- 20 equal gains: 2 of 2^20 flips reach them (p ~ 2e-6), so no random
    -- round does, and the estimate is its floor 1 / (rounds + 1), never 0
    local xs, ys = {}, {}
    for i = 1, 20 do
      xs[i], ys[i] = 0.25, 0.5
    end
    a, b = tables(xs, ys)
    assert.equal(1 / 1001, compare(a, b, { rounds = 1000 }).metrics.m.p)
  end)

  it("runs a paired bootstrap test", function()
    local a, b = tables(XS, YS)
    local r = compare(a, b, { test = "bootstrap", rounds = 5000, seed = 3 })
    assert.equal("bootstrap", r.test)
    assert.truthy(r.metrics.m.p < 0.05)
    assert.equal(r.metrics.m.p, compare(a, b, { test = "bootstrap", rounds = 5000,
      seed = 3 }).metrics.m.p)
    local c, e = tables({ 0.5, 0.4, 0.6, 0.5 }, { 0.6, 0.3, 0.5, 0.6 })
    assert.truthy(compare(c, e, { test = "bootstrap" }).metrics.m.p > 0.3)
  end)

  it("lists the queries that changed most and those on one side only", function()
    local a, b = tables(XS, YS)
    a.only = { m = 1 }
    b.extra = { m = 0 }
    b[99] = { m = 0 }
    local r = compare(a, b)
    assert.same({ "only" }, r.only_a)
    assert.same({ "99", "extra" }, r.only_b)
    assert.equal(12, r.metrics.m.n)
    local c = r.metrics.m.changed
    assert.equal(5, #c)
    -- |diff| 0.3 (q11), then 0.2 in id order: q1, q12, q5, q7
    assert.same({ "q11", "q1", "q12", "q5", "q7" }, { c[1].query, c[2].query, c[3].query,
      c[4].query, c[5].query })
    assert.near(0.3, c[1].diff, 1e-12)
    assert.equal(0.20, c[1].a)
    assert.equal(2, #compare(a, b, { top = 2 }).metrics.m.changed)
  end)

  it("compares each metric over the queries that have it on both sides", function()
    local r = compare({ q1 = { x = 1, y = 0.5, note = "a" }, q2 = { x = 0 } },
      { q1 = { x = 0, y = 1 }, q2 = { x = 1, y = 1 } })
    assert.equal(2, r.metrics.x.n)
    assert.equal(1, r.metrics.y.n)
    assert.equal(0.5, r.metrics.y.diff)
    assert.is_nil(r.metrics.note)
  end)

  it("reads rag.eval.ir's per-query tables and rag.eval.ragas's per_sample", function()
    local qrels = { q1 = { d1 = 1 }, q2 = { d2 = 1 }, q3 = { d3 = 1 } }
    local _, pa = rag.eval.ir({ q1 = { "d1" }, q2 = { "x", "d2" }, q3 = { "x" } }, qrels,
      { "ndcg@10", "mrr" }, { per_query = true })
    local _, pb = rag.eval.ir({ q1 = { "d1" }, q2 = { "d2" }, q3 = { "d3" } }, qrels,
      { "ndcg@10", "mrr" }, { per_query = true })
    local r = compare(pa, pb)
    assert.equal(3, r.metrics["ndcg@10"].n)
    assert.near(0.5, r.metrics.mrr.diff, 1e-12) -- (0 + 0.5 + 1) / 3
    local per_sample = { { faithfulness = 0.5, verdicts = {} }, { faithfulness = 1 } }
    r = compare(per_sample, { { faithfulness = 1 }, { faithfulness = 1 } })
    assert.equal(0.25, r.metrics.faithfulness.diff)
    assert.equal("1", r.metrics.faithfulness.changed[1].query)
  end)

  it("raises on bad input", function()
    assert.has_error(function()
      compare(nil, {})
    end, "rag.eval.compare: a must be a table of per-query scores, got nil")
    assert.has_error(function()
      compare({ q = 1 }, {})
    end, "rag.eval.compare: a[q] must be a table, got number")
    assert.has_error(function()
      compare({ [1] = {}, ["1"] = {} }, {})
    end, "rag.eval.compare: a holds query '1' twice")
    assert.has_error(function()
      compare({}, {}, { test = "t" })
    end, "rag.eval.compare: 'test' must be one of randomization, bootstrap, got 't'")
    assert.has_error(function()
      compare({}, {}, { rounds = 0 })
    end)
  end)
end)
