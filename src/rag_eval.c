/*
** rag_eval.c: trec_eval's IR measures (see rag_eval.h). For each query one
** open-addressing table over its judged documents and its run drops repeats
** from the run and looks up grades; the measures then read the run as a list
** of grades in rank order, plus the judged grades sorted for the ideal DCG.
** Reference: trec_eval 9.0.8, m_ndcg_cut.c, m_recall.c, m_P.c,
** m_recip_rank.c, m_map_cut.c, m_success.c.
*/
#include "rag_eval.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rag_fnv.h"
#include "rag_probe.h"

/* {====== Measure names ======} */

static const struct {
  const char *name;
  rag_eval_kind kind;
  int needk; /* p and success mean nothing without a cutoff */
} names[] = {
  {"ndcg", RAG_EVAL_NDCG, 0},   {"recall", RAG_EVAL_RECALL, 0}, {"p", RAG_EVAL_P, 1},
  {"mrr", RAG_EVAL_MRR, 0},     {"map", RAG_EVAL_MAP, 0},       {"success", RAG_EVAL_SUCCESS, 1},
};

#define NNAMES (sizeof names / sizeof names[0])

/* k in decimal digits, 1..RAG_EVAL_MAX_K; 0 when it is not. */
static size_t parse_k(const char *s, size_t len) {
  size_t k = 0, i;
  if (len == 0) return 0;
  for (i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    k = k * 10 + (size_t)(s[i] - '0');
    if (k > RAG_EVAL_MAX_K) return 0;
  }
  return k;
}

int rag_eval_parse(const char *s, size_t len, rag_eval_measure *out) {
  const char *at = (const char *)memchr(s, '@', len);
  size_t nlen = at != NULL ? (size_t)(at - s) : len, i;
  for (i = 0; i < NNAMES; i++) {
    if (strlen(names[i].name) == nlen && memcmp(names[i].name, s, nlen) == 0) break;
  }
  if (i == NNAMES) return RAG_EINVAL;
  out->kind = names[i].kind;
  out->k = 0;
  if (at == NULL) return names[i].needk ? RAG_EFORMAT : RAG_OK;
  out->k = parse_k(at + 1, len - nlen - 1);
  return out->k == 0 ? RAG_EFORMAT : RAG_OK;
}

/* {====== One query ======} */

typedef struct entry {
  const char *id;
  size_t len;
  uint32_t hash;
  int seen; /* already met in the run */
  double grade;
} entry;

/* Scratch sized for the largest query; the arrays of one query after prepare. */
typedef struct work {
  uint32_t *table; /* entry + 1; 0 empty */
  entry *e;
  double *gains; /* the run's grades in rank order, repeats dropped */
  double *ideal; /* the grades > 0, best first */
  size_t mask, nret, nideal, nrel;
} work;

/* The key of entry i, for rag_probe_find. */
static const void *entry_key(const void *ud, uint32_t i, size_t *len, uint32_t *hash) {
  const entry *e = &((const work *)ud)->e[i];
  *len = e->len;
  *hash = e->hash;
  return e->id;
}

/* The table position of id, or the empty one where it would go. */
static size_t position(const work *w, const char *id, size_t len, uint32_t h) {
  return rag_probe_find(w->table, w->mask, id, len, h, entry_key, w);
}

static int by_grade_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x > y ? -1 : x < y;
}

static size_t table_size(size_t need) {
  size_t cap = 16;
  while (cap < 2 * need) cap *= 2;
  return cap;
}

/* Fills w's arrays for q. RAG_EINVAL: a document judged twice or a bad grade. */
static int prepare(work *w, const rag_eval_query *q, double level) {
  size_t i, n = 0, cap = table_size(q->nrun + q->ndocs);
  memset(w->table, 0, cap * sizeof(uint32_t));
  w->mask = cap - 1;
  w->nret = w->nideal = w->nrel = 0;
  for (i = 0; i < q->ndocs; i++) {
    uint32_t h = rag_fnv32(q->docs[i], q->doclens[i]);
    size_t p = position(w, q->docs[i], q->doclens[i], h);
    double g = q->grades[i];
    if (w->table[p] != 0 || !isfinite(g)) return RAG_EINVAL;
    w->e[n].id = q->docs[i];
    w->e[n].len = q->doclens[i];
    w->e[n].hash = h;
    w->e[n].seen = 0;
    w->e[n].grade = g;
    w->table[p] = (uint32_t)++n;
    if (g > 0) w->ideal[w->nideal++] = g;
    if (g >= level) w->nrel++;
  }
  for (i = 0; i < q->nrun; i++) {
    uint32_t h = rag_fnv32(q->run[i], q->runlens[i]);
    size_t p = position(w, q->run[i], q->runlens[i], h);
    entry *e;
    if (w->table[p] == 0) { /* unjudged: grade 0 */
      e = &w->e[n];
      e->id = q->run[i];
      e->len = q->runlens[i];
      e->hash = h;
      e->grade = 0;
      w->table[p] = (uint32_t)++n;
    } else {
      e = &w->e[w->table[p] - 1];
      if (e->seen) continue;
    }
    e->seen = 1;
    w->gains[w->nret++] = e->grade;
  }
  qsort(w->ideal, w->nideal, sizeof(double), by_grade_desc);
  return RAG_OK;
}

/* {====== Measures ======} */

static size_t cut(size_t n, size_t k) {
  return k != 0 && k < n ? k : n;
}

