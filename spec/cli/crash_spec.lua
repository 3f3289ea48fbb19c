-- Crash consistency of `rag index`: the command is killed (SIGKILL) at a
-- random moment of a run over a folder that changes between runs. Every
-- time, the index directory must open to a complete generation, and the
-- same command run again must converge to what a fresh index of the folder
-- gives: the same documents and the same search results, scores included.
-- RAG_FULL=1 kills 100 runs (make crash, in CI); otherwise 8.
local rag = require("rag")
local helpers = require("spec.helpers")

local KILLS = os.getenv("RAG_FULL") == "1" and 100 or 8
local QUERIES = { "cell growth factor", "protein expression in the brain", "vaccine immune" }

describe("rag index killed at random moments", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  local lua = helpers.lua_command()
  local root = helpers.tmpname()
  local src, out = root .. "/docs", root .. "/kb"

  teardown(function()
    os.execute("rm -rf '" .. root .. "'")
  end)

  local function index_cmd(into)
    return "RAG_TTY=0 " .. lua .. " bin/rag index '" .. src .. "' --into '" .. into
      .. "' < /dev/null > /dev/null 2>&1"
  end

  -- what an index directory answers: its documents and the queries' hits
  local function answers(dir)
    local idx, msg = rag.index.open(dir)
    if not idx then
      return nil, msg
    end
    local t = { docs = idx:count() }
    for i, q in ipairs(QUERIES) do
      local hits = {}
      for j, h in ipairs(idx:search(q, { k = 5 })) do
        hits[j] = ("%s %.12g"):format(h.id, h.score)
      end
      t[i] = table.concat(hits, ", ")
    end
    idx:close()
    return t
  end

  it("always leaves a complete generation, and a rerun converges", function()
    local docs = helpers.scifact()
    assert(os.execute("mkdir -p '" .. src .. "'"))
    local present = {}
    local function put(i, text)
      helpers.write(("%s/d%02d.md"):format(src, i), "# " .. docs[i].title .. "\n\n"
        .. (text or docs[i].text) .. "\n")
      present[i] = true
    end
    for i = 1, 24 do
      put(i)
    end
    -- how long a whole run takes here, so that the kills land inside one
    local t0 = helpers.now()
    assert(os.execute(index_cmd(root .. "/timing")))
    local span = math.max(0.05, helpers.now() - t0)
    local r = helpers.rng(30)
    local completed, opened, empty = false, 0, 0
    for kill = 1, KILLS do
      -- change the folder: edit one file, remove one, bring one back
      local a, b, c = r(#docs), r(#docs), r(#docs)
      put(a, docs[a].text .. " Edited in round " .. kill .. ".")
      if present[b] and b ~= a then
        os.remove(("%s/d%02d.md"):format(src, b))
        present[b] = nil
      end
      put(c)
      local delay = r(1000) / 1000 * span * 1.2
      os.execute(("%s & pid=$!; sleep %.3f; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; true")
        :format(index_cmd(out), delay))
      local got, msg = answers(out)
      if got then
        opened = opened + 1
      else
        -- only before any run has finished may there be no generation yet
        assert.is_false(completed, msg)
        assert.truthy(msg:find("no such file", 1, true), msg)
        empty = empty + 1
      end
      -- a run to the end converges to a fresh index of the folder
      assert(os.execute(index_cmd(out)))
      completed = true
      os.execute("rm -rf '" .. root .. "/fresh'")
      assert(os.execute(index_cmd(root .. "/fresh")))
      assert.same(answers(root .. "/fresh"), answers(out), "round " .. kill)
    end
    assert.equal(KILLS, opened + empty)
    if os.getenv("RAG_CRASH_REPORT") then
      io.stderr:write(("rag index: %d kills, %d left a generation, %d came before the first; "
        .. "a run takes %.2f s\n"):format(KILLS, opened, empty, span))
    end
  end)
end)
