/*
** lrag_chunk.c: rag.chunk.*, the chunkers of rag_chunk.c. Each checks its
** options, picks a measure (code points, the approx estimator or an exact
** tokenizer), runs the core and turns the spans into chunk tables
** { text=, start=, stop=, tokens=, index=, overlap= [, meta=] } with 1-based
** inclusive byte offsets.
*/
#include "lrag.h"

#include <math.h>
#include <string.h>

#include "rag.h"
#include "rag_chunk.h"
#include "rag_markdown.h"
#include "rag_sentences.h"

/* {====== Options ======} */

static const char *const unit_names[] = {"token", "char", NULL};

/*
** One chunker call: the text, the options (at stack slot `opts`) as the
** core takes them, the unit (0 token, 1 char), the slot of the tokenizer
** (kept on the stack so it lives as long as the call) and the list the
** core fills.
*/
typedef struct call {
  const char *fname, *s;
  size_t len, errpos;
  int unit, tok, opts;
  rag_chunk_opts o;
  rag_chunk_measure m;
  rag_chunk_list *l;
} call;

/* Frees what a box holds: separators, headings, spans, vectors. */
static void mem_fin(void *p) {
  rag_free(p);
}

static void list_fin(void *p) {
  rag_chunk_list *l = (rag_chunk_list *)p;
  rag_free(l->v);
  l->v = NULL;
}

/* The text argument at 1: a string, never a number turned into one. */
static void text_arg(lua_State *L, call *c, const char *fname) {
  if (lua_type(L, 1) != LUA_TSTRING)
    luaL_error(L, "%s: text must be a string, got %s", fname, luaL_typename(L, 1));
  c->s = lua_tolstring(L, 1, &c->len);
}

/*
** Starts reading the options at `opts`: their keys, the measure from
** opts.unit (`unit` when absent) and opts.tokenizer.
*/
static void begin(lua_State *L, call *c, const char *fname, int opts, const char *const keys[],
                  int unit) {
  struct rag_tokenizer *t;
  c->fname = fname;
  c->opts = opts;
  c->errpos = 0;
  lrag_checkopts(L, opts, fname, keys);
  rag_chunk_defaults(&c->o);
  c->unit = lrag_optenum(L, opts, fname, "unit", unit, unit_names);
  t = lrag_opttokenizer(L, opts, fname);
  c->tok = lua_gettop(L);
  if (c->unit == 1 && !lua_isnil(L, c->tok))
    luaL_error(L, "%s: option 'tokenizer' needs unit \"token\"", fname);
  if (c->unit == 1) rag_chunk_measure_chars(&c->m);
  else if (t == NULL) rag_chunk_measure_approx(&c->m);
  else rag_chunk_measure_bpe(&c->m, t);
}

/* An empty chunk list for the call, in a box that frees its array. */
static void new_list(lua_State *L, call *c) {
  c->l = (rag_chunk_list *)lrag_box_embed(L, sizeof(rag_chunk_list), list_fin);
}

/* A size in the chosen unit: one character is at most 4 tokens, so token
** sizes start there and every character fits. */
static size_t opt_size(lua_State *L, const call *c, const char *key, size_t def) {
  return (size_t)lrag_optinteger(L, c->opts, c->fname, key, (lua_Integer)def, c->unit == 0 ? 4 : 1,
                                 LRAG_MAXINT);
}

/* opts[limit] (the size) and opts.overlap, which must stay below the size
** when `below` (it counts sentences, not the unit, otherwise). */
static void read_size(lua_State *L, call *c, const char *limit, int below) {
  c->o.size = opt_size(L, c, limit, 512);
  c->o.overlap = (size_t)lrag_optinteger(L, c->opts, c->fname, "overlap", 0, 0, LRAG_MAXINT);
  if (below && c->o.overlap >= c->o.size)
    luaL_error(L, "%s: option 'overlap' must be less than 'size'", c->fname);
}

