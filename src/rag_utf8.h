/*
** rag_utf8.h: the core's one UTF-8 decoder and encoder. Valid UTF-8 is what
** RFC 3629 and utf8proc_iterate accept: no overlong forms, no surrogates,
** nothing above U+10FFFF. Header only, because every text loop of the core
** decodes and the calls must inline.
*/
#ifndef RAG_UTF8_H
#define RAG_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Whether byte c continues a sequence (10xxxxxx) rather than starting one. */
static inline int rag_utf8_is_cont(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

/* Byte c in each of eight bytes. */
#define RAG_BYTES(c) (UINT64_C(0x0101010101010101) * (c))

/* The top bit of each byte of y (eight bytes, each below 0x80) that is in
** lo..hi, for scanning ASCII eight bytes at a time. */
static inline uint64_t rag_ascii_in(uint64_t y, unsigned lo, unsigned hi) {
  return (y + RAG_BYTES(0x80 - lo)) & ~(y + RAG_BYTES(0x7f - hi)) & RAG_BYTES(0x80);
}

/* The length of the sequence lead byte c starts, for text known to be
** valid; 1 for ASCII (and for a continuation byte, which starts none). */
static inline size_t rag_utf8_lead_len(unsigned char c) {
  return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/*
** Decodes the sequence at s, with len >= 1 bytes left: its length, with the
** code point in *cp, or 0 when no valid sequence starts there (*cp is then
** unchanged).
*/
static inline size_t rag_utf8_decode(const unsigned char *s, size_t len, int32_t *cp) {
  unsigned c = s[0];
  if (c < 0x80) {
    *cp = (int32_t)c;
    return 1;
  }
  if (c < 0xC2 || c > 0xF4) return 0;
  if (c < 0xE0) {
    if (len < 2 || !rag_utf8_is_cont(s[1])) return 0;
    *cp = (int32_t)(((c & 0x1Fu) << 6) | (s[1] & 0x3Fu));
    return 2;
  }
  if (len < 3 || !rag_utf8_is_cont(s[1]) || !rag_utf8_is_cont(s[2])) return 0;
  if (c < 0xF0) {
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F)) return 0; /* overlong, surrogate */
    *cp = (int32_t)(((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu));
    return 3;
  }
  if (len < 4 || !rag_utf8_is_cont(s[3])) return 0;
  if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F)) return 0; /* overlong, too big */
  *cp = (int32_t)(((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) |
                  (s[3] & 0x3Fu));
  return 4;
}

/* Decodes one code point of text already known to be valid; its length. */
static inline size_t rag_utf8_decode_valid(const unsigned char *s, int32_t *cp) {
  unsigned c = s[0];
  if (c < 0x80) {
    *cp = (int32_t)c;
    return 1;
  }
  if (c < 0xE0) {
    *cp = (int32_t)(((c & 0x1Fu) << 6) | (s[1] & 0x3Fu));
    return 2;
  }
  if (c < 0xF0) {
    *cp = (int32_t)(((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu));
    return 3;
  }
  *cp = (int32_t)(((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) |
                  (s[3] & 0x3Fu));
  return 4;
}

/* Writes the encoding of cp (at most U+10FFFF) at o, which has room for
** four bytes; returns its length. */
static inline size_t rag_utf8_encode(uint32_t cp, unsigned char *o) {
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | cp >> 6);
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | cp >> 12);
    o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | cp >> 18);
  o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

#endif
