/*
** lrag_model2vec.c: rag.core.model2vec.load(dir) makes a "rag.model2vec"
** userdata over the core model: embed, tokenize, dim, stats, close.
*/
#include "lrag.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "rag.h"
#include "rag_model2vec.h"

#define MT "rag.model2vec"
#define NAME "rag.embed.model2vec"
#define MAX_LENGTH 2147483647.0

typedef struct lmodel {
  rag_model2vec *m; /* NULL once closed */
} lmodel;

static rag_model2vec *check_open(lua_State *L, const char *method) {
  lmodel *u = (lmodel *)luaL_checkudata(L, 1, MT);
  if (u->m == NULL) luaL_error(L, NAME ": %s: model is closed", method);
  return u->m;
}

static int raise_rc(lua_State *L, int rc, const char *method) {
  if (rc == RAG_ENOMEM) return luaL_error(L, NAME ": %s: not enough memory", method);
  return luaL_error(L, NAME ": %s: %s", method, rag_strerror(rc));
}

/* {====== Loading ======} */

static int model2vec_load(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  rag_model2vec_error e;
  lmodel *u = (lmodel *)lua_newuserdatauv(L, sizeof *u, 0);
  size_t dl = strlen(dir);
  int rc;
  u->m = NULL;
  luaL_setmetatable(L, MT);
  rc = rag_model2vec_load(dir, &u->m, &e);
  if (rc == RAG_OK) return 1;
  if (rc == RAG_ENOMEM) return luaL_error(L, NAME ": not enough memory");
  while (dl > 1 && dir[dl - 1] == '/') dl--;
  lua_pushlstring(L, dir, dl); /* the file the failure concerns */
  if (e.file[0] != '\0') {
    lua_pushliteral(L, "/");
    lua_pushstring(L, e.file);
    lua_concat(L, 3);
  }
  if (rc == RAG_EIO && e.err != 0) { /* messages are lowercase: "no such file or directory" */
    snprintf(e.why, sizeof e.why, "%s", strerror(e.err));
    e.why[0] = (char)tolower((unsigned char)e.why[0]);
  }
  return lrag_fail(L, lrag_code(rc), NAME ": '%s': %s", lua_tostring(L, -1), e.why);
}

/* {====== Embedding ======} */

/* opts.max_length: a whole number in [0, 2^31), 512 by default. */
static size_t opt_max_length(lua_State *L, int idx, const char *method) {
  lua_Number v;
  if (!lua_istable(L, idx)) return 512;
  lua_getfield(L, idx, "max_length");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 512;
  }
  v = lua_tonumber(L, -1);
  if (lua_type(L, -1) != LUA_TNUMBER || !(v >= 0 && v <= MAX_LENGTH) || v != (lua_Number)(size_t)v)
    luaL_error(L, NAME ": %s: max_length must be a whole number in [0, 2^31)", method);
  lua_pop(L, 1);
  return (size_t)v;
}

static int encoding_fail(lua_State *L, const char *method, size_t i, size_t errpos) {
  return lrag_fail(L, "encoding", NAME ": %s: text %lu: invalid utf-8 at byte %lu", method,
                   (unsigned long)i, (unsigned long)errpos);
}

static int model_embed(lua_State *L) {
  static const char *const allowed[] = {"packed", "max_length", NULL};
  rag_model2vec *m = check_open(L, "embed");
  size_t n, i, j, dim = rag_model2vec_dim(m), maxlen;
  int packed = 0;
  float *out;
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  lrag_checkopts(L, 3, NAME ": embed", allowed);
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "packed");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
      luaL_error(L, NAME ": embed: packed must be a boolean");
    packed = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  maxlen = opt_max_length(L, 3, "embed");
  n = (size_t)lua_rawlen(L, 2);
  for (i = 1; i <= n; i++) { /* every text is checked before any work */
    lua_rawgeti(L, 2, (int)i);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, NAME ": embed: texts[%d] must be a string, got %s", (int)i,
                 luaL_typename(L, -1));
    lua_pop(L, 1);
  }
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
    if (rc == RAG_EENCODING) return encoding_fail(L, "embed", i, errpos);
    if (rc != RAG_OK) return raise_rc(L, rc, "embed");
    if (packed) {
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (j = 0; j < dim; j++) {
        unsigned char le[4];
        uint32_t u;
        memcpy(&u, &out[j], 4);
        le[0] = (unsigned char)u;
        le[1] = (unsigned char)(u >> 8);
        le[2] = (unsigned char)(u >> 16);
        le[3] = (unsigned char)(u >> 24);
        luaL_addlstring(&b, (const char *)le, 4);
      }
      luaL_pushresult(&b);
    } else {
      lua_createtable(L, (int)dim, 0);
      for (j = 0; j < dim; j++) {
        lua_pushnumber(L, (lua_Number)out[j]);
        lua_rawseti(L, -2, (int)j + 1);
      }
    }
    lua_rawseti(L, -2, (int)i);
  }
  return 1;
}

static int model_tokenize(lua_State *L) {
  static const char *const allowed[] = {"max_length", NULL};
  rag_model2vec *m = check_open(L, "tokenize");
  size_t len, n, i, errpos = 0, maxlen = RAG_MODEL2VEC_NOLIMIT;
  const uint32_t *ids;
  const char *s;
  int rc;
  if (lua_type(L, 2) != LUA_TSTRING)
    luaL_error(L, NAME ": tokenize: text must be a string, got %s", luaL_typename(L, 2));
  s = lua_tolstring(L, 2, &len);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  lrag_checkopts(L, 3, NAME ": tokenize", allowed);
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "max_length");
    if (!lua_isnil(L, -1)) maxlen = opt_max_length(L, 3, "tokenize");
    lua_pop(L, 1);
  }
  rc = rag_model2vec_tokenize(m, s, len, maxlen, &ids, &n, &errpos);
  if (rc == RAG_EENCODING) return encoding_fail(L, "tokenize", 1, errpos);
  if (rc != RAG_OK) return raise_rc(L, rc, "tokenize");
  lua_createtable(L, n > 0x7fffffff ? 0 : (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushinteger(L, (lua_Integer)ids[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* {====== Introspection and life cycle ======} */

static int model_dim(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)rag_model2vec_dim(check_open(L, "dim")));
  return 1;
}

static int model_stats(lua_State *L) {
  rag_model2vec_info info;
  rag_model2vec_describe(check_open(L, "stats"), &info);
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

static int model_close(lua_State *L) {
  lmodel *u = (lmodel *)luaL_checkudata(L, 1, MT);
  rag_model2vec_free(u->m);
  u->m = NULL;
  return 0;
}

static int model_tostring(lua_State *L) {
  lmodel *u = (lmodel *)luaL_checkudata(L, 1, MT);
  if (u->m == NULL) lua_pushliteral(L, MT " (closed)");
  else lua_pushfstring(L, MT " (%p)", (void *)u->m);
  return 1;
}

static const luaL_Reg model_methods[] = {
  {"close", model_close},
  {"dim", model_dim},
  {"embed", model_embed},
  {"stats", model_stats},
  {"tokenize", model_tokenize},
  {NULL, NULL},
};

static const luaL_Reg model_metamethods[] = {
  {"__close", model_close},
  {"__gc", model_close},
  {"__tostring", model_tostring},
  {NULL, NULL},
};

int lrag_open_model2vec(lua_State *L) {
  if (luaL_newmetatable(L, MT)) {
    luaL_setfuncs(L, model_metamethods, 0);
    luaL_newlib(L, model_methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, model2vec_load);
  lua_setfield(L, -2, "load");
  return 0;
}
