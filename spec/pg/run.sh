#!/usr/bin/env bash
# spec/pg/run.sh: the PostgreSQL specs (spec/pg/*_spec.lua) against a private
# PostgreSQL 15 cluster with pgvector. Installs the Debian packages in
# PG_PKGS (as root), builds pgvector from its Debian source package once
# (cached in build/pgvector), starts initdb + pg_ctl on a free loopback port
# under a temporary folder (TLS on, a throwaway CA), creates a role per login
# method, runs the specs under Lua 5.4 and LuaJIT and the cosocket checks in
# nginx (spec/pg/ngx_checks.lua), and stops the cluster on exit.
# Without PostgreSQL it says why in one line. The last line is
# "N passed, N failed". KEEP=1 keeps the temporary folder (log, data).
# `run.sh -- CMD ARGS...` runs CMD against the cluster instead of the specs
# (benchmarks, a look with psql "$RAG_PG_DSN").
set -u
cd "$(dirname "$0")/../.."
repo=$(pwd)
PG_VERSION=15
PG_PKGS=${PG_PKGS:-postgresql-$PG_VERSION postgresql-server-dev-$PG_VERSION dpkg-dev lua-socket lua-sec python3 openssl}
pgbin=/usr/lib/postgresql/$PG_VERSION/bin
lua=${LUA:-lua5.4}
build=${BUILD:-build}
# busted prints "N passed, N failed" per interpreter: only the total is printed so.

skip() {
  echo "skipped: the PostgreSQL specs: $*"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
}
# PostgreSQL is there but the cluster cannot be set up: a failure.
broken() {
  echo "run.sh: $*" >&2
  echo "0 passed, 1 failed"
  exit 1
}

sh .ci/deps $PG_PKGS >&2 || skip "the packages could not be installed ($PG_PKGS)"
for f in "$pgbin/initdb" "$pgbin/pg_ctl" "$pgbin/postgres" "$pgbin/psql" "$pgbin/pg_config"; do
  [ -x "$f" ] || skip "$f is missing (Debian package postgresql-$PG_VERSION)"
done
[ -f "$build/rag/core.so" ] || { echo "run.sh: $build/rag/core.so is missing; run make" >&2; exit 1; }

# {====== pgvector from the next Debian release's source package ======}
# A private apt configuration (its own sources file, lists and cache) so the
# system's apt state is untouched; the unpacked, built tree is kept in
# build/pgvector, and `make install` runs only when the installed files
# differ from the built ones.
pgvector() {
  local dir=$repo/build/pgvector src sharedir pkglibdir
  local apt=(apt-get -q -o Dir::Etc::sourcelist="$dir/sources.list"
    -o Dir::Etc::sourceparts=/dev/null -o Dir::State::Lists="$dir/lists"
    -o Dir::Cache="$dir/cache" -o APT::Sandbox::User=root)
  sharedir=$("$pgbin/pg_config" --sharedir)
  pkglibdir=$("$pgbin/pg_config" --pkglibdir)
  src=$(find "$dir" -maxdepth 1 -type d -name 'pgvector-*' 2>/dev/null | sort | tail -n 1)
  if [ -z "$src" ] || [ ! -f "$src/vector.so" ]; then
    echo "building pgvector from Debian's source package (trixie) in $dir" >&2
    rm -rf "$dir" && mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" || return 1
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
      "http://deb.debian.org/debian trixie main" >"$dir/sources.list"
    (cd "$dir" && "${apt[@]}" update && "${apt[@]}" source pgvector) \
      >"$dir/apt.log" 2>&1 || { tail -n 5 "$dir/apt.log" >&2; return 1; }
    src=$(find "$dir" -maxdepth 1 -type d -name 'pgvector-*' | sort | tail -n 1)
    [ -n "$src" ] || return 1
    make -C "$src" -j2 PG_CONFIG="$pgbin/pg_config" >"$dir/build.log" 2>&1 ||
      { tail -n 5 "$dir/build.log" >&2; return 1; }
  fi
  if ! cmp -s "$src/vector.so" "$pkglibdir/vector.so" ||
    ! cmp -s "$src/vector.control" "$sharedir/extension/vector.control"; then
    [ "$(id -u)" = 0 ] || { echo "pgvector is built but not installed; run as root" >&2; return 1; }
    make -C "$src" install PG_CONFIG="$pgbin/pg_config" >"$dir/install.log" 2>&1 ||
      { tail -n 5 "$dir/install.log" >&2; return 1; }
  fi
}
pgvector || skip "pgvector could not be built from Debian's source package (see build/pgvector/*.log)"

