/*
** lrag_graph.c: rag.core.graph: new(), load(path [, {map=}]) make a
** "rag.graph" userdata over the core entity graph; normalize(name) and
** mentions(text [, opts]) expose the heuristic extractor. Keys, ids and
** relations are byte strings; every listing comes sorted from the core.
*/
#include "lrag.h"

#include <string.h>

#include "rag.h"
#include "rag_digest.h"
#include "rag_file.h"
#include "rag_graph.h"
#include "rag_mentions.h"

#define MT "rag.graph"

typedef struct lgraph {
  rag_graph *g;    /* NULL once closed */
  rag_mentions *m; /* the extractor of g:extract, made on first use */
} lgraph;

static void graph_fin(void *u) {
  lgraph *x = (lgraph *)u;
  rag_graph_free(x->g);
  rag_mentions_free(x->m);
  x->m = NULL;
}

static const lrag_class graph_class;

static lgraph *check_graph(lua_State *L, const char *fname) {
  return (lgraph *)lrag_checkobject(L, 1, &graph_class, fname);
}

static void oom(lua_State *L, int rc, const char *fname) {
  if (rc == RAG_ETOOBIG) luaL_error(L, "%s: too large for the graph", fname);
  if (rc != RAG_OK) lrag_error(L, rc, fname, NULL);
}

/* A string argument (numbers converted as tostring does); `what` names it. */
static const char *check_str(lua_State *L, int idx, const char *fname, const char *what,
                             size_t *len) {
  int t = lua_type(L, idx);
  if (t != LUA_TSTRING && t != LUA_TNUMBER)
    luaL_error(L, "%s: %s must be a string, got %s", fname, what, luaL_typename(L, idx));
  return lua_tolstring(L, idx, len);
}

/* The extractor options of the table at idx. */
static void check_mopts(lua_State *L, int idx, const char *fname, rag_mentions_opts *o) {
  static const char *const allowed[] = {"max_words", "phrases", "min_len", NULL};
  lrag_checkopts(L, idx, fname, allowed);
  rag_mentions_defaults(o);
  o->max_words = (size_t)lrag_optinteger(L, idx, fname, "max_words", 3, 2, 64);
  o->phrases = lrag_optboolean(L, idx, fname, "phrases", 1);
  o->min_len = (size_t)lrag_optinteger(L, idx, fname, "min_len", 2, 1, LRAG_MAXINT);
}

/* {====== Module functions ======} */

static int graph_new(lua_State *L) {
  lgraph *u = (lgraph *)lrag_newobject(L, &graph_class, sizeof *u);
  oom(L, rag_graph_new(&u->g), "rag.graph.new");
  return 1;
}

typedef struct loading {
  rag_graph *g;
  void *map;
  size_t maplen;
  unsigned char *buf;
} loading;

static void loading_fin(void *p) {
  loading *ld = (loading *)p;
  rag_graph_free(ld->g);
  rag_file_unmap(ld->map, ld->maplen);
  rag_free(ld->buf);
  memset(ld, 0, sizeof *ld);
}

/*
** rag.core.graph.load(path [, { map = true }]): map reads the file through
** a read-only mapping instead of a copy in memory; the graph is built in
** memory either way and the mapping released before this returns.
*/
static int graph_load(lua_State *L) {
  static const char *const allowed[] = {"map", NULL};
  const char *fname = "rag.graph.load", *path = lrag_checkpath(L, 1, fname), *why = "";
  loading *ld;
  lgraph *u;
  size_t n = 0;
  int err = 0, rc, map;
  lrag_checkopts(L, 2, fname, allowed);
  map = lrag_optboolean(L, 2, fname, "map", 0);
  ld = (loading *)lrag_box_embed(L, sizeof *ld, loading_fin);
  if (map) {
    rc = rag_file_map(path, &ld->map, &ld->maplen, &why, &err);
    if (rc == RAG_OK) rc = rag_graph_load_mem((const unsigned char *)ld->map, ld->maplen, &ld->g, &why);
  } else {
    rc = rag_file_read(path, &ld->buf, &n, &why, &err);
    if (rc == RAG_OK) rc = rag_graph_load_mem(ld->buf, n, &ld->g, &why);
  }
  if (rc != RAG_OK) return lrag_file_error(L, rc, fname, path, why, err);
  u = (lgraph *)lrag_newobject(L, &graph_class, sizeof *u);
  u->g = ld->g;
  ld->g = NULL;
  loading_fin(ld);
  return 1;
}

