// Baseline x86-64 (or any CPU) variant of the span kernels.
#define VITPLAST_SPAN_NS generic
#include "span_sq_sum.h"
#include "span_sq_sum_api.h"

namespace vitplast {

void span_sq_sum_generic(SpanDtype dtype, const void* a, const void* b, long long n, double* acc) {
  switch (dtype) {
    case SpanDtype::kFloat32:
      generic::span_sq_sum_scalar<generic::F32>(static_cast<const float*>(a),
                                                 static_cast<const float*>(b), n, acc);
      break;
    case SpanDtype::kBFloat16:
      generic::span_sq_sum_scalar<generic::BF16>(static_cast<const unsigned short*>(a),
                                                  static_cast<const unsigned short*>(b), n, acc);
      break;
    case SpanDtype::kFloat16:
      generic::span_sq_sum_scalar<generic::F16>(static_cast<const unsigned short*>(a),
                                                 static_cast<const unsigned short*>(b), n, acc);
      break;
  }
}

}  // namespace vitplast
