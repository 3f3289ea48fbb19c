/*
** fuzz/graph_load.c: rag_graph_load_mem (the entity graph of rag.graph) on
** any bytes. The first byte picks a mode: 0 loads the rest as is; 1 builds a
** graph from operations coded in the rest (entities, aliases, mentions,
** relations, extracts, removals, marks), dumps it, damages the dump with its
** CRCs left as they are and loads that; 2 edits the dump's sections and
** recomputes every length and CRC, so the checks behind the checksums
** decide; 3 loads the rest with its size and CRCs recomputed. A failed load
** must say RAG_EFORMAT, RAG_EVERSION or RAG_ECORRUPT with a reason; a loaded
** graph must pass rag_graph_check, answer every query, take removals and an
** extract, and dump to bytes that load back and dump identically. An
** undamaged dump must load back to the same bytes.
*/
#include <stdint.h>
#include <string.h>

#include "rag.h"
#include "rag_graph.h"
#include "rag_vec.h" /* vecfuzz.h names rag_vec_bad */
#include "vecfuzz.h" /* the input cursor, must, the container's split/join/edit */

#define NSEC 5

static const char *const keys[] = {"a", "b", "ab", "x y", "tnf", "\xc3\xa9", "z\0z", ""};
static const size_t keylens[] = {1, 1, 2, 3, 3, 2, 3, 0};
static const char *const chunks[] = {"d1#1", "d1#2", "d2#1", "d10#1", "d1#x", "d1"};
static const char *const rels[] = {"co-occurs", "binds", "", "is a"};
static const char *const texts[] = {
    "Alice Smith met Bob Jones in Paris. Bob Jones works at Acme.",
    "The University of Oxford studies TNF and IL-6 in mice.",
    "tumor necrosis factor and gene expression in Stra\xc3\x9f\x65 Berlin",
    "A B C D E F G H I J K L. mRNA BRCA1 COVID-19 p53",
};

static void check_dump(rag_graph *g) {
  unsigned char *d1 = NULL, *d2 = NULL;
  size_t n1 = 0, n2 = 0;
  rag_graph *c = NULL;
  const char *why = NULL;
  must(rag_graph_check(g) == RAG_OK);
  must(rag_graph_dump(g, &d1, &n1) == RAG_OK);
  must(rag_graph_load_mem(d1, n1, &c, &why) == RAG_OK);
  must(rag_graph_check(c) == RAG_OK);
  must(rag_graph_dump(c, &d2, &n2) == RAG_OK && n1 == n2 && memcmp(d1, d2, n1) == 0);
  rag_graph_free(c);
  rag_free(d1);
  rag_free(d2);
}

/* Every query answers, in order. */
static void query(rag_graph *g) {
  const uint32_t *es, *hs, *xs, *mem;
  const size_t *st;
  size_t n, ne, nx, i;
  uint32_t seeds[3];
  must(rag_graph_entities(g, &es, &n) == RAG_OK);
  for (i = 1; i < n; i++) {
    size_t la, lb;
    const char *a = rag_graph_key(g, es[i - 1], &la), *b = rag_graph_key(g, es[i], &lb);
    must(id_cmp(a, la, b, lb) < 0);
  }
  for (i = 0; i < n && i < 3; i++) seeds[i] = es[i];
  must(rag_graph_neighbours(g, seeds, i, 2, 5, &es, &hs, &ne, &xs, &nx) == RAG_OK);
  must(ne <= 5);
  for (i = 1; i < ne; i++) must(hs[i - 1] <= hs[i]);
  must(rag_graph_edges(g, &xs, &nx) == RAG_OK);
  must(rag_graph_communities(g, RAG_GRAPH_LABELS, 5, &mem, &st, &n) == RAG_OK);
  must(rag_graph_communities(g, RAG_GRAPH_COMPONENTS, 1, &mem, &st, &n) == RAG_OK);
  for (i = 0; i < n; i++) must(st[i + 1] > st[i]);
}

/* A loaded graph answers, takes changes and dumps to bytes that load back identically. */
static void exercise(rag_graph *g) {
  rag_mentions *m;
  rag_mentions_opts o;
  size_t count, errpos;
  must(rag_graph_check(g) == RAG_OK);
  query(g);
  check_dump(g);
  rag_graph_remove_doc(g, "d1", 2);
  must(rag_graph_check(g) == RAG_OK);
  must(rag_mentions_new(&m) == RAG_OK);
  rag_mentions_defaults(&o);
  must(rag_graph_extract(g, m, "d3#1", 4, texts[0], strlen(texts[0]), &o, &count, &errpos) ==
       RAG_OK);
  rag_mentions_free(m);
  query(g);
  check_dump(g);
}

