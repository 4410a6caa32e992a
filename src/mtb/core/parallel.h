// A small pool of worker threads for the kernels. Workers spin briefly for new work and
// then sleep on a condition variable, so an idle engine uses no CPU and a busy one does
// not fight other processes for the cores (OpenMP's default spinning did, badly, on 2 cores).
#pragma once
#include <cstdint>

namespace mtb {

// A non-owning reference to a callable fn(begin, end, thread); never allocates.
class RangeFn {
 public:
  template <typename F>
  RangeFn(F& f) : obj_(&f), call_([](void* o, int64_t b, int64_t e, int t) { (*static_cast<F*>(o))(b, e, t); }) {}
  void operator()(int64_t b, int64_t e, int t) const { call_(obj_, b, e, t); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t, int);
};

void parallel_for_ranges(int64_t n, RangeFn fn, bool serial);

// Calls fn(begin, end, thread) on disjoint ranges covering [0, n), at most one range per
// thread (thread in [0, num_threads()), distinct per range: index per-thread scratch with
// it), and returns when all are done. Runs inline when n <= 1 or `serial` (small work).
// Not reentrant: kernels call it, never nested. Allocates nothing.
template <typename F>
void parallel_for(int64_t n, F&& fn, bool serial = false) {
  parallel_for_ranges(n, RangeFn(fn), serial);
}

// Threads used by parallel_for (the caller included): MTB_THREADS, else the machine's cores.
int num_threads();
void set_num_threads(int n);

}  // namespace mtb
