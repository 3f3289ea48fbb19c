/*
** fuzz/bm25_load.c: rag_bm25_load_mem on any bytes. The first byte picks a
** mode: 0 loads the rest as is; 1 builds an index from documents coded in
** the rest, dumps it, damages the dump (a flipped bit, a truncation, an
** overwritten byte) and loads that; 2 edits the sections of such a dump
** (flips, overwrites, inserts, deletes, duplicated ranges, truncations,
** a version) and then rewrites lengths, size and every CRC, so the checks
** behind the checksums are what decides; 3 loads the rest with its size
** and CRCs recomputed. A failed load must say RAG_EFORMAT, RAG_EVERSION or
** RAG_ECORRUPT; a loaded index must pass rag_bm25_check, search, take a
** remove and adds, and dump to bytes that load back and dump identically.
** The first byte's next bit picks a borrowing load or a copying one.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "rag.h"
#include "rag_bm25.h"
#include "rag_digest.h"
#include "rag_text.h"

#define HEADER 28
#define NSEC 5
#define MAXHITS 16
#define MAXID 64

static void must(int cond) {
  if (!cond) __builtin_trap();
}

static const char *const queries[] = {"alpha beta", "中文检索", "running runs",
                                      "the apple 42", "x"};
#define NQUERIES (sizeof queries / sizeof queries[0])

static const char *const vocab[32] = {
    "alpha", "beta",   "gamma", "delta",  "the",     "running", "runs",    "Apple",
    "中文",  "检索",   "增强",  "日本語", "한국어",  "42",      "x_y",     "apple.",
    "Straße", "ＡＢＣ", "naïve", "über",  "a",       "is",      "😀",      "running\n",
    "x",     "mañana", "ΣΊΣΥΦΟΣ", "3.14", "don’t", "foo-bar", "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnop",
    "e\xcc\x81"};

/* A copy of search results that outlives the next call on the index. */
typedef struct result {
  size_t n;
  char id[MAXHITS][MAXID];
  size_t idlen[MAXHITS];
  double score[MAXHITS];
} result;

static int same_score(double x, double y) {
  return memcmp(&x, &y, sizeof x) == 0 || (isnan(x) && isnan(y));
}

static void search(rag_bm25 *b, const char *q, size_t len, result *r) {
  const rag_hit *h;
  size_t n, i, errpos = 0;
  int rc = rag_bm25_search(b, q, len, MAXHITS, NULL, NULL, &h, &n, &errpos);
  must(rc == RAG_OK || (rc == RAG_EENCODING &&
                        errpos == rag_text_first_invalid((const unsigned char *)q, len) + 1));
  if (rc != RAG_OK) n = 0;
  must(n <= MAXHITS && n <= rag_bm25_count(b));
  r->n = n;
  for (i = 0; i < n; i++) {
    size_t idn;
    const char *id = rag_bm25_id(b, h[i].id, &idn);
    r->idlen[i] = idn;
    memcpy(r->id[i], id, idn < MAXID ? idn : MAXID);
    r->score[i] = h[i].score;
    must(isfinite(h[i].score));
    if (i > 0) must(h[i - 1].score >= h[i].score);
  }
  for (i = 0; i < n; i++) { /* explain agrees with search, bit for bit */
    rag_bm25_explain ex;
    int found = 0;
    size_t idn = r->idlen[i];
    if (idn > MAXID) continue;
    must(rag_bm25_explain_doc(b, q, len, r->id[i], idn, &ex, &found, &errpos) == RAG_OK);
    must(found && same_score(ex.score, r->score[i]));
  }
}

static void same(const result *x, const result *y) {
  size_t i;
  must(x->n == y->n);
  for (i = 0; i < x->n; i++) {
    size_t n = x->idlen[i] < MAXID ? x->idlen[i] : MAXID;
    must(x->idlen[i] == y->idlen[i] && memcmp(x->id[i], y->id[i], n) == 0);
    must(same_score(x->score[i], y->score[i]));
  }
}

static int loaded(int rc, rag_bm25 *b, const char *why) {
  must(why != NULL);
  if (rc == RAG_OK) {
    must(b != NULL);
    return 1;
  }
  must(b == NULL && why[0] != '\0');
  must(rc == RAG_EFORMAT || rc == RAG_EVERSION || rc == RAG_ECORRUPT);
  return 0;
}

