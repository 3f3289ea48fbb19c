/*
** rag_kernel.c: vector preparation, row encodings and the scoring kernels,
** portable C and AVX2/FMA/F16C chosen at run time (GCC and Clang's target
** attribute, so the rest of the library stays baseline x86-64).
*/
#include "rag_kernel.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RAG_X86 1
#if defined(__clang__) ? __clang_major__ >= 9 : __GNUC__ >= 10
#define RAG_BF16 1 /* the compiler knows target("avx512bf16") */
#endif
#include <cpuid.h>
#include <immintrin.h>
#endif

#define MAX_COMPONENT 1e15 /* larger magnitudes could overflow a float score */

/* {====== Half precision ======} */

uint16_t rag_kernel_f16_from_f32(float f) {
  uint32_t x, sign, ax, h, rem;
  memcpy(&x, &f, sizeof x);
  sign = (x >> 16) & 0x8000u;
  ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
  if (ax < 0x38800000u) {                                   /* a half subnormal: units of 2^-24 */
    float a;
    memcpy(&a, &ax, sizeof a);
    return (uint16_t)(sign | (uint32_t)rintf(a * 16777216.0f));
  }
  h = ((((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13));
  rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry moves into the exponent */
  return (uint16_t)(sign | h);
}

float rag_kernel_f32_from_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  float f;
  if (e == 0) {
    f = (float)m * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  x = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
  memcpy(&f, &x, sizeof f);
  return f;
}

/* {====== Portable kernels ======} */

static float dot_f32(const float *q, const float *x, size_t d) {
  float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 4 <= d; i += 4) {
    a0 += q[i] * x[i];
    a1 += q[i + 1] * x[i + 1];
    a2 += q[i + 2] * x[i + 2];
    a3 += q[i + 3] * x[i + 3];
  }
  for (; i < d; i++) a0 += q[i] * x[i];
  return (a0 + a1) + (a2 + a3);
}

static float l2_f32(const float *q, const float *x, size_t d) {
  float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 4 <= d; i += 4) {
    float d0 = q[i] - x[i], d1 = q[i + 1] - x[i + 1], d2 = q[i + 2] - x[i + 2],
          d3 = q[i + 3] - x[i + 3];
    a0 += d0 * d0;
    a1 += d1 * d1;
    a2 += d2 * d2;
    a3 += d3 * d3;
  }
  for (; i < d; i++) {
    float t = q[i] - x[i];
    a0 += t * t;
  }
  return -((a0 + a1) + (a2 + a3));
}

static float dot_f16(const float *q, const uint16_t *x, size_t d) {
  float a = 0;
  size_t i;
  for (i = 0; i < d; i++) a += q[i] * rag_kernel_f32_from_f16(x[i]);
  return a;
}

static float l2_f16(const float *q, const uint16_t *x, size_t d) {
  float a = 0;
  size_t i;
  for (i = 0; i < d; i++) {
    float t = q[i] - rag_kernel_f32_from_f16(x[i]);
    a += t * t;
  }
  return -a;
}

static float dot_i8(const float *q, const int8_t *x, size_t d, float s) {
  float a = 0;
  size_t i;
  for (i = 0; i < d; i++) a += q[i] * (float)x[i];
  return a * s;
}

static float l2_i8(const float *q, const int8_t *x, size_t d, float s) {
  float a = 0;
  size_t i;
  for (i = 0; i < d; i++) {
    float t = q[i] - s * (float)x[i];
    a += t * t;
  }
  return -a;
}

/* A split f32 row (see rag_kernel_split): component i is hi[i] << 16 | hi[d + i]. */
static float join(uint16_t hi, uint16_t lo) {
  uint32_t u = (uint32_t)hi << 16 | lo;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* dot_f32 and l2_f32 over a split row, term for term, so the scores are the same. */
static float dot_s(const float *q, const uint16_t *x, size_t d) {
  float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 4 <= d; i += 4) {
    a0 += q[i] * join(x[i], x[d + i]);
    a1 += q[i + 1] * join(x[i + 1], x[d + i + 1]);
    a2 += q[i + 2] * join(x[i + 2], x[d + i + 2]);
    a3 += q[i + 3] * join(x[i + 3], x[d + i + 3]);
  }
  for (; i < d; i++) a0 += q[i] * join(x[i], x[d + i]);
  return (a0 + a1) + (a2 + a3);
}

static float l2_s(const float *q, const uint16_t *x, size_t d) {
  float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 4 <= d; i += 4) {
    float d0 = q[i] - join(x[i], x[d + i]), d1 = q[i + 1] - join(x[i + 1], x[d + i + 1]),
          d2 = q[i + 2] - join(x[i + 2], x[d + i + 2]),
          d3 = q[i + 3] - join(x[i + 3], x[d + i + 3]);
    a0 += d0 * d0;
    a1 += d1 * d1;
    a2 += d2 * d2;
    a3 += d3 * d3;
  }
  for (; i < d; i++) {
    float t = q[i] - join(x[i], x[d + i]);
    a0 += t * t;
  }
  return -((a0 + a1) + (a2 + a3));
}

/* The approximate scores of a split row: its high halves alone (bfloat16, truncated). */
static float dot_b(const float *q, const uint16_t *x, size_t d) {
  float a = 0;
  size_t i;
  for (i = 0; i < d; i++) a += q[i] * join(x[i], 0);
  return a;
}

static float l2_b(const float *q, const uint16_t *x, size_t d) {
  float a = 0;
  size_t i;
  for (i = 0; i < d; i++) {
    float t = q[i] - join(x[i], 0);
    a += t * t;
  }
  return -a;
}

/* The loop over rows around a one-row kernel. */
#define ROWS(name, T, expr)                                                                 \
  static void name(const float *q, const void *rows, const float *scales, size_t n,      \
                   size_t d, size_t rb, float *out) {                                       \
    const unsigned char *r = (const unsigned char *)rows;                                   \
    size_t i;                                                                               \
    (void)scales;                                                                           \
    for (i = 0; i < n; i++, r += rb) {                                                      \
      const T *x = (const T *)(const void *)r;                                              \
      out[i] = (expr);                                                                      \
    }                                                                                       \
  }

ROWS(p_dot_f32, float, dot_f32(q, x, d))
ROWS(p_l2_f32, float, l2_f32(q, x, d))
ROWS(p_dot_f16, uint16_t, dot_f16(q, x, d))
ROWS(p_l2_f16, uint16_t, l2_f16(q, x, d))
ROWS(p_dot_i8, int8_t, dot_i8(q, x, d, scales[i]))
ROWS(p_l2_i8, int8_t, l2_i8(q, x, d, scales[i]))
ROWS(p_dot_b, uint16_t, dot_b(q, x, d))
ROWS(p_l2_b, uint16_t, l2_b(q, x, d))

