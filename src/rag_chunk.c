/*
** rag_chunk.c: the chunkers. They all work on spans of the caller's text:
** the recursive rules cut a span into pieces at the first separator it
** contains, measure each piece once, pack neighbours greedily by the sum of
** their measures, and then measure each packed chunk exactly, dropping its
** last piece while it is over the limit (token counts are not additive).
** The other chunkers choose their own pieces (token windows, sentences,
** sections) and fall back on the recursive rules for anything too big.
*/
#include "rag_chunk.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rag_approx.h"
#include "rag_markdown.h"
#include "rag_sentences.h"
#include "rag_text.h"
#include "rag_utf8.h"

#define NONE ((size_t)-1)

/* {====== Measures ======} */

static int chars_count(void *ud, const char *s, size_t len, size_t *n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, k = 0;
  (void)ud;
  /* eight bytes at a time: count the bytes that are not 10xxxxxx */
  for (; i + 8 <= len; i += 8) {
    uint64_t w, cont;
    memcpy(&w, p + i, 8);
    cont = (w & ~(w << 1)) & UINT64_C(0x8080808080808080); /* 10xxxxxx */
    k += 8 - (size_t)(((cont >> 7) * UINT64_C(0x0101010101010101)) >> 56);
  }
  for (; i < len; i++) k += !rag_utf8_is_cont(p[i]);
  *n = k;
  return RAG_OK;
}

static int approx_count(void *ud, const char *s, size_t len, size_t *n) {
  size_t errpos;
  (void)ud;
  return rag_approx_count(s, len, n, &errpos);
}

static int approx_count_upto(void *ud, const char *s, size_t len, size_t max,
                             size_t *n) {
  size_t errpos;
  (void)ud;
  return rag_approx_count_upto(s, len, max, n, &errpos);
}

static int approx_ends(void *ud, const char *s, size_t len, size_t **ends,
                       size_t *n) {
  size_t errpos;
  (void)ud;
  return rag_approx_split(s, len, ends, n, &errpos);
}

static int bpe_count(void *ud, const char *s, size_t len, size_t *n) {
  size_t errpos;
  return rag_tokenizer_count((const rag_tokenizer *)ud, s, len, 0, n, &errpos);
}

static int bpe_count_upto(void *ud, const char *s, size_t len, size_t max,
                          size_t *n) {
  size_t errpos;
  return rag_tokenizer_count_upto((const rag_tokenizer *)ud, s, len, 0, max, n,
                                  &errpos);
}

static int bpe_ends(void *ud, const char *s, size_t len, size_t **ends,
                    size_t *n) {
  size_t errpos;
  return rag_tokenizer_ends((const rag_tokenizer *)ud, s, len, 0, ends, n,
                            &errpos);
}

static int bpe_spans_new(void *ud, const char *s, size_t len, void **sp) {
  return rag_tokenizer_spans_new((const rag_tokenizer *)ud, s, len,
                                 (rag_tokenizer_spans **)sp);
}

static int bpe_spans_count(void *sp, size_t a, size_t b, size_t max,
                           size_t *n) {
  return rag_tokenizer_spans_count((rag_tokenizer_spans *)sp, a, b, max, n);
}

static void bpe_spans_free(void *sp) {
  rag_tokenizer_spans_free((rag_tokenizer_spans *)sp);
}

void rag_chunk_measure_chars(rag_chunk_measure *m) {
  m->count = chars_count;
  m->count_upto = NULL;
  m->ends = NULL; /* fixed walks code points itself */
  m->spans_new = NULL;
  m->spans_count = NULL;
  m->spans_free = NULL;
  m->ud = NULL;
}

void rag_chunk_measure_approx(rag_chunk_measure *m) {
  m->count = approx_count;
  m->count_upto = approx_count_upto;
  m->ends = approx_ends;
  m->spans_new = NULL;
  m->spans_count = NULL;
  m->spans_free = NULL;
  m->ud = NULL;
}

void rag_chunk_measure_bpe(rag_chunk_measure *m, const rag_tokenizer *t) {
  m->count = bpe_count;
  m->count_upto = bpe_count_upto;
  m->ends = bpe_ends;
  m->spans_new = bpe_spans_new; /* the chunkers count the same bytes again and again */
  m->spans_count = bpe_spans_count;
  m->spans_free = bpe_spans_free;
  m->ud = (void *)(uintptr_t)t;
}

/* {====== Whitespace ======} */

