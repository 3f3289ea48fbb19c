/*
** rag_markdown.h: the headings of a Markdown document, as byte spans, for
** rag.chunk.markdown (sections by heading, each chunk with its heading
** path). One pass over the lines, no copies: the result points into the
** caller's text.
*/
#ifndef RAG_MARKDOWN_H
#define RAG_MARKDOWN_H

#include <stddef.h>

#include "rag.h"

/* One heading; all offsets are 0-based bytes into the scanned text. */
typedef struct rag_markdown_heading {
  /*
  ** The whole heading block [start, stop): from the first byte of its
  ** (first) line to the end of its last line, line break included;
  ** stop == len when the text ends there.
  */
  size_t start, stop;
  /*
  ** The heading's text [text_start, text_stop), never starting or ending
  ** with a space, tab or line break. ATX: between the opening #s (and the
  ** spaces after them) and the optional closing #s (and the spaces around
  ** them). Setext: from the first non-blank byte of the paragraph's first
  ** line (after any link reference definitions) to the last non-blank byte
  ** of its last line, inner line breaks and indentation included. Empty
  ** (text_start == text_stop) for a bare "#" or "## ##".
  */
  size_t text_start, text_stop;
  int level;   /* 1..6; setext: 1 for '=', 2 for '-' */
  int setext;  /* 1 for an underlined heading, 0 for an ATX (#) one */
} rag_markdown_heading;

/*
** Finds the headings in `len` bytes of Markdown at `s` (borrowed for the
** call). The scanner works on bytes and looks only at ASCII, so the text
** need not be valid UTF-8 and multi-byte characters are never split.
**
** OUT *out, *n: on RAG_OK, *out is a new array of *n headings in text
** order (their blocks increasing and disjoint), released by the caller
** with rag_free; NULL when *n is 0.
** Returns RAG_OK or RAG_ENOMEM; on RAG_ENOMEM *out is NULL, *n is 0 and
** nothing stays allocated. Time is linear in len.
**
** Rules: the block structure of CommonMark 0.31, of which only headings at
** the top level count as sections (differential tests against the
** reference parser find the same top-level headings, lines and text).
** - Lines end at \n, \r\n or \r. Indentation is spaces and tabs (tab stops
**   of 4 columns); a blank line holds only spaces and tabs. A UTF-8 byte
**   order mark before the first line is ignored.
** - ATX: up to 3 spaces of indentation, 1 to 6 '#', then a space, a tab or
**   the end of the line ("#tag" and "####### x" are text). A closing run
**   of '#' after a space or tab is dropped ("## A ##" is "A"; "# C#" is
**   "C#"; "# A \#" is "A \#").
** - Setext: a paragraph of one or more lines, then an underline of '='
**   (level 1) or '-' (level 2): one or more of one character, up to 3
**   spaces of indentation, then only spaces and tabs. A paragraph starts at
**   a line that starts no other block and runs over the lines that start
**   no block able to interrupt it, to a blank line: an ATX heading, a
**   fence, a thematic break, a block quote, an HTML block of kinds 1-6, or
**   a list item, except one that starts with a number other than 1 or has
**   nothing after its marker ("Foo\n2. bar\n---" is one heading). An
**   underline after anything else is no heading: after a blank line "---"
**   is a thematic break. Link reference definitions ("[x]: /url 'title'")
**   that open the paragraph are not part of its text; a paragraph of
**   nothing else is no heading.
** - Thematic breaks: 3 or more of one of '-' '*' '_', and spaces and tabs,
**   after up to 3 spaces; "a\n***\n---" has no heading.
** - Containers: a line opening with '>' (after up to 3 spaces) starts a
**   block quote; one opening with a list marker ("-", "+", "*", or 1-9
**   digits and "." or ")", then a blank or the line's end) a list item.
**   Their contents are not top level: "> # x" and "- # x" are no headings,
**   nor is "# x" indented to the content of a list item above it. A quote
**   goes on while lines open with '>', an item while they are blank or
**   indented to its content, and a paragraph in either over the lines that
**   continue it lazily: "- a\n---" and "> a\nb\n---" have no heading.
** - Fenced code: 3 or more '`' or '~' after up to 3 spaces of indentation
**   (a '`' fence's info string holds no '`') open a fence; a line with up
**   to 3 spaces of indentation, at least as many of the same character and
**   then only blanks closes it. An unclosed fence runs to the end of the
**   text, or of the block quote or list item that holds it: "- ```" then
**   an unindented "# x" is a heading. Nothing inside a fence is.
** - Indented code (4 or more columns, continuing no paragraph) holds no
**   heading.
** - HTML blocks hold no headings: <script, <pre, <style or <textarea to
**   the line with its end tag, <!-- to -->, <? to ?>, <!X to >, <![CDATA[
**   to ]]>, a block-level tag such as <div> or </table> to a blank line,
**   and a complete tag alone on a line (one that does not continue a
**   paragraph) to a blank line.
** - Front matter, an extension: when the text starts with a line "---"
**   (or "+++"), a later line "---" or "..." (or "+++") closes it and no
**   line between is blank, the lines up to the closing one hold no
**   headings. Otherwise the rules above apply.
*/
int rag_markdown_headings(const char *s, size_t len, rag_markdown_heading **out,
                          size_t *n);

#endif
