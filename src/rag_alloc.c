/*
** rag_alloc.c: the allocator seam and what goes with it: array growth,
** cache-line aligned blocks, memory advice, in RAG_TESTING builds the
** fault-injecting allocator behind rag_malloc/rag_realloc; and the status
** strings of rag.h.
*/
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise and MADV_HUGEPAGE */
#endif
#include "rag.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
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

int rag_block_resize(rag_block *b, size_t keep, size_t n) {
  const size_t line = 64;
  size_t was = b->base != NULL ? (size_t)(b->p - (unsigned char *)b->base) : 0, at;
  unsigned char *base;
  if (n > (size_t)-1 - line) return RAG_ENOMEM;
  base = (unsigned char *)rag_realloc(b->base, n + line - 1);
  if (base == NULL) return RAG_ENOMEM;
  at = (size_t)(-(uintptr_t)base & (line - 1));
  if (at != was && keep > 0) memmove(base + at, base + was, keep);
  b->base = base;
  b->p = base + at;
  return RAG_OK;
}

void rag_block_free(rag_block *b) {
  rag_free(b->base);
  b->base = NULL;
  b->p = NULL;
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
