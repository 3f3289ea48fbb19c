// bench/peers/index_data.mjs: what the Node peers of bench/index.lua
// (index_lancedb.mjs, index_orama.mjs) share: SciFact and the exported
// vectors, nDCG@10, RSS, medians, sizes on disk. Not a script of its own.
//
// The data: DATA/scifact/corpus.jsonl (each document one row: id = _id,
// title, text = title + "\n\n" + text), queries.jsonl and qrels/test.tsv
// (the 300 judged test queries); VECDIR from bench/peers/export_vectors.lua
// (corpus.f32, queries.f32: little-endian float32 rows; ids.json: the ids
// of the rows, checked here against the JSON files).
import { readFileSync, readdirSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";

function float32s(file) {
  const b = readFileSync(file);
  if (b.length % 4 !== 0) throw new Error(`${file}: ${b.length} bytes is not float32 rows`);
  // A copy, so the array starts at an aligned offset of its own buffer.
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
}

function jsonl(file) {
  const out = [];
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (line.trim() !== "") out.push(JSON.parse(line));
  }
  return out;
}

/** Documents, test queries, their vectors and the qrels. */
export function loadSciFact(data, vecdir) {
  const dir = path.join(data, "scifact");
  const meta = JSON.parse(readFileSync(path.join(vecdir, "ids.json"), "utf8"));
  const dim = meta.dim;
  const docs = jsonl(path.join(dir, "corpus.jsonl")).map((d) => ({
    id: d._id,
    title: d.title ?? "",
    text: (d.title ?? "") + "\n\n" + d.text,
  }));
  const qrels = new Map();
  const tsv = readFileSync(path.join(dir, "qrels/test.tsv"), "utf8").split("\n");
  for (const line of tsv.slice(1)) {
    const [q, d, rel] = line.split("\t");
    if (!q || d === undefined) continue;
    if (!qrels.has(q)) qrels.set(q, new Map());
    qrels.get(q).set(d, Number(rel));
  }
  const queries = jsonl(path.join(dir, "queries.jsonl"))
    .filter((q) => qrels.has(q._id))
    .map((q) => ({ id: q._id, text: q.text }));
  const corpusVec = float32s(path.join(vecdir, "corpus.f32"));
  const queryVec = float32s(path.join(vecdir, "queries.f32"));
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  if (!same(meta.corpus, docs.map((d) => d.id)) || corpusVec.length !== docs.length * dim) {
    throw new Error(`${vecdir}: corpus.f32/ids.json do not match ${dir}/corpus.jsonl`);
  }
  if (!same(meta.queries, queries.map((q) => q.id)) || queryVec.length !== queries.length * dim) {
    throw new Error(`${vecdir}: queries.f32/ids.json do not match the test queries`);
  }
  for (let i = 0; i < docs.length; i++) docs[i].vector = corpusVec.subarray(i * dim, (i + 1) * dim);
  for (let i = 0; i < queries.length; i++) {
    queries[i].vector = queryVec.subarray(i * dim, (i + 1) * dim);
  }
  return { docs, queries, qrels, dim, corpusVec, embedder: meta.embedder };
}

/**
 * Mean nDCG@10 over the queries of `run` (query id -> document ids, best
 * first, as the system returned them; ties are not reordered), with the
 * qrels' levels as gains, log2(rank + 1) discounts and the ideal ranking
 * of all judged documents (trec_eval's ndcg_cut.10 up to tie order).
 */
export function ndcg10(run, qrels) {
  let sum = 0;
  for (const [q, judged] of qrels) {
    const ids = run.get(q) ?? [];
    let dcg = 0;
    for (let i = 0; i < Math.min(10, ids.length); i++) {
      dcg += (judged.get(ids[i]) ?? 0) / Math.log2(i + 2);
    }
    const ideal = [...judged.values()].filter((g) => g > 0).sort((a, b) => b - a);
    let idcg = 0;
    for (let i = 0; i < Math.min(10, ideal.length); i++) idcg += ideal[i] / Math.log2(i + 2);
    sum += idcg > 0 ? dcg / idcg : 0;
  }
  return sum / qrels.size;
}

/** VmRSS (or another field, e.g. VmHWM) of this process in MB. */
export function procMB(field = "VmRSS") {
  const re = new RegExp(`^${field}:\\s+(\\d+) kB`, "m");
  const m = readFileSync("/proc/self/status", "utf8").match(re);
  return m ? Number(m[1]) / 1024 : NaN;
}

export const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

/** Seconds since t0 (process.hrtime.bigint(), a monotonic wall clock). */
export const since = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;

/** Bytes of the files under dir. */
export function duBytes(dir) {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    n += e.isDirectory() ? duBytes(p) : statSync(p).size;
  }
  return n;
}

/** One line naming the machine and the load when the run started. */
export function machine() {
  const cpu = os.cpus();
  const load = os.loadavg().map((x) => x.toFixed(2)).join(" ");
  return `${os.type()} ${os.release()} ${os.arch()}, ${cpu[0].model}, ${cpu.length} cores, ` +
    `load ${load}, node ${process.version}`;
}

/** Rounds x to `d` decimals (for the JSON line). */
export const round = (x, d = 1) => Number(x.toFixed(d));
