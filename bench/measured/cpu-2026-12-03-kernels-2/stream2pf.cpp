// Read floors against the span kernels, one or more threads, interleaved rounds:
//   floor1: max over one float32 stream of B bytes; floor2: max over two streams of B/2 bytes each
//   (the paired op's access pattern); span: span_sq_sum_avx512 over the two streams in 32768-element
//   tasks (pair_sq_distances_cpu.cpp's blocks), float32 or bfloat16.
// ./stream2 MB dtype(f32|bf16) rounds ; OMP_NUM_THREADS sets threads. Prints medians of per-round
// GB/s ratios span/floor1, span/floor2, floor2/floor1.
#include <immintrin.h>
#include <omp.h>
#include <time.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "span_sq_sum_api.h"
using namespace vitplast;
static double now() { timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
__attribute__((target("avx512f"))) static float max1(const float* p, long n) {
  __m512 m0 = _mm512_set1_ps(-1e30f), m1 = m0;
  for (long i = 0; i < n; i += 32) { m0 = _mm512_max_ps(m0, _mm512_loadu_ps(p + i)); m1 = _mm512_max_ps(m1, _mm512_loadu_ps(p + i + 16)); }
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}
__attribute__((target("avx512f"))) static float max2(const float* a, const float* b, long n) {
  __m512 m0 = _mm512_set1_ps(-1e30f), m1 = m0;
  for (long i = 0; i < n; i += 16) { m0 = _mm512_max_ps(m0, _mm512_loadu_ps(a + i)); m1 = _mm512_max_ps(m1, _mm512_loadu_ps(b + i)); }
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}
static long kPf = getenv("PF") ? atol(getenv("PF")) : 0;
// the loop a compiler writes for sum((a - b)^2) in float32 lanes (no exact differences, no float64)
__attribute__((target("avx512f,avx512bw"))) static double minimal(bool bf, const char* a, const char* b, long n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  long i = 0;
  if (bf) {
    const unsigned short* pa = (const unsigned short*)a; const unsigned short* pb = (const unsigned short*)b;
    for (; i + 32 <= n; i += 32) {
      if (kPf) { _mm_prefetch((const char*)(pa + i) + kPf, _MM_HINT_T0); _mm_prefetch((const char*)(pb + i) + kPf, _MM_HINT_T0); }
      __m512i va = _mm512_loadu_si512(pa + i), vb = _mm512_loadu_si512(pb + i);
      __m512 a0 = _mm512_castsi512_ps(_mm512_slli_epi32(va, 16)), b0 = _mm512_castsi512_ps(_mm512_slli_epi32(vb, 16));
      __m512 a1 = _mm512_castsi512_ps(_mm512_and_si512(va, _mm512_set1_epi32(0xFFFF0000)));
      __m512 b1 = _mm512_castsi512_ps(_mm512_and_si512(vb, _mm512_set1_epi32(0xFFFF0000)));
      __m512 d0 = _mm512_sub_ps(a0, b0), d1 = _mm512_sub_ps(a1, b1);
      s0 = _mm512_fmadd_ps(d0, d0, s0); s1 = _mm512_fmadd_ps(d1, d1, s1);
    }
  } else {
    const float* pa = (const float*)a; const float* pb = (const float*)b;
    for (; i + 32 <= n; i += 32) {
      if (kPf) { _mm_prefetch((const char*)(pa + i) + kPf, _MM_HINT_T0); _mm_prefetch((const char*)(pb + i) + kPf, _MM_HINT_T0);
                 _mm_prefetch((const char*)(pa + i) + kPf + 64, _MM_HINT_T0); _mm_prefetch((const char*)(pb + i) + kPf + 64, _MM_HINT_T0); }
      __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(pa + i), _mm512_loadu_ps(pb + i));
      __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(pa + i + 16), _mm512_loadu_ps(pb + i + 16));
      s0 = _mm512_fmadd_ps(d0, d0, s0); s1 = _mm512_fmadd_ps(d1, d1, s1);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
static double med(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static double q(std::vector<double> v, int k) { std::sort(v.begin(), v.end()); return v[v.size() * k / 4]; }
int main(int argc, char** argv) {
  long mb = atol(argv[1]); bool bf = !strcmp(argv[2], "bf16"); int rounds = atoi(argv[3]);
  long bytes = mb << 20, esz = bf ? 2 : 4, nel = bytes / 2 / esz;  // elements per stream
  char* a = (char*)aligned_alloc(64, bytes / 2); char* b = (char*)aligned_alloc(64, bytes / 2);
  float* big = (float*)aligned_alloc(64, 256L << 20); long nbig = (256L << 20) / 4;
  for (long i = 0; i < nel; ++i) {  // values in [0.5, 1.5): no range fallback in the bfloat16 kernel
    float fa = 0.5f + (float)((i * 7919) % 1000) / 1000.f, fb = 0.5f + (float)((i * 104729) % 997) / 997.f;
    if (bf) { unsigned ua, ub; memcpy(&ua, &fa, 4); memcpy(&ub, &fb, 4);
      ((unsigned short*)a)[i] = ua >> 16; ((unsigned short*)b)[i] = ub >> 16; }
    else { ((float*)a)[i] = fa; ((float*)b)[i] = fb; }
  }
  for (long i = 0; i < nbig; ++i) big[i] = 1.0f;
  const long task = 32768; long ntask = (nel + task - 1) / task;
  std::vector<double> r1, r2, r21, rm, rmf; volatile double sink = 0;
  for (int r = 0; r < rounds; ++r) {
    double t0 = now();
    #pragma omp parallel
    { int nt = omp_get_num_threads(), id = omp_get_thread_num(); long per = nbig / nt / 32 * 32;
      sink = sink + max1(big + id * per, per); }
    double f1 = (256L << 20) / (now() - t0);
    t0 = now();
    #pragma omp parallel
    { int nt = omp_get_num_threads(), id = omp_get_thread_num(); long per = nbig / 2 / nt / 16 * 16;
      sink = sink + max2(big + id * per, big + nbig / 2 + id * per, per); }
    double f2 = (256L << 20) / (now() - t0);
    t0 = now();
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < ntask; ++t) {
      double acc[16] = {0};
      long k0 = t * task, n = std::min(nel, k0 + task) - k0;
      span_sq_sum_avx512(bf ? SpanDtype::kBFloat16 : SpanDtype::kFloat32, a + k0 * esz, b + k0 * esz, n, acc);
      sink = sink + acc[0];
    }
    double s = bytes / (now() - t0);
    t0 = now();
    #pragma omp parallel
    { int nt = omp_get_num_threads(), id = omp_get_thread_num(); long per = nbig / nt / 32 * 32;
      sink = sink + max1(big + id * per, per); }
    double f1b = (256L << 20) / (now() - t0);
    t0 = now();
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < ntask; ++t) {
      long k0 = t * task, n = std::min(nel, k0 + task) - k0;
      sink = sink + minimal(bf, a + k0 * esz, b + k0 * esz, n);
    }
    double m = bytes / (now() - t0);
    rm.push_back(s / m); rmf.push_back(m / f1b);
    r1.push_back(s / f1); r2.push_back(s / f2); r21.push_back(f2 / f1);
    if (r == rounds - 1) printf("last round GB/s: floor1 %.1f floor2 %.1f span %.1f\n", f1 / 1e9, f2 / 1e9, s / 1e9);
  }
  printf("%ld MB %s threads %d: span/floor1 %.3f  span/floor2 %.3f  floor2/floor1 %.3f  span/minimal %.3f [%.3f-%.3f]  minimal/floor1 %.3f\n", mb, argv[2],
         omp_get_max_threads(), med(r1), med(r2), med(r21), med(rm), q(rm, 1), q(rm, 3), med(rmf));
}
