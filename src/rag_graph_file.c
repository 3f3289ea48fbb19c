/*
** rag_graph_file.c: the entity graph's file: saving in a canonical order
** (so equal graphs save to equal bytes), and loading with every count,
** order and reference checked.
**
** File format (all integers little-endian; varint = LEB128, at most 10 bytes):
**
**   file    = header section{5}
**   header  = magic "RAGGRPH\0" version:u32 nsections:u32 size:u64 crc:u32
**   section = tag:4 length:u64 payload[length] crc:u32   (rag_file.h)
**   sections, in this order:
**     "ENTS"  n:varint (key:str name:str){n}
**     "ALIA"  n:varint (alias:str entity:varint){n}
**     "CHNK"  n:varint (id:str nment:varint entity:varint{nment}){n}
**     "EDGE"  nrel:varint rel:str{nrel} n:varint
**             (src:varint dst:varint rel:varint ntags:varint chunk:varint{ntags}){n}
**     "MARK"  n:varint (doc:str hash:str){n}
**   str     = len:varint bytes[len]
**
** Version 1. Entities, aliases, chunks, relations and marks are in strictly
** increasing bytewise order of their strings (so each is unique); an entity
** is its number in ENTS, a chunk its number in CHNK, a relation its number
** in EDGE. Keys and aliases are non-empty and no alias is an entity's key;
** a chunk's entities and an edge's chunks strictly increase; edges strictly
** increase by (src, dst, rel); every edge has a chunk, every relation an
** edge, every chunk a reference.
*/
#include "rag_graph.h"

#include <stdlib.h>
#include <string.h>

#include "rag_file.h"
#include "rag_graph_internal.h"

static const unsigned char MAGIC[8] = {'R', 'A', 'G', 'G', 'R', 'P', 'H', 0};
#define FORMAT_VERSION 1u
#define NSECTIONS 5u

static const char TAGS[NSECTIONS][5] = {"ENTS", "ALIA", "CHNK", "EDGE", "MARK"};

/* {====== Saving ======} */

typedef struct skey {
  const char *p;
  size_t n;
  uint32_t slot;
} skey;

static int skey_cmp(const void *x, const void *y) {
  const skey *a = (const skey *)x, *b = (const skey *)y;
  int c = memcmp(a->p, b->p, a->n < b->n ? a->n : b->n);
  if (c != 0) return c;
  return a->n < b->n ? -1 : a->n > b->n;
}

/* The linked slots of t sorted by id: a new array of *n keys (freed by the caller). */
static skey *sorted(const rag_ids *t, size_t *n) {
  skey *k = (skey *)rag_malloc((t->n + 1) * sizeof *k);
  size_t i, m = 0;
  if (k == NULL) return NULL;
  for (i = 0; i < t->n; i++) {
    if (!rag_ids_linked(t, (uint32_t)i)) continue;
    k[m].p = rag_ids_get(t, (uint32_t)i, &k[m].n);
    k[m].slot = (uint32_t)i;
    m++;
  }
  if (m > 1) qsort(k, m, sizeof *k, skey_cmp);
  *n = m;
  return k;
}

static int u32_cmp(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return a < b ? -1 : a > b;
}

/* ENTS, ALIA and MARK into w[0], w[1], w[4]. */
static int write_names(rag_graph *g, rag_writer *w) {
  const views *v = &g->v;
  skey *al, *dk;
  size_t i, na, nd;
  rag_w_varint(&w[0], v->ne);
  for (i = 0; i < v->ne; i++) {
    size_t kl, nl;
    const char *k = rag_graph_key(g, v->eorder[i], &kl), *nm = rag_graph_name(g, v->eorder[i], &nl);
    rag_w_str(&w[0], k, kl);
    rag_w_str(&w[0], nm, nl);
  }
  if ((al = sorted(&g->aliases, &na)) == NULL) return RAG_ENOMEM;
  rag_w_varint(&w[1], na);
  for (i = 0; i < na; i++) {
    rag_w_str(&w[1], al[i].p, al[i].n);
    rag_w_varint(&w[1], v->erank[g->atarget[al[i].slot]]);
  }
  rag_free(al);
  if ((dk = sorted(&g->docs, &nd)) == NULL) return RAG_ENOMEM;
  rag_w_varint(&w[4], nd);
  for (i = 0; i < nd; i++) {
    rag_w_str(&w[4], dk[i].p, dk[i].n);
    rag_w_str(&w[4], g->mark[dk[i].slot].hash, g->mark[dk[i].slot].len);
  }
  rag_free(dk);
  return RAG_OK;
}

