/*
** rag_index.c: the document index (see rag_index.h). BM25 and the vector
** index know a leaf chunk by its name "<doc id>#<n>"; the store turns a name
** back into the document and span with one lookup.
*/
#include "rag_index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rag_digest.h"
#include "rag_fuse.h"

/* One ranked list: names (borrowed from a part, valid during the search) and scores. */
typedef struct hitlist {
  const char **ids;
  size_t *lens;
  double *scores;
  size_t n, cap;
} hitlist;

/* The lists a search takes: text BM25, vectors, the fields, the questions. */
enum { L_BM25, L_VEC, L_KW, L_SUM, L_Q, NLISTS };

/* A name and score of one of the lists combine merges. */
struct entry {
  const char *id;
  size_t len;
  double score;
};

struct rag_index {
  rag_bm25 *b;
  rag_vec *v;
  rag_hnsw *h;
  rag_store *s;
  size_t dim;
  char *buf; /* a chunk's text or name */
  size_t bufcap;
  float *old; /* the vectors of a document being replaced */
  size_t oldcap;
  char *names; /* the chunk names a filter allows, end to end */
  size_t namescap, *noff, noffcap;
  const char **fids; /* ... and as an id filter */
  size_t *flens, fcap;
  uint32_t *mark; /* per document slot: the stamp of the last search that saw it */
  size_t markcap;
  uint32_t stamp;
  unsigned char *leaf; /* which chunks of a document being put are leaves */
  size_t leafcap;
  hitlist l[NLISTS];
  hitlist qraw;       /* the questions' hits, named by their chunks, before dedup */
  hitlist comb[2];    /* the lexical and vector lists with the fields merged in */
  const hitlist *fuse[2]; /* what gather fuses: l[L_BM25] or comb[0], l[L_VEC] or comb[1] */
  struct entry *ent;  /* combine's scratch */
  size_t entcap;
  char *qnames;       /* a filter's question names, end to end */
  size_t qnamescap;
  const char **qids;  /* ... as an id filter */
  size_t *qlens, qcap;
  rag_fused *fused;
  size_t fusedcap;
  rag_index_hit *hits;
  size_t hitscap;
  rag_analyzer *an; /* BM25's analyzer again, for keywords' spans (made on first use) */
  char *text;       /* a chunk's indexed text, for keywords */
  size_t textcap;
  size_t *pick;     /* keywords: the chosen terms' places in the explanation */
  size_t pickcap;
  rag_index_word *words;
  size_t wordscap;
};

/* Room for n bytes in ix->buf. */
static int need_buf(rag_index *ix, size_t n) {
  char *p = (char *)rag_grow(ix->buf, &ix->bufcap, n, 1);
  if (p == NULL) return RAG_ENOMEM;
  ix->buf = p;
  return RAG_OK;
}

int rag_index_new(rag_bm25 *b, rag_vec *v, rag_hnsw *h, rag_store *s, rag_index **out) {
  rag_index *ix;
  size_t longest = 64;
  *out = NULL;
  ix = (rag_index *)rag_malloc(sizeof *ix);
  if (ix == NULL) return RAG_ENOMEM;
  memset(ix, 0, sizeof *ix);
  ix->b = b;
  ix->v = v;
  ix->h = h;
  ix->s = s;
  ix->dim = v != NULL ? rag_vec_config(v)->dim : h != NULL ? rag_hnsw_config(h)->dim : 0;
  if (rag_store_longest_id(s) + 11 > longest) /* room for every name (remove_leaves) */
    longest = rag_store_longest_id(s) + 11;
  if (need_buf(ix, longest) != RAG_OK) {
    rag_free(ix);
    return RAG_ENOMEM;
  }
  *out = ix;
  return RAG_OK;
}

static void hitlist_free(hitlist *l) {
  rag_free(l->ids);
  rag_free(l->lens);
  rag_free(l->scores);
}

void rag_index_free(rag_index *ix) {
  if (ix == NULL) return;
  rag_bm25_free(ix->b);
  rag_vec_free(ix->v);
  rag_hnsw_free(ix->h);
  rag_store_free(ix->s);
  rag_free(ix->buf);
  rag_free(ix->old);
  rag_free(ix->names);
  rag_free(ix->noff);
  rag_free(ix->fids);
  rag_free(ix->flens);
  rag_free(ix->mark);
  rag_free(ix->leaf);
  {
    int i;
    for (i = 0; i < NLISTS; i++) hitlist_free(&ix->l[i]);
  }
  hitlist_free(&ix->qraw);
  hitlist_free(&ix->comb[0]);
  hitlist_free(&ix->comb[1]);
  rag_free(ix->ent);
  rag_free(ix->qnames);
  rag_free((void *)ix->qids);
  rag_free(ix->qlens);
  rag_free(ix->fused);
  rag_free(ix->hits);
  rag_analyzer_free(ix->an);
  rag_free(ix->text);
  rag_free(ix->pick);
  rag_free(ix->words);
  rag_free(ix);
}

void rag_index_attach(rag_index *ix, rag_vec *v, rag_hnsw *h) {
  ix->v = v;
  ix->h = h;
  ix->dim = v != NULL ? rag_vec_config(v)->dim : h != NULL ? rag_hnsw_config(h)->dim : 0;
}

int rag_index_to_hnsw(rag_index *ix, rag_hnsw *h) {
  size_t nd = rag_store_count(ix->s), i, j;
  uint32_t *order;
  float *x;
  int rc = RAG_OK;
  if (ix->v == NULL || rag_hnsw_count(h) != 0 || rag_hnsw_config(h)->dim != ix->dim)
    return RAG_EINVAL;
  order = (uint32_t *)rag_malloc((nd + 1) * sizeof *order);
  x = (float *)rag_malloc(ix->dim * sizeof *x);
  if (order == NULL || x == NULL || rag_store_order(ix->s, order) != RAG_OK) rc = RAG_ENOMEM;
  for (i = 0; rc == RAG_OK && i < nd; i++) {
    const rag_store_doc *d = rag_store_doc_at(ix->s, order[i]);
    for (j = 0; rc == RAG_OK && j < d->nchunks; j++) {
      size_t nl;
      rag_vec_bad bad;
      if (!d->chunks[j].leaf) continue;
      nl = rag_store_chunk_name(ix->buf, d->id, d->idlen, (uint32_t)j + 1);
      if (!rag_vec_get(ix->v, ix->buf, nl, x)) rc = RAG_EINVAL; /* parts out of step */
      else rc = rag_hnsw_add(h, ix->buf, nl, x, &bad);
    }
  }
  rag_free(order);
  rag_free(x);
  if (rc != RAG_OK) return rc;
  rag_vec_free(ix->v);
  ix->v = NULL;
  ix->h = h;
  return RAG_OK;
}

