/*
** rag_markdown.c: Markdown headings in one pass over the lines, the way
** CommonMark parses blocks: a line first goes on in the open containers
** (block quotes, list items), then in the open fence, HTML block or
** paragraph, or starts blocks, tried in CommonMark's order. Only what
** decides headings is kept: the containers, what is open in the innermost
** one, and the open paragraph's span. The rules are listed in the header.
*/
#include "rag_markdown.h"

#include <string.h>

#include "rag_utf8.h"

/* {====== Bytes ======} */

static int is_ws(unsigned c) {
  return c == ' ' || c == '\t';
}
static int is_alpha(unsigned c) {
  return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}
static int is_digit(unsigned c) {
  return c >= '0' && c <= '9';
}

/* The first byte at or after i that is no space or tab; *col follows it. */
static size_t skip_ws(const unsigned char *s, size_t i, size_t end,
                      size_t *col) {
  for (; i < end && is_ws(s[i]); i++) *col = s[i] == '\t' ? (*col | 3) + 1 : *col + 1;
  return i;
}

/* `to` moved back over spaces and tabs, not below `from`. */
static size_t trim_end(const unsigned char *s, size_t from, size_t to) {
  while (to > from && is_ws(s[to - 1])) to--;
  return to;
}

/* Whether s[i, end) holds only spaces and tabs. */
static int only_ws(const unsigned char *s, size_t i, size_t end) {
  return trim_end(s, i, end) == i;
}

/* The length of the run of c at s[i]. */
static size_t run(const unsigned char *s, size_t i, size_t end, unsigned c) {
  size_t j = i;
  while (j < end && s[j] == c) j++;
  return j - i;
}

/* Whether s[i, end) starts with the lowercase ASCII word w, in any case. */
static int starts(const unsigned char *s, size_t i, size_t end,
                  const char *w) {
  for (; *w; w++, i++)
    if (i >= end || (s[i] | (is_alpha(s[i]) ? 0x20 : 0)) != (unsigned char)*w) return 0;
  return 1;
}

/* Whether s[i, end) contains w (lowercase ASCII), in any case. */
static int contains(const unsigned char *s, size_t i, size_t end,
                    const char *w) {
  for (; i < end; i++)
    if (starts(s, i, end, w)) return 1;
  return 0;
}

/* Whether s[i, end) is the lowercase ASCII word w, in any case. */
static int is_word(const unsigned char *s, size_t i, size_t end, const char *w) {
  return end - i == strlen(w) && starts(s, i, end, w);
}

/* {====== Lines ======} */

typedef struct line {
  size_t start; /* first byte */
  size_t from;  /* first byte after a byte order mark */
  size_t at;    /* first byte after the indentation (== end: blank) */
  size_t col;   /* the column of `at`, tabs stopping at multiples of 4 */
  size_t end;   /* the line break, or the text's end */
  size_t next;  /* the byte after the line break */
} line;

static int has_bom(const unsigned char *s, size_t len) {
  return len >= 3 && s[0] == 0xEF && s[1] == 0xBB && s[2] == 0xBF;
}

static void read_line(const unsigned char *s, size_t len, size_t pos,
                      line *l) {
  size_t i = pos;
  while (i < len && s[i] != '\n' && s[i] != '\r') i++;
  l->start = pos;
  l->end = i;
  l->next = i < len ? i + 1 + (s[i] == '\r' && i + 1 < len && s[i + 1] == '\n') : len;
  l->from = pos == 0 && has_bom(s, len) ? 3 : pos;
  l->col = 0;
  l->at = skip_ws(s, l->from, i, &l->col);
}

/* {====== Block starts ======} */

/*
** An ATX heading at s[i]: returns its level and sets its text span, or
** returns 0.
*/
static int atx(const unsigned char *s, size_t i, size_t end, size_t *ts,
               size_t *te) {
  size_t k = run(s, i, end, '#'), col = 0, a, b, j;
  if (k == 0 || k > 6 || (i + k < end && !is_ws(s[i + k]))) return 0;
  a = skip_ws(s, i + k, end, &col);
  b = trim_end(s, a, end);
  j = b;
  while (j > a && s[j - 1] == '#') j--;
  if (j == a)
    b = a; /* nothing but a closing run */
  else if (j < b && is_ws(s[j - 1]))
    b = trim_end(s, a, j); /* "# C#" keeps its '#': no space before */
  *ts = a;
  *te = b;
  return (int)k;
}

