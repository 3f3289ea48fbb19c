-- A pipeline inside nginx (spec/openresty/run.sh, issue 22 acceptance D).
-- GET /pipeline?model=NAME answers one question per request with
-- rag.pipeline.hybrid over the first 40 SciFact documents (hashing
-- vectors), the LLM being rag.providers.openai on the loopback model server
-- (RAG_LLMD, spec/fixtures/llmd.py; NAME picks its behaviour) reached
-- through the transport the provider picks by itself: cosockets.
-- Arguments: `model` (required), `stream=1` (collect the streamed deltas),
-- `timeout` (the provider's, seconds; default 0.5), `pipeline` (default
-- "hybrid"), `doc` (ask the title of that SciFact document; default 3).
-- Replies with JSON: { ok, text, citations, contexts = { ids }, deltas,
-- msg, code, seconds, steps = "retrieve rerank ...", trace, usage } where a
-- failure gives ok = false, msg, code and the partial result's fields.
-- luacheck: globals ngx
local rag = require("rag")

local json = rag.json

local M = {}

-- The index, built once per worker.
local idx, docs
local function corpus()
  if idx then
    return idx, docs
  end
  local here = debug.getinfo(1, "S").source:sub(2)
  local repo = here:match("^(.*)/spec/openresty/[^/]*$") or "."
  docs = {}
  for line in io.lines(repo .. "/spec/fixtures/texts/scifact40.jsonl") do
    local d = json.decode(line)
    docs[#docs + 1] = { id = d._id, title = d.title, text = d.text, source = "scifact/" .. d._id }
  end
  idx = rag.index.new({ embedder = rag.embed.hashing({ dim = 256 }) })
  assert(idx:add_many(docs))
  return idx, docs
end

local function now()
  ngx.update_time()
  return ngx.now()
end

--- location = /pipeline
function M.answer()
  local args = ngx.req.get_uri_args()
  local index, d = corpus()
  local llm = rag.providers.openai({ base_url = os.getenv("RAG_LLMD") .. "/v1",
    api_key = "sk-ngx-pipeline", model = args.model or "ok:rag",
    timeout = tonumber(args.timeout) or 0.5, max_retries = 0 })
  local p = rag.pipeline[args.pipeline or "hybrid"]({ index = index, llm = llm })
  local deltas = args.stream and {} or nil
  local t0 = now()
  local r, msg, code, partial = p:answer(d[tonumber(args.doc) or 3].title, deltas and {
    stream = function(s) deltas[#deltas + 1] = s end } or nil)
  local res = r or partial or {}
  local out = { ok = r ~= nil, msg = msg, code = code, seconds = now() - t0,
    text = res.text, deltas = deltas, usage = res.usage, contexts = {}, citations = {},
    trace = {} }
  for i, h in ipairs(res.contexts or {}) do
    out.contexts[i] = tostring(h.id)
  end
  for n, c in pairs(res.citations or {}) do
    out.citations[#out.citations + 1] = { n = n, id = c.id }
  end
  table.sort(out.citations, function(a, b) return a.n < b.n end)
  local names = {}
  for i, e in ipairs(res.trace or {}) do
    out.trace[i] = e
    if e.kind == "step" then
      names[#names + 1] = e.name
    end
  end
  out.steps = table.concat(names, " ")
  ngx.header.content_type = "application/json"
  ngx.say(json.encode(out))
end

return M
