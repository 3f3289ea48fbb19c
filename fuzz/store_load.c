/*
** fuzz/store_load.c: rag_store_load_mem (the document store of rag.index) on
** any bytes. The first byte picks a mode and a load: 0 loads the rest as is;
** 1 builds a store from documents coded in the rest (ids, texts, chunks,
** metadata), dumps it, damages the dump with its CRCs left as they are and
** loads that; 2 edits the dump's section and recomputes every length and CRC,
** so the checks behind the checksums decide; 3 loads the rest with its size
** and CRCs recomputed. Its next bit picks a borrowing load or a copying one.
** A failed load must say RAG_EFORMAT, RAG_EVERSION or RAG_ECORRUPT with a
** reason; a loaded store must pass rag_store_check, find every document and
** chunk by name, walk every metadata encoding, take a put and a remove, and
** dump to bytes that load back and dump identically. An undamaged dump must
** load back to the same documents.
*/
#include <stdint.h>
#include <string.h>

#include "rag.h"
#include "rag_store.h"
#include "rag_vec.h" /* vecfuzz.h names rag_vec_bad */
#include "vecfuzz.h" /* the input cursor, must, the container's split/join/edit */

#define MAXDOCS 8
#define MAXCHUNKS 5
#define MAXTEXT 96
#define MAXID_BYTES 16 /* the longest id of vecfuzz.h is 3 bytes */

/* Every document and chunk is found by its name; every encoding walks. */
static void walk(const rag_store *s) {
  size_t i, j, n = rag_store_count(s);
  char name[MAXID_BYTES + 12];
  for (i = 0; i < n; i++) {
    const rag_store_doc *d = rag_store_doc_at(s, (uint32_t)i);
    rag_meta_iter it;
    const char *key;
    size_t keylen;
    rag_meta_value v;
    uint64_t entries = 0;
    must(rag_store_find(s, d->id, d->idlen) == i);
    must(rag_store_meta_check(d->meta, d->metalen));
    rag_meta_begin(&it, d->meta, d->metalen);
    while (rag_meta_next(&it, &key, &keylen, &v)) entries++;
    must(rag_store_check_doc(d) == RAG_OK);
    if (d->idlen > MAXID_BYTES) continue;
    for (j = 0; j < d->nchunks; j++) {
      uint32_t slot, k;
      size_t len = rag_store_chunk_name(name, d->id, d->idlen, (uint32_t)j + 1);
      must(rag_store_chunk_find(s, name, len, &slot, &k) && slot == i && k == j + 1);
      must(d->chunks[j].start >= 1 && d->chunks[j].stop <= d->textlen);
    }
    (void)entries;
  }
}

/* A metadata encoding from the input: up to 3 keys in order, each type. */
static size_t make_meta(input *in, unsigned char *p) {
  static const char *const keys[3] = {"a", "kind", "year"};
  size_t n = 1, i, nk = take(in) % 4;
  p[0] = (unsigned char)nk;
  for (i = 0; i < nk; i++) {
    unsigned t = 1 + take(in) % 6;
    size_t kl = strlen(keys[i]);
    p[n++] = (unsigned char)kl;
    memcpy(p + n, keys[i], kl);
    n += kl;
    p[n++] = (unsigned char)t;
    switch (t) {
      case RAG_META_STRING:
        p[n++] = 2;
        p[n++] = (unsigned char)('a' + take(in) % 4);
        p[n++] = 'x';
        break;
      case RAG_META_INT: p[n++] = (unsigned char)(take(in) & 0x7f); break;
      case RAG_META_NUMBER: {
        double x = (double)take(in) / 8 - 4;
        memcpy(p + n, &x, 8); /* little-endian hosts only, as the store */
        n += 8;
        break;
      }
      case RAG_META_LIST:
        p[n++] = 2;
        p[n++] = 1;
        p[n++] = (unsigned char)('a' + take(in) % 4);
        p[n++] = 0;
        break;
      default: break; /* false, true: no value */
    }
  }
  return n;
}

/* A store of up to MAXDOCS documents from the input; some puts are refused. */
static rag_store *build(input *in) {
  rag_store *s;
  size_t nd = 1 + take(in) % MAXDOCS, i;
  must(rag_store_new(&s) == RAG_OK);
  for (i = 0; i < nd && more(in); i++) {
    rag_store_doc d;
    rag_store_chunk ch[MAXCHUNKS];
    char text[MAXTEXT];
    unsigned char meta[64];
    int id = pick_id(take(in)), rc;
    size_t tl = take(in) % MAXTEXT, j;
    memset(&d, 0, sizeof d);
    for (j = 0; j < tl; j++) text[j] = (char)take(in);
    d.id = ids[id].s;
    d.idlen = ids[id].n;
    d.text = text;
    d.textlen = tl;
    d.has_title = take(in) & 1;
    d.title = "t";
    d.titlelen = d.has_title ? 1 : 0;
    d.has_source = take(in) & 1;
    d.source = "src/x.md";
    d.sourcelen = d.has_source ? 8 : 0;
    d.metalen = make_meta(in, meta);
    d.meta = meta;
    for (j = 0; j < RAG_STORE_HASH; j++) d.hash[j] = take(in);
    d.nchunks = tl > 0 ? take(in) % (MAXCHUNKS + 1) : 0;
    for (j = 0; j < d.nchunks; j++) {
      uint32_t a = 1 + take(in) % (uint32_t)tl, len = 1 + take(in) % 32;
      ch[j].start = a;
      ch[j].stop = a + len - 1 <= tl ? a + len - 1 : (uint32_t)tl;
      ch[j].tokens = take(in);
      ch[j].parent = take(in) % (uint32_t)(j + 1);
      ch[j].level = ch[j].parent ? 2 : take(in) % 2;
      ch[j].leaf = 1;
    }
    d.chunks = ch;
    rc = rag_store_put(s, &d);
    must(rc == RAG_OK || rc == RAG_EINVAL);
    if (take(in) % 8 == 0) {
      int removed;
      rag_store_remove(s, d.id, d.idlen, &removed);
    }
  }
  must(rag_store_check(s));
  return s;
}

