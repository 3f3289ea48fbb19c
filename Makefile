# rag: build, test and CI entry points. `make` builds build/rag/core.so for
# Lua 5.4; `make LUA_VERSION=5.1|5.2|5.3|jit` builds build/<v>/rag/core.so.

LUA_VERSION ?= 5.4
ifeq ($(LUA_VERSION),jit)
  LUA_PC := luajit
  LUA := luajit
else
  LUA_PC := lua$(LUA_VERSION)
  LUA := lua$(LUA_VERSION)
endif
ifeq ($(LUA_VERSION),5.4)
  BUILD := build
else
  BUILD := build/$(LUA_VERSION)
endif

# Debian packages: the build and `make test`; the version matrix; `make asan`.
DEB_PKGS := gcc make pkg-config python3 lua5.4 liblua5.4-dev libcurl4-openssl-dev \
  libcjson-dev libutf8proc-dev libstemmer-dev libssl-dev libxml2-dev lua-busted luarocks \
  poppler-utils sqlite3 libxml2-utils lua-socket python3-numpy
MATRIX_PKGS := lua5.1 liblua5.1-0-dev lua5.2 liblua5.2-dev lua5.3 liblua5.3-dev \
  luajit2 libluajit2-5.1-dev
ASAN_PKGS := clang libclang-rt-14-dev
VALGRIND_PKGS := valgrind
OPENRESTY_PKGS := luajit2 libluajit2-5.1-dev nginx-light libnginx-mod-http-lua curl openssl
SERVE_PKGS := $(OPENRESTY_PKGS) wrk python3
LINT_PKGS := lua-check
BROWSER_PKGS := chromium libxml2-utils python3
SERVE_BROWSER_PKGS := chromium chromium-driver python3

DEPS := libcurl libcjson libutf8proc libcrypto libxml-2.0
CC ?= cc
OPT ?= -O2 -g
WARN := -Wall -Wextra -Werror
CFLAGS_ALL = -std=c99 -D_POSIX_C_SOURCE=200809L -fPIC -fvisibility=hidden -ffp-contract=off \
  $(OPT) $(WARN) $(shell pkg-config --cflags $(LUA_PC) $(DEPS)) $(XCFLAGS)
# libxml2 and libcurl are opened with dlopen on the first HTML page and the
# first HTTP request (src/rag_dl.c): their headers only, no link, so a process
# that reads no HTML or makes no request never maps them.
LIBS = $(shell pkg-config --libs $(filter-out libxml-2.0 libcurl,$(DEPS))) -lstemmer -lpthread -lm -ldl

