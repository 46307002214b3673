// Row layout shared by the CPU and CUDA paired reductions.
//
// A paired reduction reads row i of `a` and row i of `b` (i over the leading
// "pair" dimension) in the same logical (row-major) element order. Each row is
// described as `segments` runs of `seg_len` contiguous elements; run s of row i
// starts at  i * batch_stride + (s * seg_len / inner) * outer_stride + (s * seg_len) % inner.
// Views whose non-batch dims do not collapse into (outer, inner-contiguous) are
// copied once (documented fallback for e.g. transposed last dims).
#pragma once

#include <ATen/ATen.h>
#include <cstdint>
#include <numeric>
#include <optional>

namespace vitplast {

struct RowLayout {
  int64_t batch_stride;  // elements between consecutive rows (pairs)
  int64_t inner;         // contiguous elements per inner block
  int64_t outer_stride;  // elements between consecutive inner blocks
};

// Collapses dims 1.. of `t` into (outer, inner) with unit inner stride, or nullopt.
inline std::optional<RowLayout> collapse_rows(const at::Tensor& t) {
  const int64_t nd = t.dim();
  int64_t inner = 1;
  int64_t outer_stride = 0;
  int64_t outer = 1;
  int d = static_cast<int>(nd) - 1;
  // innermost contiguous block
  int64_t expected = 1;
  for (; d >= 1; --d) {
    if (t.size(d) == 1) continue;
    if (t.stride(d) != expected) break;
    inner *= t.size(d);
    expected *= t.size(d);
  }
  // everything left must collapse into one strided dim
  bool have_outer = false;
  int64_t outer_expected = 0;
  for (; d >= 1; --d) {
    if (t.size(d) == 1) continue;
    if (!have_outer) {
      if (inner == 1) return std::nullopt;  // innermost non-unit dim is not contiguous
      outer_stride = t.stride(d);
      outer = t.size(d);
      outer_expected = t.stride(d) * t.size(d);
      have_outer = true;
    } else {
      if (t.stride(d) != outer_expected) return std::nullopt;
      outer *= t.size(d);
      outer_expected = t.stride(d) * t.size(d);
    }
  }
  (void)outer;
  return RowLayout{t.dim() > 0 ? t.stride(0) : 0, inner, have_outer ? outer_stride : inner};
}

struct PairLayout {
  at::Tensor a, b;  // possibly contiguous copies of the inputs
  RowLayout la, lb;
  int64_t rows;     // B
  int64_t row_len;  // K = elements per row
  int64_t seg_len;  // contiguous run length common to both
};

// Minimum contiguous run worth streaming; below it the strided view is copied.
constexpr int64_t kMinSegment = 64;

inline PairLayout make_pair_layout(const at::Tensor& a_in, const at::Tensor& b_in) {
  PairLayout p;
  p.a = a_in;
  p.b = b_in;
  p.rows = a_in.size(0);
  p.row_len = p.rows > 0 ? a_in.numel() / p.rows : 0;
  if (p.rows == 0 || p.row_len == 0) {
    p.la = p.lb = RowLayout{0, 1, 1};
    p.seg_len = 1;
    return p;
  }
  auto la = collapse_rows(p.a);
  if (!la) { p.a = p.a.contiguous(); la = collapse_rows(p.a); }
  auto lb = collapse_rows(p.b);
  if (!lb) { p.b = p.b.contiguous(); lb = collapse_rows(p.b); }
  int64_t g = std::gcd(la->inner, lb->inner);
  if (g < kMinSegment && g < p.row_len) {
    if (la->inner < p.row_len) { p.a = p.a.contiguous(); la = collapse_rows(p.a); }
    if (lb->inner < p.row_len) { p.b = p.b.contiguous(); lb = collapse_rows(p.b); }
    g = std::gcd(la->inner, lb->inner);
  }
  p.la = *la;
  p.lb = *lb;
  p.seg_len = g;
  return p;
}

// Offset (in elements, from the start of the row) of logical element k, which
// must be the start of or inside a contiguous run.
inline int64_t element_offset(const RowLayout& l, int64_t k) {
  return (k / l.inner) * l.outer_stride + (k % l.inner);
}

}  // namespace vitplast