/* opts.keep_separator: true, false, "start" or "end". */
static rag_chunk_keep opt_keep(lua_State *L, const call *c, rag_chunk_keep def) {
  const char *s;
  if (!lua_istable(L, c->opts)) return def;
  lua_getfield(L, c->opts, "keep_separator");
  s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
  if (lua_isboolean(L, -1)) def = lua_toboolean(L, -1) ? RAG_KEEP_START : RAG_KEEP_NONE;
  else if (strcmp(s, "start") == 0) def = RAG_KEEP_START;
  else if (strcmp(s, "end") == 0) def = RAG_KEEP_END;
  else if (!lua_isnil(L, -1))
    luaL_error(L, "%s: option 'keep_separator' must be true, false, \"start\" or \"end\"",
               c->fname);
  lua_pop(L, 1);
  return def;
}

/*
** opts.separators (a list of strings, "" for characters; the strings stay
** referenced by the options table), keep_separator and trim into c->o.
*/
static void read_rules(lua_State *L, call *c) {
  lrag_box *box;
  size_t n, i;
  rag_chunk_sep *seps;
  c->o.keep = opt_keep(L, c, c->o.keep);
  c->o.trim = lrag_optboolean(L, c->opts, c->fname, "trim", c->o.trim);
  if (!lrag_opttable(L, c->opts, c->fname, "separators")) return;
  n = (size_t)lua_rawlen(L, -1);
  if (n == 0 || n > 64)
    luaL_error(L, "%s: option 'separators' must have 1 to 64 entries", c->fname);
  box = lrag_box_new(L, mem_fin); /* stays on the stack for the call */
  if ((seps = (rag_chunk_sep *)rag_malloc(n * sizeof *seps)) == NULL)
    lrag_error(L, RAG_ENOMEM, c->fname, NULL);
  box->p = seps;
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, -2, (lua_Integer)i + 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: separators[%d] must be a string", c->fname, (int)i + 1);
    seps[i].text = lua_tolstring(L, -1, &seps[i].len);
    seps[i].kind = seps[i].len == 0 ? RAG_SEP_CHAR : RAG_SEP_TEXT;
    lua_pop(L, 1);
  }
  c->o.seps = seps;
  c->o.nseps = n;
  lua_remove(L, -2); /* the list; the options table keeps its strings */
}

/* {====== Results ======} */

static void set_int(lua_State *L, const char *key, size_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, key);
}

/* Pushes the chunk table for l->v[i]; leaves a meta table on top when
** with_meta, else nothing more. */
static void push_chunk(lua_State *L, const char *s, const rag_chunk *c,
                       size_t i, int with_meta) {
  lua_createtable(L, 0, 7);
  lua_pushlstring(L, s + c->start, c->stop - c->start);
  lua_setfield(L, -2, "text");
  set_int(L, "start", c->start + 1);
  set_int(L, "stop", c->stop);
  set_int(L, "tokens", c->size);
  set_int(L, "index", i + 1);
  set_int(L, "overlap", c->overlap);
  if (with_meta) {
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "meta");
  }
}

/* Fills the meta table of chunk c (on top); ud is the chunker's own. */
typedef void (*meta_fn)(lua_State *L, const char *s, const rag_chunk *c, void *ud);

