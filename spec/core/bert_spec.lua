-- rag.embed.bert and rag.rerank.cross_encoder (rag.core.bert) against an
-- independent numpy reference (spec/support/bert_ref.py): small random
-- models in BERT's layout, written as users download them, with a
-- WordPiece tokenizer.json made here; tokens, embeddings and cross-encoder
-- scores compared with the reference's float64 forward pass. The
-- MiniLM-sized models and 200 texts are `make test-models` (.ci/run).
local rag = require("rag")
local helpers = require("spec.helpers")

local PY = "/usr/bin/python3" -- Debian's, with python3-numpy
local REF = "spec/support/bert_ref.py"

-- Did the shell command succeed? (os.execute's result differs in 5.1)
local function ok(cmd)
  local r = os.execute(cmd)
  return r == true or r == 0
end

if not ok(PY .. " -c 'import numpy' >/dev/null 2>&1") then
  describe("rag.embed.bert", function()
    it("needs numpy for its reference", function()
      pending("no numpy: apt-get install python3-numpy (make test installs it)")
    end)
  end)
  return
end

local json = rag.json

-- Runs the reference's subcommand on `input` (a Lua value, as JSON) and
-- decodes its output.
local function ref(args, input)
  local inp = helpers.tmpname()
  helpers.write(inp, json.encode(input))
  local p = assert(io.popen(PY .. " " .. REF .. " " .. args .. " < " .. inp))
  local out = p:read("*a")
  p:close()
  os.remove(inp)
  return json.decode(out)
end

--- A WordPiece tokenizer.json as Hugging Face writes BERT's: BertNormalizer
-- (lowercase, accents stripped), BertPreTokenizer, WordPiece with "##", and
-- the [CLS] A [SEP] / [CLS] A [SEP] B [SEP] template. A vocabulary of
-- whole words, letters, pieces and a few CJK characters, ids as BERT's
-- ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102).
local function tokenizer_json()
  local vocab, id = {}, 0
  local function add(t)
    if vocab[t] == nil then
      vocab[t] = id
      id = id + 1
    end
  end
  add("[PAD]")
  for i = 1, 99 do
    add("[unused" .. i .. "]")
  end
  add("[UNK]")
  add("[CLS]")
  add("[SEP]")
  add("[MASK]")
  for c in ("!\"#$%&'()*+,-./0123456789:;<=>?@[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~")
      :gmatch(".") do
    add(c)
    add("##" .. c)
  end
  for w in ([[the of and in to a is was for with that on by as are from
    at be this an which or it were cells cell protein cancer patients study
    results we these has have not been its their between two after expression
    gene mice human blood brain white matter diffusion tumor tumour growth
    vitamin risk treatment clinical effect effects level levels data high
    low un ##aff ##able ##ing ##ed ##s ##ly ##er ##tion play run walk
    hello world query text naive cafe]]):gmatch("%S+") do
    add(w)
  end
  for c in ("中文字日本語细胞蛋白"):gmatch("[\xe4-\xef][\x80-\xbf][\x80-\xbf]") do
    add(c)
  end
  local cls, sep = vocab["[CLS]"], vocab["[SEP]"]
  return json.encode({
    version = "1.0", truncation = json.null, padding = json.null, added_tokens = {},
    normalizer = { type = "BertNormalizer", clean_text = true, handle_chinese_chars = true,
      strip_accents = json.null, lowercase = true },
    pre_tokenizer = { type = "BertPreTokenizer" },
    post_processor = { type = "TemplateProcessing",
      single = { { SpecialToken = { id = "[CLS]", type_id = 0 } },
        { Sequence = { id = "A", type_id = 0 } },
        { SpecialToken = { id = "[SEP]", type_id = 0 } } },
      pair = { { SpecialToken = { id = "[CLS]", type_id = 0 } },
        { Sequence = { id = "A", type_id = 0 } },
        { SpecialToken = { id = "[SEP]", type_id = 0 } },
        { Sequence = { id = "B", type_id = 1 } },
        { SpecialToken = { id = "[SEP]", type_id = 1 } } },
      special_tokens = { ["[CLS]"] = { id = "[CLS]", ids = { cls }, tokens = { "[CLS]" } },
        ["[SEP]"] = { id = "[SEP]", ids = { sep }, tokens = { "[SEP]" } } } },
    decoder = { type = "WordPiece", prefix = "##", cleanup = true },
    model = { type = "WordPiece", unk_token = "[UNK]", continuing_subword_prefix = "##",
      max_input_chars_per_word = 100, vocab = json.object(vocab) },
  })