/* The length of the whitespace character at s[i] (JavaScript's trim set:
** ASCII \t \n \v \f \r space, U+00A0 U+1680 U+2000-200A U+2028 U+2029
** U+202F U+205F U+3000 U+FEFF), or 0. */
static size_t ws_at(const unsigned char *s, size_t i, size_t end) {
  unsigned char c = s[i];
  if (c == ' ' || (c >= '\t' && c <= '\r')) return 1;
  if (c == 0xC2 && i + 1 < end && s[i + 1] == 0xA0) return 2;
  if (c < 0xE1 || c > 0xEF || i + 2 >= end) return 0;
  if (c == 0xE1) return s[i + 1] == 0x9A && s[i + 2] == 0x80 ? 3 : 0;
  if (c == 0xE2 && s[i + 1] == 0x80)
    return s[i + 2] <= 0x8A || s[i + 2] == 0xA8 || s[i + 2] == 0xA9 ||
                   s[i + 2] == 0xAF
               ? 3
               : 0;
  if (c == 0xE2) return s[i + 1] == 0x81 && s[i + 2] == 0x9F ? 3 : 0;
  if (c == 0xE3) return s[i + 1] == 0x80 && s[i + 2] == 0x80 ? 3 : 0;
  if (c == 0xEF) return s[i + 1] == 0xBB && s[i + 2] == 0xBF ? 3 : 0;
  return 0;
}

/* The same for the character that ends just before s[i], looking no
** further back than `start`. */
static size_t ws_before(const unsigned char *s, size_t start, size_t i) {
  size_t j = i - 1;
  while (j > start && rag_utf8_is_cont(s[j])) j--;
  return ws_at(s, j, i) == i - j ? i - j : 0;
}

/* {====== Context ======} */

typedef struct piece {
  size_t a, b, size;
} piece;

typedef struct pieces {
  piece *v;
  size_t n, cap;
} pieces;

typedef struct ctx {
  const unsigned char *s;
  size_t len;
  const rag_chunk_opts *o;
  const rag_chunk_measure *m;
  rag_chunk_list *out;
  size_t limit; /* the size limit of the current pass */
  size_t prev;  /* the chunk before, in this pass, or NONE */
  rag_chunk_sep seps[64 + 1];
  size_t nseps;
  pieces stk; /* the pieces of every open level, innermost last */
  void *spans; /* the measure's counter of spans of s (see count_upto) */
  size_t counts; /* counts so far, before spans */
  int ascii;  /* the text is all ASCII: code points are bytes */
} ctx;

static const rag_chunk_sep default_seps[] = {
    {RAG_SEP_TEXT, "\n\n", 2},   {RAG_SEP_TEXT, "\n", 1},
    {RAG_SEP_SENTENCE, NULL, 0}, {RAG_SEP_TEXT, " ", 1},
    {RAG_SEP_CHAR, NULL, 0},
};

void rag_chunk_defaults(rag_chunk_opts *o) {
  o->size = 512;
  o->overlap = 0;
  o->seps = NULL;
  o->nseps = 0;
  o->keep = RAG_KEEP_START;
  o->trim = 1;
  o->langchain = 0;
}

static int all_ascii(const unsigned char *s, size_t len) {
  uint64_t w, acc = 0;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    memcpy(&w, s + i, 8);
    acc |= w;
  }
  for (; i < len; i++) acc |= s[i];
  return (acc & UINT64_C(0x8080808080808080)) == 0;
}

/* Checks the text and options and sets up c; *errpos as the header says. */
static int begin(ctx *c, const char *s, size_t len, const rag_chunk_opts *o,
                 const rag_chunk_measure *m, rag_chunk_list *out,
                 size_t *errpos) {
  const rag_chunk_sep *seps = o->seps ? o->seps : default_seps;
  size_t nseps =
             o->seps ? o->nseps : sizeof default_seps / sizeof default_seps[0],
         i;
  size_t bad = rag_text_first_invalid((const unsigned char *)s, len);
  if (bad < len) {
    *errpos = bad + 1;
    return RAG_EENCODING;
  }
  if (o->size == 0 || o->overlap >= o->size || nseps > 64) return RAG_EINVAL;
  c->s = (const unsigned char *)s;
  c->len = len;
  c->o = o;
  c->m = m;
  c->out = out;
  c->limit = o->size;
  c->prev = NONE;
  c->stk.v = NULL;
  c->stk.n = c->stk.cap = 0;
  c->spans = NULL;
  c->counts = 0;
  c->ascii = m->count == chars_count && all_ascii(c->s, len); /* only chars use it: no pass else */
  c->nseps = 0;
  for (i = 0; i < nseps; i++) {
    if (seps[i].kind == RAG_SEP_TEXT && seps[i].len == 0) return RAG_EINVAL;
    c->seps[c->nseps++] = seps[i];
    if (seps[i].kind == RAG_SEP_CHAR) break; /* nothing after it is ever used */
  }
  if (c->nseps == 0 || c->seps[c->nseps - 1].kind != RAG_SEP_CHAR)
    c->seps[c->nseps++] =
        default_seps[sizeof default_seps / sizeof default_seps[0] - 1];
  return RAG_OK;
}

