// A small pool of worker threads for the kernels. Workers spin briefly for new work and
// then sleep on a condition variable, so an idle engine uses no CPU and a busy one does
// not fight other processes for the cores (OpenMP's default spinning did, badly, on 2 cores).
#pragma once
#include <cstdint>
#include <functional>

namespace mtb {

// Calls fn(begin, end) on disjoint ranges covering [0, n), split into at most one range
// per thread, and returns when all are done. Runs inline when n <= 1 or work is small
// (`serial` true). Not reentrant: kernels call it, never nested.
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn, bool serial = false);

// Threads used by parallel_for (the caller included): MTB_THREADS, else the machine's cores.
int num_threads();
void set_num_threads(int n);

}  // namespace mtb
