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
** The one list of statuses. Each row: the enum name, the code a failure of
** the world carries to Lua as `nil, msg, code` (NULL: misuse, the binding
** raises), rag_strerror's text, and what the code means to a user. The last
** five are never returned by the core; they name failures found in Lua
** (bad JSON from a server, provider replies, pipeline budgets) so that every
** code has one home. rag.errors exposes the codes and their meanings, and a
** spec checks docs/api.md's table against them. Append; never reorder.
*/
#define RAG_STATUS_LIST(X)                                                                  \
  X(RAG_OK, NULL, "ok", "")                                                                 \
  X(RAG_ENOMEM, NULL, "not enough memory", "")                                              \
  X(RAG_EINVAL, NULL, "invalid argument", "")                                               \
  X(RAG_EIO, "io", "input/output error",                                                    \
    "a file or socket could not be opened, read or written (missing, no permission, "       \
    "not a regular file, disk full)")                                                       \
  X(RAG_EFORMAT, "format", "bad format",                                                    \
    "the input is not in the expected format (bad magic, a malformed vocabulary or model)") \
  X(RAG_EVERSION, "version", "unsupported version",                                         \
    "the file was written by a newer version of rag")                                       \
  X(RAG_ECORRUPT, "corrupt", "corrupt data",                                                \
    "a checksum or consistency check failed: the file is damaged or truncated")             \
  X(RAG_EENCODING, "encoding", "invalid utf-8", "an input text is not valid UTF-8")         \
  X(RAG_EHTTP, "http", "http failure",                                                      \
    "no usable HTTP response: connection, DNS, TLS, protocol or a 5xx status")              \
  X(RAG_ETIMEOUT, "timeout", "timed out", "a deadline or request timeout passed")           \
  X(RAG_ETOOBIG, NULL, "size limit exceeded", "")                                           \
  X(RAG_EDECODE, "decode", "bad reply",                                                     \
    "a reply could not be decoded: not JSON, or missing the expected fields")               \
  X(RAG_EAUTH, "auth", "not authorized", "the server refused the credentials (401 or 403)") \
  X(RAG_ERATELIMIT, "ratelimit", "rate limited", "the server asked to slow down (429)")     \
  X(RAG_EPROVIDER, "provider", "provider error",                                            \
    "the provider rejected the request (another 4xx) or reported an error in a stream")     \
  X(RAG_EBUDGET, "budget", "budget exhausted",                                              \
    "a pipeline ran out of its steps, LLM calls, tokens or time")

/*
** Status codes. RAG_OK is zero; every fallible core function returns one of
** these and passes its results through out-parameters.
*/
#define RAG_STATUS_ENUM(name, code, text, meaning) name,
typedef enum rag_status { RAG_STATUS_LIST(RAG_STATUS_ENUM) RAG_NSTATUS } rag_status;
#undef RAG_STATUS_ENUM

/* A fixed, lowercase description of `rc`; never NULL. */
const char *rag_strerror(int rc);

/*
** The code a failure with status `rc` carries to Lua ("io", "corrupt", ...),
** NULL when the status means misuse (the binding raises); `meaning` gets
** the code's user-facing description when not NULL.
*/
const char *rag_status_code(int rc, const char **meaning);

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
/*
** Fail the nth allocation from now (n >= 1); n = 0 disarms. Returns the
** allocations the previous arming still had to go: 0 when it fired.
*/
long rag_test_fail_alloc(long n);
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
** Gives the allocator's free pages back to the system where it can (glibc's
** malloc_trim; a no-op elsewhere): for the end of bulk work, such as a large
** ingest, that freed much more than it kept.
*/
void rag_trim(void);

/*
** A block of memory whose usable start `p` is aligned to a 64-byte cache
** line; `base` is what the allocator returned. For arrays read a row at a
** time: a 256-byte row at an unaligned start spans five lines, not four.
** Zero-initialise before the first resize. On Linux a block of 256 KB or more
** is mapped pages, which grow without a copy (mremap).
*/
typedef struct rag_block {
  void *base;       /* what the allocator (or mmap) returned */
  unsigned char *p; /* the aligned start */
  size_t mapped;    /* bytes mapped when base came from mmap; 0 otherwise */
} rag_block;

/*
** Resizes b to hold n bytes, keeping its first `keep` bytes (keep <= n and
** at most its old size; an empty block keeps nothing). RAG_ENOMEM leaves b
** intact.
*/
int rag_block_resize(rag_block *b, size_t keep, size_t n);
void rag_block_free(rag_block *b);

/*
** Cache lines that another search will read next, for a search whose loop
** waits on arithmetic to ask for while it works (one per step), so that
** memory answers during work instead of during a stall: n addresses in
** line[], line[at..n) not asked for yet. A burst of thousands would stall
** the asking loop itself: the line fill buffers are few.
*/
typedef struct rag_ahead {
  const void **line;
  size_t n, at;
} rag_ahead;

/* True when a * b would overflow size_t. */
#define RAG_MUL_OVERFLOWS(a, b) ((b) != 0 && (a) > ((size_t)-1) / (b))

#endif
