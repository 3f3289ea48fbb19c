/*
** rag_tokenizer.c: tiktoken-compatible BPE. Token bytes map to ranks by a
** hash table over one byte arena (up to 16 bytes also by tables keyed by the
** bytes as words); the pre-tokenizer follows each encoding's regex with the
** same leftmost-first and backtracking outcome; pieces that are not tokens
** merge lowest rank first as tiktoken's do (long ones by a linear search),
** and short ones seen before come from a cache (rag_piececache.h).
*/
#include "rag_tokenizer.h"

#include <string.h>

#include <utf8proc.h>

#include "rag.h"
#include "rag_piececache.h"
#include "rag_probe.h"
#include "rag_text.h"
#include "rag_utf8.h"

#define NO_RANK UINT32_MAX
/* Pieces up to this many bytes run tiktoken's quadratic loop, which costs
** less than merge_long there (measured on random letters); longer ones run
** merge_long, which is linear. */
#define SMALL_PIECE 128
#define LENS_BITS 17       /* log2 of the slots of lens */
#define LENS_SHORT 59      /* lens: tokens of 4 to 59 bytes; lens_long: up to LENS_LONG */
#define LENS_LONG 187
#define TRIPLE_WORDS 16384 /* 2^20 bits */
#define WORD_BITS 19       /* log2 of the bits of the filter of tokens of 3 to 16 bytes */

typedef struct token {
  uint32_t off; /* into the arena */
  uint32_t len; /* 0: no token has this rank */
} token;

/* A token of 3 to 8 bytes in the table of such tokens. */
typedef struct short_token {
  uint64_t bytes; /* zero-padded, as rag_piececache_word gives them */
  uint32_t len;   /* 0: an empty cell */
  uint32_t rank;
} short_token;

/* A token of 9 to 16 bytes in the table of those. */
typedef struct mid_token {
  uint64_t lo, hi; /* the first 8 bytes, then the rest zero-padded */
  uint32_t len;    /* 0: an empty cell */
  uint32_t rank;
} mid_token;

struct rag_tokenizer {
  rag_pretok pretok;
  unsigned char *arena;  /* token bytes, then special texts */
  token *tokens;         /* indexed by rank */
  uint32_t nranks;
  uint32_t maxlen;       /* longest token in bytes */
  uint32_t byte_rank[256];
  uint32_t pair_rank[65536];  /* the rank of each two-byte string, or NO_RANK */
  /* by the hash of the first 4 bytes: bit L-4 set when a token of L bytes
  ** starts so, and in the top byte a tag of those 4 bytes (0: shared) */
  uint64_t lens[(size_t)1 << LENS_BITS];
  uint64_t lens_long[256][2]; /* the same for 60 to 187 bytes (bit L-60), untagged */
  uint64_t triples[TRIPLE_WORDS]; /* a bit by the hash of each three-byte token */
  uint32_t *slots;       /* tag | rank + 1, 0 = empty; open addressing */
  uint32_t mask;         /* slots - 1 */
  uint32_t tags;         /* the bits of a slot above rank + 1: bits of the hash */
  short_token *shorts;   /* the tokens of 3 to 8 bytes again, by their bytes; open addressing */
  uint32_t smask;        /* cells of shorts - 1 */
  mid_token *mids;       /* and those of 9 to 16 bytes */
  uint32_t mmask;        /* cells of mids - 1 */
  uint64_t words[((size_t)1 << WORD_BITS) / 64]; /* a bit by the hash of each token in them */
  rag_special specials[RAG_TOKENIZER_MAX_SPECIALS];
  size_t nspecial;
  rag_piececache cache;  /* the tokens of short pieces seen before; shared, lock-free */
};

/* --- hashing ------------------------------------------------------------ */

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
  uint64_t w;
  while (n >= 8) {
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  w = 0;
  memcpy(&w, p, n);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return h;
}

/* A token sought in the table: its bytes and the tag of their hash. */
typedef struct tkey {
  const rag_tokenizer *t;
  const unsigned char *p;
  size_t n;
  uint32_t tag;
} tkey;

/* memcmp(a, b, n) == 0, without a call for most tokens. */
static int same_bytes(const unsigned char *a, const unsigned char *b, size_t n) {
  if (n == 0) return 1;
  if (n <= 8) return rag_piececache_word(a, n) == rag_piececache_word(b, n);
  if (n <= 16)
    return rag_piececache_word(a, 8) == rag_piececache_word(b, 8) &&
           rag_piececache_word(a + 8, n - 8) == rag_piececache_word(b + 8, n - 8);
  return memcmp(a, b, n) == 0;
}

/* Stops at an empty slot or the one holding the token. Slots keep some
** bits of the hash beside the rank, so a miss seldom reads a token. */
static int at_token(const void *ud, size_t i) {
  const tkey *k = (const tkey *)ud;
  uint32_t e = k->t->slots[i];
  const token *x;
  if (e == 0) return 1;
  if ((e & k->t->tags) != k->tag) return 0;
  x = &k->t->tokens[(e & ~k->t->tags) - 1];
  return x->len == k->n && same_bytes(k->t->arena + x->off, k->p, k->n);
}

/* The slot holding the n bytes at p, or the empty one where they would go
** (*tag: what that slot keeps of their hash). */
static size_t token_slot(const rag_tokenizer *t, const unsigned char *p, size_t n,
                         uint32_t *tag) {
  uint64_t h = hash_bytes(p, n);
  tkey k = {.t = t, .p = p, .n = n, .tag = (uint32_t)(h >> 32) & t->tags};
  *tag = k.tag;
  return rag_probe(t->mask, (uint32_t)h, at_token, &k);
}

/* The rank of the n bytes at p, or NO_RANK. */
static uint32_t lookup(const rag_tokenizer *t, const unsigned char *p, size_t n) {
  uint32_t e, tag;
  if (n > t->maxlen) return NO_RANK;
  e = t->slots[token_slot(t, p, n, &tag)];
  return e == 0 ? NO_RANK : (e & ~t->tags) - 1;
}

/* --- loading ------------------------------------------------------------ */

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes padded base64 into out; returns the byte count or -1. */
static long b64_decode(const unsigned char *s, size_t n, unsigned char *out) {
  long o = 0;
  size_t i;
  if (n == 0 || n % 4 != 0) return -1;
  for (i = 0; i < n; i += 4) {
    int v[4], k, pad = 0;
    for (k = 0; k < 4; k++) {
      if (s[i + k] == '=' && i + 4 == n && k >= 2) {
        v[k] = 0;
        pad++;
      } else if (pad > 0 || (v[k] = b64_value(s[i + k])) < 0) {
        return -1;
      }
    }
    out[o++] = (unsigned char)(v[0] << 2 | v[1] >> 4);
    if (pad < 2) out[o++] = (unsigned char)((v[1] & 15) << 4 | v[2] >> 2);
    if (pad < 1) out[o++] = (unsigned char)((v[2] & 3) << 6 | v[3]);
  }
  return o;
}

/* One parsed line: the token's base64 text and its rank. */
static int parse_line(const unsigned char *s, size_t n, size_t *b64len, uint32_t *rank) {
  size_t i = 0;
  uint64_t r = 0;
  while (i < n && s[i] != ' ') i++;
  if (i == 0 || i == n || i + 1 == n) return 0;
  *b64len = i;
  for (i++; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    r = r * 10 + (uint64_t)(s[i] - '0');
    if (r >= 0x7fffffffu) return 0;
  }
  *rank = (uint32_t)r;
  return 1;
}

static int insert(rag_tokenizer *t, uint32_t rank) {
  const token *k = &t->tokens[rank];
  uint32_t tag;
  size_t i = token_slot(t, t->arena + k->off, k->len, &tag);
  if (t->slots[i] != 0) return 0; /* duplicate token */
  t->slots[i] = tag | (rank + 1);
  return 1;
}

static uint32_t hash3(const unsigned char *p) { /* 20 bits */
  return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16) * 0x9e3779b1u >> 12;
}

static uint64_t hash4(const unsigned char *p) {
  uint32_t w;
  memcpy(&w, p, 4);
  return w * 0x9e3779b97f4a7c15ull;
}

#define LENS_SLOT(h) ((size_t)((h) >> (64 - LENS_BITS)))
#define LENS_TAG(h) (((h) >> 39 & 0xff) | 1)
#define LOW56 0x00ffffffffffffffull

