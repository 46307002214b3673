// Runs run_task(t) for every t in [0, tasks) on torch's intra-op threads, handing out tasks in
// shrinking chunks (guided scheduling): each thread claims max(1, left / (kGuidedDiv * threads))
// tasks at a time from one shared counter, so the early chunks are long contiguous streams and the
// last ones are single tasks.
//
// Why not an even static split (at::parallel_for over the tasks): on a VM whose memory bandwidth is
// shared with its neighbours, and whose second OpenMP thread wakes up late for a short call, the two
// halves of a static split finish at different times and the call lasts as long as the slower half.
// Claimed chunks let the thread that is ahead take the other's share. Measured on the 2-core Zen 4 VM
// (bench/measured/cpu-2026-12-03-guided, median times against the static split in the same rounds):
// pair_sq_distances 1.00-1.09x on inputs larger than the last-level cache, 1.7-3.6x on a 2.4M-element
// pair in cache, where the static split waited for the second thread to wake.
//
// The caller writes one result per task, indexed by t, and combines them in task order afterwards, so
// results do not depend on which thread ran which task (bitwise repeatable at any thread count).
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace vitplast {

constexpr int64_t kGuidedDiv = 4;  // chunk = what is left / (kGuidedDiv * threads), at least 1 task

template <class F>
void run_tasks_guided(int64_t tasks, const F& run_task) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), tasks));
  std::atomic<int64_t> next{0};
  // One index per thread; inside another parallel region at::parallel_for runs the whole range on the
  // calling thread, whose first index then claims every task.
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t w = begin; w < end; ++w) {
      int64_t t0 = next.load(std::memory_order_relaxed);
      while (t0 < tasks) {
        const int64_t n = std::max<int64_t>(1, (tasks - t0) / (kGuidedDiv * threads));
        if (!next.compare_exchange_weak(t0, t0 + n, std::memory_order_relaxed)) continue;
        for (int64_t t = t0; t < std::min(tasks, t0 + n); ++t) run_task(t);
        t0 = next.load(std::memory_order_relaxed);
      }
    }
  });
}

}  // namespace vitplast
