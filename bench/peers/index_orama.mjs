// bench/peers/index_orama.mjs DATA VECDIR NODE_MODULES [PASSES]: the Orama
// peer of bench/index.lua. Orama (@orama/orama, pinned in
// bench/peers/package.json), an in-memory JS index, on SciFact (DATA/scifact)
// and the vectors of bench/peers/export_vectors.lua (VECDIR).
//
// Ingest (docs/s = 5183 / seconds, median of PASSES, default 3): timed from
// the documents as ready JS objects { id, title, text, embedding } to the
// end of create() plus insertMultiple(db, docs) (its defaults: one
// synchronous call, batches of 1,000). Orama's schema check accepts only a
// plain Array for a vector, so each embedding is an Array of 512 numbers,
// which Orama copies into a Float32Array of its own. Orama indexes every
// string property of the schema, so two schemas are timed:
//   briefed:   { id: "string", title: "string", text: "string",
//                embedding: "vector[512]" } (id and title are indexed too);
//   text-only: { text: "string", embedding: "vector[512]" }, id and title
//              kept in the stored document but not indexed (the work the
//              other systems do: BM25 over text, plus the vectors).
// Also the briefed schema with insert() called once per document in a loop.
// Orama's defaults otherwise: English tokenizer, no stemming, no stop words.
// Not timed: reading and parsing the files, building the document objects.
//
// Queries (queries/s, sequential, over the 300 judged test queries; hybrid
// and vector: median of PASSES passes, the first of which also gives
// nDCG@10; hybrid_sim0 and fulltext: one pass, which takes 30 to 60 s), on
// the briefed-schema index of the last ingest:
//   hybrid:      search(db, { mode: "hybrid", term, vector: { value,
//                property: "embedding" }, properties: ["text"], limit: 10 })
//                with Orama's defaults otherwise: similarity 0.8, weights
//                0.5/0.5 on max-normalised scores (not RRF). On these
//                hashing vectors no query reaches a cosine of 0.8 (the
//                best is about 0.4), so the vector side scans every vector
//                and returns nothing: the ranking is the full-text one;
//   hybrid_sim0: the same with similarity 0, so that every document with a
//                cosine >= 0 enters the fusion (Orama has no top-k for the
//                vector side of a hybrid search);
//   fulltext:    mode "fulltext" (Orama's BM25), properties ["text"]; it
//                matches each query word as a prefix in its radix tree
//                ("show" also finds shows, shown; "0" every token that
//                starts with 0) and sums the BM25 of all of them, which
//                with no stems and no stop words is why its nDCG@10 on
//                SciFact is far below the others';
//   vector:      mode "vector", similarity 0, limit 10.
// Each hit returns the stored document (id, title, text; vectors removed).
// Memory: VmRSS (/proc/self/status) at start, with the data and document
// objects ready, and after the first ingest (briefed schema, the first
// ingest of the process); VmHWM at the end. Run node with --expose-gc so
// that the garbage of one ingest is collected before the next is timed.
// Output: readable lines on stderr, one JSON line on stdout.
//   make bench-index-peers DATA=../shared/data
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { loadSciFact, ndcg10, procMB, median, since, machine, round } from "./index_data.mjs";

const [data, vecdir, modulesArg] = process.argv.slice(2);
if (!data || !vecdir || !modulesArg) {
  console.error("usage: index_orama.mjs DATA VECDIR NODE_MODULES [PASSES]");
  process.exit(2);
}
const passes = Number(process.argv[5]) || 3;
const modules = path.resolve(modulesArg);
const require = createRequire(path.join(modules, "resolve-from-here.js"));
const orama = require("@orama/orama");
const version = JSON.parse(readFileSync(path.join(modules, "@orama/orama/package.json"), "utf8"))
  .version;
const log = (s) => console.error(s);

const rssBase = procMB();
const { docs, queries, qrels, dim } = loadSciFact(data, vecdir);
const objects = docs.map((d) => ({
  id: d.id,
  title: d.title,
  text: d.text,
  embedding: Array.from(d.vector), // insert() accepts only an Array
}));
const rssData = procMB();
const n = docs.length;
const vtype = `vector[${dim}]`;
const schemas = {
  briefed: { id: "string", title: "string", text: "string", embedding: vtype },
  text_only: { text: "string", embedding: vtype },
};

// Collects the garbage of the previous pass when node runs with --expose-gc
// (make bench-index-peers does), so that no pass pays for another's.
const gc = globalThis.gc ?? (() => {});

// One timed ingest: { secs, db }.
async function ingest(schema, loop) {
  gc();
  const t0 = process.hrtime.bigint();
  const db = orama.create({ schema });
  if (loop) {
    for (const d of objects) await orama.insert(db, d);
  } else {
    await orama.insertMultiple(db, objects);
  }
  return { secs: since(t0), db };
}

