/*
** rag_html.c: the readable text of an HTML page (rules in rag_html.h).
** libxml2 builds the tree; one iterative walk over it (no recursion, so
** deep nesting cannot exhaust the stack) writes the text, with line breaks
** owed at block boundaries and spaces owed between words, paid only when
** the next visible character comes.
*/
#include "rag_html.h"

#include <limits.h>
#include <string.h>

#include <libxml/HTMLparser.h>
#include <libxml/tree.h>
#include <pthread.h>

#include "rag_dl.h"

/*
** libxml2 is opened on the first page parsed, not when the library loads: a
** process that reads no HTML keeps libxml2 and what it pulls in (ICU,
** libstdc++; about 1.7 MB resident) out of its memory. The table is written
** once, under pthread_once, and only read after that.
*/
static struct {
  htmlDocPtr (*read)(const char *, int, const char *, const char *, int);
  xmlNodePtr (*root)(const xmlDoc *);
  void (*free_doc)(xmlDocPtr);
  xmlChar *(*content)(const xmlNode *);
  xmlFreeFunc *xfree; /* the variable xmlFree: libxml2's free function */
  int ok;
} lx;
static pthread_once_t lx_once = PTHREAD_ONCE_INIT;

static void lx_open(void) {
  static const char *const sonames[] = {"libxml2.so.2", NULL};
  static const char *const names[5] = {"htmlReadMemory", "xmlDocGetRootElement", "xmlFreeDoc",
                                       "xmlNodeGetContent", "xmlFree"};
  void *f[5];
  if (!rag_dl_open(sonames, names, 5, f)) return;
  memcpy(&lx.read, &f[0], sizeof f[0]);
  memcpy(&lx.root, &f[1], sizeof f[1]);
  memcpy(&lx.free_doc, &f[2], sizeof f[2]);
  memcpy(&lx.content, &f[3], sizeof f[3]);
  lx.xfree = (xmlFreeFunc *)f[4]; /* a variable: an object pointer */
  lx.ok = 1;
}

/* {====== Element classes ======} */

enum { BLOCK_NONE, BLOCK_LINE, BLOCK_PARA, BLOCK_CELL };

