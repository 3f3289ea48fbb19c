/*
** rag_piececache.h: a memo from short pre-tokenizer pieces (1 to 16 bytes)
** to their BPE tokens, owned by one tokenizer and shared by every thread
** that uses it. Most pieces of prose are common words, so most lookups
** replace a vocabulary search or a merge loop. Header only: the lookup
** runs once per piece and must inline.
*/
#ifndef RAG_PIECECACHE_H
#define RAG_PIECECACHE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rag.h"

/*
** How it works. Sets of two entries, one 64-byte line each: a header word
** (a 32-bit sequence number and each entry's length and token count), then
** per entry the piece's bytes (two words, zero-padded) and up to three ids
** of 21 bits. A piece lives in the set its hash picks; a new piece takes
** the first entry and moves the old first to the second (the second is
** dropped). Readers take no lock: they read the header, the entry and the
** header again, and trust the entry only when the sequence number is even
** and unchanged (a seqlock, every word accessed atomically, so no read is a
** data race). A writer makes the number odd with a compare-and-swap and
** gives up if another writer holds the set; a miss is only slower, never
** wrong, so lookups and inserts never wait. The key holds every byte and
** the length, so a hit is exact.
*/

#define RAG_PIECECACHE_MAXLEN 16 /* longest piece kept, in bytes */
#define RAG_PIECECACHE_MAXIDS 3  /* ids kept per piece; longer ones keep the count */
#define RAG_PIECECACHE_IDBITS 21 /* ids at or above 2^21 are not kept */
#define RAG_PIECECACHE_MAXSIZE ((size_t)1 << 20) /* most entries (32 MB) */

typedef struct rag_piececache {
  uint64_t *sets;  /* 8 words per set, 64-byte aligned; NULL: no cache */
  void *block;     /* the allocation sets lies in */
  uint64_t mask;   /* sets - 1 */
} rag_piececache;

/* A piece as the cache compares it, and the set it belongs in. */
typedef struct rag_piecekey {
  uint64_t w0, w1; /* the bytes, zero-padded */
  uint64_t *set;
  uint32_t len;
} rag_piecekey;

#define RAG_PC_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define RAG_PC_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/*
** Sets up c for about `size` entries (rounded down to a power of two, at
** least 2; 0: no cache). RAG_ENOMEM: c is left without a cache. Not
** thread-safe: done once, before the owner is shared.
*/
static inline int rag_piececache_init(rag_piececache *c, size_t size) {
  size_t sets = 1, bytes;
  c->sets = NULL;
  c->block = NULL;
  c->mask = 0;
  if (size == 0) return RAG_OK;
  if (size > RAG_PIECECACHE_MAXSIZE) size = RAG_PIECECACHE_MAXSIZE;
  while (sets * 4 <= size) sets *= 2;
  c->mask = sets - 1;
  bytes = sets * 64 + 63;
  if ((c->block = rag_malloc(bytes)) == NULL) return RAG_ENOMEM;
  memset(c->block, 0, bytes);
  c->sets = (uint64_t *)(((uintptr_t)c->block + 63) & ~(uintptr_t)63);
  return RAG_OK;
}

/* Releases the sets; the cache is then empty and off. */
static inline void rag_piececache_done(rag_piececache *c) {
  rag_free(c->block);
  c->block = NULL;
  c->sets = NULL;
}