rag_bm25 *rag_index_bm25(const rag_index *ix) {
  return ix->b;
}

rag_vec *rag_index_vec(const rag_index *ix) {
  return ix->v;
}

rag_hnsw *rag_index_hnsw(const rag_index *ix) {
  return ix->h;
}

rag_store *rag_index_store(const rag_index *ix) {
  return ix->s;
}

size_t rag_index_dim(const rag_index *ix) {
  return ix->dim;
}

size_t rag_index_text_size(const rag_store_doc *d, const rag_store_chunk *c) {
  size_t n = (size_t)(c->stop - c->start) + 1;
  return d->has_title && d->titlelen > 0 ? d->titlelen + 1 + n : n;
}

size_t rag_index_text(const rag_store_doc *d, const rag_store_chunk *c, char *buf) {
  size_t n = (size_t)(c->stop - c->start) + 1, at = 0;
  if (d->has_title && d->titlelen > 0) {
    memcpy(buf, d->title, d->titlelen);
    buf[d->titlelen] = '\n';
    at = d->titlelen + 1;
  }
  memcpy(buf + at, d->text + c->start - 1, n);
  return at + n;
}

/* {====== Changes ======} */

int rag_index_hash(const rag_store_doc *d, unsigned char out[RAG_STORE_HASH]) {
  unsigned char n1[10], n2[10], n3[10], flag = (unsigned char)(d->has_title != 0);
  const void *part[7];
  size_t len[7];
  part[0] = n1, len[0] = rag_put_varint(n1, d->textlen);
  part[1] = d->text, len[1] = d->textlen;
  part[2] = &flag, len[2] = 1;
  part[3] = n2, len[3] = rag_put_varint(n2, d->titlelen);
  part[4] = d->titlelen > 0 ? d->title : "", len[4] = d->titlelen;
  part[5] = n3, len[5] = rag_put_varint(n3, d->metalen);
  part[6] = d->metalen > 0 ? (const void *)d->meta : "", len[6] = d->metalen;
  return rag_digest_sha256_parts(part, len, 7, out);
}

/* Never fails: put and remove made the vectors their own first (rag_vec_own). */
static void vec_remove(rag_index *ix, const char *name, size_t len) {
  int removed;
  if (ix->v != NULL) (void)rag_vec_remove(ix->v, name, len, &removed);
  if (ix->h != NULL) rag_hnsw_remove(ix->h, name, len, &removed);
}

/*
** Takes d's chunks out of BM25 and the vectors (only its leaves are there;
** with `all`, every name d could have had). ix->buf always has room for a
** stored document's names (see rag_index_new and rag_index_put), so this
** never fails.
*/
static void remove_leaves(rag_index *ix, const rag_store_doc *d, int all) {
  size_t i;
  for (i = 0; i < d->nchunks; i++) {
    size_t len;
    int removed;
    if (!all && !d->chunks[i].leaf) continue;
    len = rag_store_chunk_name(ix->buf, d->id, d->idlen, (uint32_t)i + 1);
    (void)rag_bm25_remove(ix->b, ix->buf, len, &removed); /* owned: cannot fail */
    vec_remove(ix, ix->buf, len);
  }
}

/* Works out which chunks of an input document are leaves, into ix->leaf. */
static int find_leaves(rag_index *ix, const rag_store_doc *d) {
  size_t i;
  unsigned char *p = (unsigned char *)rag_grow(ix->leaf, &ix->leafcap, d->nchunks + 1, 1);
  if (p == NULL) return RAG_ENOMEM;
  ix->leaf = p;
  memset(p, 1, d->nchunks);
  for (i = 0; i < d->nchunks; i++)
    if (d->chunks[i].parent > 0) p[d->chunks[i].parent - 1] = 0;
  return RAG_OK;
}

/* Adds d's leaves to BM25 and, from vecs, the vectors; `input`: leaves in ix->leaf. */
static int add_leaves(rag_index *ix, const rag_store_doc *d, const float *vecs, int input,
                      size_t *errpos, rag_vec_bad *bad) {
  size_t i, leaf = 0;
  for (i = 0; i < d->nchunks; i++) {
    const rag_store_chunk *c = &d->chunks[i];
    size_t tl, nl;
    int rc;
    if (input ? !ix->leaf[i] : !c->leaf) continue;
    tl = rag_index_text_size(d, c);
    if ((rc = need_buf(ix, tl + d->idlen + 11)) != RAG_OK) return rc;
    nl = rag_store_chunk_name(ix->buf, d->id, d->idlen, (uint32_t)i + 1);
    (void)rag_index_text(d, c, ix->buf + nl);
    rc = rag_bm25_add(ix->b, ix->buf, nl, ix->buf + nl, tl, errpos);
    if (rc == RAG_OK && ix->v != NULL) rc = rag_vec_add(ix->v, ix->buf, nl, vecs + leaf * ix->dim, bad);
    if (rc == RAG_OK && ix->h != NULL)
      rc = rag_hnsw_add(ix->h, ix->buf, nl, vecs + leaf * ix->dim, bad);
    if (rc != RAG_OK) {
      int removed;
      (void)rag_bm25_remove(ix->b, ix->buf, nl, &removed); /* owned: cannot fail */
      if (rc == RAG_EENCODING && d->has_title && d->titlelen > 0)
        *errpos = *errpos > d->titlelen + 1 ? *errpos - d->titlelen - 1 : 0;
      return rc;
    }
    leaf++;
  }
  return RAG_OK;
}

