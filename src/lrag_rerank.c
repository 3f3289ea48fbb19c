/*
** lrag_rerank.c: rag.rerank.mmr(hits, opts), rag.rerank.litm(hits [, opts])
** and rag.rerank.cutoff(hits, opts). Each returns a new list holding the
** caller's own hit tables, reordered or cut; the hits are not modified.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lrag.h"
#include "rag_rerank.h"

/* The hits at index 1: their count; checks that each is a table with an id. */
static size_t check_hits(lua_State *L, const char *fname) {
  size_t n = lrag_checklist(L, 1, fname, "hits must be a list of hits"), i;
  for (i = 1; i <= n; i++) {
    int t;
    lua_rawgeti(L, 1, (int)i);
    if (!lua_istable(L, -1))
      luaL_error(L, "%s: hit %d must be a table, got %s", fname, (int)i, luaL_typename(L, -1));
    lua_getfield(L, -1, "id");
    t = lua_type(L, -1);
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
      luaL_error(L, "%s: hit %d: id must be a string or a number, got %s", fname, (int)i,
                 luaL_typename(L, -1));
    lua_pop(L, 2);
  }
  return n;
}

/*
** The ids and (when `scores` is not NULL) the finite scores of the n hits,
** into arrays; number ids are converted into the anchor table at `anchor`.
*/
static void read_hits(lua_State *L, size_t n, int anchor, const char *fname, const char **ids,
                      size_t *lens, double *scores) {
  size_t i;
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, 1, (int)i + 1);
    lua_getfield(L, -1, "id");
    if (lua_type(L, -1) == LUA_TNUMBER) {
      lua_pushvalue(L, -1);
      ids[i] = lua_tolstring(L, -1, &lens[i]);
      lua_rawseti(L, anchor, (int)i + 1);
    } else {
      ids[i] = lua_tolstring(L, -1, &lens[i]); /* anchored by the hit */
    }
    lua_pop(L, 1);
    if (scores != NULL) {
      lua_getfield(L, -1, "score");
      if (lua_type(L, -1) != LUA_TNUMBER || !isfinite(lua_tonumber(L, -1)))
        luaL_error(L, "%s: hit %d: score must be a finite number, got %s", fname, (int)i + 1,
                   lua_type(L, -1) == LUA_TNUMBER ? "a non-finite number"
                                                  : luaL_typename(L, -1));
      scores[i] = lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
}

/* Pushes a new list of the hits at the given 0-based positions. */
static void push_picked(lua_State *L, const size_t *pos, size_t m) {
  size_t i;
  lua_createtable(L, (int)m, 0);
  for (i = 0; i < m; i++) {
    lua_rawgeti(L, 1, (int)pos[i] + 1);
    lua_rawseti(L, -2, (int)i + 1);
  }
}

