/*
** rag_approx.c: the cl100k estimate. One pass over the bytes with a class
** table; each unit adds its weight (in thousandths of a token) to a running
** cost, and a cut is made whenever the rounded cost passes the number of
** pieces so far, so the count is the rounded total and the cuts spread it.
*/
#include "rag_approx.h"

#include "rag.h"
#include "rag_utf8.h"

/*
** Weights in thousandths of a cl100k token, fitted by least squares on the
** relative error over the 5,183 SciFact abstracts (English), the five seeds
** and their 69 mostly-Chinese paragraphs (Chinese weighted 40 to 1), except
** W_4BYTE, measured on 69 emoji (173 tokens). bench/tokenizer.lua reports
** the resulting error.
*/
enum {
  W_WORD = 948,     /* an ASCII letter run */
  W_LONG = 165,     /* each letter of a run beyond the sixth */
  LONG_FROM = 6,
  W_UPPER = 615,    /* each capital after the first letter of a run */
  W_DIGITS = 1606,  /* each group of up to three digits */
  W_PUNCT = 582,    /* each other ASCII character */
  W_NEWLINE = 1436, /* a run of line breaks (with spaces and tabs after) */
  W_SPACES = 1955,  /* a run of two or more spaces or tabs */
  W_2BYTE = 265,    /* a two-byte character (accented Latin, Cyrillic, ...) */
  W_CJK = 1197,     /* a CJK ideograph, U+4000..U+9FFF */
  W_3BYTE = 306,    /* another three-byte character (kana, CJK punctuation, ...) */
  W_4BYTE = 2500    /* a four-byte character (emoji, rare ideographs) */
};

enum { K_BAD, K_LOWER, K_UPPER, K_DIGIT, K_SPACE, K_NL, K_PUNCT, K_CONT, K_LEAD2, K_LEAD3, K_LEAD4 };

static const unsigned char kind[256] = {
#define R16(k) k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k
  /* 0x00 */ K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT,
  K_PUNCT, K_SPACE, K_NL, K_PUNCT, K_PUNCT, K_NL, K_PUNCT, K_PUNCT,
  /* 0x10 */ R16(K_PUNCT),
  /* 0x20 */ K_SPACE, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT,
  K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT,
  /* 0x30 */ K_DIGIT, K_DIGIT, K_DIGIT, K_DIGIT, K_DIGIT, K_DIGIT, K_DIGIT, K_DIGIT,
  K_DIGIT, K_DIGIT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT,
  /* 0x40 */ K_PUNCT, K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER,
  K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER,
  /* 0x50 */ K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER, K_UPPER,
  K_UPPER, K_UPPER, K_UPPER, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT,
  /* 0x60 */ K_PUNCT, K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER,
  K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER,
  /* 0x70 */ K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER, K_LOWER,
  K_LOWER, K_LOWER, K_LOWER, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT, K_PUNCT,
  /* 0x80 */ R16(K_CONT), R16(K_CONT), R16(K_CONT), R16(K_CONT),
  /* 0xc0 */ K_BAD, K_BAD, K_LEAD2, K_LEAD2, K_LEAD2, K_LEAD2, K_LEAD2, K_LEAD2,
  K_LEAD2, K_LEAD2, K_LEAD2, K_LEAD2, K_LEAD2, K_LEAD2, K_LEAD2, K_LEAD2,
  /* 0xd0 */ R16(K_LEAD2),
  /* 0xe0 */ R16(K_LEAD3),
  /* 0xf0 */ K_LEAD4, K_LEAD4, K_LEAD4, K_LEAD4, K_LEAD4, K_BAD, K_BAD, K_BAD,
  K_BAD, K_BAD, K_BAD, K_BAD, K_BAD, K_BAD, K_BAD, K_BAD,
#undef R16
};

/* The running cost and the cuts made so far (kept only when ends != NULL). */
typedef struct cuts {
  size_t *ends;
  size_t n, cap;
  size_t max; /* the scan may stop once n is above this */
  unsigned long long cost; /* thousandths */
  int keep;
} cuts;

static int cut_at(cuts *c, size_t pos) {
  if (c->keep) {
    size_t *ends = (size_t *)rag_grow(c->ends, &c->cap, c->n + 1, sizeof *ends);
    if (ends == NULL) return RAG_ENOMEM;
    c->ends = ends;
    c->ends[c->n] = pos;
  }
  c->n++;
  return RAG_OK;
}

