/*
** lrag_fs.c: rag.core.fs, the few file operations rag.index's saves need
** and Lua lacks: an atomic write, a directory's names, mkdir, and a file's
** size and CRC-32; and exec, for `rag serve`, whose process must become
** the shell that supervises nginx (os.execute's system() ignores SIGINT
** while it waits). Failures of the world return nil, msg, code.
*/
#include "lrag.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "rag.h"
#include "rag_file.h"

/* fs.write(path, bytes) -> true | nil, msg, code: temporary file, fsync, rename. */
static int fs_write(lua_State *L) {
  const char *path = lrag_checkpath(L, 1, "rag.fs.write");
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  int err = 0, rc = rag_file_write(path, s, n, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, "rag.fs.write", path, NULL, err);
  lua_pushboolean(L, 1);
  return 1;
}

static void dir_fin(void *d) {
  (void)closedir((DIR *)d);
}

/* fs.list(dir) -> { name, ... } sorted bytewise, without "." and ".." | nil, msg, code */
static int fs_list(lua_State *L) {
  const char *path = lrag_checkpath(L, 1, "rag.fs.list");
  DIR *d;
  struct dirent *e;
  int n = 0;
  lrag_box *box;
  lua_newtable(L);
  box = lrag_box_new(L, dir_fin); /* closes the handle when a push raises */
  if ((d = opendir(path)) == NULL)
    return lrag_file_error(L, RAG_EIO, "rag.fs.list", path, NULL, errno);
  box->p = d;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    lua_pushstring(L, e->d_name);
    lua_rawseti(L, -3, ++n);
  }
  lrag_box_free(box);
  lua_pop(L, 1);
  lua_getglobal(L, "table");
  lua_getfield(L, -1, "sort");
  lua_pushvalue(L, -3);
  lua_call(L, 1, 0);
  lua_pop(L, 1);
  return 1;
}

/* The kind of a stat mode: "file", "dir", "link" or "other". */
static const char *mode_kind(mode_t m) {
  return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "link" : "other";
}

/*
** fs.scan(dir) -> names, kinds | nil, msg, code: fs.list's sorted names and,
** at the same positions, each entry's kind without following symbolic
** links ("file", "dir", "link", "other", from lstat). rag.load.dir's walk.
*/
static int fs_scan(lua_State *L) {
  const char *path = lrag_checkpath(L, 1, "rag.fs.scan");
  int n, i;
  if (fs_list(L) != 1 || lua_isnil(L, -1)) return 3; /* nil, msg, code */
  n = (int)lua_rawlen(L, -1);
  lua_createtable(L, n, 0);
  for (i = 1; i <= n; i++) {
    struct stat st;
    const char *kind = "other";
    lua_rawgeti(L, -2, i);
    lua_pushfstring(L, "%s/%s", path, lua_tostring(L, -1));
    if (lstat(lua_tostring(L, -1), &st) == 0) kind = mode_kind(st.st_mode);
    lua_pop(L, 2);
    lua_pushstring(L, kind);
    lua_rawseti(L, -2, i);
  }
  return 2;
}

/*
** fs.stat(path) -> kind, size, id | nil, msg, code: following symbolic
** links; id is "dev:inode", which names a directory however it is reached
** (rag.load.dir's check for symbolic link loops).
*/
static int fs_stat(lua_State *L) {
  const char *path = lrag_checkpath(L, 1, "rag.fs.stat");
  struct stat st;
  if (stat(path, &st) != 0) return lrag_file_error(L, RAG_EIO, "rag.fs.stat", path, NULL, errno);
  lua_pushstring(L, mode_kind(st.st_mode));
  lua_pushinteger(L, (lua_Integer)st.st_size);
  {
    char id[48];
    snprintf(id, sizeof id, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    lua_pushstring(L, id);
  }
  return 3;
}

/* fs.mkdir(dir) -> true (made or already a directory) | nil, msg, code */
static int fs_mkdir(lua_State *L) {
  const char *path = lrag_checkpath(L, 1, "rag.fs.mkdir");
  struct stat st;
  if (mkdir(path, 0777) != 0) {
    int e = errno;
    if (e != EEXIST || stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
      return lrag_file_error(L, RAG_EIO, "rag.fs.mkdir", path,
                             e == EEXIST ? "exists and is not a directory" : NULL,
                             e == EEXIST ? 0 : e);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* fs.sum(path) -> size, crc32 | nil, msg, code */
static int fs_sum(lua_State *L) {
  const char *path = lrag_checkpath(L, 1, "rag.fs.sum");
  size_t n;
  uint32_t crc;
  const char *why = NULL;
  int err = 0, rc = rag_file_sum(path, &n, &crc, &why, &err);
  if (rc != RAG_OK) return lrag_file_error(L, rc, "rag.fs.sum", path, why, err);
  lua_pushinteger(L, (lua_Integer)n);
  lua_pushinteger(L, (lua_Integer)crc);
  return 2;
}

/*
** fs.exec(file, arg...) -> nil, msg, code: replaces this process by the
** program `file` (looked up on PATH) with the arguments given (its argv[0]
** is `file`), after flushing every C stream; returns only when exec fails.
*/
static int fs_exec(lua_State *L) {
  int n = lua_gettop(L), i;
  const char **argv;
  lrag_checkpath(L, 1, "rag.fs.exec");
  for (i = 2; i <= n; i++) luaL_checkstring(L, i);
  argv = (const char **)lua_newuserdata(L, (size_t)(n + 1) * sizeof *argv);
  for (i = 0; i < n; i++) argv[i] = lua_tostring(L, i + 1);
  argv[n] = NULL;
  fflush(NULL);
  execvp(argv[0], (char *const *)argv);
  return lrag_file_error(L, RAG_EIO, "rag.fs.exec", argv[0], NULL, errno);
}

static const luaL_Reg fs_funcs[] = {
    {"write", fs_write}, {"list", fs_list}, {"mkdir", fs_mkdir}, {"scan", fs_scan},
    {"stat", fs_stat},   {"sum", fs_sum},   {"exec", fs_exec}, {NULL, NULL},
};

int lrag_open_fs(lua_State *L) {
  luaL_setfuncs(L, fs_funcs, 0);
  return 0;
}
