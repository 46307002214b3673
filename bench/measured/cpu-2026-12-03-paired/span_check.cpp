#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <random>
#include "span_sq_sum_api.h"
using namespace vitplast;
static unsigned short tobf(float f) { unsigned u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return u >> 16; }
static float frombf(unsigned short h) { unsigned u = (unsigned)h << 16; float f; memcpy(&f, &u, 4); return f; }
int main() {
  std::mt19937_64 g(1);
  std::normal_distribution<float> N;
  int bad = 0; double worst = 0;
  for (int t = 0; t < 3000; ++t) {
    long long n = g() % 5000 + 1;
    int mode = t % 6;
    std::vector<unsigned short> a(n + 40), b(n + 40);
    int off = g() % 20;
    for (long long i = 0; i < n + 40; ++i) {
      double sc = mode == 0 ? 1 : mode == 1 ? 1e-30 : mode == 2 ? 1e30 : mode == 3 ? ((i / 300) % 2 ? 1e-39 : 1) : mode == 4 ? 1 : ((i/700)%3==0 ? 1e20 : 1e-20);
      float x = N(g) * sc, y = N(g) * sc;
      a[i] = tobf(x); b[i] = mode == 4 && (i / 256) % 2 ? a[i] : tobf(y);
    }
    double acc1[16] = {0}, acc2[16] = {0};
    span_sq_sum_avx2(SpanDtype::kBFloat16, a.data() + off, b.data() + off, n, acc1);
    span_sq_sum_avx512(SpanDtype::kBFloat16, a.data() + off, b.data() + off, n, acc2);
    if (memcmp(acc1, acc2, sizeof acc1)) { ++bad; }
    long double ref = 0; double s = 0;
    for (long long i = 0; i < n; ++i) { long double d = (long double)frombf(a[off + i]) - frombf(b[off + i]); ref += d * d; }
    for (int l = 0; l < 16; ++l) s += acc1[l];
    if (ref > 0) { double e = fabsl((s - ref) / ref); if (e > worst) worst = e; if (e > 1e-6) printf("mode %d n %lld err %g\n", mode, n, e); }
  }
  printf("bitwise mismatches %d, worst rel err of sums %g\n", bad, worst);
}
