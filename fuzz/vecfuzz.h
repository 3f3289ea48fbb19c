/*
** fuzz/vecfuzz.h: what the vector-index harnesses (vec_load, hnsw_load,
** hnsw_ops) share: reading the input, a small id space, vectors coded in
** the input (with the values that stress the encodings: subnormals, the
** 1e15 and f16 limits, NaN, infinities), the refusal rag_kernel_prepare must
** give, exact scores in double, the order of hits, and the container of
** rag_file.h split into sections and joined back with every length and
** CRC recomputed. Not a harness itself: .ci/fuzz builds the .c files only.
*/
#ifndef VECFUZZ_H
#define VECFUZZ_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rag.h"
#include "rag_digest.h"
#include "rag_file.h"
#include "rag_kernel.h"

#define MAXDIM 40
#define NIDS 48 /* 16 chosen ids, then g00..g31 */
#define NFIXED 16
#define MAXSEC 8

static inline void must(int cond) {
  if (!cond) __builtin_trap();
}

typedef struct input {
  const uint8_t *p, *e;
} input;

static inline int more(const input *in) {
  return in->p < in->e;
}

static inline uint8_t take(input *in) {
  return in->p < in->e ? *in->p++ : 0;
}

static inline float *floats(size_t n) {
  float *p = (float *)malloc((n ? n : 1) * sizeof *p);
  must(p != NULL);
  return p;
}

/* {====== Ids ======} */

typedef struct ident {
  const char *s;
  size_t n;
} ident;

