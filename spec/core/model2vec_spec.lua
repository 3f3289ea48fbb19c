-- rag.core.model2vec: Model2Vec static embeddings. Hand-made models whose
-- embeddings are worked out by hand (mean, weights, mapping, normalisation,
-- unknown ids, truncation); under `make quality DATA=...` (the tests tagged
-- #data) the upstream fixtures in DATA/model2vec (model2vec-rs's expected
-- embeddings, f16 and i8 against f32) and token ids against the official
-- tokenizers (spec/fixtures/model2vec, generate.mjs);
-- damaged files; misuse; out-of-memory paths.
local core = require("rag.core")
local json = core.json
local helpers = require("spec.helpers")

local m2v = core.model2vec
local read, write, u32 = helpers.read, helpers.write, helpers.u32
-- model2vec-rs's fixtures: only under make quality (DATA/model2vec)
local DATA = helpers.data_dir() and helpers.data_dir() .. "/model2vec"
local FIXTURES = { "config.json", "tokenizer.json", "model.safetensors" }

-- {====== Building models ======}

-- Exact little-endian doubles for the weights used below.
local F64 = {
  [0.25] = "\0\0\0\0\0\0\208\63", [0.5] = "\0\0\0\0\0\0\224\63",
  [1] = "\0\0\0\0\0\0\240\63", [2] = "\0\0\0\0\0\0\0\64", [4] = "\0\0\0\0\0\0\16\64",
}

local function f64s(list)
  local t = {}
  for i, x in ipairs(list) do
    t[i] = assert(F64[x], "no bytes for " .. x)
  end
  return table.concat(t)
end

local function i32s(list)
  local t = {}
  for i, x in ipairs(list) do
    t[i] = u32(x)
  end
  return table.concat(t)
end