/* The measure of [a, b), exact when it is at most max (else only above
** it: pass (size_t)-1 for an exact count). */
static int count_upto(ctx *c, size_t a, size_t b, size_t max, size_t *n) {
  if (a >= b) {
    *n = 0;
    return RAG_OK;
  }
  if (c->m->count == chars_count && c->ascii) {
    *n = b - a;
    return RAG_OK;
  }
  if (c->m->count == chars_count && b - a < 16) { /* short pieces, inline */
    size_t k = 0;
    for (; a < b; a++) k += !rag_utf8_is_cont(c->s[a]);
    *n = k;
    return RAG_OK;
  }
  /* Most texts are counted once (they fit): the spans' counter pays only
  ** from the second count on, or for a span well over max (4 bytes a token:
  ** the count would stop early, then start again). */
  if (c->m->spans_new != NULL &&
      (c->spans != NULL || c->counts++ > 0 || (b - a) / 4 > max)) {
    int rc;
    if (c->spans == NULL &&
        (rc = c->m->spans_new(c->m->ud, (const char *)c->s, c->len,
                              &c->spans)) != RAG_OK)
      return rc;
    return c->m->spans_count(c->spans, a, b, max, n);
  }
  if (b - a <= max || c->m->count_upto == NULL) /* a unit is a byte at least */
    return c->m->count(c->m->ud, (const char *)c->s + a, b - a, n);
  return c->m->count_upto(c->m->ud, (const char *)c->s + a, b - a, max, n);
}

static int count(ctx *c, size_t a, size_t b, size_t *n) {
  return count_upto(c, a, b, (size_t)-1, n);
}

/* [a, b) without whitespace at its edges, when trimming. */
static void measure_trim(ctx *c, size_t a, size_t b, size_t *ta, size_t *tb) {
  size_t w;
  if (c->o->trim) {
    while (a < b && (w = ws_at(c->s, a, b)) > 0) a += w;
    while (b > a && (w = ws_before(c->s, a, b)) > 0) b -= w;
  }
  *ta = a;
  *tb = b;
}

/* [a, b) trimmed and its measure (exact when it is at most max). */
static int measure_upto(ctx *c, size_t a, size_t b, size_t max, size_t *ta,
                        size_t *tb, size_t *n) {
  measure_trim(c, a, b, ta, tb);
  return count_upto(c, *ta, *tb, max, n);
}

static int measure(ctx *c, size_t a, size_t b, size_t *ta, size_t *tb,
                   size_t *n) {
  return measure_upto(c, a, b, (size_t)-1, ta, tb, n);
}

/* Appends [a, b) of measure n, with its overlap with the chunk before. */
static int push(ctx *c, size_t a, size_t b, size_t n) {
  rag_chunk *v, *k;
  size_t ov = 0;
  int rc;
  if (a >= b) return RAG_OK;
  if (c->prev != NONE && c->out->v[c->prev].stop > a) {
    size_t e = c->out->v[c->prev].stop < b ? c->out->v[c->prev].stop : b;
    if ((rc = count(c, a, e, &ov)) != RAG_OK) return rc;
  }
  v = (rag_chunk *)rag_grow(c->out->v, &c->out->cap, c->out->n + 1, sizeof *v);
  if (v == NULL) return RAG_ENOMEM;
  c->out->v = v;
  k = &v[c->out->n];
  memset(k, 0, sizeof *k);
  k->start = a;
  k->stop = b;
  k->size = n;
  k->overlap = ov;
  c->prev = c->out->n++;
  return RAG_OK;
}

/* {====== Recursive rules ======} */

static int add(pieces *p, size_t a, size_t b) {
  if (a >= b) return RAG_OK;
  if (p->n == p->cap) {
    piece *v = (piece *)rag_grow(p->v, &p->cap, p->n + 1, sizeof *v);
    if (v == NULL) return RAG_ENOMEM;
    p->v = v;
  }
  p->v[p->n].a = a;
  p->v[p->n].b = b;
  p->v[p->n++].size = 0;
  return RAG_OK;
}

