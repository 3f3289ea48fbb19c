--- rag.serve: the HTTP handlers of `rag serve`, for nginx with ngx_lua
-- (OpenResty, or Debian's nginx + libnginx-mod-http-lua). Each worker opens
-- the index read-only (its files are mapped, so all workers share one copy)
-- and switches to a newer generation between requests; a postgres:// URL's
-- index is opened at a worker's first request (cosockets) and reopened by
-- /admin/reload. docs/serving.md has
-- the HTTP contract and the configuration to mount it in your own nginx:
--
--   lua_shared_dict rag_serve 10m;
--   init_worker_by_lua_block { require("rag.serve").init({ dir = "/srv/kb" }) }
--   location / { content_by_lua_block { require("rag.serve").handle() } }
-- @module rag.serve
-- luacheck: globals ngx
local rag = require("rag")
local opts_check = require("rag.opts").check

local M = {}

local json = rag.json
local encode, decode, null = json.encode, json.decode, json.null
local OBJECT = getmetatable(json.object())
local format, concat, sort = string.format, table.concat, table.sort
local floor = math.floor
-- a monotonic clock to the microsecond: nginx's own (ngx.now, the request's
-- start_time) counts whole milliseconds, the first histogram bucket's width
local clock = rag.core.http.now

local INIT = {
  dir = { "string" },                         -- the index folder or postgres:// URL (required)
  token = { "string" },                       -- bearer token for /ask and /admin/reload
  rate = { "number", default = 50, min = 0 }, -- requests per second per client IP (0: off)
  burst = { "number", min = 1 },              -- default: max(rate, 1)
  k_max = { "number", default = 50, int = true, min = 1 },
  query_max = { "number", default = 1000, int = true, min = 1 },
  body_max = { "number", default = 65536, int = true, min = 64 },
  history_max = { "number", default = 20, int = true, min = 0 },
  timeout_ms = { "number", default = 60000, min = 1 },
  check_every = { "number", default = 0.5, min = 0 },
  dict = { "string", default = "rag_serve" },
  pipeline = { "string", default = "hybrid" },
  llm = { "string|table|userdata" },          -- a name (extractive, openai, ollama) or an LLM
  model = { "string" },
  k = { "number", int = true, min = 1 },
  mode = { "string" },
  embedder = { "string|table|userdata|boolean" },
  gc_pause = { "number", min = 100 },         -- collectgarbage("setpause") (nil: as it is)
}

-- The worker's state: options, the index in use and the LLM.
local S

-- Whether dir is a PostgreSQL URL (as rag.index.open tells them).
local function is_url(dir)
  return dir:find("^postgres://") ~= nil or dir:find("^postgresql://") ~= nil
end

-- The index's name for messages: a URL without its password.
local function shown(dir)
  return (dir:gsub("^(postgres[ql]*://)([^?]*)", function(scheme, main)
    local auth, host = main:match("^(.*)@([^@]*)$")
    if auth and auth:find(":", 1, true) then
      main = auth:match("^([^:]*)") .. ":***@" .. host
    end
    return scheme .. main
  end):gsub("([?&]password=)[^&]*", "%1***"))
end

-- {====== The index and its generations ======}

-- cur = { idx =, gen =, docs =, chunks =, busy =, retired = }
local function open_current(reason)
  local o = S.o
  local embedder = S.embedder
  local ok, idx, msg = pcall(rag.index.open, o.dir, { readonly = true, embedder = embedder })
  local st
  if ok and idx then
    st, msg = idx:stats() -- a PostgreSQL store can fail here
    if not st then
      idx:close()
      idx = nil
    end
  end
  if not ok or not idx then
    -- at start, an error; later, the old generation goes on serving (a
    -- still newer save may have removed these files: the next look retries)
    ngx.log(S.cur and ngx.WARN or ngx.ERR, "rag.serve: ", reason, ": ",
      tostring(ok and msg or idx), S.cur and "; still serving generation " .. S.cur.gen or "")
    return false
  end
  local old = S.cur
  S.cur = { idx = idx, gen = st.generation, docs = st.documents, chunks = st.leaves, busy = 0 }
  if old then
    old.retired = true
    if old.busy == 0 then
      old.idx:close()
    end
    ngx.log(ngx.NOTICE, "rag.serve: generation ", old.gen, " -> ", st.generation, " (", reason,
      ")")
  end
  S.dict:set("generation", st.generation)
  S.dict:set("documents", st.documents)
  S.dict:set("chunks", st.leaves)
  return true
