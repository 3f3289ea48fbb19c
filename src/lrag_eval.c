/*
** lrag_eval.c: rag.eval.ir(run, qrels, measures [, opts]). Query and
** document ids are read as strings (numbers as tostring makes them) into
** borrowed arrays, anchored by the arguments or by tables on the stack;
** rag_eval.c computes the measures; means (and per-query values) come back
** keyed by the measure names as given.
*/
#include <math.h>
#include <string.h>

#include "lrag.h"
#include "rag_eval.h"

#define FNAME "rag.eval.ir"
#define VALID "ndcg[@k], recall[@k], p@k, mrr[@k], map[@k], success@k"

/*
** Stack slots: the arguments, then the measures' userdata, the run and the
** qrels keyed by string ids, the anchor of converted ids, the list of the
** queries evaluated, and the string "id".
*/
enum { RUN = 1, QRELS, MEASURES, OPTS, MBOX, RMAP, QMAP, ANCHOR, INC, KEY_ID };

typedef struct options {
  int per_query; /* return per-query values too */
  int zero;      /* missing = "zero": qrels queries absent from the run count as 0 */
  double level;  /* the least grade that is relevant */
} options;

/* {====== Arguments ======} */

static void read_opts(lua_State *L, options *o) {
  static const char *const allowed[] = {"level", "missing", "per_query", NULL};
  static const char *const missing_names[] = {"skip", "zero", NULL};
  lrag_checkopts(L, OPTS, FNAME, allowed);
  o->per_query = lrag_optboolean(L, OPTS, FNAME, "per_query", 0);
  o->zero = lrag_optenum(L, OPTS, FNAME, "missing", 0, missing_names);
  o->level = lrag_optnumber(L, OPTS, FNAME, "level", 1, -HUGE_VAL, HUGE_VAL);
  if (!isfinite(o->level) || !(o->level > 0))
    luaL_error(L, FNAME ": option 'level' must be a finite number > 0");
}

/* The measures, parsed into a userdata pushed at MBOX. */
static rag_eval_measure *read_measures(lua_State *L, size_t *nm) {
  rag_eval_measure *m;
  size_t i;
  *nm = lrag_checklist(L, MEASURES, FNAME, "measures must be a list of names");
  if (*nm == 0) luaL_error(L, FNAME ": measures must name at least one of " VALID);
  if (*nm > 0x7fffffff / sizeof *m) luaL_error(L, FNAME ": too many measures");
  m = (rag_eval_measure *)lua_newuserdatauv(L, *nm * sizeof *m, 0);
  for (i = 0; i < *nm; i++) {
    size_t len;
    const char *s;
    int rc;
    lua_rawgeti(L, MEASURES, (int)i + 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, FNAME ": measure %d must be a string, got %s", (int)i + 1,
                 luaL_typename(L, -1));
    s = lua_tolstring(L, -1, &len);
    rc = rag_eval_parse(s, len, &m[i]);
    if (rc == RAG_EINVAL) luaL_error(L, FNAME ": unknown measure '%s' (valid: " VALID ")", s);
    if (rc != RAG_OK)
      luaL_error(L, FNAME ": bad k in measure '%s' (k is an integer from 1 to %d; "
                 "p and success need one)", s, (int)RAG_EVAL_MAX_K);
    lua_pop(L, 1);
  }
  return m;
}

/* The key at -2 (a string or a number) as a string, pushed. */
static const char *push_key(lua_State *L) {
  lua_pushvalue(L, -2);
  return lua_tostring(L, -1); /* converts the copy: the key itself must stay as it is */
}

/*
** A copy of the table at idx ("run" or "qrels") keyed by the query ids as
** strings, pushed; each value must be a table, and no id may appear twice.
*/
static void by_string(lua_State *L, int idx, const char *what) {
  int map;
  lua_newtable(L);
  map = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    int kt = lua_type(L, -2);
    const char *q;
    if (kt != LUA_TSTRING && kt != LUA_TNUMBER)
      luaL_error(L, FNAME ": %s keys must be query ids (strings or numbers), got %s", what,
                 luaL_typename(L, -2));
    q = push_key(L);
    if (!lua_istable(L, -2))
      luaL_error(L, FNAME ": %s['%s'] must be a table, got %s", what, q, luaL_typename(L, -2));
    lua_pushvalue(L, -1);
    lua_rawget(L, map);
    if (!lua_isnil(L, -1))
      luaL_error(L, FNAME ": %s has query '%s' twice (as a number and a string)", what, q);
    lua_pop(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, map);
    lua_pop(L, 1);
  }
}

