--- rag.load: documents from files: plain text, Markdown, HTML, PDF, JSON
-- lines, CSV, BEIR folders, source code and SQLite queries; `file` picks
-- the loader of a file, `dir` walks a folder. Every loader returns a list
-- of documents `{ id, text, source, title, meta }` or nil, msg, code.
-- See docs/loaders.md.
-- @module rag.load
local core = require("rag.core")
local errors = require("rag.errors")
local opts = require("rag.opts")
local util = require("rag.load._util")
local glob = require("rag.load.glob")

local text = require("rag.load.text")
local markdown = require("rag.load.markdown")
local html = require("rag.load.html")
local pdf = require("rag.load.pdf")
local jsonl = require("rag.load.jsonl")
local csv = require("rag.load.csv")
local beir = require("rag.load.beir")
local code = require("rag.load.code")
local sqlite = require("rag.load.sqlite")

local type, tonumber, ipairs, pairs = type, tonumber, ipairs, pairs
local find, sub, lower, match = string.find, string.sub, string.lower, string.match
local fs = core.fs

local M = {}

--- `load.text(s [, opts])` → docs: the whole string as one document.
M.text = text.load
--- `load.markdown(s [, opts])` → docs: front matter as meta, sections.
M.markdown = markdown.load
--- `load.html(s [, opts])` → docs: the page's readable text.
M.html = html.load
--- `load.pdf(path [, opts])` → docs: one document, pages in meta.
M.pdf = pdf.load
--- `load.jsonl(path [, opts])` → docs: one per line.
M.jsonl = jsonl.load
--- `load.csv(path [, opts])` → docs: one per row.
M.csv = csv.load
--- `load.beir(dir)` → docs: corpus.jsonl with the BEIR ids.
M.beir = beir.load
--- `load.code(s [, opts])` → docs: one per top-level definition.
M.code = code.load
--- `load.sqlite(dbpath, sql [, opts])` → docs: one per row.
M.sqlite = sqlite.load

--- The page (1-based) holding byte `offset` of a PDF document (or of a hit:
-- anything with its `meta`); nil when it has no `meta.page_starts`.
-- @tparam table doc a document or hit
-- @tparam number offset a 1-based byte offset into its text
-- @treturn number|nil
function M.page_of(doc, offset)
  if type(doc) ~= "table" or type(offset) ~= "number" then
    error("rag.load.page_of: expected a document and an offset", 2)
  end
  return pdf.page_of(doc, offset)
end

--- The sections of a Markdown or HTML document (or hit): `{ {title=,
-- level=, start=, stop=}, ... }` with `doc.text:sub(start, stop)` the
-- heading and its body up to the next heading; {} when it has none.
-- @tparam table doc a document with `text` and `meta.section_starts`
-- @treturn table
function M.sections(doc)
  if type(doc) ~= "table" or type(doc.text) ~= "string" then
    error("rag.load.sections: expected a document with text", 2)
  end
  local meta, out = doc.meta or {}, {}
  local starts = meta.section_starts or {}
  for i = 1, #starts do
    local nxt = starts[i + 1] and tonumber(starts[i + 1]) - 1 or #doc.text
    out[i] = { title = meta.sections and meta.sections[i], level = tonumber(
      meta.section_levels and meta.section_levels[i]), start = tonumber(starts[i]), stop = nxt }
  end
  return out
end

-- {====== Files ======}

--- Formats by file extension (lowercase, without the dot).
M.EXTENSIONS = {
  txt = "text", text = "text", log = "text", rst = "text", adoc = "text", org = "text",
  md = "markdown", markdown = "markdown", mdx = "markdown", mkd = "markdown",
  html = "html", htm = "html", xhtml = "html",
  pdf = "pdf", jsonl = "jsonl", ndjson = "jsonl", csv = "csv", tsv = "tsv",
}
for ext, lang in pairs(code.EXTENSIONS) do
  M.EXTENSIONS[ext] = "code:" .. lang
end

local FORMATS = { text = true, markdown = true, html = true, pdf = true, jsonl = true,
  csv = true, tsv = true, code = true }

local FILE = {
  root = { "string" },
  format = { "string" },
  fields = { "table" },
}

