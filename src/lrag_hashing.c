/*
** lrag_hashing.c: rag.core.hashing.new(opts) makes a "rag.hashing" userdata
** over the hashing embedder (rag.embed.hashing in the facade): h:embed,
** h:dim, h:config, h:close. Vectors are Lua arrays of numbers or packed
** little-endian float32 strings, the format of rag.vec.pack.
*/
#include "lrag.h"

#include <math.h>
#include <string.h>

#include "lrag_vec.h"
#include "rag.h"
#include "rag_hashing.h"

#define MT "rag.hashing"
#define FNAME "rag.embed.hashing"

typedef struct lhashing {
  rag_hashing *p; /* NULL once closed */
  size_t dim;
  float out[1]; /* dim floats: the vector being pushed */
} lhashing;

static lhashing *check_hashing(lua_State *L) {
  lhashing *u = (lhashing *)luaL_checkudata(L, 1, MT);
  if (u->p == NULL) luaL_error(L, "%s: embedder is closed", FNAME);
  return u;
}

/* {====== Options ======} */

static int opt_boolean(lua_State *L, int idx, const char *key, int def) {
  int v = def;
  lua_getfield(L, idx, key);
  if (!lua_isnil(L, -1)) {
    if (!lua_isboolean(L, -1))
      luaL_error(L, "%s: option '%s' must be a boolean, got %s", FNAME, key,
                 luaL_typename(L, -1));
    v = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

static double opt_weight(lua_State *L, int idx, const char *key, double def) {
  double v = def;
  lua_getfield(L, idx, key);
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "%s: option '%s' must be a number, got %s", FNAME, key,
                 luaL_typename(L, -1));
    v = lua_tonumber(L, -1);
    if (!(v >= RAG_HASHING_WEIGHT_MIN && v <= RAG_HASHING_WEIGHT_MAX))
      luaL_error(L, "%s: option '%s' must be a number in [1e-6, 1e6]", FNAME, key);
  }
  lua_pop(L, 1);
  return v;
}

static const char *const tf_names[] = {"sqrt", "raw", NULL};

static rag_hashing_tf opt_tf(lua_State *L, int idx, rag_hashing_tf def) {
  int i = 0;
  lua_getfield(L, idx, "tf");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return def;
  }
  if (lua_type(L, -1) == LUA_TSTRING)
    while (tf_names[i] != NULL && strcmp(tf_names[i], lua_tostring(L, -1)) != 0) i++;
  if (lua_type(L, -1) != LUA_TSTRING || tf_names[i] == NULL)
    luaL_error(L, "%s: option 'tf' must be \"sqrt\" or \"raw\"", FNAME);
  lua_pop(L, 1);
  return (rag_hashing_tf)i;
}

/* opts.seed: an integer in [0, 2^32). */
static uint32_t opt_seed(lua_State *L, int idx) {
  lua_Number v = 0;
  lua_getfield(L, idx, "seed");
  if (!lua_isnil(L, -1)) {
    v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || !(v >= 0 && v <= 4294967295.0 && v == floor(v)))
      luaL_error(L, "%s: option 'seed' must be an integer in [0, 4294967295]", FNAME);
  }
  lua_pop(L, 1);
  return (uint32_t)v;
}

static void read_opts(lua_State *L, rag_hashing_opts *o) {
  static const char *const allowed[] = {"dim",          "words",        "ngrams",
                                        "ngram_min",    "ngram_max",    "word_weight",
                                        "ngram_weight", "tf",           "seed",
                                        "lowercase",    NULL};
  rag_hashing_opts d;
  rag_hashing_defaults(&d);
  lua_settop(L, 1);
  if (lua_isnil(L, 1)) {
    lua_newtable(L);
    lua_replace(L, 1);
  }
  if (!lua_istable(L, 1))
    luaL_error(L, "%s: opts must be a table, got %s", FNAME, luaL_typename(L, 1));
  lrag_checkopts(L, 1, FNAME, allowed);
  o->dim = lrag_optint(L, 1, "dim", d.dim, 1, RAG_HASHING_DIM_MAX, FNAME);
  o->words = opt_boolean(L, 1, "words", d.words);
  o->ngrams = opt_boolean(L, 1, "ngrams", d.ngrams);
  o->ngram_min = (unsigned)lrag_optint(L, 1, "ngram_min", d.ngram_min, 1,
                                       RAG_HASHING_NGRAM_MAX, FNAME);
  o->ngram_max = (unsigned)lrag_optint(L, 1, "ngram_max", d.ngram_max, 1,
                                       RAG_HASHING_NGRAM_MAX, FNAME);
  o->word_weight = opt_weight(L, 1, "word_weight", d.word_weight);
  o->ngram_weight = opt_weight(L, 1, "ngram_weight", d.ngram_weight);
  o->tf = opt_tf(L, 1, d.tf);
  o->seed = opt_seed(L, 1);
  o->lowercase = opt_boolean(L, 1, "lowercase", d.lowercase);
  if (o->ngram_min > o->ngram_max)
    luaL_error(L, "%s: option 'ngram_min' (%d) must not exceed 'ngram_max' (%d)", FNAME,
               (int)o->ngram_min, (int)o->ngram_max);
  if (!o->words && !o->ngrams)
    luaL_error(L, "%s: options 'words' and 'ngrams' must not both be false", FNAME);
}

/* {====== Methods ======} */

static int hashing_new(lua_State *L) {
  rag_hashing_opts o;
  lhashing *u;
  int rc;
  read_opts(L, &o);
  u = (lhashing *)lua_newuserdatauv(L, sizeof *u + (o.dim - 1) * sizeof(float), 0);
  u->p = NULL;
  u->dim = o.dim;
  luaL_setmetatable(L, MT);
  rc = rag_hashing_new(&o, &u->p);
  if (rc == RAG_ENOMEM) return luaL_error(L, "%s: not enough memory", FNAME);
  if (rc != RAG_OK) return luaL_error(L, "%s: invalid options", FNAME);
  return 1;
}

