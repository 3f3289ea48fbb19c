/*
** rag_bm25_file.c: the BM25 index's file: saving, and loading with every
** section checked in order.
**
** File format (all integers little-endian; varint = LEB128, at most 10 bytes):
**
**   file    = header section{5}
**   header  = magic "RAGBM25\0" version:u32 nsections:u32 size:u64 crc:u32
**             (size = the file's length; crc = CRC-32 of the 24 bytes before it)
**   section = tag:4 length:u64 payload[length] crc:u32
**             (crc = CRC-32 of tag, length and payload)
**   sections, in this order:
**     "PARM"  variant:u8 k1:f64 b:f64 delta:f64
**     "ANLZ"  lang:str stem:u8 lowercase:u8 cjk:u8 stopwords:u8 nwords:varint str{nwords}
**     "DOCS"  ndocs:varint (id:str dl:varint){ndocs}
**     "TERM"  nterms:u32 nslots:u32 entry{nterms + 1} slot{nslots} pool
**     "POST"  the posting bytes of every term in TERM order, plen each
**   entry   = pool:u32 post:u64 df:u32
**             (term i's bytes are pool[entry i's pool, entry i+1's pool) and its
**             list POST[entry i's post, entry i+1's post); the last entry has
**             pool = the pool's length, post = POST's length, df = 0)
**   slot    = u32: a term number + 1, or 0 for an empty slot; nslots is a power
**             of two, at least 2 and at least 2 * nterms; a term of rag_fnv32
**             hash h is in the first slot from h mod nslots on (wrapping) not
**             taken by a term before it
**   pool    = the terms' bytes, in term order, each at least one byte
**   str     = len:varint bytes[len]
**   posting = varint(gap << 1 | 1) when tf = 1, else varint(gap << 1) varint(tf),
**             where gap = doc - (previous doc + 1), the first previous doc being -1
**
** Version 2. The fixed-width TERM section lets a mapped file's dictionary be
** used where it lies (rag_bm25_load_mem with borrow): a lookup hashes the
** term and probes the slots, reading no more than it compares. Version 1,
** still read (into memory), had instead
**     "TERM"  nterms:varint (term:str df:varint plen:varint){nterms}
**
** A file is loaded only when every checksum and every count agrees: df
** equals the list's length, documents increase and exist, the term
** frequencies of each document add up to its length, ids and terms are
** unique, every term is found through the slots.
*/
#include "rag_bm25.h"

#include <string.h>

#include "rag_bm25_internal.h"
#include "rag_file.h"
#include "rag_fnv.h"
#include "rag_probe.h"

#define DEAD RAG_BM25_DEAD
#define NONE RAG_BM25_NONE
#define MAX_DOCS RAG_BM25_MAX_DOCS

static const unsigned char MAGIC[8] = {'R', 'A', 'G', 'B', 'M', '2', '5', 0};
#define FORMAT_VERSION 2u
#define NSECTIONS 5u

typedef rag_bm25_term_entry term;

/* {====== Saving ======} */

/* The index being written and its TERM slots, made beforehand (they can fail). */
typedef struct saver {
  const rag_bm25 *b;
  uint32_t *slots;
  size_t nslots;
} saver;

/* Whether term i has live documents (a dictionary in place has only those). */
static int live(const rag_bm25 *b, size_t i) {
  return b->vterm != NULL || b->terms[i].df != 0;
}

/* The slots of the live terms, numbered in order. RAG_ENOMEM, RAG_ETOOBIG. */
static int make_slots(saver *sv) {
  const rag_bm25 *b = sv->b;
  size_t n = 2, i, j = 0;
  if (b->live_terms > (size_t)1 << 30) return RAG_ETOOBIG;
  while (n < 2 * b->live_terms) n *= 2;
  sv->nslots = n;
  sv->slots = (uint32_t *)rag_malloc(n * sizeof *sv->slots);
  if (sv->slots == NULL) return RAG_ENOMEM;
  memset(sv->slots, 0, n * sizeof *sv->slots);
  for (i = 0; i < b->nterms; i++) {
    rag_bm25_tinfo t;
    if (!live(b, i)) continue;
    rag_bm25_term_info(b, (uint32_t)i, &t);
    sv->slots[rag_probe_holding(sv->slots, n - 1, rag_fnv32(t.s, t.len), 0)] = (uint32_t)++j;
  }
  return RAG_OK;
}

