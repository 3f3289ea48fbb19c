#!/usr/bin/env bash
# spec/openresty/run.sh: rag.transport.ngx inside a real nginx (Debian's
# nginx-light + libnginx-mod-http-lua). Starts the loopback test servers
# (plain HTTP and four HTTPS ones with a throwaway CA), starts nginx on a free
# 127.0.0.1 port under a private temporary prefix, runs the checks over HTTP
# with curl and stops everything on exit. Needs build/jit/rag/core.so
# (make LUA_VERSION=jit); builds nothing. The last line is "N passed, N failed".
# KEEP=1 keeps the temporary directory (nginx.conf, error.log) for a look.
set -u
cd "$(dirname "$0")/../.."
repo=$(pwd)
nginx=${NGINX:-/usr/sbin/nginx}
modules=${NGINX_MODULES:-/usr/lib/nginx/modules}

if [ ! -f build/jit/rag/core.so ]; then
  echo "run.sh: build/jit/rag/core.so is missing; build it with: make LUA_VERSION=jit" >&2
  exit 1
fi
for f in "$nginx" "$modules/ndk_http_module.so" "$modules/ngx_http_lua_module.so"; do
  if [ ! -e "$f" ]; then
    echo "run.sh: $f is missing; as root: apt-get install -y nginx-light libnginx-mod-http-lua" >&2
    exit 1
  fi
done
for cmd in curl openssl python3; do
  command -v "$cmd" >/dev/null || { echo "run.sh: $cmd is missing" >&2; exit 1; }
done

tmp=$(mktemp -d)
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

# start_httpd NAME [--tls CERT KEY]: sets $port to where it listens.
# SCRIPT=llmd.py start_httpd NAME starts the model server instead.
start_httpd() {
  local name=$1 fifo="$tmp/$1.fifo" spid
  shift
  mkfifo "$fifo"
  python3 "spec/fixtures/${SCRIPT:-httpd.py}" --lifetime 600 "$@" >"$fifo" \
    2>>"$tmp/logs/httpd.err" &
  pids+=($!)
  port=
  read -r port spid <"$fifo"
  rm -f "$fifo"
  if [ -z "$port" ]; then
    echo "run.sh: the $name test server did not start:" >&2
    cat "$tmp/logs/httpd.err" >&2
    exit 1
  fi
}

# A root CA; a leaf for 127.0.0.1 signed by an intermediate CA (served with
# it); a leaf for another name; a leaf two intermediates deep (long chain).
make_certs() {
  local d=$tmp/tls
  mkdir -p "$d"
  (
    cd "$d" || exit 1
    set -e
    exec 2>openssl.err
    key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }
    ca_ext() { printf 'basicConstraints=critical,CA:TRUE,pathlen:%s\n%s\n' "$1" \
      'keyUsage=critical,keyCertSign,cRLSign'; }
    leaf_ext() { printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n%s\n' \
      "subjectAltName=$1"; }
    cert() { # name subject issuer extensions-file
      key "$1"
      openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
      openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -days 2 \
        -set_serial "$RANDOM$RANDOM" -extfile "$4" -out "$1.pem"
    }
    key ca
    openssl req -x509 -new -key ca.key -subj "/CN=rag test root" -days 2 \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem
    ca_ext 1 >int.ext
    ca_ext 0 >int2.ext
    leaf_ext "DNS:127.0.0.1,IP:127.0.0.1,DNS:localhost" >leaf.ext
    leaf_ext "DNS:other.example" >bad.ext
    cert int "rag test intermediate" ca int.ext
    cert leaf 127.0.0.1 int leaf.ext
    cert bad other.example int bad.ext
    cert int2 "rag test intermediate 2" int int2.ext
    cert long 127.0.0.1 int2 leaf.ext
    cat leaf.pem int.pem >chain.pem
    cat bad.pem int.pem >badchain.pem
    cat long.pem int2.pem int.pem >longchain.pem
  ) || { echo "run.sh: openssl could not make the test certificates:" >&2
         cat "$tmp/tls/openssl.err" >&2; exit 1; }
}

mkdir -p "$tmp/conf" "$tmp/logs" "$tmp/tmp"
make_certs
start_httpd http
export RAG_HTTPD="http://127.0.0.1:$port"
SCRIPT=llmd.py start_httpd llm
export RAG_LLMD="http://127.0.0.1:$port"
start_httpd https --tls "$tmp/tls/chain.pem" "$tmp/tls/leaf.key"
export RAG_HTTPS="https://127.0.0.1:$port"
start_httpd https-badname --tls "$tmp/tls/badchain.pem" "$tmp/tls/bad.key"
export RAG_HTTPS_BADNAME="https://127.0.0.1:$port"
start_httpd https-long --tls "$tmp/tls/longchain.pem" "$tmp/tls/long.key"
export RAG_HTTPS_LONG="https://127.0.0.1:$port"
start_httpd https-fresh --tls "$tmp/tls/longchain.pem" "$tmp/tls/long.key"
export RAG_HTTPS_FRESH="https://127.0.0.1:$port"
RAG_FREE_PORT=$(free_port)
export RAG_FREE_PORT
ngx_port=$(free_port)
ngx="http://127.0.0.1:$ngx_port"
export RAG_NGX=$ngx

