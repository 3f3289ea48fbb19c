--- rag.providers._decode (internal, not API): reading what servers send
-- back: a JSON reply, the error text of a failed reply, server-sent events
-- and newline-delimited JSON arriving in pieces.
-- @module rag.providers._decode
local json = require("rag.core").json

local type, tostring = type, tostring

local M = {}

--- `v` when it is a string, else nil (for optional fields of a reply).
function M.str(v)
  return type(v) == "string" and v or nil
end

--- The decoded JSON of a reply body, or nil and why (without the
-- "rag.json.decode: " prefix).
function M.json(body)
  local v, err = json.decode(body)
  if v == nil then
    return nil, (tostring(err):gsub("^rag%.json%.decode: ", ""))
  end
  return v
end

--- The error text of a reply body in the shapes servers use: OpenAI's
-- {error={message=}}, Ollama's and TEI's {error=}, Cohere's {message=},
-- FastAPI's {detail=}; else the body. Control characters become spaces and
-- the ends are trimmed; the text is not shortened.
function M.server_message(body)
  local v = json.decode(body)
  local text
  if type(v) == "table" then
    local e = v.error
    if type(e) == "table" then
      e = e.message
    end
    text = e or v.message or v.detail
    if type(text) == "table" then
      text = json.encode(text)
    end
  end
  if type(text) ~= "string" then
    text = body
  end
  return (text:gsub("[%c]+", " "):gsub("^%s+", ""):gsub("%s+$", ""))
end

-- Appends `piece` to `buf`, passes each complete line (without its LF or
-- CRLF) to on_line, and returns what is left after the last LF.
local function split_lines(buf, piece, on_line)
  buf = buf .. piece
  local i = 1
  while true do
    local j = buf:find("\n", i, true)
    if not j then
      break
    end
    local l = buf:sub(i, j - 1)
    if l:sub(-1) == "\r" then
      l = l:sub(1, -2)
    end
    on_line(l)
    i = j + 1
  end
  return buf:sub(i)
end

--- A server-sent-events reader: `feed(piece)` takes body pieces in order,
-- and `on_data(data)` gets each event's data (its "data:" lines joined with
-- "\n"). Comments and other fields are skipped; LF or CRLF line ends.
-- @treturn function feed
-- @treturn function finish, which flushes a last event lacking its blank line
function M.sse(on_data)
  local buf, data = "", nil
  local function line(l)
    if l == "" then
      if data then
        local d = data
        data = nil
        on_data(d)
      end
    elseif l:sub(1, 5) == "data:" then
      local v = l:sub(6):gsub("^ ", "")
      data = data and (data .. "\n" .. v) or v
    end
  end
  local function feed(piece)
    buf = split_lines(buf, piece, line)
  end
  local function finish()
    if buf ~= "" then
      line((buf:gsub("\r$", "")))
      buf = ""
    end
    line("")
  end
  return feed, finish
end

--- Reads newline-delimited JSON: `feed(piece)`; `on_line(text)` per line.
function M.lines(on_line)
  local buf = ""
  local function nonblank(l)
    if l:find("%S") then
      on_line(l)
    end
  end
  local function feed(piece)
    buf = split_lines(buf, piece, nonblank)
  end
  local function finish()
    if buf:find("%S") then
      on_line(buf)
    end
    buf = ""
  end
  return feed, finish
end

return M
