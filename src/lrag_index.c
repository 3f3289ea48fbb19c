/*
** lrag_index.c: rag.core.index, the C half of rag.index (lua/rag/index.lua
** does the options, embedding, batches and manifests). new(bm25, vectors)
** takes over a rag.bm25 and a rag.vec or rag.hnsw; open{...} loads the
** parts of a save; order(list) sorts documents. Methods: stage, chunk,
** commit, remove, get, ids, search, stats, shape, save, check, close, #ix.
*/
#include "lrag.h"

#include <math.h>
#include <string.h>

#include "lrag_vec.h"
#include "rag.h"
#include "rag_digest.h"
#include "rag_analyzer.h"
#include "rag_chunk.h"
#include "rag_file.h"
#include "rag_fnv.h"
#include "rag_index.h"

#define MT "rag._index" /* internal: rag.index is the public class */

enum { PART_STORE, PART_BM25, PART_VECTORS, NPARTS };

typedef struct lindex {
  rag_index *ix;       /* NULL once closed */
  void *map[NPARTS];   /* the read-only mappings the parts borrow, or NULL */
  size_t maplen[NPARTS];
} lindex;

static void unmap_all(lindex *x) {
  int i;
  for (i = 0; i < NPARTS; i++) {
    rag_file_unmap(x->map[i], x->maplen[i]);
    x->map[i] = NULL;
  }
}

static void index_fin(void *u) {
  lindex *x = (lindex *)u;
  rag_index_free(x->ix); /* first: the parts borrow the mappings */
  unmap_all(x);
}

static const lrag_class index_class;

static lindex *check_open(lua_State *L, const char *fname) {
  return (lindex *)lrag_checkobject(L, 1, &index_class, fname);
}

/* {====== Metadata: Lua tables <-> the encoding of rag_store.h ======} */

typedef struct mkey {
  const char *s;
  size_t len;
  int idx; /* the key's place on the Lua stack's key list */
} mkey;

static int mkey_cmp(const void *a, const void *b) {
  const mkey *x = (const mkey *)a, *y = (const mkey *)b;
  int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
  if (c != 0) return c;
  return x->len < y->len ? -1 : x->len > y->len;
}

static void put_varint(lua_State *L, lrag_buf *b, uint64_t v) {
  unsigned char t[10];
  lrag_buf_add(L, b, (const char *)t, rag_put_varint(t, v));
}

static void put_str(lua_State *L, lrag_buf *b, const char *s, size_t n) {
  put_varint(L, b, n);
  lrag_buf_add(L, b, s, n);
}

/* Encodes the value on top of the stack (key names it in errors). */
static void encode_value(lua_State *L, lrag_buf *b, const char *fname, const char *key) {
  int t = lua_type(L, -1);
  size_t n, i;
  if (t == LUA_TSTRING) {
    const char *s = lua_tolstring(L, -1, &n);
    lrag_buf_addc(L, b, RAG_META_STRING);
    put_str(L, b, s, n);
  } else if (t == LUA_TNUMBER) {
    if (lua_isinteger(L, -1)) {
      int64_t v = (int64_t)lua_tointeger(L, -1);
      lrag_buf_addc(L, b, RAG_META_INT);
      put_varint(L, b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
    } else {
      double d = (double)lua_tonumber(L, -1);
      unsigned char x[8];
      uint64_t u;
      if (!isfinite(d)) luaL_error(L, "%s: meta.%s must be a finite number", fname, key);
      memcpy(&u, &d, 8);
      for (i = 0; i < 8; i++) x[i] = (unsigned char)(u >> (8 * i));
      lrag_buf_addc(L, b, RAG_META_NUMBER);
      lrag_buf_add(L, b, (const char *)x, 8);
    }
  } else if (t == LUA_TBOOLEAN) {
    lrag_buf_addc(L, b, lua_toboolean(L, -1) ? RAG_META_TRUE : RAG_META_FALSE);
  } else if (t == LUA_TTABLE) {
    n = (size_t)lua_rawlen(L, -1);
    lua_pushnil(L);
    i = 0;
    while (lua_next(L, -2)) { /* a list: keys exactly 1..n */
      lua_pop(L, 1);
      i++;
    }
    if (i != n) luaL_error(L, "%s: meta.%s must be a list of strings", fname, key);
    lrag_buf_addc(L, b, RAG_META_LIST);
    put_varint(L, b, n);
    for (i = 1; i <= n; i++) {
      const char *s;
      size_t len;
      lua_rawgeti(L, -1, (int)i);
      if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "%s: meta.%s must be a list of strings, item %d is %s", fname, key,
                   (int)i, luaL_typename(L, -1));
      s = lua_tolstring(L, -1, &len);
      put_str(L, b, s, len);
      lua_pop(L, 1);
    }
  } else {
    luaL_error(L, "%s: meta.%s must be a string, number, boolean or list of strings, got %s",
               fname, key, luaL_typename(L, -1));
  }
}

/* Appends the encoding of the meta table at idx (or of nothing: nil) to b. */
static void encode_meta(lua_State *L, int idx, const char *fname, lrag_buf *b) {
  mkey *keys;
  size_t n = 0, i;
  int list;
  idx = lua_absindex(L, idx);
  if (lua_isnil(L, idx)) {
    lrag_buf_addc(L, b, 0);
    return;
  }
  if (!lua_istable(L, idx))
    luaL_error(L, "%s: document meta must be a table, got %s", fname, luaL_typename(L, idx));
  lua_newtable(L); /* the keys, anchored */
  list = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: document meta keys must be strings, got %s", fname,
                 luaL_typename(L, -1));
    lua_pushvalue(L, -1);
    lua_rawseti(L, list, (int)++n);
  }
  keys = (mkey *)lua_newuserdatauv(L, (n + 1) * sizeof *keys, 0);
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, list, (int)i + 1);
    keys[i].s = lua_tolstring(L, -1, &keys[i].len);
    keys[i].idx = (int)i + 1;
    lua_pop(L, 1);
  }
  qsort(keys, n, sizeof *keys, mkey_cmp);
  put_varint(L, b, n);
  for (i = 0; i < n; i++) {
    put_str(L, b, keys[i].s, keys[i].len);
    lua_rawgeti(L, list, keys[i].idx);
    lua_rawget(L, idx);
    encode_value(L, b, fname, keys[i].s);
    lua_pop(L, 1);
  }
  lua_pop(L, 2); /* keys, list */
}

static void push_value(lua_State *L, const rag_meta_value *v) {
  switch (v->type) {
    case RAG_META_STRING:
      lua_pushlstring(L, v->s, v->len);
      break;
    case RAG_META_INT:
      lua_pushinteger(L, (lua_Integer)v->i);
      break;
    case RAG_META_NUMBER:
      lua_pushnumber(L, v->num);
      break;
    case RAG_META_FALSE:
    case RAG_META_TRUE:
      lua_pushboolean(L, v->type == RAG_META_TRUE);
      break;
    default: {
      rag_reader r = v->list;
      const char *s;
      size_t n, i = 0;
      lua_createtable(L, (int)v->len, 0);
      while (rag_r_str(&r, &s, &n)) {
        lua_pushlstring(L, s, n);
        lua_rawseti(L, -2, (int)++i);
      }
    }
  }
}

static void push_meta(lua_State *L, const rag_store_doc *d) {
  rag_meta_iter it;
  const char *k;
  size_t kl;
  rag_meta_value v;
  lua_newtable(L);
  rag_meta_begin(&it, d->meta, d->metalen);
  while (rag_meta_next(&it, &k, &kl, &v)) {
    lua_pushlstring(L, k, kl);
    push_value(L, &v);
    lua_rawset(L, -3);
  }
}

/* {====== Documents ======} */

/*
** Adding documents goes by batches, in three calls: stage reads documents
** and keeps those whose content hash differs from the live one's; chunk
** cuts them (and gives the texts to embed); commit puts them with their
** vectors. A batch is a table: at 1 a userdata that owns the scratch
** memory, then the documents' strings, anchored there so that they stay
** valid whatever Lua code runs between the calls (an embedder, a Lua
** chunker). A table rather than user values, which Lua 5.1 lacks.
*/
#define BATCH_MT "rag._batch"

/* A staged document: pointers into anchored strings; meta and chunks as offsets. */
typedef struct staged {
  rag_store_doc d;
  size_t meta;  /* its encoded metadata at this offset of the batch's meta */
  size_t chunk; /* its d.nchunks chunks from this one of the batch's chunks */
  int existed;  /* a live document had its id when it was staged */
} staged;

typedef struct batch {
  staged *docs;
  size_t n, cap;
  lrag_buf meta;           /* the documents' encoded metadata, end to end */
  rag_store_chunk *chunks; /* the documents' chunks, end to end */
  size_t nchunks, chunkcap;
  float *vecs; /* one document's vectors at commit */
  size_t vecscap;
  int state; /* 0 staged, 1 chunked, 2 committed */
} batch;

/* Frees a batch's buffers; its state stays (a committed batch is spent). */
static void batch_release(batch *b) {
  int state = b->state;
  rag_free(b->docs);
  rag_free(b->meta.p);
  rag_free(b->chunks);
  rag_free(b->vecs);
  memset(b, 0, sizeof *b);
  b->state = state;
}

static int batch_gc(lua_State *L) {
  batch_release((batch *)luaL_checkudata(L, 1, BATCH_MT));
  return 0;
}