/* CHNK and EDGE into w[2], w[3]. */
static int write_refs(rag_graph *g, rag_writer *w) {
  const views *v = &g->v;
  uint32_t *ranks = (uint32_t *)rag_malloc((g->ents.n + 1) * sizeof *ranks);
  uint32_t *relnum = (uint32_t *)rag_malloc((g->rels.n + 1) * sizeof *relnum);
  skey *rk = NULL;
  size_t i, j, nrel = 0, nr;
  int rc = RAG_ENOMEM;
  if (ranks == NULL || relnum == NULL || (rk = sorted(&g->rels, &nr)) == NULL) goto done;
  rag_w_varint(&w[2], v->nc);
  for (i = 0; i < v->nc; i++) {
    const chunkrefs *cr = &g->chunk[v->corder[i]];
    size_t len, n = 0;
    const char *id = rag_graph_chunk(g, v->corder[i], &len);
    for (j = 0; j < cr->n; j++)
      if (!(cr->refs[j] & REF_EDGE)) ranks[n++] = v->erank[cr->refs[j]];
    if (n > 1) qsort(ranks, n, sizeof *ranks, u32_cmp);
    rag_w_str(&w[2], id, len);
    rag_w_varint(&w[2], n);
    for (j = 0; j < n; j++) rag_w_varint(&w[2], ranks[j]);
  }
  for (i = 0; i < g->rels.n; i++) relnum[i] = RAG_GRAPH_NONE;
  for (i = 0; i < v->nx; i++) relnum[g->edge[v->xorder[i]].rel] = 0; /* used */
  for (i = 0; i < nr; i++)
    if (relnum[rk[i].slot] == 0) relnum[rk[i].slot] = (uint32_t)++nrel;
  rag_w_varint(&w[3], nrel);
  for (i = 0; i < nr; i++)
    if (relnum[rk[i].slot] != RAG_GRAPH_NONE) rag_w_str(&w[3], rk[i].p, rk[i].n);
  rag_w_varint(&w[3], v->nx);
  for (i = 0; i < v->nx; i++) {
    rag_graph_edge e;
    rag_graph_edge_get(g, v->xorder[i], &e);
    rag_w_varint(&w[3], v->erank[e.src]);
    rag_w_varint(&w[3], v->erank[e.dst]);
    rag_w_varint(&w[3], relnum[g->edge[v->xorder[i]].rel] - 1);
    rag_w_varint(&w[3], e.nchunks);
    for (j = 0; j < e.nchunks; j++) rag_w_varint(&w[3], v->crank[e.chunks[j]]);
  }
  rc = RAG_OK;
done:
  rag_free(ranks);
  rag_free(relnum);
  rag_free(rk);
  return rc;
}

/* The sections, then the file. */
typedef struct saver {
  rag_writer sec[NSECTIONS];
} saver;

static void write_file(const void *obj, rag_writer *w) {
  const saver *sv = (const saver *)obj;
  uint64_t size = RAG_FILE_HEADER;
  size_t i;
  for (i = 0; i < NSECTIONS; i++) size += 16 + sv->sec[i].len;
  rag_w_header(w, MAGIC, FORMAT_VERSION, NSECTIONS, size);
  for (i = 0; i < NSECTIONS; i++) {
    rag_w_begin(w, TAGS[i], sv->sec[i].len);
    rag_w_put(w, sv->sec[i].buf, sv->sec[i].len);
    rag_w_end(w);
  }
}

int rag_graph_dump(rag_graph *g, unsigned char **buf, size_t *n) {
  saver sv;
  size_t i;
  int rc;
  *buf = NULL;
  *n = 0;
  memset(&sv, 0, sizeof sv);
  rc = rag_graph_views(g);
  if (rc == RAG_OK) rc = write_names(g, sv.sec);
  if (rc == RAG_OK) rc = write_refs(g, sv.sec);
  for (i = 0; i < NSECTIONS && rc == RAG_OK; i++) rc = sv.sec[i].rc;
  if (rc == RAG_OK) rc = rag_file_dump(write_file, &sv, buf, n);
  for (i = 0; i < NSECTIONS; i++) rag_free(sv.sec[i].buf);
  return rc;
}

/* {====== Loading ======} */

static int str_after(const char *p, size_t n, const char *q, size_t m) {
  int c = memcmp(p, q, n < m ? n : m);
  return c > 0 || (c == 0 && n > m);
}

/* A count that cannot be more than the bytes left (each item takes one at least). */
static int r_count(rag_reader *r, uint64_t *n) {
  return rag_r_varint(r, n) && *n <= (uint64_t)(r->e - r->p);
}

