-- rag.eval: the C measures against values worked out by hand on a fixture
-- run, and against a second implementation written here in plain Lua from
-- trec_eval's definitions (ndcg_cut, recall, P, recip_rank, map_cut,
-- success) on 200 random runs; the query selection (trec_eval's default and
-- -c), duplicates, grades, bad input; rag.eval.beir on a tiny BEIR folder.
local rag = require("rag")
local helpers = require("spec.helpers")

local ir = rag.eval.ir
local LOG2 = math.log(2)

local function log2(x)
  return math.log(x) / LOG2
end

local function near(a, b)
  return math.abs(a - b) <= 1e-12
end

-- Raises, with msg somewhere in the message.
local function raises(fn, msg)
  local ok, err = pcall(fn)
  assert.is_false(ok, "no error; expected: " .. msg)
  assert.is_truthy(tostring(err):find(msg, 1, true), "got: " .. tostring(err))
end

-- {====== The reference, in plain Lua ======}

local function parse(name)
  local base, k = name:match("^(%a+)@(%d+)$")
  if not base then
    base = name
  end
  return base, k and tonumber(k) or math.huge
end

-- The run of one query as ids, repeats dropped (the first position stays).
local function ranked(hits)
  local seen, out = {}, {}
  for _, h in ipairs(hits or {}) do
    local id = tostring(type(h) == "table" and h.id or h)
    if not seen[id] then
      seen[id] = true
      out[#out + 1] = id
    end
  end
  return out
end

-- One measure of one query: docs = ranked ids, judged = { [id] = grade }.
local function measure(name, docs, judged, level)
  local base, k = parse(name)
  local n = math.min(#docs, k)
  local function grade(i)
    return judged[docs[i]] or 0
  end
  local nrel = 0
  for _, g in pairs(judged) do
    if g >= level then
      nrel = nrel + 1
    end
  end
  if base == "ndcg" then
    local dcg, idcg, gains = 0, 0, {}
    for i = 1, n do
      if grade(i) > 0 then
        dcg = dcg + grade(i) / log2(i + 1)
      end
    end
    for _, g in pairs(judged) do
      if g > 0 then
        gains[#gains + 1] = g
      end
    end
    table.sort(gains, function(a, b) return a > b end)
    for i = 1, math.min(#gains, k) do
      idcg = idcg + gains[i] / log2(i + 1)
    end
    return idcg > 0 and dcg / idcg or 0
  end
  local found, ap, first = 0, 0, nil
  for i = 1, n do
    if grade(i) >= level then
      found = found + 1
      ap = ap + found / i
      first = first or i
    end
  end
  if base == "recall" then
    return nrel > 0 and found / nrel or 0
  elseif base == "p" then
    return found / k
  elseif base == "mrr" then
    return first and 1 / first or 0
  elseif base == "map" then
    return nrel > 0 and ap / nrel or 0
  elseif base == "success" then
    return found > 0 and 1 or 0
  end
  error("reference: unknown measure " .. name)
end

-- Means and per-query values, like ir(run, qrels, measures, opts).
local function reference(run, qrels, measures, opts)
  opts = opts or {}
  local level = opts.level or 1
  local runs, judged = {}, {}
  for q, hits in pairs(run) do
    runs[tostring(q)] = hits
  end
  for q, t in pairs(qrels) do
    local j = {}
    for d, g in pairs(t) do
      j[tostring(d)] = g
    end
    judged[tostring(q)] = j
  end
  local sums, per, nq = {}, {}, 0
  for _, name in ipairs(measures) do
    sums[name] = 0
  end
  for q, j in pairs(judged) do
    if runs[q] or opts.missing == "zero" then
      nq = nq + 1
      per[q] = {}
      local docs = ranked(runs[q])
      for name in pairs(sums) do -- each name once, even when listed twice
        per[q][name] = measure(name, docs, j, level)
        sums[name] = sums[name] + per[q][name]
      end
    end
  end
  for name, s in pairs(sums) do
    sums[name] = nq > 0 and s / nq or 0
  end
  return sums, per
end

-- {====== The fixture ======}

-- q1: graded, one relevant document never retrieved, one judged 0, one unjudged.
-- q2: judged, nothing relevant. q3: repeats and shorter than every k.
-- q4: judged, not in the run. q5: in the run, not judged. 6: number ids.
local RUN = {
  q1 = {
    { id = "d1", score = 9 }, { id = "d2", score = 8 }, { id = "d3", score = 7 },
    { id = "d4", score = 6 }, { id = "d6", score = 5 }, { id = "d7", score = 4 },
  },
  q2 = { "x", "y", "z" },
  q3 = { "a", "b", { id = "a", score = 0 }, "c" },
  q5 = { "d1" },
  [6] = { 2, { id = 3 }, "4" },
}
local QRELS = {
  q1 = { d1 = 2, d2 = 0, d4 = 1, d5 = 3 },
  q2 = { x = 0, w = -1 },
  q3 = { a = 1, c = 1 },
  q4 = { d1 = 1 },
  ["6"] = { [3] = 1, ["4"] = 2 },
}
local MEASURES = {
  "ndcg@3", "ndcg@10", "ndcg", "recall@3", "recall@4", "recall", "p@5", "p@10",
  "mrr", "mrr@1", "map", "map@2", "success@1", "success@3",
}

-- Worked by hand from the definitions (ideal gains: q1 3,2,1; q3 1,1; 6 2,1).
local HAND = {
  q1 = {
    ["ndcg@3"] = 2 / (3 + 2 / log2(3) + 1 / 2),
    ["ndcg@10"] = (2 + 1 / log2(5)) / (3 + 2 / log2(3) + 1 / 2),
    ["ndcg"] = (2 + 1 / log2(5)) / (3 + 2 / log2(3) + 1 / 2),
    ["recall@3"] = 1 / 3, ["recall@4"] = 2 / 3, ["recall"] = 2 / 3,
    ["p@5"] = 2 / 5, ["p@10"] = 2 / 10,
    ["mrr"] = 1, ["mrr@1"] = 1,
    ["map"] = (1 / 1 + 2 / 4) / 3, ["map@2"] = (1 / 1) / 3,
    ["success@1"] = 1, ["success@3"] = 1,
  },
  q2 = {}, -- nothing relevant: every measure 0
  q3 = { -- a, b, c once each: ranks 1, 2, 3
    ["ndcg@3"] = (1 + 1 / 2) / (1 + 1 / log2(3)),
    ["ndcg@10"] = (1 + 1 / 2) / (1 + 1 / log2(3)),
    ["ndcg"] = (1 + 1 / 2) / (1 + 1 / log2(3)),
    ["recall@3"] = 1, ["recall@4"] = 1, ["recall"] = 1,
    ["p@5"] = 2 / 5, ["p@10"] = 2 / 10,
    ["mrr"] = 1, ["mrr@1"] = 1,
    ["map"] = (1 / 1 + 2 / 3) / 2, ["map@2"] = (1 / 1) / 2,
    ["success@1"] = 1, ["success@3"] = 1,
  },
  ["6"] = { -- 2 (unjudged), 3 (grade 1), 4 (grade 2)
    ["ndcg@3"] = (1 / log2(3) + 2 / 2) / (2 + 1 / log2(3)),
    ["ndcg@10"] = (1 / log2(3) + 2 / 2) / (2 + 1 / log2(3)),
    ["ndcg"] = (1 / log2(3) + 2 / 2) / (2 + 1 / log2(3)),
    ["recall@3"] = 1, ["recall@4"] = 1, ["recall"] = 1,
    ["p@5"] = 2 / 5, ["p@10"] = 2 / 10,
    ["mrr"] = 1 / 2, ["mrr@1"] = 0,
    ["map"] = (1 / 2 + 2 / 3) / 2, ["map@2"] = (1 / 2) / 2,
    ["success@1"] = 0, ["success@3"] = 1,
  },
}

local function hand(q, name)
  return HAND[q] and HAND[q][name] or 0
end

describe("rag.eval.ir", function()
  it("matches values worked out by hand on the fixture run", function()
    local means, per = ir(RUN, QRELS, MEASURES, { per_query = true })
    local queries = {}
    for q in pairs(per) do
      queries[#queries + 1] = q
    end
    table.sort(queries)
    assert.same({ "6", "q1", "q2", "q3" }, queries) -- judged and run only
    for _, name in ipairs(MEASURES) do
      local sum = 0
      for _, q in ipairs(queries) do
        assert.is_true(near(hand(q, name), per[q][name]),
          q .. " " .. name .. ": " .. per[q][name] .. " ~= " .. hand(q, name))
        sum = sum + hand(q, name)
      end
      assert.is_true(near(sum / 4, means[name]), name)
    end
  end)

  it("matches the Lua reference on the fixture run", function()
    for _, opts in ipairs({ {}, { missing = "zero" }, { level = 2 }, { missing = "skip" } }) do
      local means = ir(RUN, QRELS, MEASURES, opts)
      local ref = reference(RUN, QRELS, MEASURES, opts)
      for _, name in ipairs(MEASURES) do
        assert.is_true(near(ref[name], means[name]), name)
      end
    end
  end)

  it("counts judged queries missing from the run as zeros with missing = \"zero\"", function()
    local m1, per1 = ir(RUN, QRELS, { "mrr" }, { per_query = true })
    local m2, per2 = ir(RUN, QRELS, { "mrr" }, { missing = "zero", per_query = true })
    assert.is_nil(per1.q4)
    assert.same({ mrr = 0 }, per2.q4)
    assert.is_nil(per2.q5) -- a query nobody judged is never evaluated
    assert.is_true(near(m1.mrr * 4 / 5, m2.mrr))
  end)

  it("returns one table unless per_query is set, keyed by the names as given", function()
    local n = select("#", ir(RUN, QRELS, { "p@5", "p@5", "map@1000" }))
    assert.equal(1, n)
    local m = ir(RUN, QRELS, { "p@5", "p@5", "map@1000" })
    assert.same({ "map@1000", "p@5" }, (function()
      local keys = {}
      for k in pairs(m) do
        keys[#keys + 1] = k
      end
      table.sort(keys)
      return keys
    end)())
    assert.equal(select("#", ir(RUN, QRELS, { "mrr" }, { per_query = false })), 1)
  end)

  it("gives zeros when no query is both run and judged", function()
    assert.same({ ["ndcg@10"] = 0, map = 0 }, ir({ a = { "x" } }, { b = { x = 1 } },
      { "ndcg@10", "map" }))
    local m, per = ir({}, {}, { "mrr" }, { per_query = true })
    assert.same({ mrr = 0 }, m)
    assert.same({}, per)
  end)

  it("takes the list order, not the scores, and ignores later repeats", function()
    local run = {
      q = { { id = "n", score = 1 }, { id = "r", score = 5 }, { id = "n", score = 9 } },
    }
    local m = ir(run, { q = { r = 1 } }, { "mrr", "p@2", "p@3" })
    assert.equal(0.5, m.mrr)
    assert.equal(0.5, m["p@2"])
    assert.equal(1 / 3, m["p@3"])
    -- a repeat of a relevant document does not count twice
    m = ir({ q = { "r", "r", "r" } }, { q = { r = 1, s = 1 } }, { "p@3", "recall@3", "map" })
    assert.equal(1 / 3, m["p@3"])
    assert.equal(1 / 2, m["recall@3"])
    assert.equal(1 / 2, m.map)
  end)

  it("uses grades as gains in nDCG and the level for the other measures", function()
    local run = { q = { "a", "b" } }
    local qrels = { q = { a = 1, b = 3 } }
    local m = ir(run, qrels, { "ndcg@2", "map", "mrr", "recall" }, { level = 2 })
    assert.is_true(near((1 + 3 / log2(3)) / (3 + 1 / log2(3)), m["ndcg@2"]))
    assert.equal(0.5, m.mrr) -- only b (grade 3) reaches level 2
    assert.equal(0.5, m.map)
    assert.equal(1, m.recall)
    -- fractional grades: a positive gain, relevant only from the level on
    m = ir({ q = { "a", "b" } }, { q = { a = 0.5, b = 1.5 } }, { "ndcg@1", "mrr" })
    assert.is_true(near(0.5 / 1.5, m["ndcg@1"]))
    assert.equal(0.5, m.mrr)
  end)

  it("reads numbers as ids, as tostring does", function()
    local m = ir({ [1] = { 10, 20 } }, { ["1"] = { [20] = 1 } }, { "mrr" })
    assert.equal(0.5, m.mrr)
    m = ir({ ["1"] = { "10", "20" } }, { [1] = { ["10"] = 1 } }, { "mrr" })
    assert.equal(1, m.mrr)
    local _, per = ir({ [2.5] = { 1 } }, { [2.5] = { [1] = 1 } }, { "mrr" }, { per_query = true })
    assert.same({ ["2.5"] = { mrr = 1 } }, per)
  end)

  it("equals the Lua reference on 200 random runs and qrels", function()
    local r = helpers.rng(20240607)
    local bases = { "ndcg", "recall", "p", "mrr", "map", "success" }
    for case = 1, 200 do
      local run, qrels = {}, {}
      local ndocs = r(25)
      for qi = 1, r(8) do
        local q = (r(4) == 1) and qi or ("q" .. qi) -- some number ids
        local kind = r(6) -- 1: run only, 2: judged only, else both
        if kind ~= 2 then
          local hits = {}
          for i = 1, r(31) - 1 do -- 0..30 hits, repeats likely
            local d = "d" .. r(ndocs)
            hits[i] = r(3) == 1 and d or { id = d, score = -i }
          end
          run[q] = hits
        end
        if kind ~= 1 then
          local j = {}
          for _ = 1, r(12) - 1 do -- 0..11 judgements, grades -1..3
            j["d" .. r(ndocs)] = r(5) - 2
          end
          qrels[q] = j
        end
      end
      local measures = {}
      for i = 1, r(6) do
        local base = bases[r(#bases)]
        if (base == "p" or base == "success") or r(4) > 1 then
          measures[i] = base .. "@" .. r(40)
        else
          measures[i] = base
        end
      end
      local opts = {
        per_query = true,
        missing = r(2) == 1 and "zero" or "skip",
        level = r(3) == 1 and 2 or 1,
      }
      local means, per = ir(run, qrels, measures, opts)
      local rmeans, rper = reference(run, qrels, measures, opts)
      for _, name in ipairs(measures) do
        assert.is_true(near(rmeans[name], means[name]),
          "case " .. case .. " " .. name .. ": " .. means[name] .. " ~= " .. rmeans[name])
      end
      for q, row in pairs(rper) do
        for name, v in pairs(row) do
          assert.is_true(near(v, per[q][name]), "case " .. case .. " " .. q .. " " .. name)
        end
      end
      for q in pairs(per) do
        assert.is_truthy(rper[q], "case " .. case .. ": extra query " .. q)
      end
    end
  end)

  it("raises on an unknown measure or a bad cutoff", function()
    local valid = "(valid: ndcg[@k], recall[@k], p@k, mrr[@k], map[@k], success@k)"
    for _, name in ipairs({ "NDCG@10", "foo", "ndcg_cut_10", "P@5", "", "@5", " ndcg" }) do
      assert.has_error(function() ir(RUN, QRELS, { name }) end,
        "rag.eval.ir: unknown measure '" .. name .. "' " .. valid)
    end
    for _, name in ipairs({ "ndcg@0", "ndcg@", "p", "success", "p@-1", "map@1.5", "mrr@x",
                            "recall@10000000000", "ndcg@ 5" }) do
      raises(function() ir(RUN, QRELS, { name }) end,
        "rag.eval.ir: bad k in measure '" .. name .. "'")
    end
    assert.has_error(function() ir(RUN, QRELS, {}) end,
      "rag.eval.ir: measures must name at least one of ndcg[@k], recall[@k], p@k, mrr[@k], "
        .. "map[@k], success@k")
    assert.has_error(function() ir(RUN, QRELS, "ndcg@10") end,
      "rag.eval.ir: measures must be a list of names, got string")
    assert.has_error(function() ir(RUN, QRELS, { "mrr", 10 }) end,
      "rag.eval.ir: measure 2 must be a string, got number")
  end)

  it("raises on a run or qrels of the wrong shape", function()
    local M = { "mrr" }
    assert.has_error(function() ir(nil, QRELS, M) end,
      "rag.eval.ir: run must be a table, got nil")
    assert.has_error(function() ir(RUN, "q", M) end,
      "rag.eval.ir: qrels must be a table, got string")
    assert.has_error(function() ir({ q = "d1" }, QRELS, M) end,
      "rag.eval.ir: run['q'] must be a table, got string")
    assert.has_error(function() ir({ [true] = {} }, QRELS, M) end,
      "rag.eval.ir: run keys must be query ids (strings or numbers), got boolean")
    assert.has_error(function() ir({ q = { "a", false } }, {}, M) end,
      "rag.eval.ir: run['q'][2] must be a hit { id = } or an id, got boolean")
    assert.has_error(function() ir({ q = { { score = 1 } } }, {}, M) end,
      "rag.eval.ir: run['q'][1].id must be a string or a number, got nil")
    assert.has_error(function() ir({}, { q = { d = "1" } }, M) end,
      "rag.eval.ir: qrels['q']['d'] must be a finite number, got string")
    assert.has_error(function() ir({}, { q = { [7] = 0 / 0 } }, M) end,
      "rag.eval.ir: qrels['q']['7'] must be a finite number, got a non-finite number")
    assert.has_error(function() ir({}, { q = { [{}] = 1 } }, M) end,
      "rag.eval.ir: qrels['q'] keys must be document ids (strings or numbers), got table")
    assert.has_error(function() ir({}, { q = true }, M) end,
      "rag.eval.ir: qrels['q'] must be a table, got boolean")
    assert.has_error(function() ir({ [1] = {}, ["1"] = {} }, {}, M) end,
      "rag.eval.ir: run has query '1' twice (as a number and a string)")
    assert.has_error(function() ir({ q = {} }, { q = { [1] = 1, ["1"] = 1 } }, M) end,
      "rag.eval.ir: qrels['q'] has a document twice (as a number and a string)")
  end)

  it("raises on bad options", function()
    local M = { "mrr" }
    assert.has_error(function() ir(RUN, QRELS, M, { perquery = true }) end,
      "rag.eval.ir: unknown option 'perquery'")
    assert.has_error(function() ir(RUN, QRELS, M, 5) end,
      "rag.eval.ir: opts must be a table, got number")
    assert.has_error(function() ir(RUN, QRELS, M, { per_query = 1 }) end,
      "rag.eval.ir: option 'per_query' must be a boolean, got number")
    assert.has_error(function() ir(RUN, QRELS, M, { missing = "all" }) end,
      "rag.eval.ir: option 'missing' must be \"skip\" or \"zero\"")
    for _, level in ipairs({ 0, -1, 1 / 0 }) do
      assert.has_error(function() ir(RUN, QRELS, M, { level = level }) end,
        "rag.eval.ir: option 'level' must be a finite number > 0")
    end
    assert.has_error(function() ir(RUN, QRELS, M, { level = 0 / 0 }) end,
      "rag.eval.ir: option 'level' must be a number, not NaN")
    assert.has_error(function() ir(RUN, QRELS, M, { level = "1" }) end,
      "rag.eval.ir: option 'level' must be a number, got string")
  end)

  it("leaves its arguments as they were", function()
    local run = { [1] = { 10, { id = 20, score = 1 } } }
    local qrels = { [1] = { [20] = 1 } }
    ir(run, qrels, { "mrr" }, { per_query = true })
    assert.same({ [1] = { 10, { id = 20, score = 1 } } }, run)
    assert.equal("number", type(next(qrels[1])))
    assert.equal("number", type(run[1][1]))
  end)

  local with_faults = rag.core._fail_alloc and it or pending
  with_faults("raises 'not enough memory' on every failed allocation, leaking nothing", function()
    local points = helpers.oom_walk(function()
      return ir(RUN, QRELS, MEASURES, { per_query = true, missing = "zero" })
    end)
    assert.is_true(points >= 2, "fault points: " .. points)
  end)
end)

-- {====== BEIR ======}

local TINY = "spec/fixtures/beir_tiny"

describe("rag.eval.beir", function()
  it("loads corpus, queries and qrels", function()
    local b = assert(rag.eval.beir(TINY))
    assert.same({
      d1 = { title = "Lua", text = "Lua is a small scripting language." },
      d2 = { title = "C", text = "C is a systems language.\nIt has pointers." },
      ["3"] = { title = "", text = "A document without a title, with a numeric id." },
      d4 = { title = "", text = "\228\184\173\230\150\135 text \240\159\152\128" },
    }, b.corpus)
    assert.same({ q1 = "what is lua", q2 = "pointers in c", ["7"] = "numeric query id" },
      b.queries)
    assert.same({ q1 = { d1 = 2, d2 = 0 }, q2 = { d2 = 1, ["3"] = 1 }, ["7"] = { d4 = 1 } },
      b.qrels)
  end)

  it("reads another split, and can skip the corpus", function()
    local b = assert(rag.eval.beir(TINY .. "/", { split = "dev", corpus = false }))
    assert.same({ q1 = { d1 = 1 } }, b.qrels)
    assert.same({}, b.corpus)
    assert.equal("what is lua", b.queries.q1)
  end)

  it("feeds rag.eval.ir", function()
    local b = assert(rag.eval.beir(TINY))
    local run = { q1 = { "d2", "d1" }, q2 = { "3", "d4", "d2" }, ["7"] = {} }
    local m = ir(run, b.qrels, { "mrr", "recall@2" })
    assert.is_true(near((1 / 2 + 1 + 0) / 3, m.mrr))
    assert.is_true(near((1 + 1 / 2 + 0) / 3, m["recall@2"]))
  end)

  it("returns nil, msg, \"io\" for a missing folder or split", function()
    local ok, msg, code = rag.eval.beir("spec/fixtures/no_such_beir")
    assert.is_nil(ok)
    assert.equal("rag.eval.beir: 'spec/fixtures/no_such_beir/qrels/test.tsv': "
      .. "no such file or directory", msg)
    assert.equal("io", code)
    ok, msg, code = rag.eval.beir(TINY, { split = "train" })
    assert.is_nil(ok)
    assert.is_truthy(msg:find("qrels/train.tsv", 1, true))
    assert.equal("io", code)
  end)

  it("returns nil, msg, \"io\" when a file is a directory or the folder a file", function()
    local dir = helpers.tmpname()
    local function mkdir(p)
      assert(os.execute("mkdir -p '" .. p .. "'"))
    end
    local function copy(name)
      helpers.write(dir .. "/" .. name, helpers.read(TINY .. "/" .. name))
    end
    -- each file in turn is a directory; the files before it are real
    mkdir(dir .. "/qrels/test.tsv")
    local ok, msg, code = rag.eval.beir(dir)
    assert.is_nil(ok)
    assert.equal("rag.eval.beir: '" .. dir .. "/qrels/test.tsv': is a directory", msg)
    assert.equal("io", code)
    os.execute("rmdir '" .. dir .. "/qrels/test.tsv'")
    copy("qrels/test.tsv")
    mkdir(dir .. "/queries.jsonl")
    ok, msg, code = rag.eval.beir(dir)
    assert.is_nil(ok)
    assert.equal("rag.eval.beir: '" .. dir .. "/queries.jsonl': is a directory", msg)
    assert.equal("io", code)
    os.execute("rmdir '" .. dir .. "/queries.jsonl'")
    copy("queries.jsonl")
    mkdir(dir .. "/corpus.jsonl")
    ok, msg, code = rag.eval.beir(dir)
    assert.is_nil(ok)
    assert.equal("rag.eval.beir: '" .. dir .. "/corpus.jsonl': is a directory", msg)
    assert.equal("io", code)
    assert.is_truthy(rag.eval.beir(dir, { corpus = false })) -- the corpus is not read
    os.execute("rm -rf '" .. dir .. "'")
    -- the folder is a file
    ok, msg, code = rag.eval.beir(TINY .. "/queries.jsonl")
    assert.is_nil(ok)
    assert.equal("rag.eval.beir: '" .. TINY .. "/queries.jsonl/qrels/test.tsv': not a directory",
      msg)
    assert.equal("io", code)
  end)

  it("returns nil, msg, \"decode\" for a malformed file", function()
    local ok, msg, code = rag.eval.beir(TINY, { split = "bad" })
    assert.is_nil(ok)
    assert.equal("rag.eval.beir: '" .. TINY .. "/qrels/bad.tsv': line 3: expected query-id, "
      .. "corpus-id and a numeric score separated by tabs", msg)
    assert.equal("decode", code)
    ok, msg, code = rag.eval.beir(TINY .. "/broken")
    assert.is_nil(ok)
    assert.is_truthy(msg:find("^rag%.eval%.beir: '" .. TINY .. "/broken/queries%.jsonl': line 2: "),
      msg)
    assert.equal("decode", code)
  end)

  it("raises on bad arguments", function()
    raises(function() rag.eval.beir(nil) end, "rag.eval.beir: dir must be a string, got nil")
    raises(function() rag.eval.beir(TINY, { splits = "x" }) end,
      "rag.eval.beir: unknown option 'splits'")
    raises(function() rag.eval.beir(TINY, { corpus = "no" }) end,
      "rag.eval.beir: corpus must be a boolean, got string")
    raises(function() rag.eval.beir(TINY, { split = "../x" }) end,
      "rag.eval.beir: split must be a file name")
    raises(function() rag.eval.beir(TINY, 3) end, "rag.eval.beir: opts must be a table")
  end)
end)