/* The two stores hold the same documents, field for field. */
static void same(const rag_store *a, const rag_store *b) {
  size_t i, n = rag_store_count(a);
  must(rag_store_count(b) == n && rag_store_chunks(a) == rag_store_chunks(b) &&
       rag_store_leaves(a) == rag_store_leaves(b) && rag_store_bytes(a) == rag_store_bytes(b));
  for (i = 0; i < n; i++) {
    const rag_store_doc *x = rag_store_doc_at(a, (uint32_t)i), *y;
    uint32_t slot = rag_store_find(b, x->id, x->idlen);
    must(slot != RAG_IDS_NONE);
    y = rag_store_doc_at(b, slot);
    must(x->textlen == y->textlen && memcmp(x->text, y->text, x->textlen) == 0);
    must(x->has_title == y->has_title && x->has_source == y->has_source);
    must(x->metalen == y->metalen && memcmp(x->meta, y->meta, x->metalen) == 0);
    must(memcmp(x->hash, y->hash, RAG_STORE_HASH) == 0 && x->nchunks == y->nchunks);
    must(x->nchunks == 0 ||
         memcmp(x->chunks, y->chunks, x->nchunks * sizeof *x->chunks) == 0);
  }
}

/* A loaded store takes a put and a remove before anything reads its records
** (so that unread records move), then walks, dumps and loads back. */
static void exercise(rag_store *s) {
  unsigned char *d1 = NULL, *d2 = NULL;
  size_t n1 = 0, n2 = 0;
  rag_store *c = NULL;
  const char *why = NULL;
  rag_store_doc d;
  rag_store_chunk ch = {1, 3, 1, 0, 0, 1};
  int removed;
  if (rag_store_count(s) > 1) { /* replace slot 0's document, then remove it */
    char id[MAXID_BYTES];
    const rag_store_doc *f = rag_store_doc_at(s, 0); /* reads slot 0's record alone */
    size_t idlen = f->idlen < sizeof id ? f->idlen : sizeof id;
    memcpy(id, f->id, idlen);
    memset(&d, 0, sizeof d);
    d.id = id;
    d.idlen = idlen;
    d.text = "new";
    d.textlen = 3;
    d.meta = (const unsigned char *)"";
    d.metalen = 1;
    d.chunks = &ch;
    d.nchunks = 1;
    must(rag_store_put(s, &d) == RAG_OK);
    rag_store_remove(s, id, idlen, &removed);
    must(removed == 1);
  }
  must(rag_store_check(s));
  walk(s);
  must(rag_store_dump(s, &d1, &n1) == RAG_OK);
  must(rag_store_load_mem(d1, n1, 1, &c, &why) == RAG_OK);
  same(s, c);
  must(rag_store_dump(c, &d2, &n2) == RAG_OK && n1 == n2 && memcmp(d1, d2, n1) == 0);
  rag_store_free(c);
  rag_free(d2);
  rag_free(d1);
}

static void loaded(int rc, rag_store *s, const char *why) {
  if (rc == RAG_OK) {
    exercise(s);
    return;
  }
  must(rc == RAG_EFORMAT || rc == RAG_EVERSION || rc == RAG_ECORRUPT);
  must(why != NULL && why[0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rag_store *s = NULL;
  const char *why = NULL;
  int rc, mode, borrow;
  if (size < 1) return 0;
  mode = data[0] % 4;
  borrow = (data[0] >> 2) & 1;
  data++;
  size--;
  if (mode == 0 || mode == 3) {
    unsigned char *p = (unsigned char *)rag_malloc(size + 1);
    must(p != NULL);
    if (size) memcpy(p, data, size);
    if (mode == 3) fix_crcs(p, size, 1);
    rc = rag_store_load_mem(p, size, borrow, &s, &why);
    loaded(rc, s, why);
    rag_store_free(s);
    rag_free(p);
    return 0;
  }
  {
    input in;
    uint8_t nm, ops[4][5];
    size_t i, j, n0 = 0, n;
    unsigned char *d0 = NULL, *p;
    rag_store *a, *c = NULL;
    in.p = data;
    in.e = data + size;
    nm = 1 + take(&in) % 4;
    for (i = 0; i < 4; i++)
      for (j = 0; j < 5; j++) ops[i][j] = take(&in);
    a = build(&in);
    must(rag_store_dump(a, &d0, &n0) == RAG_OK);
    must(rag_store_load_mem(d0, n0, borrow, &c, &why) == RAG_OK);
    same(a, c);
    rag_store_free(c);
    rag_store_free(a);
    if (mode == 1) {
      n = damage(d0, n0, (const uint8_t(*)[5])ops, nm);
      rc = rag_store_load_mem(d0, n, borrow, &s, &why);
    } else {
      file f;
      split(&f, d0, n0, 1);
      for (i = 0; i < nm; i++)
        edit(&f, ops[i][0], ops[i][1], (uint32_t)ops[i][2] | (uint32_t)ops[i][3] << 8,
             ops[i][4]);
      p = join(&f, &n);
      unsplit(&f);
      rag_free(d0);
      d0 = p;
      rc = rag_store_load_mem(d0, n, borrow, &s, &why);
    }
    loaded(rc, s, why);
    rag_store_free(s);
    rag_free(d0);
  }
  return 0;
}