/* One-row forms of the portable kernels. */
#define ONE(name, T, expr)                                                     \
  static float name(const float *q, const void *row, size_t d, float s) {   \
    const T *x = (const T *)row;                                               \
    (void)s;                                                                   \
    return (expr);                                                             \
  }

ONE(o_dot_f32, float, dot_f32(q, x, d))
ONE(o_l2_f32, float, l2_f32(q, x, d))
ONE(o_dot_f16, uint16_t, dot_f16(q, x, d))
ONE(o_l2_f16, uint16_t, l2_f16(q, x, d))
ONE(o_dot_i8, int8_t, dot_i8(q, x, d, s))
ONE(o_l2_i8, int8_t, l2_i8(q, x, d, s))
ONE(o_dot_s, uint16_t, dot_s(q, x, d))
ONE(o_l2_s, uint16_t, l2_s(q, x, d))

/* Scores of the rows idx[0..m) around a one-row kernel (s: the row's i8 scale, else 1). */
#define GATHER(name, ATTR, T, expr)                                                         \
  ATTR static void name(const float *q, const void *rows, const float *scales,            \
                        const uint32_t *idx, size_t m, size_t d, size_t rb, float *out) {   \
    const unsigned char *base = (const unsigned char *)rows;                                \
    size_t j;                                                                               \
    for (j = 0; j < m; j++) {                                                               \
      const T *x = (const T *)(const void *)(base + (size_t)idx[j] * rb);                   \
      float s = scales ? scales[idx[j]] : 1.0f;                                             \
      (void)s;                                                                              \
      out[j] = (expr);                                                                      \
    }                                                                                       \
  }

#define PLAIN /* no target attribute */
GATHER(g_dot_f32, PLAIN, float, dot_f32(q, x, d))
GATHER(g_l2_f32, PLAIN, float, l2_f32(q, x, d))
GATHER(g_dot_f16, PLAIN, uint16_t, dot_f16(q, x, d))
GATHER(g_l2_f16, PLAIN, uint16_t, l2_f16(q, x, d))
GATHER(g_dot_i8, PLAIN, int8_t, dot_i8(q, x, d, s))
GATHER(g_l2_i8, PLAIN, int8_t, l2_i8(q, x, d, s))
GATHER(g_dot_s, PLAIN, uint16_t, dot_s(q, x, d))
GATHER(g_l2_s, PLAIN, uint16_t, l2_s(q, x, d))
GATHER(g_dot_b, PLAIN, uint16_t, dot_b(q, x, d))
GATHER(g_l2_b, PLAIN, uint16_t, l2_b(q, x, d))

/* {====== Passing over rows below a threshold ======} */

/*
** rag_kernel.keep: the i < n with !(a[i] + ((p x + q) x + r) < tau), x =
** xn[i], in order, into out; their count. In double, each operation
** rounded once (no fused multiply-add), as rag_vec's scalar loop computes
** it; the SIMD versions make the same operations lane by lane, so the same
** decisions (and rag_vec's bound has a margin for its own arithmetic
** besides). A NaN a[i] is kept.
*/
static size_t p_keep(const float *a, const float *xn, size_t n, double p, double q, double r,
                     double tau, uint32_t *out) {
  size_t i, k = 0;
  for (i = 0; i < n; i++) {
    double x = xn[i];
    if (!(a[i] + ((p * x + q) * x + r) < tau)) out[k++] = (uint32_t)i;
  }
  return k;
}

/* {====== The sketch pass ======} */

#define SKR RAG_SKETCH_ROWS
#define SKETCH_AHEAD 8 /* components a sketch pass asks for before it reads them */

/* Rows in block b of a sketch pass over n rows. */
static size_t block_rows(size_t n, size_t b) {
  return n - b * SKR < SKR ? n - b * SKR : SKR;
}

/* rag_kernel.sketch in plain C: each block's sums kept in out, component after component. */
static void p_sketch(const float *w, const uint32_t *idx, size_t nnz, const int8_t *codes,
                     const float *scales, size_t n, size_t d, float *out) {
  size_t b, t, j, nb = (n + SKR - 1) / SKR;
  for (b = 0; b < nb; b++, out += SKR) {
    const int8_t *blk = codes + b * d * SKR;
    size_t m = block_rows(n, b);
    for (j = 0; j < SKR; j++) out[j] = 0;
    for (t = 0; t < nnz; t++) {
      const int8_t *c = blk + (size_t)idx[t] * SKR;
      float wt = w[t];
      for (j = 0; j < SKR; j++) out[j] += wt * (float)c[j];
    }
    for (j = 0; j < m; j++) out[j] *= scales[b * SKR + j];
  }
}

/* {====== AVX2 kernels ======} */

#ifdef RAG_X86
#define AVX __attribute__((target("avx2,fma,f16c")))

AVX static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AVX static inline __m256 load_f16(const uint16_t *x) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)x));
}

AVX static inline __m256 load_i8(const int8_t *x) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)x)));
}

/* Two accumulators over 16 components a step, then 8, then the tail. */
#define AVX_KERNEL(name, T, LOAD, STEP, FINISH, TAIL)                                      \
  AVX static inline float name(const float *q, const T *x, size_t d, float s) {            \
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                             \
    __m256 vs = _mm256_set1_ps(s);                                                         \
    float t = 0;                                                                           \
    size_t i = 0;                                                                          \
    (void)vs;                                                                              \
    for (; i + 16 <= d; i += 16) {                                                         \
      __m256 x0 = LOAD(x + i), x1 = LOAD(x + i + 8);                                       \
      __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);                 \
      STEP(a0, q0, x0);                                                                    \
      STEP(a1, q1, x1);                                                                    \
    }                                                                                      \
    if (i + 8 <= d) {                                                                      \
      __m256 x0 = LOAD(x + i), q0 = _mm256_loadu_ps(q + i);                                \
      STEP(a0, q0, x0);                                                                    \
      i += 8;                                                                              \
    }                                                                                      \
    for (; i < d; i++) TAIL;                                                               \
    return FINISH(hsum(_mm256_add_ps(a0, a1)) + t);                                        \
  }

#define LOADF(p) _mm256_loadu_ps(p)
#define DOT_STEP(a, qv, xv) a = _mm256_fmadd_ps(qv, xv, a)
#define L2_STEP(a, qv, xv)            \
  do {                                \
    __m256 dd = _mm256_sub_ps(qv, xv); \
    a = _mm256_fmadd_ps(dd, dd, a);   \
  } while (0)
#define L2I8_STEP(a, qv, xv)                    \
  do {                                          \
    __m256 dd = _mm256_fnmadd_ps(vs, xv, qv);    \
    a = _mm256_fmadd_ps(dd, dd, a);             \
  } while (0)
