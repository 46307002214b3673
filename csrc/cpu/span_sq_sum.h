// Hot loop of the CPU paired reduction: sum of squared differences over one
// contiguous run, accumulated into kLanes double lanes.
//
// This header is included *without any other header* by two translation units:
// span_sq_sum_generic.cpp (baseline x86-64) and span_sq_sum_avx2.cpp (compiled
// under `#pragma GCC target("avx2,fma,f16c")`). Everything here has internal
// linkage so the two ISA variants never merge (no illegal instruction on CPUs
// without AVX2). Differences are taken in double: exact for fp32/fp16/bf16.
#ifndef VITPLAST_SPAN_NS
#error "define VITPLAST_SPAN_NS before including span_sq_sum.h"
#endif

namespace vitplast {
namespace VITPLAST_SPAN_NS {
namespace {

constexpr int kLanes = 16;

inline float bf16_bits_to_float(unsigned short h) {
  unsigned int u = static_cast<unsigned int>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE half -> float without F16C: normals and subnormals by exponent rebias and
// a power-of-two multiply (exact), inf/nan by forcing the exponent.
inline float fp16_bits_to_float(unsigned short h) {
  unsigned int sign = (static_cast<unsigned int>(h) & 0x8000u) << 16;
  unsigned int mag = static_cast<unsigned int>(h) & 0x7fffu;
  unsigned int u = mag << 13;
  float f;
  if (mag >= 0x7c00u) {
    u |= 0x7f800000u;
    __builtin_memcpy(&f, &u, sizeof f);
  } else {
    __builtin_memcpy(&f, &u, sizeof f);
    f *= 5.192296858534828e+33f;  // 2^112: rebias exponent 15 -> 127
  }
  unsigned int r;
  __builtin_memcpy(&r, &f, sizeof r);
  r |= sign;
  __builtin_memcpy(&f, &r, sizeof f);
  return f;
}

struct F32 {
  using T = float;
  static inline double load(const T* p) { return static_cast<double>(*p); }
};
struct BF16 {
  using T = unsigned short;
  static inline double load(const T* p) { return static_cast<double>(bf16_bits_to_float(*p)); }
};
struct F16 {
  using T = unsigned short;
  static inline double load(const T* p) { return static_cast<double>(fp16_bits_to_float(*p)); }
};

template <class L>
inline void span_sq_sum_scalar(const typename L::T* a, const typename L::T* b, long long n,
                               double* acc) {
  long long i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      double d = L::load(a + i + l) - L::load(b + i + l);
      acc[l] += d * d;
    }
  }
  for (int l = 0; i < n; ++i, ++l) {
    double d = L::load(a + i) - L::load(b + i);
    acc[l] += d * d;
  }
}

}  // namespace
}  // namespace VITPLAST_SPAN_NS
}  // namespace vitplast
