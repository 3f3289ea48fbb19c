-- bench/json.lua: rag.json against lua-cjson 2.1.0 (Debian's lua-cjson),
-- the usual JSON module of OpenResty.
--   make bench-json        (or: lua5.4 bench/json.lua [ROUNDS])
-- Data (seeded, built here): an embeddings reply as OpenAI sends it (64
-- vectors of 384 floats) and a chat request (20 messages of ~1 KB of
-- mixed English and CJK text). Reports the median of ROUNDS (default 15)
-- timings of 20 encodes or decodes each, in MB/s of JSON text.
local rag = require("rag")
local util = require("bench.util")
local ok_cjson, cjson = pcall(require, "cjson")

local ROUNDS = tonumber(arg and arg[1]) or 15
local REPS = 20

local seed = 42
local function rand() -- a small LCG, so the data are the same everywhere
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed / 2147483648
end

local function embeddings_reply()
  local data = {}
  for i = 1, 64 do
    local v = {}
    for j = 1, 384 do
      v[j] = (rand() - 0.5) * 0.2
    end
    data[i] = { object = "embedding", index = i - 1, embedding = v }
  end
  return { object = "list", data = data, model = "text-embedding-3-small",
    usage = { prompt_tokens = 4096, total_tokens = 4096 } }
end

local function chat_request()
  local words = { "retrieval", "augmented", "generation", "检索", "增强",
    "生成", "the", "of", "Lua", "index", "\"quoted\"", "line\nbreak" }
  local msgs = {}
  for i = 1, 20 do
    local t = {}
    for j = 1, 120 do
      t[j] = words[math.floor(rand() * #words) + 1]
    end
    msgs[i] = { role = i % 2 == 1 and "user" or "assistant", content = table.concat(t, " ") }
  end
  return { model = "gpt-4o-mini", temperature = 0.2, messages = msgs }
end

local clock = os.clock
local median = util.median

local function measure(fn)
  local times = {}
  for r = 1, ROUNDS do
    local t0 = clock()
    for _ = 1, REPS do
      fn()
    end
    times[r] = (clock() - t0) / REPS
  end
  return median(times)
end

print(("rag.json %s vs %s on %s, median of %d rounds x %d calls (CPU time)")
  :format(rag._VERSION, ok_cjson and "lua-cjson " .. (cjson._VERSION or "?")
    or "no lua-cjson (apt-get install lua-cjson)", _VERSION, ROUNDS, REPS))
print(("%-22s %-8s %10s %10s"):format("payload", "op", "rag MB/s", "cjson MB/s"))
for _, case in ipairs({ { "embeddings reply", embeddings_reply() },
    { "chat request", chat_request() } }) do
  local name, value = case[1], case[2]
  local text = rag.json.encode(value)
  local mb = #text / 1e6
  local rows = {
    { "encode", function() rag.json.encode(value) end,
      ok_cjson and function() cjson.encode(value) end },
    { "decode", function() rag.json.decode(text) end,
      ok_cjson and function() cjson.decode(text) end },
  }
  for _, row in ipairs(rows) do
    local r = mb / measure(row[2])
    local c = row[3] and mb / measure(row[3])
    print(("%-22s %-8s %10.1f %10s"):format(("%s (%.0f KB)"):format(name, #text / 1e3), row[1],
      r, c and ("%.1f"):format(c) or "-"))
  end
end