/* Adds a unit [start, end) of `w` thousandths; cuts it evenly into as many
** pieces as the rounded total has grown (at most one per byte). */
static int unit(cuts *c, size_t start, size_t end, unsigned long long w) {
  unsigned long long target;
  size_t k, j, span = end - start;
  int rc;
  c->cost += w;
  target = (c->cost + 500) / 1000;
  if (target <= c->n) return RAG_OK;
  k = (size_t)(target - c->n) < span ? (size_t)(target - c->n) : span;
  if (!c->keep) { /* a count: the cuts' places do not matter */
    c->n += k;
    return RAG_OK;
  }
  for (j = 1; j <= k; j++) /* 64-bit product: no overflow where size_t is 32 bits */
    if ((rc = cut_at(c, start + (size_t)((unsigned long long)span * j / k))) != RAG_OK) return rc;
  return RAG_OK;
}

static int scan(const unsigned char *s, size_t len, cuts *c, size_t *errpos) {
  size_t i = 0, j, n;
  int32_t cp;
  int rc = RAG_OK;
  *errpos = 0;
  while (i < len && rc == RAG_OK && c->n <= c->max) {
    int k = kind[s[i]];
    unsigned long long w;
    switch (k) { /* the unit [i, j) and its weight w; one call of unit, inlined */
      case K_LOWER:
      case K_UPPER: {
        unsigned long long upper = 0;
        for (j = i + 1; j < len && (kind[s[j]] == K_LOWER || kind[s[j]] == K_UPPER); j++)
          upper += kind[s[j]] == K_UPPER;
        w = W_WORD + W_UPPER * upper;
        if (j - i > LONG_FROM) w += (unsigned long long)W_LONG * (j - i - LONG_FROM);
        break;
      }
      case K_DIGIT:
        for (j = i + 1; j < len && kind[s[j]] == K_DIGIT; j++) continue;
        w = (unsigned long long)W_DIGITS * ((j - i + 2) / 3);
        break;
      case K_SPACE:
        for (j = i + 1; j < len && kind[s[j]] == K_SPACE; j++) continue;
        w = j - i >= 2 ? W_SPACES : 0;
        break;
      case K_NL:
        for (j = i + 1; j < len && (kind[s[j]] == K_NL || kind[s[j]] == K_SPACE); j++) continue;
        w = W_NEWLINE;
        break;
      case K_PUNCT:
        j = i + 1;
        w = W_PUNCT;
        break;
      case K_LEAD2:
      case K_LEAD3:
      case K_LEAD4:
        if ((n = rag_utf8_decode(s + i, len - i, &cp)) != 0) {
          j = i + n;
          w = k == K_LEAD2 ? W_2BYTE
              : k == K_LEAD4 ? W_4BYTE
              : (s[i] >= 0xe4 && s[i] <= 0xe9) ? W_CJK
              : W_3BYTE;
          break;
        }
        *errpos = i + 1; /* an invalid sequence */
        return RAG_EENCODING;
      default:
        *errpos = i + 1;
        return RAG_EENCODING;
    }
    rc = unit(c, i, j, w);
    i = j;
  }
  if (rc != RAG_OK) return rc;
  if (len > 0 && c->n == 0) return cut_at(c, len);
  if (c->keep && c->n > 0) c->ends[c->n - 1] = len; /* the tail joins the last piece */
  return RAG_OK;
}

int rag_approx_count(const char *s, size_t len, size_t *n, size_t *errpos) {
  return rag_approx_count_upto(s, len, (size_t)-1, n, errpos);
}

int rag_approx_count_upto(const char *s, size_t len, size_t max, size_t *n, size_t *errpos) {
  cuts c = {NULL, 0, 0, max, 0, 0};
  int rc = scan((const unsigned char *)s, len, &c, errpos);
  *n = rc == RAG_OK ? c.n : 0;
  return rc;
}

int rag_approx_split(const char *s, size_t len, size_t **ends, size_t *n, size_t *errpos) {
  cuts c = {NULL, 0, 0, (size_t)-1, 0, 1};
  int rc = scan((const unsigned char *)s, len, &c, errpos);
  *ends = NULL;
  *n = 0;
  if (rc != RAG_OK) {
    rag_free(c.ends);
    return rc;
  }
  *ends = c.ends;
  *n = c.n;
  return RAG_OK;
}