/* Keeps a copy of the vectors of d's leaves in ix->old. */
static int keep_vectors(rag_index *ix, const rag_store_doc *d) {
  size_t i, leaf = 0, leaves = 0;
  char *name;
  for (i = 0; i < d->nchunks; i++) leaves += d->chunks[i].leaf;
  if (ix->dim == 0 || leaves == 0) return RAG_OK;
  if (RAG_MUL_OVERFLOWS(leaves, ix->dim)) return RAG_ENOMEM;
  {
    float *p = (float *)rag_grow(ix->old, &ix->oldcap, leaves * ix->dim, sizeof(float));
    if (p == NULL) return RAG_ENOMEM;
    ix->old = p;
  }
  if (need_buf(ix, d->idlen + 11) != RAG_OK) return RAG_ENOMEM;
  name = ix->buf;
  for (i = 0; i < d->nchunks; i++) {
    size_t len;
    float *out = ix->old + leaf * ix->dim;
    if (!d->chunks[i].leaf) continue;
    len = rag_store_chunk_name(name, d->id, d->idlen, (uint32_t)i + 1);
    if (ix->v != NULL) (void)rag_vec_get(ix->v, name, len, out);
    if (ix->h != NULL) (void)rag_hnsw_get(ix->h, name, len, out);
    leaf++;
  }
  return RAG_OK;
}

/* The parts of a mapped index take their own copies before the first change,
** so that removing can never fail halfway through a put or a remove. */
static int own_parts(rag_index *ix) {
  int rc = rag_bm25_own(ix->b);
  if (rc == RAG_OK && ix->v != NULL) rc = rag_vec_own(ix->v);
  return rc;
}

int rag_index_put(rag_index *ix, const rag_store_doc *d, const float *vecs, size_t *errpos,
                  rag_vec_bad *bad) {
  uint32_t slot;
  const rag_store_doc *old = NULL;
  int rc;
  *errpos = 0;
  if ((rc = rag_store_check_doc(d)) != RAG_OK) return rc;
  if (ix->dim > 0 && vecs == NULL) return RAG_EINVAL;
  if ((rc = own_parts(ix)) != RAG_OK) return rc;
  if ((rc = need_buf(ix, d->idlen + 11)) != RAG_OK || (rc = find_leaves(ix, d)) != RAG_OK)
    return rc;
  slot = rag_store_find(ix->s, d->id, d->idlen);
  if (slot != RAG_IDS_NONE) {
    old = rag_store_doc_at(ix->s, slot);
    if ((rc = keep_vectors(ix, old)) != RAG_OK) return rc;
    remove_leaves(ix, old, 0);
  }
  rc = add_leaves(ix, d, vecs, 1, errpos, bad);
  if (rc == RAG_OK) rc = rag_store_put(ix->s, d);
  if (rc == RAG_OK) return RAG_OK;
  remove_leaves(ix, d, 1); /* the new leaves out again, then the old ones back */
  if (old != NULL) {
    size_t pos;
    rag_vec_bad b2;
    if (add_leaves(ix, old, ix->old, 0, &pos, &b2) != RAG_OK) {
      int removed;
      remove_leaves(ix, old, 0);
      rag_store_remove(ix->s, d->id, d->idlen, &removed);
    }
  }
  return rc;
}

int rag_index_remove(rag_index *ix, const char *id, size_t len, int *removed) {
  uint32_t slot = rag_store_find(ix->s, id, len);
  *removed = 0;
  if (slot == RAG_IDS_NONE) return RAG_OK;
  if (own_parts(ix) != RAG_OK) return RAG_ENOMEM;
  remove_leaves(ix, rag_store_doc_at(ix->s, slot), 0);
  rag_store_remove(ix->s, id, len, removed);
  return RAG_OK;
}

/* {====== Searching ======} */

static int hitlist_fit(hitlist *l, size_t n) {
  size_t c1 = l->cap, c2 = l->cap, c3 = l->cap;
  const char **ids = (const char **)rag_grow((void *)l->ids, &c1, n, sizeof *ids);
  size_t *lens;
  double *scores;
  if (ids == NULL) return RAG_ENOMEM;
  l->ids = ids;
  lens = (size_t *)rag_grow(l->lens, &c2, n, sizeof *lens);
  if (lens == NULL) return RAG_ENOMEM;
  l->lens = lens;
  scores = (double *)rag_grow(l->scores, &c3, n, sizeof *scores);
  if (scores == NULL) return RAG_ENOMEM;
  l->scores = scores;
  l->cap = c1 < c2 ? (c1 < c3 ? c1 : c3) : (c2 < c3 ? c2 : c3);
  return RAG_OK;
}

