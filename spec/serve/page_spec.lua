-- rag.serve._page: the search page `rag serve` sends for GET / (deliverable
-- 5 of issue 25), checked as text here; spec/browser/serve.sh drives it in
-- headless Chromium against the real server.
local page = require("rag.serve._page")

describe("rag.serve._page", function()
  it("is one HTML document", function()
    assert.equal("string", type(page))
    assert.equal("<!DOCTYPE html>\n", page:sub(1, 16))
    assert.equal("</html>\n", page:sub(-8))
    assert.equal(1, select(2, page:gsub("<script>", "")))
    assert.equal(1, select(2, page:gsub("<style>", "")))
  end)

  it("asks the network for nothing but its own server", function()
    for _, bad in ipairs({ "http:", "https:", "src=", "url(", "@import", "<link rel=\"style",
      "EventSource" }) do
      local at = page:find(bad, 1, true)
      assert.is_nil(at, bad .. " at byte " .. tostring(at))
    end
    for href in page:gmatch('href="([^"]*)"') do
      assert.equal("data:,", href)
    end
  end)

  it("never parses text as HTML", function()
    for _, bad in ipairs({ "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
      "eval(", "new Function", "createContextualFragment" }) do
      assert.is_nil(page:find(bad, 1, true), bad)
    end
  end)

  it("has every element its script looks up", function()
    local n = 0
    for id in page:gmatch('%$%("([%w-]+)"%)') do
      n = n + 1
      assert.truthy(page:find('id="' .. id .. '"', 1, true), id)
    end
    assert.is_true(n >= 10)
  end)

  it("keeps to the server's paths and its [n] citation anchors", function()
    assert.truthy(page:find('post("search", body, "application/json")', 1, true))
    assert.truthy(page:find('post("ask", body, "text/event-stream")', 1, true))
    assert.truthy(page:find('href: "#src-" + m[1]', 1, true))
    assert.truthy(page:find('id: "src-" + c.n', 1, true))
  end)
end)
