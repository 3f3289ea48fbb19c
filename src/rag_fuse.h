/*
** rag_fuse.h: fusion of ranked hit lists into one. Reciprocal rank fusion
** (RRF) scores a document by its positions; score fusion normalises each
** list's scores (min-max, z-score or distribution-based) and adds them or
** keeps the largest. A document is one id (bytes); a duplicate inside one
** list counts once, at its first (best) position. Results are best first,
** ties by id bytes, so the output never depends on hash or input order.
** Everything is borrowed for the call; the caller owns `out`.
*/
#ifndef RAG_FUSE_H
#define RAG_FUSE_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"

/* One input list: n ids in rank order, and their scores for score fusion. */
typedef struct rag_fuse_list {
  const char *const *ids;
  const size_t *lens;
  const double *scores; /* n finite scores; unused by RRF (may be NULL) */
  size_t n;
  double weight;
} rag_fuse_list;

/* A fused document: its id (borrowed from the list it first appears in). */
typedef struct rag_fused {
  const char *id;
  size_t len;
  double score;
} rag_fused;

typedef enum rag_fuse_method { RAG_FUSE_MINMAX, RAG_FUSE_ZSCORE, RAG_FUSE_DBSF } rag_fuse_method;

/*
** RRF: score(d) = (sum over the lists holding d of weight / (k + base + p)) / div,
** p the 0-based position of d's first occurrence in the list, summed in list
** order. out has room for the total number of entries; the best `limit`
** documents (all: SIZE_MAX) end up at its front, best first, and *n gets
** their count. RAG_ENOMEM, or RAG_EINVAL when k + base <= 0.
*/
int rag_fuse_rrf(const rag_fuse_list *l, size_t nl, double k, double base, double div,
                 size_t limit, rag_fused *out, size_t *n);

/*
** Score fusion: each list's scores (over its distinct ids) are normalised:
**   minmax  (s - min) / (max - min); when max == min, 1 if max > 0 else 0;
**   zscore  (s - mean) / sd, 0 when sd == 0 (sd of the population);
**   dbsf    (s - (mean - 3 sd)) / (6 sd), 0 when sd == 0;
** then score(d) = sum of weight * value over the lists holding d, or with
** `max` set the largest weight * value. Same limit, out and *n as rag_fuse_rrf.
*/
int rag_fuse_scores(const rag_fuse_list *l, size_t nl, rag_fuse_method method, int max,
                    size_t limit, rag_fused *out, size_t *n);

#endif
