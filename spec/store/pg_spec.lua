-- rag.store.pg without a server: the SCRAM-SHA-256 arithmetic against RFC
-- 7677's example, base64, connection URLs and option checks. The client
-- against a real server: spec/pg (make test-pg).
local pg = require("rag.store.pg")
local codec = require("rag.store._pgcodec")

describe("rag.store.pg SCRAM-SHA-256", function()
  -- RFC 7677, section 3: user "user", password "pencil".
  local nonce = "rOprNGfwEbeRWgbNEkqO"
  local server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    .. "s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"

  it("computes RFC 7677's client proof and server signature", function()
    local final, sig = codec.scram_final("user", "pencil", nonce, server_first)
    assert.equal("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
      .. "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", final)
    assert.equal("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", codec.b64encode(sig))
  end)

  it("gives another proof for another password", function()
    local a = codec.scram_final("user", "pencil", nonce, server_first)
    local b = codec.scram_final("user", "pencil2", nonce, server_first)
    assert.not_equal(a, b)
  end)

  it("refuses a server nonce that does not extend the client's, and bad fields", function()
    local other = server_first:gsub("^r=rOpr", "r=xOpr")
    assert.is_nil((codec.scram_final("user", "pencil", nonce, other)))
    local same = "r=" .. nonce .. ",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert.is_nil((codec.scram_final("user", "pencil", nonce, same)))
    local _, why = codec.scram_final("user", "p", nonce, (server_first:gsub("i=4096", "i=0")))
    assert.matches("iteration count 0", why)
    _, why = codec.scram_final("user", "p", nonce, (server_first:gsub("i=4096", "i=99999999")))
    assert.matches("out of range", why)
    assert.is_nil((codec.scram_final("user", "p", nonce, (server_first:gsub("s=W22", "s=!22")))))
  end)
end)

