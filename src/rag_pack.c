/*
** rag_pack.c: context packing under a token budget (rag_pack.h). Counts
** are exact for the text returned, seams between template, separator and
** passages included, yet each passage's text is counted about once.
*/
#include "rag_pack.h"

#include <stdio.h>
#include <string.h>

#include "rag.h"
#include "rag_approx.h"
#include "rag_rerank.h"
#include "rag_text.h"
#include "rag_tokenizer.h"
#include "rag_utf8.h"

/*
** How it works. Both split rules of rag_tokenizer (cl100k, o200k) end a
** pre-token where a space follows a non-space, where a non-space other than
** '/' follows a newline, and where an ASCII letter or a CJK ideograph is
** followed by ASCII that is no letter and no apostrophe (or by CJK
** punctuation), whatever surrounds them: a space only ever starts a
** pre-token or sits in an all-space one; no alternative that matches a
** letter goes on past a non-letter other than a contraction's apostrophe; a
** newline ends every alternative that holds it unless white space, or
** (o200k) '/', follows; and pre-tokens never look behind. So the count of a
** text is the sum of the counts of its parts cut at such a boundary. A
** measured text keeps its first boundary h, its last t and the tokens
** between (inner). A buffer keeps `closed`, the exact tokens before its last
** boundary, and counts only its open tail, so appending a passage counts one
** seam window plus the passage's inner, which is counted once and reused.
** Boundaries are also a lower bound (each starts a token), which rejects
** long items after a short scan. The estimator is not additive: with it
** every entry is counted whole and the arranged text is counted again.
*/

#ifndef RAG_PACK_SEGMENT
#define RAG_PACK_SEGMENT 1024 /* bytes counted per call where a limit may stop early */
#endif

#define NONE ((size_t)-1)

/* {====== Types ======} */

typedef struct mtext {
  size_t h, t;  /* first and last boundary, when has */
  size_t inner; /* tokens in [h, t) */
  int has;
} mtext;

typedef struct mbuf {
  char *p;
  size_t len, cap;
  size_t t;      /* start of the open tail */
  size_t closed; /* exact tokens in [0, t) */
} mbuf;

typedef struct piece {
  size_t item, off, len; /* bytes [off, off + len) of the item's text */
  mtext m;
} piece;

typedef struct passage {
  size_t lead, rank;          /* its best item and that item's rank */
  size_t start, stop;         /* [start, stop) of its document, when has_span */
  int has_span, truncated;
  piece *pieces;              /* its text, in document order */
  size_t npieces, cappieces;
  size_t *members;            /* its items */
  size_t nmembers, capmembers;
  char *text;                 /* the pieces joined */
  size_t len, cap;
  mtext m;                    /* text measured */
} passage;

typedef enum tkind { T_LIT, T_N, T_ID, T_SOURCE, T_DOC, T_TEXT, T_SCORE, T_START, T_STOP } tkind;

typedef struct telem {
  tkind kind;
  size_t off, len;
  mtext m; /* T_LIT */
} telem;

/* What an entry shows: a passage with its citation number. */
typedef struct entry {
  size_t n, lead, start, stop;
  int has_span;
  const char *text;
  size_t len;
  const mtext *m;
} entry;

typedef struct keyed {
  const char *s;
  size_t len, idx;
  double score;
} keyed;

typedef struct ctx {
  const rag_pack_item *items;
  size_t n;
  const rag_pack_opts *o;
  const char *tmpl, *sep;
  size_t tmpllen, seplen;
  mtext sepm;
  telem *tel;
  size_t ntel;
  size_t *rank, *pos;      /* items by rank; each item's rank */
  size_t *srcgrp, *docgrp; /* per item: group, NONE when it has no key */
  size_t *taken;           /* per source group: items taken */
  mtext *im;               /* per item: its text measured, when imok */
  unsigned char *imok, *used;
  passage *pass; /* a pool of n + 1; pass[n] holds merge candidates */
  size_t npass;
  size_t *live, nlive; /* pool indices of the passages, in relevance order */
  size_t *order;       /* pool indices in text order */
  mbuf out, tmp;
  int cut_done;
  int has_text; /* the template shows the text */
} ctx;

#define GROW(arr, cap, need, rc)                                  \
  do {                                                            \
    void *q_ = rag_grow((arr), &(cap), (need), sizeof *(arr));    \
    if (q_ == NULL) (rc) = RAG_ENOMEM;                            \
    else (arr) = q_;                                              \
  } while (0)

/* {====== Counting and boundaries ======} */

static int count(const ctx *c, const char *s, size_t len, size_t *n) {
  size_t errpos;
  *n = 0;
  if (len == 0) return RAG_OK;
  if (c->o->tok != NULL) return rag_tokenizer_count(c->o->tok, s, len, 0, n, &errpos);
  return rag_approx_count(s, len, n, &errpos);
}

static int is_alpha(unsigned char b) {
  return (b | 0x20) >= 'a' && (b | 0x20) <= 'z';
}

/* A CJK ideograph U+4E00..U+9FA5 (Lo in every Unicode version) at p[0..2]. */
static int is_han(const unsigned char *p) {
  int32_t cp;
  if (p[0] < 0xe4 || p[0] > 0xe9 || !rag_utf8_is_cont(p[1]) || !rag_utf8_is_cont(p[2])) return 0;
  rag_utf8_decode_valid(p, &cp);
  return cp >= 0x4e00 && cp <= 0x9fa5;
}

