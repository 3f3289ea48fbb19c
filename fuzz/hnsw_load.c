/*
** fuzz/hnsw_load.c: rag_hnsw_load_mem on any bytes, in the modes of
** bm25_load.c: 0 loads the rest as is; 1 builds a graph from vectors coded
** in the rest (dim 1..40, every metric and dtype, both kernel sets, M 2..6
** and ef_construction 4..32 so that a few dozen vectors give several
** levels; replacements and removals leave tombstones), dumps it, damages
** the dump (flipped bits, truncations, overwritten bytes) and loads that;
** 2 edits its sections (links, levels, counts, rows) and rewrites lengths,
** size and every CRC, so that the graph checks decide; 3 loads the rest
** with its size and CRCs recomputed. A failed load must say RAG_EFORMAT,
** RAG_EVERSION or RAG_ECORRUPT. A loaded graph must pass rag_hnsw_check;
** its hits must be live, distinct, best first with ties by id, and score
** what is computed here from its own rows; a small filter must give the
** exact top k of its ids; it must take adds, removes and a compaction, and
** dump to bytes that load back and dump identically, and that go on
** identically under the same operations. The undamaged dump must load into
** a graph that searches exactly as the one it came from.
*/
#include <stdlib.h>

#include "rag_hnsw.h"
#include "vecfuzz.h"

#define NSEC 6
#define NQ 4

/*
** Live ids of an index (borrowed bytes: valid until it changes) with each
** one's exact score, and the entry of every node (-1: a tombstone; the
** empty id of a tombstone cannot be told from a live empty id).
*/
typedef struct truth {
  size_t n, nodes;
  const char **id;
  size_t *len;
  double *score, *mag;
  long *of; /* node -> entry */
} truth;

static size_t nodes(const rag_hnsw *h) {
  rag_hnsw_stats s;
  rag_hnsw_stats_get(h, &s);
  return s.count + s.dead;
}

static void truth_of(const rag_hnsw *h, const float *q, truth *t) {
  const rag_hnsw_opts *o = rag_hnsw_config(h);
  size_t n = nodes(h), i;
  float *p = floats(o->dim), *row = floats(o->dim);
  long empty = -1;
  prepare_like(q, o->dim, o->metric, p);
  t->n = 0;
  t->nodes = n;
  t->id = (const char **)malloc((n + 1) * sizeof *t->id);
  t->len = (size_t *)malloc((n + 1) * sizeof *t->len);
  t->score = (double *)malloc((n + 1) * sizeof *t->score);
  t->mag = (double *)malloc((n + 1) * sizeof *t->mag);
  t->of = (long *)malloc((n + 1) * sizeof *t->of);
  must(t->id && t->len && t->score && t->mag && t->of);
  for (i = 0; i < n; i++) {
    size_t len;
    const char *id = rag_hnsw_id(h, (uint32_t)i, &len);
    t->of[i] = -1;
    if (!rag_hnsw_get(h, id, len, row)) continue; /* a tombstone */
    if (len == 0 && empty >= 0) { /* "" of a tombstone, or the live "" again */
      t->of[i] = empty;
      continue;
    }
    if (len == 0) empty = (long)t->n;
    t->of[i] = (long)t->n;
    t->id[t->n] = id;
    t->len[t->n] = len;
    t->score[t->n] = exact_score(p, row, o->dim, o->metric, &t->mag[t->n]);
    t->n++;
  }
  must(t->n == rag_hnsw_count(h));
  free(p);
  free(row);
}

static void truth_free(truth *t) {
  free(t->id);
  free(t->len);
  free(t->score);
  free(t->mag);
  free(t->of);
}

/* The entry of a hit's node, which must be live. */
static size_t truth_find(const truth *t, uint32_t node) {
  must(node < t->nodes && t->of[node] >= 0);
  return (size_t)t->of[node];
}

