#!/usr/bin/env python3
"""spec/serve/checks.py: the HTTP checks of spec/serve/run.sh against a
running `rag serve` (started with --token and --rate 0). Expected values
come from elsewhere: the bin/rag command (search --json, ask), the index's
manifest.json, and the HTTP contract in docs/serving.md.
Prints one line per check, "ok   name ..." or "FAIL name ...".
Usage: checks.py BASE_URL INDEX_DIR TOKEN RAG_BIN"""
import http.client
import json
import re
import subprocess
import sys
import urllib.parse

BASE, DIR, TOKEN, RAG = sys.argv[1:5]
HOST = urllib.parse.urlparse(BASE)
passed = failed = 0


def report(ok, name, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   %s %s" % (name, detail))
    else:
        failed += 1
        print("FAIL %s %s" % (name, detail))
    sys.stdout.flush()


def request(method, path, body=None, headers=None, chunked=False):
    c = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=30)
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    if chunked:
        c.putrequest(method, path)
        for k, v in h.items():
            c.putheader(k, v)
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        for i in range(0, len(body), 8192):
            part = body[i:i + 8192]
            c.send(b"%x\r\n%s\r\n" % (len(part), part))
        c.send(b"0\r\n\r\n")
    else:
        c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def post(path, body, headers=None):
    return request("POST", path, body, headers)


def auth(extra=None):
    h = {"Authorization": "Bearer " + TOKEN}
    h.update(extra or {})
    return h


def cli(*args):
    out = subprocess.run([RAG] + list(args), capture_output=True, text=True, check=True)
    return out.stdout


def manifest():
    with open(DIR + "/manifest.json") as f:
        return json.load(f)


def metrics():
    st, h, data = request("GET", "/metrics")
    vals = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, v = line.rsplit(" ", 1)
            vals[name] = float(v)
    return st, h, vals


# {====== health ======}
st, h, data = request("GET", "/health")
m = manifest()
got = json.loads(data)
want = {"status": "ok", "generation": m["generation"], "documents": m["documents"],
        "chunks": m["chunks"]}
report(st == 200 and got == want and h["content-type"] == "application/json", "health",
       "%s (manifest: %s)" % (got, want))

# {====== search: equal to rag search --json ======}
FIELDS = ["id", "doc_id", "score", "text", "source", "title", "meta", "start", "stop"]


def cli_hits(query, *flags):
    return [json.loads(l) for l in cli("search", DIR, query, "--json", *flags).splitlines()]


def same_hits(name, body, flags):
    st, h, data = post("/search", body)
    if st != 200:
        return report(False, name, "status %d %s" % (st, data[:200]))
    got = json.loads(data)
    want = cli_hits(body["query"], *flags)
    bad = []
    if len(got["hits"]) != len(want):
        bad.append("%d hits, the CLI %d" % (len(got["hits"]), len(want)))
    for g, w in zip(got["hits"], want):
        for f in FIELDS:
            if g.get(f) != w.get(f):
                bad.append("hit %s: %s %r != %r" % (w["rank"], f, g.get(f), w.get(f)))
        if set(g["ranks"]) != {"bm25", "vector"}:
            bad.append("ranks %r" % g["ranks"])
    if got["generation"] != manifest()["generation"] or not isinstance(got["took_ms"],
                                                                        (int, float)):
        bad.append("generation or took_ms: %r" % {k: got[k] for k in got if k != "hits"})
    report(not bad and len(want) > 0, name, "%d hits equal to rag search --json%s" % (
        len(want), ("; " + "; ".join(bad[:3])) if bad else ""))
    return got, want


got, want = same_hits("search_default", {"query": "spring tides"}, [])
same_hits("search_k3_bm25", {"query": "cells protein expression", "k": 3, "mode": "bm25"},
          ["--k", "3", "--mode", "bm25"])
same_hits("search_hybrid", {"query": "cerebral white matter", "k": 5, "mode": "hybrid"},
          ["--k", "5", "--mode", "hybrid"])
same_hits("search_vector", {"query": "newborn brain diffusion", "mode": "vector"},
          ["--mode", "vector"])
same_hits("search_filter", {"query": "tides moon", "filter": {"author": "Ana Reis"}},
          ["--filter", "author=Ana Reis"])
same_hits("search_filter_range", {"query": "tides", "filter": {"year": {"gte": 2024}}},
          ["--filter", "year>=2024"])

