// CUDA implementation of vitplast::pair_sq_distances(_grouped).
//
// Work is cut into tasks: one task = one (tensor g, row, chunk of `chunk` logical elements).
// One launch, one block per task (the hardware scheduler balances the waves; a grid-stride loop only
// past the grid limit): a 256-thread block streams its chunk with 16-byte vector loads when the layout
// allows it (scalar fallback otherwise), accumulates (a - b)^2 in double per thread (see widen below),
// reduces with warp shuffles + shared memory in a fixed order and writes one double partial per task.
// Outputs are float64: every square of a float32 difference is representable. Then it takes
// an integer ticket for its output (g, row) (threadfence + atomicAdd on an unsigned counter zeroed by
// a memset before the launch); the block that takes the last ticket sums that row's partials in
// double, in a fixed order (lane-strided over one warp, then shuffles), and writes the output.
// Only integer atomics decide *who* sums, never *what* or in which order: the same inputs give bitwise
// the same outputs. All offsets are int64.
//
// Tensor descriptors (pointers, layouts, task ranges) are built on the host. A single tensor's
// descriptor travels as a kernel argument; a group's table (plus a task -> tensor hint per window of
// 2^kHintShift tasks) is copied to the device from pinned memory with a non-blocking copy on the
// current stream: the launch path never synchronises.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>  // (not ATen/cuda/CUDAContext.h: it needs the cuSPARSE/cuBLAS headers)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <torch/library.h>

#include "../ops.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "../row_layout.h"

