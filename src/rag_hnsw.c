/*
** rag_hnsw.c: the HNSW graph (see rag_hnsw.h).
**
** File format (integers little-endian; header, section and str in rag_file.h):
**
**   file    = header section{6}      magic "RAGHNSW\0", version 1
**   "PARM"  dim:u32 metric:u8 dtype:u8 M:u32 ef_construction:u32 ef_search:u32
**           seed:u64 rng:u64 entry:u32 maxlevel:u8 rebuilds:u64
**           (entry 0xffffffff when there are no nodes)
**   "NODE"  count:varint (flags:u8 id:str){count}
**           flags = level (0..31) | 0x80 for a tombstone, whose id is empty
**   "ROWS"  count rows as in rag_vec's ROWS
**   "SCAL"  count scales:f32 for i8 rows; empty otherwise
**   "LNK0"  count lists of 1 + 2M u32: n, then n node numbers, then zeros
**   "LNKU"  for each node of level L > 0, in order, L lists of 1 + M u32
**           (levels 1..L) laid out as LNK0's
**
** A file loads only when every checksum and length agrees and the graph is
** sound: links in range, never to the node itself or twice in one list,
** only to nodes that reach the list's level; the entry is a node of the top
** level; live ids are unique and rows are sound.
*/
#include "rag_hnsw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rag_file.h"
#include "rag_topk.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rag_hnsw stores rows and links in host order; only little-endian hosts are supported"
#endif

static const unsigned char MAGIC[8] = {'R', 'A', 'G', 'H', 'N', 'S', 'W', 0};
#define FORMAT_VERSION 1u
#define NSECTIONS 6u
#define NONE UINT32_MAX
#define DEAD 0x80u
#define MAX_LEVEL 31u
#define EXACT_FILTER 2048u /* a filter of at most this many ids is searched exactly */

typedef struct cand {
  float d; /* distance: lower is closer (the negated score) */
  uint32_t id;
} cand;

struct rag_hnsw {
  rag_hnsw_opts o;
  rag_kernel kern;
  size_t M, M0, s0, su; /* links per list; u32 per level-0 and upper list */
  double mult;          /* 1 / ln M, the level distribution's scale */
  uint64_t rng;
  rag_ids ids;
  size_t n, cap, nlive, rebuilds;
  rag_block rowmem;
  unsigned char *rows; /* rowmem.p: rows start on cache lines */
  float *scales;       /* i8 only */
  uint32_t *l0;  /* n * s0 */
  uint8_t *level;
  uint32_t *upoff; /* where a node's upper lists start in up */
  uint32_t *up;
  size_t uplen, upcap;
  uint32_t entry;
  unsigned maxlevel;

  uint16_t *visit; /* == vtag: visited by the current search */
  uint16_t vtag;
  uint32_t *allow; /* == aepoch: in the current filter (allocated on first use) */
  uint32_t aepoch;
  cand *cq; /* candidates, a min-heap */
  size_t cqn, cqcap;
  cand *rs; /* results, a max-heap of at most ef (search_pool: sorted) */
  size_t rsn, rscap;
  unsigned char *done; /* search_pool: rs[i] was expanded */
  size_t donecap;
  cand *sel; /* selection scratch */
  size_t selcap;
  uint32_t *picked; /* a new node's chosen links, M per level */
  size_t pickcap;
  size_t npicked[MAX_LEVEL + 1];
  float *q, *qe, *qn; /* the query; decoded rows for the heuristic */
  float *qb;          /* kern.approx_bf: the row being inserted in bfloat16 */
  rag_hit *hits;
  size_t hcap;
  uint32_t *slots; /* a filter's nodes */
  size_t slcap;
};

/* {====== Small tools ======} */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static unsigned random_level(rag_hnsw *h) {
  double u = ((double)(splitmix(&h->rng) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double l = floor(-log(u) * h->mult);
  return l >= MAX_LEVEL ? MAX_LEVEL : (unsigned)l;
}

static unsigned level_of(const rag_hnsw *h, size_t i) {
  return h->level[i] & 0x7fu;
}

static int dead(const rag_hnsw *h, size_t i) {
  return (h->level[i] & DEAD) != 0;
}

static const unsigned char *row_at(const rag_hnsw *h, size_t i) {
  return h->rows + i * h->kern.rowbytes;
}

static uint32_t *links(const rag_hnsw *h, size_t i, unsigned lc) {
  return lc == 0 ? h->l0 + i * h->s0 : h->up + h->upoff[i] + (lc - 1) * h->su;
}

static float dist(const rag_hnsw *h, const float *q, size_t i) {
  return -h->kern.one(q, row_at(h, i), h->kern.dim, h->scales ? h->scales[i] : 1.0f);
}

/*
** Asks the cache for the n bytes at p: their first, middle and last bytes,
** which span every line of up to 192 bytes (a level-0 list for M <= 23).
** A macro: GCC 12 finds a function of prefetches alone pure and deletes
** its calls.
*/
#define PREFETCH_SPAN(p, n)                           \
  do {                                                \
    const char *span_ = (const char *)(p);            \
    size_t n_ = (n);                                  \
    __builtin_prefetch(span_);                        \
    __builtin_prefetch(span_ + n_ / 2);               \
    __builtin_prefetch(span_ + n_ - 1);               \
  } while (0)

/* Node i's whole list at layer lc. */
#define PREFETCH_LINKS(h, i, lc) \
  PREFETCH_SPAN(links((h), (i), (lc)), ((lc) ? (h)->su : (h)->s0) * 4)

/*
** Asks the cache for up to four lines of node i's row: what an approximate
** walk reads of a split row (its high halves), else the row's start.
*/
#define PREFETCH_ROW(h, i)                                                           \
  do {                                                                               \
    const char *row_ = (const char *)row_at((h), (i));                               \
    size_t n_ = (h)->kern.split ? (h)->kern.dim * 2 : (h)->kern.rowbytes;            \
    __builtin_prefetch(row_);                                                        \
    if (n_ > 64) __builtin_prefetch(row_ + 64);                                      \
    if (n_ > 128) __builtin_prefetch(row_ + 128);                                    \
    if (n_ > 192) __builtin_prefetch(row_ + 192);                                    \
  } while (0)

/* Node i as a query: its own row for plain f32, else decoded into buf. */
static const float *as_query(const rag_hnsw *h, size_t i, float *buf) {
  if (h->kern.dtype == RAG_F32 && !h->kern.split)
    return (const float *)(const void *)row_at(h, i);
  rag_kernel_decode(&h->kern, row_at(h, i), h->scales ? h->scales[i] : 1.0f, buf);
  return buf;
}

static int closer(cand a, cand b) {
  return a.d < b.d || (a.d == b.d && a.id < b.id);
}

static void heap_up(cand *a, size_t i, int max) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    cand t;
    if (max ? !closer(a[p], a[i]) : !closer(a[i], a[p])) return;
    t = a[i];
    a[i] = a[p];
    a[p] = t;
    i = p;
  }
}

