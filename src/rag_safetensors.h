/*
** rag_safetensors.h: the header of a safetensors file (the format model
** weights are downloaded in), checked as the safetensors library checks it:
**
**   file   = hlen:u64le header[hlen] data
**   header = JSON object { name: { "dtype": D, "shape": [n...],
**            "data_offsets": [begin, end] }, "__metadata__": {...} }
**   every tensor's end - begin = product(shape) x size(D); the tensors,
**   sorted by begin, tile data exactly (no gap, overlap or trailing byte)
**
** Ownership: rag_safetensors_parse borrows the file's bytes for the call;
** the list owns its tensors' names. Offsets are from the start of the file.
*/
#ifndef RAG_SAFETENSORS_H
#define RAG_SAFETENSORS_H

#include <stddef.h>

#include "rag.h"

/* The dtypes a tensor may have; RAG_ST_OTHER for the rest the format knows. */
enum { RAG_ST_F32, RAG_ST_F16, RAG_ST_I8, RAG_ST_F64, RAG_ST_I32, RAG_ST_I64, RAG_ST_OTHER };

#define RAG_ST_MAXRANK 8

typedef struct rag_st_tensor {
  char *name;
  int dtype;           /* RAG_ST_* */
  const char *dtype_name; /* "F32", "BF16", ... */
  size_t elem;         /* bytes per element */
  size_t rank, shape[RAG_ST_MAXRANK], count; /* count: elements */
  size_t begin, end;   /* bytes, from the start of the file */
} rag_st_tensor;

typedef struct rag_safetensors {
  rag_st_tensor *t; /* in the header's order */
  size_t n;
} rag_safetensors;

/*
** Parses the header of the n-byte file at p into *out (freed with
** rag_safetensors_free, also after a failure). RAG_OK; RAG_EFORMAT (not the
** format, an unknown dtype) or RAG_ECORRUPT (truncated, offsets that do not
** tile the data) with the reason in why[whylen]; RAG_ENOMEM.
*/
int rag_safetensors_parse(const unsigned char *p, size_t n, rag_safetensors *out, char *why,
                          size_t whylen);
void rag_safetensors_free(rag_safetensors *s);

/* The tensor called `name`, or NULL. */
const rag_st_tensor *rag_safetensors_find(const rag_safetensors *s, const char *name);

#endif
