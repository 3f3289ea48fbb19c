/*
** rag_chunk.h: the chunkers behind rag.chunk. Every chunk is a byte span
** of the caller's text (offsets by construction, never copies), cut only
** at UTF-8 character boundaries, and measured exactly in the caller's unit
** (code points or tokens) so that no chunk exceeds the size limit.
*/
#ifndef RAG_CHUNK_H
#define RAG_CHUNK_H

#include <stddef.h>

#include "rag.h"
#include "rag_tokenizer.h"

/*
** A unit of size. count measures `len` bytes of valid UTF-8 at `s`;
** count_upto (NULL: count does) may stop once the measure is above `max`,
** *n then being some number above max, for spans the chunkers only need to
** know do not fit; ends gives the end offsets of the units of a whole text
** (a new array released with rag_free, increasing, the last equal to len;
** an end may fall inside a UTF-8 sequence), or is NULL for code points,
** which the fixed chunker walks itself. spans_new (NULL: none) makes a
** counter of many spans of one whole text, which a chunker then asks
** instead of count_upto: spans_count(sp, a, b, max, n) measures bytes
** [a, b) of it as count_upto would. All return a status that the chunkers
** pass on.
*/
typedef struct rag_chunk_measure {
  int (*count)(void *ud, const char *s, size_t len, size_t *n);
  int (*count_upto)(void *ud, const char *s, size_t len, size_t max, size_t *n);
  int (*ends)(void *ud, const char *s, size_t len, size_t **ends, size_t *n);
  int (*spans_new)(void *ud, const char *s, size_t len, void **sp);
  int (*spans_count)(void *sp, size_t a, size_t b, size_t max, size_t *n);
  void (*spans_free)(void *sp);
  void *ud;
} rag_chunk_measure;

/* Code points; the approx estimator; exact BPE of `t` (borrowed, specials
** counted as ordinary text). */
void rag_chunk_measure_chars(rag_chunk_measure *m);
void rag_chunk_measure_approx(rag_chunk_measure *m);
void rag_chunk_measure_bpe(rag_chunk_measure *m, const rag_tokenizer *t);

/*
** One chunk: bytes [start, stop) of the text, 0-based. size is its
** measure; overlap the measure of the bytes it shares with the chunk before
** it from the same pass (0 for the first). The rest is per chunker and 0
** elsewhere: level and parent (1-based index into the list) for hierarchy;
** wstart and wstop, the span of the sentence window, for window; section,
** the 1-based index of the heading that opens the chunk's section, for
** markdown.
*/
typedef struct rag_chunk {
  size_t start, stop;
  size_t size, overlap;
  size_t level, parent;
  size_t wstart, wstop;
  size_t section;
} rag_chunk;

/* A growing list of chunks; start it zeroed, release v with rag_free. */
typedef struct rag_chunk_list {
  rag_chunk *v;
  size_t n, cap;
} rag_chunk_list;

/* A separator of the recursive rules: literal text, a sentence boundary
** (rag_sentences rules) or any character boundary. */
typedef enum { RAG_SEP_TEXT, RAG_SEP_SENTENCE, RAG_SEP_CHAR } rag_chunk_sepkind;

typedef struct rag_chunk_sep {
  rag_chunk_sepkind kind;
  const char *text; /* RAG_SEP_TEXT: borrowed, len >= 1 bytes */
  size_t len;
} rag_chunk_sep;

/* Where a literal separator goes: at the start of the next piece, at the
** end of the previous one, or nowhere (never at a chunk's edge). */
typedef enum { RAG_KEEP_START, RAG_KEEP_END, RAG_KEEP_NONE } rag_chunk_keep;

/*
** Options shared by the chunkers. size >= 1 is the hard limit and overlap
** < size the most a chunk repeats of the one before (in the measure's
** units; sentences for rag_chunk_sentences). seps/nseps: the recursive
** rules, most important first (NULL: paragraphs "\n\n", lines "\n",
** sentences, words " ", characters); a character level is implied at the
** end. trim drops whitespace (JavaScript's String.trim set) at chunk edges.
** langchain applies LangChain's rules: a piece of exactly size is split
** further, and a piece no separator can split is kept as it is.
*/
typedef struct rag_chunk_opts {
  size_t size, overlap;
  const rag_chunk_sep *seps;
  size_t nseps;
  rag_chunk_keep keep;
  int trim, langchain;
} rag_chunk_opts;