/* Lengths 4..59 of the tokens that may start with the 4 bytes hashed to h:
** bit L-4. */
static uint64_t short_lens(const rag_tokenizer *t, uint64_t h) {
  uint64_t e = t->lens[LENS_SLOT(h)], tag = e >> 56;
  return tag == 0 || tag == LENS_TAG(h) ? e & LOW56 : 0;
}

#define LONG_LEN(t, h, n) ((t)->lens_long[(h) >> 56][((n) - 60) >> 6] >> (((n) - 60) & 63) & 1)

#define IS_TRIPLE(t, p) ((t)->triples[hash3(p) >> 6] >> (hash3(p) & 63) & 1)

/* A string of 3 to 16 bytes as shorts and mids see it: its bytes as two
** words (the second 0 up to 8 bytes), its length and its hash. */
typedef struct wkey {
  uint64_t lo, hi;
  uint32_t len, hash;
} wkey;

static void word_key(const unsigned char *p, size_t n, wkey *k) {
  k->lo = rag_piececache_word(p, n < 8 ? n : 8);
  k->hi = n > 8 ? rag_piececache_word(p + 8, n - 8) : 0;
  k->len = (uint32_t)n;
  k->hash = (uint32_t)((((k->lo ^ (uint64_t)n << 60) * 0x9e3779b97f4a7c15ull) ^
                        k->hi * 0xc2b2ae3d27d4eb4full) >> 32);
}

/* Whether the filter lets a string of hash h through: always for a token,
** seldom for anything else (a bit per hash of every token of 3 to 16
** bytes, in 64 KB that stay in cache, where the tables take megabytes). */
#define MAYBE_WORD(t, h) ((t)->words[(h) >> (32 - WORD_BITS + 6)] >> ((h) >> (32 - WORD_BITS) & 63) & 1)

typedef struct skey {
  const short_token *cells;
  const wkey *k;
} skey;

static int at_short(const void *ud, size_t i) {
  const skey *q = (const skey *)ud;
  const short_token *e = &q->cells[i];
  return e->len == 0 || (e->bytes == q->k->lo && e->len == q->k->len);
}

typedef struct mkey {
  const mid_token *cells;
  const wkey *k;
} mkey;

static int at_mid(const void *ud, size_t i) {
  const mkey *q = (const mkey *)ud;
  const mid_token *e = &q->cells[i];
  return e->len == 0 || (e->lo == q->k->lo && e->hi == q->k->hi && e->len == q->k->len);
}

/* The cell of shorts holding k (3 to 8 bytes), or the empty one where it
** would go; mid_cell the same in mids for 9 to 16 bytes. */
static size_t short_cell(const rag_tokenizer *t, const wkey *k) {
  skey q = {.cells = t->shorts, .k = k};
  return rag_probe(t->smask, k->hash, at_short, &q);
}

static size_t mid_cell(const rag_tokenizer *t, const wkey *k) {
  mkey q = {.cells = t->mids, .k = k};
  return rag_probe(t->mmask, k->hash, at_mid, &q);
}

/* The rank of the string of key k (3 to 16 bytes), or NO_RANK. */
static uint32_t word_rank(const rag_tokenizer *t, const wkey *k) {
  if (k->len <= 8) {
    const short_token *e = &t->shorts[short_cell(t, k)];
    return e->len == 0 ? NO_RANK : e->rank;
  } else {
    const mid_token *e = &t->mids[mid_cell(t, k)];
    return e->len == 0 ? NO_RANK : e->rank;
  }
}

/* lookup, which first rules out most strings of 3 to 187 bytes by their
** first bytes and length. */
static uint32_t rank_of(const rag_tokenizer *t, const unsigned char *p, size_t n) {
  if (n == 2) return t->pair_rank[p[0] << 8 | p[1]];
  if (n == 3 && !IS_TRIPLE(t, p)) return NO_RANK;
  if (n >= 4 && n <= LENS_SHORT && !(short_lens(t, hash4(p)) >> (n - 4) & 1)) return NO_RANK;
  if (n > LENS_SHORT && n <= LENS_LONG && !LONG_LEN(t, hash4(p), n)) return NO_RANK;
  return lookup(t, p, n);
}

/*
** rank_of for the merges of short pieces (the cache's misses), which ask
** about strings of 3 to 16 bytes most: those are filtered in 64 KB and
** then found in shorts or mids in one memory access, where the token table
** takes three (slot, token, bytes). The search over long pieces keeps to
** rank_of and the token table that its own lookups warm.
*/
static uint32_t rank_short(const rag_tokenizer *t, const unsigned char *p, size_t n) {
  wkey k;
  if (n < 3 || n > 16) return rank_of(t, p, n);
  word_key(p, n, &k);
  return MAYBE_WORD(t, k.hash) ? word_rank(t, &k) : NO_RANK;
}

/* Which token lengths occur after which first bytes, so that a search for
** the tokens at a position looks up few strings. */
static void index_lengths(rag_tokenizer *t) {
  uint32_t rank;
  memset(t->pair_rank, 0xff, sizeof t->pair_rank);
  for (rank = 0; rank < t->nranks; rank++) {
    const token *k = &t->tokens[rank];
    const unsigned char *b = t->arena + k->off;
    if (k->len == 2) t->pair_rank[b[0] << 8 | b[1]] = rank;
    else if (k->len == 3) t->triples[hash3(b) >> 6] |= 1ull << (hash3(b) & 63);
    else if (k->len >= 4 && k->len <= LENS_SHORT) {
      uint64_t h = hash4(b), *e = &t->lens[LENS_SLOT(h)];
      if (*e == 0) *e = LENS_TAG(h) << 56;
      else if (*e >> 56 != LENS_TAG(h)) *e &= LOW56; /* several prefixes: no tag */
      *e |= 1ull << (k->len - 4);
    } else if (k->len > LENS_SHORT && k->len <= LENS_LONG) {
      uint64_t h = hash4(b);
      t->lens_long[h >> 56][(k->len - 60) >> 6] |= 1ull << ((k->len - 60) & 63);
    }
  }
}

/* Cells for n entries, at most 2/3 full: most walks stay in a line. */
static size_t cells_for(size_t n) {
  size_t cells = 16;
  while (cells < n + n / 2) cells *= 2;
  return cells;
}

/* Fills shorts and mids from the token table. */
static int index_short(rag_tokenizer *t) {
  size_t ns = 0, nm = 0, cs, cm;
  uint32_t rank;
  for (rank = 0; rank < t->nranks; rank++) {
    ns += t->tokens[rank].len >= 3 && t->tokens[rank].len <= 8;
    nm += t->tokens[rank].len >= 9 && t->tokens[rank].len <= 16;
  }
  cs = cells_for(ns);
  cm = cells_for(nm);
  t->shorts = (short_token *)rag_malloc(cs * sizeof *t->shorts);
  t->mids = (mid_token *)rag_malloc(cm * sizeof *t->mids);
  if (t->shorts == NULL || t->mids == NULL) return RAG_ENOMEM;
  memset(t->shorts, 0, cs * sizeof *t->shorts);
  memset(t->mids, 0, cm * sizeof *t->mids);
  t->smask = (uint32_t)(cs - 1);
  t->mmask = (uint32_t)(cm - 1);
  for (rank = 0; rank < t->nranks; rank++) {
    const token *x = &t->tokens[rank];
    wkey k;
    if (x->len < 3 || x->len > 16) continue;
    word_key(t->arena + x->off, x->len, &k);
    t->words[k.hash >> (32 - WORD_BITS + 6)] |= 1ull << (k.hash >> (32 - WORD_BITS) & 63);
    if (x->len <= 8) {
      short_token *e = &t->shorts[short_cell(t, &k)];
      e->bytes = k.lo;
      e->len = x->len;
      e->rank = rank;
    } else {
      mid_token *e = &t->mids[mid_cell(t, &k)];
      e->lo = k.lo;
      e->hi = k.hi;
      e->len = x->len;
      e->rank = rank;
    }
  }
  return RAG_OK;
}

/* Splits data into lines (a final newline optional, CRLF accepted). */
static size_t next_line(const unsigned char *d, size_t len, size_t pos, size_t *n) {
  size_t e = pos;
  while (e < len && d[e] != '\n') e++;
  *n = e - pos;
  if (*n > 0 && d[pos + *n - 1] == '\r') (*n)--;
  return e < len ? e + 1 : e;
}

