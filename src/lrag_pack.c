/*
** lrag_pack.c: rag.pack(items, opts), the packer of rag_pack.c. Items are
** read into borrowed records (their strings stay anchored by the item
** tables, number ids converted into an anchor table), packed, and returned
** as { text =, tokens =, used =, dropped =, citations = }.
*/
#include "lrag.h"

#include <math.h>
#include <string.h>

#include "rag.h"
#include "rag_pack.h"

#define FNAME "rag.pack"

/* Stack slots: the arguments, then the item field names (no lookup by C string per item). */
enum { ITEMS = 1, OPTS, K_ID, K_TEXT, K_SCORE, K_SOURCE, K_DOC, K_START, K_STOP, NKEYS = 7 };

/* Above them: the records, the anchor table, and the item being read. */
enum { ITEM = K_STOP + 3 };

static const char *const item_keys[NKEYS] = {"id", "text", "score", "source", "doc", "start",
                                             "stop"};

/* {====== Options ======} */

/* The options that are plain values: budget, per_source, the flags and the order. */
static void read_opts(lua_State *L, rag_pack_opts *o) {
  static const char *const keys[] = {"budget",     "tokenizer",      "order",    "template",
                                     "separator",  "per_source",     "merge_adjacent",
                                     "truncate",   NULL};
  static const char *const order_names[] = {"relevance", "edges", "given", NULL};
  if (lua_type(L, OPTS) != LUA_TTABLE)
    luaL_error(L, FNAME ": opts must be a table with a budget, got %s", luaL_typename(L, OPTS));
  lrag_checkopts(L, OPTS, FNAME, keys);
  memset(o, 0, sizeof *o);
  lua_getfield(L, OPTS, "budget");
  if (lua_isnil(L, -1)) luaL_error(L, FNAME ": option 'budget' is required");
  lua_pop(L, 1);
  o->budget = (size_t)lrag_optinteger(L, OPTS, FNAME, "budget", 0, 0, LRAG_MAXINT);
  o->per_source = (size_t)lrag_optinteger(L, OPTS, FNAME, "per_source", 0, 1, LRAG_MAXINT);
  o->merge = lrag_optboolean(L, OPTS, FNAME, "merge_adjacent", 0);
  o->truncate = lrag_optboolean(L, OPTS, FNAME, "truncate", 0);
  o->order = (rag_pack_order)lrag_optenum(L, OPTS, FNAME, "order", RAG_PACK_RELEVANCE,
                                          order_names);
}

/*
** The options that point into Lua values: the tokenizer (pushed), the
** template and the separator (held by opts). Read after the items, whose
** __index may run Lua code, so that nothing can close or drop them before
** rag_pack has run.
*/
static void read_refs(lua_State *L, rag_pack_opts *o) {
  size_t pos, len;
  o->tok = lrag_opttokenizer(L, OPTS, FNAME);
  o->tmpl = lrag_optstring(L, OPTS, FNAME, "template", NULL, &o->tmpllen);
  o->sep = lrag_optstring(L, OPTS, FNAME, "separator", NULL, &o->seplen);
  if (o->tmpl != NULL && rag_pack_check_template(o->tmpl, o->tmpllen, &pos, &len) != RAG_OK) {
    lua_pushlstring(L, o->tmpl + pos, len);
    luaL_error(L, FNAME ": option 'template': unknown placeholder '%s'", lua_tostring(L, -1));
  }
}

/* {====== Items ======} */

/* The field at key slot `key` of the item (stack slot ITEM), pushed. */
static int field(lua_State *L, int key) {
  lua_pushvalue(L, key);
  lua_gettable(L, ITEM);
  return lua_type(L, -1);
}

/*
** Keeps the value on top alive for the call in the anchor table: a string
** converted from a number, or one that __index may have made (an item with
** a metatable); other strings are held by the item itself.
*/
static void keep(lua_State *L, int anchor, int needed) {
  if (!needed) return;
  lua_pushvalue(L, -1);
  lua_rawseti(L, anchor, (int)lua_rawlen(L, anchor) + 1);
}

/* An optional string field into *s (NULL when nil); pops it. */
static void opt_field(lua_State *L, int anchor, int meta, int key, size_t i, const char **s,
                      size_t *len) {
  int t = field(L, key);
  *s = NULL;
  *len = 0;
  if (t == LUA_TSTRING) {
    *s = lua_tolstring(L, -1, len);
    keep(L, anchor, meta);
  } else if (t != LUA_TNIL)
    luaL_error(L, FNAME ": item %d: %s must be a string, got %s", (int)i + 1,
               item_keys[key - K_ID], luaL_typename(L, -1));
  lua_pop(L, 1);
}

