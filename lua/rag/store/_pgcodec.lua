--- rag.store._pgcodec: the bytes of PostgreSQL's protocol 3.0 for
-- rag.store.pg: integers and strings in messages, ErrorResponse fields and
-- their error codes, SCRAM-SHA-256's arithmetic (RFC 5802, 7677) with
-- base64, and Lua values to and from the text format of parameters and rows.
-- @module rag.store._pgcodec

local core = require("rag.core")

local type, tonumber, error, setmetatable, ipairs = type, tonumber, error,
  setmetatable, ipairs
local byte, char, sub, format = string.byte, string.char, string.sub, string.format
local concat = table.concat
local floor, huge = math.floor, math.huge
local hmac, pbkdf2, sha256hex = core.text.hmac_sha256, core.text.pbkdf2_sha256, core.text.hash
local json = core.json

local M = {}

--- The value that stands for SQL NULL, in parameters and in rows.
M.null = setmetatable({}, {
  __tostring = function()
    return "rag.store.pg.null"
  end,
  __newindex = function()
    error("rag.store.pg.null is read-only", 2)
  end,
})
local null = M.null

local MAX_SCRAM_ITERATIONS = 10000000 -- refuse a server that would stall the client

-- {====== Bytes ======}

function M.u16(n)
  return char(floor(n / 256) % 256, n % 256)
end

