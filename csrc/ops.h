// Checks shared by every device implementation of the vitplast ops. Inline in this header so that
// both extensions (_C and _C_cuda, which Python loads with RTLD_LOCAL and so cannot share symbols)
// compile the same code.
#pragma once

#include <ATen/ATen.h>

namespace vitplast {

// The Python op layer validates first with friendlier messages; these checks keep direct
// torch.ops.vitplast.* calls from reading out of bounds.
inline void check_pair_inputs(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() >= 2, "vitplast: a must have at least 2 dims (B, ...), got ", a.dim());
  TORCH_CHECK(a.sizes() == b.sizes(), "vitplast: a and b must have the same shape, got ",
              a.sizes(), " and ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "vitplast: a and b must have the same dtype, got ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.device() == b.device(), "vitplast: a and b must be on the same device");
  auto st = a.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kHalf || st == at::kBFloat16,
              "vitplast: dtype must be float32, float16 or bfloat16, got ", st);
}

}  // namespace vitplast