static int read_ents(rag_graph *g, rag_reader r, const char **why) {
  uint64_t n, i;
  const char *prev = NULL;
  size_t plen = 0;
  if (!r_count(&r, &n) || n > MAX_SLOTS) return rag_corrupt(why, "bad entity count");
  for (i = 0; i < n; i++) {
    const char *k, *nm;
    size_t kl, nl;
    int rc;
    if (!rag_r_str(&r, &k, &kl) || !rag_r_str(&r, &nm, &nl) || kl == 0 || kl >= UINT32_MAX ||
        nl >= UINT32_MAX)
      return rag_corrupt(why, "bad entity");
    if (prev != NULL && !str_after(k, kl, prev, plen))
      return rag_corrupt(why, "entities out of order");
    if ((rc = rag_graph_put_entity(g, k, kl, nm, nl)) != RAG_OK)
      return rc == RAG_ETOOBIG ? rag_corrupt(why, "bad entity") : rc;
    prev = k;
    plen = kl;
  }
  if (r.p != r.e) return rag_corrupt(why, "bad entity section");
  return RAG_OK;
}

static int read_aliases(rag_graph *g, rag_reader r, const char **why) {
  uint64_t n, i, e;
  const char *prev = NULL;
  size_t plen = 0;
  if (!r_count(&r, &n)) return rag_corrupt(why, "bad alias count");
  for (i = 0; i < n; i++) {
    const char *a, *k, *whyx = NULL;
    size_t al, kl;
    int added, rc;
    if (!rag_r_str(&r, &a, &al) || al == 0 || !rag_r_varint(&r, &e) || e >= g->ents.n)
      return rag_corrupt(why, "bad alias");
    if (prev != NULL && !str_after(a, al, prev, plen))
      return rag_corrupt(why, "aliases out of order");
    k = rag_graph_key(g, (uint32_t)e, &kl);
    rc = rag_graph_alias(g, a, al, k, kl, &added, &whyx);
    if (rc == RAG_EINVAL || rc == RAG_ETOOBIG) return rag_corrupt(why, "bad alias");
    if (rc != RAG_OK) return rc;
    prev = a;
    plen = al;
  }
  if (r.p != r.e) return rag_corrupt(why, "bad alias section");
  return RAG_OK;
}

static int read_chunks(rag_graph *g, rag_reader r, const char **why) {
  uint64_t n, i, m, j, e;
  const char *prev = NULL;
  size_t plen = 0;
  if (!r_count(&r, &n) || n > MAX_SLOTS) return rag_corrupt(why, "bad chunk count");
  for (i = 0; i < n; i++) {
    const char *id;
    size_t len;
    uint32_t c;
    uint64_t last = 0;
    int rc;
    if (!rag_r_str(&r, &id, &len) || !r_count(&r, &m) || m > g->ents.n)
      return rag_corrupt(why, "bad chunk");
    if (prev != NULL && !str_after(id, len, prev, plen))
      return rag_corrupt(why, "chunks out of order");
    if ((rc = rag_graph_put_chunk(g, id, len, (size_t)m, &c)) != RAG_OK)
      return rc == RAG_ETOOBIG ? rag_corrupt(why, "bad chunk") : rc;
    for (j = 0; j < m; j++) {
      if (!rag_r_varint(&r, &e) || e >= g->ents.n || (j > 0 && e <= last))
        return rag_corrupt(why, "bad mention");
      rag_graph_put_ref(g, c, (uint32_t)e);
      last = e;
    }
    prev = id;
    plen = len;
  }
  if (r.p != r.e) return rag_corrupt(why, "bad chunk section");
  return RAG_OK;
}