#define G(x) \
  { "g" #x, 3 }
static const ident ids[NIDS] = {
    {"a", 1},        {"b", 1},        {"ab", 2},  {"", 0},   {"x\0y", 3},
    {"x", 1},        {"\xc3\xa9", 2}, {"d3", 2},  {"d4", 2}, {"d5", 2},
    {"d6", 2},       {"d7", 2},       {"a\0", 2}, {"zz", 2}, {"Z", 1},
    {"\xff\xfe", 2}, G(00),           G(01),      G(02),     G(03),
    G(04),           G(05),           G(06),      G(07),     G(08),
    G(09),           G(10),           G(11),      G(12),     G(13),
    G(14),           G(15),           G(16),      G(17),     G(18),
    G(19),           G(20),           G(21),      G(22),     G(23),
    G(24),           G(25),           G(26),      G(27),     G(28),
    G(29),           G(30),           G(31)};
#undef G

/* An id from a byte: mostly the 16 chosen ones, so that replacements happen. */
static inline int pick_id(uint8_t x) {
  return x < 0xE0 ? x % NFIXED : NFIXED + x % (NIDS - NFIXED);
}

/* Bytewise order (memcmp, then length), as ties must break. */
static inline int id_cmp(const char *a, size_t na, const char *b, size_t nb) {
  int c = memcmp(a, b, na < nb ? na : nb);
  if (c != 0) return c;
  return na < nb ? -1 : na > nb;
}

/* The index in ids of an id's bytes, or -1. */
static inline int which_id(const char *s, size_t n) {
  int i;
  for (i = 0; i < NIDS; i++)
    if (ids[i].n == n && memcmp(ids[i].s, s, n) == 0) return i;
  return -1;
}

/* {====== Vectors ======} */

/* Components that stress the encodings and the refusals. */
static inline float special(uint8_t b) {
  static const float v[16] = {0.0f,   -0.0f,   1e-44f,  -1e-44f, 1e-38f, 1e15f,
                              -1e15f, 65504.f, 65519.f, 65520.f, 1e16f,  1e-7f,
                              0.5f,   -1.0f,   0.0f,    0.0f};
  if ((b & 15) == 14) return INFINITY;
  if ((b & 15) == 15) return NAN;
  return v[b & 15];
}

static inline uint32_t lcg(uint32_t *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 8;
}

/*
** A vector of dim components from the input: the first byte below 0x80
** takes a byte per component (0xF0 and up: a special value, else a step
** of 1/8); otherwise a generator seeded from it and the next byte fills a
** coarse grid (ties, equal vectors) scaled by a magnitude the byte picks.
*/
static inline void make_vector(input *in, size_t dim, float *x) {
  static const float mags[8] = {1.0f,   1.0f,   1.0f,  1e-3f,
                                1e-20f, 1e-44f, 1e10f, 1e15f};
  uint8_t k = take(in);
  size_t i;
  if (k < 0x80) {
    for (i = 0; i < dim; i++) {
      uint8_t b = take(in);
      x[i] = b >= 0xF0 ? special(b) : (float)((int)b - 120) / 8.0f;
    }
  } else {
    uint32_t s = (uint32_t)k << 8 | take(in);
    float mag = mags[(k >> 4) & 7];
    for (i = 0; i < dim; i++)
      x[i] = (float)((int)(lcg(&s) % 9) - 4) * 0.25f * mag;
  }
}

/* The vector rag_kernel_prepare makes: the same arithmetic, unit under cosine. */
static inline void prepare_like(const float *x, size_t d, rag_metric m,
                                float *out) {
  double ss = 0;
  size_t i;
  for (i = 0; i < d; i++) ss += (double)x[i] * x[i];
  if (m == RAG_COSINE) {
    double inv = 1.0 / sqrt(ss);
    for (i = 0; i < d; i++) out[i] = (float)(x[i] * inv);
  } else {
    memcpy(out, x, d * sizeof *out);
  }
}

/* What rag_kernel_prepare must say of x: RAG_OK, or RAG_EINVAL, where, why. */
static inline int predict(const float *x, size_t d, rag_metric m, rag_dtype t,
                          size_t *comp, const char **why) {
  double ss = 0, inv = 1;
  size_t i;
  for (i = 0; i < d; i++) {
    if (isnan(x[i]) || fabsf(x[i]) > 1e15f) {
      *comp = i;
      *why = isnan(x[i]) ? "nan" : isinf(x[i]) ? "inf" : "range";
      return RAG_EINVAL;
    }
    ss += (double)x[i] * x[i];
  }
  if (m == RAG_COSINE && ss == 0) {
    *comp = d;
    *why = "zero";
    return RAG_EINVAL;
  }
  if (m == RAG_COSINE) inv = 1.0 / sqrt(ss);
  for (i = 0; t == RAG_F16 && i < d; i++) {
    float p = m == RAG_COSINE ? (float)(x[i] * inv) : x[i];
    if (fabsf(p) >= 65520.0f) { /* rounds to the half infinity */
      *comp = i;
      *why = "range";
      return RAG_EINVAL;
    }
  }
  return RAG_OK;
}

/* The refusal, or acceptance, that the index gave for x. */
static inline void refused_as(int rc, const rag_vec_bad *bad, int want,
                              size_t comp, const char *why) {
  must(rc == want);
  if (rc == RAG_EINVAL)
    must(bad->component == comp && strcmp(bad->why, why) == 0);
}

/*
** The exact score of prepared query q against row x, in double; *mag gets
** the size the kernels' float rounding is bounded by (the sum of the terms'
** magnitudes, plus what each float term can lose to subnormal rounding,
** 1.4e-45, scaled by close_to's 1e-4), so agreement is judged against it.
*/
static inline double exact_score(const float *q, const float *x, size_t d,
                                 rag_metric m, double *mag) {
  double s = 0, a = 0;
  size_t i;
  for (i = 0; i < d; i++) {
    if (m == RAG_L2) {
      double e = (double)q[i] - x[i], w = fabs(q[i]) + fabs(x[i]);
      s -= e * e;
      a += e * e + 1e-6 * w * w;
    } else {
      s += (double)q[i] * x[i];
      a += fabs((double)q[i] * x[i]);
    }
  }
  *mag = a + (double)d * 1.5e-41;
  return s;
}

/* Within 1e-4 of the terms' magnitude (and what subnormal products lose). */
static inline int close_to(double got, double want, double mag) {
  return fabs(got - want) <= 1e-4 * mag + 1e-42;
}

/* A decoded row against its prepared vector, within the encoding's step. */
static inline int decoded_ok(const float *got, const float *p, size_t d,
                             rag_dtype t) {
  size_t i;
  double mx = 0;
  for (i = 0; i < d; i++)
    if (fabs(p[i]) > mx) mx = fabs(p[i]);
  for (i = 0; i < d; i++) {
    double e = fabs((double)got[i] - p[i]);
    if (t == RAG_F32 && e != 0) return 0;
    if (t == RAG_F16 && e > fabs(p[i]) * (1.0 / 2048) + 3e-8) return 0;
    /* i8: half a step; a scale that underflows gives zeros, a subnormal one
    ** is coarse (the largest component may be clipped) */
    if (t == RAG_I8 && mx / 127 < 1.17549435e-38 && e > 2 * mx) return 0;
    if (t == RAG_I8 && mx / 127 >= 1.17549435e-38 &&
        e > mx / 127 * 0.5 * (1 + 1e-5) + fabs(p[i]) * 1e-6)
      return 0;
  }
  return 1;
}

/* {====== The container, as sections ======} */

static inline uint64_t le(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  while (n-- > 0) v = v << 8 | p[n];
  return v;
}

static inline void put_le(unsigned char *p, uint64_t v, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The size field and every CRC that the structure lets us find. */
static inline void fix_crcs(unsigned char *p, size_t n, size_t nsec) {
  size_t off = RAG_FILE_HEADER, i;
  if (n < RAG_FILE_HEADER) return;
  put_le(p + 16, n, 8);
  put_le(p + 24, rag_digest_crc32(0, p, 24), 4);
  for (i = 0; i < nsec; i++) {
    uint64_t len;
    if (n - off < 16) return;
    len = le(p + off + 4, 8);
    if (len > n - off - 16) return;
    put_le(p + off + 12 + len, rag_digest_crc32(0, p + off, 12 + (size_t)len), 4);
    off += 16 + (size_t)len;
  }
}

/* A dump split into its header and section payloads. */
typedef struct file {
  size_t nsec;
  unsigned char head[RAG_FILE_HEADER];
  char tag[MAXSEC][4];
  unsigned char *sec[MAXSEC];
  size_t len[MAXSEC], cap[MAXSEC];
} file;

static inline void split(file *f, const unsigned char *p, size_t n,
                         size_t nsec) {
  size_t off = RAG_FILE_HEADER, i;
  must(n >= RAG_FILE_HEADER && nsec <= MAXSEC);
  f->nsec = nsec;
  memcpy(f->head, p, RAG_FILE_HEADER);
  for (i = 0; i < nsec; i++) {
    size_t len = (size_t)le(p + off + 4, 8);
    memcpy(f->tag[i], p + off, 4);
    f->cap[i] = len + 64;
    f->sec[i] = (unsigned char *)rag_malloc(f->cap[i]);
    must(f->sec[i] != NULL);
    memcpy(f->sec[i], p + off + 12, len);
    f->len[i] = len;
    off += 16 + len;
  }
  must(off == n);
}

static inline unsigned char *join(const file *f, size_t *n) {
  size_t total = RAG_FILE_HEADER, i, off = RAG_FILE_HEADER;
  unsigned char *p;
  for (i = 0; i < f->nsec; i++) total += 16 + f->len[i];
  p = (unsigned char *)rag_malloc(total);
  must(p != NULL);
  memcpy(p, f->head, RAG_FILE_HEADER);
  put_le(p + 16, total, 8);
  put_le(p + 24, rag_digest_crc32(0, p, 24), 4);
  for (i = 0; i < f->nsec; i++) {
    memcpy(p + off, f->tag[i], 4);
    put_le(p + off + 4, f->len[i], 8);
    if (f->len[i] > 0) memcpy(p + off + 12, f->sec[i], f->len[i]);
    put_le(p + off + 12 + f->len[i], rag_digest_crc32(0, p + off, 12 + f->len[i]), 4);
    off += 16 + f->len[i];
  }
  *n = total;
  return p;
}

static inline void unsplit(file *f) {
  size_t i;
  for (i = 0; i < f->nsec; i++) rag_free(f->sec[i]);
}

/*
** One structural edit of a section: bytes flipped, overwritten, inserted,
** deleted, duplicated or cut; small values where counts, levels and lengths
** are; 32-bit words (rows, scales, node numbers) set small or swapped; the
** version.
*/
static inline void edit(file *f, uint8_t op, uint8_t where, uint32_t pos,
                        uint8_t val) {
  size_t s = where % f->nsec, len = f->len[s], at, k;
  unsigned char *p = f->sec[s];
  switch (op % 10) {
    case 0: /* flip a bit */
      if (len) p[pos % len] ^= (unsigned char)(1u << (val & 7));
      break;
    case 1: /* overwrite a byte */
      if (len) p[pos % len] = val;
      break;
    case 2: /* insert a byte */
      if (len + 1 > f->cap[s]) break;
      at = pos % (len + 1);
      memmove(p + at + 1, p + at, len - at);
      p[at] = val;
      f->len[s]++;
      break;
    case 3: /* delete a run of bytes */
      if (!len) break;
      at = pos % len;
      k = 1 + val % 4;
      if (k > len - at) k = len - at;
      memmove(p + at, p + at + k, len - at - k);
      f->len[s] -= k;
      break;
    case 4: /* truncate */ f->len[s] = pos % (len + 1); break;
    case 5: /* duplicate a range in place */
      if (!len) break;
      at = pos % len;
      k = 1 + val % 16;
      if (k > len - at) k = len - at;
      if (len + k > f->cap[s]) break;
      memmove(p + at + k, p + at, len - at);
      f->len[s] += k;
      break;
    case 6: /* the version */ put_le(f->head + 8, val % 3, 4); break;
    case 7: /* a small value at a byte */
      if (len) p[pos % len] = (unsigned char)(val % 8);
      break;
    case 8: /* a small 32-bit word at an aligned place (a node number, a count)
             */
      if (len >= 4) put_le(p + (pos % (len / 4)) * 4, val % 64, 4);
      break;
    default: /* swap two aligned words */
      if (len >= 8) {
        size_t a = (pos % (len / 4)) * 4, b = ((pos + 1 + val) % (len / 4)) * 4;
        unsigned char t[4];
        memcpy(t, p + a, 4);
        memcpy(p + a, p + b, 4);
        memcpy(p + b, t, 4);
      }
      break;
  }
}

/* Damage with the CRCs left as they are: flips, truncations, overwrites. */
static inline size_t damage(unsigned char *p, size_t n, const uint8_t ops[4][5],
                            size_t nm) {
  size_t i;
  for (i = 0; i < nm && n > 0; i++) {
    uint32_t pos = (uint32_t)ops[i][1] | (uint32_t)ops[i][2] << 8 |
                   (uint32_t)ops[i][3] << 16;
    switch (ops[i][0] % 3) {
      case 0: p[(pos / 8) % n] ^= (unsigned char)(1u << (pos % 8)); break;
      case 1: n = pos % (n + 1); break;
      default: p[pos % n] = ops[i][4]; break;
    }
  }
  return n;
}

/* A failed load says why, with one of the three codes. */
static inline int load_ok(int rc, const void *obj, const char *why) {
  if (rc == RAG_OK) {
    must(obj != NULL);
    return 1;
  }
  must(obj == NULL && why != NULL && why[0] != '\0');
  must(rc == RAG_EFORMAT || rc == RAG_EVERSION || rc == RAG_ECORRUPT);
  return 0;
}

#endif