static int is_name(const xmlNode *n, const char *name) {
  return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

static int in_list(const char *name, const char *const *list) {
  for (; *list != NULL; list++)
    if (strcmp(name, *list) == 0) return 1;
  return 0;
}

static int block_kind(const char *name) {
  static const char *const para[] = {
      "p",       "h1",      "h2",     "h3",  "h4",     "h5",      "h6",       "pre",
      "ul",      "ol",      "dl",     "table", "figure", "section", "article", "main",
      "hr",      "header",  "footer", "details", "address", "fieldset", "blockquote", NULL};
  static const char *const line[] = {"div",     "li",         "tr",     "dt",
                                     "dd",      "br",         "caption", "figcaption",
                                     "summary", "legend",     "option", "tbody",
                                     "thead",   "tfoot",      "body",   NULL};
  if (in_list(name, para)) return BLOCK_PARA;
  if (in_list(name, line)) return BLOCK_LINE;
  if (strcmp(name, "td") == 0 || strcmp(name, "th") == 0) return BLOCK_CELL;
  return BLOCK_NONE;
}

static int heading_level(const char *name) {
  return name[0] == 'h' && name[1] >= '1' && name[1] <= '6' && name[2] == '\0' ? name[1] - '0' : 0;
}

/* The value of attribute `name` (borrowed from the tree), NULL when absent. */
static const char *attr(const xmlNode *n, const char *name) {
  const xmlAttr *a;
  for (a = n->properties; a != NULL; a = a->next)
    if (strcmp((const char *)a->name, name) == 0)
      return a->children != NULL && a->children->content != NULL
                 ? (const char *)a->children->content
                 : "";
  return NULL;
}

/* Whether an inline style hides the element: display:none or visibility:hidden. */
static int style_hides(const char *style) {
  char t[256];
  size_t n = 0;
  for (; *style != '\0' && n + 1 < sizeof t; style++) {
    unsigned char c = (unsigned char)*style;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    t[n++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
  }
  t[n] = '\0';
  return strstr(t, "display:none") != NULL || strstr(t, "visibility:hidden") != NULL;
}

static int is_main(const xmlNode *n) {
  const char *role;
  if (n->type != XML_ELEMENT_NODE) return 0;
  if (is_name(n, "main")) return 1;
  role = attr(n, "role");
  return role != NULL && strcmp(role, "main") == 0;
}

/* {====== The walk ======} */

typedef struct walk {
  char *p;                /* the text so far */
  size_t len, cap;        /* its length and capacity */
  int rc;                 /* sticky status */
  int nl;                 /* line breaks owed: 0, 1 or 2 */
  int space;              /* a space is owed */
  int pre;                /* depth inside <pre> */
  int insec;              /* depth inside article or main */
  int only_articles;      /* emit only inside <article> */
  int inart;              /* depth inside <article> */
  rag_html_heading *h;    /* headings found */
  size_t nh, caph;        /* their count and capacity */
  int hlevel;             /* the open heading's level, 0 when none */
  size_t hstart;          /* its first byte, SIZE_MAX until one is written */
} walk;

static void put(walk *w, const char *s, size_t n) {
  if (w->rc != RAG_OK) return;
  if (n > SIZE_MAX - 1 - w->len) {
    w->rc = RAG_ETOOBIG;
    return;
  }
  if (w->len + n + 1 > w->cap) {
    size_t cap = w->cap < 256 ? 256 : w->cap;
    char *p;
    while (cap < w->len + n + 1) cap = cap > SIZE_MAX / 2 ? w->len + n + 1 : cap * 2;
    if ((p = rag_realloc(w->p, cap)) == NULL) {
      w->rc = RAG_ENOMEM;
      return;
    }
    w->p = p;
    w->cap = cap;
  }
  memcpy(w->p + w->len, s, n);
  w->len += n;
  w->p[w->len] = '\0';
}

/* Pays what is owed before a visible character. */
static void pay(walk *w) {
  if (w->len == 0) {
    w->nl = w->space = 0;
  } else if (w->nl > 0) {
    int have = 0;
    while (have < 2 && (size_t)have < w->len && w->p[w->len - 1 - have] == '\n') have++;
    if (w->nl > have) put(w, "\n\n", (size_t)(w->nl - have));
    w->nl = w->space = 0;
  } else if (w->space) {
    if (w->p[w->len - 1] != ' ' && w->p[w->len - 1] != '\n') put(w, " ", 1);
    w->space = 0;
  }
  if (w->hlevel > 0 && w->hstart == SIZE_MAX) w->hstart = w->len;
}

static void owe_break(walk *w, int n) {
  if (w->nl < n) w->nl = n;
}

static void add_text(walk *w, const char *t) {
  size_t i = 0, run;
  if (t == NULL || (w->only_articles && w->inart == 0)) return;
  while (t[i] != '\0' && w->rc == RAG_OK) {
    unsigned char c = (unsigned char)t[i];
    if ((w->pre == 0 || w->len == 0) &&
        (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f')) {
      w->space = 1;
      i++;
      continue;
    }
    pay(w);
    for (run = i + 1; t[run] != '\0'; run++) {
      c = (unsigned char)t[run];
      if (w->pre == 0 && (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f')) break;
    }
    put(w, t + i, run - i);
    i = run;
  }
}

static void end_heading(walk *w) {
  size_t stop = w->len;
  if (w->hlevel == 0) return;
  if (w->hstart != SIZE_MAX && stop > w->hstart && w->rc == RAG_OK) {
    if (w->nh == w->caph) {
      size_t cap = w->caph ? w->caph * 2 : 8;
      rag_html_heading *h = cap > SIZE_MAX / sizeof *h ? NULL : rag_realloc(w->h, cap * sizeof *h);
      if (h == NULL) {
        w->rc = RAG_ENOMEM;
        return;
      }
      w->h = h;
      w->caph = cap;
    }
    w->h[w->nh].start = w->hstart;
    w->h[w->nh].stop = stop;
    w->h[w->nh++].level = w->hlevel;
  }
  w->hlevel = 0;
}

static int dropped(const walk *w, const xmlNode *n) {
  static const char *const drop[] = {
      "head",   "script", "style",  "noscript", "template", "nav",    "aside",    "form",
      "iframe", "svg",    "canvas", "object",   "embed",    "button", "select", "textarea",
      "dialog", "math",   NULL};
  const char *name = (const char *)n->name, *v;
  if (in_list(name, drop)) return 1;
  if (w->insec == 0 && (strcmp(name, "header") == 0 || strcmp(name, "footer") == 0)) return 1;
  if (attr(n, "hidden") != NULL) return 1;
  if ((v = attr(n, "aria-hidden")) != NULL && strcmp(v, "true") == 0) return 1;
  return (v = attr(n, "style")) != NULL && style_hides(v);
}

static void enter(walk *w, const xmlNode *n) {
  const char *name = (const char *)n->name;
  int kind = block_kind(name), level = heading_level(name);
  if (kind == BLOCK_PARA) owe_break(w, 2);
  if (kind == BLOCK_LINE) owe_break(w, 1);
  if (kind == BLOCK_CELL) w->space = 1;
  if (level > 0) {
    end_heading(w); /* a heading inside a heading: the outer one ends here */
    w->hlevel = level;
    w->hstart = SIZE_MAX;
  }
  if (strcmp(name, "pre") == 0) w->pre++;
  if (strcmp(name, "article") == 0) w->inart++;
  if (strcmp(name, "article") == 0 || is_main(n)) w->insec++;
}

static void leave(walk *w, const xmlNode *n) {
  const char *name = (const char *)n->name;
  int kind = block_kind(name);
  if (heading_level(name) > 0) end_heading(w);
  if (strcmp(name, "pre") == 0 && w->pre > 0) w->pre--;
  if (strcmp(name, "article") == 0 && w->inart > 0) w->inart--;
  if ((strcmp(name, "article") == 0 || is_main(n)) && w->insec > 0) w->insec--;
  if (kind == BLOCK_PARA) owe_break(w, 2);
  if (kind == BLOCK_LINE) owe_break(w, 1);
}

/* Writes the text under root (its children, not root itself). */
static void walk_tree(walk *w, xmlNode *root) {
  xmlNode *n = root->children;
  while (n != NULL && w->rc == RAG_OK) {
    int down = 0;
    if (n->type == XML_TEXT_NODE || n->type == XML_CDATA_SECTION_NODE) {
      add_text(w, (const char *)n->content);
    } else if (n->type == XML_ELEMENT_NODE && !dropped(w, n)) {
      enter(w, n);
      if (n->children != NULL)
        down = 1;
      else
        leave(w, n);
    }
    if (down) {
      n = n->children;
      continue;
    }
    while (n->next == NULL) {
      n = n->parent;
      if (n == NULL || n == root) return;
      leave(w, n);
    }
    n = n->next;
  }
}

/* The first element under root, in document order, for which pred holds. */
static xmlNode *find(xmlNode *root, int (*pred)(const xmlNode *)) {
  xmlNode *n = root;
  while (n != NULL) {
    if (n->type == XML_ELEMENT_NODE && pred(n)) return n;
    if (n->children != NULL && n->type == XML_ELEMENT_NODE) {
      n = n->children;
      continue;
    }
    while (n != NULL && n != root && n->next == NULL) n = n->parent;
    if (n == NULL || n == root) return NULL;
    n = n->next;
  }
  return NULL;
}

static int is_article(const xmlNode *n) {
  return is_name(n, "article");
}

static int is_title(const xmlNode *n) {
  return is_name(n, "title");
}

/* Drops white space that <pre> left at the end; headings end by the text's end. */
static void trim_end(walk *w) {
  size_t i;
  if (w->p == NULL) return;
  while (w->len > 0 && (w->p[w->len - 1] == ' ' || w->p[w->len - 1] == '\t' ||
                        w->p[w->len - 1] == '\n' || w->p[w->len - 1] == '\r' ||
                        w->p[w->len - 1] == '\f'))
    w->len--;
  w->p[w->len] = '\0';
  while (w->nh > 0 && w->h[w->nh - 1].start >= w->len) w->nh--;
  for (i = 0; i < w->nh; i++)
    if (w->h[i].stop > w->len) w->h[i].stop = w->len;
  if (w->nh == 0) {
    rag_free(w->h);
    w->h = NULL;
    w->caph = 0;
  }
}

static void reset(walk *w) {
  rag_free(w->h);
  w->h = NULL;
  w->nh = w->caph = 0;
  w->len = 0;
  if (w->p != NULL) w->p[0] = '\0';
  w->nl = w->space = w->pre = w->insec = w->only_articles = w->inart = w->hlevel = 0;
}

/* {====== Title and entry points ======} */

/* A copy of s with white space folded and trimmed; *n its length. */
static int fold(const char *s, size_t len, char **out, size_t *n) {
  char *t = rag_malloc(len + 1);
  size_t i, k = 0;
  int space = 0;
  if (t == NULL) return RAG_ENOMEM;
  for (i = 0; i < len; i++) {
    char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
      space = k > 0;
      continue;
    }
    if (space) t[k++] = ' ';
    space = 0;
    t[k++] = c;
  }
  t[k] = '\0';
  *out = t;
  *n = k;
  return RAG_OK;
}

static int take_title(xmlNode *root, walk *w, rag_html *out) {
  xmlNode *t = find(root, is_title);
  int rc = RAG_OK;
  if (t != NULL) {
    xmlChar *s = lx.content(t);
    if (s != NULL) rc = fold((const char *)s, strlen((const char *)s), &out->title, &out->titlelen);
    (*lx.xfree)(s);
    if (rc != RAG_OK || out->titlelen > 0) return rc;
    rag_free(out->title);
    out->title = NULL;
  }
  for (size_t i = 0; i < w->nh; i++) {
    if (w->h[i].level != 1) continue;
    rc = fold(w->p + w->h[i].start, w->h[i].stop - w->h[i].start, &out->title, &out->titlelen);
    if (rc != RAG_OK || out->titlelen > 0) return rc;
    rag_free(out->title); /* a heading of white space only (in <pre>) */
    out->title = NULL;
  }
  return RAG_OK;
}

int rag_html_extract(const char *s, size_t len, rag_html *out) {
  walk w;
  htmlDocPtr doc;
  xmlNode *root, *main;
  int rc;
  memset(out, 0, sizeof *out);
  if (len > (size_t)INT_MAX) return RAG_ETOOBIG;
  (void)pthread_once(&lx_once, lx_open);
  if (!lx.ok) return RAG_EIO;
  doc = lx.read(len ? s : "", (int)len, NULL, "UTF-8",
                       HTML_PARSE_RECOVER | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING |
                           HTML_PARSE_NONET | HTML_PARSE_COMPACT);
  memset(&w, 0, sizeof w);
  if (doc == NULL) { /* libxml2 makes no document of blank input: an empty text */
    size_t i;
    for (i = 0; i < len; i++)
      if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' && s[i] != '\f')
        return RAG_EFORMAT;
    put(&w, "", 0);
    if (w.rc != RAG_OK) return w.rc;
    out->text = w.p;
    return RAG_OK;
  }
  put(&w, "", 0);
  root = lx.root(doc);
  if (root != NULL) {
    if ((main = find(root, is_main)) != NULL && dropped(&w, main)) main = NULL;
    if (main != NULL) {
      w.insec = 1;
      walk_tree(&w, main);
    } else if (find(root, is_article) != NULL) {
      w.only_articles = 1;
      walk_tree(&w, root);
    }
    if (w.rc == RAG_OK && w.len == 0) {
      reset(&w);
      walk_tree(&w, root);
    }
  }
  end_heading(&w);
  trim_end(&w);
  rc = w.rc == RAG_OK ? (root != NULL ? take_title(root, &w, out) : RAG_OK) : w.rc;
  lx.free_doc(doc);
  if (rc != RAG_OK) {
    rag_free(w.p);
    rag_free(w.h);
    rag_free(out->title);
    memset(out, 0, sizeof *out);
    return rc;
  }
  out->text = w.p;
  out->len = w.len;
  out->headings = w.h;
  out->nheadings = w.nh;
  return RAG_OK;
}

void rag_html_free(rag_html *h) {
  if (h == NULL) return;
  rag_free(h->text);
  rag_free(h->title);
  rag_free(h->headings);
  memset(h, 0, sizeof *h);
}
