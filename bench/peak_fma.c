/*
** bench/peak_fma.c: one core's peak f32 multiply-add rate, for bench/models.lua
** to report the share of it a forward pass reaches: 12 independent chains of
** fused multiply-adds (enough to cover the latency of two FMA units) on 16
** (AVX-512F) or 8 (AVX2) floats, timed over a second's worth of work.
** Prints "avx512 GFLOPS" and "avx2 GFLOPS" lines (a line is missing when the
** CPU lacks the instructions). Built by `make bench-models`.
*/
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Each chain starts from its own value: equal chains would be merged into
** one by the compiler (it did so), and the loop would time one chain. */
#define CHAINS(T, SET, FMA, ADD)                                                        \
  T a0 = SET(1.00f), a1 = SET(1.01f), a2 = SET(1.02f), a3 = SET(1.03f), a4 = SET(1.04f), \
    a5 = SET(1.05f), a6 = SET(1.06f), a7 = SET(1.07f), a8 = SET(1.08f), a9 = SET(1.09f), \
    a10 = SET(1.10f), a11 = SET(1.11f);                                                 \
  T x = SET(0.999999f), y = SET(1e-7f);                                                 \
  for (i = 0; i < n; i++) {                                                             \
    a0 = FMA(a0, x, y); a1 = FMA(a1, x, y); a2 = FMA(a2, x, y); a3 = FMA(a3, x, y);     \
    a4 = FMA(a4, x, y); a5 = FMA(a5, x, y); a6 = FMA(a6, x, y); a7 = FMA(a7, x, y);     \
    a8 = FMA(a8, x, y); a9 = FMA(a9, x, y); a10 = FMA(a10, x, y); a11 = FMA(a11, x, y); \
  }                                                                                     \
  a0 = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));               \
  a0 = ADD(a0, ADD(ADD(a8, a9), ADD(a10, a11)));

__attribute__((target("avx512f"))) static float run512(long n) {
  long i;
  float out[16];
  CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
  _mm512_storeu_ps(out, a0);
  return out[0];
}

__attribute__((target("avx2,fma"))) static float run256(long n) {
  long i;
  float out[8];
  CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
  _mm256_storeu_ps(out, a0);
  return out[0];
}

/* GFLOP/s: 12 chains x lanes x 2 flops per step, best of 5. */
static double measure(float (*run)(long), int lanes) {
  long n = 20000000;
  double best = 0;
  int r;
  volatile float sink = 0;
  for (r = 0; r < 5; r++) {
    double t0 = now(), rate;
    sink += run(n);
    rate = 12.0 * lanes * 2 * (double)n / (now() - t0) / 1e9;
    if (rate > best) best = rate;
  }
  (void)sink;
  return best;
}

int main(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) printf("avx512 %.1f\n", measure(run512, 16));
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    printf("avx2 %.1f\n", measure(run256, 8));
  return 0;
}
