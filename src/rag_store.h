/*
** rag_store.h: the documents of a rag.index and their chunks. A document
** keeps its id, text, source, title, metadata and content hash; a chunk is
** a span of its document's text (so overlapping chunks share the bytes) and
** is named "<doc id>#<n>", n its 1-based place in the document's list.
** Finding a document, and a chunk's span, text and metadata from its name,
** is one hash lookup. Metadata is kept encoded (the grammar below); filters
** are evaluated on the encoding. Not thread-safe.
**
**   meta  = count:varint entry{count}      keys unique, in bytewise order
**   entry = key:str type:u8 value
**   value = str (1 string) | zigzag:varint (2 integer) | f64 (3 number)
**         | nothing (4 false, 5 true) | n:varint str{n} (6 list of strings)
*/
#ifndef RAG_STORE_H
#define RAG_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"
#include "rag_file.h"
#include "rag_ids.h"

#define RAG_STORE_HASH 32

enum { RAG_META_STRING = 1, RAG_META_INT, RAG_META_NUMBER, RAG_META_FALSE, RAG_META_TRUE,
       RAG_META_LIST };

typedef struct rag_store rag_store;

/* A span of the document's text: bytes [start, stop], 1-based. */
typedef struct rag_store_chunk {
  uint32_t start, stop;
  uint32_t tokens;
  uint32_t parent; /* the enclosing chunk's n, 0 for none (smaller than this chunk's) */
  uint32_t level;  /* 0 for flat chunks, 1 the largest of a hierarchy */
  uint32_t leaf;   /* 1 when no chunk names this one its parent: the indexed chunks */
} rag_store_chunk;

/*
** A document. As input to rag_store_put everything is borrowed (leaf is
** worked out by the store); as output every pointer is owned by the store
** and valid until the document is replaced or removed, or the store freed;
** but a document a borrowing load left unchanged (rag_store_load_mem) is
** read again on each use into one of 16 buffers: the doc (not the strings
** and chunks it points to, which stay valid) lasts until 15 other documents
** are read or any document changes.
*/
typedef struct rag_store_doc {
  const char *id, *text, *source, *title;
  size_t idlen, textlen, sourcelen, titlelen;
  int has_source, has_title;
  const unsigned char *meta; /* encoded; an empty table is the one byte 0 */
  size_t metalen;
  unsigned char hash[RAG_STORE_HASH];
  const rag_store_chunk *chunks;
  size_t nchunks;
} rag_store_doc;

int rag_store_new(rag_store **out); /* RAG_ENOMEM */
void rag_store_free(rag_store *s);  /* NULL is a no-op */

size_t rag_store_count(const rag_store *s);  /* live documents */
size_t rag_store_chunks(const rag_store *s); /* their chunks */
size_t rag_store_leaves(const rag_store *s); /* their leaf chunks */
size_t rag_store_bytes(const rag_store *s);  /* their text bytes */
size_t rag_store_memory(const rag_store *s); /* bytes allocated */
size_t rag_store_longest_id(const rag_store *s); /* the longest id held so far, in bytes */

/*
** The live slots in bytewise id order into slots (room for count), so that
** what walks them does not depend on the order documents came in. RAG_ENOMEM.
*/
int rag_store_order(const rag_store *s, uint32_t *slots);

/* The document slots are 0 .. count - 1; a removal moves the last into the hole. */
const rag_store_doc *rag_store_doc_at(const rag_store *s, uint32_t slot);
uint32_t rag_store_find(const rag_store *s, const char *id, size_t len); /* or RAG_IDS_NONE */
/* The chunks of the document at slot: rag_store_doc_at(s, slot)->chunks, valid as
** long as the document, without reading the rest of a borrowed record. */
const rag_store_chunk *rag_store_chunks_at(const rag_store *s, uint32_t slot);

/*
** Splits a chunk name into its document's slot and n (1-based); 0 when no
** live document has such a chunk.
*/
int rag_store_chunk_find(const rag_store *s, const char *name, size_t len, uint32_t *slot,
                         uint32_t *n);

/* Writes "<id>#<n>" into buf (room for idlen + 11 bytes); returns its length. */
size_t rag_store_chunk_name(char *buf, const char *id, size_t idlen, uint32_t n);

