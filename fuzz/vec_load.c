/*
** fuzz/vec_load.c: rag_vec_load_mem on any bytes. The first byte picks a
** mode: 0 loads the rest as is; 1 builds an index from vectors coded in
** the rest (dim 1..40, every metric and dtype, both kernel sets, with a
** sketch or without), dumps it, damages the dump (flipped bits,
** truncations, overwritten bytes) and loads that; 2 edits the sections of
** such a dump and rewrites lengths, size and every CRC, so that the checks
** behind the checksums decide; 3 loads the
** rest with its size and CRCs recomputed. A failed load must say
** RAG_EFORMAT, RAG_EVERSION or RAG_ECORRUPT. A loaded index must pass
** rag_vec_check; its searches must be the exact top k of the scores
** computed here from its own rows, best first with ties by id; filtered
** searches and search_batch must agree with plain ones bit for bit; it must
** take a remove and adds, and dump to bytes that load back and dump
** identically. Every load is made three ways that must agree: copied,
** borrowed from a read-only page-aligned copy (as a mapped file is, so a
** write into it traps), and borrowed from an unaligned copy, which must
** copy; the borrowed index goes through everything the copied one does.
*/
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <stdlib.h>
#include <sys/mman.h>

#include "rag_vec.h"
#include "vecfuzz.h"

#define NSEC 8 /* of a version 3 dump */
#define NQ 4

/* A copy of search results that outlives the next call on the index. */
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

static void same(const result *x, const result *y) {
  size_t i;
  must(x->n == y->n);
  for (i = 0; i < x->n; i++)
    must(x->slot[i] == y->slot[i] &&
         memcmp(&x->score[i], &y->score[i], sizeof(double)) == 0);
}

static int slot_cmp(const rag_vec *v, uint32_t a, uint32_t b) {
  size_t na, nb;
  const char *sa = rag_vec_id(v, a, &na), *sb = rag_vec_id(v, b, &nb);
  return id_cmp(sa, na, sb, nb);
}

/* The exact score of every row for query q, from its own decoded rows. */
typedef struct truth {
  size_t n;
  double *score, *mag;
} truth;

static void truth_of(const rag_vec *v, const float *q, truth *t) {
  const rag_vec_opts *o = rag_vec_config(v);
  size_t i, n = rag_vec_count(v);
  float *p = floats(o->dim), *row = floats(o->dim);
  prepare_like(q, o->dim, o->metric, p);
  t->n = n;
  t->score = (double *)malloc((n + 1) * sizeof *t->score);
  t->mag = (double *)malloc((n + 1) * sizeof *t->mag);
  must(t->score != NULL && t->mag != NULL);
  for (i = 0; i < n; i++) {
    size_t len;
    const char *id = rag_vec_id(v, (uint32_t)i, &len);
    must(rag_vec_get(v, id, len, row) == 1);
    t->score[i] = exact_score(p, row, o->dim, o->metric, &t->mag[i]);
  }
  free(p);
  free(row);
}

static void truth_free(truth *t) {
  free(t->score);
  free(t->mag);
}

