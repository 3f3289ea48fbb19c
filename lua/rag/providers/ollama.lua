--- rag.providers.ollama: embeddings and chat over Ollama's native API
-- (/api/embed, /api/chat; streaming as newline-delimited JSON).
-- @module rag.providers.ollama
local json = require("rag.core").json
local request = require("rag.providers._request")
local decode = require("rag.providers._decode")
local embedding = require("rag.providers._embed")
local check = require("rag.opts").check
local tools = require("rag.providers._tools")

local type, tostring, tonumber, next, ipairs = type, tostring, tonumber, next, ipairs
local str = decode.str

local M = {}

local FNAME = "rag.providers.ollama"

local Provider = request.class(FNAME)

--- Chat takes `tools` (function calling); rag.pipeline.agent reads this.
Provider.supports_tools = true

local SCHEMA = request.schema(embedding.SCHEMA, {
  keep_alive = { "string|number" },
  truncate = { "boolean" },
})

-- OLLAMA_HOST may be "host:port", "http://host:port" or "0.0.0.0".
local function default_base()
  local h = os.getenv("OLLAMA_HOST")
  if not h or h == "" then
    return "http://127.0.0.1:11434"
  end
  if not h:find("^%a[%w+.-]*://") then
    h = "http://" .. h
  end
  if not h:match("^%a[%w+.-]*://[^/]*:%d+") and not h:match("^%a[%w+.-]*://%[") then
    h = h:gsub("^(%a[%w+.-]*://[^/]*)", "%1:11434")
  end
  return h
end

--- A provider (also `rag.providers.ollama(opts)`). `model` is required;
-- `base_url` defaults to `$OLLAMA_HOST` or http://127.0.0.1:11434;
-- `api_key` (optional) is sent as a bearer token for proxies. See
-- docs/api.md.
-- @raise on an unknown option, a bad value or no `model`
function M.new(opts)
  local o = request.options(FNAME, opts, SCHEMA, "model")
  return request.new(Provider, o, {
    model = o.model,
    base_url = request.trim_base(o.base_url or default_base()),
    keep_alive = o.keep_alive,
    truncate = o.truncate,
    embedding = embedding.settings(o),
  }, "OLLAMA_API_KEY")
end

--- Embeds `texts` through /api/embed, in batches, order kept.
-- @return vectors, info `{ requests=, cached=, sent=, usage= }` | nil, msg, code
function Provider:embed(texts, opts)
  local fname = FNAME .. ".embed"
  local url = self.base_url .. "/api/embed"
  -- not a tail call: misuse is blamed on the caller, two levels up
  local out, info, code = embedding.run(fname, self.embedding, texts, opts, function(batch)
    local body = { model = self.model, input = batch, dimensions = self.embedding.dimensions,
      keep_alive = self.keep_alive, truncate = self.truncate }
    return request.call(self.client, fname, url, body, function(v)
      if type(v) ~= "table" or type(v.embeddings) ~= "table" then
        return nil, "the reply has no 'embeddings' list"
      end
      local n = tonumber(v.prompt_eval_count)
      return v.embeddings, { prompt_tokens = n, total_tokens = n }
    end)
  end)
  return out, info, code
end

local CHAT_OPTS = {
  model = { "string" },
  temperature = { "number", min = 0 },
  top_p = { "number", min = 0, max = 1 },
  max_tokens = { "number", int = true, min = 1 },
  stop = { "string|table" },
  seed = { "number", int = true },
  format = { "string|table" },
  options = { "table" },
  stream = { "function" },
  timeout = { "number", above = 0 },
  tools = { "table" },
  tool_choice = { "string|table" },
}

-- The reply to a chat, `text` aside.
local function info_of(v)
  local p, c = tonumber(v.prompt_eval_count), tonumber(v.eval_count)
  return {
    usage = { prompt_tokens = p, completion_tokens = c, total_tokens = p and c and p + c },
    finish_reason = str(v.done_reason), model = str(v.model),
  }
end

-- The model options of a chat call: `options`, then the named ones.
local function model_options(o)
  local options = request.merge(o.options or {}, { temperature = o.temperature,
    top_p = o.top_p, seed = o.seed, num_predict = o.max_tokens })
  if type(o.stop) == "string" then
    options.stop = { o.stop }
  elseif o.stop then
    options.stop = o.stop
  end
  return next(options) and options or nil
end

-- A streamed chat: the deltas of newline-delimited JSON to `on_delta`.
local function stream_chat(self, fname, url, body, on_delta, how)
  local parts, info, calls = {}, nil, {}
  local raw, msg, code = request.stream(self.client, fname, url, body, decode.lines,
    function(line)
      local v, derr = json.decode(line)
      if type(v) ~= "table" then
        return "bad JSON in the reply stream: " .. tostring(derr), "decode"
      elseif v.error ~= nil then
        return "the server reported: " .. tostring(v.error), "provider"
      end
      if type(v.message) == "table" and type(v.message.tool_calls) == "table" then
        for _, c in ipairs(v.message.tool_calls) do
          calls[#calls + 1] = c
        end
      end
      local delta = type(v.message) == "table" and str(v.message.content)
      if delta and delta ~= "" then
        parts[#parts + 1] = delta
        on_delta(delta)
      end
      if v.done == true then
        info = info_of(v)
      end
    end, how)
  if raw == nil then
    return nil, msg, code
  end
  if not info then
    return nil, fname .. ": the reply stream ended before 'done'", "decode"
  end
  info.text = table.concat(parts)
  info.tool_calls = tools.calls(calls)
  return info
end

--- Chat through /api/chat.
-- @tparam table|string messages
-- @tparam[opt] table opts `temperature`, `max_tokens` (num_predict), `top_p`,
--   `stop`, `seed`, `format`, `options` (more model options), `model`,
--   `stream = function(delta)`, `timeout` (seconds for this call, retries
--   included, at most the provider's own), `tools` as rag.providers.openai
--   (`tool_choice` is accepted and not sent: Ollama has none)
-- @return reply `{ text=, usage=, finish_reason=, model=, tool_calls= }` | nil, msg, code
function Provider:chat(messages, opts)
  local fname = FNAME .. ".chat"
  local o = check(fname, opts, CHAT_OPTS, 2)
  local body = { model = o.model or self.model,
    messages = tools.messages(request.messages(fname, messages), "ollama"),
    tools = o.tools and tools.wire(fname, o.tools), stream = o.stream ~= nil,
    format = o.format, keep_alive = self.keep_alive, options = model_options(o) }
  local url = self.base_url .. "/api/chat"
  local how = o.timeout and { timeout = o.timeout } or nil
  if o.stream then
    return stream_chat(self, fname, url, body, o.stream, how)
  end
  return request.call(self.client, fname, url, body, function(v)
    if type(v) ~= "table" or type(v.message) ~= "table" then
      return nil, "the reply has no 'message'"
    end
    local reply = info_of(v)
    reply.text = str(v.message.content) or ""
    reply.tool_calls = tools.calls(v.message.tool_calls)
    return reply
  end, how)
end

return M
