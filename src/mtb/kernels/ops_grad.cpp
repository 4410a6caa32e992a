#include "mtb/kernels/ops_grad.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mtb/kernels/tasks.h"

namespace mtb::kernels {

void rmsnorm_backward(float* dx, int64_t dx_stride, const float* x, int64_t x_stride, const float* g,
                      const float* dy, int64_t dy_stride, float* dg, int rows, int n, float eps,
                      bool accumulate) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    const float* dyr = dy + r * dy_stride;
    float* dxr = dx + r * dx_stride;
    float ss = 0.0f, dot = 0.0f;
    for (int i = 0; i < n; ++i) {
      ss += xr[i] * xr[i];
      dot += g[i] * dyr[i] * xr[i];
    }
    const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
    const float c = dot * inv * inv / float(n);
    for (int i = 0; i < n; ++i) {
      dg[i] += dyr[i] * xr[i] * inv;
      const float v = inv * (g[i] * dyr[i] - xr[i] * c);
      dxr[i] = accumulate ? dxr[i] + v : v;
    }
  }
}

void layernorm_backward(float* dx, const float* x, const float* g, const float* dy, float* dg, float* db,
                        int rows, int n, float eps, bool accumulate) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + int64_t(r) * n;
    const float* dyr = dy + int64_t(r) * n;
    float* dxr = dx + int64_t(r) * n;
    float mean = 0.0f;
    for (int i = 0; i < n; ++i) mean += xr[i];
    mean /= float(n);
    float var = 0.0f;
    for (int i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float inv = 1.0f / std::sqrt(var / float(n) + eps);
    float sum_d = 0.0f, sum_dx = 0.0f;  // sums of dxhat and dxhat * xhat
    for (int i = 0; i < n; ++i) {
      const float xhat = (xr[i] - mean) * inv, d = g[i] * dyr[i];
      sum_d += d;
      sum_dx += d * xhat;
      dg[i] += dyr[i] * xhat;
      if (db) db[i] += dyr[i];
    }
    const float md = sum_d / float(n), mdx = sum_dx / float(n);
    for (int i = 0; i < n; ++i) {
      const float xhat = (xr[i] - mean) * inv;
      const float v = inv * (g[i] * dyr[i] - md - xhat * mdx);
      dxr[i] = accumulate ? dxr[i] + v : v;
    }
  }
}

void rope_backward(float* dx, int n_tokens, int64_t token_stride, int n_heads, int64_t head_stride,
                   int rot_dim, const float* cos, const float* sin, RopeLayout layout) {
  const int half = rot_dim / 2;
  for (int t = 0; t < n_tokens; ++t) {
    const float* c = cos + int64_t(t) * half;
    const float* s = sin + int64_t(t) * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = dx + t * token_stride + h * head_stride;
      for (int i = 0; i < half; ++i) {
        const int a = layout == RopeLayout::RotateHalf ? i : 2 * i;
        const int b = layout == RopeLayout::RotateHalf ? i + half : 2 * i + 1;
        const float d0 = v[a], d1 = v[b];
        v[a] = d0 * c[i] + d1 * s[i];
        v[b] = d1 * c[i] - d0 * s[i];
      }
    }
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  run_pieces(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float g = gate[i], sig = 1.0f / (1.0f + std::exp(-g));
      out[i] = g * sig * up[i];
    }
  });
}

void swiglu_backward(float* dgate, float* dup, const float* gate, const float* up, const float* dout, int64_t n) {
  run_pieces(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float g = gate[i], s = 1.0f / (1.0f + std::exp(-g)), d = dout[i];
      dup[i] = d * g * s;
      dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
    }
  });
}

namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;
}  // namespace

void gelu_tanh_forward(float* out, const float* x, int64_t n) {
  run_pieces(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i];
      out[i] = 0.5f * v * (1.0f + std::tanh(kGeluK * (v + kGeluC * v * v * v)));
    }
  });
}

void gelu_tanh_backward(float* dx, const float* x, const float* dout, int64_t n) {
  run_pieces(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i], t = std::tanh(kGeluK * (v + kGeluC * v * v * v));
      const float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * v * v);
      dx[i] = dout[i] * d;
    }
  });
}

double cross_entropy(float* logits, const int32_t* targets, int rows, int vocab, int32_t ignore_index,
                     float grad_scale) {
  // Rows in fixed blocks, each block's loss summed in order, then the blocks in order.
  constexpr int kRows = 16;
  const int blocks = (rows + kRows - 1) / kRows;
  std::vector<double> partial(size_t(std::max(blocks, 1)), 0.0);
  run_tasks(blocks, [&](int64_t blk, int) {
    double total = 0.0;
    for (int r = int(blk) * kRows; r < std::min(rows, int(blk + 1) * kRows); ++r) {
      float* z = logits + int64_t(r) * vocab;
      if (targets[r] == ignore_index) {
        std::fill(z, z + vocab, 0.0f);
        continue;
      }
      float mx = z[0];
      for (int i = 1; i < vocab; ++i) mx = std::max(mx, z[i]);
      const float zt = z[targets[r]];
      for (int i = 0; i < vocab; ++i) z[i] = std::exp(z[i] - mx);
      float sum = 0.0f;
      for (int i = 0; i < vocab; ++i) sum += z[i];
      total += double(mx) + std::log(double(sum)) - double(zt);
      const float inv = grad_scale / sum;
      for (int i = 0; i < vocab; ++i) z[i] *= inv;
      z[targets[r]] -= grad_scale;
    }
    partial[size_t(blk)] = total;
  }, int64_t(rows) * vocab < 4 * kChunk);
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void bias_backward(float* db, const float* dy, int rows, int n) {
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i) db[i] += dy[int64_t(r) * n + i];
}

void embedding_backward(float* dtable, const int32_t* ids, const float* dx, int rows, int d) {
  for (int r = 0; r < rows; ++r) {
    float* row = dtable + int64_t(ids[r]) * d;
    for (int i = 0; i < d; ++i) row[i] += dx[int64_t(r) * d + i];
  }
}

}  // namespace mtb::kernels
