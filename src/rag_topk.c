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

/* Moves h[i] down to its place; the element moving is kept out of the
** array until then, so the compiler holds it in registers. */
static void sift_down(const rag_ids *ids, rag_hit *h, size_t n, size_t i) {
  rag_hit x = h[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && better(ids, &h[c], &h[c + 1])) c++;
    if (!better(ids, &x, &h[c])) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
}

void rag_topk_add(rag_topk *t, uint32_t slot, double score) {
  rag_hit x;
  x.id = slot;
  x.score = score;
  if (t->k == 0) return;
  if (t->n < t->k) { /* sift x up from the new last place */
    size_t i = t->n++;
    while (i > 0 && better(t->ids, &t->h[(i - 1) / 2], &x)) {
      t->h[i] = t->h[(i - 1) / 2];
      i = (i - 1) / 2;
    }
    t->h[i] = x;
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