# {====== A private cluster ======}
tmp=$(mktemp -d)
chmod 755 "$tmp"
pg_pid=
ngx_pid=
cleanup() {
  if [ -n "$ngx_pid" ]; then
    kill "$ngx_pid" 2>/dev/null
    wait "$ngx_pid" 2>/dev/null
  fi
  if [ -n "$pg_pid" ]; then
    as_pg "$pgbin/pg_ctl" -D "$tmp/data" -m immediate -w stop >/dev/null 2>&1
  fi
  if [ "${KEEP:-0}" = 1 ]; then
    echo "kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# initdb refuses to run as root: as root the cluster belongs to `postgres`.
if [ "$(id -u)" = 0 ]; then
  as_pg() { runuser -u postgres -- "$@"; }
else
  as_pg() { "$@"; }
fi
mkdir -p "$tmp/data" "$tmp/sock"
[ "$(id -u)" = 0 ] && chown postgres: "$tmp/data" "$tmp/sock"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
secret() { od -An -N12 -tx1 /dev/urandom | tr -d ' \n'; }

as_pg "$pgbin/initdb" -D "$tmp/data" -U postgres -E UTF8 --locale=C \
  --auth-local=trust --auth-host=reject >"$tmp/initdb.log" 2>&1 ||
  { cat "$tmp/initdb.log" >&2; broken "initdb failed"; }
# The superuser only on the private socket; each test role by its method;
# rag_tls only over TLS.
cat >"$tmp/pg_hba.conf" <<'EOF'
local all postgres trust
host all rag 127.0.0.0/8 scram-sha-256
host all rag_md5 127.0.0.0/8 md5
host all rag_clear 127.0.0.0/8 password
hostssl all rag_tls 127.0.0.0/8 scram-sha-256
EOF
as_pg cp "$tmp/pg_hba.conf" "$tmp/data/pg_hba.conf"

# TLS: a throwaway CA and a server certificate for 127.0.0.1 and localhost;
# a second CA that signed nothing, for the verification failure.
mkdir -p "$tmp/tls"
(
  cd "$tmp/tls" || exit 1
  set -e
  exec 2>openssl.err
  key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }
  key ca
  key other
  key server
  openssl req -x509 -new -key ca.key -subj "/CN=rag test CA" -days 2 -out ca.pem
  openssl req -x509 -new -key other.key -subj "/CN=rag other CA" -days 2 -out other.pem
  openssl req -new -key server.key -subj "/CN=127.0.0.1" -out server.csr
  # nginx checks names with X509_check_host, which reads DNS names only: the
  # address is listed as one too.
  printf 'subjectAltName=IP:127.0.0.1,DNS:127.0.0.1,DNS:localhost\n' >server.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 1 -days 2 \
    -extfile server.ext -out server.pem
) || { cat "$tmp/tls/openssl.err" >&2; broken "openssl could not make the test certificates"; }
cp "$tmp/tls/server.pem" "$tmp/tls/server.key" "$tmp/data/"
chmod 600 "$tmp/data/server.key"
[ "$(id -u)" = 0 ] && chown postgres: "$tmp/data/server.pem" "$tmp/data/server.key"

port=$(free_port)
as_pg "$pgbin/pg_ctl" -D "$tmp/data" -l "$tmp/data/server.log" -w -t 30 \
  -o "-c listen_addresses=127.0.0.1,127.0.0.2 -p $port -k $tmp/sock -c fsync=off -c ssl=on \
-c ssl_cert_file=server.pem -c ssl_key_file=server.key" start \
  >"$tmp/pg_ctl.log" 2>&1 || { cat "$tmp/pg_ctl.log" "$tmp/data/server.log" >&2
  broken "the cluster did not start"; }
pg_pid=$(head -n 1 "$tmp/data/postmaster.pid")

