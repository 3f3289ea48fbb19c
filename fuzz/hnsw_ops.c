/*
** fuzz/hnsw_ops.c: a sequence of adds (new ids and replacements, from a
** small id space), removes, compactions, bursts of churn, searches with and
** without filters, and dump/load round trips on two HNSW graphs built the
** same way, one with the portable kernels and one with the AVX2 ones (where
** the CPU has them), next to an exact rag_vec over the same vectors. The
** harness keeps the live ids and their vectors. After every operation both
** graphs pass rag_hnsw_check, count the live ids, and report the
** tombstones and rebuilds the removal rules give. Every hit is live, once,
** in the filter, best first with ties by id bytes, and scores within 1e-4
** (of the terms' magnitude) what is computed here in double: from the
** vectors kept here for f32 (unit length for cosine), from the stored rows
** for f16 and i8, which must themselves be within the encoding's step of
** the vectors. A small filter is searched exactly: it gives the exact
** index's filtered hits. With k and ef at least the count, a search returns
** every live id once, as the exact index does (bit for bit with the
** portable kernels, within tolerance with the others).
*/
#include <stdlib.h>

#include "rag_hnsw.h"
#include "rag_vec.h"
#include "vecfuzz.h"

#define MAXK (NIDS + 4)
#define NG 2 /* graphs: portable, then SIMD */

typedef struct model {
  int live[NIDS];
  float x[NIDS][MAXDIM]; /* as added */
  float p[NIDS][MAXDIM]; /* as prepared: unit length under cosine */
  size_t dead, rebuilds; /* what every graph must report */
} model;

typedef struct world {
  rag_hnsw *g[NG];
  rag_vec *v; /* exact, portable kernels */
  size_t dim;
  rag_metric metric;
  rag_dtype dtype;
  model m;
} world;

typedef struct result {
  size_t n;
  int id[MAXK];
  double score[MAXK];
} result;

static size_t live(const model *m) {
  size_t i, n = 0;
  for (i = 0; i < NIDS; i++) n += m->live[i] != 0;
  return n;
}

/* The removal rules: a rebuild once tombstones outnumber live nodes (and
** are 16 at least); a reset when none is live. */
static void tombstone(model *m) {
  size_t n = live(m);
  m->dead++;
  if (n == 0) {
    m->dead = 0;
  } else if (m->dead >= 16 && m->dead > n) {
    m->dead = 0;
    m->rebuilds++;
  }
}

static void after(const world *w) {
  size_t i, n = live(&w->m);
  for (i = 0; i < NG; i++) {
    rag_hnsw_stats s;
    must(rag_hnsw_check(w->g[i]));
    rag_hnsw_stats_get(w->g[i], &s);
    must(s.count == n && rag_hnsw_count(w->g[i]) == n);
    must(s.dead == w->m.dead && s.rebuilds == w->m.rebuilds);
    must((s.levels > 0) == (s.count + s.dead > 0));
  }
  must(rag_vec_check(w->v) && rag_vec_count(w->v) == n);
}

/* The stored row of id d in graph g, checked against the vector kept here. */
static void stored(const world *w, rag_hnsw *g, int d, float *row) {
  must(rag_hnsw_get(g, ids[d].s, ids[d].n, row) == 1);
  must(decoded_ok(row, w->m.p[d], w->dim, w->dtype));
}

static void add(world *w, int d, const float *x) {
  size_t comp, i;
  const char *why;
  rag_vec_bad bad;
  int want = predict(x, w->dim, w->metric, w->dtype, &comp, &why);
  for (i = 0; i < NG; i++)
    refused_as(rag_hnsw_add(w->g[i], ids[d].s, ids[d].n, x, &bad), &bad, want,
               comp, why);
  refused_as(rag_vec_add(w->v, ids[d].s, ids[d].n, x, &bad), &bad, want, comp,
             why);
  if (want != RAG_OK) return;
  memcpy(w->m.x[d], x, w->dim * sizeof *x);
  prepare_like(x, w->dim, w->metric, w->m.p[d]);
  if (w->m.live[d]) {
    tombstone(&w->m);
  }
  w->m.live[d] = 1;
  {
    float row[MAXDIM];
    for (i = 0; i < NG; i++) stored(w, w->g[i], d, row);
    must(rag_vec_get(w->v, ids[d].s, ids[d].n, row) == 1 &&
         decoded_ok(row, w->m.p[d], w->dim, w->dtype));
  }
}

