/*
** rag_matmul.c: y = w x + b over feature-major activations (rag_matmul.h).
** Each kernel computes a block of MR output rows by one group of columns
** (16 or 32 tokens) over the whole of k: every step broadcasts MR weights,
** one from each row (each row read in order), and multiplies a vector of
** the activations' row, so the block's sums stay in registers.
*/
#include "rag_matmul.h"

#include <math.h>
#include <string.h>

#include "rag_kernel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RAG_X86 1
#include <immintrin.h>
#endif

#define MR 6   /* output rows per block */
#define KC 256 /* rows of x per panel: 32 columns of them fill 32 kB */

/* {====== Portable ======} */

static void p_matmul(size_t n, size_t k, size_t cols, const float *w, size_t ldw,
                     const float *x, size_t ldx, const float *b, float *y, size_t ldy) {
  size_t i, j, t;
  for (i = 0; i < n; i++) {
    float *yi = y + i * ldy;
    const float *wi = w + i * ldw;
    float bias = b != NULL ? b[i] : 0.0f;
    for (t = 0; t < cols; t++) yi[t] = 0.0f;
    for (j = 0; j < k; j++) {
      const float wij = wi[j], *xj = x + j * ldx;
      for (t = 0; t < cols; t++) yi[t] += wij * xj[t];
    }
    for (t = 0; t < cols; t++) yi[t] += bias;
  }
}

static void p_exp(float *x, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) x[i] = expf(x[i]);
}

