/*
** rag_rerank.h: reorderings of a hit list that need no model: maximal
** marginal relevance (MMR), the lost-in-the-middle order, and nucleus
** (top-p) cutoff. Each returns positions into the caller's list; ties go
** to the smaller id (bytes), so results never depend on input order where
** the rule leaves a choice. Inputs are borrowed; outputs are the caller's.
*/
#ifndef RAG_RERANK_H
#define RAG_RERANK_H

#include <stddef.h>

#include "rag.h"

/*
** MMR (Carbonell and Goldstein, 1998) over n candidates with vectors
** vecs[i * dim ...]: takes the most relevant first, then repeatedly the
** candidate maximising
**   lambda * rel(i) - (1 - lambda) * max over taken j of cos(i, j),
** where rel(i) = cos(query, i) when query is not NULL, else scores[i].
** A zero vector has cosine 0 with everything. Writes the k (<= n) taken
** positions to order in the order taken. RAG_ENOMEM.
*/
int rag_rerank_mmr(const float *vecs, size_t n, size_t dim, const float *query,
                   const double *scores, double lambda, size_t k, const char *const *ids,
                   const size_t *lens, size_t *order);

/*
** The lost-in-the-middle order of n hits given best first: order[p] is the
** rank (0 = best) placed at position p. best_first: Haystack's
** LostInTheMiddleRanker (best at the start, the second best at the end,
** and so on inwards); otherwise LangChain's and LlamaIndex's
** LongContextReorder, which reverses the list and then alternates front
** and back insertion.
*/
void rag_rerank_litm(size_t n, int best_first, size_t *order);

/*
** Nucleus cutoff (Haystack's TopPSampler): softmax of the n scores, sorted
** by probability (ties by id), keeps the prefix whose cumulative
** probability is at most p (or within 1e-6 + 1e-5 * p of it), and at least
** the best one when n > 0. Writes the kept positions, best first, to keep
** and their number to *m. RAG_ENOMEM.
*/
int rag_rerank_top_p(const double *scores, size_t n, double p, const char *const *ids,
                     const size_t *lens, size_t *keep, size_t *m);

#endif