/* A setext underline at s[i]: returns its level, or 0. */
static int underline(const unsigned char *s, size_t i, size_t end) {
  unsigned c = s[i];
  if (c != '=' && c != '-') return 0;
  return only_ws(s, i + run(s, i, end, c), end) ? (c == '=' ? 1 : 2) : 0;
}

/*
** What tells which tails of a line are thematic breaks, found in one
** backward pass when first needed: one past the last byte that is none of
** - * _ space tab, and one past the last of each of - * _. Nested list
** markers ("- - - x") thus cost no rescans of the line.
*/
typedef struct tails {
  int done;
  size_t bad, last[3];
} tails;

static int tb_index(unsigned c) {
  return c == '-' ? 0 : c == '*' ? 1 : c == '_' ? 2 : -1;
}

/* Whether s[i, end) is a thematic break: 3 or more of one of - * _, and blanks. */
static int thematic(const unsigned char *s, size_t i, size_t end, tails *t) {
  int x = tb_index(s[i]), y;
  size_t k = 0, j;
  if (x < 0) return 0;
  if (!t->done) {
    t->done = 1;
    t->bad = t->last[0] = t->last[1] = t->last[2] = 0;
    for (j = end; j > i && t->bad == 0; j--) {
      if ((y = tb_index(s[j - 1])) >= 0) {
        if (t->last[y] == 0) t->last[y] = j;
      } else if (!is_ws(s[j - 1])) {
        t->bad = j;
      }
    }
  }
  if (t->bad > i) return 0;
  for (y = 0; y < 3; y++)
    if (y != x && t->last[y] > i) return 0;
  for (j = i; j < end && k < 3; j++) k += s[j] == s[i]; /* a tail of only c and blanks */
  return k >= 3;
}

/* An opening code fence at s[i]: sets its character and length. */
static int fence_opens(const unsigned char *s, size_t i, size_t end,
                       int *c, size_t *k) {
  *c = s[i];
  if (*c != '`' && *c != '~') return 0;
  *k = run(s, i, end, (unsigned)*c);
  if (*k < 3) return 0;
  return *c == '~' || memchr(s + i + *k, '`', end - i - *k) == NULL;
}

/*
** A list item marker at s[i] (column col): - + * or 1-9 digits and . or ),
** then a blank or the line's end. Sets *mend to the byte after it, *ccol to
** the item's content column, *empty when only blanks follow on the line,
** and *strong when the item may interrupt a paragraph (a bullet or "1.",
** not empty).
*/
static int marker(const unsigned char *s, size_t i, size_t end, size_t col, size_t *mend,
                  size_t *ccol, int *empty, int *strong) {
  size_t j = i, m, acol;
  int one = 1;
  if (s[i] == '-' || s[i] == '+' || s[i] == '*') {
    j++;
  } else {
    while (j < end && is_digit(s[j])) j++;
    if (j == i || j - i > 9 || j >= end || (s[j] != '.' && s[j] != ')')) return 0;
    one = s[j - 1] == '1' && run(s, i, j, '0') == j - i - 1; /* "1." or "001)" */
    j++;
  }
  if (j < end && !is_ws(s[j])) return 0;
  m = col + (j - i);
  acol = m;
  *mend = j;
  *empty = skip_ws(s, j, end, &acol) == end;
  *strong = one && !*empty;
  /* Content indented 5 or more columns past the marker is indented code
     that starts one column after it. */
  *ccol = *empty || acol - m >= 5 ? m + 1 : acol;
  return 1;
}

/* {====== HTML blocks ======} */

/* Whether the tag name s[i, i + k) is one of the block-level names (kind 6). */
static int block_tag(const unsigned char *s, size_t i, size_t k) {
  static const char *const names[] = {
      "address", "article", "aside", "base", "basefont", "blockquote", "body",
      "caption", "center", "col", "colgroup", "dd", "details", "dialog",
      "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer",
      "form", "frame", "frameset", "h1", "h2", "h3", "h4", "h5", "h6",
      "head", "header", "hr", "html", "iframe", "legend", "li", "link",
      "main", "menu", "menuitem", "nav", "noframes", "ol", "optgroup",
      "option", "p", "param", "search", "section", "summary", "table",
      "tbody", "td", "tfoot", "th", "thead", "title", "tr", "track", "ul",
  };
  size_t x;
  for (x = 0; x < sizeof names / sizeof *names; x++)
    if (is_word(s, i, i + k, names[x])) return 1;
  return 0;
}