static void p_gelu(float *x, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

#ifdef RAG_X86

/* {====== AVX2 and FMA: 6 rows x 16 columns ======} */

#define AVX __attribute__((target("avx2,fma")))

/* Rows i..i+r (r <= MR) by columns t..t+16. */
AVX static void a_block(const float *w, size_t ldw, size_t r, size_t k, const float *x,
                        size_t ld, const float *b, float *y, size_t ldy, int more) {
  __m256 acc[MR][2];
  size_t i, j;
  for (i = 0; i < r; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (j = 0; j < k; j++) {
    __m256 x0 = _mm256_loadu_ps(x + j * ld), x1 = _mm256_loadu_ps(x + j * ld + 8);
    for (i = 0; i < r; i++) {
      __m256 wv = _mm256_broadcast_ss(w + i * ldw + j);
      acc[i][0] = _mm256_fmadd_ps(wv, x0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(wv, x1, acc[i][1]);
    }
  }
  for (i = 0; i < r; i++) {
    __m256 lo = more ? _mm256_loadu_ps(y + i * ldy) : _mm256_set1_ps(b != NULL ? b[i] : 0.0f);
    __m256 hi = more ? _mm256_loadu_ps(y + i * ldy + 8) : lo;
    _mm256_storeu_ps(y + i * ldy, _mm256_add_ps(acc[i][0], lo));
    _mm256_storeu_ps(y + i * ldy + 8, _mm256_add_ps(acc[i][1], hi));
  }
}

/* The full block, its loop unrolled so that the 12 sums stay in registers. */
AVX static void a_block6(const float *w, size_t ldw, size_t k, const float *x, size_t ld,
                         const float *b, float *y, size_t ldy, int more) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
  __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw, *w4 = w + 4 * ldw,
              *w5 = w + 5 * ldw;
  size_t j;
  for (j = 0; j < k; j++) {
    __m256 x0 = _mm256_loadu_ps(x + j * ld), x1 = _mm256_loadu_ps(x + j * ld + 8), v;
    v = _mm256_broadcast_ss(w0 + j);
    a00 = _mm256_fmadd_ps(v, x0, a00);
    a01 = _mm256_fmadd_ps(v, x1, a01);
    v = _mm256_broadcast_ss(w1 + j);
    a10 = _mm256_fmadd_ps(v, x0, a10);
    a11 = _mm256_fmadd_ps(v, x1, a11);
    v = _mm256_broadcast_ss(w2 + j);
    a20 = _mm256_fmadd_ps(v, x0, a20);
    a21 = _mm256_fmadd_ps(v, x1, a21);
    v = _mm256_broadcast_ss(w3 + j);
    a30 = _mm256_fmadd_ps(v, x0, a30);
    a31 = _mm256_fmadd_ps(v, x1, a31);
    v = _mm256_broadcast_ss(w4 + j);
    a40 = _mm256_fmadd_ps(v, x0, a40);
    a41 = _mm256_fmadd_ps(v, x1, a41);
    v = _mm256_broadcast_ss(w5 + j);
    a50 = _mm256_fmadd_ps(v, x0, a50);
    a51 = _mm256_fmadd_ps(v, x1, a51);
  }
#define PUT(row, lo, hi)                                                                 \
  do {                                                                                   \
    __m256 bl = more ? _mm256_loadu_ps(y + (row) * ldy)                                  \
                     : _mm256_set1_ps(b != NULL ? b[row] : 0.0f);                        \
    __m256 bh = more ? _mm256_loadu_ps(y + (row) * ldy + 8) : bl;                        \
    _mm256_storeu_ps(y + (row) * ldy, _mm256_add_ps(lo, bl));                            \
    _mm256_storeu_ps(y + (row) * ldy + 8, _mm256_add_ps(hi, bh));                        \
  } while (0)
  PUT(0, a00, a01);
  PUT(1, a10, a11);
  PUT(2, a20, a21);
  PUT(3, a30, a31);
  PUT(4, a40, a41);
  PUT(5, a50, a51);
#undef PUT
}

/* Columns t..t+16 of kc rows of x, copied together (a panel in L1). */
AVX static void a_pack(const float *x, size_t ldx, size_t kc, float *panel) {
  size_t j;
  for (j = 0; j < kc; j++) {
    _mm256_storeu_ps(panel + j * 16, _mm256_loadu_ps(x + j * ldx));
    _mm256_storeu_ps(panel + j * 16 + 8, _mm256_loadu_ps(x + j * ldx + 8));
  }
}

AVX static void a_matmul(size_t n, size_t k, size_t cols, const float *w, size_t ldw,
                         const float *x, size_t ldx, const float *b, float *y, size_t ldy) {
  float panel[KC * 16];
  size_t t, i, k0;
  for (t = 0; t < cols; t += 16)
    for (k0 = 0; k0 < k; k0 += KC) {
      size_t kc = k - k0 < KC ? k - k0 : KC;
      a_pack(x + k0 * ldx + t, ldx, kc, panel);
      for (i = 0; i < n; i += MR) {
        size_t r = n - i < MR ? n - i : MR;
        const float *bi = b != NULL ? b + i : NULL;
        if (r == MR) a_block6(w + i * ldw + k0, ldw, kc, panel, 16, bi, y + i * ldy + t, ldy, k0 > 0);
        else a_block(w + i * ldw + k0, ldw, r, kc, panel, 16, bi, y + i * ldy + t, ldy, k0 > 0);
      }
    }
}

/* {====== AVX-512F: 6 rows x 32 columns ======} */

#define AVX512 __attribute__((target("avx512f,avx2,fma")))

AVX512 static void x_block(const float *w, size_t ldw, size_t r, size_t k, const float *x,
                           size_t ld, const float *b, float *y, size_t ldy, int more) {
  __m512 acc[MR][2];
  size_t i, j;
  for (i = 0; i < r; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (j = 0; j < k; j++) {
    __m512 x0 = _mm512_loadu_ps(x + j * ld), x1 = _mm512_loadu_ps(x + j * ld + 16);
    for (i = 0; i < r; i++) {
      __m512 wv = _mm512_set1_ps(w[i * ldw + j]);
      acc[i][0] = _mm512_fmadd_ps(wv, x0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(wv, x1, acc[i][1]);
    }
  }
  for (i = 0; i < r; i++) {
    __m512 lo = more ? _mm512_loadu_ps(y + i * ldy) : _mm512_set1_ps(b != NULL ? b[i] : 0.0f);
    __m512 hi = more ? _mm512_loadu_ps(y + i * ldy + 16) : lo;
    _mm512_storeu_ps(y + i * ldy, _mm512_add_ps(acc[i][0], lo));
    _mm512_storeu_ps(y + i * ldy + 16, _mm512_add_ps(acc[i][1], hi));
  }
}

AVX512 static void x_block6(const float *w, size_t ldw, size_t k, const float *x, size_t ld,
                            const float *b, float *y, size_t ldy, int more) {
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
  __m512 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw, *w4 = w + 4 * ldw,
              *w5 = w + 5 * ldw;
  size_t j;
  for (j = 0; j < k; j++) {
    __m512 x0 = _mm512_loadu_ps(x + j * ld), x1 = _mm512_loadu_ps(x + j * ld + 16), v;
    v = _mm512_set1_ps(w0[j]);
    a00 = _mm512_fmadd_ps(v, x0, a00);
    a01 = _mm512_fmadd_ps(v, x1, a01);
    v = _mm512_set1_ps(w1[j]);
    a10 = _mm512_fmadd_ps(v, x0, a10);
    a11 = _mm512_fmadd_ps(v, x1, a11);
    v = _mm512_set1_ps(w2[j]);
    a20 = _mm512_fmadd_ps(v, x0, a20);
    a21 = _mm512_fmadd_ps(v, x1, a21);
    v = _mm512_set1_ps(w3[j]);
    a30 = _mm512_fmadd_ps(v, x0, a30);
    a31 = _mm512_fmadd_ps(v, x1, a31);
    v = _mm512_set1_ps(w4[j]);
    a40 = _mm512_fmadd_ps(v, x0, a40);
    a41 = _mm512_fmadd_ps(v, x1, a41);
    v = _mm512_set1_ps(w5[j]);
    a50 = _mm512_fmadd_ps(v, x0, a50);
    a51 = _mm512_fmadd_ps(v, x1, a51);
  }
#define PUT(row, lo, hi)                                                                 \
  do {                                                                                   \
    __m512 bl = more ? _mm512_loadu_ps(y + (row) * ldy)                                  \
                     : _mm512_set1_ps(b != NULL ? b[row] : 0.0f);                        \
    __m512 bh = more ? _mm512_loadu_ps(y + (row) * ldy + 16) : bl;                       \
    _mm512_storeu_ps(y + (row) * ldy, _mm512_add_ps(lo, bl));                            \
    _mm512_storeu_ps(y + (row) * ldy + 16, _mm512_add_ps(hi, bh));                       \
  } while (0)
  PUT(0, a00, a01);
  PUT(1, a10, a11);
  PUT(2, a20, a21);
  PUT(3, a30, a31);
  PUT(4, a40, a41);
  PUT(5, a50, a51);
#undef PUT
}

AVX512 static void x_pack(const float *x, size_t ldx, size_t kc, float *panel) {
  size_t j;
  for (j = 0; j < kc; j++) {
    _mm512_storeu_ps(panel + j * 32, _mm512_loadu_ps(x + j * ldx));
    _mm512_storeu_ps(panel + j * 32 + 16, _mm512_loadu_ps(x + j * ldx + 16));
  }
}

AVX512 static void x_matmul(size_t n, size_t k, size_t cols, const float *w, size_t ldw,
                            const float *x, size_t ldx, const float *b, float *y, size_t ldy) {
  float panel[KC * 32];
  size_t t, i, k0;
  for (t = 0; t < cols; t += 32)
    for (k0 = 0; k0 < k; k0 += KC) {
      size_t kc = k - k0 < KC ? k - k0 : KC;
      x_pack(x + k0 * ldx + t, ldx, kc, panel);
      for (i = 0; i < n; i += MR) {
        size_t r = n - i < MR ? n - i : MR;
        const float *bi = b != NULL ? b + i : NULL;
        if (r == MR) x_block6(w + i * ldw + k0, ldw, kc, panel, 32, bi, y + i * ldy + t, ldy, k0 > 0);
        else x_block(w + i * ldw + k0, ldw, r, kc, panel, 32, bi, y + i * ldy + t, ldy, k0 > 0);
      }
    }
}

/* {====== exp and GELU ======} */

/*
** exp: x = n ln 2 + r with n = round(x / ln 2) and |r| <= ln 2 / 2 (ln 2
** split in two so that r is exact), e^r by its Taylor series to r^6
** (relative error under 1.3e-7 there), times 2^n built in the exponent.
** erf for GELU: Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7).
*/
#define EXP_HI 88.37f
#define EXP_LO -87.33f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define LOG2E 1.44269504088896341f

AVX512 static inline __m512 x_exp1(__m512 x) {
  __m512 n, r, p;
  __m512i e;
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_LO)), _mm512_set1_ps(EXP_HI));
  n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
  p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

AVX512 static inline __m512 x_gelu1(__m512 x) {
  __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
  __m512 a = _mm512_abs_ps(z);
  __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f),
                           _mm512_fmadd_ps(a, _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.0f)));
  __m512 p = _mm512_set1_ps(1.061405429f), erf;
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
  p = _mm512_mul_ps(p, t);
  erf = _mm512_fnmadd_ps(p, x_exp1(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), a), a)),
                         _mm512_set1_ps(1.0f));
  /* erf's sign is z's */
  erf = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_castps_si512(erf),
      _mm512_and_si512(_mm512_castps_si512(z), _mm512_set1_epi32((int)0x80000000u))));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x),
                       _mm512_add_ps(_mm512_set1_ps(1.0f), erf));
}

