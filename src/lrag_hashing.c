/*
** lrag_hashing.c: rag.core.hashing.new(opts) makes a "rag.hashing" userdata
** over the hashing embedder (rag.embed.hashing in the facade): h:embed,
** h:dim, h:config, h:close. Vectors are Lua arrays of numbers or packed
** little-endian float32 strings, the format of rag.vec.pack.
*/
#include "lrag.h"

#include "lrag_vec.h"
#include "rag.h"
#include "rag_hashing.h"

#define MT "rag.hashing"
#define FNAME "rag.embed.hashing"

typedef struct lhashing {
  rag_hashing *p; /* NULL once closed */
  size_t dim;
} lhashing;

static const char *const tf_names[] = {"sqrt", "raw", NULL};

static void hashing_fin(void *u) {
  rag_hashing_free(((lhashing *)u)->p);
}

static const lrag_class hashing_class;

static lhashing *check_open(lua_State *L) {
  return (lhashing *)lrag_checkobject(L, 1, &hashing_class, FNAME);
}

/* {====== Construction ======} */

static void read_opts(lua_State *L, rag_hashing_opts *o) {
  static const char *const allowed[] = {"dim",          "words",        "ngrams",
                                        "ngram_min",    "ngram_max",    "word_weight",
                                        "ngram_weight", "tf",           "seed",
                                        "lowercase",    NULL};
  rag_hashing_defaults(o);
  lrag_checkopts(L, 1, FNAME, allowed);
  o->dim = (size_t)lrag_optinteger(L, 1, FNAME, "dim", (lua_Integer)o->dim, 1,
                                   RAG_HASHING_DIM_MAX);
  o->words = lrag_optboolean(L, 1, FNAME, "words", o->words);
  o->ngrams = lrag_optboolean(L, 1, FNAME, "ngrams", o->ngrams);
  o->ngram_min = (unsigned)lrag_optinteger(L, 1, FNAME, "ngram_min", o->ngram_min, 1,
                                           RAG_HASHING_NGRAM_MAX);
  o->ngram_max = (unsigned)lrag_optinteger(L, 1, FNAME, "ngram_max", o->ngram_max, 1,
                                           RAG_HASHING_NGRAM_MAX);
  o->word_weight = lrag_optnumber(L, 1, FNAME, "word_weight", o->word_weight,
                                  RAG_HASHING_WEIGHT_MIN, RAG_HASHING_WEIGHT_MAX);
  o->ngram_weight = lrag_optnumber(L, 1, FNAME, "ngram_weight", o->ngram_weight,
                                   RAG_HASHING_WEIGHT_MIN, RAG_HASHING_WEIGHT_MAX);
  o->tf = (rag_hashing_tf)lrag_optenum(L, 1, FNAME, "tf", o->tf, tf_names);
  o->seed = (uint32_t)lrag_optinteger(L, 1, FNAME, "seed", o->seed, 0, 4294967295.0);
  o->lowercase = lrag_optboolean(L, 1, FNAME, "lowercase", o->lowercase);
  if (o->ngram_min > o->ngram_max)
    luaL_error(L, "%s: option 'ngram_min' (%d) must not exceed 'ngram_max' (%d)", FNAME,
               (int)o->ngram_min, (int)o->ngram_max);
  if (!o->words && !o->ngrams)
    luaL_error(L, "%s: options 'words' and 'ngrams' must not both be false", FNAME);
}

static int hashing_new(lua_State *L) {
  rag_hashing_opts o;
  lhashing *u;
  int rc;
  read_opts(L, &o);
  u = (lhashing *)lrag_newobject(L, &hashing_class, sizeof *u);
  u->dim = o.dim;
  rc = rag_hashing_new(&o, &u->p);
  if (rc != RAG_OK) return lrag_error(L, rc, FNAME, rc == RAG_ENOMEM ? NULL : "invalid options");
  return 1;
}

/* {====== Methods ======} */

static int embed_one(void *p, const char *s, size_t len, float *out, size_t *errpos) {
  return rag_hashing_embed((rag_hashing *)p, s, len, out, errpos);
}

static int hashing_embed(lua_State *L) {
  static const char *const allowed[] = {"packed", NULL};
  lhashing *u = check_open(L);
  int packed;
  lrag_checktexts(L, 2, FNAME, "text %d");
  lrag_checkopts(L, 3, FNAME, allowed);
  packed = lrag_optboolean(L, 3, FNAME, "packed", 0);
  return lrag_embedtexts(L, 2, u->dim, packed, FNAME, embed_one, u->p);
}

static int hashing_dim(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)check_open(L)->dim);
  return 1;
}

static int hashing_config(lua_State *L) {
  const rag_hashing_opts *o = rag_hashing_config(check_open(L)->p);
  lua_createtable(L, 0, 10);
  lrag_setint(L, "dim", (lua_Integer)o->dim);
  lrag_setbool(L, "words", o->words);
  lrag_setbool(L, "ngrams", o->ngrams);
  lrag_setint(L, "ngram_min", (lua_Integer)o->ngram_min);
  lrag_setint(L, "ngram_max", (lua_Integer)o->ngram_max);
  lrag_setnum(L, "word_weight", o->word_weight);
  lrag_setnum(L, "ngram_weight", o->ngram_weight);
  lrag_setstr(L, "tf", tf_names[o->tf]);
#if LUA_VERSION_NUM >= 503
  lua_pushinteger(L, (lua_Integer)o->seed);
#else
  lua_pushnumber(L, (lua_Number)o->seed); /* lua_Integer may be 32 bits */
#endif
  lua_setfield(L, -2, "seed");
  lrag_setbool(L, "lowercase", o->lowercase);
  return 1;
}

static int hashing_tostring(lua_State *L) {
  lhashing *u = (lhashing *)luaL_checkudata(L, 1, MT);
  if (u->p == NULL) lua_pushliteral(L, "rag.hashing (closed)");
  else lua_pushfstring(L, "rag.hashing (dim %d)", (int)u->dim);
  return 1;
}

static const luaL_Reg hashing_methods[] = {
    {"config", hashing_config},
    {"dim", hashing_dim},
    {"embed", hashing_embed},
    {NULL, NULL},
};

static const luaL_Reg hashing_metamethods[] = {
    {"__tostring", hashing_tostring},
    {NULL, NULL},
};

static const lrag_class hashing_class = {MT, "embedder", hashing_methods, hashing_metamethods,
                                         hashing_fin};

/* rag.core.hashing.new: public as rag.embed.hashing, documented there. */
int lrag_open_hashing(lua_State *L) {
  lrag_newclass(L, &hashing_class);
  lua_pushcfunction(L, hashing_new);
  lua_setfield(L, -2, "new");
  return 0;
}
