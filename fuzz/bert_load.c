/*
** fuzz/bert_load.c: rag_bert_load over a model folder whose files come from
** the input, then a forward pass over whatever loaded. A tiny BERT (hidden
** 8, one layer, two heads, feed-forward 16, 64 token ids, 16 positions)
** with a WordPiece tokenizer.json is written once; the first byte picks
** what the rest does: 0 is model.safetensors as it is; 1 writes a valid
** safetensors file whose weights' bytes are the input (NaN and infinity
** included), so the model loads and runs; 2 writes the valid file with
** (offset, byte) edits from the input and cut at a length from it; 3 keeps
** the valid weights and makes the input config.json. A failed load must
** say RAG_EFORMAT or RAG_ECORRUPT with a reason; a loaded model must embed
** and tokenize without a fault (the sanitizers decide).
*/
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rag.h"
#include "rag_bert.h"

#define MUST(c)                                                         \
  do {                                                                  \
    if (!(c)) {                                                         \
      fprintf(stderr, "bert_load: check failed: %s (line %d)\n", #c, __LINE__); \
      abort();                                                          \
    }                                                                   \
  } while (0)

static char dir[64];
static unsigned char *good; /* the valid model.safetensors */
static size_t goodlen, datastart;

static const char config[] =
    "{\"model_type\":\"bert\",\"architectures\":[\"BertModel\"],\"hidden_size\":8,"
    "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"intermediate_size\":16,"
    "\"vocab_size\":64,\"max_position_embeddings\":16,\"type_vocab_size\":2,"
    "\"layer_norm_eps\":1e-12,\"hidden_act\":\"gelu\"}";

static void put(const char *name, const void *p, size_t n) {
  char path[128];
  FILE *f;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  MUST((f = fopen(path, "wb")) != NULL);
  if (n > 0) MUST(fwrite(p, 1, n, f) == n);
  MUST(fclose(f) == 0);
}

/* tokenizer.json: [PAD] [UNK] [CLS] [SEP], letters, "##" letters, a few words. */
static void write_tokenizer(void) {
  char buf[4096];
  size_t n = 0;
  int id = 0, c;
  n += (size_t)snprintf(buf + n, sizeof buf - n,
                        "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":{\"type\":"
                        "\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,"
                        "\"strip_accents\":null,\"lowercase\":true},\"pre_tokenizer\":{\"type\":"
                        "\"BertPreTokenizer\"},\"model\":{\"type\":\"WordPiece\",\"unk_token\":"
                        "\"[UNK]\",\"continuing_subword_prefix\":\"##\","
                        "\"max_input_chars_per_word\":100,\"vocab\":{\"[PAD]\":%d,\"[UNK]\":%d,"
                        "\"[CLS]\":%d,\"[SEP]\":%d",
                        id, id + 1, id + 2, id + 3);
  id = 4;
  for (c = 'a'; c <= 'z'; c++) n += (size_t)snprintf(buf + n, sizeof buf - n, ",\"%c\":%d", c, id++);
  for (c = 'a'; c <= 'z'; c++)
    n += (size_t)snprintf(buf + n, sizeof buf - n, ",\"##%c\":%d", c, id++);
  n += (size_t)snprintf(buf + n, sizeof buf - n, ",\"the\":%d,\"cat\":%d}}}", id, id + 1);
  put("tokenizer.json", buf, n);
}

static const struct {
  const char *name;
  int rows, cols;
} tensors[] = {
    {"embeddings.word_embeddings.weight", 64, 8},
    {"embeddings.position_embeddings.weight", 16, 8},
    {"embeddings.token_type_embeddings.weight", 2, 8},
    {"embeddings.LayerNorm.weight", 8, 0},
    {"embeddings.LayerNorm.bias", 8, 0},
    {"encoder.layer.0.attention.self.query.weight", 8, 8},
    {"encoder.layer.0.attention.self.query.bias", 8, 0},
    {"encoder.layer.0.attention.self.key.weight", 8, 8},
    {"encoder.layer.0.attention.self.key.bias", 8, 0},
    {"encoder.layer.0.attention.self.value.weight", 8, 8},
    {"encoder.layer.0.attention.self.value.bias", 8, 0},
    {"encoder.layer.0.attention.output.dense.weight", 8, 8},
    {"encoder.layer.0.attention.output.dense.bias", 8, 0},
    {"encoder.layer.0.attention.output.LayerNorm.weight", 8, 0},
    {"encoder.layer.0.attention.output.LayerNorm.bias", 8, 0},
    {"encoder.layer.0.intermediate.dense.weight", 16, 8},
    {"encoder.layer.0.intermediate.dense.bias", 16, 0},
    {"encoder.layer.0.output.dense.weight", 8, 16},
    {"encoder.layer.0.output.dense.bias", 8, 0},
    {"encoder.layer.0.output.LayerNorm.weight", 8, 0},
    {"encoder.layer.0.output.LayerNorm.bias", 8, 0},
};

/* The valid file: a header padded to 8 bytes, then f32 values. */
static void build_good(void) {
  char header[8192];
  size_t h = 0, off = 0, i, k, total;
  unsigned char *p;
  h += (size_t)snprintf(header + h, sizeof header - h, "{");
  for (i = 0; i < sizeof tensors / sizeof tensors[0]; i++) {
    size_t count = (size_t)tensors[i].rows * (size_t)(tensors[i].cols ? tensors[i].cols : 1);
    if (tensors[i].cols)
      h += (size_t)snprintf(header + h, sizeof header - h,
                            "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%lu,%lu]}",
                            i ? "," : "", tensors[i].name, tensors[i].rows, tensors[i].cols,
                            (unsigned long)off, (unsigned long)(off + count * 4));
    else
      h += (size_t)snprintf(header + h, sizeof header - h,
                            "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%lu,%lu]}",
                            i ? "," : "", tensors[i].name, tensors[i].rows, (unsigned long)off,
                            (unsigned long)(off + count * 4));
    off += count * 4;
  }
  h += (size_t)snprintf(header + h, sizeof header - h, "}");
  while (h % 8 != 0) header[h++] = ' ';
  total = 8 + h + off;
  MUST((p = (unsigned char *)malloc(total)) != NULL);
  for (k = 0; k < 8; k++) p[k] = (unsigned char)((uint64_t)h >> (8 * k));
  memcpy(p + 8, header, h);
  for (k = 0; k < off / 4; k++) {
    float v = (float)((int)(k * 2654435761u % 2001) - 1000) / 10000.0f;
    memcpy(p + 8 + h + k * 4, &v, 4);
  }
  good = p;
  goodlen = total;
  datastart = 8 + h;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  snprintf(dir, sizeof dir, "/tmp/rag-fuzz-bert-XXXXXX");
  MUST(mkdtemp(dir) != NULL);
  put("config.json", config, sizeof config - 1);
  write_tokenizer();
  build_good();
  return 0;
}

static void run(rag_bert *m) {
  static const char *const texts[] = {"", "the cat", "Zebra ##a, b! c\xc3\xa9", "x y z x y z x y z x y z x y z x y z"};
  static const size_t lens[] = {0, 7, 18, 35};
  float out[4 * 8];
  size_t bad, errpos, n;
  const uint32_t *ids;
  const uint8_t *types;
  int inb;
  MUST(rag_bert_embed(m, texts, lens, 4, out, &bad, &errpos) == RAG_OK);
  MUST(rag_bert_tokenize(m, texts[2], lens[2], texts[3], lens[3], &ids, &types, &n, &errpos,
                         &inb) == RAG_OK);
  MUST(n <= 16);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rag_bert *m = NULL;
  rag_bert_error e;
  rag_bert_opts o;
  unsigned char *buf;
  size_t i;
  int rc, mode;
  if (size == 0) return 0;
  mode = data[0] % 4;
  data++, size--;
  memset(&o, 0, sizeof o);
  o.portable = size > 0 && (data[0] & 1);
  MUST((buf = (unsigned char *)malloc(goodlen + 1)) != NULL);
  memcpy(buf, good, goodlen);
  if (mode == 0) {
    put("model.safetensors", data, size);
  } else if (mode == 1) {
    for (i = 0; size > 0 && datastart + i < goodlen; i++) buf[datastart + i] = data[i % size];
    put("model.safetensors", buf, goodlen);
  } else if (mode == 2) {
    size_t len = goodlen;
    for (i = 0; i + 3 <= size; i += 3) {
      size_t at = ((size_t)data[i] << 8 | data[i + 1]) % goodlen;
      buf[at] = data[i + 2];
    }
    if (size % 3 == 1) len = ((size_t)data[size - 1] * 37) % (goodlen + 1);
    put("model.safetensors", buf, len);
  } else {
    put("model.safetensors", good, goodlen);
    put("config.json", data, size);
  }
  rc = rag_bert_load(dir, &o, &m, &e);
  if (rc == RAG_OK) {
    run(m);
    rag_bert_free(m);
  } else {
    MUST(rc == RAG_EFORMAT || rc == RAG_ECORRUPT || rc == RAG_ENOMEM);
    MUST(rc == RAG_ENOMEM || e.why[0] != '\0');
  }
  if (mode == 3) put("config.json", config, sizeof config - 1);
  free(buf);
  return 0;
}
