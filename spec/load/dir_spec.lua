-- rag.load.dir: the walk's order, globs, hidden files, links and failures.
local load = require("rag.load")

local T = "spec/fixtures/load/tree"

local function run(path, o)
  local iter, report = assert(load.dir(path, o))
  local ids = {}
  for d in iter do
    ids[#ids + 1] = d.id
  end
  return ids, report
end

describe("rag.load.dir", function()
  it("walks depth first in name order, skipping hidden and binary files", function()
    local ids, report = run(T)
    assert.same({ "README", "a.txt", "b.md", "skip/d.txt", "sub/c.html", "sub/pages.pdf" }, ids)
    assert.equal(9, report.total)
    assert.equal(9, report.files)
    assert.equal(6, report.loaded)
    assert.equal(1, report.skipped) -- sub/blob.bin
  end)

  it("loads a BEIR folder inside the walked one as its corpus, not its queries", function()
    local iter = assert(load.dir("spec/fixtures/load", { include = { "beir/*", "notes.md" } }))
    local got = {}
    for d in iter do
      got[#got + 1] = d.id .. " " .. d.source
    end
    assert.same({ "b1 spec/fixtures/load/beir/corpus.jsonl",
      "2 spec/fixtures/load/beir/corpus.jsonl", "notes.md spec/fixtures/load/notes.md" }, got)
  end)

  it("reports the failures by path, with the reason, and goes on", function()
    local _, report = run(T)
    assert.equal(2, #report.failed)
    local bad, pdf = report.failed[1], report.failed[2]
    assert.equal(T .. "/bad.txt", bad.path)
    assert.equal("encoding", bad.code)
    assert.matches("invalid utf%-8 at byte 31", bad.msg)
    assert.equal(T .. "/sub/broken.pdf", pdf.path)
    assert.equal("format", pdf.code)
    assert.matches("pdftotext exit 1", pdf.msg)
  end)

  it("knows the total before the first document and calls progress per file", function()
    local calls = {}
    local iter, report = assert(load.dir(T, { include = { "*.txt", "*.md" },
      progress = function(done, total, path)
        calls[#calls + 1] = done .. "/" .. total .. " " .. path
      end }))
    assert.equal(4, report.total)
    assert.equal(0, report.files)
    assert.same({}, calls)
    assert.equal("a.txt", iter().id)
    assert.same({ "1/4 " .. T .. "/a.txt" }, calls)
    assert.equal(1, report.files)
    assert.equal("b.md", iter().id)
    assert.equal("skip/d.txt", iter().id)
    assert.is_nil(iter())
    assert.equal(4, #calls)
    assert.equal("4/4 " .. T .. "/skip/d.txt", calls[4])
  end)

  it("filters with include and exclude globs over the relative path", function()
    assert.same({ "a.txt", "skip/d.txt" }, (run(T, { include = { "*.txt" } })))
    assert.same({ "a.txt" }, (run(T, { include = { "*.txt" }, exclude = { "skip/**" } })))
    assert.same({ "README", "a.txt", "b.md" }, (run(T, { exclude = { "skip", "sub" } })))
    assert.same({ "sub/c.html" }, (run(T, { include = { "**/c.htm?" } })))
    assert.same({ "a.txt", "b.md" }, (run(T, { include = { "[ab].*" } })))
  end)

  it("includes hidden files and folders on request", function()
    -- git cannot hold a .git folder, so the spec makes it
    local f = io.open(T .. "/.git/config.txt", "rb")
    local made = f == nil
    if f then
      f:close()
    else
      assert(os.execute("mkdir -p " .. T .. "/.git && printf '[core]\\n' > " .. T
        .. "/.git/config.txt"))
    end
    local ok, ids = pcall(run, T, { hidden = true, include = { "*.txt" } })
    if made then
      os.execute("rm -rf " .. T .. "/.git")
    end
    assert(ok, ids)
    assert.same({ ".git/config.txt", ".hidden.txt", "a.txt", "skip/d.txt" }, ids)
  end)

  it("follows links to files and folders but not loops, ids relative to root", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir .. "/x && printf 'one' > " .. dir .. "/x/one.txt"
      .. " && ln -s .. " .. dir .. "/x/up && ln -s x " .. dir .. "/y"
      .. " && ln -s nowhere " .. dir .. "/z.txt"))
    local ids, report = run(dir .. "/", { root = dir })
    assert.same({ "x/one.txt", "y/one.txt" }, ids)
    assert.equal(3, report.skipped) -- x/up and y/up loop; z.txt dangles
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("loads a file given as the path, and reports a missing folder", function()
    local ids = run(T .. "/a.txt")
    assert.same({ T .. "/a.txt" }, ids)
    local ok, msg, code = load.dir(T .. "/missing")
    assert.is_nil(ok)
    assert.equal("io", code)
    assert.matches("^rag.load.dir: ", msg)
    assert.has_error(function() load.dir(T, { include = "*.txt" }) end,
      "rag.load.dir: 'include' must be a table, got string")
    assert.has_error(function() load.dir(T, { unknown = 1 }) end,
      "rag.load.dir: unknown option 'unknown'")
  end)

  it("feeds rag.index's sync", function()
    local rag = require("rag")
    local idx = rag.index.new({ embedder = false })
    local iter, report = assert(load.dir(T))
    local counts = assert(idx:sync(iter))
    assert.equal(6, counts.added)
    assert.equal(2, #report.failed)
    local hits = assert(idx:search("volcanoes basalt", { k = 1, mode = "bm25" }))
    assert.equal("sub/pages.pdf", hits[1].doc_id)
    local at = hits[1].start + hits[1].text:find("volcanoes", 1, true) - 1
    assert.equal(2, load.page_of(hits[1], at))
    assert.equal(1, load.page_of(hits[1], hits[1].start))
    idx:close()
  end)
end)
