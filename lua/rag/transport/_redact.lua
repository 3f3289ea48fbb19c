--- rag.transport._redact (internal, not API): what messages and traces may
-- show of a request. `url` is the one URL cut in Lua (the C transport makes
-- the same cut); `scrubber(key)` hides every form of an API key a server or
-- a transport may echo. The rule is in docs/api.md (rag.providers, Keys).
-- Pure Lua with no dependencies, so rag.transport.ngx loads anywhere.
-- @module rag.transport._redact
local byte, char, sub, find, concat = string.byte, string.char, string.sub, string.find,
  table.concat
local floor, tonumber, sort, type, tostring = math.floor, tonumber, table.sort, type, tostring

local M = {}

local REDACTED = "[redacted]"

--- `url` as scheme://host[:port]/path: no user info, query or fragment
-- (keys live there). Without "scheme://", the authority ends at the first
-- "/", "?" or "#" (the cut of push_safe_url in src/lrag_http.c).
function M.url(url)
  local cut = find(url, "[/?#]") or #url + 1
  local hs = 1
  if cut > 1 and sub(url, cut - 1, cut - 1) == ":" and sub(url, cut, cut + 1) == "//" then
    hs = cut + 2
  end
  local he = find(url, "[/?#]", hs) or #url + 1
  local authority = sub(url, hs, he - 1)
  authority = authority:match("^.*@(.*)$") or authority
  return sub(url, 1, hs - 1) .. authority .. sub(url, he):match("^[^?#]*")
end

-- {====== Encoded text ======}

local JSON_ESCAPES = { ["/"] = "/", ["\\"] = "\\", ['"'] = '"', b = "\b", f = "\f",
  n = "\n", r = "\r", t = "\t" }

