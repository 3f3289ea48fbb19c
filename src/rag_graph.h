/*
** rag_graph.h: the entity graph of Graph RAG. Entities (string keys with a
** display name), aliases, typed edges (src, dst, relation), and for each
** mention and each edge the chunk ids it came from; removing a chunk takes
** its references with it, and what is left with none goes. Every listing
** is sorted by key bytewise, so results are reproducible. Saves to a
** checksummed file (grammar in rag_graph_file.c). Not thread-safe.
*/
#ifndef RAG_GRAPH_H
#define RAG_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"
#include "rag_mentions.h"

typedef struct rag_graph rag_graph;

#define RAG_GRAPH_NONE UINT32_MAX

/* An empty graph. RAG_ENOMEM (*out NULL). */
int rag_graph_new(rag_graph **out);
/* Releases g and everything it owns. Passing NULL is a harmless no-op. */
void rag_graph_free(rag_graph *g);

/*
** Strings are borrowed for the call and copied. Every change below either
** completes or, on RAG_ENOMEM or RAG_ETOOBIG (a count or size over 2^32 - 2),
** leaves the graph as it was.
*/

/* Adds entity `key` (non-empty) named `name`; *added 0 when it existed (its name stays). */
int rag_graph_entity(rag_graph *g, const char *key, size_t klen, const char *name, size_t nlen,
                     int *added);

/*
** Makes `alias` (non-empty) resolve to the entity `key` resolves to; *added
** 0 when it already did. RAG_EINVAL: key resolves to no entity (*why says
** so), or alias is an entity's own key.
*/
int rag_graph_alias(rag_graph *g, const char *alias, size_t alen, const char *key, size_t klen,
                    int *added, const char **why);

/* The entity of key: itself when an entity has it, else through an alias; or RAG_GRAPH_NONE. */
uint32_t rag_graph_resolve(const rag_graph *g, const char *key, size_t klen);

/* The entity key resolves to mentioned in chunk; RAG_EINVAL when there is none. */
int rag_graph_mention(rag_graph *g, const char *key, size_t klen, const char *chunk, size_t clen,
                      int *added);

/*
** The edge (src, dst, relation) after resolving both ends, tagged with
** chunk; *added 1 when the edge is new. RAG_EINVAL: an end resolves to no
** entity (*bad is 1 for src, 2 for dst).
*/
int rag_graph_relate(rag_graph *g, const char *src, size_t slen, const char *dst, size_t dlen,
                     const char *rel, size_t rlen, const char *chunk, size_t clen, int *added,
                     int *bad);

/*
** Runs the extractor m over text and adds what it finds, tagged with chunk:
** each mention's key resolved through the aliases (a new entity takes the
** first surface form seen as its name), the mentions, and "co-occurs" edges
** (src < dst bytewise) between the first 8 distinct entities of each
** sentence. *count: the mentions found. RAG_EENCODING (*errpos), RAG_ENOMEM.
*/
int rag_graph_extract(rag_graph *g, rag_mentions *m, const char *chunk, size_t clen,
                      const char *text, size_t len, const rag_mentions_opts *o, size_t *count,
                      size_t *errpos);

/*
** Removes chunk's references: mentions and edge tags. An edge left with
** no chunk goes; an entity that lost a reference here and has none left
** goes, with its aliases. Returns the references removed. Never fails.
*/
size_t rag_graph_remove_chunk(rag_graph *g, const char *chunk, size_t clen);
/* rag_graph_remove_chunk for every chunk "doc#<digits>", and the doc's mark. */
size_t rag_graph_remove_doc(rag_graph *g, const char *doc, size_t dlen);

/* Records that doc was extracted at version hash (replacing any). */
int rag_graph_mark(rag_graph *g, const char *doc, size_t dlen, const char *hash, size_t hlen);
/* The hash of doc (*hlen bytes, owned by g until the next change), or NULL. */
const char *rag_graph_marked(const rag_graph *g, const char *doc, size_t dlen, size_t *hlen);
/* The marks: *n of them; rag_graph_mark_at gives the i-th (any order). */
size_t rag_graph_nmarks(const rag_graph *g);
void rag_graph_mark_at(const rag_graph *g, size_t i, const char **doc, size_t *dlen,
                       const char **hash, size_t *hlen);

