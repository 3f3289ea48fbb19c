/*
** rag_bm25.c: the BM25 index. Terms live in an open-addressing dictionary;
** each has a posting list of (gap, tf) varints over dense document numbers.
** Each document keeps its id and the ids of its terms (a forward list), so
** removing it costs its own size: its postings are marked dead through its
** length (DEAD) and dropped in place once a list holds more dead than live
** ones; document numbers are renumbered once most of them are dead.
**
** File format (all integers little-endian; varint = LEB128, at most 10 bytes):
**
**   file    = header section{5}
**   header  = magic "RAGBM25\0" version:u32 nsections:u32 size:u64 crc:u32
**             (size = the file's length; crc = CRC-32 of the 24 bytes before it)
**   section = tag:4 length:u64 payload[length] crc:u32
**             (crc = CRC-32 of tag, length and payload)
**   sections, in this order:
**     "PARM"  variant:u8 k1:f64 b:f64 delta:f64
**     "ANLZ"  lang:str stem:u8 lowercase:u8 cjk:u8 stopwords:u8 nwords:varint str{nwords}
**     "DOCS"  ndocs:varint (id:str dl:varint){ndocs}
**     "TERM"  nterms:varint (term:str df:varint plen:varint){nterms}
**     "POST"  the posting bytes of every term in TERM order, plen each
**   str     = len:varint bytes[len]
**   posting = varint(gap << 1 | 1) when tf = 1, else varint(gap << 1) varint(tf),
**             where gap = doc - (previous doc + 1), the first previous doc being -1
**
** Version 1. A file is loaded only when every checksum and every count
** agrees: df equals the list's length, documents increase and exist, the
** term frequencies of each document add up to its length, ids and terms are
** unique.
*/
#include "rag_bm25.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rag_file.h"
#include "rag_fnv.h"
#include "rag_hash.h"
#include "rag_probe.h"

/* explain must repeat search's arithmetic exactly: no fused multiply-add. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define DEAD UINT32_MAX /* dl of a removed document */
#define NONE UINT32_MAX /* no such term or document */
#define MAX_DOCS (UINT32_MAX - 1u)
#define POSTING_MAX 10 /* bytes of one posting at most */

static const unsigned char MAGIC[8] = {'R', 'A', 'G', 'B', 'M', '2', '5', 0};
#define FORMAT_VERSION 1u
#define HEADER_SIZE RAG_FILE_HEADER
#define NSECTIONS 5u

typedef struct term {
  uint8_t *post;       /* the posting list */
  uint32_t plen, pcap; /* its bytes, used and allocated */
  uint32_t off, len;   /* the term's bytes in the pool */
  uint32_t hash;
  uint32_t df;   /* live documents in the list */
  uint32_t dead; /* postings of removed documents in the list */
  uint32_t next; /* the document number after the last posting's */
  uint32_t mark; /* == stamp while an add or a query is counting it */
  uint32_t slot; /* its entry in that count */
} term;

typedef struct doc {
  uint8_t *blob; /* id bytes, then the term ids as varints; NULL once removed */
  uint32_t idlen, fwdlen, hash;
} doc;

typedef struct dterm { /* a term of the document being added */
  uint32_t tid, tf;
} dterm;

typedef struct qterm { /* a distinct query term */
  uint32_t tid;        /* NONE: not in the dictionary */
  uint32_t qtf;
  size_t off, len; /* its bytes in qtext (unknown terms, explain only) */
} qterm;

struct rag_bm25 {
  rag_bm25_opts o; /* o.analyzer points into the analyzer's own copy */
  rag_analyzer *an;

  term *terms; /* the dictionary: term id -> term */
  size_t nterms, tcap, live_terms;
  uint32_t *tslots; /* hash table of term id + 1 (0 = empty) */
  size_t tmask;
  char *pool; /* term bytes */
  size_t poollen, poolcap;

  doc *docs;    /* document number -> document */
  uint32_t *dl; /* document number -> length in terms, or DEAD */
  size_t ndocs, dcap, nlive, ndead;
  uint32_t *islots; /* hash table of document number + 1 (0 = empty) */
  size_t imask;
  uint64_t total; /* sum of the lengths of live documents */
  size_t live_postings, dead_postings;

  uint32_t stamp; /* marks terms counted by the current add or query */
  dterm *dt;      /* add: the document's distinct terms */
  size_t nd, dtcap;
  uint64_t doclen;

