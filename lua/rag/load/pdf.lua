--- rag.load.pdf: a PDF file as one document, through poppler's pdftotext
-- (Debian's poppler-utils) run as a subprocess; pages in meta.
-- @module rag.load.pdf
local errors = require("rag.errors")
local util = require("rag.load._util")

local popen, remove, tmpname, open = io.popen, os.remove, os.tmpname, io.open
local find, sub, match, gsub = string.find, string.sub, string.match, string.gsub
local tonumber = tonumber

local M = {}

local FNAME = "rag.load.pdf"

-- Runs pdftotext: its output, exit status and first line of stderr.
local function run(path, layout)
  local err = tmpname()
  local cmd = "pdftotext -enc UTF-8 " .. (layout and "-layout " or "")
    .. util.shell_quote(path) .. " - 2>" .. util.shell_quote(err)
    .. "; printf '\\nRAGEXIT%d' $?"
  local p = popen(cmd, "r")
  if not p then
    remove(err)
    return nil
  end
  local out = p:read("*a") or ""
  p:close()
  local f = open(err, "rb")
  local why = f and f:read("*a") or ""
  if f then
    f:close()
  end
  remove(err)
  local body, status = match(out, "^(.*)\nRAGEXIT(%d+)$")
  return body or "", tonumber(status or 1), match(why, "^%s*([^\n]-)%s*\n") or why
end

-- pdftotext's own messages for its exit statuses (its man page).
local STATUS = { [1] = "cannot open the file", [2] = "cannot open the output",
  [3] = "permission to extract text denied", [99] = "pdftotext failed" }

--- One document of the text of every page; pages are separated by a blank
-- line, and `meta.page_starts[i]` is the offset where page i starts.
-- @tparam string path the PDF file
-- @tparam[opt] table o `id`, `source`, `title`, `meta`, `layout` (pdftotext
--   -layout: keep the physical layout, for tables and columns)
-- @return `{ doc }` | nil, msg, code ("io", "format", "encoding")
function M.load(path, o)
  o = util.check(FNAME, o, { layout = { "boolean", default = false } }, 2)
  if type(path) ~= "string" then
    error(FNAME .. ": path must be a string, got " .. type(path), 2)
  end
  local f, ferr = open(path, "rb")
  if not f then
    return errors.fail("io", "%s: %s", FNAME, (ferr or path):lower())
  end
  local magic = f:read(5)
  f:close()
  if magic ~= "%PDF-" then
    return errors.fail("format", "%s: '%s': not a pdf file", FNAME, path)
  end
  local out, status, why = run(path, o.layout)
  if not out then
    return errors.fail("io", "%s: cannot run pdftotext", FNAME)
  elseif status == 127 then
    return errors.fail("io", "%s: pdftotext not found (Debian package poppler-utils)", FNAME)
  elseif status ~= 0 then
    why = why ~= "" and why:lower() or STATUS[status] or "pdftotext failed"
    return errors.fail("format", "%s: '%s': pdftotext exit %d: %s", FNAME, path, status, why)
  end
  local ok, msg, code = util.utf8(FNAME, "'" .. path .. "'", out)
  if not ok then
    return nil, msg, code
  end
  -- pdftotext ends every page with a form feed.
  local pages, pos = {}, 1
  while pos <= #out do
    local ff = find(out, "\f", pos, true)
    pages[#pages + 1] = sub(out, pos, (ff or #out + 1) - 1)
    pos = (ff or #out) + 1
  end
  local parts, starts, at = {}, {}, 1
  for i, page in ipairs(pages) do
    page = util.trim_end(gsub(page, "^\n+", ""))
    starts[i] = at
    parts[i] = page
    at = at + #page + 2
  end
  local doc = util.doc(o, table.concat(parts, "\n\n"), path)
  if o.source == nil then
    doc.source = path
  end
  doc.meta.pages = #pages
  doc.meta.page_starts = util.numbers(starts)
  return { doc }
end

--- The page (1-based) of byte `offset` of a document from M.load (or of a
-- hit of it: its meta), nil when the document has no pages.
function M.page_of(doc, offset)
  local starts = doc.meta and doc.meta.page_starts
  if not starts then
    return nil
  end
  local page = 1
  for i = 2, #starts do
    if tonumber(starts[i]) <= offset then
      page = i
    else
      break
    end
  end
  return page
end

return M
