/*
** lrag_analyzer.c: rag.text.analyzer(opts) builds a "rag.analyzer" userdata
** (a:tokenize, a:config, a:stats, a:close); rag.text.tokenize(s [, analyzer [, opts]])
** runs one, by default a cached English analyzer. Terms are collected in C
** during the run and pushed afterwards, so no Lua call happens inside it.
*/
#include "lrag.h"

#include <string.h>

#include "rag.h"
#include "rag_analyzer.h"
#include "rag_fnv.h"

#define MT "rag.analyzer"
#define FNAME "rag.text.analyzer"

typedef struct lanalyzer {
  rag_analyzer *p; /* NULL once closed */
} lanalyzer;

static const char *const cjk_names[] = {"bigram", "unigram", "both", NULL};

/* Registry key of the default analyzer (created on first use). */
static const char default_key = 0;

/* {====== Collecting terms ======} */

typedef struct term {
  size_t off, len;   /* the term's bytes in the collector's buffer */
  size_t start, stop; /* its 0-based source span [start, stop) */
} term;

/* The terms of option `only`: borrowed from its table, which stays on the stack. */
typedef struct wanted {
  const char *s;
  size_t len;
  uint32_t hash; /* rag_fnv32 of s, compared first */
} wanted;

typedef struct collector {
  char *bytes;
  size_t len, cap;
  term *terms;
  size_t n, ncap;
  const wanted *only; /* NULL: every term; else only these (nonly of them) */
  size_t nonly;
} collector;

static int is_wanted(const wanted *w, size_t n, const char *t, size_t len, uint32_t hash) {
  size_t i;
  for (i = 0; i < n; i++)
    if (w[i].hash == hash && w[i].len == len && memcmp(w[i].s, t, len) == 0) return 1;
  return 0;
}

static void collector_fin(void *p) {
  collector *c = (collector *)p;
  rag_free(c->bytes);
  rag_free(c->terms);
  rag_free(c);
}

/* The term callback: appends to the collector; RAG_ENOMEM stops the run. */
static int collect(void *ud, const char *t, size_t n, uint32_t hash, size_t start,
                   size_t stop) {
  collector *c = (collector *)ud;
  char *bytes;
  term *e;
  if (c->only != NULL && (n == 0 || !is_wanted(c->only, c->nonly, t, n, hash))) return RAG_OK;
  if (n > ((size_t)-1) - c->len) return RAG_ENOMEM;
  if ((bytes = (char *)rag_grow(c->bytes, &c->cap, c->len + n, 1)) == NULL) return RAG_ENOMEM;
  c->bytes = bytes;
  if ((e = (term *)rag_grow(c->terms, &c->ncap, c->n + 1, sizeof *e)) == NULL) return RAG_ENOMEM;
  c->terms = e;
  memcpy(c->bytes + c->len, t, n);
  e = &c->terms[c->n++];
  e->off = c->len;
  e->len = n;
  e->start = start;
  e->stop = stop;
  c->len += n;
  return RAG_OK;
}

/* {====== Options ======} */

/* opts.cjk: false (runs stay whole), true (the default) or a mode's name. */
static rag_analyzer_cjk opt_cjk(lua_State *L, int idx) {
  int cjk = -1;
  lua_getfield(L, idx, "cjk");
  if (lua_isboolean(L, -1))
    cjk = lua_toboolean(L, -1) ? RAG_ANALYZER_CJK_BIGRAM : RAG_ANALYZER_CJK_RUN;
  lua_pop(L, 1);
  if (cjk >= 0) return (rag_analyzer_cjk)cjk;
  return (rag_analyzer_cjk)lrag_optenum(L, idx, FNAME, "cjk", RAG_ANALYZER_CJK_BIGRAM, cjk_names);
}

