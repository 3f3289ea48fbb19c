/*
** rag_store.c: the document and chunk store of rag.index (see rag_store.h).
** A document put in is copied into one block (its chunks, then its
** strings); a loaded document points into the file's bytes instead, which
** the store copied or borrows. A load checks every record and keeps only
** the ids and where each record starts; a record is read into its slot the
** first time it is asked for (rec), so a process that maps a large store
** and reads a few documents builds a few records, not all of them. A store
** that borrows its file (a read-only mapping shared by processes) keeps no
** record read from it: each is read again into one of RING buffers, so
** that its memory stays a few kilobytes however many documents it serves.
*/
#include "rag_store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rag_file.h"

static const unsigned char MAGIC[8] = {'R', 'A', 'G', 'S', 'T', 'O', 'R', 'E'};
#define FORMAT_VERSION 1u
#define RING 16 /* a borrowing store's buffers of records read */
#define READ 1   /* ready[slot]: r[slot] holds the document */
#define CHUNKS 2 /* ready[slot]: not read, but its chunks are in loaded (borrowing only) */

typedef struct slotrec {
  rag_store_doc d;
  unsigned char *own; /* the block of a put document; NULL when loaded */
} slotrec;

typedef struct lazyrec { /* a loaded document not read yet */
  size_t off;            /* its record in the file's bytes */
  size_t chunk0;         /* its first chunk in loaded */
  size_t nchunks;
} lazyrec;

struct rag_store {
  rag_ids ids;          /* document id -> slot */
  slotrec *r;           /* per slot; r[slot] holds a document once ready[slot] == READ */
  unsigned char *ready; /* per slot: READ, else a loaded record not read yet (lazy[slot]),
                           CHUNKS once its chunks are in loaded */
  size_t cap;           /* slots in r and ready */
  lazyrec *lazy;        /* per slot loaded (slots move down only, on removes) */
  size_t chunks, leaves, bytes, owned; /* of the live documents; owned: bytes of blocks */
  size_t longest;       /* bytes of the longest id held since the store began */
  unsigned char *base;      /* the copied file of a load without borrow */
  const unsigned char *image; /* the file's bytes (base, or borrowed), image + imagelen */
  rag_store_chunk *loaded;  /* the chunks of the loaded documents, filled as read */
  size_t baselen, imagelen, nloaded, nlazy;
  int borrowed;          /* image is the caller's: records read go to ring */
  slotrec ring[RING];    /* the records read last, oldest at ringpos */
  uint32_t ringslot[RING]; /* the slot each holds + 1, 0 for none */
  unsigned ringpos;
};

static int read_doc(rag_reader *r, rag_store_doc *d, rag_store_chunk *c, const char **why);
static size_t mark_leaves(rag_store_chunk *c, size_t n);

/* The record of a live slot, read from the file's bytes on first use (the
** load checked it), or on each use into the ring while the store borrows
** them. The store is not thread-safe, so this may write. */
static slotrec *rec(const rag_store *cs, uint32_t slot) {
  rag_store *s = (rag_store *)(uintptr_t)cs;
  if (s->ready[slot] != READ) {
    rag_reader r;
    rag_store_doc d;
    const char *why;
    rag_store_chunk *c = s->loaded + s->lazy[slot].chunk0;
    slotrec *to = &s->r[slot];
    if (s->borrowed) {
      unsigned i;
      for (i = 0; i < RING; i++)
        if (s->ringslot[i] == slot + 1) return &s->ring[i];
      to = &s->ring[s->ringpos];
      s->ringslot[s->ringpos] = slot + 1;
      s->ringpos = (s->ringpos + 1) % RING;
    }
    r.p = s->image + s->lazy[slot].off;
    r.e = s->image + s->imagelen;
    (void)read_doc(&r, &d, c, &why);
    (void)mark_leaves(c, d.nchunks);
    d.chunks = c;
    to->d = d;
    to->own = NULL;
    if (s->borrowed) {
      s->ready[slot] = CHUNKS;
      return to;
    }
    s->ready[slot] = READ;
  }
  return &s->r[slot];
}

