#!/usr/bin/env bash
# bench/serve.sh DATA: `rag serve` under load (issue 25, acceptance A).
# Indexes DATA/scifact (a BEIR folder: 5,183 abstracts) with bin/rag into
# build/serve-bench/kb (incremental: a second run only checks), starts
# `rag serve` with 2 workers and no rate limit on a free loopback port, and
# runs wrk with a script that POSTs SciFact's 300 test queries in turn to
# /search as {"query": ..., "k": 10, "mode": "hybrid"} (top-10 hits with
# their texts and highlights):
#   1. 64 connections for 30 s: requests/s, socket errors, non-2xx;
#   2. 8 connections for 30 s with --latency: p50, p99;
#   3. for comparison, 64 connections with the same queries in BM25 mode;
#   4. for scale, the issue's reference: a bare nginx Lua handler returning
#      a BM25 top-10 for one repeated query, 64 and 8 connections, and the
#      share of its requests/s that rag serve reaches (the issue's targets
#      make 16%: 5,000 of the 31,000 it measured where it was written).
# Targets: >= 5,000 requests/s with none failed; p99 <= 10 ms. wrk runs on
# the same machine and shares its cores with nginx: the figures are what
# this machine gives with both. SECS=N shortens each run.
set -u
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
secs=${SECS:-30}
if [ ! -f "$data/scifact/corpus.jsonl" ]; then
  echo "skipped: $data/scifact/corpus.jsonl not found; pass the data folder," \
    "e.g. make bench-serve DATA=../shared/data"
  exit 0
fi
command -v wrk >/dev/null || { echo "bench/serve.sh: wrk is missing (apt-get install -y wrk)" >&2
  exit 1; }
out=build/serve-bench
mkdir -p "$out"
echo "indexing $data/scifact into $out/kb"
bin/rag index "$data/scifact" --into "$out/kb" || exit 1

# The wrk script: one request body per test query, pre-encoded.
python3 - "$data/scifact" >"$out/search.lua" <<'EOF'
import json, sys
d = sys.argv[1]
qids = []
with open(d + "/qrels/test.tsv") as f:
    for line in f:
        q = line.split("\t")[0]
        if q != "query-id" and q not in qids:
            qids.append(q)
texts = {}
with open(d + "/queries.jsonl") as f:
    for line in f:
        o = json.loads(line)
        texts[o["_id"]] = o["text"]
bodies = [json.dumps({"query": texts[q], "k": 10, "mode": "hybrid"}) for q in qids if q in texts]
print("-- SciFact's test queries as /search bodies (written by bench/serve.sh)")
print("local bodies = {")
for b in bodies:
    print("  %s," % json.dumps(b))
print("}")
print("""local headers = { ["Content-Type"] = "application/json" }
local n = 0
init = function()
  n = math.random(#bodies)
end
request = function()
  n = n % #bodies + 1
  return wrk.format("POST", "/search", headers, bodies[n])
end
-- no response callback: wrk would hand every body to Lua (it counts
-- non-2xx by itself)""")
print("-- %d queries" % len(bodies))
EOF

# A free loopback port; waiting until URL answers (10 s at most).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
wait_up() {
  for _ in $(seq 100); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
}

port=$(free_port)
url="http://127.0.0.1:$port"
bin/rag serve "$out/kb" --port "$port" --workers 2 --rate 0 >"$out/serve.out" \
  2>"$out/serve.err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
wait_up "$url/health"
head -n 1 "$out/serve.out"
curl -s "$url/health"; echo
nhits=$(curl -s -d '{"query":"Vitamin D deficiency and bone fractures","k":10,"mode":"hybrid"}' \
  "$url/search" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["hits"]))')
echo "one query: $nhits hits; $(tail -n 1 "$out/search.lua" | sed 's/^-- //') in the wrk script"

# How much cache this process gets, before and after (docs/performance.md).
probe() { lua5.4 -e 'print(require("bench.util").membw("--latency"))'; }
echo "at the start, $(probe)"

wrk -t2 -c64 -d2s -s "$out/search.lua" "$url" >/dev/null 2>&1 # warm up
echo
echo "== 64 connections, ${secs} s"
wrk -t2 -c64 -d"${secs}s" -s "$out/search.lua" "$url" | tee "$out/wrk64.out"
echo
echo "== 8 connections, ${secs} s, --latency"
wrk -t2 -c8 -d"${secs}s" --latency -s "$out/search.lua" "$url" | tee "$out/wrk8.out"

