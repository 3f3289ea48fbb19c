#!/usr/bin/env python3
"""Independent numpy reference of a BERT sentence encoder and cross-encoder.

Written from the published definitions (BERT, Hugging Face `tokenizers`,
transformers' BertModel / BertForSequenceClassification, sentence-transformers'
Transformer -> Pooling -> Normalize and CrossEncoder), not from the C code it
checks. Python 3 + numpy only (Debian: apt-get install python3-numpy; the
Debian numpy lives in /usr/bin/python3, not in a pyenv python).

Usage (JSON on stdin, JSON on stdout):

  bert_ref.py make DIR --kind embed|cross --seed N [--dtype f32|f16]
      [--layers 6] [--hidden 384] [--heads 12] [--ff 1536] [--vocab 30522]
      [--maxpos 512] [--max-seq-length N] [--tokenizer PATH]
      [--no-normalize] [--pooling mean|cls]
        writes a hub-style model folder with random weights.
  bert_ref.py tokenize DIR      stdin ["text", ...] or [["query", "text"], ...]
        -> [{"ids": [...], "type_ids": [...]}, ...]
  bert_ref.py embed DIR [--batch N]   stdin ["text", ...] -> [[float, ...], ...]
  bert_ref.py score DIR [--batch N]   stdin [["query", "text"], ...] -> [float, ...]
  bert_ref.py bench [--threads 1] [--batch 32] [--seq 128] [--dtype f32]
  bert_ref.py selfcheck         runs the hand checks below, prints "ok"

The reference computes in float64 from the stored weights (f16 weights are
widened exactly). GELU is the exact erf form; erf comes from Python's
math.erf applied elementwise through np.frompyfunc (correctly rounded to
about 1 ulp, so far below the 1e-12 asked for; slow but simple). The bench
uses float32 and the Abramowitz-Stegun 7.1.26 erf (|error| < 1.5e-7).
"""
import argparse
import json
import math
import os
import shutil
import statistics
import struct
import sys
import time
import unicodedata

np = None  # imported in main(), after the BLAS thread count is set

DEFAULT_TOKENIZER = "/work/shared/data/model2vec/test-model-float32/tokenizer.json"


# ======================================================================
# safetensors: 8-byte LE header length, JSON header, raw LE tensor data
# ======================================================================

ST_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, numpy array); stored in that order."""
    header, offset = {}, 0
    for name, arr in tensors:
        code = {"float32": "F32", "float16": "F16", "float64": "F64"}[arr.dtype.name]
        header[name] = {"dtype": code, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    if metadata is not None:
        header["__metadata__"] = metadata
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for _, arr in tensors:
            f.write(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes())


def read_safetensors(path):
    """Returns {name: float64 array}. F32, F16, F64 and BF16 are understood."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    base, out = 8 + hlen, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = data[base + a: base + b]
        if info["dtype"] == "BF16":  # top half of a float32
            u = np.frombuffer(buf, "<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(buf, ST_DTYPES[info["dtype"]])
        out[name] = arr.astype(np.float64).reshape(info["shape"])
    return out


# ======================================================================
# make: a hub-style model folder with random weights
# ======================================================================

def tensor_shapes(a, prefix):
    """(name, shape, kind) in checkpoint order; kind picks the random law."""
    h, ff = a.hidden, a.ff
    t = [("embeddings.word_embeddings.weight", [a.vocab, h], "emb"),
         ("embeddings.position_embeddings.weight", [a.maxpos, h], "emb"),
         ("embeddings.token_type_embeddings.weight", [2, h], "emb"),
         ("embeddings.LayerNorm.weight", [h], "lnw"),
         ("embeddings.LayerNorm.bias", [h], "bias")]
    for i in range(a.layers):
        p = "encoder.layer.%d." % i
        for m in ("query", "key", "value"):
            t += [(p + "attention.self.%s.weight" % m, [h, h], "mat"),
                  (p + "attention.self.%s.bias" % m, [h], "bias")]
        t += [(p + "attention.output.dense.weight", [h, h], "mat"),
              (p + "attention.output.dense.bias", [h], "bias"),
              (p + "attention.output.LayerNorm.weight", [h], "lnw"),
              (p + "attention.output.LayerNorm.bias", [h], "bias"),
              (p + "intermediate.dense.weight", [ff, h], "mat"),
              (p + "intermediate.dense.bias", [ff], "bias"),
              (p + "output.dense.weight", [h, ff], "mat"),
              (p + "output.dense.bias", [h], "bias"),
              (p + "output.LayerNorm.weight", [h], "lnw"),
              (p + "output.LayerNorm.bias", [h], "bias")]
    t += [("pooler.dense.weight", [h, h], "mat"), ("pooler.dense.bias", [h], "bias")]
    t = [(prefix + n, s, k) for n, s, k in t]
    if prefix:
        t += [("classifier.weight", [1, h], "mat"), ("classifier.bias", [1], "bias")]
    return t


def random_tensor(rng, shape, kind):
    if kind in ("mat", "emb"):
        return rng.normal(0.0, 0.05, shape)
    if kind == "lnw":
        return 1.0 + rng.normal(0.0, 0.05, shape)
    return rng.normal(0.0, 0.02, shape)


def write_json(path, obj, sort=False):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=sort)
        f.write("\n")


