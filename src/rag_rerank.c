/*
** rag_rerank.c: MMR, lost-in-the-middle and top-p over a hit list. MMR
** keeps, per candidate, its largest similarity to anything taken so far,
** so each step costs one pass of dot products against the last one taken.
*/
#include "rag_rerank.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bytewise id order: memcmp, then length. */
static int id_cmp(const char *a, size_t na, const char *b, size_t nb) {
  int c = (na < nb ? na : nb) ? memcmp(a, b, na < nb ? na : nb) : 0;
  if (c != 0) return c;
  return na < nb ? -1 : na > nb;
}

/* Eight partial sums: one running sum waits on each add, eight chains
** keep the adder busy (4x faster at 512 components). The products are
** exact in double, and the order is fixed, so results are reproducible. */
static double dot(const float *a, const float *b, size_t d) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  size_t i;
  for (i = 0; i + 8 <= d; i += 8) {
    s0 += (double)a[i] * b[i];
    s1 += (double)a[i + 1] * b[i + 1];
    s2 += (double)a[i + 2] * b[i + 2];
    s3 += (double)a[i + 3] * b[i + 3];
    s4 += (double)a[i + 4] * b[i + 4];
    s5 += (double)a[i + 5] * b[i + 5];
    s6 += (double)a[i + 6] * b[i + 6];
    s7 += (double)a[i + 7] * b[i + 7];
  }
  for (; i < d; i++) s0 += (double)a[i] * b[i];
  return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

int rag_rerank_mmr(const float *vecs, size_t n, size_t dim, const float *query,
                   const double *scores, double lambda, size_t k, const char *const *ids,
                   const size_t *lens, size_t *order) {
  double *norm, *rel, *near;
  unsigned char *taken;
  size_t i, t;
  if (k > n) k = n;
  if (k == 0) return RAG_OK;
  if (RAG_MUL_OVERFLOWS(n, 3 * sizeof(double) + 1)) return RAG_ENOMEM;
  norm = (double *)rag_malloc(n * (3 * sizeof(double) + 1));
  if (norm == NULL) return RAG_ENOMEM;
  rel = norm + n;
  near = rel + n; /* largest cosine to a taken candidate */
  taken = (unsigned char *)(near + n);
  for (i = 0; i < n; i++) norm[i] = sqrt(dot(vecs + i * dim, vecs + i * dim, dim));
  if (query != NULL) {
    double qn = sqrt(dot(query, query, dim));
    for (i = 0; i < n; i++)
      rel[i] = qn > 0 && norm[i] > 0 ? dot(query, vecs + i * dim, dim) / (qn * norm[i]) : 0;
  } else {
    memcpy(rel, scores, n * sizeof(double));
  }
  memset(taken, 0, n);
  for (t = 0; t < k; t++) {
    size_t best = n;
    double bv = 0;
    for (i = 0; i < n; i++) {
      double v;
      if (taken[i]) continue;
      v = t == 0 ? rel[i] : lambda * rel[i] - (1 - lambda) * near[i];
      if (best == n || v > bv ||
          (v == bv && id_cmp(ids[i], lens[i], ids[best], lens[best]) < 0)) {
        best = i;
        bv = v;
      }
    }
    order[t] = best;
    taken[best] = 1;
    if (t + 1 == k) break; /* nothing is picked after the last */
    for (i = 0; i < n; i++) { /* the similarity to the new one */
      double c;
      if (taken[i]) continue;
      c = norm[i] > 0 && norm[best] > 0
              ? dot(vecs + i * dim, vecs + best * dim, dim) / (norm[i] * norm[best])
              : 0;
      if (t == 0 || c > near[i]) near[i] = c;
    }
  }
  rag_free(norm);
  return RAG_OK;
}

void rag_rerank_litm(size_t n, int best_first, size_t *order) {
  size_t i, p = 0;
  if (best_first) { /* evens ascending, then odds descending */
    for (i = 0; i < n; i += 2) order[p++] = i;
    for (i = n - (n % 2 == 0 ? 1 : 2); p < n; i -= 2) order[p++] = i;
    return;
  }
  /* from the worst: even steps go to the front, odd ones to the back,
  ** so the front holds the ranks whose distance from the last is even */
  {
    size_t front = (n + 1) / 2, back = n / 2;
    /* the front, left to right, was built last to first */
    for (i = 0; i < front; i++) order[i] = n - 1 - 2 * (front - 1 - i);
    for (i = 0; i < back; i++) order[front + i] = n - 2 - 2 * i;
  }
}

typedef struct ranked {
  double p;
  const char *id;
  size_t len, pos;
} ranked;

static int cmp_ranked(const void *x, const void *y) {
  const ranked *a = (const ranked *)x, *b = (const ranked *)y;
  if (a->p != b->p) return a->p > b->p ? -1 : 1;
  return id_cmp(a->id, a->len, b->id, b->len);
}

int rag_rerank_top_p(const double *scores, size_t n, double p, const char *const *ids,
                     const size_t *lens, size_t *keep, size_t *m) {
  ranked *r;
  double mx = -HUGE_VAL, sum = 0, cum = 0;
  size_t i;
  *m = 0;
  if (n == 0) return RAG_OK;
  if (RAG_MUL_OVERFLOWS(n, sizeof *r)) return RAG_ENOMEM;
  if ((r = (ranked *)rag_malloc(n * sizeof *r)) == NULL) return RAG_ENOMEM;
  for (i = 0; i < n; i++)
    if (scores[i] > mx) mx = scores[i];
  for (i = 0; i < n; i++) sum += exp(scores[i] - mx);
  for (i = 0; i < n; i++) {
    r[i].p = exp(scores[i] - mx) / sum;
    r[i].id = ids[i];
    r[i].len = lens[i];
    r[i].pos = i;
  }
  qsort(r, n, sizeof *r, cmp_ranked);
  for (i = 0; i < n; i++) {
    cum += r[i].p;
    if (!(cum <= p || fabs(cum - p) <= 1e-6 + 1e-5 * fabs(p))) break;
    keep[(*m)++] = r[i].pos;
  }
  if (*m == 0) keep[(*m)++] = r[0].pos;
  rag_free(r);
  return RAG_OK;
}
