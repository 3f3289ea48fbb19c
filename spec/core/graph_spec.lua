-- rag.core.graph: entity keys, the heuristic extractor's exact spans, a
-- hand-drawn graph (extract, aliases, neighbourhoods by hops and limit),
-- removal against a graph built without the removed document, communities
-- of hand-drawn graphs, persistence (round trips, canonical bytes, every
-- truncation, bit flips, newer versions), misuse and out-of-memory paths.
-- Every expected value below was worked out by hand from the rules in
-- docs/api.md (## rag.core.graph).
local rag = require("rag")
local helpers = require("spec.helpers")

local G = rag.core.graph
local tmpname, slurp = helpers.tmpname, helpers.read

local function raises(pattern, fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "did not raise")
  assert.matches(pattern, tostring(err), 1, true)
end

describe("rag.core.graph.normalize", function()
  it("folds, collapses, strips and drops a leading article", function()
    local cases = {
      { "  The   University of Oxford. ", "university of oxford" },
      { "\239\188\161\239\188\162\239\188\163", "abc" }, -- ＡＢＣ (NFKC)
      { "Stra\195\159e", "strasse" }, -- Straße (case folding)
      { "an apple", "apple" },
      { "A", "a" },
      { "the", "the" },
      { "the  ", "the" },
      { "", "" },
      { "  ... ", "" },
      { "(TNF-\206\177)", "tnf-\206\177" }, -- (TNF-α)
      { "The \"Lancet\"", "lancet" },
      { "\tNew\nYork\r\n", "new york" },
      { "a  b", "b" },
      { "Another day", "another day" },
    }
    for _, c in ipairs(cases) do
      assert.equal(c[2], G.normalize(c[1]), c[1])
    end
  end)

  it("refuses invalid UTF-8 as a failure of the world", function()
    local key, msg, code = G.normalize("ab\255")
    assert.is_nil(key)
    assert.equal("rag.graph.normalize: invalid utf-8 at byte 3", msg)
    assert.equal("encoding", code)
    raises("name must be a string", function() G.normalize({}) end)
  end)
end)

describe("rag.core.graph.mentions", function()
  local function m(text, key, start, stop, sentence)
    return { text = text, key = key, start = start, stop = stop, sentence = sentence }
  end

  it("finds names, acronyms and noun phrases with exact spans", function()
    local src = "The University of Oxford studies TNF and IL-6 in mice. "
      .. "We found tumor necrosis factor in BRCA1 carriers."
    local got = G.mentions(src)
    assert.same({
      m("University of Oxford", "university of oxford", 5, 24, 1),
      m("TNF", "tnf", 34, 36, 1),
      m("IL-6", "il-6", 42, 45, 1),
      m("tumor necrosis factor", "tumor necrosis factor", 65, 85, 2),
      m("BRCA1", "brca1", 90, 94, 2),
    }, got)
    for _, x in ipairs(got) do
      assert.equal(x.text, src:sub(x.start, x.stop))
    end
  end)

  it("follows each rule", function()
    local cases = {
      -- a phrase longer than max_words is no phrase; max_words raises the bound
      { "the big red fox barked", nil, {} },
      { "the big red fox barked", { max_words = 4 },
        { m("big red fox barked", "big red fox barked", 5, 22, 1) } },
      { "gene expression in Paris", nil,
        { m("gene expression", "gene expression", 1, 15, 1), m("Paris", "paris", 20, 24, 1) } },
      { "gene expression in Paris", { phrases = false }, { m("Paris", "paris", 20, 24, 1) } },
      -- p53 has no uppercase letter; "and" joins only capitalised words
      { "Vitamin D and p53 levels", nil, { m("Vitamin D", "vitamin d", 1, 9, 1) } },
      { "Vitamin D", { min_len = 10 }, {} },
      { "Alzheimer's disease", nil, { m("Alzheimer", "alzheimer", 1, 9, 1) } },
      { "anti-inflammatory drugs", nil,
        { m("anti-inflammatory drugs", "anti-inflammatory drugs", 1, 23, 1) } },
      -- a line break ends a name; one line break does not end a sentence
      { "Oxford\nCambridge", nil,
        { m("Oxford", "oxford", 1, 6, 1), m("Cambridge", "cambridge", 8, 16, 1) } },
      { "levels of mRNA rose", nil, { m("mRNA", "mrna", 11, 14, 1) } },
      { "However, Smith agreed.", nil, { m("Smith", "smith", 10, 14, 1) } },
      { "Oxford We asked. In Rome it rained.", nil,
        { m("Oxford", "oxford", 1, 6, 1), m("Rome", "rome", 21, 24, 2) } },
      { "Results Patients improved.", nil, { m("Patients", "patients", 9, 16, 1) } },
      { "Stra\195\159e Berlin", nil, { m("Stra\195\159e Berlin", "strasse berlin", 1, 14, 1) } },
      { "", nil, {} },
    }
    for _, c in ipairs(cases) do
      assert.same(c[3], G.mentions(c[1], c[2]), c[1])
    end
  end)

  it("refuses invalid UTF-8 and bad options", function()
    local t, msg, code = G.mentions("Paris \255")
    assert.is_nil(t)
    assert.equal("rag.graph.mentions: invalid utf-8 at byte 7", msg)
    assert.equal("encoding", code)
    raises("unknown option 'words'", function() G.mentions("x", { words = 2 }) end)
    raises("option 'max_words' must be an integer in [2, 64]", function()
      G.mentions("x", { max_words = 1 })
    end)
    raises("text must be a string", function() G.mentions(nil) end)
  end)
end)

-- The hand-drawn graph: four documents, one chunk each (and an alias).
local DOCS = {
  { "d1#1", "Alice Smith met Bob Jones in Paris." },
  { "d2#1", "Bob Jones works at Acme. Acme is in Berlin." },
  { "d3#1", "Carol Diaz lives in Berlin." },
  { "d4#1", "Zed is alone." },
}

local function edge(src, dst, chunks, relation)
  return { src = src, dst = dst, relation = relation or "co-occurs", chunks = chunks }
end

local function ent(key, name, hops)
  return { key = key, name = name, hops = hops }
end

local function build(docs)
  local g = G.new()
  for _, d in ipairs(docs) do
    g:extract(d[1], d[2])
  end
  return g
end

describe("rag.graph extract and neighbours", function()
  it("builds the hand-drawn graph", function()
    local g = G.new()
    local counts = {}
    for i, d in ipairs(DOCS) do
      counts[i] = g:extract(d[1], d[2])
    end
    assert.same({ 3, 4, 2, 1 }, counts)
    assert.same({ "acme", "alice smith", "berlin", "bob jones", "carol diaz", "paris", "zed" },
      g:entities())
    assert.same({
      edge("acme", "berlin", { "d2#1" }),
      edge("acme", "bob jones", { "d2#1" }),
      edge("alice smith", "bob jones", { "d1#1" }),
      edge("alice smith", "paris", { "d1#1" }),
      edge("berlin", "carol diaz", { "d3#1" }),
      edge("bob jones", "paris", { "d1#1" }),
    }, g:edges())
    assert.same({ entities = 7, edges = 6, aliases = 0, mentions = 9, docs = 0 }, g:stats())
    assert.equal(7, #g)
    assert.same(
      { key = "berlin", name = "Berlin", aliases = {}, chunks = { "d2#1", "d3#1" }, degree = 2 },
      g:get("berlin"))
    assert.is_true(g:_check())
  end)

  it("walks 0, 1 and 2 hops, within a limit, through aliases", function()
    local g = build(DOCS)
    assert.same({ entities = { ent("bob jones", "Bob Jones", 0) }, edges = {} },
      g:neighbours({ "bob jones" }, 0))
    local one = {
      ent("bob jones", "Bob Jones", 0), ent("acme", "Acme", 1),
      ent("alice smith", "Alice Smith", 1), ent("paris", "Paris", 1),
    }
    local one_edges = {
      edge("acme", "bob jones", { "d2#1" }), edge("alice smith", "bob jones", { "d1#1" }),
      edge("alice smith", "paris", { "d1#1" }), edge("bob jones", "paris", { "d1#1" }),
    }
    assert.same({ entities = one, edges = one_edges }, g:neighbours({ "bob jones" }, 1))
    local two = g:neighbours("bob jones", 2)
    assert.same({ "bob jones", "acme", "alice smith", "paris", "berlin" },
      (function() local t = {} for i, e in ipairs(two.entities) do t[i] = e.key end return t end)())
    assert.equal(2, two.entities[5].hops)
    assert.same(edge("acme", "berlin", { "d2#1" }), two.edges[1])
    assert.equal(5, #two.edges)
    assert.same({
      entities = {
        ent("bob jones", "Bob Jones", 0), ent("acme", "Acme", 1),
        ent("alice smith", "Alice Smith", 1),
      },
      edges = {
        edge("acme", "bob jones", { "d2#1" }), edge("alice smith", "bob jones", { "d1#1" }),
      },
    }, g:neighbours({ "bob jones" }, 2, { limit = 3 }))
    -- unknown seeds are ignored; repeated seeds count once
    assert.same({ entities = { ent("zed", "Zed", 0) }, edges = {} },
      g:neighbours({ "nobody", "zed", "zed" }, 1))
    assert.same({ entities = {}, edges = {} }, g:neighbours({}, 3))
    -- aliases
    assert.is_true(g:alias("robert jones", "bob jones"))
    assert.is_false(g:alias("robert jones", "bob jones"))
    assert.equal("bob jones", g:resolve("robert jones"))
    assert.equal("bob jones", g:resolve("bob jones"))
    assert.is_nil(g:resolve("nobody"))
    assert.same({ entities = { ent("bob jones", "Bob Jones", 0) }, edges = {} },
      g:neighbours({ "robert jones" }, 0))
    assert.equal(3, g:extract("d5#1", "Robert Jones visited Rome. Bob Jones left."))
    assert.same({ key = "bob jones", name = "Bob Jones", aliases = { "robert jones" },
      chunks = { "d1#1", "d2#1", "d5#1" }, degree = 4 }, g:get("robert jones"))
    assert.same(edge("bob jones", "rome", { "d5#1" }), g:edges()[7])
    assert.same({ entities = 8, edges = 7, aliases = 1, mentions = 11, docs = 0 }, g:stats())
    assert.is_true(g:_check())
  end)

  it("takes entities, mentions and relations by hand", function()
    local g = G.new()
    assert.is_true(g:entity("tnf", "TNF"))
    assert.is_false(g:entity("tnf", "Tumor necrosis factor"))
    assert.is_true(g:entity("il-6"))
    assert.is_true(g:alias("tumor necrosis factor", "tnf"))
    assert.is_false(g:entity("tumor necrosis factor", "x")) -- resolves already
    assert.is_true(g:mention("tnf", "c1"))
    assert.is_false(g:mention("tumor necrosis factor", "c1"))
    assert.is_true(g:relate("tumor necrosis factor", "il-6", "induces", "c1"))
    assert.is_false(g:relate("tnf", "il-6", "induces", "c2"))
    assert.is_false(g:relate("tnf", "il-6", "induces", "c2"))
    assert.is_true(g:relate("tnf", "il-6", "binds", "c2"))
    assert.is_true(g:relate("tnf", "tnf", "regulates", "c3"))
    assert.same({
      edge("tnf", "il-6", { "c1", "c2" }, "induces"),
      edge("tnf", "il-6", { "c2" }, "binds"),
      edge("tnf", "tnf", { "c3" }, "regulates"),
    }, (function()
      local t = g:edges()
      return { t[2], t[1], t[3] }
    end)())
    assert.same({
      key = "tnf", name = "TNF", aliases = { "tumor necrosis factor" }, chunks = { "c1" },
      degree = 3,
    }, g:get("tnf"))
    assert.same({ { "il-6", "tnf" } }, g:communities({ method = "components" }))
    raises("rag.graph.relate: unknown entity 'x'", function() g:relate("x", "tnf", "r", "c") end)
    raises("rag.graph.relate: unknown entity 'y'", function() g:relate("tnf", "y", "r", "c") end)
    raises("rag.graph.mention: unknown entity 'x'", function() g:mention("x", "c") end)
    raises("rag.graph.alias: unknown entity 'x'", function() g:alias("a", "x") end)
    raises("rag.graph.alias: alias is an entity 'il-6'", function() g:alias("il-6", "tnf") end)
    raises("rag.graph.entity: key must not be empty", function() g:entity("", "x") end)
    raises("rag.graph.entity: key must be a string, got table", function() g:entity({}, "x") end)
    assert.is_true(g:_check())
  end)

  it("extracts nothing from invalid UTF-8 and changes nothing", function()
    local g = build(DOCS)
    local before = g:edges()
    local n, msg, code = g:extract("d9#1", "Paris and \255 Rome")
    assert.is_nil(n)
    assert.equal("rag.graph.extract: invalid utf-8 at byte 11", msg)
    assert.equal("encoding", code)
    assert.same(before, g:edges())
    assert.same({ entities = 7, edges = 6, aliases = 0, mentions = 9, docs = 0 }, g:stats())
  end)
end)

describe("rag.graph removal", function()
  -- Everything observable, for comparing two graphs.
  local function snapshot(g)
    local s = { entities = g:entities(), edges = g:edges(), stats = g:stats(), get = {} }
    s.marks = g:marks()
    for _, k in ipairs(s.entities) do
      s.get[k] = g:get(k)
    end
    s.communities = g:communities()
    return s
  end

  it("remove_doc leaves what a graph built without the document has", function()
    local more = {
      { "d2#2", "Acme hired Dana." },
      { "d20#1", "Quinn visited Oslo." },
      { "d5#1", "Robert Jones visited Rome." },
    }
    local a = build(DOCS)
    a:extract(more[1][1], more[1][2])
    a:extract(more[2][1], more[2][2])
    a:alias("robert jones", "bob jones")
    a:extract(more[3][1], more[3][2])
    a:mark("d2", "h2")
    a:mark("d3", "h3")
    a:entity("lonely", "Lonely")
    -- d2's references: mentions of bob jones, acme, berlin, acme (d2#2), dana;
    -- tags of acme-bob jones, acme-berlin, acme-dana
    assert.equal(8, a:remove_doc("d2"))
    assert.is_nil(a:marked("d2"))
    assert.equal("h3", a:marked("d3"))
    local b = G.new()
    for _, d in ipairs({ DOCS[1], DOCS[3], DOCS[4], more[2] }) do
      b:extract(d[1], d[2])
    end
    b:alias("robert jones", "bob jones")
    b:extract(more[3][1], more[3][2])
    b:mark("d3", "h3")
    b:entity("lonely", "Lonely")
    assert.same(snapshot(b), snapshot(a))
    assert.is_true(a:_check())
    assert.equal(0, a:remove_doc("d2"))
    assert.equal(0, a:remove_chunk("nowhere"))
  end)

  it("remove_chunk drops emptied edges and entities with their aliases", function()
    local g = build(DOCS)
    g:alias("robert jones", "bob jones")
    assert.equal(6, g:remove_chunk("d1#1")) -- 3 mentions, 3 tags: bob keeps d2#1
    assert.equal(5, g:remove_chunk("d2#1")) -- 3 mentions, 2 tags
    assert.is_nil(g:resolve("robert jones"))
    assert.same({ "berlin", "carol diaz", "zed" }, g:entities())
    assert.same({ entities = 3, edges = 1, aliases = 0, mentions = 3, docs = 0 }, g:stats())
    assert.is_true(g:_check())
  end)

  it("survives churn: the same documents again and again", function()
    local g = G.new()
    for round = 1, 30 do
      for i, d in ipairs(DOCS) do
        g:remove_doc("d" .. i)
        g:extract(d[1], d[2] .. " Round" .. (round % 3))
      end
      assert.is_true(g:_check())
    end
    assert.same(build({
      { "d1#1", DOCS[1][2] .. " Round0" }, { "d2#1", DOCS[2][2] .. " Round0" },
      { "d3#1", DOCS[3][2] .. " Round0" }, { "d4#1", DOCS[4][2] .. " Round0" },
    }):edges(), g:edges())
  end)
end)

describe("rag.graph communities", function()
  local function graph_of(pairs, extra)
    local g = G.new()
    for _, p in ipairs(pairs) do
      g:entity(p[1])
      g:entity(p[2])
      g:relate(p[1], p[2], "knows", "c1")
    end
    for _, k in ipairs(extra or {}) do
      g:entity(k)
    end
    return g
  end

  it("finds connected components, largest first, ties by first key", function()
    local g = graph_of({ { "d", "e" }, { "a", "b" }, { "b", "c" } }, { "f" })
    assert.same({ { "a", "b", "c" }, { "d", "e" }, { "f" } },
      g:communities({ method = "components" }))
  end)

  it("separates two cliques joined by one edge with label propagation", function()
    local pairs = { { "d", "e" } }
    for _, clique in ipairs({ { "a", "b", "c", "d" }, { "e", "f", "g", "h" } }) do
      for i = 1, #clique do
        for j = i + 1, #clique do
          pairs[#pairs + 1] = { clique[i], clique[j] }
        end
      end
    end
    local g = graph_of(pairs)
    assert.same({ { "a", "b", "c", "d", "e", "f", "g", "h" } },
      g:communities({ method = "components" }))
    assert.same({ { "a", "b", "c", "d" }, { "e", "f", "g", "h" } }, g:communities())
    assert.same({ { "a", "b", "c", "d" }, { "e", "f", "g", "h" } },
      g:communities({ method = "labels", iterations = 3 }))
    -- one round: a-d take a's label, e takes d's, f-h take e's
    assert.same({ { "a", "b", "c", "d" }, { "f", "g", "h" }, { "e" } },
      g:communities({ iterations = 1 }))
    local three = graph_of({
      { "a", "b" }, { "a", "c" }, { "b", "c" }, { "c", "d" },
      { "d", "e" }, { "d", "f" }, { "e", "f" },
    })
    assert.same({ { "a", "b", "c" }, { "d", "e", "f" } }, three:communities())
    raises("option 'method' must be", function() g:communities({ method = "louvain" }) end)
  end)
end)

describe("rag.graph persistence", function()
  local function full(g)
    local s = { entities = g:entities(), edges = g:edges(), stats = g:stats(), nb = {} }
    s.marks = g:marks()
    for _, k in ipairs(s.entities) do
      s.nb[k] = g:neighbours({ k }, 2)
      s[k] = g:get(k)
    end
    return s
  end

  local function sample()
    local g = build(DOCS)
    g:alias("robert jones", "bob jones")
    g:extract("d5#1", "Robert Jones visited Rome.")
    g:relate("rome", "paris", "twin of", "manual")
    g:mark("d1", "abc")
    g:mark("d2", "")
    g:entity("unnamed", "")
    return g
  end

  it("saves and loads the same graph, copied or mapped, and saves the same bytes", function()
    local g, path, again = sample(), tmpname(), tmpname()
    local sum = assert(g:save(path))
    local bytes = slurp(path)
    assert.same({ size = #bytes, crc32 = helpers.crc32(bytes) }, sum)
    local h = assert(G.load(path))
    local m = assert(G.load(path, { map = true }))
    assert.same(full(g), full(h))
    assert.same(full(g), full(m))
    assert.same({ d1 = "abc", d2 = "" }, h:marks())
    assert.is_true(h:_check())
    assert(h:save(again))
    assert.equal(bytes, slurp(again))
    -- a loaded graph takes changes like any other
    h:remove_doc("d1")
    g:remove_doc("d1")
    assert.same(full(g), full(h))
    os.remove(path)
    os.remove(again)
  end)

  it("rejects every truncation, bit flips, a bad magic and a newer version", function()
    local g, path = sample(), tmpname()
    assert(g:save(path))
    helpers.rejects_damage(G.load, path, 300, 31)
    helpers.rejects_damage(function(p) return G.load(p, { map = true }) end, path, 50, 32)
    local s = slurp(path)
    local bad = tmpname()
    helpers.write(bad, "RAGBM25\0" .. s:sub(9))
    local ok, msg, code = G.load(bad)
    assert.is_nil(ok)
    assert.equal("rag.graph.load: '" .. bad .. "': not a graph (bad magic)", msg)
    assert.equal("format", code)
    helpers.write(bad, helpers.with_version(s, 2))
    ok, msg, code = G.load(bad)
    assert.equal("string", type(msg))
    assert.is_nil(ok)
    assert.equal("version", code)
    ok, msg, code = G.load(bad .. ".missing")
    assert.equal("string", type(msg))
    assert.is_nil(ok)
    assert.equal("io", code)
    helpers.rejects_irregular(G.load, "rag.graph.load")
    local empty = G.new()
    assert(empty:save(bad))
    assert.same({}, assert(G.load(bad)):entities())
    os.remove(path)
    os.remove(bad)
  end)

  it("reports a failed save as nil, msg, io", function()
    local ok, msg, code = G.new():save("/nonexistent-dir/g.rag")
    assert.is_nil(ok)
    assert.matches("^rag.graph.save: '/nonexistent%-dir/g.rag': ", msg)
    assert.equal("io", code)
  end)
end)

describe("rag.graph life cycle", function()
  it("closes idempotently; a closed graph raises", function()
    local g = build(DOCS)
    assert.matches("rag.graph %(7 entities, 6 edges%)", tostring(g))
    g:close()
    g:close()
    getmetatable(g).__close(g)
    assert.equal("rag.graph (closed)", tostring(g))
    for _, f in ipairs({
      function() g:extract("a", "b") end, function() return #g end, function() g:edges() end,
      function() g:neighbours({ "x" }, 1) end, function() g:save("/tmp/x") end,
      function() g:remove_doc("d1") end, function() g:marks() end,
    }) do
      raises("graph is closed", f)
    end
  end)

  it("raises on bad arguments naming the function", function()
    local g = G.new()
    local nb = "rag.graph.neighbours: "
    raises(nb .. "hops must be an integer >= 0", function() g:neighbours({ "a" }, -1) end)
    raises(nb .. "keys must be a list of keys or a key", function() g:neighbours(nil, 1) end)
    raises(nb .. "option 'limit' must be an integer >= 1", function()
      g:neighbours({}, 1, { limit = 0 })
    end)
    raises("rag.graph.extract: text must be a string", function() g:extract("c", nil) end)
    raises("rag.graph.load: unknown option 'mapped'", function() G.load("x", { mapped = true }) end)
    raises("rag.graph.mark: hash must be a string", function() g:mark("d", nil) end)
  end)
end)

describe("rag.graph out of memory", function()
  if not rag.core._fail_alloc then
    it("needs a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  local function snapshot(g)
    local s = { entities = g:entities(), edges = g:edges(), stats = g:stats(), get = {} }
    for _, k in ipairs(s.entities) do
      s.get[k] = g:get(k)
    end
    return s
  end

  it("fails cleanly at every fault point and changes nothing", function()
    assert.is_true(helpers.oom_walk(function() G.new():close() end) >= 1)
    helpers.oom_walk(function() return G.mentions(DOCS[2][2] .. " Stra\195\159e Berlin") end)
    local g = build(DOCS)
    local function walk(op)
      local before = snapshot(g)
      return helpers.oom_walk(op, function()
        assert.same(before, snapshot(g))
        assert.is_true(g:_check())
      end)
    end
    local text = "Eve Adams met Frank Ocean in Lima. Lima is big."
    assert.is_true(walk(function() g:extract("d6#1", text) end) >= 3)
    -- an existing chunk
    walk(function() g:extract("d3#1", "Carol Diaz met Gina Hart in Berlin.") end)
    walk(function() g:entity("new one", "New One") end)
    walk(function() g:alias("eve", "eve adams") end)
    walk(function() g:mention("zed", "d7#1") end)
    walk(function() g:relate("zed", "paris", "visits", "d7#1") end)
    walk(function() g:relate("zed", "lima", "visits", "d8#1") end)
    walk(function() g:mark("d9", "hash") end)
    helpers.oom_walk(function() g:neighbours({ "bob jones" }, 2) end)
    helpers.oom_walk(function() g:communities() end)
    helpers.oom_walk(function() g:communities({ method = "components" }) end)
    helpers.oom_walk(function() g:get("bob jones") end)
    local path = tmpname()
    helpers.oom_walk(function() assert(g:save(path)) end)
    assert.is_true(helpers.oom_walk(function() assert(G.load(path)):close() end) >= 5)
    g:remove_doc("d1")
    assert.is_true(g:_check())
    os.execute("rm -f " .. path .. " " .. path .. ".tmp-*")
  end)
end)
