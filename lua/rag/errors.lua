--- rag.errors: the codes a failure of the world carries (`nil, msg, code`)
-- and what each means. The list is defined once, in C (`RAG_STATUS_LIST` in
-- src/rag.h, exposed as `rag.core.errors`); docs/api.md's table and
-- spec/core/errors_spec.lua are checked against it.
-- @module rag.errors
local core = require("rag.core")

local type, error, tostring, select = type, error, tostring, select
local format = string.format

local M = {}

--- The codes, in the order of src/rag.h: "io", "format", "version", ...
M.codes = {}

--- `meaning[code]`: one line that says what went wrong, for users.
M.meaning = {}

-- Private copy, so that a caller editing the public tables changes nothing.
local known = {}

for i, e in ipairs(core.errors) do
  M.codes[i] = e.code
  M.meaning[e.code] = e.meaning
  known[e.code] = true
end

--- Whether `s` is one of the codes.
-- @param s any value
-- @treturn boolean
function M.is_code(s)
  return type(s) == "string" and known[s] == true
end

--- A failure of the world, as every fallible function returns it:
-- `return rag.errors.fail("io", "rag.x.load: '%s': %s", path, why)`.
-- @tparam string code one of `codes`
-- @tparam string fmt the message, lowercase, starting with the operation;
--   formatted with `string.format` when more arguments follow
-- @return nil, msg, code
-- @raise when `code` is not a known code or `fmt` is not a string
function M.fail(code, fmt, ...)
  if not M.is_code(code) then
    error("rag.errors.fail: unknown error code '" .. tostring(code) .. "'", 2)
  end
  if type(fmt) ~= "string" then
    error("rag.errors.fail: message must be a string, got " .. type(fmt), 2)
  end
  if select("#", ...) > 0 then
    return nil, format(fmt, ...), code
  end
  return nil, fmt, code
end

return M