/*
** Searches and checks the hits: the count, order, ties, every score against
** the exact one, and that nothing allowed but left out scores better than
** the last hit. `allowed` (NULL: every row) marks the rows the filter lets in.
*/
static void search(rag_vec *v, const float *q, size_t k, const rag_id_filter *f,
                   const unsigned char *allowed, const truth *t, result *r) {
  const rag_vec_opts *o = rag_vec_config(v);
  const rag_hit *h;
  size_t n, i, comp, nallowed = 0, count = rag_vec_count(v);
  const char *why;
  rag_vec_bad bad;
  int want = predict(q, o->dim, o->metric, o->dtype, &comp, &why);
  int rc = rag_vec_search(v, q, k, f, &h, &n, &bad);
  r->n = 0;
  refused_as(rc, &bad, want, comp, why);
  if (rc != RAG_OK) return;
  for (i = 0; i < count; i++) nallowed += allowed == NULL || allowed[i];
  must(n == (k < nallowed ? k : nallowed));
  for (i = 0; i < n; i++) {
    uint32_t s = h[i].id;
    must(s < count && (allowed == NULL || allowed[s]));
    must(isfinite(h[i].score));
    must(close_to(h[i].score, t->score[s], t->mag[s]));
    if (i > 0)
      must(h[i - 1].score > h[i].score ||
           (h[i - 1].score == h[i].score && slot_cmp(v, h[i - 1].id, s) < 0));
    r->slot[i] = s;
    r->score[i] = h[i].score;
  }
  r->n = n;
  if (n > 0) { /* distinct, and the top k: nothing left out is clearly better */
    unsigned char *in = (unsigned char *)calloc(count + 1, 1);
    uint32_t last = r->slot[n - 1];
    must(in != NULL);
    for (i = 0; i < n; i++) {
      must(!in[r->slot[i]]);
      in[r->slot[i]] = 1;
    }
    for (i = 0; i < count; i++) {
      if (in[i] || (allowed != NULL && !allowed[i])) continue;
      must(t->score[i] - t->score[last] <=
           1e-4 * (t->mag[i] + t->mag[last]) + 1e-42);
    }
    free(in);
  }
}

static size_t min_size(size_t a, size_t b) {
  return a < b ? a : b;
}

/* Queries (dim floats each, the caller frees them): fixed ones, one from
** the input, one of the index's own rows. */
static void queries(const rag_vec *v, input *in, float *qs[NQ]) {
  size_t d = rag_vec_config(v)->dim, i;
  for (i = 0; i < NQ; i++) qs[i] = floats(d);
  for (i = 0; i < d; i++) {
    qs[0][i] = 1.0f;
    qs[1][i] = (float)((int)(i % 5) - 2) + 0.5f;
  }
  make_vector(in, d, qs[2]);
  if (rag_vec_count(v) > 0) {
    size_t len;
    const char *id = rag_vec_id(v, 0, &len);
    must(rag_vec_get(v, id, len, qs[3]) == 1);
  } else {
    memcpy(qs[3], qs[1], d * sizeof(float));
  }
}

