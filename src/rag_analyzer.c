/*
** rag_analyzer.c: text to index terms in one pass over validated UTF-8.
** Words are runs of letters, marks, digits and connector punctuation (a
** simplified UAX #29 word segmentation), CJK runs become n-grams; each term
** is case-folded, checked against the stopword set and Snowball-stemmed,
** and a bounded term cache remembers what each word became. Nothing is
** allocated per term once the scratch buffers and the cache have grown.
*/
#include "rag_analyzer.h"

#include <libstemmer.h>
#include <stdint.h>
#include <string.h>
#include <utf8proc.h>

#include "rag.h"
#include "rag_fnv.h"
#include "rag_kernel.h" /* rag_kernel_cpu */
#include "rag_piececache.h" /* rag_piececache_word */
#include "rag_probe.h"
#include "rag_termcache.h"
#include "rag_text.h"
#include "rag_utf8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RAG_X86 1
#include <immintrin.h>
#endif

/*
** Words longer than this (bytes) are not stemmed: they are identifiers,
** hashes or base64, not natural-language words, and Snowball's cost grows
** with length.
*/
#ifndef RAG_ANALYZER_STEM_MAX
#define RAG_ANALYZER_STEM_MAX 64
#endif

/*
** Snowball stems an English word in about 2,500 instructions, ten times the
** rest of its analysis, utf8proc folds a non-ASCII word in hundreds, and
** word frequencies are Zipfian: a bounded memo (rag_termcache) maps each
** source word that needs either to its term or to "dropped", so a repeated
** word costs one lookup. Other words (numbers, identifiers, lowercase ASCII
** when stemming is off) are kept only in a tagged run, where the tag saves
** the owner's lookup; otherwise a lookup saves nothing.
*/

/* rag_analyzer.h states the cache's bound. */
typedef char cache_bound_stated[RAG_TERMCACHE_MAX_BYTES == RAG_ANALYZER_CACHE_MAX ? 1 : -1];

/* What a word is, for the steps it goes through (see also W_ below). */
enum { T_ASCII = 1, T_UPPER = 2, T_STEM = 4, T_FLAGS = 8 };

/*
** NFKC_Casefold as utf8proc approximates it: `ＡＢＣ`, `ABC` -> `abc`,
** `ß` -> `ss`, default-ignorable code points (soft hyphen, ZWJ, variation
** selectors) removed.
*/
#define FOLD_OPTS                                                            \
  ((utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT | \
                       UTF8PROC_CASEFOLD | UTF8PROC_IGNORE))

/*
** The built-in English stopwords: the list the Python library bm25s uses for
** stopwords="en" (STOPWORDS_EN in bm25s/stopwords.py), which is Lucene's
** EnglishAnalyzer default stop set. Short on purpose: BM25's IDF already
** discounts common words, and longer lists drop words queries need.
*/
static const char *const english_stopwords[] = {
  "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if",
  "in", "into", "is", "it", "no", "not", "of", "on", "or", "such", "that",
  "the", "their", "then", "there", "these", "they", "this", "to", "was",
  "will", "with",
};

/* {====== Character classes ======} */

enum {
  C_SEP = 0, /* separates words */
  C_LETTER,  /* L*, outside CJK */
  C_DIGIT,   /* N*, outside CJK */
  C_MARK,    /* Mn, Mc and invisible joiners: continue a word or CJK character */
  C_CONN,    /* Pc, e.g. '_' */
  C_CJK,     /* a letter or number of Han, kana or Hangul */
  C_APOS,    /* ' and U+2019: inside a word between two letters */
  C_POINT    /* . and ,: inside a word between two digits */
};

static const unsigned char ascii_class[128] = {
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 7, 0, 7, 0, /*  ' , .  */
  2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, /* 0-9 */
  0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* A-O */
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 4, /* P-Z _ */
  0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* a-o */
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, /* p-z */
};

/*
** Blocks of Han (with extensions and compatibility ideographs, planes 2-3),
** Hiragana, Katakana (with half-width forms and U+30FC), Bopomofo and Hangul
** (syllables, jamo, compatibility and half-width jamo). Only their letters
** and numbers are CJK; their punctuation separates.
*/
static const int32_t cjk_blocks[][2] = {
  {0x1100, 0x11FF},   {0x3005, 0x318F},   {0x31A0, 0x31BF},
  {0x31F0, 0x31FF},   {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},
  {0xA960, 0xA97F},   {0xAC00, 0xD7FF},   {0xF900, 0xFAFF},
  {0xFF66, 0xFFDC},   {0x1AFF0, 0x1B16F}, {0x20000, 0x3FFFF},
};

int rag_analyzer_is_cjk(int32_t cp) {
  size_t i;
  if (cp < 0x1100) return 0;
  for (i = 0; i < sizeof cjk_blocks / sizeof cjk_blocks[0]; i++) {
    if (cp < cjk_blocks[i][0]) return 0;
    if (cp <= cjk_blocks[i][1]) return 1;
  }
  return 0;
}

/*
** CJK letters that belong to the character before them: half-width voiced
** sound marks and Hangul medial and final jamo (which compose a syllable).
*/
static int cjk_attaches(int32_t cp) {
  return cp == 0xFF9E || cp == 0xFF9F || (cp >= 0x1160 && cp <= 0x11FF) ||
         (cp >= 0xD7B0 && cp <= 0xD7FF);
}

static int classify(int32_t cp) {
  if (cp < 0x80) return ascii_class[cp];
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      return rag_analyzer_is_cjk(cp) ? C_CJK : C_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return rag_analyzer_is_cjk(cp) ? C_CJK : C_DIGIT;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
      return C_MARK;
    case UTF8PROC_CATEGORY_PC:
      return C_CONN;
    case UTF8PROC_CATEGORY_CF: /* soft hyphen, ZWNJ, ZWJ, word joiner: folded away */
      return cp == 0xAD || cp == 0x200C || cp == 0x200D || cp == 0x2060 ? C_MARK : C_SEP;
    default: /* enclosing marks too: "1\uFE0F\u20E3" is the digit 1 */
      return cp == 0x2019 ? C_APOS : C_SEP;
  }
}