/* Raises unless every entry of the hit list on top is a hit or an id. */
static void check_run(lua_State *L, const char *q) {
  size_t j, n = lua_rawlen(L, -1);
  for (j = 1; j <= n; j++) {
    int t;
    lua_rawgeti(L, -1, (int)j);
    t = lua_type(L, -1);
    if (t == LUA_TTABLE) {
      lua_pushvalue(L, KEY_ID);
      lua_rawget(L, -2);
      t = lua_type(L, -1);
      if (t != LUA_TSTRING && t != LUA_TNUMBER)
        luaL_error(L, FNAME ": run['%s'][%d].id must be a string or a number, got %s", q,
                   (int)j, luaL_typename(L, -1));
      lua_pop(L, 1);
    } else if (t != LUA_TSTRING && t != LUA_TNUMBER) {
      luaL_error(L, FNAME ": run['%s'][%d] must be a hit { id = } or an id, got %s", q, (int)j,
                 luaL_typename(L, -1));
    }
    lua_pop(L, 1);
  }
}

/* Raises unless the judgements on top map ids to finite numbers; their count. */
static size_t check_qrels(lua_State *L, const char *q) {
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    int kt = lua_type(L, -2);
    if (kt != LUA_TSTRING && kt != LUA_TNUMBER)
      luaL_error(L, FNAME ": qrels['%s'] keys must be document ids (strings or numbers), got %s",
                 q, luaL_typename(L, -2));
    if (lua_type(L, -1) != LUA_TNUMBER || !isfinite(lua_tonumber(L, -1))) {
      const char *got = lua_type(L, -1) == LUA_TNUMBER ? "a non-finite number"
                                                        : luaL_typename(L, -1);
      luaL_error(L, FNAME ": qrels['%s']['%s'] must be a finite number, got %s", q, push_key(L),
                 got);
    }
    lua_pop(L, 1);
    n++;
  }
  return n;
}

/* {====== Queries ======} */

/* Checks every list and judgement; fills INC with the queries evaluated. */
static void select_queries(lua_State *L, int zero) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, RMAP) != 0) {
    check_run(L, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  lua_pushnil(L);
  while (lua_next(L, QMAP) != 0) {
    check_qrels(L, lua_tostring(L, -2));
    lua_pushvalue(L, -2);
    lua_rawget(L, RMAP);
    if (zero || !lua_isnil(L, -1)) { /* judged and run; with zero, judged only too */
      lua_pushvalue(L, -3);
      lua_rawseti(L, INC, ++n);
    }
    lua_pop(L, 2);
  }
}

/* What the evaluated queries are read into: the parts of one userdata. */
typedef struct input {
  rag_eval_query *q;
  size_t nq, nm;
  double *per, *mean, *grades;
  const char **ids;
  size_t *lens;
} input;

/* Adds n elements of size bytes to *total; raises when a size overflows. */
static void add_size(lua_State *L, size_t *total, size_t n, size_t size) {
  if (RAG_MUL_OVERFLOWS(n, size) || n * size > ((size_t)-1) - 16 - *total)
    luaL_error(L, FNAME ": too many hits");
  *total += n * size;
}

/* Sizes the userdata for INC's queries and pushes it. */
static void alloc_input(lua_State *L, input *in) {
  size_t i, nids = 0, ngrades = 0, bytes = 0;
  char *p;
  in->nq = lua_rawlen(L, INC);
  for (i = 1; i <= in->nq; i++) {
    size_t nrun = 0, nj;
    lua_rawgeti(L, INC, (int)i);
    lua_pushvalue(L, -1);
    lua_rawget(L, RMAP);
    if (lua_istable(L, -1)) nrun = lua_rawlen(L, -1);
    lua_pop(L, 1);
    lua_rawget(L, QMAP);
    nj = check_qrels(L, "");
    lua_pop(L, 1);
    if (nrun > 0x7fffffff || nj > 0x7fffffff || nids > ((size_t)-1) / 64 - nrun - nj)
      luaL_error(L, FNAME ": too many hits");
    nids += nrun + nj;
    ngrades += nj;
  }
  if (RAG_MUL_OVERFLOWS(in->nq, in->nm)) luaL_error(L, FNAME ": too many hits");
  /* doubles first, then the queries, then pointers and lengths: each part stays aligned */
  add_size(L, &bytes, in->nq * in->nm + in->nm + ngrades, sizeof(double));
  add_size(L, &bytes, in->nq, sizeof(rag_eval_query));
  add_size(L, &bytes, nids, sizeof(char *) + sizeof(size_t));
  p = (char *)lua_newuserdatauv(L, bytes + 1, 0);
  in->per = (double *)(void *)p;
  in->mean = in->per + in->nq * in->nm;
  in->grades = in->mean + in->nm;
  in->q = (rag_eval_query *)(void *)(in->grades + ngrades);
  in->ids = (const char **)(void *)(in->q + in->nq);
  in->lens = (size_t *)(void *)(in->ids + nids);
}

/* Reads the hit list on top (or nil: none) into q, from the arrays' cursors. */
static void fill_run(lua_State *L, rag_eval_query *q, input *in) {
  size_t j;
  q->run = in->ids;
  q->runlens = in->lens;
  q->nrun = lua_istable(L, -1) ? lua_rawlen(L, -1) : 0;
  for (j = 0; j < q->nrun; j++) {
    int t;
    lua_rawgeti(L, -1, (int)j + 1);
    if (lua_type(L, -1) == LUA_TTABLE) {
      lua_pushvalue(L, KEY_ID);
      lua_rawget(L, -2);
      lua_remove(L, -2);
    }
    t = lua_type(L, -1);
    in->ids[j] = lua_tolstring(L, -1, &in->lens[j]); /* a number becomes a new string */
    if (t == LUA_TNUMBER) lua_rawseti(L, ANCHOR, (int)lua_rawlen(L, ANCHOR) + 1);
    else lua_pop(L, 1); /* a string stays anchored by its hit or list */
  }
  in->ids += q->nrun;
  in->lens += q->nrun;
}

/* Reads the judgements on top into q, from the arrays' cursors. */
static void fill_qrels(lua_State *L, rag_eval_query *q, input *in) {
  size_t j = 0;
  q->docs = in->ids;
  q->doclens = in->lens;
  q->grades = in->grades;
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    in->grades[j] = lua_tonumber(L, -1);
    if (lua_type(L, -2) == LUA_TSTRING) {
      in->ids[j] = lua_tolstring(L, -2, &in->lens[j]); /* anchored by qrels */
    } else {
      push_key(L);
      in->ids[j] = lua_tolstring(L, -1, &in->lens[j]);
      lua_rawseti(L, ANCHOR, (int)lua_rawlen(L, ANCHOR) + 1);
    }
    lua_pop(L, 1);
    j++;
  }
  q->ndocs = j;
  in->ids += j;
  in->lens += j;
  in->grades += j;
}

