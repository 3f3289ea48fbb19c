-- Out-of-memory sweep, SQLite style, over both allocators: the Lua state's
-- in persistent mode (every allocation that grows memory fails from the
-- nth on) and the core's rag_malloc in transient mode (only the nth
-- fails), for n = 1, 2, ... until the operation completes; over the
-- operations users rely on most:
-- building, saving and loading each index, rag.index add / update / remove
-- / save / open, JSON decode, tokenizer load, packing and a pipeline run.
-- A failure must raise "not enough memory" (or the operation recovers by
-- itself), leave the objects as they were and usable; make asan's
-- LeakSanitizer finds what a failure leaked (a malloc'd buffer held across
-- a raising Lua call, say), and a count of this process's open files
-- what a failure left open. More core-allocator walks are in oom_spec.lua
-- and beside each object's spec. RAG_OOM_REPORT=1 prints each operation's
-- number of fault points. Needs a RAG_TESTING build of Lua 5.4.
local rag = require("rag")
local helpers = require("spec.helpers")

local lua_oom = rag.core._lua_oom
local REPORT = os.getenv("RAG_OOM_REPORT") == "1"

local DOCS = {
  { id = "tides", text = "The moon pulls the sea. Spring tides come when sun and moon align." },
  { id = "bees", text = "Bees dance to tell the hive where flowers are. The waggle dance." },
  { id = "iron", text = "Iron rusts in wet air. Rust is iron oxide, red and flaky." },
  { id = "glass", text = "Glass is an amorphous solid. Sand melts into glass at high heat." },
  { id = "salt", text = "Sea salt is left when sea water dries in the sun." },
}

local function vec_of(text)
  return rag.embed.hashing({ dim = 16 }):embed({ text })[1]
end

-- this process's open files (not the shell's that counts them)
local PID = helpers.read("/proc/self/stat"):match("^(%d+)")

local function open_fds()
  local p = io.popen("ls /proc/" .. PID .. "/fd | wc -l")
  local n = tonumber(p:read("*a"))
  p:close()
  return n
end

-- walks op over both allocators and checks the number of fault points
local function walk(name, setup, op, check, min_points)
  collectgarbage()
  local fds_before = open_fds()
  local lua_points = helpers.oom_sweep("lua", setup, op, check)
  local core_points = helpers.oom_sweep("core", setup, op, check)
  if REPORT then
    io.stderr:write(("oom sweep: %-30s %6d Lua + %6d core fault points\n")
      :format(name, lua_points, core_points))
  end
  local points = lua_points + core_points
  assert.is_true(points >= (min_points or 1), name .. ": fault points " .. points)
  -- no file descriptor leaked by a failure (a Lua file handle a failure
  -- dropped is closed by the collector: that is no leak)
  collectgarbage()
  collectgarbage()
  assert.equal(fds_before, open_fds(), name .. ": open files")
end

