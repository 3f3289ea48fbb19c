/*
** rag_graph.c: the entity graph (see rag_graph.h): changes and removal.
** Every change is planned first (what is new), then everything it needs is
** reserved, then it is committed with steps that cannot fail, so a failed
** call leaves the graph unchanged. Removal never fails. Dead entity and
** chunk slots are compacted away once they outnumber the live ones.
*/
#include "rag_graph.h"

#include <string.h>

#include "rag_fnv.h"
#include "rag_graph_internal.h"

#define NONE RAG_GRAPH_NONE
#define COOCCURS "co-occurs"
#define MAX_PER_SENTENCE 8

/* {====== Hashing ======} */

static uint32_t mix64(uint64_t x) {
  x ^= x >> 31;
  x *= UINT64_C(0x9E3779B97F4A7C15);
  x ^= x >> 29;
  x *= UINT64_C(0xBF58476D1CE4E5B9);
  x ^= x >> 32;
  return (uint32_t)x;
}

static uint32_t edge_hash(uint32_t src, uint32_t dst, uint32_t rel) {
  return mix64(((uint64_t)src << 32 | dst) ^ ((uint64_t)rel * UINT64_C(0xD6E8FEB86659FD93)));
}

/* {====== References ======} */

/* Whether chunk c has the reference ref: a walk of its list (single changes, checks). */
static int chunk_has(const rag_graph *g, uint32_t c, uint32_t ref) {
  const chunkrefs *cr = &g->chunk[c];
  uint32_t i;
  for (i = 0; i < cr->n; i++)
    if (cr->refs[i] == ref) return 1;
  return 0;
}

/* {====== The edge table ======} */

/* Cells hold hash << 32 | (edge + 1), 0 when empty: a probe reads no edge it does not match. */
#define CELL(h, x) ((uint64_t)(h) << 32 | ((uint64_t)(x) + 1))

static size_t etab_pos(const rag_graph *g, uint32_t src, uint32_t dst, uint32_t rel, uint32_t h) {
  size_t i = h & g->emask;
  for (;; i = (i + 1) & g->emask) {
    uint64_t v = g->etab[i];
    const edge *x;
    if (v == 0) return i;
    if ((uint32_t)(v >> 32) != h) continue;
    x = &g->edge[(uint32_t)v - 1];
    if (x->src == src && x->dst == dst && x->rel == rel) return i;
  }
}

/* The edge (src, dst, rel) or NONE; *pos: its cell, or the empty one where it would go. */
static uint32_t edge_find(const rag_graph *g, uint32_t src, uint32_t dst, uint32_t rel,
                          size_t *pos) {
  uint64_t v;
  *pos = (size_t)-1;
  if (g->etab == NULL || rel == NONE) return NONE;
  *pos = etab_pos(g, src, dst, rel, edge_hash(src, dst, rel));
  v = g->etab[*pos];
  return v == 0 ? NONE : (uint32_t)v - 1;
}

static void etab_rebuild(rag_graph *g) {
  size_t x;
  memset(g->etab, 0, (g->emask + 1) * sizeof *g->etab);
  for (x = 0; x < g->nedge; x++) {
    edge *e = &g->edge[x];
    size_t i;
    if (e->nchunks == 0) continue;
    e->hash = edge_hash(e->src, e->dst, e->rel);
    for (i = e->hash & g->emask; g->etab[i] != 0; i = (i + 1) & g->emask) {}
    g->etab[i] = CELL(e->hash, x);
  }
}

