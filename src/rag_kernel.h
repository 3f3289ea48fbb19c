/*
** rag_kernel.h: how the vector indexes store a vector and score a query
** against it. A row is the stored form of one vector: f32, f16 (IEEE half)
** or i8 (symmetric 8-bit with a per-row scale). Queries stay f32, so every
** score is asymmetric: exact query, stored row. Scores are higher-is-better:
** the dot product for "dot" and "cosine" (rows and queries unit length), the
** negated squared Euclidean distance for "l2". Kernels are chosen once per
** index: AVX2 with FMA and F16C where the CPU has them, else portable C;
** split rows add AVX-512F, and AVX512-BF16 for the dot scan (bf16_rows).
*/
#ifndef RAG_KERNEL_H
#define RAG_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"

typedef enum rag_metric { RAG_COSINE = 0, RAG_DOT, RAG_L2, RAG_NMETRICS } rag_metric;
typedef enum rag_dtype { RAG_F32 = 0, RAG_F16, RAG_I8, RAG_NDTYPES } rag_dtype;

#define RAG_VEC_MAX_DIM 65536u

/* Scores query q against `n` rows of `dim` components at `rows` (stride
** rowbytes), with their scales (i8; NULL otherwise), into out[0..n). */
typedef void (*rag_kernel_score_fn)(const float *q, const void *rows, const float *scales,
                                    size_t n, size_t dim, size_t rowbytes, float *out);

/* Scores one row (scale: its i8 scale, else 1). */
typedef float (*rag_kernel_score1_fn)(const float *q, const void *row, size_t dim, float scale);

/* Scores the m rows idx[0..m) of `rows` (stride rowbytes) into out[0..m). */
typedef void (*rag_kernel_gather_fn)(const float *q, const void *rows, const float *scales,
                                     const uint32_t *idx, size_t m, size_t dim, size_t rowbytes,
                                     float *out);

/*
** Scores n split rows' high halves (bfloat16, `rowbytes` apart) against the
** query rounded to bfloat16, qh (rag_kernel_bf16_query), with AVX512-BF16's
** VDPBF16PS: out[i] approximates sum qh h, with that instruction's rounding
** and its flushing of subnormal inputs, partial sums and products to zero
** (rag_vec's bound covers them).
*/
typedef void (*rag_kernel_bf16_fn)(const uint16_t *qh, const void *rows, size_t n, size_t dim,
                                   size_t rowbytes, float *out);

/*
** The i < n with !(a[i] + ((p x + q) x + r) < tau) for x = xn[i], in
** order, into out (room for n); their count. Computed in double one
** rounding an operation (as plain C with -ffp-contract=off computes it): rag_vec
** passes over the rows whose upper bound is below its threshold. A NaN
** a[i] is kept.
*/
typedef size_t (*rag_kernel_keep_fn)(const float *a, const float *xn, size_t n, double p,
                                     double q, double r, double tau, uint32_t *out);

/* Rows in a block of rag_vec's sketch, stored component by component. */
#define RAG_SKETCH_ROWS 128

/*
** The sketch pass (rag_vec) over n rows: ceil(n / RAG_SKETCH_ROWS) blocks
** of RAG_SKETCH_ROWS rows of int8 codes, block b's component d of its row j
** at codes[(b * dim + d) * RAG_SKETCH_ROWS + j]. For row i < n, out[i] =
** scales[i] times the sum over t < nnz of w[t] * (component idx[t] of row
** i): the sum in float, in any order, fused or not (rag_vec's bound covers
** any), the product rounded once. out has room for whole blocks; past n
** it holds anything.
*/
typedef void (*rag_kernel_sketch_fn)(const float *w, const uint32_t *idx, size_t nnz,
                                     const int8_t *codes, const float *scales, size_t n,
                                     size_t dim, float *out);

/*
** The sketch pass in 8-bit integers (AVX512-VNNI): the query's components
** as integers q_t of scale qs, |q_t| < 2^14, in two rows of ws bytes at w:
** q_t >> 7 (-128 to 127, as a signed byte), then q_t & 127; four
** components at a time (idx and w padded to 4 * ngroups with zero
** weights). For row i < n, out[i] = S_i * (qs * scales[i]) in float, S_i
** the sum of q_t times component idx[t] of row i, exact in int32 for
** 4 * ngroups at most 1,024 and codes in -127 to 127. Past n, out holds 0.
*/
typedef void (*rag_kernel_sketch8_fn)(const uint8_t *w, size_t ws, const uint32_t *idx,
                                      size_t ngroups, const int8_t *codes, const float *scales,
                                      float qs, size_t n, size_t dim, float *out);

