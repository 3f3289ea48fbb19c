/*
** fuzz/html.c: rag_html_extract on any bytes, and on tag soup built from
** pieces. The text must be NUL-terminated at len, never start or end with
** white space; the headings must be
** in order, non-empty, in bounds and level 1..6; the title trimmed.
*/
#include <stdint.h>
#include <string.h>

#include "rag.h"
#include "rag_html.h"

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
}

static void check(const uint8_t *s, size_t len) {
  rag_html h;
  size_t i, last = 0;
  int rc = rag_html_extract((const char *)s, len, &h);
  if (rc != RAG_OK) {
    if (rc != RAG_EFORMAT || h.text != NULL || h.title != NULL || h.headings != NULL)
      __builtin_trap();
    return;
  }
  if (h.text == NULL || h.text[h.len] != '\0') __builtin_trap();
  if (h.len > 0 && (is_space(h.text[0]) || is_space(h.text[h.len - 1]))) __builtin_trap();
  if ((h.nheadings == 0) != (h.headings == NULL)) __builtin_trap();
  for (i = 0; i < h.nheadings; i++) {
    const rag_html_heading *x = &h.headings[i];
    if (x->start < last || x->start >= x->stop || x->stop > h.len || x->level < 1 ||
        x->level > 6)
      __builtin_trap();
    last = x->stop;
  }
  if (h.title != NULL && (h.titlelen == 0 || h.title[h.titlelen] != '\0' ||
                          is_space(h.title[0]) || is_space(h.title[h.titlelen - 1])))
    __builtin_trap();
  rag_html_free(&h);
  rag_html_free(&h); /* idempotent */
  rag_html_free(NULL);
}

/* clang-format off */
static const char *const pieces[] = {
  "<html>", "</html>", "<head>", "</head>", "<title>", "</title>", "<body>", "</body>",
  "<main>", "</main>", "<article>", "</article>", "<header>", "</header>", "<footer>",
  "</footer>", "<nav>", "</nav>", "<aside>", "</aside>", "<script>", "</script>",
  "<style>", "</style>", "<noscript>", "</noscript>", "<form>", "</form>",
  "<h1>", "</h1>", "<h2>", "</h2>", "<h6>", "</h6>", "<p>", "</p>", "<div>", "</div>",
  "<pre>", "</pre>", "<br>", "<hr>", "<ul>", "<li>", "</ul>", "<table>", "<tr>", "<td>",
  "</table>", "<div hidden>", "<p style='display: none'>", "<span aria-hidden=\"true\">",
  "<div role=\"main\">", "<![CDATA[x]]>", "<!-- c -->", "&amp;", "&#0;", "&nbsp;", "&#x1F600;",
  " ", "  ", "\n", "\r\n", "\t", "text", "word", "\xE4\xB8\xAD\xE6\x96\x87", "<", ">", "\"",
  "'", "=", "/", "<svg><title>t</title></svg>", "<template>", "<math>",
};
/* clang-format on */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t text[4096 * 32];
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
