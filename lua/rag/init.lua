--- rag: retrieval-augmented generation for Lua, with a C core.
-- `require("rag")` is the facade; `rag.core` is the C module behind it.
-- @module rag
local core = require("rag.core")

local M = {}

--- Version of the toolkit, e.g. "0.1.0".
M._VERSION = core.version

--- The C module (`rag.core`); users seldom need it directly.
M.core = core

--- Error codes of `nil, msg, code` failures and their meanings: `codes`,
-- `meaning[code]`, `is_code(s)`, `fail(code, fmt, ...)`. See docs/api.md.
M.errors = require("rag.errors")

--- JSON: `encode(value [, opts])`, `decode(s [, opts])`, `null`, `object([t])`.
-- See docs/api.md.
M.json = core.json

--- HTTP over libcurl: `request(req)`. See docs/api.md.
M.http = core.http

--- Text utilities: `normalize`, `analyzer`, `tokenize`, `sentences`, `hash`.
-- See docs/api.md.
M.text = require("rag.text")

--- Chunkers: `fixed`, `recursive`, `markdown`, `sentences`, `semantic`,
-- `window`, `hierarchy`, each `(text, opts)`. See docs/api.md.
M.chunk = core.chunk

--- BM25 index: `new(opts)`, `load(path)`; methods `add`, `remove`, `search`,
-- `explain`, `stats`, `save`, `close`, `#b`. See docs/api.md.
M.bm25 = core.bm25

--- Exact vector index: `new{ dim=, metric=, dtype= }`, `load(path)`, `pack(t)`,
-- `unpack(s)`; methods `add`, `remove`, `search`, `search_batch`, `get`, `stats`,
-- `save`, `close`, `#v`. See docs/api.md.
M.vec = core.vec

--- Approximate vector index (HNSW): `new{ dim=, M=, ef_construction=, ... }`,
-- `load(path)`; methods `add`, `remove`, `search`, `get`, `compact`, `stats`,
-- `save`, `close`, `#h`. See docs/api.md.
M.hnsw = core.hnsw

--- Rank fusion: `rrf(lists [, opts])` (presets "paper", "langchain",
-- "llamaindex", "haystack") and `scores(lists [, opts])` (minmax, zscore,
-- dbsf). See docs/api.md.
M.fuse = core.fuse

--- Reranking without a model: `mmr(hits, opts)`, `litm(hits [, opts])`,
-- `cutoff(hits, opts)`. See docs/api.md.
M.rerank = require("rag.rerank")

--- Context packing into a token budget, with citations: `pack(items, opts)`.
-- See docs/api.md.
M.pack = core.pack.pack

--- IR evaluation: `ir(run, qrels, measures [, opts])`, `beir(dir [, opts])`.
-- See docs/api.md.
M.eval = require("rag.eval")

--- Transports for providers: `default`, `curl`, `ngx`, `sleep`, `now`.
-- See docs/api.md.
M.transport = require("rag.transport")

--- Model APIs: `openai{...}`, `ollama{...}`, `rerank{ kind=, ... }`.
-- See docs/api.md.
M.providers = require("rag.providers")

--- Embedders without a server (`hashing`, `model2vec`) and the embedding
-- cache (`cache`). See docs/api.md.
M.embed = require("rag.embed")

--- Tokenizers: `get(name)`, `load(path, name)`, `approx()`. See docs/api.md.
M.tokenizer = require("rag.tokenizer")

--- Document collections: `new(opts)`, `open(dir [, opts])`; methods `add`,
-- `add_many`, `sync`, `remove`, `get`, `search`, `stats`, `save`, `close`,
-- `#idx`. See docs/index.md.
M.index = require("rag.index")

--- Entity graphs kept with an index (Graph RAG): `build(idx [, opts])`,
-- `new`, `normalize`, `mentions`, `llm_extractor`, ... See docs/pipelines.md.
M.graph = require("rag.graph")

--- LLMs without a server: `extractive(opts)`, `record(llm, path)`,
-- `replay(path)`. See docs/api.md.
M.llm = require("rag.llm")

--- The pipelines' prompts, English and Chinese: `get(lang, overrides)`,
-- `messages(set, name, slots)`, `render(template, slots)`, `history(turns)`,
-- `detect(text)`. See docs/api.md.
M.prompts = require("rag.prompts")

--- Document loaders: `file`, `dir`, `text`, `markdown`, `html`, `pdf`,
-- `jsonl`, `csv`, `beir`, `code`, `sqlite`, `page_of`, `sections`.
-- See docs/loaders.md.
M.load = require("rag.load")

--- Stores beyond one process: `postgres{...}` (rag.index on PostgreSQL +
-- pgvector) and `pg` (the wire client), loaded on first use. See
-- docs/postgres.md.
M.store = setmetatable({}, { __index = function(t, name)
  if name ~= "postgres" and name ~= "pg" then
    return nil
  end
  local m = require("rag.store." .. name)
  rawset(t, name, m)
  return m
end })

--- Pipelines and their run context (`runtime`: limits and traces).
-- See docs/pipelines.md.
M.pipeline = require("rag.pipeline")

return M
