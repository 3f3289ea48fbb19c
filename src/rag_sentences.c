/*
** rag_sentences.c: sentence splitting in one forward pass that validates
** UTF-8 as it goes. Ordinary ASCII bytes take a tight loop; the rules run
** only at terminators and whitespace, looking a word back (abbreviations)
** or a word ahead (sentence starts). The rules are listed in the header.
*/
#include "rag_sentences.h"

#include <stdint.h>
#include <string.h>

#include <utf8proc.h>

#include "rag_utf8.h"

/* {====== Characters ======} */

enum { B_WORD = 0, B_SPACE, B_TERM }; /* ASCII byte classes */

static const unsigned char ascii_class[128] = {
    ['\t'] = B_SPACE, ['\n'] = B_SPACE, ['\v'] = B_SPACE,
    ['\f'] = B_SPACE, ['\r'] = B_SPACE, [' '] = B_SPACE,
    ['.'] = B_TERM,   ['!'] = B_TERM,   ['?'] = B_TERM,
};

/* Terminator kinds; a run of terminators ORs them. */
#define T_DOT 1u       /* ASCII . */
#define T_BANG 2u      /* ASCII ! ? and other terminators that need a space */
#define T_STRONG 4u    /* 。！？；｡︒: end a sentence with no space */
#define T_FWSTOP 8u    /* ．: no space needed, but also a decimal point */
#define T_ELLIPSIS 16u /* … ⋯ */