# highlights: in text, sorted, apart, each a query word (stemmed: a prefix
# of 4+ letters), and the CLI's snippet spans shifted by the snippet's place
HQ = "Spring tides in cells expressing proteins"
st, h, data = post("/search", {"query": HQ, "k": 10})
hits = json.loads(data)["hits"]
cli_list = cli_hits(HQ)
bad = []
nspans = 0
for g, w in zip(hits, cli_list):
    text = g["text"].encode()
    prev = 0
    for a, b in g["highlights"]:
        nspans += 1
        word = text[a - 1:b].decode().lower()
        if not (a > prev and a <= b <= len(text)):
            bad.append("span %d-%d out of order or range" % (a, b))
        if not any(word[:4] == q[:4] for q in HQ.lower().split() if len(q) > 3):
            bad.append("span %d-%d is %r" % (a, b, word))
        prev = b
    at = text.find(w["snippet"].encode())
    shifted = [[a + at, b + at] for a, b in w["highlights"]]
    inside = [s for s in g["highlights"] if at < s[0] and s[1] <= at + len(w["snippet"].encode())]
    if at < 0 or shifted != inside:
        bad.append("hit %s: %r vs the CLI's %r" % (g["id"], inside, shifted))
report(not bad and nspans >= 10 and len(hits) >= 5, "search_highlights",
       "%d spans over %d hits%s" % (nspans, len(hits), ("; " + "; ".join(bad[:3])) if bad else ""))

# {====== ask: equal to rag ask ======}


def label(c):
    src, i = c.get("source"), c["doc_id"]
    if not src or i == src or i.startswith(src + "#"):
        return i
    return src + "#" + i


def cli_ask(q):
    out = cli("ask", DIR, q, "--pipeline", "hybrid")
    text, _, sources = out.partition("\n\nSources:\n")
    cites = []
    for line in sources.splitlines():
        mm = re.match(r"^\[(\d+)\] (.*) \(bytes (\d+)-(\d+)\)", line)
        cites.append((int(mm.group(1)), mm.group(2), int(mm.group(3)), int(mm.group(4))))
    return " ".join(text.split()), cites


QUESTIONS = ["When are spring tides strongest?", "What does diffusion tensor imaging show in"
             " the newborn brain?"]
answers = {}
for q in QUESTIONS:
    st, h, data = post("/ask", {"question": q}, auth())
    got = json.loads(data)
    answers[q] = got
    wtext, wcites = cli_ask(q)
    gcites = [(c["n"], label(c), c["start"], c["stop"]) for c in got.get("citations", [])]
    texts_ok = all(isinstance(c["text"], str) and c["text"] for c in got.get("citations", []))
    ok = (st == 200 and " ".join(got["text"].split()) == wtext and gcites == wcites
          and texts_ok and got["grounded"] == (len(wcites) > 0) and len(wcites) > 0)
    report(ok, "ask", "%r: %d citations equal to rag ask%s" % (q[:30], len(wcites),
           "" if ok else "; got %r, want %r %r" % (got, wtext, wcites)))

# the graph and agent pipelines answer through /ask too (the graph built in
# each worker's memory on first use, since the served index has none)
for name in ("graph", "agent"):
    st, h, data = post("/ask", {"question": QUESTIONS[0], "pipeline": name}, auth())
    got = json.loads(data) if st == 200 else {}
    ok = (st == 200 and isinstance(got.get("text"), str) and got["text"]
          and len(got.get("citations", [])) > 0)
    report(ok, "ask_" + name, "pipeline %s: %d citations%s" % (name,
           len(got.get("citations", [])), "" if ok else "; got %r %r" % (st, data[:200])))

# SSE: token events, then citations, then done; each ends with a blank line
q = QUESTIONS[1]
st, h, data = post("/ask", {"question": q}, auth({"Accept": "text/event-stream"}))
raw = data.decode()
blocks = raw.split("\n\n")
events = []
framing = raw.endswith("\n\n") and blocks[-1] == ""
for b in blocks[:-1]:
    lines = b.split("\n")
    framing = framing and len(lines) == 2 and lines[0].startswith("event: ") and \
        lines[1].startswith("data: ")
    if framing:
        events.append((lines[0][7:], json.loads(lines[1][6:])))
names = [e for e, _ in events]
ok = (st == 200 and h["content-type"].startswith("text/event-stream") and framing
      and len(names) >= 3 and names[-2:] == ["citations", "done"]
      and all(n == "token" for n in names[:-2]) and events[-1][1] == {})
if ok:
    final = events[-2][1]
    streamed = "".join(d["text"] for e, d in events if e == "token")
    ok = (final["citations"] == answers[q]["citations"] and final["text"] == answers[q]["text"]
          and final["grounded"] == answers[q]["grounded"] and streamed.strip() != "")
