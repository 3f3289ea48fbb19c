/*
** lrag_hnsw.c: rag.hnsw.new(opts) and rag.hnsw.load(path) make a "rag.hnsw"
** userdata over the HNSW graph: add, remove, search, get, compact, stats,
** save, close, #h.
*/
#include "lrag.h"

#include "lrag_vec.h"
#include "rag.h"
#include "rag_hnsw.h"

#define MT "rag.hnsw"

typedef struct lhnsw {
  rag_hnsw *h; /* NULL once closed */
  size_t dim;
  float in[1]; /* dim floats: the converted argument */
} lhnsw;

static void hnsw_fin(void *u) {
  rag_hnsw_free(((lhnsw *)u)->h);
}

static const lrag_class hnsw_class;

static lhnsw *check_open(lua_State *L, const char *fname) {
  return (lhnsw *)lrag_checkobject(L, 1, &hnsw_class, fname);
}

static lhnsw *push_hnsw(lua_State *L, size_t dim) {
  lhnsw *u = (lhnsw *)lrag_newobject(L, &hnsw_class, sizeof *u + dim * sizeof(float));
  u->dim = dim;
  return u;
}

/* {====== Construction ======} */

static int hnsw_new(lua_State *L) {
  static const char *const allowed[] = {"dim", "metric", "dtype", "simd", "M", "ef_construction",
                                        "ef_search", "seed", "capacity", NULL};
  static const char *fname = "rag.hnsw.new";
  rag_hnsw_opts o;
  size_t dim;
  int metric, dtype, portable, rc;
  lhnsw *u;
  lrag_checkopts(L, 1, fname, allowed);
  lrag_vecopts(L, 1, fname, &dim, &metric, &dtype, &portable);
  rag_hnsw_defaults(&o, dim);
  o.metric = (rag_metric)metric;
  o.dtype = (rag_dtype)dtype;
  o.portable = portable;
  o.M = (size_t)lrag_optinteger(L, 1, fname, "M", (lua_Integer)o.M, 2, RAG_HNSW_MAX_M);
  o.ef_construction = (size_t)lrag_optinteger(L, 1, fname, "ef_construction",
                                              (lua_Integer)o.ef_construction, 1, RAG_HNSW_MAX_EF);
  o.ef_search = (size_t)lrag_optinteger(L, 1, fname, "ef_search", (lua_Integer)o.ef_search, 1,
                                        RAG_HNSW_MAX_EF);
  o.seed = (uint64_t)lrag_optinteger(L, 1, fname, "seed", (lua_Integer)o.seed, 0, 0x7fffffff);
  o.capacity = (size_t)lrag_optinteger(L, 1, fname, "capacity", 0, 0, 100000000);
  u = push_hnsw(L, dim);
  rc = rag_hnsw_new(&o, &u->h);
  if (rc != RAG_OK) return lrag_error(L, rc, fname, NULL);
  return 1;
}

static void free_hnsw(void *p) {
  rag_hnsw_free((rag_hnsw *)p);
}

static int hnsw_load(lua_State *L) {
  const char *path = lrag_checkpath(L, 1, "rag.hnsw.load"), *why;
  lrag_box *box = lrag_box_new(L, free_hnsw); /* holds h until the object does */
  rag_hnsw *h;
  int err, rc = rag_hnsw_load(path, &h, &why, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, "rag.hnsw.load", path, why, err);
  box->p = h;
  push_hnsw(L, rag_hnsw_config(h)->dim)->h = h;
  box->p = NULL;
  return 1;
}

/* {====== Changes and search ======} */

static int hnsw_add(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.add");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.hnsw.add", &idlen);
  rag_vec_bad bad;
  int rc;
  lrag_checkvector(L, 3, u->dim, "rag.hnsw.add", u->in);
  rc = rag_hnsw_add(u->h, id, idlen, u->in, &bad);
  if (rc != RAG_OK) return lrag_vecerror(L, rc, "rag.hnsw.add", u->dim, &bad);
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
  if (rag_hnsw_get(u->h, id, idlen, u->in)) lrag_pushfloats(L, u->in, u->dim);
  else lua_pushnil(L);
  return 1;
}