/* The class of the code point at s[i], or C_SEP at the end of input. */
static int class_at(const unsigned char *s, size_t len, size_t i, int32_t *cp,
                    size_t *k) {
  if (i >= len) {
    *k = 0;
    return C_SEP;
  }
  *k = rag_utf8_decode_valid(s + i, cp);
  return classify(*cp);
}

/* {====== The analyzer ======} */

typedef struct stopslot {
  size_t off, len; /* the folded word in the set's arena; len 0: empty slot */
  uint32_t hash;
} stopslot;

typedef struct stopset {
  stopslot *slots; /* open addressing, linear probing, at most half full */
  size_t mask;     /* slot count - 1; slot count is a power of two */
  size_t n;        /* distinct words */
  size_t minlen, maxlen;
  char *arena;     /* the folded words, back to back */
  size_t used, cap;
} stopset;

struct rag_analyzer {
  rag_analyzer_opts cfg;      /* the options, with lang and words copied */
  char *lang;                 /* cfg.lang's copy */
  char **words;               /* cfg.words's copy: pointers then the bytes */
  struct sb_stemmer *stemmer; /* NULL when stem is off */
  rag_termcache memo;         /* source word -> term or dropped */
  unsigned memo_flags;        /* bit f: remember the words of T_ flags f */
  int keeps_first;            /* an ASCII word's term keeps its first two characters */
  int simd;                   /* blocks are read with AVX2 */
  stopset stop;
  char *buf;                  /* scratch: a lowercased ASCII term */
  size_t cap;
  utf8proc_int32_t *cps;      /* scratch: a folded term, code points then UTF-8 */
  size_t ncps;
};

static int lower_ascii(rag_analyzer *a, const char *t, size_t n, const char **out) {
  size_t i;
  char *p = (char *)rag_grow(a->buf, &a->cap, n, 1);
  if (p == NULL) return RAG_ENOMEM;
  a->buf = p;
  for (i = 0; i < n; i++) {
    unsigned c = (unsigned char)t[i];
    a->buf[i] = (char)(c - 'A' < 26u ? c + 32 : c);
  }
  *out = a->buf;
  return RAG_OK;
}

/* Drops each U+2019 to "'" so "don’t" and "don't" are one term. */
static size_t plain_apostrophes(char *t, size_t n) {
  size_t i, j = 0;
  for (i = 0; i < n; i++) {
    if ((unsigned char)t[i] == 0xE2 && i + 2 < n && (unsigned char)t[i + 1] == 0x80 &&
        (unsigned char)t[i + 2] == 0x99) {
      t[j++] = '\'';
      i += 2;
    } else {
      t[j++] = t[i];
    }
  }
  return j;
}

/*
** NFKC_Casefold of valid UTF-8 into the code point scratch, re-encoded there
** as UTF-8. Returns RAG_EENCODING for invalid input (stopwords only).
*/
static int fold_utf8(rag_analyzer *a, const char *t, size_t n, const char **out,
                     size_t *outlen) {
  const utf8proc_uint8_t *s = (const utf8proc_uint8_t *)t;
  utf8proc_int32_t *p;
  utf8proc_ssize_t m;
  if (n > (size_t)(PTRDIFF_MAX / 16)) return RAG_ENOMEM;
  for (;;) {
    /* one spare element: utf8proc_reencode writes a NUL after the bytes */
    utf8proc_ssize_t room = a->ncps > 0 ? (utf8proc_ssize_t)(a->ncps - 1) : 0;
    m = utf8proc_decompose(s, (utf8proc_ssize_t)n, a->cps, room, FOLD_OPTS);
    if (m == UTF8PROC_ERROR_INVALIDUTF8) return RAG_EENCODING;
    if (m < 0) return RAG_ENOMEM; /* overflow: a word of hundreds of megabytes */
    if (m <= room) break;
    p = (utf8proc_int32_t *)rag_grow(a->cps, &a->ncps, (size_t)m + 1, sizeof *a->cps);
    if (p == NULL) return RAG_ENOMEM;
    a->cps = p;
  }
  if (m == 0) { /* only default-ignorable code points */
    *out = t;
    *outlen = 0;
    return RAG_OK;
  }
  m = utf8proc_reencode(a->cps, m, FOLD_OPTS);
  if (m < 0) return RAG_ENOMEM;
  *out = (const char *)a->cps;
  *outlen = plain_apostrophes((char *)a->cps, (size_t)m);
  return RAG_OK;
}

/* {====== Stopwords ======} */

/* A word sought in the set: its bytes and rag_fnv32 hash. */
typedef struct stopkey {
  const stopset *st;
  const char *t;
  size_t n;
  uint32_t h;
} stopkey;

/* Stops at an empty slot or the one holding the word. */
static int at_word(const void *ud, size_t i) {
  const stopkey *k = (const stopkey *)ud;
  const stopslot *e = &k->st->slots[i];
  return e->len == 0 ||
         (e->hash == k->h && e->len == k->n && memcmp(k->st->arena + e->off, k->t, k->n) == 0);
}

/* The slot holding t[0..n), whose hash is h, or the empty one where it would go. */
static size_t stop_slot(const stopset *st, const char *t, size_t n, uint32_t h) {
  stopkey k = {.st = st, .t = t, .n = n, .h = h};
  return rag_probe(st->mask, h, at_word, &k);
}

/* Whether t[0..n), whose hash is h, is in the set. */
static int is_stop(const stopset *st, const char *t, size_t n, uint32_t h) {
  return st->slots[stop_slot(st, t, n, h)].len != 0;
}

