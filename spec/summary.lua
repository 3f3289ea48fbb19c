-- busted output handler: busted's usual terminal output, then the line CI
-- reads, "N passed, N failed" (errors count as failed), with skips if any.
return function(options)
  local busted = require("busted")
  local handler = require("busted.outputHandlers.utfTerminal")(options)
  busted.subscribe({ "suite", "end" }, function()
    local line = string.format("%d passed, %d failed", handler.successesCount,
      handler.failuresCount + handler.errorsCount)
    if handler.pendingsCount > 0 then
      line = line .. string.format(", %d skipped", handler.pendingsCount)
    end
    io.write("\n", line, "\n")
    io.flush()
    return nil, true
  end)
  return handler
end
