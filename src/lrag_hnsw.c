/*
** lrag_hnsw.c: rag.hnsw.new(opts) and rag.hnsw.load(path) make a "rag.hnsw"
** userdata over the HNSW graph: add, remove, search, get, compact, stats,
** save, close, #h.
*/
#include "lrag.h"

#include <string.h>

#include "lrag_vec.h"
#include "rag.h"
#include "rag_hnsw.h"

#define MT "rag.hnsw"

typedef struct lhnsw {
  rag_hnsw *h; /* NULL once closed */
  size_t dim;
  float in[1]; /* dim floats: the converted argument */
} lhnsw;

static lhnsw *check_open(lua_State *L, const char *fname) {
  lhnsw *u = (lhnsw *)luaL_checkudata(L, 1, MT);
  if (u->h == NULL) luaL_error(L, "%s: index is closed", fname);
  return u;
}

static lhnsw *push_index(lua_State *L, size_t dim) {
  lhnsw *u = (lhnsw *)lua_newuserdatauv(L, sizeof *u + dim * sizeof(float), 0);
  u->h = NULL;
  u->dim = dim;
  luaL_setmetatable(L, MT);
  return u;
}

static int hnsw_new(lua_State *L) {
  static const char *const allowed[] = {"dim", "metric", "dtype", "simd", "M", "ef_construction",
                                        "ef_search", "seed", "capacity", NULL};
  static const char *fname = "rag.hnsw.new";
  rag_hnsw_opts o;
  size_t dim;
  int metric, dtype, portable, rc;
  lhnsw *u;
  luaL_checktype(L, 1, LUA_TTABLE);
  lrag_checkopts(L, 1, fname, allowed);
  lrag_vecopts(L, 1, fname, &dim, &metric, &dtype, &portable);
  rag_hnsw_defaults(&o, dim);
  o.metric = (rag_metric)metric;
  o.dtype = (rag_dtype)dtype;
  o.portable = portable;
  o.M = lrag_optint(L, 1, "M", o.M, 2, RAG_HNSW_MAX_M, fname);
  o.ef_construction =
      lrag_optint(L, 1, "ef_construction", o.ef_construction, 1, RAG_HNSW_MAX_EF, fname);
  o.ef_search = lrag_optint(L, 1, "ef_search", o.ef_search, 1, RAG_HNSW_MAX_EF, fname);
  o.seed = (uint64_t)lrag_optint(L, 1, "seed", (size_t)o.seed, 0, 0x7fffffff, fname);
  o.capacity = lrag_optint(L, 1, "capacity", 0, 0, 100000000, fname);
  u = push_index(L, dim);
  rc = rag_hnsw_new(&o, &u->h);
  if (rc != RAG_OK) return lrag_raise(L, rc, fname);
  return 1;
}

static void free_hnsw(void *p) {
  rag_hnsw_free((rag_hnsw *)p);
}

static int hnsw_load(lua_State *L) {
  const char *path = luaL_checkstring(L, 1), *why;
  lrag_box *box = lrag_box_new(L, free_hnsw);
  rag_hnsw *h;
  lhnsw *u;
  int err, rc = rag_hnsw_load(path, &h, &why, &err);
  if (rc != RAG_OK) return lrag_loadfail(L, rc, "rag.hnsw.load", path, why, err);
  box->p = h;
  u = push_index(L, rag_hnsw_config(h)->dim);
  u->h = h;
  box->p = NULL;
  return 1;
}

static int hnsw_add(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.add");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.hnsw.add", &idlen);
  rag_vec_bad bad;
  int rc;
  lrag_checkvector(L, 3, u->dim, "rag.hnsw.add", u->in);
  rc = rag_hnsw_add(u->h, id, idlen, u->in, &bad);
  if (rc == RAG_EINVAL) return lrag_badvector(L, "rag.hnsw.add", u->dim, &bad);
  if (rc != RAG_OK) return lrag_raise(L, rc, "rag.hnsw.add");
  lua_pushboolean(L, 1);
  return 1;
}

static int hnsw_remove(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.remove");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.hnsw.remove", &idlen);
  int removed;
  rag_hnsw_remove(u->h, id, idlen, &removed);
  lua_pushboolean(L, removed);
  return 1;
}

static int hnsw_get(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.get");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.hnsw.get", &idlen);
  if (rag_hnsw_get(u->h, id, idlen, u->in))
    lrag_pushfloats(L, u->in, u->dim);
  else
    lua_pushnil(L);
  return 1;
}

