"""The search page of `rag serve` driven in headless Chromium through
chromedriver (W3C WebDriver over HTTP, standard library only); run by
spec/browser/serve.sh, which builds the index. Starts the real server unless
RAG_SERVE_URL names one serving the same index. The last line is
"N passed, N failed" (the checks)."""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

OUT, INDEX = sys.argv[1], sys.argv[2]
LUA = os.environ.get("LUA", "lua5.4")
QUERY = "insulin cells"
QUESTION = "How do stem cells and insulin resistance relate to diabetes and tumor growth?"
SUSPECT = "zebra quokka"  # only in spec/fixtures/serve/untrusted.txt
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
passed = failed = 0


def check(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok: " + what)
    else:
        failed += 1
        print("FAILED: " + what + (": " + str(detail) if detail != "" else ""))
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_for(fn, timeout):
    end = time.time() + timeout
    while True:
        got = fn()
        if got or time.time() > end:
            return got
        time.sleep(0.1)


def start(argv, log, env=None):
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Browser:
    """One chromedriver session; every request the page sends and every
    console message are logged, and each read of the logs drains them."""

    def __init__(self, port):
        self.base = "http://127.0.0.1:%d" % port
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-extensions",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--window-size=1000,700"]
        caps = {"browserName": "chrome",
                "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
                "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"}}
        r = self.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})
        self.sid = r["sessionId"]

    def call(self, method, path, body=None):
        status, raw = http(method, self.base + path, body if method == "POST" else None)
        value = json.loads(raw or b"{}").get("value")
        if status != 200:
            raise RuntimeError("webdriver %s %s: %s" % (method, path, value))
        return value

    def s(self, method, path, body=None):
        return self.call(method, "/session/" + self.sid + path, body)

    def go(self, url):
        self.s("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def until(self, script, timeout=30):
        return wait_for(lambda: self.js(script), timeout)

    def find(self, css):
        return self.s("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def keys(self, el, text):
        self.s("POST", "/element/%s/value" % el, {"text": text})

    def click(self, el):
        self.s("POST", "/element/%s/click" % el, {})

    def size(self, w, h):
        self.s("POST", "/window/rect", {"width": w, "height": h})

    def cdp(self, cmd, params):
        return self.s("POST", "/goog/cdp/execute", {"cmd": cmd, "params": params})

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.s("GET", "/screenshot")))

    def alert(self):
        status, _ = http("GET", "%s/session/%s/alert/text" % (self.base, self.sid))
        return status == 200

    def console(self):
        return [e["message"] for e in self.s("POST", "/se/log", {"type": "browser"})]

    def requests(self):
        urls = []
        for e in self.s("POST", "/se/log", {"type": "performance"}):
            m = json.loads(e["message"])["message"]
            if m["method"] == "Network.requestWillBeSent":
                urls.append(m["params"]["request"]["url"])
        return urls

    def quit(self):
        self.s("DELETE", "")


def offsite(urls, server):
    return [u for u in urls if not u.startswith(server) and not u.startswith("data:")]


def expected_marks(server, query):
    """The marked strings of each hit, cut from the server's JSON here: the
    byte offsets applied to the UTF-8 bytes. Also whether any mark starts at
    a different character than byte offset (non-ASCII before it)."""
    status, raw = http("POST", server + "search", {"query": query, "k": 10})
    hits = json.loads(raw)["hits"] if status == 200 else []
    marks, shifted = [], False
    for h in hits:
        b = h["text"].encode()
        marks.append([b[f - 1:t].decode() for f, t in h["highlights"]])
        shifted = shifted or any(len(b[:f - 1].decode()) != f - 1 for f, _ in h["highlights"])
    return status, marks, shifted


def sse_tokens(server, question):
    """The deltas of the token events of a streamed answer, read here."""
    req = urllib.request.Request(server + "ask", method="POST", data=json.dumps(
        {"question": question, "pipeline": "hybrid"}).encode(), headers={
        "Content-Type": "application/json", "Accept": "text/event-stream"})
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read().decode().replace("\r\n", "\n")
    out = []
    for block in body.split("\n\n"):
        lines = block.split("\n")
        if "event: token" in lines:
            data = "\n".join(l[5:].lstrip(" ") for l in lines if l.startswith("data:"))
            out.append(json.loads(data)["text"])
    return out


