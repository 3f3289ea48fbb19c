/*
** fuzz/bm25_ops.c: a sequence of adds, replacements, removes and searches on
** one BM25 index over a tiny vocabulary (English words, CJK, now and then
** invalid UTF-8), with ids from a small set and bursts of churn so that
** lazy list compaction and document renumbering both happen. After every
** operation rag_bm25_check must pass and the count must match a model of
** the live documents; every so often, and at the end, a fresh index built
** from the model must give the same hits (ids, order, scores), the same
** statistics, and the same filtered hits; explain must agree with search;
** a dump must load back into an index that searches the same.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "rag.h"
#include "rag_bm25.h"
#include "rag_text.h"

#define NIDS 48 /* 16 chosen ids, then g00..g31 (rarely used: they grow the id table) */
#define NFIXED 16
#define MAXTEXT 512
#define MAXHITS (NIDS + 2)

static const char *const vocab[16] = {
    "alpha",  "beta",     "gamma",  "delta",    "the",      "running", "runs",  "Apple",
    "中文", "检索增强", "日本語", "한국어", "42", "ALPHA, ", "x_y", "apple."};
static const char *const invalid[4] = {"\xff", "\xc3", "\xed\xa0\x80", "\xe4\xb8"};
static const char *const queries[] = {"alpha",         "beta gamma the", "run",
                                      "apple apple 42", "中文检索",     "日本 한국어 delta",
                                      "nothing here"};
#define NQUERIES (sizeof queries / sizeof queries[0])

typedef struct ident {
  const char *s;
  size_t n;
} ident;

#define G(x) {"g" #x, 3}
static const ident ids[NIDS] = {
    {"a", 1},   {"b", 1},  {"ab", 2}, {"", 0},  {"x\0y", 3}, {"x", 1}, {"\xc3\xa9", 2},
    {"d3", 2},  {"d4", 2}, {"d5", 2}, {"d6", 2}, {"d7", 2},    {"a\0", 2}, {"zz", 2},
    {"Z", 1},   {"\xff\xfe", 2}, G(00), G(01), G(02), G(03), G(04), G(05), G(06), G(07),
    G(08), G(09), G(10), G(11), G(12), G(13), G(14), G(15), G(16), G(17), G(18), G(19),
    G(20), G(21), G(22), G(23), G(24), G(25), G(26), G(27), G(28), G(29), G(30), G(31)};

/* An id from a byte: mostly the 16 chosen ones, so that replacements happen. */
static int pick_id(uint8_t x) {
  return x < 0xE0 ? x % NFIXED : NFIXED + x % (NIDS - NFIXED);
}

typedef struct model {
  int live[NIDS];
  char text[NIDS][MAXTEXT];
  size_t len[NIDS];
} model;

typedef struct result {
  size_t n;
  int id[MAXHITS]; /* index into ids */
  double score[MAXHITS];
} result;

typedef struct input {
  const uint8_t *p, *e;
} input;

static int more(const input *in) {
  return in->p < in->e;
}

static uint8_t take(input *in) {
  return in->p < in->e ? *in->p++ : 0;
}

static void must(int cond) {
  if (!cond) __builtin_trap();
}

/* Appends the text of word byte w; returns 1 when it was invalid UTF-8. */
static int put_word(char *t, size_t *len, uint8_t w) {
  const char *s = w >= 0xFC ? invalid[w & 3] : vocab[w % 16];
  size_t n = strlen(s);
  if (*len + n + 1 >= MAXTEXT) return 0;
  memcpy(t + *len, s, n);
  *len += n;
  t[(*len)++] = (w & 0x30) == 0x30 && w < 0xFC ? '\n' : ' ';
  return w >= 0xFC;
}

static int which_id(const rag_bm25 *b, uint32_t h) {
  size_t n, i;
  const char *s = rag_bm25_id(b, h, &n);
  for (i = 0; i < NIDS; i++)
    if (ids[i].n == n && memcmp(ids[i].s, s, n) == 0) return (int)i;
  __builtin_trap();
}

static int id_less(int x, int y) {
  size_t nx = ids[x].n, ny = ids[y].n;
  int c = memcmp(ids[x].s, ids[y].s, nx < ny ? nx : ny);
  return c != 0 ? c < 0 : nx < ny;
}

/* Searches and checks the hits' own invariants: bounds, order, liveness, explain. */
static void search(rag_bm25 *b, const model *m, const char *q, size_t qlen, size_t k,
                   const rag_bm25_filter *f, int explain, result *r) {
  const rag_hit *h;
  size_t n, i, errpos = 0;
  static char lines[4][64];
  const void *line[4] = {lines[0], lines[1], lines[2], lines[3]};
  rag_ahead ahead = {line, 4, 0}; /* asked for as it goes: a hint, never read */
  must(rag_bm25_search(b, q, qlen, k, f, &ahead, &h, &n, &errpos) == RAG_OK);
  must(ahead.at <= ahead.n);
  must(n <= k && n <= rag_bm25_count(b) && n <= MAXHITS);
  r->n = n;
  for (i = 0; i < n; i++) {
    r->id[i] = which_id(b, h[i].id);
    r->score[i] = h[i].score;
    must(isfinite(h[i].score));
    if (m != NULL) must(m->live[r->id[i]]);
    if (i > 0)
      must(r->score[i - 1] > r->score[i] ||
           (r->score[i - 1] == r->score[i] && id_less(r->id[i - 1], r->id[i])));
  }
  for (i = 0; explain && i < r->n; i++) { /* explain gives the same score, bit for bit */
    rag_bm25_explain ex;
    int found = 0;
    must(rag_bm25_explain_doc(b, q, qlen, ids[r->id[i]].s, ids[r->id[i]].n, &ex, &found,
                              &errpos) == RAG_OK);
    must(found && memcmp(&ex.score, &r->score[i], sizeof(double)) == 0);
  }
}

