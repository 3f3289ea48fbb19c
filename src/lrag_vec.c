/*
** lrag_vec.c: rag.vec.new(opts) and rag.vec.load(path) make a "rag.vec"
** userdata over the exact index: add, remove, search, search_batch, get,
** stats, save, close, #v; rag.vec.pack and rag.vec.unpack convert between
** Lua arrays and packed little-endian float32 strings. Also the vector and
** option readers that rag.hnsw shares.
*/
#include "lrag.h"

#include <math.h>
#include <string.h>

#include "rag.h"
#include "rag_vec.h"
#include "lrag_vec.h"

#define MT "rag.vec"

typedef struct lvec {
  rag_vec *v; /* NULL once closed */
  size_t dim;
  float in[1]; /* dim floats: the converted argument */
} lvec;

/* {====== Shared with rag.hnsw ======} */

void lrag_checkvector(lua_State *L, int idx, size_t dim, const char *fname, float *out) {
  size_t i, n;
  int t = lua_type(L, idx);
  if (t == LUA_TSTRING) {
    const char *s = lua_tolstring(L, idx, &n);
    if (n != dim * 4)
      luaL_error(L, "%s: a packed vector must have %d bytes (dim %d), got %d", fname,
                 (int)(dim * 4), (int)dim, (int)n);
    memcpy(out, s, n);
    return;
  }
  if (t != LUA_TTABLE)
    luaL_error(L, "%s: vector must be a table of numbers or a packed string, got %s", fname,
               luaL_typename(L, idx));
  n = lua_rawlen(L, idx);
  if (n != dim) luaL_error(L, "%s: vector has %d components, the index has dim %d", fname,
                           (int)n, (int)dim);
  for (i = 0; i < dim; i++) {
    lua_rawgeti(L, idx, (int)i + 1);
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "%s: component %d must be a number, got %s", fname, (int)i + 1,
                 luaL_typename(L, -1));
    out[i] = (float)lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
}

int lrag_badvector(lua_State *L, const char *fname, size_t dim, const rag_vec_bad *bad) {
  if (strcmp(bad->why, "zero") == 0)
    return luaL_error(L, "%s: zero vector under cosine", fname);
  if (strcmp(bad->why, "range") == 0)
    return luaL_error(L, "%s: component %d is out of range", fname, (int)(bad->component % dim) + 1);
  return luaL_error(L, "%s: component %d is %s", fname, (int)(bad->component % dim) + 1,
                    strcmp(bad->why, "nan") == 0 ? "NaN" : "infinite");
}

int lrag_raise(lua_State *L, int rc, const char *fname) {
  if (rc == RAG_ENOMEM) return luaL_error(L, "%s: not enough memory", fname);
  if (rc == RAG_ETOOBIG) return luaL_error(L, "%s: too large for the index", fname);
  return luaL_error(L, "%s: %s", fname, rag_strerror(rc));
}

void lrag_pushfloats(lua_State *L, const float *x, size_t n) {
  size_t i;
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushnumber(L, x[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
}

rag_id_filter *lrag_searchopts(lua_State *L, int idx, const char *fname,
                               const char *const allowed[], rag_id_filter *f) {
  const char **ids;
  size_t *lens;
  if (!lua_isnoneornil(L, idx) && !lua_istable(L, idx))
    luaL_error(L, "%s: opts must be a table, got %s", fname, luaL_typename(L, idx));
  lrag_checkopts(L, idx, fname, allowed);
  if (!lua_istable(L, idx)) return NULL;
  lua_getfield(L, idx, "filter");
  if (lua_isnil(L, -1)) return NULL;
  f->n = lrag_checkfilter(L, -1, fname, &ids, &lens);
  f->ids = ids;
  f->lens = lens;
  return f;
}

static const char *const metric_names[] = {"cosine", "dot", "l2", NULL};
static const char *const dtype_names[] = {"f32", "f16", "i8", NULL};

static int pick(lua_State *L, int idx, const char *key, const char *const names[], int def,
                const char *fname, const char *choices) {
  int r = def;
  lua_getfield(L, idx, key);
  if (!lua_isnil(L, -1)) {
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
    for (r = 0; names[r] != NULL && strcmp(names[r], s) != 0; r++) {
    }
    if (names[r] == NULL) luaL_error(L, "%s: %s must be %s", fname, key, choices);
  }
  lua_pop(L, 1);
  return r;
}

size_t lrag_optint(lua_State *L, int idx, const char *key, size_t def, size_t lo, size_t hi,
                   const char *fname) {
  lua_Number v;
  size_t r = def;
  lua_getfield(L, idx, key);
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "%s: option '%s' must be an integer, got %s", fname, key,
                 luaL_typename(L, -1));
    v = lua_tonumber(L, -1);
    if (!(v >= (lua_Number)lo && v <= (lua_Number)hi && v == floor(v)))
      luaL_error(L, "%s: option '%s' must be an integer in [%d, %d]", fname, key, (int)lo,
                 (int)hi);
    r = (size_t)v;
  }
  lua_pop(L, 1);
  return r;
}

