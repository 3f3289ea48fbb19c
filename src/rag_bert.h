/*
** rag_bert.h: BERT-family encoders run in process, as sentence-transformers
** runs them: sentence embedders (mean or CLS pooling, optionally L2
** normalised) and cross-encoders (a query and a text through the encoder,
** the pooler and a one-logit classifier).
**
** A model is a folder as users download it: config.json (model_type
** "bert"), tokenizer.json (WordPiece, through rag_hftok), model.safetensors
** (F32 or F16), and for embedders modules.json, 1_Pooling/config.json and
** sentence_bert_config.json (max_seq_length). F32 matrices are used in
** place from the file, mapped read-only and shared (so processes share one
** copy); F16 ones are widened to F32 at load; `quantize` makes int8 copies
** with a scale per row.
**
** The forward pass: token + position + type embeddings, LayerNorm; per
** layer multi-head self-attention, output projection, residual, LayerNorm,
** GELU feed-forward, residual, LayerNorm; then pooling. A batch's tokens go
** through the dense layers together with no padding; attention runs per
** text over its own tokens, which is what the padding mask computes.
**
** Ownership: a model owns its memory and its scratch; it is not for two
** threads at once. Calls borrow their texts.
*/
#ifndef RAG_BERT_H
#define RAG_BERT_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"

typedef struct rag_bert rag_bert;

typedef struct rag_bert_opts {
  int quantize; /* 1: the dense layers in int8 (weights with a scale per row,
                 each token's activations with its own scale) */
  int portable; /* 1: plain C kernels (for tests) */
} rag_bert_opts;

/* Why a load failed: the file it concerns ("" for the folder), the errno
** of an I/O failure (0 otherwise) and the reason. */
typedef struct rag_bert_error {
  const char *file;
  int err;
  char why[200];
} rag_bert_error;

typedef struct rag_bert_info {
  int cross;            /* a cross-encoder (BertForSequenceClassification) */
  size_t dim;           /* embedding dimensions (the hidden size) */
  size_t layers, heads, ff, vocab, positions;
  size_t max_tokens;    /* tokens per text or pair, [CLS] and [SEP] included */
  const char *pooling;  /* "mean" or "cls" */
  int normalize;        /* embeddings scaled to unit length */
  const char *dtype;    /* the file's: "f32" or "f16" */
  const char *weights;  /* what the dense layers run as: "f32" or "int8" */
  const char *kernel;   /* "avx512", "avx2" or "portable" */
  size_t mapped, owned; /* bytes of the file mapped; bytes the model allocated */
} rag_bert_info;

/*
** Loads the model folder `dir`. RAG_OK; RAG_EIO (e->err, e->file);
** RAG_EFORMAT or RAG_ECORRUPT with the reason in e->why; RAG_ENOMEM.
*/
int rag_bert_load(const char *dir, const rag_bert_opts *o, rag_bert **out, rag_bert_error *e);
void rag_bert_free(rag_bert *m);
void rag_bert_describe(const rag_bert *m, rag_bert_info *info);

/*
** The ids and type ids of a text (b == NULL) or of a pair, truncated to
** max_tokens as the tokenizers library truncates (a pair: the longer side
** first). *ids and *types point into the model until its next call.
** RAG_OK; RAG_EENCODING (invalid UTF-8 at byte *errpos of a, or of b when
** *inb); RAG_ENOMEM.
*/
int rag_bert_tokenize(rag_bert *m, const char *a, size_t alen, const char *b, size_t blen,
                      const uint32_t **ids, const uint8_t **types, size_t *n, size_t *errpos,
                      int *inb);

/*
** Embeds n texts into out[n * dim] (an embedder; RAG_EINVAL for a
** cross-encoder). RAG_OK; RAG_EENCODING (text *bad, byte *errpos);
** RAG_ENOMEM.
*/
int rag_bert_embed(rag_bert *m, const char *const *texts, const size_t *lens, size_t n,
                   float *out, size_t *bad, size_t *errpos);

/*
** The cross-encoder's logit for the query with each of n texts into
** out[n] (RAG_EINVAL for an embedder). Errors as rag_bert_embed; *bad is
** 0 for the query, i + 1 for texts[i].
*/
int rag_bert_score(rag_bert *m, const char *q, size_t qlen, const char *const *texts,
                   const size_t *lens, size_t n, float *out, size_t *bad, size_t *errpos);

#endif