/* Appends one word (folded when the analyzer folds) to the arena. */
static int add_stopword(rag_analyzer *a, const char *w, size_t n) {
  stopset *st = &a->stop;
  const char *t = w;
  char *arena;
  int rc = RAG_OK;
  size_t i;
  if (a->cfg.lowercase) {
    int ascii = 1;
    for (i = 0; i < n; i++) ascii &= (unsigned char)w[i] < 0x80;
    rc = ascii ? lower_ascii(a, w, n, &t) : fold_utf8(a, w, n, &t, &n);
    if (rc == RAG_EENCODING) t = w, rc = RAG_OK; /* kept as is: it matches nothing */
    if (rc != RAG_OK) return rc;
  }
  if (n == 0) return RAG_OK; /* cannot match: terms are never empty */
  if (n > ((size_t)-1) - st->used) return RAG_ENOMEM;
  if ((arena = (char *)rag_grow(st->arena, &st->cap, st->used + n, 1)) == NULL) return RAG_ENOMEM;
  st->arena = arena;
  memcpy(st->arena + st->used, t, n);
  st->used += n;
  return RAG_OK;
}

/* Indexes the arena: words were appended in order, with their lengths in `lens`. */
static int index_stopwords(stopset *st, const size_t *lens, size_t nlens) {
  size_t size = 8, i, off = 0;
  while (size / 2 < nlens) {
    if (size > ((size_t)-1) / 4) return RAG_ENOMEM;
    size *= 2;
  }
  if (RAG_MUL_OVERFLOWS(size, sizeof(stopslot))) return RAG_ENOMEM;
  if ((st->slots = (stopslot *)rag_malloc(size * sizeof(stopslot))) == NULL) return RAG_ENOMEM;
  memset(st->slots, 0, size * sizeof(stopslot));
  st->mask = size - 1;
  st->minlen = (size_t)-1;
  for (i = 0; i < nlens; off += lens[i], i++) {
    const char *w;
    size_t j, n = lens[i];
    uint32_t h;
    if (n == 0) continue; /* the arena is NULL when every word is empty */
    w = st->arena + off;
    h = rag_fnv32(w, n);
    j = stop_slot(st, w, n, h);
    if (st->slots[j].len != 0) continue; /* a repeat */
    st->slots[j].off = off;
    st->slots[j].len = n;
    st->slots[j].hash = h;
    st->n++;
    if (n < st->minlen) st->minlen = n;
    if (n > st->maxlen) st->maxlen = n;
  }
  return RAG_OK;
}

static int build_stopwords(rag_analyzer *a) {
  const char *const *words = english_stopwords;
  size_t n = sizeof english_stopwords / sizeof english_stopwords[0], i, *lens;
  int rc = RAG_OK;
  if (a->cfg.stopwords == RAG_ANALYZER_STOP_NONE) return RAG_OK;
  if (a->cfg.stopwords == RAG_ANALYZER_STOP_LIST) {
    words = a->cfg.words;
    n = a->cfg.nwords;
    if (n == 0) return RAG_OK;
  }
  if (RAG_MUL_OVERFLOWS(n, sizeof *lens)) return RAG_ENOMEM;
  if ((lens = (size_t *)rag_malloc(n * sizeof *lens)) == NULL) return RAG_ENOMEM;
  for (i = 0; i < n && rc == RAG_OK; i++) {
    size_t before = a->stop.used;
    rc = add_stopword(a, words[i], strlen(words[i]));
    lens[i] = a->stop.used - before;
  }
  if (rc == RAG_OK) rc = index_stopwords(&a->stop, lens, n);
  rag_free(lens);
  return rc;
}

/* {====== Lifetime ======} */

void rag_analyzer_defaults(rag_analyzer_opts *o) {
  memset(o, 0, sizeof *o);
  o->lang = "english";
  o->stem = 1;
  o->lowercase = 1;
  o->cjk = RAG_ANALYZER_CJK_BIGRAM;
  o->stopwords = RAG_ANALYZER_STOP_BUILTIN;
}

rag_analyzer_langkind rag_analyzer_langkind_of(const char *lang) {
  const char **l;
  if (lang == NULL) return RAG_ANALYZER_LANG_UNKNOWN;
  for (l = sb_stemmer_list(); *l != NULL; l++) {
    if (strcmp(*l, lang) != 0) continue;
    if (strcmp(lang, "english") == 0 || strcmp(lang, "porter") == 0)
      return RAG_ANALYZER_LANG_ENGLISH;
    return RAG_ANALYZER_LANG_OTHER;
  }
  return RAG_ANALYZER_LANG_UNKNOWN;
}

static char *copy_string(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = (char *)rag_malloc(n);
  if (p != NULL) memcpy(p, s, n);
  return p;
}

/* One allocation: nwords pointers, then the words with their NULs. */
static int copy_words(rag_analyzer *a, const char *const *words, size_t nwords) {
  size_t i, total, head;
  char *p;
  if (RAG_MUL_OVERFLOWS(nwords, sizeof(char *))) return RAG_ENOMEM;
  total = head = nwords * sizeof(char *);
  for (i = 0; i < nwords; i++) {
    size_t n = strlen(words[i]) + 1;
    if (n > ((size_t)-1) - total) return RAG_ENOMEM;
    total += n;
  }
  if ((a->words = (char **)rag_malloc(total ? total : 1)) == NULL) return RAG_ENOMEM;
  p = (char *)a->words + head;
  for (i = 0; i < nwords; i++) {
    size_t n = strlen(words[i]) + 1;
    memcpy(p, words[i], n);
    a->words[i] = p;
    p += n;
  }
  a->cfg.words = (const char *const *)a->words;
  a->cfg.nwords = nwords;
  return RAG_OK;
}