void lrag_vecopts(lua_State *L, int idx, const char *fname, size_t *dim, int *metric,
                  int *dtype, int *portable) {
  lua_getfield(L, idx, "dim");
  if (lua_isnil(L, -1)) luaL_error(L, "%s: option 'dim' is required", fname);
  lua_pop(L, 1);
  *dim = lrag_optint(L, idx, "dim", 0, 1, RAG_VEC_MAX_DIM, fname);
  *metric = pick(L, idx, "metric", metric_names, RAG_COSINE, fname,
                 "\"cosine\", \"dot\" or \"l2\"");
  *dtype = pick(L, idx, "dtype", dtype_names, RAG_F32, fname, "\"f32\", \"f16\" or \"i8\"");
  lua_getfield(L, idx, "simd");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN)
    luaL_error(L, "%s: option 'simd' must be a boolean", fname);
  *portable = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
  lua_pop(L, 1);
}

void lrag_pushvecstats(lua_State *L, const rag_kernel *k, size_t count, size_t memory) {
  lua_createtable(L, 0, 8);
  lua_pushinteger(L, (lua_Integer)count);
  lua_setfield(L, -2, "count");
  lua_pushinteger(L, (lua_Integer)k->dim);
  lua_setfield(L, -2, "dim");
  lua_pushstring(L, metric_names[k->metric]);
  lua_setfield(L, -2, "metric");
  lua_pushstring(L, dtype_names[k->dtype]);
  lua_setfield(L, -2, "dtype");
  lua_pushinteger(L, (lua_Integer)memory);
  lua_setfield(L, -2, "memory");
  lua_pushstring(L, k->simd == 2 ? "avx512" : k->simd ? "avx2" : "portable");
  lua_setfield(L, -2, "kernel");
}

/* {====== rag.vec ======} */

static lvec *check_lvec(lua_State *L, const char *fname) {
  lvec *u = (lvec *)luaL_checkudata(L, 1, MT);
  if (u->v == NULL) luaL_error(L, "%s: index is closed", fname);
  return u;
}

static lvec *push_lvec(lua_State *L, size_t dim) {
  lvec *u = (lvec *)lua_newuserdatauv(L, sizeof *u + dim * sizeof(float), 0);
  u->v = NULL;
  u->dim = dim;
  luaL_setmetatable(L, MT);
  return u;
}

static int vec_new(lua_State *L) {
  static const char *const allowed[] = {"dim", "metric", "dtype", "simd", NULL};
  rag_vec_opts o;
  size_t dim;
  int metric, dtype, portable, rc;
  lvec *u;
  luaL_checktype(L, 1, LUA_TTABLE);
  lrag_checkopts(L, 1, "rag.vec.new", allowed);
  lrag_vecopts(L, 1, "rag.vec.new", &dim, &metric, &dtype, &portable);
  memset(&o, 0, sizeof o);
  o.dim = dim;
  o.metric = (rag_metric)metric;
  o.dtype = (rag_dtype)dtype;
  o.portable = portable;
  u = push_lvec(L, dim);
  rc = rag_vec_new(&o, &u->v);
  if (rc != RAG_OK) return lrag_raise(L, rc, "rag.vec.new");
  return 1;
}

static void free_vec(void *p) {
  rag_vec_free((rag_vec *)p);
}

