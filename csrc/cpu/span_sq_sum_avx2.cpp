// AVX2 + FMA + F16C variant of the span kernels. Only this file is compiled for
// that ISA (via the pragma below, after every system header), and it is called
// only when the running CPU reports all three features.
#include "span_sq_sum_api.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <algorithm>

#include "stream_alias.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#define VITPLAST_SPAN_NS avx2
#include "span_sq_sum.h"

namespace vitplast {
namespace avx2 {
namespace {

// 8 elements -> 8 floats
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const unsigned short* p, BF16) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
inline __m256 load8(const unsigned short* p, F16) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <class L>
inline __m256 load8_as(const typename L::T* p) {
  if constexpr (sizeof(typename L::T) == 4) {
    return load8(reinterpret_cast<const float*>(p));
  } else {
    return load8(p, L{});
  }
}

// The 16 double lanes acc[0..15] as four 4-lane registers, and back: every kernel below keeps lane
// l of the span's sums in register l / 4 while it runs.
struct Lanes {
  __m256d s0, s1, s2, s3;
};
inline Lanes load_lanes(const double* acc) {
  return {_mm256_loadu_pd(acc), _mm256_loadu_pd(acc + 4), _mm256_loadu_pd(acc + 8),
          _mm256_loadu_pd(acc + 12)};
}
inline void store_lanes(const Lanes& l, double* acc) {
  _mm256_storeu_pd(acc, l.s0);
  _mm256_storeu_pd(acc + 4, l.s1);
  _mm256_storeu_pd(acc + 8, l.s2);
  _mm256_storeu_pd(acc + 12, l.s3);
}

// Adds (a - b)^2 of 8 elements into two double accumulators (low, high halves).
inline void accumulate8(__m256 va, __m256 vb, __m256d& lo, __m256d& hi) {
  __m256d dlo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(va)),
                              _mm256_cvtps_pd(_mm256_castps256_ps128(vb)));
  __m256d dhi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(va, 1)),
                              _mm256_cvtps_pd(_mm256_extractf128_ps(vb, 1)));
  lo = _mm256_fmadd_pd(dlo, dlo, lo);
  hi = _mm256_fmadd_pd(dhi, dhi, hi);
}

// Streams 2^28 bytes apart (stream_alias.h): b read through a copy on the stack, the same arithmetic
// in the same order, the same bits.
// Copies `bytes` (a multiple of 32) of b into the 32-byte aligned `dst`, 64 bytes per step, and keeps the
// compiler from reading b instead of the copy.
inline void copy_staged(char* dst, const char* src, long long bytes) {
  long long j = 0;
  for (; j + 64 <= bytes; j += 64) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j + 32));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + j), lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + j + 32), hi);
  }
  if (j < bytes) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + j),
                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j)));
  }
  keep_staged(dst);
}

template <class L>
void span_sq_sum_vec(const typename L::T* a, const typename L::T* b, long long n, double* acc) {
  static_assert(kLanes == 16, "lane layout below assumes 16 lanes");
  using T = typename L::T;
  Lanes s = load_lanes(acc);
  long long i = 0;
  if (streams_alias(a, b)) {
    constexpr long long kStage = kStageBytes / sizeof(T);
    alignas(32) T staged[kStage];
    for (; i + kStage <= n; i += kStage) {
      copy_staged(reinterpret_cast<char*>(staged), reinterpret_cast<const char*>(b + i), sizeof staged);
      for (long long j = 0; j < kStage; j += 16) {
        accumulate8(load8_as<L>(a + i + j), load8_as<L>(staged + j), s.s0, s.s1);
        accumulate8(load8_as<L>(a + i + j + 8), load8_as<L>(staged + j + 8), s.s2, s.s3);
      }
    }
  }
  for (; i + 16 <= n; i += 16) {
    accumulate8(load8_as<L>(a + i), load8_as<L>(b + i), s.s0, s.s1);
    accumulate8(load8_as<L>(a + i + 8), load8_as<L>(b + i + 8), s.s2, s.s3);
  }
  store_lanes(s, acc);
  span_sq_sum_scalar<L>(a + i, b + i, n - i, acc);
}

// Adds the 8 float lanes of f (converted exactly to double) into lo/hi.
inline void flush8(__m256 f, __m256d& lo, __m256d& hi) {
  lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
  hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
}

// 16-bit inputs: the float32 difference of two bf16/fp16 values is exact (but for operands more than
// 2^24 apart in magnitude, where it rounds by <= 2^-24 relative), so differences and squares run in
// float32 lanes, flushed into the double lanes every kFlush (float16) or kFlushBF16 (bfloat16)
// elements: <= 64 resp. 8 float32 additions per lane between flushes (relative rounding <= 64 * 2^-24
// ~ 4e-6 resp. 5e-7 worst case, far less typically). Half the instructions of the double path.
//
// Range: fp16 squares stay inside float32 (2^-48 to 2^34). bf16 has float32's exponent range: a
// float32 square overflows for differences above 2^64 and loses precision below 2^-63. So for bf16
// each flushed block is checked: every float32 lane sum must lie in [2^-60, 2^100] (then squares lost
// below float32's normal range, <= 8 * 2^-126 per lane, are negligible) or be the sum of exact zero
// differences (that test reads the block again, only when a lane sum is out of range: no OR per
// difference in the loop); otherwise the block is summed again on the double path (exact at any
// magnitude). Normal activations never leave the fast path; one decision per block, from the data
// alone: deterministic. Reading the block again only for such blocks rather than OR-ing every
// difference in the loop: ~10% less time per bfloat16 call in cache (16x197x768 pairs, 78 against
// 88-99 us on a 2-core Zen 4), the same decisions and bits.
constexpr long long kFlush = 1024;
constexpr long long kFlushBF16 = 256;