/* The vector on top of the stack into out (dim floats); `n` 0 names the query. */
static void read_vector(lua_State *L, size_t dim, float *out, const char *fname, int n) {
  size_t i, len;
  char what[32];
  if (lua_type(L, -1) == LUA_TSTRING && lua_rawlen(L, -1) == dim * 4) { /* the usual case */
    memcpy(out, lua_tostring(L, -1), dim * 4);
    for (i = 0; i < dim; i++)
      if (!isfinite(out[i])) break;
    if (i == dim) return;
  }
  if (n == 0) snprintf(what, sizeof what, "query");
  else snprintf(what, sizeof what, "vector %d", n);
  if (lua_type(L, -1) == LUA_TSTRING) {
    const char *s = lua_tolstring(L, -1, &len);
    if (len != dim * 4)
      luaL_error(L, "%s: %s: a packed vector must have %d bytes (dim %d), got %d", fname, what,
                 (int)dim * 4, (int)dim, (int)len);
    memcpy(out, s, len);
  } else if (lua_istable(L, -1)) {
    len = lua_rawlen(L, -1);
    if (len != dim)
      luaL_error(L, "%s: %s has %d components, expected %d", fname, what, (int)len, (int)dim);
    for (i = 0; i < len; i++) {
      lua_rawgeti(L, -1, (int)i + 1);
      if (lua_type(L, -1) != LUA_TNUMBER)
        luaL_error(L, "%s: %s: component %d must be a number, got %s", fname, what, (int)i + 1,
                   luaL_typename(L, -1));
      out[i] = (float)lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
  } else {
    luaL_error(L, "%s: %s must be a table of numbers or a packed string, got %s", fname, what,
               luaL_typename(L, -1));
  }
  for (i = 0; i < dim; i++)
    if (!isfinite(out[i]))
      luaL_error(L, "%s: %s: component %d is not a finite float", fname, what, (int)i + 1);
}

/* The length of the vector on top, as a dimension. */
static size_t dim_of(lua_State *L, const char *fname) {
  size_t d = lua_type(L, -1) == LUA_TSTRING ? lua_rawlen(L, -1) / 4 : lua_rawlen(L, -1);
  if (d == 0 || d > 65536) luaL_error(L, "%s: vectors must have 1 to 65536 components", fname);
  return d;
}

static int rerank_mmr(lua_State *L) {
  static const char *fname = "rag.rerank.mmr";
  static const char *const allowed[] = {"vectors", "query", "lambda", "k", NULL};
  size_t n = check_hits(L, fname), k, dim = 0, i, nf, *order;
  int byid, rc, hasq;
  double lambda;
  const char **ids;
  size_t *lens;
  double *scores;
  float *vecs, *q;
  lrag_checkopts(L, 2, fname, allowed);
  lambda = lrag_optnumber(L, 2, fname, "lambda", 0.5, 0, 1);
  k = (size_t)lrag_optinteger(L, 2, fname, "k", (lua_Integer)n, 0, LRAG_MAXINT);
  if (k > n) k = n;
  lua_settop(L, 2);
  if (!lrag_opttable(L, 2, fname, "vectors")) /* 3 */
    luaL_error(L, "%s: option 'vectors' must be a table, got nil", fname);
  lua_getfield(L, 2, "query"); /* 4 */
  hasq = !lua_isnil(L, 4);
  lua_newtable(L); /* 5: anchors */
  lua_rawgeti(L, 3, 1);
  byid = lua_isnil(L, -1); /* a list parallel to hits, or a map by id */
  lua_pop(L, 1);
  if (!byid && lua_rawlen(L, 3) != n)
    luaL_error(L, "%s: vectors must have one vector per hit (%d), got %d", fname, (int)n,
               (int)lua_rawlen(L, 3));
  if (n == 0 && !hasq) {
    lua_newtable(L);
    return 1;
  }
  if (hasq) {
    lua_pushvalue(L, 4);
  } else {
    lua_rawgeti(L, 1, 1);
    lua_getfield(L, -1, "id");
    if (byid) {
      lua_pushstring(L, lua_tostring(L, -1));
      lua_gettable(L, 3);
      if (lua_isnil(L, -1))
        luaL_error(L, "%s: no vector for hit 1 (id '%s')", fname, lua_tostring(L, -2));
    } else {
      lua_rawgeti(L, 3, 1);
    }
  }
  dim = dim_of(L, fname);
  lua_settop(L, 5);
  if (RAG_MUL_OVERFLOWS(n + 1, dim * 4 + 64)) luaL_error(L, "%s: too many vectors", fname);
  nf = ((n + 1) * dim + 1) / 2 * 2; /* an even count keeps what follows 8-byte aligned */
  vecs = (float *)lua_newuserdatauv(
      L, nf * sizeof(float) + (n + 1) * (sizeof(char *) + 2 * sizeof(size_t) + sizeof(double)),
      0);
  q = vecs + n * dim;
  ids = (const char **)(void *)(vecs + nf);
  lens = (size_t *)(void *)(ids + n + 1);
  order = lens + n + 1;
  scores = (double *)(void *)(order + n + 1);
  read_hits(L, n, 5, fname, ids, lens, hasq ? NULL : scores);
  if (hasq) {
    lua_pushvalue(L, 4);
    read_vector(L, dim, q, fname, 0);
    lua_pop(L, 1);
  }
  for (i = 0; i < n; i++) {
    if (byid) {
      lua_pushlstring(L, ids[i], lens[i]);
      lua_gettable(L, 3);
      if (lua_isnil(L, -1))
        luaL_error(L, "%s: no vector for hit %d (id '%s')", fname, (int)i + 1, ids[i]);
    } else {
      lua_rawgeti(L, 3, (int)i + 1);
    }
    read_vector(L, dim, vecs + i * dim, fname, (int)i + 1);
    lua_pop(L, 1);
  }
  rc = rag_rerank_mmr(vecs, n, dim, hasq ? q : NULL, scores, lambda, k, ids, lens, order);
  if (rc != RAG_OK) return lrag_error(L, rc, fname, NULL);
  push_picked(L, order, k);
  return 1;
}

static int rerank_litm(lua_State *L) {
  static const char *fname = "rag.rerank.litm";
  static const char *const allowed[] = {"best_first", NULL};
  size_t n = check_hits(L, fname), *order;
  int best_first;
  lrag_checkopts(L, 2, fname, allowed);
  best_first = lrag_optboolean(L, 2, fname, "best_first", 1);
  order = (size_t *)lua_newuserdatauv(L, (n + 1) * sizeof(size_t), 0);
  rag_rerank_litm(n, best_first, order);
  push_picked(L, order, n);
  return 1;
}

static int rerank_cutoff(lua_State *L) {
  static const char *fname = "rag.rerank.cutoff";
  static const char *const allowed[] = {"min_score", "top_p", NULL};
  size_t n = check_hits(L, fname), i, m = 0, kept;
  double min_score, top_p;
  const char **ids;
  size_t *lens, *pos, *keep;
  double *scores;
  int rc;
  lrag_checkopts(L, 2, fname, allowed);
  min_score = lrag_optnumber(L, 2, fname, "min_score", -HUGE_VAL, -HUGE_VAL, HUGE_VAL);
  top_p = lrag_optnumber(L, 2, fname, "top_p", -1, 0, 1); /* -1: none */
  lua_settop(L, 2);
  lua_newtable(L); /* 3: anchors */
  ids = (const char **)lua_newuserdatauv(
      L, (n + 1) * (sizeof(char *) + 3 * sizeof(size_t) + 2 * sizeof(double)), 0);
  lens = (size_t *)(void *)(ids + n + 1);
  pos = lens + n + 1;
  keep = pos + n + 1;
  scores = (double *)(void *)(keep + n + 1);
  read_hits(L, n, 3, fname, ids, lens, scores);
  /* min_score first, in the given order; then top-p over what is left */
  for (i = 0; i < n; i++) {
    if (!(scores[i] >= min_score)) continue;
    ids[m] = ids[i];
    lens[m] = lens[i];
    scores[m] = scores[i];
    pos[m++] = i;
  }
  if (top_p < 0) {
    push_picked(L, pos, m);
    return 1;
  }
  rc = rag_rerank_top_p(scores, m, top_p, ids, lens, keep, &kept);
  if (rc != RAG_OK) return lrag_error(L, rc, fname, NULL);
  for (i = 0; i < kept; i++) keep[i] = pos[keep[i]];
  push_picked(L, keep, kept);
  return 1;
}

int lrag_open_rerank(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"cutoff", rerank_cutoff}, {"litm", rerank_litm}, {"mmr", rerank_mmr}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
