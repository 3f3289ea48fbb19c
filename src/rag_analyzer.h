/*
** rag_analyzer.h: the analyzer turns text into index terms for BM25:
** segmentation into words and CJK n-grams, case folding (NFKC_Casefold),
** stopword removal and Snowball stemming (libstemmer). Each term carries the
** byte span of its source in the input.
*/
#ifndef RAG_ANALYZER_H
#define RAG_ANALYZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct rag_analyzer rag_analyzer;

/* What a run of Han, kana or Hangul characters becomes. */
typedef enum rag_analyzer_cjk {
  RAG_ANALYZER_CJK_BIGRAM = 0, /* overlapping pairs; a one-character run is a unigram */
  RAG_ANALYZER_CJK_UNIGRAM,    /* each character */
  RAG_ANALYZER_CJK_BOTH,       /* per position: the unigram, then the bigram starting there */
  RAG_ANALYZER_CJK_RUN         /* the whole run as one term */
} rag_analyzer_cjk;

typedef enum rag_analyzer_stop {
  RAG_ANALYZER_STOP_NONE = 0, /* keep every term */
  RAG_ANALYZER_STOP_BUILTIN,  /* the built-in English list (English languages only) */
  RAG_ANALYZER_STOP_LIST      /* `words`, matched after case folding */
} rag_analyzer_stop;

typedef enum rag_analyzer_langkind {
  RAG_ANALYZER_LANG_UNKNOWN = 0, /* libstemmer has no such algorithm */
  RAG_ANALYZER_LANG_OTHER,       /* a known, non-English algorithm */
  RAG_ANALYZER_LANG_ENGLISH      /* "english" or "porter" */
} rag_analyzer_langkind;

typedef struct rag_analyzer_opts {
  const char *lang;            /* a name from sb_stemmer_list(), e.g. "english" */
  int stem;                    /* 1: Snowball-stem words without digits or '_' (up to 64 bytes) */
  int lowercase;               /* 1: NFKC case folding; U+2019 becomes "'" */
  rag_analyzer_cjk cjk;        /* CJK segmentation */
  rag_analyzer_stop stopwords; /* which stopwords to drop */
  const char *const *words;    /* RAG_ANALYZER_STOP_LIST: nwords NUL-terminated words */
  size_t nwords;
} rag_analyzer_opts;

/*
** A term callback: `term` (termlen > 0 bytes, not NUL-terminated) is valid
** only during the call; `hash` is its rag_fnv32 (rag_fnv.h), for callers
** that look terms up; [start, stop) is the 0-based byte span of its source
** in the input. A non-zero return stops the run, which returns that value.
** The callback must not run the same analyzer.
*/
typedef int (*rag_term_fn)(void *ud, const char *term, size_t termlen, uint32_t hash,
                           size_t start, size_t stop);

/* Fills *o with the defaults: english, stem, lowercase, bigrams, built-in stopwords. */
void rag_analyzer_defaults(rag_analyzer_opts *o);

/*
** Whether code point `cp` lies in the blocks the analyzer treats as CJK:
** Han (with extensions and compatibility ideographs), Hiragana, Katakana,
** Bopomofo and Hangul. Callers apply it to letters and numbers only.
*/
int rag_analyzer_is_cjk(int32_t cp);

/* Whether `lang` names a libstemmer algorithm, and whether it is English. */
rag_analyzer_langkind rag_analyzer_langkind_of(const char *lang);

/*
** Creates an analyzer from *o (borrowed: lang and the stopwords are copied).
** On RAG_OK, *out is a new analyzer that the caller releases with
** rag_analyzer_free. RAG_EINVAL: unknown or NULL language, built-in
** stopwords with a non-English language, a NULL word or a bad enum value.
** RAG_ENOMEM: out of memory. On failure *out is NULL and nothing stays
** allocated.
*/
int rag_analyzer_new(const rag_analyzer_opts *o, rag_analyzer **out);

/* Releases `a` and everything it owns. Passing NULL is a harmless no-op. */
void rag_analyzer_free(rag_analyzer *a);

