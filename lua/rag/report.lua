--- rag.report: the results of an evaluation sweep as one self-contained HTML
-- page (inline SVG bar charts, per-question box plots and recall@k curves;
-- no script, no network) or as a plain-text table for the terminal.
-- The same results always give the same bytes: unordered keys are sorted.
-- @module rag.report
local opts_mod = require("rag.opts")

local M = {}

local type, pairs, ipairs, tostring, error = type, pairs, ipairs, tostring, error
local format, concat, sort = string.format, table.concat, table.sort
local floor, ceil, log, huge = math.floor, math.ceil, math.log, math.huge

local W = 960 -- the width of every chart's viewBox
local LABEL_W = 230 -- room for the setting names left of the plots
local VALUE_W = 150 -- room for the value labels right of the bars
local DIST_W = 190 -- and for "median 0.1234, n=12345" right of the box plots
local ROW = 28 -- the height of one setting's row
-- Okabe-Ito's colour-blind-safe palette (yellow left out: too light on white),
-- then dashed lines for settings beyond it.
local COLORS = { "#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9",
  "#000000", "#7f7f7f" }
local DASHES = { "", "6 3", "2 3", "8 3 2 3" }

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

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do
    keys[#keys + 1] = k
  end
  sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == "string" or type(a) == "number") then
      return a < b
    end
    return type(a) < type(b)
  end)
  return keys
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
  if results.meta ~= nil and type(results.meta) ~= "table" then
    fail(fname, level, "results.meta must be a table")
  end
  return metrics
end

-- {====== Formatting ======}

local function num(v)
  local s = format("%.4f", v)
  if s == "-0.0000" then
    s = "0.0000"
  end
  return s
end

local function coord(v)
  local s = format("%.1f", v)
  return s == "-0.0" and "0.0" or s
end

local function value_text(v)
  if type(v) == "number" then
    if v == floor(v) and v > -1e15 and v < 1e15 then
      return format("%d", v)
    end
    return format("%.6g", v)
  end
  return tostring(v)
end

local ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
  ["'"] = "&#39;" }

local function esc(s)
  return (tostring(s):gsub("[&<>\"']", ESCAPES))
end

-- The number of characters of a UTF-8 string (continuation bytes skipped).
local function ulen(s)
  return #s:gsub("[\128-\191]", "")
end

