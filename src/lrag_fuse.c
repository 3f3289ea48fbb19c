/*
** lrag_fuse.c: rag.fuse.rrf(lists [, opts]) and rag.fuse.scores(lists [, opts]).
** A hit list is a Lua list of hits ({ id =, score = }) or of bare ids; the
** lists are read into borrowed arrays (the strings stay anchored by the
** arguments), fused by rag_fuse.c, and returned as new { id =, score = } hits.
*/
#include <math.h>
#include <string.h>

#include "lrag.h"
#include "rag_fuse.h"

/* Stack slots holding the strings "id" and "score": keys without a lookup by C string. */
#define KEY_ID 3
#define KEY_SCORE 4

/* Puts the keys in their slots, after the arguments (lists, opts). */
static void push_keys(lua_State *L) {
  lua_settop(L, 2);
  lua_pushliteral(L, "id");
  lua_pushliteral(L, "score");
}

/* opts.limit: how many fused hits to return (default all). */
static size_t opt_limit(lua_State *L, const char *fname) {
  lua_Integer lim = lrag_optinteger(L, 2, fname, "limit", -1, 0, LRAG_MAXINT);
  return lim < 0 ? (size_t)-1 : (size_t)lim;
}

/* What the read lists live in: a userdata at `box` on the stack. */
typedef struct lists {
  rag_fuse_list *l;
  size_t nl, total;
  rag_fused *out;
} lists;

/* A number id as a string kept alive in the anchor table at `anchor`. */
static const char *anchored(lua_State *L, int anchor, size_t *len) {
  const char *s;
  lua_pushvalue(L, -1);
  s = lua_tolstring(L, -1, len);
  lua_rawseti(L, anchor, (int)lua_rawlen(L, anchor) + 1);
  return s;
}

/* The id of the value on top (a hit or a bare id); pops nothing. */
static const char *entry_id(lua_State *L, int anchor, int needscore, const char *fname,
                            size_t li, size_t j, size_t *len, double *score) {
  int t = lua_type(L, -1);
  const char *id = NULL;
  *score = 0;
  if (needscore && (t == LUA_TSTRING || t == LUA_TNUMBER))
    luaL_error(L, "%s: list %d, hit %d: score must be a finite number, got a bare id", fname,
               (int)li, (int)j);
  if (t == LUA_TSTRING) return lua_tolstring(L, -1, len);
  if (t == LUA_TNUMBER) return anchored(L, anchor, len);
  if (t != LUA_TTABLE)
    luaL_error(L, "%s: list %d, hit %d must be a table or an id, got %s", fname, (int)li,
               (int)j, luaL_typename(L, -1));
  lua_pushvalue(L, KEY_ID);
  lua_gettable(L, -2);
  t = lua_type(L, -1);
  if (t == LUA_TSTRING) id = lua_tolstring(L, -1, len);
  else if (t == LUA_TNUMBER) id = anchored(L, anchor, len);
  else
    luaL_error(L, "%s: list %d, hit %d: id must be a string or a number, got %s", fname,
               (int)li, (int)j, luaL_typename(L, -1));
  lua_pop(L, 1); /* the string stays anchored by the hit */
  if (needscore) {
    lua_pushvalue(L, KEY_SCORE);
    lua_gettable(L, -2);
    if (lua_type(L, -1) != LUA_TNUMBER || !isfinite(lua_tonumber(L, -1)))
      luaL_error(L, "%s: list %d, hit %d: score must be a finite number, got %s", fname,
                 (int)li, (int)j,
                 lua_type(L, -1) == LUA_TNUMBER ? "a non-finite number" : luaL_typename(L, -1));
    *score = lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  return id;
}

/*
** Raises unless the value at -1, entry i of lists, is a hit list: a table
** whose entries are keys 1..n. A hit ({ id = ... }) there means one hit
** list was passed where a list of them is expected, which would otherwise
** fuse to nothing.
*/
static void check_list(lua_State *L, const char *fname, size_t i) {
  if (!lua_istable(L, -1))
    luaL_error(L, "%s: list %d must be a table, got %s", fname, (int)i, luaL_typename(L, -1));
  if (lua_rawlen(L, -1) > 0) return;
  lua_pushnil(L);
  if (lua_next(L, -2) == 0) return; /* an empty list */
  lua_pop(L, 2);
  lua_getfield(L, -1, "id");
  if (!lua_isnil(L, -1))
    luaL_error(L, "%s: lists must be a list of hit lists; got a hit at %d (did you pass one list?)",
               fname, (int)i);
  luaL_error(L, "%s: list %d must be a list of hits (keys 1..n), got a table with other keys",
             fname, (int)i);
}

/*
** The number of lists at index 1 and (*total) of their entries; raises
** unless it is a list of hit lists.
*/
static size_t check_lists(lua_State *L, const char *fname, size_t *total) {
  size_t i, n = lrag_checklist(L, 1, fname, "lists must be a table of hit lists");
  lua_pushnil(L);
  if (n == 0 && lua_next(L, 1) != 0)
    luaL_error(L, "%s: lists must be a list of hit lists (keys 1..n), got a table with other keys",
               fname);
  lua_pop(L, 1);
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, (int)i);
    check_list(L, fname, i);
    *total += lua_rawlen(L, -1);
    lua_pop(L, 1);
  }
  return n;
}