sed -e "s|@PREFIX@|$tmp|g" -e "s|@PORT@|$ngx_port|g" -e "s|@REPO@|$repo|g" \
  -e "s|@MODULES@|$modules|g" spec/openresty/nginx.conf.in >"$tmp/conf/nginx.conf"
"$nginx" -p "$tmp/" -c "$tmp/conf/nginx.conf" -e "$tmp/logs/error.log" \
  >"$tmp/logs/nginx.out" 2>&1 &
pids+=($!)
nginx_pid=$!
for _ in $(seq 100); do
  curl -sf -o /dev/null "$ngx/ping" && break
  if ! kill -0 "$nginx_pid" 2>/dev/null; then
    echo "run.sh: nginx did not start:" >&2
    cat "$tmp/logs/nginx.out" "$tmp/logs/error.log" >&2 2>/dev/null
    exit 1
  fi
  sleep 0.1
done
echo "nginx $("$nginx" -v 2>&1 | sed 's|.*/||') on $ngx, httpd on $RAG_HTTPD, prefix $tmp"

# The phases without cosockets record the transport's error for "phases".
curl -s -o /dev/null "$ngx/phase/log"
curl -s -o /dev/null "$ngx/phase/log-raw"
curl -s -o /dev/null "$ngx/phase/filters"
curl -s -o /dev/null "$ngx/phase/set"

# run_check LOCATION NAME: one check in nginx, timed by curl.
run_check() {
  local out
  out=$(curl -s -m 30 -w '\t%{time_total}' "$ngx/$1/$2")
  local line=${out%$'\t'*} secs=${out##*$'\t'}
  line=${line%$'\n'}
  case $line in
    ok\ *) pass "$2 (${secs}s) ${line#ok }" ;;
    *) fail "$2 (${secs}s) ${line#FAIL }" ;;
  esac
}

for name in $(curl -s "$ngx/t/list"); do
  case $name in
    tls_untrusted) run_check notrust "$name" ;;
    tls_depth1) run_check depth1 "$name" ;;
    *) run_check t "$name" ;;
  esac
done

# The unprotected call in log_by_lua: the error as nginx logs it.
logged=$(grep -c "cosockets are not available in the 'log' phase of nginx" "$tmp/logs/error.log")
if [ "$logged" -ge 1 ]; then
  pass "log_phase_error_log $(grep -m1 "cosockets are not available in the 'log'" \
    "$tmp/logs/error.log" | sed 's/^.*\[error\] [0-9#]*: //' | cut -c1-220)"
else
  fail "log_phase_error_log: no phase error in error.log"
fi

# Acceptance C: 5 light threads, each an upstream call of 0.3 s, finish in
# under 0.6 s, and /ping is answered in under 0.1 s while they are in flight
# (its time stamp lies between their start and end).
concurrency() { # n secs limit
  local out="$tmp/concurrent.out" ping_t cpid
  curl -s -m 10 "$ngx/concurrent?n=$1&s=$2" >"$out" &
  cpid=$!
  sleep 0.1
  ping_t=$(curl -s -o /dev/null -m 5 -w '%{time_total}' "$ngx/ping")
  wait "$cpid"
  val() { awk -F= -v k="$1" '$1 == k { print $2 }' "$out"; }
  local total ok each inflight
  total=$(val total)
  ok=$(val ok)
  each=$(val each)
  inflight=$(awk -F= '{ v[$1] = $2 } END { if (v["ping_at"] > v["start"] &&
    v["ping_at"] < v["end"]) printf "%.3f", v["ping_at"] - v["start"]; else print "no" }' "$out")
  local detail="$1 calls of ${2}s: total ${total}s (each done at $each s);"
  detail="$detail /ping took ${ping_t}s, served ${inflight}s after the calls began"
  if [ "$ok" = "$1" ] && [ "$inflight" != no ] && awk -v t="$total" -v p="$ping_t" \
      -v l="$3" 'BEGIN { exit !(t < l && p < 0.1) }'; then
    pass "concurrency $detail"
  else
    fail "concurrency $detail; ok=$ok errors: $(val errors)"
  fi
}
concurrency 5 0.3 0.6

# Nothing worse than [error] in error.log, and no Lua error but the expected one.
bad=$(grep -E '\[(alert|crit|emerg)\]' "$tmp/logs/error.log" | head -5)
lua_errs=$(grep -E 'runtime error|entry thread aborted' "$tmp/logs/error.log" |
  grep -v "cosockets are not available in the 'log' phase" | head -5)
if [ -z "$bad$lua_errs" ]; then
  pass "error_log_clean $(grep -c '\[error\]' "$tmp/logs/error.log") [error] lines" \
    "(cosocket failures the checks cause), no alert/crit/emerg, no other Lua error"
else
  fail "error_log_clean: $bad $lua_errs"
fi

if [ "$failed" -gt 0 ]; then
  echo "--- error.log (last 30 lines)"
  tail -n 30 "$tmp/logs/error.log"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
