/*
** rag_bm25.h: an incremental BM25 index. Documents (string ids, analyzed
** text) go into an inverted index whose postings are varint-coded gaps and
** term frequencies; documents can be added, replaced and removed at the cost
** of their own size, with N, avgdl and every df kept exact. The index saves
** to a checksummed file (grammar in rag_bm25_file.c) and loads from one.
*/
#ifndef RAG_BM25_H
#define RAG_BM25_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"
#include "rag_analyzer.h"
#include "rag_ids.h"

typedef struct rag_bm25 rag_bm25;

/*
** The scoring formulas of Kamphuis et al., "Which BM25 Do You Mean?"
** (ECIR 2020), as bm25s implements them (Robertson's idf is clamped at 0).
*/
typedef enum rag_bm25_variant {
  RAG_BM25_LUCENE = 0, /* idf ln(1 + (N-df+.5)/(df+.5)), tf/(tf + k1(1-b+b dl/avgdl)) */
  RAG_BM25_ROBERTSON,  /* idf ln(max(1, (N-df+.5)/(df+.5))), tf part as lucene */
  RAG_BM25_ATIRE,      /* idf ln(N/df), tf (k1+1)/(tf + k1(1-b+b dl/avgdl)) */
  RAG_BM25_L,          /* idf ln((N+1)/(df+.5)), c = tf/(1-b+b dl/avgdl),
                          (k1+1)(c+delta)/(k1+c+delta) */
  RAG_BM25_PLUS,       /* idf ln((N+1)/df), atire's tf part + delta */
  RAG_BM25_NVARIANTS
} rag_bm25_variant;

#define RAG_BM25_MAX_PARAM 1e6 /* the largest k1 or delta */

typedef struct rag_bm25_opts {
  double k1;                  /* in [0, 1e6]; default 1.2 */
  double b;                   /* in [0, 1]; default 0.75 */
  double delta;               /* in [0, 1e6]; bm25l and bm25+ only */
  rag_bm25_variant variant;   /* default RAG_BM25_LUCENE */
  rag_analyzer_opts analyzer; /* borrowed; the index builds its own analyzer */
} rag_bm25_opts;

/*
** Fills *o with the defaults: k1 1.2, b 0.75, lucene, delta 0.5 and the
** default analyzer (english, stems, stopwords, CJK bigrams).
*/
void rag_bm25_defaults(rag_bm25_opts *o);

/* The delta a variant uses when none is given: 0.5 for bm25l, 1 for bm25+. */
double rag_bm25_default_delta(rag_bm25_variant v);

/*
** Creates an empty index. RAG_EINVAL: a parameter out of range or analyzer
** options rag_analyzer_new refuses; RAG_ENOMEM. On failure *out is NULL.
*/
int rag_bm25_new(const rag_bm25_opts *o, rag_bm25 **out);

/* Releases `b` and everything it owns. Passing NULL is a harmless no-op. */
void rag_bm25_free(rag_bm25 *b);

/* The parameters `b` was built with (analyzer options owned by `b`). */
const rag_bm25_opts *rag_bm25_config(const rag_bm25 *b);

/*
** Adds the document `id` (idlen bytes, any bytes) with `len` bytes of UTF-8
** text (both borrowed); a live document with the same id is replaced.
** RAG_EENCODING (*errpos = 1-based offset of the first invalid byte),
** RAG_ENOMEM or RAG_ETOOBIG (id or term count over 2^32 - 1): the index is
** unchanged. Costs about the size of the document.
*/
int rag_bm25_add(rag_bm25 *b, const char *id, size_t idlen, const char *text,
                 size_t len, size_t *errpos);

/*
** Removes the document `id`; *removed is 1 when it was live, else 0. Dead
** postings are dropped lazily, within the cost of later calls. Never fails
** on an index that owns its lists; a borrowing load's index takes them
** first (rag_bm25_own), which can fail with RAG_ENOMEM, removing nothing.
*/
int rag_bm25_remove(rag_bm25 *b, const char *id, size_t idlen, int *removed);

/*
** An index from a borrowing load searches the posting lists where they lie;
** before its first change it copies them and builds what a change needs.
** Adding and removing do this themselves; a caller that must not fail
** halfway (rag_index) calls it first. RAG_ENOMEM: nothing changed.
*/
int rag_bm25_own(rag_bm25 *b);

/* The number of live documents. */
size_t rag_bm25_count(const rag_bm25 *b);

/* An id set for rag_bm25_search: the filter of the vector indexes. */
typedef rag_id_filter rag_bm25_filter;