/* Room for `more` new edges, in the table and the slots. RAG_ENOMEM, RAG_ETOOBIG. */
static int edges_reserve(rag_graph *g, size_t more) {
  size_t need = g->live_edges + more, cap = g->etab ? g->emask + 1 : 0, n;
  if (more == 0) return RAG_OK;
  if (more > MAX_SLOTS - g->nedge) return RAG_ETOOBIG;
  if (g->nedge + more > g->edgecap) {
    edge *p = (edge *)rag_grow(g->edge, &g->edgecap, g->nedge + more, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    rag_advise_huge(p, g->edgecap * sizeof *p);
    g->edge = p;
  }
  if (need > cap / 2) {
    uint64_t *t;
    n = cap ? cap : 64;
    while (need > n / 2) n *= n >= 65536 ? 4 : 2; /* fewer rebuilds of a large table */
    if ((t = (uint64_t *)rag_malloc(n * sizeof *t)) == NULL) return RAG_ENOMEM;
    rag_advise_huge(t, n * sizeof *t); /* read at random: fewer TLB misses */
    rag_free(g->etab);
    g->etab = t;
    g->emask = n - 1;
    g->etabgen++;
    etab_rebuild(g);
  }
  return RAG_OK;
}

/*
** A new edge in reserved room; its slot. `hint`: the cell a lookup found
** empty at table generation `gen`; while the table only gained edges since,
** that cell, if still empty, is still the first empty one on the probe path.
*/
static uint32_t edge_push(rag_graph *g, uint32_t src, uint32_t dst, uint32_t rel, size_t hint,
                          uint32_t gen) {
  uint32_t x;
  edge *e;
  if (g->freeedge != NONE) {
    x = g->freeedge;
    g->freeedge = g->edge[x].src;
  } else {
    x = (uint32_t)g->nedge++;
  }
  e = &g->edge[x];
  e->src = src;
  e->dst = dst;
  e->rel = rel;
  e->nchunks = 0;
  e->hash = edge_hash(src, dst, rel);
  if (hint == (size_t)-1 || gen != g->etabgen || g->etab[hint] != 0)
    hint = etab_pos(g, src, dst, rel, e->hash);
  g->etab[hint] = CELL(e->hash, x);
  g->ent[src].nedge++;
  if (dst != src) g->ent[dst].nedge++;
  g->live_edges++;
  return x;
}

/* {====== Life cycle ======} */

struct batch;
static void batch_free(struct batch *b);

int rag_graph_new(rag_graph **out) {
  rag_graph *g = (rag_graph *)rag_malloc(sizeof *g);
  *out = NULL;
  if (g == NULL) return RAG_ENOMEM;
  memset(g, 0, sizeof *g);
  rag_ids_init(&g->ents);
  rag_ids_init(&g->aliases);
  rag_ids_init(&g->chunks);
  rag_ids_init(&g->rels);
  rag_ids_init(&g->docs);
  g->freeedge = NONE;
  *out = g;
  return RAG_OK;
}

void rag_graph_free(rag_graph *g) {
  size_t i;
  if (g == NULL) return;
  for (i = 0; i < g->chunks.n; i++) rag_free(g->chunk[i].refs);
  for (i = 0; i < g->docs.n; i++) rag_free(g->mark[i].hash);
  rag_ids_free(&g->ents);
  rag_ids_free(&g->aliases);
  rag_ids_free(&g->chunks);
  rag_ids_free(&g->rels);
  rag_ids_free(&g->docs);
  rag_free(g->ent);
  rag_free(g->names);
  rag_free(g->atarget);
  rag_free(g->chunk);
  rag_free(g->edge);
  rag_free(g->etab);
  rag_free(g->mark);
  rag_free(g->v.eorder);
  rag_free(g->v.erank);
  rag_free(g->v.crank);
  rag_free(g->v.corder);
  rag_free(g->v.rrank);
  rag_free(g->v.xorder);
  rag_free(g->v.xrank);
  rag_free(g->v.adjs);
  rag_free(g->v.adj);
  rag_free(g->v.ments);
  rag_free(g->v.ment);
  rag_free(g->v.xchs);
  rag_free(g->v.xch);
  batch_free((struct batch *)g->scratch[BATCH]);
  for (i = 0; i < sizeof g->scratch / sizeof g->scratch[0]; i++) rag_free(g->scratch[i]);
  rag_free(g);
}

/* {====== Entities and aliases ======} */

uint32_t rag_graph_resolve(const rag_graph *g, const char *key, size_t klen) {
  uint32_t e = rag_ids_find(&g->ents, key, klen), a;
  if (e != RAG_IDS_NONE) return e;
  a = rag_ids_find(&g->aliases, key, klen);
  return a == RAG_IDS_NONE ? NONE : g->atarget[a];
}

/* Room for n new entities with kbytes of keys and nbytes of names. */
static int ents_reserve(rag_graph *g, size_t n, size_t kbytes, size_t nbytes) {
  int rc;
  if (n == 0) return RAG_OK;
  if (n > MAX_SLOTS - g->ents.n || nbytes > UINT32_MAX - 1 - g->nameslen) return RAG_ETOOBIG;
  if ((rc = rag_ids_reserve(&g->ents, n, kbytes)) != RAG_OK) return rc;
  if (g->ents.n + n > g->entcap) {
    ent *p = (ent *)rag_grow(g->ent, &g->entcap, g->ents.n + n, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    rag_advise_huge(p, g->entcap * sizeof *p);
    g->ent = p;
  }
  if (g->nameslen + nbytes + 1 > g->namescap) {
    char *p = (char *)rag_grow(g->names, &g->namescap, g->nameslen + nbytes + 1, 1);
    if (p == NULL) return RAG_ENOMEM;
    g->names = p;
  }
  return RAG_OK;
}

/* A new entity in reserved room; its slot. */
static uint32_t ent_push(rag_graph *g, const char *key, size_t klen, const char *name,
                         size_t nlen) {
  uint32_t e = rag_ids_push(&g->ents, key, klen);
  ent *x = &g->ent[e];
  memset(x, 0, sizeof *x);
  x->name = (uint32_t)g->nameslen;
  x->namelen = (uint32_t)nlen;
  if (nlen > 0) memcpy(g->names + g->nameslen, name, nlen);
  g->nameslen += nlen;
  g->live_ents++;
  g->v.ok = 0;
  return e;
}

int rag_graph_put_entity(rag_graph *g, const char *key, size_t klen, const char *name,
                         size_t nlen) {
  int rc = ents_reserve(g, 1, klen, nlen);
  if (rc == RAG_OK) ent_push(g, key, klen, name, nlen);
  return rc;
}

int rag_graph_entity(rag_graph *g, const char *key, size_t klen, const char *name, size_t nlen,
                     int *added) {
  *added = 0;
  if (klen == 0) return RAG_EINVAL;
  if (rag_ids_find(&g->ents, key, klen) != RAG_IDS_NONE) return RAG_OK;
  if (rag_ids_find(&g->aliases, key, klen) != RAG_IDS_NONE) return RAG_OK; /* it resolves */
  if (rag_graph_put_entity(g, key, klen, name, nlen) != RAG_OK) return RAG_ENOMEM;
  *added = 1;
  return RAG_OK;
}

int rag_graph_alias(rag_graph *g, const char *alias, size_t alen, const char *key, size_t klen,
                    int *added, const char **why) {
  uint32_t e = rag_graph_resolve(g, key, klen), a;
  int rc;
  *added = 0;
  if (e == NONE) {
    *why = "unknown entity";
    return RAG_EINVAL;
  }
  if (alen == 0 || rag_ids_find(&g->ents, alias, alen) != RAG_IDS_NONE) {
    *why = alen == 0 ? "empty alias" : "alias is an entity";
    return RAG_EINVAL;
  }
  a = rag_ids_find(&g->aliases, alias, alen);
  if (a != RAG_IDS_NONE) {
    if (g->atarget[a] == e) return RAG_OK;
    g->ent[g->atarget[a]].naliases--;
    g->atarget[a] = e;
    g->ent[e].naliases++;
    g->v.ok = 0;
    *added = 1;
    return RAG_OK;
  }
  if ((rc = rag_ids_reserve(&g->aliases, 1, alen)) != RAG_OK) return rc;
  if (g->aliases.n + 1 > g->atcap) {
    uint32_t *p = (uint32_t *)rag_grow(g->atarget, &g->atcap, g->aliases.n + 1, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    g->atarget = p;
  }
  a = rag_ids_push(&g->aliases, alias, alen);
  g->atarget[a] = e;
  g->ent[e].naliases++;
  g->live_aliases++;
  g->v.ok = 0;
  *added = 1;
  return RAG_OK;
}

/* {====== Batches: plan, reserve, commit ======} */

/* A new entity of a batch: slot ents.n + its number once committed. */
typedef struct newent {
  const char *key, *name;
  size_t klen, nlen;
  uint32_t hash, stamp;
} newent;

/* An edge of a batch: ends (slots, new ones included), its slot or NONE, whether its tag is new. */
typedef struct bedge {
  size_t pos;   /* edge_find's cell */
  uint32_t gen; /* the table generation of pos */
  uint32_t src, dst, slot;
  int newtag;
} bedge;

typedef struct batch {
  newent *ne;
  size_t nne, necap;
  uint32_t *netab; /* newent + 1 by key hash */
  size_t nemask, necells;
  uint32_t *ment; /* entities (slots) whose mention is new */
  size_t nment, mentcap;
  bedge *be;
  size_t nbe, becap;
  uint32_t *betab; /* bedge + 1 by ends */
  size_t bemask, becells;
  uint32_t *stamp; /* by existing entity slot: the sentence stamp */
  size_t stampcap;
  uint32_t *seen; /* by existing entity slot: the batch stamp */
  size_t seencap;
  uint32_t *ein; /* by entity slot: now when the chunk mentions it */
  size_t eincap;
  uint32_t *xin; /* by edge slot: now when the edge has the chunk */
  size_t xincap;
  uint32_t *pairs; /* co-occurrence pairs (src, dst), before their lookup */
  size_t npairs, paircap;
  uint32_t *hs; /* per mention: its key's hash */
  size_t hscap;
  uint32_t now;   /* the batch stamp (seen, ein, xin) */
  uint32_t tick;  /* the sentence stamp (stamp, newent.stamp) */
  uint32_t chunk; /* the chunk's slot, or NONE */
  size_t tags;    /* new edge tags (batch_reserve) */
} batch;

/* The scratch batch of g; kept between calls so its buffers are reused. */
static batch *get_batch(rag_graph *g) {
  if (g->scratch[BATCH] == NULL) {
    batch *b = (batch *)rag_malloc(sizeof *b);
    if (b == NULL) return NULL;
    memset(b, 0, sizeof *b);
    g->scratch[BATCH] = b;
  }
  return (batch *)g->scratch[BATCH];
}

static void batch_free(batch *b) {
  if (b == NULL) return;
  rag_free(b->ne);
  rag_free(b->netab);
  rag_free(b->ment);
  rag_free(b->be);
  rag_free(b->betab);
  rag_free(b->stamp);
  rag_free(b->seen);
  rag_free(b->ein);
  rag_free(b->xin);
  rag_free(b->pairs);
  rag_free(b->hs);
}

/* A stamp array by slot with room for n cells, the new ones 0. */
static int grow_stamps(uint32_t **p, size_t *cap, size_t n) {
  size_t old = *cap;
  uint32_t *q;
  if (*p != NULL && n <= *cap) return RAG_OK;
  if ((q = (uint32_t *)rag_grow(*p, cap, n, sizeof *q)) == NULL) return RAG_ENOMEM;
  if (*p == NULL) old = 0;
  memset(q + old, 0, (*cap - old) * sizeof *q);
  *p = q;
  return RAG_OK;
}

/* Stamps what chunk c (an existing one) references, so lookups need no walk. */
static int stamp_chunk(rag_graph *g, batch *b, uint32_t c) {
  const chunkrefs *cr = &g->chunk[c];
  uint32_t i;
  if (grow_stamps(&b->ein, &b->eincap, g->ents.n + 1) != RAG_OK ||
      grow_stamps(&b->xin, &b->xincap, g->nedge + 1) != RAG_OK)
    return RAG_ENOMEM;
  for (i = 0; i < cr->n; i++) {
    uint32_t r = cr->refs[i];
    if (r & REF_EDGE) b->xin[r & ~REF_EDGE] = b->now;
    else b->ein[r] = b->now;
  }
  return RAG_OK;
}

/* Whether b's chunk has the reference ref (after stamp_chunk). */
static int chunk_stamped(const batch *b, uint32_t ref) {
  if (b->chunk == NONE) return 0;
  if (ref & REF_EDGE) return b->xin[ref & ~REF_EDGE] == b->now;
  return b->ein[ref] == b->now;
}

/* Starts a batch over g for chunk c (NONE: new) with room for `mentions` mentions. RAG_ENOMEM. */
static int batch_begin(rag_graph *g, batch *b, uint32_t c, size_t mentions) {
  size_t n = g->ents.n + 1, cells = 16;
  b->nne = b->nment = b->nbe = 0;
  if (n > b->stampcap) {
    uint32_t *p = (uint32_t *)rag_grow(b->stamp, &b->stampcap, n, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    memset(p, 0, b->stampcap * sizeof *p);
    b->stamp = p;
  }
  if (n > b->seencap) {
    uint32_t *p = (uint32_t *)rag_grow(b->seen, &b->seencap, n, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    memset(p, 0, b->seencap * sizeof *p);
    b->seen = p;
  }
  /* the two tables are sized for this batch (a large one before must not
  ** make every later batch clear its cells) within what was allocated */
  while (cells < 2 * mentions + 2) cells *= 2;
  if (cells > b->necells || b->netab == NULL) {
    uint32_t *p = (uint32_t *)rag_malloc(cells * sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    rag_free(b->netab);
    b->netab = p;
    b->necells = cells;
  }
  b->nemask = cells - 1;
  memset(b->netab, 0, cells * sizeof *b->netab);
  cells = 16;
  while (cells < 2 * (mentions / 2 + 1) * (MAX_PER_SENTENCE - 1) + 2) cells *= 2;
  if (cells > b->becells || b->betab == NULL) {
    uint32_t *p = (uint32_t *)rag_malloc(cells * sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    rag_free(b->betab);
    b->betab = p;
    b->becells = cells;
  }
  b->bemask = cells - 1;
  memset(b->betab, 0, cells * sizeof *b->betab);
  if (++b->now == 0) { /* the stamps wrapped: start over */
    memset(b->seen, 0, b->seencap * sizeof *b->seen);
    if (b->ein != NULL) memset(b->ein, 0, b->eincap * sizeof *b->ein);
    if (b->xin != NULL) memset(b->xin, 0, b->xincap * sizeof *b->xin);
    b->now = 1;
  }
  b->chunk = c;
  if (c != NONE && stamp_chunk(g, b, c) != RAG_OK) return RAG_ENOMEM;
  if (b->tick > UINT32_MAX - mentions - 2) {
    memset(b->stamp, 0, b->stampcap * sizeof *b->stamp);
    b->tick = 0;
  }
  return RAG_OK;
}

static int push_u32(uint32_t **p, size_t *n, size_t *cap, uint32_t v) {
  if (*n == *cap) {
    uint32_t *q = (uint32_t *)rag_grow(*p, cap, *n + 1, sizeof *q);
    if (q == NULL) return RAG_ENOMEM;
    *p = q;
  }
  (*p)[(*n)++] = v;
  return RAG_OK;
}

/* The key of a slot, existing or new in b. */
static const char *slot_key(const rag_graph *g, const batch *b, uint32_t e, size_t *len) {
  if (e >= g->ents.n) {
    const newent *x = &b->ne[e - g->ents.n];
    *len = x->klen;
    return x->key;
  }
  return rag_ids_get(&g->ents, e, len);
}

static int key_cmp(const char *x, size_t nx, const char *y, size_t ny) {
  size_t i, n = nx < ny ? nx : ny;
  int c;
  for (i = 0; i < n && i < 8; i++) /* keys mostly differ early: no call */
    if (x[i] != y[i]) return (unsigned char)x[i] < (unsigned char)y[i] ? -1 : 1;
  if (n > 8 && (c = memcmp(x + 8, y + 8, n - 8)) != 0) return c;
  return nx < ny ? -1 : nx > ny;
}

/* The entity of a mention's key (of hash h): existing (through aliases), new in b, or made new. */
static int batch_entity(rag_graph *g, batch *b, const char *key, size_t klen, uint32_t h,
                        const char *name, size_t nlen, uint32_t *slot) {
  uint32_t e = rag_graph_resolve(g, key, klen);
  size_t i;
  if (e != NONE) {
    if (b->seen[e] != b->now) {
      b->seen[e] = b->now;
      if (!chunk_stamped(b, e))
        if (push_u32(&b->ment, &b->nment, &b->mentcap, e) != RAG_OK) return RAG_ENOMEM;
    }
    *slot = e;
    return RAG_OK;
  }
  for (i = h & b->nemask; b->netab[i] != 0; i = (i + 1) & b->nemask) {
    const newent *x = &b->ne[b->netab[i] - 1];
    if (x->hash == h && x->klen == klen && memcmp(x->key, key, klen) == 0) {
      *slot = (uint32_t)(g->ents.n + b->netab[i] - 1);
      return RAG_OK;
    }
  }
  if (b->nne == b->necap) {
    newent *p = (newent *)rag_grow(b->ne, &b->necap, b->nne + 1, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    b->ne = p;
  }
  b->ne[b->nne].key = key;
  b->ne[b->nne].klen = klen;
  b->ne[b->nne].name = name;
  b->ne[b->nne].nlen = nlen;
  b->ne[b->nne].hash = h;
  b->ne[b->nne].stamp = 0;
  b->netab[i] = (uint32_t)++b->nne;
  *slot = (uint32_t)(g->ents.n + b->nne - 1);
  if (g->ents.n + b->nne > MAX_SLOTS) return RAG_ETOOBIG;
  return push_u32(&b->ment, &b->nment, &b->mentcap, *slot);
}

/* The edge (src, dst) of relation rel (NONE: new) in b, once; c: the chunk or NONE. */
static int batch_edge(rag_graph *g, batch *b, uint32_t src, uint32_t dst, uint32_t rel,
                      uint32_t c) {
  uint32_t h = mix64((uint64_t)src << 32 | dst);
  size_t i;
  bedge *x;
  for (i = h & b->bemask; b->betab[i] != 0; i = (i + 1) & b->bemask) {
    x = &b->be[b->betab[i] - 1];
    if (x->src == src && x->dst == dst) return RAG_OK;
  }
  if (b->nbe == b->becap) {
    bedge *p = (bedge *)rag_grow(b->be, &b->becap, b->nbe + 1, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    b->be = p;
  }
  if ((b->nbe + 1) * 2 > b->bemask + 1) return RAG_ENOMEM; /* sized by batch_begin */
  x = &b->be[b->nbe];
  x->src = src;
  x->dst = dst;
  x->pos = (size_t)-1;
  x->gen = g->etabgen;
  x->slot = edge_find(g, src, dst, rel, &x->pos); /* a new end's slot is final: a hint */
  if (src >= g->ents.n || dst >= g->ents.n) x->slot = NONE;
  x->newtag = x->slot == NONE || c == NONE || !chunk_stamped(b, x->slot | REF_EDGE);
  b->betab[i] = (uint32_t)++b->nbe;
  return RAG_OK;
}

/* Reserves all that committing b for chunk (slot c or NONE) and rel needs. */
static int batch_reserve(rag_graph *g, batch *b, size_t clen, uint32_t c, size_t rlen,
                         uint32_t relslot, uint32_t **fresh) {
  size_t i, kbytes = 0, nbytes = 0, newedges = 0, tags = 0;
  int rc;
  *fresh = NULL;
  for (i = 0; i < b->nne; i++) {
    kbytes += b->ne[i].klen;
    nbytes += b->ne[i].nlen;
  }
  b->tags = 0;
  for (i = 0; i < b->nbe; i++) {
    newedges += b->be[i].slot == NONE;
    tags += b->be[i].newtag != 0;
  }
  if (b->nment + tags == 0 && b->nne == 0) return RAG_OK;
  if ((rc = ents_reserve(g, b->nne, kbytes, nbytes)) != RAG_OK) return rc;
  if (newedges > 0 && relslot == NONE && (rc = rag_ids_reserve(&g->rels, 1, rlen)) != RAG_OK)
    return rc;
  if ((rc = edges_reserve(g, newedges)) != RAG_OK) return rc;
  if (b->nment + tags > UINT32_MAX / 2) return RAG_ETOOBIG;
  if (c == NONE) {
    if ((rc = rag_ids_reserve(&g->chunks, 1, clen)) != RAG_OK) return rc;
    if (g->chunks.n + 1 > g->chunkcap) {
      chunkrefs *p = (chunkrefs *)rag_grow(g->chunk, &g->chunkcap, g->chunks.n + 1, sizeof *p);
      if (p == NULL) return RAG_ENOMEM;
      g->chunk = p;
    }
    *fresh = (uint32_t *)rag_malloc((b->nment + tags + 1) * sizeof **fresh);
    if (*fresh == NULL) return RAG_ENOMEM;
  } else {
    chunkrefs *cr = &g->chunk[c];
    size_t need = cr->n + b->nment + tags, cap = cr->cap;
    if (need > UINT32_MAX - 1) return RAG_ETOOBIG;
    if (need > cap) {
      uint32_t *p = (uint32_t *)rag_grow(cr->refs, &cap, need, sizeof *p);
      if (p == NULL) return RAG_ENOMEM;
      cr->refs = p;
      cr->cap = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
    }
  }
  b->tags = tags;
  return RAG_OK;
}

static void add_ref(rag_graph *g, uint32_t c, uint32_t ref) {
  chunkrefs *cr = &g->chunk[c];
  g->nrefs++;
  cr->refs[cr->n++] = ref;
  if (ref & REF_EDGE) g->edge[ref & ~REF_EDGE].nchunks++;
  else {
    g->ent[ref].nment++;
    g->nmentions++;
  }
}

/* Commits b (after batch_reserve): nothing here fails. Counts new edges in *newedges. */
static void batch_commit(rag_graph *g, batch *b, const char *chunk, size_t clen, uint32_t c,
                         const char *rel, size_t rlen, uint32_t relslot, uint32_t *fresh,
                         size_t *newedges) {
  size_t i;
  *newedges = 0;
  if (b->nment == 0 && b->nne == 0) {
    for (i = 0; i < b->nbe && !b->be[i].newtag; i++) {}
    if (i == b->nbe) return;
  }
  if (c == NONE) {
    c = rag_ids_push(&g->chunks, chunk, clen);
    g->chunk[c].refs = fresh;
    g->chunk[c].n = 0;
    g->chunk[c].cap = (uint32_t)(b->nment + b->tags + 1);
    g->live_chunks++;
  }
  for (i = 0; i < b->nne; i++) ent_push(g, b->ne[i].key, b->ne[i].klen, b->ne[i].name, b->ne[i].nlen);
  for (i = 0; i < b->nbe; i++) {
    bedge *x = &b->be[i];
    if (x->slot == NONE) {
      if (relslot == NONE) relslot = rag_ids_push(&g->rels, rel, rlen);
      x->slot = edge_push(g, x->src, x->dst, relslot, x->pos, x->gen);
      ++*newedges;
    }
    if (x->newtag) add_ref(g, c, x->slot | REF_EDGE);
  }
  for (i = 0; i < b->nment; i++) add_ref(g, c, b->ment[i]);
  g->v.ok = 0;
}

/* Reserve then commit; a failure frees what was reserved for a new chunk. */
static int batch_run(rag_graph *g, batch *b, const char *chunk, size_t clen, uint32_t c,
                     const char *rel, size_t rlen, size_t *newedges) {
  uint32_t relslot = rlen > 0 || rel != NULL ? rag_ids_find(&g->rels, rel, rlen) : NONE;
  uint32_t *fresh;
  int rc = batch_reserve(g, b, clen, c, rlen, relslot, &fresh);
  *newedges = 0;
  if (rc != RAG_OK) {
    rag_free(fresh);
    return rc;
  }
  batch_commit(g, b, chunk, clen, c, rel, rlen, relslot, fresh, newedges);
  return RAG_OK;
}

int rag_graph_mention(rag_graph *g, const char *key, size_t klen, const char *chunk, size_t clen,
                      int *added) {
  uint32_t e = rag_graph_resolve(g, key, klen), c = rag_ids_find(&g->chunks, chunk, clen);
  batch *b = get_batch(g);
  size_t ne;
  int rc;
  *added = 0;
  if (e == NONE) return RAG_EINVAL;
  if (c != NONE && chunk_has(g, c, e)) return RAG_OK;
  if (b == NULL || (rc = batch_begin(g, b, c, 1)) != RAG_OK) return RAG_ENOMEM;
  if ((rc = push_u32(&b->ment, &b->nment, &b->mentcap, e)) != RAG_OK) return rc;
  if ((rc = batch_run(g, b, chunk, clen, c, NULL, 0, &ne)) != RAG_OK) return rc;
  *added = 1;
  return RAG_OK;
}

int rag_graph_relate(rag_graph *g, const char *src, size_t slen, const char *dst, size_t dlen,
                     const char *rel, size_t rlen, const char *chunk, size_t clen, int *added,
                     int *bad) {
  uint32_t s = rag_graph_resolve(g, src, slen), d = rag_graph_resolve(g, dst, dlen);
  uint32_t c = rag_ids_find(&g->chunks, chunk, clen), r = rag_ids_find(&g->rels, rel, rlen);
  batch *b = get_batch(g);
  size_t ne;
  int rc;
  *added = 0;
  *bad = s == NONE ? 1 : d == NONE ? 2 : 0;
  if (*bad) return RAG_EINVAL;
  if (b == NULL || (rc = batch_begin(g, b, c, 1)) != RAG_OK) return RAG_ENOMEM;
  if ((rc = batch_edge(g, b, s, d, r, c)) != RAG_OK) return rc;
  if ((rc = batch_run(g, b, chunk, clen, c, rel, rlen, &ne)) != RAG_OK) return rc;
  *added = ne > 0;
  return RAG_OK;
}

/* The co-occurrence pairs of one sentence's entities list[0, n), into b->pairs. */
static int sentence_pairs(rag_graph *g, batch *b, const uint32_t *list, size_t n) {
  size_t i, j;
  for (i = 0; i < n; i++)
    for (j = i + 1; j < n; j++) {
      size_t la, lb;
      const char *ka = slot_key(g, b, list[i], &la), *kb = slot_key(g, b, list[j], &lb);
      int lt = key_cmp(ka, la, kb, lb) < 0;
      if (push_u32(&b->pairs, &b->npairs, &b->paircap, lt ? list[i] : list[j]) != RAG_OK ||
          push_u32(&b->pairs, &b->npairs, &b->paircap, lt ? list[j] : list[i]) != RAG_OK)
        return RAG_ENOMEM;
    }
  return RAG_OK;
}

#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

/*
** Hashes the mentions' keys into b->hs (batch_entity's table of new
** entities uses them). The lookups of a chunk's keys and pairs miss the
** caches of a large graph one after another; issuing every load of a stage
** before the next stage reads them lets the misses overlap. The prefetches
** are hints only: nothing here changes g.
*/
static int prefetch_keys(const rag_graph *g, batch *b, const char *keys, const rag_mention *ms,
                         size_t n) {
  const rag_ids *t = &g->ents;
  size_t i;
  if (n > b->hscap) {
    uint32_t *p = (uint32_t *)rag_grow(b->hs, &b->hscap, n, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    b->hs = p;
  }
  for (i = 0; i < n; i++) b->hs[i] = rag_fnv32(keys + ms[i].key, ms[i].keylen);
  if (t->table == NULL) return RAG_OK;
  for (i = 0; i < n; i++) PREFETCH(&t->table[b->hs[i] & t->mask]);
  for (i = 0; i < n; i++) {
    uint32_t v = t->table[b->hs[i] & t->mask];
    if (v != 0) PREFETCH(&t->e[v - 1]);
  }
  for (i = 0; i < n; i++) {
    uint32_t v = t->table[b->hs[i] & t->mask];
    if (v != 0 && t->e[v - 1].hash == b->hs[i]) PREFETCH(t->pool + t->e[v - 1].off);
  }
  return RAG_OK;
}

static void prefetch_pairs(const rag_graph *g, const batch *b, uint32_t rel) {
  size_t i;
  if (g->etab == NULL || rel == NONE) return;
  for (i = 0; i < b->npairs; i += 2)
    PREFETCH(&g->etab[edge_hash(b->pairs[i], b->pairs[i + 1], rel) & g->emask]);
  for (i = 0; i < b->npairs; i++) /* the ends whose edge counts a new edge bumps */
    if (b->pairs[i] < g->ents.n) PREFETCH(&g->ent[b->pairs[i]]);
}

int rag_graph_extract(rag_graph *g, rag_mentions *m, const char *chunk, size_t clen,
                      const char *text, size_t len, const rag_mentions_opts *o, size_t *count,
                      size_t *errpos) {
  const rag_mention *ms;
  const char *keys;
  size_t n, i, ne;
  uint32_t c = rag_ids_find(&g->chunks, chunk, clen);
  uint32_t rel = rag_ids_find(&g->rels, COOCCURS, sizeof COOCCURS - 1);
  uint32_t list[MAX_PER_SENTENCE], sent = UINT32_MAX;
  size_t nlist = 0;
  batch *b = get_batch(g);
  int rc = rag_mentions_run(m, text, len, o, &ms, &n, errpos);
  *count = 0;
  if (rc != RAG_OK) return rc;
  if (b == NULL || (rc = batch_begin(g, b, c, n)) != RAG_OK) return RAG_ENOMEM;
  keys = rag_mentions_keys(m);
  b->npairs = 0;
  if (prefetch_keys(g, b, keys, ms, n) != RAG_OK) return RAG_ENOMEM;
  for (i = 0; i < n; i++) {
    uint32_t e;
    int fresh;
    rc = batch_entity(g, b, keys + ms[i].key, ms[i].keylen, b->hs[i], text + ms[i].start,
                      ms[i].stop - ms[i].start, &e);
    if (rc != RAG_OK) return rc;
    if (ms[i].sentence != sent || i == 0) {
      if ((rc = sentence_pairs(g, b, list, nlist)) != RAG_OK) return rc;
      sent = ms[i].sentence;
      nlist = 0;
      b->tick++; /* batch_begin left room for one per mention */
    }
    if (e >= g->ents.n) {
      fresh = b->ne[e - g->ents.n].stamp != b->tick;
      b->ne[e - g->ents.n].stamp = b->tick;
    } else {
      fresh = b->stamp[e] != b->tick;
      b->stamp[e] = b->tick;
    }
    if (fresh && nlist < MAX_PER_SENTENCE) list[nlist++] = e;
  }
  if ((rc = sentence_pairs(g, b, list, nlist)) != RAG_OK) return rc;
  prefetch_pairs(g, b, rel);
  for (i = 0; i < b->npairs; i += 2)
    if ((rc = batch_edge(g, b, b->pairs[i], b->pairs[i + 1], rel, c)) != RAG_OK) return rc;
  if ((rc = batch_run(g, b, chunk, clen, c, COOCCURS, sizeof COOCCURS - 1, &ne)) != RAG_OK)
    return rc;
  *count = n;
  return RAG_OK;
}

/* {====== Removal ======} */

static void ent_delete(rag_graph *g, uint32_t e) {
  ent *x = &g->ent[e];
  if (x->naliases > 0) {
    size_t a;
    for (a = 0; a < g->aliases.n; a++)
      if (rag_ids_linked(&g->aliases, (uint32_t)a) && g->atarget[a] == e) {
        rag_ids_unlink(&g->aliases, (uint32_t)a);
        g->live_aliases--;
      }
    x->naliases = 0;
  }
  rag_ids_unlink(&g->ents, e);
  g->nameswaste += x->namelen;
  g->live_ents--;
}

static void lose(rag_graph *g, uint32_t e) {
  if (g->ent[e].nment == 0 && g->ent[e].nedge == 0) ent_delete(g, e);
}

static void edge_delete(rag_graph *g, uint32_t x) {
  edge *e = &g->edge[x];
  size_t i = etab_pos(g, e->src, e->dst, e->rel, e->hash), j = i;
  for (;;) { /* remove the table cell, moving later cells of its run back */
    size_t k;
    j = (j + 1) & g->emask;
    if (g->etab[j] == 0) break;
    k = (uint32_t)(g->etab[j] >> 32) & g->emask;
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
    g->etab[i] = g->etab[j];
    i = j;
  }
  g->etab[i] = 0;
  g->ent[e->src].nedge--;
  if (e->dst != e->src) g->ent[e->dst].nedge--;
  lose(g, e->src);
  if (e->dst != e->src) lose(g, e->dst);
  e->src = g->freeedge;
  g->freeedge = x;
  g->live_edges--;
}

static size_t remove_slot(rag_graph *g, uint32_t c) {
  chunkrefs *cr = &g->chunk[c];
  size_t i, n = cr->n;
  for (i = 0; i < n; i++) {
    uint32_t ref = cr->refs[i];
    g->nrefs--;
    if (ref & REF_EDGE) {
      uint32_t x = ref & ~REF_EDGE;
      if (--g->edge[x].nchunks == 0) edge_delete(g, x);
    } else {
      g->ent[ref].nment--;
      g->nmentions--;
      lose(g, ref);
    }
  }
  rag_free(cr->refs);
  cr->refs = NULL;
  cr->n = cr->cap = 0;
  rag_ids_unlink(&g->chunks, c);
  g->live_chunks--;
  g->v.ok = 0;
  return n;
}

/* Renumbers entity and chunk slots without the dead ones, when it pays; best effort. */
static void compact(rag_graph *g) {
  size_t deadents = g->ents.n - g->live_ents, deadchunks = g->chunks.n - g->live_chunks, i;
  size_t oldents = g->ents.n, oldchunks = g->chunks.n;
  uint32_t *emap, *cmap;
  if ((deadents < 64 || deadents < g->live_ents) && (deadchunks < 64 || deadchunks < g->live_chunks))
    return;
  emap = (uint32_t *)rag_malloc((g->ents.n + 1) * sizeof *emap);
  cmap = (uint32_t *)rag_malloc((g->chunks.n + 1) * sizeof *cmap);
  if (emap == NULL || cmap == NULL) {
    rag_free(emap);
    rag_free(cmap);
    return;
  }
  rag_ids_compact(&g->ents, emap); /* entities: slots, edges' ends, mentions, aliases */
  for (i = 0; i < oldents; i++)
    if (emap[i] != RAG_IDS_NONE) g->ent[emap[i]] = g->ent[i];
  for (i = 0; i < g->nedge; i++)
    if (g->edge[i].nchunks > 0) {
      g->edge[i].src = emap[g->edge[i].src];
      g->edge[i].dst = emap[g->edge[i].dst];
    }
  if (g->etab != NULL) etab_rebuild(g);
  g->etabgen++;
  for (i = 0; i < g->aliases.n; i++)
    if (rag_ids_linked(&g->aliases, (uint32_t)i)) g->atarget[i] = emap[g->atarget[i]];
  rag_ids_compact(&g->chunks, cmap);
  for (i = 0; i < oldchunks; i++) {
    chunkrefs cr = g->chunk[i];
    size_t j;
    if (cmap[i] == RAG_IDS_NONE) continue;
    for (j = 0; j < cr.n; j++)
      if (!(cr.refs[j] & REF_EDGE)) cr.refs[j] = emap[cr.refs[j]];
    g->chunk[cmap[i]] = cr;
  }
  rag_free(emap);
  rag_free(cmap);
  if (g->nameswaste * 2 > g->nameslen) { /* the names without the dead ones' */
    char *p = (char *)rag_malloc(g->nameslen - g->nameswaste + 1);
    size_t len = 0;
    if (p != NULL) {
      for (i = 0; i < g->ents.n; i++) {
        ent *x = &g->ent[i];
        memcpy(p + len, g->names + x->name, x->namelen);
        x->name = (uint32_t)len;
        len += x->namelen;
      }
      rag_free(g->names);
      g->names = p;
      g->nameslen = len;
      g->namescap = len + 1;
      g->nameswaste = 0;
    }
  }
  g->v.ok = 0;
}

size_t rag_graph_remove_chunk(rag_graph *g, const char *chunk, size_t clen) {
  uint32_t c = rag_ids_find(&g->chunks, chunk, clen);
  size_t n;
  if (c == RAG_IDS_NONE) return 0;
  n = remove_slot(g, c);
  compact(g);
  return n;
}

static void unmark(rag_graph *g, const char *doc, size_t dlen) {
  uint32_t d = rag_ids_find(&g->docs, doc, dlen);
  if (d == RAG_IDS_NONE) return;
  rag_free(g->mark[d].hash);
  g->mark[d].hash = NULL;
  rag_ids_unlink(&g->docs, d);
  g->live_marks--;
}

size_t rag_graph_remove_doc(rag_graph *g, const char *doc, size_t dlen) {
  size_t c, n = 0;
  for (c = 0; c < g->chunks.n; c++) {
    size_t len, i;
    const char *id;
    if (!rag_ids_linked(&g->chunks, (uint32_t)c)) continue;
    id = rag_ids_get(&g->chunks, (uint32_t)c, &len);
    if (len < dlen + 2 || memcmp(id, doc, dlen) != 0 || id[dlen] != '#') continue;
    for (i = dlen + 1; i < len && id[i] >= '0' && id[i] <= '9'; i++) {}
    if (i == len) n += remove_slot(g, (uint32_t)c);
  }
  unmark(g, doc, dlen);
  compact(g);
  return n;
}

/* {====== Marks ======} */

int rag_graph_mark(rag_graph *g, const char *doc, size_t dlen, const char *hash, size_t hlen) {
  uint32_t d = rag_ids_find(&g->docs, doc, dlen);
  char *h = (char *)rag_malloc(hlen + 1);
  int rc;
  if (h == NULL) return RAG_ENOMEM;
  if (hlen > 0) memcpy(h, hash, hlen);
  h[hlen] = '\0';
  if (d == RAG_IDS_NONE) {
    if ((rc = rag_ids_reserve(&g->docs, 1, dlen)) == RAG_OK && g->docs.n + 1 > g->markcap) {
      markv *p = (markv *)rag_grow(g->mark, &g->markcap, g->docs.n + 1, sizeof *p);
      if (p == NULL) rc = RAG_ENOMEM;
      else g->mark = p;
    }
    if (rc != RAG_OK) {
      rag_free(h);
      return rc;
    }
    d = rag_ids_push(&g->docs, doc, dlen);
    g->mark[d].hash = NULL;
    g->live_marks++;
  }
  rag_free(g->mark[d].hash);
  g->mark[d].hash = h;
  g->mark[d].len = hlen;
  return RAG_OK;
}

const char *rag_graph_marked(const rag_graph *g, const char *doc, size_t dlen, size_t *hlen) {
  uint32_t d = rag_ids_find(&g->docs, doc, dlen);
  if (d == RAG_IDS_NONE) return NULL;
  *hlen = g->mark[d].len;
  return g->mark[d].hash;
}

size_t rag_graph_nmarks(const rag_graph *g) {
  return g->docs.n;
}

void rag_graph_mark_at(const rag_graph *g, size_t i, const char **doc, size_t *dlen,
                       const char **hash, size_t *hlen) {
  if (!rag_ids_linked(&g->docs, (uint32_t)i)) {
    *doc = *hash = NULL;
    *dlen = *hlen = 0;
    return;
  }
  *doc = rag_ids_get(&g->docs, (uint32_t)i, dlen);
  *hash = g->mark[i].hash;
  *hlen = g->mark[i].len;
}

/* {====== For the loader ======} */

int rag_graph_has_ref(const rag_graph *g, uint32_t ref, uint32_t c) {
  return chunk_has(g, c, ref);
}

void rag_graph_put_ref(rag_graph *g, uint32_t c, uint32_t ref) {
  add_ref(g, c, ref);
}

int rag_graph_put_chunk(rag_graph *g, const char *id, size_t len, size_t n, uint32_t *slot) {
  uint32_t *refs;
  int rc;
  if (n > UINT32_MAX - 1) return RAG_ETOOBIG;
  if ((rc = rag_ids_reserve(&g->chunks, 1, len)) != RAG_OK) return rc;
  if (g->chunks.n + 1 > g->chunkcap) {
    chunkrefs *p = (chunkrefs *)rag_grow(g->chunk, &g->chunkcap, g->chunks.n + 1, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    g->chunk = p;
  }
  if ((refs = (uint32_t *)rag_malloc((n + 1) * sizeof *refs)) == NULL) return RAG_ENOMEM;
  *slot = rag_ids_push(&g->chunks, id, len);
  g->chunk[*slot].refs = refs;
  g->chunk[*slot].n = 0;
  g->chunk[*slot].cap = (uint32_t)n + 1;
  g->live_chunks++;
  return RAG_OK;
}

int rag_graph_put_edge(rag_graph *g, uint32_t src, uint32_t dst, uint32_t rel, uint32_t *slot) {
  int rc = edges_reserve(g, 1);
  if (rc != RAG_OK) return rc;
  *slot = edge_push(g, src, dst, rel, (size_t)-1, 0);
  return RAG_OK;
}
