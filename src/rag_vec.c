/*
** rag_vec.c: the exact vector index (see rag_vec.h).
**
** File format (integers little-endian; grammar of header, section and str
** in rag_file.h):
**
**   file     = header section{8}       magic "RAGVEC\0\0", version 3
**   "PARM"   dim:u32 metric:u8 dtype:u8 sketch:u8
**   "IDS "   count:varint str{count}
**   "ROWS"   pad, then f32: the high plane, count * dim u16 (each component's
**            high 16 bits, row after row); f16: count * dim f16; i8: count * dim i8
**   "LOWS"   pad, then f32: the low plane, count * dim u16; nothing for f16 and i8
**   "NORM"   pad, then f32: count norms:f32 (each row's norm_up); nothing otherwise
**   "SCAL"   pad, then i8: count scales:f32; nothing otherwise
**   "SKCD"   pad, then with sketch 1: ceil(count / 128) blocks of dim * 128
**            codes:i8, block b's component d of its row j at (b * dim + d) *
**            128 + j, rows past count zero; nothing otherwise
**   "SKSW"   pad, then with sketch 1: count scales:f32, then count weights:f32
**            (see sketch_row); nothing otherwise
**   pad      = zero bytes up to the next file offset that is a multiple of 64
**              (0 to 63, by where the payload starts)
**
** The row sections are the in-memory layout itself, each starting on a
** 64-byte line as rag_block's rows do: a borrowing load of a file mapped at
** an aligned address points the index into the file and copies nothing
** row-sized. Version 2 (still read) had no sketch byte and no SKCD and
** SKSW sections. Version 1 (still read, converted as it loads) had four
** sections, no pad:
**
**   "PARM" and "IDS " as above; "ROWS" count rows of dim components (f32,
**   f16 or i8); "SCAL" count scales:f32 for i8 rows, empty for f32 and f16
**
** A file loads only when every checksum, pad and length agrees, the ids are
** unique, every component and scale is finite (scales above zero), every
** f32 norm is the one norm_up gives and every row's sketch is the one
** sketch_row makes, whether the rows are copied or borrowed.
**
** f32 rows are kept as two planes: the high 16 bits of every component (a
** truncated bfloat16) of all rows, then the low 16 bits, with each row's
** norm. A search scans the high plane alone, half the bytes, for scores
** within a proven bound of the exact ones (see `bound`), and scores exactly
** only the rows whose bound reaches the k-th best lower bound: the result is
** the exact search's, hit for hit and bit for bit.
**
** The sketch (f32 rows, cosine or dot) is a third copy of the rows, int8
** with a scale per row, kept component by component in blocks of 128 rows:
** a search sums only the components where the query is not zero, a quarter
** of the bytes of the high plane or less, and a bound of its own (see
** sketch_row and bound_sketch) again decides which rows are scored exactly.
*/
#include "rag_vec.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rag_file.h"
#include "rag_topk.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rag_vec stores rows in host order; only little-endian hosts are supported"
#endif

static const unsigned char MAGIC[8] = {'R', 'A', 'G', 'V', 'E', 'C', 0, 0};
#define FORMAT_VERSION 3u
#define NSECTIONS 8u
#define NROWSECS 6u           /* ROWS, LOWS, NORM, SCAL, SKCD, SKSW */
#define SKR RAG_SKETCH_ROWS   /* rows in a block of the sketch */
#define LINE 64u              /* row sections start on lines of this many bytes */
#define BLOCK 256            /* rows scored per kernel call */
#define AHEAD 4              /* rows search_split asks for before scoring them */
#define L2_ROWS_BYTES (512 * 1024) /* and the most it asks for ahead of its finish */
#define BATCH_BYTES (96 * 1024) /* rows per cache block of search_batch */

/* A row that may be among the best: its slot and the upper bound of its score. */
typedef struct cand {
  double up;
  uint32_t slot;
} cand;

struct rag_vec {
  rag_vec_opts o;
  rag_kernel kern;      /* scores whole rows (f32: rebuilt from the planes) */
  rag_kernel hk;        /* f32: the split kernel, whose approx_rows scans the high plane */
  rag_ids ids;          /* slot i is row i */
  rag_block rowmem, lomem;
  unsigned char *rows;  /* count * stride: the rows, or the high plane for f32 */
  unsigned char *lo;    /* f32: the low plane, count * stride */
  size_t stride;        /* bytes per row in rows: dim * 2 for f32, else rowbytes */
  float *norms;         /* f32: each row's Euclidean norm, rounded up */
  float *scales;        /* i8 only */
  rag_block skmem;
  int8_t *sk;           /* sketch: the codes, blocks of SKR rows (see the file grammar) */
  float *sks;           /* sketch: each row's scale */
  float *skw;           /* sketch: each row's weight in the bound (sketch_row) */
  uint32_t *nzi;        /* sketch: the query's nonzero components (dim, and 4 to pad) */
  float *nzw;           /* sketch: and their values (dim) */
  uint8_t *q8;          /* hk.sketch8: the integer weights (rag_kernel_sketch8_fn), rows
                         * of dim + 4 */
  float q8qs;           /* hk.sketch8: the integer weights' scale */
  float xnmax;          /* hk.sketch8: at least every row's norm, when xnmax_ok */
  int xnmax_ok;
  size_t cap;           /* rows allocated; 0 while borrowed */
  int borrowed;         /* rows, lo, norms, scales and the sketch point into a loaded file's bytes */
  size_t mapped;        /* the bytes of those while borrowed */
  float *tmp;           /* dim floats: the prepared vector or query */
  uint16_t *qb;         /* hk.bf16_rows: the query in bfloat16 (dim) */
  float *row;           /* f32: a rebuilt row, or search_batch's block of them */
  size_t rowcap;        /* floats in row */
  double *lb;           /* search: the k best lower bounds, a min-heap */
  size_t lbcap;
  cand *cs;             /* search: rows whose upper bound reached the k-th lower bound */
  size_t ccap;
  float *qs;            /* search_batch: the prepared queries */
  size_t qscap;
  float *buf;           /* scores of a block, or of search_split's span */
  size_t bufcap;
  rag_topk top;         /* search: the best so far, between start and finish */
  size_t nc;            /* search_split: the rows in cs its finish scores exactly */
  rag_ahead ahead;      /* search_ahead: lines of the rows in cs */
  size_t linecap;
  uint32_t *kept;       /* search_split: the rows of a span it takes */
  size_t keptcap;
  rag_hit *hits;
  size_t hcap;
  uint32_t *allow;      /* filter: the allowed slots */
  size_t acap;
  uint32_t *seen;       /* filter: slot marks, all 0 between searches */
  size_t seencap;
};

static int row_fit(rag_vec *v, size_t n);

int rag_vec_new(const rag_vec_opts *o, rag_vec **out) {
  rag_vec *v;
  *out = NULL;
  if (o->dim < 1 || o->dim > RAG_VEC_MAX_DIM || (unsigned)o->metric >= RAG_NMETRICS ||
      (unsigned)o->dtype >= RAG_NDTYPES ||
      (o->sketch && (o->dtype != RAG_F32 || o->metric == RAG_L2)))
    return RAG_EINVAL;
  v = (rag_vec *)rag_malloc(sizeof *v);
  if (v == NULL) return RAG_ENOMEM;
  memset(v, 0, sizeof *v);
  v->o = *o;
  rag_kernel_init(&v->kern, o->dtype, o->metric, o->dim, o->portable);
  v->hk = v->kern;
  rag_kernel_split(&v->hk);
  v->stride = v->hk.split ? o->dim * 2 : v->kern.rowbytes;
  rag_ids_init(&v->ids);
  v->tmp = (float *)rag_malloc(o->dim * sizeof *v->tmp);
  if (v->hk.bf16_rows) v->qb = (uint16_t *)rag_malloc(o->dim * sizeof *v->qb);
  if (o->sketch) {
    v->nzi = (uint32_t *)rag_malloc((o->dim + 4) * sizeof *v->nzi);
    v->nzw = (float *)rag_malloc(o->dim * sizeof *v->nzw);
    if (v->hk.sketch8) v->q8 = (uint8_t *)rag_malloc(2 * (o->dim + 4));
  }
  if (v->tmp == NULL || (v->hk.bf16_rows && v->qb == NULL) ||
      (o->sketch && (v->nzi == NULL || v->nzw == NULL || (v->hk.sketch8 && v->q8 == NULL))) ||
      (v->hk.split && row_fit(v, o->dim) != RAG_OK)) {
    rag_free(v->q8);
    rag_free(v->nzi);
    rag_free(v->nzw);
    rag_free(v->row);
    rag_free(v->qb);
    rag_free(v->tmp);
    rag_free(v);
    return RAG_ENOMEM;
  }
  *out = v;
  return RAG_OK;
}