// True when the 8 lane sums of `f` are in range or (bitwise OR of their differences `z` == 0) exact 0.
inline bool lanes_trusted(__m256 f, __m256 z) {
  const __m256 in_range = _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(0x1p-60f), _CMP_GE_OQ),
                                        _mm256_cmp_ps(f, _mm256_set1_ps(0x1p100f), _CMP_LE_OQ));
  const __m256 zeros =
      _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_castps_si256(z), _mm256_setzero_si256()));
  return _mm256_movemask_ps(_mm256_or_ps(in_range, zeros)) == 0xff;
}

inline bool lanes_in_range(__m256 f) {
  const __m256 in_range = _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(0x1p-60f), _CMP_GE_OQ),
                                        _mm256_cmp_ps(f, _mm256_set1_ps(0x1p100f), _CMP_LE_OQ));
  return _mm256_movemask_ps(in_range) == 0xff;
}

// float16: 16 elements per step, lane l of the float lanes takes element 16k + l. Streams 2^28 bytes
// apart: b read 512 B at a time from a copy on the stack (span_sq_sum_vec), the same steps in the same
// order (the same bits). On the Zen 4 VM (bench.paired_offsets --dtype float16, 64x257x1280) pairs 2^28
// apart read at 68-69% of the floor without the copy against 106-113% elsewhere; with it 88-103% against
// 91-112% in the same runs (1 KB copies: 87-100%, alternated with 512 B ones: 97-103%).
template <class L>
void span_sq_sum_vec16(const typename L::T* a, const typename L::T* b, long long n, double* acc) {
  static_assert(kLanes == 16, "lane layout below assumes 16 lanes");
  using T = typename L::T;
  constexpr long long kStage = kStageBytes16 / sizeof(T);
  static_assert(kFlush % kStage == 0, "a staged part never straddles a flush");
  const bool stage = streams_alias(a, b);
  alignas(32) T staged[kStage];
  Lanes s = load_lanes(acc);
  long long i = 0;
  while (i + 16 <= n) {
    const long long stop = (n - i >= kFlush) ? i + kFlush : i + ((n - i) / 16) * 16;
    __m256 f0 = _mm256_setzero_ps(), f1 = _mm256_setzero_ps();
    while (i < stop) {
      const long long start = i, end = stage ? std::min(stop, start + kStage) : stop;
      const T* part_b = b + start;
      if (stage) {
        copy_staged(reinterpret_cast<char*>(staged), reinterpret_cast<const char*>(b + start),
                    (end - start) * static_cast<long long>(sizeof(T)));
        part_b = staged;
      }
      for (; i < end; i += 16) {
        __m256 d0 = _mm256_sub_ps(load8_as<L>(a + i), load8_as<L>(part_b + (i - start)));
        __m256 d1 = _mm256_sub_ps(load8_as<L>(a + i + 8), load8_as<L>(part_b + (i - start) + 8));
        f0 = _mm256_fmadd_ps(d0, d0, f0);
        f1 = _mm256_fmadd_ps(d1, d1, f1);
      }
    }
    flush8(f0, s.s0, s.s1);
    flush8(f1, s.s2, s.s3);
  }
  store_lanes(s, acc);
  span_sq_sum_scalar<L>(a + i, b + i, n - i, acc);
}