def cmd_make(a):
    os.makedirs(a.dir, exist_ok=True)
    cross = a.kind == "cross"
    dtype = np.float16 if a.dtype == "f16" else np.float32
    rng = np.random.default_rng(a.seed)
    tensors = [(n, random_tensor(rng, s, k).astype(dtype))
               for n, s, k in tensor_shapes(a, "bert." if cross else "")]
    write_safetensors(os.path.join(a.dir, "model.safetensors"), tensors, {"format": "pt"})
    cfg = {"architectures": ["BertForSequenceClassification" if cross else "BertModel"],
           "attention_probs_dropout_prob": 0.1, "classifier_dropout": None,
           "gradient_checkpointing": False, "hidden_act": "gelu",
           "hidden_dropout_prob": 0.1, "hidden_size": a.hidden,
           "initializer_range": 0.02, "intermediate_size": a.ff,
           "layer_norm_eps": 1e-12, "max_position_embeddings": a.maxpos,
           "model_type": "bert", "num_attention_heads": a.heads,
           "num_hidden_layers": a.layers, "pad_token_id": 0,
           "position_embedding_type": "absolute",
           "torch_dtype": "float16" if a.dtype == "f16" else "float32",
           "transformers_version": "4.41.2", "type_vocab_size": 2,
           "use_cache": True, "vocab_size": a.vocab}
    if cross:  # num_labels 1, written as transformers does: id2label/label2id
        cfg.update(id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    write_json(os.path.join(a.dir, "config.json"), cfg, sort=True)  # as transformers
    shutil.copyfile(a.tokenizer or DEFAULT_TOKENIZER, os.path.join(a.dir, "tokenizer.json"))
    if cross:
        mml = a.max_seq_length or 512
        write_json(os.path.join(a.dir, "tokenizer_config.json"),
                   {"model_max_length": mml, "do_lower_case": True})
        return
    # embed: the hub repo also carries tokenizer_config.json (512), which
    # sentence_bert_config.json's max_seq_length overrides.
    write_json(os.path.join(a.dir, "tokenizer_config.json"),
               {"model_max_length": 512, "do_lower_case": True})
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if not a.no_normalize:
        mods.append({"idx": 2, "name": "2", "path": "2_Normalize",
                     "type": "sentence_transformers.models.Normalize"})
        os.makedirs(os.path.join(a.dir, "2_Normalize"), exist_ok=True)
    write_json(os.path.join(a.dir, "modules.json"), mods)
    os.makedirs(os.path.join(a.dir, "1_Pooling"), exist_ok=True)
    write_json(os.path.join(a.dir, "1_Pooling", "config.json"),
               {"word_embedding_dimension": a.hidden,
                "pooling_mode_cls_token": a.pooling == "cls",
                "pooling_mode_mean_tokens": a.pooling == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False})
    write_json(os.path.join(a.dir, "sentence_bert_config.json"),
               {"max_seq_length": a.max_seq_length or 256, "do_lower_case": False})


# ======================================================================
# Tokenizer: BertNormalizer, BertPreTokenizer, WordPiece, TemplateProcessing
# ======================================================================

# Unicode White_Space property (what Rust's char::is_whitespace tests).
WHITE_SPACE = set(map(chr, [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680,
                            *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F,
                            0x205F, 0x3000]))

# CJK ideograph blocks as BERT's _is_chinese_char lists them.
CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def is_whitespace(c):
    return c in WHITE_SPACE


def is_control(c):
    # \t \n \r are control characters but count as whitespace. tokenizers
    # tests Cc, Cf and Co (its categories crate's is_other), not Cn or Cs as
    # the original BERT's startswith("C") did.
    return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf", "Co")


def is_cjk(c):
    o = ord(c)
    return any(lo <= o <= hi for lo, hi in CJK)


def is_punct(c):
    o = ord(c)
    return (33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126
            or unicodedata.category(c).startswith("P"))


def bert_normalize(text, cfg):
    if cfg.get("clean_text", True):
        text = "".join(" " if is_whitespace(c) else c for c in text
                       if not (c in "\x00\ufffd" or is_control(c)))
    if cfg.get("handle_chinese_chars", True):
        text = "".join(" %s " % c if is_cjk(c) else c for c in text)
    lower = cfg.get("lowercase", True)
    strip = cfg.get("strip_accents")
    if strip is None:
        strip = lower
    if strip:
        text = "".join(c for c in unicodedata.normalize("NFD", text)
                       if unicodedata.category(c) != "Mn")
    if lower:
        text = "".join(c.lower() for c in text)  # per char: no final-sigma rule
    return text


def bert_pretokenize(text):
    """Split on whitespace (dropped) and isolate every punctuation char."""
    words, cur = [], []
    for c in text:
        if is_whitespace(c) or is_punct(c):
            if cur:
                words.append("".join(cur))
                cur = []
            if not is_whitespace(c):
                words.append(c)
        else:
            cur.append(c)
    if cur:
        words.append("".join(cur))
    return words


def wordpiece(word, model):
    """Greedy longest-match-first; the whole word is unk if any part fails."""
    vocab, prefix = model["vocab"], model.get("continuing_subword_prefix", "##")
    unk = vocab[model["unk_token"]]
    if len(word) > model.get("max_input_chars_per_word", 100):
        return [unk]
    ids, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else prefix + word[start:end]
            if piece in vocab:
                ids.append(vocab[piece])
                break
            end -= 1
        if end == start:
            return [unk]
        start = end
    return ids


class Tokenizer:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        self.model = tj["model"]
        assert self.model["type"] == "WordPiece", "only WordPiece models"
        norm = tj.get("normalizer") or {}
        assert norm.get("type") == "BertNormalizer", "only BertNormalizer"
        assert (tj.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
        self.norm = norm
        self.post = tj["post_processor"]
        assert self.post["type"] == "TemplateProcessing"
        # Added tokens are cut out of the raw text before normalization
        # (all the hub files have normalized false and no strip flags).
        self.added = {}
        for t in tj.get("added_tokens") or []:
            assert not t.get("normalized") and not t.get("lstrip") and not t.get("rstrip") \
                and not t.get("single_word"), "added token flags not supported"
            self.added[t["content"]] = t["id"]

    def split_added(self, text):
        """Leftmost-longest matches of added tokens -> [(str, id or None)]."""
        out, i, start = [], 0, 0
        while i < len(text):
            best = max((c for c in self.added if text.startswith(c, i)), key=len, default=None)
            if best:
                if start < i:
                    out.append((text[start:i], None))
                out.append((best, self.added[best]))
                i = start = i + len(best)
            else:
                i += 1
        if start < len(text):
            out.append((text[start:], None))
        return out

    def encode_one(self, text):
        ids = []
        for part, tid in self.split_added(text):
            if tid is not None:
                ids.append(tid)
                continue
            for w in bert_pretokenize(bert_normalize(part, self.norm)):
                ids += wordpiece(w, self.model)
        return ids

    def template(self, seqs):
        """Applies the single or pair template -> (ids, type_ids)."""
        tmpl = self.post["single" if len(seqs) == 1 else "pair"]
        ids, types = [], []
        for item in tmpl:
            if "SpecialToken" in item:
                st = item["SpecialToken"]
                add = self.post["special_tokens"][st["id"]]["ids"]
                ids += add
                types += [st["type_id"]] * len(add)
            else:
                sq = item["Sequence"]
                s = seqs[0 if sq["id"] == "A" else 1]
                ids += s
                types += [sq["type_id"]] * len(s)
        return ids, types

    def n_special(self, pair):
        ids, _ = self.template([[], []] if pair else [[]])
        return len(ids)

    def encode(self, item, max_len):
        """item: a text or [a, b]. Truncation as tokenizers' longest_first."""
        seqs = [self.encode_one(item)] if isinstance(item, str) else \
            [self.encode_one(item[0]), self.encode_one(item[1])]
        budget = max_len - self.n_special(len(seqs) == 2)
        if len(seqs) == 1:
            seqs[0] = seqs[0][:budget]
        elif len(seqs[0]) + len(seqs[1]) > budget:
            # tokenizers' rule (utils/truncation.rs, LongestFirst): the shorter
            # keeps its length if it fits in half, else both get half, the
            # longer (or, on a tie, the second) taking the odd token.
            n1, n2 = len(seqs[0]), len(seqs[1])
            swap = n1 > n2
            if swap:
                n1, n2 = n2, n1
            n2 = n1 if n1 > budget else max(n1, budget - n1)
            if n1 + n2 > budget:
                n1 = budget // 2
                n2 = n1 + budget % 2
            if swap:
                n1, n2 = n2, n1
            seqs = [seqs[0][:n1], seqs[1][:n2]]
        return self.template(seqs)


def load_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def max_length(d, cfg):
    """sentence_bert_config's max_seq_length, else min(maxpos, model_max_length)."""
    sb = load_json(os.path.join(d, "sentence_bert_config.json"), {})
    if sb.get("max_seq_length"):
        return sb["max_seq_length"]
    tc = load_json(os.path.join(d, "tokenizer_config.json"), {})
    return min(cfg["max_position_embeddings"], tc.get("model_max_length", 10 ** 9))


def cmd_tokenize(a, items):
    cfg = load_json(os.path.join(a.dir, "config.json"))
    tok = Tokenizer(os.path.join(a.dir, "tokenizer.json"))
    n = max_length(a.dir, cfg)
    out = []
    for it in items:
        ids, types = tok.encode(it, n)
        out.append({"ids": ids, "type_ids": types})
    return out


# ======================================================================
# The float64 forward pass (transformers' BertModel, eval mode)
# ======================================================================

_erf = None


def gelu(x):
    global _erf
    if _erf is None:
        _erf = np.frompyfunc(math.erf, 1, 1)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased variance
    return (x - mu) / np.sqrt(var + eps) * w + b


def linear(x, W, b):
    return x @ W.T + b  # torch Linear: W is [out, in]


class Bert:
    def __init__(self, d):
        self.cfg = load_json(os.path.join(d, "config.json"))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        self.pre = "bert." if "bert.embeddings.word_embeddings.weight" in self.w else ""

    def p(self, name):
        return self.w[self.pre + name]

    def forward(self, ids, types, mask):
        """ids, types, mask: int arrays [B, S] -> last hidden state [B, S, H]."""
        c, eps = self.cfg, self.cfg["layer_norm_eps"]
        B, S = ids.shape
        H, nh = c["hidden_size"], c["num_attention_heads"]
        dh = H // nh
        x = (self.p("embeddings.word_embeddings.weight")[ids]
             + self.p("embeddings.position_embeddings.weight")[np.arange(S)][None]
             + self.p("embeddings.token_type_embeddings.weight")[types])
        x = layer_norm(x, self.p("embeddings.LayerNorm.weight"),
                       self.p("embeddings.LayerNorm.bias"), eps)
        # extended mask: 0 where attended, the dtype's min where padding
        bias = (1.0 - mask[:, None, None, :].astype(np.float64)) * np.finfo(np.float64).min
        for i in range(c["num_hidden_layers"]):
            L = lambda n: self.p("encoder.layer.%d.%s" % (i, n))
            heads = lambda t: t.reshape(B, S, nh, dh).transpose(0, 2, 1, 3)
            q = heads(linear(x, L("attention.self.query.weight"), L("attention.self.query.bias")))
            k = heads(linear(x, L("attention.self.key.weight"), L("attention.self.key.bias")))
            v = heads(linear(x, L("attention.self.value.weight"), L("attention.self.value.bias")))
            s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s = s / s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B, S, H)
            a = linear(ctx, L("attention.output.dense.weight"), L("attention.output.dense.bias"))
            x = layer_norm(a + x, L("attention.output.LayerNorm.weight"),
                           L("attention.output.LayerNorm.bias"), eps)
            f = gelu(linear(x, L("intermediate.dense.weight"), L("intermediate.dense.bias")))
            f = linear(f, L("output.dense.weight"), L("output.dense.bias"))
            x = layer_norm(f + x, L("output.LayerNorm.weight"), L("output.LayerNorm.bias"), eps)
        return x


def batches(encs, size):
    """Pads each batch to its longest member (pad id 0, type 0, mask 0)."""
    for s in range(0, len(encs), size):
        chunk = encs[s:s + size]
        S = max(len(ids) for ids, _ in chunk)
        ids = np.zeros((len(chunk), S), np.int64)
        types = np.zeros_like(ids)
        mask = np.zeros_like(ids)
        for r, (i, t) in enumerate(chunk):
            ids[r, :len(i)], types[r, :len(t)], mask[r, :len(i)] = i, t, 1
        yield ids, types, mask


def embed(d, texts, batch=1):
    model = Bert(d)
    tok = Tokenizer(os.path.join(d, "tokenizer.json"))
    n = max_length(d, model.cfg)
    # sentence-transformers strips each text; BertNormalizer makes it moot.
    encs = [tok.encode(t.strip(), n) for t in texts]
    pool = load_json(os.path.join(d, "1_Pooling", "config.json"), {})
    mods = load_json(os.path.join(d, "modules.json"), [])
    normalize = any(m["type"].endswith("Normalize") for m in mods)
    out = []
    for ids, types, mask in batches(encs, batch):
        h = model.forward(ids, types, mask)
        if pool.get("pooling_mode_cls_token"):
            e = h[:, 0]
        else:  # mean over the attention mask
            m = mask[:, :, None].astype(np.float64)
            e = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        if normalize:  # torch F.normalize, eps 1e-12
            e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        out += e.tolist()
    return out


def score(d, pairs, batch=1):
    """Cross-encoder logits: classifier(tanh(pooler(h_CLS)))."""
    model = Bert(d)
    tok = Tokenizer(os.path.join(d, "tokenizer.json"))
    n = max_length(d, model.cfg)
    encs = [tok.encode([q.strip(), t.strip()], n) for q, t in pairs]
    out = []
    for ids, types, mask in batches(encs, batch):
        h = model.forward(ids, types, mask)
        p = np.tanh(linear(h[:, 0], model.p("pooler.dense.weight"), model.p("pooler.dense.bias")))
        out += linear(p, model.w["classifier.weight"], model.w["classifier.bias"])[:, 0].tolist()
    return out


# ======================================================================
# bench: batched float32 forward pass of the all-MiniLM-L6-v2 shape
# ======================================================================

def erf32(x):
    """Abramowitz & Stegun 7.1.26, |error| < 1.5e-7, float32 in and out."""
    s = np.sign(x)
    a = np.abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * a)
    y = t * (np.float32(0.254829592) + t * (np.float32(-0.284496736) + t * (
        np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * np.float32(1.061405429)))))
    return s * (np.float32(1.0) - y * np.exp(-a * a))


