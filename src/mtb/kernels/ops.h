// Element-wise and row-wise operations. These are plain loops (the compiler vectorizes
// them); they are cheap next to the matrix products and attention. rmsnorm, rope, silu_mul
// and add split prefill-sized calls between the pool's threads (pieces of a fixed size, so
// the results do not depend on the thread count); a single token's call runs inline.
#pragma once
#include <cstdint>

namespace mtb::kernels {

// out[r,:] = g * x[r,:] / sqrt(mean(x[r,:]^2) + eps), for rows r of n elements each.
// Accumulates in fp32. x and out may alias. Row strides in elements. The AVX2 twin (picked
// when available) sums the squares in 16 lanes, then across them.
void rmsnorm(float* out, int64_t out_stride, const float* x, int64_t x_stride, const float* g,
             int rows, int n, float eps);
void rmsnorm_ref(float* out, int64_t out_stride, const float* x, int64_t x_stride, const float* g,
                 int rows, int n, float eps);
void rmsnorm_avx2(float* out, int64_t out_stride, const float* x, int64_t x_stride, const float* g,
                  int rows, int n, float eps);

// out[r,:] = g * (x - mean) / sqrt(var + eps) + b   (LayerNorm; b may be null).
void layernorm(float* out, const float* x, const float* g, const float* b, int rows, int n,
               float eps);

enum class RopeLayout {
  RotateHalf,   // dim i pairs with dim i + rot_dim/2 (Llama/Qwen in HF)
  Interleaved,  // dims (2i, 2i+1) form pair i (the RoPE paper, llama2.c, DeepSeek)
};

// Rotates, in place, the first rot_dim dims of each of n_heads vectors in each of n_tokens
// rows: x[t*token_stride + h*head_stride + d]. cos/sin: [n_tokens][rot_dim/2], the angle of
// pair i at token t. Pair i of a head is (i, i + rot_dim/2) or (2i, 2i+1) by layout.
void rope(float* x, int n_tokens, int64_t token_stride, int n_heads, int64_t head_stride,
          int rot_dim, const float* cos, const float* sin, RopeLayout layout);

// gate[i] = silu(gate[i]) * up[i] for n elements (SwiGLU's middle). The AVX2 twin (picked
// when available) computes e^-g with avx2::exp8 (relative error under 3e-7).
void silu_mul(float* gate, const float* up, int64_t n);
void silu_mul_ref(float* gate, const float* up, int64_t n);
void silu_mul_avx2(float* gate, const float* up, int64_t n);

// y[i] = e^x[i] with avx2::exp8 (for its test; the kernels call exp8 itself), and with its
// 512-bit twin Vec512::exp (vec_avx.h; only where the CPU has AVX-512 F/BW/DQ/VL).
void exp_avx2(const float* x, float* y, int64_t n);
void exp_avx512(const float* x, float* y, int64_t n);

// x[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (GPT-2's GELU).
void gelu_tanh(float* x, int64_t n);

// x[r,:] += y[r,:] over n elements (residual adds).
void add(float* x, const float* y, int64_t n);

}  // namespace mtb::kernels
