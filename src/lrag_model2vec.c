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
  size_t dl = strlen(dir);
  int rc = rag_model2vec_load(dir, &u->m, &e);
  if (rc == RAG_OK) return 1;
  if (rc == RAG_ENOMEM) return lrag_error(L, rc, NAME, NULL);
  while (dl > 1 && dir[dl - 1] == '/') dl--;
  lua_pushlstring(L, dir, dl); /* the file the failure concerns */
  if (e.file[0] != '\0') {
    lua_pushliteral(L, "/");
    lua_pushstring(L, e.file);
    lua_concat(L, 3);
  }
  return lrag_file_error(L, rc, NAME, lua_tostring(L, -1), e.why, e.err);
}

/* {====== Embedding ======} */

/* Raises unless every texts[i] is a string; returns #texts. */
static size_t check_texts(lua_State *L, const char *fname) {
  size_t n, i;
  if (!lua_istable(L, 2))
    luaL_error(L, "%s: texts must be a list of strings, got %s", fname, luaL_typename(L, 2));
  n = (size_t)lua_rawlen(L, 2);
  for (i = 1; i <= n; i++) { /* every text is checked before any work */
    lua_rawgeti(L, 2, (int)i);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: texts[%d] must be a string, got %s", fname, (int)i,
                 luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  return n;
}

/* The error rule for a status of embed or tokenize on the i-th text. */
static int fail(lua_State *L, int rc, const char *fname, size_t i, size_t errpos) {
  if (rc == RAG_EENCODING)
    return lrag_error(L, rc, fname, "text %lu: invalid utf-8 at byte %lu", (unsigned long)i,
                      (unsigned long)errpos);
  return lrag_error(L, rc, fname, NULL);
}

static int model_embed(lua_State *L) {
  static const char *const allowed[] = {"packed", "max_length", NULL};
  static const char *fname = NAME ": embed";
  rag_model2vec *m = check_open(L, fname);
  size_t n = check_texts(L, fname), i, dim = rag_model2vec_dim(m), maxlen;
  int packed;
  float *out;
  lrag_checkopts(L, 3, fname, allowed);
  packed = lrag_optboolean(L, 3, fname, "packed", 0);
  maxlen = (size_t)lrag_optinteger(L, 3, fname, "max_length", 512, 0, MAX_LENGTH);
  out = (float *)lua_newuserdatauv(L, dim * sizeof *out + 1, 0); /* freed by the GC */
  lua_createtable(L, n > 0x7fffffff ? 0 : (int)n, 0);
  for (i = 1; i <= n; i++) {
    size_t len, errpos = 0;
    const char *s;
    int rc;
    lua_rawgeti(L, 2, (int)i);
    s = lua_tolstring(L, -1, &len);
    rc = rag_model2vec_embed(m, s, len, maxlen, out, &errpos);
    lua_pop(L, 1);
    if (rc != RAG_OK) return fail(L, rc, fname, i, errpos);
    if (packed) lrag_pushpacked(L, out, dim);
    else lrag_pushfloats(L, out, dim);
    lua_rawseti(L, -2, (int)i);
  }
  return 1;
}

static int model_tokenize(lua_State *L) {
  static const char *const allowed[] = {"max_length", NULL};
  static const char *fname = NAME ": tokenize";
  rag_model2vec *m = check_open(L, fname);
  size_t len, n, i, errpos = 0, maxlen;
  const uint32_t *ids;
  const char *s;
  int rc;
  if (lua_type(L, 2) != LUA_TSTRING)
    luaL_error(L, "%s: text must be a string, got %s", fname, luaL_typename(L, 2));
  s = lua_tolstring(L, 2, &len);
  lrag_checkopts(L, 3, fname, allowed);
  /* no limit unless asked: -1 stands for it */
  maxlen = (size_t)lrag_optinteger(L, 3, fname, "max_length", -1, 0, MAX_LENGTH);
  rc = rag_model2vec_tokenize(m, s, len, maxlen, &ids, &n, &errpos);
  if (rc != RAG_OK) return fail(L, rc, fname, 1, errpos);
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
  lua_pushinteger(L, (lua_Integer)info.vocab);
  lua_setfield(L, -2, "vocab");
  lua_pushinteger(L, (lua_Integer)info.dim);
  lua_setfield(L, -2, "dim");
  lua_pushinteger(L, (lua_Integer)info.rows);
  lua_setfield(L, -2, "rows");
  lua_pushstring(L, info.dtype);
  lua_setfield(L, -2, "dtype");
  lua_pushboolean(L, info.normalize);
  lua_setfield(L, -2, "normalize");
  lua_pushboolean(L, info.quantized);
  lua_setfield(L, -2, "quantized");
  lua_pushinteger(L, (lua_Integer)info.median);
  lua_setfield(L, -2, "median_token_length");
  lua_pushstring(L, info.tokenizer);
  lua_setfield(L, -2, "tokenizer");
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

static const luaL_Reg model2vec_funcs[] = {
    {"load", model2vec_load},
    {NULL, NULL},
};

int lrag_open_model2vec(lua_State *L) {
  lrag_newclass(L, &model_class);
  luaL_setfuncs(L, model2vec_funcs, 0);
  return 0;
}
