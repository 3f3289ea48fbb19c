--- rag.providers.ollama: embeddings and chat over Ollama's native API
-- (/api/embed, /api/chat; streaming as newline-delimited JSON).
-- @module rag.providers.ollama
local core = require("rag.core")
local http = require("rag.providers.http")
local embed = require("rag.embed")
local check = require("rag.opts").check
local openai = require("rag.providers.openai")

local json = core.json
local type, tostring, tonumber, setmetatable, concat = type, tostring, tonumber, setmetatable,
  table.concat

local M = {}

local Provider = {}
Provider.__index = Provider

local FNAME = "rag.providers.ollama"

local SCHEMA = http.schema(embed.schema({
  base_url = { "string" },
  api_key = { "string" },
  model = { "string" },
  keep_alive = { "string|number" },
  truncate = { "boolean" },
}))

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

--- A provider. `model` is required; `base_url` defaults to `$OLLAMA_HOST`
-- or http://127.0.0.1:11434; `api_key` (optional) is sent as a bearer token
-- for proxies. See docs/api.md.
function M.new(opts)
  local o = check(FNAME, opts, SCHEMA, 2)
  if not o.model or o.model == "" then
    error(FNAME .. ": 'model' is required", 2)
  end
  local self = setmetatable({
    model = o.model,
    base_url = http.trim_base(o.base_url or default_base()),
    keep_alive = o.keep_alive,
    truncate = o.truncate,
    embedding = embed.settings(o),
  }, Provider)
  self.client = http.client(o, http.key(o.api_key, "OLLAMA_API_KEY"))
  return self
end

function Provider:__tostring()
  return http.describe(FNAME, self)
end

--- Embeds `texts` through /api/embed, in batches, order kept.
-- @return vectors, info `{ requests=, cached=, sent=, usage= }` | nil, msg, code
function Provider:embed(texts, opts)
  local fname = FNAME .. ".embed"
  local url = self.base_url .. "/api/embed"
  local prompt_tokens = 0
  local out, info, code = embed.run(fname, self.embedding, texts, opts, function(batch)
    local v, msg, c = http.post(self.client, fname, url, { model = self.model, input = batch,
      dimensions = self.embedding.dimensions, keep_alive = self.keep_alive,
      truncate = self.truncate })
    if v == nil then
      return nil, msg, c
    end
    if type(v) ~= "table" or type(v.embeddings) ~= "table" then
      return nil, fname .. ": the reply has no 'embeddings' list", "decode"
    end
    prompt_tokens = prompt_tokens + (tonumber(v.prompt_eval_count) or 0)
    return v.embeddings
  end)
  if out == nil then
    return nil, info, code
  end
  info.usage = { prompt_tokens = prompt_tokens, total_tokens = prompt_tokens }
  return out, info
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
}

local function str(v)
  return type(v) == "string" and v or nil
end

local function info_of(v)
  local p, c = tonumber(v.prompt_eval_count), tonumber(v.eval_count)
  return {
    usage = { prompt_tokens = p, completion_tokens = c, total_tokens = p and c and p + c },
    finish_reason = str(v.done_reason), model = str(v.model),
  }
end

--- Chat through /api/chat.
-- @tparam table|string messages
-- @tparam[opt] table opts `temperature`, `max_tokens` (num_predict), `top_p`,
--   `stop`, `seed`, `format`, `options` (more model options), `model`,
--   `stream = function(delta)`
-- @return text, info `{ usage=, finish_reason=, model= }` | nil, msg, code
function Provider:chat(messages, opts)
  local fname = FNAME .. ".chat"
  local o = check(fname, opts, CHAT_OPTS, 2)
  local options = {}
  for k, v in pairs(o.options or {}) do
    options[k] = v
  end
  local named = { temperature = o.temperature, top_p = o.top_p, seed = o.seed,
    num_predict = o.max_tokens }
  for k, v in pairs(named) do
    options[k] = v
  end
  if type(o.stop) == "string" then
    options.stop = { o.stop }
  elseif o.stop then
    options.stop = o.stop
  end
  local body = { model = o.model or self.model, messages = openai.messages(fname, messages, 2),
    stream = o.stream ~= nil, format = o.format, keep_alive = self.keep_alive,
    options = next(options) and options or nil }
  local url = self.base_url .. "/api/chat"
  if not o.stream then
    local v, msg, code = http.post(self.client, fname, url, body)
    if v == nil then
      return nil, msg, code
    end
    if type(v) ~= "table" or type(v.message) ~= "table" then
      return nil, fname .. ": the reply has no 'message'", "decode"
    end
    return str(v.message.content) or "", info_of(v)
  end
  local parts, info, err = {}, nil, nil
  local feed, finish = http.lines(function(line)
    if err then
      return
    end
    local v, derr = json.decode(line)
    if type(v) ~= "table" then
      err = { fname .. ": bad JSON in the reply stream: " .. tostring(derr), "decode" }
    elseif v.error ~= nil then
      err = { fname .. ": the server reported: " .. tostring(v.error), "provider" }
    else
      local delta = type(v.message) == "table" and str(v.message.content)
      if delta and delta ~= "" then
        parts[#parts + 1] = delta
        o.stream(delta)
      end
      if v.done == true then
        info = info_of(v)
      end
    end
  end)
  local res, msg, code = http.post(self.client, fname, url, body, feed)
  if res == nil then
    return nil, msg, code
  end
  finish()
  if err then
    return nil, http.clean(self.client, err[1]), err[2]
  end
  if not info then
    return nil, fname .. ": the reply stream ended before 'done'", "decode"
  end
  return concat(parts), info
end

return M
