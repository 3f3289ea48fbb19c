#!/usr/bin/env bash
# bench/soak_serve.sh: `rag serve` (2 workers) under wrk for SECS seconds
# (default 120) while `rag index` re-runs every 3 s with a document changed,
# so that the workers switch to a new generation about 40 times under load.
# Checks: no socket error and no non-2xx response; the last generation is
# the one served at the end, with its change; the nginx workers' RSS at the
# end within 2% of their RSS at the 10% mark. Prints the samples and exits
# 1 when a check fails. Needs what `make test-serve` needs (nginx-light,
# libnginx-mod-http-lua, wrk, curl, python3, build/jit/rag/core.so).
# Usage: bash bench/soak_serve.sh [SECS]   (make soak-serve)
set -u
cd "$(dirname "$0")/.."
rag="$(pwd)/bin/rag"
secs=${1:-120}
tmp=$(mktemp -d)
export TMPDIR=$tmp
serve_pid=
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/docs"
cp spec/fixtures/load/notes.md spec/fixtures/load/tree/a.txt spec/fixtures/load/tree/b.md \
  spec/fixtures/texts/scifact40.jsonl "$tmp/docs/"
"$rag" index "$tmp/docs" --into "$tmp/kb" >"$tmp/index.out" 2>&1 ||
  { cat "$tmp/index.out"; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
"$rag" serve "$tmp/kb" --port "$port" --workers 2 --rate 0 >"$tmp/serve.out" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do
  curl -sf -o /dev/null "$url/health" && break
  sleep 0.1
done
curl -sf -o /dev/null "$url/health" || { echo "soak_serve: rag serve did not start"; cat "$tmp/serve.out"; exit 1; }

# the RSS of the nginx workers (children of the master rag serve runs), KB
workers_rss() {
  local master c
  master=$(for c in $serve_pid $(pgrep -P "$serve_pid"); do pgrep -x nginx -P "$c"; done | head -1)
  ps -o rss= --ppid "$master" | awk '{ s += $1 } END { print s }'
}

wrk -t2 -c16 -d"${secs}s" -s spec/serve/wrk_search.lua "$url" >"$tmp/wrk.out" 2>&1 &
wrk_pid=$!
start=$(date +%s)
tenth=$((secs / 10))
samples=()
reloads=0
next_sample=$((start + tenth))
next_reload=$((start + 3))
while kill -0 "$wrk_pid" 2>/dev/null; do
  now=$(date +%s)
  if [ "$now" -ge "$next_sample" ] && [ "${#samples[@]}" -lt 10 ]; then
    samples+=("$(workers_rss)")
    echo "  $(( ${#samples[@]} * 10 ))%  workers' RSS $(( ${samples[-1]} / 1024 )) MB, $reloads reloads"
    next_sample=$((next_sample + tenth))
  fi
  if [ "$now" -ge "$next_reload" ] && [ "$now" -lt $((start + secs - 2)) ]; then
    next_reload=$((now + 3))
    reloads=$((reloads + 1))
    printf 'Change %d: zebra%d.\n' "$reloads" "$reloads" >>"$tmp/docs/a.txt"
    "$rag" index "$tmp/docs" --into "$tmp/kb" >"$tmp/index.out" 2>&1 ||
      { echo "soak_serve: rag index failed"; cat "$tmp/index.out"; }
  fi
  sleep 1
done
wait "$wrk_pid"
if [ "${#samples[@]}" -lt 10 ]; then # the last tenth ends with wrk
  samples+=("$(workers_rss)")
  echo "  100%  workers' RSS $(( ${samples[-1]} / 1024 )) MB, $reloads reloads"
fi
status=0
reqs=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$tmp/wrk.out")
errs=$(grep -E 'Socket errors|Non-2xx' "$tmp/wrk.out")
echo "soak_serve: $reqs requests in ${secs} s ($(grep Requests/sec "$tmp/wrk.out" | tr -s ' ')),"\
  "$reloads reloads"
if [ -z "$reqs" ] || [ -n "$errs" ]; then
  echo "soak_serve: FAILED: $(cat "$tmp/wrk.out")"
  status=1
fi
sleep 1
hit=$(curl -s -d "{\"query\":\"zebra$reloads\",\"k\":1}" "$url/search")
if ! printf '%s' "$hit" | grep -q "zebra$reloads"; then
  echo "soak_serve: FAILED: the last change is not served: $hit"
  status=1
fi
if [ "${#samples[@]}" -ge 10 ]; then
  python3 - "${samples[0]}" "${samples[9]}" <<'EOF' || status=1
import sys
a, b = int(sys.argv[1]), int(sys.argv[2])
g = (b - a) / a
print("soak_serve: workers' RSS %+.2f%% between the 10%% and 100%% marks (limit 2%%)" % (100 * g))
sys.exit(1 if g > 0.02 else 0)
EOF
else
  echo "soak_serve: FAILED: only ${#samples[@]} RSS samples"
  status=1
fi
[ "$status" = 0 ] && echo "soak_serve: ok"
exit $status
