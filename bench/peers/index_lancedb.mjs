// bench/peers/index_lancedb.mjs DATA VECDIR NODE_MODULES [PASSES]: the LanceDB
// peer of bench/index.lua. LanceDB for Node (@lancedb/lancedb, pinned in
// bench/peers/package.json with apache-arrow) on SciFact (DATA/scifact) and
// the vectors of bench/peers/export_vectors.lua (VECDIR), a local table in a
// fresh temporary directory (os.tmpdir(), on disk) for every pass.
//
// Ingest (docs/s = 5183 / seconds, median of PASSES, default 5): the timed
// part starts with the documents as JS arrays (ids, titles, texts) and the
// vectors as one Float32Array, and covers building the Arrow table
// (apache-arrow vectors, the fast path; the float32 rows are wrapped without
// copying), connect, createTable and createIndex("text", Index.fts()) with
// LanceDB's defaults, which in 0.37.1 are: tokenizer "simple", English,
// lower case, Snowball stems, stop words removed, ASCII folding, no
// positions, tokens up to 40 bytes (printed from listIndices() at each run).
// createIndex returns when the index is built. (a) text
// only: columns id, title, text; (b) with vectors: plus `vector`
// FixedSizeList<float32>[512]; no vector index is made (LanceDB builds none
// unless asked, and searches by scanning all rows). Also (a) with
// Index.fts({ stem: false, removeStopWords: false, asciiFolding: false }),
// which builds in about half the time: the defaults' stemming is most of
// the cost. Not timed: reading and parsing the files, removing the directory.
//
// Queries (queries/s, sequential, one await at a time, median of PASSES
// passes over the 300 judged test queries, after one untimed warm-up pass),
// on the table of the last (b) pass: hybrid = query().fullTextSearch(text)
// .nearestTo(vector).rerank(RRFReranker k=60).select(id, title, text)
// .limit(10).toArray() (each side gives its top 10, fused by reciprocal
// rank; the vector side is LanceDB's default L2 distance, the same ranking
// as cosine on these unit vectors; the reranker is called from Rust through
// JS with Arrow buffers); hybrid_default: the same without .rerank(), which
// fuses in Rust with LanceDB's default (RRF; the run counts the queries
// whose top 10 equals hybrid's); bm25: fullTextSearch only; vector:
// nearestTo only; each top 10 with the same columns. nDCG@10 of each
// against qrels/test.tsv (see index_data.mjs). LANCEDB_LOG defaults to
// "error" here: LanceDB warns on stderr at every query that selects columns
// without its score columns, which a hybrid query cannot avoid.
// Memory: VmRSS (/proc/self/status) after loading the data, and after the
// first ingest with vectors (the first ingest of the process); VmHWM at the
// end. Disk: bytes of the files of the (b) table directory. Also the CPU
// time of each ingest (process.cpuUsage, all threads), which a busy machine
// disturbs less than the wall clock, and the CPU seconds per second of the
// query passes (above 1: several threads; on two cores it stays near 1).
// Where a vector query's time goes: each reads the whole vector column
// (10.6 MB) from the table's files; analyzePlan() shows about 18 ms in
// LanceRead against about 1 ms of distances.
// Output: readable lines on stderr, one JSON line on stdout.
//   make bench-index-peers DATA=../shared/data
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import {
  loadSciFact, ndcg10, procMB, median, since, duBytes, machine, round,
} from "./index_data.mjs";

const [data, vecdir, modulesArg] = process.argv.slice(2);
if (!data || !vecdir || !modulesArg) {
  console.error("usage: index_lancedb.mjs DATA VECDIR NODE_MODULES [PASSES]");
  process.exit(2);
}
const passes = Number(process.argv[5]) || 5;
const modules = path.resolve(modulesArg);
const require = createRequire(path.join(modules, "resolve-from-here.js"));
// A deprecation warning per query otherwise (see above).
process.env.LANCEDB_LOG ??= "error";
const lancedb = require("@lancedb/lancedb");
const arrow = require("apache-arrow");
const pkg = (name) => {
  const { readFileSync } = require("node:fs");
  return JSON.parse(readFileSync(path.join(modules, name, "package.json"), "utf8")).version;
};
const version = pkg("@lancedb/lancedb");
const log = (s) => console.error(s);

