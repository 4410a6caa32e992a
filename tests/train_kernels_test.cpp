// Training's kernels and numerics: the backward GEMM and attention against their scalar
// twins, every row-wise backward against finite differences of a float64 forward, and the
// trainer's own properties (micro-batches, thread counts, schedule, clipping, weight decay,
// bad input). Gradients against PyTorch are in tests/train/ (reference label).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/attention_grad.h"
#include "mtb/kernels/cpu.h"
#include "mtb/kernels/matmul_grad.h"
#include "mtb/kernels/ops_grad.h"
#include "mtb/model/config.h"
#include "mtb/tools/init.h"
#include "mtb/train/forward_backward.h"
#include "mtb/train/optim.h"
#include "mtb/train/trainable.h"
#include "test_util.h"

namespace mtb {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

struct GemmCase {
  int M, N, K;
};

class GemmTwins : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTwins, FastEqualsScalarForTheThreeProductsOfALinearLayer) {
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU: only the scalar path runs";
  const auto [M, N, K] = GetParam();
  const auto x = randn(size_t(M) * K, 1), w = randn(size_t(N) * K, 2), dy = randn(size_t(M) * N, 3);
  struct Product {
    int m, n, k;
    kernels::MatView a, b;
  };
  const Product products[] = {
      {M, N, K, {x.data(), K, 1}, {w.data(), 1, K}},    // y = x W^T
      {M, K, N, {dy.data(), N, 1}, {w.data(), K, 1}},   // dx = dy W
      {N, K, M, {dy.data(), 1, N}, {x.data(), K, 1}}};  // dW = dy^T x
  for (const Product& p : products)
    for (bool acc : {false, true}) {
      std::vector<float> fast = randn(size_t(p.m) * p.n, 4), ref = fast, narrow = fast;
      kernels::gemm_avx2(p.m, p.n, p.k, p.a, p.b, fast.data(), p.n, acc);
      kernels::gemm_ref(p.m, p.n, p.k, p.a, p.b, ref.data(), p.n, acc);
      EXPECT_LE(max_diff(fast, ref), 1e-5 * max_abs(ref) + 1e-6) << p.m << "x" << p.n << "x" << p.k << " acc " << acc;
      // The 512-bit tiles (when the CPU has AVX-512F) give exactly the 256-bit results.
      kernels::gemm_allow_avx512(false);
      kernels::gemm_avx2(p.m, p.n, p.k, p.a, p.b, narrow.data(), p.n, acc);
      kernels::gemm_allow_avx512(true);
      EXPECT_EQ(fast, narrow) << p.m << "x" << p.n << "x" << p.k << " acc " << acc;
    }
}