report(ok, "ask_sse", "%d events: %s" % (len(events), " ".join(names[:4]) + " ..."
       if len(names) > 4 else " ".join(names)))

# {====== tokens ======}
for name, hdrs in [("no_token", {}), ("wrong_token", {"Authorization": "Bearer nope"}),
                   ("basic_scheme", {"Authorization": "Basic " + TOKEN})]:
    st, h, data = post("/ask", {"question": "tides"}, hdrs)
    body = json.loads(data)
    report(st == 401 and body["error"]["code"] == "unauthorized" and
           h.get("www-authenticate") == "Bearer", "ask_" + name, "%d %s" % (st, body))
st, h, data = post("/admin/reload", None, {"Authorization": "Bearer nope"})
report(st == 401 and json.loads(data)["error"]["code"] == "unauthorized", "reload_wrong_token",
       "%d" % st)
st, h, data = post("/admin/reload", None, auth())
body = json.loads(data)
report(st == 200 and body["generation"] == manifest()["generation"], "reload_token",
       "%d %s" % (st, body))

# {====== the page ======}
st, h, data = request("GET", "/?q=spring+tides")
report(st == 200 and h["content-type"].startswith("text/html") and b"<" in data, "page",
       "%d %s, %d bytes" % (st, h["content-type"], len(data)))

