/*
** fuzz/markdown.c: rag_markdown_headings on any bytes. The headings must
** come in order, their blocks whole lines (a CRLF never split), disjoint
** and in bounds, their text inside the block, trimmed, on one line for an
** ATX heading and before the underline for a setext one, their level 1..6.
*/
#include <stdint.h>
#include <string.h>

#include "rag.h"
#include "rag_markdown.h"

static int is_break(uint8_t c) {
  return c == '\n' || c == '\r';
}

static int is_blank(uint8_t c) {
  return c == ' ' || c == '\t' || is_break(c);
}

/* Whether a line starts at offset i. */
static int line_start(const uint8_t *s, size_t len, size_t i) {
  if (i == 0) return 1;
  if (i > len || !is_break(s[i - 1])) return 0;
  return !(s[i - 1] == '\r' && i < len && s[i] == '\n');
}

/* The start of the last line of the block [start, stop). */
static size_t last_line(const uint8_t *s, size_t start, size_t stop) {
  size_t i = stop;
  if (i > start && s[i - 1] == '\n') i--;
  if (i > start && s[i - 1] == '\r') i--;
  while (i > start && !is_break(s[i - 1])) i--;
  return i;
}

/* Scans s and checks the result against the contract in rag_markdown.h. */
static void check(const uint8_t *s, size_t len) {
  rag_markdown_heading *h = NULL;
  size_t n = 0, i, j, last = 0, u;
  int rc = rag_markdown_headings((const char *)s, len, &h, &n);
  if (rc != RAG_OK || (n == 0) != (h == NULL)) __builtin_trap();
  for (i = 0; i < n; i++) {
    const rag_markdown_heading *x = &h[i];
    if (x->start < last || x->start >= x->stop || x->stop > len ||
        x->text_start < x->start || x->text_start > x->text_stop || x->text_stop > x->stop ||
        x->level < 1 || x->level > 6 || (x->setext != 0 && x->setext != 1) ||
        (x->setext && x->level > 2))
      __builtin_trap();
    if (!line_start(s, len, x->start) || (x->stop < len && !line_start(s, len, x->stop)))
      __builtin_trap();
    if (x->text_stop > x->text_start &&
        (is_blank(s[x->text_start]) || is_blank(s[x->text_stop - 1])))
      __builtin_trap();
    u = last_line(s, x->start, x->stop);
    if (x->setext) {
      /* The underline is a line of its own after the text: = or - and blanks. */
      if (u == x->start || x->text_stop > u || x->text_start == x->text_stop) __builtin_trap();
      for (j = u; j < x->stop && s[j] == ' '; j++) {
      }
      if (j - u > 3 || j >= x->stop || s[j] != (x->level == 1 ? '=' : '-')) __builtin_trap();
      while (j < x->stop && s[j] == (x->level == 1 ? '=' : '-')) j++;
      for (; j < x->stop && !is_break(s[j]); j++)
        if (s[j] != ' ' && s[j] != '\t') __builtin_trap();
    } else {
      /* One line, whose first non-blank bytes are the level's #s. */
      if (u != x->start) __builtin_trap();
      j = x->start;
      if (j == 0 && len >= 3 && s[0] == 0xEF && s[1] == 0xBB && s[2] == 0xBF) j = 3;
      while (j < x->stop && s[j] == ' ') j++;
      if (j - x->start > 6) __builtin_trap(); /* 3 spaces, or a BOM and 3 */
      for (u = 0; u < (size_t)x->level; u++)
        if (j + u >= x->stop || s[j + u] != '#') __builtin_trap();
      if (j + u < x->stop && !is_blank(s[j + u])) __builtin_trap();
      if (x->text_start < j + u) __builtin_trap();
    }
    last = x->stop;
  }
  rag_free(h);
}

/*
** Random bytes seldom make Markdown, so each input is also read as a list
** of pieces (one byte each) that exercise the rules: headings, underlines,
** fences, containers, HTML, link reference definitions, blanks and breaks.
*/
/* clang-format off */
static const char *const pieces[] = {
  "#", "##", "###", "#######", "# ", "## ", " ", "  ", "   ", "    ", "\t",
  "\n", "\n", "\n", "\r", "\r\n", "\n\n",
  "Title", "text", "x", "\xE4\xB8\xAD\xE6\x96\x87",   /* 中文 */
  "=", "===", "-", "---", "*", "***", "_", "___", "+", "+++", "...",
  "```", "````", "~~~", "`", "~", "```py",
  ">", "> ", "- ", "* ", "+ ", "1. ", "2) ", "10.", "0",
  "<", ">", "<div>", "</div>", "<pre>", "</pre>", "<!--", "-->", "<?", "?>",
  "<!X", "<![CDATA[", "]]>", "<a href='x'>", "<x-y/>", "</a>",
  "[", "]", "]:", "[a]: /u", " 't'", "\"", "'", "(", ")", "\\", "<u>",
  "\xEF\xBB\xBF",                                     /* BOM */
};
/* clang-format on */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t text[4096 * 12];
  size_t i, len = 0;
  check(data, size);
  for (i = 0; i < size; i++) {
    const char *p = pieces[data[i] % (sizeof pieces / sizeof *pieces)];
    size_t k = strlen(p);
    if (len + k > sizeof text) break;
    memcpy(text + len, p, k);
    len += k;
  }
  check(text, len);
  return 0;
}
