/* STREAM triad a[i] = b[i] + s * c[i] on one thread, the bandwidth
 * reference of bench/fusion_bench.py. Usage: stream_triad N REPS; prints
 * {"n": N, "best_s": ..., "median_s": ..., "gb_per_s": ...} where bytes are
 * 3 * 4 * N (two float32 reads, one write) over the best time, as STREAM
 * reports it (gb_per_s_median: over the median time). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 16L << 20;
  int reps = argc > 2 ? atoi(argv[2]) : 20;
  float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n),
        *c = malloc(sizeof(float) * n);
  double *times = malloc(sizeof(double) * reps);
  if (!a || !b || !c || !times)
    return 1;
  for (long i = 0; i < n; ++i) {
    a[i] = 0.0f;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
  volatile float s = 3.0f;
  for (int r = 0; r < reps; ++r) {
    float scalar = s;
    double t = now();
    for (long i = 0; i < n; ++i)
      a[i] = b[i] + scalar * c[i];
    times[r] = now() - t;
    if (a[r % n] != 7.0f)
      return 2;
  }
  qsort(times, reps, sizeof(double), cmp);
  double median = times[reps / 2];
  printf("{\"n\": %ld, \"best_s\": %.6g, \"median_s\": %.6g, \"gb_per_s\": %.4g, "
         "\"gb_per_s_median\": %.4g}\n",
         n, times[0], median, 12.0 * (double)n / times[0] / 1e9,
         12.0 * (double)n / median / 1e9);
  return 0;
}