/* Everything a loaded index must survive; `q` is a query from the input. */
static void exercise(rag_bm25 *b, const char *q, size_t qlen) {
  static const char text[] = "alpha beta 中文检索 running";
  unsigned char *d1 = NULL, *d2 = NULL;
  size_t n1 = 0, n2 = 0, i, errpos;
  const char *why;
  rag_bm25 *c;
  result r, s;
  int removed;
  must(rag_bm25_check(b) == RAG_OK);
  for (i = 0; i < NQUERIES; i++) search(b, queries[i], strlen(queries[i]), &r);
  search(b, q, qlen, &r);
  if (rag_bm25_count(b) > 0) { /* remove the first document */
    char id[256];
    size_t n, before = rag_bm25_count(b);
    const char *s0 = rag_bm25_id(b, 0, &n);
    if (n <= sizeof id) {
      memcpy(id, s0, n);
      rag_bm25_remove(b, id, n, &removed);
      must(removed == 1 && rag_bm25_count(b) == before - 1);
      must(rag_bm25_check(b) == RAG_OK);
      rag_bm25_remove(b, id, n, &removed);
      must(removed == 0);
    }
  }
  /* adds: a new id, then a replacement of it */
  must(rag_bm25_add(b, "fuzz\0new", 8, text, strlen(text), &errpos) == RAG_OK);
  must(rag_bm25_check(b) == RAG_OK);
  if (rag_text_first_invalid((const unsigned char *)q, qlen) == qlen) {
    must(rag_bm25_add(b, "fuzz\0new", 8, q, qlen, &errpos) == RAG_OK);
    must(rag_bm25_check(b) == RAG_OK);
  }
  search(b, queries[0], strlen(queries[0]), &r);
  /* the dump loads back and dumps to the same bytes and hits */
  must(rag_bm25_dump(b, &d1, &n1) == RAG_OK);
  must(rag_bm25_check(b) == RAG_OK);
  must(rag_bm25_load_mem(d1, n1, 1, &c, &why) == RAG_OK); /* d1 outlives c */
  must(rag_bm25_check(c) == RAG_OK);
  must(rag_bm25_count(c) == rag_bm25_count(b));
  must(rag_bm25_dump(c, &d2, &n2) == RAG_OK);
  must(n1 == n2 && memcmp(d1, d2, n1) == 0);
  for (i = 0; i <= NQUERIES; i++) {
    const char *qq = i < NQUERIES ? queries[i] : q;
    size_t ql = i < NQUERIES ? strlen(qq) : qlen;
    search(b, qq, ql, &r);
    search(c, qq, ql, &s);
    same(&r, &s);
  }
  rag_free(d1);
  rag_free(d2);
  rag_bm25_free(c);
}

static uint64_t le(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  while (n-- > 0) v = v << 8 | p[n];
  return v;
}

