--- rag.transport: how providers reach HTTP servers. A transport is any
-- function `transport(req) -> res | nil, msg, code` with `req` and `res`
-- shaped like lua-resty-http's (see docs/api.md). `default` picks libcurl,
-- or nginx cosockets when running under OpenResty, at each call.
-- @module rag.transport
local core = require("rag.core")

local M = {}

local rawget, require = rawget, require

local function ngx_api()
  local ngx = rawget(_G, "ngx")
  if type(ngx) == "table" and type(ngx.socket) == "table" then
    return ngx
  end
  return nil
end

--- The libcurl transport (`rag.http.request`); it blocks the thread.
M.curl = core.http.request

--- The nginx cosocket transport; raises in phases without cosockets.
function M.ngx(req)
  return require("rag.transport.ngx")(req)
end

--- Cosockets under OpenResty, libcurl elsewhere.
function M.default(req)
  if ngx_api() then
    return M.ngx(req)
  end
  return M.curl(req)
end

--- Waits `seconds`: `ngx.sleep` under OpenResty (the worker keeps serving),
-- otherwise a blocking sleep.
function M.sleep(seconds)
  local ngx = ngx_api()
  if ngx then
    return ngx.sleep(seconds)
  end
  return core.http.sleep(seconds)
end

--- Seconds from a monotonic clock (`ngx.now()` under OpenResty).
function M.now()
  local ngx = ngx_api()
  if ngx then
    ngx.update_time()
    return ngx.now()
  end
  return core.http.now()
end

return M