AVX512 static void x_exp(float *x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, x_exp1(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, x_exp1(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

AVX512 static void x_gelu(float *x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, x_gelu1(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, x_gelu1(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

AVX static inline __m256 a_exp1(__m256 x) {
  __m256 n, r, p;
  __m256i e;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
  n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
  p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX static inline __m256 a_gelu1(__m256 x) {
  __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
  __m256 sign = _mm256_and_ps(z, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
  __m256 a = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)), z);
  __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f),
                           _mm256_fmadd_ps(a, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(1.061405429f), erf;
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  erf = _mm256_fnmadd_ps(p, a_exp1(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), a), a)),
                         _mm256_set1_ps(1.0f));
  erf = _mm256_or_ps(erf, sign);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                       _mm256_add_ps(_mm256_set1_ps(1.0f), erf));
}

AVX static void a_exp(float *x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, a_exp1(_mm256_loadu_ps(x + i)));
  for (; i < n; i++) x[i] = expf(x[i]);
}

AVX static void a_gelu(float *x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, a_gelu1(_mm256_loadu_ps(x + i)));
  for (; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

#endif /* RAG_X86 */

/* {====== int8 ======} */

/*
** Weights: int8 with a scale per row (w ~ s q), and each row's sum of q.
** Activations: per column t, u = round(x * 127 / max|x[.][t]|) + 128 in
** [1, 255], packed so that 4 consecutive rows of 16 columns fill 64 bytes
** (what VPDPBUSD multiplies), and the column's scale a = max / 127. Then
** y = s a (sum q u - 128 sum q) + b: integer sums, the same on every path.
*/

void rag_matmul_quantize_rows(const float *w, size_t n, size_t k, int8_t *q, float *scale,
                              int32_t *sum) {
  size_t i, j;
  for (i = 0; i < n; i++) {
    const float *r = w + i * k;
    float mx = 0, inv;
    int32_t s = 0;
    for (j = 0; j < k; j++) mx = fabsf(r[j]) > mx ? fabsf(r[j]) : mx;
    scale[i] = mx > 0 ? mx / 127.0f : 1.0f;
    inv = mx > 0 ? 127.0f / mx : 0.0f;
    for (j = 0; j < k; j++) {
      long v = lrintf(r[j] * inv);
      v = v > 127 ? 127 : v < -127 ? -127 : v;
      q[i * k + j] = (int8_t)v;
      s += (int32_t)v;
    }
    sum[i] = s;
  }
}

/* Quantizes and packs `cols` columns of x (k a multiple of 4) into u and
** their scales into a. u holds cols / 16 panels of k / 4 quads of 64 bytes. */
static void pack_u8(size_t k, size_t cols, const float *x, size_t ldx, uint8_t *u, float *a) {
  size_t t, j;
  for (t = 0; t < cols; t++) a[t] = 0;
  for (j = 0; j < k; j++)
    for (t = 0; t < cols; t++) {
      float v = fabsf(x[j * ldx + t]);
      a[t] = v > a[t] ? v : a[t];
    }
  for (t = 0; t < cols; t++) {
    float mx = a[t], inv = mx > 0 ? 127.0f / mx : 0.0f;
    size_t g = t / 16, lane = t % 16;
    uint8_t *panel = u + g * (k / 4) * 64;
    for (j = 0; j < k; j++) {
      long v = lrintf(x[j * ldx + t] * inv);
      v = v > 127 ? 127 : v < -127 ? -127 : v;
      panel[(j / 4) * 64 + lane * 4 + j % 4] = (uint8_t)(v + 128);
    }
    a[t] = mx > 0 ? mx / 127.0f : 1.0f;
  }
}

/* y[i][t] from the integer sum: the one epilogue of every path. */
static inline float dequant(int32_t acc, int32_t sum, float s, float a, float b) {
  return (float)(acc - 128 * sum) * (s * a) + b;
}

static void p_matmul_i8(size_t n, size_t k, size_t cols, const int8_t *q, const float *scale,
                        const int32_t *sum, const uint8_t *u, const float *a, const float *b,
                        float *y, size_t ldy) {
  size_t i, t, j;
  for (i = 0; i < n; i++)
    for (t = 0; t < cols; t++) {
      const uint8_t *panel = u + (t / 16) * (k / 4) * 64 + (t % 16) * 4;
      int32_t acc = 0;
      for (j = 0; j < k; j++) acc += (int32_t)q[i * k + j] * (int32_t)panel[(j / 4) * 64 + j % 4];
      y[i * ldy + t] = dequant(acc, sum[i], scale[i], a[t], b != NULL ? b[i] : 0.0f);
    }
}

#ifdef RAG_X86
#define VNNI __attribute__((target("avx512f,avx512vnni,avx2,fma")))

/* pack_u8 for 16 columns at a time: the max down each column, then four
** rows' bytes shifted into each column's 32 bits (the same numbers). */
VNNI static void v_pack_u8(size_t k, size_t cols, const float *x, size_t ldx, uint8_t *u,
                           float *a) {
  size_t t, j;
  for (t = 0; t < cols; t += 16) {
    __m512 mx = _mm512_setzero_ps(), inv, zero = _mm512_setzero_ps();
    __mmask16 some;
    uint8_t *panel = u + (t / 16) * (k / 4) * 64;
    for (j = 0; j < k; j++)
      mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x + j * ldx + t)));
    some = _mm512_cmp_ps_mask(mx, zero, _CMP_GT_OQ);
    inv = _mm512_maskz_div_ps(some, _mm512_set1_ps(127.0f), mx);
    for (j = 0; j < k; j += 4) {
      __m512i w = _mm512_setzero_si512();
      int r;
      for (r = 0; r < 4; r++) {
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + (j + r) * ldx + t), inv));
        v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
        v = _mm512_add_epi32(v, _mm512_set1_epi32(128));
        w = _mm512_or_si512(w, _mm512_sllv_epi32(v, _mm512_set1_epi32(8 * r)));
      }
      _mm512_storeu_si512((void *)(panel + (j / 4) * 64), w);
    }
    _mm512_storeu_ps(a + t, _mm512_mask_div_ps(_mm512_set1_ps(1.0f), some, mx,
                                                 _mm512_set1_ps(127.0f)));
  }
}

