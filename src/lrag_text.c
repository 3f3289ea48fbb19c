/*
** lrag_text.c: rag.text, text utilities in C. For now: hash(s), the
** lowercase hex SHA-256 used to key caches by content.
*/
#include "lrag.h"

#include "rag.h"
#include "rag_hash.h"

static int text_hash(lua_State *L) {
  static const char hex[] = "0123456789abcdef";
  unsigned char digest[RAG_SHA256_LEN];
  char out[2 * RAG_SHA256_LEN];
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  if (rag_hash_sha256(s, len, digest) != RAG_OK)
    return luaL_error(L, "rag.text.hash: sha-256 failed");
  for (int i = 0; i < RAG_SHA256_LEN; i++) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  lua_pushlstring(L, out, sizeof out);
  return 1;
}

static const luaL_Reg text_funcs[] = {
  {"hash", text_hash},
  {NULL, NULL},
};

int lrag_open_text(lua_State *L) {
  luaL_setfuncs(L, text_funcs, 0);
  return 0;
}
