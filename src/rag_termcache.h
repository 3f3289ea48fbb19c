/*
** rag_termcache.h: the analyzer's memo of what a source word becomes: a
** bounded map from short byte strings (a word as it appears in the text) to
** byte strings (its final term) or to "dropped" (a stopword). It only saves
** work: a value must be a function of its key alone. Each entry also has a
** 32-bit tag that the analyzer's owner may set (BM25 keeps the term's id
** there). Lookups are header only, because they run once per word and must
** inline.
*/
#ifndef RAG_TERMCACHE_H
#define RAG_TERMCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rag_probe.h"

#define RAG_TERMCACHE_KEY 64        /* the longest key (bytes); longer ones are not kept */
#define RAG_TERMCACHE_VALUE 255     /* the longest value (bytes) */
#define RAG_TERMCACHE_ENTRIES 65536 /* at most this many entries ... */
#define RAG_TERMCACHE_ARENA (1u << 21) /* ... and this many bytes of them (2 MiB) */
#define RAG_TERMCACHE_FIXED 10         /* bytes of an entry besides key and value */
#define RAG_TERMCACHE_NOTAG UINT32_MAX  /* the tag of a new entry */

/*
** The bound: 2 * ENTRIES slots of 8 bytes (1 MiB) plus the arena (2 MiB).
** Both grow by doubling from a few KiB, so a cache costs about what it has
** held; when an insert would pass either limit the cache is emptied, keeping
** its memory, and refilled (the eviction rule: simple, and the frequent
** words of a Zipfian text are back within a few documents). An allocation
** that fails only means no insert.
*/
#define RAG_TERMCACHE_MAX_BYTES ((size_t)RAG_TERMCACHE_ENTRIES * 2 * 8 + RAG_TERMCACHE_ARENA)

typedef struct rag_termcache_slot {
  uint32_t hash; /* the key's rag_fnv32 */
  uint32_t off;  /* the entry's offset in the arena + 1; 0: empty */
} rag_termcache_slot;

typedef struct rag_termcache {
  rag_termcache_slot *slots; /* open addressing, at most half full; NULL before the first insert */
  size_t mask;               /* slot count - 1 */
  size_t n;                  /* entries */
  unsigned char *arena;      /* entries back to back: klen, vlen, key, vh[4], tag[4], value */
  size_t used, cap;          /* arena bytes used and allocated */
} rag_termcache;

/* An empty cache that holds no memory. */
void rag_termcache_init(rag_termcache *c);

/* Releases what `c` holds; it is then empty, as after init. */
void rag_termcache_free(rag_termcache *c);

/*
** Keeps key[0..n) (hash h) -> value[0..vn) (vn = 0: dropped) with a hash of
** the value, vh, and a tag; key and value are borrowed and copied (the value
** may be one `c` gave). The key must not be in the cache. Keys over
** RAG_TERMCACHE_KEY bytes and values over RAG_TERMCACHE_VALUE are not kept,
** nor anything when memory runs out; never fails. Returns the kept entry's
** value (*value, owned by `c`) and tag (4 bytes, unaligned), valid until
** the next put; NULL when nothing was kept (value is then unchanged).
*/
unsigned char *rag_termcache_put(rag_termcache *c, const char *key, size_t n, uint32_t h,
                                 const char **value, size_t vn, uint32_t vh, uint32_t tag);

/* Sets every entry's tag to RAG_TERMCACHE_NOTAG, by emptying the cache. */
void rag_termcache_clear(rag_termcache *c);

/* The bytes `c` holds (slots and arena), at most RAG_TERMCACHE_MAX_BYTES. */
size_t rag_termcache_bytes(const rag_termcache *c);

/*
** Looks key[0..n) (hash h) up: 1 with *value, *vn, *vh and *tag (the
** entry's 4 tag bytes, unaligned) set, all owned by `c` and valid until the
** next put; or 0 when it is not kept.
*/
static inline int rag_termcache_get(const rag_termcache *c, const char *key, size_t n,
                                    uint32_t h, const char **value, size_t *vn, uint32_t *vh,
                                    unsigned char **tag) {
  size_t i;
  if (c->n == 0) return 0;
  for (i = h & c->mask;; i = (i + 1) & c->mask) {
    const rag_termcache_slot *e = &c->slots[i];
    const unsigned char *p;
    if (e->off == 0) return 0;
    if (e->hash != h) continue;
    p = c->arena + e->off - 1;
    if (p[0] != n || !rag_probe_equal(p + 2, key, n)) continue;
    memcpy(vh, p + 2 + n, 4);
    *tag = (unsigned char *)p + 6 + n;
    *value = (const char *)p + RAG_TERMCACHE_FIXED + n;
    *vn = p[1];
    return 1;
  }
}

#endif
