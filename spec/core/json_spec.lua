-- rag.json: encode and decode (src/lrag_json.c). Runs unchanged on Lua 5.1,
-- 5.3, 5.4 and LuaJIT; integer-subtype checks run only where math.type exists.
local rag = require("rag")

local json = rag.json
local helpers = require("spec.helpers")

-- Lua 5.3+ has an integer subtype; 5.1 and LuaJIT do not.
local has_integers = math.type ~= nil

-- A printable form of a byte string for test names.
local function show(s)
  local out = {}
  for i = 1, #s do
    local b = s:byte(i)
    if b < 32 or b > 126 or b == 34 or b == 92 then
      out[i] = "\\" .. b
    else
      out[i] = string.char(b)
    end
  end
  return table.concat(out)
end

-- Asserts the decode failure contract: exactly nil, msg, "decode".
local function assert_decode_error(s, opts)
  local n = select("#", json.decode(s, opts))
  local v, msg, code = json.decode(s, opts)
  assert.equal(3, n)
  assert.is_nil(v)
  assert.equal("string", type(msg))
  assert.truthy(msg:find("rag.json.decode", 1, true), msg)
  assert.truthy(msg:find("at byte %d+"), msg)
  assert.equal("decode", code)
  return msg
end

-- Depth of nested single-element arrays: `[[[]]]` is 3.
local function depth_of(t)
  local d = 0
  while type(t) == "table" do
    d = d + 1
    t = t[1]
  end
  return d
end

-- A Lua value of n nested arrays, innermost empty.
local function nested(n)
  local root = {}
  local cur = root
  for _ = 2, n do
    local t = {}
    cur[1] = t
    cur = t
  end
  return root
end

describe("rag.json round trips", function()
  -- Canonical texts: sorted keys, no spaces, so encode(decode(s)) == s.
  local texts = {
    '[1,[2,[3,[]]],{"a":{"b":[true,false,null]}}]',
    '{"a":[],"b":{},"c":[{}],"d":[[]],"e":{"f":{}}}',
    '{"emoji":"\240\159\152\128\240\159\142\137","name":"\228\184\173\230\150\135 ' ..
      '\227\131\134\227\130\173\227\130\185\227\131\136 \237\149\156\234\181\173\236\150\180"}',
    '[0,-1,2.5,-0.25,1e+300,"",true,false,null]',
    '[[[[[[["deep"]]]]]]]',
    '{"":0,"a b":"c\\"d","x":{"y":{"z":[1,2,3]}}}',
    '[{"id":1,"tags":["a","b"]},{"id":2,"tags":[]}]',
    '"plain string"',
    '"\\u0000"',
    "true",
    "false",
    "null",
    "42",
    "[]",
    "{}",
  }
  for _, s in ipairs(texts) do
    it("re-encodes " .. show(s) .. " to the same text", function()
      local v, msg = json.decode(s)
      assert.is_nil(msg)
      assert.equal(s, json.encode(v))
    end)
  end

  -- Lua values: decode(encode(v)) is the same value.
  local values = {
    { "nested arrays in objects in arrays", { { a = { 1, { 2, 3 } }, b = { { c = true } } } } },
    { "booleans and null", { t = true, f = false, n = json.null, list = { true, false } } },
    { "CJK text", { zh = "\228\184\173\230\150\135", ja = "\227\129\130\227\129\132" } },
    { "emoji and accents", { "\240\159\152\128", "caf\195\169", "\195\177\195\188" } },
    { "an embedded NUL", { "a\0b", "\0" } },
    { "a mixed array", { 1, "two", 3.5, false, json.null, { x = "y" } } },
    { "an empty string key", { [""] = "empty" } },
  }
  for _, c in ipairs(values) do
    it("preserves " .. c[1], function()
      assert.are.same(c[2], json.decode(json.encode(c[2])))
    end)
  end

  it("keeps an empty array and an empty object apart", function()
    local v = json.decode('{"arr":[],"obj":{}}')
    assert.are.same({}, v.arr)
    assert.are.same({}, v.obj)
    assert.equal('{"arr":[],"obj":{}}', json.encode(v))
    assert.equal("[]", json.encode(json.decode("[]")))
    assert.equal("{}", json.encode(json.decode("{}")))
  end)

  it("accepts RFC 8259 whitespace between tokens", function()
    local v = json.decode(' \t\r\n[ 1 , { "a" : 2 } , "x" ] \n')
    assert.are.same({ 1, { a = 2 }, "x" }, v)
  end)

  it("decodes every scalar type", function()
    assert.equal(true, json.decode("true"))
    assert.equal(false, json.decode("false"))
    assert.equal(json.null, json.decode("null"))
    assert.equal("s", json.decode('"s"'))
    assert.equal(12, json.decode("12"))
    assert.equal(-0.5, json.decode("-0.5"))
    assert.equal(100, json.decode("1e2"))
    assert.equal(0.01, json.decode("1E-2"))
    assert.equal(250, json.decode("2.5e+2"))
  end)

  it("keeps the last of duplicate keys in a decoded object", function()
    assert.are.same({ a = 2 }, json.decode('{"a":1,"a":2}'))
  end)
end)

