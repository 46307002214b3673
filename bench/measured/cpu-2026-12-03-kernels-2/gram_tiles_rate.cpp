#include "gram_tiles.h"
#include <omp.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <random>
#include <chrono>
#include <algorithm>
using namespace vitplast;
#include <time.h>
static double now() { timespec ts; clock_gettime(getenv("WALL") ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
int main(int argc, char** argv) {
  long long n = 128, k = 98688; int reps = argc > 1 ? atoi(argv[1]) : 10; bool centred = argc > 2 && atoi(argv[2]);
  std::vector<float> x(n * k), anc(k);
  std::mt19937 g(1); std::normal_distribution<float> d;
  for (auto& v : x) v = d(g);
  for (auto& v : anc) v = d(g);
  std::vector<double> gram(n * n, 0.0);
  GramInput in{x.data(), n, k, k, centred ? anc.data() : nullptr};
  long long T = tile_count(n);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    auto t0 = now();
    #pragma omp parallel
    {
      int nt = omp_get_num_threads(), id = omp_get_thread_num();
      long long b = T * id / nt, e = T * (id + 1) / nt;
      gram_tiles_avx512(in, b, e, gram.data());
    }
    times.push_back((now() - t0));
  }
  std::sort(times.begin(), times.end());
  double flops = n * (n + 1) / 2.0 * k * 2;
  printf("median %.2f ms min %.2f ms  %.1f GF/s (tri)\n", times[reps / 2] * 1e3, times[0] * 1e3, flops / times[reps / 2] / 1e9);
  // check a few entries vs long double
  double worst = 0;
  for (int s = 0; s < 200; ++s) {
    long long i = (s * 37) % n, j = (s * 11) % n; if (j > i) std::swap(i, j);
    long double ref = 0, ni = 0, nj = 0;
    for (long long c = 0; c < k; ++c) {
      long double a = x[i * k + c] - (centred ? anc[c] : 0.f), b = x[j * k + c] - (centred ? anc[c] : 0.f);
      ref += a * b; ni += a * a; nj += b * b;
    }
    double e = std::abs((double)(gram[i * n + j] - ref)) / (double)(ni + nj);
    worst = std::max(worst, e);
  }
  printf("worst |dG|/(n_i+n_j) %.3e  (u=%.3e)\n", worst, 5.96e-8);
}