void rag_vec_free(rag_vec *v) {
  if (v == NULL) return;
  rag_ids_free(&v->ids);
  rag_block_free(&v->rowmem);
  rag_block_free(&v->lomem);
  rag_block_free(&v->skmem);
  if (!v->borrowed) {
    rag_free(v->norms);
    rag_free(v->scales);
    rag_free(v->sks);
    rag_free(v->skw);
  }
  rag_free(v->q8);
  rag_free(v->nzi);
  rag_free(v->nzw);
  rag_free(v->tmp);
  rag_free(v->qb);
  rag_free(v->row);
  rag_free(v->lb);
  rag_free(v->cs);
  rag_free(v->qs);
  rag_free(v->buf);
  rag_free(v->kept);
  rag_free((void *)v->ahead.line);
  rag_free(v->hits);
  rag_free(v->allow);
  rag_free(v->seen);
  rag_free(v);
}

const rag_vec_opts *rag_vec_config(const rag_vec *v) {
  return &v->o;
}

const rag_kernel *rag_vec_kernel(const rag_vec *v) {
  return &v->hk; /* the split kernel for f32 (its scan is the search's hot loop), else kern */
}

size_t rag_vec_count(const rag_vec *v) {
  return v->ids.n;
}

const char *rag_vec_id(const rag_vec *v, uint32_t slot, size_t *len) {
  return rag_ids_get(&v->ids, slot, len);
}

static unsigned char *row_at(const rag_vec *v, size_t slot) {
  return v->rows + slot * v->stride;
}

/* f32: slot's high and low halves. */
static uint16_t *hi_at(const rag_vec *v, size_t slot) {
  return (uint16_t *)(void *)row_at(v, slot);
}

static uint16_t *lo_at(const rag_vec *v, size_t slot) {
  return (uint16_t *)(void *)(v->lo + slot * v->stride);
}

/* The Euclidean norm of x[0..n), as a float not below it. */
static float norm_up(const float *x, size_t n) {
  double ss = 0, r;
  float f;
  size_t i;
  for (i = 0; i < n; i++) ss += (double)x[i] * x[i];
  r = sqrt(ss);
  f = (float)r;
  return (double)f < r ? nextafterf(f, INFINITY) : f;
}

/* gamma(n) of Higham's bound for a sum of n rounded terms, unit roundoff u */
static double higham(double n, double u) { return n * u / (1 - n * u); }

/* The least float not below the double x (x >= 0, finite). */
static float float_up(double x) {
  float f = (float)x;
  return (double)f < x ? nextafterf(f, INFINITY) : f;
}

/* Component x's code for 1 / s = inv (see sketch_row), stored at *c; the square of its error. */
static double code_put(float x, float sc, float inv, int8_t *c) {
  float t = fabsf(x) * inv;
  int k = t >= 127.0f ? 127 : (int)(t + 0.5f);
  double r;
  k = k > 127 ? 127 : k;
  k = x < 0 ? -k : k;
  *c = (int8_t)k;
  r = (double)x - (double)sc * k; /* s k is exact in double: 24 by 8 bits */
  return r * r;
}

/*
** Row x (prepared, of norm_up xn) in the sketch: codes c (written `step`
** bytes apart), scale s and weight w. With m the largest |x_i|, s = m / 127
** and c_i = |x_i| (1 / s) in float, rounded half away from zero, at most
** 127, with x_i's sign (all 0, and s 0, when m / 127 is below the least
** normal float, 2^-126). The weight bounds how far the sketch's score of the row can
** be from the exact kernel's, per unit of the query's norm |q| (see
** bound_sketch): with e >= |x - s c| (in double, rounded up) and g =
** gamma(dim + 8), u = 2^-24,
**   |sum q x - s sum q c| <= |q| e                    (Cauchy-Schwarz)
**   the sketch's float sum and its product by s:   g |q| s|c| <= g |q| (xn + e)
**   the exact kernel's float sum:                  g |q| xn
** so w = e (1 + g) + 2 g xn, with a margin of (dim + 8) 2^-50 for this
** double arithmetic (a sum of dim squares and a square root), rounded up to
** a float. The same bits on every CPU: each step is one
** IEEE operation (the build has -ffp-contract=off).
*/
static void sketch_row(const rag_vec *v, const float *x, float xn, int8_t *c, size_t step,
                       float *s, float *w) {
  size_t i, d = v->o.dim;
  float m0 = 0, m1 = 0, m2 = 0, m3 = 0, sc, inv;
  double e0 = 0, e1 = 0, e2 = 0, e3 = 0, g = higham((double)d + 8, 1.0 / 16777216.0);
  /* four maxima and four sums, not one chain of dim: the same bits, sooner */
  for (i = 0; i + 4 <= d; i += 4) {
    m0 = fabsf(x[i]) > m0 ? fabsf(x[i]) : m0;
    m1 = fabsf(x[i + 1]) > m1 ? fabsf(x[i + 1]) : m1;
    m2 = fabsf(x[i + 2]) > m2 ? fabsf(x[i + 2]) : m2;
    m3 = fabsf(x[i + 3]) > m3 ? fabsf(x[i + 3]) : m3;
  }
  for (; i < d; i++) m0 = fabsf(x[i]) > m0 ? fabsf(x[i]) : m0;
  m0 = m1 > m0 ? m1 : m0;
  m2 = m3 > m2 ? m3 : m2;
  sc = (m2 > m0 ? m2 : m0) / 127.0f;
  if (sc < FLT_MIN) sc = 0; /* 1 / sc could overflow: such a row's codes are all 0 */
  inv = sc > 0 ? 1.0f / sc : 0.0f;
  for (i = 0; i + 4 <= d; i += 4) {
    e0 += code_put(x[i], sc, inv, c + i * step);
    e1 += code_put(x[i + 1], sc, inv, c + (i + 1) * step);
    e2 += code_put(x[i + 2], sc, inv, c + (i + 2) * step);
    e3 += code_put(x[i + 3], sc, inv, c + (i + 3) * step);
  }
  for (; i < d; i++) e0 += code_put(x[i], sc, inv, c + i * step);
  *s = sc;
  *w = float_up((sqrt((e0 + e1) + (e2 + e3)) * (1 + g) + 2 * g * xn) *
                (1 + ldexp((double)d + 8, -50)));
}

/* Slot's first code in the sketch; its next component is SKR bytes on. */
static int8_t *code_at(const rag_vec *v, size_t slot) {
  return v->sk + (slot / SKR) * v->o.dim * SKR + slot % SKR;
}

/* Stores prepared vector x in slot. */
static void row_put(rag_vec *v, size_t slot, const float *x) {
  float scale;
  if (!v->hk.split) {
    rag_kernel_encode(&v->kern, x, row_at(v, slot), &scale);
    if (v->scales != NULL) v->scales[slot] = scale;
    return;
  }
  rag_kernel_f32_split(x, v->o.dim, hi_at(v, slot), lo_at(v, slot));
  v->norms[slot] = norm_up(x, v->o.dim);
  v->xnmax_ok = 0;
  if (v->o.sketch)
    sketch_row(v, x, v->norms[slot], code_at(v, slot), SKR, v->sks + slot, v->skw + slot);
}

/* Slot's codes moved to slot `to`, slot's zeroed (a removal's last row). */
static void sketch_move(rag_vec *v, size_t slot, size_t to) {
  int8_t *a = code_at(v, slot), *b = code_at(v, to);
  size_t i;
  for (i = 0; i < v->o.dim; i++) {
    b[i * SKR] = a[i * SKR];
    a[i * SKR] = 0;
  }
  v->sks[to] = v->sks[slot];
  v->skw[to] = v->skw[slot];
}

/* The sketch's bytes for n rows: whole blocks. */
static uint64_t sketch_bytes(const rag_vec *v, uint64_t n) {
  return v->o.sketch ? (n + SKR - 1) / SKR * SKR * v->o.dim : 0;
}

/* Slot's row as the kernel reads it; f32 rows are rebuilt into buf (dim floats). */
static const void *row_get(const rag_vec *v, size_t slot, float *buf) {
  if (!v->hk.split) return row_at(v, slot);
  rag_kernel_f32_join(hi_at(v, slot), lo_at(v, slot), v->o.dim, buf);
  return buf;
}