static int close_enough(double x, double y) {
  double d = fabs(x - y), s = fabs(x) > fabs(y) ? fabs(x) : fabs(y);
  return x == y || d <= 1e-9 * s;
}

static void same(const result *x, const result *y) {
  size_t i;
  must(x->n == y->n);
  for (i = 0; i < x->n; i++) must(x->id[i] == y->id[i] && close_enough(x->score[i], y->score[i]));
}

/* The incremental index `b` against `c` (fresh or reloaded), for several queries. */
static void compare(rag_bm25 *b, rag_bm25 *c, const model *m, const char *lastq, size_t lastlen) {
  static const char *const fids[] = {"a", "ab", "x\0y", "", "d5", "Z", "\xff\xfe"};
  static const size_t flens[] = {1, 2, 3, 0, 2, 1, 2};
  rag_bm25_filter f = {fids, flens, 7};
  rag_bm25_stats sb, sc;
  result rb, rc, rf;
  size_t qi, ks[3] = {MAXHITS, 3, 1}, ki, i, j;
  rag_bm25_stats_get(b, &sb);
  rag_bm25_stats_get(c, &sc);
  must(sb.docs == sc.docs && sb.terms == sc.terms && sb.postings == sc.postings &&
       sb.avgdl == sc.avgdl);
  for (qi = 0; qi <= NQUERIES; qi++) {
    const char *q = qi < NQUERIES ? queries[qi] : lastq;
    size_t ql = qi < NQUERIES ? strlen(q) : lastlen;
    for (ki = 0; ki < 3; ki++) {
      search(b, m, q, ql, ks[ki], NULL, ki == 0, &rb);
      search(c, m, q, ql, ks[ki], NULL, 0, &rc);
      same(&rb, &rc);
    }
    /* filtered: the unfiltered full list restricted to the filter's ids */
    search(b, m, q, ql, MAXHITS, NULL, 0, &rb);
    search(c, m, q, ql, MAXHITS, &f, 0, &rf);
    for (i = j = 0; i < rb.n; i++) {
      size_t t;
      int in = 0;
      for (t = 0; t < f.n; t++)
        if (ids[rb.id[i]].n == flens[t] && memcmp(ids[rb.id[i]].s, fids[t], flens[t]) == 0)
          in = 1;
      if (!in) continue;
      must(j < rf.n && rf.id[j] == rb.id[i] && close_enough(rf.score[j], rb.score[i]));
      j++;
    }
    must(j == rf.n);
  }
}

static rag_bm25 *fresh(const rag_bm25 *b, const model *m, unsigned rot) {
  rag_bm25 *c;
  size_t i, errpos;
  must(rag_bm25_new(rag_bm25_config(b), &c) == RAG_OK);
  for (i = 0; i < NIDS; i++) {
    size_t d = (i + rot) % NIDS;
    if (!m->live[d]) continue;
    must(rag_bm25_add(c, ids[d].s, ids[d].n, m->text[d], m->len[d], &errpos) == RAG_OK);
  }
  must(rag_bm25_check(c) == RAG_OK);
  must(rag_bm25_count(c) == rag_bm25_count(b));
  return c;
}

static size_t live(const model *m) {
  size_t i, n = 0;
  for (i = 0; i < NIDS; i++) n += m->live[i] != 0;
  return n;
}

static void verify(rag_bm25 *b, const model *m, unsigned rot, const char *q, size_t ql) {
  rag_bm25 *c = fresh(b, m, rot);
  compare(b, c, m, q, ql);
  rag_bm25_free(c);
}

static void add(rag_bm25 *b, model *m, int d, const char *t, size_t len, int bad) {
  size_t errpos = 0, before = rag_bm25_count(b);
  int rc = rag_bm25_add(b, ids[d].s, ids[d].n, t, len, &errpos);
  size_t inv = rag_text_first_invalid((const unsigned char *)t, len);
  must((inv < len) == (bad != 0));
  if (bad) {
    must(rc == RAG_EENCODING && errpos == inv + 1 && rag_bm25_count(b) == before);
  } else {
    must(rc == RAG_OK);
    memcpy(m->text[d], t, len);
    m->len[d] = len;
    m->live[d] = 1;
  }
}

static void del(rag_bm25 *b, model *m, int d) {
  int removed = -1;
  must(rag_bm25_remove(b, ids[d].s, ids[d].n, &removed) == RAG_OK);
  must(removed == m->live[d]);
  m->live[d] = 0;
}

