/*
** rag_fuse.c: reciprocal rank fusion and score fusion of hit lists. One
** pass maps every entry to a document number through an open-addressing
** table over the borrowed ids, marking repeats inside a list; the fusions
** then add up per document and sort.
*/
#include "rag_fuse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rag_fnv.h"
#include "rag_ids.h"
#include "rag_probe.h"

#define NONE UINT32_MAX

/* Scratch of one fusion: the document of each entry (NONE: a repeat). */
typedef struct docs {
  uint32_t *slot; /* per entry */
  uint32_t *hash; /* per document */
  uint32_t *table; /* document + 1; 0 empty */
  rag_fused *tmp;  /* the sort's scratch */
  const rag_fused *out; /* the documents */
  size_t mask, n;
} docs;

/* The key of document i, for rag_probe_find. */
static const void *doc_key(const void *ud, uint32_t i, size_t *len, uint32_t *hash) {
  const docs *d = (const docs *)ud;
  *len = d->out[i].len;
  *hash = d->hash[i];
  return d->out[i].id;
}

static size_t total_of(const rag_fuse_list *l, size_t nl, int *overflow) {
  size_t t = 0, i;
  *overflow = 0;
  for (i = 0; i < nl; i++) {
    if (l[i].n > (size_t)RAG_IDS_MAX - t) *overflow = 1;
    else t += l[i].n;
  }
  return t;
}

/* Numbers every distinct id in out[0..d->n) and fills d->slot. */
static int intern(const rag_fuse_list *l, size_t nl, size_t total, rag_fused *out, docs *d) {
  size_t cap = 16, i, j, e = 0;
  uint32_t *mark;
  while (cap < 2 * total) cap *= 2;
  if (RAG_MUL_OVERFLOWS(cap + 3 * total, sizeof(uint32_t))) return RAG_ENOMEM;
  if (RAG_MUL_OVERFLOWS(total / 2 + 1, sizeof(rag_fused))) return RAG_ENOMEM;
  d->slot = (uint32_t *)rag_malloc((cap + 3 * total + 1) * sizeof(uint32_t));
  d->tmp = (rag_fused *)rag_malloc((total / 2 + 1) * sizeof(rag_fused));
  if (d->slot == NULL || d->tmp == NULL) {
    rag_free(d->slot);
    rag_free(d->tmp);
    return RAG_ENOMEM;
  }
  d->hash = d->slot + total;
  mark = d->hash + total; /* list + 1 that last held the document */
  d->table = mark + total;
  memset(d->table, 0, cap * sizeof(uint32_t));
  d->mask = cap - 1;
  d->n = 0;
  d->out = out;
  for (i = 0; i < nl; i++) {
    for (j = 0; j < l[i].n; j++, e++) {
      const char *id = l[i].ids[j];
      size_t len = l[i].lens[j];
      uint32_t h = rag_fnv32(id, len), s;
      size_t p = rag_probe_find(d->table, d->mask, id, len, h, doc_key, d);
      if (d->table[p] != 0) {
        s = d->table[p] - 1;
      } else {
        s = (uint32_t)d->n++;
        d->table[p] = s + 1;
        d->hash[s] = h;
        mark[s] = 0;
        out[s].id = id;
        out[s].len = len;
        out[s].score = 0;
      }
      d->slot[e] = mark[s] == i + 1 ? NONE : s;
      mark[s] = (uint32_t)(i + 1);
    }
  }
  return RAG_OK;
}

/* Better first: higher score, then smaller id bytes. */
static int before(const rag_fused *a, const rag_fused *b) {
  size_t m;
  int c;
  if (a->score != b->score) return a->score > b->score;
  m = a->len < b->len ? a->len : b->len;
  c = m ? memcmp(a->id, b->id, m) : 0;
  return c != 0 ? c < 0 : a->len < b->len;
}

/* Merge sort of a[0..n) by `before`, through tmp (n entries); stable. */
static void sort_fused(rag_fused *a, rag_fused *tmp, size_t n) {
  size_t i, j, k, mid;
  if (n <= 16) { /* insertion */
    for (i = 1; i < n; i++) {
      rag_fused x = a[i];
      for (j = i; j > 0 && before(&x, &a[j - 1]); j--) a[j] = a[j - 1];
      a[j] = x;
    }
    return;
  }
  mid = n / 2;
  sort_fused(a, tmp, mid);
  sort_fused(a + mid, tmp, n - mid);
  if (!before(&a[mid], &a[mid - 1])) return; /* already in order */
  memcpy(tmp, a, mid * sizeof *a);
  for (i = 0, j = mid, k = 0; i < mid && j < n;) a[k++] = before(&a[j], &tmp[i]) ? a[j++] : tmp[i++];
  while (i < mid) a[k++] = tmp[i++];
}