  qterm *qt; /* query: its distinct terms */
  size_t nq, qcap;
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

/* {====== Small tools ======} */

/* Decodes a varint the index wrote itself (in memory, trusted). */
static inline const uint8_t *get_varint(const uint8_t *p, uint64_t *v) {
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
static inline const uint8_t *get_posting(const uint8_t *p, uint32_t *next, uint32_t *doc,
                                  uint32_t *tf) {
  uint64_t v, t = 1;
  if (*p < 128) {
    v = *p++;
  } else {
    p = get_varint(p, &v);
  }
  if (!(v & 1)) p = get_varint(p, &t);
  *doc = *next + (uint32_t)(v >> 1);
  *next = *doc + 1;
  *tf = (uint32_t)t;
  return p;
}

static size_t put_posting(uint8_t *p, uint32_t gap, uint32_t tf) {
  uint64_t g = (uint64_t)gap << 1;
  size_t n;
  if (tf == 1) return rag_put_varint(p, g | 1);
  n = rag_put_varint(p, g);
  return n + rag_put_varint(p + n, tf);
}

/* Makes room for `extra` more bytes in t's list; 0 when out of memory. */
static int reserve_post(term *t, size_t extra) {
  size_t cap = t->pcap, need = (size_t)t->plen + extra;
  uint8_t *p;
  if (need <= cap) return 1;
  if (need > UINT32_MAX) return 0;
  cap = cap < 8 ? 16 : cap + cap / 2;
  if (cap < need) cap = need;
  if (cap > UINT32_MAX) cap = UINT32_MAX;
  p = (uint8_t *)rag_realloc(t->post, cap);
  if (p == NULL) return 0;
  t->post = p;
  t->pcap = (uint32_t)cap;
  return 1;
}

static const char *term_text(const rag_bm25 *b, const term *t) {
  return b->pool + t->off;
}

/* {====== The term dictionary ======} */

/* The key of term tid, for rag_probe_find. */
static const void *term_key(const void *ud, uint32_t tid, size_t *len, uint32_t *hash) {
  const rag_bm25 *b = (const rag_bm25 *)ud;
  *len = b->terms[tid].len;
  *hash = b->terms[tid].hash;
  return term_text(b, &b->terms[tid]);
}

static uint32_t term_find(const rag_bm25 *b, const char *s, size_t n, uint32_t h) {
  uint32_t v = b->tslots[rag_probe_find(b->tslots, b->tmask, s, n, h, term_key, b)];
  return v == 0 ? NONE : v - 1;
}

static void tslot_put(rag_bm25 *b, uint32_t tid) {
  b->tslots[rag_probe_holding(b->tslots, b->tmask, b->terms[tid].hash, 0)] = tid + 1;
}

/* Doubles the term table when it would pass half full; 0 when out of memory. */
static int tslots_fit(rag_bm25 *b, size_t n) {
  size_t cap = b->tmask + 1, i;
  uint32_t *s;
  if (n <= cap / 2) return 1;
  while (n > cap / 2) cap *= 2;
  if (RAG_MUL_OVERFLOWS(cap, sizeof *s) || (s = (uint32_t *)rag_malloc(cap * sizeof *s)) == NULL)
    return 0;
  memset(s, 0, cap * sizeof *s);
  rag_free(b->tslots);
  b->tslots = s;
  b->tmask = cap - 1;
  for (i = 0; i < b->nterms; i++) tslot_put(b, (uint32_t)i);
  return 1;
}

/* Adds a new term (not in the dictionary) with an empty list. */
static int term_insert(rag_bm25 *b, const char *s, size_t n, uint32_t h, uint32_t *tid) {
  term *t;
  if (b->nterms >= NONE - 1 || n > UINT32_MAX || b->poollen + n > UINT32_MAX) return RAG_ETOOBIG;
  if (b->nterms == b->tcap) {
    term *v = (term *)rag_grow(b->terms, &b->tcap, b->nterms + 1, sizeof *v);
    if (v == NULL) return RAG_ENOMEM;
    b->terms = v;
  }
  if (b->poollen + n > b->poolcap) {
    char *p = (char *)rag_grow(b->pool, &b->poolcap, b->poollen + n, 1);
    if (p == NULL) return RAG_ENOMEM;
    b->pool = p;
  }
  if (!tslots_fit(b, b->nterms + 1)) return RAG_ENOMEM;
  t = &b->terms[b->nterms];
  memset(t, 0, sizeof *t);
  t->off = (uint32_t)b->poollen;
  t->len = (uint32_t)n;
  t->hash = h;
  memcpy(b->pool + b->poollen, s, n);
  b->poollen += n;
  *tid = (uint32_t)b->nterms++;
  tslot_put(b, *tid);
  return RAG_OK;
}

/* {====== The id table ======} */

static const char *doc_id(const rag_bm25 *b, uint32_t d) {
  return (const char *)b->docs[d].blob;
}

/* The key of document d, for rag_probe_find. */
static const void *doc_key(const void *ud, uint32_t d, size_t *len, uint32_t *hash) {
  const rag_bm25 *b = (const rag_bm25 *)ud;
  *len = b->docs[d].idlen;
  *hash = b->docs[d].hash;
  return b->docs[d].blob;
}

/* The slot holding `id`, or the empty slot where it would go. */
static size_t id_slot(const rag_bm25 *b, const char *id, size_t n, uint32_t h) {
  return rag_probe_find(b->islots, b->imask, id, n, h, doc_key, b);
}

static uint32_t id_find(const rag_bm25 *b, const char *id, size_t n) {
  uint32_t v = b->islots[id_slot(b, id, n, rag_fnv32(id, n))];
  return v == 0 ? NONE : v - 1;
}

/* Empties slot i, moving later entries of its run back (linear probing). */
static void id_delete(rag_bm25 *b, size_t i) {
  size_t j = i;
  for (;;) {
    size_t k;
    j = (j + 1) & b->imask;
    if (b->islots[j] == 0) break;
    k = b->docs[b->islots[j] - 1].hash & b->imask;
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
    b->islots[i] = b->islots[j];
    i = j;
  }
  b->islots[i] = 0;
}

static void id_rehash(rag_bm25 *b) {
  size_t d;
  memset(b->islots, 0, (b->imask + 1) * sizeof *b->islots);
  for (d = 0; d < b->ndocs; d++) {
    if (b->dl[d] == DEAD) continue;
    b->islots[rag_probe_holding(b->islots, b->imask, b->docs[d].hash, 0)] = (uint32_t)d + 1;
  }
}

/* Grows the id table so that n ids keep it at most half full. */
static int islots_fit(rag_bm25 *b, size_t n) {
  size_t cap = b->imask + 1;
  uint32_t *s;
  if (n <= cap / 2) return 1;
  while (n > cap / 2) cap *= 2;
  if (RAG_MUL_OVERFLOWS(cap, sizeof *s) || (s = (uint32_t *)rag_malloc(cap * sizeof *s)) == NULL)
    return 0;
  rag_free(b->islots);
  b->islots = s;
  b->imask = cap - 1;
  id_rehash(b);
  return 1;
}

/* {====== Creation ======} */

void rag_bm25_defaults(rag_bm25_opts *o) {
  memset(o, 0, sizeof *o);
  o->k1 = 1.2;
  o->b = 0.75;
  o->delta = 0.5;
  o->variant = RAG_BM25_LUCENE;
  rag_analyzer_defaults(&o->analyzer);
}

double rag_bm25_default_delta(rag_bm25_variant v) {
  return v == RAG_BM25_PLUS ? 1.0 : 0.5;
}

static int params_ok(const rag_bm25_opts *o) {
  return (unsigned)o->variant < RAG_BM25_NVARIANTS && o->k1 >= 0 && o->k1 <= RAG_BM25_MAX_PARAM &&
         o->b >= 0 && o->b <= 1 && o->delta >= 0 && o->delta <= RAG_BM25_MAX_PARAM;
}

int rag_bm25_new(const rag_bm25_opts *o, rag_bm25 **out) {
  rag_bm25 *b;
  int rc;
  *out = NULL;
  if (!params_ok(o)) return RAG_EINVAL;
  b = (rag_bm25 *)rag_malloc(sizeof *b);
  if (b == NULL) return RAG_ENOMEM;
  memset(b, 0, sizeof *b);
  b->o = *o;
  rc = rag_analyzer_new(&o->analyzer, &b->an);
  if (rc != RAG_OK) {
    rag_free(b);
    return rc;
  }
  b->o.analyzer = *rag_analyzer_config(b->an);
  b->tslots = (uint32_t *)rag_malloc(64 * sizeof *b->tslots);
  b->islots = (uint32_t *)rag_malloc(64 * sizeof *b->islots);
  if (b->tslots == NULL || b->islots == NULL) {
    rag_bm25_free(b);
    return RAG_ENOMEM;
  }
  memset(b->tslots, 0, 64 * sizeof *b->tslots);
  memset(b->islots, 0, 64 * sizeof *b->islots);
  b->tmask = b->imask = 63;
  *out = b;
  return RAG_OK;
}

void rag_bm25_free(rag_bm25 *b) {
  size_t i;
  if (b == NULL) return;
  for (i = 0; i < b->nterms; i++) rag_free(b->terms[i].post);
  for (i = 0; i < b->ndocs; i++) rag_free(b->docs[i].blob);
  rag_free(b->terms);
  rag_free(b->tslots);
  rag_free(b->pool);
  rag_free(b->docs);
  rag_free(b->dl);
  rag_free(b->islots);
  rag_free(b->dt);
  rag_free(b->qt);
  rag_free(b->qtext);
  rag_free(b->acc);
  rag_free(b->seen);
  rag_free(b->allow);
  rag_free(b->touched);
  rag_free(b->hits);
  rag_free(b->ex);
  rag_analyzer_free(b->an);
  rag_free(b);
}

const rag_bm25_opts *rag_bm25_config(const rag_bm25 *b) {
  return &b->o;
}

size_t rag_bm25_count(const rag_bm25 *b) {
  return b->nlive;
}

/* A fresh stamp for counting terms; clears old marks when it wraps. */
static void next_stamp(rag_bm25 *b) {
  if (++b->stamp == 0) {
    size_t i;
    for (i = 0; i < b->nterms; i++) b->terms[i].mark = 0;
    b->stamp = 1;
  }
}

/* {====== Compaction ======} */

/* Drops the postings of removed documents from t's list, in place: a
** posting never grows by losing its predecessors, so writes trail reads. */
static void compact_list(rag_bm25 *b, term *t) {
  const uint8_t *r = t->post, *e = t->post + t->plen;
  uint8_t *w = t->post;
  uint32_t in = 0, out = 0;
  while (r < e) {
    uint32_t d, tf;
    r = get_posting(r, &in, &d, &tf);
    if (b->dl[d] == DEAD) continue;
    w += put_posting(w, d - out, tf);
    out = d + 1;
  }
  b->dead_postings -= t->dead;
  t->dead = 0;
  t->plen = (uint32_t)(w - t->post);
  t->next = out;
}

/* Drops the terms no live document has (their lists are empty once
** renumbered), renumbering the others in order: the pool, the forward lists
** and the table shrink in place. Skipped when the map cannot be allocated. */
static void compact_terms(rag_bm25 *b) {
  uint32_t *map, n = 0;
  size_t i, d, pool = 0;
  if (b->live_terms == b->nterms) return;
  map = (uint32_t *)rag_malloc(b->nterms * sizeof *map + 1);
  if (map == NULL) return;
  for (i = 0; i < b->nterms; i++) {
    term t = b->terms[i];
    if (t.df == 0) {
      rag_free(t.post);
      map[i] = NONE;
      continue;
    }
    memmove(b->pool + pool, b->pool + t.off, t.len); /* offsets grow with ids */
    t.off = (uint32_t)pool;
    pool += t.len;
    map[i] = n;
    b->terms[n++] = t;
  }
  b->nterms = n;
  b->poollen = pool;
  for (d = 0; d < b->ndocs; d++) { /* new ids are never larger: rewrite in place */
    doc *x = &b->docs[d];
    const uint8_t *r;
    uint8_t *w, *e;
    if (x->blob == NULL) continue;
    r = w = x->blob + x->idlen;
    e = w + x->fwdlen;
    while (r < e) {
      uint64_t tid;
      r = get_varint(r, &tid);
      w += rag_put_varint(w, map[tid]);
    }
    x->fwdlen = (uint32_t)(w - (x->blob + x->idlen));
  }
  memset(b->tslots, 0, (b->tmask + 1) * sizeof *b->tslots);
  for (i = 0; i < b->nterms; i++) tslot_put(b, (uint32_t)i);
  rag_free(map);
}

/* Renumbers the live documents 0..nlive-1, dropping every dead posting and
** then every term left without documents. */
static int renumber(rag_bm25 *b) {
  uint32_t *map, n = 0;
  size_t d, i;
  if (b->ndead == 0) return RAG_OK;
  if (RAG_MUL_OVERFLOWS(b->ndocs, sizeof *map)) return RAG_ENOMEM;
  map = (uint32_t *)rag_malloc(b->ndocs * sizeof *map + 1);
  if (map == NULL) return RAG_ENOMEM;
  for (d = 0; d < b->ndocs; d++) map[d] = b->dl[d] == DEAD ? NONE : n++;
  for (i = 0; i < b->nterms; i++) {
    term *t = &b->terms[i];
    const uint8_t *r = t->post, *e = r;
    uint8_t *w = t->post;
    uint32_t in = 0, out = 0;
    if (t->plen == 0) continue;
    e = r + t->plen;
    while (r < e) {
      uint32_t od, tf;
      r = get_posting(r, &in, &od, &tf);
      if (map[od] == NONE) continue;
      w += put_posting(w, map[od] - out, tf);
      out = map[od] + 1;
    }
    t->plen = (uint32_t)(w - t->post);
    t->next = out;
    t->dead = 0;
    if (t->plen == 0 && t->pcap > 0) { /* a term of removed documents only */
      rag_free(t->post);
      t->post = NULL;
      t->pcap = 0;
    }
  }
  for (d = 0; d < b->ndocs; d++) {
    if (map[d] == NONE) continue;
    b->docs[map[d]] = b->docs[d];
    b->dl[map[d]] = b->dl[d];
  }
  rag_free(map);
  b->ndocs = n;
  b->ndead = 0;
  b->dead_postings = 0;
  id_rehash(b);
  compact_terms(b);
  return RAG_OK;
}

/* Takes document d out of the statistics; its postings turn dead. */
static void drop_doc(rag_bm25 *b, uint32_t d) {
  doc *x = &b->docs[d];
  const uint8_t *p = x->blob + x->idlen, *e = p + x->fwdlen;
  b->total -= b->dl[d];
  b->dl[d] = DEAD;
  while (p < e) {
    uint64_t tid;
    term *t;
    p = get_varint(p, &tid);
    t = &b->terms[tid];
    t->df--;
    t->dead++;
    b->live_postings--;
    b->dead_postings++;
    if (t->df == 0) b->live_terms--;
    if (t->dead >= 8 && t->dead > t->df) compact_list(b, t);
  }
  rag_free(x->blob);
  x->blob = NULL;
  b->nlive--;
  b->ndead++;
}

/* Renumbers once most document numbers are dead (never fails: skipped). */
static void maybe_renumber(rag_bm25 *b) {
  if (b->ndead > 64 && b->ndead > b->nlive) (void)renumber(b);
}

/* {====== Adding and removing ======} */

static int on_doc_term(void *ud, const char *s, size_t n, size_t start, size_t stop) {
  rag_bm25 *b = (rag_bm25 *)ud;
  uint32_t h = rag_fnv32(s, n), tid = term_find(b, s, n, h);
  term *t;
  (void)start;
  (void)stop;
  if (tid == NONE) {
    int rc = term_insert(b, s, n, h, &tid);
    if (rc != RAG_OK) return rc;
  }
  if (++b->doclen >= DEAD) return RAG_ETOOBIG;
  t = &b->terms[tid];
  if (t->mark == b->stamp) {
    b->dt[t->slot].tf++;
    return 0;
  }
  if (b->nd == b->dtcap) {
    dterm *v = (dterm *)rag_grow(b->dt, &b->dtcap, b->nd + 1, sizeof *v);
    if (v == NULL) return RAG_ENOMEM;
    b->dt = v;
  }
  t->mark = b->stamp;
  t->slot = (uint32_t)b->nd;
  b->dt[b->nd].tid = tid;
  b->dt[b->nd].tf = 1;
  b->nd++;
  return 0;
}

/* Room for one more document number. */
static int docs_fit(rag_bm25 *b) {
  size_t cap;
  if (b->ndocs < b->dcap) return 1;
  cap = b->dcap;
  {
    doc *v = (doc *)rag_grow(b->docs, &cap, b->ndocs + 1, sizeof *v);
    if (v == NULL) return 0;
    b->docs = v;
  }
  cap = b->dcap;
  {
    uint32_t *v = (uint32_t *)rag_grow(b->dl, &cap, b->ndocs + 1, sizeof *v);
    if (v == NULL) return 0;
    b->dl = v;
  }
  b->dcap = cap;
  return 1;
}

int rag_bm25_add(rag_bm25 *b, const char *id, size_t idlen, const char *text, size_t len,
                 size_t *errpos) {
  uint32_t h, d, old;
  size_t slot, i, fwd = 0;
  uint8_t *blob, *p;
  int rc;
  if (idlen >= UINT32_MAX) return RAG_ETOOBIG;
  if (b->ndocs >= MAX_DOCS) {
    if (renumber(b) != RAG_OK) return RAG_ENOMEM;
    if (b->ndocs >= MAX_DOCS) return RAG_ETOOBIG;
  }
  next_stamp(b);
  b->nd = 0;
  b->doclen = 0;
  rc = rag_analyzer_run(b->an, text, len, on_doc_term, b, errpos);
  if (rc != RAG_OK) return rc;

  /* Reserve everything first, so that the commit below cannot fail. */
  for (i = 0; i < b->nd; i++) fwd += rag_varint_len(b->dt[i].tid);
  if (fwd >= UINT32_MAX || idlen + fwd < idlen) return RAG_ETOOBIG;
  h = rag_fnv32(id, idlen);
  slot = id_slot(b, id, idlen, h);
  old = b->islots[slot] == 0 ? NONE : b->islots[slot] - 1;
  if (!docs_fit(b)) return RAG_ENOMEM;
  if (old == NONE && !islots_fit(b, b->nlive + 1)) return RAG_ENOMEM;
  for (i = 0; i < b->nd; i++)
    if (!reserve_post(&b->terms[b->dt[i].tid], POSTING_MAX)) return RAG_ENOMEM;
  blob = (uint8_t *)rag_malloc(idlen + fwd + 1);
  if (blob == NULL) return RAG_ENOMEM;

  /* Commit. */
  if (old != NONE) {
    drop_doc(b, old);
  } else {
    slot = id_slot(b, id, idlen, h); /* the table may have been rebuilt */
  }
  memcpy(blob, id, idlen);
  p = blob + idlen;
  d = (uint32_t)b->ndocs++;
  for (i = 0; i < b->nd; i++) {
    term *t = &b->terms[b->dt[i].tid];
    p += rag_put_varint(p, b->dt[i].tid);
    t->plen += (uint32_t)put_posting(t->post + t->plen, d - t->next, b->dt[i].tf);
    t->next = d + 1;
    if (t->df++ == 0) b->live_terms++;
  }
  b->docs[d].blob = blob;
  b->docs[d].idlen = (uint32_t)idlen;
  b->docs[d].fwdlen = (uint32_t)fwd;
  b->docs[d].hash = h;
  b->dl[d] = (uint32_t)b->doclen;
  b->islots[slot] = d + 1;
  b->total += b->doclen;
  b->live_postings += b->nd;
  b->nlive++;
  maybe_renumber(b);
  return RAG_OK;
}

void rag_bm25_remove(rag_bm25 *b, const char *id, size_t idlen, int *removed) {
  uint32_t h = rag_fnv32(id, idlen);
  size_t slot = id_slot(b, id, idlen, h);
  uint32_t d;
  *removed = 0;
  if (b->islots[slot] == 0) return;
  d = b->islots[slot] - 1;
  id_delete(b, slot);
  drop_doc(b, d);
  *removed = 1;
  maybe_renumber(b);
}

/* {====== Scoring ======} */

typedef struct scorer {
  rag_bm25_variant v;
  double k1, k1p1, delta;
  double omb, bavg; /* 1 - b and b / avgdl: length norm = omb + bavg * dl */
} scorer;

static void scorer_init(scorer *s, const rag_bm25 *b, double avgdl) {
  s->v = b->o.variant;
  s->k1 = b->o.k1;
  s->k1p1 = b->o.k1 + 1;
  s->delta = b->o.delta;
  s->omb = 1 - b->o.b;
  s->bavg = b->o.b / avgdl;
}

static double idf_of(rag_bm25_variant v, double df, double n) {
  double inner;
  switch (v) {
    case RAG_BM25_ROBERTSON:
      inner = (n - df + 0.5) / (df + 0.5);
      return log(inner < 1 ? 1 : inner);
    case RAG_BM25_ATIRE: return log(n / df);
    case RAG_BM25_L: return log((n + 1) / (df + 0.5));
    case RAG_BM25_PLUS: return log((n + 1) / df);
    default: return log(1 + (n - df + 0.5) / (df + 0.5));
  }
}

/* The term-frequency part for tf >= 1 in a document of dl terms; `v` is a
** constant where search inlines it, one loop per variant. */
static inline double tfc_v(rag_bm25_variant v, const scorer *s, double tf, double dl) {
  double norm = s->omb + s->bavg * dl, c;
  switch (v) {
    case RAG_BM25_ATIRE: return tf * s->k1p1 / (tf + s->k1 * norm);
    case RAG_BM25_L:
      c = tf / norm;
      return s->k1p1 * (c + s->delta) / (s->k1 + c + s->delta);
    case RAG_BM25_PLUS: return s->k1p1 * tf / (s->k1 * norm + tf) + s->delta;
    default: return tf / (s->k1 * norm + tf);
  }
}

static double tfc(const scorer *s, double tf, double dl) {
  return tfc_v(s->v, s, tf, dl);
}

/* The term-frequency part of a query term a document lacks (tf = 0). */
static double tfc0(const scorer *s) {
  switch (s->v) {
    case RAG_BM25_L: /* k1 = delta = 0: the limit, 1, as for every tf */
      return s->k1 + s->delta > 0 ? s->k1p1 * s->delta / (s->k1 + s->delta) : 1;
    case RAG_BM25_PLUS: return s->delta;
    default: return 0;
  }
}

/* {====== Queries ======} */

static int on_query_term(void *ud, const char *s, size_t n, size_t start, size_t stop) {
  rag_bm25 *b = (rag_bm25 *)ud;
  uint32_t tid = term_find(b, s, n, rag_fnv32(s, n));
  size_t i, off = 0;
  (void)start;
  (void)stop;
  if (tid != NONE && b->terms[tid].mark == b->stamp) {
    b->qt[b->terms[tid].slot].qtf++;
    return 0;
  }
  if (tid == NONE) {
    if (!b->keep_unknown) return 0;
    for (i = 0; i < b->nq; i++) {
      qterm *q = &b->qt[i];
      if (q->tid == NONE && q->len == n && memcmp(b->qtext + q->off, s, n) == 0) {
        q->qtf++;
        return 0;
      }
    }
    if (b->qtlen + n > b->qtcap) {
      char *v = (char *)rag_grow(b->qtext, &b->qtcap, b->qtlen + n, 1);
      if (v == NULL) return RAG_ENOMEM;
      b->qtext = v;
    }
    memcpy(b->qtext + b->qtlen, s, n);
    off = b->qtlen;
    b->qtlen += n;
  }
  if (b->nq == b->qcap) {
    qterm *v = (qterm *)rag_grow(b->qt, &b->qcap, b->nq + 1, sizeof *v);
    if (v == NULL) return RAG_ENOMEM;
    b->qt = v;
  }
  b->qt[b->nq].tid = tid;
  b->qt[b->nq].qtf = 1;
  b->qt[b->nq].off = off;
  b->qt[b->nq].len = n;
  if (tid != NONE) {
    b->terms[tid].mark = b->stamp;
    b->terms[tid].slot = (uint32_t)b->nq;
  }
  b->nq++;
  return 0;
}

/* Analyzes a query into its distinct terms, in order of first occurrence. */
static int parse_query(rag_bm25 *b, const char *q, size_t len, int keep_unknown,
                       size_t *errpos) {
  next_stamp(b);
  b->nq = 0;
  b->qtlen = 0;
  b->keep_unknown = keep_unknown;
  return rag_analyzer_run(b->an, q, len, on_query_term, b, errpos);
}

/* Scratch arrays for every document number. */
static int scratch_fit(rag_bm25 *b) {
  size_t cap = b->dcap, old = b->scap;
  void *v;
  if (old >= b->ndocs && old > 0) return 1;
  if (cap < 64) cap = 64;
  if (RAG_MUL_OVERFLOWS(cap, sizeof(double))) return 0;
  if ((v = rag_realloc(b->acc, cap * sizeof(double))) == NULL) return 0;
  b->acc = (double *)v;
  if ((v = rag_realloc(b->seen, cap * sizeof(uint32_t))) == NULL) return 0;
  b->seen = (uint32_t *)v;
  if ((v = rag_realloc(b->allow, cap * sizeof(uint32_t))) == NULL) return 0;
  b->allow = (uint32_t *)v;
  if ((v = rag_realloc(b->touched, cap * sizeof(uint32_t))) == NULL) return 0;
  b->touched = (uint32_t *)v;
  memset(b->seen + old, 0, (cap - old) * sizeof(uint32_t));
  memset(b->allow + old, 0, (cap - old) * sizeof(uint32_t));
  b->scap = cap;
  return 1;
}

static void next_epoch(rag_bm25 *b) {
  if (++b->epoch == 0) {
    memset(b->seen, 0, b->scap * sizeof(uint32_t));
    memset(b->allow, 0, b->scap * sizeof(uint32_t));
    b->epoch = 1;
  }
}

static int id_cmp(const rag_bm25 *b, uint32_t x, uint32_t y) {
  size_t nx = b->docs[x].idlen, ny = b->docs[y].idlen;
  int c = memcmp(doc_id(b, x), doc_id(b, y), nx < ny ? nx : ny);
  if (c != 0) return c;
  return nx < ny ? -1 : nx > ny;
}

static int better(const rag_bm25 *b, const rag_hit *x, const rag_hit *y) {
  if (x->score != y->score) return x->score > y->score;
  return id_cmp(b, x->id, y->id) < 0;
}

/* A heap whose root is its worst hit. */
static void sift_down(const rag_bm25 *b, rag_hit *h, size_t n, size_t i) {
  for (;;) {
    size_t c = 2 * i + 1;
    rag_hit tmp;
    if (c >= n) return;
    if (c + 1 < n && better(b, &h[c], &h[c + 1])) c++;
    if (!better(b, &h[i], &h[c])) return;
    tmp = h[i];
    h[i] = h[c];
    h[c] = tmp;
    i = c;
  }
}

static void sift_up(const rag_bm25 *b, rag_hit *h, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    rag_hit tmp;
    if (!better(b, &h[p], &h[i])) return;
    tmp = h[i];
    h[i] = h[p];
    h[p] = tmp;
    i = p;
  }
}

/* The best k of the touched documents into b->hits, best first. */
static size_t select_top(rag_bm25 *b, size_t nt, size_t k) {
  rag_hit *h = b->hits;
  size_t n = 0, i;
  for (i = 0; i < nt; i++) {
    rag_hit x;
    x.id = b->touched[i];
    x.score = b->acc[x.id];
    if (n < k) {
      h[n] = x;
      sift_up(b, h, n++);
    } else if (x.score >= h[0].score && better(b, &x, &h[0])) {
      h[0] = x;
      sift_down(b, h, n, 0);
    }
  }
  for (i = n; i > 1; i--) { /* heap sort: the worst goes last */
    rag_hit tmp = h[0];
    h[0] = h[i - 1];
    h[i - 1] = tmp;
    sift_down(b, h, i - 1, 0);
  }
  return n;
}

int rag_bm25_search(rag_bm25 *b, const char *q, size_t len, size_t k,
                    const rag_bm25_filter *filter, const rag_hit **hits, size_t *n,
                    size_t *errpos) {
  scorer sc;
  double nd, c = 0, w0 = 0;
  size_t i, nt = 0;
  int rc;
  *hits = NULL;
  *n = 0;
  rc = parse_query(b, q, len, 0, errpos);
  if (rc != RAG_OK) return rc;
  if (b->nlive == 0 || k == 0 || b->nq == 0) return RAG_OK;
  if (!scratch_fit(b)) return RAG_ENOMEM;
  if (k > b->nlive) k = b->nlive;
  if (k > b->hcap) {
    rag_hit *v = (rag_hit *)rag_grow(b->hits, &b->hcap, k, sizeof *v);
    if (v == NULL) return RAG_ENOMEM;
    b->hits = v;
  }
  next_epoch(b);
  if (filter != NULL) {
    size_t allowed = 0;
    for (i = 0; i < filter->n; i++) {
      uint32_t d = id_find(b, filter->ids[i], filter->lens[i]);
      if (d != NONE) {
        b->allow[d] = b->epoch;
        allowed++;
      }
    }
    if (allowed == 0) return RAG_OK;
  }
  nd = (double)b->nlive;
  scorer_init(&sc, b, (double)b->total / nd);
  for (i = 0; i < b->nq; i++) {
    const term *t;
    const uint8_t *p, *e;
    uint32_t next = 0;
    double w;
    if (b->qt[i].tid == NONE) continue;
    t = &b->terms[b->qt[i].tid];
    if (t->df == 0) continue;
    w = b->qt[i].qtf * idf_of(sc.v, t->df, nd);
    w0 = w * tfc0(&sc);
    c += w0;
#define ACCUMULATE(V)                                                                  \
  for (p = t->post, e = p + t->plen; p < e;) {                                        \
    uint32_t d, tf;                                                                    \
    double x;                                                                          \
    p = get_posting(p, &next, &d, &tf);                                                \
    if (b->dl[d] == DEAD || (filter != NULL && b->allow[d] != b->epoch)) continue;     \
    x = w * tfc_v(V, &sc, tf, b->dl[d]) - w0;                                          \
    if (b->seen[d] != b->epoch) {                                                      \
      b->seen[d] = b->epoch;                                                           \
      b->acc[d] = x;                                                                   \
      b->touched[nt++] = d;                                                            \
    } else {                                                                           \
      b->acc[d] += x;                                                                  \
    }                                                                                  \
  }
    switch (sc.v) {
      case RAG_BM25_ROBERTSON: ACCUMULATE(RAG_BM25_ROBERTSON) break;
      case RAG_BM25_ATIRE: ACCUMULATE(RAG_BM25_ATIRE) break;
      case RAG_BM25_L: ACCUMULATE(RAG_BM25_L) break;
      case RAG_BM25_PLUS: ACCUMULATE(RAG_BM25_PLUS) break;
      default: ACCUMULATE(RAG_BM25_LUCENE) break;
    }
#undef ACCUMULATE
  }
  if (c != 0)
    for (i = 0; i < nt; i++) b->acc[b->touched[i]] += c;
  *n = select_top(b, nt, k);
  *hits = b->hits;
  return RAG_OK;
}

const char *rag_bm25_id(const rag_bm25 *b, uint32_t h, size_t *len) {
  *len = b->docs[h].idlen;
  return doc_id(b, h);
}

/* The tf of document d in t's list (0 when absent). */
static uint32_t tf_of(const term *t, uint32_t d) {
  const uint8_t *p = t->post, *e = t->plen ? p + t->plen : p;
  uint32_t next = 0;
  while (p < e) {
    uint32_t x, tf;
    p = get_posting(p, &next, &x, &tf);
    if (x == d) return tf;
    if (x > d) break;
  }
  return 0;
}

int rag_bm25_explain_doc(rag_bm25 *b, const char *q, size_t len, const char *id,
                         size_t idlen, rag_bm25_explain *out, int *found, size_t *errpos) {
  scorer sc;
  double nd, acc = 0, c = 0;
  uint32_t d;
  size_t i;
  int rc, any = 0;
  memset(out, 0, sizeof *out);
  *found = 0;
  rc = parse_query(b, q, len, 1, errpos);
  if (rc != RAG_OK) return rc;
  d = id_find(b, id, idlen);
  if (d == NONE) return RAG_OK;
  *found = 1;
  if (b->nq > b->excap) {
    rag_bm25_term *v = (rag_bm25_term *)rag_grow(b->ex, &b->excap, b->nq, sizeof *v);
    if (v == NULL) return RAG_ENOMEM;
    b->ex = v;
  }
  nd = (double)b->nlive;
  scorer_init(&sc, b, (double)b->total / nd);
  for (i = 0; i < b->nq; i++) {
    const qterm *qt = &b->qt[i];
    rag_bm25_term *x = &b->ex[i];
    memset(x, 0, sizeof *x);
    x->qtf = qt->qtf;
    if (qt->tid == NONE) {
      x->term = b->qtext + qt->off;
      x->len = qt->len;
      continue;
    }
    {
      const term *t = &b->terms[qt->tid];
      double w, w0;
      x->term = term_text(b, t);
      x->len = t->len;
      x->df = t->df;
      if (t->df == 0) continue;
      x->idf = idf_of(sc.v, t->df, nd);
      w = qt->qtf * x->idf;
      w0 = w * tfc0(&sc);
      c += w0;
      x->tf = tf_of(t, d);
      if (x->tf == 0) {
        x->weight = w0;
        continue;
      }
      x->weight = w * tfc(&sc, x->tf, b->dl[d]);
      if (any)
        acc += x->weight - w0;
      else
        acc = x->weight - w0;
      any = 1;
    }
  }
  out->terms = b->ex;
  out->nterms = b->nq;
  out->score = c != 0 ? acc + c : acc;
  out->dl = b->dl[d];
  out->avgdl = (double)b->total / nd;
  out->docs = b->nlive;
  return RAG_OK;
}

/* {====== Statistics ======} */

void rag_bm25_stats_get(const rag_bm25 *b, rag_bm25_stats *s) {
  size_t i, bytes = sizeof *b, pb = 0;
  for (i = 0; i < b->nterms; i++) pb += b->terms[i].pcap;
  for (i = 0; i < b->ndocs; i++)
    if (b->docs[i].blob != NULL) bytes += (size_t)b->docs[i].idlen + b->docs[i].fwdlen + 1;
  bytes += pb + b->tcap * sizeof(term) + (b->tmask + 1) * sizeof(uint32_t) + b->poolcap;
  bytes += b->dcap * (sizeof(doc) + sizeof(uint32_t)) + (b->imask + 1) * sizeof(uint32_t);
  bytes += b->dtcap * sizeof(dterm) + b->qcap * sizeof(qterm) + b->qtcap;
  bytes += b->scap * (sizeof(double) + 3 * sizeof(uint32_t)) + b->hcap * sizeof(rag_hit);
  bytes += b->excap * sizeof(rag_bm25_term);
  s->docs = b->nlive;
  s->terms = b->live_terms;
  s->postings = b->live_postings;
  s->dead = b->dead_postings;
  s->bytes = 0;
  for (i = 0; i < b->nterms; i++) s->bytes += b->terms[i].plen;
  s->memory = bytes;
  s->avgdl = b->nlive ? (double)b->total / (double)b->nlive : 0;
}

/* {====== Saving ======} */

/* Writes the whole file; the index has no dead documents (renumbered). */
static void write_index(const rag_bm25 *b, rag_writer *w) {
  const rag_analyzer_opts *a = &b->o.analyzer;
  uint64_t len[NSECTIONS], size = HEADER_SIZE;
  size_t i;
  len[0] = 1 + 3 * 8;
  len[1] = rag_str_size(strlen(a->lang)) + 4 + rag_varint_len(a->nwords);
  for (i = 0; i < a->nwords; i++) len[1] += rag_str_size(strlen(a->words[i]));
  len[2] = rag_varint_len(b->ndocs);
  for (i = 0; i < b->ndocs; i++) len[2] += rag_str_size(b->docs[i].idlen) + rag_varint_len(b->dl[i]);
  len[3] = rag_varint_len(b->live_terms);
  len[4] = 0;
  for (i = 0; i < b->nterms; i++) {
    const term *t = &b->terms[i];
    if (t->df == 0) continue;
    len[3] += rag_str_size(t->len) + rag_varint_len(t->df) + rag_varint_len(t->plen);
    len[4] += t->plen;
  }
  for (i = 0; i < NSECTIONS; i++) size += 16 + len[i];

  rag_w_header(w, MAGIC, FORMAT_VERSION, NSECTIONS, size);

  rag_w_begin(w, "PARM", len[0]);
  rag_w_uint(w, (uint64_t)b->o.variant, 1);
  rag_w_f64(w, b->o.k1);
  rag_w_f64(w, b->o.b);
  rag_w_f64(w, b->o.delta);
  rag_w_end(w);

  rag_w_begin(w, "ANLZ", len[1]);
  rag_w_str(w, a->lang, strlen(a->lang));
  rag_w_uint(w, (uint64_t)(a->stem != 0), 1);
  rag_w_uint(w, (uint64_t)(a->lowercase != 0), 1);
  rag_w_uint(w, (uint64_t)a->cjk, 1);
  rag_w_uint(w, (uint64_t)a->stopwords, 1);
  rag_w_varint(w, a->nwords);
  for (i = 0; i < a->nwords; i++) rag_w_str(w, a->words[i], strlen(a->words[i]));
  rag_w_end(w);

  rag_w_begin(w, "DOCS", len[2]);
  rag_w_varint(w, b->ndocs);
  for (i = 0; i < b->ndocs; i++) {
    rag_w_str(w, doc_id(b, (uint32_t)i), b->docs[i].idlen);
    rag_w_varint(w, b->dl[i]);
  }
  rag_w_end(w);

  rag_w_begin(w, "TERM", len[3]);
  rag_w_varint(w, b->live_terms);
  for (i = 0; i < b->nterms; i++) {
    const term *t = &b->terms[i];
    if (t->df == 0) continue;
    rag_w_str(w, term_text(b, t), t->len);
    rag_w_varint(w, t->df);
    rag_w_varint(w, t->plen);
  }
  rag_w_end(w);

  rag_w_begin(w, "POST", len[4]);
  for (i = 0; i < b->nterms; i++)
    if (b->terms[i].df != 0) rag_w_put(w, b->terms[i].post, b->terms[i].plen);
  rag_w_end(w);
}

static void write_cb(const void *obj, rag_writer *w) {
  write_index((const rag_bm25 *)obj, w);
}

int rag_bm25_dump(rag_bm25 *b, unsigned char **buf, size_t *n) {
  *buf = NULL;
  *n = 0;
  if (renumber(b) != RAG_OK) return RAG_ENOMEM;
  return rag_file_dump(write_cb, b, buf, n);
}

int rag_bm25_save(rag_bm25 *b, const char *path, int *err) {
  *err = 0;
  if (renumber(b) != RAG_OK) return RAG_ENOMEM;
  return rag_file_save(path, write_cb, b, err);
}

/* {====== Loading ======} */

#define CORRUPT(msg) \
  do {               \
    *why = (msg);    \
    rc = RAG_ECORRUPT; \
    goto done;       \
  } while (0)

/* The parameters and the analyzer options of PARM and ANLZ. */
static int read_config(rag_reader *pr, rag_reader *ar, rag_bm25_opts *o, char **wbuf,
                       const char ***words, const char **why) {
  unsigned v, stem, lower, cjk, stop;
  uint64_t nw, i;
  const char *s;
  size_t n;
  char *q;
  *wbuf = NULL;
  *words = NULL;
  rag_bm25_defaults(o);
  if (!rag_r_u8(pr, &v) || !rag_r_f64(pr, &o->k1) || !rag_r_f64(pr, &o->b) || !rag_r_f64(pr, &o->delta) ||
      pr->p != pr->e || v >= RAG_BM25_NVARIANTS) {
    *why = "bad parameters";
    return RAG_ECORRUPT;
  }
  o->variant = (rag_bm25_variant)v;
  if (!params_ok(o)) {
    *why = "bad parameters";
    return RAG_ECORRUPT;
  }
  if (!rag_r_str(ar, &s, &n) || n == 0 || n > 63 || memchr(s, 0, n) != NULL || !rag_r_u8(ar, &stem) ||
      !rag_r_u8(ar, &lower) || !rag_r_u8(ar, &cjk) || !rag_r_u8(ar, &stop) || stem > 1 || lower > 1 ||
      cjk > RAG_ANALYZER_CJK_RUN || stop > RAG_ANALYZER_STOP_LIST || !rag_r_varint(ar, &nw) ||
      nw > (uint64_t)(ar->e - ar->p)) {
    *why = "bad analyzer options";
    return RAG_ECORRUPT;
  }
  /* lang and the words as NUL-terminated copies in one buffer */
  *wbuf = q = (char *)rag_malloc((size_t)(ar->e - ar->p) + n + (size_t)nw + 1);
  *words = (const char **)rag_malloc(((size_t)nw + 1) * sizeof **words);
  if (q == NULL || *words == NULL) return RAG_ENOMEM;
  memcpy(q, s, n);
  q[n] = '\0';
  o->analyzer.lang = q;
  q += n + 1;
  for (i = 0; i < nw; i++) {
    if (!rag_r_str(ar, &s, &n) || memchr(s, 0, n) != NULL) {
      *why = "bad analyzer options";
      return RAG_ECORRUPT;
    }
    memcpy(q, s, n);
    q[n] = '\0';
    (*words)[i] = q;
    q += n + 1;
  }
  if (ar->p != ar->e) {
    *why = "bad analyzer options";
    return RAG_ECORRUPT;
  }
  o->analyzer.stem = (int)stem;
  o->analyzer.lowercase = (int)lower;
  o->analyzer.cjk = (rag_analyzer_cjk)cjk;
  o->analyzer.stopwords = (rag_analyzer_stop)stop;
  o->analyzer.words = *words;
  o->analyzer.nwords = (size_t)nw;
  return RAG_OK;
}

int rag_bm25_load_mem(const unsigned char *p, size_t n, rag_bm25 **out, const char **why) {
  static const char tags[NSECTIONS][5] = {"PARM", "ANLZ", "DOCS", "TERM", "POST"};
  rag_reader sec[NSECTIONS], r;
  rag_bm25_opts o;
  rag_bm25 *b = NULL;
  char *wbuf = NULL;
  const char **words = NULL;
  const char **ids = NULL;
  uint64_t *tfsum = NULL, nd64, nt64;
  uint32_t *fwd = NULL;
  size_t i, d, ndocs;
  uint32_t version;
  int rc = RAG_OK;
  *out = NULL;
  *why = "";
  rc = rag_file_open(p, n, MAGIC, FORMAT_VERSION, tags, NSECTIONS, sec, &version,
                     "not a bm25 index (bad magic)", why);
  if (rc != RAG_OK) return rc;

  rc = read_config(&sec[0], &sec[1], &o, &wbuf, &words, why);
  if (rc != RAG_OK) goto done;
  rc = rag_bm25_new(&o, &b);
  if (rc == RAG_EINVAL) CORRUPT("bad analyzer options");
  if (rc != RAG_OK) goto done;

  /* DOCS: ids and lengths; the ids stay in the caller's buffer for now. */
  r = sec[2];
  if (!rag_r_varint(&r, &nd64) || nd64 > (uint64_t)(r.e - r.p) / 2 || nd64 > MAX_DOCS)
    CORRUPT("bad document count");
  ndocs = (size_t)nd64;
  b->docs = (doc *)rag_malloc(ndocs * sizeof *b->docs + 1);
  b->dl = (uint32_t *)rag_malloc(ndocs * sizeof *b->dl + 1);
  ids = (const char **)rag_malloc(ndocs * sizeof *ids + 1);
  tfsum = (uint64_t *)rag_malloc(ndocs * sizeof *tfsum + 1);
  fwd = (uint32_t *)rag_malloc(ndocs * sizeof *fwd + 1);
  if (b->docs == NULL || b->dl == NULL || ids == NULL || tfsum == NULL || fwd == NULL) {
    rc = RAG_ENOMEM;
    goto done;
  }
  b->dcap = ndocs;
  memset(b->docs, 0, ndocs * sizeof *b->docs);
  memset(tfsum, 0, ndocs * sizeof *tfsum);
  memset(fwd, 0, ndocs * sizeof *fwd);
  for (d = 0; d < ndocs; d++) {
    size_t len;
    uint64_t dl;
    if (!rag_r_str(&r, &ids[d], &len) || len >= UINT32_MAX || !rag_r_varint(&r, &dl) || dl >= DEAD)
      CORRUPT("bad document");
    b->docs[d].idlen = (uint32_t)len;
    b->docs[d].hash = rag_fnv32(ids[d], len);
    b->dl[d] = (uint32_t)dl;
    b->total += dl;
  }
  if (r.p != r.e) CORRUPT("bad document section");

  /* TERM and POST: the dictionary and every list, checked posting by posting. */
  r = sec[3];
  if (!rag_r_varint(&r, &nt64) || nt64 > (uint64_t)(r.e - r.p) / 4) CORRUPT("bad term count");
  b->terms = (term *)rag_malloc((size_t)nt64 * sizeof *b->terms + 1);
  b->pool = (char *)rag_malloc((size_t)(r.e - r.p) + 1);
  if (b->terms == NULL || b->pool == NULL || !tslots_fit(b, (size_t)nt64)) {
    rc = RAG_ENOMEM;
    goto done;
  }
  b->tcap = (size_t)nt64;
  b->poolcap = (size_t)(r.e - r.p) + 1;
  for (i = 0; i < (size_t)nt64; i++) {
    const char *s;
    size_t len;
    uint64_t df, plen, cnt = 0;
    uint32_t tid, next = 0, h;
    rag_reader pr;
    term *t;
    if (!rag_r_str(&r, &s, &len) || len == 0 || !rag_r_varint(&r, &df) || df == 0 || df > ndocs ||
        !rag_r_varint(&r, &plen) || plen == 0 || plen > (uint64_t)(sec[4].e - sec[4].p) ||
        plen >= UINT32_MAX)
      CORRUPT("bad term");
    h = rag_fnv32(s, len);
    if (term_find(b, s, len, h) != NONE) CORRUPT("duplicate term");
    rc = term_insert(b, s, len, h, &tid);
    if (rc == RAG_ETOOBIG) CORRUPT("too many terms");
    if (rc != RAG_OK) goto done;
    t = &b->terms[tid];
    pr.p = sec[4].p;
    pr.e = pr.p + plen;
    sec[4].p += plen;
    while (pr.p < pr.e) {
      uint64_t v, tf = 1, doc;
      if (!rag_r_varint(&pr, &v) || (!(v & 1) && (!rag_r_varint(&pr, &tf) || tf == 0 || tf >= DEAD)))
        CORRUPT("bad posting");
      doc = next + (v >> 1);
      if (doc >= ndocs) CORRUPT("posting of a missing document");
      next = (uint32_t)doc + 1;
      tfsum[doc] += tf;
      fwd[doc] += (uint32_t)rag_varint_len(tid);
      if (fwd[doc] >= UINT32_MAX - 8) CORRUPT("bad posting");
      cnt++;
    }
    if (cnt != df) CORRUPT("document frequency disagrees with its list");
    t->post = (uint8_t *)rag_malloc((size_t)plen);
    if (t->post == NULL) {
      rc = RAG_ENOMEM;
      goto done;
    }
    memcpy(t->post, pr.e - plen, (size_t)plen);
    t->plen = t->pcap = (uint32_t)plen;
    t->df = (uint32_t)df;
    t->next = next;
    b->live_postings += (size_t)df;
  }
  if (r.p != r.e || sec[4].p != sec[4].e) CORRUPT("bad term section");
  b->live_terms = b->nterms;

  /* Each document: its length agrees, its id is new; then its forward list. */
  if (!islots_fit(b, ndocs)) {
    rc = RAG_ENOMEM;
    goto done;
  }
  for (d = 0; d < ndocs; d++) {
    doc *x = &b->docs[d];
    size_t slot;
    if (tfsum[d] != b->dl[d]) CORRUPT("document length disagrees with its postings");
    slot = id_slot(b, ids[d], x->idlen, x->hash);
    if (b->islots[slot] != 0) CORRUPT("duplicate id");
    x->blob = (uint8_t *)rag_malloc((size_t)x->idlen + fwd[d] + 1);
    if (x->blob == NULL) {
      rc = RAG_ENOMEM;
      goto done;
    }
    memcpy(x->blob, ids[d], x->idlen);
    b->islots[slot] = (uint32_t)d + 1;
    b->ndocs = d + 1; /* what rag_bm25_free releases if a later check fails */
    fwd[d] = 0;       /* now the cursor */
  }
  b->nlive = ndocs;
  for (i = 0; i < b->nterms; i++) {
    const term *t = &b->terms[i];
    const uint8_t *q = t->post, *e = q + t->plen;
    uint32_t next = 0;
    while (q < e) {
      uint32_t x, tf;
      doc *y;
      q = get_posting(q, &next, &x, &tf);
      y = &b->docs[x];
      fwd[x] += (uint32_t)rag_put_varint(y->blob + y->idlen + fwd[x], i);
    }
  }
  for (d = 0; d < ndocs; d++) b->docs[d].fwdlen = fwd[d];

done:
  rag_free(wbuf);
  rag_free((void *)words);
  rag_free((void *)ids);
  rag_free(tfsum);
  rag_free(fwd);
  if (rc != RAG_OK) {
    rag_bm25_free(b);
    return rc;
  }
  *out = b;
  return RAG_OK;
}

int rag_bm25_load(const char *path, rag_bm25 **out, const char **why, int *err) {
  unsigned char *buf;
  size_t n;
  int rc;
  *out = NULL;
  *why = "";
  rc = rag_file_read(path, &buf, &n, err);
  if (rc != RAG_OK) return rc;
  rc = rag_bm25_load_mem(buf, n, out, why);
  rag_free(buf);
  return rc;
}

/* {====== Self-check ======} */

int rag_bm25_check(const rag_bm25 *b) {
  uint64_t *tfs, total = 0;
  uint32_t *nfwd;
  size_t i, d, live = 0, dead = 0, lterms = 0, nlive = 0, ndead = 0;
  int ok = 1;
  tfs = (uint64_t *)rag_malloc(b->ndocs * sizeof *tfs + 1);
  nfwd = (uint32_t *)rag_malloc(b->ndocs * sizeof *nfwd + 1);
  if (tfs == NULL || nfwd == NULL) {
    rag_free(tfs);
    rag_free(nfwd);
    return RAG_ENOMEM;
  }
  memset(tfs, 0, b->ndocs * sizeof *tfs);
  memset(nfwd, 0, b->ndocs * sizeof *nfwd);
  for (i = 0; i < b->nterms && ok; i++) {
    const term *t = &b->terms[i];
    const uint8_t *p = t->post, *e = t->plen ? p + t->plen : p;
    uint32_t next = 0, df = 0, nd = 0, x = 0, tf;
    while (p < e && ok) {
      p = get_posting(p, &next, &x, &tf);
      if (x >= b->ndocs || tf == 0) ok = 0;
      else if (b->dl[x] == DEAD) nd++;
      else {
        df++;
        tfs[x] += tf;
      }
    }
    if (p != e || df != t->df || nd != t->dead || (t->plen != 0 && next != t->next) ||
        term_find(b, term_text(b, t), t->len, t->hash) != i)
      ok = 0;
    live += df;
    dead += nd;
    lterms += df > 0;
  }
  for (d = 0; d < b->ndocs && ok; d++) {
    const doc *x = &b->docs[d];
    if (b->dl[d] == DEAD) {
      ndead++;
      if (x->blob != NULL) ok = 0;
      continue;
    }
    nlive++;
    total += b->dl[d];
    if (x->blob == NULL || tfs[d] != b->dl[d] || id_find(b, doc_id(b, (uint32_t)d), x->idlen) != d)
      ok = 0;
    else {
      const uint8_t *p = x->blob + x->idlen, *e = p + x->fwdlen;
      while (p < e) {
        uint64_t tid;
        p = get_varint(p, &tid);
        if (tid >= b->nterms || tf_of(&b->terms[tid], (uint32_t)d) == 0) ok = 0;
        nfwd[d]++;
      }
    }
  }
  if (live != b->live_postings || dead != b->dead_postings || lterms != b->live_terms ||
      nlive != b->nlive || ndead != b->ndead || total != b->total)
    ok = 0;
  rag_free(tfs);
  rag_free(nfwd);
  return ok ? RAG_OK : RAG_ECORRUPT;
}
