/*
** lrag_tokenizer.c: rag.core.tokenizer.new(vocab, pretok, specials) and
** .load(path, pretok, specials) build a userdata "rag.tokenizer" over the
** exact BPE core; approx() makes the stateless estimator
** "rag.tokenizer.approx". lua/rag/tokenizer.lua finds the vocabulary files
** and caches one tokenizer per encoding.
*/
#include "lrag.h"

#include <stdio.h>
#include <string.h>

#include "rag.h"
#include "rag_approx.h"
#include "rag_file.h"
#include "rag_tokenizer.h"

#define MT "rag.tokenizer"
#define MT_APPROX "rag.tokenizer.approx"

typedef struct ltok {
  rag_tokenizer *t; /* NULL once closed */
  char name[64];
} ltok;

/* The estimator holds nothing: close (for <close> and for code written
** against any tokenizer) changes nothing, and it is never "closed". */
typedef struct lapprox {
  void *none; /* always NULL */
} lapprox;

static void tok_fin(void *u) {
  rag_tokenizer_free(((ltok *)u)->t);
}

static void approx_fin(void *u) {
  (void)u;
}

static const lrag_class tok_class, approx_class;

static ltok *check_open(lua_State *L, const char *fname) {
  return (ltok *)lrag_checkobject(L, 1, &tok_class, fname);
}

rag_tokenizer *lrag_totokenizer(lua_State *L, int idx, const char *fname) {
  if (lrag_toobject(L, idx, &tok_class) == NULL) return NULL;
  return ((ltok *)lrag_checkobject(L, idx, &tok_class, fname))->t;
}

static void ids_fin(void *p) {
  rag_free(p);
}

/* {====== The exact tokenizer ======} */

/* The set of allowed specials from opts.allowed_special: "all", a list of
** special texts, or a set { [text] = true }. */
static uint32_t check_allowed(lua_State *L, const rag_tokenizer *t, int idx, const char *fname) {
  static const char *const keys[] = {"allowed_special", NULL};
  uint32_t mask = 0;
  size_t i, ns = rag_tokenizer_nspecials(t);
  lrag_checkopts(L, idx, fname, keys);
  if (!lua_istable(L, idx)) return 0;
  lua_getfield(L, idx, "allowed_special");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "all") == 0) {
    lua_pop(L, 1);
    return ns >= 32 ? UINT32_MAX : (1u << ns) - 1;
  }
  if (!lua_istable(L, -1))
    luaL_error(L, "%s: option 'allowed_special' must be \"all\" or a table of special tokens",
               fname);
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    const char *text;
    size_t len;
    int val = -1, key = -2; /* a list holds texts as values; a set as keys */
    int found = 0;
    if (lua_type(L, key) == LUA_TSTRING) {
      if (!lua_toboolean(L, val)) {
        lua_pop(L, 1);
        continue;
      }
      text = lua_tolstring(L, key, &len);
    } else if (lua_type(L, val) == LUA_TSTRING) {
      text = lua_tolstring(L, val, &len);
    } else {
      return (uint32_t)luaL_error(L, "%s: allowed_special entries must be strings", fname);
    }
    for (i = 0; i < ns; i++) {
      const rag_special *sp = rag_tokenizer_special(t, i);
      if (sp->len == len && memcmp(sp->text, text, len) == 0) {
        mask |= 1u << i;
        found = 1;
      }
    }
    if (!found) return (uint32_t)luaL_error(L, "%s: unknown special token '%s'", fname, text);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return mask;
}

