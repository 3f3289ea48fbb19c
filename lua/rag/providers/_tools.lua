--- rag.providers._tools (internal, not API): function calling on the
-- OpenAI and Ollama wire formats. Tools, tool calls and tool messages in
-- the neutral shape of the LLM contract (`{ name =, description =,
-- parameters = }`; `{ id =, name =, arguments = table }`) become the
-- wire's, and tool calls in replies become the neutral shape.
-- @module rag.providers._tools
local json = require("rag.core").json

local type, ipairs, tostring, tonumber, error, next = type, ipairs, tostring, tonumber, error,
  next

local M = {}

local function str(v)
  return type(v) == "string" and v or nil
end

--- The `tools` of a request: each `{ name =, description =, parameters = }`
-- (or already `{ type = "function", ["function"] = ... }`, sent as it is).
-- @raise when `tools` is not a list of such tables (level 3: the caller of
--   the provider's chat)
function M.wire(fname, tools)
  local out = {}
  for i, t in ipairs(tools) do
    if type(t) ~= "table" then
      error(fname .. ": tools[" .. i .. "] must be a table", 3)
    end
    if t.type == "function" and type(t["function"]) == "table" then
      out[i] = t
    else
      if type(t.name) ~= "string" then
        error(fname .. ": tools[" .. i .. "] must have a string 'name'", 3)
      end
      out[i] = { type = "function", ["function"] = { name = t.name,
        description = str(t.description), parameters = t.parameters
          or { type = "object", properties = json.object() } } }
    end
  end
  return out
end

--- `tool_choice` on the wire: "auto", "none", "required", or a tool's
-- name (that tool must be called).
function M.choice(c)
  if type(c) == "string" and c ~= "auto" and c ~= "none" and c ~= "required" then
    return { type = "function", ["function"] = { name = c } }
  end
  return c
end

-- The arguments of a call as a JSON object text.
local function args_text(a)
  if type(a) == "string" then
    return a
  end
  if type(a) ~= "table" or next(a) == nil then
    return "{}"
  end
  return json.encode(a) or "{}"
end

--- The messages of a request with neutral tool calls and tool messages in
-- the wire's shape. `style` "openai": arguments as JSON text, tool
-- messages `{ role = "tool", tool_call_id =, content = }`; "ollama":
-- arguments as objects, tool messages with `tool_name`.
function M.messages(messages, style)
  if type(messages) ~= "table" then
    return messages
  end
  local out = {}
  for i, m in ipairs(messages) do
    if m.role == "assistant" and type(m.tool_calls) == "table" then
      local calls = {}
      for j, c in ipairs(m.tool_calls) do
        if type(c["function"]) == "table" then
          calls[j] = c
        elseif style == "ollama" then
          local a = c.arguments
          if type(a) ~= "table" or next(a) == nil then
            a = json.object()
          end
          calls[j] = { ["function"] = { name = c.name, arguments = a } }
        else
          calls[j] = { id = c.id, type = "function", ["function"] = { name = c.name,
            arguments = args_text(c.arguments) } }
        end
      end
      out[i] = { role = "assistant", content = m.content or (style == "ollama" and "" or nil),
        tool_calls = calls }
    elseif m.role == "tool" then
      if style == "ollama" then
        out[i] = { role = "tool", content = m.content, tool_name = m.name }
      else
        out[i] = { role = "tool", tool_call_id = m.tool_call_id, content = m.content }
      end
    else
      out[i] = m
    end
  end
  return out
end

--- The tool calls of a reply message in the neutral shape, or nil when it
-- has none: `{ id =, name =, arguments = table | nil, raw = }`;
-- `arguments` is nil when the call's arguments are not a JSON object
-- (`raw` is then the text as sent), so that the caller can tell the LLM.
function M.calls(list)
  if type(list) ~= "table" or #list == 0 then
    return nil
  end
  local out = {}
  for i, c in ipairs(list) do
    local f = type(c) == "table" and type(c["function"]) == "table" and c["function"] or {}
    local raw, args = f.arguments, nil
    if type(raw) == "table" then
      args = raw
      raw = json.encode(raw)
    elseif type(raw) == "string" then
      local v = json.decode(raw:find("%S") and raw or "{}")
      if type(v) == "table" and v[1] == nil then
        args = v
      end
    end
    out[i] = { id = str(type(c) == "table" and c.id) or ("call_" .. i), name = str(f.name),
      arguments = args, raw = raw ~= nil and tostring(raw) or nil }
  end
  return out
end

--- Adds the tool-call pieces of a streamed delta (`delta.tool_calls`,
-- each `{ index =, id =, function = { name =, arguments = } }` with parts
-- of the name and arguments text) to `acc`, a list of wire calls.
function M.add_delta(acc, pieces)
  if type(pieces) ~= "table" then
    return
  end
  for i, d in ipairs(pieces) do
    if type(d) == "table" then
      local at = (tonumber(d.index) or (i - 1)) + 1
      local c = acc[at]
      if not c then
        c = { ["function"] = { name = "", arguments = "" } }
        acc[at] = c
      end
      c.id = str(d.id) or c.id
      local f = d["function"]
      if type(f) == "table" then
        c["function"].name = c["function"].name .. (str(f.name) or "")
        local a = f.arguments
        if type(a) == "table" then
          c["function"].arguments = a
        elseif type(a) == "string" and type(c["function"].arguments) == "string" then
          c["function"].arguments = c["function"].arguments .. a
        end
      end
    end
  end
end

return M
