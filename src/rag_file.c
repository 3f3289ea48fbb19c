/*
** rag_file.c: the saved-file container (grammar in rag_file.h): writers into
** a file or memory, the atomic save, the whole-file read, and the checks of
** header and sections that every loader runs first.
*/
#include "rag_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rag_digest.h"

/* {====== Writing ======} */

void rag_w_put(rag_writer *w, const void *p, size_t n) {
  if (w->rc != RAG_OK || n == 0) return;
  w->crc = rag_digest_crc32(w->crc, p, n);
  if (w->f != NULL) {
    if (fwrite(p, 1, n, w->f) != n) {
      w->rc = RAG_EIO;
      w->eno = errno ? errno : EIO;
    }
    return;
  }
  if (n > w->cap - w->len) {
    unsigned char *v = (unsigned char *)rag_grow(w->buf, &w->cap, w->len + n, 1);
    if (v == NULL) {
      w->rc = RAG_ENOMEM;
      return;
    }
    w->buf = v;
  }
  memcpy(w->buf + w->len, p, n);
  w->len += n;
}

void rag_w_uint(rag_writer *w, uint64_t v, size_t bytes) {
  unsigned char p[8];
  size_t i;
  for (i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
  rag_w_put(w, p, bytes);
}

void rag_w_f64(rag_writer *w, double d) {
  uint64_t v;
  memcpy(&v, &d, sizeof v);
  rag_w_uint(w, v, 8);
}

void rag_w_varint(rag_writer *w, uint64_t v) {
  uint8_t p[10];
  rag_w_put(w, p, rag_put_varint(p, v));
}

void rag_w_str(rag_writer *w, const char *s, size_t n) {
  rag_w_varint(w, n);
  rag_w_put(w, s, n);
}

void rag_w_header(rag_writer *w, const unsigned char magic[8], uint32_t version,
                  uint32_t nsections, uint64_t size) {
  w->crc = 0;
  rag_w_put(w, magic, 8);
  rag_w_uint(w, version, 4);
  rag_w_uint(w, nsections, 4);
  rag_w_uint(w, size, 8);
  rag_w_end(w);
}

void rag_w_begin(rag_writer *w, const char tag[4], uint64_t len) {
  w->crc = 0;
  rag_w_put(w, tag, 4);
  rag_w_uint(w, len, 8);
}

void rag_w_end(rag_writer *w) {
  rag_w_uint(w, w->crc, 4);
}

int rag_file_dump(rag_write_fn fn, const void *obj, unsigned char **buf, size_t *n) {
  rag_writer w;
  *buf = NULL;
  *n = 0;
  memset(&w, 0, sizeof w);
  fn(obj, &w);
  if (w.rc != RAG_OK) {
    rag_free(w.buf);
    return w.rc;
  }
  *buf = w.buf;
  *n = w.len;
  return RAG_OK;
}

/* Makes a rename in path's directory durable; best effort. */
static void sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  int fd;
  if (slash == NULL) {
    strcpy(dir, ".");
  } else {
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof dir) return;
    memcpy(dir, path, n);
    dir[n] = '\0';
  }
  fd = open(dir, O_RDONLY);
  if (fd < 0) return;
  (void)fsync(fd);
  (void)close(fd);
}

int rag_file_save(const char *path, rag_write_fn fn, const void *obj, int *err) {
  size_t n = strlen(path) + 48;
  char *tmp;
  rag_writer w;
  int fd = -1, i;
  *err = 0;
  tmp = (char *)rag_malloc(n);
  if (tmp == NULL) return RAG_ENOMEM;
  for (i = 0; i < 100 && fd < 0; i++) {
    snprintf(tmp, n, "%s.tmp-%ld-%d", path, (long)getpid(), i);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    *err = errno;
    rag_free(tmp);
    return RAG_EIO;
  }
  memset(&w, 0, sizeof w);
  w.f = fdopen(fd, "wb");
  if (w.f == NULL) {
    *err = errno;
    (void)close(fd);
    (void)unlink(tmp);
    rag_free(tmp);
    return RAG_EIO;
  }
  fn(obj, &w);
  if (w.rc == RAG_OK && (fflush(w.f) != 0 || fsync(fd) != 0)) {
    w.rc = RAG_EIO;
    w.eno = errno;
  }
  if (fclose(w.f) != 0 && w.rc == RAG_OK) {
    w.rc = RAG_EIO;
    w.eno = errno;
  }
  if (w.rc == RAG_OK && rename(tmp, path) != 0) {
    w.rc = RAG_EIO;
    w.eno = errno;
  }
  if (w.rc != RAG_OK) {
    (void)unlink(tmp);
    *err = w.eno;
  } else {
    sync_dir(path);
  }
  rag_free(tmp);
  return w.rc;
}

