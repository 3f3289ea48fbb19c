-- rag.report: the HTML report and the text table of an evaluation sweep
-- (deliverable 4 of issue 24). The page is parsed by libxml2 (xmllint, from
-- Debian's libxml2-utils): as XML, which proves it well-formed and answers
-- XPath queries, and as HTML, which must report nothing but the HTML5 and
-- SVG tag names libxml2 2.9 does not know.
local report = require("rag.report")
local helpers = require("spec.helpers")

local function results()
  return {
    metrics = { "ndcg@10", "recall@100", "faithfulness" },
    settings = {
      { name = "chunk.size=256 k=5", params = { ["chunk.size"] = 256, k = 5 },
        scores = { ["ndcg@10"] = 0.61, ["recall@100"] = 0.9 },
        per_query = { q1 = { ["ndcg@10"] = 0.5 }, q2 = { ["ndcg@10"] = 0.72 },
          q3 = { ["ndcg@10"] = 0.1 } },
        curve = { { k = 10, value = 0.7 }, { k = 1, value = 0.3 }, { k = 100, value = 0.9 } },
        unavailable = { faithfulness = "needs an llm" } },
      { name = '<b>&"', params = { ["chunk.size"] = 512, k = 5 },
        scores = { ["ndcg@10"] = 0.5, ["recall@100"] = 0.95, faithfulness = 0.8 },
        per_query = { q1 = { ["ndcg@10"] = 0.4 }, q2 = { ["ndcg@10"] = 0.6 } },
        curve = { { k = 1, value = 0.2 }, { k = 100, value = 0.95 } } },
      { name = "chunk.size=1024 k=5", params = { ["chunk.size"] = 1024, k = 5 },
        scores = { ["ndcg@10"] = 0.123456, ["recall@100"] = 1 } },
    },
    diagnosis = {
      { cause = "low context recall: retrieval misses relevant passages",
        suggestions = { "try hybrid search", "raise k" }, evidence = { context_recall = 0.3 } },
    },
    meta = { index = "kb", data = "see https://example.org/a?b=1&c=2", library = "rag 0.1.0" },
  }
end

local function sh(cmd)
  -- without the sanitizer runtime `make asan` preloads into the specs
  local p = assert(io.popen("exec env -u LD_PRELOAD " .. cmd .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  return out
end

local tmp = helpers.tmpname() .. ".html"
local function page(r, opts)
  local html = report.html(r or results(), opts)
  helpers.write(tmp, html)
  return html
end

-- The value of an XPath expression over the page, parsed as XML.
local function xpath(expr)
  return (sh("xmllint --xpath '" .. expr .. "' " .. tmp):gsub("\n$", ""))
end

local function count(expr)
  return tonumber(xpath("count(" .. expr .. ")"))
end

-- The values of one attribute over the nodes of `expr`, in document order.
local function attrs(expr, name)
  local out = {}
  for v in xpath(expr .. "/@" .. name):gmatch(name:gsub("%-", "%%-") .. '="([^"]*)"') do
    out[#out + 1] = v
  end
  return out
end

describe("rag.report.html", function()
  after_each(function()
    os.remove(tmp)
  end)

  it("is well-formed, and libxml2's HTML parser finds no error but unknown HTML5 tags", function()
    page()
    assert.equal("", sh("xmllint --noout " .. tmp))
    for line in sh("xmllint --html --noout " .. tmp):gmatch("[^\n]+") do
      if line:find("error") then
        assert.truthy(line:find("HTML parser error : Tag %a+ invalid$"), line)
      end
    end
    assert.equal("html", xpath("name(/*)"))
  end)

  it("draws one bar chart per metric, titled by it, one bar per available value", function()
    page()
    assert.equal(3, count("//figure[@class=\"metric\"]/svg"))
    for i, m in ipairs({ "ndcg@10", "recall@100", "faithfulness" }) do
      local svg = '//svg[@id="bar-' .. i .. '"]'
      assert.equal(m .. ": mean per setting", xpath("string(" .. svg .. "/title)"))
      assert.equal("0 0 960 " .. (40 + 3 * 28 + 6 + 26), xpath("string(" .. svg .. "/@viewBox)"))
      assert.equal(0, count(svg .. "/@width"))
    end
    assert.same({ "0.6100", "0.5000", "0.1235" }, attrs('//svg[@id="bar-1"]/rect', "data-value"))
    assert.same({ "0.9000", "0.9500", "1.0000" }, attrs('//svg[@id="bar-2"]/rect', "data-value"))
    assert.same({ "chunk.size=256 k=5", "&lt;b&gt;&amp;&quot;", "chunk.size=1024 k=5" },
      attrs('//svg[@id="bar-2"]/rect', "data-setting"))
    -- value labels and axes
    assert.equal("0.6100", xpath('string(//svg[@id="bar-1"]/text[@class="value"][1])'))
    assert.equal(6, count('//svg[@id="bar-1"]/g[@class="axis"]/line[@class="grid"]'))
  end)

  it("shows a missing metric as unavailable, with its reason", function()
    page()
    assert.same({ "0.8000" }, attrs('//svg[@id="bar-3"]/rect', "data-value"))
    assert.equal("unavailable: needs an llm",
      xpath('string(//svg[@id="bar-3"]/text[@class="na"][@data-setting="chunk.size=256 k=5"])'))
    assert.equal("unavailable: not reported",
      xpath('string(//svg[@id="bar-3"]/text[@class="na"][@data-setting="chunk.size=1024 k=5"])'))
    assert.equal("needs an llm",
      xpath('string(//tr[@data-setting="chunk.size=256 k=5"]/td[@data-metric="faithfulness"]'
        .. '/@title)'))
    assert.equal(2, count('//ul[@class="unavailable"]/li'))
  end)

  it("escapes every text and attribute the caller gives", function()
    local html = page(nil, { title = "a <title> & 'quotes'" })
    assert.falsy(html:find('<b>&"', 1, true))
    assert.truthy(html:find('data-setting="&lt;b&gt;&amp;&quot;"', 1, true))
    assert.truthy(html:find("<h1>a &lt;title&gt; &amp; &#39;quotes&#39;</h1>", 1, true))
    assert.equal('<b>&"', xpath('string(//svg[@id="bar-1"]/rect[2]/title)'):sub(1, 5))
    assert.equal("see https://example.org/a?b=1&c=2",
      xpath('string(//dl[@class="meta"]/dd[1])'))
  end)

  it("needs no script and no network: no URL but the caller's", function()
    local r = results()
    r.meta = nil
    local html = page(r)
    local lower = html:lower()
    for _, bad in ipairs({ "<script", "http:", "https:", "src=", "href=", "url(", "@import",
      "javascript:", "<link", "<iframe", "<img" }) do
      assert.falsy(lower:find(bad, 1, true), bad)
    end
    assert.equal(1, count("//head/style"))
  end)

  it("plots per-question distributions and recall@k curves with a legend", function()
    page()
    assert.equal(1, count('//figure[@class="distribution"]/svg'))
    local d = '//svg[@id="dist-1"]'
    assert.equal("ndcg@10: per-question distribution", xpath("string(" .. d .. "/title)"))
    assert.same({ "0.5000", "0.5000" }, attrs(d .. '/g[@class="dist"]', "data-median"))
    assert.same({ "3", "2" }, attrs(d .. '/g[@class="dist"]', "data-n"))
    assert.equal(5, count(d .. '//circle[@class="pt"]'))
    assert.equal("no per-question values",
      xpath("string(" .. d .. '/text[@data-setting="chunk.size=1024 k=5"])'))
    local c = '//svg[@id="curves"]'
    assert.equal(2, count(c .. '/polyline[@class="curve"]'))
    assert.equal(5, count(c .. '/circle[@class="cpt"]'))
    assert.equal(3, count(c .. '/g[@class="legend-item"]'))
    -- points sorted by k on a log axis: 1, 10, 100 evenly spaced
    assert.equal("70.0,250.0 500.0,130.0 930.0,70.0",
      xpath("string(" .. c .. "/polyline[1]/@points)"))
    assert.equal(2, count('//table[@class="numbers curve-table"]/tbody/tr'))
  end)

  it("lists the diagnosis and a table of every number", function()
    assert.truthy(page():find("<footer>Made by rag.report with rag 0.1.0.</footer>", 1, true))
    assert.equal("low context recall: retrieval misses relevant passages",
      xpath('string(//ol[@class="diagnosis"]/li[1]/p[@class="cause"])'))
    assert.equal(2, count('//ol[@class="diagnosis"]/li[1]/ul/li'))
    assert.equal("Evidence: context_recall = 0.3000",
      xpath('string(//ol[@class="diagnosis"]/li[1]/p[@class="evidence"])'))
    assert.equal(3, count('//table[@class="numbers"]/tbody/tr'))
    assert.equal("0.1235",
      xpath('string(//tr[@data-setting="chunk.size=1024 k=5"]/td[@data-metric="ndcg@10"])'))
    assert.equal("1024", xpath('string(//tr[@data-setting="chunk.size=1024 k=5"]/td[1])'))
    -- the best of each metric is bold
    assert.equal("0.6100", xpath('string(//td[@data-metric="ndcg@10"]/strong)'))
  end)

  it("gives the same bytes for the same results, whatever the insertion order", function()
    local a = report.html(results())
    local r = results()
    local pq = {}
    for _, q in ipairs({ "q3", "q1", "q2" }) do
      pq[q] = r.settings[1].per_query[q]
    end
    r.settings[1].per_query = pq
    r.meta = { library = "rag 0.1.0", index = "kb", data = "see https://example.org/a?b=1&c=2" }
    assert.equal(a, report.html(r))
    assert.equal(a, report.html(results()))
  end)

  it("draws at most 400 dots per box plot, sampled in question order", function()
    local pq = {}
    for i = 1, 1000 do
      pq[string.format("q%04d", i)] = { m = i / 1000 }
    end
    page({ settings = { { name = "s", scores = { m = 0.5 }, per_query = pq } } })
    assert.same({ "1000" }, attrs('//svg[@id="dist-1"]/g[@class="dist"]', "data-n"))
    assert.equal(400, count('//svg[@id="dist-1"]//circle[@class="pt"]'))
    assert.equal("q0002: 0.0020", xpath('string(//svg[@id="dist-1"]//circle[1]/title)'))
    assert.equal("q0999: 0.9990", xpath('string(//svg[@id="dist-1"]//circle[400]/title)'))
    assert.equal("median 0.5005, n=1000",
      xpath('string(//svg[@id="dist-1"]//text[@class="value"])'))
  end)

  it("replaces control characters, which XML forbids", function()
    local html = page({ settings = { { name = "a\0b\27c", scores = { m = 1 } } } })
    assert.truthy(html:find('data-setting="a\239\191\189b\239\191\189c"', 1, true))
    assert.equal("", sh("xmllint --noout " .. tmp))
  end)

  it("takes the metrics from the scores when results.metrics is absent", function()
    local r = results()
    r.metrics = nil
    page(r)
    assert.equal("faithfulness: mean per setting", xpath('string(//svg[@id="bar-1"]/title)'))
    assert.equal("recall@100: mean per setting", xpath('string(//svg[@id="bar-3"]/title)'))
  end)

  it("raises on bad input, naming what is wrong", function()
    local function raises(msg, r, opts)
      local ok, err = pcall(report.html, r, opts)
      assert.falsy(ok)
      assert.truthy(err:find(msg, 1, true), err)
    end
    raises("rag.report.html: results must be a table, got nil", nil)
    raises("rag.report.html: results.settings must be a list", { settings = { a = 1 } })
    raises("rag.report.html: results.settings must be a list", { settings = {} })
    local r = results()
    r.settings[2].name = r.settings[1].name
    raises("results.settings[2].name 'chunk.size=256 k=5' is used twice", r)
    r = results()
    r.settings[1].scores["ndcg@10"] = "0.5"
    raises('results.settings[1].scores["ndcg@10"] must be a finite number', r)
    r = results()
    r.settings[1].scores["ndcg@10"] = 0 / 0
    raises("must be a finite number", r)
    r = results()
    r.settings[1].curve = { { k = 0, value = 1 } }
    raises("results.settings[1].curve[1] must be { k = a number > 0", r)
    r = results()
    r.metrics = { "a", "a" }
    raises("results.metrics: 'a' is empty or appears twice", r)
    r = results()
    r.diagnosis = { { suggestions = {} } }
    raises("results.diagnosis[1] must be a table with a string cause", r)
    raises("rag.report.html: unknown option 'colour'", results(), { colour = 1 })
    local ok, err = pcall(report.table, { settings = 1 })
    assert.falsy(ok)
    assert.truthy(err:find("rag.report.table: results.settings must be a list", 1, true))
  end)
end)

-- What rag eval adds: rag.eval.compare's result of the first setting
-- against each other one.
local function with_comparisons()
  local r = results()
  r.comparisons = {
    { a = "chunk.size=256 k=5", b = '<b>&"', result = { test = "randomization", rounds = 1000,
      metrics = {
        ["ndcg@10"] = { n = 2, a = 0.61, b = 0.5, diff = -0.11, p = 0.5,
          changed = { { query = "q1", a = 0.5, b = 0.4, diff = -0.1 } } },
        mrr = { n = 2, a = 0.2, b = 0.3, diff = 0.1, p = 0.01, changed = {} },
      } } },
  }
  return r
end

describe("rag.report's diagnosis", function()
  after_each(function()
    os.remove(tmp)
  end)

  local function said(r)
    page(r)
    return xpath('string(//section[@id="diagnosis"]/p)')
  end

  it("says what an empty diagnosis means: nothing computed, some, or all", function()
    local r = results()
    r.diagnosis = {}
    for _, s in ipairs(r.settings) do
      s.scores = {}
    end
    assert.equal("Nothing to diagnose: no metric could be computed (see Unavailable above).",
      said(r))
    r = results()
    r.diagnosis = {} -- faithfulness is missing for two of the three settings
    assert.equal("No problem found in the metrics that could be computed (see Unavailable "
      .. "above).", said(r))
    r.metrics = { "ndcg@10", "recall@100" }
    assert.equal("No problem found.", said(r))
  end)
end)

describe("rag.report comparisons", function()
  after_each(function()
    os.remove(tmp)
  end)

  it("lists paired tests, metrics in the results' order, the significant ones bold", function()
    page(with_comparisons())
    local t = '//section[@id="comparisons"]//table/tbody'
    assert.same({ "ndcg@10", "mrr" }, attrs(t .. "/tr", "data-metric"))
    assert.equal("-0.1100", xpath("string(" .. t .. "/tr[1]/td[3])"))
    assert.equal("+0.1000", xpath("string(" .. t .. "/tr[2]/td[3])"))
    assert.equal("0.0100", xpath("string(" .. t .. '/tr[@class="significant"]/td[4]/strong)'))
    assert.equal("q1 -0.1000", xpath("string(" .. t .. "/tr[1]/td[6])"))
    assert.equal('b = <b>&" vs a = chunk.size=256 k=5 (randomization, 1000 rounds)',
      xpath('string(//section[@id="comparisons"]/h3)'))
  end)

  it("adds them to the text table", function()
    local text = report.table(with_comparisons())
    assert.truthy(text:find(table.concat({
      "paired tests (* p < 0.05):",
      "  a                   b      metric     b - a         p",
      "  ------------------  -----  -------  -------  --------",
      '  chunk.size=256 k=5  <b>&"  ndcg@10  -0.1100  0.5000',
      '  chunk.size=256 k=5  <b>&"  mrr      +0.1000  0.0100 *',
    }, "\n"), 1, true), text)
  end)

  it("says so when no metric has values for both settings", function()
    local r = with_comparisons()
    r.comparisons[1].result.metrics = {}
    page(r)
    assert.equal("No metric has values for both.",
      xpath('string(//section[@id="comparisons"]/p[2])'))
    assert.equal(0, count('//section[@id="comparisons"]//table'))
    local text = report.table(r)
    assert.truthy(text:find("\npaired tests: none (no metric has values for both settings of a "
      .. "pair)\n", 1, true), text)
    assert.falsy(text:find("a  b  metric", 1, true), text)
  end)

  it("raises on a malformed comparison", function()
    local r = with_comparisons()
    r.comparisons[1].result = nil
    local ok, err = pcall(report.html, r)
    assert.falsy(ok)
    assert.truthy(err:find("results.comparisons[1] must be { a = name", 1, true), err)
  end)
end)

describe("rag.report.table", function()
  it("is one row per setting, '-' for a missing value and the reasons below", function()
    assert.equal(table.concat({
      "setting              ndcg@10  recall@100  faithfulness",
      "-------------------  -------  ----------  ------------",
      "chunk.size=256 k=5    0.6100      0.9000             -",
      '<b>&"                 0.5000      0.9500        0.8000',
      "chunk.size=1024 k=5   0.1235      1.0000             -",
      "",
      "- faithfulness unavailable: needs an llm (chunk.size=256 k=5)",
      "- faithfulness unavailable: not reported (chunk.size=1024 k=5)",
      "",
    }, "\n"), report.table(results()))
  end)

  it("pads by characters, not bytes, and says 'all settings'", function()
    local t = report.table({ metrics = { "m" }, settings = {
      { name = "é", scores = {}, unavailable = { m = "needs an llm" } },
      { name = "ab", unavailable = { m = "needs an llm" } },
    } })
    assert.equal("setting  m\n-------  -\né        -\nab       -\n\n"
      .. "- m unavailable: needs an llm (all settings)\n", t)
  end)
end)
