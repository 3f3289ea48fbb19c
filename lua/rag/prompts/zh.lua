--- rag.prompts.zh: the Chinese prompts of the pipelines, as data, with the
-- same names and slots as rag.prompts.en. `grade`, `compress`, `classify`
-- and `check` ask for the same machine-read replies as in English (a number,
-- NONE, none/single/iterative, yes/no) so that one parser reads both.
-- @module rag.prompts.zh
return {
  lang = "zh",

  refusal = "我没有足够的信息来回答这个问题。",

  answer = {
    system = "你只根据用户给出的带编号的上下文段落回答问题。\n"
      .. "规则：\n"
      .. "1. 只使用上下文中的信息，绝不编造上下文没有说的内容。\n"
      .. "2. 每个陈述后用方括号标注支持它的段落编号，例如 [1] 或 [2][3]。\n"
      .. "3. 只引用上下文中出现的编号。\n"
      .. "4. 如果上下文没有足够的信息，请原样回复：{refusal}\n"
      .. "5. 用提问所用的语言回答。",
    user = "上下文：\n{context}\n\n问题：{question}",
  },

  answer_strict = {
    system = "你严格根据用户给出的带编号的上下文段落回答问题。\n"
      .. "规则：\n"
      .. "1. 回答中的每一句都必须在段落中明确写出或可直接推出；其他内容一律省略，"
      .. "即使你认为它是正确的。\n"
      .. "2. 每句结尾用方括号标注支持它的段落编号，例如 [1] 或 [2][3]。\n"
      .. "3. 只引用上下文中出现的编号。\n"
      .. "4. 如果这些段落不能回答问题，请原样回复：{refusal}\n"
      .. "5. 用提问所用的语言回答。",
    user = "上下文：\n{context}\n\n问题：{question}",
  },

  direct = {
    system = "简洁、准确地回答问题。如果你不知道答案，请原样回复：{refusal}",
    user = "问题：{question}",
  },

  rewrite = {
    system = "把用户的问题改写成一个清楚、独立的检索查询。保留所有名称、数字和专业术语，"
      .. "去掉问候语和无关的话。只回复查询本身，写成一行。",
    user = "问题：{question}",
  },

  multi_query = {
    system = "写出 {n} 个不同的检索查询，它们与用户的问题要找的信息相同，但措辞各不相同。"
      .. "每行一个查询，不要编号，也不要写其他内容。",
    user = "问题：{question}",
  },

  hyde = {
    system = "写一段三到五句的短文，它可能出现在回答用户问题的文档中。"
      .. "用这类文档的风格写成陈述事实的段落，而不是对用户的回复；它只用于检索相似的文档。",
    user = "问题：{question}",
  },

  stepback = {
    system = "从用户的问题后退一步：写出回答它所需要的那个更一般的概念或原理的问题。"
      .. "只回复这个问题，写成一行。",
    user = "问题：{question}",
  },

  decompose = {
    system = "把用户的问题拆成最多 {n} 个更简单的子问题，每个子问题都能通过一次检索回答，"
      .. "并按应当回答的顺序排列；后面的子问题可以用到前面子问题的答案。"
      .. "每行一个子问题，不要编号。如果问题已经很简单，就原样回复它。",
    user = "问题：{question}",
  },

  grade = {
    system = "你评估一篇文档与一个问题的相关程度：它是否包含有助于回答问题的信息。"
      .. "只回复一个 0 到 1 之间的数字（0：无关；0.5：相关但单独不足以回答；1：能回答），"
      .. "不要写其他内容。",
    user = "问题：{question}\n\n文档：\n{document}",
  },

  check = {
    system = "你检查一个回答是否有上下文依据：其中每个论断都必须在带编号的段落中明确写出"
      .. "或可直接推出。[1] 这样的引用标记不算论断。"
      .. "如果回答有依据，回复 \"yes\"；否则回复 \"no\"、一个冒号，以及第一个没有段落支持的论断。",
    user = "上下文：\n{context}\n\n回答：\n{answer}",
  },

  compress = {
    system = "逐字照抄文档中有助于回答问题的句子，保持原来的顺序。"
      .. "不要增加、修改或概括任何内容。如果没有任何句子有帮助，请原样回复：NONE",
    user = "问题：{question}\n\n文档：\n{document}",
  },

  classify = {
    system = "判断一个问题应当如何回答。只回复一个词：\n"
      .. "none：不需要文档（问候、闲聊、常识）；\n"
      .. "single：检索一次文档就够了（一个事实、一个定义、一个操作步骤）；\n"
      .. "iterative：需要多次相互依赖的检索（比较、包含多个部分或多个步骤的问题）。",
    user = "问题：{question}",
  },

  condense = {
    system = "根据一段对话和一个追问，把追问改写成不看对话也能理解的独立问题。"
      .. "先弄清对话在谈什么、追问指的是什么，再把代词和指代换成它们所指的事物，"
      .. "保留名称、数字和专业术语。只回复这个独立问题。",
    user = "对话：\n{history}\n\n追问：{question}",
  },

  -- rag.pipeline.agent 的提示词：`agent` 是 ReAct 文本协议，`agent_tools`
  -- 用于支持函数调用的模型，`agent_retry` 的用户部分说明上一条回复为何无法使用。
  -- Thought、Action、Action Input、Observation、Final Answer 这些标签由程序读取，
  -- 与英文相同。
  agent = {
    system = "你借助工具回答用户的问题。可用的工具有：\n{tools}\n\n"
      .. "请使用以下格式（标签保持英文）：\n"
      .. "Thought: 下一步要做什么\n"
      .. "Action: 要用的工具，取自 [{tool_names}]\n"
      .. "Action Input: 工具的参数，写成一个 JSON 对象\n"
      .. "Observation: 工具的结果（由系统填写，你自己绝不要写）\n"
      .. "……（Thought、Action、Action Input 和 Observation 可以重复多次）\n"
      .. "Thought: 我现在知道最终答案了\n"
      .. "Final Answer: 问题的答案\n\n"
      .. "规则：\n"
      .. "1. 只根据工具返回的内容回答，绝不编造。\n"
      .. "2. 工具给出的段落带有编号，例如 [1]。Final Answer 中每个陈述后用方括号标注"
      .. "支持它的段落编号，例如 [1] 或 [2][3]。\n"
      .. "3. 只引用工具给出过的编号。\n"
      .. "4. 如果工具找不到足够的信息，Final Answer 请原样写：{refusal}\n"
      .. "5. 用提问所用的语言回答。",
    user = "Question: {question}\n{scratchpad}",
  },

  agent_tools = {
    system = "你借助给你的工具回答用户的问题：按需要多次调用工具查找信息，然后回复答案。\n"
      .. "规则：\n"
      .. "1. 只根据工具返回的内容回答，绝不编造。\n"
      .. "2. 工具给出的段落带有编号，例如 [1]。回答中每个陈述后用方括号标注支持它的段落"
      .. "编号，例如 [1] 或 [2][3]。\n"
      .. "3. 只引用工具给出过的编号。\n"
      .. "4. 如果工具找不到足够的信息，请原样回复：{refusal}\n"
      .. "5. 用提问所用的语言回答。",
    user = "{question}",
  },

  agent_retry = {
    system = "你借助工具回答一个问题。",
    user = "你上一条回复无法使用：{error}。请调用某个工具（{tool_names}），参数须符合它的"
      .. "参数说明；或者给出最终答案。",
  },

  -- rag.graph：从段落中抽取实体和关系，回复 JSON。
  graph_extract = {
    system = "你从一段文字中抽取知识图谱。列出其中的命名实体（人物、机构、地点、产品、疾病、"
      .. "基因、化学物质、方法、事件）以及文中明确陈述的实体间关系。实体名称按原文写法；"
      .. "原文对同一实体的其他称呼列为别名。关系用简短的动词短语。只回复 JSON："
      .. "{\"entities\": [{\"name\": \"...\", \"type\": \"...\", \"aliases\": [\"...\"]}], "
      .. "\"relations\": [{\"source\": \"...\", \"relation\": \"...\", \"target\": \"...\"}]}",
    user = "段落：\n{text}",
  },

  graph_community = {
    system = "你为浏览文档集的人概括一组相关实体：用两三句话说明这组实体关于什么、"
      .. "主要实体之间如何关联，只使用给出的关系。",
    user = "实体：{entities}\n\n关系：\n{relations}",
  },

  -- rag.index 的富化：每个片段讲什么，供检索使用。
  enrich_keywords = {
    system = "你为一段文字挑选检索关键词：读者为找到它会输入的 {n} 个词或短语，"
      .. "包括名称、术语以及原文没有用到的同义词。只回复 JSON：[\"...\", \"...\"]",
    user = "段落：\n{text}",
  },

  enrich_summary = {
    system = "你用一两句话概括一段文字陈述了什么，供人判断是否需要阅读。只使用段落中的内容。"
      .. "只回复摘要。",
    user = "段落：\n{text}",
  },

  enrich_questions = {
    system = "你写出这段文字能够回答的 {n} 个问题：每个问题独立成立，具体到需要这段文字才能回答。"
      .. "只回复 JSON：[\"...？\", \"...？\"]",
    user = "段落：\n{text}",
  },

  enrich_doc_summary = {
    system = "你用两三句话概括一篇文档：它讲什么，以及它与相似文档的不同之处（涉及的名称、地点、"
      .. "日期和数字）。这份摘要用来判断哪篇文档能回答问题。只回复摘要。",
    user = "文档（或其各部分的摘要）：\n{text}",
  },

  enrich_title = {
    system = "你为一篇文档起一个简短的标题（不超过二十个字），点明其主题。只回复标题。",
    user = "文档：\n{text}",
  },

  -- rag.eval.ragas 的评判提示词；每个都要求回复一个 JSON 对象。
  eval_statements = {
    system = "把文本拆成简短、独立的陈述：每条只含一个事实，代词换成它所指的事物，"
      .. "使每条都能单独核对。略去问候和客套话；什么也没陈述的文本给出空列表。"
      .. "只回复 JSON：{\"statements\": [\"...\", \"...\"]}",
    user = "问题：{question}\n\n文本：\n{text}",
  },

  eval_support = {
    system = "你判断每条带编号的陈述能否从上下文直接推出。verdict 为 1：上下文写明了它"
      .. "或可直接推出；verdict 为 0：不能，即使它本身是对的。"
      .. "只回复 JSON，按陈述的顺序每条一项："
      .. "{\"verdicts\": [{\"statement\": \"...\", \"reason\": \"...\", \"verdict\": 1}]}",
    user = "上下文：\n{context}\n\n陈述：\n{statements}",
  },

  eval_questions = {
    system = "写出 {n} 个这个回答所回答的问题，措辞各不相同。"
      .. "再判断这个回答是否含糊其辞：回避、空泛或拒答（如“我不知道”）为 1，否则为 0。"
      .. "只回复 JSON：{\"questions\": [\"...\"], \"noncommittal\": 0}",
    user = "回答：\n{answer}",
  },

  eval_context = {
    system = "你判断每段带编号的上下文对得出问题的参考答案是否有用。"
      .. "verdict 为 1：有用；为 0：没用。只回复 JSON，按段落的顺序每段一项："
      .. "{\"verdicts\": [{\"reason\": \"...\", \"verdict\": 1}]}",
    user = "问题：{question}\n\n参考答案：\n{reference}\n\n上下文段落：\n{context}",
  },

  eval_correctness = {
    system = "把回答的陈述与正确答案的陈述对照。TP：有正确答案支持的回答陈述；"
      .. "FP：正确答案不支持的回答陈述；FN：回答没有给出的正确答案陈述。"
      .. "每条回答陈述都放进 TP 或 FP，每条没被匹配的正确答案陈述放进 FN。"
      .. "只回复 JSON：{\"TP\": [{\"statement\": \"...\", \"reason\": \"...\"}], "
      .. "\"FP\": [], \"FN\": []}",
    user = "问题：{question}\n\n回答的陈述：\n{answer}\n\n正确答案的陈述：\n{truth}",
  },
}
