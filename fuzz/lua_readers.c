/*
** fuzz/lua_readers.c: the readers that run through Lua (JSON, the CSV, JSON
** Lines, Markdown and HTML loaders, an index's manifest and parts, .tiktoken
** vocabularies, Model2Vec folders) on any bytes, in one Lua 5.4 state with
** rag's C core linked in. fuzz/readers.lua picks the reader and checks the
** error rule; a raise from it is a finding. Run from the repository's root
** (it reads lua/ and fuzz/readers.lua there).
*/
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

int luaopen_rag_core(lua_State *L);

static lua_State *L;
static int driver = LUA_NOREF;

static void fail(const char *what) {
  fprintf(stderr, "fuzz/lua_readers: %s: %s\n", what, lua_tostring(L, -1));
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  L = luaL_newstate();
  if (L == NULL) abort();
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_rag_core);
  lua_setfield(L, -2, "rag.core");
  lua_pop(L, 1);
  if (luaL_dostring(L, "package.path = 'lua/?.lua;lua/?/init.lua'") != LUA_OK) fail("path");
  if (luaL_dofile(L, "fuzz/readers.lua") != LUA_OK) fail("fuzz/readers.lua");
  driver = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, driver);
  lua_pushlstring(L, (const char *)data, size);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) fail("a reader broke the error rule");
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
