/* bench/membw.c [MIB]: single-thread memory read bandwidth, the ceiling for
 * an exact vector scan. Sums a float array of MIB MiB (default 1024, well
 * beyond the caches) with AVX2 loads, 5 timed passes after one untimed one,
 * and prints the median in GB/s (1e9 bytes per second).
 *
 * bench/membw.c --latency: the time of one random read (a chain of
 * dependent loads, each from a cache line picked at random) in buffers of
 * 1 to 32 MiB: how much cache this process gets now. On a shared machine
 * (a cloud VM) it can be far less than lscpu's L3, and it moves while a
 * neighbour works; an index whose per-query reads outgrow it waits on
 * memory. Not part of the library: bench/util.lua builds it with
 *   cc -O2 -mavx2 -o /tmp/rag-membw bench/membw.c
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define PASSES 5
#define CHASE 1000000 /* dependent reads timed at each size */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Four independent accumulators (eight under AVX2) so that the adds never
 * wait on each other and the loads are the bottleneck. */
static float sum_floats(const float *a, size_t n)
{
	size_t i = 0;
#ifdef __AVX2__
	__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
	__m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
	for (; i + 32 <= n; i += 32) {
		s0 = _mm256_add_ps(s0, _mm256_load_ps(a + i));
		s1 = _mm256_add_ps(s1, _mm256_load_ps(a + i + 8));
		s2 = _mm256_add_ps(s2, _mm256_load_ps(a + i + 16));
		s3 = _mm256_add_ps(s3, _mm256_load_ps(a + i + 24));
	}
	__m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
	float lanes[8];
	_mm256_storeu_ps(lanes, s);
	float total = 0;
	for (int j = 0; j < 8; j++)
		total += lanes[j];
#else
	float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
	for (; i + 4 <= n; i += 4) {
		t0 += a[i];
		t1 += a[i + 1];
		t2 += a[i + 2];
		t3 += a[i + 3];
	}
	float total = t0 + t1 + t2 + t3;
#endif
	for (; i < n; i++)
		total += a[i];
	return total;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

/* Nanoseconds per read of a chain through every 64-byte line of a buffer
 * of mib MiB in a random order (one cycle: Sattolo's shuffle, driven by a
 * fixed 64-bit LCG so that every run walks the same order). */
static double chase_ns(long mib)
{
	size_t lines = ((size_t)mib << 20) / 64, i;
	char *buf = aligned_alloc(64, (size_t)mib << 20);
	size_t *order = malloc(lines * sizeof *order);
	unsigned long long x = 88172645463325252ULL;
	if (!buf || !order) {
		free(buf);
		free(order);
		return -1;
	}
	for (i = 0; i < lines; i++)
		order[i] = i;
	for (i = lines - 1; i > 0; i--) {
		size_t j, t;
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		j = (size_t)((x >> 33) % i); /* j < i: one cycle through all */
		t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (i = 0; i < lines; i++) /* line order[i] points at line order[i + 1] */
		*(char **)(void *)(buf + order[i] * 64) = buf + order[(i + 1) % lines] * 64;
	free(order);
	char *p = buf;
	for (i = 0; i < lines; i++) /* one untimed lap */
		p = *(char **)(void *)p;
	double t0 = now();
	for (i = 0; i < CHASE; i++) {
		p = *(char **)(void *)p;
		__asm__ __volatile__("" : "+r"(p)); /* kept between the clock's reads */
	}
	double ns = (now() - t0) / CHASE * 1e9;
	free(buf);
	return ns;
}

static int latency(void)
{
	static const long sizes[] = {1, 2, 4, 8, 32};
	printf("random reads:");
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		double ns = chase_ns(sizes[i]);
		if (ns < 0) {
			fprintf(stderr, "membw: cannot allocate %ld MiB\n", sizes[i]);
			return 1;
		}
		printf("%s %ld MiB %.0f ns", i ? "," : "", sizes[i], ns);
	}
	printf(" (one dependent read at a random line of a buffer of that size)\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--latency") == 0)
		return latency();
	long mib = argc > 1 ? atol(argv[1]) : 1024;
	if (mib <= 0) {
		fprintf(stderr, "usage: %s [MIB | --latency]\n", argv[0]);
		return 2;
	}
	size_t bytes = (size_t)mib << 20;
	size_t n = bytes / sizeof(float);
	float *a = aligned_alloc(64, bytes);
	if (!a) {
		fprintf(stderr, "membw: cannot allocate %ld MiB\n", mib);
		return 1;
	}
	for (size_t i = 0; i < n; i++) /* touch every page; values stay exact */
		a[i] = (float)(i & 7);

	volatile float sink = sum_floats(a, n); /* untimed warm-up pass */
	double gbs[PASSES];
	for (int p = 0; p < PASSES; p++) {
		double t0 = now();
		sink = sum_floats(a, n);
		gbs[p] = (double)bytes / (now() - t0) / 1e9;
	}
	(void)sink;
	qsort(gbs, PASSES, sizeof gbs[0], cmp_double);
	printf("%.2f GB/s single-thread read, median of %d passes over %ld MiB (%s)\n",
	       gbs[PASSES / 2], PASSES, mib,
#ifdef __AVX2__
	       "avx2"
#else
	       "scalar"
#endif
	);
	free(a);
	return 0;
}
