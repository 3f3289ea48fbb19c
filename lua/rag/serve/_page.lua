--- rag.serve._page: the search page `rag serve` sends for GET / (one HTML
-- string: inline CSS and script, no external URL, works offline). It talks
-- to the server's POST search and ask (relative URLs, so the page also works
-- under a location prefix) and never puts document text into innerHTML: the
-- documents are untrusted, so every text becomes a DOM text node.
-- @module rag.serve._page
return [==[
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<link rel="icon" href="data:,">
<title>rag search</title>
<style>
:root { --bg: #fff; --fg: #1b1b1b; --muted: #5a5a5a; --line: #d4d4d8; --card: #f6f6f7;
  --accent: #0a58b0; --mark: #ffe27a; --mark-fg: #1b1b1b; --flash: #fff1a8;
  --err-bg: #fdecea; --err-fg: #8a1c12; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #141416; --fg: #e6e6e6; --muted: #a3a3a8; --line: #3a3a40;
    --card: #1d1d21; --accent: #8cc2ff; --mark: #705c00; --mark-fg: #fff;
    --flash: #4d4200; --err-bg: #3d1714; --err-fg: #ffb4a8; }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 52rem; margin: 0 auto; padding: 1rem; }
h1 { font-size: 1.4rem; margin: 0 0 0.75rem; }
a { color: var(--accent); }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
form { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: center; }
.modes { display: inline-flex; border: 1px solid var(--line); border-radius: 6px;
  margin: 0; padding: 0; }
.modes label { padding: 0.35rem 0.8rem; cursor: pointer; }
.modes input { position: absolute; opacity: 0; width: 1px; height: 1px; }
.modes label:has(input:checked) { background: var(--accent); color: var(--bg); }
.modes label:has(input:focus-visible) { outline: 3px solid var(--accent); outline-offset: 2px; }
#q { flex: 1 1 16rem; min-width: 0; font: inherit; padding: 0.45rem 0.6rem;
  border: 1px solid var(--line); border-radius: 6px; background: var(--bg); color: inherit; }
select, button { font: inherit; padding: 0.4rem 0.6rem; border: 1px solid var(--line);
  border-radius: 6px; background: var(--card); color: inherit; }
button { cursor: pointer; }
.sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
[hidden] { display: none !important; }
#status { color: var(--muted); min-height: 1.5em; margin: 0.6rem 0; }
#error { background: var(--err-bg); color: var(--err-fg); border-radius: 6px;
  padding: 0.6rem 0.8rem; margin: 0.6rem 0; overflow-wrap: anywhere; }
ol.list { list-style: none; padding: 0; margin: 0; }
.item { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: 0.7rem 0.9rem; margin: 0 0 0.8rem; scroll-margin: 1rem; }
.item h2, .item h3 { font-size: 1.05rem; margin: 0 0 0.2rem; overflow-wrap: anywhere; }
.meta { color: var(--muted); font-size: 0.85rem; margin: 0 0 0.4rem; overflow-wrap: anywhere; }
.meta span { white-space: nowrap; }
.meta span.long { white-space: normal; }
.meta span:not(:last-child)::after { content: "\00a0·"; }
.text { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; position: relative; }
.text.clamped { max-height: 9em; overflow: hidden;
  mask-image: linear-gradient(#000 calc(100% - 1.5em), transparent); }
.text.clamped.cut { mask-image: linear-gradient(transparent, #000 1.5em,
  #000 calc(100% - 1.5em), transparent); }
.more { margin-top: 0.4rem; font-size: 0.85rem; padding: 0.15rem 0.5rem; }
mark { background: var(--mark); color: var(--mark-fg); border-radius: 2px; }
#answer { margin: 0.5rem 0 1rem; }
#answer-text { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 1.05rem; }
#answer h2 { font-size: 1.1rem; margin: 1rem 0 0.5rem; }
.note { color: var(--muted); font-style: italic; }
a.cite { text-decoration: none; font-weight: 600; }
.flash { animation: flash 1.6s ease-out; }
@keyframes flash { from { background: var(--flash); } }
@media (prefers-reduced-motion: reduce) {
  .flash { animation: none; outline: 3px solid var(--accent); }
}
</style>
</head>
<body>
<main>
<h1>rag</h1>
<form id="form" role="search">
  <fieldset class="modes"><legend class="sr">Mode</legend>
    <label><input type="radio" name="mode" value="search" checked> Search</label>
    <label><input type="radio" name="mode" value="ask"> Ask</label>
  </fieldset>
  <label for="q" class="sr">Query</label>
  <input id="q" type="search" name="q" autocomplete="off" autofocus
    placeholder="Search the documents">
  <label class="sr" for="retrieval">Retrieval</label>
  <select id="retrieval" title="Retrieval">
    <option value="">default</option><option>hybrid</option>
    <option>bm25</option><option>vector</option>
  </select>
  <label class="sr" for="pipeline">Pipeline</label>
  <select id="pipeline" title="Pipeline" hidden>
    <option>hybrid</option><option>naive</option><option>fusion</option><option>hyde</option>
    <option>stepback</option><option>window</option><option>multihop</option>
    <option>adaptive</option><option>corrective</option>
  </select>
  <button id="go" type="submit">Search</button>
  <label id="token-box" hidden>Token
    <input id="token" type="password" autocomplete="off" size="12"></label>
</form>
<p id="status" role="status" aria-live="polite">Type words and press Enter.</p>
<div id="error" role="alert" hidden></div>
<section id="answer" aria-labelledby="answer-h" hidden>
  <h2 id="answer-h" class="sr">Answer</h2>
  <div id="answer-text" aria-live="polite"></div>
  <h2 id="sources-h">Sources</h2>
  <ol id="sources" class="list" aria-labelledby="sources-h"></ol>
</section>
<ol id="results" class="list" aria-label="Results"></ol>
</main>
<script>
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const form = $("form"), q = $("q"), retrieval = $("retrieval"), pipeline = $("pipeline");
  const go = $("go"), statusLine = $("status"), errorBox = $("error"), results = $("results");
  const answer = $("answer"), answerText = $("answer-text"), sources = $("sources");
  const token = $("token");
  const encoder = new TextEncoder(), decoder = new TextDecoder();
  const smooth = !matchMedia("(prefers-reduced-motion: reduce)").matches;
  let inflight = null, shown = location.search;

  class ServerError extends Error {
    constructor(code, message) { super(message); this.code = code; }
  }

  // An element with attributes and children; strings become text nodes.
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    e.append(...kids.filter((k) => k !== null && k !== undefined));
    return e;
  }

  // text with the 1-based inclusive byte spans (sorted, non-overlapping)
  // wrapped in <mark>; spans outside the text or out of order are skipped.
  function marked(text, spans) {
    const bytes = encoder.encode(text), out = document.createDocumentFragment();
    let at = 0;
    for (const s of Array.isArray(spans) ? spans : []) {
      const from = Array.isArray(s) ? s[0] - 1 : NaN, to = Array.isArray(s) ? s[1] : NaN;
      if (!Number.isInteger(from) || !Number.isInteger(to) || from < at || to <= from ||
        to > bytes.length) continue;
      out.append(decoder.decode(bytes.subarray(at, from)),
        el("mark", null, decoder.decode(bytes.subarray(from, to))));
      at = to;
    }
    out.append(decoder.decode(bytes.subarray(at)));
    return out;
  }

  // A long text is shown clamped, scrolled to its first mark, with a toggle.
  function textBlock(content, long) {
    const p = el("p", { class: "text" }, content);
    if (!long) return [p];
    p.classList.add("clamped");
    const more = el("button", { type: "button", class: "more", "aria-expanded": "false" },
      "Show all");
    more.addEventListener("click", () => {
      const open = p.classList.toggle("clamped") === false;
      more.setAttribute("aria-expanded", String(open));
      more.textContent = open ? "Show less" : "Show all";
      if (!open) toFirstMark(p);
    });
    requestAnimationFrame(() => toFirstMark(p));
    return [p, more];
  }

  function toFirstMark(p) {
    const m = p.querySelector("mark");
    const line = parseFloat(getComputedStyle(p).lineHeight);
    const top = m ? m.offsetTop - line : 0; // the mark on the second line shown
    p.scrollTop = top < line / 2 ? 0 : top;
    p.classList.toggle("cut", p.scrollTop > 0);
  }

  // "a · b · c": short items never broken, lines broken only between items
  function metaLine(parts) {
    return el("p", { class: "meta" }, ...parts.filter(Boolean).flatMap((t, i) =>
      [i ? " " : null, el("span", t.length > 24 ? { class: "long" } : null, t)]));
  }

  function setMode(mode) {
    const ask = mode === "ask";
    form.elements.mode.value = ask ? "ask" : "search";
    retrieval.hidden = ask;
    pipeline.hidden = !ask;
    go.textContent = ask ? "Ask" : "Search";
    q.placeholder = ask ? "Ask a question about the documents" : "Search the documents";
  }

  function showError(e) {
    if (e.name === "AbortError") return;
    const net = e instanceof TypeError; // fetch's way of saying so
    const code = e instanceof ServerError ? e.code : net ? "network" : "page";
    const msg = net ? "could not reach the server" : String(e.message).toLowerCase();
    errorBox.replaceChildren(el("strong", null, code), ": " + msg);
    errorBox.hidden = false;
    statusLine.textContent = "";
    if (code === "unauthorized") $("token-box").hidden = false;
  }

  async function post(path, body, accept) {
    if (inflight) inflight.abort();
    inflight = new AbortController();
    const headers = { "Content-Type": "application/json", Accept: accept };
    if (token.value) headers.Authorization = "Bearer " + token.value;
    const res = await fetch(path, { method: "POST", headers, body: JSON.stringify(body),
      signal: inflight.signal });
    if (res.ok) return res;
    let err = null;
    try { err = (await res.json()).error; } catch (_) { /* not JSON */ }
    throw new ServerError(err && err.code || "http " + res.status,
      err && err.message || res.statusText || "request failed");
  }

  async function search(query) {
    const body = { query, k: 10 };
    if (retrieval.value) body.mode = retrieval.value;
    statusLine.textContent = "Searching…";
    const data = await (await post("search", body, "application/json")).json();
    const hits = data.hits || [];
    results.replaceChildren(...hits.map((h, i) => el("li", { class: "item" },
      el("h2", null, `${i + 1}. `, h.title || h.doc_id || h.id),
      metaLine([h.source, h.doc_id && h.doc_id !== h.source ? "id\u00a0" + h.doc_id : null,
        "score " + Number(h.score).toFixed(4),
        h.ranks && h.ranks.bm25 ? "bm25 #" + h.ranks.bm25 : null,
        h.ranks && h.ranks.vector ? "vector #" + h.ranks.vector : null]),
      ...textBlock(marked(h.text || "", h.highlights), (h.text || "").length > 600))));
    const took = Number(data.took_ms).toFixed(1);
    statusLine.textContent = hits.length === 0 ? "No results." :
      `${hits.length} result${hits.length === 1 ? "" : "s"} in ${took} ms`;
  }

  // The answer's [n] markers as links to the listed sources.
  function linked(text, cited) {
    const out = document.createDocumentFragment(), re = /\[(\d+)\]/g;
    let at = 0, m;
    while ((m = re.exec(text)) !== null) {
      if (!cited.has(m[1])) continue;
      out.append(text.slice(at, m.index),
        el("a", { href: "#src-" + m[1], class: "cite", "aria-label": "source " + m[1] }, m[0]));
      at = m.index + m[0].length;
    }
    out.append(text.slice(at));
    return out;
  }

  function showAnswer(d) {
    const cites = Array.isArray(d.citations) ? d.citations : [];
    const cited = new Set(cites.map((c) => String(c.n)));
    answerText.replaceChildren(linked(String(d.text || ""), cited));
    if (d.grounded === false) answerText.append(el("p", { class: "note" },
      "The sources do not support a grounded answer."));
    sources.replaceChildren(...cites.map((c) => el("li",
      { class: "item", id: "src-" + c.n, tabindex: "-1" },
      el("h3", null, `[${c.n}] `, c.title || c.doc_id || c.id || ""),
      metaLine([c.source, c.doc_id && c.doc_id !== c.source ? "id\u00a0" + c.doc_id : null,
        c.start ? `bytes ${c.start}–${c.stop}` : null]),
      ...textBlock(c.text || "", (c.text || "").length > 600))));
    $("sources-h").hidden = cites.length === 0;
  }

  // One Server-Sent Event block; true when the stream is done.
  function onEvent(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line === "" || line[0] === ":") continue;
      const c = line.indexOf(":"), field = c < 0 ? line : line.slice(0, c);
      const value = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
      if (field === "event") name = value; else if (field === "data") data.push(value);
    }
    const d = data.length ? JSON.parse(data.join("\n")) : {};
    if (name === "token") answerText.append(String(d.text || ""));
    else if (name === "citations") showAnswer(d);
    else if (name === "error") {
      throw new ServerError(d.error && d.error.code || "error", d.error && d.error.message || "");
    }
    return name === "done";
  }

  async function ask(question) {
    answer.hidden = false;
    answerText.replaceChildren();
    sources.replaceChildren();
    $("sources-h").hidden = true;
    answer.setAttribute("aria-busy", "true");
    statusLine.textContent = "Answering…";
    const body = { question, pipeline: pipeline.value };
    const res = await post("ask", body, "text/event-stream");
    if (!(res.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      showAnswer(await res.json());
    } else {
      const reader = res.body.getReader(), text = new TextDecoder();
      let buf = "", done = false;
      while (!done) {
        const chunk = await reader.read();
        if (chunk.done) break;
        buf = (buf + text.decode(chunk.value, { stream: true })).replace(/\r\n/g, "\n");
        for (let i; !done && (i = buf.indexOf("\n\n")) >= 0; buf = buf.slice(i + 2)) {
          done = onEvent(buf.slice(0, i));
        }
      }
      if (!done) throw new ServerError("stream", "the answer ended before it was complete");
    }
    answer.removeAttribute("aria-busy");
    statusLine.textContent = "Answered.";
  }

  function run(push) {
    const text = q.value.trim();
    if (!text) return;
    const mode = form.elements.mode.value;
    const params = new URLSearchParams({ q: text });
    if (mode === "ask") params.set("mode", "ask");
    const url = "?" + params;
    if (url !== location.search) history[push ? "pushState" : "replaceState"](null, "", url);
    shown = location.search;
    errorBox.hidden = true;
    results.replaceChildren();
    if (mode !== "ask") answer.hidden = true;
    (mode === "ask" ? ask(text) : search(text)).catch((e) => {
      answer.removeAttribute("aria-busy");
      showError(e);
    });
  }

  function fromURL() {
    const p = new URLSearchParams(location.search);
    setMode(p.get("mode"));
    q.value = p.get("q") || "";
    shown = location.search;
    if (q.value.trim()) return run(false);
    if (inflight) inflight.abort();
    results.replaceChildren();
    answer.hidden = errorBox.hidden = true;
    statusLine.textContent = "Type words and press Enter.";
  }

  form.addEventListener("submit", (e) => { e.preventDefault(); run(true); });
  for (const r of form.elements.mode) r.addEventListener("change", () => setMode(r.value));
  answerText.addEventListener("click", (e) => {
    const a = e.target.closest("a.cite"), target = a && $(a.hash.slice(1));
    if (!target) return;
    e.preventDefault();
    target.scrollIntoView({ block: "start", behavior: smooth ? "smooth" : "auto" });
    target.classList.remove("flash");
    void target.offsetWidth; // restarts the animation
    target.classList.add("flash");
    target.focus({ preventScroll: true });
  });
  // back and forward between searches; a change of #fragment alone is no new search
  window.addEventListener("popstate", () => {
    if (location.search !== shown) fromURL();
  });
  fromURL();
})();
</script>
</body>
</html>
]==]
