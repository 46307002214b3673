// standalone driver: in-cache rate and DRAM rate of span kernels, 1 or N threads
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include "span_sq_sum_api.h"
using namespace vitplast;
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  const char* which = argc > 1 ? argv[1] : "auto";
  int dt = argc > 2 ? atoi(argv[2]) : 0;  // 0 f32, 1 bf16
  long long n = argc > 3 ? atoll(argv[3]) : 16384;  // elements per input
  int reps = argc > 4 ? atoi(argv[4]) : 1000;
  SpanSqSumFn fn = !strcmp(which, "avx2") ? span_sq_sum_avx2 : !strcmp(which, "generic") ? span_sq_sum_generic : span_sq_sum_avx512;
  size_t es = dt == 0 ? 4 : 2;
  char* a = (char*)aligned_alloc(64, n * es + 64); char* b = (char*)aligned_alloc(64, n * es + 64);
  for (long long i = 0; i < n; ++i) {
    float fa = (rand() / (float)RAND_MAX) - 0.5f, fb = (rand() / (float)RAND_MAX) - 0.5f;
    if (dt == 0) { ((float*)a)[i] = fa; ((float*)b)[i] = fb; }
    else { unsigned u; memcpy(&u, &fa, 4); ((unsigned short*)a)[i] = u >> 16; memcpy(&u, &fb, 4); ((unsigned short*)b)[i] = u >> 16; }
  }
  const long long kBlock = 1 << 15;
  long long nblk = (n + kBlock - 1) / kBlock;
  std::vector<double> part(nblk);
  double best = 1e30, s = 0;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
#pragma omp parallel for schedule(static)
    for (long long t = 0; t < nblk; ++t) {
      double acc[16] = {0};
      long long k0 = t * kBlock, k1 = std::min(n, k0 + kBlock);
      fn(dt == 0 ? SpanDtype::kFloat32 : SpanDtype::kBFloat16, a + k0 * es, b + k0 * es, k1 - k0, acc);
      double q = 0; for (int l = 0; l < 16; ++l) q += acc[l]; part[t] = q;
    }
    double t1 = now();
    for (double p : part) s += p;
    best = std::min(best, t1 - t0);
  }
  printf("%s dt=%d n=%lld best %.3f ms  %.2f GB/s  %.3f ns/elem-pair  (s=%g)\n", which, dt, n, best * 1e3, 2.0 * n * es / best / 1e9, best / n * 1e9, s);
}
