/*
** lrag_vec.h: what the bindings of rag.vec and rag.hnsw share: the option
** reader of dim, metric, dtype and simd, refused vectors, and stats.
*/
#ifndef LRAG_VEC_H
#define LRAG_VEC_H

#include "lrag.h"
#include "rag_kernel.h"
#include "rag_vec.h"

/* Reads dim (required), metric, dtype and simd from the opts table at idx. */
void lrag_vecopts(lua_State *L, int idx, const char *fname, size_t *dim, int *metric,
                  int *dtype, int *portable);

/* opts[key] as an integer in [lo, hi], `def` when absent. */
size_t lrag_optint(lua_State *L, int idx, const char *key, size_t def, size_t lo, size_t hi,
                   const char *fname);

/* Raises for a refused vector: "fname: component 3 is NaN", "zero vector under cosine". */
int lrag_badvector(lua_State *L, const char *fname, size_t dim, const rag_vec_bad *bad);

/* Raises for a core status: "not enough memory", "too large for the index". */
int lrag_raise(lua_State *L, int rc, const char *fname);

/* Pushes { count, dim, metric, dtype, memory, kernel }. */
void lrag_pushvecstats(lua_State *L, const rag_kernel *k, size_t count, size_t memory);

/* Pushes n floats as a Lua array. */
void lrag_pushfloats(lua_State *L, const float *x, size_t n);

/*
** Checks a search's opts at idx (nil or a table with keys in `allowed`) and
** reads opts.filter into *f; returns f, or NULL when there is no filter.
*/
rag_id_filter *lrag_searchopts(lua_State *L, int idx, const char *fname,
                               const char *const allowed[], rag_id_filter *f);

#endif
