/*
** lrag.h: the one header of the Lua binding: the openers that lrag.c calls
** and the helpers every binding shares (option checking, the error rule,
** GC-owned boxes for C memory held across calls that can raise).
*/
#ifndef LRAG_H
#define LRAG_H

#include <stddef.h>
#include <stdint.h>

#include "lrag_compat.h"
#include "rag.h"

/* Each opener adds its functions to the module table at the stack top. */
int lrag_open_http(lua_State *L);
int lrag_open_json(lua_State *L);
int lrag_open_text(lua_State *L);
int lrag_open_analyzer(lua_State *L);  /* rag.text.analyzer, rag.text.tokenize */
int lrag_open_sentences(lua_State *L); /* rag.text.sentences */
int lrag_open_tokenizer(lua_State *L);
int lrag_open_chunk(lua_State *L);
int lrag_open_bm25(lua_State *L);
int lrag_open_vec(lua_State *L);
int lrag_open_hnsw(lua_State *L);
int lrag_open_fuse(lua_State *L);   /* rag.fuse */
int lrag_open_rerank(lua_State *L); /* rag.rerank */
int lrag_open_eval(lua_State *L);   /* rag.eval */
int lrag_open_pack(lua_State *L);   /* rag.pack */
int lrag_open_hashing(lua_State *L); /* rag.core.hashing (rag.embed.hashing) */
int lrag_open_model2vec(lua_State *L); /* rag.core.model2vec (rag.embed.model2vec) */
int lrag_open_bert(lua_State *L);      /* rag.core.bert (rag.embed.bert, rag.rerank.cross_encoder) */
int lrag_open_index(lua_State *L);     /* rag.core.index (rag.index) */
int lrag_open_fs(lua_State *L);        /* rag.core.fs: what rag.index's saves need of files */
int lrag_open_html(lua_State *L);      /* rag.core.html (rag.load.html) */
int lrag_open_graph(lua_State *L);     /* rag.core.graph (rag.graph) */


/*
** The analyzer at idx (userdata "rag.analyzer"; raises when it is anything
** else or closed). Other bindings (BM25) keep a reference to the userdata
** for as long as they use the pointer.
*/
struct rag_analyzer *lrag_checkanalyzer(lua_State *L, int idx);

/*
** The exact tokenizer at idx (userdata "rag.tokenizer"), NULL when the value
** is something else; raises `fname: tokenizer is closed` when it is closed.
*/
struct rag_tokenizer *lrag_totokenizer(lua_State *L, int idx, const char *fname);

/* {====== Chunking from C ======} */

/*
** A rag.chunk function prepared to run from C on many texts (rag.index's
** ingestion). lrag_chunker_new reads the options table at `opts` for the
** function at `fn` as that function does, raising as it would, and returns
** the prepared chunker, leaving on the stack what it holds and borrows
** (itself, the tokenizer, the separators), which must stay there while it
** is used. NULL, with nothing pushed: fn is not a chunker that runs without
** calling Lua (rag.chunk.semantic calls embed; any other function).
*/
typedef struct lrag_chunker lrag_chunker;
struct rag_chunk;
lrag_chunker *lrag_chunker_new(lua_State *L, int fn, int opts);

/*
** Chunks the len bytes at s (borrowed) as the function does: *chunks gets
** *n chunks, valid until the next run. Returns the core's status; with
** RAG_EENCODING *errpos is the 1-based offset of the first bad byte.
*/
int lrag_chunker_run(lrag_chunker *k, const char *s, size_t len, const struct rag_chunk **chunks,
                     size_t *n, size_t *errpos);

/* The function's name, for messages ("rag.chunk.recursive"). */
const char *lrag_chunker_fname(const lrag_chunker *k);

/* Whether its chunks have a level and a parent (rag.chunk.hierarchy's meta). */
int lrag_chunker_tree(const lrag_chunker *k);

/* {====== The error rule ======} */

/*
** The one translation of a core status into Lua. The message is
** "fname: detail", detail being fmt formatted or rag_strerror(rc) when fmt
** is NULL. A failure of the world (a status with a code in rag.h's list)
** returns nil, message, code: 3 values; misuse (RAG_ENOMEM, RAG_EINVAL,
** RAG_ETOOBIG) raises the message.
*/
int lrag_error(lua_State *L, int rc, const char *fname, const char *fmt, ...);