static int load(rag_tokenizer *t, const unsigned char *d, size_t len, size_t *errline) {
  size_t pos, n, line, lines = 0, b64len, slots = 2, used = 0;
  uint32_t rank, maxrank = 0;
  for (pos = 0, line = 1; pos < len; line++) { /* pass 1: validate, size */
    size_t start = pos;
    pos = next_line(d, len, pos, &n);
    if (n == 0 && pos >= len) break; /* a trailing newline */
    if (n == 0 || !parse_line(d + start, n, &b64len, &rank)) {
      *errline = line;
      return RAG_EFORMAT;
    }
    if (rank > maxrank) maxrank = rank;
    lines++;
  }
  if (lines == 0 || maxrank >= lines + 65536) return RAG_EFORMAT; /* empty or too sparse */
  t->nranks = maxrank + 1;
  while (slots < 2 * (size_t)t->nranks) slots *= 2;
  if (RAG_MUL_OVERFLOWS((size_t)t->nranks, sizeof(token)) || slots > 0x80000000u)
    return RAG_EFORMAT;
  t->tokens = (token *)rag_malloc((size_t)t->nranks * sizeof(token));
  t->slots = (uint32_t *)rag_malloc(slots * sizeof(uint32_t));
  t->arena = (unsigned char *)rag_malloc(len + 1);
  if (t->tokens == NULL || t->slots == NULL || t->arena == NULL) return RAG_ENOMEM;
  memset(t->tokens, 0, (size_t)t->nranks * sizeof(token));
  memset(t->slots, 0, slots * sizeof(uint32_t));
  t->mask = (uint32_t)(slots - 1);
  /* the slot bits no rank + 1 uses (all but 18 for o200k_base) tag the hash */
  for (t->tags = UINT32_MAX; t->tags != 0 && (t->tags & t->nranks); t->tags <<= 1) continue;
  for (pos = 0, line = 1; pos < len; line++) { /* pass 2: decode, insert */
    size_t start = pos;
    long got;
    pos = next_line(d, len, pos, &n);
    if (n == 0) break;
    parse_line(d + start, n, &b64len, &rank);
    got = b64_decode(d + start, b64len, t->arena + used);
    if (got <= 0 || t->tokens[rank].len != 0) { /* bad base64 or a repeated rank */
      *errline = line;
      return RAG_EFORMAT;
    }
    t->tokens[rank].off = (uint32_t)used;
    t->tokens[rank].len = (uint32_t)got;
    if ((uint32_t)got > t->maxlen) t->maxlen = (uint32_t)got;
    used += (size_t)got;
    if (!insert(t, rank)) { /* a repeated token */
      *errline = line;
      return RAG_EFORMAT;
    }
  }
  for (n = 0; n < 256; n++) { /* every byte must be a token, or BPE can fail */
    unsigned char b = (unsigned char)n;
    if ((t->byte_rank[n] = lookup(t, &b, 1)) == NO_RANK) return RAG_EFORMAT;
  }
  index_lengths(t);
  return index_short(t);
}

int rag_tokenizer_new(const char *data, size_t len, rag_pretok pretok,
                      const rag_special *specials, size_t nspecial, size_t cache,
                      rag_tokenizer **out, size_t *errline) {
  rag_tokenizer *t;
  size_t i, extra = 0;
  int rc;
  *out = NULL;
  *errline = 0;
  if (nspecial > RAG_TOKENIZER_MAX_SPECIALS) return RAG_EINVAL;
  for (i = 0; i < nspecial; i++) {
    if (specials[i].len == 0 || specials[i].len > 1024) return RAG_EINVAL;
    extra += specials[i].len;
  }
  if (len > 0x7fffffffu) return RAG_EFORMAT; /* offsets are 32-bit */
  t = (rag_tokenizer *)rag_malloc(sizeof *t);
  if (t == NULL) return RAG_ENOMEM;
  memset(t, 0, sizeof *t);
  t->pretok = pretok;
  rc = load(t, (const unsigned char *)data, len, errline);
  if (rc == RAG_OK) {
    unsigned char *grown = (unsigned char *)rag_realloc(t->arena, len + 1 + extra);
    if (grown == NULL) rc = RAG_ENOMEM;
    else t->arena = grown;
  }
  for (i = 0; rc == RAG_OK && i < nspecial; i++) {
    size_t off = len + 1;
    if (specials[i].id < t->nranks && t->tokens[specials[i].id].len != 0) {
      rc = RAG_EFORMAT; /* the id is taken by an ordinary token */
      break;
    }
    for (size_t k = 0; k < i; k++) off += specials[k].len;
    memcpy(t->arena + off, specials[i].text, specials[i].len);
    t->specials[i].text = (const char *)t->arena + off;
    t->specials[i].len = specials[i].len;
    t->specials[i].id = specials[i].id;
  }
  t->nspecial = nspecial;
  if (rc == RAG_OK) rc = rag_piececache_init(&t->cache, cache);
  if (rc != RAG_OK) {
    rag_tokenizer_free(t);
    return rc;
  }
  *out = t;
  return RAG_OK;
}

void rag_tokenizer_free(rag_tokenizer *t) {
  if (t == NULL) return;
  rag_piececache_done(&t->cache);
  rag_free(t->arena);
  rag_free(t->tokens);
  rag_free(t->slots);
  rag_free(t->shorts);
  rag_free(t->mids);
  rag_free(t);
}

size_t rag_tokenizer_nranks(const rag_tokenizer *t) {
  return t->nranks;
}

size_t rag_tokenizer_nspecials(const rag_tokenizer *t) {
  return t->nspecial;
}

size_t rag_tokenizer_cache_size(const rag_tokenizer *t) {
  return rag_piececache_size(&t->cache);
}

const rag_special *rag_tokenizer_special(const rag_tokenizer *t, size_t i) {
  return i < t->nspecial ? &t->specials[i] : NULL;
}

/* --- character classes -------------------------------------------------- */

enum {
  C_LU = 1,   /* Lu, Lt */
  C_LL = 2,   /* Ll */
  C_LMO = 4,  /* Lm, Lo */
  C_M = 8,    /* Mn, Mc, Me */
  C_N = 16,   /* Nd, Nl, No */
  C_WS = 32,  /* the Unicode White_Space property (regex \s) */
  C_NL = 64,  /* \r or \n */
  C_L = C_LU | C_LL | C_LMO,
  C_UP = C_LU | C_LMO | C_M, /* o200k [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
  C_LO = C_LL | C_LMO | C_M  /* o200k [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
};

static unsigned class_of_cp(int32_t c) {
  unsigned k = 0;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LT: k = C_LU; break;
    case UTF8PROC_CATEGORY_LL: k = C_LL; break;
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: k = C_LMO; break;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: k = C_M; break;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: k = C_N; break;
    default: break;
  }
  if ((c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
      (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
      c == 0x205f || c == 0x3000)
    k |= C_WS;
  if (c == '\r' || c == '\n') k |= C_NL;
  return k;
}

/* Classes of the ASCII characters, as class_of_cp computes them. */
static const unsigned char ascii_class[128] = {
  0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 96, 32, 32, 96, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0,
  0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
  0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
  2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0,
};

/* class_at past ASCII, out of line so that the ASCII test inlines. */
static __attribute__((noinline)) unsigned class_wide(const unsigned char *s, size_t i,
                                                     size_t *n) {
  int32_t c;
  *n = rag_utf8_decode_valid(s + i, &c);
  return class_of_cp(c);
}

/* Class of the (valid) UTF-8 character at s[i]; its length in *n. */
static inline unsigned class_at(const unsigned char *s, size_t i, size_t *n) {
  if (s[i] < 0x80) {
    *n = 1;
    return ascii_class[s[i]];
  }
  return class_wide(s, i, n);
}

/* --- pre-tokenization --------------------------------------------------- */

/* End of the run of characters whose class meets `want`, from i. */
static size_t scan(const unsigned char *s, size_t len, size_t i, unsigned want) {
  size_t n;
  for (;;) {
    while (i < len && s[i] < 0x80 && (ascii_class[s[i]] & want)) i++;
    if (i >= len || s[i] < 0x80 || !(class_wide(s, i, &n) & want)) return i;
    i += n;
  }
}


/*
** The end of the run of bytes in lo..hi (ASCII, lo >= 0x20) from i, eight
** at a time where the byte order allows; with `fold`, of bytes that are in
** lo..hi once ORed with 0x20 (letters in either case when lo..hi is a..z).
*/
static inline size_t ascii_run(const unsigned char *s, size_t len, size_t i, unsigned lo,
                               unsigned hi, int fold) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (len - i >= 8) {
    uint64_t w, y, other;
    memcpy(&w, s + i, 8);
    y = (fold ? w | RAG_BYTES(0x20) : w) & RAG_BYTES(0x7f);
    other = ~(rag_ascii_in(y, lo, hi) & ~w) & RAG_BYTES(0x80); /* not in lo..hi, or not ASCII */
    if (other != 0) return i + ((size_t)__builtin_ctzll(other) >> 3);
    i += 8;
  }
#endif
  while (i < len && (fold ? s[i] | 0x20 : s[i]) >= lo && (fold ? s[i] | 0x20 : s[i]) <= hi) i++;
  return i;
}

