/*
** fuzz/bpe_shared.c: one tokenizer shared by threads, as rag_tokenizer.h
** allows. Two threads count and encode the input (cut at a byte the input
** chooses, so that they ask for different pieces too) over and over with one
** tokenizer whose cache of short pieces has 8 entries, so that they write
** and read the same slots all the time; every result must equal an uncached
** tokenizer's. ThreadSanitizer checks that the cache's lock-free reads and
** writes never race: run the corpus .ci/fuzz leaves through a TSan build
** with the plain driver (libFuzzer's own counters race under TSan):
**   clang -std=c99 -D_DEFAULT_SOURCE -g -O1 -fsanitize=thread -Isrc \
**     fuzz/driver/main.c fuzz/bpe_shared.c src/rag*.c LIBS -o build/fuzz/tsan
**   build/fuzz/tsan 5 build/fuzz/corpus-bpe_shared build/fuzz/corpus-bpe
** with LIBS as in .ci/fuzz.
*/
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rag.h"
#include "rag_tokenizer.h"

#define ROUNDS 8

static rag_tokenizer *shared, *plain;

static rag_tokenizer *load(size_t cache) {
  rag_tokenizer *t = NULL;
  size_t len, errline;
  char *data;
  FILE *f = fopen("lua/rag/vocab/cl100k_base.tiktoken", "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  data = (char *)malloc(len);
  if (data != NULL && fread(data, 1, len, f) == len)
    rag_tokenizer_new(data, len, RAG_PRETOK_CL100K, NULL, 0, cache, &t, &errline);
  free(data);
  fclose(f);
  return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  shared = load(8);
  plain = load(0);
  if (shared == NULL || plain == NULL) {
    fprintf(stderr, "fuzz/bpe_shared: cannot load lua/rag/vocab/cl100k_base.tiktoken\n");
    abort();
  }
  return 0;
}

/* A text and the ids an uncached tokenizer gives it. */
typedef struct job {
  const char *s;
  size_t len;
  uint32_t *want;
  size_t n;
} job;

static void *work(void *ud) {
  const job *j = (const job *)ud;
  int r;
  for (r = 0; r < ROUNDS; r++) {
    uint32_t *ids = NULL;
    size_t n = 0, count = 0, errpos;
    if (rag_tokenizer_count(shared, j->s, j->len, 0, &count, &errpos) != RAG_OK ||
        count != j->n)
      __builtin_trap();
    if (rag_tokenizer_encode(shared, j->s, j->len, 0, &ids, &n, &errpos) != RAG_OK ||
        n != j->n || (n > 0 && memcmp(ids, j->want, n * sizeof *ids) != 0))
      __builtin_trap();
    rag_free(ids);
  }
  return NULL;
}

/* The job for s[0..len), or 0 when s is not valid UTF-8. */
static int prepare(job *j, const char *s, size_t len) {
  size_t errpos;
  j->s = s;
  j->len = len;
  j->want = NULL;
  return rag_tokenizer_encode(plain, s, len, 0, &j->want, &j->n, &errpos) == RAG_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data + 1;
  size_t len, cut;
  job jobs[2];
  pthread_t th;
  if (size < 2) return 0;
  len = size - 1;
  cut = data[0] % len;
  while (cut > 0 && ((unsigned char)s[cut] & 0xc0) == 0x80) cut--; /* on a character */
  if (!prepare(&jobs[0], s, len)) return 0;
  if (!prepare(&jobs[1], s + cut, len - cut)) __builtin_trap(); /* a valid text's tail */
  if (pthread_create(&th, NULL, work, &jobs[1]) != 0) __builtin_trap();
  work(&jobs[0]);
  pthread_join(th, NULL);
  rag_free(jobs[0].want);
  rag_free(jobs[1].want);
  return 0;
}