static int in_filter(const rag_id_filter *f, const char *id, size_t len) {
  size_t i;
  for (i = 0; f != NULL && i < f->n; i++)
    if (f->lens[i] == len && memcmp(f->ids[i], id, len) == 0) return 1;
  return f == NULL;
}

/* Search results copied out of the index. */
typedef struct result {
  size_t n;
  uint32_t *slot;
  double *score;
} result;

static void result_init(result *r, size_t cap) {
  r->n = 0;
  r->slot = (uint32_t *)malloc((cap + 1) * sizeof *r->slot);
  r->score = (double *)malloc((cap + 1) * sizeof *r->score);
  must(r->slot != NULL && r->score != NULL);
}

static void result_free(result *r) {
  free(r->slot);
  free(r->score);
}

/*
** Searches and checks the hits: at most k, live, distinct, in the filter,
** best first with ties by id, scores as computed here. A filter as small as
** these is searched exactly: then the count is min(k, allowed) and nothing
** allowed but left out scores clearly better than the last hit.
*/
static void search(rag_hnsw *h, const float *q, size_t k, size_t ef,
                   const rag_id_filter *f, const truth *tq, result *r) {
  const rag_hnsw_opts *o = rag_hnsw_config(h);
  const rag_hit *hits;
  size_t n, i, j, comp, nallowed = 0;
  const char *why;
  rag_vec_bad bad;
  truth t = *tq;
  unsigned char *seen;
  int want = predict(q, o->dim, o->metric, o->dtype, &comp, &why);
  int rc = rag_hnsw_search(h, q, k, ef, f, &hits, &n, &bad);
  r->n = 0;
  refused_as(rc, &bad, want, comp, why);
  if (rc != RAG_OK) return;
  for (j = 0; j < t.n; j++) nallowed += in_filter(f, t.id[j], t.len[j]);
  must(n <= k && n <= nallowed);
  if (f != NULL) must(n == (k < nallowed ? k : nallowed));
  seen = (unsigned char *)calloc(t.n + 1, 1);
  must(seen != NULL);
  for (i = 0; i < n; i++) {
    size_t len, pl;
    const char *id = rag_hnsw_id(h, hits[i].id, &len);
    j = truth_find(&t, hits[i].id);
    must(!seen[j] && in_filter(f, id, len));
    seen[j] = 1;
    must(isfinite(hits[i].score) &&
         close_to(hits[i].score, t.score[j], t.mag[j]));
    if (i > 0) {
      const char *prev = rag_hnsw_id(h, hits[i - 1].id, &pl);
      must(hits[i - 1].score > hits[i].score ||
           (hits[i - 1].score == hits[i].score &&
            id_cmp(prev, pl, id, len) < 0));
    }
    r->slot[i] = hits[i].id;
    r->score[i] = hits[i].score;
  }
  r->n = n;
  if (f != NULL && n > 0) {
    size_t last = truth_find(&t, hits[n - 1].id);
    for (j = 0; j < t.n; j++) {
      if (seen[j] || !in_filter(f, t.id[j], t.len[j])) continue;
      must(t.score[j] - t.score[last] <=
           1e-4 * (t.mag[j] + t.mag[last]) + 1e-42);
    }
  }
  free(seen);
}

static void same(const result *x, const result *y) {
  size_t i;
  must(x->n == y->n);
  for (i = 0; i < x->n; i++)
    must(x->slot[i] == y->slot[i] &&
         memcmp(&x->score[i], &y->score[i], sizeof(double)) == 0);
}

static const char *const fids[] = {"a", "ab",       "x\0y", "",    "d5",
                                   "Z", "\xff\xfe", "a",    "nope"};
static const size_t flens[] = {1, 2, 3, 0, 2, 1, 2, 1, 4};