#define SAME(v) (v)
#define NEG(v) (-(v))
#define TIMES_S(v) ((v) * s)

AVX_KERNEL(v_dot_f32, float, LOADF, DOT_STEP, SAME, t += q[i] * x[i])
AVX_KERNEL(v_l2_f32, float, LOADF, L2_STEP, NEG, { float e = q[i] - x[i]; t += e * e; })
AVX_KERNEL(v_dot_f16, uint16_t, load_f16, DOT_STEP, SAME, t += q[i] * rag_kernel_f32_from_f16(x[i]))
AVX_KERNEL(v_l2_f16, uint16_t, load_f16, L2_STEP, NEG,
           { float e = q[i] - rag_kernel_f32_from_f16(x[i]); t += e * e; })
AVX_KERNEL(v_dot_i8, int8_t, load_i8, DOT_STEP, TIMES_S, t += q[i] * (float)x[i])
AVX_KERNEL(v_l2_i8, int8_t, load_i8, L2I8_STEP, NEG, { float e = q[i] - s * (float)x[i]; t += e * e; })

/* Split rows: the high half at x, the low half d components on. */
AVX static inline __m256 load_split(const uint16_t *x, size_t d) {
  __m256i hi = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)x));
  __m256i lo = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(x + d)));
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(hi, 16), lo));
}

AVX static inline __m256 load_bf16(const uint16_t *x) {
  __m256i hi = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16));
}

#define LOAD_S(p) load_split(p, d)
AVX_KERNEL(v_dot_s, uint16_t, LOAD_S, DOT_STEP, SAME, t += q[i] * join(x[i], x[d + i]))
AVX_KERNEL(v_l2_s, uint16_t, LOAD_S, L2_STEP, NEG,
           { float e = q[i] - join(x[i], x[d + i]); t += e * e; })
AVX_KERNEL(v_dot_b, uint16_t, load_bf16, DOT_STEP, SAME, t += q[i] * join(x[i], 0))
AVX_KERNEL(v_l2_b, uint16_t, load_bf16, L2_STEP, NEG, { float e = q[i] - join(x[i], 0); t += e * e; })

#define AVX_ROWS(name, T, kern, SC)                                                         \
  AVX static void name(const float *q, const void *rows, const float *scales, size_t n,  \
                       size_t d, size_t rb, float *out) {                                   \
    const unsigned char *r = (const unsigned char *)rows;                                   \
    size_t i;                                                                               \
    (void)scales;                                                                           \
    for (i = 0; i < n; i++, r += rb) out[i] = kern(q, (const T *)(const void *)r, d, SC);  \
  }

#define AVX_ONE(name, T, kern)                                                   \
  AVX static float name(const float *q, const void *row, size_t d, float s) { \
    return kern(q, (const T *)row, d, s);                                      \
  }

AVX_ONE(b_dot_f32, float, v_dot_f32)
AVX_ONE(b_l2_f32, float, v_l2_f32)
AVX_ONE(b_dot_f16, uint16_t, v_dot_f16)
AVX_ONE(b_l2_f16, uint16_t, v_l2_f16)
AVX_ONE(b_dot_i8, int8_t, v_dot_i8)
AVX_ONE(b_l2_i8, int8_t, v_l2_i8)
AVX_ONE(b_dot_s, uint16_t, v_dot_s)
AVX_ONE(b_l2_s, uint16_t, v_l2_s)

AVX_ROWS(a_dot_f32, float, v_dot_f32, 1.0f)
AVX_ROWS(a_l2_f32, float, v_l2_f32, 1.0f)
AVX_ROWS(a_dot_f16, uint16_t, v_dot_f16, 1.0f)
AVX_ROWS(a_l2_f16, uint16_t, v_l2_f16, 1.0f)
AVX_ROWS(a_dot_i8, int8_t, v_dot_i8, scales[i])
AVX_ROWS(a_l2_i8, int8_t, v_l2_i8, scales[i])
AVX_ROWS(a_dot_b, uint16_t, v_dot_b, 1.0f)
AVX_ROWS(a_l2_b, uint16_t, v_l2_b, 1.0f)

GATHER(c_dot_f32, AVX, float, v_dot_f32(q, x, d, s))
GATHER(c_l2_f32, AVX, float, v_l2_f32(q, x, d, s))
GATHER(c_dot_f16, AVX, uint16_t, v_dot_f16(q, x, d, s))
GATHER(c_l2_f16, AVX, uint16_t, v_l2_f16(q, x, d, s))
GATHER(c_dot_i8, AVX, int8_t, v_dot_i8(q, x, d, s))
GATHER(c_l2_i8, AVX, int8_t, v_l2_i8(q, x, d, s))
GATHER(c_dot_s, AVX, uint16_t, v_dot_s(q, x, d, s))
GATHER(c_l2_s, AVX, uint16_t, v_l2_s(q, x, d, s))
GATHER(c_dot_b, AVX, uint16_t, v_dot_b(q, x, d, s))
GATHER(c_l2_b, AVX, uint16_t, v_l2_b(q, x, d, s))

/* {====== AVX-512 kernels (split rows only) ======} */

#define AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

AVX512 static inline __m512 load512_split(const uint16_t *x, size_t d) {
  __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)x));
  __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(x + d)));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_slli_epi32(hi, 16), lo));
}

AVX512 static inline __m512 load512_bf16(const uint16_t *x) {
  __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16));
}

/*
** Exact: the AVX2 kernel's sums in its order, so the scores are the same:
** lanes 0-7 of one accumulator are its a0 and lanes 8-15 its a1, 16
** components a step; then 8 into the low lanes, the tail, and hsum.
*/
#define AVX512_EXACT(name, LOAD, STEP, STEP8, FINISH, TAIL)                                \
  AVX512 static inline float name(const float *q, const uint16_t *x, size_t d, float s) {  \
    __m512 a = _mm512_setzero_ps();                                                        \
    __m256 lo8, hi8;                                                                       \
    float t = 0;                                                                           \
    size_t i = 0;                                                                          \
    (void)s;                                                                               \
    for (; i + 16 <= d; i += 16) {                                                         \
      __m512 xv = LOAD(x + i), qv = _mm512_loadu_ps(q + i);                                \
      STEP(a, qv, xv);                                                                     \
    }                                                                                      \
    lo8 = _mm512_castps512_ps256(a);                                                       \
    hi8 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));                \
    if (i + 8 <= d) {                                                                      \
      __m256 xv = load_split(x + i, d), qv = _mm256_loadu_ps(q + i);                       \
      STEP8(lo8, qv, xv);                                                                  \
      i += 8;                                                                              \
    }                                                                                      \
    for (; i < d; i++) TAIL;                                                               \
    return FINISH(hsum(_mm256_add_ps(lo8, hi8)) + t);                                      \
  }

