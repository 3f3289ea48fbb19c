/*
** lrag_vec.c: rag.vec.new(opts) and rag.vec.load(path [, {map=}]) make a
** "rag.vec" userdata over the exact index: add, remove, search,
** search_batch, get, stats, save, close, #v; rag.vec.pack and
** rag.vec.unpack convert between Lua arrays and packed little-endian
** float32 strings. A mapped load keeps the file mapped while the index
** borrows its rows. Also what rag.hnsw and the embedders share (lrag_vec.h).
*/
#include "lrag.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lrag_vec.h"
#include "rag.h"
#include "rag_file.h"
#include "rag_vec.h"

#define MT "rag.vec"

typedef struct lvec {
  rag_vec *v;    /* NULL once closed */
  void *map;     /* the mapped file whose rows v borrows, or NULL */
  size_t maplen;
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

int lrag_vecerror(lua_State *L, int rc, const char *fname, size_t dim, const rag_vec_bad *bad) {
  int i;
  if (rc == RAG_ETOOBIG) return lrag_error(L, rc, fname, "too large for the index");
  if (rc != RAG_EINVAL) return lrag_error(L, rc, fname, NULL);
  if (strcmp(bad->why, "zero") == 0) return lrag_error(L, rc, fname, "zero vector under cosine");
  i = (int)(bad->component % dim) + 1;
  if (strcmp(bad->why, "range") == 0)
    return lrag_error(L, rc, fname, "component %d is out of range", i);
  return lrag_error(L, rc, fname, "component %d is %s", i,
                    strcmp(bad->why, "nan") == 0 ? "NaN" : "infinite");
}

void lrag_pushfloats(lua_State *L, const float *x, size_t n) {
  size_t i;
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushnumber(L, x[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
}

rag_id_filter *lrag_vecfilter(lua_State *L, int idx, const char *fname, rag_id_filter *f) {
  const char **ids;
  size_t *lens;
  if (!lrag_opttable(L, idx, fname, "filter")) return NULL;
  f->n = lrag_checkfilter(L, -1, fname, &ids, &lens);
  f->ids = ids;
  f->lens = lens;
  return f;
}

static const char *const metric_names[] = {"cosine", "dot", "l2", NULL};
static const char *const dtype_names[] = {"f32", "f16", "i8", NULL};

void lrag_vecopts(lua_State *L, int idx, const char *fname, size_t *dim, int *metric,
                  int *dtype, int *portable) {
  *dim = (size_t)lrag_optinteger(L, idx, fname, "dim", 0, 1, RAG_VEC_MAX_DIM);
  if (*dim == 0) luaL_error(L, "%s: option 'dim' is required", fname);
  *metric = lrag_optenum(L, idx, fname, "metric", RAG_COSINE, metric_names);
  *dtype = lrag_optenum(L, idx, fname, "dtype", RAG_F32, dtype_names);
  lua_getfield(L, idx, "simd");
  if (lua_type(L, -1) == LUA_TSTRING) { /* "avx2": AVX2 at most, to test those kernels */
    if (strcmp(lua_tostring(L, -1), "avx2") != 0)
      luaL_error(L, "%s: option 'simd' must be a boolean or \"avx2\", got \"%s\"", fname,
                 lua_tostring(L, -1));
    *portable = 2;
  } else {
    *portable = !lrag_optboolean(L, idx, fname, "simd", 1);
  }
  lua_pop(L, 1);
}

void lrag_pushvecstats(lua_State *L, const rag_kernel *k, size_t count, size_t memory) {
  lua_createtable(L, 0, 8);
  lrag_setint(L, "count", (lua_Integer)count);
  lrag_setint(L, "dim", (lua_Integer)k->dim);
  lrag_setstr(L, "metric", metric_names[k->metric]);
  lrag_setstr(L, "dtype", dtype_names[k->dtype]);
  lrag_setint(L, "memory", (lua_Integer)memory);
  lrag_setstr(L, "kernel", k->simd == 2 ? "avx512" : k->simd ? "avx2" : "portable");
}

/* {====== Shared with the embedders ======} */

void lrag_pushpacked(lua_State *L, const float *x, size_t n) {
  const uint32_t one = 1;
  luaL_Buffer b;
  size_t i;
  if (*(const unsigned char *)&one == 1) { /* little-endian already */
    lua_pushlstring(L, (const char *)x, 4 * n);
    return;
  }
  luaL_buffinit(L, &b);
  for (i = 0; i < n; i++) {
    unsigned char le[4];
    uint32_t u;
    memcpy(&u, &x[i], 4);
    le[0] = (unsigned char)u;
    le[1] = (unsigned char)(u >> 8);
    le[2] = (unsigned char)(u >> 16);
    le[3] = (unsigned char)(u >> 24);
    luaL_addlstring(&b, (const char *)le, 4);
  }
  luaL_pushresult(&b);
}

size_t lrag_checktexts(lua_State *L, int idx, const char *fname, const char *item) {
  size_t n, i;
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    luaL_error(L, "%s: texts must be a list of strings, got %s", fname, luaL_typename(L, idx));
  n = lua_rawlen(L, idx);
  if (n > 0x7fffffff) luaL_error(L, "%s: too many texts", fname);
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, (int)i);
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pushfstring(L, item, (int)i);
      luaL_error(L, "%s: %s must be a string, got %s", fname, lua_tostring(L, -1),
                 luaL_typename(L, -2));
    }
    lua_pop(L, 1);
  }
  return n;
}

