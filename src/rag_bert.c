/*
** rag_bert.c: loading a BERT model folder and running the encoder (see
** rag_bert.h). Activations are feature-major: a matrix of `rows` features
** by `ld` columns, one column per token of the batch, so that the dense
** layers (rag_matmul), LayerNorm, GELU and the attention's softmax all run
** along contiguous token columns.
*/
#include "rag_bert.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "rag_file.h"
#include "rag_hftok.h"
#include "rag_kernel.h"
#include "rag_matmul.h"
#include "rag_safetensors.h"
#include "rag_text.h"

#define BATCH_TOKENS 2048 /* tokens through the dense layers at once */
#define BATCH_TEXTS 64
#define MAX_DIM 65536     /* hidden and feed-forward sizes */
#define MAX_LAYERS 256

/* A linear layer's weight, [out][in]: f32, and int8 when quantized. */
typedef struct dense {
  const float *w;
  int8_t *q; /* NULL: run in f32 */
  float *scale;
  int32_t *sum;
  size_t out, in;
} dense;

typedef struct layer {
  dense wq, wk, wv, wo, wi, wo2;
  float *bq, *bk, *bv, *bo, *bi, *bo2;
  float *g1, *b1, *g2, *b2; /* LayerNorms after attention and after the feed-forward */
} layer;

struct rag_bert {
  rag_hftok *tok;
  void *map; /* model.safetensors */
  size_t maplen;
  rag_safetensors st;
  rag_matmul mm;
  int cross, cls_pooling, normalize, f16, quantize;
  size_t hidden, nlayers, heads, ff, vocab, positions, types, maxtok;
  float eps;
  uint32_t cls, sep;
  const unsigned char *wemb, *pemb, *temb; /* embedding tables, in the file's dtype */
  size_t wel, pel, tel;                    /* their bytes per element */
  float *eg, *eb;
  layer *layers;
  const float *pool_w, *cls_w;
  float *pool_b, *cls_b;
  void **owned; /* what the model allocated for weights */
  size_t nowned, capowned, ownedbytes;
  /* scratch */
  float *x, *q, *k, *v, *c, *t, *f, *s, *mean, *rstd;
  void *i8; /* int8 scratch */
  size_t ld;                     /* columns of the activation buffers */
  uint32_t *ids;                 /* a tokenized text or pair, then a batch */
  uint8_t *tt;
  size_t capids;
  size_t *off, *len, capseq;     /* per text: start and length in the batch */
  uint32_t *all;                 /* every text's ids (embed, score) */
  uint8_t *alltt;
  size_t capall;
  size_t *aoff, *alen, capn;
  uint64_t *order; /* texts by length (run) */
};

/* {====== Errors ======} */

static int fail(rag_bert_error *e, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->why, sizeof e->why, fmt, ap);
  va_end(ap);
  return rc;
}

/* {====== Files ======} */

/* Reads dir/name whole; with `optional`, a missing file gives *buf = NULL. */
static int read_file(const char *dir, const char *name, int optional, unsigned char **buf,
                     size_t *n, rag_bert_error *e) {
  const char *why = "";
  int rc, err = 0;
  *buf = NULL;
  *n = 0;
  rc = rag_file_read_in(dir, name, buf, n, &why, &err);
  if (rc == RAG_EIO && optional && err == ENOENT) return RAG_OK;
  if (rc != RAG_OK) {
    e->file = name;
    e->err = err;
    if (rc == RAG_EIO && err == 0) return fail(e, rc, "%s", why);
  }
  return rc;
}

/* dir/name as JSON (an object); NULL with RAG_OK when optional and absent. */
static int read_json(const char *dir, const char *name, int optional, cJSON **out,
                     rag_bert_error *e) {
  unsigned char *buf;
  size_t n;
  int rc = read_file(dir, name, optional, &buf, &n, e);
  *out = NULL;
  if (rc != RAG_OK || buf == NULL) return rc;
  *out = cJSON_ParseWithLength((const char *)buf, n);
  rag_free(buf);
  if (*out == NULL || !cJSON_IsObject(*out)) {
    cJSON_Delete(*out);
    *out = NULL;
    e->file = name;
    return fail(e, RAG_EFORMAT, "not a valid json object");
  }
  return RAG_OK;
}

/* A whole number field of o in [lo, hi] (absent: def, or an error when def < 0). */
static int field(const cJSON *o, const char *key, double def, double lo, double hi, size_t *out,
                 rag_bert_error *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  double d;
  if (v == NULL) {
    if (def < 0) return fail(e, RAG_EFORMAT, "no '%s'", key);
    *out = (size_t)def;
    return RAG_OK;
  }
  d = cJSON_IsNumber(v) ? v->valuedouble : -1;
  if (!(d >= lo && d <= hi) || d != floor(d))
    return fail(e, RAG_EFORMAT, "'%s' must be a whole number in [%.0f, %.0f]", key, lo, hi);
  *out = (size_t)d;
  return RAG_OK;
}

static int is_true(const cJSON *o, const char *key) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* {====== config.json and the sentence-transformers files ======} */

