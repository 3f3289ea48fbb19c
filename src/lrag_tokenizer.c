/*
** lrag_tokenizer.c: rag.core.tokenizer.new(vocab, pretok, specials) builds
** a userdata "rag.tokenizer" over the exact BPE core; lua/rag/tokenizer.lua
** finds the vocabulary files and caches one tokenizer per encoding.
*/
#include "lrag.h"

#include <stdio.h>
#include <string.h>

#include "rag.h"
#include "rag_approx.h"
#include "rag_tokenizer.h"

#define MT "rag.tokenizer"
#define MT_APPROX "rag.tokenizer.approx"

typedef struct ltok {
  rag_tokenizer *t; /* NULL once closed */
  char name[64];
} ltok;

static ltok *check_open(lua_State *L, const char *fname) {
  ltok *u = (ltok *)luaL_checkudata(L, 1, MT);
  if (u->t == NULL) luaL_error(L, "rag.tokenizer.%s: tokenizer is closed", fname);
  return u;
}

rag_tokenizer *lrag_totokenizer(lua_State *L, int idx, const char *fname) {
  ltok *u = (ltok *)luaL_testudata(L, idx, MT);
  if (u == NULL) return NULL;
  if (u->t == NULL) luaL_error(L, "%s: tokenizer is closed", fname);
  return u->t;
}

static void ids_fin(void *p) {
  rag_free(p);
}

