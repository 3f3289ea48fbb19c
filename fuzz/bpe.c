/*
** fuzz/bpe.c: exact BPE and the approx split on any bytes. For valid UTF-8:
** encode succeeds, decode gives the input back, count equals the number of
** ids, a count up to a bound is exact within it and above it past it,
** ends agree with the ids' lengths, the ids are the same with the
** cache of short pieces off, on, or of 2 entries (evicting all the time),
** spans counted from the whole text's pieces equal their own counts,
** and pre-tokens tile the input on character boundaries; otherwise all
** refuse with RAG_EENCODING. Reads the bundled vocabularies from
** lua/rag/vocab (run from the repository root, as .ci/fuzz does).
*/
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rag.h"
#include "rag_approx.h"
#include "rag_tokenizer.h"

static rag_tokenizer *toks[2], *plain[2], *tiny[2]; /* cache default, 0, 2 */

static rag_tokenizer *load(const char *path, rag_pretok pretok, size_t cache) {
  static const rag_special sp[] = {{"<|endoftext|>", 13, 300000}, {"<|fim_prefix|>", 14, 300001}};
  rag_tokenizer *t = NULL;
  size_t len, errline;
  char *data;
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  data = (char *)malloc(len);
  if (data != NULL && fread(data, 1, len, f) == len)
    rag_tokenizer_new(data, len, pretok, sp, 2, cache, &t, &errline);
  free(data);
  fclose(f);
  return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  static const char *const paths[2] = {"lua/rag/vocab/cl100k_base.tiktoken",
                                       "lua/rag/vocab/o200k_base.tiktoken"};
  int i;
  for (i = 0; i < 2; i++) {
    toks[i] = load(paths[i], (rag_pretok)i, RAG_TOKENIZER_CACHE);
    plain[i] = load(paths[i], (rag_pretok)i, 0);
    tiny[i] = load(paths[i], (rag_pretok)i, 2);
    if (toks[i] == NULL || plain[i] == NULL || tiny[i] == NULL) {
      fprintf(stderr, "fuzz/bpe: cannot load lua/rag/vocab/*.tiktoken\n");
      abort();
    }
  }
  return 0;
}

/* The ids of s by tokenizer t equal want[0..n), and its count and ends agree. */
static void same_ids(const rag_tokenizer *t, const char *s, size_t len, uint32_t allowed,
                     const uint32_t *want, size_t n) {
  uint32_t *ids = NULL;
  size_t m = 0, count = 0, errpos, *ends = NULL, i, end = 0;
  char *out = NULL;
  size_t outlen, bad;
  if (rag_tokenizer_count(t, s, len, allowed, &count, &errpos) != RAG_OK || count != n)
    __builtin_trap();
  for (i = 0; i < 3; i++) { /* bounds below, at and above the count */
    size_t max = i == 0 ? n / 2 : i == 1 ? n : n + 1;
    if (rag_tokenizer_count_upto(t, s, len, allowed, max, &count, &errpos) != RAG_OK ||
        (n <= max ? count != n : count <= max))
      __builtin_trap();
  }
  if (rag_tokenizer_encode(t, s, len, allowed, &ids, &m, &errpos) != RAG_OK || m != n ||
      (n > 0 && memcmp(ids, want, n * sizeof *ids) != 0))
    __builtin_trap();
  if (rag_tokenizer_ends(t, s, len, allowed, &ends, &m, &errpos) != RAG_OK || m != n)
    __builtin_trap();
  for (i = 0; i < n; i++) { /* each end is where the bytes of the ids so far end */
    if (rag_tokenizer_decode(t, ids + i, 1, &out, &outlen, &bad) != RAG_OK) __builtin_trap();
    end += outlen;
    rag_free(out);
    if (ends[i] != end) __builtin_trap();
  }
  rag_free(ids);
  rag_free(ends);
}

