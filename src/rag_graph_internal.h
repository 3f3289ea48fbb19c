/*
** rag_graph_internal.h: the graph's representation, shared by rag_graph.c
** (changes, views, queries) and rag_graph_file.c (saving and loading).
** A reference is a mention (entity e in chunk c) or an edge tag (edge x
** from chunk c); each lives in its chunk's list, which a change checks
** through stamps by entity and edge slot.
*/
#ifndef RAG_GRAPH_INTERNAL_H
#define RAG_GRAPH_INTERNAL_H

#include "rag_graph.h"
#include "rag_ids.h"

#define REF_EDGE 0x80000000u      /* a reference to an edge, not an entity */
#define MAX_SLOTS 0x7ffffff0u     /* entities or edges at most */
#define NSCRATCH 10
#define BATCH (NSCRATCH - 1)

typedef struct ent {
  uint32_t name, namelen; /* the name in g->names */
  uint32_t nment, nedge;  /* mentions, incident edges (a loop once) */
  uint32_t naliases;      /* aliases resolving to it */
} ent;

typedef struct edge {
  uint32_t src, dst, rel; /* entities, relation slot */
  uint32_t nchunks;       /* its tags; 0: a free slot (src: the next free one) */
  uint32_t hash;
} edge;

typedef struct chunkrefs {
  uint32_t *refs; /* entity or REF_EDGE | edge, unordered */
  uint32_t n, cap;
} chunkrefs;

typedef struct markv {
  char *hash; /* rag_malloc'd */
  size_t len;
} markv;

/* Sorted orders and adjacency, rebuilt after a change when a query needs them. */
typedef struct views {
  int ok;
  uint32_t *eorder, *erank; /* live entities by key; rank by slot */
  uint32_t *crank;          /* chunk rank by slot */
  uint32_t *corder;
  uint32_t *rrank;          /* relation rank by slot */
  uint32_t *xorder, *xrank; /* live edges sorted; rank by slot */
  uint32_t *adjs, *adj;     /* incident edges of entity e: adj[adjs[e], adjs[e + 1]) */
  uint32_t *ments, *ment;   /* mention chunks of e, by id */
  uint32_t *xchs, *xch;     /* chunks of edge x, by id */
  size_t cap[13];
  size_t ne, nc, nx;
} views;

struct rag_graph {
  rag_ids ents;
  ent *ent;
  size_t entcap, live_ents;
  char *names;
  size_t nameslen, namescap, nameswaste;
  rag_ids aliases;
  uint32_t *atarget; /* by alias slot */
  size_t atcap, live_aliases;
  rag_ids chunks;
  chunkrefs *chunk;
  size_t chunkcap, live_chunks;
  rag_ids rels;
  edge *edge;
  size_t nedge, edgecap, live_edges;
  uint32_t freeedge; /* the first free edge slot, or RAG_GRAPH_NONE */
  uint64_t *etab;    /* hash << 32 | (edge + 1), 0: empty; at most half full */
  size_t emask;
  uint32_t etabgen; /* changes when cells move (growth, compaction) */
  size_t nrefs, nmentions; /* references, mentions among them */
  rag_ids docs;
  markv *mark;
  size_t markcap, live_marks;
  views v;
  void *scratch[NSCRATCH]; /* buffers of the queries; the last is the batch */
  size_t scap[NSCRATCH];
};

/* The entity slot for a loader: a new entity (the key new) named name. */
int rag_graph_put_entity(rag_graph *g, const char *key, size_t klen, const char *name,
                         size_t nlen);
/* A new reference ref of chunk c (a loader's; c's list has room). */
void rag_graph_put_ref(rag_graph *g, uint32_t c, uint32_t ref);
/* A new chunk with room for n references; its slot. */
int rag_graph_put_chunk(rag_graph *g, const char *id, size_t len, size_t n, uint32_t *slot);
/* A new edge (no tags yet) of src, dst, relation slot rel; its slot. */
int rag_graph_put_edge(rag_graph *g, uint32_t src, uint32_t dst, uint32_t rel, uint32_t *slot);
/* Whether chunk c has the reference ref. */
int rag_graph_has_ref(const rag_graph *g, uint32_t ref, uint32_t c);
/* Builds the views. RAG_ENOMEM. */
int rag_graph_views(rag_graph *g);

#endif
