// CPU implementation of vitplast::pair_sq_distances(_grouped).
//
// Each row (pair) is cut into fixed blocks of kBlock logical elements; a task is
// one (row, block). Tasks run in parallel (at::parallel_for, OpenMP in torch
// builds), each writes its own double partial, and partials are summed per row
// in block order: bitwise repeatable whatever the thread count. Every input
// element is read once; no temporaries besides the (rows x blocks) partials.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "../ops.h"
#include "../row_layout.h"
#include "span_sq_sum_api.h"

namespace vitplast {
namespace {

constexpr int64_t kBlock = 1 << 15;  // logical elements per task (fixed: determinism)

SpanDtype span_dtype(at::ScalarType st) {
  switch (st) {
    case at::kFloat: return SpanDtype::kFloat32;
    case at::kBFloat16: return SpanDtype::kBFloat16;
    case at::kHalf: return SpanDtype::kFloat16;
    default: TORCH_CHECK(false, "vitplast: unsupported dtype ", st);
  }
}

SpanSqSumFn span_fn() {
  static const SpanSqSumFn fn = select_span_sq_sum();
  return fn;
}

// Sum of squared differences of logical elements [k0, k1) of row `row`.
double block_sq_sum(const PairLayout& p, const char* pa, const char* pb, int64_t elem_size,
                    SpanDtype dt, int64_t row, int64_t k0, int64_t k1) {
  double acc[kSpanLanes] = {0.0};
  const char* ra = pa + row * p.la.batch_stride * elem_size;
  const char* rb = pb + row * p.lb.batch_stride * elem_size;
  SpanSqSumFn fn = span_fn();
  int64_t k = k0;
  while (k < k1) {
    int64_t run_end = (k / p.seg_len + 1) * p.seg_len;
    int64_t n = std::min(run_end, k1) - k;
    fn(dt, ra + element_offset(p.la, k) * elem_size, rb + element_offset(p.lb, k) * elem_size, n,
       acc);
    k += n;
  }
  double s = 0.0;
  for (int l = 0; l < kSpanLanes; ++l) s += acc[l];
  return s;
}

// Writes out[0..B) (float32) for one pair of tensors.
void pair_sq_distances_into(const at::Tensor& a, const at::Tensor& b, float* out) {
  PairLayout p = make_pair_layout(a, b);
  const int64_t rows = p.rows;
  if (rows == 0) return;
  if (p.row_len == 0) {
    for (int64_t r = 0; r < rows; ++r) out[r] = 0.f;
    return;
  }
  const int64_t blocks = (p.row_len + kBlock - 1) / kBlock;
  const int64_t tasks = rows * blocks;
  std::vector<double> partial(static_cast<size_t>(tasks));
  const char* pa = static_cast<const char*>(p.a.const_data_ptr());
  const char* pb = static_cast<const char*>(p.b.const_data_ptr());
  const int64_t es = p.a.element_size();
  const SpanDtype dt = span_dtype(p.a.scalar_type());
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t row = t / blocks, blk = t % blocks;
      int64_t k0 = blk * kBlock, k1 = std::min(p.row_len, k0 + kBlock);
      partial[t] = block_sq_sum(p, pa, pb, es, dt, row, k0, k1);
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int64_t blk = 0; blk < blocks; ++blk) s += partial[r * blocks + blk];
    out[r] = static_cast<float>(s);
  }
}

at::Tensor pair_sq_distances_cpu(const at::Tensor& a, const at::Tensor& b) {
  check_pair_inputs(a, b);
  at::Tensor out = at::empty({a.size(0)}, a.options().dtype(at::kFloat));
  pair_sq_distances_into(a, b, out.data_ptr<float>());
  return out;
}

at::Tensor pair_sq_distances_grouped_cpu(at::TensorList a, at::TensorList b) {
  TORCH_CHECK(a.size() == b.size(), "vitplast: a and b must hold as many tensors, got ", a.size(),
              " and ", b.size());
  TORCH_CHECK(!a.empty(), "vitplast: the group is empty");
  const int64_t rows = a[0].size(0);
  at::Tensor out = at::empty({static_cast<int64_t>(a.size()), rows},
                             a[0].options().dtype(at::kFloat));
  for (size_t g = 0; g < a.size(); ++g) {
    check_pair_inputs(a[g], b[g]);
    TORCH_CHECK(a[g].size(0) == rows, "vitplast: every tensor of the group must have ", rows,
                " rows, tensor ", g, " has ", a[g].size(0));
    pair_sq_distances_into(a[g], b[g], out.data_ptr<float>() + g * rows);
  }
  return out;
}

}  // namespace
}  // namespace vitplast

TORCH_LIBRARY_IMPL(vitplast, CPU, m) {
  m.impl("pair_sq_distances", &vitplast::pair_sq_distances_cpu);
  m.impl("pair_sq_distances_grouped", &vitplast::pair_sq_distances_grouped_cpu);
}