/* The number of entries (0: off). */
static inline size_t rag_piececache_size(const rag_piececache *c) {
  return c->sets == NULL ? 0 : 2 * ((size_t)c->mask + 1);
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define RAG_PC_LE 1 /* words are loaded whole, then shifted */
#else
#define RAG_PC_LE 0
#endif

/* The n (1..8) bytes at p as one zero-padded word (byte i in bits 8i..);
** it reads no byte outside them. */
static inline uint64_t rag_piececache_word(const unsigned char *p, size_t n) {
#if RAG_PC_LE
  uint64_t w;
  if (n == 8) {
    memcpy(&w, p, 8);
    return w;
  }
  if (n >= 4) { /* two loads that may overlap */
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + n - 4, 4);
    return lo | (uint64_t)hi << (8 * (n - 4));
  }
  return p[0] | (uint64_t)p[n / 2] << (8 * (n / 2)) | (uint64_t)p[n - 1] << (8 * (n - 1));
#else
  uint64_t w = 0;
  size_t i;
  for (i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
  return w;
#endif
}

/* The key of the n (1..RAG_PIECECACHE_MAXLEN) bytes at p in cache c (which
** is on); it reads no byte outside them. */
static inline void rag_piececache_key(const rag_piececache *c, const unsigned char *p, size_t n,
                                      rag_piecekey *k) {
  uint64_t h;
  if (n <= 8) {
    k->w0 = rag_piececache_word(p, n);
    k->w1 = 0;
  } else {
    k->w0 = rag_piececache_word(p, 8);
#if RAG_PC_LE /* the last 8 bytes, less those the first word holds */
    memcpy(&k->w1, p + n - 8, 8);
    k->w1 >>= 8 * (16 - n);
#else
    k->w1 = rag_piececache_word(p + 8, n - 8);
#endif
  }
  h = (k->w0 ^ (uint64_t)n) * 0x9e3779b97f4a7c15ull ^ k->w1 * 0xc2b2ae3d27d4eb4full;
  k->set = c->sets + ((h >> 32) & c->mask) * 8;
  k->len = (uint32_t)n;
}

/*
** The token count of the piece of key k, or 0 when its cache does not keep it. With ids
** non-NULL, also its ids when kept (*kept = 1; 0 when only the count is:
** a piece of more than RAG_PIECECACHE_MAXIDS tokens or large ids).
*/
static inline size_t rag_piececache_get(const rag_piecekey *k, uint32_t *ids, int *kept) {
  uint64_t *s = k->set, head, idw;
  size_t cnt;
  head = __atomic_load_n(&s[0], __ATOMIC_ACQUIRE);
  if (head & 1) return 0; /* a writer is at work */
  if ((head >> 32 & 0xff) == k->len && RAG_PC_LOAD(&s[1]) == k->w0 &&
      RAG_PC_LOAD(&s[2]) == k->w1) {
    idw = RAG_PC_LOAD(&s[3]);
    cnt = (size_t)(head >> 40 & 0xff);
  } else if ((head >> 48 & 0xff) == k->len && RAG_PC_LOAD(&s[4]) == k->w0 &&
             RAG_PC_LOAD(&s[5]) == k->w1) {
    idw = RAG_PC_LOAD(&s[6]);
    cnt = (size_t)(head >> 56);
  } else {
    return 0;
  }
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (RAG_PC_LOAD(&s[0]) != head) return 0; /* rewritten meanwhile */
  if (ids != NULL) {
    *kept = (int)(idw >> 63);
    ids[0] = (uint32_t)(idw & 0x1fffff);
    ids[1] = (uint32_t)(idw >> 21 & 0x1fffff);
    ids[2] = (uint32_t)(idw >> 42 & 0x1fffff);
  }
  return cnt;
}

/* Keeps the piece of key k in its cache as its n (1..RAG_PIECECACHE_MAXLEN)
** tokens, whose ids are given; nothing happens when another thread is
** writing to the same set. */
static inline void rag_piececache_put(const rag_piecekey *k, const uint32_t *ids, size_t n) {
  uint64_t *s = k->set, head, idw = 0, next;
  size_t i;
  if (n <= RAG_PIECECACHE_MAXIDS) {
    idw = (uint64_t)1 << 63;
    for (i = 0; i < n; i++) {
      if (ids[i] >> RAG_PIECECACHE_IDBITS) {
        idw = 0;
        break;
      }
      idw |= (uint64_t)ids[i] << (21 * i);
    }
  }
  head = RAG_PC_LOAD(&s[0]);
  if ((head & 1) ||
      !__atomic_compare_exchange_n(&s[0], &head, head + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    return;
  __atomic_thread_fence(__ATOMIC_RELEASE); /* the odd number before any entry word */
  RAG_PC_STORE(&s[4], RAG_PC_LOAD(&s[1]));
  RAG_PC_STORE(&s[5], RAG_PC_LOAD(&s[2]));
  RAG_PC_STORE(&s[6], RAG_PC_LOAD(&s[3]));
  RAG_PC_STORE(&s[1], k->w0);
  RAG_PC_STORE(&s[2], k->w1);
  RAG_PC_STORE(&s[3], idw);
  next = ((head + 2) & 0xffffffffu) | (uint64_t)k->len << 32 | (uint64_t)n << 40 |
         (head >> 32 & 0xffff) << 48;
  __atomic_store_n(&s[0], next, __ATOMIC_RELEASE);
}

#endif
