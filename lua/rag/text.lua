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

return M