/* The set of allowed specials from opts.allowed_special: "all", a list of
** special texts, or a set { [text] = true }. */
static uint32_t check_allowed(lua_State *L, const rag_tokenizer *t, int idx, const char *fname) {
  static const char *const keys[] = {"allowed_special", NULL};
  uint32_t mask = 0;
  size_t i, ns = rag_tokenizer_nspecials(t);
  if (!lua_isnoneornil(L, idx) && !lua_istable(L, idx))
    luaL_error(L, "%s: opts must be a table", fname);
  lrag_checkopts(L, idx, fname, keys);
  if (lua_isnoneornil(L, idx)) return 0;
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
    luaL_error(L, "%s: allowed_special must be \"all\" or a table of special tokens", fname);
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

static int fail_status(lua_State *L, int rc, const char *fname, size_t errpos) {
  if (rc == RAG_EENCODING)
    return lrag_fail(L, "encoding", "rag.tokenizer.%s: invalid utf-8 at byte %lu", fname,
                     (unsigned long)errpos);
  return luaL_error(L, "rag.tokenizer.%s: %s", fname,
                    rc == RAG_ENOMEM ? "not enough memory" : rag_strerror(rc));
}

static int tok_encode(lua_State *L) {
  ltok *u = check_open(L, "encode");
  size_t len, n, errpos = 0, i;
  const char *s = luaL_checklstring(L, 2, &len);
  uint32_t allowed = check_allowed(L, u->t, 3, "rag.tokenizer.encode");
  uint32_t *ids;
  lrag_box *box = lrag_box_new(L, ids_fin);
  int rc = rag_tokenizer_encode(u->t, s, len, allowed, &ids, &n, &errpos);
  if (rc != RAG_OK) return fail_status(L, rc, "encode", errpos);
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
  ltok *u = check_open(L, "count");
  size_t len, n, errpos = 0;
  const char *s = luaL_checklstring(L, 2, &len);
  uint32_t allowed = check_allowed(L, u->t, 3, "rag.tokenizer.count");
  int rc = rag_tokenizer_count(u->t, s, len, allowed, &n, &errpos);
  if (rc != RAG_OK) return fail_status(L, rc, "count", errpos);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int tok_decode(lua_State *L) {
  ltok *u = check_open(L, "decode");
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
    return luaL_error(L, "rag.tokenizer.decode: not enough memory");
  ids = (uint32_t *)box->p;
  for (i = 0; i < n; i++) {
    lua_Number v;
    lua_rawgeti(L, 2, (lua_Integer)i + 1);
    v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || v != v || v < 0 || v > 4294967295.0 || v != (lua_Number)(uint32_t)v)
      return luaL_error(L, "rag.tokenizer.decode: ids[%d] is not a token id", (int)i + 1);
    ids[i] = (uint32_t)v;
    lua_pop(L, 1);
  }
  obox = lrag_box_new(L, ids_fin);
  rc = rag_tokenizer_decode(u->t, ids, n, &out, &outlen, &bad);
  if (rc == RAG_EINVAL) { /* lua_pushfstring has no %lu before 5.3 */
    char msg[96];
    snprintf(msg, sizeof msg, "rag.tokenizer.decode: unknown token id %lu at ids[%lu]",
             (unsigned long)ids[bad], (unsigned long)bad + 1);
    return luaL_error(L, "%s", msg);
  }
  if (rc != RAG_OK) return luaL_error(L, "rag.tokenizer.decode: not enough memory");
  obox->p = out;
  lua_pushlstring(L, out, outlen);
  lrag_box_free(obox);
  lrag_box_free(box);
  return 1;
}

static int tok_info(lua_State *L) {
  ltok *u = check_open(L, "info");
  size_t i, ns = rag_tokenizer_nspecials(u->t);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, u->name);
  lua_setfield(L, -2, "name");
  lua_pushinteger(L, (lua_Integer)rag_tokenizer_nranks(u->t));
  lua_setfield(L, -2, "n_ranks");
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

static int tok_close(lua_State *L) {
  ltok *u = (ltok *)luaL_checkudata(L, 1, MT);
  rag_tokenizer_free(u->t);
  u->t = NULL;
  return 0;
}

static int tok_tostring(lua_State *L) {
  ltok *u = (ltok *)luaL_checkudata(L, 1, MT);
  lua_pushfstring(L, "rag.tokenizer (%s%s)", u->name, u->t ? "" : ", closed");
  return 1;
}

/* --- the estimate: pseudo-tokens are byte strings, not ids ------------- */

static int approx_count(lua_State *L) {
  size_t len, n, errpos = 0;
  const char *s;
  luaL_checkudata(L, 1, MT_APPROX);
  s = luaL_checklstring(L, 2, &len);
  if (rag_approx_count(s, len, &n, &errpos) != RAG_OK)
    return fail_status(L, RAG_EENCODING, "count", errpos);
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
  if (rc != RAG_OK) return fail_status(L, rc, "encode", errpos);
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

/* The estimator holds no memory: close is accepted (for <close> and for code
** written against any tokenizer) and changes nothing. */
static int approx_close(lua_State *L) {
  luaL_checkudata(L, 1, MT_APPROX);
  return 0;
}

static int approx_tostring(lua_State *L) {
  lua_pushliteral(L, "rag.tokenizer (approx)");
  return 1;
}

/* approx(): the estimator; it holds no state, so one is as good as many. */
static int tok_approx(lua_State *L) {
  lua_newuserdatauv(L, 1, 0);
  luaL_setmetatable(L, MT_APPROX);
  return 1;
}

static const char *const pretok_names[] = {"cl100k_base", "o200k_base", NULL};

/* new(vocab_bytes, pretok, specials [, name]) */
static int tok_new(lua_State *L) {
  size_t len, errline = 0, ns = 0, i;
  const char *data = luaL_checklstring(L, 1, &len);
  int pretok = luaL_checkoption(L, 2, NULL, pretok_names);
  const char *name = luaL_optstring(L, 4, pretok_names[pretok]);
  rag_special sp[RAG_TOKENIZER_MAX_SPECIALS];
  ltok *u;
  int rc;
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, 3) != 0) {
    lua_Number id = lua_tonumber(L, -1);
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TNUMBER || id < 0 || id > 4294967295.0 ||
        id != (lua_Number)(uint32_t)id)
      return luaL_error(L, "rag.tokenizer.new: special tokens map text to an integer id");
    if (ns == RAG_TOKENIZER_MAX_SPECIALS)
      return luaL_error(L, "rag.tokenizer.new: at most %d special tokens",
                        RAG_TOKENIZER_MAX_SPECIALS);
    sp[ns].text = lua_tolstring(L, -2, &sp[ns].len); /* anchored in the table */
    if (sp[ns].len == 0) return luaL_error(L, "rag.tokenizer.new: empty special token");
    sp[ns].id = (uint32_t)id;
    ns++;
    lua_pop(L, 1);
  }
  for (i = 1; i < ns; i++) { /* by id, so the order is reproducible */
    rag_special x = sp[i];
    size_t j = i;
    while (j > 0 && sp[j - 1].id > x.id) {
      sp[j] = sp[j - 1];
      j--;
    }
    sp[j] = x;
  }
  u = (ltok *)lua_newuserdatauv(L, sizeof *u, 0);
  u->t = NULL;
  strncpy(u->name, name, sizeof u->name - 1);
  u->name[sizeof u->name - 1] = '\0';
  luaL_setmetatable(L, MT);
  rc = rag_tokenizer_new(data, len, (rag_pretok)pretok, sp, ns, &u->t, &errline);
  if (rc == RAG_ENOMEM) return luaL_error(L, "rag.tokenizer.new: not enough memory");
  if (rc == RAG_EINVAL) return luaL_error(L, "rag.tokenizer.new: bad special tokens");
  if (rc != RAG_OK) {
    if (errline > 0)
      return lrag_fail(L, "format", "rag.tokenizer.new: bad vocabulary line %lu",
                       (unsigned long)errline);
    return lrag_fail(L, "format",
                     "rag.tokenizer.new: unusable vocabulary (empty, a byte missing, or a "
                     "special id taken by a token)");
  }
  return 1;
}

static const luaL_Reg tok_methods[] = {
  {"encode", tok_encode},
  {"decode", tok_decode},
  {"count", tok_count},
  {"info", tok_info},
  {"close", tok_close},
  {NULL, NULL},
};

static const luaL_Reg approx_methods[] = {
  {"encode", approx_encode},
  {"decode", approx_decode},
  {"count", approx_count},
  {"info", approx_info},
  {"close", approx_close},
  {NULL, NULL},
};

static const luaL_Reg tokenizer_funcs[] = {
  {"new", tok_new},
  {"approx", tok_approx},
  {NULL, NULL},
};

int lrag_open_tokenizer(lua_State *L) {
  if (luaL_newmetatable(L, MT)) {
    luaL_newlib(L, tok_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, tok_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tok_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, tok_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, MT_APPROX)) {
    luaL_newlib(L, approx_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, approx_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, approx_close);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, tokenizer_funcs, 0);
  return 0;
}