/* The byte length of each section's payload. */
static void measure(const saver *sv, uint64_t len[NSECTIONS]) {
  const rag_bm25 *b = sv->b;
  const rag_analyzer_opts *a = &b->o.analyzer;
  size_t i, idlen;
  len[0] = 1 + 3 * 8;
  len[1] = rag_str_size(strlen(a->lang)) + 4 + rag_varint_len(a->nwords);
  for (i = 0; i < a->nwords; i++) len[1] += rag_str_size(strlen(a->words[i]));
  len[2] = rag_varint_len(b->ids.n);
  for (i = 0; i < b->ids.n; i++) {
    (void)rag_ids_get(&b->ids, (uint32_t)i, &idlen);
    len[2] += rag_str_size(idlen) + rag_varint_len(b->dl[i]);
  }
  len[3] = 8 + (uint64_t)(b->live_terms + 1) * RAG_BM25_VENTRY + 4 * (uint64_t)sv->nslots;
  len[4] = 0;
  for (i = 0; i < b->nterms; i++) {
    rag_bm25_tinfo t;
    if (!live(b, i)) continue;
    rag_bm25_term_info(b, (uint32_t)i, &t);
    len[3] += t.len;
    len[4] += t.plen;
  }
}

/* Writes the whole file; the index has no dead documents (renumbered). */
static void write_index(const void *obj, rag_writer *w) {
  const saver *sv = (const saver *)obj;
  const rag_bm25 *b = sv->b;
  const rag_analyzer_opts *a = &b->o.analyzer;
  uint64_t len[NSECTIONS], size = RAG_FILE_HEADER, pool = 0, post = 0;
  size_t i;
  measure(sv, len);
  for (i = 0; i < NSECTIONS; i++) size += 16 + len[i];

  rag_w_header(w, MAGIC, FORMAT_VERSION, NSECTIONS, size);

  rag_w_begin(w, "PARM", len[0]);
  rag_w_uint(w, (uint64_t)b->o.variant, 1);
  rag_w_f64(w, b->o.k1);
  rag_w_f64(w, b->o.b);
  rag_w_f64(w, b->o.delta);
  rag_w_end(w);

  rag_w_begin(w, "ANLZ", len[1]);
  rag_w_str(w, a->lang, strlen(a->lang));
  rag_w_uint(w, (uint64_t)(a->stem != 0), 1);
  rag_w_uint(w, (uint64_t)(a->lowercase != 0), 1);
  rag_w_uint(w, (uint64_t)a->cjk, 1);
  rag_w_uint(w, (uint64_t)a->stopwords, 1);
  rag_w_varint(w, a->nwords);
  for (i = 0; i < a->nwords; i++) rag_w_str(w, a->words[i], strlen(a->words[i]));
  rag_w_end(w);

  rag_w_begin(w, "DOCS", len[2]);
  rag_w_varint(w, b->ids.n);
  for (i = 0; i < b->ids.n; i++) {
    size_t idlen;
    const char *id = rag_ids_get(&b->ids, (uint32_t)i, &idlen);
    rag_w_str(w, id, idlen);
    rag_w_varint(w, b->dl[i]);
  }
  rag_w_end(w);

  rag_w_begin(w, "TERM", len[3]);
  rag_w_uint(w, b->live_terms, 4);
  rag_w_uint(w, sv->nslots, 4);
  for (i = 0; i < b->nterms; i++) {
    rag_bm25_tinfo t;
    if (!live(b, i)) continue;
    rag_bm25_term_info(b, (uint32_t)i, &t);
    rag_w_uint(w, pool, 4);
    rag_w_uint(w, post, 8);
    rag_w_uint(w, t.df, 4);
    pool += t.len;
    post += t.plen;
  }
  rag_w_uint(w, pool, 4);
  rag_w_uint(w, post, 8);
  rag_w_uint(w, 0, 4);
  for (i = 0; i < sv->nslots; i++) rag_w_uint(w, sv->slots[i], 4);
  for (i = 0; i < b->nterms; i++) {
    rag_bm25_tinfo t;
    if (!live(b, i)) continue;
    rag_bm25_term_info(b, (uint32_t)i, &t);
    rag_w_put(w, t.s, t.len);
  }
  rag_w_end(w);

  rag_w_begin(w, "POST", len[4]);
  for (i = 0; i < b->nterms; i++) {
    rag_bm25_tinfo t;
    if (!live(b, i)) continue;
    rag_bm25_term_info(b, (uint32_t)i, &t);
    rag_w_put(w, t.post, t.plen);
  }
  rag_w_end(w);
}

