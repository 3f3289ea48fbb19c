/*
** lrag_http.c: rag.http.request{ method, url, headers, body, timeout, ... }
** -> { status, headers, body } | nil, msg, code. A status >= 400 is a
** response; only failures to get one are errors ("timeout" or "http").
*/
#include "lrag.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "rag.h"
#include "rag_http.h"

#define FNAME "rag.http.request"
#define DEFAULT_TIMEOUT 60.0
#define DEFAULT_CONNECT_TIMEOUT 10.0
#define DEFAULT_MAX_BODY (64.0 * 1024 * 1024)
#define URL_SHOWN 200 /* bytes of a URL a message shows */

static const char *const request_opts[] = {
  "body", "ca_file", "connect_timeout", "headers", "max_body", "method",
  "redirects", "stream", "timeout", "url", NULL,
};

/*
** req.stream: the core calls on_data from inside libcurl, where nothing may
** raise. The callback only pushes values that need no allocation (the light
** C function and the stream function were placed on the stack beforehand)
** and runs the rest under lua_pcall; an error stops the transfer and is
** raised again once libcurl has returned.
*/
typedef struct stream_ctx {
  lua_State *L;
  int caller; /* stack index of call_stream */
  int fn;     /* stack index of the stream function */
  int err;    /* stack index of the error it raised, or 0 */
} stream_ctx;

static int call_stream(lua_State *L) {
  const char *data = (const char *)lua_touserdata(L, 2);
  size_t len = (size_t)lua_tonumber(L, 3);
  lua_settop(L, 1);
  lua_pushlstring(L, data, len);
  lua_call(L, 1, 0);
  return 0;
}

static int on_data(void *ud, const char *data, size_t len) {
  stream_ctx *ctx = (stream_ctx *)ud;
  lua_State *L = ctx->L;
  lua_pushvalue(L, ctx->caller);
  lua_pushvalue(L, ctx->fn);
  lua_pushlightuserdata(L, (void *)data);
  lua_pushnumber(L, (lua_Number)len);
  if (lua_pcall(L, 3, 0, 0) == LUA_OK) return 0;
  ctx->err = lua_gettop(L);
  return 1;
}

/* The string option `key` (NULL when absent); raises when it holds a NUL byte. */
static const char *opt_cstring(lua_State *L, const char *key) {
  size_t len;
  const char *s = lrag_optstring(L, 1, FNAME, key, NULL, &len);
  if (s != NULL && strlen(s) != len)
    luaL_error(L, FNAME ": option '%s' must not contain a NUL byte", key);
  return s;
}

static double opt_seconds(lua_State *L, const char *key, double def) {
  double v = (double)lrag_optnumber(L, 1, FNAME, key, def, -HUGE_VAL, HUGE_VAL);
  if (!(v > 0 && v <= 1e6)) luaL_error(L, FNAME ": option '%s' must be in (0, 1e6] seconds", key);
  return v;
}

static int is_token(const char *s, size_t len) {
  static const char extra[] = "!#$%&'*+-.^_`|~";
  if (len == 0) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || (c != 0 && strchr(extra, c) != NULL)))
      return 0;
  }
  return 1;
}

/*
** Turns the headers table into "Name: value" strings kept in a Lua table
** (pushed) and a NULL-terminated pointer array in a userdata (pushed).
*/
static const char *const *build_headers(lua_State *L) {
  int lines, n = 0;
  const char **list;
  if (!lrag_opttable(L, 1, FNAME, "headers")) return NULL;
  lua_newtable(L);
  lines = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, lines - 1) != 0) {
    size_t nlen, vlen;
    const char *name, *value;
    if (lua_type(L, -2) != LUA_TSTRING ||
        (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER))
      luaL_error(L, FNAME ": option 'headers' must map names to strings");
    name = lua_tolstring(L, -2, &nlen);
    if (!is_token(name, nlen)) luaL_error(L, FNAME ": invalid header name '%s'", name);
    lua_pushvalue(L, -1); /* convert a copy, never the key's neighbour in place */
    value = lua_tolstring(L, -1, &vlen);
    if (strpbrk(value, "\r\n") != NULL || strlen(value) != vlen)
      luaL_error(L, FNAME ": header '%s' contains CR, LF or NUL", name);
    if (vlen == 0) lua_pushfstring(L, "%s;", name); /* curl drops "Name: " */
    else lua_pushfstring(L, "%s: %s", name, value);
    lua_rawseti(L, lines, ++n);
    lua_pop(L, 2);
  }
  list = (const char **)lua_newuserdatauv(L, sizeof *list * (size_t)(n + 1), 0);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, lines, i + 1);
    list[i] = lua_tostring(L, -1); /* kept alive by `lines` */
    lua_pop(L, 1);
  }
  list[n] = NULL;
  return list;
}

/*
** Pushes the URL as scheme://host[:port]/path for messages: no query or
** fragment (keys live there) and no user info (the last '@' of the
** authority ends it).
*/
static void push_safe_url(lua_State *L, const char *url) {
  size_t cut = strcspn(url, "/?#");
  const char *host = url, *end, *at = NULL, *p;
  if (cut > 0 && url[cut - 1] == ':' && strncmp(url + cut, "//", 2) == 0) host = url + cut + 2;
  end = host + strcspn(host, "/?#");
  for (p = host; p < end; p++)
    if (*p == '@') at = p;
  lua_pushlstring(L, url, (size_t)(host - url));
  if (at != NULL) host = at + 1;
  end += strcspn(end, "?#");
  lua_pushlstring(L, host, (size_t)(end - host));
  lua_concat(L, 2);
}