/* Queries (dim floats each, the caller frees them): fixed ones, one from
** the input, the first live row. */
static void queries(const rag_hnsw *h, input *in, float *qs[NQ]) {
  size_t d = rag_hnsw_config(h)->dim, i, n = nodes(h);
  for (i = 0; i < NQ; i++) qs[i] = floats(d);
  for (i = 0; i < d; i++) {
    qs[0][i] = 1.0f;
    qs[1][i] = (float)((int)(i % 5) - 2) + 0.5f;
  }
  make_vector(in, d, qs[2]);
  memcpy(qs[3], qs[1], d * sizeof(float));
  for (i = 0; i < n; i++) {
    size_t len;
    const char *id = rag_hnsw_id(h, (uint32_t)i, &len);
    if (rag_hnsw_get(h, id, len, qs[3])) break;
  }
}

/*
** Every kind of search on h; with `twin` (the same graph), the same hits bit
** for bit when both score with the same kernels (a file does not keep
** `portable`: a loaded graph has the default ones).
*/
static void searches(rag_hnsw *h, rag_hnsw *twin, float *qs[NQ], size_t nq,
                     uint8_t c) {
  rag_id_filter f = {fids, flens, 9};
  size_t count = rag_hnsw_count(h), qi, ki;
  size_t ks[3], efs[3];
  result r, s;
  if (twin != NULL && rag_hnsw_kernel(twin)->simd != rag_hnsw_kernel(h)->simd)
    twin = NULL;
  ks[0] = 1;
  ks[1] = 1 + c % 8;
  ks[2] = count + 2;
  efs[0] = 0;
  efs[1] = 1 + (c >> 3) % 8;
  efs[2] = count + 1;
  result_init(&r, count + 8);
  result_init(&s, count + 8);
  for (qi = 0; qi < nq; qi++) {
    truth t, tt;
    truth_of(h, qs[qi], &t);
    if (twin != NULL) truth_of(twin, qs[qi], &tt);
    for (ki = 0; ki < 3; ki++) {
      search(h, qs[qi], ks[ki], efs[ki], NULL, &t, &r);
      if (twin != NULL) {
        search(twin, qs[qi], ks[ki], efs[ki], NULL, &tt, &s);
        same(&r, &s);
      }
    }
    search(h, qs[qi], ks[1], efs[1], &f, &t, &r);
    if (twin != NULL) {
      search(twin, qs[qi], ks[1], efs[1], &f, &tt, &s);
      same(&r, &s);
      truth_free(&tt);
    }
    truth_free(&t);
  }
  result_free(&r);
  result_free(&s);
}

/* The same operations on a and b (a loaded copy of a): the dumps stay equal. */
static void go_on(rag_hnsw *a, rag_hnsw *b, float *qs[NQ]) {
  static const char *const nid[3] = {"fuzz\0new", "a", "zz"};
  static const size_t nlen[3] = {8, 1, 2};
  unsigned char *da = NULL, *db = NULL;
  size_t na = 0, nb = 0, i;
  rag_vec_bad bad;
  for (i = 0; i < 3; i++) {
    int ra, rb, removed;
    ra = rag_hnsw_add(a, nid[i], nlen[i], qs[i == 1 ? 0 : 1], &bad);
    rb = rag_hnsw_add(b, nid[i], nlen[i], qs[i == 1 ? 0 : 1], &bad);
    must(ra == RAG_OK && rb == RAG_OK);
    must(rag_hnsw_check(a) && rag_hnsw_check(b));
    if (i == 1) {
      rag_hnsw_remove(a, "b", 1, &removed);
      rag_hnsw_remove(b, "b", 1, &rb);
      must(removed == rb && rag_hnsw_check(a) && rag_hnsw_check(b));
    }
  }
  must(rag_hnsw_dump(a, &da, &na) == RAG_OK &&
       rag_hnsw_dump(b, &db, &nb) == RAG_OK);
  must(na == nb && memcmp(da, db, na) == 0);
  rag_free(da);
  rag_free(db);
}