function M.u32(n)
  if n < 0 then
    n = n + 4294967296
  end
  return char(floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
end

function M.get16(s, i)
  local a, b = byte(s, i, i + 1)
  return a * 256 + b
end

function M.get32(s, i) -- signed, as the protocol's Int32
  local a, b, c, d = byte(s, i, i + 3)
  local n = ((a * 256 + b) * 256 + c) * 256 + d
  return n >= 2147483648 and n - 4294967296 or n
end

-- The NUL-terminated string at i and the index after its NUL.
function M.cstring(s, i)
  local z = s:find("\0", i, true)
  if not z then
    return nil
  end
  return sub(s, i, z - 1), z + 1
end

function M.xor(a, b)
  local out = {}
  for i = 1, #a do
    local x, y, r, bit = byte(a, i), byte(b, i), 0, 1
    while x > 0 or y > 0 do
      if x % 2 ~= y % 2 then
        r = r + bit
      end
      x, y, bit = floor(x / 2), floor(y / 2), bit * 2
    end
    out[i] = char(r)
  end
  return concat(out)
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64_INDEX = {}
for i = 1, 64 do
  B64_INDEX[byte(B64, i)] = i - 1
end

-- Lowercase hex of the bytes of s.
function M.hex(s)
  return (s:gsub(".", function(c)
    return format("%02x", byte(c))
  end))
end

function M.b64encode(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = { floor(n / 262144) % 64, floor(n / 4096) % 64, floor(n / 64) % 64, n % 64 }
    out[#out + 1] = sub(B64, q[1] + 1, q[1] + 1) .. sub(B64, q[2] + 1, q[2] + 1)
      .. (b and sub(B64, q[3] + 1, q[3] + 1) or "=") .. (c and sub(B64, q[4] + 1, q[4] + 1) or "=")
  end
  return concat(out)
end

-- Standard base64 with padding, or nil when `s` is not that.
function M.b64decode(s)
  if #s % 4 ~= 0 or s:find("[^%w+/=]") or s:find("=[^=]") then
    return nil
  end
  local out = {}
  for i = 1, #s, 4 do
    local n, pad = 0, 0
    for j = i, i + 3 do
      local c = byte(s, j)
      local v = B64_INDEX[c]
      if c == 61 then
        pad, v = pad + 1, 0
      end
      n = n * 64 + v
    end
    local bytes = char(floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
    out[#out + 1] = sub(bytes, 1, 3 - pad)
  end
  return concat(out)
end

local function unhex(h)
  return (h:gsub("..", function(x)
    return char(tonumber(x, 16))
  end))
end

-- {====== Errors ======}

-- SQLSTATEs and classes with a code of their own; any other server error
-- is "provider" (the server refused the request).
local SQLSTATE_CODES = {
  ["28P01"] = "auth", ["28000"] = "auth", ["57014"] = "timeout", ["55P03"] = "timeout",
  ["25P03"] = "timeout", ["57P01"] = "io", ["57P02"] = "io", ["57P03"] = "io",
  ["53300"] = "ratelimit", ["22021"] = "encoding", ["08P01"] = "decode",
}
local SQLSTATE_CLASSES = { ["08"] = "io", ["28"] = "auth", ["53"] = "io", ["58"] = "io" }

-- ErrorResponse / NoticeResponse fields: { S=, V=, C=, M=, D=, H=, P=, ... }
function M.parse_fields(body)
  local f, i = {}, 1
  while i <= #body do
    local t = sub(body, i, i)
    if t == "\0" then
      break
    end
    local v, nxt = M.cstring(body, i + 1)
    if not v then
      break
    end
    f[t] = v
    i = nxt
  end
  return f
end

-- nil, "fname: ERROR 42601: message (detail; hint)", code, sqlstate
function M.server_error(fname, f)
  local state = f.C or "XX000"
  local code = SQLSTATE_CODES[state] or SQLSTATE_CLASSES[sub(state, 1, 2)] or "provider"
  local msg = format("%s: %s %s: %s", fname, f.V or f.S or "ERROR", state, f.M or "")
  local extra = {}
  if f.D then extra[#extra + 1] = f.D end
  if f.H then extra[#extra + 1] = "hint: " .. f.H end
  if f.P then extra[#extra + 1] = "at character " .. f.P end
  if #extra > 0 then
    msg = msg .. " (" .. concat(extra, "; ") .. ")"
  end
  return nil, msg, code, state
end

-- {====== SCRAM ======}

-- SCRAM-SHA-256's arithmetic (RFC 5802, section 3): from the password, the
-- user name and nonce of the client-first-message, and the
-- server-first-message: the client-final-message and the server signature
-- to expect | nil, why. PostgreSQL takes the user from the startup message
-- and the client sends an empty one.
function M.scram_final(user, password, nonce, server_first)
  local r = server_first:match("^r=([^,]+)")
  local s, i = server_first:match(",s=([^,]+),i=(%d+)")
  local salt = s and M.b64decode(s)
  i = tonumber(i)
  if not r or not salt or not i or sub(r, 1, #nonce) ~= nonce or #r == #nonce then
    return nil, "bad SCRAM server-first-message"
  end
  if i < 1 or i > MAX_SCRAM_ITERATIONS then
    return nil, format("SCRAM iteration count %d out of range", i)
  end
  local salted = pbkdf2(password, salt, i)
  local client_key = hmac(salted, "Client Key")
  local stored_key = unhex(sha256hex(client_key))
  local final_bare = "c=biws,r=" .. r
  local auth_message = "n=" .. user .. ",r=" .. nonce .. "," .. server_first .. "," .. final_bare
  local proof = M.xor(client_key, hmac(stored_key, auth_message))
  return final_bare .. ",p=" .. M.b64encode(proof), hmac(hmac(salted, "Server Key"), auth_message)
end

-- {====== Values ======}

local mtype = math.type

local function is_integer(v)
  if mtype then
    return mtype(v) == "integer"
  end
  return v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53
end

-- The text form of a Lua value as a parameter; nil for SQL NULL.
function M.encode_param(fname, v, i)
  local t = type(v)
  if v == nil or v == null then
    return nil
  elseif t == "string" then
    return v
  elseif t == "boolean" then
    return v and "true" or "false"
  elseif t == "number" then
    if v ~= v then
      return "NaN"
    elseif v == huge then
      return "Infinity"
    elseif v == -huge then
      return "-Infinity"
    elseif is_integer(v) then
      return format("%d", v)
    elseif v == floor(v) and v > -2 ^ 63 and v < 2 ^ 63 then
      return format("%.0f", v) -- an integral float (LuaJIT beyond 2^53): digits, no exponent
    end
    for _, p in ipairs({ "%.15g", "%.16g" }) do
      local s = format(p, v)
      if tonumber(s) == v then
        return s
      end
    end
    return format("%.17g", v)
  elseif t == "table" then
    local s, err = json.encode(v)
    if not s then
      error(format("%s: parameter %d: %s", fname, i, err), 3)
    end
    return s
  end
  error(format("%s: parameter %d: cannot send a %s", fname, i, t), 3)
end

local function parse_float(s)
  if s == "NaN" then
    return 0 / 0
  elseif s == "Infinity" then
    return huge
  elseif s == "-Infinity" then
    return -huge
  end
  return tonumber(s)
end

local function parse_json(s)
  local v = json.decode(s)
  if v == nil then
    return s
  end
  return v
end

-- Type OID -> parser of the text form (any other type stays a string).
local DECODERS = {
  [16] = function(s) return s == "t" end,
  [20] = tonumber, [21] = tonumber, [23] = tonumber, [26] = tonumber,
  [700] = parse_float, [701] = parse_float,
  [114] = parse_json, [3802] = parse_json,
}

-- {====== Rows ======}

-- RowDescription -> columns { { name=, type=, decode= }, ... }
function M.parse_columns(body)
  local n, i, cols = M.get16(body, 1), 3, {}
  for k = 1, n do
    local name, nxt = M.cstring(body, i)
    local oid = M.get32(body, nxt + 6)
    cols[k] = { name = name, type = oid, decode = DECODERS[oid] }
    i = nxt + 18
  end
  return cols
end

function M.parse_row(body, cols)
  local row, i = {}, 3
  for k = 1, #cols do
    local len = M.get32(body, i)
    i = i + 4
    local col = cols[k]
    if len < 0 then
      row[col.name] = null
    else
      local s = sub(body, i, i + len - 1)
      i = i + len
      if col.decode then
        row[col.name] = col.decode(s)
      else
        row[col.name] = s
      end
    end
  end
  return row
end

function M.new_result(cols)
  local names = {}
  for k, c in ipairs(cols or {}) do
    names[k] = c.name
  end
  return { columns = names }
end

return M
