/* lrag_tokenizer.c: placeholder while the tokenizer binding is written. */
#include "lrag.h"

int lrag_open_tokenizer(lua_State *L) {
  (void)L;
  return 0;
}
