/*
** lrag_bm25.c: rag.bm25.new(opts) and rag.bm25.load(path) make a "rag.bm25"
** userdata over the core index: add, remove, search, explain, stats, save,
** close, #b.
*/
#include "lrag.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "rag.h"
#include "rag_bm25.h"

#define MT "rag.bm25"

typedef struct lbm25 {
  rag_bm25 *b; /* NULL once closed */
} lbm25;

static const char *const variant_names[] = {"lucene", "robertson", "atire", "bm25l", "bm25+",
                                            NULL};

static void bm25_fin(void *u) {
  rag_bm25_free(((lbm25 *)u)->b);
}

static const lrag_class bm25_class;

static rag_bm25 *check_open(lua_State *L, const char *fname) {
  return ((lbm25 *)lrag_checkobject(L, 1, &bm25_class, fname))->b;
}

/* The error rule for a status of BM25 on text. */
static int fail(lua_State *L, int rc, const char *fname, size_t errpos) {
  if (rc == RAG_ETOOBIG) return lrag_error(L, rc, fname, "too large for the index");
  return lrag_texterror(L, rc, fname, errpos);
}

/* {====== Construction ======} */

static int bm25_new(lua_State *L) {
  static const char *const allowed[] = {"k1", "b", "variant", "delta", "analyzer", NULL};
  rag_bm25_opts o;
  lbm25 *u;
  int rc;
  lrag_checkopts(L, 1, "rag.bm25.new", allowed);
  rag_bm25_defaults(&o);
  o.variant = (rag_bm25_variant)lrag_optenum(L, 1, "rag.bm25.new", "variant", o.variant,
                                             variant_names);
  o.k1 = lrag_optnumber(L, 1, "rag.bm25.new", "k1", o.k1, 0, RAG_BM25_MAX_PARAM);
  o.b = lrag_optnumber(L, 1, "rag.bm25.new", "b", o.b, 0, 1);
  o.delta = lrag_optnumber(L, 1, "rag.bm25.new", "delta", rag_bm25_default_delta(o.variant), 0,
                           RAG_BM25_MAX_PARAM);
  if (lua_istable(L, 1)) {
    lua_getfield(L, 1, "analyzer");
    if (!lua_isnil(L, -1)) {
      if (luaL_testudata(L, -1, "rag.analyzer") == NULL)
        luaL_error(L, "rag.bm25.new: option 'analyzer' must be a rag.text.analyzer, got %s",
                   luaL_typename(L, -1));
      o.analyzer = *rag_analyzer_config(lrag_checkanalyzer(L, lua_gettop(L)));
    }
  }
  u = (lbm25 *)lrag_newobject(L, &bm25_class, sizeof *u);
  rc = rag_bm25_new(&o, &u->b);
  if (rc != RAG_OK) fail(L, rc, "rag.bm25.new", 0);
  return 1;
}

static int bm25_load(lua_State *L) {
  const char *path = lrag_checkpath(L, 1, "rag.bm25.load");
  const char *why;
  lbm25 *u = (lbm25 *)lrag_newobject(L, &bm25_class, sizeof *u);
  int err, rc = rag_bm25_load(path, &u->b, &why, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, "rag.bm25.load", path, why, err);
  return 1;
}

/* {====== Changes ======} */

static int bm25_add(lua_State *L) {
  rag_bm25 *b = check_open(L, "rag.bm25.add");
  size_t idlen, len, errpos = 0;
  const char *id = lrag_checkid(L, 2, "rag.bm25.add", &idlen), *text;
  int rc;
  if (lua_type(L, 3) != LUA_TSTRING)
    luaL_error(L, "rag.bm25.add: text must be a string, got %s", luaL_typename(L, 3));
  text = lua_tolstring(L, 3, &len);
  rc = rag_bm25_add(b, id, idlen, text, len, &errpos);
  if (rc != RAG_OK) return fail(L, rc, "rag.bm25.add", errpos);
  lua_pushboolean(L, 1);
  return 1;
}

static int bm25_remove(lua_State *L) {
  rag_bm25 *b = check_open(L, "rag.bm25.remove");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.bm25.remove", &idlen);
  int removed, rc = rag_bm25_remove(b, id, idlen, &removed);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.bm25.remove", NULL);
  lua_pushboolean(L, removed);
  return 1;
}

static int bm25_len(lua_State *L) {
  rag_bm25 *b = check_open(L, "rag.bm25.__len");
  lua_pushinteger(L, (lua_Integer)rag_bm25_count(b));
  return 1;
}

/* {====== Search ======} */

static const char *hit_id(const void *b, uint32_t h, size_t *len) {
  return rag_bm25_id((const rag_bm25 *)b, h, len);
}

static int bm25_search(lua_State *L) {
  static const char *const allowed[] = {"filter", NULL};
  rag_bm25 *b = check_open(L, "rag.bm25.search");
  size_t len, n, errpos = 0, k;
  const char *q;
  const rag_hit *hits;
  rag_bm25_filter f, *fp = NULL;
  int rc;
  if (lua_type(L, 2) != LUA_TSTRING)
    luaL_error(L, "rag.bm25.search: query must be a string, got %s", luaL_typename(L, 2));
  q = lua_tolstring(L, 2, &len);
  k = lrag_optk(L, 3, "rag.bm25.search", 10);
  lrag_checkopts(L, 4, "rag.bm25.search", allowed);
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "filter");
    if (!lua_isnil(L, -1)) {
      const char **ids;
      size_t *lens, nf = lrag_checkfilter(L, -1, "rag.bm25.search", &ids, &lens);
      f.ids = ids;
      f.lens = lens;
      f.n = nf;
      fp = &f;
    }
  }
  rc = rag_bm25_search(b, q, len, k, fp, NULL, &hits, &n, &errpos);
  if (rc != RAG_OK) return fail(L, rc, "rag.bm25.search", errpos);
  lrag_pushhits(L, hits, n, hit_id, b);
  return 1;
}

