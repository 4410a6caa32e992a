// Dynamic task scheduling on top of core/parallel.h: parallel_for gives each thread one
// fixed range, so a thread that the OS deschedules (a busy, shared machine) holds the
// whole call up. run_tasks hands out tasks one at a time from a shared counter instead, so
// the threads that are running do the work. Which thread runs a task never changes what the
// task computes, so results stay independent of the thread count and of the schedule.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "mtb/core/parallel.h"

namespace mtb::kernels {

// Calls fn(task, thread) for every task in [0, n); `thread` indexes per-thread scratch.
// Runs inline when n <= 1 or `serial`.
template <typename F>
void run_tasks(int64_t n, F&& fn, bool serial = false) {
  if (n <= 0) return;
  if (serial || n == 1 || num_threads() == 1) {
    for (int64_t t = 0; t < n; ++t) fn(t, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  parallel_for(num_threads(), [&](int64_t, int64_t, int thread) {
    for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < n;
         t = next.fetch_add(1, std::memory_order_relaxed))
      fn(t, thread);
  });
}

// Element-wise and row-wise loops go to the pool in pieces of about kChunk elements (a fixed
// size, so what each element computes does not depend on the thread count); small calls
// (under 4 pieces) run inline.
constexpr int64_t kChunk = 1 << 14;

// body(begin, end) over items [0, n) of `size` elements each, kChunk / size items a piece.
template <typename F>
void run_pieces(int64_t n, int64_t size, F&& body) {
  const int64_t per = std::max<int64_t>(1, kChunk / std::max<int64_t>(size, 1));
  run_tasks((n + per - 1) / per, [&](int64_t i, int) { body(i * per, std::min(n, (i + 1) * per)); },
            n * size < 4 * kChunk);
}

}  // namespace mtb::kernels