/* Every kind of search; batch and filtered ones against plain ones. */
static void searches(rag_vec *v, float *qs[NQ], input *in) {
  static const char *const fids[] = {"a", "ab",       "x\0y", "",    "d5",
                                     "Z", "\xff\xfe", "a",    "nope"};
  static const size_t flens[] = {1, 2, 3, 0, 2, 1, 2, 1, 4};
  rag_id_filter f = {fids, flens, 9};
  const rag_vec_opts *o = rag_vec_config(v);
  size_t count = rag_vec_count(v), qi, i, d = o->dim, first;
  size_t ks[4];
  unsigned char *allowed = (unsigned char *)calloc(count + 1, 1);
  result r, full, rf;
  must(allowed != NULL);
  for (i = 0; i < f.n; i++) { /* the rows the filter lets in */
    size_t s;
    for (s = 0; s < count; s++) {
      size_t len;
      const char *id = rag_vec_id(v, (uint32_t)s, &len);
      if (len == f.lens[i] && memcmp(id, f.ids[i], len) == 0) allowed[s] = 1;
    }
  }
  ks[0] = 1;
  ks[1] = 1 + take(in) % 8;
  ks[2] = count + 3;
  /* a search for nothing, first when the input says so (no scratch yet) */
  ks[3] = 0;
  first = take(in) & 1 ? 3 : 0;
  result_init(&r, count + 8);
  result_init(&full, count + 8);
  result_init(&rf, count + 8);
  for (qi = 0; qi < NQ; qi++) {
    truth t;
    size_t ki, j;
    truth_of(v, qs[qi], &t);
    for (ki = 0; ki < 4; ki++)
      search(v, qs[qi], ks[(first + ki) % 4], NULL, NULL, &t, &r);
    /* filtered: the full list restricted to the filter's rows, bit for bit */
    search(v, qs[qi], count, NULL, NULL, &t, &full);
    search(v, qs[qi], ks[1], &f, allowed, &t, &rf);
    for (i = j = 0; i < full.n && j < rf.n; i++) {
      if (!allowed[full.slot[i]]) continue;
      must(rf.slot[j] == full.slot[i]);
      must(memcmp(&rf.score[j], &full.score[i], sizeof(double)) == 0);
      j++;
    }
    must(j == rf.n);
    truth_free(&t);
  }
  { /* search_batch: each query's hits are those of a plain search */
    size_t nq = 1 + take(in) % NQ, k = ks[take(in) % 3],
           kk = min_size(k, count), cnt, comp;
    float *flat = floats(NQ * d);
    const rag_hit *h;
    rag_vec_bad bad;
    const char *why;
    int rc, want = RAG_OK;
    size_t wantc = 0;
    for (qi = 0; qi < nq; qi++) {
      memcpy(flat + qi * d, qs[qi], d * sizeof(float));
      if (want == RAG_OK &&
          predict(qs[qi], d, o->metric, o->dtype, &comp, &why) != RAG_OK) {
        want = RAG_EINVAL;
        wantc = qi * d + comp;
      }
    }
    rc = rag_vec_search_batch(v, flat, nq, k, &h, &cnt, &bad);
    must(rc == want);
    if (rc == RAG_EINVAL) must(bad.component == wantc);
    if (rc == RAG_OK) {
      result *b = (result *)malloc(nq * sizeof *b);
      must(b != NULL && cnt == kk);
      /* copied out first: the next search reuses the scratch */
      for (qi = 0; qi < nq; qi++) {
        result_init(&b[qi], kk);
        for (i = 0; i < kk; i++) {
          b[qi].slot[i] = h[qi * kk + i].id;
          b[qi].score[i] = h[qi * kk + i].score;
        }
        b[qi].n = kk;
      }
      for (qi = 0; qi < nq; qi++) {
        truth t;
        truth_of(v, qs[qi], &t);
        search(v, qs[qi], k, NULL, NULL, &t, &r);
        same(&r, &b[qi]);
        truth_free(&t);
        result_free(&b[qi]);
      }
      free(b);
    }
    free(flat);
  }
  result_free(&r);
  result_free(&full);
  result_free(&rf);
  free(allowed);
}

/* {====== Three loads of the same bytes ======} */

/* A read-only copy of n bytes on pages of their own (so 64-byte aligned). */
static unsigned char *ro_copy(const unsigned char *p, size_t n) {
  void *m = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  must(m != MAP_FAILED);
  if (n) memcpy(m, p, n);
  must(mprotect(m, n ? n : 1, PROT_READ) == 0);
  return (unsigned char *)m;
}

typedef struct loads {
  rag_vec *c, *b; /* copied; borrowed from ro */
  unsigned char *ro;
  size_t n;
} loads;

static void loads_free(loads *l) {
  rag_vec_free(l->c);
  rag_vec_free(l->b); /* before its bytes go */
  must(munmap(l->ro, l->n ? l->n : 1) == 0);
}

static void same_bytes(const rag_vec *x, const rag_vec *y) {
  unsigned char *dx = NULL, *dy = NULL;
  size_t nx = 0, ny = 0;
  must(rag_vec_dump(x, &dx, &nx) == RAG_OK && rag_vec_dump(y, &dy, &ny) == RAG_OK);
  must(nx == ny && memcmp(dx, dy, nx) == 0);
  rag_free(dx);
  rag_free(dy);
}