/* CJK punctuation (Po, Pi, Pf) at p[0..2]: 、 。 “ ” ！ ： ； ， ？ */
static int is_cjk_punct(const unsigned char *p) {
  if (p[0] == 0xe3 && p[1] == 0x80) return p[2] == 0x81 || p[2] == 0x82;
  if (p[0] == 0xe2 && p[1] == 0x80) return p[2] == 0x9c || p[2] == 0x9d;
  if (p[0] == 0xef && p[1] == 0xbc)
    return p[2] == 0x81 || p[2] == 0x9a || p[2] == 0x9b || p[2] == 0x8c || p[2] == 0x9f;
  return 0;
}

/* Bytes that may follow a word's last letter at a boundary: ASCII that is
** no letter and no apostrophe (1), and leads of CJK punctuation (2). */
static const unsigned char after_word[256] = {
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1,
  1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* Whether the character at i (valid UTF-8, i < len) is white space as the
** split rules' \s sees it: ASCII 9..13 and 32, U+0085, U+00A0, U+1680,
** U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. */
static int ws_at(const unsigned char *s, size_t len, size_t i) {
  unsigned char b = s[i];
  if (b < 0x80) return b == ' ' || (b >= '\t' && b <= '\r');
  if (b == 0xc2) return i + 1 < len && (s[i + 1] == 0x85 || s[i + 1] == 0xa0);
  if (i + 2 >= len) return 0;
  if (b == 0xe1) return s[i + 1] == 0x9a && s[i + 2] == 0x80;
  if (b == 0xe3) return s[i + 1] == 0x80 && s[i + 2] == 0x80;
  if (b != 0xe2) return 0;
  if (s[i + 1] == 0x81) return s[i + 2] == 0x9f;
  return s[i + 1] == 0x80 && (s[i + 2] <= 0x8a || s[i + 2] == 0xa8 || s[i + 2] == 0xa9 ||
                              s[i + 2] == 0xaf);
}

/*
** Whether every split rule ends a pre-token at i (0 < i < len, a character
** boundary of valid UTF-8), in any context: a space after a non-space; a
** non-space other than '/' after a newline; ASCII other than a letter or
** an apostrophe, or CJK punctuation, after an ASCII letter or an ideograph.
*/
static int boundary(const unsigned char *s, size_t len, size_t i) {
  unsigned char a = s[i - 1], b = s[i], k = after_word[b];
  if (b == ' ') {
    size_t j = i - 1;
    while (j > 0 && rag_utf8_is_cont(s[j])) j--;
    return !ws_at(s, len, j);
  }
  if (a == '\n') return b != '/' && !ws_at(s, len, i);
  if (k == 0 || (k == 2 && !(i + 3 <= len && is_cjk_punct(s + i)))) return 0;
  return is_alpha(a) || (i >= 3 && is_han(s + i - 3));
}

/*
** Measures len bytes at str into *m. Sets *over (leaving *m partial) as
** soon as the text, after anything, certainly takes more than `limit`
** tokens: it has more boundaries than that, or inner + 1 exceeds it.
*/
static int measure(const ctx *c, const char *str, size_t len, size_t limit, mtext *m,
                   int *over) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i, nb = 0, seg = 0, k;
  int rc;
  m->has = 0;
  m->h = m->t = m->inner = 0;
  *over = 0;
  if (c->o->tok == NULL) return RAG_OK;
  for (i = 1; i < len; i++) {
    if (!boundary(s, len, i)) continue;
    if (++nb > limit) {
      *over = 1;
      return RAG_OK;
    }
    if (!m->has) {
      m->has = 1;
      m->h = seg = i;
    } else if (i - seg >= RAG_PACK_SEGMENT) {
      if ((rc = count(c, str + seg, i - seg, &k)) != RAG_OK) return rc;
      m->inner += k;
      seg = i;
      if (m->inner >= limit) {
        *over = 1;
        return RAG_OK;
      }
    }
    m->t = i;
  }
  if (m->has && m->t > seg) {
    if ((rc = count(c, str + seg, m->t - seg, &k)) != RAG_OK) return rc;
    m->inner += k;
    if (m->inner >= limit) *over = 1;
  }
  return RAG_OK;
}

/* {====== Measured buffers ======} */

/* Byte i of b (an empty buffer may have no array yet). */
static const char *mb_at(const mbuf *b, size_t i) {
  return b->p == NULL ? "" : b->p + i;
}

static int mb_put(mbuf *b, const char *s, size_t len) {
  int rc = RAG_OK;
  if (len == 0) return RAG_OK;
  if (len > (size_t)-1 - b->len - 1) return RAG_ENOMEM;
  GROW(b->p, b->cap, b->len + len + 1, rc);
  if (rc != RAG_OK) return rc;
  memcpy(b->p + b->len, s, len);
  b->len += len;
  return RAG_OK;
}

/* Appends s measured by m: the window from the open tail to the first
** boundary of s is counted and closed, with m's inner. */
static int mb_putm(const ctx *c, mbuf *b, const char *s, size_t len, const mtext *m) {
  size_t o = b->len, k;
  int rc = mb_put(b, s, len);
  if (rc != RAG_OK || !m->has) return rc;
  if ((rc = count(c, mb_at(b, b->t), o + m->h - b->t, &k)) != RAG_OK) return rc;
  b->closed += k + m->inner;
  b->t = o + m->t;
  return RAG_OK;
}

/* The estimator: closes the open tail as it is. */
static int mb_seal(const ctx *c, mbuf *b) {
  size_t k;
  int rc = count(c, mb_at(b, b->t), b->len - b->t, &k);
  if (rc == RAG_OK) {
    b->closed += k;
    b->t = b->len;
  }
  return rc;
}

static int mb_total(const ctx *c, const mbuf *b, size_t *n) {
  size_t k;
  int rc = count(c, mb_at(b, b->t), b->len - b->t, &k);
  *n = b->closed + k;
  return rc;
}

