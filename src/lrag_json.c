/*
** lrag_json.c: rag.json, JSON for Lua values. Decoding validates and builds
** the tree with cJSON, then re-reads numbers and strings from the source so
** integers beyond 2^53 and "\u0000" survive exactly. Encoding writes the
** Lua value straight into a boxed buffer (sorted object keys, UTF-8 checked).
*/
#include "lrag.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rag.h"

/*
** The metatable that marks a table as a JSON object (json.object, decoded
** objects): tables are not a userdata class, so it is no registry entry but
** the upvalue every rag.json function shares.
*/
#define OBJECT_MT lua_upvalueindex(1)

#ifndef RAG_JSON_MAX_DEPTH
#define RAG_JSON_MAX_DEPTH 1000 /* cJSON's own CJSON_NESTING_LIMIT */
#endif

/* json.null: a light userdata NULL, like lua-cjson's, so equality works. */
static void push_null(lua_State *L) {
  lua_pushlightuserdata(L, NULL);
}

static int is_null(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TLIGHTUSERDATA && lua_touserdata(L, idx) == NULL;
}

static int check_depth(lua_State *L, int idx, const char *fname) {
  static const char *const allowed[] = {"max_depth", NULL};
  lrag_checkopts(L, idx, fname, allowed);
  return (int)lrag_optinteger(L, idx, fname, "max_depth", RAG_JSON_MAX_DEPTH, 1,
                              RAG_JSON_MAX_DEPTH);
}

/* {====== Encoding ======} */

typedef struct enc {
  lua_State *L;
  lrag_buf *b;
  int max_depth;
  size_t badutf8; /* 1-based byte of the first invalid UTF-8 string byte */
} enc;

static void encode_value(enc *e, int idx, int depth);

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  size_t len, i;
  unsigned long cp;
  if (s[0] < 0x80) return 1;
  if (s[0] >= 0xC2 && s[0] <= 0xDF) len = 2, cp = s[0] & 0x1F;
  else if (s[0] >= 0xE0 && s[0] <= 0xEF) len = 3, cp = s[0] & 0x0F;
  else if (s[0] >= 0xF0 && s[0] <= 0xF4) len = 4, cp = s[0] & 0x07;
  else return 0;
  if (n < len) return 0;
  for (i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  return len;
}