int lrag_embedtexts(lua_State *L, int idx, size_t dim, int packed, const char *fname,
                    lrag_embedfn embed, void *ud) {
  size_t i, n;
  float *out;
  idx = lua_absindex(L, idx);
  n = lua_rawlen(L, idx);
  out = (float *)lua_newuserdatauv(L, dim * sizeof(float), 0); /* freed by the GC */
  lua_createtable(L, (int)n, 0);
  for (i = 1; i <= n; i++) {
    size_t len, errpos = 0;
    const char *s;
    int rc;
    lua_rawgeti(L, idx, (int)i);
    s = lua_tolstring(L, -1, &len);
    rc = embed(ud, s, len, out, &errpos);
    lua_pop(L, 1);
    if (rc == RAG_EENCODING)
      return lrag_error(L, rc, fname, "text %d: invalid utf-8 at byte %lu", (int)i,
                        (unsigned long)errpos);
    if (rc != RAG_OK) return lrag_error(L, rc, fname, NULL);
    if (packed) lrag_pushpacked(L, out, dim);
    else lrag_pushfloats(L, out, dim);
    lua_rawseti(L, -2, (int)i);
  }
  return 1;
}

/* {====== rag.vec ======} */

static void vec_fin(void *p) {
  lvec *u = (lvec *)p;
  rag_vec_free(u->v);
  rag_file_unmap(u->map, u->maplen);
  u->map = NULL;
}

static const lrag_class vec_class;

static lvec *check_open(lua_State *L, const char *fname) {
  return (lvec *)lrag_checkobject(L, 1, &vec_class, fname);
}

static lvec *push_vec(lua_State *L, size_t dim) {
  lvec *u = (lvec *)lrag_newobject(L, &vec_class, sizeof *u + dim * sizeof(float));
  u->dim = dim;
  return u;
}

static int vec_new(lua_State *L) {
  static const char *const allowed[] = {"dim", "metric", "dtype", "simd", "sketch", NULL};
  rag_vec_opts o;
  int metric, dtype, portable, rc;
  lvec *u;
  lrag_checkopts(L, 1, "rag.vec.new", allowed);
  memset(&o, 0, sizeof o);
  lrag_vecopts(L, 1, "rag.vec.new", &o.dim, &metric, &dtype, &portable);
  o.metric = (rag_metric)metric;
  o.dtype = (rag_dtype)dtype;
  o.portable = portable;
  o.sketch = lrag_optboolean(L, 1, "rag.vec.new", "sketch", 0);
  if (o.sketch && (o.dtype != RAG_F32 || o.metric == RAG_L2))
    return luaL_error(L, "rag.vec.new: option 'sketch' needs dtype 'f32' and metric 'cosine' "
                         "or 'dot'");
  u = push_vec(L, o.dim);
  rc = rag_vec_new(&o, &u->v);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.vec.new", NULL);
  return 1;
}