/*
** Reads `stopwords` (left on the stack: the list's strings must stay alive
** until the analyzer has copied them). A list becomes an array of pointers
** in a userdata, also left on the stack.
*/
static void opt_stopwords(lua_State *L, int idx, rag_analyzer_opts *o, int english) {
  lua_getfield(L, idx, "stopwords");
  if (lua_isnil(L, -1)) {
    o->stopwords = english ? RAG_ANALYZER_STOP_BUILTIN : RAG_ANALYZER_STOP_NONE;
  } else if (lua_isboolean(L, -1)) {
    o->stopwords = lua_toboolean(L, -1) ? RAG_ANALYZER_STOP_BUILTIN : RAG_ANALYZER_STOP_NONE;
    if (o->stopwords == RAG_ANALYZER_STOP_BUILTIN && !english)
      luaL_error(L, "%s: the built-in stopwords are English; give a list for '%s'", FNAME,
                 o->lang);
  } else if (lua_istable(L, -1)) {
    int t = lua_gettop(L);
    size_t i, n = (size_t)lua_rawlen(L, t);
    const char **words;
    if (RAG_MUL_OVERFLOWS(n, sizeof *words)) luaL_error(L, "%s: too many stopwords", FNAME);
    words = (const char **)lua_newuserdatauv(L, n ? n * sizeof *words : 1, 0);
    for (i = 0; i < n; i++) {
      size_t len;
      lua_rawgeti(L, t, (lua_Integer)(i + 1));
      if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "%s: stopwords[%d] must be a string, got %s", FNAME, (int)(i + 1),
                   luaL_typename(L, -1));
      words[i] = lua_tolstring(L, -1, &len); /* kept alive by the list */
      if (strlen(words[i]) != len)
        luaL_error(L, "%s: stopwords[%d] contains a NUL byte", FNAME, (int)(i + 1));
      lua_pop(L, 1);
    }
    o->stopwords = RAG_ANALYZER_STOP_LIST;
    o->words = words;
    o->nwords = n;
  } else {
    luaL_error(L, "%s: option 'stopwords' must be a boolean or a list of strings, got %s", FNAME,
               luaL_typename(L, -1));
  }
}

/* {====== The analyzer object ======} */

static void analyzer_fin(void *u) {
  rag_analyzer_free(((lanalyzer *)u)->p);
}

static const lrag_class analyzer_class;

/* docs/api.md promises this message for any use of a closed analyzer. */
struct rag_analyzer *lrag_checkanalyzer(lua_State *L, int idx) {
  lanalyzer *u = (lanalyzer *)luaL_checkudata(L, idx, MT);
  if (u->p == NULL) luaL_error(L, "attempt to use a closed rag.analyzer");
  return u->p;
}

/*
** Pushes a new analyzer built from the options table at idx (or the defaults
** when idx is 0 or nil). The userdata exists before the core object, so an
** error at any point leaks nothing.
*/
static lanalyzer *new_analyzer(lua_State *L, int idx) {
  static const char *const allowed[] = {"cjk",  "lang",      "lowercase", "simd",
                                       "stem", "stopwords", NULL};
  rag_analyzer_opts o;
  rag_analyzer_langkind kind;
  lanalyzer *u;
  int top = lua_gettop(L), rc, simd = 1;
  rag_analyzer_defaults(&o);
  if (idx != 0 && !lua_isnoneornil(L, idx)) {
    idx = lua_absindex(L, idx);
    lrag_checkopts(L, idx, FNAME, allowed);
    o.lang = lrag_optstring(L, idx, FNAME, "lang", o.lang, NULL); /* anchored by opts */
    kind = rag_analyzer_langkind_of(o.lang);
    if (kind == RAG_ANALYZER_LANG_UNKNOWN)
      luaL_error(L, "%s: unknown language '%s'", FNAME, o.lang);
    o.stem = lrag_optboolean(L, idx, FNAME, "stem", 1);
    o.lowercase = lrag_optboolean(L, idx, FNAME, "lowercase", 1);
    o.cjk = opt_cjk(L, idx);
    opt_stopwords(L, idx, &o, kind == RAG_ANALYZER_LANG_ENGLISH);
    simd = lrag_optboolean(L, idx, FNAME, "simd", 1);
  }
  u = (lanalyzer *)lrag_newobject(L, &analyzer_class, sizeof *u);
  rc = rag_analyzer_new(&o, &u->p);
  if (rc != RAG_OK) lrag_error(L, rc, FNAME, NULL);
  if (!simd) rag_analyzer_portable(u->p);
  if (lua_gettop(L) > top + 1) { /* drop the option values kept alive above */
    lua_replace(L, top + 1);
    lua_settop(L, top + 1);
  }
  return u;
}