typedef struct raw {
  const void *p;
  size_t n;
} raw;

static void write_raw(const void *obj, rag_writer *w) {
  const raw *r = (const raw *)obj;
  rag_w_put(w, r->p, r->n);
}

int rag_file_write(const char *path, const void *p, size_t n, int *err) {
  raw r;
  r.p = p;
  r.n = n;
  return rag_file_save(path, write_raw, &r, err);
}

/* {====== Reading ======} */

/* What a path that is no regular file is, for the failure's message. */
static const char *irregular(mode_t m) {
  if (S_ISDIR(m)) return "is a directory";
  if (S_ISFIFO(m)) return "is a fifo";
  if (S_ISCHR(m)) return "not a regular file (character device)";
  if (S_ISBLK(m)) return "not a regular file (block device)";
  if (S_ISSOCK(m)) return "not a regular file (socket)";
  return "not a regular file";
}

/* Opens path for reading when it is a regular file: RAG_EIO with *err =
** errno, or with *why when it is something else. */
static int open_regular(const char *path, int *fd, struct stat *st, const char **why, int *err) {
  int flags;
  /* O_NONBLOCK: the open of a FIFO must not wait for a writer */
  if ((*fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
    *err = errno;
    return RAG_EIO;
  }
  if (fstat(*fd, st) != 0) {
    *err = errno;
  } else if (!S_ISREG(st->st_mode)) {
    *why = irregular(st->st_mode);
  } else if ((flags = fcntl(*fd, F_GETFL)) == -1 || fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) == -1) {
    *err = errno; /* reads of a regular file block again, as they should */
  } else {
    return RAG_OK;
  }
  (void)close(*fd);
  return RAG_EIO;
}