def stem_match(mark, query):
    m = mark.lower()
    return any(m.startswith(w[:max(4, len(w) - 2)]) or w.startswith(m)
               for w in query.lower().split())


def phase_search(b, server):
    b.go(server)
    check("the page loads with an empty search box", b.js("return document.title") and
          b.js("return document.getElementById('q').value") == "")
    q = b.find("#q")
    b.keys(q, QUERY + "\ue007")  # Enter
    n = b.until("return document.querySelectorAll('#results > li').length")
    check("typing a query and Enter shows results (%s)" % n, n and n > 0)
    got = b.js("return [...document.querySelectorAll('#results > li')].map("
               "li => [...li.querySelectorAll('mark')].map(m => m.textContent))")
    status, want, shifted = expected_marks(server, QUERY)
    check("the search hits /search gives have highlights after non-ASCII text", status == 200
          and shifted, "no mark preceded by a multi-byte character")
    check("the marks are the server's byte spans, in characters",
          got == want, "page %s, server %s" % (got[:2], want[:2]))
    flat = [m for ms in got for m in ms]
    check("%d marks, each a query word or its stem" % len(flat), flat and
          all(stem_match(m, QUERY) for m in flat), [m for m in flat if not stem_match(m, QUERY)])
    check("the URL holds the search",
          b.js("return location.search") == "?" + urllib.parse.urlencode({"q": QUERY}))
    meta = b.js("return document.querySelector('#results > li .meta').textContent")
    check("a result shows its source, doc id and score", re.search(
        r"^spec/fixtures/texts/scifact40\.jsonl id\sspec/fixtures/texts/scifact40\.jsonl#\d+ "
        r"score\s\d+\.\d{4}\b", meta), meta)
    b.screenshot(os.path.join(OUT, "serve-search.png"))


def phase_untrusted(b, server):
    q = b.find("#q")
    b.s("POST", "/element/%s/clear" % q, {})
    b.keys(q, SUSPECT + "\ue007")
    text = b.until("const li = [...document.querySelectorAll('#results > li')]"
                   ".find(li => li.textContent.includes('quokka'));"
                   "return li && li.querySelector('.text').textContent")
    check("a document of HTML markup shows as its text", text and
          '<img src="http://tracker.invalid/pixel.png"' in text and "<script>" in text
          and "&amp;" in text, text)
    check("and makes no element", b.js(
        "return document.querySelectorAll('#results img, #results script, #results b')"
        ".length") == 0 and b.js("return document.title") != "pwned")


RECORD = """
window.__rec = [];
new MutationObserver((ms) => { for (const m of ms) {
  const added = [...m.addedNodes];
  window.__rec.push([added.length === 0 ? 'r' : added.every(n => n.nodeType === 3) ? 't' : 'a',
    added.map(n => n.nodeType === 3 ? n.data : '').join('')]);
} }).observe(document.getElementById('answer-text'), { childList: true, subtree: true });
"""
DONE = ("return !document.getElementById('answer').hasAttribute('aria-busy') && "
        "(document.querySelectorAll('#sources > li').length > 0 || "
        "!document.getElementById('error').hidden)")


