#!/bin/sh
# bench/peers/ingest_pair.sh DATA [ROUNDS]: rag.index's BM25-only ingest
# against SQLite FTS5's (porter), in turns, ROUNDS times (default 5): each
# round runs bench/index.lua --bm25 (median of 3 ingests in one process)
# and then bench/peers/index_fts5.py --ingest (median of 3 in memory and 3
# to a file; the faster), both on CPU 0 (taskset). This machine's speed
# moves by a third within minutes, so a figure is only compared with the
# one taken right after it: each round prints both and their ratio, and the
# end the medians of the three. Issue 21's E asks for a ratio of 1.2 or more.
#   make bench-ingest-pair DATA=../shared/data
set -eu
data=${1:-../shared/data}
rounds=${2:-5}
if [ ! -f "$data/scifact/corpus.jsonl" ]; then
  echo "skipped: $data/scifact/corpus.jsonl not found; pass the data folder," \
    "e.g. make bench-ingest-pair DATA=../shared/data"
  exit 0
fi
lua=${LUA:-lua5.4}
export LUA_PATH="lua/?.lua;lua/?/init.lua;./?.lua;;" LUA_CPATH="build/?.so;;"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
i=1
while [ "$i" -le "$rounds" ]; do
  r=$(taskset -c 0 "$lua" bench/index.lua "$data/scifact" --bm25 3 |
    sed -n 's/^bm25 only *ingest *\([0-9]*\) docs.*/\1/p')
  f=$(taskset -c 0 /usr/bin/python3 bench/peers/index_fts5.py "$data" 3 --ingest 2>/dev/null |
    sed -n 's/.*"ingest_docs_s": \([0-9]*\).*/\1/p')
  echo "$r $f" >> "$out"
  awk -v i="$i" -v r="$r" -v f="$f" 'BEGIN { printf "round %d: rag %d docs/s, FTS5 %d docs/s: %.2f times\n", i, r, f, r / f }'
  i=$((i + 1))
done
sort -n "$out" | awk '{ r[NR] = $1 } END { printf "median rag %d docs/s, ", r[int((NR + 1) / 2)] }'
sort -n -k2 "$out" | awk '{ f[NR] = $2 } END { printf "FTS5 %d docs/s, ", f[int((NR + 1) / 2)] }'
awk '{ print $1 / $2 }' "$out" | sort -n |
  awk '{ q[NR] = $1 } END { printf "ratio %.2f (target >= 1.2)\n", q[int((NR + 1) / 2)] }'