SRC := $(wildcard src/*.c)
OBJDIR = build/obj/$(LUA_VERSION)$(VARIANT)
OBJ = $(SRC:src/%.c=$(OBJDIR)/%.o)
SO = $(BUILD)/rag/core.so

LPATH := lua/?.lua;lua/?/init.lua
BUSTED = $(LUA) /usr/bin/busted --ignore-lua --lpath='$(LPATH)' \
  --cpath='$(BUILD)/?.so' -o spec/summary.lua $(BUSTED_ARGS) spec

.PHONY: all deps deps-all test test-one test-all test-openresty test-browser test-browser-serve \
  test-serve test-pg bench-pg bench-pg-store asan fuzz-smoke demo rock lint quality bench-serve bench-json bench-tokenizer bench-models \
  bench-chunk bench-ingest bench-bm25 bench-ann bench-fuse bench-pack \
  bench-cli bench-icount bench-index bench-enrich bench-index-peers bench-ingest-pair bench-pipeline bench-vec-map bench-graph fuzz \
  check-exports clean host host-bench test-host valgrind mutate fuzz-long crash soak soak-serve

all: $(SO)

$(SO): $(OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared $(XLDFLAGS) -o $@ $(OBJ) $(LIBS)

$(OBJDIR)/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

-include $(OBJ:.o=.d)

deps:
	@sh .ci/deps $(DEB_PKGS)

deps-all:
	@sh .ci/deps $(DEB_PKGS) $(MATRIX_PKGS) $(ASAN_PKGS) $(VALGRIND_PKGS) $(LINT_PKGS) \
	  $(BROWSER_PKGS) $(SERVE_BROWSER_PKGS)

# The specs under Lua 5.4; the last line is "N passed, N failed".
test: deps
	@$(MAKE) --no-print-directory test-one LUA_VERSION=5.4

test-one: all
	$(BUSTED)

test-all: deps-all
	@rc=0; for v in 5.1 5.2 5.3 5.4 jit; do echo "== Lua $$v"; \
	  $(MAKE) --no-print-directory test-one LUA_VERSION=$$v || rc=1; done; exit $$rc

# rag.transport.ngx inside Debian's nginx + ngx_lua, against the loopback
# servers (spec/openresty/run.sh); the last line is "N passed, N failed".
test-openresty:
	@sh .ci/deps $(DEB_PKGS) $(OPENRESTY_PKGS)
	@$(MAKE) --no-print-directory all LUA_VERSION=jit
	@bash spec/openresty/run.sh

# `rag serve` end to end (spec/serve/run.sh): every endpoint against the rag
# command, 77 kinds of bad request, SSE, tokens, the rate limit, a reload
# under wrk load, an LLM over HTTP, a clean stop. About 40 s; the last line
# is "N passed, N failed".
test-serve:
	@sh .ci/deps $(DEB_PKGS) $(SERVE_PKGS)
	@$(MAKE) --no-print-directory all LUA_VERSION=5.4
	@$(MAKE) --no-print-directory all LUA_VERSION=jit
	@bash spec/serve/run.sh

# The PostgreSQL specs (spec/pg/run.sh): installs PostgreSQL 15, builds
# pgvector from its Debian source package once (build/pgvector), starts a
# private cluster on a free loopback port, runs spec/pg under Lua 5.4 and
# LuaJIT and spec/pg/ngx_checks.lua in nginx, and stops it; skips with one
# line when PostgreSQL cannot be had. About 25 s once built. The last line is
# "N passed, N failed" (the three runs).
PG_PKGS := postgresql-15 postgresql-server-dev-15 dpkg-dev lua-socket lua-sec python3 openssl
test-pg: deps
	@sh .ci/deps $(OPENRESTY_PKGS)
	@$(MAKE) --no-print-directory all LUA_VERSION=5.4
	@$(MAKE) --no-print-directory all LUA_VERSION=jit
	@PG_PKGS="$(PG_PKGS)" bash spec/pg/run.sh

# rag.store.pg on one loopback connection (bench/pg.lua) against test-pg's
# cluster: round trips/s prepared and not, simple protocol, pool, 100-row
# results, a pgvector top-10 with a vector parameter, logins; TLS and plain.
bench-pg: all
	@PG_PKGS="$(PG_PKGS)" bash spec/pg/run.sh -- env LUA_PATH='$(LPATH);;' \
	  LUA_CPATH='$(BUILD)/?.so;;' $(LUA) bench/pg.lua

# rag.store.postgres against the local rag.index (bench/pg_store.lua, issue
# 26's acceptance B and C) on test-pg's cluster: SciFact in DATA with the
# hashing embedder (ingest docs/s, top-10 overlap, nDCG@10 per mode), then
# 20,046 chunks x 384 with HNSW searched by 8 client processes (vector,
# hybrid q/s) and by wrk through nginx's cosockets. RUNS=3 runs each
# (medians), SECS=10 s per wrk run, PARTS="B C ngx". About 13 minutes.
# MAKEFLAGS is emptied for run.sh: its `make install` of pgvector would
# otherwise take this DATA= as PGXS's DATA (the extension's data files).
bench-pg-store: all
	@sh .ci/deps $(SERVE_PKGS)
	@$(MAKE) --no-print-directory all LUA_VERSION=jit
	@MAKEFLAGS= PG_PKGS="$(PG_PKGS)" bash spec/pg/run.sh -- env LUA_PATH='$(LPATH);;' \
	  LUA_CPATH='$(BUILD)/?.so;;' $(LUA) bench/pg_store.lua $(DATA)/scifact

# rag.report's page in headless Chromium (acceptance C of issue 24): a sweep
# over three chunk sizes opens with no console message and no network request,
# and its DOM has one bar chart per metric (spec/browser/report.sh; about 10 s).
# Never part of `make test`. Output in build/browser; the last line is
# "N passed, N failed".
test-browser: all
	@sh .ci/deps $(BROWSER_PKGS)
	@LUA=$(LUA) BUILD=$(BUILD) sh spec/browser/report.sh

# The search page of `rag serve` in headless Chromium (acceptance C of issue
# 25): a real server on a free loopback port over a small index; typing a
# query shows highlighted results, asking streams an answer whose citation
# links scroll to the listed sources (spec/browser/serve.sh, through
# chromedriver; about 15 s). Never part of `make test`. Screenshots in
# build/browser (serve.png); the last line is "N passed, N failed".
test-browser-serve: all
	@sh .ci/deps $(DEB_PKGS) $(OPENRESTY_PKGS) $(SERVE_BROWSER_PKGS)
	@$(MAKE) --no-print-directory all LUA_VERSION=jit
	@LUA=$(LUA) BUILD=$(BUILD) sh spec/browser/serve.sh

# The specs against a build with AddressSanitizer, UBSan and fault injection,
# loaded into the stock lua5.4. First proves the sanitizers are live and fatal.
ASAN_RT = $(shell clang -print-file-name=libclang_rt.asan-x86_64.so)
ASAN_ENV = LD_PRELOAD="$(ASAN_RT) $(CURDIR)/build/asan/nodlclose.so" \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 RAG_ASAN=1
ASAN_MAKE = LUA_VERSION=5.4 BUILD=build/asan VARIANT=-asan CC=clang XCFLAGS=-DRAG_TESTING \
  OPT="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
  XLDFLAGS="-fsanitize=address,undefined"
asan: deps-all
	@$(MAKE) --no-print-directory all $(ASAN_MAKE)
	@printf 'int dlclose(void *h) { (void)h; return 0; }\n' > build/asan/nodlclose.c
	@clang -shared -fPIC -O1 build/asan/nodlclose.c -o build/asan/nodlclose.so
	@sh .ci/asan-selftest "$(ASAN_RT)" build/asan
	$(ASAN_ENV) lua5.4 /usr/bin/busted --ignore-lua --lpath='$(LPATH)' \
	  --cpath='build/asan/?.so' -o spec/summary.lua $(BUSTED_ARGS) spec

# The spec suite under valgrind's memcheck with the Lua 5.4 build (-O2,
# what users run): any invalid read or write, jump on uninitialised memory,
# bad free or definite leak is an error and fails the run. Children the
# specs start (bin/rag, servers) run without it.
VALGRIND = valgrind --quiet --error-exitcode=99 --leak-check=full \
  --errors-for-leak-kinds=definite --show-leak-kinds=definite \
  --suppressions=.ci/valgrind.supp
valgrind: deps-all all
	$(VALGRIND) $(BUSTED)

# Soaks: 1,000,000 searches and 100,000 churn cycles on one index, and 5,000
# requests to a loopback model server that injects faults; RSS sampled at
# every tenth; fails when it grew more than 2% after the first, or when a
# request's outcome is not the one its fault calls for.
soak: all
	@$(RUN) $(LUA) bench/soak.lua
	@LUA_PATH='$(LPATH);./?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' $(LUA) bench/soak_provider.lua

# The OpenResty soak: rag serve under wrk for SECS (120) seconds, re-indexed
# every 3 s; no failed request, the last change served, workers' RSS flat.
soak-serve: all
	@$(MAKE) --no-print-directory all LUA_VERSION=jit
	bash bench/soak_serve.sh $(SECS)

# Crash consistency at full length: 100 SIGKILLs of `rag index` runs over a
# changing folder (make test kills 8), beside the 100 kills of rag.index
# saves that every spec run makes.
crash: deps all
	RAG_FULL=1 RAG_CRASH_REPORT=1 $(LUA) /usr/bin/busted --ignore-lua --lpath='$(LPATH)' \
	  --cpath='$(BUILD)/?.so' -o spec/summary.lua spec/cli/crash_spec.lua

# Mutation testing: each mutant of .ci/mutants.txt applied in turn to a copy
# of the tree (build/mutate), the specs run, the share caught reported.
mutate: all
	lua5.4 .ci/mutate.lua .ci/mutants.txt $(MUTATE_ARGS)

# libFuzzer harnesses (fuzz/*.c) over the C core and, for fuzz/lua_*.c,
# the readers that run through Lua; FUZZ_TIME seconds each (CI: 30).
FUZZ_TIME ?= 30
fuzz-smoke: deps-all
	@sh .ci/fuzz $(FUZZ_TIME)

# The nightly-style run: every harness for 10 minutes.
fuzz-long: deps-all
	@sh .ci/fuzz 600

# The full damaged-file checks (every truncation, 10,000 bit flips of a saved
# BM25 index; the specs run a sample), then every libFuzzer harness.
fuzz: deps-all all
	RAG_FULL=1 $(LUA) /usr/bin/busted --ignore-lua --lpath='$(LPATH)' --cpath='$(BUILD)/?.so' \
	  -o spec/summary.lua spec/core/bm25_spec.lua
	@sh .ci/fuzz $(FUZZ_TIME)

# The game-host example (examples/host): a C program with Lua 5.4 (Debian's
# static liblua5.4.a) and the core's objects linked in, rag.core preloaded;
# it finds rag's Lua modules and host.lua in this tree (RAG_HOST_LUA_DIR and
# RAG_HOST_SCRIPT override). Built from the Lua 5.4 objects.
HOST := build/host/rag-host
HOST_OBJ := $(SRC:src/%.c=build/obj/5.4/%.o)
LUA_STATIC = $(shell pkg-config --variable=libdir lua5.4)/liblua5.4.a
host: $(HOST)

$(HOST): examples/host/host.c $(HOST_OBJ)
	@if [ "$(LUA_VERSION)" != 5.4 ]; then echo "make host: Lua 5.4 only"; exit 1; fi
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -DRAG_HOST_LUA_DIR='"$(CURDIR)/lua"' \
	  -DRAG_HOST_SCRIPT='"$(CURDIR)/examples/host/host.lua"' -o $@ examples/host/host.c \
	  $(HOST_OBJ) $(LUA_STATIC) $(LIBS)

# Acceptance E of issue 25 on SciFact: the frame figures while the host
# ingests all 5,183 documents (a BEIR folder), then one answer.
host-bench: $(HOST)
	@if [ ! -f "$(DATA)/scifact/corpus.jsonl" ]; then \
	  echo "skipped: $(DATA)/scifact/corpus.jsonl not found; pass the data folder," \
	    "e.g. make host-bench DATA=../shared/data"; exit 0; fi; \
	$(HOST) $(DATA)/scifact --question "What causes tuberculosis?"

# The host's answers against `rag ask` on the index it saved and on one
# `rag index` made (spec/host/run.sh); the last line is "N passed, N failed".
test-host: all $(HOST)
	@LUA=$(LUA) sh spec/host/run.sh

# Runs a script against the source tree: $(RUN) lua5.4 x.lua
RUN = LUA_PATH='$(LPATH);;' LUA_CPATH='$(BUILD)/?.so;;'

# The main job, offline: index README.md and docs/ (or DOCS=folder) with the
# rag command, ask three questions (or QUESTIONS="a?|b?"), print the answers
# with their sources and times.
DOCS ?=
QUESTIONS ?=
demo: deps all
	@$(RUN) $(LUA) examples/demo.lua '$(DOCS)' '$(QUESTIONS)'

# Benchmarks and `make quality`: never part of `make test`. DATA is the data
# folder (scifact/, model2vec/); a clone has none, and each target then says
# "skipped: ..." and succeeds.
DATA ?= ../shared/data
bench-json: all
	@sh .ci/deps lua-cjson
	@$(RUN) $(LUA) bench/json.lua

bench-tokenizer: all
	@$(RUN) $(LUA) bench/tokenizer.lua $(DATA)

# MB/s of every chunker on SciFact; the LangChain.js peer: bench/peers/langchain_chunk.mjs
bench-chunk: all
	@$(RUN) $(LUA) bench/chunk.lua $(DATA)

# cl100k counting, rag.chunk.recursive at 512 tokens and rag.bm25 of the chunks on
# SciFact, cold and warm: documents/s against the document index's 23,000
bench-ingest: all
	@$(RUN) $(LUA) bench/ingest.lua $(DATA)

# `rag index` end to end over SciFact's corpus as 5,183 text files, one core:
# files/s of a new index and of a re-run with nothing changed.
bench-cli: all
	@$(RUN) $(LUA) bench/cli.lua $(DATA)/scifact

# rag.pipeline.hybrid with a zero-latency LLM on SciFact against the index's
# own hybrid search: what the pipeline adds; one core (taskset).
bench-pipeline: all
	@$(RUN) taskset -c 0 $(LUA) bench/pipeline.lua $(DATA)/scifact

# docs/s, queries/s, nDCG@10 and Recall@100 of rag.bm25 on SciFact
bench-bm25: all
	@$(RUN) $(LUA) bench/bm25.lua $(DATA)

# rag.embed.bert and rag.rerank.cross_encoder in MiniLM's shape on one core:
# sentences/s at 16, 64 and 128 tokens next to a batched numpy forward pass
# on OpenBLAS (one thread) and the core's peak FMA rate; load time and what
# a second process adds (issue 28, C and D).
bench-models: all build/peak_fma
	@sh .ci/deps python3-numpy libopenblas0-pthread
	@$(RUN) taskset -c 0 $(LUA) bench/models.lua $(DATA)

build/peak_fma: bench/peak_fma.c
	@mkdir -p build
	$(CC) -O2 -o $@ $<

# The entity graph of SciFact with the heuristic extractor against its BM25
# index: build times (issue 27 wants <= 2x), the graph's size, save and load.
bench-graph: all
	@$(RUN) $(LUA) bench/graph.lua $(DATA)

# rag.index on SciFact: ingest docs/s (BM25 only, default, HNSW), queries/s
# and document-level nDCG@10 / Recall@100 per mode, RSS, size on disk, and
# what a read-only opening adds; one core (taskset). Peers: bench-index-peers.
bench-index: all
	@$(RUN) taskset -c 0 $(LUA) bench/index.lua $(DATA)/scifact

# rag.index's offline enrichment on SciFact (issue 29 B): BM25-mode nDCG@10
# and Recall@100 with and without it, a sweep of the field weights, and its
# cost in docs/s, queries/s and size on disk; one core.
bench-enrich: all
	@$(RUN) taskset -c 0 $(LUA) bench/enrich.lua $(DATA)/scifact

# rag.hnsw and rag.vec against hnswlib and FAISS (Debian's) on seeded data:
# recall@10 and queries/s over an ef sweep, build time, memory, removals.
# ANN_ARGS="--n 100000 --dim 384" for the larger set.
ANN_ARGS ?=
bench-ann: all
	@sh .ci/deps python3-hnswlib python3-faiss python3-numpy
	@$(RUN) $(LUA) bench/ann.lua --peer --remove 0.2 $(ANN_ARGS)

# The anon and file RSS that a copied and a mapped rag.vec.load add in a fresh
# process (5,490 x 512 f32 rows, SciFact's chunk count; VEC_MAP_ARGS="N DIM")
VEC_MAP_ARGS ?=
bench-vec-map: all
	@$(RUN) $(LUA) bench/vec_map.lua $(VEC_MAP_ARGS)

# The peers of bench/index.lua on SciFact, in one run on this machine: LanceDB
# and Orama (npm packages pinned in bench/peers/package.json and its lock,
# installed into PEERS/node_modules when missing or changed: npm install
# with the lock, since npm ci refuses a lock that lacks the platform binaries
# of other systems; no install scripts are run) and
# SQLite FTS5 (Debian's python3), all on the same vectors, exported by
# bench/peers/export_vectors.lua into PEERS/vectors. Each peer's JSON line
# is kept in PEERS/<peer>.json for bench/index.lua; its readable lines go
# to stderr. Node and npm from PATH, or Debian's nodejs and npm.
# PEERS_CPUS=0 runs them on CPU 0 only (taskset), as bench-index runs.
PEERS ?= build/peers
PEERS_CPUS ?=
PEERS_RUN = $(if $(PEERS_CPUS),taskset -c $(PEERS_CPUS))
bench-index-peers: all
	@if [ ! -f "$(DATA)/scifact/corpus.jsonl" ]; then \
	  echo "skipped: $(DATA)/scifact/corpus.jsonl not found; pass the data folder," \
	    "e.g. make bench-index-peers DATA=../shared/data"; exit 0; fi; \
	{ command -v node && command -v npm; } >/dev/null || sh .ci/deps nodejs npm || exit 1; \
	sh .ci/deps python3 || exit 1; \
	if ! cmp -s bench/peers/package-lock.json $(PEERS)/node_modules/.rag-lock; then \
	  mkdir -p $(PEERS) && cp bench/peers/package.json bench/peers/package-lock.json $(PEERS)/ && \
	  npm install --prefix $(PEERS) --ignore-scripts --no-audit --no-fund && \
	  cp bench/peers/package-lock.json $(PEERS)/node_modules/.rag-lock || exit 1; fi; \
	$(RUN) $(LUA) bench/peers/export_vectors.lua $(DATA) $(PEERS)/vectors && \
	$(PEERS_RUN) node --expose-gc bench/peers/index_lancedb.mjs $(DATA) $(PEERS)/vectors \
	  $(PEERS)/node_modules > $(PEERS)/lancedb.json && cat $(PEERS)/lancedb.json && \
	$(PEERS_RUN) node --expose-gc bench/peers/index_orama.mjs $(DATA) $(PEERS)/vectors \
	  $(PEERS)/node_modules > $(PEERS)/orama.json && cat $(PEERS)/orama.json && \
	$(PEERS_RUN) /usr/bin/python3 bench/peers/index_fts5.py $(DATA) > $(PEERS)/fts5.json && \
	cat $(PEERS)/fts5.json

# Issue 21's BM25-only ingest against SQLite FTS5, in turns (ROUNDS=5):
# each round's pair and ratio, then the medians (bench/peers/ingest_pair.sh).
ROUNDS ?= 5
bench-ingest-pair: all
	@sh .ci/deps python3 || exit 1
	@sh bench/peers/ingest_pair.sh $(DATA) $(ROUNDS)

# Instruction counts (callgrind) of a fixed workload per part, for comparing
# two builds on a busy machine: build/icount.PART.out, read with callgrind_annotate.
# ICOUNT_PARTS=bm25add runs one part. dlclose is made a no-op (as in `make
# asan`) so that core.so's symbols and lines are still known when callgrind
# writes the profile at exit.
ICOUNT_PARTS ?= bm25 bm25add tok chunk vec fusepack doccount docchunk
bench-icount: all build/nodlclose.so
	@for p in $(ICOUNT_PARTS); do \
	  $(RUN) LD_PRELOAD=$(CURDIR)/build/nodlclose.so valgrind --tool=callgrind \
	    --callgrind-out-file=build/icount.$$p.out \
	    $(LUA) bench/icount.lua $$p $(DATA) 2>&1 | grep -E 'skipped|refs' | sed "s/^/$$p: /"; done

build/nodlclose.so:
	@mkdir -p build
	@printf 'int dlclose(void *h) { (void)h; return 0; }\n' > build/nodlclose.c
	@$(CC) -shared -fPIC -O1 build/nodlclose.c -o $@

# `rag serve` on a SciFact index, 2 workers, under wrk: /search hybrid top-10
# with varied queries; requests/s at 64 connections, p99 at 8 (bench/serve.sh).
bench-serve: all
	@sh .ci/deps $(SERVE_PKGS)
	@$(MAKE) --no-print-directory all LUA_VERSION=jit
	@bash bench/serve.sh $(DATA)

# rag.fuse.rrf over two 1,000-hit lists (target <= 100 us), score fusion, rerankers
bench-fuse: all
	@$(RUN) $(LUA) bench/fuse.lua

# rag.pack of 200 SciFact chunks into a 4,000-token cl100k budget (target <= 1 ms)
bench-pack: all
	@$(RUN) $(LUA) bench/pack.lua $(DATA)

# The specs tagged #data over the full data sets in DATA (all of SciFact, the
# model2vec-rs fixtures, the seeds beside DATA) instead of spec/fixtures'
# samples; skipped without DATA. The last line is "N passed, N failed".
quality: all
	@$(RUN) $(LUA) bench/quality.lua $(DATA)

# LuaRocks install into a temporary tree, offline, then use it.
rock: deps
	@sh .ci/rock

lint: deps-all
	luacheck lua spec bin examples bench

check-exports: all
	@syms=$$(nm -D --defined-only $(SO) | awk '$$2 == "T" { print $$3 }'); \
	if [ "$$syms" = "luaopen_rag_core" ]; then echo "exports: $$syms"; \
	else echo "unexpected exports: $$syms"; exit 1; fi

clean:
	rm -rf build rag/core.so src/*.o