/* A graph from the operations coded in `in`. */
static rag_graph *build(input *in) {
  rag_graph *g;
  rag_mentions *m;
  rag_mentions_opts o;
  must(rag_graph_new(&g) == RAG_OK && rag_mentions_new(&m) == RAG_OK);
  rag_mentions_defaults(&o);
  while (more(in)) {
    uint8_t op = take(in), a = take(in), b = take(in), c = take(in);
    const char *k1 = keys[a % 8], *k2 = keys[b % 8], *ch = chunks[c % 6];
    size_t l1 = keylens[a % 8], l2 = keylens[b % 8], cl = strlen(ch), count, errpos;
    int added, bad, rc;
    const char *why;
    switch (op % 9) {
      case 0: rc = rag_graph_entity(g, k1, l1, k2, l2, &added); break;
      case 1: rc = rag_graph_alias(g, k1, l1, k2, l2, &added, &why); break;
      case 2: rc = rag_graph_mention(g, k1, l1, ch, cl, &added); break;
      case 3:
        rc = rag_graph_relate(g, k1, l1, k2, l2, rels[op / 9 % 4], strlen(rels[op / 9 % 4]), ch,
                              cl, &added, &bad);
        break;
      case 4:
        o.max_words = 2 + a % 3;
        o.phrases = b & 1;
        o.min_len = 1 + b % 3;
        rc = rag_graph_extract(g, m, ch, cl, texts[a % 4], strlen(texts[a % 4]), &o, &count,
                               &errpos);
        break;
      case 5: rag_graph_remove_chunk(g, ch, cl); rc = RAG_OK; break;
      case 6: rag_graph_remove_doc(g, ch, 2); rc = RAG_OK; break;
      case 7: rc = rag_graph_mark(g, ch, cl, k1, l1); break;
      default: rag_graph_remove_chunk(g, "d10#1", 5); rc = RAG_OK; break;
    }
    must(rc == RAG_OK || rc == RAG_EINVAL);
    must(rag_graph_check(g) == RAG_OK);
  }
  rag_mentions_free(m);
  return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rag_graph *g = NULL;
  const char *why = NULL;
  int rc, mode;
  if (size < 1) return 0;
  mode = data[0] % 4;
  data++;
  size--;
  if (mode == 0 || mode == 3) {
    unsigned char *p = (unsigned char *)rag_malloc(size + 1);
    must(p != NULL);
    if (size) memcpy(p, data, size);
    if (mode == 3) fix_crcs(p, size, NSEC);
    rc = rag_graph_load_mem(p, size, &g, &why);
    if (load_ok(rc, g, why)) exercise(g);
    rag_graph_free(g);
    rag_free(p);
    return 0;
  }
  {
    input in;
    uint8_t nm, ops[4][5];
    size_t i, j, n0 = 0, n;
    unsigned char *d0 = NULL, *p;
    rag_graph *a;
    in.p = data;
    in.e = data + size;
    nm = 1 + take(&in) % 4;
    for (i = 0; i < 4; i++)
      for (j = 0; j < 5; j++) ops[i][j] = take(&in);
    a = build(&in);
    query(a);
    check_dump(a);
    must(rag_graph_dump(a, &d0, &n0) == RAG_OK);
    rag_graph_free(a);
    if (mode == 1) {
      n = damage(d0, n0, (const uint8_t(*)[5])ops, nm);
      rc = rag_graph_load_mem(d0, n, &g, &why);
    } else {
      file f;
      split(&f, d0, n0, NSEC);
      for (i = 0; i < nm; i++)
        edit(&f, ops[i][0], ops[i][1], (uint32_t)ops[i][2] | (uint32_t)ops[i][3] << 8,
             ops[i][4]);
      p = join(&f, &n);
      unsplit(&f);
      rag_free(d0);
      d0 = p;
      rc = rag_graph_load_mem(d0, n, &g, &why);
    }
    if (load_ok(rc, g, why)) exercise(g);
    rag_graph_free(g);
    rag_free(d0);
  }
  return 0;
}
