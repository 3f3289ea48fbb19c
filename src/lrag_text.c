/*
** lrag_text.c: rag.text, text utilities in C: normalize(s [, opts]) and
** hash(s), the lowercase hex SHA-256 used to key caches by content.
*/
#include "lrag.h"

#include <string.h>

#include "rag.h"
#include "rag_digest.h"
#include "rag_text.h"

static void str_fin(void *p) {
  rag_free(p);
}

static rag_text_form check_form(lua_State *L) {
  const char *form;
  lua_getfield(L, 2, "form");
  if (lua_isnil(L, -1)) return RAG_TEXT_NFKC;
  if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) return RAG_TEXT_NONE;
  form = lua_tostring(L, -1);
  if (lua_type(L, -1) == LUA_TSTRING && strcmp(form, "NFKC") == 0) return RAG_TEXT_NFKC;
  if (lua_type(L, -1) == LUA_TSTRING && strcmp(form, "NFC") == 0) return RAG_TEXT_NFC;
  return (rag_text_form)luaL_error(L, "rag.text.normalize: form must be \"NFKC\", \"NFC\" or false");
}

static int check_strict(lua_State *L) {
  const char *invalid;
  lua_getfield(L, 2, "invalid");
  if (lua_isnil(L, -1)) return 0;
  invalid = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
  if (strcmp(invalid, "replace") == 0) return 0;
  if (strcmp(invalid, "error") == 0) return 1;
  return luaL_error(L, "rag.text.normalize: invalid must be \"replace\" or \"error\"");
}

static int text_normalize(lua_State *L) {
  static const char *const allowed[] = {"form", "invalid", NULL};
  size_t len, outlen, errpos = 0;
  const char *s = luaL_checklstring(L, 1, &len);
  rag_text_norm opts = {RAG_TEXT_NFKC, 0};
  lrag_box *box;
  char *out;
  int rc;
  lrag_checkopts(L, 2, "rag.text.normalize", allowed);
  if (lua_istable(L, 2)) {
    opts.form = check_form(L);
    opts.strict = check_strict(L);
  }
  box = lrag_box_new(L, str_fin);
  rc = rag_text_normalize(s, len, &opts, &out, &outlen, &errpos);
  box->p = out;
  if (rc == RAG_ENOMEM) return luaL_error(L, "rag.text.normalize: not enough memory");
  if (rc != RAG_OK)
    return lrag_fail(L, "encoding", "rag.text.normalize: invalid utf-8 at byte %lu",
                     (unsigned long)errpos);
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
  if (rag_digest_sha256(s, len, digest) != RAG_OK)
    return luaL_error(L, "rag.text.hash: sha-256 failed");
  for (int i = 0; i < RAG_DIGEST_SHA256_LEN; i++) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  lua_pushlstring(L, out, sizeof out);
  return 1;
}

static const luaL_Reg text_funcs[] = {
  {"hash", text_hash},
  {"normalize", text_normalize},
  {NULL, NULL},
};

int lrag_open_text(lua_State *L) {
  luaL_setfuncs(L, text_funcs, 0);
  return 0;
}