static void heap_down(cand *a, size_t n, int max) {
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    cand t;
    if (c >= n) return;
    if (c + 1 < n && (max ? closer(a[c], a[c + 1]) : closer(a[c + 1], a[c]))) c++;
    if (max ? !closer(a[i], a[c]) : !closer(a[c], a[i])) return;
    t = a[i];
    a[i] = a[c];
    a[c] = t;
    i = c;
  }
}

static void heap_pop(cand *a, size_t *n, int max) {
  a[0] = a[--*n];
  heap_down(a, *n, max);
}

static int cmp_cand(const void *x, const void *y) {
  cand a = *(const cand *)x, b = *(const cand *)y;
  return closer(a, b) ? -1 : closer(b, a) ? 1 : 0;
}

static void next_visit(rag_hnsw *h) {
  if (++h->vtag == 0) {
    memset(h->visit, 0, h->cap * sizeof *h->visit);
    h->vtag = 1;
  }
}

/* {====== Creation ======} */

void rag_hnsw_defaults(rag_hnsw_opts *o, size_t dim) {
  memset(o, 0, sizeof *o);
  o->dim = dim;
  o->metric = RAG_COSINE;
  o->dtype = RAG_F32;
  o->M = 16;
  o->ef_construction = 200;
  o->ef_search = 64;
  o->seed = 100;
}

/* Room for `need` nodes in every per-node array; exact when growing to o.capacity. */
static int nodes_fit(rag_hnsw *h, size_t need) {
  size_t cap = h->cap;
  void *p;
  if (need <= h->cap) return RAG_OK;
  if (need > RAG_IDS_MAX) return RAG_ETOOBIG;
  cap = cap < 64 ? 64 : cap;
  while (cap < need) cap = cap > (size_t)-1 / 2 ? need : cap * 2;
  if (h->cap < h->o.capacity && need <= h->o.capacity) cap = h->o.capacity;
  if (RAG_MUL_OVERFLOWS(cap, h->kern.rowbytes) || RAG_MUL_OVERFLOWS(cap, h->s0 * 4))
    return RAG_ETOOBIG;
#define GROW(field, size)                                          \
  p = rag_realloc(h->field, cap * (size));                         \
  if (p == NULL) return RAG_ENOMEM;                                \
  h->field = p;
  if (rag_block_resize(&h->rowmem, h->n * h->kern.rowbytes, cap * h->kern.rowbytes) != RAG_OK)
    return RAG_ENOMEM;
  h->rows = h->rowmem.p;
  /* a mapped block is advised whole: advice over part of it would split
     the mapping, and the next growth could no longer move it */
  if (h->rowmem.mapped > 0) rag_advise_huge(h->rowmem.base, h->rowmem.mapped);
  else rag_advise_huge(h->rows, cap * h->kern.rowbytes);
  if (h->kern.dtype == RAG_I8) {
    GROW(scales, sizeof(float))
  }
  GROW(l0, h->s0 * sizeof(uint32_t))
  rag_advise_huge(h->l0, cap * h->s0 * sizeof(uint32_t));
  GROW(level, 1)
  GROW(upoff, sizeof(uint32_t))
  GROW(visit, sizeof(uint16_t))
  if (h->allow != NULL) {
    GROW(allow, sizeof(uint32_t))
    memset(h->allow + h->cap, 0, (cap - h->cap) * sizeof(uint32_t));
  }
#undef GROW
  memset(h->visit + h->cap, 0, (cap - h->cap) * sizeof(uint16_t));
  h->cap = cap;
  return RAG_OK;
}

/* Scratch of fixed size: results, selection, decoded rows. */
static int scratch_fit(rag_hnsw *h, size_t ef) {
  size_t nsel = ef > h->M0 + 1 ? ef : h->M0 + 1;
  if (ef + 1 > h->rscap) {
    cand *r = (cand *)rag_grow(h->rs, &h->rscap, ef + 1, sizeof *r);
    if (r == NULL) return RAG_ENOMEM;
    h->rs = r;
  }
  if (ef > h->donecap) {
    unsigned char *d = (unsigned char *)rag_grow(h->done, &h->donecap, ef, 1);
    if (d == NULL) return RAG_ENOMEM;
    h->done = d;
  }
  if (nsel > h->selcap) {
    cand *s = (cand *)rag_grow(h->sel, &h->selcap, nsel, sizeof *s);
    if (s == NULL) return RAG_ENOMEM;
    h->sel = s;
  }
  return RAG_OK;
}

int rag_hnsw_new(const rag_hnsw_opts *o, rag_hnsw **out) {
  rag_hnsw *h;
  size_t d = o->dim;
  *out = NULL;
  if (d < 1 || d > RAG_VEC_MAX_DIM || (unsigned)o->metric >= RAG_NMETRICS ||
      (unsigned)o->dtype >= RAG_NDTYPES || o->M < 2 || o->M > RAG_HNSW_MAX_M ||
      o->ef_construction < 1 || o->ef_construction > RAG_HNSW_MAX_EF || o->ef_search < 1 ||
      o->ef_search > RAG_HNSW_MAX_EF || o->capacity > RAG_IDS_MAX)
    return RAG_EINVAL;
  h = (rag_hnsw *)rag_malloc(sizeof *h);
  if (h == NULL) return RAG_ENOMEM;
  memset(h, 0, sizeof *h);
  h->o = *o;
  rag_kernel_init(&h->kern, o->dtype, o->metric, d, o->portable);
  rag_kernel_split(&h->kern);
  h->M = o->M;
  h->M0 = 2 * o->M;
  h->s0 = 1 + h->M0;
  h->su = 1 + h->M;
  h->mult = 1.0 / log((double)o->M);
  h->rng = o->seed;
  h->entry = NONE;
  rag_ids_init(&h->ids);
  h->q = (float *)rag_malloc(4 * d * sizeof(float));
  if (h->q == NULL || scratch_fit(h, o->ef_construction) != RAG_OK ||
      (o->capacity > 0 && (nodes_fit(h, o->capacity) != RAG_OK ||
                           rag_ids_reserve(&h->ids, o->capacity, 0) != RAG_OK))) {
    rag_hnsw_free(h);
    return RAG_ENOMEM;
  }
  h->qe = h->q + d;
  h->qn = h->qe + d;
  h->qb = h->qn + d;
  *out = h;
  return RAG_OK;
}