/* scan(s, len, i, C_L), through ASCII letters eight at a time. */
static size_t scan_letters(const unsigned char *s, size_t len, size_t i) {
  i = ascii_run(s, len, i, 'a', 'z', 1);
  return i < len && s[i] >= 0x80 ? scan(s, len, i, C_L) : i;
}

static size_t scan_not(const unsigned char *s, size_t len, size_t i, unsigned avoid) {
  size_t n;
  while (i < len && !(class_at(s, i, &n) & avoid)) i += n;
  return i;
}

static size_t prev_char(const unsigned char *s, size_t i) {
  do i--;
  while (i > 0 && rag_utf8_is_cont(s[i]));
  return i;
}

static int lower_is(unsigned char c, char want) {
  return c == (unsigned char)want || c == (unsigned char)(want - 32);
}

/* Length of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or 0. Case-insensitive in
** Unicode's sense: U+017F (long s) folds to 's'. */
static size_t contraction(const unsigned char *s, size_t len, size_t i) {
  unsigned char a, b;
  if (i + 1 >= len || s[i] != '\'') return 0;
  a = s[i + 1];
  b = i + 2 < len ? s[i + 2] : 0;
  if (lower_is(a, 's') || lower_is(a, 't') || lower_is(a, 'm') || lower_is(a, 'd')) return 2;
  if (a == 0xc5 && b == 0xbf) return 3;
  if ((lower_is(a, 'r') || lower_is(a, 'v')) && lower_is(b, 'e')) return 3;
  if (lower_is(a, 'l') && lower_is(b, 'l')) return 3;
  return 0;
}

/* ' ?[^\s\p{L}\p{N}]+[\r\n]*' (o200k also lets '/' trail). */
static size_t punct(const unsigned char *s, size_t len, size_t i, unsigned c0, int slash) {
  size_t p = i, n;
  if (s[i] == ' ' && i + 1 < len && !(class_at(s, i + 1, &n) & (C_WS | C_L | C_N))) p = i + 1;
  else if (c0 & (C_WS | C_L | C_N)) return 0;
  p = scan_not(s, len, p, C_WS | C_L | C_N);
  while (p < len && (s[p] == '\r' || s[p] == '\n' || (slash && s[p] == '/'))) p++;
  return p;
}

/* The three whitespace alternatives, in order:
** \s*[\r\n]+ | \s+(?!\S) | \s+ */
static size_t space(const unsigned char *s, size_t len, size_t i) {
  size_t j = i, n, nl_end = 0, last = i;
  while (j < len) {
    unsigned k = class_at(s, j, &n);
    if (!(k & C_WS)) break;
    if (k & C_NL) nl_end = j + n;
    last = j;
    j += n;
  }
  if (nl_end) return nl_end;
  if (j == len || last == i) return j;
  return last; /* leave the last space to prefix the next word */
}

/* \p{N}{1,3} after its first digit, which ends at i. */
static size_t digits(const unsigned char *s, size_t len, size_t i) {
  size_t n, k;
  for (k = 1; k < 3 && i < len && (class_at(s, i, &n) & C_N); k++) i += n;
  return i;
}

