-- Scripted LLMs and a fake clock for the pipeline specs (not public API).
local M = {}

--- A clock the spec moves: `c.now()` gives seconds, `c.advance(s)` moves on.
function M.clock(start)
  local c = { t = start or 1000 }
  function c.now()
    return c.t
  end
  function c.advance(s)
    c.t = c.t + s
  end
  return c
end

local Scripted = {}
Scripted.__index = Scripted

--- An LLM that replies from a script, in order.
-- `replies`: a list; each a string (the text), a table (the reply as it
-- is) or `function(messages, opts, n)` returning what chat returns.
-- `opts.forever`: the same, for every call after the list ("more" makes an
-- LLM that never stops asking); `opts.usage`: the usage of string replies
-- (none by default, so a run estimates); `opts.clock` and `opts.latency`:
-- each call moves the clock on by `latency` seconds.
-- `llm.calls[n] = { messages =, opts = }` records what it was asked.
function M.scripted(replies, opts)
  opts = opts or {}
  return setmetatable({ replies = replies or {}, forever = opts.forever, usage = opts.usage,
    clock = opts.clock, latency = opts.latency, calls = {} }, Scripted)
end

function Scripted:chat(messages, opts)
  local n = #self.calls + 1
  self.calls[n] = { messages = messages, opts = opts }
  if self.clock and self.latency then
    self.clock.advance(self.latency)
  end
  local r = self.replies[n]
  if r == nil then
    r = self.forever
  end
  if r == nil then
    error("scripted llm: no reply for call " .. n)
  end
  if type(r) == "function" then
    return r(messages, opts, n)
  end
  if type(r) == "string" then
    local usage
    if self.usage then
      usage = {}
      for k, v in pairs(self.usage) do
        usage[k] = v
      end
    end
    r = { text = r, usage = usage }
  end
  if opts and opts.stream and r.text ~= "" then
    opts.stream(r.text)
  end
  return r
end

--- A tokenizer whose counts are easy to work by hand: one token a word.
M.words = {
  count = function(_, s)
    local n = 0
    for _ in s:gmatch("%S+") do
      n = n + 1
    end
    return n
  end,
}

return M