/* Eight bytes of s at i are plain: ASCII, none below 0x20, no '"' or '\\'. */
static int plain8(const unsigned char *p) {
  const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
  uint64_t w, q, bs;
  memcpy(&w, p, 8);
  q = w ^ (ones * '"');
  bs = w ^ (ones * '\\');
  /* a byte below 0x20, or zero after the xor, borrows into its high bit */
  return ((w | ((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((bs - ones) & ~bs)) & high) == 0;
}

/* s as a JSON string into b; *badutf8 (when 0) set to the 1-based byte of
** invalid UTF-8, which stops the string. */
static void write_string(lua_State *L, lrag_buf *b, const char *s, size_t len, size_t *badutf8) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, run = 0;
  lrag_buf_addc(L, b, '"');
  while (i < len) {
    unsigned char c;
    size_t n;
    while (i + 8 <= len && plain8(p + i)) i += 8; /* most text: whole words at a time */
    if (i >= len) break;
    c = p[i];
    n = utf8_seq(p + i, len - i);
    if (n == 0) {
      if (*badutf8 == 0) *badutf8 = i + 1;
      return;
    }
    if (c >= 0x20 && c != '"' && c != '\\') {
      i += n;
      continue;
    }
    lrag_buf_add(L, b, s + run, i - run);
    switch (c) {
      case '"': lrag_buf_add(L, b, "\\\"", 2); break;
      case '\\': lrag_buf_add(L, b, "\\\\", 2); break;
      case '\n': lrag_buf_add(L, b, "\\n", 2); break;
      case '\r': lrag_buf_add(L, b, "\\r", 2); break;
      case '\t': lrag_buf_add(L, b, "\\t", 2); break;
      case '\b': lrag_buf_add(L, b, "\\b", 2); break;
      case '\f': lrag_buf_add(L, b, "\\f", 2); break;
      default: {
        char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        lrag_buf_add(L, b, u, 6);
      }
    }
    run = ++i;
  }
  lrag_buf_add(L, b, s + run, len - run);
  lrag_buf_addc(L, b, '"');
}

static void encode_string(enc *e, const char *s, size_t len) {
  write_string(e->L, e->b, s, len, &e->badutf8);
}

void lrag_json_string(lua_State *L, lrag_buf *b, const char *s, size_t len) {
  size_t bad = 0;
  write_string(L, b, s, len, &bad);
}

/* u in decimal into s; returns the length. */
static int format_u64(char *s, unsigned long long u) {
  char t[24];
  int n = 0, k = 0;
  do {
    t[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  while (n > 0) s[k++] = t[--n];
  return k;
}

#ifdef __SIZEOF_INT128__
typedef unsigned __int128 u128;

/*
** fast_float's text for v in [1e-4, 1e15) with a fraction, as "%.{p}g"
** gives it for the least p in 15..17 whose text reads back as v, found
** with exact integer arithmetic: v = m 2^e (m < 2^53, -e <= 66), and at p
** digits N = round(v 10^k), k = p - 1 - d with d = floor(log10(v)), so
** k <= 20 and every product below stays under 2^128. N 10^-k reads back as
** v when it is within half an ulp of it (a tie goes to the even m), the
** check strtod's correct rounding makes. Returns the length, or 0 (the
** value is outside the fast case: printf and strtod decide).
*/
static int fast_float(char *s, double v) {
  static const unsigned long long P10[20] = {1ull, 10ull, 100ull, 1000ull, 10000ull,
    100000ull, 1000000ull, 10000000ull, 100000000ull, 1000000000ull, 10000000000ull,
    100000000000ull, 1000000000000ull, 10000000000000ull, 100000000000000ull,
    1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
    1000000000000000000ull, 10000000000000000000ull};
  int neg = v < 0, e, d, p, n = 0;
  double a = neg ? -v : v, f = frexp(a, &e);
  unsigned long long m = (unsigned long long)ldexp(f, 53);
  u128 ten20 = (u128)P10[19] * 10;
  if (!(a >= 1e-4 && a < 1e15)) return 0;
  e -= 53; /* a = m 2^e exactly */
  if (e >= 0 || (m & ((1ull << (-e < 53 ? -e : 53)) - 1)) == 0) return 0; /* integral */
  d = (int)floor(log10(a)); /* log10 may be off by one near a power of ten: */
  if (a < (d >= 0 ? (double)P10[d] : 1.0 / (double)P10[-d])) d--;
  else if (a >= (d + 1 >= 0 ? (double)P10[d + 1] : 1.0 / (double)P10[-(d + 1)])) d++;
  if (d < -4 || d > 14) return 0; /* so 0 <= k <= 20; N's digit count catches a wrong d */
  for (p = 15; p <= 17; p++) {
    int k = p - 1 - d, sh = -e, i, len, dot;
    u128 tk = k <= 19 ? (u128)P10[k] : ten20, num, q, r, half, lo, hi, diff;
    char dig[24];
    num = (u128)m * tk; /* v 10^k = num / 2^sh */
    q = num >> sh;
    r = num - (q << sh);
    half = (u128)1 << (sh - 1);
    if (r > half || (r == half && (q & 1))) q++; /* N: to nearest, ties to even */
    if (q >= (u128)P10[p] || q < (u128)P10[p - 1]) return 0; /* d was off: printf decides */
    /* |N 2^sh - m 10^k| against half an ulp, 10^k / 2 (a quarter below 2^52) */
    lo = q << sh;
    diff = lo > num ? lo - num : num - lo;
    hi = lo < num && m == (1ull << 52) ? tk / 2 : tk; /* 2 |diff| vs this */
    if (2 * diff > hi || (2 * diff == hi && (m & 1))) continue;
    /* "%.{p}g" for d in [-4, 14]: fixed, trailing zeros dropped */
    len = format_u64(dig, (unsigned long long)q);
    while (len > 1 && dig[len - 1] == '0') len--;
    if (neg) s[n++] = '-';
    dot = d + 1; /* digits before the point */
    if (dot <= 0) {
      s[n++] = '0';
      s[n++] = '.';
      for (i = 0; i < -dot; i++) s[n++] = '0';
      for (i = 0; i < len; i++) s[n++] = dig[i];
    } else {
      if (len <= dot) return 0; /* no fraction: not within half an ulp of v, which has one */
      for (i = 0; i < dot; i++) s[n++] = dig[i];
      s[n++] = '.';
      for (i = dot; i < len; i++) s[n++] = dig[i];
    }
    return n;
  }
  return 0;
}
#else
static int fast_float(char *s, double v) {
  (void)s;
  (void)v;
  return 0;
}
#endif

/* Shortest text that reads back as the same double; "1.0", not "1". */
static void write_float(lua_State *L, lrag_buf *b, double v) {
  char s[40];
  int prec, n = 0;
  char point;
  if (isnan(v) || isinf(v))
    luaL_error(L, "rag.json.encode: cannot encode %s", isnan(v) ? "nan" : "inf");
  if ((n = fast_float(s, v)) > 0) {
    lrag_buf_add(L, b, s, (size_t)n);
    return;
  }
  point = localeconv()->decimal_point[0];
  for (prec = 15; prec <= 17; prec++) { /* 17 digits always read back */
    n = snprintf(s, sizeof s, "%.*g", prec, v);
    if (prec == 17 || strtod(s, NULL) == v) break;
  }
  if (point != '.') {
    char *c = strchr(s, point);
    if (c != NULL) *c = '.';
  }
  if (strpbrk(s, ".e") == NULL) {
    s[n++] = '.';
    s[n++] = '0';
  }
  lrag_buf_add(L, b, s, (size_t)n);
}

/* v in decimal into s (room for 21 bytes); returns the length. */
static int format_int(char *s, long long v) {
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  int k = 0;
  if (v < 0) s[k++] = '-';
  return k + format_u64(s + k, u);
}

void lrag_json_int(lua_State *L, lrag_buf *b, long long v) {
  char s[24];
  lrag_buf_add(L, b, s, (size_t)format_int(s, v));
}

void lrag_json_float(lua_State *L, lrag_buf *b, double v) {
#if LUA_VERSION_NUM < 503 /* every number is a double: an integral one is written as one */
  if (v == floor(v) && fabs(v) < 9007199254740992.0) {
    lrag_json_int(L, b, (long long)v);
    return;
  }
#endif
  write_float(L, b, v);
}

static void encode_number(enc *e, int idx) {
  if (lua_isinteger(e->L, idx)) { /* before 5.3, an integral double below 2^53 */
#if LUA_VERSION_NUM >= 503
    lrag_json_int(e->L, e->b, (long long)lua_tointeger(e->L, idx));
#else
    lrag_json_int(e->L, e->b, (long long)lua_tonumber(e->L, idx));
#endif
  } else {
    write_float(e->L, e->b, (double)lua_tonumber(e->L, idx));
  }
}

/* Number of elements if the table at idx is a sequence 1..n, else -1. */
static lua_Integer sequence_length(lua_State *L, int idx) {
  lua_Integer n = 0, max = 0;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TNUMBER || !lua_isinteger(L, -1) ||
        lua_tointeger(L, -1) < 1) {
      lua_pop(L, 1);
      return -1;
    }
    if (lua_tointeger(L, -1) > max) max = lua_tointeger(L, -1);
    n++;
  }
  return max == n ? n : -1;
}

static int is_object(lua_State *L, int idx) {
  int yes;
  if (!lua_getmetatable(L, idx)) return 0;
  yes = lua_rawequal(L, -1, OBJECT_MT);
  lua_pop(L, 1);
  return yes;
}

typedef struct member {
  const char *s; /* a string key (NULL for an integer key, named in num) */
  size_t len;    /* the name's length */
  lua_Integer k; /* an integer key */
  char num[24];
} member;

/* The member's name (num is read in place: members move when sorted). */
static const char *member_name(const member *x) {
  return x->s != NULL ? x->s : x->num;
}

static int member_cmp(const void *a, const void *b) {
  const member *x = (const member *)a, *y = (const member *)b;
  int c = memcmp(member_name(x), member_name(y), x->len < y->len ? x->len : y->len);
  return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/*
** The object's members sorted by name into m (n of them; room for cap, else
** a userdata left on the stack). String keys are borrowed: the table holds
** them while it is encoded.
*/
static member *collect_members(enc *e, int idx, member *m, int cap, int *pn) {
  lua_State *L = e->L;
  int n = 0, i;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pop(L, 1);
    n++;
  }
  if (n > cap) m = (member *)lua_newuserdatauv(L, sizeof *m * (size_t)n, 0);
  i = 0;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    member *x = &m[i++];
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      x->s = lua_tolstring(L, -1, &x->len);
    } else if (lua_type(L, -1) == LUA_TNUMBER && lua_isinteger(L, -1)) {
      x->k = lua_tointeger(L, -1);
#if LUA_VERSION_NUM >= 503
      x->len = (size_t)snprintf(x->num, sizeof x->num, "%lld", (long long)x->k);
#else
      x->len = (size_t)snprintf(x->num, sizeof x->num, "%.0f", (double)x->k);
#endif
      x->s = NULL;
    } else {
      luaL_error(L, "rag.json.encode: object keys must be strings or integers, got %s",
                 luaL_typename(L, -1));
    }
  }
  qsort(m, (size_t)n, sizeof *m, member_cmp);
  for (i = 1; i < n; i++)
    if (member_cmp(&m[i - 1], &m[i]) == 0)
      luaL_error(L, "rag.json.encode: duplicate object key '%s'", member_name(&m[i]));
  *pn = n;
  return m;
}