/* x and y give the same hits for nq queries (search_batch when nq > 1),
** slot for slot and bit for bit, or the same refusal. */
static void same_search(rag_vec *x, rag_vec *y, const float *q, size_t nq, size_t k) {
  const rag_hit *h;
  rag_hit *keep;
  size_t n, m, i;
  rag_vec_bad bad;
  int rx, ry;
  rx = nq == 1 ? rag_vec_search(x, q, k, NULL, &h, &n, &bad)
               : rag_vec_search_batch(x, q, nq, k, &h, &n, &bad);
  if (nq > 1) n *= nq;
  keep = (rag_hit *)malloc((n + 1) * sizeof *keep);
  must(keep != NULL);
  if (n) memcpy(keep, h, n * sizeof *h);
  ry = nq == 1 ? rag_vec_search(y, q, k, NULL, &h, &m, &bad)
               : rag_vec_search_batch(y, q, nq, k, &h, &m, &bad);
  if (nq > 1) m *= nq;
  must(rx == ry && n == m);
  for (i = 0; i < n; i++)
    must(keep[i].id == h[i].id && memcmp(&keep[i].score, &h[i].score, sizeof h[i].score) == 0);
  free(keep);
}

/*
** Loads the n bytes at p copied and borrowed (into l), and borrowed from
** an unaligned copy; all three must give the same status and reason, and
** indexes that dump the same bytes and search the same. Only a version 2
** file with rows is borrowed, and a copy owns what a borrower maps.
*/
static int load_all(const unsigned char *p, size_t n, loads *l, const char **why) {
  const char *wb = NULL, *wu = NULL;
  unsigned char *raw = (unsigned char *)malloc(n + 80), *un;
  rag_vec *u = NULL;
  int rc, rb, ru, lined = n >= 12 && le(p + 8, 4) >= 2; /* versions 2 and 3 can be borrowed */
  must(raw != NULL);
  un = raw + (64 - (uintptr_t)raw % 64) % 64 + 8; /* 8 bytes past a line */
  if (n) memcpy(un, p, n);
  memset(l, 0, sizeof *l);
  l->n = n;
  l->ro = ro_copy(p, n);
  rc = rag_vec_load_mem(p, n, 0, &l->c, why);
  rb = rag_vec_load_mem(l->ro, n, 1, &l->b, &wb);
  ru = rag_vec_load_mem(un, n, 1, &u, &wu);
  free(raw); /* u must not have borrowed it */
  must(rc == rb && rc == ru);
  if (rc != RAG_OK) {
    must(l->c == NULL && l->b == NULL && u == NULL);
    must(strcmp(*why, wb) == 0 && strcmp(*why, wu) == 0);
    return rc;
  }
  {
    size_t count = rag_vec_count(l->c), i, d = rag_vec_config(l->c)->dim, mapped;
    float *q = floats(2 * d);
    must(rag_vec_check(l->b) && rag_vec_check(u) && rag_vec_count(l->b) == count);
    must(rag_vec_mapped(l->c) == 0 && rag_vec_mapped(u) == 0);
    mapped = rag_vec_mapped(l->b);
    must((mapped > 0) == (lined && count > 0));
    must(rag_vec_memory(l->c) >= rag_vec_memory(l->b) + mapped);
    same_bytes(l->c, l->b);
    same_bytes(l->c, u);
    for (i = 0; i < d; i++) {
      q[i] = 1.0f;
      q[d + i] = (float)((int)(i % 3) - 1);
    }
    if (count > 0) {
      size_t len;
      const char *id = rag_vec_id(l->c, 0, &len);
      must(rag_vec_get(l->c, id, len, q + d) == 1);
    }
    same_search(l->c, l->b, q, 1, count + 1);
    same_search(l->c, l->b, q + d, 1, 3);
    same_search(l->c, u, q + d, 1, count + 1);
    same_search(l->c, l->b, q, 2, 5);
    must(rag_vec_mapped(l->b) == mapped); /* searching copies nothing */
    free(q);
  }
  rag_vec_free(u);
  return RAG_OK;
}