static int text_analyzer(lua_State *L) {
  new_analyzer(L, 1);
  return 1;
}

/* Pushes the cached default English analyzer, created on first use. */
static void push_default(lua_State *L) {
  lanalyzer *u;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &default_key);
  u = (lanalyzer *)lrag_toobject(L, -1, &analyzer_class);
  if (u != NULL && u->p != NULL) return;
  lua_pop(L, 1);
  new_analyzer(L, 0);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &default_key);
}

/*
** Reads opts.only (a list of strings) into a userdata array left on the
** stack with the list; returns its length. *out stays NULL when it is absent.
*/
static size_t read_only(lua_State *L, int oidx, const char *fname, wanted **out) {
  size_t n, i;
  wanted *w;
  if (!lrag_opttable(L, oidx, fname, "only")) return 0;
  n = lua_rawlen(L, -1);
  w = (wanted *)lua_newuserdatauv(L, (n ? n : 1) * sizeof *w, 0);
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, -2, (lua_Integer)(i + 1));
    if (lua_type(L, -1) != LUA_TSTRING)
      return (size_t)luaL_error(L, "%s: option 'only' must be a list of strings (item %d is %s)",
                                fname, (int)(i + 1), luaL_typename(L, -1));
    w[i].s = lua_tolstring(L, -1, &w[i].len); /* anchored by the list */
    w[i].hash = rag_fnv32(w[i].s, w[i].len);
    lua_pop(L, 1);
  }
  *out = w; /* set even for an empty list, which wants no term */
  return n;
}

/* A table size hint for n elements. */
static int narr(size_t n) {
  return n > 0x7fffffff ? 0x7fffffff : (int)n;
}

/*
** Runs the analyzer at aidx over the string at sidx with the tokenize
** options at oidx and pushes the results (terms, or terms, starts, stops)
** or the failure tuple. The analyzer is looked up after the last call that
** can run Lua code (a finalizer could close it), and nothing in the run
** calls Lua.
*/
static int run(lua_State *L, int aidx, int sidx, int oidx, const char *fname) {
  static const char *const allowed[] = {"only", "spans", NULL};
  size_t len, errpos = 0, i, nonly;
  const char *s = luaL_checklstring(L, sidx, &len);
  int spans = 0, rc;
  rag_analyzer *a;
  lrag_box *box;
  collector *c;
  wanted *only = NULL;
  lrag_checkopts(L, oidx, fname, allowed);
  spans = lrag_optboolean(L, oidx, fname, "spans", 0);
  nonly = read_only(L, oidx, fname, &only);
  box = lrag_box_new(L, collector_fin);
  if ((c = (collector *)rag_malloc(sizeof *c)) == NULL)
    return lrag_error(L, RAG_ENOMEM, fname, NULL);
  memset(c, 0, sizeof *c);
  c->only = only; /* the collector keeps the wanted terms alone */
  c->nonly = nonly;
  box->p = c;
  a = lrag_checkanalyzer(L, aidx);
  if (only != NULL) { /* words that cannot give a wanted term may go unanalyzed */
    rag_analyzer_want want;
    rag_analyzer_want_clear(&want);
    for (i = 0; i < nonly; i++)
      if (only[i].len > 0) rag_analyzer_want_term(&want, only[i].s, only[i].len);
    rc = rag_analyzer_run_some(a, s, len, &want, collect, c, &errpos);
  } else {
    rc = rag_analyzer_run(a, s, len, collect, c, &errpos);
  }
  if (rc != RAG_OK) {
    lrag_box_free(box);
    return lrag_texterror(L, rc, fname, errpos);
  }
  lua_createtable(L, narr(c->n), 0);
  if (spans) {
    lua_createtable(L, narr(c->n), 0);
    lua_createtable(L, narr(c->n), 0);
  }
  for (i = 0; i < c->n; i++) {
    const term *e = &c->terms[i];
    lua_pushlstring(L, c->bytes + e->off, e->len);
    lua_rawseti(L, spans ? -4 : -2, (lua_Integer)(i + 1));
    if (!spans) continue;
    lua_pushinteger(L, (lua_Integer)e->start + 1);
    lua_rawseti(L, -3, (lua_Integer)(i + 1));
    lua_pushinteger(L, (lua_Integer)e->stop);
    lua_rawseti(L, -2, (lua_Integer)(i + 1));
  }
  lrag_box_free(box);
  return spans ? 3 : 1;
}

