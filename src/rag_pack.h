/*
** rag_pack.h: context packing. Picks retrieved items greedily by rank into
** a token budget, renders each through a template with a citation number,
** joins them with a separator and returns the text with its exact token
** count, the items used and dropped, and one citation per passage.
** Counting goes through a rag_tokenizer (exact BPE) or, when it is NULL,
** the approximate counter of rag_approx.h.
*/
#ifndef RAG_PACK_H
#define RAG_PACK_H

#include <stddef.h>

#include "rag.h"
#include "rag_tokenizer.h"

/* The default template and separator. */
#define RAG_PACK_DEFAULT_TEMPLATE "[{n}] {source}\n{text}"
#define RAG_PACK_DEFAULT_SEPARATOR "\n\n"

/*
** One candidate. All bytes are borrowed for the call. source and doc may
** be NULL (none); the document of an item is doc, else source. With
** has_span, [start, stop) are the 0-based byte offsets of text in its
** document, so stop - start == len.
*/
typedef struct rag_pack_item {
  const char *id, *text, *source, *doc;
  size_t idlen, len, srclen, doclen;
  double score;          /* read when rag_pack_opts.scored */
  size_t start, stop;    /* read when has_span */
  int has_span;
} rag_pack_item;

typedef enum rag_pack_order {
  RAG_PACK_RELEVANCE, /* best first */
  RAG_PACK_EDGES,     /* lost in the middle: best at both edges, weakest inside */
  RAG_PACK_GIVEN      /* the list order, scores or not: taken and shown as given */
} rag_pack_order;

/*
** Options. The template's placeholders are {n} (citation number), {id},
** {source} (the id when there is none), {doc}, {text}, {score}, {start}
** and {stop} (1-based, inclusive; empty without a span); every other byte
** is literal. NULL tmpl or sep: the defaults above.
*/
typedef struct rag_pack_opts {
  size_t budget;             /* tokens the returned text may hold */
  const rag_tokenizer *tok;  /* borrowed; NULL: the approximate counter */
  rag_pack_order order;
  const char *tmpl, *sep;
  size_t tmpllen, seplen;
  size_t per_source;         /* most items per source; 0: no limit */
  int scored;                /* 1: rank by score, best first, ties by id bytes
                                (unless order is RAG_PACK_GIVEN);
                                0: the list order is the ranking */
  int merge;                 /* merge items of one document whose spans touch */
  int truncate;              /* cut the first item that does not fit */
} rag_pack_opts;

/* One passage of the text, in text order; its citation number is its
** position + 1. */
typedef struct rag_pack_passage {
  size_t lead;         /* the item whose id, source and score it shows */
  size_t first, n;     /* its items: used[first .. first + n), in document order */
  size_t start, stop;  /* [start, stop) of its document, when has_span */
  int has_span, truncated;
} rag_pack_passage;

/* A packing; every array is owned by the result (rag_pack_result_free). */
typedef struct rag_pack_result {
  char *text;                  /* len bytes, NUL-terminated */
  size_t len, tokens;          /* tokens: the exact count of text */
  rag_pack_passage *passages;
  size_t npassages;
  size_t *used, *dropped;      /* item indices: used in text order, dropped by rank;
                                  dropped points into used's block, freed with it */
  size_t nused, ndropped;
} rag_pack_result;

/* What an error is about: the field of item `item`, or an option. */
typedef enum rag_pack_field {
  RAG_PACK_ID, RAG_PACK_TEXT, RAG_PACK_SOURCE, RAG_PACK_DOC, RAG_PACK_SPAN,
  RAG_PACK_TEMPLATE, RAG_PACK_SEPARATOR
} rag_pack_field;

typedef struct rag_pack_err {
  size_t item;           /* 0-based index of the item (item fields only) */
  rag_pack_field field;
  size_t pos;            /* 1-based byte of the fault (encoding, template) */
} rag_pack_err;

/*
** RAG_OK when every {name} in the template is a known placeholder, else
** RAG_EINVAL with *pos the 0-based offset of its '{' and *len its length.
*/
int rag_pack_check_template(const char *tmpl, size_t tmpllen, size_t *pos, size_t *len);

/*
** Packs n items (borrowed) into *out, which the caller zeroes first and
** empties with rag_pack_result_free whatever the status.
**
** Items are taken in rank order; each is taken when the text with it still
** fits the budget, else dropped; per_source limits the items of a source.
** With merge, an item whose span touches or overlaps passages of its
** document (and agrees with them on the shared bytes) joins them into one
** passage, its bytes never repeated. With truncate, the first item that
** does not fit on its own is cut at a character boundary, at a token end
** when possible, to fill what is left. The token count is exact for the
** returned text, template, separators and seams included: with an exact
** tokenizer and relevance order the greedy test is exact; otherwise the
** arranged text is counted and, if over, the selection is redone with a
** budget lowered by the excess.
**
** RAG_EENCODING: a string is not UTF-8 (*err says which, and the byte).
** RAG_EINVAL: a duplicate id, a span whose length is not len, or a bad
** template (*err says which). RAG_ENOMEM.
*/
int rag_pack(const rag_pack_item *items, size_t n, const rag_pack_opts *o,
             rag_pack_result *out, rag_pack_err *err);

/* Frees what a result owns and zeroes it; NULL is a harmless no-op. */
void rag_pack_result_free(rag_pack_result *r);

#endif