end

-- Switches to a newer generation when one appeared: the manifest is read at
-- most every check_every seconds, or at once after an /admin/reload. A
-- PostgreSQL index has no generations: it is opened at the first request
-- (cosockets exist from then on) and reopened after an /admin/reload.
local function refresh(force)
  local now = ngx.now()
  local asked = S.dict:get("reload") or 0
  if S.url then
    if force or asked ~= S.reload_seen or not S.cur then
      S.reload_seen = asked
      open_current(S.cur and "reload" or "start")
    end
    return
  end
  if not force and asked == S.reload_seen and now - S.checked < S.o.check_every then
    return
  end
  S.reload_seen, S.checked = asked, now
  local gen = rag.index.generation(S.o.dir)
  if gen > 0 and (not S.cur or gen ~= S.cur.gen) then
    open_current(force and "reload" or "new generation")
  end
end

local function hold()
  local cur = S.cur
  cur.busy = cur.busy + 1
  return cur
end

local function release(cur)
  cur.busy = cur.busy - 1
  if cur.retired and cur.busy == 0 then
    cur.idx:close()
  end
end

-- {====== Responses and metrics ======}

local BUCKETS = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 }
local PATHS = { ["/"] = true, ["/health"] = true, ["/search"] = true, ["/ask"] = true,
  ["/metrics"] = true, ["/admin/reload"] = true }

local function observe(path, status)
  local d = S.dict
  d:incr("n|" .. (PATHS[path] and path or "other") .. "|" .. status, 1, 0)
  local secs = clock() - ngx.ctx.rag_t0
  local b = #BUCKETS + 1
  for i = 1, #BUCKETS do
    if secs <= BUCKETS[i] then
      b = i
      break
    end
  end
  d:incr("b|" .. b, 1, 0)
  d:incr("sum_us", floor(secs * 1e6 + 0.5), 0)
end

-- Answers with `body`, a string or a list of strings (as ngx.print takes).
local function send(status, body, ctype)
  ngx.status = status
  ngx.header["Content-Type"] = ctype or "application/json"
  ngx.print(body)
  observe(ngx.var.uri, status)
end

local STATUS = { bad_request = 400, unauthorized = 401, not_found = 404,
  method_not_allowed = 405, too_large = 413, too_many_requests = 429, unknown_pipeline = 400,
  timeout = 504, llm = 502, internal = 500 }

local function fail(code, msg)
  send(STATUS[code], '{"error":' .. encode({ code = code, message = msg }) .. "}")
end

-- A request's error, raised by a check and answered by handle.
local Bad = {}

local function bad(code, msg)
  error(setmetatable({ code = code, msg = msg }, Bad), 0)
end

-- {====== Requests ======}

local function client_ok()
  local rate = S.o.rate
  if rate <= 0 then
    return
  end
  -- a token bucket as GCRA: one number per client, the time its bucket
  -- would be full again (a race between workers lets a request or two more)
  local key = "r|" .. ngx.var.binary_remote_addr
  local now = ngx.now()
  local tat = S.dict:get(key) or now
  if tat < now then
    tat = now
  end
  local after = tat + 1 / rate - now - S.burst / rate
  if after > 0 then
    ngx.header["Retry-After"] = math.ceil(after)
    bad("too_many_requests", format("more than %g requests per second", rate))
  end
  S.dict:set(key, tat + 1 / rate, math.ceil(S.burst / rate) + 1)
end

local function authorized()
  local want = S.o.token
  if not want then
    return
  end
  local got = ngx.var.http_authorization
  if got ~= "Bearer " .. want then
    ngx.header["WWW-Authenticate"] = "Bearer"
    bad("unauthorized", got and "wrong bearer token" or "missing bearer token")
  end
end