/* 1 for the ASCII letters, by byte. */
static const unsigned char ascii_letters[256] = {
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
  0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

#define ASCII_LETTER(c) (ascii_letters[(unsigned char)(c)])

/* next_cl100k past the pieces its inline part takes. */
static __attribute__((noinline)) size_t next_cl100k_rest(const unsigned char *s, size_t len,
                                                         size_t i) {
  size_t n0, n, e;
  unsigned c0 = class_at(s, i, &n0);
  if ((e = contraction(s, len, i)) != 0) return i + e;
  if (c0 & C_L) return scan(s, len, i + n0, C_L);
  if (!(c0 & (C_NL | C_N)) && i + n0 < len && (class_at(s, i + n0, &n) & C_L))
    return scan(s, len, i + n0, C_L);
  if (c0 & C_N) return digits(s, len, i + n0);
  if ((e = punct(s, len, i, c0, 0)) != 0) return e;
  return space(s, len, i);
}

/* The end of the cl100k piece at i; the commonest pieces first, inline: a
** word, or a space and a word. */
static inline size_t next_cl100k(const unsigned char *s, size_t len, size_t i) {
  if (ASCII_LETTER(s[i])) return scan_letters(s, len, i + 1);
  if (s[i] == ' ' && i + 1 < len && ASCII_LETTER(s[i + 1])) return scan_letters(s, len, i + 2);
  return next_cl100k_rest(s, len, i);
}

/* o200k's two word alternatives:
** P? [UP]* [LO]+ C?  then  P? [UP]+ [LO]* C?
** with P = [^\r\n\p{L}\p{N}] and C the contractions. */
static size_t word_o200k(const unsigned char *s, size_t len, size_t i, unsigned c0, size_t n0) {
  int alt, pass;
  for (alt = 0; alt < 2; alt++) {
    for (pass = 0; pass < 2; pass++) {
      size_t p = i, u, k, n, e;
      if (pass == 0) {
        if (c0 & (C_NL | C_L | C_N)) continue;
        p = i + n0;
      }
      u = scan(s, len, p, C_UP);
      if (alt == 0) { /* backtrack [UP]* until [LO]+ can start */
        for (k = u;; k = prev_char(s, k)) {
          if (k < len && (class_at(s, k, &n) & C_LO)) break;
          if (k == p) break;
        }
        if (k >= len || !(class_at(s, k, &n) & C_LO)) continue;
        e = scan(s, len, k, C_LO);
      } else {
        if (u == p) continue;
        e = scan(s, len, u, C_LO);
      }
      return e + contraction(s, len, e);
    }
  }
  return 0;
}

/* word_o200k for a word of ASCII letters, or of a space and one, that
** ends before an ASCII byte or the end: 0 for anything else. */
static size_t word_o200k_ascii(const unsigned char *s, size_t len, size_t i) {
  size_t p = i, u, e;
  if (s[i] == ' ' && i + 1 < len) p = i + 1;
  if (!ASCII_LETTER(s[p])) return 0;
  u = ascii_run(s, len, p, 'A', 'Z', 0);
  e = ascii_run(s, len, u, 'a', 'z', 0);
  if (e < len && s[e] >= 0x80) return 0; /* a letter or mark may go on */
  /* [UP]* [LO]+ when there are lower-case letters, else [UP]+ */
  return e + contraction(s, len, e);
}

/* next_o200k past the pieces its inline part takes. */
static __attribute__((noinline)) size_t next_o200k_rest(const unsigned char *s, size_t len,
                                                        size_t i) {
  size_t n0, e;
  unsigned c0 = class_at(s, i, &n0);
  if ((e = word_o200k(s, len, i, c0, n0)) != 0) return e;
  if (c0 & C_N) return digits(s, len, i + n0);
  if ((e = punct(s, len, i, c0, 1)) != 0) return e;
  return space(s, len, i);
}

/* The end of the o200k piece at i; words of ASCII letters inline. */
static inline size_t next_o200k(const unsigned char *s, size_t len, size_t i) {
  size_t e = word_o200k_ascii(s, len, i);
  return e != 0 ? e : next_o200k_rest(s, len, i);
}

size_t rag_tokenizer_pretoken(rag_pretok pretok, const char *s, size_t len, size_t i) {
  if (pretok == RAG_PRETOK_O200K) return next_o200k((const unsigned char *)s, len, i);
  return next_cl100k((const unsigned char *)s, len, i);
}

/* --- merging ------------------------------------------------------------ */

/*
** Short pieces run tiktoken's own loop, which is quadratic. Long ones use a
** property of that loop: a token sequence is the BPE of its bytes exactly
** when its first token is the BPE of its own bytes and each adjacent pair
** "fits", i.e. is the BPE of the pair's bytes (then no merge ever crosses a
** seam). So every prefix of a piece has one encoding, the encoding of a
** longer prefix extends a shorter one by a token that fits its last token,
** and a depth-first search from the start of the piece finds the whole
** encoding: at each position it tries the token that last followed the
** same token (a good guess on repetitive text), then every token starting
** there from the longest down, and marks the positions from which the end
** cannot be reached. Each position tries each of its tokens at most twice
** and each fit costs at most one BPE of two tokens' bytes (cached per call;
** short tokens compare their own merges instead), so the time is linear in
** the piece, and the memory a bit per byte plus one id per token.
*/

/* Where tokens go: an id array, an array of token end offsets from base,
** or only a count; and the scratch space of long pieces, kept for one call. */
enum { KEEP_COUNT, KEEP_IDS, KEEP_ENDS };

typedef struct sink {
  uint32_t *ids;
  size_t *ends;
  size_t n, cap;
  size_t max;            /* a count may stop once n is above this */
  int keep;
  const unsigned char *base;
  uint32_t *stack;       /* the tokens of the long piece so far */
  size_t nstack;         /* capacity of stack */
  unsigned char *dead;   /* a bit per position no encoding gets past */
  size_t ndead;          /* bytes in dead */
  uint64_t *fits;        /* cached fits, left << 32 | right, bit 63 set if it fits */
  uint64_t *next;        /* the token last put after a token: left << 32 | right */
  unsigned bits;         /* log2 of the entries of fits and next */
  uint32_t *seams;       /* 2 (2 maxlen + 1): boundaries and ranks for fit */
  struct solo *solos;    /* 2^(bits - 2) solos of tokens, by id */
  uint64_t work;         /* the long piece's fits so far: the squares of their BPEs' lengths */
  struct rag_tokenizer_spans *rec; /* records each piece (rag_tokenizer_spans_new) */
} sink;

/* The merges of a token's own BPE ("solo"), to check a pair without a BPE
** of both: merge j joins a pair of rank rank[j], after which the first part
** has llen[j] bytes and the last part rlen[j]. */
#define SOLO_MAX 16 /* tokens of up to this many bytes get a solo */

typedef struct solo {
  uint32_t id;   /* NO_RANK: none */
  uint8_t n;     /* merges */
  uint8_t whole; /* the BPE of the token's bytes is the token */
  uint8_t llen[SOLO_MAX - 1], rlen[SOLO_MAX - 1];
  uint32_t rank[SOLO_MAX - 1];
} solo;

#define NO_LEFT 0x7fffffffu /* no token before: ranks are below this */
#define GUESSED 0x80000000u /* on the stack: the token was a guess */
#define FRESH ((size_t)-1)  /* a position not tried yet: guess, then the longest */
#define ANY ((size_t)-2)    /* the longest token at a position, no guess */

/* What the encoders return when a count has passed its sink's max: no
** error (the RAG_E* codes are positive), only no need to go on. */
#define PASSED (-1)

static void sink_init(sink *k, int keep, const char *base) {
  memset(k, 0, sizeof *k);
  k->max = (size_t)-1;
  k->keep = keep;
  k->base = (const unsigned char *)base;
}

/* Frees the scratch space (not the result). */
static void sink_done(sink *k) {
  rag_free(k->stack);
  rag_free(k->dead);
  rag_free(k->fits);
  rag_free(k->seams);
  rag_free(k->solos);
}

/* One token: its id and the byte just past it. */
static int emit(sink *k, uint32_t id, const unsigned char *end) {
  if (k->keep == KEEP_IDS) {
    uint32_t *ids = (uint32_t *)rag_grow(k->ids, &k->cap, k->n + 1, sizeof *ids);
    if (ids == NULL) return RAG_ENOMEM;
    k->ids = ids;
    k->ids[k->n] = id;
  } else if (k->keep == KEEP_ENDS) {
    size_t *ends = (size_t *)rag_grow(k->ends, &k->cap, k->n + 1, sizeof *ends);
    if (ends == NULL) return RAG_ENOMEM;
    k->ends = ends;
    k->ends[k->n] = (size_t)(end - k->base);
  }
  k->n++;
  return RAG_OK;
}

/*
** tiktoken's merge loop over the n bytes at p: b holds the part boundaries,
** r the rank of each part with the next. Returns the number of boundaries
** left, or 0 as soon as a merge would remove the boundary at `seam` (0:
** none). b and r have room for n + 1 entries. Records the merges in `rec`
** unless it is NULL, and the id of each part in `id` (n entries) unless it
** is NULL. `rank` is rank_of or rank_short.
*/
typedef uint32_t (*rank_fn)(const rag_tokenizer *t, const unsigned char *p, size_t n);

static size_t bpe(const rag_tokenizer *t, const unsigned char *p, size_t n, size_t seam,
                  uint32_t *b, uint32_t *r, solo *rec, uint32_t *id, rank_fn rank) {
  size_t m = n + 1, i, best;
  for (i = 0; i < m; i++) {
    b[i] = (uint32_t)i;
    r[i] = i + 2 < m ? t->pair_rank[p[i] << 8 | p[i + 1]] : NO_RANK;
  }
  if (id != NULL)
    for (i = 0; i < n; i++) id[i] = t->byte_rank[p[i]];
  for (;;) {
    uint64_t low = UINT64_MAX; /* the lowest rank << 32 | its place: leftmost on ties */
    uint32_t min;
    for (i = 0; i + 1 < m; i++) {
      uint64_t key = (uint64_t)r[i] << 32 | i;
      low = key < low ? key : low; /* no branch to mispredict */
    }
    min = (uint32_t)(low >> 32);
    best = (size_t)(uint32_t)low;
    if (min == NO_RANK) break;
    if (b[best + 1] == seam) return 0;
    /* parts best and best+1 become one: drop boundary best+1 */
    for (i = best + 1; i + 1 < m; i++) { /* loops: mostly a few entries, no call */
      b[i] = b[i + 1];
      r[i] = r[i + 1];
    }
    if (id != NULL) { /* the merged part is the token of the pair's rank */
      id[best] = min;
      for (i = best + 1; i + 2 < m; i++) id[i] = id[i + 1];
    }
    m--;
    if (rec != NULL) {
      rec->rank[rec->n] = min;
      rec->llen[rec->n] = (uint8_t)b[1];
      rec->rlen[rec->n] = (uint8_t)(n - b[m - 2]);
      rec->n++;
    }
    r[best] = best + 2 < m ? rank(t, p + b[best], b[best + 2] - b[best]) : NO_RANK;
    if (best > 0) r[best - 1] = rank(t, p + b[best - 1], b[best + 1] - b[best - 1]);
  }
  return m;
}

/* The ids of the piece of len (2..SMALL_PIECE) bytes at p that is not a
** token: their number. */
static size_t small_ids(const rag_tokenizer *t, const unsigned char *p, size_t len,
                        uint32_t *ids) {
  uint32_t b[SMALL_PIECE + 1], r[SMALL_PIECE + 1];
  size_t i, w;
  /* the first merges ask for 3 and 4 byte strings: fetch their cells at once */
  if (len <= RAG_PIECECACHE_MAXLEN)
    for (w = 3; w <= 4; w++)
      for (i = 0; i + w <= len; i++) {
        wkey k;
        word_key(p + i, w, &k);
        if (MAYBE_WORD(t, k.hash)) __builtin_prefetch(&t->shorts[k.hash & t->smask]);
      }
  return bpe(t, p, len, 0, b, r, NULL, ids, rank_short) - 1;
}

/* n ids of tokens that spell the bytes from p on. */
static int emit_ids(const rag_tokenizer *t, const unsigned char *p, const uint32_t *ids,
                    size_t n, sink *k) {
  size_t i;
  if (k->keep == KEEP_IDS) {
    uint32_t *v = (uint32_t *)rag_grow(k->ids, &k->cap, k->n + n, sizeof *v);
    if (v == NULL) return RAG_ENOMEM;
    k->ids = v;
    memcpy(v + k->n, ids, n * sizeof *v);
  } else if (k->keep == KEEP_ENDS) {
    size_t *v = (size_t *)rag_grow(k->ends, &k->cap, k->n + n, sizeof *v), end;
    if (v == NULL) return RAG_ENOMEM;
    k->ends = v;
    end = (size_t)(p - k->base);
    for (i = 0; i < n; i++) v[k->n + i] = end += t->tokens[ids[i]].len;
  }
  k->n += n;
  return RAG_OK;
}

static int merge_small(const rag_tokenizer *t, const unsigned char *p, size_t len, sink *k) {
  uint32_t ids[SMALL_PIECE];
  return emit_ids(t, p, ids, small_ids(t, p, len, ids), k);
}

/*
** A piece of at most RAG_PIECECACHE_MAXLEN bytes through the tokenizer's
** cache: its tokens from there when they are kept (the count alone does for
** a count), else computed and kept.
*/
static int encode_short(const rag_tokenizer *t, const unsigned char *p, size_t len,
                        const rag_piecekey *key, sink *k) {
  uint32_t ids[RAG_PIECECACHE_MAXLEN];
  size_t n, had;
  int kept = 0;
  if (k->keep == KEEP_COUNT) {
    if ((had = rag_piececache_get(key, NULL, NULL)) != 0) {
      k->n += had;
      return RAG_OK;
    }
  } else if ((had = rag_piececache_get(key, ids, &kept)) != 0 && kept) {
    return emit_ids(t, p, ids, had, k);
  }
  if ((ids[0] = rank_short(t, p, len)) != NO_RANK) n = 1;
  else if (len == 1) return RAG_EFORMAT; /* cannot happen: every byte is a token */
  else n = small_ids(t, p, len, ids);
  if (had == 0) rag_piececache_put(key, ids, n);
  return emit_ids(t, p, ids, n, k);
}

/* The longest of the lengths in `mask` (bit j: length j + base) of a token
** at p, or 0; its rank in *r. */
static size_t longest_in(const rag_tokenizer *t, const unsigned char *p, uint64_t mask,
                         size_t base, uint32_t *r) {
  while (mask != 0) {
    size_t j = 63 - (size_t)__builtin_clzll(mask);
    if ((*r = lookup(t, p, j + base)) != NO_RANK) return j + base;
    mask &= ~(1ull << j);
  }
  return 0;
}

/* Bits 0 .. n-1 of a 64-bit mask. */
static uint64_t low_bits(size_t n) {
  return n >= 64 ? UINT64_MAX : (1ull << n) - 1;
}

/* The longest token at s[i..len) shorter than `below` bytes: its length
** (0 if below is 1) and its rank in *r. */
static size_t longest_at(const rag_tokenizer *t, const unsigned char *s, size_t len, size_t i,
                         size_t below, uint32_t *r) {
  const unsigned char *p = s + i;
  size_t n = len - i, m;
  if (n >= below) n = below - 1;
  if (n >= 4) {
    uint64_t h = hash4(p);
    const uint64_t *w = t->lens_long[h >> 56];
    for (m = n < t->maxlen ? n : t->maxlen; m > LENS_LONG; m--) /* very long tokens */
      if ((*r = lookup(t, p, m)) != NO_RANK) return m;
    if (n >= 124 && (m = longest_in(t, p, w[1] & low_bits(n - 123), 124, r))) return m;
    if (n >= 60 && (m = longest_in(t, p, w[0] & low_bits(n - 59), 60, r))) return m;
    if ((m = longest_in(t, p, short_lens(t, h) & low_bits(n - 3), 4, r))) return m;
  }
  if (n >= 3 && IS_TRIPLE(t, p) && (*r = lookup(t, p, 3)) != NO_RANK) return 3;
  if (n >= 2 && (*r = t->pair_rank[p[0] << 8 | p[1]]) != NO_RANK) return 2;
  if (n >= 1) *r = t->byte_rank[p[0]];
  return n >= 1;
}

/* The solo of token id (of at most SOLO_MAX bytes), cached per call. */
static const solo *solo_of(const rag_tokenizer *t, uint32_t id, sink *k) {
  solo *u = &k->solos[(id * 0x9e3779b1u) >> (32 - (k->bits - 2))];
  if (u->id != id) {
    uint32_t b[SOLO_MAX + 1], r[SOLO_MAX + 1];
    u->id = id;
    u->n = 0;
    u->whole =
        bpe(t, t->arena + t->tokens[id].off, t->tokens[id].len, 0, b, r, u, NULL, rank_of) == 2;
  }
  return u;
}

/*
** Whether the BPE of tokens u and v, which meet at s, keeps them apart.
** Until a pair across the seam merges, each side merges as it does alone,
** the two interleaved by rank (u first on a tie, being to the left); the
** pair across the seam (u's last part and v's first) merges as soon as its
** rank is below u's next merge and at most v's next.
*/
static int apart(const rag_tokenizer *t, const unsigned char *s, const solo *u, const solo *v) {
  size_t a = 0, b = 0, rl = 1, ll = 1;
  uint32_t c = t->pair_rank[s[-1] << 8 | s[0]];
  for (;;) {
    uint32_t ku = a < u->n ? u->rank[a] : NO_RANK, kv = b < v->n ? v->rank[b] : NO_RANK;
    if (c < ku && c <= kv) return 0;
    if (ku == NO_RANK && kv == NO_RANK) return 1;
    if (ku <= kv) {
      if (u->rlen[a] != rl) {
        rl = u->rlen[a];
        c = rank_of(t, s - rl, rl + ll);
      }
      a++;
    } else {
      if (v->llen[b] != ll) {
        ll = v->llen[b];
        c = rank_of(t, s - rl, rl + ll);
      }
      b++;
    }
  }
}

/* Whether token `right` (n bytes at s[i]) may follow token `left` (which
** ends at i), or start the piece when left is NO_LEFT. */
static int fits(const rag_tokenizer *t, const unsigned char *s, size_t i, uint32_t left,
                uint32_t right, size_t n, sink *k) {
  uint64_t key = (uint64_t)left << 32 | right, *slot;
  size_t a = left == NO_LEFT ? 0 : t->tokens[left].len, m;
  slot = &k->fits[(key * 0x9e3779b97f4a7c15ull) >> (64 - k->bits)];
  if ((*slot & ~(1ull << 63)) == key) return (int)(*slot >> 63);
  if (a <= SOLO_MAX && n <= SOLO_MAX) {
    solo v = *solo_of(t, right, k); /* a copy: the left one may take its place */
    m = v.whole && (a == 0 || apart(t, s + i, solo_of(t, left, k), &v));
  } else {
    k->work += (uint64_t)(a + n) * (a + n); /* what a merge loop over them costs */
    m = bpe(t, s + i - a, a + n, a, k->seams, k->seams + 2 * (size_t)t->maxlen + 1, NULL, NULL,
            rank_of);
    m = m == (a ? 3u : 2u);
  }
  *slot = key | (uint64_t)m << 63;
  return (int)m;
}

/* Scratch space for a long piece of len bytes; the dead bits cleared. */
static int prepare(const rag_tokenizer *t, size_t len, sink *k) {
  size_t bytes = len / 8 + 1, seams = 2 * (2 * (size_t)t->maxlen + 1);
  unsigned bits = 10;
  while (bits < 16 && ((size_t)1 << bits) < len / 4) bits++;
  if (k->ndead < bytes) {
    unsigned char *dead = (unsigned char *)rag_realloc(k->dead, bytes);
    if (dead == NULL) return RAG_ENOMEM;
    k->dead = dead;
    k->ndead = bytes;
  }
  memset(k->dead, 0, bytes);
  if (k->bits < bits) {
    uint64_t *fits = (uint64_t *)rag_realloc(k->fits, ((size_t)2 << bits) * sizeof *fits);
    solo *solos;
    size_t j;
    if (fits == NULL) return RAG_ENOMEM;
    memset(fits, 0xff, ((size_t)2 << bits) * sizeof *fits);
    k->fits = fits;
    k->next = fits + ((size_t)1 << bits);
    k->bits = 0; /* until solos has its size too */
    solos = (solo *)rag_realloc(k->solos, ((size_t)1 << (bits - 2)) * sizeof *solos);
    if (solos == NULL) return RAG_ENOMEM;
    for (j = 0; j < (size_t)1 << (bits - 2); j++) solos[j].id = NO_RANK;
    k->solos = solos;
    k->bits = bits;
  }
  if (k->seams == NULL) {
    if (RAG_MUL_OVERFLOWS(seams, sizeof(uint32_t))) return RAG_ENOMEM;
    if ((k->seams = (uint32_t *)rag_malloc(seams * sizeof(uint32_t))) == NULL) return RAG_ENOMEM;
  }
  return RAG_OK;
}

#define IS_DEAD(k, i) ((k)->dead[(i) >> 3] >> ((i) & 7) & 1)

/* The token that last followed `left`, if its bytes are at s[i..len). */
static uint32_t guess(const rag_tokenizer *t, const unsigned char *s, size_t len, size_t i,
                      uint32_t left, const sink *k) {
  uint64_t e = k->next[((uint64_t)left * 0x9e3779b97f4a7c15ull) >> (64 - k->bits)];
  const token *g;
  if (e >> 32 != left) return NO_RANK;
  g = &t->tokens[(uint32_t)e];
  if (g->len > len - i || memcmp(t->arena + g->off, s + i, g->len) != 0) return NO_RANK;
  return (uint32_t)e;
}

/*
** tiktoken's merge loop over a whole long piece: O(len^2), what the search
** gives up for when it has cost as much (some runs of spaces send it back
** and forth: 130 spaces took 7 ms).
*/
static int merge_plain(const rag_tokenizer *t, const unsigned char *p, size_t len, sink *k) {
  uint32_t *b;
  size_t n;
  int rc;
  if (RAG_MUL_OVERFLOWS(len + 1, 3 * sizeof *b)) return RAG_ENOMEM;
  if ((b = (uint32_t *)rag_malloc(3 * (len + 1) * sizeof *b)) == NULL) return RAG_ENOMEM;
  n = bpe(t, p, len, 0, b, b + len + 1, NULL, b + 2 * (len + 1), rank_of) - 1;
  rc = emit_ids(t, p, b + 2 * (len + 1), n, k);
  rag_free(b);
  return rc;
}

/* The encoding of the long piece s[0..len): the search described above.
** At position i after token `left`, the tokens of `below` bytes or more
** have been tried. */
static int merge_long(const rag_tokenizer *t, const unsigned char *s, size_t len, sink *k) {
  size_t i = 0, below = FRESH, n = 0, m, j;
  uint32_t r, left = NO_LEFT, flag;
  int rc = prepare(t, len, k);
  if (rc != RAG_OK) return rc;
  k->work = 0;
  while (i < len) {
    if (k->work > (uint64_t)len * len) return merge_plain(t, s, len, k);
    flag = 0;
    if (below == FRESH) {
      below = ANY;
      if ((r = guess(t, s, len, i, left, k)) != NO_RANK) flag = GUESSED;
    }
    m = flag ? t->tokens[r].len : longest_at(t, s, len, i, below, &r);
    if (m == 0) { /* nothing past i reaches the end: back up */
      if (n == 0) return RAG_EFORMAT; /* cannot happen: the encoding exists */
      k->dead[i >> 3] |= (unsigned char)(1u << (i & 7));
      r = k->stack[--n];
      below = r & GUESSED ? ANY : t->tokens[r].len;
      i -= t->tokens[r & ~GUESSED].len;
      left = n ? k->stack[n - 1] & ~GUESSED : NO_LEFT;
    } else if ((i + m < len && IS_DEAD(k, i + m)) || !fits(t, s, i, left, r, m, k)) {
      if (!flag) below = m;
    } else {
      uint32_t *stack = (uint32_t *)rag_grow(k->stack, &k->nstack, n + 1, sizeof *stack);
      if (stack == NULL) return RAG_ENOMEM;
      k->stack = stack;
      k->stack[n++] = r | flag;
      k->next[((uint64_t)left * 0x9e3779b97f4a7c15ull) >> (64 - k->bits)] = (uint64_t)left << 32 | r;
      left = r;
      i += m;
      below = FRESH;
    }
  }
  if (k->keep == KEEP_COUNT) {
    k->n += n;
    return RAG_OK;
  }
  for (i = 0, j = 0; j < n; j++) {
    r = k->stack[j] & ~GUESSED;
    i += t->tokens[r].len;
    if ((rc = emit(k, r, s + i)) != RAG_OK) return rc;
  }
  return RAG_OK;
}

/* A piece that is not short, or any piece without a cache. */
static int encode_piece(const rag_tokenizer *t, const unsigned char *p, size_t len, sink *k) {
  uint32_t r = rank_short(t, p, len);
  if (r != NO_RANK) return emit(k, r, p + len);
  if (len == 1) return RAG_EFORMAT; /* cannot happen: every byte is a token */
  if (len <= SMALL_PIECE) return merge_small(t, p, len, k);
  return merge_long(t, p, len, k);
}

/* {====== Spans of one text ======} */

/*
** How far past a piece's end the pre-tokenizers look to decide it: the
** next character (4 bytes), or the three of a contraction after a word.
** A run of whitespace is read to its end, but what decides the piece is
** the run's last newline (\s*[\r\n]+: the piece ends there) or its last
** character (\s+(?!\S): the piece ends before it), both within the bytes
** up to the piece's end and the next character.
*/
#define SPAN_LOOK 8

/* A piece of the whole text: its end and the tokens up to there. Offsets
** fit 32 bits: a longer text has no pieces and is counted afresh. */
typedef struct span_piece {
  uint32_t end, upto;
} span_piece;

struct rag_tokenizer_spans {
  const rag_tokenizer *t;
  const unsigned char *s;
  size_t len;
  span_piece *v; /* the whole text's pieces, in order */
  size_t n, cap;
  sink k; /* fresh counts */
};

static int record(struct rag_tokenizer_spans *sp, size_t e, size_t upto) {
  if (sp->n == sp->cap) {
    span_piece *v = (span_piece *)rag_grow(sp->v, &sp->cap, sp->n + 1, sizeof *v);
    if (v == NULL) return RAG_ENOMEM;
    sp->v = v;
  }
  sp->v[sp->n].end = (uint32_t)e;
  sp->v[sp->n++].upto = (uint32_t)upto;
  return RAG_OK;
}

/* Pieces are split off BATCH at a time, and the cache sets of the short
** ones fetched before any is looked up, so that their memory latencies
** overlap. */
#define BATCH 16

static int encode_ordinary(const rag_tokenizer *t, const unsigned char *s, size_t len, sink *k) {
  size_t i = 0, e, nb, b, end[BATCH];
  rag_piecekey key[BATCH]; /* len 0: not looked up in the cache */
  int rc, o200k = t->pretok == RAG_PRETOK_O200K, cached = t->cache.sets != NULL;
  while (i < len) {
    for (nb = 0, e = i; nb < BATCH && e < len; nb++) {
      size_t a = e;
      end[nb] = e = o200k ? next_o200k(s, len, a) : next_cl100k(s, len, a);
      key[nb].len = 0;
      if (e - a <= RAG_PIECECACHE_MAXLEN && cached) {
        rag_piececache_key(&t->cache, s + a, e - a, &key[nb]);
        __builtin_prefetch(key[nb].set);
      }
    }
    for (b = 0; b < nb; i = end[b++]) {
      rc = key[b].len ? encode_short(t, s + i, end[b] - i, &key[b], k)
                      : encode_piece(t, s + i, end[b] - i, k);
      if (rc == RAG_OK && k->rec != NULL) rc = record(k->rec, end[b], k->n);
      if (rc != RAG_OK) return rc;
    }
    if (k->n > k->max) return PASSED;
  }
  return RAG_OK;
}

int rag_tokenizer_spans_new(const rag_tokenizer *t, const char *s, size_t len,
                            rag_tokenizer_spans **out) {
  rag_tokenizer_spans *sp = (rag_tokenizer_spans *)rag_malloc(sizeof *sp);
  int rc = RAG_OK;
  *out = NULL;
  if (sp == NULL) return RAG_ENOMEM;
  sp->t = t;
  sp->s = (const unsigned char *)s;
  sp->len = len;
  sp->v = NULL;
  sp->n = sp->cap = 0;
  sink_init(&sp->k, KEEP_COUNT, s);
  if (len <= UINT32_MAX) { /* about 4 bytes a piece in most text */
    sp->cap = len / 4 + 16;
    if ((sp->v = (span_piece *)rag_malloc(sp->cap * sizeof *sp->v)) == NULL) {
      rag_free(sp);
      return RAG_ENOMEM;
    }
    sp->k.rec = sp;
    rc = encode_ordinary(t, sp->s, len, &sp->k);
    sp->k.rec = NULL;
  }
  if (rc != RAG_OK) {
    rag_tokenizer_spans_free(sp);
    return rc;
  }
  *out = sp;
  return RAG_OK;
}

void rag_tokenizer_spans_free(rag_tokenizer_spans *sp) {
  if (sp == NULL) return;
  sink_done(&sp->k);
  rag_free(sp->v);
  rag_free(sp);
}

/*
** Counts the pieces of the span ending at b from byte *p, until the count
** is above max or (when sync) a piece of the whole text starts where one of
** the span's does. Piece *j of the whole text is the one that starts at *p
** when one does.
*/
static int fresh(rag_tokenizer_spans *sp, size_t *p, size_t b, size_t max, size_t *j, int sync) {
  const rag_tokenizer *t = sp->t;
  const unsigned char *s = sp->s;
  int o200k = t->pretok == RAG_PRETOK_O200K, rc;
  while (*p < b && sp->k.n <= max) {
    size_t i = *p, e;
    if (sync && *j < sp->n && (*j == 0 ? 0 : sp->v[*j - 1].end) == i) return RAG_OK;
    e = o200k ? next_o200k(s, b, i) : next_cl100k(s, b, i);
    if ((rc = encode_piece(t, s + i, e - i, &sp->k)) != RAG_OK) return rc;
    *p = e;
    while (*j < sp->n && sp->v[*j].end <= e) ++*j;
  }
  return RAG_OK;
}

int rag_tokenizer_spans_count(rag_tokenizer_spans *sp, size_t a, size_t b, size_t max,
                              size_t *n) {
  size_t p = a, j = 0, lo, hi;
  int rc;
  sp->k.n = 0;
  *n = 0;
  if (a > 0) { /* j: the first piece that starts at or after a */
    for (lo = 0, hi = sp->n; lo < hi;) {
      size_t mid = lo + (hi - lo) / 2;
      if (sp->v[mid].end < a) lo = mid + 1;
      else hi = mid;
    }
    j = lo + 1;
  }
  if ((rc = fresh(sp, &p, b, max, &j, 1)) != RAG_OK) return rc;
  if (p < b && sp->k.n <= max) { /* at piece j: take the pieces that b cannot change */
    for (lo = j, hi = sp->n; lo < hi;) {
      size_t mid = lo + (hi - lo) / 2;
      if ((size_t)sp->v[mid].end + SPAN_LOOK <= b) lo = mid + 1;
      else hi = mid;
    }
    if (lo > j) {
      sp->k.n += sp->v[lo - 1].upto - (j == 0 ? 0 : sp->v[j - 1].upto);
      p = sp->v[lo - 1].end;
      j = lo;
    }
    rc = fresh(sp, &p, b, max, &j, 0);
  }
  *n = sp->k.n;
  return rc;
}

static const unsigned char *find_bytes(const unsigned char *h, size_t hn, const char *needle,
                                       size_t nn) {
  const unsigned char *end = h + hn - nn + 1, *p = h; /* hn >= nn >= 1 */
  while (p < end && (p = (const unsigned char *)memchr(p, needle[0], (size_t)(end - p))) != NULL) {
    if (memcmp(p, needle, nn) == 0) return p;
    p++;
  }
  return NULL;
}

/*
** The earliest allowed special at or after i: its index, or -1 (longest on
** a tie). next[j] caches special j's first hit at or after an earlier i, so
** each special's text is scanned once overall; one with no hit left is
** dropped from *allowed.
*/
static int find_special(const rag_tokenizer *t, const unsigned char *s, size_t len, size_t i,
                        uint32_t *allowed, size_t *next, size_t *at) {
  int best = -1;
  size_t j;
  for (j = 0; j < t->nspecial; j++) {
    const rag_special *sp = &t->specials[j];
    if (!(*allowed & (1u << j))) continue;
    if (next[j] == (size_t)-1 || next[j] < i) {
      const unsigned char *hit =
          len - i < sp->len ? NULL : find_bytes(s + i, len - i, sp->text, sp->len);
      if (hit == NULL) {
        *allowed &= ~(1u << j);
        continue;
      }
      next[j] = (size_t)(hit - s);
    }
    if (best < 0 || next[j] < *at || (next[j] == *at && sp->len > t->specials[best].len)) {
      best = (int)j;
      *at = next[j];
    }
  }
  return best;
}

static int run(const rag_tokenizer *t, const char *str, size_t len, uint32_t allowed, sink *k,
               size_t *errpos) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0, at = 0, j, next[RAG_TOKENIZER_MAX_SPECIALS];
  int rc, sp;
  if ((*errpos = rag_text_first_invalid(s, len)) < len) {
    (*errpos)++; /* 1-based */
    return RAG_EENCODING;
  }
  *errpos = 0;
  allowed &= t->nspecial >= 32 ? UINT32_MAX : ((1u << t->nspecial) - 1);
  for (j = 0; j < RAG_TOKENIZER_MAX_SPECIALS; j++) next[j] = (size_t)-1;
  while (allowed && (sp = find_special(t, s, len, i, &allowed, next, &at)) >= 0) {
    if ((rc = encode_ordinary(t, s + i, at - i, k)) != RAG_OK) return rc;
    rc = emit(k, t->specials[sp].id, s + at + t->specials[sp].len);
    if (rc != RAG_OK) return rc;
    i = at + t->specials[sp].len;
  }
  return encode_ordinary(t, s + i, len - i, k);
}