def phase_ask(b, server):
    status, raw = http("POST", server + "ask", {"question": QUESTION, "pipeline": "hybrid"})
    ref = json.loads(raw) if status == 200 else {"text": "", "citations": []}
    check("POST /ask answers with citations (reference)", status == 200 and ref["citations"],
          raw[:200])
    ref_tokens = sse_tokens(server, QUESTION)
    b.js("document.querySelector('input[value=search]').focus()")
    b.keys(b.find("input[value=search]"), "\ue014")  # ArrowRight: the keyboard switch
    check("the arrow key switches to ask mode", b.js(
        "return document.querySelector('input[value=ask]').checked && "
        "document.getElementById('go').textContent === 'Ask' && "
        "!document.getElementById('pipeline').hidden"))
    b.js(RECORD)
    q = b.find("#q")
    b.s("POST", "/element/%s/clear" % q, {})
    b.keys(q, QUESTION + "\ue007")
    check("the answer completes", b.until(DONE, 60), b.js(
        "return document.getElementById('error').textContent"))
    rec = b.js("return window.__rec")
    first_a = next((i for i, r in enumerate(rec) if r[0] == "a"), len(rec))
    tokens = [r for r in rec[:first_a] if r[0] == "t"]
    check("the answer arrives streamed (%d token events shown)" % len(tokens), len(tokens) > 1)
    check("each shown as it came: the server's %d deltas" % len(ref_tokens),
          [t[1] for t in tokens] == ref_tokens, [t[1] for t in tokens][:5])
    shown = b.js("return document.getElementById('answer-text').textContent")
    check("the answer shown is the server's answer", shown.startswith(ref["text"]),
          shown[:120])
    links = b.js("return [...document.querySelectorAll('#answer-text a')].map(a => "
                 "[a.getAttribute('href'), a.textContent, !!document.querySelector("
                 "'#sources > li' + a.getAttribute('href'))])")
    cited = {str(c["n"]) for c in ref["citations"]}
    markers = [n for n in re.findall(r"\[(\d+)\]", ref["text"]) if n in cited]
    check("every [n] of a cited source is a link (%d)" % len(links),
          len(links) == len(markers) > 0 and
          all(h == "#src-" + t[1:-1] for h, t, _ in links), links)
    check("every citation link points at a listed source", all(ok for _, _, ok in links),
          links)
    listed = b.js("return [...document.querySelectorAll('#sources > li')].map(li => "
                  "[li.id, li.querySelector('.meta').textContent, "
                  "li.querySelector('.text').textContent])")
    check("the sources listed are the citations, with source and text", [
        (l[0], c["source"] in l[1], l[2]) for l, c in zip(listed, ref["citations"])] ==
        [("src-%d" % c["n"], True, c["text"]) for c in ref["citations"]], listed)
    # the last link, with the window cut just below it: its source is out of view
    href = b.js("const as = document.querySelectorAll('#answer-text a');"
                "return as.length && as[as.length - 1].getAttribute('href')")
    link = "#answer-text a[href='%s']" % href
    fit = ("window.scrollTo(0, 0); const a = document.querySelector(arguments[0]);"
           "return [a ? Math.ceil(a.getBoundingClientRect().bottom) + 20 : 0, innerHeight]")
    for _ in range(2):  # the window's height is the viewport's and the frame's
        want, inner = b.js(fit, link)
        rect = b.s("GET", "/window/rect")
        b.size(rect["width"], rect["height"] + want - inner)
    where = ("const e = document.querySelector(%s), r = e && e.getBoundingClientRect();"
             "return !!r && r.top >= 0 && r.top < innerHeight / 2" % json.dumps(href))
    check("the source %s starts out of view (window %d high)" % (href, want), href and
          not b.js(where) and b.js(fit, link)[1] == want, b.js(fit, link))
    b.click(b.find(link))
    check("clicking its link scrolls it into view", b.until(where.replace(
        "return", "return document.activeElement === document.querySelector(%s) &&" %
        json.dumps(href)), 5))
    check("and highlights it", b.js("const e = document.querySelector(arguments[0]);"
                                    "return !!e && e.classList.contains('flash')", href))
    check("the URL holds the question in ask mode", b.js("return location.search") ==
          "?" + urllib.parse.urlencode({"q": QUESTION, "mode": "ask"}))
    b.size(1000, 1500)
    b.js("window.scrollTo(0, 0)")
    time.sleep(0.3)
    b.screenshot(os.path.join(OUT, "serve.png"))


def phase_url(b, server):
    b.go(server + "?" + urllib.parse.urlencode({"q": QUERY}))
    n = b.until("return document.querySelectorAll('#results mark').length")
    check("/?q= opens with the search done (%s marks)" % n, n and n > 0 and
          b.js("return document.getElementById('q').value") == QUERY)
    b.go(server + "?" + urllib.parse.urlencode({"q": QUESTION, "mode": "ask"}))
    check("/?q=&mode=ask opens in ask mode with the answer", b.until(DONE, 60) and b.js(
        "return document.querySelector('input[value=ask]').checked && "
        "document.querySelectorAll('#answer-text a').length > 0"))