static void encode_object(enc *e, int idx, int depth) {
  lua_State *L = e->L;
  member small[16];
  int n, top = lua_gettop(L);
  member *m = collect_members(e, idx, small, 16, &n);
  lrag_buf_addc(L, e->b, '{');
  for (int i = 0; i < n && e->badutf8 == 0; i++) {
    if (i > 0) lrag_buf_addc(L, e->b, ',');
    encode_string(e, member_name(&m[i]), m[i].len);
    lrag_buf_addc(L, e->b, ':');
    if (m[i].s == NULL) {
      lua_rawgeti(L, idx, m[i].k);
    } else {
      lua_pushlstring(L, m[i].s, m[i].len);
      lua_rawget(L, idx);
    }
    encode_value(e, lua_gettop(L), depth + 1);
    lua_pop(L, 1);
  }
  lrag_buf_addc(L, e->b, '}');
  lua_settop(L, top);
}

static void encode_table(enc *e, int idx, int depth) {
  lua_State *L = e->L;
  lua_Integer n;
  if (depth > e->max_depth)
    luaL_error(L, "rag.json.encode: nesting deeper than %d (a cycle?)", e->max_depth);
  luaL_checkstack(L, 8, "rag.json.encode: nesting too deep");
  if (is_object(L, idx) || (n = sequence_length(L, idx)) < 0) {
    encode_object(e, idx, depth);
    return;
  }
  lrag_buf_addc(L, e->b, '[');
  for (lua_Integer i = 1; i <= n && e->badutf8 == 0; i++) {
    if (i > 1) lrag_buf_addc(L, e->b, ',');
    lua_rawgeti(L, idx, i);
    encode_value(e, lua_gettop(L), depth + 1);
    lua_pop(L, 1);
  }
  lrag_buf_addc(L, e->b, ']');
}

