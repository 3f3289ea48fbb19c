rockspec_format = "3.0"
package = "rag"
version = "scm-1"
source = { url = "git+https://example.invalid/rag.git", branch = "main" }
description = {
  summary = "Retrieval-augmented generation for Lua, with a C core",
  detailed = [[
    Chunkers, a BM25 index, vector indexes, rank fusion, reranking and
    token-budget context packing in C, with HTTP providers and scriptable
    pipelines in Lua. Works on Lua 5.1-5.4 and LuaJIT (OpenResty).
  ]],
  license = "MIT",
  homepage = "https://example.invalid/rag",
}
dependencies = { "lua >= 5.1, < 5.5" }
-- Probe libcurl by library only: Debian keeps curl.h in a multiarch directory.
external_dependencies = {
  CURL = { library = "curl" },
  CJSON = { header = "cjson/cJSON.h", library = "cjson" },
  UTF8PROC = { header = "utf8proc.h", library = "utf8proc" },
  STEMMER = { header = "libstemmer.h", library = "stemmer" },
  OPENSSL = { header = "openssl/evp.h", library = "crypto" },
  -- libxml2's headers live in a libxml2/ folder under the include directory;
  -- the library itself is opened with dlopen on the first HTML page.
  LIBXML2 = { header = "libxml2/libxml/HTMLparser.h" },
}
build = {
  type = "builtin",
  modules = {
    ["rag"] = "lua/rag/init.lua",
    ["rag.errors"] = "lua/rag/errors.lua",
    ["rag.cli"] = "lua/rag/cli.lua",
    ["rag.serve"] = "lua/rag/serve.lua",
    ["rag.text"] = "lua/rag/text.lua",
    ["rag.tokenizer"] = "lua/rag/tokenizer.lua",
    ["rag.eval"] = "lua/rag/eval/init.lua",
    ["rag.eval.ragas"] = "lua/rag/eval/ragas.lua",
    ["rag.eval.diagnose"] = "lua/rag/eval/diagnose.lua",
    ["rag.eval.compare"] = "lua/rag/eval/compare.lua",
    ["rag.report"] = "lua/rag/report.lua",
    ["rag.report._svg"] = "lua/rag/report/_svg.lua",
    ["rag.serve._page"] = "lua/rag/serve/_page.lua",
    ["rag.opts"] = "lua/rag/opts.lua",
    ["rag.embed"] = "lua/rag/embed.lua",
    ["rag.index"] = "lua/rag/index.lua",
    ["rag.store.pg"] = "lua/rag/store/pg.lua",
    ["rag.store.postgres"] = "lua/rag/store/postgres.lua",
    ["rag.store._pgcodec"] = "lua/rag/store/_pgcodec.lua",
    ["rag.store._pgsock"] = "lua/rag/store/_pgsock.lua",
    ["rag.llm"] = "lua/rag/llm.lua",
    ["rag.prompts"] = "lua/rag/prompts/init.lua",
    ["rag.prompts.en"] = "lua/rag/prompts/en.lua",
    ["rag.prompts.zh"] = "lua/rag/prompts/zh.lua",
    ["rag.pipeline"] = "lua/rag/pipeline/init.lua",
    ["rag.pipeline.runtime"] = "lua/rag/pipeline/runtime.lua",
    ["rag.pipeline.base"] = "lua/rag/pipeline/base.lua",
    ["rag.pipeline.naive"] = "lua/rag/pipeline/naive.lua",
    ["rag.pipeline.hybrid"] = "lua/rag/pipeline/hybrid.lua",
    ["rag.pipeline.fusion"] = "lua/rag/pipeline/fusion.lua",
    ["rag.pipeline.hyde"] = "lua/rag/pipeline/hyde.lua",
    ["rag.pipeline.stepback"] = "lua/rag/pipeline/stepback.lua",
    ["rag.pipeline.window"] = "lua/rag/pipeline/window.lua",
    ["rag.pipeline.multihop"] = "lua/rag/pipeline/multihop.lua",
    ["rag.pipeline.adaptive"] = "lua/rag/pipeline/adaptive.lua",
    ["rag.pipeline.corrective"] = "lua/rag/pipeline/corrective.lua",
    ["rag.pipeline.router"] = "lua/rag/pipeline/router.lua",
    ["rag.pipeline._offline"] = "lua/rag/pipeline/_offline.lua",
    ["rag.transport"] = "lua/rag/transport/init.lua",
    ["rag.providers"] = "lua/rag/providers/init.lua",
    ["rag.providers._request"] = "lua/rag/providers/_request.lua",
    ["rag.providers._retry"] = "lua/rag/providers/_retry.lua",
    ["rag.providers._decode"] = "lua/rag/providers/_decode.lua",
    ["rag.providers._embed"] = "lua/rag/providers/_embed.lua",
    ["rag.providers.openai"] = "lua/rag/providers/openai.lua",
    ["rag.providers.ollama"] = "lua/rag/providers/ollama.lua",
    ["rag.providers.rerank"] = "lua/rag/providers/rerank.lua",
    ["rag.providers.websearch"] = "lua/rag/providers/websearch.lua",
    ["rag.transport.ngx"] = "lua/rag/transport/ngx.lua",
    ["rag.transport._redact"] = "lua/rag/transport/_redact.lua",
    ["rag.load"] = "lua/rag/load/init.lua",
    ["rag.load._util"] = "lua/rag/load/_util.lua",
    ["rag.load._records"] = "lua/rag/load/_records.lua",
    ["rag.load.glob"] = "lua/rag/load/glob.lua",
    ["rag.load.text"] = "lua/rag/load/text.lua",
    ["rag.load.markdown"] = "lua/rag/load/markdown.lua",
    ["rag.load.html"] = "lua/rag/load/html.lua",
    ["rag.load.pdf"] = "lua/rag/load/pdf.lua",
    ["rag.load.jsonl"] = "lua/rag/load/jsonl.lua",
    ["rag.load.csv"] = "lua/rag/load/csv.lua",
    ["rag.load.beir"] = "lua/rag/load/beir.lua",
    ["rag.load.code"] = "lua/rag/load/code.lua",
    ["rag.load.sqlite"] = "lua/rag/load/sqlite.lua",
    ["rag.core"] = {
      -- every src/*.c (spec/core/rag_spec.lua checks this list)
      sources = {
        "src/lrag.c", "src/lrag_analyzer.c", "src/lrag_aux.c", "src/lrag_bm25.c", "src/lrag_chunk.c",
        "src/lrag_http.c", "src/lrag_json.c", "src/lrag_sentences.c", "src/lrag_text.c",
        "src/lrag_tokenizer.c", "src/rag_alloc.c", "src/rag_analyzer.c", "src/rag_approx.c",
        "src/rag_bm25.c", "src/rag_bm25_file.c", "src/rag_chunk.c", "src/rag_kernel.c",
        "src/rag_file.c", "src/rag_ids.c", "src/rag_topk.c", "src/rag_vec.c", "src/lrag_vec.c",
        "src/rag_hnsw.c", "src/lrag_hnsw.c", "src/rag_fuse.c", "src/lrag_fuse.c",
        "src/rag_rerank.c", "src/lrag_rerank.c", "src/rag_eval.c", "src/lrag_eval.c",
        "src/rag_pack.c", "src/lrag_pack.c", "src/rag_hashing.c", "src/lrag_hashing.c",
        "src/rag_hftok.c", "src/rag_model2vec.c", "src/lrag_model2vec.c",
        "src/rag_store.c", "src/rag_index.c", "src/lrag_index.c", "src/lrag_fs.c",
        "src/rag_digest.c", "src/rag_http.c", "src/rag_markdown.c", "src/rag_sentences.c",
        "src/rag_termcache.c", "src/rag_text.c", "src/rag_tokenizer.c",
        "src/rag_html.c", "src/lrag_html.c",
      },
      defines = { "_POSIX_C_SOURCE=200809L" },
      incdirs = { "src", "$(CJSON_INCDIR)", "$(UTF8PROC_INCDIR)", "$(STEMMER_INCDIR)",
        "$(OPENSSL_INCDIR)", "$(LIBXML2_INCDIR)/libxml2" },
      libdirs = { "$(CURL_LIBDIR)", "$(CJSON_LIBDIR)", "$(UTF8PROC_LIBDIR)",
        "$(STEMMER_LIBDIR)", "$(OPENSSL_LIBDIR)", "$(LIBXML2_LIBDIR)" },
      libraries = { "curl", "cjson", "utf8proc", "stemmer", "crypto", "pthread", "m" },
    },
  },
  install = { bin = { rag = "bin/rag" } },
  copy_directories = { "examples", "docs" },
}
test = {
  type = "command",
  command = "make test",
}
