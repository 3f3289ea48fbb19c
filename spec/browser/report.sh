#!/bin/sh
# Acceptance C of issue 24 in a real browser: the report `rag eval --html`
# writes for a sweep over three chunk sizes (a BEIR folder made by
# spec/browser/beir.lua) opened in headless Chromium (Debian's chromium) logs
# no console message, asks the network for nothing, and its DOM holds one
# bar chart per metric with a bar per setting. A page with an error first
# proves both detectors live. Leaves the page, its screenshot, DOM and logs
# in $OUT. The last line is "N passed, N failed" (the checks).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/browser}
LUA=${LUA:-lua5.4}
BUILD=${BUILD:-build}
rm -rf "$OUT" && mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
passed=0
failed=0

check() { # what, command...
  what=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
    echo "ok: $what"
  else
    failed=$((failed + 1))
    echo "FAILED: $what"
  fi
}

# Opens file $1 with the flags that follow; stderr to $1.log, the network
# log to $1.net.json. Every host name fails to resolve: nothing can load.
chrome() {
  page=$1
  shift
  timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --host-resolver-rules="MAP * ~NOTFOUND" --user-data-dir="$OUT/profile" \
    --enable-logging=stderr --v=0 --log-net-log="$page.net.json" \
    --virtual-time-budget=2000 --window-size=1000,2000 "$@" "file://$page" 2>"$page.log"
}

# Console messages (errors, warnings, uncaught exceptions) of the page.
console() {
  grep -E ':CONSOLE(:|\()|Uncaught' "$1.log"
}

# The URLs the page itself asked the network for (the browser's own
# background requests have no file:// isolation key and are left out).
requests() {
  python3 - "$1.net.json" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    log = json.load(f)
seen = set()
for e in log.get("events", []):
    p = e.get("params") or {}
    url, nik = p.get("url", ""), p.get("network_isolation_key", "")
    if nik.startswith("file://") and not url.startswith("file:") and url not in seen:
        seen.add(url)
        print(url)
PY
}

# XPath over an HTML file with libxml2's HTML parser (which lowercases
# attribute names: @viewbox).
xp() {
  xmllint --html --xpath "$2" "$1" 2>/dev/null
}

# Width and height of a PNG, from its IHDR chunk.
png_size() {
  od -An -tu1 -j16 -N8 "$1" | awk '{ print $1*16777216+$2*65536+$3*256+$4 "x" \
    $5*16777216+$6*65536+$7*256+$8 }'
}

has_console() {
  console "$1" >/dev/null
}

no_console() {
  if console "$1"; then
    return 1
  fi
}

has_requests() {
  [ -n "$(requests "$1")" ]
}

no_requests() {
  r=$(requests "$1")
  [ -z "$r" ] || {
    echo "$r"
    return 1
  }
}

equal() { # what, expected, got
  [ "$2" = "$3" ] || {
    echo "$1: expected '$2', got '$3'"
    return 1
  }
}

start=$(date +%s)

# {====== The detectors catch a bad page ======}
bad="$OUT/canary.html"
printf '%s\n' '<!DOCTYPE html><html><body><p>canary</p>' \
  '<script>null.f();</script><img src="https://example.invalid/x.png"></body></html>' >"$bad"
chrome "$bad" --dump-dom >"$bad.dom"
check "canary: an uncaught exception is seen" has_console "$bad"
check "canary: an image from the network is seen" has_requests "$bad"

# {====== The report ======}
# `rag eval` over a BEIR folder made from the SciFact sample: three chunk sizes.
page="$OUT/report.html"
mkdir -p "$OUT/beir/qrels"
run() {
  LUA_PATH="lua/?.lua;lua/?/init.lua;;" LUA_CPATH="$BUILD/?.so;;" "$LUA" "$@"
}
if ! { run spec/browser/beir.lua "$OUT/beir" &&
  run bin/rag index "$OUT/beir" --into "$OUT/index" >"$OUT/index.txt" &&
  run bin/rag eval "$OUT/index" --beir "$OUT/beir" --mode bm25 \
    --sweep chunk.size=100,200,400 --html "$page" >"$OUT/table.txt"; }; then
  echo "FAILED: making the report (rag index, rag eval)"
  echo "$passed passed, $((failed + 1)) failed"
  exit 1
fi
cat "$OUT/table.txt"
dom="$OUT/dom.html"
chrome "$page" --dump-dom >"$dom"
check "report: no console message" no_console "$page"
check "report: no network request" no_requests "$page"
check "report: the DOM was dumped" equal "svg count > 0" 1 \
  "$([ "$(xp "$dom" 'count(//svg)')" -gt 0 ] 2>/dev/null && echo 1)"

# The metrics, in order, and the settings, from the page as written.
metrics=$(xmllint --xpath '//table[@class="numbers"]/thead/tr/th[not(@class)][position()>1]/text()' \
  "$page" | tr '\n' ' ')
nsettings=$(xmllint --xpath 'count(//table[@class="numbers"]/tbody/tr)' "$page")
check "report: three settings" equal settings 3 "$nsettings"
check "report: one bar chart per metric ($metrics)" equal "bar charts" \
  "$(echo $metrics | wc -w)" "$(xp "$dom" 'count(//figure[@class="metric"]/svg[@viewbox])')"
n=0
for m in $metrics; do
  n=$((n + 1))
  svg="//svg[@id=\"bar-$n\"]"
  check "report: chart $n is titled $m" equal title "$m: mean per setting" \
    "$(xp "$dom" "string($svg/title)")"
  want=$(xmllint --xpath "$svg/rect/@data-value" "$page" 2>/dev/null | tr -d ' \n')
  got=$(xp "$dom" "$svg/rect/@data-value" | tr -d ' \n')
  check "report: chart $n has the page's bars ($(xp "$dom" "count($svg/rect)") rects)" \
    equal "bars of $m" "$want" "$got"
  check "report: chart $n shows a bar or 'unavailable' per setting" equal rows "$nsettings" \
    "$(xp "$dom" "count($svg/rect[@class=\"bar\"] | $svg/text[@class=\"na\"])")"
  check "report: chart $n has axes and value labels" equal axes 1 \
    "$([ "$(xp "$dom" "count($svg//line[@class=\"axisline\"])")" -ge 2 ] &&
      [ "$(xp "$dom" "count($svg/text[@class=\"value\"])")" = \
        "$(xp "$dom" "count($svg/rect)")" ] && echo 1)"
done
check "report: per-question box plots, one per metric" equal "distribution charts" \
  "$(echo $metrics | wc -w)" \
  "$(xp "$dom" 'count(//figure[@class="distribution"]/svg)')"
check "report: one recall@k line per setting" equal curves 3 \
  "$(xp "$dom" 'count(//svg[@id="curves"]/polyline[@class="curve"])')"
check "report: a legend" equal "legend items" 3 \
  "$(xp "$dom" 'count(//svg[@id="curves"]/g[@class="legend-item"])')"

chrome "$page" --screenshot="$OUT/report.png" >/dev/null
check "report: no console message while taking the screenshot" no_console "$page"
check "report: a 1000x2000 screenshot" equal size 1000x2000 "$(png_size "$OUT/report.png")"

echo "browser checks took $(($(date +%s) - start)) s; screenshot: $OUT/report.png"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
