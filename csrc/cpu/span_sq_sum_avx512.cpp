// AVX-512 variant of the float32 and bfloat16 span kernels. Only this file is compiled for AVX-512 (via
// the pragma below, after every system header), and it is called only when the running CPU reports
// AVX-512 F and DQ besides the AVX2 set. Lane layouts and orders of operations are the AVX2 kernels'
// (span_sq_sum_avx2.cpp), so the sums are bitwise the AVX2 variant's; float16 uses the AVX2 kernel.
//
// float32: lane l of the 16 double accumulators takes elements i + l, one FMA of the exact double
// difference per element (eight float32 -> double conversions per instruction, read straight from
// memory), the same scalar tail.
// bfloat16: 32 elements per 512-bit load pair, converted by one shift and one mask, subtracted and
// squared in float32 lanes, flushed into the double lanes every 256 elements; the zero test of the
// range check reads a block again only when its lane sums leave the range (same decisions, same bits
// as testing every step, without an OR per difference in the loop).
//
// Bound: on inputs larger than the last-level cache, memory reads. One core streams what its
// outstanding misses allow; on the 2-core Zen 4 VM of bench/measured/cpu-2026-12-03-paired one thread
// reads float32 pairs at the rate of a one-stream read-only reduction (~23 GB/s) and bfloat16 pairs
// at 86-92% of it, and halving the bfloat16 arithmetic (this layout, ~1.3x faster in L2) left that
// DRAM rate unchanged (0.97-0.98x, noise level): the two interleaved input streams set it, not the
// instructions. Against the loop a compiler writes for sum((a - b)^2) (float32 lanes, no exact
// differences; bench/measured/cpu-2026-12-03-kernels-2, stream2.cpp) on the same DRAM inputs in the
// same rounds, at one and two threads: float32 1.00-1.12x its rate, bfloat16 0.93-1.04x (centred on
// 1.0); both reach 0.80-0.96 of a two-stream read-only max. In L2 the arithmetic is the bound
// (float32 ~54 GB/s, bfloat16 ~51 GB/s per core): hence the shift-and-mask conversion and one
// conversion instruction per eight float32 elements.
// Tried on DRAM-sized float32 pairs (64x257x1280), each against this loop and an amax
// read of 256 MiB in the same interleaved rounds, 1 and 2 threads: four accumulators instead of two,
// float32 differences (half the conversions), software prefetch 4-16 KB ahead (T0/T1/T2), reading b's
// next 8-32 KB first (prefetch or a max pass) so that DRAM sees one stream at a time, and tasks of 8-64
// KB dealt to the threads in turn: none faster beyond noise (prefetch and the chunked passes 5-25%
// slower); this loop reads at the rate of a two-stream read-only max (0.97-1.02x) and of the amax
// floor at one thread (0.97-1.07x). When two threads' amax reaches 50-60 GB/s the two
// threads of this loop, each reading two streams, stay at about 23 GB/s per thread (91-96% of it).
#include "span_sq_sum_api.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include "stream_alias.h"

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