/* The chunk names the filter allows, as an id filter in *f; *none when none. */
static int build_filter(rag_index *ix, const rag_store_filter *sf, rag_id_filter *f) {
  const rag_store *s = ix->s;
  size_t nd = rag_store_count(s), used = 0, count = 0, i, total;
  uint32_t stamp;
  int rc;
  char *names;
  if (nd > ix->markcap) {
    size_t cap = ix->markcap;
    uint32_t *m = (uint32_t *)rag_grow(ix->mark, &cap, nd, sizeof *m);
    if (m == NULL) return RAG_ENOMEM;
    memset(m + ix->markcap, 0, (cap - ix->markcap) * sizeof *m);
    ix->mark = m;
    ix->markcap = cap;
  }
  if (++ix->stamp == 0) { /* wrapped: start the stamps again */
    memset(ix->mark, 0, ix->markcap * sizeof *ix->mark);
    ix->stamp = 1;
  }
  stamp = ix->stamp;
  if (sf->docs != NULL) {
    for (i = 0; i < sf->docs->n; i++) {
      uint32_t slot = rag_store_find(s, sf->docs->ids[i], sf->docs->lens[i]);
      if (slot != RAG_IDS_NONE) ix->mark[slot] = stamp;
    }
  }
  for (i = 0; i < nd; i++) { /* the names, end to end, with their offsets */
    const rag_store_doc *d;
    size_t j;
    if (sf->docs != NULL ? ix->mark[i] != stamp : 0) continue;
    if (!rag_store_matches(s, (uint32_t)i, sf)) continue;
    d = rag_store_doc_at(s, (uint32_t)i);
    for (j = 0; j < d->nchunks; j++) {
      if (!d->chunks[j].leaf) continue;
      names = (char *)rag_grow(ix->names, &ix->namescap, used + d->idlen + 11, 1);
      if (names == NULL) return RAG_ENOMEM;
      ix->names = names;
      {
        size_t *off = (size_t *)rag_grow(ix->noff, &ix->noffcap, count + 2, sizeof *off);
        if (off == NULL) return RAG_ENOMEM;
        ix->noff = off;
      }
      ix->noff[count++] = used;
      used += rag_store_chunk_name(ix->names + used, d->id, d->idlen, (uint32_t)j + 1);
    }
  }
  total = count;
  if (total > ix->fcap) {
    size_t c1 = ix->fcap, c2 = ix->fcap;
    const char **ids = (const char **)rag_grow((void *)ix->fids, &c1, total, sizeof *ids);
    size_t *lens;
    if (ids == NULL) return RAG_ENOMEM;
    ix->fids = ids;
    lens = (size_t *)rag_grow(ix->flens, &c2, total, sizeof *lens);
    if (lens == NULL) return RAG_ENOMEM;
    ix->flens = lens;
    ix->fcap = c1 < c2 ? c1 : c2;
  }
  for (i = 0; i < count; i++) {
    size_t end = i + 1 < count ? ix->noff[i + 1] : used;
    ix->fids[i] = ix->names + ix->noff[i];
    ix->flens[i] = end - ix->noff[i];
  }
  f->ids = ix->fids;
  f->lens = ix->flens;
  f->n = count;
  rc = RAG_OK;
  return rc;
}

/* The BM25 list of b, up to `fetch` hits, into l. */
static int list_bm25(rag_bm25 *b, hitlist *l, const rag_index_query *q, size_t fetch,
                     const rag_id_filter *f, rag_ahead *ahead, size_t *errpos) {
  const rag_hit *h;
  size_t n, i;
  int rc = rag_bm25_search(b, q->text, q->len, fetch, f, ahead, &h, &n, errpos);
  if (rc != RAG_OK) return rc;
  if ((rc = hitlist_fit(l, n + 1)) != RAG_OK) return rc;
  for (i = 0; i < n; i++) {
    l->ids[i] = rag_bm25_id(b, h[i].id, &l->lens[i]);
    l->scores[i] = h[i].score;
  }
  l->n = n;
  return RAG_OK;
}

/* The hits h[0..n) of v or hn into l. */
static int vec_hits(rag_vec *v, rag_hnsw *hn, hitlist *l, const rag_hit *h, size_t n) {
  size_t i;
  int rc;
  if ((rc = hitlist_fit(l, n + 1)) != RAG_OK) return rc;
  for (i = 0; i < n; i++) {
    l->ids[i] = v != NULL ? rag_vec_id(v, h[i].id, &l->lens[i]) : rag_hnsw_id(hn, h[i].id, &l->lens[i]);
    l->scores[i] = h[i].score;
  }
  l->n = n;
  return RAG_OK;
}

/* The vector list of v or h, up to `fetch` hits, into l. */
static int list_vec(rag_vec *v, rag_hnsw *hn, hitlist *l, const rag_index_query *q,
                    size_t fetch, const rag_id_filter *f, rag_vec_bad *bad) {
  const rag_hit *h;
  size_t n;
  int rc = v != NULL ? rag_vec_search(v, q->vec, fetch, f, &h, &n, bad)
                     : rag_hnsw_search(hn, q->vec, fetch, q->ef, f, &h, &n, bad);
  return rc != RAG_OK ? rc : vec_hits(v, hn, l, h, n);
}

static int entry_name_cmp(const void *a, const void *b) {
  const struct entry *x = (const struct entry *)a, *y = (const struct entry *)b;
  int c = memcmp(x->id, y->id, x->len < y->len ? x->len : y->len);
  if (c != 0) return c;
  return x->len < y->len ? -1 : x->len > y->len;
}

static int entry_score_cmp(const void *a, const void *b) {
  const struct entry *x = (const struct entry *)a, *y = (const struct entry *)b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  return entry_name_cmp(a, b);
}

/*
** Merges n lists by name into out, best first, ties by name, at most
** `limit`: a name scores the sum of w[i] times its score in list i, or
** with `best` its highest score.
*/
static int combine(rag_index *ix, hitlist *out, const hitlist *const *in, const double *w,
                   size_t n, int best, size_t limit) {
  size_t total = 0, i, j, m = 0;
  struct entry *e;
  int rc;
  for (i = 0; i < n; i++) total += in[i]->n;
  e = (struct entry *)rag_grow(ix->ent, &ix->entcap, total + 1, sizeof *e);
  if (e == NULL) return RAG_ENOMEM;
  ix->ent = e;
  for (i = 0; i < n; i++)
    for (j = 0; j < in[i]->n; j++, m++) {
      e[m].id = in[i]->ids[j];
      e[m].len = in[i]->lens[j];
      e[m].score = best ? in[i]->scores[j] : w[i] * in[i]->scores[j];
    }
  qsort(e, total, sizeof *e, entry_name_cmp);
  for (i = 0, m = 0; i < total; i++) {
    if (m > 0 && e[m - 1].len == e[i].len && memcmp(e[m - 1].id, e[i].id, e[i].len) == 0) {
      if (!best) e[m - 1].score += e[i].score;
      else if (e[i].score > e[m - 1].score) e[m - 1].score = e[i].score;
      continue;
    }
    e[m++] = e[i];
  }
  qsort(e, m, sizeof *e, entry_score_cmp);
  if (m > limit) m = limit;
  if ((rc = hitlist_fit(out, m + 1)) != RAG_OK) return rc;
  for (i = 0; i < m; i++) {
    out->ids[i] = e[i].id;
    out->lens[i] = e[i].len;
    out->scores[i] = e[i].score;
  }
  out->n = m;
  return RAG_OK;
}

static size_t ndigits(uint32_t k) {
  size_t d = 1;
  while (k >= 10) k /= 10, d++;
  return d;
}