static size_t find(const unsigned char *s, size_t i, size_t b,
                   const rag_chunk_sep *sep) {
  const unsigned char *p;
  while (i + sep->len <= b &&
         (p = (const unsigned char *)memchr(s + i, sep->text[0],
                                            b - i - sep->len + 1)) != NULL) {
    if (sep->len == 1 || (p[1] == (unsigned char)sep->text[1] &&
                          memcmp(p + 2, sep->text + 2, sep->len - 2) == 0))
      return (size_t)(p - s);
    i = (size_t)(p - s) + 1;
  }
  return NONE;
}

/*
** Cuts [a, b) at sep into p. A literal separator kept at the start cuts
** before every place it occurs, overlapping ones too (JavaScript's split
** on a lookahead, as LangChain.js does); kept at the end or dropped, it
** cuts at non-overlapping occurrences. The pieces go on c->stk; none when
** sep does not occur (or makes fewer than two sentences).
*/
static int cut(ctx *c, size_t a, size_t b, const rag_chunk_sep *sep) {
  pieces *p = &c->stk;
  size_t last = a, h, i;
  int rc = RAG_OK;
  if (sep->kind == RAG_SEP_CHAR) {
    for (i = a + 1; i <= b && rc == RAG_OK; i++)
      if (i == b || !rag_utf8_is_cont(c->s[i])) {
        rc = add(p, last, i);
        last = i;
      }
    return rc;
  }
  if (sep->kind == RAG_SEP_SENTENCE) {
    rag_span *sp;
    size_t n, k, errpos;
    if ((rc = rag_sentences_split((const char *)c->s + a, b - a, &sp, &n,
                                  &errpos)) != RAG_OK)
      return rc;
    for (k = 1; k < n && rc == RAG_OK; k++) {
      rc = add(p, last, a + sp[k].start);
      last = a + sp[k].start;
    }
    rag_free(sp);
    if (rc == RAG_OK && n >= 2) rc = add(p, last, b);
    return rc;
  }
  if ((h = find(c->s, a, b, sep)) == NONE) return RAG_OK;
  for (; h != NONE && rc == RAG_OK;
       h = find(c->s, h + (c->o->keep == RAG_KEEP_START ? 1 : sep->len), b,
                sep)) {
    if (c->o->keep == RAG_KEEP_START) {
      rc = add(p, last, h);
      last = h;
    } else if (c->o->keep == RAG_KEEP_END) {
      rc = add(p, last, h + sep->len);
      last = h + sep->len;
    } else {
      rc = add(p, last, h);
      last = h + sep->len;
    }
  }
  if (rc == RAG_OK) rc = add(p, last, b);
  return rc;
}

static int split(ctx *c, size_t a, size_t b, size_t lev);

/*
** Packs pieces g0..g1 of c->stk (each under the limit) into chunks,
** LangChain's merge: grow while the summed measure fits, then keep as
** overlap the longest tail of the chunk that fits the overlap and leaves
** room for the next piece. sepsz is the measure of a dropped separator
** between pieces. A nested split may move c->stk.v, so v is re-read.
*/
static int merge(ctx *c, size_t g0, size_t g1, size_t sepsz, size_t next) {
  size_t start = g0;
  int rc;
  while (start < g1) {
    const piece *v = c->stk.v;
    size_t j = start, total = v[start].size, ta, tb, n, s2, ov;
    while (j + 1 < g1 && total + sepsz + v[j + 1].size <= c->limit)
      total += sepsz + v[++j].size;
    for (;;) {
      if (c->m->count == chars_count && sepsz == 0) { /* additive: no recount */
        size_t cut_a, cut_b;
        measure_trim(c, v[start].a, v[j].b, &ta, &tb);
        count(c, v[start].a, ta, &cut_a);
        count(c, tb, v[j].b, &cut_b);
        n = total - cut_a - cut_b;
      } else if ((rc = measure_upto(c, v[start].a, v[j].b, c->limit, &ta, &tb,
                                    &n)) != RAG_OK) {
        return rc;
      }
      if (n <= c->limit || j == start) break;
      total -= v[j].size + sepsz;
      j--; /* joined, the pieces measure more than their sum */
    }
    if (n > c->limit) {
      if (next < c->nseps)
        rc = split(c, v[start].a, v[start].b, next);
      else if ((rc = count(c, ta, tb, &n)) == RAG_OK) /* kept whole: exactly */
        rc = push(c, ta, tb, n);
      if (rc != RAG_OK) return rc;
      start++;
      continue;
    }
    if ((rc = push(c, ta, tb, n)) != RAG_OK) return rc;
    if (j + 1 >= g1) break;
    for (s2 = j + 1, ov = 0; s2 - 1 > start; s2--) {
      size_t grown = ov + v[s2 - 1].size + (ov > 0 ? sepsz : 0);
      if (grown > c->o->overlap || grown + sepsz + v[j + 1].size > c->limit)
        break;
      ov = grown;
    }
    start = s2;
  }
  return RAG_OK;
}