void rag_hnsw_free(rag_hnsw *h) {
  if (h == NULL) return;
  rag_ids_free(&h->ids);
  rag_block_free(&h->rowmem);
  rag_free(h->scales);
  rag_free(h->l0);
  rag_free(h->level);
  rag_free(h->upoff);
  rag_free(h->up);
  rag_free(h->visit);
  rag_free(h->allow);
  rag_free(h->cq);
  rag_free(h->rs);
  rag_free(h->done);
  rag_free(h->sel);
  rag_free(h->picked);
  rag_free(h->q);
  rag_free(h->hits);
  rag_free(h->slots);
  rag_free(h);
}

const rag_hnsw_opts *rag_hnsw_config(const rag_hnsw *h) {
  return &h->o;
}

const rag_kernel *rag_hnsw_kernel(const rag_hnsw *h) {
  return &h->kern;
}

size_t rag_hnsw_count(const rag_hnsw *h) {
  return h->nlive;
}

const char *rag_hnsw_id(const rag_hnsw *h, uint32_t slot, size_t *len) {
  return rag_ids_get(&h->ids, slot, len);
}

void rag_hnsw_stats_get(const rag_hnsw *h, rag_hnsw_stats *s) {
  size_t i;
  s->links = s->links_max = 0;
  for (i = 0; i < h->n; i++) {
    size_t m = links(h, i, 0)[0];
    if (h->level[i] & 0x80) continue; /* a tombstone */
    s->links += m;
    if (m > s->links_max) s->links_max = m;
  }
  s->count = h->nlive;
  s->dead = h->n - h->nlive;
  s->levels = h->n ? h->maxlevel + 1 : 0;
  s->rebuilds = h->rebuilds;
  s->memory = sizeof *h + rag_ids_memory(&h->ids) +
              h->cap * (h->kern.rowbytes + (h->scales ? 4 : 0) + h->s0 * 4 + 1 + 4 + 2 +
                        (h->allow ? 4 : 0)) +
              h->upcap * 4 + (h->cqcap + h->rscap + h->selcap) * sizeof(cand) + h->donecap +
              h->pickcap * 4 +
              3 * h->o.dim * sizeof(float) + h->hcap * sizeof(rag_hit) + h->slcap * 4;
}

/* {====== Search in one layer ======} */

static int cq_push(rag_hnsw *h, float d, uint32_t id) {
  if (h->cqn == h->cqcap) {
    cand *c = (cand *)rag_grow(h->cq, &h->cqcap, h->cqn + 1, sizeof *c);
    if (c == NULL) return 0;
    h->cq = c;
  }
  h->cq[h->cqn].d = d;
  h->cq[h->cqn].id = id;
  heap_up(h->cq, h->cqn++, 0);
  return 1;
}

static void rs_push(rag_hnsw *h, float d, uint32_t id, size_t ef) {
  cand x;
  x.d = d;
  x.id = id;
  if (h->rsn == ef) { /* full: the new one replaces the farthest */
    if (!closer(x, h->rs[0])) return;
    h->rs[0] = x;
    heap_down(h->rs, h->rsn, 1);
    return;
  }
  h->rs[h->rsn] = x;
  heap_up(h->rs, h->rsn++, 1);
}

/* May node i be a result: live, and in the filter when there is one. (An
** insertion walks with search_pool, so links may go to tombstones, as in
** hnswlib, which keeps every new node reachable however many nodes around
** it were removed.) */
static int usable(const rag_hnsw *h, uint32_t i, int filtered) {
  return !dead(h, i) && (!filtered || h->allow[i] == h->aepoch);
}

/*
** The ef closest usable nodes to q in layer lc reachable from ep, into the
** rs heap (Algorithm 2 of the paper). Tombstones and filtered-out nodes are
** walked through but never kept.
*/
static int search_layer(rag_hnsw *h, const float *q, uint32_t ep, float dep, size_t ef,
                        unsigned lc, int filtered) {
  h->cqn = h->rsn = 0;
  next_visit(h);
  h->visit[ep] = h->vtag;
  if (!cq_push(h, dep, ep)) return RAG_ENOMEM;
  if (usable(h, ep, filtered)) rs_push(h, dep, ep, ef);
  while (h->cqn > 0) {
    cand c = h->cq[0];
    const uint32_t *ln;
    uint32_t j, cnt, m, fresh[2 * RAG_HNSW_MAX_M];
    if (h->rsn == ef && c.d > h->rs[0].d) break;
    heap_pop(h->cq, &h->cqn, 0);
    if (h->cqn > 0) PREFETCH_LINKS(h, h->cq[0].id, lc);
    ln = links(h, c.id, lc);
    cnt = ln[0];
    /* the unvisited neighbours first, their rows fetched while the rest waits */
    for (j = 1, m = 0; j <= cnt; j++) {
      uint32_t nb = ln[j];
      if (h->visit[nb] == h->vtag) continue;
      h->visit[nb] = h->vtag;
      fresh[m++] = nb;
      PREFETCH_ROW(h, nb);
    }
    for (j = 0; j < m; j++) {
      uint32_t nb = fresh[j];
      float d = dist(h, q, nb);
      if (h->rsn < ef || d < h->rs[0].d) {
        if (!cq_push(h, d, nb)) return RAG_ENOMEM;
        PREFETCH_LINKS(h, nb, lc); /* likely expanded soon */
        if (usable(h, nb, filtered)) rs_push(h, d, nb, ef);
      }
    }
  }
  return RAG_OK;
}