static void del(world *w, int d) {
  size_t i;
  int removed;
  float row[MAXDIM];
  for (i = 0; i < NG; i++) {
    rag_hnsw_remove(w->g[i], ids[d].s, ids[d].n, &removed);
    must(removed == w->m.live[d]);
    must(rag_hnsw_get(w->g[i], ids[d].s, ids[d].n, row) == 0);
  }
  must(rag_vec_remove(w->v, ids[d].s, ids[d].n, &removed) == RAG_OK);
  must(removed == w->m.live[d]);
  if (w->m.live[d]) {
    w->m.live[d] = 0;
    tombstone(&w->m);
  }
}

static void compact(world *w) {
  size_t i;
  for (i = 0; i < NG; i++) must(rag_hnsw_compact(w->g[i]) == RAG_OK);
  if (w->m.dead > 0) {
    w->m.dead = 0;
    w->m.rebuilds++;
  }
}

/* A filter: ids from the input (absent, dead, repeated), sometimes "nope". */
typedef struct filt {
  const char *s[16];
  size_t n[16];
  rag_id_filter f;
  int in[NIDS];
} filt;

static const rag_id_filter *make_filter(input *in, filt *f) {
  uint8_t b = take(in);
  size_t i, n;
  memset(f->in, 0, sizeof f->in);
  if (!(b & 1)) return NULL;
  n = 1 + (b >> 1) % 8;
  for (i = 0; i < n; i++) {
    int d = pick_id(take(in));
    f->s[i] = ids[d].s;
    f->n[i] = ids[d].n;
    f->in[d] = 1;
  }
  if (b & 0x80) {
    f->s[n] = "nope";
    f->n[n++] = 4;
  }
  f->f.ids = f->s;
  f->f.lens = f->n;
  f->f.n = n;
  return &f->f;
}

/* The exact score of live id d for prepared query p, in graph g's terms. */
static double truth(const world *w, rag_hnsw *g, const float *p, int d,
                    double *mag) {
  float row[MAXDIM];
  if (w->dtype == RAG_F32)
    return exact_score(p, w->m.p[d], w->dim, w->metric, mag);
  stored(w, g, d, row);
  return exact_score(p, row, w->dim, w->metric, mag);
}

/*
** Searches graph g and checks its hits against the model; returns 0 when the
** query was refused (as predicted).
*/
static int search(world *w, rag_hnsw *g, const float *q, size_t k, size_t ef,
                  const rag_id_filter *f, const filt *fl, result *r) {
  const rag_hit *h;
  size_t n, i, comp, allowed = 0;
  const char *why;
  rag_vec_bad bad;
  float p[MAXDIM];
  int seen[NIDS], d;
  int want = predict(q, w->dim, w->metric, w->dtype, &comp, &why);
  int rc = rag_hnsw_search(g, q, k, ef, f, &h, &n, &bad);
  r->n = 0;
  refused_as(rc, &bad, want, comp, why);
  if (rc != RAG_OK) return 0;
  prepare_like(q, w->dim, w->metric, p);
  memset(seen, 0, sizeof seen);
  for (d = 0; d < NIDS; d++)
    allowed += w->m.live[d] && (f == NULL || fl->in[d]);
  must(n <= k && n <= allowed && n <= MAXK);
  if (f != NULL)
    must(n == (k < allowed ? k : allowed)); /* small filters are exact */
  for (i = 0; i < n; i++) {
    size_t len;
    const char *s = rag_hnsw_id(g, h[i].id, &len);
    double mag, want_score;
    d = which_id(s, len);
    must(d >= 0 && w->m.live[d] && !seen[d] && (f == NULL || fl->in[d]));
    seen[d] = 1;
    want_score = truth(w, g, p, d, &mag);
    must(isfinite(h[i].score) && close_to(h[i].score, want_score, mag));
    if (i > 0)
      must(r->score[i - 1] > h[i].score ||
           (r->score[i - 1] == h[i].score &&
            id_cmp(ids[r->id[i - 1]].s, ids[r->id[i - 1]].n, s, len) < 0));
    r->id[i] = d;
    r->score[i] = h[i].score;
  }
  r->n = n;
  return 1;
}

/* The exact index's hits, for the same query, k and filter. */
static void exact(world *w, const float *q, size_t k, const rag_id_filter *f,
                  result *r) {
  const rag_hit *h;
  size_t n, i;
  rag_vec_bad bad;
  must(rag_vec_search(w->v, q, k, f, &h, &n, &bad) == RAG_OK);
  must(n <= MAXK);
  for (i = 0; i < n; i++) {
    size_t len;
    const char *s = rag_vec_id(w->v, h[i].id, &len);
    r->id[i] = which_id(s, len);
    r->score[i] = h[i].score;
  }
  r->n = n;
}

