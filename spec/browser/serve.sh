#!/bin/sh
# Acceptance C of issue 25 in a real browser: the search page of `rag serve`
# in headless Chromium (Debian's chromium, driven through chromedriver by
# spec/browser/serve.py). An index of the SciFact sample, two pages and a
# document of HTML markup is served by `bin/rag serve` on a free loopback
# port (or by the server at RAG_SERVE_URL, which must serve the same files);
# typing a query shows highlighted results, asking streams an answer whose
# citation links scroll to the listed sources, /?q= searches at once, and no
# console message or request to another host is seen. Screenshots and logs in
# $OUT (serve.png: the answer). The last line is "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/browser}
LUA=${LUA:-lua5.4}
BUILD=${BUILD:-build}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/serve-index"
export LUA_PATH="lua/?.lua;lua/?/init.lua;;" LUA_CPATH="$BUILD/?.so;;" LUA
files="spec/fixtures/texts/scifact40.jsonl spec/fixtures/load/notes.md \
spec/fixtures/load/page.html spec/fixtures/serve/untrusted.txt"
echo "rag index $files --into $OUT/serve-index"
# shellcheck disable=SC2086 # the file names have no spaces
if ! "$LUA" bin/rag index $files --into "$OUT/serve-index"; then
  echo "FAILED: making the index (rag index)"
  echo "0 passed, 1 failed"
  exit 1
fi
exec python3 spec/browser/serve.py "$OUT" "$OUT/serve-index"