/*
** The options `a` was built with, as copies owned by `a` (valid until
** rag_analyzer_free). Stopwords are given as passed in, before folding.
*/
const rag_analyzer_opts *rag_analyzer_config(const rag_analyzer *a);

/*
** The largest memory an analyzer's term cache holds (3 MiB): the cache maps
** words it has stemmed or folded through utf8proc (up to 64 bytes) to their
** terms, at most 65,536 of them, and starts over when full.
*/
#define RAG_ANALYZER_CACHE_MAX ((size_t)3 << 20)

/* The words `a`'s term cache holds (*entries) and its memory (*bytes). */
void rag_analyzer_cache(const rag_analyzer *a, size_t *entries, size_t *bytes);

/*
** Analyzes `len` bytes at `s` (borrowed) and calls `emit` for each term in
** text order (start and stop never decrease). Returns RAG_OK; RAG_EENCODING
** when `s` is not valid UTF-8, with *errpos the 1-based offset of the first
** invalid byte and `emit` never called; RAG_ENOMEM (the terms emitted so far
** stand); or the first non-zero value `emit` returned.
** An analyzer is not thread-safe: it owns a stemmer, scratch buffers and a
** term cache, so use one analyzer per thread (or lock). What it keeps
** across runs never changes results: equal input gives equal terms. The
** cache never fails a run: when it cannot grow it stops remembering.
*/
int rag_analyzer_run(rag_analyzer *a, const char *s, size_t len,
                     rag_term_fn emit, void *ud, size_t *errpos);

/* Makes a read its text with portable C where it would use AVX2 (for
** tests: the terms are the same). */
void rag_analyzer_portable(rag_analyzer *a);

/*
** The terms a caller wants from rag_analyzer_run_some, by their first two
** bytes: bit (d & 63) of pairs[c] for a term of ASCII first byte c and
** second byte d; every bit for a term of one byte (or a word of one byte
** gives it). Fill with rag_analyzer_want_clear and then
** rag_analyzer_want_term for each term.
*/
typedef struct rag_analyzer_want {
  uint64_t pairs[128];
} rag_analyzer_want;

void rag_analyzer_want_clear(rag_analyzer_want *w);

/* Adds term[0..n) (n > 0), a term of the analyzer that will run. */
void rag_analyzer_want_term(rag_analyzer_want *w, const char *term, size_t n);

/*
** rag_analyzer_run for a caller that wants only some terms (*want), such
** as a highlighter that wants a query's terms: the terms it gives are those
** of rag_analyzer_run that start as one of them, and perhaps others. Words
** of ASCII letters and digits whose term cannot start so are passed over
** unanalyzed when the analyzer's terms keep a word's first two characters
** (no stemming, or English's and Porter's, which only change endings:
** a word of two or more letters gives a term of one, or of two or more
** whose second letter is the word's, or 'i' for its 'y', as "dying" "die").
*/
int rag_analyzer_run_some(rag_analyzer *a, const char *s, size_t len,
                          const rag_analyzer_want *want, rag_term_fn emit, void *ud,
                          size_t *errpos);

/*
** A term callback of rag_analyzer_run_tagged: as rag_term_fn without the
** source span, and with `tag`, 4 bytes (unaligned) that the analyzer keeps
** with the term's source word in its cache, or NULL when the word is not
** kept there. A tag starts as UINT32_MAX; what the callback stores in it
** comes back with each later occurrence of the word (or of its lowercase
** form first seen), until rag_analyzer_untag.
*/
typedef int (*rag_tagged_fn)(void *ud, const char *term, size_t termlen, uint32_t hash,
                             unsigned char *tag);

/*
** rag_analyzer_run for the one owner of `a` that remembers something per
** term in the tags (BM25 keeps the term's id, saving its dictionary
** lookup). The terms are those rag_analyzer_run gives.
*/
int rag_analyzer_run_tagged(rag_analyzer *a, const char *s, size_t len,
                            rag_tagged_fn emit, void *ud, size_t *errpos);

/* Resets every tag to UINT32_MAX (when what they say has changed). */
void rag_analyzer_untag(rag_analyzer *a);

#endif
