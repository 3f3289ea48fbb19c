/*
** lrag_aux.c: the binding toolkit every lrag_*.c is built on: the one
** translation of core statuses into the error rule, the option readers,
** class registration and live-object checks, argument readers (ids, k,
** filters, paths), hit lists, and GC-owned boxes for C memory.
*/
#include "lrag.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rag.h"

/* {====== Errors ======} */

int lrag_error(lua_State *L, int rc, const char *fname, const char *fmt, ...) {
  char detail[512];
  const char *code = rag_status_code(rc, NULL);
  if (fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
  } else {
    snprintf(detail, sizeof detail, "%s", rag_strerror(rc));
  }
  if (code == NULL) return luaL_error(L, "%s: %s", fname, detail);
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", fname, detail);
  lua_pushstring(L, code);
  return 3;
}

int lrag_texterror(lua_State *L, int rc, const char *fname, size_t errpos) {
  if (rc == RAG_EENCODING)
    return lrag_error(L, rc, fname, "invalid utf-8 at byte %lu", (unsigned long)errpos);
  return lrag_error(L, rc, fname, NULL);
}

int lrag_dir_error(lua_State *L, int rc, const char *fname, const char *dir, const char *file,
                   const char *why, int err) {
  size_t dl = strlen(dir);
  while (dl > 1 && dir[dl - 1] == '/') dl--;
  lua_pushlstring(L, dir, dl);
  if (file[0] != '\0') {
    lua_pushliteral(L, "/");
    lua_pushstring(L, file);
    lua_concat(L, 3);
  }
  return lrag_file_error(L, rc, fname, lua_tostring(L, -1), why, err);
}

int lrag_file_error(lua_State *L, int rc, const char *fname, const char *path, const char *why,
                    int err) {
  char reason[256];
  if (rc == RAG_EIO && err != 0) { /* lowercase, as every message: "no such file ..." */
    snprintf(reason, sizeof reason, "%s", strerror(err));
    reason[0] = (char)tolower((unsigned char)reason[0]);
    why = reason;
  }
  if (why == NULL || *why == '\0') why = rag_strerror(rc);
  return lrag_error(L, rc, fname, "'%s': %s", path, why);
}

void lrag_pusherrors(lua_State *L) {
  int rc, n = 0;
  lua_newtable(L);
  for (rc = 0; rc < RAG_NSTATUS; rc++) {
    const char *meaning, *code = rag_status_code(rc, &meaning);
    if (code == NULL) continue;
    lua_createtable(L, 0, 2);
    lua_pushstring(L, code);
    lua_setfield(L, -2, "code");
    lua_pushstring(L, meaning);
    lua_setfield(L, -2, "meaning");
    lua_rawseti(L, -2, ++n);
  }
}

/* {====== Options ======} */

void lrag_checkopts(lua_State *L, int idx, const char *fname, const char *const allowed[]) {
  idx = lua_absindex(L, idx);
  if (lua_isnoneornil(L, idx)) return;
  if (!lua_istable(L, idx))
    luaL_error(L, "%s: opts must be a table, got %s", fname, luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    const char *const *a = allowed;
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "%s: option keys must be strings", fname);
    while (*a != NULL && strcmp(*a, lua_tostring(L, -1)) != 0) a++;
    if (*a == NULL) luaL_error(L, "%s: unknown option '%s'", fname, lua_tostring(L, -1));
  }
}

/* Pushes opts[key] (nil when opts is not a table); true when it is not nil. */
static int get_option(lua_State *L, int idx, const char *key) {
  if (!lua_istable(L, idx)) {
    lua_pushnil(L);
    return 0;
  }
  lua_getfield(L, idx, key);
  return !lua_isnil(L, -1);
}

static void bad_option(lua_State *L, const char *fname, const char *key, const char *what) {
  luaL_error(L, "%s: option '%s' must be %s, got %s", fname, key, what, luaL_typename(L, -1));
}

