/*
** rag_model2vec.c: loading a Model2Vec directory and pooling. The
** safetensors file is kept whole and its rows are decoded as they are read;
** the grammar checked, as the safetensors library checks it:
**
**   file   = hlen:u64le header[hlen] data
**   header = JSON object { name: { "dtype": D, "shape": [n...],
**            "data_offsets": [begin, end] }, "__metadata__": {...} }
**   every tensor's end - begin = product(shape) x size(D); the tensors,
**   sorted by begin, tile data exactly (no gap, overlap or trailing byte)
**
** Tensors used: "embeddings" (or "0"), 2-D, F32/F16/I8/F64; for a
** vocabulary-quantized model "mapping" (I32/I64, id -> row) and "weights"
** (F64/F32/F16, one per id).
*/
#include "rag_model2vec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "rag.h"
#include "rag_file.h"
#include "rag_hftok.h"
#include "rag_kernel.h"
#include "rag_safetensors.h"
#include "rag_text.h"
#include "rag_utf8.h"


enum { F32, F16, I8, F64 };
static const char *const dtype_names[] = {"f32", "f16", "i8", "f64"};

struct rag_model2vec {
  rag_hftok *tok;
  unsigned char *file; /* model.safetensors */
  const unsigned char *rows;
  int dtype;
  size_t nrows, dim, rowbytes, nids, median;
  uint32_t *mapping; /* id -> row, or NULL */
  double *weights;   /* per id, or NULL */
  int normalize, has_unk;
  uint32_t unk;
  const char *tokenizer;
  uint32_t *ids; /* scratch: the pooled ids */
  size_t capids;
  double *acc;   /* scratch: dim sums */
};

/* {====== Errors ======} */

static int fail(rag_model2vec_error *e, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->why, sizeof e->why, fmt, ap);
  va_end(ap);
  return rc;
}

/* {====== safetensors ======} */

typedef struct tensor {
  const char *name;
  int dtype;          /* F32 ... or, for mapping, 4 = I32, 5 = I64; -1 another */
  size_t elem;        /* bytes per element */
  size_t shape[2], rank;
  size_t begin, end;  /* from the start of the file */
} tensor;

/* The tensor `name` of the list as the loader reads it (rank 0: absent,
** (size_t)-1: a scalar); `as` names it in messages. */
static void pick(const rag_safetensors *st, const char *name, const char *as, tensor *t) {
  const rag_st_tensor *x = rag_safetensors_find(st, name);
  memset(t, 0, sizeof *t);
  if (x == NULL) return;
  t->name = as;
  t->dtype = x->dtype == RAG_ST_OTHER ? -1 : x->dtype;
  t->elem = x->elem;
  t->rank = x->rank == 0 ? (size_t)-1 : x->rank;
  t->shape[0] = x->rank > 0 ? x->shape[0] : 0;
  t->shape[1] = x->rank > 1 ? x->shape[1] : 0;
  t->begin = x->begin;
  t->end = x->end;
}

/* Parses the n-byte file's header; fills the tensors we use. */
static int parse_safetensors(const unsigned char *p, size_t n, tensor *emb, tensor *map,
                             tensor *wts, rag_model2vec_error *e) {
  rag_safetensors st;
  int rc = rag_safetensors_parse(p, n, &st, e->why, sizeof e->why);
  if (rc == RAG_OK) {
    pick(&st, "embeddings", "embeddings", emb);
    if (emb->name == NULL) pick(&st, "0", "embeddings", emb);
    pick(&st, "mapping", "mapping", map);
    pick(&st, "weights", "weights", wts);
  }
  rag_safetensors_free(&st);
  return rc;
}

/* {====== Loading ======} */

static double read_f(const unsigned char *p, int dtype) {
  uint64_t v;
  float f;
  double d;
  switch (dtype) {
    case F32:
      v = rag_le(p, 4);
      {
        uint32_t u = (uint32_t)v;
        memcpy(&f, &u, 4);
      }
      return f;
    case F16: return rag_kernel_f32_from_f16((uint16_t)rag_le(p, 2));
    case I8: return (double)(signed char)p[0];
    default:
      v = rag_le(p, 8);
      memcpy(&d, &v, 8);
      return d;
  }
}

/* A tensor with an entry per token id (mapping, weights): 1-d, of one of
** the dtypes `kinds` names (dtype_ok), and long enough. */
static int per_id(const rag_model2vec *m, const tensor *t, int dtype_ok, const char *kinds,
                  rag_model2vec_error *e) {
  if (t->rank != 1 || !dtype_ok)
    return fail(e, RAG_EFORMAT, "tensor '%s' must be a 1-d %s tensor", t->name, kinds);
  if (t->shape[0] < m->nids)
    return fail(e, RAG_ECORRUPT, "tensor '%s' has %lu entries for %lu token ids", t->name,
                (unsigned long)t->shape[0], (unsigned long)m->nids);
  return RAG_OK;
}