/* A piece is packed as it is when it is under the limit (LangChain:
** strictly under). */
static int fits(const ctx *c, size_t n) {
  return c->o->langchain ? n < c->limit : n <= c->limit;
}

/* Chunks [a, b) by the rules from seps[lev] on. */
static int split(ctx *c, size_t a, size_t b, size_t lev) {
  size_t base = c->stk.n, i, k, g0 = base, sepsz = 0, next, end;
  int rc = RAG_OK;
  for (i = lev; i < c->nseps; i++) {
    if ((rc = cut(c, a, b, &c->seps[i])) != RAG_OK) goto done;
    if (c->stk.n > base) break;
  }
  if (i == c->nseps) goto done; /* only separators: nothing to keep */
  end = c->stk.n;
  next = c->seps[i].kind == RAG_SEP_CHAR ? c->nseps : i + 1;
  if (c->seps[i].kind == RAG_SEP_TEXT && c->o->keep == RAG_KEEP_NONE)
    rc = c->m->count(c->m->ud, c->seps[i].text, c->seps[i].len, &sepsz);
  for (k = base; k < end && rc == RAG_OK; k++) /* exact for those that fit */
    rc = count_upto(c, c->stk.v[k].a, c->stk.v[k].b, c->limit,
                    &c->stk.v[k].size);
  for (k = base; k < end && rc == RAG_OK; k++) {
    piece p = c->stk.v[k];
    if (fits(c, p.size)) continue;
    if ((rc = merge(c, g0, k, sepsz, next)) != RAG_OK) break;
    g0 = k + 1;
    if (next < c->nseps) {
      rc = split(c, p.a, p.b, next);
    } else if (c->o->langchain) { /* LangChain keeps it untrimmed */
      if ((rc = count(c, p.a, p.b, &p.size)) == RAG_OK)
        rc = push(c, p.a, p.b, p.size);
    } else {
      size_t ta, tb, n;
      if ((rc = measure(c, p.a, p.b, &ta, &tb, &n)) == RAG_OK)
        rc = push(c, ta, tb, n);
    }
  }
  if (rc == RAG_OK) rc = merge(c, g0, end, sepsz, next);
done:
  c->stk.n = base;
  return rc;
}

/* Ends a chunker: releases c's scratch and passes rc on. */
static int finish(ctx *c, int rc) {
  rag_free(c->stk.v);
  c->stk.v = NULL;
  if (c->spans != NULL) c->m->spans_free(c->spans);
  c->spans = NULL;
  return rc;
}

/* [a, b) as one chunk when it fits once trimmed, else by the rules. */
static int span(ctx *c, size_t a, size_t b) {
  size_t ta, tb, n;
  int rc = measure_upto(c, a, b, c->limit, &ta, &tb, &n);
  if (rc != RAG_OK) return rc;
  return n <= c->limit ? push(c, ta, tb, n) : split(c, a, b, 0);
}

/*
** A whole text (or a chunk to cut smaller) by the recursive rules. One that
** fits is one chunk, counted once: cutting it into pieces to count them
** and then counting them joined would measure it twice, and more when the
** pieces measure more than the whole. LangChain always cuts first.
*/
static int whole(ctx *c, size_t a, size_t b) {
  return c->o->langchain ? split(c, a, b, 0) : span(c, a, b);
}

int rag_chunk_recursive(const char *s, size_t len, const rag_chunk_opts *o,
                        const rag_chunk_measure *m, rag_chunk_list *out,
                        size_t *errpos) {
  ctx c;
  int rc = begin(&c, s, len, o, m, out, errpos);
  if (rc != RAG_OK || len == 0) return rc;
  return finish(&c, whole(&c, 0, len));
}

/* {====== Fixed windows ======} */

/* The byte k code points after byte i (or len). */
static size_t skip_chars(const unsigned char *s, size_t len, size_t i,
                         size_t k) {
  while (k > 0 && i < len) {
    i++;
    while (i < len && rag_utf8_is_cont(s[i])) i++;
    k--;
  }
  return i;
}