/* The full block of 6 rows, unrolled so that the 12 sums stay in registers. */
VNNI static void v_block6(const int8_t *q, size_t k, const uint8_t *u0, const uint8_t *u1,
                          __m512i *out) {
  __m512i a00 = _mm512_setzero_si512(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
  __m512i a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  size_t j;
  for (j = 0; j < k / 4; j++) {
    __m512i x0 = _mm512_loadu_si512((const void *)(u0 + j * 64));
    __m512i x1 = _mm512_loadu_si512((const void *)(u1 + j * 64)), v;
    int32_t w;
#define ROW(r, lo, hi)                                   \
    memcpy(&w, q + (r) * k + j * 4, 4);                   \
    v = _mm512_set1_epi32(w);                             \
    lo = _mm512_dpbusd_epi32(lo, x0, v);                  \
    hi = _mm512_dpbusd_epi32(hi, x1, v);
    ROW(0, a00, a01)
    ROW(1, a10, a11)
    ROW(2, a20, a21)
    ROW(3, a30, a31)
    ROW(4, a40, a41)
    ROW(5, a50, a51)
#undef ROW
  }
  out[0] = a00, out[1] = a01, out[2] = a10, out[3] = a11, out[4] = a20, out[5] = a21;
  out[6] = a30, out[7] = a31, out[8] = a40, out[9] = a41, out[10] = a50, out[11] = a51;
}

/* Rows i..i+r (r <= MR) by the 32 columns of panels u0 and u1. */
VNNI static void v_block(const int8_t *q, size_t k, size_t r, const uint8_t *u0,
                         const uint8_t *u1, const float *scale, const int32_t *sum,
                         const float *a, const float *b, float *y, size_t ldy) {
  __m512i acc[MR][2];
  size_t i, j;
  if (r == MR) v_block6(q, k, u0, u1, &acc[0][0]);
  else for (i = 0; i < r; i++) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
  for (j = 0; r < MR && j < k / 4; j++) {
    __m512i x0 = _mm512_loadu_si512((const void *)(u0 + j * 64));
    __m512i x1 = _mm512_loadu_si512((const void *)(u1 + j * 64));
    for (i = 0; i < r; i++) {
      int32_t w4;
      __m512i wv;
      memcpy(&w4, q + i * k + j * 4, 4);
      wv = _mm512_set1_epi32(w4);
      acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], x0, wv);
      acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], x1, wv);
    }
  }
  for (i = 0; i < r; i++) {
    __m512 sa0 = _mm512_mul_ps(_mm512_set1_ps(scale[i]), _mm512_loadu_ps(a));
    __m512 sa1 = _mm512_mul_ps(_mm512_set1_ps(scale[i]), _mm512_loadu_ps(a + 16));
    __m512i corr = _mm512_set1_epi32(128 * sum[i]);
    __m512 bv = _mm512_set1_ps(b != NULL ? b[i] : 0.0f);
    __m512 v0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][0], corr));
    __m512 v1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][1], corr));
    _mm512_storeu_ps(y + i * ldy, _mm512_add_ps(_mm512_mul_ps(v0, sa0), bv));
    _mm512_storeu_ps(y + i * ldy + 16, _mm512_add_ps(_mm512_mul_ps(v1, sa1), bv));
  }
}

