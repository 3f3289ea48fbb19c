/*
** rag_mentions.c: the heuristic extractor and the entity key (see
** rag_mentions.h). Sentences come from rag_sentences_split; each sentence
** is cut into tokens with their classes, then one left-to-right walk emits
** names and noun phrases. Keys of ASCII text are folded in place; other
** text goes through utf8proc. Nothing is allocated per mention once the
** scratch buffers have grown.
*/
#include "rag_mentions.h"

#include <string.h>
#include <utf8proc.h>

#include "rag_fnv.h"
#include "rag_sentences.h"
#include "rag_text.h"
#include "rag_utf8.h"

/* NFKC_Casefold as utf8proc approximates it, as the analyzer folds. */
#define FOLD_OPTS                                                            \
  ((utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT | \
                       UTF8PROC_CASEFOLD | UTF8PROC_IGNORE))

/*
** Stopwords: what ends a noun phrase and what a sentence may start with
** without being a name. English function words (NLTK's list), the verbs,
** adverbs and connectives of academic prose that RAKE's lists add, the
** section labels of structured abstracts (Background, Methods, Results),
** and the letters a possessive or a contraction leaves ("s", "t").
*/
static const char *const stopwords[] = {
  "a", "about", "above", "across", "after", "again", "against", "all", "almost", "along",
  "also", "although", "always", "among", "an", "and", "another", "any", "are", "around", "as",
  "at", "based", "be", "became", "because", "been", "before", "being", "below", "between",
  "both", "but", "by", "can", "could", "despite", "did", "do", "does", "doing", "done",
  "down", "due", "during", "each", "either", "else", "especially", "even", "ever", "every",
  "few", "for", "found", "from", "further", "furthermore", "had", "has", "have", "having",
  "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "however", "i",
  "if", "in", "including", "indeed", "into", "is", "it", "its", "itself", "just", "least",
  "less", "like", "made", "many", "may", "might", "more", "moreover", "most",
  "much", "must", "my", "myself", "neither", "never", "nevertheless", "no", "nor", "not",
  "now", "of", "off", "often", "on", "once", "only", "or", "other", "others",
  "otherwise", "our", "ours", "ourselves", "out", "over", "own", "per", "perhaps", "rather",
  "s", "same", "several", "shall", "she", "should", "show", "showed", "shown", "shows",
  "since", "so", "some", "still", "such", "t", "than", "that", "the", "their", "theirs",
  "them", "themselves", "then", "there", "therefore", "these", "they", "this", "those",
  "though", "through", "thus", "to", "together", "too", "toward", "towards", "under",
  "unless", "until", "up", "upon", "us", "use", "used", "using", "usually", "very",
  "via", "was", "we", "well", "were", "what", "whatever", "when", "whereas", "where",
  "whether", "which", "while", "who", "whom", "whose", "why", "will", "with", "within",
  "without", "would", "yet", "you", "your", "yours", "yourself",
  /* the section labels of structured abstracts, which start sentences capitalised */
  "abstract", "background", "conclusion", "conclusions", "finally", "introduction", "methods",
  "objective", "objectives", "purpose", "results",
};
#define NSTOP (sizeof stopwords / sizeof stopwords[0])
#define STOP_MAXLEN 12u  /* the longest stopword ("nevertheless") */

/* Words that join two name tokens into one name. */
static const char *const connectors[] = {"of", "de", "van", "von", "der", "and"};

/* Token classes. */
enum {
  T_CAP = 1,    /* starts with an uppercase letter */
  T_ACRO = 2,   /* two uppercase letters, or one and a digit */
  T_LOWER = 4,  /* lowercase letters only (and joiners, marks) */
  T_STOP = 8,   /* a stopword, in any case */
  T_CONN = 16,  /* a connector, in lowercase */
  T_BREAK = 32, /* not adjacent to the token before (or first in its sentence) */
  T_ASCII = 64
};
#define T_NAME (T_CAP | T_ACRO)

typedef struct tok {
  size_t start, stop;
  unsigned flags;
} tok;

struct rag_mentions {
  uint64_t packed[NSTOP][2]; /* each stopword's bytes, zero-padded to 16 */
  uint16_t order[NSTOP];     /* the stopwords by length, then first letter */
  uint16_t bucket[(STOP_MAXLEN + 1) * 26 + 1]; /* length l, letter c: order[b[l*26+c], next) */
  uint32_t starts[STOP_MAXLEN + 1]; /* by length: bit c - 'a' when a stopword starts with c */
  uint32_t seconds[STOP_MAXLEN + 1][26]; /* by length and first letter: its second letters */
  unsigned char kind[128];   /* the kind of each ASCII character */
  tok *toks;
  size_t ntoks, tokcap;
  rag_mention *out;
  size_t nout, outcap;
  char *keys;
  size_t keylen, keycap;
};

