#!/usr/bin/env bash
# spec/serve/run.sh: `rag serve` end to end (issue 25, acceptance B and D).
# Indexes a few files of spec/fixtures with bin/rag into a temporary folder,
# starts `bin/rag serve` on free loopback ports (one server with a token and
# no rate limit, one with --rate 2), checks every endpoint against the
# rag command and the manifest (spec/serve/checks.py), 77 kinds of bad
# request, SSE framing, tokens, the rate limit, a reload under load with
# wrk while `rag index` changes a document, and that the server stops
# cleanly. Needs build/rag/core.so and build/jit/rag/core.so (make; make
# LUA_VERSION=jit), nginx-light, libnginx-mod-http-lua, wrk, curl, python3.
# The last line is "N passed, N failed". KEEP=1 keeps the temporary folder.
set -u
cd "$(dirname "$0")/../.."
repo=$(pwd)
rag="$repo/bin/rag"

for f in build/rag/core.so build/jit/rag/core.so; do
  if [ ! -f "$f" ]; then
    echo "run.sh: $f is missing; build it with: make && make LUA_VERSION=jit" >&2
    exit 1
  fi
done
for cmd in curl python3 wrk; do
  command -v "$cmd" >/dev/null || { echo "run.sh: $cmd is missing" >&2; exit 1; }
done

tmp=$(mktemp -d)
export TMPDIR=$tmp # rag serve's private prefix goes here: checked gone at the end
pids=()
passed=0
failed=0
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null
  done
  if [ "${KEEP:-0}" = 1 ]; then
    echo "kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

pass() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# serve NAME ARGS...: starts rag serve; sets $url and $serve_pid.
serve() {
  local name=$1 port
  shift
  port=$(free_port)
  "$rag" serve "$tmp/kb" --port "$port" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  serve_pid=$!
  pids+=("$serve_pid")
  url="http://127.0.0.1:$port"
  for _ in $(seq 100); do
    grep -q "^rag serve: $url/ " "$tmp/$name.out" 2>/dev/null &&
      curl -sf -o /dev/null "$url/health" && return 0
    kill -0 "$serve_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "run.sh: rag serve did not start:" >&2
  cat "$tmp/$name.out" "$tmp/$name.err" >&2
  exit 1
}

# The documents: Markdown with metadata, plain text, 40 SciFact abstracts.
mkdir -p "$tmp/docs"
cp spec/fixtures/load/notes.md spec/fixtures/load/tree/a.txt spec/fixtures/load/tree/b.md \
  spec/fixtures/texts/scifact40.jsonl "$tmp/docs/"
"$rag" index "$tmp/docs" --into "$tmp/kb" >"$tmp/index.out" 2>&1 ||
  { cat "$tmp/index.out" >&2; exit 1; }

# Errors before nginx starts: one line each, status 1.
out=$("$rag" serve "$tmp/none" 2>&1)
st=$?
if [ "$st" = 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] &&
    [[ $out == "rag serve: '$tmp/none': no index here"* ]]; then
  pass "serve_no_index $out"
else
  fail "serve_no_index (status $st) $out"
fi
out=$(RAG_NGINX=$tmp/no-nginx "$rag" serve "$tmp/kb" 2>&1)
st=$?
if [ "$st" = 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] &&
    [[ $out == *"nginx is missing"*"apt-get install -y nginx-light libnginx-mod-http-lua"* ]]
then
  pass "serve_no_nginx $out"
else
  fail "serve_no_nginx (status $st) $out"
fi
out=$(RAG_NGINX_MODULES=$tmp "$rag" serve "$tmp/kb" 2>&1)
st=$?
if [ "$st" = 1 ] && [[ $out == *"Lua module is missing"*"apt-get install"* ]]; then
  pass "serve_no_module $out"
else
  fail "serve_no_module (status $st) $out"
fi