/* lrag_error for an operation on text: RAG_EENCODING says "invalid utf-8 at byte <errpos>". */
int lrag_texterror(lua_State *L, int rc, const char *fname, size_t errpos);

/*
** lrag_error for a file: "fname: 'path': why", where for RAG_EIO with a
** nonzero errno `err` the reason is strerror(err) in lowercase.
*/
int lrag_file_error(lua_State *L, int rc, const char *fname, const char *path, const char *why,
                    int err);

/*
** lrag_file_error for a file `file` of a model folder `dir` (its trailing
** slashes dropped; "" for the folder itself): "fname: 'dir/file': why".
*/
int lrag_dir_error(lua_State *L, int rc, const char *fname, const char *dir, const char *file,
                   const char *why, int err);

/* Pushes rag.h's codes as a list { { code=, meaning= }, ... } in list order. */
void lrag_pusherrors(lua_State *L);

/* {====== Options ======} */

/*
** Raises unless the value at idx is none, nil or a table whose keys are all
** in `allowed` (a NULL-terminated list). Every reader below takes the opts
** table at idx (anything but a table means all defaults), returns `def`
** when the key is absent and raises "fname: option 'key' must be ..." for a
** wrong type or a value outside [lo, hi].
*/
void lrag_checkopts(lua_State *L, int idx, const char *fname, const char *const allowed[]);
lua_Integer lrag_optinteger(lua_State *L, int idx, const char *fname, const char *key,
                            lua_Integer def, lua_Number lo, lua_Number hi);
lua_Number lrag_optnumber(lua_State *L, int idx, const char *fname, const char *key,
                          lua_Number def, lua_Number lo, lua_Number hi);
int lrag_optboolean(lua_State *L, int idx, const char *fname, const char *key, int def);
/* The string stays valid while the opts table is on the stack. */
const char *lrag_optstring(lua_State *L, int idx, const char *fname, const char *key,
                           const char *def, size_t *len);
/* The index of the value in `names` (NULL-terminated), or def. */
int lrag_optenum(lua_State *L, int idx, const char *fname, const char *key, int def,
                 const char *const names[]);
/* Pushes opts[key] and returns 1 when it is a table; 0 and nothing pushed when absent. */
int lrag_opttable(lua_State *L, int idx, const char *fname, const char *key);

/* -- Added with the conversion of chunk, eval, fuse, http, json, pack, rerank, text -- */

/*
** The `hi` of an integer option with no upper bound: every integer up to it
** is exact in a double and fits a size_t, and the message says ">= lo".
*/
#define LRAG_MAXINT 9007199254740992.0 /* 2^53 */

/*
** opts.tokenizer of the table at idx, pushed (nil when absent) so that it
** lives as long as the call: the exact tokenizer, or NULL for the estimator
** (absent, or rag.tokenizer.approx()). Raises "fname: option 'tokenizer'
** must be a rag.tokenizer or rag.tokenizer.approx()" for anything else and
** "fname: tokenizer is closed" for a closed one.
*/
struct rag_tokenizer *lrag_opttokenizer(lua_State *L, int idx, const char *fname);

/* {====== Classes ======} */

/*
** A userdata class. Every object's userdata starts with the pointer to its
** core object (NULL once closed); `fin` frees what the userdata at `u` owns
** and is called once, by close, __gc or __close, while that pointer is set.
** lrag_newclass registers the metatable: __index holding `methods` plus
** close, __gc, __close, __name, a __tostring ("rag.bm25 (closed)") that
** `metamethods` may replace, and any other metamethods (__len, ...).
*/
typedef struct lrag_class {
  const char *name; /* the metatable's name: "rag.bm25" */
  const char *noun; /* what a closed one is called: "fname: index is closed" */
  const luaL_Reg *methods;
  const luaL_Reg *metamethods; /* may be NULL */
  void (*fin)(void *u);
} lrag_class;

