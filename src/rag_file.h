/*
** rag_file.h: the container every saved index shares. A file is a header
** (magic, version, section count, file size, CRC-32) and tagged sections,
** each with its own CRC-32; saving writes a temporary file, syncs it and
** renames it over the target, so a reader sees the old file or the new one.
** Readers here are bounds-checked cursors over untrusted bytes.
**
**   file    = header section{nsections}
**   header  = magic:8 version:u32 nsections:u32 size:u64 crc:u32
**             (size = the file's length; crc = CRC-32 of the 24 bytes before it)
**   section = tag:4 length:u64 payload[length] crc:u32
**             (crc = CRC-32 of tag, length and payload)
**   str     = len:varint bytes[len]       (varint = LEB128, at most 10 bytes)
*/
#ifndef RAG_FILE_H
#define RAG_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rag.h"

#define RAG_FILE_HEADER 28u /* bytes of the header */

/* {====== Writing ======} */

typedef struct rag_writer {
  FILE *f;            /* the file, or NULL to write into buf */
  unsigned char *buf; /* rag_malloc'd */
  size_t len, cap;
  uint32_t crc; /* of what was put since the last rag_w_begin */
  int rc, eno;  /* the first failure (a status and errno) */
} rag_writer;

/* Puts n bytes; after a failure every put is a no-op. */
void rag_w_put(rag_writer *w, const void *p, size_t n);
void rag_w_uint(rag_writer *w, uint64_t v, size_t bytes); /* little-endian */
void rag_w_f64(rag_writer *w, double d);
void rag_w_varint(rag_writer *w, uint64_t v);
void rag_w_str(rag_writer *w, const char *s, size_t n);
/* The header of a file of `size` bytes in all. */
void rag_w_header(rag_writer *w, const unsigned char magic[8], uint32_t version,
                  uint32_t nsections, uint64_t size);
void rag_w_begin(rag_writer *w, const char tag[4], uint64_t len);
void rag_w_end(rag_writer *w); /* the CRC closing a section */

static inline size_t rag_varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 128) {
    v >>= 7;
    n++;
  }
  return n;
}

/* Writes v at p (room for 10 bytes); returns the bytes written. */
static inline size_t rag_put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 128) {
    p[n++] = (uint8_t)(v | 128);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

static inline size_t rag_str_size(size_t n) {
  return rag_varint_len(n) + n;
}

/* Writes an object's whole file through w; w records any failure. */
typedef void (*rag_write_fn)(const void *obj, rag_writer *w);

/* The file into a rag_malloc'd buffer the caller frees. RAG_ENOMEM. */
int rag_file_dump(rag_write_fn fn, const void *obj, unsigned char **buf, size_t *n);

/*
** Writes the file to `path` atomically: a temporary `path.tmp-PID-N`, fsync,
** rename, fsync of the directory. RAG_EIO with errno in *err, RAG_ENOMEM.
** On failure `path` is untouched and the temporary file removed.
*/
int rag_file_save(const char *path, rag_write_fn fn, const void *obj, int *err);

/* Writes n bytes at p to `path` atomically, as rag_file_save does. */
int rag_file_write(const char *path, const void *p, size_t n, int *err);

/* {====== Reading ======} */

/*
** Reads a regular file whole into a rag_malloc'd buffer. RAG_ENOMEM;
** RAG_EIO with *err = errno, or with *err = 0 and *why saying what the
** path is when it is no regular file ("is a directory", "is a fifo",
** "not a regular file (character device)", ...). Never waits on a FIFO.
*/
int rag_file_read(const char *path, unsigned char **buf, size_t *n, const char **why, int *err);

/* The path dir/name (dir's trailing slashes dropped), rag_malloc'd; NULL
** when out of memory. */
char *rag_file_join(const char *dir, const char *name);

/* rag_file_read of dir/name. */
int rag_file_read_in(const char *dir, const char *name, unsigned char **buf, size_t *n,
                     const char **why, int *err);

/*
** Maps a regular file whole, read-only and shared (mmap), at a page-aligned
** *p; an empty file gives *p = NULL, *n = 0. Errors as rag_file_read. The
** pages are the file's: a file replaced by rename (as rag_file_save does)
** leaves the mapping intact, but one truncated in place would fault.
*/
int rag_file_map(const char *path, void **p, size_t *n, const char **why, int *err);
void rag_file_unmap(void *p, size_t n); /* NULL is a no-op */

/* The size and CRC-32 of the regular file at `path`, read in small pieces.
** Errors as rag_file_read's. */
int rag_file_sum(const char *path, size_t *n, uint32_t *crc, const char **why, int *err);

/* Parses the n bytes of a file at p into *out (a typed pointer's address). */
typedef int (*rag_load_fn)(const unsigned char *p, size_t n, void *out, const char **why);

/*
** Reads the file at `path` and parses it with `load`: what the indexes'
** rag_*_load do. RAG_EIO as rag_file_read says, else load's status and *why.
*/
int rag_file_load(const char *path, rag_load_fn load, void *out, const char **why, int *err);

/* A loader's verdict on a bad section: sets *why to `msg`, returns RAG_ECORRUPT. */
static inline int rag_corrupt(const char **why, const char *msg) {
  *why = msg;
  return RAG_ECORRUPT;
}

typedef struct rag_reader {
  const unsigned char *p, *e;
} rag_reader;

uint64_t rag_le(const unsigned char *p, size_t bytes);

/* Each returns 0 when the bytes run out or are malformed, else 1. */
int rag_r_u8(rag_reader *r, unsigned *v);
int rag_r_uint(rag_reader *r, size_t bytes, uint64_t *v);
int rag_r_f64(rag_reader *r, double *d);
int rag_r_varint(rag_reader *r, uint64_t *v);
int rag_r_str(rag_reader *r, const char **s, size_t *n);
int rag_r_bytes(rag_reader *r, size_t n, const unsigned char **s);

/*
** Checks the header and every section of the n bytes at p against `magic`,
** versions 1 to `version` and the `nsections` tags, in order; fills sec[i]
** with each payload. RAG_EFORMAT (with `badmagic` in *why), RAG_EVERSION,
** RAG_ECORRUPT with the reason in *why. *version_out gets the file's version.
*/
int rag_file_open(const unsigned char *p, size_t n, const unsigned char magic[8],
                  uint32_t version, const char (*tags)[5], size_t nsections, rag_reader *sec,
                  uint32_t *version_out, const char *badmagic, const char **why);

#endif