static void put_le(unsigned char *p, uint64_t v, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Mode 3: the size field and every CRC that the structure lets us find. */
static void fix_crcs(unsigned char *p, size_t n) {
  size_t off = HEADER, i;
  if (n < HEADER) return;
  put_le(p + 16, n, 8);
  put_le(p + 24, rag_digest_crc32(0, p, 24), 4);
  for (i = 0; i < NSEC; i++) {
    uint64_t len;
    if (n - off < 16) return;
    len = le(p + off + 4, 8);
    if (len > n - off - 16) return;
    put_le(p + off + 12 + len, rag_digest_crc32(0, p + off, 12 + (size_t)len), 4);
    off += 16 + (size_t)len;
  }
}

typedef struct input {
  const uint8_t *p, *e;
} input;

static uint8_t take(input *in) {
  return in->p < in->e ? *in->p++ : 0;
}

/* Builds an index from the documents coded in `in`; NULL when the options are refused. */
static rag_bm25 *build(input *in) {
  static const char *const langs[4] = {"english", "porter", "french", "german"};
  static const char *const words[3] = {"alpha", "Straße", "中文"};
  static const double k1s[4] = {1.2, 0, 2.5, RAG_BM25_MAX_PARAM};
  static const double bs[4] = {0.75, 0, 1, 0.5};
  static const double deltas[4] = {0.5, 0, 1, RAG_BM25_MAX_PARAM};
  rag_bm25_opts o;
  rag_bm25 *b;
  uint8_t c0 = take(in), c1 = take(in);
  rag_bm25_defaults(&o);
  o.variant = (rag_bm25_variant)(c0 % RAG_BM25_NVARIANTS);
  o.analyzer.cjk = (rag_analyzer_cjk)((c0 >> 3) & 3);
  o.analyzer.stopwords = (rag_analyzer_stop)((c0 >> 5) % 3);
  o.analyzer.stem = (c0 >> 7) & 1;
  o.analyzer.lang = langs[c1 & 3];
  o.analyzer.lowercase = (c1 >> 2) & 1;
  if (o.analyzer.stopwords == RAG_ANALYZER_STOP_LIST) {
    o.analyzer.words = words;
    o.analyzer.nwords = (c1 >> 3) & 3;
  }
  o.k1 = k1s[(c1 >> 5) & 1 ? (c1 >> 6) & 3 : 0];
  o.b = bs[(c1 >> 4) & 1 ? (c1 >> 6) & 3 : 0];
  o.delta = deltas[(c1 >> 6) & 3];
  if (rag_bm25_new(&o, &b) != RAG_OK) return NULL;
  /* documents: id byte, word count byte, then that many word bytes; 0xFF count removes */
  while (in->p < in->e) {
    char id[4], t[24 * 72];
    size_t idn, len = 0, i, nw, errpos;
    uint8_t x = take(in), k = take(in);
    idn = 2;
    id[0] = 'd';
    id[1] = (char)('a' + x % 24);
    if (x >= 0xF0) { /* a binary id */
      id[0] = 0;
      id[1] = (char)x;
      id[2] = (char)0xFF;
      idn = 3;
    }
    if (k == 0xFF) {
      int removed;
      rag_bm25_remove(b, id, idn, &removed);
      continue;
    }
    nw = k % 24;
    for (i = 0; i < nw; i++) {
      const char *s = vocab[take(in) % 32];
      size_t n = strlen(s);
      memcpy(t + len, s, n);
      len += n;
      t[len++] = ' ';
    }
    must(rag_bm25_add(b, id, idn, t, len, &errpos) == RAG_OK);
  }
  must(rag_bm25_check(b) == RAG_OK);
  return b;
}

/* A dump split into its header fields and section payloads. */
typedef struct file {
  unsigned char head[HEADER];
  unsigned char *sec[NSEC];
  size_t len[NSEC], cap[NSEC];
} file;

static void split(file *f, const unsigned char *p, size_t n) {
  size_t off = HEADER, i;
  must(n >= HEADER);
  memcpy(f->head, p, HEADER);
  for (i = 0; i < NSEC; i++) {
    size_t len = (size_t)le(p + off + 4, 8);
    f->cap[i] = len + 64;
    f->sec[i] = (unsigned char *)rag_malloc(f->cap[i]);
    must(f->sec[i] != NULL);
    memcpy(f->sec[i], p + off + 12, len);
    f->len[i] = len;
    off += 16 + len;
  }
  must(off == n);
}

static unsigned char *join(const file *f, size_t *n) {
  static const char tags[NSEC][5] = {"PARM", "ANLZ", "DOCS", "TERM", "POST"};
  size_t total = HEADER, i, off = HEADER;
  unsigned char *p;
  for (i = 0; i < NSEC; i++) total += 16 + f->len[i];
  p = (unsigned char *)rag_malloc(total);
  must(p != NULL);
  memcpy(p, f->head, HEADER);
  put_le(p + 16, total, 8);
  put_le(p + 24, rag_digest_crc32(0, p, 24), 4);
  for (i = 0; i < NSEC; i++) {
    memcpy(p + off, tags[i], 4);
    put_le(p + off + 4, f->len[i], 8);
    if (f->len[i] > 0) memcpy(p + off + 12, f->sec[i], f->len[i]);
    put_le(p + off + 12 + f->len[i], rag_digest_crc32(0, p + off, 12 + f->len[i]), 4);
    off += 16 + f->len[i];
  }
  *n = total;
  return p;
}

/* One structural edit of a section (mode 2). */
static void edit(file *f, uint8_t op, uint8_t where, uint32_t pos, uint8_t val) {
  size_t s = where % NSEC, len = f->len[s], at, k;
  unsigned char *p = f->sec[s];
  switch (op % 8) {
    case 0: /* flip a bit */
      if (len) p[pos % len] ^= (unsigned char)(1u << (val & 7));
      break;
    case 1: /* overwrite a byte */
      if (len) p[pos % len] = val;
      break;
    case 2: /* insert a byte */
      if (len + 1 > f->cap[s]) break;
      at = pos % (len + 1);
      memmove(p + at + 1, p + at, len - at);
      p[at] = val;
      f->len[s]++;
      break;
    case 3: /* delete a run of bytes */
      if (!len) break;
      at = pos % len;
      k = 1 + val % 4;
      if (k > len - at) k = len - at;
      memmove(p + at, p + at + k, len - at - k);
      f->len[s] -= k;
      break;
    case 4: /* truncate */
      f->len[s] = pos % (len + 1);
      break;
    case 5: /* duplicate a range in place (repeated ids, terms, postings) */
      if (!len) break;
      at = pos % len;
      k = 1 + val % 16;
      if (k > len - at) k = len - at;
      if (len + k > f->cap[s]) break;
      memmove(p + at + k, p + at, len - at);
      f->len[s] += k;
      break;
    case 6: /* the version */
      put_le(f->head + 8, val % 4, 4); /* 0, the two versions, a newer one */
      break;
    default: /* a small value at a byte (counts, lengths, gaps) */
      if (len) p[pos % len] = (unsigned char)(val % 8);
      break;
  }
}

static void query_from(const uint8_t *p, size_t n, const char **q, size_t *qlen) {
  size_t len = n < 48 ? n : 48;
  *q = (const char *)p;
  *qlen = len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rag_bm25 *b = NULL;
  const char *why = NULL, *q;
  size_t qlen;
  int rc, mode, borrow;
  if (size < 1) return 0;
  mode = data[0] % 4;
  borrow = (data[0] >> 2) & 1;
  data++;
  size--;
  if (mode == 0 || mode == 3) {
    unsigned char *p = (unsigned char *)rag_malloc(size + 1);
    must(p != NULL);
    if (size) memcpy(p, data, size);
    if (mode == 3) fix_crcs(p, size);
    rc = rag_bm25_load_mem(p, size, borrow, &b, &why);
    query_from(data + (size > HEADER ? HEADER : size), size > HEADER ? size - HEADER : 0, &q,
               &qlen);
    if (loaded(rc, b, why)) exercise(b, q, qlen);
    rag_bm25_free(b);
    rag_free(p);
    return 0;
  }
  {
    /* modes 1 and 2: mutation parameters, then options and documents */
    input in;
    uint8_t nm, ops[4][5];
    size_t i, n0 = 0, n1 = 0, n;
    unsigned char *d0 = NULL, *d1 = NULL, *p;
    rag_bm25 *a, *c = NULL;
    in.p = data;
    in.e = data + size;
    nm = 1 + take(&in) % 4;
    for (i = 0; i < 4; i++) {
      size_t j;
      for (j = 0; j < 5; j++) ops[i][j] = take(&in);
    }
    query_from(in.p, (size_t)(in.e - in.p), &q, &qlen);
    a = build(&in);
    if (a == NULL) return 0;
    /* the undamaged dump loads, searches the same and dumps identically */
    must(rag_bm25_dump(a, &d0, &n0) == RAG_OK);
    must(rag_bm25_check(a) == RAG_OK);
    must(rag_bm25_load_mem(d0, n0, borrow, &c, &why) == RAG_OK && rag_bm25_check(c) == RAG_OK);
    must(rag_bm25_dump(c, &d1, &n1) == RAG_OK && n1 == n0 && memcmp(d0, d1, n0) == 0);
    for (i = 0; i < NQUERIES; i++) {
      result r, s;
      search(a, queries[i], strlen(queries[i]), &r);
      search(c, queries[i], strlen(queries[i]), &s);
      same(&r, &s);
    }
    rag_free(d1);
    rag_bm25_free(c);
    rag_bm25_free(a);
    if (mode == 1) { /* damage the bytes, CRCs left as they are */
      p = d0;
      n = n0;
      for (i = 0; i < nm; i++) {
        uint32_t pos = (uint32_t)ops[i][1] | (uint32_t)ops[i][2] << 8 | (uint32_t)ops[i][3] << 16;
        switch (ops[i][0] % 3) {
          case 0:
            p[(pos / 8) % n] ^= (unsigned char)(1u << (pos % 8));
            break;
          case 1:
            n = pos % (n + 1);
            break;
          default:
            p[pos % n] = ops[i][4];
            break;
        }
        if (n == 0) break;
      }
      rc = rag_bm25_load_mem(p, n, borrow, &b, &why);
    } else { /* edit the sections, then make every length and CRC agree */
      file f;
      split(&f, d0, n0);
      for (i = 0; i < nm; i++)
        edit(&f, ops[i][0], ops[i][1], (uint32_t)ops[i][2] | (uint32_t)ops[i][3] << 8,
             ops[i][4]);
      p = join(&f, &n);
      for (i = 0; i < NSEC; i++) rag_free(f.sec[i]);
      rc = rag_bm25_load_mem(p, n, borrow, &b, &why);
      rag_free(d0);
      d0 = p;
    }
    if (loaded(rc, b, why)) exercise(b, q, qlen);
    rag_bm25_free(b);
    rag_free(d0);
  }
  return 0;
}