static void encode_value(enc *e, int idx, int depth) {
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
    case LUA_TNIL: lrag_buf_add(L, e->b, "null", 4); return;
    case LUA_TBOOLEAN:
      if (lua_toboolean(L, idx)) lrag_buf_add(L, e->b, "true", 4);
      else lrag_buf_add(L, e->b, "false", 5);
      return;
    case LUA_TNUMBER: encode_number(e, idx); return;
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      encode_string(e, s, len);
      return;
    }
    case LUA_TTABLE: encode_table(e, idx, depth); return;
    case LUA_TLIGHTUSERDATA:
      if (is_null(L, idx)) {
        lrag_buf_add(L, e->b, "null", 4);
        return;
      }
      break;
  }
  luaL_error(L, "rag.json.encode: cannot encode a %s", luaL_typename(L, idx));
}

static int json_encode(lua_State *L) {
  enc e;
  luaL_checkany(L, 1);
  e.max_depth = check_depth(L, 2, "rag.json.encode");
  lua_settop(L, 2);
  e.L = L;
  e.b = lrag_buf_new(L);
  e.badutf8 = 0;
  encode_value(&e, 1, 1);
  if (e.badutf8 != 0)
    return lrag_error(L, RAG_EENCODING, "rag.json.encode", "invalid utf-8 at byte %lu of a string",
                      (unsigned long)e.badutf8);
  lua_pushlstring(L, e.b->p, e.b->len);
  return 1;
}

