--- rag.report: the results of an evaluation sweep as one self-contained HTML
-- page (inline SVG bar charts, per-question box plots and recall@k curves;
-- no script, no network) or as a plain-text table for the terminal.
-- The same results always give the same bytes: unordered keys are sorted.
-- @module rag.report
local opts_mod = require("rag.opts")
local svg = require("rag.report._svg")

local M = {}

local type, pairs, ipairs, tostring, error = type, pairs, ipairs, tostring, error
local format, concat, sort = string.format, table.concat, table.sort
local huge = math.huge
local sorted_keys, num, value_text, esc = svg.sorted_keys, svg.num, svg.value_text, svg.esc
local ulen, tick_text, unavailable_reason = svg.ulen, svg.tick_text, svg.unavailable_reason

-- {====== Checking the results ======}

local function fail(fname, level, fmt, ...)
  error(fname .. ": " .. format(fmt, ...), level + 1)
end

local function is_finite(v)
  return type(v) == "number" and v == v and v ~= huge and v ~= -huge
end

local function is_list(t)
  if type(t) ~= "table" then
    return false
  end
  local n = 0
  for _ in pairs(t) do
    n = n + 1
  end
  return n == #t
end

local function check_scores(fname, level, what, t)
  if type(t) ~= "table" then
    fail(fname, level + 1, "%s must be a table, got %s", what, type(t))
  end
  for k, v in pairs(t) do
    if type(k) ~= "string" then
      fail(fname, level + 1, "%s: metric names must be strings, got %s", what, type(k))
    end
    if not is_finite(v) then
      fail(fname, level + 1, "%s[%q] must be a finite number, got %s", what, k, tostring(v))
    end
  end
end

local function check_curve(fname, level, what, curve)
  if not is_list(curve) then
    fail(fname, level + 1, "%s must be a list", what)
  end
  local seen = {}
  for i, p in ipairs(curve) do
    if type(p) ~= "table" or not is_finite(p.k) or p.k <= 0 or not is_finite(p.value) then
      fail(fname, level + 1, "%s[%d] must be { k = a number > 0, value = a finite number }",
        what, i)
    end
    if seen[p.k] then
      fail(fname, level + 1, "%s: k = %s appears twice", what, tostring(p.k))
    end
    seen[p.k] = true
  end
end

local function check_setting(fname, level, i, s, names)
  local what = format("results.settings[%d]", i)
  if type(s) ~= "table" then
    fail(fname, level + 1, "%s must be a table, got %s", what, type(s))
  end
  if type(s.name) ~= "string" or s.name == "" then
    fail(fname, level + 1, "%s.name must be a non-empty string", what)
  end
  if names[s.name] then
    fail(fname, level + 1, "%s.name '%s' is used twice", what, s.name)
  end
  names[s.name] = true
  if s.params ~= nil then
    if type(s.params) ~= "table" then
      fail(fname, level + 1, "%s.params must be a table", what)
    end
    for k, v in pairs(s.params) do
      local t = type(v)
      if type(k) ~= "string" or (t ~= "string" and t ~= "number" and t ~= "boolean") then
        fail(fname, level + 1, "%s.params: keys must be strings and values strings, "
          .. "numbers or booleans", what)
      end
    end
  end
  check_scores(fname, level + 1, what .. ".scores", s.scores == nil and {} or s.scores)
  if s.per_query ~= nil then
    if type(s.per_query) ~= "table" then
      fail(fname, level + 1, "%s.per_query must be a table", what)
    end
    for q, t in pairs(s.per_query) do
      check_scores(fname, level + 1, format("%s.per_query[%q]", what, tostring(q)), t)
    end
  end
  if s.curve ~= nil then
    check_curve(fname, level + 1, what .. ".curve", s.curve)
  end
  if s.unavailable ~= nil then
    if type(s.unavailable) ~= "table" then
      fail(fname, level + 1, "%s.unavailable must be a table", what)
    end
    for k, v in pairs(s.unavailable) do
      if type(k) ~= "string" or type(v) ~= "string" then
        fail(fname, level + 1, "%s.unavailable must map metric names to reasons (strings)",
          what)
      end
    end
  end
