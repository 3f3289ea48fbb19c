/*
** rag_bm25.c: the BM25 index. Terms live in an open-addressing dictionary;
** each has a posting list of (gap, tf) varints over dense document numbers.
** Ids live in a rag_ids table whose slots are the document numbers; each
** document keeps the ids of its terms (a forward list), so removing it
** costs its own size: its postings are marked dead through its length
** (DEAD) and dropped in place once a list holds more dead than live ones;
** document numbers are renumbered once most of them are dead. Search keeps
** the best k in a rag_topk heap. The file format is in rag_bm25_file.c.
*/
#include "rag_bm25.h"

#include <math.h>
#include <string.h>

#include "rag_bm25_internal.h"
#include "rag_file.h"
#include "rag_fnv.h"
#include "rag_probe.h"
#include "rag_topk.h"

/* explain must repeat search's arithmetic exactly: no fused multiply-add. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define DEAD RAG_BM25_DEAD
#define NONE RAG_BM25_NONE
#define MAX_DOCS RAG_BM25_MAX_DOCS
#define POSTING_MAX 10 /* bytes of one posting at most */
#define PREFETCH 8     /* how far ahead scattered entries and lists are fetched */

typedef rag_bm25_term_entry term;
typedef rag_bm25_doc doc;
typedef rag_bm25_dterm dterm;
typedef rag_bm25_qterm qterm;

/* {====== Small tools ======} */

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

/* term_find in a dictionary used in place: its entries keep no hashes, so
** a cell's term is told by its length and bytes. */
static uint32_t vterm_find(const rag_bm25 *b, const char *s, size_t n, uint32_t h) {
  size_t i = h & b->vmask;
  for (;; i = (i + 1) & b->vmask) {
    uint32_t v = rag_bm25_le32(b->vslot + 4 * i);
    const uint8_t *e;
    uint32_t s0;
    if (v == 0) return NONE;
    e = b->vterm + (size_t)(v - 1) * RAG_BM25_VENTRY;
    s0 = rag_bm25_le32(e);
    if (rag_bm25_le32(e + RAG_BM25_VENTRY) - s0 == n && rag_probe_equal(b->vpool + s0, s, n))
      return v - 1;
  }
}