/* Approximate: two accumulators over 32 components a step, then 16, then the tail. */
#define AVX512_APPROX(name, LOAD, STEP, FINISH, TAIL)                                      \
  AVX512 static inline float name(const float *q, const uint16_t *x, size_t d, float s) {  \
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();                             \
    float t = 0;                                                                           \
    size_t i = 0;                                                                          \
    (void)s;                                                                               \
    for (; i + 32 <= d; i += 32) {                                                         \
      __m512 x0 = LOAD(x + i), x1 = LOAD(x + i + 16);                                      \
      __m512 q0 = _mm512_loadu_ps(q + i), q1 = _mm512_loadu_ps(q + i + 16);                \
      STEP(a0, q0, x0);                                                                    \
      STEP(a1, q1, x1);                                                                    \
    }                                                                                      \
    if (i + 16 <= d) {                                                                     \
      __m512 x0 = LOAD(x + i), q0 = _mm512_loadu_ps(q + i);                                \
      STEP(a0, q0, x0);                                                                    \
      i += 16;                                                                             \
    }                                                                                      \
    for (; i < d; i++) TAIL;                                                               \
    return FINISH(_mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) + t);                        \
  }

#define LOAD512_S(p) load512_split(p, d)
#define DOT512_STEP(a, qv, xv) a = _mm512_fmadd_ps(qv, xv, a)
#define L2512_STEP(a, qv, xv)              \
  do {                                     \
    __m512 dd = _mm512_sub_ps(qv, xv);     \
    a = _mm512_fmadd_ps(dd, dd, a);        \
  } while (0)

AVX512_EXACT(w_dot_s, LOAD512_S, DOT512_STEP, DOT_STEP, SAME, t += q[i] * join(x[i], x[d + i]))
AVX512_EXACT(w_l2_s, LOAD512_S, L2512_STEP, L2_STEP, NEG,
             { float e = q[i] - join(x[i], x[d + i]); t += e * e; })
AVX512_APPROX(w_dot_b, load512_bf16, DOT512_STEP, SAME, t += q[i] * join(x[i], 0))
AVX512_APPROX(w_l2_b, load512_bf16, L2512_STEP, NEG, { float e = q[i] - join(x[i], 0); t += e * e; })

AVX512 static float z_dot_s1(const float *q, const void *row, size_t d, float s) {
  return w_dot_s(q, (const uint16_t *)row, d, s);
}

AVX512 static float z_l2_s1(const float *q, const void *row, size_t d, float s) {
  return w_l2_s(q, (const uint16_t *)row, d, s);
}

GATHER(y_dot_s, AVX512, uint16_t, w_dot_s(q, x, d, s))
GATHER(y_l2_s, AVX512, uint16_t, w_l2_s(q, x, d, s))
GATHER(y_dot_b, AVX512, uint16_t, w_dot_b(q, x, d, s))
GATHER(y_l2_b, AVX512, uint16_t, w_l2_b(q, x, d, s))

/* p_keep, four rows a step (AVX2). */
AVX static size_t a_keep(const float *a, const float *xn, size_t n, double p, double q,
                         double r, double tau, uint32_t *out) {
  __m256d vp = _mm256_set1_pd(p), vq = _mm256_set1_pd(q), vr = _mm256_set1_pd(r);
  __m256d vt = _mm256_set1_pd(tau);
  size_t i = 0, k = 0;
  for (; i + 4 <= n; i += 4) {
    __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(xn + i)), av = _mm256_cvtps_pd(_mm_loadu_ps(a + i));
    __m256d b = _mm256_add_pd(_mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(vp, x), vq), x), vr);
    unsigned mask = (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(_mm256_add_pd(av, b), vt, _CMP_NLT_UQ));
    for (; mask; mask &= mask - 1) out[k++] = (uint32_t)(i + (size_t)__builtin_ctz(mask));
  }
  n = p_keep(a + i, xn + i, n - i, p, q, r, tau, out + k);
  while (n--) out[k++] += (uint32_t)i;
  return k;
}

/* p_sketch, 64 rows a pass: eight accumulators of eight rows (AVX2), each
** named so that it stays in a register. */
AVX static void a_sketch(const float *w, const uint32_t *idx, size_t nnz, const int8_t *codes,
                         const float *scales, size_t n, size_t d, float *out) {
  size_t b, t, h, k, j, nb = (n + SKR - 1) / SKR;
  for (b = 0; b < nb; b++) {
    size_t m = block_rows(n, b);
    for (h = 0; h < SKR; h += 64) {
      const int8_t *blk = codes + b * d * SKR + h;
      float *o = out + b * SKR + h;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0;
      __m256 a7 = a0, a[8];
      for (t = 0; t < nnz; t++) {
        const int8_t *c = blk + (size_t)idx[t] * SKR;
        __m256 wv = _mm256_set1_ps(w[t]);
        if (t + SKETCH_AHEAD < nnz)
          _mm_prefetch((const char *)(blk + (size_t)idx[t + SKETCH_AHEAD] * SKR), _MM_HINT_T0);
        if (h == 0 && b + 1 < nb) { /* the next block's column, both halves: far enough
                                       ahead for a read from memory */
          const char *f = (const char *)(c + d * SKR);
          _mm_prefetch(f, _MM_HINT_T0);
          _mm_prefetch(f + 64, _MM_HINT_T0);
        }
        a0 = _mm256_fmadd_ps(wv, load_i8(c), a0);
        a1 = _mm256_fmadd_ps(wv, load_i8(c + 8), a1);
        a2 = _mm256_fmadd_ps(wv, load_i8(c + 16), a2);
        a3 = _mm256_fmadd_ps(wv, load_i8(c + 24), a3);
        a4 = _mm256_fmadd_ps(wv, load_i8(c + 32), a4);
        a5 = _mm256_fmadd_ps(wv, load_i8(c + 40), a5);
        a6 = _mm256_fmadd_ps(wv, load_i8(c + 48), a6);
        a7 = _mm256_fmadd_ps(wv, load_i8(c + 56), a7);
      }
      a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, a[4] = a4, a[5] = a5, a[6] = a6, a[7] = a7;
      for (k = 0; k < 8; k++) {
        if (h + 8 * k + 8 <= m) {
          a[k] = _mm256_mul_ps(a[k], _mm256_loadu_ps(scales + b * SKR + h + 8 * k));
          _mm256_storeu_ps(o + 8 * k, a[k]);
        } else {
          _mm256_storeu_ps(o + 8 * k, a[k]);
          for (j = h + 8 * k; j < m && j < h + 8 * k + 8; j++) o[j - h] *= scales[b * SKR + j];
        }
      }
    }
  }
}