/* Fixed windows of code points: no unit array, one walk. */
static int fixed_chars(ctx *c) {
  size_t p = 0, q, n, step = c->o->size - c->o->overlap;
  int rc;
  while (p < c->len) {
    q = skip_chars(c->s, c->len, p, c->o->size);
    if ((rc = count(c, p, q, &n)) != RAG_OK) return rc;
    if ((rc = push(c, p, q, n)) != RAG_OK) return rc;
    if (q == c->len) break;
    p = skip_chars(c->s, c->len, p, step);
  }
  return RAG_OK;
}

int rag_chunk_fixed(const char *s, size_t len, const rag_chunk_opts *o,
                    const rag_chunk_measure *m, rag_chunk_list *out,
                    size_t *errpos) {
  ctx c;
  size_t *e = NULL, *pos = NULL, *unit, ne, nb = 1, k, p = 0, q = 0, n;
  int rc = begin(&c, s, len, o, m, out, errpos);
  if (rc != RAG_OK || len == 0) return rc;
  if (m->ends == NULL) return fixed_chars(&c); /* code points */
  if ((rc = m->ends(m->ud, s, len, &e, &ne)) != RAG_OK) return rc;
  /* boundaries: unit ends at character boundaries, with units before them */
  if (RAG_MUL_OVERFLOWS(ne + 1, 2 * sizeof *pos) ||
      (pos = (size_t *)rag_malloc((ne + 1) * 2 * sizeof *pos)) == NULL) {
    rc = RAG_ENOMEM;
    goto done;
  }
  unit = pos + ne + 1;
  pos[0] = unit[0] = 0;
  for (k = 0; k < ne; k++)
    if (e[k] == len || (e[k] < len && !rag_utf8_is_cont(c.s[e[k]]))) {
      pos[nb] = e[k];
      unit[nb++] = k + 1;
    }
  if (pos[nb - 1] != len) { /* cannot happen: the last unit ends the text */
    rc = RAG_EINVAL;
    goto done;
  }
  while (pos[p] < len) {
    if (q <= p) q = p + 1;
    while (q + 1 < nb && unit[q + 1] - unit[p] <= o->size) q++;
    for (;;) {
      if ((rc = count(&c, pos[p], pos[q], &n)) != RAG_OK) goto done;
      if (n <= o->size || q == p + 1) break;
      q--;
    }
    if ((rc = push(&c, pos[p], pos[q], n)) != RAG_OK) goto done;
    if (pos[q] == len) break;
    k = p + 1;
    while (k < q && unit[q] - unit[k] > o->overlap) k++;
    p = k;
  }
done:
  rag_free(e);
  rag_free(pos);
  return finish(&c, rc);
}

/* {====== Sentences and windows ======} */

/* The sentences of the text with their measures: sz[2 k] is sentence k's,
** sz[2 k + 1] that of the whitespace after it (2 n - 1 entries). */
static int sentences(ctx *c, rag_span **sp, size_t *n, size_t **sz) {
  size_t k, errpos;
  int rc = rag_sentences_split((const char *)c->s, c->len, sp, n, &errpos);
  *sz = NULL;
  if (rc != RAG_OK || *n == 0) return rc;
  if (RAG_MUL_OVERFLOWS(*n, 2 * sizeof **sz) ||
      (*sz = (size_t *)rag_malloc(*n * 2 * sizeof **sz)) == NULL)
    return RAG_ENOMEM;
  for (k = 0; k < *n && rc == RAG_OK; k++) {
    rc = count(c, (*sp)[k].start, (*sp)[k].stop, &(*sz)[2 * k]);
    if (rc == RAG_OK && k + 1 < *n)
      rc = count(c, (*sp)[k].stop, (*sp)[k + 1].start, &(*sz)[2 * k + 1]);
  }
  return rc;
}

/* One sentence over the limit, by the recursive rules, in a pass of its own. */
static int long_sentence(ctx *c, const rag_span *sp) {
  int rc;
  c->prev = NONE;
  rc = split(c, sp->start, sp->stop, 0);
  c->prev = NONE;
  return rc;
}

