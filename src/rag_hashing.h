/*
** rag_hashing.h: the offline hashing embedder: signed feature hashing
** (Weinberger et al., ICML 2009) of words and character n-grams into `dim`
** buckets, damped and L2-normalised. Lexical similarity (shared spelling),
** not meaning; the same bits on every platform. The embedder borrows texts
** for one call; the caller owns `out`.
*/
#ifndef RAG_HASHING_H
#define RAG_HASHING_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"

#define RAG_HASHING_DIM_MAX 65536
#define RAG_HASHING_NGRAM_MAX 16 /* longest character n-gram, in code points */
#define RAG_HASHING_WEIGHT_MIN 1e-6 /* weights: only their ratio matters */
#define RAG_HASHING_WEIGHT_MAX 1e6

typedef struct rag_hashing rag_hashing;

/* What a bucket's signed sum v becomes before the L2 normalisation. */
typedef enum rag_hashing_tf {
  RAG_HASHING_TF_SQRT = 0, /* sign(v) * sqrt(|v|): damps repeated words (power normalisation) */
  RAG_HASHING_TF_RAW       /* v: scikit-learn's HashingVectorizer(alternate_sign=True) */
} rag_hashing_tf;

typedef struct rag_hashing_opts {
  size_t dim;          /* 1..RAG_HASHING_DIM_MAX buckets */
  int words;           /* 1: hash each word (and each CJK character) */
  int ngrams;          /* 1: hash character n-grams (and CJK character pairs) */
  unsigned ngram_min;  /* 1 <= ngram_min <= ngram_max <= RAG_HASHING_NGRAM_MAX */
  unsigned ngram_max;
  double word_weight;  /* what one word adds, in [RAG_HASHING_WEIGHT_MIN, _MAX] */
  double ngram_weight; /* what one n-gram adds, same range */
  rag_hashing_tf tf;   /* bucket damping */
  uint32_t seed;       /* another seed, another (equally good) set of hash functions */
  int lowercase;       /* 1: NFKC case folding; 0: NFKC only */
} rag_hashing_opts;

/*
** Fills *o with the defaults: dim 512, words and 3- to 5-grams, weights 1,
** tf sqrt, seed 0, lowercase.
*/
void rag_hashing_defaults(rag_hashing_opts *o);

/*
** Creates an embedder from *o (copied). On RAG_OK, *out is a new embedder
** the caller releases with rag_hashing_free. RAG_EINVAL: an option out of
** range, a bad tf, or neither words nor n-grams. RAG_ENOMEM. On failure *out is NULL.
*/
int rag_hashing_new(const rag_hashing_opts *o, rag_hashing **out);

/* Releases `h` and everything it owns. Passing NULL is a harmless no-op. */
void rag_hashing_free(rag_hashing *h);

/* The options `h` was built with (owned by `h`). */
const rag_hashing_opts *rag_hashing_config(const rag_hashing *h);

/*
** Embeds `len` bytes at `s` (borrowed) into out[0..dim) (the caller's), a
** unit vector under L2. RAG_EENCODING when `s` is not valid UTF-8, with
** *errpos the 1-based offset of the first invalid byte; RAG_ENOMEM (the
** scratch for code points could not grow). On failure out is unspecified.
** A text without features gives the unit vector of one fixed feature.
** Not thread-safe: `h` owns scratch buffers; results never depend on
** earlier calls.
*/
int rag_hashing_embed(rag_hashing *h, const char *s, size_t len, float *out, size_t *errpos);

#endif
