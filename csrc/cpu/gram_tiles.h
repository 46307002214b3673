// Lower-triangle Gram of float32 rows in 4x4 tiles (the all-pairs CPU path: gram_lower_cpu.cpp).
//
// Tiles are numbered row block by row block: tile t = I (I + 1) / 2 + J covers rows [4I, 4I + 4) x
// columns [4J, 4J + 4), J <= I. A thread computes a contiguous range of tiles over all K columns; no
// tile depends on another, so the result does not depend on how the range is split.
#pragma once

#include <cmath>

namespace vitplast {

constexpr long long kBlockCols = 512;  // columns summed in float32 before each float64 addition

struct GramInput {
  const float* x;       // (n, k) rows, unit column stride
  long long n, k, ld;   // rows, columns, elements between rows
  const float* anchor;  // (k,) subtracted from every row, or nullptr
};

struct TileIndex {
  long long row, col;  // tile row block I and column block J (J <= I)
};

inline TileIndex tile_of(long long t) {
  long long row = static_cast<long long>((std::sqrt(8.0 * static_cast<double>(t) + 1.0) - 1.0) / 2.0);
  while (row * (row + 1) / 2 > t) --row;
  while ((row + 1) * (row + 2) / 2 <= t) ++row;
  return {row, t - row * (row + 1) / 2};
}

inline long long tile_count(long long n) {
  const long long blocks = (n + 3) / 4;
  return blocks * (blocks + 1) / 2;
}

// gram[i * n + j] (float64, row-major n x n) for every (i, j) of tiles [t0, t1) with i, j < n:
// entries above the diagonal inside diagonal tiles are written too.
void gram_tiles_avx512(const GramInput& in, long long t0, long long t1, double* gram);

}  // namespace vitplast
