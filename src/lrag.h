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

/*
** The failure tuple: pushes nil, the formatted message and `code` (one of
** io format version corrupt encoding http timeout ...); returns 3.
*/
int lrag_fail(lua_State *L, const char *code, const char *fmt, ...);

/*
** The outcome of a failed load of `path`: raises for RAG_ENOMEM, else
** returns nil, "fname: 'path': reason", code (strerror(err) for RAG_EIO
** with an errno, else why).
*/
int lrag_loadfail(lua_State *L, int rc, const char *fname, const char *path, const char *why,
                  int err);

/* Maps a core status to its `code` string ("http", "timeout", ...). */
const char *lrag_code(int rc);

/*
** Raises unless the value at idx is nil or a table whose keys are all in
** `allowed` (a NULL-terminated list). `fname` names the function in errors.
*/
void lrag_checkopts(lua_State *L, int idx, const char *fname,
                    const char *const allowed[]);

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

/* Option reader: the number field, or `def` when absent; a wrong type raises. */
lua_Number lrag_optnumber(lua_State *L, int idx, const char *key,
                          lua_Number def);

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

#endif