static int check_opts(const rag_analyzer_opts *o) {
  rag_analyzer_langkind kind = rag_analyzer_langkind_of(o->lang);
  size_t i;
  if (kind == RAG_ANALYZER_LANG_UNKNOWN) return RAG_EINVAL;
  if ((unsigned)o->cjk > RAG_ANALYZER_CJK_RUN) return RAG_EINVAL;
  if ((unsigned)o->stopwords > RAG_ANALYZER_STOP_LIST) return RAG_EINVAL;
  if (o->stopwords == RAG_ANALYZER_STOP_BUILTIN && kind != RAG_ANALYZER_LANG_ENGLISH)
    return RAG_EINVAL;
  if (o->stopwords == RAG_ANALYZER_STOP_LIST && o->nwords > 0) {
    if (o->words == NULL) return RAG_EINVAL;
    for (i = 0; i < o->nwords; i++)
      if (o->words[i] == NULL) return RAG_EINVAL;
  }
  return RAG_OK;
}

int rag_analyzer_new(const rag_analyzer_opts *o, rag_analyzer **out) {
  rag_analyzer *a;
  int rc, f;
  *out = NULL;
  if ((rc = check_opts(o)) != RAG_OK) return rc;
  if ((a = (rag_analyzer *)rag_malloc(sizeof *a)) == NULL) return RAG_ENOMEM;
  memset(a, 0, sizeof *a);
  rag_termcache_init(&a->memo);
  a->cfg = *o;
  a->cfg.stem = o->stem != 0;
  a->cfg.lowercase = o->lowercase != 0;
  a->cfg.words = NULL;
  a->cfg.nwords = 0;
  if ((a->lang = copy_string(o->lang)) == NULL) rc = RAG_ENOMEM;
  a->cfg.lang = a->lang;
  if (rc == RAG_OK && o->stopwords == RAG_ANALYZER_STOP_LIST)
    rc = copy_words(a, o->words, o->nwords);
  if (rc == RAG_OK) rc = build_stopwords(a);
  /* Snowball's English and Porter's stemmers only change endings */
  a->simd = rag_kernel_cpu() >= 1;
  a->keeps_first = !a->cfg.stem || rag_analyzer_langkind_of(a->lang) == RAG_ANALYZER_LANG_ENGLISH;
  if (rc == RAG_OK && a->cfg.stem) {
    /* the language is known, so NULL means out of memory */
    if ((a->stemmer = sb_stemmer_new(a->lang, "UTF_8")) == NULL) rc = RAG_ENOMEM;
  }
  if (rc != RAG_OK) {
    rag_analyzer_free(a);
    return rc;
  }
  for (f = 0; f < T_FLAGS; f++)
    if (((f & T_STEM) && a->stemmer != NULL) || (a->cfg.lowercase && !(f & T_ASCII)))
      a->memo_flags |= 1u << f;
  *out = a;
  return RAG_OK;
}

void rag_analyzer_free(rag_analyzer *a) {
  if (a == NULL) return;
  sb_stemmer_delete(a->stemmer);
  rag_termcache_free(&a->memo);
  rag_free(a->stop.slots);
  rag_free(a->stop.arena);
  rag_free(a->buf);
  rag_free(a->cps);
  rag_free(a->words);
  rag_free(a->lang);
  rag_free(a);
}

const rag_analyzer_opts *rag_analyzer_config(const rag_analyzer *a) {
  return &a->cfg;
}

void rag_analyzer_cache(const rag_analyzer *a, size_t *entries, size_t *bytes) {
  *entries = a->memo.n;
  *bytes = rag_termcache_bytes(&a->memo);
}

/* {====== Running ======} */

/*
** What a word's characters say about it, gathered while it is scanned (the
** low three bits are its T_ flags, T_ASCII and T_STEM inverted); W_END, an
** ASCII byte that separates words whatever surrounds it; and W_POINT, '.'
** and ',' (inside a word only between two digits).
*/
enum { W_WIDE = 1, W_UPPER = 2, W_NOSTEM = 4, W_ALNUM = 8, W_END = 16, W_POINT = 32 };

/*
** Bytes by their W_ bits: ASCII letters and digits, the ASCII separators,
** '.' and ','; 0 ('_', an apostrophe and every byte over 0x7F): the
** general scan decides.
*/
static const unsigned char word_bits[256] = {
  16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16,
  16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16,
  16, 16, 16, 16, 16, 16, 16, 0, 16, 16, 16, 16, 32, 16, 32, 16,   /*  ' , .  */
  12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 16, 16, 16, 16, 16, 16, /* 0-9 */
  16, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10,  /* A-O */
  10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 16, 16, 16, 16, 0,   /* P-Z _ */
  16, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,                 /* a-o */
  8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 16, 16, 16, 16, 16,             /* p-z */
};

/* The T_ flags of a word from its W_ bits. */
static int word_flags(unsigned seen) {
  return (int)((seen & (W_WIDE | W_UPPER | W_NOSTEM)) ^ (T_ASCII | T_STEM));
}

/*
** Folds, filters and stems the term *t, *n, the source word (whose
** rag_fnv32 is *h) with the T_ flags `flags`: on RAG_OK *t, *n is the term
** and *h its rag_fnv32, or *n is 0 when it is dropped (a stopword, or
** nothing left after folding).
*/
static int analyze(rag_analyzer *a, const char **t, size_t *n, int flags, uint32_t *h) {
  const sb_symbol *r;
  int rc = RAG_OK, m, hashed = 1; /* hashed: *h is still the hash of *t */
  if (a->cfg.lowercase && (flags & (T_ASCII | T_UPPER)) != T_ASCII) {
    if (!(flags & T_ASCII)) rc = fold_utf8(a, *t, *n, t, n);
    else rc = lower_ascii(a, *t, *n, t);
    if (rc != RAG_OK) return rc;
    if (*n == 0) return RAG_OK;
    hashed = 0;
  }
  if (a->stop.n > 0 && *n >= a->stop.minlen && *n <= a->stop.maxlen) {
    if (!hashed) *h = rag_fnv32(*t, *n), hashed = 1;
    if (is_stop(&a->stop, *t, *n, *h)) {
      *n = 0;
      return RAG_OK;
    }
  }
  if ((flags & T_STEM) && a->stemmer != NULL && *n <= RAG_ANALYZER_STEM_MAX) {
    if ((r = sb_stemmer_stem(a->stemmer, (const sb_symbol *)*t, (int)*n)) == NULL)
      return RAG_ENOMEM;
    if ((m = sb_stemmer_length(a->stemmer)) > 0) { /* else the word stays */
      *t = (const char *)r;
      *n = (size_t)m;
      hashed = 0;
    }
  }
  if (!hashed) *h = rag_fnv32(*t, *n);
  return RAG_OK;
}