/*
** Ranks the live documents that contain a query term (restricted to
** `filter` unless NULL) and returns the best min(k, matches) in *hits, best
** first, equal scores ordered by id (bytewise). hits[i].id is a handle for
** rag_bm25_id. *hits is owned by `b` and valid until the next call on `b`.
** A query term repeated q times weighs q times. RAG_EENCODING (*errpos
** set), RAG_ENOMEM. Not thread-safe: search uses scratch space in `b`.
** With `ahead` not NULL, the search asks for its lines as it goes, one a
** posting (see rag_ahead).
*/
int rag_bm25_search(rag_bm25 *b, const char *q, size_t len, size_t k,
                    const rag_bm25_filter *filter, rag_ahead *ahead, const rag_hit **hits,
                    size_t *n, size_t *errpos);

/* The id of hit handle `h` (*len bytes, owned by `b`, valid until the next change). */
const char *rag_bm25_id(const rag_bm25 *b, uint32_t h, size_t *len);

/* One query term of an explanation. */
typedef struct rag_bm25_term {
  const char *term; /* owned by `b`, valid until the next call on `b` */
  size_t len;
  uint32_t qtf;  /* times the term occurs in the query */
  uint32_t tf;   /* times it occurs in the document (0: absent) */
  uint32_t df;   /* live documents containing it (0: unknown term) */
  double idf;    /* 0 when df is 0 */
  double weight; /* its part of the score */
} rag_bm25_term;

typedef struct rag_bm25_explain {
  const rag_bm25_term *terms; /* the distinct query terms, in query order */
  size_t nterms;
  double score; /* the sum of the weights (plus bm25l/bm25+'s absent-term part) */
  uint32_t dl;  /* the document's length in terms */
  double avgdl;
  size_t docs; /* N */
} rag_bm25_explain;

/*
** Explains the score of document `id` for query `q`: *found is 0 when no
** live document has that id. The score equals the one search gives, bit
** for bit. A document with none of the query terms has score 0, or for
** bm25l and bm25+ the absent-term part (search never returns it).
** RAG_EENCODING (*errpos set), RAG_ENOMEM.
*/
int rag_bm25_explain_doc(rag_bm25 *b, const char *q, size_t len, const char *id,
                         size_t idlen, rag_bm25_explain *out, int *found,
                         size_t *errpos);

/*
** Weighs the terms of text `q` as the index would weigh them in a document
** of that text: each distinct term's tf is its count in q, dl is q's
** length in terms, idf and avgdl are the index's (weight = idf times the tf
** part; qtf = tf; a term no live document holds weighs 0). For keywords:
** no posting list is read. RAG_EENCODING (*errpos), RAG_ENOMEM.
*/
int rag_bm25_explain_text(rag_bm25 *b, const char *q, size_t len, rag_bm25_explain *out,
                          size_t *errpos);

typedef struct rag_bm25_stats {
  size_t docs;          /* live documents */
  size_t terms;         /* distinct terms in live documents */
  size_t postings;      /* live (term, document) pairs */
  size_t dead;   /* postings of removed documents not yet dropped */
  size_t bytes;  /* bytes of the posting lists (live and dead postings) */
  size_t memory; /* bytes the index holds in all: lists, tables, forward lists, scratch */
  double avgdl;
} rag_bm25_stats;

void rag_bm25_stats_get(const rag_bm25 *b, rag_bm25_stats *s);

/*
** Writes the index to `path`: a temporary file in the same directory,
** fsynced, then renamed over `path`, so that a crash leaves the old file.
** RAG_EIO with *err = errno (and the temporary removed), RAG_ENOMEM.
*/
int rag_bm25_save(rag_bm25 *b, const char *path, int *err);

/*
** Serializes the index into a new buffer *buf of *n bytes (the file's
** bytes), which the caller releases with rag_free. RAG_ENOMEM.
*/
int rag_bm25_dump(rag_bm25 *b, unsigned char **buf, size_t *n);

/*
** Loads an index from `n` bytes at `p`. RAG_EFORMAT (not an index file),
** RAG_EVERSION (a newer format), RAG_ECORRUPT (a checksum or consistency
** check failed), RAG_ENOMEM; *why (static text) says what was wrong. Never
** reads outside the buffer. With `borrow`, the index keeps using the posting
** lists in the bytes at p (a read-only mapping, say), which must outlive it
** and never change; every check is made all the same.
*/
int rag_bm25_load_mem(const unsigned char *p, size_t n, int borrow, rag_bm25 **out,
                      const char **why);

/* As rag_bm25_load_mem for the file at `path`; RAG_EIO as rag_file_read
** says (*err = errno, or 0 with *why when the path is no regular file). */
int rag_bm25_load(const char *path, rag_bm25 **out, const char **why, int *err);

/*
** Checks every internal invariant (df, dead counts, lengths, postings
** order, the id and term tables); RAG_OK or RAG_ECORRUPT. For tests.
*/
int rag_bm25_check(const rag_bm25 *b);

#endif
