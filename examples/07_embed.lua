-- examples/07_embed.lua: embedders. Offline by default: the hashing embedder
-- feeds a vector index, and an OpenAI-compatible provider is driven through
-- a transport function that answers like a server (no network), with a
-- cache so repeated texts are not sent twice. With OPENAI_API_KEY (and
-- optionally OPENAI_BASE_URL and RAG_EMBED_MODEL) set, the real server is used.
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/?.so;;' lua5.4 examples/07_embed.lua
local rag = require("rag")

local docs = {
  { id = "bm25", text = "BM25 ranks documents by term frequency and inverse document frequency." },
  { id = "hnsw", text = "HNSW is a graph index for approximate nearest neighbour search." },
  { id = "rrf", text = "Reciprocal rank fusion merges ranked lists from several retrievers." },
  { id = "chunk", text = "Chunkers split long documents into passages that fit a token budget." },
}

-- 1. The hashing embedder: lexical, deterministic, no model, no download.
local hashing = rag.embed.hashing({ dim = 512 })
local index = rag.vec.new({ dim = hashing:dim(), metric = "cosine" })
local texts = {}
for i, d in ipairs(docs) do
  texts[i] = d.text
end
local vecs = assert(hashing:embed(texts, { packed = true }))
for i, d in ipairs(docs) do
  index:add(d.id, vecs[i])
end
local query = "approximate nearest neighbour graph"
local hits = index:search(assert(hashing:embed({ query }, { packed = true }))[1], 2)
print(("hashing: %q -> %s (%.3f), %s (%.3f)"):format(query, hits[1].id, hits[1].score,
  hits[2].id, hits[2].score))

-- 2. A provider. Offline, a transport function plays the server: it answers
-- the OpenAI embeddings request with hashing vectors and counts requests.
local requests = 0
local function local_server(req)
  requests = requests + 1
  local body = rag.json.decode(req.body)
  local data = {}
  for i, v in ipairs(assert(hashing:embed(body.input))) do
    data[i] = { index = i - 1, embedding = v }
  end
  return { status = 200, headers = {}, body = rag.json.encode({ data = data }) }
end

local live = os.getenv("OPENAI_API_KEY") ~= nil
local provider = rag.providers.openai({
  model = os.getenv("RAG_EMBED_MODEL") or "text-embedding-3-small",
  transport = not live and local_server or nil,
  batch_size = 2,
  cache = rag.embed.cache(),
})
print("provider: " .. tostring(provider) .. (live and "" or " (answered locally)"))
local out, info = provider:embed(texts)
if not out then
  print("embed failed: " .. tostring(info))
  return
end
print(("embedded %d texts of %d dims in %d requests"):format(#out, #out[1], info.requests))
info = select(2, provider:embed({ texts[1], texts[2], "a new text" }))
print(("again with one new text: %d request, %d from the cache"):format(info.requests,
  info.cached))
if not live then
  assert(requests == 3, "expected 2 batches and 1 more request")
end