static int is_name_char(unsigned c) {
  return is_alpha(c) || is_digit(c) || c == '_' || c == '.' || c == ':' || c == '-';
}

/* Whether an unquoted attribute value may hold c. */
static int is_value_char(unsigned c) {
  return c > ' ' && c != '"' && c != '\'' && c != '=' && c != '<' && c != '>' && c != '`';
}

/*
** Whether s[i, end) (s[i] == '<') is a complete open or closing tag and
** then only blanks: an HTML block of kind 7.
*/
static int lone_tag(const unsigned char *s, size_t i, size_t end) {
  size_t col = 0, j;
  int close = i + 1 < end && s[i + 1] == '/';
  i += 1 + (size_t)close;
  if (i >= end || !is_alpha(s[i])) return 0;
  while (i < end && (is_alpha(s[i]) || is_digit(s[i]) || s[i] == '-')) i++;
  for (;;) {
    j = skip_ws(s, i, end, &col);
    if (j < end && s[j] == '>') return only_ws(s, j + 1, end);
    if (!close && j + 1 < end && s[j] == '/' && s[j + 1] == '>') return only_ws(s, j + 2, end);
    if (close || j == i || j >= end || !(is_alpha(s[j]) || s[j] == '_' || s[j] == ':'))
      return 0; /* attributes need a blank before them */
    while (j < end && is_name_char(s[j])) j++;
    i = j;
    j = skip_ws(s, j, end, &col);
    if (j < end && s[j] == '=') {
      j = skip_ws(s, j + 1, end, &col);
      if (j < end && (s[j] == '"' || s[j] == '\'')) {
        const unsigned char *q = memchr(s + j + 1, s[j], end - j - 1);
        if (q == NULL) return 0;
        i = (size_t)(q - s) + 1;
      } else {
        for (i = j; i < end && is_value_char(s[i]); i++) {
        }
        if (i == j) return 0;
      }
    }
  }
}

/* The kind (1..7) of the HTML block that starts at s[i], or 0. */
static int html_opens(const unsigned char *s, size_t i, size_t end) {
  size_t a, b;
  int close;
  if (s[i] != '<') return 0;
  if (starts(s, i, end, "<!--")) return 2;
  if (starts(s, i, end, "<?")) return 3;
  if (i + 2 < end && s[i + 1] == '!' && is_alpha(s[i + 2])) return 4;
  if (starts(s, i, end, "<![cdata[")) return 5;
  close = i + 1 < end && s[i + 1] == '/';
  a = b = i + 1 + (size_t)close;
  while (b < end && (is_alpha(s[b]) || is_digit(s[b]))) b++;
  if (!close && (b == end || is_ws(s[b]) || s[b] == '>') &&
      (is_word(s, a, b, "script") || is_word(s, a, b, "pre") || is_word(s, a, b, "style") ||
       is_word(s, a, b, "textarea")))
    return 1;
  if (a < b && block_tag(s, a, b - a) &&
      (b == end || is_ws(s[b]) || s[b] == '>' || starts(s, b, end, "/>")))
    return 6;
  return lone_tag(s, i, end) ? 7 : 0;
}

/* Whether s[i, end) holds the end of an HTML block of kind 1..5. */
static int html_closes(const unsigned char *s, size_t i, size_t end, int kind) {
  switch (kind) {
    case 1:
      return contains(s, i, end, "</script>") || contains(s, i, end, "</pre>") ||
             contains(s, i, end, "</style>") || contains(s, i, end, "</textarea>");
    case 2: return contains(s, i, end, "-->");
    case 3: return contains(s, i, end, "?>");
    case 4: return memchr(s + i, '>', end - i) != NULL;
    default: return contains(s, i, end, "]]>");
  }
}

/* {====== Link reference definitions ======} */

/* The length of the line break at s[i] (CRLF is one), or 0. */
static size_t brk(const unsigned char *s, size_t i, size_t end) {
  if (i >= end || (s[i] != '\n' && s[i] != '\r')) return 0;
  return s[i] == '\r' && i + 1 < end && s[i + 1] == '\n' ? 2 : 1;
}