static int load_quant(rag_model2vec *m, const tensor *map, const tensor *wts,
                      rag_model2vec_error *e) {
  size_t i;
  int rc;
  if (map->rank != 0) {
    int i64 = map->dtype == 5;
    if ((rc = per_id(m, map, map->dtype == 4 || i64, "i32 or i64", e)) != RAG_OK) return rc;
    if ((m->mapping = (uint32_t *)rag_malloc(m->nids * sizeof *m->mapping + 1)) == NULL)
      return RAG_ENOMEM;
    for (i = 0; i < m->nids; i++) {
      uint64_t v = rag_le(m->file + map->begin + i * map->elem, map->elem);
      if (!i64) v = (uint64_t)(int64_t)(int32_t)(uint32_t)v;
      if (v >= m->nrows)
        return fail(e, RAG_ECORRUPT, "mapping of id %lu is out of range", (unsigned long)i);
      m->mapping[i] = (uint32_t)v;
    }
  } else if (m->nrows != m->nids) {
    return fail(e, RAG_ECORRUPT, "%lu embedding rows for %lu token ids",
                (unsigned long)m->nrows, (unsigned long)m->nids);
  }
  if (wts->rank != 0) {
    int ok = wts->dtype == F64 || wts->dtype == F32 || wts->dtype == F16;
    if ((rc = per_id(m, wts, ok, "f64, f32 or f16", e)) != RAG_OK) return rc;
    if ((m->weights = (double *)rag_malloc(m->nids * sizeof *m->weights + 1)) == NULL)
      return RAG_ENOMEM;
    for (i = 0; i < m->nids; i++)
      m->weights[i] = read_f(m->file + wts->begin + i * wts->elem, wts->dtype);
  }
  return RAG_OK;
}

static int load_tensors(rag_model2vec *m, size_t n, rag_model2vec_error *e) {
  tensor emb, map, wts;
  int rc = parse_safetensors(m->file, n, &emb, &map, &wts, e);
  if (rc != RAG_OK) return rc;
  if (emb.rank == 0) return fail(e, RAG_EFORMAT, "no 'embeddings' tensor");
  if (emb.rank != 2) return fail(e, RAG_EFORMAT, "tensor 'embeddings' is not 2-d");
  if (emb.dtype < F32 || emb.dtype > F64)
    return fail(e, RAG_EFORMAT, "unsupported embeddings dtype");
  if (emb.shape[0] == 0 || emb.shape[1] == 0)
    return fail(e, RAG_EFORMAT, "tensor 'embeddings' is empty");
  if (emb.shape[0] > 0xffffffffu)
    return fail(e, RAG_EFORMAT, "tensor 'embeddings' has too many rows");
  m->dtype = emb.dtype;
  m->nrows = emb.shape[0];
  m->dim = emb.shape[1];
  m->rowbytes = m->dim * emb.elem;
  m->rows = m->file + emb.begin;
  return load_quant(m, &map, &wts, e);
}

static int read_file(const char *dir, const char *name, unsigned char **buf, size_t *n,
                     rag_model2vec_error *e) {
  const char *why = "";
  int rc = rag_file_read_in(dir, name, buf, n, &why, &e->err);
  if (rc != RAG_ENOMEM) e->file = name;
  return rc == RAG_EIO && e->err == 0 ? fail(e, rc, "%s", why) : rc;
}

static int load_config(rag_model2vec *m, const char *dir, rag_model2vec_error *e) {
  unsigned char *buf;
  size_t n;
  cJSON *cfg, *norm;
  int rc = read_file(dir, "config.json", &buf, &n, e);
  if (rc != RAG_OK) return rc;
  cfg = cJSON_ParseWithLength((const char *)buf, n);
  rag_free(buf);
  if (cfg == NULL || !cJSON_IsObject(cfg)) {
    cJSON_Delete(cfg);
    return fail(e, RAG_EFORMAT, "not a valid json object");
  }
  norm = cJSON_GetObjectItemCaseSensitive(cfg, "normalize");
  m->normalize = cJSON_IsBool(norm) ? cJSON_IsTrue(norm) : 1; /* model2vec-rs's default */
  cJSON_Delete(cfg);
  return RAG_OK;
}

static int load_tokenizer(rag_model2vec *m, const char *dir, rag_model2vec_error *e) {
  unsigned char *buf;
  size_t n;
  rag_hftok_info info;
  int rc = read_file(dir, "tokenizer.json", &buf, &n, e);
  if (rc != RAG_OK) return rc;
  rc = rag_hftok_new((const char *)buf, n, &m->tok, e->why, sizeof e->why);
  rag_free(buf);
  if (rc != RAG_OK) return rc;
  rag_hftok_describe(m->tok, &info);
  m->nids = info.nids;
  m->median = info.median;
  m->has_unk = info.has_unk;
  m->unk = info.unk;
  m->tokenizer = info.model;
  return RAG_OK;
}