/* The question names "<name>?<k>" of the chunk names f allows, as an id filter in *qf. */
static int question_filter(rag_index *ix, const rag_id_filter *f, uint32_t qmax, rag_id_filter *qf) {
  size_t total = 0, count, i, at = 0, m = 0;
  uint32_t k;
  char *p;
  size_t per = 0; /* bytes of the suffixes "?1" .. "?qmax" together */
  if (RAG_MUL_OVERFLOWS(f->n, (size_t)qmax)) return RAG_ENOMEM;
  count = f->n * qmax;
  for (k = 1; k <= qmax; k++) per += 1 + ndigits(k);
  if (RAG_MUL_OVERFLOWS(per, f->n)) return RAG_ENOMEM;
  total = per * f->n;
  for (i = 0; i < f->n; i++) {
    if (RAG_MUL_OVERFLOWS(f->lens[i], (size_t)qmax) ||
        total + f->lens[i] * qmax < total) return RAG_ENOMEM;
    total += f->lens[i] * qmax;
  }
  if (total + 1 == 0) return RAG_ENOMEM;
  p = (char *)rag_grow(ix->qnames, &ix->qnamescap, total + 1, 1);
  if (p == NULL) return RAG_ENOMEM;
  ix->qnames = p;
  if (count + 1 > ix->qcap) {
    size_t c1 = ix->qcap, c2 = ix->qcap;
    const char **ids = (const char **)rag_grow((void *)ix->qids, &c1, count + 1, sizeof *ids);
    size_t *lens;
    if (ids == NULL) return RAG_ENOMEM;
    ix->qids = ids;
    lens = (size_t *)rag_grow(ix->qlens, &c2, count + 1, sizeof *lens);
    if (lens == NULL) return RAG_ENOMEM;
    ix->qlens = lens;
    ix->qcap = c1 < c2 ? c1 : c2;
  }
  for (i = 0; i < f->n; i++)
    for (k = 1; k <= qmax; k++) {
      char num[12];
      size_t d = ndigits(k), j;
      uint32_t v = k;
      for (j = d; j > 0; j--, v /= 10) num[j - 1] = (char)('0' + v % 10);
      ix->qids[m] = p + at;
      memcpy(p + at, f->ids[i], f->lens[i]);
      at += f->lens[i];
      p[at++] = '?';
      memcpy(p + at, num, d);
      at += d;
      ix->qlens[m] = f->lens[i] + 1 + d;
      m++;
    }
  qf->ids = ix->qids;
  qf->lens = ix->qlens;
  qf->n = m;
  return RAG_OK;
}

/*
** The questions' list into l[L_Q]: a chunk by its best question (a
** question's name without its "?k"), best first.
*/
static int list_questions(rag_index *ix, const rag_index_query *q, size_t fetch,
                          const rag_id_filter *f, rag_vec_bad *bad) {
  const rag_index_fields *fl = q->fields;
  hitlist *raw = &ix->qraw;
  const hitlist *in = raw;
  rag_id_filter qf;
  size_t i, deep;
  int rc;
  if (RAG_MUL_OVERFLOWS(fetch, (size_t)fl->qmax)) return RAG_ENOMEM;
  deep = fetch * fl->qmax;
  if (f != NULL && (rc = question_filter(ix, f, fl->qmax, &qf)) != RAG_OK) return rc;
  rc = list_vec(fl->q, fl->qh, &ix->qraw, q, deep, f != NULL ? &qf : NULL, bad);
  if (rc != RAG_OK) return rc;
  for (i = 0; i < raw->n; i++) { /* the chunk's name: up to the last '?' */
    size_t len = raw->lens[i];
    while (len > 0 && raw->ids[i][len - 1] != '?') len--;
    raw->lens[i] = len > 0 ? len - 1 : raw->lens[i];
  }
  return combine(ix, &ix->l[L_Q], &in, NULL, 1, 1, fetch);
}

/* The lexical and vector lists gather fuses, the fields and questions merged in. */
static int lists(rag_index *ix, const rag_index_query *q, size_t fetch, const rag_id_filter *fp,
                 int bm, int vec, size_t *errpos, rag_vec_bad *bad) {
  const rag_index_fields *fl = q->fields;
  rag_ahead *ahead = NULL;
  int rc, i;
  ix->fuse[0] = &ix->l[L_BM25];
  ix->fuse[1] = &ix->l[L_VEC];
  for (i = 0; i < NLISTS; i++) ix->l[i].n = 0;
  /* The exact search's last pass reads its candidates' rows from memory:
  ** BM25 asks for them as it goes, so that they come while it computes. */
  if (vec && ix->v != NULL) {
    if ((rc = rag_vec_search_start(ix->v, q->vec, fetch, fp, bad)) != RAG_OK) return rc;
    ahead = rag_vec_search_ahead(ix->v);
  }
  if (bm) {
    const hitlist *in[1 + RAG_INDEX_FIELDS];
    double w[1 + RAG_INDEX_FIELDS];
    size_t n = 1;
    if ((rc = list_bm25(ix->b, &ix->l[L_BM25], q, fetch, fp, ahead, errpos)) != RAG_OK) return rc;
    in[0] = &ix->l[L_BM25];
    w[0] = 1;
    for (i = 0; fl != NULL && i < RAG_INDEX_FIELDS; i++) {
      hitlist *l = &ix->l[L_KW + i];
      if (fl->bm25[i] == NULL || !(fl->weight[i] > 0)) continue;
      if ((rc = list_bm25(fl->bm25[i], l, q, fetch, fp, ahead, errpos)) != RAG_OK) return rc;
      in[n] = l;
      w[n++] = fl->weight[i];
    }
    if (n > 1) {
      if ((rc = combine(ix, &ix->comb[0], in, w, n, 0, fetch)) != RAG_OK) return rc;
      ix->fuse[0] = &ix->comb[0];
    }
  }
  if (vec) {
    if (ix->v != NULL) {
      const rag_hit *h;
      size_t n;
      rag_vec_search_finish(ix->v, &h, &n);
      rc = vec_hits(ix->v, NULL, &ix->l[L_VEC], h, n);
    } else {
      rc = list_vec(NULL, ix->h, &ix->l[L_VEC], q, fetch, fp, bad);
    }
    if (rc != RAG_OK) return rc;
    if (fl != NULL && (fl->q != NULL || fl->qh != NULL) && fl->qmax > 0) {
      const hitlist *in[2];
      if ((rc = list_questions(ix, q, fetch, fp, bad)) != RAG_OK) return rc;
      in[0] = &ix->l[L_VEC];
      in[1] = &ix->l[L_Q];
      if ((rc = combine(ix, &ix->comb[1], in, NULL, 2, 1, fetch)) != RAG_OK) return rc;
      ix->fuse[1] = &ix->comb[1];
    }
  }
  return RAG_OK;
}