end

-- Texts of every kind the issue names: empty, one word, CJK, accents,
-- punctuation, unknown words, and longer than the model's maximum (32).
local TEXTS = {
  "", "a", "cells", "Hello, world!", "naïve café", "中文字 日本語", "细胞蛋白 protein",
  "unaffable", "Un-aff-able!!! (play) [run] {walk}", "xyzzy qwerty zzzz",
  "The effect of vitamin D on the risk of cancer in patients.",
  "White matter diffusion in the brain of mice after treatment.",
  "   spaces\tand\nnewlines   ", "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ", "ĀĒĪŌŪ āēīōū",
  "emoji 😀 and symbols © ® ™", "1234567890 3.14159 2,718",
  ("cells protein "):rep(40), -- over the maximum
  ("the brain white matter diffusion tumor growth in mice "):rep(8),
  "Gene expression levels were high in human blood; low in tumour cells.",
}

local dir = helpers.tmpname()
os.execute("mkdir -p " .. dir)
local tok = dir .. "/tokenizer.json"
helpers.write(tok, tokenizer_json())
local SMALL = "--layers 2 --hidden 64 --heads 4 --ff 128 --max-seq-length 32 --tokenizer " .. tok
local EMB, CROSS, HALF, CLS = dir .. "/emb", dir .. "/cross", dir .. "/half", dir .. "/cls"
local function make(path, args)
  assert(ok(PY .. " " .. REF .. " make " .. path .. " " .. args .. " >/dev/null"),
    "bert_ref.py make failed")
end

local cosine = require("spec.helpers").cosine