namespace vitplast {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;              // independent 16-byte loads in flight per operand and thread
// >= 3 resident blocks per SM (ptxas -v, sm_90: 80 registers, <= 36 bytes of spills outside the loop):
// 768 threads x 4 x 2 x 16 B = 96 KiB of loads in flight per SM, above H200 bandwidth x latency per SM
// (~30 GB/s x ~2 us). Without the bound ptxas took 88-100 registers: 2 blocks, 64 KiB. A bound of 4
// blocks (64 registers) spilled up to 188 bytes.
constexpr int kMinBlocksPerSM = 3;
// Chunking (host side, per tensor): a tensor of `rows` rows of K elements aims at
// cdiv(rows * K, kTargetTasks) elements per task, clamped to [kMinChunk, kMaxChunk], and every row is
// cut into equal chunks (rounded up to kChunkAlign) rather than fixed tiles plus a short remainder.
// A task's fixed costs (descriptor decode, block reduction, fence and ticket, the last block's row
// sum) are paid per chunk: on an H200, rows cut into 16384-element chunks plus a short tail
// (128x257x1280 bf16) reached 73% of the copy bandwidth, 45056-element chunks (128x257x5120) 88%.
// The chunk depends on the tensor alone, never on the rest of a group: the chunk decides the
// summation order, so a tensor reduced inside a group gives the bits it gives alone. (A group of
// small tensors therefore runs on small chunks; bench/gpu_paired.py --chunk-sweep measures the policy.)
constexpr int64_t kTargetTasks = 1024;   // ~2.6 waves of 3 x 132 resident blocks on an H200
constexpr int64_t kMinChunk = 8192;      // one unrolled block step (256 threads x 4 x 8 16-bit elements)
constexpr int64_t kMaxChunk = 49152;     // 192 KB of bf16 reads per task (both operands)
constexpr int64_t kChunkAlign = 256;     // chunk starts stay 16-byte aligned for every dtype
constexpr int kHintShift = 8;  // one task -> tensor hint per 256 tasks
constexpr int64_t kMaxGrid = 0x7fffffff;

struct TensorDesc {
  const void* a;
  const void* b;
  int64_t a_bs, a_inner, a_os;  // RowLayout of a (elements)
  int64_t b_bs, b_inner, b_os;  // RowLayout of b
  int64_t row_len;              // K
  int64_t seg_len;              // contiguous run common to a and b (== K for contiguous rows)
  int64_t chunk;                // logical elements per task (multiple of kChunkAlign)
  int64_t nchunks;              // tasks per row
  int64_t task_begin;           // first task (and partial) of this tensor
  int32_t aligned;              // 1: every run starts 16-byte aligned in a and b
  int32_t pad;
};

struct DescArg {
  const TensorDesc* table;  // device table (G > 1), or nullptr
  const int32_t* hints;     // device: hints[w] = the tensor owning task w << kHintShift (G > 1)
  TensorDesc one;           // the descriptor when G == 1
  int32_t groups;
  int64_t rows;
  int64_t tasks;
};

template <typename T> struct Vec;
template <> struct Vec<float> { static constexpr int kN = 4; };
template <> struct Vec<at::Half> { static constexpr int kN = 8; };
template <> struct Vec<at::BFloat16> { static constexpr int kN = 8; };

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(at::Half x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_f(at::BFloat16 x) { return static_cast<float>(x); }

// float -> double and float subtraction that keep subnormals whatever the nvcc flags: with
// --use_fast_math (-ftz=true) the plain C++ forms compile to cvt.ftz.f64.f32 / sub.ftz.f32, which
// flush inputs below 2^-126 to zero (activations scaled by 1e-38 would give 0).
__device__ __forceinline__ double widen(float x) {
  double r;
  asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float sub_keep_subnormals(float x, float y) {
  float r;
  asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
}

// (a - b)^2 added in double. float32: both operands widened, the difference is exact. 16-bit: the
// float32 difference of two fp16/bf16 values is exact (but for operands more than 2^24 apart, where
// it rounds by <= 2^-24), so one conversion per element suffices.
__device__ __forceinline__ double add_sq(float x, float y, double acc) {
  const double d = widen(x) - widen(y);
  return fma(d, d, acc);
}
__device__ __forceinline__ double add_sq16(float x, float y, double acc) {
  const double d = widen(sub_keep_subnormals(x, y));
  return fma(d, d, acc);
}

// acc += sum over the vector's lanes of (a - b)^2
__device__ __forceinline__ double vec_sq(const uint4& va, const uint4& vb, double acc, float*) {
  const float* x = reinterpret_cast<const float*>(&va);
  const float* y = reinterpret_cast<const float*>(&vb);
#pragma unroll
  for (int i = 0; i < 4; ++i) acc = add_sq(x[i], y[i], acc);
  return acc;
}
__device__ __forceinline__ double vec_sq(const uint4& va, const uint4& vb, double acc, at::Half*) {
  const __half2* x = reinterpret_cast<const __half2*>(&va);
  const __half2* y = reinterpret_cast<const __half2*>(&vb);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 fx = __half22float2(x[i]), fy = __half22float2(y[i]);
    acc = add_sq16(fx.x, fy.x, acc);
    acc = add_sq16(fx.y, fy.y, acc);
  }
  return acc;
}
__device__ __forceinline__ double vec_sq(const uint4& va, const uint4& vb, double acc, at::BFloat16*) {
  const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&va);
  const __nv_bfloat162* y = reinterpret_cast<const __nv_bfloat162*>(&vb);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 fx = __bfloat1622float2(x[i]), fy = __bfloat1622float2(y[i]);
    acc = add_sq16(fx.x, fy.x, acc);
    acc = add_sq16(fx.y, fy.y, acc);
  }
  return acc;
}