# For comparison: the same queries in BM25 mode (the default of an index
# with the offline hashing embedder): the server without the vector half.
sed 's/\\"hybrid\\"/\\"bm25\\"/' "$out/search.lua" >"$out/search_bm25.lua"
echo
echo "== 64 connections, ${secs} s, mode bm25"
wrk -t2 -c64 -d"${secs}s" -s "$out/search_bm25.lua" "$url" | tee "$out/wrk64bm25.out"

# For scale, in the same run: the issue's reference point, a bare nginx Lua
# handler that returns the BM25 top-10 (rag.bm25 loaded from the same index,
# hits as JSON ids and scores, no texts) for one repeated query, 2 workers,
# the same wrk runs. Issue 25 gives 31,000 requests/s (64 connections) and a
# p99 of 3.9 ms (8) for it on the machine the issue was written on; the
# ratio of rag serve's figure to this one is what moves least with the
# machine.
bare=$(mktemp -d)
bport=$(free_port)
bm25=$(ls "$out"/kb/bm25-*.rag | head -n 1)
mods=/usr/lib/nginx/modules
mkdir -p "$bare/logs"
{
  [ -f "$mods/ngx_http_lua_module.so" ] && printf 'load_module %s/ndk_http_module.so;\nload_module %s/ngx_http_lua_module.so;\n' "$mods" "$mods"
  cat <<CONF
worker_processes 2;
pid $bare/nginx.pid;
error_log $bare/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $bare/body;
  keepalive_requests 1000000;
  lua_package_path "$PWD/lua/?.lua;$PWD/lua/?/init.lua;;";
  lua_package_cpath "$PWD/build/jit/?.so;;";
  init_worker_by_lua_block { B = assert(require("rag").bm25.load("$bm25")) }
  server {
    listen 127.0.0.1:$bport backlog=4096;
    location / {
      content_by_lua_block {
        ngx.header["Content-Type"] = "application/json"
        ngx.print(require("rag").json.encode(B:search("Vitamin D deficiency and bone fractures", 10)))
      }
    }
  }
}
CONF
} >"$bare/nginx.conf"
nginx_bin=${RAG_NGINX:-$(command -v openresty || echo /usr/sbin/nginx)}
"$nginx_bin" -p "$bare/" -c "$bare/nginx.conf" -g 'daemon off;' 2>"$bare/stderr" &
bpid=$!
trap 'kill $pid $bpid 2>/dev/null; wait $pid $bpid 2>/dev/null; rm -rf "$bare"' EXIT
wait_up "http://127.0.0.1:$bport/"
wrk -t2 -c64 -d2s "http://127.0.0.1:$bport/" >/dev/null 2>&1 # warm up
echo
echo "== for scale: a bare BM25 handler, 64 connections, ${secs} s, then 8 with --latency"
wrk -t2 -c64 -d"${secs}s" "http://127.0.0.1:$bport/" | tee "$out/bare64.out"
wrk -t2 -c8 -d"${secs}s" --latency "http://127.0.0.1:$bport/" | tee "$out/bare8.out"

rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$out/wrk64.out")
sock=$(grep 'Socket errors' "$out/wrk64.out" | sed 's/^ *//')
non2xx=$(sed -n 's/^ *Non-2xx or 3xx responses: *//p' "$out/wrk64.out")
p50=$(awk '$1 == "50%" { print $2 }' "$out/wrk8.out")
p99=$(awk '$1 == "99%" { print $2 }' "$out/wrk8.out")
echo
rps_bm25=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$out/wrk64bm25.out")
echo "summary: 64 connections: ${rps} requests/s (target >= 5000), socket errors:" \
  "${sock:-none}, non-2xx: ${non2xx:-0}; 8 connections: p50 ${p50}, p99 ${p99} (target <= 10ms);" \
  "bm25 mode: ${rps_bm25} requests/s"
bare_rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$out/bare64.out")
bare_p99=$(awk '$1 == "99%" { print $2 }' "$out/bare8.out")
awk -v r="$rps" -v b="$bare_rps" -v p="$bare_p99" 'BEGIN { printf "for scale: the bare BM25 handler: %.0f requests/s (issue 25: 31,000 where it was written), p99 %s (3.9ms);" \
  " rag serve hybrid is %.1f%% of it (5,000 of 31,000 is 16.1%%)\n", b, p, 100 * r / b }'
echo "at the end, $(probe)"
errs=$(grep -cE '\[(alert|crit|emerg)\]|exited on signal|rag\.serve: ' "$out/serve.err")
echo "rag serve's error log: $errs alert/crash/handler lines"