static void mb_clear(mbuf *b) {
  b->len = b->t = b->closed = 0;
}

/* {====== Template ======} */

static const struct {
  const char *name;
  tkind kind;
} placeholders[] = {{"n", T_N},         {"id", T_ID},       {"source", T_SOURCE},
                    {"doc", T_DOC},     {"text", T_TEXT},   {"score", T_SCORE},
                    {"start", T_START}, {"stop", T_STOP}};

/* The placeholder whose '{' is at s[i]: 1 with its kind, 0 for a literal
** '{' (no lowercase name and '}' follow), -1 for an unknown name. */
static int placeholder(const char *s, size_t len, size_t i, tkind *kind, size_t *plen) {
  size_t j = i + 1, k;
  while (j < len && ((s[j] >= 'a' && s[j] <= 'z') || s[j] == '_')) j++;
  if (j == i + 1 || j >= len || s[j] != '}') return 0;
  *plen = j + 1 - i;
  for (k = 0; k < sizeof placeholders / sizeof placeholders[0]; k++)
    if (strlen(placeholders[k].name) == j - i - 1 &&
        memcmp(placeholders[k].name, s + i + 1, j - i - 1) == 0) {
      *kind = placeholders[k].kind;
      return 1;
    }
  return -1;
}

int rag_pack_check_template(const char *tmpl, size_t tmpllen, size_t *pos, size_t *len) {
  size_t i;
  tkind kind;
  for (i = 0; i < tmpllen; i++)
    if (tmpl[i] == '{' && placeholder(tmpl, tmpllen, i, &kind, len) < 0) {
      *pos = i;
      return RAG_EINVAL;
    }
  return RAG_OK;
}

/* Splits the template into literals (measured) and placeholders. */
static int parse_template(ctx *c) {
  size_t i, lit = 0, nb = 1, plen;
  tkind kind;
  int rc, over;
  for (i = 0; i < c->tmpllen; i++) nb += c->tmpl[i] == '{';
  if (RAG_MUL_OVERFLOWS(nb, 2 * sizeof(telem))) return RAG_ENOMEM;
  if ((c->tel = (telem *)rag_malloc(nb * 2 * sizeof(telem))) == NULL) return RAG_ENOMEM;
  for (i = 0; i <= c->tmpllen; i++) {
    int ph = i < c->tmpllen && c->tmpl[i] == '{' ? placeholder(c->tmpl, c->tmpllen, i, &kind, &plen)
                                                 : 0;
    if (ph == 0 && i < c->tmpllen) continue;
    if (i > lit) {
      telem *t = &c->tel[c->ntel++];
      t->kind = T_LIT;
      t->off = lit;
      t->len = i - lit;
      if ((rc = measure(c, c->tmpl + lit, i - lit, NONE, &t->m, &over)) != RAG_OK) return rc;
    }
    if (ph == 1) {
      c->has_text |= kind == T_TEXT;
      c->tel[c->ntel].kind = kind;
      c->tel[c->ntel++].off = i;
      i += plen - 1;
      lit = i + 1;
    }
  }
  return RAG_OK;
}

static int put_num(mbuf *b, size_t v) {
  char num[32];
  int k = snprintf(num, sizeof num, "%lu", (unsigned long)v);
  return mb_put(b, num, (size_t)k);
}

/* Appends e rendered through the template, after the separator unless first. */
static int put_entry(const ctx *c, mbuf *b, const entry *e, int first) {
  const rag_pack_item *it = &c->items[e->lead];
  size_t i;
  int rc = first ? RAG_OK : mb_putm(c, b, c->sep, c->seplen, &c->sepm);
  for (i = 0; i < c->ntel && rc == RAG_OK; i++) {
    const telem *t = &c->tel[i];
    switch (t->kind) {
      case T_LIT: rc = mb_putm(c, b, c->tmpl + t->off, t->len, &t->m); break;
      case T_N: rc = put_num(b, e->n); break;
      case T_ID: rc = mb_put(b, it->id, it->idlen); break;
      case T_SOURCE:
        rc = it->source ? mb_put(b, it->source, it->srclen) : mb_put(b, it->id, it->idlen);
        break;
      case T_DOC:
        rc = it->doc      ? mb_put(b, it->doc, it->doclen)
             : it->source ? mb_put(b, it->source, it->srclen)
                          : mb_put(b, it->id, it->idlen);
        break;
      case T_TEXT: rc = mb_putm(c, b, e->text, e->len, e->m); break;
      case T_SCORE:
        if (c->o->scored) {
          char num[48];
          int k = snprintf(num, sizeof num, "%.4g", it->score);
          rc = mb_put(b, num, (size_t)k);
        }
        break;
      case T_START: rc = e->has_span ? put_num(b, e->start + 1) : RAG_OK; break;
      case T_STOP: rc = e->has_span ? put_num(b, e->stop) : RAG_OK; break;
    }
  }
  if (rc == RAG_OK && c->o->tok == NULL) rc = mb_seal(c, b);
  return rc;
}

static void passage_entry(const passage *p, size_t n, entry *e) {
  e->n = n;
  e->lead = p->lead;
  e->has_span = p->has_span;
  e->start = p->start;
  e->stop = p->stop;
  e->text = p->text;
  e->len = p->len;
  e->m = &p->m;
}

/* {====== Passages ======} */