def blas_name():
    try:
        with open("/proc/self/maps") as f:
            libs = {l.split()[-1] for l in f if "blas" in l.lower() or "lapack" in l.lower()}
        libs = sorted(os.path.realpath(p) for p in libs if p.startswith("/"))
        return " ".join(l for l in libs if "blas" in os.path.basename(l)) or "unknown"
    except OSError:
        return "unknown"


def cmd_bench(a):
    B, S, H, nh, F, nl = a.batch, a.seq, 384, 12, 1536, 6
    dh, f32 = H // nh, np.float32
    rng = np.random.default_rng(0)

    def w(*shape):
        m = rng.normal(0, 0.05, shape)
        return (m.astype(np.float16) if a.dtype == "f16" else m).astype(f32)

    layers = [dict(qkv=w(3 * H, H).T.copy(), bqkv=w(3 * H), o=w(H, H).T.copy(), bo=w(H),
                   i=w(F, H).T.copy(), bi=w(F), out=w(H, F).T.copy(), bout=w(H),
                   g1=1 + w(H), b1=w(H), g2=1 + w(H), b2=w(H)) for _ in range(nl)]
    emb, pos, typ, g0, b0 = w(30522, H), w(512, H), w(2, H), 1 + w(H), w(H)
    ids = rng.integers(1000, 30000, (B, S))
    mask = np.ones((B, S), f32)

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + f32(1e-12)) * g + b

    def run():
        x = ln((emb[ids] + pos[:S] + typ[0]).reshape(B * S, H), g0, b0)
        bias = ((1 - mask) * np.finfo(f32).min)[:, None, None, :]
        for L in layers:  # Q, K and V projections fused in one [H, 3H] matmul
            qkv = (x @ L["qkv"] + L["bqkv"]).reshape(B, S, 3, nh, dh).transpose(2, 0, 3, 1, 4)
            s = (qkv[0] @ qkv[1].transpose(0, 1, 3, 2)) * f32(1 / math.sqrt(dh)) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ qkv[2]).transpose(0, 2, 1, 3).reshape(B * S, H)
            x = ln(ctx @ L["o"] + L["bo"] + x, L["g1"], L["b1"])
            f = x @ L["i"] + L["bi"]
            f = f32(0.5) * f * (f32(1) + erf32(f * f32(1 / math.sqrt(2))))
            x = ln(f @ L["out"] + L["bout"] + x, L["g2"], L["b2"])
        m = mask.reshape(B, S, 1)
        return (x.reshape(B, S, H) * m).sum(1) / m.sum(1)

    run()
    times, cpu = [], []
    for _ in range(5):
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    sec = statistics.median(times)
    T = B * S
    flops = nl * (2 * T * H * 4 * H + 2 * 2 * T * H * F + 2 * 2 * B * S * S * H)
    return {"blas": blas_name(), "threads": a.threads, "batch": B, "seq": S,
            "sentences_per_s": B / sec, "tokens_per_s": T / sec,
            "gflops": flops / sec / 1e9, "seconds": sec,
            "cpu_seconds": statistics.median(cpu)}  # wall >> cpu: machine busy


