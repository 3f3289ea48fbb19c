-- examples/host/host.lua: the Lua half of the game host (host.c). The C
-- side owns the frame loop and calls these functions; indexing, saving and
-- answering are the rag command's own (rag.cli.prepare, save, ask), so the
-- host's index and answers are what `rag index` and `rag ask` give.
local cli = require("rag.cli")

local H = {}

local idx, dir

--- Loads the documents under path (a folder, a file or a BEIR folder) as
-- `rag index path --into save_dir` would; returns their count and the step
-- function that indexes them a budget at a time, or nil, msg.
function H.start(path, save_dir)
  dir = save_dir
  local docs, failed
  idx, docs, failed = cli.prepare({ path }, dir)
  if not idx then
    return nil, docs
  end
  for _, f in ipairs(failed) do
    io.stderr:write("rag-host: '", f.path, "': ", (tostring(f.msg):gsub("\n.*", "")), "\n")
  end
  return #docs, idx:add_many(docs, { budget_ms = 2 })
end

--- After the last step: saves the index when a folder was given; returns
-- the index's document and chunk counts, or nil, msg.
function H.finish()
  if dir then
    local ok, msg = cli.save(idx, dir)
    if not ok then
      return nil, msg
    end
  end
  local st = idx:stats()
  return st.documents, st.leaves
end

--- Prints the answer to question and its sources as `rag ask` does;
-- true, or nil, msg.
function H.ask(question)
  return cli.ask(idx, question, dir)
end

return H
