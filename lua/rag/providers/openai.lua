--- rag.providers.openai: embeddings and chat over the OpenAI wire format,
-- which OpenAI, Ollama (/v1), llama.cpp's server and vLLM all speak.
-- @module rag.providers.openai
local core = require("rag.core")
local http = require("rag.providers.http")
local embed = require("rag.embed")
local check = require("rag.opts").check

local json = core.json
local type, tostring, setmetatable, concat = type, tostring, setmetatable, table.concat

local M = {}

local Provider = {}
Provider.__index = Provider

local SCHEMA = http.schema(embed.schema({
  base_url = { "string" },
  api_key = { "string" },
  model = { "string" },
  organization = { "string" },
  project = { "string" },
}))

local FNAME = "rag.providers.openai"

--- A provider. See docs/api.md for every option.
-- @tparam table opts `model` (required), `base_url` (default
--   `$OPENAI_BASE_URL` or https://api.openai.com/v1), `api_key` (default
--   `$OPENAI_API_KEY`), `timeout`, `max_retries`, `batch_size`,
--   `batch_tokens`, `dimensions`, `organization`, `project`, `normalize`,
--   `tokenizer`, `cache`, `transport`, `sleep`, `trace`, `headers`
function M.new(opts)
  local o = check(FNAME, opts, SCHEMA, 2)
  if not o.model or o.model == "" then
    error(FNAME .. ": 'model' is required", 2)
  end
  local headers = {}
  for k, v in pairs(o.headers or {}) do
    headers[k] = v
  end
  if o.organization then
    headers["openai-organization"] = o.organization
  end
  if o.project then
    headers["openai-project"] = o.project
  end
  o.headers = headers
  local self = setmetatable({
    model = o.model,
    base_url = http.trim_base(o.base_url or os.getenv("OPENAI_BASE_URL")
      or "https://api.openai.com/v1"),
    embedding = embed.settings(o),
  }, Provider)
  self.client = http.client(o, http.key(o.api_key, "OPENAI_API_KEY"))
  return self
end

function Provider:__tostring()
  return http.describe(FNAME, self)
end

--- Embeds `texts`, in batches, order kept.
-- @tparam table texts strings
-- @tparam[opt] table opts `packed` (float32 strings instead of tables)
-- @return vectors, info `{ requests=, cached=, sent=, usage= }` | nil, msg, code
function Provider:embed(texts, opts)
  local fname = FNAME .. ".embed"
  local usage = { prompt_tokens = 0, total_tokens = 0 }
  local url = self.base_url .. "/embeddings"
  local out, info, code = embed.run(fname, self.embedding, texts, opts, function(batch)
    local body = { model = self.model, input = batch, encoding_format = "float",
      dimensions = self.embedding.dimensions }
    local v, msg, code = http.post(self.client, fname, url, body)
    if v == nil then
      return nil, msg, code
    end
    if type(v) ~= "table" or type(v.data) ~= "table" then
      return nil, fname .. ": the reply has no 'data' list", "decode"
    end
    local vecs = {}
    for i, item in ipairs(v.data) do
      local at = type(item) == "table" and item.index
      at = type(at) == "number" and at + 1 or i
      if type(item) ~= "table" or at < 1 or at > #batch or vecs[at] then
        return nil, fname .. ": the reply's 'data' does not match the inputs", "decode"
      end
      vecs[at] = item.embedding
    end
    if type(v.usage) == "table" then
      usage.prompt_tokens = usage.prompt_tokens + (tonumber(v.usage.prompt_tokens) or 0)
      usage.total_tokens = usage.total_tokens + (tonumber(v.usage.total_tokens) or 0)
    end
    return vecs
  end)
  if out == nil then
    return nil, info, code
  end
  info.usage = usage
  return out, info
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
}

--- The messages as a list of `{ role=, content= }` tables (a string is one
-- user message); raises on anything else.
function M.messages(fname, messages, level)
  level = (level or 1) + 1
  if type(messages) == "string" then
    return { { role = "user", content = messages } }
  end
  if type(messages) ~= "table" or #messages == 0 then
    error(fname .. ": messages must be a string or a non-empty list of messages", level)
  end
  for i = 1, #messages do
    local m = messages[i]
    if type(m) ~= "table" or type(m.role) ~= "string" then
      error(fname .. ": messages[" .. i .. "] must be a table with a string 'role'", level)
    end
  end
  return messages
