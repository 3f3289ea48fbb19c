--- rag.text: text utilities, implemented in C (`rag.core.text`).
-- @module rag.text
local core = require("rag.core")

local M = {}

--- Lowercase hex SHA-256 of a string (OpenSSL's libcrypto).
-- Used to key caches by content.
-- @function hash
-- @tparam string s any bytes
-- @treturn string 64 hex digits
-- @raise when `s` is not a string
M.hash = core.text.hash

--- HMAC-SHA-256 (RFC 2104; RFC 4231's test cases) over SHA-256 from
-- OpenSSL's libcrypto: what SCRAM authentication signs with.
-- @function hmac_sha256
-- @tparam string key any bytes (longer than 64 bytes: hashed first)
-- @tparam string msg any bytes
-- @treturn string the 32 raw bytes of the MAC
-- @raise when an argument is not a string
M.hmac_sha256 = core.text.hmac_sha256

--- PBKDF2 with HMAC-SHA-256 (RFC 8018, section 5.2): a key derived from a
-- password, as SCRAM-SHA-256 salts passwords.
-- @function pbkdf2_sha256
-- @tparam string password any bytes
-- @tparam string salt any bytes
-- @tparam integer iterations in [1, 2^32 - 1]
-- @tparam[opt=32] integer length bytes to derive, in [1, 2^20]
-- @treturn string raw bytes
-- @raise on a non-string or an out-of-range number
M.pbkdf2_sha256 = core.text.pbkdf2_sha256

--- Lowercase hex MD5 (RFC 1321). Only for protocols that still require it
-- (PostgreSQL's md5 password exchange); MD5 is broken for any other use.
-- @function md5
-- @tparam string s any bytes
-- @treturn string 32 hex digits
-- @raise when `s` is not a string
M.md5 = core.text.md5

--- `n` bytes from OpenSSL's cryptographic random generator (seeded by the
-- operating system): nonces, salts.
-- @function random
-- @tparam integer n in [0, 65536]
-- @treturn string n raw bytes
-- @return nil, msg, "io" when the generator has no entropy to give
-- @raise on an out-of-range `n`
M.random = core.text.random

--- Cleans text before chunking and indexing.
-- In order: invalid UTF-8 is repaired (each bad byte becomes U+FFFD) or
-- refused; Unicode normalisation (NFKC by default: full-width letters and
-- digits become ASCII, U+3000 and no-break spaces become spaces); control
-- characters are removed except "\n" and "\t" (CR and CRLF become "\n");
-- runs of spaces fold to one; three or more line breaks (with only spaces
-- or tabs between them) fold to two; leading and trailing whitespace go.
-- @function normalize
-- @tparam string s text
-- @tparam[opt] table opts `form` = "NFKC" (default), "NFC" or false;
--   `invalid` = "replace" (default) or "error"
-- @treturn string the cleaned text
-- @return nil, msg, "encoding" with `invalid = "error"` and invalid UTF-8
-- @raise on a non-string `s` or a bad option
M.normalize = core.text.normalize

--- Builds an analyzer: the rules that turn text into index terms, kept in C
-- (userdata "rag.analyzer") and reused across calls.
-- Words are maximal runs of letters, marks, digits and connector punctuation
-- (so `error_code` and `4012` stay whole); an apostrophe between letters
-- stays inside a word (`don't`), as do `.` and `,` between digits (`3.14`,
-- `1,000`); everything else, hyphens included, separates words. Han,
-- Hiragana, Katakana and Hangul runs become overlapping bigrams (`cjk`).
-- Order: segmentation, lowercasing, stopword removal, stemming.
-- @function analyzer
-- @tparam[opt] table opts
--   `lang` = a Snowball stemmer language ("english", default; also "french",
--   "german", "porter", ... any name libstemmer lists);
--   `stem` = true (default) or false;
--   `stopwords` = true (the built-in list; English only), false, or a list of
--   words (matched after lowercasing); default true for English, else false;
--   `cjk` = "bigram" (default), "unigram", "both" or false (a CJK run is then
--   one token);
--   `lowercase` = true (default) or false
-- @treturn userdata an analyzer with `a:tokenize(s [, opts])`
-- @raise on an unknown option, a bad value or an unknown language
M.analyzer = core.text.analyzer

--- Splits text into index terms with an analyzer.
-- @function tokenize
-- @tparam string s UTF-8 text
-- @tparam[opt] userdata|table analyzer an analyzer, or options for a
--   one-off `rag.text.analyzer(opts)`; default: the English analyzer
-- @tparam[opt] table opts `spans` = true to also return the byte spans;
--   `only` = a list of terms: return only the terms in it (with their spans),
--   without making Lua strings of the others (`rag.text.highlights` uses it)
-- @treturn {string,...} the terms in text order
-- @treturn[opt] {int,...} with `spans`: 1-based start byte of each term's source
-- @treturn[opt] {int,...} with `spans`: 1-based inclusive stop byte
-- @return nil, msg, "encoding" on invalid UTF-8
-- @raise on a non-string `s` or a bad analyzer or option
M.tokenize = core.text.tokenize

--- Splits text into sentences, with their byte offsets.
-- Breaks after `.`, `!`, `?` (and runs of them) followed by whitespace, and
-- after the CJK terminators `。！？；…` (no space needed); closing quotes
-- and brackets stay with their sentence. No break after common English
-- abbreviations (`Dr.`, `e.g.`, `U.S.`, `p.m.`, ...), initials, inside
-- numbers (`3.14`) or after an ellipsis followed by a lowercase word. A blank
-- line always breaks; a single line break does not. Sentences never include
-- the whitespace between them.
-- @function sentences
-- @tparam string s UTF-8 text
-- @treturn table `{ {text=, start=, stop=}, ... }` where `text == s:sub(start, stop)`
-- @return nil, msg, "encoding" on invalid UTF-8
-- @raise on a non-string `s`
M.sentences = core.text.sentences

--- The spans of `query`'s terms inside `text`: every place where a term of
-- text (as `tokenize` makes it) equals a term of the query, as 1-based
-- inclusive byte offsets (`text:sub(from, to)` is the matched word), in text
-- order; spans that overlap (CJK bigrams) are merged, so none overlap.
-- `rag search` marks its snippets with them; `rag serve` returns them.
-- @tparam string text UTF-8 text
-- @tparam string|table query the query, or its terms (`tokenize(query,
--   analyzer)`, to analyze it once for many texts)
-- @tparam[opt] userdata|table analyzer as for `tokenize` (default English)
-- @treturn {{int,int},...} the spans, sorted; empty on invalid UTF-8
-- @raise on a non-string `text` or `query`
function M.highlights(text, query, analyzer)
  if type(text) ~= "string" then
    error("rag.text.highlights: text must be a string, got " .. type(text), 2)
  end
  local qterms = query
  if type(query) == "string" then
    qterms = core.text.tokenize(query, analyzer)
  elseif type(query) ~= "table" then
    error("rag.text.highlights: query must be a string or a list of terms, got "
      .. type(query), 2)
  end
  local spans = {}
  if not qterms or #qterms == 0 then
    return spans
  end
  -- only the query's terms come back from C: no Lua string for the others
  local terms, starts, stops = core.text.tokenize(text, analyzer, { spans = true,
    only = qterms })
  local n = 0
  for i = 1, terms and #terms or 0 do
    local last = spans[n]
    if last and starts[i] <= last[2] then
      if stops[i] > last[2] then
        last[2] = stops[i]
      end
    else
      n = n + 1
      spans[n] = { starts[i], stops[i] }
    end
  end
  return spans
end

return M