/* p_keep, eight rows a step (AVX-512F). */
AVX512 static size_t x_keep(const float *a, const float *xn, size_t n, double p, double q,
                            double r, double tau, uint32_t *out) {
  __m512d vp = _mm512_set1_pd(p), vq = _mm512_set1_pd(q), vr = _mm512_set1_pd(r);
  __m512d vt = _mm512_set1_pd(tau);
  size_t i = 0, k = 0;
  __m512i at = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 16 <= n; i += 16, at = _mm512_add_epi32(at, _mm512_set1_epi32(16))) {
    __m512d x0 = _mm512_cvtps_pd(_mm256_loadu_ps(xn + i));
    __m512d x1 = _mm512_cvtps_pd(_mm256_loadu_ps(xn + i + 8));
    __m512d a0 = _mm512_cvtps_pd(_mm256_loadu_ps(a + i));
    __m512d a1 = _mm512_cvtps_pd(_mm256_loadu_ps(a + i + 8));
    __m512d b0 = _mm512_add_pd(_mm512_mul_pd(_mm512_add_pd(_mm512_mul_pd(vp, x0), vq), x0), vr);
    __m512d b1 = _mm512_add_pd(_mm512_mul_pd(_mm512_add_pd(_mm512_mul_pd(vp, x1), vq), x1), vr);
    __mmask16 m = (__mmask16)(_mm512_cmp_pd_mask(_mm512_add_pd(a0, b0), vt, _CMP_NLT_UQ) |
                              _mm512_cmp_pd_mask(_mm512_add_pd(a1, b1), vt, _CMP_NLT_UQ) << 8);
    /* the kept rows' numbers, packed, without a branch a row: a kept row is a coin toss */
    _mm512_mask_compressstoreu_epi32(out + k, m, at);
    k += (size_t)__builtin_popcount(m);
  }
  n = p_keep(a + i, xn + i, n - i, p, q, r, tau, out + k);
  while (n--) out[k++] += (uint32_t)i;
  return k;
}

#define AVX512_ROWS(name, kern)                                                          \
  AVX512 static void name(const float *q, const void *rows, const float *scales, size_t n, \
                          size_t d, size_t rb, float *out) {                               \
    const unsigned char *r = (const unsigned char *)rows;                                  \
    size_t i;                                                                              \
    (void)scales;                                                                          \
    for (i = 0; i < n; i++, r += rb)                                                       \
      out[i] = kern(q, (const uint16_t *)(const void *)r, d, 1);                           \
  }

AVX512_ROWS(x_dot_b, w_dot_b)
AVX512_ROWS(x_l2_b, w_l2_b)

/* The 16 codes at x as floats. */
AVX512 static inline __m512 load512_i8(const int8_t *x) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)x)));
}

/* p_sketch, a block a pass: eight accumulators of sixteen rows (AVX-512F),
** each named so that it stays in a register. */
AVX512 static void x_sketch(const float *w, const uint32_t *idx, size_t nnz, const int8_t *codes,
                            const float *scales, size_t n, size_t d, float *out) {
  size_t b, t, k, nb = (n + SKR - 1) / SKR;
  for (b = 0; b < nb; b++, out += SKR) {
    const int8_t *blk = codes + b * d * SKR;
    size_t m = block_rows(n, b);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0;
    __m512 a7 = a0, a[8];
    for (t = 0; t < nnz; t++) {
      const int8_t *c = blk + (size_t)idx[t] * SKR;
      __m512 wv = _mm512_set1_ps(w[t]);
      if (t + SKETCH_AHEAD < nnz) { /* the columns are far apart: no streamer follows them */
        const char *f = (const char *)(blk + (size_t)idx[t + SKETCH_AHEAD] * SKR);
        _mm_prefetch(f, _MM_HINT_T0);
        _mm_prefetch(f + 64, _MM_HINT_T0);
      }
      a0 = _mm512_fmadd_ps(wv, load512_i8(c), a0);
      a1 = _mm512_fmadd_ps(wv, load512_i8(c + 16), a1);
      a2 = _mm512_fmadd_ps(wv, load512_i8(c + 32), a2);
      a3 = _mm512_fmadd_ps(wv, load512_i8(c + 48), a3);
      a4 = _mm512_fmadd_ps(wv, load512_i8(c + 64), a4);
      a5 = _mm512_fmadd_ps(wv, load512_i8(c + 80), a5);
      a6 = _mm512_fmadd_ps(wv, load512_i8(c + 96), a6);
      a7 = _mm512_fmadd_ps(wv, load512_i8(c + 112), a7);
    }
    a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, a[4] = a4, a[5] = a5, a[6] = a6, a[7] = a7;
    for (k = 0; k < 8; k++) { /* times each row's scale; rows past n get 0 */
      __mmask16 live = 16 * k + 16 <= m ? (__mmask16)0xffff
                       : 16 * k >= m     ? (__mmask16)0
                                         : (__mmask16)((1u << (m - 16 * k)) - 1);
      __m512 s = _mm512_maskz_loadu_ps(live, scales + b * SKR + 16 * k);
      _mm512_storeu_ps(out + 16 * k, _mm512_mul_ps(a[k], s));
    }
  }
}

#define VNNI8 __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")))
#define SKETCH8_AHEAD 8 /* groups of 4 components a pass asks for before it reads them */

/* The four bytes at p in every dword. */
VNNI8 static inline __m512i every_dword(const uint8_t *p) {
  uint32_t a;
  memcpy(&a, p, 4);
  return _mm512_set1_epi32((int)a);
}

/* The 64 codes at p, each plus 128 (flip: every top bit set): unsigned bytes. */
VNNI8 static inline __m512i unsigned_codes(const int8_t *p, __m512i flip) {
  return _mm512_xor_si512(_mm512_loadu_si512((const void *)p), flip);
}

/* (h - ch) * 128 + (l - cl), dword by dword (wrapping). */
VNNI8 static inline __m512i high_low(__m512i h, __m512i l, __m512i ch, __m512i cl) {
  return _mm512_add_epi32(_mm512_slli_epi32(_mm512_sub_epi32(h, ch), 7), _mm512_sub_epi32(l, cl));
}