static int load_config(rag_bert *m, const char *dir, rag_bert_error *e) {
  cJSON *c, *arch, *v;
  size_t labels = 1;
  int rc = read_json(dir, "config.json", 0, &c, e);
  if (rc != RAG_OK) return rc;
  e->file = "config.json";
  v = cJSON_GetObjectItemCaseSensitive(c, "model_type");
  if (!cJSON_IsString(v) || strcmp(v->valuestring, "bert") != 0)
    rc = fail(e, RAG_EFORMAT, "model_type must be \"bert\", got %s",
              cJSON_IsString(v) ? v->valuestring : "none");
  if (rc == RAG_OK) {
    v = cJSON_GetObjectItemCaseSensitive(c, "hidden_act");
    if (v != NULL && !(cJSON_IsString(v) && strcmp(v->valuestring, "gelu") == 0))
      rc = fail(e, RAG_EFORMAT, "hidden_act must be \"gelu\"");
  }
  if (rc == RAG_OK) {
    v = cJSON_GetObjectItemCaseSensitive(c, "position_embedding_type");
    if (v != NULL && !(cJSON_IsString(v) && strcmp(v->valuestring, "absolute") == 0))
      rc = fail(e, RAG_EFORMAT, "position_embedding_type must be \"absolute\"");
  }
  arch = cJSON_GetObjectItemCaseSensitive(c, "architectures");
  cJSON_ArrayForEach(v, arch) {
    if (cJSON_IsString(v) && strcmp(v->valuestring, "BertForSequenceClassification") == 0)
      m->cross = 1;
  }
  if (rc == RAG_OK && (rc = field(c, "hidden_size", -1, 1, MAX_DIM, &m->hidden, e)) == RAG_OK &&
      (rc = field(c, "num_hidden_layers", -1, 1, MAX_LAYERS, &m->nlayers, e)) == RAG_OK &&
      (rc = field(c, "num_attention_heads", -1, 1, MAX_DIM, &m->heads, e)) == RAG_OK &&
      (rc = field(c, "intermediate_size", -1, 1, MAX_DIM, &m->ff, e)) == RAG_OK &&
      (rc = field(c, "vocab_size", -1, 1, 1e8, &m->vocab, e)) == RAG_OK &&
      (rc = field(c, "max_position_embeddings", -1, 1, 1e6, &m->positions, e)) == RAG_OK &&
      (rc = field(c, "type_vocab_size", 2, 1, 1e6, &m->types, e)) == RAG_OK) {
    v = cJSON_GetObjectItemCaseSensitive(c, "layer_norm_eps");
    m->eps = cJSON_IsNumber(v) ? (float)v->valuedouble : 1e-12f;
    if (!(m->eps > 0)) rc = fail(e, RAG_EFORMAT, "layer_norm_eps must be > 0");
    if (rc == RAG_OK && m->hidden % m->heads != 0)
      rc = fail(e, RAG_EFORMAT, "hidden_size %lu is not a multiple of num_attention_heads %lu",
                (unsigned long)m->hidden, (unsigned long)m->heads);
    if (rc == RAG_OK && m->cross) {
      v = cJSON_GetObjectItemCaseSensitive(c, "id2label");
      if (cJSON_IsObject(v)) labels = (size_t)cJSON_GetArraySize(v);
      if (rc == RAG_OK && (rc = field(c, "num_labels", (double)labels, 1, 1e6, &labels, e)) ==
                              RAG_OK && labels != 1)
        rc = fail(e, RAG_EFORMAT, "a cross-encoder must have one label, this one has %lu",
                  (unsigned long)labels);
    }
  }
  cJSON_Delete(c);
  return rc;
}

/* Pooling, normalisation and the token limit, as sentence-transformers
** reads them (modules.json, its Pooling module's config.json,
** sentence_bert_config.json; tokenizer_config.json for cross-encoders). */
static int load_sbert(rag_bert *m, const char *dir, rag_bert_error *e) {
  cJSON *mods = NULL, *pool = NULL, *sb = NULL, *tc = NULL, *v;
  size_t max = 0;
  int rc = RAG_OK;
  m->normalize = 0;
  m->cls_pooling = m->cross;
  if (!m->cross) { /* no modules.json: sentence-transformers' default, mean pooling */
    unsigned char *buf;
    size_t n;
    if ((rc = read_file(dir, "modules.json", 1, &buf, &n, e)) != RAG_OK) return rc;
    if (buf != NULL) {
      mods = cJSON_ParseWithLength((const char *)buf, n);
      rag_free(buf);
      if (!cJSON_IsArray(mods)) {
        cJSON_Delete(mods);
        e->file = "modules.json";
        return fail(e, RAG_EFORMAT, "not a json list of modules");
      }
    }
  }
  cJSON_ArrayForEach(v, mods) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(v, "path");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (strstr(t, "Normalize") != NULL) m->normalize = 1;
    if (strstr(t, "Pooling") != NULL && cJSON_IsString(path) && pool == NULL) {
      char *name = rag_file_join(path->valuestring, "config.json");
      if (name == NULL) {
        rc = RAG_ENOMEM;
        break;
      }
      rc = read_json(dir, name, 0, &pool, e);
      rag_free(name);
      if (rc != RAG_OK) {
        e->file = "1_Pooling/config.json";
        break;
      }
    }
  }
  cJSON_Delete(mods);
  if (rc == RAG_OK && pool != NULL) {
    if (is_true(pool, "pooling_mode_max_tokens") || is_true(pool, "pooling_mode_mean_sqrt_len_tokens"))
      rc = fail(e, RAG_EFORMAT, "only mean or cls pooling is supported");
    else m->cls_pooling = is_true(pool, "pooling_mode_cls_token") &&
                          !is_true(pool, "pooling_mode_mean_tokens");
  }
  cJSON_Delete(pool);
  if (rc != RAG_OK) return rc;
  if ((rc = read_json(dir, "sentence_bert_config.json", 1, &sb, e)) != RAG_OK) return rc;
  if (sb != NULL) {
    e->file = "sentence_bert_config.json";
    rc = field(sb, "max_seq_length", 0, 0, 1e9, &max, e);
    cJSON_Delete(sb);
    if (rc != RAG_OK) return rc;
  }
  if (max == 0) {
    if ((rc = read_json(dir, "tokenizer_config.json", 1, &tc, e)) != RAG_OK) return rc;
    v = cJSON_GetObjectItemCaseSensitive(tc, "model_max_length");
    if (cJSON_IsNumber(v) && v->valuedouble >= 3 && v->valuedouble < 1e9)
      max = (size_t)v->valuedouble;
    cJSON_Delete(tc);
  }
  m->maxtok = max == 0 || max > m->positions ? m->positions : max;
  if (m->maxtok < 3) return fail(e, RAG_EFORMAT, "a maximum of %lu tokens leaves no room",
                                 (unsigned long)m->maxtok);
  e->file = "";
  return RAG_OK;
}

