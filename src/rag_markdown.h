#ifndef RAG_MARKDOWN_H
#define RAG_MARKDOWN_H
#include <stddef.h>
#include "rag.h"
typedef struct rag_markdown_heading {
  size_t start, stop;
  size_t text_start, text_stop;
  int level;
} rag_markdown_heading;
int rag_markdown_headings(const char *s, size_t len, rag_markdown_heading **out, size_t *n);
#endif