/* Room for n floats in v->row. */
static int row_fit(rag_vec *v, size_t n) {
  float *p;
  if (n <= v->rowcap) return RAG_OK;
  if (RAG_MUL_OVERFLOWS(n, sizeof(float))) return RAG_ENOMEM;
  p = (float *)rag_realloc(v->row, n * sizeof(float));
  if (p == NULL) return RAG_ENOMEM;
  v->row = p;
  v->rowcap = n;
  return RAG_OK;
}

static int prepare(const rag_vec *v, const float *x, float *out, rag_vec_bad *bad) {
  return rag_kernel_prepare(&v->kern, x, out, &bad->component, &bad->why);
}

/*
** A borrowed index's rows copied into owned memory with room for cap rows
** (cap * stride checked by the caller); a failure leaves them borrowed.
*/
static int rows_own(rag_vec *v, size_t cap) {
  size_t n = v->ids.n;
  rag_block hi = {NULL, NULL, 0}, lo = {NULL, NULL, 0}, sk = {NULL, NULL, 0};
  float *nr = NULL, *sc = NULL, *ss = NULL, *sw = NULL;
  int ok = rag_block_resize(&hi, 0, cap * v->stride) == RAG_OK;
  if (ok && v->hk.split)
    ok = rag_block_resize(&lo, 0, cap * v->stride) == RAG_OK &&
         (nr = (float *)rag_malloc(cap * sizeof *nr)) != NULL;
  if (ok && v->o.dtype == RAG_I8) ok = (sc = (float *)rag_malloc(cap * sizeof *sc)) != NULL;
  if (ok && v->o.sketch)
    ok = rag_block_resize(&sk, 0, (size_t)sketch_bytes(v, cap)) == RAG_OK &&
         (ss = (float *)rag_malloc(cap * sizeof *ss)) != NULL &&
         (sw = (float *)rag_malloc(cap * sizeof *sw)) != NULL;
  if (!ok) {
    rag_block_free(&hi);
    rag_block_free(&lo);
    rag_block_free(&sk);
    rag_free(nr);
    rag_free(sc);
    rag_free(ss);
    rag_free(sw);
    return RAG_ENOMEM;
  }
  if (n > 0) {
    memcpy(hi.p, v->rows, n * v->stride);
    if (v->hk.split) {
      memcpy(lo.p, v->lo, n * v->stride);
      memcpy(nr, v->norms, n * sizeof *nr);
    }
    if (sc != NULL) memcpy(sc, v->scales, n * sizeof *sc);
    if (v->o.sketch) { /* whole blocks: the rows past n are zero in the file */
      memcpy(sk.p, v->sk, (size_t)sketch_bytes(v, n));
      memcpy(ss, v->sks, n * sizeof *ss);
      memcpy(sw, v->skw, n * sizeof *sw);
    }
  }
  v->rowmem = hi;
  v->lomem = lo;
  v->skmem = sk;
  v->rows = hi.p;
  v->lo = lo.p;
  v->sk = (int8_t *)(void *)sk.p;
  v->norms = nr;
  v->scales = sc;
  v->sks = ss;
  v->skw = sw;
  v->cap = cap;
  v->borrowed = 0;
  v->mapped = 0;
  return RAG_OK;
}

/*
** Room for `need` rows in owned memory (a borrowed index copies its rows
** first); a failure leaves the rows as they were (some blocks grown).
*/
static int rows_fit(rag_vec *v, size_t need) {
  /* a copying load sizes the rows after reading the ids: no rows to keep yet */
  size_t cap = v->cap ? v->cap : 64, keep = v->rows != NULL ? v->ids.n * v->stride : 0;
  if (!v->borrowed && need <= v->cap) return RAG_OK;
  while (cap < need) {
    if (cap > ((size_t)-1) / 2) return RAG_ENOMEM;
    cap *= 2;
  }
  if (RAG_MUL_OVERFLOWS(cap, v->stride) || RAG_MUL_OVERFLOWS(cap, sizeof(float)) ||
      RAG_MUL_OVERFLOWS(cap + SKR, v->o.dim))
    return RAG_ENOMEM;
  if (v->borrowed) return rows_own(v, cap);
  if (rag_block_resize(&v->rowmem, keep, cap * v->stride) != RAG_OK) return RAG_ENOMEM;
  v->rows = v->rowmem.p;
  if (v->hk.split) {
    float *nr;
    if (rag_block_resize(&v->lomem, keep, cap * v->stride) != RAG_OK) return RAG_ENOMEM;
    v->lo = v->lomem.p;
    nr = (float *)rag_realloc(v->norms, cap * sizeof *nr);
    if (nr == NULL) return RAG_ENOMEM;
    v->norms = nr;
  }
  if (v->o.dtype == RAG_I8) {
    float *sc = (float *)rag_realloc(v->scales, cap * sizeof *sc);
    if (sc == NULL) return RAG_ENOMEM;
    v->scales = sc;
  }
  if (v->o.sketch) {
    float *f;
    size_t had = v->sk != NULL ? (size_t)sketch_bytes(v, v->ids.n) : 0;
    if (rag_block_resize(&v->skmem, had, (size_t)sketch_bytes(v, cap)) != RAG_OK)
      return RAG_ENOMEM;
    v->sk = (int8_t *)(void *)v->skmem.p;
    if ((f = (float *)rag_realloc(v->sks, cap * sizeof *f)) == NULL) return RAG_ENOMEM;
    v->sks = f;
    if ((f = (float *)rag_realloc(v->skw, cap * sizeof *f)) == NULL) return RAG_ENOMEM;
    v->skw = f;
  }
  v->cap = cap;
  return RAG_OK;
}

int rag_vec_own(rag_vec *v) {
  return v->borrowed ? rows_fit(v, v->ids.n) : RAG_OK;
}

int rag_vec_add(rag_vec *v, const char *id, size_t idlen, const float *x, rag_vec_bad *bad) {
  uint32_t slot;
  int rc = prepare(v, x, v->tmp, bad);
  if (rc != RAG_OK) return rc;
  slot = rag_ids_find(&v->ids, id, idlen);
  if (slot == RAG_IDS_NONE) {
    if ((rc = rag_ids_reserve(&v->ids, 1, idlen)) != RAG_OK) return rc;
    if ((rc = rows_fit(v, v->ids.n + 1)) != RAG_OK) return rc;
    slot = rag_ids_push(&v->ids, id, idlen);
    if (v->o.sketch && slot % SKR == 0) /* a new block: rows past the count stay zero */
      memset(code_at(v, slot), 0, v->o.dim * SKR);
  } else if ((rc = rag_vec_own(v)) != RAG_OK) {
    return rc;
  }
  row_put(v, slot, v->tmp);
  return RAG_OK;
}

int rag_vec_remove(rag_vec *v, const char *id, size_t idlen, int *removed) {
  uint32_t slot = rag_ids_find(&v->ids, id, idlen);
  size_t last;
  int rc;
  *removed = 0;
  if (slot == RAG_IDS_NONE) return RAG_OK;
  if ((rc = rag_vec_own(v)) != RAG_OK) return rc;
  *removed = 1;
  last = v->ids.n - 1;
  if (slot != last) {
    memcpy(row_at(v, slot), row_at(v, last), v->stride);
    if (v->hk.split) {
      memcpy(v->lo + slot * v->stride, v->lo + last * v->stride, v->stride);
      v->norms[slot] = v->norms[last];
    }
    if (v->scales != NULL) v->scales[slot] = v->scales[last];
  }
  if (v->o.sketch) sketch_move(v, last, slot); /* the last row's codes zeroed, moved or not */
  rag_ids_swap_remove(&v->ids, slot);
  rag_ids_tidy(&v->ids);
  return RAG_OK;
}

