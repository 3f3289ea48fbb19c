--- rag.report._svg: the inline SVG charts of rag.report's page (horizontal
-- bars of a metric per setting, box plots of its per-question values,
-- recall@k lines) and the text formatting they share with it. Every chart
-- has a viewBox 960 wide, a <title> and a <desc>; coordinates have one
-- decimal, values four, so the same results give the same bytes.
-- @module rag.report._svg
local M = {}

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local format, concat, sort = string.format, table.concat, table.sort
local floor, ceil, log = math.floor, math.ceil, math.log

local W = 960 -- the width of every chart's viewBox
local LABEL_W = 230 -- room for the setting names left of the plots
local VALUE_W = 150 -- room for the value labels right of the bars
local DIST_W = 190 -- and for "median 0.1234, n=12345" right of the box plots
local ROW = 28 -- the height of one setting's row
local MAX_DOTS = 400 -- per box plot: more questions are sampled evenly, in id order
-- Okabe-Ito's colour-blind-safe palette (yellow left out: too light on white;
-- Tol's wine for black, which reads as emphasis),
-- then dashed lines for settings beyond it.
local COLORS = { "#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9",
  "#882255", "#7f7f7f" }
local DASHES = { "", "6 3", "2 3", "8 3 2 3" }

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

-- Also replaces control characters, which XML forbids, with U+FFFD.
local function esc(s)
  s = tostring(s):gsub("[%z\1-\8\11\12\14-\31\127]", "\239\191\189")
  return (s:gsub("[&<>\"']", ESCAPES))
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
  local step = #vals > MAX_DOTS and #vals / MAX_DOTS or 1
  for d = 1, math.min(#vals, MAX_DOTS) do
    local j = floor((d - 0.5) * step) + 1
    local p = vals[j]
    -- A fixed jitter (golden-ratio sequence) keeps equal values apart.
    local jy = y + ((d * 0.6180339887) % 1 - 0.5) * 16
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
      .. "half, the line is the median, the whiskers reach the extremes, dots are questions "
      .. "(at most %d per setting).", metric, MAX_DOTS))
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

M.sorted_keys = sorted_keys
M.num = num
M.value_text = value_text
M.esc = esc
M.ulen = ulen
M.tick_text = tick_text
M.unavailable_reason = unavailable_reason
M.has_per_query = has_per_query
M.bar = bar_chart
M.distribution = dist_chart
M.curves = curve_chart

return M