/* p becomes item x alone, its text cut to len bytes and measured by m. */
static int passage_set(ctx *c, passage *p, size_t x, size_t len, const mtext *m) {
  const rag_pack_item *it = &c->items[x];
  int rc = RAG_OK;
  GROW(p->pieces, p->cappieces, 1, rc);
  if (rc == RAG_OK) GROW(p->members, p->capmembers, 1, rc);
  if (rc == RAG_OK) GROW(p->text, p->cap, len + 1, rc);
  if (rc != RAG_OK) return rc;
  p->lead = x;
  p->rank = c->pos[x];
  p->has_span = it->has_span;
  p->start = it->start;
  p->stop = it->start + len;
  p->truncated = len < it->len;
  p->pieces[0].item = x;
  p->pieces[0].off = 0;
  p->pieces[0].len = len;
  p->pieces[0].m = *m;
  p->npieces = 1;
  p->members[0] = x;
  p->nmembers = 1;
  if (len > 0) memcpy(p->text, it->text, len);
  p->len = len;
  p->m = *m;
  return RAG_OK;
}

/* p->text and p->m from p->pieces. */
static int passage_render(ctx *c, passage *p) {
  size_t i, total = 0, k;
  int rc = RAG_OK;
  for (i = 0; i < p->npieces; i++) total += p->pieces[i].len;
  GROW(p->text, p->cap, total + 1, rc);
  if (rc != RAG_OK) return rc;
  p->len = 0;
  p->m.has = 0;
  p->m.h = p->m.t = p->m.inner = 0;
  for (i = 0; i < p->npieces; i++) {
    const piece *q = &p->pieces[i];
    size_t o = p->len;
    if (q->len > 0) memcpy(p->text + o, c->items[q->item].text + q->off, q->len);
    p->len += q->len;
    if (!q->m.has) continue;
    if (!p->m.has) {
      p->m.has = 1;
      p->m.h = o + q->m.h;
      p->m.inner = q->m.inner;
    } else {
      if ((rc = count(c, p->text + p->m.t, o + q->m.h - p->m.t, &k)) != RAG_OK) return rc;
      p->m.inner += k + q->m.inner;
    }
    p->m.t = o + q->m.t;
  }
  return RAG_OK;
}

static void passage_swap(passage *a, passage *b) {
  passage t = *a;
  *a = *b;
  *b = t;
}

static void passage_free(passage *p) {
  rag_free(p->pieces);
  rag_free(p->members);
  rag_free(p->text);
}

/* {====== Selection ======} */

/* Commits item x as a new last passage of cutlen bytes measured by m. */
static int add_passage(ctx *c, size_t x, size_t cutlen, const mtext *m) {
  size_t i = c->npass;
  int rc = passage_set(c, &c->pass[i], x, cutlen, m);
  if (rc != RAG_OK) return rc;
  c->npass++;
  c->live[c->nlive++] = i;
  return RAG_OK;
}

/* Appends item x, cut to cut bytes, as the next entry of c->out; *total. */
static int try_entry(ctx *c, size_t x, size_t cut, const mtext *m, size_t *total) {
  const rag_pack_item *it = &c->items[x];
  entry e;
  int rc;
  e.n = c->nlive + 1;
  e.lead = x;
  e.has_span = it->has_span;
  e.start = it->start;
  e.stop = it->start + cut;
  e.text = it->text;
  e.len = cut;
  e.m = m;
  if ((rc = put_entry(c, &c->out, &e, c->nlive == 0)) != RAG_OK) return rc;
  return mb_total(c, &c->out, total);
}

/* The cut after `p` tokens (ends[] their ends in s), moved back to a
** character boundary. */
static size_t cut_at(const char *s, size_t len, const size_t *ends, size_t p) {
  size_t cut = p == 0 ? 0 : ends[p - 1];
  while (cut > 0 && cut < len && rag_utf8_is_cont((unsigned char)s[cut])) cut--;
  return cut;
}

/* The total with item x cut after p tokens, c->out left as it was. */
static int probe(ctx *c, size_t x, const size_t *ends, size_t p, size_t *total) {
  const rag_pack_item *it = &c->items[x];
  size_t len = c->out.len, t = c->out.t, closed = c->out.closed;
  size_t cut = cut_at(it->text, it->len, ends, p);
  mtext m;
  int over, rc = measure(c, it->text, cut, NONE, &m, &over);
  if (rc == RAG_OK) rc = try_entry(c, x, cut, &m, total);
  c->out.len = len;
  c->out.t = t;
  c->out.closed = closed;
  return rc;
}

#ifndef RAG_PACK_CUT_BYTES
#define RAG_PACK_CUT_BYTES 32 /* bytes of text read per token left, to find token ends */
#endif

/*
** Cuts item x to fill what is left of bsel. Token ends come from a prefix
** long enough for the tokens left; the search starts from the tokens left
** after an empty entry, corrects by the miss and bisects when the
** corrections stall. The kept prefix ends at a token end moved back to a
** character boundary.
*/
static int try_cut(ctx *c, size_t x, size_t bsel, int *ok) {
  const rag_pack_item *it = &c->items[x];
  size_t *ends = NULL, ne = 0, errpos, lo = 0, hi, p, total, base, probes, cut, plen;
  mtext m;
  int rc, over;
  if ((rc = probe(c, x, NULL, 0, &base)) != RAG_OK || base >= bsel) return rc;
  plen = bsel - base + 1;
  plen = plen < it->len / RAG_PACK_CUT_BYTES ? plen * RAG_PACK_CUT_BYTES : it->len;
  while (plen < it->len && rag_utf8_is_cont((unsigned char)it->text[plen])) plen++;
  rc = c->o->tok ? rag_tokenizer_ends(c->o->tok, it->text, plen, 0, &ends, &ne, &errpos)
                 : rag_approx_split(it->text, plen, &ends, &ne, &errpos);
  if (rc != RAG_OK || ne == 0) goto done;
  hi = plen == it->len ? ne : ne + 1; /* the whole text did not fit; a prefix may */
  p = bsel - base < hi - 1 ? bsel - base : hi - 1;
  for (probes = 0; probes < 64 && hi - lo > 1; probes++) {
    if (p <= lo || p >= hi) p = lo + (hi - lo) / 2;
    if ((rc = probe(c, x, ends, p, &total)) != RAG_OK) goto done;
    if (total <= bsel) {
      lo = p;
      if (total == bsel) break;
      p += bsel - total;
    } else {
      hi = p;
      p = total - bsel < p ? p - (total - bsel) : 0;
    }
  }
  if ((cut = cut_at(it->text, it->len, ends, lo)) == 0) goto done;
  if ((rc = measure(c, it->text, cut, NONE, &m, &over)) != RAG_OK) goto done;
  if ((rc = try_entry(c, x, cut, &m, &total)) != RAG_OK) goto done;
  if ((rc = add_passage(c, x, cut, &m)) != RAG_OK) goto done;
  c->cut_done = 1;
  *ok = 1;
done:
  rag_free(ends);
  return rc;
}

