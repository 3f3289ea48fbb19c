/*
** rag_matmul.c: y = w x + b over feature-major activations (rag_matmul.h).
** Each kernel computes a block of MR output rows by one group of columns
** (16 or 32 tokens) over the whole of k: every step broadcasts MR weights,
** one from each row (each row read in order), and multiplies a vector of
** the activations' row, so the block's sums stay in registers.
*/
#include "rag_matmul.h"

#include <string.h>

#include "rag_kernel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RAG_X86 1
#include <immintrin.h>
#endif

#define MR 6 /* output rows per block */

/* {====== Portable ======} */

static void p_matmul(const float *w, size_t n, size_t k, const float *x, size_t ld,
                     const float *b, float *y) {
  size_t i, j, t;
  for (i = 0; i < n; i++) {
    float *yi = y + i * ld;
    const float *wi = w + i * k;
    float bias = b != NULL ? b[i] : 0.0f;
    for (t = 0; t < ld; t++) yi[t] = 0.0f;
    for (j = 0; j < k; j++) {
      const float wij = wi[j], *xj = x + j * ld;
      for (t = 0; t < ld; t++) yi[t] += wij * xj[t];
    }
    for (t = 0; t < ld; t++) yi[t] += bias;
  }
}

#ifdef RAG_X86

/* {====== AVX2 and FMA: 6 rows x 16 columns ======} */

#define AVX __attribute__((target("avx2,fma")))

/* Rows i..i+r (r <= MR) by columns t..t+16. */
AVX static void a_block(const float *w, size_t r, size_t k, const float *x, size_t ld,
                        const float *b, float *y) {
  __m256 acc[MR][2];
  size_t i, j;
  for (i = 0; i < r; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (j = 0; j < k; j++) {
    __m256 x0 = _mm256_loadu_ps(x + j * ld), x1 = _mm256_loadu_ps(x + j * ld + 8);
    for (i = 0; i < r; i++) {
      __m256 wv = _mm256_broadcast_ss(w + i * k + j);
      acc[i][0] = _mm256_fmadd_ps(wv, x0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(wv, x1, acc[i][1]);
    }
  }
  for (i = 0; i < r; i++) {
    __m256 bv = _mm256_set1_ps(b != NULL ? b[i] : 0.0f);
    _mm256_storeu_ps(y + i * ld, _mm256_add_ps(acc[i][0], bv));
    _mm256_storeu_ps(y + i * ld + 8, _mm256_add_ps(acc[i][1], bv));
  }
}

/* The full block, its loop unrolled so that the 12 sums stay in registers. */
AVX static void a_block6(const float *w, size_t k, const float *x, size_t ld, const float *b,
                         float *y) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
  __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  const float *w0 = w, *w1 = w + k, *w2 = w + 2 * k, *w3 = w + 3 * k, *w4 = w + 4 * k,
              *w5 = w + 5 * k;
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
#define PUT(row, lo, hi)                                                    \
  do {                                                                      \
    __m256 bv = _mm256_set1_ps(b != NULL ? b[row] : 0.0f);                  \
    _mm256_storeu_ps(y + (row) * ld, _mm256_add_ps(lo, bv));                \
    _mm256_storeu_ps(y + (row) * ld + 8, _mm256_add_ps(hi, bv));            \
  } while (0)
  PUT(0, a00, a01);
  PUT(1, a10, a11);
  PUT(2, a20, a21);
  PUT(3, a30, a31);
  PUT(4, a40, a41);
  PUT(5, a50, a51);
#undef PUT
}

AVX static void a_matmul(const float *w, size_t n, size_t k, const float *x, size_t ld,
                         const float *b, float *y) {
  size_t t, i;
  for (t = 0; t < ld; t += 16) /* a group of columns stays in cache over all rows */
    for (i = 0; i < n; i += MR) {
      size_t r = n - i < MR ? n - i : MR;
      const float *bi = b != NULL ? b + i : NULL;
      if (r == MR) a_block6(w + i * k, k, x + t, ld, bi, y + i * ld + t);
      else a_block(w + i * k, r, k, x + t, ld, bi, y + i * ld + t);
    }
}

/* {====== AVX-512F: 6 rows x 32 columns ======} */

#define AVX512 __attribute__((target("avx512f,avx2,fma")))

AVX512 static void x_block(const float *w, size_t r, size_t k, const float *x, size_t ld,
                           const float *b, float *y) {
  __m512 acc[MR][2];
  size_t i, j;
  for (i = 0; i < r; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (j = 0; j < k; j++) {
    __m512 x0 = _mm512_loadu_ps(x + j * ld), x1 = _mm512_loadu_ps(x + j * ld + 16);
    for (i = 0; i < r; i++) {
      __m512 wv = _mm512_set1_ps(w[i * k + j]);
      acc[i][0] = _mm512_fmadd_ps(wv, x0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(wv, x1, acc[i][1]);
    }
  }
  for (i = 0; i < r; i++) {
    __m512 bv = _mm512_set1_ps(b != NULL ? b[i] : 0.0f);
    _mm512_storeu_ps(y + i * ld, _mm512_add_ps(acc[i][0], bv));
    _mm512_storeu_ps(y + i * ld + 16, _mm512_add_ps(acc[i][1], bv));
  }
}

AVX512 static void x_block6(const float *w, size_t k, const float *x, size_t ld, const float *b,
                            float *y) {
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
  __m512 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
  const float *w0 = w, *w1 = w + k, *w2 = w + 2 * k, *w3 = w + 3 * k, *w4 = w + 4 * k,
              *w5 = w + 5 * k;
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
#define PUT(row, lo, hi)                                                    \
  do {                                                                      \
    __m512 bv = _mm512_set1_ps(b != NULL ? b[row] : 0.0f);                  \
    _mm512_storeu_ps(y + (row) * ld, _mm512_add_ps(lo, bv));                \
    _mm512_storeu_ps(y + (row) * ld + 16, _mm512_add_ps(hi, bv));           \
  } while (0)
  PUT(0, a00, a01);
  PUT(1, a10, a11);
  PUT(2, a20, a21);
  PUT(3, a30, a31);
  PUT(4, a40, a41);
  PUT(5, a50, a51);
#undef PUT
}

AVX512 static void x_matmul(const float *w, size_t n, size_t k, const float *x, size_t ld,
                            const float *b, float *y) {
  size_t t, i;
  for (t = 0; t < ld; t += 32)
    for (i = 0; i < n; i += MR) {
      size_t r = n - i < MR ? n - i : MR;
      const float *bi = b != NULL ? b + i : NULL;
      if (r == MR) x_block6(w + i * k, k, x + t, ld, bi, y + i * ld + t);
      else x_block(w + i * k, r, k, x + t, ld, bi, y + i * ld + t);
    }
}

#endif /* RAG_X86 */

/* {====== Dispatch ======} */

void rag_matmul_init(rag_matmul *mm, int portable) {
  mm->level = portable ? 0 : rag_kernel_cpu();
}

const char *rag_matmul_name(const rag_matmul *mm) {
  return mm->level == 2 ? "avx512" : mm->level == 1 ? "avx2" : "portable";
}

void rag_matmul_f32(const rag_matmul *mm, const float *w, size_t n, size_t k, const float *x,
                    size_t ld, const float *b, float *y) {
#ifdef RAG_X86
  if (mm->level == 2) {
    x_matmul(w, n, k, x, ld, b, y);
    return;
  }
  if (mm->level == 1) {
    a_matmul(w, n, k, x, ld, b, y);
    return;
  }
#endif
  p_matmul(w, n, k, x, ld, b, y);
}