/* Pushes the list of chunks of c, or the failure behind the core's rc. */
static int finish(lua_State *L, const call *c, int rc, meta_fn meta, void *ud) {
  size_t i;
  if (rc != RAG_OK)
    return lrag_texterror(L, rc, c->fname, c->errpos);
  if (c->l->n > 0x7fffffff) return luaL_error(L, "%s: too many chunks", c->fname);
  lua_createtable(L, (int)c->l->n, 0);
  for (i = 0; i < c->l->n; i++) {
    push_chunk(L, c->s, &c->l->v[i], i, meta != NULL);
    if (meta != NULL) {
      meta(L, c->s, &c->l->v[i], ud);
      lua_pop(L, 1);
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* {====== Chunkers ======} */

/* The chunkers that run in C alone (semantic calls embed: not among them). */
enum { K_FIXED, K_RECURSIVE, K_SENTENCES, K_WINDOW, K_MARKDOWN, K_HIERARCHY };

static const char *const kind_names[] = {"rag.chunk.fixed",     "rag.chunk.recursive",
                                         "rag.chunk.sentences", "rag.chunk.window",
                                         "rag.chunk.markdown",  "rag.chunk.hierarchy"};

/* A chunker's options, read once for one text or many. */
struct lrag_chunker {
  call c;
  int kind;
  size_t window;     /* K_WINDOW */
  size_t sizes[16];  /* K_HIERARCHY, largest first */
  size_t nsizes;
  rag_chunk_list list; /* the chunks of the last run from C */
};

static const char *const preset_names[] = {"langchain", NULL};
static const rag_chunk_sep langchain_seps[] = {{RAG_SEP_TEXT, "\n\n", 2},
                                               {RAG_SEP_TEXT, "\n", 1},
                                               {RAG_SEP_TEXT, " ", 1},
                                               {RAG_SEP_CHAR, NULL, 0}};

/* opts.sizes into sizes (at most 16, largest first); their count. */
static size_t read_sizes(lua_State *L, const call *c, size_t sizes[16]) {
  size_t n, i;
  if (!lrag_opttable(L, c->opts, c->fname, "sizes")) return 3; /* the defaults */
  n = (size_t)lua_rawlen(L, -1);
  if (n == 0 || n > 16)
    luaL_error(L, "%s: option 'sizes' must be a list of 1 to 16 sizes", c->fname);
  for (i = 0; i < n; i++) {
    lua_Number v;
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    v = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
    if (!(v >= (c->unit == 0 ? 4 : 1) && v <= LRAG_MAXINT && v == floor(v)) ||
        (i > 0 && (size_t)v > sizes[i - 1]))
      luaL_error(L, "%s: sizes[%d] must be an integer >= %d and at most the size before it",
                 c->fname, (int)i + 1, c->unit == 0 ? 4 : 1);
    sizes[i] = (size_t)v;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

/*
** Reads the options at `opts` of the chunker `kind` into k, raising as the
** chunker does; leaves on the stack what k borrows (tokenizer, separators).
*/
static void setup(lua_State *L, lrag_chunker *k, int kind, int opts) {
  static const char *const plain[] = {"size", "overlap", "unit", "tokenizer", NULL};
  static const char *const window[] = {"size", "window", "unit", "tokenizer", NULL};
  static const char *const rules[] = {"size",       "overlap",        "unit", "tokenizer",
                                      "separators", "keep_separator", "trim", NULL};
  static const char *const recursive[] = {"size",       "overlap",        "unit", "tokenizer",
                                          "separators", "keep_separator", "trim", "preset",
                                          NULL};
  static const char *const hierarchy[] = {"sizes",      "overlap",        "unit", "tokenizer",
                                          "separators", "keep_separator", "trim", NULL};
  call *c = &k->c;
  const char *fname = kind_names[kind];
  int preset;
  k->kind = kind;
  switch (kind) {
    case K_FIXED:
      begin(L, c, fname, opts, plain, 0);
      read_size(L, c, "size", 1);
      break;
    case K_RECURSIVE:
      /* LangChain's RecursiveCharacterTextSplitter: characters by default,
      ** its separators, its rule for pieces of exactly size */
      preset = lrag_optenum(L, opts, fname, "preset", -1, preset_names);
      begin(L, c, fname, opts, recursive, preset == 0 ? 1 : 0);
      read_size(L, c, "size", 1);
      if (preset == 0) {
        c->o.langchain = 1;
        c->o.seps = langchain_seps;
        c->o.nseps = sizeof langchain_seps / sizeof langchain_seps[0];
      }
      read_rules(L, c);
      break;
    case K_SENTENCES:
      begin(L, c, fname, opts, plain, 0);
      read_size(L, c, "size", 0); /* overlap counts sentences */
      break;
    case K_WINDOW:
      begin(L, c, fname, opts, window, 0);
      read_size(L, c, "size", 0);
      k->window = (size_t)lrag_optinteger(L, opts, fname, "window", 3, 0, LRAG_MAXINT);
      break;
    case K_MARKDOWN:
      begin(L, c, fname, opts, rules, 0);
      read_size(L, c, "size", 1);
      read_rules(L, c);
      break;
    default:
      begin(L, c, fname, opts, hierarchy, 0);
      c->o.overlap = (size_t)lrag_optinteger(L, opts, fname, "overlap", 0, 0, LRAG_MAXINT);
      k->sizes[0] = 2048, k->sizes[1] = 512, k->sizes[2] = 128;
      k->nsizes = read_sizes(L, c, k->sizes);
      if (c->o.overlap >= k->sizes[k->nsizes - 1])
        luaL_error(L, "%s: option 'overlap' must be less than the smallest size", fname);
      read_rules(L, c);
  }
}

/* Runs the core on c->s into c->l; markdown's headings into *h (released by the caller). */
static int run(lrag_chunker *k, rag_markdown_heading **h, size_t *nh) {
  call *c = &k->c;
  switch (k->kind) {
    case K_FIXED: return rag_chunk_fixed(c->s, c->len, &c->o, &c->m, c->l, &c->errpos);
    case K_RECURSIVE: return rag_chunk_recursive(c->s, c->len, &c->o, &c->m, c->l, &c->errpos);
    case K_SENTENCES: return rag_chunk_sentences(c->s, c->len, &c->o, &c->m, c->l, &c->errpos);
    case K_WINDOW:
      return rag_chunk_window(c->s, c->len, &c->o, k->window, &c->m, c->l, &c->errpos);
    case K_MARKDOWN:
      return rag_chunk_markdown(c->s, c->len, &c->o, &c->m, c->l, h, nh, &c->errpos);
    default:
      return rag_chunk_hierarchy(c->s, c->len, &c->o, k->sizes, k->nsizes, &c->m, c->l,
                                 &c->errpos);
  }
}

static void window_meta(lua_State *L, const char *s, const rag_chunk *c, void *ud) {
  (void)s;
  (void)ud;
  lua_createtable(L, 0, 2);
  set_int(L, "start", c->wstart + 1);
  set_int(L, "stop", c->wstop);
  lua_setfield(L, -2, "window");
}

static void hierarchy_meta(lua_State *L, const char *s, const rag_chunk *c, void *ud) {
  (void)s;
  (void)ud;
  set_int(L, "level", c->level);
  if (c->parent > 0) set_int(L, "parent", c->parent);
}

/* A chunker without headings: rag.chunk.<kind>(text, opts). */
static int chunk_call(lua_State *L, int kind, meta_fn meta) {
  lrag_chunker k;
  text_arg(L, &k.c, kind_names[kind]);
  setup(L, &k, kind, 2);
  new_list(L, &k.c);
  return finish(L, &k.c, run(&k, NULL, NULL), meta, NULL);
}

static int chunk_fixed(lua_State *L) {
  return chunk_call(L, K_FIXED, NULL);
}

static int chunk_recursive(lua_State *L) {
  return chunk_call(L, K_RECURSIVE, NULL);
}

static int chunk_sentences(lua_State *L) {
  return chunk_call(L, K_SENTENCES, NULL);
}

static int chunk_window(lua_State *L) {
  return chunk_call(L, K_WINDOW, window_meta);
}

static int chunk_hierarchy(lua_State *L) {
  return chunk_call(L, K_HIERARCHY, hierarchy_meta);
}

/* The heading paths of a Markdown text: the table at `paths` whose entry k
** is the list of heading texts from the top level down to heading k. */
static void markdown_meta(lua_State *L, const char *s, const rag_chunk *c, void *ud) {
  int paths = *(const int *)ud;
  size_t n, i;
  (void)s;
  lua_rawgeti(L, paths, (lua_Integer)c->section);
  n = lua_isnil(L, -1) ? 0 : (size_t)lua_rawlen(L, -1);
  lua_createtable(L, (int)n, 0); /* a copy per chunk: callers may edit theirs */
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, -2, (lua_Integer)i);
    lua_rawseti(L, -2, (lua_Integer)i);
  }
  lua_setfield(L, -3, "headings");
  lua_pop(L, 1);
}

/* Pushes the paths table for the nh headings h of text s; returns its slot. */
static int push_paths(lua_State *L, const char *s, const rag_markdown_heading *h, size_t nh) {
  int paths, stack[7] = {0}; /* the open heading of each level, 1-based */
  size_t k;
  lua_createtable(L, (int)(nh > 0x7fffffff ? 0 : nh), 0);
  paths = lua_gettop(L);
  for (k = 0; k < nh; k++) { /* the texts of the open headings of lower levels, then k's */
    int lv = h[k].level < 1 ? 1 : h[k].level > 6 ? 6 : h[k].level, j, n = 0;
    stack[lv] = (int)k + 1;
    for (j = lv + 1; j <= 6; j++) stack[j] = 0;
    lua_createtable(L, lv, 0);
    for (j = 1; j <= lv; j++) {
      if (stack[j] == 0) continue;
      lua_pushlstring(L, s + h[stack[j] - 1].text_start,
                      h[stack[j] - 1].text_stop - h[stack[j] - 1].text_start);
      lua_rawseti(L, -2, ++n);
    }
    lua_rawseti(L, paths, (lua_Integer)k + 1);
  }
  return paths;
}

static int chunk_markdown(lua_State *L) {
  size_t nh = 0;
  rag_markdown_heading *h = NULL;
  lrag_box *hbox;
  int rc, paths;
  lrag_chunker k;
  text_arg(L, &k.c, kind_names[K_MARKDOWN]);
  setup(L, &k, K_MARKDOWN, 2);
  new_list(L, &k.c);
  hbox = lrag_box_new(L, mem_fin);
  rc = run(&k, &h, &nh);
  hbox->p = h;
  if (rc != RAG_OK) return finish(L, &k.c, rc, NULL, NULL);
  paths = push_paths(L, k.c.s, h, nh);
  return finish(L, &k.c, rc, markdown_meta, &paths);
}

/*
** rag.core.chunk.headings(text): the Markdown headings of rag.chunk.markdown,
** for rag.load.markdown: { { start=, stop=, level=, text=, setext= }, ... }
** with start..stop the heading's lines (1-based, inclusive).
*/
static int chunk_headings(lua_State *L) {
  size_t len, nh = 0, k;
  const char *s;
  rag_markdown_heading *h = NULL;
  lrag_box *box;
  int rc;
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "rag.chunk.headings: text must be a string, got %s",
                      luaL_typename(L, 1));
  s = lua_tolstring(L, 1, &len);
  box = lrag_box_new(L, mem_fin);
  rc = rag_markdown_headings(s, len, &h, &nh);
  box->p = h;
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.chunk.headings", NULL);
  lua_createtable(L, (int)(nh > 0x7fffffff ? 0 : nh), 0);
  for (k = 0; k < nh; k++) {
    lua_createtable(L, 0, 5);
    lrag_setint(L, "start", (lua_Integer)h[k].start + 1);
    lrag_setint(L, "stop", (lua_Integer)h[k].stop);
    lrag_setint(L, "level", (lua_Integer)h[k].level);
    lua_pushlstring(L, s + h[k].text_start, h[k].text_stop - h[k].text_start);
    lua_setfield(L, -2, "text");
    lua_pushboolean(L, h[k].setext);
    lua_setfield(L, -2, "setext");
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  return 1;
}

/* {====== Semantic ======} */

static const char *const break_names[] = {"percentile", "standard_deviation",
                                          "interquartile", "gradient", NULL};
static const double break_amounts[] = {95, 3, 1.5, 95};

/* Reads embed's n vectors (at the stack top) into a new boxed array; *dim
** gets their dimension. Misshapen results are misuse: they raise. */
static double *read_vectors(lua_State *L, const char *fname, size_t n,
                            size_t *dim) {
  int t = lua_gettop(L);
  size_t i, j, d = 0;
  double *v = NULL;
  lrag_box *box;
  if (!lua_istable(L, t) || (size_t)lua_rawlen(L, t) != n)
    luaL_error(L, "%s: embed must return a list of %d vectors", fname, (int)n);
  box = lrag_box_new(L, mem_fin);
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, t, (lua_Integer)i + 1);
    if (!lua_istable(L, -1))
      luaL_error(L, "%s: embed's vector %d is not a table", fname, (int)i + 1);
    if (i == 0) {
      d = (size_t)lua_rawlen(L, -1);
      if (d == 0) luaL_error(L, "%s: embed returned an empty vector", fname);
      if (RAG_MUL_OVERFLOWS(n, d * sizeof *v) ||
          (v = (double *)rag_malloc(n * d * sizeof *v)) == NULL)
        lrag_error(L, RAG_ENOMEM, fname, NULL);
      box->p = v;
    } else if ((size_t)lua_rawlen(L, -1) != d) {
      luaL_error(L, "%s: embed's vector %d has %d components, vector 1 has %d",
                 fname, (int)i + 1, (int)lua_rawlen(L, -1), (int)d);
    }
    for (j = 0; j < d; j++) {
      lua_rawgeti(L, -1, (lua_Integer)j + 1);
      if (lua_type(L, -1) != LUA_TNUMBER || !isfinite(lua_tonumber(L, -1)))
        luaL_error(
            L, "%s: embed's vector %d has a non-finite or non-number component",
            fname, (int)i + 1);
      v[i * d + j] = (double)lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  *dim = d;
  return v;
}

/* opts.amount: the threshold rule's parameter, 0 to 100 for the percentile rules. */
static double opt_amount(lua_State *L, const call *c, int rule) {
  int pct = rule == 0 || rule == 3;
  double v = lrag_optnumber(L, c->opts, c->fname, "amount", break_amounts[rule], pct ? 0 : -HUGE_VAL,
                            pct ? 100 : HUGE_VAL);
  if (!isfinite(v)) luaL_error(L, "%s: option 'amount' must be a finite number", c->fname);
  return v;
}

/* opts.embed (a function or a callable), pushed; its slot. */
static int check_embed(lua_State *L, const call *c) {
  lua_getfield(L, c->opts, "embed");
  if (lua_type(L, -1) != LUA_TFUNCTION && !luaL_getmetafield(L, -1, "__call"))
    luaL_error(L, "%s: option 'embed' must be a function", c->fname);
  if (lua_type(L, -1) != LUA_TFUNCTION) lua_pop(L, 1);
  return lua_gettop(L);
}

/*
** Embeds each of the n >= 2 sentences with `buffer` neighbours each side
** through the function at fn, then marks the breaks by the threshold rule
** into *brk (boxed on the stack). Returns 0, or 3 when embed failed with
** nil, msg, code, which are then on the stack to be returned as they are.
*/
static int embed_breaks(lua_State *L, const call *c, const rag_span *sp, size_t n, int fn,
                        size_t buffer, int rule, double amount, unsigned char **brk) {
  size_t i, dim = 0;
  double *v, *d, threshold;
  lrag_box *dbox;
  lua_pushvalue(L, fn);
  lua_createtable(L, (int)(n > 0x7fffffff ? 0 : n), 0);
  for (i = 0; i < n; i++) {
    size_t lo = i > buffer ? i - buffer : 0, hi = n - 1 - i > buffer ? i + buffer : n - 1;
    lua_pushlstring(L, c->s + sp[lo].start, sp[hi].stop - sp[lo].start);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_call(L, 1, 3);
  if (lua_isnil(L, -3)) { /* a failure of the world, passed on */
    if (lua_isnil(L, -2)) {
      lua_pushfstring(L, "%s: embed failed", c->fname);
      lua_replace(L, -3);
    }
    return 3;
  }
  lua_pop(L, 2);
  lrag_totokenizer(L, c->tok, c->fname); /* raises if embed closed it */
  v = read_vectors(L, c->fname, n, &dim);
  dbox = lrag_box_new(L, mem_fin);
  if ((d = (double *)rag_malloc((n - 1) * (3 * sizeof *d + 1))) == NULL)
    return lrag_error(L, RAG_ENOMEM, c->fname, NULL);
  dbox->p = d;
  *brk = (unsigned char *)(d + 3 * (n - 1));
  rag_chunk_distances(v, n, dim, d);
  rag_chunk_breaks(d, n - 1, (rag_chunk_break)rule, amount, d + (n - 1), *brk, &threshold);
  return 0;
}

static int chunk_semantic(lua_State *L) {
  static const char *const keys[] = {"embed",    "buffer",   "threshold", "amount",
                                     "min_size", "max_size", "unit",      "tokenizer", NULL};
  size_t n = 0, buffer, min_size;
  rag_span *sp = NULL;
  lrag_box *box;
  unsigned char *brk = NULL;
  double amount;
  int rc, rule, fn;
  call c;
  text_arg(L, &c, "rag.chunk.semantic");
  begin(L, &c, "rag.chunk.semantic", 2, keys, 0);
  if (!lua_istable(L, 2))
    luaL_error(L, "%s: opts must be a table with an embed function", c.fname);
  c.o.size = opt_size(L, &c, "max_size", 512);
  fn = check_embed(L, &c);
  buffer = (size_t)lrag_optinteger(L, 2, c.fname, "buffer", 1, 0, LRAG_MAXINT);
  rule = lrag_optenum(L, 2, c.fname, "threshold", 0, break_names);
  amount = opt_amount(L, &c, rule);
  min_size = (size_t)lrag_optinteger(L, 2, c.fname, "min_size", 0, 0, LRAG_MAXINT);
  new_list(L, &c);
  box = lrag_box_new(L, mem_fin);
  rc = rag_sentences_split(c.s, c.len, &sp, &n, &c.errpos);
  box->p = sp;
  if (rc != RAG_OK) return finish(L, &c, rc, NULL, NULL);
  if (n >= 2 && (rc = embed_breaks(L, &c, sp, n, fn, buffer, rule, amount, &brk)) != 0)
    return rc;
  rc = rag_chunk_semantic(c.s, c.len, sp, n, brk, min_size, &c.o, &c.m, c.l);
  return finish(L, &c, rc, NULL, NULL);
}

/* {====== Running from C ======} */

static void chunker_fin(void *p) {
  list_fin(&((lrag_chunker *)p)->list);
}

lrag_chunker *lrag_chunker_new(lua_State *L, int fn, int opts) {
  static const lua_CFunction fns[] = {chunk_fixed,  chunk_recursive, chunk_sentences,
                                      chunk_window, chunk_markdown,  chunk_hierarchy};
  lua_CFunction f = lua_tocfunction(L, fn);
  lrag_chunker *k;
  int kind = 0;
  opts = lua_absindex(L, opts);
  while (kind < (int)(sizeof fns / sizeof fns[0]) && fns[kind] != f) kind++;
  if (f == NULL || kind == (int)(sizeof fns / sizeof fns[0])) return NULL;
  k = (lrag_chunker *)lrag_box_embed(L, sizeof *k, chunker_fin);
  setup(L, k, kind, opts);
  k->c.l = &k->list;
  return k;
}

int lrag_chunker_run(lrag_chunker *k, const char *s, size_t len, const struct rag_chunk **chunks,
                     size_t *n, size_t *errpos) {
  rag_markdown_heading *h = NULL;
  size_t nh = 0;
  int rc;
  k->c.s = s;
  k->c.len = len;
  k->c.errpos = 0;
  k->list.n = 0;
  rc = run(k, &h, &nh);
  rag_free(h);
  *chunks = k->list.v;
  *n = rc == RAG_OK ? k->list.n : 0;
  *errpos = k->c.errpos;
  return rc;
}

const char *lrag_chunker_fname(const lrag_chunker *k) {
  return k->c.fname;
}

int lrag_chunker_tree(const lrag_chunker *k) {
  return k->kind == K_HIERARCHY;
}

static const luaL_Reg chunk_funcs[] = {
    {"fixed", chunk_fixed},         {"headings", chunk_headings},
    {"hierarchy", chunk_hierarchy},
    {"markdown", chunk_markdown},   {"recursive", chunk_recursive},
    {"semantic", chunk_semantic},   {"sentences", chunk_sentences},
    {"window", chunk_window},       {NULL, NULL},
};

int lrag_open_chunk(lua_State *L) {
  luaL_setfuncs(L, chunk_funcs, 0);
  return 0;
}