-- The request's body as a JSON object, its keys checked against `keys`.
local function body(keys)
  local len = tonumber(ngx.var.http_content_length)
  if len and len > S.o.body_max then
    bad("too_large", format("body over %d bytes", S.o.body_max))
  end
  ngx.req.read_body()
  local data = ngx.req.get_body_data()
  if not data then
    local path = ngx.req.get_body_file()
    if path then -- the body spilled to a file: too large for us
      bad("too_large", format("body over %d bytes", S.o.body_max))
    end
    bad("bad_request", "the body is empty: expected a json object")
  end
  if #data > S.o.body_max then
    bad("too_large", format("body over %d bytes", S.o.body_max))
  end
  local t, msg = decode(data, { max_depth = 32 })
  if t == nil then
    local why = tostring(msg):gsub("^rag%.json%.decode: ", "")
    bad("bad_request", why:find("^invalid json") and why or "invalid json: " .. why)
  end
  if type(t) ~= "table" or getmetatable(t) ~= OBJECT then
    bad("bad_request", "the body must be a json object")
  end
  for k in pairs(t) do
    if not keys[k] then
      bad("bad_request", "unknown key '" .. k .. "'")
    end
  end
  return t
end

local function want_string(t, key, required, max)
  local v = t[key]
  if v == nil then
    if required then
      bad("bad_request", "'" .. key .. "' is required")
    end
    return nil
  end
  if type(v) ~= "string" then
    bad("bad_request", "'" .. key .. "' must be a string")
  end
  if required and not v:find("%S") then
    bad("bad_request", "'" .. key .. "' must not be empty")
  end
  if max and #v > max then
    bad("bad_request", format("'%s' is longer than %d bytes", key, max))
  end
  return v
end

local function want_int(t, key, lo, hi)
  local v = t[key]
  if v == nil then
    return nil
  end
  if type(v) ~= "number" or v ~= floor(v) or v < lo or v > hi then
    bad("bad_request", format("'%s' must be an integer in [%d, %d]", key, lo, hi))
  end
  return floor(v)
end

local MODES = { bm25 = true, vector = true, hybrid = true }

local function or_null(v)
  if v == nil then
    return null
  end
  return v
end

local SEARCH_KEYS = { query = true, k = true, mode = true, filter = true }

local function search(cur)
  local t = body(SEARCH_KEYS)
  local query = want_string(t, "query", true, S.o.query_max)
  local k = want_int(t, "k", 1, S.o.k_max) or 10
  local mode = want_string(t, "mode")
  if mode and not MODES[mode] then
    bad("bad_request", "'mode' must be bm25, vector or hybrid")
  end
  local filter = t.filter
  if filter ~= nil and (type(filter) ~= "table" or getmetatable(filter) ~= OBJECT) then
    bad("bad_request", "'filter' must be an object")
  end
  -- the hits' JSON comes written whole from C (rag.index's search_json)
  local ok, hits, msg = pcall(cur.idx.search_json, cur.idx, query, { k = k, mode = mode,
    filter = filter, highlight = true })
  if not ok then -- a filter or a mode the index cannot take
    local why = tostring(hits):gsub("^[^:]*:%d+: ", ""):gsub("^rag%.index%.search[_a-z]*: ", "")
    if why:find("^filter") or why:find("^mode") then
      bad("bad_request", why)
    end
    error(hits, 0)
  end
  if not hits then
    bad("llm", tostring(msg))
  end
  send(200, { '{"generation":', encode(cur.gen), ',"hits":', hits, ',"took_ms":', -- no copy
    encode(floor((clock() - ngx.ctx.rag_t0) * 1e4 + 0.5) / 10), "}" })
end

-- {====== /ask ======}

local PIPELINES = { naive = true, hybrid = true, fusion = true, hyde = true, stepback = true,
  window = true, multihop = true, adaptive = true, corrective = true, graph = true,
  agent = true, summary = true }
local ASK_KEYS = { question = true, pipeline = true, history = true, k = true }
local ROLES = { user = true, assistant = true }

local function history_of(t)
  local h = t.history
  if h == nil then
    return nil
  end
  if type(h) ~= "table" or getmetatable(h) == OBJECT then
    bad("bad_request", "'history' must be an array")
  end
  if #h > S.o.history_max then
    bad("bad_request", format("'history' has more than %d turns", S.o.history_max))
  end
  local out = {}
  for i, turn in ipairs(h) do
    if type(turn) ~= "table" or getmetatable(turn) ~= OBJECT then
      bad("bad_request", format("'history'[%d] must be an object", i))
    end
    for key in pairs(turn) do
      if key ~= "role" and key ~= "content" then
        bad("bad_request", format("'history'[%d]: unknown key '%s'", i, key))
      end
    end
    if not ROLES[turn.role] then
      bad("bad_request", format("'history'[%d].role must be user or assistant", i))
    end
    if type(turn.content) ~= "string" or #turn.content > S.o.body_max then
      bad("bad_request", format("'history'[%d].content must be a string", i))
    end
    out[i] = { role = turn.role, content = turn.content }
  end
  return out
