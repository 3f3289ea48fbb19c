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

/* The integer option `key` of the table at 2, or def; raises unless it is
** an integer >= min. */
static size_t opt_int(lua_State *L, const char *fname, const char *key,
                      size_t def, size_t min) {
  lua_Number v;
  size_t r = def;
  if (!lua_istable(L, 2)) return def;
  lua_getfield(L, 2, key);
  if (!lua_isnil(L, -1)) {
    v = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
    if (!(v >= (lua_Number)min && v <= 1e15 && v == floor(v)))
      luaL_error(L, "%s: option '%s' must be an integer >= %d", fname, key,
                 (int)min);
    r = (size_t)v;
  }
  lua_pop(L, 1);
  return r;
}

static int opt_bool(lua_State *L, const char *fname, const char *key, int def) {
  int r = def;
  if (!lua_istable(L, 2)) return def;
  lua_getfield(L, 2, key);
  if (!lua_isnil(L, -1)) {
    if (!lua_isboolean(L, -1))
      luaL_error(L, "%s: option '%s' must be a boolean", fname, key);
    r = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return r;
}

/* The string option `key` as an index into names, or def. */
static int opt_enum(lua_State *L, const char *fname, const char *key,
                    const char *const names[], int def) {
  int r = def, i;
  if (!lua_istable(L, 2)) return def;
  lua_getfield(L, 2, key);
  if (!lua_isnil(L, -1)) {
    const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
    for (i = 0; names[i] != NULL && strcmp(names[i], v) != 0; i++) {
    }
    if (names[i] == NULL) {
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (i = 0; names[i] != NULL; i++) {
        luaL_addstring(&b, i ? ", " : "");
        luaL_addchar(&b, '"');
        luaL_addstring(&b, names[i]);
        luaL_addchar(&b, '"');
      }
      luaL_pushresult(&b);
      luaL_error(L, "%s: option '%s' must be one of %s", fname, key,
                 lua_tostring(L, -1));
    }
    r = i;
  }
  lua_pop(L, 1);
  return r;
}

/*
** The measure from opts.unit and opts.tokenizer. The tokenizer is pushed
** (nil when there is none) so that it lives as long as the call even if
** the options table changes. Returns the unit (0 token, 1 char).
*/
static int opt_measure(lua_State *L, const char *fname, rag_chunk_measure *m,
                       int def) {
  int unit = opt_enum(L, fname, "unit", unit_names, def);
  if (lua_istable(L, 2))
    lua_getfield(L, 2, "tokenizer");
  else
    lua_pushnil(L);
  if (unit == 1) {
    if (!lua_isnil(L, -1))
      luaL_error(L, "%s: option 'tokenizer' needs unit \"token\"", fname);
    rag_chunk_measure_chars(m);
  } else if (lua_isnil(L, -1) ||
             luaL_testudata(L, -1, "rag.tokenizer.approx")) {
    rag_chunk_measure_approx(m);
  } else {
    struct rag_tokenizer *t = lrag_totokenizer(L, -1, fname);
    if (t == NULL)
      luaL_error(L,
                 "%s: option 'tokenizer' must be a rag.tokenizer or "
                 "rag.tokenizer.approx()",
                 fname);
    rag_chunk_measure_bpe(m, t);
  }
  return unit;
}

/* A limit in the chosen unit: one character is at most 4 tokens, so token
** limits start there and every character fits. */
static size_t opt_limit(lua_State *L, const char *fname, const char *key,
                        size_t def, int unit) {
  return opt_int(L, fname, key, def, unit == 0 ? 4 : 1);
}

static void sep_fin(void *p) {
  rag_free(p);
}

/*
** opts.separators (a list of strings, "" for characters; the strings stay
** referenced by the options table at 2), keep_separator and trim into o.
*/
static void opt_rules(lua_State *L, const char *fname, rag_chunk_opts *o) {
  lrag_box *box;
  size_t n, i;
  rag_chunk_sep *seps;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "keep_separator");
    if (lua_isboolean(L, -1))
      o->keep = lua_toboolean(L, -1) ? RAG_KEEP_START : RAG_KEEP_NONE;
    else if (lua_type(L, -1) == LUA_TSTRING &&
             strcmp(lua_tostring(L, -1), "start") == 0)
      o->keep = RAG_KEEP_START;
    else if (lua_type(L, -1) == LUA_TSTRING &&
             strcmp(lua_tostring(L, -1), "end") == 0)
      o->keep = RAG_KEEP_END;
    else if (!lua_isnil(L, -1))
      luaL_error(L,
                 "%s: option 'keep_separator' must be true, false, \"start\" "
                 "or \"end\"",
                 fname);
    lua_pop(L, 1);
  }
  o->trim = opt_bool(L, fname, "trim", o->trim);
  if (!lua_istable(L, 2)) return;
  lua_getfield(L, 2, "separators");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  if (!lua_istable(L, -1))
    luaL_error(L, "%s: option 'separators' must be a list of strings", fname);
  n = (size_t)lua_rawlen(L, -1);
  if (n == 0 || n > 64)
    luaL_error(L, "%s: option 'separators' must have 1 to 64 entries", fname);
  box = lrag_box_new(L, sep_fin); /* stays on the stack for the call */
  if ((seps = (rag_chunk_sep *)rag_malloc(n * sizeof *seps)) == NULL)
    luaL_error(L, "%s: not enough memory", fname);
  box->p = seps;
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, -2, (lua_Integer)i + 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: separators[%d] must be a string", fname, (int)i + 1);
    seps[i].text = lua_tolstring(L, -1, &seps[i].len);
    seps[i].kind = seps[i].len == 0 ? RAG_SEP_CHAR : RAG_SEP_TEXT;
    lua_pop(L, 1);
  }
  o->seps = seps;
  o->nseps = n;
  lua_remove(L, -2); /* the list; the table at 2 keeps its strings */
}

