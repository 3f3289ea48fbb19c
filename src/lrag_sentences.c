/*
** lrag_sentences.c: rag.text.sentences(s), sentence spans from the C core
** as { {text=, start=, stop=}, ... } with 1-based inclusive byte offsets.
*/
#include "lrag.h"

#include "rag.h"
#include "rag_sentences.h"

#define FNAME "rag.text.sentences"

static void spans_fin(void *p) {
  rag_free(p);
}

static int text_sentences(lua_State *L) {
  size_t len, n = 0, errpos = 0, i;
  const char *s;
  rag_span *spans = NULL;
  lrag_box *box;
  int rc;
  luaL_checktype(L, 1, LUA_TSTRING); /* no number coercion: misuse raises */
  s = lua_tolstring(L, 1, &len);
  /* the box owns the spans while the table is built, so errors free them */
  box = lrag_box_new(L, spans_fin);
  rc = rag_sentences_split(s, len, &spans, &n, &errpos);
  box->p = spans;
  if (rc != RAG_OK)
    return lrag_texterror(L, rc, FNAME, errpos);
  if (n > (size_t)0x7fffffff) return luaL_error(L, FNAME ": too many sentences");
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_createtable(L, 0, 3);
    lua_pushlstring(L, s + spans[i].start, spans[i].stop - spans[i].start);
    lua_setfield(L, -2, "text");
    lua_pushinteger(L, (lua_Integer)spans[i].start + 1);
    lua_setfield(L, -2, "start");
    lua_pushinteger(L, (lua_Integer)spans[i].stop);
    lua_setfield(L, -2, "stop");
    lua_rawseti(L, -2, (int)(i + 1));
  }
  lrag_box_free(box);
  return 1;
}

static const luaL_Reg text_funcs[] = {
    {"sentences", text_sentences},
    {NULL, NULL},
};

int lrag_open_sentences(lua_State *L) {
  luaL_setfuncs(L, text_funcs, 0);
  return 0;
}