/*
** Spans of valid s counted by rag_tokenizer_spans_count equal their fresh
** counts: every pair of character boundaries of a short text, pairs of
** some of them in a longer one, with bounds (from the pair) at and below
** the count.
*/
static void same_spans(const rag_tokenizer *t, const char *s, size_t len) {
  rag_tokenizer_spans *sp;
  size_t cut[33], nc = 0, i, j, want, got, errpos, step;
  uint32_t h = 2166136261u;
  if (rag_tokenizer_spans_new(t, s, len, &sp) != RAG_OK) __builtin_trap();
  step = len / (len <= 1024 ? 32 : 8) + 1;
  for (i = 0; i <= len && nc < 33; i += step) {
    while (i < len && ((unsigned char)s[i] & 0xc0) == 0x80) i++;
    if (nc == 0 || cut[nc - 1] != i) cut[nc++] = i;
  }
  if (cut[nc - 1] != len && nc < 33) cut[nc++] = len;
  for (i = 0; i < nc; i++)
    for (j = i; j < nc; j++) {
      size_t a = cut[i], b = cut[j], max;
      if (rag_tokenizer_count(t, s + a, b - a, 0, &want, &errpos) != RAG_OK) __builtin_trap();
      h = (h ^ (uint32_t)(a * 31 + b)) * 16777619u;
      max = h % 3 == 0 ? want / 2 : h % 3 == 1 ? want : (size_t)-1;
      if (rag_tokenizer_spans_count(sp, a, b, max, &got) != RAG_OK) __builtin_trap();
      if (want <= max ? got != want : got <= max) __builtin_trap();
    }
  rag_tokenizer_spans_free(sp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const rag_tokenizer *t;
  const char *s;
  uint32_t *ids = NULL;
  size_t len, n = 0, count = 0, errpos = 0, errpos2 = 0, outlen, bad, i, *ends = NULL;
  char *out = NULL;
  int rc, rc2;
  if (size == 0) return 0;
  t = toks[data[0] & 1];
  s = (const char *)data + 1;
  len = size - 1;
  rc = rag_tokenizer_encode(plain[data[0] & 1], s, len, (data[0] >> 1) & 3, &ids, &n, &errpos);
  rc2 = rag_tokenizer_count(t, s, len, (data[0] >> 1) & 3, &count, &errpos2);
  if (rc != rc2) __builtin_trap();
  if (rc == RAG_OK) {
    if (count != n || (n == 0) != (len == 0)) __builtin_trap();
    same_ids(t, s, len, (data[0] >> 1) & 3, ids, n);
    same_ids(tiny[data[0] & 1], s, len, (data[0] >> 1) & 3, ids, n);
    same_spans(t, s, len);
    same_spans(tiny[data[0] & 1], s, len);
    if (rag_tokenizer_decode(t, ids, n, &out, &outlen, &bad) != RAG_OK) __builtin_trap();
    if (outlen != len || memcmp(out, s, len) != 0) __builtin_trap();
    rag_free(out);
    rag_free(ids);
    for (i = 0; i < len;) { /* pre-tokens tile the input, on character boundaries */
      size_t e = rag_tokenizer_pretoken((rag_pretok)(data[0] & 1), s, len, i);
      if (e <= i || e > len || (e < len && ((unsigned char)s[e] & 0xc0) == 0x80)) __builtin_trap();
      i = e;
    }
  } else if (rc != RAG_EENCODING || errpos != errpos2 || errpos < 1 || errpos > len) {
    __builtin_trap();
  }
  rc2 = rag_approx_split(s, len, &ends, &n, &errpos2);
  if (rc2 != RAG_OK && rc2 != RAG_EENCODING) __builtin_trap();
  if ((rc2 == RAG_OK) != (rc == RAG_OK)) __builtin_trap(); /* same UTF-8 verdict */
  if (rc2 == RAG_OK) {
    if (rag_approx_count(s, len, &count, &errpos2) != RAG_OK || count != n) __builtin_trap();
    if ((n == 0) != (len == 0) || (n > 0 && ends[n - 1] != len)) __builtin_trap();
    for (i = 1; i < n; i++)
      if (ends[i] <= ends[i - 1]) __builtin_trap();
    rag_free(ends);
  } else if (errpos2 != errpos) {
    __builtin_trap();
  }
  return 0;
}
