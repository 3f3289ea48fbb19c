/*
** rag_text.h: text cleaning before chunking and indexing (the seed's
** preprocess step, done in C over utf8proc): Unicode normalisation, control
** characters out, spaces and blank lines folded, whitespace trimmed.
*/
#ifndef RAG_TEXT_H
#define RAG_TEXT_H

#include <stddef.h>

typedef enum rag_text_form {
  RAG_TEXT_NFKC = 0, /* compatibility composition: full-width -> ASCII, ligatures split */
  RAG_TEXT_NFC,      /* canonical composition only */
  RAG_TEXT_NONE      /* no Unicode normalisation */
} rag_text_form;

typedef struct rag_text_norm {
  rag_text_form form;
  int strict; /* 1: invalid UTF-8 is an error; 0: each bad byte becomes U+FFFD */
} rag_text_norm;

/*
** Normalises `len` bytes at `s` (borrowed). On RAG_OK, *out is a new
** NUL-terminated string of *outlen bytes that the caller releases with
** rag_free. RAG_EENCODING (strict only): *errpos is the 1-based offset of
** the first invalid byte. RAG_ENOMEM: nothing is allocated.
*/
int rag_text_normalize(const char *s, size_t len, const rag_text_norm *opts,
                       char **out, size_t *outlen, size_t *errpos);

/* Offset (0-based) of the first byte of `s` that starts no valid UTF-8
** sequence (utf8proc's rules: no overlongs, surrogates or > U+10FFFF), or
** len when all `len` bytes are valid. */
size_t rag_text_first_invalid(const unsigned char *s, size_t len);

#endif
