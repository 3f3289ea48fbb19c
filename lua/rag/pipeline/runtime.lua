--- rag.pipeline.runtime: the run context every pipeline uses. A run holds
-- hard limits (steps, LLM calls, tokens, a deadline), refuses to start work
-- once one is reached (`nil, msg, "budget"`, and every later call the same),
-- and keeps a trace of every step, LLM call and branch. See docs/pipelines.md.
-- @module rag.pipeline.runtime
local opts_check = require("rag.opts").check
local json = require("rag.core").json
local transport = require("rag.transport")
local tokenizer = require("rag.tokenizer")

local type, pairs, ipairs, next, tostring, tonumber, error, setmetatable =
  type, pairs, ipairs, next, tostring, tonumber, error, setmetatable
local format, floor, huge, min, max = string.format, math.floor, math.huge, math.min, math.max
local concat = table.concat

local M = {}

--- The limits a run has when `opts.limits` does not say: at most 100 steps
-- and 50 LLM calls, so that no pipeline loops forever; no token limit and
-- no deadline.
M.DEFAULT_LIMITS = { steps = 100, llm_calls = 50 }

local LIMITS = {
  steps = { "number", int = true, min = 0 },
  llm_calls = { "number", int = true, min = 0 },
  tokens = { "number", int = true, min = 0 },
  deadline_ms = { "number", min = 0 },
}

local SCHEMA = {
  name = { "string", default = "rag.pipeline" },
  limits = { "table" },
  tokenizer = { "table|userdata" },
  clock = { "function" },
}

-- Tokens a chat format adds per message and per reply (OpenAI's rule of
-- thumb for its chat models), so that an estimate is not too low.
local PER_MESSAGE, PER_REPLY = 3, 3

-- How much of a value a trace entry keeps.
local MAX_STRING, MAX_IDS, MAX_DEPTH = 160, 10, 2

local Run = {}
Run.__index = Run

local Trace = {}
Trace.__index = Trace

-- {====== Brief values for the trace ======}

-- `s` cut to at most `limit` bytes at a UTF-8 character boundary, with "…"
-- when cut.
local function cut(s, limit)
  if #s <= limit then
    return s
  end
  local i = limit
  -- back up over continuation bytes to the start of a character
  while i > 1 and s:byte(i + 1) and s:byte(i + 1) >= 0x80 and s:byte(i + 1) < 0xC0 do
    i = i - 1
  end
  return s:sub(1, i) .. "…"
end

local brief

local function is_list(t)
  local n = #t
  if n == 0 then
    return next(t) == nil
  end
  for k in pairs(t) do
    if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then
      return false
    end
  end
  return true
end

-- A list: hits (tables with an id) become their count and first ids; other
-- lists their count and first items.
local function brief_list(t, depth)
  local n = #t
  if n == 0 then
    return { count = 0 }
  end
  if type(t[1]) == "table" and t[1].id ~= nil then
    local ids = {}
    for i = 1, min(n, MAX_IDS) do
      local h = t[i]
      if type(h) == "table" then
        local id = h.id
        ids[i] = type(id) == "string" and id or tostring(id)
      else
        ids[i] = brief(h, depth + 1)
      end
    end
    return { count = n, ids = ids }
  end
  local items = {}
  for i = 1, min(n, 3) do
    items[i] = brief(t[i], depth + 1)
  end
  return { count = n, items = items }
end

-- A JSON-ready summary of any value: strings cut, hit lists counted,
-- functions and userdata named by type, nesting bounded.
brief = function(v, depth)
  depth = depth or 0
  local t = type(v)
  if v == json.null then
    return nil
  elseif t == "string" then
    return cut(v, MAX_STRING)
  elseif t == "number" then
    if v ~= v or v == huge or v == -huge then
      return tostring(v)
    end
    return v
  elseif t == "boolean" or t == "nil" then
    return v
  elseif t ~= "table" then
    return "<" .. t .. ">"
  elseif depth >= MAX_DEPTH then
    return "<table>"
  elseif is_list(v) then
    return brief_list(v, depth)
  end
  local out = {}
  for k, x in pairs(v) do
    if type(k) == "string" then
      out[k] = brief(x, depth + 1)
    end
  end
  return out
