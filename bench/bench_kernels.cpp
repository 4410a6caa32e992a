// Kernel benchmarks (Google Benchmark): each fast kernel beside its scalar twin.
//   build/mtb_bench_kernels --benchmark_filter=Matmul
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "mtb/core/dtype.h"
#include "mtb/kernels/attention.h"
#include "mtb/kernels/matmul.h"

namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Args: M (tokens), N (out), K (in), dtype (0 f32, 1 bf16, 2 f16, 3 q8_0), fast (1) or scalar (0).
// The decode shapes with N*K of 64M and more outgrow every last-level cache we met, so they
// stream the weights from memory as decoding does.
void BM_Matmul(benchmark::State& state) {
  const int M = int(state.range(0)), N = int(state.range(1)), K = int(state.range(2));
  constexpr mtb::DType kTypes[] = {mtb::DType::F32, mtb::DType::BF16, mtb::DType::F16, mtb::DType::Q8_0};
  const mtb::DType t = kTypes[state.range(3)];
  const bool fast = state.range(4) != 0;
  const auto x = randn(size_t(M) * K, 1), wf = randn(size_t(N) * K, 2);
  std::vector<uint8_t> wq(t == mtb::DType::F32 ? 0 : mtb::dtype_bytes(t, wf.size()));
  if (t != mtb::DType::F32) mtb::from_f32(t, wf.data(), wq.data(), wf.size());
  const void* w = t == mtb::DType::F32 ? static_cast<const void*>(wf.data()) : wq.data();
  std::vector<float> y(size_t(M) * N);
  for (auto _ : state) {
    if (fast) mtb::kernels::matmul(y.data(), x.data(), w, t, nullptr, M, N, K);
    else mtb::kernels::matmul_ref(y.data(), x.data(), w, t, nullptr, M, N, K);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["GB/s(W)"] = benchmark::Counter(double(mtb::dtype_bytes(t, size_t(N) * K)),
                                                 benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Matmul)
    ->ArgNames({"M", "N", "K", "dtype", "fast"})
    ->Args({1, 4096, 1024, 0, 1})->Args({1, 4096, 1024, 1, 1})->Args({1, 4096, 1024, 0, 0})->Args({1, 4096, 1024, 3, 1})
    ->Args({1, 65536, 2048, 0, 1})->Args({1, 65536, 2048, 1, 1})->Args({1, 65536, 2048, 3, 1})
    ->Args({1, 131072, 1024, 1, 1})->Args({1, 131072, 1024, 3, 1})->Args({1, 32768, 4096, 1, 1})
    ->Args({16, 3072, 1024, 1, 1})->Args({16, 65536, 1024, 1, 1})->Args({16, 3072, 1024, 3, 1})
    ->Args({16, 1024, 3072, 1, 1})->Args({16, 1024, 2048, 1, 1})
    ->Args({32, 3072, 1024, 1, 1})->Args({32, 65536, 1024, 1, 1})->Args({48, 3072, 1024, 1, 1})->Args({48, 65536, 1024, 1, 1})
    ->Args({64, 1024, 1024, 0, 1})->Args({64, 1024, 1024, 1, 1})->Args({64, 1024, 1024, 0, 0})
    ->Args({256, 3072, 1024, 0, 1})->Args({256, 3072, 1024, 1, 1})
    ->UseRealTime();

// Args: T (queries = keys), heads, kv heads, head dim, fast.
void BM_Attention(benchmark::State& state) {
  const int T = int(state.range(0)), H = int(state.range(1)), KV = int(state.range(2)), dh = int(state.range(3));
  const bool fast = state.range(4) != 0;
  // K and V rows padded by a cache line, as the KV cache pads rows of a multiple of 512 bytes.
  const int64_t row = int64_t(KV) * dh + (KV * dh * 4 % 512 == 0 ? 16 : 0);
  const auto q = randn(size_t(T) * H * dh, 1), k = randn(size_t(T) * row, 2), v = randn(size_t(T) * row, 3);
  std::vector<float> out(size_t(T) * H * dh);
  mtb::kernels::AttentionArgs a;
  a.n_queries = T, a.n_heads = H, a.n_kv_heads = KV, a.qk_dim = dh, a.v_dim = dh, a.scale = 0.1f;
  a.q = q.data(), a.q_stride = int64_t(H) * dh, a.k = k.data(), a.k_stride = row;
  a.v = v.data(), a.v_stride = row, a.out = out.data(), a.out_stride = int64_t(H) * dh;
  for (auto _ : state) {
    if (fast) mtb::kernels::attention(a);
    else mtb::kernels::attention_ref(a);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * H * dh * 2 * (double(T) * (T + 1) / 2),
                                                 benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"T", "H", "KV", "dh", "fast"})
    ->Args({256, 16, 8, 128, 1})->Args({256, 16, 8, 128, 0})->Args({512, 16, 8, 128, 1})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
