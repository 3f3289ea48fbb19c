/*
** rag_index.h: the document index under rag.index: a store of documents
** and chunks (rag_store), BM25 over the leaf chunks, and optionally their
** vectors (rag_vec or rag_hnsw), kept in step: a document is put or removed
** in all of them or in none. A search ranks leaf chunks by BM25, by vector
** or by both fused with RRF, inside a metadata filter, and can keep one hit
** per document, widen each hit to its neighbours (sentence windows) or
** merge children into their parent (hierarchies). Not thread-safe.
*/
#ifndef RAG_INDEX_H
#define RAG_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"
#include "rag_bm25.h"
#include "rag_hnsw.h"
#include "rag_store.h"
#include "rag_vec.h"

typedef struct rag_index rag_index;

/*
** An index over the parts: b and s are required, at most one of v and h
** (none: BM25 only). On success the index owns them all, else the caller
** still does. The store's documents must be those whose leaves b and v|h
** hold (as after loading the three files of one save). RAG_ENOMEM.
*/
int rag_index_new(rag_bm25 *b, rag_vec *v, rag_hnsw *h, rag_store *s, rag_index **out);
void rag_index_free(rag_index *ix); /* NULL is a no-op */

/* Gives an index without vectors or leaf chunks the vector part v or h (owned). */
void rag_index_attach(rag_index *ix, rag_vec *v, rag_hnsw *h);

/*
** Moves the exact vectors into h (empty, same dimension), document by
** document in id order, then drops the exact index. RAG_EINVAL without
** exact vectors or with a bad h; RAG_ENOMEM leaves the index as it was
** (h then partly filled, still the caller's). On success h is the index's.
*/
int rag_index_to_hnsw(rag_index *ix, rag_hnsw *h);

rag_bm25 *rag_index_bm25(const rag_index *ix);
rag_vec *rag_index_vec(const rag_index *ix);   /* or NULL */
rag_hnsw *rag_index_hnsw(const rag_index *ix); /* or NULL */
rag_store *rag_index_store(const rag_index *ix);
size_t rag_index_dim(const rag_index *ix); /* 0 without vectors */

/*
** The text BM25 and the embedder see for chunk c of d: the title, a
** newline, then the chunk's text, or the chunk's text alone when d has no
** title or an empty one. Writes it to buf (room for rag_index_text_size)
** and returns its length.
*/
size_t rag_index_text_size(const rag_store_doc *d, const rag_store_chunk *c);
size_t rag_index_text(const rag_store_doc *d, const rag_store_chunk *c, char *buf);

/*
** The content hash of document d, which tells an unchanged document from a
** changed one (its id, source and chunks aside): SHA-256 of its text, a
** byte 1 or 0 for whether it has a title, the title and its encoded
** metadata, each string preceded by its length as a varint. RAG_ENOMEM.
*/
int rag_index_hash(const rag_store_doc *d, unsigned char out[RAG_STORE_HASH]);

/*
** Puts document d (borrowed), replacing a live one with the same id;
** vecs holds a vector of dim floats per leaf chunk, in chunk order (NULL
** without vectors). RAG_EINVAL: a bad chunk or metadata (rag_store_put), or
** a refused vector (*bad); RAG_EENCODING (*errpos, within the leaf's text);
** RAG_ENOMEM, RAG_ETOOBIG. On failure the index is unchanged, except after
** a second out-of-memory while restoring a replaced document, which then
** leaves every part without it.
*/
int rag_index_put(rag_index *ix, const rag_store_doc *d, const float *vecs, size_t *errpos,
                  rag_vec_bad *bad);

/*
** Removes document `id` and its chunks from every part. Fails only on a
** mapped index's first change, when copying what it borrows runs out of
** memory (rag_bm25_own, rag_vec_own): RAG_ENOMEM, the index unchanged.
*/
int rag_index_remove(rag_index *ix, const char *id, size_t len, int *removed);