int rag_bm25_dump(rag_bm25 *b, unsigned char **buf, size_t *n) {
  saver sv;
  int rc;
  *buf = NULL;
  *n = 0;
  if (rag_bm25_renumber(b) != RAG_OK) return RAG_ENOMEM;
  sv.b = b;
  if ((rc = make_slots(&sv)) == RAG_OK) rc = rag_file_dump(write_index, &sv, buf, n);
  rag_free(sv.slots);
  return rc;
}

int rag_bm25_save(rag_bm25 *b, const char *path, int *err) {
  saver sv;
  int rc;
  *err = 0;
  if (rag_bm25_renumber(b) != RAG_OK) return RAG_ENOMEM;
  sv.b = b;
  if ((rc = make_slots(&sv)) == RAG_OK) rc = rag_file_save(path, write_index, &sv, err);
  rag_free(sv.slots);
  return rc;
}

/* {====== Loading ======} */

/* What a load builds, and its scratch, by document number. */
typedef struct loader {
  rag_bm25 *b;
  size_t ndocs;
  uint64_t idbytes;  /* the ids' bytes in all */
  const char **ids;  /* into the file's bytes until the documents are linked */
  uint32_t *idlens;
  uint64_t *tfsum;   /* the tfs of a document's postings, to check against its dl */
  uint32_t *fwd;     /* bytes of its forward list, checked to fit (rag_bm25_own) */
} loader;

/* PARM: the scoring parameters into o (the analyzer options at their defaults). */
static int read_params(rag_reader r, rag_bm25_opts *o, const char **why) {
  unsigned v;
  rag_bm25_defaults(o);
  if (!rag_r_u8(&r, &v) || !rag_r_f64(&r, &o->k1) || !rag_r_f64(&r, &o->b) ||
      !rag_r_f64(&r, &o->delta) || r.p != r.e || v >= RAG_BM25_NVARIANTS)
    return rag_corrupt(why, "bad parameters");
  o->variant = (rag_bm25_variant)v;
  if (!rag_bm25_params_ok(o)) return rag_corrupt(why, "bad parameters");
  return RAG_OK;
}

/*
** ANLZ: the analyzer options into *a. lang and the words are NUL-terminated
** copies in *wbuf, their pointers in *words; the caller frees both.
*/
static int read_analyzer(rag_reader r, rag_analyzer_opts *a, char **wbuf, const char ***words,
                         const char **why) {
  unsigned stem, lower, cjk, stop;
  uint64_t nw, i;
  const char *s;
  size_t n;
  char *q;
  if (!rag_r_str(&r, &s, &n) || n == 0 || n > 63 || memchr(s, 0, n) != NULL ||
      !rag_r_u8(&r, &stem) || !rag_r_u8(&r, &lower) || !rag_r_u8(&r, &cjk) ||
      !rag_r_u8(&r, &stop) || stem > 1 || lower > 1 || cjk > RAG_ANALYZER_CJK_RUN ||
      stop > RAG_ANALYZER_STOP_LIST || !rag_r_varint(&r, &nw) || nw > (uint64_t)(r.e - r.p))
    return rag_corrupt(why, "bad analyzer options");
  *wbuf = q = (char *)rag_malloc((size_t)(r.e - r.p) + n + (size_t)nw + 1);
  *words = (const char **)rag_malloc(((size_t)nw + 1) * sizeof **words);
  if (q == NULL || *words == NULL) return RAG_ENOMEM;
  memcpy(q, s, n);
  q[n] = '\0';
  a->lang = q;
  q += n + 1;
  for (i = 0; i < nw; i++) {
    if (!rag_r_str(&r, &s, &n) || memchr(s, 0, n) != NULL)
      return rag_corrupt(why, "bad analyzer options");
    memcpy(q, s, n);
    q[n] = '\0';
    (*words)[i] = q;
    q += n + 1;
  }
  if (r.p != r.e) return rag_corrupt(why, "bad analyzer options");
  a->stem = (int)stem;
  a->lowercase = (int)lower;
  a->cjk = (rag_analyzer_cjk)cjk;
  a->stopwords = (rag_analyzer_stop)stop;
  a->words = *words;
  a->nwords = (size_t)nw;
  return RAG_OK;
}

