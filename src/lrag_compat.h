/*
** lrag_compat.h: lets the bindings, written against the Lua 5.4 C API,
** build unchanged for Lua 5.1, 5.2, 5.3 and LuaJIT 2.1. Only what the
** bindings use is back-filled; shims are static so nothing extra is exported.
*/
#ifndef LRAG_COMPAT_H
#define LRAG_COMPAT_H

#include <math.h>

#include "lauxlib.h"
#include "lua.h"

#if LUA_VERSION_NUM < 502 /* Lua 5.1 and LuaJIT */

#ifndef LUA_OK
#define LUA_OK 0
#endif
#define lua_rawlen(L, i) lua_objlen((L), (i))

static inline int lrag_compat_absindex(lua_State *L, int i) {
  return (i > 0 || i <= LUA_REGISTRYINDEX) ? i : lua_gettop(L) + i + 1;
}
#define lua_absindex lrag_compat_absindex

static inline void lrag_compat_rawgetp(lua_State *L, int t, const void *p) {
  t = lua_absindex(L, t);
  lua_pushlightuserdata(L, (void *)p);
  lua_rawget(L, t);
}
#define lua_rawgetp lrag_compat_rawgetp

static inline void lrag_compat_rawsetp(lua_State *L, int t, const void *p) {
  t = lua_absindex(L, t);
  lua_pushlightuserdata(L, (void *)p);
  lua_insert(L, -2);
  lua_rawset(L, t);
}
#define lua_rawsetp lrag_compat_rawsetp

#ifndef luaL_newlibtable /* PUC 5.1; LuaJIT 2.1 already has these */
static inline void lrag_compat_setfuncs(lua_State *L, const luaL_Reg *l,
                                        int nup) {
  luaL_checkstack(L, nup, "too many upvalues");
  for (; l->name != NULL; l++) {
    int i;
    for (i = 0; i < nup; i++) lua_pushvalue(L, -nup);
    lua_pushcclosure(L, l->func, nup);
    lua_setfield(L, -(nup + 2), l->name);
  }
  lua_pop(L, nup);
}
#define luaL_setfuncs lrag_compat_setfuncs

static inline void *lrag_compat_testudata(lua_State *L, int i,
                                          const char *tname) {
  void *p = lua_touserdata(L, i);
  if (p == NULL || !lua_getmetatable(L, i)) return NULL;
  luaL_getmetatable(L, tname);
  if (!lua_rawequal(L, -1, -2)) p = NULL;
  lua_pop(L, 2);
  return p;
}
#define luaL_testudata lrag_compat_testudata

#define luaL_setmetatable(L, tname) \
  (luaL_getmetatable((L), (tname)), lua_setmetatable((L), -2))
#define luaL_newlibtable(L, l) \
  lua_createtable((L), 0, (int)(sizeof(l) / sizeof((l)[0]) - 1))
#define luaL_newlib(L, l) (luaL_newlibtable((L), (l)), luaL_setfuncs((L), (l), 0))
#endif /* !luaL_newlibtable */

#endif /* LUA_VERSION_NUM < 502 */

#if LUA_VERSION_NUM < 503
/* Before 5.3 every number is a double: "integer" means an integral value. */
static inline int lrag_compat_isinteger(lua_State *L, int i) {
  if (lua_type(L, i) != LUA_TNUMBER) return 0;
  {
    lua_Number n = lua_tonumber(L, i);
    return n == floor(n) && fabs(n) < 9007199254740992.0; /* 2^53 */
  }
}
#define lua_isinteger lrag_compat_isinteger
#endif

#if LUA_VERSION_NUM < 504
#define lua_newuserdatauv(L, size, nuv) lua_newuserdata((L), (size))
#endif

#if LUA_VERSION_NUM < 502 && !defined(luaL_tolstring)
/* What tostring gives for the value at i (absolute), pushed. */
static inline const char *lrag_compat_tolstring(lua_State *L, int i, size_t *len) {
  if (!luaL_callmeta(L, i, "__tostring")) {
    switch (lua_type(L, i)) {
      case LUA_TNUMBER:
      case LUA_TSTRING: lua_pushvalue(L, i); break;
      case LUA_TBOOLEAN: lua_pushstring(L, lua_toboolean(L, i) ? "true" : "false"); break;
      case LUA_TNIL: lua_pushliteral(L, "nil"); break;
      default: lua_pushfstring(L, "%s: %p", luaL_typename(L, i), lua_topointer(L, i));
    }
  }
  return lua_tolstring(L, -1, len);
}
#define luaL_tolstring lrag_compat_tolstring
#endif

#endif