/* Room for one more reference of chunk c. */
static int chunk_room(rag_graph *g, uint32_t c) {
  chunkrefs *cr = &g->chunk[c];
  if (cr->n == cr->cap) {
    size_t cap = cr->cap;
    uint32_t *p;
    if (cap >= UINT32_MAX / 2) return RAG_ENOMEM;
    p = (uint32_t *)rag_grow(cr->refs, &cap, (size_t)cr->n + 1, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    cr->refs = p;
    cr->cap = (uint32_t)cap;
  }
  return RAG_OK;
}

static int read_edges(rag_graph *g, rag_reader r, const char **why) {
  uint64_t nrel, n, i, j, s, d, rel, nt, c, ps = 0, pd = 0, pr = 0, lastc;
  const char *prev = NULL;
  size_t plen = 0;
  uint8_t *used;
  int rc = RAG_OK;
  if (!r_count(&r, &nrel)) return rag_corrupt(why, "bad relation count");
  for (i = 0; i < nrel; i++) {
    const char *s0;
    size_t len;
    if (!rag_r_str(&r, &s0, &len) || (prev != NULL && !str_after(s0, len, prev, plen)))
      return rag_corrupt(why, "bad relation");
    if ((rc = rag_ids_reserve(&g->rels, 1, len)) != RAG_OK)
      return rc == RAG_ETOOBIG ? rag_corrupt(why, "bad relation") : rc;
    rag_ids_push(&g->rels, s0, len);
    prev = s0;
    plen = len;
  }
  if (!r_count(&r, &n) || n > MAX_SLOTS) return rag_corrupt(why, "bad edge count");
  if ((used = (uint8_t *)rag_malloc((size_t)nrel + 1)) == NULL) return RAG_ENOMEM;
  memset(used, 0, (size_t)nrel + 1);
  for (i = 0; i < n && rc == RAG_OK; i++) {
    uint32_t x;
    if (!rag_r_varint(&r, &s) || !rag_r_varint(&r, &d) || !rag_r_varint(&r, &rel) ||
        !r_count(&r, &nt) || s >= g->ents.n || d >= g->ents.n || rel >= nrel || nt == 0 ||
        nt > g->chunks.n) {
      rc = rag_corrupt(why, "bad edge");
      break;
    }
    if (i > 0 && (s < ps || (s == ps && (d < pd || (d == pd && rel <= pr))))) {
      rc = rag_corrupt(why, "edges out of order");
      break;
    }
    ps = s;
    pd = d;
    pr = rel;
    used[rel] = 1;
    if ((rc = rag_graph_put_edge(g, (uint32_t)s, (uint32_t)d, (uint32_t)rel, &x)) != RAG_OK) break;
    for (j = 0, lastc = 0; j < nt && rc == RAG_OK; j++) {
      if (!rag_r_varint(&r, &c) || c >= g->chunks.n || (j > 0 && c <= lastc)) {
        rc = rag_corrupt(why, "bad edge chunk");
        break;
      }
      if ((rc = chunk_room(g, (uint32_t)c)) == RAG_OK) rag_graph_put_ref(g, (uint32_t)c, x | REF_EDGE);
      lastc = c;
    }
  }
  for (i = 0; rc == RAG_OK && i < nrel; i++)
    if (!used[i]) rc = rag_corrupt(why, "unused relation");
  rag_free(used);
  if (rc == RAG_OK && r.p != r.e) rc = rag_corrupt(why, "bad edge section");
  return rc;
}

static int read_marks(rag_graph *g, rag_reader r, const char **why) {
  uint64_t n, i;
  const char *prev = NULL;
  size_t plen = 0;
  if (!r_count(&r, &n)) return rag_corrupt(why, "bad mark count");
  for (i = 0; i < n; i++) {
    const char *d, *h;
    size_t dl, hl;
    int rc;
    if (!rag_r_str(&r, &d, &dl) || !rag_r_str(&r, &h, &hl) ||
        (prev != NULL && !str_after(d, dl, prev, plen)))
      return rag_corrupt(why, "bad mark");
    if ((rc = rag_graph_mark(g, d, dl, h, hl)) != RAG_OK)
      return rc == RAG_ETOOBIG ? rag_corrupt(why, "bad mark") : rc;
    prev = d;
    plen = dl;
  }
  if (r.p != r.e) return rag_corrupt(why, "bad mark section");
  return RAG_OK;
}

int rag_graph_load_mem(const unsigned char *p, size_t n, rag_graph **out, const char **why) {
  rag_reader sec[NSECTIONS];
  uint32_t version;
  rag_graph *g = NULL;
  size_t c;
  int rc;
  *out = NULL;
  *why = "";
  rc = rag_file_open(p, n, MAGIC, FORMAT_VERSION, TAGS, NSECTIONS, sec, &version,
                     "not a graph (bad magic)", why);
  if (rc == RAG_OK) rc = rag_graph_new(&g);
  if (rc == RAG_OK) rc = read_ents(g, sec[0], why);
  if (rc == RAG_OK) rc = read_aliases(g, sec[1], why);
  if (rc == RAG_OK) rc = read_chunks(g, sec[2], why);
  if (rc == RAG_OK) rc = read_edges(g, sec[3], why);
  if (rc == RAG_OK) rc = read_marks(g, sec[4], why);
  for (c = 0; rc == RAG_OK && c < g->chunks.n; c++)
    if (g->chunk[c].n == 0) rc = rag_corrupt(why, "a chunk without references");
  if (rc != RAG_OK) {
    rag_graph_free(g);
    return rc;
  }
  *out = g;
  return RAG_OK;
}
