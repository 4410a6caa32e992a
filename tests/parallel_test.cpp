#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "mtb/core/parallel.h"

namespace mtb {
namespace {

TEST(Parallel, RangesCoverEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (int64_t n : {1, 2, 5, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 50; ++rep)
        parallel_for(n, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
      for (auto& h : hits) ASSERT_EQ(h.load(), 50) << "threads " << threads << " n " << n;
    }
  }
  set_num_threads(2);
}

}  // namespace
}  // namespace mtb