-- The id of a file: its path relative to root (as given otherwise).
local function rel(path, root)
  if root and root ~= "" then
    local r = root:gsub("/+$", "")
    if sub(path, 1, #r + 1) == r .. "/" then
      return sub(path, #r + 2)
    end
  end
  return path
end

local function sniff(s)
  local head = lower(sub(s, 1, 512))
  if find(head, "^%s*<!doctype html") or find(head, "^%s*<html[%s>]")
    or find(head, "^%s*<!%-%-.-%-%->%s*<html") then
    return "html"
  end
  return "text"
end

local function fields(o, extra)
  local f = {}
  for k, v in pairs(o.fields or {}) do
    f[k] = v
  end
  for k, v in pairs(extra) do
    f[k] = v
  end
  return f
end

-- Loads one file with checked options.
local function load_file(path, o)
  local id = rel(path, o.root)
  local ext = lower(match(path, "%.([%w]+)$") or "")
  local fmt = o.format or M.EXTENSIONS[ext]
  local lang
  if fmt and sub(fmt, 1, 5) == "code:" then
    fmt, lang = "code", sub(fmt, 6)
  end
  if fmt == "pdf" then
    return pdf.load(path, { id = id, source = path })
  elseif fmt == "csv" or fmt == "tsv" then
    return csv.load(path, fields(o, { base = id, sep = fmt == "tsv" and "\t" or nil }))
  end
  local s, msg, ecode = util.read("rag.load.file", path)
  if not s then
    return nil, msg, ecode
  end
  if not fmt and sub(s, 1, 5) == "%PDF-" then
    return pdf.load(path, { id = id, source = path })
  end
  if find(sub(s, 1, 8192), "\0", 1, true) then
    return errors.fail("format", "rag.load.file: '%s': binary file", path)
  end
  if sub(s, 1, 3) == "\239\187\191" then
    s = sub(s, 4)
  end
  local ok, pos = core.text.valid(s)
  if not ok then
    return errors.fail("encoding", "rag.load.file: '%s': invalid utf-8 at byte %d", path, pos)
  end
  fmt = fmt or sniff(s)
  local d = { id = id, source = path }
  if fmt == "jsonl" then
    return jsonl.parse("rag.load.file", s, path,
      (require("rag.load._records").check("rag.load.file", fields(o, { base = id }),
        { base = { "string" } }, 3)))
  elseif fmt == "markdown" then
    return markdown.load(s, d)
  elseif fmt == "html" then
    return html.load(s, d)
  elseif fmt == "code" then
    d.language = lang
    return code.load(s, d)
  end
  return text.load(s, d)
end

--- The documents of one file, its loader chosen by extension (M.EXTENSIONS),
-- then by content: "%PDF-" is a PDF, a NUL byte in the first 8 KiB a binary
-- file (refused), "<!doctype html" or "<html" HTML, anything else text.
-- @tparam string path the file
-- @tparam[opt] table o `root` (ids are paths relative to it), `format`
--   ("text", "markdown", "html", "pdf", "jsonl", "csv", "tsv", "code"),
--   `fields` (the record loaders' options: `text`, `id`, `title`, `meta`)
-- @return docs | nil, msg, code ("io", "encoding", "format")
function M.file(path, o)
  o = opts.check("rag.load.file", o, FILE, 2)
  if type(path) ~= "string" then
    error("rag.load.file: path must be a string, got " .. type(path), 2)
  end
  if o.format and not FORMATS[o.format] and not find(o.format, "^code:") then
    error("rag.load.file: unknown format '" .. o.format .. "'", 2)
  end
  return load_file(path, o)
end

-- {====== Folders ======}

local DIR = {
  include = { "table" },
  exclude = { "table" },
  hidden = { "boolean", default = false },
  progress = { "function" },
  root = { "string" },
  fields = { "table" },
}

-- The candidate files under dir, depth first in bytewise name order:
-- { {path=, rel=}, ... }; skipped counts the symbolic link loops.
local function walk(dir, o, report)
  local files = {}
  local _, _, rootid = fs.stat(dir)
  local function visit(path, relpath, ancestors)
    local names, kinds = fs.scan(path)
    if not names then
      report.failed[#report.failed + 1] = { path = path, msg = kinds, code = "io" }
      return
    end
    for i, name in ipairs(names) do
      local kind = kinds[i]
      local full = path .. "/" .. name
      local r = relpath and (relpath .. "/" .. name) or name
      if o.hidden or sub(name, 1, 1) ~= "." then
        local id
        if kind == "link" then
          kind, _, id = fs.stat(full)
          if not kind then
            report.skipped = report.skipped + 1 -- a dangling link
          end
        end
        if kind == "dir" then
          if not id then
            _, _, id = fs.stat(full)
          end
          if ancestors[id] then
            report.skipped = report.skipped + 1 -- a symbolic link loop
          elseif not (o.exclude and (glob.any(o.exclude, r) or glob.any(o.exclude, r .. "/"))) then
            if beir.is_beir(full) then -- its corpus alone, as at the top (not its queries)
              if not (o.include and not glob.any(o.include, r .. "/corpus.jsonl")) then
                files[#files + 1] = { path = full, rel = r, beir = true }
              end
            else
              ancestors[id] = true
              visit(full, r, ancestors)
              ancestors[id] = nil
            end
          end
        elseif kind == "file" then
          if not (o.include and not glob.any(o.include, r))
            and not (o.exclude and glob.any(o.exclude, r)) then
            files[#files + 1] = { path = full, rel = r }
          end
        end
      end
    end
  end
  visit(dir, nil, { [rootid or ""] = true })
  return files
end

--- Walks a folder: an iterator over its documents, and a report filled as
-- the iterator runs. Hidden files and folders (a name starting with "."),
-- symbolic link loops and binary files are skipped; files that fail to
-- load are reported and skipped. A BEIR folder (corpus.jsonl beside
-- qrels/), `path` itself or one inside it, is loaded as its corpus (its
-- queries and judgements are not documents); a file as itself.
-- @tparam string path the folder
-- @tparam[opt] table o `include`, `exclude` (lists of globs over the
--   relative path), `hidden` (default false), `progress` (called as
--   `progress(files_done, total, path)` after each file), `root` (ids
--   relative to it; default `path`), `fields` (for JSON lines and CSV)
-- @return iter, report | nil, msg, "io" when `path` cannot be read;
--   `iter()` returns the next document or nil at the end; `report` is
--   `{ total, files, loaded, skipped, failed = { {path=, msg=, code=}, ... } }`
function M.dir(path, o)
  o = opts.check("rag.load.dir", o, DIR, 2)
  if type(path) ~= "string" then
    error("rag.load.dir: path must be a string, got " .. type(path), 2)
  end
  if o.include then
    opts.strings("rag.load.dir", "'include'", o.include, 2)
  end
  if o.exclude then
    opts.strings("rag.load.dir", "'exclude'", o.exclude, 2)
  end
  local kind, msg = fs.stat(path)
  if not kind then
    return errors.fail("io", "rag.load.dir: %s", (msg or path):gsub("^rag%.fs%.stat: ", ""))
  end
  local root = (o.root or path):gsub("(.)/+$", "%1")
  local dir = path:gsub("(.)/+$", "%1")
  local report = { total = 0, files = 0, loaded = 0, skipped = 0, failed = {} }
  local files
  if kind ~= "dir" then
    files = { { path = path, rel = rel(path, o.root) } }
  elseif beir.is_beir(dir) then
    files = { { path = dir, rel = rel(dir, o.root), beir = true } }
  else
    files = walk(dir, o, report)
  end
  report.total = #files
  local fo = { root = root, fields = o.fields }
  if kind ~= "dir" and not o.root then
    fo.root = nil
  end
  local queue, qi, fi = {}, 1, 0
  local function iter()
    while true do
      local doc = queue[qi]
      if doc then
        queue[qi] = nil
        qi = qi + 1
        return doc
      end
      fi = fi + 1
      local f = files[fi]
      if not f then
        return nil
      end
      local docs, emsg, ecode
      if f.beir then
        docs, emsg, ecode = beir.load(f.path)
      else
        docs, emsg, ecode = load_file(f.path, fo)
      end
      report.files = report.files + 1
      if docs then
        report.loaded = report.loaded + 1
        queue, qi = docs, 1
      elseif ecode == "format" and find(emsg, ": binary file$") then
        report.skipped = report.skipped + 1
      else
        report.failed[#report.failed + 1] = { path = f.path, msg = emsg, code = ecode }
      end
      if o.progress then
        o.progress(report.files, report.total, f.path)
      end
    end
  end
  return iter, report
end

return M