/* {====== tokenizer.json ======} */

/* The id of special token `name`: from the post-processor's template (as
** the tokenizers library adds it), else from the vocabulary. */
static int special_id(const cJSON *root, const char *name, uint32_t *id, rag_bert_error *e) {
  const cJSON *pp = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
  const cJSON *sp = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(sp, name);
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(t, "ids");
  const cJSON *v = NULL;
  const char *key = strcmp(name, "[CLS]") == 0 ? "cls" : "sep";
  if (cJSON_IsArray(ids) && cJSON_GetArraySize(ids) == 1) v = cJSON_GetArrayItem(ids, 0);
  if (v == NULL) { /* BertProcessing: "cls": ["[CLS]", 101] */
    const cJSON *pair = cJSON_GetObjectItemCaseSensitive(pp, key);
    if (cJSON_IsArray(pair) && cJSON_GetArraySize(pair) == 2) v = cJSON_GetArrayItem(pair, 1);
  }
  if (v == NULL) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(model, "vocab"), name);
  }
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 4294967295.0) ||
      v->valuedouble != floor(v->valuedouble))
    return fail(e, RAG_EFORMAT, "no id for %s", name);
  *id = (uint32_t)v->valuedouble;
  return RAG_OK;
}

static int load_tokenizer(rag_bert *m, const char *dir, rag_bert_error *e) {
  unsigned char *buf;
  size_t n;
  cJSON *root;
  rag_hftok_info info;
  int rc = read_file(dir, "tokenizer.json", 0, &buf, &n, e);
  if (rc != RAG_OK) return rc;
  e->file = "tokenizer.json";
  rc = rag_hftok_new((const char *)buf, n, &m->tok, e->why, sizeof e->why);
  if (rc == RAG_OK) {
    root = cJSON_ParseWithLength((const char *)buf, n);
    if (root == NULL) rc = RAG_ENOMEM; /* hftok parsed the same text */
    if (rc == RAG_OK && (rc = special_id(root, "[CLS]", &m->cls, e)) == RAG_OK)
      rc = special_id(root, "[SEP]", &m->sep, e);
    cJSON_Delete(root);
  }
  rag_free(buf);
  if (rc != RAG_OK) return rc;
  rag_hftok_describe(m->tok, &info);
  if (strcmp(info.model, "WordPiece") != 0)
    return fail(e, RAG_EFORMAT, "a BERT tokenizer must be WordPiece, not %s", info.model);
  if (info.nids > m->vocab || m->cls >= m->vocab || m->sep >= m->vocab)
    return fail(e, RAG_ECORRUPT, "token ids beyond config.json's vocab_size %lu",
                (unsigned long)m->vocab);
  e->file = "";
  return RAG_OK;
}

/* {====== model.safetensors ======} */

static void *own(rag_bert *m, size_t bytes) {
  void *p;
  if (m->nowned == m->capowned) {
    void **q = (void **)rag_grow(m->owned, &m->capowned, m->nowned + 1, sizeof *q);
    if (q == NULL) return NULL;
    m->owned = q;
  }
  if ((p = rag_malloc(bytes + 1)) == NULL) return NULL;
  m->owned[m->nowned++] = p;
  m->ownedbytes += bytes;
  return p;
}

/* The tensor `prefix name` with the shape rows x cols (cols 0: 1-d). */
static int tensor(rag_bert *m, const char *prefix, const char *name, size_t rows, size_t cols,
                  const rag_st_tensor **out, rag_bert_error *e) {
  char full[160];
  const rag_st_tensor *t;
  snprintf(full, sizeof full, "%s%s", prefix, name);
  if ((t = rag_safetensors_find(&m->st, full)) == NULL)
    return fail(e, RAG_EFORMAT, "no tensor '%s'", full);
  if (t->dtype != RAG_ST_F32 && t->dtype != RAG_ST_F16)
    return fail(e, RAG_EFORMAT, "tensor '%s': dtype %s (F32 or F16 wanted)", full, t->dtype_name);
  if (cols == 0 ? t->rank != 1 || t->shape[0] != rows
                : t->rank != 2 || t->shape[0] != rows || t->shape[1] != cols)
    return fail(e, RAG_EFORMAT, "tensor '%s' has the wrong shape for config.json (%lu x %lu)",
                full, (unsigned long)rows, (unsigned long)cols);
  *out = t;
  return RAG_OK;
}

