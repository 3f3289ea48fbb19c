-- docs/api.md against the code, by the rules in its section "How this
-- reference is checked": every public function and userdata method is
-- documented, every documented name exists. Failures list the exact names.
-- Also: README's first example runs offline and prints what README shows.
local rag = require("rag")
local helpers = require("spec.helpers")

local API = "docs/api.md"

-- {====== The code's public names ======}

-- The rockspec's module names (build.modules keys), sorted.
local function rockspec_modules()
  local env = {}
  local chunk = assert((loadstring or load)(helpers.read("rockspec/rag-scm-1.rockspec"),
    "=rockspec", "t", env))
  if setfenv then
    setfenv(chunk, env)
  end
  chunk()
  local out = {}
  for name in pairs(env.build.modules) do
    out[#out + 1] = name
  end
  table.sort(out)
  return out
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do
    if type(k) == "string" then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys)
  return keys
end

-- { [path] = function } for every function reachable from `value` by
-- field names that do not start with "_"; tables are walked once.
local function walk(value, path, out, seen)
  if type(value) == "function" then
    out[path] = value
  elseif type(value) == "table" and not seen[value] then
    seen[value] = true
    for _, k in ipairs(sorted_keys(value)) do
      if k:sub(1, 1) ~= "_" and k:match("^[%a_][%w_]*$") then
        walk(value[k], path .. "." .. k, out, seen)
      end
    end
  end
  return out
end

-- Creates one object of each cheap class, so that every metatable exists
-- even if a binding registers its class lazily.
local function make_objects()
  local keep = {}
  for _, make in ipairs({
    function() return rag.bm25.new() end,
    function() return rag.vec.new({ dim = 2 }) end,
    function() return rag.hnsw.new({ dim = 2 }) end,
    function() return rag.text.analyzer() end,
    function() return rag.tokenizer.approx() end,
    function() return rag.tokenizer.get("cl100k_base") end,
    function() return rag.embed.hashing() end,
  }) do
    local ok, obj = pcall(make)
    keep[#keep + 1] = ok and obj or nil
  end
  return keep
end

-- { [class] = { methods = { [name] = true }, len = bool } } for the
-- registry's metatables named "rag.*" that carry methods.
local function classes()
  local out = {}
  for name, mt in pairs(debug.getregistry()) do
    if type(name) == "string" and name:match("^rag%.") and not name:find("%._")
        and type(mt) == "table" then
      local index = rawget(mt, "__index")
      if type(index) == "table" then
        local methods = {}
        for k, v in pairs(index) do
          if type(k) == "string" and type(v) == "function" and k:sub(1, 1) ~= "_" then
            methods[k] = true
          end
        end
        out[name] = { methods = methods, len = rawget(mt, "__len") ~= nil }
      end
    end
  end
  return out
end

-- {====== The document ======}

-- The lines outside ``` fences, each { text=, n=, section=, heading= }.
local function doc_lines(text)
  local out, fenced, section = {}, false, nil
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if line:match("^%s*```") then
      fenced = not fenced
    elseif not fenced then
      local hashes, title = line:match("^(#+)%s+(.*)$")
      if hashes and #hashes == 2 then
        section = title:gsub("`", ""):match("^(%S+)")
      end
      out[#out + 1] = { text = line, n = n, section = section, heading = hashes ~= nil,
        level = hashes and #hashes }
    end
  end
  return out
end

local function spans(s)
  local out = {}
  for span in s:gmatch("`([^`]+)`") do
    out[#out + 1] = span
  end
  return out
end

-- A `rag.x.y` name at the start of a span, unless the span is a message
-- ("rag.bm25.load: 'x': bad magic": a colon follows the name).
local function api_name(span)
  local name, rest = span:match("^(rag%.[%w_%.]*[%w_])(.*)$")
  if not name or rest:match("^:") or rest:match("^%.") then
    return nil
  end
  return name
end

-- The section "How this reference is checked": the objects table
-- { [class] = { var=, section= } } and the pending names { [name] = true }.
local function rules(text)
  local body = text:match("\n## How this reference is checked\n(.-)\n## ")
  assert(body, API .. " has no section '## How this reference is checked'")
  local objects, pending, internal = {}, {}, {}
  for line in body:gmatch("[^\n]+") do
    local class, var, section = line:match("^| `(rag%.[%w_%.]+)` | [^|]* | `([%a_][%w_]*)` | "
      .. "`?(rag[%w_%.]*)`? |$")
    if class then
      objects[class] = { var = var, section = section }
    end
  end
  body = body .. "\n\n"
  local p = body:match("\n%*%*Pending%.%*%*(.-)\n\n") or ""
  for _, span in ipairs(spans(p)) do
    pending[span] = true
  end
  local i = body:match("\n%*%*Internal%.%*%*(.-)\n\n") or ""
  for _, span in ipairs(spans(i)) do
    internal[span] = true
  end
  return objects, pending, internal
end

-- What the document defines and mentions:
--   defined[name] = true   (a heading or a table row's first cell)
--   mentioned[name] = line (any backticked span that starts with the name)
--   methods[section][var][method] = line   (headings)
--   lens[section][var] = line              (`#var` in headings)
local function parse(text)
  local defined, mentioned, methods, lens = {}, {}, {}, {}
  for _, l in ipairs(doc_lines(text)) do
    for _, span in ipairs(spans(l.text)) do
      local name = api_name(span)
      if name then
        mentioned[name] = mentioned[name] or l.n
      end
    end
    local where
    if l.heading then
      where = l.text
      if l.level == 2 and l.section and l.section:match("^rag%.") then
        defined[l.section] = true
        mentioned[l.section] = mentioned[l.section] or l.n
      end
    elseif l.text:match("^|") then
      where = l.text:match("^|([^|]*)|")
    end
    for _, span in ipairs(spans(where or "")) do
      local name = api_name(span)
      if name then
        defined[name] = true
      end
      if l.heading and l.section then
        local len = span:match("^#([%a_][%w_]*)$")
        local var, m = span:match("^([%a_][%w_]*):([%a_][%w_]*)")
        if var then
          methods[l.section] = methods[l.section] or {}
          methods[l.section][var] = methods[l.section][var] or {}
          methods[l.section][var][m] = l.n
        elseif len then
          lens[l.section] = lens[l.section] or {}
          lens[l.section][len] = l.n
        end
      end
    end
  end
  return defined, mentioned, methods, lens
end

-- {====== The checks ======}

local function module_names(internal)
  local out = {}
  for _, name in ipairs(rockspec_modules()) do
    if name ~= "rag.core" and not internal[name] and not name:match("%._") then
      out[#out + 1] = name
    end
  end
  return out
end

-- The public functions: { [path] = fn }. The internal modules' tables (rag.core
-- among them) are not walked, wherever they are reachable.
local function public_functions(internal)
  local out, seen = {}, { [rag.core] = true }
  local hidden = {}
  for name in pairs(internal) do
    hidden[#hidden + 1] = name
  end
  for _, name in ipairs(rockspec_modules()) do
    if name:match("%._") then -- rag.providers._request: a part starts with "_"
      hidden[#hidden + 1] = name
    end
  end
  for _, name in ipairs(hidden) do
    local ok, m = pcall(require, name)
    if ok and type(m) == "table" then
      seen[m] = true
    end
  end
  for _, name in ipairs(module_names(internal)) do
    walk(require(name), name, out, seen)
  end
  return out
end

-- The value a documented name refers to: a field path from `rag`, or from
-- the longest rockspec module that prefixes it; nil when there is none.
local function resolve(name, modules)
  local best
  for _, m in ipairs(modules) do
    if (name == m or name:sub(1, #m + 1) == m .. ".") and (not best or #m > #best) then
      best = m
    end
  end
  local value, rest
  if best then
    local ok, v = pcall(require, best)
    if not ok then
      return nil
    end
    value, rest = v, name:sub(#best + 2)
  else
    value, rest = rag, name:sub(5)
  end
  for part in rest:gmatch("[^%.]+") do
    local t = type(value)
    if t ~= "table" then
      return nil
    end
    value = rawget(value, part)
    if value == nil then
      return nil
    end
  end
  return value
end

-- Sorted list as lines for a failure message.
local function report(title, list)
  table.sort(list)
  return #list == 0 and "" or title .. ":\n  " .. table.concat(list, "\n  ")
end

-- Every problem with `text` as docs/api.md, by kind: { undocumented = {...}, ... }.
local function check(text, extra_functions)
  local objects, pending, internal = rules(text)
  local defined, mentioned, methods, lens = parse(text)
  local functions = public_functions(internal)
  for path, fn in pairs(extra_functions or {}) do
    functions[path] = fn
  end
  local problems = { undocumented = {}, unknown = {}, methods = {}, unknown_methods = {},
    classes = {}, pending = {} }

  -- every public function, under one of its names
  local documented_fn = {}
  for path, fn in pairs(functions) do
    if defined[path] then
      documented_fn[fn] = true
    end
  end
  for path, fn in pairs(functions) do
    if not documented_fn[fn] and not pending[path] then
      table.insert(problems.undocumented, path)
    end
  end

  -- every mentioned name exists (a value or a class)
  local all_modules = rockspec_modules()
  local registry = classes()
  for name, line in pairs(mentioned) do
    if not name:find("%._") and resolve(name, all_modules) == nil and not registry[name] then
      table.insert(problems.unknown, name .. " (line " .. line .. ")")
    end
  end

  -- classes and their methods
  for class in pairs(registry) do
    if not objects[class] then
      table.insert(problems.classes, class .. " is not in the objects table")
    end
  end
  for class, o in pairs(objects) do
    local c = registry[class]
    if not c then
      table.insert(problems.classes, class .. " is in the objects table but not a registered class")
    else
      local documented = methods[o.section] and methods[o.section][o.var] or {}
      for m in pairs(c.methods) do
        if not documented[m] and not pending[class .. ":" .. m] then
          table.insert(problems.methods, class .. ":" .. m .. " (as `" .. o.var .. ":" .. m
            .. "` in a heading under ## " .. o.section .. ")")
        end
      end
      for m, line in pairs(documented) do
        if not c.methods[m] then
          table.insert(problems.unknown_methods, o.var .. ":" .. m .. " (line " .. line .. ", "
            .. class .. " has no method " .. m .. ")")
        end
      end
      local len = lens[o.section] and lens[o.section][o.var]
      if len and not c.len then
        table.insert(problems.unknown_methods, "#" .. o.var .. " (line " .. len .. ", " .. class
          .. " has no __len)")
      end
    end
  end

  -- the pending list only shrinks: a name there must exist and be undocumented
  for name in pairs(pending) do
    local class, m = name:match("^(rag[%w_%.]*):([%w_]+)$")
    local exists, documented
    if class then
      exists = registry[class] and registry[class].methods[m]
      local o = objects[class]
      documented = o and methods[o.section] and methods[o.section][o.var]
        and methods[o.section][o.var][m]
    else
      exists = functions[name] ~= nil
      documented = exists and documented_fn[functions[name]]
    end
    if not exists then
      table.insert(problems.pending, name .. " is pending but no longer public: remove it")
    elseif documented then
      table.insert(problems.pending, name .. " is pending but documented now: remove it")
    end
  end
  return problems, functions
end

describe("docs/api.md", function()
  local text = helpers.read(API)
  local keep = make_objects() -- luacheck: ignore keep
  local problems, functions = check(text)

  it("covers at least the public functions known today", function()
    for _, name in ipairs({ "rag.bm25.new", "rag.text.normalize", "rag.pack", "rag.errors.fail",
      "rag.cli.main", "rag.eval.beir", "rag.tokenizer.get", "rag.transport.ngx" }) do
      assert.is_function(functions[name], name)
    end
    local n = 0
    for _ in pairs(classes()) do
      n = n + 1
    end
    assert.is_true(n >= 8, "only " .. n .. " classes")
  end)

  it("documents every public function", function()
    assert.equal("", report("public functions with no heading or table row in " .. API
      .. " (document them, or prefix internal ones with _)", problems.undocumented))
  end)

  it("documents every method of every class", function()
    assert.equal("", report("methods with no heading in " .. API, problems.methods))
  end)

  it("lists every class in its objects table", function()
    assert.equal("", report("classes", problems.classes))
  end)

  it("names only what exists", function()
    assert.equal("", report("names in " .. API .. " that do not exist", problems.unknown))
    assert.equal("", report("methods in " .. API .. " that do not exist", problems.unknown_methods))
  end)

  it("keeps the pending list current", function()
    assert.equal("", report("the pending list", problems.pending))
  end)

  -- the check itself: a new function without docs, a documented name that
  -- is gone, a method without a heading are each reported by name (as
  -- differences from the check of the file as it is)
  describe("check", function()
    local function added(kind, p)
      local before, out = {}, {}
      for _, x in ipairs(problems[kind]) do
        before[x] = true
      end
      for _, x in ipairs(p[kind]) do
        if not before[x] then
          out[#out + 1] = (x:gsub(" %(line %d+", " (line N"))
        end
      end
      table.sort(out)
      return out
    end

    it("reports a public function that has no docs", function()
      local p = check(text, { ["rag.text.shout"] = function() end })
      assert.same({ "rag.text.shout" }, added("undocumented", p))
    end)

    it("reports a documented function that does not exist", function()
      local p = check(text .. "\n## rag.extra\n\n### `rag.text.whisper(s)` → string\n\nGone.\n")
      assert.same({ "rag.extra (line N)", "rag.text.whisper (line N)" }, added("unknown", p))
    end)

    it("reports a method without a heading and a heading without a method", function()
      local cut = text:gsub("\n### `idx:explain%(", "\n### `idx:explains(")
      local p = check(cut)
      assert.same({ "rag.bm25:explain (as `idx:explain` in a heading under ## rag.bm25)" },
        added("methods", p))
      local wrong = added("unknown_methods", p)
      assert.equal(1, #wrong)
      assert.truthy(wrong[1]:find("idx:explains (line N, rag.bm25 has no method explains)", 1,
        true), wrong[1])
    end)

    it("reports a class missing from the objects table", function()
      local cut = text:gsub("\n| `rag%.vec` |[^\n]*", "")
      assert.same({ "rag.vec is not in the objects table" }, added("classes", check(cut)))
    end)

    it("ignores messages and code blocks", function()
      local p = check(text .. "\n\nAn error: `rag.nothing.here: 'x': bad`.\n\n```lua\n"
        .. "-- `rag.nothing.there`\n```\n")
      assert.same({}, added("unknown", p))
    end)
  end)
end)

describe("README's Lua example", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end

  it("indexes docs/, searches, answers with citations and saves, offline", function()
    local readme = helpers.read("README.md")
    local section = assert(readme:match("\n## The same in Lua\n(.-)\n## "), "no Lua example")
    local code = assert(section:match("```lua\n(.-)```"))
    assert.equal(readme:match("```lua\n(.-)```"), code, "it is the README's first Lua code")
    -- run where docs/ is this project's and kb/ lands in a scratch folder
    local here = assert(os.getenv("PWD"))
    local dir = helpers.tmpname()
    assert(os.execute("mkdir -p '" .. dir .. "' && ln -s '" .. here .. "/docs' '" .. dir
      .. "/docs'"))
    helpers.write(dir .. "/first.lua", code)
    local cmd = helpers.lua_command():gsub("([';])lua/", "%1" .. here .. "/lua/")
      :gsub("([';])build/", "%1" .. here .. "/build/")
    -- no proxy and no key: nothing here may reach for the network
    local out, err, status = helpers.spawn("cd '" .. dir .. "' && env -u OPENAI_API_KEY "
      .. "http_proxy=http://192.0.2.1:9 " .. cmd .. " first.lua")
    local saved = helpers.exists(dir .. "/kb/manifest.json")
    os.execute("rm -rf '" .. dir .. "'")
    assert.equal("", err)
    assert.equal(0, status)
    assert.is_true(saved)
    -- three hits, the answer, then one line per citation
    local lines = {}
    for line in out:gmatch("([^\n]*)\n") do
      lines[#lines + 1] = line
    end
    for i = 1, 3 do
      assert.truthy(lines[i]:find("^docs/[%w_]+%.md\t[%d.]+$"), lines[i])
    end
    local answer = out:match("^[^\n]*\n[^\n]*\n[^\n]*\n(.-)\n%d+\tdocs/")
    assert.truthy(answer and answer:find("%[%d+%]"), out)
    for n in answer:gmatch("%[(%d+)%]") do
      assert.truthy(out:find("\n" .. n .. "\tdocs/[%w_]+%.md\t%d+\t%d+\n"),
        "[" .. n .. "]: " .. out)
    end
  end)
end)

-- Code fences in Markdown: a fence with an info string ("```lua") only
-- opens a block, so one written while a block is open means the block
-- before it lost its closing fence, and everything after renders inside out.
local function fence_problems(text)
  local out, open, n = {}, nil, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local info = line:match("^%s*```%s*(.-)%s*$")
    if info then
      if not open then
        open = n
      elseif info ~= "" then
        out[#out + 1] = "line " .. n .. ": ```" .. info .. " inside the block opened at line "
          .. open
        open = n
      else
        open = nil
      end
    end
  end
  if open then
    out[#out + 1] = "line " .. open .. ": a block never closed"
  end
  return out
end

describe("the docs' code fences", function()
  it("finds a block that lost its closing fence", function()
    assert.same({ "line 4: ```lua inside the block opened at line 1",
      "line 4: a block never closed" },
      fence_problems("```lua\nlocal p = x()\n### graph\n```lua\nprint(1)\n"))
    assert.same({}, fence_problems("```lua\nx()\n```\n\n```\nplain\n```\n"))
  end)

  it("close every block in README.md and docs/", function()
    local p = assert(io.popen("ls docs/*.md"))
    local files = { "README.md" }
    for f in p:lines() do
      files[#files + 1] = f
    end
    p:close()
    assert.is_true(#files > 5)
    local bad = {}
    for _, f in ipairs(files) do
      for _, why in ipairs(fence_problems(helpers.read(f))) do
        bad[#bad + 1] = f .. ": " .. why
      end
    end
    assert.same({}, bad)
  end)
end)

describe("the examples' headers", function()
  it("show a command that runs from a clone (with LUA_PATH and LUA_CPATH)", function()
    local p = assert(io.popen("ls examples/*.lua"))
    local bad, n = {}, 0
    for f in p:lines() do
      n = n + 1
      local head = helpers.read(f):match("^(.-)\nlocal ") or ""
      local cmd = head:gsub("\\\n%-%-%s*", " "):match("\n%-%-%s+(LUA_PATH=[^\n]*lua5%.4 "
        .. f:gsub("%p", "%%%0") .. ")")
      if not (cmd and cmd:find("LUA_CPATH='build/?.so;;'", 1, true)) then
        bad[#bad + 1] = f
      end
    end
    p:close()
    assert.is_true(n >= 12)
    assert.same({}, bad)
  end)
end)
