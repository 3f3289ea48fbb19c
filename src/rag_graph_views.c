/*
** rag_graph_views.c: the graph's sorted views (entities by key, edges by
** (src, dst, relation), adjacency, chunk lists by id), rebuilt after a
** change by the first query that needs them, and the queries over them:
** listings, details, breadth-first neighbourhoods, communities, checks.
*/
#include "rag_graph.h"

#include <stdlib.h>
#include <string.h>

#include "rag_graph_internal.h"

#define NONE RAG_GRAPH_NONE

/* Scratch buffers, each of one element type. */
enum { S_KEYS, S_XKEYS, S_A, S_B, S_C, S_D, S_E, S_W };

typedef struct skey {
  const char *p;
  size_t n;
  uint32_t slot;
} skey;

typedef struct xkey {
  uint32_t a, b, c, slot;
} xkey;

static void *scratch(rag_graph *g, int i, size_t n, size_t size) {
  if (n == 0) n = 1;
  if (n > g->scap[i] || g->scratch[i] == NULL) {
    void *p = rag_grow(g->scratch[i], &g->scap[i], n, size);
    if (p == NULL) return NULL;
    g->scratch[i] = p;
  }
  return g->scratch[i];
}

static int grow32(uint32_t **p, size_t *cap, size_t n) {
  uint32_t *q;
  if (n == 0) n = 1;
  if (*p != NULL && n <= *cap) return RAG_OK;
  if ((q = (uint32_t *)rag_grow(*p, cap, n, sizeof *q)) == NULL) return RAG_ENOMEM;
  *p = q;
  return RAG_OK;
}

static int skey_cmp(const void *x, const void *y) {
  const skey *a = (const skey *)x, *b = (const skey *)y;
  int c = memcmp(a->p, b->p, a->n < b->n ? a->n : b->n);
  if (c != 0) return c;
  return a->n < b->n ? -1 : a->n > b->n;
}

static int xkey_cmp(const void *x, const void *y) {
  const xkey *a = (const xkey *)x, *b = (const xkey *)y;
  if (a->a != b->a) return a->a < b->a ? -1 : 1;
  if (a->b != b->b) return a->b < b->b ? -1 : 1;
  return a->c < b->c ? -1 : a->c > b->c;
}

static int u32_cmp(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return a < b ? -1 : a > b;
}