int rag_chunk_sentences(const char *s, size_t len, const rag_chunk_opts *o,
                        const rag_chunk_measure *m, rag_chunk_list *out,
                        size_t *errpos) {
  ctx c;
  rag_span *sp = NULL;
  size_t *sz = NULL, n = 0, start = 0;
  rag_chunk_opts so = *o;
  int rc;
  so.overlap = 0; /* counted in sentences here, not units */
  if ((rc = begin(&c, s, len, &so, m, out, errpos)) != RAG_OK) return rc;
  if ((rc = sentences(&c, &sp, &n, &sz)) != RAG_OK) goto done;
  while (start < n) {
    size_t j = start, total = sz[2 * start], cnt = 0, next;
    while (j + 1 < n && total + sz[2 * j + 1] + sz[2 * j + 2] <= o->size) {
      total += sz[2 * j + 1] + sz[2 * j + 2];
      j++;
    }
    for (;;) { /* the sum is exact for code points, an estimate for tokens */
      if ((rc = count(&c, sp[start].start, sp[j].stop, &cnt)) != RAG_OK)
        goto done;
      if (cnt <= o->size || j == start) break;
      j--;
    }
    if (cnt > o->size) {
      if ((rc = long_sentence(&c, &sp[start])) != RAG_OK) goto done;
      start++;
      continue;
    }
    if ((rc = push(&c, sp[start].start, sp[j].stop, cnt)) != RAG_OK) goto done;
    if (j + 1 >= n) break;
    /* the last `overlap` sentences again, as many as leave room for one more */
    next = j + 1 > start + o->overlap ? j + 1 - o->overlap : start + 1;
    for (; next <= j; next++) {
      if ((rc = count(&c, sp[next].start, sp[j + 1].stop, &cnt)) != RAG_OK)
        goto done;
      if (cnt <= o->size) break;
    }
    start = next;
  }
done:
  rag_free(sp);
  rag_free(sz);
  return finish(&c, rc);
}

int rag_chunk_window(const char *s, size_t len, const rag_chunk_opts *o,
                     size_t window, const rag_chunk_measure *m,
                     rag_chunk_list *out, size_t *errpos) {
  ctx c;
  rag_span *sp = NULL;
  size_t *sz = NULL, n = 0, k, i;
  int rc = begin(&c, s, len, o, m, out, errpos);
  if (rc != RAG_OK) return rc;
  if ((rc = sentences(&c, &sp, &n, &sz)) != RAG_OK) goto done;
  for (k = 0; k < n; k++) {
    size_t first = out->n, lo = k > window ? k - window : 0;
    size_t hi = n - 1 - k > window ? k + window : n - 1;
    c.prev = NONE;
    rc = sz[2 * k] <= o->size ? push(&c, sp[k].start, sp[k].stop, sz[2 * k])
                              : split(&c, sp[k].start, sp[k].stop, 0);
    if (rc != RAG_OK) goto done;
    for (i = first; i < out->n; i++) {
      out->v[i].wstart = sp[lo].start;
      out->v[i].wstop = sp[hi].stop;
    }
  }
done:
  rag_free(sp);
  rag_free(sz);
  return finish(&c, rc);
}

/* {====== Markdown ======} */

int rag_chunk_markdown(const char *s, size_t len, const rag_chunk_opts *o,
                       const rag_chunk_measure *m, rag_chunk_list *out,
                       struct rag_markdown_heading **heads, size_t *nheads,
                       size_t *errpos) {
  ctx c;
  size_t k, i;
  int rc;
  *heads = NULL;
  *nheads = 0;
  if ((rc = begin(&c, s, len, o, m, out, errpos)) != RAG_OK) return rc;
  if ((rc = rag_markdown_headings(s, len, heads, nheads)) != RAG_OK)
    return finish(&c, rc);
  /* section k opens with heading k (1-based; section 0 has none) */
  for (k = 0; k <= *nheads && rc == RAG_OK; k++) {
    size_t a = k == 0 ? 0 : (*heads)[k - 1].start;
    size_t b = k < *nheads ? (*heads)[k].start : len, first = out->n;
    c.prev = NONE;
    rc = span(&c, a, b);
    for (i = first; i < out->n; i++) out->v[i].section = k;
  }
  return finish(&c, rc);
}

/* {====== Hierarchy ======} */

int rag_chunk_hierarchy(const char *s, size_t len, const rag_chunk_opts *o,
                        const size_t *sizes, size_t nsizes,
                        const rag_chunk_measure *m, rag_chunk_list *out,
                        size_t *errpos) {
  ctx c;
  rag_chunk_opts lo = *o;
  size_t lv, k, lo_i, hi_i, i;
  int rc;
  if (nsizes == 0) return RAG_EINVAL;
  for (lv = 0; lv < nsizes; lv++)
    if (sizes[lv] == 0 || o->overlap >= sizes[lv]) return RAG_EINVAL;
  lo.size = sizes[0];
  if ((rc = begin(&c, s, len, &lo, m, out, errpos)) != RAG_OK) return rc;
  lo_i = out->n;
  if (len > 0 && (rc = whole(&c, 0, len)) != RAG_OK) return finish(&c, rc);
  hi_i = out->n;
  for (i = lo_i; i < hi_i; i++) out->v[i].level = 1;
  for (lv = 1; lv < nsizes; lv++) {
    c.limit = sizes[lv];
    for (k = lo_i; k < hi_i; k++) {
      size_t first = out->n, a = out->v[k].start, b = out->v[k].stop;
      c.prev = NONE;
      if (!o->langchain && out->v[k].size <= c.limit) /* known to fit: no count */
        rc = push(&c, a, b, out->v[k].size);
      else
        rc = whole(&c, a, b);
      if (rc != RAG_OK) return finish(&c, rc);
      for (i = first; i < out->n; i++) {
        out->v[i].level = lv + 1;
        out->v[i].parent = k + 1;
      }
    }
    lo_i = hi_i;
    hi_i = out->n;
  }
  return finish(&c, RAG_OK);
}

