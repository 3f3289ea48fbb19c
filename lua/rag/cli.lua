--- rag.cli: the `rag` command. bin/rag is a launcher that calls `main`.
-- The main job is `rag index`, `rag search` and `rag ask` (docs/cli.md);
-- the small commands (hash, json, tokens, sentences, chunk) expose the core.
-- Exit status: 0 ok, 1 the world failed (a missing file, I/O, HTTP),
-- 2 usage (an unknown command or option, a bad value, a bad configuration);
-- every error is one line on standard error.
-- @module rag.cli
local rag = require("rag")

local M = {}

local json = rag.json
local format, concat, sort = string.format, table.concat, table.sort
local unpack = table.unpack or unpack -- luacheck: ignore 143
local now = rag.transport.now

-- What stops a command: a table, so that main can tell it from a bug.
local Stop = {}

local function stop(status, msg, code)
  error(setmetatable({ status = status, msg = msg, code = code }, Stop), 0)
end

-- The value of a call that returns value | nil, msg, code; stops with status 1 on failure.
local function must(value, msg, code)
  if value == nil and msg then
    stop(1, (tostring(msg):gsub("\n.*", "")), code)
  end
  return value
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then
    f:close()
  end
  return f ~= nil
end

-- "path: Reason" from io.open, as "'path': reason".
local function io_reason(path, err)
  local why = tostring(err)
  if why:sub(1, #path + 2) == path .. ": " then
    why = why:sub(#path + 3)
  end
  return "'" .. path .. "': " .. why:sub(1, 1):lower() .. why:sub(2)
end

local function read_input(path)
  local f, err
  if path == nil or path == "-" then
    f = io.stdin
  else
    f, err = io.open(path, "rb")
    if not f then
      stop(1, io_reason(path, err))
    end
  end
  local data, rerr = f:read("*a")
  if f ~= io.stdin then
    f:close()
  end
  if not data then -- a directory opens, then fails to read
    stop(1, io_reason(path or "-", rerr))
  end
  return data
end

-- Whether file descriptor fd (1 or 2) is a terminal. RAG_TTY=0|1 overrides
-- (for tests and for tools that want the bar in a pipe).
local function isatty(fd)
  local force = os.getenv("RAG_TTY")
  if force == "0" or force == "1" then
    return force == "1"
  end
  local ok = os.execute("test -t " .. fd)
  if type(ok) == "number" then -- Lua 5.1, LuaJIT without 5.2 compatibility
    return ok == 0
  end
  return ok == true
end

local function say(...) -- a line on standard error
  io.stderr:write(...)
  io.stderr:write("\n")
end

-- {====== PostgreSQL URLs ======}

-- Whether an index argument is a PostgreSQL URL rather than a folder.
local function is_url(s)
  return type(s) == "string" and (s:find("^postgres://") or s:find("^postgresql://")) ~= nil
end

-- The URL with its password (user:PASSWORD@, ?password=) shown as ***.
-- The user part ends at the first ":", the host at the last "@" before
-- "?", as rag.store.pg.parse_dsn reads them.
local function mask_url(url)
  local scheme, rest = url:match("^(postgres[ql]*://)(.*)$")
  if not scheme then
    return url
  end
  local main, query = rest:match("^([^?]*)(.*)$")
  local auth, host = main:match("^(.*)@([^@]*)$")
  if auth and auth:find(":", 1, true) then
    main = auth:match("^([^:]*)") .. ":***@" .. host
  end
  return scheme .. main .. query:gsub("([?&]password=)[^&]*", "%1***")
end

-- The passwords of the URLs among args (as typed and percent-decoded).
local function url_secrets(args)
  local list = {}
  for _, a in ipairs(args) do
    local v = type(a) == "string" and a:gsub("^%-%-into=", "")
    if v and is_url(v) then
      local main = v:match("^postgres[ql]*://([^?]*)")
      local auth = main:match("^(.*)@[^@]*$")
      local pw = auth and auth:match("^[^:]*:(.+)$")
      if pw then
        list[#list + 1] = pw
        list[#list + 1] = pw:gsub("%%(%x%x)", function(h)
          return string.char(tonumber(h, 16))
        end)
      end
    end
  end
  return list
end

-- Text with every PostgreSQL URL in it masked, and the passwords of the
-- command's URLs (`secrets`) wherever else they appear.
local function mask_text(text, secrets)
  text = tostring(text):gsub("postgres[ql]*://[^%s'\"]*", mask_url)
  for _, pw in ipairs(secrets or {}) do
    if #pw >= 3 then
      local at = 1
      while true do
        local i, j = text:find(pw, at, true)
        if not i then
          break
        end
        text = text:sub(1, i - 1) .. "***" .. text:sub(j + 1)
        at = i + 3
      end
    end
  end
  return text
end

-- The URL without its ?table= parameter, and the table name (default "rag").
local function split_url(url)
  local dsn, name = require("rag.store.postgres").split_url(url)
  return dsn, name or "rag"
end

-- A misuse error raised by rag.index or rag.store, as one line for the user.
local function reason(e)
  return (tostring(e):gsub("\n.*", ""):gsub("^[^:]*:%d+: ", "")
    :gsub("^rag%.index%.[%w_]+: ", ""):gsub("^rag%.store%.[%w_.]+: ", ""))
end

-- {====== Configuration ======}

-- The settings `rag index`, `rag search` and `rag ask` read, with their
-- types, flags, environment variables and defaults. Flags win over the
-- environment, which wins over the index folder's rag.json, then rag.toml.
local SETTINGS = {
  embedder = { "string", env = "RAG_EMBEDDER", default = "hashing" },
  chunk_size = { "integer", env = "RAG_CHUNK_SIZE", default = 512, min = 16 },
  overlap = { "integer", env = "RAG_OVERLAP", default = 64, min = 0 },
  llm = { "string", env = "RAG_LLM", default = "extractive" },
  model = { "string", env = "RAG_MODEL" },
  pipeline = { "string", env = "RAG_PIPELINE", default = "naive" },
  k = { "integer", env = "RAG_K", min = 1, max = 1000 }, -- ask: 5, search: 10
  mode = { "string", env = "RAG_MODE" },
  include = { "list" },
  exclude = { "list" },
  enrich = { "string", env = "RAG_ENRICH" },
  max_llm_calls = { "integer", min = 0 },
}

-- A setting's value from a string (a flag or an environment variable).
local function convert(key, v, where)
  local s = SETTINGS[key]
  if s[1] == "integer" then
    local n = tonumber(v)
    if not n or n ~= math.floor(n) or n < (s.min or -math.huge) or n > (s.max or math.huge) then
      stop(2, format("%s: '%s' must be an integer%s, got '%s'", where, key,
        s.max and format(" in [%d, %d]", s.min, s.max) or format(" >= %d", s.min), tostring(v)))
    end
    return math.tointeger and math.tointeger(n) or n
  end
  return v
end

-- Checks a value read from a configuration file.
local function check_setting(key, v, where)
  local s = SETTINGS[key]
  if not s then
    stop(2, format("%s: unknown setting '%s'", where, tostring(key)))
  end
  if s[1] == "list" then
    if type(v) == "string" then
      v = { v }
    end
    if type(v) ~= "table" then
      stop(2, format("%s: '%s' must be a list of strings", where, key))
    end
    for _, x in ipairs(v) do
      if type(x) ~= "string" then
        stop(2, format("%s: '%s' must be a list of strings", where, key))
      end
    end
    return v
  elseif s[1] == "integer" then
    return convert(key, v, where)
  elseif type(v) ~= "string" then
    stop(2, format("%s: '%s' must be a string, got %s", where, key, type(v)))
  end
  return v
end

-- A small TOML subset: `key = "string" | 'string' | integer | true | false
-- | [ "a", "b" ]`, `# comments`, and `[rag]` section lines (ignored).
local function parse_toml(s, where)
  local t, n = {}, 0
  for line in (s .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    line = line:gsub("^%s+", ""):gsub("%s+$", "")
    if line ~= "" and not line:find("^#") and not line:find("^%[[%w_%.%-]+%]") then
      local key, value = line:match("^([%w_%-]+)%s*=%s*(.-)%s*$")
      if not key then
        stop(2, format("%s:%d: expected key = value", where, n))
      end
      value = value:gsub("%s+#.*$", "")
      local v
      if value:find('^".*"$') or value:find("^'.*'$") then
        v = value:sub(2, -2)
      elseif value == "true" or value == "false" then
        v = value == "true"
      elseif value:find("^%[.*%]$") then
        v = {}
        for item in value:sub(2, -2):gmatch("[^,]+") do
          item = item:gsub("^%s+", ""):gsub("%s+$", "")
          v[#v + 1] = item:match('^"(.*)"$') or item:match("^'(.*)'$") or item
        end
      else
        v = tonumber(value)
        if not v then
          stop(2, format("%s:%d: cannot read the value of '%s'", where, n, key))
        end
      end
      t[key:gsub("%-", "_")] = v
    end
  end
  return t
end

local function join(dir, name)
  return dir:sub(-1) == "/" and dir .. name or dir .. "/" .. name
end

-- The settings stored in dir: rag.toml, then rag.json over it.
local function folder_settings(dir)
  local out = {}
  if not dir or is_url(dir) then -- a PostgreSQL index records its own (url_recorded)
    return out
  end
  local tpath, jpath = join(dir, "rag.toml"), join(dir, "rag.json")
  if exists(tpath) then
    for k, v in pairs(parse_toml(read_input(tpath), tpath)) do
      out[k] = check_setting(k, v, tpath)
    end
  end
  if exists(jpath) then
    local t = json.decode(read_input(jpath))
    if type(t) ~= "table" then
      stop(2, "'" .. jpath .. "': not a JSON object")
    end
    for k, v in pairs(t) do
      out[k] = check_setting(k, v, jpath)
    end
  end
  return out
end

-- The effective settings: flags (opts), the environment, the folder's
-- files (or `file`, what a PostgreSQL index recorded), defaults.
local function settings(opts, dir, file)
  file = file or folder_settings(dir)
  local out = {}
  for key, s in pairs(SETTINGS) do
    local v = opts[key]
    if v ~= nil then
      v = s[1] == "list" and v or convert(key, v, "option --" .. key:gsub("_", "-"))
    elseif s.env and os.getenv(s.env) and os.getenv(s.env) ~= "" then
      v = convert(key, os.getenv(s.env), s.env)
    elseif file[key] ~= nil then
      v = file[key]
    else
      v = s.default
    end
    out[key] = v
  end
  return out
end

-- {====== Models ======}

-- An embedder from its spec: hashing[:DIM], model2vec:PATH, openai[:MODEL],
-- ollama[:MODEL], or none (BM25 only).
local function make_embedder(spec)
  local name, arg = spec:match("^([%w_]+):(.+)$")
  name = name or spec
  if name == "none" then
    return false
  elseif name == "hashing" then
    local dim = 512
    if arg then
      dim = tonumber(arg)
      if not dim or dim ~= math.floor(dim) or dim < 8 then
        stop(2, "embedder 'hashing:" .. arg .. "': the dimension must be an integer >= 8")
      end
    end
    return rag.embed.hashing({ dim = math.tointeger and math.tointeger(dim) or dim })
  elseif name == "model2vec" then
    if not arg then
      stop(2, "embedder 'model2vec' needs a folder: model2vec:PATH")
    end
    return must(rag.embed.model2vec(arg))
  elseif name == "openai" then
    return rag.providers.openai({ model = arg or "text-embedding-3-small" })
  elseif name == "ollama" then
    return rag.providers.ollama({ model = arg or "nomic-embed-text" })
  end
  stop(2, "unknown embedder '" .. spec .. "' (expected hashing, model2vec:PATH, openai[:MODEL],"
    .. " ollama[:MODEL] or none)")
end

-- The embedder spec as recorded: model2vec paths made absolute.
local function recorded_spec(spec)
  local path = spec:match("^model2vec:(.+)$")
  if path and path:sub(1, 1) ~= "/" then
    local pwd = os.getenv("PWD")
    if pwd then
      return "model2vec:" .. join(pwd, (path:gsub("^%./", "")))
    end
  end
  return spec
end

local function make_llm(name, model)
  if name == "extractive" then
    return rag.llm.extractive()
  elseif name == "openai" then
    return rag.providers.openai({ model = model or "gpt-4o-mini" })
  elseif name == "ollama" then
    return rag.providers.ollama({ model = model or "llama3.2" })
  end
  stop(2, "unknown llm '" .. name .. "' (expected extractive, openai or ollama)")
end

-- "1 file", "2 files".
local function plural(n, word)
  return format("%d %s%s", n, word, n == 1 and "" or "s")
end

-- {====== The progress bar ======}

-- A bar on standard error when it is a terminal, redrawn at most every
-- 50 ms (and once more when a stage reaches its total); nothing otherwise.
local function progress_bar()
  if not isatty(2) then
    return { update = function() end, done = function() end }
  end
  local last, shown, at_total = -1, false, nil
  return {
    update = function(_, what, n, total, force, extra)
      local t = now()
      local reached = n >= total and at_total ~= what
      if not force and not reached and t - last < 0.05 then
        return
      end
      at_total = n >= total and what or nil
      last = t
      local width = 30
      local fill = total > 0 and math.floor(width * math.min(n, total) / total) or 0
      io.stderr:write(format("\r%-9s [%s%s] %d/%d%s\27[K", what, ("#"):rep(fill),
        ("."):rep(width - fill), n, total, extra or ""))
      io.stderr:flush()
      shown = true
    end,
    done = function()
      if shown then
        io.stderr:write("\r\27[K")
        io.stderr:flush()
      end
    end,
  }
end

-- {====== Indexes ======}

local function manifest_of(dir)
  local path = join(dir, "manifest.json")
  if not exists(path) then
    return nil
  end
  local m = json.decode(read_input(path))
  return type(m) == "table" and m or nil
end

-- Opens the PostgreSQL index at url for reading: with the embedder it
-- recorded (rebuilt when offline), or RAG_EMBEDDER's when that is set.
local function open_url(url, cfg)
  local e = os.getenv("RAG_EMBEDDER")
  local embedder = (e and e ~= "") and make_embedder(cfg.embedder) or nil
  local ok, idx, msg, code = pcall(rag.index.open, url, { readonly = true, embedder = embedder })
  if not ok then -- the embedder differs from the index's; a bad table name
    stop(2, reason(idx))
  end
  if not idx and code == "format" then
    stop(1, "'" .. mask_url(url) .. "': no index here (make one with 'rag index PATH --into "
      .. mask_url(url) .. "')")
  end
  return must(idx, msg, code)
end

-- Opens the index in dir for reading, with the embedder it was built with.
local function open_index(dir, cfg)
  if is_url(dir) then
    return open_url(dir, cfg)
  end
  if not manifest_of(dir) then
    stop(1, "'" .. dir .. "': no index here (make one with 'rag index PATH --into " .. dir .. "')")
  end
  local embedder = make_embedder(cfg.embedder)
  local ok, idx, msg = pcall(rag.index.open, dir, { readonly = true, embedder = embedder })
  if not ok then -- the embedder differs from the index's
    stop(2, tostring(idx):gsub("^rag%.index%.open: ", ""))
  end
  return must(idx, msg)
end

-- A path as the user would type it: no "./" in front, no "/" at the end.
local function tidy_path(p)
  p = p:gsub("/+$", "")
  while p:sub(1, 2) == "./" do
    p = p:sub(3):gsub("^/+", "")
  end
  return p == "" and "." or p
end

-- The documents of paths, one at a time, with the loader's reports;
-- `bar` shows files loaded.
local function documents(paths, cfg, bar)
  local reports, i, iter, report, ndocs = {}, 0, nil, nil, 0
  local beir = false
  local function next_source()
    i = i + 1
    local p = paths[i]
    if not p then
      return false
    end
    beir = require("rag.load.beir").is_beir(p)
    -- root "": ids are the paths as walked, starting with p as given
    iter, report = rag.load.dir(p, { include = cfg.include, exclude = cfg.exclude, root = "" })
    if not iter then
      stop(1, report)
    end
    reports[#reports + 1] = report
    return true
  end
  local function it()
    while true do
      if not iter and not next_source() then
        return nil
      end
      local doc = iter()
      if doc then
        ndocs = ndocs + 1
      end
      if report.total then
        bar:update("loading", report.files or 0, report.total, false,
          format(" %s, %s", report.total == 1 and "file" or "files", plural(ndocs, "document")))
      end
      if doc then
        -- rows of a CSV or JSON lines file carry their own ids: keep them
        -- apart from other files' (a BEIR corpus keeps its ids for its qrels)
        local src = doc.source
        if not beir and src and doc.id ~= src and doc.id:sub(1, #src + 1) ~= src .. "#" then
          doc.id = src .. "#" .. doc.id
        end
        return doc
      end
      iter = nil
    end
  end
  return it, reports
end

-- Whether a document id came from one of the files that failed to load
-- (kept as it was). sync asks after it has read every document, when the
-- reports are complete.
local function failed_ids(reports)
  local failed
  return function(id)
    if not failed then
      failed = {}
      for _, r in ipairs(reports) do
        for _, f in ipairs(r.failed or {}) do
          failed[tidy_path(f.path)] = true
        end
      end
    end
    return failed[id] or failed[id:match("^(.*)#[^#/]*$") or ""] or false
  end
end

local ENRICH_STEPS = { keywords = true, summary = true, questions = true, title = true,
  doc_summary = true }

-- The enrichment `spec` asks for ("keywords,summary", or with kinds
-- "keywords:llm,summary:offline"): { step = "llm" | "offline" }, nil for
-- none. A step without a kind is the LLM's when `llm` is one (not
-- "extractive"), else offline.
local function enrich_kinds(spec, llm)
  if not spec or spec == "" or spec == "none" then
    return nil
  end
  local kinds = {}
  for item in spec:gmatch("[^,%s]+") do
    local step, kind = item:match("^([%w_]+):?(%a*)$")
    if not step or not ENRICH_STEPS[step] then
      stop(2, "unknown enrichment step '" .. item .. "' (expected keywords, summary, questions,"
        .. " title or doc_summary)")
    end
    if kind == "" then
      kind = llm ~= "extractive" and "llm" or "offline"
    end
    if kind ~= "llm" and kind ~= "offline" then
      stop(2, "enrichment step '" .. item .. "': the kind must be llm or offline")
    end
    if step == "questions" and kind == "offline" then
      stop(2, "enrichment step 'questions' needs an LLM (--llm openai or ollama)")
    end
    if kind == "llm" and llm == "extractive" then
      stop(2, "enrichment step '" .. step .. "' is written by an LLM: give --llm openai or"
        .. " ollama")
    end
    kinds[step] = kind
  end
  return next(kinds) and kinds or nil
end

-- Enrichment kinds as a spec: "step:kind,..." sorted; "none" for none.
local function enrich_spec(kinds)
  local items = {}
  for step, kind in pairs(kinds or {}) do
    items[#items + 1] = step .. ":" .. kind
  end
  sort(items)
  return #items > 0 and concat(items, ",") or "none"
end

-- Settings that decide the index's contents; a change rebuilds it.
local function changed_settings(dir, cfg)
  local m = manifest_of(dir)
  if not m then
    return nil
  end
  local was = folder_settings(dir)
  local opts = m.chunker and m.chunker.options or {}
  local diffs = {}
  if (was.embedder or "hashing") ~= recorded_spec(cfg.embedder) then
    diffs[#diffs + 1] = format("embedder %s -> %s", was.embedder or "hashing", cfg.embedder)
  end
  if opts.size ~= cfg.chunk_size or (opts.overlap or 0) ~= cfg.overlap then
    diffs[#diffs + 1] = format("chunks %s/%s -> %d/%d", tostring(opts.size),
      tostring(opts.overlap or 0), cfg.chunk_size, cfg.overlap)
  end
  local was_enrich = enrich_spec(m.enrich and m.enrich.kinds)
  local now_enrich = enrich_spec(cfg.enrich_kinds)
  if was_enrich ~= now_enrich then
    diffs[#diffs + 1] = format("enrichment %s -> %s", was_enrich, now_enrich)
  end
  return #diffs > 0 and concat(diffs, ", ") or false
end

-- Records the settings an index was built with in dir/rag.json, keeping
-- the other keys a user put there.
local function record_settings(dir, cfg)
  local path = join(dir, "rag.json")
  local t = {}
  if exists(path) then
    t = json.decode(read_input(path)) or {}
  end
  t.embedder = recorded_spec(cfg.embedder)
  t.chunk_size, t.overlap = cfg.chunk_size, cfg.overlap
  t.enrich = cfg.enrich_kinds and enrich_spec(cfg.enrich_kinds) or nil
  must(rag.core.fs.write(path, json.encode(t) .. "\n"))
end

-- Stops when a path given to `rag index` does not exist.
local function check_paths(args)
  for _, p in ipairs(args) do
    if not exists(p) then
      local f, err = io.open(p, "rb")
      stop(1, io_reason(p, f and "" or err))
    end
  end
end

-- The settings of `rag index ... --into into` with options o.
local function index_settings(o, into)
  local cfg = settings(o, into)
  if cfg.overlap >= cfg.chunk_size then
    stop(2, format("the overlap (%d) must be smaller than the chunk size (%d)", cfg.overlap,
      cfg.chunk_size))
  end
  cfg.enrich_kinds = enrich_kinds(cfg.enrich, cfg.llm)
  return cfg
end

local function index_options(cfg, embedder, kinds, llm)
  return { embedder = embedder, chunk = { size = cfg.chunk_size, overlap = cfg.overlap },
    enrich = kinds, llm = llm }
end

-- The documents of the paths as given, loaded as `rag index` loads them.
local function load_paths(args, cfg, bar)
  local paths = {}
  for i, p in ipairs(args) do
    paths[i] = tidy_path(p)
  end
  return documents(paths, cfg, bar)
end

-- Saves idx into dir with the settings it was built with.
local function save_index(idx, into, cfg)
  must(idx:save(into))
  record_settings(into, cfg)
end

-- The files that failed to load: { {path=, msg=}, ... }.
local function failed_files(reports)
  local failed = {}
  for _, r in ipairs(reports) do
    for _, f in ipairs(r.failed or {}) do
      failed[#failed + 1] = f
    end
  end
  return failed
end

-- The settings a PostgreSQL index at url recorded, as rag.json holds a
-- folder's ({ embedder =, chunk_size =, overlap = }, the embedder when it
-- can be named), and its embedder's dim; nil for a table not made yet.
local function url_recorded(url)
  local ok, idx, msg, code = pcall(rag.index.open, url, { readonly = true, embedder = false })
  if not ok then
    stop(2, reason(idx))
  end
  if not idx then
    if code == "format" and tostring(msg):find("no rag index", 1, true) then
      return nil
    end
    stop(1, tostring(msg), code)
  end
  local e, ch = idx.edesc, idx.o.chunk or {}
  idx:close()
  local spec
  if not e then
    spec = "none"
  elseif e.name == "rag.hashing" then
    spec = (e.dim or 512) == 512 and "hashing" or "hashing:" .. e.dim
  end
  return { embedder = spec, chunk_size = ch.size, overlap = ch.overlap or 0 }, e and e.dim
end

-- The dimension of an embedder without :dim() (a provider): one call.
local function probe_dim(embedder)
  local vs = must(embedder:embed({ "dimension" }, { packed = true }))
  local v = vs[1]
  return type(v) == "string" and math.floor(#v / 4) or #v
end

-- The index of `rag index ... --into URL`: the table's, or a new one with
-- the settings; settings that differ from those the table was made with
-- stop (a table holds one embedder's vectors and one chunking).
local function url_index(o, url)
  local shown = mask_url(url)
  local dsn, name = split_url(url)
  if not name:find("^[a-z_][a-z0-9_]*$") or #name > 40 then
    stop(2, "'" .. shown .. "': the table name must be a lowercase SQL name ([a-z_][a-z0-9_]*,"
      .. " at most 40 characters), got '" .. name .. "'")
  end
  local recorded, rdim = url_recorded(url)
  local cfg = settings(o, nil, recorded)
  if cfg.overlap >= cfg.chunk_size then
    stop(2, format("the overlap (%d) must be smaller than the chunk size (%d)", cfg.overlap,
      cfg.chunk_size))
  end
  if recorded and (recorded.chunk_size ~= cfg.chunk_size or recorded.overlap ~= cfg.overlap) then
    stop(2, format("'%s': the table '%s' holds chunks %s/%s; this run asks for %d/%d (drop"
      .. " the flags, or use another ?table=)", shown, name, tostring(recorded.chunk_size),
      tostring(recorded.overlap), cfg.chunk_size, cfg.overlap))
  end
  local embedder = make_embedder(cfg.embedder)
  local dim
  if embedder and type(embedder.dim) ~= "function" then
    dim = rdim or probe_dim(embedder)
  end
  local ok, idx, msg, code = pcall(function()
    local store = rag.store.postgres({ dsn = dsn, table = name, dim = dim })
    return rag.index.new({ store = store, embedder = embedder,
      chunk = { size = cfg.chunk_size, overlap = cfg.overlap } })
  end)
  if not ok then -- another embedder than the table's
    stop(2, "'" .. shown .. "': " .. reason(idx))
  end
  return must(idx, msg, code), cfg
end

local function cmd_index(o, args)
  local into = o.into
  if not into then
    stop(2, "option '--into DIR' is required (usage: rag index PATH... --into DIR)")
  end
  check_paths(args)
  local url = is_url(into)
  local t0 = now()
  local idx, cfg, changed
  if url then
    if o.enrich or o.max_llm_calls then
      stop(2, "'--enrich' is not available with a PostgreSQL index yet")
    end
    idx, cfg = url_index(o, into)
  else
    cfg = index_settings(o, into)
    local embedder = make_embedder(cfg.embedder)
    local kinds = cfg.enrich_kinds
    local llm
    for _, kind in pairs(kinds or {}) do
      if kind == "llm" then
        llm = make_llm(cfg.llm, cfg.model)
      end
    end
    changed = changed_settings(into, cfg)
    if changed == nil or changed then
      if changed then
        say("rag index: settings changed (", changed, "): indexing everything again")
      end
      idx = rag.index.new(index_options(cfg, embedder, kinds, llm))
      if changed and idx.enrich then -- what an LLM wrote before is not paid for again
        local ok, old = pcall(rag.index.open, into, { readonly = true, embedder = false })
        if ok and old and old.enrich then
          idx.enrich.cache = old.enrich.cache
        end
        if ok and old then
          old:close()
        end
      end
    else
      local ok, opened, msg = pcall(rag.index.open, into, { embedder = embedder, llm = llm })
      if not ok then
        stop(2, tostring(opened):gsub("^rag%.index%.open: ", ""))
      end
      idx = must(opened, msg)
    end
  end
  local bar = progress_bar()
  local docs, reports = load_paths(args, cfg, bar)
  local limits = cfg.max_llm_calls and { llm_calls = cfg.max_llm_calls } or nil
  if limits and not idx.enrich then
    stop(2, "option '--max-llm-calls' limits enrichment: give --enrich too")
  end
  local counts, msg, code = idx:sync(docs, {
    keep = failed_ids(reports),
    limits = idx.enrich and limits or nil,
    progress = function(done, total, c)
      bar:update("indexing", done, total, false, c.llm_calls and
        format(" %d LLM calls, %d tokens", c.llm_calls, c.tokens) or nil)
    end,
  })
  if not counts and code == "budget" and not url then -- keep what was done and paid for
    bar:update("saving", 1, 1, true)
    save_index(idx, into, cfg)
    bar:done()
    stop(1, tostring(msg):gsub("^[%w%.]+: ", "") .. "; what was done is saved: run the same"
      .. " command again to go on", code)
  end
  counts = must(counts, msg, code)
  -- the entity graph (rag.graph): made with --graph, kept in step once there
  local graph_changed = false
  if o.graph or idx.graph then
    local gc = must(rag.graph.build(idx, { progress = function(done, total)
      bar:update("graph", done, total)
    end }))
    graph_changed = gc.extracted + gc.removed > 0
  end
  -- every change is in the database when sync returns: nothing to save there
  if not url and (changed ~= false or graph_changed
      or counts.added + counts.updated + counts.removed > 0) then
    bar:update("saving", 1, 1, true)
    save_index(idx, into, cfg)
  end -- else the saved generation is this one already
  bar:done()
  local files = 0
  for _, r in ipairs(reports) do
    files = files + (r.files or 0)
  end
  local failed = failed_files(reports)
  for _, f in ipairs(failed) do
    -- the loader's message names the operation and the file: keep the reason
    local why = tostring(f.msg):gsub("\n.*", ""):gsub("^rag%.[%w%.]+: '[^']*': ", "")
    say("rag index: '", f.path, "': ", why)
  end
  local st = must(idx:stats())
  print(format("%s: %s, %s; %d added, %d updated, %d unchanged, %d removed, %d failed (%s,"
    .. " %.2f s)", url and mask_url(into) or into, plural(st.documents, "document"),
    plural(st.leaves, "chunk"), counts.added, counts.updated, counts.unchanged, counts.removed,
    #failed, plural(files, "file"), now() - t0))
  idx:close()
end

-- {====== Search ======}

-- How a hit or citation is named: its document id when that is its file's
-- path (or a row of it, "path#n"); otherwise the file and the id
-- (a BEIR corpus: "corpus.jsonl#4983").
local function label(h)
  local src, id = h.source, h.doc_id
  if not src or id == src or id:sub(1, #src + 1) == src .. "#" then
    return id
  end
  return src .. "#" .. id
end

-- filter from "key=value", "key>=n", "key<=n" arguments; numbers and
-- booleans as such, several values of one key as "any of".
local function parse_filter(list)
  if not list then
    return nil
  end
  local f = {}
  for _, s in ipairs(list) do
    local key, op, value = s:match("^([^=<>]+)([<>]?=)(.*)$")
    if not key or key == "" then
      stop(2, "bad filter '" .. s .. "' (expected key=value, key>=number or key<=number)")
    end
    if op ~= "=" then
      local n = tonumber(value)
      if not n then
        stop(2, "bad filter '" .. s .. "': " .. op .. " needs a number")
      end
      local r = type(f[key]) == "table" and f[key].gte == nil and f[key].lte == nil
        and #f[key] == 0 and f[key] or (type(f[key]) == "table" and f[key]) or {}
      r[op == ">=" and "gte" or "lte"] = n
      f[key] = r
    else
      local v = value
      if value == "true" or value == "false" then
        v = value == "true"
      elseif key ~= "doc_id" and tonumber(value) and value:find("^%-?[%d%.]+$") then
        v = tonumber(value)
      end
      if f[key] == nil then
        f[key] = v
      else
        if type(f[key]) ~= "table" then
          f[key] = { f[key] }
        end
        f[key][#f[key] + 1] = v
      end
    end
  end
  return f
end

-- The best window of about `width` bytes of text around the query's terms,
-- with the matched terms' spans in it: snippet, { {from, to}, ... }.
local function snippet(text, query, width)
  local marks = rag.text.highlights(text, query)
  -- the window holding the most marks, from the first of them
  local best, bi, j = 0, 1, 1
  for i = 1, #marks do
    while marks[j][1] < marks[i][2] - width + 40 do
      j = j + 1
    end
    if i - j + 1 > best then
      best, bi = i - j + 1, j
    end
  end
  local from = marks[bi] and math.max(1, marks[bi][1] - 40) or 1
  while from > 1 and text:byte(from) and text:byte(from) >= 0x80 and text:byte(from) < 0xC0 do
    from = from - 1
  end
  if from > 1 then -- start at a word
    local sp = text:find("%s", from)
    if sp and sp < from + 20 and (not marks[bi] or sp < marks[bi][1]) then
      from = sp + 1
    end
  end
  local to = math.min(#text, from + width - 1)
  while to < #text and text:byte(to + 1) >= 0x80 and text:byte(to + 1) < 0xC0 do
    to = to + 1
  end
  if to < #text then -- end at a word
    local cut = text:sub(from, to):match("^.*()%s")
    if cut and cut > width / 2 then
      to = from + cut - 2
    end
  end
  local spans = {}
  for _, m in ipairs(marks) do
    if m[1] >= from and m[2] <= to then
      spans[#spans + 1] = { m[1] - from + 1, m[2] - from + 1 }
    end
  end
  return text:sub(from, to), spans, from > 1, to < #text
end

-- The snippet as one line, the matches marked: bold on a terminal,
-- **word** otherwise.
local function render_snippet(s, spans, cut_left, cut_right, tty)
  local parts, at = {}, 1
  local on, off = "**", "**"
  if tty then
    on, off = "\27[1;33m", "\27[0m"
  end
  for _, sp in ipairs(spans) do
    parts[#parts + 1] = s:sub(at, sp[1] - 1)
    parts[#parts + 1] = on .. s:sub(sp[1], sp[2]) .. off
    at = sp[2] + 1
  end
  parts[#parts + 1] = s:sub(at)
  local line = concat(parts):gsub("%s+", " ")
  return (cut_left and "..." or "") .. line .. (cut_right and "..." or "")
end

local function cmd_search(o, args)
  if #args < 2 then
    stop(2, "need an index folder and a query (usage: rag search DIR QUERY)")
  end
  local dir = args[1]
  local query = concat(args, " ", 2)
  local cfg = settings(o, dir)
  local idx = open_index(dir, cfg)
  local mode = cfg.mode
  if mode and mode ~= "bm25" and mode ~= "vector" and mode ~= "hybrid" then
    stop(2, "unknown mode '" .. mode .. "' (expected bm25, vector or hybrid)")
  end
  local k = cfg.k or 10
  local ok, hits, msg, code = pcall(idx.search, idx, query, { k = k, mode = mode,
    filter = parse_filter(o.filter) })
  if not ok then -- a mode the index cannot search (no embedder)
    stop(2, reason(hits))
  end
  hits = must(hits, msg, code)
  local tty = isatty(1)
  for i, h in ipairs(hits) do
    local s, spans, cl, cr = snippet(h.text or "", query, 240)
    if o.json then
      print(json.encode({ rank = i, id = h.id, doc_id = h.doc_id, score = h.score,
        source = h.source, title = h.title, start = h.start, stop = h.stop, text = h.text,
        snippet = s, highlights = spans, meta = json.object(h.meta or {}) }))
    else
      print(format("%d. %s  (score %.4f, bytes %d-%d)", i, label(h), h.score,
        h.start or 0, h.stop or 0))
      if h.title and h.title ~= "" then
        print("   " .. h.title)
      end
      print("   " .. render_snippet(s, spans, cl, cr, tty))
    end
  end
  if #hits == 0 and not o.json then
    say("rag search: no hits")
  end
  idx:close()
end

-- {====== Ask ======}

-- Text folded to lines of at most `width` bytes where spaces allow, each
-- paragraph (a blank line in the text) kept apart.
local function wrap(text, width)
  local out = {}
  for para in (text .. "\n\n"):gmatch("(.-)\n%s*\n") do
    local line = ""
    for word in para:gmatch("%S+") do
      if line ~= "" and #line + 1 + #word > width then
        out[#out + 1] = line
        line = word
      else
        line = line == "" and word or line .. " " .. word
      end
    end
    if line ~= "" then
      out[#out + 1] = line
      out[#out + 1] = ""
    end
  end
  out[#out] = nil
  return concat(out, "\n")
end

local PIPELINES = { naive = true, hybrid = true, fusion = true, hyde = true, stepback = true,
  window = true, multihop = true, adaptive = true, corrective = true, graph = true,
  agent = true, summary = true }

-- The settings of `rag ask` and `rag serve` for the index in dir (flags
-- in o): the effective settings, with the pipeline name checked, and the LLM.
local function ask_setup(o, dir)
  local cfg = settings(o, dir)
  if not PIPELINES[cfg.pipeline] then
    local names = {}
    for n in pairs(PIPELINES) do
      names[#names + 1] = n
    end
    sort(names)
    stop(2, "unknown pipeline '" .. cfg.pipeline .. "' (expected " .. concat(names, ", ") .. ")")
  end
  return cfg, make_llm(cfg.llm, cfg.model)
end

-- Answers the question from idx with cfg's pipeline and llm and prints the
-- answer, then its numbered sources; the time and LLM calls on standard error.
local function answer(idx, llm, question, cfg, o)
  local t0 = now()
  local p = rag.pipeline[cfg.pipeline]({ index = idx, llm = llm, k = cfg.k or 5,
    search = cfg.mode and { mode = cfg.mode } or nil })
  local stream
  if o.stream then
    stream = function(delta)
      io.stdout:write(delta)
      io.stdout:flush()
    end
  end
  local r, msg, code, partial = p:answer(question, { stream = stream })
  local got = r or partial
  if o.trace and got and got.trace then
    must(got.trace:write(o.trace))
  end
  if not r then
    stop(1, msg, code)
  end
  if stream then
    io.stdout:write("\n")
  else
    print(wrap(r.text, 78))
  end
  local cited = {}
  for n in pairs(r.citations) do
    cited[#cited + 1] = n
  end
  sort(cited)
  if #cited > 0 then
    print("")
    print("Sources:")
  end
  for _, n in ipairs(cited) do
    local c = r.citations[n]
    local h = r.contexts[n] or {}
    print(format("[%d] %s (bytes %d-%d)%s", n, label(c), c.start or 0, c.stop or 0,
      h.title and h.title ~= "" and ("  " .. h.title) or ""))
  end
  local u = r.usage or {}
  say(format("rag ask: %.3f s, %s, %s", now() - t0, cfg.pipeline,
    plural(u.llm_calls or 0, "LLM call")))
end

local function cmd_ask(o, args)
  if #args < 2 then
    stop(2, "need an index folder and a question (usage: rag ask DIR QUESTION)")
  end
  local dir = args[1]
  local question = concat(args, " ", 2)
  local cfg, llm = ask_setup(o, dir)
  local idx = open_index(dir, cfg)
  answer(idx, llm, question, cfg, o)
  idx:close()
end

-- {====== Serve ======}

-- Single-quoted for sh.
local function shq(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function first_line(cmd)
  local f = io.popen(cmd .. " 2>/dev/null")
  local line = f and f:read("*l")
  if f then
    f:close()
  end
  return line
end

-- nginx with ngx_lua: OpenResty when `openresty` is on PATH, else Debian's
-- nginx and its module files (RAG_NGINX and RAG_NGINX_MODULES override).
local function find_nginx()
  local apt = "as root: apt-get install -y nginx-light libnginx-mod-http-lua"
  local openresty = not os.getenv("RAG_NGINX") and first_line("command -v openresty")
  if openresty and openresty ~= "" then
    return openresty, nil
  end
  local bin = os.getenv("RAG_NGINX") or "/usr/sbin/nginx"
  local mods = os.getenv("RAG_NGINX_MODULES") or "/usr/lib/nginx/modules"
  if not exists(bin) then
    stop(1, "nginx is missing (" .. bin .. "); " .. apt)
  end
  for _, m in ipairs({ "ndk_http_module.so", "ngx_http_lua_module.so" }) do
    if not exists(join(mods, m)) then
      stop(1, "the nginx Lua module is missing (" .. join(mods, m) .. "); " .. apt)
    end
  end
  return bin, mods
end

-- The Lua tree rag runs from and the folder holding rag/core.so built for
-- LuaJIT (RAG_JIT_CPATH overrides: a folder with rag/core.so).
local function find_lua_paths()
  local cli = package.searchpath and package.searchpath("rag.cli", package.path)
  local root = cli and cli:match("^(.*)/rag/cli%.lua$")
  if not root then
    stop(1, "cannot find the rag Lua modules on package.path")
  end
  if root:sub(1, 1) ~= "/" then
    root = join(os.getenv("PWD") or first_line("pwd") or ".", root)
  end
  local cdir = os.getenv("RAG_JIT_CPATH")
  if not cdir then
    local clone = root:gsub("/lua$", "") .. "/build/jit"
    if exists(clone .. "/rag/core.so") then
      cdir = clone
    elseif rawget(_G, "jit") then
      local so = package.searchpath("rag.core", package.cpath)
      cdir = so and so:match("^(.*)/rag/core%.so$")
    end
  end
  if not cdir or not exists(cdir .. "/rag/core.so") then
    stop(1, "rag/core.so for LuaJIT is missing (in a clone: make LUA_VERSION=jit;"
      .. " or set RAG_JIT_CPATH to the folder that holds rag/core.so)")
  end
  return root, cdir
end

-- rag serve's workers collect Lua garbage when their heap has grown to six
-- times what the last collection kept (Lua's default: twice).
local SERVE_GC_PAUSE = 600

local NGINX_CONF = [[
# Written by rag serve; removed when it stops.
@LOAD@@USER@daemon off;
master_process on;
worker_processes @WORKERS@;
pid @PREFIX@/nginx.pid;
error_log stderr warn;
env RAG_SERVE_TOKEN;
env RAG_SERVE_DSN;
env OPENAI_API_KEY;
env OPENAI_BASE_URL;
env OLLAMA_HOST;

events {
  worker_connections 1024;
}

http {
  access_log off;
  client_body_temp_path @PREFIX@/tmp/body;
  proxy_temp_path @PREFIX@/tmp/proxy;
  fastcgi_temp_path @PREFIX@/tmp/fastcgi;
  uwsgi_temp_path @PREFIX@/tmp/uwsgi;
  scgi_temp_path @PREFIX@/tmp/scgi;
  keepalive_requests 1000000;
  lua_package_path "@LUA@/?.lua;@LUA@/?/init.lua;;";
  lua_package_cpath "@CPATH@/?.so;;";
  lua_shared_dict rag_serve 10m;
  init_worker_by_lua_block {
    require("rag.serve").init(@INIT@)
  }
  server {
    listen @LISTEN@ backlog=4096;
    server_tokens off;
    client_max_body_size 64k;
    client_body_buffer_size 64k;
    error_page 400 404 405 408 413 414 500 502 503 504 @rag_error;
    location / {
      content_by_lua_block { require("rag.serve").handle() }
    }
    location @rag_error {
      content_by_lua_block { require("rag.serve").error_page() }
    }
  }
}
]]

-- The shell `rag serve` becomes (rag.core.fs.exec: os.execute's system()
-- would ignore a SIGINT sent to this process): runs nginx in the
-- foreground, stops it on SIGINT (Ctrl-C), SIGTERM or SIGHUP, prints the
-- line once nginx listens, and removes the prefix. A watcher stops nginx
-- should the shell itself be killed. When nginx fails to start, prints why
-- as `rag serve: nginx: ...` and exits with 1.
local RUN_NGINX = [=[
nginx=$1 prefix=$2 line=$3 shell=$$
"$nginx" -p "$prefix/" -c "$prefix/nginx.conf" -e stderr 2>"$prefix/start.err" &
ng=$!
trap 'kill -QUIT $ng 2>/dev/null' INT TERM HUP
while kill -0 $ng 2>/dev/null && [ ! -s "$prefix/nginx.pid" ]; do sleep 0.05; done
if [ -s "$prefix/nginx.pid" ]; then
  echo "$line"
  cat "$prefix/start.err" >&2
  (trap '' INT HUP
   while kill -0 $shell 2>/dev/null && kill -0 $ng 2>/dev/null; do sleep 0.3; done
   if ! kill -0 $shell 2>/dev/null; then
     kill -QUIT $ng 2>/dev/null
     # nginx removes its pid file as it exits (no one may reap it now)
     while [ -e "$prefix/nginx.pid" ] && kill -0 $ng 2>/dev/null; do sleep 0.1; done
     rm -rf "$prefix"
   fi) &
  watcher=$!
  while kill -0 $ng 2>/dev/null; do wait $ng; done
  kill $watcher 2>/dev/null
  rm -rf "$prefix"
  exit 0
fi
wait $ng
why=$(sed -n 's/^.*\[emerg\] [0-9#]*: //p' "$prefix/start.err" | head -n 1)
[ -n "$why" ] || why=$(tail -n 1 "$prefix/start.err")
echo "rag serve: nginx: ${why:-exited at start}" >&2
rm -rf "$prefix"
exit 1
]=]

local function int_option(name, v, lo, hi)
  local n = tonumber(v)
  if not n or n ~= math.floor(n) or n < lo or n > hi then
    stop(2, format("option --%s: '%s' must be an integer in [%d, %d]", name, tostring(v), lo, hi))
  end
  return math.floor(n)
end

-- The nginx.conf of `rag serve`.
local function serve_conf(o, dir, prefix, mods, listen)
  local cfg = ask_setup(o, dir) -- bad settings stop here, not in nginx
  local lua, cpath = find_lua_paths()
  local rate = tonumber(o.rate or "50")
  if not rate or rate < 0 then
    stop(2, "option --rate: '" .. tostring(o.rate) .. "' must be a number >= 0")
  end
  local url = is_url(dir)
  local adir = (url or dir:sub(1, 1) == "/") and dir
    or join(os.getenv("PWD") or ".", tidy_path(dir))
  local timeout = tonumber(o.timeout or "60")
  if not timeout or timeout <= 0 then
    stop(2, "option --timeout: '" .. tostring(o.timeout) .. "' must be a number of seconds > 0")
  end
  local embedder = cfg.embedder
  if url then -- the recorded one, unless named (the URL itself goes by RAG_SERVE_DSN)
    local e = os.getenv("RAG_EMBEDDER")
    embedder = (e and e ~= "") and embedder or nil
    adir = nil
  end
  -- a /search leaves about 24 kB of Lua garbage (its answer's JSON, 20 kB);
  -- at the default pause (200) a worker collected every ~50 requests and
  -- gave about 6% fewer of them per second than at 600 (docs/serving.md)
  local init = { dir = adir, rate = rate, timeout_ms = timeout * 1000, llm = cfg.llm,
    model = cfg.model, pipeline = o.pipeline,
    embedder = embedder, k = cfg.k, mode = cfg.mode, gc_pause = SERVE_GC_PAUSE }
  local keys, parts = {}, {}
  for k in pairs(init) do
    keys[#keys + 1] = k
  end
  sort(keys)
  for _, k in ipairs(keys) do
    local v = init[k]
    parts[#parts + 1] = k .. " = " .. (type(v) == "string" and format("%q", v) or tostring(v))
  end
  parts[#parts + 1] = 'token = os.getenv("RAG_SERVE_TOKEN")'
  if url then -- kept out of the configuration file: it holds the password
    parts[#parts + 1] = 'dir = os.getenv("RAG_SERVE_DSN")'
  end
  local load = mods and format("load_module %s/ndk_http_module.so;\nload_module"
    .. " %s/ngx_http_lua_module.so;\n", mods, mods) or ""
  return (NGINX_CONF:gsub("@(%u+)@", {
    -- as root, nginx would run its workers as nobody, who may not read DIR
    USER = first_line("id -u") == "0" and "user root;\n" or "",
    LOAD = load, WORKERS = tostring(o.nworkers), PREFIX = prefix, LUA = lua, CPATH = cpath,
    LISTEN = listen, INIT = "{ " .. concat(parts, ", ") .. " }",
  }))
end

-- Stops unless the PostgreSQL index at url opens here (when LuaSocket is
-- there to look: nginx's workers use cosockets and need no LuaSocket).
local function check_url(url)
  local ok, idx, msg, code = pcall(rag.index.open, url, { readonly = true, embedder = false })
  if not ok and tostring(idx):find("LuaSocket is missing", 1, true) then
    return
  elseif not ok then
    stop(2, reason(idx))
  elseif not idx and code == "format" then
    stop(1, "'" .. mask_url(url) .. "': no index here (make one with 'rag index PATH --into "
      .. mask_url(url) .. "')")
  end
  must(idx, msg, code):close()
end

local function cmd_serve(o, args)
  local dir = args[1]
  local url = is_url(dir)
  if url then
    check_url(dir)
  elseif not manifest_of(dir) then
    stop(1, "'" .. dir .. "': no index here (make one with 'rag index PATH --into " .. dir .. "')")
  end
  local port = int_option("port", o.port or "8080", 1, 65535)
  o.nworkers = o.workers and int_option("workers", o.workers, 1, 1024)
    or tonumber(first_line("getconf _NPROCESSORS_ONLN") or "") or 1
  local host = o.host or "127.0.0.1"
  if not host:find("^[%w%.:%-]+$") then
    stop(2, "option --host: '" .. host .. "' is not a host name or address")
  end
  if o.token == "" then
    stop(2, "option --token: the token must not be empty")
  end
  local nginx, mods = find_nginx()
  local listen = (host:find(":", 1, true) and "[" .. host .. "]" or host) .. ":" .. port
  local prefix = first_line("mktemp -d \"${TMPDIR:-/tmp}/rag-serve.XXXXXX\"")
  if not prefix or prefix == "" then
    stop(1, "cannot make a temporary folder (mktemp -d)")
  end
  local ok, conf = pcall(serve_conf, o, dir, prefix, mods, listen)
  if ok then
    os.execute("mkdir -p " .. shq(prefix .. "/logs") .. " " .. shq(prefix .. "/tmp"))
    ok, conf = pcall(must, rag.core.fs.write(prefix .. "/nginx.conf", conf))
  end
  if not ok then
    os.execute("rm -rf " .. shq(prefix))
    error(conf, 0)
  end
  local line = format("rag serve: http://%s/ (%s, index %s)", listen,
    plural(o.nworkers, "worker"), url and mask_url(dir) or dir)
  local argv = { "env" }
  for _, v in ipairs({ { "RAG_SERVE_TOKEN", o.token }, { "RAG_SERVE_DSN", url and dir } }) do
    if v[2] then
      argv[#argv + 1] = v[1] .. "=" .. v[2]
    else
      table.insert(argv, 2, v[1])
      table.insert(argv, 2, "-u")
    end
  end
  for _, a in ipairs({ "sh", "-c", RUN_NGINX, "rag-serve", nginx, prefix, line }) do
    argv[#argv + 1] = a
  end
  io.stdout:flush()
  local _, why = rag.core.fs.exec(unpack(argv)) -- returns only when exec fails
  os.execute("rm -rf " .. shq(prefix))
  stop(1, "cannot run nginx's supervising shell: " .. tostring(why))
end

-- {====== Evaluation ======}

local IR_MEASURES = { "ndcg@10", "recall@100", "mrr", "map", "p@10" }
local QA_METRICS = { "faithfulness", "answer_relevancy", "context_precision", "context_recall",
  "answer_correctness" }
local SWEEP_KEYS = { ["chunk.size"] = "integer", ["chunk.overlap"] = "integer", k = "integer",
  mode = "string", pipeline = "string" }

-- "--sweep key=a,b,c" arguments as { {key, {values}} }, in the order given.
local function parse_sweeps(list)
  local out = {}
  for _, s in ipairs(list or {}) do
    local key, values = s:match("^([%w_.]+)=(.+)$")
    if not key or not SWEEP_KEYS[key] then
      local keys = {}
      for k in pairs(SWEEP_KEYS) do
        keys[#keys + 1] = k
      end
      sort(keys)
      stop(2, "bad sweep '" .. s .. "' (expected KEY=V1,V2,... with KEY one of "
        .. concat(keys, ", ") .. ")")
    end
    local vs = {}
    for v in values:gmatch("[^,]+") do
      if SWEEP_KEYS[key] == "integer" then
        local n = math.tointeger and math.tointeger(tonumber(v)) or tonumber(v)
        if not n or n < 1 then
          stop(2, "bad sweep '" .. s .. "': '" .. v .. "' is not a positive integer")
        end
        v = n
      end
      vs[#vs + 1] = v
    end
    out[#out + 1] = { key, vs }
  end
  return out
end

-- Every combination of the sweeps' values: { {key = value, ...}, ... },
-- the first sweep varying slowest.
local function combinations(sweeps)
  local out = { {} }
  for _, sw in ipairs(sweeps) do
    local next_out = {}
    for _, base in ipairs(out) do
      for _, v in ipairs(sw[2]) do
        local c = {}
        for k, x in pairs(base) do
          c[k] = x
        end
        c[sw[1]] = v
        next_out[#next_out + 1] = c
      end
    end
    out = next_out
  end
  return out
end

local function setting_name(params, order)
  local parts = {}
  for _, k in ipairs(order) do
    if params[k] ~= nil then
      parts[#parts + 1] = k .. "=" .. tostring(params[k])
    end
  end
  return #parts > 0 and concat(parts, " ") or "default"
end

-- The index with params' chunk settings: idx itself when they are its own,
-- else a new index over idx's documents (built once per chunk setting).
local function index_for(idx, cfg, params, cache, bar)
  local size = params["chunk.size"] or cfg.chunk_size
  local overlap = params["chunk.overlap"] or cfg.overlap
  if size == cfg.chunk_size and overlap == cfg.overlap then
    return idx
  end
  if overlap >= size then
    stop(2, format("sweep: the overlap (%d) must be smaller than the chunk size (%d)", overlap,
      size))
  end
  local key = size .. "/" .. overlap
  if not cache[key] then
    local other = rag.index.new({ embedder = idx.embedder or false,
      chunk = { size = size, overlap = overlap } })
    local docs = {}
    for i, id in ipairs(idx:ids()) do
      local d = idx:get(id)
      docs[i] = { id = d.id, text = d.text, source = d.source, title = d.title, meta = d.meta }
    end
    must(other:add_many(docs, { progress = function(done, total)
      bar:update("chunking", done, total)
    end }))
    cache[key] = other
  end
  return cache[key]
end

-- Document-level IR measures of idx's search in `mode` over a BEIR folder's
-- test queries: means and per-query values.
local function eval_ir(idx, data, mode, bar)
  local run, qids = {}, {}
  for qid in pairs(data.qrels) do
    if data.queries[qid] then
      qids[#qids + 1] = qid
    end
  end
  sort(qids)
  for i, qid in ipairs(qids) do
    local hits = must(idx:search(data.queries[qid], { mode = mode, k = 100, group = "doc" }))
    local ranked = {}
    for j, h in ipairs(hits) do
      ranked[j] = { id = h.doc_id, score = h.score }
    end
    run[qid] = ranked
    bar:update("searching", i, #qids)
  end
  local means, per_query = rag.eval.ir(run, data.qrels, IR_MEASURES, { per_query = true })
  -- recall@k over k, for the report's curves
  local curve = {}
  for _, k in ipairs({ 1, 3, 5, 10, 20, 50, 100 }) do
    curve[#curve + 1] = { k = k, value = rag.eval.ir(run, data.qrels, { "recall@" .. k })[
      "recall@" .. k] }
  end
  return means, per_query, curve
end

-- Questions of a JSON lines file: { question =, ground_truth =, id = }.
local function read_qa(path)
  local list, n = {}, 0
  for line in read_input(path):gmatch("[^\n]+") do
    n = n + 1
    local t = json.decode(line)
    if type(t) ~= "table" or type(t.question) ~= "string" then
      stop(1, format("'%s': line %d: expected an object with a string 'question'", path, n))
    end
    list[#list + 1] = { id = t.id and tostring(t.id) or tostring(n), question = t.question,
      ground_truth = t.ground_truth or t.answer }
  end
  return list
end

local function cmd_eval(o, args)
  local dir = args[1]
  if (o.beir and o.qa) or not (o.beir or o.qa) then
    stop(2, "give one of --beir FOLDER and --qa FILE (usage: rag eval DIR --beir FOLDER)")
  end
  local cfg = settings(o, dir)
  local idx = open_index(dir, cfg)
  local sweeps = parse_sweeps(o.sweep)
  local order = {}
  for _, sw in ipairs(sweeps) do
    order[#order + 1] = sw[1]
  end
  local bar = progress_bar()
  local results = { settings = {}, meta = { index = dir, library = "rag " .. rag._VERSION } }
  local cache = {}
  if o.beir then
    local data = must(rag.eval.beir(o.beir, { corpus = false }))
    -- judged documents the index lacks count as misses: a wrong folder or
    -- an index of part of the corpus would otherwise pass unnoticed
    local judged, missing, seen = 0, 0, {}
    for qid, grades in pairs(data.qrels) do
      for id, grade in pairs(data.queries[qid] and grades or {}) do
        if grade > 0 and not seen[id] then
          seen[id] = true
          judged = judged + 1
          missing = missing + (idx:hash(id) == nil and 1 or 0)
        end
      end
    end
    if missing > 0 then
      say(format("rag eval: %d of %d judged documents are not in the index (they count as"
        .. " misses)", missing, judged))
    end
    results.meta.data = o.beir
    results.metrics = IR_MEASURES
    local modes = { cfg.mode or nil }
    local swept_mode = false
    for _, sw in ipairs(sweeps) do
      swept_mode = swept_mode or sw[1] == "mode"
    end
    if not swept_mode and not cfg.mode then -- every mode the index can search
      modes = idx.embedder and { "bm25", "vector", "hybrid" } or { "bm25" }
      order[#order + 1] = "mode"
    end
    for _, params in ipairs(combinations(sweeps)) do
      for _, mode in ipairs(swept_mode and { params.mode } or modes) do
        local p = {}
        for k, v in pairs(params) do
          p[k] = v
        end
        p.mode = mode
        local which = index_for(idx, cfg, p, cache, bar)
        local means, per_query, curve = eval_ir(which, data, mode, bar)
        results.settings[#results.settings + 1] = { name = setting_name(p, order), params = p,
          scores = means, per_query = per_query, curve = curve }
      end
    end
  else
    local qa = read_qa(o.qa)
    results.meta.data = o.qa
    results.metrics = QA_METRICS
    local judge_name = o.judge or (cfg.llm ~= "extractive" and cfg.llm) or nil
    local judge = judge_name and make_llm(judge_name, cfg.model) or nil
    local llm = make_llm(cfg.llm, cfg.model)
    for _, params in ipairs(combinations(sweeps)) do
      local which = index_for(idx, cfg, params, cache, bar)
      local name = params.pipeline or cfg.pipeline
      if not PIPELINES[name] then
        stop(2, "unknown pipeline '" .. name .. "'")
      end
      local p = rag.pipeline[name]({ index = which, llm = llm, k = params.k or cfg.k or 5,
        search = (params.mode or cfg.mode) and { mode = params.mode or cfg.mode } or nil })
      local samples = {}
      for i, q in ipairs(qa) do
        local r = must(p:answer(q.question))
        local contexts = {}
        for j, h in ipairs(r.contexts) do
          contexts[j] = h.text
        end
        samples[i] = { question = q.question, answer = r.text, contexts = contexts,
          ground_truth = q.ground_truth }
        bar:update("answering", i, #qa)
      end
      local res = must(rag.eval.ragas(samples, { llm = judge, embedder = which.embedder or nil }))
      local per_query = {}
      for i, q in ipairs(qa) do
        local row = {}
        for _, m in ipairs(QA_METRICS) do
          row[m] = res.per_sample[i] and res.per_sample[i][m]
        end
        per_query[q.id] = row
      end
      results.settings[#results.settings + 1] = { name = setting_name(params, order),
        params = params, scores = res.scores, per_query = per_query,
        unavailable = res.unavailable }
    end
    results.diagnosis = rag.eval.diagnose(results.settings[1].scores)
  end
  bar:done()
  -- paired comparisons of the first setting with each other one
  if #results.settings > 1 and rag.eval.compare then
    results.comparisons = {}
    local a = results.settings[1]
    for i = 2, #results.settings do
      local b = results.settings[i]
      results.comparisons[#results.comparisons + 1] = { a = a.name, b = b.name,
        result = rag.eval.compare(a.per_query, b.per_query, { seed = 1 }) }
    end
  end
  local report = require("rag.report")
  io.stdout:write(report.table(results))
  if o.json then
    must(rag.core.fs.write(o.json, json.encode(results) .. "\n"))
  end
  if o.html then
    must(rag.core.fs.write(o.html, report.html(results, { title = "rag eval: " .. dir })))
  end
  idx:close()
  for _, other in pairs(cache) do
    other:close()
  end
end

-- {====== Info and chunk ======}

local function human_size(bytes)
  if bytes < 1e6 then
    return format("%.1f kB", bytes / 1e3)
  end
  return format("%.1f MB", bytes / 1e6)
end

-- `rag info URL`: what a PostgreSQL index holds and was made with.
local function url_info(url)
  local idx = open_index(url, settings({}, url))
  local st = must(idx:stats())
  local copts = idx.o.chunk or {}
  local tok = copts.tokenizer
  if type(tok) ~= "string" then
    local ok, info = pcall(function() return tok:info() end)
    tok = ok and info and info.name or copts.unit or ""
  end
  local rows = {
    { "index", mask_url(url) },
    { "store", format("postgres, tables %s_docs and %s_chunks", st.table, st.table) },
    { "documents", tostring(st.documents) },
    { "chunks", tostring(st.leaves) },
    { "chunker", format("%s, size %s, overlap %s, %s", tostring(st.chunker),
      tostring(copts.size), tostring(copts.overlap or 0), tostring(tok)) },
    { "embedder", st.embedder and format("%s%s", st.embedder, st.dim and format(" (dim %d)",
      st.dim) or "") or "none" },
    { "vectors", tostring(st.vector) },
    { "language", tostring(st.language) },
    { "search mode", st.default_mode },
  }
  for _, r in ipairs(rows) do
    print(format("%-12s %s", r[1], r[2]))
  end
  idx:close()
end

local function cmd_info(_, args)
  if #args < 1 then
    stop(2, "need an index folder (usage: rag info DIR)")
  end
  local dir = args[1]
  if is_url(dir) then
    return url_info(dir)
  end
  local m = manifest_of(dir)
  if not m then
    stop(1, "'" .. dir .. "': no index here")
  end
  local cfg = settings({}, dir)
  local idx = open_index(dir, cfg)
  local st = idx:stats()
  local disk = 0
  for _, f in pairs(m.files or {}) do
    disk = disk + (f.size or 0)
  end
  local ch = m.chunker or {}
  local copts = ch.options or {}
  local rows = {
    { "index", dir },
    { "generation", tostring(m.generation) },
    { "documents", tostring(st.documents) },
    { "chunks", tostring(st.leaves) },
    { "text", human_size(st.bytes or 0) },
    { "on disk", human_size(disk) },
    { "terms", tostring(st.terms) },
    { "chunker", format("%s, size %s, overlap %s, %s", tostring(ch.name), tostring(copts.size),
      tostring(copts.overlap or 0), tostring(copts.tokenizer or copts.unit or "")) },
    { "embedder", format("%s%s", cfg.embedder, st.dim and st.dim > 0 and format(" (dim %d)",
      st.dim) or "") },
    { "vectors", tostring(st.vector) },
    { "search mode", st.default_mode },
  }
  local e = st.enrich
  if e then
    local leaves = math.max(e.chunks, 1)
    rows[#rows + 1] = { "enrichment", enrich_spec(e.steps):gsub(",", ", ") }
    local parts = {}
    if e.steps.keywords then
      parts[#parts + 1] = format("keywords %.0f%%", 100 * e.keywords / leaves)
    end
    if e.steps.summary then
      parts[#parts + 1] = format("summaries %.0f%%", 100 * e.summary / leaves)
    end
    if e.steps.questions then
      parts[#parts + 1] = format("%d questions (%.1f a chunk)", e.questions, e.questions / leaves)
    end
    if e.steps.title then
      parts[#parts + 1] = format("%d titles made", e.titles)
    end
    if e.steps.doc_summary then
      parts[#parts + 1] = format("%d of %d documents summarised", e.doc_summaries, st.documents)
      if e.sections > 0 then
        parts[#parts + 1] = format("%d sections", e.sections)
      end
      if e.clusters > 0 then
        parts[#parts + 1] = format("%d clusters", e.clusters)
      end
    end
    rows[#rows + 1] = { "enriched", format("%d chunks: %s", e.chunks, concat(parts, ", ")) }
    rows[#rows + 1] = { "llm cache", format("%d answers", e.cached) }
  end
  rows[#rows + 1] = { "written by", "rag " .. tostring(m.library) }
  for _, r in ipairs(rows) do
    print(format("%-12s %s", r[1], r[2]))
  end
  idx:close()
end

local CHUNKERS = { recursive = true, fixed = true, sentences = true, markdown = true,
  window = true, hierarchy = true }

local function cmd_chunk(o, args)
  local name = o.chunker or "recursive"
  if not CHUNKERS[name] then
    stop(2, "unknown chunker '" .. name .. "' (expected fixed, hierarchy, markdown, recursive,"
      .. " sentences or window)")
  end
  local size = convert("chunk_size", o.chunk_size or "512", "option --chunk-size")
  local overlap = convert("overlap", o.overlap or (name == "recursive" and "64" or "0"),
    "option --overlap")
  local text = read_input(args[1])
  local enc = o.encoding or "cl100k_base"
  local tok = enc == "approx" and rag.tokenizer.approx() or must(rag.tokenizer.get(enc))
  local opts = { size = size, tokenizer = tok }
  if name == "recursive" or name == "fixed" then
    opts.overlap = overlap
  end
  local chunks = must(rag.chunk[name](text, opts))
  local total = 0
  for i, c in ipairs(chunks) do
    local line = c.text:gsub("%s+", " ")
    if #line > 60 then
      line = line:sub(1, 57):gsub("[\128-\191]*$", ""):gsub("[\192-\255]$", "") .. "..."
    end
    print(format("%4d %8d %8d %6d  %s", i, c.start, c.stop, c.tokens or 0, line))
    total = total + (c.tokens or 0)
  end
  say(format("rag chunk: %d chunks, %d tokens (%s, size %d, overlap %d, %s)", #chunks, total, name,
    size, opts.overlap or 0, enc))
end

-- {====== Commands ======}

local show_help -- the manual, below the command table it describes

local ENCODINGS = { cl100k_base = true, o200k_base = true, approx = true }

-- Each command: its synopsis, a one-line summary, its options (name ->
-- key for an option with a value, { key, flag = true } for a flag,
-- { key, many = true } for one given several times), the fewest and the
-- most positional arguments, and what it does.
local COMMANDS = {
  index = {
    synopsis = "rag index PATH... --into DIR [--chunk-size N] [--overlap N] [--embedder E]"
      .. " [--include GLOB]... [--exclude GLOB]... [--graph] [--enrich STEPS] [--llm LLM]"
      .. " [--model M] [--max-llm-calls N]",
    options = { into = "into", ["chunk-size"] = "chunk_size", overlap = "overlap",
      embedder = "embedder", include = { "include", many = true },
      exclude = { "exclude", many = true }, graph = { "graph", flag = true },
      enrich = "enrich", llm = "llm", model = "model", ["max-llm-calls"] = "max_llm_calls" },
    min = 1, nargs = math.huge,
    run = cmd_index,
  },
  search = {
    synopsis = "rag search DIR QUERY [--k N] [--mode MODE] [--filter KEY=VALUE]... [--json]",
    options = { k = "k", mode = "mode", filter = { "filter", many = true },
      json = { "json", flag = true } },
    min = 2, nargs = math.huge,
    run = cmd_search,
  },
  ask = {
    synopsis = "rag ask DIR QUESTION [--pipeline NAME] [--llm LLM] [--model M] [--k N]"
      .. " [--mode MODE] [--stream] [--trace FILE]",
    options = { pipeline = "pipeline", llm = "llm", model = "model", k = "k", mode = "mode",
      stream = { "stream", flag = true }, trace = "trace" },
    min = 2, nargs = math.huge,
    run = cmd_ask,
  },
  eval = {
    synopsis = "rag eval DIR (--beir FOLDER | --qa FILE) [--sweep KEY=V1,V2]... [--mode MODE]"
      .. " [--json FILE] [--html FILE]",
    options = { beir = "beir", qa = "qa", sweep = { "sweep", many = true }, mode = "mode",
      json = "json", html = "html", pipeline = "pipeline", llm = "llm", model = "model",
      judge = "judge", k = "k" },
    min = 1, nargs = 1,
    run = cmd_eval,
  },
  info = { synopsis = "rag info DIR", min = 1, nargs = 1, run = cmd_info },
  serve = {
    synopsis = "rag serve DIR [--port P] [--workers N] [--token T] [--host H] [--rate N]"
      .. " [--timeout S] [--llm LLM] [--model M]",
    options = { port = "port", workers = "workers", token = "token", host = "host",
      rate = "rate", llm = "llm", model = "model", pipeline = "pipeline", k = "k",
      mode = "mode", timeout = "timeout" },
    min = 1, nargs = 1,
    run = cmd_serve,
  },
  chunk = {
    synopsis = "rag chunk [FILE] [--chunker NAME] [--chunk-size N] [--overlap N] [-e ENC]",
    options = { chunker = "chunker", ["chunk-size"] = "chunk_size", overlap = "overlap",
      e = "encoding", encoding = "encoding" },
    nargs = 1,
    check = function(opts)
      if opts.encoding and not ENCODINGS[opts.encoding] then
        return "unknown encoding '" .. opts.encoding .. "', expected cl100k_base, o200k_base"
          .. " or approx"
      end
    end,
    run = cmd_chunk,
  },
  version = {
    synopsis = "rag version",
    run = function()
      print(("rag %s (%s)"):format(rag._VERSION, _VERSION))
    end,
  },
  hash = {
    synopsis = "rag hash [FILE]",
    nargs = 1,
    run = function(_, args)
      print(rag.text.hash(read_input(args[1])))
    end,
  },
  json = {
    synopsis = "rag json [FILE]",
    nargs = 1,
    run = function(_, args)
      print(json.encode(must(json.decode(read_input(args[1])))))
    end,
  },
  tokens = {
    synopsis = "rag tokens [-e ENC] [FILE]",
    options = { e = "encoding", encoding = "encoding" },
    nargs = 1,
    check = function(opts)
      local enc = opts.encoding
      if enc and not ENCODINGS[enc] then
        return "unknown encoding '" .. enc .. "', expected cl100k_base, o200k_base or approx"
      end
    end,
    run = function(opts, args)
      local enc = opts.encoding or "cl100k_base"
      local tok = enc == "approx" and rag.tokenizer.approx() or must(rag.tokenizer.get(enc))
      print(must(tok:count(read_input(args[1]))))
    end,
  },
  sentences = {
    synopsis = "rag sentences [FILE]",
    nargs = 1,
    run = function(_, args)
      local list = must(rag.text.sentences(read_input(args[1])))
      for _, s in ipairs(list) do
        print(("%d\t%d\t%s"):format(s.start, s.stop, (s.text:gsub("%s+", " "))))
      end
    end,
  },
  help = {
    synopsis = "rag help [COMMAND]",
    nargs = 1,
    run = function(_, args)
      show_help(args[1])
    end,
  },
}

-- {====== Help ======}

local USAGE = [[
usage: rag <command> [args]

The main job:
  index PATH... --into DIR   index files and folders into DIR (incremental)
  search DIR QUERY           ranked passages with their sources
  ask DIR QUESTION           an answer with numbered sources (offline by default)
  eval DIR --beir FOLDER     IR measures of each search mode; --qa FILE for answers
  info DIR                   what an index holds
  serve DIR                  an HTTP search and answer service (nginx)

Tools:
  chunk [FILE]               show the chunks of FILE and their token counts
  tokens [-e ENC] [FILE]     count the tokens of FILE (or standard input)
  sentences [FILE]           one sentence per line: start, stop, text
  hash [FILE]                SHA-256 of FILE (or standard input), as hex
  json [FILE]                check JSON and print it in canonical form
  version                    the version of rag and of Lua
  help [COMMAND]             the manual, or one command's options

FILE "-" is standard input. Options: -h, --help (also after a command).
Exit status: 0 ok, 1 a failure (missing file, invalid input), 2 usage.
]]

-- The manual: `rag help`; one section per command with `rag help CMD`.
local MANUAL = {
  index = [[
rag index PATH... --into DIR [options]

  Loads every file under each PATH (a folder is walked; hidden files and
  folders and binary files are skipped) and makes DIR hold exactly those
  documents: new files are added, changed ones updated, unchanged ones
  skipped by their content hash, and documents whose files are gone
  removed. A file that fails to load (unreadable, invalid UTF-8, a broken
  PDF) is named on standard error with the reason and keeps its previous
  version in the index; the run goes on and exits 0. A BEIR folder
  (corpus.jsonl beside qrels/) is indexed as its corpus, with the BEIR ids
  as document ids. A document's id is its file's path as given
  (docs/a.md), with #n for files that hold several documents (CSV, JSON
  lines). On a terminal a progress bar shows on standard error; the
  summary line goes to standard output.

  --into DIR          the index folder (created when missing), or a
                      PostgreSQL table: postgres://USER:PASSWORD@HOST:PORT/
                      DB?table=NAME (docs/cli.md)
  --chunk-size N      tokens per chunk (cl100k_base), default 512
  --overlap N         tokens shared by neighbouring chunks, default 64
  --embedder E        hashing (default, offline), hashing:DIM,
                      model2vec:PATH, openai[:MODEL], ollama[:MODEL], none
  --include GLOB      only files matching GLOB (relative paths; *, **, ?,
                      [abc]); may be repeated
  --exclude GLOB      skip files matching GLOB; may be repeated
  --graph             also build the entity graph (rag.graph, offline
                      extractor) for `rag ask --pipeline graph`; once an
                      index has one, every run keeps it in step
  --enrich STEPS      keep with each chunk what it is searched by besides
                      its words (docs/index.md, Enrichment): a comma list
                      of keywords, summary, questions, title (for documents
                      without one) and doc_summary (a summary level, for
                      `rag ask --pipeline summary`). With --llm openai or
                      ollama an LLM writes them; else the offline defaults
                      (keywords by BM25 weight, lead sentences); questions
                      need an LLM. step:offline or step:llm picks one.
                      "none" turns enrichment off.
  --llm LLM, --model M   the LLM that writes the enrichment
  --max-llm-calls N   stop after N LLM calls; what was done and paid for is
                      saved, and the next run goes on from there

  Changing the embedder, the chunk settings or the enrichment indexes
  everything again (what an LLM wrote is kept and not asked again). The
  progress bar counts LLM calls and tokens.
]],
  search = [[
rag search DIR QUERY [options]

  Prints the best passages: rank, source, score, byte span, title and a
  snippet with the query's words marked (bold on a terminal, **word** in
  a pipe).

  --k N               hits, default 10
  --mode MODE         bm25, vector or hybrid (default: the index's, which
                      is bm25 with the offline hashing embedder)
  --filter K=V        only documents whose metadata K is V (numbers and
                      true/false as such); K>=N and K<=N for ranges;
                      repeated filters must all hold, a repeated key is
                      "any of"; doc_id=ID limits to one document
  --json              one JSON object per hit and line: rank, id, doc_id,
                      score, source, title, start, stop, text, snippet,
                      highlights (spans in the snippet), meta
]],
  ask = [[
rag ask DIR QUESTION [options]

  Answers from the index with [n] markers, then lists the sources they
  cite. Offline by default: the extractive LLM quotes the best sentences.
  The time taken and the LLM calls made go to standard error.

  --pipeline NAME     naive (default), hybrid, fusion, hyde, stepback,
                      window, multihop, adaptive, corrective, graph
                      (an entity graph, built on first use when the index
                      has none), agent (the LLM calls search and read),
                      summary (documents by their summaries first; an
                      index built with --enrich doc_summary)
  --llm LLM           extractive (default), openai, ollama
  --model M           the model for openai or ollama
  --k N               passages to answer from, default 5
  --mode MODE         the search mode (bm25, vector, hybrid)
  --stream            print the answer as it is generated
  --trace FILE        write every step of the run as JSON lines to FILE
]],
  eval = [[
rag eval DIR (--beir FOLDER | --qa FILE) [options]

  Scores the index in DIR and prints a table, one row per setting.
  --beir FOLDER: document-level nDCG@10, Recall@100, MRR, MAP and P@10 of
  each search mode over the BEIR folder's test queries (FOLDER's qrels;
  the index should hold its corpus: rag index FOLDER --into DIR), with
  recall@k curves and paired significance tests of the first setting
  against the others. --qa FILE: JSON lines of { "question", "ground_truth"
  }, answered with the pipeline and scored with RAGAS-style metrics by a
  judge LLM; without one (offline) those metrics are reported as
  unavailable. The first setting's scores are diagnosed.

  --sweep KEY=V1,V2   evaluate every combination of the values: chunk.size,
                      chunk.overlap (the index rebuilt from its documents),
                      k, mode, pipeline; may be repeated
  --mode MODE         only this search mode (--beir)
  --pipeline, --llm, --model, --k   as for ask (--qa)
  --judge LLM         openai or ollama: the judge (default: --llm unless it
                      is extractive)
  --json FILE         the results as JSON
  --html FILE         one self-contained HTML report with plots
]],
  serve = [[
rag serve DIR [options]

  Serves the index in DIR over HTTP with nginx and ngx_lua (Debian's
  nginx-light and libnginx-mod-http-lua, or OpenResty when `openresty` is
  on PATH): GET / (a search page), POST /search, POST /ask (JSON, or
  Server-Sent Events with Accept: text/event-stream), GET /health, GET
  /metrics (Prometheus) and POST /admin/reload. nginx runs in the
  foreground from a private temporary folder (its configuration, removed
  when it stops); Ctrl-C, SIGINT, SIGTERM or SIGHUP stops it. It prints
  one line when it listens; nginx's errors go to standard error. Each
  worker maps the index's files (one copy in memory) and switches to a
  new generation within 0.5 s of `rag index` writing it, between
  requests. The LLM for /ask comes from the same settings as for ask.
  DIR may be a postgres:// URL (as rag index --into): each worker opens
  it at its first request and /admin/reload reopens it. docs/serving.md
  has the endpoints and how to mount the handlers in your own nginx.

  --port P            the TCP port, default 8080
  --host H            the address to listen on, default 127.0.0.1
  --workers N         nginx worker processes, default: the cores
  --token T           require "Authorization: Bearer T" for /ask and
                      /admin/reload (which refuses without a token)
  --rate N            requests per second per client address for /search
                      and /ask (a token bucket holding N), default 50;
                      0 turns the limit off
  --timeout S         seconds an /ask may take (its LLM calls included),
                      default 60; then 504
  --pipeline NAME     the pipeline of /ask requests that name none,
                      default hybrid
  --llm, --model, --k, --mode   as for ask
]],
  info = [[
rag info DIR

  Documents, chunks, sizes, chunker, embedder, vector index, search mode
  and generation of the index in DIR.
]],
  chunk = [[
rag chunk [FILE] [options]

  Prints each chunk of FILE (or standard input): number, first and last
  byte, tokens, and its start; the totals go to standard error.

  --chunker NAME      recursive (default), fixed, sentences, markdown,
                      window, hierarchy
  --chunk-size N      the chunk size in tokens, default 512
  --overlap N         overlap in tokens (recursive, fixed), default 64
  -e, --encoding ENC  cl100k_base (default), o200k_base, approx
]],
}

local MANUAL_TAIL = [[
CONFIGURATION
  Each setting comes from its flag, else its environment variable, else
  the index folder's rag.json (which `rag index` writes with the settings
  it used), else its rag.toml, else the default:

  setting      variable         default
  embedder     RAG_EMBEDDER     hashing
  chunk_size   RAG_CHUNK_SIZE   512
  overlap      RAG_OVERLAP      64
  llm          RAG_LLM          extractive
  model        RAG_MODEL
  pipeline     RAG_PIPELINE     naive
  k            RAG_K            5 (ask), 10 (search)
  mode         RAG_MODE         the index's
  include, exclude (lists, in the files only)

  rag.toml holds `key = value` lines ("strings", integers, true/false,
  ["lists"]). The providers read OPENAI_API_KEY, OPENAI_BASE_URL and
  OLLAMA_HOST as their own tools do. RAG_TTY=0 or 1 forces the progress
  bar and the highlighting off or on.

EXIT STATUS
  0 success; 1 the world failed (a missing file, I/O, HTTP, a damaged
  index); 2 usage (unknown command or option, bad value, bad
  configuration). Errors are one line on standard error.

EXAMPLES
  rag index docs README.md --into kb
  rag search kb "how are ties broken" --k 5
  rag ask kb "What does rag index do with deleted files?"
  rag serve kb --port 8080 --token secret
  OPENAI_API_KEY=... rag ask kb "..." --llm openai --model gpt-4o-mini --stream
]]

-- Prints the manual (`rag help`), or the section of one command.
function show_help(name)
  if name then
    local cmd = COMMANDS[name]
    if not cmd then
      stop(2, "unknown command '" .. name .. "' (try 'rag help')")
    end
    io.stdout:write(MANUAL[name] or ("usage: " .. cmd.synopsis .. "\n"))
    return
  end
  io.stdout:write("RAG(1)\n\nNAME\n  rag - index documents, search them and answer questions from"
    .. " them\n\nSYNOPSIS\n  rag <command> [args]\n\n")
  for _, n in ipairs({ "index", "search", "ask", "eval", "serve", "info", "chunk" }) do
    io.stdout:write((MANUAL[n]:gsub("[^\n]+", "  %0")), "\n") -- blank lines stay empty
  end
  io.stdout:write("  rag tokens, sentences, hash, json, version: see 'rag --help'.\n\n",
    MANUAL_TAIL)
end

-- {====== Arguments ======}

-- Splits args[from..] into options and positional arguments by the
-- command's table; a usage error stops with status 2.
local function parse(cmd, args, from)
  local function usage(msg)
    stop(2, msg .. " (usage: " .. cmd.synopsis .. ")")
  end
  local opts, pos, i = {}, {}, from
  local known = cmd.options or {}
  while i <= #args do
    local a = args[i]
    if a == "--" then
      for j = i + 1, #args do
        pos[#pos + 1] = args[j]
      end
      break
    elseif a == "-h" or a == "--help" then
      opts.help = true
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      local name, value = a:match("^%-%-([^=]+)=(.*)$")
      name = name or a:match("^%-%-(.+)$") or a:match("^%-(.)$")
      local spec = name and known[name]
      if not spec then
        usage("unknown option '" .. a .. "'")
      end
      local key = type(spec) == "table" and spec[1] or spec
      if type(spec) == "table" and spec.flag then
        if value ~= nil then
          usage("option '--" .. name .. "' takes no value")
        end
        opts[key] = true
      else
        if value == nil then
          i = i + 1
          value = args[i]
          if value == nil then
            usage("option '" .. a .. "' needs a value")
          end
        end
        if type(spec) == "table" and spec.many then
          opts[key] = opts[key] or {}
          opts[key][#opts[key] + 1] = value
        else
          opts[key] = value
        end
      end
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  if opts.help then
    return opts, pos
  end
  if #pos > (cmd.nargs or 0) then
    usage("unexpected argument '" .. pos[(cmd.nargs or 0) + 1] .. "'")
  end
  if #pos < (cmd.min or 0) then
    usage("missing argument")
  end
  local bad = cmd.check and cmd.check(opts)
  if bad then
    usage(bad)
  end
  return opts, pos
end

-- Runs args; a Stop raised inside a command is stamped with its name.
local function run(args)
  local name = args[1]
  if name == nil then
    stop(2, "no command (try 'rag --help')")
  elseif name == "-h" or name == "--help" then
    io.stdout:write(USAGE)
    return
  elseif name:sub(1, 1) == "-" then
    stop(2, "unknown option '" .. name .. "' (try 'rag --help')")
  end
  local cmd = COMMANDS[name]
  if not cmd then
    stop(2, "unknown command '" .. name .. "' (try 'rag --help')")
  end
  local ok, e = pcall(function()
    local opts, pos = parse(cmd, args, 2)
    if opts.help then
      print("usage: " .. cmd.synopsis)
    elseif name == "help" and pos[1] == nil then
      io.stdout:write(USAGE, "\n")
      show_help()
    else
      cmd.run(opts, pos)
    end
  end)
  if not ok then
    if getmetatable(e) == Stop then
      e.cmd = name
    end
    error(e, 0)
  end
end

--- The settings `rag ask` answers with, for the index in `dir`: flags
-- (`flags`, keyed as the settings: `llm`, `model`, `embedder`, `pipeline`,
-- `k`, `mode`) over the RAG_* environment variables over dir's rag.json and
-- rag.toml. `rag.serve` uses it, so a server answers as `rag ask` does.
-- @tparam string dir the index folder
-- @tparam[opt] table flags
-- @treturn table `{ llm =, embedder =, pipeline =, k =, mode =, model = }`:
--   the LLM object, the embedder (false for none), the others as set
-- @raise on a bad setting (an unknown LLM, embedder or pipeline, a bad value)
function M.ask_setup(dir, flags)
  if type(dir) ~= "string" then
    error("rag.cli.ask_setup: dir must be a string, got " .. type(dir), 2)
  end
  local ok, cfg, llm = pcall(ask_setup, flags or {}, dir)
  if not ok then
    if getmetatable(cfg) == Stop then
      error("rag.cli.ask_setup: " .. cfg.msg, 2)
    end
    error(cfg, 0)
  end
  local eok, embedder = pcall(make_embedder, cfg.embedder)
  if not eok then
    error("rag.cli.ask_setup: " .. (getmetatable(embedder) == Stop and embedder.msg
      or tostring(embedder)), 2)
  end
  return { llm = llm, embedder = embedder, pipeline = cfg.pipeline, k = cfg.k, mode = cfg.mode,
    model = cfg.model }
end

--- Runs the command line `args` (as the global `arg`: `args[1]` is the
-- command) and returns the exit status: 0 ok, 1 the world failed, 2 usage.
-- Output goes to standard output; an error is one line on standard error.
-- @tparam table args the arguments
-- @treturn integer the exit status
-- @raise when `args` is not a table, or on a bug (not a usage error or a
--   failure of the world)
function M.main(args)
  if type(args) ~= "table" then
    error("rag.cli.main: args must be a table, got " .. type(args), 2)
  end
  local list = {}
  for i = 1, #args do
    list[i] = tostring(args[i])
  end
  local ok, e = pcall(run, list)
  if ok then
    return 0
  end
  if getmetatable(e) ~= Stop then
    error(type(e) == "string" and mask_text(e, url_secrets(list)) or e, 0)
  end
  -- a URL's password is never shown, whoever wrote the message
  io.stderr:write("rag", e.cmd and " " .. e.cmd or "", ": ", mask_text(e.msg, url_secrets(list)),
    "\n")
  return e.status
end

-- {====== For programs that embed rag ======}

-- Runs fn(...) for a caller other than main: a usage error raises, naming
-- fname; a failure of the world returns nil, msg, code.
local function embedded(fname, fn, ...)
  local ok, a, b, c = pcall(fn, ...)
  if ok then
    return a, b, c
  end
  if getmetatable(a) ~= Stop then
    error(a, 0)
  end
  if a.status == 2 then
    error(fname .. ": " .. a.msg, 3)
  end
  return nil, fname .. ": " .. a.msg, a.code or "io"
end

local function check_dir(fname, dir, optional)
  if not (type(dir) == "string" or (optional and dir == nil)) then
    error(fname .. ": dir must be a string, got " .. type(dir), 3)
  end
end

--- The first half of `rag index PATH... --into into`, for a program that
-- runs the indexing itself (a game loop that adds a little per frame with
-- `idx:add_many(docs, { budget_ms = })`): a new, empty index with the
-- settings `rag index` would use (the environment, into's rag.toml and
-- rag.json, the defaults; no flags) and the documents it would load from
-- the paths, with the same ids and sources.
-- @tparam table paths files and folders, as given to `rag index`
-- @tparam[opt] string into the index folder whose settings apply
-- @return idx, docs (a list), failed (`{ {path=, msg=}, ... }`, the files
--   that failed to load) | nil, msg, code (a path that does not exist)
-- @raise when paths is not a list of strings, or on a bad setting
function M.prepare(paths, into)
  local fname = "rag.cli.prepare"
  if type(paths) ~= "table" or #paths == 0 then
    error(fname .. ": paths must be a non-empty list of strings", 2)
  end
  for _, p in ipairs(paths) do
    if type(p) ~= "string" then
      error(fname .. ": paths must be a non-empty list of strings", 2)
    end
  end
  check_dir(fname, into, true)
  return embedded(fname, function()
    check_paths(paths)
    local cfg = index_settings({}, into)
    local idx = rag.index.new(index_options(cfg, make_embedder(cfg.embedder)))
    local quiet = { update = function() end, done = function() end }
    local it, reports = load_paths(paths, cfg, quiet)
    local docs = {}
    for doc in it do
      docs[#docs + 1] = doc
    end
    return idx, docs, failed_files(reports)
  end)
end

--- The second half of `rag index ... --into dir`: saves idx into dir (a new
-- generation) and records the settings there, so that `rag ask dir` and
-- `rag search dir` open it as they open an index the command made.
-- @param idx an index from `rag.cli.prepare(paths, dir)`
-- @tparam string dir
-- @return true | nil, msg, code
function M.save(idx, dir)
  check_dir("rag.cli.save", dir)
  return embedded("rag.cli.save", function()
    save_index(idx, dir, index_settings({}, dir))
    return true
  end)
end

--- What `rag ask dir question` does, on an index the program holds:
-- answers with the pipeline, LLM and settings the command would use (the
-- environment, dir's rag.toml and rag.json, the defaults; no flags) and
-- prints the answer and its numbered sources to standard output as the
-- command prints them; the time and LLM calls to standard error.
-- @param idx an index (`rag.cli.prepare`, `rag.index.open`)
-- @tparam string question
-- @tparam[opt] string dir the index folder whose settings apply
-- @return true | nil, msg, code (the pipeline's failure)
-- @raise when question is not a string, or on a bad setting
function M.ask(idx, question, dir)
  if type(question) ~= "string" then
    error("rag.cli.ask: question must be a string, got " .. type(question), 2)
  end
  check_dir("rag.cli.ask", dir, true)
  return embedded("rag.cli.ask", function()
    local cfg, llm = ask_setup({}, dir)
    answer(idx, llm, question, cfg, {})
    return true
  end)
end

return M
