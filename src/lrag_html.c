/*
** lrag_html.c: rag.core.html.extract(s), the binding of rag_html.c for
** rag.load.html: { text=, title=, headings = { {start=, stop=, level=}, ... } }
** with 1-based inclusive byte offsets into text, or nil, msg, code.
*/
#include "lrag.h"

#include "rag.h"
#include "rag_html.h"

static void html_fin(void *p) {
  rag_html_free((rag_html *)p);
}

static int html_extract(lua_State *L) {
  size_t len, i;
  const char *s = luaL_checklstring(L, 1, &len);
  rag_html *h = (rag_html *)lrag_box_embed(L, sizeof *h, html_fin);
  int rc = rag_html_extract(s, len, h);
  if (rc != RAG_OK)
    return lrag_error(L, rc, "rag.load.html",
                      rc == RAG_EFORMAT ? "not an html document"
                      : rc == RAG_EIO   ? "libxml2.so.2 could not be loaded (apt-get install libxml2)"
                                        : NULL);
  lua_createtable(L, 0, 3);
  lua_pushlstring(L, h->text, h->len);
  lua_setfield(L, -2, "text");
  if (h->title != NULL) {
    lua_pushlstring(L, h->title, h->titlelen);
    lua_setfield(L, -2, "title");
  }
  lua_createtable(L, (int)h->nheadings, 0);
  for (i = 0; i < h->nheadings; i++) {
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)h->headings[i].start + 1);
    lua_setfield(L, -2, "start");
    lua_pushinteger(L, (lua_Integer)h->headings[i].stop);
    lua_setfield(L, -2, "stop");
    lua_pushinteger(L, h->headings[i].level);
    lua_setfield(L, -2, "level");
    lua_rawseti(L, -2, (int)i + 1);
  }
  lua_setfield(L, -2, "headings");
  return 1;
}

static const luaL_Reg html_funcs[] = {
    {"extract", html_extract},
    {NULL, NULL},
};

int lrag_open_html(lua_State *L) {
  luaL_setfuncs(L, html_funcs, 0);
  return 0;
}