describe("out-of-memory sweep", function()
  if not lua_oom or not rag.core._fail_alloc then
    it("needs a RAG_TESTING build of Lua 5.4", function()
      pending("run make asan")
    end)
    return
  end

  local dir = helpers.tmpname()
  os.execute("mkdir -p '" .. dir .. "'")
  teardown(function()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("fails from the nth growth on and stops at once", function()
    local fired, ok, err = lua_oom(1, function() return {} end)
    assert.same({ false, "not enough memory" }, { ok, err })
    assert.is_true(fired >= 1) -- Lua retries after an emergency collection
    fired, ok, err = lua_oom(0, function() return ("x"):rep(100) end)
    assert.same({ 0, true, ("x"):rep(100) }, { fired, ok, err })
    assert.equal(1000, #("y"):rep(1000))
  end)

  -- the three indexes of the core: add, save, load
  local kinds = {
    bm25 = {
      new = function() return rag.bm25.new() end,
      put = function(x, d) x:add(d.id, d.text) end,
      probe = function(x) return x:search("sea sun", 5) end,
      load = rag.bm25.load,
    },
    vec = {
      new = function() return rag.vec.new({ dim = 16 }) end,
      put = function(x, d) x:add(d.id, vec_of(d.text)) end,
      probe = function(x) return x:search(vec_of("sea sun"), 5) end,
      load = rag.vec.load,
    },
    hnsw = {
      new = function() return rag.hnsw.new({ dim = 16, M = 4, ef_construction = 16 }) end,
      put = function(x, d) x:add(d.id, vec_of(d.text)) end,
      probe = function(x) return x:search(vec_of("sea sun"), 5) end,
      load = rag.hnsw.load,
    },
  }
  for _, name in ipairs({ "bm25", "vec", "hnsw" }) do
    local k = kinds[name]
    it(name .. ": add, save and load", function()
      local function base()
        local x = k.new()
        for i = 1, 4 do
          k.put(x, DOCS[i])
        end
        return { x = x, hits = k.probe(x) }
      end
      walk(name .. " add", base, function(s)
        k.put(s.x, DOCS[5])
      end, function(s, ok)
        assert.equal(ok and 5 or 4, #s.x)
        if not ok then
          assert.same(s.hits, k.probe(s.x))
          k.put(s.x, DOCS[5]) -- usable
        end
        s.x:close()
      end)
      local path = dir .. "/" .. name .. ".rag"
      local old = base()
      assert(old.x:save(path))
      walk(name .. " save", function()
        local s = base()
        k.put(s.x, DOCS[5])
        return s
      end, function(s)
        assert(s.x:save(path))
      end, function(s, ok)
        local back = assert(k.load(path))
        if ok then
          assert.equal(5, #back)
        else
          assert.is_true(#back == 4 or #back == 5) -- the old file or the new one
        end
        back:close()
        s.x:close()
      end)
      walk(name .. " load", nil, function()
        assert(k.load(path)):close()
      end)
    end)
  end

  describe("rag.index", function()
    local function new_index()
      local idx = rag.index.new({ embedder = rag.embed.hashing({ dim = 16 }),
        chunk = { size = 16, overlap = 0 } })
      for i = 1, 4 do
        idx:add(DOCS[i])
      end
      return idx
    end
    local function snapshot(idx)
      local hits = idx:search("sea sun iron", { k = 5 })
      local t = { count = idx:count() }
      for i, h in ipairs(hits) do
        t[i] = h.id .. " " .. h.score .. " " .. h.text
      end
      for i = 1, 5 do
        local d = idx:get(DOCS[i].id)
        t[DOCS[i].id] = d and d.text or false
      end
      return t
    end
    local function state()
      local idx = new_index()
      return { idx = idx, before = snapshot(idx) }
    end
    local changed = { id = "iron",
      text = "Iron rusts in wet air, and so does steel. Steel is iron." }

    -- each op on a fresh index: raise and change nothing, or do it
    -- (an op only calls: an assertion inside it would allocate, and fail,
    -- after the call succeeded)
    local ops = {
      { "add", function(s) return s.idx:add(DOCS[5]) end, "added", 10 },
      { "update", function(s) return s.idx:add(changed) end, "updated", 10 },
      { "remove", function(s) return s.idx:remove("bees") end, true, 0 }, -- all in C
    }
    for _, o in ipairs(ops) do
      it(o[1] .. " changes nothing when it fails and stays usable", function()
        walk("rag.index " .. o[1], state, o[2], function(s, ok, result)
          assert.is_true(s.idx.c:check())
          if not ok then
            assert.same(s.before, snapshot(s.idx))
            result = o[2](s) -- usable: the same op now succeeds
          end
          assert.equal(o[3], result)
          assert.is_true(s.idx.c:check())
          s.idx:close()
        end, o[4])
      end)
    end

    it("save leaves a complete generation and open reads it", function()
      local path = dir .. "/index"
      local old = new_index()
      local want_old = snapshot(old)
      local want_new
      walk("rag.index save", function()
        -- each round starts from a directory with the old generation only
        os.execute("rm -rf '" .. path .. "'")
        assert(old:save(path))
        local idx = new_index()
        idx:add(DOCS[5])
        want_new = want_new or snapshot(idx)
        return { idx = idx }
      end, function(s)
        assert(s.idx:save(path))
      end, function(s, ok)
        local back = assert(rag.index.open(path))
        local got = snapshot(back)
        if ok then
          assert.same(want_new, got)
        else
          assert.is_true(pcall(assert.same, want_old, got) or pcall(assert.same, want_new, got))
        end
        back:close()
        s.idx:close()
      end, 10)
      old:close()
      for _, ro in ipairs({ false, true }) do
        walk("rag.index open" .. (ro and " (read-only)" or ""), nil, function()
          assert(rag.index.open(path, { readonly = ro })):close()
        end, nil, 10)
      end
      local back = assert(rag.index.open(path))
      assert.same(want_new, snapshot(back))
      back:close()
    end)
  end)

  it("json decode", function()
    local value = { list = {}, text = ("ü"):rep(50), nested = { a = { b = { true, false } } } }
    for i = 1, 100 do
      value.list[i] = { id = "d" .. i, score = i / 7 }
    end
    local s = rag.json.encode(value)
    walk("json decode", nil, function()
      return rag.json.decode(s)
    end, function(_, ok)
      if not ok then
        assert.same(value, rag.json.decode(s))
      end
    end, 50)
  end)

  it("tokenizer load", function()
    local lines = {}
    for b = 0, 255 do
      lines[#lines + 1] = helpers.base64(string.char(b)) .. " " .. b
    end
    for i, m in ipairs({ "th", "he", "the", " t", " the", "in", "ing" }) do
      lines[#lines + 1] = helpers.base64(m) .. " " .. (255 + i)
    end
    local path = dir .. "/tiny.tiktoken"
    helpers.write(path, table.concat(lines, "\n") .. "\n")
    local want = assert(rag.tokenizer.load(path, "cl100k_base")):encode("the thing")
    walk("tokenizer load", nil, function()
      local tok = assert(rag.tokenizer.load(path, "cl100k_base"))
      local ids = tok:encode("the thing")
      tok:close()
      return ids
    end, function(_, ok)
      if ok then
        return
      end
      local tok = assert(rag.tokenizer.load(path, "cl100k_base"))
      assert.same(want, tok:encode("the thing"))
      tok:close()
    end)
  end)

  it("packing", function()
    local items = {}
    for i, d in ipairs(DOCS) do
      items[i] = { id = d.id, text = d.text, score = 1 / i, source = d.id .. ".txt" }
    end
    local opts = { budget = 60, tokenizer = rag.tokenizer.get("cl100k_base") }
    local want = rag.pack(items, opts)
    walk("pack", nil, function()
      return rag.pack(items, opts)
    end, function(_, ok)
      if not ok then
        assert.same(want, rag.pack(items, opts))
      end
    end, 20)
  end)

  it("a pipeline run", function()
    local idx = rag.index.new({ embedder = false })
    for _, d in ipairs(DOCS) do
      idx:add(d)
    end
    local p = rag.pipeline.naive({ index = idx, llm = rag.llm.extractive({}), k = 3 })
    local want = assert(p:answer("When do spring tides come?"))
    walk("pipeline naive answer", nil, function()
      return assert(p:answer("When do spring tides come?"))
    end, function(_, ok)
      if not ok then
        local again = assert(p:answer("When do spring tides come?"))
        assert.equal(want.text, again.text)
        assert.same(want.citations, again.citations)
      end
    end, 50)
    idx:close()
  end)
end)