/* Item x as a passage of its own, cut if it does not fit and may be. */
static int try_new(ctx *c, size_t x, size_t bsel, int *ok) {
  const rag_pack_item *it = &c->items[x];
  size_t len = c->out.len, t = c->out.t, closed = c->out.closed, total;
  int rc, over = 0;
  if (!c->imok[x]) { /* no {text}: the text costs nothing, so no limit */
    rc = measure(c, it->text, it->len, c->has_text ? bsel - c->out.closed : NONE, &c->im[x],
                 &over);
    if (rc != RAG_OK) return rc;
    c->imok[x] = !over;
  }
  if (!over) {
    if ((rc = try_entry(c, x, it->len, &c->im[x], &total)) != RAG_OK) return rc;
    if (total <= bsel) {
      *ok = 1;
      return add_passage(c, x, it->len, &c->im[x]);
    }
    c->out.len = len;
    c->out.t = t;
    c->out.closed = closed;
  }
  if (c->o->truncate && !c->cut_done) return try_cut(c, x, bsel, ok);
  return RAG_OK;
}

/*
** The live passages item x touches (its document, spans touching or
** overlapping), into sel by start: their count, or 0 when there are none
** or they cannot merge (they overlap each other, or disagree with x).
*/
static size_t touching(ctx *c, size_t x, size_t *sel) {
  const rag_pack_item *it = &c->items[x];
  size_t i, j, k = 0;
  for (i = 0; i < c->nlive; i++) {
    const passage *p = &c->pass[c->live[i]];
    if (!p->has_span || c->docgrp[p->lead] != c->docgrp[x]) continue;
    if (it->start > p->stop || p->start > it->stop) continue;
    for (j = k++; j > 0 && c->pass[sel[j - 1]].start > p->start; j--) sel[j] = sel[j - 1];
    sel[j] = c->live[i];
  }
  for (i = 0; i < k; i++) {
    const passage *p = &c->pass[sel[i]];
    size_t a = it->start > p->start ? it->start : p->start;
    size_t b = it->stop < p->stop ? it->stop : p->stop;
    if (i + 1 < k && p->stop > c->pass[sel[i + 1]].start) return 0;
    if (a < b && memcmp(it->text + (a - it->start), p->text + (a - p->start), b - a) != 0)
      return 0;
  }
  return k;
}

/* Appends the bytes [from, to) of document space, taken from item x, to q. */
static int add_gap(ctx *c, passage *q, size_t x, size_t from, size_t to, size_t bsel,
                   int *over) {
  const rag_pack_item *it = &c->items[x];
  int rc = RAG_OK;
  piece *g;
  GROW(q->pieces, q->cappieces, q->npieces + 1, rc);
  if (rc != RAG_OK) return rc;
  g = &q->pieces[q->npieces++];
  g->item = x;
  g->off = from - it->start;
  g->len = to - from;
  return measure(c, it->text + g->off, g->len, c->has_text ? bsel : NONE, &g->m, over);
}

/* Builds in pass[n] the passage that x and the k passages in sel make. */
static int build_merge(ctx *c, size_t x, const size_t *sel, size_t k, size_t bsel, int *over) {
  const rag_pack_item *it = &c->items[x];
  passage *q = &c->pass[c->n];
  size_t i, at, nm = 1;
  int rc = RAG_OK;
  q->npieces = q->nmembers = 0;
  q->has_span = 1;
  q->truncated = 0;
  q->lead = x;
  q->rank = c->pos[x];
  q->start = it->start;
  q->stop = it->stop;
  for (i = 0; i < k; i++) nm += c->pass[sel[i]].nmembers;
  GROW(q->members, q->capmembers, nm, rc);
  if (rc != RAG_OK) return rc;
  q->members[q->nmembers++] = x;
  for (i = 0; i < k; i++) {
    const passage *p = &c->pass[sel[i]];
    if (p->rank < q->rank) {
      q->rank = p->rank;
      q->lead = p->lead;
    }
    if (p->start < q->start) q->start = p->start;
    if (p->stop > q->stop) q->stop = p->stop;
    q->truncated |= p->truncated;
    memcpy(q->members + q->nmembers, p->members, p->nmembers * sizeof *p->members);
    q->nmembers += p->nmembers;
  }
  for (i = 0, at = q->start; i < k && !*over; i++) {
    const passage *p = &c->pass[sel[i]];
    if (at < p->start && (rc = add_gap(c, q, x, at, p->start, bsel, over)) != RAG_OK) return rc;
    GROW(q->pieces, q->cappieces, q->npieces + p->npieces, rc);
    if (rc != RAG_OK) return rc;
    memcpy(q->pieces + q->npieces, p->pieces, p->npieces * sizeof *p->pieces);
    q->npieces += p->npieces;
    at = p->stop;
  }
  if (!*over && at < q->stop && (rc = add_gap(c, q, x, at, q->stop, bsel, over)) != RAG_OK)
    return rc;
  return *over ? RAG_OK : passage_render(c, q);
}