/* Everything a loaded graph must survive. */
static void exercise(rag_hnsw *h, input *in) {
  const rag_hnsw_opts *o = rag_hnsw_config(h);
  unsigned char *d1 = NULL, *d2 = NULL;
  size_t n1 = 0, n2 = 0, before, d = o->dim;
  float *qs[NQ], *got = floats(d);
  rag_hnsw_stats st;
  const char *why;
  rag_vec_bad bad;
  rag_hnsw *c;
  size_t i;
  int removed;
  uint8_t choice;
  must(rag_hnsw_check(h));
  queries(h, in, qs);
  choice = take(in);
  searches(h, NULL, qs, NQ, choice);
  before = rag_hnsw_count(h);
  {
    size_t n = nodes(h);
    for (i = 0; i < n; i++) { /* remove the first live id, twice */
      char id[256];
      size_t len;
      const char *s = rag_hnsw_id(h, (uint32_t)i, &len);
      if (len > sizeof id || !rag_hnsw_get(h, s, len, got)) continue;
      memcpy(id, s, len);
      rag_hnsw_remove(h, id, len, &removed);
      must(removed == 1 && rag_hnsw_count(h) == before - 1 &&
           rag_hnsw_check(h));
      must(rag_hnsw_get(h, id, len, got) == 0);
      rag_hnsw_remove(h, id, len, &removed);
      must(removed == 0);
      break;
    }
  }
  /* adds: a new id, then its replacement by the input's query if sound */
  before = rag_hnsw_count(h);
  must(rag_hnsw_add(h, "fuzz\0new", 8, qs[0], &bad) == RAG_OK);
  must(rag_hnsw_check(h) && rag_hnsw_count(h) == before + 1);
  {
    size_t comp;
    const char *w;
    int want = predict(qs[2], d, o->metric, o->dtype, &comp, &w);
    refused_as(rag_hnsw_add(h, "fuzz\0new", 8, qs[2], &bad), &bad, want, comp,
               w);
    must(rag_hnsw_check(h) && rag_hnsw_count(h) == before + 1);
    if (want == RAG_OK) {
      float *p = floats(d);
      prepare_like(qs[2], d, o->metric, p);
      must(rag_hnsw_get(h, "fuzz\0new", 8, got) == 1 &&
           decoded_ok(got, p, d, o->dtype));
      free(p);
    }
  }
  /* the dump loads back, dumps the same, searches and goes on the same */
  must(rag_hnsw_dump(h, &d1, &n1) == RAG_OK);
  must(rag_hnsw_load_mem(d1, n1, &c, &why) == RAG_OK);
  must(rag_hnsw_check(c) && rag_hnsw_count(c) == rag_hnsw_count(h));
  must(rag_hnsw_dump(c, &d2, &n2) == RAG_OK);
  must(n1 == n2 && memcmp(d1, d2, n1) == 0);
  searches(h, c, qs, 2, (uint8_t)(choice * 13));
  go_on(h, c, qs);
  /* compaction drops every tombstone and keeps every live vector */
  before = rag_hnsw_count(h);
  must(rag_hnsw_compact(h) == RAG_OK && rag_hnsw_check(h));
  rag_hnsw_stats_get(h, &st);
  must(st.count == before && st.dead == 0);
  searches(h, NULL, qs + 2, 1, (uint8_t)(choice * 29));
  rag_free(d1);
  rag_free(d2);
  rag_hnsw_free(c);
  for (i = 0; i < NQ; i++) free(qs[i]);
  free(got);
}

