/*
** rag_hftok.c: a tokenizer.json subset run the way Hugging Face `tokenizers`
** (0.23) runs it: added tokens split out of the raw text, each piece between
** them normalized on its own, pre-tokenized into words, and each word given
** to WordPiece (greedy longest match) or Unigram (Viterbi with the unknown
** penalty and fused unknowns). Text is handled as code points while it is
** normalized and as UTF-8 afterwards. One hash table over the vocabulary
** holds every prefix of every token as well, so both models walk it like a
** trie.
*/
#include "rag_hftok.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <utf8proc.h>

#include "rag.h"
#include "rag_fnv.h"
#include "rag_probe.h"
#include "rag_text.h"
#include "rag_utf8.h"

#define NONE UINT32_MAX
#define UNK_PENALTY 10.0    /* tokenizers' K_UNK_PENALTY for Unigram */
#define MAX_ID 0x7fffffffu  /* ids beyond this are refused */

/* {====== Growable arrays ======} */

typedef struct cpbuf { uint32_t *p; size_t n, cap; } cpbuf;  /* code points */
typedef struct bytes { char *p; size_t n, cap; } bytes;
typedef struct span { size_t off, len; } span;
typedef struct spans { span *p; size_t n, cap; } spans;
typedef struct idbuf { uint32_t *p; size_t n, cap; } idbuf;

#define DEFINE_RESERVE(name, type, elem)                                    \
  static int name(type *b, size_t extra) {                                  \
    elem *q;                                                                \
    if (extra <= b->cap - b->n && b->p != NULL) return RAG_OK;              \
    if (extra > ((size_t)-1) - b->n) return RAG_ENOMEM;                     \
    q = (elem *)rag_grow(b->p, &b->cap, b->n + extra, sizeof *q);          \
    if (q == NULL) return RAG_ENOMEM;                                       \
    b->p = q;                                                               \
    return RAG_OK;                                                          \
  }

DEFINE_RESERVE(cp_reserve, cpbuf, uint32_t)
DEFINE_RESERVE(by_reserve, bytes, char)
DEFINE_RESERVE(sp_reserve, spans, span)
DEFINE_RESERVE(id_reserve, idbuf, uint32_t)

static int id_push(idbuf *b, uint32_t id) {
  if (id_reserve(b, 1) != RAG_OK) return RAG_ENOMEM;
  b->p[b->n++] = id;
  return RAG_OK;
}

static int sp_push(spans *b, size_t off, size_t len) {
  if (len == 0) return RAG_OK; /* tokenizers drops empty splits */
  if (sp_reserve(b, 1) != RAG_OK) return RAG_ENOMEM;
  b->p[b->n].off = off;
  b->p[b->n++].len = len;
  return RAG_OK;
}

/* {====== Unicode ======} */

