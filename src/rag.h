/*
** rag.h: what every part of the C core shares: status codes, the allocator
** seam, version and export macros, and the plain-data result types.
** The core never includes lua.h; bindings (lrag_*.c) translate these
** statuses into Lua errors or `nil, msg, code` returns.
*/
#ifndef RAG_H
#define RAG_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define RAG_VERSION "0.1.0"

#if defined(_WIN32)
#define RAG_API __declspec(dllexport)
#else
#define RAG_API __attribute__((visibility("default")))
#endif

/*
** Status codes. RAG_OK is zero; every fallible core function returns one of
** these and passes its results through out-parameters.
*/
typedef enum rag_status {
  RAG_OK = 0,
  RAG_ENOMEM,    /* an allocation failed */
  RAG_EINVAL,    /* an argument is out of range (the binding raises) */
  RAG_EIO,       /* a file or socket operation failed */
  RAG_EFORMAT,   /* input is not in the expected format (bad magic, bad JSON) */
  RAG_EVERSION,  /* a file written by a newer version */
  RAG_ECORRUPT,  /* a checksum or internal consistency check failed */
  RAG_EENCODING, /* invalid UTF-8 */
  RAG_EHTTP,     /* connection, DNS, TLS or protocol failure */
  RAG_ETIMEOUT,  /* a deadline passed */
  RAG_ETOOBIG,   /* a size cap was exceeded */
  RAG_NSTATUS
} rag_status;

/* A fixed, lowercase description of `rc`; never NULL. */
const char *rag_strerror(int rc);

/* A search result: dense or user id and a score, higher is better. */
typedef struct rag_hit {
  uint32_t id;
  double score;
} rag_hit;

/* A byte span [start, stop) into a borrowed input. */
typedef struct rag_span {
  size_t start;
  size_t stop;
} rag_span;

/*
** The allocator seam. Core code allocates only through these. A build with
** -DRAG_TESTING routes them through a counter so that a test can make the
** Nth allocation from now fail (rag_test_fail_alloc) and walk every
** out-of-memory path; release builds call the C library directly.
*/
#ifdef RAG_TESTING
void *rag_test_malloc(size_t n);
void *rag_test_realloc(void *p, size_t n);
/* Fail the nth allocation from now (n >= 1); n = 0 disarms. */
void rag_test_fail_alloc(long n);
#define rag_malloc(n) rag_test_malloc(n)
#define rag_realloc(p, n) rag_test_realloc((p), (n))
#else
#define rag_malloc(n) malloc(n)
#define rag_realloc(p, n) realloc((p), (n))
#endif
#define rag_free(p) free(p)

/*
** Returns p grown (doubling, from 64) to hold `need` elements of `size`
** bytes, or p itself when it already does, and updates *cap; NULL when out
** of memory or the size overflows, p then intact. The one growth rule of
** the core's arrays and buffers.
*/
void *rag_grow(void *p, size_t *cap, size_t need, size_t size);

/*
** Advises the system to back [p, p + n) with huge pages where it can (on
** Linux, transparent huge pages in their default "madvise" mode). Arrays
** read at random, such as a vector index's rows and links, then miss the
** TLB far less; pages touched after the advice get them at once. Only
** advice: nothing fails, and small blocks are left alone.
*/
void rag_advise_huge(void *p, size_t n);

/*
** A block of memory whose usable start `p` is aligned to a 64-byte cache
** line; `base` is what the allocator returned. For arrays read a row at a
** time: a 256-byte row at an unaligned start spans five lines, not four.
** Zero-initialise before the first resize.
*/
typedef struct rag_block {
  void *base;
  unsigned char *p;
} rag_block;

/*
** Resizes b to hold n bytes, keeping its first `keep` bytes (keep <= n and
** at most its old size). RAG_ENOMEM leaves b intact.
*/
int rag_block_resize(rag_block *b, size_t keep, size_t n);
void rag_block_free(rag_block *b);

/* True when a * b would overflow size_t. */
#define RAG_MUL_OVERFLOWS(a, b) ((b) != 0 && (a) > ((size_t)-1) / (b))

#endif
