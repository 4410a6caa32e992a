// Every fast kernel against its scalar twin, plus the RoPE relative-position property.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "mtb/core/dtype.h"
#include "mtb/kernels/attention.h"
#include "mtb/kernels/cpu.h"
#include "mtb/kernels/matmul.h"
#include "mtb/kernels/matmul_grad.h"
#include "mtb/kernels/ops.h"

namespace mtb {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint8_t> encode(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(dtype_bytes(t, int64_t(v.size())));
  from_f32(t, v.data(), out.data(), v.size());
  return out;
}

std::vector<uint16_t> to_half(const std::vector<float>& v, DType t) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = t == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  return out;
}

TEST(DType, ConversionsRoundTrip) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-3.5f)), -3.5f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // tie rounds to even
  EXPECT_EQ(f16_to_f32(f32_to_f16(0.333251953125f)), 0.333251953125f);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);                    // overflow to inf
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  for (float f : {0.1f, -7.25f, 1e-3f, 123.456f}) {
    EXPECT_NEAR(f16_to_f32(f32_to_f16(f)), f, std::fabs(f) * 1e-3);
    EXPECT_NEAR(bf16_to_f32(f32_to_bf16(f)), f, std::fabs(f) * 8e-3);
  }
}

struct MatmulCase {
  int M, N, K;
};

class MatmulTwins : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTwins, FastEqualsScalarForEveryWeightType) {
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU: only the scalar path runs";
  const auto [M, N, K] = GetParam();
  const auto x = randn(size_t(M) * K, 1), w = randn(size_t(N) * K, 2), bias = randn(size_t(N), 3);
  // Both widths where the CPU has AVX-512 (BF16 decode and the prefill GEMM use 512 bits), and
  // both modes (batch-invariant sums, and the fastest kernel for each size).
  for (int mode = 0; mode < 4; ++mode) {
    const bool wide = mode % 2 == 0;
    kernels::gemm_allow_avx512(wide);
    kernels::set_batch_invariant(mode < 2);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      std::vector<uint16_t> half;
      const void* wp = w.data();
      if (t != DType::F32) half = to_half(w, t), wp = half.data();
      std::vector<float> fast(size_t(M) * N), ref(size_t(M) * N);
      for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
        kernels::matmul_avx2(fast.data(), x.data(), wp, t, b, M, N, K);
        kernels::matmul_ref(ref.data(), x.data(), wp, t, b, M, N, K);
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(fast[i], ref[i], 1e-5f * (std::sqrt(float(K)) + std::fabs(ref[i])))
              << dtype_name(t) << (wide ? " 512-bit" : " 256-bit") << (mode < 2 ? " invariant" : "") << " M=" << M
              << " N=" << N << " K=" << K << " at " << i;
      }
    }
  }
  kernels::gemm_allow_avx512(true);
  kernels::set_batch_invariant(true);
}

TEST(Matmul, EachRowGetsTheSameBitsWhateverTheOtherRows) {
  // Batch invariance: row m of an M-row product equals the same row computed alone (a decode
  // step), bit for bit, for M on both sides of the prefill threshold, every weight type, with
  // and without bias, and K with a tail past the whole lane groups.
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  for (int K : {64, 1000, 29 * 32, 13})
    for (DType t : {DType::F32, DType::BF16, DType::F16, DType::Q8_0}) {
      if (t == DType::Q8_0 && K % 32) continue;
      const int N = 45;
      const auto w = encode(randn(size_t(N) * K, 31), t);
      const auto bias = randn(size_t(N), 32);
      for (int M : {3, 16, 17, 40}) {
        const auto x = randn(size_t(M) * K, 33 + M);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          std::vector<float> all(size_t(M) * N), one(static_cast<size_t>(N));
          kernels::matmul(all.data(), x.data(), w.data(), t, b, M, N, K);
          for (int m = 0; m < M; ++m) {
            kernels::matmul(one.data(), x.data() + size_t(m) * K, w.data(), t, b, 1, N, K);
            for (int n = 0; n < N; ++n)
              ASSERT_EQ(std::memcmp(&all[size_t(m) * N + n], &one[size_t(n)], 4), 0)
                  << dtype_name(t) << " K=" << K << " M=" << M << " row " << m << " col " << n << ": "
                  << all[size_t(m) * N + n] << " vs " << one[size_t(n)];
          }
        }
      }
    }
}