/* Rust's char::is_whitespace: the White_Space property. */
static int is_ws(uint32_t c) {
  if (c < 128) return c == ' ' || (c >= 9 && c <= 13);
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Oniguruma's \s on Unicode text: 0009-000D, 0085 and the Z categories. */
static int is_regex_space(uint32_t c) {
  utf8proc_category_t k;
  if ((c >= 9 && c <= 13) || c == 0x85) return 1;
  k = utf8proc_category((utf8proc_int32_t)c);
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

/* BertNormalizer's control test: Cc, Cf and Co less tab, newline and return
** (unassigned code points are kept, as tokenizers keeps them). */
static int is_control(uint32_t c) {
  utf8proc_category_t k;
  if (c == '\t' || c == '\n' || c == '\r') return 0;
  k = utf8proc_category((utf8proc_int32_t)c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO;
}

static int is_chinese(uint32_t c) {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
         (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2b73f) ||
         (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b920 && c <= 0x2ceaf) ||
         (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

/* BertPreTokenizer's punctuation: ASCII punctuation or a P* category. */
static int is_punct(uint32_t c) {
  utf8proc_category_t k;
  if (c < 128) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                      (c >= 123 && c <= 126);
  k = utf8proc_category((utf8proc_int32_t)c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

static int to_cps(const char *s, size_t n, cpbuf *out) {
  size_t i = 0;
  out->n = 0;
  if (cp_reserve(out, n) != RAG_OK) return RAG_ENOMEM;
  while (i < n) {
    int32_t c;
    i += rag_utf8_decode_valid((const unsigned char *)s + i, &c);
    out->p[out->n++] = (uint32_t)c;
  }
  return RAG_OK;
}

static int to_utf8(const cpbuf *in, bytes *out) {
  size_t i;
  out->n = 0;
  if (in->n > ((size_t)-1) / 4 || by_reserve(out, in->n * 4) != RAG_OK) return RAG_ENOMEM;
  for (i = 0; i < in->n; i++)
    out->n += rag_utf8_encode(in->p[i], (unsigned char *)out->p + out->n);
  return RAG_OK;
}

/* {====== The vocabulary table ======} */

/* A token or a proper prefix of one (id NONE); len 0 marks a free slot. */
typedef struct slot {
  uint32_t off, len, id, h;
} slot;

/* {====== Components ======} */

/* Normalizer steps; a BertNormalizer becomes CLEAN, then NF(NFD) and DROPMN
** when it strips accents, then LOWER. */
typedef enum nkind { N_CLEAN, N_DROPMN, N_REPLACE, N_SPACES, N_STRIP, N_LOWER, N_NF } nkind;

typedef struct normop {
  nkind kind;
  unsigned char clean, chinese; /* CLEAN: clean_text, handle_chinese_chars */
  unsigned char left, right;    /* STRIP */
  int nf;                       /* NF: utf8proc options */
  uint32_t *pat, *rep;          /* REPLACE: pattern; REPLACE, SPACES: content */
  size_t npat, nrep;
} normop;

typedef enum pkind { P_BERT, P_WSSPLIT, P_META } pkind;

typedef struct preop {
  pkind kind;
  char rep[4]; /* Metaspace replacement, UTF-8 */
  size_t nrep;
  unsigned char prepend, split;
} preop;

typedef struct added {
  uint32_t off, len, id; /* content bytes in addpool */
  unsigned char lstrip, rstrip;
} added;

typedef struct addset {
  added *v;
  size_t n;
  unsigned char first[256]; /* some token starts with this byte */
} addset;

enum { WORDPIECE, UNIGRAM };

struct rag_hftok {
  int model;
  /* vocabulary */
  char *pool;  /* token bytes */
  size_t npool, poolcap;
  slot *slots; /* open addressing, mask + 1 slots */
  size_t mask, nslots_used;
  size_t maxlen, ntokens, median, nmodel, nids;
  double *scores; /* Unigram: by id */
  double unk_score;
  uint32_t unk; /* the model's unknown id */
  int has_unk_token;
  /* WordPiece */
  char *prefix;
  size_t nprefix, max_chars;
  /* pipeline */
  normop *norm;
  size_t nnorm;
  preop *pre;
  size_t npre;
  char *addpool;
  size_t naddpool;
  addset raw, normd; /* matched on raw text, on normalized pieces */
  size_t trunc;
  int has_trunc, trunc_left;
  /* scratch of one encode call */
  idbuf ids;
  cpbuf ca, cb;
  bytes nu8, ta, tb;
  spans sa, sb;
  double *score;
  size_t *start;
  uint32_t *node;
  size_t lattice_cap;
};

/* A string sought in the table: a then b (a prefix and a piece), hash h. */
typedef struct vkey {
  const rag_hftok *t;
  const char *a, *b;
  size_t alen, blen;
  uint32_t h;
} vkey;

/* Stops at a free slot or the one holding the string. */
static int at_string(const void *ud, size_t i) {
  const vkey *k = (const vkey *)ud;
  const slot *s = &k->t->slots[i];
  const char *p = k->t->pool + s->off;
  return s->len == 0 || (s->h == k->h && s->len == k->alen + k->blen &&
                         memcmp(p, k->a, k->alen) == 0 && memcmp(p + k->alen, k->b, k->blen) == 0);
}

/* The slot holding a then b, whose hash is h, or the free one where it would go. */
static slot *slot_of(const rag_hftok *t, uint32_t h, const char *a, size_t alen, const char *b,
                     size_t blen) {
  vkey k = {.t = t, .a = a, .b = b, .alen = alen, .blen = blen, .h = h};
  return &t->slots[rag_probe(t->mask, h, at_string, &k)];
}

static const slot *find(const rag_hftok *t, uint32_t h, const char *a, size_t alen,
                        const char *b, size_t blen) {
  const slot *s = slot_of(t, h, a, alen, b, blen);
  return s->len == 0 ? NULL : s;
}

static int is_free(const void *ud, size_t i) {
  return ((const slot *)ud)[i].len == 0;
}

static int rehash(rag_hftok *t) {
  size_t n = (t->mask + 1) * 2, i;
  slot *v;
  if (RAG_MUL_OVERFLOWS(n, sizeof *v) || (v = (slot *)rag_malloc(n * sizeof *v)) == NULL)
    return RAG_ENOMEM;
  memset(v, 0, n * sizeof *v);
  for (i = 0; i <= t->mask; i++) {
    const slot *s = &t->slots[i];
    if (s->len != 0) v[rag_probe(n - 1, s->h, is_free, v)] = *s;
  }
  rag_free(t->slots);
  t->slots = v;
  t->mask = n - 1;
  return RAG_OK;
}

/*
** Adds the token at pool offset `off` (len > 0 bytes) and all its prefixes.
** A repeated token takes the later id, as tokenizers' maps do. *isnew: the
** string was not a token before.
*/
static int vocab_add(rag_hftok *t, uint32_t off, uint32_t len, uint32_t id, int *isnew) {
  uint32_t h = RAG_FNV32_BASIS, k;
  *isnew = 0;
  for (k = 1; k <= len; k++) {
    slot *s;
    h = rag_fnv32_byte(h, (unsigned char)t->pool[off + k - 1]);
    s = slot_of(t, h, t->pool + off, k, "", 0);
    if (s->len == 0) {
      s->off = off;
      s->len = k;
      s->h = h;
      s->id = NONE;
      if (++t->nslots_used * 2 > t->mask + 1) {
        if (rehash(t) != RAG_OK) return RAG_ENOMEM;
        s = slot_of(t, h, t->pool + off, k, "", 0);
      }
    }
    if (k == len) {
      *isnew = s->id == NONE;
      s->id = id;
    }
  }
  return RAG_OK;
}

/* {====== Errors and JSON ======} */

static int fail(char *why, size_t whylen, int rc, const char *fmt, ...) {
  va_list ap;
  if (whylen > 0) {
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

static const cJSON *field(const cJSON *o, const char *k) {
  return cJSON_GetObjectItemCaseSensitive(o, k);
}

static int is_null(const cJSON *v) {
  return v == NULL || cJSON_IsNull(v);
}

/* A boolean field: `def` when absent or null; -1 when of another type. */
static int opt_bool(const cJSON *o, const char *k, int def) {
  const cJSON *v = field(o, k);
  if (is_null(v)) return def;
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

/* A string field, NULL when absent or not a string. */
static const char *opt_str(const cJSON *o, const char *k) {
  const cJSON *v = field(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A whole number in [0, max]. */
static int get_uint(const cJSON *v, double max, size_t *out) {
  double d;
  if (!cJSON_IsNumber(v)) return 0;
  d = v->valuedouble;
  if (!(d >= 0 && d <= max && d == floor(d))) return 0;
  *out = (size_t)d;
  return 1;
}

/* A JSON string as valid UTF-8 of *n bytes, or NULL. */
static const char *utf8_str(const cJSON *v, size_t *n) {
  if (!cJSON_IsString(v)) return NULL;
  *n = strlen(v->valuestring);
  if (rag_text_first_invalid((const unsigned char *)v->valuestring, *n) != *n) return NULL;
  return v->valuestring;
}

static int str_cps(const cJSON *v, uint32_t **cps, size_t *n) {
  size_t len, i = 0, k = 0;
  const char *s = utf8_str(v, &len);
  if (s == NULL) return RAG_EFORMAT;
  *cps = (uint32_t *)rag_malloc((len + 1) * sizeof **cps);
  if (*cps == NULL) return RAG_ENOMEM;
  while (i < len) {
    int32_t c;
    i += rag_utf8_decode_valid((const unsigned char *)s + i, &c);
    (*cps)[k++] = (uint32_t)c;
  }
  *n = k;
  return RAG_OK;
}

/* {====== Loading the model ======} */

static int pool_add(rag_hftok *t, const char *s, size_t n, uint32_t *off) {
  char *q;
  if (n > 0xffffffffu - t->npool) return RAG_ETOOBIG;
  if (n > t->poolcap - t->npool) {
    q = (char *)rag_grow(t->pool, &t->poolcap, t->npool + n, 1);
    if (q == NULL) return RAG_ENOMEM;
    t->pool = q;
  }
  memcpy(t->pool + t->npool, s, n);
  *off = (uint32_t)t->npool;
  t->npool += n;
  return RAG_OK;
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

/*
** Adds one model token. lens collects the byte length of each distinct
** string, for the median model2vec-rs pre-truncates with; *seen_empty
** dedups the empty string, which has no slot.
*/
static int add_token(rag_hftok *t, const char *s, size_t n, uint32_t id, size_t *lens,
                     int *seen_empty) {
  uint32_t off;
  int rc, isnew = 1;
  if (n == 0) {
    isnew = !*seen_empty;
    *seen_empty = 1;
  } else {
    if ((rc = pool_add(t, s, n, &off)) != RAG_OK) return rc;
    if ((rc = vocab_add(t, off, (uint32_t)n, id, &isnew)) != RAG_OK) return rc;
    if (n > t->maxlen) t->maxlen = n;
  }
  if (isnew) lens[t->ntokens++] = n;
  if ((size_t)id + 1 > t->nids) t->nids = (size_t)id + 1;
  return RAG_OK;
}

static const slot *lookup(const rag_hftok *t, const char *s, size_t n) {
  const slot *sl;
  if (n == 0) return NULL;
  sl = find(t, rag_fnv32(s, n), "", 0, s, n);
  return sl != NULL && sl->id != NONE ? sl : NULL;
}

static int load_wordpiece(rag_hftok *t, const cJSON *m, size_t *lens, int *seen_empty,
                          char *why, size_t whylen) {
  const cJSON *vocab = field(m, "vocab"), *e;
  const char *unk = opt_str(m, "unk_token"), *prefix = opt_str(m, "continuing_subword_prefix");
  const slot *sl;
  size_t len;
  int rc;
  if (unk == NULL && !is_null(field(m, "unk_token")))
    return fail(why, whylen, RAG_EFORMAT, "bad wordpiece unk_token");
  if (prefix == NULL && !is_null(field(m, "continuing_subword_prefix")))
    return fail(why, whylen, RAG_EFORMAT, "bad wordpiece continuing_subword_prefix");
  if (unk == NULL) unk = "[UNK]";
  if (prefix == NULL) prefix = "##";
  t->max_chars = 100;
  if (!is_null(field(m, "max_input_chars_per_word")) &&
      !get_uint(field(m, "max_input_chars_per_word"), 1e15, &t->max_chars))
    return fail(why, whylen, RAG_EFORMAT, "bad wordpiece max_input_chars_per_word");
  t->nprefix = strlen(prefix);
  if ((t->prefix = (char *)rag_malloc(t->nprefix + 1)) == NULL) return RAG_ENOMEM;
  memcpy(t->prefix, prefix, t->nprefix + 1);
  cJSON_ArrayForEach(e, vocab) {
    size_t id;
    if (e->string == NULL || !get_uint(e, MAX_ID, &id))
      return fail(why, whylen, RAG_EFORMAT, "bad wordpiece vocab entry");
    len = strlen(e->string);
    if (rag_text_first_invalid((const unsigned char *)e->string, len) != len)
      return fail(why, whylen, RAG_EFORMAT, "vocabulary token is not valid utf-8");
    if ((rc = add_token(t, e->string, len, (uint32_t)id, lens, seen_empty)) != RAG_OK) return rc;
  }
  t->nmodel = t->ntokens;
  if ((sl = lookup(t, unk, strlen(unk))) == NULL)
    return fail(why, whylen, RAG_EFORMAT, "unk_token '%s' is not in the vocabulary", unk);
  t->unk = sl->id;
  t->has_unk_token = 1;
  return RAG_OK;
}

static int load_unigram(rag_hftok *t, const cJSON *m, size_t nvocab, size_t *lens,
                        int *seen_empty, char *why, size_t whylen) {
  const cJSON *e;
  size_t i = 0, unk, len;
  double min = HUGE_VAL;
  int rc, fallback = opt_bool(m, "byte_fallback", 0);
  if (fallback != 0)
    return fail(why, whylen, RAG_EFORMAT,
                fallback < 0 ? "bad unigram byte_fallback" : "unigram byte_fallback is not supported");
  if (is_null(field(m, "unk_id")))
    return fail(why, whylen, RAG_EFORMAT, "unigram models without unk_id are not supported");
  if (!get_uint(field(m, "unk_id"), MAX_ID, &unk) || unk >= nvocab)
    return fail(why, whylen, RAG_EFORMAT, "bad unigram unk_id");
  if ((t->scores = (double *)rag_malloc(nvocab * sizeof *t->scores)) == NULL) return RAG_ENOMEM;
  cJSON_ArrayForEach(e, field(m, "vocab")) {
    const cJSON *piece = cJSON_GetArrayItem(e, 0), *score = cJSON_GetArrayItem(e, 1);
    const char *s = utf8_str(piece, &len);
    if (!cJSON_IsArray(e) || s == NULL || !cJSON_IsNumber(score) || !isfinite(score->valuedouble))
      return fail(why, whylen, RAG_EFORMAT, "bad unigram vocab entry %lu", (unsigned long)i);
    t->scores[i] = score->valuedouble;
    if (t->scores[i] < min) min = t->scores[i];
    if ((rc = add_token(t, s, len, (uint32_t)i, lens, seen_empty)) != RAG_OK) return rc;
    i++;
  }
  t->nmodel = nvocab;
  t->unk = (uint32_t)unk;
  t->unk_score = min - UNK_PENALTY;
  return RAG_OK;
}

static int load_model(rag_hftok *t, const cJSON *m, char *why, size_t whylen) {
  const char *type = opt_str(m, "type");
  const cJSON *vocab = field(m, "vocab");
  size_t n = (size_t)cJSON_GetArraySize(vocab), *lens;
  int rc, seen_empty = 0, unigram;
  if (!cJSON_IsObject(m)) return fail(why, whylen, RAG_EFORMAT, "tokenizer.json has no model");
  if (type == NULL) return fail(why, whylen, RAG_EFORMAT, "the tokenizer model has no type");
  unigram = strcmp(type, "Unigram") == 0;
  if (!unigram && strcmp(type, "WordPiece") != 0)
    return fail(why, whylen, RAG_EFORMAT, "unsupported tokenizer model type '%s'", type);
  if (unigram ? !cJSON_IsArray(vocab) : !cJSON_IsObject(vocab))
    return fail(why, whylen, RAG_EFORMAT, "bad %s vocab", unigram ? "unigram" : "wordpiece");
  if (n == 0) return fail(why, whylen, RAG_EFORMAT, "empty vocabulary");
  t->model = unigram ? UNIGRAM : WORDPIECE;
  if ((t->slots = (slot *)rag_malloc(1024 * sizeof *t->slots)) == NULL) return RAG_ENOMEM;
  memset(t->slots, 0, 1024 * sizeof *t->slots);
  t->mask = 1023;
  if ((lens = (size_t *)rag_malloc(n * sizeof *lens)) == NULL) return RAG_ENOMEM;
  rc = unigram ? load_unigram(t, m, n, lens, &seen_empty, why, whylen)
               : load_wordpiece(t, m, lens, &seen_empty, why, whylen);
  if (rc == RAG_OK) {
    qsort(lens, t->ntokens, sizeof *lens, cmp_size);
    t->median = t->ntokens > 0 ? lens[t->ntokens / 2] : 1;
  }
  rag_free(lens);
  if (rc == RAG_ETOOBIG) return fail(why, whylen, RAG_EFORMAT, "vocabulary too large");
  return rc;
}

/* {====== Normalizers ======} */

static normop *add_norm(rag_hftok *t, nkind kind) {
  normop *v = (normop *)rag_realloc(t->norm, (t->nnorm + 1) * sizeof *v);
  if (v == NULL) return NULL;
  t->norm = v;
  memset(&v[t->nnorm], 0, sizeof *v);
  v[t->nnorm].kind = kind;
  return &v[t->nnorm++];
}

static int load_bert_norm(rag_hftok *t, const cJSON *n, char *why, size_t whylen) {
  normop *op;
  int clean = opt_bool(n, "clean_text", 1), chinese = opt_bool(n, "handle_chinese_chars", 1);
  int lower = opt_bool(n, "lowercase", 1), accents = opt_bool(n, "strip_accents", -2);
  if (clean < 0 || chinese < 0 || lower < 0 || accents == -1)
    return fail(why, whylen, RAG_EFORMAT, "bad BertNormalizer option");
  if (accents == -2) accents = lower; /* null: follows lowercase */
  if (clean || chinese) {
    if ((op = add_norm(t, N_CLEAN)) == NULL) return RAG_ENOMEM;
    op->clean = (unsigned char)clean;
    op->chinese = (unsigned char)chinese;
  }
  if (accents) {
    if ((op = add_norm(t, N_NF)) == NULL) return RAG_ENOMEM;
    op->nf = UTF8PROC_DECOMPOSE;
    if ((op = add_norm(t, N_DROPMN)) == NULL) return RAG_ENOMEM;
  }
  if (lower && (op = add_norm(t, N_LOWER)) == NULL) return RAG_ENOMEM;
  return RAG_OK;
}

static int load_replace(rag_hftok *t, const cJSON *n, char *why, size_t whylen) {
  const cJSON *pat = field(n, "pattern");
  const cJSON *str = field(pat, "String"), *re = field(pat, "Regex");
  normop *op;
  int rc;
  if (str != NULL) {
    if ((op = add_norm(t, N_REPLACE)) == NULL) return RAG_ENOMEM;
    if ((rc = str_cps(str, &op->pat, &op->npat)) != RAG_OK || op->npat == 0) {
      if (rc == RAG_ENOMEM) return rc;
      return fail(why, whylen, RAG_EFORMAT, "bad Replace pattern");
    }
  } else if (cJSON_IsString(re)) {
    if (strcmp(re->valuestring, "\\s+") != 0)
      return fail(why, whylen, RAG_EFORMAT, "unsupported Replace regex '%s'", re->valuestring);
    if ((op = add_norm(t, N_SPACES)) == NULL) return RAG_ENOMEM;
  } else {
    return fail(why, whylen, RAG_EFORMAT, "bad Replace pattern");
  }
  if ((rc = str_cps(field(n, "content"), &op->rep, &op->nrep)) != RAG_OK) {
    if (rc == RAG_ENOMEM) return rc;
    return fail(why, whylen, RAG_EFORMAT, "bad Replace content");
  }
  return RAG_OK;
}

/* Loads one normalizer or pre-tokenizer (and whatever it holds). */
typedef int (*load_fn)(rag_hftok *t, const cJSON *n, char *why, size_t whylen);

/* A Sequence: each of `list`'s items in order; `what` names them in errors. */
static int load_seq(rag_hftok *t, const cJSON *list, load_fn load, const char *what, char *why,
                    size_t whylen) {
  const cJSON *e;
  if (!cJSON_IsArray(list)) return fail(why, whylen, RAG_EFORMAT, "bad %s Sequence", what);
  cJSON_ArrayForEach(e, list) {
    int rc;
    if (is_null(e)) return fail(why, whylen, RAG_EFORMAT, "bad %s Sequence", what);
    if ((rc = load(t, e, why, whylen)) != RAG_OK) return rc;
  }
  return RAG_OK;
}

static int load_norm(rag_hftok *t, const cJSON *n, char *why, size_t whylen) {
  static const struct {
    const char *name;
    int options;
  } forms[] = {
    {"NFD", UTF8PROC_DECOMPOSE},
    {"NFKD", UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT},
    {"NFC", UTF8PROC_COMPOSE},
    {"NFKC", UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
  };
  const char *type = opt_str(n, "type");
  normop *op;
  size_t i;
  if (is_null(n)) return RAG_OK;
  if (type == NULL) return fail(why, whylen, RAG_EFORMAT, "bad normalizer");
  if (strcmp(type, "Sequence") == 0)
    return load_seq(t, field(n, "normalizers"), load_norm, "normalizer", why, whylen);
  if (strcmp(type, "BertNormalizer") == 0) return load_bert_norm(t, n, why, whylen);
  if (strcmp(type, "Replace") == 0) return load_replace(t, n, why, whylen);
  if (strcmp(type, "Strip") == 0) {
    int left = opt_bool(n, "strip_left", 1), right = opt_bool(n, "strip_right", 1);
    if (left < 0 || right < 0) return fail(why, whylen, RAG_EFORMAT, "bad Strip option");
    if ((op = add_norm(t, N_STRIP)) == NULL) return RAG_ENOMEM;
    op->left = (unsigned char)left;
    op->right = (unsigned char)right;
    return RAG_OK;
  }
  if (strcmp(type, "Lowercase") == 0) {
    if ((op = add_norm(t, N_LOWER)) == NULL) return RAG_ENOMEM;
    return RAG_OK;
  }
  for (i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    if (strcmp(type, forms[i].name) == 0) {
      if ((op = add_norm(t, N_NF)) == NULL) return RAG_ENOMEM;
      op->nf = forms[i].options;
      return RAG_OK;
    }
  }
  return fail(why, whylen, RAG_EFORMAT, "unsupported normalizer '%s'", type);
}

/* Unicode normal form `options` of in into out, through UTF-8 (utf8proc). */
static int run_nf(rag_hftok *t, const cpbuf *in, cpbuf *out, int options) {
  utf8proc_ssize_t r;
  int rc;
  if ((rc = to_utf8(in, &t->nu8)) != RAG_OK) return rc;
  out->n = 0;
  for (;;) {
    r = utf8proc_decompose((const utf8proc_uint8_t *)t->nu8.p, (utf8proc_ssize_t)t->nu8.n,
                           (utf8proc_int32_t *)out->p, (utf8proc_ssize_t)out->cap, options);
    if (r < 0) return r == UTF8PROC_ERROR_NOMEM ? RAG_ENOMEM : RAG_ETOOBIG;
    if ((size_t)r <= out->cap && out->p != NULL) break;
    if (cp_reserve(out, (size_t)r + 1) != RAG_OK) return RAG_ENOMEM;
  }
  if (options & UTF8PROC_COMPOSE) {
    r = utf8proc_normalize_utf32((utf8proc_int32_t *)out->p, r, options);
    if (r < 0) return RAG_ETOOBIG;
  }
  out->n = (size_t)r;
  return RAG_OK;
}

static int run_clean(const normop *o, const cpbuf *in, cpbuf *out) {
  size_t i;
  out->n = 0;
  if (in->n > ((size_t)-1) / 3 || cp_reserve(out, in->n * 3) != RAG_OK) return RAG_ENOMEM;
  for (i = 0; i < in->n; i++) {
    uint32_t c = in->p[i];
    if (o->clean) {
      if (c == 0 || c == 0xfffd || is_control(c)) continue;
      if (is_ws(c)) c = ' ';
    }
    if (o->chinese && is_chinese(c)) {
      out->p[out->n++] = ' ';
      out->p[out->n++] = c;
      out->p[out->n++] = ' ';
    } else {
      out->p[out->n++] = c;
    }
  }
  return RAG_OK;
}

static int run_replace(const normop *o, const cpbuf *in, cpbuf *out) {
  size_t i = 0;
  out->n = 0;
  while (i < in->n) {
    int hit = o->kind == N_SPACES ? is_regex_space(in->p[i])
                                  : in->n - i >= o->npat &&
                                        memcmp(in->p + i, o->pat, o->npat * sizeof *o->pat) == 0;
    if (!hit) {
      if (cp_reserve(out, 1) != RAG_OK) return RAG_ENOMEM;
      out->p[out->n++] = in->p[i++];
      continue;
    }
    if (o->kind == N_SPACES)
      while (i < in->n && is_regex_space(in->p[i])) i++;
    else
      i += o->npat;
    if (cp_reserve(out, o->nrep) != RAG_OK) return RAG_ENOMEM;
    memcpy(out->p + out->n, o->rep, o->nrep * sizeof *o->rep);
    out->n += o->nrep;
  }
  return RAG_OK;
}

static int run_op(rag_hftok *t, const normop *o, const cpbuf *in, cpbuf *out) {
  size_t i, a = 0, b = in->n;
  switch (o->kind) {
    case N_CLEAN: return run_clean(o, in, out);
    case N_REPLACE:
    case N_SPACES: return run_replace(o, in, out);
    case N_NF: return run_nf(t, in, out, o->nf);
    case N_DROPMN:
    case N_STRIP:
      if (o->kind == N_STRIP) {
        while (o->left && a < b && is_ws(in->p[a])) a++;
        while (o->right && b > a && is_ws(in->p[b - 1])) b--;
      }
      out->n = 0;
      if (cp_reserve(out, b - a) != RAG_OK) return RAG_ENOMEM;
      for (i = a; i < b; i++) {
        if (o->kind == N_DROPMN &&
            utf8proc_category((utf8proc_int32_t)in->p[i]) == UTF8PROC_CATEGORY_MN)
          continue;
        out->p[out->n++] = in->p[i];
      }
      return RAG_OK;
    case N_LOWER:
      out->n = 0;
      if (in->n > ((size_t)-1) / 2 || cp_reserve(out, in->n * 2) != RAG_OK) return RAG_ENOMEM;
      for (i = 0; i < in->n; i++) {
        if (in->p[i] == 0x130) { /* Rust's full lowercase: U+0130 is "i" + U+0307 */
          out->p[out->n++] = 'i';
          out->p[out->n++] = 0x307;
        } else {
          out->p[out->n++] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)in->p[i]);
        }
      }
      return RAG_OK;
  }
  return RAG_OK;
}

/* Normalizes t->ca; *out is the buffer holding the result. */
static int normalize(rag_hftok *t, cpbuf **out) {
  cpbuf *in = &t->ca, *o = &t->cb, *tmp;
  size_t i;
  for (i = 0; i < t->nnorm && in->n > 0; i++) {
    int rc = run_op(t, &t->norm[i], in, o);
    if (rc != RAG_OK) return rc;
    tmp = in;
    in = o;
    o = tmp;
  }
  *out = in;
  return RAG_OK;
}

/* {====== Pre-tokenizers ======} */

static int load_pre(rag_hftok *t, const cJSON *p, char *why, size_t whylen) {
  const char *type = opt_str(p, "type");
  preop *v, *op;
  if (is_null(p)) return RAG_OK;
  if (type == NULL) return fail(why, whylen, RAG_EFORMAT, "bad pre_tokenizer");
  if (strcmp(type, "Sequence") == 0)
    return load_seq(t, field(p, "pretokenizers"), load_pre, "pre_tokenizer", why, whylen);
  if ((v = (preop *)rag_realloc(t->pre, (t->npre + 1) * sizeof *v)) == NULL) return RAG_ENOMEM;
  t->pre = v;
  op = &v[t->npre];
  memset(op, 0, sizeof *op);
  if (strcmp(type, "BertPreTokenizer") == 0) {
    op->kind = P_BERT;
  } else if (strcmp(type, "WhitespaceSplit") == 0) {
    op->kind = P_WSSPLIT;
  } else if (strcmp(type, "Metaspace") == 0) {
    const char *rep = opt_str(p, "replacement"), *scheme = opt_str(p, "prepend_scheme");
    size_t n;
    int split = opt_bool(p, "split", 1), prefix = opt_bool(p, "add_prefix_space", 1);
    op->kind = P_META;
    if (rep == NULL) rep = "\xe2\x96\x81"; /* U+2581 */
    n = strlen(rep);
    if (n == 0 || n > 4 || rag_text_first_invalid((const unsigned char *)rep, n) != n ||
        rag_utf8_lead_len((unsigned char)rep[0]) != n || split < 0 || prefix < 0)
      return fail(why, whylen, RAG_EFORMAT, "bad Metaspace options");
    memcpy(op->rep, rep, n);
    op->nrep = n;
    op->split = (unsigned char)split;
    if (scheme == NULL) {
      op->prepend = (unsigned char)prefix;
    } else if (strcmp(scheme, "always") == 0 || strcmp(scheme, "never") == 0) {
      op->prepend = scheme[0] == 'a';
    } else {
      return fail(why, whylen, RAG_EFORMAT, "unsupported Metaspace prepend_scheme '%s'", scheme);
    }
  } else {
    return fail(why, whylen, RAG_EFORMAT, "unsupported pre_tokenizer '%s'", type);
  }
  t->npre++;
  return RAG_OK;
}

/* BertPreTokenizer (punct = 1) or WhitespaceSplit over the words in sp. */
static int split_words(const bytes *txt, const spans *sp, spans *out, int punct) {
  size_t k;
  out->n = 0;
  for (k = 0; k < sp->n; k++) {
    size_t p = sp->p[k].off, e = p + sp->p[k].len, word = p;
    while (p < e) {
      int32_t c;
      size_t n = rag_utf8_decode_valid((const unsigned char *)txt->p + p, &c);
      if (is_ws(c) || (punct && is_punct(c))) {
        if (sp_push(out, word, p - word) != RAG_OK) return RAG_ENOMEM;
        if (!is_ws(c) && sp_push(out, p, n) != RAG_OK) return RAG_ENOMEM;
        word = p + n;
      }
      p += n;
    }
    if (sp_push(out, word, e - word) != RAG_OK) return RAG_ENOMEM;
  }

  return RAG_OK;
}

/* Metaspace: spaces to the replacement, the replacement prepended, then
** (split) a new word at each replacement, which stays with what follows. */
static int metaspace(const preop *o, const bytes *txt, const spans *sp, bytes *otx, spans *out) {
  size_t k, total = 0;
  for (k = 0; k < sp->n; k++) total += sp->p[k].len;
  otx->n = 0;
  out->n = 0;
  if (total > (((size_t)-1) - 4 * sp->n) / 4 || by_reserve(otx, 4 * total + 4 * sp->n) != RAG_OK)
    return RAG_ENOMEM;
  for (k = 0; k < sp->n; k++) {
    const char *s = txt->p + sp->p[k].off;
    size_t n = sp->p[k].len, i, begin = otx->n, word;
    if (o->prepend && !(s[0] == ' ' || (n >= o->nrep && memcmp(s, o->rep, o->nrep) == 0))) {
      memcpy(otx->p + otx->n, o->rep, o->nrep);
      otx->n += o->nrep;
    }
    for (i = 0; i < n; i++) {
      if (s[i] == ' ') {
        memcpy(otx->p + otx->n, o->rep, o->nrep);
        otx->n += o->nrep;
      } else {
        otx->p[otx->n++] = s[i];
      }
    }
    if (!o->split) {
      if (sp_push(out, begin, otx->n - begin) != RAG_OK) return RAG_ENOMEM;
      continue;
    }
    for (word = i = begin; i < otx->n; i += rag_utf8_lead_len((unsigned char)otx->p[i])) {
      if (i > word && otx->n - i >= o->nrep && memcmp(otx->p + i, o->rep, o->nrep) == 0) {
        if (sp_push(out, word, i - word) != RAG_OK) return RAG_ENOMEM;
        word = i;
      }
    }
    if (sp_push(out, word, otx->n - word) != RAG_OK) return RAG_ENOMEM;
  }
  return RAG_OK;
}

/* {====== Models ======} */

/* Greedy longest match from the left; a word with no full cover is one unk. */
static int wordpiece(rag_hftok *t, const char *w, size_t n) {
  size_t start = 0, mark = t->ids.n, nchars = 0, i;
  for (i = 0; i < n; i += rag_utf8_lead_len((unsigned char)w[i])) nchars++;
  if (nchars > t->max_chars) return id_push(&t->ids, t->unk);
  while (start < n) {
    uint32_t h = RAG_FNV32_BASIS, best = NONE;
    size_t end, bestend = start, alen = 0;
    const char *a = "";
    if (start > 0) {
      a = t->prefix;
      alen = t->nprefix;
      h = rag_fnv32_more(h, a, alen);
    }
    for (end = start + 1; end <= n; end++) {
      const slot *s;
      h = rag_fnv32_byte(h, (unsigned char)w[end - 1]);
      if ((s = find(t, h, a, alen, w + start, end - start)) == NULL) break;
      if (s->id != NONE) {
        best = s->id;
        bestend = end;
      }
    }
    if (best == NONE) {
      t->ids.n = mark;
      return id_push(&t->ids, t->unk);
    }
    if (id_push(&t->ids, best) != RAG_OK) return RAG_ENOMEM;
    start = bestend;
  }
  return RAG_OK;
}

static int grow_lattice(rag_hftok *t, size_t n) {
  double *score;
  size_t *start;
  uint32_t *node;
  if (n < t->lattice_cap) return RAG_OK;
  if (n >= ((size_t)-1) / sizeof(double) - 1) return RAG_ENOMEM;
  score = (double *)rag_malloc((n + 1) * sizeof *score);
  start = (size_t *)rag_malloc((n + 1) * sizeof *start);
  node = (uint32_t *)rag_malloc((n + 1) * sizeof *node);
  if (score == NULL || start == NULL || node == NULL) {
    rag_free(score);
    rag_free(start);
    rag_free(node);
    return RAG_ENOMEM;
  }
  rag_free(t->score);
  rag_free(t->start);
  rag_free(t->node);
  t->score = score;
  t->start = start;
  t->node = node;
  t->lattice_cap = n + 1;
  return RAG_OK;
}

/* The id of a fused run of unknowns: the run's text when it is a token. */
static uint32_t fused(const rag_hftok *t, const char *w, size_t a, size_t b) {
  const slot *s = lookup(t, w + a, b - a);
  return s != NULL ? s->id : t->unk;
}

/* tokenizers' Unigram::encode_optimized: best path ending at each byte,
** the first of equal scores kept, unknown runs fused when read back. */
static int unigram(rag_hftok *t, const char *w, size_t n) {
  size_t pos, k, end, run_a = 0, run_b = 0, mark = t->ids.n;
  double *score;
  size_t *start;
  uint32_t *node;
  if (grow_lattice(t, n) != RAG_OK) return RAG_ENOMEM;
  score = t->score;
  start = t->start;
  node = t->node;
  for (pos = 0; pos <= n; pos++) {
    score[pos] = 0;
    start[pos] = (size_t)-1;
  }
  for (pos = 0; pos < n;) {
    double base = score[pos], c;
    size_t mblen = rag_utf8_lead_len((unsigned char)w[pos]);
    uint32_t h = RAG_FNV32_BASIS;
    int single = 0;
    for (k = 1; k <= t->maxlen && k <= n - pos; k++) {
      const slot *s;
      h = rag_fnv32_byte(h, (unsigned char)w[pos + k - 1]);
      if ((s = find(t, h, "", 0, w + pos, k)) == NULL) break;
      if (s->id == NONE) continue;
      c = t->scores[s->id] + base;
      if (start[pos + k] == (size_t)-1 || c > score[pos + k]) {
        score[pos + k] = c;
        start[pos + k] = pos;
        node[pos + k] = s->id;
      }
      if (k == mblen) single = 1;
    }
    c = t->unk_score + base;
    if (!single && (start[pos + mblen] == (size_t)-1 || c > score[pos + mblen])) {
      score[pos + mblen] = c;
      start[pos + mblen] = pos;
      node[pos + mblen] = t->unk;
    }
    pos += mblen;
  }
  for (end = n; end > 0; end = start[end]) { /* read back, last token first */
    if (node[end] == t->unk) {
      if (run_b == 0) run_b = end;
      run_a = start[end];
      continue;
    }
    if (run_b != 0 && id_push(&t->ids, fused(t, w, run_a, run_b)) != RAG_OK) return RAG_ENOMEM;
    run_b = 0;
    if (id_push(&t->ids, node[end]) != RAG_OK) return RAG_ENOMEM;
  }
  if (run_b != 0 && id_push(&t->ids, fused(t, w, run_a, run_b)) != RAG_OK) return RAG_ENOMEM;
  for (k = 0; mark + k < t->ids.n - 1 - k; k++) {
    uint32_t x = t->ids.p[mark + k];
    t->ids.p[mark + k] = t->ids.p[t->ids.n - 1 - k];
    t->ids.p[t->ids.n - 1 - k] = x;
  }
  return RAG_OK;
}

/* {====== Encoding ======} */

/* Pre-tokenizes n > 0 bytes and runs the model over each word. */
static int pretokenize(rag_hftok *t, const char *s, size_t n) {
  bytes *txt = &t->ta, *otx = &t->tb, *bt;
  spans *sp = &t->sa, *osp = &t->sb, *st;
  size_t i;
  int rc;
  txt->n = sp->n = 0;
  if (by_reserve(txt, n) != RAG_OK || sp_push(sp, 0, n) != RAG_OK) return RAG_ENOMEM;
  memcpy(txt->p, s, n);
  txt->n = n;
  for (i = 0; i < t->npre; i++) {
    const preop *o = &t->pre[i];
    if (o->kind == P_META) {
      if ((rc = metaspace(o, txt, sp, otx, osp)) != RAG_OK) return rc;
      bt = txt;
      txt = otx;
      otx = bt;
    } else if ((rc = split_words(txt, sp, osp, o->kind == P_BERT)) != RAG_OK) {
      return rc;
    }
    st = sp;
    sp = osp;
    osp = st;
  }
  for (i = 0; i < sp->n; i++) {
    const char *w = txt->p + sp->p[i].off;
    rc = t->model == UNIGRAM ? unigram(t, w, sp->p[i].len) : wordpiece(t, w, sp->p[i].len);
    if (rc != RAG_OK) return rc;
  }
  return RAG_OK;
}

/* The leftmost, then longest, added token of `set` at or after byte i. */
static const added *next_added(const rag_hftok *t, const addset *set, const char *s, size_t n,
                               size_t *i) {
  for (; *i < n; (*i)++) {
    const added *best = NULL;
    size_t k;
    if (!set->first[(unsigned char)s[*i]]) continue;
    for (k = 0; k < set->n; k++) {
      const added *a = &set->v[k];
      if (a->len <= n - *i && (best == NULL || a->len > best->len) &&
          memcmp(s + *i, t->addpool + a->off, a->len) == 0)
        best = a;
    }
    if (best != NULL) return best;
  }
  return NULL;
}

static int piece(rag_hftok *t, const char *s, size_t n);

/* Splits s on the added tokens of `set`: their ids go out as they are, the
** text between goes to the next stage (normalizing, or pre-tokenizing). */
static int split_added(rag_hftok *t, const addset *set, const char *s, size_t n, int raw) {
  size_t from = 0, i = 0;
  const added *a;
  int rc;
  while ((a = next_added(t, set, s, n, &i)) != NULL) {
    size_t start = i, stop = i + a->len;
    int32_t c;
    while (a->lstrip && start > from) { /* whitespace before the token joins it */
      size_t p = start - 1;
      while (p > 0 && rag_utf8_is_cont((unsigned char)s[p])) p--;
      rag_utf8_decode_valid((const unsigned char *)s + p, &c);
      if (!is_ws(c)) break;
      start = p;
    }
    while (a->rstrip && stop < n) {
      size_t len = rag_utf8_decode_valid((const unsigned char *)s + stop, &c);
      if (!is_ws(c)) break;
      stop += len;
    }
    if (from < start) {
      rc = raw ? piece(t, s + from, start - from) : pretokenize(t, s + from, start - from);
      if (rc != RAG_OK) return rc;
    }
    if ((rc = id_push(&t->ids, a->id)) != RAG_OK) return rc;
    from = stop;
    i += a->len;
  }
  if (from < n) return raw ? piece(t, s + from, n - from) : pretokenize(t, s + from, n - from);
  return RAG_OK;
}

/* One piece of raw text between added tokens: normalized on its own. */
static int piece(rag_hftok *t, const char *s, size_t n) {
  cpbuf *norm;
  int rc;
  if ((rc = to_cps(s, n, &t->ca)) != RAG_OK || (rc = normalize(t, &norm)) != RAG_OK) return rc;
  if (norm->n == 0) return RAG_OK;
  if ((rc = to_utf8(norm, &t->nu8)) != RAG_OK) return rc;
  if (t->normd.n > 0) return split_added(t, &t->normd, t->nu8.p, t->nu8.n, 0);
  return pretokenize(t, t->nu8.p, t->nu8.n);
}

int rag_hftok_encode(rag_hftok *t, const char *s, size_t len, const uint32_t **ids, size_t *n) {
  int rc;
  t->ids.n = 0;
  *ids = NULL;
  *n = 0;
  if ((rc = split_added(t, &t->raw, s, len, 1)) != RAG_OK) return rc;
  if (t->has_trunc && t->ids.n > t->trunc) {
    if (t->trunc_left)
      memmove(t->ids.p, t->ids.p + (t->ids.n - t->trunc), t->trunc * sizeof *t->ids.p);
    t->ids.n = t->trunc;
  }
  *ids = t->ids.p;
  *n = t->ids.n;
  return RAG_OK;
}

/* {====== Added tokens, truncation, life cycle ======} */

/* The id tokenizers gives the i-th added token: an earlier added token's,
** the model's, or the next one after the model's vocabulary. */
static uint32_t added_id(const rag_hftok *t, const cJSON *list, const cJSON *item,
                         const char *content, size_t len, size_t *nnew) {
  const cJSON *e;
  const slot *s;
  cJSON_ArrayForEach(e, list) {
    size_t id;
    if (e == item) break;
    if (strcmp(opt_str(e, "content"), content) == 0 && get_uint(field(e, "id"), MAX_ID, &id))
      return (uint32_t)id;
  }
  if ((s = lookup(t, content, len)) != NULL) return s->id;
  return (uint32_t)(t->nmodel + (*nnew)++);
}

static int load_added(rag_hftok *t, const cJSON *list, char *why, size_t whylen) {
  const cJSON *e;
  size_t n = (size_t)cJSON_GetArraySize(list), nnew = 0, total = 0, id = 0, len = 0;
  if (is_null(list)) return RAG_OK;
  if (!cJSON_IsArray(list)) return fail(why, whylen, RAG_EFORMAT, "bad added_tokens");
  cJSON_ArrayForEach(e, list) {
    const char *c = utf8_str(field(e, "content"), &len);
    if (c == NULL || len == 0 || !get_uint(field(e, "id"), MAX_ID, &id))
      return fail(why, whylen, RAG_EFORMAT, "bad added token");
    if (len > 0xffffffffu / 8 - total)
      return fail(why, whylen, RAG_EFORMAT, "added tokens too large");
    total += 8 * len + 8; /* room for normalizing */
  }
  t->raw.v = (added *)rag_malloc((n + 1) * sizeof(added));
  t->normd.v = (added *)rag_malloc((n + 1) * sizeof(added));
  t->addpool = (char *)rag_malloc(total + 1);
  if (t->raw.v == NULL || t->normd.v == NULL || t->addpool == NULL) return RAG_ENOMEM;
  cJSON_ArrayForEach(e, list) {
    const char *c = utf8_str(field(e, "content"), &len);
    int special = opt_bool(e, "special", 0), single = opt_bool(e, "single_word", 0);
    int lstrip = opt_bool(e, "lstrip", 0), rstrip = opt_bool(e, "rstrip", 0);
    int normd = opt_bool(e, "normalized", special < 1);
    uint32_t want;
    addset *set;
    added *a;
    get_uint(field(e, "id"), MAX_ID, &id);
    if (special < 0 || single < 0 || lstrip < 0 || rstrip < 0 || normd < 0)
      return fail(why, whylen, RAG_EFORMAT, "bad added token '%s'", c);
    if (single)
      return fail(why, whylen, RAG_EFORMAT, "added token '%s': single_word is not supported", c);
    want = added_id(t, list, e, c, len, &nnew);
    if (want != id)
      return fail(why, whylen, RAG_ECORRUPT, "added token '%s' has id %lu, not %lu", c,
                  (unsigned long)id, (unsigned long)want);
    if (id + 1 > t->nids) t->nids = id + 1;
    set = normd ? &t->normd : &t->raw;
    a = &set->v[set->n];
    a->off = (uint32_t)t->naddpool;
    a->id = (uint32_t)id;
    a->lstrip = (unsigned char)lstrip;
    a->rstrip = (unsigned char)rstrip;
    if (set == &t->normd) { /* matched in normalized text: normalize it too */
      cpbuf *out;
      int rc;
      if ((rc = to_cps(c, len, &t->ca)) != RAG_OK || (rc = normalize(t, &out)) != RAG_OK ||
          (rc = to_utf8(out, &t->nu8)) != RAG_OK)
        return rc;
      if (t->nu8.n == 0 || t->nu8.n > total - t->naddpool)
        return fail(why, whylen, RAG_EFORMAT, "added token '%s' normalizes to nothing", c);
      c = t->nu8.p;
      len = t->nu8.n;
    }
    memcpy(t->addpool + t->naddpool, c, len);
    a->len = (uint32_t)len;
    t->naddpool += len;
    set->first[(unsigned char)c[0]] = 1;
    set->n++;
  }
  return RAG_OK;
}

static int load_limits(rag_hftok *t, const cJSON *root, char *why, size_t whylen) {
  const cJSON *tr = field(root, "truncation"), *pad = field(root, "padding");
  if (!is_null(tr)) {
    const char *dir = opt_str(tr, "direction"), *strategy = opt_str(tr, "strategy");
    if (!get_uint(field(tr, "max_length"), 1e15, &t->trunc))
      return fail(why, whylen, RAG_EFORMAT, "bad truncation");
    if (dir != NULL && strcmp(dir, "Right") != 0 && strcmp(dir, "Left") != 0)
      return fail(why, whylen, RAG_EFORMAT, "bad truncation direction");
    if (strategy != NULL && strcmp(strategy, "OnlySecond") == 0)
      return fail(why, whylen, RAG_EFORMAT, "unsupported truncation strategy '%s'", strategy);
    t->has_trunc = 1;
    t->trunc_left = dir != NULL && strcmp(dir, "Left") == 0;
  }
  if (!is_null(pad)) { /* a batch of one is never padded to its own longest */
    const char *strategy = opt_str(pad, "strategy");
    if (strategy == NULL || strcmp(strategy, "BatchLongest") != 0 ||
        !is_null(field(pad, "pad_to_multiple_of")))
      return fail(why, whylen, RAG_EFORMAT, "unsupported padding (only BatchLongest)");
  }
  return RAG_OK;
}

int rag_hftok_new(const char *json, size_t len, rag_hftok **out, char *why, size_t whylen) {
  cJSON *root = cJSON_ParseWithLength(json, len);
  rag_hftok *t;
  int rc;
  *out = NULL;
  if (whylen > 0) why[0] = '\0';
  if (root == NULL || !cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return fail(why, whylen, RAG_EFORMAT, "not a valid json object");
  }
  if ((t = (rag_hftok *)rag_malloc(sizeof *t)) == NULL) {
    cJSON_Delete(root);
    return RAG_ENOMEM;
  }
  memset(t, 0, sizeof *t);
  if ((rc = load_model(t, field(root, "model"), why, whylen)) == RAG_OK &&
      (rc = load_norm(t, field(root, "normalizer"), why, whylen)) == RAG_OK &&
      (rc = load_pre(t, field(root, "pre_tokenizer"), why, whylen)) == RAG_OK &&
      (rc = load_added(t, field(root, "added_tokens"), why, whylen)) == RAG_OK)
    rc = load_limits(t, root, why, whylen);
  cJSON_Delete(root);
  if (rc != RAG_OK) {
    rag_hftok_free(t);
    return rc;
  }
  *out = t;
  return RAG_OK;
}

void rag_hftok_free(rag_hftok *t) {
  size_t i;
  if (t == NULL) return;
  for (i = 0; i < t->nnorm; i++) {
    rag_free(t->norm[i].pat);
    rag_free(t->norm[i].rep);
  }
  rag_free(t->norm);
  rag_free(t->pre);
  rag_free(t->pool);
  rag_free(t->slots);
  rag_free(t->scores);
  rag_free(t->prefix);
  rag_free(t->addpool);
  rag_free(t->raw.v);
  rag_free(t->normd.v);
  rag_free(t->ids.p);
  rag_free(t->ca.p);
  rag_free(t->cb.p);
  rag_free(t->nu8.p);
  rag_free(t->ta.p);
  rag_free(t->tb.p);
  rag_free(t->sa.p);
  rag_free(t->sb.p);
  rag_free(t->score);
  rag_free(t->start);
  rag_free(t->node);
  rag_free(t);
}

void rag_hftok_describe(const rag_hftok *t, rag_hftok_info *info) {
  info->model = t->model == UNIGRAM ? "Unigram" : "WordPiece";
  info->nids = t->nids;
  info->ntokens = t->ntokens;
  info->median = t->median;
  info->has_unk = t->has_unk_token;
  info->unk = t->unk;
}