/* A graph from the vectors in `in`: options, adds, removes, compactions. */
static rag_hnsw *build(input *in) {
  rag_hnsw_opts o;
  rag_hnsw *h;
  size_t nops = 0;
  uint8_t c0 = take(in), c1 = take(in), c2 = take(in), c3 = take(in);
  rag_hnsw_defaults(&o, 1 + c0 % MAXDIM);
  o.metric = (rag_metric)(c1 % RAG_NMETRICS);
  o.dtype = (rag_dtype)((c1 / RAG_NMETRICS) % RAG_NDTYPES);
  o.portable = (c1 >> 4) & 1;
  o.M = 2 + c2 % 5;
  o.ef_construction = 4 + c3 % 29;
  o.ef_search = 1 + (c2 >> 3) % 16;
  o.seed = take(in);
  must(rag_hnsw_new(&o, &h) == RAG_OK);
  while (more(in) && nops++ < 48) {
    uint8_t op = take(in);
    const ident *id = &ids[pick_id(take(in))];
    if (op % 16 == 15) {
      must(rag_hnsw_compact(h) == RAG_OK);
    } else if (op % 8 >= 6) {
      int removed;
      rag_hnsw_remove(h, id->s, id->n, &removed);
    } else {
      float x[MAXDIM];
      size_t comp, before = rag_hnsw_count(h);
      const char *why;
      rag_vec_bad bad;
      int want;
      make_vector(in, o.dim, x);
      want = predict(x, o.dim, o.metric, o.dtype, &comp, &why);
      refused_as(rag_hnsw_add(h, id->s, id->n, x, &bad), &bad, want, comp, why);
      if (want != RAG_OK) must(rag_hnsw_count(h) == before);
    }
  }
  must(rag_hnsw_check(h)); /* hnsw_ops checks after every operation */
  return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rag_hnsw *h = NULL;
  const char *why = NULL;
  input in;
  int rc, mode;
  if (size < 1) return 0;
  mode = data[0] % 4;
  data++;
  size--;
  if (mode == 0 || mode == 3) {
    unsigned char *p = (unsigned char *)rag_malloc(size + 1);
    must(p != NULL);
    if (size) memcpy(p, data, size);
    if (mode == 3) fix_crcs(p, size, NSEC);
    rc = rag_hnsw_load_mem(p, size, &h, &why);
    in.p = data + (size > RAG_FILE_HEADER ? RAG_FILE_HEADER : size);
    in.e = data + size;
    if (load_ok(rc, h, why)) exercise(h, &in);
    rag_hnsw_free(h);
    rag_free(p);
    return 0;
  }
  {
    /* modes 1 and 2: mutation parameters, then options and vectors */
    uint8_t nm, ops[4][5];
    size_t i, n0 = 0, n1 = 0, n;
    unsigned char *d0 = NULL, *d1 = NULL, *p;
    const uint8_t *start;
    rag_hnsw *a, *c = NULL;
    float *qs[NQ];
    in.p = data;
    in.e = data + size;
    nm = 1 + take(&in) % 4;
    for (i = 0; i < 4; i++) {
      size_t j;
      for (j = 0; j < 5; j++) ops[i][j] = take(&in);
    }
    start = in.p;
    a = build(&in);
    /* the undamaged dump loads, searches exactly the same and dumps identically
     */
    must(rag_hnsw_dump(a, &d0, &n0) == RAG_OK);
    must(rag_hnsw_load_mem(d0, n0, &c, &why) == RAG_OK && rag_hnsw_check(c));
    must(rag_hnsw_dump(c, &d1, &n1) == RAG_OK && n1 == n0 &&
         memcmp(d0, d1, n0) == 0);
    in.p = start;
    queries(a, &in, qs);
    searches(a, c, qs + 1, 2, ops[0][0]);
    for (i = 0; i < NQ; i++) free(qs[i]);
    rag_free(d1);
    rag_hnsw_free(c);
    rag_hnsw_free(a);
    if (mode == 1) {
      n = damage(d0, n0, (const uint8_t(*)[5])ops, nm);
      rc = rag_hnsw_load_mem(d0, n, &h, &why);
    } else {
      file f;
      split(&f, d0, n0, NSEC);
      for (i = 0; i < nm; i++)
        edit(&f, ops[i][0], ops[i][1],
             (uint32_t)ops[i][2] | (uint32_t)ops[i][3] << 8, ops[i][4]);
      p = join(&f, &n);
      unsplit(&f);
      rag_free(d0);
      d0 = p;
      rc = rag_hnsw_load_mem(p, n, &h, &why);
    }
    in.p = start;
    if (load_ok(rc, h, why)) exercise(h, &in);
    rag_hnsw_free(h);
    rag_free(d0);
  }
  return 0;
}
