/*
** rag_matmul.h: the dense layers of a transformer, y = w x + b with the
** activations feature-major: x holds k rows (features) of `ld` floats, one
** column per token (m of them, ld >= m rounded up to RAG_MATMUL_COLS); w is
** a linear layer's weight as checkpoints store it, n rows of k floats, read
** in place; y gets n rows of ld floats. Columns m..ld are computed too
** (whatever x holds there), so callers keep them finite.
**
** Kernels are chosen at run time: AVX-512F, AVX2/FMA, or portable C.
*/
#ifndef RAG_MATMUL_H
#define RAG_MATMUL_H

#include <stddef.h>

#define RAG_MATMUL_COLS 32 /* ld is a multiple of this */

typedef struct rag_matmul {
  int level; /* 2 AVX-512F, 1 AVX2/FMA, 0 portable */
} rag_matmul;

/* Picks the kernels; `portable` forces plain C (for tests). */
void rag_matmul_init(rag_matmul *mm, int portable);

/* "avx512", "avx2" or "portable". */
const char *rag_matmul_name(const rag_matmul *mm);

/* y[n][ld] = w[n][k] x[k][ld] + b[n] (b may be NULL). y must not overlap x. */
void rag_matmul_f32(const rag_matmul *mm, const float *w, size_t n, size_t k, const float *x,
                    size_t ld, const float *b, float *y);

#endif