static int text_tokenize(lua_State *L) {
  lanalyzer *once = NULL;
  int nret;
  luaL_checkstring(L, 1);
  lua_settop(L, 3);
  switch (lua_type(L, 2)) { /* the analyzer goes to index 4 */
    case LUA_TNIL:
      push_default(L);
      break;
    case LUA_TTABLE:
      once = new_analyzer(L, 2);
      break;
    case LUA_TUSERDATA:
      lrag_checkanalyzer(L, 2);
      lua_pushvalue(L, 2);
      break;
    default:
      return luaL_argerror(L, 2, lua_pushfstring(L, "rag.analyzer or table expected, got %s",
                                                 luaL_typename(L, 2)));
  }
  nret = run(L, 4, 1, 3, "rag.text.tokenize");
  if (once != NULL) { /* release the stemmer now rather than at the next GC */
    rag_analyzer_free(once->p);
    once->p = NULL;
  }
  return nret;
}

static int analyzer_tokenize(lua_State *L) {
  lrag_checkanalyzer(L, 1);
  lua_settop(L, 3);
  return run(L, 1, 2, 3, "rag.analyzer.tokenize");
}

static void push_stopwords(lua_State *L, const rag_analyzer_opts *o) {
  size_t i;
  if (o->stopwords != RAG_ANALYZER_STOP_LIST) {
    lua_pushboolean(L, o->stopwords == RAG_ANALYZER_STOP_BUILTIN);
    return;
  }
  lua_createtable(L, (int)o->nwords, 0);
  for (i = 0; i < o->nwords; i++) {
    lua_pushstring(L, o->words[i]);
    lua_rawseti(L, -2, (lua_Integer)(i + 1));
  }
}

static int analyzer_config(lua_State *L) {
  const rag_analyzer_opts *o = rag_analyzer_config(lrag_checkanalyzer(L, 1));
  lua_createtable(L, 0, 5);
  lrag_setstr(L, "lang", o->lang);
  lrag_setbool(L, "stem", o->stem);
  lrag_setbool(L, "lowercase", o->lowercase);
  if (o->cjk == RAG_ANALYZER_CJK_RUN) lua_pushboolean(L, 0);
  else lua_pushstring(L, cjk_names[o->cjk]);
  lua_setfield(L, -2, "cjk");
  push_stopwords(L, o);
  lua_setfield(L, -2, "stopwords");
  return 1;
}

static int analyzer_stats(lua_State *L) {
  size_t entries, bytes;
  rag_analyzer_cache(lrag_checkanalyzer(L, 1), &entries, &bytes);
  lua_createtable(L, 0, 3);
  lrag_setint(L, "cache_entries", (lua_Integer)entries);
  lrag_setint(L, "cache_bytes", (lua_Integer)bytes);
  lrag_setint(L, "cache_limit", (lua_Integer)RAG_ANALYZER_CACHE_MAX);
  return 1;
}

static int analyzer_tostring(lua_State *L) {
  lanalyzer *u = (lanalyzer *)luaL_checkudata(L, 1, MT);
  if (u->p == NULL) lua_pushliteral(L, "rag.analyzer (closed)");
  else lua_pushfstring(L, "rag.analyzer (%s)", rag_analyzer_config(u->p)->lang);
  return 1;
}

static const luaL_Reg analyzer_methods[] = {
    {"config", analyzer_config},
    {"stats", analyzer_stats},
    {"tokenize", analyzer_tokenize},
    {NULL, NULL},
};

static const luaL_Reg analyzer_metamethods[] = {
    {"__tostring", analyzer_tostring},
    {NULL, NULL},
};

static const lrag_class analyzer_class = {MT, "analyzer", analyzer_methods, analyzer_metamethods,
                                          analyzer_fin};

static const luaL_Reg text_funcs[] = {
    {"analyzer", text_analyzer},
    {"tokenize", text_tokenize},
    {NULL, NULL},
};

int lrag_open_analyzer(lua_State *L) {
  lrag_newclass(L, &analyzer_class);
  luaL_setfuncs(L, text_funcs, 0);
  return 0;
}