-- `s` cut to at most `n` characters, never inside a UTF-8 sequence.
local function cut(s, n)
  if ulen(s) <= n then
    return s
  end
  local out, count = {}, 0
  for ch in s:gmatch("[^\128-\191][\128-\191]*") do
    count = count + 1
    if count >= n then
      break
    end
    out[#out + 1] = ch
  end
  return concat(out) .. "…"
end

local function color(i)
  return COLORS[(i - 1) % #COLORS + 1]
end

local function dash(i)
  return DASHES[floor((i - 1) / #COLORS) % #DASHES + 1]
end

-- {====== Scales ======}

-- A domain [lo, hi] that holds every value and 0, [0, 1] when the values
-- fit in it, and ticks at a round step.
local function domain(values)
  local lo, hi = 0, 0
  for _, v in ipairs(values) do
    if v < lo then lo = v end
    if v > hi then hi = v end
  end
  if lo >= 0 and hi <= 1 then
    hi = 1
  end
  local raw = (hi - lo) / 5
  local mag = 10 ^ floor(log(raw) / log(10) + 1e-9)
  local step = mag * 10
  for _, f in ipairs({ 1, 2, 2.5, 5 }) do
    if f * mag >= raw * (1 - 1e-9) then
      step = f * mag
      break
    end
  end
  lo, hi = floor(lo / step + 1e-9) * step, ceil(hi / step - 1e-9) * step
  local ticks = {}
  for i = 0, floor((hi - lo) / step + 0.5) do
    ticks[#ticks + 1] = lo + i * step
  end
  return lo, hi, ticks
end

local function tick_text(t)
  local s = format("%.10g", t)
  return s == "-0" and "0" or s
end

local function linear(lo, hi, x0, x1)
  return function(v)
    return x0 + (v - lo) / (hi - lo) * (x1 - x0)
  end
end

-- {====== SVG pieces ======}

local function svg_open(out, id, h, title, desc)
  out[#out + 1] = format('<svg class="chart" id="%s" viewBox="0 0 %d %d" role="img" '
    .. 'aria-labelledby="%s-t %s-d" preserveAspectRatio="xMinYMin meet">', id, W, h, id, id)
  out[#out + 1] = format('<title id="%s-t">%s</title><desc id="%s-d">%s</desc>', id,
    esc(title), id, esc(desc))
end

-- Vertical grid lines and the tick labels of a horizontal value axis.
local function x_axis(out, sx, ticks, top, bottom)
  out[#out + 1] = '<g class="axis">'
  for _, t in ipairs(ticks) do
    local x = coord(sx(t))
    out[#out + 1] = format('<line class="grid" x1="%s" y1="%d" x2="%s" y2="%d"/>', x, top, x,
      bottom)
    out[#out + 1] = format('<text x="%s" y="%d" text-anchor="middle">%s</text>', x,
      bottom + 16, tick_text(t))
  end
  out[#out + 1] = format('<line class="axisline" x1="%s" y1="%d" x2="%s" y2="%d"/>',
    coord(sx(ticks[1])), bottom, coord(sx(ticks[#ticks])), bottom)
  out[#out + 1] = '</g>'
end

local function row_label(out, name, y)
  out[#out + 1] = format('<text class="label" x="%d" y="%s" text-anchor="end">'
    .. '<title>%s</title>%s</text>', LABEL_W - 10, coord(y + 4), esc(name), esc(cut(name, 30)))
end

local function unavailable_reason(s, metric)
  return s.unavailable and s.unavailable[metric] or "not reported"
end

-- {====== Charts ======}

-- One horizontal bar per setting: the metric's mean.
local function bar_chart(out, n, metric, settings)
  local values = {}
  for _, s in ipairs(settings) do
    values[#values + 1] = s.scores and s.scores[metric]
  end
  local lo, hi, ticks = domain(values)
  local top = 40
  local bottom = top + #settings * ROW + 6
  local sx = linear(lo, hi, LABEL_W, W - VALUE_W)
  svg_open(out, "bar-" .. n, bottom + 26, metric .. ": mean per setting",
    format("A bar chart of %s for each of the %d settings; longer is higher.", metric,
      #settings))
  out[#out + 1] = format('<text class="heading" x="0" y="20">%s</text>', esc(metric))
  x_axis(out, sx, ticks, top - 6, bottom)
  for i, s in ipairs(settings) do
    local y = top + (i - 1) * ROW + ROW / 2
    local v = s.scores and s.scores[metric]
    row_label(out, s.name, y)
    if v ~= nil then
      local x0, x1 = sx(0), sx(v)
      if x1 < x0 then x0, x1 = x1, x0 end
      out[#out + 1] = format('<rect class="bar" x="%s" y="%s" width="%s" height="18" '
        .. 'fill="%s" data-setting="%s" data-value="%s"><title>%s: %s = %s</title></rect>',
        coord(x0), coord(y - 9), coord(x1 - x0), color(i), esc(s.name), num(v), esc(s.name),
        esc(metric), num(v))
      out[#out + 1] = format('<text class="value" x="%s" y="%s">%s</text>',
        coord(math.max(sx(v), sx(0)) + 6), coord(y + 4), num(v))
    else
      out[#out + 1] = format('<text class="na" x="%s" y="%s" data-setting="%s">'
        .. 'unavailable: %s</text>', coord(sx(0) + 6), coord(y + 4), esc(s.name),
        esc(cut(unavailable_reason(s, metric), 70)))
    end
  end
  out[#out + 1] = format('<line class="axisline" x1="%s" y1="%d" x2="%s" y2="%d"/>',
    coord(sx(0)), top - 6, coord(sx(0)), bottom)
  out[#out + 1] = "</svg>"
end

-- The sorted per-question values of a metric for one setting, and their qids.
local function per_query_values(s, metric)
  local vals = {}
  if not s.per_query then
    return vals
  end
  for _, q in ipairs(sorted_keys(s.per_query)) do
    local v = s.per_query[q][metric]
    if v ~= nil then
      vals[#vals + 1] = { q = tostring(q), v = v }
    end
  end
  return vals
end

-- The p-quantile of sorted numbers, interpolated (R's type 7).
local function quantile(sorted, p)
  local h = (#sorted - 1) * p + 1
  local i = floor(h)
  if i >= #sorted then
    return sorted[#sorted]
  end
  return sorted[i] + (h - i) * (sorted[i + 1] - sorted[i])
end

local function has_per_query(settings, metric)
  for _, s in ipairs(settings) do
    if #per_query_values(s, metric) > 0 then
      return true
    end
  end
  return false
end

local function box_row(out, i, s, vals, sx, y)
  local sorted = {}
  for j, p in ipairs(vals) do
    sorted[j] = p.v
  end
  sort(sorted)
  local q1, med, q3 = quantile(sorted, 0.25), quantile(sorted, 0.5), quantile(sorted, 0.75)
  local c = color(i)
  out[#out + 1] = format('<g class="dist" data-setting="%s" data-n="%d" data-median="%s">',
    esc(s.name), #sorted, num(med))
  out[#out + 1] = format('<line class="whisker" x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>',
    coord(sx(sorted[1])), coord(y), coord(sx(sorted[#sorted])), coord(y), c)
  out[#out + 1] = format('<rect class="box" x="%s" y="%s" width="%s" height="20" fill="%s" '
    .. 'stroke="%s"><title>%s: min %s, q1 %s, median %s, q3 %s, max %s (n = %d)</title></rect>',
    coord(sx(q1)), coord(y - 10), coord(sx(q3) - sx(q1)), c, c, esc(s.name), num(sorted[1]),
    num(q1), num(med), num(q3), num(sorted[#sorted]), #sorted)
  out[#out + 1] = format('<line class="median" x1="%s" y1="%s" x2="%s" y2="%s"/>',
    coord(sx(med)), coord(y - 11), coord(sx(med)), coord(y + 11))
  for j, p in ipairs(vals) do
    -- A fixed jitter (golden-ratio sequence) keeps equal values apart.
    local jy = y + ((j * 0.6180339887) % 1 - 0.5) * 16
    out[#out + 1] = format('<circle class="pt" cx="%s" cy="%s" r="2.5" fill="%s">'
      .. '<title>%s: %s</title></circle>', coord(sx(p.v)), coord(jy), c, esc(p.q), num(p.v))
  end
  out[#out + 1] = format('<text class="value" x="%d" y="%s">median %s, n=%d</text>',
    W - DIST_W + 8, coord(y + 4), num(med), #sorted)
  out[#out + 1] = "</g>"
end

-- One box plot with every question's value as a dot, per setting.
local function dist_chart(out, n, metric, settings)
  local all, rows = {}, {}
  for i, s in ipairs(settings) do
    rows[i] = per_query_values(s, metric)
    for _, p in ipairs(rows[i]) do
      all[#all + 1] = p.v
    end
  end
  local lo, hi, ticks = domain(all)
  local top = 40
  local bottom = top + #settings * ROW + 6
  local sx = linear(lo, hi, LABEL_W, W - DIST_W)
  svg_open(out, "dist-" .. n, bottom + 26, metric .. ": per-question distribution",
    format("Box plots of %s over the questions, one per setting: the box spans the middle "
      .. "half, the line is the median, the whiskers reach the extremes, dots are questions.",
      metric))
  out[#out + 1] = format('<text class="heading" x="0" y="20">%s per question</text>',
    esc(metric))
  x_axis(out, sx, ticks, top - 6, bottom)
  for i, s in ipairs(settings) do
    local y = top + (i - 1) * ROW + ROW / 2
    row_label(out, s.name, y)
    if #rows[i] > 0 then
      box_row(out, i, s, rows[i], sx, y)
    else
      out[#out + 1] = format('<text class="na" x="%d" y="%s" data-setting="%s">'
        .. 'no per-question values</text>', LABEL_W + 6, coord(y + 4), esc(s.name))
    end
  end
  out[#out + 1] = "</svg>"
end

local function sorted_curve(s)
  local pts = {}
  for i, p in ipairs(s.curve) do
    pts[i] = p
  end
  sort(pts, function(a, b) return a.k < b.k end)
  return pts
end

-- The k axis: logarithmic when k spans a factor of 10 or more.
local function k_scale(settings, x0, x1)
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
  local kmin, kmax = ks[1], ks[#ks]
  local f = function(k) return k end
  if kmax / kmin >= 10 then
    f = log
  end
  local a, b = f(kmin), f(kmax)
  if a == b then
    a, b = a - 1, b + 1
  end
  local sx = function(k) return x0 + (f(k) - a) / (b - a) * (x1 - x0) end
  if #ks > 12 then
    local thin, step = {}, (#ks - 1) / 11
    for i = 0, 11 do
      thin[#thin + 1] = ks[floor(i * step + 0.5) + 1]
    end
    ks = thin
  end
  return sx, ks, f == log
end

local function legend(out, settings, y)
  local per_row = 3
  for i, s in ipairs(settings) do
    local x = 60 + ((i - 1) % per_row) * 300
    local ly = y + floor((i - 1) / per_row) * 22
    out[#out + 1] = format('<g class="legend-item" data-setting="%s">', esc(s.name))
    out[#out + 1] = format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" '
      .. 'stroke-width="3"%s/>', x, ly, x + 24, ly, color(i),
      dash(i) ~= "" and format(' stroke-dasharray="%s"', dash(i)) or "")
    out[#out + 1] = format('<text x="%d" y="%d"><title>%s</title>%s</text></g>', x + 32, ly + 4,
      esc(s.name), esc(cut(s.name, 36)))
  end
end

-- One line per setting: recall at each k.
local function curve_chart(out, settings)
  local with = {}
  for i, s in ipairs(settings) do
    if s.curve and #s.curve > 0 then
      with[#with + 1] = { i = i, s = s }
    end
  end
  local all = {}
  for _, w in ipairs(with) do
    for _, p in ipairs(w.s.curve) do
      all[#all + 1] = p.value
    end
  end
  local lo, hi, ticks = domain(all)
  local x0, x1, top, bottom = 70, W - 30, 40, 340
  local sx, ks, is_log = k_scale(settings, x0, x1)
  local sy = linear(lo, hi, bottom, top)
  local rows = ceil(#settings / 3)
  svg_open(out, "curves", bottom + 60 + rows * 22, "recall@k: one line per setting",
    format("Recall at each cutoff k (%s axis), one line per setting; higher is better.",
      is_log and "logarithmic k" or "linear k"))
  out[#out + 1] = '<text class="heading" x="0" y="20">recall@k</text>'
  out[#out + 1] = '<g class="axis">'
  for _, t in ipairs(ticks) do
    local y = coord(sy(t))
    out[#out + 1] = format('<line class="grid" x1="%d" y1="%s" x2="%d" y2="%s"/>', x0, y, x1, y)
    out[#out + 1] = format('<text x="%d" y="%s" text-anchor="end">%s</text>', x0 - 8,
      coord(sy(t) + 4), tick_text(t))
  end
  for _, k in ipairs(ks) do
    local x = coord(sx(k))
    out[#out + 1] = format('<line class="grid" x1="%s" y1="%d" x2="%s" y2="%d"/>', x, top, x,
      bottom)
    out[#out + 1] = format('<text x="%s" y="%d" text-anchor="middle">%s</text>', x,
      bottom + 16, tick_text(k))
  end
  out[#out + 1] = format('<line class="axisline" x1="%d" y1="%d" x2="%d" y2="%d"/>', x0,
    bottom, x1, bottom)
  out[#out + 1] = format('<line class="axisline" x1="%d" y1="%d" x2="%d" y2="%d"/>', x0, top,
    x0, bottom)
  out[#out + 1] = format('<text x="%d" y="%d" text-anchor="middle">k</text></g>',
    floor((x0 + x1) / 2), bottom + 34)
  for _, w in ipairs(with) do
    local pts, xy = sorted_curve(w.s), {}
    for j, p in ipairs(pts) do
      xy[j] = coord(sx(p.k)) .. "," .. coord(sy(p.value))
    end
    out[#out + 1] = format('<polyline class="curve" points="%s" stroke="%s"%s '
      .. 'data-setting="%s"><title>%s</title></polyline>', concat(xy, " "), color(w.i),
      dash(w.i) ~= "" and format(' stroke-dasharray="%s"', dash(w.i)) or "", esc(w.s.name),
      esc(w.s.name))
    for _, p in ipairs(pts) do
      out[#out + 1] = format('<circle class="cpt" cx="%s" cy="%s" r="3.5" fill="%s">'
        .. '<title>%s: recall@%s = %s</title></circle>', coord(sx(p.k)), coord(sy(p.value)),
        color(w.i), esc(w.s.name), tick_text(p.k), num(p.value))
    end
  end
  legend(out, settings, bottom + 56)
  out[#out + 1] = "</svg>"
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

local function diagnosis_list(out, diagnosis)
  out[#out + 1] = '<section id="diagnosis"><h2>Diagnosis</h2>'
  if #diagnosis == 0 then
    out[#out + 1] = "<p>No problem found.</p></section>"
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
    bar_chart(out, n, m, settings)
    out[#out + 1] = format("<figcaption>%s: the mean over the questions, per setting.</figcaption>"
      .. "</figure>", esc(m))
  end
  out[#out + 1] = "</section>"
  local dist = {}
  for n, m in ipairs(metrics) do
    if has_per_query(settings, m) then
      dist[#dist + 1] = { n = n, m = m }
    end
  end
  if #dist > 0 then
    out[#out + 1] = '<section id="distributions"><h2>Per-question distributions</h2>'
    for _, d in ipairs(dist) do
      out[#out + 1] = '<figure class="distribution">'
      dist_chart(out, d.n, d.m, settings)
      out[#out + 1] = format("<figcaption>%s per question: box from the first to the third "
        .. "quartile, median line, whiskers to the minimum and maximum, one dot per question."
        .. "</figcaption></figure>", esc(d.m))
    end
    out[#out + 1] = "</section>"
  end
  for _, s in ipairs(settings) do
    if s.curve and #s.curve > 0 then
      out[#out + 1] = '<section id="recall-curves"><h2>Recall@k curves</h2><figure>'
      curve_chart(out, settings)
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
    diagnosis_list(out, results.diagnosis)
  end
  chart_sections(out, settings, metrics)
  out[#out + 1] = "</main><footer>Made by rag.report"
  if results.meta and results.meta.library then
    out[#out + 1] = " with " .. esc(value_text(results.meta.library))
  end
  out[#out + 1] = ".</footer></body></html>\n"
  return concat(out, "\n")
end

local function pad(s, w, right)
  local fill = (" "):rep(w - ulen(s))
  return right and fill .. s or s .. fill
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
      cells[j] = pad(cell, widths[j], j > 1)
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
  local na = unavailability(settings, metrics)
  if #na > 0 then
    lines[#lines + 1] = ""
    for _, r in ipairs(na) do
      lines[#lines + 1] = format("- %s unavailable: %s (%s)", r.metric, r.reason,
        which(r.settings, #settings))
    end
  end
  return concat(lines, "\n") .. "\n"
end

return M