end

local function check_diagnosis(fname, level, d)
  if not is_list(d) then
    fail(fname, level + 1, "results.diagnosis must be a list")
  end
  for i, row in ipairs(d) do
    local what = format("results.diagnosis[%d]", i)
    if type(row) ~= "table" or type(row.cause) ~= "string" then
      fail(fname, level + 1, "%s must be a table with a string cause", what)
    end
    local sg = row.suggestions
    if sg ~= nil and type(sg) ~= "string" then
      opts_mod.strings(fname, what .. ".suggestions", sg, level + 1)
    end
    local ev = row.evidence
    if ev ~= nil and type(ev) ~= "string" and type(ev) ~= "table" then
      fail(fname, level + 1, "%s.evidence must be a string or a table", what)
    end
  end
end

local COMPARED = { "n", "a", "b", "diff", "p" }

local function check_comparisons(fname, level, list)
  if not is_list(list) then
    fail(fname, level + 1, "results.comparisons must be a list")
  end
  for i, c in ipairs(list) do
    local what = format("results.comparisons[%d]", i)
    if type(c) ~= "table" or type(c.a) ~= "string" or type(c.b) ~= "string"
      or type(c.result) ~= "table" or type(c.result.metrics) ~= "table" then
      fail(fname, level + 1, "%s must be { a = name, b = name, result = "
        .. "{ metrics = ... } } (rag.eval.compare's result)", what)
    end
    for m, r in pairs(c.result.metrics) do
      if type(m) ~= "string" or type(r) ~= "table" then
        fail(fname, level + 1, "%s.result.metrics must map metric names to tables", what)
      end
      for _, k in ipairs(COMPARED) do
        if r[k] ~= nil and not is_finite(r[k]) then
          fail(fname, level + 1, "%s.result.metrics[%q].%s must be a finite number", what, m, k)
        end
      end
    end
  end
end

-- Checks `results` and returns the metrics to show, in order: results.metrics,
-- or else every metric named by a setting, sorted.
local function check(fname, results, level)
  level = level + 1
  if type(results) ~= "table" then
    fail(fname, level, "results must be a table, got %s", type(results))
  end
  if not is_list(results.settings) or #results.settings == 0 then
    fail(fname, level, "results.settings must be a list of at least one setting")
  end
  local names = {}
  for i, s in ipairs(results.settings) do
    check_setting(fname, level, i, s, names)
  end
  local metrics = results.metrics
  if metrics ~= nil then
    opts_mod.strings(fname, "results.metrics", metrics, level)
    local seen = {}
    for _, m in ipairs(metrics) do
      if m == "" or seen[m] then
        fail(fname, level, "results.metrics: '%s' is empty or appears twice", m)
      end
      seen[m] = true
    end
  else
    local seen = {}
    for _, s in ipairs(results.settings) do
      for _, t in ipairs({ s.scores or {}, s.unavailable or {} }) do
        for k in pairs(t) do
          seen[k] = true
        end
      end
    end
    metrics = sorted_keys(seen)
  end
  if results.diagnosis ~= nil then
    check_diagnosis(fname, level, results.diagnosis)
  end
  if results.comparisons ~= nil then
    check_comparisons(fname, level, results.comparisons)
  end
  if results.meta ~= nil and type(results.meta) ~= "table" then
    fail(fname, level, "results.meta must be a table")
  end
  return metrics
end

-- {====== Tables and lists ======}

local function param_keys(settings)
  local seen = {}
  for _, s in ipairs(settings) do
    for k in pairs(s.params or {}) do
      seen[k] = true
    end
  end
  return sorted_keys(seen)
end