# {====== bad requests: each a 4xx JSON error, none a 500 ======}
LONG = "x" * 1001
BAD = [
    # (name, method, path, body, headers, status, code)
    ("json_syntax", "POST", "/search", "{", None, 400, "bad_request"),
    ("json_missing_value", "POST", "/search", '{"query":}', None, 400, "bad_request"),
    ("json_trailing", "POST", "/search", '{"query":"x"} x', None, 400, "bad_request"),
    ("json_trailing_comma", "POST", "/search", '{"query":"x",}', None, 400, "bad_request"),
    ("json_single_quotes", "POST", "/search", "{'query':'x'}", None, 400, "bad_request"),
    ("json_nan", "POST", "/search", '{"query":"x","k":NaN}', None, 400, "bad_request"),
    ("json_huge_number", "POST", "/search", '{"query":"x","k":1e400}', None, 400,
     "bad_request"),
    ("json_bad_utf8", "POST", "/search", b'{"query":"\xff\xfe"}', None, 400, "bad_request"),
    ("json_lone_surrogate", "POST", "/search", '{"query":"\\ud800"}', None, 400,
     "bad_request"),
    ("json_control_char", "POST", "/search", '{"query":"a\x01b"}', None, 400, "bad_request"),
    ("json_deep", "POST", "/search", '{"query":"x","filter":' + "[" * 200 + "]" * 200 + "}",
     None, 400, "bad_request"),
    ("body_empty", "POST", "/search", "", None, 400, "bad_request"),
    ("body_array", "POST", "/search", "[]", None, 400, "bad_request"),
    ("body_string", "POST", "/search", '"spring"', None, 400, "bad_request"),
    ("body_number", "POST", "/search", "42", None, 400, "bad_request"),
    ("body_null", "POST", "/search", "null", None, 400, "bad_request"),
    ("body_true", "POST", "/search", "true", None, 400, "bad_request"),
    ("query_missing", "POST", "/search", {}, None, 400, "bad_request"),
    ("query_number", "POST", "/search", {"query": 5}, None, 400, "bad_request"),
    ("query_null", "POST", "/search", {"query": None}, None, 400, "bad_request"),
    ("query_array", "POST", "/search", {"query": ["a"]}, None, 400, "bad_request"),
    ("query_object", "POST", "/search", {"query": {"a": 1}}, None, 400, "bad_request"),
    ("query_bool", "POST", "/search", {"query": True}, None, 400, "bad_request"),
    ("query_empty", "POST", "/search", {"query": ""}, None, 400, "bad_request"),
    ("query_blank", "POST", "/search", {"query": " \n\t "}, None, 400, "bad_request"),
    ("query_too_long", "POST", "/search", {"query": LONG}, None, 400, "bad_request"),
    ("k_zero", "POST", "/search", {"query": "x", "k": 0}, None, 400, "bad_request"),
    ("k_over", "POST", "/search", {"query": "x", "k": 51}, None, 400, "bad_request"),
    ("k_negative", "POST", "/search", {"query": "x", "k": -1}, None, 400, "bad_request"),
    ("k_fraction", "POST", "/search", {"query": "x", "k": 2.5}, None, 400, "bad_request"),
    ("k_string", "POST", "/search", {"query": "x", "k": "10"}, None, 400, "bad_request"),
    ("k_bool", "POST", "/search", {"query": "x", "k": True}, None, 400, "bad_request"),
    ("k_null", "POST", "/search", {"query": "x", "k": None}, None, 400, "bad_request"),
    ("k_huge", "POST", "/search", {"query": "x", "k": 1e300}, None, 400, "bad_request"),
    ("mode_unknown", "POST", "/search", {"query": "x", "mode": "fast"}, None, 400,
     "bad_request"),
    ("mode_number", "POST", "/search", {"query": "x", "mode": 3}, None, 400, "bad_request"),
    ("filter_string", "POST", "/search", {"query": "x", "filter": "year"}, None, 400,
     "bad_request"),
    ("filter_array", "POST", "/search", {"query": "x", "filter": [1, 2]}, None, 400,
     "bad_request"),
    ("filter_null_value", "POST", "/search", {"query": "x", "filter": {"year": None}}, None,
     400, "bad_request"),
    ("filter_empty_list", "POST", "/search", {"query": "x", "filter": {"tags": []}}, None,
     400, "bad_request"),
    ("filter_bad_range", "POST", "/search", {"query": "x", "filter": {"year": {"gte": "a"}}},
     None, 400, "bad_request"),
    ("filter_object_value", "POST", "/search", {"query": "x", "filter": {"year": {"a": 1}}},
     None, 400, "bad_request"),
    ("filter_range_extra_key", "POST", "/search",
     {"query": "x", "filter": {"year": {"gte": 1, "foo": 2}}}, None, 400, "bad_request"),
    ("filter_list_with_object", "POST", "/search",
     {"query": "x", "filter": {"year": [1, {"x": 1}]}}, None, 400, "bad_request"),
    ("filter_doc_id_range", "POST", "/search",
     {"query": "x", "filter": {"doc_id": {"gte": 1}}}, None, 400, "bad_request"),
    ("unknown_key", "POST", "/search", {"query": "x", "top_k": 3}, None, 400, "bad_request"),
    ("body_too_large", "POST", "/search", '{"query":"' + "a" * 200000 + '"}', None, 413,
     "too_large"),
    ("body_over_cap", "POST", "/search", '{"query":"' + "a" * 70000 + '"}', None, 413,
     "too_large"),
    ("ask_question_missing", "POST", "/ask", {}, auth(), 400, "bad_request"),
    ("ask_question_number", "POST", "/ask", {"question": 1}, auth(), 400, "bad_request"),
    ("ask_question_empty", "POST", "/ask", {"question": ""}, auth(), 400, "bad_request"),
    ("ask_question_too_long", "POST", "/ask", {"question": LONG}, auth(), 400, "bad_request"),
    ("ask_unknown_pipeline", "POST", "/ask", {"question": "x", "pipeline": "nope"}, auth(),
     400, "unknown_pipeline"),
    ("ask_summary_without_level", "POST", "/ask", {"question": "x", "pipeline": "summary"},
     auth(), 400, "unknown_pipeline"),
    ("ask_pipeline_number", "POST", "/ask", {"question": "x", "pipeline": 5}, auth(), 400,
     "bad_request"),
    ("ask_history_string", "POST", "/ask", {"question": "x", "history": "hi"}, auth(), 400,
     "bad_request"),
    ("ask_history_object", "POST", "/ask", {"question": "x", "history": {}}, auth(), 400,
     "bad_request"),
    ("ask_history_number_item", "POST", "/ask", {"question": "x", "history": [1]}, auth(),
     400, "bad_request"),
    ("ask_history_bad_role", "POST", "/ask",
     {"question": "x", "history": [{"role": "system", "content": "x"}]}, auth(), 400,
     "bad_request"),
    ("ask_history_no_content", "POST", "/ask",
     {"question": "x", "history": [{"role": "user"}]}, auth(), 400, "bad_request"),
    ("ask_history_extra_key", "POST", "/ask",
     {"question": "x", "history": [{"role": "user", "content": "x", "n": 1}]}, auth(), 400,
     "bad_request"),
    ("ask_history_content_number", "POST", "/ask",
     {"question": "x", "history": [{"role": "user", "content": 3}]}, auth(), 400,
     "bad_request"),
    ("ask_history_too_long", "POST", "/ask",
     {"question": "x", "history": [{"role": "user", "content": "x"}] * 21}, auth(), 400,
     "bad_request"),
    ("ask_k_zero", "POST", "/ask", {"question": "x", "k": 0}, auth(), 400, "bad_request"),
    ("ask_unknown_key", "POST", "/ask", {"question": "x", "stream": True}, auth(), 400,
     "bad_request"),
    ("ask_invalid_json", "POST", "/ask", "{", auth(), 400, "bad_request"),
    ("ask_missing_token", "POST", "/ask", {"question": "x"}, None, 401, "unauthorized"),
    ("ask_lowercase_scheme", "POST", "/ask", {"question": "x"},
     {"Authorization": "bearer " + TOKEN}, 401, "unauthorized"),
    ("search_get", "GET", "/search", None, None, 405, "method_not_allowed"),
    ("health_post", "POST", "/health", "{}", None, 405, "method_not_allowed"),
    ("ask_delete", "DELETE", "/ask", None, auth(), 405, "method_not_allowed"),
    ("reload_get", "GET", "/admin/reload", None, auth(), 405, "method_not_allowed"),
    ("metrics_post", "POST", "/metrics", "{}", None, 405, "method_not_allowed"),
    ("reload_no_token", "POST", "/admin/reload", None, None, 401, "unauthorized"),
    ("unknown_path", "GET", "/nope", None, None, 404, "not_found"),
    ("unknown_subpath", "POST", "/search/more", {"query": "x"}, None, 404, "not_found"),
    ("unknown_admin", "POST", "/admin/other", None, auth(), 404, "not_found"),
]
kinds_ok = 0
for name, method, path, body, hdrs, want_st, want_code in BAD:
    st, h, data = request(method, path, body, hdrs)
    try:
        err = json.loads(data)["error"]
        ok = (st == want_st and err["code"] == want_code and isinstance(err["message"], str)
              and err["message"] == err["message"].lower() and err["message"] != ""
              and h.get("content-type") == "application/json")
    except (ValueError, KeyError, TypeError):
        ok, err = False, data[:120]
    kinds_ok += ok
    report(ok, "bad_" + name, "%d %s" % (st, err))