/*
** Copies the document in, replacing a live one with the same id. RAG_EINVAL
** when a chunk is out of the text, empty, or names a parent that is not
** before it, or the metadata is not well formed (rag_store_meta_check);
** RAG_ETOOBIG past 4 GiB of text or 2^32 chunks; RAG_ENOMEM. On failure the
** store is unchanged.
*/
int rag_store_put(rag_store *s, const rag_store_doc *d);

/* The checks of rag_store_put on d alone: RAG_OK, RAG_EINVAL or RAG_ETOOBIG. */
int rag_store_check_doc(const rag_store_doc *d);

/* Removes a document; *removed says whether it was there. Never fails. */
void rag_store_remove(rag_store *s, const char *id, size_t len, int *removed);

/* {====== Metadata ======} */

/* 1 when the n bytes at p are a well-formed meta encoding, else 0. */
int rag_store_meta_check(const unsigned char *p, size_t n);

/* One value of an entry (decoded; strings point into the encoding). */
typedef struct rag_meta_value {
  int type;
  const char *s; /* RAG_META_STRING */
  size_t len;    /* string bytes, or list length */
  int64_t i;     /* RAG_META_INT */
  double num;    /* RAG_META_INT and RAG_META_NUMBER */
  rag_reader list; /* RAG_META_LIST: its len strings, read with rag_r_str */
} rag_meta_value;

/* A cursor over a checked encoding's entries. */
typedef struct rag_meta_iter {
  const unsigned char *p, *e;
  uint64_t left;
} rag_meta_iter;

void rag_meta_begin(rag_meta_iter *it, const unsigned char *p, size_t n);
/* The next entry's key and value; 0 at the end. */
int rag_meta_next(rag_meta_iter *it, const char **key, size_t *keylen, rag_meta_value *v);

/* {====== Filters ======} */

/* A value a filter compares with: a string, a number or a boolean. */
typedef struct rag_filter_value {
  int type; /* RAG_META_STRING, RAG_META_NUMBER or RAG_META_TRUE / RAG_META_FALSE */
  const char *s;
  size_t len;
  double num;
} rag_filter_value;

/*
** One condition on the metadata key: with `range`, a number (integer or
** not) in [gte, lte] (infinities when open); otherwise equal to one of the
** nany values: a string to a string or to any string of a list, a number
** to a number, a boolean to a boolean. A missing key never matches.
*/
typedef struct rag_filter_cond {
  const char *key;
  size_t keylen;
  const rag_filter_value *any;
  size_t nany;
  int range;
  double gte, lte;
} rag_filter_cond;

/* Every condition holds, and the id is one of `docs` unless that is NULL. */
typedef struct rag_store_filter {
  const rag_filter_cond *conds;
  size_t nconds;
  const rag_id_filter *docs;
} rag_store_filter;

int rag_store_matches(const rag_store *s, uint32_t slot, const rag_store_filter *f);

/* {====== Saving and loading ======} */

/*
** The store as a file (rag_file.h), documents in id order, so two stores
** holding the same documents give the same bytes:
**   file   = header section{1}       magic "RAGSTORE", version 1
**   "DOCS" count:varint doc{count}
**   doc    = id:str text:str flags:u8 (1 source, 2 title) [source:str] [title:str]
**            meta:str hash:32 nchunks:varint chunk{nchunks}
**   chunk  = start:varint stop:varint tokens:varint parent:varint level:varint
*/
int rag_store_save(const rag_store *s, const char *path, int *err);

/* The same bytes into a new buffer the caller frees with rag_free. RAG_ENOMEM. */
int rag_store_dump(const rag_store *s, unsigned char **buf, size_t *n);

/*
** Loads a store from the n bytes at p. With `borrow` the store's strings
** point into p, which must outlive it and stay unchanged (a read-only
** mapping shared by processes), and the records read from p are not kept
** (see rag_store_doc); otherwise they are copied. RAG_EFORMAT,
** RAG_EVERSION, RAG_ECORRUPT (*why), RAG_ENOMEM.
*/
int rag_store_load_mem(const unsigned char *p, size_t n, int borrow, rag_store **out,
                       const char **why);

/* Checks the store's invariants. For tests. */
int rag_store_check(const rag_store *s);

#endif
