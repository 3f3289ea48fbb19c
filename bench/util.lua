--- bench/util.lua: what every benchmark shares. Benchmarks run from the
-- project root (`make bench-*`), where `require("bench.util")` finds this.
local M = {}

--- The median of a list of numbers (sorts it in place).
function M.median(t)
  table.sort(t)
  return t[math.floor((#t + 1) / 2)]
end

--- The first line a shell command prints ("" when it prints nothing).
function M.sh(cmd)
  local p = io.popen(cmd)
  local s = p and p:read("*l") or ""
  if p then
    p:close()
  end
  return s or ""
end

return M