/* Pushes a new, empty batch: its table, with room for narr strings. */
static batch *new_batch(lua_State *L, int narr) {
  batch *b;
  lua_createtable(L, narr + 1, 0);
  b = (batch *)lua_newuserdatauv(L, sizeof *b, 0);
  memset(b, 0, sizeof *b);
  if (luaL_newmetatable(L, BATCH_MT)) {
    lua_pushcfunction(L, batch_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  lua_rawseti(L, -2, 1);
  return b;
}

/* The batch whose table is at idx, in `state`. */
static batch *check_batch(lua_State *L, int idx, int state, const char *fname) {
  batch *b;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_rawgeti(L, idx, 1);
  b = (batch *)luaL_checkudata(L, -1, BATCH_MT);
  lua_pop(L, 1); /* the table anchors it */
  if (b->state != state) luaL_error(L, "%s: batch used out of order", fname);
  return b;
}

/* Room for one more staged document. */
static staged *next_staged(lua_State *L, batch *b) {
  if (b->n == b->cap) {
    staged *v = (staged *)rag_grow(b->docs, &b->cap, b->n + 1, sizeof *v);
    if (v == NULL) luaL_error(L, "not enough memory");
    b->docs = v;
  }
  return &b->docs[b->n];
}

/* Room for n more chunks; returns the first. */
static rag_store_chunk *more_chunks(lua_State *L, batch *b, size_t n) {
  /* the array exists even for documents without chunks: b->chunks + k is
     taken for each document (NULL + 0 is undefined) */
  if (b->chunks == NULL || n > b->chunkcap - b->nchunks) {
    rag_store_chunk *v;
    if (b->nchunks + n + 1 < n) luaL_error(L, "not enough memory");
    v = (rag_store_chunk *)rag_grow(b->chunks, &b->chunkcap, b->nchunks + (n > 0 ? n : 1),
                                    sizeof *v);
    if (v == NULL) luaL_error(L, "not enough memory");
    b->chunks = v;
  }
  return b->chunks + b->nchunks;
}

/* Whether the value on top is one of the document's field names. */
static int known_field(lua_State *L) {
  static const char *const fields[] = {"id", "text", "source", "title", "meta", NULL};
  const char *k;
  int i;
  if (lua_type(L, -1) != LUA_TSTRING) return 0;
  k = lua_tostring(L, -1);
  for (i = 0; fields[i] != NULL; i++)
    if (strcmp(k, fields[i]) == 0) return 1;
  return 0;
}

/* doc[field] (at idx) when it is a string or nil, else raises; 1 and pushed: a string. */
static int opt_field(lua_State *L, int idx, const char *field, const char *fname) {
  lua_getfield(L, idx, field);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "%s: document %s must be a string, got %s", fname, field, luaL_typename(L, -1));
  return 1;
}

/*
** Reads the document table at idx into *d, its strings (the id, a number's
** string) anchored in the table at `anchor` from slot `at` on, its metadata
** encoded at the end of `meta` (*moff its offset).
*/
static void read_doc(lua_State *L, int idx, const char *fname, rag_store_doc *d, int anchor,
                     int at, lrag_buf *meta, size_t *moff) {
  int t;
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    luaL_error(L, "%s: document must be a table, got %s", fname, luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (!known_field(L)) {
      lua_pushfstring(L, "%s: document has an unknown field '%s'", fname,
                      lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                     : luaL_typename(L, -1));
      lua_error(L);
    }
  }
  memset(d, 0, sizeof *d);
  lua_getfield(L, idx, "id");
  t = lua_type(L, -1);
  if (t != LUA_TSTRING && t != LUA_TNUMBER)
    luaL_error(L, "%s: document id must be a string or a number, got %s", fname,
               luaL_typename(L, -1));
  d->id = lua_tolstring(L, -1, &d->idlen); /* a number becomes its string in place */
  lua_rawseti(L, anchor, at);
  lua_getfield(L, idx, "text");
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "%s: document text must be a string, got %s", fname, luaL_typename(L, -1));
  d->text = lua_tolstring(L, -1, &d->textlen);
  lua_rawseti(L, anchor, at + 1);
  if ((d->has_source = opt_field(L, idx, "source", fname)) != 0) {
    d->source = lua_tolstring(L, -1, &d->sourcelen);
    lua_rawseti(L, anchor, at + 2);
  }
  if ((d->has_title = opt_field(L, idx, "title", fname)) != 0) {
    d->title = lua_tolstring(L, -1, &d->titlelen);
    lua_rawseti(L, anchor, at + 3);
  }
  *moff = meta->len;
  lua_getfield(L, idx, "meta");
  encode_meta(L, -1, fname, meta);
  lua_pop(L, 1);
  d->meta = (const unsigned char *)meta->p + *moff; /* until meta grows again */
  d->metalen = meta->len - *moff;
}

/*
** ix:stage(list, pos, limit, fname) -> consumed, unchanged, batch | nil:
** reads list[pos], list[pos + 1], ... and stages those whose content hash
** differs from the live document's, until `limit` are staged or the list
** ends; consumed is how many it read, unchanged how many it skipped.
*/
static int index_stage(lua_State *L) {
  lindex *x = check_open(L, "rag.index.add");
  rag_store *s = rag_index_store(x->ix);
  lua_Integer pos = luaL_checkinteger(L, 3), last, i;
  size_t limit = (size_t)luaL_checkinteger(L, 4), unchanged = 0;
  const char *fname = luaL_checkstring(L, 5);
  int anchor;
  batch *b;
  luaL_checktype(L, 2, LUA_TTABLE);
  last = (lua_Integer)lua_rawlen(L, 2);
  b = new_batch(L, limit < 1024 ? 4 * (int)limit : 4096);
  anchor = lua_gettop(L);
  for (i = pos; i <= last && b->n < limit; i++) {
    staged *st = next_staged(L, b);
    uint32_t slot;
    const rag_store_doc *live;
    lua_rawgeti(L, 2, i);
    read_doc(L, -1, fname, &st->d, anchor, (int)b->n * 4 + 2, &b->meta, &st->meta);
    lua_pop(L, 1);
    if (rag_index_hash(&st->d, st->d.hash) != RAG_OK) luaL_error(L, "not enough memory");
    x = check_open(L, "rag.index.add"); /* a metamethod of a document may have closed it */
    s = rag_index_store(x->ix);
    slot = rag_store_find(s, st->d.id, st->d.idlen);
    live = slot != RAG_IDS_NONE ? rag_store_doc_at(s, slot) : NULL;
    if (live != NULL && memcmp(live->hash, st->d.hash, 32) == 0) {
      unchanged++;
      b->meta.len = st->meta; /* its strings stay anchored until the next is staged */
      continue;
    }
    st->existed = live != NULL;
    b->n++;
  }
  lua_pushinteger(L, i - pos);
  lua_pushinteger(L, (lua_Integer)unchanged);
  if (b->n == 0) lua_pushnil(L);
  else lua_pushvalue(L, anchor);
  return 3;
}

/* A document's id and place in the list given to order. */
typedef struct keyed {
  const char *id;
  size_t len;
  size_t i;
} keyed;

static int keyed_cmp(const void *a, const void *b) {
  const keyed *x = (const keyed *)a, *y = (const keyed *)b;
  int c = memcmp(x->id, y->id, x->len < y->len ? x->len : y->len);
  if (c != 0) return c;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/*
** rag.core.index.order(list, fname) -> docs, ids: the documents of the
** list in the canonical order, by id bytewise (Lua's < in the C locale),
** the last of those with one id only; and their ids as strings.
*/
static int index_order(lua_State *L) {
  const char *fname = luaL_checkstring(L, 2);
  size_t n, i, m = 0;
  keyed *k;
  int ids;
  luaL_checktype(L, 1, LUA_TTABLE);
  n = (size_t)lua_rawlen(L, 1);
  k = (keyed *)lua_newuserdatauv(L, (n + 1) * sizeof *k, 0);
  lua_createtable(L, (int)n, 0); /* the ids, anchored; then the result's */
  ids = lua_gettop(L);
  for (i = 0; i < n; i++) {
    int t;
    lua_rawgeti(L, 1, (lua_Integer)i + 1);
    if (!lua_istable(L, -1))
      luaL_error(L, "%s: document %d must be a table, got %s", fname, (int)i + 1,
                 luaL_typename(L, -1));
    lua_getfield(L, -1, "id");
    t = lua_type(L, -1);
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
      luaL_error(L, "%s: document id must be a string or a number, got %s", fname,
                 luaL_typename(L, -1));
    k[i].id = lua_tolstring(L, -1, &k[i].len); /* a number becomes its string in place */
    k[i].i = i;
    lua_rawseti(L, ids, (lua_Integer)i + 1);
    lua_pop(L, 1);
  }
  qsort(k, n, sizeof *k, keyed_cmp);
  lua_createtable(L, (int)n, 0);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    if (i + 1 < n && k[i + 1].len == k[i].len && memcmp(k[i + 1].id, k[i].id, k[i].len) == 0)
      continue; /* a later document has this id */
    m++;
    lua_rawgeti(L, 1, (lua_Integer)k[i].i + 1);
    lua_rawseti(L, -3, (lua_Integer)m);
    lua_rawgeti(L, ids, (lua_Integer)k[i].i + 1);
    lua_rawseti(L, -2, (lua_Integer)m);
  }
  return 2;
}

/* The error of a chunker failing on document d: nil, "fname: document 'id': msg", code. */
static int chunk_error(lua_State *L, const char *fname, const rag_store_doc *d, int msg,
                       int code) {
  lua_pushnil(L);
  lua_pushfstring(L, "%s: document '", fname);
  lua_pushlstring(L, d->id, d->idlen);
  lua_pushliteral(L, "': ");
  luaL_tolstring(L, msg, NULL);
  lua_concat(L, 4);
  lua_pushvalue(L, code);
  return 3;
}

