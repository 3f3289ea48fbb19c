-- rag.pipeline.summary (issue 29, point C): on many near-identical
-- documents that differ in one named fact, picking the document by its
-- summary first cites the right document where naive top-k does not.
local rag = require("rag")
local support_pipeline = require("spec.support.pipeline")
local support = require("spec.support.llm")

local CITIES = { "Athens", "Dublin", "Lisbon", "Madrid", "Oslo", "Prague", "Vienna", "Warsaw" }

-- Eight annual reports, the same but for the office each covers (named
-- once, in the first paragraph) and the revenue figure.
local function reports()
  local docs = {}
  for i, city in ipairs(CITIES) do
    docs[i] = { id = "report-" .. city:lower(), title = "Annual report",
      text = "This annual report covers the " .. city .. " office.\n\n"
        .. "Our teams worked on customer projects throughout the year, hired engineers and "
        .. "opened meeting rooms for visiting clients.\n\n"
        .. "Revenue growth was " .. (10 + i) .. "% this year, driven by consulting contracts "
        .. "and renewals.\n\n"
        .. "Next year we plan to expand the consulting practice and train new staff." }
  end
  return docs
end

local paragraphs = require("spec.helpers").paragraphs -- a chunk per paragraph

-- The scripted LLM: a document summary names the office the document
-- covers; an answer quotes the first passage of the context that gives a
-- revenue figure, citing it.
local function scripted()
  return support.scripted({}, { forever = function(messages)
    local system, user = messages[1].content, messages[#messages].content
    if system:find("summarise a document", 1, true) then
      local city = user:match("covers the (%a+) office")
      return { text = "The annual report of the " .. tostring(city) .. " office: its projects, "
        .. "its revenue and its plans." }
    end
    local n, figure = user:match("%[(%d+)%][^%[]-Revenue growth was (%d+)%%")
    if n then
      return { text = "Revenue growth was " .. figure .. "% [" .. n .. "]." }
    end
    return { text = "I don't have enough information to answer this." }
  end })
end

local QUESTION = "What was the revenue growth at the Lisbon office?"

describe("rag.pipeline.summary", function()
  local idx, llm
  setup(function()
    llm = scripted()
    idx = rag.index.new({ embedder = false, chunker = paragraphs,
      enrich = { doc_summary = true }, llm = llm })
    assert(idx:add_many(reports()))
  end)

  it("cites the document its summary picks, where naive top-k cites a look-alike", function()
    local naive = assert(rag.pipeline.naive({ index = idx, llm = llm, k = 2 }):answer(QUESTION))
    -- naive: the Lisbon intro ranks first (its rare word), then a revenue
    -- paragraph; all eight score alike and the first by id is Athens's
    assert.equal("Revenue growth was 11% [2].", naive.text)
    assert.same({ "report-athens" }, support_pipeline.cited_docs(naive))
    local p = rag.pipeline.summary({ index = idx, llm = llm, k = 2, docs = 1 })
    local r = assert(p:answer(QUESTION))
    assert.equal("Revenue growth was 13% [2].", r.text)
    assert.same({ "report-lisbon" }, support_pipeline.cited_docs(r))
    -- the trace shows the documents it picked
    local picked
    for _, e in ipairs(r.trace) do
      if e.kind == "branch" and e.name == "documents" then
        picked = e.why
      end
    end
    assert.matches("report%-lisbon", picked)
  end)

  it("searches the summary level: one node per document", function()
    local hits = idx:search("Lisbon office", { level = "summary", k = 3 })
    assert.equal("report-lisbon#summary", hits[1].id)
    assert.equal("report-lisbon", hits[1].doc_id)
    assert.equal("summary", hits[1].level)
    assert.equal("Annual report", hits[1].title)
    assert.equal("The annual report of the Lisbon office: its projects, its revenue and its "
      .. "plans.", hits[1].text)
    local two = idx:search("Lisbon office", { level = "summary", k = 3,
      filter = { doc_id = { "report-lisbon", "report-oslo" } } })
    assert.equal(2, #two)
    assert.equal("report-lisbon#summary", two[1].id)
    assert.equal("report-oslo#summary", two[2].id)
  end)

  it("falls back to every chunk when no summary matches, and refuses an index without "
    .. "summaries", function()
    -- no summary says "consulting": every document's chunks are searched
    local hits, info = rag.pipeline.summary({ index = idx, llm = llm, k = 3 })
      :retrieve("consulting practice")
    assert.equal(3, #hits)
    assert.equal("report-athens#4", hits[1].id)
    local branch
    for _, e in ipairs(info.trace) do
      if e.kind == "branch" then
        branch = e.name
      end
    end
    assert.equal("all", branch)
    local plain = rag.index.new({ embedder = false })
    assert.has_error(function() rag.pipeline.summary({ index = plain }) end,
      "rag.pipeline.summary: the index has no summary level (rag.index.new{ enrich = "
      .. "{ doc_summary = true } })")
    assert.has_error(function() plain:search("x", { level = "summary" }) end,
      "rag.index.search: this index has no summary level (rag.index.new{ enrich = "
      .. "{ doc_summary = true } })")
    assert.has_error(function() idx:search("x", { level = "section" }) end,
      "rag.index.search: option 'level' must be \"chunk\" or \"summary\", got section")
  end)
end)
