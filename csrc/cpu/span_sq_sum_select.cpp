// Run-time choice of the span kernel variant: the fastest this CPU supports, checked once.
// VITPLAST_CPU_KERNEL=avx2 or generic caps the choice (tests compare the variants' bits); unset or
// "auto": the fastest. AVX-512 and AVX2 give the same sums bit for bit; the generic loop sums 16-bit
// inputs in float64 (the AVX2 kernels in float32 lanes) and has no FMA.
#include <cstdlib>
#include <string>

#include "cpu_features.h"
#include "span_sq_sum_api.h"

namespace vitplast {

SpanSqSumFn select_span_sq_sum() {
  const char* cap = std::getenv("VITPLAST_CPU_KERNEL");
  const std::string want = cap == nullptr ? "auto" : cap;
#if defined(__x86_64__) || defined(__i386__)  // the vector kernels are built for x86 only
  const bool avx2 = cpu_has_avx2();
  if (avx2 && cpu_has_avx512() && (want == "auto" || want == "avx512")) return &span_sq_sum_avx512;
  if (avx2 && want != "generic") return &span_sq_sum_avx2;
#endif
  return &span_sq_sum_generic;
}

}  // namespace vitplast