# ======================================================================
# selfcheck: hand-worked expectations
# ======================================================================

def slow_forward(model, ids, types):
    """A second writing of the encoder in plain Python loops (one sequence,
    no padding, per-token and per-head), to check Bert.forward's reshapes."""
    c, P = model.cfg, lambda n: model.p(n).tolist()
    H, nh, eps = c["hidden_size"], c["num_attention_heads"], c["layer_norm_eps"]
    dh, n = H // nh, len(ids)

    def ln(v, w, b):
        mu = sum(v) / len(v)
        var = sum((t - mu) ** 2 for t in v) / len(v)
        return [(t - mu) / math.sqrt(var + eps) * w[j] + b[j] for j, t in enumerate(v)]

    def lin(v, W, b):
        return [sum(wi * vi for wi, vi in zip(row, v)) + b[o] for o, row in enumerate(W)]

    we, pe, te = (P("embeddings.%s_embeddings.weight" % k) for k in ("word", "position", "token_type"))
    x = [ln([we[t][j] + pe[a][j] + te[y][j] for j in range(H)], P("embeddings.LayerNorm.weight"),
            P("embeddings.LayerNorm.bias")) for a, (t, y) in enumerate(zip(ids, types))]
    for i in range(c["num_hidden_layers"]):
        g = lambda name: P("encoder.layer.%d.%s" % (i, name))
        q, k, v = ([lin(t, g("attention.self.%s.weight" % m), g("attention.self.%s.bias" % m)) for t in x]
                   for m in ("query", "key", "value"))
        ctx = []
        for a in range(n):
            row = []
            for h in range(nh):
                cols = range(h * dh, (h + 1) * dh)
                sc = [sum(q[a][d] * k[b][d] for d in cols) / math.sqrt(dh) for b in range(n)]
                e = [math.exp(t - max(sc)) for t in sc]
                row += [sum(e[b] / sum(e) * v[b][d] for b in range(n)) for d in cols]
            ctx.append(row)
        x = [ln([s + t for s, t in zip(lin(ca, g("attention.output.dense.weight"),
                                           g("attention.output.dense.bias")), xa)],
                g("attention.output.LayerNorm.weight"), g("attention.output.LayerNorm.bias"))
             for ca, xa in zip(ctx, x)]
        f = [[0.5 * t * (1 + math.erf(t / math.sqrt(2))) for t in
              lin(xa, g("intermediate.dense.weight"), g("intermediate.dense.bias"))] for xa in x]
        x = [ln([s + t for s, t in zip(lin(fa, g("output.dense.weight"), g("output.dense.bias")), xa)],
                g("output.LayerNorm.weight"), g("output.LayerNorm.bias")) for fa, xa in zip(f, x)]
    return x


