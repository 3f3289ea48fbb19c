-- `rag index PATH... --into postgres://...`, `rag search|info postgres://...`
-- and `rag serve postgres://...` through bin/rag, against the cluster that
-- spec/pg/run.sh (make test-pg) starts and names in RAG_PG_DSN (issue 26,
-- deliverable 5): counts on a first run, a re-run, a change, a deletion and
-- a file that fails to load; a search; the password never shown.
local rag = require("rag")
local helpers = require("spec.helpers")

local DSN = os.getenv("RAG_PG_DSN")

if not DSN then
  describe("rag index --into postgres://", function()
    it("needs a server", function()
      pending("no PostgreSQL: RAG_PG_DSN is unset (make test-pg starts one)")
    end)
  end)
  return
end


local TABLE = "clitest"
local URL = DSN .. "?table=" .. TABLE
local PASSWORD = assert(DSN:match("^postgres://[^:]*:([^@]*)@"), "RAG_PG_DSN has no password")
local SHOWN = DSN:gsub("^(postgres://[^:]*:)[^@]*@", "%1***@") .. "?table=" .. TABLE
local FIX = "spec/fixtures/load/"

local function esc(s)
  return (s:gsub("%p", "%%%0"))
end

-- The tables of a previous run (another interpreter's) gone.
local function drop()
  local st = require("rag.store.postgres")({ dsn = DSN, table = TABLE })
  assert(st:drop())
  st:close()
end

describe("rag index --into postgres://", function()
  if os.getenv("RAG_ASAN") then
    pending("runs a second interpreter; covered by the plain runs")
    return
  end
  local lua = helpers.lua_command()
  local root = helpers.tmpname()
  local docs = root .. "/docs"

  local function rag_cmd(args)
    local out, err, status = helpers.spawn("RAG_TTY=0 " .. lua .. " bin/rag " .. args
      .. " < /dev/null")
    -- whatever happens, the password is never printed
    assert.is_nil(out:find(PASSWORD, 1, true), out)
    assert.is_nil(err:find(PASSWORD, 1, true), err)
    return out, err, status
  end

  -- "URL: 4 documents, 4 chunks; 4 added, ..." as a table of counts
  local function counts(out)
    local t = {}
    for n, what in out:gsub(", [%d.]+ s%)", ")"):gmatch("(%d+) (%a+)") do
      t[what] = tonumber(n)
    end
    return t
  end

  local function index()
    local out, err, status = rag_cmd("index " .. docs .. " --into '" .. URL .. "'")
    assert.equal(0, status, err)
    -- the summary names the index by its URL, the password masked
    assert.truthy(out:find("^" .. esc(SHOWN) .. ": "), out)
    return counts(out), err
  end

  setup(function()
    drop()
    assert(os.execute("mkdir -p '" .. docs .. "'"))
    helpers.write(docs .. "/notes.md", helpers.read(FIX .. "notes.md"))
    for _, name in ipairs({ "a.txt", "b.md", "README" }) do
      helpers.write(docs .. "/" .. name, helpers.read(FIX .. "tree/" .. name))
    end
  end)

  teardown(function()
    os.execute("rm -rf '" .. root .. "'")
  end)

  it("adds four small files as four documents of one chunk each", function()
    local c, err = index()
    assert.equal("", err)
    assert.same({ documents = 4, chunks = 4, added = 4, updated = 0, unchanged = 0,
      removed = 0, failed = 0, files = 4 }, c)
  end)

  it("finds nothing to do on a re-run", function()
    local c = index()
    assert.same({ documents = 4, chunks = 4, added = 0, updated = 0, unchanged = 4,
      removed = 0, failed = 0, files = 4 }, c)
  end)

  it("updates a changed file and removes a deleted one", function()
    helpers.write(docs .. "/a.txt", "Alpha text, now about walruses.\n")
    os.remove(docs .. "/b.md")
    local c = index()
    assert.same({ documents = 3, chunks = 3, added = 0, updated = 1, unchanged = 2,
      removed = 1, failed = 0, files = 3 }, c)
  end)

  it("keeps the document of a file that fails to load", function()
    helpers.write(docs .. "/a.txt", "Alpha \255 broken\n")
    local c, err = index()
    assert.truthy(err:find("^rag index: '" .. esc(docs) .. "/a.txt': .*invalid utf%-8"), err)
    assert.same({ documents = 3, chunks = 3, added = 0, updated = 0, unchanged = 2,
      removed = 0, failed = 1, files = 3 }, c)
    helpers.write(docs .. "/a.txt", "Alpha text, now about walruses.\n")
  end)

  it("searches the URL: the moon and the sea are in the field notes", function()
    local out, err, status = rag_cmd("search '" .. URL .. "' moon pulls the sea --json")
    assert.equal(0, status, err)
    local first = assert(rag.json.decode(out:match("^[^\n]+")))
    assert.equal(docs .. "/notes.md", first.doc_id)
    assert.equal(1, first.rank)
    out, err, status = rag_cmd("search '" .. URL .. "' walruses --k 1")
    assert.equal(0, status, err)
    assert.truthy(out:find("^1%. " .. esc(docs) .. "/a%.txt "), out)
  end)

  it("describes the URL's index with rag info", function()
    local out, err, status = rag_cmd("info '" .. URL .. "'")
    assert.equal(0, status, err)
    assert.truthy(out:find("index +" .. esc(SHOWN) .. "\n"), out)
    assert.truthy(out:find("documents +3\n"), out)
    assert.truthy(out:find("store +postgres"), out)
  end)

  it("refuses other chunk settings for the table, and says why without the password", function()
    local out, err, status = rag_cmd("index " .. docs .. " --into '" .. URL
      .. "' --chunk-size 100")
    assert.equal(2, status, out)
    assert.truthy(err:find("^rag index: '" .. esc(SHOWN) .. "': the table 'clitest' holds "
      .. "chunks 512/64; this run asks for 100/64"), err)
  end)

  it("fails in one line, status 1, for a missing table or a wrong password", function()
    local _, err, status = rag_cmd("search '" .. DSN .. "?table=clitest_none' moon")
    assert.equal(1, status)
    assert.truthy(err:find("no index here"), err)
    local wrong = DSN:gsub("^(postgres://[^:]*:)([^@]*)@", "%1%2x@") .. "?table=" .. TABLE
    _, err, status = rag_cmd("search '" .. wrong .. "' moon")
    assert.equal(1, status)
    assert.truthy(err:find("^rag search: .*password authentication failed"), err)
    assert.is_nil(err:find(PASSWORD .. "x", 1, true), err)
  end)

  describe("rag serve postgres://", function()
    local nginx = os.getenv("RAG_NGINX") or "/usr/sbin/nginx"
    local usable = helpers.exists(nginx)
      and helpers.exists("/usr/lib/nginx/modules/ngx_http_lua_module.so")
      and helpers.exists("build/jit/rag/core.so")
      and helpers.spawn("command -v curl") ~= ""
    if not usable then
      it("needs nginx", function()
        pending("nginx-light, libnginx-mod-http-lua, curl or build/jit/rag/core.so is missing")
      end)
      return
    end

    local function curl(args)
      return helpers.spawn("curl -s -m 10 " .. args)
    end

    it("answers /health and POST /search from the table, and stops", function()
      local tmp = root .. "/serve"
      assert(os.execute("mkdir -p '" .. tmp .. "'"))
      local port = helpers.free_port()
      local base = "http://127.0.0.1:" .. port
      -- TMPDIR: where rag serve writes its nginx.conf, looked at below
      os.execute("TMPDIR='" .. tmp .. "' RAG_TTY=0 " .. lua .. " bin/rag serve '" .. URL
        .. "' --port " .. port .. " --workers 1 --rate 0 --token s3cret >'" .. tmp
        .. "/out' 2>'" .. tmp .. "/err' </dev/null & echo $! >'" .. tmp .. "/pid'")
      local pid = helpers.read(tmp .. "/pid"):match("%d+")
      local ok, health = false, nil
      for _ = 1, 100 do
        local body, _, st = curl(base .. "/health")
        if st == 0 and body ~= "" then
          ok, health = true, body
          break
        end
        os.execute("sleep 0.1")
      end
      local conf = helpers.spawn("cat '" .. tmp .. "'/rag-serve.*/nginx.conf")
      local hits = curl("-d '{\"query\":\"moon pulls the sea\",\"k\":2}' " .. base .. "/search")
      local reload = curl("-X POST -H 'Authorization: Bearer s3cret' " .. base
        .. "/admin/reload")
      local after = curl("-d '{\"query\":\"walruses\",\"k\":1}' " .. base .. "/search")
      os.execute("kill -TERM " .. pid)
      local gone = false
      for _ = 1, 50 do
        if not select(1, curl(base .. "/health")):find("ok", 1, true)
            and helpers.spawn("ls -d '" .. tmp .. "'/rag-serve.* 2>/dev/null") == "" then
          gone = true
          break
        end
        os.execute("sleep 0.1")
      end
      local out, err = helpers.read(tmp .. "/out"), helpers.read(tmp .. "/err")
      assert.truthy(ok, out .. err)
      assert.equal("rag serve: " .. base .. "/ (1 worker, index " .. SHOWN .. ")",
        out:match("^[^\n]*"))
      local h = assert(rag.json.decode(health), health)
      assert.same({ status = "ok", store = "postgres", table = TABLE, generation = 0,
        documents = 3, chunks = 3 }, h)
      local r = assert(rag.json.decode(hits), hits)
      assert.equal(docs .. "/notes.md", r.hits[1].doc_id)
      assert.truthy(r.hits[1].text:find("moon pulls the sea", 1, true))
      local rl = assert(rag.json.decode(reload), reload)
      assert.equal("ok", rl.status)
      r = assert(rag.json.decode(after), after)
      assert.equal(docs .. "/a.txt", r.hits[1].doc_id)
      assert.truthy(gone, "rag serve did not stop")
      -- the URL reaches the workers by the environment, not the file
      assert.truthy(conf:find("RAG_SERVE_DSN", 1, true), conf)
      for _, s in ipairs({ out, err, conf, health, hits, reload }) do
        assert.is_nil(s:find(PASSWORD, 1, true), s)
      end
      assert.is_nil(err:find("%[error%]"), err)
    end)
  end)
end)
