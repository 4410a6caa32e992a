#include "mtb/core/parallel.h"

#include <atomic>
#include <condition_variable>
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace mtb {
namespace {

class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop(); }

  int threads() const { return int(workers_.size()) + 1; }

  void resize(int threads) {
    stop();
    quit_ = false;
    const uint64_t now = generation_.load();  // new workers wait for the next job, not a past one
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i, now] { work(i, now); });
  }

  void run(int64_t n, const RangeFn& fn) {
    const int parts = int(std::min<int64_t>(n, threads()));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn, n_ = n, parts_ = parts;
      pending_.store(parts - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    slice(0);
    // Wait for the workers' slices: spin a little, then yield.
    for (int spins = 0; pending_.load(std::memory_order_acquire) > 0; ++spins)
      if (spins > 2000) std::this_thread::yield();
  }

 private:
  void slice(int part) {
    if (part >= parts_) return;
    const int64_t begin = n_ * part / parts_, end = n_ * (part + 1) / parts_;
    (*fn_)(begin, end, part);
  }

  void work(int part, uint64_t seen) {
    for (;;) {
      // Spin briefly (work often comes in bursts: one matmul after another), then sleep.
      uint64_t g = generation_.load(std::memory_order_acquire);
      for (int spins = 0; g == seen && spins < 5000; ++spins) {
        if (spins > 200) std::this_thread::yield();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return quit_ || generation_.load(std::memory_order_acquire) != seen; });
        if (quit_) return;
        g = generation_.load(std::memory_order_acquire);
      }
      if (quit_) return;
      seen = g;
      if (part < parts_) {
        slice(part);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  int parts_ = 0;
  std::atomic<bool> quit_{false};
};

int default_threads() {
  if (const char* env = std::getenv("MTB_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? int(hw) : 1;
}

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

void parallel_for_ranges(int64_t n, RangeFn fn, bool serial) {
  if (n <= 0) return;
  if (serial || n == 1 || pool().threads() == 1) {
    fn(0, n, 0);
    return;
  }
  pool().run(n, fn);
}

int num_threads() { return pool().threads(); }
void set_num_threads(int n) { pool().resize(n < 1 ? 1 : n); }

}  // namespace mtb
