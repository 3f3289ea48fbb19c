/*
** lrag_model2vec.c: rag.core.model2vec.load(dir) makes a "rag.model2vec"
** userdata over the core model: embed, tokenize, dim, stats, close.
*/
#include "lrag.h"

#include <string.h>

#include "lrag_vec.h"
#include "rag.h"
#include "rag_model2vec.h"

#define MT "rag.model2vec"
#define NAME "rag.embed.model2vec"
#define MAX_LENGTH 2147483647.0

typedef struct lmodel {
  rag_model2vec *m; /* NULL once closed */
} lmodel;

static void model_fin(void *u) {
  rag_model2vec_free(((lmodel *)u)->m);
}

static const lrag_class model_class;

/* The open model at index 1; messages name the method: "rag.embed.model2vec: embed: ...". */
static rag_model2vec *check_open(lua_State *L, const char *fname) {
  return ((lmodel *)lrag_checkobject(L, 1, &model_class, fname))->m;
}

/* {====== Loading ======} */

static int model2vec_load(lua_State *L) {
  const char *dir = lrag_checkpath(L, 1, NAME);
  rag_model2vec_error e;
  lmodel *u = (lmodel *)lrag_newobject(L, &model_class, sizeof *u);
  int rc = rag_model2vec_load(dir, &u->m, &e);
  if (rc == RAG_OK) return 1;
  if (rc == RAG_ENOMEM) return lrag_error(L, rc, NAME, NULL);
  return lrag_dir_error(L, rc, NAME, dir, e.file, e.why, e.err);
}

/* {====== Embedding ======} */

typedef struct embed_args {
  rag_model2vec *m;
  size_t max_length;
} embed_args;

static int embed_one(void *p, const char *s, size_t len, float *out, size_t *errpos) {
  embed_args *a = (embed_args *)p;
  return rag_model2vec_embed(a->m, s, len, a->max_length, out, errpos);
}

static int model_embed(lua_State *L) {
  static const char *const allowed[] = {"packed", "max_length", NULL};
  static const char *fname = NAME ": embed";
  embed_args a;
  int packed;
  a.m = check_open(L, fname);
  lrag_checktexts(L, 2, fname, "texts[%d]");
  lrag_checkopts(L, 3, fname, allowed);
  packed = lrag_optboolean(L, 3, fname, "packed", 0);
  a.max_length = (size_t)lrag_optinteger(L, 3, fname, "max_length", 512, 0, MAX_LENGTH);
  return lrag_embedtexts(L, 2, rag_model2vec_dim(a.m), packed, fname, embed_one, &a);
}

static int model_tokenize(lua_State *L) {
  static const char *const allowed[] = {"max_length", NULL};
  static const char *fname = NAME ": tokenize";
  rag_model2vec *m = check_open(L, fname);
  size_t len, n, i, errpos = 0, maxlen;
  lua_Integer max;
  const uint32_t *ids;
  const char *s;
  int rc;
  if (lua_type(L, 2) != LUA_TSTRING)
    luaL_error(L, "%s: text must be a string, got %s", fname, luaL_typename(L, 2));
  s = lua_tolstring(L, 2, &len);
  lrag_checkopts(L, 3, fname, allowed);
  max = lrag_optinteger(L, 3, fname, "max_length", -1, 0, MAX_LENGTH);
  maxlen = max < 0 ? RAG_MODEL2VEC_NOLIMIT : (size_t)max; /* no cut unless asked */
  rc = rag_model2vec_tokenize(m, s, len, maxlen, &ids, &n, &errpos);
  if (rc == RAG_EENCODING)
    return lrag_error(L, rc, fname, "text 1: invalid utf-8 at byte %lu", (unsigned long)errpos);
  if (rc != RAG_OK) return lrag_error(L, rc, fname, NULL);
  lua_createtable(L, n > 0x7fffffff ? 0 : (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushinteger(L, (lua_Integer)ids[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* {====== Introspection ======} */

static int model_dim(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)rag_model2vec_dim(check_open(L, NAME ": dim")));
  return 1;
}

static int model_stats(lua_State *L) {
  rag_model2vec_info info;
  rag_model2vec_describe(check_open(L, NAME ": stats"), &info);
  lua_createtable(L, 0, 8);
  lrag_setint(L, "vocab", (lua_Integer)info.vocab);
  lrag_setint(L, "dim", (lua_Integer)info.dim);
  lrag_setint(L, "rows", (lua_Integer)info.rows);
  lrag_setstr(L, "dtype", info.dtype);
  lrag_setbool(L, "normalize", info.normalize);
  lrag_setbool(L, "quantized", info.quantized);
  lrag_setint(L, "median_token_length", (lua_Integer)info.median);
  lrag_setstr(L, "tokenizer", info.tokenizer);
  return 1;
}

static const luaL_Reg model_methods[] = {
    {"dim", model_dim},
    {"embed", model_embed},
    {"stats", model_stats},
    {"tokenize", model_tokenize},
    {NULL, NULL},
};

static const lrag_class model_class = {MT, "model", model_methods, NULL, model_fin};

/* rag.core.model2vec.load: public as rag.embed.model2vec, documented there. */
int lrag_open_model2vec(lua_State *L) {
  lrag_newclass(L, &model_class);
  lua_pushcfunction(L, model2vec_load);
  lua_setfield(L, -2, "load");
  return 0;
}