static void same_bits(const result *x, const result *y) {
  size_t i;
  must(x->n == y->n);
  for (i = 0; i < x->n; i++)
    must(x->id[i] == y->id[i] &&
         memcmp(&x->score[i], &y->score[i], sizeof(double)) == 0);
}

/* Whether every id of x is in y with a score within tolerance, or else ties
** y's last hit within tolerance (a near tie at the k-th place may bring in
** either id). */
static int near_set(const world *w, const result *x, const result *y,
                    const float *p) {
  size_t i, j;
  for (i = 0; i < x->n; i++) {
    double mag, t = exact_score(p, w->m.p[x->id[i]], w->dim, w->metric, &mag);
    for (j = 0; j < y->n && y->id[j] != x->id[i]; j++) continue;
    if (j < y->n) {
      /* both scored the same row, each within 1e-4 of the truth */
      if (!(fabs(x->score[i] - y->score[j]) <=
            2e-4 * mag + 2e-4 * fabs(x->score[i]) + 1e-42))
        return 0;
    } else {
      double lmag,
          l = exact_score(p, w->m.p[y->id[y->n - 1]], w->dim, w->metric, &lmag);
      if (!(fabs(t - l) <= 2e-4 * (mag + lmag) + 1e-42)) return 0;
    }
  }
  return 1;
}

/* The same ids but for near ties at the k-th place, scores within
** tolerance (near ties may change the order). */
static void same_set(const world *w, const result *x, const result *y,
                     const float *q) {
  float p[MAXDIM];
  prepare_like(q, w->dim, w->metric, p);
  must(x->n == y->n);
  must(near_set(w, x, y, p) && near_set(w, y, x, p));
}

/* A query from the input, or a live vector as it was added. */
static void make_query(const world *w, input *in, float *q) {
  uint8_t b = take(in);
  if (b >= 0xC0) {
    int d = pick_id(b), tries;
    for (tries = 0; tries < NIDS && !w->m.live[d]; tries++) d = (d + 1) % NIDS;
    if (w->m.live[d]) {
      memcpy(q, w->m.x[d], w->dim * sizeof *q);
      return;
    }
  }
  make_vector(in, w->dim, q);
}

static void op_search(world *w, input *in) {
  float q[MAXDIM];
  filt fl;
  const rag_id_filter *f;
  result r[NG], e;
  uint8_t kb = take(in), eb = take(in);
  size_t k = kb % MAXK, ef = eb % 48, i, n = live(&w->m);
  int ok = 1;
  if (kb == 0xFF) k = (size_t)-1; /* every hit, however many */
  make_query(w, in, q);
  f = make_filter(in, &fl);
  for (i = 0; i < NG; i++) ok = search(w, w->g[i], q, k, ef, f, &fl, &r[i]);
  if (!ok) return;
  if (f != NULL && k > 0) { /* exact: the exact index's hits */
    exact(w, q, k < MAXK ? k : MAXK, f, &e);
    same_bits(&r[0], &e);
    same_set(w, &r[1], &e, q);
  } else if (k >= n) { /* the beam is max(ef, k): every live node is in reach */
    must(r[0].n == n && r[1].n == n); /* every live id, once */
    exact(w, q, MAXK, NULL, &e);
    same_bits(&r[0], &e);
    same_set(w, &r[1], &e, q);
  }
}

/* Every live id with k and ef at least the count. */
static void op_all(world *w, input *in) {
  uint8_t b = take(in);
  size_t n = live(&w->m), k = n + b % 3, ef = n + (b >> 2) % 3;
  float q[MAXDIM];
  result r[NG], e;
  size_t i;
  int ok = 1;
  make_query(w, in, q);
  for (i = 0; i < NG; i++) ok = search(w, w->g[i], q, k, ef, NULL, NULL, &r[i]);
  if (!ok) return;
  must(r[0].n == n && r[1].n == n);
  exact(w, q, MAXK, NULL, &e);
  same_bits(&r[0], &e);
  same_set(w, &r[1], &e, q);
}

