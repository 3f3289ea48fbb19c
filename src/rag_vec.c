/*
** rag_vec.c: the exact vector index (see rag_vec.h).
**
** File format (integers little-endian; grammar of header, section and str
** in rag_file.h):
**
**   file     = header section{4}       magic "RAGVEC\0\0", version 1
**   "PARM"   dim:u32 metric:u8 dtype:u8
**   "IDS "   count:varint str{count}
**   "ROWS"   count rows of dim components: f32 or f16 (IEEE, little-endian) or i8
**   "SCAL"   count scales:f32 for i8 rows; empty for f32 and f16
**
** A file loads only when every checksum and length agrees, the ids are
** unique, and every component and scale is finite (scales above zero).
*/
#include "rag_vec.h"

#include <math.h>
#include <string.h>

#include "rag_file.h"
#include "rag_topk.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rag_vec stores rows in host order; only little-endian hosts are supported"
#endif

static const unsigned char MAGIC[8] = {'R', 'A', 'G', 'V', 'E', 'C', 0, 0};
#define FORMAT_VERSION 1u
#define NSECTIONS 4u
#define BLOCK 256            /* rows scored per kernel call */
#define BATCH_BYTES (96 * 1024) /* rows per cache block of search_batch */

struct rag_vec {
  rag_vec_opts o;
  rag_kernel kern;
  rag_ids ids;          /* slot i is row i */
  unsigned char *rows;  /* count * rowbytes */
  float *scales;        /* i8 only */
  size_t cap;           /* rows allocated */
  float *tmp;           /* dim floats: the prepared vector or query */
  float *qs;            /* search_batch: the prepared queries */
  size_t qscap;
  float *buf;           /* scores of a block */
  size_t bufcap;
  rag_hit *hits;
  size_t hcap;
  uint32_t *allow;      /* filter: the allowed slots */
  size_t acap;
  unsigned char *seen;  /* filter: slot marks, count bytes */
  size_t seencap;
};

int rag_vec_new(const rag_vec_opts *o, rag_vec **out) {
  rag_vec *v;
  *out = NULL;
  if (o->dim < 1 || o->dim > RAG_VEC_MAX_DIM || (unsigned)o->metric >= RAG_NMETRICS ||
      (unsigned)o->dtype >= RAG_NDTYPES)
    return RAG_EINVAL;
  v = (rag_vec *)rag_malloc(sizeof *v);
  if (v == NULL) return RAG_ENOMEM;
  memset(v, 0, sizeof *v);
  v->o = *o;
  rag_kernel_init(&v->kern, o->dtype, o->metric, o->dim, o->portable);
  rag_ids_init(&v->ids);
  v->tmp = (float *)rag_malloc(o->dim * sizeof *v->tmp);
  if (v->tmp == NULL) {
    rag_free(v);
    return RAG_ENOMEM;
  }
  *out = v;
  return RAG_OK;
}

void rag_vec_free(rag_vec *v) {
  if (v == NULL) return;
  rag_ids_free(&v->ids);
  rag_free(v->rows);
  rag_free(v->scales);
  rag_free(v->tmp);
  rag_free(v->qs);
  rag_free(v->buf);
  rag_free(v->hits);
  rag_free(v->allow);
  rag_free(v->seen);
  rag_free(v);
}

const rag_vec_opts *rag_vec_config(const rag_vec *v) {
  return &v->o;
}

const rag_kernel *rag_vec_kernel(const rag_vec *v) {
  return &v->kern;
}

size_t rag_vec_count(const rag_vec *v) {
  return v->ids.n;
}

const char *rag_vec_id(const rag_vec *v, uint32_t slot, size_t *len) {
  return rag_ids_get(&v->ids, slot, len);
}

static unsigned char *row_at(const rag_vec *v, size_t slot) {
  return v->rows + slot * v->kern.rowbytes;
}

static int prepare(const rag_vec *v, const float *x, float *out, rag_vec_bad *bad) {
  return rag_vec_prepare(&v->kern, x, out, &bad->component, &bad->why);
}

/* Room for `need` rows. */
static int rows_fit(rag_vec *v, size_t need) {
  size_t cap = v->cap;
  if (need <= v->cap) return RAG_OK;
  {
    unsigned char *r = (unsigned char *)rag_grow(v->rows, &cap, need, v->kern.rowbytes);
    if (r == NULL) return RAG_ENOMEM;
    v->rows = r;
  }
  if (v->o.dtype == RAG_I8) {
    size_t c2 = v->cap;
    float *s = (float *)rag_grow(v->scales, &c2, cap, sizeof *s);
    if (s == NULL) return RAG_ENOMEM; /* rows grew; harmless, cap unchanged */
    v->scales = s;
  }
  v->cap = cap;
  return RAG_OK;
}

