/*
** fuzz/sentences.c: rag_sentences_split on any bytes. On success the spans
** must lie in bounds, be non-empty, increasing and disjoint, start and end
** on non-whitespace, and leave only whitespace outside them; on
** RAG_EENCODING the input must be invalid UTF-8 and errpos its first bad byte.
*/
#include <stdint.h>
#include <string.h>

#include <utf8proc.h>

#include "rag.h"
#include "rag_sentences.h"

/* Offset of the first invalid sequence, or len when all is valid. */
static size_t first_invalid(const uint8_t *s, size_t len) {
  utf8proc_int32_t c;
  size_t i = 0;
  while (i < len) {
    utf8proc_ssize_t n =
        utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &c);
    if (n < 0) return i;
    i += (size_t)n;
  }
  return len;
}

/* Whether the valid character at s[i] is whitespace; *n is its length. */
static int space_at(const uint8_t *s, size_t len, size_t i, size_t *n) {
  utf8proc_int32_t c;
  utf8proc_category_t cat;
  *n = (size_t)utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &c);
  if (c == ' ' || (c >= '\t' && c <= '\r') || c == 0x85) return 1;
  cat = utf8proc_category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL ||
         cat == UTF8PROC_CATEGORY_ZP;
}

/* Traps unless s[from, to) is all whitespace. */
static void check_gap(const uint8_t *s, size_t len, size_t from, size_t to) {
  size_t n;
  while (from < to) {
    if (!space_at(s, len, from, &n)) __builtin_trap();
    from += n;
  }
  if (from != to) __builtin_trap(); /* a span boundary inside a character */
}

/* Traps if the character ending at `stop` (exclusive) is whitespace. */
static void check_last(const uint8_t *s, size_t len, size_t start,
                       size_t stop) {
  size_t i = stop - 1, n;
  while (i > start && (s[i] & 0xC0) == 0x80) i--;
  if (space_at(s, len, i, &n) || i + n != stop) __builtin_trap();
}

/* Splits s and checks the result against the contract in rag_sentences.h. */
static void check(const uint8_t *s, size_t len) {
  rag_span *spans = NULL;
  size_t n = 0, errpos = 0, i, last = 0, bad = first_invalid(s, len), k;
  int rc = rag_sentences_split((const char *)s, len, &spans, &n, &errpos);
  if (rc == RAG_EENCODING) {
    if (bad == len || errpos != bad + 1 || spans != NULL || n != 0)
      __builtin_trap();
    return;
  }
  if (rc != RAG_OK || bad != len || (n == 0) != (spans == NULL))
    __builtin_trap();
  for (i = 0; i < n; i++) {
    if (spans[i].start < last || spans[i].start >= spans[i].stop ||
        spans[i].stop > len)
      __builtin_trap();
    check_gap(s, len, last, spans[i].start);
    if (space_at(s, len, spans[i].start, &k)) __builtin_trap();
    check_last(s, len, spans[i].start, spans[i].stop);
    last = spans[i].stop;
  }
  check_gap(s, len, last, len);
  rag_free(spans);
}

/*
** Random bytes are seldom valid UTF-8, so each input is also read as a
** list of pieces (one byte each) that exercise the rules: abbreviations,
** terminators, closers, CJK, line breaks and Unicode spaces.
*/
/* clang-format off */
static const char *const pieces[] = {
  "word", "Word", "The", "It", "Dr", "U.S", "e.g", "etc", "J", "I", "1", "3",
  "al", "No", "example", "com", "4,5", ".", ".", "!", "?", "...", ":", "-",
  "\xE2\x80\xA6",                                  /* … */
  "\xE3\x80\x82", "\xEF\xBC\x81", "\xEF\xBC\x9F",   /* 。！？ */
  "\xEF\xBC\x9B", "\xEF\xBC\x8E", "\xEF\xBD\xA1",   /* ；．｡ */
  "\"", "'", "(", ")",
  "\xE2\x80\x9C", "\xE2\x80\x9D",                  /* “ ” */
  "\xE3\x80\x8C", "\xE3\x80\x8D",                  /* 「 」 */
  "\xE3\x81\xA8", "\xE3\x81\xA3",                  /* と っ */
  "\xE4\xB8\xAD", "\xE6\x96\x87", "\xED\x95\x9C",   /* 中 文 한 */
  " ", " ", " ", "\t", "\n", "\r", "\r\n", "\v", "\f",
  "\xC2\xA0", "\xC2\x85", "\xE3\x80\x80",             /* NBSP NEL U+3000 */
  "\xE2\x80\xA8", "\xE2\x80\xA9",                  /* U+2028 U+2029 */
  "\xC3\xA9", "\xC3\x89", "\xC5\x81",               /* é É Ł */
  "\xF0\x9F\x8E\x89", "\xE0\xA5\xA4", "\xD8\x9F",     /* 🎉 । ؟ */
};
/* clang-format on */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t text[4096 * 8];
  size_t i, len = 0;
  check(data, size);
  for (i = 0; i < size; i++) {
    const char *p = pieces[data[i] % (sizeof pieces / sizeof *pieces)];
    size_t n = strlen(p);
    if (len + n > sizeof text) break;
    memcpy(text + len, p, n);
    len += n;
  }
  check(text, len);
  return 0;
}