static int vec_load(lua_State *L) {
  const char *path = luaL_checkstring(L, 1), *why;
  lrag_box *box = lrag_box_new(L, free_vec);
  rag_vec *v;
  lvec *u;
  int err, rc = rag_vec_load(path, &v, &why, &err);
  if (rc != RAG_OK) return lrag_loadfail(L, rc, "rag.vec.load", path, why, err);
  box->p = v;
  u = push_lvec(L, rag_vec_config(v)->dim);
  u->v = v;
  box->p = NULL;
  return 1;
}

static int vec_add(lua_State *L) {
  lvec *u = check_lvec(L, "rag.vec.add");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.vec.add", &idlen);
  rag_vec_bad bad;
  int rc;
  lrag_checkvector(L, 3, u->dim, "rag.vec.add", u->in);
  rc = rag_vec_add(u->v, id, idlen, u->in, &bad);
  if (rc == RAG_EINVAL) return lrag_badvector(L, "rag.vec.add", u->dim, &bad);
  if (rc != RAG_OK) return lrag_raise(L, rc, "rag.vec.add");
  lua_pushboolean(L, 1);
  return 1;
}

static int vec_remove(lua_State *L) {
  lvec *u = check_lvec(L, "rag.vec.remove");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.vec.remove", &idlen);
  int removed;
  rag_vec_remove(u->v, id, idlen, &removed);
  lua_pushboolean(L, removed);
  return 1;
}

static int vec_get(lua_State *L) {
  lvec *u = check_lvec(L, "rag.vec.get");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.vec.get", &idlen);
  if (rag_vec_get(u->v, id, idlen, u->in))
    lrag_pushfloats(L, u->in, u->dim);
  else
    lua_pushnil(L);
  return 1;
}

static const char *hit_id(const void *v, uint32_t slot, size_t *len) {
  return rag_vec_id((const rag_vec *)v, slot, len);
}

static int vec_search(lua_State *L) {
  static const char *const allowed[] = {"filter", NULL};
  lvec *u = check_lvec(L, "rag.vec.search");
  size_t k, n;
  const rag_hit *hits;
  rag_id_filter f, *fp;
  rag_vec_bad bad;
  int rc;
  lrag_checkvector(L, 2, u->dim, "rag.vec.search", u->in);
  k = lrag_optk(L, 3, "rag.vec.search", 10);
  fp = lrag_searchopts(L, 4, "rag.vec.search", allowed, &f);
  rc = rag_vec_search(u->v, u->in, k, fp, &hits, &n, &bad);
  if (rc == RAG_EINVAL) return lrag_badvector(L, "rag.vec.search", u->dim, &bad);
  if (rc != RAG_OK) return lrag_raise(L, rc, "rag.vec.search");
  lrag_pushhits(L, hits, n, hit_id, u->v);
  return 1;
}

