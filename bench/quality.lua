-- bench/quality.lua DATA_DIR: the specs tagged #data over the full data
-- sets instead of the samples `make test` uses: all 5,183 SciFact documents
-- (DATA_DIR/scifact) for the chunkers' limits, LangChain's chunks, tiktoken's
-- counts and sentence splitting; model2vec-rs's fixtures (DATA_DIR/model2vec);
-- and the seeds (DATA_DIR/../seeds) when they are there. Skipped, exit 0,
-- without the data folder. The last line is "N passed, N failed".
--   make quality DATA=../shared/data
local util = require("bench.util")

local data = util.data_dir(arg[1], "scifact/corpus.jsonl", "quality")
util.data_dir(data, "model2vec/test-model-float32/model.safetensors", "quality")

-- the interpreter running this script, and the directory its rag.core is in
local lua = arg[-1] or "lua5.4"
local cpath
for dir in package.cpath:gmatch("[^;]+") do
  local path = dir:gsub("%?", "rag/core")
  local f = io.open(path, "rb")
  if f then
    f:close()
    cpath = dir
    break
  end
end
assert(cpath, "rag.core is not on package.cpath: run make first")

local function quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local seeds = data .. "/../seeds"
local p = io.popen("ls " .. quote(seeds) .. " 2>/dev/null")
local have_seeds = p and p:read("*l") ~= nil
if p then
  p:close()
end
print("quality: " .. data .. (have_seeds and ", seeds from " .. seeds or ", no seeds"))

local cmd = table.concat({
  "RAG_DATA=" .. quote(data),
  "RAG_SEEDS=" .. (have_seeds and quote(seeds) or "''"),
  quote(lua), "/usr/bin/busted --ignore-lua --lpath='lua/?.lua;lua/?/init.lua'",
  "--cpath=" .. quote(cpath), "-o spec/summary.lua --tags=data spec",
}, " ")
local ok, how, code = os.execute(cmd)
if type(ok) == "number" then -- Lua 5.1: the status
  os.exit(ok == 0 and 0 or 1)
end
os.exit((ok and how == "exit" and code == 0) and 0 or 1)