int rag_vec_get(const rag_vec *v, const char *id, size_t idlen, float *out) {
  uint32_t slot = rag_ids_find(&v->ids, id, idlen);
  if (slot == RAG_IDS_NONE) return 0;
  if (v->hk.split)
    (void)row_get(v, slot, out);
  else
    rag_kernel_decode(&v->kern, row_at(v, slot), v->scales ? v->scales[slot] : 1.0f, out);
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

/* Scores rows [lo, hi), stored at `rows` (row lo first), against q into the heap. */
static void scan(rag_vec *v, const float *q, const unsigned char *rows, size_t lo, size_t hi,
                 rag_topk *t) {
  while (lo < hi) {
    size_t m = hi - lo < BLOCK ? hi - lo : BLOCK, i;
    v->kern.score(q, rows, v->scales ? v->scales + lo : NULL, m, v->kern.dim,
                  v->kern.rowbytes, v->buf);
    for (i = 0; i < m; i++) rag_topk_push(t, (uint32_t)(lo + i), v->buf[i]);
    lo += m;
    rows += m * v->kern.rowbytes;
  }
}

/* Asks for slot's two halves ahead of score_slot. */
static void prefetch_row(const rag_vec *v, size_t slot) {
  const char *h = (const char *)hi_at(v, slot), *l = (const char *)lo_at(v, slot);
  size_t off;
  for (off = 0; off < v->stride; off += 64) {
    __builtin_prefetch(h + off);
    __builtin_prefetch(l + off);
  }
}

/* The exact score of slot. */
static float score_slot(rag_vec *v, const float *q, size_t slot) {
  return rag_kernel_score1(&v->kern, q, row_get(v, slot, v->row),
                           v->scales ? v->scales[slot] : 1.0f);
}

/*
** How far an f32 row's approximate score a (from its high halves h, each
** within 2^-7 |x| + 2^-133 of the component x: truncation keeps 7 of 23
** mantissa bits) can be from its exact score e, both as the kernels compute
** them in float: |a - e| <= bound. With u = 2^-24 and g = 2 gamma(dim + 8),
** gamma(n) = n u / (1 - n u) (Higham's bound for a sum of n rounded terms,
** which covers any kernel's order and its final reductions):
**   dot:  |sum q (x - h)| <= 2^-7 |q||x|,  rounding <= g |q||x|
**   l2:   |sum (q-x)^2 - (q-h)^2| = |sum (h - x)(2q - x - h)|
**           <= 2^-6 (|q||x| + |x|^2),  rounding <= g (|q| + |x|)^2
** plus an absolute term for subnormal components and underflow, then a
** relative margin of 2^-20 for the double arithmetic of the bound itself.
** No sum overflows: rag_kernel_prepare keeps components within 1e15, so every
** partial sum stays below 65536 (2e15)^2 < 2^118.
**
** With AVX512-BF16 (hk.bf16_rows, dot only) a is sum qh h in float, qh the
** query rounded to bfloat16 and r = q - qh (exact in double) the rest.
** VDPBF16PS multiplies bfloat16 exactly (8 by 8 bits of significand fit a
** float's 24) and adds with round-to-nearest-even, but treats subnormal
** inputs as zero and flushes subnormal results, whatever MXCSR says (Intel
** SDM). So, with |x - h| <= 2^-7 |x| componentwise and |qh| its norm:
**   |sum q x - sum qh h| <= |sum qh (x - h)| + |sum r x| <= 2^-7 |qh||x| + |r||x|
**   rounding: gamma'(dim + 64) |qh||x|, gamma' with u' = 2^-23 (any
**     faithful rounding, fused or not; dim products, 64 lanes' zeros)
**   flushing: a subnormal h_i read as zero loses |h_i||qh_i| < 2^-126 |qh_i|,
**     sqrt(dim) 2^-126 |qh| in all; in a lane, each instruction may flush
**     its two products, its accumulator input, its partial and its result,
**     < 5 2^-126 for each of the ceil(dim / 32) 16 <= dim + 32
**     lane-instructions, and 64 more for the final additions (should MXCSR
**     flush too); doubled for the later roundings' growth. qh holds no
**     subnormals (rag_kernel_bf16_query).
** The exact side keeps gamma(dim + 8) |q||x| and the absolute term above.
*/
typedef struct bound {
  double p, q, r; /* the bound is (p xn + q) xn + r for a row of norm xn */
} bound;

static void bound_init(bound *b, const rag_vec *v, const float *q, const uint16_t *qb) {
  double d = (double)v->o.dim, u = 1.0 / 16777216.0, ss = 0, qn, g, a, m = 1 + ldexp(1, -20);
  size_t i;
  for (i = 0; i < v->o.dim; i++) ss += (double)q[i] * q[i];
  qn = sqrt(ss);
  g = 2 * higham(d + 8, u);
  a = (sqrt(d) + d + 16) * ldexp(1, -120);
  if (qb != NULL) { /* the bfloat16 query: see above */
    double sh = 0, sr = 0, hn, f;
    for (i = 0; i < v->o.dim; i++) {
      uint32_t uh = (uint32_t)qb[i] << 16;
      float fh;
      double r;
      memcpy(&fh, &uh, sizeof fh);
      r = (double)q[i] - fh; /* exact: fh is zero or within a factor 2 of q[i] */
      sh += (double)fh * fh;
      sr += r * r;
    }
    hn = sqrt(sh);
    f = ldexp(sqrt(d) * hn + 5 * (d + 32) + 64, -125);
    b->p = 0;
    b->q = (ldexp(hn, -7) + sqrt(sr) + higham(d + 8, u) * qn + higham(d + 64, 2 * u) * hn) * m;
    b->r = (a * (1 + qn) + f) * m;
  } else if (v->o.metric == RAG_L2) { /* 2^-6 (qn xn + xn^2) + g (qn + xn)^2 + a (1 + qn + xn) */
    b->p = (ldexp(1, -6) + g) * m;
    b->q = (ldexp(qn, -6) + 2 * g * qn + a) * m;
    b->r = (g * qn * qn + a * (1 + qn)) * m;
  } else { /* (2^-7 + g) qn xn + a (1 + qn) */
    b->p = 0;
    b->q = (ldexp(1, -7) + g) * qn * m;
    b->r = a * (1 + qn) * m;
  }
}

/*
** The sketch's bound: |a - e| <= |q| w + c for a row of weight w (sketch_row),
** a its sketch score and e its exact kernel's, so p = 0, q = |q|, r = c. The
** absolute term c covers subnormals and flushing to zero, should MXCSR ask
** for it: each of the dim terms of the sketch's sum may lose < 2^-119 (a
** flushed q_i times |c_i| <= 127 < 2^7) plus 2^-126 twice (its product and
** its partial sum), all times the scale s < 1e15 / 127 < 2^43, and the
** product by s 2^-126: (dim + 2) 2^-75 + 2^-125; then the exact side's
** absolute term as bound_init has it. A relative margin of 2^-20 covers
** the double arithmetic of the bound and of the comparisons with it.
*/
static void bound_sketch(bound *b, const rag_vec *v, const float *q) {
  double d = (double)v->o.dim, ss = 0, qn, m = 1 + ldexp(1, -20);
  size_t i;
  for (i = 0; i < v->o.dim; i++) ss += (double)q[i] * q[i];
  qn = sqrt(ss);
  b->p = 0;
  b->q = qn * m;
  b->r = ((d + 2) * ldexp(1, -75) + ldexp(1, -125) + (sqrt(d) + d + 16) * ldexp(1, -120) * (1 + qn)) * m;
}

/* The query's nonzero components into v->nzi and v->nzw; their count. */
static size_t sketch_query(rag_vec *v, const float *q) {
  size_t i, n = 0;
  for (i = 0; i < v->o.dim; i++) { /* written always, kept when not zero: no branch to miss */
    v->nzi[n] = (uint32_t)i;
    v->nzw[n] = q[i];
    n += q[i] != 0;
  }
  return n;
}

/*
** For hk.sketch8: the query's nnz nonzero components (v->nzw) as integers
** k of scale qs (the largest |w| / 16383, rounded to nearest), their parts
** in v->q8 and the components padded to a multiple of 4 in v->nzi; and the
** bound b widened for them. With d = |w - qs k| (in double, rounded up),
** u = 2^-24, e and xn as in sketch_row (e is at most the row's weight w),
** X at least every row's norm, the pass's error against the exact
** kernel's score is at most
**   |q| (e + g xn)                       the codes and the exact kernel (<= |q| w)
**   + d s|c| <= d (xn + e)              the integer weights
**   + 3.0001 u (|q| + d) (xn + e)       S, qs s and their product rounded
** <= |q| w + kappa |q| (X + w), kappa = (d (1 + 2^-22) + 2^-22 |q|) / |q|:
** b->q grows by the factor 1 + kappa and b->r by b->q kappa X, and by
** 2^-124 for a product qs s below the least normal float. Returns the
** groups of 4, or 0 when the query is not fit for it (a component not
** finite, a scale below 2^-100, more than 1,024 components).
*/
static size_t quantize(rag_vec *v, size_t nnz, bound *b) {
  size_t ws = v->o.dim + 4, n = v->ids.n, t, i, ng = (nnz + 3) / 4;
  uint8_t *q8 = v->q8;
  float mx = 0, qs, inv;
  double dd = 0, d, qlo, kappa, m = 1 + ldexp(1, -40);
  if (nnz == 0 || nnz > 1024) return 0;
  for (t = 0; t < nnz; t++) {
    float a = fabsf(v->nzw[t]);
    if (!(a <= FLT_MAX)) return 0;
    mx = a > mx ? a : mx;
  }
  qs = mx / 16383.0f;
  if (!(qs >= 0x1p-100f)) return 0;
  inv = 1.0f / qs;
  for (t = 0; t < 4 * ng; t++) {
    float w = t < nnz ? v->nzw[t] : 0.0f, a = fabsf(w) * inv;
    int k = a >= 16383.0f ? 16383 : (int)(a + 0.5f), neg = w < 0;
    double r;
    int q = neg ? -k : k, lo = (q % 128 + 128) % 128; /* q = 128 hi + lo, lo in 0 .. 127 */
    q8[t] = (uint8_t)(int8_t)((q - lo) / 128);
    q8[ws + t] = (uint8_t)lo;
    if (t >= nnz) v->nzi[t] = 0; /* a zero weight on component 0 */
    r = (double)w - (double)qs * (neg ? -k : k); /* qs k is exact in double */
    dd += r * r;
  }
  if (!v->xnmax_ok) { /* after adds; a remove leaves it an upper bound */
    float x = 0;
    for (i = 0; i < n; i++) x = v->norms[i] > x ? v->norms[i] : x;
    v->xnmax = x;
    v->xnmax_ok = 1;
  }
  d = sqrt(dd) * m;
  qlo = b->q / (1 + ldexp(1, -20)) / m; /* bound_sketch's |q|, rounded down */
  if (!(qlo > 0)) return 0;
  kappa = (d * (1 + ldexp(1, -22)) + ldexp(1, -22) * b->q) / qlo * m;
  if (!(kappa < 1e30) || !(v->xnmax <= FLT_MAX)) return 0;
  b->r += b->q * kappa * v->xnmax * m + ldexp(1, -124);
  b->q *= (1 + kappa) * m;
  v->q8qs = qs;
  return ng;
}

/* Replaces the least of the k lower bounds (a min-heap) with x. */
static void lb_replace(double *h, size_t k, double x) {
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= k) break;
    if (c + 1 < k && h[c + 1] < h[c]) c++;
    if (!(h[c] < x)) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
}