def selfcheck():
    import tempfile
    tok = Tokenizer(DEFAULT_TOKENIZER)
    vocab = tok.model["vocab"]
    inv = {i: t for t, i in vocab.items()}
    inv.update({101: "[CLS]", 102: "[SEP]"})
    toks = lambda s: [inv[i] for i in tok.encode_one(s)]
    # una + ##ffa + ##ble: greedy longest match with this (bge) vocab, which
    # has "una" and "##ffa" (BERT's paper vocab gives un ##aff ##able).
    got = toks("Hello, world! naïve 中文 unaffable")
    assert got == ["hello", ",", "world", "!", "naive", "中", "文", "una", "##ffa", "##ble"], got
    assert bert_normalize("A\x00b\ufffd\x07c\td\u00a0E\u0301", tok.norm) == "abc d e"
    assert bert_normalize("中a\U00020000\U0002B820", tok.norm) == " 中 a \U00020000  \U0002B820 "
    # VT and NEL are control chars, so dropped before the whitespace map;
    # soft hyphen and ZWSP are Cf (dropped); U+0378 is unassigned (kept)
    assert bert_normalize("a\x0bb\x85c\u00ad\u200bd\u0378", tok.norm) == "abcd\u0378"
    assert bert_normalize("ΣΑΣ", tok.norm) == "σασ"  # per-char lowercase
    assert bert_pretokenize("a$b^c`d~e€f—g¿h") == \
        ["a", "$", "b", "^", "c", "`", "d", "~", "e€f", "—", "g", "¿", "h"]
    assert tok.encode_one("x" * 101) == [vocab["[UNK]"]]
    assert tok.encode_one("hello [MASK]world") == [vocab["hello"], 4, vocab["world"]]
    assert tok.encode("", 256) == ([101, 102], [0, 0])
    assert tok.encode(["hello", "world"], 512) == \
        ([101, vocab["hello"], 102, vocab["world"], 102], [0, 0, 0, 1, 1])
    # longest_first, budget 10 - 3 = 7: 2+9 -> 2+5; 6+9 -> 3+4; 9+6 -> 4+3; 5+5 -> 3+4
    for la, lb, ea, eb in [(2, 9, 2, 5), (6, 9, 3, 4), (9, 6, 4, 3), (5, 5, 3, 4)]:
        ids, types = tok.encode([" ".join(["a"] * la), " ".join(["b"] * lb)], 10)
        assert ids.count(vocab["a"]) == ea and ids.count(vocab["b"]) == eb, (la, lb, ids)
        assert types == [0] * (ea + 2) + [1] * (eb + 1)
    xs = np.linspace(-7, 7, 100001)
    assert np.max(np.abs(erf32(xs.astype(np.float32)) - np.frompyfunc(math.erf, 1, 1)(xs).astype(float))) < 1e-6
    texts = ["", "Hello, world!", "a much longer sentence, with commas, to force padding " * 3]
    with tempfile.TemporaryDirectory() as d:
        for dt in ("f32", "f16"):
            ns = argparse.Namespace(dir=d, kind="embed", seed=7, dtype=dt, layers=2, hidden=48,
                                    heads=4, ff=96, vocab=30522, maxpos=64, max_seq_length=24,
                                    tokenizer=None, no_normalize=False, pooling="mean")
            cmd_make(ns)
            w = read_safetensors(os.path.join(d, "model.safetensors"))
            assert w["encoder.layer.1.intermediate.dense.weight"].shape == (96, 48)
            one, many = np.array(embed(d, texts, 1)), np.array(embed(d, texts, 3))
            assert np.max(np.abs(one - many)) < 1e-12, np.max(np.abs(one - many))
            assert np.allclose(np.linalg.norm(one, axis=1), 1, atol=1e-12)
            assert len(cmd_tokenize(argparse.Namespace(dir=d), texts)[2]["ids"]) == 24
        ns.kind, ns.dtype = "cross", "f32"
        shutil.rmtree(d)
        cmd_make(ns)
        pairs = [["q", ""], ["what is it", "it is a test " * 10]]
        s1, s2 = score(d, pairs, 1), score(d, pairs, 2)
        assert max(abs(x - y) for x, y in zip(s1, s2)) < 1e-12
        # loop version vs the vectorised one, padded in a batch, + pooler/classifier
        model = Bert(d)
        tok = Tokenizer(os.path.join(d, "tokenizer.json"))
        (i1, t1), (i2, t2) = tok.encode(["Who?", "a b c"], 24), tok.encode(["x", "y"], 24)
        ids, types, mask = next(batches([(i2, t2), (i1, t1)], 2))
        fast = model.forward(ids, types, mask)[1]
        slow = np.array(slow_forward(model, i1, t1))
        assert np.max(np.abs(fast - slow)) < 1e-12, np.max(np.abs(fast - slow))
        pw, pb, cw, cb = (model.w[k].tolist() for k in ("bert.pooler.dense.weight",
                          "bert.pooler.dense.bias", "classifier.weight", "classifier.bias"))
        pooled = [math.tanh(sum(a * b for a, b in zip(row, slow[0])) + pb[o]) for o, row in enumerate(pw)]
        logit = sum(a * b for a, b in zip(cw[0], pooled)) + cb[0]
        assert abs(score(d, [["Who?", "a b c"]])[0] - logit) < 1e-12
    return "ok"


