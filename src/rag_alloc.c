/*
** rag_alloc.c: the allocator seam and what goes with it: array growth,
** cache-line aligned blocks, memory advice, in RAG_TESTING builds the
** fault-injecting allocator behind rag_malloc/rag_realloc; and the status
** strings of rag.h.
*/
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* madvise, MADV_HUGEPAGE, mremap */
#endif
#include "rag.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h> /* sysconf */
#if defined(__GLIBC__)
#include <malloc.h> /* malloc_trim */
#endif
#endif

#define STATUS_ROW(name, code, text, meaning) {code, text, meaning},
static const struct {
  const char *code, *text, *meaning;
} statuses[RAG_NSTATUS] = {RAG_STATUS_LIST(STATUS_ROW)};
#undef STATUS_ROW

const char *rag_strerror(int rc) {
  if (rc < 0 || rc >= RAG_NSTATUS) return "unknown error";
  return statuses[rc].text;
}

const char *rag_status_code(int rc, const char **meaning) {
  if (rc < 0 || rc >= RAG_NSTATUS) return NULL;
  if (meaning != NULL) *meaning = statuses[rc].meaning;
  return statuses[rc].code;
}

#ifdef RAG_TESTING
/*
** Test builds only: one countdown shared by the process. This is the single
** piece of global mutable state in the core, and release builds omit it.
*/
static long countdown = 0;

long rag_test_fail_alloc(long n) {
  long left = countdown;
  countdown = n > 0 ? n : 0;
  return left;
}

static int should_fail(void) {
  if (countdown == 0) return 0;
  return --countdown == 0;
}

void *rag_test_malloc(size_t n) {
  return should_fail() ? NULL : malloc(n);
}

void *rag_test_realloc(void *p, size_t n) {
  return should_fail() ? NULL : realloc(p, n);
}
#endif

/* {====== Aligned blocks ======} */

#if defined(__linux__) && defined(MREMAP_MAYMOVE)
/*
** Blocks from MAP_FROM bytes (256 KB) are whole pages from the kernel:
** growing one moves its pages (mremap) instead of copying its bytes. A
** vector index doubles its rows as it grows, and a copy of every row
** stalled the add that crossed each power of two (4.5 ms at 4,096 rows of
** 512 floats, in one step of a game host's 2 ms ingestion budget); moving
** pages costs microseconds at any size. A page start is cache-line aligned.
*/
#define MAP_FROM ((size_t)1 << 18)

/*
** A mapping is whole pages, so that advice over the block (rag_advise_huge)
** covers all of it: advice over part of a mapping splits it in two, and
** mremap cannot move a range that spans two mappings (EFAULT). That made
** every add fail with "not enough memory" once an HNSW graph rebuilt to an
** odd capacity had advised its rows. Should a move still fail, the block
** is copied into a new mapping.
*/
static int block_map(rag_block *b, size_t keep, size_t n) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void *q;
#ifdef RAG_TESTING
  if (should_fail()) return RAG_ENOMEM;
#endif
  if (n > (size_t)-1 - page) return RAG_ENOMEM;
  n = (n + page - 1) / page * page;
  if (b->mapped > 0) {
    q = mremap(b->base, b->mapped, n, MREMAP_MAYMOVE);
    if (q == MAP_FAILED) {
      q = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (q == MAP_FAILED) return RAG_ENOMEM;
      memcpy(q, b->p, keep < n ? keep : n);
      (void)munmap(b->base, b->mapped);
    }
  } else {
    q = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) return RAG_ENOMEM;
    if (keep > 0 && b->p != NULL) memcpy(q, b->p, keep); /* an empty block keeps nothing */
    rag_free(b->base);
  }
  b->base = q;
  b->p = (unsigned char *)q;
  b->mapped = n;
  return RAG_OK;
}
#endif

int rag_block_resize(rag_block *b, size_t keep, size_t n) {
  const size_t line = 64;
  size_t was, at;
  int was_any;
  unsigned char *base;
#ifdef MAP_FROM
  if (n >= MAP_FROM || b->mapped > 0) return block_map(b, keep, n > 0 ? n : 1);
#endif
  was_any = b->base != NULL;
  was = was_any ? (size_t)(b->p - (unsigned char *)b->base) : 0;
  if (n > (size_t)-1 - line) return RAG_ENOMEM;
  base = (unsigned char *)rag_realloc(b->base, n + line - 1);
  if (base == NULL) return RAG_ENOMEM;
  at = (size_t)(-(uintptr_t)base & (line - 1));
  if (at != was && keep > 0 && was_any) memmove(base + at, base + was, keep);
  b->base = base;
  b->p = base + at;
  return RAG_OK;
}

void rag_block_free(rag_block *b) {
#ifdef MAP_FROM
  if (b->mapped > 0) {
    (void)munmap(b->base, b->mapped);
    b->base = NULL;
  }
#endif
  rag_free(b->base);
  b->base = NULL;
  b->p = NULL;
  b->mapped = 0;
}

void rag_advise_huge(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t page = 4096, huge = (uintptr_t)2 << 20;
  uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), e = ((uintptr_t)p + n) & ~(page - 1);
  if (p == NULL || n < 2 * huge || e <= a) return;
  (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
  (void)p;
  (void)n;
#endif
}

void *rag_grow(void *p, size_t *cap, size_t need, size_t size) {
  size_t n = *cap ? *cap : 64;
  if (need <= *cap && p != NULL) return p;
  while (n < need) {
    if (n > ((size_t)-1) / 2) return NULL;
    n *= 2;
  }
  if (RAG_MUL_OVERFLOWS(n, size) || (p = rag_realloc(p, n * size)) == NULL) return NULL;
  *cap = n;
  return p;
}

void rag_trim(void) {
#if defined(__GLIBC__)
  (void)malloc_trim(0);
#endif
}
