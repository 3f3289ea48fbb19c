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
#endif
  return 1;
}