/* The place (1-based) of a name in list l, 0 when absent. */
static uint32_t rank_in(const hitlist *l, const char *id, size_t len) {
  size_t i;
  for (i = 0; i < l->n; i++)
    if (l->lens[i] == len && memcmp(l->ids[i], id, len) == 0) return (uint32_t)i + 1;
  return 0;
}

static int need_hits(rag_index *ix, size_t n) {
  rag_index_hit *h = (rag_index_hit *)rag_grow(ix->hits, &ix->hitscap, n, sizeof *h);
  if (h == NULL) return RAG_ENOMEM;
  ix->hits = h;
  return RAG_OK;
}

/*
** The fused (or single) list as hits in ix->hits; returns their count. Only
** the best k are fused in order and found in the store, unless hits are
** grouped by document, which may need more.
*/
static int gather(rag_index *ix, const rag_index_query *q, size_t *count) {
  size_t n, i, m = 0, want = q->group ? SIZE_MAX : q->k;
  int rc;
  if (q->mode == RAG_INDEX_HYBRID) {
    rag_fuse_list fl[2];
    size_t total = ix->fuse[0]->n + ix->fuse[1]->n;
    rag_fused *f = (rag_fused *)rag_grow(ix->fused, &ix->fusedcap, total + 1, sizeof *f);
    if (f == NULL) return RAG_ENOMEM;
    ix->fused = f;
    for (i = 0; i < 2; i++) {
      fl[i].ids = ix->fuse[i]->ids;
      fl[i].lens = ix->fuse[i]->lens;
      fl[i].scores = NULL;
      fl[i].n = ix->fuse[i]->n;
    }
    fl[0].weight = q->w_bm25;
    fl[1].weight = q->w_vec;
    rc = rag_fuse_rrf(fl, 2, q->rrf_k, q->rrf_base, 1, want, ix->fused, &n);
    if (rc != RAG_OK) return rc;
  } else {
    const hitlist *l = ix->fuse[q->mode == RAG_INDEX_BM25 ? 0 : 1];
    rag_fused *f = (rag_fused *)rag_grow(ix->fused, &ix->fusedcap, l->n + 1, sizeof *f);
    if (f == NULL) return RAG_ENOMEM;
    ix->fused = f;
    for (i = 0; i < l->n; i++) {
      f[i].id = l->ids[i];
      f[i].len = l->lens[i];
      f[i].score = l->scores[i];
    }
    n = l->n;
  }
  if ((rc = need_hits(ix, n + 1)) != RAG_OK) return rc;
  for (i = 0; i < n && m < want; i++) {
    rag_index_hit *h = &ix->hits[m];
    if (!rag_store_chunk_find(ix->s, ix->fused[i].id, ix->fused[i].len, &h->doc, &h->chunk))
      continue; /* cannot happen while the parts are in step */
    h->start = h->stop = 0; /* set for the hits kept (spans), not for every candidate */
    h->score = ix->fused[i].score;
    h->rank_bm25 = h->rank_vec = h->rank_q = 0;
    memset(h->rank_field, 0, sizeof h->rank_field);
    m++;
  }
  *count = m;
  return RAG_OK;
}

/* The byte at i of the name id#n whose suffix "#n" is in sfx. */
static unsigned char name_byte(const rag_store_doc *d, const char *sfx, size_t i) {
  return (unsigned char)(i < d->idlen ? d->id[i] : sfx[i - d->idlen]);
}

/* Bytewise order of two hits' chunk names, without building them. */
static int name_cmp(const rag_store *s, const rag_index_hit *a, const rag_index_hit *b) {
  char x[16], y[16];
  const rag_store_doc *da = rag_store_doc_at(s, a->doc), *db = rag_store_doc_at(s, b->doc);
  size_t lx = da->idlen + rag_store_chunk_name(x, "", 0, a->chunk);
  size_t ly = db->idlen + rag_store_chunk_name(y, "", 0, b->chunk);
  size_t i, n = lx < ly ? lx : ly;
  for (i = 0; i < n; i++) {
    unsigned char cx = name_byte(da, x, i), cy = name_byte(db, y, i);
    if (cx != cy) return cx < cy ? -1 : 1;
  }
  return lx < ly ? -1 : lx > ly;
}

/* Sorts hits best first, ties by name (insertion sort: a few dozen hits). */
static void sort_hits(const rag_store *s, rag_index_hit *h, size_t n) {
  size_t i, j;
  for (i = 1; i < n; i++) {
    rag_index_hit t = h[i];
    for (j = i; j > 0; j--) {
      const rag_index_hit *p = &h[j - 1];
      if (p->score > t.score || (p->score == t.score && name_cmp(s, p, &t) < 0)) break;
      h[j] = h[j - 1];
    }
    h[j] = t;
  }
}

