-- rag.fuse: RRF presets against each library's formula transcribed here in
-- plain Lua (LangChain EnsembleRetriever.weighted_reciprocal_rank,
-- LlamaIndex QueryFusionRetriever._reciprocal_rerank_fusion, Haystack
-- DocumentJoiner._reciprocal_rank_fusion, the paper's 1 / (60 + rank)),
-- score fusion against the same normalisations written out, and errors.
local rag = require("rag")
local helpers = require("spec.helpers")

local fuse = rag.fuse

local function id_of(h)
  return type(h) == "table" and tostring(h.id) or tostring(h)
end

-- A list without its repeats (first occurrence kept), as the rule says.
local function dedup(list)
  local seen, out = {}, {}
  for i, h in ipairs(list) do
    local id = id_of(h)
    if not seen[id] then
      seen[id] = true
      out[#out + 1] = { id = id, pos = i - 1, score = type(h) == "table" and h.score or nil }
    end
  end
  return out
end

-- Reference RRF by preset, term by term in the libraries' own arithmetic.
local function reference_rrf(lists, preset, weights)
  local n = #lists
  local s = {}
  local function add(id, v)
    s[id] = (s[id] or 0) + v
  end
  if preset == "paper" then
    for li, list in ipairs(lists) do
      local w = weights and weights[li] or 1
      for _, e in ipairs(dedup(list)) do
        add(e.id, w / (60 + (e.pos + 1)))
      end
    end
  elseif preset == "langchain" then -- weight / (rank + c), rank from 1, weights 1/n
    for li, list in ipairs(lists) do
      local w = weights and weights[li] or 1 / n
      for _, e in ipairs(dedup(list)) do
        add(e.id, w / ((e.pos + 1) + 60))
      end
    end
  elseif preset == "llamaindex" then -- 1.0 / (rank + k), rank from 0
    for _, list in ipairs(lists) do
      for _, e in ipairs(dedup(list)) do
        add(e.id, 1.0 / (e.pos + 60.0))
      end
    end
  elseif preset == "haystack" then
    local ws = {}
    if weights then
      local sum = 0
      for i = 1, n do
        sum = sum + weights[i]
      end
      for i = 1, n do
        ws[i] = weights[i] / sum
      end
    else
      for i = 1, n do
        ws[i] = 1 / n
      end
    end
    for li, list in ipairs(lists) do
      for _, e in ipairs(dedup(list)) do
        add(e.id, (ws[li] * n) / (61 + e.pos))
      end
    end
    for id in pairs(s) do
      s[id] = s[id] / (n / 61)
    end
  end
  return s
end

-- Sorted { id, score } hits from an id -> score table, ties by id.
local function ranked(s)
  local out = {}
  for id, v in pairs(s) do
    out[#out + 1] = { id = id, score = v }
  end
  table.sort(out, function(a, b)
    if a.score ~= b.score then
      return a.score > b.score
    end
    return a.id < b.id
  end)
  return out
end

local function same_hits(got, want)
  assert.are.equal(#want, #got)
  for i = 1, #want do
    assert.are.equal(want[i].id, got[i].id)
    assert.are.equal(want[i].score, got[i].score) -- the same arithmetic: bit for bit
  end
end

local function hits(ids)
  local t = {}
  for i, id in ipairs(ids) do
    t[i] = { id = id, score = #ids - i + 1 }
  end
  return t
end

describe("rag.fuse.rrf", function()
  local A = hits({ "d1", "d2", "d3", "d4" })
  local B = hits({ "d3", "d1", "d5" })
  local C = hits({ "d5", "d5", "d2", "d6", "d1" }) -- a repeat inside one list

  it("defaults to the paper: k = 60, ranks from 1, unweighted", function()
    local r = fuse.rrf({ A, B })
    same_hits(r, ranked(reference_rrf({ A, B }, "paper")))
    assert.are.equal("d1", r[1].id)
    assert.are.equal(1 / 61 + 1 / 62, r[1].score)
  end)

  for _, preset in ipairs({ "paper", "langchain", "llamaindex", "haystack" }) do
    it("reproduces the " .. preset .. " formula, with repeats and missing ids", function()
      same_hits(fuse.rrf({ A, B, C }, { preset = preset }),
        ranked(reference_rrf({ A, B, C }, preset)))
    end)

    it("reproduces the " .. preset .. " formula with weights", function()
      local w = { 0.5, 0.3, 0.2 }
      local want = reference_rrf({ A, B, C }, preset, preset ~= "llamaindex" and w or nil)
      same_hits(fuse.rrf({ A, B, C }, { preset = preset, weights = w }), ranked(want))
    end)

    it("matches " .. preset .. " on 200 random list sets", function()
      local rng = helpers.rng(7)
      for _ = 1, 200 do
        local lists, weights = {}, {}
        for li = 1, 1 + rng(4) do
          local list = {}
          for j = 1, rng(12) - 1 do
            list[j] = { id = "x" .. rng(15), score = -j }
          end
          lists[li] = list
          weights[li] = rng(5) / 4
        end
        local w = rng(2) == 1 and preset ~= "llamaindex" and weights or nil
        same_hits(fuse.rrf(lists, { preset = preset, weights = w }),
          ranked(reference_rrf(lists, preset, w)))
      end
    end)
  end

  it("scores a document first in every Haystack list 1.0", function()
    local r = fuse.rrf({ A, hits({ "d1", "d9" }), hits({ "d1" }) },
      { preset = "haystack", weights = { 2, 1, 1 } })
    assert.are.equal("d1", r[1].id)
    assert.is_true(math.abs(r[1].score - 1) < 1e-15)
  end)

  it("breaks ties by id bytes, whatever the input order", function()
    local r1 = fuse.rrf({ hits({ "b", "a" }), hits({ "a", "b" }) })
    local r2 = fuse.rrf({ hits({ "a", "b" }), hits({ "b", "a" }) })
    assert.are.equal(r1[1].score, r1[2].score)
    assert.are.same({ "a", "b" }, { r1[1].id, r1[2].id })
    assert.are.same({ "a", "b" }, { r2[1].id, r2[2].id })
  end)

  it("takes bare ids and number ids, and overrides k and rank_base", function()
    local r = fuse.rrf({ { "x", 7, "y" }, { { id = 7 } } }, { k = 10, rank_base = 0 })
    assert.are.same({ "7", "x", "y" }, { r[1].id, r[2].id, r[3].id })
    assert.are.equal(1 / 11 + 1 / 10, r[1].score)
    assert.are.equal(1 / 10, r[2].score)
  end)

  it("counts a repeat once, at its first position", function()
    local r = fuse.rrf({ { "a", "b", "a" } })
    assert.are.equal(2, #r)
    assert.are.equal(1 / 61, r[1].score)
    assert.are.equal(1 / 62, r[2].score)
  end)

  it("returns the first `limit` of the full result", function()
    local rng = helpers.rng(3)
    for _ = 1, 100 do
      local lists = {}
      for li = 1, 1 + rng(3) do
        local list = {}
        for j = 1, rng(40) - 1 do
          list[j] = { id = "y" .. rng(30), score = rng(7) }
        end
        lists[li] = list
      end
      local full = fuse.rrf(lists)
      local full_s = fuse.scores(lists, { method = "zscore" })
      local limit = rng(#full + 2) - 1
      local part, part_s = fuse.rrf(lists, { limit = limit }),
        fuse.scores(lists, { method = "zscore", limit = limit })
      assert.are.equal(math.min(limit, #full), #part)
      for i = 1, #part do
        assert.are.same(full[i], part[i])
        assert.are.same(full_s[i], part_s[i])
      end
    end
    assert.has_error(function() fuse.rrf({}, { limit = -1 }) end,
      "rag.fuse.rrf: option 'limit' must be an integer >= 0")
  end)

  it("returns an empty list for no lists or empty lists", function()
    assert.are.same({}, fuse.rrf({}))
    assert.are.same({}, fuse.rrf({ {}, {} }, { preset = "haystack" }))
  end)

  it("raises on misuse", function()
    local cases = {
      { { nil }, "rag.fuse.rrf: lists must be a table of hit lists, got nil" },
      { { { { "a" }, 5 } }, "rag.fuse.rrf: list 2 must be a table, got number" },
      { { { { {} } } }, "rag.fuse.rrf: list 1, hit 1: id must be a string or a number, got nil" },
      { { { { true } } }, "rag.fuse.rrf: list 1, hit 1 must be a table or an id, got boolean" },
      { { { { "a" } }, { preset = "x" } }, "rag.fuse.rrf: option 'preset' must be" },
      { { { { "a" } }, { kk = 1 } }, "rag.fuse.rrf: unknown option 'kk'" },
      { { { { "a" } }, { k = "1" } }, "rag.fuse.rrf: option 'k' must be a number, got string" },
      { { { { "a" } }, { k = 0, rank_base = 0 } }, "k + rank_base > 0" },
      { { { { "a" } }, { weights = { 1, 2 } } },
        "rag.fuse.rrf: option 'weights' must be a list of 1" },
      { { { { "a" } }, { weights = { -1 } } }, "rag.fuse.rrf: weight 1 must be a finite" },
      { { { { "a" } }, { weights = { 0 }, preset = "haystack" } }, "must not all be 0" },
      { { { { "a" } }, 3 }, "rag.fuse.rrf: opts must be a table, got number" },
    }
    for _, c in ipairs(cases) do
      local args = c[1]
      local ok, err = pcall(fuse.rrf, args[1], args[2])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err) .. " / " .. c[2])
    end
  end)
end)

-- Issue 20, point 7: a malformed `lists` once fused to {} without a word.
describe("rag.fuse lists of the wrong shape", function()
  local one = { { id = "a", score = 3 }, { id = "b", score = 2 } }

  it("raise when one hit list is passed where a list of lists is expected", function()
    for _, f in ipairs({ "rrf", "scores" }) do
      local ok, err = pcall(fuse[f], one)
      assert.is_false(ok, f)
      assert.equal("rag.fuse." .. f .. ": lists must be a list of hit lists; got a hit at 1 "
        .. "(did you pass one list?)", err)
    end
    local ok, err = pcall(fuse.rrf, { { { id = "x" } }, { id = "y" } })
    assert.is_false(ok)
    assert.truthy(err:find("got a hit at 2", 1, true), err)
  end)

  it("raise on a list that is not a sequence, or a map of lists", function()
    local ok, err = pcall(fuse.rrf, { { first = { id = "a" } } })
    assert.is_false(ok)
    assert.equal("rag.fuse.rrf: list 1 must be a list of hits (keys 1..n), got a table with "
      .. "other keys", err)
    ok, err = pcall(fuse.scores, { bm25 = one, vector = one })
    assert.is_false(ok)
    assert.equal("rag.fuse.scores: lists must be a list of hit lists (keys 1..n), got a table "
      .. "with other keys", err)
  end)

  it("raise on a list holding a non-table", function()
    for _, f in ipairs({ "rrf", "scores" }) do
      local ok, err = pcall(fuse[f], { one, "b" })
      assert.is_false(ok, f)
      assert.equal("rag.fuse." .. f .. ": list 2 must be a table, got string", err)
    end
  end)

  it("still fuse empty lists to nothing", function()
    assert.are.same({}, fuse.rrf({ {}, {} }))
    assert.are.same({}, fuse.scores({ {} }))
    assert.are.same({}, fuse.scores({}))
  end)
end)

-- Reference score fusion: the normalisations written out per list.
local function reference_scores(lists, method, weights, combine)
  local s = {}
  for li, list in ipairs(lists) do
    local d = dedup(list)
    if #d > 0 then
      local lo, hi, sum = math.huge, -math.huge, 0
      for _, e in ipairs(d) do
        lo, hi, sum = math.min(lo, e.score), math.max(hi, e.score), sum + e.score
      end
      local mean, ss = sum / #d, 0
      for _, e in ipairs(d) do
        ss = ss + (e.score - mean) * (e.score - mean)
      end
      local sd = math.sqrt(ss / #d)
      for _, e in ipairs(d) do
        local v
        if method == "minmax" then
          if hi == lo then
            v = hi > 0 and 1 or 0
          else
            v = (e.score - lo) / (hi - lo)
          end
        elseif method == "zscore" then
          v = sd == 0 and 0 or (e.score - mean) / sd
        else
          local a, b = mean - 3 * sd, mean + 3 * sd
          v = (b - a) == 0 and 0 or (e.score - a) / (b - a)
        end
        v = (weights and weights[li] or 1) * v
        if combine == "max" then
          s[e.id] = s[e.id] and math.max(s[e.id], v) or v
        else
          s[e.id] = (s[e.id] or 0) + v
        end
      end
    end
  end
  return s
end

describe("rag.fuse.scores", function()
  local A = { { id = "a", score = 12 }, { id = "b", score = 7 }, { id = "c", score = 1 } }
  local B = { { id = "c", score = 0.9 }, { id = "d", score = 0.4 }, { id = "c", score = 0.1 } }

  for _, method in ipairs({ "minmax", "zscore", "dbsf" }) do
    for _, combine in ipairs({ "sum", "max" }) do
      it(method .. " with " .. combine .. " matches the formula", function()
        local w = { 0.7, 1.3 }
        local got = fuse.scores({ A, B }, { method = method, combine = combine, weights = w })
        local want = ranked(reference_scores({ A, B }, method, w, combine))
        assert.are.equal(#want, #got)
        for i = 1, #want do
          assert.are.equal(want[i].id, got[i].id)
          assert.is_true(math.abs(want[i].score - got[i].score) < 1e-12)
        end
      end)
    end
  end

  it("gives min-max of equal scores 1 when positive, else 0", function()
    local r = fuse.scores({ { { id = "a", score = 3 }, { id = "b", score = 3 } },
      { { id = "c", score = 0 } }, { { id = "d", score = -2 } } })
    assert.are.same({ "a", "b", "c", "d" }, { r[1].id, r[2].id, r[3].id, r[4].id })
    assert.are.same({ 1, 1, 0, 0 }, { r[1].score, r[2].score, r[3].score, r[4].score })
  end)

  it("gives z-score and dbsf of equal scores 0", function()
    for _, m in ipairs({ "zscore", "dbsf" }) do
      local r = fuse.scores({ { { id = "a", score = 5 }, { id = "b", score = 5 } } },
        { method = m })
      assert.are.same({ 0, 0 }, { r[1].score, r[2].score })
    end
  end)

  it("matches the formulas on 200 random list sets", function()
    local rng = helpers.rng(11)
    for _ = 1, 200 do
      local lists, weights = {}, {}
      for li = 1, 1 + rng(3) do
        local list = {}
        for j = 1, rng(10) - 1 do
          list[j] = { id = "x" .. rng(12), score = (rng(2001) - 1001) / 100 }
        end
        lists[li] = list
        weights[li] = rng(4) / 2
      end
      for _, m in ipairs({ "minmax", "zscore", "dbsf" }) do
        local combine = rng(2) == 1 and "max" or "sum"
        local got = fuse.scores(lists, { method = m, weights = weights, combine = combine })
        local want = reference_scores(lists, m, weights, combine)
        local n = 0
        for _ in pairs(want) do
          n = n + 1
        end
        assert.are.equal(n, #got)
        for i, h in ipairs(got) do
          assert.is_true(math.abs(want[h.id] - h.score) < 1e-9)
          if i > 1 then
            assert.is_true(got[i - 1].score >= h.score)
          end
        end
      end
    end
  end)

  it("raises on misuse", function()
    local cases = {
      { { { { { id = "a" } } } }, "rag.fuse.scores: list 1, hit 1: score must be a finite number" },
      { { { { "a" } } }, "rag.fuse.scores: list 1, hit 1: score must be a finite number" },
      { { { { { id = "a", score = 0 / 0 } } } }, "a non-finite number" },
      { { { A }, { method = "rrf" } }, "rag.fuse.scores: option 'method' must be" },
      { { { A }, { combine = "avg" } }, "rag.fuse.scores: option 'combine' must be" },
      { { { A }, { preset = "paper" } }, "rag.fuse.scores: unknown option 'preset'" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(fuse.scores, c[1][1], c[1][2])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err) .. " / " .. c[2])
    end
  end)
end)