VNNI static void v_matmul_i8(size_t n, size_t k, size_t cols, const int8_t *q,
                             const float *scale, const int32_t *sum, const uint8_t *u,
                             const float *a, const float *b, float *y, size_t ldy) {
  size_t t, i, panel = (k / 4) * 64;
  for (t = 0; t < cols; t += 32)
    for (i = 0; i < n; i += MR) {
      size_t r = n - i < MR ? n - i : MR;
      v_block(q + i * k, k, r, u + (t / 16) * panel, u + (t / 16 + 1) * panel, scale + i,
              sum + i, a + t, b != NULL ? b + i : NULL, y + i * ldy + t, ldy);
    }
}
#endif

size_t rag_matmul_i8_scratch(size_t k, size_t cols) {
  return k * cols + cols * sizeof(float) + 64;
}

void rag_matmul_i8_pack(const rag_matmul *mm, size_t k, size_t cols, const float *x,
                        size_t ldx, void *scratch) {
  uint8_t *u = (uint8_t *)scratch;
  float *a = (float *)(void *)(u + ((k * cols + 63) / 64) * 64);
#ifdef RAG_X86
  if (mm->vnni) {
    v_pack_u8(k, cols, x, ldx, u, a);
    return;
  }
#endif
  pack_u8(k, cols, x, ldx, u, a);
}