/* PARM and ANLZ: a new empty index with the file's configuration. */
static int read_config(loader *ld, const rag_reader *sec, const char **why) {
  rag_bm25_opts o;
  char *wbuf = NULL;
  const char **words = NULL;
  int rc = read_params(sec[0], &o, why);
  if (rc == RAG_OK) rc = read_analyzer(sec[1], &o.analyzer, &wbuf, &words, why);
  if (rc == RAG_OK) rc = rag_bm25_new(&o, &ld->b); /* the analyzer copies its options */
  if (rc == RAG_EINVAL) rc = rag_corrupt(why, "bad analyzer options");
  rag_free(wbuf);
  rag_free((void *)words);
  return rc;
}

/* DOCS: the ids (left in the file's bytes for now) and the lengths. */
static int read_docs(loader *ld, rag_reader r, const char **why) {
  rag_bm25 *b = ld->b;
  uint64_t nd;
  size_t d, n;
  if (!rag_r_varint(&r, &nd) || nd > (uint64_t)(r.e - r.p) / 2 || nd > MAX_DOCS)
    return rag_corrupt(why, "bad document count");
  n = ld->ndocs = (size_t)nd;
  b->docs = (rag_bm25_doc *)rag_malloc(n * sizeof *b->docs + 1);
  b->dl = (uint32_t *)rag_malloc(n * sizeof *b->dl + 1);
  ld->ids = (const char **)rag_malloc(n * sizeof *ld->ids + 1);
  ld->idlens = (uint32_t *)rag_malloc(n * sizeof *ld->idlens + 1);
  ld->tfsum = (uint64_t *)rag_malloc(n * sizeof *ld->tfsum + 1);
  ld->fwd = (uint32_t *)rag_malloc(n * sizeof *ld->fwd + 1);
  if (b->docs == NULL || b->dl == NULL || ld->ids == NULL || ld->idlens == NULL ||
      ld->tfsum == NULL || ld->fwd == NULL)
    return RAG_ENOMEM;
  b->dcap = n;
  memset(b->docs, 0, n * sizeof *b->docs);
  memset(ld->tfsum, 0, n * sizeof *ld->tfsum);
  memset(ld->fwd, 0, n * sizeof *ld->fwd);
  for (d = 0; d < n; d++) {
    size_t len;
    uint64_t dl;
    if (!rag_r_str(&r, &ld->ids[d], &len) || len >= UINT32_MAX || !rag_r_varint(&r, &dl) ||
        dl >= DEAD)
      return rag_corrupt(why, "bad document");
    ld->idlens[d] = (uint32_t)len;
    ld->idbytes += len;
    b->dl[d] = (uint32_t)dl;
    b->total += dl;
  }
  if (r.p != r.e) return rag_corrupt(why, "bad document section");
  return RAG_OK;
}

/* The list of term tid, plen bytes at *post, checked posting by posting;
** the documents' tf sums and forward list sizes grow. *next: the document
** number after its last. */
static int check_list(loader *ld, uint32_t tid, uint64_t df, rag_reader *post, uint64_t plen,
                      uint32_t *nextp, const char **why) {
  rag_reader pr;
  uint64_t cnt = 0;
  uint32_t next = 0;
  /* version 2 checks its offsets one term at a time: a later offset that
  ** goes back is seen only after this list, so bound the list here */
  if (plen > (uint64_t)(post->e - post->p)) return rag_corrupt(why, "bad posting list length");
  pr.p = post->p;
  pr.e = pr.p + plen;
  post->p += plen;
  while (pr.p < pr.e) {
    uint64_t v, tf = 1, doc;
    if (!rag_r_varint(&pr, &v) ||
        (!(v & 1) && (!rag_r_varint(&pr, &tf) || tf == 0 || tf >= DEAD)))
      return rag_corrupt(why, "bad posting");
    doc = next + (v >> 1);
    if (doc >= ld->ndocs) return rag_corrupt(why, "posting of a missing document");
    next = (uint32_t)doc + 1;
    ld->tfsum[doc] += tf;
    ld->fwd[doc] += (uint32_t)rag_varint_len(tid);
    if (ld->fwd[doc] >= UINT32_MAX - 8) return rag_corrupt(why, "bad posting");
    cnt++;
  }
  if (cnt != df) return rag_corrupt(why, "document frequency disagrees with its list");
  ld->b->live_postings += (size_t)df;
  *nextp = next;
  return RAG_OK;
}