int rag_file_read(const char *path, unsigned char **buf, size_t *n, const char **why, int *err) {
  struct stat st;
  size_t got = 0;
  int fd, rc;
  *buf = NULL;
  *n = 0;
  *err = 0;
  if ((rc = open_regular(path, &fd, &st, why, err)) != RAG_OK) return rc;
  *buf = (unsigned char *)rag_malloc((size_t)st.st_size + 1);
  if (*buf == NULL) {
    (void)close(fd);
    return RAG_ENOMEM;
  }
  while (got < (size_t)st.st_size) {
    ssize_t k = read(fd, *buf + got, (size_t)st.st_size - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  (void)close(fd);
  *n = got;
  return RAG_OK;
}

int rag_file_map(const char *path, void **p, size_t *n, const char **why, int *err) {
  struct stat st;
  int fd, rc;
  *p = NULL;
  *n = 0;
  *err = 0;
  if ((rc = open_regular(path, &fd, &st, why, err)) != RAG_OK) return rc;
  if ((uint64_t)st.st_size > (size_t)-1) {
    (void)close(fd);
    return RAG_ENOMEM;
  }
  if (st.st_size > 0) {
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      *err = errno;
      (void)close(fd);
      return RAG_EIO;
    }
    *p = m;
    *n = (size_t)st.st_size;
  }
  (void)close(fd);
  return RAG_OK;
}

void rag_file_unmap(void *p, size_t n) {
  if (p != NULL) (void)munmap(p, n);
}

int rag_file_sum(const char *path, size_t *n, uint32_t *crc, const char **why, int *err) {
  unsigned char buf[16384];
  struct stat st;
  int fd, rc;
  *n = 0;
  *crc = 0;
  *err = 0;
  if ((rc = open_regular(path, &fd, &st, why, err)) != RAG_OK) return rc;
  for (;;) {
    ssize_t k = read(fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      *err = errno;
      (void)close(fd);
      return RAG_EIO;
    }
    if (k == 0) break;
    *crc = rag_digest_crc32(*crc, buf, (size_t)k);
    *n += (size_t)k;
  }
  (void)close(fd);
  return RAG_OK;
}

int rag_file_load(const char *path, rag_load_fn load, void *out, const char **why, int *err) {
  unsigned char *buf;
  size_t n;
  int rc;
  *why = "";
  if ((rc = rag_file_read(path, &buf, &n, why, err)) != RAG_OK) return rc;
  rc = load(buf, n, out, why);
  rag_free(buf);
  return rc;
}

uint64_t rag_le(const unsigned char *p, size_t bytes) {
  uint64_t v = 0;
  while (bytes-- > 0) v = v << 8 | p[bytes];
  return v;
}

int rag_r_u8(rag_reader *r, unsigned *v) {
  if (r->p == r->e) return 0;
  *v = *r->p++;
  return 1;
}

int rag_r_uint(rag_reader *r, size_t bytes, uint64_t *v) {
  if ((size_t)(r->e - r->p) < bytes) return 0;
  *v = rag_le(r->p, bytes);
  r->p += bytes;
  return 1;
}

int rag_r_f64(rag_reader *r, double *d) {
  uint64_t v;
  if (!rag_r_uint(r, 8, &v)) return 0;
  memcpy(d, &v, sizeof v);
  return 1;
}

int rag_r_varint(rag_reader *r, uint64_t *v) {
  uint64_t x = 0;
  int shift;
  for (shift = 0; shift < 64 && r->p < r->e; shift += 7) {
    unsigned c = *r->p++;
    if (shift == 63 && c > 1) return 0;
    x |= (uint64_t)(c & 127) << shift;
    if (!(c & 128)) {
      *v = x;
      return 1;
    }
  }
  return 0;
}

int rag_r_bytes(rag_reader *r, size_t n, const unsigned char **s) {
  if ((size_t)(r->e - r->p) < n) return 0;
  *s = r->p;
  r->p += n;
  return 1;
}

int rag_r_str(rag_reader *r, const char **s, size_t *n) {
  uint64_t len;
  const unsigned char *b;
  if (!rag_r_varint(r, &len) || len > (uint64_t)(r->e - r->p) || !rag_r_bytes(r, (size_t)len, &b))
    return 0;
  *s = (const char *)b;
  *n = (size_t)len;
  return 1;
}

int rag_file_open(const unsigned char *p, size_t n, const unsigned char magic[8],
                  uint32_t version, const char (*tags)[5], size_t nsections, rag_reader *sec,
                  uint32_t *version_out, const char *badmagic, const char **why) {
  size_t off = RAG_FILE_HEADER, i;
  uint64_t v;
  *why = "";
  if (n < 8 || memcmp(p, magic, 8) != 0) {
    *why = badmagic;
    return RAG_EFORMAT;
  }
  if (n < RAG_FILE_HEADER) return rag_corrupt(why, "truncated header");
  if (rag_digest_crc32(0, p, RAG_FILE_HEADER - 4) != rag_le(p + RAG_FILE_HEADER - 4, 4))
    return rag_corrupt(why, "header checksum mismatch");
  v = rag_le(p + 8, 4);
  if (v > version) {
    *why = "written by a newer version of rag";
    return RAG_EVERSION;
  }
  if (v == 0 || rag_le(p + 12, 4) != nsections) return rag_corrupt(why, "bad header");
  if (rag_le(p + 16, 8) != n)
    return rag_corrupt(why, rag_le(p + 16, 8) > n ? "truncated file" : "trailing bytes");
  for (i = 0; i < nsections; i++) {
    uint64_t len;
    if (n - off < 16 || memcmp(p + off, tags[i], 4) != 0)
      return rag_corrupt(why, "bad section header");
    len = rag_le(p + off + 4, 8);
    if (len > n - off - 16) return rag_corrupt(why, "bad section length");
    if (rag_digest_crc32(0, p + off, 12 + (size_t)len) != rag_le(p + off + 12 + len, 4))
      return rag_corrupt(why, "section checksum mismatch");
    sec[i].p = p + off + 12;
    sec[i].e = sec[i].p + len;
    off += 16 + (size_t)len;
  }
  if (off != n) return rag_corrupt(why, "trailing bytes");
  *version_out = (uint32_t)v;
  return RAG_OK;
}

char *rag_file_join(const char *dir, const char *name) {
  size_t dl = strlen(dir), nl = strlen(name);
  char *path;
  while (dl > 1 && dir[dl - 1] == '/') dl--;
  if ((path = (char *)rag_malloc(dl + nl + 2)) == NULL) return NULL;
  memcpy(path, dir, dl);
  path[dl] = '/';
  memcpy(path + dl + 1, name, nl + 1);
  return path;
}

int rag_file_read_in(const char *dir, const char *name, unsigned char **buf, size_t *n,
                     const char **why, int *err) {
  char *path = rag_file_join(dir, name);
  int rc;
  *err = 0;
  if (path == NULL) return RAG_ENOMEM;
  rc = rag_file_read(path, buf, n, why, err);
  rag_free(path);
  return rc;
}
