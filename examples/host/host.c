/*
** host.c: a C game host that embeds Lua 5.4 and rag, both linked in
** statically (`make host`; examples/host/README.md). A simulated 60 fps
** loop indexes documents a little per frame through idx:add_many's step
** function (2 ms budget), times every frame's work on a monotonic clock,
** then answers questions as `rag ask` does. The Lua half is host.lua.
*/
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

#ifndef RAG_HOST_LUA_DIR
#define RAG_HOST_LUA_DIR "lua" /* the folder holding rag/ */
#endif
#ifndef RAG_HOST_SCRIPT
#define RAG_HOST_SCRIPT "examples/host/host.lua"
#endif

#define FRAME_MS (1000.0 / 60.0)
#define STEP_MS 2        /* the ingestion step's budget */
#define GC_MS 0.5        /* the collector's share of a frame (gc = frame) */
#define GC_STEPSIZE 8    /* log2 bytes of a basic collector step (gc = frame) */
#define PARTICLES 100000 /* the simulated game's work */
#define MAX_QUESTIONS 64

int luaopen_rag_core(lua_State *L);

typedef enum { GC_FRAME, GC_INC, GC_GEN } gc_mode;

typedef struct options {
  const char *path;                      /* documents: folder, file or BEIR folder */
  const char *save;                      /* --save DIR, or NULL */
  const char *questions[MAX_QUESTIONS];  /* --question Q... */
  int nquestions;
  gc_mode gc;                            /* --gc frame|inc|gen */
} options;

typedef struct particle {
  float x, y, vx, vy;
} particle;

typedef struct samples {
  double *v;
  size_t n, cap;
} samples;

/* {====== Clock and frames ======} */

static double clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Wall time on the monotonic clock, what a player sees. */
static double now_ms(void) {
  return clock_ms(CLOCK_MONOTONIC);
}

/* This thread's CPU time: a frame's wall time minus it is time the system
** gave to other processes (the machine's other load), not the frame's work. */
static double cpu_ms(void) {
  return clock_ms(CLOCK_THREAD_CPUTIME_ID);
}

/* Sleeps until the monotonic time t (ms), when it is still ahead. */
static void sleep_until(double t) {
  struct timespec ts;
  ts.tv_sec = (time_t)(t / 1e3);
  ts.tv_nsec = (long)((t - (double)ts.tv_sec * 1e3) * 1e6);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void record(samples *s, double v) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 1024;
    double *p = (double *)realloc(s->v, cap * sizeof *p);
    if (p == NULL) {
      fputs("rag-host: out of memory\n", stderr);
      exit(1);
    }
    s->v = p;
    s->cap = cap;
  }
  s->v[s->n++] = v;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The nearest-rank q-quantile of sorted v[0..n-1] (n > 0). */
static double quantile(const double *v, size_t n, double q) {
  size_t r = (size_t)ceil(q * (double)n);
  return v[r > 0 ? r - 1 : 0];
}

/* The game's work for one frame: particles under gravity in a box. */
static void game_update(particle *p, size_t n, float dt) {
  size_t i;
  for (i = 0; i < n; i++) {
    p[i].vy -= 9.8f * dt;
    p[i].x += p[i].vx * dt;
    p[i].y += p[i].vy * dt;
    if (p[i].x < 0.0f || p[i].x > 100.0f) p[i].vx = -p[i].vx;
    if (p[i].y < 0.0f) {
      p[i].y = -p[i].y;
      p[i].vy = -0.9f * p[i].vy;
    }
  }
}

/* {====== Lua ======} */