/* Room for n slots in r and ready (grown alike). RAG_ENOMEM. */
static int slots_fit(rag_store *s, size_t n) {
  size_t c1 = s->cap, c2 = s->cap;
  slotrec *r;
  unsigned char *ready;
  if (n <= s->cap && s->r != NULL) return RAG_OK;
  if ((r = (slotrec *)rag_grow(s->r, &c1, n, sizeof *r)) == NULL) return RAG_ENOMEM;
  s->r = r;
  if ((ready = (unsigned char *)rag_grow(s->ready, &c2, n, 1)) == NULL) return RAG_ENOMEM;
  s->ready = ready;
  s->cap = c1 < c2 ? c1 : c2;
  return RAG_OK;
}

int rag_store_new(rag_store **out) {
  rag_store *s = (rag_store *)rag_malloc(sizeof *s);
  *out = NULL;
  if (s == NULL) return RAG_ENOMEM;
  memset(s, 0, sizeof *s);
  rag_ids_init(&s->ids);
  *out = s;
  return RAG_OK;
}

void rag_store_free(rag_store *s) {
  size_t i;
  if (s == NULL) return;
  for (i = 0; i < s->ids.n; i++)
    if (s->ready[i] == READ) rag_free(s->r[i].own);
  rag_free(s->r);
  rag_free(s->ready);
  rag_free(s->lazy);
  rag_ids_free(&s->ids);
  rag_free(s->base);
  rag_free(s->loaded);
  rag_free(s);
}

size_t rag_store_count(const rag_store *s) {
  return s->ids.n;
}

size_t rag_store_chunks(const rag_store *s) {
  return s->chunks;
}

size_t rag_store_leaves(const rag_store *s) {
  return s->leaves;
}

size_t rag_store_bytes(const rag_store *s) {
  return s->bytes;
}

size_t rag_store_memory(const rag_store *s) {
  return sizeof *s + rag_ids_memory(&s->ids) + s->cap * (sizeof *s->r + 1) + s->owned +
         s->baselen + s->nloaded * sizeof *s->loaded + s->nlazy * sizeof *s->lazy;
}

size_t rag_store_longest_id(const rag_store *s) {
  return s->longest;
}

const rag_store_doc *rag_store_doc_at(const rag_store *s, uint32_t slot) {
  return &rec(s, slot)->d;
}

const rag_store_chunk *rag_store_chunks_at(const rag_store *cs, uint32_t slot) {
  rag_store *s = (rag_store *)(uintptr_t)cs;
  if (s->ready[slot] == CHUNKS) return s->loaded + s->lazy[slot].chunk0;
  return rec(s, slot)->d.chunks; /* a borrowing store's record comes back CHUNKS */
}

uint32_t rag_store_find(const rag_store *s, const char *id, size_t len) {
  return rag_ids_find(&s->ids, id, len);
}

int rag_store_chunk_find(const rag_store *s, const char *name, size_t len, uint32_t *slot,
                         uint32_t *n) {
  size_t i = len, digits;
  uint64_t v = 0;
  while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9') i--;
  digits = len - i;
  if (digits == 0 || digits > 10 || i == 0 || name[i - 1] != '#' || name[i] == '0') return 0;
  for (; i < len; i++) v = v * 10 + (uint64_t)(name[i] - '0');
  *slot = rag_ids_find(&s->ids, name, len - digits - 1);
  if (*slot == RAG_IDS_NONE ||
      v > (s->ready[*slot] == READ ? s->r[*slot].d.nchunks : s->lazy[*slot].nchunks))
    return 0;
  *n = (uint32_t)v;
  return 1;
}

size_t rag_store_chunk_name(char *buf, const char *id, size_t idlen, uint32_t n) {
  char d[10];
  size_t k = 0, i;
  memcpy(buf, id, idlen);
  buf[idlen] = '#';
  do {
    d[k++] = (char)('0' + n % 10);
    n /= 10;
  } while (n > 0);
  for (i = 0; i < k; i++) buf[idlen + 1 + i] = d[k - 1 - i];
  return idlen + 1 + k;
}

/* {====== Metadata ======} */

