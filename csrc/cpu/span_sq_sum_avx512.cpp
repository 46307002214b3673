// AVX-512 variant of the float32 span kernel. Only this file is compiled for AVX-512 (via the pragma
// below, after every system header), and it is called only when the running CPU reports AVX-512 F and
// DQ besides the AVX2 set. The float32 -> double conversions bound the AVX2 kernel (four per
// instruction, two instructions per element pair of eight); here one instruction converts eight, read
// straight from memory. Lane layout and order of operations are the AVX2 kernel's: lane l of the 16
// double accumulators takes elements i + l, one FMA of the exact double difference per element, the
// same scalar tail; so the sums are bitwise the AVX2 variant's. 16-bit inputs use the AVX2 kernels
// (float32 lanes, already at the memory bound).
#include "span_sq_sum_api.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma,f16c")
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own _mm512_undefined (a false positive)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define VITPLAST_SPAN_NS avx512
#include "span_sq_sum.h"

namespace vitplast {
namespace avx512 {
namespace {

inline __m512d diff8(const float* a, const float* b) {
  return _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a)), _mm512_cvtps_pd(_mm256_loadu_ps(b)));
}

void span_sq_sum_f32(const float* a, const float* b, long long n, double* acc) {
  static_assert(kLanes == 16, "lane layout below assumes 16 lanes");
  __m512d s0 = _mm512_loadu_pd(acc), s1 = _mm512_loadu_pd(acc + 8);
  long long i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512d d0 = diff8(a + i, b + i), d1 = diff8(a + i + 8, b + i + 8);
    s0 = _mm512_fmadd_pd(d0, d0, s0);
    s1 = _mm512_fmadd_pd(d1, d1, s1);
  }
  _mm512_storeu_pd(acc, s0);
  _mm512_storeu_pd(acc + 8, s1);
  span_sq_sum_scalar<F32>(a + i, b + i, n - i, acc);
}

}  // namespace
}  // namespace avx512

void span_sq_sum_avx512(SpanDtype dtype, const void* a, const void* b, long long n, double* acc) {
  if (dtype == SpanDtype::kFloat32) {
    avx512::span_sq_sum_f32(static_cast<const float*>(a), static_cast<const float*>(b), n, acc);
  } else {
    span_sq_sum_avx2(dtype, a, b, n, acc);
  }
}

}  // namespace vitplast

#pragma GCC diagnostic pop
#pragma GCC pop_options

#endif  // x86: elsewhere nothing refers to span_sq_sum_avx512 (span_sq_sum_select.cpp)