/*
** What the 64 bytes s[at, at + 64) are, a bit per byte (bit j: s[at + j]):
** ASCII letters and digits (alnum), and the bytes only the general scan
** reads (slow): '_', non-ASCII, an apostrophe after a letter or digit, a
** point after a digit. Past the input, neither. A run that wants only some
** terms passes over the words it does not want by these masks.
*/
typedef struct block {
  size_t at;
  uint64_t alnum, slow;
} block;

/* The masks a block is made of: alnum, digits, apostrophes, ',' and '.',
** and '_' or non-ASCII. */
enum { M_ALNUM, M_DIGIT, M_APOS, M_POINT, M_ODD, NMASKS };

/* The top bits of m's bytes as eight bits, byte i's as bit i. */
static inline uint64_t top_bits(uint64_t m) {
  return (((m >> 7) & RAG_BYTES(1)) * UINT64_C(0x0102040810204080)) >> 56;
}

/* The masks of the 64 bytes at p, eight bytes at a time. */
static void read_block(uint64_t m[NMASKS], const unsigned char *p) {
  int j;
  memset(m, 0, NMASKS * sizeof m[0]);
  for (j = 0; j < 8; j++) {
    uint64_t b, y, d;
    memcpy(&b, p + 8 * j, 8);
    y = b & RAG_BYTES(0x7f);
    d = rag_ascii_in(y, '0', '9') & ~b;
    m[M_DIGIT] |= top_bits(d) << 8 * j;
    m[M_ALNUM] |= top_bits((d | rag_ascii_in(y | RAG_BYTES(0x20), 'a', 'z')) & ~b) << 8 * j;
    m[M_APOS] |= top_bits(rag_ascii_in(y, '\'', '\'') & ~b) << 8 * j;
    m[M_POINT] |= top_bits((rag_ascii_in(y, ',', ',') | rag_ascii_in(y, '.', '.')) & ~b) << 8 * j;
    m[M_ODD] |= top_bits(rag_ascii_in(y, '_', '_') | b) << 8 * j;
  }
}

#ifdef RAG_X86
/* The bytes of v in lo .. lo + n - 1 (n < 128), as 0xff. */
__attribute__((target("avx2"))) static inline __m256i in_range(__m256i v, int lo, int n) {
  __m256i x = _mm256_add_epi8(v, _mm256_set1_epi8((char)(0x80 - lo)));
  return _mm256_cmpgt_epi8(_mm256_set1_epi8((char)(n - 128)), x);
}

/* The bytes of v equal to c, as 0xff. */
__attribute__((target("avx2"))) static inline __m256i equal(__m256i v, char c) {
  return _mm256_cmpeq_epi8(v, _mm256_set1_epi8(c));
}

/* A byte mask as bits. */
__attribute__((target("avx2"))) static inline uint64_t bits_of(__m256i m) {
  return (uint32_t)_mm256_movemask_epi8(m);
}

/* read_block with AVX2, 32 bytes at a time. */
__attribute__((target("avx2"))) static void read_block_avx2(uint64_t m[NMASKS],
                                                            const unsigned char *p) {
  int j;
  memset(m, 0, NMASKS * sizeof m[0]);
  for (j = 0; j < 2; j++) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32 * j));
    __m256i d = in_range(v, '0', 10);
    __m256i letter = in_range(_mm256_or_si256(v, _mm256_set1_epi8(0x20)), 'a', 26);
    int sh = 32 * j;
    m[M_DIGIT] |= bits_of(d) << sh;
    m[M_ALNUM] |= bits_of(_mm256_or_si256(d, letter)) << sh;
    m[M_APOS] |= bits_of(equal(v, '\'')) << sh;
    m[M_POINT] |= bits_of(_mm256_or_si256(equal(v, ','), equal(v, '.'))) << sh;
    m[M_ODD] |= bits_of(_mm256_or_si256(equal(v, '_'), v)) << sh; /* v's top bit: non-ASCII */
  }
}
#endif

/* Reads the block of s[0..len) at `at` (at most len), with AVX2 when simd. */
static void fill_block(block *k, const unsigned char *s, size_t len, size_t at, int simd) {
  unsigned char tail[64];
  const unsigned char *p = s + at;
  uint64_t m[NMASKS];
  if (len - at < 64) { /* zero bytes after the input */
    memset(tail, 0, sizeof tail);
    if (len > at) memcpy(tail, p, len - at);
    p = tail;
  }
#ifdef RAG_X86
  if (simd) read_block_avx2(m, p);
  else read_block(m, p);
#else
  (void)simd;
  read_block(m, p);
#endif
  k->at = at;
  k->alnum = m[M_ALNUM];
  k->slow = m[M_ODD] | (m[M_APOS] & m[M_ALNUM] << 1) | (m[M_POINT] & m[M_DIGIT] << 1);
}

/*
** Words wait in a queue of QUEUED before they are looked up in the memo:
** each word's memo slot is fetched as it is found, and the entries of all
** before the first lookup, so that the memory latencies overlap, where one
** lookup after another waited for two cache misses per word (the memo
** spans megabytes; on SciFact that was 16% of a BM25-only ingest). The
** terms still go out in text order.
*/
#define QUEUED 32

/* A word found and not yet emitted: its source span, T_ flags, whether the
** memo is asked for it and then its word_hash. */
typedef struct queued {
  size_t start, stop;
  uint32_t h;
  unsigned char flags, kept;
} queued;