# ======================================================================

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--kind", choices=["embed", "cross"], required=True)
    m.add_argument("--seed", type=int, required=True)
    m.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    for name, val in [("layers", 6), ("hidden", 384), ("heads", 12), ("ff", 1536),
                      ("vocab", 30522), ("maxpos", 512)]:
        m.add_argument("--" + name, type=int, default=val)
    m.add_argument("--max-seq-length", type=int, default=None,
                   help="embed: sentence_bert_config (256); cross: model_max_length (512)")
    m.add_argument("--tokenizer", default=None)
    m.add_argument("--no-normalize", action="store_true")
    m.add_argument("--pooling", choices=["mean", "cls"], default="mean")
    for name in ("tokenize", "embed", "score"):
        s = sub.add_parser(name)
        s.add_argument("dir")
        s.add_argument("--batch", type=int, default=1)
    b = sub.add_parser("bench")
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--batch", type=int, default=32)
    b.add_argument("--seq", type=int, default=128)
    b.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    sub.add_parser("selfcheck")
    a = ap.parse_args()

    if a.cmd == "bench":  # must precede the numpy import
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(a.threads)
    global np
    try:
        import numpy
    except ImportError:  # e.g. a pyenv python3 first in PATH: use Debian's
        if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3":
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        raise
    np = numpy

    if a.cmd == "make":
        cmd_make(a)
        return
    if a.cmd == "bench":
        res = cmd_bench(a)
    elif a.cmd == "selfcheck":
        res = selfcheck()
    else:
        items = json.load(sys.stdin)
        if a.cmd == "tokenize":
            res = cmd_tokenize(a, items)
        elif a.cmd == "embed":
            res = embed(a.dir, items, a.batch)
        else:
            res = score(a.dir, items, a.batch)
    # json writes floats with repr: shortest string that round-trips
    json.dump(res, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