static const char *hit_id(const void *h, uint32_t slot, size_t *len) {
  return rag_hnsw_id((const rag_hnsw *)h, slot, len);
}

static int hnsw_search(lua_State *L) {
  static const char *const allowed[] = {"ef", "filter", NULL};
  static const char *fname = "rag.hnsw.search";
  lhnsw *u = check_open(L, fname);
  size_t k, n, ef = 0;
  const rag_hit *hits;
  rag_id_filter f, *fp;
  rag_vec_bad bad;
  int rc;
  lrag_checkvector(L, 2, u->dim, fname, u->in);
  k = lrag_optk(L, 3, fname, 10);
  fp = lrag_searchopts(L, 4, fname, allowed, &f);
  if (lua_istable(L, 4)) ef = lrag_optint(L, 4, "ef", 0, 1, RAG_HNSW_MAX_EF, fname);
  rc = rag_hnsw_search(u->h, u->in, k, ef, fp, &hits, &n, &bad);
  if (rc == RAG_EINVAL) return lrag_badvector(L, fname, u->dim, &bad);
  if (rc != RAG_OK) return lrag_raise(L, rc, fname);
  lrag_pushhits(L, hits, n, hit_id, u->h);
  return 1;
}

static int hnsw_compact(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.compact");
  int rc = rag_hnsw_compact(u->h);
  if (rc != RAG_OK) return lrag_raise(L, rc, "rag.hnsw.compact");
  lua_pushboolean(L, 1);
  return 1;
}

static int hnsw_len(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.__len");
  lua_pushinteger(L, (lua_Integer)rag_hnsw_count(u->h));
  return 1;
}

static void set_int(lua_State *L, const char *key, size_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, key);
}

static int hnsw_stats(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.stats");
  const rag_hnsw_opts *o = rag_hnsw_config(u->h);
  rag_hnsw_stats s;
  rag_hnsw_stats_get(u->h, &s);
  lrag_pushvecstats(L, rag_hnsw_kernel(u->h), s.count, s.memory);
  set_int(L, "dead", s.dead);
  set_int(L, "levels", s.levels);
  set_int(L, "rebuilds", s.rebuilds);
  set_int(L, "M", o->M);
  set_int(L, "ef_construction", o->ef_construction);
  set_int(L, "ef_search", o->ef_search);
  set_int(L, "seed", (size_t)o->seed);
  return 1;
}

static int hnsw_save(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.save");
  const char *path = luaL_checkstring(L, 2);
  int err, rc = rag_hnsw_save(u->h, path, &err);
  if (rc == RAG_EIO) return lrag_fail(L, "io", "rag.hnsw.save: '%s': %s", path, strerror(err));
  if (rc != RAG_OK) return lrag_raise(L, rc, "rag.hnsw.save");
  lua_pushboolean(L, 1);
  return 1;
}

static int hnsw_close(lua_State *L) {
  lhnsw *u = (lhnsw *)luaL_checkudata(L, 1, MT);
  rag_hnsw_free(u->h);
  u->h = NULL;
  return 0;
}

static int hnsw_tostring(lua_State *L) {
  lhnsw *u = (lhnsw *)luaL_checkudata(L, 1, MT);
  if (u->h == NULL)
    lua_pushliteral(L, "rag.hnsw (closed)");
  else
    lua_pushfstring(L, "rag.hnsw (%d vectors, dim %d)", (int)rag_hnsw_count(u->h), (int)u->dim);
  return 1;
}

static const luaL_Reg hnsw_methods[] = {
    {"add", hnsw_add},   {"remove", hnsw_remove}, {"search", hnsw_search},
    {"get", hnsw_get},   {"compact", hnsw_compact}, {"stats", hnsw_stats},
    {"save", hnsw_save}, {"close", hnsw_close},   {NULL, NULL},
};

static const luaL_Reg hnsw_funcs[] = {
    {"new", hnsw_new},
    {"load", hnsw_load},
    {NULL, NULL},
};

int lrag_open_hnsw(lua_State *L) {
  if (luaL_newmetatable(L, MT)) {
    luaL_newlib(L, hnsw_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, hnsw_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, hnsw_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, hnsw_len);
    lua_setfield(L, -2, "__len");
    lua_pushcfunction(L, hnsw_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, hnsw_funcs, 0);
  return 0;
}