void rag_matmul_i8(const rag_matmul *mm, size_t n, size_t k, size_t cols, const int8_t *q,
                   const float *scale, const int32_t *sum, const float *b, float *y,
                   size_t ldy, const void *scratch) {
  const uint8_t *u = (const uint8_t *)scratch;
  const float *a = (const float *)(const void *)(u + ((k * cols + 63) / 64) * 64);
#ifdef RAG_X86
  if (mm->vnni) {
    v_matmul_i8(n, k, cols, q, scale, sum, u, a, b, y, ldy);
    return;
  }
#endif
  p_matmul_i8(n, k, cols, q, scale, sum, u, a, b, y, ldy);
}

/* {====== Dispatch ======} */

void rag_matmul_init(rag_matmul *mm, int portable) {
  int cpu = portable ? 0 : rag_kernel_cpu();
  mm->level = cpu > 2 ? 2 : cpu;
  mm->vnni = cpu == 3;
}

const char *rag_matmul_name(const rag_matmul *mm) {
  return mm->level == 2 ? (mm->vnni ? "avx512-vnni" : "avx512")
         : mm->level == 1 ? "avx2" : "portable";
}

void rag_matmul_f32(const rag_matmul *mm, size_t n, size_t k, size_t cols, const float *w,
                    size_t ldw, const float *x, size_t ldx, const float *b, float *y,
                    size_t ldy) {
#ifdef RAG_X86
  if (mm->level == 2) {
    x_matmul(n, k, cols, w, ldw, x, ldx, b, y, ldy);
    return;
  }
  if (mm->level == 1) {
    a_matmul(n, k, cols, w, ldw, x, ldx, b, y, ldy);
    return;
  }
#endif
  p_matmul(n, k, cols, w, ldw, x, ldx, b, y, ldy);
}

void rag_matmul_exp(const rag_matmul *mm, float *x, size_t n) {
#ifdef RAG_X86
  if (mm->level == 2) {
    x_exp(x, n);
    return;
  }
  if (mm->level == 1) {
    a_exp(x, n);
    return;
  }
#endif
  p_exp(x, n);
}

void rag_matmul_gelu(const rag_matmul *mm, float *x, size_t n) {
#ifdef RAG_X86
  if (mm->level == 2) {
    x_gelu(x, n);
    return;
  }
  if (mm->level == 1) {
    a_gelu(x, n);
    return;
  }
#endif
  p_gelu(x, n);
}
