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

return M
