// Schema-level declarations of the vitplast ops (defined in ops_registration.cpp).
#pragma once

#include <ATen/ATen.h>

namespace vitplast {

// Validation shared by every device implementation of the paired ops. The
// Python op layer validates first with friendlier messages; these checks keep
// direct torch.ops calls from reading out of bounds.
void check_pair_inputs(const at::Tensor& a, const at::Tensor& b);

}  // namespace vitplast