/* The text at 1: a string, never a number turned into one. */
static const char *check_text(lua_State *L, const char *fname, size_t *len) {
  if (lua_type(L, 1) != LUA_TSTRING)
    luaL_error(L, "%s: text must be a string, got %s", fname,
               luaL_typename(L, 1));
  return lua_tolstring(L, 1, len);
}

/* {====== Results ======} */

static void list_fin(void *p) {
  rag_chunk_list *l = (rag_chunk_list *)p;
  rag_free(l->v);
  l->v = NULL;
}

/* A chunk list inside a box on the stack; the box frees its array. */
static rag_chunk_list *new_list(lua_State *L) {
  return (rag_chunk_list *)lrag_box_embed(L, sizeof(rag_chunk_list), list_fin);
}

/* The failure or misuse behind a core status. */
static int fail(lua_State *L, const char *fname, int rc, size_t errpos) {
  if (rc == RAG_EENCODING)
    return lrag_fail(L, "encoding", "%s: invalid utf-8 at byte %lu", fname,
                     (unsigned long)errpos);
  if (rc == RAG_ENOMEM) return luaL_error(L, "%s: not enough memory", fname);
  return luaL_error(L, "%s: %s", fname, rag_strerror(rc));
}

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

/* Pushes the list of chunks; meta(L, chunk) fills the meta table. */
static int push_list(lua_State *L, const char *s, const rag_chunk_list *l,
                     void (*meta)(lua_State *L, const char *s,
                                  const rag_chunk *c, void *ud),
                     void *ud) {
  size_t i;
  if (l->n > 0x7fffffff) return luaL_error(L, "rag.chunk: too many chunks");
  lua_createtable(L, (int)l->n, 0);
  for (i = 0; i < l->n; i++) {
    push_chunk(L, s, &l->v[i], i, meta != NULL);
    if (meta != NULL) {
      meta(L, s, &l->v[i], ud);
      lua_pop(L, 1);
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* The chunk list, or the failure behind rc. */
static int result(lua_State *L, const char *fname, const char *s,
                  const rag_chunk_list *l, int rc, size_t errpos,
                  void (*meta)(lua_State *L, const char *s, const rag_chunk *c,
                               void *ud)) {
  if (rc != RAG_OK) return fail(L, fname, rc, errpos);
  return push_list(L, s, l, meta, NULL);
}

/* {====== Chunkers ======} */

/* Reads the options in keys: size (limit), overlap and the measure, with
** `def` the unit when none is given; returns the unit. */
static int common(lua_State *L, const char *fname, const char *const keys[],
                  rag_chunk_opts *o, rag_chunk_measure *m, const char *limit,
                  int def) {
  int unit;
  lrag_checkopts(L, 2, fname, keys);
  rag_chunk_defaults(o);
  unit = opt_measure(L, fname, m, def);
  o->size = opt_limit(L, fname, limit, 512, unit);
  o->overlap = opt_int(L, fname, "overlap", 0, 0);
  return unit;
}

static void check_overlap(lua_State *L, const char *fname,
                          const rag_chunk_opts *o) {
  if (o->overlap >= o->size)
    luaL_error(L, "%s: option 'overlap' must be less than 'size'", fname);
}

static int chunk_fixed(lua_State *L) {
  static const char *const keys[] = {"size", "overlap", "unit", "tokenizer",
                                     NULL};
  const char *fname = "rag.chunk.fixed";
  size_t len, errpos = 0;
  const char *s = check_text(L, fname, &len);
  rag_chunk_opts o;
  rag_chunk_measure m;
  rag_chunk_list *l;
  int rc;
  common(L, fname, keys, &o, &m, "size", 0);
  check_overlap(L, fname, &o);
  l = new_list(L);
  rc = rag_chunk_fixed(s, len, &o, &m, l, &errpos);
  return result(L, fname, s, l, rc, errpos, NULL);
}

static const char *const preset_names[] = {"langchain", NULL};
static const rag_chunk_sep langchain_seps[] = {{RAG_SEP_TEXT, "\n\n", 2},
                                               {RAG_SEP_TEXT, "\n", 1},
                                               {RAG_SEP_TEXT, " ", 1},
                                               {RAG_SEP_CHAR, NULL, 0}};

static int chunk_recursive(lua_State *L) {
  static const char *const keys[] = {
      "size",           "overlap", "unit",   "tokenizer", "separators",
      "keep_separator", "trim",    "preset", NULL};
  const char *fname = "rag.chunk.recursive";
  size_t len, errpos = 0;
  const char *s = check_text(L, fname, &len);
  rag_chunk_opts o;
  rag_chunk_measure m;
  rag_chunk_list *l;
  int rc, preset;
  lrag_checkopts(L, 2, fname, keys);
  preset = opt_enum(L, fname, "preset", preset_names, -1);
  /* LangChain's RecursiveCharacterTextSplitter: characters by default, its
  ** separators, its rule for pieces of exactly size */
  common(L, fname, keys, &o, &m, "size", preset == 0 ? 1 : 0);
  check_overlap(L, fname, &o);
  if (preset == 0) {
    o.langchain = 1;
    o.seps = langchain_seps;
    o.nseps = sizeof langchain_seps / sizeof langchain_seps[0];
  }
  opt_rules(L, fname, &o);
  l = new_list(L);
  rc = rag_chunk_recursive(s, len, &o, &m, l, &errpos);
  return result(L, fname, s, l, rc, errpos, NULL);
}

static int chunk_sentences(lua_State *L) {
  static const char *const keys[] = {"size", "overlap", "unit", "tokenizer",
                                     NULL};
  const char *fname = "rag.chunk.sentences";
  size_t len, errpos = 0;
  const char *s = check_text(L, fname, &len);
  rag_chunk_opts o;
  rag_chunk_measure m;
  rag_chunk_list *l;
  int rc;
  common(L, fname, keys, &o, &m, "size", 0); /* overlap counts sentences */
  l = new_list(L);
  rc = rag_chunk_sentences(s, len, &o, &m, l, &errpos);
  return result(L, fname, s, l, rc, errpos, NULL);
}

static void window_meta(lua_State *L, const char *s, const rag_chunk *c,
                        void *ud) {
  (void)s;
  (void)ud;
  lua_createtable(L, 0, 2);
  set_int(L, "start", c->wstart + 1);
  set_int(L, "stop", c->wstop);
  lua_setfield(L, -2, "window");
}

static int chunk_window(lua_State *L) {
  static const char *const keys[] = {"size", "window", "unit", "tokenizer",
                                     NULL};
  const char *fname = "rag.chunk.window";
  size_t len, errpos = 0, window;
  const char *s = check_text(L, fname, &len);
  rag_chunk_opts o;
  rag_chunk_measure m;
  rag_chunk_list *l;
  int rc;
  common(L, fname, keys, &o, &m, "size", 0);
  window = opt_int(L, fname, "window", 3, 0);
  l = new_list(L);
  rc = rag_chunk_window(s, len, &o, window, &m, l, &errpos);
  return result(L, fname, s, l, rc, errpos, window_meta);
}

/* The heading paths of a Markdown text: a table at `paths` whose entry k is
** the list of heading texts from the top level down to heading k. */
typedef struct md_paths {
  int idx;
} md_paths;

static void markdown_meta(lua_State *L, const char *s, const rag_chunk *c,
                          void *ud) {
  md_paths *p = (md_paths *)ud;
  size_t n, i;
  (void)s;
  lua_rawgeti(L, p->idx, (lua_Integer)c->section);
  n = lua_isnil(L, -1) ? 0 : (size_t)lua_rawlen(L, -1);
  lua_createtable(L, (int)n, 0); /* a copy per chunk: callers may edit theirs */
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, -2, (lua_Integer)i);
    lua_rawseti(L, -2, (lua_Integer)i);
  }
  lua_setfield(L, -3, "headings");
  lua_pop(L, 1);
}

static void heads_fin(void *p) {
  rag_free(p);
}

static int chunk_markdown(lua_State *L) {
  static const char *const keys[] = {
      "size",       "overlap",        "unit", "tokenizer",
      "separators", "keep_separator", "trim", NULL};
  const char *fname = "rag.chunk.markdown";
  size_t len, errpos = 0, nh = 0, k;
  const char *s = check_text(L, fname, &len);
  rag_chunk_opts o;
  rag_chunk_measure m;
  rag_chunk_list *l;
  rag_markdown_heading *h = NULL;
  lrag_box *hbox;
  md_paths paths;
  int rc, stack[7] = {0}; /* the open heading of each level, 1-based */
  common(L, fname, keys, &o, &m, "size", 0);
  check_overlap(L, fname, &o);
  opt_rules(L, fname, &o);
  l = new_list(L);
  hbox = lrag_box_new(L, heads_fin);
  rc = rag_chunk_markdown(s, len, &o, &m, l, &h, &nh, &errpos);
  hbox->p = h;
  if (rc != RAG_OK) return fail(L, fname, rc, errpos);
  /* paths[k]: the texts of the open headings of lower levels, then heading k's
   */
  lua_createtable(L, (int)(nh > 0x7fffffff ? 0 : nh), 0);
  paths.idx = lua_gettop(L);
  for (k = 0; k < nh; k++) {
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
    lua_rawseti(L, paths.idx, (lua_Integer)k + 1);
  }
  return push_list(L, s, l, markdown_meta, &paths);
}

static void hierarchy_meta(lua_State *L, const char *s, const rag_chunk *c,
                           void *ud) {
  (void)s;
  (void)ud;
  set_int(L, "level", c->level);
  if (c->parent > 0) set_int(L, "parent", c->parent);
}

static int chunk_hierarchy(lua_State *L) {
  static const char *const keys[] = {
      "sizes",      "overlap",        "unit", "tokenizer",
      "separators", "keep_separator", "trim", NULL};
  const char *fname = "rag.chunk.hierarchy";
  size_t len, errpos = 0, sizes[16] = {2048, 512, 128}, nsizes = 3, i;
  const char *s = check_text(L, fname, &len);
  rag_chunk_opts o;
  rag_chunk_measure m;
  rag_chunk_list *l;
  int rc, unit;
  lrag_checkopts(L, 2, fname, keys);
  rag_chunk_defaults(&o);
  unit = opt_measure(L, fname, &m, 0);
  o.overlap = opt_int(L, fname, "overlap", 0, 0);
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "sizes");
    if (!lua_isnil(L, -1)) {
      lua_Number v;
      if (!lua_istable(L, -1) || (nsizes = (size_t)lua_rawlen(L, -1)) == 0 ||
          nsizes > 16)
        luaL_error(L, "%s: option 'sizes' must be a list of 1 to 16 sizes",
                   fname);
      for (i = 0; i < nsizes; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        v = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
        if (!(v >= (unit == 0 ? 4 : 1) && v <= 1e15 && v == floor(v)) ||
            (i > 0 && (size_t)v > sizes[i - 1]))
          luaL_error(L,
                     "%s: sizes[%d] must be an integer >= %d and at most the "
                     "size before it",
                     fname, (int)i + 1, unit == 0 ? 4 : 1);
        sizes[i] = (size_t)v;
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
  }
  if (o.overlap >= sizes[nsizes - 1])
    luaL_error(L, "%s: option 'overlap' must be less than the smallest size",
               fname);
  opt_rules(L, fname, &o);
  l = new_list(L);
  rc = rag_chunk_hierarchy(s, len, &o, sizes, nsizes, &m, l, &errpos);
  return result(L, fname, s, l, rc, errpos, hierarchy_meta);
}

/* {====== Semantic ======} */

static const char *const break_names[] = {"percentile", "standard_deviation",
                                          "interquartile", "gradient", NULL};
static const double break_amounts[] = {95, 3, 1.5, 95};

static void mem_fin(void *p) {
  rag_free(p);
}

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
      if (d == 0 || RAG_MUL_OVERFLOWS(n, d * sizeof *v) ||
          (v = (double *)rag_malloc(n * d * sizeof *v)) == NULL)
        luaL_error(L,
                   d == 0 ? "%s: embed returned an empty vector"
                          : "%s: not enough memory",
                   fname);
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

static int chunk_semantic(lua_State *L) {
  static const char *const keys[] = {"embed",  "buffer",    "threshold",
                                     "amount", "min_size",  "max_size",
                                     "unit",   "tokenizer", NULL};
  const char *fname = "rag.chunk.semantic";
  size_t len, errpos = 0, n = 0, i, buffer, min_size, dim = 0;
  const char *s = check_text(L, fname, &len);
  rag_chunk_opts o;
  rag_chunk_measure m;
  rag_chunk_list *l;
  rag_span *sp = NULL;
  lrag_box *box;
  unsigned char *brk = NULL;
  double amount, *v, *d = NULL, threshold;
  int rc, rule, fn;
  if (!lua_istable(L, 2))
    luaL_error(L, "%s: opts must be a table with an embed function", fname);
  common(L, fname, keys, &o, &m, "max_size", 0);
  lua_getfield(L, 2, "embed");
  if (lua_type(L, -1) != LUA_TFUNCTION && !luaL_getmetafield(L, -1, "__call"))
    luaL_error(L, "%s: option 'embed' must be a function", fname);
  if (lua_type(L, -1) != LUA_TFUNCTION) lua_pop(L, 1);
  fn = lua_gettop(L);
  buffer = opt_int(L, fname, "buffer", 1, 0);
  rule = opt_enum(L, fname, "threshold", break_names, 0);
  amount = lrag_optnumber_legacy(L, 2, "amount", break_amounts[rule]);
  if (!isfinite(amount) ||
      ((rule == 0 || rule == 3) && (amount < 0 || amount > 100)))
    luaL_error(L,
               "%s: option 'amount' must be a finite number (0 to 100 for "
               "percentiles)",
               fname);
  min_size = opt_int(L, fname, "min_size", 0, 0);
  l = new_list(L);
  box = lrag_box_new(L, mem_fin);
  rc = rag_sentences_split(s, len, &sp, &n, &errpos);
  box->p = sp;
  if (rc != RAG_OK) return fail(L, fname, rc, errpos);
  if (n >= 2) {
    lrag_box *dbox;
    lua_pushvalue(L, fn);
    lua_createtable(L, (int)(n > 0x7fffffff ? 0 : n), 0);
    for (i = 0; i < n; i++) {
      size_t lo = i > buffer ? i - buffer : 0,
             hi = n - 1 - i > buffer ? i + buffer : n - 1;
      lua_pushlstring(L, s + sp[lo].start, sp[hi].stop - sp[lo].start);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_call(L, 1, 3);
    if (lua_isnil(L, -3)) { /* a failure of the world, passed on */
      if (lua_isnil(L, -2)) {
        lua_pushfstring(L, "%s: embed failed", fname);
        lua_replace(L, -3);
      }
      lua_pushnil(L);
      lua_replace(L, -4);
      return 3;
    }
    lua_pop(L, 2);
    v = read_vectors(L, fname, n, &dim);
    dbox = lrag_box_new(L, mem_fin);
    if ((d = (double *)rag_malloc((n - 1) * (3 * sizeof *d + 1))) == NULL)
      return luaL_error(L, "%s: not enough memory", fname);
    dbox->p = d;
    brk = (unsigned char *)(d + 3 * (n - 1));
    rag_chunk_distances(v, n, dim, d);
    rag_chunk_breaks(d, n - 1, (rag_chunk_break)rule, amount, d + (n - 1), brk,
                     &threshold);
  }
  rc = rag_chunk_semantic(s, len, sp, n, brk, min_size, &o, &m, l);
  return result(L, fname, s, l, rc, 0, NULL);
}

static const luaL_Reg chunk_funcs[] = {
    {"fixed", chunk_fixed},         {"recursive", chunk_recursive},
    {"markdown", chunk_markdown},   {"sentences", chunk_sentences},
    {"semantic", chunk_semantic},   {"window", chunk_window},
    {"hierarchy", chunk_hierarchy}, {NULL, NULL},
};

int lrag_open_chunk(lua_State *L) {
  luaL_setfuncs(L, chunk_funcs, 0);
  return 0;
}