const rssBase = procMB();
const { docs, queries, qrels, dim, corpusVec } = loadSciFact(data, vecdir);
const rssData = procMB();
const ids = docs.map((d) => d.id);
const titles = docs.map((d) => d.title);
const texts = docs.map((d) => d.text);
const n = docs.length;

// The Arrow table of the documents, with or without the vector column.
function arrowTable(withVectors) {
  const cols = {
    id: arrow.vectorFromArray(ids, new arrow.Utf8()),
    title: arrow.vectorFromArray(titles, new arrow.Utf8()),
    text: arrow.vectorFromArray(texts, new arrow.Utf8()),
  };
  if (withVectors) {
    const item = new arrow.Field("item", new arrow.Float32(), true);
    const type = new arrow.FixedSizeList(dim, item);
    const child = arrow.makeData({ type: new arrow.Float32(), length: n * dim, data: corpusVec });
    cols.vector = arrow.makeVector(arrow.makeData({ type, length: n, nullCount: 0, child }));
  }
  return new arrow.Table(cols);
}

// Collects the garbage of the previous pass when node runs with --expose-gc
// (make bench-index-peers does), so that no pass pays for another's.
const gc = globalThis.gc ?? (() => {});

// One timed ingest into a fresh directory: { secs, cpu, dir, table }, with
// cpu the CPU seconds of all the process's threads (LanceDB's are several).
async function ingest(withVectors, ftsOptions = {}) {
  gc();
  const dir = mkdtempSync(path.join(os.tmpdir(), "rag-lancedb-"));
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const db = await lancedb.connect(dir);
  const table = await db.createTable("docs", arrowTable(withVectors));
  await table.createIndex("text", { config: lancedb.Index.fts(ftsOptions) });
  const secs = since(t0);
  const c = process.cpuUsage(c0);
  return { secs, cpu: (c.user + c.system) / 1e6, dir, table };
}

async function drop(r) {
  r.table.close();
  rmSync(r.dir, { recursive: true, force: true });
}

log(`lancedb: @lancedb/lancedb ${version}, apache-arrow ${pkg("apache-arrow")}`);
log(`lancedb: ${machine()}`);
log(`lancedb: ${n} documents, ${queries.length} test queries, dim ${dim}, ` +
  `tables in ${os.tmpdir()}, median of ${passes}`);

// (b) first: the RSS after the process's first ingest. Then the passes of
// each kind take turns, so that a change in the machine's load falls on all.
const plain = { stem: false, removeStopWords: false, asciiFolding: false };
const withVec = [];
const textOnly = [];
const textPlain = [];
let last = await ingest(true);
const rssIngest = procMB();
const diskBytes = duBytes(last.dir);
withVec.push(last);
for (let i = 0; i < passes; i++) {
  const r = await ingest(false);
  textOnly.push(r);
  await drop(r);
  const p = await ingest(false, plain);
  textPlain.push(p);
  await drop(p);
  if (i > 0) {
    await drop(last);
    last = await ingest(true);
    withVec.push(last);
  }
}
const table = last.table;
const fts = (await table.listIndices()).find((x) => x.indexType === "FTS");
log(`lancedb: FTS index ${JSON.stringify(fts?.indexDetails ?? fts)}`);
const rate = (rs) => n / median(rs.map((r) => r.secs));
const cpuRate = (rs) => n / median(rs.map((r) => r.cpu));
const secsOf = (rs) => rs.map((r) => `${r.secs.toFixed(3)}`).join(" ");
log(`lancedb: ingest text only    ${rate(textOnly).toFixed(0)} docs/s ` +
  `(${secsOf(textOnly)} s; ${cpuRate(textOnly).toFixed(0)} docs per CPU second)`);
log(`lancedb: ingest with vectors ${rate(withVec).toFixed(0)} docs/s ` +
  `(${secsOf(withVec)} s; ${cpuRate(withVec).toFixed(0)} docs per CPU second)`);