/* Appends n chunks of a rag.chunk C chunker as store chunks (1-based, inclusive). */
static void add_chunks(lua_State *L, batch *b, const rag_chunk *c, size_t n, int tree,
                       const char *fname) {
  rag_store_chunk *out = more_chunks(L, b, n);
  size_t i;
  for (i = 0; i < n; i++) {
    if (c[i].stop > UINT32_MAX || c[i].size > UINT32_MAX)
      luaL_error(L, "%s: chunk %d has no valid 'stop'", fname, (int)i + 1);
    out[i].start = (uint32_t)c[i].start + 1;
    out[i].stop = (uint32_t)c[i].stop;
    out[i].tokens = (uint32_t)c[i].size;
    out[i].parent = tree ? (uint32_t)c[i].parent : 0;
    out[i].level = tree ? (uint32_t)c[i].level : 0;
    out[i].leaf = 0;
  }
  b->nchunks += n;
}

/* Appends the chunk list at idx (a chunker's output) as store chunks; returns their count. */
static size_t read_chunks(lua_State *L, int idx, const char *fname, batch *b) {
  rag_store_chunk *c;
  size_t i, n;
  idx = lua_absindex(L, idx);
  n = lrag_checklist(L, idx, fname, "chunks must be a list of chunks");
  c = more_chunks(L, b, n);
  for (i = 0; i < n; i++) {
    lua_Integer v[5] = {0, 0, 0, 0, 0};
    static const char *const keys[] = {"start", "stop", "tokens"};
    int k;
    lua_rawgeti(L, idx, (int)i + 1);
    if (!lua_istable(L, -1))
      luaL_error(L, "%s: chunk %d must be a table, got %s", fname, (int)i + 1,
                 luaL_typename(L, -1));
    for (k = 0; k < 3; k++) {
      lua_getfield(L, -1, keys[k]);
      if (!lua_isnumber(L, -1) || lua_tonumber(L, -1) < 0 || lua_tonumber(L, -1) > UINT32_MAX)
        luaL_error(L, "%s: chunk %d has no valid '%s'", fname, (int)i + 1, keys[k]);
      v[k] = (lua_Integer)lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    lua_getfield(L, -1, "meta");
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "parent");
      v[3] = lua_isnumber(L, -1) ? (lua_Integer)lua_tonumber(L, -1) : 0;
      lua_getfield(L, -2, "level");
      v[4] = lua_isnumber(L, -1) ? (lua_Integer)lua_tonumber(L, -1) : 0;
      lua_pop(L, 2);
    }
    lua_pop(L, 2);
    if (v[3] < 0 || v[3] > (lua_Integer)i || v[4] < 0 || v[4] > UINT32_MAX)
      luaL_error(L, "%s: chunk %d has a bad parent or level", fname, (int)i + 1);
    c[i].start = (uint32_t)v[0];
    c[i].stop = (uint32_t)v[1];
    c[i].tokens = (uint32_t)v[2];
    c[i].parent = (uint32_t)v[3];
    c[i].level = (uint32_t)v[4];
    c[i].leaf = 0;
  }
  b->nchunks += n;
  return n;
}

/* Marks leaves of an input chunk list (no chunk names them as parent); returns their count. */
static size_t leaves_of(rag_store_chunk *c, size_t n) {
  size_t i, m = 0;
  for (i = 0; i < n; i++) c[i].leaf = 1;
  for (i = 0; i < n; i++)
    if (c[i].parent > 0 && c[i].parent <= n) c[c[i].parent - 1].leaf = 0;
  for (i = 0; i < n; i++) m += c[i].leaf;
  return m;
}

/* Appends to the table on top the texts BM25 and the embedder see, one per leaf chunk. */
static void push_texts(lua_State *L, const batch *b, const char *fname) {
  size_t k, i, m = 0;
  for (k = 0; k < b->n; k++) {
    const rag_store_doc *d = &b->docs[k].d;
    const rag_store_chunk *c = b->chunks + b->docs[k].chunk;
    for (i = 0; i < d->nchunks; i++) {
      luaL_Buffer lb;
      if (!c[i].leaf) continue;
      if (c[i].start < 1 || c[i].stop < c[i].start || c[i].stop > d->textlen)
        luaL_error(L, "%s: chunk %d is out of the text", fname, (int)i + 1);
      luaL_buffinit(L, &lb);
      if (d->has_title && d->titlelen > 0) {
        luaL_addlstring(&lb, d->title, d->titlelen);
        luaL_addchar(&lb, '\n');
      }
      luaL_addlstring(&lb, d->text + c[i].start - 1, c[i].stop - c[i].start + 1);
      luaL_pushresult(&lb);
      lua_rawseti(L, -2, (int)++m);
    }
  }
}

/*
** ix:chunk(batch, chunker, opts, fname, texts) -> true | texts | nil, msg, code:
** cuts each staged document with chunker(text, opts) (a rag.chunk function
** runs in C, without building its chunk tables); with `texts`, returns the
** texts to embed, one per leaf chunk in order.
*/
static int index_chunk(lua_State *L) {
  batch *b;
  const char *fname = luaL_checkstring(L, 5);
  lrag_chunker *k;
  size_t i;
  int anchor;
  (void)check_open(L, "rag.index.add");
  b = check_batch(L, 2, 0, fname);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  lua_settop(L, 6);
  anchor = 2;
  b->nchunks = 0;
  k = lrag_chunker_new(L, 3, 4);
  for (i = 0; i < b->n; i++) {
    staged *st = &b->docs[i];
    st->chunk = b->nchunks;
    if (k != NULL) {
      const rag_chunk *c;
      size_t n, errpos;
      int rc = lrag_chunker_run(k, st->d.text, st->d.textlen, &c, &n, &errpos);
      if (rc != RAG_OK) {
        lrag_texterror(L, rc, lrag_chunker_fname(k), errpos); /* raises unless the world failed */
        return chunk_error(L, fname, &st->d, lua_gettop(L) - 1, lua_gettop(L));
      }
      add_chunks(L, b, c, n, lrag_chunker_tree(k), fname);
      st->d.nchunks = n;
    } else {
      int top = lua_gettop(L);
      lua_pushvalue(L, 3);
      lua_rawgeti(L, anchor, (int)i * 4 + 3); /* the text */
      lua_pushvalue(L, 4);
      lua_call(L, 2, 3);
      if (!lua_toboolean(L, top + 1)) return chunk_error(L, fname, &st->d, top + 2, top + 3);
      st->d.nchunks = read_chunks(L, top + 1, "rag.index.add", b);
      lua_settop(L, top);
    }
  }
  for (i = 0; i < b->n; i++) (void)leaves_of(b->chunks + b->docs[i].chunk, b->docs[i].d.nchunks);
  b->state = 1;
  if (!lua_toboolean(L, 6)) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_newtable(L);
  push_texts(L, b, "rag.index.add");
  return 1;
}

/* Room for n floats in b->vecs. */
static float *batch_vecs(lua_State *L, batch *b, size_t n) {
  float *v = (float *)rag_grow(b->vecs, &b->vecscap, n + 1, sizeof *v);
  if (v == NULL) luaL_error(L, "not enough memory");
  b->vecs = v;
  return v;
}

/*
** ix:commit(batch, vectors) -> added, updated | nil, msg, code: puts the
** chunked documents in order, with vectors one per leaf chunk of the batch
** (nil without vectors); a failure leaves the documents before in.
*/
static int index_commit(lua_State *L) {
  static const char *fname = "rag.index.add";
  lindex *x = check_open(L, fname);
  batch *b = check_batch(L, 2, 1, fname);
  size_t dim = rag_index_dim(x->ix), k, i, leaves = 0, at = 0, added = 0;
  if (dim > 0) {
    for (k = 0; k < b->n; k++)
      for (i = 0; i < b->docs[k].d.nchunks; i++) leaves += b->chunks[b->docs[k].chunk + i].leaf;
    if (leaves > 0 || !lua_isnoneornil(L, 3)) {
      size_t nv = lrag_checklist(L, 3, fname, "vectors must be a list of vectors");
      if (nv != leaves)
        luaL_error(L, "%s: %d vectors for %d leaf chunks", fname, (int)nv, (int)leaves);
    }
  }
  b->state = 2;
  for (k = 0; k < b->n; k++) {
    staged *st = &b->docs[k];
    rag_store_doc d = st->d;
    float *vecs = NULL;
    size_t errpos = 0, n;
    rag_vec_bad bad;
    int rc;
    d.meta = (const unsigned char *)b->meta.p + st->meta;
    d.chunks = b->chunks + st->chunk;
    if (dim > 0) {
      for (i = 0, n = 0; i < d.nchunks; i++) n += d.chunks[i].leaf;
      if (RAG_MUL_OVERFLOWS(n + 1, dim * sizeof(float))) luaL_error(L, "%s: too large", fname);
      vecs = batch_vecs(L, b, (n + 1) * dim);
      for (i = 0; i < n; i++) {
        lua_rawgeti(L, 3, (int)(at + i + 1));
        lrag_checkvector(L, lua_gettop(L), dim, fname, vecs + i * dim);
        lua_pop(L, 1);
      }
      at += n;
    }
    bad.why = NULL;
    bad.component = 0;
    rc = rag_index_put(x->ix, &d, vecs, &errpos, &bad);
    if (rc == RAG_EINVAL && bad.why == NULL)
      return luaL_error(L, "%s: document '%s': a chunk is out of its text", fname, d.id);
    if (rc == RAG_EINVAL || rc == RAG_ETOOBIG) return lrag_vecerror(L, rc, fname, dim, &bad);
    if (rc != RAG_OK) return lrag_texterror(L, rc, fname, errpos);
    added += !st->existed;
  }
  k = b->n;
  batch_release(b); /* now, not at the next collection: a bulk ingest's last trim sees it */
  lua_pushinteger(L, (lua_Integer)added);
  lua_pushinteger(L, (lua_Integer)(k - added));
  return 2;
}

