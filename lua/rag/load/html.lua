--- rag.load.html: an HTML page as one document of its readable text
-- (libxml2's parser, in C: src/rag_html.c says what is kept and dropped).
-- @module rag.load.html
local core = require("rag.core")
local util = require("rag.load._util")

local extract = core.html.extract

local M = {}

--- One document of the page's main text; headings as sections.
-- @tparam string s HTML (UTF-8, whatever the page declares)
-- @tparam[opt] table o `id`, `source`, `title`, `meta`
-- @return `{ doc }` | nil, msg, code ("encoding", "format")
function M.load(s, o)
  o = util.check("rag.load.html", o, nil, 2)
  if type(s) ~= "string" then
    error("rag.load.html: text must be a string, got " .. type(s), 2)
  end
  local ok, msg, code = util.utf8("rag.load.html", "'" .. (o.source or o.id or "html") .. "'", s)
  if not ok then
    return nil, msg, code
  end
  local r
  r, msg, code = extract(s)
  if not r then
    return nil, msg, code
  end
  local doc = util.doc(o, r.text, "html")
  doc.title = o.title or r.title
  local n = #r.headings
  if n > 0 then
    local titles, starts, levels = {}, {}, {}
    for i, h in ipairs(r.headings) do
      titles[i] = r.text:sub(h.start, h.stop)
      starts[i], levels[i] = tostring(h.start), tostring(h.level)
    end
    doc.meta.sections, doc.meta.section_starts, doc.meta.section_levels = titles, starts, levels
  end
  return { doc }
end

return M
