/*
** rag_vec.h: the exact vector index. Rows sit in one contiguous block in
** insertion order (a removal moves the last row into the hole), so a
** search is one pass over memory with the SIMD kernels of rag_kernel.h. f32
** rows are split in two planes, their high and low 16 bits: a search reads
** the high plane, half the bytes, and scores exactly only the rows that a
** proven error bound cannot rule out, so its hits are the exact ones. With
** the sketch option (f32, cosine or dot), the first pass reads instead an
** int8 copy of the rows kept component by component, and only the
** components where the query is not zero: a quarter of the bytes, or less
** for a sparse query, with its own proven bound.
** search_batch scores many queries per pass, blocked so that a block of
** rows stays in cache while every query sees it. Saves to a checksummed
** file (grammar in rag_vec.c) whose rows are the in-memory layout, so a
** load may borrow them from the caller's bytes (a file mapped read-only,
** shared by processes) instead of copying. Not thread-safe: searches use
** scratch space inside the index.
*/
#ifndef RAG_VEC_H
#define RAG_VEC_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"
#include "rag_ids.h"
#include "rag_kernel.h"

typedef struct rag_vec rag_vec;

typedef struct rag_vec_opts {
  size_t dim;        /* 1 .. RAG_VEC_MAX_DIM */
  rag_metric metric; /* default RAG_COSINE */
  rag_dtype dtype;   /* default RAG_F32 */
  int portable;      /* 1: plain C kernels even where AVX2 is there; 2: AVX2 at most */
  int sketch;        /* 1: keep an int8 sketch of the rows (f32, cosine or dot only) */
} rag_vec_opts;

/* A vector that was refused: the component and why ("nan", "inf", "range", "zero"). */
typedef struct rag_vec_bad {
  size_t component;
  const char *why;
} rag_vec_bad;

/* RAG_EINVAL (dim, metric or dtype out of range, or a sketch asked of
** other rows than f32 under cosine or dot), RAG_ENOMEM. */
int rag_vec_new(const rag_vec_opts *o, rag_vec **out);
void rag_vec_free(rag_vec *v); /* NULL is a no-op */

const rag_vec_opts *rag_vec_config(const rag_vec *v);
const rag_kernel *rag_vec_kernel(const rag_vec *v);
size_t rag_vec_count(const rag_vec *v);

/*
** Adds or replaces the vector of `id` (dim floats, borrowed). RAG_EINVAL
** with *bad filled: a component is NaN, infinite or beyond 1e15 (or f16's
** range), or the vector is zero under cosine. RAG_ENOMEM, RAG_ETOOBIG. On
** any failure the index is unchanged. A borrowed index copies its rows
** first (rag_vec_own).
*/
int rag_vec_add(rag_vec *v, const char *id, size_t idlen, const float *x, rag_vec_bad *bad);

/*
** Removes `id`; *removed says whether it was there. Fails only on a
** borrowed index that must copy its rows first (rag_vec_own): RAG_ENOMEM,
** the index unchanged and *removed 0.
*/
int rag_vec_remove(rag_vec *v, const char *id, size_t idlen, int *removed);

/*
** Copies a borrowed index's rows into memory it owns, after which the
** loaded bytes are no longer used and every change succeeds without
** copying; a no-op for an index that owns its rows. RAG_ENOMEM leaves it
** borrowed.
*/
int rag_vec_own(rag_vec *v);

/*
** The best k rows for query q (dim floats), best first, ties by id; only
** ids in `filter` when it is not NULL. *hits points into the index and
** stays valid until its next call. RAG_EINVAL (bad query, *bad), RAG_ENOMEM.
*/
int rag_vec_search(rag_vec *v, const float *q, size_t k, const rag_id_filter *filter,
                   const rag_hit **hits, size_t *n, rag_vec_bad *bad);

/*
** rag_vec_search in two calls, for a caller with other work to do while
** memory answers: start does all but the last pass, whose rows it asks
** for; finish scores them and gives the hits as search does. Nothing else
** may use v between the two. A start that fails needs no finish.
*/
int rag_vec_search_start(rag_vec *v, const float *q, size_t k, const rag_id_filter *filter,
                         rag_vec_bad *bad);
void rag_vec_search_finish(rag_vec *v, const rag_hit **hits, size_t *n);

/*
** After a start, the cache lines that finish reads first (as many as the
** L2 cache holds with room to spare), for a caller's other work to ask
** for (rag_ahead); NULL when finish reads no rows. Valid until finish.
*/
rag_ahead *rag_vec_search_ahead(rag_vec *v);

/*
** The best k rows for each of nq queries (nq * dim floats): the hits of
** query i are (*hits)[i * k ..], counts[i] of them (all counts equal
** min(k, count)). Same rules as search; *bad->component counts across all
** queries. *hits and *counts stay valid until the next call.
*/
int rag_vec_search_batch(rag_vec *v, const float *qs, size_t nq, size_t k,
                         const rag_hit **hits, size_t *count, rag_vec_bad *bad);

/* The id of a hit (a slot). */
const char *rag_vec_id(const rag_vec *v, uint32_t slot, size_t *len);

/* The stored vector of `id` decoded into out (dim floats); 0 when absent. */
int rag_vec_get(const rag_vec *v, const char *id, size_t idlen, float *out);

/* Every byte the index allocated (borrowed rows are not counted). */
size_t rag_vec_memory(const rag_vec *v);

/* The bytes of borrowed rows, norms and scales the index reads in place; 0 once it owns them. */
size_t rag_vec_mapped(const rag_vec *v);

/*
** Saving and loading as rag_bm25 does: RAG_EIO with errno in *err, RAG_ENOMEM;
** loads give RAG_EFORMAT, RAG_EVERSION, RAG_ECORRUPT with the reason in *why.
** rag_vec_load reads the file and copies everything.
*/
int rag_vec_save(const rag_vec *v, const char *path, int *err);
int rag_vec_dump(const rag_vec *v, unsigned char **buf, size_t *n);
int rag_vec_load(const char *path, rag_vec **out, const char **why, int *err);

/*
** Loads the n bytes of a file at p (borrowed for the call). With borrow = 1
** and a version 2 file at a 64-byte aligned p (as mmap gives), the index's
** rows, norms and scales point into p, which must then stay unchanged and
** outlive the index (rag_vec_free leaves it alone); nothing row-sized is
** copied, and every check a copying load makes is made all the same. An
** unaligned p or a version 1 file is copied as with borrow = 0. The index
** never writes into p: its first change copies the rows (rag_vec_own).
*/
int rag_vec_load_mem(const unsigned char *p, size_t n, int borrow, rag_vec **out,
                     const char **why);

/* Checks the invariants (id table, counts, rows); 1 when they hold. For tests; uses scratch. */
int rag_vec_check(rag_vec *v);

#endif