/* {====== Semantic ======} */

void rag_chunk_distances(const double *v, size_t n, size_t dim, double *d) {
  size_t i, j;
  for (i = 0; i + 1 < n; i++) {
    const double *x = v + i * dim, *y = x + dim;
    double xy = 0, xx = 0, yy = 0;
    for (j = 0; j < dim; j++) {
      xy += x[j] * y[j];
      xx += x[j] * x[j];
      yy += y[j] * y[j];
    }
    d[i] = 1.0 - (xx > 0 && yy > 0 ? xy / (sqrt(xx) * sqrt(yy)) : 0.0);
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* numpy.percentile(x, p) with linear interpolation; sorts x in place. */
static double percentile(double *x, size_t m, double p) {
  double r, f;
  size_t lo, hi;
  qsort(x, m, sizeof *x, cmp_double);
  r = p / 100.0 * (double)(m - 1);
  lo = (size_t)floor(r);
  hi = lo + 1 < m ? lo + 1 : lo;
  f = r - (double)lo;
  return x[lo] + (x[hi] - x[lo]) * f;
}

int rag_chunk_breaks(const double *d, size_t m, rag_chunk_break rule,
                     double amount, double *scratch, unsigned char *brk,
                     double *threshold) {
  const double *score = d;
  double *x = scratch, *g = scratch + m, t, mean = 0, var = 0;
  size_t i;
  if (!isfinite(amount) ||
      ((rule == RAG_BREAK_PERCENTILE || rule == RAG_BREAK_GRADIENT) &&
       (amount < 0 || amount > 100)))
    return RAG_EINVAL;
  if (m == 0) {
    *threshold = 0;
    return RAG_OK;
  }
  for (i = 0; i < m; i++) mean += d[i];
  mean /= (double)m;
  memcpy(x, d, m * sizeof *x);
  switch (rule) {
    case RAG_BREAK_PERCENTILE: t = percentile(x, m, amount); break;
    case RAG_BREAK_STDDEV:
      for (i = 0; i < m; i++) var += (d[i] - mean) * (d[i] - mean);
      t = mean + amount * sqrt(var / (double)m);
      break;
    case RAG_BREAK_IQR: {
      double q1 = percentile(x, m, 25), q3 = percentile(x, m, 75);
      t = mean + amount * (q3 - q1);
      break;
    }
    case RAG_BREAK_GRADIENT:
      if (m == 1)
        g[0] = 0;
      else {
        g[0] = d[1] - d[0];
        g[m - 1] = d[m - 1] - d[m - 2];
        for (i = 1; i + 1 < m; i++) g[i] = (d[i + 1] - d[i - 1]) / 2.0;
      }
      memcpy(x, g, m * sizeof *x);
      t = percentile(x, m, amount);
      score = g;
      break;
    default: return RAG_EINVAL;
  }
  for (i = 0; i < m; i++) brk[i] = score[i] > t;
  *threshold = t;
  return RAG_OK;
}

int rag_chunk_semantic(const char *s, size_t len, const rag_span *sent,
                       size_t n, const unsigned char *brk, size_t min_size,
                       const rag_chunk_opts *o, const rag_chunk_measure *m,
                       rag_chunk_list *out) {
  ctx c;
  size_t errpos, run = 0, i, k;
  int rc = begin(&c, s, len, o, m, out, &errpos);
  if (rc != RAG_OK) return rc;
  for (i = 0; i < n; i++) {
    if (i + 1 < n && !brk[i]) continue;
    if (i + 1 < n && min_size > 0) {
      if ((rc = count(&c, sent[run].start, sent[i].stop, &k)) != RAG_OK) break;
      if (k < min_size) continue;
    }
    c.prev = NONE;
    if ((rc = span(&c, sent[run].start, sent[i].stop)) != RAG_OK) break;
    run = i + 1;
  }
  return finish(&c, rc);
}