/*
** opts[key] as a number in [lo, hi], integral when `integer`; `def` when
** absent. Raises "fname: option 'key' must be [an integer] in [lo, hi]" (or
** >= lo, <= hi; bounds printed with snprintf: lua_pushfstring has no %g).
*/
static lua_Number opt_range(lua_State *L, int idx, const char *fname, const char *key,
                            lua_Number def, lua_Number lo, lua_Number hi, int integer) {
  const char *what = integer ? "an integer" : "a number", *sep = integer ? " " : "";
  char a[32], b[32];
  lua_Number v;
  if (!get_option(L, idx, key)) {
    lua_pop(L, 1);
    return def;
  }
  if (lua_type(L, -1) != LUA_TNUMBER) bad_option(L, fname, key, what);
  v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  if (v >= lo && v <= hi && (!integer || v == floor(v))) return v;
  snprintf(a, sizeof a, "%.15g", (double)lo);
  snprintf(b, sizeof b, "%.15g", (double)hi);
  if (lo == -HUGE_VAL && hi == HUGE_VAL)
    return luaL_error(L, "%s: option '%s' must be %s, not NaN", fname, key, what);
  if (hi == HUGE_VAL || hi >= 9007199254740992.0)
    return luaL_error(L, "%s: option '%s' must be %s >= %s", fname, key, what, a);
  if (lo == -HUGE_VAL) return luaL_error(L, "%s: option '%s' must be %s <= %s", fname, key, what, b);
  if (!integer) what = ""; /* "must be in [0, 1]" reads better than "a number in" */
  return luaL_error(L, "%s: option '%s' must be %s%sin [%s, %s]", fname, key, what, sep, a, b);
}

lua_Integer lrag_optinteger(lua_State *L, int idx, const char *fname, const char *key,
                            lua_Integer def, lua_Number lo, lua_Number hi) {
  return (lua_Integer)opt_range(L, idx, fname, key, (lua_Number)def, lo, hi, 1);
}

lua_Number lrag_optnumber(lua_State *L, int idx, const char *fname, const char *key,
                          lua_Number def, lua_Number lo, lua_Number hi) {
  return opt_range(L, idx, fname, key, def, lo, hi, 0);
}

int lrag_optboolean(lua_State *L, int idx, const char *fname, const char *key, int def) {
  int v = def;
  if (get_option(L, idx, key)) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) bad_option(L, fname, key, "a boolean");
    v = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

const char *lrag_optstring(lua_State *L, int idx, const char *fname, const char *key,
                           const char *def, size_t *len) {
  const char *s = def;
  if (get_option(L, idx, key)) {
    if (lua_type(L, -1) != LUA_TSTRING) bad_option(L, fname, key, "a string");
    s = lua_tolstring(L, -1, len); /* anchored by the opts table */
  } else if (len != NULL) {
    *len = def != NULL ? strlen(def) : 0;
  }
  lua_pop(L, 1);
  return s;
}

int lrag_optenum(lua_State *L, int idx, const char *fname, const char *key, int def,
                 const char *const names[]) {
  int i;
  const char *s;
  if (!get_option(L, idx, key)) {
    lua_pop(L, 1);
    return def;
  }
  s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  for (i = 0; s != NULL && names[i] != NULL; i++) {
    if (strcmp(names[i], s) == 0) {
      lua_pop(L, 1);
      return i;
    }
  }
  { /* "fname: option 'key' must be "a", "b" or "c"" */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (i = 0; names[i] != NULL; i++) {
      if (i > 0) luaL_addstring(&b, names[i + 1] == NULL ? " or " : ", ");
      luaL_addchar(&b, '"');
      luaL_addstring(&b, names[i]);
      luaL_addchar(&b, '"');
    }
    luaL_pushresult(&b);
    return luaL_error(L, "%s: option '%s' must be %s", fname, key, lua_tostring(L, -1));
  }
}

int lrag_opttable(lua_State *L, int idx, const char *fname, const char *key) {
  if (!get_option(L, idx, key)) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1)) bad_option(L, fname, key, "a table");
  return 1;
}

/* -- Added with the conversion of chunk, eval, fuse, http, json, pack, rerank, text -- */

struct rag_tokenizer *lrag_opttokenizer(lua_State *L, int idx, const char *fname) {
  struct rag_tokenizer *t;
  if (!get_option(L, idx, "tokenizer") || luaL_testudata(L, -1, "rag.tokenizer.approx") != NULL)
    return NULL;
  if ((t = lrag_totokenizer(L, -1, fname)) == NULL)
    luaL_error(L, "%s: option 'tokenizer' must be a rag.tokenizer or rag.tokenizer.approx()",
               fname);
  return t;
}

/* {====== Classes ======} */

static int object_close(lua_State *L) {
  const lrag_class *c = (const lrag_class *)lua_touserdata(L, lua_upvalueindex(1));
  void **u = (void **)luaL_checkudata(L, 1, c->name);
  if (*u != NULL) c->fin(u);
  *u = NULL;
  return 0;
}

