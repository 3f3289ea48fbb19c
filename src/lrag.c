/*
** lrag.c: luaopen_rag_core, the only exported symbol, and the helpers the
** bindings share. Each lrag_open_* adds one concept (json, http, text, ...)
** to the module table as a subtable.
*/
#include "lrag.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rag.h"

/* {====== Errors ======} */

int lrag_fail(lua_State *L, const char *code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lua_pushnil(L);
  lua_pushstring(L, msg);
  lua_pushstring(L, code);
  return 3;
}

const char *lrag_code(int rc) {
  switch (rc) {
    case RAG_EIO: return "io";
    case RAG_EFORMAT: return "format";
    case RAG_EVERSION: return "version";
    case RAG_ECORRUPT: return "corrupt";
    case RAG_EENCODING: return "encoding";
    case RAG_ETIMEOUT: return "timeout";
    default: return "http";
  }
}

int lrag_loadfail(lua_State *L, int rc, const char *fname, const char *path, const char *why,
                  int err) {
  if (rc == RAG_ENOMEM) return luaL_error(L, "%s: not enough memory", fname);
  if (rc == RAG_EIO) /* no errno: the path is no regular file, why says what it is */
    return lrag_fail(L, "io", "%s: '%s': %s", fname, path, err != 0 ? strerror(err) : why);
  return lrag_fail(L, lrag_code(rc), "%s: '%s': %s", fname, path, why);
}

/* {====== Options ======} */

void lrag_checkopts(lua_State *L, int idx, const char *fname,
                    const char *const allowed[]) {
  idx = lua_absindex(L, idx);
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    const char *const *a = allowed;
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *key = lua_tostring(L, -1);
      while (*a != NULL && strcmp(*a, key) != 0) a++;
      if (*a != NULL) continue;
      luaL_error(L, "%s: unknown option '%s'", fname, key);
    }
    luaL_error(L, "%s: option keys must be strings", fname);
  }
}

lua_Number lrag_optnumber(lua_State *L, int idx, const char *key,
                          lua_Number def) {
  lua_Number v = def;
  if (!lua_istable(L, idx)) return def;
  lua_getfield(L, idx, key);
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "option '%s' must be a number, got %s", key,
                 luaL_typename(L, -1));
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

/* {====== Ids, k and filters ======} */

const char *lrag_checkid(lua_State *L, int idx, const char *fname, size_t *len) {
  int t = lua_type(L, idx);
  if (t != LUA_TSTRING && t != LUA_TNUMBER)
    luaL_error(L, "%s: id must be a string or a number, got %s", fname, luaL_typename(L, idx));
  return lua_tolstring(L, idx, len);
}

size_t lrag_optk(lua_State *L, int idx, const char *fname, size_t def) {
  lua_Number v;
  if (lua_isnoneornil(L, idx)) return def;
  if (lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L, "%s: k must be a positive integer, got %s", fname, luaL_typename(L, idx));
  v = lua_tonumber(L, idx);
  if (!(v >= 1 && v <= 1e15 && v == floor(v)))
    luaL_error(L, "%s: k must be a positive integer", fname);
  return (size_t)v;
}

/* The filter's ids as a list of strings in a new table at the top; its length. */
static size_t collect_filter(lua_State *L, int idx, const char *fname) {
  size_t n = 0;
  int list;
  lua_newtable(L);
  list = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    int vt = lua_type(L, -1), kt = lua_type(L, -2);
    if (vt == LUA_TBOOLEAN) {
      if (kt != LUA_TSTRING && kt != LUA_TNUMBER)
        luaL_error(L, "%s: filter keys must be ids (strings or numbers)", fname);
      if (lua_toboolean(L, -1)) {
        lua_pushvalue(L, -2);
        lua_tostring(L, -1); /* a copy: converting the key itself would break lua_next */
        lua_rawseti(L, list, (int)++n);
      }
    } else if (kt == LUA_TNUMBER && (vt == LUA_TSTRING || vt == LUA_TNUMBER)) {
      lua_pushvalue(L, -1);
      lua_tostring(L, -1);
      lua_rawseti(L, list, (int)++n);
    } else {
      luaL_error(L, "%s: filter must be a set { [id] = true } or a list of ids", fname);
    }
    lua_pop(L, 1);
  }
  return n;
}

size_t lrag_checkfilter(lua_State *L, int idx, const char *fname, const char ***ids,
                        size_t **lens) {
  size_t i, n;
  int list;
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    luaL_error(L, "%s: filter must be a table, got %s", fname, luaL_typename(L, idx));
  n = collect_filter(L, idx, fname);
  list = lua_gettop(L);
  if (RAG_MUL_OVERFLOWS(n + 1, sizeof(char *) + sizeof(size_t)))
    luaL_error(L, "%s: filter too large", fname);
  *ids = (const char **)lua_newuserdatauv(L, (n + 1) * (sizeof(char *) + sizeof(size_t)), 0);
  *lens = (size_t *)(void *)(*ids + n + 1);
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, list, (int)i + 1);
    (*ids)[i] = lua_tolstring(L, -1, &(*lens)[i]); /* anchored by the list */
    lua_pop(L, 1);
  }
  return n;
}

