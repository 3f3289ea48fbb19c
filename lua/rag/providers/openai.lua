--- rag.providers.openai: embeddings and chat over the OpenAI wire format,
-- which OpenAI, Ollama (/v1), llama.cpp's server and vLLM all speak.
-- @module rag.providers.openai
local json = require("rag.core").json
local request = require("rag.providers._request")
local decode = require("rag.providers._decode")
local embedding = require("rag.providers._embed")
local check = require("rag.opts").check
local tools = require("rag.providers._tools")

local type, tostring, tonumber, pairs, ipairs = type, tostring, tonumber, pairs, ipairs
local str = decode.str

local M = {}

local FNAME = "rag.providers.openai"

local Provider = request.class(FNAME)

--- Chat takes `tools` (function calling); rag.pipeline.agent reads this.
Provider.supports_tools = true

local SCHEMA = request.schema(embedding.SCHEMA, {
  organization = { "string" },
  project = { "string" },
})

--- A provider (also `rag.providers.openai(opts)`). See docs/api.md.
-- @tparam table opts `model` (required), `base_url` (default
--   `$OPENAI_BASE_URL` or https://api.openai.com/v1), `api_key` (default
--   `$OPENAI_API_KEY`), `timeout`, `max_retries`, `batch_size`,
--   `batch_tokens`, `dimensions`, `organization`, `project`, `normalize`,
--   `tokenizer`, `cache`, `transport`, `sleep`, `trace`, `headers`
-- @raise on an unknown option, a bad value or no `model`
function M.new(opts)
  local o = request.options(FNAME, opts, SCHEMA, "model")
  o.headers = request.merge(o.headers or {}, {
    ["openai-organization"] = o.organization, ["openai-project"] = o.project })
  return request.new(Provider, o, {
    model = o.model,
    base_url = request.trim_base(o.base_url or os.getenv("OPENAI_BASE_URL")
      or "https://api.openai.com/v1"),
    embedding = embedding.settings(o),
  }, "OPENAI_API_KEY")
end

--- Embeds `texts`, in batches, order kept.
-- @tparam table texts strings
-- @tparam[opt] table opts `packed` (float32 strings instead of tables)
-- @return vectors, info `{ requests=, cached=, sent=, usage= }` | nil, msg, code
function Provider:embed(texts, opts)
  local fname = FNAME .. ".embed"
  local url = self.base_url .. "/embeddings"
  -- not a tail call: misuse is blamed on the caller, two levels up
  local out, info, code = embedding.run(fname, self.embedding, texts, opts, function(batch)
    local body = { model = self.model, input = batch, encoding_format = "float",
      dimensions = self.embedding.dimensions }
    return request.call(self.client, fname, url, body, function(v)
      if type(v) ~= "table" or type(v.data) ~= "table" then
        return nil, "the reply has no 'data' list"
      end
      local vecs = {}
      for i, item in ipairs(v.data) do
        local at = type(item) == "table" and item.index
        at = type(at) == "number" and at + 1 or i
        if type(item) ~= "table" or at < 1 or at > #batch or vecs[at] then
          return nil, "the reply's 'data' does not match the inputs"
        end
        vecs[at] = item.embedding
      end
      return vecs, v.usage
    end)
  end)
  return out, info, code
end

local CHAT_OPTS = {
  model = { "string" },
  temperature = { "number", min = 0, max = 2 },
  top_p = { "number", min = 0, max = 1 },
  max_tokens = { "number", int = true, min = 1 },
  stop = { "string|table" },
  seed = { "number", int = true },
  response_format = { "table" },
  stream = { "function" },
  extra = { "table" },
  timeout = { "number", above = 0 },
  tools = { "table" },
  tool_choice = { "string|table" },
}

local function usage_of(u)
  if type(u) ~= "table" then
    return nil
  end
  return { prompt_tokens = tonumber(u.prompt_tokens), completion_tokens =
    tonumber(u.completion_tokens), total_tokens = tonumber(u.total_tokens) }
end

