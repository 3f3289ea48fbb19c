/*
** rag_tokenizer.h: exact tiktoken-compatible byte-pair encoding. A
** vocabulary in tiktoken's text format ("base64 rank" per line), a
** pre-tokenizer that reproduces an encoding's split regex by hand over
** utf8proc categories (no regex engine), and merges by rank, so that counts
** and ids equal OpenAI's tiktoken for cl100k_base and o200k_base.
**
** Any number of threads may encode, count and decode with one tokenizer at
** the same time. Its vocabulary is immutable once built; the one part that
** changes is a cache of the tokens of short pieces seen before, which those
** threads share without locks (rag_piececache.h) and which never changes a
** result, only how soon it comes.
*/
#ifndef RAG_TOKENIZER_H
#define RAG_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct rag_tokenizer rag_tokenizer;

/* The pre-tokenization rules: which encoding's split regex to reproduce. */
typedef enum rag_pretok {
  RAG_PRETOK_CL100K = 0, /* cl100k_base (GPT-3.5, GPT-4, text-embedding-3) */
  RAG_PRETOK_O200K       /* o200k_base (GPT-4o, o1, o3) */
} rag_pretok;

/* A special token: its text and id (distinct from every rank). */
typedef struct rag_special {
  const char *text;
  size_t len;
  uint32_t id;
} rag_special;

#define RAG_TOKENIZER_MAX_SPECIALS 32

/* The default and largest sizes of the cache of short pieces, in pieces
** (32 bytes each). */
#define RAG_TOKENIZER_CACHE 65536
#define RAG_TOKENIZER_CACHE_MAX 1048576

/*
** Builds a tokenizer from `len` bytes of a .tiktoken file at `data` and
** `nspecial` (<= RAG_TOKENIZER_MAX_SPECIALS) special tokens; all inputs are
** borrowed and copied. `cache` is how many short pieces (up to 16 bytes,
** such as " the") the tokenizer remembers the tokens of, rounded down to a
** power of two, at most RAG_TOKENIZER_CACHE_MAX; 0: none. Results never depend on it.
** RAG_EFORMAT: a malformed line (*errline, 1-based, or
** 0 when the vocabulary as a whole is unusable: empty, a single byte
** missing, a duplicate token or rank, a special id that is also a rank).
** RAG_EINVAL: too many specials or an empty special text.
*/
int rag_tokenizer_new(const char *data, size_t len, rag_pretok pretok,
                      const rag_special *specials, size_t nspecial, size_t cache,
                      rag_tokenizer **out, size_t *errline);

/* Frees a tokenizer; NULL is a no-op. */
void rag_tokenizer_free(rag_tokenizer *t);

/* Number of ranks (the largest rank + 1), of special tokens, and of the
** pieces the cache holds at most (0: no cache). */
size_t rag_tokenizer_nranks(const rag_tokenizer *t);
size_t rag_tokenizer_nspecials(const rag_tokenizer *t);
size_t rag_tokenizer_cache_size(const rag_tokenizer *t);
/* The ith special token (0-based, i < nspecials); borrowed from t. */
const rag_special *rag_tokenizer_special(const rag_tokenizer *t, size_t i);

/*
** Encodes `len` bytes of UTF-8 at `s`. Special-token text is ordinary text
** unless bit i of `allowed` is set for the ith special, which is then
** emitted as its id. On RAG_OK, *ids is a new array of *n ids (NULL when
** *n == 0) that the caller releases with rag_free. RAG_EENCODING: `s` is
** not valid UTF-8, *errpos is the 1-based offset of the first bad byte.
** RAG_ENOMEM: nothing is allocated.
*/
int rag_tokenizer_encode(const rag_tokenizer *t, const char *s, size_t len,
                         uint32_t allowed, uint32_t **ids, size_t *n,
                         size_t *errpos);

/* Like rag_tokenizer_encode, but only counts the tokens (no id array). */
int rag_tokenizer_count(const rag_tokenizer *t, const char *s, size_t len,
                        uint32_t allowed, size_t *n, size_t *errpos);

/*
** Like rag_tokenizer_count, but it may stop early once the count is above
** `max`: *n is the count when that is at most max, else some number above
** max. For callers that only need to know that a text does not fit.
*/
int rag_tokenizer_count_upto(const rag_tokenizer *t, const char *s, size_t len,
                             uint32_t allowed, size_t max, size_t *n,
                             size_t *errpos);

/*
** Exact counts of many spans of one text, as rag_tokenizer_count_upto
** gives them (no specials), for the chunkers, which measure the same bytes
** again and again. The whole text's pieces are counted once; a span's
** count is the counts of the pieces it shares with the whole text, and a
** fresh count of its edges: the pieces before the first piece of the whole
** text that the span's own pre-tokenization reaches, and the last ones,
** whose pre-tokenization may have looked past the span's end. `s` (`len`
** bytes of valid UTF-8, not checked again) is borrowed until _free. Errors:
** RAG_ENOMEM (nothing allocated).
*/
typedef struct rag_tokenizer_spans rag_tokenizer_spans;
int rag_tokenizer_spans_new(const rag_tokenizer *t, const char *s, size_t len,
                            rag_tokenizer_spans **out);
/* The count of bytes [a, b) (a <= b <= len, both at character
** boundaries), exact when at most max, else some number above max. */
int rag_tokenizer_spans_count(rag_tokenizer_spans *sp, size_t a, size_t b,
                              size_t max, size_t *n);
void rag_tokenizer_spans_free(rag_tokenizer_spans *sp);

/*
** Like rag_tokenizer_encode, but gives where each token ends instead of its
** id: *ends is a new array of *n exclusive byte offsets into `s`, increasing,
** the last equal to len (NULL when *n == 0), released with rag_free. A token
** may end inside a UTF-8 sequence. Errors as rag_tokenizer_encode.
*/
int rag_tokenizer_ends(const rag_tokenizer *t, const char *s, size_t len,
                       uint32_t allowed, size_t **ends, size_t *n,
                       size_t *errpos);

/*
** The bytes of `n` ids concatenated (the result may split a UTF-8 sequence
** when the ids do). On RAG_OK, *out is a new NUL-terminated string of
** *outlen bytes that the caller releases with rag_free. RAG_EINVAL: ids[*bad]
** (0-based) is neither a rank nor a special id. RAG_ENOMEM: nothing allocated.
*/
int rag_tokenizer_decode(const rag_tokenizer *t, const uint32_t *ids, size_t n,
                         char **out, size_t *outlen, size_t *bad);

/*
** The end of the pre-token that starts at byte i of valid UTF-8 `s` (i <
** len): the regex match a tiktoken encoder would take there. Exposed for
** the specs and fuzzers.
*/
size_t rag_tokenizer_pretoken(rag_pretok pretok, const char *s, size_t len, size_t i);

#endif