static void free_fin(void *p) {
  rag_free(p);
}

static void mentions_fin(void *p) {
  rag_mentions_free((rag_mentions *)p);
}

static int graph_normalize(lua_State *L) {
  const char *fname = "rag.graph.normalize", *s;
  size_t len, outlen, errpos = 0;
  char *out;
  lrag_box *box;
  int rc;
  s = check_str(L, 1, fname, "name", &len);
  box = lrag_box_new(L, free_fin);
  rc = rag_mentions_normalize(s, len, &out, &outlen, &errpos);
  if (rc != RAG_OK) return lrag_texterror(L, rc, fname, errpos);
  box->p = out;
  lua_pushlstring(L, out, outlen);
  lrag_box_free(box);
  return 1;
}

/* Pushes the mentions of text (at idx) as a list of tables. */
static void push_mentions(lua_State *L, const char *text, const rag_mention *ms, size_t n,
                          const char *keys) {
  size_t i;
  lua_createtable(L, n > 0x7fffffff ? 0 : (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_createtable(L, 0, 5);
    lua_pushlstring(L, text + ms[i].start, ms[i].stop - ms[i].start);
    lua_setfield(L, -2, "text");
    lua_pushlstring(L, keys + ms[i].key, ms[i].keylen);
    lua_setfield(L, -2, "key");
    lrag_setint(L, "start", (lua_Integer)ms[i].start + 1);
    lrag_setint(L, "stop", (lua_Integer)ms[i].stop);
    lrag_setint(L, "sentence", (lua_Integer)ms[i].sentence + 1);
    lua_rawseti(L, -2, (int)i + 1);
  }
}

static int graph_mentions(lua_State *L) {
  const char *fname = "rag.graph.mentions", *text;
  rag_mentions_opts o;
  const rag_mention *ms;
  rag_mentions *m;
  size_t len, n, errpos = 0;
  lrag_box *box;
  int rc;
  if (lua_type(L, 1) != LUA_TSTRING)
    luaL_error(L, "%s: text must be a string, got %s", fname, luaL_typename(L, 1));
  text = lua_tolstring(L, 1, &len);
  check_mopts(L, 2, fname, &o);
  box = lrag_box_new(L, mentions_fin);
  oom(L, rag_mentions_new(&m), fname);
  box->p = m;
  rc = rag_mentions_run(m, text, len, &o, &ms, &n, &errpos);
  if (rc != RAG_OK) return lrag_texterror(L, rc, fname, errpos);
  push_mentions(L, text, ms, n, rag_mentions_keys(m));
  return 1;
}

/* {====== Changes ======} */

static int graph_entity(lua_State *L) {
  const char *fname = "rag.graph.entity";
  lgraph *u = check_graph(L, fname);
  size_t kl, nl;
  const char *k = check_str(L, 2, fname, "key", &kl), *nm;
  int added, rc;
  nm = lua_isnoneornil(L, 3) ? k : check_str(L, 3, fname, "name", &nl);
  if (lua_isnoneornil(L, 3)) nl = kl;
  if (kl == 0) luaL_error(L, "%s: key must not be empty", fname);
  rc = rag_graph_entity(u->g, k, kl, nm, nl, &added);
  oom(L, rc, fname);
  lua_pushboolean(L, added);
  return 1;
}

static int graph_alias(lua_State *L) {
  const char *fname = "rag.graph.alias";
  lgraph *u = check_graph(L, fname);
  size_t al, kl;
  const char *a = check_str(L, 2, fname, "alias", &al), *k = check_str(L, 3, fname, "key", &kl);
  const char *why = NULL;
  int added, rc = rag_graph_alias(u->g, a, al, k, kl, &added, &why);
  if (rc == RAG_EINVAL) {
    if (strcmp(why, "unknown entity") == 0) luaL_error(L, "%s: unknown entity '%s'", fname, k);
    luaL_error(L, "%s: %s '%s'", fname, why, a);
  }
  oom(L, rc, fname);
  lua_pushboolean(L, added);
  return 1;
}

static void push_key(lua_State *L, const rag_graph *g, uint32_t e) {
  size_t len;
  const char *k = rag_graph_key(g, e, &len);
  lua_pushlstring(L, k, len);
}

static int graph_resolve(lua_State *L) {
  const char *fname = "rag.graph.resolve";
  lgraph *u = check_graph(L, fname);
  size_t kl;
  const char *k = check_str(L, 2, fname, "key", &kl);
  uint32_t e = rag_graph_resolve(u->g, k, kl);
  if (e == RAG_GRAPH_NONE) lua_pushnil(L);
  else push_key(L, u->g, e);
  return 1;
}

static int graph_mention(lua_State *L) {
  const char *fname = "rag.graph.mention";
  lgraph *u = check_graph(L, fname);
  size_t kl, cl;
  const char *k = check_str(L, 2, fname, "key", &kl), *c = lrag_checkid(L, 3, fname, &cl);
  int added, rc = rag_graph_mention(u->g, k, kl, c, cl, &added);
  if (rc == RAG_EINVAL) luaL_error(L, "%s: unknown entity '%s'", fname, k);
  oom(L, rc, fname);
  lua_pushboolean(L, added);
  return 1;
}

static int graph_relate(lua_State *L) {
  const char *fname = "rag.graph.relate";
  lgraph *u = check_graph(L, fname);
  size_t sl, dl, rl, cl;
  const char *s = check_str(L, 2, fname, "src", &sl), *d = check_str(L, 3, fname, "dst", &dl);
  const char *r = check_str(L, 4, fname, "relation", &rl), *c = lrag_checkid(L, 5, fname, &cl);
  int added, bad, rc = rag_graph_relate(u->g, s, sl, d, dl, r, rl, c, cl, &added, &bad);
  if (rc == RAG_EINVAL) luaL_error(L, "%s: unknown entity '%s'", fname, bad == 1 ? s : d);
  oom(L, rc, fname);
  lua_pushboolean(L, added);
  return 1;
}

static int graph_extract(lua_State *L) {
  const char *fname = "rag.graph.extract";
  lgraph *u = check_graph(L, fname);
  size_t cl, len, n, errpos = 0;
  const char *c = lrag_checkid(L, 2, fname, &cl), *text;
  rag_mentions_opts o;
  int rc;
  if (lua_type(L, 3) != LUA_TSTRING)
    luaL_error(L, "%s: text must be a string, got %s", fname, luaL_typename(L, 3));
  text = lua_tolstring(L, 3, &len);
  check_mopts(L, 4, fname, &o);
  if (u->m == NULL) oom(L, rag_mentions_new(&u->m), fname);
  rc = rag_graph_extract(u->g, u->m, c, cl, text, len, &o, &n, &errpos);
  if (rc == RAG_EENCODING) return lrag_texterror(L, rc, fname, errpos);
  oom(L, rc, fname);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int graph_remove_chunk(lua_State *L) {
  const char *fname = "rag.graph.remove_chunk";
  lgraph *u = check_graph(L, fname);
  size_t cl;
  const char *c = lrag_checkid(L, 2, fname, &cl);
  lua_pushinteger(L, (lua_Integer)rag_graph_remove_chunk(u->g, c, cl));
  return 1;
}

static int graph_remove_doc(lua_State *L) {
  const char *fname = "rag.graph.remove_doc";
  lgraph *u = check_graph(L, fname);
  size_t dl;
  const char *d = lrag_checkid(L, 2, fname, &dl);
  lua_pushinteger(L, (lua_Integer)rag_graph_remove_doc(u->g, d, dl));
  return 1;
}

static int graph_mark(lua_State *L) {
  const char *fname = "rag.graph.mark";
  lgraph *u = check_graph(L, fname);
  size_t dl, hl;
  const char *d = lrag_checkid(L, 2, fname, &dl), *h = check_str(L, 3, fname, "hash", &hl);
  oom(L, rag_graph_mark(u->g, d, dl, h, hl), fname);
  return 0;
}

static int graph_marked(lua_State *L) {
  const char *fname = "rag.graph.marked";
  lgraph *u = check_graph(L, fname);
  size_t dl, hl;
  const char *d = lrag_checkid(L, 2, fname, &dl), *h = rag_graph_marked(u->g, d, dl, &hl);
  if (h == NULL) lua_pushnil(L);
  else lua_pushlstring(L, h, hl);
  return 1;
}

static int graph_marks(lua_State *L) {
  lgraph *u = check_graph(L, "rag.graph.marks");
  size_t i, n = rag_graph_nmarks(u->g);
  lua_newtable(L);
  for (i = 0; i < n; i++) {
    const char *d, *h;
    size_t dl, hl;
    rag_graph_mark_at(u->g, i, &d, &dl, &h, &hl);
    if (d == NULL) continue;
    lua_pushlstring(L, d, dl);
    lua_pushlstring(L, h, hl);
    lua_rawset(L, -3);
  }
  return 1;
}

/* {====== Queries ======} */

static void push_edge(lua_State *L, const rag_graph *g, uint32_t x) {
  rag_graph_edge e;
  size_t i;
  rag_graph_edge_get(g, x, &e);
  lua_createtable(L, 0, 4);
  push_key(L, g, e.src);
  lua_setfield(L, -2, "src");
  push_key(L, g, e.dst);
  lua_setfield(L, -2, "dst");
  lua_pushlstring(L, e.rel, e.rlen);
  lua_setfield(L, -2, "relation");
  lua_createtable(L, (int)e.nchunks, 0);
  for (i = 0; i < e.nchunks; i++) {
    size_t len;
    const char *c = rag_graph_chunk(g, e.chunks[i], &len);
    lua_pushlstring(L, c, len);
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -2, "chunks");
}

static void push_edges(lua_State *L, const rag_graph *g, const uint32_t *xs, size_t n) {
  size_t i;
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    push_edge(L, g, xs[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
}

static int graph_entities(lua_State *L) {
  const char *fname = "rag.graph.entities";
  lgraph *u = check_graph(L, fname);
  const uint32_t *es;
  size_t i, n;
  oom(L, rag_graph_entities(u->g, &es, &n), fname);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    push_key(L, u->g, es[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static int graph_edges(lua_State *L) {
  const char *fname = "rag.graph.edges";
  lgraph *u = check_graph(L, fname);
  const uint32_t *xs;
  size_t n;
  oom(L, rag_graph_edges(u->g, &xs, &n), fname);
  push_edges(L, u->g, xs, n);
  return 1;
}

static int graph_get(lua_State *L) {
  const char *fname = "rag.graph.get";
  lgraph *u = check_graph(L, fname);
  size_t kl, i, len;
  const char *k = check_str(L, 2, fname, "key", &kl), *s;
  uint32_t e = rag_graph_resolve(u->g, k, kl);
  rag_graph_info info;
  if (e == RAG_GRAPH_NONE) {
    lua_pushnil(L);
    return 1;
  }
  oom(L, rag_graph_info_get(u->g, e, &info), fname);
  lua_createtable(L, 0, 5);
  push_key(L, u->g, e);
  lua_setfield(L, -2, "key");
  s = rag_graph_name(u->g, e, &len);
  lua_pushlstring(L, s, len);
  lua_setfield(L, -2, "name");
  lua_createtable(L, (int)info.naliases, 0);
  for (i = 0; i < info.naliases; i++) {
    s = rag_graph_alias_key(u->g, info.aliases[i], &len);
    lua_pushlstring(L, s, len);
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -2, "aliases");
  lua_createtable(L, (int)info.nchunks, 0);
  for (i = 0; i < info.nchunks; i++) {
    s = rag_graph_chunk(u->g, info.chunks[i], &len);
    lua_pushlstring(L, s, len);
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -2, "chunks");
  lrag_setint(L, "degree", (lua_Integer)info.degree);
  return 1;
}

/* g:neighbours(keys, hops [, { limit = 1000 }]): keys a list of keys or one key. */
static int graph_neighbours(lua_State *L) {
  static const char *const allowed[] = {"limit", NULL};
  const char *fname = "rag.graph.neighbours";
  lgraph *u = check_graph(L, fname);
  const uint32_t *es, *hs, *xs;
  uint32_t *seeds;
  size_t n, i, ns = 0, ne, nx, limit;
  lua_Integer hops;
  if (lua_type(L, 2) == LUA_TSTRING) {
    n = 1;
  } else {
    n = lrag_checklist(L, 2, fname, "keys must be a list of keys or a key");
  }
  if (lua_type(L, 3) != LUA_TNUMBER)
    luaL_error(L, "%s: hops must be an integer >= 0, got %s", fname, luaL_typename(L, 3));
  hops = lua_tointeger(L, 3);
  if (hops < 0 || (lua_Number)hops != lua_tonumber(L, 3))
    luaL_error(L, "%s: hops must be an integer >= 0", fname);
  lrag_checkopts(L, 4, fname, allowed);
  limit = (size_t)lrag_optinteger(L, 4, fname, "limit", 1000, 1, LRAG_MAXINT);
  seeds = (uint32_t *)lua_newuserdatauv(L, (n + 1) * sizeof *seeds, 0);
  for (i = 0; i < n; i++) {
    size_t kl;
    const char *k;
    uint32_t e;
    if (lua_type(L, 2) == LUA_TSTRING) lua_pushvalue(L, 2);
    else lua_rawgeti(L, 2, (int)i + 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: keys must be strings, got %s", fname, luaL_typename(L, -1));
    k = lua_tolstring(L, -1, &kl);
    e = rag_graph_resolve(u->g, k, kl);
    if (e != RAG_GRAPH_NONE) seeds[ns++] = e;
    lua_pop(L, 1);
  }
  oom(L, rag_graph_neighbours(u->g, seeds, ns, (size_t)hops, limit, &es, &hs, &ne, &xs, &nx),
      fname);
  lua_createtable(L, 0, 2);
  lua_createtable(L, (int)ne, 0);
  for (i = 0; i < ne; i++) {
    size_t len;
    const char *s;
    lua_createtable(L, 0, 3);
    push_key(L, u->g, es[i]);
    lua_setfield(L, -2, "key");
    s = rag_graph_name(u->g, es[i], &len);
    lua_pushlstring(L, s, len);
    lua_setfield(L, -2, "name");
    lrag_setint(L, "hops", (lua_Integer)hs[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -2, "entities");
  push_edges(L, u->g, xs, nx);
  lua_setfield(L, -2, "edges");
  return 1;
}

static int graph_communities(lua_State *L) {
  static const char *const allowed[] = {"method", "iterations", NULL};
  static const char *const methods[] = {"labels", "components", NULL};
  const char *fname = "rag.graph.communities";
  lgraph *u = check_graph(L, fname);
  const uint32_t *mem;
  const size_t *st;
  size_t n, i, j;
  int method;
  lua_Integer its;
  lrag_checkopts(L, 2, fname, allowed);
  method = lrag_optenum(L, 2, fname, "method", 0, methods);
  its = lrag_optinteger(L, 2, fname, "iterations", 20, 1, 1e6);
  oom(L, rag_graph_communities(u->g, method == 0 ? RAG_GRAPH_LABELS : RAG_GRAPH_COMPONENTS,
                               (size_t)its, &mem, &st, &n),
      fname);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_createtable(L, (int)(st[i + 1] - st[i]), 0);
    for (j = st[i]; j < st[i + 1]; j++) {
      push_key(L, u->g, mem[j]);
      lua_rawseti(L, -2, (int)(j - st[i]) + 1);
    }
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static int graph_stats(lua_State *L) {
  lgraph *u = check_graph(L, "rag.graph.stats");
  rag_graph_stats s;
  rag_graph_stats_get(u->g, &s);
  lua_createtable(L, 0, 5);
  lrag_setint(L, "entities", (lua_Integer)s.entities);
  lrag_setint(L, "edges", (lua_Integer)s.edges);
  lrag_setint(L, "aliases", (lua_Integer)s.aliases);
  lrag_setint(L, "mentions", (lua_Integer)s.mentions);
  lrag_setint(L, "docs", (lua_Integer)s.docs);
  return 1;
}

static int graph_len(lua_State *L) {
  lgraph *u = check_graph(L, "rag.graph.__len");
  rag_graph_stats s;
  rag_graph_stats_get(u->g, &s);
  lua_pushinteger(L, (lua_Integer)s.entities);
  return 1;
}

/*
** g:save(path) -> { size =, crc32 = } | nil, msg, code: the file written
** atomically; its size and CRC-32 are what rag.index's manifest records.
*/
static int graph_save(lua_State *L) {
  const char *fname = "rag.graph.save";
  lgraph *u = check_graph(L, fname);
  const char *path = lrag_checkpath(L, 2, fname);
  lrag_box *box = lrag_box_new(L, free_fin);
  unsigned char *buf;
  size_t n;
  int err = 0, rc = rag_graph_dump(u->g, &buf, &n);
  oom(L, rc, fname);
  box->p = buf;
  rc = rag_file_write(path, buf, n, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, fname, path, NULL, err);
  lua_createtable(L, 0, 2);
  lrag_setint(L, "size", (lua_Integer)n);
  lrag_setint(L, "crc32", (lua_Integer)rag_digest_crc32(0, buf, n));
  lrag_box_free(box);
  return 1;
}

/* g:_check(): true, or raises when an internal invariant is broken (for specs). */
static int graph_check(lua_State *L) {
  lgraph *u = check_graph(L, "rag.graph._check");
  if (rag_graph_check(u->g) != RAG_OK) luaL_error(L, "rag.graph._check: corrupt graph");
  lua_pushboolean(L, 1);
  return 1;
}

static int graph_tostring(lua_State *L) {
  lgraph *u = (lgraph *)luaL_checkudata(L, 1, MT);
  rag_graph_stats s;
  if (u->g == NULL) {
    lua_pushliteral(L, "rag.graph (closed)");
    return 1;
  }
  rag_graph_stats_get(u->g, &s);
  lua_pushfstring(L, "rag.graph (%d entities, %d edges)", (int)s.entities, (int)s.edges);
  return 1;
}

static const luaL_Reg graph_methods[] = {
    {"entity", graph_entity},
    {"alias", graph_alias},
    {"resolve", graph_resolve},
    {"mention", graph_mention},
    {"relate", graph_relate},
    {"extract", graph_extract},
    {"remove_chunk", graph_remove_chunk},
    {"remove_doc", graph_remove_doc},
    {"mark", graph_mark},
    {"marked", graph_marked},
    {"marks", graph_marks},
    {"neighbours", graph_neighbours},
    {"get", graph_get},
    {"entities", graph_entities},
    {"edges", graph_edges},
    {"communities", graph_communities},
    {"stats", graph_stats},
    {"save", graph_save},
    {"_check", graph_check},
    {NULL, NULL},
};

static const luaL_Reg graph_metamethods[] = {
    {"__len", graph_len},
    {"__tostring", graph_tostring},
    {NULL, NULL},
};

static const lrag_class graph_class = {MT, "graph", graph_methods, graph_metamethods, graph_fin};

static const luaL_Reg graph_funcs[] = {
    {"new", graph_new},
    {"load", graph_load},
    {"normalize", graph_normalize},
    {"mentions", graph_mentions},
    {NULL, NULL},
};

int lrag_open_graph(lua_State *L) {
  lrag_newclass(L, &graph_class);
  luaL_setfuncs(L, graph_funcs, 0);
  return 0;
}