/* s[i] moved over blanks, at most one line break, and blanks. */
static size_t spnl(const unsigned char *s, size_t i, size_t end) {
  size_t col = 0, k;
  i = skip_ws(s, i, end, &col);
  if ((k = brk(s, i, end)) != 0) i = skip_ws(s, i + k, end, &col);
  return i;
}

/* Whether only blanks follow s[i] on its line; *next: the next line's start. */
static int at_eol(const unsigned char *s, size_t i, size_t end, size_t *next) {
  size_t col = 0;
  i = skip_ws(s, i, end, &col);
  if (i < end && brk(s, i, end) == 0) return 0;
  *next = i + brk(s, i, end);
  return 1;
}

static int is_punct(unsigned c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
         (c >= '{' && c <= '~');
}

/* The end of a link destination at s[i], or 0 when there is none. */
static size_t destination(const unsigned char *s, size_t i, size_t end) {
  size_t j = i;
  int open = 0;
  if (j < end && s[j] == '<') { /* <...>: no line break, no unescaped < > */
    for (j++; j < end && s[j] != '>'; j++) {
      if (s[j] == '<' || brk(s, j, end)) return 0;
      if (s[j] == '\\' && j + 1 < end && !brk(s, j + 1, end)) j++;
    }
    return j < end ? j + 1 : 0;
  }
  while (j < end) {
    unsigned c = s[j];
    if (c == '\\' && j + 1 < end && is_punct(s[j + 1]))
      j += 2;
    else if (c == '(')
      open++, j++;
    else if (c == ')' && open > 0)
      open--, j++;
    else if (c == ')' || c == ' ' || (c >= '\t' && c <= '\r'))
      break;
    else
      j++;
  }
  if ((j == i && (j == end || s[j] != ')')) || open != 0) return 0;
  return j;
}

/* The end of a link title at s[i] ("...", '...' or (...)), or 0. */
static size_t title(const unsigned char *s, size_t i, size_t end) {
  unsigned q = i < end ? s[i] : 0, close = q == '(' ? ')' : q;
  size_t j;
  if (q != '"' && q != '\'' && q != '(') return 0;
  for (j = i + 1; j < end && s[j] != close; j++) {
    if (s[j] == '\\' && j + 1 < end)
      j++;
    else if (q == '(' && s[j] == '(')
      return 0;
  }
  return j < end ? j + 1 : 0;
}

/*
** The length of the link reference definition at the start of s[i, end),
** a paragraph's text, or 0: "[label]: destination 'title'", over up to
** three lines, as commonmark.js reads it.
*/
static size_t linkdef(const unsigned char *s, size_t i, size_t end) {
  size_t j, chars = 0, dest, t, next;
  int blank = 1;
  if (s[i] != '[') return 0;
  for (j = i + 1; j < end && s[j] != ']'; j++) { /* the label: up to 999 characters */
    if (s[j] == '[' || (s[j] == '\\' && j + 1 == end)) return 0;
    if (s[j] == '\\') j++, chars++;
    if (!is_ws(s[j]) && !brk(s, j, end)) blank = 0;
    if (!rag_utf8_is_cont(s[j]) && !(s[j] == '\n' && s[j - 1] == '\r') && ++chars > 999) return 0;
  }
  if (j + 1 >= end || s[j + 1] != ':' || blank) return 0;
  j = spnl(s, j + 2, end);
  if ((dest = destination(s, j, end)) == 0) return 0;
  t = spnl(s, dest, end);
  if (t > dest && (t = title(s, t, end)) != 0 && at_eol(s, t, end, &next)) return next - i;
  return at_eol(s, dest, end, &next) ? next - i : 0;
}

/*
** Where a paragraph's content s[i, end) goes on after the link reference
** definitions that open it: the start of a line, or end.
*/
static size_t skip_defs(const unsigned char *s, size_t i, size_t end) {
  size_t k;
  while (i < end && (k = linkdef(s, i, end)) != 0) i += k;
  return i;
}

/* {====== Scanning ======} */

/* An open container: a block quote (width 0) or a list item. */
typedef struct box {
  size_t width; /* a list item's content indentation, in columns past its container's */
  size_t nq;    /* how many of the boxes up to this one are block quotes */
  int empty;    /* a list item with no content yet (its first line blank): always the last */
} box;