TEST_P(GemmTwins, SixteenBitBIsWidenedAsItIsPacked) {
  // Prefill's product with BF16 / F16 weights: B = W^T read straight from the weights, and B
  // stored the other way (rows contiguous in n), against the scalar twin, at both widths.
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU: only the scalar path runs";
  const auto [M, N, K] = GetParam();
  const auto x = randn(size_t(M) * K, 1), w = randn(size_t(N) * K, 2);
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) w16[i] = t == DType::BF16 ? f32_to_bf16(w[i]) : f32_to_f16(w[i]);
    const float* wp = reinterpret_cast<const float*>(w16.data());  // (the GemmTerm convention)
    for (kernels::MatView b : {kernels::MatView{wp, 1, K}, kernels::MatView{wp, N, 1}}) {
      // kind 0: the scalar twin; 1: 256 bits; 2: 512 bits where the CPU has them.
      auto product = [&](int kind) {
        std::vector<float> c(size_t(M) * N);
        kernels::GemmJob j;
        j.M = M, j.N = N, j.C = c.data(), j.ldc = N;
        kernels::GemmTerm term{K, {x.data(), K, 1}, b};
        term.b_type = t;
        j.add(term);
        kernels::gemm_allow_avx512(kind == 2);
        if (kind == 0) kernels::gemm_jobs_ref(&j, 1);
        else kernels::gemm_jobs_avx2(&j, 1);
        kernels::gemm_allow_avx512(true);
        return c;
      };
      const auto ref = product(0), narrow = product(1), fast = product(2);
      EXPECT_LE(max_diff(fast, ref), 1e-5 * max_abs(ref) + 1e-6) << dtype_name(t) << " cs " << b.cs;
      EXPECT_EQ(fast, narrow) << dtype_name(t) << " cs " << b.cs;
      if (M * N * K > 0) {
        EXPECT_GT(max_abs(ref), 0.0) << "the reference is all zeros";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTwins,
                         ::testing::Values(GemmCase{1, 1, 1}, GemmCase{7, 17, 5}, GemmCase{6, 16, 256}, GemmCase{12, 64, 40},
                                           GemmCase{97, 257, 300}, GemmCase{13, 300, 513}, GemmCase{200, 40, 0}));

TEST(GemmJobs, SeveralJobsAndSumsOfProductsInOneCallEqualTheScalarTwin) {
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU: only the scalar path runs";
  const int M = 70, d = 40, n1 = 56, n2 = 24;
  const auto dy1 = randn(size_t(M) * n1, 1), dy2 = randn(size_t(M) * n2, 2), x = randn(size_t(M) * d, 3);
  const auto w1 = randn(size_t(n1) * d, 4), w2 = randn(size_t(n2) * d, 5);
  struct Out {
    std::vector<float> dx, dw1, dw2, y, y2, y3, empty;
  } fast, ref;
  for (Out* o : {&fast, &ref}) {
    o->dx = randn(size_t(M) * d, 6), o->dw1 = randn(w1.size(), 7), o->dw2 = randn(w2.size(), 8);
    o->y.assign(size_t(M) * n1, 0.0f), o->empty = randn(12, 9);
    o->y2.assign(size_t(M) * n2, 0.0f), o->y3.assign(size_t(30) * n2, 0.0f);
    kernels::GemmJob dx;  // dx = dy1 W1 + dy2 W2 (overwritten)
    dx.M = M, dx.N = d, dx.C = o->dx.data(), dx.ldc = d;
    dx.add(kernels::linear_backward_x_term(dy1.data(), w1.data(), n1, d));
    dx.add(kernels::linear_backward_x_term(dy2.data(), w2.data(), n2, d));
    kernels::GemmJob empty;  // no terms, not accumulating: zeros
    empty.M = 3, empty.N = 4, empty.C = o->empty.data(), empty.ldc = 4;
    const kernels::GemmJob jobs[] = {kernels::linear_backward_w_job(o->dw1.data(), dy1.data(), x.data(), M, n1, d),
                                     dx, kernels::linear_forward_job(o->y.data(), x.data(), w1.data(), M, n1, d),
                                     kernels::linear_backward_w_job(o->dw2.data(), dy2.data(), x.data(), M, n2, d),
                                     empty,
                                     // y's A again (its packed copy is shared), and its first 30 rows (not shared)
                                     kernels::linear_forward_job(o->y2.data(), x.data(), w2.data(), M, n2, d),
                                     kernels::linear_forward_job(o->y3.data(), x.data(), w2.data(), 30, n2, d)};
    if (o == &fast) kernels::gemm_jobs_avx2(jobs, 7);
    else kernels::gemm_jobs_ref(jobs, 7);
  }
  EXPECT_LE(max_diff(fast.y2, ref.y2), 1e-5 * max_abs(ref.y2));
  EXPECT_LE(max_diff(fast.y3, ref.y3), 1e-5 * max_abs(ref.y3));
  EXPECT_LE(max_diff(fast.dx, ref.dx), 1e-5 * max_abs(ref.dx));
  EXPECT_LE(max_diff(fast.dw1, ref.dw1), 1e-5 * max_abs(ref.dw1));
  EXPECT_LE(max_diff(fast.dw2, ref.dw2), 1e-5 * max_abs(ref.dw2));
  EXPECT_LE(max_diff(fast.y, ref.y), 1e-5 * max_abs(ref.y));
  EXPECT_EQ(fast.empty, std::vector<float>(12, 0.0f) );
  EXPECT_EQ(ref.empty, fast.empty);
}

TEST(GemmThreads, ResultsDoNotDependOnTheThreadCount) {
  const int M = 300, N = 520, K = 270;
  const auto x = randn(size_t(M) * K, 5), w = randn(size_t(N) * K, 6);
  std::vector<float> one(size_t(M) * N), three(size_t(M) * N);
  const int before = num_threads();
  set_num_threads(1);
  kernels::gemm(M, N, K, {x.data(), K, 1}, {w.data(), 1, K}, one.data(), N, false);
  set_num_threads(3);
  kernels::gemm(M, N, K, {x.data(), K, 1}, {w.data(), 1, K}, three.data(), N, false);
  set_num_threads(before);
  EXPECT_EQ(one, three);
}

struct AttnCase {
  int seqs, T, H, KV, qk, dv;
};

class AttentionGradTwins : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionGradTwins, FastEqualsScalarForwardAndBackward) {
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU: only the scalar path runs";
  const AttnCase c = GetParam();
  const size_t rows = size_t(c.seqs) * c.T;
  const auto q = randn(rows * c.H * c.qk, 1), k = randn(rows * c.KV * c.qk, 2), v = randn(rows * c.KV * c.dv, 3);
  const auto dout = randn(rows * c.H * c.dv, 4);
  kernels::AttentionTrainArgs a;
  a.n_seqs = c.seqs, a.seq_len = c.T, a.n_heads = c.H, a.n_kv_heads = c.KV, a.qk_dim = c.qk, a.v_dim = c.dv;
  a.scale = 1.0f / std::sqrt(float(c.qk));
  a.q = q.data(), a.q_stride = int64_t(c.H) * c.qk, a.k = k.data(), a.k_stride = int64_t(c.KV) * c.qk;
  a.v = v.data(), a.v_stride = int64_t(c.KV) * c.dv, a.out_stride = int64_t(c.H) * c.dv;
  a.dout = dout.data(), a.dout_stride = a.out_stride;
  struct Out {
    std::vector<float> out, lse, dq, dk, dv;
  } fast, ref;
  for (Out* o : {&fast, &ref}) {
    o->out.assign(rows * c.H * c.dv, 0), o->lse.assign(rows * c.H, 0);
    o->dq.assign(q.size(), 0), o->dk.assign(k.size(), 7), o->dv.assign(v.size(), 7);  // dk, dv are overwritten
    kernels::AttentionTrainArgs b = a;
    b.out = o->out.data(), b.lse = o->lse.data(), b.dq = o->dq.data(), b.dk = o->dk.data(), b.dv = o->dv.data();
    if (o == &fast) kernels::attention_train_forward_avx2(b), kernels::attention_train_backward_avx2(b);
    else kernels::attention_train_forward_ref(b), kernels::attention_train_backward_ref(b);
  }
  EXPECT_LE(max_diff(fast.out, ref.out), 1e-5 * max_abs(ref.out));
  EXPECT_LE(max_diff(fast.lse, ref.lse), 1e-5 * max_abs(ref.lse));
  EXPECT_LE(max_diff(fast.dq, ref.dq), 1e-5 * max_abs(ref.dq));
  EXPECT_LE(max_diff(fast.dk, ref.dk), 1e-5 * max_abs(ref.dk));
  EXPECT_LE(max_diff(fast.dv, ref.dv), 1e-5 * max_abs(ref.dv));
}