typedef enum rag_index_mode { RAG_INDEX_HYBRID, RAG_INDEX_BM25, RAG_INDEX_VECTOR } rag_index_mode;

/* The text fields an enriched index keeps per leaf chunk (rag.index's enrich). */
enum { RAG_INDEX_KEYWORDS, RAG_INDEX_SUMMARY, RAG_INDEX_FIELDS };

/*
** An enriched index's extra parts, borrowed for one search (any may be
** NULL). bm25[f] holds field f of each leaf chunk under the chunk's name;
** the lexical list scores a chunk by its text's BM25 plus weight[f] times
** each field's (each list's best fetch_k, a chunk absent from one adding
** 0). q (a rag_vec) or qh holds the chunks' hypothetical questions under
** "<chunk name>?<k>", 1 <= k <= qmax; the vector list scores a chunk by the
** better of its own vector and its best question.
*/
typedef struct rag_index_fields {
  rag_bm25 *bm25[RAG_INDEX_FIELDS];
  double weight[RAG_INDEX_FIELDS];
  rag_vec *q;
  rag_hnsw *qh;
  uint32_t qmax;
} rag_index_fields;

typedef struct rag_index_query {
  rag_index_mode mode;
  const char *text; /* the query, for BM25 */
  size_t len;
  const float *vec; /* dim floats, for the vector list */
  size_t k;         /* hits wanted */
  size_t fetch_k;   /* hits taken from each list (at least k) */
  double rrf_k, rrf_base, w_bm25, w_vec; /* RRF: weight / (rrf_k + rrf_base + position) */
  size_t ef;        /* HNSW beam, 0: the index's */
  const rag_store_filter *filter; /* NULL: every document */
  int group;        /* one hit per document, its best */
  uint32_t window;  /* widen each hit by this many chunks of its level each side */
  double merge;     /* > 0: replace hit children by their parent when this share of them is hit */
  const rag_index_fields *fields; /* NULL: none */
} rag_index_query;

typedef struct rag_index_hit {
  uint32_t doc, chunk;   /* the store slot and chunk n (1-based) */
  uint32_t start, stop;  /* the span returned, in the document's text */
  double score;
  uint32_t rank_bm25, rank_vec; /* 1-based places in the two lists, 0: not in it */
  uint32_t rank_field[RAG_INDEX_FIELDS], rank_q; /* ... in the fields' and questions' lists */
} rag_index_hit;

/*
** The best q->k leaf chunks (or merged parents), best first, ties by chunk
** name; with a filter, k come back whenever k chunks (with group, k
** documents) match. *hits is valid until the next call. RAG_EINVAL: a
** vector mode without vectors, or a refused query vector (*bad);
** RAG_EENCODING (*errpos); RAG_ENOMEM.
*/
int rag_index_search(rag_index *ix, const rag_index_query *q, const rag_index_hit **hits,
                     size_t *n, size_t *errpos, rag_vec_bad *bad);

/*
** The offline keywords of leaf chunk `name`: the n terms of its indexed
** text (rag_index_text) with the highest BM25 weight in the index (the
** chunk's tf, the corpus's idf), best first, ties by term bytewise, each
** as its first occurrence in that text: words[i] (words[i].len bytes at
** words[i].s, valid until the next call). *count is 0 when the chunk is
** not a live leaf. RAG_ENOMEM.
*/
typedef struct rag_index_word {
  const char *s;
  size_t len;
} rag_index_word;

int rag_index_keywords(rag_index *ix, const char *name, size_t len, size_t n,
                       const rag_index_word **words, size_t *count);

/* The name of a hit's chunk ("<doc id>#<n>") in a buffer valid until the next call. */
const char *rag_index_chunk_name(rag_index *ix, const rag_index_hit *h, size_t *len);

/* Every part agrees with the store (counts and names). For tests. */
int rag_index_check(rag_index *ix);

#endif
