/*
** rag_probe.h: linear probing, the one walk of the core's open-addressing
** tables. A table has a power of two of cells (mask = cells - 1) and is
** kept at most half full, so every walk meets an empty cell; a key of hash
** h is looked for from cell h & mask on, wrapping. Header only, so that the
** walk and its callbacks inline into each lookup.
*/
#ifndef RAG_PROBE_H
#define RAG_PROBE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Whether a walk stops at `cell`: it is empty or holds what is sought. */
typedef int (*rag_probe_fn)(const void *ud, size_t cell);

/* The first cell from h's home on at which stop(ud, cell) holds. */
static inline size_t rag_probe(size_t mask, uint32_t h, rag_probe_fn stop, const void *ud) {
  size_t i = h & mask;
  while (!stop(ud, i)) i = (i + 1) & mask;
  return i;
}

/*
** Whether n bytes at a and b are equal: memcmp's answer, inline, for the
** short keys of the tables (words, ids), where a call into the C library
** costs more than the comparison. Reads only the n bytes of each.
*/
static inline int rag_probe_equal(const void *a, const void *b, size_t n) {
  const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
  uint64_t u, v;
  uint32_t s, t;
  size_t i;
  if (n >= 8) { /* 8 bytes at a time, the last 8 overlapping */
    for (i = 0; i + 8 < n; i += 8) {
      memcpy(&u, x + i, 8);
      memcpy(&v, y + i, 8);
      if (u != v) return 0;
    }
    memcpy(&u, x + n - 8, 8);
    memcpy(&v, y + n - 8, 8);
    return u == v;
  }
  if (n >= 4) {
    memcpy(&s, x, 4);
    memcpy(&t, y, 4);
    if (s != t) return 0;
    memcpy(&s, x + n - 4, 4);
    memcpy(&t, y + n - 4, 4);
    return s == t;
  }
  for (i = 0; i < n; i++)
    if (x[i] != y[i]) return 0;
  return 1;
}

/*
** Most tables are uint32_t cells holding an entry number + 1 (0: empty),
** keyed by byte strings whose hashes the entries keep. keyof gives entry
** e's key: its bytes (*len of them) and their hash.
*/
typedef const void *(*rag_probe_key_fn)(const void *ud, uint32_t e, size_t *len, uint32_t *hash);

/* The cell holding the key of n bytes at s, whose hash is h, or the empty
** cell where it would go. (The walk of rag_probe, written out so that keyof
** inlines as well.) */
static inline size_t rag_probe_find(const uint32_t *cells, size_t mask, const void *s, size_t n,
                                    uint32_t h, rag_probe_key_fn keyof, const void *ud) {
  size_t i = h & mask;
  for (;; i = (i + 1) & mask) {
    uint32_t v = cells[i], eh;
    size_t len;
    const void *e;
    if (v == 0) return i;
    e = keyof(ud, v - 1, &len, &eh);
    if (eh == h && len == n && rag_probe_equal(e, s, n)) return i;
  }
}

/* The first cell from h's home on that holds v: with v = 0, the empty cell
** where a new entry of hash h goes (inserts, rebuilds); else the cell of
** entry v - 1, which must be there. */
static inline size_t rag_probe_holding(const uint32_t *cells, size_t mask, uint32_t h, uint32_t v) {
  size_t i = h & mask;
  while (cells[i] != v) i = (i + 1) & mask;
  return i;
}

#endif