describe("rag.store.pg helpers", function()
  it("base64 round-trips every length and matches RFC 4648's examples", function()
    local cases = { [""] = "", f = "Zg==", fo = "Zm8=", foo = "Zm9v", foob = "Zm9vYg==",
      fooba = "Zm9vYmE=", foobar = "Zm9vYmFy" }
    for plain, enc in pairs(cases) do
      assert.equal(enc, codec.b64encode(plain))
      assert.equal(plain, codec.b64decode(enc))
    end
    local all = {}
    for i = 0, 255 do
      all[#all + 1] = string.char(i)
    end
    all = table.concat(all)
    for n = 0, 40 do
      assert.equal(all:sub(1, n), codec.b64decode(codec.b64encode(all:sub(1, n))))
    end
    assert.is_nil(codec.b64decode("Zm9"))
    assert.is_nil(codec.b64decode("Zm=v"))
    assert.is_nil(codec.b64decode("Zm9v!A=="))
  end)

  it("xors byte strings", function()
    assert.equal("\0\255\15\240", codec.xor("\170\85\255\0", "\170\170\240\240"))
  end)

  it("parses connection URLs", function()
    local o = pg.parse_dsn("postgres://u%40x:p%3Aw@db.example:6543/my%20db"
      .. "?sslmode=verify-full&connect_timeout=3&statement_timeout=5s")
    assert.same({ user = "u@x", password = "p:w", host = "db.example", port = 6543,
      database = "my db", ssl = "verify", connect_timeout = 3,
      params = { statement_timeout = "5s" } }, o)
    assert.same({ host = "::1", port = 5432, user = "me" },
      pg.parse_dsn("postgresql://me@[::1]:5432"))
    assert.same({ host = "h" }, pg.parse_dsn("postgres://h"))
    assert.same({ user = "a", password = "", host = "h", database = "d" },
      pg.parse_dsn("postgres://a:@h/d"))
    assert.has_error(function() pg.parse_dsn("mysql://h") end,
      "rag.store.pg.parse_dsn: not a postgres:// URL")
    assert.has_error(function() pg.parse_dsn("postgres://h?sslmode=maybe") end,
      "rag.store.pg.parse_dsn: unknown sslmode 'maybe'")
    assert.has_error(function() pg.parse_dsn(42) end,
      "rag.store.pg.parse_dsn: dsn must be a string, got number")
  end)

  it("splits the store's table off a connection URL", function()
    local pgstore = require("rag.store.postgres")
    assert.same({ "postgres://h/db?sslmode=require", "docs" },
      { pgstore.split_url("postgres://h/db?table=docs&sslmode=require") })
    assert.same({ "postgres://u:p@h:5/db", "t_1" },
      { pgstore.split_url("postgres://u:p@h:5/db?table=t_1") })
    assert.same({ "postgres://h/db?a=1&b=2" }, { pgstore.split_url("postgres://h/db?a=1&b=2") })
    assert.same({ "postgres://h/db" }, { pgstore.split_url("postgres://h/db") })
  end)

  it("raises on bad options", function()
    assert.has_error(function() pg.connect({ hots = "x" }) end,
      "rag.store.pg.connect: unknown option 'hots'")
    assert.has_error(function() pg.connect({ port = 0 }) end,
      "rag.store.pg.connect: 'port' must be in [1, 65535]")
    assert.has_error(function() pg.connect({ ssl = "always" }) end,
      "rag.store.pg.connect: 'ssl' must be one of disable, prefer, require, verify, got 'always'")
    assert.has_error(function() pg.connect({ params = { x = {} } }) end,
      "rag.store.pg.connect: params must map names to strings")
    assert.has_error(function() pg.pool({ pool_size = -1 }) end,
      "rag.store.pg.pool: 'pool_size' must be in [0, 10000]")
  end)

  it("returns nil, msg, \"io\" when nothing listens", function()
    local socket = require("socket")
    local srv = assert(socket.bind("127.0.0.1", 0))
    local _, port = srv:getsockname()
    srv:close()
    local c, msg, code = pg.connect({ port = tonumber(port), connect_timeout = 2 })
    assert.is_nil(c)
    assert.equal("io", code)
    assert.matches("^rag.store.pg.connect: connecting to 127.0.0.1:%d+: ", msg)
  end)

  it("writes parameters as PostgreSQL reads them back", function()
    local enc = function(v) return codec.encode_param("f", v, 1) end
    assert.equal("42", enc(42))
    assert.equal("-7", enc(-7))
    assert.equal("0.1", enc(0.1))
    assert.equal("0.30000000000000004", enc(0.1 + 0.2))
    assert.equal("1.5e-300", enc(1.5e-300))
    assert.equal("3", enc(3.0))
    assert.equal("9007199254740994", enc(2 ^ 53 + 2)) -- a float: digits, no exponent
    assert.equal("1e+300", enc(1e300))
    assert.equal("Infinity", enc(math.huge))
    assert.equal("-Infinity", enc(-math.huge))
    assert.equal("NaN", enc(0 / 0))
    assert.equal("true", enc(true))
    assert.equal("false", enc(false))
    assert.equal("x\0y", enc("x\0y"))
    assert.equal("[1,2.5,3]", enc({ 1, 2.5, 3 }))
    assert.is_nil(enc(nil))
    assert.is_nil(enc(pg.null))
    assert.has_error(function() enc(function() end) end, "f: parameter 1: cannot send a function")
    assert.has_error(function() enc(io.stdout) end, "f: parameter 1: cannot send a userdata")
  end)

  it("has a NULL sentinel that cannot be changed", function()
    assert.equal("rag.store.pg.null", tostring(pg.null))
    assert.has_error(function() pg.null.x = 1 end, "rag.store.pg.null is read-only")
  end)
end)

describe("rag.store.pg against an impostor server", function()
  -- spec/fixtures/pgfake.py serves one connection as the scenario says.
  local function against(scenario, opts)
    local srv = io.popen("python3 spec/fixtures/pgfake.py " .. scenario)
    local port = tonumber(srv:read("*l"))
    local o = { port = port, user = "u", password = "secret", connect_timeout = 5, timeout = 5 }
    for k, v in pairs(opts or {}) do
      o[k] = v or nil -- false: leave the option out
    end
    local c, msg, code = pg.connect(o)
    srv:close()
    return c, msg, code
  end

  it("refuses a server whose SCRAM signature is wrong", function()
    local c, msg, code = against("badsig")
    assert.is_nil(c)
    assert.equal("auth", code)
    assert.matches("SCRAM signature does not match", msg)
  end)

  it("refuses SASL without SCRAM-SHA-256, and other methods", function()
    local c, msg, code = against("nomech")
    assert.is_nil(c)
    assert.equal("auth", code)
    assert.matches("no supported SASL mechanism %(SCRAM%-SHA%-256%-PLUS", msg)
    c, msg, code = against("gss")
    assert.is_nil(c)
    assert.equal("auth", code)
    assert.matches("unsupported authentication request 7", msg)
  end)

  it("gives \"auth\" when a password is asked for and none was given", function()
    local c, msg, code = against("gss", { password = false })
    assert.is_nil(c)
    assert.equal("auth", code)
    assert.matches("none was given", msg)
  end)

  it("gives \"decode\" for a broken message and \"io\" for a dropped connection", function()
    local c, msg, code = against("badlen")
    assert.is_nil(c)
    assert.equal("decode", code)
    assert.matches("bad message length 2", msg)
    c, msg, code = against("dropped")
    assert.is_nil(c)
    assert.equal("io", code)
    assert.matches("connection closed", msg)
  end)
end)