# a chunked body over the cap (no Content-Length)
st, h, data = request("POST", "/search", '{"query":"' + "a" * 100000 + '"}', chunked=True)
ok = st == 413 and json.loads(data)["error"]["code"] == "too_large"
kinds_ok += ok
report(ok, "bad_chunked_too_large", "%d %s" % (st, data[:100]))
report(kinds_ok >= 50 and kinds_ok == len(BAD) + 1, "bad_request_kinds",
       "%d of %d kinds answered with their 4xx JSON error" % (kinds_ok, len(BAD) + 1))
st, h, data = request("GET", "/health")
report(st == 200, "health_after_bad_requests", "%d" % st)

# {====== metrics ======}
st, h, before = metrics()
for _ in range(3):
    request("GET", "/health")
request("GET", "/nope")
st, h, after = metrics()
key = 'rag_requests_total{path="/health",status="200"}'
other = 'rag_requests_total{path="other",status="404"}'
count = sum(v for k, v in after.items() if k.startswith("rag_requests_total"))
ok = (st == 200 and h["content-type"] == "text/plain; version=0.0.4"
      and after[key] - before.get(key, 0) == 3 and after[other] - before.get(other, 0) == 1
      and after['rag_request_duration_seconds_bucket{le="+Inf"}'] == count
      and after["rag_request_duration_seconds_count"] == count
      and after["rag_index_generation"] == manifest()["generation"]
      and after["rag_index_documents"] == manifest()["documents"]
      and after["rag_index_chunks"] == manifest()["chunks"]
      and not any('status="500"' in k for k in after))
report(ok, "metrics", "/health +%d, other 404 +%d, %d requests in the histogram, generation %d"
       % (after[key] - before.get(key, 0), after[other] - before.get(other, 0), count,
          after["rag_index_generation"]))
# times to the tenth of a millisecond (nginx's own clock counts whole ones):
# ten searches' took_ms are not all whole, nor is the histogram's sum
took = [json.loads(post("/search", {"query": "spring tides %d" % i})[2])["took_ms"]
        for i in range(10)]
total = after["rag_request_duration_seconds_sum"] * 1000
report(all(0 < t < 10000 for t in took) and any(t != int(t) for t in took)
       and abs(total - round(total)) > 1e-6, "times_below_a_millisecond",
       "took_ms %r; duration sum %.6f ms" % (took[:4], total))
buckets = [v for k, v in after.items() if k.startswith("rag_request_duration_seconds_bucket")]
report(buckets == sorted(buckets) and len(buckets) == 14, "metrics_histogram_cumulative",
       "%d buckets" % len(buckets))

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