static int kind_of(int32_t cp);

/* {====== Stopwords ======} */

/* w's first 16 bytes, letters lowercased, zero-padded: a stopword's form. */
static void pack(const unsigned char *w, size_t len, uint64_t out[2]) {
  unsigned char b[16];
  size_t i;
  memset(b, 0, sizeof b);
  for (i = 0; i < len && i < 16; i++) b[i] = (unsigned char)(w[i] | 0x20u); /* no other byte */
  memcpy(&out[0], b, 8); /* becomes a lowercase letter */
  memcpy(&out[1], b + 8, 8);
}

int rag_mentions_new(rag_mentions **out) {
  rag_mentions *m = (rag_mentions *)rag_malloc(sizeof *m);
  size_t i;
  *out = NULL;
  if (m == NULL) return RAG_ENOMEM;
  memset(m, 0, sizeof *m);
  for (i = 0; i < 128; i++) m->kind[i] = (unsigned char)kind_of((int32_t)i);
  for (i = 0; i < NSTOP; i++) { /* bucket sizes, then starts, then the order */
    size_t len = strlen(stopwords[i]), f = (size_t)(stopwords[i][0] - 'a');
    pack((const unsigned char *)stopwords[i], len, m->packed[i]);
    m->bucket[len * 26 + f + 1]++;
    m->starts[len] |= 1u << f;
    if (len > 1) m->seconds[len][f] |= 1u << (stopwords[i][1] - 'a');
  }
  for (i = 1; i < sizeof m->bucket / sizeof m->bucket[0]; i++) m->bucket[i] += m->bucket[i - 1];
  {
    uint16_t fill[(STOP_MAXLEN + 1) * 26];
    memcpy(fill, m->bucket, sizeof fill);
    for (i = 0; i < NSTOP; i++) {
      size_t len = strlen(stopwords[i]), f = (size_t)(stopwords[i][0] - 'a');
      m->order[fill[len * 26 + f]++] = (uint16_t)i;
    }
  }
  *out = m;
  return RAG_OK;
}

void rag_mentions_free(rag_mentions *m) {
  if (m == NULL) return;
  rag_free(m->toks);
  rag_free(m->out);
  rag_free(m->keys);
  rag_free(m);
}

void rag_mentions_defaults(rag_mentions_opts *o) {
  o->max_words = 3;
  o->phrases = 1;
  o->min_len = 2;
}

const char *rag_mentions_keys(const rag_mentions *m) {
  return m->keys;
}

/* Whether the ASCII word w (len bytes, any case) is a stopword. */
static int stop_ascii(const rag_mentions *m, const unsigned char *w, size_t len) {
  size_t b, f;
  unsigned first;
  uint64_t x[2];
  if (len == 0 || len > STOP_MAXLEN) return 0;
  first = w[0] | 0x20u; /* a quick no for most words */
  if (first < 'a' || first > 'z' || !(m->starts[len] >> (first - 'a') & 1)) return 0;
  f = first - 'a';
  if (len > 1) {
    unsigned second = w[1] | 0x20u;
    if (second < 'a' || second > 'z' || !(m->seconds[len][f] >> (second - 'a') & 1)) return 0;
  }
  pack(w, len, x);
  for (b = m->bucket[len * 26 + f]; b < m->bucket[len * 26 + f + 1]; b++) {
    const uint64_t *y = m->packed[m->order[b]];
    if (y[0] == x[0] && y[1] == x[1]) return 1;
  }
  return 0;
}

int rag_mentions_is_stopword(const rag_mentions *m, const char *w, size_t len) {
  size_t i;
  for (i = 0; i < len; i++)
    if ((unsigned char)w[i] >= 0x80) return 0;
  return stop_ascii(m, (const unsigned char *)w, len);
}

/* {====== Keys ======} */

/* ASCII classes of keys: 1 whitespace, 2 punctuation (Unicode P*: !"#%&'()*,-./:;?@[\]_{}) */
static const unsigned char ascii_key[128] = {
  0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  1, 2, 2, 2, 0, 2, 2, 2, 2, 2, 2, 0, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 0, 0, 0, 2,
  2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 0, 2,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2, 0, 0,
};