INSTANTIATE_TEST_SUITE_P(Layouts, AttentionGradTwins,
                         ::testing::Values(AttnCase{2, 37, 4, 2, 16, 16},   // GQA
                                           AttnCase{1, 20, 4, 1, 32, 32},   // MQA
                                           AttnCase{3, 9, 2, 2, 8, 8},      // MHA
                                           AttnCase{2, 30, 4, 4, 48, 32},   // MLA-like: qk != v
                                           AttnCase{2, 25, 3, 3, 24, 12}));  // sizes not multiples of 8

// Analytic backward (float) against central differences of a float64 forward, for
// L = sum(w * f(x)) with random w.
void check_grad(const std::function<void(const std::vector<double>&, std::vector<double>&)>& f64,
                const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& analytic,
                const char* what) {
  std::vector<double> xd(x.begin(), x.end()), y;
  auto loss = [&](const std::vector<double>& in) {
    f64(in, y);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += w[i] * y[i];
    return s;
  };
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-6;
    std::vector<double> p = xd, m = xd;
    p[i] += h, m[i] -= h;
    const double num = (loss(p) - loss(m)) / (2 * h);
    worst = std::max(worst, std::fabs(num - analytic[i]));
    scale = std::max(scale, std::fabs(num));
  }
  EXPECT_LE(worst, 1e-4 * scale + 1e-6) << what;
}