log(`orama: @orama/orama ${version}`);
log(`orama: ${machine()}`);
log(`orama: ${n} documents, ${queries.length} test queries, dim ${dim}, median of ${passes}` +
  (globalThis.gc ? "" : " (no --expose-gc: garbage of one pass may be collected in the next)"));

// The first ingest of the process gives the RSS; the last one is searched.
// The passes of each kind take turns, so that a change in the machine's
// load falls on all of them.
const runs = { briefed: [], briefed_loop: [], text_only: [] };
runs.briefed.push((await ingest(schemas.briefed, false)).secs);
const rssIngest = procMB();
let db;
for (let i = 0; i < passes; i++) {
  db = undefined;
  runs.briefed_loop.push((await ingest(schemas.briefed, true)).secs);
  runs.text_only.push((await ingest(schemas.text_only, false)).secs);
  if (i > 0 || passes === 1) {
    const r = await ingest(schemas.briefed, false);
    if (i > 0) runs.briefed.push(r.secs);
    db = r.db;
  }
}
const rate = (xs) => n / median(xs);
const labels = {
  briefed: "briefed schema, insertMultiple",
  briefed_loop: "briefed schema, insert loop",
  text_only: "text-only schema, insertMultiple",
};
for (const [k, xs] of Object.entries(runs)) {
  log(`orama: ingest ${labels[k].padEnd(33)} ${rate(xs).toFixed(0).padStart(6)} docs/s ` +
    `(${xs.map((s) => s.toFixed(3)).join(" ")} s)`);
}
log(`orama: RSS ${rssBase.toFixed(0)} MB at start, ${rssData.toFixed(0)} MB with the data ` +
  `and documents ready, ${rssIngest.toFixed(0)} MB after the first ingest`);

const vec = (q) => ({ value: q.vector, property: "embedding" });
const text = ["text"];
const kinds = {
  hybrid: (q) => orama.search(db, { mode: "hybrid", term: q.text, vector: vec(q),
    properties: text, limit: 10 }),
  hybrid_sim0: (q) => orama.search(db, { mode: "hybrid", term: q.text, vector: vec(q),
    properties: text, similarity: 0, limit: 10 }),
  fulltext: (q) => orama.search(db, { mode: "fulltext", term: q.text, properties: text,
    limit: 10 }),
  vector: (q) => orama.search(db, { mode: "vector", vector: vec(q), similarity: 0, limit: 10 }),
};

// queries/s and nDCG@10. The first pass gives the results and is timed too;
// the kinds in `repeat` get passes - 1 more and report the median (a pass of
// hybrid_sim0 or fulltext takes 30 to 60 s here, so they are timed once).
const repeat = new Set(["hybrid", "vector"]);
async function measure(kind, fn) {
  const run = new Map();
  const times = [];
  let t0 = process.hrtime.bigint();
  for (const q of queries) run.set(q.id, (await fn(q)).hits.map((h) => h.document.id));
  times.push(since(t0));
  for (let p = 1; p < (repeat.has(kind) ? passes : 1); p++) {
    t0 = process.hrtime.bigint();
    for (const q of queries) await fn(q);
    times.push(since(t0));
  }
  return { qps: queries.length / median(times), times, ndcg: ndcg10(run, qrels) };
}

const res = {};
for (const [kind, fn] of Object.entries(kinds)) {
  res[kind] = await measure(kind, fn);
  log(`orama: ${kind.padEnd(11)} top-10 ${res[kind].qps.toFixed(1).padStart(7)} queries/s ` +
    `nDCG@10 ${res[kind].ndcg.toFixed(4)} ` +
    `(${res[kind].times.map((s) => s.toFixed(3)).join(" ")} s)`);
}
const hwm = procMB("VmHWM");
log(`orama: VmHWM ${hwm.toFixed(0)} MB at the end`);

console.log(JSON.stringify({
  peer: "orama",
  version,
  node: process.version,
  docs: n,
  queries: queries.length,
  dim,
  passes,
  ingest: "insertMultiple",
  ingest_docs_s: round(rate(runs.briefed), 0),
  ingest_loop_docs_s: round(rate(runs.briefed_loop), 0),
  ingest_text_only_docs_s: round(rate(runs.text_only), 0),
  hybrid_qps: round(res.hybrid.qps),
  hybrid_sim0_qps: round(res.hybrid_sim0.qps),
  fulltext_qps: round(res.fulltext.qps),
  vector_qps: round(res.vector.qps),
  ndcg10_hybrid: round(res.hybrid.ndcg, 4),
  ndcg10_hybrid_sim0: round(res.hybrid_sim0.ndcg, 4),
  ndcg10_fulltext: round(res.fulltext.ndcg, 4),
  ndcg10_vector: round(res.vector.ndcg, 4),
  rss_start_mb: round(rssBase),
  rss_data_mb: round(rssData),
  rss_ingest_mb: round(rssIngest),
  hwm_mb: round(hwm),
}));