end

local function citations(r)
  local list = {}
  for n, c in pairs(r.citations or {}) do
    local h = r.contexts and r.contexts[n] or {}
    list[#list + 1] = { n = n, id = c.id, doc_id = c.doc_id, source = or_null(c.source),
      title = or_null(h.title), start = c.start, stop = c.stop, text = or_null(h.text) }
  end
  sort(list, function(a, b) return a.n < b.n end)
  return list
end

-- The contract's error code of a failed run.
local function run_error(msg, code)
  if code == "timeout" or (code == "budget" and tostring(msg):find("deadline", 1, true)) then
    return "timeout", "the answer took longer than " .. S.o.timeout_ms .. " ms"
  end
  return "llm", (tostring(msg):gsub("\n.*", ""):lower())
end

local function sse(event, data)
  ngx.print("event: ", event, "\ndata: ", data, "\n\n")
  ngx.flush(true)
end

local function ask(cur)
  authorized()
  local t = body(ASK_KEYS)
  local question = want_string(t, "question", true, S.o.query_max)
  local name = want_string(t, "pipeline") or S.o.pipeline
  if not PIPELINES[name] then
    bad("unknown_pipeline", "unknown pipeline '" .. name .. "'")
  end
  if name == "summary" and not (cur.idx.enrich and cur.idx.enrich.tree) then
    bad("unknown_pipeline", "pipeline 'summary' needs an index with a summary level "
      .. "(rag index --enrich doc_summary)")
  end
  local history = history_of(t)
  local k = want_int(t, "k", 1, S.o.k_max) or S.o.k or 5
  local p = rag.pipeline[name]({ index = cur.idx, llm = S.llm, k = k,
    limits = { deadline_ms = S.o.timeout_ms },
    search = S.o.mode and { mode = S.o.mode } or nil })
  local accept = ngx.var.http_accept
  if not (accept and accept:find("text/event-stream", 1, true)) then
    local r, msg, code = p:answer(question, { history = history })
    if not r then
      bad(run_error(msg, code))
    end
    return send(200, encode({ text = r.text, citations = citations(r), grounded = r.grounded,
      took_ms = floor((clock() - ngx.ctx.rag_t0) * 1e4 + 0.5) / 10 }))
  end
  ngx.status = 200
  ngx.header["Content-Type"] = "text/event-stream"
  ngx.header["Cache-Control"] = "no-cache"
  ngx.header["X-Accel-Buffering"] = "no"
  local r, msg, code = p:answer(question, { history = history, stream = function(delta)
    sse("token", encode({ text = delta }))
  end })
  if r then
    sse("citations", encode({ text = r.text, citations = citations(r), grounded = r.grounded }))
    sse("done", "{}")
  elseif not ngx.headers_sent then -- failed before the first event: a plain error
    ngx.header["Cache-Control"], ngx.header["X-Accel-Buffering"] = nil, nil
    bad(run_error(msg, code))
  else
    local c, m = run_error(msg, code)
    sse("error", '{"error":' .. encode({ code = c, message = m }) .. "}")
  end
  observe("/ask", 200)
end

-- {====== Other endpoints ======}

local function health(cur)
  if S.url then -- other processes write to the tables: counted now
    local st, msg = cur.idx:stats()
    if not st then
      bad("internal", "the store does not answer: " .. tostring(msg))
    end
    S.dict:set("documents", st.documents)
    S.dict:set("chunks", st.leaves)
    return send(200, encode({ status = "ok", store = "postgres", table = st.table,
      generation = cur.gen, documents = st.documents, chunks = st.leaves }))
  end
  send(200, encode({ status = "ok", generation = cur.gen, documents = cur.docs,
    chunks = cur.chunks }))
end