/*
** Merges x into the k passages in sel when the text still fits: the text
** in relevance order is rebuilt with the merged passage in place of the
** best of them (unless no byte is new) and the others removed.
*/
static int try_merge(ctx *c, size_t x, const size_t *sel, size_t k, size_t bsel, int *ok) {
  passage *q = &c->pass[c->n];
  size_t i, j, keep = NONE, total, n = 0;
  int rc, over = 0;
  if ((rc = build_merge(c, x, sel, k, bsel, &over)) != RAG_OK || over) return rc;
  for (i = 0; i < k; i++)
    if (c->pass[sel[i]].lead == q->lead) keep = sel[i];
  if (k > 1 || q->len != c->pass[keep].len) {
    mbuf *b = &c->tmp;
    mb_clear(b);
    for (i = 0; i < c->nlive; i++) {
      size_t li = c->live[i];
      entry e;
      for (j = 0; j < k && sel[j] != li; j++) continue;
      if (j < k && li != keep) continue;
      passage_entry(li == keep ? q : &c->pass[li], ++n, &e);
      if ((rc = put_entry(c, b, &e, n == 1)) != RAG_OK) return rc;
    }
    if ((rc = mb_total(c, b, &total)) != RAG_OK) return rc;
    if (total > bsel) return RAG_OK;
    {
      mbuf t = c->out;
      c->out = c->tmp;
      c->tmp = t;
    }
  }
  passage_swap(q, &c->pass[keep]);
  for (i = j = 0; i < c->nlive; i++) { /* the others are gone */
    size_t li = c->live[i], m;
    for (m = 0; m < k && sel[m] != li; m++) continue;
    if (m == k || li == keep) c->live[j++] = li;
  }
  c->nlive = j;
  *ok = 1;
  return RAG_OK;
}

/* Item x: merged, added, cut or dropped. */
static int consider(ctx *c, size_t x, size_t bsel) {
  const rag_pack_item *it = &c->items[x];
  size_t g = c->srcgrp[x], k = 0;
  int ok = 0, rc;
  if (c->o->per_source > 0 && g != NONE && c->taken[g] >= c->o->per_source) return RAG_OK;
  if (c->o->merge && it->has_span && c->docgrp[x] != NONE) k = touching(c, x, c->order);
  rc = k > 0 ? try_merge(c, x, c->order, k, bsel, &ok) : try_new(c, x, bsel, &ok);
  if (rc == RAG_OK && ok) {
    c->used[x] = 1;
    if (g != NONE) c->taken[g]++;
  }
  return rc;
}

static int select_all(ctx *c, size_t bsel) {
  size_t r;
  int rc = RAG_OK;
  c->npass = c->nlive = 0;
  c->cut_done = 0;
  mb_clear(&c->out);
  memset(c->used, 0, c->n);
  memset(c->taken, 0, c->n * sizeof *c->taken);
  for (r = 0; r < c->n && rc == RAG_OK; r++) rc = consider(c, c->rank[r], bsel);
  return rc;
}

/* The passages in text order (c->order), the text (*fin) and its exact count. */
static int arrange(ctx *c, mbuf **fin, size_t *total) {
  size_t i, k = c->nlive;
  int rc = RAG_OK;
  if (c->o->order == RAG_PACK_EDGES) {
    rag_rerank_litm(k, 1, c->order);
    for (i = 0; i < k; i++) c->order[i] = c->live[c->order[i]];
  } else if (k > 0) {
    memcpy(c->order, c->live, k * sizeof *c->order);
  }
  if (c->o->order != RAG_PACK_EDGES) { /* text order is rank order */
    *fin = &c->out; /* the greedy text itself, counted exactly */
    if (c->o->tok == NULL) return count(c, mb_at(&c->out, 0), c->out.len, total);
    return mb_total(c, &c->out, total);
  }
  mb_clear(&c->tmp);
  for (i = 0; i < k && rc == RAG_OK; i++) {
    entry e;
    passage_entry(&c->pass[c->order[i]], i + 1, &e);
    rc = put_entry(c, &c->tmp, &e, i == 0);
  }
  if (rc != RAG_OK) return rc;
  *fin = &c->tmp;
  if (c->o->tok == NULL) return count(c, mb_at(&c->tmp, 0), c->tmp.len, total);
  return mb_total(c, &c->tmp, total);
}

/* {====== Setup and results ======} */

static int id_cmp(const char *a, size_t na, const char *b, size_t nb) {
  int r = (na < nb ? na : nb) ? memcmp(a, b, na < nb ? na : nb) : 0;
  if (r != 0) return r;
  return na < nb ? -1 : na > nb;
}

