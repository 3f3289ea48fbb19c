--- rag.load.glob: shell-style globs over relative paths, for rag.load.dir:
-- `*` (any run without "/"), `**` (any run, "/" included; "**/" also
-- matches nothing), `?` (one character but "/"), `[abc]`, `[a-z]`, `[!a]`.
-- A glob without "/" also matches a path's last part ("*.md" matches
-- "docs/x.md").
-- @module rag.load.glob
local byte, find = string.byte, string.find

local M = {}

local SLASH, STAR, QUESTION, LBRACKET = 47, 42, 63, 91

-- Matches the class at g[gi] ("[...]") against byte c: matched, next gi.
local function class(g, gi, c)
  local i, neg, ok = gi + 1, false, false
  local b = byte(g, i)
  if b == 33 or b == 94 then -- ! or ^
    neg, i = true, i + 1
  end
  local first = true
  while i <= #g do
    b = byte(g, i)
    if b == 93 and not first then -- ]
      return (ok ~= neg) and c ~= SLASH, i + 1
    end
    first = false
    if byte(g, i + 1) == 45 and i + 2 <= #g and byte(g, i + 2) ~= 93 then -- a-z
      if c >= b and c <= byte(g, i + 2) then
        ok = true
      end
      i = i + 3
    else
      if c == b then
        ok = true
      end
      i = i + 1
    end
  end
  return nil -- no closing bracket: "[" is a literal
end

local function match(g, gi, s, si)
  local gl, sl = #g, #s
  while gi <= gl do
    local c = byte(g, gi)
    if c == STAR and byte(g, gi + 1) == STAR then
      local rest = gi + 2
      if byte(g, rest) == SLASH then -- "**/": zero or more whole parts
        if match(g, rest + 1, s, si) then
          return true
        end
        for k = si, sl do
          if byte(s, k) == SLASH and match(g, rest + 1, s, k + 1) then
            return true
          end
        end
        return false
      end
      for k = si, sl + 1 do
        if match(g, rest, s, k) then
          return true
        end
      end
      return false
    elseif c == STAR then
      for k = si, sl + 1 do
        if match(g, gi + 1, s, k) then
          return true
        end
        if k > sl or byte(s, k) == SLASH then
          return false
        end
      end
      return false
    end
    if si > sl then
      return false
    end
    local b = byte(s, si)
    if c == QUESTION then
      if b == SLASH then
        return false
      end
      gi = gi + 1
    elseif c == LBRACKET then
      local ok, nexti = class(g, gi, b)
      if ok == nil then
        if b ~= c then
          return false
        end
        gi = gi + 1
      elseif not ok then
        return false
      else
        gi = nexti
      end
    else
      if b ~= c then
        return false
      end
      gi = gi + 1
    end
    si = si + 1
  end
  return si > sl
end

--- Whether glob `g` matches relative path `path`.
function M.match(g, path)
  if match(g, 1, path, 1) then
    return true
  end
  if not find(g, "/", 1, true) then
    local base = path:match("([^/]*)$")
    return base ~= path and match(g, 1, base, 1)
  end
  return false
end

--- Whether any glob of the list matches.
function M.any(globs, path)
  for i = 1, #globs do
    if M.match(globs[i], path) then
      return true
    end
  end
  return false
end

return M