/*
** The SIMD graph's dump loads back, dumps the same, and goes on like the
** original (a file does not keep `portable`: a loaded graph has the default
** kernels, so the portable graph stays as it is).
*/
static void op_reload(world *w, input *in) {
  uint8_t b = take(in);
  size_t gi = NG - 1;
  rag_hnsw *c;
  unsigned char *d1, *d2;
  size_t n1, n2;
  const char *why;
  rag_vec_bad bad;
  float x[MAXDIM];
  int d = pick_id(take(in));
  must(rag_hnsw_dump(w->g[gi], &d1, &n1) == RAG_OK);
  must(rag_hnsw_load_mem(d1, n1, &c, &why) == RAG_OK && rag_hnsw_check(c));
  must(rag_hnsw_dump(c, &d2, &n2) == RAG_OK && n1 == n2 &&
       memcmp(d1, d2, n1) == 0);
  rag_free(d1);
  rag_free(d2);
  rag_hnsw_free(w->g[gi]);
  w->g[gi] = c;
  if (b & 0x80) { /* one add on it and on a fresh load: the same graph */
    rag_hnsw *e;
    int want;
    size_t comp;
    make_vector(in, w->dim, x);
    want = predict(x, w->dim, w->metric, w->dtype, &comp, &why);
    if (want != RAG_OK) return;
    must(rag_hnsw_dump(c, &d1, &n1) == RAG_OK);
    must(rag_hnsw_load_mem(d1, n1, &e, &why) == RAG_OK);
    rag_free(d1);
    add(w, d, x); /* into every index, and the model */
    must(rag_hnsw_add(e, ids[d].s, ids[d].n, x, &bad) == RAG_OK);
    must(rag_hnsw_dump(w->g[gi], &d1, &n1) == RAG_OK &&
         rag_hnsw_dump(e, &d2, &n2) == RAG_OK);
    must(n1 == n2 && memcmp(d1, d2, n1) == 0);
    rag_free(d1);
    rag_free(d2);
    rag_hnsw_free(e);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static world w;
  rag_hnsw_opts o;
  input in;
  size_t i, churned = 0;
  uint8_t c0, c1, c2, c3;
  rag_vec_opts vo;
  if (size < 5) return 0;
  in.p = data;
  in.e = data + size;
  memset(&w, 0, sizeof w);
  c0 = take(&in);
  c1 = take(&in);
  c2 = take(&in);
  c3 = take(&in);
  rag_hnsw_defaults(&o, 1 + c0 % MAXDIM);
  o.metric = (rag_metric)(c1 % RAG_NMETRICS);
  o.dtype = (rag_dtype)((c1 / RAG_NMETRICS) % RAG_NDTYPES);
  o.M = 2 + c2 % 5;
  o.ef_construction = 4 + c3 % 29;
  o.ef_search = 1 + (c2 >> 3) % 16;
  o.seed = take(&in);
  w.dim = o.dim;
  w.metric = o.metric;
  w.dtype = o.dtype;
  for (i = 0; i < NG; i++) {
    o.portable = i == 0;
    must(rag_hnsw_new(&o, &w.g[i]) == RAG_OK);
  }
  memset(&vo, 0, sizeof vo);
  vo.dim = o.dim;
  vo.metric = o.metric;
  vo.dtype = o.dtype;
  vo.portable = 1;
  must(rag_vec_new(&vo, &w.v) == RAG_OK);
  while (more(&in)) {
    uint8_t op = take(&in) % 16;
    if (op <= 5) { /* add or replace */
      float x[MAXDIM];
      int d = pick_id(take(&in));
      make_vector(&in, w.dim, x);
      add(&w, d, x);
    } else if (op <= 8) {
      del(&w, pick_id(take(&in)));
    } else if (op == 9) {
      compact(&w);
    } else if (op <= 11) {
      op_search(&w, &in);
    } else if (op == 12) {
      op_all(&w, &in);
    } else if (op == 13) {
      op_reload(&w, &in);
    } else { /* churn: many replacements and removes, seeded */
      size_t count = take(&in) % 32, j;
      uint32_t seed = (uint32_t)take(&in) * 2654435761u + 1;
      for (j = 0; j < count && churned < 256; j++, churned++) {
        int d = (int)(lcg(&seed) % NFIXED);
        if (lcg(&seed) % 3 == 0) {
          del(&w, d);
        } else {
          float x[MAXDIM];
          size_t t;
          for (t = 0; t < w.dim; t++)
            x[t] = (float)((int)(lcg(&seed) % 9) - 4) * 0.25f;
          x[lcg(&seed) % w.dim] = 1.0f; /* never zero */
          add(&w, d, x);
        }
        after(&w);
      }
    }
    after(&w);
  }
  { /* at the end, every live id */
    input none = {NULL, NULL};
    op_all(&w, &none);
  }
  for (i = 0; i < NG; i++) rag_hnsw_free(w.g[i]);
  rag_vec_free(w.v);
  return 0;
}
