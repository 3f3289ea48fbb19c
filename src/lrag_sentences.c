/* lrag_sentences.c: placeholder while the sentences binding is written. */
#include "lrag.h"

int lrag_open_sentences(lua_State *L) {
  (void)L;
  return 0;
}
