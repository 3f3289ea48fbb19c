/*
** rag_bm25_internal.h: what the two files of the BM25 index share and no
** one else may use: the index's layout and the helpers that build it.
** rag_bm25.c keeps the index (adding, removing, searching); rag_bm25_file.c
** saves it to and loads it from its file format.
*/
#ifndef RAG_BM25_INTERNAL_H
#define RAG_BM25_INTERNAL_H

#include "rag_bm25.h"
#include "rag_ids.h"

#define RAG_BM25_DEAD UINT32_MAX /* dl of a removed document */
#define RAG_BM25_NONE UINT32_MAX /* no such term or document */
#define RAG_BM25_MAX_DOCS RAG_IDS_MAX

typedef struct rag_bm25_term_entry {
  uint8_t *post;       /* the posting list */
  uint32_t plen, pcap; /* its bytes, used and allocated */
  uint32_t off, len;   /* the term's bytes in the pool */
  uint32_t hash;
  uint32_t df;   /* live documents in the list */
  uint32_t dead; /* postings of removed documents in the list */
  uint32_t next; /* the document number after the last posting's */
} rag_bm25_term_entry;

typedef struct rag_bm25_doc {
  uint8_t *fwd;    /* the ids of its terms as varints; NULL once removed */
  uint32_t fwdlen; /* bytes of fwd */
} rag_bm25_doc;

typedef struct rag_bm25_dterm { /* a term of the document being added */
  uint32_t tid, tf;
} rag_bm25_dterm;

typedef struct rag_bm25_qterm { /* a distinct query term */
  uint32_t tid;                 /* RAG_BM25_NONE: not in the dictionary */
  uint32_t qtf;
  size_t off, len; /* its bytes in qtext (unknown terms, explain only) */
} rag_bm25_qterm;

struct rag_bm25 {
  rag_bm25_opts o; /* o.analyzer points into the analyzer's own copy */
  rag_analyzer *an;

  /* A dictionary used in place (a version 2 file's TERM section, where a
  ** borrowing load found it) until the first change: vterm is non-NULL, terms
  ** NULL, and the lists are borrowed; rag_bm25_own copies it into terms. */
  const uint8_t *vterm; /* its entries, RAG_BM25_VENTRY bytes each, nterms + 1 */
  const uint8_t *vslot; /* its hash table, vmask + 1 u32 cells */
  size_t vmask;
  const char *vpool;     /* its term bytes */
  const uint8_t *vpost;  /* the POST section */

  rag_bm25_term_entry *terms; /* the dictionary: term id -> term */
  size_t nterms, tcap, live_terms;
  uint32_t *tslots; /* hash table of term id + 1 (0 = empty) */
  size_t tmask;
  char *pool; /* term bytes */
  size_t poollen, poolcap;

  int borrowed; /* the lists are in a loader's bytes, no forward lists yet (rag_bm25_own) */
  rag_ids ids;       /* document number -> id; removed documents' ids unlinked */
  rag_bm25_doc *docs; /* document number -> forward list */
  uint32_t *dl;      /* document number -> length in terms, or RAG_BM25_DEAD */
  size_t dcap, nlive, ndead;
  uint64_t total; /* sum of the lengths of live documents */
  size_t live_postings, dead_postings;

  rag_bm25_dterm *dt;     /* add: the document's distinct terms */
  size_t nd, dtcap;
  uint32_t *dcells;       /* add: term id -> its place in dt + 1 (0: empty), at most half full */
  size_t dmask;           /* dcells' size - 1, or 0 before the first add */
  uint64_t doclen;

  rag_bm25_qterm *qt; /* query: its distinct terms */
  size_t nq, qcap;
  uint32_t *qcells; /* query: term id -> its place in qt + 1 (0: empty), at most half full */
  size_t qmask;     /* qcells' size - 1, or 0 before the first query */
  char *qtext;
  size_t qtlen, qtcap;
  int keep_unknown;

  double *acc; /* search scratch, by document number */
  uint32_t *seen, *allow;
  uint32_t *touched;
  size_t scap;
  uint32_t epoch;
  rag_hit *hits;
  size_t hcap;
  rag_bm25_term *ex;
  size_t excap;
};