serve main --workers 2 --token s3cret --rate 0
main_url=$url
main_pid=$serve_pid
line=$(head -n 1 "$tmp/main.out")
if [ "$line" = "rag serve: $main_url/ (2 workers, index $tmp/kb)" ]; then
  pass "serve_line $line"
else
  fail "serve_line $line"
fi
# The workers' collector pause (rag.serve.init's gc_pause) is in the
# configuration rag serve wrote into its private prefix.
conf=$(ls "$tmp"/rag-serve.*/nginx.conf 2>/dev/null | head -n 1)
if [ -n "$conf" ] && grep -q 'gc_pause = 600' "$conf"; then
  pass "serve_gc_pause $conf"
else
  fail "serve_gc_pause ${conf:-no nginx.conf under $tmp}"
fi
port_taken=${main_url##*:}
out=$("$rag" serve "$tmp/kb" --port "$port_taken" 2>&1)
st=$?
if [ "$st" = 1 ] && [[ $out == "rag serve: nginx: "*"Address already in use"* ]]; then
  pass "serve_port_taken $out"
else
  fail "serve_port_taken (status $st) $out"
fi

# Every endpoint, the bad requests, tokens, SSE, metrics.
python3 spec/serve/checks.py "$main_url" "$tmp/kb" s3cret "$rag" >"$tmp/checks.out" 2>&1
grep -E '^(ok|FAIL) ' "$tmp/checks.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/checks.out")))
failed=$((failed + $(grep -c '^FAIL ' "$tmp/checks.out")))
if ! tail -n 1 "$tmp/checks.out" | grep -q ' passed, '; then
  fail "checks.py did not finish: $(tail -n 5 "$tmp/checks.out")"
fi

# The rate limit: --rate 2 lets a burst of 2 through, then 429 with
# Retry-After and the JSON error; /health is not limited.
serve limited --workers 1 --rate 2
limited_pid=$serve_pid
limited_url=$url
codes=""
for _ in 1 2 3 4; do
  codes="$codes $(curl -s -o "$tmp/rl.body" -D "$tmp/rl.head" -w '%{http_code}' \
    -d '{"query":"tides"}' "$url/search")"
done
health=$(curl -s -o /dev/null -w '%{http_code}' "$url/health")
if [ "$codes" = " 200 200 429 429" ] && grep -qi '^retry-after: [1-9]' "$tmp/rl.head" &&
    grep -q '"code":"too_many_requests"' "$tmp/rl.body" && [ "$health" = 200 ]; then
  pass "rate_limit codes$codes, $(grep -i '^retry-after' "$tmp/rl.head" | tr -d '\r'), /health $health"
else
  fail "rate_limit codes$codes, /health $health: $(cat "$tmp/rl.head" "$tmp/rl.body")"
fi
sleep 1.1
code=$(curl -s -o /dev/null -w '%{http_code}' -d '{"query":"tides"}' "$url/search")
if [ "$code" = 200 ]; then pass "rate_limit_refills 200 after 1.1 s"
else fail "rate_limit_refills $code"; fi

