"""bench/peers/ann_peer.py DIR --dim D: the peers of bench/ann.lua on its data.

hnswlib (Debian python3-hnswlib 0.6.2) and FAISS (python3-faiss 1.7.3) on
DIR/base.f32 and DIR/query.f32 (raw little-endian float32 rows of D) with
DIR/gt.i32 (int32, the exact top-k row numbers per query; the first 10 are
used). Run it with /usr/bin/python3, whose dist-packages hold them:

  /usr/bin/python3 bench/peers/ann_peer.py /tmp/rag-ann-... --dim 128

Everything runs on one thread (hnswlib num_threads=1, FAISS
omp_set_num_threads(1), BLAS threads 1). hnswlib: Index(space='ip'), M 16,
ef_construction 200, random_seed 100, rows added in order with label = row
number; build is one timed add_items. For each ef: recall@10 against gt and
queries/s one query at a time (a Python loop of knn_query on single rows,
which includes the binding's per-call cost, as the Lua loop does), and
queries/s for one knn_query call on all queries (no per-call cost). FAISS:
IndexFlatIP, queries/s one at a time and in one batch, recall@10 of the
batch. Times are time.process_time (CPU time, as the Lua side's os.clock), each the median of 3 passes.

Output, one fact per line (bench/ann.lua parses these):
  peer python 3.11.2 numpy 1.24.2 hnswlib 0.6.2 faiss 1.7.3
  hnswlib build_s 12.3
  hnswlib ef 64 recall 0.9700 qps 1234 batch_qps 2345
  faiss flat_qps 456 batch_qps 7890 recall 1.0000
"""

import os
import sys

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"  # before numpy and faiss load their thread pools

import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import faiss  # noqa: E402
import hnswlib  # noqa: E402
import numpy as np  # noqa: E402

EFS = (16, 24, 32, 48, 64, 96, 128, 192, 256)
K = 10
PASSES = 3


def usage():
    sys.exit("usage: ann_peer.py DIR --dim D")


def parse_args(argv):
    d, dim = None, None
    i = 0
    while i < len(argv):
        if argv[i] == "--dim" and i + 1 < len(argv):
            dim = int(argv[i + 1])
            i += 2
        elif not argv[i].startswith("--") and d is None:
            d = argv[i]
            i += 1
        else:
            usage()
    if d is None or dim is None or dim <= 0:
        usage()
    return d, dim


def read_rows(path, dim):
    a = np.fromfile(path, dtype="<f4")
    if a.size % dim:
        sys.exit(f"ann_peer: {path}: {a.size} floats is not a multiple of dim {dim}")
    return np.ascontiguousarray(a.reshape(-1, dim), dtype=np.float32)


def deb_version(pkg, fallback):
    """The Debian package version (python metadata can lag: hnswlib says 0.6.1)."""
    if shutil.which("dpkg-query"):
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg],
                           capture_output=True, text=True, check=False)
        if r.returncode == 0 and r.stdout:
            return r.stdout.split("-")[0]
    return fallback


def simd_of(path):
    """Whether a shared object holds AVX (ymm) code; Debian builds for baseline x86-64."""
    if not shutil.which("objdump"):
        return "unknown"
    r = subprocess.run(["objdump", "-d", path], capture_output=True, text=True, check=False)
    return "avx" if "ymm" in r.stdout else "sse-only"


def recall(found, gt):
    hits = 0
    for row, want in zip(found, gt):
        hits += len(set(int(x) for x in row[:K]) & set(int(x) for x in want[:K]))
    return hits / (K * len(gt))


def timed(fn):
    """The median seconds of PASSES calls of fn, and its last result."""
    times, out = [], None
    for _ in range(PASSES):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), out


def bench_hnswlib(base, queries, gt, dim):
    n = base.shape[0]
    nq = queries.shape[0]
    p = hnswlib.Index(space="ip", dim=dim)
    p.init_index(max_elements=n, M=16, ef_construction=200, random_seed=100)
    p.set_num_threads(1)
    t0 = time.process_time()
    p.add_items(base, np.arange(n), num_threads=1)
    print(f"hnswlib build_s {time.process_time() - t0:.3f}", flush=True)
    rows = [queries[i:i + 1] for i in range(nq)]

    def one_at_a_time():
        return [p.knn_query(q, k=K, num_threads=1)[0][0] for q in rows]

    def batch():
        return p.knn_query(queries, k=K, num_threads=1)[0]

    for ef in EFS:
        p.set_ef(ef)
        t, found = timed(one_at_a_time)
        tb, _ = timed(batch)
        print(f"hnswlib ef {ef} recall {recall(found, gt):.4f} qps {nq / t:.0f}"
              f" batch_qps {nq / tb:.0f}", flush=True)


def bench_faiss(base, queries, gt):
    nq = queries.shape[0]
    faiss.omp_set_num_threads(1)
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(base)
    rows = [queries[i:i + 1] for i in range(nq)]

    def one_at_a_time():
        return [index.search(q, K)[1][0] for q in rows]

    def batch():
        return index.search(queries, K)[1]

    t, found1 = timed(one_at_a_time)
    tb, found = timed(batch)
    print(f"faiss flat_qps {nq / t:.0f} batch_qps {nq / tb:.0f} recall {recall(found, gt):.4f}"
          f" one_recall {recall(found1, gt):.4f}", flush=True)


def main():
    d, dim = parse_args(sys.argv[1:])
    base = read_rows(os.path.join(d, "base.f32"), dim)
    queries = read_rows(os.path.join(d, "query.f32"), dim)
    nq = queries.shape[0]
    gt = np.fromfile(os.path.join(d, "gt.i32"), dtype="<i4")
    if nq == 0 or gt.size % nq or gt.size // nq < K:
        sys.exit(f"ann_peer: gt.i32 holds {gt.size} ints, not >= {K} per query for {nq}")
    gt = gt.reshape(nq, -1)
    print(f"peer python {platform.python_version()} numpy {np.__version__}"
          f" hnswlib {deb_version('python3-hnswlib', '?')}"
          f" faiss {deb_version('python3-faiss', faiss.__version__)}", flush=True)
    print(f"peer build hnswlib {simd_of(hnswlib.__file__)}"
          f" faiss {faiss.get_compile_options().strip() or '?'}", flush=True)
    print(f"peer data n {base.shape[0]} dim {dim} nq {nq}", flush=True)
    bench_hnswlib(base, queries, gt, dim)
    bench_faiss(base, queries, gt)


if __name__ == "__main__":
    main()