TEST(OpsGrad, NormsAgainstFiniteDifferences) {
  const int rows = 3, n = 12;
  const float eps = 1e-5f;
  const auto x = randn(size_t(rows) * n, 1, 2.0f), g = randn(n, 2), b = randn(n, 3), w = randn(size_t(rows) * n, 4);
  std::vector<float> dx(x.size()), dg(n, 0.0f), db(n, 0.0f);
  kernels::rmsnorm_backward(dx.data(), n, x.data(), n, g.data(), w.data(), n, dg.data(), rows, n, eps, false);
  check_grad([&](const std::vector<double>& in, std::vector<double>& y) {
    y.resize(in.size());
    for (int r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < n; ++i) ss += in[r * n + i] * in[r * n + i];
      const double inv = 1 / std::sqrt(ss / n + eps);
      for (int i = 0; i < n; ++i) y[r * n + i] = g[i] * in[r * n + i] * inv;
    }
  }, x, w, dx, "rmsnorm dx");
  kernels::layernorm_backward(dx.data(), x.data(), g.data(), w.data(), dg.data(), db.data(), rows, n, eps, false);
  check_grad([&](const std::vector<double>& in, std::vector<double>& y) {
    y.resize(in.size());
    for (int r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int i = 0; i < n; ++i) mean += in[r * n + i] / n;
      for (int i = 0; i < n; ++i) var += (in[r * n + i] - mean) * (in[r * n + i] - mean) / n;
      for (int i = 0; i < n; ++i) y[r * n + i] = g[i] * (in[r * n + i] - mean) / std::sqrt(var + eps) + b[i];
    }
  }, x, w, dx, "layernorm dx");
}

TEST(OpsGrad, RopeBackwardIsTheTransposeInBothLayouts) {
  const int T = 5, H = 2, dh = 8;
  std::vector<float> cs(T * dh / 2), sn(cs.size());
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < dh / 2; ++i) cs[t * dh / 2 + i] = std::cos(0.3f * t * (i + 1)), sn[t * dh / 2 + i] = std::sin(0.3f * t * (i + 1));
  for (auto layout : {kernels::RopeLayout::RotateHalf, kernels::RopeLayout::Interleaved}) {
    const auto x = randn(size_t(T) * H * dh, 1), w = randn(x.size(), 2);
    std::vector<float> dx = w;
    kernels::rope_backward(dx.data(), T, H * dh, H, dh, dh, cs.data(), sn.data(), layout);
    // <w, R x> = <R^T w, x>
    std::vector<float> rx = x;
    kernels::rope(rx.data(), T, H * dh, H, dh, dh, cs.data(), sn.data(), layout);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < x.size(); ++i) lhs += double(w[i]) * rx[i], rhs += double(dx[i]) * x[i];
    EXPECT_NEAR(lhs, rhs, 1e-5 * std::fabs(lhs) + 1e-5);
  }
}