/* By key bytes (none first), then index. */
static int cmp_key(const void *x, const void *y) {
  const keyed *a = (const keyed *)x, *b = (const keyed *)y;
  int r;
  if ((a->s == NULL) != (b->s == NULL)) return a->s == NULL ? -1 : 1;
  if ((r = id_cmp(a->s, a->len, b->s, b->len)) != 0) return r;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Best score first, then id bytes (ids are unique). */
static int cmp_rank(const void *x, const void *y) {
  const keyed *a = (const keyed *)x, *b = (const keyed *)y;
  if (a->score != b->score) return a->score > b->score ? -1 : 1;
  return id_cmp(a->s, a->len, b->s, b->len);
}

/* grp[i]: a number shared by the items with the same key, NONE without one. */
static void group(keyed *k, size_t n, size_t *grp) {
  size_t i, g = 0;
  for (i = 0; i < n && k[i].s == NULL; i++) grp[i] = NONE;
  if (i == n) return;
  qsort(k, n, sizeof *k, cmp_key);
  for (i = 0; i < n; i++) {
    if (k[i].s == NULL) {
      grp[k[i].idx] = NONE;
      continue;
    }
    if (i > 0 && k[i - 1].s != NULL && id_cmp(k[i - 1].s, k[i - 1].len, k[i].s, k[i].len) != 0)
      g++;
    grp[k[i].idx] = g;
  }
}

static int check_utf8(const char *s, size_t len, size_t item, rag_pack_field f,
                      rag_pack_err *err) {
  size_t bad = rag_text_first_invalid((const unsigned char *)s, len);
  if (bad == len) return RAG_OK;
  err->item = item;
  err->field = f;
  err->pos = bad + 1;
  return RAG_EENCODING;
}

/* Misuse first (template, spans, duplicate ids), then encodings. */
static int validate(ctx *c, keyed *k, rag_pack_err *err) {
  size_t i, pos, len;
  int rc;
  if (rag_pack_check_template(c->tmpl, c->tmpllen, &pos, &len) != RAG_OK) {
    err->field = RAG_PACK_TEMPLATE;
    err->pos = pos + 1;
    return RAG_EINVAL;
  }
  for (i = 0; i < c->n; i++) {
    const rag_pack_item *it = &c->items[i];
    if (it->has_span && (it->stop < it->start || it->stop - it->start != it->len)) {
      err->item = i;
      err->field = RAG_PACK_SPAN;
      return RAG_EINVAL;
    }
    k[i].s = it->id;
    k[i].len = it->idlen;
    k[i].idx = i;
  }
  qsort(k, c->n, sizeof *k, cmp_key);
  for (i = 1; i < c->n; i++)
    if (id_cmp(k[i - 1].s, k[i - 1].len, k[i].s, k[i].len) == 0) {
      err->item = k[i].idx; /* the later one: equal ids sort by index */
      err->field = RAG_PACK_ID;
      return RAG_EINVAL;
    }
  if ((rc = check_utf8(c->tmpl, c->tmpllen, 0, RAG_PACK_TEMPLATE, err)) != RAG_OK) return rc;
  if ((rc = check_utf8(c->sep, c->seplen, 0, RAG_PACK_SEPARATOR, err)) != RAG_OK) return rc;
  for (i = 0; i < c->n; i++) {
    const rag_pack_item *it = &c->items[i];
    if ((rc = check_utf8(it->id, it->idlen, i, RAG_PACK_ID, err)) != RAG_OK ||
        (rc = check_utf8(it->text, it->len, i, RAG_PACK_TEXT, err)) != RAG_OK ||
        (rc = check_utf8(it->source, it->srclen, i, RAG_PACK_SOURCE, err)) != RAG_OK ||
        (rc = check_utf8(it->doc, it->doclen, i, RAG_PACK_DOC, err)) != RAG_OK)
      return rc;
  }
  return RAG_OK;
}

static void *zalloc(size_t n, size_t size) {
  void *p;
  if (n == 0) n = 1;
  if (RAG_MUL_OVERFLOWS(n, size)) return NULL;
  if ((p = rag_malloc(n * size)) != NULL) memset(p, 0, n * size);
  return p;
}

/* Arrays, ranks, groups and the parsed template. */
static int setup(ctx *c, keyed *k) {
  size_t i, n = c->n;
  int over, rc, sorted;
  c->rank = (size_t *)zalloc(n, sizeof(size_t));
  c->pos = (size_t *)zalloc(n, sizeof(size_t));
  c->srcgrp = (size_t *)zalloc(n, sizeof(size_t));
  c->docgrp = (size_t *)zalloc(n, sizeof(size_t));
  c->taken = (size_t *)zalloc(n, sizeof(size_t));
  c->live = (size_t *)zalloc(n, sizeof(size_t));
  c->order = (size_t *)zalloc(n, sizeof(size_t));
  c->im = (mtext *)zalloc(n, sizeof(mtext));
  c->imok = (unsigned char *)zalloc(n, 1);
  c->used = (unsigned char *)zalloc(n, 1);
  c->pass = n < (size_t)-1 ? (passage *)zalloc(n + 1, sizeof(passage)) : NULL;
  if (!c->rank || !c->pos || !c->srcgrp || !c->docgrp || !c->taken || !c->live || !c->order ||
      !c->im || !c->imok || !c->used || !c->pass)
    return RAG_ENOMEM;
  for (i = 0; i < n; i++) {
    k[i].s = c->items[i].id;
    k[i].len = c->items[i].idlen;
    k[i].idx = i;
    k[i].score = c->items[i].score;
  }
  sorted = c->o->scored && c->o->order != RAG_PACK_GIVEN;
  if (sorted) qsort(k, n, sizeof *k, cmp_rank);
  for (i = 0; i < n; i++) {
    c->rank[i] = sorted ? k[i].idx : i;
    c->pos[c->rank[i]] = i;
  }
  for (i = 0; i < n; i++) { /* groups only where an option reads them */
    const rag_pack_item *it = &c->items[i];
    k[i].s = c->o->per_source > 0 ? it->source : NULL;
    k[i].len = it->srclen;
    k[i].idx = i;
  }
  group(k, n, c->srcgrp);
  for (i = 0; i < n; i++) {
    const rag_pack_item *it = &c->items[i];
    k[i].s = !c->o->merge ? NULL : it->doc ? it->doc : it->source;
    k[i].len = it->doc ? it->doclen : it->srclen;
    k[i].idx = i;
  }
  group(k, n, c->docgrp);
  if ((rc = measure(c, c->sep, c->seplen, NONE, &c->sepm, &over)) != RAG_OK) return rc;
  return parse_template(c);
}

static void ctx_free(ctx *c) {
  size_t i;
  if (c->pass != NULL)
    for (i = 0; i <= c->n; i++) passage_free(&c->pass[i]);
  rag_free(c->pass);
  rag_free(c->rank);
  rag_free(c->pos);
  rag_free(c->srcgrp);
  rag_free(c->docgrp);
  rag_free(c->taken);
  rag_free(c->live);
  rag_free(c->order);
  rag_free(c->im);
  rag_free(c->imok);
  rag_free(c->used);
  rag_free(c->tel);
  rag_free(c->out.p);
  rag_free(c->tmp.p);
}

/* Members in document order (start, then rank); few, so by insertion. */
static void sort_members(const ctx *c, passage *p) {
  size_t i, j;
  for (i = 1; i < p->nmembers; i++) {
    size_t x = p->members[i];
    for (j = i; j > 0; j--) {
      size_t y = p->members[j - 1];
      size_t sx = c->items[x].start, sy = c->items[y].start;
      if (sy < sx || (sy == sx && c->pos[y] < c->pos[x])) break;
      p->members[j] = y;
    }
    p->members[j] = x;
  }
}

static int result(ctx *c, const mbuf *fin, size_t total, rag_pack_result *out) {
  size_t i, r, nused = 0, u = 0, d = 0;
  for (i = 0; i < c->nlive; i++) nused += c->pass[c->live[i]].nmembers;
  out->text = (char *)zalloc(fin->len + 1, 1);
  out->passages = (rag_pack_passage *)zalloc(c->nlive, sizeof(rag_pack_passage));
  /* every item is used or dropped, never both: one array of n holds the two */
  out->used = (size_t *)zalloc(c->n, sizeof(size_t));
  if (!out->text || !out->passages || !out->used) return RAG_ENOMEM;
  out->dropped = out->used + nused;
  if (fin->len > 0) memcpy(out->text, mb_at(fin, 0), fin->len);
  out->len = fin->len;
  out->tokens = total;
  for (i = 0; i < c->nlive; i++) {
    passage *p = &c->pass[c->order[i]];
    rag_pack_passage *q = &out->passages[i];
    if (p->has_span) sort_members(c, p);
    q->lead = p->lead;
    q->first = u;
    q->n = p->nmembers;
    q->start = p->start;
    q->stop = p->stop;
    q->has_span = p->has_span;
    q->truncated = p->truncated;
    memcpy(out->used + u, p->members, p->nmembers * sizeof *p->members);
    u += p->nmembers;
  }
  out->npassages = c->nlive;
  out->nused = u;
  for (r = 0; r < c->n; r++)
    if (!c->used[c->rank[r]]) out->dropped[d++] = c->rank[r];
  out->ndropped = d;
  return RAG_OK;
}

/* {====== Entry point ======} */

int rag_pack(const rag_pack_item *items, size_t n, const rag_pack_opts *o,
             rag_pack_result *out, rag_pack_err *err) {
  ctx c;
  keyed *k;
  mbuf *fin = NULL;
  size_t bsel = o->budget, total = 0, iter, dec, s;
  int rc;
  memset(&c, 0, sizeof c);
  memset(err, 0, sizeof *err);
  c.items = items;
  c.n = n;
  c.o = o;
  c.tmpl = o->tmpl ? o->tmpl : RAG_PACK_DEFAULT_TEMPLATE;
  c.tmpllen = o->tmpl ? o->tmpllen : strlen(RAG_PACK_DEFAULT_TEMPLATE);
  c.sep = o->sep ? o->sep : RAG_PACK_DEFAULT_SEPARATOR;
  c.seplen = o->sep ? o->seplen : strlen(RAG_PACK_DEFAULT_SEPARATOR);
  if ((k = (keyed *)zalloc(n, sizeof *k)) == NULL) return RAG_ENOMEM;
  rc = validate(&c, k, err);
  if (rc == RAG_OK) rc = setup(&c, k);
  rag_free(k);
  for (iter = 0; rc == RAG_OK; iter++) {
    if ((rc = select_all(&c, bsel)) != RAG_OK) break;
    if ((rc = arrange(&c, &fin, &total)) != RAG_OK) break;
    if (total <= o->budget) break;
    if (bsel == 0) { /* not reached: at 0 only empty entries fit */
      c.nlive = 0;
      memset(c.used, 0, n);
      mb_clear(fin);
      total = 0;
      break;
    }
    /* seams of the arranged text cost more than the greedy saw: again,
    ** with the excess off the budget (doubling, so reruns are few) */
    dec = total - o->budget;
    for (s = 0; s < iter && dec < bsel; s++) dec *= 2;
    bsel = dec < bsel ? bsel - dec : 0;
  }
  if (rc == RAG_OK) rc = result(&c, fin, total, out);
  ctx_free(&c);
  if (rc != RAG_OK) rag_pack_result_free(out);
  return rc;
}

void rag_pack_result_free(rag_pack_result *r) {
  if (r == NULL) return;
  rag_free(r->text);
  rag_free(r->passages);
  rag_free(r->used); /* dropped lives in the same block */
  memset(r, 0, sizeof *r);
}
