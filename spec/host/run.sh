#!/bin/sh
# Acceptance E of issue 25 on a fixture: the game host (build/host/rag-host,
# `make host`) indexes spec/fixtures/texts frame by frame, saves the index
# and answers three questions; `rag ask` on the folder it saved and on one
# `rag index` made from the same files must print the same answers and
# sources, byte for byte, and the host must report its worst frame, under
# 8 ms (its CPU time, and its wall time in one of three runs). A run with
# other settings (RAG_K=1) proves the comparison can tell answers apart.
# Output in $OUT; the last line is "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/host-test}
LUA=${LUA:-lua5.4}
HOST=build/host/rag-host
DOCS=spec/fixtures/texts
rm -rf "$OUT" && mkdir -p "$OUT" || exit 1
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

# The answer the host printed to question n (1-based) in file $2: the lines
# after its "Q: " line, up to the blank line before the next one.
block() {
  awk -v n="$1" '
    /^Q: / { k++; if (k > n) exit; next }
    k == n { if (held) print buf; buf = $0; held = 1 }
    END { if (held && !(k > n && buf == "")) print buf }' "$2"
}

rag() {
  "$LUA" bin/rag "$@"
}

Q1="How does stress affect bone?"
Q2="What do the sample texts contain?"
Q3="Which kinases inhibit origin firing?"

if [ ! -x "$HOST" ]; then
  echo "FAILED: $HOST is missing (make host)"
  echo "0 passed, 1 failed"
  exit 1
fi

"$HOST" "$DOCS" --save "$OUT/saved" --question "$Q1" --question "$Q2" --question "$Q3" \
  >"$OUT/host.out" 2>"$OUT/host.err"
check "rag-host exits 0 over $DOCS with --save and three questions" test $? -eq 0
cat "$OUT/host.out"
rag index "$DOCS" --into "$OUT/cli" >"$OUT/index.out" 2>&1
check "rag index over the same files exits 0" test $? -eq 0

docs=$(sed -n 's/^[^:]*: \([0-9]*\) documents,.*/\1/p' "$OUT/index.out")
check "the host ingested the $docs documents rag index found" \
  grep -q "^frames [0-9]*, documents $docs " "$OUT/host.out"
worst=$(sed -n 's/^frame work: worst \([0-9.]*\) ms.*/\1/p' "$OUT/host.out")
cpu=$(sed -n 's/^frame CPU time: worst \([0-9.]*\) ms.*/\1/p' "$OUT/host.out")
check "the host reports its worst frame (${worst:-none} ms; CPU ${cpu:-none} ms)" \
  test -n "$worst" -a -n "$cpu"
# Wall time counts the machine's other load, and CPU time too when another
# process shares the core's caches (.ci/run runs valgrind beside this): up
# to two more runs when a frame was over.
for again in 1 2; do
  awk -v w="${worst:-99}" -v c="${cpu:-99}" 'BEGIN { exit !(w >= 8 || c >= 8) }' || break
  echo "(worst frame ${worst:-none} ms, CPU ${cpu:-none} ms: run $again again)"
  "$HOST" "$DOCS" >"$OUT/again.out" 2>&1
  worst=$(sed -n 's/^frame work: worst \([0-9.]*\) ms.*/\1/p' "$OUT/again.out")
  cpu=$(sed -n 's/^frame CPU time: worst \([0-9.]*\) ms.*/\1/p' "$OUT/again.out")
done
check "the worst frame's CPU time is under 8 ms (${cpu:-none} ms)" \
  awk -v w="${cpu:-99}" 'BEGIN { exit !(w < 8) }'
check "the worst frame is under 8 ms (${worst:-none} ms)" \
  awk -v w="${worst:-99}" 'BEGIN { exit !(w < 8) }'
check "the host saved the index rag index makes, byte for byte" \
  sh -c 'for f in "$1"/*.rag; do cmp -s "$f" "$2/${f##*/}" || exit 1; done' - \
  "$OUT/saved" "$OUT/cli"

n=0
for q in "$Q1" "$Q2" "$Q3"; do
  n=$((n + 1))
  block "$n" "$OUT/host.out" >"$OUT/host.$n"
  rag ask "$OUT/saved" "$q" >"$OUT/saved.$n" 2>"$OUT/saved.$n.err"
  rag ask "$OUT/cli" "$q" >"$OUT/cli.$n" 2>"$OUT/cli.$n.err"
  check "question $n: an answer with sources" grep -q '^\[[0-9]*\] ' "$OUT/host.$n"
  check "question $n: the host's answer and sources = rag ask on the folder it saved" \
    cmp -s "$OUT/host.$n" "$OUT/saved.$n"
  check "question $n: = rag ask on the index rag index made" cmp -s "$OUT/host.$n" "$OUT/cli.$n"
done

# The comparison is live: with 1 passage instead of 5 the answers differ.
RAG_K=1 "$HOST" "$DOCS" --question "$Q1" >"$OUT/k1.out" 2>"$OUT/k1.err"
block 1 "$OUT/k1.out" >"$OUT/k1.1"
check "a host run with other settings (RAG_K=1) prints another answer" \
  sh -c '! cmp -s "$1" "$2"' - "$OUT/k1.1" "$OUT/cli.1"

"$HOST" >/dev/null 2>"$OUT/usage.err"
check "no arguments: exit status 2 and the usage" \
  sh -c '[ $1 -eq 2 ] && grep -q "^usage: rag-host" "$2"' - $? "$OUT/usage.err"
"$HOST" "$OUT/no-such-folder" >/dev/null 2>"$OUT/missing.err"
check "a missing folder: exit status 1 and one line naming it" \
  sh -c '[ $1 -eq 1 ] && grep -q "no-such-folder" "$2"' - $? "$OUT/missing.err"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
