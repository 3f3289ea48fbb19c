-- spec/serve/wrk_search.lua: a wrk script (wrk -s) that POSTs /search with
-- varied queries, hybrid, top 10: the load of spec/serve/run.sh's reload
-- check and of bench/soak_serve.sh.
-- luacheck: globals request, read globals wrk
local queries = { "spring tides", "cerebral white matter", "newborn brain", "moon sea",
  "diffusion tensor imaging", "gene expression", "cancer cells", "protein" }
local n = 0
request = function()
  n = n + 1
  local body = '{"query":"' .. queries[n % #queries + 1] .. '","k":10,"mode":"hybrid"}'
  return wrk.format("POST", "/search", { ["Content-Type"] = "application/json" }, body)
end