static const char *hit_id(const void *h, uint32_t slot, size_t *len) {
  return rag_hnsw_id((const rag_hnsw *)h, slot, len);
}

static int hnsw_search(lua_State *L) {
  static const char *const allowed[] = {"ef", "filter", NULL};
  static const char *fname = "rag.hnsw.search";
  lhnsw *u = check_open(L, fname);
  size_t k, n, ef;
  const rag_hit *hits;
  rag_id_filter f, *fp;
  rag_vec_bad bad;
  int rc;
  lrag_checkvector(L, 2, u->dim, fname, u->in);
  k = lrag_optk(L, 3, fname, 10);
  lrag_checkopts(L, 4, fname, allowed);
  fp = lrag_vecfilter(L, 4, fname, &f);
  ef = (size_t)lrag_optinteger(L, 4, fname, "ef", 0, 1, RAG_HNSW_MAX_EF);
  rc = rag_hnsw_search(u->h, u->in, k, ef, fp, &hits, &n, &bad);
  if (rc != RAG_OK) return lrag_vecerror(L, rc, fname, u->dim, &bad);
  lrag_pushhits(L, hits, n, hit_id, u->h);
  return 1;
}

static int hnsw_compact(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.compact");
  int rc = rag_hnsw_compact(u->h);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.hnsw.compact", NULL);
  lua_pushboolean(L, 1);
  return 1;
}

/* {====== Introspection, persistence ======} */

static int hnsw_len(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.__len");
  lua_pushinteger(L, (lua_Integer)rag_hnsw_count(u->h));
  return 1;
}

static int hnsw_stats(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.stats");
  const rag_hnsw_opts *o = rag_hnsw_config(u->h);
  rag_hnsw_stats s;
  rag_hnsw_stats_get(u->h, &s);
  lrag_pushvecstats(L, rag_hnsw_kernel(u->h), s.count, s.memory);
  if (rag_hnsw_kernel(u->h)->approx_bf) lrag_setstr(L, "kernel", "avx512bf16"); /* its walks */
  lrag_setint(L, "dead", (lua_Integer)s.dead);
  lrag_setint(L, "levels", (lua_Integer)s.levels);
  lrag_setint(L, "rebuilds", (lua_Integer)s.rebuilds);
  lrag_setint(L, "links", (lua_Integer)s.links);
  lrag_setint(L, "links_max", (lua_Integer)s.links_max);
  lrag_setint(L, "M", (lua_Integer)o->M);
  lrag_setint(L, "ef_construction", (lua_Integer)o->ef_construction);
  lrag_setint(L, "ef_search", (lua_Integer)o->ef_search);
  lrag_setint(L, "seed", (lua_Integer)o->seed);
  return 1;
}

static int hnsw_save(lua_State *L) {
  lhnsw *u = check_open(L, "rag.hnsw.save");
  const char *path = lrag_checkpath(L, 2, "rag.hnsw.save");
  int err, rc = rag_hnsw_save(u->h, path, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, "rag.hnsw.save", path, NULL, err);
  lua_pushboolean(L, 1);
  return 1;
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
    {"add", hnsw_add},       {"compact", hnsw_compact}, {"get", hnsw_get},
    {"remove", hnsw_remove}, {"save", hnsw_save},       {"search", hnsw_search},
    {"stats", hnsw_stats},   {NULL, NULL},
};

static const luaL_Reg hnsw_metamethods[] = {
    {"__len", hnsw_len},
    {"__tostring", hnsw_tostring},
    {NULL, NULL},
};

static const lrag_class hnsw_class = {MT, "index", hnsw_methods, hnsw_metamethods, hnsw_fin};

static const luaL_Reg hnsw_funcs[] = {
    {"load", hnsw_load},
    {"new", hnsw_new},
    {NULL, NULL},
};

int lrag_open_hnsw(lua_State *L) {
  lrag_newclass(L, &hnsw_class);
  luaL_setfuncs(L, hnsw_funcs, 0);
  return 0;
}
