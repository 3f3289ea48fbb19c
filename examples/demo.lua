-- examples/demo.lua: the main job, offline, as `make demo` runs it. Indexes
-- this project's own README.md and docs/ (or the folder given as the first
-- argument) with the `rag` command, then asks three questions and prints
-- each answer with its numbered sources and the time taken. Questions for
-- your own folder: the second argument, separated by "|".
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' \
--     lua5.4 examples/demo.lua [DOCS [QUESTIONS]]
local cli = require("rag.cli")

local docs, questions = arg[1], arg[2]
if docs == "" then
  docs = nil
end
local into = os.getenv("DEMO_INDEX") or "build/demo-index"
local paths = docs and { docs } or { "README.md", "docs" }
local asked = {}
if questions and questions ~= "" then
  for q in questions:gmatch("[^|]+") do
    asked[#asked + 1] = q
  end
elseif not docs then
  asked = {
    "What does rag index do with a file that fails to load?",
    "What happens when a pipeline reaches one of its limits?",
    "Why is BM25 the default search mode with the hashing embedder?",
  }
else
  asked = { "What is this about?", "How do I get started?", "What are the main parts?" }
end

-- Runs `rag ARGS`, showing the command line first; stops the demo on failure.
local function rag(args)
  local shown = {}
  for i, a in ipairs(args) do
    shown[i] = a:find("[%s'\"?*]") and ("'" .. a:gsub("'", "'\\''") .. "'") or a
  end
  print("$ rag " .. table.concat(shown, " "))
  local status = cli.main(args)
  if status ~= 0 then
    os.exit(status)
  end
end

local clock = require("rag").transport.now
local t0 = clock()
local args = { "index" }
for _, p in ipairs(paths) do
  args[#args + 1] = p
end
args[#args + 1] = "--into"
args[#args + 1] = into
rag(args)
for _, q in ipairs(asked) do
  print("")
  local t = clock()
  rag({ "ask", into, q })
  print(string.format("(answered in %.3f s)", clock() - t))
end
print("")
print(string.format("demo done in %.2f s; try: lua5.4 bin/rag search %s \"your words\"",
  clock() - t0, into))