/* Element i of a tensor, as f32. */
static float elem(const rag_bert *m, const rag_st_tensor *t, size_t i) {
  const unsigned char *p = (const unsigned char *)m->map + t->begin + i * t->elem;
  if (t->elem == 2) return rag_kernel_f32_from_f16((uint16_t)rag_le(p, 2));
  {
    uint32_t u = (uint32_t)rag_le(p, 4);
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
}

/* A copy of a tensor as f32. */
static float *widen(rag_bert *m, const rag_st_tensor *t) {
  float *p = (float *)own(m, t->count * sizeof *p);
  size_t i;
  if (p == NULL) return NULL;
  for (i = 0; i < t->count; i++) p[i] = elem(m, t, i);
  return p;
}

/* A matrix as the kernels read it: in place when the file holds aligned
** little-endian f32, else widened. */
static int matrix(rag_bert *m, const char *prefix, const char *name, size_t rows, size_t cols,
                  const float **out, rag_bert_error *e) {
  const rag_st_tensor *t;
  const unsigned char *p;
  int rc = tensor(m, prefix, name, rows, cols, &t, e);
  if (rc != RAG_OK) return rc;
  p = (const unsigned char *)m->map + t->begin;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (t->dtype == RAG_ST_F32 && ((uintptr_t)p & 3u) == 0) {
    *out = (const float *)(const void *)p;
    return RAG_OK;
  }
#endif
  m->f16 |= t->dtype == RAG_ST_F16;
  return (*out = widen(m, t)) != NULL ? RAG_OK : RAG_ENOMEM;
}

static int vector(rag_bert *m, const char *prefix, const char *name, size_t n, float **out,
                  rag_bert_error *e) {
  const rag_st_tensor *t;
  int rc = tensor(m, prefix, name, n, 0, &t, e);
  if (rc != RAG_OK) return rc;
  return (*out = widen(m, t)) != NULL ? RAG_OK : RAG_ENOMEM;
}

static int table(rag_bert *m, const char *prefix, const char *name, size_t rows,
                 const unsigned char **out, size_t *elem, rag_bert_error *e) {
  const rag_st_tensor *t;
  int rc = tensor(m, prefix, name, rows, m->hidden, &t, e);
  if (rc != RAG_OK) return rc;
  m->f16 |= t->dtype == RAG_ST_F16;
  *out = (const unsigned char *)m->map + t->begin;
  *elem = t->elem;
  return RAG_OK;
}

/* A dense layer's weight, quantized to int8 when asked (and in % 4 == 0). */
static int weight(rag_bert *m, const char *prefix, const char *name, size_t out, size_t in,
                  dense *d, rag_bert_error *e) {
  int rc = matrix(m, prefix, name, out, in, &d->w, e);
  d->out = out;
  d->in = in;
  d->q = NULL;
  if (rc != RAG_OK || !m->quantize || in % 4 != 0) return rc;
  if ((d->q = (int8_t *)own(m, out * in)) == NULL ||
      (d->scale = (float *)own(m, out * sizeof *d->scale)) == NULL ||
      (d->sum = (int32_t *)own(m, out * sizeof *d->sum)) == NULL)
    return RAG_ENOMEM;
  rag_matmul_quantize_rows(d->w, out, in, d->q, d->scale, d->sum);
  return RAG_OK;
}

static int load_layer(rag_bert *m, const char *pre, size_t i, rag_bert_error *e) {
  char p[96];
  layer *l = &m->layers[i];
  size_t h = m->hidden, f = m->ff;
  int rc;
  snprintf(p, sizeof p, "%sencoder.layer.%lu.", pre, (unsigned long)i);
  if ((rc = weight(m, p, "attention.self.query.weight", h, h, &l->wq, e)) != RAG_OK ||
      (rc = vector(m, p, "attention.self.query.bias", h, &l->bq, e)) != RAG_OK ||
      (rc = weight(m, p, "attention.self.key.weight", h, h, &l->wk, e)) != RAG_OK ||
      (rc = vector(m, p, "attention.self.key.bias", h, &l->bk, e)) != RAG_OK ||
      (rc = weight(m, p, "attention.self.value.weight", h, h, &l->wv, e)) != RAG_OK ||
      (rc = vector(m, p, "attention.self.value.bias", h, &l->bv, e)) != RAG_OK ||
      (rc = weight(m, p, "attention.output.dense.weight", h, h, &l->wo, e)) != RAG_OK ||
      (rc = vector(m, p, "attention.output.dense.bias", h, &l->bo, e)) != RAG_OK ||
      (rc = vector(m, p, "attention.output.LayerNorm.weight", h, &l->g1, e)) != RAG_OK ||
      (rc = vector(m, p, "attention.output.LayerNorm.bias", h, &l->b1, e)) != RAG_OK ||
      (rc = weight(m, p, "intermediate.dense.weight", f, h, &l->wi, e)) != RAG_OK ||
      (rc = vector(m, p, "intermediate.dense.bias", f, &l->bi, e)) != RAG_OK ||
      (rc = weight(m, p, "output.dense.weight", h, f, &l->wo2, e)) != RAG_OK ||
      (rc = vector(m, p, "output.dense.bias", h, &l->bo2, e)) != RAG_OK ||
      (rc = vector(m, p, "output.LayerNorm.weight", h, &l->g2, e)) != RAG_OK ||
      (rc = vector(m, p, "output.LayerNorm.bias", h, &l->b2, e)) != RAG_OK)
    return rc;
  return RAG_OK;
}

static int load_weights(rag_bert *m, const char *dir, rag_bert_error *e) {
  const char *why = "", *pre;
  char *path = rag_file_join(dir, "model.safetensors");
  size_t i, h = m->hidden;
  int rc, err = 0;
  if (path == NULL) return RAG_ENOMEM;
  rc = rag_file_map(path, &m->map, &m->maplen, &why, &err);
  rag_free(path);
  e->file = "model.safetensors";
  if (rc != RAG_OK) {
    e->err = err;
    return rc == RAG_EIO && err == 0 ? fail(e, rc, "%s", why) : rc;
  }
  rc = rag_safetensors_parse((const unsigned char *)m->map, m->maplen, &m->st, e->why,
                             sizeof e->why);
  if (rc != RAG_OK) return rc;
  pre = rag_safetensors_find(&m->st, "bert.embeddings.word_embeddings.weight") != NULL ? "bert."
                                                                                       : "";
  if ((m->layers = (layer *)own(m, m->nlayers * sizeof *m->layers)) == NULL) return RAG_ENOMEM;
  if ((rc = table(m, pre, "embeddings.word_embeddings.weight", m->vocab, &m->wemb, &m->wel, e)) != RAG_OK ||
      (rc = table(m, pre, "embeddings.position_embeddings.weight", m->positions, &m->pemb, &m->pel,
                    e)) !=
          RAG_OK ||
      (rc = table(m, pre, "embeddings.token_type_embeddings.weight", m->types, &m->temb, &m->tel, e)) !=
          RAG_OK ||
      (rc = vector(m, pre, "embeddings.LayerNorm.weight", h, &m->eg, e)) != RAG_OK ||
      (rc = vector(m, pre, "embeddings.LayerNorm.bias", h, &m->eb, e)) != RAG_OK)
    return rc;
  for (i = 0; i < m->nlayers; i++)
    if ((rc = load_layer(m, pre, i, e)) != RAG_OK) return rc;
  if (m->cross) {
    if ((rc = matrix(m, pre, "pooler.dense.weight", h, h, &m->pool_w, e)) != RAG_OK ||
        (rc = vector(m, pre, "pooler.dense.bias", h, &m->pool_b, e)) != RAG_OK ||
        (rc = matrix(m, "", "classifier.weight", 1, h, &m->cls_w, e)) != RAG_OK ||
        (rc = vector(m, "", "classifier.bias", 1, &m->cls_b, e)) != RAG_OK)
      return rc;
  }
  e->file = "";
  return RAG_OK;
}

int rag_bert_load(const char *dir, const rag_bert_opts *o, rag_bert **out, rag_bert_error *e) {
  rag_bert *m;
  struct stat st;
  int rc;
  *out = NULL;
  memset(e, 0, sizeof *e);
  e->file = "";
  if (stat(dir, &st) != 0) {
    e->err = errno;
    return RAG_EIO;
  }
  if (!S_ISDIR(st.st_mode)) return fail(e, RAG_EFORMAT, "not a directory");
  if ((m = (rag_bert *)rag_malloc(sizeof *m)) == NULL) return RAG_ENOMEM;
  memset(m, 0, sizeof *m);
  rag_matmul_init(&m->mm, o != NULL && o->portable);
  m->quantize = o != NULL && o->quantize;
  if ((rc = load_config(m, dir, e)) != RAG_OK || (rc = load_sbert(m, dir, e)) != RAG_OK ||
      (rc = load_tokenizer(m, dir, e)) != RAG_OK || (rc = load_weights(m, dir, e)) != RAG_OK) {
    rag_bert_free(m);
    return rc;
  }
  *out = m;
  return RAG_OK;
}

void rag_bert_free(rag_bert *m) {
  size_t i;
  if (m == NULL) return;
  rag_hftok_free(m->tok);
  rag_safetensors_free(&m->st);
  rag_file_unmap(m->map, m->maplen);
  for (i = 0; i < m->nowned; i++) rag_free(m->owned[i]);
  rag_free(m->owned);
  rag_free(m->x);
  rag_free(m->i8);
  rag_free(m->s);
  rag_free(m->ids);
  rag_free(m->tt);
  rag_free(m->off);
  rag_free(m->len);
  rag_free(m->all);
  rag_free(m->alltt);
  rag_free(m->aoff);
  rag_free(m->alen);
  rag_free(m->order);
  rag_free(m);
}

void rag_bert_describe(const rag_bert *m, rag_bert_info *info) {
  info->cross = m->cross;
  info->dim = m->hidden;
  info->layers = m->nlayers;
  info->heads = m->heads;
  info->ff = m->ff;
  info->vocab = m->vocab;
  info->positions = m->positions;
  info->max_tokens = m->maxtok;
  info->pooling = m->cls_pooling ? "cls" : "mean";
  info->normalize = m->normalize;
  info->dtype = m->f16 ? "f16" : "f32";
  info->weights = m->quantize ? "int8" : "f32";
  info->kernel = rag_matmul_name(&m->mm);
  info->mapped = m->maplen;
  info->owned = m->ownedbytes;
}

/* {====== Tokens ======} */

static int reserve_ids(rag_bert *m, size_t n) {
  if (n > m->capids) {
    size_t cap = m->capids;
    uint32_t *p = (uint32_t *)rag_grow(m->ids, &cap, n, sizeof *p);
    uint8_t *q;
    if (p == NULL) return RAG_ENOMEM;
    m->ids = p;
    cap = m->capids;
    if ((q = (uint8_t *)rag_grow(m->tt, &cap, n, 1)) == NULL) return RAG_ENOMEM;
    m->tt = q;
    m->capids = cap;
  }
  return RAG_OK;
}

/* The content ids of a text (no special tokens), copied to *out. */
static int content(rag_bert *m, const char *s, size_t len, uint32_t **out, size_t *n,
                   size_t *errpos) {
  const uint32_t *ids;
  size_t i;
  int rc;
  if ((i = rag_text_first_invalid((const unsigned char *)s, len)) != len) {
    *errpos = i + 1;
    return RAG_EENCODING;
  }
  if ((rc = rag_hftok_encode(m->tok, s, len, &ids, n)) != RAG_OK) return rc;
  if ((*out = (uint32_t *)rag_malloc(*n * sizeof **out + 1)) == NULL) return RAG_ENOMEM;
  if (*n > 0) memcpy(*out, ids, *n * sizeof **out);
  return RAG_OK;
}

int rag_bert_tokenize(rag_bert *m, const char *a, size_t alen, const char *b, size_t blen,
                      const uint32_t **ids, const uint8_t **types, size_t *n, size_t *errpos,
                      int *inb) {
  uint32_t *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0, i, k = 0, budget;
  int rc;
  *n = 0;
  *inb = 0;
  if ((rc = content(m, a, alen, &x, &nx, errpos)) != RAG_OK) return rc;
  if (b != NULL && (rc = content(m, b, blen, &y, &ny, errpos)) != RAG_OK) {
    *inb = rc == RAG_EENCODING;
    rag_free(x);
    return rc;
  }
  budget = m->maxtok - (b != NULL ? 3 : 2);
  if (b == NULL && nx > budget) nx = budget;
  if (b != NULL && nx + ny > budget) { /* tokenizers' "longest_first" */
    size_t n1 = nx < ny ? nx : ny, n2; /* the shorter keeps its length if it fits in half */
    n2 = n1 > budget ? n1 : n1 > budget - n1 ? n1 : budget - n1;
    if (n1 + n2 > budget) { /* else both get half, the longer (on a tie the second) one more */
      n1 = budget / 2;
      n2 = n1 + budget % 2;
    }
    if (nx > ny) {
      size_t t = n1;
      n1 = n2;
      n2 = t;
    }
    if (n1 < nx) nx = n1;
    if (n2 < ny) ny = n2;
  }
  if ((rc = reserve_ids(m, nx + ny + 3)) == RAG_OK) {
    m->ids[k] = m->cls, m->tt[k++] = 0;
    for (i = 0; i < nx; i++) m->ids[k] = x[i], m->tt[k++] = 0;
    m->ids[k] = m->sep, m->tt[k++] = 0;
    if (b != NULL) {
      for (i = 0; i < ny; i++) m->ids[k] = y[i], m->tt[k++] = 1;
      m->ids[k] = m->sep, m->tt[k++] = 1;
    }
    *ids = m->ids;
    *types = m->tt;
    *n = k;
  }
  rag_free(x);
  rag_free(y);
  return rc;
}

/* {====== The forward pass ======} */

/* Sizes the activation buffers for `ld` columns. */
static int reserve_cols(rag_bert *m, size_t ld) {
  size_t h = m->hidden, per, total;
  float *p;
  if (ld <= m->ld) return RAG_OK;
  per = 6 * h + m->ff + 2; /* x q k v c t, f, mean and rstd */
  if (RAG_MUL_OVERFLOWS(per, ld) || RAG_MUL_OVERFLOWS(per * ld, sizeof(float))) return RAG_ENOMEM;
  total = per * ld + RAG_MATMUL_COLS; /* attention reads a text's columns in whole groups */
  if ((p = (float *)rag_malloc(total * sizeof *p)) == NULL) return RAG_ENOMEM;
  memset(p, 0, total * sizeof *p);
  rag_free(m->x);
  m->x = p;
  m->q = p + h * ld;
  m->k = p + 2 * h * ld;
  m->v = p + 3 * h * ld;
  m->c = p + 4 * h * ld;
  m->t = p + 5 * h * ld;
  m->f = p + 6 * h * ld;
  m->mean = m->f + m->ff * ld;
  m->rstd = m->mean + ld;
  m->ld = ld;
  if (m->quantize) {
    size_t in = m->ff > h ? m->ff : h;
    void *q = rag_malloc(rag_matmul_i8_scratch(in, ld));
    if (q == NULL) {
      m->ld = 0; /* sized again next time */
      return RAG_ENOMEM;
    }
    rag_free(m->i8);
    m->i8 = q;
  }
  return RAG_OK;
}

/* LayerNorm over the features of each of the columns 0..ld of x, in place. */
static void layer_norm(rag_bert *m, float *x, size_t ld, const float *g, const float *b) {
  size_t f, t, h = m->hidden;
  float *mean = m->mean, *rstd = m->rstd;
  for (t = 0; t < ld; t++) mean[t] = rstd[t] = 0;
  for (f = 0; f < h; f++)
    for (t = 0; t < ld; t++) mean[t] += x[f * ld + t];
  for (t = 0; t < ld; t++) mean[t] /= (float)h;
  for (f = 0; f < h; f++)
    for (t = 0; t < ld; t++) {
      float d = x[f * ld + t] - mean[t];
      rstd[t] += d * d;
    }
  for (t = 0; t < ld; t++) rstd[t] = 1.0f / sqrtf(rstd[t] / (float)h + m->eps);
  for (f = 0; f < h; f++)
    for (t = 0; t < ld; t++) x[f * ld + t] = (x[f * ld + t] - mean[t]) * rstd[t] * g[f] + b[f];
}

static size_t round_cols(size_t n) {
  return (n + RAG_MATMUL_COLS - 1) / RAG_MATMUL_COLS * RAG_MATMUL_COLS;
}

/*
** Self-attention of one text (columns o..o+n) into m->c, every head: the
** scores s[j][i] of query token i for key token j (the keys transposed and
** scaled, times the queries), softmax down each column, then the values
** times the weights, each column divided by its sum. Columns past n are
** computed and dropped.
*/
static void attend(rag_bert *m, size_t o, size_t n) {
  size_t ld = m->ld, dh = m->hidden / m->heads, np = round_cols(n), cap = round_cols(m->maxtok);
  size_t h, d, i, j;
  float scale = 1.0f / sqrtf((float)dh);
  float *s = m->s, *kt = s + m->maxtok * cap, *ct = kt + m->maxtok * dh, *mx = ct + dh * cap,
        *sum = mx + cap;
  for (h = 0; h < m->heads; h++) {
    const float *q = m->q + h * dh * ld + o, *k = m->k + h * dh * ld + o,
                *v = m->v + h * dh * ld + o;
    float *c = m->c + h * dh * ld + o;
    for (d = 0; d < dh; d++)
      for (j = 0; j < n; j++) kt[j * dh + d] = k[d * ld + j] * scale;
    rag_matmul_f32(&m->mm, n, dh, np, kt, dh, q, ld, NULL, s, np);
    for (i = 0; i < np; i++) mx[i] = s[i];
    for (j = 1; j < n; j++)
      for (i = 0; i < np; i++) mx[i] = s[j * np + i] > mx[i] ? s[j * np + i] : mx[i];
    for (i = 0; i < np; i++) sum[i] = 0;
    for (j = 0; j < n; j++) {
      float *row = s + j * np;
      for (i = 0; i < np; i++) row[i] -= mx[i];
      rag_matmul_exp(&m->mm, row, np);
      for (i = 0; i < np; i++) sum[i] += row[i];
    }
    rag_matmul_f32(&m->mm, dh, n, np, v, ld, s, np, NULL, ct, np);
    for (d = 0; d < dh; d++)
      for (i = 0; i < n; i++) c[d * ld + i] = ct[d * np + i] / sum[i];
  }
}

/* y = d x + b over the batch's columns, in int8 or f32; `packed`: x is
** the one the int8 scratch already holds. */
static void apply(rag_bert *m, const dense *d, const float *x, const float *b, float *y,
                  int packed) {
  size_t ld = m->ld;
  if (d->q != NULL) {
    if (!packed) rag_matmul_i8_pack(&m->mm, d->in, ld, x, ld, m->i8);
    rag_matmul_i8(&m->mm, d->out, d->in, ld, d->q, d->scale, d->sum, b, y, ld, m->i8);
  } else {
    rag_matmul_f32(&m->mm, d->out, d->in, ld, d->w, d->in, x, ld, b, y, ld);
  }
}

/* Element i of an embedding table of `elem`-byte (f32 or f16) entries. */
static float table_at(const unsigned char *tab, size_t elem, size_t i) {
  const unsigned char *p = tab + i * elem;
  uint32_t u;
  float f;
  if (elem == 2) return rag_kernel_f32_from_f16((uint16_t)rag_le(p, 2));
  u = (uint32_t)rag_le(p, 4);
  memcpy(&f, &u, 4);
  return f;
}

/*
** Runs the encoder over the batch of m->ids/m->tt: `nseq` texts, text s at
** off[s] for len[s] tokens. Leaves the last layer's output in m->x.
*/
static int forward(rag_bert *m, size_t nseq, size_t ntok) {
  size_t ld = round_cols(ntok);
  size_t h = m->hidden, s, t, f, l;
  int rc;
  if ((rc = reserve_cols(m, ld)) != RAG_OK) return rc;
  ld = m->ld;
  if (m->s == NULL) { /* attention: scores, keys, values out, maxima and sums */
    size_t cap = round_cols(m->maxtok), dh = h / m->heads;
    size_t n = m->maxtok * cap + m->maxtok * dh + dh * cap + 2 * cap;
    if ((m->s = (float *)rag_malloc(n * sizeof *m->s)) == NULL) return RAG_ENOMEM;
    memset(m->s, 0, n * sizeof *m->s);
  }
  /* embeddings; the columns past the batch stay zero, so stay finite */
  for (f = 0; f < h; f++)
    for (t = 0; t < ld; t++) m->x[f * ld + t] = 0;
  for (s = 0; s < nseq; s++)
    for (t = 0; t < m->len[s]; t++) {
      size_t col = m->off[s] + t;
      uint32_t id = m->ids[col];
      uint8_t ty = m->tt[col];
      for (f = 0; f < h; f++)
        m->x[f * ld + col] = table_at(m->wemb, m->wel, (size_t)id * h + f) +
                             table_at(m->pemb, m->pel, t * h + f) +
                             table_at(m->temb, m->tel, (size_t)ty * h + f);
    }
  layer_norm(m, m->x, ld, m->eg, m->eb);
  for (l = 0; l < m->nlayers; l++) {
    const layer *y = &m->layers[l];
    apply(m, &y->wq, m->x, y->bq, m->q, 0);
    apply(m, &y->wk, m->x, y->bk, m->k, y->wq.q != NULL);
    apply(m, &y->wv, m->x, y->bv, m->v, y->wq.q != NULL);
    for (f = 0; f < h * ld; f++) m->c[f] = 0;
    for (s = 0; s < nseq; s++) attend(m, m->off[s], m->len[s]);
    apply(m, &y->wo, m->c, y->bo, m->t, 0);
    for (f = 0; f < h * ld; f++) m->t[f] += m->x[f];
    layer_norm(m, m->t, ld, y->g1, y->b1);
    apply(m, &y->wi, m->t, y->bi, m->f, 0);
    rag_matmul_gelu(&m->mm, m->f, m->ff * ld);
    apply(m, &y->wo2, m->f, y->bo2, m->x, 0);
    for (f = 0; f < h * ld; f++) m->x[f] += m->t[f];
    layer_norm(m, m->x, ld, y->g2, y->b2);
  }
  return RAG_OK;
}

/* {====== Embedding and scoring ======} */

static int reserve_batch(rag_bert *m, size_t n) {
  if (n > m->capseq) {
    size_t cap = m->capseq;
    size_t *a = (size_t *)rag_grow(m->off, &cap, n, sizeof *a), *b;
    if (a == NULL) return RAG_ENOMEM;
    m->off = a;
    cap = m->capseq;
    if ((b = (size_t *)rag_grow(m->len, &cap, n, sizeof *b)) == NULL) return RAG_ENOMEM;
    m->len = b;
    m->capseq = cap;
  }
  return RAG_OK;
}

/* Room for n texts' ids, and `tokens` ids in all, in m->all. */
static int reserve_all(rag_bert *m, size_t n, size_t tokens) {
  if (n > m->capn) {
    size_t cap = m->capn;
    size_t *a = (size_t *)rag_grow(m->aoff, &cap, n, sizeof *a), *b;
    uint64_t *c;
    if (a == NULL) return RAG_ENOMEM;
    m->aoff = a;
    cap = m->capn;
    if ((b = (size_t *)rag_grow(m->alen, &cap, n, sizeof *b)) == NULL) return RAG_ENOMEM;
    m->alen = b;
    cap = m->capn;
    if ((c = (uint64_t *)rag_grow(m->order, &cap, n, sizeof *c)) == NULL) return RAG_ENOMEM;
    m->order = c;
    m->capn = cap;
  }
  if (tokens > m->capall) {
    size_t cap = m->capall;
    uint32_t *a = (uint32_t *)rag_grow(m->all, &cap, tokens, sizeof *a);
    uint8_t *b;
    if (a == NULL) return RAG_ENOMEM;
    m->all = a;
    cap = m->capall;
    if ((b = (uint8_t *)rag_grow(m->alltt, &cap, tokens, 1)) == NULL) return RAG_ENOMEM;
    m->alltt = b;
    m->capall = cap;
  }
  return RAG_OK;
}

/* Tokenizes text i (with the query q first when q != NULL) into m->all. */
static int gather(rag_bert *m, size_t i, const char *q, size_t qlen, const char *s, size_t len,
                  size_t *at, size_t *bad, size_t *errpos) {
  const uint32_t *ids;
  const uint8_t *tt;
  size_t n;
  int inb, rc;
  rc = q != NULL ? rag_bert_tokenize(m, q, qlen, s, len, &ids, &tt, &n, errpos, &inb)
                 : rag_bert_tokenize(m, s, len, NULL, 0, &ids, &tt, &n, errpos, &inb);
  if (rc == RAG_EENCODING) *bad = q != NULL && !inb ? 0 : i + 1;
  if (rc != RAG_OK) return rc;
  if ((rc = reserve_all(m, i + 1, *at + n)) != RAG_OK) return rc;
  memcpy(m->all + *at, ids, n * sizeof *ids);
  memcpy(m->alltt + *at, tt, n);
  m->aoff[i] = *at;
  m->alen[i] = n;
  *at += n;
  return RAG_OK;
}

/* Keys of texts by length, then position: length << 32 | position. */
static int by_key(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The pooled output of text s of the batch into out[hidden]. */
static void pool(rag_bert *m, size_t s, float *out) {
  size_t h = m->hidden, ld = m->ld, o = m->off[s], n = m->len[s], f, t;
  double norm = 0;
  for (f = 0; f < h; f++) {
    const float *row = m->x + f * ld + o;
    double acc = 0;
    if (m->cls_pooling) acc = row[0];
    else {
      for (t = 0; t < n; t++) acc += row[t];
      acc /= (double)n;
    }
    out[f] = (float)acc;
    norm += acc * acc;
  }
  if (m->normalize) {
    norm = sqrt(norm);
    if (norm < 1e-12) norm = 1e-12; /* torch's normalize: x / max(|x|, eps) */
    for (f = 0; f < h; f++) out[f] = (float)(out[f] / norm);
  }
}

/* The classifier's logit from the [CLS] column of text s. */
static float classify(rag_bert *m, size_t s) {
  size_t h = m->hidden, ld = m->ld, o = m->off[s], i, j;
  double logit = m->cls_b[0];
  for (i = 0; i < h; i++) {
    const float *w = m->pool_w + i * h;
    double acc = m->pool_b[i];
    for (j = 0; j < h; j++) acc += (double)w[j] * m->x[j * ld + o];
    logit += (double)m->cls_w[i] * tanh(acc);
  }
  return (float)logit;
}

/* Runs the n texts gathered in m->all in batches of similar lengths;
** embeddings (or logits) into out in the texts' order. */
static int run(rag_bert *m, size_t n, float *out) {
  size_t i = 0, j;
  int rc;
  for (j = 0; j < n; j++) m->order[j] = (uint64_t)m->alen[j] << 32 | j;
  qsort(m->order, n, sizeof *m->order, by_key);
  for (j = 0; j < n; j++) m->order[j] &= 0xffffffffu;
  if ((rc = reserve_batch(m, BATCH_TEXTS)) != RAG_OK) return rc;
  while (i < n) {
    size_t ns = 0, tok = 0;
    while (i + ns < n && ns < BATCH_TEXTS &&
           (ns == 0 || tok + m->alen[m->order[i + ns]] <= BATCH_TOKENS))
      tok += m->alen[m->order[i + ns++]];
    if ((rc = reserve_ids(m, tok)) != RAG_OK) return rc;
    for (j = 0, tok = 0; j < ns; j++) {
      size_t x = m->order[i + j];
      memcpy(m->ids + tok, m->all + m->aoff[x], m->alen[x] * sizeof *m->ids);
      memcpy(m->tt + tok, m->alltt + m->aoff[x], m->alen[x]);
      m->off[j] = tok;
      m->len[j] = m->alen[x];
      tok += m->alen[x];
    }
    if ((rc = forward(m, ns, tok)) != RAG_OK) return rc;
    for (j = 0; j < ns; j++) {
      size_t x = m->order[i + j];
      if (m->cross) out[x] = classify(m, j);
      else pool(m, j, out + x * m->hidden);
    }
    i += ns;
  }
  return RAG_OK;
}

int rag_bert_embed(rag_bert *m, const char *const *texts, const size_t *lens, size_t n,
                   float *out, size_t *bad, size_t *errpos) {
  size_t i, at = 0;
  int rc;
  *bad = 0;
  if (m->cross) return RAG_EINVAL;
  if (n == 0) return RAG_OK;
  if (n > 0xffffffffu) return RAG_ETOOBIG;
  if ((rc = reserve_all(m, n, 0)) != RAG_OK) return rc;
  for (i = 0; i < n; i++)
    if ((rc = gather(m, i, NULL, 0, texts[i], lens[i], &at, bad, errpos)) != RAG_OK) return rc;
  return run(m, n, out);
}

int rag_bert_score(rag_bert *m, const char *q, size_t qlen, const char *const *texts,
                   const size_t *lens, size_t n, float *out, size_t *bad, size_t *errpos) {
  size_t i, at = 0;
  int rc;
  *bad = 0;
  if (!m->cross) return RAG_EINVAL;
  if (n == 0) return RAG_OK;
  if (n > 0xffffffffu) return RAG_ETOOBIG;
  if ((rc = reserve_all(m, n, 0)) != RAG_OK) return rc;
  for (i = 0; i < n; i++)
    if ((rc = gather(m, i, q, qlen, texts[i], lens[i], &at, bad, errpos)) != RAG_OK) return rc;
  return run(m, n, out);
}
