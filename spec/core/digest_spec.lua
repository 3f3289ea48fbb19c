-- rag.text.hmac_sha256, pbkdf2_sha256, md5 and random (src/rag_digest.c)
-- against published test vectors: RFC 4231 (HMAC-SHA-256), RFC 7914
-- section 11 and the PBKDF2-HMAC-SHA-256 vectors in the style of RFC 6070,
-- RFC 1321's MD5 suite.
local rag = require("rag")

local text = rag.text

local function hex(s)
  return (s:gsub(".", function(c)
    return string.format("%02x", c:byte())
  end))
end

local function unhex(h)
  return (h:gsub("%s", ""):gsub("..", function(x)
    return string.char(tonumber(x, 16))
  end))
end

describe("rag.text.hmac_sha256", function()
  local key25 = unhex("0102030405060708090a0b0c0d0e0f10111213141516171819")
  local big = ("\170"):rep(131)
  local cases = { -- RFC 4231, test cases 1 to 7
    { ("\11"):rep(20), "Hi There",
      "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" },
    { "Jefe", "what do ya want for nothing?",
      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" },
    { ("\170"):rep(20), ("\221"):rep(50),
      "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe" },
    { key25, ("\205"):rep(50),
      "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b" },
    { ("\12"):rep(20), "Test With Truncation", "a3b6167473100ee06e0c796c2955552b" },
    { big, "Test Using Larger Than Block-Size Key - Hash Key First",
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54" },
    { big, "This is a test using a larger than block-size key and a larger than "
      .. "block-size data. The key needs to be hashed before being used by the HMAC "
      .. "algorithm.", "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2" },
  }
  for i, c in ipairs(cases) do
    it("RFC 4231 test case " .. i, function()
      local mac = text.hmac_sha256(c[1], c[2])
      assert.equal(32, #mac)
      assert.equal(c[3], hex(mac):sub(1, #c[3]))
    end)
  end

  it("takes an empty key and message, and keys of exactly one block", function()
    -- HMAC(K, m) with K of 64 bytes is used as is; of 65, hashed to 32 first.
    assert.equal("b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad",
      hex(text.hmac_sha256("", "")))
    local k64 = ("k"):rep(64)
    assert.not_equal(text.hmac_sha256(k64, "m"), text.hmac_sha256(k64 .. "k", "m"))
    assert.equal(text.hmac_sha256(unhex(text.hash(k64 .. "k")), "m"),
      text.hmac_sha256(k64 .. "k", "m"))
  end)

  it("raises on a non-string", function()
    assert.has_error(function() text.hmac_sha256(nil, "x") end,
      "bad argument #1 to 'hmac_sha256' (string expected, got nil)")
    assert.has_error(function() text.hmac_sha256("k", {}) end,
      "bad argument #2 to 'hmac_sha256' (string expected, got table)")
  end)
end)

describe("rag.text.pbkdf2_sha256", function()
  local cases = {
    -- RFC 7914, section 11
    { "passwd", "salt", 1, 64, "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20"
      .. "dacbc49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783" },
    { "Password", "NaCl", 80000, 64, "4ddcd8f60b98be21830cee5ef22701f9641a4418d04c0414aeff08"
      .. "876b34ab56a1d425a1225833549adb841b51c9b3176a272bdebba1d078478f62b397f33c8d" },
    -- RFC 6070's inputs with SHA-256 (published with the same layout)
    { "password", "salt", 1, 32,
      "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b" },
    { "password", "salt", 2, 32,
      "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43" },
    { "password", "salt", 4096, 32,
      "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a" },
    { "passwordPASSWORDpassword", "saltSALTsaltSALTsaltSALTsaltSALTsalt", 4096, 40,
      "348c89dbcbd32b2f32d814b8116e84cf2b17347ebc1800181c4e2a1fb8dd53e1c635518c7dac47e9" },
    { "pass\0word", "sa\0lt", 4096, 16, "89b69d0516f829893c696226650a8687" },
  }
  for _, c in ipairs(cases) do
    it(string.format("P=%q S=%q c=%d dkLen=%d", c[1], c[2], c[3], c[4]), function()
      assert.equal(c[5], hex(text.pbkdf2_sha256(c[1], c[2], c[3], c[4])))
    end)
  end

  it("derives 32 bytes by default, and a prefix for shorter lengths", function()
    local k = text.pbkdf2_sha256("password", "salt", 2)
    assert.equal("ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43", hex(k))
    assert.equal(k:sub(1, 7), text.pbkdf2_sha256("password", "salt", 2, 7))
  end)

  it("is one HMAC when the iterations are 1 and the length is 32", function()
    assert.equal(text.hmac_sha256("pw", "NaCl\0\0\0\1"), text.pbkdf2_sha256("pw", "NaCl", 1))
  end)

  it("raises on bad arguments", function()
    assert.has_error(function() text.pbkdf2_sha256("p", "s", 0) end,
      "bad argument #3 to 'pbkdf2_sha256' (iterations must be an integer in [1, 4294967295])")
    assert.has_error(function() text.pbkdf2_sha256("p", "s", -1) end,
      "bad argument #3 to 'pbkdf2_sha256' (iterations must be an integer in [1, 4294967295])")
    assert.has_error(function() text.pbkdf2_sha256("p", "s", 2 ^ 32) end,
      "bad argument #3 to 'pbkdf2_sha256' (iterations must be an integer in [1, 4294967295])")
    assert.has_error(function() text.pbkdf2_sha256("p", "s", 1.5) end,
      "bad argument #3 to 'pbkdf2_sha256' (iterations must be an integer in [1, 4294967295])")
    assert.has_error(function() text.pbkdf2_sha256("p", "s", 1, 0) end,
      "bad argument #4 to 'pbkdf2_sha256' (length must be an integer in [1, 1048576])")
    assert.has_error(function() text.pbkdf2_sha256("p", "s", 1, 2 ^ 20 + 1) end,
      "bad argument #4 to 'pbkdf2_sha256' (length must be an integer in [1, 1048576])")
    assert.has_error(function() text.pbkdf2_sha256("p", nil, 1) end,
      "bad argument #2 to 'pbkdf2_sha256' (string expected, got nil)")
    assert.has_error(function() text.pbkdf2_sha256({}, "s", 1) end,
      "bad argument #1 to 'pbkdf2_sha256' (string expected, got table)")
    assert.has_error(function() text.pbkdf2_sha256("p", "s") end,
      "bad argument #3 to 'pbkdf2_sha256' (number expected, got no value)")
  end)
end)

describe("rag.text.md5", function()
  -- RFC 1321, appendix A.5
  local cases = {
    { "", "d41d8cd98f00b204e9800998ecf8427e" },
    { "a", "0cc175b9c0f1b6a831c399e269772661" },
    { "abc", "900150983cd24fb0d6963f7d28e17f72" },
    { "message digest", "f96b697d7cb7938d525a2f31aaf161d0" },
    { "abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b" },
    { "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
      "57edf4a22be3c955ac49da2e2107b67a" },
  }
  for _, c in ipairs(cases) do
    it(string.format("%q", c[1]), function()
      assert.equal(c[2], text.md5(c[1]))
    end)
  end
  it("raises on a non-string", function()
    assert.has_error(function() text.md5(nil) end,
      "bad argument #1 to 'md5' (string expected, got nil)")
  end)
end)

describe("rag.text.random", function()
  it("gives n bytes, different each call", function()
    assert.equal("", text.random(0))
    local a, b = text.random(32), text.random(32)
    assert.equal(32, #a)
    assert.not_equal(a, b)
    assert.equal(65536, #text.random(65536))
  end)

  it("spreads its bytes over all values", function()
    local seen, n = {}, 0
    for c in text.random(4096):gmatch(".") do
      if not seen[c] then
        seen[c] = true
        n = n + 1
      end
    end
    assert.is_true(n > 240) -- 4096 uniform bytes miss a value with odds ~ 256 * e^-16
  end)

  it("raises on an out-of-range n", function()
    assert.has_error(function() text.random(-1) end,
      "bad argument #1 to 'random' (n must be an integer in [0, 65536])")
    assert.has_error(function() text.random(65537) end,
      "bad argument #1 to 'random' (n must be an integer in [0, 65536])")
    assert.has_error(function() text.random("x") end,
      "bad argument #1 to 'random' (number expected, got string)")
  end)
end)