/* Sifts a[i] down a heap of n whose root is the worst (latest in order). */
static void sift(rag_fused *a, size_t n, size_t i) {
  for (;;) {
    size_t c = 2 * i + 1;
    rag_fused t;
    if (c >= n) return;
    if (c + 1 < n && before(&a[c], &a[c + 1])) c++;
    if (!before(&a[i], &a[c])) return;
    t = a[i];
    a[i] = a[c];
    a[c] = t;
    i = c;
  }
}

/* Sorts the best `limit` documents to the front of out; *n gets their count. */
static void finish(docs *d, size_t limit, rag_fused *out, size_t *n) {
  rag_fused *tmp = d->tmp; /* room for half the entries */
  size_t i;
  if (limit < d->n && limit <= d->n / 2) { /* keep the best `limit` in a heap, in tmp */
    for (i = 0; i < limit; i++) tmp[i] = out[i];
    for (i = limit / 2; i-- > 0;) sift(tmp, limit, i);
    for (i = limit; i < d->n && limit > 0; i++)
      if (before(&out[i], &tmp[0])) {
        tmp[0] = out[i];
        sift(tmp, limit, 0);
      }
    memcpy(out, tmp, limit * sizeof *out);
    d->n = limit;
  }
  sort_fused(out, tmp, d->n);
  *n = d->n < limit ? d->n : limit;
  rag_free(d->slot);
  rag_free(d->tmp);
}

int rag_fuse_rrf(const rag_fuse_list *l, size_t nl, double k, double base, double div,
                 size_t limit, rag_fused *out, size_t *n) {
  size_t total, i, j, e = 0;
  int overflow, rc;
  docs d;
  *n = 0;
  if (!(k + base > 0) || !(div > 0)) return RAG_EINVAL;
  total = total_of(l, nl, &overflow);
  if (overflow) return RAG_ETOOBIG;
  if (total == 0) return RAG_OK;
  if ((rc = intern(l, nl, total, out, &d)) != RAG_OK) return rc;
  for (i = 0; i < nl; i++)
    for (j = 0; j < l[i].n; j++, e++)
      if (d.slot[e] != NONE) out[d.slot[e]].score += l[i].weight / (k + base + (double)j);
  if (div != 1)
    for (i = 0; i < d.n; i++) out[i].score /= div;
  finish(&d, limit, out, n);
  return RAG_OK;
}

/* The normalised value of s in a list with these statistics. */
static double normal(rag_fuse_method m, double s, double lo, double hi, double mean,
                     double sd) {
  switch (m) {
    case RAG_FUSE_MINMAX:
      if (hi == lo) return hi > 0 ? 1 : 0;
      return (s - lo) / (hi - lo);
    case RAG_FUSE_ZSCORE:
      return sd == 0 ? 0 : (s - mean) / sd;
    default:
      return sd == 0 ? 0 : (s - (mean - 3 * sd)) / ((mean + 3 * sd) - (mean - 3 * sd));
  }
}

int rag_fuse_scores(const rag_fuse_list *l, size_t nl, rag_fuse_method method, int max,
                    size_t limit, rag_fused *out, size_t *n) {
  size_t total, i, j, e = 0;
  int overflow, rc;
  unsigned char *seen;
  docs d;
  *n = 0;
  total = total_of(l, nl, &overflow);
  if (overflow) return RAG_ETOOBIG;
  if (total == 0) return RAG_OK;
  if ((rc = intern(l, nl, total, out, &d)) != RAG_OK) return rc;
  if ((seen = (unsigned char *)rag_malloc(d.n)) == NULL) {
    rag_free(d.slot);
    rag_free(d.tmp);
    return RAG_ENOMEM;
  }
  memset(seen, 0, d.n);
  for (i = 0; i < nl; i++) {
    size_t first = e, m = 0;
    double lo = HUGE_VAL, hi = -HUGE_VAL, sum = 0, mean, ss = 0, sd;
    for (j = 0; j < l[i].n; j++, e++) {
      double s = l[i].scores[j];
      if (d.slot[e] == NONE) continue;
      m++;
      sum += s;
      if (s < lo) lo = s;
      if (s > hi) hi = s;
    }
    if (m == 0) continue;
    mean = sum / (double)m;
    for (j = 0, e = first; j < l[i].n; j++, e++)
      if (d.slot[e] != NONE) ss += (l[i].scores[j] - mean) * (l[i].scores[j] - mean);
    sd = sqrt(ss / (double)m);
    for (j = 0, e = first; j < l[i].n; j++, e++) {
      uint32_t s = d.slot[e];
      double v;
      if (s == NONE) continue;
      v = l[i].weight * normal(method, l[i].scores[j], lo, hi, mean, sd);
      if (!max) out[s].score += v;
      else if (!seen[s] || v > out[s].score) out[s].score = v;
      seen[s] = 1;
    }
  }
  rag_free(seen);
  finish(&d, limit, out, n);
  return RAG_OK;
}
