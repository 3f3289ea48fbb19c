/*
** rag_html.h: the readable text of an HTML page, for rag.load.html: what a
** reader sees of its main content, with block boundaries kept as line
** breaks, its title and its headings. Parsing is libxml2's HTML parser
** (error-recovering, no network, no entity expansion beyond HTML's own).
*/
#ifndef RAG_HTML_H
#define RAG_HTML_H

#include <stddef.h>

#include "rag.h"

/* A heading of the text: [start, stop) 0-based bytes into rag_html.text. */
typedef struct rag_html_heading {
  size_t start, stop; /* the heading's text, never empty */
  int level;          /* 1..6, from h1..h6 */
} rag_html_heading;

/* What rag_html_extract finds; every pointer is owned by the struct. */
typedef struct rag_html {
  char *text;                  /* the text, NUL-terminated; "" when none */
  size_t len;                  /* its length in bytes */
  char *title;                 /* <title>, else the first h1 of the text; NULL when neither */
  size_t titlelen;             /* its length in bytes */
  rag_html_heading *headings;  /* in text order; NULL when none */
  size_t nheadings;            /* their count */
} rag_html;

/*
** Extracts the text of the `len` bytes of HTML at `s` (borrowed for the
** call), read as UTF-8 whatever the page declares.
** OUT *out: on RAG_OK, filled; release it with rag_html_free. On any
** other status *out is empty and nothing stays allocated.
** Returns RAG_OK, RAG_ENOMEM, RAG_ETOOBIG (len above INT_MAX, libxml2's
** limit), RAG_EFORMAT (the parser made no document at all) or RAG_EIO
** (libxml2.so.2 could not be opened; it is opened on the first call).
**
** Rules. Dropped with everything inside: head, script, style, noscript,
** template, nav, aside, form, iframe, svg, canvas, object, embed, button,
** select, textarea, dialog; header and footer outside article and main
** (an article's own header, with its h1, stays); elements with the
** `hidden` attribute, aria-hidden="true", or an inline style with
** display:none or visibility:hidden. When the page has a <main> (or an
** element with role="main") only the first one is read; else when it has
** <article>s only they are read; else the whole body. If that leaves no
** text, the whole body is read instead. Runs of white space become one
** space, except inside <pre>; p, headings, lists, tables, blockquote, pre,
** section, article, figure and hr end a paragraph (a blank line); div, li,
** tr, dt, dd, br and the like end a line; table cells are separated by a
** space. The text neither starts nor ends with white space.
*/
int rag_html_extract(const char *s, size_t len, rag_html *out);

/* Releases what rag_html_extract filled and empties *h; NULL is a no-op. */
void rag_html_free(rag_html *h);

#endif