#define SPAN (64 * BLOCK) /* rows search_split scores before it picks among them */
#define SAMPLE 16         /* floor_guess looks at every SAMPLE-th row */
#define GUESS 32          /* and only when the place it takes there is at most this */

/* Row i's lower bound: its approximation a less the bound at x (NaN for a NaN a). */
static double lower(const bound *b, double a, double x) {
  return a - ((b->p * x + b->q) * x + b->r);
}

/*
** A guess at a lower bound that at least k of the m rows' lower bounds
** reach (the better the guess, the fewer reach it): the r-th best of every
** SAMPLE-th row's, r for about 3k in all; -INFINITY when m is too short or
** k too large for a short guess.
*/
static double floor_guess(const bound *b, const float *a, const float *xs, size_t m, size_t k) {
  double best[GUESS] = {0};
  size_t r = (3 * k + SAMPLE - 1) / SAMPLE, n = 0, i, j;
  if (r > GUESS || m / SAMPLE < 4 * r) return -INFINITY;
  for (i = 0; i < m; i += SAMPLE) { /* best[0..n) in order, best first */
    double x = lower(b, a[i], xs[i]);
    if (!(x > -INFINITY) || (n == r && !(x > best[r - 1]))) continue;
    j = n < r ? n++ : r - 1;
    for (; j > 0 && best[j - 1] < x; j--) best[j] = best[j - 1];
    best[j] = x;
  }
  return n == r ? best[r - 1] : -INFINITY;
}

/*
** A candidate's place as one number, the lower the sooner: NaN (kept for
** the exact pass, never passed by tau) first, then by upper bound, highest
** first (the bits of a double, flipped so that they order as integers; -0
** as 0). Ties go by slot.
*/
static inline uint64_t cand_key(const cand *c) {
  uint64_t u;
  double up = c->up == 0 ? 0 : c->up;
  if (up != up) return 0;
  memcpy(&u, &up, sizeof u);
  return u >> 63 ? u : ~u & ~(UINT64_C(1) << 63);
}

static inline int cand_before(const cand *x, const cand *y) {
  uint64_t a = cand_key(x), b = cand_key(y);
  return a < b || (a == b && x->slot < y->slot);
}

/* Candidates in cand_key order: a quicksort (middle of three), runs of at
** most 16 by insertion; it was an insertion sort of up to 128 and then
** qsort, 5% of a hybrid search. */
static void sort_cands(cand *c, size_t n) {
  while (n > 16) {
    size_t i = 0, j = n - 1, mid = n / 2;
    cand pivot, t;
    if (cand_before(&c[mid], &c[0])) t = c[mid], c[mid] = c[0], c[0] = t;
    if (cand_before(&c[n - 1], &c[0])) t = c[n - 1], c[n - 1] = c[0], c[0] = t;
    if (cand_before(&c[n - 1], &c[mid])) t = c[n - 1], c[n - 1] = c[mid], c[mid] = t;
    pivot = c[mid];
    for (;;) { /* Hoare: c[0..i) not after the pivot, c(j..n) not before it */
      while (cand_before(&c[i], &pivot)) i++;
      while (cand_before(&pivot, &c[j])) j--;
      if (i >= j) break;
      t = c[i], c[i] = c[j], c[j] = t;
      i++;
      j--;
    }
    /* the smaller side by recursion, the larger by the loop: log n deep */
    if (j + 1 < n - j - 1) {
      sort_cands(c, j + 1);
      c += j + 1;
      n -= j + 1;
    } else {
      sort_cands(c + j + 1, n - j - 1);
      n = j + 1;
    }
  }
  {
    size_t i, j;
    for (i = 1; i < n; i++) {
      cand x = c[i];
      for (j = i; j > 0 && cand_before(&x, &c[j - 1]); j--) c[j] = c[j - 1];
      c[j] = x;
    }
  }
}