/* The open paragraph: none, one an underline may end (at the innermost box). */
enum { P_NONE, P_OPEN };

/*
** A line of a paragraph that may open with link reference definitions:
** its text, without container markers and indentation.
*/
typedef struct seg {
  size_t from, end;
} seg;

typedef struct scan {
  const unsigned char *s;
  rag_markdown_heading *h; /* the result so far */
  size_t n, cap;
  box *box;                /* the open containers, outermost first */
  size_t depth, boxcap;    /* headings count only at depth 0 */
  int fence;               /* '`' or '~' inside fenced code, else 0 */
  size_t fence_len;        /* the length of the opening run */
  int html;                /* the kind of the open HTML block, else 0 */
  int para;                /* P_* */
  size_t para_start;       /* the open paragraph's first line */
  size_t para_text;        /* its first non-blank byte */
  size_t para_end;         /* the end of its last non-blank byte */
  seg *seg;                /* its lines, when its text starts with '[' */
  size_t nseg, segcap;
} scan;

/* A cursor in a line: the next byte and its column, which is past the
   byte's own column when a tab there is partly used up. */
typedef struct cur {
  size_t pos, col;
} cur;

/* The first non-blank byte from c (or the line's end), and its column. */
static cur nonspace(const unsigned char *s, size_t end, cur c) {
  c.pos = skip_ws(s, c.pos, end, &c.col);
  return c;
}

/* c moved n columns over blanks, maybe into a tab. */
static cur advance(const unsigned char *s, size_t end, cur c, size_t n) {
  while (n > 0 && c.pos < end && is_ws(s[c.pos])) {
    size_t w = s[c.pos] == '\t' ? (c.col | 3) + 1 - c.col : 1;
    if (w > n) {
      c.col += n;
      break;
    }
    c.col += w;
    n -= w;
    c.pos++;
  }
  return c;
}

/* Adds a heading to the result, when it is at the top level. */
static int push(scan *p, size_t start, size_t stop, size_t ts, size_t te, int level,
                int setext) {
  rag_markdown_heading *h;
  if (p->depth > 0) return RAG_OK; /* in a block quote or list item: not a section */
  h = (rag_markdown_heading *)rag_grow(p->h, &p->cap, p->n + 1, sizeof *h);
  if (h == NULL) return RAG_ENOMEM;
  p->h = h;
  h += p->n++;
  h->start = start;
  h->stop = stop;
  h->text_start = ts;
  h->text_stop = te;
  h->level = level;
  h->setext = setext;
  return RAG_OK;
}

/* Opens a block quote (width 0) or list item in the innermost container. */
static int open_box(scan *p, size_t width, int empty) {
  box *b = (box *)rag_grow(p->box, &p->boxcap, p->depth + 1, sizeof *b);
  if (b == NULL) return RAG_ENOMEM;
  p->box = b;
  b += p->depth;
  b->width = width;
  b->nq = (p->depth > 0 ? b[-1].nq : 0) + (width == 0);
  b->empty = empty;
  p->depth++;
  p->para = P_NONE;
  return RAG_OK;
}

