/*
** rag_matmul.h: the dense layers of a transformer, y = w x + b with the
** activations feature-major: x holds k rows (features), one column per
** token; w is a linear layer's weight as checkpoints store it, n rows of k
** floats, read in place; y gets n rows. Columns are computed in groups, so
** callers round their count up and keep the extra columns finite. Also the
** elementwise exp and GELU the encoder needs, on the same kernels' CPU.
**
** Kernels are chosen at run time: AVX-512F, AVX2/FMA, or portable C.
*/
#ifndef RAG_MATMUL_H
#define RAG_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#define RAG_MATMUL_COLS 32 /* ld is a multiple of this */

typedef struct rag_matmul {
  int level; /* 2 AVX-512F, 1 AVX2/FMA, 0 portable */
  int vnni;  /* the int8 kernel: 1 AVX512-VNNI, 0 portable */
} rag_matmul;

/* Picks the kernels; `portable` forces plain C (for tests). */
void rag_matmul_init(rag_matmul *mm, int portable);

/* "avx512", "avx2" or "portable". */
const char *rag_matmul_name(const rag_matmul *mm);

/*
** y = w x + b over `cols` columns (a multiple of RAG_MATMUL_COLS): w is n
** rows of k floats, `ldw` apart; x is k rows, `ldx` apart; y gets n rows,
** `ldy` apart; b (n floats) may be NULL. Reads and writes every one of the
** cols columns. y must not overlap x or w.
*/
void rag_matmul_f32(const rag_matmul *mm, size_t n, size_t k, size_t cols, const float *w,
                    size_t ldw, const float *x, size_t ldx, const float *b, float *y,
                    size_t ldy);

/*
** int8: rows of w quantized with a scale each (w ~ scale q, |q| <= 127) and
** each row's sum of q, for rag_matmul_i8.
*/
void rag_matmul_quantize_rows(const float *w, size_t n, size_t k, int8_t *q, float *scale,
                              int32_t *sum);

/* Bytes of scratch rag_matmul_i8 needs. */
size_t rag_matmul_i8_scratch(size_t k, size_t cols);

/*
** y = w x + b with w quantized (q, scale, sum; k a multiple of 4), in two
** steps: rag_matmul_i8_pack quantizes each of the cols columns of x to 8
** bits with its own scale into scratch (once for every w that multiplies
** the same x), rag_matmul_i8 sums the products in integers (AVX512-VNNI
** where the CPU has it, else plain C, with the same results) and scales
** them back. cols a multiple of RAG_MATMUL_COLS.
*/
void rag_matmul_i8_pack(const rag_matmul *mm, size_t k, size_t cols, const float *x,
                        size_t ldx, void *scratch);
void rag_matmul_i8(const rag_matmul *mm, size_t n, size_t k, size_t cols, const int8_t *q,
                   const float *scale, const int32_t *sum, const float *b, float *y,
                   size_t ldy, const void *scratch);

/* x[i] = exp(x[i]) for i < n (relative error below 2e-7 on the SIMD paths). */
void rag_matmul_exp(const rag_matmul *mm, float *x, size_t n);

/* x[i] = GELU(x[i]) = x/2 (1 + erf(x / sqrt 2)) for i < n (erf to 2e-7). */
void rag_matmul_gelu(const rag_matmul *mm, float *x, size_t n);

#endif
