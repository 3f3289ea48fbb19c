/*
** lrag_bert.c: rag.core.bert.load(dir [, opts]) makes a "rag.bert" userdata
** over the core model: embed (embedders), score (cross-encoders), tokenize,
** dim, max_tokens, stats, close. rag.embed.bert and
** rag.rerank.cross_encoder (Lua) build on it.
*/
#include "lrag.h"

#include <string.h>

#include "lrag_vec.h"
#include "rag.h"
#include "rag_bert.h"

#define MT "rag.bert"
#define NAME "rag.bert"

typedef struct lbert {
  rag_bert *m; /* NULL once closed */
} lbert;

static void bert_fin(void *u) {
  rag_bert_free(((lbert *)u)->m);
}

static const lrag_class bert_class;

static rag_bert *check_open(lua_State *L, const char *fname) {
  return ((lbert *)lrag_checkobject(L, 1, &bert_class, fname))->m;
}

/* {====== Loading ======} */

static int bert_load(lua_State *L) {
  static const char *const allowed[] = {"portable", "quantize", NULL};
  const char *dir = lrag_checkpath(L, 1, NAME ".load");
  rag_bert_opts o;
  rag_bert_error e;
  lbert *u;
  int rc;
  memset(&o, 0, sizeof o);
  lrag_checkopts(L, 2, NAME ".load", allowed);
  o.portable = lrag_optboolean(L, 2, NAME ".load", "portable", 0);
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "quantize");
    if (!lua_isnil(L, -1)) {
      const char *q = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
      if (q == NULL || (strcmp(q, "int8") != 0 && strcmp(q, "none") != 0))
        luaL_error(L, NAME ".load: option 'quantize' must be \"int8\" or \"none\"");
      o.quantize = strcmp(q, "int8") == 0;
    }
    lua_pop(L, 1);
  }
  u = (lbert *)lrag_newobject(L, &bert_class, sizeof *u);
  rc = rag_bert_load(dir, &o, &u->m, &e);
  if (rc == RAG_OK) return 1;
  if (rc == RAG_ENOMEM) return lrag_error(L, rc, NAME ".load", NULL);
  return lrag_dir_error(L, rc, NAME ".load", dir, e.file, e.why, e.err);
}

/* {====== Running ======} */

/* The strings of the list at idx as two arrays (userdata, freed by the GC). */
static size_t texts_of(lua_State *L, int idx, const char *fname, const char *const **texts,
                       const size_t **lens) {
  size_t n = lrag_checktexts(L, idx, fname, "texts[%d]"), i;
  const char **t = (const char **)lua_newuserdatauv(L, (n + 1) * sizeof *t, 0);
  size_t *l = (size_t *)lua_newuserdatauv(L, (n + 1) * sizeof *l, 0);
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, idx, (int)i + 1);
    t[i] = lua_tolstring(L, -1, &l[i]); /* held by the list */
    lua_pop(L, 1);
  }
  *texts = t;
  *lens = l;
  return n;
}

static int run_error(lua_State *L, int rc, const char *fname, size_t bad, size_t errpos) {
  if (rc == RAG_EENCODING) {
    if (bad == 0) return lrag_error(L, rc, fname, "query: invalid utf-8 at byte %lu",
                                    (unsigned long)errpos);
    return lrag_error(L, rc, fname, "text %lu: invalid utf-8 at byte %lu", (unsigned long)bad,
                      (unsigned long)errpos);
  }
  if (rc == RAG_ETOOBIG) return luaL_error(L, "%s: too many texts", fname);
  return lrag_error(L, rc, fname, NULL);
}