/* Reads lists at index 1 into a userdata and an anchor table, both pushed. */
static void read_lists(lua_State *L, int needscore, const char *fname, lists *r) {
  size_t i, j, e = 0, cnt;
  const char **ids;
  size_t *lens;
  double *scores;
  int anchor;
  r->total = 0;
  r->nl = check_lists(L, fname, &r->total);
  cnt = r->total + 1;
  if (r->nl > 0x7fffffff || RAG_MUL_OVERFLOWS(cnt, 64) || RAG_MUL_OVERFLOWS(r->nl + 1, 64))
    luaL_error(L, "%s: too many hits", fname);
  /* every part is a multiple of 8 bytes, so each stays aligned */
  r->out = (rag_fused *)lua_newuserdatauv(
      L, cnt * (sizeof(rag_fused) + sizeof(char *) + sizeof(size_t) + sizeof(double)) +
             (r->nl + 1) * sizeof(rag_fuse_list), 0);
  ids = (const char **)(void *)(r->out + cnt);
  lens = (size_t *)(void *)(ids + cnt);
  scores = (double *)(void *)(lens + cnt);
  r->l = (rag_fuse_list *)(void *)(scores + cnt);
  lua_newtable(L);
  anchor = lua_gettop(L);
  for (i = 0; i < r->nl; i++) {
    rag_fuse_list *l = &r->l[i];
    lua_rawgeti(L, 1, (int)i + 1);
    l->n = lua_rawlen(L, -1);
    if (l->n > r->total - e) luaL_error(L, "%s: lists changed while read", fname);
    l->ids = ids + e;
    l->lens = lens + e;
    l->scores = scores + e;
    l->weight = 1;
    for (j = 0; j < l->n; j++, e++) {
      lua_rawgeti(L, -1, (int)j + 1);
      ids[e] = entry_id(L, anchor, needscore, fname, i + 1, j + 1, &lens[e], &scores[e]);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
}

/* opts.weights: one finite, non-negative number per list, into l[].weight. */
static int read_weights(lua_State *L, int opts, const char *fname, lists *r) {
  size_t i;
  if (!lrag_opttable(L, opts, fname, "weights")) return 0;
  if (lua_rawlen(L, -1) != r->nl)
    luaL_error(L, "%s: option 'weights' must be a list of %d numbers, one per list", fname,
               (int)r->nl);
  for (i = 0; i < r->nl; i++) {
    lua_rawgeti(L, -1, (int)i + 1);
    if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0) ||
        !isfinite(lua_tonumber(L, -1)))
      luaL_error(L, "%s: weight %d must be a finite number >= 0", fname, (int)i + 1);
    r->l[i].weight = lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return 1;
}

static void push_fused(lua_State *L, const rag_fused *f, size_t n) {
  size_t i;
  lua_createtable(L, n > 0x7fffffff ? 0 : (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, KEY_ID);
    lua_pushlstring(L, f[i].id, f[i].len);
    lua_rawset(L, -3);
    lua_pushvalue(L, KEY_SCORE);
    lua_pushnumber(L, f[i].score);
    lua_rawset(L, -3);
    lua_rawseti(L, -2, (int)i + 1);
  }
}

static const char *const presets[] = {"paper", "langchain", "llamaindex", "haystack", NULL};

static int fuse_rrf(lua_State *L) {
  static const char *fname = "rag.fuse.rrf";
  static const char *const allowed[] = {"k", "rank_base", "weights", "preset", "limit", NULL};
  static const double pk[] = {60, 60, 60, 61}, pbase[] = {1, 1, 0, 0};
  lists r;
  int preset, weighted, rc;
  double k, base, div = 1, sum = 0;
  size_t i, n, limit;
  lrag_checkopts(L, 2, fname, allowed);
  preset = lrag_optenum(L, 2, fname, "preset", 0, presets);
  k = lrag_optnumber(L, 2, fname, "k", pk[preset], -HUGE_VAL, HUGE_VAL);
  base = lrag_optnumber(L, 2, fname, "rank_base", pbase[preset], -HUGE_VAL, HUGE_VAL);
  if (!isfinite(k) || !isfinite(base) || !(k + base > 0))
    luaL_error(L, "%s: options 'k' and 'rank_base' must be finite, with k + rank_base > 0",
               fname);
  limit = opt_limit(L, fname);
  push_keys(L);
  read_lists(L, 0, fname, &r);
  weighted = read_weights(L, 2, fname, &r);
  for (i = 0; i < r.nl; i++) sum += r.l[i].weight;
  if (preset == 1 && !weighted) /* EnsembleRetriever: equal weights summing to 1 */
    for (i = 0; i < r.nl; i++) r.l[i].weight = 1.0 / (double)r.nl;
  if (preset == 2) /* QueryFusionRetriever ignores weights */
    for (i = 0; i < r.nl; i++) r.l[i].weight = 1;
  if (preset == 3 && r.nl > 0) { /* DocumentJoiner: normalised, scaled so 1 is the top */
    if (weighted && !(sum > 0)) luaL_error(L, "%s: option 'weights' must not all be 0", fname);
    for (i = 0; i < r.nl; i++)
      r.l[i].weight = (weighted ? r.l[i].weight / sum : 1.0 / (double)r.nl) * (double)r.nl;
    div = (double)r.nl / k;
  }
  rc = rag_fuse_rrf(r.l, r.nl, k, base, div, limit, r.out, &n);
  if (rc != RAG_OK) return lrag_error(L, rc, fname, rc == RAG_ENOMEM ? NULL : "too many hits");
  push_fused(L, r.out, n);
  return 1;
}

static int fuse_scores(lua_State *L) {
  static const char *fname = "rag.fuse.scores";
  static const char *const allowed[] = {"method", "weights", "combine", "limit", NULL};
  static const char *const methods[] = {"minmax", "zscore", "dbsf", NULL};
  static const char *const combines[] = {"sum", "max", NULL};
  lists r;
  int method, max, rc;
  size_t n, limit;
  lrag_checkopts(L, 2, fname, allowed);
  method = lrag_optenum(L, 2, fname, "method", 0, methods);
  max = lrag_optenum(L, 2, fname, "combine", 0, combines);
  limit = opt_limit(L, fname);
  push_keys(L);
  read_lists(L, 1, fname, &r);
  read_weights(L, 2, fname, &r);
  rc = rag_fuse_scores(r.l, r.nl, (rag_fuse_method)method, max, limit, r.out, &n);
  if (rc != RAG_OK) return lrag_error(L, rc, fname, rc == RAG_ENOMEM ? NULL : "too many hits");
  push_fused(L, r.out, n);
  return 1;
}

int lrag_open_fuse(lua_State *L) {
  static const luaL_Reg fns[] = {{"rrf", fuse_rrf}, {"scores", fuse_scores}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