/* A version 1 list: checked, and lent to term tid. */
static int read_list(loader *ld, uint32_t tid, uint64_t df, rag_reader *post, uint64_t plen,
                     const char **why) {
  term *t = &ld->b->terms[tid];
  uint32_t next;
  int rc = check_list(ld, tid, df, post, plen, &next, why);
  if (rc != RAG_OK) return rc;
  t->post = (uint8_t *)(uintptr_t)(post->p - plen); /* borrowed until rag_bm25_own */
  t->plen = (uint32_t)plen;
  t->pcap = 0;
  t->df = (uint32_t)df;
  t->next = next;
  return RAG_OK;
}

/* TERM and POST of version 2: the dictionary, used where it lies, and every list. */
static int read_terms2(loader *ld, rag_reader r, rag_reader post, const char **why) {
  rag_bm25 *b = ld->b;
  uint64_t nt, ns, i, avail, poollen, nonzero = 0;
  const uint8_t *ent, *slot, *last;
  if (!rag_r_uint(&r, 4, &nt) || !rag_r_uint(&r, 4, &ns))
    return rag_corrupt(why, "bad term count");
  avail = (uint64_t)(r.e - r.p);
  if (nt >= NONE - 1 || ns < 2 || (ns & (ns - 1)) != 0 || ns < 2 * nt || ns > avail / 4 ||
      nt + 1 > (avail - 4 * ns) / RAG_BM25_VENTRY)
    return rag_corrupt(why, "bad term table");
  ent = r.p;
  slot = ent + (nt + 1) * RAG_BM25_VENTRY;
  b->vpool = (const char *)(slot + 4 * ns);
  poollen = (uint64_t)((const char *)r.e - b->vpool);
  last = ent + nt * RAG_BM25_VENTRY;
  if (rag_bm25_le32(ent) != 0 || rag_bm25_le64(ent + 4) != 0 || rag_bm25_le32(last) != poollen ||
      rag_bm25_le64(last + 4) != (uint64_t)(post.e - post.p) || rag_bm25_le32(last + 12) != 0)
    return rag_corrupt(why, "bad term table");
  b->vpost = post.p;
  for (i = 0; i < nt; i++) {
    const uint8_t *e = ent + i * RAG_BM25_VENTRY;
    uint64_t s0 = rag_bm25_le32(e), s1 = rag_bm25_le32(e + RAG_BM25_VENTRY);
    uint64_t p0 = rag_bm25_le64(e + 4), p1 = rag_bm25_le64(e + RAG_BM25_VENTRY + 4);
    uint64_t df = rag_bm25_le32(e + 12);
    uint32_t next;
    int rc;
    if (s1 <= s0 || p1 <= p0 || p1 - p0 >= UINT32_MAX || df == 0 || df > ld->ndocs)
      return rag_corrupt(why, "bad term");
    if ((rc = check_list(ld, (uint32_t)i, df, &post, p1 - p0, &next, why)) != RAG_OK) return rc;
  }
  for (i = 0; i < ns; i++) {
    uint32_t v = rag_bm25_le32(slot + 4 * i);
    if (v > nt) return rag_corrupt(why, "bad term table");
    nonzero += v != 0;
  }
  if (nonzero != nt) return rag_corrupt(why, "bad term table");
  b->vterm = ent; /* the lookups below walk the slots: at least one is empty */
  b->vslot = slot;
  b->vmask = (size_t)ns - 1;
  b->nterms = b->live_terms = (size_t)nt;
  for (i = 0; i < nt; i++) {
    rag_bm25_tinfo t;
    rag_bm25_term_info(b, (uint32_t)i, &t);
    if (rag_bm25_term_find(b, t.s, t.len, rag_fnv32(t.s, t.len)) != i)
      return rag_corrupt(why, "duplicate term or misplaced slot");
  }
  return RAG_OK;
}

