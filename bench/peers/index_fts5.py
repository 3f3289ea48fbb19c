"""bench/peers/index_fts5.py DATA [PASSES [--ingest]]: the SQLite FTS5 peer of bench/index.lua.

SQLite FTS5 through Python's stdlib sqlite3 (run it with Debian's
/usr/bin/python3: Python 3.11, SQLite 3.40.1; the versions are printed) on
SciFact (DATA/scifact; skipped, exit 0, when absent). One table

  CREATE VIRTUAL TABLE docs USING fts5(id UNINDEXED, title UNINDEXED, text,
                                       tokenize='porter')

(porter stemming over the default unicode61 tokenizer) with each document one
row: id = _id, title, text = title + "\\n\\n" + text; only text is indexed,
as in the other peers. No vectors: FTS5 has none.

Ingest (docs/s = 5183 / seconds, median of PASSES runs, default 5): timed
from the rows as a Python list of tuples to the end of COMMIT: connect,
CREATE VIRTUAL TABLE, BEGIN, one executemany INSERT, COMMIT. Two settings
are timed, each run in a new database:
  memory: ":memory:";
  file:   a new file in a temporary directory (on disk) with
          PRAGMA journal_mode=OFF and synchronous=OFF (no journal, no fsync).
The headline figure is the faster of the two (both are printed). Not
timed: reading and parsing the JSON files, closing and removing the database.

Queries (queries/s, sequential, median of PASSES passes over the 300 judged
test queries after one untimed pass that also gives nDCG@10), on the last
in-memory database:
  SELECT id, title, text FROM docs WHERE docs MATCH ?
  ORDER BY bm25(docs) LIMIT 10
with the query made safe for MATCH: split on white space, each word quoted
as an FTS5 string ('"' doubled; a quoted word with punctuation inside is a
phrase, "0-dimensional" = "0 dimensional"; words without a letter or digit
dropped), joined by OR. Also the same with ORDER BY rank (FTS5's shortcut
for the same bm25 order). All rows are fetched (fetchall).
Memory: VmRSS (/proc/self/status) with the data loaded and after the first
in-memory ingest (the first of the process), in MB; the database's own size
(page_count * page_size). Times are time.perf_counter (wall clock).
Output: readable lines on stderr, one JSON line on stdout. With --ingest,
only the ingest (bench/peers/ingest_pair.sh).
  make bench-index-peers DATA=../shared/data
"""

import json
import math
import os
import platform
import re
import sqlite3
import statistics
import sys
import tempfile
import time

SCHEMA = ("CREATE VIRTUAL TABLE docs USING fts5(id UNINDEXED, title UNINDEXED, text,"
          " tokenize='porter')")
QUERY = "SELECT id, title, text FROM docs WHERE docs MATCH ? ORDER BY {} LIMIT 10"


def log(s):
    print("fts5: " + s, file=sys.stderr, flush=True)


