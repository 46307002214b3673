// CPU implementation of vitplast::pair_sq_distances(_grouped).
//
// Each row (pair) is cut into fixed blocks of kBlock logical elements; a task is one
// (tensor, row, block). All tasks of a call (one tensor pair, or a whole group) run in one
// parallel region (guided_tasks.h: chunks claimed from a shared counter); each writes its own double
// partial, and partials are summed per row in block order: bitwise repeatable whatever the
// thread count or the group's composition. Every input element is read once; no temporaries
// besides the partials. Outputs are the float64 sums: squares of float32 differences range from
// 2^-298 to 2^257, so a float32 output would underflow or overflow where the distance itself is a
// finite float32 number (the op layer takes square roots and ratios in float64, then casts).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../ops.h"
#include "../row_layout.h"
#include "guided_tasks.h"
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

// Writes out[g * rows + r] (float64) for every pair of tensors g of the group and every row r, in
// one parallel region over all (tensor, row, block) tasks of the group; partials are summed per row
// in block order, so the result does not depend on the group's composition or the thread count.
void group_sq_distances_into(const std::vector<PairLayout>& group, int64_t rows, double* out) {
  const int64_t G = static_cast<int64_t>(group.size());
  std::vector<int64_t> blocks(G), first_task(G + 1, 0);
  int64_t elements = 0;
  for (int64_t g = 0; g < G; ++g) {
    blocks[g] = (group[g].row_len + kBlock - 1) / kBlock;  // 0 for empty rows
    first_task[g + 1] = first_task[g] + rows * blocks[g];
    elements += rows * group[g].row_len;
  }
  std::vector<double> partial(static_cast<size_t>(first_task[G]));
  auto run_task = [&](int64_t t) {
    const int64_t g =
        std::upper_bound(first_task.begin(), first_task.end(), t) - first_task.begin() - 1;
    const PairLayout& p = group[g];
    const int64_t local = t - first_task[g];
    const int64_t row = local / blocks[g], blk = local % blocks[g];
    const int64_t k0 = blk * kBlock, k1 = std::min(p.row_len, k0 + kBlock);
    partial[t] = block_sq_sum(p, static_cast<const char*>(p.a.const_data_ptr()),
                              static_cast<const char*>(p.b.const_data_ptr()), p.a.element_size(),
                              span_dtype(p.a.scalar_type()), row, k0, k1);
  };
  // Less than one block of work in all (small activations, one hook of a small model): the calling
  // thread alone, as starting the parallel region would cost about as much as the work; the partials
  // and their order are the same either way.
  if (elements < kBlock) {
    for (int64_t t = 0; t < first_task[G]; ++t) run_task(t);
  } else {
    run_tasks_guided(first_task[G], run_task);
  }
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0.0;
      const double* pr = partial.data() + first_task[g] + r * blocks[g];
      for (int64_t blk = 0; blk < blocks[g]; ++blk) s += pr[blk];
      out[g * rows + r] = s;
    }
  }
}

at::Tensor pair_sq_distances_cpu(const at::Tensor& a, const at::Tensor& b) {
  check_pair_inputs(a, b);
  at::Tensor out = at::empty({a.size(0)}, a.options().dtype(at::kDouble));
  group_sq_distances_into({make_pair_layout(a, b)}, a.size(0), out.data_ptr<double>());
  return out;
}

at::Tensor pair_sq_distances_grouped_cpu(at::TensorList a, at::TensorList b) {
  TORCH_CHECK(a.size() == b.size(), "vitplast: a and b must hold as many tensors, got ", a.size(),
              " and ", b.size());
  TORCH_CHECK(!a.empty(), "vitplast: the group is empty");
  const int64_t rows = a[0].size(0);
  std::vector<PairLayout> group;
  group.reserve(a.size());
  for (size_t g = 0; g < a.size(); ++g) {
    check_pair_inputs(a[g], b[g]);
    TORCH_CHECK(a[g].size(0) == rows, "vitplast: every tensor of the group must have ", rows,
                " rows, tensor ", g, " has ", a[g].size(0));
    group.push_back(make_pair_layout(a[g], b[g]));
  }
  at::Tensor out = at::empty({static_cast<int64_t>(a.size()), rows},
                             a[0].options().dtype(at::kDouble));
  group_sq_distances_into(group, rows, out.data_ptr<double>());
  return out;
}

}  // namespace
}  // namespace vitplast

TORCH_LIBRARY_IMPL(vitplast, CPU, m) {
  m.impl("pair_sq_distances", &vitplast::pair_sq_distances_cpu);
  m.impl("pair_sq_distances_grouped", &vitplast::pair_sq_distances_grouped_cpu);
}
