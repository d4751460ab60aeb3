/* The floor of alloc-test's loop (malloc-pair's `wspow` mode) for a LIFO
 * allocator with no checks, no CPU guard and no library call: a stack of
 * pre-carved blocks per power-of-two class, in this binary (issue 18,
 * BENCHMARKS.md "Session 17"). `lifo` pops what the last free of the class
 * pushed; `split` pops from one stack and pushes to another, swapping them
 * when the first runs dry (mimalloc's `free` / `local_free` split), which
 * breaks the chain from a free to the next malloc through the stack but
 * hands out colder blocks.
 *
 *   cc -O2 -o /tmp/lifo-floor harness/scripts/lifo-floor.c -lm && /tmp/lifo-floor
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

static uint64_t x;
static inline uint64_t rnd(void) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

/* Classes 8, 16, ..., 1024 bytes; BLOCKS blocks each. */
enum { SET = 5000, CLASSES = 8, BLOCKS = 20000 };
static struct {
  void **pop, **push;
  long npop, npush;
} stk[CLASSES];
static unsigned char class_of[1025];
static void *set[SET];
static int set_class[SET];
static int split;

static inline void *toy_malloc(int c) {
  if (split && stk[c].npop == 0) {
    void **t = stk[c].pop;
    stk[c].pop = stk[c].push;
    stk[c].push = t;
    stk[c].npop = stk[c].npush;
    stk[c].npush = 0;
  }
  return stk[c].pop[--stk[c].npop];
}

static inline void toy_free(void *p, int c) {
  if (split)
    stk[c].push[stk[c].npush++] = p;
  else
    stk[c].pop[stk[c].npop++] = p;
}

int main(void) {
  for (int s = 0; s <= 1024; s++) {
    int c = 0;
    for (size_t v = 8; v < (size_t)s; v <<= 1)
      c++;
    class_of[s] = c;
  }
  for (int c = 0; c < CLASSES; c++) {
    size_t bytes = (size_t)8 << c;
    char *m = aligned_alloc(64, bytes * BLOCKS);
    stk[c].pop = malloc(2 * BLOCKS * sizeof(void *));
    stk[c].push = malloc(2 * BLOCKS * sizeof(void *));
    if (!m || !stk[c].pop || !stk[c].push)
      return 1;
    for (int i = 0; i < BLOCKS; i++)
      stk[c].pop[stk[c].npop++] = m + i * bytes;
  }
  const long steps = 4000000;
  long bad = 0;
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 3; round++) {
    for (split = 0; split < 2; split++) {
      x = 88172645463325252ull;
      for (int i = 0; i < SET; i++) {
        set_class[i] = class_of[16];
        set[i] = toy_malloc(set_class[i]);
        *(uintptr_t *)set[i] = (uintptr_t)set[i];
      }
      double t0 = now();
      for (long i = 0; i < steps; i++) {
        uint64_t y = rnd();
        unsigned k = (y >> 20) % SET;
        bad += *(uintptr_t *)set[k] != (uintptr_t)set[k];
        toy_free(set[k], set_class[k]);
        double u = ((y >> 44) + 1) / (double)(1 << 20);
        size_t sz = (size_t)(8.0 / pow(u, 1 / 1.2));
        sz = sz > 1024 ? 1024 : sz;
        int c = class_of[sz];
        void *p = toy_malloc(c);
        *(uintptr_t *)p = (uintptr_t)p;
        set[k] = p;
        set_class[k] = c;
      }
      double t = (now() - t0) / steps;
      best[split] = t < best[split] ? t : best[split];
      for (int i = 0; i < SET; i++)
        toy_free(set[i], set_class[i]);
      /* Everything back on the pop stacks for the next run. */
      for (int c = 0; c < CLASSES; c++)
        while (stk[c].npush)
          stk[c].pop[stk[c].npop++] = stk[c].push[--stk[c].npush];
    }
  }
  printf("wspow floor: lifo %.2f ns  split %.2f ns (best of 3)\n", best[0], best[1]);
  if (bad) {
    fprintf(stderr, "%ld blocks overwritten\n", bad);
    return 1;
  }
  return 0;
}