/* A load under way: the index and the mapping it may borrow from. */
typedef struct loading {
  rag_vec *v;
  void *map;
  size_t maplen;
} loading;

static void loading_fin(void *p) {
  loading *ld = (loading *)p;
  rag_vec_free(ld->v);
  rag_file_unmap(ld->map, ld->maplen);
  ld->v = NULL;
  ld->map = NULL;
}

/*
** rag.vec.load(path [, { map = true }]): map maps the file read-only and
** shared, and the index reads its rows there (a version 1 file is copied
** and unmapped at once); the first change copies them.
*/
static int vec_load(lua_State *L) {
  static const char *const allowed[] = {"map", NULL};
  const char *path = lrag_checkpath(L, 1, "rag.vec.load"), *why = "";
  loading *ld;
  lvec *u;
  int err = 0, rc, map;
  lrag_checkopts(L, 2, "rag.vec.load", allowed);
  map = lrag_optboolean(L, 2, "rag.vec.load", "map", 0);
  ld = (loading *)lrag_box_embed(L, sizeof *ld, loading_fin); /* until the object holds them */
  if (map) {
    rc = rag_file_map(path, &ld->map, &ld->maplen, &why, &err);
    if (rc == RAG_OK)
      rc = rag_vec_load_mem((const unsigned char *)ld->map, ld->maplen, 1, &ld->v, &why);
  } else {
    rc = rag_vec_load(path, &ld->v, &why, &err);
  }
  if (rc != RAG_OK) return lrag_file_error(L, rc, "rag.vec.load", path, why, err);
  if (rag_vec_mapped(ld->v) == 0) { /* copied after all */
    rag_file_unmap(ld->map, ld->maplen);
    ld->map = NULL;
  }
  u = push_vec(L, rag_vec_config(ld->v)->dim);
  u->v = ld->v;
  u->map = ld->map;
  u->maplen = ld->maplen;
  ld->v = NULL;
  ld->map = NULL;
  return 1;
}

void lrag_ownvec(lua_State *L, int idx, const char *fname) {
  lvec *u = (lvec *)lrag_toobject(L, idx, &vec_class);
  int rc;
  if (u == NULL || u->v == NULL || u->map == NULL) return;
  if ((rc = rag_vec_own(u->v)) != RAG_OK) lrag_error(L, rc, fname, NULL);
  rag_file_unmap(u->map, u->maplen);
  u->map = NULL;
}

rag_vec *lrag_takevec(lua_State *L, int idx, const char *fname) {
  lrag_ownvec(L, idx, fname);
  return (rag_vec *)lrag_takeobject(L, idx, MT, fname);
}

static int vec_add(lua_State *L) {
  lvec *u = check_open(L, "rag.vec.add");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.vec.add", &idlen);
  rag_vec_bad bad;
  int rc;
  lrag_checkvector(L, 3, u->dim, "rag.vec.add", u->in);
  rc = rag_vec_add(u->v, id, idlen, u->in, &bad);
  if (rc != RAG_OK) return lrag_vecerror(L, rc, "rag.vec.add", u->dim, &bad);
  lua_pushboolean(L, 1);
  return 1;
}

static int vec_remove(lua_State *L) {
  lvec *u = check_open(L, "rag.vec.remove");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.vec.remove", &idlen);
  int removed, rc = rag_vec_remove(u->v, id, idlen, &removed);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.vec.remove", NULL);
  lua_pushboolean(L, removed);
  return 1;
}

