// What this x86 CPU supports, asked of the compiler's CPU detection (false elsewhere): the span
// kernels' variant choice (span_sq_sum_select.cpp) and the all-pairs tile Gram (gram_lower_cpu.cpp)
// read the same answers.
#pragma once

namespace vitplast {

// AVX2 with FMA and F16C: the AVX2 span kernel.
inline bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

// AVX-512 F and DQ: the AVX-512 span kernel and the tile Gram.
inline bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

}  // namespace vitplast
