/*
** rag_safetensors.c: parsing and checking a safetensors header (the
** grammar is in rag_safetensors.h).
*/
#include "rag_safetensors.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "rag_file.h"

#define MAX_HEADER 100000000u /* the safetensors library's limit */

static const struct {
  const char *name;
  size_t size;
  int code;
} dtypes[] = {
  {"F32", 4, RAG_ST_F32}, {"F16", 2, RAG_ST_F16}, {"I8", 1, RAG_ST_I8},
  {"F64", 8, RAG_ST_F64}, {"I32", 4, RAG_ST_I32}, {"I64", 8, RAG_ST_I64},
  {"BF16", 2, RAG_ST_OTHER}, {"I16", 2, RAG_ST_OTHER}, {"U8", 1, RAG_ST_OTHER},
  {"U16", 2, RAG_ST_OTHER}, {"U32", 4, RAG_ST_OTHER}, {"U64", 8, RAG_ST_OTHER},
  {"BOOL", 1, RAG_ST_OTHER}, {"F8_E4M3", 1, RAG_ST_OTHER}, {"F8_E5M2", 1, RAG_ST_OTHER},
};

static int fail(char *why, size_t whylen, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
  return rc;
}

static int whole(const cJSON *v, size_t *out) {
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0) ||
      v->valuedouble != floor(v->valuedouble))
    return 0;
  *out = (size_t)v->valuedouble;
  return 1;
}

/* Reads one header entry (name already set); RAG_EFORMAT or RAG_ECORRUPT. */
static int read_tensor(const cJSON *j, size_t datalen, rag_st_tensor *t, char *why,
                       size_t whylen) {
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets"), *d;
  size_t i, n = 1;
  if (!cJSON_IsObject(j) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) ||
      !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
      cJSON_GetArraySize(shape) > RAG_ST_MAXRANK ||
      !whole(cJSON_GetArrayItem(offs, 0), &t->begin) || !whole(cJSON_GetArrayItem(offs, 1), &t->end))
    return fail(why, whylen, RAG_EFORMAT, "bad safetensors header entry '%s'", t->name);
  for (i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (strcmp(dt->valuestring, dtypes[i].name) == 0) break;
  if (i == sizeof dtypes / sizeof dtypes[0])
    return fail(why, whylen, RAG_EFORMAT, "tensor '%s': unknown dtype '%s'", t->name,
                dt->valuestring);
  t->elem = dtypes[i].size;
  t->dtype = dtypes[i].code;
  t->dtype_name = dtypes[i].name;
  cJSON_ArrayForEach(d, shape) {
    if (!whole(d, &t->shape[t->rank]))
      return fail(why, whylen, RAG_EFORMAT, "tensor '%s': bad shape", t->name);
    if (RAG_MUL_OVERFLOWS(n, t->shape[t->rank]))
      return fail(why, whylen, RAG_ECORRUPT, "tensor '%s': shape too large", t->name);
    n *= t->shape[t->rank++];
  }
  t->count = n;
  if (RAG_MUL_OVERFLOWS(n, t->elem) || t->begin > t->end || t->end > datalen ||
      t->end - t->begin != n * t->elem)
    return fail(why, whylen, RAG_ECORRUPT, "tensor '%s': data offsets do not match its shape",
                t->name);
  return RAG_OK;
}

static int cmp_begin(const void *a, const void *b) {
  const rag_st_tensor *x = *(const rag_st_tensor *const *)a, *y = *(const rag_st_tensor *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Do the tensors tile the data section exactly? */
static int check_tiling(rag_st_tensor *t, size_t n, size_t datalen, char *why, size_t whylen) {
  rag_st_tensor **order;
  size_t i, at = 0;
  int rc = RAG_OK;
  if ((order = (rag_st_tensor **)rag_malloc((n + 1) * sizeof *order)) == NULL) return RAG_ENOMEM;
  for (i = 0; i < n; i++) order[i] = &t[i];
  qsort(order, n, sizeof *order, cmp_begin);
  for (i = 0; i < n && rc == RAG_OK; i++) {
    if (order[i]->begin != at)
      rc = fail(why, whylen, RAG_ECORRUPT, "tensor '%s': data offsets overlap or leave a gap",
                order[i]->name);
    at = order[i]->end;
  }
  if (rc == RAG_OK && at != datalen)
    rc = fail(why, whylen, RAG_ECORRUPT, "%lu bytes after the last tensor",
              (unsigned long)(datalen - at));
  rag_free(order);
  return rc;
}

int rag_safetensors_parse(const unsigned char *p, size_t n, rag_safetensors *out, char *why,
                          size_t whylen) {
  cJSON *root, *j;
  size_t hlen, count, k = 0, datalen, i;
  int rc = RAG_OK;
  out->t = NULL;
  out->n = 0;
  if (n < 8) return fail(why, whylen, RAG_ECORRUPT, "truncated safetensors header");
  if (rag_le(p, 8) > n - 8)
    return fail(why, whylen, RAG_ECORRUPT, "header length larger than the file");
  hlen = (size_t)rag_le(p, 8);
  if (hlen > MAX_HEADER) return fail(why, whylen, RAG_EFORMAT, "safetensors header too large");
  datalen = n - 8 - hlen;
  root = cJSON_ParseWithLength((const char *)p + 8, hlen);
  if (root == NULL || !cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return fail(why, whylen, RAG_EFORMAT, "bad safetensors header: not a json object");
  }
  count = (size_t)cJSON_GetArraySize(root);
  if ((out->t = (rag_st_tensor *)rag_malloc((count + 1) * sizeof *out->t)) == NULL) {
    cJSON_Delete(root);
    return RAG_ENOMEM;
  }
  cJSON_ArrayForEach(j, root) {
    rag_st_tensor *t = &out->t[k];
    size_t len;
    if (j->string != NULL && strcmp(j->string, "__metadata__") == 0) continue;
    memset(t, 0, sizeof *t);
    len = j->string != NULL ? strlen(j->string) : 0;
    if ((t->name = (char *)rag_malloc(len + 1)) == NULL) {
      rc = RAG_ENOMEM;
      break;
    }
    memcpy(t->name, j->string != NULL ? j->string : "", len + 1);
    out->n = ++k;
    if ((rc = read_tensor(j, datalen, t, why, whylen)) != RAG_OK) break;
  }
  cJSON_Delete(root);
  if (rc == RAG_OK) rc = check_tiling(out->t, k, datalen, why, whylen);
  for (i = 0; i < k && rc == RAG_OK; i++) {
    out->t[i].begin += 8 + hlen;
    out->t[i].end += 8 + hlen;
  }
  return rc;
}

void rag_safetensors_free(rag_safetensors *s) {
  size_t i;
  if (s == NULL || s->t == NULL) return;
  for (i = 0; i < s->n; i++) rag_free(s->t[i].name);
  rag_free(s->t);
  s->t = NULL;
  s->n = 0;
}

const rag_st_tensor *rag_safetensors_find(const rag_safetensors *s, const char *name) {
  size_t i;
  for (i = 0; i < s->n; i++)
    if (strcmp(s->t[i].name, name) == 0) return &s->t[i];
  return NULL;
}