TEST(Q8_0, QuantizeDequantizeAsGgmlDefinesIt) {
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[size_t(i)] = float(i - 20) * 0.37f;
  const auto q = encode(v, DType::Q8_0);
  ASSERT_EQ(q.size(), 68u);
  std::vector<float> back(64);
  to_f32(DType::Q8_0, q.data(), back.data(), 64);
  for (int b = 0; b < 2; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[size_t(b * 32 + i)]));
    const float d = f16_to_f32(f32_to_f16(amax / 127.0f));
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(back[size_t(b * 32 + i)], v[size_t(b * 32 + i)], d * 0.5f + 1e-6f);
  }
  EXPECT_EQ(static_cast<int8_t>(q[2 + 31 + 34]), 127);  // the block's largest value maps to 127
}

TEST(Q8_0, ActivationRoundingTwinsGiveTheSameBits) {
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  // Random blocks, a zero block, exact ties (x·127/max = n + 0.5), a negative maximum,
  // tiny and huge magnitudes.
  std::vector<float> x = randn(32 * 8, 7);
  for (int i = 32; i < 64; ++i) x[size_t(i)] = 0.0f;
  for (int i = 64; i < 96; ++i) x[size_t(i)] = float(i - 80) * 0.25f;  // with scale 0.5: ties
  x[64 + 31] = 127.0f / 2;                                         // max 63.5: scale 0.5
  x[100] = -40.0f;
  for (int i = 128; i < 160; ++i) x[size_t(i)] *= 1e-30f;
  for (int i = 160; i < 192; ++i) x[size_t(i)] *= 1e30f;
  const int K = int(x.size());
  std::vector<int8_t> q_ref(x.size()), q_fast(x.size());
  std::vector<float> d_ref(x.size() / 32), d_fast(x.size() / 32);
  kernels::quantize_q8_act(x.data(), K, q_ref.data(), d_ref.data());
  kernels::quantize_q8_act_avx2(x.data(), K, q_fast.data(), d_fast.data());
  EXPECT_EQ(q_ref, q_fast);
  EXPECT_EQ(d_ref, d_fast);
  EXPECT_EQ(d_ref[1], 0.0f);
  EXPECT_EQ(q_ref[100], -127);  // the block's largest magnitude maps to ±127
  for (int i = 0; i < K; ++i) EXPECT_NEAR(d_ref[size_t(i / 32)] * q_ref[size_t(i)], x[size_t(i)], d_ref[size_t(i / 32)] * 0.5001f);
  // Ties round to even: in block 2 the scale is 0.5, so x = 0.25·i gives q = i/2.
  EXPECT_EQ(d_ref[2], 0.5f);
  EXPECT_EQ(q_ref[64 + 17], 0);   // x = 0.25 -> 0.5 -> 0
  EXPECT_EQ(q_ref[64 + 18], 1);   // x = 0.5 -> 1
  EXPECT_EQ(q_ref[64 + 19], 2);   // x = 0.75 -> 1.5 -> 2
  EXPECT_EQ(q_ref[64 + 21], 2);   // x = 1.25 -> 2.5 -> 2
  EXPECT_EQ(q_ref[64 + 13], -2);  // x = -0.75 -> -1.5 -> -2
}