log(`lancedb: ingest text only, FTS without stems/stop words/folding ` +
  `${rate(textPlain).toFixed(0)} docs/s (${secsOf(textPlain)} s)`);
log(`lancedb: RSS ${rssBase.toFixed(0)} MB at start, ${rssData.toFixed(0)} MB with the data ` +
  `loaded, ${rssIngest.toFixed(0)} MB after the first ingest with vectors; ` +
  `table on disk ${(diskBytes / 1e6).toFixed(1)} MB`);

const cols = ["id", "title", "text"];
const rrf = await lancedb.rerankers.RRFReranker.create(60);
const kinds = {
  hybrid: (q) => table.query().fullTextSearch(q.text).nearestTo(q.vector).rerank(rrf)
    .select(cols).limit(10).toArray(),
  hybrid_default: (q) => table.query().fullTextSearch(q.text).nearestTo(q.vector)
    .select(cols).limit(10).toArray(),
  bm25: (q) => table.query().fullTextSearch(q.text).select(cols).limit(10).toArray(),
  vector: (q) => table.query().nearestTo(q.vector).select(cols).limit(10).toArray(),
};

// queries/s (median of `passes` timed passes after a warm-up) and nDCG@10.
async function measure(fn) {
  const run = new Map();
  for (const q of queries) run.set(q.id, (await fn(q)).map((r) => r.id));
  const times = [];
  const c0 = process.cpuUsage();
  for (let p = 0; p < passes; p++) {
    const t0 = process.hrtime.bigint();
    for (const q of queries) await fn(q);
    times.push(since(t0));
  }
  const c = process.cpuUsage(c0);
  const cpu = (c.user + c.system) / 1e6 / times.reduce((a, b) => a + b, 0);
  return { qps: queries.length / median(times), times, cpu, ndcg: ndcg10(run, qrels), run };
}

const res = {};
for (const [kind, fn] of Object.entries(kinds)) {
  res[kind] = await measure(fn);
  log(`lancedb: ${kind.padEnd(14)} top-10 ${res[kind].qps.toFixed(1).padStart(7)} queries/s ` +
    `nDCG@10 ${res[kind].ndcg.toFixed(4)} ` +
    `(${res[kind].times.map((s) => s.toFixed(3)).join(" ")} s; ` +
    `${res[kind].cpu.toFixed(2)} CPU s per s)`);
}
let same = 0;
for (const [q, ids] of res.hybrid.run) {
  if (ids.join() === res.hybrid_default.run.get(q).join()) same++;
}
log(`lancedb: hybrid_default (no rerank() call, LanceDB's built-in fusion) gives the ` +
  `same top 10 as RRFReranker(60) for ${same} of ${queries.length} queries`);
const hwm = procMB("VmHWM");
log(`lancedb: VmHWM ${hwm.toFixed(0)} MB at the end`);
await drop(last);

console.log(JSON.stringify({
  peer: "lancedb",
  version,
  apache_arrow: pkg("apache-arrow"),
  node: process.version,
  docs: n,
  queries: queries.length,
  dim,
  passes,
  ingest_text_docs_s: round(rate(textOnly), 0),
  ingest_vec_docs_s: round(rate(withVec), 0),
  ingest_text_plain_docs_s: round(rate(textPlain), 0),
  ingest_text_docs_cpu_s: round(cpuRate(textOnly), 0),
  ingest_vec_docs_cpu_s: round(cpuRate(withVec), 0),
  hybrid_qps: round(res.hybrid.qps),
  hybrid_default_qps: round(res.hybrid_default.qps),
  hybrid_default_same_top10: same,
  bm25_qps: round(res.bm25.qps),
  vector_qps: round(res.vector.qps),
  ndcg10_hybrid: round(res.hybrid.ndcg, 4),
  ndcg10_bm25: round(res.bm25.ndcg, 4),
  ndcg10_vector: round(res.vector.ndcg, 4),
  rss_start_mb: round(rssBase),
  rss_data_mb: round(rssData),
  rss_ingest_mb: round(rssIngest),
  hwm_mb: round(hwm),
  disk_mb: round(diskBytes / 1e6, 2),
}));
