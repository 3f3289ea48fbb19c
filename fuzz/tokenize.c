/*
** fuzz/tokenize.c: rag_analyzer_run on any bytes, under one of six analyzer
** configurations picked by the first byte. Checks that every term is
** non-empty, every span lies in the input, spans never go backwards, the
** run refuses exactly the inputs that are not valid UTF-8 (at the first bad
** byte), each term comes with its rag_fnv32, a long-lived analyzer (with
** its term cache) agrees with a new one, and a run wanting some of
** the terms (rag_analyzer_run_some, blocks read with AVX2 and with portable
** C) gives them all, in the same places.
*/
#include <stdint.h>
#include <string.h>

#include <utf8proc.h>

#include "rag.h"
#include "rag_analyzer.h"
#include "rag_fnv.h"

#define NCONFIGS 6

typedef struct check {
  size_t len;         /* input length */
  rag_analyzer_want *want; /* NULL, or the wanted terms (hash % 3 == 0) go in it */
  uint64_t wanted;    /* FNV-1a over the wanted terms and spans */
  size_t start, stop; /* the previous span */
  size_t nterms;
  uint64_t digest;    /* FNV-1a over terms and spans */
} check;

/* Offset of the first invalid byte, or len. */
static size_t first_invalid(const uint8_t *s, size_t len) {
  utf8proc_int32_t c;
  size_t i = 0;
  while (i < len) {
    utf8proc_ssize_t n = utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &c);
    if (n < 0) return i;
    i += (size_t)n;
  }
  return len;
}

static void mix(uint64_t *h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  size_t i;
  for (i = 0; i < n; i++) *h = (*h ^ b[i]) * UINT64_C(1099511628211);
}

static int emit(void *ud, const char *term, size_t termlen, uint32_t hash, size_t start,
                size_t stop) {
  check *c = (check *)ud;
  if (termlen == 0 || term == NULL) __builtin_trap();
  if (hash != rag_fnv32(term, termlen)) __builtin_trap();
  if (start >= stop || stop > c->len) __builtin_trap();
  if (c->nterms > 0 && (start < c->start || stop < c->stop)) __builtin_trap();
  mix(&c->digest, term, termlen);
  mix(&c->digest, &start, sizeof start);
  mix(&c->digest, &stop, sizeof stop);
  if (hash % 3 == 0) { /* wanted */
    if (c->want != NULL) rag_analyzer_want_term(c->want, term, termlen);
    mix(&c->wanted, term, termlen);
    mix(&c->wanted, &start, sizeof start);
    mix(&c->wanted, &stop, sizeof stop);
  }
  c->start = start;
  c->stop = stop;
  c->nterms++;
  return 0;
}

static void configure(uint8_t pick, rag_analyzer_opts *o) {
  static const char *const words[] = {"the", "Straße", "模型", "", "ＡＢＣ"};
  rag_analyzer_defaults(o);
  switch (pick % NCONFIGS) {
    case 0: break; /* the default English analyzer */
    case 1: o->cjk = RAG_ANALYZER_CJK_BOTH; o->lowercase = 0; break;
    case 2: o->cjk = RAG_ANALYZER_CJK_UNIGRAM; o->stopwords = RAG_ANALYZER_STOP_LIST;
      o->words = words; o->nwords = sizeof words / sizeof words[0]; break;
    case 3: o->cjk = RAG_ANALYZER_CJK_RUN; o->stem = 0; break;
    case 4: o->lang = "french"; o->stopwords = RAG_ANALYZER_STOP_NONE; break;
    default: o->lang = "russian"; o->stopwords = RAG_ANALYZER_STOP_NONE;
      o->cjk = RAG_ANALYZER_CJK_BOTH; break;
  }
}

/* Runs `a` over s (only for the terms of *some when not NULL); returns the
** status and fills *c, the wanted terms in *want when not NULL. */
static int run(rag_analyzer *a, const uint8_t *s, size_t len, check *c, size_t *errpos,
               const rag_analyzer_want *some, rag_analyzer_want *want) {
  memset(c, 0, sizeof *c);
  c->len = len;
  c->want = want;
  c->digest = c->wanted = UINT64_C(14695981039346656037);
  if (some != NULL) return rag_analyzer_run_some(a, (const char *)s, len, some, emit, c, errpos);
  return rag_analyzer_run(a, (const char *)s, len, emit, c, errpos);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static rag_analyzer *kept[NCONFIGS]; /* live for the whole session */
  rag_analyzer_opts o;
  rag_analyzer *fresh = NULL;
  rag_analyzer_want want;
  check c, d;
  size_t errpos = 0, bad;
  int rc;
  if (size == 0) return 0;
  configure(data[0], &o);
  if (rag_analyzer_new(&o, &fresh) != RAG_OK) __builtin_trap();
  if (kept[data[0] % NCONFIGS] == NULL && rag_analyzer_new(&o, &kept[data[0] % NCONFIGS]) != RAG_OK)
    __builtin_trap();
  data++;
  size--;
  bad = first_invalid(data, size);
  rag_analyzer_want_clear(&want);
  rc = run(fresh, data, size, &c, &errpos, NULL, &want);
  if (bad == size ? rc != RAG_OK : (rc != RAG_EENCODING || errpos != bad + 1 || c.nterms != 0))
    __builtin_trap();
  if (run(kept[data[-1] % NCONFIGS], data, size, &d, &errpos, NULL, NULL) != rc ||
      d.nterms != c.nterms || d.digest != c.digest)
    __builtin_trap();
  /* wanting some terms gives those of the full run (and perhaps others),
  ** with blocks read by AVX2 or by portable C */
  if (run(fresh, data, size, &d, &errpos, &want, NULL) != rc || d.wanted != c.wanted)
    __builtin_trap();
  rag_analyzer_portable(fresh);
  if (run(fresh, data, size, &d, &errpos, &want, NULL) != rc || d.wanted != c.wanted)
    __builtin_trap();
  rag_analyzer_free(fresh);
  return 0;
}