/* One run: the analyzer, its input and where the terms go (one of emit, tagged). */
typedef struct scan {
  rag_analyzer *a;
  const unsigned char *s;
  size_t len;
  rag_term_fn emit;
  rag_tagged_fn tagged;
  void *ud;
  unsigned memo; /* bit f: look up and remember the words of T_ flags f */
  const rag_analyzer_want *want; /* NULL, or the terms wanted (rag_analyzer_run_some) */
  block k;                    /* the block of the scan's position */
  queued q[QUEUED];
  size_t nq;
} scan;

/* Emits term t[0..n) (hash th) of source s[start, stop), whose memo tag is at tag (or NULL). */
static inline int emit_term(const scan *sc, const char *t, size_t n, uint32_t th, size_t start,
                            size_t stop, unsigned char *tag) {
  if (sc->tagged != NULL) return sc->tagged(sc->ud, t, n, th, tag);
  return sc->emit(sc->ud, t, n, th, start, stop);
}

/*
** The memo's hash of a source word of n (at most RAG_TERMCACHE_KEY) bytes,
** its bytes taken eight at a time once the word is found. The scan loops
** used to carry FNV-1a along, a multiply per byte each waiting for the one
** before: the slowest chain of the loop. Terms keep rag_fnv32, which their
** owners use.
*/
static inline uint32_t word_hash(const unsigned char *p, size_t n) {
  uint64_t h = (uint64_t)n * 0x9e3779b97f4a7c15ull, w;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  if (i < n) h = (h ^ rag_piececache_word(p + i, n - i)) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  h *= 0x94d049bb133111ebull;
  return (uint32_t)(h >> 32);
}

/*
** Analyzes and emits the source word s[start, stop) (word_hash h), remembering
** it when memo. A remembered ASCII word with capitals is first sought
** lowercased, which is how it analyzes ("The" as "the"): each word is
** stemmed once whatever its case, and its tag is passed on.
*/
static int put_new(const scan *sc, size_t start, size_t stop, int flags, uint32_t h,
                   int memo) {
  rag_analyzer *a = sc->a;
  const char *src = (const char *)sc->s + start, *t = src;
  size_t n = stop - start;
  uint32_t th, tag = RAG_TERMCACHE_NOTAG;
  unsigned char *tp = NULL;
  int rc;
  if (memo && a->cfg.lowercase && (flags & (T_ASCII | T_UPPER)) == (T_ASCII | T_UPPER)) {
    const char *low;
    uint32_t lh;
    if ((rc = lower_ascii(a, src, n, &low)) != RAG_OK) return rc;
    lh = word_hash((const unsigned char *)low, n);
    if (rag_termcache_get(&a->memo, low, n, lh, &t, &n, &th, &tp)) {
      memcpy(&tag, tp, 4);
    } else {
      t = low;
      th = rag_fnv32(low, n);
      if ((rc = analyze(a, &t, &n, flags & ~T_UPPER, &th)) != RAG_OK) return rc;
      (void)rag_termcache_put(&a->memo, low, stop - start, lh, &t, n, th, tag);
    }
  } else {
    th = rag_fnv32(src, n);
    if ((rc = analyze(a, &t, &n, flags, &th)) != RAG_OK) return rc;
  }
  tp = memo ? rag_termcache_put(&a->memo, src, stop - start, h, &t, n, th, tag) : NULL;
  return n > 0 ? emit_term(sc, t, n, th, start, stop, tp) : RAG_OK;
}

/*
** Emits the term of the queued word w: remembered, or analyzed (and then
** remembered when w is kept, that is when its T_ flags say a lookup saves
** a stemmer or utf8proc call, or a tag the owner's lookup).
*/
static inline int put_term(const scan *sc, const queued *w) {
  const rag_analyzer *a = sc->a;
  const char *t;
  size_t n = w->stop - w->start;
  uint32_t th;
  unsigned char *tp;
  if (!w->kept) return put_new(sc, w->start, w->stop, w->flags, 0, 0);
  if (!rag_termcache_get(&a->memo, (const char *)sc->s + w->start, n, w->h, &t, &n, &th, &tp))
    return put_new(sc, w->start, w->stop, w->flags, w->h, 1);
  return n > 0 ? emit_term(sc, t, n, th, w->start, w->stop, tp) : RAG_OK;
}

/* Emits the queued words in order, their memo entries fetched first. */
static int drain(scan *sc) {
  const rag_termcache *m = &sc->a->memo;
  size_t i, nq = sc->nq;
  int rc = RAG_OK;
  sc->nq = 0;
  for (i = 0; i < nq; i++) { /* the slots came in while later words were found */
    const queued *w = &sc->q[i];
    const rag_termcache_slot *e;
    if (!w->kept || m->n == 0) continue;
    e = &m->slots[w->h & m->mask];
    if (e->off != 0 && e->hash == w->h) __builtin_prefetch(m->arena + e->off - 1);
  }
  for (i = 0; i < nq && rc == RAG_OK; i++) rc = put_term(sc, &sc->q[i]);
  return rc;
}

/* Queues the source word s[start, stop) (T_ flags `flags`) for put_term. */
static inline __attribute__((always_inline)) int queue_term(scan *sc, size_t start, size_t stop,
                                                            int flags) {
  queued *w = &sc->q[sc->nq];
  const rag_termcache *m = &sc->a->memo;
  size_t n = stop - start;
  w->start = start;
  w->stop = stop;
  w->flags = (unsigned char)flags;
  w->kept = n <= RAG_TERMCACHE_KEY && (sc->memo >> flags & 1);
  if (w->kept) {
    w->h = word_hash(sc->s + start, n);
    if (m->n > 0) __builtin_prefetch(&m->slots[w->h & m->mask]);
  }
  return ++sc->nq == QUEUED ? drain(sc) : RAG_OK;
}