static int vec_get(lua_State *L) {
  lvec *u = check_open(L, "rag.vec.get");
  size_t idlen;
  const char *id = lrag_checkid(L, 2, "rag.vec.get", &idlen);
  if (rag_vec_get(u->v, id, idlen, u->in)) lrag_pushfloats(L, u->in, u->dim);
  else lua_pushnil(L);
  return 1;
}

static const char *hit_id(const void *v, uint32_t slot, size_t *len) {
  return rag_vec_id((const rag_vec *)v, slot, len);
}

static int vec_search(lua_State *L) {
  static const char *const allowed[] = {"filter", NULL};
  lvec *u = check_open(L, "rag.vec.search");
  size_t k, n;
  const rag_hit *hits;
  rag_id_filter f, *fp;
  rag_vec_bad bad;
  int rc;
  lrag_checkvector(L, 2, u->dim, "rag.vec.search", u->in);
  k = lrag_optk(L, 3, "rag.vec.search", 10);
  lrag_checkopts(L, 4, "rag.vec.search", allowed);
  fp = lrag_vecfilter(L, 4, "rag.vec.search", &f);
  rc = rag_vec_search(u->v, u->in, k, fp, &hits, &n, &bad);
  if (rc != RAG_OK) return lrag_vecerror(L, rc, "rag.vec.search", u->dim, &bad);
  lrag_pushhits(L, hits, n, hit_id, u->v);
  return 1;
}

