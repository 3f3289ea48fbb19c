-- examples/12_enrich.lua: an enriched index, offline: keywords, summaries
-- and a summary level made without an LLM, questions from an LLM stand-in,
-- a run cut by an LLM-call limit that the next run finishes, hits that
-- show what matched, and the summary pipeline.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' lua5.4 examples/12_enrich.lua
local rag = require("rag")

-- Three near-identical release notes; only the product named differs.
local docs = {}
for i, product in ipairs({ "Falcon", "Heron", "Osprey" }) do
  docs[i] = { id = "notes-" .. product:lower(), source = "releases/" .. product .. ".md",
    text = "These release notes cover the " .. product .. " router.\n\n"
      .. "Version " .. (3 + i) .. ".0 fixes the memory leak in the packet queue and speeds up "
      .. "start-up.\n\n"
      .. "Upgrade by downloading the image and restarting the device." }
end

-- An LLM writes the questions each chunk answers. This stand-in speaks
-- the LLM contract (:chat(messages) -> { text }), so the example runs
-- offline; rag.providers.openai{...} or ollama{...} is the real thing.
local asked = 0
local llm = { chat = function(_, messages)
  asked = asked + 1
  local passage = messages[#messages].content
  if passage:find("memory leak", 1, true) then
    return { text = '["Which version fixes the memory leak?"]' }
  end
  return { text = '["How do I upgrade?"]' }
end }

local idx = rag.index.new({
  chunk = { size = 32, overlap = 0 },
  enrich = { keywords = "offline", summary = "offline", doc_summary = "offline",
    title = "offline", questions = "llm" },
  llm = llm,
})
-- at most 2 LLM calls (4 are needed: the three second chunks are one text,
-- asked once): the run stops, keeping what it paid for
local counts, msg, code = idx:add_many(docs, { limits = { llm_calls = 2 } })
print(string.format("limited run: %s (%s); %d calls", tostring(counts), code, asked))
print("  " .. msg)
counts = assert(idx:add_many(docs))
print(string.format("next run: added %d, %d chunks, %d more calls", counts.added,
  idx:stats().leaves, counts.llm_calls))
counts = assert(idx:add_many(docs))
print(string.format("again: %d unchanged, %d calls", counts.unchanged, counts.llm_calls))

local function show(title, hits)
  print(title)
  for i, h in ipairs(hits) do
    local ranks = {}
    for _, list in ipairs({ "bm25", "keywords", "summary", "vector", "questions" }) do
      if h.ranks[list] then
        ranks[#ranks + 1] = list .. "=" .. h.ranks[list]
      end
    end
    print(string.format("  %d. %-16s %s", i, h.id, table.concat(ranks, " ")))
  end
end

local hits = idx:search("memory leak", { mode = "bm25", k = 3 })
show("bm25 'memory leak' (the text and its keywords):", hits)
print("  keywords of the first: " .. table.concat(hits[1].enrich.keywords, ", "))
print("  its summary: " .. hits[1].enrich.summary)
show("vector 'Which version fixes the memory leak?' (its question):",
  idx:search("Which version fixes the memory leak?", { mode = "vector", k = 1 }))

-- The summary level: one node per document.
for _, h in ipairs(idx:search("Heron router", { level = "summary", k = 2 })) do
  print(string.format("summary node %s: %s", h.id, h.text))
end

-- Documents first, then their chunks.
local p = rag.pipeline.summary({ index = idx, docs = 1, k = 2 })
local r = assert(p:answer("Which version of the Osprey router fixes the memory leak?"))
print("summary pipeline: " .. r.text)
for n, c in pairs(r.citations) do
  print(string.format("  [%d] %s", n, c.doc_id))
end
