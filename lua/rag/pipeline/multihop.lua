--- rag.pipeline.multihop: multi-hop questions. The question is broken
-- into at most `hops` sub-questions (`decompose` prompt, or the
-- `decompose` step); each is answered in turn from its own search, what
-- earlier hops found carried into the next search and question; the final
-- answer is given from the contexts of all hops, with the findings. See
-- docs/pipelines.md.
-- @module rag.pipeline.multihop
local base = require("rag.pipeline.base")

local type, ipairs, tostring, error = type, ipairs, tostring, error
local concat = table.concat

local EXTRA = {
  decompose = { "function" },
  hops = { "number", default = 3, int = true, min = 1 },
  rrf_k = { "number", default = 60, min = 0 },
}

-- The sub-questions: the `decompose` step's list, else the LLM's lines;
-- the question itself when there are none.
local function subquestions(self, run, question)
  local o = self.o
  local list, msg, code
  if o.decompose then
    list, msg, code = run:step("decompose", function()
      local l, m, c = o.decompose(question)
      if l == nil then
        return nil, m, c
      end
      if type(l) ~= "table" then
        error("rag.pipeline.multihop: decompose returned " .. type(l) .. ", not a list", 0)
      end
      return l
    end, { question = question })
  else
    local text
    text, msg, code = self:ask(run, "decompose", "decompose", { question = question,
      n = o.hops }, question)
    list = text and base.lines(text, o.hops)
  end
  if not list then
    return nil, msg, code
  end
  local out = {}
  for _, q in ipairs(list) do
    if type(q) == "string" and q:find("%S") and #out < o.hops then
      out[#out + 1] = q
    end
  end
  if #out == 0 then
    out[1] = question
  end
  return out
end

-- An answer without its markers, trimmed.
local function bare(text)
  return (text:gsub("%s*%[%d+%]", ""):match("^%s*(.-)%s*$"))
end

-- The hop's hits: the sub-question's search; with findings, fused (RRF)
-- with the search of the sub-question followed by the last finding, so
-- that what was found leads the search without taking it over.
local function hop_hits(self, run, sub, findings)
  local o = self.o
  local n = o.rerank and o.fetch_k or o.k
  if #findings == 0 then
    return self:search(run, sub, n)
  end
  local lists = {}
  local msg, code
  lists[1], msg, code = self:search(run, sub, o.fetch_k)
  if not lists[1] then
    return nil, msg, code
  end
  lists[2], msg, code = self:search(run, sub .. " " .. findings[#findings].answer, o.fetch_k,
    "retrieve_carried")
  if not lists[2] then
    return nil, msg, code
  end
  return base.fuse(run, lists, n, o.rrf_k)
end

-- What earlier hops found, for the LLM's instructions.
local function known(findings)
  local lines = {}
  for i, f in ipairs(findings) do
    lines[i] = "- " .. f.question .. "\n  " .. f.answer
  end
  return "Known so far (what earlier sub-questions found):\n" .. concat(lines, "\n")
end

-- One hop: search (with the last finding), answer from its contexts.
-- @return hits, finding (nil when the hop found nothing) | nil, msg, code
local function hop(self, run, sub, findings, question)
  local note
  if #findings > 0 then
    note = known(findings)
    run:branch("carry", "the findings of " .. #findings .. " earlier hop(s) go into this "
      .. "search and the LLM's instructions")
  end
  local hits, msg, code = hop_hits(self, run, sub, findings)
  if hits then
    hits, msg, code = self:refine(run, sub, hits)
  end
  if not hits then
    return nil, msg, code
  end
  local packed
  packed, msg, code = self:pack(run, hits)
  if not packed then
    return nil, msg, code
  end
  if #packed.contexts == 0 then
    run:branch("no_context", "nothing retrieved for this sub-question")
    return hits, nil
  end
  local text
  text, msg, code = self:ask(run, "answer_hop", "answer", { question = sub,
    context = packed.text }, question, nil, note)
  if not text then
    return nil, msg, code
  end
  text = bare(text)
  if text == "" or text == self:set(question).refusal then
    run:branch("no_finding", "the contexts do not answer this sub-question")
    return hits, nil
  end
  return hits, { question = sub, answer = text }
end

-- All hops: the hits of every hop (in order, without repeats) and the
-- findings. A decomposition into the question alone is one search.
local function hops(self, run, question)
  local subs, msg, code = subquestions(self, run, question)
  if not subs then
    return nil, msg, code
  end
  if #subs == 1 and subs[1] == question then
    run:branch("one_hop", "the decomposition is the question itself")
    local o = self.o
    local hits
    hits, msg, code = self:search(run, question, o.rerank and o.fetch_k or o.k)
    if not hits then
      return nil, msg, code
    end
    hits, msg, code = self:refine(run, question, hits)
    if not hits then
      return nil, msg, code
    end
    return hits, {}
  end
  run:branch("hops", #subs .. " sub-questions, answered in turn")
  local all, seen, findings = {}, {}, {}
  for i, sub in ipairs(subs) do
    local hits, finding
    hits, finding, code = run:step("hop", function()
      local h, f, c = hop(self, run, sub, findings, question)
      if not h then
        return nil, f, c
      end
      return h, f
    end, { question = sub, hop = i })
    if not hits then
      return nil, finding, code
    end
    if finding then
      findings[#findings + 1] = finding
    end
    for _, h in ipairs(hits) do
      local id = tostring(h.id)
      if not seen[id] then
        seen[id] = true
        all[#all + 1] = h
      end
    end
  end
  return all, findings
end

local function gather(self, run, question)
  local hits, msg, code = hops(self, run, question)
  if not hits then
    return nil, msg, code
  end
  return hits
end

-- The final answer: the question with the findings, from all contexts.
local function respond(self, run, question, partial, stream)
  local hits, findings, code = hops(self, run, question)
  if not hits then
    return nil, findings, code
  end
  return self:reply(run, question, hits, partial, stream, nil,
    #findings > 0 and known(findings) or nil)
end

--- A multi-hop pipeline: the common options and `hops` (at most this many
-- sub-questions, default 3), `decompose` (a function `(question) -> {
-- sub-question, ... }` in place of the LLM), `rrf_k` (60: fusing a hop's
-- two searches).
-- @return pipeline
-- @raise on a missing index, an unknown option or a bad value
return function(opts)
  local o = base.options("rag.pipeline.multihop", opts, EXTRA, 2)
  return base.new("multihop", o, gather, respond)
end