local function metrics()
  local d = S.dict
  local out = { "# HELP rag_requests_total Requests answered, by path and status.",
    "# TYPE rag_requests_total counter" }
  local keys = d:get_keys(0)
  sort(keys)
  for _, key in ipairs(keys) do
    local path, status = key:match("^n|(.*)|(%d+)$")
    if path then
      out[#out + 1] = format('rag_requests_total{path="%s",status="%s"} %d', path, status,
        d:get(key) or 0)
    end
  end
  out[#out + 1] = "# HELP rag_request_duration_seconds Time from the request's first byte to"
    .. " its response."
  out[#out + 1] = "# TYPE rag_request_duration_seconds histogram"
  local total = 0
  for i = 1, #BUCKETS + 1 do
    total = total + (d:get("b|" .. i) or 0)
    out[#out + 1] = format('rag_request_duration_seconds_bucket{le="%s"} %d',
      BUCKETS[i] and format("%g", BUCKETS[i]) or "+Inf", total)
  end
  out[#out + 1] = format("rag_request_duration_seconds_sum %.6f", (d:get("sum_us") or 0) / 1e6)
  out[#out + 1] = format("rag_request_duration_seconds_count %d", total)
  for _, g in ipairs({ { "generation", "The index generation served." },
      { "documents", "Documents in the index served." },
      { "chunks", "Chunks (leaves) in the index served." } }) do
    out[#out + 1] = "# HELP rag_index_" .. g[1] .. " " .. g[2]
    out[#out + 1] = "# TYPE rag_index_" .. g[1] .. " gauge"
    out[#out + 1] = format("rag_index_%s %d", g[1], d:get(g[1]) or 0)
  end
  out[#out + 1] = ""
  send(200, concat(out, "\n"), "text/plain; version=0.0.4")
end

local function reload()
  if not S.o.token then
    bad("unauthorized", "reloading needs the server's bearer token (rag serve --token)")
  end
  authorized()
  local before = S.cur and S.cur.gen or 0
  S.dict:incr("reload", 1, 0) -- the other workers check at their next request
  refresh(true)
  S.reload_seen = S.dict:get("reload")
  if not S.cur then
    bad("internal", "no index could be opened in '" .. shown(S.o.dir) .. "'")
  end
  send(200, encode({ status = "ok", generation = S.cur.gen, previous = before,
    documents = S.cur.docs, chunks = S.cur.chunks }))
end

local PLACEHOLDER = "<!doctype html><title>rag</title><p>rag serve: POST /search, POST /ask"
  .. " (see docs/serving.md)</p>\n"

local function page()
  send(200, S.page, "text/html; charset=utf-8")
end

-- path -> { method, handler, needs the index }
local ROUTES = {
  ["/"] = { "GET", page },
  ["/health"] = { "GET", health, true },
  ["/search"] = { "POST", search, true },
  ["/ask"] = { "POST", ask, true },
  ["/metrics"] = { "GET", metrics },
  ["/admin/reload"] = { "POST", reload },
}
local LIMITED = { ["/search"] = true, ["/ask"] = true, ["/admin/reload"] = true }

-- {====== Entry points ======}

--- Sets the worker up: call it in `init_worker_by_lua_block`. Opens the
-- index in `opts.dir` read-only; a failure is logged and retried at the
-- next request. A postgres:// URL in `dir` is opened at the first request
-- (init_worker has no cosockets), with the embedder it recorded unless
-- `embedder` names one.
-- @tparam table opts `dir` (required), `token`, `rate` (requests per second
--   per client IP, default 50; 0 turns it off), `burst`, `k_max` (50),
--   `query_max` (1000 bytes), `body_max` (65536 bytes), `history_max` (20),
--   `timeout_ms` (60000, each /ask), `check_every` (0.5 s), `dict`
--   ("rag_serve", a lua_shared_dict), `pipeline` ("hybrid"), `llm`, `model`,
--   `k`, `mode`, `embedder` (else as `rag ask` reads them for `dir`:
--   RAG_* variables nginx passes with `env`, then dir's rag.json),
--   `gc_pause` (the worker's collector pause, collectgarbage("setpause");
--   nil leaves it as it is: the whole worker's Lua shares it)
-- @raise on a bad option, a missing shared dict or bad settings
function M.init(opts)
  local o = opts_check("rag.serve.init", opts, INIT, 2)
  if not o.dir then
    error("rag.serve.init: 'dir' is required", 2)
  end
  local dict = ngx.shared[o.dict]
  if o.gc_pause then
    collectgarbage("setpause", o.gc_pause)
  end
  if not dict then
    error("rag.serve.init: no lua_shared_dict '" .. o.dict .. "' (add: lua_shared_dict "
      .. o.dict .. " 10m;)", 2)
  end
  local llm = type(o.llm) ~= "string" and o.llm or nil
  local flags = { llm = type(o.llm) == "string" and o.llm or nil, model = o.model,
    embedder = type(o.embedder) == "string" and o.embedder or nil }
  local setup = require("rag.cli").ask_setup(o.dir, flags)
  local embedder = o.embedder
  local url = is_url(o.dir)
  if type(embedder) == "string" or (embedder == nil and not url) then
    embedder = setup.embedder
  end
  o.k, o.mode = o.k or setup.k, o.mode or setup.mode
  local ok, html = pcall(require, "rag.serve._page")
  S = { o = o, dict = dict, llm = llm or setup.llm, embedder = embedder, checked = 0,
    burst = o.burst or math.max(o.rate, 1), reload_seen = dict:get("reload") or 0,
    page = ok and type(html) == "string" and html or PLACEHOLDER, url = url }
  if not url then
    open_current("start")
  end
end

-- The error handler of handle's protected calls: a request's error as it
-- is, anything else with its traceback.
local function caught(e)
  if getmetatable(e) == Bad then
    return e
  end
  return debug.traceback(tostring(e), 2)
end

-- Checks the request against its route (nil: no such path) and returns
-- the index it holds when the route needs one.
local function admit(path, route)
  if not route then
    bad("not_found", "no endpoint " .. path)
  end
  local method = ngx.req.get_method()
  if method ~= route[1] and not (method == "HEAD" and route[1] == "GET") then
    ngx.header["Allow"] = route[1]
    bad("method_not_allowed", path .. " accepts " .. route[1]:lower() .. " only")
  end
  if LIMITED[path] then
    client_ok()
  end
  if route[3] then
    refresh(false)
    if not S.cur then
      bad("internal", "no index could be opened in '" .. shown(S.o.dir) .. "'")
    end
    return hold()
  end
end

--- Answers the request: call it in `content_by_lua_block` of the location
-- that holds the endpoints (GET /, /health, /metrics; POST /search, /ask,
-- /admin/reload).
function M.handle()
  if not S then
    error("rag.serve.handle: call rag.serve.init in init_worker_by_lua first", 2)
  end
  ngx.ctx.rag_t0 = clock() -- took_ms and the latency histogram count from here
  local path = ngx.var.uri
  local route = ROUTES[path]
  -- no closure per request: LuaJIT compiles none of a function that makes one
  local ok, cur = xpcall(admit, caught, path, route)
  local err
  if ok then
    ok, err = xpcall(route[2], caught, cur)
  else
    cur, err = nil, cur
  end
  if cur then
    release(cur)
  end
  if not ok then
    if getmetatable(err) ~= Bad then
      ngx.log(ngx.ERR, "rag.serve: ", err)
      err = { code = "internal", msg = "internal error" }
    end
    if ngx.headers_sent then -- a stream that failed after it began
      sse("error", '{"error":' .. encode({ code = err.code, message = err.msg }) .. "}")
      return observe(path, 200)
    end
    fail(err.code, err.msg)
  end
end

--- Answers nginx's own errors (a body over client_max_body_size, a bad
-- request line) with the JSON error body: call it from a named location
-- that `error_page 400 404 405 408 413 414 500 502 503 504 @rag_error;`
-- points at.
function M.error_page()
  local status = ngx.status
  local codes = { [400] = "bad_request", [401] = "unauthorized", [404] = "not_found",
    [405] = "method_not_allowed", [413] = "too_large", [429] = "too_many_requests",
    [504] = "timeout" }
  local code = codes[status] or (status >= 500 and "internal" or "bad_request")
  local msg = status == 413 and "body over the size limit" or "http error " .. status
  ngx.header["Content-Type"] = "application/json"
  ngx.print('{"error":' .. encode({ code = code, message = msg }) .. "}")
end

return M
