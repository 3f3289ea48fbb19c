-- rag.graph over a rag.index: building extracts only new or changed
-- documents, removed documents take their edges with them, the graph is
-- saved in the index's directory under its manifest and reopens with the
-- same neighbourhoods; a damaged graph file is refused like any part.
local rag = require("rag")
local helpers = require("spec.helpers")

local function docs()
  return {
    { id = "a", text = "Marie Curie worked with Pierre Curie in Paris. They studied radium." },
    { id = "b", text = "Pierre Curie taught at the Sorbonne. The Sorbonne is in Paris." },
    { id = "c", text = "Albert Einstein met Marie Curie at the Solvay Conference." },
  }
end

-- Everything the graph holds, as plain data (for comparing two graphs).
local function dump(g)
  local out = { edges = g:edges(), entities = {} }
  for _, k in ipairs(g:entities()) do
    out.entities[#out.entities + 1] = g:get(k)
  end
  return out
end

describe("rag.graph.build", function()
  it("extracts new and changed documents only, and drops removed ones", function()
    local idx = rag.index.new({ embedder = false })
    assert(idx:add_many(docs()))
    local extracted = {}
    local function counting(chunk)
      extracted[#extracted + 1] = chunk.id
      return { entities = { { name = "thing " .. chunk.doc_id } }, relations = {} }
    end
    local c = assert(rag.graph.build(idx, { extract = counting }))
    assert.are.same({ "a#1", "b#1", "c#1" }, extracted)
    assert.are.same({ 3, 0, 0 }, { c.extracted, c.unchanged, c.removed })
    extracted = {}
    idx:add({ id = "b", text = "Pierre Curie taught physics at the Sorbonne." })
    idx:add({ id = "d", text = "Niels Bohr visited Copenhagen." })
    c = assert(rag.graph.build(idx, { extract = counting }))
    assert.are.same({ "b#1", "d#1" }, extracted)
    assert.are.same({ 2, 2, 0 }, { c.extracted, c.unchanged, c.removed })
    -- removing through the index takes the document's entities at once
    assert.is_truthy(idx.graph:get("thing a"))
    idx:remove("a")
    assert.is_nil(idx.graph:get("thing a"))
    assert.is_nil(idx.graph:marked("a"))
    c = assert(rag.graph.build(idx, { extract = counting }))
    assert.are.same({ 0, 3, 0 }, { c.extracted, c.unchanged, c.removed })
  end)

  it("equals a graph built from scratch after changes (heuristic extractor)", function()
    local idx = rag.index.new({ embedder = false })
    assert(idx:add_many(docs()))
    assert(rag.graph.build(idx))
    idx:add({ id = "c", text = "Albert Einstein lectured in Berlin." })
    idx:remove("b")
    idx:add({ id = "e", text = "Lise Meitner worked in Berlin with Otto Hahn." })
    assert(rag.graph.build(idx))
    local fresh = rag.index.new({ embedder = false })
    assert(fresh:add_many({ docs()[1], { id = "c", text = "Albert Einstein lectured in Berlin." },
      { id = "e", text = "Lise Meitner worked in Berlin with Otto Hahn." } }))
    assert(rag.graph.build(fresh))
    assert.are.same(dump(fresh.graph), dump(idx.graph))
    -- no ghost of the removed document: the Sorbonne was only in "b"
    assert.is_nil(idx.graph:get("sorbonne"))
    local nb = idx.graph:neighbours({ "marie curie" }, 2)
    for _, e in ipairs(nb.edges) do
      for _, chunk in ipairs(e.chunks) do
        assert.is_nil(chunk:match("^b#"))
      end
    end
  end)

  it("saves with the index and reopens with identical neighbourhoods", function()
    local dir = helpers.tmpname()
    local idx = rag.index.new({ embedder = false })
    assert(idx:add_many(docs()))
    assert(rag.graph.build(idx))
    assert(idx:save(dir))
    local m = rag.json.decode(helpers.read(dir .. "/manifest.json"))
    assert.is_table(m.files.graph)
    for _, readonly in ipairs({ false, true }) do
      local again = assert(rag.index.open(dir, { readonly = readonly }))
      assert.is_truthy(again.graph)
      assert.are.same(dump(idx.graph), dump(again.graph))
      for _, k in ipairs(idx.graph:entities()) do
        for hops = 0, 2 do
          assert.are.same(idx.graph:neighbours({ k }, hops), again.graph:neighbours({ k }, hops))
        end
      end
      again:close()
    end
    -- a damaged graph file fails the open like any damaged part
    local path = dir .. "/" .. m.files.graph.name
    local bytes = helpers.read(path)
    helpers.write(path, bytes:sub(1, 10) .. string.char((bytes:byte(11) + 1) % 256)
      .. bytes:sub(12))
    local none, msg, code = rag.index.open(dir)
    assert.is_nil(none)
    assert.are.equal("corrupt", code)
    assert.is_string(msg)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("raises for bad options", function()
    local idx = rag.index.new({ embedder = false })
    assert.has_error(function() rag.graph.build(idx, { extract = "magic" }) end,
      "rag.graph.build: option 'extract' must be \"heuristic\", \"llm\" or a function")
    assert.has_error(function() rag.graph.build(idx, { extract = "llm" }) end,
      "rag.graph.build: extract = \"llm\" needs option 'llm'")
    assert.has_error(function() rag.graph.build({}, {}) end,
      "rag.graph.build: idx must be a rag.index")
  end)
end)
