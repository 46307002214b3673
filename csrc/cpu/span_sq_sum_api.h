// Entry points of the span kernels (one per ISA), selected at run time.
#pragma once

namespace vitplast {

enum class SpanDtype { kFloat32, kBFloat16, kFloat16 };

constexpr int kSpanLanes = 16;  // double accumulators per call (must match span_sq_sum.h)

// acc[kSpanLanes] += per-lane sums of (a[i] - b[i])^2 over n contiguous elements.
void span_sq_sum_generic(SpanDtype dtype, const void* a, const void* b, long long n, double* acc);
void span_sq_sum_avx2(SpanDtype dtype, const void* a, const void* b, long long n, double* acc);
void span_sq_sum_avx512(SpanDtype dtype, const void* a, const void* b, long long n, double* acc);

// The AVX2 file's double path for bfloat16 (exact differences, any magnitude): the AVX-512 kernel's
// fallback for blocks outside float32's square range, so that both variants give the same bits.
void span_sq_sum_avx2_exact_bf16(const void* a, const void* b, long long n, double* acc);

using SpanSqSumFn = void (*)(SpanDtype, const void*, const void*, long long, double*);

// The fastest variant this CPU supports (checked once; VITPLAST_CPU_KERNEL=avx2 or generic caps it:
// span_sq_sum_select.cpp).
SpanSqSumFn select_span_sq_sum();

}  // namespace vitplast