end

local function str(v)
  return type(v) == "string" and v or nil
end

local function usage_of(u)
  if type(u) ~= "table" then
    return nil
  end
  return { prompt_tokens = tonumber(u.prompt_tokens), completion_tokens =
    tonumber(u.completion_tokens), total_tokens = tonumber(u.total_tokens) }
end

--- Chat completion.
-- @tparam table|string messages
-- @tparam[opt] table opts `temperature`, `max_tokens`, `top_p`, `stop`,
--   `seed`, `response_format`, `model`, `extra` (more body fields), and
--   `stream = function(delta)` to receive the text as it is generated (SSE)
-- @return text, info `{ usage=, finish_reason=, model=, id= }` | nil, msg, code
function Provider:chat(messages, opts)
  local fname = FNAME .. ".chat"
  local o = check(fname, opts, CHAT_OPTS, 2)
  local body = {
    model = o.model or self.model, messages = M.messages(fname, messages, 2),
    temperature = o.temperature, top_p = o.top_p, max_tokens = o.max_tokens,
    stop = o.stop, seed = o.seed, response_format = o.response_format,
  }
  for k, v in pairs(o.extra or {}) do
    body[k] = v
  end
  local url = self.base_url .. "/chat/completions"
  if not o.stream then
    local v, msg, code = http.post(self.client, fname, url, body)
    if v == nil then
      return nil, msg, code
    end
    local choice = type(v) == "table" and type(v.choices) == "table" and v.choices[1]
    if type(choice) ~= "table" or type(choice.message) ~= "table" then
      return nil, fname .. ": the reply has no 'choices[1].message'", "decode"
    end
    return str(choice.message.content) or "", { usage = usage_of(v.usage),
      finish_reason = str(choice.finish_reason), model = str(v.model), id = str(v.id) }
  end
  body.stream = true
  body.stream_options = { include_usage = true }
  local parts, info, err = {}, {}, nil
  local events = 0
  local function on_event(data)
    if err or data == "[DONE]" then
      return
    end
    events = events + 1
    local ev, derr = json.decode(data)
    if type(ev) ~= "table" then
      err = { fname .. ": bad JSON in the event stream: " .. tostring(derr), "decode" }
      return
    end
    if ev.error ~= nil then
      local e = type(ev.error) == "table" and ev.error.message or ev.error
      err = { fname .. ": the server reported: " .. tostring(e), "provider" }
      return
    end
    info.model, info.id = str(ev.model) or info.model, str(ev.id) or info.id
    info.usage = usage_of(ev.usage) or info.usage
    local choice = type(ev.choices) == "table" and ev.choices[1]
    if type(choice) == "table" then
      info.finish_reason = str(choice.finish_reason) or info.finish_reason
      local delta = type(choice.delta) == "table" and str(choice.delta.content)
      if delta and delta ~= "" then
        parts[#parts + 1] = delta
        o.stream(delta)
      end
    end
  end
  local feed, finish = http.sse(on_event)
  local raw = {}
  local res, msg, code = http.post(self.client, fname, url, body, function(piece)
    raw[#raw + 1] = piece
    feed(piece)
  end)
  if res == nil then
    return nil, msg, code
  end
  finish()
  if err then
    return nil, http.clean(self.client, err[1]), err[2]
  end
  if events == 0 then -- a server that ignored "stream": a plain reply
    local v = json.decode(concat(raw))
    local choice = type(v) == "table" and type(v.choices) == "table" and v.choices[1]
    if type(choice) ~= "table" or type(choice.message) ~= "table" then
      return nil, fname .. ": the reply is neither an event stream nor a completion", "decode"
    end
    local text = str(choice.message.content) or ""
    if text ~= "" then
      o.stream(text)
    end
    return text, { usage = usage_of(v.usage), finish_reason = str(choice.finish_reason),
      model = str(v.model), id = str(v.id) }
  end
  return concat(parts), info
end

return M