void lrag_pushhits(lua_State *L, const rag_hit *hits, size_t n, lrag_idfn idof,
                   const void *obj) {
  size_t i;
  lua_createtable(L, n > 0x7fffffff ? 0 : (int)n, 0);
  for (i = 0; i < n; i++) {
    size_t len;
    const char *id = idof(obj, hits[i].id, &len);
    lua_createtable(L, 0, 2);
    lua_pushlstring(L, id, len);
    lua_setfield(L, -2, "id");
    lua_pushnumber(L, hits[i].score);
    lua_setfield(L, -2, "score");
    lua_rawseti(L, -2, (int)i + 1);
  }
}

/* {====== Boxes ======} */

#define BOX_MT "rag.box"

static int box_gc(lua_State *L) {
  lrag_box_free((lrag_box *)luaL_checkudata(L, 1, BOX_MT));
  return 0;
}

static void set_box_mt(lua_State *L) {
  if (luaL_newmetatable(L, BOX_MT)) {
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_setmetatable(L, -2);
}

lrag_box *lrag_box_new(lua_State *L, void (*fin)(void *p)) {
  lrag_box *box = (lrag_box *)lua_newuserdatauv(L, sizeof *box, 0);
  box->p = NULL;
  box->fin = fin;
  set_box_mt(L);
  return box;
}

void lrag_box_free(lrag_box *box) {
  if (box->p != NULL) box->fin(box->p);
  box->p = NULL;
}

static void buf_fin(void *p) {
  lrag_buf *b = (lrag_buf *)p;
  rag_free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

void *lrag_box_embed(lua_State *L, size_t size, void (*fin)(void *p)) {
  lrag_box *box = (lrag_box *)lua_newuserdatauv(L, sizeof *box + size, 0);
  void *p = box + 1;
  memset(p, 0, size);
  box->p = p;
  box->fin = fin;
  set_box_mt(L);
  return p;
}

lrag_buf *lrag_buf_new(lua_State *L) {
  return (lrag_buf *)lrag_box_embed(L, sizeof(lrag_buf), buf_fin);
}

void lrag_buf_add(lua_State *L, lrag_buf *b, const char *s, size_t len) {
  if (len > b->cap - b->len) {
    size_t cap = b->cap ? b->cap : 256;
    char *p;
    while (cap - b->len < len) {
      if (cap > ((size_t)-1) / 2) luaL_error(L, "buffer too large");
      cap *= 2;
    }
    p = (char *)rag_realloc(b->p, cap);
    if (p == NULL) luaL_error(L, "not enough memory");
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, len);
  b->len += len;
}

void lrag_buf_addc(lua_State *L, lrag_buf *b, char c) {
  if (b->len < b->cap) b->p[b->len++] = c;
  else lrag_buf_add(L, b, &c, 1);
}

/* {====== Module ======} */

#ifdef RAG_TESTING
static int core_fail_alloc(lua_State *L) {
  rag_test_fail_alloc((long)luaL_checkinteger(L, 1));
  return 0;
}

/*
** Deliberate memory errors, so `make asan` can prove that the sanitizers
** are live and fatal. Test builds only.
*/
static int core_fault(lua_State *L) {
  const char *kind = luaL_checkstring(L, 1);
  volatile char *p = (volatile char *)rag_malloc(16);
  if (p == NULL) return luaL_error(L, "not enough memory");
  p[0] = 1; /* volatile: the allocation cannot be optimised away */
  if (strcmp(kind, "overflow") == 0) p[15 + lua_gettop(L)] = 1;
  if (strcmp(kind, "leak") != 0) rag_free((void *)p);
  return 0;
}
#endif

static const luaL_Reg opens[] = {
  {"bm25", lrag_open_bm25},
  {"hnsw", lrag_open_hnsw},

  {"chunk", lrag_open_chunk},
  {"eval", lrag_open_eval},
  {"fuse", lrag_open_fuse},
  {"hashing", lrag_open_hashing},
  {"http", lrag_open_http},
  {"json", lrag_open_json},
  {"model2vec", lrag_open_model2vec},
  {"pack", lrag_open_pack},
  {"rerank", lrag_open_rerank},
  {"text", lrag_open_text},
  {"text", lrag_open_analyzer},
  {"text", lrag_open_sentences},
  {"tokenizer", lrag_open_tokenizer},
  {"vec", lrag_open_vec},
  {NULL, NULL},
};

RAG_API int luaopen_rag_core(lua_State *L) {
  const luaL_Reg *o;
  lua_newtable(L);
  for (o = opens; o->name != NULL; o++) { /* several openers may share a table */
    lua_getfield(L, -1, o->name);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_newtable(L);
    }
    o->func(L);
    lua_setfield(L, -2, o->name);
  }
  lua_pushliteral(L, RAG_VERSION);
  lua_setfield(L, -2, "version");
#ifdef RAG_TESTING
  lua_pushcfunction(L, core_fail_alloc);
  lua_setfield(L, -2, "_fail_alloc");
  lua_pushcfunction(L, core_fault);
  lua_setfield(L, -2, "_fault");
#endif
  return 1;
}