/* Replaces hit children by their parent wherever at least `ratio` of its children are hit. */
static void merge_parents(rag_index *ix, double ratio, size_t *count) {
  size_t n = *count, i, j;
  int changed = 1;
  while (changed) {
    changed = 0;
    for (i = 0; i < n; i++) {
      const rag_store_doc *d = rag_store_doc_at(ix->s, ix->hits[i].doc);
      uint32_t p = d->chunks[ix->hits[i].chunk - 1].parent;
      size_t children = 0, hit = 0, k;
      double sum = 0;
      if (p == 0) continue;
      for (k = p; k < d->nchunks; k++) children += d->chunks[k].parent == p;
      for (j = 0; j < n; j++)
        if (ix->hits[j].doc == ix->hits[i].doc &&
            d->chunks[ix->hits[j].chunk - 1].parent == p) {
          hit++;
          sum += ix->hits[j].score;
        }
      if (children == 0 || (double)hit < ratio * (double)children) continue;
      /* the parent takes the first child's place; the other children go */
      ix->hits[i].chunk = p;
      ix->hits[i].start = d->chunks[p - 1].start;
      ix->hits[i].stop = d->chunks[p - 1].stop;
      ix->hits[i].score = sum / (double)hit;
      ix->hits[i].rank_bm25 = ix->hits[i].rank_vec = ix->hits[i].rank_q = 0;
      memset(ix->hits[i].rank_field, 0, sizeof ix->hits[i].rank_field);
      for (j = i + 1, k = i + 1; j < n; j++) {
        if (ix->hits[j].doc == ix->hits[i].doc &&
            d->chunks[ix->hits[j].chunk - 1].parent == p)
          continue;
        ix->hits[k++] = ix->hits[j];
      }
      n = k;
      changed = 1;
    }
  }
  sort_hits(ix->s, ix->hits, n);
  *count = n;
}

/* Keeps the first hit of each document. */
static size_t group_docs(rag_index *ix, size_t n) {
  size_t i, m = 0, nd = rag_store_count(ix->s);
  if (nd > ix->markcap) { /* the marks cover every slot (build_filter grows them too) */
    size_t cap = ix->markcap;
    uint32_t *mk = (uint32_t *)rag_grow(ix->mark, &cap, nd, sizeof *mk);
    if (mk == NULL) return SIZE_MAX;
    memset(mk + ix->markcap, 0, (cap - ix->markcap) * sizeof *mk);
    ix->mark = mk;
    ix->markcap = cap;
  }
  if (++ix->stamp == 0) {
    memset(ix->mark, 0, ix->markcap * sizeof *ix->mark);
    ix->stamp = 1;
  }
  for (i = 0; i < n; i++) {
    uint32_t doc = ix->hits[i].doc;
    if (ix->mark[doc] == ix->stamp) continue;
    ix->mark[doc] = ix->stamp;
    ix->hits[m++] = ix->hits[i];
  }
  return m;
}

/* Widens each hit to `w` chunks of its level either side. */
static void widen(rag_index *ix, uint32_t w, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    rag_index_hit *h = &ix->hits[i];
    const rag_store_doc *d = rag_store_doc_at(ix->s, h->doc);
    uint32_t level = d->chunks[h->chunk - 1].level, seen;
    size_t k;
    for (k = h->chunk - 1, seen = 0; k > 0 && seen < w; k--) {
      const rag_store_chunk *c = &d->chunks[k - 1];
      if (c->level != level) break;
      if (c->start < h->start) h->start = c->start;
      if (c->stop > h->stop) h->stop = c->stop;
      seen++;
    }
    for (k = h->chunk, seen = 0; k < d->nchunks && seen < w; k++) {
      const rag_store_chunk *c = &d->chunks[k];
      if (c->level != level) break;
      if (c->start < h->start) h->start = c->start;
      if (c->stop > h->stop) h->stop = c->stop;
      seen++;
    }
  }
}

int rag_index_search(rag_index *ix, const rag_index_query *q, const rag_index_hit **hits,
                     size_t *n, size_t *errpos, rag_vec_bad *bad) {
  rag_id_filter f, *fp = NULL;
  size_t fetch = q->fetch_k > q->k ? q->fetch_k : q->k, count = 0, i;
  int rc, bm = q->mode != RAG_INDEX_VECTOR, vec = q->mode != RAG_INDEX_BM25;
  *hits = NULL;
  *n = 0;
  *errpos = 0;
  if (vec && ix->dim == 0) return RAG_EINVAL;
  ix->l[L_BM25].n = ix->l[L_VEC].n = 0;
  if (q->filter != NULL) {
    if ((rc = build_filter(ix, q->filter, &f)) != RAG_OK) return rc;
    if (f.n == 0) return RAG_OK;
    fp = &f;
  }
  if (q->k == 0) return RAG_OK;
  for (;;) {
    int more;
    if ((rc = lists(ix, q, fetch, fp, bm, vec, errpos, bad)) != RAG_OK) return rc;
    if ((rc = gather(ix, q, &count)) != RAG_OK) return rc;
    if (q->merge > 0) {
      if (count > q->k) count = q->k;
      merge_parents(ix, q->merge, &count);
    }
    if (q->group && (count = group_docs(ix, count)) == SIZE_MAX) return RAG_ENOMEM;
    /* too few documents, while a list may hold more: fetch deeper */
    more = (bm && ix->fuse[0]->n == fetch) || (vec && ix->fuse[1]->n == fetch);
    if (count >= q->k || !q->group || !more || fetch > SIZE_MAX / 2) break;
    fetch *= 2;
  }
  if (count > q->k) count = q->k;
  for (i = 0; i < count; i++) { /* each hit's span and places in the two lists */
    rag_index_hit *h = &ix->hits[i];
    const rag_store_doc *d = rag_store_doc_at(ix->s, h->doc);
    size_t nl;
    h->start = d->chunks[h->chunk - 1].start;
    h->stop = d->chunks[h->chunk - 1].stop;
    if (!d->chunks[h->chunk - 1].leaf) continue;
    if ((rc = need_buf(ix, d->idlen + 11)) != RAG_OK) return rc;
    nl = rag_store_chunk_name(ix->buf, d->id, d->idlen, h->chunk);
    if (bm) h->rank_bm25 = rank_in(&ix->l[L_BM25], ix->buf, nl);
    if (vec) h->rank_vec = rank_in(&ix->l[L_VEC], ix->buf, nl);
    h->rank_field[RAG_INDEX_KEYWORDS] = rank_in(&ix->l[L_KW], ix->buf, nl);
    h->rank_field[RAG_INDEX_SUMMARY] = rank_in(&ix->l[L_SUM], ix->buf, nl);
    h->rank_q = rank_in(&ix->l[L_Q], ix->buf, nl);
  }
  if (q->window > 0) widen(ix, q->window, count);
  *hits = ix->hits;
  *n = count;
  return RAG_OK;
}

/* {====== Offline keywords ======} */

