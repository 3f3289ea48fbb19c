--- rag.load.text: a string of plain text as one document.
-- @module rag.load.text
local util = require("rag.load._util")

local M = {}

--- One document of the whole text, as it is.
-- @tparam string s the text (UTF-8)
-- @tparam[opt] table o `id`, `source`, `title`, `meta`
-- @return `{ doc }` | nil, msg, "encoding"
function M.load(s, o)
  o = util.check("rag.load.text", o, nil, 2)
  if type(s) ~= "string" then
    error("rag.load.text: text must be a string, got " .. type(s), 2)
  end
  local ok, msg, code = util.utf8("rag.load.text", "'" .. (o.source or o.id or "text") .. "'", s)
  if not ok then
    return nil, msg, code
  end
  return { util.doc(o, s, "text") }
end

return M