/*
** The word starting at *pos (a letter, digit or connector): extends it over
** word characters, apostrophes between letters and points between digits.
** Words without a letter or digit ("__") are dropped. ASCII letters and
** digits, most of any Latin text, take the short inner loop.
*/
static int run_word(scan *sc, size_t *pos) {
  const unsigned char *s = sc->s;
  size_t len = sc->len, i = *pos, start = i, k;
  unsigned seen = 0, w;
  int last = C_SEP;
  int32_t cp;
  for (;;) {
    unsigned c;
    int cls;
    size_t from = i;
    while (i < len && ((w = word_bits[s[i]]) & W_ALNUM)) {
      seen |= w;
      i++;
    }
    if (i > from) last = word_bits[s[i - 1]] & W_NOSTEM ? C_DIGIT : C_LETTER;
    if (i >= len) break;
    if ((c = s[i]) < 0x80) {
      cls = ascii_class[c];
      k = 1;
    } else {
      k = rag_utf8_decode_valid(s + i, &cp);
      cls = classify(cp);
    }
    if (cls == C_LETTER) {
      seen |= W_ALNUM;
    } else if (cls == C_DIGIT) {
      seen |= W_ALNUM | W_NOSTEM;
    } else if (cls == C_CONN) {
      seen |= W_NOSTEM;
    } else if (cls == C_APOS || cls == C_POINT) {
      size_t k2;
      int want = cls == C_APOS ? C_LETTER : C_DIGIT;
      if (last != want || class_at(s, len, i + k, &cp, &k2) != want) break;
    } else if (cls != C_MARK) {
      break;
    }
    if (cls != C_MARK) last = cls;
    if (c >= 0x80) seen |= W_WIDE;
    i += k;
  }
  *pos = i;
  if (!(seen & W_ALNUM)) return RAG_OK;
  return queue_term(sc, start, i, word_flags(seen));
}

/*
** Whether the ASCII word at p, of two bytes or more when `two`, may give a
** wanted term: its first two bytes (lowercased when the analyzer folds:
** | 0x20 keeps digits), or its first byte and 0, are a pair wanted.
*/
static inline int wanted(const scan *sc, const unsigned char *p, int two) {
  unsigned fold = sc->a->cfg.lowercase ? 0x20 : 0, c = p[0] | fold, d = two ? p[1] | fold : 0;
  return sc->want->pairs[c & 127] >> (d & 63) & 1;
}

/*
** The word of ASCII letters and digits starting at *pos, when a separator,
** a point after a letter or the end of input follows it (most words); else
** run_word.
*/
static int run_ascii(scan *sc, size_t *pos) {
  const unsigned char *s = sc->s;
  size_t len = sc->len, i = *pos, start = i;
  unsigned seen = W_ALNUM, w = 0;
  /* eight bytes at a time: the run of [0-9A-Za-z], and whether it has
  ** capitals or digits (word_bits' W_UPPER and W_NOSTEM); the byte loop
  ** takes the last few bytes */
  for (; len - i >= 8; i += 8) {
    uint64_t b, y, digit, upper, stop, in;
    memcpy(&b, s + i, 8);
    y = b & RAG_BYTES(0x7f);
    digit = rag_ascii_in(y, '0', '9');
    upper = rag_ascii_in(y, 'A', 'Z');
    stop = ~((digit | rag_ascii_in(y | RAG_BYTES(0x20), 'a', 'z')) & ~b) & RAG_BYTES(0x80);
    in = stop ? (stop & (0 - stop)) - 1 : ~UINT64_C(0); /* the bytes before the stop */
    if (digit & in) seen |= W_NOSTEM;
    if (upper & in) seen |= W_UPPER;
    if (stop) {
      i += (size_t)__builtin_ctzll(stop) >> 3;
      break;
    }
  }
  while (i < len && ((w = word_bits[s[i]]) & W_ALNUM)) {
    seen |= w;
    i++;
  }
  w = i < len ? word_bits[s[i]] : 0;
  if (i < len && !(w & W_END) && !((w & W_POINT) && !(word_bits[s[i - 1]] & W_NOSTEM)))
    return run_word(sc, pos);
  *pos = i;
  if (sc->want != NULL && !wanted(sc, s + start, i - start > 1)) return RAG_OK;
  return queue_term(sc, start, i, word_flags(seen));
}

/*
** For a run wanting only some terms (sc->want), from *pos in the scan's
** block: reads the words that may give one and passes over the others by
** the block's masks, up to the first word the masks cannot judge: one that
** runs into a slow byte (left at *pos for the general scan) or past the
** block's end (the next block is read from its start, so that it is judged
** whole there). *moved tells whether *pos or the block changed.
*/
static int skim(scan *sc, size_t *pos, int *moved) {
  block *k = &sc->k;
  size_t at = k->at;
  unsigned off = (unsigned)(*pos - at), p, q, j;
  uint64_t slow = k->slow >> off << off, below, starts, m, want = 0;
  int rc;
  p = slow ? (unsigned)__builtin_ctzll(slow) : 64; /* the first slow byte */
  q = p; /* where the words the masks judge end: before the word that runs into p */
  if (p > off && (k->alnum >> (p - 1) & 1)) {
    below = ~k->alnum & (p < 64 ? (UINT64_C(1) << p) - 1 : ~UINT64_C(0));
    q = below ? 64 - (unsigned)__builtin_clzll(below) : 0;
    if (q < off) q = off;
  }
  starts = k->alnum & ~(k->alnum << 1) & (~UINT64_C(0) << off);
  if (q < 64) starts &= (UINT64_C(1) << q) - 1;
  for (m = starts; m != 0; m &= m - 1) { /* no branch: a word is wanted at random */
    j = (unsigned)__builtin_ctzll(m);
    want |= (uint64_t)wanted(sc, sc->s + at + j, k->alnum >> (j + 1) & 1) << j;
  }
  while (want != 0) {
    size_t i = at + (size_t)__builtin_ctzll(want);
    want &= want - 1;
    if ((rc = run_ascii(sc, &i)) != RAG_OK) return rc;
  }
  *moved = q > off || (p == 64 && off > 0);
  *pos = at + q;
  if (p == 64 && q < 64 && *moved) fill_block(k, sc->s, sc->len, at + q, sc->a->simd);
  return RAG_OK;
}