/* Defaults: size 512, overlap 0, the default rules, keep start, trim. */
void rag_chunk_defaults(rag_chunk_opts *o);

/*
** Every chunker reads `len` bytes of UTF-8 at `s` (borrowed) and appends
** its chunks to *out in text order. RAG_EENCODING: invalid UTF-8, *errpos
** is the 1-based offset of the first bad byte, nothing appended. Other
** errors (RAG_ENOMEM, or a measure's own) may leave chunks appended; the
** caller discards the list. RAG_EINVAL: an option out of range.
*/

/* Windows of size units that overlap by up to overlap units. */
int rag_chunk_fixed(const char *s, size_t len, const rag_chunk_opts *o,
                    const rag_chunk_measure *m, rag_chunk_list *out,
                    size_t *errpos);

/* LangChain's recursive algorithm, measured exactly. */
int rag_chunk_recursive(const char *s, size_t len, const rag_chunk_opts *o,
                        const rag_chunk_measure *m, rag_chunk_list *out,
                        size_t *errpos);

/* Whole sentences packed up to size; o->overlap counts sentences. */
int rag_chunk_sentences(const char *s, size_t len, const rag_chunk_opts *o,
                        const rag_chunk_measure *m, rag_chunk_list *out,
                        size_t *errpos);

/* One sentence per chunk with `window` sentences each side as context. */
int rag_chunk_window(const char *s, size_t len, const rag_chunk_opts *o,
                     size_t window, const rag_chunk_measure *m,
                     rag_chunk_list *out, size_t *errpos);

/*
** A chunk per Markdown section (a heading and what follows it up to the
** next heading); sections over size are split by the recursive rules.
** *heads (a new array of *nheads headings, released with rag_free) is what
** each chunk's section indexes.
*/
struct rag_markdown_heading;
int rag_chunk_markdown(const char *s, size_t len, const rag_chunk_opts *o,
                       const rag_chunk_measure *m, rag_chunk_list *out,
                       struct rag_markdown_heading **heads, size_t *nheads,
                       size_t *errpos);

/*
** Recursive chunks at each of `nsizes` sizes, largest first: level 1 over
** the text, level k+1 inside each level-k chunk, with parent set. o->size
** is ignored.
*/
int rag_chunk_hierarchy(const char *s, size_t len, const rag_chunk_opts *o,
                        const size_t *sizes, size_t nsizes,
                        const rag_chunk_measure *m, rag_chunk_list *out,
                        size_t *errpos);

/* --- the semantic chunker, in steps that the binding drives ------------- */

/* How a breakpoint threshold is found from the distances. */
typedef enum {
  RAG_BREAK_PERCENTILE,
  RAG_BREAK_STDDEV,
  RAG_BREAK_IQR,
  RAG_BREAK_GRADIENT
} rag_chunk_break;

/*
** d[i] = 1 - cosine(v[i], v[i+1]) for i < n - 1, from n vectors of dim
** doubles in a row-major array. A zero vector has cosine 0 with anything.
*/
void rag_chunk_distances(const double *v, size_t n, size_t dim, double *d);

/*
** Marks brk[i] = 1 when a chunk should end after sentence i (i < m, m =
** the number of distances), by LangChain's SemanticChunker rules: the
** threshold is numpy's linear percentile `amount` of d (percentile), mean
** + amount * population std (stddev), mean + amount * (Q3 - Q1) (iqr), or
** the percentile of numpy.gradient(d) (gradient, whose values are then the
** scores); a score strictly above it breaks. *threshold gets the value.
** scratch holds 2 m doubles. RAG_EINVAL: unknown rule, a non-finite
** amount or a percentile outside [0, 100].
*/
int rag_chunk_breaks(const double *d, size_t m, rag_chunk_break rule,
                     double amount, double *scratch, unsigned char *brk,
                     double *threshold);

/*
** Chunks from sentences (n spans of s, from rag_sentences_split) and the
** breaks after them (n - 1 flags): a run of sentences between breaks is one
** chunk unless it measures less than min_size, when the break is skipped
** (the last run stays as it is); runs over o->size are split by the
** recursive rules.
*/
int rag_chunk_semantic(const char *s, size_t len, const rag_span *sent,
                       size_t n, const unsigned char *brk, size_t min_size,
                       const rag_chunk_opts *o, const rag_chunk_measure *m,
                       rag_chunk_list *out);

#endif
