-- bench/soak_provider.lua: rag.providers.openai against a loopback server
-- that injects faults (spec/fixtures/llmd.py): 5,000 chat requests, plain
-- and streamed in turn, cycling through a normal reply, a 429 and a 500
-- that a retry gets past, lasting 429, 500 and 503 errors, 401, 400, bad
-- JSON, a reply without its fields, a reply cut mid-body or mid-stream, and
-- (two requests in 100) a reply slower than the 0.2 s timeout or a stream
-- that stalls past it. Every request must succeed where the fault lets it
-- and otherwise fail with the code that fault calls for; the RSS (after a
-- full collection) at the end must be within 2% of the RSS at the 10%
-- mark. Exit 1 otherwise.
--
-- Usage: lua5.4 bench/soak_provider.lua [REQUESTS]   (make soak)
local rag = require("rag")
local helpers = require("spec.helpers")
local util = require("bench.util")

local N = tonumber(arg[1]) or 5000
local LIMIT = 0.02

-- model prefix (picks llmd.py's behaviour) -> the code expected (true: success)
local FAULTS = {
  { "ok", true },
  { "e429x1r0.01", true },
  { "e500x1", true },
  { "e429", "ratelimit" },
  { "e500", "http" },
  { "e503", "http" },
  { "e401", "auth" },
  { "e400", "provider" },
  { "badjson", "decode" },
  { "badshape", "decode" },
  { "cut", "http" },
}
local SLOW = { plain = { "slow1", "timeout" }, stream = { "stall1", "timeout" } }
local MESSAGE = "one two three four five six seven"


local base, stop = helpers.start_httpd("llmd.py")
local p = rag.providers.openai({ base_url = base .. "/v1", api_key = "sk-soak", model = "m",
  timeout = 0.2, max_retries = 1, sleep = function() end })
local tally, wrong, first = {}, 0, nil
local t0 = os.clock()
local marks = {}
for i = 1, N do
  local streamed = i % 2 == 0
  local f = FAULTS[(i - 1) // 2 % #FAULTS + 1]
  if i % 100 == 0 or i % 100 == 51 then -- one streamed, one plain
    f = SLOW[streamed and "stream" or "plain"]
  end
  local model = f[1] .. ":" .. i
  local got, msg, code
  if streamed then
    local n = 0
    got, msg, code = p:chat(MESSAGE, { model = model, stream = function() n = n + 1 end })
  else
    got, msg, code = p:chat(MESSAGE, { model = model })
  end
  local outcome = got and true or code
  local key = f[1] .. (streamed and " (stream)" or "")
  local t = tally[key] or { n = 0, want = f[2], seen = {} }
  tally[key] = t
  t.n = t.n + 1
  t.seen[tostring(outcome)] = (t.seen[tostring(outcome)] or 0) + 1
  if outcome ~= f[2] then
    wrong = wrong + 1
    first = first or (model .. ": " .. tostring(outcome) .. " " .. tostring(msg))
  end
  if i % (N // 10) == 0 then
    collectgarbage()
    collectgarbage()
    marks[#marks + 1] = util.rss_kb()
    print(("  %3d%%  rss %6.1f MB  %6.1f s cpu"):format(#marks * 10, marks[#marks] / 1024,
      os.clock() - t0))
    io.stdout:flush()
  end
end
stop()

local names = {}
for k in pairs(tally) do
  names[#names + 1] = k
end
table.sort(names)
print(("%-26s %6s  %-10s  %s"):format("fault", "count", "expected", "outcomes"))
for _, k in ipairs(names) do
  local t, seen = tally[k], {}
  for o, n in pairs(t.seen) do
    seen[#seen + 1] = o .. " " .. n
  end
  table.sort(seen)
  print(("%-26s %6d  %-10s  %s"):format(k, t.n, t.want == true and "success" or t.want,
    table.concat(seen, ", ")))
end
local growth = (marks[#marks] - marks[1]) / marks[1]
print(("provider soak: %d requests, %d with an outcome their fault does not explain; "
  .. "RSS %+.2f%% between the 10%% and 100%% marks (limit %.0f%%)"):format(N, wrong,
  100 * growth, 100 * LIMIT))
if wrong > 0 or growth > LIMIT then
  print("provider soak: FAILED" .. (first and (": first unexplained: " .. first) or ""))
  os.exit(1)
end
print("provider soak: ok")