static int64_t unzigzag(uint64_t u) {
  return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

/* Reads one value of type t; 0 when malformed. */
static int read_value(rag_reader *r, unsigned t, rag_meta_value *v) {
  uint64_t u, i;
  v->type = (int)t;
  switch (t) {
    case RAG_META_STRING:
      return rag_r_str(r, &v->s, &v->len);
    case RAG_META_INT:
      if (!rag_r_varint(r, &u)) return 0;
      v->i = unzigzag(u);
      v->num = (double)v->i;
      return 1;
    case RAG_META_NUMBER:
      return rag_r_f64(r, &v->num) && isfinite(v->num);
    case RAG_META_FALSE:
    case RAG_META_TRUE:
      return 1;
    case RAG_META_LIST:
      if (!rag_r_varint(r, &u) || u > (uint64_t)(r->e - r->p)) return 0;
      v->list.p = r->p;
      v->len = (size_t)u;
      for (i = 0; i < u; i++) {
        const char *s;
        size_t n;
        if (!rag_r_str(r, &s, &n)) return 0;
      }
      v->list.e = r->p;
      return 1;
    default:
      return 0;
  }
}

static int key_cmp(const char *a, size_t na, const char *b, size_t nb) {
  int c = memcmp(a, b, na < nb ? na : nb);
  if (c != 0) return c;
  return na < nb ? -1 : na > nb;
}

int rag_store_meta_check(const unsigned char *p, size_t n) {
  rag_reader r;
  uint64_t count, i;
  const char *prev = NULL;
  size_t prevlen = 0;
  r.p = p;
  r.e = p + n;
  if (!rag_r_varint(&r, &count) || count > n) return 0;
  for (i = 0; i < count; i++) {
    const char *k;
    size_t kl;
    unsigned t;
    rag_meta_value v;
    if (!rag_r_str(&r, &k, &kl) || !rag_r_u8(&r, &t) || !read_value(&r, t, &v)) return 0;
    if (prev != NULL && key_cmp(prev, prevlen, k, kl) >= 0) return 0;
    prev = k;
    prevlen = kl;
  }
  return r.p == r.e;
}

void rag_meta_begin(rag_meta_iter *it, const unsigned char *p, size_t n) {
  rag_reader r;
  r.p = p;
  r.e = p + n;
  if (!rag_r_varint(&r, &it->left)) it->left = 0;
  it->p = r.p;
  it->e = r.e;
}

int rag_meta_next(rag_meta_iter *it, const char **key, size_t *keylen, rag_meta_value *v) {
  rag_reader r;
  unsigned t;
  if (it->left == 0) return 0;
  r.p = it->p;
  r.e = it->e;
  if (!rag_r_str(&r, key, keylen) || !rag_r_u8(&r, &t) || !read_value(&r, t, v)) return 0;
  it->p = r.p;
  it->left--;
  return 1;
}

/* {====== Filters ======} */

static int equal_one(const rag_meta_value *v, const rag_filter_value *f) {
  switch (f->type) {
    case RAG_META_STRING:
      if (v->type == RAG_META_STRING) return v->len == f->len && memcmp(v->s, f->s, f->len) == 0;
      if (v->type == RAG_META_LIST) {
        rag_reader r = v->list;
        const char *s;
        size_t n;
        while (rag_r_str(&r, &s, &n))
          if (n == f->len && memcmp(s, f->s, n) == 0) return 1;
      }
      return 0;
    case RAG_META_NUMBER:
      return (v->type == RAG_META_INT || v->type == RAG_META_NUMBER) && v->num == f->num;
    default:
      return v->type == f->type;
  }
}

static int cond_holds(const rag_store_doc *d, const rag_filter_cond *c) {
  rag_meta_iter it;
  const char *k;
  size_t kl, i;
  rag_meta_value v;
  rag_meta_begin(&it, d->meta, d->metalen);
  while (rag_meta_next(&it, &k, &kl, &v)) {
    int cmp = key_cmp(k, kl, c->key, c->keylen);
    if (cmp > 0) return 0;
    if (cmp < 0) continue;
    if (c->range) {
      if (v.type != RAG_META_INT && v.type != RAG_META_NUMBER) return 0;
      return v.num >= c->gte && v.num <= c->lte;
    }
    for (i = 0; i < c->nany; i++)
      if (equal_one(&v, &c->any[i])) return 1;
    return 0;
  }
  return 0;
}

int rag_store_matches(const rag_store *s, uint32_t slot, const rag_store_filter *f) {
  size_t i;
  for (i = 0; i < f->nconds; i++)
    if (!cond_holds(&rec(s, slot)->d, &f->conds[i])) return 0;
  return 1;
}

/* {====== Changes ======} */

int rag_store_check_doc(const rag_store_doc *d) {
  size_t i;
  if (d->textlen > UINT32_MAX || d->nchunks > UINT32_MAX - 1) return RAG_ETOOBIG;
  if (!rag_store_meta_check(d->meta, d->metalen)) return RAG_EINVAL;
  for (i = 0; i < d->nchunks; i++) {
    const rag_store_chunk *c = &d->chunks[i];
    if (c->start < 1 || c->stop < c->start || c->stop > d->textlen || c->parent > i)
      return RAG_EINVAL;
  }
  return RAG_OK;
}

/* Marks the leaves of n chunks (no chunk names them as parent); returns their count. */
static size_t mark_leaves(rag_store_chunk *c, size_t n) {
  size_t i, leaves = 0;
  for (i = 0; i < n; i++) c[i].leaf = 1;
  for (i = 0; i < n; i++)
    if (c[i].parent > 0) c[c[i].parent - 1].leaf = 0;
  for (i = 0; i < n; i++) leaves += c[i].leaf;
  return leaves;
}

static void count_doc(rag_store *s, const rag_store_doc *d, int sign) {
  size_t leaves = 0, i;
  for (i = 0; i < d->nchunks; i++) leaves += d->chunks[i].leaf;
  if (sign > 0) {
    s->chunks += d->nchunks;
    s->leaves += leaves;
    s->bytes += d->textlen;
  } else {
    s->chunks -= d->nchunks;
    s->leaves -= leaves;
    s->bytes -= d->textlen;
  }
}

static const char *put_bytes(unsigned char **at, const char *p, size_t n) {
  unsigned char *q = *at;
  if (n > 0) memcpy(q, p, n);
  *at += n;
  return (const char *)q;
}

static size_t block_size(const rag_store_doc *d) {
  return d->nchunks * sizeof(rag_store_chunk) + d->idlen + d->textlen +
         (d->has_source ? d->sourcelen : 0) + (d->has_title ? d->titlelen : 0) + d->metalen;
}

int rag_store_put(rag_store *s, const rag_store_doc *d) {
  size_t size;
  uint32_t slot;
  unsigned char *block, *at;
  rag_store_doc c;
  int rc = rag_store_check_doc(d);
  if (rc != RAG_OK) return rc;
  size = block_size(d);
  block = (unsigned char *)rag_malloc(size > 0 ? size : 1);
  if (block == NULL) return RAG_ENOMEM;
  slot = rag_ids_find(&s->ids, d->id, d->idlen);
  if (slot == RAG_IDS_NONE &&
      ((rc = slots_fit(s, s->ids.n + 1)) != RAG_OK ||
       (rc = rag_ids_reserve(&s->ids, 1, d->idlen)) != RAG_OK)) {
    rag_free(block);
    return rc;
  }
  c = *d;
  at = block;
  if (d->nchunks > 0) memcpy(at, d->chunks, d->nchunks * sizeof *d->chunks);
  c.chunks = (const rag_store_chunk *)at;
  (void)mark_leaves((rag_store_chunk *)at, d->nchunks);
  at += d->nchunks * sizeof *d->chunks;
  c.id = put_bytes(&at, d->id, d->idlen);
  c.text = put_bytes(&at, d->text, d->textlen);
  c.source = d->has_source ? put_bytes(&at, d->source, d->sourcelen) : "";
  c.sourcelen = d->has_source ? d->sourcelen : 0;
  c.title = d->has_title ? put_bytes(&at, d->title, d->titlelen) : "";
  c.titlelen = d->has_title ? d->titlelen : 0;
  c.meta = (const unsigned char *)put_bytes(&at, (const char *)d->meta, d->metalen);
  if (slot == RAG_IDS_NONE) {
    slot = rag_ids_push(&s->ids, d->id, d->idlen);
  } else {
    slotrec *o = rec(s, slot);
    count_doc(s, &o->d, -1);
    if (o->own != NULL) s->owned -= block_size(&o->d);
    rag_free(o->own);
  }
  s->r[slot].d = c;
  s->r[slot].own = block;
  s->ready[slot] = READ;
  memset(s->ringslot, 0, sizeof s->ringslot); /* ids may name other slots now */
  if (d->idlen > s->longest) s->longest = d->idlen;
  s->owned += size;
  count_doc(s, &c, 1);
  return RAG_OK;
}

void rag_store_remove(rag_store *s, const char *id, size_t len, int *removed) {
  uint32_t slot = rag_ids_find(&s->ids, id, len), last;
  slotrec *o;
  *removed = slot != RAG_IDS_NONE;
  if (slot == RAG_IDS_NONE) return;
  o = rec(s, slot);
  count_doc(s, &o->d, -1);
  if (o->own != NULL) s->owned -= block_size(&o->d);
  rag_free(o->own);
  last = (uint32_t)s->ids.n - 1;
  rag_ids_swap_remove(&s->ids, slot);
  if (slot != last) { /* the last slot moves down: as read, or as where to read it */
    s->ready[slot] = s->ready[last];
    if (s->ready[last] == READ) s->r[slot] = s->r[last];
    else s->lazy[slot] = s->lazy[last];
  }
  memset(s->ringslot, 0, sizeof s->ringslot);
  rag_ids_tidy(&s->ids);
}

/* {====== Saving ======} */

typedef struct keyed {
  const char *id;
  size_t len;
  uint32_t slot;
} keyed;

static int by_id(const void *a, const void *b) {
  const keyed *x = (const keyed *)a, *y = (const keyed *)b;
  return key_cmp(x->id, x->len, y->id, y->len);
}

static uint64_t doc_size(const rag_store_doc *d) {
  uint64_t n = rag_str_size(d->idlen) + rag_str_size(d->textlen) + 1 + rag_str_size(d->metalen) +
               RAG_STORE_HASH + rag_varint_len(d->nchunks);
  size_t i;
  if (d->has_source) n += rag_str_size(d->sourcelen);
  if (d->has_title) n += rag_str_size(d->titlelen);
  for (i = 0; i < d->nchunks; i++) {
    const rag_store_chunk *c = &d->chunks[i];
    n += rag_varint_len(c->start) + rag_varint_len(c->stop) + rag_varint_len(c->tokens) +
         rag_varint_len(c->parent) + rag_varint_len(c->level);
  }
  return n;
}

typedef struct saving {
  const rag_store *s;
  const uint32_t *order;
} saving;

static void write_store(const void *obj, rag_writer *w) {
  const saving *sv = (const saving *)obj;
  const rag_store *s = sv->s;
  size_t n = s->ids.n, i, j;
  uint64_t len = rag_varint_len(n);
  for (i = 0; i < n; i++) len += doc_size(&rec(s, sv->order[i])->d);
  rag_w_header(w, MAGIC, FORMAT_VERSION, 1, RAG_FILE_HEADER + 16 + len);
  rag_w_begin(w, "DOCS", len);
  rag_w_varint(w, n);
  for (i = 0; i < n; i++) {
    const rag_store_doc *d = &rec(s, sv->order[i])->d;
    rag_w_str(w, d->id, d->idlen);
    rag_w_str(w, d->text, d->textlen);
    rag_w_uint(w, (uint64_t)((d->has_source ? 1 : 0) | (d->has_title ? 2 : 0)), 1);
    if (d->has_source) rag_w_str(w, d->source, d->sourcelen);
    if (d->has_title) rag_w_str(w, d->title, d->titlelen);
    rag_w_str(w, (const char *)d->meta, d->metalen);
    rag_w_put(w, d->hash, RAG_STORE_HASH);
    rag_w_varint(w, d->nchunks);
    for (j = 0; j < d->nchunks; j++) {
      const rag_store_chunk *c = &d->chunks[j];
      rag_w_varint(w, c->start);
      rag_w_varint(w, c->stop);
      rag_w_varint(w, c->tokens);
      rag_w_varint(w, c->parent);
      rag_w_varint(w, c->level);
    }
  }
  rag_w_end(w);
}

int rag_store_order(const rag_store *s, uint32_t *slots) {
  keyed *order = (keyed *)rag_malloc((s->ids.n > 0 ? s->ids.n : 1) * sizeof *order);
  size_t i;
  if (order == NULL) return RAG_ENOMEM;
  for (i = 0; i < s->ids.n; i++) {
    order[i].id = rag_ids_get(&s->ids, (uint32_t)i, &order[i].len);
    order[i].slot = (uint32_t)i;
  }
  qsort(order, s->ids.n, sizeof *order, by_id);
  for (i = 0; i < s->ids.n; i++) slots[i] = order[i].slot;
  rag_free(order);
  return RAG_OK;
}

/* Writes the store to path, or into a new buffer when path is NULL. */
static int save(const rag_store *s, const char *path, int *err, unsigned char **buf, size_t *n) {
  saving sv;
  uint32_t *order = (uint32_t *)rag_malloc((s->ids.n > 0 ? s->ids.n : 1) * sizeof *order);
  int rc;
  *err = 0;
  if (order == NULL) return RAG_ENOMEM;
  if ((rc = rag_store_order(s, order)) == RAG_OK) {
    sv.s = s;
    sv.order = order;
    rc = path != NULL ? rag_file_save(path, write_store, &sv, err)
                      : rag_file_dump(write_store, &sv, buf, n);
  }
  rag_free(order);
  return rc;
}

int rag_store_save(const rag_store *s, const char *path, int *err) {
  return save(s, path, err, NULL, NULL);
}

int rag_store_dump(const rag_store *s, unsigned char **buf, size_t *n) {
  int err;
  *buf = NULL;
  *n = 0;
  return save(s, NULL, &err, buf, n);
}

/* {====== Loading ======} */

/* Reads one document record; chunks go to *c when not NULL. 0 when malformed. */
static int read_doc(rag_reader *r, rag_store_doc *d, rag_store_chunk *c, const char **why) {
  unsigned flags;
  uint64_t nchunks, i, f[5];
  const unsigned char *hash;
  memset(d, 0, sizeof *d);
  if (!rag_r_str(r, &d->id, &d->idlen) || !rag_r_str(r, &d->text, &d->textlen) ||
      !rag_r_u8(r, &flags) || flags > 3)
    return rag_corrupt(why, "bad document"), 0;
  d->has_source = flags & 1;
  d->has_title = (flags & 2) != 0;
  d->source = d->title = "";
  if ((d->has_source && !rag_r_str(r, &d->source, &d->sourcelen)) ||
      (d->has_title && !rag_r_str(r, &d->title, &d->titlelen)) ||
      !rag_r_str(r, (const char **)&d->meta, &d->metalen) ||
      !rag_r_bytes(r, RAG_STORE_HASH, &hash) || !rag_r_varint(r, &nchunks) ||
      nchunks > (uint64_t)(r->e - r->p) || d->textlen > UINT32_MAX)
    return rag_corrupt(why, "bad document"), 0;
  if (!rag_store_meta_check(d->meta, d->metalen)) return rag_corrupt(why, "bad metadata"), 0;
  memcpy(d->hash, hash, RAG_STORE_HASH);
  d->nchunks = (size_t)nchunks;
  for (i = 0; i < nchunks; i++) {
    int k;
    for (k = 0; k < 5; k++)
      if (!rag_r_varint(r, &f[k]) || f[k] > UINT32_MAX) return rag_corrupt(why, "bad chunk"), 0;
    if (f[0] < 1 || f[1] < f[0] || f[1] > d->textlen || f[3] > i)
      return rag_corrupt(why, "chunk out of its text"), 0;
    if (c != NULL) {
      c[i].start = (uint32_t)f[0];
      c[i].stop = (uint32_t)f[1];
      c[i].tokens = (uint32_t)f[2];
      c[i].parent = (uint32_t)f[3];
      c[i].level = (uint32_t)f[4];
    }
  }
  return 1;
}

/* DOCS: every record checked, the ids linked, each record's place kept. */
static int load_docs(rag_store *s, rag_reader sec, const char **why) {
  rag_reader r = sec;
  uint64_t count, i, total = 0, bytes = 0;
  rag_store_doc d;
  rag_store_chunk *c = NULL; /* one document's chunks, to count its leaves */
  size_t ccap = 0;
  const char *prev = NULL;
  size_t prevlen = 0;
  int rc;
  if (!rag_r_varint(&r, &count) || count > (uint64_t)(r.e - r.p) || count > RAG_IDS_MAX)
    return rag_corrupt(why, "bad document count");
  for (i = 0; i < count; i++) { /* checks everything, sums the sizes */
    if (!read_doc(&r, &d, NULL, why)) return RAG_ECORRUPT;
    if (prev != NULL && key_cmp(prev, prevlen, d.id, d.idlen) >= 0)
      return rag_corrupt(why, "documents out of order");
    prev = d.id;
    prevlen = d.idlen;
    total += d.nchunks;
    bytes += d.idlen;
  }
  if (r.p != r.e) return rag_corrupt(why, "bad document section");
  if (RAG_MUL_OVERFLOWS((size_t)total + 1, sizeof *s->loaded) ||
      RAG_MUL_OVERFLOWS((size_t)count + 1, sizeof *s->lazy))
    return RAG_ENOMEM;
  /* loaded and r are filled as records are read: their pages stay untouched till then */
  s->loaded = (rag_store_chunk *)rag_malloc(((size_t)total + 1) * sizeof *s->loaded);
  s->lazy = (lazyrec *)rag_malloc(((size_t)count + 1) * sizeof *s->lazy);
  if (s->loaded == NULL || s->lazy == NULL || slots_fit(s, (size_t)count + 1) != RAG_OK ||
      (rc = rag_ids_reserve(&s->ids, (size_t)count, (size_t)bytes)) != RAG_OK)
    return RAG_ENOMEM;
  s->nloaded = (size_t)total;
  s->nlazy = (size_t)count;
  r = sec;
  (void)rag_r_varint(&r, &count);
  total = 0;
  for (i = 0; i < count; i++) {
    uint32_t slot;
    size_t off = (size_t)(r.p - s->image);
    (void)read_doc(&r, &d, NULL, why);
    if (d.nchunks > ccap) {
      rag_store_chunk *g = (rag_store_chunk *)rag_grow(c, &ccap, d.nchunks, sizeof *c);
      if (g == NULL) {
        rag_free(c);
        return RAG_ENOMEM;
      }
      c = g;
    }
    r.p = s->image + off; /* again, for the chunks */
    (void)read_doc(&r, &d, c, why);
    d.chunks = c;
    (void)mark_leaves(c, d.nchunks);
    count_doc(s, &d, 1);
    slot = rag_ids_push(&s->ids, d.id, d.idlen);
    s->lazy[slot].off = off;
    s->lazy[slot].chunk0 = (size_t)total;
    s->lazy[slot].nchunks = d.nchunks;
    s->ready[slot] = 0;
    if (d.idlen > s->longest) s->longest = d.idlen;
    total += d.nchunks;
  }
  rag_free(c);
  return RAG_OK;
}

int rag_store_load_mem(const unsigned char *p, size_t n, int borrow, rag_store **out,
                       const char **why) {
  static const char tags[1][5] = {"DOCS"};
  rag_reader sec[1];
  uint32_t version;
  rag_store *s = NULL;
  int rc;
  *out = NULL;
  rc = rag_store_new(&s);
  if (rc == RAG_OK && !borrow) {
    s->base = (unsigned char *)rag_malloc(n > 0 ? n : 1);
    if (s->base == NULL) rc = RAG_ENOMEM;
    else {
      if (n > 0) memcpy(s->base, p, n);
      s->baselen = n;
      p = s->base;
    }
  }
  if (rc == RAG_OK) {
    s->image = p;
    s->imagelen = n;
    s->borrowed = borrow;
    rc = rag_file_open(p, n, MAGIC, FORMAT_VERSION, tags, 1, sec, &version,
                       "not a document store (bad magic)", why);
  }
  if (rc == RAG_OK) rc = load_docs(s, sec[0], why);
  if (rc != RAG_OK) {
    rag_store_free(s);
    return rc;
  }
  *out = s;
  return RAG_OK;
}

int rag_store_check(const rag_store *s) {
  size_t i, chunks = 0, leaves = 0, bytes = 0, leaf;
  for (i = 0; i < s->ids.n; i++) {
    const rag_store_doc *d = &rec(s, (uint32_t)i)->d;
    size_t idl;
    const char *id = rag_ids_get(&s->ids, (uint32_t)i, &idl);
    if (idl != d->idlen || memcmp(id, d->id, idl) != 0) return 0;
    if (rag_store_check_doc(d) != RAG_OK) return 0;
    chunks += d->nchunks;
    for (leaf = 0; leaf < d->nchunks; leaf++) leaves += d->chunks[leaf].leaf;
    bytes += d->textlen;
  }
  return chunks == s->chunks && leaves == s->leaves && bytes == s->bytes;
}
