-- fuzz/readers.lua: the driver of fuzz/lua_readers.c. Returns a function of
-- the fuzzer's bytes whose first byte picks a reader and whose rest is what
-- it reads: rag.json.decode, rag.load.csv / jsonl / markdown / html, an
-- index's manifest (as is, or with its checksum made right so that the
-- fields are read), each part file of an enriched index (its size and CRC
-- set right in the manifest, so that the part's own parser runs), a
-- .tiktoken vocabulary and each file of a Model2Vec folder. Every reader
-- must keep the error rule: return its value, or nil, a message naming it
-- and a code of the list; never raise. Whatever opens is used once (a
-- search, an encode, an embed). A broken rule raises, and the harness
-- aborts: a finding.
local rag = require("rag")
local fs = require("rag.core").fs
local hash = require("rag.core").text.hash

local CODES = {}
for c in ("io format version corrupt encoding decode"):gmatch("%a+") do
  CODES[c] = true
end

local work = os.tmpname()
os.remove(work)
assert(fs.mkdir(work))

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- v, msg, code from a reader: a value, or a failure of the world
local function check(name, v, msg, code)
  if v == nil then
    if type(msg) ~= "string" or not msg:find("^rag%.") or not CODES[code] then
      error(("%s: a failure must be nil, 'rag.<op>: ...', code; got %s, %s"):format(
        name, tostring(msg), tostring(code)))
    end
  end
  return v
end

local function guarded(name, f, ...)
  local r = table.pack(pcall(f, ...))
  if not r[1] then
    error(name .. " raised: " .. tostring(r[2]))
  end
  return check(name, r[2], r[3], r[4])
end

-- {====== An enriched index to damage ======}

local index_dir = work .. "/index"
do
  local idx = rag.index.new({ embedder = rag.embed.hashing({ dim = 8 }),
    enrich = { keywords = true, summary = true, doc_summary = true } })
  idx:add({ id = "a", title = "Tides", text = "The moon pulls the sea. Spring tides are high." })
  idx:add({ id = "b", text = "Bees dance to show the way to flowers.", meta = { n = 2 } })
  idx:add({ id = "c", text = "Iron rusts in wet air.\n\nRust is iron oxide." })
  assert(idx:save(index_dir))
  idx:close()
end
local MANIFEST = read(index_dir .. "/manifest.json")
local manifest = rag.json.decode(MANIFEST)
local PARTS = {}
for part in pairs(manifest.files) do
  PARTS[#PARTS + 1] = part
end
table.sort(PARTS)
local ORIGINAL = {}
for _, part in ipairs(PARTS) do
  ORIGINAL[part] = read(index_dir .. "/" .. manifest.files[part].name)
end

-- a manifest text whose checksum is right for the rest of it
local function signed(text)
  local t = text:gsub("\n$", "")
  if t:sub(1, 1) ~= "{" then
    return text
  end
  local body = #t > 2 and t:sub(2) or "}"
  local sep = body == "}" and "" or ","
  local without = "{" .. body
  return '{"checksum":"' .. hash(without) .. '"' .. sep .. body .. "\n"
end

local function open_index(name)
  for _, ro in ipairs({ false, true }) do
    local idx = guarded(name, rag.index.open, index_dir, { readonly = ro })
    if idx then
      guarded(name .. " search", idx.search, idx, "tides iron", { k = 3 })
      -- a summary level is there when the manifest asks for one (asking an
      -- index without one raises: the caller's misuse, not a finding)
      local m = rag.json.decode(read(index_dir .. "/manifest.json"))
      if type(m) == "table" and type(m.enrich) == "table" and type(m.enrich.kinds) == "table"
          and m.enrich.kinds.doc_summary then
        guarded(name .. " summary search", idx.search, idx, "bees", { k = 2, level = "summary" })
      end
      -- adding needs the embedder and the tokenizer again when the manifest
      -- names ones rag.index.open cannot rebuild: the caller passes them then
      local e = type(m) == "table" and m.embedder
      local ch = type(m) == "table" and type(m.chunker) == "table" and m.chunker.options
      local tok = type(ch) == "table" and ch.tokenizer
      if not ro and type(e) == "table" and e.name == "rag.hashing"
          and (tok == nil or tok == "cl100k_base" or tok == "o200k_base") then
        guarded(name .. " add", idx.add, idx, { id = "d", text = "Tides turn twice a day." })
        guarded(name .. " save", idx.save, idx, work .. "/saved")
      end
      idx:close()
    end
  end
end

local function restore()
  write(index_dir .. "/manifest.json", MANIFEST)
end

-- {====== A Model2Vec folder ======}

local m2v_dir = work .. "/m2v"
assert(fs.mkdir(m2v_dir))
local M2V = {
  ["config.json"] = rag.json.encode({ model_type = "model2vec", normalize = true }),
  ["tokenizer.json"] = rag.json.encode({
    normalizer = { type = "BertNormalizer", lowercase = true, strip_accents = true,
      clean_text = true, handle_chinese_chars = true },
    pre_tokenizer = { type = "BertPreTokenizer" },
    model = { type = "WordPiece", unk_token = "[UNK]", continuing_subword_prefix = "##",
      max_input_chars_per_word = 100,
      vocab = { ["[UNK]"] = 0, hello = 1, world = 2, ["##s"] = 3, ["!"] = 4 } },
  }),
}
do
  local rows = {}
  for i = 1, 5 * 4 do
    rows[i] = string.pack("<f", (i % 7) / 7 - 0.4)
  end
  local header = rag.json.encode({ embeddings = { dtype = "F32", shape = { 5, 4 },
    data_offsets = { 0, 80 } } })
  M2V["model.safetensors"] = string.pack("<I8", #header) .. header .. table.concat(rows)
end
local M2V_FILES = { "config.json", "tokenizer.json", "model.safetensors" }
for name, bytes in pairs(M2V) do
  write(m2v_dir .. "/" .. name, bytes)
end
assert(rag.embed.model2vec(m2v_dir), "the Model2Vec folder loads")

-- {====== The readers ======}

local readers = {
  function(s) -- JSON
    guarded("rag.json.decode", rag.json.decode, s)
  end,
  function(s) -- CSV
    write(work .. "/in.csv", s)
    guarded("rag.load.csv", rag.load.csv, work .. "/in.csv")
  end,
  function(s) -- JSON Lines
    write(work .. "/in.jsonl", s)
    guarded("rag.load.jsonl", rag.load.jsonl, work .. "/in.jsonl")
  end,
  function(s)
    local docs = guarded("rag.load.markdown", rag.load.markdown, s)
    if docs then
      guarded("rag.load.sections", rag.load.sections, docs[1])
    end
  end,
  function(s)
    guarded("rag.load.html", rag.load.html, s)
  end,
  function(s) -- the manifest as is
    write(index_dir .. "/manifest.json", s)
    open_index("rag.index.open (manifest)")
    restore()
  end,
  function(s) -- the manifest, its checksum right
    write(index_dir .. "/manifest.json", signed(s))
    open_index("rag.index.open (signed manifest)")
    restore()
  end,
  function(s) -- one part, the manifest saying its size and CRC
    local part = PARTS[(s:byte(1) or 0) % #PARTS + 1]
    local bytes = s:sub(2)
    local path = index_dir .. "/" .. manifest.files[part].name
    write(path, bytes)
    local size, crc = assert(fs.sum(path))
    local m = rag.json.decode(MANIFEST)
    m.files[part].size, m.files[part].crc32 = size, crc
    m.checksum = nil
    write(index_dir .. "/manifest.json", signed(rag.json.encode(m)))
    open_index("rag.index.open (" .. part .. ")")
    write(path, ORIGINAL[part])
    restore()
  end,
  function(s) -- a .tiktoken vocabulary
    write(work .. "/v.tiktoken", s)
    local tok = guarded("rag.tokenizer.load", rag.tokenizer.load, work .. "/v.tiktoken",
      "cl100k_base")
    if tok then
      local ids = guarded("tok:encode", tok.encode, tok, "hello world, 12345 ünïcode")
      guarded("tok:decode", tok.decode, tok, ids)
      tok:close()
    end
  end,
  function(s) -- one file of a Model2Vec folder
    local name = M2V_FILES[(s:byte(1) or 0) % #M2V_FILES + 1]
    write(m2v_dir .. "/" .. name, s:sub(2))
    local m = guarded("rag.embed.model2vec", rag.embed.model2vec, m2v_dir)
    if m then
      guarded("model2vec embed", m.embed, m, { "hello worlds!", "" })
      m:close()
    end
    write(m2v_dir .. "/" .. name, M2V[name])
  end,
}

-- RAG_FUZZ_SEEDS=DIR writes a seed for each reader into DIR (the corpus
-- committed in fuzz/corpus/lua_readers)
local seeds = os.getenv("RAG_FUZZ_SEEDS")
if seeds then
  local n = 0
  local function seed(bytes)
    n = n + 1
    write(("%s/seed-%02d"):format(seeds, n), bytes)
  end
  local m = rag.json.decode(MANIFEST)
  m.checksum = nil
  local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
  local function base64(t)
    local out = {}
    for i = 1, #t, 3 do
      local x, y, z = t:byte(i, i + 2)
      local v = x * 65536 + (y or 0) * 256 + (z or 0)
      for k = 3, 0, -1 do
        local c = (v >> (6 * k)) & 63
        out[#out + 1] = (k == 1 and not y or k == 0 and not z) and "=" or B64:sub(c + 1, c + 1)
      end
    end
    return table.concat(out)
  end
  seed("\0" .. rag.json.encode({ a = { 1, 2.5, "x", true, false }, b = rag.json.null or 0 }))
  seed("\1id,title,text\n1,One,\"Hello, world\"\n2,Two,\"a \"\"quoted\"\" word\"\n")
  seed('\2{"id":"a","text":"Hello","meta":{"k":1}}\n{"id":"b","text":"World"}\n')
  seed("\3---\ntitle: Notes\ntags: [a, b]\n---\n# One\n\nText.\n\nTwo\n===\n\n```\n# no\n```\n")
  seed("\4<html><head><title>T</title></head><body><main><h1>Head</h1><p>Some text.</p>"
    .. "</main></body></html>")
  seed("\5" .. MANIFEST)
  seed("\6" .. rag.json.encode(m))
  for i, part in ipairs(PARTS) do
    seed("\7" .. string.char(i - 1) .. ORIGINAL[part])
  end
  local lines = {}
  for byte = 0, 255 do
    lines[#lines + 1] = base64(string.char(byte)) .. " " .. byte
  end
  for i, piece in ipairs({ "he", "ll", "hell", "hello", " w", " world" }) do
    lines[#lines + 1] = base64(piece) .. " " .. (255 + i)
  end
  seed("\8" .. table.concat(lines, "\n") .. "\n")
  for i, name in ipairs(M2V_FILES) do
    seed("\9" .. string.char(i - 1) .. M2V[name])
  end
end

return function(bytes)
  local pick = (bytes:byte(1) or 0) % #readers + 1
  readers[pick](bytes:sub(2))
end
