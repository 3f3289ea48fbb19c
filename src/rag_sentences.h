/*
** rag_sentences.h: sentence boundaries in UTF-8 text, as byte spans, for
** rag.text.sentences and the sentence-aware chunkers. One pass, no copies:
** the result points into the caller's text.
*/
#ifndef RAG_SENTENCES_H
#define RAG_SENTENCES_H

#include <stddef.h>

#include "rag.h"

/*
** Splits `len` bytes at `s` (borrowed for the call) into sentences.
**
** OUT *out, *n: on RAG_OK, *out is an array of *n spans [start, stop),
** 0-based, increasing and non-overlapping; the caller releases it with
** rag_free. When *n is 0, *out is NULL. Every byte outside the spans is
** whitespace (ASCII space, \t \n \v \f \r, U+0085 and the Unicode space and
** separator categories Zs, Zl, Zp); every span starts and ends on a
** non-whitespace character.
** OUT *errpos: on RAG_EENCODING, the 1-based offset of the first byte that
** starts no valid UTF-8 sequence (overlongs, surrogates and code points
** above U+10FFFF are invalid). Untouched otherwise.
** Returns RAG_OK, RAG_EENCODING or RAG_ENOMEM; on an error *out is NULL,
** *n is 0 and nothing stays allocated.
**
** Rules, in the order they are tried:
** - A blank line (two line breaks with only whitespace between) always
**   ends a sentence; one line break never does. Line breaks are \n, \r,
**   CRLF (one break), \v, \f, U+0085 and U+2028; U+2029 (paragraph
**   separator) counts as two.
** - A terminator run is a run of . ! ? (also the CJK and other terminators
**   below), then any closing quotes and brackets (" ' ) ] } ” ’ » 」 』 ）
**   】 》 〉 ...), which stay with the sentence.
** - CJK terminators 。！？；｡ end a sentence with no space needed. The one
**   exception is a closing quote followed by と or っ (「はい。」と言った),
**   a quotation inside a Japanese sentence.
** - … (and ⋯) and the full-width stop ． end a sentence with no space
**   needed only before a letter that starts a sentence: an uncased letter
**   (Han, kana) or an uppercase one for …; an uncased one for ．, so that
**   ３．１４ and ｗｗｗ．ｘ stay whole; an opening bracket also starts one.
** - Any other run needs whitespace after it, except that a run of ASCII
**   . ! ? between two CJK characters also ends a sentence (你好!我是).
** - A run followed by whitespace ends a sentence unless the next word
**   (after any opening quotes or brackets) starts with a lowercase letter:
**   so no break after "?" in '"Sure?" she asked', after an ellipsis before
**   a lowercase word, or after an unknown abbreviation such as "approx.".
**   Text written all in lowercase therefore splits only at blank lines and
**   CJK terminators.
** - A single "." after a word is checked against abbreviation classes
**   (case-sensitive lists; a capitalised or all-caps form of an entry also
**   matches):
**   never ends: titles (Mr Mrs Ms Dr Prof Rev Gen Col Capt Lt Sgt Gov Sen
**     Rep Hon Pres Mt Ft ...), e.g. i.e. cf. vs. v. viz. approx. incl.
**     esp. ca. p. pp. Fig. Figs. Eq. Eqs. Vol. Vols. Ref. Refs. Ch. Sec.
**     Suppl.;
**   ends only before a number-like word: No. Nos. Art. Tab. and the
**     lowercase fig. eq. vol. ref. ch. sec. art. tab. (these are also
**     ordinary words);
**   can end a sentence: Jr. Sr. St. Esq. Inc. Ltd. Co. Corp. Bros. Plc.
**     Ave. Blvd. Rd. Dept. Univ. Assoc. al. resp., the months Jan. Feb.
**     Mar. Apr. Jun. Jul. Aug. Sep. Sept. Oct. Nov. Dec., dotted acronyms
**     (U.S. U.K. a.m. p.m. Ph.D. U.S.A.: two or more dot-separated runs
**     of 1-3 ASCII letters) and single uppercase initials (J. R. R.
**     Tolkien) other than "I"; these end a sentence only before a common
**     sentence starter (The, It, He, We, In, However, ...; not followed by
**     "." or "'") or a CJK character, so "the U.S. Army" stays whole and "in the
**     U.S. The" breaks;
**   the same for journal words in citations (Proc. Natl. Acad. Sci.,
**     J. Mol. Biol., N. Engl. J. Med.: Acad Am Biochem Biol Biophys Br
**     Chem Clin Commun Engl Eur Exp Genet Immunol Int Lett Med Microbiol
**     Mol Nat Natl Neurosci Pharmacol Phys Physiol Proc Res Sci Soc);
**   a number of 1-3 digits that opens a sentence or follows ":" is a list
**     enumerator ("1. Open the box.") and never ends one.
**   "etc." is an ordinary word: it ends a sentence before any word that
**   is not lowercase. Numbers, versions, URLs and e-mail addresses contain
**   no whitespace after their dots, so they never break inside.
** - No break before another terminator (a spaced ellipsis ". . ." ends at
**   its last dot), nor between a digit's "." and a digit ("10. 4%": a
**   number split by a stray space).
** - A citation number glued to a period after a lowercase letter or a
**   bracket (found.4,5 A family) stays with its sentence, which ends after
**   the number when the next word is capitalised.
*/
int rag_sentences_split(const char *s, size_t len, rag_span **out, size_t *n,
                        size_t *errpos);

#endif
