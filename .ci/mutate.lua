-- Mutation testing: applies each small deliberate bug of a catalogue to a
-- copy of this tree, builds it, and runs the specs; a mutant is caught when
-- a spec fails (or the run passes its time limit), and survives when every
-- spec passes. First the mutant's own specs (quick), then, if they pass,
-- the whole suite. Prints one line a mutant and the share caught; exits 1
-- when a mutant named in `must` survives or fewer than `min` percent are
-- caught.
--
-- Usage: lua5.4 .ci/mutate.lua CATALOGUE [--min 95] [--only id,id] [--keep DIR]
--
-- The catalogue is blocks of `key: value` lines separated by blank lines:
--   id:      a unique name
--   file:    the source file (src/...)
--   find:    text on one line that occurs exactly once in the file
--   replace: what it becomes
--   specs:   the spec files to run first
--   why:     the bug, in plain words
--   must:    yes, for a mutant the specs must catch (optional)
local args = { ... }
local catalogue = args[1]
if not catalogue then
  io.stderr:write("usage: lua5.4 .ci/mutate.lua CATALOGUE [--min 95] [--only id,id]\n")
  os.exit(2)
end
local min, only, work = 95, nil, "build/mutate"
for i = 2, #args, 2 do
  if args[i] == "--min" then
    min = tonumber(args[i + 1])
  elseif args[i] == "--only" then
    only = {}
    for id in args[i + 1]:gmatch("[^,]+") do
      only[id] = true
    end
  elseif args[i] == "--keep" then
    work = args[i + 1]
  else
    io.stderr:write("mutate: unknown option " .. args[i] .. "\n")
    os.exit(2)
  end
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

local function sh(cmd)
  local ok, _, code = os.execute(cmd)
  return ok == true or ok == 0, code
end

local function count(s, sub)
  local n, at = 0, 1
  while true do
    local a, b = s:find(sub, at, true)
    if not a then
      return n
    end
    n, at = n + 1, b + 1
  end
end

-- the catalogue
local mutants, seen = {}, {}
for block in (read(catalogue) .. "\n\n"):gmatch("(.-)\n%s*\n") do
  local m = {}
  for line in block:gmatch("[^\n]+") do
    local k, v = line:match("^(%w+): (.*)$")
    if k then
      m[k] = v
    elseif not line:match("^%s*#") then
      error("mutate: bad line in " .. catalogue .. ": " .. line)
    end
  end
  if next(m) then
    for _, k in ipairs({ "id", "file", "find", "replace", "specs", "why" }) do
      assert(m[k], "mutate: a mutant without '" .. k .. "': " .. (m.id or block))
    end
    assert(not seen[m.id], "mutate: two mutants named " .. m.id)
    seen[m.id] = true
    if not only or only[m.id] then
      mutants[#mutants + 1] = m
    end
  end
end

-- a copy of the tree to mutate, without builds or history
local tree = work .. "/tree"
assert(sh("rm -rf '" .. tree .. "' && mkdir -p '" .. tree .. "' && "
  .. "tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C '" .. tree .. "'"))
local busted = "lua5.4 /usr/bin/busted --ignore-lua --lpath='lua/?.lua;lua/?/init.lua;./?.lua' "
  .. "--cpath='build/?.so' -o TAP"
local LIMIT = 600 -- seconds a spec run may take before it counts as caught

local function build()
  return sh("cd '" .. tree .. "' && make -s all >../build.log 2>&1")
end

-- true when the specs pass (the mutant survives them)
local function passes(specs)
  local ok, code = sh("cd '" .. tree .. "' && timeout " .. LIMIT .. " " .. busted .. " " .. specs
    .. " >../specs.log 2>&1")
  return ok, code == 124
end

io.write("mutate: building the unmutated copy\n")
assert(build(), "mutate: the unmutated tree does not build (" .. work .. "/build.log)")
local checked = {}
for _, m in ipairs(mutants) do
  local path = tree .. "/" .. m.file
  local src = read(path)
  local n = count(src, m.find)
  assert(n == 1, ("mutate: %s: the text to find occurs %d times in %s"):format(m.id, n, m.file))
  if not checked[m.specs] then -- the mutant's specs pass unmutated, or nothing proves anything
    assert(passes(m.specs), "mutate: " .. m.specs .. " fails without a mutant")
    checked[m.specs] = true
  end
end

local caught, survivors, must_survived = 0, {}, {}
local t_all = os.time()
for i, m in ipairs(mutants) do
  local path = tree .. "/" .. m.file
  local src = read(path)
  local a, b = src:find(m.find, 1, true)
  write(path, src:sub(1, a - 1) .. m.replace .. src:sub(b + 1))
  local t0 = os.time()
  local how
  if not build() then
    how = "does not build"
    error(("mutate: %s does not build (%s/build.log)"):format(m.id, work))
  end
  local ok, timeout = passes(m.specs)
  if not ok then
    how = timeout and "timeout in its specs" or "caught by its specs"
  else
    ok, timeout = passes("spec")
    if not ok then
      how = timeout and "timeout in the suite" or "caught by the suite"
    end
  end
  write(path, src)
  if how then
    caught = caught + 1
  else
    how = "SURVIVED"
    survivors[#survivors + 1] = m
    if m.must == "yes" then
      must_survived[#must_survived + 1] = m.id
    end
  end
  io.write(("%3d/%d %-34s %-22s %4ds  %s\n"):format(i, #mutants, m.id, how, os.time() - t0, m.why))
  io.flush()
end
assert(build())

local share = #mutants > 0 and 100 * caught / #mutants or 0
io.write(("\nmutate: %d mutants in %d files, %d caught (%.1f%%), %d survived, %d s\n"):format(
  #mutants, (function()
    local files, n = {}, 0
    for _, m in ipairs(mutants) do
      if not files[m.file] then
        files[m.file], n = true, n + 1
      end
    end
    return n
  end)(), caught, share, #survivors, os.time() - t_all))
for _, m in ipairs(survivors) do
  io.write(("  survived: %s (%s: %s -> %s)\n"):format(m.id, m.file, m.find, m.replace))
end
if #must_survived > 0 then
  io.write("mutate: mutants the specs must catch survived: " .. table.concat(must_survived, ", ")
    .. "\n")
  os.exit(1)
end
if not only and share < min then
  io.write(("mutate: %.1f%% caught, below %d%%\n"):format(share, min))
  os.exit(1)
end
