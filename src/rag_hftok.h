/*
** rag_hftok.h: the part of a Hugging Face tokenizer.json that static
** embedders (Model2Vec) ship, run as the `tokenizers` library runs it with
** add_special_tokens=False: added tokens split out first, normalizers
** (BertNormalizer, Sequence, Replace, Strip, Lowercase, NFC/NFD/NFKC/NFKD),
** pre-tokenizers (BertPreTokenizer, WhitespaceSplit, Metaspace, Sequence),
** then a WordPiece or Unigram model, then the file's truncation. Anything
** else in the file is refused when it is loaded, never approximated.
**
** Ownership: rag_hftok_new borrows the JSON text for the call and copies
** what it keeps; the tokenizer owns all its memory, including the id buffer
** that rag_hftok_encode lends out until the next call.
*/
#ifndef RAG_HFTOK_H
#define RAG_HFTOK_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"

typedef struct rag_hftok rag_hftok;

typedef struct rag_hftok_info {
  const char *model; /* "WordPiece" or "Unigram" */
  size_t nids;       /* one past the largest id the tokenizer can emit */
  size_t ntokens;    /* distinct token strings of the model vocabulary */
  size_t median;     /* median byte length of those strings (upper middle; 1 when none) */
  int has_unk;       /* the model names an unk_token (WordPiece) */
  uint32_t unk;      /* its id */
} rag_hftok_info;

/*
** Builds a tokenizer from `len` bytes of tokenizer.json. RAG_OK; RAG_EFORMAT
** (bad JSON, an unsupported component or option) or RAG_ECORRUPT (ids that
** contradict each other) with the reason in why[whylen]; RAG_ENOMEM.
*/
int rag_hftok_new(const char *json, size_t len, rag_hftok **out, char *why, size_t whylen);
void rag_hftok_free(rag_hftok *t);

void rag_hftok_describe(const rag_hftok *t, rag_hftok_info *info);

/*
** The ids of `len` bytes of valid UTF-8 (the caller checks). *ids points
** into the tokenizer and stays valid until the next call. RAG_OK,
** RAG_ENOMEM, RAG_ETOOBIG (a text too long for 32-bit offsets).
*/
int rag_hftok_encode(rag_hftok *t, const char *s, size_t len, const uint32_t **ids, size_t *n);

#endif
