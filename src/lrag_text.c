/*
** lrag_text.c: rag.text, text utilities in C: normalize(s [, opts]),
** hash(s), the lowercase hex SHA-256 used to key caches by content, and
** valid(s), whether s is UTF-8 (rag.load's check of every file).
*/
#include "lrag.h"

#include <string.h>

#include "rag.h"
#include "rag_digest.h"
#include "rag_text.h"

#define FNAME "rag.text.normalize"

static void str_fin(void *p) {
  rag_free(p);
}

/* opts.form: "NFKC" (the default), "NFC", or false for no normalization form. */
static rag_text_form opt_form(lua_State *L) {
  rag_text_form form = RAG_TEXT_NFKC;
  const char *s;
  if (!lua_istable(L, 2)) return form;
  lua_getfield(L, 2, "form");
  s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
  if (strcmp(s, "NFC") == 0)
    form = RAG_TEXT_NFC;
  else if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1))
    form = RAG_TEXT_NONE;
  else if (!lua_isnil(L, -1) && strcmp(s, "NFKC") != 0)
    luaL_error(L, FNAME ": option 'form' must be \"NFKC\", \"NFC\" or false");
  lua_pop(L, 1);
  return form;
}

static int text_normalize(lua_State *L) {
  static const char *const allowed[] = {"form", "invalid", NULL};
  static const char *const invalid_names[] = {"replace", "error", NULL};
  size_t len, outlen, errpos = 0;
  const char *s = luaL_checklstring(L, 1, &len);
  rag_text_norm opts = {RAG_TEXT_NFKC, 0};
  lrag_box *box;
  char *out;
  int rc;
  lrag_checkopts(L, 2, FNAME, allowed);
  opts.form = opt_form(L);
  opts.strict = lrag_optenum(L, 2, FNAME, "invalid", 0, invalid_names); /* 1: "error" */
  box = lrag_box_new(L, str_fin);
  rc = rag_text_normalize(s, len, &opts, &out, &outlen, &errpos);
  box->p = out;
  if (rc != RAG_OK)
    return lrag_texterror(L, rc, FNAME, errpos);
  lua_pushlstring(L, out, outlen);
  lrag_box_free(box);
  return 1;
}

static int text_hash(lua_State *L) {
  static const char hex[] = "0123456789abcdef";
  unsigned char digest[RAG_DIGEST_SHA256_LEN];
  char out[2 * RAG_DIGEST_SHA256_LEN];
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int rc = rag_digest_sha256(s, len, digest);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.text.hash", NULL);
  for (int i = 0; i < RAG_DIGEST_SHA256_LEN; i++) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  lua_pushlstring(L, out, sizeof out);
  return 1;
}

/* text.valid(s) -> true | false, pos: pos is the 1-based offset of the first byte that is not UTF-8. */
static int text_valid(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  size_t bad = rag_text_first_invalid((const unsigned char *)s, len);
  lua_pushboolean(L, bad == len);
  if (bad == len) return 1;
  lua_pushinteger(L, (lua_Integer)bad + 1);
  return 2;
}

static const luaL_Reg text_funcs[] = {
    {"hash", text_hash}, {"normalize", text_normalize}, {"valid", text_valid}, {NULL, NULL},
};

int lrag_open_text(lua_State *L) {
  luaL_setfuncs(L, text_funcs, 0);
  return 0;
}
