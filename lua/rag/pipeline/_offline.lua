--- rag.pipeline._offline: the offline defaults of the judging steps
-- (internal): keep a hit's sentences that share a term with the question
-- (`compress`), grade a hit by term overlap (`grade`), check that every
-- sentence of an answer cites a context (`check`), and classify a question
-- by its words (`classify`). No LLM call, no randomness. See
-- docs/pipelines.md.
local text = require("rag.text")

local type, ipairs, pairs, tonumber, tostring, select =
  type, ipairs, pairs, tonumber, tostring, select
local concat = table.concat

local M = {}

-- Words that ask rather than say: left out of a question's terms.
local QUESTION_WORDS = { "what", "which", "who", "whom", "whose", "when", "where", "why",
  "how", "does", "do", "did", "is", "are", "was", "were", "can", "could", "should", "would",
  "tell", "explain", "describe", "什么", "怎么", "如何", "为什么", "哪些", "哪个", "是否",
  "请问" }

local analyzer

-- The distinct terms of `s` (rag.text's English analyzer: stopwords out,
-- stems, CJK bigrams) as a set, and their number.
local function terms(s, skip)
  analyzer = analyzer or text.analyzer()
  local set, n = {}, 0
  for _, t in ipairs(analyzer:tokenize(s) or {}) do
    if not set[t] and not (skip and skip[t]) then
      set[t], n = true, n + 1
    end
  end
  return set, n
end

local skip_terms
local function question_skip()
  if not skip_terms then
    skip_terms = {}
    for _, w in ipairs(QUESTION_WORDS) do
      for t in pairs((terms(w))) do
        skip_terms[t] = true
      end
    end
  end
  return skip_terms
end

--- The terms of a question, question words left out (all of them when
-- nothing else is left).
-- @return set, count
function M.question_terms(q)
  local set, n = terms(q, question_skip())
  if n == 0 then
    return terms(q)
  end
  return set, n
end

--- How many of the question's terms `s` has.
local function shared(qset, s)
  local set = terms(s)
  local n = 0
  for t in pairs(qset) do
    if set[t] then
      n = n + 1
    end
  end
  return n
end

--- The share of the question's terms that the hit's text has, in [0, 1].
function M.grade(question, hit)
  local q, nq = M.question_terms(question)
  if nq == 0 then
    return 0
  end
  return shared(q, type(hit) == "table" and hit.text or tostring(hit)) / nq
end

--- A hit cut to its sentences that share a term with the question: a copy,
-- or nil when none does. When the kept sentences are one run, the copy
-- keeps a span (`start`, `stop` moved in); otherwise they are joined by a
-- space and the span is dropped. `kept` and `of` count the sentences.
function M.refine(question, hit)
  local q = M.question_terms(question)
  local body = hit.text or ""
  local sents = text.sentences(body) or {}
  local keep, first, last, runs, prev = {}, nil, nil, 0, nil
  for i, s in ipairs(sents) do
    if shared(q, s.text) > 0 then
      keep[#keep + 1] = s
      if prev ~= i - 1 then
        runs = runs + 1
      end
      prev = i
      first = first or s
      last = s
    end
  end
  if #keep == 0 then
    return nil, 0, #sents
  end
  local c = {}
  for k, v in pairs(hit) do
    c[k] = v
  end
  if runs == 1 then
    c.text = body:sub(first.start, last.stop)
    if type(hit.start) == "number" and type(hit.stop) == "number"
        and hit.stop - hit.start + 1 == #body then
      c.start, c.stop = hit.start + first.start - 1, hit.start + last.stop - 1
    else
      c.start, c.stop = nil, nil
    end
  else
    local parts = {}
    for i, s in ipairs(keep) do
      parts[i] = s.text
    end
    c.text, c.start, c.stop = concat(parts, " "), nil, nil
  end
  return c, #keep, #sents
end

-- A marker "[n]" at the start of `s` (after spaces): its end, or nil.
local function leading_marker(s)
  local _, stop = s:find("^%s*%[%d+%]")
  return stop
end

--- Every sentence of the answer cites a context: it has a "[n]" marker
-- with 1 <= n <= #contexts (markers just after a sentence's end belong to
-- it). Text with no letters or digits (a lone marker) is no sentence.
-- @return true | false, the first sentence that cites nothing
function M.check(answer, contexts)
  local count = #contexts
  local pieces = {}
  for _, s in ipairs(text.sentences(answer) or {}) do
    local rest = s.text
    local stop = leading_marker(rest)
    while stop and #pieces > 0 do
      pieces[#pieces] = pieces[#pieces] .. rest:sub(1, stop)
      rest = rest:sub(stop + 1)
      stop = leading_marker(rest)
    end
    if rest:find("[%w\128-\255]") then
      pieces[#pieces + 1] = rest
    end
  end
  if #pieces == 0 then
    return false, "the answer is empty"
  end
  for _, p in ipairs(pieces) do
    local ok = false
    for d in p:gmatch("%[(%d+)%]") do
      local n = tonumber(d)
      if n >= 1 and n <= count then
        ok = true
      end
    end
    if not ok then
      return false, "cites no context: " .. p:match("^%s*(.-)%s*$")
    end
  end
  return true
end

local GREETINGS = { "hello", "hi", "hey", "thanks", "thank you", "good morning",
  "good evening", "bye", "how are you", "你好", "您好", "谢谢", "再见", "早上好" }
local MULTI = { "compare", "comparison", "differ", "difference", "differences", "versus", "vs",
  "relationship", "both", "and then", "step by step", "比较", "区别", "差异", "不同", "关系",
  "以及", "然后", "分别" }

-- Arithmetic: digits joined by operators, and nothing else but question
-- words ("what is 12 * 7?").
local function is_arithmetic(q)
  local expr = q:gsub("%f[%a]what%f[%A]", ""):gsub("%f[%a]is%f[%A]", "")
    :gsub("%f[%a]equals?%f[%A]", ""):gsub("[=%?？%s]", "")
  return expr:find("^[%d%.%(%)]+[%+%-%*/%^x×÷][%d%.%(%)%+%-%*/%^x×÷]*$") ~= nil
end

--- The heuristic class of a question, and why:
-- "none" for a greeting, arithmetic, or a question with no terms left;
-- "iterative" for several question marks, a comparison or sequence word
-- (MULTI), or " and " between two parts that each have terms;
-- "single" otherwise.
-- @return class, why
function M.classify(question)
  local q = question:lower():match("^%s*(.-)%s*$")
  local bare = q:gsub("[%p%s]+", " "):match("^%s*(.-)%s*$")
  for _, g in ipairs(GREETINGS) do
    if bare == g then
      return "none", "a greeting"
    end
  end
  if is_arithmetic(q) then
    return "none", "arithmetic"
  end
  local _, n = M.question_terms(q)
  if n == 0 then
    return "none", "no terms to search for"
  end
  local _, marks = q:gsub("[%?？]", "")
  if marks > 1 then
    return "iterative", "several questions"
  end
  for _, w in ipairs(MULTI) do
    if (w:byte(1) < 0x80 and q:find("%f[%w]" .. w .. "%f[%W]")) or (w:byte(1) >= 0x80
        and q:find(w, 1, true)) then
      return "iterative", "a comparison or sequence: '" .. w .. "'"
    end
  end
  local a, b = q:match("^(.-)%s+and%s+(.+)$")
  if a and select(2, M.question_terms(a)) > 1 and select(2, M.question_terms(b)) > 1 then
    return "iterative", "two parts joined by 'and'"
  end
  return "single", "one thing to look up"
end

return M