/*
** ix:staged(batch) -> { { id=, hash=, meta=, chunks = { { start=, stop=,
** tokens=, leaf=, parent=, level= }, ... } }, ... }: a chunked batch's
** documents as the index would put them (hash as hex, meta as read back),
** for a store that keeps them elsewhere (rag.store.postgres); the batch
** stays chunked.
*/
static int index_staged(lua_State *L) {
  batch *b;
  size_t k, i;
  (void)check_open(L, "rag.index.staged");
  b = check_batch(L, 2, 1, "rag.index.staged");
  lua_createtable(L, (int)b->n, 0);
  for (k = 0; k < b->n; k++) {
    staged *st = &b->docs[k];
    rag_store_doc d = st->d;
    const rag_store_chunk *c = b->chunks + st->chunk;
    d.meta = (const unsigned char *)b->meta.p + st->meta;
    lua_createtable(L, 0, 4);
    lua_pushlstring(L, d.id, d.idlen);
    lua_setfield(L, -2, "id");
    lrag_pushhex(L, d.hash, sizeof d.hash);
    lua_setfield(L, -2, "hash");
    push_meta(L, &d);
    lua_setfield(L, -2, "meta");
    lua_createtable(L, (int)d.nchunks, 0);
    for (i = 0; i < d.nchunks; i++) {
      lua_createtable(L, 0, 6);
      lrag_setint(L, "start", (lua_Integer)c[i].start);
      lrag_setint(L, "stop", (lua_Integer)c[i].stop);
      lrag_setint(L, "tokens", (lua_Integer)c[i].tokens);
      lrag_setbool(L, "leaf", c[i].leaf);
      lrag_setint(L, "parent", (lua_Integer)c[i].parent);
      lrag_setint(L, "level", (lua_Integer)c[i].level);
      lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "chunks");
    lua_rawseti(L, -2, (int)k + 1);
  }
  return 1;
}

/*
** rag.core.index.hash(doc, fname) -> the hex SHA-256 content hash that add
** compares (text, title and meta); raises for a bad document as add does.
*/
static int index_hash(lua_State *L) {
  const char *fname = luaL_checkstring(L, 2);
  rag_store_doc d;
  size_t moff;
  batch *b;
  lua_settop(L, 2);
  b = new_batch(L, 4); /* owns the encoded meta; anchors the strings */
  read_doc(L, 1, fname, &d, 3, 2, &b->meta, &moff);
  if (rag_index_hash(&d, d.hash) != RAG_OK) return luaL_error(L, "not enough memory");
  lrag_pushhex(L, d.hash, sizeof d.hash);
  return 1;
}

static int index_remove(lua_State *L) {
  lindex *x = check_open(L, "rag.index.remove");
  size_t len;
  const char *id = lrag_checkid(L, 2, "rag.index.remove", &len);
  int removed, rc = rag_index_remove(x->ix, id, len, &removed);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.index.remove", NULL);
  lua_pushboolean(L, removed);
  return 1;
}

/* source, title (when the document has them) and meta into the table on top. */
static void set_provenance(lua_State *L, const rag_store_doc *d) {
  if (d->has_source) {
    lua_pushlstring(L, d->source, d->sourcelen);
    lua_setfield(L, -2, "source");
  }
  if (d->has_title) {
    lua_pushlstring(L, d->title, d->titlelen);
    lua_setfield(L, -2, "title");
  }
  push_meta(L, d);
  lua_setfield(L, -2, "meta");
}

static void push_doc(lua_State *L, const rag_store_doc *d) {
  lua_createtable(L, 0, 6);
  lua_pushlstring(L, d->id, d->idlen);
  lua_setfield(L, -2, "id");
  lua_pushlstring(L, d->text, d->textlen);
  lua_setfield(L, -2, "text");
  set_provenance(L, d);
  lrag_setint(L, "chunks", (lua_Integer)d->nchunks);
}

static int index_get(lua_State *L) {
  lindex *x = check_open(L, "rag.index.get");
  size_t len;
  const char *id = lrag_checkid(L, 2, "rag.index.get", &len);
  rag_store *s = rag_index_store(x->ix);
  uint32_t slot = rag_store_find(s, id, len);
  if (slot == RAG_IDS_NONE) return 0;
  push_doc(L, rag_store_doc_at(s, slot));
  return 1;
}

/* One chunk of d (0-based i) as a hit without score or ranks. */
static void push_chunk(lua_State *L, const rag_store_doc *d, size_t i) {
  const rag_store_chunk *c = &d->chunks[i];
  char num[24];
  lua_createtable(L, 0, 10);
  lua_pushlstring(L, d->id, d->idlen);
  snprintf(num, sizeof num, "#%u", (unsigned)(i + 1));
  lua_pushstring(L, num);
  lua_concat(L, 2);
  lua_setfield(L, -2, "id");
  lua_pushlstring(L, d->id, d->idlen);
  lua_setfield(L, -2, "doc_id");
  lua_pushlstring(L, d->text + c->start - 1, c->stop - c->start + 1);
  lua_setfield(L, -2, "text");
  set_provenance(L, d);
  lrag_setint(L, "start", (lua_Integer)c->start);
  lrag_setint(L, "stop", (lua_Integer)c->stop);
  lrag_setbool(L, "leaf", (int)c->leaf);
  if (c->level > 0) lrag_setint(L, "level", (lua_Integer)c->level);
  if (c->parent > 0) lrag_setint(L, "parent", (lua_Integer)c->parent);
}

/*
** ix:chunk(chunk_id) -> { id, doc_id, text, source, title, meta, start,
** stop, leaf, level?, parent? } | nil: a chunk by its name ("doc#n").
*/
static int index_chunk_get(lua_State *L) {
  lindex *x = check_open(L, "rag.index.chunk");
  size_t len;
  const char *id = lrag_checkid(L, 2, "rag.index.chunk", &len);
  rag_store *s = rag_index_store(x->ix);
  uint32_t slot, n;
  if (!rag_store_chunk_find(s, id, len, &slot, &n)) return 0;
  push_chunk(L, rag_store_doc_at(s, slot), n - 1);
  return 1;
}

/* ix:hash(doc_id) -> the content hash add compares (hex), or nil. */
static int index_hash_of(lua_State *L) {
  lindex *x = check_open(L, "rag.index.hash");
  size_t len;
  const char *id = lrag_checkid(L, 2, "rag.index.hash", &len);
  rag_store *s = rag_index_store(x->ix);
  uint32_t slot = rag_store_find(s, id, len);
  if (slot == RAG_IDS_NONE) return 0;
  lrag_pushhex(L, rag_store_doc_at(s, slot)->hash, RAG_STORE_HASH);
  return 1;
}