static int bm25_explain(lua_State *L) {
  rag_bm25 *b = check_open(L, "rag.bm25.explain");
  size_t len, idlen, i, errpos = 0;
  const char *q, *id;
  rag_bm25_explain ex;
  int rc, found;
  if (lua_type(L, 2) != LUA_TSTRING)
    luaL_error(L, "rag.bm25.explain: query must be a string, got %s", luaL_typename(L, 2));
  q = lua_tolstring(L, 2, &len);
  id = lrag_checkid(L, 3, "rag.bm25.explain", &idlen);
  rc = rag_bm25_explain_doc(b, q, len, id, idlen, &ex, &found, &errpos);
  if (rc != RAG_OK) return fail(L, rc, "rag.bm25.explain", errpos);
  if (!found) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 6);
  lua_pushlstring(L, id, idlen);
  lua_setfield(L, -2, "id");
  lua_pushnumber(L, ex.score);
  lua_setfield(L, -2, "score");
  lua_pushinteger(L, (lua_Integer)ex.dl);
  lua_setfield(L, -2, "dl");
  lua_pushnumber(L, ex.avgdl);
  lua_setfield(L, -2, "avgdl");
  lua_pushinteger(L, (lua_Integer)ex.docs);
  lua_setfield(L, -2, "docs");
  lua_createtable(L, (int)ex.nterms, 0);
  for (i = 0; i < ex.nterms; i++) {
    const rag_bm25_term *t = &ex.terms[i];
    lua_createtable(L, 0, 6);
    lua_pushlstring(L, t->term, t->len);
    lua_setfield(L, -2, "term");
    lua_pushinteger(L, (lua_Integer)t->qtf);
    lua_setfield(L, -2, "qtf");
    lua_pushinteger(L, (lua_Integer)t->tf);
    lua_setfield(L, -2, "tf");
    lua_pushinteger(L, (lua_Integer)t->df);
    lua_setfield(L, -2, "df");
    lua_pushnumber(L, t->idf);
    lua_setfield(L, -2, "idf");
    lua_pushnumber(L, t->weight);
    lua_setfield(L, -2, "weight");
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -2, "terms");
  return 1;
}

/* {====== Introspection, persistence, life cycle ======} */

static void set_int(lua_State *L, const char *key, size_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, key);
}

static void set_num(lua_State *L, const char *key, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, key);
}

static int bm25_stats(lua_State *L) {
  rag_bm25 *b = check_open(L, "rag.bm25.stats");
  const rag_bm25_opts *o = rag_bm25_config(b);
  rag_bm25_stats s;
  rag_bm25_stats_get(b, &s);
  lua_createtable(L, 0, 12);
  set_int(L, "docs", s.docs);
  set_int(L, "terms", s.terms);
  set_int(L, "postings", s.postings);
  set_int(L, "dead", s.dead);
  set_int(L, "bytes", s.bytes);
  set_int(L, "memory", s.memory);
  set_num(L, "avgdl", s.avgdl);
  set_num(L, "k1", o->k1);
  set_num(L, "b", o->b);
  set_num(L, "delta", o->delta);
  lua_pushstring(L, variant_names[o->variant]);
  lua_setfield(L, -2, "variant");
  lua_pushstring(L, o->analyzer.lang);
  lua_setfield(L, -2, "lang");
  return 1;
}

static int bm25_save(lua_State *L) {
  rag_bm25 *b = check_open(L, "rag.bm25.save");
  const char *path = lrag_checkpath(L, 2, "rag.bm25.save");
  int err, rc = rag_bm25_save(b, path, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, "rag.bm25.save", path, NULL, err);
  lua_pushboolean(L, 1);
  return 1;
}

static int bm25_tostring(lua_State *L) {
  lbm25 *u = (lbm25 *)luaL_checkudata(L, 1, MT);
  if (u->b == NULL)
    lua_pushliteral(L, "rag.bm25 (closed)");
  else
    lua_pushfstring(L, "rag.bm25 (%d documents)", (int)rag_bm25_count(u->b));
  return 1;
}

static const luaL_Reg bm25_methods[] = {
    {"add", bm25_add},     {"explain", bm25_explain}, {"remove", bm25_remove},
    {"save", bm25_save},   {"search", bm25_search},   {"stats", bm25_stats},
    {NULL, NULL},
};

static const luaL_Reg bm25_metamethods[] = {
    {"__len", bm25_len},
    {"__tostring", bm25_tostring},
    {NULL, NULL},
};

static const lrag_class bm25_class = {MT, "index", bm25_methods, bm25_metamethods, bm25_fin};

static const luaL_Reg bm25_funcs[] = {
    {"load", bm25_load},
    {"new", bm25_new},
    {NULL, NULL},
};

int lrag_open_bm25(lua_State *L) {
  lrag_newclass(L, &bm25_class);
  luaL_setfuncs(L, bm25_funcs, 0);
  return 0;
}