/* Everything a loaded index must survive; `in` supplies a query and choices. */
static void exercise(rag_vec *v, input *in) {
  const rag_vec_opts *o = rag_vec_config(v);
  unsigned char *d1 = NULL, *d2 = NULL;
  size_t n1 = 0, n2 = 0, before, d = o->dim;
  float *qs[NQ], *got = floats(d);
  const char *why;
  rag_vec_bad bad;
  rag_vec *c;
  size_t qi;
  int removed;
  must(rag_vec_check(v));
  queries(v, in, qs);
  searches(v, qs, in);
  before = rag_vec_count(v);
  if (before > 0) { /* remove the first row's id, twice */
    char id[256];
    size_t len;
    const char *s0 = rag_vec_id(v, 0, &len);
    if (len <= sizeof id) {
      memcpy(id, s0, len);
      must(rag_vec_remove(v, id, len, &removed) == RAG_OK);
      must(removed == 1 && rag_vec_count(v) == before - 1);
      must(rag_vec_check(v));
      must(rag_vec_get(v, id, len, got) == 0);
      must(rag_vec_remove(v, id, len, &removed) == RAG_OK);
      must(removed == 0);
    }
  }
  /* adds: a new id, then its replacement by the input's query if sound */
  before = rag_vec_count(v);
  must(rag_vec_add(v, "fuzz\0new", 8, qs[0], &bad) == RAG_OK);
  must(rag_vec_check(v) && rag_vec_count(v) == before + 1);
  {
    size_t comp;
    const char *w;
    int want = predict(qs[2], d, o->metric, o->dtype, &comp, &w);
    refused_as(rag_vec_add(v, "fuzz\0new", 8, qs[2], &bad), &bad, want, comp,
               w);
    must(rag_vec_check(v) && rag_vec_count(v) == before + 1);
    if (want == RAG_OK) {
      float *p = floats(d);
      prepare_like(qs[2], d, o->metric, p);
      must(rag_vec_get(v, "fuzz\0new", 8, got) == 1 &&
           decoded_ok(got, p, d, o->dtype));
      free(p);
    }
  }
  /* the dump loads back, dumps to the same bytes and searches the same */
  must(rag_vec_dump(v, &d1, &n1) == RAG_OK);
  must(rag_vec_check(v));
  must(rag_vec_load_mem(d1, n1, 0, &c, &why) == RAG_OK);
  must(rag_vec_check(c) && rag_vec_count(c) == rag_vec_count(v));
  must(rag_vec_dump(c, &d2, &n2) == RAG_OK);
  must(n1 == n2 && memcmp(d1, d2, n1) == 0);
  {
    loads l;
    must(load_all(d1, n1, &l, &why) == RAG_OK);
    must(rag_vec_mapped(l.b) > 0); /* a dump is version 2, with the row added */
    loads_free(&l);
  }
  {
    size_t k = rag_vec_count(v) + 1;
    result r, s;
    result_init(&r, k);
    result_init(&s, k);
    for (qi = 0; qi < NQ; qi++) {
      truth t;
      truth_of(v, qs[qi], &t);
      search(v, qs[qi], k, NULL, NULL, &t, &r);
      search(c, qs[qi], k, NULL, NULL, &t, &s);
      same(&r, &s);
      truth_free(&t);
    }
    result_free(&r);
    result_free(&s);
  }
  rag_free(d1);
  rag_free(d2);
  rag_vec_free(c);
  for (qi = 0; qi < NQ; qi++) free(qs[qi]);
  free(got);
}

