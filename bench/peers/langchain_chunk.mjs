// bench/peers/langchain_chunk.mjs [DATA_DIR [NODE_MODULES [ROUNDS]]]: the peer
// of bench/chunk.lua's "recursive preset=langchain size=1000 overlap=200".
// LangChain.js's RecursiveCharacterTextSplitter (@langchain/textsplitters)
// with chunkSize 1000, chunkOverlap 200 and its defaults (separators
// "\n\n", "\n", " ", ""; lengths in UTF-16 units) over the SciFact corpus
// (DATA_DIR/scifact/corpus.jsonl, default ../shared/data), each document
// as title + "\n\n" + text, one splitText call per document, awaited in
// turn. Reports MB/s: UTF-8 bytes of input over the median of ROUNDS
// (default 5) passes, timed with process.hrtime (monotonic wall clock).
// Also createDocuments (splitText plus the line locations of each chunk,
// LangChain's nearest thing to offsets) and the corpus as one text.
// The package is not a dependency of rag; install it anywhere and say where:
//   (cd /tmp/lc && npm install @langchain/textsplitters)
//   node bench/peers/langchain_chunk.mjs ../shared/data /tmp/lc/node_modules
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

const data = process.argv[2] || "../shared/data";
const modules = path.resolve(process.argv[3] || path.join(process.cwd(), "node_modules"));
const rounds = Number(process.argv[4]) || 5;

const require = createRequire(path.join(modules, "resolve-from-here.js"));
const { RecursiveCharacterTextSplitter } = require("@langchain/textsplitters");
const version = require("@langchain/textsplitters/package.json").version;

const docs = [];
let bytes = 0;
for (const line of readFileSync(path.join(data, "scifact/corpus.jsonl"), "utf8").split("\n")) {
  if (line.trim() === "") continue;
  const d = JSON.parse(line);
  const text = d.title + "\n\n" + d.text;
  docs.push(text);
  bytes += Buffer.byteLength(text, "utf8");
}
const whole = docs.join("\n\n");
const wholeBytes = Buffer.byteLength(whole, "utf8");

const splitter = new RecursiveCharacterTextSplitter({ chunkSize: 1000, chunkOverlap: 200 });

const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

// Median seconds of `rounds` passes of fn over inputs, and the chunk count.
async function measure(fn, inputs) {
  const times = [];
  let chunks = 0;
  for (let r = 0; r < rounds; r++) {
    let n = 0;
    const t0 = process.hrtime.bigint();
    for (const s of inputs) n += (await fn(s)).length;
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
    chunks = n;
  }
  return { t: median(times), chunks };
}

const cpu = os.cpus();
console.log(`@langchain/textsplitters ${version}, node ${process.version}`);
console.log(`data: ${data}/scifact/corpus.jsonl, ${docs.length} documents, ` +
  `${(bytes / 1e6).toFixed(2)} MB (title, blank line, text)`);
console.log(`machine: ${os.type()} ${os.release()} ${os.arch()}, ${cpu[0].model}, ` +
  `${cpu.length} cores`);
console.log(`RecursiveCharacterTextSplitter chunkSize 1000 chunkOverlap 200, ` +
  `median of ${rounds}, hrtime`);
const rows = [
  ["splitText, one call per document", (s) => splitter.splitText(s), docs, bytes],
  ["createDocuments, one call per document", (s) => splitter.createDocuments([s]), docs, bytes],
  ["splitText, the corpus as one text", (s) => splitter.splitText(s), [whole], wholeBytes],
];
for (const [label, fn, inputs, b] of rows) {
  const { t, chunks } = await measure(fn, inputs);
  console.log(`${label.padEnd(40)} ${(b / t / 1e6).toFixed(1).padStart(7)} MB/s ` +
    `${String(chunks).padStart(7)} chunks`);
}
