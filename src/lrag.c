/*
** lrag.c: luaopen_rag_core, the only exported symbol. Each lrag_open_* adds
** one concept (json, http, text, ...) to the module table as a subtable;
** the helpers they share are in lrag_aux.c.
*/
#include "lrag.h"

#include <string.h>

#include "rag.h"

/* {====== Module ======} */

#ifdef RAG_TESTING
static int core_fail_alloc(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)rag_test_fail_alloc((long)luaL_checkinteger(L, 1)));
  return 1;
}

#if LUA_VERSION_NUM >= 504
/*
** Test builds only: the Lua state's allocator, wrapped so that a spec can
** make every allocation that grows memory fail from the Nth on. Persistent,
** because Lua 5.4 retries a failed allocation after an emergency
** collection: failing only one would rarely reach an error path.
*/
static struct {
  lua_Alloc f;
  void *ud;
  long at, seen, fired; /* fail growth number `at` and every later one; 0: off */
} lalloc;

static void *test_lua_alloc(void *ud, void *p, size_t osize, size_t nsize) {
  if (lalloc.at > 0 && nsize > 0 && (p == NULL || nsize > osize) &&
      ++lalloc.seen >= lalloc.at) {
    lalloc.fired++;
    return NULL;
  }
  return lalloc.f(ud, p, osize, nsize);
}

/*
** _lua_oom(n, f, ...): calls f(...) with every growth from the nth on
** failing; returns the number of failed allocations, then true and f's
** first result or false and its error. Arming and disarming happen here,
** in C, so that nothing between them allocates but f.
*/
static int core_lua_oom(lua_State *L) {
  long n = (long)luaL_checkinteger(L, 1);
  int nargs = lua_gettop(L) - 2, status;
  void *ud;
  luaL_checktype(L, 2, LUA_TFUNCTION);
  luaL_checkstack(L, 8, "rag.core._lua_oom");
  if (lua_getallocf(L, &ud) != test_lua_alloc) {
    lalloc.f = lua_getallocf(L, &lalloc.ud);
    lua_setallocf(L, test_lua_alloc, lalloc.ud);
  }
  lalloc.seen = lalloc.fired = 0;
  lalloc.at = n > 0 ? n : 0;
  status = lua_pcall(L, nargs, 1, 0);
  lalloc.at = 0;
  lua_pushinteger(L, (lua_Integer)lalloc.fired);
  lua_pushboolean(L, status == LUA_OK);
  lua_pushvalue(L, -3);
  return 3;
}
#endif

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
  {"graph", lrag_open_graph},
  {"hashing", lrag_open_hashing},
  {"html", lrag_open_html},
  {"http", lrag_open_http},
  {"json", lrag_open_json},
  {"model2vec", lrag_open_model2vec},
  {"bert", lrag_open_bert},
  {"index", lrag_open_index},
  {"fs", lrag_open_fs},
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
  lrag_pusherrors(L);
  lua_setfield(L, -2, "errors");
#ifdef RAG_TESTING
  lua_pushcfunction(L, core_fail_alloc);
  lua_setfield(L, -2, "_fail_alloc");
  lua_pushcfunction(L, core_fault);
  lua_setfield(L, -2, "_fault");
#if LUA_VERSION_NUM >= 504
  lua_pushcfunction(L, core_lua_oom);
  lua_setfield(L, -2, "_lua_oom");
#endif
#endif
  return 1;
}
