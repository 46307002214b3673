// CPU op vitplast::gram_lower_f32(x, anchor): the float64 Gram of float32 rows for all pairs
// (vitplast_kernels/backends/cpu.py, _split_gram), from the AVX-512 tile kernel
// (gram_tiles_avx512.cpp). Tiles of the lower triangle are split over torch's intra-op threads in
// contiguous ranges; each tile's sums depend only on x, so the result is bitwise the same for every
// thread count. vitplast::gram_lower_supported() says whether this CPU runs the kernel (AVX-512 F and
// DQ); without it the Python side multiplies through BLAS.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>

#include "cpu_features.h"
#include "gram_tiles.h"

namespace vitplast {
namespace {

bool gram_lower_supported() {
  static const bool ok = cpu_has_avx512();
  return ok;
}

// Below this many FMAs (about 100 us of one core) the tiles run on one thread: a parallel region costs
// a scheduler slice whenever the other thread is descheduled (the all-pairs probe's 512-column slices
// of 128 rows, 4.3M FMAs each, took 8 ms per call at two threads on a loaded 2-core VM, 0.1 ms on one).
constexpr long long kSerialFmas = 1LL << 23;

at::Tensor gram_lower_f32_cpu(const at::Tensor& x, const std::optional<at::Tensor>& anchor) {
  TORCH_CHECK(gram_lower_supported(), "vitplast: gram_lower_f32 needs a CPU with AVX-512 F and DQ");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "vitplast: gram_lower_f32: x must be a 2-D "
              "float32 tensor, got ", x.dim(), "-D ", x.scalar_type());
  TORCH_CHECK(x.size(1) <= 1 || x.stride(1) == 1, "vitplast: gram_lower_f32: x needs unit column stride");
  const long long n = x.size(0), k = x.size(1);
  const float* anchor_ptr = nullptr;
  if (anchor.has_value()) {
    const at::Tensor& a = *anchor;
    TORCH_CHECK(a.dim() == 1 && a.scalar_type() == at::kFloat && a.size(0) == k && a.is_contiguous(),
                "vitplast: gram_lower_f32: anchor must be a contiguous float32 vector of ", k,
                " elements, got shape ", a.sizes(), " ", a.scalar_type());
    anchor_ptr = a.const_data_ptr<float>();
  }
  at::Tensor out = at::zeros({n, n}, x.options().dtype(at::kDouble));
  double* gram = out.data_ptr<double>();
  const GramInput in{x.const_data_ptr<float>(), n, k, n > 1 ? x.stride(0) : k, anchor_ptr};
  const long long tiles = tile_count(n);
  const long long grain = 16 * tiles * k < kSerialFmas ? std::max(tiles, 1LL) : 1;
#if defined(__x86_64__) || defined(__i386__)  // the tile kernel is built for x86 only (checked above)
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    gram_tiles_avx512(in, begin, end, gram);
  });
#endif
  for (long long i = 0; i < n; ++i) {
    for (long long j = 0; j < i; ++j) gram[j * n + i] = gram[i * n + j];
  }
  return out;
}

}  // namespace
}  // namespace vitplast

TORCH_LIBRARY_FRAGMENT(vitplast, m) {
  // (N, K) float32 rows (unit column stride), optional (K,) anchor -> (N, N) float64 Gram of x - anchor
  m.def("gram_lower_f32(Tensor x, Tensor? anchor) -> Tensor");
  m.def("gram_lower_supported() -> bool");
}

TORCH_LIBRARY_IMPL(vitplast, CPU, m) {
  m.impl("gram_lower_f32", &vitplast::gram_lower_f32_cpu);
}

TORCH_LIBRARY_IMPL(vitplast, CompositeExplicitAutograd, m) {
  m.impl("gram_lower_supported", &vitplast::gram_lower_supported);
}