// bfloat16: 32 elements per step, read as 16 32-bit words per input. Word j holds elements 2j (low
// half) and 2j + 1 (high half); both are float32 numbers after one integer instruction each (shift
// left by 16; mask the low half off), so the conversion costs two instructions per 16 elements instead
// of two per 8 (widen, shift). Float lanes: even[j] takes element 2j of every step, odd[j] element
// 2j + 1. Every kFlushBF16 elements (8 fused multiply-adds per float lane) the lanes are checked and
// flushed into double lane j as (acc[j] + even[j]) + odd[j]; span_sq_sum_avx512.cpp keeps exactly
// this layout and order, so both give the same bits.
inline __m256 bf16_even(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
inline __m256 bf16_odd(__m256i w) {
  return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline __m256i load_words(const unsigned short* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

void span_sq_sum_bf16(const unsigned short* a, const unsigned short* b, long long n, double* acc) {
  static_assert(kLanes == 16, "lane layout below assumes 16 lanes");
  Lanes s = load_lanes(acc);
  const bool stage = streams_alias(a, b);  // b's block read from a copy on the stack (span_sq_sum_vec)
  alignas(32) unsigned short staged[kFlushBF16];
  long long i = 0;
  while (i + 32 <= n) {
    const long long start = i;
    const long long stop = (n - i >= kFlushBF16) ? i + kFlushBF16 : i + ((n - i) / 32) * 32;
    const unsigned short* block_b = b + start;
    if (stage) {
      copy_staged(reinterpret_cast<char*>(staged), reinterpret_cast<const char*>(b + start),
                  (stop - start) * static_cast<long long>(sizeof(unsigned short)));
      block_b = staged;
    }
    __m256 e0 = _mm256_setzero_ps(), e1 = _mm256_setzero_ps();  // even lanes 0-7, 8-15
    __m256 o0 = _mm256_setzero_ps(), o1 = _mm256_setzero_ps();  // odd lanes 0-7, 8-15
    for (; i < stop; i += 32) {
      const __m256i wa0 = load_words(a + i), wb0 = load_words(block_b + (i - start));
      const __m256i wa1 = load_words(a + i + 16), wb1 = load_words(block_b + (i - start) + 16);
      const __m256 de0 = _mm256_sub_ps(bf16_even(wa0), bf16_even(wb0));
      const __m256 do0 = _mm256_sub_ps(bf16_odd(wa0), bf16_odd(wb0));
      const __m256 de1 = _mm256_sub_ps(bf16_even(wa1), bf16_even(wb1));
      const __m256 do1 = _mm256_sub_ps(bf16_odd(wa1), bf16_odd(wb1));
      e0 = _mm256_fmadd_ps(de0, de0, e0);
      o0 = _mm256_fmadd_ps(do0, do0, o0);
      e1 = _mm256_fmadd_ps(de1, de1, e1);
      o1 = _mm256_fmadd_ps(do1, do1, o1);
    }
    bool trusted =
        lanes_in_range(e0) && lanes_in_range(o0) && lanes_in_range(e1) && lanes_in_range(o1);
    if (!trusted) {  // the zero test, only now: the block's bytes again (in L1), OR of its differences
      __m256 ze0 = _mm256_setzero_ps(), ze1 = _mm256_setzero_ps();
      __m256 zo0 = _mm256_setzero_ps(), zo1 = _mm256_setzero_ps();
      for (long long j = start; j < stop; j += 32) {
        const __m256i wa0 = load_words(a + j), wb0 = load_words(b + j);
        const __m256i wa1 = load_words(a + j + 16), wb1 = load_words(b + j + 16);
        ze0 = _mm256_or_ps(ze0, _mm256_sub_ps(bf16_even(wa0), bf16_even(wb0)));
        zo0 = _mm256_or_ps(zo0, _mm256_sub_ps(bf16_odd(wa0), bf16_odd(wb0)));
        ze1 = _mm256_or_ps(ze1, _mm256_sub_ps(bf16_even(wa1), bf16_even(wb1)));
        zo1 = _mm256_or_ps(zo1, _mm256_sub_ps(bf16_odd(wa1), bf16_odd(wb1)));
      }
      trusted = lanes_trusted(e0, ze0) && lanes_trusted(o0, zo0) && lanes_trusted(e1, ze1) &&
                lanes_trusted(o1, zo1);
    }
    if (!trusted) {
      store_lanes(s, acc);
      span_sq_sum_vec<BF16>(a + start, b + start, stop - start, acc);
      s = load_lanes(acc);
      continue;
    }
    flush8(e0, s.s0, s.s1);
    flush8(e1, s.s2, s.s3);
    flush8(o0, s.s0, s.s1);
    flush8(o1, s.s2, s.s3);
  }
  store_lanes(s, acc);
  span_sq_sum_scalar<BF16>(a + i, b + i, n - i, acc);
}

}  // namespace
}  // namespace avx2

void span_sq_sum_avx2_exact_bf16(const void* a, const void* b, long long n, double* acc) {
  avx2::span_sq_sum_vec<avx2::BF16>(static_cast<const unsigned short*>(a),
                                    static_cast<const unsigned short*>(b), n, acc);
}

void span_sq_sum_avx2(SpanDtype dtype, const void* a, const void* b, long long n, double* acc) {
  switch (dtype) {
    case SpanDtype::kFloat32:
      avx2::span_sq_sum_vec<avx2::F32>(static_cast<const float*>(a), static_cast<const float*>(b),
                                       n, acc);
      break;
    case SpanDtype::kBFloat16:
      avx2::span_sq_sum_bf16(static_cast<const unsigned short*>(a),
                             static_cast<const unsigned short*>(b), n, acc);
      break;
    case SpanDtype::kFloat16:
      avx2::span_sq_sum_vec16<avx2::F16>(static_cast<const unsigned short*>(a),
                                               static_cast<const unsigned short*>(b), n, acc);
      break;
  }
}

}  // namespace vitplast

#pragma GCC pop_options

#else  // not x86: the "avx2" entry is the generic loop

namespace vitplast {
void span_sq_sum_avx2(SpanDtype dtype, const void* a, const void* b, long long n, double* acc) {
  span_sq_sum_generic(dtype, a, b, n, acc);
}
}  // namespace vitplast

#endif
