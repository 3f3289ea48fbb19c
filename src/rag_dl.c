/*
** rag_dl.c: a shared library opened on first use (see rag_dl.h).
*/
#include "rag_dl.h"

#include <dlfcn.h>

int rag_dl_open(const char *const *sonames, const char *const *names, size_t n, void **syms) {
  void *h = NULL;
  size_t i;
  for (; *sonames != NULL && h == NULL; sonames++) h = dlopen(*sonames, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return 0;
  for (i = 0; i < n; i++)
    if ((syms[i] = dlsym(h, names[i])) == NULL) {
      dlclose(h);
      return 0;
    }
  return 1;
}