static int traceback(lua_State *L) {
  luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

/* Calls the field `name` of the host table (at registry ref `host`) with
** nargs arguments on the stack; leaves nres results. 0, or 1 with the error
** printed. */
static int call_host(lua_State *L, int host, const char *name, int nargs, int nres) {
  int base = lua_gettop(L) - nargs, rc;
  lua_pushcfunction(L, traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, host);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  lua_rotate(L, base + 1, 2); /* traceback, function, then the arguments */
  rc = lua_pcall(L, nargs, nres, base + 1);
  lua_remove(L, base + 1);
  if (rc != LUA_OK) {
    fprintf(stderr, "rag-host: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    return 1;
  }
  return 0;
}

/* A new state with the standard libraries, rag.core preloaded (no .so is
** loaded) and rag's Lua modules on package.path. */
static lua_State *new_state(void) {
  const char *dir = getenv("RAG_HOST_LUA_DIR");
  lua_State *L = luaL_newstate();
  if (L == NULL) return NULL;
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_rag_core);
  lua_setfield(L, -2, "rag.core");
  lua_pop(L, 1);
  if (dir == NULL || *dir == '\0') dir = RAG_HOST_LUA_DIR;
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", dir, dir);
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  return L;
}

/* Runs host.lua and keeps the table it returns; its registry ref, or
** LUA_NOREF with the error printed. */
static int load_host(lua_State *L) {
  const char *script = getenv("RAG_HOST_SCRIPT");
  if (script == NULL || *script == '\0') script = RAG_HOST_SCRIPT;
  lua_pushcfunction(L, traceback);
  if (luaL_loadfile(L, script) != LUA_OK || lua_pcall(L, 0, 1, -2) != LUA_OK) {
    fprintf(stderr, "rag-host: %s\n", lua_tostring(L, -1));
    lua_pop(L, 2);
    return LUA_NOREF;
  }
  lua_remove(L, -2);
  if (!lua_istable(L, -1)) {
    fprintf(stderr, "rag-host: '%s' must return a table\n", script);
    lua_pop(L, 1);
    return LUA_NOREF;
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* {====== The frame loop ======} */

typedef struct loop_stats {
  samples work;      /* each frame's work, ms */
  samples cpu;       /* each frame's CPU time, ms */
  double worst_step; /* the worst ingestion step, ms */
  double worst_gc;   /* the worst collector share of a frame, ms */
  double wall;       /* from the first frame to the last, ms */
  int peak_kb;       /* the Lua heap's largest size at a frame's end */
  double game;       /* the game's work over all frames, ms */
  long documents;    /* added + updated + unchanged at the end */
} loop_stats;

/* The collector's work in a frame with gc = frame: basic incremental
** steps until GC_MS has passed or a cycle ends. */
static void gc_frame(lua_State *L) {
  double t0 = now_ms();
  do {
    if (lua_gc(L, LUA_GCSTEP, 0)) break;
  } while (now_ms() - t0 < GC_MS);
}

static long count_field(lua_State *L, int t, const char *k) {
  long v;
  lua_getfield(L, t, k);
  v = (long)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
}

/* Runs frames until the step function at the top of the stack reports done;
** pops it. 0, or 1 with the error printed. */
static int run_frames(lua_State *L, const options *o, loop_stats *st) {
  size_t np = PARTICLES, i;
  particle *p = (particle *)calloc(np, sizeof *p);
  int step = luaL_ref(L, LUA_REGISTRYINDEX), done = 0, rc = 0;
  double start, next;
  if (p == NULL) {
    fputs("rag-host: out of memory\n", stderr);
    return 1;
  }
  for (i = 0; i < np; i++) {
    p[i].x = (float)(i % 100);
    p[i].y = (float)(i % 37);
    p[i].vx = (float)(i % 7) - 3.0f;
  }
  if (o->gc == GC_GEN) {
    lua_gc(L, LUA_GCGEN, 0, 0);
  } else if (o->gc == GC_FRAME) {
    lua_gc(L, LUA_GCINC, 0, 0, GC_STEPSIZE);
    lua_gc(L, LUA_GCSTOP);
  }
  start = next = now_ms();
  while (!done) {
    double c0 = cpu_ms(), t0 = now_ms(), t1, t2, t3;
    game_update(p, np, (float)(FRAME_MS / 1000.0));
    t1 = now_ms();
    lua_pushcfunction(L, traceback);
    lua_rawgeti(L, LUA_REGISTRYINDEX, step);
    lua_pushinteger(L, STEP_MS);
    if (lua_pcall(L, 1, 2, -3) != LUA_OK) {
      fprintf(stderr, "rag-host: %s\n", lua_tostring(L, -1));
      lua_pop(L, 2);
      rc = 1;
      break;
    }
    if (lua_isnil(L, -2)) {
      fprintf(stderr, "rag-host: %s\n", lua_tostring(L, -1));
      lua_pop(L, 3);
      rc = 1;
      break;
    }
    done = lua_toboolean(L, -2);
    if (done) {
      st->documents = count_field(L, -1, "added") + count_field(L, -1, "updated") +
                      count_field(L, -1, "unchanged");
    }
    lua_pop(L, 3);
    t2 = now_ms();
    if (o->gc == GC_FRAME) gc_frame(L);
    t3 = now_ms();
    record(&st->work, t3 - t0);
    if (lua_gc(L, LUA_GCCOUNT) > st->peak_kb) st->peak_kb = lua_gc(L, LUA_GCCOUNT);
    record(&st->cpu, cpu_ms() - c0);
    st->game += t1 - t0;
    if (t2 - t1 > st->worst_step) st->worst_step = t2 - t1;
    if (t3 - t2 > st->worst_gc) st->worst_gc = t3 - t2;
    next += FRAME_MS;
    if (next < t3) next = t3; /* a long frame: the next one starts now */
    if (!done) sleep_until(next);
  }
  st->wall = now_ms() - start;
  luaL_unref(L, LUA_REGISTRYINDEX, step);
  lua_gc(L, LUA_GCINC, 0, 0, 13); /* Lua's defaults again: 200, 100, 8 KB */
  lua_gc(L, LUA_GCRESTART);
  free(p);
  return rc;
}

static void report(const loop_stats *st) {
  size_t n = st->work.n, over8 = 0, over16 = 0, i;
  double *v = st->work.v, *c = st->cpu.v;
  for (i = 0; i < n; i++) {
    over8 += v[i] > 8.0;
    over16 += v[i] > FRAME_MS;
  }
  qsort(v, n, sizeof *v, by_value);
  qsort(c, n, sizeof *c, by_value);
  printf("frames %zu, documents %ld (%.2f s at 60 fps); the game's work %.2f ms a frame\n", n,
         st->documents, st->wall / 1e3, st->game / (double)n);
  printf("frame work: worst %.2f ms, median %.2f ms, p99 %.2f ms; over 8 ms: %zu, "
         "over 16.7 ms: %zu\n",
         v[n - 1], quantile(v, n, 0.5), quantile(v, n, 0.99), over8, over16);
  printf("frame CPU time: worst %.2f ms, median %.2f ms, p99 %.2f ms\n", c[n - 1],
         quantile(c, n, 0.5), quantile(c, n, 0.99));
  printf("worst ingestion step %.2f ms (budget %d ms), worst collector share %.2f ms; "
         "Lua heap at most %.1f MB\n",
         st->worst_step, STEP_MS, st->worst_gc, st->peak_kb / 1024.0);
  fflush(stdout);
}

/* {====== Main ======} */

static void usage(void) {
  fputs("usage: rag-host DOCS [--save DIR] [--question Q]... [--gc frame|inc|gen]\n", stderr);
  exit(2);
}

static void parse(int argc, char **argv, options *o) {
  int i;
  memset(o, 0, sizeof *o);
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--save") == 0 && i + 1 < argc) {
      o->save = argv[++i];
    } else if (strcmp(a, "--question") == 0 && i + 1 < argc) {
      if (o->nquestions == MAX_QUESTIONS) usage();
      o->questions[o->nquestions++] = argv[++i];
    } else if (strcmp(a, "--gc") == 0 && i + 1 < argc) {
      a = argv[++i];
      if (strcmp(a, "frame") == 0) o->gc = GC_FRAME;
      else if (strcmp(a, "inc") == 0) o->gc = GC_INC;
      else if (strcmp(a, "gen") == 0) o->gc = GC_GEN;
      else usage();
    } else if (a[0] == '-' || o->path != NULL) {
      usage();
    } else {
      o->path = a;
    }
  }
  if (o->path == NULL) usage();
}

int main(int argc, char **argv) {
  options o;
  loop_stats st;
  lua_State *L;
  int host, i, rc = 0;
  parse(argc, argv, &o);
  memset(&st, 0, sizeof st);
  if ((L = new_state()) == NULL) {
    fputs("rag-host: cannot create a Lua state\n", stderr);
    return 1;
  }
  if ((host = load_host(L)) == LUA_NOREF) {
    lua_close(L);
    return 1;
  }
  lua_pushstring(L, o.path);
  if (o.save) lua_pushstring(L, o.save);
  else lua_pushnil(L);
  if (call_host(L, host, "start", 2, 2)) {
    lua_close(L);
    return 1;
  }
  if (lua_isnil(L, -2)) {
    fprintf(stderr, "rag-host: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return 1;
  }
  printf("loaded %lld documents from %s\n", (long long)lua_tointeger(L, -2), o.path);
  lua_remove(L, -2);
  rc = run_frames(L, &o, &st);
  if (rc == 0 && st.work.n > 0) report(&st);
  if (rc == 0 && call_host(L, host, "finish", 0, 2) == 0) {
    if (lua_isnil(L, -2)) {
      fprintf(stderr, "rag-host: %s\n", lua_tostring(L, -1));
      rc = 1;
    } else {
      printf("index: %lld documents, %lld chunks%s%s\n", (long long)lua_tointeger(L, -2),
             (long long)lua_tointeger(L, -1), o.save ? "; saved into " : "", o.save ? o.save : "");
    }
    lua_pop(L, 2);
  } else {
    rc = 1;
  }
  for (i = 0; rc == 0 && i < o.nquestions; i++) {
    printf("\nQ: %s\n", o.questions[i]);
    fflush(stdout);
    lua_pushstring(L, o.questions[i]);
    if (call_host(L, host, "ask", 1, 2)) {
      rc = 1;
    } else {
      if (lua_isnil(L, -2)) {
        fprintf(stderr, "rag-host: %s\n", lua_tostring(L, -1));
        rc = 1;
      }
      lua_pop(L, 2);
    }
    fflush(stdout);
  }
  free(st.work.v);
  free(st.cpu.v);
  lua_close(L);
  return rc;
}