/*
** search_layer when every node may be a result (no filter and no tombstone,
** or building): one pool of the ef closest seen, sorted, the closest not yet
** expanded expanded next, until none is left. That is Algorithm 2 with its
** two heaps merged, as a candidate beyond the ef-th could never be expanded.
** The fresh neighbours of a node are scored in one call of `score` (approx
** for a query on split rows). Leaves the pool, closest first, in rs[0..rsn).
*/
static void search_pool(rag_hnsw *h, const float *q, uint32_t ep, size_t ef, unsigned lc,
                        rag_kernel_gather_fn score) {
  cand *p = h->rs;
  unsigned char *done = h->done;
  size_t n = 1, cur = 0;
  const size_t dim = h->kern.dim, rb = h->kern.rowbytes;
  float sc[2 * RAG_HNSW_MAX_M];
  next_visit(h);
  h->visit[ep] = h->vtag;
  score(q, h->rows, h->scales, &ep, 1, dim, rb, sc);
  p[0].d = -sc[0];
  p[0].id = ep;
  done[0] = 0;
  while (cur < n) {
    const uint32_t *ln = links(h, p[cur].id, lc);
    uint32_t j, cnt = ln[0], m = 0, fresh[2 * RAG_HNSW_MAX_M];
    size_t low = n;
    done[cur] = 1;
    for (j = 1; j <= cnt; j++) { /* no branch: whether seen is a coin toss */
      uint32_t nb = ln[j];
      fresh[m] = nb;
      m += h->visit[nb] != h->vtag;
      h->visit[nb] = h->vtag;
    }
    for (j = 0; j < m; j++) PREFETCH_ROW(h, fresh[j]);
    score(q, h->rows, h->scales, fresh, m, dim, rb, sc);
    for (j = 0; j < m; j++) {
      cand x;
      size_t i;
      x.d = -sc[j];
      x.id = fresh[j];
      if (n == ef && !closer(x, p[n - 1])) continue;
      i = n < ef ? n++ : n - 1;
      for (; i > 0 && closer(x, p[i - 1]); i--) {
        p[i] = p[i - 1];
        done[i] = done[i - 1];
      }
      p[i] = x;
      done[i] = 0;
      if (i < low) low = i;
      PREFETCH_LINKS(h, x.id, lc); /* likely expanded soon */
    }
    if (low < cur) cur = low;
    while (cur < n && done[cur]) cur++;
  }
  h->rsn = n;
}

/*
** The query a walk on the high halves scores with, and its kernel in *fn:
** with kern.approx_bf, q rounded to bfloat16 (into h->qb); else q and approx.
*/
static const float *walk_query(rag_hnsw *h, const float *q, rag_kernel_gather_fn *fn) {
  if (h->kern.approx_bf == NULL) {
    *fn = h->kern.approx;
    return q;
  }
  rag_kernel_bf16_query(q, h->kern.dim, (uint16_t *)(void *)h->qb);
  *fn = h->kern.approx_bf;
  return h->qb;
}

/* Scores c[0..n) exactly: split rows are walked on their high halves alone. */
static void rescore(rag_hnsw *h, const float *q, cand *c, size_t n) {
  uint32_t ids[2 * RAG_HNSW_MAX_M];
  float sc[2 * RAG_HNSW_MAX_M];
  size_t r, j, m;
  for (r = 0; r < n; r += m) {
    m = n - r < 2 * RAG_HNSW_MAX_M ? n - r : 2 * RAG_HNSW_MAX_M;
    for (j = 0; j < m; j++) ids[j] = c[r + j].id;
    h->kern.gather(q, h->rows, h->scales, ids, m, h->kern.dim, h->kern.rowbytes, sc);
    for (j = 0; j < m; j++) c[r + j].d = -sc[j];
  }
}

/*
** Walks down from the entry to layer `to` + 1, one closest node a layer,
** scoring a node's whole list at once (approx: the high halves of split rows).
*/
static uint32_t descend(const rag_hnsw *h, const float *q, unsigned to) {
  const size_t dim = h->kern.dim, rb = h->kern.rowbytes;
  uint32_t cur = h->entry;
  float sc[2 * RAG_HNSW_MAX_M], dcur;
  unsigned lc;
  h->kern.approx(q, h->rows, h->scales, &cur, 1, dim, rb, sc);
  dcur = -sc[0];
  for (lc = h->maxlevel; lc > to; lc--) {
    int changed = 1;
    while (changed) {
      const uint32_t *ln = links(h, cur, lc);
      uint32_t j, m = ln[0];
      changed = 0;
      h->kern.approx(q, h->rows, h->scales, ln + 1, m, dim, rb, sc);
      for (j = 0; j < m; j++)
        if (-sc[j] < dcur) {
          dcur = -sc[j];
          cur = ln[1 + j];
          changed = 1;
        }
    }
  }
  return cur;
}

/*
** The neighbour-selection heuristic (Algorithm 4, as hnswlib runs it): of
** candidates c[0..m) by distance to a base, keep at most M, each closer to
** the base than to any kept before it. Returns how many, at c's front.
*/
static size_t select_heuristic(rag_hnsw *h, cand *c, size_t m, size_t M) {
  size_t r = 0, i, j;
  qsort(c, m, sizeof *c, cmp_cand);
  if (m <= M) return m;
  for (i = 0; i < m && r < M; i++) {
    const float *eq = as_query(h, c[i].id, h->qe);
    int good = 1;
    for (j = 0; j < r && good; j++)
      if (dist(h, eq, c[j].id) < c[i].d) good = 0;
    if (good) c[r++] = c[i];
  }
  return r;
}

/* {====== Insertion ======} */