local function close_to(a, b, tol, what)
  assert.are.equal(#b, #a, what)
  local worst = 0
  for i = 1, #a do
    worst = math.max(worst, math.abs(a[i] - b[i]))
  end
  assert.is_true(worst <= tol, (what or "") .. ": differs by " .. worst)
end

describe("rag.embed.bert", function()
  setup(function()
    make(EMB, "--kind embed --seed 11 " .. SMALL)
    make(CROSS, "--kind cross --seed 12 " .. SMALL)
    make(HALF, "--kind embed --seed 13 --dtype f16 --no-normalize " .. SMALL)
    make(CLS, "--kind embed --seed 14 --pooling cls " .. SMALL)
  end)
  teardown(function()
    os.execute("rm -rf " .. dir)
  end)

  it("reads the folder's settings: sizes, pooling, normalisation, maximum", function()
    local m = assert(rag.embed.bert(EMB))
    local st = m:stats()
    assert.are.same({ "embedder", 64, 2, 4, 128, 30522, 32, "mean", true, "f32" },
      { st.kind, st.dim, st.layers, st.heads, st.ff, st.vocab, st.max_tokens, st.pooling,
        st.normalize, st.dtype })
    assert.are.equal(64, m:dim())
    assert.are.equal(32, m:max_tokens())
    local h = assert(rag.embed.bert(HALF)):stats()
    assert.are.same({ "f16", false }, { h.dtype, h.normalize })
    assert.are.equal("cls", assert(rag.embed.bert(CLS)):stats().pooling)
    m:close()
  end)

  it("tokenizes as the reference: ids, type ids, [CLS]/[SEP], truncation", function()
    local m = assert(rag.embed.bert(EMB))
    local want = ref("tokenize " .. EMB, TEXTS)
    for i, t in ipairs(TEXTS) do
      local ids, types = assert(m:tokenize(t))
      assert.are.same(want[i].ids, ids, t)
      assert.are.same(want[i].type_ids, types, t)
    end
    assert.are.equal(32, #m:tokenize(TEXTS[18]))
    local ce = assert(rag.rerank.cross_encoder(CROSS))
    local pairs_ = {}
    for i, t in ipairs(TEXTS) do
      pairs_[i] = { TEXTS[#TEXTS + 1 - i], t }
    end
    -- over the maximum: a tie (the second side keeps the odd token), and
    -- either side longer
    local long, longer = ("cells protein "):rep(20), ("cells protein "):rep(30)
    pairs_[#pairs_ + 1] = { long, long }
    pairs_[#pairs_ + 1] = { longer, long }
    pairs_[#pairs_ + 1] = { long, longer }
    pairs_[#pairs_ + 1] = { "cells", longer }
    pairs_[#pairs_ + 1] = { longer, "cells protein cancer" }
    want = ref("tokenize " .. CROSS, pairs_)
    for i, p in ipairs(pairs_) do
      local ids, types = assert(ce.model:tokenize(p[1], p[2]))
      assert.are.same(want[i].ids, ids, p[1] .. " | " .. p[2])
      assert.are.same(want[i].type_ids, types, p[1] .. " | " .. p[2])
    end
  end)

  for _, case in ipairs({ { "f32, mean, normalised", EMB }, { "f16, not normalised", HALF },
      { "cls pooling", CLS } }) do
    -- (1e-4 is the issue's bound for MiniLM's size; a small model's f32
    -- sums stay far closer, and 1e-6 catches an approximated GELU)
    it("embeds as the reference within 1e-6 (" .. case[1] .. "), both kernels", function()
      local want = ref("embed " .. case[2], TEXTS)
      for _, portable in ipairs({ false, true }) do
        local m = assert(rag.embed.bert(case[2], { portable = portable }))
        local got = assert(m:embed(TEXTS))
        for i = 1, #TEXTS do
          close_to(got[i], want[i], 1e-6, TEXTS[i])
        end
        m:close()
      end
    end)
  end

  it("runs its dense layers in int8 on request, within cosine 0.99 of the reference",
    function()
    local want = ref("embed " .. EMB, TEXTS)
    for _, portable in ipairs({ false, true }) do
      local m = assert(rag.embed.bert(EMB, { quantize = "int8", portable = portable }))
      assert.are.equal("int8", m:stats().weights)
      local got = assert(m:embed(TEXTS))
      for i = 1, #TEXTS do
        local c = cosine(got[i], want[i])
        assert.is_true(c >= 0.99 and c < 1 - 1e-9, TEXTS[i] .. ": cosine " .. c)
      end
      m:close()
    end
    assert.are.equal("f32", assert(rag.embed.bert(EMB, { quantize = "none" })):stats().weights)
    assert.has_error(function() rag.embed.bert(EMB, { quantize = "int4" }) end,
      "rag.bert.load: option 'quantize' must be \"int8\" or \"none\"")
  end)

  it("gives a text the same embedding alone and in any batch", function()
    local m = assert(rag.embed.bert(EMB))
    local all = assert(m:embed(TEXTS))
    for i = #TEXTS, 1, -3 do
      close_to(assert(m:embed({ TEXTS[i] }))[1], all[i], 1e-6, TEXTS[i])
    end
    local packed = assert(m:embed({ TEXTS[5] }, { packed = true }))[1]
    assert.are.equal(64 * 4, #packed)
  end)

  it("scores pairs as the reference's cross-encoder within 1e-6, and reranks by them",
    function()
    local ce = assert(rag.rerank.cross_encoder(CROSS))
    local q = "vitamin D and cancer risk"
    local pairs_ = {}
    for i, t in ipairs(TEXTS) do
      pairs_[i] = { q, t }
    end
    local want = ref("score " .. CROSS, pairs_)
    close_to(assert(ce:score(q, TEXTS)), want, 1e-6, "scores")
    local order = {}
    for i = 1, #TEXTS do
      order[i] = i
    end
    table.sort(order, function(a, b)
      if want[a] ~= want[b] then
        return want[a] > want[b]
      end
      return a < b
    end)
    local hits = {}
    for i, t in ipairs(TEXTS) do
      hits[i] = { id = "d" .. i, text = t }
    end
    local ranked = assert(ce:rerank(q, hits, 5))
    assert.are.equal(5, #ranked)
    for i = 1, 5 do
      assert.are.equal(order[i], ranked[i].index)
      assert.are.equal("d" .. order[i], ranked[i].id)
    end
    assert.are.equal(#TEXTS, #assert(ce:rerank(q, TEXTS)))
    assert.are.equal(3, #assert(ce:rerank(q, TEXTS, { top_n = 3 })))
  end)

  it("serves rag.index as its embedder and a pipeline as its rerank step", function()
    local m = assert(rag.embed.bert(EMB))
    local idx = rag.index.new({ embedder = m, vector = "exact" })
    local docs = {}
    for i, t in ipairs(TEXTS) do
      if t ~= "" then
        docs[#docs + 1] = { id = "t" .. i, text = t }
      end
    end
    assert(idx:add_many(docs))
    local hits = assert(idx:search(TEXTS[11], { mode = "vector", k = 3 }))
    assert.are.equal("t11", hits[1].doc_id) -- its own text is nearest
    local ce = assert(rag.rerank.cross_encoder(CROSS))
    local q = "vitamin D and cancer"
    local p = rag.pipeline.naive({ index = idx, rerank = ce, k = 2, fetch_k = 6 })
    local r = assert(p:answer(q))
    assert.are.equal(2, #r.contexts)
    for _, c in ipairs(r.contexts) do -- scored by the cross-encoder
      assert.is_true(math.abs(c.score - assert(ce:score(q, { c.text }))[1]) < 1e-6)
    end
    assert.is_true(r.contexts[1].score >= r.contexts[2].score)
  end)

  it("refuses what is not a model it can run, with nil, msg, code", function()
    local function fails(code, pattern, ...)
      local m, msg, c = ...
      assert.is_nil(m)
      assert.are.equal(code, c, msg)
      assert.matches(pattern, msg)
    end
    local bad = dir .. "/bad"
    local function fresh()
      os.execute("rm -rf " .. bad .. " && cp -r " .. EMB .. " " .. bad)
    end
    fails("io", "no such file", rag.embed.bert(dir .. "/none"))
    fresh()
    os.remove(bad .. "/config.json")
    fails("io", "config.json", rag.embed.bert(bad))
    fresh()
    os.remove(bad .. "/model.safetensors")
    fails("io", "model.safetensors", rag.embed.bert(bad))
    fresh()
    local cfg = json.decode(helpers.read(bad .. "/config.json"))
    cfg.hidden_size = 32
    cfg.num_attention_heads = 4
    helpers.write(bad .. "/config.json", json.encode(cfg))
    fails("format", "wrong shape", rag.embed.bert(bad))
    cfg.hidden_size, cfg.model_type = 64, "roberta"
    helpers.write(bad .. "/config.json", json.encode(cfg))
    fails("format", "model_type", rag.embed.bert(bad))
    fresh()
    local t = json.decode(helpers.read(bad .. "/tokenizer.json"))
    t.model = { type = "Unigram", unk_id = 0, vocab = { { "[UNK]", 0 }, { "a", -1 } } }
    t.pre_tokenizer = { type = "WhitespaceSplit" }
    helpers.write(bad .. "/tokenizer.json", json.encode(t))
    fails("format", "WordPiece", rag.embed.bert(bad))
    fresh()
    local st = helpers.read(EMB .. "/model.safetensors")
    for _, n in ipairs({ 0, 7, 8, 100, math.floor(#st / 2), #st - 1 }) do
      helpers.write(bad .. "/model.safetensors", st:sub(1, n))
      local m, msg, code = rag.embed.bert(bad)
      assert.is_nil(m)
      assert.is_true(code == "corrupt" or code == "format", msg)
    end
    fails("format", "cross%-encoder", rag.embed.bert(CROSS))
    fails("format", "embedder", rag.rerank.cross_encoder(EMB))
    local m = assert(rag.embed.bert(EMB))
    fails("encoding", "text 2: invalid utf%-8", m:embed({ "ok", "bad \255" }))
    assert.has_error(function() m:embed("not a list") end,
      "rag.bert: embed: texts must be a list of strings, got string")
    assert.has_error(function() m:embed({ 1 }) end,
      "rag.bert: embed: texts[1] must be a string, got number")
    m:close()
    assert.has_error(function() m:embed({ "closed" }) end, "rag.bert: embed: model is closed")
  end)
end)

-- {====== MiniLM's shapes and SciFact (make quality DATA=...) ======}

local DATA = helpers.data_dir()
if DATA then
  describe("rag.embed.bert in MiniLM's shapes, and SciFact's tokens #data", function()
    local BGE = DATA .. "/model2vec/test-model-float32/tokenizer.json"
    local big = helpers.tmpname()
    local docs = helpers.scifact() -- all 5,183 with the data folder
    setup(function()
      os.execute("mkdir -p " .. big)
      -- all-MiniLM-L6-v2 and ms-marco-MiniLM-L-6-v2: the generator's defaults
      make(big .. "/emb", "--kind embed --seed 21 --max-seq-length 128 --tokenizer " .. BGE)
      make(big .. "/cross", "--kind cross --seed 22 --max-seq-length 128 --tokenizer " .. BGE)
      -- a small model whose positions cover every SciFact document untruncated
      make(big .. "/long", "--kind embed --seed 23 --layers 1 --hidden 32 --heads 2 --ff 64 "
        .. "--maxpos 8192 --max-seq-length 8192 --tokenizer " .. BGE)
    end)
    teardown(function()
      os.execute("rm -rf " .. big)
    end)

    -- 200 texts: the hand-made ones, then SciFact titles and abstracts cut
    -- at varied lengths (one word to past the maximum of 128 tokens)
    local texts = {}
    for _, t in ipairs(TEXTS) do
      texts[#texts + 1] = t
    end
    local lens = { 1, 3, 8, 20, 50, 120, 400, 2000 }
    local i = 0
    while #texts < 200 do
      i = i + 1
      local d = docs[i]
      texts[#texts + 1] = i % 2 == 0 and d.title or d.text:sub(1, lens[i % #lens + 1])
    end

    it("embeds 200 texts as the reference within 1e-4", function()
      local want = ref("embed " .. big .. "/emb", texts)
      local m = assert(rag.embed.bert(big .. "/emb"))
      assert.are.same({ 384, 6, 12, 1536, 30522 }, { m:dim(), m:stats().layers,
        m:stats().heads, m:stats().ff, m:stats().vocab })
      local got = assert(m:embed(texts))
      for k = 1, #texts do
        close_to(got[k], want[k], 1e-4, texts[k])
      end
      m:close()
    end)

    it("keeps int8 embeddings of the 200 texts within cosine 0.99 of f32", function()
      local f = assert(rag.embed.bert(big .. "/emb"))
      local q = assert(rag.embed.bert(big .. "/emb", { quantize = "int8" }))
      local a, b = assert(f:embed(texts)), assert(q:embed(texts))
      local worst = 1
      for k = 1, #texts do
        worst = math.min(worst, cosine(a[k], b[k]))
      end
      assert.is_true(worst >= 0.99, "cosine " .. worst)
      f:close()
      q:close()
    end)

    it("scores 200 pairs as the reference's cross-encoder within 1e-4", function()
      local pairs_ = {}
      for k, t in ipairs(texts) do
        pairs_[k] = { texts[(k * 7) % #texts + 1], t }
      end
      local want = ref("score " .. big .. "/cross", pairs_)
      local ce = assert(rag.rerank.cross_encoder(big .. "/cross"))
      for k, p in ipairs(pairs_) do
        close_to(assert(ce:score(p[1], { p[2] })), { want[k] }, 1e-4, p[1] .. " | " .. p[2])
      end
      ce:close()
    end)

    it("tokenizes every SciFact document as the reference", function()
      local all = {}
      for k, d in ipairs(docs) do
        all[k] = d.title .. "\n" .. d.text
      end
      local want = ref("tokenize " .. big .. "/long", all)
      local m = assert(rag.embed.bert(big .. "/long"))
      local bad = 0
      for k, t in ipairs(all) do
        local ids = assert(m:tokenize(t))
        local same = #ids == #want[k].ids
        for j = 1, same and #ids or 0 do
          if ids[j] ~= want[k].ids[j] then
            same = false
            break
          end
        end
        if not same then
          bad = bad + 1
        end
      end
      assert.are.equal(0, bad, bad .. " of " .. #all .. " documents tokenize differently")
      assert.are.equal(5183, #all)
      m:close()
    end)
  end)
end