static int tok_encode(lua_State *L) {
  ltok *u = check_open(L, "rag.tokenizer.encode");
  size_t len, n, errpos = 0, i;
  const char *s = luaL_checklstring(L, 2, &len);
  uint32_t allowed = check_allowed(L, u->t, 3, "rag.tokenizer.encode");
  uint32_t *ids;
  lrag_box *box = lrag_box_new(L, ids_fin);
  int rc = rag_tokenizer_encode(u->t, s, len, allowed, &ids, &n, &errpos);
  if (rc != RAG_OK) return lrag_texterror(L, rc, "rag.tokenizer.encode", errpos);
  box->p = ids;
  lua_createtable(L, n > 0x7fffffff ? 0x7fffffff : (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushinteger(L, (lua_Integer)ids[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lrag_box_free(box);
  return 1;
}

static int tok_count(lua_State *L) {
  ltok *u = check_open(L, "rag.tokenizer.count");
  size_t len, n, errpos = 0;
  const char *s = luaL_checklstring(L, 2, &len);
  uint32_t allowed = check_allowed(L, u->t, 3, "rag.tokenizer.count");
  int rc = rag_tokenizer_count(u->t, s, len, allowed, &n, &errpos);
  if (rc != RAG_OK) return lrag_texterror(L, rc, "rag.tokenizer.count", errpos);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int tok_decode(lua_State *L) {
  static const char *fname = "rag.tokenizer.decode";
  ltok *u = check_open(L, fname);
  size_t n, i, outlen, bad = 0;
  uint32_t *ids;
  char *out;
  lrag_box *box, *obox;
  int rc;
  luaL_checktype(L, 2, LUA_TTABLE);
  n = (size_t)lua_rawlen(L, 2);
  box = lrag_box_new(L, ids_fin);
  if (RAG_MUL_OVERFLOWS(n, sizeof(uint32_t)) ||
      (box->p = rag_malloc(n ? n * sizeof(uint32_t) : 1)) == NULL)
    return lrag_error(L, RAG_ENOMEM, fname, NULL);
  ids = (uint32_t *)box->p;
  for (i = 0; i < n; i++) {
    lua_Number v;
    lua_rawgeti(L, 2, (lua_Integer)i + 1);
    v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || v != v || v < 0 || v > 4294967295.0 ||
        v != (lua_Number)(uint32_t)v)
      return luaL_error(L, "%s: ids[%d] is not a token id", fname, (int)i + 1);
    ids[i] = (uint32_t)v;
    lua_pop(L, 1);
  }
  obox = lrag_box_new(L, ids_fin);
  rc = rag_tokenizer_decode(u->t, ids, n, &out, &outlen, &bad);
  if (rc == RAG_EINVAL)
    return lrag_error(L, rc, fname, "unknown token id %lu at ids[%lu]", (unsigned long)ids[bad],
                      (unsigned long)bad + 1);
  if (rc != RAG_OK) return lrag_error(L, rc, fname, NULL);
  obox->p = out;
  lua_pushlstring(L, out, outlen);
  lrag_box_free(obox);
  lrag_box_free(box);
  return 1;
}

static int tok_info(lua_State *L) {
  ltok *u = check_open(L, "rag.tokenizer.info");
  size_t i, ns = rag_tokenizer_nspecials(u->t);
  lua_createtable(L, 0, 4);
  lrag_setstr(L, "name", u->name);
  lrag_setint(L, "n_ranks", (lua_Integer)rag_tokenizer_nranks(u->t));
  lrag_setint(L, "cache", (lua_Integer)rag_tokenizer_cache_size(u->t));
  lua_createtable(L, 0, (int)ns);
  for (i = 0; i < ns; i++) {
    const rag_special *sp = rag_tokenizer_special(u->t, i);
    lua_pushlstring(L, sp->text, sp->len);
    lua_pushinteger(L, (lua_Integer)sp->id);
    lua_rawset(L, -3);
  }
  lua_setfield(L, -2, "special_tokens");
  return 1;
}

static int tok_tostring(lua_State *L) {
  ltok *u = (ltok *)luaL_checkudata(L, 1, MT);
  lua_pushfstring(L, "rag.tokenizer (%s%s)", u->name, u->t ? "" : ", closed");
  return 1;
}

/* {====== Construction ======} */

static const char *const pretok_names[] = {"cl100k_base", "o200k_base", NULL};

/* The arguments after the vocabulary: pretok, specials { [text] = id } (in
** sp, by id), name and the size of the cache of short pieces. */
typedef struct vocab_args {
  int pretok;
  const char *name;
  rag_special sp[RAG_TOKENIZER_MAX_SPECIALS];
  size_t ns;
  size_t cache;
} vocab_args;

static void check_vocab_args(lua_State *L, const char *fname, vocab_args *a) {
  size_t i;
  a->pretok = luaL_checkoption(L, 2, NULL, pretok_names);
  a->name = luaL_optstring(L, 4, pretok_names[a->pretok]);
  a->cache = RAG_TOKENIZER_CACHE;
  if (!lua_isnoneornil(L, 5)) {
    lua_Integer n = luaL_checkinteger(L, 5);
    luaL_argcheck(L, n >= 0 && n <= RAG_TOKENIZER_CACHE_MAX, 5, "cache size out of range");
    a->cache = (size_t)n;
  }
  a->ns = 0;
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, 3) != 0) {
    lua_Number id = lua_tonumber(L, -1);
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TNUMBER || id < 0 ||
        id > 4294967295.0 || id != (lua_Number)(uint32_t)id)
      luaL_error(L, "%s: special tokens map text to an integer id", fname);
    if (a->ns == RAG_TOKENIZER_MAX_SPECIALS)
      luaL_error(L, "%s: at most %d special tokens", fname, RAG_TOKENIZER_MAX_SPECIALS);
    a->sp[a->ns].text = lua_tolstring(L, -2, &a->sp[a->ns].len); /* anchored in the table */
    if (a->sp[a->ns].len == 0) luaL_error(L, "%s: empty special token", fname);
    a->sp[a->ns].id = (uint32_t)id;
    a->ns++;
    lua_pop(L, 1);
  }
  for (i = 1; i < a->ns; i++) { /* by id, so the order is reproducible */
    rag_special x = a->sp[i];
    size_t j = i;
    while (j > 0 && a->sp[j - 1].id > x.id) {
      a->sp[j] = a->sp[j - 1];
      j--;
    }
    a->sp[j] = x;
  }
}

/*
** Pushes a tokenizer over the vocabulary `data` or the failure: "fname:
** bad vocabulary line 3", or with a path "fname: 'path': bad vocabulary ...".
*/
static int push_tokenizer(lua_State *L, const char *fname, const char *path, const char *data,
                          size_t len, const vocab_args *a) {
  ltok *u = (ltok *)lrag_newobject(L, &tok_class, sizeof *u);
  size_t errline = 0;
  char why[128];
  int rc;
  strncpy(u->name, a->name, sizeof u->name - 1);
  rc = rag_tokenizer_new(data, len, (rag_pretok)a->pretok, a->sp, a->ns, a->cache, &u->t,
                         &errline);
  if (rc == RAG_OK) return 1;
  snprintf(why, sizeof why, "%s", rag_strerror(rc));
  if (rc == RAG_EINVAL) snprintf(why, sizeof why, "bad special tokens");
  if (rc == RAG_EFORMAT && errline > 0)
    snprintf(why, sizeof why, "bad vocabulary line %lu", (unsigned long)errline);
  else if (rc == RAG_EFORMAT)
    snprintf(why, sizeof why, "unusable vocabulary (empty, a byte missing, or a special id "
                              "taken by a token)");
  if (path != NULL) return lrag_file_error(L, rc, fname, path, why, 0);
  return lrag_error(L, rc, fname, "%s", why);
}

/* new(vocab_bytes, pretok, specials [, name [, cache]]) */
static int tok_new(lua_State *L) {
  vocab_args a;
  size_t len;
  const char *data = luaL_checklstring(L, 1, &len);
  check_vocab_args(L, "rag.tokenizer.new", &a);
  return push_tokenizer(L, "rag.tokenizer.new", NULL, data, len, &a);
}

/* load(path, pretok, specials [, name [, cache]]): new over the bytes of a .tiktoken file. */
static int tok_load(lua_State *L) {
  static const char *fname = "rag.tokenizer.load";
  const char *path = lrag_checkpath(L, 1, fname), *why = NULL;
  lrag_box *box;
  unsigned char *data;
  size_t len;
  vocab_args a;
  int err, rc, nret;
  check_vocab_args(L, fname, &a);
  box = lrag_box_new(L, ids_fin);
  rc = rag_file_read(path, &data, &len, &why, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, fname, path, why, err);
  box->p = data;
  nret = push_tokenizer(L, fname, path, (const char *)data, len, &a);
  lrag_box_free(box);
  return nret;
}

/* {====== The estimate: pseudo-tokens are byte strings, not ids ======} */

static int approx_count(lua_State *L) {
  size_t len, n, errpos = 0;
  const char *s;
  luaL_checkudata(L, 1, MT_APPROX);
  s = luaL_checklstring(L, 2, &len);
  if (rag_approx_count(s, len, &n, &errpos) != RAG_OK)
    return lrag_texterror(L, RAG_EENCODING, "rag.tokenizer.count", errpos);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int approx_encode(lua_State *L) {
  size_t len, n, errpos = 0, i, from = 0;
  size_t *ends;
  const char *s;
  lrag_box *box;
  int rc;
  luaL_checkudata(L, 1, MT_APPROX);
  s = luaL_checklstring(L, 2, &len);
  box = lrag_box_new(L, ids_fin);
  rc = rag_approx_split(s, len, &ends, &n, &errpos);
  if (rc != RAG_OK) return lrag_texterror(L, rc, "rag.tokenizer.encode", errpos);
  box->p = ends;
  lua_createtable(L, n > 0x7fffffff ? 0x7fffffff : (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushlstring(L, s + from, ends[i] - from);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
    from = ends[i];
  }
  lrag_box_free(box);
  return 1;
}

static int approx_decode(lua_State *L) {
  luaL_Buffer b;
  size_t i, n;
  luaL_checkudata(L, 1, MT_APPROX);
  luaL_checktype(L, 2, LUA_TTABLE);
  n = (size_t)lua_rawlen(L, 2);
  luaL_buffinit(L, &b);
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, 2, (lua_Integer)i);
    if (lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "rag.tokenizer.decode: pieces[%d] is not a string", (int)i);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  return 1;
}

static int approx_info(lua_State *L) {
  luaL_checkudata(L, 1, MT_APPROX);
  lua_createtable(L, 0, 2);
  lua_pushliteral(L, "approx");
  lua_setfield(L, -2, "name");
  lua_pushliteral(L, "cl100k_base");
  lua_setfield(L, -2, "estimates");
  return 1;
}

static int approx_tostring(lua_State *L) {
  lua_pushliteral(L, "rag.tokenizer (approx)");
  return 1;
}

/* approx(): the estimator; it holds no state, so one is as good as many. */
static int tok_approx(lua_State *L) {
  lrag_newobject(L, &approx_class, sizeof(lapprox));
  return 1;
}

/* {====== Registration ======} */

static const luaL_Reg tok_methods[] = {
    {"count", tok_count},
    {"decode", tok_decode},
    {"encode", tok_encode},
    {"info", tok_info},
    {NULL, NULL},
};

static const luaL_Reg tok_metamethods[] = {
    {"__tostring", tok_tostring},
    {NULL, NULL},
};

static const luaL_Reg approx_methods[] = {
    {"count", approx_count},
    {"decode", approx_decode},
    {"encode", approx_encode},
    {"info", approx_info},
    {NULL, NULL},
};

static const luaL_Reg approx_metamethods[] = {
    {"__tostring", approx_tostring},
    {NULL, NULL},
};

static const lrag_class tok_class = {MT, "tokenizer", tok_methods, tok_metamethods, tok_fin};
static const lrag_class approx_class = {MT_APPROX, "tokenizer", approx_methods,
                                        approx_metamethods, approx_fin};

static const luaL_Reg tokenizer_funcs[] = {
    {"approx", tok_approx},
    {"load", tok_load},
    {"new", tok_new},
    {NULL, NULL},
};

int lrag_open_tokenizer(lua_State *L) {
  lrag_newclass(L, &tok_class);
  lrag_newclass(L, &approx_class);
  luaL_setfuncs(L, tokenizer_funcs, 0);
  return 0;
}
