#include "mtb/kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "mtb/kernels/cpu.h"
#include "mtb/kernels/tasks.h"

namespace mtb::kernels {

void rmsnorm(float* out, int64_t out_stride, const float* x, int64_t x_stride, const float* g,
             int rows, int n, float eps) {
  const bool avx2 = use_avx2();
  run_pieces(rows, n, [&](int64_t r0, int64_t r1) {
    float* o = out + r0 * out_stride;
    const float* xr = x + r0 * x_stride;
    if (avx2) rmsnorm_avx2(o, out_stride, xr, x_stride, g, int(r1 - r0), n, eps);
    else rmsnorm_ref(o, out_stride, xr, x_stride, g, int(r1 - r0), n, eps);
  });
}

void rmsnorm_ref(float* out, int64_t out_stride, const float* x, int64_t x_stride, const float* g,
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
  run_pieces(n_tokens, int64_t(n_heads) * rot_dim, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = cos + t * half;
      const float* s = sin + t * half;
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
  });
}

void silu_mul(float* gate, const float* up, int64_t n) {
  const bool avx2 = use_avx2();
  run_pieces(n, 1, [&](int64_t b, int64_t e) {
    if (avx2) silu_mul_avx2(gate + b, up + b, e - b);
    else silu_mul_ref(gate + b, up + b, e - b);
  });
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
  run_pieces(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] += y[i];
  });
}

}  // namespace mtb::kernels
