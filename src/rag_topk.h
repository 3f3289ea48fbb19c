/*
** rag_topk.h: the best k hits of a stream of (slot, score), kept in a heap
** whose root is the worst; ties go to the smaller id (rag_ids order), so
** results never depend on the order the slots were seen in. The caller owns
** the k-element array.
*/
#ifndef RAG_TOPK_H
#define RAG_TOPK_H

#include "rag.h"
#include "rag_ids.h"

typedef struct rag_topk {
  rag_hit *h; /* k entries, caller's */
  size_t n, k;
  const rag_ids *ids;
} rag_topk;

void rag_topk_init(rag_topk *t, rag_hit *h, size_t k, const rag_ids *ids);
void rag_topk_add(rag_topk *t, uint32_t slot, double score);
/* Sorts the kept hits best first; returns how many. */
size_t rag_topk_sort(rag_topk *t);

/* The add, with the common rejection inlined. */
static inline void rag_topk_push(rag_topk *t, uint32_t slot, double score) {
  if (t->n == t->k && (t->k == 0 || score < t->h[0].score)) return;
  rag_topk_add(t, slot, score);
}

#endif
