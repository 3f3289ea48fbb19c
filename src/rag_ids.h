/*
** rag_ids.h: the string ids of the indexes (BM25's documents, the vector
** indexes' rows), mapped to dense slot numbers.
** The id bytes live in one pool; an open-addressing table (linear probing,
** at most half full) finds a slot by id. Adding is split in two so that an
** index can reserve everything before it changes anything: rag_ids_reserve
** may fail, rag_ids_push after it cannot. Not thread-safe.
*/
#ifndef RAG_IDS_H
#define RAG_IDS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rag.h"

#define RAG_IDS_NONE UINT32_MAX
#define RAG_IDS_MAX (UINT32_MAX - 1u) /* slots at most */

typedef struct rag_ids_entry {
  uint32_t off, len, hash; /* bytes in the pool; len UINT32_MAX: unlinked */
} rag_ids_entry;

typedef struct rag_ids {
  rag_ids_entry *e; /* slot -> entry */
  size_t n, cap;    /* slots in use, allocated */
  char *pool;
  size_t poollen, poolcap, waste; /* waste: bytes of unlinked or moved ids */
  uint32_t *table; /* slot + 1, 0 = empty */
  size_t mask;
} rag_ids;

void rag_ids_init(rag_ids *t);
void rag_ids_free(rag_ids *t); /* empties t; it can be initialised again */

/* The slot of a linked id, or RAG_IDS_NONE. */
uint32_t rag_ids_find(const rag_ids *t, const char *id, size_t n);
/* Room for `more` slots holding `bytes` id bytes in all. RAG_ENOMEM, RAG_ETOOBIG. */
int rag_ids_reserve(rag_ids *t, size_t more, size_t bytes);
/* Appends a new slot for an id not linked (after a reserve); returns it. */
uint32_t rag_ids_push(rag_ids *t, const char *id, size_t n);
/* Appends a slot with no id (a placeholder, never found); after a reserve. */
uint32_t rag_ids_push_unlinked(rag_ids *t);
/* Takes slot's id out of the table; the slot stays, its id unlinked. */
void rag_ids_unlink(rag_ids *t, uint32_t slot);
/* Unlinks slot, then moves the last slot into it (the caller moves its rows too). */
void rag_ids_swap_remove(rag_ids *t, uint32_t slot);
/* Drops trailing slots so that n remain (those must be unlinked). */
void rag_ids_truncate(rag_ids *t, size_t n);
/*
** Drops every unlinked slot and renumbers the others in order: map[old] is
** a slot's new number, RAG_IDS_NONE for the dropped (map has a cell per
** slot). Never fails; the pool is tidied as rag_ids_tidy does.
*/
void rag_ids_compact(rag_ids *t, uint32_t *map);
/* Rewrites the pool without waste when over half of it is; best effort. */
void rag_ids_tidy(rag_ids *t);

static inline int rag_ids_linked(const rag_ids *t, uint32_t slot) {
  return t->e[slot].len != UINT32_MAX;
}

static inline const char *rag_ids_get(const rag_ids *t, uint32_t slot, size_t *len) {
  *len = t->e[slot].len == UINT32_MAX ? 0 : t->e[slot].len;
  return t->pool + t->e[slot].off;
}

/* Bytewise order of two linked slots' ids (memcmp, then length); inline
** for the heaps of rag_topk, which call it on every tie. */
static inline int rag_ids_cmp(const rag_ids *t, uint32_t a, uint32_t b) {
  size_t nx, ny;
  const char *x = rag_ids_get(t, a, &nx), *y = rag_ids_get(t, b, &ny);
  int c = memcmp(x, y, nx < ny ? nx : ny);
  if (c != 0) return c;
  return nx < ny ? -1 : nx > ny;
}

/* A set of ids (borrowed) that a search may return; the rest it skips. */
typedef struct rag_id_filter {
  const char *const *ids;
  const size_t *lens;
  size_t n;
} rag_id_filter;

/*
** The linked slots of f's ids, each once: sets mark[slot] = stamp (mark
** has a cell per slot, none of them stamp yet) and, when slots is not
** NULL, appends the slot there (room for f->n). Returns how many.
*/
size_t rag_ids_mark(const rag_ids *t, const rag_id_filter *f, uint32_t *mark, uint32_t stamp,
                    uint32_t *slots);

/* Bytes allocated. */
size_t rag_ids_memory(const rag_ids *t);

#endif
