-- 02_text_tokens.lua: cleaning, analysing and counting text, offline.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' \
--     lua5.4 examples/02_text_tokens.lua
local rag = require("rag")

local raw = "  Ｒｅｔｒｉｅｖａｌ-augmented generation (RAG) cuts hallucinations.\r\n\r\n\r\n"
  .. "Dr. Lewis et al. proposed it in 2020, e.g. for open-domain QA.  "
  .. "检索增强生成先检索，再生成！它适合知识密集型任务。"

-- 1. Clean: NFKC (full-width to ASCII), CRLF to LF, blank lines folded, trimmed.
local text = rag.text.normalize(raw)
print("normalized:\n" .. text .. "\n")

-- 2. Sentences with byte offsets: text == text:sub(start, stop).
for i, s in ipairs(rag.text.sentences(text)) do
  assert(s.text == text:sub(s.start, s.stop))
  print(("sentence %d [%d-%d] %s"):format(i, s.start, s.stop, s.text))
end

-- 3. Index terms: stopwords out, Snowball stems, CJK bigrams, spans on request.
local terms, starts, stops = rag.text.tokenize(text, nil, { spans = true })
print("\nterms: " .. table.concat(terms, " "))
print(("first term %q comes from %q"):format(terms[1], text:sub(starts[1], stops[1])))

-- An analyzer of your own: French stems, no CJK bigrams, custom stopwords.
local fr = rag.text.analyzer({ lang = "french", stopwords = { "les", "des" }, cjk = "unigram" })
print("french: " .. table.concat(fr:tokenize("Les chercheurs cherchaient des réponses 答案"), " "))

-- 4. Tokens: exact cl100k_base / o200k_base counts, and the fast estimate.
local cl = assert(rag.tokenizer.get("cl100k_base"))
local o200 = assert(rag.tokenizer.get("o200k_base"))
local approx = rag.tokenizer.approx()
print(("\ntokens: cl100k_base %d, o200k_base %d, approx %d"):format(cl:count(text),
  o200:count(text), approx:count(text)))
local ids = cl:encode("Hello, 世界!")
print("ids: " .. table.concat(ids, " ") .. " -> " .. cl:decode(ids))
print("special as text:", #cl:encode("<|endoftext|>"), "allowed:",
  cl:encode("<|endoftext|>", { allowed_special = "all" })[1])

-- Invalid UTF-8 is a failure of the input, returned, not raised.
print(cl:count("bad \255 byte"))