/* start and stop (1-based, inclusive) into the record's 0-based span. */
static void read_span(lua_State *L, size_t i, rag_pack_item *it) {
  int ts = field(L, K_START), te = field(L, K_STOP);
  lua_Number a, b;
  if (ts == LUA_TNIL && te == LUA_TNIL) {
    lua_pop(L, 2);
    return;
  }
  if (ts != LUA_TNUMBER || te != LUA_TNUMBER)
    luaL_error(L, FNAME ": item %d: start and stop must both be integers, or both absent",
               (int)i + 1);
  a = lua_tonumber(L, -2);
  b = lua_tonumber(L, -1);
  if (!(a >= 1 && a <= 9007199254740992.0 && a == floor(a) && b == floor(b) &&
        b - a + 1 == (lua_Number)it->len))
    luaL_error(L, FNAME ": item %d: start and stop must be integers >= 1 with "
                      "stop - start + 1 == #text (%d)", (int)i + 1, (int)it->len);
  it->has_span = 1;
  it->start = (size_t)a - 1;
  it->stop = it->start + it->len;
  lua_pop(L, 2);
}

/* Item i (at ITEM) into *it; *scored: -1 until the first item says. */
static void read_item(lua_State *L, int anchor, size_t i, rag_pack_item *it, int *scored) {
  int meta = lua_getmetatable(L, ITEM), t;
  if (meta) lua_pop(L, 1);
  memset(it, 0, sizeof *it);
  t = field(L, K_ID);
  if (t == LUA_TNUMBER) { /* as tostring does */
    lua_pushvalue(L, -1);
    it->id = lua_tolstring(L, -1, &it->idlen);
    keep(L, anchor, 1);
    lua_pop(L, 1);
  } else if (t == LUA_TSTRING) {
    it->id = lua_tolstring(L, -1, &it->idlen);
    keep(L, anchor, meta);
  } else {
    luaL_error(L, FNAME ": item %d: id must be a string or a number, got %s", (int)i + 1,
               luaL_typename(L, -1));
  }
  lua_pop(L, 1);
  if (field(L, K_TEXT) != LUA_TSTRING)
    luaL_error(L, FNAME ": item %d: text must be a string, got %s", (int)i + 1,
               luaL_typename(L, -1));
  it->text = lua_tolstring(L, -1, &it->len);
  keep(L, anchor, meta);
  lua_pop(L, 1);
  t = field(L, K_SCORE);
  if (*scored < 0) *scored = t != LUA_TNIL;
  if ((t != LUA_TNIL) != *scored)
    luaL_error(L, FNAME ": item %d: give a score to every item or to none", (int)i + 1);
  if (t != LUA_TNIL) {
    if (t != LUA_TNUMBER || !isfinite(lua_tonumber(L, -1)))
      luaL_error(L, FNAME ": item %d: score must be a finite number", (int)i + 1);
    it->score = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  opt_field(L, anchor, meta, K_SOURCE, i, &it->source, &it->srclen);
  opt_field(L, anchor, meta, K_DOC, i, &it->doc, &it->doclen);
  read_span(L, i, it);
}

/* Reads the items into a userdata and an anchor table, both pushed. */
static rag_pack_item *read_items(lua_State *L, size_t *n, int *scored) {
  rag_pack_item *items;
  size_t i;
  int anchor;
  *n = lrag_checklist(L, ITEMS, FNAME, "items must be a table");
  if (RAG_MUL_OVERFLOWS(*n + 1, sizeof *items)) luaL_error(L, FNAME ": too many items");
  items = (rag_pack_item *)lua_newuserdatauv(L, (*n + 1) * sizeof *items, 0);
  lua_newtable(L);
  anchor = lua_gettop(L);
  if (anchor + 1 != ITEM) luaL_error(L, FNAME ": internal error: stack layout");
  *scored = -1;
  for (i = 0; i < *n; i++) {
    lua_rawgeti(L, ITEMS, (int)i + 1); /* at ITEM */
    if (!lua_istable(L, -1))
      luaL_error(L, FNAME ": item %d must be a table, got %s", (int)i + 1,
                 luaL_typename(L, -1));
    read_item(L, anchor, i, &items[i], scored);
    lua_pop(L, 1);
  }
  if (*scored < 0) *scored = 0;
  return items;
}

/* {====== Results ======} */

static void result_fin(void *p) {
  rag_pack_result_free((rag_pack_result *)p);
}

static void push_id(lua_State *L, const rag_pack_item *it) {
  lua_pushlstring(L, it->id, it->idlen);
}

static void push_ids(lua_State *L, const rag_pack_item *items, const size_t *v, size_t n) {
  size_t i;
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    push_id(L, &items[v[i]]);
    lua_rawseti(L, -2, (int)i + 1);
  }
}