static int object_tostring(lua_State *L) {
  const lrag_class *c = (const lrag_class *)lua_touserdata(L, lua_upvalueindex(1));
  void **u = (void **)luaL_checkudata(L, 1, c->name);
  if (*u == NULL) lua_pushfstring(L, "%s (closed)", c->name);
  else lua_pushfstring(L, "%s (%p)", c->name, (void *)u);
  return 1;
}

void lrag_newclass(lua_State *L, const lrag_class *c) {
  if (!luaL_newmetatable(L, c->name)) {
    lua_pop(L, 1);
    return;
  }
  lua_pushstring(L, c->name); /* 5.4 sets it too; older versions do not */
  lua_setfield(L, -2, "__name");
  lua_newtable(L);
  luaL_setfuncs(L, c->methods, 0);
  lua_pushlightuserdata(L, (void *)c);
  lua_pushcclosure(L, object_close, 1);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "close");
  lua_pushvalue(L, -1);
  lua_setfield(L, -4, "__gc");
  lua_setfield(L, -3, "__close");
  lua_setfield(L, -2, "__index");
  lua_pushlightuserdata(L, (void *)c);
  lua_pushcclosure(L, object_tostring, 1);
  lua_setfield(L, -2, "__tostring"); /* the class's own replaces it below */
  if (c->metamethods != NULL) luaL_setfuncs(L, c->metamethods, 0);
  lua_pop(L, 1);
}

void *lrag_newobject(lua_State *L, const lrag_class *c, size_t size) {
  void *u = lua_newuserdatauv(L, size, 1);
  memset(u, 0, size);
  luaL_setmetatable(L, c->name);
  return u;
}

void *lrag_checkobject(lua_State *L, int idx, const lrag_class *c, const char *fname) {
  void **u = (void **)luaL_checkudata(L, idx, c->name);
  if (*u == NULL) luaL_error(L, "%s: %s is closed", fname, c->noun);
  return u;
}

void *lrag_toobject(lua_State *L, int idx, const lrag_class *c) {
  return luaL_testudata(L, idx, c->name);
}

void *lrag_peekobject(lua_State *L, int idx, const char *tname, const char *fname) {
  void **u = (void **)luaL_testudata(L, idx, tname);
  if (u == NULL)
    luaL_error(L, "%s: argument %d must be a %s, got %s", fname, idx, tname,
               luaL_typename(L, idx));
  if (*u == NULL) luaL_error(L, "%s: the %s is closed", fname, tname);
  return *u;
}

void *lrag_takeobject(lua_State *L, int idx, const char *tname, const char *fname) {
  void **u = (void **)lrag_peekobject(L, idx, tname, fname), *p = u;
  u = (void **)lua_touserdata(L, idx);
  *u = NULL;
  return p;
}

/* {====== Arguments: ids, k, paths, filters, hits ======} */

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

const char *lrag_checkpath(lua_State *L, int idx, const char *fname) {
  size_t len;
  const char *path;
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "%s: path must be a string, got %s", fname, luaL_typename(L, idx));
  path = lua_tolstring(L, idx, &len);
  if (strlen(path) != len) luaL_error(L, "%s: path contains a NUL byte", fname);
  return path;
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

/* {------ Result fields ------} */

void lrag_setint(lua_State *L, const char *key, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}

void lrag_setnum(lua_State *L, const char *key, lua_Number v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, key);
}

void lrag_setbool(lua_State *L, const char *key, int v) {
  lua_pushboolean(L, v);
  lua_setfield(L, -2, key);
}

void lrag_setstr(lua_State *L, const char *key, const char *s) {
  lua_pushstring(L, s);
  lua_setfield(L, -2, key);
}

void lrag_pushhex(lua_State *L, const unsigned char *d, size_t n) {
  static const char hex[] = "0123456789abcdef";
  char out[128];
  size_t i;
  for (i = 0; i < n && i < sizeof out / 2; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  lua_pushlstring(L, out, 2 * i);
}

/* {------ List arguments ------} */

size_t lrag_checklist(lua_State *L, int idx, const char *fname, const char *must) {
  size_t n;
  if (!lua_istable(L, idx)) luaL_error(L, "%s: %s, got %s", fname, must, luaL_typename(L, idx));
  n = (size_t)lua_rawlen(L, idx);
  if (n > 0x7fffffff) luaL_error(L, "%s: %s, got one of more than 2^31 - 1 entries", fname, must);
  return n;
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
