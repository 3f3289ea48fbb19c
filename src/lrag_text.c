/*
** lrag_text.c: rag.text, text utilities in C: normalize(s [, opts]),
** hash(s), the lowercase hex SHA-256 used to key caches by content,
** valid(s), whether s is UTF-8 (rag.load's check of every file), and the
** primitives of password authentication (rag.store.pg): hmac_sha256,
** pbkdf2_sha256, md5, random.
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
  unsigned char digest[RAG_DIGEST_SHA256_LEN];
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int rc = rag_digest_sha256(s, len, digest);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.text.hash", NULL);
  lrag_pushhex(L, digest, sizeof digest);
  return 1;
}

/* text.hmac_sha256(key, msg) -> the 32 raw bytes of HMAC-SHA-256. */
static int text_hmac_sha256(lua_State *L) {
  unsigned char mac[RAG_DIGEST_SHA256_LEN];
  size_t klen, mlen;
  const char *key = luaL_checklstring(L, 1, &klen);
  const char *msg = luaL_checklstring(L, 2, &mlen);
  int rc = rag_digest_hmac_sha256(key, klen, msg, mlen, mac);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.text.hmac_sha256", NULL);
  lua_pushlstring(L, (const char *)mac, sizeof mac);
  return 1;
}

/*
** The integer argument at idx in [lo, hi], or `def` when absent (def >= 0);
** raises on a fraction too, which luaL_checkinteger rounds away before 5.3.
*/
static lua_Integer int_arg(lua_State *L, int idx, lua_Number lo, lua_Number hi, lua_Integer def,
                           const char *msg) {
  lua_Number n;
  if (def >= 0 && lua_isnoneornil(L, idx)) return def;
  n = luaL_checknumber(L, idx);
  if (!(n >= lo && n <= hi) || n != (lua_Number)(lua_Integer)n)
    luaL_argerror(L, idx, msg);
  return (lua_Integer)n;
}

/* The longest key pbkdf2_sha256 derives: far beyond any protocol's need. */
#define PBKDF2_MAX_LEN (1 << 20)

/* text.pbkdf2_sha256(password, salt, iterations [, length = 32]) -> raw bytes. */
static int text_pbkdf2_sha256(lua_State *L) {
  size_t plen, slen;
  const char *pw = luaL_checklstring(L, 1, &plen);
  const char *salt = luaL_checklstring(L, 2, &slen);
  lua_Integer iter = int_arg(L, 3, 1, 4294967295.0, -1,
                             "iterations must be an integer in [1, 4294967295]");
  lua_Integer len = int_arg(L, 4, 1, PBKDF2_MAX_LEN, RAG_DIGEST_SHA256_LEN,
                            "length must be an integer in [1, 1048576]");
  unsigned char *out;
  int rc;
  out = (unsigned char *)lua_newuserdatauv(L, (size_t)len, 0);
  rc = rag_digest_pbkdf2_sha256(pw, plen, salt, slen, (uint32_t)iter, out, (size_t)len);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.text.pbkdf2_sha256", NULL);
  lua_pushlstring(L, (const char *)out, (size_t)len);
  return 1;
}

/* text.md5(s) -> lowercase hex MD5 (PostgreSQL's md5 password exchange). */
static int text_md5(lua_State *L) {
  unsigned char d[RAG_DIGEST_MD5_LEN];
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int rc = rag_digest_md5(s, len, d);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.text.md5", NULL);
  lrag_pushhex(L, d, sizeof d);
  return 1;
}

/* The most bytes text.random gives at once. */
#define RANDOM_MAX_LEN 65536

/* text.random(n) -> n bytes from the CSPRNG | nil, msg, "io". */
static int text_random(lua_State *L) {
  lua_Integer n = int_arg(L, 1, 0, RANDOM_MAX_LEN, -1, "n must be an integer in [0, 65536]");
  unsigned char *out;
  int rc;
  out = (unsigned char *)lua_newuserdatauv(L, n > 0 ? (size_t)n : 1, 0);
  rc = rag_digest_random(out, (size_t)n);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.text.random", "no random bytes to be had");
  lua_pushlstring(L, (const char *)out, (size_t)n);
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
    {"hash", text_hash},
    {"hmac_sha256", text_hmac_sha256},
    {"md5", text_md5},
    {"normalize", text_normalize},
    {"pbkdf2_sha256", text_pbkdf2_sha256},
    {"random", text_random},
    {"valid", text_valid},
    {NULL, NULL},
};

int lrag_open_text(lua_State *L) {
  luaL_setfuncs(L, text_funcs, 0);
  return 0;
}