static int little_endian(void) {
  const uint32_t one = 1;
  unsigned char c;
  memcpy(&c, &one, 1);
  return c == 1;
}

/* Pushes the vector in u->out as a packed little-endian float32 string. */
static void push_packed(lua_State *L, lhashing *u) {
  unsigned char *b = (unsigned char *)u->out;
  size_t i;
  if (!little_endian()) {
    for (i = 0; i < 4 * u->dim; i += 4) {
      unsigned char t = b[i];
      b[i] = b[i + 3], b[i + 3] = t;
      t = b[i + 1], b[i + 1] = b[i + 2], b[i + 2] = t;
    }
  }
  lua_pushlstring(L, (const char *)b, 4 * u->dim);
}

/* Raises unless every texts[i] is a string; returns #texts. */
static size_t check_texts(lua_State *L) {
  size_t n, i;
  if (!lua_istable(L, 2))
    luaL_error(L, "%s: texts must be a list of strings, got %s", FNAME, luaL_typename(L, 2));
  n = lua_rawlen(L, 2);
  if (n > 0x7fffffff) luaL_error(L, "%s: too many texts", FNAME);
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, 2, (int)i);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: text %d must be a string, got %s", FNAME, (int)i,
                 luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  return n;
}

static int hashing_embed(lua_State *L) {
  static const char *const allowed[] = {"packed", NULL};
  lhashing *u = check_hashing(L);
  size_t n, i;
  int packed = 0;
  n = check_texts(L);
  if (!lua_isnoneornil(L, 3)) {
    if (!lua_istable(L, 3))
      luaL_error(L, "%s: opts must be a table, got %s", FNAME, luaL_typename(L, 3));
    lrag_checkopts(L, 3, FNAME, allowed);
    packed = opt_boolean(L, 3, "packed", 0);
  }
  lua_settop(L, 2);
  lua_createtable(L, (int)n, 0);
  for (i = 1; i <= n; i++) {
    size_t len, errpos = 0;
    const char *s;
    int rc;
    lua_rawgeti(L, 2, (int)i);
    s = lua_tolstring(L, -1, &len);
    rc = rag_hashing_embed(u->p, s, len, u->out, &errpos);
    lua_pop(L, 1);
    if (rc == RAG_EENCODING)
      return lrag_fail(L, "encoding", "%s: text %d: invalid utf-8 at byte %d", FNAME, (int)i,
                       (int)errpos);
    if (rc != RAG_OK) return luaL_error(L, "%s: not enough memory", FNAME);
    if (packed) push_packed(L, u);
    else lrag_pushfloats(L, u->out, u->dim);
    lua_rawseti(L, -2, (int)i);
  }
  return 1;
}

static int hashing_dim(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)check_hashing(L)->dim);
  return 1;
}

static int hashing_config(lua_State *L) {
  const rag_hashing_opts *o = rag_hashing_config(check_hashing(L)->p);
  lua_createtable(L, 0, 10);
  lua_pushinteger(L, (lua_Integer)o->dim);
  lua_setfield(L, -2, "dim");
  lua_pushboolean(L, o->words);
  lua_setfield(L, -2, "words");
  lua_pushboolean(L, o->ngrams);
  lua_setfield(L, -2, "ngrams");
  lua_pushinteger(L, (lua_Integer)o->ngram_min);
  lua_setfield(L, -2, "ngram_min");
  lua_pushinteger(L, (lua_Integer)o->ngram_max);
  lua_setfield(L, -2, "ngram_max");
  lua_pushnumber(L, o->word_weight);
  lua_setfield(L, -2, "word_weight");
  lua_pushnumber(L, o->ngram_weight);
  lua_setfield(L, -2, "ngram_weight");
  lua_pushstring(L, tf_names[o->tf]);
  lua_setfield(L, -2, "tf");
#if LUA_VERSION_NUM >= 503
  lua_pushinteger(L, (lua_Integer)o->seed);
#else
  lua_pushnumber(L, (lua_Number)o->seed); /* lua_Integer may be 32 bits */
#endif
  lua_setfield(L, -2, "seed");
  lua_pushboolean(L, o->lowercase);
  lua_setfield(L, -2, "lowercase");
  return 1;
}

static int hashing_close(lua_State *L) {
  lhashing *u = (lhashing *)luaL_checkudata(L, 1, MT);
  rag_hashing_free(u->p);
  u->p = NULL;
  return 0;
}

static int hashing_tostring(lua_State *L) {
  lhashing *u = (lhashing *)luaL_checkudata(L, 1, MT);
  if (u->p == NULL) lua_pushliteral(L, "rag.hashing (closed)");
  else lua_pushfstring(L, "rag.hashing (dim %d)", (int)u->dim);
  return 1;
}

static const luaL_Reg hashing_methods[] = {
    {"close", hashing_close}, {"config", hashing_config}, {"dim", hashing_dim},
    {"embed", hashing_embed}, {NULL, NULL},
};

static const luaL_Reg hashing_metamethods[] = {
    {"__close", hashing_close}, {"__gc", hashing_close}, {"__tostring", hashing_tostring},
    {NULL, NULL},
};

int lrag_open_hashing(lua_State *L) {
  static const luaL_Reg fns[] = {{"new", hashing_new}, {NULL, NULL}};
  if (luaL_newmetatable(L, MT)) {
    luaL_setfuncs(L, hashing_metamethods, 0);
    luaL_newlib(L, hashing_methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, fns, 0);
  return 0;
}