static int vec_search_batch(lua_State *L) {
  lvec *u = check_lvec(L, "rag.vec.search_batch");
  size_t k, nq, i, count, d = u->dim;
  const rag_hit *hits;
  rag_vec_bad bad;
  float *qs;
  int rc;
  k = lrag_optk(L, 3, "rag.vec.search_batch", 10);
  if (lua_type(L, 2) == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, 2, &len);
    if (len % (d * 4) != 0)
      luaL_error(L, "rag.vec.search_batch: packed queries must be a multiple of %d bytes",
                 (int)(d * 4));
    nq = len / (d * 4);
    qs = (float *)lua_newuserdatauv(L, len + 1, 0);
    memcpy(qs, s, len);
  } else {
    if (lua_type(L, 2) != LUA_TTABLE)
      luaL_error(L, "rag.vec.search_batch: queries must be a list of vectors or a packed "
                    "string, got %s", luaL_typename(L, 2));
    nq = lua_rawlen(L, 2);
    if (RAG_MUL_OVERFLOWS(nq + 1, d * sizeof(float)))
      luaL_error(L, "rag.vec.search_batch: too many queries");
    qs = (float *)lua_newuserdatauv(L, (nq + 1) * d * sizeof(float), 0);
    for (i = 0; i < nq; i++) {
      lua_rawgeti(L, 2, (int)i + 1);
      lrag_checkvector(L, lua_gettop(L), d, "rag.vec.search_batch", qs + i * d);
      lua_pop(L, 1);
    }
  }
  rc = rag_vec_search_batch(u->v, qs, nq, k, &hits, &count, &bad);
  if (rc == RAG_EINVAL) return lrag_badvector(L, "rag.vec.search_batch", d, &bad);
  if (rc != RAG_OK) return lrag_raise(L, rc, "rag.vec.search_batch");
  lua_createtable(L, (int)nq, 0);
  for (i = 0; i < nq; i++) {
    lrag_pushhits(L, hits + i * count, count, hit_id, u->v);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static int vec_len(lua_State *L) {
  lvec *u = check_lvec(L, "rag.vec.__len");
  lua_pushinteger(L, (lua_Integer)rag_vec_count(u->v));
  return 1;
}

static int vec_stats(lua_State *L) {
  lvec *u = check_lvec(L, "rag.vec.stats");
  lrag_pushvecstats(L, rag_vec_kernel(u->v), rag_vec_count(u->v), rag_vec_memory(u->v));
  return 1;
}

static int vec_save(lua_State *L) {
  lvec *u = check_lvec(L, "rag.vec.save");
  const char *path = luaL_checkstring(L, 2);
  int err, rc = rag_vec_save(u->v, path, &err);
  if (rc == RAG_EIO) return lrag_fail(L, "io", "rag.vec.save: '%s': %s", path, strerror(err));
  if (rc != RAG_OK) return lrag_raise(L, rc, "rag.vec.save");
  lua_pushboolean(L, 1);
  return 1;
}

static int vec_close(lua_State *L) {
  lvec *u = (lvec *)luaL_checkudata(L, 1, MT);
  rag_vec_free(u->v);
  u->v = NULL;
  return 0;
}

static int vec_tostring(lua_State *L) {
  lvec *u = (lvec *)luaL_checkudata(L, 1, MT);
  if (u->v == NULL)
    lua_pushliteral(L, "rag.vec (closed)");
  else
    lua_pushfstring(L, "rag.vec (%d vectors, dim %d)", (int)rag_vec_count(u->v), (int)u->dim);
  return 1;
}

/* {====== pack, unpack ======} */

static int vec_pack(lua_State *L) {
  size_t n, i;
  luaL_Buffer b;
  luaL_checktype(L, 1, LUA_TTABLE);
  n = lua_rawlen(L, 1);
  luaL_buffinit(L, &b);
  for (i = 1; i <= n; i++) {
    float f;
    char c[4];
    lua_rawgeti(L, 1, (int)i);
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "rag.vec.pack: element %d must be a number, got %s", (int)i,
                 luaL_typename(L, -1));
    f = (float)lua_tonumber(L, -1);
    lua_pop(L, 1);
    memcpy(c, &f, 4);
    luaL_addlstring(&b, c, 4);
  }
  luaL_pushresult(&b);
  return 1;
}

static int vec_unpack(lua_State *L) {
  size_t len, i;
  const char *s = luaL_checklstring(L, 1, &len);
  if (len % 4 != 0) luaL_error(L, "rag.vec.unpack: length %d is not a multiple of 4", (int)len);
  lua_createtable(L, (int)(len / 4), 0);
  for (i = 0; i < len / 4; i++) {
    float f;
    memcpy(&f, s + 4 * i, 4);
    lua_pushnumber(L, f);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static const luaL_Reg vec_methods[] = {
    {"add", vec_add},       {"remove", vec_remove},
    {"search", vec_search}, {"search_batch", vec_search_batch},
    {"get", vec_get},       {"stats", vec_stats},
    {"save", vec_save},     {"close", vec_close},
    {NULL, NULL},
};

static const luaL_Reg vec_funcs[] = {
    {"new", vec_new}, {"load", vec_load}, {"pack", vec_pack}, {"unpack", vec_unpack}, {NULL, NULL},
};

int lrag_open_vec(lua_State *L) {
  if (luaL_newmetatable(L, MT)) {
    luaL_newlib(L, vec_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, vec_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, vec_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, vec_len);
    lua_setfield(L, -2, "__len");
    lua_pushcfunction(L, vec_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, vec_funcs, 0);
  return 0;
}
