-- examples/03_chunk.lua: chunk a Markdown note several ways, offline.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' lua5.4 examples/03_chunk.lua
local rag = require("rag")

local doc = [[
# Retrieval

Retrieval-augmented generation finds passages first. Then a model answers
from them. Dr. Smith calls this "open-book" answering.

## Chunking

```sh
# a shell comment, not a heading
rag chunk notes.md
```

Chunks must fit the model's budget. 检索增强生成先检索，再生成。每个块都有偏移量。

## Fusion

Reciprocal rank fusion combines BM25 and vector hits with k = 60.
]]

-- chunks' sizes are in the chunker's unit (opts.unit): tokens unless told
local function show(title, chunks, unit)
  print(("%s: %d chunks"):format(title, #chunks))
  for _, c in ipairs(chunks) do
    assert(c.text == doc:sub(c.start, c.stop)) -- offsets by construction
    local extra = ""
    if c.meta and c.meta.headings then
      extra = "  [" .. table.concat(c.meta.headings, " > ") .. "]"
    elseif c.meta and c.meta.level then
      extra = ("  [level %d%s]"):format(c.meta.level,
        c.meta.parent and (", parent " .. c.meta.parent) or "")
    end
    print(("  %3d-%-3d %2d %s, overlap %d: %s%s"):format(c.start, c.stop, c.tokens,
      unit or "tokens", c.overlap, (c.text:gsub("\n", " ")):sub(1, 48), extra))
  end
end

local cl100k = rag.tokenizer.get("cl100k_base")
show("recursive, 40 cl100k tokens, overlap 8", rag.chunk.recursive(doc, { size = 40, overlap = 8,
  tokenizer = cl100k }))
show("markdown sections (approx tokens)", rag.chunk.markdown(doc, { size = 64 }))
show("sentences, 80 characters", rag.chunk.sentences(doc, { unit = "char", size = 80 }),
  "chars")
show("hierarchy 120/40 tokens", rag.chunk.hierarchy(doc, { sizes = { 120, 40 } }))
show("langchain preset, 100 characters", rag.chunk.recursive(doc, { preset = "langchain",
  size = 100 }))

local w = rag.chunk.window(doc, { window = 1 })[3]
print("window around sentence 3: " .. doc:sub(w.meta.window.start, w.meta.window.stop):gsub("\n",
  " "))

local _, msg, code = rag.chunk.fixed("bad \255 byte", {})
print("invalid UTF-8: " .. msg .. " (" .. code .. ")")
