// interleaved A/B of old (vcur) and new (vnew) span kernels over DRAM-sized inputs, with read floors
#include <omp.h>
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
namespace vcur { enum class SpanDtype { kFloat32, kBFloat16, kFloat16 }; void span_sq_sum_avx512(SpanDtype, const void*, const void*, long long, double*); }
namespace vnew { enum class SpanDtype { kFloat32, kBFloat16, kFloat16 }; void span_sq_sum_avx512(SpanDtype, const void*, const void*, long long, double*); }
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
template <class F> double run_tasks(long long rows, long long K, long long es, const char* a, const char* b, F fn, std::vector<double>& part) {
  const long long kB = 1 << 15; long long nb = (K + kB - 1) / kB;
  part.resize(rows * nb);
  double t0 = now();
#pragma omp parallel for schedule(static)
  for (long long t = 0; t < rows * nb; ++t) {
    long long r = t / nb, k0 = (t % nb) * kB, k1 = std::min(K, k0 + kB);
    double acc[16] = {0};
    fn(a + (r * K + k0) * es, b + (r * K + k0) * es, k1 - k0, acc);
    double s = 0; for (int l = 0; l < 16; ++l) s += acc[l]; part[t] = s;
  }
  return now() - t0;
}
__attribute__((target("avx512f"))) double floor_read(const float* p, long long n) {
  double t0 = now(); float m = 0;
#pragma omp parallel reduction(max:m)
  { __m512 v = _mm512_set1_ps(-1e30f);
#pragma omp for schedule(static)
    for (long long i = 0; i < n; i += 16) v = _mm512_max_ps(v, _mm512_loadu_ps(p + i));
    m = std::max(m, _mm512_reduce_max_ps(v)); }
  volatile float sink = m; (void)sink; return now() - t0;
}
int main(int argc, char** argv) {
  int dt = atoi(argv[1]); long long rows = atoll(argv[2]), K = atoll(argv[3]); int rounds = atoi(argv[4]);
  long long es = dt == 0 ? 4 : 2, n = rows * K;
  char* a = (char*)aligned_alloc(64, n * es); char* b = (char*)aligned_alloc(64, n * es);
  for (long long i = 0; i < n * es / 2; ++i) { ((unsigned short*)a)[i] = 0x3f80 + (rand() & 0xff); ((unsigned short*)b)[i] = 0x3f80 + (rand() & 0x7f); }
  if (dt == 0) for (long long i = 0; i < n; ++i) { ((float*)a)[i] = rand() / 1e9f; ((float*)b)[i] = rand() / 1e9f; }
  long long fn_ = 64ll << 20; float* fl = (float*)aligned_alloc(64, fn_ * 4); for (long long i = 0; i < fn_; ++i) fl[i] = i;
  std::vector<double> p1, p2; std::vector<double> r_new, r_fl_old, r_fl_new; double so = 0, sn = 0;
  for (int r = 0; r < rounds; ++r) {
    const bool hot = getenv("HOT") != nullptr;
    auto OLD = [&](const char* x, const char* y, long long m, double* acc) { vcur::span_sq_sum_avx512((vcur::SpanDtype)dt, x, y, m, acc); };
    auto NEW = [&](const char* x, const char* y, long long m, double* acc) { vnew::span_sq_sum_avx512((vnew::SpanDtype)dt, x, y, m, acc); };
    if (hot) run_tasks(rows, K, es, a, b, OLD, p1); else floor_read(fl, fn_);
    double to = run_tasks(rows, K, es, a, b, [&](const char* x, const char* y, long long m, double* acc) { vcur::span_sq_sum_avx512((vcur::SpanDtype)dt, x, y, m, acc); }, p1);
    double tf = floor_read(fl, fn_) / (fn_ * 4.0) * (2.0 * n * es);
    if (hot) run_tasks(rows, K, es, a, b, NEW, p2); else floor_read(fl, fn_);
    double tn = run_tasks(rows, K, es, a, b, [&](const char* x, const char* y, long long m, double* acc) { vnew::span_sq_sum_avx512((vnew::SpanDtype)dt, x, y, m, acc); }, p2);
    r_new.push_back(to / tn); r_fl_old.push_back(tf / to); r_fl_new.push_back(tf / tn);
    so += to; sn += tn;
  }
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  printf("dt=%d %lldx%lld threads=%d: old/new time %.3f; %% floor old %.0f new %.0f; old %.2f GB/s new %.2f GB/s (mean)\n", dt, rows, K, omp_get_max_threads(), med(r_new), 100 * med(r_fl_old), 100 * med(r_fl_new), 2.0 * n * es * rounds / so / 1e9, 2.0 * n * es * rounds / sn / 1e9);
  double d = 0; for (size_t i = 0; i < p1.size(); ++i) d = std::max(d, std::abs(p1[i] - p2[i]) / p1[i]); printf("max rel diff old/new %g\n", d);
}
