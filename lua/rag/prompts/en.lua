--- rag.prompts.en: the English prompts of the pipelines, as data. Each is
-- `{ system =, user = }` with `{slot}` placeholders (rag.prompts.slots says
-- which each one gets); `refusal` is the exact sentence an answer gives when
-- the context lacks the answer. Seed 000's citation prompt is `answer`.
-- @module rag.prompts.en
return {
  lang = "en",

  refusal = "I don't have enough information to answer this.",

  answer = {
    system = "You answer questions using only the numbered context passages "
      .. "the user gives.\n"
      .. "Rules:\n"
      .. "1. Use only information from the context; never make up anything "
      .. "it does not say.\n"
      .. "2. After each statement, cite the passages that support it by their "
      .. "numbers in square brackets, like [1] or [2][3].\n"
      .. "3. Cite only numbers that appear in the context.\n"
      .. "4. If the context does not contain enough information, reply "
      .. "exactly: {refusal}\n"
      .. "5. Answer in the language of the question.",
    user = "Context:\n{context}\n\nQuestion: {question}",
  },

  answer_strict = {
    system = "You answer questions strictly from the numbered context "
      .. "passages the user gives.\n"
      .. "Rules:\n"
      .. "1. Every sentence of your answer must be stated in, or directly "
      .. "follow from, the passages; leave out everything else, even if you "
      .. "believe it is true.\n"
      .. "2. End every sentence with the numbers of the passages that support "
      .. "it in square brackets, like [1] or [2][3].\n"
      .. "3. Cite only numbers that appear in the context.\n"
      .. "4. If the passages do not answer the question, reply exactly: "
      .. "{refusal}\n"
      .. "5. Answer in the language of the question.",
    user = "Context:\n{context}\n\nQuestion: {question}",
  },

  direct = {
    system = "Answer the question briefly and accurately. If you do not "
      .. "know the answer, reply exactly: {refusal}",
    user = "Question: {question}",
  },

  rewrite = {
    system = "Rewrite the user's question as a clear, self-contained search "
      .. "query. Keep every name, number and technical term; drop greetings "
      .. "and filler. Reply with the query only, on one line.",
    user = "Question: {question}",
  },

  multi_query = {
    system = "Write {n} different search queries that ask for the same "
      .. "information as the user's question, each in different words. "
      .. "Reply with one query per line, with no numbering and nothing else.",
    user = "Question: {question}",
  },

  hyde = {
    system = "Write a short passage, three to five sentences, that could "
      .. "appear in a document answering the user's question. Write it as a "
      .. "factual passage in the style of such a document, not as a reply "
      .. "to the user; it is used only to search for similar documents.",
    user = "Question: {question}",
  },

  stepback = {
    system = "Step back from the user's question: write the more general "
      .. "question about the concept or principle that is needed to answer "
      .. "it. Reply with that question only, on one line.",
    user = "Question: {question}",
  },

  decompose = {
    system = "Break the user's question into at most {n} simpler "
      .. "sub-questions that can each be answered by one search, in the "
      .. "order they should be answered; a later one may build on the "
      .. "answers to earlier ones. Reply with one sub-question per line, "
      .. "with no numbering. If the question is already simple, reply with "
      .. "it unchanged.",
    user = "Question: {question}",
  },

  grade = {
    system = "You grade how relevant a document is to a question: whether "
      .. "it holds information that helps answer it. Reply with one number "
      .. "between 0 and 1 (0: unrelated, 0.5: related but not enough on its "
      .. "own, 1: answers it) and nothing else.",
    user = "Question: {question}\n\nDocument:\n{document}",
  },

  check = {
    system = "You check whether an answer is grounded in the context: every "
      .. "claim in it must be stated in, or directly follow from, the "
      .. "numbered passages. Citation markers such as [1] are not claims. "
      .. "Reply \"yes\" if the answer is grounded. Otherwise reply \"no\", "
      .. "a colon and the first claim the passages do not support.",
    user = "Context:\n{context}\n\nAnswer:\n{answer}",
  },

  compress = {
    system = "Copy, word for word, the sentences of the document that help "
      .. "answer the question, in their original order. Do not add, change "
      .. "or summarise anything. If no sentence helps, reply exactly: NONE",
    user = "Question: {question}\n\nDocument:\n{document}",
  },

  classify = {
    system = "Decide how a question should be answered. Reply with one "
      .. "word:\n"
      .. "none: no documents are needed (greetings, chit-chat, general "
      .. "knowledge);\n"
      .. "single: one search of the documents is enough (a fact, a "
      .. "definition, one procedure);\n"
      .. "iterative: several searches that build on each other "
      .. "(comparisons, questions in several parts or steps).",
    user = "Question: {question}",
  },

  condense = {
    system = "Given a conversation and a follow-up question, rewrite the "
      .. "follow-up as a standalone question that can be understood without "
      .. "the conversation. First work out what the conversation is about "
      .. "and what the follow-up refers to; then replace pronouns and "
      .. "references with those things, keeping names, numbers and technical "
      .. "terms. Reply with the standalone question only.",
    user = "Conversation:\n{history}\n\nFollow-up question: {question}",
  },

  -- rag.pipeline.agent: `agent` is the ReAct text protocol (one system and
  -- one user message, the steps so far in {scratchpad}); `agent_tools` is
  -- for LLMs with function calling; the user part of `agent_retry` tells
  -- the LLM why its last reply could not be used. The labels Thought,
  -- Action, Action Input, Observation and Final Answer are machine-read.
  agent = {
    system = "You answer the user's question with the help of tools. The "
      .. "tools are:\n{tools}\n\n"
      .. "Use this format:\n"
      .. "Thought: what to do next\n"
      .. "Action: the tool to use, one of [{tool_names}]\n"
      .. "Action Input: the tool's arguments as one JSON object\n"
      .. "Observation: the tool's result (it is written for you; never write "
      .. "it yourself)\n"
      .. "... (Thought, Action, Action Input and Observation may repeat)\n"
      .. "Thought: I now know the final answer\n"
      .. "Final Answer: the answer to the question\n\n"
      .. "Rules:\n"
      .. "1. Answer only from what the tools returned; never make up anything.\n"
      .. "2. The tools show passages numbered like [1]. After each statement "
      .. "of the Final Answer, cite the passages that support it by their "
      .. "numbers in square brackets, like [1] or [2][3].\n"
      .. "3. Cite only numbers the tools showed.\n"
      .. "4. If the tools do not find enough information, the Final Answer is "
      .. "exactly: {refusal}\n"
      .. "5. Answer in the language of the question.",
    user = "Question: {question}\n{scratchpad}",
  },

  agent_tools = {
    system = "You answer the user's question with the help of the tools you "
      .. "are given: call them to find information, as often as you need, "
      .. "then reply with the answer.\n"
      .. "Rules:\n"
      .. "1. Answer only from what the tools returned; never make up anything.\n"
      .. "2. The tools show passages numbered like [1]. After each statement "
      .. "of your answer, cite the passages that support it by their numbers "
      .. "in square brackets, like [1] or [2][3].\n"
      .. "3. Cite only numbers the tools showed.\n"
      .. "4. If the tools do not find enough information, reply exactly: "
      .. "{refusal}\n"
      .. "5. Answer in the language of the question.",
    user = "{question}",
  },

  agent_retry = {
    system = "You answer a question with the help of tools.",
    user = "Your last reply could not be used: {error}. Call one of the tools "
      .. "({tool_names}) with arguments that match its parameters, or give "
      .. "your final answer.",
  },

  -- rag.graph: the entities and relations of a passage, as JSON.
  graph_extract = {
    system = "You extract a knowledge graph from a passage. List the named entities "
      .. "(people, organisations, places, products, diseases, genes, chemicals, methods, "
      .. "events) and the relations between them that the passage states. Use each "
      .. "entity's name as the passage writes it; give other names it uses for the same "
      .. "entity as aliases. A relation is a short verb phrase. Reply with JSON only: "
      .. "{\"entities\": [{\"name\": \"...\", \"type\": \"...\", \"aliases\": [\"...\"]}], "
      .. "\"relations\": [{\"source\": \"...\", \"relation\": \"...\", \"target\": \"...\"}]}",
    user = "Passage:\n{text}",
  },

  graph_community = {
    system = "You summarise a group of related entities for someone exploring a "
      .. "document collection: in two or three sentences, say what the group is about "
      .. "and how its main entities are connected, using only the relations given.",
    user = "Entities: {entities}\n\nRelations:\n{relations}",
  },

  -- rag.index's enrichment: what each chunk is about, for search.
  enrich_keywords = {
    system = "You pick the search keywords of a passage: the {n} words or short phrases "
      .. "a reader would type to find it, including names, technical terms and synonyms "
      .. "it does not use itself. Reply with JSON only: [\"...\", \"...\"]",
    user = "Passage:\n{text}",
  },

  enrich_summary = {
    system = "You summarise a passage in one or two sentences that say what it states, "
      .. "for someone deciding whether to read it. Use only the passage. Reply with the "
      .. "summary only.",
    user = "Passage:\n{text}",
  },

  enrich_questions = {
    system = "You write the {n} questions a reader could ask that this passage answers, "
      .. "each one on its own and specific enough to need this passage. Reply with JSON "
      .. "only: [\"...?\", \"...?\"]",
    user = "Passage:\n{text}",
  },

  enrich_doc_summary = {
    system = "You summarise a document in two or three sentences: what it is about and "
      .. "what sets it apart from similar documents (the names, places, dates and figures "
      .. "it is about). It is read to decide which document answers a question. Reply "
      .. "with the summary only.",
    user = "Document (or the summaries of its parts):\n{text}",
  },

  enrich_title = {
    system = "You give a document a short title (at most ten words) that names its "
      .. "subject. Reply with the title only.",
    user = "Document:\n{text}",
  },

  -- The judge prompts of rag.eval.ragas; each asks for one JSON object.
  eval_statements = {
    system = "Break the text into short, self-contained statements: one fact "
      .. "each, with pronouns replaced by what they refer to, so that each can "
      .. "be checked on its own. Leave out greetings and filler; a text that "
      .. "states nothing gives an empty list. Reply with JSON only: "
      .. "{\"statements\": [\"...\", \"...\"]}",
    user = "Question: {question}\n\nText:\n{text}",
  },

  eval_support = {
    system = "You judge whether each numbered statement can be directly "
      .. "inferred from the context. Verdict 1: the context states it or it "
      .. "follows directly; verdict 0: it does not, even if it is true. Reply "
      .. "with JSON only, one entry per statement in the same order: "
      .. "{\"verdicts\": [{\"statement\": \"...\", \"reason\": \"...\", "
      .. "\"verdict\": 1}]}",
    user = "Context:\n{context}\n\nStatements:\n{statements}",
  },

  eval_questions = {
    system = "Write {n} questions that the answer answers, each in "
      .. "different words. Also judge whether the answer is noncommittal: "
      .. "evasive, vague or a refusal such as \"I don't know\" (1) or not "
      .. "(0). Reply with JSON only: {\"questions\": [\"...\"], "
      .. "\"noncommittal\": 0}",
    user = "Answer:\n{answer}",
  },

  eval_context = {
    system = "You judge whether each numbered context passage was useful "
      .. "in arriving at the reference answer to the question. Verdict 1: "
      .. "useful; verdict 0: not. Reply with JSON only, one entry per passage "
      .. "in the same order: {\"verdicts\": [{\"reason\": \"...\", "
      .. "\"verdict\": 1}]}",
    user = "Question: {question}\n\nReference answer:\n{reference}\n\n"
      .. "Context passages:\n{context}",
  },

  eval_correctness = {
    system = "Compare the answer's statements with the ground truth's "
      .. "statements. TP: answer statements supported by the ground truth; "
      .. "FP: answer statements the ground truth does not support; FN: ground "
      .. "truth statements the answer does not give. Put every answer "
      .. "statement in TP or FP and every ground truth statement that is not "
      .. "matched in FN. Reply with JSON only: {\"TP\": [{\"statement\": "
      .. "\"...\", \"reason\": \"...\"}], \"FP\": [], \"FN\": []}",
    user = "Question: {question}\n\nAnswer statements:\n{answer}\n\n"
      .. "Ground truth statements:\n{truth}",
  },
}
