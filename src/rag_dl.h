/*
** rag_dl.h: a shared library opened on first use (dlopen) rather than linked,
** so that a process that never needs it never maps it (libcurl, libxml2).
*/
#ifndef RAG_DL_H
#define RAG_DL_H

#include <stddef.h>

/*
** Opens the first of sonames (a NULL-ended list) that loads, and looks up
** the n symbols of names into syms. 1 on success: the handle stays open for
** the process's life. 0 when none loads or a symbol is missing (nothing
** stays open). Callers run it once, under pthread_once, and convert each
** symbol to its function pointer type with memcpy (POSIX lets dlsym's
** result convert; ISO C has no cast for it).
*/
int rag_dl_open(const char *const *sonames, const char *const *names, size_t n, void **syms);

#endif