int rag_model2vec_load(const char *dir, rag_model2vec **out, rag_model2vec_error *e) {
  rag_model2vec *m;
  struct stat st;
  size_t n;
  int rc;
  *out = NULL;
  memset(e, 0, sizeof *e);
  e->file = "";
  if (stat(dir, &st) != 0) {
    e->err = errno;
    return RAG_EIO;
  }
  if (!S_ISDIR(st.st_mode)) return fail(e, RAG_EFORMAT, "not a directory");
  if ((m = (rag_model2vec *)rag_malloc(sizeof *m)) == NULL) return RAG_ENOMEM;
  memset(m, 0, sizeof *m);
  if ((rc = load_config(m, dir, e)) == RAG_OK && (rc = load_tokenizer(m, dir, e)) == RAG_OK &&
      (rc = read_file(dir, "model.safetensors", &m->file, &n, e)) == RAG_OK &&
      (rc = load_tensors(m, n, e)) == RAG_OK) {
    if ((m->acc = (double *)rag_malloc(m->dim * sizeof *m->acc)) == NULL) rc = RAG_ENOMEM;
  }
  if (rc != RAG_OK) {
    rag_model2vec_free(m);
    return rc;
  }
  *out = m;
  return RAG_OK;
}

void rag_model2vec_free(rag_model2vec *m) {
  if (m == NULL) return;
  rag_hftok_free(m->tok);
  rag_free(m->file);
  rag_free(m->mapping);
  rag_free(m->weights);
  rag_free(m->ids);
  rag_free(m->acc);
  rag_free(m);
}

void rag_model2vec_describe(const rag_model2vec *m, rag_model2vec_info *info) {
  info->vocab = m->nids;
  info->dim = m->dim;
  info->rows = m->nrows;
  info->dtype = dtype_names[m->dtype];
  info->normalize = m->normalize;
  info->quantized = m->mapping != NULL || m->weights != NULL;
  info->median = m->median;
  info->tokenizer = m->tokenizer;
}

size_t rag_model2vec_dim(const rag_model2vec *m) {
  return m->dim;
}

/* {====== Encoding ======} */

int rag_model2vec_tokenize(rag_model2vec *m, const char *s, size_t len, size_t max_length,
                           const uint32_t **ids, size_t *n, size_t *errpos) {
  const uint32_t *raw;
  size_t nraw, i, k = 0;
  int rc;
  *ids = NULL;
  *n = 0;
  if ((i = rag_text_first_invalid((const unsigned char *)s, len)) != len) {
    *errpos = i + 1;
    return RAG_EENCODING;
  }
  if (max_length != RAG_MODEL2VEC_NOLIMIT) { /* model2vec-rs: keep max_length x median chars */
    size_t chars = RAG_MUL_OVERFLOWS(max_length, m->median) ? (size_t)-1 : max_length * m->median;
    for (i = 0; i < len && chars > 0; chars--) i += rag_utf8_lead_len((unsigned char)s[i]);
    len = i;
  }
  if ((rc = rag_hftok_encode(m->tok, s, len, &raw, &nraw)) != RAG_OK) return rc;
  if (nraw > m->capids) {
    uint32_t *p = (uint32_t *)rag_grow(m->ids, &m->capids, nraw, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    m->ids = p;
  }
  for (i = 0; i < nraw && k < max_length; i++)
    if (!m->has_unk || raw[i] != m->unk) m->ids[k++] = raw[i];
  *ids = m->ids;
  *n = k;
  return RAG_OK;
}

int rag_model2vec_embed(rag_model2vec *m, const char *s, size_t len, size_t max_length,
                        float *out, size_t *errpos) {
  const uint32_t *ids;
  size_t n, i, j;
  double norm = 0;
  int rc = rag_model2vec_tokenize(m, s, len, max_length, &ids, &n, errpos);
  if (rc != RAG_OK) return rc;
  for (j = 0; j < m->dim; j++) m->acc[j] = 0;
  for (i = 0; i < n; i++) {
    size_t row = m->mapping != NULL ? m->mapping[ids[i]] : ids[i];
    const unsigned char *p = m->rows + row * m->rowbytes;
    double w = m->weights != NULL ? m->weights[ids[i]] : 1.0;
    size_t step = m->rowbytes / m->dim;
    if (m->dtype == F32) {
      for (j = 0; j < m->dim; j++, p += 4) {
        uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24;
        float f;
        memcpy(&f, &u, 4);
        m->acc[j] += w * f;
      }
    } else {
      for (j = 0; j < m->dim; j++, p += step) m->acc[j] += w * read_f(p, m->dtype);
    }
  }
  for (j = 0; j < m->dim; j++) {
    if (n > 0) m->acc[j] /= (double)n;
    norm += m->acc[j] * m->acc[j];
  }
  norm = sqrt(norm);
  if (norm < 1e-12) norm = 1e-12; /* model2vec-rs's floor; a zero vector stays zero */
  for (j = 0; j < m->dim; j++) out[j] = (float)(m->normalize ? m->acc[j] / norm : m->acc[j]);
  return RAG_OK;
}