// Streams whose addresses agree in bits 6-27 (one input 2^28, 2^29, ... bytes after the other, within a
// cache line; stream_alias.h): on Zen 4 the L1 data cache tells its ways apart by a hash of those
// linear-address bits, so line k of a and line k of b, needed at the same time, cannot both stay in L1
// and the lines the prefetcher brings in evict each other. On the 2-core Zen 4 VM (bench.paired_offsets,
// 64x257x1280 float32 pairs carved out of one buffer, 2 threads): 22-25 GB/s at offsets 2^28, 2^29,
// 2^30 against 43-47 GB/s at 2^27, 3 * 2^27 or 2^28 + 4 KB; bfloat16 24 against 39 GB/s. The allocator
// produces such offsets (bench.compare's 64x257x1280 float32 row fell to 53-74% of the floor in 5 of 8
// runs of its section; in the one checked, y lay exactly 2^28 bytes from x), and so do halves of a
// batch whose half is a power of two bytes. For such streams b is copied 1 KB at a time
// into a buffer on the stack (in L1, at another address) and read from there: 38-42 GB/s at those
// offsets (bench/measured/cpu-2026-12-04-aliasing: 91-95% of the read
// floor against 72-74% before, bfloat16 96-101% against 52-54%). The arithmetic and its order are the
// same on both paths, so are the bits.
void span_sq_sum_f32(const float* a, const float* b, long long n, double* acc) {
  static_assert(kLanes == 16, "lane layout below assumes 16 lanes");
  __m512d s0 = _mm512_loadu_pd(acc), s1 = _mm512_loadu_pd(acc + 8);
  long long i = 0;
  if (streams_alias(a, b)) {
    constexpr long long kStage = kStageBytes / sizeof(float);
    alignas(64) float staged[kStage];
    for (; i + kStage <= n; i += kStage) {
      for (long long j = 0; j < kStage; j += 16) _mm512_store_ps(staged + j, _mm512_loadu_ps(b + i + j));
      keep_staged(staged);
      for (long long j = 0; j < kStage; j += 16) {
        const __m512d d0 = diff8(a + i + j, staged + j), d1 = diff8(a + i + j + 8, staged + j + 8);
        s0 = _mm512_fmadd_pd(d0, d0, s0);
        s1 = _mm512_fmadd_pd(d1, d1, s1);
      }
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m512d d0 = diff8(a + i, b + i), d1 = diff8(a + i + 8, b + i + 8);
    s0 = _mm512_fmadd_pd(d0, d0, s0);
    s1 = _mm512_fmadd_pd(d1, d1, s1);
  }
  _mm512_storeu_pd(acc, s0);
  _mm512_storeu_pd(acc + 8, s1);
  span_sq_sum_scalar<F32>(a + i, b + i, n - i, acc);
}

// bfloat16: the AVX2 kernel's layout (span_sq_sum_avx2.cpp, span_sq_sum_bf16) in 16-lane registers:
// one 512-bit load gives the 16 words of a 32-element step; even lanes 0-15 in one register, odd
// lanes 0-15 in another, the same range check and flush order, the same double-path fallback.
constexpr long long kFlushBF16 = 256;  // must equal span_sq_sum_avx2.cpp's

inline __m512 bf16_even(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
inline __m512 bf16_odd(__m512i w) {
  return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// True when every lane sum of `f` lies in [2^-60, 2^100].
inline bool lanes_in_range(__m512 f) {
  return static_cast<__mmask16>(_mm512_cmp_ps_mask(f, _mm512_set1_ps(0x1p-60f), _CMP_GE_OQ) &
                                _mm512_cmp_ps_mask(f, _mm512_set1_ps(0x1p100f), _CMP_LE_OQ)) == 0xffff;
}

// True when every lane sum of `f` is in range or its differences `z` (bitwise OR) are all 0.
inline bool lanes_trusted(__m512 f, __m512 z) {
  const __mmask16 in_range = _mm512_cmp_ps_mask(f, _mm512_set1_ps(0x1p-60f), _CMP_GE_OQ) &
                             _mm512_cmp_ps_mask(f, _mm512_set1_ps(0x1p100f), _CMP_LE_OQ);
  const __mmask16 zeros = _mm512_cmpeq_epi32_mask(_mm512_castps_si512(z), _mm512_setzero_si512());
  return static_cast<__mmask16>(in_range | zeros) == 0xffff;
}

// The bitwise OR of every even (ze) and odd (zo) lane's float32 differences over [i, stop): the zero
// test of the range check, computed only for a block whose lane sums leave the range (identical rows,
// extreme magnitudes), again over the block's 1 KB, still in L1.
inline void block_diff_or(const unsigned short* a, const unsigned short* b, long long i,
                          long long stop, __m512& ze, __m512& zo) {
  ze = _mm512_setzero_ps();
  zo = _mm512_setzero_ps();
  for (; i < stop; i += 32) {
    const __m512i wa = _mm512_loadu_si512(a + i), wb = _mm512_loadu_si512(b + i);
    ze = _mm512_or_ps(ze, _mm512_sub_ps(bf16_even(wa), bf16_even(wb)));
    zo = _mm512_or_ps(zo, _mm512_sub_ps(bf16_odd(wa), bf16_odd(wb)));
  }
}

// Adds the 16 float lanes of f (exactly converted to double) into lo (lanes 0-7) and hi (8-15).
inline void flush16(__m512 f, __m512d& lo, __m512d& hi) {
  lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
  hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1)));
}