// Per-thread sum over a contiguous span of n elements shared by the block.
template <typename T>
__device__ double span_sq(const T* __restrict__ a, const T* __restrict__ b, int64_t n, bool aligned,
                          double acc) {
  constexpr int V = Vec<T>::kN;
  const int tid = threadIdx.x;
  int64_t done = 0;
  if (aligned) {
    const uint4* va = reinterpret_cast<const uint4*>(a);
    const uint4* vb = reinterpret_cast<const uint4*>(b);
    const int64_t nv = n / V;
    int64_t i = tid;
    for (; i + (kUnroll - 1) * kThreads < nv; i += kUnroll * kThreads) {
      uint4 xa[kUnroll], xb[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        xa[u] = __ldg(va + i + u * kThreads);
        xb[u] = __ldg(vb + i + u * kThreads);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc = vec_sq(xa[u], xb[u], acc, static_cast<T*>(nullptr));
    }
    for (; i < nv; i += kThreads) acc = vec_sq(__ldg(va + i), __ldg(vb + i), acc, static_cast<T*>(nullptr));
    done = nv * V;
  }
  for (int64_t i = done + tid; i < n; i += kThreads) {
    acc = sizeof(T) == 4 ? add_sq(to_f(a[i]), to_f(b[i]), acc) : add_sq16(to_f(a[i]), to_f(b[i]), acc);
  }
  return acc;
}

__device__ __forceinline__ double block_sum(double v, double* shared) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double s = 0.0;
  if (warp == 0) {
    s = lane < kThreads / 32 ? shared[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  }
  __syncthreads();  // shared is reused by the next task
  return s;
}

// Index of the tensor owning `task`: the last g with task_begin <= task. Starts from the hint of the
// task's window and walks forward: 0 or 1 steps unless many tiny tensors share a window.
__device__ __forceinline__ int find_group(const DescArg& d, int64_t task) {
  int g = __ldg(d.hints + (task >> kHintShift));
  while (g + 1 < d.groups && d.table[g + 1].task_begin <= task) ++g;
  return g;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM)
    paired_kernel(DescArg d, double* __restrict__ partial, unsigned* __restrict__ tickets,
                  double* __restrict__ out) {
  __shared__ double shared[kThreads / 32];
  __shared__ bool last;
  for (int64_t task = blockIdx.x; task < d.tasks; task += gridDim.x) {
    const int g = d.groups > 1 ? find_group(d, task) : 0;
    const TensorDesc t = d.groups == 1 ? d.one : d.table[g];
    const int64_t local = task - t.task_begin;
    const int64_t row = local / t.nchunks;
    const int64_t k0 = (local - row * t.nchunks) * t.chunk;
    const int64_t k1 = min(k0 + t.chunk, t.row_len);
    const T* ra = static_cast<const T*>(t.a) + row * t.a_bs;
    const T* rb = static_cast<const T*>(t.b) + row * t.b_bs;
    const bool aligned = t.aligned != 0;
    double acc = 0.0;
    for (int64_t k = k0; k < k1;) {  // runs contiguous in both a and b
      const int64_t run_end = min((k / t.seg_len + 1) * t.seg_len, k1);
      const int64_t oa = (k / t.a_inner) * t.a_os + k % t.a_inner;
      const int64_t ob = (k / t.b_inner) * t.b_os + k % t.b_inner;
      acc = span_sq<T>(ra + oa, rb + ob, run_end - k, aligned, acc);
      k = run_end;
    }
    const double s = block_sum(acc, shared);
    const int64_t o = static_cast<int64_t>(g) * d.rows + row;  // output (g, row)
    if (threadIdx.x == 0) {
      partial[task] = s;
      __threadfence();  // the partial is visible device-wide before the ticket is taken
      last = atomicAdd(tickets + o, 1u) == static_cast<unsigned>(t.nchunks - 1);
    }
    __syncthreads();
    if (last && threadIdx.x < 32) {  // every partial of row o is written: sum them, fixed order
      __threadfence();
      const double* p = partial + t.task_begin + row * t.nchunks;
      double r = 0.0;
      for (int64_t c = threadIdx.x; c < t.nchunks; c += 32) r += __ldcg(p + c);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) r += __shfl_down_sync(0xffffffffu, r, off);
      if (threadIdx.x == 0) out[o] = r;
    }
    // `last` is rewritten only after block_sum's barriers of the next task: no extra barrier needed
  }
}