/* Adds "name: value" header lines to the table at -1, names lowercased. */
static void push_headers(lua_State *L, const char *head, size_t len) {
  const char *p = head, *end = head + len;
  lua_newtable(L);
  while (p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *colon, *v, *ve;
    if (eol == NULL) eol = end;
    colon = memchr(p, ':', (size_t)(eol - p));
    if (colon != NULL && colon > p && memcmp(p, "HTTP/", 5) != 0) {
      luaL_Buffer b;
      for (v = colon + 1; v < eol && (*v == ' ' || *v == '\t'); v++) {}
      for (ve = eol; ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'); ve--) {}
      luaL_buffinit(L, &b);
      for (const char *c = p; c < colon; c++)
        luaL_addchar(&b, (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c));
      luaL_pushresult(&b);
      lua_pushvalue(L, -1);
      lua_rawget(L, -3);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushlstring(L, v, (size_t)(ve - v));
      } else { /* a repeated header: join as the RFC allows */
        lua_pushliteral(L, ", ");
        lua_pushlstring(L, v, (size_t)(ve - v));
        lua_concat(L, 3);
      }
      lua_rawset(L, -3);
    }
    p = eol + 1;
  }
}

static void res_fin(void *p) {
  rag_http_res_free((rag_http_res *)p);
}

static int http_request(lua_State *L) {
  rag_http_req req;
  rag_http_res *res;
  lrag_box *box;
  stream_ctx ctx;
  char err[256];
  int rc;
  luaL_checktype(L, 1, LUA_TTABLE);
  lrag_checkopts(L, 1, FNAME, request_opts);
  lua_settop(L, 1);
  memset(&req, 0, sizeof req);
  req.url = opt_cstring(L, "url");
  if (req.url == NULL) luaL_error(L, FNAME ": option 'url' is required");
  req.body = lrag_optstring(L, 1, FNAME, "body", NULL, &req.body_len);
  req.method = opt_cstring(L, "method");
  if (req.method == NULL) req.method = req.body != NULL ? "POST" : "GET";
  if (!is_token(req.method, strlen(req.method)))
    luaL_error(L, FNAME ": invalid method '%s'", req.method);
  req.ca_file = opt_cstring(L, "ca_file");
  req.timeout = opt_seconds(L, "timeout", DEFAULT_TIMEOUT);
  req.connect_timeout = opt_seconds(L, "connect_timeout",
                                    req.timeout < DEFAULT_CONNECT_TIMEOUT
                                        ? req.timeout : DEFAULT_CONNECT_TIMEOUT);
  req.max_body = (size_t)lrag_optnumber(L, 1, FNAME, "max_body", DEFAULT_MAX_BODY, 0, 1e15);
  req.max_redirects = (long)lrag_optinteger(L, 1, FNAME, "redirects", 0, 0, 50);
  if (req.body != NULL && strcmp(req.method, "HEAD") == 0)
    luaL_error(L, FNAME ": a HEAD request has no body");
  req.headers = build_headers(L);
  box = lrag_box_new(L, res_fin);
  memset(&ctx, 0, sizeof ctx);
  lua_getfield(L, 1, "stream");
  if (!lua_isnil(L, -1)) {
    if (!lua_isfunction(L, -1))
      luaL_error(L, FNAME ": option 'stream' must be a function, got %s", luaL_typename(L, -1));
    ctx.L = L;
    ctx.fn = lua_gettop(L);
    lua_pushcfunction(L, call_stream);
    ctx.caller = lua_gettop(L);
    luaL_checkstack(L, 8, FNAME);
    req.on_data = on_data;
    req.ud = &ctx;
  }
  rc = rag_http_request(&req, &res, err, sizeof err);
  box->p = res;
  if (ctx.err != 0) {
    lua_pushvalue(L, ctx.err);
    return lua_error(L);
  }
  if (rc == RAG_ENOMEM) return lrag_error(L, rc, FNAME, NULL);
  if (rc != RAG_OK) { /* the URL is cut at URL_SHOWN bytes so that the reason always shows */
    size_t ulen;
    const char *url;
    push_safe_url(L, req.url);
    url = lua_tolstring(L, -1, &ulen);
    return lrag_error(L, rc == RAG_ETOOBIG ? RAG_EHTTP : rc, FNAME, "%s %.*s%s: %s", req.method,
                      (int)(ulen > URL_SHOWN ? URL_SHOWN : ulen), url,
                      ulen > URL_SHOWN ? "..." : "", err);
  }
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, (lua_Integer)res->status);
  lua_setfield(L, -2, "status");
  push_headers(L, res->head, res->head_len);
  lua_setfield(L, -2, "headers");
  lua_pushlstring(L, res->body != NULL ? res->body : "", res->body_len);
  lua_setfield(L, -2, "body");
  lrag_box_free(box);
  return 1;
}

/* rag.http.now(): seconds from a monotonic clock, for deadlines. */
static int http_now(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

/* rag.http.sleep(seconds): blocks the thread; the retry policy's default. */
static int http_sleep(lua_State *L) {
  double s = (double)luaL_checknumber(L, 1);
  struct timespec ts;
  if (!(s >= 0 && s <= 1e6)) return luaL_error(L, "rag.http.sleep: seconds must be in [0, 1e6]");
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  return 0;
}

static const luaL_Reg http_funcs[] = {
    {"now", http_now}, {"request", http_request}, {"sleep", http_sleep}, {NULL, NULL},
};

int lrag_open_http(lua_State *L) {
  luaL_setfuncs(L, http_funcs, 0);
  return 0;
}