/*
** An entry of a dictionary used in place (rag_bm25_file.c has the grammar):
** pool:u32 post:u64 df:u32, the offsets of the term's bytes in the pool and
** of its list in POST; term i spans entries i and i + 1.
*/
#define RAG_BM25_VENTRY 16u

static inline uint32_t rag_bm25_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t rag_bm25_le64(const uint8_t *p) {
  return rag_bm25_le32(p) | (uint64_t)rag_bm25_le32(p + 4) << 32;
}

/* What searching needs of a term, wherever the dictionary is. */
typedef struct rag_bm25_tinfo {
  const char *s; /* its bytes */
  const uint8_t *post;
  uint32_t len, plen, df;
} rag_bm25_tinfo;

static inline void rag_bm25_term_info(const rag_bm25 *b, uint32_t tid, rag_bm25_tinfo *x) {
  if (b->vterm != NULL) {
    const uint8_t *e = b->vterm + (size_t)tid * RAG_BM25_VENTRY;
    uint32_t s0 = rag_bm25_le32(e), s1 = rag_bm25_le32(e + RAG_BM25_VENTRY);
    uint64_t p0 = rag_bm25_le64(e + 4), p1 = rag_bm25_le64(e + RAG_BM25_VENTRY + 4);
    x->s = b->vpool + s0;
    x->len = s1 - s0;
    x->post = b->vpost + p0;
    x->plen = (uint32_t)(p1 - p0);
    x->df = rag_bm25_le32(e + 12);
  } else {
    const rag_bm25_term_entry *t = &b->terms[tid];
    x->s = b->pool + t->off;
    x->len = t->len;
    x->post = t->post;
    x->plen = t->plen;
    x->df = t->df;
  }
}

/* Decodes a varint the index wrote itself (in memory, trusted). */
static inline const uint8_t *rag_bm25_get_varint(const uint8_t *p, uint64_t *v) {
  uint64_t x = 0;
  int shift = 0;
  while (*p & 128) {
    x |= (uint64_t)(*p++ & 127) << shift;
    shift += 7;
  }
  *v = x | ((uint64_t)*p++ << shift);
  return p;
}

/* One posting: the document after `*next` by the gap, and its tf. */
static inline const uint8_t *rag_bm25_get_posting(const uint8_t *p, uint32_t *next,
                                                  uint32_t *doc, uint32_t *tf) {
  uint64_t v, t = 1;
  if (*p < 128) {
    v = *p++;
  } else {
    p = rag_bm25_get_varint(p, &v);
  }
  if (!(v & 1)) p = rag_bm25_get_varint(p, &t);
  *doc = *next + (uint32_t)(v >> 1);
  *next = *doc + 1;
  *tf = (uint32_t)t;
  return p;
}

/* Whether the parameters (not the analyzer options) are in range. */
int rag_bm25_params_ok(const rag_bm25_opts *o);

/* The id of the term of n bytes at s, whose rag_fnv32 is h, or RAG_BM25_NONE. */
uint32_t rag_bm25_term_find(const rag_bm25 *b, const char *s, size_t n, uint32_t h);

/* Adds a term not in the dictionary, with an empty list, as *tid.
** RAG_ENOMEM, RAG_ETOOBIG (2^32 - 1 terms or term bytes). */
int rag_bm25_term_insert(rag_bm25 *b, const char *s, size_t n, uint32_t h, uint32_t *tid);

/* Copies a dictionary used in place into terms, tslots and pool (the lists
** stay borrowed); a no-op for any other. RAG_ENOMEM: nothing changed. */
int rag_bm25_own_terms(rag_bm25 *b);

/* Room for nterms terms of `bytes` bytes in all, for a load. RAG_ENOMEM. */
int rag_bm25_terms_reserve(rag_bm25 *b, size_t nterms, size_t bytes);

/* Renumbers the live documents 0..nlive-1, dropping every dead posting
** and the terms no live document has. RAG_ENOMEM: nothing changed. */
int rag_bm25_renumber(rag_bm25 *b);

#endif
