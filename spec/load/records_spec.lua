-- rag.load.csv, rag.load.jsonl, rag.load.beir and rag.load.sqlite: rows to documents.
local load = require("rag.load")

local F = "spec/fixtures/load/"

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

describe("rag.load.csv", function()
  it("reads quoted fields, doubled quotes and line breaks inside quotes", function()
    local docs = assert(load.csv(F .. "rows.csv", { meta = { "lang" } }))
    assert.equal(3, #docs)
    assert.same({ id = "c1", text = "A plain row.", title = "Plain", source = F .. "rows.csv",
      meta = { row = 1, lang = "en" } }, docs[1])
    assert.equal("c2", docs[2].id)
    assert.equal("Quoted, with comma", docs[2].title)
    assert.equal('She said "hello".\nThen left.', docs[2].text)
    assert.equal("c3", docs[3].id)
    assert.is_nil(docs[3].title)
    assert.equal("pt", docs[3].meta.lang)
  end)

  it("parses RFC 4180 rows", function()
    local csv = require("rag.load.csv")
    assert.same({ { "a", "b" }, { "1", "" }, { "", "x\r\ny" } },
      csv.rows('a,b\r\n1,\r\n,"x\r\ny"\r\n', ","))
    assert.same({ { "a;b", "c" } }, csv.rows('"a;b";c', ";"))
    assert.same({ { 'say "hi"' } }, csv.rows('"say ""hi"""\n', ","))
    assert.is_nil((csv.rows('"open', ",")))
  end)

  it("uses other columns, ids by row, and reports bad quoting", function()
    local path = os.tmpname()
    write(path, "name,body\nx,\"one\"\ny,two\n")
    local docs = assert(load.csv(path, { text = { "name", "body" } }))
    assert.equal(path .. "#1", docs[1].id)
    assert.equal("x\n\none", docs[1].text)
    write(path, 'text\n"a"b\n')
    local ok, msg, code = load.csv(path)
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("text after a closing quote", msg)
    os.remove(path)
    assert.has_error(function() load.csv(path, { sep = ";;" }) end,
      "rag.load.csv: 'sep' must be one character other than a quote or line break")
  end)
end)

describe("rag.load.jsonl", function()
  it("gives a document per object line, ids from the field or the line", function()
    local docs = assert(load.file(F .. "docs.jsonl", { root = F, fields = { meta = { "lang" } } }))
    assert.equal(3, #docs)
    assert.same({ id = "j1", text = "The first line of text.", title = "First",
      source = F .. "docs.jsonl", meta = { row = 1, lang = "en" } }, docs[1])
    assert.is_nil(docs[2].title)
    assert.equal("docs.jsonl#4", docs[3].id)
    assert.equal(4, docs[3].meta.row)
  end)

  it("names the bad line", function()
    local path = os.tmpname()
    write(path, '{"text": "a"}\n[1, 2]\n')
    local ok, msg, code = load.jsonl(path)
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("line 2: not an object", msg)
    write(path, '{"text": \n')
    ok, msg, code = load.jsonl(path)
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("line 1", msg)
    os.remove(path)
  end)
end)

describe("rag.load.beir", function()
  it("keeps the BEIR ids, titles and texts", function()
    local docs = assert(load.beir(F .. "beir"))
    assert.equal(2, #docs)
    assert.equal("b1", docs[1].id)
    assert.equal("Tides", docs[1].title)
    assert.equal("The moon pulls the sea.", docs[1].text)
    assert.equal("2", docs[2].id)
    assert.is_nil(docs[2].title)
  end)

  it("is what load.dir gives for a BEIR folder", function()
    local iter, report = assert(load.dir(F .. "beir"))
    assert.equal(1, report.total)
    local ids = {}
    for d in iter do
      ids[#ids + 1] = d.id
    end
    assert.same({ "b1", "2" }, ids)
    assert.equal(1, report.loaded)
  end)
end)

describe("rag.load.sqlite", function()
  it("has sqlite3 (Debian package sqlite3: make deps)", function()
    local r = os.execute("command -v sqlite3 >/dev/null 2>&1")
    assert.truthy(r == true or r == 0,
      "sqlite3 is missing: install Debian's sqlite3 (make deps)")
  end)

  it("gives a document per row of a query", function()
    local db = os.tmpname()
    os.remove(db)
    assert(os.execute("sqlite3 " .. db
      .. " \"create table t(id integer, title text, body text, n int);"
      .. " insert into t values (1, 'One', 'first body', 5), (2, NULL, 'it''s second', 6);\""))
    local docs = assert(load.sqlite(db, "select id, title, body, n from t order by id",
      { text = "body", meta = { "n" } }))
    assert.equal(2, #docs)
    assert.same({ id = "1", text = "first body", title = "One", source = db,
      meta = { row = 1, n = 5 } }, docs[1])
    assert.equal("it's second", docs[2].text)
    assert.same({}, assert(load.sqlite(db, "select * from t where 0")))
    local ok, msg, code = load.sqlite(db, "select * from nowhere")
    assert.is_nil(ok)
    assert.equal("format", code)
    assert.matches("no such table", msg)
    local _
    ok, _, code = load.sqlite(db, "delete from t")
    assert.is_nil(ok)
    assert.equal("format", code)
    os.remove(db)
    ok, _, code = load.sqlite(db, "select 1")
    assert.is_nil(ok)
    assert.equal("io", code)
  end)
end)
