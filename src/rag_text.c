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
#include "rag_utf8.h"

#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

size_t rag_text_first_invalid(const unsigned char *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    int32_t cp;
    size_t n;
    if (s[i] < 0x80) { /* ASCII eight bytes at a time */
      uint64_t w;
      while (len - i >= 8) {
        memcpy(&w, s + i, 8);
        if (w & UINT64_C(0x8080808080808080)) break;
        i += 8;
      }
      while (i < len && s[i] < 0x80) i++;
      continue;
    }
    if ((n = rag_utf8_decode(s + i, len - i, &cp)) == 0) return i;
    i += n;
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
    int32_t cp;
    size_t k = rag_utf8_decode(s + i, len - i, &cp);
    if (k == 0) {
      memcpy(p + n, REPLACEMENT, 3);
      n += 3;
      i++;
    } else {
      memcpy(p + n, s + i, k);
      n += k;
      i += k;
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
    int32_t cp = 0xFFFD;
    size_t k = rag_utf8_decode(s + i, len - i, &cp);
    if (k == 0) k = 1; /* cannot happen: input was checked */
    if (cp == '\r') {
      cp = '\n';
      if (i + 1 < len && s[i + 1] == '\n') k = 2;
    }
    if (cp != '\n' && cp != '\t' && utf8proc_category(cp) == UTF8PROC_CATEGORY_CC) {
      i += k;
      continue;
    }
    if (cp == ' ' && spaces > 0) {
      i += k;
      continue;
    }
    if (cp == '\n' && newlines >= 2) {
      i += k;
      continue;
    }
    spaces = cp == ' ' ? spaces + 1 : 0;
    newlines = cp == '\n' ? newlines + 1 : (cp == ' ' || cp == '\t' ? newlines : 0);
    if (n == 0 && is_space(cp)) { /* leading whitespace */
      i += k;
      continue;
    }
    if (cp == '\n') p[n++] = '\n';
    else {
      memcpy(p + n, s + i, k);
      n += k;
    }
    if (!is_space(cp)) keep = n;
    i += k;
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
