// Two input streams whose linear addresses agree in bits 6-27 (one input a multiple of 2^28 bytes from
// the other, to within a cache line or two): AMD's L1 data caches tell their ways apart by a hash of
// linear-address bits 12-27 (Zen 4 measured: span_sq_sum_avx512.cpp), so line k of a and line k of b,
// read together, cannot both stay in L1 and the lines the prefetcher brings in evict each other. The
// span kernels then read b through a copy on the stack. Plain C++ (no intrinsics): included by every
// ISA variant before its target pragma.
#pragma once

#include <cstdint>

namespace vitplast {

constexpr std::uintptr_t kAliasPeriod = std::uintptr_t{1} << 28;
constexpr std::uintptr_t kAliasSlack = 128;  // two cache lines either way
constexpr long long kStageBytes = 1024;      // float32: b copied 1 KB at a time
constexpr long long kStageBytes16 = 512;     // float16: 512 B at a time (slightly ahead of 1 KB, measured)

inline bool streams_alias(const void* a, const void* b) {
  const std::uintptr_t d =
      (reinterpret_cast<std::uintptr_t>(a) - reinterpret_cast<std::uintptr_t>(b)) & (kAliasPeriod - 1);
  return d < kAliasSlack || d > kAliasPeriod - kAliasSlack;
}

// Keeps the compiler from reading b instead of the staged copy at `p` (the copy is the point).
inline void keep_staged(const void* p) { __asm__ volatile("" : : "r"(p) : "memory"); }

}  // namespace vitplast
