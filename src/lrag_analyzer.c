/* lrag_analyzer.c: placeholder while the analyzer binding is written. */
#include "lrag.h"

int lrag_open_analyzer(lua_State *L) {
  (void)L;
  return 0;
}