-- The best value of each metric over the settings (higher is better).
local function best(settings, metrics)
  local out = {}
  for _, m in ipairs(metrics) do
    for _, s in ipairs(settings) do
      local v = s.scores and s.scores[m]
      if v ~= nil and (out[m] == nil or v > out[m]) then
        out[m] = v
      end
    end
  end
  return out
end

local function numbers_table(out, settings, metrics)
  local pkeys, top = param_keys(settings), best(settings, metrics)
  out[#out + 1] = '<div class="scroll"><table class="numbers"><thead><tr>'
    .. '<th scope="col">setting</th>'
  for _, k in ipairs(pkeys) do
    out[#out + 1] = format('<th scope="col" class="param">%s</th>', esc(k))
  end
  for _, m in ipairs(metrics) do
    out[#out + 1] = format('<th scope="col">%s</th>', esc(m))
  end
  out[#out + 1] = "</tr></thead><tbody>"
  for _, s in ipairs(settings) do
    out[#out + 1] = format('<tr data-setting="%s"><th scope="row">%s</th>', esc(s.name),
      esc(s.name))
    for _, k in ipairs(pkeys) do
      local v = s.params and s.params[k]
      out[#out + 1] = format('<td class="param">%s</td>', v == nil and "" or esc(value_text(v)))
    end
    for _, m in ipairs(metrics) do
      local v = s.scores and s.scores[m]
      if v == nil then
        out[#out + 1] = format('<td class="na" data-metric="%s" title="%s">unavailable</td>',
          esc(m), esc(unavailable_reason(s, m)))
      elseif v == top[m] then
        out[#out + 1] = format('<td class="num best" data-metric="%s"><strong>%s</strong></td>',
          esc(m), num(v))
      else
        out[#out + 1] = format('<td class="num" data-metric="%s">%s</td>', esc(m), num(v))
      end
    end
    out[#out + 1] = "</tr>"
  end
  out[#out + 1] = "</tbody></table></div>"
end

-- { { metric =, reason =, settings = { names } } } in metric order, then reason.
local function unavailability(settings, metrics)
  local out = {}
  for _, m in ipairs(metrics) do
    local by_reason, reasons = {}, {}
    for _, s in ipairs(settings) do
      if not (s.scores and s.scores[m]) then
        local r = unavailable_reason(s, m)
        if not by_reason[r] then
          by_reason[r] = {}
          reasons[#reasons + 1] = r
        end
        local l = by_reason[r]
        l[#l + 1] = s.name
      end
    end
    sort(reasons)
    for _, r in ipairs(reasons) do
      out[#out + 1] = { metric = m, reason = r, settings = by_reason[r] }
    end
  end
  return out
end

local function which(names, total)
  if #names == total then
    return "all settings"
  end
  return concat(names, ", ")
end

local function unavailable_list(out, settings, metrics)
  local rows = unavailability(settings, metrics)
  if #rows == 0 then
    return
  end
  out[#out + 1] = '<p class="note">Unavailable:</p><ul class="unavailable">'
  for _, r in ipairs(rows) do
    out[#out + 1] = format('<li data-metric="%s"><strong>%s</strong>: %s (%s)</li>',
      esc(r.metric), esc(r.metric), esc(r.reason), esc(which(r.settings, #settings)))
  end
  out[#out + 1] = "</ul>"
end

local function evidence_text(ev)
  if type(ev) == "string" then
    return ev
  end
  local parts = {}
  for _, k in ipairs(sorted_keys(ev)) do
    local v = ev[k]
    parts[#parts + 1] = tostring(k) .. " = " .. (type(v) == "number" and num(v) or tostring(v))
  end
  return concat(parts, ", ")
end

-- Whether any setting has a value for any of the metrics.
local function any_value(settings, metrics)
  for _, s in ipairs(settings) do
    for _, m in ipairs(metrics) do
      if s.scores and s.scores[m] then
        return true
      end
    end
  end
  return false
end

local function diagnosis_list(out, diagnosis, settings, metrics)
  out[#out + 1] = '<section id="diagnosis"><h2>Diagnosis</h2>'
  if #diagnosis == 0 then
    local said
    if not any_value(settings, metrics) then
      said = "Nothing to diagnose: no metric could be computed (see Unavailable above)."
    elseif #unavailability(settings, metrics) > 0 then
      said = "No problem found in the metrics that could be computed (see Unavailable above)."
    else
      said = "No problem found."
    end
    out[#out + 1] = "<p>" .. said .. "</p></section>"
    return
  end
  out[#out + 1] = '<ol class="diagnosis">'
  for _, d in ipairs(diagnosis) do
    out[#out + 1] = format('<li><p class="cause">%s</p>', esc(d.cause))
    if d.evidence ~= nil then
      out[#out + 1] = format('<p class="evidence">Evidence: %s</p>', esc(evidence_text(d.evidence)))
    end
    local sg = type(d.suggestions) == "string" and { d.suggestions } or d.suggestions or {}
    if #sg > 0 then
      out[#out + 1] = "<p>Try:</p><ul>"
      for _, x in ipairs(sg) do
        out[#out + 1] = format("<li>%s</li>", esc(x))
      end
      out[#out + 1] = "</ul>"
    end
    out[#out + 1] = "</li>"
  end
  out[#out + 1] = "</ol></section>"
end

-- The metrics of a comparison: those shown, in order, then the others sorted.
local function compared_metrics(c, metrics)
  local out, seen = {}, {}
  for _, m in ipairs(metrics) do
    if c.result.metrics[m] then
      out[#out + 1] = m
      seen[m] = true
    end
  end
  for _, m in ipairs(sorted_keys(c.result.metrics)) do
    if not seen[m] then
      out[#out + 1] = m
    end
  end
  return out
end

local function signed(v)
  return (v > 0 and "+" or "") .. num(v)
end

local function changed_text(list)
  local parts = {}
  for i, q in ipairs(type(list) == "table" and list or {}) do
    if i > 3 then
      break
    end
    if type(q) == "table" and is_finite(q.diff) then
      parts[#parts + 1] = tostring(q.query) .. " " .. signed(q.diff)
    end
  end
  return concat(parts, ", ")
end

local function opt_num(v, f)
  return v == nil and "-" or (f or num)(v)
end

-- One comparison's table of metrics.
local function comparison_table(out, c, cm)
  out[#out + 1] = '<div class="scroll"><table class="numbers comparison"><thead><tr>'
    .. '<th scope="col">metric</th><th scope="col">a</th><th scope="col">b</th>'
    .. '<th scope="col">b − a</th><th scope="col">p</th><th scope="col">n</th>'
    .. '<th scope="col">most changed</th></tr></thead><tbody>'
  for _, m in ipairs(cm) do
    local r = c.result.metrics[m]
    local sig = r.p ~= nil and r.p < 0.05
    out[#out + 1] = format('<tr data-metric="%s"%s><th scope="row">%s</th>'
      .. '<td class="num">%s</td><td class="num">%s</td><td class="num">%s</td>'
      .. '<td class="num">%s</td><td class="num">%s</td><td>%s</td></tr>', esc(m),
      sig and ' class="significant"' or "", esc(m), opt_num(r.a), opt_num(r.b),
      opt_num(r.diff, signed), sig and ("<strong>" .. num(r.p) .. "</strong>") or opt_num(r.p),
      opt_num(r.n, value_text), esc(changed_text(r.changed)))
  end
  out[#out + 1] = "</tbody></table></div>"
end

local function comparisons_section(out, comparisons, metrics)
  out[#out + 1] = '<section id="comparisons"><h2>Paired comparisons</h2>'
  out[#out + 1] = "<p>Differences are b − a per question; p is the two-sided p-value of a "
    .. "paired test (significant below 0.05, in bold).</p>"
  for _, c in ipairs(comparisons) do
    local test = c.result.test and (" (" .. tostring(c.result.test)
      .. (c.result.rounds and (", " .. value_text(c.result.rounds) .. " rounds") or "") .. ")")
      or ""
    local cm = compared_metrics(c, metrics)
    out[#out + 1] = format('<h3>b = %s vs a = %s%s</h3>', esc(c.b), esc(c.a), esc(test))
    if #cm == 0 then
      out[#out + 1] = "<p>No metric has values for both.</p>"
    else
      comparison_table(out, c, cm)
    end
  end
  out[#out + 1] = "</section>"
end

local function curve_table(out, settings)
  local seen, ks = {}, {}
  for _, s in ipairs(settings) do
    for _, p in ipairs(s.curve or {}) do
      if not seen[p.k] then
        seen[p.k] = true
        ks[#ks + 1] = p.k
      end
    end
  end
  sort(ks)
  out[#out + 1] = '<div class="scroll"><table class="numbers curve-table"><thead><tr>'
    .. '<th scope="col">setting</th>'
  for _, k in ipairs(ks) do
    out[#out + 1] = format('<th scope="col">recall@%s</th>', tick_text(k))
  end
  out[#out + 1] = "</tr></thead><tbody>"
  for _, s in ipairs(settings) do
    if s.curve and #s.curve > 0 then
      local at = {}
      for _, p in ipairs(s.curve) do
        at[p.k] = p.value
      end
      out[#out + 1] = format('<tr><th scope="row">%s</th>', esc(s.name))
      for _, k in ipairs(ks) do
        out[#out + 1] = at[k] and format('<td class="num">%s</td>', num(at[k]))
          or '<td class="na">-</td>'
      end
      out[#out + 1] = "</tr>"
    end
  end
  out[#out + 1] = "</tbody></table></div>"
end

-- {====== The page ======}

local CSS = [[
:root { color-scheme: light; }
body { margin: 0 auto; max-width: 980px; padding: 16px 10px 40px; background: #fff;
  color: #1b1b1b; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto,
  "DejaVu Sans", sans-serif; }
h1 { font-size: 1.6em; margin: 0.2em 0 0.4em; }
h2 { font-size: 1.25em; margin: 1.6em 0 0.5em; border-bottom: 1px solid #ccc;
  padding-bottom: 0.2em; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px;
  margin: 0 0 1em; }
dl.meta dt { font-weight: 600; color: #444; }
dl.meta dd { margin: 0; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
table.numbers { border-collapse: collapse; margin: 0.5em 0; font-size: 0.93em; }
table.numbers th, table.numbers td { border: 1px solid #d0d0d0; padding: 4px 9px;
  text-align: left; }
table.numbers thead th { background: #f0f3f7; }
table.numbers td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.numbers td.na { color: #666; font-style: italic; }
table.numbers td.param { color: #333; }
table.comparison tr.significant th { font-weight: 700; }
h3 { font-size: 1.05em; margin: 1.2em 0 0.3em; }
figure { margin: 0.8em 0 1.4em; }
figcaption { color: #444; font-size: 0.9em; }
svg.chart { display: block; width: 100%; max-width: 960px; height: auto; }
svg.chart text { font: 13px system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans",
  sans-serif; fill: #1b1b1b; }
svg.chart text.heading { font-size: 16px; font-weight: 600; }
svg.chart text.na { fill: #666; font-style: italic; }
svg.chart text.value { fill: #333; font-variant-numeric: tabular-nums; }
svg.chart .axis text { fill: #444; font-size: 12px; }
svg.chart line.grid { stroke: #e3e3e3; stroke-width: 1; }
svg.chart line.axisline { stroke: #555; stroke-width: 1; }
svg.chart rect.box { fill-opacity: 0.22; stroke-width: 1.5; }
svg.chart line.whisker { stroke-width: 1.5; }
svg.chart line.median { stroke: #1b1b1b; stroke-width: 2.5; }
svg.chart circle.pt { fill-opacity: 0.55; }
svg.chart polyline.curve { fill: none; stroke-width: 2.5; }
ol.diagnosis > li { margin-bottom: 0.8em; }
ol.diagnosis p { margin: 0.15em 0; }
p.cause { font-weight: 600; }
p.evidence, p.note { color: #444; }
footer { margin-top: 2.5em; color: #555; font-size: 0.88em; }
]]

local function meta_list(out, meta)
  local keys = sorted_keys(meta)
  if #keys == 0 then
    return
  end
  out[#out + 1] = '<dl class="meta">'
  for _, k in ipairs(keys) do
    out[#out + 1] = format("<dt>%s</dt><dd>%s</dd>", esc(k), esc(value_text(meta[k])))
  end
  out[#out + 1] = "</dl>"
end

local function chart_sections(out, settings, metrics)
  out[#out + 1] = '<section id="metrics"><h2>Metrics per setting</h2>'
  for n, m in ipairs(metrics) do
    out[#out + 1] = '<figure class="metric">'
    svg.bar(out, n, m, settings)
    out[#out + 1] = format("<figcaption>%s: the mean over the questions, per setting.</figcaption>"
      .. "</figure>", esc(m))
  end
  out[#out + 1] = "</section>"
  local dist = {}
  for n, m in ipairs(metrics) do
    if svg.has_per_query(settings, m) then
      dist[#dist + 1] = { n = n, m = m }
    end
  end
  if #dist > 0 then
    out[#out + 1] = '<section id="distributions"><h2>Per-question distributions</h2>'
    for _, d in ipairs(dist) do
      out[#out + 1] = '<figure class="distribution">'
      svg.distribution(out, d.n, d.m, settings)
      out[#out + 1] = format("<figcaption>%s per question: box from the first to the third "
        .. "quartile, median line, whiskers to the minimum and maximum, one dot per question."
        .. "</figcaption></figure>", esc(d.m))
    end
    out[#out + 1] = "</section>"
  end
  for _, s in ipairs(settings) do
    if s.curve and #s.curve > 0 then
      out[#out + 1] = '<section id="recall-curves"><h2>Recall@k curves</h2><figure>'
      svg.curves(out, settings)
      out[#out + 1] = "<figcaption>Recall at each cutoff k, one line per setting."
        .. "</figcaption></figure>"
      curve_table(out, settings)
      out[#out + 1] = "</section>"
      return
    end
  end
end

local HTML_OPTS = { title = { "string", default = "rag evaluation report" } }

--- The results of an evaluation as one self-contained HTML document.
-- @tparam table results `{ metrics =, settings = { {name=, params=, scores=,
--   per_query=, curve=, unavailable=}, ... }, diagnosis =, meta = }` (see
--   docs/api.md)
-- @tparam[opt] table opts `title` (string)
-- @treturn string the page: inline CSS and SVG, no script, no external URL
-- @raise on malformed results or options
function M.html(results, opts)
  local fname = "rag.report.html"
  local o = opts_mod.check(fname, opts, HTML_OPTS, 2)
  local metrics = check(fname, results, 2)
  local settings = results.settings
  local out = {
    '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>',
    '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
    '<meta name="color-scheme" content="light"/>',
    format("<title>%s</title><style>\n%s</style></head><body>", esc(o.title), CSS),
    format('<header><h1>%s</h1>', esc(o.title)),
  }
  meta_list(out, results.meta or {})
  out[#out + 1] = format("<p>%d setting%s, %d metric%s.</p></header>", #settings,
    #settings == 1 and "" or "s", #metrics, #metrics == 1 and "" or "s")
  out[#out + 1] = '<main><section id="numbers"><h2>All numbers</h2>'
  numbers_table(out, settings, metrics)
  out[#out + 1] = '<p class="note">Bold: the best value of each metric (higher is better).</p>'
  unavailable_list(out, settings, metrics)
  out[#out + 1] = "</section>"
  if results.diagnosis then
    diagnosis_list(out, results.diagnosis, settings, metrics)
  end
  if results.comparisons and #results.comparisons > 0 then
    comparisons_section(out, results.comparisons, metrics)
  end
  chart_sections(out, settings, metrics)
  local lib = results.meta and results.meta.library
  out[#out + 1] = "</main><footer>Made by rag.report"
    .. (lib and (" with " .. esc(value_text(lib))) or "") .. ".</footer></body></html>\n"
  return concat(out, "\n")
end

local function pad(s, w, right)
  local fill = (" "):rep(w - ulen(s))
  return right and fill .. s or s .. fill
end

-- Lines of a fixed-width table: the first row is the header, then a rule;
-- the first `nleft` columns are left-aligned, the others right-aligned.
local function grid(rows, nleft)
  local widths = {}
  for _, row in ipairs(rows) do
    for j, cell in ipairs(row) do
      widths[j] = math.max(widths[j] or 0, ulen(cell))
    end
  end
  local lines = {}
  for i, row in ipairs(rows) do
    local cells = {}
    for j, cell in ipairs(row) do
      cells[j] = pad(cell, widths[j], j > nleft)
    end
    lines[#lines + 1] = (concat(cells, "  "):gsub("%s+$", ""))
    if i == 1 then
      local rule = {}
      for j = 1, #row do
        rule[j] = ("-"):rep(widths[j])
      end
      lines[#lines + 1] = concat(rule, "  ")
    end
  end
  return lines
end

-- The paired tests as lines of a table: a, b, metric, b - a, p.
local function comparison_lines(comparisons, metrics)
  local rows = { { "a", "b", "metric", "b - a", "p" } }
  for _, c in ipairs(comparisons) do
    for _, m in ipairs(compared_metrics(c, metrics)) do
      local r = c.result.metrics[m]
      rows[#rows + 1] = { c.a, c.b, m, opt_num(r.diff, signed),
        opt_num(r.p) .. ((r.p and r.p < 0.05) and " *" or "  ") }
    end
  end
  if #rows == 1 then
    return { "paired tests: none (no metric has values for both settings of a pair)" }
  end
  local lines = grid(rows, 3)
  for i, l in ipairs(lines) do
    lines[i] = "  " .. l
  end
  table.insert(lines, 1, "paired tests (* p < 0.05):")
  return lines
end

--- The results as a fixed-width text table: one row per setting, one column
-- per metric, "-" where a metric is unavailable, with the reasons below.
-- @tparam table results as for `html`
-- @treturn string lines ending in "\n"
-- @raise on malformed results
function M.table(results)
  local metrics = check("rag.report.table", results, 2)
  local settings = results.settings
  local header = { "setting" }
  for _, m in ipairs(metrics) do
    header[#header + 1] = m
  end
  local rows = { header }
  for _, s in ipairs(settings) do
    local row = { s.name }
    for _, m in ipairs(metrics) do
      local v = s.scores and s.scores[m]
      row[#row + 1] = v == nil and "-" or num(v)
    end
    rows[#rows + 1] = row
  end
  local lines = grid(rows, 1)
  local na = unavailability(settings, metrics)
  if #na > 0 then
    lines[#lines + 1] = ""
    for _, r in ipairs(na) do
      lines[#lines + 1] = format("- %s unavailable: %s (%s)", r.metric, r.reason,
        which(r.settings, #settings))
    end
  end
  if results.comparisons and #results.comparisons > 0 then
    lines[#lines + 1] = ""
    for _, l in ipairs(comparison_lines(results.comparisons, metrics)) do
      lines[#lines + 1] = l
    end
  end
  return concat(lines, "\n") .. "\n"
end

return M