/* {====== Decoding ======} */

typedef struct dec {
  lua_State *L;
  const char *src;
  const char *cur; /* the scanner: next string or number token from here */
  int max_depth;
  const char *err;
  size_t errpos;
} dec;

/*
** Advances the scanner to the next string or number token. The source has
** passed cJSON and check_bytes, so tokens are well formed and appear in the
** same order as a pre-order walk of the tree (keys before values).
*/
static void next_token(dec *d, const char **start, size_t *len, int *escaped) {
  const char *p = d->cur;
  while (*p != '"' && *p != '-' && (*p < '0' || *p > '9')) p++;
  *escaped = 0;
  if (*p == '"') {
    for (*start = ++p; *p != '"'; p++)
      if (*p == '\\') *escaped = 1, p++;
    *len = (size_t)(p - *start);
    d->cur = p + 1;
  } else {
    for (*start = p; *p != '\0' && strchr("0123456789+-.eE", *p) != NULL; p++) {}
    *len = (size_t)(p - *start);
    d->cur = p;
  }
}

/* True if s (n bytes) starts an escape's body: one of "\/bfnrt or uXXXX. */
static int is_escape(const unsigned char *s, size_t n) {
  if (n == 0) return 0;
  if (*s != 'u') return *s != '\0' && strchr("\"\\/bfnrt", *s) != NULL;
  if (n < 5) return 0;
  for (int i = 1; i <= 4; i++)
    if (!isxdigit(s[i])) return 0;
  return 1;
}

/*
** cJSON is lenient where RFC 8259 is not: it skips any byte <= 0x20 as
** whitespace, lets raw control characters into strings, reads a bad hex
** digit in \\u as zero and does not check UTF-8. Returns the 1-based position of the first such byte, or 0, and
** what is wrong there in *what.
*/
static size_t check_bytes(const char *s, size_t len, const char **what) {
  const unsigned char *p = (const unsigned char *)s;
  int in_string = 0;
  *what = "control character";
  for (size_t i = 0; i < len; i++) {
    unsigned char c = p[i];
    if (c >= 0x80) {
      size_t n = utf8_seq(p + i, len - i);
      if (n == 0) {
        *what = "invalid utf-8";
        return i + 1;
      }
      i += n - 1;
    } else if (in_string) {
      if (c == '\\') {
        if (!is_escape(p + i + 1, len - i - 1)) {
          *what = "invalid escape";
          return i + 1;
        }
        i++;
      } else if (c == '"') {
        in_string = 0;
      } else if (c < 0x20) {
        return i + 1;
      }
    } else if (c == '"') {
      in_string = 1;
    } else if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
      return i + 1;
    }
  }
  return 0;
}