int rag_vec_add(rag_vec *v, const char *id, size_t idlen, const float *x, rag_vec_bad *bad) {
  uint32_t slot;
  float scale;
  int rc = prepare(v, x, v->tmp, bad);
  if (rc != RAG_OK) return rc;
  slot = rag_ids_find(&v->ids, id, idlen);
  if (slot == RAG_IDS_NONE) {
    if ((rc = rag_ids_reserve(&v->ids, 1, idlen)) != RAG_OK) return rc;
    if ((rc = rows_fit(v, v->ids.n + 1)) != RAG_OK) return rc;
    slot = rag_ids_push(&v->ids, id, idlen);
  }
  rag_vec_encode(&v->kern, v->tmp, row_at(v, slot), &scale);
  if (v->scales != NULL) v->scales[slot] = scale;
  return RAG_OK;
}

void rag_vec_remove(rag_vec *v, const char *id, size_t idlen, int *removed) {
  uint32_t slot = rag_ids_find(&v->ids, id, idlen);
  size_t last;
  *removed = slot != RAG_IDS_NONE;
  if (!*removed) return;
  last = v->ids.n - 1;
  if (slot != last) {
    memcpy(row_at(v, slot), row_at(v, last), v->kern.rowbytes);
    if (v->scales != NULL) v->scales[slot] = v->scales[last];
  }
  rag_ids_swap_remove(&v->ids, slot);
  rag_ids_tidy(&v->ids);
}

int rag_vec_get(const rag_vec *v, const char *id, size_t idlen, float *out) {
  uint32_t slot = rag_ids_find(&v->ids, id, idlen);
  if (slot == RAG_IDS_NONE) return 0;
  rag_vec_decode(&v->kern, row_at(v, slot), v->scales ? v->scales[slot] : 1.0f, out);
  return 1;
}

/* {====== Search ======} */

static int scratch_fit(rag_vec *v, size_t nhits, size_t nbuf) {
  if (nhits > v->hcap) {
    rag_hit *h = (rag_hit *)rag_grow(v->hits, &v->hcap, nhits, sizeof *h);
    if (h == NULL) return RAG_ENOMEM;
    v->hits = h;
  }
  if (nbuf > v->bufcap) {
    float *b = (float *)rag_grow(v->buf, &v->bufcap, nbuf, sizeof *b);
    if (b == NULL) return RAG_ENOMEM;
    v->buf = b;
  }
  return RAG_OK;
}

/* Scores rows [lo, hi) against q into the heap. */
static void scan(rag_vec *v, const float *q, size_t lo, size_t hi, rag_topk *t) {
  while (lo < hi) {
    size_t m = hi - lo < BLOCK ? hi - lo : BLOCK, i;
    v->kern.score(q, row_at(v, lo), v->scales ? v->scales + lo : NULL, m, v->kern.dim,
                  v->kern.rowbytes, v->buf);
    for (i = 0; i < m; i++) rag_topk_push(t, (uint32_t)(lo + i), v->buf[i]);
    lo += m;
  }
}

/* The filter's slots, each once, into v->allow; their count in *na. */
static int allowed(rag_vec *v, const rag_id_filter *f, size_t *na) {
  size_t i, n = 0;
  if (f->n > v->acap) {
    uint32_t *a = (uint32_t *)rag_grow(v->allow, &v->acap, f->n, sizeof *a);
    if (a == NULL) return RAG_ENOMEM;
    v->allow = a;
  }
  if (v->ids.n > v->seencap) {
    size_t old = v->seencap;
    unsigned char *s = (unsigned char *)rag_grow(v->seen, &v->seencap, v->ids.n, 1);
    if (s == NULL) return RAG_ENOMEM;
    memset(s + old, 0, v->seencap - old); /* marks are cleared after each use */
    v->seen = s;
  }
  for (i = 0; i < f->n; i++) {
    uint32_t s = rag_ids_find(&v->ids, f->ids[i], f->lens[i]);
    if (s == RAG_IDS_NONE || v->seen[s]) continue;
    v->seen[s] = 1;
    v->allow[n++] = s;
  }
  for (i = 0; i < n; i++) v->seen[v->allow[i]] = 0;
  *na = n;
  return RAG_OK;
}

int rag_vec_search(rag_vec *v, const float *q, size_t k, const rag_id_filter *filter,
                   const rag_hit **hits, size_t *n, rag_vec_bad *bad) {
  rag_topk t;
  size_t kk = k < v->ids.n ? k : v->ids.n;
  int rc = prepare(v, q, v->tmp, bad);
  *hits = NULL;
  *n = 0;
  if (rc != RAG_OK || kk == 0) return rc;
  if ((rc = scratch_fit(v, kk, BLOCK)) != RAG_OK) return rc;
  rag_topk_init(&t, v->hits, kk, &v->ids);
  if (filter == NULL) {
    scan(v, v->tmp, 0, v->ids.n, &t);
  } else {
    size_t na, i;
    if ((rc = allowed(v, filter, &na)) != RAG_OK) return rc;
    for (i = 0; i < na; i++) {
      uint32_t s = v->allow[i];
      float sc = rag_kernel_score1(&v->kern, v->tmp, row_at(v, s), v->scales ? v->scales[s] : 1);
      rag_topk_push(&t, s, sc);
    }
  }
  *n = rag_topk_sort(&t);
  *hits = v->hits;
  return RAG_OK;
}