void lrag_newclass(lua_State *L, const lrag_class *c);
/* Pushes a zeroed userdata of `size` bytes of class c (one user value). */
void *lrag_newobject(lua_State *L, const lrag_class *c, size_t size);
/* The userdata at idx, which must be of class c and open. */
void *lrag_checkobject(lua_State *L, int idx, const lrag_class *c, const char *fname);
/* The userdata at idx when it is of class c (open or closed), else NULL. */
void *lrag_toobject(lua_State *L, int idx, const lrag_class *c);
/*
** Takes the core object out of the open userdata at idx, whose metatable
** is `tname` ("rag.bm25"): returns its pointer, which the caller now owns,
** and leaves the userdata closed. Raises when it is not one, or closed.
*/
void *lrag_takeobject(lua_State *L, int idx, const char *tname, const char *fname);
/* The core object of the open userdata at idx (as lrag_takeobject), borrowed. */
void *lrag_peekobject(lua_State *L, int idx, const char *tname, const char *fname);

/* {====== Arguments ======} */

/* A path argument: a string without NUL bytes (a NUL would shorten it). */
const char *lrag_checkpath(lua_State *L, int idx, const char *fname);

/* An id argument: a string, or a number converted as tostring does. */
const char *lrag_checkid(lua_State *L, int idx, const char *fname, size_t *len);

/* The k argument at idx: a positive integer, `def` when absent. */
size_t lrag_optk(lua_State *L, int idx, const char *fname, size_t def);

/*
** A search filter at idx: a set { [id] = true } or a list of ids. Pushes two
** values that anchor the strings and arrays, points *ids and *lens at them
** and returns how many ids there are.
*/
size_t lrag_checkfilter(lua_State *L, int idx, const char *fname, const char ***ids,
                        size_t **lens);

/* Pushes hits as { {id=, score=}, ... }; idof names a hit's id. */
typedef const char *(*lrag_idfn)(const void *obj, uint32_t slot, size_t *len);
void lrag_pushhits(lua_State *L, const rag_hit *hits, size_t n, lrag_idfn idof,
                   const void *obj);

/*
** A vector argument: a Lua array of `dim` numbers or a packed little-endian
** float32 string of dim * 4 bytes, copied into out. Raises naming `fname`.
*/
void lrag_checkvector(lua_State *L, int idx, size_t dim, const char *fname, float *out);

/* {------ Result fields ------} */

/* t[key] = v for the table t at the top of the stack. */
void lrag_setint(lua_State *L, const char *key, lua_Integer v);
void lrag_setnum(lua_State *L, const char *key, lua_Number v);
void lrag_setbool(lua_State *L, const char *key, int v);
void lrag_setstr(lua_State *L, const char *key, const char *s);

/* Pushes the n bytes at d as lowercase hex (a digest: n <= 64). */
void lrag_pushhex(lua_State *L, const unsigned char *d, size_t n);

/* {------ List arguments ------} */

/*
** The length of the list argument at idx, which must be a table: raises
** "fname: <must>, got <type>" otherwise, `must` saying what it must be
** ("hits must be a list of hits"); the length fits an int.
*/
size_t lrag_checklist(lua_State *L, int idx, const char *fname, const char *must);

/*
** A box: a userdata that owns one C pointer and frees it with `fin` when
** collected, so C memory survives a Lua error without leaking. The box is
** pushed; lrag_box_free releases early and is idempotent.
*/
typedef struct lrag_box {
  void *p;
  void (*fin)(void *p);
} lrag_box;

lrag_box *lrag_box_new(lua_State *L, void (*fin)(void *p));
void lrag_box_free(lrag_box *box);

/*
** A box whose `size` bytes of zeroed payload live inside the userdata (a
** struct that owns C memory): pushes it and returns the payload, which
** `fin` empties (never frees) when the box is collected.
*/
void *lrag_box_embed(lua_State *L, size_t size, void (*fin)(void *p));

/* A growable byte buffer in a box; appends raise "not enough memory". */
typedef struct lrag_buf {
  char *p;
  size_t len;
  size_t cap;
} lrag_buf;

lrag_buf *lrag_buf_new(lua_State *L);
void lrag_buf_add(lua_State *L, lrag_buf *b, const char *s, size_t len);
void lrag_buf_addc(lua_State *L, lrag_buf *b, char c);

/*
** rag.json's own writers, for bindings that write JSON text without Lua
** values: a string of valid UTF-8 (not checked again); a number as
** rag.json.encode writes a Lua float (lua_pushnumber) or integer of that
** value. The same bytes as rag.json.encode of the Lua value.
*/
void lrag_json_string(lua_State *L, lrag_buf *b, const char *s, size_t len);
void lrag_json_float(lua_State *L, lrag_buf *b, double v);
void lrag_json_int(lua_State *L, lrag_buf *b, long long v);

#endif
