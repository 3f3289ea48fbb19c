-- The behaviour every rag.index store shares (spec/support/index_behaviour.lua),
-- on the local index. spec/pg/store_spec.lua runs the same suite on PostgreSQL.
local rag = require("rag")
local behaviour = require("spec.support.index_behaviour")
behaviour.run("rag.index (local)", rag.index.new, { describe = describe, it = it,
  setup = setup, teardown = teardown, assert = assert,
  check = function(idx) assert.is_true(idx.c:check()) end })
