--- rag.opts: checks an options table against a schema, for the Lua modules.
-- Unknown keys, wrong types and out-of-range values raise, naming the
-- function; missing keys take their defaults.
-- @module rag.opts
local M = {}

local type, pairs, tostring, error = type, pairs, tostring, error

local function fail(fname, level, fmt, ...)
  error(fname .. ": " .. string.format(fmt, ...), level + 1)
end

-- A bound as people write it, the same under every Lua: 1000000, not
-- 1000000.0 (5.3+) or 1e+06.
local function bound(x)
  if x == nil or x == math.huge then
    return "inf"
  elseif x == -math.huge then
    return "-inf"
  elseif x == math.floor(x) and x > -2 ^ 53 and x < 2 ^ 53 then
    return string.format("%d", x)
  end
  return string.format("%.14g", x)
end

local function check_value(fname, level, key, v, s)
  local t = type(v)
  if not ("|" .. s[1] .. "|"):find("|" .. t .. "|", 1, true) then
    fail(fname, level + 1, "'%s' must be a %s, got %s", key, s[1]:gsub("|", " or "), t)
  end
  if t == "number" then
    if v ~= v or (s.int and v ~= math.floor(v)) then
      fail(fname, level + 1, "'%s' must be %s", key, s.int and "an integer" or "a number")
    end
    if (s.min and v < s.min) or (s.max and v > s.max) or (s.above and v <= s.above) then
      local lo = s.above and ("(" .. bound(s.above)) or ("[" .. (s.min and bound(s.min) or "-inf"))
      fail(fname, level + 1, "'%s' must be in %s, %s]", key, lo, bound(s.max))
    end
  elseif t == "string" and s.enum then
    for _, e in ipairs(s.enum) do
      if v == e then
        return
      end
    end
    fail(fname, level + 1, "'%s' must be one of %s, got '%s'", key,
      table.concat(s.enum, ", "), v)
  end
end

--- Returns a new table with the checked options and defaults.
-- @tparam string fname the public name, for messages ("rag.providers.openai")
-- @param opts the caller's table or nil
-- @tparam table schema `schema[key] = { "number|string", default =, min =,
--   max =, above = (exclusive minimum), int = true, enum = { ... } }`
-- @tparam[opt=1] number level the stack level blamed, counted from the caller
-- @raise on an unknown key or a bad value
function M.check(fname, opts, schema, level)
  level = (level or 1) + 1
  if opts == nil then
    opts = {}
  elseif type(opts) ~= "table" then
    fail(fname, level, "options must be a table, got %s", type(opts))
  end
  for k in pairs(opts) do
    if type(k) ~= "string" or schema[k] == nil then
      fail(fname, level, "unknown option '%s'", tostring(k))
    end
  end
  local out = {}
  for k, s in pairs(schema) do
    local v = opts[k]
    if v == nil then
      v = s.default
    else
      check_value(fname, level, k, v, s)
    end
    out[k] = v
  end
  return out
end

--- Raises unless `list` is a sequence of strings (numbers are not accepted).
-- @treturn number its length
function M.strings(fname, what, list, level)
  level = (level or 1) + 1
  if type(list) ~= "table" then
    fail(fname, level, "%s must be a list of strings, got %s", what, type(list))
  end
  local n = #list
  for i = 1, n do
    if type(list[i]) ~= "string" then
      fail(fname, level, "%s[%d] must be a string, got %s", what, i, type(list[i]))
    end
  end
  return n
end

return M