static int is_space(int32_t cp) {
  utf8proc_category_t c;
  if (cp < 0x80) return ascii_key[cp] == 1;
  if (cp == 0x85) return 1;
  c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

static int is_punct(int32_t cp) {
  utf8proc_category_t c;
  if (cp < 0x80) return ascii_key[cp] == 2;
  c = utf8proc_category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

/* Whether the code point ending at p[e] (exclusive) strips; its start in *b. */
static int strips_back(const unsigned char *p, size_t lo, size_t e, size_t *b) {
  int32_t cp;
  size_t i = e - 1;
  while (i > lo && rag_utf8_is_cont(p[i])) i--;
  rag_utf8_decode_valid(p + i, &cp);
  *b = i;
  return is_space(cp) || is_punct(cp);
}

/* Strips whitespace and punctuation from both ends of p[*b, *e). */
static void strip(const unsigned char *p, size_t *b, size_t *e) {
  size_t i;
  if (*b < *e && p[*b] < 0x80 && ascii_key[p[*b]] == 0 && p[*e - 1] < 0x80 &&
      ascii_key[p[*e - 1]] == 0)
    return; /* the common case: a letter or digit at both ends */
  while (*b < *e) {
    int32_t cp;
    size_t k = rag_utf8_decode_valid(p + *b, &cp);
    if (!is_space(cp) && !is_punct(cp)) break;
    *b += k;
  }
  while (*b < *e && strips_back(p, *b, *e, &i)) *e = i;
}

/*
** Appends the key of the valid UTF-8 at s (len bytes) to *buf (grown,
** rag_malloc'd, *blen used of *bcap): the key is at *key, *keylen bytes.
*/
static int append_key(const unsigned char *s, size_t len, char **buf, size_t *blen,
                      size_t *bcap, size_t *key, size_t *keylen) {
  static const char *const articles[] = {"the ", "a ", "an "};
  static const size_t artlen[] = {4, 2, 3};
  utf8proc_uint8_t *mapped = NULL;
  unsigned char *p;
  size_t i, n = 0, b, e, a;
  int space = 0;
  if (len + 1 > *bcap - *blen) {
    char *q = (char *)rag_grow(*buf, bcap, *blen + len + 1, 1);
    if (q == NULL) return RAG_ENOMEM;
    *buf = q;
  }
  p = (unsigned char *)*buf + *blen;
  for (i = 0; i < len && s[i] < 0x80; i++) { /* ASCII: lowercase, whitespace runs made one space */
    unsigned char ch = s[i];
    if (ascii_key[ch] == 1) {
      space = n > 0;
      continue;
    }
    if (space) p[n++] = ' ';
    space = 0;
    p[n++] = (unsigned char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
  }
  if (i < len) { /* not ASCII: utf8proc folds the whole name */
    utf8proc_ssize_t r = utf8proc_map(s, (utf8proc_ssize_t)len, &mapped, FOLD_OPTS);
    if (r < 0) return RAG_ENOMEM; /* the input is valid: only allocation fails */
    len = (size_t)r;
    if (len + 1 > *bcap - *blen) {
      char *q = (char *)rag_grow(*buf, bcap, *blen + len + 1, 1);
      if (q == NULL) {
        free(mapped);
        return RAG_ENOMEM;
      }
      *buf = q;
    }
    p = (unsigned char *)*buf + *blen;
    for (i = n = 0, space = 0; i < len;) {
      int32_t cp;
      size_t k = rag_utf8_decode_valid(mapped + i, &cp);
      if (is_space(cp)) {
        space = n > 0;
      } else {
        if (space) p[n++] = ' ';
        space = 0;
        memcpy(p + n, mapped + i, k);
        n += k;
      }
      i += k;
    }
    free(mapped);
  }
  b = 0;
  e = n;
  strip(p, &b, &e);
  for (a = 0; a < 3 && e - b > 2 && (p[b] == 't' || p[b] == 'a'); a++) {
    size_t al = artlen[a], j;
    for (j = 0; j < al && e - b > al && p[b + j] == (unsigned char)articles[a][j]; j++) {}
    if (j == al) {
      b += al;
      strip(p, &b, &e);
      break;
    }
  }
  if (b > 0) memmove(p, p + b, e - b);
  *key = *blen;
  *keylen = e - b;
  *blen += e - b;
  (*buf)[*blen] = '\0';
  return RAG_OK;
}

int rag_mentions_normalize(const char *s, size_t len, char **out, size_t *outlen,
                           size_t *errpos) {
  size_t bad = rag_text_first_invalid((const unsigned char *)s, len), blen = 0, cap = 0, key;
  char *buf = NULL;
  int rc;
  *out = NULL;
  *outlen = 0;
  if (bad < len) {
    *errpos = bad + 1;
    return RAG_EENCODING;
  }
  rc = append_key((const unsigned char *)s, len, &buf, &blen, &cap, &key, outlen);
  if (rc == RAG_OK && buf == NULL) { /* an empty input: an empty key */
    if ((buf = (char *)rag_malloc(1)) == NULL) return RAG_ENOMEM;
    buf[0] = '\0';
  }
  if (rc != RAG_OK) {
    rag_free(buf);
    return rc;
  }
  *out = buf;
  return RAG_OK;
}

/* {====== Tokens ======} */

/* Character kinds for tokens. */
enum { K_OTHER, K_SPACE, K_BREAK, K_UPPER, K_LOWER, K_LETTER, K_DIGIT, K_MARK, K_JOIN };

static int kind_of(int32_t cp) {
  if (cp < 0x80) {
    if (cp >= 'a' && cp <= 'z') return K_LOWER;
    if (cp >= 'A' && cp <= 'Z') return K_UPPER;
    if (cp >= '0' && cp <= '9') return K_DIGIT;
    if (cp == ' ' || cp == '\t') return K_SPACE;
    if (cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f') return K_BREAK;
    if (cp == '_') return K_MARK;
    if (cp == '-' || cp == '\'') return K_JOIN;
    return K_OTHER;
  }
  if (cp == 0x2019) return K_JOIN;
  if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) return K_BREAK;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LT: return K_UPPER;
    case UTF8PROC_CATEGORY_LL: return K_LOWER;
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: return K_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return K_DIGIT;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_PC:
      return K_MARK;
    case UTF8PROC_CATEGORY_ZS: return K_SPACE;
    case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: return K_BREAK;
    default: return K_OTHER;
  }
}

static int kind_at(const rag_mentions *m, const unsigned char *s, size_t i, size_t e, size_t *k) {
  int32_t cp;
  if (i >= e) {
    *k = 0;
    return K_OTHER;
  }
  if (s[i] < 0x80) {
    *k = 1;
    return m->kind[s[i]];
  }
  *k = rag_utf8_decode_valid(s + i, &cp);
  return kind_of(cp);
}

#define WORDISH(k) ((k) >= K_UPPER && (k) <= K_MARK)

/* The classes of the token s[a, b) whose letters were counted. */
static unsigned classify(const rag_mentions *m, const unsigned char *s, size_t a, size_t b,
                         int first, size_t upper, size_t lower, size_t digit, size_t other,
                         int ascii) {
  unsigned f = 0;
  size_t i;
  if (first == K_UPPER) f |= T_CAP;
  if (upper >= 2 || (upper >= 1 && digit >= 1)) f |= T_ACRO;
  if (upper == 0 && digit == 0 && other == 0 && lower > 0) f |= T_LOWER;
  if (ascii) {
    f |= T_ASCII;
    if ((f & (T_LOWER | T_CAP | T_ACRO)) && stop_ascii(m, s + a, b - a)) f |= T_STOP;
    if ((f & T_LOWER) && b - a <= 3 && b - a >= 2) {
      for (i = 0; i < sizeof connectors / sizeof connectors[0]; i++) {
        const char *c = connectors[i];
        if (c[0] == s[a] && c[1] == s[a + 1] &&
            (b - a == 2 ? c[2] == '\0' : c[2] != '\0' && c[2] == s[a + 2]))
          f |= T_CONN;
      }
    }
  }
  return f;
}

/* Cuts the sentence s[a, e) into m->toks. RAG_ENOMEM. */
static int tokenize(rag_mentions *m, const unsigned char *s, size_t a, size_t e) {
  size_t i = a, k;
  int adjacent = 0;
  m->ntoks = 0;
  while (i < e) {
    int kd = kind_at(m, s, i, e, &k);
    if (WORDISH(kd)) {
      size_t start = i, upper = 0, lower = 0, digit = 0, other = 0;
      int first = kd, ascii = 1;
      tok *t;
      for (;;) {
        size_t k2, k3;
        int n2;
        if (kd == K_UPPER) upper++;
        else if (kd == K_LOWER) lower++;
        else if (kd == K_DIGIT) digit++;
        else if (kd == K_LETTER) other++;
        if (k > 1) ascii = 0;
        i += k;
        while (i < e && s[i] >= 'a' && s[i] <= 'z') { /* the common case, at once */
          lower++;
          i++;
        }
        kd = kind_at(m, s, i, e, &k);
        if (WORDISH(kd)) continue;
        if (kd != K_JOIN) break;
        n2 = kind_at(m, s, i + k, e, &k2);
        if (!WORDISH(n2)) break;
        if (s[i] != '-' && (s[i + k] == 's' || s[i + k] == 'S') &&
            !WORDISH(kind_at(m, s, i + k + 1, e, &k3)))
          break; /* a possessive 's */
        if (k > 1) ascii = 0;
        i += k;
        kd = n2;
        k = k2;
      }
      if (m->ntoks == m->tokcap) {
        tok *p = (tok *)rag_grow(m->toks, &m->tokcap, m->ntoks + 1, sizeof *p);
        if (p == NULL) return RAG_ENOMEM;
        m->toks = p;
      }
      t = &m->toks[m->ntoks++];
      t->start = start;
      t->stop = i;
      t->flags = classify(m, s, start, i, first, upper, lower, digit, other, ascii) |
                 (adjacent ? 0u : (unsigned)T_BREAK);
      adjacent = 1;
      continue;
    }
    if (kd != K_SPACE) adjacent = 0;
    i += k;
  }
  return RAG_OK;
}

/* {====== Mentions ======} */

static int emit(rag_mentions *m, const unsigned char *s, size_t a, size_t b, uint32_t sentence,
                size_t min_len) {
  rag_mention *x;
  size_t key, keylen, before = m->keylen;
  int rc = append_key(s + a, b - a, &m->keys, &m->keylen, &m->keycap, &key, &keylen);
  if (rc != RAG_OK) return rc;
  if (keylen < min_len) {
    m->keylen = before;
    return RAG_OK;
  }
  if (m->nout == m->outcap) {
    rag_mention *p = (rag_mention *)rag_grow(m->out, &m->outcap, m->nout + 1, sizeof *p);
    if (p == NULL) return RAG_ENOMEM;
    m->out = p;
  }
  x = &m->out[m->nout++];
  x->start = a;
  x->stop = b;
  x->key = key;
  x->keylen = keylen;
  x->sentence = sentence;
  return RAG_OK;
}

#define ADJ(t) (!((t).flags & T_BREAK))

/* The names and phrases of the tokens of one sentence. */
static int walk(rag_mentions *m, const unsigned char *s, uint32_t sentence,
                const rag_mentions_opts *o) {
  const tok *t = m->toks;
  size_t j = 0, n = m->ntoks;
  int rc = RAG_OK;
  while (j < n && rc == RAG_OK) {
    size_t k = j + 1, first = j, last;
    if (t[j].flags & T_NAME) {
      for (;;) {
        if (k < n && ADJ(t[k]) && (t[k].flags & T_NAME)) k++;
        else if (k + 1 < n && (t[k].flags & T_CONN) && ADJ(t[k]) && ADJ(t[k + 1]) &&
                 (t[k - 1].flags & (T_CAP | T_ACRO)) == T_CAP &&
                 (t[k + 1].flags & (T_CAP | T_ACRO)) == T_CAP)
          k += 2;
        else break;
      }
      last = k;
      while (first < last && (t[first].flags & T_STOP)) first++; /* The, In, We, However */
      while (last > first && (t[last - 1].flags & T_STOP)) last--;
      if (first < last) rc = emit(m, s, t[first].start, t[last - 1].stop, sentence, o->min_len);
    } else if (o->phrases && (t[j].flags & (T_LOWER | T_STOP)) == T_LOWER) {
      while (k < n && ADJ(t[k]) && (t[k].flags & (T_LOWER | T_STOP)) == T_LOWER) k++;
      if (k - j >= 2 && k - j <= o->max_words)
        rc = emit(m, s, t[j].start, t[k - 1].stop, sentence, o->min_len);
    }
    j = k;
  }
  return rc;
}

int rag_mentions_run(rag_mentions *m, const char *text, size_t len, const rag_mentions_opts *o,
                     const rag_mention **out, size_t *n, size_t *errpos) {
  const unsigned char *s = (const unsigned char *)text;
  rag_span *sp = NULL;
  size_t nsp = 0, i;
  int rc;
  *out = NULL;
  *n = 0;
  m->nout = 0;
  m->keylen = 0;
  rc = rag_sentences_split(text, len, &sp, &nsp, errpos);
  for (i = 0; i < nsp && rc == RAG_OK; i++) {
    rc = tokenize(m, s, sp[i].start, sp[i].stop);
    if (rc == RAG_OK) rc = walk(m, s, (uint32_t)i, o);
  }
  rag_free(sp);
  if (rc != RAG_OK) {
    m->nout = 0;
    return rc;
  }
  *out = m->out;
  *n = m->nout;
  return RAG_OK;
}
