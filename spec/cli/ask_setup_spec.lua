-- rag.cli.ask_setup: the settings `rag ask` and `rag serve` share (flags
-- over RAG_* variables over the folder's rag.json and rag.toml).
local rag = require("rag")
local cli = require("rag.cli")
local helpers = require("spec.helpers")

describe("rag.cli.ask_setup", function()
  local dir

  before_each(function()
    dir = helpers.tmpname()
    os.remove(dir)
    assert(rag.core.fs.mkdir(dir))
  end)

  after_each(function()
    for _, name in ipairs(rag.core.fs.list(dir) or {}) do
      os.remove(dir .. "/" .. name)
    end
    os.remove(dir)
  end)

  local function write(name, text)
    assert(rag.core.fs.write(dir .. "/" .. name, text))
  end

  it("reads the folder's files under the flags, with the defaults of rag ask", function()
    local s = cli.ask_setup(dir)
    assert.are.equal("naive", s.pipeline)
    assert.is_nil(s.k)
    assert.is_function(s.llm.chat) -- the extractive LLM
    assert.is_truthy(s.embedder) -- hashing
    write("rag.toml", 'pipeline = "fusion"\nk = 3\n')
    write("rag.json", '{"pipeline":"hybrid","embedder":"none"}')
    s = cli.ask_setup(dir)
    assert.are.equal("hybrid", s.pipeline) -- rag.json over rag.toml
    assert.are.equal(3, s.k)
    assert.is_false(s.embedder)
    s = cli.ask_setup(dir, { pipeline = "corrective", k = "7", mode = "bm25" })
    assert.are.equal("corrective", s.pipeline)
    assert.are.equal(7, s.k)
    assert.are.equal("bm25", s.mode)
  end)

  it("raises with the command's message on a bad setting", function()
    assert.has_error(function() cli.ask_setup(dir, { llm = "gpt" }) end,
      "rag.cli.ask_setup: unknown llm 'gpt' (expected extractive, openai or ollama)")
    assert.has_error(function() cli.ask_setup(dir, { pipeline = "nope" }) end)
    assert.has_error(function() cli.ask_setup(dir, { embedder = "nope" }) end)
    write("rag.json", '{"k":0}')
    assert.has_error(function() cli.ask_setup(dir) end)
    assert.has_error(function() cli.ask_setup(1) end,
      "rag.cli.ask_setup: dir must be a string, got number")
  end)
end)