/*
** rag_kernel_sketch8_fn: for each block, each half of 64 rows, each group
** of four components: the four columns' codes, each plus 128 (a flipped
** top bit: an unsigned byte), interleaved into one code per byte of a
** row's dword (unpacks within 128-bit lanes: dword j of lane L of u_k is
** row 16 L + 4 k + j), then VPDPBUSD of those with the weights' high and
** low parts (signed bytes); at the end each sum less 128 times its weights'
** sum (what the added 128 gave), then high * 128 + low, and a transpose of
** 128-bit lanes puts rows 16 L .. 16 L + 15 in order. The sums stay below
** 2^31 until that last step, whose exact result fits too (int32 wraps
** alike in both).
*/
VNNI8 static void x_sketch8(const uint8_t *w, size_t ws, const uint32_t *idx, size_t ng,
                            const int8_t *codes, const float *scales, float qs, size_t n,
                            size_t d, float *out) {
  size_t b, g, h, t, nb = (n + SKR - 1) / SKR;
  const uint8_t *qh = w, *ql = w + ws;
  int32_t sh = 0, sl = 0;
  __m512 vq = _mm512_set1_ps(qs);
  __m512i zero = _mm512_setzero_si512(), flip = _mm512_set1_epi8((char)0x80), ch, cl;
  for (t = 0; t < 4 * ng; t++) {
    sh += (int8_t)qh[t];
    sl += ql[t];
  }
  ch = _mm512_set1_epi32(128 * sh);
  cl = _mm512_set1_epi32(128 * sl);
  for (b = 0; b < nb; b++, out += SKR) {
    const int8_t *blk = codes + b * d * SKR;
    size_t m = block_rows(n, b);
    for (h = 0; h < SKR / 64; h++) {
      __m512i h0 = zero, h1 = zero, h2 = zero, h3 = zero, l0 = zero, l1 = zero, l2 = zero;
      __m512i l3 = zero, r[4], x, y;
      size_t L;
      for (g = 0; g < ng; g++) {
        const uint32_t *c = idx + 4 * g;
        const int8_t *base = blk + 64 * h;
        __m512i x0 = unsigned_codes(base + (size_t)c[0] * SKR, flip);
        __m512i x1 = unsigned_codes(base + (size_t)c[1] * SKR, flip);
        __m512i x2 = unsigned_codes(base + (size_t)c[2] * SKR, flip);
        __m512i x3 = unsigned_codes(base + (size_t)c[3] * SKR, flip);
        __m512i t0, t1, t2, t3, u0, u1, u2, u3, H, Lo;
        t0 = _mm512_unpacklo_epi8(x0, x1);
        t1 = _mm512_unpackhi_epi8(x0, x1);
        t2 = _mm512_unpacklo_epi8(x2, x3);
        t3 = _mm512_unpackhi_epi8(x2, x3);
        u0 = _mm512_unpacklo_epi16(t0, t2);
        u1 = _mm512_unpackhi_epi16(t0, t2);
        u2 = _mm512_unpacklo_epi16(t1, t3);
        u3 = _mm512_unpackhi_epi16(t1, t3);
        if (h == 0 && g + SKETCH8_AHEAD < ng) { /* the columns are far apart: no streamer
                                                   follows them; both halves at once */
          size_t k;
          for (k = 4 * SKETCH8_AHEAD; k < 4 * SKETCH8_AHEAD + 4; k++) {
            _mm_prefetch((const char *)(blk + (size_t)c[k] * SKR), _MM_HINT_T0);
            _mm_prefetch((const char *)(blk + (size_t)c[k] * SKR + 64), _MM_HINT_T0);
          }
        }
        H = every_dword(qh + 4 * g);
        Lo = every_dword(ql + 4 * g);
        h0 = _mm512_dpbusd_epi32(h0, u0, H);
        h1 = _mm512_dpbusd_epi32(h1, u1, H);
        h2 = _mm512_dpbusd_epi32(h2, u2, H);
        h3 = _mm512_dpbusd_epi32(h3, u3, H);
        l0 = _mm512_dpbusd_epi32(l0, u0, Lo);
        l1 = _mm512_dpbusd_epi32(l1, u1, Lo);
        l2 = _mm512_dpbusd_epi32(l2, u2, Lo);
        l3 = _mm512_dpbusd_epi32(l3, u3, Lo);
      }
      h0 = high_low(h0, l0, ch, cl);
      h1 = high_low(h1, l1, ch, cl);
      h2 = high_low(h2, l2, ch, cl);
      h3 = high_low(h3, l3, ch, cl);
      x = _mm512_shuffle_i32x4(h0, h1, 0x44); /* lanes 0 1 of h0, then of h1 */
      y = _mm512_shuffle_i32x4(h2, h3, 0x44);
      r[0] = _mm512_shuffle_i32x4(x, y, 0x88);
      r[1] = _mm512_shuffle_i32x4(x, y, 0xDD);
      x = _mm512_shuffle_i32x4(h0, h1, 0xEE); /* lanes 2 3 */
      y = _mm512_shuffle_i32x4(h2, h3, 0xEE);
      r[2] = _mm512_shuffle_i32x4(x, y, 0x88);
      r[3] = _mm512_shuffle_i32x4(x, y, 0xDD);
      for (L = 0; L < 4; L++) { /* rows 64 h + 16 L ..; past n, scale 0 */
        size_t at = 64 * h + 16 * L;
        __mmask16 live = at + 16 <= m ? (__mmask16)0xffff
                         : at >= m    ? (__mmask16)0
                                      : (__mmask16)((1u << (m - at)) - 1);
        __m512 sc = _mm512_mul_ps(vq, _mm512_maskz_loadu_ps(live, scales + b * SKR + at));
        _mm512_storeu_ps(out + at, _mm512_mul_ps(_mm512_cvtepi32_ps(r[L]), sc));
      }
    }
  }
}

/* AVX2, FMA and F16C, with the OS saving the YMM registers (CPUID, XGETBV). */
static int cpu_has_avx2(void) {
  unsigned a, b, c, d, lo, hi;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (!(c & bit_OSXSAVE) || !(c & bit_AVX) || !(c & bit_FMA) || !(c & bit_F16C)) return 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6u) != 6u) return 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  return (b & bit_AVX2) != 0;
}

/* AVX-512F, with the OS saving the opmask and ZMM registers. */
static int cpu_has_avx512(void) {
  unsigned a, b, c, d, lo, hi;
  if (!cpu_has_avx2() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & bit_AVX512F)) return 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xe6u) == 0xe6u;
}

/* AVX512-BW (CPUID leaf 7, EBX bit 30), on an AVX-512F CPU. */
static int cpu_has_bw(void) {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 30));
}

/* {====== AVX512-BF16 kernel (split rows, dot) ======} */

#ifdef RAG_BF16

#define BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma,f16c")))

#define LD(p) _mm512_loadu_si512((const void *)(p))
#define DP(a, xv, qv) a = _mm512_dpbf16_ps(a, (__m512bh)(xv), (__m512bh)(qv))

