// AVX-512 lower-triangle Gram of float32 rows for all pairs: G[i][j] = sum_k y[i][k] y[j][k] for
// j <= i (rounded up to 4x4 tiles), y = x or x - anchor, in float64 (gram_tiles.h).
//
// Register tile: 4 rows i x 4 rows j, 16 float32 accumulators of 16 lanes; each step of 16 columns
// loads 4 + 4 row vectors (straight from the rows: no packing or transposition, since both operands
// of a Gram are rows) and issues 16 FMAs. Lane l of an accumulator takes columns k = l mod 16 of a
// block of kBlockCols columns, in column order; at the block's end the 16 lanes are summed in float32
// by a fixed tree (the same four levels for every tile, see reduce16) and the block's sum is added in
// float64. So each Gram entry is a float64 sum of per-block float32 sums, each block sum being 16
// sequential lane sums of kBlockCols / 16 products followed by a 16-leaf tree: the split-K error
// model of vitplast_kernels.ops.all_pairs with L = kBlockCols, S = ceil(K / L). Every tile's
// arithmetic depends only on x and the tile, not on which thread computes it: bitwise repeatable
// across thread counts and processes.
//
// Bound: the FMA pipes. The triangle is cut at 4-row granularity (the diagonal tiles compute 16 entries
// for 10), so the work is ~(N/4)(N/4+1)/2 * 16 * K FMAs, 2.3% over the triangle's at N = 128 (the BLAS
// path multiplied 3/4 of the full square). 8 loads per 16 FMAs keep the load ports under the FMA rate; one
// block of the rows a thread touches (N * kBlockCols * 4 bytes = 256 KiB at N = 128) stays in its L2 while
// every tile of that block runs, and the next block of every row the thread reads is prefetched into L2
// while the current one is used, so DRAM reads (each input element once per thread) overlap the arithmetic
// (prefetching only a thread's own diagonal rows was 5% slower at two threads: the other rows came from
// DRAM on demand, since Zen 4's L3 holds L2 victims only). Measured on the 2-core Zen 4 VM
// (bench/measured/cpu-2026-12-03-kernels-2, one thread, CPU time): 128 x 98688 float32 in 20-23 ms, 70-80
// GFLOP/s on the triangle's FLOPs, 1.1-1.2x the torch.mm (MKL) rate of a 1024^2 product on the same core;
// the whole all-pairs call takes 25-30 ms with it, 40-64 ms on the BLAS path (3/4 of the square through
// bmm, float64 sums of chunk products). Without hardware counters the share of peak is not known; 512 vs
// 1024 columns per block and the L2 prefetch each moved the time by 2-4% on one thread. Two threads, CPU
// time of the slower one (what the wall time would be on an idle machine): 14.1-14.5 ms (random rows),
// 15.8-19.3 ms (with the anchor), 1.7x one thread.
#include "gram_tiles.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <algorithm>
#include <vector>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace vitplast {
namespace {

// Sums each of the 16 accumulators' lanes: lane p of the result is the total of accumulator
// kReducedAcc[p]. Fixed shuffle/add tree (same order for every call).
inline __m512 reduce16(const __m512* acc) {
  __m512 s[8], t[4];
  for (int p = 0; p < 8; ++p) {  // [a.lo256 + a.hi256 | b.lo256 + b.hi256]
    const __m512 lo = _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], 0x44);
    const __m512 hi = _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], 0xEE);
    s[p] = _mm512_add_ps(lo, hi);
  }
  for (int q = 0; q < 4; ++q) {  // quarter m of t[q]: four partials of accumulator 4q + m
    const __m512 even = _mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], 0x88);
    const __m512 odd = _mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], 0xDD);
    t[q] = _mm512_add_ps(even, odd);
  }
  // quarter g of u: partials of accumulators g and 4 + g (u0), 8 + g and 12 + g (u1), interleaved
  const __m512 u0 = _mm512_add_ps(_mm512_unpacklo_ps(t[0], t[1]), _mm512_unpackhi_ps(t[0], t[1]));
  const __m512 u1 = _mm512_add_ps(_mm512_unpacklo_ps(t[2], t[3]), _mm512_unpackhi_ps(t[2], t[3]));
  return _mm512_add_ps(_mm512_unpacklo_ps(u0, u1), _mm512_unpackhi_ps(u0, u1));
}

// Accumulator index (4 * row offset + column offset) whose total lands in lane p of reduce16.
constexpr int kReducedAcc[16] = {0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15};

template <bool kCentred>
inline __m512 load_row(const float* row, const float* anchor, long long k, __mmask16 mask) {
  const __m512 v = _mm512_maskz_loadu_ps(mask, row + k);
  if (kCentred) return _mm512_sub_ps(v, _mm512_maskz_loadu_ps(mask, anchor + k));
  return v;
}