/*
** How many boxes a line with nothing more after the first m stays in:
** list items go on over blank lines, but not an empty one, nor a block
** quote. A binary search, so that blank lines in deep nests cost little.
*/
static size_t blank_depth(const scan *p, size_t m) {
  size_t lo = m, hi = p->depth, before = m > 0 ? p->box[m - 1].nq : 0, mid;
  while (lo < hi) {
    mid = lo + (hi - lo) / 2;
    if (p->box[mid].nq > before)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo == p->depth && lo > m && p->box[lo - 1].empty ? lo - 1 : lo;
}

/* Adds the text s[from, end) of a line to the open paragraph. */
static int add_line(scan *p, size_t from, size_t end) {
  seg *g;
  p->para_end = trim_end(p->s, from, end);
  if (p->s[p->para_text] != '[') return RAG_OK; /* no definition can open it */
  g = (seg *)rag_grow(p->seg, &p->segcap, p->nseg + 1, sizeof *g);
  if (g == NULL) return RAG_ENOMEM;
  p->seg = g;
  g += p->nseg++;
  g->from = from;
  g->end = p->para_end;
  return RAG_OK;
}

/*
** Sets *ts to where the open paragraph's text starts after the link
** reference definitions that open it, or to para_end when it holds
** nothing else. Definitions are read from a copy of the content as
** CommonMark sees it: lines without container markers, joined by "\n".
*/
static int def_end(scan *p, size_t *ts) {
  size_t total = 0, k, at = 0, r;
  unsigned char *buf;
  *ts = p->para_text;
  if (p->s[p->para_text] != '[') return RAG_OK;
  for (k = 0; k < p->nseg; k++) {
    size_t w = p->seg[k].end - p->seg[k].from + 1;
    if (total > (size_t)-1 - w) return RAG_ENOMEM;
    total += w;
  }
  if ((buf = (unsigned char *)rag_malloc(total)) == NULL) return RAG_ENOMEM;
  for (k = 0; k < p->nseg; k++) {
    const seg *g = &p->seg[k];
    memcpy(buf + at, p->s + g->from, g->end - g->from);
    at += g->end - g->from;
    buf[at++] = '\n';
  }
  r = skip_defs(buf, 0, at);
  rag_free(buf);
  *ts = p->para_end;
  for (k = 0, at = 0; k < p->nseg && at <= r; k++) { /* r starts a line, or ends all */
    if (at == r) *ts = p->seg[k].from;
    at += p->seg[k].end - p->seg[k].from + 1;
  }
  return RAG_OK;
}

/* Closes the containers past the first m, and the paragraph in them. */
static void close_boxes(scan *p, size_t m) {
  if (m < p->depth) {
    p->depth = m;
    p->para = P_NONE;
  }
}

/*
** The blocks that the rest of the line from c starts, m of the open
** containers having matched; the first block start closes the others,
** while paragraph text continues an open paragraph (lazily when m is
** short).
*/
static int blocks(scan *p, const line *l, cur c, size_t m) {
  const unsigned char *s = p->s;
  size_t end = l->end, ts, te, k, ccol;
  int lv, ch, strong, empty, rc;
  tails tb = {0, 0, {0, 0, 0}};
  cur n;
  for (;;) {
    n = nonspace(s, end, c);
    if (n.pos == end) { /* blank: no paragraph goes on */
      close_boxes(p, m);
      p->para = P_NONE;
      return RAG_OK;
    }
    if (n.col - c.col >= 4) { /* indented code, or a paragraph going on */
      if (p->para != P_NONE) return add_line(p, n.pos, end);
      close_boxes(p, m);
      return RAG_OK;
    }
    if (s[n.pos] == '>') {
      close_boxes(p, m);
      if ((rc = open_box(p, 0, 0)) != RAG_OK) return rc;
      c.pos = n.pos + 1;
      c.col = n.col + 1;
      if (c.pos < end && is_ws(s[c.pos])) c = advance(s, end, c, 1);
      m = p->depth;
      continue;
    }
    if (m == p->depth && p->para == P_OPEN && (lv = underline(s, n.pos, end)) != 0) {
      /* A paragraph of nothing but link reference definitions is no heading:
         then "---" is a break and "===" more text. */
      if ((rc = def_end(p, &ts)) != RAG_OK) return rc;
      if (ts < p->para_end) {
        p->para = P_NONE;
        return push(p, p->para_start, l->next, ts, p->para_end, lv, 1);
      }
      if (!thematic(s, n.pos, end, &tb)) return add_line(p, n.pos, end);
      p->para = P_NONE;
      return RAG_OK;
    }
    if ((lv = atx(s, n.pos, end, &ts, &te)) != 0) {
      close_boxes(p, m);
      p->para = P_NONE;
      return push(p, l->start, l->next, ts, te, lv, 0);
    }
    if (fence_opens(s, n.pos, end, &ch, &k)) {
      close_boxes(p, m);
      p->fence = ch;
      p->fence_len = k;
      p->para = P_NONE;
      return RAG_OK;
    }
    /* A lone tag (kind 7) does not interrupt a paragraph, lazy or not. */
    if ((lv = html_opens(s, n.pos, end)) != 0 && (lv < 7 || p->para == P_NONE)) {
      close_boxes(p, m);
      p->html = lv <= 5 && html_closes(s, n.pos, end, lv) ? 0 : lv;
      p->para = P_NONE;
      return RAG_OK;
    }
    if (thematic(s, n.pos, end, &tb)) {
      close_boxes(p, m);
      p->para = P_NONE;
      return RAG_OK;
    }
    /* A list item, unless it would interrupt the paragraph of its own
       container as "2." or empty: then it is more text. */
    if (marker(s, n.pos, end, n.col, &k, &ccol, &empty, &strong) &&
        (strong || m < p->depth || p->para == P_NONE)) {
      close_boxes(p, m);
      if ((rc = open_box(p, ccol - c.col, empty)) != RAG_OK) return rc;
      c.pos = k;
      c.col = n.col + (k - n.pos);
      c = advance(s, end, c, ccol - c.col);
      m = p->depth;
      continue;
    }
    if (p->para == P_NONE) {
      close_boxes(p, m);
      p->para = P_OPEN;
      p->para_start = l->start;
      p->para_text = n.pos;
      p->nseg = 0;
    }
    return add_line(p, n.pos, end);
  }
}

/*
** One line: the containers it goes on in (a '>' for a block quote, the
** content's indentation for a list item), then the open fence or HTML
** block it goes on or closes, or the blocks it starts.
*/
static int step(scan *p, const line *l) {
  const unsigned char *s = p->s;
  size_t m = 0, k;
  cur c = {l->from, 0}, n = nonspace(s, l->end, c);
  for (; m < p->depth; m++) {
    box *b = &p->box[m];
    if (c.pos > n.pos) n = nonspace(s, l->end, c); /* else n is still the next non-blank */
    if (n.pos == l->end) {
      m = blank_depth(p, m);
      break;
    }
    if (b->width == 0) {
      if (n.col - c.col > 3 || s[n.pos] != '>') break;
      c.pos = n.pos + 1;
      c.col = n.col + 1;
      if (c.pos < l->end && is_ws(s[c.pos])) c = advance(s, l->end, c, 1);
    } else {
      if (n.col - c.col < b->width) break;
      c = advance(s, l->end, c, b->width);
      b->empty = 0;
    }
  }
  if (p->fence || p->html) {
    if (m == p->depth) {
      n = nonspace(s, l->end, c);
      if (p->fence) {
        k = run(s, n.pos, l->end, (unsigned)p->fence);
        if (n.col - c.col <= 3 && k >= p->fence_len && only_ws(s, n.pos + k, l->end))
          p->fence = 0;
      } else if (p->html >= 6 ? n.pos == l->end : html_closes(s, c.pos, l->end, p->html)) {
        p->html = 0;
      }
      return RAG_OK;
    }
    p->fence = p->html = 0; /* leaving a container ends the code or HTML in it */
    p->depth = m;
  }
  return blocks(p, l, c, m);
}

/*
** Where the text after front matter starts: after the line that closes a
** "---" (or "+++") first line, when no line between is blank; else 0.
*/
static size_t front_matter(const unsigned char *s, size_t len) {
  line l;
  size_t pos;
  int c;
  read_line(s, len, 0, &l);
  c = l.at < l.end ? s[l.at] : 0;
  if ((c != '-' && c != '+') || l.col != 0 || run(s, l.at, l.end, (unsigned)c) != 3 ||
      !only_ws(s, l.at + 3, l.end))
    return 0;
  for (pos = l.next; pos < len; pos = l.next) {
    read_line(s, len, pos, &l);
    if (l.at == l.end) return 0;
    if (l.col == 0 && (run(s, l.at, l.end, (unsigned)c) == 3 ||
                       (c == '-' && run(s, l.at, l.end, '.') == 3)) &&
        only_ws(s, l.at + 3, l.end))
      return l.next;
  }
  return 0;
}

int rag_markdown_headings(const char *s, size_t len, rag_markdown_heading **out,
                          size_t *n) {
  scan p;
  line l;
  size_t pos;
  int rc = RAG_OK;
  memset(&p, 0, sizeof p);
  p.s = (const unsigned char *)s;
  *out = NULL;
  *n = 0;
  for (pos = front_matter(p.s, len); pos < len && rc == RAG_OK; pos = l.next) {
    read_line(p.s, len, pos, &l);
    rc = step(&p, &l);
  }
  rag_free(p.box);
  rag_free(p.seg);
  if (rc != RAG_OK || p.n == 0) {
    rag_free(p.h);
    return rc;
  }
  *out = p.h;
  *n = p.n;
  return RAG_OK;
}