/* {====== Reading ======} */

/*
** Every query below may build the sorted views of g first (RAG_ENOMEM);
** what it returns is owned by g and valid until the next change or query.
*/

typedef struct rag_graph_stats {
  size_t entities, edges, aliases, mentions, docs;
} rag_graph_stats;
void rag_graph_stats_get(const rag_graph *g, rag_graph_stats *s);

/* The key, name of an entity; the id of a chunk; owned by g. */
const char *rag_graph_key(const rag_graph *g, uint32_t e, size_t *len);
const char *rag_graph_name(const rag_graph *g, uint32_t e, size_t *len);
const char *rag_graph_chunk(const rag_graph *g, uint32_t c, size_t *len);
const char *rag_graph_alias_key(const rag_graph *g, uint32_t a, size_t *len);

/* An edge: its ends (entities), relation and chunks (sorted by id). */
typedef struct rag_graph_edge {
  uint32_t src, dst;
  const char *rel;
  size_t rlen;
  const uint32_t *chunks;
  size_t nchunks;
} rag_graph_edge;
void rag_graph_edge_get(const rag_graph *g, uint32_t x, rag_graph_edge *out);

/* Every entity, sorted by key. */
int rag_graph_entities(rag_graph *g, const uint32_t **ents, size_t *n);
/* Every edge, sorted by (src key, dst key, relation). */
int rag_graph_edges(rag_graph *g, const uint32_t **edges, size_t *n);

/* An entity's details: aliases sorted, mention chunks sorted by id, degree (edges). */
typedef struct rag_graph_info {
  const uint32_t *aliases;
  size_t naliases;
  const uint32_t *chunks;
  size_t nchunks;
  size_t degree;
} rag_graph_info;
int rag_graph_info_get(rag_graph *g, uint32_t e, rag_graph_info *out);

/*
** Breadth-first from the seed entities (any order, repeats allowed), over
** edges in both directions, up to `hops` hops, at most `limit` entities:
** *ents (with each one's hop count in *hops) in order of hops, then key;
** *edges: the edges between reached entities, sorted.
*/
int rag_graph_neighbours(rag_graph *g, const uint32_t *seeds, size_t nseeds, size_t hops,
                         size_t limit, const uint32_t **ents, const uint32_t **hopsout,
                         size_t *nents, const uint32_t **edges, size_t *nedges);

typedef enum rag_graph_method { RAG_GRAPH_LABELS = 0, RAG_GRAPH_COMPONENTS } rag_graph_method;

/*
** Communities: connected components, or label propagation (nodes in key
** order take the label of most edge-chunk weight among their neighbours,
** ties to the smallest; at most `iterations` rounds). *members holds the
** communities one after another, each sorted by key; community i is
** members[start[i], start[i + 1]). Largest first, ties by first key.
*/
int rag_graph_communities(rag_graph *g, rag_graph_method method, size_t iterations,
                          const uint32_t **members, const size_t **start, size_t *n);

/* {====== Files ======} */

/* The file's bytes in a new buffer the caller frees with rag_free. RAG_ENOMEM. */
int rag_graph_dump(rag_graph *g, unsigned char **buf, size_t *n);

/*
** A graph from the n bytes of a file at p (copied). RAG_EFORMAT, RAG_EVERSION,
** RAG_ECORRUPT (*why says what was wrong), RAG_ENOMEM. Never reads outside.
*/
int rag_graph_load_mem(const unsigned char *p, size_t n, rag_graph **out, const char **why);

/* Checks every internal invariant; RAG_OK or RAG_ECORRUPT. For tests and fuzzing. */
int rag_graph_check(const rag_graph *g);

#endif