// One step of 16 columns (those of `mask`) from column k: acc[4 * a + b] += y_i[a] * y_j[b].
template <bool kCentred>
inline void step(const float* const* ri, const float* const* rj, const float* anchor, long long k,
                 __mmask16 mask, __m512* acc) {
  __m512 vi[4], vj[4];
  for (int a = 0; a < 4; ++a) vi[a] = load_row<kCentred>(ri[a], anchor, k, mask);
  for (int b = 0; b < 4; ++b) vj[b] = load_row<kCentred>(rj[b], anchor, k, mask);
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) acc[4 * a + b] = _mm512_fmadd_ps(vi[a], vj[b], acc[4 * a + b]);
  }
}

// acc[4 * a + b] lanes += y_i[a] * y_j[b] over columns [k0, k1) (k0 a multiple of 16).
template <bool kCentred>
inline void tile_block(const float* const* ri, const float* const* rj, const float* anchor,
                       long long k0, long long k1, __m512* acc) {
  for (int a = 0; a < 16; ++a) acc[a] = _mm512_setzero_ps();
  long long k = k0;
  for (; k + 16 <= k1; k += 16) step<kCentred>(ri, rj, anchor, k, __mmask16(0xFFFF), acc);
  if (k < k1) step<kCentred>(ri, rj, anchor, k, __mmask16((1u << (k1 - k)) - 1), acc);  // tail of K
}

// Prefetches columns [k0, k1) of rows [r0, r1) into L2.
inline void prefetch_rows(const GramInput& in, long long r0, long long r1, long long k0, long long k1) {
  for (long long r = r0; r < r1; ++r) {
    const char* row = reinterpret_cast<const char*>(in.x + r * in.ld);
    for (long long k = k0; k < k1; k += 16) _mm_prefetch(row + 4 * k, _MM_HINT_T1);
  }
}

template <bool kCentred>
void gram_tiles_impl(const GramInput& in, long long t0, long long t1, double* tile_sums) {
  const long long n = in.n;
  std::fill(tile_sums, tile_sums + 16 * (t1 - t0), 0.0);
  // rows [0, rows) are the ones these tiles read (every full tile row starts at column block 0); the
  // next block of all of them is prefetched into L2, spread evenly over this block's tiles
  const long long rows = std::min(n, 4 * (tile_of(t1 - 1).row + 1)), count = t1 - t0;
  for (long long k0 = 0; k0 < in.k; k0 += kBlockCols) {
    const long long k1 = std::min(in.k, k0 + kBlockCols);
    const long long next1 = std::min(in.k, k1 + kBlockCols);
    for (long long t = t0; t < t1; ++t) {
      const TileIndex tile = tile_of(t);
      if (k1 < in.k) {
        prefetch_rows(in, (t - t0) * rows / count, (t - t0 + 1) * rows / count, k1, next1);
      }
      const float* ri[4];
      const float* rj[4];
      for (int a = 0; a < 4; ++a) {
        ri[a] = in.x + std::min(4 * tile.row + a, n - 1) * in.ld;
        rj[a] = in.x + std::min(4 * tile.col + a, n - 1) * in.ld;
      }
      __m512 acc[16];
      tile_block<kCentred>(ri, rj, in.anchor, k0, k1, acc);
      const __m512 sums = reduce16(acc);
      double* out = tile_sums + 16 * (t - t0);
      const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(sums));
      const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(sums, 1));
      _mm512_storeu_pd(out, _mm512_add_pd(_mm512_loadu_pd(out), lo));
      _mm512_storeu_pd(out + 8, _mm512_add_pd(_mm512_loadu_pd(out + 8), hi));
    }
  }
}

}  // namespace

void gram_tiles_avx512(const GramInput& in, long long t0, long long t1, double* gram) {
  std::vector<double> tile_sums(static_cast<size_t>(16 * (t1 - t0)));
  if (in.anchor != nullptr) {
    gram_tiles_impl<true>(in, t0, t1, tile_sums.data());
  } else {
    gram_tiles_impl<false>(in, t0, t1, tile_sums.data());
  }
  for (long long t = t0; t < t1; ++t) {
    const TileIndex tile = tile_of(t);
    for (int p = 0; p < 16; ++p) {
      const long long i = 4 * tile.row + kReducedAcc[p] / 4, j = 4 * tile.col + kReducedAcc[p] % 4;
      if (i < in.n && j < in.n) gram[i * in.n + j] = tile_sums[16 * (t - t0) + p];
    }
  }
}

}  // namespace vitplast

#pragma GCC diagnostic pop
#pragma GCC pop_options

#endif  // x86