end

-- {====== Limits ======}

-- Seconds elapsed since the run began, by its clock.
local function elapsed(self)
  return self.clock() - self.t0
end

local function ms(seconds)
  return floor(seconds * 1e6 + 0.5) / 1e3
end

local function used_tokens(self)
  return self.prompt_tokens + self.completion_tokens
end

-- Stops the run: every later step and chat returns the same failure.
local function stop(self, what, name, msg)
  msg = self.name .. ": " .. msg
  self.stopped = { msg = msg, limit = what }
  self.trace[#self.trace + 1] = { kind = "stop", name = name, depth = self.depth,
    at = ms(elapsed(self)), limit = what, error = msg, code = "budget" }
  return nil, msg, "budget"
end

-- nil when work may start, else the limit reached and why.
local function reached(self, kind, extra)
  local l = self.limits
  if l.deadline_ms and elapsed(self) * 1000 >= l.deadline_ms then
    return "deadline_ms", format("deadline of %s ms passed", tostring(l.deadline_ms))
  end
  if kind == "step" and self.steps >= l.steps then
    return "steps", format("step limit reached (%.0f step%s)", l.steps, l.steps == 1 and "" or "s")
  end
  if kind == "chat" then
    if self.llm_calls >= l.llm_calls then
      return "llm_calls", format("llm call limit reached (%.0f call%s)", l.llm_calls,
        l.llm_calls == 1 and "" or "s")
    end
    if l.tokens and used_tokens(self) + (extra or 0) >= l.tokens then
      return "tokens", format("token limit reached (%.0f used, %.0f more for the next "
        .. "prompt, limit %.0f)", used_tokens(self), extra or 0, l.tokens)
    end
  end
  return nil
end

-- {====== The run ======}

--- A run context.
-- @tparam[opt] table opts
--   `limits = { steps =, llm_calls =, tokens =, deadline_ms = }`: integers
--   >= 0 (`deadline_ms` any number >= 0, counted from this call; `math.huge`
--   lifts a limit); missing ones take `DEFAULT_LIMITS`;
--   `tokenizer`: anything with `:count(s)`, for estimates when an LLM reports
--   no usage (default `rag.tokenizer.approx()`);
--   `clock`: a function returning seconds (default `rag.transport.now`,
--   monotonic, `ngx.now()` under OpenResty);
--   `name`: the operation that messages start with (default "rag.pipeline")
-- @treturn table a run
-- @raise on an unknown option or limit, or a bad value
function M.new(opts)
  local fname = "rag.pipeline.runtime.new"
  local o = opts_check(fname, opts, SCHEMA, 2)
  local limits = opts_check(fname .. ": limits", o.limits, LIMITS, 2)
  for k, v in pairs(M.DEFAULT_LIMITS) do
    if limits[k] == nil then
      limits[k] = v
    end
  end
  local tok = o.tokenizer or tokenizer.approx()
  if type(tok.count) ~= "function" then
    error(fname .. ": 'tokenizer' must have a :count(s) method", 2)
  end
  local clock = o.clock or transport.now
  local self = setmetatable({
    name = o.name, limits = limits, tokenizer = tok, clock = clock,
    trace = setmetatable({}, Trace), depth = 0, open = {},
    steps = 0, llm_calls = 0, prompt_tokens = 0, completion_tokens = 0, estimated = false,
  }, Run)
  self.t0 = clock()
  return self
end

--- Whether another step may start (LLM calls and tokens are checked by
-- `chat`). A pipeline's loop can test it before each round.
-- @return true | nil, msg, "budget" once the run stopped, the deadline
--   passed or the steps are used up (the run then stops)
function Run:check()
  if self.stopped then
    return nil, self.stopped.msg, "budget"
  end
  local what, why = reached(self, "step")
  if what then
    return stop(self, what, "check", why)
  end
  return true
end