/* The queries at idx (a list of vectors or one packed string) in a new userdata; their count. */
static float *check_queries(lua_State *L, int idx, size_t dim, const char *fname, size_t *nq) {
  size_t i, len;
  float *qs;
  if (lua_type(L, idx) == LUA_TSTRING) {
    const char *s = lua_tolstring(L, idx, &len);
    if (len % (dim * 4) != 0)
      luaL_error(L, "%s: packed queries must be a multiple of %d bytes", fname, (int)(dim * 4));
    *nq = len / (dim * 4);
    qs = (float *)lua_newuserdatauv(L, len + 1, 0);
    memcpy(qs, s, len);
    return qs;
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    luaL_error(L, "%s: queries must be a list of vectors or a packed string, got %s", fname,
               luaL_typename(L, idx));
  *nq = lua_rawlen(L, idx);
  if (RAG_MUL_OVERFLOWS(*nq + 1, dim * sizeof(float))) luaL_error(L, "%s: too many queries", fname);
  qs = (float *)lua_newuserdatauv(L, (*nq + 1) * dim * sizeof(float), 0);
  for (i = 0; i < *nq; i++) {
    lua_rawgeti(L, idx, (int)i + 1);
    lrag_checkvector(L, lua_gettop(L), dim, fname, qs + i * dim);
    lua_pop(L, 1);
  }
  return qs;
}

static int vec_search_batch(lua_State *L) {
  lvec *u = check_open(L, "rag.vec.search_batch");
  size_t k, nq, i, count;
  const rag_hit *hits;
  rag_vec_bad bad;
  float *qs;
  int rc;
  k = lrag_optk(L, 3, "rag.vec.search_batch", 10);
  qs = check_queries(L, 2, u->dim, "rag.vec.search_batch", &nq);
  rc = rag_vec_search_batch(u->v, qs, nq, k, &hits, &count, &bad);
  if (rc != RAG_OK) return lrag_vecerror(L, rc, "rag.vec.search_batch", u->dim, &bad);
  lua_createtable(L, (int)nq, 0);
  for (i = 0; i < nq; i++) {
    lrag_pushhits(L, hits + i * count, count, hit_id, u->v);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static int vec_len(lua_State *L) {
  lvec *u = check_open(L, "rag.vec.__len");
  lua_pushinteger(L, (lua_Integer)rag_vec_count(u->v));
  return 1;
}

static int vec_stats(lua_State *L) {
  lvec *u = check_open(L, "rag.vec.stats");
  const rag_kernel *k = rag_vec_kernel(u->v);
  lrag_pushvecstats(L, k, rag_vec_count(u->v), rag_vec_memory(u->v));
  if (k->bf16_rows) lrag_setstr(L, "kernel", "avx512bf16"); /* its search scans with VDPBF16PS */
  lua_pushboolean(L, rag_vec_config(u->v)->sketch);
  lua_setfield(L, -2, "sketch");
  lrag_setint(L, "mapped", (lua_Integer)rag_vec_mapped(u->v));
  return 1;
}

static int vec_save(lua_State *L) {
  lvec *u = check_open(L, "rag.vec.save");
  const char *path = lrag_checkpath(L, 2, "rag.vec.save");
  int err, rc = rag_vec_save(u->v, path, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, "rag.vec.save", path, NULL, err);
  lua_pushboolean(L, 1);
  return 1;
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
    lua_Number x;
    float f;
    char c[4];
    lua_rawgeti(L, 1, (int)i);
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "rag.vec.pack: element %d must be a number, got %s", (int)i,
                 luaL_typename(L, -1));
    x = lua_tonumber(L, -1);
    if (isnan(x)) luaL_error(L, "rag.vec.pack: element %d is NaN", (int)i);
    if (isinf(x)) luaL_error(L, "rag.vec.pack: element %d is infinite", (int)i);
    if (x > FLT_MAX || x < -FLT_MAX) /* (float)x would be infinite, or undefined */
      luaL_error(L, "rag.vec.pack: element %d is out of float32 range", (int)i);
    f = (float)x;
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

/*
** rag.vec.text(v) -> "[x,y,...]": a vector (packed or a list of numbers)
** as JSON's and pgvector's text, each component the shortest %g that reads
** back to the same float32 (at most 9 significant digits).
*/
static int vec_text(lua_State *L) {
  luaL_Buffer b;
  size_t i, n;
  int packed = lua_type(L, 1) == LUA_TSTRING;
  const char *s = NULL;
  if (packed) {
    s = lua_tolstring(L, 1, &n);
    if (n % 4 != 0) luaL_error(L, "rag.vec.text: length %d is not a multiple of 4", (int)n);
    n /= 4;
  } else {
    luaL_checktype(L, 1, LUA_TTABLE);
    n = lua_rawlen(L, 1);
  }
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '[');
  for (i = 0; i < n; i++) {
    char num[32];
    float f;
    int p;
    if (packed) {
      memcpy(&f, s + 4 * i, 4);
    } else {
      lua_rawgeti(L, 1, (int)i + 1);
      if (lua_type(L, -1) != LUA_TNUMBER)
        luaL_error(L, "rag.vec.text: element %d must be a number, got %s", (int)i + 1,
                   luaL_typename(L, -1));
      f = (float)lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    if (!isfinite(f)) luaL_error(L, "rag.vec.text: element %d is not finite", (int)i + 1);
    for (p = 6; p <= 9; p++) { /* the shortest that reads back */
      snprintf(num, sizeof num, "%.*g", p, (double)f);
      if (strtof(num, NULL) == f) break;
    }
    if (i > 0) luaL_addchar(&b, ',');
    luaL_addstring(&b, num);
  }
  luaL_addchar(&b, ']');
  luaL_pushresult(&b);
  return 1;
}

static const luaL_Reg vec_methods[] = {
    {"add", vec_add},       {"get", vec_get},       {"remove", vec_remove},
    {"save", vec_save},     {"search", vec_search}, {"search_batch", vec_search_batch},
    {"stats", vec_stats},   {NULL, NULL},
};

static const luaL_Reg vec_metamethods[] = {
    {"__len", vec_len},
    {"__tostring", vec_tostring},
    {NULL, NULL},
};

static const lrag_class vec_class = {MT, "index", vec_methods, vec_metamethods, vec_fin};

static const luaL_Reg vec_funcs[] = {
    {"load", vec_load},     {"new", vec_new}, {"pack", vec_pack},
    {"unpack", vec_unpack}, {"text", vec_text}, {NULL, NULL},
};

int lrag_open_vec(lua_State *L) {
  lrag_newclass(L, &vec_class);
  luaL_setfuncs(L, vec_funcs, 0);
  return 0;
}
