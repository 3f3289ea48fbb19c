--- rag.pipeline.router: semantic routing (seed 003, recipe 4). Each route
-- has example questions and a pipeline; the examples are embedded once,
-- and each question goes to the route whose examples are most similar
-- (the best cosine of any example), or to `default` when the best is
-- below `threshold` (with no default, the first route). The chosen
-- pipeline answers within the router's run, limits and trace.
-- See docs/pipelines.md.
-- @module rag.pipeline.router
local base = require("rag.pipeline.base")

local type, ipairs, pairs, tostring, error = type, ipairs, pairs, tostring, error
local format, sqrt, concat = string.format, math.sqrt, table.concat

local EXTRA = {
  routes = { "table" },
  default = { "table" },
  threshold = { "number", default = 0.25, min = -1, max = 1 },
  embedder = { "table|userdata" },
}

local function cosine(a, b)
  local dot, na, nb = 0, 0, 0
  for i = 1, #a do
    local x, y = a[i], b[i] or 0
    dot, na, nb = dot + x * y, na + x * x, nb + y * y
  end
  if na == 0 or nb == 0 then
    return 0
  end
  return dot / (sqrt(na) * sqrt(nb))
end

-- The embeddings of `texts` as arrays | nil, msg, code.
local function embed(self, texts)
  local vs, msg, code = self.embedder:embed(texts)
  if not vs then
    return nil, msg or "rag.pipeline.router: the embedder returned nothing", code or "provider"
  end
  for i = 1, #texts do
    if type(vs[i]) ~= "table" then
      error("rag.pipeline.router: the embedder must return vectors as arrays of numbers", 0)
    end
  end
  return vs
end

-- The route for a question: { route =, name =, scores = } | nil, msg, code.
local function route(self, run, question)
  local o = self.o
  return run:step("route", function()
    if not self.vectors then
      local texts, owner = {}, {}
      for r, rt in ipairs(o.routes) do
        for _, e in ipairs(rt.examples) do
          texts[#texts + 1] = e
          owner[#texts] = r
        end
      end
      local vs, msg, code = embed(self, texts)
      if not vs then
        return nil, msg, code
      end
      self.vectors = { list = vs, owner = owner }
    end
    local q, msg, code = embed(self, { question })
    if not q then
      return nil, msg, code
    end
    local best = {}
    for i, v in ipairs(self.vectors.list) do
      local r = self.vectors.owner[i]
      local s = cosine(q[1], v)
      if best[r] == nil or s > best[r] then
        best[r] = s
      end
    end
    local top, scores, shown = 1, {}, {}
    for r, rt in ipairs(o.routes) do
      scores[rt.name] = best[r]
      shown[#shown + 1] = format("%s %.3f", rt.name, best[r])
      if best[r] > best[top] then
        top = r
      end
    end
    local pick = { route = o.routes[top], name = o.routes[top].name, scores = scores,
      score = best[top] }
    local why = format("nearest examples (%s)", concat(shown, ", "))
    if best[top] < o.threshold then
      if o.default then
        pick.route, pick.name = { pipeline = o.default }, "default"
        why = format("best score %.3f < threshold %g (%s): the default", best[top],
          o.threshold, concat(shown, ", "))
      else
        pick.route, pick.name = o.routes[1], o.routes[1].name
        why = format("best score %.3f < threshold %g (%s); no default: the first route",
          best[top], o.threshold, concat(shown, ", "))
      end
    end
    run:branch(pick.name, why)
    return pick
  end, { question = question })
end

local function gather(self, run, question)
  local pick, msg, code = route(self, run, question)
  if not pick then
    return nil, msg, code
  end
  local p = pick.route.pipeline
  if type(p.gather) == "function" then
    return p:gather(run, question)
  end
  return run:step("route_retrieve", function()
    local hits, m, c = p:retrieve(question)
    return hits, m, c
  end, { question = question })
end

-- Copies a foreign pipeline's result into `partial`.
local function adopt(partial, r)
  for _, k in ipairs({ "text", "citations", "contexts", "grounded" }) do
    if r[k] ~= nil then
      partial[k] = r[k]
    end
  end
end

local function respond(self, run, question, partial, stream)
  local pick, msg, code = route(self, run, question)
  if not pick then
    return nil, msg, code
  end
  partial.route, partial.scores = pick.name, pick.scores
  local p = pick.route.pipeline
  if type(p.respond_in) == "function" then
    return p:respond_in(run, question, partial, stream)
  end
  return run:step("route_answer", function()
    local r, m, c, part = p:answer(question, { stream = stream })
    if not r then
      if type(part) == "table" then
        adopt(partial, part)
      end
      return nil, m, c
    end
    adopt(partial, r)
    return true
  end, { question = question })
end

local function check_pipeline(what, p)
  if type(p) ~= "table" or type(p.answer) ~= "function" or type(p.retrieve) ~= "function" then
    error(format("rag.pipeline.router: %s must be a pipeline (with :answer and :retrieve)",
      what), 3)
  end
end

local function check_routes(routes)
  if routes == nil or #routes == 0 then
    error("rag.pipeline.router: option 'routes' must be a non-empty list of "
      .. "{ name =, examples =, pipeline = }", 3)
  end
  local names = {}
  for i, rt in ipairs(routes) do
    local where = "routes[" .. i .. "]"
    if type(rt) ~= "table" or type(rt.name) ~= "string" or names[rt.name] then
      error("rag.pipeline.router: " .. where .. ".name must be a string, unique", 3)
    end
    names[rt.name] = true
    if type(rt.examples) ~= "table" or #rt.examples == 0 then
      error("rag.pipeline.router: " .. where .. ".examples must be a non-empty list of "
        .. "questions", 3)
    end
    for j, e in ipairs(rt.examples) do
      if type(e) ~= "string" then
        error(format("rag.pipeline.router: %s.examples[%d] must be a string", where, j), 3)
      end
    end
    check_pipeline(where .. ".pipeline", rt.pipeline)
    for k in pairs(rt) do
      if k ~= "name" and k ~= "examples" and k ~= "pipeline" then
        error(format("rag.pipeline.router: %s has an unknown field '%s'", where, tostring(k)), 3)
      end
    end
  end
end

--- A router: the common options (`index` not needed) and `routes` (a list
-- of `{ name =, examples = { question, ... }, pipeline = }`), `default` (a
-- pipeline for questions near no route), `threshold` (0.25: the best
-- cosine below which `default` answers), `embedder` (default the index's
-- when `index` is given, else `rag.embed.hashing()`).
-- @return pipeline; `result.route` names the route, `result.scores` its
--   score by route name
-- @raise on bad routes, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.router", opts, EXTRA, 2, true)
  check_routes(o.routes)
  if o.default ~= nil then
    check_pipeline("option 'default'", o.default)
  end
  local p = base.new("router", o, gather, respond)
  local e = o.embedder or (o.index and o.index.embedder)
  if e == nil then
    e = require("rag").embed.hashing()
  end
  if type(e.embed) ~= "function" then
    error("rag.pipeline.router: option 'embedder' must have an :embed(texts) method", 2)
  end
  p.embedder = e
  return p
end