/* TERM and POST of version 1: the dictionary, copied, and every list. */
static int read_terms(loader *ld, rag_reader r, rag_reader post, const char **why) {
  rag_bm25 *b = ld->b;
  uint64_t nt, i;
  if (!rag_r_varint(&r, &nt) || nt > (uint64_t)(r.e - r.p) / 4)
    return rag_corrupt(why, "bad term count");
  if (rag_bm25_terms_reserve(b, (size_t)nt, (size_t)(r.e - r.p)) != RAG_OK) return RAG_ENOMEM;
  for (i = 0; i < nt; i++) {
    const char *s;
    size_t len;
    uint64_t df, plen;
    uint32_t tid, h;
    int rc;
    if (!rag_r_str(&r, &s, &len) || len == 0 || !rag_r_varint(&r, &df) || df == 0 ||
        df > ld->ndocs || !rag_r_varint(&r, &plen) || plen == 0 ||
        plen > (uint64_t)(post.e - post.p) || plen >= UINT32_MAX)
      return rag_corrupt(why, "bad term");
    h = rag_fnv32(s, len);
    if (rag_bm25_term_find(b, s, len, h) != NONE) return rag_corrupt(why, "duplicate term");
    rc = rag_bm25_term_insert(b, s, len, h, &tid);
    if (rc == RAG_ETOOBIG) return rag_corrupt(why, "too many terms");
    if (rc != RAG_OK) return rc;
    if ((rc = read_list(ld, tid, df, &post, plen, why)) != RAG_OK) return rc;
  }
  if (r.p != r.e || post.p != post.e) return rag_corrupt(why, "bad term section");
  b->live_terms = b->nterms;
  return RAG_OK;
}

/* Each document: its length agrees, its id is new. */
static int link_docs(loader *ld, const char **why) {
  rag_bm25 *b = ld->b;
  size_t d;
  int rc = rag_ids_reserve(&b->ids, ld->ndocs, (size_t)ld->idbytes);
  if (rc == RAG_ETOOBIG) return rag_corrupt(why, "bad document count");
  if (rc != RAG_OK) return rc;
  for (d = 0; d < ld->ndocs; d++) {
    if (ld->tfsum[d] != b->dl[d])
      return rag_corrupt(why, "document length disagrees with its postings");
    if (rag_ids_find(&b->ids, ld->ids[d], ld->idlens[d]) != RAG_IDS_NONE)
      return rag_corrupt(why, "duplicate id");
    rag_ids_push(&b->ids, ld->ids[d], ld->idlens[d]);
  }
  b->nlive = ld->ndocs;
  return RAG_OK;
}

int rag_bm25_load_mem(const unsigned char *p, size_t n, int borrow, rag_bm25 **out,
                      const char **why) {
  static const char tags[NSECTIONS][5] = {"PARM", "ANLZ", "DOCS", "TERM", "POST"};
  rag_reader sec[NSECTIONS];
  uint32_t version;
  loader ld;
  int rc;
  *out = NULL;
  memset(&ld, 0, sizeof ld);
  rc = rag_file_open(p, n, MAGIC, FORMAT_VERSION, tags, NSECTIONS, sec, &version,
                     "not a bm25 index (bad magic)", why);
  if (rc == RAG_OK) rc = read_config(&ld, sec, why);
  if (rc == RAG_OK) ld.b->borrowed = 1; /* the lists stay in p (rag_bm25_free knows) */
  if (rc == RAG_OK) rc = read_docs(&ld, sec[2], why);
  if (rc == RAG_OK)
    rc = version == 1 ? read_terms(&ld, sec[3], sec[4], why) : read_terms2(&ld, sec[3], sec[4], why);
  if (rc == RAG_OK) rc = link_docs(&ld, why);
  if (rc == RAG_OK && !borrow) rc = rag_bm25_own(ld.b);
  rag_free((void *)ld.ids);
  rag_free(ld.idlens);
  rag_free(ld.tfsum);
  rag_free(ld.fwd);
  if (rc != RAG_OK) {
    rag_bm25_free(ld.b);
    return rc;
  }
  *out = ld.b;
  return RAG_OK;
}

static int load_mem(const unsigned char *p, size_t n, void *out, const char **why) {
  return rag_bm25_load_mem(p, n, 0, (rag_bm25 **)out, why);
}

int rag_bm25_load(const char *path, rag_bm25 **out, const char **why, int *err) {
  *out = NULL;
  return rag_file_load(path, load_mem, out, why, err);
}