/*
** Phase one of inserting node s of level L: finds its links at every level
** into h->picked, changing nothing but scratch. Fails only for memory.
*/
static int find_links(rag_hnsw *h, const float *q, unsigned L) {
  uint32_t cur;
  unsigned lc, top;
  size_t need = (size_t)(L + 1) * h->M;
  rag_kernel_gather_fn walk;
  const float *wq;
  if (need > h->pickcap) {
    uint32_t *p = (uint32_t *)rag_grow(h->picked, &h->pickcap, need, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    h->picked = p;
  }
  memset(h->npicked, 0, sizeof h->npicked);
  if (h->entry == NONE) return RAG_OK;
  top = L < h->maxlevel ? L : h->maxlevel;
  cur = descend(h, q, top);
  wq = walk_query(h, q, &walk);
  for (lc = top + 1; lc-- > 0;) {
    size_t m, i;
    search_pool(h, wq, cur, h->o.ef_construction, lc, walk);
    memcpy(h->sel, h->rs, h->rsn * sizeof *h->sel);
    if (h->kern.split) rescore(h, q, h->sel, h->rsn); /* the heuristic sorts them again */
    m = select_heuristic(h, h->sel, h->rsn, h->M);
    for (i = 0; i < m; i++) h->picked[lc * h->M + i] = h->sel[i].id;
    h->npicked[lc] = m;
    if (m > 0) cur = h->sel[0].id;
  }
  return RAG_OK;
}

/* Adds link s to node nb's list at lc; a full list drops a tombstone or is re-selected. */
static void connect(rag_hnsw *h, uint32_t nb, uint32_t s, unsigned lc) {
  uint32_t *ln = links(h, nb, lc);
  size_t max = lc ? h->M : h->M0, i, m;
  const float *nq;
  if (ln[0] < max) {
    ln[++ln[0]] = s;
    return;
  }
  for (i = 1; i <= max; i++)
    if (dead(h, ln[i])) {
      ln[i] = s;
      return;
    }
  nq = as_query(h, nb, h->qn);
  for (i = 0; i < max; i++) {
    h->sel[i].id = ln[i + 1];
    h->sel[i].d = dist(h, nq, ln[i + 1]);
  }
  h->sel[max].id = s;
  h->sel[max].d = dist(h, nq, s);
  m = select_heuristic(h, h->sel, max + 1, max);
  ln[0] = (uint32_t)m;
  for (i = 0; i < m; i++) ln[i + 1] = h->sel[i].id;
  for (i = m + 1; i <= max; i++) ln[i] = 0;
}

/* Phase two: node s (row stored, id pushed) gets its level and links. */
static void commit_links(rag_hnsw *h, uint32_t s, unsigned L) {
  unsigned lc;
  size_t i;
  h->level[s] = (uint8_t)L;
  h->upoff[s] = (uint32_t)h->uplen;
  h->uplen += (size_t)L * h->su;
  memset(links(h, s, 0), 0, h->s0 * sizeof(uint32_t));
  if (L > 0) memset(h->up + h->upoff[s], 0, (size_t)L * h->su * sizeof(uint32_t));
  for (lc = 0; lc <= L && lc <= MAX_LEVEL; lc++) {
    uint32_t *ln = links(h, s, lc);
    ln[0] = (uint32_t)h->npicked[lc];
    for (i = 0; i < h->npicked[lc]; i++) {
      ln[i + 1] = h->picked[lc * h->M + i];
      connect(h, ln[i + 1], s, lc);
    }
  }
  if (h->entry == NONE || L > h->maxlevel) {
    h->entry = s;
    h->maxlevel = L;
  }
}

/* Room for one node of level L with an id of idlen bytes. */
static int reserve_node(rag_hnsw *h, size_t idlen, unsigned L) {
  int rc;
  size_t up = (size_t)L * h->su;
  if ((rc = rag_ids_reserve(&h->ids, 1, idlen)) != RAG_OK) return rc;
  if ((rc = nodes_fit(h, h->n + 1)) != RAG_OK) return rc;
  if (h->uplen + up > UINT32_MAX) return RAG_ETOOBIG;
  if (h->uplen + up > h->upcap) {
    uint32_t *u = (uint32_t *)rag_grow(h->up, &h->upcap, h->uplen + up, sizeof *u);
    if (u == NULL) return RAG_ENOMEM;
    h->up = u;
  }
  return scratch_fit(h, h->o.ef_construction);
}

/*
** Inserts the row already stored at slot h->n (with its scale) under `id`
** (NULL: a placeholder for nothing); `old` (or NONE) becomes a tombstone.
** Changes nothing on failure.
*/
static int insert_stored(rag_hnsw *h, const char *id, size_t idlen, uint32_t old) {
  uint64_t rng = h->rng;
  uint32_t s = (uint32_t)h->n;
  unsigned L = random_level(h);
  const float *q;
  int rc = reserve_node(h, idlen, L);
  if (rc != RAG_OK) {
    h->rng = rng;
    return rc;
  }
  q = as_query(h, s, h->q);
  rc = find_links(h, q, L);
  if (rc != RAG_OK) {
    h->rng = rng;
    return rc;
  }
  if (old != NONE) {
    rag_ids_unlink(&h->ids, old);
    h->level[old] |= DEAD;
    h->nlive--;
  }
  rag_ids_push(&h->ids, id, idlen);
  h->n++;
  h->nlive++;
  commit_links(h, s, L);
  return RAG_OK;
}

/* Forgets every node; only when none is live. */
static void reset(rag_hnsw *h) {
  rag_ids_truncate(&h->ids, 0);
  rag_ids_tidy(&h->ids);
  h->n = h->nlive = h->uplen = 0;
  h->entry = NONE;
  h->maxlevel = 0;
}

/* Rebuilds once tombstones outnumber live nodes; a failure keeps them. */
static void maybe_rebuild(rag_hnsw *h) {
  size_t ndead = h->n - h->nlive;
  if (h->nlive == 0)
    reset(h);
  else if (ndead >= 16 && ndead > h->nlive)
    (void)rag_hnsw_compact(h);
}

int rag_hnsw_add(rag_hnsw *h, const char *id, size_t idlen, const float *x, rag_vec_bad *bad) {
  uint32_t old;
  float scale;
  int rc = rag_kernel_prepare(&h->kern, x, h->q, &bad->component, &bad->why);
  if (rc != RAG_OK) return rc;
  if (h->nlive == 0 && h->n > 0) reset(h);
  if ((rc = nodes_fit(h, h->n + 1)) != RAG_OK) return rc;
  rag_kernel_encode(&h->kern, h->q, h->rows + h->n * h->kern.rowbytes, &scale);
  if (h->scales != NULL) h->scales[h->n] = scale;
  old = rag_ids_find(&h->ids, id, idlen);
  rc = insert_stored(h, id, idlen, old);
  if (rc == RAG_OK && old != NONE) {
    rag_ids_tidy(&h->ids);
    maybe_rebuild(h);
  }
  return rc;
}

void rag_hnsw_remove(rag_hnsw *h, const char *id, size_t idlen, int *removed) {
  uint32_t s = rag_ids_find(&h->ids, id, idlen);
  *removed = s != NONE;
  if (s == NONE) return;
  rag_ids_unlink(&h->ids, s);
  h->level[s] |= DEAD;
  h->nlive--;
  rag_ids_tidy(&h->ids);
  maybe_rebuild(h);
}

int rag_hnsw_compact(rag_hnsw *h) {
  rag_hnsw_opts o = h->o;
  rag_hnsw *g, tmp;
  size_t i, bytes = 0;
  int rc;
  if (h->nlive == h->n) return RAG_OK;
  o.capacity = h->nlive;
  if ((rc = rag_hnsw_new(&o, &g)) != RAG_OK) return rc;
  g->rng = h->rng;
  for (i = 0; i < h->n; i++)
    if (!dead(h, i)) bytes += h->ids.e[i].len;
  rc = rag_ids_reserve(&g->ids, h->nlive, bytes);
  for (i = 0; i < h->n && rc == RAG_OK; i++) {
    size_t len;
    const char *id;
    if (dead(h, i)) continue;
    memcpy(g->rows + g->n * g->kern.rowbytes, row_at(h, i), h->kern.rowbytes);
    if (g->scales != NULL) g->scales[g->n] = h->scales[i];
    id = rag_ids_get(&h->ids, (uint32_t)i, &len);
    rc = insert_stored(g, id, len, NONE);
  }
  if (rc != RAG_OK) {
    rag_hnsw_free(g);
    return rc;
  }
  g->rebuilds = h->rebuilds + 1;
  g->o.capacity = h->o.capacity;
  tmp = *h;
  *h = *g;
  *g = tmp;
  rag_hnsw_free(g);
  return RAG_OK;
}

int rag_hnsw_get(const rag_hnsw *h, const char *id, size_t idlen, float *out) {
  uint32_t s = rag_ids_find(&h->ids, id, idlen);
  if (s == NONE) return 0;
  rag_kernel_decode(&h->kern, row_at(h, s), h->scales ? h->scales[s] : 1.0f, out);
  return 1;
}

/* {====== Search ======} */

/* The filter's live nodes into h->slots and marked in h->allow; their count. */
static int mark_filter(rag_hnsw *h, const rag_id_filter *f, size_t *na) {
  if (h->allow == NULL) {
    h->allow = (uint32_t *)rag_malloc((h->cap ? h->cap : 1) * sizeof *h->allow);
    if (h->allow == NULL) return RAG_ENOMEM;
    memset(h->allow, 0, h->cap * sizeof *h->allow);
  }
  if (f->n > h->slcap) {
    uint32_t *s = (uint32_t *)rag_grow(h->slots, &h->slcap, f->n, sizeof *s);
    if (s == NULL) return RAG_ENOMEM;
    h->slots = s;
  }
  if (++h->aepoch == 0) {
    memset(h->allow, 0, h->cap * sizeof *h->allow);
    h->aepoch = 1;
  }
  *na = rag_ids_mark(&h->ids, f, h->allow, h->aepoch, h->slots);
  return RAG_OK;
}

int rag_hnsw_search(rag_hnsw *h, const float *q, size_t k, size_t ef,
                    const rag_id_filter *filter, const rag_hit **hits, size_t *n,
                    rag_vec_bad *bad) {
  rag_topk t;
  size_t kk = k < h->nlive ? k : h->nlive, i;
  int rc = rag_kernel_prepare(&h->kern, q, h->q, &bad->component, &bad->why), filtered = 0;
  *hits = NULL;
  *n = 0;
  if (rc != RAG_OK) return rc;
  if (kk == 0) return RAG_OK;
  if (ef == 0) ef = h->o.ef_search;
  if (ef < k) ef = k;
  if (kk > h->hcap) {
    rag_hit *p = (rag_hit *)rag_grow(h->hits, &h->hcap, kk, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    h->hits = p;
  }
  rag_topk_init(&t, h->hits, kk, &h->ids);
  if (filter != NULL) {
    size_t na;
    if ((rc = mark_filter(h, filter, &na)) != RAG_OK) return rc;
    if (na <= EXACT_FILTER || na <= h->nlive / 8 || ef >= h->nlive) {
      for (i = 0; i < na; i++) rag_topk_push(&t, h->slots[i], -(double)dist(h, h->q, h->slots[i]));
      *n = rag_topk_sort(&t);
      *hits = h->hits;
      return RAG_OK;
    }
    filtered = 1;
  }
  if (ef >= h->nlive) { /* the beam would hold every node: score them all */
    for (i = 0; i < h->n; i++)
      if (!dead(h, i)) rag_topk_push(&t, (uint32_t)i, -(double)dist(h, h->q, i));
    *n = rag_topk_sort(&t);
    *hits = h->hits;
    return RAG_OK;
  }
  if ((rc = scratch_fit(h, ef)) != RAG_OK) return rc;
  {
    uint32_t cur = descend(h, h->q, 0);
    if (filtered || h->nlive < h->n) {
      if ((rc = search_layer(h, h->q, cur, dist(h, h->q, cur), ef, 0, filtered)) != RAG_OK)
        return rc;
    } else if (!h->kern.split) {
      search_pool(h, h->q, cur, ef, 0, h->kern.gather);
    } else { /* walked on the high halves: the best max(2k, k + 10) scored exactly */
      size_t top = 2 * k > k + 10 ? 2 * k : k + 10;
      rag_kernel_gather_fn walk;
      const float *wq = walk_query(h, h->q, &walk);
      search_pool(h, wq, cur, ef, 0, walk);
      if (top < h->rsn) h->rsn = top;
      for (i = 0; i < h->rsn; i++) __builtin_prefetch(&h->ids.e[h->rs[i].id]); /* for the ids */
      rescore(h, h->q, h->rs, h->rsn);
    }
  }
  for (i = 0; i < h->rsn; i++) rag_topk_push(&t, h->rs[i].id, -(double)h->rs[i].d);
  *n = rag_topk_sort(&t);
  *hits = h->hits;
  /* the caller reads the hits' ids next: ask for them all at once */
  for (i = 0; i < *n; i++) __builtin_prefetch(h->ids.pool + h->ids.e[h->hits[i].id].off);
  return RAG_OK;
}

/* {====== Saving and loading ======} */

static void write_index(const void *obj, rag_writer *w) {
  const rag_hnsw *h = (const rag_hnsw *)obj;
  uint64_t len[NSECTIONS], size = RAG_FILE_HEADER;
  size_t i;
  len[0] = 4 + 1 + 1 + 4 + 4 + 4 + 8 + 8 + 4 + 1 + 8;
  len[1] = rag_varint_len(h->n);
  for (i = 0; i < h->n; i++) len[1] += 1 + rag_str_size(dead(h, i) ? 0 : h->ids.e[i].len);
  len[2] = (uint64_t)h->n * h->kern.rowbytes;
  len[3] = h->scales ? (uint64_t)h->n * 4 : 0;
  len[4] = (uint64_t)h->n * h->s0 * 4;
  len[5] = 0;
  for (i = 0; i < h->n; i++) len[5] += (uint64_t)level_of(h, i) * h->su * 4;
  for (i = 0; i < NSECTIONS; i++) size += 16 + len[i];
  rag_w_header(w, MAGIC, FORMAT_VERSION, NSECTIONS, size);
  rag_w_begin(w, "PARM", len[0]);
  rag_w_uint(w, h->o.dim, 4);
  rag_w_uint(w, (uint64_t)h->o.metric, 1);
  rag_w_uint(w, (uint64_t)h->o.dtype, 1);
  rag_w_uint(w, h->M, 4);
  rag_w_uint(w, h->o.ef_construction, 4);
  rag_w_uint(w, h->o.ef_search, 4);
  rag_w_uint(w, h->o.seed, 8);
  rag_w_uint(w, h->rng, 8);
  rag_w_uint(w, h->entry, 4);
  rag_w_uint(w, h->maxlevel, 1);
  rag_w_uint(w, h->rebuilds, 8);
  rag_w_end(w);
  rag_w_begin(w, "NODE", len[1]);
  rag_w_varint(w, h->n);
  for (i = 0; i < h->n; i++) {
    size_t l;
    const char *s = rag_ids_get(&h->ids, (uint32_t)i, &l);
    rag_w_uint(w, h->level[i], 1);
    rag_w_str(w, s, dead(h, i) ? 0 : l);
  }
  rag_w_end(w);
  rag_w_begin(w, "ROWS", len[2]);
  if (h->kern.split) { /* written as plain f32, a row at a time in pieces */
    float buf[256];
    size_t d = h->kern.dim, j, m;
    for (i = 0; i < h->n; i++) {
      const uint16_t *x = (const uint16_t *)(const void *)row_at(h, i);
      for (j = 0; j < d; j += m) {
        m = d - j < 256 ? d - j : 256;
        rag_kernel_f32_join(x + j, x + d + j, m, buf);
        rag_w_put(w, buf, m * sizeof *buf);
      }
    }
  } else {
    rag_w_put(w, h->rows, (size_t)len[2]);
  }
  rag_w_end(w);
  rag_w_begin(w, "SCAL", len[3]);
  if (h->scales) rag_w_put(w, h->scales, (size_t)len[3]);
  rag_w_end(w);
  rag_w_begin(w, "LNK0", len[4]);
  rag_w_put(w, h->l0, (size_t)len[4]);
  rag_w_end(w);
  rag_w_begin(w, "LNKU", len[5]);
  for (i = 0; i < h->n; i++)
    if (level_of(h, i) > 0) rag_w_put(w, h->up + h->upoff[i], level_of(h, i) * h->su * 4);
  rag_w_end(w);
}

int rag_hnsw_dump(const rag_hnsw *h, unsigned char **buf, size_t *n) {
  return rag_file_dump(write_index, h, buf, n);
}

int rag_hnsw_save(const rag_hnsw *h, const char *path, int *err) {
  return rag_file_save(path, write_index, h, err);
}

/* The graph's soundness (see the file grammar); NULL when sound, else why not. */
static const char *check_graph(const rag_hnsw *h, uint32_t *stamp) {
  size_t i, live = 0;
  unsigned top = 0;
  memset(stamp, 0, h->n * sizeof *stamp);
  for (i = 0; i < h->n; i++) {
    unsigned lc, L = level_of(h, i);
    if (L > MAX_LEVEL) return "bad level";
    if (L > top) top = L;
    if (!dead(h, i)) live++;
    if (dead(h, i) == rag_ids_linked(&h->ids, (uint32_t)i)) return "bad node";
    for (lc = 0; lc <= L; lc++) {
      const uint32_t *ln = links(h, i, lc);
      size_t max = lc ? h->M : h->M0, j;
      if (ln[0] > max) return "bad link count";
      for (j = 1; j <= ln[0]; j++) {
        uint32_t x = ln[j];
        if (x >= h->n || x == i || level_of(h, x) < lc) return "bad link";
        if (stamp[x] == (uint32_t)(i * (MAX_LEVEL + 1) + lc + 1)) return "duplicate link";
        stamp[x] = (uint32_t)(i * (MAX_LEVEL + 1) + lc + 1);
      }
    }
  }
  if (live != h->nlive) return "bad count";
  if (h->n == 0) return h->entry == NONE && h->maxlevel == 0 ? NULL : "bad entry";
  if (h->entry >= h->n || level_of(h, h->entry) != h->maxlevel || top != h->maxlevel)
    return "bad entry";
  return NULL;
}

/* What a load carries from one section to the next. */
typedef struct loader {
  rag_hnsw *h;
  uint64_t rng, entry, rebuilds;
  unsigned maxlevel;
  uint64_t upl;    /* u32 of upper links in all */
  uint32_t *stamp; /* check_graph's scratch */
} loader;

/* PARM: a new empty graph with the file's options. */
static int read_params(loader *ld, rag_reader r, const char **why) {
  rag_hnsw_opts o;
  uint64_t dim, M, efc, efs, seed;
  unsigned metric, dtype;
  int rc;
  if (!rag_r_uint(&r, 4, &dim) || !rag_r_u8(&r, &metric) || !rag_r_u8(&r, &dtype) ||
      !rag_r_uint(&r, 4, &M) || !rag_r_uint(&r, 4, &efc) || !rag_r_uint(&r, 4, &efs) ||
      !rag_r_uint(&r, 8, &seed) || !rag_r_uint(&r, 8, &ld->rng) ||
      !rag_r_uint(&r, 4, &ld->entry) || !rag_r_u8(&r, &ld->maxlevel) ||
      !rag_r_uint(&r, 8, &ld->rebuilds) || r.p != r.e || ld->maxlevel > MAX_LEVEL ||
      dim > RAG_VEC_MAX_DIM || metric >= RAG_NMETRICS || dtype >= RAG_NDTYPES ||
      M > RAG_HNSW_MAX_M || efc > RAG_HNSW_MAX_EF || efs > RAG_HNSW_MAX_EF)
    return rag_corrupt(why, "bad parameters");
  rag_hnsw_defaults(&o, (size_t)dim);
  o.metric = (rag_metric)metric;
  o.dtype = (rag_dtype)dtype;
  o.M = (size_t)M;
  o.ef_construction = (size_t)efc;
  o.ef_search = (size_t)efs;
  o.seed = seed;
  rc = rag_hnsw_new(&o, &ld->h);
  if (rc == RAG_EINVAL) return rag_corrupt(why, "bad parameters");
  if (rc != RAG_OK) return rc;
  ld->h->rng = ld->rng;
  ld->h->rebuilds = (size_t)ld->rebuilds;
  return RAG_OK;
}

/* NODE: every node's level and id, live ids once; the other sections are
** as long as the node count and the levels say. */
static int read_nodes(loader *ld, const rag_reader *sec, const char **why) {
  rag_hnsw *h = ld->h;
  rag_reader r = sec[1];
  uint64_t count, i, bytes = 0;
  int rc;
  if (!rag_r_varint(&r, &count) || count > (uint64_t)(r.e - r.p) / 2 || count > RAG_IDS_MAX)
    return rag_corrupt(why, "bad node count");
  if (count * h->kern.rowbytes != (uint64_t)(sec[2].e - sec[2].p) ||
      (uint64_t)(sec[3].e - sec[3].p) != (h->o.dtype == RAG_I8 ? count * 4 : 0) ||
      count * h->s0 * 4 != (uint64_t)(sec[4].e - sec[4].p))
    return rag_corrupt(why, "section size disagrees with the node count");
  for (i = 0; i < count; i++) {
    const char *s;
    size_t l;
    unsigned f;
    if (!rag_r_u8(&r, &f) || !rag_r_str(&r, &s, &l) || (f & 0x7fu) > MAX_LEVEL ||
        ((f & DEAD) && l != 0))
      return rag_corrupt(why, "bad node");
    bytes += l;
    ld->upl += (uint64_t)(f & 0x7fu) * h->su;
  }
  if (r.p != r.e) return rag_corrupt(why, "bad node section");
  if (ld->upl * 4 != (uint64_t)(sec[5].e - sec[5].p) || ld->upl > UINT32_MAX)
    return rag_corrupt(why, "upper links disagree with the levels");
  if ((rc = rag_ids_reserve(&h->ids, (size_t)count, (size_t)bytes)) != RAG_OK ||
      (rc = nodes_fit(h, (size_t)count + 1)) != RAG_OK)
    return rc == RAG_ETOOBIG ? rag_corrupt(why, "too many nodes") : rc;
  h->up = (uint32_t *)rag_malloc((size_t)ld->upl * 4 + 4);
  ld->stamp = (uint32_t *)rag_malloc((size_t)count * 4 + 4);
  if (h->up == NULL || ld->stamp == NULL) return RAG_ENOMEM;
  h->upcap = (size_t)ld->upl + 1;
  r = sec[1];
  (void)rag_r_varint(&r, &count);
  for (i = 0; i < count; i++) {
    const char *s;
    size_t l;
    unsigned f;
    (void)rag_r_u8(&r, &f);
    (void)rag_r_str(&r, &s, &l);
    h->level[i] = (uint8_t)f;
    h->upoff[i] = (uint32_t)h->uplen;
    h->uplen += (size_t)(f & 0x7fu) * h->su;
    if (f & DEAD) {
      rag_ids_push_unlinked(&h->ids);
      continue;
    }
    if (rag_ids_find(&h->ids, s, l) != NONE) return rag_corrupt(why, "duplicate id");
    rag_ids_push(&h->ids, s, l);
    h->nlive++;
  }
  h->n = (size_t)count;
  return RAG_OK;
}

/* ROWS, SCAL, LNK0 and LNKU for the nodes read: a sound graph of sound rows. */
static int read_graph(loader *ld, const rag_reader *sec, const char **why) {
  rag_hnsw *h = ld->h;
  const char *bad;
  size_t i;
  if (h->n > 0) {
    if (h->kern.split) { /* stored plain */
      float scale;
      for (i = 0; i < h->n; i++) {
        memcpy(h->qe, sec[2].p + i * h->kern.rowbytes, h->kern.rowbytes);
        rag_kernel_encode(&h->kern, h->qe, h->rows + i * h->kern.rowbytes, &scale);
      }
    } else {
      memcpy(h->rows, sec[2].p, (size_t)(sec[2].e - sec[2].p));
    }
    memcpy(h->l0, sec[4].p, (size_t)(sec[4].e - sec[4].p));
    if (h->scales) memcpy(h->scales, sec[3].p, h->n * 4);
  }
  if (ld->upl > 0) memcpy(h->up, sec[5].p, (size_t)ld->upl * 4);
  h->entry = (uint32_t)ld->entry;
  h->maxlevel = ld->maxlevel;
  if (ld->entry != NONE && ld->entry >= h->n) return rag_corrupt(why, "bad entry");
  if ((bad = check_graph(h, ld->stamp)) != NULL) return rag_corrupt(why, bad);
  if (!rag_kernel_rows_ok(&h->kern, h->rows, h->scales, h->n))
    return rag_corrupt(why, "bad component");
  return RAG_OK;
}

int rag_hnsw_load_mem(const unsigned char *p, size_t n, rag_hnsw **out, const char **why) {
  static const char tags[NSECTIONS][5] = {"PARM", "NODE", "ROWS", "SCAL", "LNK0", "LNKU"};
  rag_reader sec[NSECTIONS];
  uint32_t version;
  loader ld;
  int rc;
  *out = NULL;
  memset(&ld, 0, sizeof ld);
  rc = rag_file_open(p, n, MAGIC, FORMAT_VERSION, tags, NSECTIONS, sec, &version,
                     "not an hnsw index (bad magic)", why);
  if (rc == RAG_OK) rc = read_params(&ld, sec[0], why);
  if (rc == RAG_OK) rc = read_nodes(&ld, sec, why);
  if (rc == RAG_OK) rc = read_graph(&ld, sec, why);
  rag_free(ld.stamp);
  if (rc != RAG_OK) {
    rag_hnsw_free(ld.h);
    return rc;
  }
  *out = ld.h;
  return RAG_OK;
}

static int load_mem(const unsigned char *p, size_t n, void *out, const char **why) {
  return rag_hnsw_load_mem(p, n, (rag_hnsw **)out, why);
}

int rag_hnsw_load(const char *path, rag_hnsw **out, const char **why, int *err) {
  *out = NULL;
  return rag_file_load(path, load_mem, out, why, err);
}

int rag_hnsw_check(const rag_hnsw *h) {
  uint32_t *stamp = (uint32_t *)rag_malloc(h->n * sizeof *stamp + 4);
  size_t i;
  int ok;
  if (stamp == NULL) return 1; /* nothing can be said */
  ok = check_graph(h, stamp) == NULL && rag_kernel_rows_ok(&h->kern, h->rows, h->scales, h->n);
  rag_free(stamp);
  for (i = 0; ok && i < h->n; i++) {
    size_t l;
    const char *s;
    if (dead(h, i)) continue;
    s = rag_ids_get(&h->ids, (uint32_t)i, &l);
    ok = rag_ids_find(&h->ids, s, l) == i;
  }
  return ok;
}