/* m:embed(texts [, { packed = }]) -> { vector, ... } | nil, msg, code */
static int bert_embed(lua_State *L) {
  static const char *const allowed[] = {"packed", NULL};
  static const char *fname = NAME ": embed";
  rag_bert *m = check_open(L, fname);
  const char *const *texts;
  const size_t *lens;
  rag_bert_info info;
  size_t n, i, bad = 0, errpos = 0;
  float *out;
  int packed, rc;
  rag_bert_describe(m, &info);
  if (info.cross) luaL_error(L, "%s: a cross-encoder has no embeddings (use score)", fname);
  lrag_checkopts(L, 3, fname, allowed);
  packed = lrag_optboolean(L, 3, fname, "packed", 0);
  n = texts_of(L, 2, fname, &texts, &lens);
  if (RAG_MUL_OVERFLOWS(n, info.dim * sizeof(float))) return luaL_error(L, "%s: too many texts", fname);
  out = (float *)lua_newuserdatauv(L, n * info.dim * sizeof *out + 1, 0);
  rc = rag_bert_embed(m, texts, lens, n, out, &bad, &errpos);
  if (rc != RAG_OK) return run_error(L, rc, fname, bad, errpos);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    if (packed) lrag_pushpacked(L, out + i * info.dim, info.dim);
    else lrag_pushfloats(L, out + i * info.dim, info.dim);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* m:score(query, texts) -> { logit, ... } | nil, msg, code */
static int bert_score(lua_State *L) {
  static const char *fname = NAME ": score";
  rag_bert *m = check_open(L, fname);
  const char *const *texts;
  const size_t *lens;
  rag_bert_info info;
  const char *q;
  size_t qlen, n, i, bad = 0, errpos = 0;
  float *out;
  int rc;
  rag_bert_describe(m, &info);
  if (!info.cross) luaL_error(L, "%s: an embedder has no scores (use embed)", fname);
  if (lua_type(L, 2) != LUA_TSTRING)
    luaL_error(L, "%s: query must be a string, got %s", fname, luaL_typename(L, 2));
  q = lua_tolstring(L, 2, &qlen);
  n = texts_of(L, 3, fname, &texts, &lens);
  out = (float *)lua_newuserdatauv(L, n * sizeof *out + 1, 0);
  rc = rag_bert_score(m, q, qlen, texts, lens, n, out, &bad, &errpos);
  if (rc != RAG_OK) return run_error(L, rc, fname, bad, errpos);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushnumber(L, (lua_Number)out[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* m:tokenize(text [, pair]) -> ids, type_ids | nil, msg, code */
static int bert_tokenize(lua_State *L) {
  static const char *fname = NAME ": tokenize";
  rag_bert *m = check_open(L, fname);
  const char *a, *b = NULL;
  size_t alen, blen = 0, n, i, errpos = 0;
  const uint32_t *ids;
  const uint8_t *tt;
  int inb, rc;
  if (lua_type(L, 2) != LUA_TSTRING)
    luaL_error(L, "%s: text must be a string, got %s", fname, luaL_typename(L, 2));
  a = lua_tolstring(L, 2, &alen);
  if (!lua_isnoneornil(L, 3)) {
    if (lua_type(L, 3) != LUA_TSTRING)
      luaL_error(L, "%s: pair must be a string, got %s", fname, luaL_typename(L, 3));
    b = lua_tolstring(L, 3, &blen);
  }
  rc = rag_bert_tokenize(m, a, alen, b, blen, &ids, &tt, &n, &errpos, &inb);
  if (rc == RAG_EENCODING)
    return lrag_error(L, rc, fname, "text %d: invalid utf-8 at byte %lu", inb ? 2 : 1,
                      (unsigned long)errpos);
  if (rc != RAG_OK) return lrag_error(L, rc, fname, NULL);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushinteger(L, (lua_Integer)ids[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushinteger(L, (lua_Integer)tt[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 2;
}

/* {====== Introspection ======} */

static int bert_dim(lua_State *L) {
  rag_bert_info info;
  rag_bert_describe(check_open(L, NAME ": dim"), &info);
  lua_pushinteger(L, (lua_Integer)info.dim);
  return 1;
}

static int bert_max_tokens(lua_State *L) {
  rag_bert_info info;
  rag_bert_describe(check_open(L, NAME ": max_tokens"), &info);
  lua_pushinteger(L, (lua_Integer)info.max_tokens);
  return 1;
}

static int bert_stats(lua_State *L) {
  rag_bert_info info;
  rag_bert_describe(check_open(L, NAME ": stats"), &info);
  lua_createtable(L, 0, 16);
  lrag_setstr(L, "kind", info.cross ? "cross-encoder" : "embedder");
  lrag_setint(L, "dim", (lua_Integer)info.dim);
  lrag_setint(L, "layers", (lua_Integer)info.layers);
  lrag_setint(L, "heads", (lua_Integer)info.heads);
  lrag_setint(L, "ff", (lua_Integer)info.ff);
  lrag_setint(L, "vocab", (lua_Integer)info.vocab);
  lrag_setint(L, "positions", (lua_Integer)info.positions);
  lrag_setint(L, "max_tokens", (lua_Integer)info.max_tokens);
  lrag_setstr(L, "pooling", info.pooling);
  lrag_setbool(L, "normalize", info.normalize);
  lrag_setstr(L, "dtype", info.dtype);
  lrag_setstr(L, "weights", info.weights);
  lrag_setstr(L, "kernel", info.kernel);
  lrag_setint(L, "mapped_bytes", (lua_Integer)info.mapped);
  lrag_setint(L, "owned_bytes", (lua_Integer)info.owned);
  return 1;
}

static const luaL_Reg bert_methods[] = {
    {"dim", bert_dim},
    {"embed", bert_embed},
    {"max_tokens", bert_max_tokens},
    {"score", bert_score},
    {"stats", bert_stats},
    {"tokenize", bert_tokenize},
    {NULL, NULL},
};

static const lrag_class bert_class = {MT, "model", bert_methods, NULL, bert_fin};

/* rag.core.bert.load: public through rag.embed.bert and rag.rerank.cross_encoder. */
int lrag_open_bert(lua_State *L) {
  lrag_newclass(L, &bert_class);
  lua_pushcfunction(L, bert_load);
  lua_setfield(L, -2, "load");
  return 0;
}
