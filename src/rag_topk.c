/*
** rag_topk.c: a bounded heap of hits (see rag_topk.h).
*/
#include "rag_topk.h"

void rag_topk_init(rag_topk *t, rag_hit *h, size_t k, const rag_ids *ids) {
  t->h = h;
  t->n = 0;
  t->k = k;
  t->ids = ids;
}

static int better(const rag_ids *ids, const rag_hit *x, const rag_hit *y) {
  if (x->score != y->score) return x->score > y->score;
  return rag_ids_cmp(ids, x->id, y->id) < 0;
}

static void sift_down(const rag_ids *ids, rag_hit *h, size_t n, size_t i) {
  for (;;) {
    size_t c = 2 * i + 1;
    rag_hit tmp;
    if (c >= n) return;
    if (c + 1 < n && better(ids, &h[c], &h[c + 1])) c++;
    if (!better(ids, &h[i], &h[c])) return;
    tmp = h[i];
    h[i] = h[c];
    h[c] = tmp;
    i = c;
  }
}

void rag_topk_add(rag_topk *t, uint32_t slot, double score) {
  rag_hit x;
  x.id = slot;
  x.score = score;
  if (t->k == 0) return;
  if (t->n < t->k) {
    size_t i = t->n++;
    t->h[i] = x;
    while (i > 0) {
      size_t p = (i - 1) / 2;
      rag_hit tmp;
      if (!better(t->ids, &t->h[p], &t->h[i])) return;
      tmp = t->h[i];
      t->h[i] = t->h[p];
      t->h[p] = tmp;
      i = p;
    }
  } else if (better(t->ids, &x, &t->h[0])) {
    t->h[0] = x;
    sift_down(t->ids, t->h, t->n, 0);
  }
}

size_t rag_topk_sort(rag_topk *t) {
  size_t i;
  for (i = t->n; i > 1; i--) { /* heap sort: the worst goes last */
    rag_hit tmp = t->h[0];
    t->h[0] = t->h[i - 1];
    t->h[i - 1] = tmp;
    sift_down(t->ids, t->h, i - 1, 0);
  }
  return t->n;
}
