/*
** rag_fnv.h: FNV-1a, the core's one hash of short byte strings: 32 bits for
** the keys of its open-addressing tables (ids, terms, stopwords, vocabulary
** entries), 64 bits for the hashing embedder's features. Header only: the
** hash runs inside lookups that must inline.
*/
#ifndef RAG_FNV_H
#define RAG_FNV_H

#include <stddef.h>
#include <stdint.h>

#define RAG_FNV32_BASIS 2166136261u
#define RAG_FNV32_PRIME 16777619u
#define RAG_FNV64_BASIS UINT64_C(0xcbf29ce484222325)
#define RAG_FNV64_PRIME UINT64_C(0x100000001b3)

/* The hash h continued by one byte. */
static inline uint32_t rag_fnv32_byte(uint32_t h, unsigned char c) {
  return (h ^ c) * RAG_FNV32_PRIME;
}

/* The hash h continued by n bytes: the hash of a string continues into the
** hash of any string it prefixes. */
static inline uint32_t rag_fnv32_more(uint32_t h, const void *p, size_t n) {
  const unsigned char *s = (const unsigned char *)p;
  size_t i;
  for (i = 0; i < n; i++) h = rag_fnv32_byte(h, s[i]);
  return h;
}

/* The 32-bit hash of n bytes. */
static inline uint32_t rag_fnv32(const void *p, size_t n) {
  return rag_fnv32_more(RAG_FNV32_BASIS, p, n);
}

/* The 64-bit hash h continued by one byte. */
static inline uint64_t rag_fnv64_byte(uint64_t h, unsigned char c) {
  return (h ^ c) * RAG_FNV64_PRIME;
}

#endif