/* One VDPBF16PS for 32 components: two accumulators over 64 a step, then 32, then a masked tail. */
BF16 static float v_dot_bf(const uint16_t *qh, const uint16_t *x, size_t d) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= d; i += 64) {
    DP(a0, LD(x + i), LD(qh + i));
    DP(a1, LD(x + i + 32), LD(qh + i + 32));
  }
  if (i + 32 <= d) {
    DP(a0, LD(x + i), LD(qh + i));
    i += 32;
  }
  if (i < d) {
    __mmask32 m = (__mmask32)((1u << (d - i)) - 1u);
    DP(a1, _mm512_maskz_loadu_epi16(m, x + i), _mm512_maskz_loadu_epi16(m, qh + i));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* Four rows at once, so each load of qh serves four rows (loads bound the one-row loop). */
BF16 static void v_dot_bf4(const uint16_t *qh, const unsigned char *r, size_t d, size_t rb,
                           float *out) {
  const uint16_t *x0 = (const uint16_t *)(const void *)r;
  const uint16_t *x1 = (const uint16_t *)(const void *)(r + rb);
  const uint16_t *x2 = (const uint16_t *)(const void *)(r + 2 * rb);
  const uint16_t *x3 = (const uint16_t *)(const void *)(r + 3 * rb);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= d; i += 32) {
    __m512i h = LD(qh + i);
    DP(a0, LD(x0 + i), h);
    DP(a1, LD(x1 + i), h);
    DP(a2, LD(x2 + i), h);
    DP(a3, LD(x3 + i), h);
  }
  if (i < d) {
    __mmask32 m = (__mmask32)((1u << (d - i)) - 1u);
    __m512i h = _mm512_maskz_loadu_epi16(m, qh + i);
    DP(a0, _mm512_maskz_loadu_epi16(m, x0 + i), h);
    DP(a1, _mm512_maskz_loadu_epi16(m, x1 + i), h);
    DP(a2, _mm512_maskz_loadu_epi16(m, x2 + i), h);
    DP(a3, _mm512_maskz_loadu_epi16(m, x3 + i), h);
  }
  out[0] = _mm512_reduce_add_ps(a0);
  out[1] = _mm512_reduce_add_ps(a1);
  out[2] = _mm512_reduce_add_ps(a2);
  out[3] = _mm512_reduce_add_ps(a3);
}

BF16 static void x_dot_bf(const uint16_t *qh, const void *rows, size_t n, size_t d, size_t rb,
                          float *out) {
  const unsigned char *r = (const unsigned char *)rows;
  size_t i = 0;
  for (; i + 4 <= n; i += 4, r += 4 * rb) v_dot_bf4(qh, r, d, rb, out + i);
  for (; i < n; i++, r += rb) out[i] = v_dot_bf(qh, (const uint16_t *)(const void *)r, d);
}

/* rag_kernel.approx_bf: approx's gather, q the query in bfloat16 (rag_kernel_bf16_query). */
BF16 static void y_dot_bfg(const float *q, const void *rows, const float *scales,
                           const uint32_t *idx, size_t m, size_t d, size_t rb, float *out) {
  const uint16_t *qh = (const uint16_t *)(const void *)q;
  const unsigned char *base = (const unsigned char *)rows;
  size_t j;
  (void)scales;
  for (j = 0; j < m; j++)
    out[j] = v_dot_bf(qh, (const uint16_t *)(const void *)(base + (size_t)idx[j] * rb), d);
}

/* AVX512-BF16 and AVX512BW besides AVX-512F (CPUID leaf 7: subleaf 1 EAX bit 5; EBX bit 30). */
static int cpu_has_bf16(void) {
  unsigned a, b, c, d;
  if (!cpu_has_avx512() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 30)))
    return 0;
  if (a < 1 || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
  return (a & (1u << 5)) != 0;
}
#endif
#endif

/* {====== Choice, preparation, encoding ======} */

int rag_kernel_cpu(void) {
#ifdef RAG_X86
  unsigned a, b, c, d;
  if (cpu_has_avx512())
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 11)) ? 3 : 2; /* VNNI */
  return cpu_has_avx2() ? 1 : 0;
#else
  return 0;
#endif
}

void rag_kernel_init(rag_kernel *k, rag_dtype dtype, rag_metric metric, size_t dim,
                     int portable) {
  static const rag_kernel_score_fn plain[RAG_NDTYPES][2] = {
      {p_dot_f32, p_l2_f32}, {p_dot_f16, p_l2_f16}, {p_dot_i8, p_l2_i8}};
  static const size_t width[RAG_NDTYPES] = {4, 2, 1};
  int l2 = metric == RAG_L2;
  k->dtype = dtype;
  k->metric = metric;
  k->dim = dim;
  k->rowbytes = dim * width[dtype];
  static const rag_kernel_score1_fn plain1[RAG_NDTYPES][2] = {
      {o_dot_f32, o_l2_f32}, {o_dot_f16, o_l2_f16}, {o_dot_i8, o_l2_i8}};
  static const rag_kernel_gather_fn plaing[RAG_NDTYPES][2] = {
      {g_dot_f32, g_l2_f32}, {g_dot_f16, g_l2_f16}, {g_dot_i8, g_l2_i8}};
  k->score = plain[dtype][l2];
  k->one = plain1[dtype][l2];
  k->gather = k->approx = plaing[dtype][l2];
  k->approx_rows = NULL;
  k->keep = NULL;
  k->bf16_rows = NULL;
  k->approx_bf = NULL;
  k->sketch = NULL;
  k->sketch8 = NULL;
  k->simd = 0;
  k->split = 0;
#ifdef RAG_X86
  k->avx2 = portable == 2;
  if (portable != 1 && cpu_has_avx2()) {
    static const rag_kernel_score_fn fast[RAG_NDTYPES][2] = {
        {a_dot_f32, a_l2_f32}, {a_dot_f16, a_l2_f16}, {a_dot_i8, a_l2_i8}};
    static const rag_kernel_score1_fn fast1[RAG_NDTYPES][2] = {
        {b_dot_f32, b_l2_f32}, {b_dot_f16, b_l2_f16}, {b_dot_i8, b_l2_i8}};
    static const rag_kernel_gather_fn fastg[RAG_NDTYPES][2] = {
        {c_dot_f32, c_l2_f32}, {c_dot_f16, c_l2_f16}, {c_dot_i8, c_l2_i8}};
    k->score = fast[dtype][l2];
    k->one = fast1[dtype][l2];
    k->gather = k->approx = fastg[dtype][l2];
    k->simd = 1;
  }
#else
  (void)portable;
#endif
}

