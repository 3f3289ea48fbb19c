/*
** fuzz/chunk.c: every chunker on any bytes, with options taken from the
** first bytes (chunker, unit: code points, the estimate or exact cl100k,
** size, overlap, separator rules). On success every chunk must be a
** non-empty span of the text, in bounds, cut at UTF-8 character
** boundaries, measured exactly and within its limit; on RAG_EENCODING the
** text must be invalid UTF-8. The semantic steps get distances and breaks
** from the input too. Reads lua/rag/vocab/cl100k_base.tiktoken (run from
** the repository root, as .ci/fuzz does).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rag.h"
#include "rag_chunk.h"
#include "rag_markdown.h"
#include "rag_sentences.h"
#include "rag_text.h"
#include "rag_tokenizer.h"

static rag_tokenizer *cl100k; /* a small cache, so that it evicts */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  size_t len, errline;
  char *data;
  FILE *f = fopen("lua/rag/vocab/cl100k_base.tiktoken", "rb");
  (void)argc;
  (void)argv;
  if (f != NULL) {
    fseek(f, 0, SEEK_END);
    len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    data = (char *)malloc(len);
    if (data != NULL && fread(data, 1, len, f) == len)
      rag_tokenizer_new(data, len, RAG_PRETOK_CL100K, NULL, 0, 64, &cl100k, &errline);
    free(data);
    fclose(f);
  }
  if (cl100k == NULL) {
    fprintf(stderr, "fuzz/chunk: cannot load lua/rag/vocab/cl100k_base.tiktoken\n");
    abort();
  }
  return 0;
}

static int is_cont(uint8_t c) {
  return (c & 0xC0) == 0x80;
}

static void check(const uint8_t *s, size_t len, const rag_chunk_list *l,
                  const rag_chunk_measure *m, size_t limit,
                  const size_t *sizes) {
  size_t i, n;
  for (i = 0; i < l->n; i++) {
    const rag_chunk *c = &l->v[i];
    size_t lim = sizes ? sizes[c->level - 1] : limit;
    if (c->start >= c->stop || c->stop > len) __builtin_trap();
    if (is_cont(s[c->start]) || (c->stop < len && is_cont(s[c->stop])))
      __builtin_trap();
    if (m->count(m->ud, (const char *)s + c->start, c->stop - c->start, &n) !=
            RAG_OK ||
        n != c->size)
      __builtin_trap();
    if (c->size > lim) __builtin_trap();
    if (sizes && c->level > 1) {
      const rag_chunk *p = &l->v[c->parent - 1];
      if (c->parent == 0 || c->parent > i || p->start > c->start ||
          p->stop < c->stop)
        __builtin_trap();
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const rag_chunk_sep seps[] = {{RAG_SEP_TEXT, "\n\n", 2},
                                       {RAG_SEP_TEXT, ".", 1},
                                       {RAG_SEP_SENTENCE, NULL, 0},
                                       {RAG_SEP_TEXT, " ", 1}};
  rag_chunk_opts o;
  rag_chunk_measure m;
  rag_chunk_list l = {NULL, 0, 0};
  rag_markdown_heading *h = NULL;
  size_t errpos = 0, nh = 0, len, sizes[3];
  const uint8_t *s;
  int rc = RAG_OK, which;
  if (size < 4) return 0;
  which = data[0] % 8;
  rag_chunk_defaults(&o);
  if (data[0] & 8)
    rag_chunk_measure_bpe(&m, cl100k);
  else if (data[1] & 1)
    rag_chunk_measure_approx(&m);
  else
    rag_chunk_measure_chars(&m);
  o.size = (data[0] & 8 || data[1] & 1 ? 4 : 1) + data[2] % 64;
  o.overlap = data[3] % o.size;
  o.keep = (rag_chunk_keep)((data[1] >> 1) % 3);
  o.trim = (data[1] >> 3) & 1;
  o.langchain = (data[1] >> 4) & 1;
  if ((data[1] >> 5) & 1) {
    o.seps = seps;
    o.nseps = 1 + (data[1] >> 6) % 4;
  }
  s = data + 4;
  len = size - 4;
  sizes[0] = o.size * 4;
  sizes[1] = o.size * 2;
  sizes[2] = o.size;
  switch (which) {
    case 0:
      rc = rag_chunk_fixed((const char *)s, len, &o, &m, &l, &errpos);
      break;
    case 1:
      rc = rag_chunk_recursive((const char *)s, len, &o, &m, &l, &errpos);
      break;
    case 2:
      rc = rag_chunk_sentences((const char *)s, len, &o, &m, &l, &errpos);
      break;
    case 3:
      rc = rag_chunk_window((const char *)s, len, &o, data[3] % 5, &m, &l,
                            &errpos);
      break;
    case 4:
      rc = rag_chunk_markdown((const char *)s, len, &o, &m, &l, &h, &nh,
                              &errpos);
      break;
    case 5:
      o.overlap = 0;
      rc = rag_chunk_hierarchy((const char *)s, len, &o, sizes, 3, &m, &l,
                               &errpos);
      break;
    default: { /* semantic: distances and breaks from the text's bytes */
      rag_span *sp = NULL;
      size_t n = 0, i;
      double d[64], scratch[128], t;
      unsigned char brk[64];
      rc = rag_sentences_split((const char *)s, len, &sp, &n, &errpos);
      if (rc != RAG_OK) break;
      if (n > 65) n = 65; /* only the first 65 sentences */
      for (i = 0; i + 1 < n; i++) d[i] = (double)s[i % len] / 255.0;
      if (n >= 2 && rag_chunk_breaks(d, n - 1, (rag_chunk_break)(data[3] % 4),
                                     data[0] % 101, scratch, brk, &t) != RAG_OK)
        __builtin_trap();
      if (n >= 2) {
        for (i = 0; i + 1 < n; i++)
          if (brk[i] != (data[3] % 4 == 3 ? brk[i] : (d[i] > t)))
            __builtin_trap();
      }
      rc = rag_chunk_semantic((const char *)s, n ? sp[n - 1].stop : 0, sp, n,
                              brk, data[2] % 8, &o, &m, &l);
      rag_free(sp);
      break;
    }
  }
  if (rc == RAG_EENCODING) {
    if (rag_text_first_invalid(s, len) + 1 != errpos) __builtin_trap();
  } else if (rc != RAG_OK) {
    __builtin_trap();
  } else {
    check(s, len, &l, &m, o.size, which == 5 ? sizes : NULL);
  }
  rag_free(l.v);
  rag_free(h);
  return 0;
}
