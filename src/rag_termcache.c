/*
** rag_termcache.c: inserting into the analyzer's bounded term memo (lookups
** are in rag_termcache.h). The slots keep each key's hash, so doubling the
** table never reads the arena; offsets into the arena survive its growth.
*/
#include "rag_termcache.h"

#include "rag.h"

#define FIRST_SLOTS 256 /* the first table: 2 KiB */
#define FIRST_ARENA 4096

void rag_termcache_init(rag_termcache *c) {
  memset(c, 0, sizeof *c);
}

void rag_termcache_free(rag_termcache *c) {
  rag_free(c->slots);
  rag_free(c->arena);
  rag_termcache_init(c);
}

size_t rag_termcache_bytes(const rag_termcache *c) {
  return (c->slots != NULL ? (c->mask + 1) * sizeof *c->slots : 0) + c->cap;
}

static int is_empty(const void *ud, size_t i) {
  return ((const rag_termcache_slot *)ud)[i].off == 0;
}

/* The empty slot where an entry of hash h goes. */
static size_t free_slot(const rag_termcache_slot *slots, size_t mask, uint32_t h) {
  return rag_probe(mask, h, is_empty, slots);
}

/* Room for n entries in a table at most half full; 0 when out of memory. */
static int slots_fit(rag_termcache *c, size_t n) {
  size_t size = c->slots != NULL ? c->mask + 1 : 0, i;
  rag_termcache_slot *s;
  if (n <= size / 2) return 1;
  size = size ? size * 2 : FIRST_SLOTS;
  if ((s = (rag_termcache_slot *)rag_malloc(size * sizeof *s)) == NULL) return 0;
  memset(s, 0, size * sizeof *s);
  for (i = 0; c->slots != NULL && i <= c->mask; i++)
    if (c->slots[i].off != 0) s[free_slot(s, size - 1, c->slots[i].hash)] = c->slots[i];
  rag_free(c->slots);
  c->slots = s;
  c->mask = size - 1;
  return 1;
}

/* Room for `need` arena bytes (need <= RAG_TERMCACHE_ARENA); 0 when out of memory. */
static int arena_fit(rag_termcache *c, size_t need) {
  size_t cap = c->cap ? c->cap : FIRST_ARENA;
  unsigned char *p;
  if (need <= c->cap) return 1;
  if (need > RAG_TERMCACHE_ARENA) return 0;
  while (cap < need) cap *= 2;
  if (cap > RAG_TERMCACHE_ARENA) cap = RAG_TERMCACHE_ARENA;
  if ((p = (unsigned char *)rag_realloc(c->arena, cap)) == NULL) return 0;
  c->arena = p;
  c->cap = cap;
  return 1;
}

/* Empties the cache, keeping its memory. */
void rag_termcache_clear(rag_termcache *c) {
  if (c->slots != NULL) memset(c->slots, 0, (c->mask + 1) * sizeof *c->slots);
  c->n = 0;
  c->used = 0;
}

unsigned char *rag_termcache_put(rag_termcache *c, const char *key, size_t n, uint32_t h,
                                 const char **value, size_t vn, uint32_t vh, uint32_t tag) {
  size_t need = RAG_TERMCACHE_FIXED + n + vn;
  unsigned char v[RAG_TERMCACHE_VALUE], *p;
  rag_termcache_slot *e;
  if (n == 0 || n > RAG_TERMCACHE_KEY || vn > RAG_TERMCACHE_VALUE) return NULL;
  if (vn > 0) memcpy(v, *value, vn); /* before the arena is cleared or moved */
  if (c->n >= RAG_TERMCACHE_ENTRIES || c->used + need > RAG_TERMCACHE_ARENA)
    rag_termcache_clear(c);
  if (!slots_fit(c, c->n + 1) || !arena_fit(c, c->used + need)) return NULL;
  p = c->arena + c->used;
  p[0] = (unsigned char)n;
  p[1] = (unsigned char)vn;
  memcpy(p + 2, key, n);
  memcpy(p + 2 + n, &vh, 4);
  memcpy(p + 6 + n, &tag, 4);
  if (vn > 0) memcpy(p + RAG_TERMCACHE_FIXED + n, v, vn);
  e = &c->slots[free_slot(c->slots, c->mask, h)];
  e->hash = h;
  e->off = (uint32_t)c->used + 1;
  c->used += need;
  c->n++;
  *value = (const char *)p + RAG_TERMCACHE_FIXED + n;
  return p + 6 + n;
}
