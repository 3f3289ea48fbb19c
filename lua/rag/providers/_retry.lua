--- rag.providers._retry (internal, not API): the retry policy of the
-- providers' request path: which statuses are tried again and how long to
-- wait before the next attempt (the server's Retry-After, else backoff).
-- @module rag.providers._retry
local type, tonumber = type, tonumber
local floor, random = math.floor, math.random

local M = {}

--- Statuses worth another attempt: 408, 409, 429 and every 5xx.
function M.retryable(status)
  return status == 408 or status == 409 or status == 429 or (status >= 500 and status <= 599)
end

--- Seconds to wait before retry number `n + 1` (n = 0, 1, ...): 0.5 s × 2^n,
-- capped at 8 s, less up to a quarter at random (`rnd()` in [0, 1)).
function M.backoff(n, rnd)
  local d = 0.5 * 2 ^ n
  if d > 8 then
    d = 8
  end
  return d * (1 - 0.25 * (rnd or random)())
end

local MONTHS = { Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6,
  Jul = 7, Aug = 8, Sep = 9, Oct = 10, Nov = 11, Dec = 12 }

-- Seconds since 1970 of a UTC civil date (days_from_civil, proleptic Gregorian).
local function epoch(y, m, d, hh, mm, ss)
  if m <= 2 then
    y = y - 1
  end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return ((era * 146097 + doe - 719468) * 24 + hh) * 3600 + mm * 60 + ss
end

--- The wait a response asks for, in seconds, or nil: `retry-after-ms`, or
-- `retry-after` as seconds or as an HTTP date (against `now`, seconds since
-- 1970, default `os.time()`).
function M.retry_after(headers, now)
  local ms = tonumber(headers["retry-after-ms"] or "")
  if ms then
    return ms / 1000
  end
  local v = headers["retry-after"]
  if type(v) ~= "string" then
    return nil
  end
  local s = tonumber(v)
  if s then
    return s
  end
  local d, mon, y, hh, mm, ss = v:match("^%a+, (%d%d?) (%a+) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT$")
  if not d or not MONTHS[mon] then
    return nil
  end
  return epoch(tonumber(y), MONTHS[mon], tonumber(d), tonumber(hh), tonumber(mm), tonumber(ss))
    - (now or os.time())
end

--- The wait before retry number `attempt` (1, 2, ...) after `res` (nil when
-- no response came): the server's ask when within 0..60 s, else backoff.
function M.delay(res, attempt, rnd)
  local d = res and M.retry_after(res.headers or {})
  if d and d >= 0 and d <= 60 then
    return d
  end
  return M.backoff(attempt - 1, rnd)
end

return M