/* Whether term a ranks before term b: higher weight, then bytewise. */
static int term_before(const rag_bm25_term *a, const rag_bm25_term *b) {
  int c;
  if (a->weight != b->weight) return a->weight > b->weight;
  c = memcmp(a->term, b->term, a->len < b->len ? a->len : b->len);
  return c != 0 ? c < 0 : a->len < b->len;
}

#define FOUND_ALL (-1000) /* find_span's stop: not a RAG_E* code */

typedef struct span_find {
  const rag_bm25_term *terms;
  const size_t *pick;
  size_t n, left;
  rag_index_word *words; /* words[i] for pick[i]; s NULL until found */
  const char *text;
} span_find;

static int find_span(void *ud, const char *term, size_t termlen, uint32_t hash, size_t start,
                     size_t stop) {
  span_find *f = (span_find *)ud;
  size_t i;
  (void)hash;
  for (i = 0; i < f->n; i++) {
    const rag_bm25_term *t = &f->terms[f->pick[i]];
    if (f->words[i].s == NULL && t->len == termlen && memcmp(t->term, term, termlen) == 0) {
      f->words[i].s = f->text + start;
      f->words[i].len = stop - start;
      return --f->left == 0 ? FOUND_ALL : 0;
    }
  }
  return 0;
}

int rag_index_keywords(rag_index *ix, const char *name, size_t len, size_t n,
                       const rag_index_word **words, size_t *count) {
  uint32_t slot, cn;
  const rag_store_doc *d;
  const rag_store_chunk *c;
  rag_bm25_explain ex;
  size_t tl, i, j, m, errpos = 0;
  int rc;
  span_find f;
  *words = NULL;
  *count = 0;
  if (!rag_store_chunk_find(ix->s, name, len, &slot, &cn)) return RAG_OK;
  d = rag_store_doc_at(ix->s, slot);
  c = &d->chunks[cn - 1];
  if (!c->leaf) return RAG_OK;
  tl = rag_index_text_size(d, c);
  {
    char *t = (char *)rag_grow(ix->text, &ix->textcap, tl + 1, 1);
    if (t == NULL) return RAG_ENOMEM;
    ix->text = t;
  }
  (void)rag_index_text(d, c, ix->text);
  rc = rag_bm25_explain_text(ix->b, ix->text, tl, &ex, &errpos);
  if (rc == RAG_EENCODING) return RAG_OK; /* cannot be: the text was indexed */
  if (rc != RAG_OK) return rc;
  m = n < ex.nterms ? n : ex.nterms;
  if (m == 0) return RAG_OK;
  {
    size_t *p = (size_t *)rag_grow(ix->pick, &ix->pickcap, m + 1, sizeof *p);
    rag_index_word *w;
    if (p == NULL) return RAG_ENOMEM;
    ix->pick = p;
    w = (rag_index_word *)rag_grow(ix->words, &ix->wordscap, m + 1, sizeof *w);
    if (w == NULL) return RAG_ENOMEM;
    ix->words = w;
  }
  for (i = 0, j = 0; i < ex.nterms; i++) { /* the best m, kept sorted (insertion) */
    size_t k = j < m ? j++ : m;
    if (k == m && !term_before(&ex.terms[i], &ex.terms[ix->pick[m - 1]])) continue;
    if (k == m) k = m - 1;
    while (k > 0 && term_before(&ex.terms[i], &ex.terms[ix->pick[k - 1]])) {
      ix->pick[k] = ix->pick[k - 1];
      k--;
    }
    ix->pick[k] = i;
  }
  if (ix->an == NULL && (rc = rag_analyzer_new(&rag_bm25_config(ix->b)->analyzer, &ix->an)) != RAG_OK)
    return rc == RAG_EINVAL ? RAG_OK : rc;
  for (i = 0; i < m; i++) ix->words[i].s = NULL;
  f.terms = ex.terms;
  f.pick = ix->pick;
  f.n = f.left = m;
  f.words = ix->words;
  f.text = ix->text;
  rc = rag_analyzer_run(ix->an, ix->text, tl, find_span, &f, &errpos);
  if (rc != RAG_OK && rc != FOUND_ALL) return rc;
  for (i = 0, j = 0; i < m; i++) /* a term never found (cannot be) is left out */
    if (ix->words[i].s != NULL) ix->words[j++] = ix->words[i];
  *words = ix->words;
  *count = j;
  return RAG_OK;
}

const char *rag_index_chunk_name(rag_index *ix, const rag_index_hit *h, size_t *len) {
  const rag_store_doc *d = rag_store_doc_at(ix->s, h->doc);
  if (need_buf(ix, d->idlen + 11) != RAG_OK) return NULL;
  *len = rag_store_chunk_name(ix->buf, d->id, d->idlen, h->chunk);
  return ix->buf;
}

int rag_index_check(rag_index *ix) {
  size_t leaves = rag_store_leaves(ix->s), nd = rag_store_count(ix->s), i, j;
  if (!rag_store_check(ix->s) || rag_bm25_count(ix->b) != leaves) return 0;
  if (ix->v != NULL && rag_vec_count(ix->v) != leaves) return 0;
  if (ix->h != NULL && rag_hnsw_count(ix->h) != leaves) return 0;
  for (i = 0; i < nd; i++) {
    const rag_store_doc *d = rag_store_doc_at(ix->s, (uint32_t)i);
    for (j = 0; j < d->nchunks; j++) {
      size_t nl;
      int removed = 0;
      if (!d->chunks[j].leaf) continue;
      if (need_buf(ix, d->idlen + 11) != RAG_OK) return 0;
      nl = rag_store_chunk_name(ix->buf, d->id, d->idlen, (uint32_t)j + 1);
      if (ix->dim > 0) { /* a present vector decodes */
        float *tmp = (float *)rag_malloc(ix->dim * sizeof *tmp);
        if (tmp == NULL) return 0;
        removed = ix->v != NULL ? rag_vec_get(ix->v, ix->buf, nl, tmp)
                                : rag_hnsw_get(ix->h, ix->buf, nl, tmp);
        rag_free(tmp);
        if (!removed) return 0;
      }
    }
  }
  return 1;
}
