/* STREAM triad a[i] = b[i] + s * c[i], the bandwidth reference of
 * bench/fusion_bench.py. Usage: stream_triad N REPS [THREADS]; prints
 * {"n": N, "threads": T, "best_s": ..., "median_s": ..., "gb_per_s": ...}
 * where bytes are 3 * 4 * N (two float32 reads, one write) over the best
 * time, as STREAM reports it (gb_per_s_median: over the median time).
 * THREADS (default 1) split the loop into equal contiguous parts, each
 * thread first touching its own part (as STREAM's OpenMP build does). */
#include <pthread.h>
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

struct part {
  float *a, *b, *c;
  long begin, end;
  float scalar;
  int init;
};

static void *run_part(void *arg) {
  struct part *p = arg;
  float *a = p->a, *b = p->b, *c = p->c, scalar = p->scalar;
  if (p->init) {
    for (long i = p->begin; i < p->end; ++i) {
      a[i] = 0.0f;
      b[i] = 1.0f;
      c[i] = 2.0f;
    }
    return NULL;
  }
  for (long i = p->begin; i < p->end; ++i)
    a[i] = b[i] + scalar * c[i];
  return NULL;
}

/* Runs the parts on `threads` threads (the caller takes part 0). */
static void run_all(struct part *parts, int threads) {
  pthread_t ids[64];
  for (int t = 1; t < threads; ++t)
    pthread_create(&ids[t], NULL, run_part, &parts[t]);
  run_part(&parts[0]);
  for (int t = 1; t < threads; ++t)
    pthread_join(ids[t], NULL);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 16L << 20;
  int reps = argc > 2 ? atoi(argv[2]) : 20;
  int threads = argc > 3 ? atoi(argv[3]) : 1;
  if (threads < 1 || threads > 64 || reps < 1 || n < 1)
    return 1;
  float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n),
        *c = malloc(sizeof(float) * n);
  double *times = malloc(sizeof(double) * reps);
  struct part parts[64];
  if (!a || !b || !c || !times)
    return 1;
  volatile float s = 3.0f;
  for (int t = 0; t < threads; ++t) {
    parts[t].a = a;
    parts[t].b = b;
    parts[t].c = c;
    parts[t].begin = n * t / threads;
    parts[t].end = n * (t + 1) / threads;
    parts[t].init = 1;
  }
  run_all(parts, threads);
  for (int r = 0; r < reps; ++r) {
    for (int t = 0; t < threads; ++t) {
      parts[t].scalar = s;
      parts[t].init = 0;
    }
    double t0 = now();
    run_all(parts, threads);
    times[r] = now() - t0;
    if (a[r % n] != 7.0f)
      return 2;
  }
  qsort(times, reps, sizeof(double), cmp);
  double median = times[reps / 2];
  printf("{\"n\": %ld, \"threads\": %d, \"best_s\": %.6g, \"median_s\": %.6g, "
         "\"gb_per_s\": %.4g, \"gb_per_s_median\": %.4g}\n",
         n, threads, times[0], median, 12.0 * (double)n / times[0] / 1e9,
         12.0 * (double)n / median / 1e9);
  return 0;
}
