/*
** rag_model2vec.h: Model2Vec static embeddings, as model2vec's
** StaticModel.encode and model2vec-rs compute them: a directory with
** config.json, tokenizer.json and model.safetensors; a text is cut to
** max_length x (median token length) characters, tokenized (rag_hftok.h),
** stripped of the unknown id, cut to max_length ids, and the mean of their
** embedding rows (remapped and weighted for vocabulary-quantized models) is
** returned, scaled to unit length when config.json says `normalize`.
**
** Ownership: the model owns its files' contents and a scratch area, so one
** model must not be used by two threads at once; ids and embeddings go to
** buffers the caller owns or that stay valid until the next call.
*/
#ifndef RAG_MODEL2VEC_H
#define RAG_MODEL2VEC_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"

typedef struct rag_model2vec rag_model2vec;

/* Why a load failed: the file it concerns ("" for the directory), the errno
** of an RAG_EIO, the reason of an RAG_EFORMAT or RAG_ECORRUPT. */
typedef struct rag_model2vec_error {
  const char *file;
  int err;
  char why[200];
} rag_model2vec_error;

typedef struct rag_model2vec_info {
  size_t vocab;      /* token ids the tokenizer can emit */
  size_t dim;        /* embedding dimensions */
  size_t rows;       /* rows of the embedding table */
  const char *dtype; /* "f32", "f16", "i8" or "f64": how rows are stored */
  int normalize;     /* embeddings are scaled to unit length */
  int quantized;     /* vocabulary-quantized: ids map to shared, weighted rows */
  size_t median;     /* the median token length of the pre-truncation */
  const char *tokenizer; /* "WordPiece" or "Unigram" */
} rag_model2vec_info;

/* No limit for max_length. */
#define RAG_MODEL2VEC_NOLIMIT ((size_t)-1)

/*
** Loads the model in directory `dir` (borrowed). RAG_OK; RAG_EIO (a file is
** missing or unreadable), RAG_EFORMAT (not a model2vec directory, bad JSON,
** a bad safetensors header, an unsupported tokenizer or dtype) or
** RAG_ECORRUPT (sizes, offsets or ids that do not agree), described in *e;
** RAG_ENOMEM.
*/
int rag_model2vec_load(const char *dir, rag_model2vec **out, rag_model2vec_error *e);
void rag_model2vec_free(rag_model2vec *m);

void rag_model2vec_describe(const rag_model2vec *m, rag_model2vec_info *info);
size_t rag_model2vec_dim(const rag_model2vec *m);

/*
** The ids model2vec pools for `len` bytes at s: *ids stays valid until the
** next call on m. max_length may be RAG_MODEL2VEC_NOLIMIT. RAG_EENCODING
** when s is not valid UTF-8 (*errpos: 1-based offset of the first bad
** byte), RAG_ENOMEM.
*/
int rag_model2vec_tokenize(rag_model2vec *m, const char *s, size_t len, size_t max_length,
                           const uint32_t **ids, size_t *n, size_t *errpos);

/* The embedding of s into out[dim]; errors as rag_model2vec_tokenize. */
int rag_model2vec_embed(rag_model2vec *m, const char *s, size_t len, size_t max_length,
                        float *out, size_t *errpos);

#endif