// The shared checks (csrc/ops.h) plus the device.
void check_cuda_pair_inputs(const at::Tensor& a, const at::Tensor& b) {
  check_pair_inputs(a, b);
  TORCH_CHECK(a.is_cuda(), "vitplast: the CUDA kernels need CUDA tensors, got ", a.device());
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Elements each task of one tensor aims at, from that tensor's `total` = rows * K elements per operand.
// VITPLAST_CUDA_CHUNK=<n> forces n (rounded up to kChunkAlign) for every tensor: a tuning knob for
// bench/gpu_paired.py --chunk-sweep, read per call so that one process can compare several values.
int64_t chunk_target(int64_t total) {
  if (const char* forced = std::getenv("VITPLAST_CUDA_CHUNK")) {
    const long long n = std::atoll(forced);
    if (n > 0) return cdiv(n, kChunkAlign) * kChunkAlign;
  }
  return std::clamp<int64_t>(cdiv(std::max<int64_t>(total, 1), kTargetTasks), kMinChunk, kMaxChunk);
}

// Descriptor of one pair of tensors, chunked by its own size (chunk_target); `keep` holds any
// contiguous copy alive until the launch.
TensorDesc make_desc(const PairLayout& p, std::vector<at::Tensor>& keep) {
  keep.push_back(p.a);
  keep.push_back(p.b);
  TensorDesc t{};
  t.a = p.a.const_data_ptr();
  t.b = p.b.const_data_ptr();
  t.a_bs = p.la.batch_stride; t.a_inner = p.la.inner; t.a_os = p.la.outer_stride;
  t.b_bs = p.lb.batch_stride; t.b_inner = p.lb.inner; t.b_os = p.lb.outer_stride;
  t.row_len = p.row_len;
  t.seg_len = std::max<int64_t>(p.seg_len, 1);
  const int64_t k = std::max<int64_t>(p.row_len, 1);
  const int64_t target = chunk_target(p.rows * p.row_len);
  const int64_t pieces = cdiv(k, target);  // equal chunks: no short tail task per row
  t.chunk = cdiv(cdiv(k, pieces), kChunkAlign) * kChunkAlign;
  t.nchunks = cdiv(k, t.chunk);
  const int64_t vec_elems = 16 / p.a.element_size();
  const auto ok = [&](int64_t v) { return v % vec_elems == 0; };
  const bool ptrs = reinterpret_cast<uintptr_t>(t.a) % 16 == 0 && reinterpret_cast<uintptr_t>(t.b) % 16 == 0;
  t.aligned = ptrs && ok(t.a_bs) && ok(t.b_bs) && ok(t.seg_len) && ok(t.a_os) && ok(t.b_os) &&
              ok(t.a_inner) && ok(t.b_inner);
  // contiguous rows: only the row starts matter (runs start at chunk starts, multiples of kChunkAlign)
  if (t.seg_len >= t.row_len) t.aligned = ptrs && ok(t.a_bs) && ok(t.b_bs);
  return t;
}

// Tasks of the windows of 2^kHintShift tasks: hints[w] = the tensor owning task w << kHintShift.
int64_t hint_count(int64_t tasks) { return cdiv(tasks, int64_t{1} << kHintShift); }

void fill_hints(const TensorDesc* descs, int64_t groups, int64_t tasks, int32_t* hints) {
  int64_t g = 0;
  for (int64_t w = 0; w < hint_count(tasks); ++w) {
    const int64_t first = w << kHintShift;
    while (g + 1 < groups && descs[g + 1].task_begin <= first) ++g;
    hints[w] = static_cast<int32_t>(g);
  }
}

// `table_host`: pinned bytes, the G descriptors then the hints (G > 1 only).
void launch(const at::Tensor& like, DescArg& d, const at::Tensor& table_host, at::Tensor& out) {
  const c10::cuda::CUDAGuard guard(like.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor table_dev;
  if (d.groups > 1) {
    table_dev = table_host.to(like.device(), /*non_blocking=*/true);
    d.table = reinterpret_cast<const TensorDesc*>(table_dev.const_data_ptr());
    d.hints = reinterpret_cast<const int32_t*>(static_cast<const char*>(table_dev.const_data_ptr()) +
                                               d.groups * sizeof(TensorDesc));
  }
  const int64_t outputs = d.groups * d.rows;
  // one buffer: tasks double partials, then outputs unsigned tickets (zeroed here, on the stream)
  at::Tensor scratch = at::empty({d.tasks + cdiv(outputs, 2)}, like.options().dtype(at::kDouble));
  double* partial = scratch.data_ptr<double>();
  unsigned* tickets = reinterpret_cast<unsigned*>(partial + d.tasks);
  C10_CUDA_CHECK(cudaMemsetAsync(tickets, 0, outputs * sizeof(unsigned), stream));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(d.tasks, kMaxGrid));
  double* o = out.data_ptr<double>();
  switch (like.scalar_type()) {
    case at::kFloat:
      paired_kernel<float><<<grid, kThreads, 0, stream>>>(d, partial, tickets, o);
      break;
    case at::kHalf:
      paired_kernel<at::Half><<<grid, kThreads, 0, stream>>>(d, partial, tickets, o);
      break;
    case at::kBFloat16:
      paired_kernel<at::BFloat16><<<grid, kThreads, 0, stream>>>(d, partial, tickets, o);
      break;
    default:
      TORCH_CHECK(false, "vitplast: unsupported dtype ", like.scalar_type());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor pair_sq_distances_cuda(const at::Tensor& a, const at::Tensor& b) {
  check_cuda_pair_inputs(a, b);
  const int64_t rows = a.size(0);
  at::Tensor out = at::empty({rows}, a.options().dtype(at::kDouble));
  if (rows == 0) return out;
  if (a.numel() == 0) return out.zero_();
  std::vector<at::Tensor> keep;
  DescArg d{};
  const PairLayout p = make_pair_layout(a, b);
  d.one = make_desc(p, keep);
  d.one.task_begin = 0;
  d.groups = 1;
  d.rows = rows;
  d.tasks = rows * d.one.nchunks;
  launch(a, d, at::Tensor(), out);
  return out;
}

at::Tensor pair_sq_distances_grouped_cuda(at::TensorList a, at::TensorList b) {
  TORCH_CHECK(a.size() == b.size(), "vitplast: a and b must hold as many tensors, got ", a.size(),
              " and ", b.size());
  TORCH_CHECK(!a.empty(), "vitplast: the group is empty");
  const int64_t groups = static_cast<int64_t>(a.size());
  const int64_t rows = a[0].size(0);
  for (int64_t g = 0; g < groups; ++g) {
    check_cuda_pair_inputs(a[g], b[g]);
    TORCH_CHECK(a[g].size(0) == rows, "vitplast: every tensor of the group must have ", rows,
                " rows, tensor ", g, " has ", a[g].size(0));
    TORCH_CHECK(a[g].device() == a[0].device() && a[g].scalar_type() == a[0].scalar_type(),
                "vitplast: every tensor of the group must share the device and dtype of tensor 0; "
                "tensor ", g, " differs");
  }
  at::Tensor out = at::empty({groups, rows}, a[0].options().dtype(at::kDouble));
  if (rows == 0) return out;
  std::vector<at::Tensor> keep;
  std::vector<TensorDesc> descs(groups);
  int64_t tasks = 0;
  for (int64_t g = 0; g < groups; ++g) {
    descs[g] = make_desc(make_pair_layout(a[g], b[g]), keep);
    descs[g].task_begin = tasks;
    tasks += rows * descs[g].nchunks;  // empty rows (K == 0) get one task that sums nothing
  }
  const int64_t desc_bytes = groups * static_cast<int64_t>(sizeof(TensorDesc));
  at::Tensor table = at::empty({desc_bytes + hint_count(tasks) * static_cast<int64_t>(sizeof(int32_t))},
                               at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(table.data_ptr(), descs.data(), desc_bytes);
  fill_hints(descs.data(), groups, tasks,
             reinterpret_cast<int32_t*>(static_cast<char*>(table.data_ptr()) + desc_bytes));
  DescArg d{};
  d.one = descs[0];
  d.groups = static_cast<int32_t>(groups);
  d.rows = rows;
  d.tasks = tasks;
  launch(a[0], d, table, out);
  return out;
}

}  // namespace
}  // namespace vitplast

TORCH_LIBRARY_IMPL(vitplast, CUDA, m) {
  m.impl("pair_sq_distances", &vitplast::pair_sq_distances_cuda);
  m.impl("pair_sq_distances_grouped", &vitplast::pair_sq_distances_grouped_cuda);
}