def proc_mb(field="VmRSS"):
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def load(data):
    d = os.path.join(data, "scifact")
    rows = []
    with open(os.path.join(d, "corpus.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                doc = json.loads(line)
                title = doc.get("title") or ""
                rows.append((doc["_id"], title, title + "\n\n" + doc["text"]))
    qrels = {}
    with open(os.path.join(d, "qrels", "test.tsv"), encoding="utf-8") as f:
        next(f)  # the header
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 3:
                qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries = []
    with open(os.path.join(d, "queries.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                q = json.loads(line)
                if q["_id"] in qrels:
                    queries.append((q["_id"], q["text"]))
    return rows, queries, qrels


def match_expr(text):
    """Every white-space word as an FTS5 string, joined by OR."""
    words = [w for w in text.split() if re.search(r"\w", w)]
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


def ingest(rows, path):
    """Seconds to build the table in a new database at path; and the connection."""
    t0 = time.perf_counter()
    con = sqlite3.connect(path, isolation_level=None)
    if path != ":memory:":
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
    con.execute(SCHEMA)
    con.execute("BEGIN")
    con.executemany("INSERT INTO docs(id, title, text) VALUES (?, ?, ?)", rows)
    con.execute("COMMIT")
    return time.perf_counter() - t0, con


def ndcg10(run, qrels):
    """Mean nDCG@10 as trec_eval's ndcg_cut.10 (up to tie order), as index_data.mjs."""
    total = 0.0
    for q, judged in qrels.items():
        ids = run.get(q, [])
        dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ids[:10]))
        ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:10]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        total += dcg / idcg if idcg > 0 else 0.0
    return total / len(qrels)


def bench_queries(con, queries, qrels, order, passes):
    sql = QUERY.format(order)
    exprs = [(qid, match_expr(text)) for qid, text in queries]
    run = {qid: [r[0] for r in con.execute(sql, (e,)).fetchall()] for qid, e in exprs}
    times = []
    for _ in range(passes):
        t0 = time.perf_counter()
        for _, e in exprs:
            con.execute(sql, (e,)).fetchall()
        times.append(time.perf_counter() - t0)
    return len(queries) / statistics.median(times), times, ndcg10(run, qrels)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: index_fts5.py DATA [PASSES [--ingest]]")
    data = sys.argv[1].rstrip("/")
    passes = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    ingest_only = sys.argv[3:4] == ["--ingest"]
    if not os.path.exists(os.path.join(data, "scifact", "corpus.jsonl")):
        print(f"skipped: {data}/scifact/corpus.jsonl not found", flush=True)
        return
    rss_start = proc_mb()
    rows, queries, qrels = load(data)
    rss_data = proc_mb()
    n = len(rows)
    log(f"python {platform.python_version()} sqlite {sqlite3.sqlite_version}"
        f" ({sys.executable})")
    log(f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} cores,"
        f" load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    log(f"{n} documents, {len(queries)} test queries, median of {passes}")

    # The first in-memory ingest gives the RSS; then the two settings take
    # turns, so that a change in the machine's load falls on both.
    mem, disk = [], []
    secs, con = ingest(rows, ":memory:")
    mem.append(secs)
    rss_ingest = proc_mb()
    db_bytes = (con.execute("PRAGMA page_count").fetchone()[0]
                * con.execute("PRAGMA page_size").fetchone()[0])
    with tempfile.TemporaryDirectory(prefix="rag-fts5-") as tmp:
        for i in range(passes):
            path = os.path.join(tmp, f"docs{i}.db")
            secs, fcon = ingest(rows, path)
            disk.append(secs)
            fcon.close()
            os.remove(path)
            if i > 0:
                con.close()
                secs, con = ingest(rows, ":memory:")
                mem.append(secs)
    rate_mem = n / statistics.median(mem)
    rate_disk = n / statistics.median(disk)
    best = "memory" if rate_mem >= rate_disk else "file"
    log(f"ingest memory {rate_mem:8.0f} docs/s ({' '.join(f'{s:.3f}' for s in mem)} s)")
    log(f"ingest file   {rate_disk:8.0f} docs/s ({' '.join(f'{s:.3f}' for s in disk)} s;"
        " journal_mode=OFF, synchronous=OFF)")
    log(f"RSS {rss_start:.0f} MB at start, {rss_data:.0f} MB with the data loaded,"
        f" {rss_ingest:.0f} MB after the first ingest; database {db_bytes / 1e6:.1f} MB")

    if ingest_only:  # bench/peers/ingest_pair.sh: the ingest figures alone
        print(json.dumps({"peer": "sqlite-fts5", "sqlite": sqlite3.sqlite_version,
                          "ingest": best, "ingest_docs_s": round(max(rate_mem, rate_disk)),
                          "ingest_memory_docs_s": round(rate_mem),
                          "ingest_file_docs_s": round(rate_disk)}))
        return
    res = {}
    for name, order in (("bm25", "bm25(docs)"), ("rank", "rank")):
        res[name] = bench_queries(con, queries, qrels, order, passes)
        qps, times, nd = res[name]
        log(f"ORDER BY {order:10} top-10 {qps:8.1f} queries/s nDCG@10 {nd:.4f}"
            f" ({' '.join(f'{s:.3f}' for s in times)} s)")
    con.close()

    print(json.dumps({
        "peer": "sqlite-fts5",
        "sqlite": sqlite3.sqlite_version,
        "python": platform.python_version(),
        "docs": n,
        "queries": len(queries),
        "passes": passes,
        "tokenize": "porter",
        "ingest": best,
        "ingest_docs_s": round(max(rate_mem, rate_disk)),
        "ingest_memory_docs_s": round(rate_mem),
        "ingest_file_docs_s": round(rate_disk),
        "bm25_qps": round(res["bm25"][0], 1),
        "rank_qps": round(res["rank"][0], 1),
        "ndcg10_bm25": round(res["bm25"][2], 4),
        "rss_start_mb": round(rss_start, 1),
        "rss_data_mb": round(rss_data, 1),
        "rss_ingest_mb": round(rss_ingest, 1),
        "db_mb": round(db_bytes / 1e6, 2),
    }), flush=True)


if __name__ == "__main__":
    main()
