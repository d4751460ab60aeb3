/* The fast paths of a preloaded malloc, without the harness around them
 * (issue 18, BENCHMARKS.md "Session 15"): ns per malloc/free pair, best of
 * five rounds, for
 *   pair: malloc(16) then free of it, 20 M times (LIFO: always the fast path);
 *   ws:   a working set of 5000 blocks, each step frees a random one and
 *         allocates a Pareto size up to 1 KiB in its place (alloc-test's
 *         pattern), writing the block's first word and checking it at free;
 *   ws16: the same with every size 16;
 *   same: the same with every size 16 and always the first block (a free,
 *         then a malloc that can take what the free gave back);
 *   wspow: ws with each size drawn by `pow` between the free and the malloc,
 *         as the harness's alloc-test does (BENCHMARKS.md, session 17: the
 *         gap to mimalloc grows there; `lifo-floor.c` is the same loop over
 *         a toy allocator).
 *
 *   cc -O2 -o /tmp/malloc-pair harness/scripts/malloc-pair.c -lm
 *   LD_PRELOAD=target/release/libkmm_malloc.so KMM_SLUB_FRONT=sheaves /tmp/malloc-pair
 *   LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2 /tmp/malloc-pair
 *
 * Run the allocators alternately and compare ratios: the machine drifts.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static uint64_t x = 88172645463325252ull;
static inline uint64_t rnd(void) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

/* alloc-test's size: Pareto (shape 1.2) in 8..=1024, from the top 20 bits. */
static inline size_t pareto(uint64_t bits) {
  double u = ((bits >> 44) + 1) / (double)(1 << 20);
  size_t s = (size_t)(8.0 / pow(u, 1 / 1.2));
  return s > 1024 ? 1024 : s;
}

enum { SET = 5000, SIZES = 1 << 16 };
static void *set[SET];
/* Drawn up front, so that every allocator pays the same for its sizes. */
static unsigned short sizes[SIZES];

int main(void) {
  const long pairs = 20000000, steps = 2000000;
  void *volatile sink;
  double pair = 1e30, ws = 1e30;
  long bad = 0;
  for (int r = 0; r < 5; r++) {
    double t0 = now();
    for (long i = 0; i < pairs; i++) {
      void *p = malloc(16);
      sink = p;
      free(p);
    }
    double t = (now() - t0) / pairs;
    pair = t < pair ? t : pair;
  }
  for (int i = 0; i < SIZES; i++)
    sizes[i] = pareto(rnd());
  for (int i = 0; i < SET; i++) {
    set[i] = malloc(16);
    *(uintptr_t *)set[i] = (uintptr_t)set[i];
  }
  /* mode 0: ws, 1: ws16, 2: same, 3: wspow */
  double best[4] = {1e30, 1e30, 1e30, 1e30};
  for (int mode = 0; mode < 4; mode++) {
    for (int r = 0; r < 5; r++) {
      double t0 = now();
      for (long i = 0; i < steps; i++) {
        uint64_t y = rnd();
        unsigned k = mode == 2 ? 0 : (y >> 20) % SET;
        bad += *(uintptr_t *)set[k] != (uintptr_t)set[k];
        free(set[k]);
        size_t sz;
        if (mode == 3) {
          sz = pareto(y);
        } else {
          sz = mode ? 16 : sizes[(y >> 40) & (SIZES - 1)];
        }
        void *p = malloc(sz);
        *(uintptr_t *)p = (uintptr_t)p;
        set[k] = p;
      }
      double t = (now() - t0) / steps;
      best[mode] = t < best[mode] ? t : best[mode];
    }
  }
  ws = best[0];
  for (int i = 0; i < SET; i++)
    free(set[i]);
  (void)sink;
  printf("pair %.2f ns  ws %.2f ns  ws16 %.2f ns  same %.2f ns  wspow %.2f ns\n", pair, ws,
         best[1], best[2], best[3]);
  if (bad) {
    fprintf(stderr, "%ld blocks overwritten\n", bad);
    return 1;
  }
  return 0;
}