TEST(Q8_0, FastMatmulEqualsScalar) {
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  // Decode-sized products run int8 multiply-adds, prefill-sized ones (M >= 16) the float
  // GEMM over x rounded to Q8_0 and back: both the products the scalar twin sums in int32.
  // Where the CPU has AVX-512 VNNI, decode runs two blocks per 512-bit register (an odd last
  // block apart), so both widths and odd block counts are checked.
  for (auto [M, N, K] : {std::tuple{1, 37, 64}, std::tuple{3, 16, 32}, std::tuple{6, 33, 256}, std::tuple{17, 70, 96},
                         std::tuple{2, 300, 1024}, std::tuple{40, 64, 512}, std::tuple{1, 41, 96}, std::tuple{5, 9, 160}}) {
    const auto x = randn(size_t(M) * K, 1), w = randn(size_t(N) * K, 2), bias = randn(size_t(N), 3);
    auto q = encode(w, DType::Q8_0);
    q[2] = uint8_t(-128), q[2 + 33] = uint8_t(-128);  // ggml never writes -128; the kernels take it all the same
    std::vector<float> fast(size_t(M) * N), ref(size_t(M) * N);
    kernels::matmul_ref(ref.data(), x.data(), q.data(), DType::Q8_0, bias.data(), M, N, K);
    for (bool wide : {true, false}) {
      kernels::gemm_allow_avx512(wide);
      kernels::matmul_avx2(fast.data(), x.data(), q.data(), DType::Q8_0, bias.data(), M, N, K);
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(fast[i], ref[i], 2e-6f * (std::sqrt(float(K)) + std::fabs(ref[i])))
            << (wide ? "512-bit" : "256-bit") << " M=" << M << " K=" << K << " at " << i;
    }
    kernels::gemm_allow_avx512(true);
    // And against the definition in double: x and W rounded to Q8_0, then multiplied.
    std::vector<int8_t> xq(x.size() / size_t(M));
    std::vector<float> xd(size_t(K / 32)), wf(size_t(N) * K);
    to_f32(DType::Q8_0, q.data(), wf.data(), wf.size());
    for (int m = 0; m < M; ++m) {
      kernels::quantize_q8_act(x.data() + size_t(m) * K, K, xq.data(), xd.data());
      for (int n = 0; n < N; ++n) {
        double s = bias[size_t(n)];
        for (int k = 0; k < K; ++k) s += double(xd[size_t(k / 32)]) * xq[size_t(k)] * wf[size_t(n) * K + k];
        ASSERT_NEAR(ref[size_t(m) * N + n], s, 2e-6 * (std::sqrt(double(K)) + std::fabs(s)));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTwins,
                         ::testing::Values(MatmulCase{1, 1, 1}, MatmulCase{1, 33, 7}, MatmulCase{3, 17, 8},
                                           MatmulCase{4, 16, 64}, MatmulCase{5, 31, 100}, MatmulCase{9, 70, 257},
                                           MatmulCase{64, 96, 128}, MatmulCase{13, 300, 520},
                                           MatmulCase{3, 20, 48}, MatmulCase{1, 70, 1040}, MatmulCase{2, 33, 1063}));

TEST(Matmul, ScalarMatchesDoubleDefinition) {
  const int M = 3, N = 5, K = 11;
  const auto x = randn(M * K, 4), w = randn(N * K, 5);
  std::vector<float> y(M * N);
  kernels::matmul_ref(y.data(), x.data(), w.data(), DType::F32, nullptr, M, N, K);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(x[m * K + k]) * w[n * K + k];
      EXPECT_NEAR(y[m * N + n], s, 1e-5);
    }
}

kernels::AttentionArgs make_args(int T, int pos0, int H, int KV, int qk, int dv, const std::vector<float>& q,
                                 const std::vector<float>& k, const std::vector<float>& v, std::vector<float>& out) {
  kernels::AttentionArgs a;
  a.n_queries = T, a.q_pos0 = pos0, a.n_heads = H, a.n_kv_heads = KV, a.qk_dim = qk, a.v_dim = dv;
  a.scale = 1.0f / std::sqrt(float(qk));
  a.q = q.data(), a.q_stride = int64_t(H) * qk;
  a.k = k.data(), a.k_stride = int64_t(KV) * qk;
  a.v = v.data(), a.v_stride = int64_t(KV) * dv;
  a.out = out.data(), a.out_stride = int64_t(H) * dv;
  return a;
}

TEST(Attention, FastEqualsScalar) {
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  struct Case { int T, pos0, H, KV, qk, dv; };
  // Head sizes of whole 512-bit vectors (16, 64, 48/32) run at 512 bits where the CPU has
  // AVX-512; both widths are checked.
  for (bool wide : {true, false}) {
    kernels::gemm_allow_avx512(wide);
    for (Case c : {Case{1, 0, 1, 1, 8, 8}, Case{7, 0, 4, 2, 16, 16}, Case{5, 9, 6, 1, 20, 12},
                   Case{40, 0, 8, 8, 64, 64}, Case{33, 3, 4, 4, 48, 32}, Case{70, 0, 16, 8, 128, 128}}) {
      const int keys = c.pos0 + c.T;
      const auto q = randn(size_t(c.T) * c.H * c.qk, 7), k = randn(size_t(keys) * c.KV * c.qk, 8),
                 v = randn(size_t(keys) * c.KV * c.dv, 9);
      std::vector<float> fast(size_t(c.T) * c.H * c.dv), ref(fast.size());
      kernels::attention_avx2(make_args(c.T, c.pos0, c.H, c.KV, c.qk, c.dv, q, k, v, fast));
      kernels::attention_ref(make_args(c.T, c.pos0, c.H, c.KV, c.qk, c.dv, q, k, v, ref));
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(fast[i], ref[i], 2e-5f) << (wide ? "512-bit" : "256-bit") << " T=" << c.T << " at " << i;
    }
  }
  kernels::gemm_allow_avx512(true);
}

TEST(Attention, FastEqualsScalarWhenKeysAreSplitOrHeadsMany) {
  // Decoding an MLA-like single kv head over a long cache (keys split between tasks and the
  // partial softmaxes merged), GQA over a long cache, more than 64 heads per kv head, and a
  // BF16 / F16 cache.
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  struct Case { int T, pos0, H, KV, qk, dv; DType kv; };
  for (bool wide : {true, false}) {
    kernels::gemm_allow_avx512(wide);
    for (Case c : {Case{1, 1500, 16, 1, 72, 64, DType::F32}, Case{2, 700, 4, 2, 40, 24, DType::F32},
                   Case{3, 10, 80, 1, 16, 8, DType::F32}, Case{1, 900, 8, 1, 36, 32, DType::BF16},
                   Case{17, 300, 6, 2, 24, 16, DType::F16}, Case{1, 1500, 16, 1, 576, 512, DType::F32},
                   Case{5, 600, 8, 2, 64, 64, DType::BF16}, Case{9, 300, 4, 4, 32, 48, DType::F16}}) {
      const int keys = c.pos0 + c.T;
      const auto q = randn(size_t(c.T) * c.H * c.qk, 7), k = randn(size_t(keys) * c.KV * c.qk, 8),
                 v = randn(size_t(keys) * c.KV * c.dv, 9);
      const auto kh = to_half(k, c.kv), vh = to_half(v, c.kv);
      std::vector<float> fast(size_t(c.T) * c.H * c.dv), ref(fast.size());
      for (std::vector<float>* out : {&fast, &ref}) {
        kernels::AttentionArgs a = make_args(c.T, c.pos0, c.H, c.KV, c.qk, c.dv, q, k, v, *out);
        if (c.kv != DType::F32) a.kv_type = c.kv, a.k = kh.data(), a.v = vh.data();
        if (out == &fast) kernels::attention_avx2(a);
        else kernels::attention_ref(a);
      }
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(fast[i], ref[i], 1e-5f * (1.0f + std::fabs(ref[i])))
            << (wide ? "512-bit" : "256-bit") << " H=" << c.H << " pos0=" << c.pos0 << " at " << i;
    }
  }
  kernels::gemm_allow_avx512(true);
}

TEST(Matmul, JobsEqualScalarTwinWithStridesAndBothPaths) {
  // A batch of strided products (MLA's per-head products): decode-sized (M = 1, 3) and
  // prefill-sized (M = 20: the packed GEMM) in every weight type.
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  const int H = 5, K = 64, N = 40;
  for (int M : {1, 3, 20})
    for (DType t : {DType::F32, DType::BF16, DType::F16, DType::Q8_0}) {
      const auto x = randn(size_t(M) * H * K, 21), w = randn(size_t(H) * N * K, 22), bias = randn(size_t(N), 23);
      const auto wt = encode(w, t);
      const size_t wbytes = dtype_bytes(t, int64_t(N) * K);
      std::vector<float> fast(size_t(M) * H * N, -1.0f), ref(fast.size(), -1.0f);
      std::vector<kernels::MatmulJob> fj(H), rj(H);
      for (int h = 0; h < H; ++h) {
        fj[size_t(h)] = {fast.data() + h * N, int64_t(H) * N, x.data() + h * K, int64_t(H) * K,
                         wt.data() + size_t(h) * wbytes, t, h % 2 ? bias.data() : nullptr, M, N, K};
        rj[size_t(h)] = fj[size_t(h)], rj[size_t(h)].y = ref.data() + h * N;
      }
      kernels::matmul_jobs_avx2(fj.data(), H);
      kernels::matmul_jobs_ref(rj.data(), H);
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(fast[i], ref[i], 1e-5f * (std::sqrt(float(K)) + std::fabs(ref[i]))) << dtype_name(t) << " M=" << M << " at " << i;
    }
}

TEST(Attention, CausalAndGroupedAsDefined) {
  // Row 0 sees only key 0, so its output is v[0] of its kv head, whatever the scores.
  const int T = 4, H = 4, KV = 2, dh = 8;
  const auto q = randn(T * H * dh, 10), k = randn(T * KV * dh, 11), v = randn(T * KV * dh, 12);
  std::vector<float> out(T * H * dh);
  kernels::attention_ref(make_args(T, 0, H, KV, dh, dh, q, k, v, out));
  for (int h = 0; h < H; ++h)
    for (int d = 0; d < dh; ++d) EXPECT_FLOAT_EQ(out[h * dh + d], v[(h / 2) * dh + d]);
}

// RoPE: the score of a query at m and a key at n depends only on n - m (chapter, dh = 8).
double rope_score(const std::vector<float>& q, const std::vector<float>& k, int m, int n, kernels::RopeLayout layout) {
  const int dh = 8;
  auto rotate = [&](std::vector<float> x, int pos) {
    std::vector<float> c(dh / 2), s(dh / 2);
    for (int i = 0; i < dh / 2; ++i) {
      const double angle = pos * std::pow(10000.0, -2.0 * i / dh);
      c[i] = float(std::cos(angle)), s[i] = float(std::sin(angle));
    }
    kernels::rope(x.data(), 1, dh, 1, dh, dh, c.data(), s.data(), layout);
    return x;
  };
  const auto qm = rotate(q, m), kn = rotate(k, n);
  double s = 0;
  for (int i = 0; i < dh; ++i) s += double(qm[i]) * kn[i];
  return s;
}

TEST(Rope, ScoreDependsOnlyOnOffsetInBothLayouts) {
  const auto q = randn(8, 0), k = randn(8, 1);
  for (auto layout : {kernels::RopeLayout::RotateHalf, kernels::RopeLayout::Interleaved}) {
    const double s52 = rope_score(q, k, 5, 2, layout), s4037 = rope_score(q, k, 40, 37, layout);
    const double s1010 = rope_score(q, k, 10, 10, layout), s00 = rope_score(q, k, 0, 0, layout);
    const double tol = 1e-5 * (std::fabs(s00) + 1.0);  // fp32 rounding
    EXPECT_NEAR(s52, s4037, tol);
    EXPECT_NEAR(s1010, s00, tol);
    // And it does depend on the offset: a different offset gives a different score.
    EXPECT_GT(std::fabs(rope_score(q, k, 5, 1, layout) - s52), 1e-3);
  }
}

TEST(Rope, LayoutsPairDifferentDims) {
  // One pair rotated by 90 degrees: rotate-half moves dim 0 into dim 2 (dh = 4), interleaved into dim 1.
  std::vector<float> c = {0.0f, 1.0f}, s = {1.0f, 0.0f};
  std::vector<float> x = {1, 0, 0, 0};
  kernels::rope(x.data(), 1, 4, 1, 4, 4, c.data(), s.data(), kernels::RopeLayout::RotateHalf);
  EXPECT_EQ(x, (std::vector<float>{0, 0, 1, 0}));
  x = {1, 0, 0, 0};
  kernels::rope(x.data(), 1, 4, 1, 4, 4, c.data(), s.data(), kernels::RopeLayout::Interleaved);
  EXPECT_EQ(x, (std::vector<float>{0, 1, 0, 0}));
}

TEST(Ops, VectorExpAndSiluTwinsAgainstStdExp) {
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  // Every 1/64 over [-87, 88] plus the ends: e^x within 3e-7 relative of double exp.
  std::vector<float> g;
  for (float v = -87.0f; v <= 88.0f; v += 1.0f / 64) g.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.34657359f, -0.34657359f, 88.5f, -87.3f}) g.push_back(v);
  while (g.size() % 8) g.push_back(0.5f);
  std::vector<float> e(g.size());
  kernels::exp_avx2(g.data(), e.data(), int64_t(g.size()));
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(e[i], std::exp(double(g[i])), 3e-7 * std::exp(double(g[i]))) << "x=" << g[i];
  if (kernels::gemm_avx512()) {
    // The 512-bit twin (attention's softmax) gives the same floats, also past the clamps.
    for (float v : {-INFINITY, INFINITY, -1000.0f, 1000.0f, 88.72283f, 88.7f, -87.33654f}) g.push_back(v);
    while (g.size() % 16) g.push_back(-0.5f);
    std::vector<float> e8(g.size()), e16(g.size());
    kernels::exp_avx2(g.data(), e8.data(), int64_t(g.size()));
    kernels::exp_avx512(g.data(), e16.data(), int64_t(g.size()));
    for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(e16[i], e8[i]) << "x=" << g[i];
  }
  // SiLU·up: the twins agree, also where e^-g under- or overflows.
  std::vector<float> gate = randn(1003, 11, 4.0f), up = randn(1003, 12);
  gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = -88.0f, gate[3] = 0.0f;
  std::vector<float> fast = gate, ref = gate;
  kernels::silu_mul_avx2(fast.data(), up.data(), int64_t(fast.size()));
  kernels::silu_mul_ref(ref.data(), up.data(), int64_t(ref.size()));
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(fast[i], ref[i], 1e-6f * (1.0f + std::fabs(ref[i]))) << "g=" << gate[i];
}