static void after(const rag_bm25 *b, const model *m) {
  must(rag_bm25_check(b) == RAG_OK);
  must(rag_bm25_count(b) == live(m));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static model m;
  rag_bm25_opts o;
  rag_bm25 *b;
  input in;
  char q[MAXTEXT];
  size_t ql = 0, nops = 0, churned = 0;
  uint8_t c0, c1;
  if (size < 2) return 0;
  in.p = data;
  in.e = data + size;
  memset(&m, 0, sizeof m);
  c0 = take(&in);
  c1 = take(&in);
  rag_bm25_defaults(&o);
  o.variant = (rag_bm25_variant)(c0 % RAG_BM25_NVARIANTS);
  o.delta = rag_bm25_default_delta(o.variant);
  o.analyzer.cjk = (rag_analyzer_cjk)((c0 >> 3) % 4);
  if (c0 & 0x20) o.analyzer.stopwords = RAG_ANALYZER_STOP_NONE;
  if (c0 & 0x40) o.analyzer.stem = 0;
  if (c0 & 0x80) o.analyzer.lowercase = 0;
  o.k1 = (c1 & 3) == 0 ? 1.2 : (c1 & 3) == 1 ? 0 : (c1 & 3) == 2 ? 2.0 : 0.9;
  o.b = ((c1 >> 2) & 3) == 0 ? 0.75 : ((c1 >> 2) & 3) == 1 ? 0 : ((c1 >> 2) & 3) == 2 ? 1 : 0.4;
  if ((c1 >> 4) & 3) o.delta = ((c1 >> 4) & 3) == 1 ? 0 : ((c1 >> 4) & 3) == 2 ? 2.5 : 7;
  if ((c1 >> 6) == 3) o.k1 = RAG_BM25_MAX_PARAM;
  must(rag_bm25_new(&o, &b) == RAG_OK);
  while (more(&in)) {
    uint8_t op = take(&in) % 10;
    nops++;
    if (op <= 3) { /* add or replace */
      char t[MAXTEXT];
      size_t len = 0, i, nw;
      int d = pick_id(take(&in)), bad = 0;
      nw = take(&in) % 12;
      for (i = 0; i < nw; i++) bad |= put_word(t, &len, take(&in));
      add(b, &m, d, t, len, bad);
    } else if (op <= 6) { /* remove */
      del(b, &m, pick_id(take(&in)));
    } else if (op == 7) { /* search */
      result r;
      size_t i, nw = take(&in) % 4, k = take(&in) % (MAXHITS + 1);
      int bad = 0;
      ql = 0;
      for (i = 0; i < nw; i++) bad |= put_word(q, &ql, take(&in));
      if (bad) {
        const rag_hit *h;
        size_t n, errpos = 0;
        must(rag_bm25_search(b, q, ql, k, NULL, NULL, &h, &n, &errpos) == RAG_EENCODING);
        must(errpos == rag_text_first_invalid((const unsigned char *)q, ql) + 1);
        ql = 0;
      } else {
        search(b, &m, q, ql, k, NULL, 1, &r);
      }
    } else if (op == 8) { /* churn: many replacements and removes */
      size_t count = take(&in) % 64, j;
      uint8_t wide = take(&in);
      uint32_t seed = take(&in) * 2654435761u + 1;
      for (j = 0; j < count && churned < 1024; j++, churned++) { /* bounded cost per input */
        char t[MAXTEXT];
        size_t len = 0, i, nw;
        int d = (int)((seed >> 7) % (wide & 1 ? NIDS : NFIXED));
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 24) % 3 == 0) {
          del(b, &m, d);
        } else {
          nw = 1 + (seed >> 20) % 8;
          for (i = 0; i < nw; i++) {
            seed = seed * 1103515245u + 12345u;
            put_word(t, &len, (uint8_t)((seed >> 16) % 0xFC));
          }
          add(b, &m, d, t, len, 0);
        }
        after(b, &m);
      }
    } else { /* compare with a fresh index now */
      verify(b, &m, take(&in), q, ql);
    }
    after(b, &m);
    if (nops % 32 == 0) verify(b, &m, (unsigned)nops, q, ql);
  }
  verify(b, &m, 0, q, ql);
  { /* a dump loads back into an index that searches the same */
    unsigned char *buf = NULL, *buf2 = NULL;
    size_t n = 0, n2 = 0;
    const char *why;
    rag_bm25 *c;
    must(rag_bm25_dump(b, &buf, &n) == RAG_OK);
    after(b, &m);
    must(rag_bm25_load_mem(buf, n, 0, &c, &why) == RAG_OK);
    must(rag_bm25_check(c) == RAG_OK);
    compare(b, c, &m, q, ql);
    must(rag_bm25_dump(c, &buf2, &n2) == RAG_OK);
    must(n == n2 && memcmp(buf, buf2, n) == 0);
    rag_free(buf);
    rag_free(buf2);
    rag_bm25_free(c);
  }
  rag_bm25_free(b);
  return 0;
}