static void push_citation(lua_State *L, const rag_pack_item *items, const rag_pack_result *r,
                          const rag_pack_passage *p, int scored) {
  const rag_pack_item *it = &items[p->lead];
  lua_createtable(L, 0, 8);
  push_id(L, it);
  lua_setfield(L, -2, "id");
  push_ids(L, items, r->used + p->first, p->n);
  lua_setfield(L, -2, "ids");
  if (it->source != NULL) {
    lua_pushlstring(L, it->source, it->srclen);
    lua_setfield(L, -2, "source");
  }
  if (it->doc != NULL || it->source != NULL) {
    lua_pushlstring(L, it->doc ? it->doc : it->source, it->doc ? it->doclen : it->srclen);
    lua_setfield(L, -2, "doc");
  }
  if (p->has_span) {
    lua_pushinteger(L, (lua_Integer)p->start + 1);
    lua_setfield(L, -2, "start");
    lua_pushinteger(L, (lua_Integer)p->stop);
    lua_setfield(L, -2, "stop");
  }
  if (scored) {
    lua_pushnumber(L, it->score);
    lua_setfield(L, -2, "score");
  }
  lua_pushboolean(L, p->truncated);
  lua_setfield(L, -2, "truncated");
}

static void push_result(lua_State *L, const rag_pack_item *items, const rag_pack_result *r,
                        int scored) {
  size_t i;
  lua_createtable(L, 0, 5);
  lua_pushlstring(L, r->text, r->len);
  lua_setfield(L, -2, "text");
  lua_pushinteger(L, (lua_Integer)r->tokens);
  lua_setfield(L, -2, "tokens");
  push_ids(L, items, r->used, r->nused);
  lua_setfield(L, -2, "used");
  push_ids(L, items, r->dropped, r->ndropped);
  lua_setfield(L, -2, "dropped");
  lua_createtable(L, (int)r->npassages, 0);
  for (i = 0; i < r->npassages; i++) {
    push_citation(L, items, r, &r->passages[i], scored);
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -2, "citations");
}

static int fail(lua_State *L, int rc, const rag_pack_err *e, const rag_pack_item *items) {
  static const char *const fields[] = {"id", "text", "source", "doc", "span"};
  if (rc == RAG_EENCODING && (e->field == RAG_PACK_TEMPLATE || e->field == RAG_PACK_SEPARATOR))
    return lrag_error(L, rc, FNAME, "option '%s': invalid utf-8 at byte %lu",
                      e->field == RAG_PACK_TEMPLATE ? "template" : "separator",
                      (unsigned long)e->pos);
  if (rc == RAG_EENCODING)
    return lrag_error(L, rc, FNAME, "item %lu: invalid utf-8 in %s at byte %lu",
                      (unsigned long)e->item + 1, fields[e->field], (unsigned long)e->pos);
  if (rc == RAG_EINVAL && e->field == RAG_PACK_ID) {
    lua_pushlstring(L, items[e->item].id, items[e->item].idlen);
    return lrag_error(L, rc, FNAME, "item %d: duplicate id '%s'", (int)e->item + 1,
                      lua_tostring(L, -1));
  }
  return lrag_error(L, rc, FNAME, NULL);
}

/* {====== rag.pack ======} */

static int pack_pack(lua_State *L) {
  rag_pack_opts o;
  rag_pack_item *items;
  rag_pack_result *r;
  rag_pack_err err;
  size_t n, i;
  int scored, rc;
  lua_settop(L, 2);
  luaL_checkstack(L, 32, FNAME);
  for (i = 0; i < NKEYS; i++) lua_pushstring(L, item_keys[i]);
  read_opts(L, &o);
  items = read_items(L, &n, &scored);
  read_refs(L, &o);
  o.scored = scored;
  r = (rag_pack_result *)lrag_box_embed(L, sizeof *r, result_fin);
  rc = rag_pack(items, n, &o, r, &err);
  if (rc != RAG_OK) return fail(L, rc, &err, items);
  push_result(L, items, r, scored);
  return 1;
}

int lrag_open_pack(lua_State *L) {
  static const luaL_Reg fns[] = {{"pack", pack_pack}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