/* Whitespace beyond ASCII: NEL and the categories Zs, Zl and Zp. */
static int is_wide_space(int32_t cp) {
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static int is_space(int32_t cp) {
  return cp < 0x80 ? ascii_class[cp] == B_SPACE : is_wide_space(cp);
}

/* The code point tables below read best in columns. */
/* clang-format off */
static unsigned term_kind(int32_t cp) {
  switch (cp) {
    case '.': return T_DOT;
    case '!': case '?':
    case 0x203C: case 0x2047: case 0x2048: case 0x2049: /* ‼ ⁇ ⁈ ⁉ */
    case 0x061F: case 0x06D4:                           /* Arabic ? and . */
    case 0x0964: case 0x0965:                           /* danda, double */
    case 0x0589: case 0x1362:                           /* Armenian, Ethiopic */
      return T_BANG;
    case 0x3002: case 0xFF01: case 0xFF1F: case 0xFF1B: case 0xFF61:
    case 0xFE12:
      return T_STRONG;
    case 0xFF0E: return T_FWSTOP;
    case 0x2026: case 0x22EF: return T_ELLIPSIS;
    default: return 0;
  }
}

/* Closing quotes and brackets: they stay with the sentence they close. */
static int is_closer(int32_t cp) {
  switch (cp) {
    case '"': case '\'': case ')': case ']': case '}':
    case 0x00BB: case 0x2019: case 0x201D: case 0x203A: case 0x232A:
    case 0x27E9: case 0x3009: case 0x300B: case 0x300D: case 0x300F:
    case 0x3011: case 0x3015: case 0x3017: case 0x3019: case 0x301B:
    case 0x301E: case 0x301F: case 0xFF02: case 0xFF07: case 0xFF09:
    case 0xFF3D: case 0xFF5D: case 0xFF63:
      return 1;
    default: return 0;
  }
}

/* Opening quotes and brackets (and ¿ ¡): skipped to find a word's start. */
static int is_opener(int32_t cp) {
  switch (cp) {
    case '"': case '\'': case '(': case '[': case '{':
    case 0x00A1: case 0x00AB: case 0x00BF: case 0x2018: case 0x201A:
    case 0x201C: case 0x201E: case 0x2039: case 0x2329: case 0x27E8:
    case 0x3008: case 0x300A: case 0x300C: case 0x300E: case 0x3010:
    case 0x3014: case 0x3016: case 0x3018: case 0x301A: case 0x301D:
    case 0xFF02: case 0xFF07: case 0xFF08: case 0xFF3B: case 0xFF5B:
    case 0xFF62:
      return 1;
    default: return 0;
  }
}
/* clang-format on */

/* Han, kana, Hangul, CJK symbols and full-width forms. */
static int is_cjk(int32_t cp) {
  return (cp >= 0x2E80 && cp <= 0x2FDF) || (cp >= 0x3001 && cp <= 0x31FF) ||
         (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
         (cp >= 0xAC00 && cp <= 0xD7AF) || (cp >= 0xF900 && cp <= 0xFAFF) ||
         (cp >= 0xFF01 && cp <= 0xFFEF) || (cp >= 0x20000 && cp <= 0x3FFFF);
}

static int category(int32_t cp) {
  return (int)utf8proc_category((utf8proc_int32_t)cp);
}

static int is_lower(int32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  return category(cp) == UTF8PROC_CATEGORY_LL;
}

static int is_letter(int32_t cp) {
  int c;
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  c = category(cp);
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

static int is_cased(int32_t cp) {
  int c;
  if (cp < 0x80) return is_letter(cp);
  c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL ||
         c == UTF8PROC_CATEGORY_LT;
}

static int is_digit(int c) {
  return c >= '0' && c <= '9';
}
static int is_alpha(int c) {
  return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}
static int is_upper(int c) {
  return c >= 'A' && c <= 'Z';
}

/* The first byte at or after i that is not an opening quote or bracket. */
static size_t skip_openers(const unsigned char *s, size_t len, size_t i) {
  int32_t cp;
  size_t k;
  while (i < len && (k = rag_utf8_decode(s + i, len - i, &cp)) != 0 && is_opener(cp)) i += k;
  return i;
}

/*
** The first byte at or after i that is not whitespace (or len); *nbreaks
** counts the line breaks passed: CRLF once, U+2029 (paragraph) twice.
*/
static size_t skip_space(const unsigned char *s, size_t len, size_t i,
                         int *nbreaks) {
  int32_t cp;
  size_t k;
  *nbreaks = 0;
  while (i < len) {
    unsigned c = s[i];
    if (c < 0x80) {
      if (ascii_class[c] != B_SPACE) break;
      if (c == '\r' && i + 1 < len && s[i + 1] == '\n') i++;
      if (c != ' ' && c != '\t') ++*nbreaks;
      i++;
      continue;
    }
    if ((k = rag_utf8_decode(s + i, len - i, &cp)) == 0 || !is_wide_space(cp)) break;
    if (cp == 0x85 || cp == 0x2028) ++*nbreaks;
    if (cp == 0x2029) *nbreaks += 2;
    i += k;
  }
  return i;
}

/* {====== Words ======} */

/* Abbreviation classes of the word before a "." (see the header). */
enum { A_NORMAL, A_NEVER, A_NUMBER, A_CANEND, A_ENUM };

/*
** Word lists: space-separated, with a space at both ends, matched with
** case (a capitalised or all-caps form is tried by lookup).
*/
static const char never_words[] = /* titles and references */
    " Mr Mrs Ms Mx Dr Prof Rev Fr Gen Col Capt Cpt Lt Sgt Cmdr Adm Maj Gov"
    " Sen Rep Hon Pres Supt Messrs Mme Mlle Mt Ft cf vs viz approx incl esp"
    " ca pp Fig Figs figs Eq Eqs eqs Vol Vols vols Ref Refs refs Ch Sec"
    " Suppl ";

static const char number_words[] = /* also ordinary words */
    " No Nos no nos Art art Tab tab fig eq vol ref ch sec ";

static const char canend_words[] = /* end a sentence before a starter */
    " Jr Sr St Esq Inc Ltd Co Corp Bros Plc Ave Blvd Rd Dept Univ Assoc al"
    " resp Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec"
    /* journal titles in citations: Proc. Natl. Acad. Sci., J. Mol. Biol. */
    " Acad Am Biochem Biol Biophys Br Chem Clin Commun Engl Eur Exp Genet"
    " Immunol Int Lett Med Microbiol Mol Nat Natl Neurosci Pharmacol Phys"
    " Physiol Proc Res Sci Soc ";

/* Capitalised words that usually begin a sentence, never a name. */
static const char starter_words[] =
    " A After Against All Also Although Among An And Another Any Are As At"
    " Because Before Between Both But By Can Could Despite Did Do Does"
    " During Each Either Every Few Finally First For From Furthermore Had"
    " Has Have He Hence Her Here His How However I If In Indeed Instead"
    " Into Is It Its Let Many May Meanwhile Moreover Most Much Must My"
    " Neither Nevertheless No Nor Not Now Of On Once One Only Or Other Our"
    " Overall Second Several She Should Since So Some Still Such That The"
    " Their Then There Therefore These They This Those Though Thus To Two"
    " Under Unlike Was We Were What When Where Whereas Which While Who Why"
    " Will With Within Without Would Yes Yet You Your ";

#define MAXWORD 12 /* longer words are in no list */

/* The class of a word given framed by spaces, as " Dr ". */
static int abbrev_class(const char *framed) {
  if (strstr(never_words, framed) != NULL) return A_NEVER;
  if (strstr(number_words, framed) != NULL) return A_NUMBER;
  if (strstr(canend_words, framed) != NULL) return A_CANEND;
  return A_NORMAL;
}

/*
** The class of the ASCII-letter word w[0..len): its exact form, then for
** "DR" the form "Dr", then for "Cf" or "CF" the lowercase form.
*/
static int lookup(const unsigned char *w, size_t len) {
  char buf[MAXWORD + 3], *word = buf + 1; /* " word " */
  size_t i, nupper = 0;
  int cls;
  if (len > MAXWORD) return A_NORMAL;
  for (i = 0; i < len; i++) {
    if (!is_alpha(w[i])) return A_NORMAL;
    word[i] = (char)w[i];
    nupper += is_upper(w[i]);
  }
  buf[0] = word[len] = ' ';
  word[len + 1] = '\0';
  if ((cls = abbrev_class(buf)) != A_NORMAL || !is_upper(w[0])) return cls;
  for (i = 1; i < len; i++) word[i] = (char)(w[i] | 0x20);
  if (nupper == len && len > 1 && (cls = abbrev_class(buf)) != A_NORMAL)
    return cls;
  word[0] = (char)(w[0] | 0x20);
  return abbrev_class(buf);
}

/* Two or more dot-separated runs of 1-3 ASCII letters: U.S, e.g, Ph.D. */
static int dotted(const unsigned char *w, size_t len) {
  size_t i, run = 0, nruns = 1;
  for (i = 0; i < len; i++) {
    if (w[i] == '.') {
      if (run == 0) return A_NORMAL;
      run = 0;
      nruns++;
    } else if (!is_alpha(w[i]) || ++run > 3) {
      return A_NORMAL;
    }
  }
  if (run == 0 || nruns < 2) return A_NORMAL;
  if (len == 3 && (((w[0] | 0x20) == 'e' && (w[2] | 0x20) == 'g') ||
                   ((w[0] | 0x20) == 'i' && (w[2] | 0x20) == 'e')))
    return A_NEVER; /* e.g. i.e. (len 3 with a dot: the dot is w[1]) */
  return A_CANEND;
}

/* A word of one code point: an initial, a page (p.), versus (v.) or a word. */
static int single(int32_t cp) {
  int c;
  if (cp == 'p' || cp == 'v') return A_NEVER;
  if (cp == 'I') return A_NORMAL; /* the pronoun, likelier than an initial */
  if (cp < 0x80) return is_upper(cp) ? A_CANEND : A_NORMAL;
  c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT ? A_CANEND
                                                                : A_NORMAL;
}

/* {====== Scan ======} */

typedef struct scan {
  const unsigned char *s;
  size_t len;
  rag_span *spans; /* the result so far */
  size_t n, cap;
  size_t start, end;   /* the open sentence so far: [start, end) */
  size_t word;         /* first byte of the current space-delimited word */
  int open;            /* a sentence is open */
  int cjk;             /* the previous character is CJK */
  unsigned char prevc; /* last byte before the latest whitespace, or 0 */
} scan;

static void begin(scan *p, size_t i) {
  if (p->open) return;
  p->open = 1;
  p->start = p->word = i;
  p->prevc = 0;
}

static int push(scan *p) {
  p->open = 0;
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap : 8;
    rag_span *q;
    if (cap > ((size_t)-1) / 2 || RAG_MUL_OVERFLOWS(cap * 2, sizeof *q))
      return RAG_ENOMEM;
    cap *= 2;
    if ((q = (rag_span *)rag_realloc(p->spans, cap * sizeof *q)) == NULL)
      return RAG_ENOMEM;
    p->spans = q;
    p->cap = cap;
  }
  p->spans[p->n].start = p->start;
  p->spans[p->n].stop = p->end;
  p->n++;
  return RAG_OK;
}

/* The abbreviation class of the word that ends at the "." at `dot`. */
static int classify(const scan *p, size_t dot) {
  const unsigned char *s = p->s;
  size_t b = skip_openers(s, dot, p->word), len = dot - b, k, i;
  int32_t cp;
  if (len == 0) return A_NORMAL;
  for (i = b; i < dot && is_digit(s[i]); i++) {
  }
  if (i == dot) /* "1." opening a sentence or after ":" is an enumerator */
    return len <= 3 && (p->word == p->start || p->prevc == ':') ? A_ENUM
                                                                : A_NORMAL;
  if (memchr(s + b, '.', len) != NULL) return dotted(s + b, len);
  if ((k = rag_utf8_decode(s + b, dot - b, &cp)) == len) return single(cp);
  return lookup(s + b, len);
}

/* Whether the word at i starts with a lowercase letter. */
static int next_lower(const unsigned char *s, size_t len, size_t i) {
  int32_t cp;
  i = skip_openers(s, len, i);
  return i < len && rag_utf8_decode(s + i, len - i, &cp) != 0 && is_lower(cp);
}

/* Whether the word at i looks like a number: 12, (3), S1, 4b. */
static int next_numeric(const unsigned char *s, size_t len, size_t i) {
  i = skip_openers(s, len, i);
  if (i < len && is_digit(s[i])) return 1;
  return i + 1 < len && is_alpha(s[i]) && is_digit(s[i + 1]);
}

/* Whether the word at i is a sentence starter ("The", not "A.") or CJK. */
static int next_starter(const unsigned char *s, size_t len, size_t i) {
  char buf[MAXWORD + 3];
  size_t e, n;
  int32_t cp;
  i = skip_openers(s, len, i);
  if (i < len && s[i] >= 0x80) return rag_utf8_decode(s + i, len - i, &cp) && is_cjk(cp);
  for (e = i; e < len && e - i <= MAXWORD && is_alpha(s[e]); e++) {
  }
  n = e - i;
  if (n == 0 || n > MAXWORD) return 0;
  if (e < len && (s[e] == '.' || s[e] == '\'' ||
                  (s[e] >= 0x80 && rag_utf8_decode(s + e, len - e, &cp) && is_letter(cp))))
    return 0; /* an initial, a contraction or a longer word */
  buf[0] = buf[n + 1] = ' ';
  memcpy(buf + 1, s + i, n);
  buf[n + 2] = '\0';
  return strstr(starter_words, buf) != NULL;
}

/* Whether the run at [i, j) of `kinds`, then whitespace, ends a sentence. */
static int ends_spaced(const scan *p, unsigned kinds, size_t i, size_t j,
                       size_t next) {
  const unsigned char *s = p->s;
  int32_t cp;
  if (kinds & T_STRONG) return 1;
  if (rag_utf8_decode(s + next, p->len - next, &cp) != 0 && term_kind(cp) != 0)
    return 0; /* a spaced ellipsis ". . ." ends at its last dot */
  if (next_lower(s, p->len, next)) return 0;
  if (kinds != T_DOT || (j > i + 1 && s[i + 1] == '.')) return 1;
  switch (classify(p, i)) {
    case A_NEVER:
    case A_ENUM: return 0;
    case A_NUMBER: return !next_numeric(s, p->len, next);
    case A_CANEND: return next_starter(s, p->len, next);
    default: /* "10. 4%": a number split by a stray space, not two sentences */
      return !(i > p->word && is_digit(s[i - 1]) && is_digit(s[next]));
  }
}

/*
** A citation number right after a sentence's period ("patients.4,5 A
** single"): the byte after it when the sentence should end there, else 0.
** The period follows a lowercase letter or a bracket, the number is
** digits, commas and hyphens, and the next word is capitalised.
*/
static size_t citation_end(const scan *p, size_t dot) {
  const unsigned char *s = p->s;
  size_t len = p->len, e = dot + 1, next;
  int32_t cp;
  int nbreaks;
  if (dot <= p->word || !((s[dot - 1] >= 'a' && s[dot - 1] <= 'z') ||
                          s[dot - 1] == ')' || s[dot - 1] == ']'))
    return 0;
  while (e < len && e - dot <= 12 &&
         (is_digit(s[e]) || s[e] == ',' || s[e] == '-'))
    e++;
  if (e == len || !is_digit(s[e - 1]) || rag_utf8_decode(s + e, len - e, &cp) == 0 ||
      !is_space(cp))
    return 0;
  next = skip_space(s, len, e, &nbreaks);
  if (next == len || nbreaks >= 2 || rag_utf8_decode(s + next, len - next, &cp) == 0 ||
      !is_letter(cp) || is_lower(cp) || classify(p, dot) != A_NORMAL)
    return 0;
  return e;
}

/* Whether a run of kinds `kinds` ends a sentence right before `cp`. */
static int ends_tight(unsigned kinds, int closed, int cjk_before, int32_t cp) {
  /* 「はい。」と言った: a quotation inside a sentence, not one of its own */
  if (kinds & T_STRONG) return !(closed && (cp == 0x3068 || cp == 0x3063));
  if (kinds & T_ELLIPSIS)
    return is_opener(cp) || (is_letter(cp) && !is_lower(cp));
  if (kinds & T_FWSTOP)
    return is_opener(cp) || (is_letter(cp) && !is_cased(cp));
  return cjk_before && is_cjk(cp);
}

/* The terminator run at *pi and its closers; ends the sentence if it should. */
static int terminator(scan *p, size_t *pi) {
  const unsigned char *s = p->s;
  size_t len = p->len, i = *pi, j = i, k, next;
  unsigned kinds = 0, kind;
  int cjk_before = p->cjk, closed = 0, nbreaks, end;
  int32_t cp;
  while (j < len && (k = rag_utf8_decode(s + j, len - j, &cp)) != 0 &&
         (kind = term_kind(cp)) != 0) {
    kinds |= kind;
    j += k;
  }
  while (j < len && (k = rag_utf8_decode(s + j, len - j, &cp)) != 0 && is_closer(cp)) {
    closed = 1;
    j += k;
  }
  begin(p, i);
  p->end = *pi = j;
  p->cjk = 0;
  if (j == len || rag_utf8_decode(s + j, len - j, &cp) == 0) return RAG_OK;
  if (is_space(cp)) {
    next = skip_space(s, len, j, &nbreaks);
    if (next == len || nbreaks >= 2)
      return RAG_OK; /* the end or a blank line */
    end = ends_spaced(p, kinds, i, j, next);
  } else if (kinds == T_DOT && j == i + 1 && is_digit(s[j]) &&
             (next = citation_end(p, i)) != 0) {
    p->end = *pi = next;
    end = 1;
  } else {
    end = ends_tight(kinds, closed, cjk_before, cp);
  }
  return end ? push(p) : RAG_OK;
}

/* The whitespace at *pi; a blank line ends the open sentence. */
static int space(scan *p, size_t *pi) {
  int nbreaks;
  if (p->open) p->prevc = p->s[p->end - 1];
  *pi = p->word = skip_space(p->s, p->len, *pi, &nbreaks);
  p->cjk = 0;
  return nbreaks >= 2 && p->open ? push(p) : RAG_OK;
}

int rag_sentences_split(const char *s, size_t len, rag_span **out, size_t *n,
                        size_t *errpos) {
  scan p;
  size_t i = 0, k;
  int32_t cp;
  int rc = RAG_OK;
  memset(&p, 0, sizeof p);
  p.s = (const unsigned char *)s;
  p.len = len;
  *out = NULL;
  *n = 0;
  while (i < len && rc == RAG_OK) {
    unsigned c = p.s[i];
    if (c < 0x80 && ascii_class[c] == B_WORD) {
      begin(&p, i);
      while (++i < len && (c = p.s[i]) < 0x80 && ascii_class[c] == B_WORD) {
      }
      p.end = i;
      p.cjk = 0;
    } else if (c == ' ' && p.open && i + 1 < len && p.s[i + 1] < 0x80 &&
               ascii_class[p.s[i + 1]] == B_WORD) {
      p.prevc = p.s[p.end - 1]; /* one space between words: space() inline */
      p.word = ++i;
      p.cjk = 0;
    } else if ((k = rag_utf8_decode(p.s + i, len - i, &cp)) == 0) {
      *errpos = i + 1;
      rc = RAG_EENCODING;
    } else if (is_space(cp)) {
      rc = space(&p, &i);
    } else if (term_kind(cp) != 0) {
      rc = terminator(&p, &i);
    } else {
      begin(&p, i);
      p.end = i += k;
      p.cjk = is_cjk(cp);
    }
  }
  if (rc == RAG_OK && p.open) rc = push(&p);
  if (rc != RAG_OK || p.n == 0) {
    rag_free(p.spans);
    return rc;
  }
  *out = p.spans;
  *n = p.n;
  return RAG_OK;
}