int rag_vec_search_batch(rag_vec *v, const float *qs, size_t nq, size_t k,
                         const rag_hit **hits, size_t *count, rag_vec_bad *bad) {
  size_t kk = k < v->ids.n ? k : v->ids.n, d = v->kern.dim, i, lo, block;
  rag_topk *tk;
  int rc;
  *hits = NULL;
  *count = 0;
  if (RAG_MUL_OVERFLOWS(nq, d) || RAG_MUL_OVERFLOWS(nq, kk + 1) ||
      RAG_MUL_OVERFLOWS(nq + 1, sizeof(rag_topk)))
    return RAG_ENOMEM;
  if (nq * d > v->qscap) {
    float *p = (float *)rag_grow(v->qs, &v->qscap, nq * d, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    v->qs = p;
  }
  for (i = 0; i < nq; i++) {
    rc = prepare(v, qs + i * d, v->qs + i * d, bad);
    if (rc != RAG_OK) {
      bad->component += i * d;
      return rc;
    }
  }
  if (kk == 0) return RAG_OK; /* an empty index or k = 0: no hits */
  /* the heaps' states live after the hits, in the same scratch */
  {
    size_t extra = (nq * sizeof(rag_topk) + sizeof(rag_hit) - 1) / sizeof(rag_hit);
    if ((rc = scratch_fit(v, nq * kk + extra + 1, BLOCK)) != RAG_OK) return rc;
    tk = (rag_topk *)(void *)(v->hits + nq * kk + 1);
  }
  for (i = 0; i < nq; i++) rag_topk_init(&tk[i], v->hits + i * kk, kk, &v->ids);
  block = BATCH_BYTES / v->kern.rowbytes;
  if (block < 16) block = 16;
  for (lo = 0; lo < v->ids.n; lo += block) {
    size_t hi = lo + block < v->ids.n ? lo + block : v->ids.n;
    for (i = 0; i < nq; i++) scan(v, v->qs + i * d, lo, hi, &tk[i]);
  }
  for (i = 0; i < nq; i++) rag_topk_sort(&tk[i]);
  *hits = v->hits;
  *count = kk;
  return RAG_OK;
}

size_t rag_vec_memory(const rag_vec *v) {
  return sizeof *v + rag_ids_memory(&v->ids) + v->cap * v->kern.rowbytes +
         (v->scales ? v->cap * sizeof(float) : 0) + v->o.dim * sizeof(float) +
         v->qscap * sizeof(float) + v->bufcap * sizeof(float) + v->hcap * sizeof(rag_hit) +
         v->acap * sizeof(uint32_t) + v->seencap;
}

/* {====== Saving and loading ======} */

static void write_index(const void *obj, rag_writer *w) {
  const rag_vec *v = (const rag_vec *)obj;
  size_t n = v->ids.n, i;
  uint64_t len[NSECTIONS], size = RAG_FILE_HEADER;
  len[0] = 4 + 1 + 1;
  len[1] = rag_varint_len(n);
  for (i = 0; i < n; i++) len[1] += rag_str_size(v->ids.e[i].len);
  len[2] = (uint64_t)n * v->kern.rowbytes;
  len[3] = v->scales ? (uint64_t)n * 4 : 0;
  for (i = 0; i < NSECTIONS; i++) size += 16 + len[i];
  rag_w_header(w, MAGIC, FORMAT_VERSION, NSECTIONS, size);
  rag_w_begin(w, "PARM", len[0]);
  rag_w_uint(w, v->o.dim, 4);
  rag_w_uint(w, (uint64_t)v->o.metric, 1);
  rag_w_uint(w, (uint64_t)v->o.dtype, 1);
  rag_w_end(w);
  rag_w_begin(w, "IDS ", len[1]);
  rag_w_varint(w, n);
  for (i = 0; i < n; i++) {
    size_t l;
    const char *s = rag_ids_get(&v->ids, (uint32_t)i, &l);
    rag_w_str(w, s, l);
  }
  rag_w_end(w);
  rag_w_begin(w, "ROWS", len[2]);
  rag_w_put(w, v->rows, (size_t)len[2]);
  rag_w_end(w);
  rag_w_begin(w, "SCAL", len[3]);
  if (v->scales) rag_w_put(w, v->scales, (size_t)len[3]);
  rag_w_end(w);
}

int rag_vec_dump(const rag_vec *v, unsigned char **buf, size_t *n) {
  return rag_file_dump(write_index, v, buf, n);
}

int rag_vec_save(const rag_vec *v, const char *path, int *err) {
  return rag_file_save(path, write_index, v, err);
}

static int rows_ok(const rag_vec *v, size_t n) {
  return rag_rows_ok(&v->kern, v->rows, v->scales, n);
}

#define CORRUPT(msg)     \
  do {                   \
    *why = (msg);        \
    rc = RAG_ECORRUPT;   \
    goto done;           \
  } while (0)

int rag_vec_load_mem(const unsigned char *p, size_t n, rag_vec **out, const char **why) {
  static const char tags[NSECTIONS][5] = {"PARM", "IDS ", "ROWS", "SCAL"};
  rag_reader sec[NSECTIONS], r;
  rag_vec_opts o;
  rag_vec *v = NULL;
  uint64_t dim, count, i, bytes = 0;
  unsigned metric, dtype;
  uint32_t version;
  int rc;
  *out = NULL;
  rc = rag_file_open(p, n, MAGIC, FORMAT_VERSION, tags, NSECTIONS, sec, &version,
                     "not a vector index (bad magic)", why);
  if (rc != RAG_OK) return rc;
  r = sec[0];
  if (!rag_r_uint(&r, 4, &dim) || !rag_r_u8(&r, &metric) || !rag_r_u8(&r, &dtype) ||
      r.p != r.e || dim < 1 || dim > RAG_VEC_MAX_DIM || metric >= RAG_NMETRICS ||
      dtype >= RAG_NDTYPES) {
    *why = "bad parameters";
    return RAG_ECORRUPT;
  }
  memset(&o, 0, sizeof o);
  o.dim = (size_t)dim;
  o.metric = (rag_metric)metric;
  o.dtype = (rag_dtype)dtype;
  if ((rc = rag_vec_new(&o, &v)) != RAG_OK) return rc;
  r = sec[1];
  if (!rag_r_varint(&r, &count) || count > (uint64_t)(r.e - r.p) || count > RAG_IDS_MAX)
    CORRUPT("bad id count");
  if (count * v->kern.rowbytes != (uint64_t)(sec[2].e - sec[2].p) ||
      (uint64_t)(sec[3].e - sec[3].p) != (dtype == RAG_I8 ? count * 4 : 0))
    CORRUPT("row section size disagrees with the id count");
  for (i = 0; i < count; i++) { /* the id bytes, to reserve once */
    const char *s;
    size_t l;
    if (!rag_r_str(&r, &s, &l)) CORRUPT("bad id");
    bytes += l;
  }
  if (r.p != r.e) CORRUPT("bad id section");
  if ((rc = rag_ids_reserve(&v->ids, (size_t)count, (size_t)bytes)) != RAG_OK ||
      (rc = rows_fit(v, (size_t)count)) != RAG_OK) {
    if (rc == RAG_ETOOBIG) CORRUPT("too many ids");
    goto done;
  }
  r = sec[1];
  (void)rag_r_varint(&r, &count);
  for (i = 0; i < count; i++) {
    const char *s;
    size_t l;
    (void)rag_r_str(&r, &s, &l);
    if (rag_ids_find(&v->ids, s, l) != RAG_IDS_NONE) CORRUPT("duplicate id");
    rag_ids_push(&v->ids, s, l);
  }
  if (count > 0) memcpy(v->rows, sec[2].p, (size_t)(sec[2].e - sec[2].p));
  if (v->scales != NULL && count > 0) memcpy(v->scales, sec[3].p, (size_t)count * 4);
  if (!rows_ok(v, (size_t)count)) CORRUPT("bad component");
  rc = RAG_OK;
done:
  if (rc != RAG_OK) {
    rag_vec_free(v);
    return rc;
  }
  *out = v;
  return RAG_OK;
}

int rag_vec_load(const char *path, rag_vec **out, const char **why, int *err) {
  unsigned char *buf;
  size_t n;
  int rc;
  *out = NULL;
  *why = "";
  rc = rag_file_read(path, &buf, &n, err);
  if (rc != RAG_OK) return rc;
  rc = rag_vec_load_mem(buf, n, out, why);
  rag_free(buf);
  return rc;
}

int rag_vec_check(const rag_vec *v) {
  size_t i;
  if (v->ids.n > v->cap && v->ids.n > 0) return 0;
  for (i = 0; i < v->ids.n; i++) {
    size_t l;
    const char *s;
    if (!rag_ids_linked(&v->ids, (uint32_t)i)) return 0;
    s = rag_ids_get(&v->ids, (uint32_t)i, &l);
    if (rag_ids_find(&v->ids, s, l) != i) return 0;
  }
  return rows_ok(v, v->ids.n);
}