void span_sq_sum_bf16(const unsigned short* a, const unsigned short* b, long long n, double* acc) {
  static_assert(kLanes == 16, "lane layout below assumes 16 lanes");
  __m512d s0 = _mm512_loadu_pd(acc), s1 = _mm512_loadu_pd(acc + 8);
  // see span_sq_sum_f32: b's block (512 B) read from a copy on the stack; staging 1 KB (two blocks)
  // at a time instead was slower on aliased inputs (21-22 against 28-31 GB/s)
  const bool stage = streams_alias(a, b);
  alignas(64) unsigned short staged[kFlushBF16];
  long long i = 0;
  while (i + 32 <= n) {
    const long long start = i;
    const long long stop = (n - i >= kFlushBF16) ? i + kFlushBF16 : i + ((n - i) / 32) * 32;
    const unsigned short* block_b = b + start;
    if (stage) {
      for (long long j = 0; j < stop - start; j += 32) {
        _mm512_store_si512(staged + j, _mm512_loadu_si512(b + start + j));
      }
      keep_staged(staged);
      block_b = staged;
    }
    __m512 fe = _mm512_setzero_ps(), fo = _mm512_setzero_ps();
    for (; i < stop; i += 32) {
      const __m512i wa = _mm512_loadu_si512(a + i), wb = _mm512_loadu_si512(block_b + (i - start));
      const __m512 de = _mm512_sub_ps(bf16_even(wa), bf16_even(wb));
      const __m512 dodd = _mm512_sub_ps(bf16_odd(wa), bf16_odd(wb));
      fe = _mm512_fmadd_ps(de, de, fe);
      fo = _mm512_fmadd_ps(dodd, dodd, fo);
    }
    bool trusted = lanes_in_range(fe) && lanes_in_range(fo);
    if (!trusted) {
      __m512 ze, zo;
      block_diff_or(a, b, start, stop, ze, zo);
      trusted = lanes_trusted(fe, ze) && lanes_trusted(fo, zo);
    }
    if (!trusted) {
      _mm512_storeu_pd(acc, s0);
      _mm512_storeu_pd(acc + 8, s1);
      span_sq_sum_avx2_exact_bf16(a + start, b + start, stop - start, acc);
      s0 = _mm512_loadu_pd(acc), s1 = _mm512_loadu_pd(acc + 8);
      continue;
    }
    flush16(fe, s0, s1);
    flush16(fo, s0, s1);
  }
  _mm512_storeu_pd(acc, s0);
  _mm512_storeu_pd(acc + 8, s1);
  span_sq_sum_scalar<BF16>(a + i, b + i, n - i, acc);
}

}  // namespace
}  // namespace avx512

void span_sq_sum_avx512(SpanDtype dtype, const void* a, const void* b, long long n, double* acc) {
  if (dtype == SpanDtype::kFloat32) {
    avx512::span_sq_sum_f32(static_cast<const float*>(a), static_cast<const float*>(b), n, acc);
  } else if (dtype == SpanDtype::kBFloat16) {
    avx512::span_sq_sum_bf16(static_cast<const unsigned short*>(a),
                             static_cast<const unsigned short*>(b), n, acc);
  } else {
    span_sq_sum_avx2(dtype, a, b, n, acc);
  }
}

}  // namespace vitplast

#pragma GCC diagnostic pop
#pragma GCC pop_options

#endif  // x86: elsewhere nothing refers to span_sq_sum_avx512 (span_sq_sum_select.cpp)
