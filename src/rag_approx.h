/*
** rag_approx.h: a fast estimate of cl100k_base token counts, without a
** vocabulary. Text is read as units (ASCII words, digit runs, punctuation,
** whitespace runs, non-ASCII characters by UTF-8 length and script) and
** each unit costs a weight fitted by least squares against exact cl100k
** counts of English (SciFact) and Chinese (the seeds) text; see
** docs/api.md for the measured error.
**
** The estimate is also a split: the text is cut into pseudo-tokens, byte
** strings whose concatenation is the input (a cut may fall inside a UTF-8
** sequence, as real BPE tokens do), and the count is their number.
*/
#ifndef RAG_APPROX_H
#define RAG_APPROX_H

#include <stddef.h>

/*
** Counts the pseudo-tokens of `len` bytes at `s` (borrowed) into *n: 0 for
** empty input, at least 1 otherwise. RAG_EENCODING: invalid UTF-8, *errpos
** is the 1-based offset of the first bad byte.
*/
int rag_approx_count(const char *s, size_t len, size_t *n, size_t *errpos);

/*
** Like rag_approx_count, but it may stop early once the count is above
** `max`: *n is the count when that is at most max, else some number above
** max, and bytes after where it stopped are not checked (for text known to
** be valid UTF-8).
*/
int rag_approx_count_upto(const char *s, size_t len, size_t max, size_t *n, size_t *errpos);

/*
** The same split with its cut points: on RAG_OK, *ends is a new array of *n
** exclusive end offsets, increasing, the last equal to len (NULL when *n ==
** 0), released with rag_free. RAG_EENCODING as above; RAG_ENOMEM: nothing
** allocated.
*/
int rag_approx_split(const char *s, size_t len, size_t **ends, size_t *n, size_t *errpos);

#endif