/* Runs k over s; on an error k holds no memory and no tokens. */
static int collect(const rag_tokenizer *t, const char *s, size_t len, uint32_t allowed, sink *k,
                   size_t *errpos) {
  int rc = run(t, s, len, allowed, k, errpos);
  if (rc == PASSED) rc = RAG_OK;
  sink_done(k);
  if (rc != RAG_OK) {
    rag_free(k->ids);
    rag_free(k->ends);
    k->ids = NULL;
    k->ends = NULL;
    k->n = 0;
  }
  return rc;
}

int rag_tokenizer_encode(const rag_tokenizer *t, const char *s, size_t len, uint32_t allowed,
                         uint32_t **ids, size_t *n, size_t *errpos) {
  sink k;
  int rc;
  sink_init(&k, KEEP_IDS, s);
  rc = collect(t, s, len, allowed, &k, errpos);
  *ids = k.ids;
  *n = k.n;
  return rc;
}

int rag_tokenizer_count(const rag_tokenizer *t, const char *s, size_t len, uint32_t allowed,
                        size_t *n, size_t *errpos) {
  sink k;
  int rc;
  sink_init(&k, KEEP_COUNT, s);
  rc = collect(t, s, len, allowed, &k, errpos);
  *n = k.n;
  return rc;
}