void rag_kernel_split(rag_kernel *k) {
  int l2 = k->metric == RAG_L2;
  if (k->dtype != RAG_F32) return;
  k->split = 1;
  k->score = NULL; /* rag_hnsw scores rows by number (gather), never in runs */
  k->one = l2 ? o_l2_s : o_dot_s;
  k->gather = l2 ? g_l2_s : g_dot_s;
  k->approx = l2 ? g_l2_b : g_dot_b;
  k->approx_rows = l2 ? p_l2_b : p_dot_b;
  k->keep = p_keep;
  k->sketch = l2 ? NULL : p_sketch;
#ifdef RAG_X86
  if (k->simd && !k->avx2 && cpu_has_avx512()) {
    k->keep = x_keep;
    k->sketch = l2 ? NULL : x_sketch;
    k->sketch8 = l2 || rag_kernel_cpu() != 3 || !cpu_has_bw() ? NULL : x_sketch8;
    k->one = l2 ? z_l2_s1 : z_dot_s1;
    k->gather = l2 ? y_l2_s : y_dot_s;
    k->approx = l2 ? y_l2_b : y_dot_b;
    k->approx_rows = l2 ? x_l2_b : x_dot_b;
    k->simd = 2;
#ifdef RAG_BF16
    if (!l2 && cpu_has_bf16()) {
      k->bf16_rows = x_dot_bf;
      k->approx_bf = y_dot_bfg;
    }
#endif
  } else if (k->simd) {
    k->keep = a_keep;
    k->sketch = l2 ? NULL : a_sketch;
    k->one = l2 ? b_l2_s : b_dot_s;
    k->gather = l2 ? c_l2_s : c_dot_s;
    k->approx = l2 ? c_l2_b : c_dot_b;
    k->approx_rows = l2 ? a_l2_b : a_dot_b;
  }
#endif
}

int rag_kernel_prepare(const rag_kernel *k, const float *v, float *out, size_t *bad,
                       const char **why) {
  double ss = 0;
  size_t i;
  for (i = 0; i < k->dim; i++) {
    float x = v[i];
    if (x != x || fabsf(x) > (float)MAX_COMPONENT) {
      *bad = i;
      *why = x != x ? "nan" : isinf(x) ? "inf" : "range";
      return RAG_EINVAL;
    }
    ss += (double)x * x;
  }
  if (k->metric == RAG_COSINE) {
    double inv;
    if (ss == 0) {
      *bad = k->dim;
      *why = "zero";
      return RAG_EINVAL;
    }
    inv = 1.0 / sqrt(ss);
    for (i = 0; i < k->dim; i++) out[i] = (float)(v[i] * inv);
  } else if (out != v) {
    memcpy(out, v, k->dim * sizeof *out);
  }
  if (k->dtype == RAG_F16)
    for (i = 0; i < k->dim; i++)
      if (fabsf(out[i]) > 65504.0f && (rag_kernel_f16_from_f32(out[i]) & 0x7fffu) == 0x7c00u) {
        *bad = i;
        *why = "range";
        return RAG_EINVAL;
      }
  return RAG_OK;
}

void rag_kernel_encode(const rag_kernel *k, const float *v, void *row, float *scale) {
  size_t i, d = k->dim;
  *scale = 1.0f;
  if (k->split) {
    rag_kernel_f32_split(v, d, (uint16_t *)row, (uint16_t *)row + d);
  } else if (k->dtype == RAG_F32) {
    memcpy(row, v, d * sizeof *v);
  } else if (k->dtype == RAG_F16) {
    uint16_t *h = (uint16_t *)row;
    for (i = 0; i < d; i++) h[i] = rag_kernel_f16_from_f32(v[i]);
  } else {
    int8_t *c = (int8_t *)row;
    float m = 0;
    for (i = 0; i < d; i++)
      if (fabsf(v[i]) > m) m = fabsf(v[i]);
    if (m / 127.0f > 0) *scale = m / 127.0f; /* else zeros (m underflows when scaled) */
    for (i = 0; i < d; i++) {
      long x = lrintf(v[i] / *scale);
      c[i] = (int8_t)(x > 127 ? 127 : x < -127 ? -127 : x);
    }
  }
}

void rag_kernel_decode(const rag_kernel *k, const void *row, float scale, float *out) {
  size_t i, d = k->dim;
  if (k->split) {
    rag_kernel_f32_join((const uint16_t *)row, (const uint16_t *)row + d, d, out);
  } else if (k->dtype == RAG_F32) {
    memcpy(out, row, d * sizeof *out);
  } else if (k->dtype == RAG_F16) {
    const uint16_t *h = (const uint16_t *)row;
    for (i = 0; i < d; i++) out[i] = rag_kernel_f32_from_f16(h[i]);
  } else {
    const int8_t *c = (const int8_t *)row;
    for (i = 0; i < d; i++) out[i] = scale * (float)c[i];
  }
}

void rag_kernel_f32_split(const float *x, size_t n, uint16_t *hi, uint16_t *lo) {
  size_t i;
  for (i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    hi[i] = (uint16_t)(u >> 16);
    lo[i] = (uint16_t)u;
  }
}

void rag_kernel_bf16_query(const float *q, size_t n, uint16_t *qh) {
  size_t i;
  for (i = 0; i < n; i++) {
    uint32_t u, h;
    memcpy(&u, &q[i], sizeof u);
    h = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* to nearest, ties to even; |q| <= 1e15: finite */
    qh[i] = (uint16_t)((h & 0x7f80u) ? h : 0); /* a zero exponent: zero or subnormal */
  }
}

/* Interleaving the planes' 16-bit words is the join: SSE2 (baseline x86-64) does 8 a step. */
void rag_kernel_f32_join(const uint16_t *hi, const uint16_t *lo, size_t n, float *out) {
  size_t i = 0;
#ifdef RAG_X86
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(hi + i));
    __m128i l = _mm_loadu_si128((const __m128i *)(const void *)(lo + i));
    _mm_storeu_si128((__m128i *)(void *)(out + i), _mm_unpacklo_epi16(l, h));
    _mm_storeu_si128((__m128i *)(void *)(out + i + 4), _mm_unpackhi_epi16(l, h));
  }
#endif
  for (; i < n; i++) out[i] = join(hi[i], lo[i]);
}

int rag_kernel_rows_ok(const rag_kernel *k, const void *rows, const float *scales, size_t n) {
  size_t i, m = n * k->dim;
  if (k->split) {
    const uint16_t *x = (const uint16_t *)rows;
    size_t r, d = k->dim;
    for (r = 0; r < n; r++, x += 2 * d)
      for (i = 0; i < d; i++)
        if (!(fabsf(join(x[i], x[d + i])) <= (float)MAX_COMPONENT)) return 0;
  } else if (k->dtype == RAG_F32) {
    const float *f = (const float *)rows;
    for (i = 0; i < m; i++)
      if (!(fabsf(f[i]) <= (float)MAX_COMPONENT)) return 0;
  } else if (k->dtype == RAG_F16) {
    const uint16_t *h = (const uint16_t *)rows;
    for (i = 0; i < m; i++)
      if ((h[i] & 0x7c00u) == 0x7c00u) return 0;
  } else {
    for (i = 0; i < n; i++)
      if (!(scales[i] > 0 && scales[i] <= (float)MAX_COMPONENT)) return 0;
  }
  return 1;
}