/* An index from the vectors coded in `in`: options, adds, removes. */
static rag_vec *build(input *in) {
  rag_vec_opts o;
  rag_vec *v;
  size_t nops = 0;
  uint8_t c0 = take(in), c1 = take(in);
  memset(&o, 0, sizeof o);
  o.dim = 1 + c0 % MAXDIM;
  o.metric = (rag_metric)(c1 % RAG_NMETRICS);
  o.dtype = (rag_dtype)((c1 / RAG_NMETRICS) % RAG_NDTYPES);
  o.portable = (c1 >> 4) & 1;
  o.sketch = ((c1 >> 5) & 1) && o.dtype == RAG_F32 && o.metric != RAG_L2;
  must(rag_vec_new(&o, &v) == RAG_OK);
  while (more(in) && nops++ < 64) {
    uint8_t op = take(in);
    const ident *id = &ids[pick_id(take(in))];
    if (op % 8 == 7) {
      int removed;
      must(rag_vec_remove(v, id->s, id->n, &removed) == RAG_OK);
    } else {
      float x[MAXDIM];
      size_t comp, before = rag_vec_count(v);
      const char *why;
      rag_vec_bad bad;
      int want;
      make_vector(in, o.dim, x);
      want = predict(x, o.dim, o.metric, o.dtype, &comp, &why);
      refused_as(rag_vec_add(v, id->s, id->n, x, &bad), &bad, want, comp, why);
      if (want != RAG_OK) must(rag_vec_count(v) == before);
    }
    must(rag_vec_check(v));
  }
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *why = NULL;
  input in;
  int rc, mode;
  if (size < 1) return 0;
  mode = data[0] % 4;
  data++;
  size--;
  if (mode == 0 || mode == 3) {
    unsigned char *p = (unsigned char *)rag_malloc(size + 1);
    loads l;
    must(p != NULL);
    if (size) memcpy(p, data, size);
    if (mode == 3) { /* as many sections as the header says */
      size_t nsec = size >= 16 ? (size_t)le(p + 12, 4) : 0;
      fix_crcs(p, size, nsec < MAXSEC ? nsec : MAXSEC);
    }
    rc = load_all(p, size, &l, &why);
    in.p = data + (size > RAG_FILE_HEADER ? RAG_FILE_HEADER : size);
    in.e = data + size;
    if (load_ok(rc, l.c, why)) {
      exercise(l.c, &in);
      in.p = data + (size > RAG_FILE_HEADER ? RAG_FILE_HEADER : size);
      exercise(l.b, &in); /* its first change copies the rows: a write into l.ro traps */
    }
    loads_free(&l);
    rag_free(p);
    return 0;
  }
  {
    /* modes 1 and 2: mutation parameters, then options and vectors */
    uint8_t nm, ops[4][5];
    size_t i, n0 = 0, n1 = 0, n;
    unsigned char *d0 = NULL, *d1 = NULL, *p;
    const uint8_t *start;
    rag_vec *a, *c = NULL;
    in.p = data;
    in.e = data + size;
    nm = 1 + take(&in) % 4;
    for (i = 0; i < 4; i++) {
      size_t j;
      for (j = 0; j < 5; j++) ops[i][j] = take(&in);
    }
    start = in.p;
    a = build(&in);
    /* the undamaged dump loads and dumps identically */
    must(rag_vec_dump(a, &d0, &n0) == RAG_OK);
    must(rag_vec_load_mem(d0, n0, 0, &c, &why) == RAG_OK && rag_vec_check(c));
    must(rag_vec_dump(c, &d1, &n1) == RAG_OK && n1 == n0 &&
         memcmp(d0, d1, n0) == 0);
    rag_free(d1);
    rag_vec_free(c);
    rag_vec_free(a);
    if (mode == 1) {
      n = damage(d0, n0, (const uint8_t(*)[5])ops, nm);
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
    }
    {
      loads l;
      rc = load_all(d0, n, &l, &why);
      in.p = start;
      if (load_ok(rc, l.c, why)) {
        exercise(l.c, &in);
        in.p = start;
        exercise(l.b, &in);
      }
      loads_free(&l);
    }
    rag_free(d0);
  }
  return 0;
}