/* RFC 8259 number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int is_json_number(const char *s, size_t len) {
  const char *p = s, *end = s + len;
#define DIGITS(min)                                         \
  do {                                                      \
    const char *q = p;                                      \
    while (p < end && *p >= '0' && *p <= '9') p++;          \
    if (p - q < (min)) return 0;                            \
  } while (0)
  if (p < end && *p == '-') p++;
  if (p < end && *p == '0') p++;
  else DIGITS(1);
  if (p < end && *p == '.') {
    p++;
    DIGITS(1);
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    DIGITS(1);
  }
#undef DIGITS
  return p == end;
}

static unsigned hex4(const char *s) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    v = v * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return v;
}

static void add_utf8(luaL_Buffer *b, unsigned long cp) {
  if (cp < 0x80) {
    luaL_addchar(b, (char)cp);
  } else if (cp < 0x800) {
    luaL_addchar(b, (char)(0xC0 | (cp >> 6)));
    luaL_addchar(b, (char)(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    luaL_addchar(b, (char)(0xE0 | (cp >> 12)));
    luaL_addchar(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
    luaL_addchar(b, (char)(0x80 | (cp & 0x3F)));
  } else {
    luaL_addchar(b, (char)(0xF0 | (cp >> 18)));
    luaL_addchar(b, (char)(0x80 | ((cp >> 12) & 0x3F)));
    luaL_addchar(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
    luaL_addchar(b, (char)(0x80 | (cp & 0x3F)));
  }
}

/* Pushes the unescaped string; cJSON already checked escapes and pairs. */
static void push_unescaped(lua_State *L, const char *s, size_t len) {
  luaL_Buffer b;
  const char *end = s + len;
  luaL_buffinit(L, &b);
  while (s < end) {
    const char *bs = memchr(s, '\\', (size_t)(end - s));
    if (bs == NULL) bs = end;
    luaL_addlstring(&b, s, (size_t)(bs - s));
    if (bs == end) break;
    s = bs + 2;
    switch (bs[1]) {
      case 'b': luaL_addchar(&b, '\b'); break;
      case 'f': luaL_addchar(&b, '\f'); break;
      case 'n': luaL_addchar(&b, '\n'); break;
      case 'r': luaL_addchar(&b, '\r'); break;
      case 't': luaL_addchar(&b, '\t'); break;
      case 'u': {
        unsigned long cp = hex4(s);
        s += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && s + 6 <= end && s[0] == '\\' && s[1] == 'u') {
          unsigned long lo = hex4(s + 2);
          if (lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            s += 6;
          }
        }
        add_utf8(&b, cp);
        break;
      }
      default: luaL_addchar(&b, bs[1]); break; /* " \ / */
    }
  }
  luaL_pushresult(&b);
}

static void push_string(dec *d) {
  const char *s;
  size_t len;
  int escaped;
  next_token(d, &s, &len, &escaped);
  if (escaped) push_unescaped(d->L, s, len);
  else lua_pushlstring(d->L, s, len);
}

static int push_number(dec *d, const cJSON *item) {
  const char *s;
  size_t len;
  int escaped;
  next_token(d, &s, &len, &escaped);
  if (!is_json_number(s, len)) {
    d->err = "invalid number";
    d->errpos = (size_t)(s - d->src) + 1;
    return 0;
  }
#if LUA_VERSION_NUM >= 503
  if (memchr(s, '.', len) == NULL && memchr(s, 'e', len) == NULL &&
      memchr(s, 'E', len) == NULL) {
    long long v;
    errno = 0;
    v = strtoll(s, NULL, 10);
    if (errno == 0) {
      lua_pushinteger(d->L, (lua_Integer)v);
      return 1;
    }
  }
#endif
  if (isinf(item->valuedouble)) { /* JSON cannot say inf; encode would refuse it */
    d->err = "number out of range";
    d->errpos = (size_t)(s - d->src) + 1;
    return 0;
  }
  lua_pushnumber(d->L, (lua_Number)item->valuedouble);
  return 1;
}

