/*
** rag_hnsw.h: the approximate vector index, a Hierarchical Navigable Small
** World graph (Malkov and Yashunin, 2016/2018) with their neighbour-selection
** heuristic. Level 0 links of every node sit in one flat block; upper
** levels, held by few nodes, in a pool. Rows use the encodings and kernels
** of rag_kernel.h. Removal leaves a tombstone that searches walk through but
** never return; once tombstones outnumber live nodes, the graph is rebuilt
** from the live rows. Levels come from a seeded generator, so the same
** operations give the same graph. Saves to a checksummed file (grammar in
** rag_hnsw.c). Not thread-safe: searches use scratch space inside the index.
*/
#ifndef RAG_HNSW_H
#define RAG_HNSW_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"
#include "rag_ids.h"
#include "rag_kernel.h"
#include "rag_vec.h"

typedef struct rag_hnsw rag_hnsw;

#define RAG_HNSW_MAX_M 256
#define RAG_HNSW_MAX_EF 100000

typedef struct rag_hnsw_opts {
  size_t dim;
  rag_metric metric;
  rag_dtype dtype;
  int portable;
  size_t M;               /* links per node above level 0 (2M at level 0); 2..256, default 16 */
  size_t ef_construction; /* 1..100000, default 200 */
  size_t ef_search;       /* 1..100000, default 64 */
  uint64_t seed;          /* default 100 */
  size_t capacity;        /* nodes to allocate up front; 0: grow as needed */
} rag_hnsw_opts;

typedef struct rag_hnsw_stats {
  size_t count;    /* live vectors */
  size_t dead;     /* tombstones */
  size_t levels;   /* the top level + 1 (0 when empty) */
  size_t memory;   /* every byte held */
  size_t rebuilds; /* graph rebuilds so far (removals, compact) */
  size_t links;    /* level-0 links of the live vectors, in all */
  size_t links_max; /* the longest level-0 list (at most 2 M) */
} rag_hnsw_stats;

void rag_hnsw_defaults(rag_hnsw_opts *o, size_t dim);

/* RAG_EINVAL (an option out of range), RAG_ENOMEM. */
int rag_hnsw_new(const rag_hnsw_opts *o, rag_hnsw **out);
void rag_hnsw_free(rag_hnsw *h); /* NULL is a no-op */

const rag_hnsw_opts *rag_hnsw_config(const rag_hnsw *h);
const rag_kernel *rag_hnsw_kernel(const rag_hnsw *h);
size_t rag_hnsw_count(const rag_hnsw *h);
void rag_hnsw_stats_get(const rag_hnsw *h, rag_hnsw_stats *s);

/*
** Adds `id` or replaces its vector (the old node becomes a tombstone).
** Errors as rag_vec_add; on any failure the index is unchanged.
*/
int rag_hnsw_add(rag_hnsw *h, const char *id, size_t idlen, const float *x, rag_vec_bad *bad);

/* Removes `id`; *removed says whether it was there. Never fails. */
void rag_hnsw_remove(rag_hnsw *h, const char *id, size_t idlen, int *removed);

/* Rebuilds the graph from the live nodes, dropping every tombstone. RAG_ENOMEM
** leaves the index as it was. */
int rag_hnsw_compact(rag_hnsw *h);

/*
** The best k nodes for q, best first, ties by id, searched with a beam of
** max(ef, k) (ef 0: the index's ef_search). With `filter`, only those ids
** come back: a selective filter (at most an eighth of the nodes, or 2048)
** is searched exactly, a broad one through the graph. *hits is valid until
** the next call. A beam as large as the live nodes scores them all (exact).
** RAG_EINVAL (*bad), RAG_ENOMEM.
*/
int rag_hnsw_search(rag_hnsw *h, const float *q, size_t k, size_t ef,
                    const rag_id_filter *filter, const rag_hit **hits, size_t *n,
                    rag_vec_bad *bad);

const char *rag_hnsw_id(const rag_hnsw *h, uint32_t slot, size_t *len);

/* The stored vector of a live id, decoded into out; 0 when absent. */
int rag_hnsw_get(const rag_hnsw *h, const char *id, size_t idlen, float *out);

int rag_hnsw_save(const rag_hnsw *h, const char *path, int *err);
int rag_hnsw_dump(const rag_hnsw *h, unsigned char **buf, size_t *n);
int rag_hnsw_load(const char *path, rag_hnsw **out, const char **why, int *err);
int rag_hnsw_load_mem(const unsigned char *p, size_t n, rag_hnsw **out, const char **why);

/* Checks the graph's invariants (links in range, levels, ids, counts). For tests. */
int rag_hnsw_check(const rag_hnsw *h);

#endif
