/*
** rag_mentions.h: the offline entity extractor of the graph (rag.graph's
** heuristic `extract`) and the entity key of a surface name. One pass over
** validated UTF-8, sentence by sentence: runs of capitalised words and
** acronyms, and RAKE-style noun phrases of lowercase non-stopwords.
*/
#ifndef RAG_MENTIONS_H
#define RAG_MENTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "rag.h"

typedef struct rag_mentions rag_mentions;

typedef struct rag_mentions_opts {
  size_t max_words; /* the longest noun phrase, in words (>= 2); default 3 */
  int phrases;      /* whether noun phrases are extracted; default 1 */
  size_t min_len;   /* the shortest key kept, in bytes; default 2 */
} rag_mentions_opts;

void rag_mentions_defaults(rag_mentions_opts *o);

/* One mention: its surface [start, stop) (0-based bytes of the input), its key. */
typedef struct rag_mention {
  size_t start, stop;
  size_t key, keylen; /* the key's bytes at rag_mentions_keys() + key */
  uint32_t sentence;  /* 0-based sentence number (rag_sentences_split's) */
} rag_mention;

/* An extractor: the stopword table and scratch space. RAG_ENOMEM. */
int rag_mentions_new(rag_mentions **out);
void rag_mentions_free(rag_mentions *m); /* NULL is a harmless no-op */

/*
** The mentions of the len bytes at s (borrowed), in text order: *out gets
** *n of them, owned by m and valid (with rag_mentions_keys) until the next
** call on m. RAG_EENCODING (*errpos: the 1-based offset of the first invalid
** byte), RAG_ENOMEM.
**
** The rules. Tokens are runs of letters, digits, marks and '_', joined by a
** single '-', "'" or U+2019 between two of them; a final "'s" is not part of
** a token. Two tokens are adjacent when only spaces or tabs (no line break,
** no punctuation) lie between them. A name token starts with an uppercase
** letter, or has two uppercase letters, or an uppercase letter and a digit
** (TNF, IL-6, BRCA1, mRNA, COVID-19; not p53). A name is a maximal run of
** adjacent name tokens, where "of", "de", "van", "von", "der" and "and"
** may join two capitalised words that are no acronyms (University of
** Oxford, but TNF and IL-6 stay two names); a name loses the stopwords at
** its ends (The, In, We, However at the start of a sentence or after a
** line break; "Methods We" is "Methods"). A noun phrase is a maximal run of
** adjacent tokens made of lowercase letters only (hyphens allowed) that are
** not stopwords, kept when it has 2 to max_words words. A mention whose key
** has fewer than min_len bytes is dropped.
*/
int rag_mentions_run(rag_mentions *m, const char *s, size_t len, const rag_mentions_opts *o,
                     const rag_mention **out, size_t *n, size_t *errpos);

/* The key buffer of the last run's mentions. */
const char *rag_mentions_keys(const rag_mentions *m);

/*
** The entity key of a name: NFKC and case folding (utf8proc), whitespace
** runs made one space, leading and trailing whitespace and punctuation
** (Unicode P*) removed, then a leading "the ", "a " or "an " dropped (and
** what then leads stripped again). *out is a new NUL-terminated string of
** *outlen bytes (possibly empty) the caller releases with rag_free.
** RAG_EENCODING (*errpos set), RAG_ENOMEM.
*/
int rag_mentions_normalize(const char *s, size_t len, char **out, size_t *outlen,
                           size_t *errpos);

/* Whether the ASCII word (any case) of len bytes is one of the stopwords. */
int rag_mentions_is_stopword(const rag_mentions *m, const char *w, size_t len);

#endif