typedef struct rag_kernel {
  rag_kernel_score_fn score;
  rag_kernel_score1_fn one;
  rag_kernel_gather_fn gather; /* exact, as one */
  rag_kernel_gather_fn approx; /* split rows: from the high halves alone; else gather */
  rag_kernel_score_fn approx_rows; /* split rows: approx over runs of high halves; else NULL */
  rag_kernel_keep_fn keep;         /* split rows; else NULL */
  rag_dtype dtype;
  rag_metric metric;
  size_t dim, rowbytes;
  rag_kernel_bf16_fn bf16_rows; /* split dot/cosine rows, AVX512-BF16 CPUs; else NULL */
  rag_kernel_gather_fn approx_bf; /* as approx, but q is the query in bfloat16; else NULL */
  rag_kernel_sketch_fn sketch;    /* split dot/cosine rows; else NULL */
  rag_kernel_sketch8_fn sketch8;  /* split dot/cosine rows, AVX512-VNNI CPUs; else NULL */
  int simd;  /* 1: AVX2/FMA/F16C kernels; 2: AVX-512F for split rows */
  int avx2;  /* 1: AVX2 at most (for tests) */
  int split; /* rows are split f32 (rag_kernel_split) */
} rag_kernel;

/* What the CPU runs: 3 AVX-512F with AVX512-VNNI, 2 AVX-512F (both with
** AVX2, FMA, F16C), 1 AVX2/FMA/F16C, 0 none of them (or not x86-64). */
int rag_kernel_cpu(void);

/* Picks the kernel; `portable` 1 forces plain C, 2 AVX2 at most (for tests). */
void rag_kernel_init(rag_kernel *k, rag_dtype dtype, rag_metric metric, size_t dim,
                     int portable);

/*
** Switches an f32 kernel to split rows: the high 16 bits of every component
** (bfloat16, truncated), then the low 16 bits, so dim * 4 bytes as before.
** Exact scores keep the f32 kernels' terms and order, so they are the same
** bit for bit (AVX-512F, where the CPU has it, runs AVX2's sums); approx
** reads only the first half of a row, half the memory traffic of a graph
** walk, whose best candidates are then scored exactly. Other dtypes are left
** as they are. Used by rag_hnsw; encode, decode and rows_ok follow the flag;
** `score` (runs of rows) is NULL for split rows. approx_rows scores runs of
** bfloat16 rows `rowbytes` apart, as approx scores one: rag_vec keeps the
** high halves of its f32 rows apart from the low ones and scans them so.
*/
void rag_kernel_split(rag_kernel *k);

/* The score of one row. */
static inline float rag_kernel_score1(const rag_kernel *k, const float *q, const void *row,
                                      float scale) {
  return k->one(q, row, k->dim, scale);
}

/*
** Checks and prepares an input vector: every component finite; under cosine
** not all zero, then scaled to unit length into `out` (dim floats, may be v).
** Returns RAG_OK, or RAG_EINVAL with *bad the offending component (dim when
** the vector is zero) and *why "nan", "inf" or "zero" (or "range" when a
** component does not fit f16).
*/
int rag_kernel_prepare(const rag_kernel *k, const float *v, float *out, size_t *bad,
                       const char **why);

/* Stores a prepared vector as a row; *scale gets the i8 scale (1 otherwise). */
void rag_kernel_encode(const rag_kernel *k, const float *v, void *row, float *scale);

/* A row back to floats (exact for f32 and f16; the dequantised i8 values). */
void rag_kernel_decode(const rag_kernel *k, const void *row, float scale, float *out);

/* f32 components to and from their high and low 16 bits (split rows, rag_vec's planes). */
void rag_kernel_f32_split(const float *x, size_t n, uint16_t *hi, uint16_t *lo);
void rag_kernel_f32_join(const uint16_t *hi, const uint16_t *lo, size_t n, float *out);

/* The query for bf16_rows: each component rounded to the nearest bfloat16
** (ties to even), or zero where that is subnormal, since VDPBF16PS reads it
** so; q - qh is left over (the residual, exact in float). */
void rag_kernel_bf16_query(const float *q, size_t n, uint16_t *qh);

/* 1 when n stored rows are sound: f32 components finite and within 1e15,
** f16 components finite, i8 scales finite and above zero. */
int rag_kernel_rows_ok(const rag_kernel *k, const void *rows, const float *scales, size_t n);

uint16_t rag_kernel_f16_from_f32(float f); /* round to nearest even; overflow gives inf */
float rag_kernel_f32_from_f16(uint16_t h);

#endif