-- s with %XX (URL encoding) and JSON escapes (\/, \uXXXX below 0x80, ...)
-- decoded, and for each byte of the result the span of s it came from.
-- Nil when s has nothing to decode.
local function decode(s)
  if not find(s, "[%%\\]") then
    return nil
  end
  local out, from, to = {}, {}, {}
  local i, n = 1, #s
  while i <= n do
    local c, len = sub(s, i, i), 1
    if c == "%" and find(s, "^%x%x", i + 1) then
      c, len = char(tonumber(sub(s, i + 1, i + 2), 16)), 3
    elseif c == "\\" then
      local e = sub(s, i + 1, i + 1)
      if JSON_ESCAPES[e] then
        c, len = JSON_ESCAPES[e], 2
      elseif e == "u" and find(s, "^00[0-7]%x", i + 2) then
        c, len = char(tonumber(sub(s, i + 2, i + 5), 16)), 6
      end
    end
    out[#out + 1], from[#out + 1], to[#out + 1] = c, i, i + len - 1
    i = i + len
  end
  return concat(out), from, to
end

-- {====== Base64 ======}

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local function base64(s)
  local out = {}
  for i = 1, #s - 2, 3 do
    local a, b, c = byte(s, i, i + 2)
    local v = a * 65536 + b * 256 + c
    local q1, q2, q3 = floor(v / 262144), floor(v / 4096) % 64, floor(v / 64) % 64
    out[#out + 1] = sub(B64, q1 + 1, q1 + 1) .. sub(B64, q2 + 1, q2 + 1)
      .. sub(B64, q3 + 1, q3 + 1) .. sub(B64, v % 64 + 1, v % 64 + 1)
  end
  return concat(out)
end

-- The base64 characters that depend on the key's bytes alone, for the key
-- starting at each of the three byte offsets within a 3-byte group (as in
-- base64("user:" .. key)), in the standard and the URL-safe alphabets.
local function base64_cores(key)
  local cores = {}
  for o = 0, 2 do
    local data = ("\0"):rep(o) .. key
    data = data .. ("\0"):rep(3 - #data % 3)
    local first = floor((8 * o + 5) / 6)            -- ceil(8o / 6)
    local last = floor((8 * o + 8 * #key) / 6) - 1  -- last char inside the key's bits
    local core = sub(base64(data), first + 1, last + 1)
    cores[#cores + 1] = core
    cores[#cores + 1] = (core:gsub("[+/]", { ["+"] = "-", ["/"] = "_" }))
  end
  return cores
end

-- {====== Scrubbing ======}

local MIN_RUN = 8      -- a shorter run of the key's characters is not hidden
local MIN_B64_RUN = 12 -- base64 characters: 9 bytes' worth
local MIN_MASKED = 4   -- key characters shown around a mask that make it the key's

-- Every substring of `s` of length `w` (all of it when shorter), once.
local function windows(s, w, into, seen)
  if #s <= w then
    w = #s
  end
  for i = 1, #s - w + 1 do
    local x = sub(s, i, i + w - 1)
    if not seen[x] then
      seen[x] = true
      into[#into + 1] = x
    end
  end
end

-- Adds the span [a, b] of every plain occurrence of each needle in s.
local function occurrences(s, needles, spans)
  for _, x in ipairs(needles) do
    local init = 1
    while true do
      local a, b = find(s, x, init, true)
      if not a then
        break
      end
      spans[#spans + 1] = { a, b }
      init = a + 1
    end
  end
end

local function is_b64(c)
  return c ~= "" and find(c, "^[%w+/=_%-]$") ~= nil
end

-- Masked echoes: a run of "*", "…", "•" (or of two or more ".") with the
-- key's first k characters before it and its last k2 after, k + k2 >= 4.
local function masked(s, key, spans)
  local t = s:gsub("\226\128[\162\166]", "***") -- "•" and "…", same byte length
  local init = 1
  while true do
    local a, b = find(t, "[%*%.]+", init)
    if not a then
      return
    end
    init = b + 1
    if b > a or sub(t, a, a) == "*" then
      local k = a - 1 < #key and a - 1 or #key
      while k > 0 and sub(s, a - k, a - 1) ~= sub(key, 1, k) do
        k = k - 1
      end
      local k2 = #s - b < #key and #s - b or #key
      while k2 > 0 and sub(s, b + 1, b + k2) ~= sub(key, -k2) do
        k2 = k2 - 1
      end
      if k + k2 >= MIN_MASKED then
        spans[#spans + 1] = { a - k, b + k2 }
      end
    end
  end
end

-- s with the spans (merged where they overlap or touch) replaced.
local function replace(s, spans)
  if #spans == 0 then
    return s
  end
  sort(spans, function(x, y) return x[1] < y[1] end)
  local out, pos = {}, 1
  local a, b = spans[1][1], spans[1][2]
  for i = 2, #spans + 1 do
    local sp = spans[i]
    if sp and sp[1] <= b + 1 then
      if sp[2] > b then
        b = sp[2]
      end
    else
      out[#out + 1] = sub(s, pos, a - 1)
      out[#out + 1] = REDACTED
      pos = b + 1
      if sp then
        a, b = sp[1], sp[2]
      end
    end
  end
  out[#out + 1] = sub(s, pos)
  return concat(out)
end

--- A function `scrub(s) -> s` that replaces every form of `key` in a
-- string by "[redacted]": the key; any run of 8 or more of its characters;
-- either of those with characters URL-encoded (%XX) or JSON-escaped (\/,
-- \u002f); base64 of text containing the key (the whole base64 run); and a
-- masked echo showing 4 or more of its first and last characters. Other
-- values are passed to tostring first. With no key, scrub returns s as is.
function M.scrubber(key)
  if type(key) ~= "string" or key == "" then
    return function(s)
      return tostring(s)
    end
  end
  local needles, seen = {}, {}
  windows(key, MIN_RUN, needles, seen)
  local b64 = {}
  if #key >= MIN_RUN then
    for _, core in ipairs(base64_cores(key)) do
      windows(core, MIN_B64_RUN, b64, seen)
    end
  end
  return function(s)
    s = tostring(s)
    local spans = {}
    occurrences(s, needles, spans)
    local d, from, to = decode(s)
    if d then
      local found = {}
      occurrences(d, needles, found)
      occurrences(d, b64, found)
      for _, sp in ipairs(found) do
        spans[#spans + 1] = { from[sp[1]], to[sp[2]] }
      end
    end
    local n = #spans
    occurrences(s, b64, spans)
    for i = n + 1, #spans do -- base64: the whole run it stands in
      local sp = spans[i]
      while is_b64(sub(s, sp[1] - 1, sp[1] - 1)) do
        sp[1] = sp[1] - 1
      end
      while is_b64(sub(s, sp[2] + 1, sp[2] + 1)) do
        sp[2] = sp[2] + 1
      end
    end
    masked(s, key, spans)
    return replace(s, spans)
  end
end

return M