-- The reply of a whole completion, or nil.
local function completion(v)
  local choice = type(v) == "table" and type(v.choices) == "table" and v.choices[1]
  if type(choice) ~= "table" or type(choice.message) ~= "table" then
    return nil
  end
  return { text = str(choice.message.content) or "", usage = usage_of(v.usage),
    finish_reason = str(choice.finish_reason), model = str(v.model), id = str(v.id),
    tool_calls = tools.calls(choice.message.tool_calls) }
end

-- A streamed chat: the deltas of server-sent events to `on_delta`.
local function stream_chat(self, fname, url, body, on_delta, how)
  body.stream = true
  body.stream_options = { include_usage = true }
  local parts, info, events, calls = {}, {}, 0, {}
  local raw, msg, code = request.stream(self.client, fname, url, body, decode.sse,
    function(data)
      if data == "[DONE]" then
        return
      end
      events = events + 1
      local ev, derr = json.decode(data)
      if type(ev) ~= "table" then
        return "bad JSON in the event stream: " .. tostring(derr), "decode"
      end
      if ev.error ~= nil then
        local e = type(ev.error) == "table" and ev.error.message or ev.error
        return "the server reported: " .. tostring(e), "provider"
      end
      info.model, info.id = str(ev.model) or info.model, str(ev.id) or info.id
      info.usage = usage_of(ev.usage) or info.usage
      local choice = type(ev.choices) == "table" and ev.choices[1]
      if type(choice) == "table" then
        info.finish_reason = str(choice.finish_reason) or info.finish_reason
        tools.add_delta(calls, type(choice.delta) == "table" and choice.delta.tool_calls)
        local delta = type(choice.delta) == "table" and str(choice.delta.content)
        if delta and delta ~= "" then
          parts[#parts + 1] = delta
          on_delta(delta)
        end
      end
    end, how)
  if raw == nil then
    return nil, msg, code
  end
  if events == 0 then -- a server that ignored "stream": a plain reply
    local whole = completion(json.decode(raw))
    if whole == nil then
      return nil, fname .. ": the reply is neither an event stream nor a completion", "decode"
    end
    if whole.text ~= "" then
      on_delta(whole.text)
    end
    return whole
  end
  info.text = table.concat(parts)
  info.tool_calls = tools.calls(calls)
  return info
end

--- Chat completion.
-- @tparam table|string messages
-- @tparam[opt] table opts `temperature`, `max_tokens`, `top_p`, `stop`,
--   `seed`, `response_format`, `model`, `extra` (more body fields),
--   `stream = function(delta)` to receive the text as it is generated (SSE),
--   `timeout` (seconds for this call, retries included, at most the
--   provider's own), `tools` (`{ { name =, description =, parameters = },
--   ... }`, function calling) and `tool_choice` ("auto", "none",
--   "required" or a tool's name). Messages may hold `{ role = "assistant",
--   tool_calls = { { id =, name =, arguments = table }, ... } }` and
--   `{ role = "tool", tool_call_id =, content = }`.
-- @return reply `{ text=, usage=, finish_reason=, model=, id=, tool_calls= }`
--   (`tool_calls = { { id =, name =, arguments = table | nil, raw = } }`
--   when the model called tools; `arguments` nil when not a JSON object)
--   | nil, msg, code
function Provider:chat(messages, opts)
  local fname = FNAME .. ".chat"
  local o = check(fname, opts, CHAT_OPTS, 2)
  local body = {
    model = o.model or self.model,
    messages = tools.messages(request.messages(fname, messages), "openai"),
    temperature = o.temperature, top_p = o.top_p, max_tokens = o.max_tokens,
    stop = o.stop, seed = o.seed, response_format = o.response_format,
    tools = o.tools and tools.wire(fname, o.tools), tool_choice = tools.choice(o.tool_choice),
  }
  for k, v in pairs(o.extra or {}) do
    body[k] = v
  end
  local url = self.base_url .. "/chat/completions"
  local how = o.timeout and { timeout = o.timeout } or nil
  if o.stream then
    return stream_chat(self, fname, url, body, o.stream, how)
  end
  return request.call(self.client, fname, url, body, function(v)
    local reply = completion(v)
    if reply == nil then
      return nil, "the reply has no 'choices[1].message'"
    end
    return reply
  end, how)
end

return M