TEST(Ops, SiluMulGivesAnElementTheSameBitsWhereverItFalls) {
  // Batch invariance: SwiGLU runs over T x d_ff elements at once, so an element must not get
  // other bits for being in the tail of a call (d_ff not a multiple of 8, another T).
  const int d_ff = 13, T = 5;
  const auto g = randn(size_t(d_ff) * T, 41), u = randn(size_t(d_ff) * T, 42);
  std::vector<float> all = g;
  kernels::silu_mul(all.data(), u.data(), int64_t(all.size()));
  for (int t = 0; t < T; ++t) {
    std::vector<float> row(g.begin() + t * d_ff, g.begin() + (t + 1) * d_ff);
    kernels::silu_mul(row.data(), u.data() + size_t(t) * d_ff, d_ff);
    for (int i = 0; i < d_ff; ++i)
      ASSERT_EQ(std::memcmp(&row[size_t(i)], &all[size_t(t) * d_ff + i], 4), 0) << "row " << t << " element " << i;
  }
}

TEST(Ops, RmsnormTwinsAgree) {
  if (!kernels::use_avx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  // Rows of 1024 (a model's width), 128 (a head, strided), and odd sizes with scalar tails.
  for (int n : {1024, 128, 23, 7, 40}) {
    const int rows = 5;
    const int64_t stride = n + 3;
    const auto x = randn(size_t(rows) * stride, 31, 3.0f), g = randn(size_t(n), 32);
    std::vector<float> fast(x.size(), -7.0f), ref(x.size(), -7.0f);
    kernels::rmsnorm_avx2(fast.data(), stride, x.data(), stride, g.data(), rows, n, 1e-6f);
    kernels::rmsnorm_ref(ref.data(), stride, x.data(), stride, g.data(), rows, n, 1e-6f);
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(fast[i], ref[i], 1e-6f * (1.0f + std::fabs(ref[i]))) << "n=" << n << " at " << i;
    // In place, as the q/k norms run.
    std::vector<float> inplace = x;
    kernels::rmsnorm(inplace.data(), stride, inplace.data(), stride, g.data(), rows, n, 1e-6f);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < n; ++i) ASSERT_EQ(inplace[size_t(r * stride + i)], fast[size_t(r * stride + i)]);
  }
}