int rag_tokenizer_count_upto(const rag_tokenizer *t, const char *s, size_t len, uint32_t allowed,
                             size_t max, size_t *n, size_t *errpos) {
  sink k;
  int rc;
  sink_init(&k, KEEP_COUNT, s);
  k.max = max;
  rc = collect(t, s, len, allowed, &k, errpos);
  *n = k.n;
  return rc;
}

int rag_tokenizer_ends(const rag_tokenizer *t, const char *s, size_t len, uint32_t allowed,
                       size_t **ends, size_t *n, size_t *errpos) {
  sink k;
  int rc;
  sink_init(&k, KEEP_ENDS, s);
  rc = collect(t, s, len, allowed, &k, errpos);
  *ends = k.ends;
  *n = k.n;
  return rc;
}

/* The bytes of one id, or NULL for an unknown id. */
static const unsigned char *id_bytes(const rag_tokenizer *t, uint32_t id, size_t *len) {
  size_t j;
  if (id < t->nranks && t->tokens[id].len != 0) {
    *len = t->tokens[id].len;
    return t->arena + t->tokens[id].off;
  }
  for (j = 0; j < t->nspecial; j++)
    if (t->specials[j].id == id) {
      *len = t->specials[j].len;
      return (const unsigned char *)t->specials[j].text;
    }
  return NULL;
}

int rag_tokenizer_decode(const rag_tokenizer *t, const uint32_t *ids, size_t n, char **out,
                         size_t *outlen, size_t *bad) {
  size_t i, total = 0, len, o = 0;
  char *buf;
  *out = NULL;
  *outlen = 0;
  for (i = 0; i < n; i++) {
    if (id_bytes(t, ids[i], &len) == NULL) {
      *bad = i;
      return RAG_EINVAL;
    }
    if (total + len < total) return RAG_ENOMEM;
    total += len;
  }
  if (total == (size_t)-1) return RAG_ENOMEM;
  buf = (char *)rag_malloc(total + 1);
  if (buf == NULL) return RAG_ENOMEM;
  for (i = 0; i < n; i++) {
    const unsigned char *b = id_bytes(t, ids[i], &len);
    memcpy(buf + o, b, len);
    o += len;
  }
  buf[o] = '\0';
  *out = buf;
  *outlen = o;
  return RAG_OK;
}