/*
** Exact top-k of f32 rows in two passes, the first over the sketch when
** there is one, else over the high plane. Every row with an upper bound
** below the k-th best lower bound (tau) has an exact score below k rows'
** and is never a hit; the rest are scored exactly. A NaN approximation
** compares false and is kept for the exact pass.
**
** The rows are approximated SPAN at a time. Tau only rises as rows come,
** so a span starts from a guessed floor g when it is higher: the rows whose
** upper bound reaches g are taken, and when at least k of them have lower
** bounds reaching g too, the k-th best lower bound (the final tau) does,
** and every row a pass at tau would take is among them. Else the span is
** taken again at tau. Either way the same rows reach the exact pass,
** split_finish, which the caller may put off (rag_vec_search_start).
*/
static int search_split(rag_vec *v, const float *q, size_t kk) {
  bound b;
  size_t n = v->ids.n, lo, i, j, c, nc = 0, climit = 4 * kk + 1024, nnz = 0, ng = 0;
  size_t span = n < SPAN ? n : SPAN;
  double tau = -INFINITY;
  int sketched = v->o.sketch && v->hk.sketch != NULL;
  const float *xs = v->norms; /* what the bound is a polynomial of, row by row */
  int rc = scratch_fit(v, kk, (span + BLOCK - 1) / BLOCK * BLOCK); /* whole blocks */
  if (rc != RAG_OK) return rc;
  if (kk > v->lbcap) {
    double *p = (double *)rag_grow(v->lb, &v->lbcap, kk, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    v->lb = p;
  }
  if (climit + BLOCK > v->ccap) {
    cand *p = (cand *)rag_grow(v->cs, &v->ccap, climit + BLOCK, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    v->cs = p;
  }
  if (span > v->keptcap) {
    uint32_t *p = (uint32_t *)rag_grow(v->kept, &v->keptcap, span, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    v->kept = p;
  }
  for (i = 0; i < kk; i++) v->lb[i] = -INFINITY;
  if (sketched) { /* the bound's variable is each row's weight, not its norm */
    nnz = sketch_query(v, q);
    bound_sketch(&b, v, q);
    xs = v->skw;
    if (v->hk.sketch8 != NULL) ng = quantize(v, nnz, &b);
  } else {
    if (v->hk.bf16_rows) rag_kernel_bf16_query(q, v->o.dim, v->qb);
    bound_init(&b, v, q, v->hk.bf16_rows ? v->qb : NULL);
  }
  for (lo = 0; lo < n; lo += span) {
    size_t m = n - lo < span ? n - lo : span, nk = 0, reach = 0, at;
    size_t step = sketched ? m : BLOCK; /* the sketch in one call: it reads a block ahead */
    double g;
    for (at = 0; at < m; at += step) {
      size_t r = m - at < step ? m - at : step;
      float *out = v->buf + at;
      if (sketched) { /* whole blocks of SKR rows, each times its scale */
        if (ng > 0)
          v->hk.sketch8(v->q8, v->o.dim + 4, v->nzi, ng, code_at(v, lo + at),
                        v->sks + lo + at, v->q8qs, r, v->o.dim, out);
        else
          v->hk.sketch(v->nzw, v->nzi, nnz, code_at(v, lo + at), v->sks + lo + at, r, v->o.dim,
                       out);
      } else if (v->hk.bf16_rows) {
        v->hk.bf16_rows(v->qb, row_at(v, lo + at), r, v->o.dim, v->stride, out);
      } else {
        v->hk.approx_rows(q, row_at(v, lo + at), NULL, r, v->o.dim, v->stride, out);
      }
    }
    g = floor_guess(&b, v->buf, xs + lo, m, kk);
    if (g > tau) {
      nk = v->hk.keep(v->buf, xs + lo, m, b.p, b.q, b.r, g, v->kept);
      for (j = 0; j < nk; j++) reach += lower(&b, v->buf[v->kept[j]], xs[lo + v->kept[j]]) >= g;
    }
    if (reach < kk) nk = v->hk.keep(v->buf, xs + lo, m, b.p, b.q, b.r, tau, v->kept);
    for (c = 0; c < nk; c += BLOCK) {
      size_t e = nk - c < BLOCK ? nk : c + BLOCK;
      for (j = c; j < e; j++) { /* tau may have risen since keep's test */
        double xn, a, r;
        i = v->kept[j];
        xn = xs[lo + i];
        a = v->buf[i];
        r = (b.p * xn + b.q) * xn + b.r;
        if (!(a + r < tau)) {
          v->cs[nc].up = a + r;
          v->cs[nc++].slot = (uint32_t)(lo + i);
        }
        if (a - r > tau) {
          lb_replace(v->lb, kk, a - r);
          tau = v->lb[0];
        }
      }
      if (nc > climit) { /* drop those that tau has since passed */
        size_t w;
        for (i = 0, w = 0; i < nc; i++)
          if (!(v->cs[i].up < tau)) v->cs[w++] = v->cs[i];
        nc = w;
        if (nc > climit) {
          cand *p = (cand *)rag_grow(v->cs, &v->ccap, 2 * nc + BLOCK, sizeof *p);
          if (p == NULL) return RAG_ENOMEM;
          v->cs = p;
          climit = 2 * nc;
        }
      }
    }
  }
  for (i = 0, j = 0; i < nc; i++)
    if (!(v->cs[i].up < tau)) v->cs[j++] = v->cs[i];
  v->nc = j;
  sort_cands(v->cs, j);
  return RAG_OK;
}

/* The exact pass of search_split over the rows it kept. */
static void split_finish(rag_vec *v, const float *q, rag_topk *t) {
  size_t i, nc = v->nc;
  for (i = 0; i < nc && i < AHEAD; i++) prefetch_row(v, v->cs[i].slot);
  for (i = 0; i < nc; i++) {
    /* by upper bound, highest first: once the k-th best exact score is
    ** above a row's bound, it is above every later row's */
    if (t->n == t->k && v->cs[i].up < t->h[0].score) break;
    if (i + AHEAD < nc) prefetch_row(v, v->cs[i + AHEAD].slot);
    rag_topk_push(t, v->cs[i].slot, score_slot(v, q, v->cs[i].slot));
  }
  v->nc = 0;
}

/* The filter's slots, each once, into v->allow; their count in *na. */
static int allowed(rag_vec *v, const rag_id_filter *f, size_t *na) {
  size_t i, n;
  if (f->n > v->acap) {
    uint32_t *a = (uint32_t *)rag_grow(v->allow, &v->acap, f->n, sizeof *a);
    if (a == NULL) return RAG_ENOMEM;
    v->allow = a;
  }
  if (v->ids.n > v->seencap) {
    size_t old = v->seencap;
    uint32_t *s = (uint32_t *)rag_grow(v->seen, &v->seencap, v->ids.n, sizeof *s);
    if (s == NULL) return RAG_ENOMEM;
    memset(s + old, 0, (v->seencap - old) * sizeof *s); /* marks are cleared after each use */
    v->seen = s;
  }
  n = rag_ids_mark(&v->ids, f, v->seen, 1, v->allow);
  for (i = 0; i < n; i++) v->seen[v->allow[i]] = 0;
  *na = n;
  return RAG_OK;
}

int rag_vec_search_start(rag_vec *v, const float *q, size_t k, const rag_id_filter *filter,
                         rag_vec_bad *bad) {
  rag_topk *t = &v->top;
  size_t kk = k < v->ids.n ? k : v->ids.n;
  int rc = prepare(v, q, v->tmp, bad);
  v->nc = 0; /* an unfinished search's rows are not this one's */
  rag_topk_init(t, v->hits, 0, &v->ids);
  if (rc != RAG_OK || kk == 0) return rc;
  if ((rc = scratch_fit(v, kk, BLOCK)) != RAG_OK) return rc;
  if (filter == NULL && v->hk.split && (rc = search_split(v, v->tmp, kk)) != RAG_OK) return rc;
  rag_topk_init(t, v->hits, kk, &v->ids); /* after search_split, whose scratch may move hits */
  if (filter == NULL && !v->hk.split) {
    scan(v, v->tmp, v->rows, 0, v->ids.n, t);
  } else if (filter != NULL) {
    size_t na, i;
    if ((rc = allowed(v, filter, &na)) != RAG_OK) return rc;
    for (i = 0; i < na; i++) rag_topk_push(t, v->allow[i], score_slot(v, v->tmp, v->allow[i]));
  }
  return RAG_OK;
}

rag_ahead *rag_vec_search_ahead(rag_vec *v) {
  size_t rows = v->nc, per = (v->stride + 63) / 64, i, off, m = 0;
  if (rows > L2_ROWS_BYTES / (2 * v->stride)) rows = L2_ROWS_BYTES / (2 * v->stride);
  if (rows == 0) return NULL;
  if (2 * per * rows > v->linecap) {
    const void **p = (const void **)rag_grow(v->ahead.line, &v->linecap, 2 * per * rows, sizeof *p);
    if (p == NULL) return NULL; /* only a hint */
    v->ahead.line = p;
  }
  for (i = 0; i < rows; i++) {
    const char *h = (const char *)hi_at(v, v->cs[i].slot), *l = (const char *)lo_at(v, v->cs[i].slot);
    for (off = 0; off < v->stride; off += 64) {
      v->ahead.line[m++] = h + off;
      v->ahead.line[m++] = l + off;
    }
  }
  v->ahead.n = m;
  v->ahead.at = 0;
  return &v->ahead;
}

void rag_vec_search_finish(rag_vec *v, const rag_hit **hits, size_t *n) {
  split_finish(v, v->tmp, &v->top);
  *n = rag_topk_sort(&v->top);
  *hits = v->hits;
  rag_topk_init(&v->top, v->hits, 0, &v->ids); /* a second finish gives nothing */
}

int rag_vec_search(rag_vec *v, const float *q, size_t k, const rag_id_filter *filter,
                   const rag_hit **hits, size_t *n, rag_vec_bad *bad) {
  int rc = rag_vec_search_start(v, q, k, filter, bad);
  *hits = NULL;
  *n = 0;
  if (rc == RAG_OK) rag_vec_search_finish(v, hits, n);
  return rc;
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
  if (v->hk.split && (RAG_MUL_OVERFLOWS(block, d) || row_fit(v, block * d) != RAG_OK))
    return RAG_ENOMEM;
  for (lo = 0; lo < v->ids.n; lo += block) {
    size_t hi = lo + block < v->ids.n ? lo + block : v->ids.n, j;
    const unsigned char *rows = row_at(v, lo);
    if (v->hk.split) { /* the block's rows rebuilt once for every query */
      for (j = lo; j < hi; j++) (void)row_get(v, j, v->row + (j - lo) * d);
      rows = (const unsigned char *)v->row;
    }
    for (i = 0; i < nq; i++) scan(v, v->qs + i * d, rows, lo, hi, &tk[i]);
  }
  for (i = 0; i < nq; i++) rag_topk_sort(&tk[i]);
  *hits = v->hits;
  *count = kk;
  return RAG_OK;
}

size_t rag_vec_memory(const rag_vec *v) { /* a borrowed index's rows: cap 0, no blocks */
  return sizeof *v + rag_ids_memory(&v->ids) +
         (v->rowmem.base ? v->cap * v->stride + 63 : 0) +
         (v->lomem.base ? v->cap * v->stride + 63 : 0) + (v->norms ? v->cap * sizeof(float) : 0) +
         (v->scales ? v->cap * sizeof(float) : 0) + v->o.dim * sizeof(float) +
         (v->skmem.base ? (size_t)sketch_bytes(v, v->cap) + 63 : 0) +
         (v->sks ? 2 * v->cap * sizeof(float) : 0) +
         (v->nzi ? (v->o.dim + 4) * sizeof(uint32_t) + v->o.dim * sizeof(float) : 0) +
         (v->q8 ? 4 * (v->o.dim + 4) : 0) + v->rowcap * sizeof(float) + v->lbcap * sizeof(double) + v->ccap * sizeof(cand) +
         v->qscap * sizeof(float) + v->bufcap * sizeof(float) + v->hcap * sizeof(rag_hit) +
         v->acap * sizeof(uint32_t) + v->seencap * sizeof(uint32_t);
}

size_t rag_vec_mapped(const rag_vec *v) {
  return v->mapped;
}

/* {====== Saving and loading ======} */

/* The zero bytes that bring a payload starting at file offset `off` to a line. */
static size_t pad_at(uint64_t off) {
  return (size_t)((LINE - off % LINE) % LINE);
}

/* The data bytes of ROWS, LOWS, NORM, SCAL, SKCD and SKSW for n rows. */
static void row_sizes(const rag_vec *v, uint64_t n, uint64_t sz[NROWSECS]) {
  sz[0] = n * v->stride;
  sz[1] = v->hk.split ? n * v->stride : 0;
  sz[2] = v->hk.split ? n * 4 : 0;
  sz[3] = v->o.dtype == RAG_I8 ? n * 4 : 0;
  sz[4] = sketch_bytes(v, n);
  sz[5] = v->o.sketch ? n * 8 : 0;
}

static const char TAGS[NSECTIONS][5] = {"PARM", "IDS ", "ROWS", "LOWS",
                                        "NORM", "SCAL", "SKCD", "SKSW"};

static void write_index(const void *obj, rag_writer *w) {
  static const unsigned char zeros[LINE] = {0};
  const rag_vec *v = (const rag_vec *)obj;
  const void *data[NROWSECS];
  size_t n = v->ids.n, i, pad[NROWSECS];
  uint64_t len[NSECTIONS], sz[NROWSECS], off;
  data[0] = v->rows;
  data[1] = v->lo;
  data[2] = v->norms;
  data[3] = v->scales;
  data[4] = v->sk;
  data[5] = NULL; /* SKSW: the scales, then the weights */
  len[0] = 4 + 1 + 1 + 1;
  len[1] = rag_varint_len(n);
  for (i = 0; i < n; i++) len[1] += rag_str_size(v->ids.e[i].len);
  row_sizes(v, n, sz);
  off = RAG_FILE_HEADER + 16 + len[0] + 16 + len[1];
  for (i = 0; i < NROWSECS; i++) { /* a payload starts 12 bytes into its section */
    pad[i] = pad_at(off + 12);
    len[2 + i] = pad[i] + sz[i];
    off += 16 + len[2 + i];
  }
  rag_w_header(w, MAGIC, FORMAT_VERSION, NSECTIONS, off);
  rag_w_begin(w, TAGS[0], len[0]);
  rag_w_uint(w, v->o.dim, 4);
  rag_w_uint(w, (uint64_t)v->o.metric, 1);
  rag_w_uint(w, (uint64_t)v->o.dtype, 1);
  rag_w_uint(w, (uint64_t)(v->o.sketch != 0), 1);
  rag_w_end(w);
  rag_w_begin(w, TAGS[1], len[1]);
  rag_w_varint(w, n);
  for (i = 0; i < n; i++) {
    size_t l;
    const char *s = rag_ids_get(&v->ids, (uint32_t)i, &l);
    rag_w_str(w, s, l);
  }
  rag_w_end(w);
  for (i = 0; i < NROWSECS; i++) {
    rag_w_begin(w, TAGS[2 + i], len[2 + i]);
    rag_w_put(w, zeros, pad[i]);
    if (i == 5 && sz[5] > 0) {
      rag_w_put(w, v->sks, n * 4);
      rag_w_put(w, v->skw, n * 4);
    } else {
      rag_w_put(w, data[i], (size_t)sz[i]);
    }
    rag_w_end(w);
  }
}

int rag_vec_dump(const rag_vec *v, unsigned char **buf, size_t *n) {
  return rag_file_dump(write_index, v, buf, n);
}

int rag_vec_save(const rag_vec *v, const char *path, int *err) {
  return rag_file_save(path, write_index, v, err);
}

/* 1 when row `slot`'s sketch is the one sketch_row makes of x. */
static int sketch_ok(rag_vec *v, size_t slot, const float *x) {
  int8_t *want = (int8_t *)(void *)v->nzi; /* dim bytes of scratch: no search is under way */
  const int8_t *c = code_at(v, slot);
  float s, w;
  size_t i;
  sketch_row(v, x, v->norms[slot], want, 1, &s, &w);
  for (i = 0; i < v->o.dim; i++)
    if (c[i * SKR] != want[i]) return 0;
  return memcmp(&s, v->sks + slot, sizeof s) == 0 && memcmp(&w, v->skw + slot, sizeof w) == 0;
}

/* Why rows [0, n) are unsound ("bad component", "bad norm", "bad sketch"),
** or NULL when they are sound; f32 rows are rebuilt in v->row to be checked. */
static const char *row_fault(rag_vec *v, size_t n) {
  size_t i;
  if (!v->hk.split)
    return rag_kernel_rows_ok(&v->kern, v->rows, v->scales, n) ? NULL : "bad component";
  for (i = 0; i < n; i++) {
    const float *x = (const float *)row_get(v, i, v->row);
    if (!rag_kernel_rows_ok(&v->kern, x, NULL, 1)) return "bad component";
    if (v->norms[i] != norm_up(x, v->o.dim)) return "bad norm";
    if (v->o.sketch && !sketch_ok(v, i, x)) return "bad sketch";
  }
  if (v->o.sketch && n % SKR != 0) { /* the last block's rows past n: zero */
    for (i = 0; i < v->o.dim; i++) {
      const int8_t *c = code_at(v, n) + i * SKR;
      size_t j;
      for (j = 0; j < SKR - n % SKR; j++)
        if (c[j] != 0) return "bad sketch";
    }
  }
  return NULL;
}

/* PARM: the index's options (no sketch byte before version 3). */
static int read_params(rag_reader r, uint32_t version, rag_vec_opts *o, const char **why) {
  uint64_t dim;
  unsigned metric, dtype, sketch = 0;
  if (!rag_r_uint(&r, 4, &dim) || !rag_r_u8(&r, &metric) || !rag_r_u8(&r, &dtype) ||
      (version >= 3 && !rag_r_u8(&r, &sketch)) || r.p != r.e || dim < 1 ||
      dim > RAG_VEC_MAX_DIM || metric >= RAG_NMETRICS || dtype >= RAG_NDTYPES || sketch > 1 ||
      (sketch && (dtype != RAG_F32 || metric == RAG_L2)))
    return rag_corrupt(why, "bad parameters");
  memset(o, 0, sizeof *o);
  o->dim = (size_t)dim;
  o->metric = (rag_metric)metric;
  o->dtype = (rag_dtype)dtype;
  o->sketch = (int)sketch;
  return RAG_OK;
}

/* IDS: the id count and the bytes of all ids, every id well-formed. */
static int scan_ids(rag_reader r, uint64_t *count, uint64_t *bytes, const char **why) {
  uint64_t i;
  *bytes = 0;
  if (!rag_r_varint(&r, count) || *count > (uint64_t)(r.e - r.p) || *count > RAG_IDS_MAX)
    return rag_corrupt(why, "bad id count");
  for (i = 0; i < *count; i++) {
    const char *s;
    size_t l;
    if (!rag_r_str(&r, &s, &l)) return rag_corrupt(why, "bad id");
    *bytes += l;
  }
  return r.p == r.e ? RAG_OK : rag_corrupt(why, "bad id section");
}

/* IDS again, after scan_ids: every id into v, once. */
static int push_ids(rag_vec *v, rag_reader r, uint64_t count, uint64_t bytes, const char **why) {
  uint64_t i;
  int rc = rag_ids_reserve(&v->ids, (size_t)count, (size_t)bytes);
  if (rc != RAG_OK) return rc == RAG_ETOOBIG ? rag_corrupt(why, "too many ids") : rc;
  (void)rag_r_varint(&r, &count);
  for (i = 0; i < count; i++) {
    const char *s;
    size_t l;
    (void)rag_r_str(&r, &s, &l);
    if (rag_ids_find(&v->ids, s, l) != RAG_IDS_NONE) return rag_corrupt(why, "duplicate id");
    rag_ids_push(&v->ids, s, l);
  }
  return RAG_OK;
}

/* Version 1: ROWS and SCAL as long as count rows need. */
static int sizes_v1(const rag_vec *v, const rag_reader *sec, uint64_t count, const char **why) {
  if (count * v->kern.rowbytes != (uint64_t)(sec[2].e - sec[2].p) ||
      (uint64_t)(sec[3].e - sec[3].p) != (v->o.dtype == RAG_I8 ? count * 4 : 0))
    return rag_corrupt(why, "row section size disagrees with the id count");
  return RAG_OK;
}

/* Version 1's rows, for the ids read: each checked, f32 ones split as they are copied. */
static int read_rows_v1(rag_vec *v, const rag_reader *sec, const char **why) {
  size_t count = v->ids.n, i;
  const char *fault;
  int rc = rows_fit(v, count);
  if (rc != RAG_OK) return rc;
  if (v->hk.split) {
    for (i = 0; i < count; i++) {
      memcpy(v->row, sec[2].p + i * v->kern.rowbytes, v->kern.rowbytes);
      if (!rag_kernel_rows_ok(&v->kern, v->row, NULL, 1)) return rag_corrupt(why, "bad component");
      row_put(v, i, v->row);
    }
    return RAG_OK;
  }
  if (count > 0) memcpy(v->rows, sec[2].p, (size_t)(sec[2].e - sec[2].p));
  if (v->scales != NULL && count > 0) memcpy(v->scales, sec[3].p, count * 4);
  fault = row_fault(v, count);
  return fault == NULL ? RAG_OK : rag_corrupt(why, fault);
}

/*
** Versions 2 and 3: ROWS, LOWS, NORM, SCAL (and SKCD, SKSW) of the file at
** p, each a zero pad up to a line, then as many bytes as count rows need;
** d[i] gets the start of each one's data (d[4] and d[5] NULL in version 2).
*/
static int find_rows(const rag_vec *v, const unsigned char *p, const rag_reader *sec,
                     size_t nrowsecs, uint64_t count, const unsigned char **d,
                     const char **why) {
  uint64_t sz[NROWSECS];
  size_t i, j;
  row_sizes(v, count, sz);
  d[4] = d[5] = NULL;
  for (i = 0; i < nrowsecs; i++) {
    const rag_reader *s = &sec[2 + i];
    size_t pad = pad_at((uint64_t)(s->p - p));
    if ((uint64_t)(s->e - s->p) != pad + sz[i])
      return rag_corrupt(why, "row section size disagrees with the id count");
    for (j = 0; j < pad; j++)
      if (s->p[j] != 0) return rag_corrupt(why, "nonzero pad");
    d[i] = s->p + pad;
  }
  return RAG_OK;
}

/* Version 2 or 3 rows at d (see find_rows), for the ids read: borrowed, or copied. */
static int take_rows(rag_vec *v, const unsigned char *const *d, int borrow) {
  uint64_t sz[NROWSECS];
  size_t n = v->ids.n;
  int rc;
  row_sizes(v, n, sz);
  if (borrow) { /* const cast away: nothing writes rows while they are borrowed */
    v->rows = (unsigned char *)(uintptr_t)d[0];
    v->lo = v->hk.split ? (unsigned char *)(uintptr_t)d[1] : NULL;
    v->norms = v->hk.split ? (float *)(uintptr_t)d[2] : NULL;
    v->scales = v->o.dtype == RAG_I8 ? (float *)(uintptr_t)d[3] : NULL;
    if (v->o.sketch) {
      v->sk = (int8_t *)(uintptr_t)d[4];
      v->sks = (float *)(uintptr_t)d[5];
      v->skw = (float *)(uintptr_t)(d[5] + n * 4);
    }
    v->borrowed = 1;
    v->mapped = (size_t)(sz[0] + sz[1] + sz[2] + sz[3] + sz[4] + sz[5]);
    return RAG_OK;
  }
  if ((rc = rows_fit(v, n)) != RAG_OK || n == 0) return rc;
  memcpy(v->rows, d[0], (size_t)sz[0]);
  if (v->hk.split) {
    memcpy(v->lo, d[1], (size_t)sz[1]);
    memcpy(v->norms, d[2], (size_t)sz[2]);
  }
  if (v->scales != NULL) memcpy(v->scales, d[3], (size_t)sz[3]);
  if (v->o.sketch) {
    memcpy(v->sk, d[4], (size_t)sz[4]);
    memcpy(v->sks, d[5], n * 4);
    memcpy(v->skw, d[5] + n * 4, n * 4);
  }
  return RAG_OK;
}

int rag_vec_load_mem(const unsigned char *p, size_t n, int borrow, rag_vec **out,
                     const char **why) {
  static const char tags1[4][5] = {"PARM", "IDS ", "ROWS", "SCAL"};
  rag_reader sec[NSECTIONS];
  const unsigned char *d[NROWSECS];
  rag_vec_opts o;
  rag_vec *v = NULL;
  uint64_t count = 0, bytes = 0;
  uint32_t version;
  /* versions 1 and 2 have other sections; rag_file_open checks the version read here */
  uint32_t claimed = n >= 12 ? (uint32_t)rag_le(p + 8, 4) : FORMAT_VERSION;
  int v1 = claimed == 1, rc;
  size_t nsec = v1 ? 4 : claimed == 2 ? NSECTIONS - 2 : NSECTIONS;
  const char *fault;
  *out = NULL;
  rc = rag_file_open(p, n, MAGIC, FORMAT_VERSION, v1 ? tags1 : TAGS, nsec, sec, &version,
                     "not a vector index (bad magic)", why);
  if (rc == RAG_OK) rc = read_params(sec[0], version, &o, why);
  if (rc == RAG_OK) rc = rag_vec_new(&o, &v);
  if (rc == RAG_OK) rc = scan_ids(sec[1], &count, &bytes, why);
  if (rc == RAG_OK)
    rc = v1 ? sizes_v1(v, sec, count, why) : find_rows(v, p, sec, nsec - 2, count, d, why);
  if (rc == RAG_OK) rc = push_ids(v, sec[1], count, bytes, why);
  if (rc == RAG_OK && v1) rc = read_rows_v1(v, sec, why);
  if (rc == RAG_OK && !v1) { /* rows at an unaligned address are copied, and no rows */
    rc = take_rows(v, d, borrow && (uintptr_t)p % LINE == 0 && count > 0);
    if (rc == RAG_OK && (fault = row_fault(v, v->ids.n)) != NULL) rc = rag_corrupt(why, fault);
  }
  if (rc != RAG_OK) {
    rag_vec_free(v);
    return rc;
  }
  *out = v;
  return RAG_OK;
}

static int load_mem(const unsigned char *p, size_t n, void *out, const char **why) {
  return rag_vec_load_mem(p, n, 0, (rag_vec **)out, why);
}

int rag_vec_load(const char *path, rag_vec **out, const char **why, int *err) {
  *out = NULL;
  return rag_file_load(path, load_mem, out, why, err);
}

int rag_vec_check(rag_vec *v) {
  size_t i;
  if (!v->borrowed && v->ids.n > v->cap && v->ids.n > 0) return 0;
  for (i = 0; i < v->ids.n; i++) {
    size_t l;
    const char *s;
    if (!rag_ids_linked(&v->ids, (uint32_t)i)) return 0;
    s = rag_ids_get(&v->ids, (uint32_t)i, &l);
    if (rag_ids_find(&v->ids, s, l) != i) return 0;
  }
  return row_fault(v, v->ids.n) == NULL;
}