TEST(Ops, NormsAndActivationsAsDefined) {
  std::vector<float> x = {1, 2, 3, 4}, g = {1, 0.5f, 2, 1}, out(4);
  kernels::rmsnorm(out.data(), 4, x.data(), 4, g.data(), 1, 4, 0.0f);
  const float rms = std::sqrt(30.0f / 4);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out[i], g[i] * x[i] / rms);
  std::vector<float> b = {0.1f, 0.2f, 0.3f, 0.4f};
  kernels::layernorm(out.data(), x.data(), g.data(), b.data(), 1, 4, 0.0f);
  const float sd = std::sqrt(1.25f);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], g[i] * (x[i] - 2.5f) / sd + b[i], 1e-6);
  std::vector<float> gate = {-1.0f, 0.0f, 2.0f}, up = {2.0f, 3.0f, 0.5f};
  kernels::silu_mul(gate.data(), up.data(), 3);
  EXPECT_NEAR(gate[0], -1.0 / (1 + std::exp(1.0)) * 2, 1e-6);
  EXPECT_EQ(gate[1], 0.0f);
  EXPECT_NEAR(gate[2], 2.0 / (1 + std::exp(-2.0)) * 0.5, 1e-6);
  std::vector<float> gl = {1.0f};
  kernels::gelu_tanh(gl.data(), 1);
  EXPECT_NEAR(gl[0], 0.8411919906, 1e-6);
}

}  // namespace
}  // namespace mtb
