/*
** lrag_vec.h: what the bindings of rag.vec and rag.hnsw share: the options
** dim, metric, dtype and simd, the error of a refused vector, a search's
** filter, and stats; and the embedders' list of texts and vectors.
*/
#ifndef LRAG_VEC_H
#define LRAG_VEC_H

#include "lrag.h"
#include "rag_kernel.h"
#include "rag_vec.h"

/* Reads dim (required), metric, dtype and simd from the opts table at idx. */
void lrag_vecopts(lua_State *L, int idx, const char *fname, size_t *dim, int *metric,
                  int *dtype, int *portable);

/*
** The error rule for a core status of a vector operation: RAG_EINVAL is a
** refused vector ("fname: component 3 is NaN", "zero vector under cosine"),
** RAG_ETOOBIG "too large for the index"; the rest as lrag_error.
*/
int lrag_vecerror(lua_State *L, int rc, const char *fname, size_t dim, const rag_vec_bad *bad);

/*
** A mapped rag.vec at idx (anything else is left alone) copies its rows
** and lets its file go; raises when out of memory. Call it before taking
** anything that a raise would leak.
*/
void lrag_ownvec(lua_State *L, int idx, const char *fname);

/*
** Takes the core index out of the open rag.vec at idx, as lrag_takeobject
** does, after lrag_ownvec: the caller keeps the index, not its mapping.
*/
rag_vec *lrag_takevec(lua_State *L, int idx, const char *fname);

/* Pushes { count, dim, metric, dtype, memory, kernel }. */
void lrag_pushvecstats(lua_State *L, const rag_kernel *k, size_t count, size_t memory);

/* Pushes n floats as a Lua array. */
void lrag_pushfloats(lua_State *L, const float *x, size_t n);

/* Pushes n floats as a packed little-endian float32 string (rag.vec.pack's format). */
void lrag_pushpacked(lua_State *L, const float *x, size_t n);

/* {====== What the embedders (hashing, model2vec) share ======} */

/*
** The length of the list of strings at idx; raises "fname: texts must be a
** list of strings, got number" or, `item` being a format of the position,
** "fname: <item> must be a string, got nil".
*/
size_t lrag_checktexts(lua_State *L, int idx, const char *fname, const char *item);

/* Embeds one text into dim floats: RAG_OK, RAG_EENCODING (*errpos, 1-based), RAG_ENOMEM. */
typedef int (*lrag_embedfn)(void *ud, const char *s, size_t len, float *out, size_t *errpos);

/*
** Pushes the vectors `embed` makes of the texts at idx (checked), as Lua
** arrays or, when packed, packed strings, and returns 1; or the error rule's
** result for the first text that fails ("fname: text 2: invalid utf-8 at
** byte 5").
*/
int lrag_embedtexts(lua_State *L, int idx, size_t dim, int packed, const char *fname,
                    lrag_embedfn embed, void *ud);

/*
** Reads opts.filter of the opts table at idx (checked by the caller) into
** *f; returns f, or NULL when there is no filter.
*/
rag_id_filter *lrag_vecfilter(lua_State *L, int idx, const char *fname, rag_id_filter *f);

#endif