def phase_narrow_dark(b, server):
    bg = "const c = getComputedStyle(document.body).backgroundColor.match(/\\d+/g);" \
         "return (+c[0] + +c[1] + +c[2]) / 3"
    light = b.js(bg)
    b.size(400, 900)
    b.cdp("Emulation.setEmulatedMedia",
          {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    b.go(server + "?" + urllib.parse.urlencode({"q": QUERY}))
    b.until("return document.querySelectorAll('#results mark').length")
    check("light page on a light scheme, dark on a dark one", light > 200 and b.js(bg) < 60,
          (light, b.js(bg)))
    width = b.js("return [document.documentElement.scrollWidth, innerWidth]")
    check("a narrow window needs no sideways scrolling %s" % width, width[0] <= width[1])
    b.screenshot(os.path.join(OUT, "serve-narrow-dark.png"))
    b.cdp("Emulation.setEmulatedMedia", {"features": []})


def phase_error(b, server):
    b.go(server + "?" + urllib.parse.urlencode({"q": "x" * 1100}))
    shown = ("const e = document.getElementById('error');"
             "return !e.hidden && e.textContent")
    wait_for(lambda: b.alert() or b.js(shown), 30)
    if not check("not in an alert", not b.alert()):
        b.s("POST", "/alert/dismiss", {})
    err = b.js(shown)
    check("a server error shows in the page (%s)" % err, err and err.startswith("bad_request:"))
    msgs = b.console()
    check("its only console message is the failed load", all(
        "Failed to load resource" in m and " 400 " in m for m in msgs), msgs)


def main():
    os.makedirs(OUT, exist_ok=True)
    server, proc = os.environ.get("RAG_SERVE_URL"), None
    if server:
        server = server.rstrip("/") + "/"
    else:
        port = free_port()
        server = "http://127.0.0.1:%d/" % port
        log = open(os.path.join(OUT, "serve.log"), "w")
        proc = start([LUA, "bin/rag", "serve", INDEX, "--port", str(port), "--workers", "1"],
                     log)
    wait_for(lambda: (proc and proc.poll() is not None) or alive(server + "health"), 60)
    up = (proc is None or proc.poll() is None) and alive(server + "health")
    if not check("the server answers /health at " + server, up):
        if proc:
            stop(proc)
            with open(os.path.join(OUT, "serve.log")) as f:
                print(f.read()[-2000:], end="")
        return
    if not check("chromedriver is installed", shutil.which("chromedriver")):
        if proc:
            stop(proc)
        return
    dport = free_port()
    driver = start(["chromedriver", "--port=%d" % dport],
                   open(os.path.join(OUT, "chromedriver.log"), "w"))
    wait_for(lambda: alive("http://127.0.0.1:%d/status" % dport), 30)
    b = None
    try:
        b = Browser(dport)
        # the detectors see a console message and a request to elsewhere
        b.go(server)
        b.js("console.error('canary'); fetch('http://canary.invalid/x').catch(() => {});")
        time.sleep(0.5)
        check("canary: a console message is seen", any("canary" in m for m in b.console()))
        check("canary: a request to another host is seen",
              offsite(b.requests(), server) != [])
        phases = [phase_search, phase_untrusted, phase_ask, phase_url, phase_narrow_dark]
        for phase in phases:
            name = phase.__name__[6:]
            try:
                phase(b, server)
            except Exception as e:  # a broken phase fails, the others still run
                check(name + " ran", False, e)
            msgs = b.console()
            check(name + ": no console message", msgs == [], msgs)
            away = offsite(b.requests(), server)
            check(name + ": no request but to the server", away == [], away)
        phase_error(b, server)
        check("error: no request but to the server", offsite(b.requests(), server) == [])
    except Exception as e:
        check("the browser session", False, e)
    finally:
        if b:
            try:
                b.quit()
            except Exception:
                pass
        stop(driver)
        if proc:
            stop(proc)


def alive(url):
    try:
        return http("GET", url, timeout=2)[0] == 200
    except OSError:
        return False


if __name__ == "__main__":
    t0 = time.time()
    main()
    print("browser checks took %.0f s" % (time.time() - t0))
    if os.path.exists(os.path.join(OUT, "serve.png")):
        print("screenshots: %s/serve.png, serve-search.png, serve-narrow-dark.png" % OUT)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