/* DCG with linear gains over the first k grades (all when k is 0). */
static double dcg(const double *g, size_t n, size_t k) {
  double sum = 0;
  size_t i, c = cut(n, k);
  for (i = 0; i < c; i++)
    if (g[i] > 0) sum += g[i] / log2((double)(i + 2)); /* rank i + 1 */
  return sum;
}

static double score(const work *w, const rag_eval_measure *m, double level) {
  const double *g = w->gains;
  size_t i, c = cut(w->nret, m->k), nrel = 0;
  double sum = 0, ideal;
  switch (m->kind) {
    case RAG_EVAL_NDCG:
      ideal = dcg(w->ideal, w->nideal, m->k);
      return ideal > 0 ? dcg(g, w->nret, m->k) / ideal : 0;
    case RAG_EVAL_MRR:
      for (i = 0; i < c; i++)
        if (g[i] >= level) return 1.0 / (double)(i + 1);
      return 0;
    case RAG_EVAL_SUCCESS:
      for (i = 0; i < c; i++)
        if (g[i] >= level) return 1;
      return 0;
    case RAG_EVAL_MAP: /* precision at each relevant retrieved, over all relevant */
      for (i = 0; i < c; i++)
        if (g[i] >= level) sum += (double)++nrel / (double)(i + 1);
      return w->nrel > 0 ? sum / (double)w->nrel : 0;
    default:
      for (i = 0; i < c; i++) nrel += g[i] >= level;
      if (m->kind == RAG_EVAL_P) return (double)nrel / (double)m->k; /* k even past the run */
      return w->nrel > 0 ? (double)nrel / (double)w->nrel : 0;
  }
}

/* {====== Queries ======} */

static int by_id(const void *a, const void *b) {
  const rag_eval_query *x = *(const rag_eval_query *const *)a;
  const rag_eval_query *y = *(const rag_eval_query *const *)b;
  size_t n = x->idlen < y->idlen ? x->idlen : y->idlen;
  int c = n > 0 ? memcmp(x->id, y->id, n) : 0;
  if (c != 0) return c;
  return x->idlen < y->idlen ? -1 : x->idlen > y->idlen;
}

/* The scratch for queries of at most `need` run entries plus judgements. */
static int work_new(work *w, size_t need) {
  size_t cap, per = sizeof(entry) + 2 * sizeof(double);
  char *p;
  if (need > (size_t)UINT32_MAX - 1 || need > ((size_t)-1) / 4) return RAG_ETOOBIG;
  cap = table_size(need);
  if (RAG_MUL_OVERFLOWS(need, per) || RAG_MUL_OVERFLOWS(cap, sizeof(uint32_t)) ||
      need * per > ((size_t)-1) - cap * sizeof(uint32_t))
    return RAG_ETOOBIG;
  p = (char *)rag_malloc(need * per + cap * sizeof(uint32_t) + 1);
  if (p == NULL) return RAG_ENOMEM;
  w->e = (entry *)(void *)p; /* entries first: the strictest alignment */
  w->gains = (double *)(void *)(w->e + need);
  w->ideal = w->gains + need;
  w->table = (uint32_t *)(void *)(w->ideal + need);
  return RAG_OK;
}

static int mean_of(const rag_eval_query *q, size_t nq, size_t nm, const double *per,
                   double *mean) {
  const rag_eval_query **ord;
  size_t i, j;
  for (j = 0; j < nm; j++) mean[j] = 0;
  if (nq == 0) return RAG_OK;
  if (RAG_MUL_OVERFLOWS(nq, sizeof *ord)) return RAG_ETOOBIG;
  ord = (const rag_eval_query **)rag_malloc(nq * sizeof *ord);
  if (ord == NULL) return RAG_ENOMEM;
  for (i = 0; i < nq; i++) ord[i] = &q[i];
  qsort(ord, nq, sizeof *ord, by_id);
  for (i = 0; i < nq; i++) {
    const double *row = per + (size_t)(ord[i] - q) * nm;
    for (j = 0; j < nm; j++) mean[j] += row[j];
  }
  for (j = 0; j < nm; j++) mean[j] /= (double)nq;
  rag_free(ord);
  return RAG_OK;
}

int rag_eval_ir(const rag_eval_query *q, size_t nq, const rag_eval_measure *m, size_t nm,
                double level, double *per, double *mean, size_t *bad) {
  work w;
  size_t i, j, need = 0;
  int rc;
  *bad = nq;
  if (!isfinite(level) || !(level > 0)) return RAG_EINVAL;
  if (RAG_MUL_OVERFLOWS(nq, nm)) return RAG_ETOOBIG;
  for (i = 0; i < nq; i++) {
    if (q[i].nrun > ((size_t)-1) - q[i].ndocs) return RAG_ETOOBIG;
    if (q[i].nrun + q[i].ndocs > need) need = q[i].nrun + q[i].ndocs;
  }
  if (nq > 0) {
    rc = work_new(&w, need);
    if (rc != RAG_OK) return rc;
    for (i = 0; i < nq; i++) {
      rc = prepare(&w, &q[i], level);
      if (rc != RAG_OK) {
        *bad = i;
        rag_free(w.e);
        return rc;
      }
      for (j = 0; j < nm; j++) per[i * nm + j] = score(&w, &m[j], level);
    }
    rag_free(w.e);
  }
  return mean_of(q, nq, nm, per, mean);
}
