-- bench/vec_map.lua [N [DIM]]: the private memory a process adds by loading a
-- saved rag.vec, copied (rag.vec.load(path)) or mapped (rag.vec.load(path,
-- { map = true })). Data: N (default 5,490, SciFact's chunk count) seeded
-- random unit vectors of DIM (default 512) float32 components, saved once;
-- each load then runs in a fresh process, which reports RssAnon and RssFile
-- of /proc/self/status (kB) before the load, after it, and after 20
-- searches (k = 10). Anonymous memory is what a process holds alone; a
-- mapped file's pages are counted in RssFile and shared by every process
-- that maps the same file. Counts, not times: safe on a busy machine.
--   make bench-vec-map
local rag = require("rag")

local function status()
  local t = {}
  for line in io.lines("/proc/self/status") do
    local k, kb = line:match("^(Rss%a+):%s+(%d+)")
    if k then
      t[k] = tonumber(kb)
    end
  end
  return t
end

local function gauss_source(seed)
  local x = seed
  local function unif()
    x = (16807 * x) % 2147483647
    return x / 2147483647
  end
  return function()
    return math.sqrt(-2 * math.log(unif())) * math.cos(2 * math.pi * unif())
  end
end

local function unit(gauss, dim)
  local v, ss = {}, 0
  for d = 1, dim do
    v[d] = gauss()
    ss = ss + v[d] * v[d]
  end
  for d = 1, dim do
    v[d] = v[d] / math.sqrt(ss)
  end
  return rag.vec.pack(v)
end

if arg[1] == "--child" then -- one load in this fresh process
  local mode, path, dim = arg[2], arg[3], tonumber(arg[4])
  local gauss = gauss_source(7)
  local qs = {}
  for i = 1, 20 do
    qs[i] = unit(gauss, dim)
  end
  collectgarbage()
  collectgarbage()
  local s0 = status()
  local v = assert(rag.vec.load(path, mode == "map" and { map = true } or nil))
  local s1 = status()
  for _, q in ipairs(qs) do
    assert(#v:search(q, 10) == 10)
  end
  collectgarbage()
  local s2 = status()
  local st = v:stats()
  print(string.format("%s %d %d %d %d %d %d %d %d", mode, s0.RssAnon, s1.RssAnon, s2.RssAnon,
    s0.RssFile, s1.RssFile, s2.RssFile, st.memory, st.mapped))
  os.exit(0)
end

local n, dim = tonumber(arg[1]) or 5490, tonumber(arg[2]) or 512
local path = os.tmpname()
do
  local gauss = gauss_source(42)
  local v = rag.vec.new({ dim = dim })
  for i = 1, n do
    v:add("doc" .. i .. "#1", unit(gauss, dim))
  end
  assert(v:save(path))
  v:close()
end
local size = io.open(path, "rb"):seek("end")
local lua = arg[-1] or "lua5.4"
print(string.format("rag.vec.load of %d x %d f32 rows (file %.1f MB), in a fresh process each;"
  .. " kB from /proc/self/status", n, dim, size / 1e6))
print(string.format("%-6s %14s %14s %14s %14s %14s", "load", "anon by load", "anon +search",
  "file by load", "stats.memory", "stats.mapped"))
for _, mode in ipairs({ "copy", "map" }) do
  local p = assert(io.popen(string.format("%s bench/vec_map.lua --child %s %s %d", lua, mode,
    path, dim)))
  local line = p:read("*l")
  p:close()
  local f = {}
  for w in line:gmatch("%S+") do
    f[#f + 1] = w
  end
  local a0, a1, a2, f0, f1 = tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5]),
    tonumber(f[6])
  print(string.format("%-6s %14d %14d %14d %14d %14d", mode, a1 - a0, a2 - a0, f1 - f0,
    math.floor(tonumber(f[8]) / 1024), math.floor(tonumber(f[9]) / 1024)))
end
os.remove(path)