static int u64_cmp(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

/* The linked slots of t sorted by id into order (room for t->n); rank by slot (NONE: dead). */
static size_t sort_ids(rag_graph *g, const rag_ids *t, uint32_t *order, uint32_t *rank) {
  skey *k = (skey *)g->scratch[S_KEYS];
  size_t i, n = 0;
  for (i = 0; i < t->n; i++) {
    rank[i] = NONE;
    if (!rag_ids_linked(t, (uint32_t)i)) continue;
    k[n].p = rag_ids_get(t, (uint32_t)i, &k[n].n);
    k[n].slot = (uint32_t)i;
    n++;
  }
  if (n > 1) qsort(k, n, sizeof *k, skey_cmp);
  for (i = 0; i < n; i++) {
    if (order != NULL) order[i] = k[i].slot;
    rank[k[i].slot] = (uint32_t)i;
  }
  return n;
}

/* {====== Views ======} */

static int views_alloc(rag_graph *g) {
  views *v = &g->v;
  size_t ne = g->ents.n, nc = g->chunks.n, nx = g->nedge, most = ne;
  if (nc > most) most = nc;
  if (g->rels.n > most) most = g->rels.n;
  if (scratch(g, S_KEYS, most, sizeof(skey)) == NULL || scratch(g, S_XKEYS, nx, sizeof(xkey)) == NULL ||
      scratch(g, S_A, ne, 4) == NULL || scratch(g, S_B, nx, 4) == NULL)
    return RAG_ENOMEM;
  if (grow32(&v->eorder, &v->cap[0], ne) || grow32(&v->erank, &v->cap[1], ne) ||
      grow32(&v->crank, &v->cap[2], nc) || grow32(&v->corder, &v->cap[3], nc) ||
      grow32(&v->rrank, &v->cap[4], g->rels.n) || grow32(&v->xorder, &v->cap[5], nx) ||
      grow32(&v->xrank, &v->cap[6], nx) || grow32(&v->adjs, &v->cap[7], ne + 1) ||
      grow32(&v->adj, &v->cap[8], 2 * g->live_edges) || grow32(&v->ments, &v->cap[9], ne + 1) ||
      grow32(&v->ment, &v->cap[10], g->nmentions) ||
      grow32(&v->xchs, &v->cap[11], nx + 1))
    return RAG_ENOMEM;
  return RAG_OK;
}

/* The edges sorted and the adjacency lists, in edge order. */
static void view_edges(rag_graph *g) {
  views *v = &g->v;
  xkey *k = (xkey *)g->scratch[S_XKEYS];
  uint32_t *cur = (uint32_t *)g->scratch[S_A];
  size_t i, n = 0, ne = g->ents.n;
  for (i = 0; i < g->nedge; i++) {
    const edge *x = &g->edge[i];
    v->xrank[i] = NONE;
    if (x->nchunks == 0) continue;
    k[n].a = v->erank[x->src];
    k[n].b = v->erank[x->dst];
    k[n].c = v->rrank[x->rel];
    k[n].slot = (uint32_t)i;
    n++;
  }
  if (n > 1) qsort(k, n, sizeof *k, xkey_cmp);
  v->nx = n;
  memset(v->adjs, 0, (ne + 1) * sizeof *v->adjs);
  for (i = 0; i < n; i++) {
    const edge *x = &g->edge[k[i].slot];
    v->xorder[i] = k[i].slot;
    v->xrank[k[i].slot] = (uint32_t)i;
    v->adjs[x->src + 1]++;
    if (x->dst != x->src) v->adjs[x->dst + 1]++;
  }
  for (i = 0; i < ne; i++) v->adjs[i + 1] += v->adjs[i];
  memcpy(cur, v->adjs, ne * sizeof *cur);
  for (i = 0; i < n; i++) {
    const edge *x = &g->edge[v->xorder[i]];
    v->adj[cur[x->src]++] = v->xorder[i];
    if (x->dst != x->src) v->adj[cur[x->dst]++] = v->xorder[i];
  }
}

/* The mention chunks of each entity and the chunks of each edge, by chunk id. */
static int view_chunks(rag_graph *g) {
  views *v = &g->v;
  uint32_t *ecur = (uint32_t *)g->scratch[S_A], *xcur = (uint32_t *)g->scratch[S_B];
  size_t i, j, ne = g->ents.n, tags = g->nrefs - g->nmentions;
  if (grow32(&v->xch, &v->cap[12], tags) != RAG_OK) return RAG_ENOMEM;
  v->ments[0] = 0;
  for (i = 0; i < ne; i++) v->ments[i + 1] = v->ments[i] + g->ent[i].nment;
  v->xchs[0] = 0;
  for (i = 0; i < g->nedge; i++) v->xchs[i + 1] = v->xchs[i] + g->edge[i].nchunks;
  memcpy(ecur, v->ments, ne * sizeof *ecur);
  memcpy(xcur, v->xchs, g->nedge * sizeof *xcur);
  for (i = 0; i < v->nc; i++) {
    uint32_t c = v->corder[i];
    const chunkrefs *cr = &g->chunk[c];
    for (j = 0; j < cr->n; j++) {
      uint32_t r = cr->refs[j];
      if (r & REF_EDGE) v->xch[xcur[r & ~REF_EDGE]++] = c;
      else v->ment[ecur[r]++] = c;
    }
  }
  return RAG_OK;
}

int rag_graph_views(rag_graph *g) {
  views *v = &g->v;
  if (v->ok) return RAG_OK;
  if (views_alloc(g) != RAG_OK) return RAG_ENOMEM;
  v->ne = sort_ids(g, &g->ents, v->eorder, v->erank);
  v->nc = sort_ids(g, &g->chunks, v->corder, v->crank);
  sort_ids(g, &g->rels, NULL, v->rrank);
  view_edges(g);
  if (view_chunks(g) != RAG_OK) return RAG_ENOMEM;
  v->ok = 1;
  return RAG_OK;
}

/* {====== Listings ======} */

void rag_graph_stats_get(const rag_graph *g, rag_graph_stats *s) {
  s->entities = g->live_ents;
  s->edges = g->live_edges;
  s->aliases = g->live_aliases;
  s->mentions = g->nmentions;
  s->docs = g->live_marks;
}

const char *rag_graph_key(const rag_graph *g, uint32_t e, size_t *len) {
  return rag_ids_get(&g->ents, e, len);
}

const char *rag_graph_name(const rag_graph *g, uint32_t e, size_t *len) {
  *len = g->ent[e].namelen;
  return g->names + g->ent[e].name;
}

const char *rag_graph_chunk(const rag_graph *g, uint32_t c, size_t *len) {
  return rag_ids_get(&g->chunks, c, len);
}

const char *rag_graph_alias_key(const rag_graph *g, uint32_t a, size_t *len) {
  return rag_ids_get(&g->aliases, a, len);
}

void rag_graph_edge_get(const rag_graph *g, uint32_t x, rag_graph_edge *out) {
  const edge *e = &g->edge[x];
  out->src = e->src;
  out->dst = e->dst;
  out->rel = rag_ids_get(&g->rels, e->rel, &out->rlen);
  out->chunks = g->v.xch + g->v.xchs[x];
  out->nchunks = e->nchunks;
}

int rag_graph_entities(rag_graph *g, const uint32_t **ents, size_t *n) {
  if (rag_graph_views(g) != RAG_OK) return RAG_ENOMEM;
  *ents = g->v.eorder;
  *n = g->v.ne;
  return RAG_OK;
}

int rag_graph_edges(rag_graph *g, const uint32_t **edges, size_t *n) {
  if (rag_graph_views(g) != RAG_OK) return RAG_ENOMEM;
  *edges = g->v.xorder;
  *n = g->v.nx;
  return RAG_OK;
}

int rag_graph_info_get(rag_graph *g, uint32_t e, rag_graph_info *out) {
  skey *k;
  uint32_t *al;
  size_t i, n = 0;
  if (rag_graph_views(g) != RAG_OK) return RAG_ENOMEM;
  k = (skey *)scratch(g, S_KEYS, g->ent[e].naliases, sizeof *k);
  al = (uint32_t *)scratch(g, S_C, g->ent[e].naliases, 4);
  if (k == NULL || al == NULL) return RAG_ENOMEM;
  for (i = 0; i < g->aliases.n && n < g->ent[e].naliases; i++) {
    if (!rag_ids_linked(&g->aliases, (uint32_t)i) || g->atarget[i] != e) continue;
    k[n].p = rag_ids_get(&g->aliases, (uint32_t)i, &k[n].n);
    k[n].slot = (uint32_t)i;
    n++;
  }
  if (n > 1) qsort(k, n, sizeof *k, skey_cmp);
  for (i = 0; i < n; i++) al[i] = k[i].slot;
  out->aliases = al;
  out->naliases = n;
  out->chunks = g->v.ment + g->v.ments[e];
  out->nchunks = g->ent[e].nment;
  out->degree = g->ent[e].nedge;
  return RAG_OK;
}

/* {====== Neighbourhoods ======} */

/* Sorts ranks[0, n), drops repeats; the count left. */
static size_t sort_unique(uint32_t *ranks, size_t n) {
  size_t i, m = 0;
  if (n > 1) qsort(ranks, n, sizeof *ranks, u32_cmp);
  for (i = 0; i < n; i++)
    if (m == 0 || ranks[m - 1] != ranks[i]) ranks[m++] = ranks[i];
  return m;
}

int rag_graph_neighbours(rag_graph *g, const uint32_t *seeds, size_t nseeds, size_t hops,
                         size_t limit, const uint32_t **ents, const uint32_t **hopsout,
                         size_t *nents, const uint32_t **edges, size_t *nedges) {
  views *v = &g->v;
  uint32_t *hop, *out, *oh, *cand, *xs;
  size_t i, j = 0, n = 0, h, nx = 0;
  if (rag_graph_views(g) != RAG_OK) return RAG_ENOMEM;
  hop = (uint32_t *)scratch(g, S_A, g->ents.n, 4);
  out = (uint32_t *)scratch(g, S_C, v->ne, 4);
  oh = (uint32_t *)scratch(g, S_D, v->ne, 4);
  cand = (uint32_t *)scratch(g, S_E, nseeds > 2 * v->nx + 1 ? nseeds : 2 * v->nx + 1, 4);
  xs = (uint32_t *)scratch(g, S_B, 2 * v->nx + 1, 4);
  if (hop == NULL || out == NULL || oh == NULL || cand == NULL || xs == NULL) return RAG_ENOMEM;
  for (i = 0; i < g->ents.n; i++) hop[i] = NONE;
  for (i = 0; i < nseeds; i++) cand[i] = v->erank[seeds[i]];
  for (h = 0;; h++) {
    size_t m = sort_unique(cand, h == 0 ? nseeds : j), hi = n;
    for (i = 0; i < m && n < limit; i++) {
      uint32_t e = v->eorder[cand[i]];
      hop[e] = (uint32_t)h;
      out[n] = e;
      oh[n++] = (uint32_t)h;
    }
    if (h == hops || n == limit || n == hi) break;
    for (j = 0, i = hi; i < n; i++) { /* the next hop's candidates */
      uint32_t e = out[i], k;
      for (k = v->adjs[e]; k < v->adjs[e + 1]; k++) {
        const edge *x = &g->edge[v->adj[k]];
        uint32_t o = x->src == e ? x->dst : x->src;
        if (hop[o] == NONE) cand[j++] = v->erank[o];
      }
    }
  }
  for (i = 0; i < n; i++) { /* the edges between reached entities */
    uint32_t e = out[i], k;
    for (k = v->adjs[e]; k < v->adjs[e + 1]; k++) {
      const edge *x = &g->edge[v->adj[k]];
      if (hop[x->src] != NONE && hop[x->dst] != NONE) xs[nx++] = v->xrank[v->adj[k]];
    }
  }
  nx = sort_unique(xs, nx);
  for (i = 0; i < nx; i++) xs[i] = v->xorder[xs[i]];
  *ents = out;
  *hopsout = oh;
  *nents = n;
  *edges = xs;
  *nedges = nx;
  return RAG_OK;
}

/* {====== Communities ======} */

static uint32_t find_root(uint32_t *parent, uint32_t e) {
  while (parent[e] != e) {
    parent[e] = parent[parent[e]];
    e = parent[e];
  }
  return e;
}

/* Label propagation into label (by slot): ranks of entities. RAG_ENOMEM. */
static int propagate(rag_graph *g, uint32_t *label, size_t iterations) {
  views *v = &g->v;
  uint32_t *next = (uint32_t *)scratch(g, S_B, g->ents.n, 4);
  uint64_t *w = (uint64_t *)scratch(g, S_W, v->nx * 2 + 2, 8);
  size_t it, i;
  if (next == NULL || w == NULL) return RAG_ENOMEM;
  for (it = 0; it < iterations; it++) {
    int changed = 0;
    for (i = 0; i < v->ne; i++) {
      uint32_t e = v->eorder[i], k, best = label[e];
      size_t n = 0, a;
      uint64_t bestw = 0;
      w[n++] = (uint64_t)label[e] << 32 | 1u; /* a node counts itself once */
      for (k = v->adjs[e]; k < v->adjs[e + 1]; k++) {
        const edge *x = &g->edge[v->adj[k]];
        uint32_t o = x->src == e ? x->dst : x->src;
        w[n++] = (uint64_t)label[o] << 32 | x->nchunks;
      }
      qsort(w, n, sizeof *w, u64_cmp);
      for (a = 0; a < n;) {
        uint32_t l = (uint32_t)(w[a] >> 32);
        uint64_t sum = 0;
        while (a < n && (uint32_t)(w[a] >> 32) == l) sum += (uint32_t)w[a++];
        if (sum > bestw) {
          bestw = sum;
          best = l;
        }
      }
      next[e] = best;
      changed |= best != label[e];
    }
    for (i = 0; i < v->ne; i++) label[v->eorder[i]] = next[v->eorder[i]];
    if (!changed) break;
  }
  return RAG_OK;
}

int rag_graph_communities(rag_graph *g, rag_graph_method method, size_t iterations,
                          const uint32_t **members, const size_t **start, size_t *n) {
  views *v = &g->v;
  uint32_t *grp, *cid, *size, *pos;
  uint64_t *order;
  size_t *st, i, nc = 0;
  if (rag_graph_views(g) != RAG_OK) return RAG_ENOMEM;
  grp = (uint32_t *)scratch(g, S_A, g->ents.n, 4);
  cid = (uint32_t *)scratch(g, S_C, g->ents.n, 4);
  size = (uint32_t *)scratch(g, S_D, v->ne, 4);
  if (grp == NULL || cid == NULL || size == NULL) return RAG_ENOMEM;
  if (method == RAG_GRAPH_COMPONENTS) {
    for (i = 0; i < g->ents.n; i++) grp[i] = (uint32_t)i;
    for (i = 0; i < v->nx; i++) {
      const edge *x = &g->edge[v->xorder[i]];
      uint32_t a = find_root(grp, x->src), b = find_root(grp, x->dst);
      if (a != b) grp[a > b ? a : b] = a > b ? b : a;
    }
    for (i = 0; i < g->ents.n; i++) grp[i] = find_root(grp, (uint32_t)i);
  } else {
    for (i = 0; i < g->ents.n; i++) grp[i] = v->erank[i];
    if (propagate(g, grp, iterations) != RAG_OK) return RAG_ENOMEM;
  }
  /* groups in key order of their first member; then largest first */
  for (i = 0; i < g->ents.n; i++) cid[i] = NONE;
  order = (uint64_t *)scratch(g, S_W, v->ne, 8);
  if (order == NULL) return RAG_ENOMEM;
  for (i = 0; i < v->ne; i++) {
    uint32_t e = v->eorder[i];
    if (cid[grp[e]] == NONE) {
      cid[grp[e]] = (uint32_t)nc;
      size[nc] = 0;
      order[nc] = (uint64_t)i; /* the first member's rank */
      nc++;
    }
    size[cid[grp[e]]]++;
  }
  for (i = 0; i < nc; i++) order[i] |= (uint64_t)(UINT32_MAX - size[i]) << 32;
  if (nc > 1) qsort(order, nc, sizeof *order, u64_cmp);
  st = (size_t *)scratch(g, S_XKEYS, (nc + 1) * sizeof(size_t) / sizeof(xkey) + 1, sizeof(xkey));
  pos = (uint32_t *)scratch(g, S_B, v->ne + 1, 4); /* the members, then a cursor per group */
  if (st == NULL || pos == NULL || scratch(g, S_E, nc + 1, 4) == NULL) return RAG_ENOMEM;
  st[0] = 0;
  for (i = 0; i < nc; i++) { /* group id -> its place (in S_E) and start */
    uint32_t first = v->eorder[(uint32_t)order[i]], c = cid[grp[first]];
    ((uint32_t *)g->scratch[S_E])[c] = (uint32_t)i;
    st[i + 1] = st[i] + size[c];
  }
  for (i = 0; i < nc; i++) size[i] = 0; /* now: members placed per place */
  for (i = 0; i < v->ne; i++) {
    uint32_t e = v->eorder[i], p = ((uint32_t *)g->scratch[S_E])[cid[grp[e]]];
    pos[st[p] + size[p]++] = e;
  }
  *members = pos;
  *start = st;
  *n = nc;
  return RAG_OK;
}

/* {====== Checks ======} */

int rag_graph_check(const rag_graph *g) {
  uint32_t *ments = NULL, *tags = NULL, *deg = NULL, *als = NULL;
  size_t i, j, nrefs = 0, nment = 0, live = 0;
  int ok = 1;
  ments = (uint32_t *)calloc(g->ents.n + 1, 4);
  deg = (uint32_t *)calloc(g->ents.n + 1, 4);
  als = (uint32_t *)calloc(g->ents.n + 1, 4);
  tags = (uint32_t *)calloc(g->nedge + 1, 4);
  if (ments == NULL || tags == NULL || deg == NULL || als == NULL) ok = 0;
  for (i = 0; ok && i < g->chunks.n; i++) {
    const chunkrefs *cr = &g->chunk[i];
    if (!rag_ids_linked(&g->chunks, (uint32_t)i)) {
      ok = cr->n == 0;
      continue;
    }
    live++;
    ok = cr->n > 0 && cr->n <= cr->cap;
    for (j = 0; ok && j < cr->n; j++) {
      uint32_t r = cr->refs[j];
      ok = rag_graph_has_ref(g, r, (uint32_t)i);
      if (r & REF_EDGE) ok = ok && (r & ~REF_EDGE) < g->nedge && g->edge[r & ~REF_EDGE].nchunks > 0 && ++tags[r & ~REF_EDGE];
      else ok = ok && r < g->ents.n && rag_ids_linked(&g->ents, r) && ++ments[r] && ++nment;
      nrefs++;
    }
  }
  ok = ok && live == g->live_chunks && nrefs == g->nrefs && nment == g->nmentions;
  for (i = 0, live = 0; ok && i < g->nedge; i++) {
    const edge *x = &g->edge[i];
    if (x->nchunks == 0) continue;
    live++;
    ok = x->nchunks == tags[i] && x->src < g->ents.n && x->dst < g->ents.n &&
         rag_ids_linked(&g->ents, x->src) && rag_ids_linked(&g->ents, x->dst);
    if (ok) {
      size_t p = x->hash & g->emask;
      while (g->etab[p] != 0 && (uint32_t)g->etab[p] != i + 1) p = (p + 1) & g->emask;
      ok = g->etab[p] != 0 && (uint32_t)(g->etab[p] >> 32) == x->hash;
      deg[x->src]++;
      if (x->dst != x->src) deg[x->dst]++;
    }
  }
  ok = ok && live == g->live_edges;
  for (i = 0, live = 0; ok && i < g->aliases.n; i++) {
    if (!rag_ids_linked(&g->aliases, (uint32_t)i)) continue;
    live++;
    ok = g->atarget[i] < g->ents.n && rag_ids_linked(&g->ents, g->atarget[i]);
    if (ok) als[g->atarget[i]]++;
  }
  ok = ok && live == g->live_aliases;
  for (i = 0, live = 0; ok && i < g->ents.n; i++) {
    const ent *x = &g->ent[i];
    if (!rag_ids_linked(&g->ents, (uint32_t)i)) continue;
    live++;
    ok = x->nment == ments[i] && x->nedge == deg[i] && x->naliases == als[i] &&
         (size_t)x->name + x->namelen <= g->nameslen;
  }
  ok = ok && live == g->live_ents;
  free(ments);
  free(tags);
  free(deg);
  free(als);
  return ok ? RAG_OK : RAG_ECORRUPT;
}