static void fill_input(lua_State *L, input *in) {
  size_t i;
  for (i = 0; i < in->nq; i++) {
    rag_eval_query *q = &in->q[i];
    lua_rawgeti(L, INC, (int)i + 1);
    q->id = lua_tolstring(L, -1, &q->idlen); /* anchored by INC */
    lua_pushvalue(L, -1);
    lua_rawget(L, RMAP);
    fill_run(L, q, in);
    lua_pop(L, 1);
    lua_rawget(L, QMAP);
    fill_qrels(L, q, in);
    lua_pop(L, 1);
  }
}

/* {====== rag.eval.ir ======} */

static void push_row(lua_State *L, const double *v, size_t nm) {
  size_t j;
  lua_createtable(L, 0, nm > 0x7fffffff ? 0 : (int)nm);
  for (j = 0; j < nm; j++) {
    lua_rawgeti(L, MEASURES, (int)j + 1);
    lua_pushnumber(L, v[j]);
    lua_rawset(L, -3);
  }
}

static int eval_ir(lua_State *L) {
  options o;
  input in;
  size_t bad, i;
  int rc;
  if (!lua_istable(L, RUN))
    luaL_error(L, FNAME ": run must be a table, got %s", luaL_typename(L, RUN));
  if (!lua_istable(L, QRELS))
    luaL_error(L, FNAME ": qrels must be a table, got %s", luaL_typename(L, QRELS));
  read_opts(L, &o);
  lua_settop(L, OPTS);
  read_measures(L, &in.nm);
  by_string(L, RUN, "run");
  by_string(L, QRELS, "qrels");
  lua_newtable(L);
  lua_newtable(L);
  lua_pushliteral(L, "id");
  select_queries(L, o.zero);
  alloc_input(L, &in);
  fill_input(L, &in);
  rc = rag_eval_ir(in.q, in.nq, (const rag_eval_measure *)lua_touserdata(L, MBOX), in.nm, o.level,
                   in.per, in.mean, &bad);
  if (rc == RAG_EINVAL && bad < in.nq)
    return lrag_error(L, rc, FNAME, "qrels['%s'] has a document twice (as a number and a string)",
                      in.q[bad].id);
  if (rc != RAG_OK) return lrag_error(L, rc, FNAME, rc == RAG_ENOMEM ? NULL : "too many hits");
  push_row(L, in.mean, in.nm);
  if (!o.per_query) return 1;
  lua_createtable(L, 0, in.nq > 0x7fffffff ? 0 : (int)in.nq);
  for (i = 0; i < in.nq; i++) {
    lua_pushlstring(L, in.q[i].id, in.q[i].idlen);
    push_row(L, in.per + i * in.nm, in.nm);
    lua_rawset(L, -3);
  }
  return 2;
}

int lrag_open_eval(lua_State *L) {
  static const luaL_Reg fns[] = {{"ir", eval_ir}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