TEST(OpsGrad, ActivationsAndCrossEntropyAgainstFiniteDifferences) {
  const int n = 40;
  const auto gate = randn(n, 1, 2.0f), up = randn(n, 2), w = randn(n, 3);
  std::vector<float> dgate(n), dup(n), dx(n);
  kernels::swiglu_backward(dgate.data(), dup.data(), gate.data(), up.data(), w.data(), n);
  check_grad([&](const std::vector<double>& in, std::vector<double>& y) {
    y.resize(n);
    for (int i = 0; i < n; ++i) y[i] = in[i] / (1 + std::exp(-in[i])) * up[i];
  }, gate, w, dgate, "swiglu dgate");
  kernels::gelu_tanh_backward(dx.data(), gate.data(), w.data(), n);
  check_grad([&](const std::vector<double>& in, std::vector<double>& y) {
    y.resize(n);
    for (int i = 0; i < n; ++i)
      y[i] = 0.5 * in[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (in[i] + 0.044715 * in[i] * in[i] * in[i])));
  }, gate, w, dx, "gelu dx");
  // Cross-entropy: 3 rows of 7 logits, the middle one ignored; gradient of the mean.
  const int V = 7;
  const auto z = randn(3 * V, 4, 3.0f);
  const int32_t targets[3] = {2, -100, 6};
  std::vector<float> dz = z;
  const double loss = kernels::cross_entropy(dz.data(), targets, 3, V, -100, 0.5f);
  auto f = [&](const std::vector<double>& in, std::vector<double>& y) {
    y.assign(1, 0.0);
    for (int r : {0, 2}) {
      double mx = -1e300, s = 0;
      for (int i = 0; i < V; ++i) mx = std::max(mx, in[r * V + i]);
      for (int i = 0; i < V; ++i) s += std::exp(in[r * V + i] - mx);
      y[0] += 0.5 * (mx + std::log(s) - in[r * V + targets[r]]);
    }
  };
  std::vector<double> y;
  f(std::vector<double>(z.begin(), z.end()), y);
  EXPECT_NEAR(loss * 0.5, y[0], 1e-5 * y[0]);
  check_grad(f, z, {1.0f}, dz, "cross-entropy");
  for (int i = 0; i < V; ++i) EXPECT_EQ(dz[V + i], 0.0f) << "ignored row";
}

// Small models for the trainer's own properties: example-3m's shape shrunk, MLA with
// q-lora, and a GPT-2 block (LayerNorm, GELU MLP, learned positions, biases, tied).
enum class Kind { Gqa, Mla, Gpt2 };
ModelConfig tiny(Kind kind = Kind::Gqa) {
  ModelConfig c = preset("example-3m");
  c.vocab = 97, c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8, c.d_ff = 48;
  c.nope_layers = {false, true};
  if (kind == Kind::Mla) {
    c.family = "deepseek_v3", c.attention = AttentionKind::MLA, c.qk_norm = false, c.n_kv_heads = 4;
    c.q_lora_rank = 16, c.kv_lora_rank = 16, c.qk_nope_head_dim = 8, c.qk_rope_head_dim = 4, c.v_head_dim = 8;
    c.head_dim = 12, c.rope_layout = kernels::RopeLayout::Interleaved, c.nope_layers.clear();
  }
  if (kind == Kind::Gpt2) {
    c = preset("gpt2-124m");
    c.vocab = 97, c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 8, c.d_ff = 64;
    c.max_context = 16;
  }
  return c;
}

struct Batch {
  std::vector<int32_t> ids, targets;
};
Batch batch(int B, int T, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  for (int i = 0; i < B * T; ++i) b.ids.push_back(int32_t(rng() % V)), b.targets.push_back(int32_t(rng() % V));
  b.targets[3] = train::kIgnoreIndex;
  return b;
}

TEST(Trainer, MicroBatchesAccumulateToTheWholeBatchsGradient) {
  for (Kind kind : {Kind::Gqa, Kind::Mla, Kind::Gpt2}) {
    const ModelConfig c = tiny(kind);
    train::Trainable whole = train::Trainable::from_tensors(c, init_weights(c, 3, DType::F32, 0.1f), "init");
    train::Trainable parts = whole;
    const int B = 3, T = 11;
    const Batch b = batch(B, T, c.vocab, 1);
    train::Activations acts;
    const double loss = train::forward_backward_mean(whole, b.ids.data(), b.targets.data(), B, T, acts);
    const int64_t n = train::count_targets(b.targets.data(), B * T);
    train::LossSum sum;
    for (int i = 0; i < B; ++i) {
      const auto part = train::forward_backward(parts, b.ids.data() + i * T, b.targets.data() + i * T, 1, T, acts,
                                                1.0f / float(n));
      sum.sum += part.sum, sum.count += part.count;
    }
    EXPECT_EQ(sum.count, n);
    EXPECT_NEAR(sum.mean(), loss, 1e-6 * loss);
    EXPECT_LE(max_diff(whole.grads(), parts.grads()), 1e-5 * max_abs(whole.grads())) << int(kind);
  }
}