uint32_t rag_bm25_term_find(const rag_bm25 *b, const char *s, size_t n, uint32_t h) {
  uint32_t v;
  if (b->vterm != NULL) return vterm_find(b, s, n, h);
  v = b->tslots[rag_probe_find(b->tslots, b->tmask, s, n, h, term_key, b)];
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

int rag_bm25_term_insert(rag_bm25 *b, const char *s, size_t n, uint32_t h, uint32_t *tid) {
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

int rag_bm25_terms_reserve(rag_bm25 *b, size_t nterms, size_t bytes) {
  if (nterms > b->tcap) {
    term *v;
    if (RAG_MUL_OVERFLOWS(nterms, sizeof *v) ||
        (v = (term *)rag_realloc(b->terms, nterms * sizeof *v)) == NULL)
      return RAG_ENOMEM;
    b->terms = v;
    b->tcap = nterms;
  }
  if (bytes >= b->poolcap) {
    char *p = (char *)rag_realloc(b->pool, bytes + 1);
    if (p == NULL) return RAG_ENOMEM;
    b->pool = p;
    b->poolcap = bytes + 1;
  }
  return tslots_fit(b, nterms) ? RAG_OK : RAG_ENOMEM;
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

int rag_bm25_params_ok(const rag_bm25_opts *o) {
  return (unsigned)o->variant < RAG_BM25_NVARIANTS && o->k1 >= 0 && o->k1 <= RAG_BM25_MAX_PARAM &&
         o->b >= 0 && o->b <= 1 && o->delta >= 0 && o->delta <= RAG_BM25_MAX_PARAM;
}

int rag_bm25_new(const rag_bm25_opts *o, rag_bm25 **out) {
  rag_bm25 *b;
  int rc;
  *out = NULL;
  if (!rag_bm25_params_ok(o)) return RAG_EINVAL;
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
  rag_ids_init(&b->ids);
  b->tslots = (uint32_t *)rag_malloc(64 * sizeof *b->tslots);
  if (b->tslots == NULL) {
    rag_bm25_free(b);
    return RAG_ENOMEM;
  }
  memset(b->tslots, 0, 64 * sizeof *b->tslots);
  b->tmask = 63;
  *out = b;
  return RAG_OK;
}

void rag_bm25_free(rag_bm25 *b) {
  size_t i;
  if (b == NULL) return;
  for (i = 0; i < b->nterms && !b->borrowed; i++) rag_free(b->terms[i].post);
  for (i = 0; i < b->ids.n; i++) rag_free(b->docs[i].fwd);
  rag_free(b->terms);
  rag_free(b->tslots);
  rag_free(b->pool);
  rag_free(b->docs);
  rag_free(b->dl);
  rag_ids_free(&b->ids);
  rag_free(b->dt);
  rag_free(b->dcells);
  rag_free(b->qt);
  rag_free(b->qcells);
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

/* {====== Borrowed lists ======} */

/* Frees the lists in posts[0, n) and every forward list; for a failed own. */
static void own_undo(rag_bm25 *b, uint8_t **posts, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) rag_free(posts[i]);
  for (i = 0; i < b->ids.n; i++) {
    rag_free(b->docs[i].fwd);
    b->docs[i].fwd = NULL;
  }
}

/* The document number after the last of the n bytes of postings at p. */
static uint32_t list_next(const uint8_t *p, size_t n) {
  const uint8_t *e = p + n;
  uint32_t next = 0, x, tf;
  while (p < e) p = rag_bm25_get_posting(p, &next, &x, &tf);
  return next;
}

int rag_bm25_own_terms(rag_bm25 *b) {
  size_t n = b->nterms, cap = 64, i, poollen;
  term *t;
  char *pool;
  uint32_t *slots;
  if (b->vterm == NULL) return RAG_OK;
  poollen = rag_bm25_le32(b->vterm + n * RAG_BM25_VENTRY);
  while (n > cap / 2) cap *= 2;
  t = (term *)rag_malloc(n * sizeof *t + 1);
  pool = (char *)rag_malloc(poollen + 1);
  slots = (uint32_t *)rag_malloc(cap * sizeof *slots);
  if (t == NULL || pool == NULL || slots == NULL) {
    rag_free(t);
    rag_free(pool);
    rag_free(slots);
    return RAG_ENOMEM;
  }
  memcpy(pool, b->vpool, poollen);
  for (i = 0; i < n; i++) {
    rag_bm25_tinfo x;
    rag_bm25_term_info(b, (uint32_t)i, &x);
    memset(&t[i], 0, sizeof t[i]);
    t[i].post = (uint8_t *)(uintptr_t)x.post; /* still borrowed */
    t[i].plen = x.plen;
    t[i].off = (uint32_t)(x.s - b->vpool);
    t[i].len = x.len;
    t[i].hash = rag_fnv32(x.s, x.len);
    t[i].df = x.df;
    t[i].next = list_next(x.post, x.plen);
  }
  memset(slots, 0, cap * sizeof *slots);
  rag_free(b->terms);
  rag_free(b->pool);
  rag_free(b->tslots);
  b->terms = t;
  b->tcap = n;
  b->pool = pool;
  b->poollen = poollen;
  b->poolcap = poollen + 1;
  b->tslots = slots;
  b->tmask = cap - 1;
  b->vterm = NULL;
  b->vslot = NULL;
  b->vpool = NULL;
  b->vpost = NULL;
  for (i = 0; i < n; i++) tslot_put(b, (uint32_t)i);
  return RAG_OK;
}

int rag_bm25_own(rag_bm25 *b) {
  size_t nd = b->ids.n, i, d;
  uint8_t **posts;
  uint32_t *fsz;
  if (!b->borrowed) return RAG_OK;
  if (rag_bm25_own_terms(b) != RAG_OK) return RAG_ENOMEM;
  posts = (uint8_t **)rag_malloc(b->nterms * sizeof *posts + 1);
  fsz = (uint32_t *)rag_malloc(nd * sizeof *fsz + 1);
  if (posts == NULL || fsz == NULL) goto nomem;
  memset(fsz, 0, nd * sizeof *fsz);
  for (i = 0; i < b->nterms; i++) { /* forward list sizes (a load checked the lists) */
    const term *t = &b->terms[i];
    const uint8_t *p = t->post, *e = t->plen ? p + t->plen : p;
    uint32_t next = 0, x, tf;
    size_t len = rag_varint_len(i);
    while (p < e) {
      p = rag_bm25_get_posting(p, &next, &x, &tf);
      fsz[x] += (uint32_t)len;
    }
  }
  for (i = 0; i < b->nterms; i++) {
    const term *t = &b->terms[i];
    posts[i] = (uint8_t *)rag_malloc((size_t)t->plen + 1);
    if (posts[i] == NULL) {
      own_undo(b, posts, i);
      goto nomem;
    }
    if (t->plen > 0) memcpy(posts[i], t->post, t->plen);
  }
  for (d = 0; d < nd; d++) {
    b->docs[d].fwdlen = 0; /* the cursor that writes the list */
    if ((b->docs[d].fwd = (uint8_t *)rag_malloc((size_t)fsz[d] + 1)) == NULL) {
      own_undo(b, posts, b->nterms);
      goto nomem;
    }
  }
  for (i = 0; i < b->nterms; i++) {
    term *t = &b->terms[i];
    const uint8_t *p, *e;
    uint32_t next = 0, x, tf;
    t->post = posts[i];
    t->pcap = t->plen + 1;
    for (p = t->post, e = p + t->plen; p < e;) {
      p = rag_bm25_get_posting(p, &next, &x, &tf);
      b->docs[x].fwdlen += (uint32_t)rag_put_varint(b->docs[x].fwd + b->docs[x].fwdlen, i);
    }
  }
  b->borrowed = 0;
  rag_free(posts);
  rag_free(fsz);
  return RAG_OK;
nomem:
  rag_free(posts);
  rag_free(fsz);
  return RAG_ENOMEM;
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
    r = rag_bm25_get_posting(r, &in, &d, &tf);
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
  for (d = 0; d < b->ids.n; d++) { /* new ids are never larger: rewrite in place */
    doc *x = &b->docs[d];
    const uint8_t *r;
    uint8_t *w, *e;
    if (x->fwd == NULL) continue;
    r = w = x->fwd;
    e = w + x->fwdlen;
    while (r < e) {
      uint64_t tid;
      r = rag_bm25_get_varint(r, &tid);
      w += rag_put_varint(w, map[tid]);
    }
    x->fwdlen = (uint32_t)(w - x->fwd);
  }
  memset(b->tslots, 0, (b->tmask + 1) * sizeof *b->tslots);
  for (i = 0; i < b->nterms; i++) tslot_put(b, (uint32_t)i);
  rag_analyzer_untag(b->an); /* the ids its cache holds changed */
  rag_free(map);
}

/* Renumbers the live documents 0..nlive-1, dropping every dead posting and
** then every term left without documents. */
int rag_bm25_renumber(rag_bm25 *b) {
  uint32_t *map;
  size_t d, i, ndocs = b->ids.n;
  if (b->ndead == 0) return RAG_OK;
  if (RAG_MUL_OVERFLOWS(ndocs, sizeof *map)) return RAG_ENOMEM;
  map = (uint32_t *)rag_malloc(ndocs * sizeof *map + 1);
  if (map == NULL) return RAG_ENOMEM;
  rag_ids_compact(&b->ids, map); /* the dead documents' ids are the unlinked ones */
  for (i = 0; i < b->nterms; i++) {
    term *t = &b->terms[i];
    const uint8_t *r = t->post, *e = r;
    uint8_t *w = t->post;
    uint32_t in = 0, out = 0;
    if (t->plen == 0) continue;
    e = r + t->plen;
    while (r < e) {
      uint32_t od, tf;
      r = rag_bm25_get_posting(r, &in, &od, &tf);
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
  for (d = 0; d < ndocs; d++) {
    if (map[d] == NONE) continue;
    b->docs[map[d]] = b->docs[d];
    b->dl[map[d]] = b->dl[d];
  }
  rag_free(map);
  b->ndead = 0;
  b->dead_postings = 0;
  compact_terms(b);
  return RAG_OK;
}

/* Takes document d out of the statistics; its postings turn dead. */
static void drop_doc(rag_bm25 *b, uint32_t d) {
  doc *x = &b->docs[d];
  const uint8_t *p = x->fwd, *e = p + x->fwdlen;
  b->total -= b->dl[d];
  b->dl[d] = DEAD;
  while (p < e) {
    uint64_t tid;
    term *t;
    p = rag_bm25_get_varint(p, &tid);
    t = &b->terms[tid];
    t->df--;
    t->dead++;
    b->live_postings--;
    b->dead_postings++;
    if (t->df == 0) b->live_terms--;
    if (t->dead >= 8 && t->dead > t->df) compact_list(b, t);
  }
  rag_free(x->fwd);
  x->fwd = NULL;
  rag_ids_unlink(&b->ids, d);
  b->nlive--;
  b->ndead++;
}

/* Renumbers once most document numbers are dead (never fails: skipped). */
static void maybe_renumber(rag_bm25 *b) {
  if (b->ndead > 64 && b->ndead > b->nlive) (void)rag_bm25_renumber(b);
}

/* {====== Adding and removing ======} */

/*
** The document being added counts its terms in dt through dcells, a small
** table of its own that stays in the nearest caches, rather than by marks
** in the dictionary's entries, which a large corpus spreads over megabytes.
*/

/* The cell of term tid in dcells (dmask + 1 cells): its own, or the empty one where it goes. */
static size_t dcell(const rag_bm25 *b, uint32_t tid) {
  size_t i = (uint32_t)(tid * 2654435761u) & b->dmask;
  uint32_t v;
  while ((v = b->dcells[i]) != 0 && b->dt[v - 1].tid != tid) i = (i + 1) & b->dmask;
  return i;
}

/* Empties the cells of the terms in dt (those of the last add), in any order. */
static void dcells_clear(rag_bm25 *b) {
  size_t i;
  for (i = 0; i < b->nd; i++) {
    uint32_t tid = b->dt[i].tid;
    b->dcells[rag_probe_holding(b->dcells, b->dmask, (uint32_t)(tid * 2654435761u),
                                (uint32_t)i + 1)] = 0;
  }
}

/* Room for one more distinct term in dt and dcells; 0 when out of memory. */
static int dterm_fit(rag_bm25 *b) {
  size_t cap, i;
  uint32_t *c;
  if (b->nd == b->dtcap) {
    dterm *v = (dterm *)rag_grow(b->dt, &b->dtcap, b->nd + 1, sizeof *v);
    if (v == NULL) return 0;
    b->dt = v;
  }
  if (b->dmask > 0 && b->nd + 1 <= (b->dmask + 1) / 2) return 1;
  cap = b->dmask > 0 ? 2 * (b->dmask + 1) : 512;
  if (RAG_MUL_OVERFLOWS(cap, sizeof *c) || (c = (uint32_t *)rag_malloc(cap * sizeof *c)) == NULL)
    return 0;
  memset(c, 0, cap * sizeof *c);
  rag_free(b->dcells);
  b->dcells = c;
  b->dmask = cap - 1;
  for (i = 0; i < b->nd; i++) b->dcells[dcell(b, b->dt[i].tid)] = (uint32_t)i + 1;
  return 1;
}

/* Counts one occurrence of term tid in the document being added. */
static int count_term(rag_bm25 *b, uint32_t tid) {
  size_t i;
  if (++b->doclen >= DEAD) return RAG_ETOOBIG;
  if (b->dmask > 0) {
    uint32_t v = b->dcells[i = dcell(b, tid)];
    if (v != 0) {
      b->dt[v - 1].tf++;
      return 0;
    }
  }
  if (!dterm_fit(b)) return RAG_ENOMEM;
  __builtin_prefetch(&b->terms[tid]); /* rag_bm25_add reads it once the text is analyzed */
  b->dcells[dcell(b, tid)] = (uint32_t)b->nd + 1;
  b->dt[b->nd].tid = tid;
  b->dt[b->nd].tf = 1;
  b->nd++;
  return 0;
}

/*
** A term of the document being added. The analyzer is this index's own, so
** its cache's tags hold our term ids: a tag saves the dictionary lookup.
** compact_terms, which renumbers terms, resets the tags, and nothing else
** changes an id.
*/
static int on_doc_term(void *ud, const char *s, size_t n, uint32_t h, unsigned char *tag) {
  rag_bm25 *b = (rag_bm25 *)ud;
  uint32_t tid = NONE;
  if (tag != NULL) memcpy(&tid, tag, 4);
  if (tid >= b->nterms) {
    tid = rag_bm25_term_find(b, s, n, h);
    if (tid == NONE) {
      int rc = rag_bm25_term_insert(b, s, n, h, &tid);
      if (rc != RAG_OK) return rc;
    }
    if (tag != NULL) memcpy(tag, &tid, 4);
  }
  return count_term(b, tid);
}

/* Room for one more document number. */
static int docs_fit(rag_bm25 *b) {
  size_t cap, n = b->ids.n;
  if (n < b->dcap) return 1;
  cap = b->dcap;
  {
    doc *v = (doc *)rag_grow(b->docs, &cap, n + 1, sizeof *v);
    if (v == NULL) return 0;
    b->docs = v;
  }
  cap = b->dcap;
  {
    uint32_t *v = (uint32_t *)rag_grow(b->dl, &cap, n + 1, sizeof *v);
    if (v == NULL) return 0;
    b->dl = v;
  }
  b->dcap = cap;
  return 1;
}

int rag_bm25_add(rag_bm25 *b, const char *id, size_t idlen, const char *text, size_t len,
                 size_t *errpos) {
  uint32_t d, old;
  size_t i, fwd = 0;
  uint8_t *list, *p;
  int rc;
  if (idlen >= UINT32_MAX) return RAG_ETOOBIG;
  if (rag_bm25_own(b) != RAG_OK) return RAG_ENOMEM;
  if (b->ids.n >= MAX_DOCS) {
    if (rag_bm25_renumber(b) != RAG_OK) return RAG_ENOMEM;
    if (b->ids.n >= MAX_DOCS) return RAG_ETOOBIG;
  }
  if (b->dmask > 0) dcells_clear(b);
  b->nd = 0;
  b->doclen = 0;
  rc = rag_analyzer_run_tagged(b->an, text, len, on_doc_term, b, errpos);
  if (rc != RAG_OK) return rc;

  /* Reserve everything first, so that the commit below cannot fail. */
  for (i = 0; i < b->nd; i++) fwd += rag_varint_len(b->dt[i].tid);
  if (fwd >= UINT32_MAX) return RAG_ETOOBIG;
  old = rag_ids_find(&b->ids, id, idlen);
  if (!docs_fit(b)) return RAG_ENOMEM;
  if ((rc = rag_ids_reserve(&b->ids, 1, idlen)) != RAG_OK) return rc;
  for (i = 0; i < b->nd; i++) { /* the entries, scattered: fetched a few ahead */
    term *t = &b->terms[b->dt[i].tid];
    if (i + PREFETCH < b->nd) __builtin_prefetch(&b->terms[b->dt[i + PREFETCH].tid]);
    if (!reserve_post(t, POSTING_MAX)) return RAG_ENOMEM;
    __builtin_prefetch(t->post + t->plen, 1); /* the commit below writes there */
  }
  list = (uint8_t *)rag_malloc(fwd + 1);
  if (list == NULL) return RAG_ENOMEM;

  /* Commit. */
  if (old != RAG_IDS_NONE) drop_doc(b, old);
  d = rag_ids_push(&b->ids, id, idlen);
  p = list;
  for (i = 0; i < b->nd; i++) {
    term *t = &b->terms[b->dt[i].tid];
    if (i + PREFETCH < b->nd) {
      const term *u = &b->terms[b->dt[i + PREFETCH].tid];
      __builtin_prefetch(u->post + u->plen, 1);
    }
    p += rag_put_varint(p, b->dt[i].tid);
    t->plen += (uint32_t)put_posting(t->post + t->plen, d - t->next, b->dt[i].tf);
    t->next = d + 1;
    if (t->df++ == 0) b->live_terms++;
  }
  b->docs[d].fwd = list;
  b->docs[d].fwdlen = (uint32_t)fwd;
  b->dl[d] = (uint32_t)b->doclen;
  b->total += b->doclen;
  b->live_postings += b->nd;
  b->nlive++;
  maybe_renumber(b);
  return RAG_OK;
}

int rag_bm25_remove(rag_bm25 *b, const char *id, size_t idlen, int *removed) {
  uint32_t d = rag_ids_find(&b->ids, id, idlen);
  *removed = 0;
  if (d == RAG_IDS_NONE) return RAG_OK;
  if (rag_bm25_own(b) != RAG_OK) return RAG_ENOMEM;
  drop_doc(b, d);
  *removed = 1;
  maybe_renumber(b);
  return RAG_OK;
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

/*
** A query counts its distinct terms in qcells, a table of its own, rather
** than by marks in the dictionary's entries: a dictionary used in place is
** read-only, and shared with other processes.
*/

/* The cell of term tid in qcells: its own, or the empty one where it goes. */
static size_t qcell(const rag_bm25 *b, uint32_t tid) {
  size_t i = (uint32_t)(tid * 2654435761u) & b->qmask;
  uint32_t v;
  while ((v = b->qcells[i]) != 0 && b->qt[v - 1].tid != tid) i = (i + 1) & b->qmask;
  return i;
}

/* Room in qcells for one more known term, among nq terms; 0 when out of memory. */
static int qcells_fit(rag_bm25 *b) {
  size_t cap, i;
  uint32_t *c;
  if (b->qmask > 0 && b->nq + 1 <= (b->qmask + 1) / 2) return 1;
  cap = b->qmask > 0 ? 2 * (b->qmask + 1) : 64;
  if (RAG_MUL_OVERFLOWS(cap, sizeof *c) || (c = (uint32_t *)rag_malloc(cap * sizeof *c)) == NULL)
    return 0;
  memset(c, 0, cap * sizeof *c);
  rag_free(b->qcells);
  b->qcells = c;
  b->qmask = cap - 1;
  for (i = 0; i < b->nq; i++)
    if (b->qt[i].tid != NONE) b->qcells[qcell(b, b->qt[i].tid)] = (uint32_t)i + 1;
  return 1;
}

static int on_query_term(void *ud, const char *s, size_t n, uint32_t h, size_t start,
                         size_t stop) {
  rag_bm25 *b = (rag_bm25 *)ud;
  uint32_t tid = rag_bm25_term_find(b, s, n, h);
  size_t i, off = 0;
  (void)start;
  (void)stop;
  if (tid != NONE) {
    uint32_t v;
    if (b->qmask > 0 && (v = b->qcells[qcell(b, tid)]) != 0) {
      b->qt[v - 1].qtf++;
      return 0;
    }
    if (!qcells_fit(b)) return RAG_ENOMEM;
  } else {
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
  if (tid != NONE) b->qcells[qcell(b, tid)] = (uint32_t)b->nq + 1;
  b->nq++;
  return 0;
}

/* Analyzes a query into its distinct terms, in order of first occurrence. */
static int parse_query(rag_bm25 *b, const char *q, size_t len, int keep_unknown,
                       size_t *errpos) {
  size_t i;
  for (i = 0; i < b->nq; i++) /* the last query's cells, in any order */
    if (b->qt[i].tid != NONE)
      b->qcells[rag_probe_holding(b->qcells, b->qmask, (uint32_t)(b->qt[i].tid * 2654435761u),
                                  (uint32_t)i + 1)] = 0;
  b->nq = 0;
  b->qtlen = 0;
  b->keep_unknown = keep_unknown;
  return rag_analyzer_run(b->an, q, len, on_query_term, b, errpos);
}

/* Scratch arrays for every document number. */
static int scratch_fit(rag_bm25 *b) {
  size_t cap = b->dcap, old = b->scap;
  void *v;
  if (old >= b->ids.n && old > 0) return 1;
  if (cap < 64) cap = 64;
  if (RAG_MUL_OVERFLOWS(cap, sizeof(double))) return 0;
  if ((v = rag_realloc(b->acc, cap * sizeof(double))) == NULL) return 0;
  b->acc = (double *)v;
  if ((v = rag_realloc(b->seen, cap * sizeof(uint32_t))) == NULL) return 0;
  b->seen = (uint32_t *)v;
  if ((v = rag_realloc(b->allow, cap * sizeof(uint32_t))) == NULL) return 0;
  b->allow = (uint32_t *)v;
  /* one more: search writes a posting's document there before it knows the document is new */
  if ((v = rag_realloc(b->touched, (cap + 1) * sizeof(uint32_t))) == NULL) return 0;
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

#define SAMPLE 16 /* select_top guesses from every SAMPLE-th touched document */
#define GUESS 32  /* and only when the place it takes in that sample is at most this */

/*
** A guess at a score that at least k of the nt touched documents reach
** (the better the guess, the fewer reach it): the r-th best of every
** SAMPLE-th document, r for about 3k in all; -INFINITY when k is too large
** for a short guess.
*/
static double guess_floor(const rag_bm25 *b, size_t nt, size_t k) {
  double best[GUESS] = {0};
  size_t r = (3 * k + SAMPLE - 1) / SAMPLE, m = 0, i, j;
  if (r > GUESS || nt / SAMPLE < 4 * r) return -INFINITY;
  for (i = 0; i < nt; i += SAMPLE) { /* best[0..m) kept in order, best first */
    double x = b->acc[b->touched[i]];
    if (m == r && !(x > best[r - 1])) continue;
    j = m < r ? m++ : r - 1;
    for (; j > 0 && best[j - 1] < x; j--) best[j] = best[j - 1];
    best[j] = x;
  }
  return best[r - 1];
}

/*
** The best k of the touched documents into b->hits, best first. When at
** least k documents reach the guessed floor, the k-th best does, so the k
** best are among those and only they go through the heap; else all do.
*/
static size_t select_top(rag_bm25 *b, size_t nt, size_t k) {
  rag_topk t;
  size_t i, n = 0;
  double g = guess_floor(b, nt, k);
  rag_topk_init(&t, b->hits, k, &b->ids);
  if (g > -INFINITY) {
    for (i = 0; i < nt; i++) {
      double x = b->acc[b->touched[i]];
      if (x >= g) {
        n++;
        rag_topk_push(&t, b->touched[i], x);
      }
    }
    if (n >= k) return rag_topk_sort(&t);
    rag_topk_init(&t, b->hits, k, &b->ids);
  }
  for (i = 0; i < nt; i++) rag_topk_push(&t, b->touched[i], b->acc[b->touched[i]]);
  return rag_topk_sort(&t);
}

/*
** rag_bm25_get_posting for search's loop over a list ending at e: whether a
** tf follows the gap is close to a coin toss along a list, so the byte
** after the gap is read (when the list has one) and taken or not without a
** branch; only a tf of 128 or more takes the varint's path.
*/
static inline const uint8_t *next_posting(const uint8_t *p, const uint8_t *e, uint32_t *next,
                                          uint32_t *doc, uint32_t *tf) {
  uint64_t v, t;
  uint32_t has, c = 0;
  if (*p < 128) {
    v = *p++;
  } else {
    p = rag_bm25_get_varint(p, &v);
  }
  has = (uint32_t)(~v & 1);
  if (p < e) c = *p;
  if (has & (c >> 7)) {
    p = rag_bm25_get_varint(p, &t);
  } else {
    t = has ? c : 1;
    p += has;
  }
  *doc = *next + (uint32_t)(v >> 1);
  *next = *doc + 1;
  *tf = (uint32_t)t;
  return p;
}

/*
** A document's sum so far: acc, or 0 where this query has not reached it
** yet (fresh), by masking its bits rather than by a branch, which a
** posting list mispredicts about as often as it takes it. acc may be an
** earlier query's sum, or never written: its bits are only masked.
*/
static inline double held(double acc, size_t fresh) {
  uint64_t u;
  memcpy(&u, &acc, sizeof u);
  u &= (uint64_t)fresh - 1;
  memcpy(&acc, &u, sizeof acc);
  return acc;
}

int rag_bm25_search(rag_bm25 *b, const char *q, size_t len, size_t k,
                    const rag_bm25_filter *filter, rag_ahead *ahead, const rag_hit **hits,
                    size_t *n, size_t *errpos) {
  scorer sc;
  double nd, c = 0, w0 = 0;
  size_t i, nt = 0;
  const void **ah = ahead != NULL ? ahead->line + ahead->at : NULL, **ae = ah;
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
  if (filter != NULL && rag_ids_mark(&b->ids, filter, b->allow, b->epoch, NULL) == 0)
    return RAG_OK;
  nd = (double)b->nlive;
  scorer_init(&sc, b, (double)b->total / nd);
  if (ahead != NULL) ae = ahead->line + ahead->n;
  for (i = 0; i < b->nq; i++) {
    rag_bm25_tinfo t;
    const uint8_t *p, *e;
    uint32_t next = 0;
    size_t fresh;
    double w;
    if (b->qt[i].tid == NONE) continue;
    rag_bm25_term_info(b, b->qt[i].tid, &t);
    if (t.df == 0) continue;
    w = b->qt[i].qtf * idf_of(sc.v, t.df, nd);
    w0 = w * tfc0(&sc);
    c += w0;
#define ACCUMULATE(V)                                                                  \
  for (p = t.post, e = p + t.plen; p < e;) {                                          \
    uint32_t d, tf;                                                                    \
    double x;                                                                          \
    p = next_posting(p, e, &next, &d, &tf);                                            \
    if (ah < ae) __builtin_prefetch(*ah++, 0, 2);                                      \
    if (b->dl[d] == DEAD || (filter != NULL && b->allow[d] != b->epoch)) continue;     \
    x = w * tfc_v(V, &sc, tf, b->dl[d]) - w0;                                          \
    fresh = b->seen[d] != b->epoch;                                                    \
    b->seen[d] = b->epoch;                                                             \
    b->touched[nt] = d;                                                                \
    nt += fresh;                                                                       \
    b->acc[d] = held(b->acc[d], fresh) + x;                                            \
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
  if (ahead != NULL) ahead->at = (size_t)(ah - ahead->line);
  if (c != 0)
    for (i = 0; i < nt; i++) b->acc[b->touched[i]] += c;
  *n = select_top(b, nt, k);
  *hits = b->hits;
  return RAG_OK;
}

const char *rag_bm25_id(const rag_bm25 *b, uint32_t h, size_t *len) {
  return rag_ids_get(&b->ids, h, len);
}

/* The tf of document d in the list of plen bytes at p (0 when absent). */
static uint32_t tf_of(const uint8_t *p, uint32_t plen, uint32_t d) {
  const uint8_t *e = plen ? p + plen : p;
  uint32_t next = 0;
  while (p < e) {
    uint32_t x, tf;
    p = rag_bm25_get_posting(p, &next, &x, &tf);
    if (x == d) return tf;
    if (x > d) break;
  }
  return 0;
}

/* Room in b->ex for an explanation of the parsed query's terms. */
static int explain_room(rag_bm25 *b) {
  if (b->nq > b->excap) {
    rag_bm25_term *v = (rag_bm25_term *)rag_grow(b->ex, &b->excap, b->nq, sizeof *v);
    if (v == NULL) return RAG_ENOMEM;
    b->ex = v;
  }
  return RAG_OK;
}

/*
** Starts the explanation x of query term qt: its text, qtf, the given tf,
** df and idf; 0 when no live document holds it (nothing more to say).
*/
static int explain_term(rag_bm25 *b, const qterm *qt, uint32_t tf, const scorer *sc, double nd,
                        rag_bm25_term *x, rag_bm25_tinfo *t) {
  memset(x, 0, sizeof *x);
  x->tf = tf;
  x->qtf = qt->qtf;
  if (qt->tid == NONE) {
    x->term = b->qtext + qt->off;
    x->len = qt->len;
    return 0;
  }
  rag_bm25_term_info(b, qt->tid, t);
  x->term = t->s;
  x->len = t->len;
  x->df = t->df;
  if (t->df == 0) return 0;
  x->idf = idf_of(sc->v, t->df, nd);
  return 1;
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
  d = rag_ids_find(&b->ids, id, idlen);
  if (d == RAG_IDS_NONE) return RAG_OK;
  *found = 1;
  if ((rc = explain_room(b)) != RAG_OK) return rc;
  nd = (double)b->nlive;
  scorer_init(&sc, b, (double)b->total / nd);
  for (i = 0; i < b->nq; i++) {
    const qterm *qt = &b->qt[i];
    rag_bm25_term *x = &b->ex[i];
    rag_bm25_tinfo t;
    if (!explain_term(b, qt, 0, &sc, nd, x, &t)) continue;
    {
      double w, w0;
      w = qt->qtf * x->idf;
      w0 = w * tfc0(&sc);
      c += w0;
      x->tf = tf_of(t.post, t.plen, d);
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

int rag_bm25_explain_text(rag_bm25 *b, const char *q, size_t len, rag_bm25_explain *out,
                          size_t *errpos) {
  scorer sc;
  double nd;
  uint32_t dl = 0;
  size_t i;
  int rc;
  memset(out, 0, sizeof *out);
  rc = parse_query(b, q, len, 1, errpos);
  if (rc != RAG_OK) return rc;
  if ((rc = explain_room(b)) != RAG_OK) return rc;
  for (i = 0; i < b->nq; i++) dl += b->qt[i].qtf;
  nd = (double)(b->nlive > 0 ? b->nlive : 1);
  scorer_init(&sc, b, b->nlive > 0 ? (double)b->total / nd : (double)dl);
  for (i = 0; i < b->nq; i++) {
    rag_bm25_term *x = &b->ex[i];
    rag_bm25_tinfo t;
    if (!explain_term(b, &b->qt[i], b->qt[i].qtf, &sc, nd, x, &t)) continue;
    x->weight = x->idf * tfc(&sc, x->tf, dl);
    out->score += x->weight;
  }
  out->terms = b->ex;
  out->nterms = b->nq;
  out->dl = dl;
  out->avgdl = b->nlive > 0 ? (double)b->total / nd : 0;
  out->docs = b->nlive;
  return RAG_OK;
}

/* {====== Statistics ======} */

void rag_bm25_stats_get(const rag_bm25 *b, rag_bm25_stats *s) {
  size_t i, bytes = sizeof *b, pb = 0;
  for (i = 0; i < b->nterms && b->vterm == NULL; i++) pb += b->terms[i].pcap;
  for (i = 0; i < b->ids.n; i++)
    if (b->docs[i].fwd != NULL) bytes += (size_t)b->docs[i].fwdlen + 1;
  bytes += pb + b->tcap * sizeof(term) + (b->tmask + 1) * sizeof(uint32_t) + b->poolcap;
  bytes += b->dcap * (sizeof(doc) + sizeof(uint32_t)) + rag_ids_memory(&b->ids);
  bytes += b->dtcap * sizeof(dterm) + b->qcap * sizeof(qterm) + b->qtcap;
  bytes += b->dmask > 0 ? (b->dmask + 1) * sizeof *b->dcells : 0;
  bytes += b->scap * (sizeof(double) + 3 * sizeof(uint32_t)) + b->hcap * sizeof(rag_hit);
  bytes += b->excap * sizeof(rag_bm25_term);
  s->docs = b->nlive;
  s->terms = b->live_terms;
  s->postings = b->live_postings;
  s->dead = b->dead_postings;
  s->bytes = 0;
  if (b->vterm != NULL) s->bytes = rag_bm25_le64(b->vterm + b->nterms * RAG_BM25_VENTRY + 4);
  for (i = 0; i < b->nterms && b->vterm == NULL; i++) s->bytes += b->terms[i].plen;
  s->memory = bytes;
  s->avgdl = b->nlive ? (double)b->total / (double)b->nlive : 0;
}

/* {====== Self-check ======} */

int rag_bm25_check(const rag_bm25 *b) {
  uint64_t *tfs, total = 0;
  uint32_t *nfwd;
  size_t i, d, live = 0, dead = 0, lterms = 0, nlive = 0, ndead = 0, idlen;
  const char *id;
  size_t ndocs = b->ids.n;
  int ok = 1;
  tfs = (uint64_t *)rag_malloc(ndocs * sizeof *tfs + 1);
  nfwd = (uint32_t *)rag_malloc(ndocs * sizeof *nfwd + 1);
  if (tfs == NULL || nfwd == NULL) {
    rag_free(tfs);
    rag_free(nfwd);
    return RAG_ENOMEM;
  }
  memset(tfs, 0, ndocs * sizeof *tfs);
  memset(nfwd, 0, ndocs * sizeof *nfwd);
  for (i = 0; i < b->nterms && ok; i++) {
    rag_bm25_tinfo ti;
    const uint8_t *p, *e;
    uint32_t next = 0, df = 0, nd = 0, x = 0, tf;
    rag_bm25_term_info(b, (uint32_t)i, &ti);
    p = ti.post;
    e = ti.plen ? p + ti.plen : p;
    while (p < e && ok) {
      p = rag_bm25_get_posting(p, &next, &x, &tf);
      if (x >= ndocs || tf == 0) ok = 0;
      else if (b->dl[x] == DEAD) nd++;
      else {
        df++;
        tfs[x] += tf;
      }
    }
    if (p != e || df != ti.df || rag_bm25_term_find(b, ti.s, ti.len, rag_fnv32(ti.s, ti.len)) != i)
      ok = 0;
    else if (b->vterm == NULL) {
      const term *t = &b->terms[i];
      if (nd != t->dead || (t->plen != 0 && next != t->next) || t->hash != rag_fnv32(ti.s, ti.len))
        ok = 0;
    } else if (nd != 0 || ti.plen == 0) {
      ok = 0;
    }
    live += df;
    dead += nd;
    lterms += df > 0;
  }
  for (d = 0; d < ndocs && ok; d++) {
    const doc *x = &b->docs[d];
    if (b->dl[d] == DEAD) {
      ndead++;
      if (x->fwd != NULL || rag_ids_linked(&b->ids, (uint32_t)d)) ok = 0;
      continue;
    }
    nlive++;
    total += b->dl[d];
    id = rag_ids_get(&b->ids, (uint32_t)d, &idlen);
    if ((x->fwd == NULL) != b->borrowed || tfs[d] != b->dl[d] ||
        !rag_ids_linked(&b->ids, (uint32_t)d) || rag_ids_find(&b->ids, id, idlen) != d)
      ok = 0;
    else if (!b->borrowed) {
      const uint8_t *p = x->fwd, *e = p + x->fwdlen;
      while (p < e) {
        uint64_t tid;
        p = rag_bm25_get_varint(p, &tid);
        if (tid >= b->nterms || tf_of(b->terms[tid].post, b->terms[tid].plen, (uint32_t)d) == 0)
          ok = 0;
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