/* ix:chunks(doc_id) -> the document's chunks in order (as ix:chunk gives them) | nil. */
static int index_chunks(lua_State *L) {
  lindex *x = check_open(L, "rag.index.chunks");
  size_t len, i;
  const char *id = lrag_checkid(L, 2, "rag.index.chunks", &len);
  rag_store *s = rag_index_store(x->ix);
  uint32_t slot = rag_store_find(s, id, len);
  const rag_store_doc *d;
  if (slot == RAG_IDS_NONE) return 0;
  d = rag_store_doc_at(s, slot);
  lua_createtable(L, (int)d->nchunks, 0);
  for (i = 0; i < d->nchunks; i++) {
    push_chunk(L, d, i);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* ix:ids() -> every live document id, in no particular order. */
static int index_ids(lua_State *L) {
  lindex *x = check_open(L, "rag.index.ids");
  rag_store *s = rag_index_store(x->ix);
  size_t n = rag_store_count(s), i;
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    const rag_store_doc *d = rag_store_doc_at(s, (uint32_t)i);
    lua_pushlstring(L, d->id, d->idlen);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* ix:vectors(ids) -> { packed f32 string | false, ... }: the stored vector
** of each chunk id, as rag.vec.pack makes it (false for an id with none:
** not a leaf, or not there); nil when the index has no vectors. */
static int index_vectors(lua_State *L) {
  lindex *x = check_open(L, "rag.index.vectors");
  rag_vec *v = rag_index_vec(x->ix);
  rag_hnsw *h = rag_index_hnsw(x->ix);
  size_t dim = rag_index_dim(x->ix), n, i;
  float *out;
  luaL_checktype(L, 2, LUA_TTABLE);
  if (dim == 0 || (v == NULL && h == NULL)) return 0;
  n = lua_rawlen(L, 2);
  out = (float *)lua_newuserdata(L, dim * sizeof(float)); /* scratch, collected */
  lua_createtable(L, n > INT_MAX ? 0 : (int)n, 0);
  for (i = 1; i <= n; i++) {
    size_t len;
    const char *id;
    int found;
    lua_rawgeti(L, 2, (int)i);
    if (lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "rag.index.vectors: ids[%d] must be a string, got %s", (int)i,
                        luaL_typename(L, -1));
    id = lua_tolstring(L, -1, &len);
    found = v != NULL ? rag_vec_get(v, id, len, out) : rag_hnsw_get(h, id, len, out);
    lua_pop(L, 1);
    if (found) lrag_pushpacked(L, out, dim);
    else lua_pushboolean(L, 0);
    lua_rawseti(L, -2, (int)i);
  }
  return 1;
}

static int index_len(lua_State *L) {
  lindex *x = check_open(L, "rag.index.__len");
  lua_pushinteger(L, (lua_Integer)rag_store_count(rag_index_store(x->ix)));
  return 1;
}

static int index_stats(lua_State *L) {
  lindex *x = check_open(L, "rag.index.stats");
  rag_index *ix = x->ix;
  rag_store *s = rag_index_store(ix);
  size_t mem = rag_store_memory(s);
  rag_bm25_stats bs;
  rag_bm25_stats_get(rag_index_bm25(ix), &bs);
  if (rag_index_vec(ix) != NULL) mem += rag_vec_memory(rag_index_vec(ix));
  if (rag_index_hnsw(ix) != NULL) {
    rag_hnsw_stats hs;
    rag_hnsw_stats_get(rag_index_hnsw(ix), &hs);
    mem += hs.memory;
  }
  mem += bs.memory;
  lua_createtable(L, 0, 8);
  lrag_setint(L, "documents", (lua_Integer)rag_store_count(s));
  lrag_setint(L, "chunks", (lua_Integer)rag_store_chunks(s));
  lrag_setint(L, "leaves", (lua_Integer)rag_store_leaves(s));
  lrag_setint(L, "bytes", (lua_Integer)rag_store_bytes(s));
  lrag_setint(L, "terms", (lua_Integer)bs.terms);
  lrag_setint(L, "dim", (lua_Integer)rag_index_dim(ix));
  lrag_setstr(L, "vector", rag_index_vec(ix) ? "exact" : rag_index_hnsw(ix) ? "hnsw" : "none");
  lrag_setint(L, "memory", (lua_Integer)mem);
  lrag_setbool(L, "mapped", x->map[PART_STORE] != NULL);
  return 1;
}

/* ix:shape() -> vector ("exact", "hnsw" or "none"), leaves, dim: what stats says of them, cheaply. */
static int index_shape(lua_State *L) {
  lindex *x = check_open(L, "rag.index.stats");
  rag_index *ix = x->ix;
  lua_pushstring(L, rag_index_vec(ix) ? "exact" : rag_index_hnsw(ix) ? "hnsw" : "none");
  lua_pushinteger(L, (lua_Integer)rag_store_leaves(rag_index_store(ix)));
  lua_pushinteger(L, (lua_Integer)rag_index_dim(ix));
  return 3;
}

/* ix:attach(vectors): a rag.vec or rag.hnsw for an index without vectors or leaf chunks. */
static int index_attach(lua_State *L) {
  static const char *fname = "rag.index.attach";
  lindex *x = check_open(L, fname);
  rag_vec *v = NULL;
  rag_hnsw *h = NULL;
  if (rag_index_dim(x->ix) > 0 || rag_store_leaves(rag_index_store(x->ix)) > 0)
    luaL_error(L, "%s: the index already has vectors or chunks", fname);
  if (luaL_testudata(L, 2, "rag.vec") != NULL) v = lrag_takevec(L, 2, fname);
  else h = (rag_hnsw *)lrag_takeobject(L, 2, "rag.hnsw", fname);
  rag_index_attach(x->ix, v, h);
  return 0;
}

/* ix:to_hnsw(h): moves the exact vectors into the empty rag.hnsw h. */
static int index_to_hnsw(lua_State *L) {
  static const char *fname = "rag.index.to_hnsw";
  lindex *x = check_open(L, fname);
  void **u = (void **)luaL_checkudata(L, 2, "rag.hnsw");
  int rc;
  if (*u == NULL) luaL_error(L, "%s: the rag.hnsw is closed", fname);
  rc = rag_index_to_hnsw(x->ix, (rag_hnsw *)*u);
  if (rc == RAG_EINVAL) luaL_error(L, "%s: needs exact vectors and an empty rag.hnsw of their dim",
                                   fname);
  if (rc != RAG_OK) return lrag_error(L, rc, fname, NULL);
  *u = NULL; /* the index owns it now */
  return 0;
}

static int index_check(lua_State *L) {
  lindex *x = check_open(L, "rag.index.check");
  lua_pushboolean(L, rag_index_check(x->ix));
  return 1;
}

/* {====== Search ======} */

static const char *const mode_names[] = {"hybrid", "bm25", "vector", NULL};

/* One filter condition from the key/value pair on top of the stack. */
static void read_cond(lua_State *L, const char *fname, rag_filter_cond *c, int vidx) {
  const char *key = lua_tolstring(L, -2, &c->keylen);
  int t = lua_type(L, vidx);
  size_t n, i;
  rag_filter_value *v;
  c->key = key;
  c->range = 0;
  c->gte = -HUGE_VAL;
  c->lte = HUGE_VAL;
  if (t == LUA_TTABLE) {
    lua_getfield(L, vidx, "gte");
    lua_getfield(L, vidx, "lte");
    if (!lua_isnil(L, -1) || !lua_isnil(L, -2)) {
      lua_pushnil(L);
      while (lua_next(L, vidx)) {
        const char *rk = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        if ((strcmp(rk, "gte") != 0 && strcmp(rk, "lte") != 0) || lua_type(L, -1) != LUA_TNUMBER)
          luaL_error(L, "%s: filter.%s: a range is { gte = number, lte = number }", fname, key);
        lua_pop(L, 1);
      }
      c->range = 1;
      if (!lua_isnil(L, -2)) c->gte = (double)lua_tonumber(L, -2);
      if (!lua_isnil(L, -1)) c->lte = (double)lua_tonumber(L, -1);
      lua_pop(L, 2);
      c->any = NULL;
      c->nany = 0;
      return;
    }
    lua_pop(L, 2);
    n = (size_t)lua_rawlen(L, vidx);
    if (n == 0) luaL_error(L, "%s: filter.%s must be a value, a non-empty list or a range", fname, key);
  } else {
    n = 1;
  }
  v = (rag_filter_value *)lua_newuserdatauv(L, n * sizeof *v, 0); /* left on the stack */
  for (i = 0; i < n; i++) {
    int vt;
    if (t == LUA_TTABLE) lua_rawgeti(L, vidx, (int)i + 1);
    else lua_pushvalue(L, vidx);
    vt = lua_type(L, -1);
    if (vt == LUA_TSTRING) {
      v[i].type = RAG_META_STRING;
      v[i].s = lua_tolstring(L, -1, &v[i].len); /* anchored by the filter table */
    } else if (vt == LUA_TNUMBER) {
      v[i].type = RAG_META_NUMBER;
      v[i].num = (double)lua_tonumber(L, -1);
    } else if (vt == LUA_TBOOLEAN) {
      v[i].type = lua_toboolean(L, -1) ? RAG_META_TRUE : RAG_META_FALSE;
    } else {
      luaL_error(L, "%s: filter.%s: values must be strings, numbers or booleans, got %s", fname,
                 key, luaL_typename(L, -1));
    }
    lua_pop(L, 1);
  }
  c->any = v;
  c->nany = n;
}

/*
** opts.filter into *f (its arrays in userdata anchored in the table `anchor`);
** returns f, or NULL without a filter.
*/
static rag_store_filter *read_filter(lua_State *L, int opts, const char *fname,
                                     rag_store_filter *f, rag_id_filter *docs, int anchor) {
  int tbl, nconds = 0;
  rag_filter_cond *conds;
  if (!lrag_opttable(L, opts, fname, "filter")) return NULL;
  tbl = lua_gettop(L); /* anchored by opts */
  lua_pushnil(L);
  while (lua_next(L, tbl)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "%s: filter keys must be strings, got %s", fname, luaL_typename(L, -2));
    lua_pop(L, 1);
    nconds++;
  }
  conds = (rag_filter_cond *)lua_newuserdatauv(L, (size_t)(nconds + 1) * sizeof *conds, 0);
  lua_rawseti(L, anchor, 2);
  f->conds = conds;
  f->nconds = 0;
  f->docs = NULL;
  lua_pushnil(L);
  while (lua_next(L, tbl)) {
    if (strcmp(lua_tostring(L, -2), "doc_id") == 0) {
      const char **ids;
      size_t *lens;
      int t = lua_type(L, -1);
      if (t == LUA_TSTRING || t == LUA_TNUMBER) { /* one id: a list of one */
        lua_createtable(L, 1, 0);
        lua_pushvalue(L, -2);
        lua_rawseti(L, -2, 1);
        lua_replace(L, -2);
      }
      docs->n = lrag_checkfilter(L, -1, fname, &ids, &lens);
      docs->ids = ids;
      docs->lens = lens;
      lua_rawseti(L, anchor, 4); /* the arrays and their strings */
      lua_rawseti(L, anchor, 5);
      lua_pushvalue(L, -1);
      lua_rawseti(L, anchor, 6);
      f->docs = docs;
    } else {
      int top = lua_gettop(L);
      read_cond(L, fname, &conds[f->nconds], top);
      if (conds[f->nconds].nany > 0) { /* anchor the values */
        lua_rawseti(L, anchor, 10 + (int)f->nconds);
      }
      f->nconds++;
      lua_settop(L, top);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return f;
}

/* The span's text of a hit. */
static void push_hit(lua_State *L, rag_index *ix, const rag_index_hit *h) {
  rag_store *s = rag_index_store(ix);
  const rag_store_doc *d = rag_store_doc_at(s, h->doc);
  size_t nl;
  const char *name = rag_index_chunk_name(ix, h, &nl);
  if (name == NULL) luaL_error(L, "not enough memory");
  lua_createtable(L, 0, 11);
  lua_pushlstring(L, name, nl);
  lua_setfield(L, -2, "id");
  lua_pushlstring(L, d->id, d->idlen);
  lua_setfield(L, -2, "doc_id");
  lua_pushnumber(L, h->score);
  lua_setfield(L, -2, "score");
  lua_pushlstring(L, d->text + h->start - 1, h->stop - h->start + 1);
  lua_setfield(L, -2, "text");
  set_provenance(L, d);
  lrag_setint(L, "start", (lua_Integer)h->start);
  lrag_setint(L, "stop", (lua_Integer)h->stop);
  lua_createtable(L, 0, 2);
  if (h->rank_bm25 > 0) lrag_setint(L, "bm25", (lua_Integer)h->rank_bm25);
  if (h->rank_vec > 0) lrag_setint(L, "vector", (lua_Integer)h->rank_vec);
  if (h->rank_field[RAG_INDEX_KEYWORDS] > 0)
    lrag_setint(L, "keywords", (lua_Integer)h->rank_field[RAG_INDEX_KEYWORDS]);
  if (h->rank_field[RAG_INDEX_SUMMARY] > 0)
    lrag_setint(L, "summary", (lua_Integer)h->rank_field[RAG_INDEX_SUMMARY]);
  if (h->rank_q > 0) lrag_setint(L, "questions", (lua_Integer)h->rank_q);
  lua_setfield(L, -2, "ranks");
}

/*
** The enrichment parts of the table at idx, borrowed for one search:
** { keywords = rag.bm25, summary = rag.bm25, weights = { keywords =,
** summary = }, questions = rag.vec | rag.hnsw, qmax = n }; NULL for nil.
*/
static const rag_index_fields *read_fields(lua_State *L, int idx, rag_index_fields *fl,
                                           size_t dim) {
  static const char *fname = "rag.index.search";
  static const char *const names[] = {"keywords", "summary"};
  int i, w;
  if (lua_isnoneornil(L, idx)) return NULL;
  luaL_checktype(L, idx, LUA_TTABLE);
  memset(fl, 0, sizeof *fl);
  lua_getfield(L, idx, "weights");
  w = lua_gettop(L);
  for (i = 0; i < RAG_INDEX_FIELDS; i++) {
    lua_getfield(L, idx, names[i]);
    if (!lua_isnil(L, -1)) {
      fl->bm25[i] = (rag_bm25 *)lrag_peekobject(L, lua_gettop(L), "rag.bm25", fname);
      fl->weight[i] = lua_istable(L, w) ? lrag_optnumber(L, w, fname, names[i], 1, 0, 1e9) : 1;
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_getfield(L, idx, "questions");
  if (!lua_isnil(L, -1)) {
    int t = lua_gettop(L);
    size_t qd;
    if (luaL_testudata(L, t, "rag.hnsw") != NULL) {
      fl->qh = (rag_hnsw *)lrag_peekobject(L, t, "rag.hnsw", fname);
      qd = rag_hnsw_config(fl->qh)->dim;
    } else {
      fl->q = (rag_vec *)lrag_peekobject(L, t, "rag.vec", fname);
      qd = rag_vec_config(fl->q)->dim;
    }
    if (qd != dim) luaL_error(L, "%s: the questions' vectors differ in dimension", fname);
    fl->qmax = (uint32_t)lrag_optinteger(L, idx, fname, "qmax", 1, 0, 1000);
  }
  lua_pop(L, 1);
  return fl;
}

/*
** Runs ix:search's query (arguments 2 to 6, as below): RAG_OK with the hits
** in *hits, *n, or a status with *errpos (RAG_EINVAL: *bad) for the caller
** to raise or return. Leaves an anchor table on the stack.
*/
static int search(lua_State *L, lindex *x, const char *fname, const rag_index_hit **hits,
                  size_t *n, size_t *errpos, rag_vec_bad *bad) {
  static const char *const allowed[] = {"mode", "k", "fetch_k", "rrf", "weights", "filter",
                                        "group", "expand", "ef", "fields", "level", NULL};
  rag_index_query q;
  rag_store_filter sf;
  rag_id_filter docs;
  rag_index_fields fields;
  size_t dim = rag_index_dim(x->ix);
  int anchor;
  memset(&q, 0, sizeof q);
  q.text = luaL_checklstring(L, 2, &q.len);
  lrag_checkopts(L, 3, fname, allowed);
  q.mode = (rag_index_mode)luaL_checkoption(L, 4, "hybrid", mode_names);
  q.mode = (rag_index_mode)lrag_optenum(L, 3, fname, "mode", q.mode, mode_names);
  q.k = (size_t)lrag_optinteger(L, 3, fname, "k", 10, 1, 1 << 30);
  q.fetch_k = (size_t)lrag_optinteger(L, 3, fname, "fetch_k", 50, 1, 1 << 30);
  q.ef = (size_t)lrag_optinteger(L, 3, fname, "ef", 0, 0, 1 << 20);
  q.rrf_k = 60;
  q.rrf_base = 1;
  q.w_bm25 = q.w_vec = 1;
  if (lrag_opttable(L, 3, fname, "rrf")) {
    static const char *const rk[] = {"k", "rank_base", NULL};
    int t = lua_gettop(L);
    lrag_checkopts(L, t, "rag.index.search: rrf", rk);
    q.rrf_k = lrag_optnumber(L, t, fname, "k", 60, 0, 1e9);
    q.rrf_base = lrag_optnumber(L, t, fname, "rank_base", 1, 0, 1e9);
    if (!(q.rrf_k + q.rrf_base > 0)) luaL_error(L, "%s: rrf k + rank_base must be > 0", fname);
    lua_pop(L, 1);
  }
  if (lrag_opttable(L, 3, fname, "weights")) {
    static const char *const wk[] = {"bm25", "vector", NULL};
    int t = lua_gettop(L);
    lrag_checkopts(L, t, "rag.index.search: weights", wk);
    q.w_bm25 = lrag_optnumber(L, t, fname, "bm25", 1, 0, 1e9);
    q.w_vec = lrag_optnumber(L, t, fname, "vector", 1, 0, 1e9);
    lua_pop(L, 1);
  }
  lua_getfield(L, 3, "group");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING || strcmp(lua_tostring(L, -1), "doc") != 0)
      luaL_error(L, "%s: option 'group' must be \"doc\"", fname);
    q.group = 1;
  }
  lua_pop(L, 1);
  if (lrag_opttable(L, 3, fname, "expand")) {
    static const char *const ek[] = {"window", "merge", NULL};
    int t = lua_gettop(L);
    lrag_checkopts(L, t, "rag.index.search: expand", ek);
    q.window = (uint32_t)lrag_optinteger(L, t, fname, "window", 0, 0, 1 << 20);
    q.merge = lrag_optnumber(L, t, fname, "merge", 0, 0, 1);
    lua_getfield(L, t, "merge");
    if (!lua_isnil(L, -1) && !(q.merge > 0))
      luaL_error(L, "%s: expand.merge must be in (0, 1]", fname);
    lua_pop(L, 2);
  }
  lua_newtable(L);
  anchor = lua_gettop(L);
  q.filter = read_filter(L, 3, fname, &sf, &docs, anchor);
  if (q.mode != RAG_INDEX_BM25) {
    float *v;
    if (dim == 0)
      luaL_error(L, "%s: mode '%s' needs vectors, and this index has no embedder", fname,
                 mode_names[q.mode]);
    v = (float *)lua_newuserdatauv(L, dim * sizeof(float), 0);
    lrag_checkvector(L, 5, dim, fname, v);
    q.vec = v;
  }
  q.fields = read_fields(L, 6, &fields, dim);
  *errpos = 0;
  return rag_index_search(x->ix, &q, hits, n, errpos, bad);
}

/*
** ix:search(query, opts, default_mode, qvec, fields) -> hits | nil, msg,
** code: qvec (a vector, or nil) is the query's embedding when the mode
** needs it; fields the enrichment's parts (read_fields) or nil.
*/
static int index_search(lua_State *L) {
  static const char *fname = "rag.index.search";
  lindex *x = check_open(L, fname);
  const rag_index_hit *hits;
  size_t n, i, errpos;
  rag_vec_bad bad;
  int rc = search(L, x, fname, &hits, &n, &errpos, &bad);
  if (rc == RAG_EINVAL) return lrag_vecerror(L, rc, fname, rag_index_dim(x->ix), &bad);
  if (rc != RAG_OK) return lrag_texterror(L, rc, fname, errpos);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    push_hit(L, x->ix, &hits[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

/* {====== Hits as JSON ======} */

/*
** Highlights: the query's terms, and the spans of one hit's text whose
** terms are among them (merged where they touch), all C memory in a box.
*/
typedef struct qterm {
  size_t off, len;
  uint32_t hash;
} qterm;

typedef struct marks {
  char *bytes; /* the query's terms, end to end */
  size_t len, cap;
  qterm *terms;
  size_t nterms, tcap;
  size_t (*spans)[2]; /* 1-based first and last byte, as rag.text.highlights */
  size_t nspans, scap;
  uint64_t bloom; /* bit (hash & 63) of every term's hash: most other words miss it */
  rag_analyzer_want want; /* the terms, for rag_analyzer_run_some */
} marks;

static void marks_fin(void *p) {
  marks *m = (marks *)p;
  rag_free(m->bytes);
  rag_free(m->terms);
  rag_free(m->spans);
  rag_free(m);
}

static int has_term(const marks *m, const char *t, size_t n, uint32_t hash) {
  size_t i;
  if (!(m->bloom >> (hash & 63) & 1)) return 0;
  for (i = 0; i < m->nterms; i++)
    if (m->terms[i].hash == hash && m->terms[i].len == n &&
        memcmp(m->bytes + m->terms[i].off, t, n) == 0)
      return 1;
  return 0;
}

/* The query's terms, each once. */
static int query_term(void *ud, const char *t, size_t n, uint32_t hash, size_t start,
                      size_t stop) {
  marks *m = (marks *)ud;
  char *bytes;
  qterm *q;
  (void)start;
  (void)stop;
  if (n == 0 || has_term(m, t, n, hash)) return RAG_OK;
  if ((bytes = (char *)rag_grow(m->bytes, &m->cap, m->len + n, 1)) == NULL) return RAG_ENOMEM;
  m->bytes = bytes;
  if ((q = (qterm *)rag_grow(m->terms, &m->tcap, m->nterms + 1, sizeof *q)) == NULL)
    return RAG_ENOMEM;
  m->terms = q;
  memcpy(m->bytes + m->len, t, n);
  rag_analyzer_want_term(&m->want, t, n);
  m->bloom |= (uint64_t)1 << (hash & 63);
  q[m->nterms].off = m->len;
  q[m->nterms].len = n;
  q[m->nterms++].hash = hash;
  m->len += n;
  return RAG_OK;
}

/* A term of the hit's text: a span when it is one of the query's. */
static int text_term(void *ud, const char *t, size_t n, uint32_t hash, size_t start,
                     size_t stop) {
  marks *m = (marks *)ud;
  size_t (*v)[2];
  if (n == 0 || !has_term(m, t, n, hash)) return RAG_OK;
  if (m->nspans > 0 && start + 1 <= m->spans[m->nspans - 1][1]) {
    if (stop > m->spans[m->nspans - 1][1]) m->spans[m->nspans - 1][1] = stop;
    return RAG_OK;
  }
  if ((v = (size_t(*)[2])rag_grow(m->spans, &m->scap, m->nspans + 1, sizeof *v)) == NULL)
    return RAG_ENOMEM;
  m->spans = v;
  v[m->nspans][0] = start + 1;
  v[m->nspans++][1] = stop;
  return RAG_OK;
}

static void put_key(lua_State *L, lrag_buf *b, const char *key) {
  lrag_buf_add(L, b, key, strlen(key));
}

/* A rank, or null when the hit is not in that list. */
static void put_rank(lua_State *L, lrag_buf *b, const char *key, uint32_t rank, int always) {
  if (rank == 0 && !always) return;
  put_key(L, b, key);
  if (rank > 0) lrag_json_int(L, b, (long long)rank);
  else put_key(L, b, "null");
}

static void put_meta(lua_State *L, lrag_buf *b, const rag_store_doc *d) {
  rag_meta_iter it;
  const char *k;
  size_t kl, n = 0;
  rag_meta_value v;
  lrag_buf_addc(L, b, '{');
  rag_meta_begin(&it, d->meta, d->metalen); /* keys in byte order, as rag.json sorts them */
  while (rag_meta_next(&it, &k, &kl, &v)) {
    if (n++ > 0) lrag_buf_addc(L, b, ',');
    lrag_json_string(L, b, k, kl);
    lrag_buf_addc(L, b, ':');
    switch (v.type) {
      case RAG_META_STRING: lrag_json_string(L, b, v.s, v.len); break;
      case RAG_META_INT: lrag_json_int(L, b, (long long)v.i); break;
      case RAG_META_NUMBER: lrag_json_float(L, b, v.num); break;
      case RAG_META_FALSE: put_key(L, b, "false"); break;
      case RAG_META_TRUE: put_key(L, b, "true"); break;
      default: {
        rag_reader r = v.list;
        const char *str;
        size_t sl, i = 0;
        lrag_buf_addc(L, b, '[');
        while (rag_r_str(&r, &str, &sl)) {
          if (i++ > 0) lrag_buf_addc(L, b, ',');
          lrag_json_string(L, b, str, sl);
        }
        lrag_buf_addc(L, b, ']');
      }
    }
  }
  lrag_buf_addc(L, b, '}');
}

/* A string field, or null. */
static void put_opt(lua_State *L, lrag_buf *b, const char *key, int has, const char *s,
                    size_t n) {
  put_key(L, b, key);
  if (has) lrag_json_string(L, b, s, n);
  else put_key(L, b, "null");
}

/* One hit as a JSON object, its keys in byte order; highlights when m. */
static void put_hit(lua_State *L, lrag_buf *b, rag_index *ix, const rag_index_hit *h,
                    rag_analyzer *a, marks *m) {
  const rag_store_doc *d = rag_store_doc_at(rag_index_store(ix), h->doc);
  const char *text = d->text + h->start - 1, *name;
  size_t nl, tl = h->stop - h->start + 1, i, errpos;
  put_key(L, b, "{\"doc_id\":");
  lrag_json_string(L, b, d->id, d->idlen);
  if (m != NULL) {
    int rc;
    m->nspans = 0;
    if ((rc = rag_analyzer_run_some(a, text, tl, &m->want, text_term, m, &errpos)) != RAG_OK)
      lrag_error(L, rc, "rag.index.search_json", NULL); /* stored text is valid: ENOMEM */
    put_key(L, b, ",\"highlights\":[");
    for (i = 0; i < m->nspans; i++) {
      lrag_buf_add(L, b, i > 0 ? ",[" : "[", i > 0 ? 2 : 1);
      lrag_json_int(L, b, (long long)m->spans[i][0]);
      lrag_buf_addc(L, b, ',');
      lrag_json_int(L, b, (long long)m->spans[i][1]);
      lrag_buf_addc(L, b, ']');
    }
    lrag_buf_addc(L, b, ']');
  }
  if ((name = rag_index_chunk_name(ix, h, &nl)) == NULL) luaL_error(L, "not enough memory");
  put_key(L, b, ",\"id\":");
  lrag_json_string(L, b, name, nl);
  put_key(L, b, ",\"meta\":");
  put_meta(L, b, d);
  put_rank(L, b, ",\"ranks\":{\"bm25\":", h->rank_bm25, 1);
  put_rank(L, b, ",\"keywords\":", h->rank_field[RAG_INDEX_KEYWORDS], 0);
  put_rank(L, b, ",\"questions\":", h->rank_q, 0);
  put_rank(L, b, ",\"summary\":", h->rank_field[RAG_INDEX_SUMMARY], 0);
  put_rank(L, b, ",\"vector\":", h->rank_vec, 1);
  put_key(L, b, "},\"score\":");
  lrag_json_float(L, b, h->score);
  put_opt(L, b, ",\"source\":", d->has_source, d->source, d->sourcelen);
  put_key(L, b, ",\"start\":");
  lrag_json_int(L, b, (long long)h->start);
  put_key(L, b, ",\"stop\":");
  lrag_json_int(L, b, (long long)h->stop);
  put_key(L, b, ",\"text\":");
  lrag_json_string(L, b, text, tl);
  put_opt(L, b, ",\"title\":", d->has_title, d->title, d->titlelen);
  lrag_buf_addc(L, b, '}');
}

/*
** ix:search_json(query, opts, default_mode, qvec, fields, analyzer) ->
** json | nil, msg, code: ix:search's hits as one JSON array (docs/index.md,
** Index:search_json), written from the index's records without Lua
** tables; with an analyzer (a rag.analyzer), each hit's highlights: the
** spans of its text whose terms are the query's.
*/
static int index_search_json(lua_State *L) {
  static const char *fname = "rag.index.search_json";
  lindex *x = check_open(L, fname);
  const rag_index_hit *hits;
  size_t n, i, errpos;
  rag_vec_bad bad;
  rag_analyzer *a = NULL;
  marks *m = NULL;
  lrag_buf *b;
  int rc;
  lua_settop(L, 7);
  if (!lua_isnil(L, 7)) {
    lrag_box *box;
    lrag_checkanalyzer(L, 7);
    box = lrag_box_new(L, marks_fin);
    if ((m = (marks *)rag_malloc(sizeof *m)) == NULL) return lrag_error(L, RAG_ENOMEM, fname, NULL);
    memset(m, 0, sizeof *m);
    box->p = m;
  }
  b = lrag_buf_new(L);
  rc = search(L, x, fname, &hits, &n, &errpos, &bad);
  if (rc == RAG_EINVAL) return lrag_vecerror(L, rc, fname, rag_index_dim(x->ix), &bad);
  if (rc != RAG_OK) return lrag_texterror(L, rc, fname, errpos);
  if (m != NULL && n > 0) { /* after the last call that runs Lua code */
    size_t qlen;
    const char *q = lua_tolstring(L, 2, &qlen);
    a = lrag_checkanalyzer(L, 7);
    if ((rc = rag_analyzer_run(a, q, qlen, query_term, m, &errpos)) != RAG_OK)
      return lrag_texterror(L, rc, fname, errpos);
  }
  lrag_buf_addc(L, b, '[');
  for (i = 0; i < n; i++) {
    if (i > 0) lrag_buf_addc(L, b, ',');
    put_hit(L, b, x->ix, &hits[i], a, m != NULL && n > 0 ? m : NULL);
  }
  lrag_buf_addc(L, b, ']');
  lua_pushlstring(L, b->p, b->len);
  return 1;
}

/* {====== Saving and opening ======} */

/* Size and CRC-32 of a saved file, into the table on top. */
static int sum_file(lua_State *L, const char *fname, const char *path) {
  unsigned char *buf;
  size_t n;
  const char *why = NULL;
  uint32_t crc;
  int err = 0, rc = rag_file_read(path, &buf, &n, &why, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, fname, path, why, err);
  crc = rag_digest_crc32(0, buf, n);
  rag_free(buf); /* before the pushes, which may raise */
  lua_createtable(L, 0, 2);
  lrag_setint(L, "size", (lua_Integer)n);
  lrag_setint(L, "crc32", (lua_Integer)crc);
  return 1;
}

/*
** ix:save{ store = path, bm25 = path, vectors = path } -> { part = { size, crc32 } }
** | nil, msg, code: each part written atomically (rag_file_save), then read back
** for its size and CRC-32.
*/
static int index_save(lua_State *L) {
  static const char *fname = "rag.index.save";
  static const char *const parts[] = {"store", "bm25", "vectors"};
  lindex *x = check_open(L, fname);
  rag_index *ix = x->ix;
  int i, out;
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_newtable(L);
  out = lua_gettop(L);
  for (i = 0; i < 3; i++) {
    const char *path;
    int err = 0, rc = RAG_OK;
    lua_getfield(L, 2, parts[i]);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      continue;
    }
    path = lrag_checkpath(L, -1, fname);
    if (i == 0) rc = rag_store_save(rag_index_store(ix), path, &err);
    else if (i == 1) rc = rag_bm25_save(rag_index_bm25(ix), path, &err);
    else if (rag_index_vec(ix) != NULL) rc = rag_vec_save(rag_index_vec(ix), path, &err);
    else if (rag_index_hnsw(ix) != NULL) rc = rag_hnsw_save(rag_index_hnsw(ix), path, &err);
    else luaL_error(L, "%s: this index has no vectors", fname);
    if (rc != RAG_OK) return lrag_file_error(L, rc, fname, path, NULL, err);
    if (sum_file(L, fname, path) != 1) return 3;
    lua_setfield(L, out, parts[i]);
    lua_pop(L, 1);
  }
  return 1;
}

static int index_new(lua_State *L) {
  static const char *fname = "rag.index.new";
  lindex *x;
  rag_bm25 *b;
  rag_vec *v = NULL;
  rag_hnsw *h = NULL;
  rag_store *s;
  int rc;
  if (luaL_testudata(L, 1, "rag.bm25") == NULL)
    luaL_error(L, "%s: argument 1 must be a rag.bm25, got %s", fname, luaL_typename(L, 1));
  if (!lua_isnoneornil(L, 2) && luaL_testudata(L, 2, "rag.vec") == NULL &&
      luaL_testudata(L, 2, "rag.hnsw") == NULL)
    luaL_error(L, "%s: argument 2 must be a rag.vec or rag.hnsw, got %s", fname,
               luaL_typename(L, 2));
  lrag_ownvec(L, 2, fname); /* may raise: before anything is taken */
  x = (lindex *)lrag_newobject(L, &index_class, sizeof *x);
  if ((rc = rag_store_new(&s)) != RAG_OK) return lrag_error(L, rc, fname, NULL);
  b = (rag_bm25 *)lrag_takeobject(L, 1, "rag.bm25", fname);
  if (luaL_testudata(L, 2, "rag.vec") != NULL) v = lrag_takevec(L, 2, fname);
  else if (!lua_isnoneornil(L, 2)) h = (rag_hnsw *)lrag_takeobject(L, 2, "rag.hnsw", fname);
  rc = rag_index_new(b, v, h, s, &x->ix);
  if (rc != RAG_OK) {
    rag_bm25_free(b);
    rag_vec_free(v);
    rag_hnsw_free(h);
    rag_store_free(s);
    return lrag_error(L, rc, fname, NULL);
  }
  return 1;
}

/* A part's loader: rag_store_load_mem, rag_bm25_load_mem, ... as one type. */
typedef int (*part_load)(const unsigned char *p, size_t n, int borrow, void *out,
                         const char **why);

static int load_store(const unsigned char *p, size_t n, int borrow, void *out, const char **why) {
  return rag_store_load_mem(p, n, borrow, (rag_store **)out, why);
}

static int load_bm25(const unsigned char *p, size_t n, int borrow, void *out, const char **why) {
  return rag_bm25_load_mem(p, n, borrow, (rag_bm25 **)out, why);
}

static int load_vec(const unsigned char *p, size_t n, int borrow, void *out, const char **why) {
  return rag_vec_load_mem(p, n, borrow, (rag_vec **)out, why);
}

/* Loads part i from path with `load`: borrowing a read-only mapping kept in
** x->map[i] with `map`, else from a copy of the file freed after. */
static int load_part(lindex *x, int i, const char *path, int map, part_load load, void *out,
                     const char **why, int *err) {
  unsigned char *buf = NULL;
  size_t n = 0;
  int rc;
  if (map) {
    rc = rag_file_map(path, &x->map[i], &x->maplen[i], why, err);
    return rc == RAG_OK ? load((const unsigned char *)x->map[i], x->maplen[i], 1, out, why) : rc;
  }
  rc = rag_file_read(path, &buf, &n, why, err);
  if (rc == RAG_OK) rc = load(buf, n, 0, out, why);
  rag_free(buf);
  return rc;
}

/*
** rag.core.index.open{ store = path, bm25 = path, vectors = path|nil,
** kind = "exact"|"hnsw", map = bool } -> index | nil, msg, code. With map,
** the store, the BM25 lists and the exact vectors are used where a read-only
** mapping of their files puts them, shared by every process that maps the
** same files (HNSW graphs are still copied).
*/
static int index_open(lua_State *L) {
  static const char *fname = "rag.index.open";
  static const char *const kinds[] = {"exact", "hnsw", NULL};
  lindex *x;
  rag_bm25 *b = NULL;
  rag_vec *v = NULL;
  rag_hnsw *h = NULL;
  rag_store *s = NULL;
  const char *why = NULL, *path;
  int err = 0, rc, kind, map;
  size_t leaves;
  luaL_checktype(L, 1, LUA_TTABLE);
  kind = lrag_optenum(L, 1, fname, "kind", 0, kinds);
  map = lrag_optboolean(L, 1, fname, "map", 0);
  x = (lindex *)lrag_newobject(L, &index_class, sizeof *x);
  lua_getfield(L, 1, "store");
  path = lrag_checkpath(L, -1, fname);
  if ((rc = load_part(x, PART_STORE, path, map, load_store, &s, &why, &err)) != RAG_OK) goto fail;
  lua_getfield(L, 1, "bm25");
  path = lrag_checkpath(L, -1, fname);
  if ((rc = load_part(x, PART_BM25, path, map, load_bm25, &b, &why, &err)) != RAG_OK) goto fail;
  lua_getfield(L, 1, "vectors");
  if (!lua_isnil(L, -1)) {
    path = lrag_checkpath(L, -1, fname);
    rc = kind == 0 ? load_part(x, PART_VECTORS, path, map, load_vec, &v, &why, &err)
                   : rag_hnsw_load(path, &h, &why, &err);
    if (rc != RAG_OK) goto fail;
  }
  leaves = rag_store_leaves(s);
  if (rag_bm25_count(b) != leaves || (v != NULL && rag_vec_count(v) != leaves) ||
      (h != NULL && rag_hnsw_count(h) != leaves)) {
    rc = RAG_ECORRUPT;
    why = "the parts disagree on the number of chunks";
    goto fail;
  }
  if ((rc = rag_index_new(b, v, h, s, &x->ix)) != RAG_OK) goto fail;
  lua_pushvalue(L, 2); /* the userdata */
  return 1;
fail:
  rag_bm25_free(b);
  rag_vec_free(v);
  rag_hnsw_free(h);
  rag_store_free(s);
  unmap_all(x);
  if (rc == RAG_ENOMEM) return lrag_error(L, rc, fname, NULL);
  return lrag_file_error(L, rc, fname, path, why, err);
}

/*
** ix:keywords(chunk name, n) -> { word, ... }: the chunk's n words of
** highest BM25 weight (rag_index_keywords), lowercased (ASCII); {} for a
** name that is not a live leaf chunk.
*/
static int index_keywords(lua_State *L) {
  lindex *x = check_open(L, "rag.index.keywords");
  size_t len, n, count, i;
  const char *name = lrag_checkid(L, 2, "rag.index.keywords", &len);
  const rag_index_word *w;
  int rc;
  n = (size_t)luaL_checkinteger(L, 3);
  if (n > 1000) luaL_error(L, "rag.index.keywords: n must be at most 1000");
  rc = rag_index_keywords(x->ix, name, len, n, &w, &count);
  if (rc != RAG_OK) return lrag_error(L, rc, "rag.index.keywords", NULL);
  lua_createtable(L, (int)count, 0);
  for (i = 0; i < count; i++) {
    luaL_Buffer b;
    size_t k;
    luaL_buffinit(L, &b);
    for (k = 0; k < w[i].len; k++) {
      char ch = w[i].s[k];
      luaL_addchar(&b, ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch);
    }
    luaL_pushresult(&b);
    lua_rawseti(L, -2, (int)i + 1);
  }
  return 1;
}

static const luaL_Reg index_methods[] = {
    {"stage", index_stage}, {"chunk", index_chunk}, {"commit", index_commit},
    {"remove", index_remove}, {"get", index_get},   {"ids", index_ids},
    {"vectors", index_vectors}, {"staged", index_staged},
    {"chunk_at", index_chunk_get}, {"chunks", index_chunks}, {"hash", index_hash_of},
    {"search", index_search}, {"search_json", index_search_json}, {"stats", index_stats}, {"save", index_save},
    {"check", index_check}, {"attach", index_attach}, {"shape", index_shape},
    {"to_hnsw", index_to_hnsw}, {"keywords", index_keywords},
    {NULL, NULL},
};

static const luaL_Reg index_metamethods[] = {{"__len", index_len}, {NULL, NULL}};

static const lrag_class index_class = {MT, "index", index_methods, index_metamethods,
                                       index_fin};

/* rag.core.index.trim(): the allocator's free pages back to the system (rag_trim). */
static int index_trim(lua_State *L) {
  (void)L;
  rag_trim();
  return 0;
}

static const luaL_Reg index_funcs[] = {{"new", index_new},     {"open", index_open},
                                       {"order", index_order}, {"trim", index_trim},
                                       {"hash", index_hash},
                                       {NULL, NULL}};

int lrag_open_index(lua_State *L) {
  lrag_newclass(L, &index_class);
  luaL_setfuncs(L, index_funcs, 0);
  return 0;
}
