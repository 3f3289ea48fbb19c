/*
** fuzz/normalize.c: rag_text_normalize on any bytes, in both modes and all
** three forms. Checks that a repaired result is valid UTF-8 and that strict
** mode refuses exactly when repair would have changed invalid input.
*/
#include <stdint.h>
#include <string.h>

#include <utf8proc.h>

#include "rag.h"
#include "rag_text.h"

static int valid_utf8(const char *s, size_t len) {
  utf8proc_int32_t c;
  size_t i = 0;
  while (i < len) {
    utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
    if (n < 0) return 0;
    i += (size_t)n;
  }
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rag_text_norm opts;
  char *out = NULL;
  size_t outlen = 0, errpos = 0;
  int rc, valid;
  if (size == 0) return 0;
  valid = valid_utf8((const char *)data + 1, size - 1);
  opts.form = (rag_text_form)(data[0] % 3);
  for (opts.strict = 0; opts.strict <= 1; opts.strict++) {
    rc = rag_text_normalize((const char *)data + 1, size - 1, &opts, &out, &outlen, &errpos);
    if (rc == RAG_OK) {
      if (!valid_utf8(out, outlen) || strlen(out) > outlen) __builtin_trap();
      rag_free(out);
    } else if (rc != RAG_EENCODING || !opts.strict || valid || errpos < 1 || errpos > size - 1) {
      __builtin_trap();
    }
  }
  return 0;
}