local function flat(rows)
  local t = {}
  for _, r in ipairs(rows) do
    for _, x in ipairs(r) do
      t[#t + 1] = x
    end
  end
  return t
end

-- A safetensors file from { {name, dtype, shape, bytes}, ... }.
local function safetensors(tensors)
  local parts, data, off = {}, {}, 0
  for _, t in ipairs(tensors) do
    parts[#parts + 1] = string.format('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}',
      t[1], t[2], table.concat(t[3], ","), off, off + #t[4])
    data[#data + 1] = t[4]
    off = off + #t[4]
  end
  local header = '{"__metadata__":{"format":"pt"},' .. table.concat(parts, ",") .. "}"
  return u32(#header) .. "\0\0\0\0" .. header .. table.concat(data)
end

local function embeddings_f32(rows)
  return { "embeddings", "F32", { #rows, #rows[1] }, core.vec.pack(flat(rows)) }
end

local WORDPIECE = {
  ["[PAD]"] = 0, ["[UNK]"] = 1, hello = 2, world = 3, ["##s"] = 4, ["!"] = 5,
}

local function wordpiece_json(opts)
  opts = opts or {}
  return json.encode({
    version = "1.0",
    added_tokens = opts.added or {
      { id = 0, content = "[PAD]", single_word = false, lstrip = false, rstrip = false,
        normalized = false, special = true },
      { id = 1, content = "[UNK]", single_word = false, lstrip = false, rstrip = false,
        normalized = false, special = true },
    },
    normalizer = opts.normalizer or { type = "BertNormalizer", clean_text = true,
      handle_chinese_chars = true, strip_accents = json.null, lowercase = true },
    pre_tokenizer = opts.pre_tokenizer or { type = "BertPreTokenizer" },
    model = opts.model or { type = "WordPiece", unk_token = "[UNK]",
      continuing_subword_prefix = "##", max_input_chars_per_word = 100, vocab = WORDPIECE },
    padding = opts.padding,
  })
end

-- Rows of the 6-token WordPiece model: [PAD] [UNK] hello world ##s !
local ROWS = { { 9, 9, 9 }, { 7, 7, 7 }, { 1, 2, 3 }, { 4, 0, -2 }, { 0, 2, 0 }, { -1, 0, 5 } }

local made = {}

-- A model directory in a fresh temporary path; files = { name = bytes }.
local function model_dir(files)
  local dir = helpers.tmpname()
  assert(os.execute("mkdir " .. dir))
  for name, bytes in pairs(files) do
    write(dir .. "/" .. name, bytes)
  end
  made[#made + 1] = dir
  return dir
end

local function plain(normalize, extra)
  local files = {
    ["config.json"] = json.encode({ model_type = "model2vec", normalize = normalize }),
    ["tokenizer.json"] = wordpiece_json(),
    ["model.safetensors"] = safetensors({ embeddings_f32(ROWS) }),
  }
  for k, v in pairs(extra or {}) do
    files[k] = v
  end
  return model_dir(files)
end

-- A Unigram tokenizer.json with Metaspace and a normalizer sequence; 7 tokens:
-- <unk> ▁a b ▁ab ▁ ! c
local function unigram_json()
  return json.encode({
    added_tokens = {
      { id = 0, content = "<unk>", special = true, normalized = false, lstrip = false,
        rstrip = false, single_word = false },
    },
    normalizer = { type = "Sequence", normalizers = {
      { type = "Replace", pattern = { String = "!" }, content = " ! " },
      { type = "Replace", pattern = { Regex = "\\s+" }, content = " " },
      { type = "Strip", strip_left = true, strip_right = true },
      { type = "Lowercase" },
    } },
    pre_tokenizer = { type = "Metaspace", replacement = "\226\150\129", prepend_scheme = "always",
      split = false },
    model = { type = "Unigram", unk_id = 0, byte_fallback = false, vocab = {
      { "<unk>", 0 }, { "\226\150\129a", -1 }, { "b", -2 }, { "\226\150\129ab", -2.5 },
      { "\226\150\129", -3 }, { "!", -1 }, { "c", -8 },
    } },
  })
end

-- {====== Comparing ======}

local function near(a, b, rel)
  return math.abs(a - b) <= rel * math.max(math.abs(a), math.abs(b), 1e-30)
end

local function assert_vec(want, got, rel, what)
  assert.equal(#want, #got, what)
  for i = 1, #want do
    assert(near(want[i], got[i], rel or 1e-6),
      string.format("%s: component %d: want %.9g, got %.9g", what or "", i, want[i], got[i]))
  end
end

local function mean(rows, weights)
  local out = {}
  for j = 1, #rows[1] do
    local s = 0
    for i, r in ipairs(rows) do
      s = s + r[j] * (weights and weights[i] or 1)
    end
    out[j] = s / #rows
  end
  return out
end

local function unit(v)
  local s = 0
  for _, x in ipairs(v) do
    s = s + x * x
  end
  local out = {}
  for i, x in ipairs(v) do
    out[i] = x / math.sqrt(s)
  end
  return out
end

local cosine = require("spec.helpers").cosine

local function fails(code, pattern, ok, msg, got)
  assert(ok == nil, "expected a failure")
  assert.equal(code, got, msg)
  assert(msg:find(pattern, 1, true), msg)
  assert(msg:find("^rag%.embed%.model2vec: '"), msg)
end

teardown(function()
  for _, dir in ipairs(made) do
    os.execute("rm -rf " .. dir)
  end
end)

-- {====== Hand-made models ======}

describe("rag.core.model2vec on hand-made models", function()
  it("averages the rows of a text's tokens, without normalising when config says so", function()
    local m = assert(m2v.load(plain(false)))
    assert.same({ 2, 3, 4, 5 }, m:tokenize("Hello worlds!"))
    local e = m:embed({ "Hello worlds!", "hello", "" })
    assert.equal(3, #e)
    assert_vec(mean({ ROWS[3], ROWS[4], ROWS[5], ROWS[6] }), e[1], 1e-7, "mean")
    assert_vec({ 1, 2, 3 }, e[2], 1e-7, "one token")
    assert_vec({ 0, 0, 0 }, e[3], 0, "no tokens")
    assert.equal(3, m:dim())
    local s = m:stats()
    assert.same({ vocab = 6, dim = 3, rows = 6, dtype = "f32", normalize = false, quantized = false,
      median_token_length = 5, tokenizer = "WordPiece" }, s)
  end)

  it("normalises to unit length and drops the unknown id as model2vec does", function()
    local m = assert(m2v.load(plain(true)))
    -- "xyz" is [UNK] (id 1): removed before pooling, so it counts for nothing
    assert.same({ 2 }, m:tokenize("hello xyz"))
    assert.same({ 2 }, m:tokenize("hello [UNK]"))
    local e = m:embed({ "hello xyz world", "xyz", "\t" })
    assert_vec(unit(mean({ ROWS[3], ROWS[4] })), e[1], 1e-6, "unit mean")
    assert_vec({ 0, 0, 0 }, e[2], 0, "only unknown")
    assert_vec({ 0, 0, 0 }, e[3], 0, "only whitespace")
    -- an added token in the text is split out before normalisation: [PAD] is id 0
    assert.same({ 2, 0, 3 }, m:tokenize("hello[PAD]world"))
    assert_vec(unit(mean({ ROWS[3], ROWS[1], ROWS[4] })), m:embed({ "hello[PAD]world" })[1],
      1e-6, "added token")
  end)

  it("cuts the text to max_length x median characters, then the ids to max_length", function()
    local m = assert(m2v.load(plain(false)))
    -- median token length 5: max_length 2 keeps 10 characters, and "worl" is [UNK]
    assert.same({ 2, 3 }, m:tokenize("hello world"))
    assert.same({ 2 }, m:tokenize("hello world", { max_length = 2 }))
    assert.same({ 2, 3 }, m:tokenize("hello world hello", { max_length = 3 }))
    -- without the cut "helloworld" is one unknown word; with it, "hello"
    assert.same({}, m:tokenize("helloworld"))
    assert.same({ 2 }, m:tokenize("helloworld", { max_length = 1 }))
    assert.same({ 5, 5 }, m:tokenize("!!!!!!", { max_length = 2 }))
    assert_vec({ 1, 2, 3 }, m:embed({ "x", "hello world" }, { max_length = 2 })[2], 1e-7,
      "max_length")
    assert_vec({ 0, 0, 0 }, m:embed({ "hello" }, { max_length = 0 })[1], 0, "max_length 0")
  end)

  it("maps ids to shared rows and weights them in a vocabulary-quantized model", function()
    local codebook = { { 1, 0, 0 }, { 0, 2, 0 }, { 0, 0, 4 } }
    local mapping = { 0, 0, 1, 2, 2, 0 }
    local weights = { 1, 1, 0.5, 2, 0.25, 4 }
    local dir = model_dir({
      ["config.json"] = json.encode({ normalize = false }),
      ["tokenizer.json"] = wordpiece_json(),
      ["model.safetensors"] = safetensors({
        { "weights", "F64", { 6 }, f64s(weights) },
        embeddings_f32(codebook),
        { "mapping", "I32", { 6 }, i32s(mapping) },
      }),
    })
    local m = assert(m2v.load(dir))
    local s = m:stats()
    assert.is_true(s.quantized)
    assert.equal(3, s.rows)
    assert.equal(6, s.vocab)
    -- hello -> row 1 x 0.5, world -> row 2 x 2, ##s -> row 2 x 0.25, ! -> row 0 x 4
    local want = mean({ codebook[2], codebook[3], codebook[3], codebook[1] }, { 0.5, 2, 0.25, 4 })
    assert_vec(want, m:embed({ "hello worlds!" })[1], 1e-7, "quantized")
    assert_vec({ 0, 1, 0 }, m:embed({ "hello" })[1], 1e-7, "weighted row")
  end)

  it("packs embeddings as little-endian float32, as rag.vec.pack does", function()
    local m = assert(m2v.load(plain(true)))
    local arrays = m:embed({ "hello world", "worlds" })
    local packed = m:embed({ "hello world", "worlds" }, { packed = true })
    for i = 1, 2 do
      assert.equal(core.vec.pack(arrays[i]), packed[i])
    end
  end)

  it("runs a Unigram tokenizer with Metaspace the way tokenizers does", function()
    local tok = unigram_json()
    local dir = model_dir({
      ["config.json"] = "{}",
      ["tokenizer.json"] = tok,
      ["model.safetensors"] = safetensors({ embeddings_f32({ { 1 }, { 2 }, { 3 }, { 4 }, { 5 },
        { 6 }, { 7 } }) }),
    })
    local m = assert(m2v.load(dir))
    -- "▁ab" (-2.5) beats "▁a" "b" (-3); unknown "x" and "y" fuse into one <unk>,
    -- which a Unigram model keeps (it names no unk_token)
    assert.same({ 3 }, m:tokenize("AB"))
    assert.same({ 3, 3, 4, 5 }, m:tokenize("  ab ab! "))
    assert.same({ 1, 0, 4, 5 }, m:tokenize("axy!"))
    assert.same({ 3, 0, 3 }, m:tokenize("ab<unk>ab"))
    -- no normalize in config.json: unit length, as model2vec-rs defaults
    assert_vec({ 1 }, m:embed({ "ab ab" })[1], 1e-7, "default normalize")
    assert.equal("Unigram", m:stats().tokenizer)
  end)

  it("refuses what it does not support, with code format", function()
    local function with(tok)
      return m2v.load(plain(true, { ["tokenizer.json"] = tok }))
    end
    fails("format", "unsupported tokenizer model type 'BPE'",
      with(wordpiece_json({ model = { type = "BPE", vocab = { a = 0 }, merges = {} } })))
    fails("format", "unsupported normalizer 'Precompiled'",
      with(wordpiece_json({ normalizer = { type = "Precompiled", precompiled_charsmap = "" } })))
    fails("format", "unsupported pre_tokenizer 'ByteLevel'",
      with(wordpiece_json({ pre_tokenizer = { type = "ByteLevel" } })))
    fails("format", "unsupported Replace regex",
      with(wordpiece_json({ normalizer = { type = "Replace", pattern = { Regex = "a+" },
        content = "" } })))
    fails("format", "unsupported padding",
      with(wordpiece_json({ padding = { strategy = { Fixed = 8 } } })))
    fails("format", "unk_token '[UNK]' is not in the vocabulary",
      with(wordpiece_json({ model = { type = "WordPiece", unk_token = "[UNK]",
        vocab = { a = 0 } } })))
    fails("format", "not a valid json object", with("{\"model\": "))
    fails("corrupt", "added token '[SEP]' has id 9, not 6", with(wordpiece_json({ added = {
      { id = 9, content = "[SEP]", special = true, normalized = false } } })))
  end)
end)

-- {====== The upstream fixtures ======}

local function fixture(name)
  return DATA .. "/" .. name
end

if DATA then
  describe("rag.core.model2vec on model2vec-rs's fixtures #data", function()
    assert(helpers.exists(fixture("test-model-float32/model.safetensors")),
      DATA .. " has no model2vec-rs fixtures")

    local function expected(file)
      return json.decode(read(fixture(file)))[1]
    end

    it("embed as model2vec does, within 1e-5", function()
      local f32 = assert(m2v.load(fixture("test-model-float32")))
      local words = {}
      for i = 1, 1000 do
        words[i] = "hello"
      end
      local long = table.concat(words, " ")
      local got = f32:embed({ "hello world", long })
      assert_vec(expected("embeddings_short.json"), got[1], 1e-5, "short")
      assert_vec(expected("embeddings_long.json"), got[2], 1e-5, "long")
      local vq = assert(m2v.load(fixture("test-model-vocab-quantized")))
      assert_vec(expected("embeddings_vocab_quantized.json"), vq:embed({ long })[1], 1e-5, "vq")
      assert.same({ vocab = 29524, dim = 64, rows = 128, dtype = "f32", normalize = true,
        quantized = true, median_token_length = 9, tokenizer = "Unigram" }, vq:stats())
    end)

    it("load f16 and i8 tables whose embeddings agree with f32's", function()
      local f32 = assert(m2v.load(fixture("test-model-float32")))
      local texts = { "hello world", "The quick brown fox jumps over the lazy dog.",
        "retrieval augmented generation", "Москва и 北京", "static embeddings are fast" }
      local want = f32:embed(texts)
      for _, name in ipairs({ "float16", "int8" }) do
        local m = assert(m2v.load(fixture("test-model-" .. name)))
        assert.equal(name == "int8" and "i8" or "f16", m:stats().dtype)
        local got = m:embed(texts)
        for i = 1, #texts do
          assert(cosine(want[i], got[i]) > 0.99, name .. " " .. texts[i])
        end
      end
      -- i8 rows are raw integers with one scale for the whole table, so a
      -- token with a small row (here "a", zipf-weighted) is all zeros, as in model2vec
      local i8 = assert(m2v.load(fixture("test-model-int8")))
      assert.same({ { 0, 0 } }, i8:embed({ "a" }))
    end)

    it("tokenize as the official tokenizers does (spec/fixtures/model2vec)", function()
      local fx = json.decode(read("spec/fixtures/model2vec/cases.json"))
      for name, model in pairs(fx.models) do
        local m = assert(m2v.load(fixture(name)))
        assert.equal(model.median, m:stats().median_token_length)
        for _, c in ipairs(model.cases) do
          local got = m:tokenize(c.text, c.max_length and { max_length = c.max_length })
          assert.same(c.ids, got, name .. ": " .. c.text)
        end
      end
    end)

    it("run other normalizers, pre-tokenizers and options as tokenizers does", function()
      local fx = json.decode(read("spec/fixtures/model2vec/cases.json"))
      for i, v in ipairs(fx.variants) do
        local tj = json.decode(read(fixture(v.base) .. "/tokenizer.json"))
        for k, x in pairs(v.set) do
          tj[k] = x
        end
        for k, x in pairs(v.model) do
          tj.model[k] = x
        end
        local dir = model_dir({
          ["config.json"] = "{}",
          ["tokenizer.json"] = json.encode(tj),
          ["model.safetensors"] = safetensors({ { "embeddings", "F32", { v.rows, 1 },
            string.rep("\0\0\128\63", v.rows) } }),
        })
        local m = assert(m2v.load(dir))
        for _, c in ipairs(v.cases) do
          assert.same(c.ids, m:tokenize(c.text), "variant " .. i .. ": " .. c.text)
        end
      end
    end)
  end)
end

-- {====== Damaged and missing files ======}

describe("rag.core.model2vec refuses damaged directories", function()
  local function copy(files)
    local src = plain(true)
    local out = {}
    for _, f in ipairs(FIXTURES) do
      out[f] = read(src .. "/" .. f)
    end
    for k, v in pairs(files) do
      out[k] = v or nil
    end
    return model_dir(out)
  end

  it("names the missing directory or file, with code io", function()
    local dir = helpers.tmpname()
    fails("io", dir .. "': no such file or directory", m2v.load(dir))
    local d = plain(true)
    os.remove(d .. "/model.safetensors")
    fails("io", d .. "/model.safetensors': no such file", m2v.load(d))
    os.remove(d .. "/config.json")
    fails("io", d .. "/config.json'", m2v.load(d .. "/"))
    fails("format", "not a directory", m2v.load(plain(true) .. "/config.json"))
  end)

  it("refuses a model file that is a FIFO or a directory at once, with code io", function()
    local d = plain(true)
    local fdir, fifo = helpers.fifo()
    os.remove(d .. "/model.safetensors")
    os.execute("ln -s " .. fifo .. " " .. d .. "/model.safetensors")
    local t0 = os.time()
    fails("io", d .. "/model.safetensors': is a fifo", m2v.load(d))
    assert(os.time() - t0 <= 2, "the load waited")
    os.remove(d .. "/model.safetensors")
    os.execute("mkdir " .. d .. "/model.safetensors")
    fails("io", d .. "/model.safetensors': is a directory", m2v.load(d))
    os.execute("rm -rf " .. fdir .. " " .. d .. "/model.safetensors")
  end)

  it("gives corrupt for every truncation of the safetensors file", function()
    local good = read(plain(true) .. "/model.safetensors")
    local dir = copy({})
    local hlen = good:byte(1) + 256 * good:byte(2)
    local cuts = { 0, 1, 7, 8, 9, 8 + hlen - 1, 8 + hlen, 8 + hlen + 1, #good - 4, #good - 1 }
    for _, n in ipairs(cuts) do
      write(dir .. "/model.safetensors", good:sub(1, n))
      local ok, msg, code = m2v.load(dir)
      assert(ok == nil, n)
      assert(code == "corrupt", n .. ": " .. msg)
    end
    write(dir .. "/model.safetensors", good .. "\0")
    fails("corrupt", "1 bytes after the last tensor", m2v.load(dir))
    write(dir .. "/model.safetensors", u32(1000) .. "\0\0\0\0{}")
    fails("corrupt", "header length larger than the file", m2v.load(dir))
    write(dir .. "/model.safetensors", good)
    assert(m2v.load(dir))
  end)

  it("gives format for a bad header or dtype, corrupt for sizes that disagree", function()
    local data = core.vec.pack(flat(ROWS))
    local function with(header, bytes)
      return m2v.load(copy({ ["model.safetensors"] = u32(#header) .. "\0\0\0\0" .. header ..
        (bytes or data) }))
    end
    fails("format", "bad safetensors header", with("{\"embeddings\": [1, 2"))
    fails("format", "unknown dtype 'Q4'",
      with('{"embeddings":{"dtype":"Q4","shape":[6,3],"data_offsets":[0,72]}}'))
    fails("format", "unsupported embeddings dtype",
      with('{"embeddings":{"dtype":"BF16","shape":[6,6],"data_offsets":[0,72]}}'))
    fails("corrupt", "data offsets do not match its shape",
      with('{"embeddings":{"dtype":"F32","shape":[6,4],"data_offsets":[0,72]}}'))
    fails("corrupt", "data offsets do not match its shape",
      with('{"embeddings":{"dtype":"F32","shape":[6,3],"data_offsets":[0,76]}}'))
    fails("corrupt", "shape too large",
      with('{"embeddings":{"dtype":"F32","shape":[4294967296,4294967296],' ..
        '"data_offsets":[0,72]}}'))
    fails("format", "no 'embeddings' tensor",
      with('{"other":{"dtype":"F32","shape":[6,3],"data_offsets":[0,72]}}'))
    fails("format", "is not 2-d",
      with('{"embeddings":{"dtype":"F32","shape":[18],"data_offsets":[0,72]}}'))
    fails("corrupt", "5 embedding rows for 6 token ids",
      with('{"embeddings":{"dtype":"F32","shape":[5,3],"data_offsets":[0,60]}}',
        data:sub(1, 60)))
    fails("corrupt", "overlap or leave a gap", with('{"embeddings":{"dtype":"F32","shape":[6,3],' ..
      '"data_offsets":[0,72]},"x":{"dtype":"F32","shape":[1],"data_offsets":[68,72]}}'))
    local map = '{"embeddings":{"dtype":"F32","shape":[6,3],"data_offsets":[0,72]},' ..
      '"mapping":{"dtype":"I32","shape":[6],"data_offsets":[72,96]}}'
    fails("corrupt", "mapping of id 5 is out of range",
      with(map, data .. i32s({ 0, 1, 2, 3, 4, 6 })))
    assert(with(map, data .. i32s({ 0, 1, 2, 3, 4, 5 })))
  end)

  it("gives format for a config.json that is not a JSON object", function()
    fails("format", "config.json': not a valid json object",
      m2v.load(copy({ ["config.json"] = "[1, 2" })))
  end)
end)

-- {====== Misuse and life cycle ======}

describe("rag.core.model2vec misuse", function()
  it("raises on bad arguments and options, fails on invalid utf-8", function()
    local m = assert(m2v.load(plain(true)))
    assert.has_error(function() m:embed({ "a", 2 }) end,
      "rag.embed.model2vec: embed: texts[2] must be a string, got number")
    assert.has_error(function() m:embed("a") end,
      "rag.embed.model2vec: embed: texts must be a list of strings, got string")
    assert.has_error(function() m:embed({ "a" }, { colour = 1 }) end,
      "rag.embed.model2vec: embed: unknown option 'colour'")
    assert.has_error(function() m:embed({ "a" }, { max_length = -1 }) end,
      "rag.embed.model2vec: embed: option 'max_length' must be an integer in [0, 2147483647]")
    assert.has_error(function() m:embed({ "a" }, { max_length = 1.5 }) end,
      "rag.embed.model2vec: embed: option 'max_length' must be an integer in [0, 2147483647]")
    assert.has_error(function() m:embed({ "a" }, { packed = "yes" }) end,
      "rag.embed.model2vec: embed: option 'packed' must be a boolean, got string")
    assert.has_error(function() m:tokenize(5) end,
      "rag.embed.model2vec: tokenize: text must be a string, got number")
    local ok, msg, code = m:embed({ "fine", "bad \255 byte" })
    assert.is_nil(ok)
    assert.equal("encoding", code)
    assert.equal("rag.embed.model2vec: embed: text 2: invalid utf-8 at byte 5", msg)
    ok, msg, code = m:tokenize("\192\128")
    assert.is_nil(ok)
    assert.equal("encoding", code)
    assert.equal("rag.embed.model2vec: tokenize: text 1: invalid utf-8 at byte 1", msg)
    assert.same({ 2 }, m:tokenize("hello"))
    assert.same({}, m:embed({}))
  end)

  it("raises on a directory path with a NUL byte instead of loading the shorter one", function()
    local dir = plain(true)
    assert(m2v.load(dir))
    assert.has_error(function() m2v.load(dir .. "\0/other") end,
      "rag.embed.model2vec: path contains a NUL byte")
  end)

  it("closes idempotently and raises when used closed", function()
    local m = assert(m2v.load(plain(true)))
    assert.truthy(tostring(m):find("^rag%.model2vec %("))
    m:close()
    m:close()
    assert.equal("rag.model2vec (closed)", tostring(m))
    assert.has_error(function() m:embed({ "a" }) end,
      "rag.embed.model2vec: embed: model is closed")
    assert.has_error(function() m:dim() end, "rag.embed.model2vec: dim: model is closed")
    local mt = getmetatable(m)
    mt.__gc(m)
    if mt.__close then
      mt.__close(m)
    end
  end)
end)

-- {====== Out of memory ======}

describe("rag.core.model2vec allocation failures", function()
  if not core._fail_alloc then
    it("need a RAG_TESTING build", function()
      pending("run make asan")
    end)
    return
  end

  it("load, embed and tokenize raise and recover at every fault point", function()
    local dir = plain(true)
    assert.is_true(helpers.oom_walk(function() assert(m2v.load(dir)):close() end) >= 10)
    local m = assert(m2v.load(dir))
    local want = m:embed({ "Hello worlds!", "hello" })
    local function same()
      assert.same(want, m:embed({ "Hello worlds!", "hello" }))
    end
    local fresh = assert(m2v.load(dir))
    helpers.oom_walk(function() fresh:embed({ "Hello worlds!", "hello" }, { packed = true }) end,
      function() assert.same(want, fresh:embed({ "Hello worlds!", "hello" })) end)
    helpers.oom_walk(function() m:tokenize("hello worlds hello") end, same)
    -- a vocabulary-quantized Unigram model
    local vq = model_dir({
      ["config.json"] = json.encode({ normalize = true }),
      ["tokenizer.json"] = unigram_json(),
      ["model.safetensors"] = safetensors({
        { "weights", "F64", { 7 }, f64s({ 1, 2, 0.5, 4, 0.25, 1, 2 }) },
        embeddings_f32({ { 1, 0 }, { 0, 2 }, { 3, 1 } }),
        { "mapping", "I32", { 7 }, i32s({ 0, 1, 2, 2, 0, 1, 0 }) },
      }),
    })
    assert.is_true(helpers.oom_walk(function() assert(m2v.load(vq)):close() end) >= 10)
    local q = assert(m2v.load(vq))
    assert.is_true(q:stats().quantized)
    helpers.oom_walk(function() q:embed({ "Ab ab! c xy", "AB" }) end)
  end)
end)