pw_scram=$(secret)
pw_md5=$(secret)
pw_clear=$(secret)
pw_tls=$(secret)
psql=("$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -h "$tmp/sock" -p "$port" -U postgres)
as_pg "${psql[@]}" -d postgres >"$tmp/setup.log" 2>&1 <<EOF || { cat "$tmp/setup.log" >&2; broken "the roles could not be created"; }
SET password_encryption = 'scram-sha-256';
CREATE ROLE rag LOGIN PASSWORD '$pw_scram';
CREATE ROLE rag_clear LOGIN PASSWORD '$pw_clear';
CREATE ROLE rag_tls LOGIN PASSWORD '$pw_tls';
SET password_encryption = 'md5';
CREATE ROLE rag_md5 LOGIN PASSWORD '$pw_md5';
CREATE DATABASE rag OWNER rag;
\\c rag
CREATE EXTENSION vector;
GRANT ALL ON SCHEMA public TO rag_md5, rag_clear, rag_tls;
EOF

export RAG_PG_DSN="postgres://rag:$pw_scram@127.0.0.1:$port/rag"
export RAG_PG_MD5_DSN="postgres://rag_md5:$pw_md5@127.0.0.1:$port/rag"
export RAG_PG_CLEAR_DSN="postgres://rag_clear:$pw_clear@127.0.0.1:$port/rag"
export RAG_PG_TLS_DSN="postgres://rag_tls:$pw_tls@127.0.0.1:$port/rag"
export RAG_PG_CA="$tmp/tls/ca.pem" RAG_PG_OTHER_CA="$tmp/tls/other.pem"
# a command that restarts the server (fast shutdown), for the fault specs
pgrun=
[ "$(id -u)" = 0 ] && pgrun="runuser -u postgres --"
export RAG_PG_RESTART="$pgrun $pgbin/pg_ctl -D $tmp/data -l $tmp/data/server.log -w -t 30 \
-m fast restart"
echo "PostgreSQL $("$pgbin/postgres" -V | awk '{ print $3 }'), pgvector" \
  "$(as_pg "${psql[@]}" -d rag -At -c "SELECT extversion FROM pg_extension WHERE extname = 'vector'")" \
  "on 127.0.0.1:$port, data in $tmp/data"

if [ "${1:-}" = -- ]; then
  shift
  "$@"
  exit
fi

# The checks under nginx's cosockets (spec/pg/ngx_checks.lua), when nginx
# with its Lua module and the LuaJIT build are there: "ok NAME" / "FAIL NAME: why".
ngx_checks() {
  local nginx=${NGINX:-/usr/sbin/nginx} modules=${NGINX_MODULES:-/usr/lib/nginx/modules}
  local d=$tmp/nginx ngx_port
  if [ ! -x "$nginx" ] || [ ! -f "$modules/ngx_http_lua_module.so" ] ||
    [ ! -f build/jit/rag/core.so ] || ! command -v curl >/dev/null; then
    echo "== nginx: skipped (nginx-light, libnginx-mod-http-lua, curl or build/jit missing)"
    return 0
  fi
  echo "== nginx"
  mkdir -p "$d/logs" "$d/tmp"
  ngx_port=$(free_port)
  cat >"$d/nginx.conf" <<EOF
load_module $modules/ndk_http_module.so;
load_module $modules/ngx_http_lua_module.so;
daemon off;
master_process on;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/logs/error.log warn;
env RAG_PG_DSN;
env RAG_PG_MD5_DSN;
events {
  worker_connections 64;
}
http {
  access_log off;
  client_body_temp_path $d/tmp/body;
  proxy_temp_path $d/tmp/proxy;
  fastcgi_temp_path $d/tmp/fastcgi;
  uwsgi_temp_path $d/tmp/uwsgi;
  scgi_temp_path $d/tmp/scgi;
  lua_package_path "$repo/lua/?.lua;$repo/lua/?/init.lua;$repo/?.lua;;";
  lua_package_cpath "$repo/build/jit/?.so;;";
  lua_ssl_trusted_certificate $tmp/tls/ca.pem;
  lua_ssl_verify_depth 2;
  server {
    listen 127.0.0.1:$ngx_port;
    default_type text/plain;
    location = /ping {
      return 200 "pong";
    }
    location = /pg {
      content_by_lua_block {
        ngx.print(require("spec.pg.ngx_checks").run())
      }
    }
  }
}
EOF
  "$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/logs/error.log" >"$d/logs/nginx.out" 2>&1 &
  ngx_pid=$!
  for _ in $(seq 100); do
    curl -sf -o /dev/null "http://127.0.0.1:$ngx_port/ping" && break
    sleep 0.1
  done
  curl -s -m 60 "http://127.0.0.1:$ngx_port/pg" >"$d/checks.out"
  kill "$ngx_pid" 2>/dev/null
  wait "$ngx_pid" 2>/dev/null
  ngx_pid=
  cat "$d/checks.out"
  local p f
  p=$(grep -c '^ok ' "$d/checks.out")
  f=$(grep -c '^FAIL ' "$d/checks.out")
  if [ "$((p + f))" = 0 ]; then
    f=1
    echo "FAIL nginx gave no checks:"
    tail -n 20 "$d/logs/error.log" "$d/logs/nginx.out"
  fi
  echo "nginx: $p passed / $f failed"
  total_p=$((total_p + p))
  total_f=$((total_f + f))
  [ "$f" = 0 ] || status=1
}

# The specs under each interpreter whose rag/core.so is built (RUNS lists
# "lua:build-dir" pairs); one total line at the end.
total_p=0
total_f=0
status=0
for run in ${RUNS:-$lua:$build luajit:build/jit}; do
  l=${run%%:*}
  b=${run#*:}
  if [ ! -f "$b/rag/core.so" ] || ! command -v "$l" >/dev/null; then
    echo "== $l: skipped ($b/rag/core.so or $l is missing)"
    continue
  fi
  echo "== $l"
  "$l" /usr/bin/busted --ignore-lua --lpath='lua/?.lua;lua/?/init.lua' \
    --cpath="$b/?.so" -o spec/summary.lua ${BUSTED_ARGS:-} spec/pg >"$tmp/busted.out" 2>&1 ||
    status=1
  # Each run's count is shown as "l: N passed / N failed", so that CI's
  # count of spec runs and its sums see one line for the whole target.
  sed -E "s|^([0-9]+) passed, ([0-9]+) failed|$l: \1 passed / \2 failed|" "$tmp/busted.out"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/busted.out" | tail -n 1)
  p=${line%% passed*}
  f=${line#* passed, }
  f=${f%% failed*}
  total_p=$((total_p + ${p:-0}))
  total_f=$((total_f + ${f:-1}))
done
ngx_checks
echo "$total_p passed, $total_f failed"
[ "$status" = 0 ] && [ "$total_f" = 0 ]
