/*
** rag_text.c: normalisation in three passes: repair or reject invalid UTF-8,
** Unicode normalisation (utf8proc, UAX #15), then one cleaning pass that
** drops control characters (keeping \n and \t; CR and CRLF become \n),
** folds runs of spaces to one and 3+ newlines to 2, and trims whitespace.
*/
#include "rag_text.h"

#include <stdint.h>
#include <string.h>
#include <utf8proc.h>

#include "rag.h"

#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

/* Bytes of the first invalid sequence's start, or len when all is valid. */
size_t rag_text_first_invalid(const unsigned char *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n;
    uint64_t w;
    if (i + 8 <= len && (memcpy(&w, s + i, 8), (w & UINT64_C(0x8080808080808080)) == 0)) {
      i += 8; /* eight ASCII bytes */
      continue;
    }
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    n = utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &cp);
    if (n <= 0) return i;
    i += (size_t)n;
  }
  return len;
}

/* A copy of s with every byte that starts no valid sequence replaced by U+FFFD. */
static int repair(const unsigned char *s, size_t len, size_t bad, char **out,
                  size_t *outlen) {
  size_t i = bad, n = bad;
  char *p;
  if (RAG_MUL_OVERFLOWS(len, 3)) return RAG_ENOMEM;
  if ((p = (char *)rag_malloc(len * 3 + 1)) == NULL) return RAG_ENOMEM;
  memcpy(p, s, bad);
  while (i < len) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = s[i] < 0x80 ? 1 : utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &cp);
    if (k <= 0) {
      memcpy(p + n, REPLACEMENT, 3);
      n += 3;
      i++;
    } else {
      memcpy(p + n, s + i, (size_t)k);
      n += (size_t)k;
      i += (size_t)k;
    }
  }
  p[n] = '\0';
  *out = p;
  *outlen = n;
  return RAG_OK;
}

static int is_space(utf8proc_int32_t cp) {
  utf8proc_category_t c;
  if (cp == ' ' || cp == '\t' || cp == '\n') return 1;
  c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

/*
** The cleaning pass over valid UTF-8 `s` into `p` (at least len + 1 bytes).
** Output never grows: every rule drops or keeps, and CR -> LF is one byte.
*/
static size_t clean(const unsigned char *s, size_t len, char *p) {
  size_t i = 0, n = 0, keep = 0; /* keep: length up to the last non-space */
  int spaces = 0, newlines = 0;
  while (i < len) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &cp);
    if (k <= 0) k = 1, cp = 0xFFFD; /* cannot happen: input was checked */
    if (cp == '\r') {
      cp = '\n';
      if (i + 1 < len && s[i + 1] == '\n') k = 2;
    }
    if (cp != '\n' && cp != '\t' && utf8proc_category(cp) == UTF8PROC_CATEGORY_CC) {
      i += (size_t)k;
      continue;
    }
    if (cp == ' ' && spaces > 0) {
      i += (size_t)k;
      continue;
    }
    if (cp == '\n' && newlines >= 2) {
      i += (size_t)k;
      continue;
    }
    spaces = cp == ' ' ? spaces + 1 : 0;
    newlines = cp == '\n' ? newlines + 1 : (cp == ' ' || cp == '\t' ? newlines : 0);
    if (n == 0 && is_space(cp)) { /* leading whitespace */
      i += (size_t)k;
      continue;
    }
    if (cp == '\n') p[n++] = '\n';
    else {
      memcpy(p + n, s + i, (size_t)k);
      n += (size_t)k;
    }
    if (!is_space(cp)) keep = n;
    i += (size_t)k;
  }
  p[keep] = '\0';
  return keep;
}

int rag_text_normalize(const char *s, size_t len, const rag_text_norm *opts,
                       char **out, size_t *outlen, size_t *errpos) {
  const unsigned char *src = (const unsigned char *)s;
  char *fixed = NULL, *normal = NULL, *p;
  size_t bad = rag_text_first_invalid(src, len);
  int rc = RAG_OK;
  *out = NULL;
  *outlen = 0;
  if (bad < len) {
    if (opts->strict) {
      *errpos = bad + 1;
      return RAG_EENCODING;
    }
    if ((rc = repair(src, len, bad, &fixed, &len)) != RAG_OK) return rc;
    src = (const unsigned char *)fixed;
  }
  if (opts->form != RAG_TEXT_NONE) {
    int flags = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    utf8proc_uint8_t *m = NULL;
    utf8proc_ssize_t n;
    if (opts->form == RAG_TEXT_NFKC) flags |= UTF8PROC_COMPAT;
    n = utf8proc_map(src, (utf8proc_ssize_t)len, &m, (utf8proc_option_t)flags);
    if (n < 0) {
      rag_free(fixed);
      return RAG_ENOMEM; /* the input is valid, so only allocation can fail */
    }
    normal = (char *)m; /* from utf8proc's malloc; released with free */
    src = m;
    len = (size_t)n;
  }
  if ((p = (char *)rag_malloc(len + 1)) == NULL) rc = RAG_ENOMEM;
  else {
    *outlen = clean(src, len, p);
    *out = p;
  }
  free(normal);
  rag_free(fixed);
  return rc;
}