TEST(Trainer, StepsDoNotDependOnTheThreadCount) {
  const ModelConfig c = tiny();
  const Batch b = batch(2, 16, c.vocab, 2);
  std::vector<float> result[2];
  const int before = num_threads();
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : 3);
    train::Trainable t = train::Trainable::from_tensors(c, init_weights(c, 5, DType::F32, 0.1f), "init");
    train::AdamW opt(t, {});
    train::Activations acts;
    for (int s = 0; s < 3; ++s) {
      t.zero_grads();
      train::forward_backward_mean(t, b.ids.data(), b.targets.data(), 2, 16, acts);
      train::clip_grad_norm(t, 1.0);
      opt.step(t, 1e-2);
    }
    result[run] = t.values();
  }
  set_num_threads(before);
  EXPECT_EQ(result[0], result[1]);
}

TEST(Optim, ScheduleWarmsUpThenDecaysByCosine) {
  train::LrSchedule s;
  s.lr_max = 1.0, s.lr_min = 0.1, s.warmup = 4, s.total = 14;
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_NEAR(s.at(9), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 5 / 9)), 1e-12);
  EXPECT_DOUBLE_EQ(s.at(13), 0.1);
  EXPECT_DOUBLE_EQ(s.at(100), 0.1);
}

TEST(Optim, ClippingAndWeightDecayOnMatricesOnly) {
  const ModelConfig c = tiny();
  train::Trainable t = train::Trainable::from_tensors(c, init_weights(c, 1, DType::F32), "init");
  for (float& g : t.grads()) g = 1.0f;
  const double norm = train::clip_grad_norm(t, 2.0);
  EXPECT_NEAR(norm, std::sqrt(double(t.size())), 1e-6 * norm);
  EXPECT_NEAR(train::grad_norm(t), 2.0, 1e-5);
  // Zero gradients: only decoupled decay moves parameters, and only matrices.
  t.zero_grads();
  const std::vector<float> before = t.values();
  train::AdamWConfig oc;
  oc.weight_decay = 0.5;
  train::AdamW opt(t, oc);
  opt.step(t, 0.1);
  for (const train::Param& p : t.params()) {
    const float b = before[p.offset], a = t.values()[p.offset];
    if (p.spec.role == TensorRole::Matrix) EXPECT_FLOAT_EQ(a, b * 0.95f) << p.spec.name;
    else EXPECT_EQ(a, b) << p.spec.name;
  }
}

TEST(Trainer, BadBatchesAreClearErrors) {
  ModelConfig c = tiny();
  train::Trainable t(c);
  train::Activations acts;
  Batch b = batch(1, 8, c.vocab, 3);
  b.ids[2] = c.vocab;
  EXPECT_ERROR_CONTAINS(train::forward_backward_mean(t, b.ids.data(), b.targets.data(), 1, 8, acts),
                        "token id 97 at batch row 0, position 2 is outside the vocabulary");
  b.ids[2] = 0, b.targets[5] = -1;
  EXPECT_ERROR_CONTAINS(train::forward_backward_mean(t, b.ids.data(), b.targets.data(), 1, 8, acts),
                        "target -1 at batch row 0, position 5");
  EXPECT_ERROR_CONTAINS(train::forward_backward_mean(t, b.ids.data(), b.targets.data(), 0, 8, acts), "empty batch");
  c = preset("gpt2-124m");
  c.vocab = 50, c.d_model = 16, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 2, c.head_dim = 8, c.d_ff = 32;
  c.max_context = 4;
  train::Trainable g(c);
  b = batch(1, 8, c.vocab, 3);
  EXPECT_ERROR_CONTAINS(train::forward_backward_mean(g, b.ids.data(), b.targets.data(), 1, 8, acts),
                        "exceed the learned position table (4)");
}

}  // namespace
}  // namespace mtb