static int push_item(dec *d, const cJSON *item, int depth) {
  lua_State *L = d->L;
  if (cJSON_IsNull(item)) push_null(L);
  else if (cJSON_IsTrue(item)) lua_pushboolean(L, 1);
  else if (cJSON_IsFalse(item)) lua_pushboolean(L, 0);
  else if (cJSON_IsNumber(item)) return push_number(d, item);
  else if (cJSON_IsString(item)) push_string(d);
  else {
    const cJSON *c;
    int i = 0, obj = cJSON_IsObject(item);
    if (depth > d->max_depth) {
      d->err = "nesting too deep";
      d->errpos = (size_t)(d->cur - d->src) + 1;
      return 0;
    }
    luaL_checkstack(L, 4, "rag.json.decode: nesting too deep");
    lua_newtable(L);
    for (c = item->child; c != NULL; c = c->next) {
      if (obj) push_string(d);
      if (!push_item(d, c, depth + 1)) return 0;
      if (obj) lua_rawset(L, -3);
      else lua_rawseti(L, -2, ++i);
    }
    if (obj) {
      lua_pushvalue(L, OBJECT_MT);
      lua_setmetatable(L, -2);
    }
  }
  return 1;
}

static void tree_fin(void *p) {
  cJSON_Delete((cJSON *)p);
}

/* A failure of the world: nil, "rag.json.decode: <what> at byte <pos>", "decode". */
static int bad_json(lua_State *L, const char *what, size_t pos) {
  return lrag_error(L, RAG_EDECODE, "rag.json.decode", "%s at byte %lu", what,
                    (unsigned long)pos);
}

/* The nesting depth at byte n of s: the arrays and objects open there. */
static size_t depth_at(const char *s, size_t n) {
  size_t i, depth = 0;
  int in_string = 0;
  for (i = 0; i < n; i++) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = 0;
    } else if (c == '"') {
      in_string = 1;
    } else if (c == '[' || c == '{') {
      depth++;
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
  return depth;
}

static int json_decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  const char *end = NULL;
  const char *what;
  size_t bad;
  lrag_box *box;
  dec d;
  d.max_depth = check_depth(L, 2, "rag.json.decode");
  lua_settop(L, 2);
  bad = check_bytes(s, len, &what);
  if (bad != 0) return bad_json(L, what, bad);
  box = lrag_box_new(L, tree_fin);
  box->p = cJSON_ParseWithLengthOpts(s, len, &end, 0);
  if (box->p == NULL) {
    size_t at = end != NULL && end >= s && end <= s + len ? (size_t)(end - s) : 0;
    /* cJSON stops at its own limit (CJSON_NESTING_LIMIT, 1000) */
    return bad_json(L, depth_at(s, at) >= RAG_JSON_MAX_DEPTH ? "nesting deeper than 1000"
                                                              : "invalid json", at + 1);
  }
  while (end < s + len && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
  d.L = L;
  d.src = d.cur = s;
  d.err = end < s + len ? "unexpected data after the value" : NULL;
  d.errpos = (size_t)(end - s) + 1;
  if (d.err == NULL && push_item(&d, (const cJSON *)box->p, 1)) {
    lrag_box_free(box);
    return 1;
  }
  lrag_box_free(box);
  return bad_json(L, d.err, d.errpos);
}

/* {====== Module ======} */

/* json.object([t]): marks t (or a new table) to encode as an object. */
static int json_object(lua_State *L) {
  lua_settop(L, 1);
  if (lua_isnil(L, 1)) {
    lua_newtable(L);
    lua_replace(L, 1);
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushvalue(L, OBJECT_MT);
  lua_setmetatable(L, 1);
  return 1;
}

static const luaL_Reg json_funcs[] = {
    {"decode", json_decode}, {"encode", json_encode}, {"object", json_object}, {NULL, NULL},
};

int lrag_open_json(lua_State *L) {
  lua_createtable(L, 0, 1); /* OBJECT_MT */
  lua_pushliteral(L, "rag.json.object");
  lua_setfield(L, -2, "__name");
  luaL_setfuncs(L, json_funcs, 1);
  push_null(L);
  lua_setfield(L, -2, "null");
  return 0;
}