/* Emits one CJK term over source bytes [start, stop), never stemmed. */
static int put_cjk(scan *sc, size_t start, size_t stop) {
  return queue_term(sc, start, stop, 0);
}

/*
** The CJK run starting at *pos. A character is a CJK letter with the marks
** and attaching jamo after it; terms are emitted as characters are found,
** so text order holds: in "both" mode U0 B01 U1 B12 U2.
*/
static int run_cjk(scan *sc, size_t *pos) {
  const unsigned char *s = sc->s;
  rag_analyzer_cjk mode = sc->a->cfg.cjk;
  size_t len = sc->len, i = *pos, rs = i, ps = 0, pe = 0, count = 0, k;
  int32_t cp;
  int rc = RAG_OK;
  while (rc == RAG_OK && class_at(s, len, i, &cp, &k) == C_CJK) {
    size_t cs = i;
    int cls;
    i += k;
    while ((cls = class_at(s, len, i, &cp, &k)) == C_MARK || (cls == C_CJK && cjk_attaches(cp)))
      i += k;
    if (count > 0 && (mode == RAG_ANALYZER_CJK_BIGRAM || mode == RAG_ANALYZER_CJK_BOTH))
      rc = put_cjk(sc, ps, i);
    if (rc == RAG_OK && (mode == RAG_ANALYZER_CJK_UNIGRAM || mode == RAG_ANALYZER_CJK_BOTH))
      rc = put_cjk(sc, cs, i);
    ps = cs;
    pe = i;
    count++;
  }
  *pos = i;
  if (rc != RAG_OK) return rc;
  if (mode == RAG_ANALYZER_CJK_BIGRAM && count == 1) return put_cjk(sc, ps, pe);
  if (mode == RAG_ANALYZER_CJK_RUN) return put_cjk(sc, rs, pe);
  return RAG_OK;
}

/* rag_analyzer_run, _some and _tagged: one of emit and tagged is set. */
static int run(rag_analyzer *a, const char *str, size_t len, const rag_analyzer_want *want,
               rag_term_fn emit, rag_tagged_fn tagged, void *ud, size_t *errpos) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0, bad = rag_text_first_invalid(s, len);
  scan sc;
  if (bad < len) {
    *errpos = bad + 1;
    return RAG_EENCODING;
  }
  sc.a = a;
  sc.s = s;
  sc.len = len;
  sc.emit = emit;
  sc.tagged = tagged;
  sc.ud = ud;
  /* A tagged run remembers every word, numbers too: its tag saves the owner's
  ** dictionary lookup (on SciFact, 5% of the words and of a BM25 ingest). */
  sc.memo = tagged != NULL ? (1u << T_FLAGS) - 1 : a->memo_flags;
  sc.nq = 0;
  sc.want = a->keeps_first ? want : NULL;
  sc.k.at = 0;
  if (sc.want != NULL) fill_block(&sc.k, s, len, 0, a->simd);
  while (i < len) {
    unsigned w = word_bits[s[i]];
    int32_t cp;
    size_t k;
    int cls, rc;
    if (sc.want != NULL) { /* by the block's masks as far as they go, then one step */
      int moved;
      if (i - sc.k.at >= 64) fill_block(&sc.k, s, len, i, a->simd);
      if ((rc = skim(&sc, &i, &moved)) != RAG_OK) return rc;
      if (moved) continue;
    }
    if (w & W_END) {
      i++;
      continue;
    }
    if (w & W_ALNUM) {
      if ((rc = run_ascii(&sc, &i)) != RAG_OK) return rc;
      continue;
    }
    if (s[i] < 0x80) {
      cls = ascii_class[s[i]];
      k = 1;
    } else {
      k = rag_utf8_decode_valid(s + i, &cp);
      cls = classify(cp);
    }
    if (cls == C_LETTER || cls == C_DIGIT || cls == C_CONN) rc = run_word(&sc, &i);
    else if (cls == C_CJK) rc = run_cjk(&sc, &i);
    else {
      i += k;
      continue;
    }
    if (rc != RAG_OK) return rc;
  }
  return drain(&sc);
}

int rag_analyzer_run(rag_analyzer *a, const char *s, size_t len, rag_term_fn emit, void *ud,
                     size_t *errpos) {
  return run(a, s, len, NULL, emit, NULL, ud, errpos);
}

void rag_analyzer_portable(rag_analyzer *a) {
  a->simd = 0;
}

void rag_analyzer_want_clear(rag_analyzer_want *w) {
  memset(w, 0, sizeof *w);
}

void rag_analyzer_want_term(rag_analyzer_want *w, const char *term, size_t n) {
  unsigned c = (unsigned char)term[0], d = n > 1 ? (unsigned char)term[1] : 0;
  if (c >= 128) return; /* a word with other bytes: never passed over */
  if (n == 1) {
    w->pairs[c] = ~UINT64_C(0);
    return;
  }
  w->pairs[c] |= UINT64_C(1) << (d & 63);
  if (d == 'i' || d == 'I') w->pairs[c] |= UINT64_C(1) << ((d + 16) & 63); /* y, Y */
}

int rag_analyzer_run_some(rag_analyzer *a, const char *s, size_t len,
                          const rag_analyzer_want *want, rag_term_fn emit, void *ud,
                          size_t *errpos) {
  return run(a, s, len, want, emit, NULL, ud, errpos);
}

int rag_analyzer_run_tagged(rag_analyzer *a, const char *s, size_t len, rag_tagged_fn emit,
                            void *ud, size_t *errpos) {
  return run(a, s, len, NULL, NULL, emit, ud, errpos);
}

void rag_analyzer_untag(rag_analyzer *a) {
  rag_termcache_clear(&a->memo);
}
