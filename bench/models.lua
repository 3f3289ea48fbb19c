-- bench/models.lua: rag.embed.bert and rag.rerank.cross_encoder on one core
-- (issue 28, acceptance C and D), next to a batched numpy forward pass of
-- the same shape in the same run and to the core's measured peak.
--
-- Models: random weights in all-MiniLM-L6-v2's shape (vocabulary 30,522,
-- hidden 384, 6 layers, 12 heads, feed-forward 1,536, 512 positions, mean
-- pooling, normalised) and ms-marco-MiniLM-L-6-v2's (the same encoder, the
-- pooler and a one-logit classifier), written as downloaded by
-- spec/support/bert_ref.py with the bge WordPiece tokenizer of
-- DATA/model2vec. Texts: batches of 32, each exactly 16, 64 or 128 tokens
-- ([CLS] and [SEP] included). Figures: sentences/s and tokens/s (median of
-- 5 timed runs after a warm-up), GFLOP/s counting 2 m n k for every
-- product (projections, feed-forward, attention's two), and that rate's
-- share of the peak bench/peak_fma.c measures on the same core. The peer:
-- `bert_ref.py bench` (numpy float32, one matmul per layer's Q/K/V, on
-- OpenBLAS with one thread when libopenblas0-pthread is installed).
-- D: the time to load the f32 model (median of 5), and the private memory
-- a second process adds when it loads the model the first one has loaded.
--   make bench-models DATA=../shared/data
local rag = require("rag")
local socket = require("socket")
local util = require("bench.util")

local format, concat = string.format, table.concat
local gettime, median = socket.gettime, util.median

local PY = "/usr/bin/python3"
local data = arg[1]
local tok = data and (data .. "/model2vec/test-model-float32/tokenizer.json")
if not tok or not util.sh("ls " .. tok .. " 2>/dev/null"):find("tokenizer") then
  print("skipped: no DATA/model2vec tokenizer.json; run make bench-models DATA=../shared/data")
  return
end
local dir = "build/bench-models"
os.execute("mkdir -p " .. dir)

local function sh_ok(cmd)
  local r = os.execute(cmd)
  return r == true or r == 0
end

local function make(path, args)
  if util.sh("ls " .. path .. "/model.safetensors 2>/dev/null") == "" then
    assert(sh_ok(PY .. " spec/support/bert_ref.py make " .. path .. " " .. args
      .. " --tokenizer " .. tok .. " > /dev/null"), "bert_ref.py make failed")
  end
end
make(dir .. "/minilm", "--kind embed --seed 1 --max-seq-length 256")
make(dir .. "/msmarco", "--kind cross --seed 2")

local peak = {}
for line in io.popen("build/peak_fma"):lines() do
  local k, v = line:match("^(%S+) (%S+)$")
  peak[k] = tonumber(v)
end

print(format("machine: %s; one core (taskset); %s", util.cpu(), _VERSION))
print(format("peak f32 FMA rate of one core: AVX-512 %s GFLOP/s, AVX2 %s GFLOP/s",
  tostring(peak.avx512), tostring(peak.avx2)))

local H, FF, L = 384, 1536, 6
local function flops(batch, seq)
  local dense = 2 * seq * (4 * H * H + 2 * H * FF) * L
  local attention = 2 * 2 * seq * seq * H * L
  return batch * (dense + attention)
end

-- 32 texts of `seq` tokens: one word the tokenizer keeps whole, repeated.
local function texts_of(m, seq)
  local word = "the"
  local n = #m:tokenize(word) - 2
  assert(n == 1, "'the' is not one token")
  local t = {}
  for i = 1, 32 do
    t[i] = (word .. " "):rep(seq - 2)
  end
  assert(#m:tokenize(t[1]) == seq)
  return t
end

local function time(fn)
  fn()
  local t = {}
  for r = 1, 5 do
    local t0 = gettime()
    fn()
    t[r] = gettime() - t0
  end
  return median(t)
end

local rows = {}
local function row(what, ours, peer, note)
  rows[#rows + 1] = { what, ours, peer or "", note or "" }
end

-- {====== C: speed ======}

local emb = assert(rag.embed.bert(dir .. "/minilm"))
local q8 = assert(rag.embed.bert(dir .. "/minilm", { quantize = "int8" }))
local kernel = emb:stats().kernel:match("^avx512") and "avx512" or emb:stats().kernel
for _, seq in ipairs({ 16, 64, 128 }) do
  local texts = texts_of(emb, seq)
  local s = time(function()
    assert(emb:embed(texts))
  end)
  local gf = flops(32, seq) / s / 1e9
  local np = util.sh(PY .. " spec/support/bert_ref.py bench --threads 1 --batch 32 --seq " .. seq)
  local ref = rag.json.decode(np ~= "" and np or "{}") or {}
  local share = peak[kernel] and format("%.0f%% of %s peak", 100 * gf / peak[kernel], kernel) or ""
  print(format("embed f32, 32 x %3d tokens: %7.1f sentences/s, %8.0f tokens/s, %6.1f GFLOP/s "
    .. "(%s) | numpy %s: %s sentences/s, %s GFLOP/s", seq, 32 / s, 32 * seq / s, gf, share,
    tostring(ref.blas), tostring(ref.sentences_per_s), tostring(ref.gflops)))
  row(format("embedder f32, 32 texts x %d tokens, sentences/s", seq), format("%.1f", 32 / s),
    ref.sentences_per_s and format("%.1f", ref.sentences_per_s) or "",
    format("%.1f GFLOP/s, %s; x%.2f numpy", gf, share,
      ref.sentences_per_s and (32 / s) / ref.sentences_per_s or 0))
  local s8 = time(function()
    assert(q8:embed(texts))
  end)
  print(format("embed int8, 32 x %3d tokens: %7.1f sentences/s, %8.0f tokens/s, x%.2f f32", seq,
    32 / s8, 32 * seq / s8, s / s8))
  row(format("embedder int8, 32 texts x %d tokens, sentences/s", seq), format("%.1f", 32 / s8),
    "", format("x%.2f f32 (target >= 2)", s / s8))
end
emb:close()
q8:close()

local ce = assert(rag.rerank.cross_encoder(dir .. "/msmarco"))
do
  local q = ("the "):rep(14)
  local texts = {}
  for i = 1, 32 do
    texts[i] = ("the "):rep(110)
  end
  local s = time(function()
    assert(ce:score(q, texts))
  end)
  print(format("cross-encoder f32, 32 pairs of 128 tokens: %.1f pairs/s", 32 / s))
  row("cross-encoder f32, 32 pairs x 128 tokens, pairs/s", format("%.1f", 32 / s))
end
ce:close()

-- {====== D: loading and sharing ======}

do
  local t = {}
  for r = 1, 5 do
    collectgarbage()
    local t0 = gettime()
    local m = assert(rag.embed.bert(dir .. "/minilm"))
    t[r] = gettime() - t0
    m:close()
  end
  local size = tonumber(util.sh("stat -c %s " .. dir .. "/minilm/model.safetensors"))
  print(format("load f32 model (%.1f MB): %.1f ms (median of 5)", size / 1e6, median(t) * 1e3))
  row("load the f32 MiniLM-shaped model, ms", format("%.1f", median(t) * 1e3), "", "<= 100")
  -- a second process: private memory (RSS minus shared file pages) after
  -- loading the model and embedding once, against the same without loading
  local probe = [[
    local rag = require("rag")
    local function priv()
      local f = io.open("/proc/self/smaps_rollup")
      local s = f:read("*a")
      f:close()
      return tonumber(s:match("Private_Clean:%s+(%d+)"))
        + tonumber(s:match("Private_Dirty:%s+(%d+)"))
    end
    local before = priv()
    local m = assert(rag.embed.bert("]] .. dir .. [[/minilm"))
    assert(m:embed({ "the the the" }))
    io.write(priv() - before, "\n")
  ]]
  local held = assert(rag.embed.bert(dir .. "/minilm")) -- the first process's copy
  assert(held:embed({ "warm the page cache" }))
  local kb = tonumber(util.sh(format("%s -e %q", arg[-1] or "lua5.4", probe)))
  print(format("a second process loading it adds %d kB private (%.1f%% of the %.1f MB file)",
    kb, 100 * kb * 1024 / size, size / 1e6))
  row("second process: private memory added, % of the model's size",
    format("%.1f%%", 100 * kb * 1024 / size), "", "< 10%")
  held:close()
end

print("")
print(format("%-62s %-12s %-10s %s", "measure", "rag", "numpy", "note"))
for _, r in ipairs(rows) do
  print(format("%-62s %-12s %-10s %s", r[1], r[2], r[3], r[4]))
end
local _ = concat