# An LLM behind HTTP (spec/fixtures/llmd.py, OpenAI's wire format): the
# stream arrives as several token events; a slow LLM past --timeout is 504;
# a failing one 502; an /ask in flight while the index changes finishes.
fifo="$tmp/llmd.fifo"
mkfifo "$fifo"
python3 spec/fixtures/llmd.py --lifetime 600 >"$fifo" 2>>"$tmp/llmd.err" &
pids+=($!)
read -r llm_port _ <"$fifo"
rm -f "$fifo"
[ -n "$llm_port" ] || { echo "run.sh: llmd.py did not start: $(cat "$tmp/llmd.err")" >&2; exit 1; }
export OPENAI_BASE_URL="http://127.0.0.1:$llm_port/v1" OPENAI_API_KEY=sk-test
Q='{"question":"When are spring tides strongest?"}'
serve llm --workers 1 --rate 0 --llm openai --model rag-stream
curl -sN -H 'Accept: text/event-stream' -d "$Q" "$url/ask" >"$tmp/llm.sse"
ntok=$(grep -c '^event: token$' "$tmp/llm.sse")
sse_ok=$(python3 -c '
import json, sys
ev = [b.split("\n") for b in open(sys.argv[1]).read().split("\n\n") if b]
toks = "".join(json.loads(d[6:])["text"] for e, d in ev if e == "event: token")
final = [json.loads(d[6:]) for e, d in ev if e == "event: citations"][0]
print(toks == final["text"] and len(final["citations"]) >= 1 and final["grounded"]
      and [e for e, _ in ev][-2:] == ["event: citations", "event: done"])' "$tmp/llm.sse")
if [ "$ntok" -ge 3 ] && [ "$sse_ok" = True ]; then
  pass "ask_llm_stream $ntok token events; their text is the final answer, with citations"
else
  fail "ask_llm_stream $ntok token events, check $sse_ok: $(head -c 600 "$tmp/llm.sse")"
fi
kill -TERM "$serve_pid"
serve slow --workers 1 --rate 0 --llm openai --model slow3:rag-slow --timeout 1
for accept in application/json text/event-stream; do
  out=$(curl -s -m 10 -H "Accept: $accept" -w ' %{http_code} %{time_total}' -d "$Q" "$url/ask")
  if [[ $out == '{"error":{"code":"timeout",'*'} 504 1.'* ]]; then
    pass "ask_timeout ($accept) $out"
  else
    fail "ask_timeout ($accept) $out"
  fi
done
kill -TERM "$serve_pid"
serve failing --workers 1 --rate 0 --llm openai --model e500:rag-fail
out=$(curl -s -m 20 -w ' %{http_code}' -d "$Q" "$url/ask")
if [[ $out == '{"error":{"code":"llm",'*'} 502' ]] && [[ $out != *sk-test* ]]; then
  pass "ask_llm_fails $out"
else
  fail "ask_llm_fails $out"
fi
kill -TERM "$serve_pid"
serve inflight --workers 1 --rate 0 --token s3cret --llm openai --model slow1.5:rag-inflight
gen_a=$(curl -s "$url/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["generation"])')
curl -s -m 10 -H 'Authorization: Bearer s3cret' -w ' %{http_code}' -d "$Q" "$url/ask" \
  >"$tmp/inflight.out" &
ask_pid=$!
sleep 0.5
printf 'Changed while an answer was in flight: narwhals.\n' >>"$tmp/docs/b.md"
"$rag" index "$tmp/docs" --into "$tmp/kb" >"$tmp/index-inflight.out" 2>&1
rel=$(curl -s -X POST -H 'Authorization: Bearer s3cret' "$url/admin/reload")
wait "$ask_pid"
out=$(cat "$tmp/inflight.out")
if [[ $out == *'"grounded":true'*' 200' ]] && [[ $rel == *"\"previous\":$gen_a,"* ]] &&
    [[ $rel != *"\"generation\":$gen_a,"* ]] &&
    [[ $(curl -s -d '{"query":"narwhals","k":1}' "$url/search") == *narwhals* ]]; then
  pass "ask_in_flight_during_reload the answer came (200) after the switch: $rel"
else
  fail "ask_in_flight_during_reload $out / $rel / generation before: $gen_a"
fi
kill -TERM "$serve_pid"
unset OPENAI_BASE_URL OPENAI_API_KEY

# Reload under load (acceptance B): wrk on /search while rag index re-runs
# with one document changed; no socket error, no non-2xx; then a search
# sees the change, served from the new generation.
gen0=$(curl -s "$main_url/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["generation"])')
wrk -t2 -c16 -d6s -s spec/serve/wrk_search.lua "$main_url" >"$tmp/wrk.out" 2>&1 &
wrk_pid=$!
sleep 1.5
printf 'Zanzibar quokkas reindexed while serving.\n' >>"$tmp/docs/a.txt"
"$rag" index "$tmp/docs" --into "$tmp/kb" >"$tmp/index2.out" 2>&1
sleep 1.5
printf 'Second change: wombats.\n' >>"$tmp/docs/b.md"
"$rag" index "$tmp/docs" --into "$tmp/kb" >"$tmp/index3.out" 2>&1
wait "$wrk_pid"
reqs=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$tmp/wrk.out")
errs=$(grep -E 'Socket errors|Non-2xx' "$tmp/wrk.out")
if [ -n "$reqs" ] && [ "$reqs" -gt 100 ] && [ -z "$errs" ]; then
  pass "reload_under_load $reqs requests while two generations appeared: no socket error, no non-2xx ($(grep Requests/sec "$tmp/wrk.out" | tr -s ' '))"
else
  fail "reload_under_load: $(cat "$tmp/wrk.out")"
fi
gen_now=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' \
  "$tmp/kb/manifest.json")
sleep 0.6
ok=1
detail=""
for _ in 1 2 3 4; do # both workers
  hit=$(curl -s -d '{"query":"zanzibar quokkas","k":1}' "$main_url/search")
  got=$(printf '%s' "$hit" | python3 -c 'import json,sys; r=json.load(sys.stdin)
h=r["hits"][0] if r["hits"] else {}
print(r["generation"], h.get("doc_id","-"), "quokkas" in h.get("text",""))')
  detail="$detail [$got]"
  [ "$got" = "$gen_now $tmp/docs/a.txt True" ] || ok=0
done
if [ "$ok" = 1 ] && [ "$gen_now" -gt "$gen0" ]; then
  pass "reload_sees_change generation $gen0 -> $gen_now:$detail"
else
  fail "reload_sees_change generation $gen0 -> $gen_now:$detail"
fi

# POST /admin/reload switches at once (no 0.5 s wait).
printf 'Third change: axolotls.\n' >>"$tmp/docs/a.txt"
"$rag" index "$tmp/docs" --into "$tmp/kb" >"$tmp/index4.out" 2>&1
gen_new=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' \
  "$tmp/kb/manifest.json")
rel=$(curl -s -X POST -H "Authorization: Bearer s3cret" "$main_url/admin/reload")
hit=$(curl -s -d '{"query":"axolotls","k":1}' "$main_url/search")
if [[ $rel == *"\"generation\":$gen_new"* ]] && [[ $hit == *axolotls* ]]; then
  pass "admin_reload $rel"
else
  fail "admin_reload $rel / $hit"
fi

# SIGINT sent to the process alone (as a supervisor sends it; Ctrl-C in a
# terminal goes to the whole group) stops one server, SIGTERM the other:
# nginx gone and the private prefix removed; the log has no crashed
# worker, no alert and no Lua error.
kill -INT "$main_pid"
kill -TERM "$limited_pid"
stopped=0
for _ in $(seq 100); do
  if ! curl -s -o /dev/null "$main_url/health" && ! curl -s -o /dev/null "$limited_url/health" &&
      [ -z "$(ls -d "$tmp"/rag-serve.* 2>/dev/null)" ]; then
    stopped=1
    break
  fi
  sleep 0.1
done
if [ "$stopped" = 1 ]; then
  pass "signals_stop INT and TERM to the rag process: nginx gone, prefix removed"
else
  fail "signals_stop: $(ls -d "$tmp"/rag-serve.* 2>/dev/null) $(pgrep -a nginx | head -3)"
fi
crash='\[(alert|crit|emerg)\]|exited on signal|runtime error|entry thread aborted'
bad=$(grep -hE "$crash|\[error\].*rag\.serve: " "$tmp"/*.err | head -5)
if [ -z "$bad" ]; then
  pass "error_log_clean no crashed worker, no alert, no Lua error"
else
  fail "error_log_clean: $bad"
fi

if [ "$failed" -gt 0 ]; then
  echo "--- rag serve's standard error (last 20 lines)"
  tail -n 20 "$tmp/main.err"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