describe("rag.json strings", function()
  local unescapes = {
    { '"\\u0041"', "A" },
    { '"\\u00e9"', "\195\169" },
    { '"\\u00E9"', "\195\169" },
    { '"\\u007f"', "\127" },
    { '"\\u0800"', "\224\160\128" },
    { '"\\u4e2d\\u6587"', "\228\184\173\230\150\135" },
    { '"\\uffff"', "\239\191\191" },
    { '"\\ud83d\\ude00"', "\240\159\152\128" },
    { '"\\uD83D\\uDE00"', "\240\159\152\128" },
    { '"\\ud800\\udc00"', "\240\144\128\128" },
    { '"\\udbff\\udfff"', "\244\143\191\191" },
    { '"x\\ud83d\\ude00y"', "x\240\159\152\128y" },
    { '"\\u0000"', "\0" },
    { '"a\\u0000b"', "a\0b" },
    { '"\\"\\\\\\/\\b\\f\\n\\r\\t"', "\"\\/\b\f\n\r\t" },
    { '"\228\184\173 \240\159\152\128"', "\228\184\173 \240\159\152\128" },
  }
  for _, c in ipairs(unescapes) do
    it("decodes " .. show(c[1]), function()
      local s = json.decode(c[1])
      assert.equal(c[2], s)
      assert.equal(#c[2], #s)
    end)
  end

  it("keeps \\u0000 in object keys", function()
    local v = json.decode('{"a\\u0000b":1}')
    assert.equal(1, v["a\0b"])
    assert.is_nil(v.a)
    assert.equal('{"a\\u0000b":1}', json.encode(v))
  end)

  local escapes = {
    { '"', '"\\""' },
    { "\\", '"\\\\"' },
    { "\n", '"\\n"' },
    { "\r", '"\\r"' },
    { "\t", '"\\t"' },
    { "\b", '"\\b"' },
    { "\f", '"\\f"' },
    { "\0", '"\\u0000"' },
    { "\1", '"\\u0001"' },
    { "\27", '"\\u001b"' },
    { "\31", '"\\u001f"' },
    { "/", '"/"' },
    { "\127", '"\127"' },
    { "a\"b\\c\nd", '"a\\"b\\\\c\\nd"' },
    { "caf\195\169", '"caf\195\169"' },
    { "\240\159\152\128", '"\240\159\152\128"' },
  }
  for _, c in ipairs(escapes) do
    it("encodes " .. show(c[1]) .. " as " .. show(c[2]), function()
      assert.equal(c[2], json.encode(c[1]))
      assert.equal(c[1], json.decode(c[2]))
    end)
  end

  it("escapes object keys like strings", function()
    assert.equal('{"a\\tb":1,"q\\"":2}', json.encode({ ["a\tb"] = 1, ["q\""] = 2 }))
  end)

  local bad_utf8 = {
    { "a lone continuation byte", "ab\128", 3 },
    { "an invalid lead byte", "\255", 1 },
    { "an overlong encoding", "x\192\175", 2 },
    { "a truncated sequence", "x\228\184", 2 },
    { "an encoded surrogate", "\237\160\128", 1 },
    { "a code point above U+10FFFF", "\244\144\128\128", 1 },
  }
  for _, c in ipairs(bad_utf8) do
    it("returns nil, msg, \"encoding\" for " .. c[1], function()
      local v, msg, code = json.encode({ k = { c[2] } })
      assert.is_nil(v)
      assert.equal("rag.json.encode: invalid utf-8 at byte " .. c[3] .. " of a string", msg)
      assert.equal("encoding", code)
    end)
  end

  it("checks object keys for invalid UTF-8", function()
    local v, msg, code = json.encode({ ["key\255"] = 1 })
    assert.is_nil(v)
    assert.equal("rag.json.encode: invalid utf-8 at byte 4 of a string", msg)
    assert.equal("encoding", code)
  end)
end)

describe("rag.json numbers", function()
  local floats = { 0.1, 1 / 3, 2 / 3, 1e300, -1e-300, 2.5, 123456.789, 5e-324,
    1.7976931348623157e308, 1e21, -0.5, 3.141592653589793 }
  for _, x in ipairs(floats) do
    it("round-trips the float " .. string.format("%.17g", x), function()
      local y = json.decode(json.encode(x))
      assert.equal(x, y)
      if has_integers then assert.equal("float", math.type(y)) end
    end)
  end

  local float_texts = {
    { 0.5, "0.5" },
    { 0.1, "0.1" },
    { 1 / 3, "0.3333333333333333" },
    { -2.5e-7, "-2.5e-07" },
    { 1e300, "1e+300" },
    { 2 ^ 53, "9007199254740992.0" },
    { 1e16, "1e+16" },
  }
  for _, c in ipairs(float_texts) do
    it("encodes " .. c[2] .. " in the shortest exact form", function()
      assert.equal(c[2], json.encode(c[1]))
    end)
  end

  -- The encoder computes the digits of floats in [1e-4, 1e15) with integer
  -- arithmetic, not printf. Its text must be printf's shortest one: the
  -- least p in 15..17 for which "%.{p}g" reads back as the float. PUC Lua's
  -- string.format is C's printf, the reference; LuaJIT formats numbers
  -- with its own code, whose ties may round the other way, so there the
  -- text must read back and be no longer than the reference's.
  it("encodes floats near the fast range's ends and ties as printf's shortest text", function()
    local puc = not jit
    local function ref(v)
      for p = 15, 17 do
        local s = string.format("%." .. p .. "g", v)
        if p == 17 or tonumber(s) == v then
          return s
        end
      end
    end
    local r = helpers.rng(77)
    local cases = { 1e-4, 0.0001000000000000001, 9.999999999999999e-5, 0.001, 0.01, 0.1,
      0.3, 0.1 + 0.2, 1 / 61 + 1 / 62, 999999999999999.9, 999999999999999.8, 123456789012345.67,
      1e15 - 1.5, 3257179260.25390625, 0.5 + 2 ^ -40, 2 ^ -13, 1.0000000000000002, 4.35 }
    for j = 1, 255 do -- 18 digits ending in 5: a tie at 17, to even in printf
      cases[#cases + 1] = 3257179260 + j / 256
      cases[#cases + 1] = 1234567891 + j / 256
    end
    for _ = 1, 20000 do
      local x = r(1000000) / 1000000 * 10 ^ (r(23) - 7) -- 1e-6 to 1e15
      cases[#cases + 1] = x
      cases[#cases + 1] = -x
      cases[#cases + 1] = x + r(8) * 2 ^ -30 -- few fraction bits: ties at 17 digits
    end
    local fast = 0
    for _, v in ipairs(cases) do
      local got, want = json.encode(v), ref(v)
      assert.equal(v, tonumber(got), got)
      if v ~= math.floor(v) then -- integral values are the integer encoder's
        if puc then
          assert.equal(want, got)
        else
          assert.is_true(#got:gsub("^%-?0?%.?0*", "") <= #want:gsub("^%-?0?%.?0*", ""), got)
        end
        local a = math.abs(v)
        fast = fast + ((a >= 1e-4 and a < 1e15) and 1 or 0)
      end
    end
    assert.is_true(fast > 20000, "cases in the fast range: " .. fast)
  end)

  it("encodes integers without a fraction", function()
    assert.equal("[0,1,-2,123456789,9007199254740991]",
      json.encode({ 0, 1, -2, 123456789, 9007199254740991 }))
  end)

  it("encodes the extreme integers of Lua 5.3+ digit for digit", function()
    if not has_integers then
      return
    end
    assert.equal("[-9223372036854775808,9223372036854775807,-10,10,-1]",
      json.encode({ math.mininteger, math.maxinteger, -10, 10, -1 }))
  end)

  it("escapes a special byte at every place of a long string", function()
    -- the encoder skips plain text eight bytes at a time: put each byte that
    -- needs care at each offset, and compare with an escape done by hand
    local want = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\1"] = "\\u0001",
      ["\31"] = "\\u001f" }
    for _, c in ipairs({ '"', "\\", "\n", "\1", "\31", "\127", "\195\169", " ", "~" }) do
      for at = 1, 17 do
        local s = string.rep("a", at - 1) .. c .. string.rep("b", 20 - at)
        local e = want[c] or c
        assert.equal('"' .. string.rep("a", at - 1) .. e .. string.rep("b", 20 - at) .. '"',
          json.encode(s))
      end
    end
  end)

  it("finds invalid UTF-8 after a run of plain text", function()
    local s, msg, code = json.encode(string.rep("x", 19) .. "\255")
    assert.is_nil(s)
    assert.equal("rag.json.encode: invalid utf-8 at byte 20 of a string", msg)
    assert.equal("encoding", code)
  end)

  it("encodes an object of many members in key order", function()
    local t, parts = {}, {}
    for i = 1, 40 do
      t[string.format("k%02d", i)] = i
      parts[i] = string.format('"k%02d":%d', i, i)
    end
    t[7] = "seven" -- an integer key among them sorts by its name, "7" before "k"
    assert.equal('{"7":"seven",' .. table.concat(parts, ",") .. "}", json.encode(t))
  end)

  it("encodes integral floats as floats on Lua 5.3+", function()
    if not has_integers then
      assert.equal("1", json.encode(1.0)) -- every number is a double here
      return
    end
    assert.equal("1.0", json.encode(1.0))
    assert.equal("-3.0", json.encode(-3.0))
    assert.equal("[1,1.0]", json.encode({ 1, 1.0 }))
    assert.equal("float", math.type(json.decode(json.encode(1.0))))
    assert.equal("integer", math.type(json.decode(json.encode(1))))
  end)

  it("decodes the integer subtype only for integer literals", function()
    if not has_integers then
      assert.equal(1, json.decode("1"))
      assert.equal(1, json.decode("1.0"))
      return
    end
    local cases = {
      { "1", "integer" }, { "-7", "integer" }, { "0", "integer" }, { "-0", "integer" },
      { "1.0", "float" }, { "1e2", "float" }, { "1E2", "float" }, { "-0.0", "float" },
      { "9223372036854775808", "float" }, { "-9223372036854775809", "float" },
    }
    for _, c in ipairs(cases) do
      assert.equal(c[2], math.type(json.decode(c[1])), c[1])
    end
  end)

  it("keeps 2^53+1 and the int64 limits exact on Lua 5.3+", function()
    if not has_integers then
      assert.equal(2 ^ 53, json.decode("9007199254740993")) -- rounds to a double
      return
    end
    local big = math.tointeger(2 ^ 53) + 1
    assert.equal("9007199254740993", json.encode(big))
    assert.equal(big, json.decode("9007199254740993"))
    assert.equal("9223372036854775807", json.encode(math.maxinteger))
    assert.equal("-9223372036854775808", json.encode(math.mininteger))
    assert.equal(math.maxinteger, json.decode("9223372036854775807"))
    assert.equal(math.mininteger, json.decode("-9223372036854775808"))
    assert.equal("integer", math.type(json.decode("-9223372036854775808")))
    local v = json.decode(json.encode({ big, math.maxinteger, math.mininteger }))
    assert.are.same({ big, math.maxinteger, math.mininteger }, v)
    assert.equal("integer", math.type(v[1]))
  end)

  it("decodes integers beyond int64 as the nearest double", function()
    assert.equal(2 ^ 63, json.decode("9223372036854775808"))
    assert.equal(-(2 ^ 63) - 2048, json.decode("-9223372036854777856"))
  end)

  it("decodes numbers longer than 63 characters exactly", function()
    local ones = string.rep("1", 70)
    assert.equal(tonumber(ones), json.decode(ones))
    assert.equal(tonumber(ones), json.decode("[" .. ones .. "]")[1])
    local frac = "0." .. string.rep("3", 80)
    assert.equal(tonumber(frac), json.decode(frac))
  end)
end)

describe("rag.json arrays and objects", function()
  local sparse = {}
  sparse[3] = "c"
  sparse[1] = "a"
  local reversed = {}
  reversed[2] = "b"
  reversed[1] = "a"
  local shapes = {
    { "an empty table", {}, "[]" },
    { "a sequence", { 1, 2, 3 }, "[1,2,3]" },
    { "a sequence built backwards", reversed, '["a","b"]' },
    { "a table with a hole", sparse, '{"1":"a","3":"c"}' },
    { "a table starting at 2", { [2] = "b" }, '{"2":"b"}' },
    { "a table with key 0", { [0] = "z", "a" }, '{"0":"z","1":"a"}' },
    { "a negative key", { [-1] = "n" }, '{"-1":"n"}' },
    { "a sequence with a string key", { 1, 2, x = 3 }, '{"1":1,"2":2,"x":3}' },
    { "integer keys", { [1] = "a", [2] = "b", [10] = "c" }, '{"1":"a","10":"c","2":"b"}' },
    { "a marked sequence", json.object({ 1, 2 }), '{"1":1,"2":2}' },
    { "a marked empty table", json.object(), "{}" },
    { "an empty table as a value", { a = {} }, '{"a":[]}' },
    { "null in an array", { 1, json.null, 3 }, "[1,null,3]" },
    { "null as a value", { a = json.null }, '{"a":null}' },
  }
  for _, c in ipairs(shapes) do
    it("encodes " .. c[1] .. " as " .. c[3], function()
      assert.equal(c[3], json.encode(c[2]))
    end)
  end

  it("sorts object keys bytewise", function()
    local t = { b = 1, a = 2, B = 3, aa = 4, ["\195\169"] = 5, [""] = 6, ["a b"] = 7,
      ["10"] = 8, ["9"] = 9 }
    assert.equal('{"":6,"10":8,"9":9,"B":3,"a":2,"a b":7,"aa":4,"b":1,"\195\169":5}',
      json.encode(t))
  end)

  it("sorts the keys of nested objects too", function()
    assert.equal('[{"a":{"x":1,"y":2},"z":0}]',
      json.encode({ { z = 0, a = { y = 2, x = 1 } } }))
  end)

  it("gives the same text whatever the insertion order", function()
    local a, b = {}, {}
    local keys = { "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8" }
    for i = 1, #keys do a[keys[i]] = i end
    for i = #keys, 1, -1 do b[keys[i]] = i end
    assert.equal(json.encode(a), json.encode(b))
    assert.equal('{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8}', json.encode(a))
  end)

  it("encodes nil and json.null as null", function()
    assert.equal("null", json.encode(nil))
    assert.equal("null", json.encode(json.null))
    assert.equal("[true,false]", json.encode({ true, false }))
  end)
end)

describe("rag.json.object and rag.json.null", function()
  it("marks and returns the same table", function()
    local t = { 1, 2 }
    assert.equal(t, json.object(t))
    assert.equal('{"1":1,"2":2}', json.encode(t))
  end)

  it("returns a new empty marked table with no argument", function()
    local a, b = json.object(), json.object()
    assert.equal("table", type(a))
    assert.are_not.equal(a, b)
    assert.is_nil(next(a))
    assert.equal("{}", json.encode(a))
  end)

  -- Regression: an explicit nil once returned nil and set the metatable
  -- shared by every nil value.
  it("treats an explicit nil like no argument", function()
    local t = json.object(nil)
    assert.equal("table", type(t))
    assert.equal("{}", json.encode(t))
    assert.is_nil(debug.getmetatable(nil))
  end)

  it("marks decoded objects, not decoded arrays", function()
    local mt = getmetatable(json.object())
    assert.equal("table", type(mt))
    assert.equal(mt, getmetatable(json.decode("{}")))
    assert.equal(mt, getmetatable(json.decode('{"a":1}')))
    assert.equal(mt, getmetatable(json.decode('[{"a":{}}]')[1].a))
    assert.is_nil(getmetatable(json.decode("[]")))
    assert.is_nil(getmetatable(json.decode('{"a":[]}').a))
  end)

  it("keeps a decoded object with integer-like keys an object", function()
    local v = json.decode('{"1":"a","2":"b"}')
    assert.equal("a", v["1"])
    assert.is_nil(v[1])
    assert.equal('{"1":"a","2":"b"}', json.encode(v))
  end)

  it("raises when given a non-table", function()
    assert.has_error(function() json.object(5) end,
      "bad argument #1 to 'object' (table expected, got number)")
    assert.has_error(function() json.object("x") end,
      "bad argument #1 to 'object' (table expected, got string)")
  end)

  it("is a light userdata that decoding returns as is", function()
    assert.equal("userdata", type(json.null))
    assert.equal(json.null, json.decode("null"))
    assert.equal(json.null, json.decode("[null]")[1])
    assert.equal(json.null, json.decode('{"a":null}').a)
  end)
end)

describe("rag.json depth limits", function()
  it("decodes 1000 nested arrays", function()
    local v, msg = json.decode(string.rep("[", 1000) .. string.rep("]", 1000))
    assert.is_nil(msg)
    assert.equal(1000, depth_of(v))
  end)

  it("fails on 1001 nested arrays with code \"decode\"", function()
    assert_decode_error(string.rep("[", 1001) .. string.rep("]", 1001))
    assert_decode_error(string.rep('{"a":', 1001) .. "1" .. string.rep("}", 1001))
  end)

  it("honours max_depth when decoding", function()
    local msg = assert_decode_error("[[1]]", { max_depth = 1 })
    assert.truthy(msg:find("nesting too deep", 1, true), msg)
    assert_decode_error('{"a":{"b":1}}', { max_depth = 1 })
    assert_decode_error('[1,"x",[2,[3]]]', { max_depth = 2 })
    assert.are.same({ { 1 } }, json.decode("[[1]]", { max_depth = 2 }))
    assert.are.same({ 1, 2 }, json.decode("[1,2]", { max_depth = 1 }))
    assert.equal(5, json.decode("5", { max_depth = 1 }))
  end)

  it("encodes 1000 nested arrays and raises at 1001", function()
    local s = json.encode(nested(1000))
    assert.equal(string.rep("[", 1000) .. string.rep("]", 1000), s)
    assert.equal(1000, depth_of(json.decode(s)))
    assert.has_error(function() json.encode({ nested(1000) }) end,
      "rag.json.encode: nesting deeper than 1000 (a cycle?)")
  end)

  it("honours max_depth when encoding", function()
    assert.has_error(function() json.encode({ {} }, { max_depth = 1 }) end,
      "rag.json.encode: nesting deeper than 1 (a cycle?)")
    assert.has_error(function() json.encode({ a = { b = {} } }, { max_depth = 2 }) end,
      "rag.json.encode: nesting deeper than 2 (a cycle?)")
    assert.equal("[1]", json.encode({ 1 }, { max_depth = 1 }))
    assert.equal("[[1]]", json.encode({ { 1 } }, { max_depth = 2 }))
    assert.equal('"s"', json.encode("s", { max_depth = 1 }))
  end)

  it("raises on cycles", function()
    local t = {}
    t[1] = t
    assert.has_error(function() json.encode(t) end,
      "rag.json.encode: nesting deeper than 1000 (a cycle?)")
    local o = {}
    o.self = { parent = o }
    assert.has_error(function() json.encode(o) end,
      "rag.json.encode: nesting deeper than 1000 (a cycle?)")
  end)
end)

describe("rag.json.decode of malformed input", function()
  local malformed = {
    "",
    "   ",
    "\n",
    "[1,]",
    '{"a":1,}',
    "[,1]",
    "[1,,2]",
    "{,}",
    "01",
    "[01]",
    "-01",
    "1.",
    "[1.e5]",
    ".5",
    "+1",
    "-",
    "[-]",
    "1e",
    "1e+",
    "0x10",
    "[1 2]",
    '{"a":1 "b":2}',
    "{a:1}",
    "{'a':1}",
    "['a']",
    '{"a" 1}',
    '{"a":}',
    "{1:2}",
    '"abc',
    '["a\\x"]',
    '"\\u12"',
    '"\\ud800"',
    '"\\udc00"',
    '"\\ud800\\u0041"',
    '"\\ud800\\udbff"',
    '"\\ud83d"x',
    "NaN",
    "1e400",
    "[-1e999]",
    "-Infinity",
    "Infinity",
    "[NaN]",
    "[1] x",
    "[1]]",
    "1 2",
    "true false",
    "tru",
    "nul",
    "True",
    "[",
    "[[]",
    "]",
    "}",
    "{",
    '"a\tb"',
    '"a\nb"',
    '"a\0b"',
    "[1,\1 2]",
    "[1]\0",
    "\12[1]",
    "/* c */ 1",
    "// c\n1",
    "[1] // c",
  }
  for _, s in ipairs(malformed) do
    it("rejects " .. show(s), function()
      assert_decode_error(s)
    end)
  end

  local positions = {
    { "", 1 },
    { "[1,]", 4 },
    { '{"a":1,}', 8 },
    { "[1 2]", 4 },
    { '{"a" 1}', 6 },
    { "[01]", 2 },
    { "[1] x", 5 },
    { "true false", 6 },
    { '"a\tb"', 3 },
    { "[1,\1 2]", 4 },
    { "[1]\0", 4 },
  }
  for _, c in ipairs(positions) do
    it("reports byte " .. c[2] .. " for " .. show(c[1]), function()
      local msg = assert_decode_error(c[1])
      assert.equal(c[2], tonumber(msg:match("at byte (%d+)$")), msg)
    end)
  end

  it("names the fault in the message", function()
    assert.equal("rag.json.decode: control character at byte 3", select(2, json.decode('"a\tb"')))
    assert.equal("rag.json.decode: invalid number at byte 2", select(2, json.decode("[01]")))
    assert.equal("rag.json.decode: unexpected data after the value at byte 5",
      select(2, json.decode("[1] x")))
  end)

  -- cJSON's parse_hex4 maps a non-hex \u escape to U+0000 instead of
  -- failing; rag checks escapes itself.
  it("rejects \\u escapes with non-hex digits", function()
    for _, s in ipairs({ '"\\uzzzz"', '"\\u00G1"', '"\\u-123"', '"\\u 123"' }) do
      assert_decode_error(s)
    end
  end)

  -- RFC 8259 section 8.1: JSON text is UTF-8; otherwise decode(s) could give
  -- a string that encode refuses.
  it("rejects invalid UTF-8 inside strings", function()
    for _, s in ipairs({ '"\255"', '"\237\160\128"', '"\192\175"', '"\228\184"' }) do
      local v, msg, code = json.decode(s)
      assert.is_nil(v)
      assert.equal("string", type(msg))
      assert.truthy(code == "decode" or code == "encoding", code)
    end
  end)
end)

describe("rag.json misuse", function()
  local unencodable = {
    { "a function", print, "rag.json.encode: cannot encode a function" },
    { "a nested function", { a = { print } }, "rag.json.encode: cannot encode a function" },
    { "a coroutine", coroutine.create(function() end), "rag.json.encode: cannot encode a thread" },
    { "a full userdata", io.stdout, "rag.json.encode: cannot encode a userdata" },
    { "NaN", 0 / 0, "rag.json.encode: cannot encode nan" },
    { "a nested NaN", { x = 0 / 0 }, "rag.json.encode: cannot encode nan" },
    { "infinity", 1 / 0, "rag.json.encode: cannot encode inf" },
    { "minus infinity", { -1 / 0 }, "rag.json.encode: cannot encode inf" },
    { "a boolean key", { [true] = 1 },
      "rag.json.encode: object keys must be strings or integers, got boolean" },
    { "a table key", { [{}] = 1 },
      "rag.json.encode: object keys must be strings or integers, got table" },
    { "a fractional key", { [1.5] = 1 },
      "rag.json.encode: object keys must be strings or integers, got number" },
    { "keys 1 and \"1\"", { [1] = "a", ["1"] = "b" },
      "rag.json.encode: duplicate object key '1'" },
    { "keys 10 and \"10\" in a marked table", json.object({ [10] = 1, ["10"] = 2 }),
      "rag.json.encode: duplicate object key '10'" },
  }
  for _, c in ipairs(unencodable) do
    it("encode raises for " .. c[1], function()
      assert.has_error(function() json.encode(c[2]) end, c[3])
    end)
  end

  it("encode raises with no argument", function()
    assert.has_error(function() json.encode() end, "bad argument #1 to 'encode' (value expected)")
  end)

  it("decode raises for a non-string", function()
    assert.has_error(function() json.decode(nil) end,
      "bad argument #1 to 'decode' (string expected, got nil)")
    assert.has_error(function() json.decode({}) end,
      "bad argument #1 to 'decode' (string expected, got table)")
    assert.has_error(function() json.decode(true) end,
      "bad argument #1 to 'decode' (string expected, got boolean)")
    assert.has_error(function() json.decode() end,
      "bad argument #1 to 'decode' (string expected, got no value)")
  end)

  for _, f in ipairs({ "encode", "decode" }) do
    local arg = f == "encode" and 1 or "1"
    local prefix = "rag.json." .. f .. ": "

    it(f .. " raises for an unknown option key", function()
      assert.has_error(function() json[f](arg, { foo = 1 }) end, prefix .. "unknown option 'foo'")
      assert.has_error(function() json[f](arg, { max_depth = 5, maxdepth = 5 }) end,
        prefix .. "unknown option 'maxdepth'")
      assert.has_error(function() json[f](arg, { 5 }) end, prefix .. "option keys must be strings")
    end)

    it(f .. " raises for max_depth out of 1..1000", function()
      for _, d in ipairs({ 0, -1, 1001, 0 / 0, 1.5 }) do
        assert.has_error(function() json[f](arg, { max_depth = d }) end,
          prefix .. "option 'max_depth' must be an integer in [1, 1000]")
      end
      assert.equal(f == "encode" and "1" or 1, json[f](arg, { max_depth = 1000 }))
    end)

    it(f .. " raises for a non-number max_depth or non-table options", function()
      assert.has_error(function() json[f](arg, { max_depth = "2" }) end,
        prefix .. "option 'max_depth' must be an integer, got string")
      assert.has_error(function() json[f](arg, 5) end)
      assert.has_error(function() json[f](arg, "x") end)
    end)
  end
end)
