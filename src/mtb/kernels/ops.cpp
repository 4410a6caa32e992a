#include "mtb/kernels/ops.h"

#include "mtb/kernels/cpu.h"

#include <cmath>

namespace mtb::kernels {

void rmsnorm(float* out, int64_t out_stride, const float* x, int64_t x_stride, const float* g,
             int rows, int n, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* o = out + r * out_stride;
    float ss = 0.0f;
    for (int i = 0; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int i = 0; i < n; ++i) o[i] = g[i] * (xr[i] * inv);
  }
}

void layernorm(float* out, const float* x, const float* g, const float* b, int rows, int n,
               float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + int64_t(r) * n;
    float* o = out + int64_t(r) * n;
    float mean = 0.0f;
    for (int i = 0; i < n; ++i) mean += xr[i];
    mean /= float(n);
    float var = 0.0f;
    for (int i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float inv = 1.0f / std::sqrt(var / float(n) + eps);
    for (int i = 0; i < n; ++i) o[i] = g[i] * ((xr[i] - mean) * inv) + (b ? b[i] : 0.0f);
  }
}

void rope(float* x, int n_tokens, int64_t token_stride, int n_heads, int64_t head_stride,
          int rot_dim, const float* cos, const float* sin, RopeLayout layout) {
  const int half = rot_dim / 2;
  for (int t = 0; t < n_tokens; ++t) {
    const float* c = cos + int64_t(t) * half;
    const float* s = sin + int64_t(t) * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + t * token_stride + h * head_stride;
      for (int i = 0; i < half; ++i) {
        const int a = layout == RopeLayout::RotateHalf ? i : 2 * i;
        const int b = layout == RopeLayout::RotateHalf ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  if (use_avx2()) silu_mul_avx2(gate, up, n);
  else silu_mul_ref(gate, up, n);
}

void silu_mul_ref(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh(float* x, int64_t n) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
}

void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace mtb::kernels