--- What is left of each limit: `{ steps =, llm_calls =, tokens =, ms = }`
-- (`math.huge` where there is no limit; never below 0).
function Run:remaining()
  local l = self.limits
  local function left(limit, used)
    return limit and max(0, limit - used) or huge
  end
  return {
    steps = left(l.steps, self.steps),
    llm_calls = left(l.llm_calls, self.llm_calls),
    tokens = left(l.tokens, used_tokens(self)),
    ms = left(l.deadline_ms, elapsed(self) * 1000),
  }
end

--- Runs one step and traces it: `fn(inputs)` unless a limit is reached.
-- @tparam string name what the step is ("retrieve", "grade", ...)
-- @tparam function fn called as `fn(inputs)`; returns a value or
--   `nil, msg, code`
-- @tparam[opt] table inputs passed to `fn`; the trace keeps them in brief
-- @return what `fn` returns | nil, msg, "budget" when the step may not start
-- @raise on a bad argument; an error `fn` raises passes through
function Run:step(name, fn, inputs)
  if type(name) ~= "string" then
    error("rag.pipeline.runtime: step name must be a string, got " .. type(name), 2)
  end
  if type(fn) ~= "function" then
    error("rag.pipeline.runtime: step function must be a function, got " .. type(fn), 2)
  end
  if inputs ~= nil and type(inputs) ~= "table" then
    error("rag.pipeline.runtime: step inputs must be a table, got " .. type(inputs), 2)
  end
  if self.stopped then
    return nil, self.stopped.msg, "budget"
  end
  local what, why = reached(self, "step")
  if what then
    return stop(self, what, name, why)
  end
  self.steps = self.steps + 1
  local e = { kind = "step", name = name, depth = self.depth, at = ms(elapsed(self)),
    inputs = brief(inputs) }
  self.trace[#self.trace + 1] = e
  local t, calls, tokens = self.clock(), self.llm_calls, used_tokens(self)
  self.depth = self.depth + 1
  self.open[self.depth] = e
  local out, msg, code = fn(inputs)
  self.open[self.depth] = nil
  self.depth = self.depth - 1
  e.ms = ms(self.clock() - t)
  e.llm_calls = self.llm_calls - calls
  e.tokens = used_tokens(self) - tokens
  if out == nil and msg ~= nil then
    e.error, e.code = tostring(msg), code
  else
    e.outputs = brief(out)
  end
  return out, msg, code
end

--- Records a decision: which branch the pipeline took and why. The step
-- being run (if any) gets the same `branch` and `why`.
-- @tparam string name the branch ("fallback", "iterative", ...)
-- @tparam[opt] string why the reason, for people reading the trace
function Run:branch(name, why)
  if type(name) ~= "string" then
    error("rag.pipeline.runtime: branch name must be a string, got " .. type(name), 2)
  end
  if why ~= nil and type(why) ~= "string" then
    error("rag.pipeline.runtime: branch reason must be a string, got " .. type(why), 2)
  end
  self.trace[#self.trace + 1] = { kind = "branch", name = name, why = why, depth = self.depth,
    at = ms(elapsed(self)) }
  local e = self.open[self.depth]
  if e then
    e.branch, e.why = name, why
  end
end

-- {====== LLM calls ======}

local function count(self, s)
  local n = self.tokenizer:count(s)
  return tonumber(n) or 0
end

-- The estimated prompt tokens of `messages` (a string or a list).
local function prompt_estimate(self, messages)
  if type(messages) == "string" then
    return count(self, messages) + PER_MESSAGE + PER_REPLY
  end
  local n = PER_REPLY
  for _, m in ipairs(messages) do
    n = n + PER_MESSAGE + (type(m.content) == "string" and count(self, m.content) or 0)
  end
  return n
end

-- Prompt and completion tokens of a reply: its usage where it gives them,
-- estimates otherwise; and whether any part was estimated.
local function tokens_of(self, reply, estimate)
  local u = type(reply.usage) == "table" and reply.usage or {}
  local p, c, total = tonumber(u.prompt_tokens), tonumber(u.completion_tokens),
    tonumber(u.total_tokens)
  local guessed = false
  if not p then
    if total and c then
      p = max(0, total - c)
    else
      p, guessed = estimate(), true
    end
  end
  if not c then
    if total then
      c = max(0, total - p)
    else
      c, guessed = count(self, reply.text), true
    end
  end
  return p, c, guessed
end

local function last_content(messages)
  if type(messages) == "string" then
    return messages
  end
  local m = messages[#messages]
  return type(m) == "table" and m.content or nil
end

--- Calls `llm:chat(messages, opts)` within the limits and traces it.
-- Before the call: refuses when the run stopped, the deadline passed, the
-- LLM calls are used up, or the tokens used plus the prompt's estimate reach
-- the token limit; with a token limit, `opts.max_tokens` is lowered to what
-- is left. After it: tokens are counted (the reply's `usage`, else
-- estimates), and a reply that ends past the deadline or over the token
-- limit stops the run.
-- @param llm anything with `:chat(messages, opts)` -> `{ text =, usage = }`
-- @tparam string|table messages
-- @tparam[opt] table opts passed on (a copy)
-- @return the reply | nil, msg, code (the LLM's failure) | nil, msg,
--   "budget" [, reply] (a reply that came too late or too long is the 4th value)
-- @raise on a bad argument, or a reply that is not `{ text = string }`
function Run:chat(llm, messages, opts)
  local fname = "rag.pipeline.runtime"
  local chat = (type(llm) == "table" or type(llm) == "userdata") and llm.chat
  if not chat then
    error(fname .. ": llm must have a :chat(messages, opts) method", 2)
  end
  if type(messages) ~= "string" and type(messages) ~= "table" then
    error(fname .. ": messages must be a string or a list, got " .. type(messages), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(fname .. ": chat options must be a table, got " .. type(opts), 2)
  end
  if self.stopped then
    return nil, self.stopped.msg, "budget"
  end
  local estimate = self.limits.tokens and prompt_estimate(self, messages)
  local what, why = reached(self, "chat", estimate)
  if what then
    return stop(self, what, "chat", why)
  end
  local o = {}
  for k, v in pairs(opts or {}) do
    o[k] = v
  end
  local left = self.limits.tokens and self.limits.tokens - used_tokens(self) - estimate
  if left and left < huge then
    o.max_tokens = min(o.max_tokens or huge, left)
  end
  local dl = self.limits.deadline_ms
  if dl and dl < huge then -- the call may take what is left, no more
    o.timeout = min(o.timeout or huge, max(dl / 1000 - elapsed(self), 0.001))
  end
  self.llm_calls = self.llm_calls + 1
  local e = { kind = "llm", name = "chat", depth = self.depth, at = ms(elapsed(self)),
    inputs = { messages = type(messages) == "table" and #messages or 1,
      last = brief(last_content(messages)) } }
  self.trace[#self.trace + 1] = e
  local t = self.clock()
  local reply, msg, code = chat(llm, messages, o)
  e.ms, e.llm_calls = ms(self.clock() - t), 1
  if reply == nil then
    e.error, e.code, e.tokens = tostring(msg), code, 0
    if code == "timeout" and dl and elapsed(self) * 1000 >= dl then -- cut by the deadline
      return stop(self, "deadline_ms", "chat",
        format("deadline of %s ms passed during an llm call", tostring(dl)))
    end
    return nil, msg, code
  end
  if type(reply) ~= "table" or type(reply.text) ~= "string" then
    error(format("%s: llm:chat returned %s, not a reply { text = string, usage = }", fname,
      type(reply) == "table" and "a table without a string 'text'" or type(reply)), 2)
  end
  local p, c, guessed = tokens_of(self, reply, function()
    return estimate or prompt_estimate(self, messages)
  end)
  self.prompt_tokens = self.prompt_tokens + p
  self.completion_tokens = self.completion_tokens + c
  self.estimated = self.estimated or guessed
  e.tokens, e.prompt_tokens, e.completion_tokens, e.estimated = p + c, p, c, guessed or nil
  e.outputs = brief(reply.text)
  local l = self.limits
  if l.deadline_ms and elapsed(self) * 1000 > l.deadline_ms then
    local _, m, cd = stop(self, "deadline_ms", "chat",
      format("deadline of %s ms passed during an llm call", tostring(l.deadline_ms)))
    return nil, m, cd, reply
  end
  if l.tokens and used_tokens(self) > l.tokens then
    local _, m, cd = stop(self, "tokens", "chat",
      format("token limit exceeded by an llm reply (%.0f used, limit %.0f)",
        used_tokens(self), l.tokens))
    return nil, m, cd, reply
  end
  return reply
end

-- {====== Results ======}

--- What the run used: `{ steps =, llm_calls =, prompt_tokens =,
-- completion_tokens =, total_tokens =, ms =, estimated = }` (`estimated`:
-- some token counts are estimates, the LLM did not report them).
function Run:usage()
  return {
    steps = self.steps, llm_calls = self.llm_calls,
    prompt_tokens = self.prompt_tokens, completion_tokens = self.completion_tokens,
    total_tokens = used_tokens(self), ms = ms(elapsed(self)), estimated = self.estimated,
  }
end

--- Ends a pipeline's answer: `result.trace` and `result.usage` are set.
-- With `msg`, the failure is returned with the result as what the run has.
-- @tparam table result
-- @tparam[opt] string msg a failure (e.g. from `step` or `chat`)
-- @tparam[opt] string code its code
-- @return result | nil, msg, code, result
function Run:finish(result, msg, code)
  if type(result) ~= "table" then
    error("rag.pipeline.runtime: result must be a table, got " .. type(result), 2)
  end
  result.trace = self.trace
  result.usage = self:usage()
  if msg ~= nil then
    return nil, msg, code, result
  end
  return result
end

-- {====== The trace ======}

--- The trace as JSON lines: one entry a line, keys sorted, each line ending
-- in "\n" ("" for an empty trace).
-- @return string | nil, msg, "encoding" (a string in an entry is not UTF-8)
function Trace:jsonl()
  local lines = {}
  for i, e in ipairs(self) do
    local s, msg, code = json.encode(e)
    if not s then
      return nil, format("rag.pipeline.trace: entry %d: %s", i, tostring(msg)), code
    end
    lines[i] = s .. "\n"
  end
  return concat(lines)
end

--- Writes `trace:jsonl()` to a file.
-- @tparam string path
-- @tparam[opt] table opts `append = true` to add to the file
-- @return true | nil, msg, code ("io", or "encoding" as `jsonl`)
function Trace:write(path, opts)
  if type(path) ~= "string" then
    error("rag.pipeline.trace.write: path must be a string, got " .. type(path), 2)
  end
  local o = opts_check("rag.pipeline.trace.write", opts, { append = { "boolean" } }, 2)
  local s, msg, code = self:jsonl()
  if not s then
    return nil, msg, code
  end
  local f, err = io.open(path, o.append and "ab" or "wb")
  if not f then
    return nil, "rag.pipeline.trace.write: " .. tostring(err), "io"
  end
  local ok, werr = f:write(s)
  local closed, cerr = f:close()
  if not ok or not closed then
    return nil, format("rag.pipeline.trace.write: '%s': %s", path, tostring(werr or cerr)), "io"
  end
  return true
end

--- Reads a trace back from JSON lines (`trace:jsonl()` or a written file's
-- contents).
-- @tparam string s
-- @return trace | nil, msg, "decode"
function M.trace(s)
  if type(s) ~= "string" then
    error("rag.pipeline.runtime.trace: s must be a string, got " .. type(s), 2)
  end
  local t = setmetatable({}, Trace)
  local n = 0
  for line in s:gmatch("[^\n]+") do
    n = n + 1
    local e, msg = json.decode(line)
    if type(e) ~= "table" then
      return nil, format("rag.pipeline.runtime.trace: line %d: %s", n,
        tostring(msg or "not an object")), "decode"
    end
    t[#t + 1] = e
  end
  return t
end

return M
