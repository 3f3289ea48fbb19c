--- rag.providers: model APIs over one transport and one retry policy.
-- `openai{...}` (and any OpenAI-compatible server), `ollama{...}` (its
-- native API), `rerank{ kind = "cohere"|"jina"|"voyage"|"tei", ... }` and
-- `websearch{ kind = "searxng"|"brave"|"tavily", ... }`.
-- @module rag.providers
local M = {}

--- An OpenAI-compatible provider: `:embed(texts)`, `:chat(messages, opts)`.
M.openai = require("rag.providers.openai").new

--- An Ollama provider over its native API: `:embed(texts)`, `:chat(...)`.
M.ollama = require("rag.providers.ollama").new

--- A rerank provider: `:rerank(query, docs [, { top_n = }])`.
M.rerank = require("rag.providers.rerank").new

--- A web search provider: `:search(query [, { k = }])` -> hits.
M.websearch = require("rag.providers.websearch").new

return M
