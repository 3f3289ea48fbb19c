--- rag.pipeline: retrieval pipelines that users script, over rag.index, the
-- providers and rag.llm. Every pipeline runs inside a run context
-- (`runtime`) with hard limits and a trace. See docs/pipelines.md.
-- @module rag.pipeline
local M = {}

--- The run context: `runtime.new{ limits = { steps =, llm_calls =, tokens =,
-- deadline_ms = } }`, `runtime.trace(jsonl)`. See docs/pipelines.md.
M.runtime = require("rag.pipeline.runtime")

--- The pipelines: each `rag.pipeline.NAME(opts)` returns an object with
-- `:retrieve(q [, opts])` and `:answer(q [, { history =, stream = }])`.
M.naive = require("rag.pipeline.naive")
M.hybrid = require("rag.pipeline.hybrid")
M.fusion = require("rag.pipeline.fusion")
M.hyde = require("rag.pipeline.hyde")
M.stepback = require("rag.pipeline.stepback")
M.window = require("rag.pipeline.window")
M.multihop = require("rag.pipeline.multihop")
M.adaptive = require("rag.pipeline.adaptive")
M.corrective = require("rag.pipeline.corrective")
M.router = require("rag.pipeline.router")
M.agent = require("rag.pipeline.agent")
M.graph = require("rag.pipeline.graph")
M.summary = require("rag.pipeline.summary")

return M
