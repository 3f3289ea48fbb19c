--- rag.pipeline.agent: agentic RAG. Turn by turn an LLM calls a tool
-- (`search` the index, `read` a document, `websearch`, the user's tools)
-- or answers: through function calling when the LLM supports it
-- (`llm.supports_tools`), else a ReAct text protocol. Each LLM call and
-- tool call is within the run's limits and traced; the answer cites the
-- numbered snippets the tools showed. See docs/pipelines.md.
-- @module rag.pipeline.agent
local base = require("rag.pipeline.base")
local prompts = require("rag.prompts")
local json = require("rag.core").json

local type, pairs, ipairs, tostring, error, pcall, next =
  type, pairs, ipairs, tostring, error, pcall, next
local format, concat = string.format, table.concat

local FNAME = "rag.pipeline.agent"

local EXTRA = {
  tools = { "table" },
  max_steps = { "number", default = 8, int = true, min = 1 },
  websearch = { "table|userdata" },
  protocol = { "string", default = "auto", enum = { "auto", "tools", "react" } },
  read_chars = { "number", default = 4000, int = true, min = 1 },
}

-- How much of a malformed reply a corrective message quotes.
local QUOTE = 120

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function quote(s)
  s = tostring(s)
  if #s > QUOTE then
    s = s:sub(1, QUOTE) .. "..."
  end
  return (format("%q", s):gsub("\\\n", "\\n"))
end

-- {====== Argument validation (a subset of JSON Schema) ======}

local TYPE_OK = {
  string = function(v) return type(v) == "string" end,
  number = function(v) return type(v) == "number" end,
  integer = function(v) return type(v) == "number" and v % 1 == 0 end,
  boolean = function(v) return type(v) == "boolean" end,
  object = function(v) return type(v) == "table" and v[1] == nil end,
  array = function(v) return type(v) == "table" and (v[1] ~= nil or next(v) == nil) end,
  null = function(v) return v == json.null end,
}

-- nil when `v` fits the property schema `p` (its type or types, its enum),
-- else why not.
local function check_value(key, p, v)
  local types = p.type
  if type(types) == "string" then
    types = { types }
  end
  if type(types) == "table" and #types > 0 then
    local fits = false
    for _, t in ipairs(types) do
      local ok = TYPE_OK[t]
      if not ok or ok(v) then -- a type we do not check passes
        fits = true
        break
      end
    end
    if not fits then
      return format("argument '%s' must be of type %s", key, concat(types, " or "))
    end
  end
  if type(p.enum) == "table" and #p.enum > 0 then
    for _, e in ipairs(p.enum) do
      if e == v then
        return nil
      end
    end
    local shown = {}
    for i, e in ipairs(p.enum) do
      shown[i] = tostring(e)
    end
    return format("argument '%s' must be one of %s", key, concat(shown, ", "))
  end
  return nil
end

--- Checks `args` against a tool's `parameters` (an object schema): the
-- required keys are there, each given key has its type and enum; keys
-- not in `properties` are refused only with `additionalProperties = false`.
-- @return nil when they fit, else why not
local function validate(schema, args)
  if type(args) ~= "table" or args[1] ~= nil then
    return "the arguments must be a JSON object"
  end
  for _, key in ipairs(schema.required or {}) do
    if args[key] == nil or args[key] == json.null then
      return format("argument '%s' is required", key)
    end
  end
  local props = schema.properties or {}
  local keys = {}
  for key in pairs(args) do
    keys[#keys + 1] = tostring(key)
  end
  table.sort(keys)
  for _, key in ipairs(keys) do
    local p = props[key]
    if p == nil then
      if schema.additionalProperties == false then
        return format("unknown argument '%s'", key)
      end
    elseif type(p) == "table" then
      local why = check_value(key, p, args[key])
      if why then
        return why
      end
    end
  end
  return nil
end

-- {====== Tools ======}

local TOOL_FIELDS = { name = true, description = true, parameters = true, fn = true }

-- The schema of a tool with a single string argument `key`.
local function one_string(key, what)
  return { type = "object", properties = { [key] = { type = "string", description = what } },
    required = { key } }
end

-- A hit list checked for the snippets: tables with a string text.
local function hit_list(what, hits)
  if type(hits) ~= "table" then
    error(format("%s: %s returned %s, not a hit list", FNAME, what, type(hits)), 0)
  end
  return hits
end

-- The index search of the `search` tool: the pipeline's `retrieve` when
-- given, else `index:search` with `k`, `fetch_k` and `search`; then the
-- user's `rerank` and `compress`, if any.
local function search_index(self, run, query)
  local o = self.o
  local hits, msg, code
  local k = o.rerank and o.fetch_k or o.k
  if o.retrieve then
    hits, msg, code = o.retrieve(query, { k = k, fetch_k = o.fetch_k })
  else
    local so = { k = k, fetch_k = math.max(o.fetch_k, k) }
    for key, v in pairs(o.search or {}) do
      so[key] = v
    end
    hits, msg, code = o.index:search(query, so)
  end
  if hits == nil then
    return nil, msg or FNAME .. ": search returned nothing", code or "provider"
  end
  return self:refine(run, query, hit_list("search", hits))
end

local function builtin_tools(self)
  local o, out = self.o, {}
  if o.index or o.retrieve then
    out[#out + 1] = { name = "search", builtin = true,
    description = "Search the documents. Returns numbered passages to cite.",
    parameters = one_string("query", "what to search for"),
    fn = function(args, ctx)
      local hits, msg, code = search_index(self, ctx.run, args.query)
      if not hits then
        return nil, msg, code
      end
      return ctx.cite(hits)
    end }
  end
  if o.index and type(o.index.get) == "function" then
    out[#out + 1] = { name = "read", builtin = true,
      description = "Read a whole document by its id (the 'id:' a search result shows). "
        .. "Returns it as a numbered passage to cite.",
      parameters = one_string("id", "the document's id"),
      fn = function(args, ctx)
        local doc = o.index:get(args.id)
        if type(doc) ~= "table" or type(doc.text) ~= "string" then
          return nil, format("%s: read: no document with id '%s'", FNAME, args.id), "provider"
        end
        local text = doc.text
        if #text > o.read_chars then -- cut at a character boundary
          local i = o.read_chars
          while i > 1 and text:byte(i + 1) and text:byte(i + 1) >= 0x80
              and text:byte(i + 1) < 0xC0 do
            i = i - 1
          end
          text = text:sub(1, i)
        end
        return ctx.cite({ { id = tostring(doc.id), doc_id = doc.id, source = doc.source,
          title = doc.title, text = text, start = 1, stop = #text } })
      end }
  end
  if o.websearch then
    out[#out + 1] = { name = "websearch", builtin = true,
      description = "Search the web. Returns numbered passages to cite.",
      parameters = one_string("query", "what to search the web for"),
      fn = function(args, ctx)
        local hits, msg, code = o.websearch:search(args.query, { k = o.k })
        if hits == nil then
          return nil, msg or FNAME .. ": websearch returned nothing", code or "provider"
        end
        return ctx.cite(hit_list("websearch", hits))
      end }
  end
  return out
end

-- The tools: the built-in ones, then the user's (checked: misuse raises).
local function make_tools(self, user, level)
  local tools, by_name = builtin_tools(self), {}
  for _, t in ipairs(tools) do
    by_name[t.name] = t
  end
  for i, t in ipairs(user or {}) do
    local where = format("%s: tools[%d]", FNAME, i)
    if type(t) ~= "table" then
      error(where .. " must be a table", level)
    end
    for k in pairs(t) do
      if not TOOL_FIELDS[k] then
        error(format("%s has an unknown field '%s'", where, tostring(k)), level)
      end
    end
    if type(t.name) ~= "string" or not t.name:find("^[%a_][%w_%-]*$") or #t.name > 64 then
      error(where .. ": 'name' must be a string of letters, digits, '_' and '-' "
        .. "(at most 64, not starting with a digit or '-')", level)
    end
    if by_name[t.name] then
      error(format("%s: a tool named '%s' already exists", where, t.name), level)
    end
    if type(t.description) ~= "string" then
      error(where .. ": 'description' must be a string", level)
    end
    if t.parameters ~= nil and (type(t.parameters) ~= "table" or (t.parameters.type ~= nil
        and t.parameters.type ~= "object")) then
      error(where .. ": 'parameters' must be a JSON schema table of type \"object\"", level)
    end
    local params = t.parameters or {}
    if params.properties ~= nil and type(params.properties) ~= "table" then
      error(where .. ": 'parameters.properties' must be a table", level)
    end
    if params.required ~= nil then
      local ok = type(params.required) == "table"
      for _, key in ipairs(ok and params.required or {}) do
        ok = ok and type(key) == "string"
      end
      if not ok then
        error(where .. ": 'parameters.required' must be a list of strings", level)
      end
    end
    if type(t.fn) ~= "function" then
      error(where .. ": 'fn' must be a function(args, ctx)", level)
    end
    local tool = { name = t.name, description = t.description, fn = t.fn,
      parameters = t.parameters or { type = "object", properties = {} } }
    tools[#tools + 1] = tool
    by_name[t.name] = tool
  end
  if #tools == 0 then
    error(FNAME .. ": no tools (give 'index' or 'tools')", level)
  end
  return tools, by_name
end

-- A copy of a JSON schema in which empty tables are JSON objects, except
-- under "required" and "enum" (lists).
local function as_json(v, key)
  if type(v) ~= "table" then
    return v
  end
  local c = {}
  for k, x in pairs(v) do
    c[k] = as_json(x, k)
  end
  if next(c) == nil and key ~= "required" and key ~= "enum" then
    return json.object(c)
  end
  return c
end

-- The tools as `chat` gets them: `{ name =, description =, parameters = }`.
local function tool_specs(tools)
  local out = {}
  for i, t in ipairs(tools) do
    local p = as_json(t.parameters)
    if p.type == nil then
      p.type = "object"
    end
    if p.properties == nil then
      p.properties = json.object()
    end
    out[i] = { name = t.name, description = t.description, parameters = p }
  end
  return out
end

-- The tools as the ReAct prompt lists them: a line each.
local function tool_lines(specs)
  local lines, names = {}, {}
  for i, s in ipairs(specs) do
    lines[i] = format("%s: %s Arguments (JSON schema): %s", s.name, s.description,
      json.encode(s.parameters) or "{}")
    names[i] = s.name
  end
  return concat(lines, "\n"), concat(names, ", ")
end

-- {====== One tool call ======}

-- The snippets' numbers: each hit a tool shows gets the next number, and
-- keeps it when shown again.
local function cite(state, hits)
  local parts = {}
  for _, h in ipairs(hits) do
    if type(h) == "table" and type(h.text) == "string" and h.id ~= nil then
      local key = tostring(h.id)
      local n = state.numbers[key]
      if not n then
        n = #state.contexts + 1
        state.contexts[n], state.numbers[key] = h, n
      end
      local src = h.source and tostring(h.source) or h.doc_id and tostring(h.doc_id) or key
      local head = format("[%d] %s", n, src)
      if h.doc_id ~= nil and tostring(h.doc_id) ~= src then
        head = head .. " (id: " .. tostring(h.doc_id) .. ")"
      end
      parts[#parts + 1] = head .. "\n" .. trim(h.text)
    end
  end
  if #parts == 0 then
    return "No results."
  end
  return concat(parts, "\n\n")
end

-- Why a call is malformed (unknown tool, arguments not a JSON object or
-- not fitting the parameters), or nil with the tool.
local function check_call(self, name, args, raw)
  local tool = self.by_name[name]
  if not tool then
    return format("there is no tool %s (the tools are: %s)", quote(name or ""),
      self.tool_names)
  end
  if type(args) ~= "table" then
    return format("the arguments of '%s' are not a JSON object: %s", name, quote(raw or ""))
  end
  local why = validate(tool.parameters, args)
  if why then
    return format("the arguments of '%s' do not fit its parameters: %s", name, why)
  end
  return nil, tool
end

--- Runs one tool as a step "tool" (inputs `{ name =, arguments = }`). A
-- tool's failure (nil, msg, code, an error it raises, a result that is not
-- a string) becomes the observation "Error: msg" and the loop goes on.
-- @return the observation | nil, msg, "budget" (the run stopped)
local function call_tool(self, run, state, tool, args, question)
  local ran = false
  local ctx = { run = run, question = question, index = self.o.index,
    cite = function(hits)
      if type(hits) ~= "table" then
        error(format("%s: ctx.cite: hits must be a list, got %s", FNAME, type(hits)), 2)
      end
      return cite(state, hits)
    end }
  local out, msg, code = run:step("tool", function(inputs)
    ran = true
    local r, m, c
    if tool.builtin then
      r, m, c = tool.fn(inputs.arguments, ctx)
    else
      local ok
      ok, r, m, c = pcall(tool.fn, inputs.arguments, ctx)
      if not ok then
        return nil, format("%s: tool '%s' raised: %s", FNAME, tool.name, tostring(r)),
          "provider"
      end
    end
    if r == nil then
      return nil, m ~= nil and tostring(m) or format("%s: tool '%s' failed", FNAME, tool.name),
        c or "provider"
    end
    if type(r) ~= "string" then
      return nil, format("%s: tool '%s' returned %s, not a string", FNAME, tool.name, type(r)),
        "provider"
    end
    return r
  end, { name = tool.name, arguments = args })
  if out ~= nil then
    return out
  end
  -- refused by a limit, or a step inside the tool was (run.stopped: the
  -- run's own record that it stopped)
  if not ran or run.stopped then
    return nil, msg, code
  end
  return "Error: " .. tostring(msg)
end

-- Counts a turn with a malformed call: the first gets a corrective
-- message, the second in a row stops the run.
-- @return the corrective message | nil, msg, "provider"
local function malformed(self, run, state, set, why)
  state.malformed = state.malformed + 1
  run:branch("malformed", why)
  if state.malformed >= 2 then
    return nil, format("%s: a second malformed tool call in a row: %s", FNAME, why), "provider"
  end
  return prompts.messages(set, "agent_retry", { error = why,
    tool_names = self.tool_names })[2].content
end

-- {====== Function calling ======}

local function loop_tools(self, run, question, state, set)
  local o = self.o
  local messages = prompts.messages(set, "agent_tools", { question = question })
  local chat_opts = { tools = self.specs, tool_choice = "auto" }
  for turn = 1, o.max_steps do
    local reply, msg, code = run:chat(o.llm, messages, chat_opts)
    if not reply then
      return nil, msg, code
    end
    local calls = reply.tool_calls
    if type(calls) ~= "table" or #calls == 0 then
      run:branch("final", "the llm answered")
      return reply.text
    end
    local sent, whys = {}, {}
    for i, c in ipairs(calls) do
      local id = type(c.id) == "string" and c.id or format("call_%d_%d", turn, i)
      sent[i] = { id = id, name = c.name, arguments = c.arguments }
      local why, tool = check_call(self, c.name, c.arguments, c.raw)
      whys[i], sent[i].tool = why, tool
    end
    messages[#messages + 1] = { role = "assistant", content = reply.text ~= "" and reply.text
      or nil, tool_calls = sent }
    local bad = {}
    for i = 1, #calls do
      bad[#bad + 1] = whys[i]
    end
    local retry
    if #bad > 0 then
      retry, msg, code = malformed(self, run, state, set, concat(bad, "; "))
      if not retry then
        return nil, msg, code
      end
    else
      state.malformed = 0
    end
    for i, c in ipairs(sent) do
      local content = retry
      if not whys[i] then
        run:branch("call", c.name)
        content, msg, code = call_tool(self, run, state, c.tool, c.arguments, question)
        if not content then
          return nil, msg, code
        end
      end
      messages[#messages + 1] = { role = "tool", tool_call_id = c.id, name = c.name,
        content = content }
      c.tool = nil
    end
  end
  return nil, format("%s: no final answer after %d turns (max_steps)", FNAME, o.max_steps),
    "budget"
end

-- {====== ReAct ======}

-- The step a ReAct reply asks for: `{ final = text }`, `{ name =,
-- arguments =, raw =, keep = }` (keep: the reply up to its Action Input),
-- or `{ error = }`.
local function parse_react(text)
  local fa = text:find("Final Answer:", 1, true)
  local act = text:find("^%s*Action:") or text:find("\nAction:", 1, true)
  if fa and (not act or fa < act) then
    return { final = trim(text:sub(fa + #"Final Answer:")) }
  end
  if not act then
    return { error = "the reply has neither an 'Action:' nor a 'Final Answer:'",
      keep = trim(text) }
  end
  local name = trim(text:match("Action:([^\n]*)", act)):gsub("^[%[`'\"]+", "")
    :gsub("[%]`'\"]+$", "")
  local at = text:find("Action Input:", act, true)
  if not at then
    return { error = "the action has no 'Action Input:'", keep = trim(text) }
  end
  local raw = text:sub(at + #"Action Input:")
  local obs = raw:find("\nObservation:", 1, true)
  if obs then -- an observation the LLM made up
    raw = raw:sub(1, obs - 1)
  end
  local keep = trim(text:sub(1, at - 1)) .. "\nAction Input: " .. trim(raw)
  raw = trim(raw):gsub("^```%w*%s*", ""):gsub("%s*```$", "")
  local args = json.decode(raw)
  return { name = name, arguments = type(args) == "table" and args or nil, raw = raw,
    keep = keep }
end

local function loop_react(self, run, question, state, set)
  local o = self.o
  local pad = {}
  for _ = 1, o.max_steps do
    local messages = prompts.messages(set, "agent", { tools = self.tool_text,
      tool_names = self.tool_names, question = question, scratchpad = concat(pad) })
    local reply, msg, code = run:chat(o.llm, messages, { stop = { "\nObservation:" } })
    if not reply then
      return nil, msg, code
    end
    local step = parse_react(reply.text)
    if step.final then
      run:branch("final", "the llm gave its Final Answer")
      return step.final
    end
    local why, tool = step.error, nil
    if not why then
      why, tool = check_call(self, step.name, step.arguments, step.raw)
    end
    local obs
    if why then
      obs, msg, code = malformed(self, run, state, set, why)
    else
      state.malformed = 0
      run:branch("call", step.name)
      obs, msg, code = call_tool(self, run, state, tool, step.arguments, question)
    end
    if not obs then
      return nil, msg, code
    end
    pad[#pad + 1] = step.keep .. "\nObservation: " .. obs .. "\n"
  end
  return nil, format("%s: no final answer after %d turns (max_steps)", FNAME, o.max_steps),
    "budget"
end

-- {====== The pipeline ======}

-- Whether the LLM takes `tools` in chat: `llm.supports_tools` is true, or
-- a method that returns true.
local function speaks_tools(llm)
  local s = llm.supports_tools
  if type(s) == "function" then
    return s(llm) == true
  end
  return s == true
end

local function protocol(self)
  local p = self.o.protocol
  if p == "auto" then
    return speaks_tools(self.o.llm) and "tools" or "react"
  end
  return p
end

-- Runs the loop; the snippets shown are in `state.contexts`.
local function run_loop(self, run, question, state)
  local set = self:set(question)
  local how = protocol(self)
  state.protocol = how
  if how == "tools" then
    return loop_tools(self, run, question, state, set)
  end
  return loop_react(self, run, question, state, set)
end

local function new_state()
  return { contexts = {}, numbers = {}, malformed = 0 }
end

local function gather(self, run, question)
  local state = new_state()
  local text, msg, code = run_loop(self, run, question, state)
  if text == nil then
    return nil, msg, code
  end
  return state.contexts
end

local function respond(self, run, question, partial, stream)
  local state = new_state()
  local text, msg, code = run_loop(self, run, question, state)
  partial.contexts, partial.protocol = state.contexts, state.protocol
  if text == nil then
    return nil, msg, code
  end
  local c = self:cite(run, question, text, state.contexts)
  partial.text, partial.citations, partial.grounded = c.text, c.citations, c.grounded
  if stream then
    stream(c.text)
  end
  return true
end

--- An agent pipeline.
-- @tparam table opts the common options (docs/pipelines.md) and `tools`
--   (`{ { name =, description =, parameters =, fn = function(args, ctx) }
--   }`), `max_steps` (8 turns), `websearch` (anything with
--   `:search(query, { k = })`), `protocol` ("auto", "tools", "react"),
--   `read_chars` (4000)
-- @return pipeline with `:retrieve(q [, opts])` and `:answer(q [, opts])`
-- @raise on an unknown option, a bad value or a bad tool
return function(opts)
  local o = base.options(FNAME, opts, EXTRA, 2, opts and opts.tools ~= nil)
  if o.answer then
    error(FNAME .. ": option 'answer' is not used by the agent (the llm answers in its loop)",
      2)
  end
  if o.websearch ~= nil and type(o.websearch.search) ~= "function" then
    error(FNAME .. ": option 'websearch' must have a :search(query, opts) method", 2)
  end
  local p = base.new("agent", o, gather, respond)
  local tools, by_name = make_tools(p, o.tools, 3)
  p.tools, p.by_name = tools, by_name
  p.specs = tool_specs(tools)
  p.tool_text, p.tool_names = tool_lines(p.specs)
  return p
end
