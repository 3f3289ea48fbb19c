-- rag.errors: one list of error codes. src/rag.h's RAG_STATUS_LIST (read as
-- C source text), rag.errors (built from rag.core.errors) and the table in
-- docs/api.md's "rag.errors" section must agree on every code, its order
-- and its meaning.
local rag = require("rag")
local helpers = require("spec.helpers")

local errors = rag.errors

-- The tokens of one X(...) entry: identifiers, NULL, and string literals
-- (adjacent literals joined, as the C compiler does), split at commas.
local function c_args(body)
  local args, cur, i = {}, nil, 1
  while i <= #body do
    local c = body:sub(i, i)
    if c == '"' then
      local j, parts = i + 1, {}
      while true do
        local ch = body:sub(j, j)
        assert(ch ~= "", "unterminated string in RAG_STATUS_LIST")
        if ch == "\\" then
          local esc = body:sub(j + 1, j + 1)
          parts[#parts + 1] = ({ n = "\n", t = "\t" })[esc] or esc
          j = j + 2
        elseif ch == '"' then
          break
        else
          parts[#parts + 1] = ch
          j = j + 1
        end
      end
      cur = (type(cur) == "string" and cur or "") .. table.concat(parts)
      i = j + 1
    elseif c == "," then
      args[#args + 1] = cur
      cur = nil
      i = i + 1
    elseif c:match("[%w_]") then
      local word = body:match("^[%w_]+", i)
      if word == "NULL" then
        cur = false
      else
        cur = word
      end
      i = i + #word
    else
      i = i + 1
    end
  end
  args[#args + 1] = cur
  return args
end

-- { { code=, meaning= }, ... } from src/rag.h, in list order, for the
-- statuses that carry a code to Lua.
local function from_header()
  local src = helpers.read("src/rag.h")
  local start = assert(src:find("#define RAG_STATUS_LIST(X)", 1, true),
    "src/rag.h has no RAG_STATUS_LIST")
  -- the macro runs to the first line that does not end in a backslash
  local body, pos = {}, start
  while true do
    local stop = src:find("\n", pos, true) or #src + 1
    local line = src:sub(pos, stop - 1)
    body[#body + 1] = line:gsub("\\%s*$", "")
    if not line:find("\\%s*$") then
      break
    end
    pos = stop + 1
  end
  local out = {}
  for entry in table.concat(body, "\n"):gmatch("X(%b())") do
    local a = c_args(entry:sub(2, -2))
    assert(#a == 4, "RAG_STATUS_LIST entry with " .. #a .. " fields: " .. entry)
    if a[2] then
      out[#out + 1] = { code = a[2], meaning = a[4] }
    end
  end
  return out
end

-- The same list from the table in docs/api.md's "## rag.errors" section.
local function from_docs()
  local api = helpers.read("docs/api.md")
  local section = api:match("\n## rag%.errors\n(.-)\n## ") or api:match("\n## rag%.errors\n(.*)$")
  assert(section, "docs/api.md has no '## rag.errors' section")
  local out, in_table = {}, false
  for line in (section .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^| code | meaning |") then
      in_table = true
    elseif in_table and line:match("^|") then
      local code, meaning = line:match("^| `([%w_]+)` | (.-) |$")
      if code then
        out[#out + 1] = { code = code, meaning = meaning }
      else
        assert(line:match("^| %-%-%- | %-%-%- |$"), "unexpected row in the errors table: " .. line)
      end
    elseif in_table and #out > 0 then
      break
    end
  end
  return out
end

local function from_module()
  local out = {}
  for i, code in ipairs(errors.codes) do
    out[i] = { code = code, meaning = errors.meaning[code] }
  end
  return out
end

-- The first difference between two lists, as a message, or nil.
local function differ(a, an, b, bn)
  for i = 1, math.max(#a, #b) do
    local x, y = a[i], b[i]
    if not x or not y then
      return ("%s has %d codes, %s has %d"):format(an, #a, bn, #b)
    end
    if x.code ~= y.code then
      return ("code %d is '%s' in %s but '%s' in %s"):format(i, x.code, an, y.code, bn)
    end
    if x.meaning ~= y.meaning then
      return ("the meaning of '%s' differs:\n  %s: %s\n  %s: %s"):format(x.code, an,
        tostring(x.meaning), bn, tostring(y.meaning))
    end
  end
  return nil
end

describe("rag.errors", function()
  local header, docs, module = from_header(), from_docs(), from_module()

  it("has the twelve codes of the design, in rag.h's order", function()
    local want = { "io", "format", "version", "corrupt", "encoding", "http", "timeout", "decode",
      "auth", "ratelimit", "provider", "budget" }
    local got = {}
    for i, e in ipairs(header) do
      got[i] = e.code
    end
    assert.same(want, got)
  end)

  it("agrees with src/rag.h", function()
    assert.is_nil(differ(header, "src/rag.h", module, "rag.errors"))
  end)

  it("agrees with docs/api.md", function()
    assert.is_nil(differ(header, "src/rag.h", docs, "docs/api.md"))
    assert.is_nil(differ(module, "rag.errors", docs, "docs/api.md"))
  end)

  it("gives every code a meaning", function()
    for _, e in ipairs(header) do
      assert.is_true(#e.meaning > 10, e.code)
    end
  end)

  it("notices a difference", function()
    local other = from_module()
    other[3] = { code = other[3].code, meaning = "something else" }
    assert.truthy(differ(module, "a", other, "b"):find("meaning of 'version'", 1, true))
    other = from_module()
    table.remove(other)
    assert.truthy(differ(module, "a", other, "b"):find("12 codes", 1, true))
    other = from_module()
    other[1], other[2] = other[2], other[1]
    assert.truthy(differ(module, "a", other, "b"):find("code 1 is 'io'", 1, true))
  end)

  it("is_code accepts exactly the codes", function()
    for _, code in ipairs(errors.codes) do
      assert.is_true(errors.is_code(code))
    end
    for _, v in ipairs({ "IO", "", "nope", " io", 1, true, {} }) do
      assert.is_false(errors.is_code(v))
    end
    assert.is_false(errors.is_code(nil))
    assert.is_false(errors.is_code("codes"))
  end)

  it("fail builds nil, msg, code", function()
    local function count(...)
      return select("#", ...), ...
    end
    local n, none0, msg0, code0 = count(errors.fail("io", "x.load: '%s': %s", "a", "gone"))
    assert.equal(3, n)
    assert.is_nil(none0)
    assert.equal("x.load: 'a': gone", msg0)
    assert.equal("io", code0)
    local none, msg, code = errors.fail("budget", "x.run: 100% of the steps used")
    assert.is_nil(none)
    assert.equal("x.run: 100% of the steps used", msg)
    assert.equal("budget", code)
  end)

  it("fail raises on an unknown code or a bad message", function()
    assert.has_error(function() errors.fail("oops", "x") end,
      "rag.errors.fail: unknown error code 'oops'")
    assert.has_error(function() errors.fail(nil, "x") end,
      "rag.errors.fail: unknown error code 'nil'")
    assert.has_error(function() errors.fail("io", 42) end,
      "rag.errors.fail: message must be a string, got number")
  end)

  it("keeps working when a caller edits the public tables", function()
    local saved = errors.codes[1]
    errors.codes[1] = "mine"
    errors.meaning.mine = "x"
    local ok = pcall(errors.fail, "mine", "x")
    errors.codes[1], errors.meaning.mine = saved, nil
    assert.is_false(ok)
    assert.is_false(errors.is_code("mine"))
  end)

  it("is the list the C module carries", function()
    local core = rag.core.errors
    assert.equal(#core, #errors.codes)
    for i, e in ipairs(core) do
      assert.equal(e.code, errors.codes[i])
      assert.equal(e.meaning, errors.meaning[e.code])
    end
  end)
end)
