// Backward of the element-wise and row-wise operations (ops.h), the fused softmax
// cross-entropy, and the few out-of-place forwards training needs. Plain loops (no
// intrinsics); the activations and the cross-entropy are split over the pool's threads in
// fixed chunks of elements or rows (results do not depend on the thread count), the norms,
// RoPE and the small reductions run on the calling thread.
#pragma once
#include <cstdint>

#include "mtb/kernels/ops.h"

namespace mtb::kernels {

// RMSNorm y = g * x * r, r = 1/sqrt(mean(x^2) + eps), per row of n (r recomputed from x):
// dx (+)= r (g dy - x r^2 mean(g dy x)), dg += sum over rows of dy x r.
// accumulate: add to dx, else overwrite it. Row strides in elements.
void rmsnorm_backward(float* dx, int64_t dx_stride, const float* x, int64_t x_stride, const float* g,
                      const float* dy, int64_t dy_stride, float* dg, int rows, int n, float eps,
                      bool accumulate);

// LayerNorm y = g * xhat + b, xhat = (x - mean) r: dx (+)= r (dxhat - mean(dxhat) - xhat
// mean(dxhat xhat)) with dxhat = g dy; dg += dy xhat; db += dy (db may be null). Contiguous rows.
void layernorm_backward(float* dx, const float* x, const float* g, const float* dy, float* dg, float* db,
                        int rows, int n, float eps, bool accumulate);

// The transpose of rope() (a rotation by minus the angle), in place on the gradient; same
// arguments and layouts as rope().
void rope_backward(float* dx, int n_tokens, int64_t token_stride, int n_heads, int64_t head_stride,
                   int rot_dim, const float* cos, const float* sin, RopeLayout layout);

// out[i] = silu(gate[i]) * up[i] (out-of-place SwiGLU middle, keeping gate for the backward).
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
// From dout: dgate = dout up silu'(gate), dup = dout silu(gate).
void swiglu_backward(float* dgate, float* dup, const float* gate, const float* up, const float* dout, int64_t n);

// out[i] = gelu_tanh(x[i]) out of place; dx = dout gelu_tanh'(x) (dx may alias dout).
void gelu_tanh_forward(float* out, const float* x, int64_t n);
void gelu_tanh_backward(float* dx, const float* x, const float* dout, int64_t n);

// Softmax cross-entropy over rows of `vocab` logits, fused: returns the summed loss
// (log-sum-exp minus the target's logit) over rows whose target is not ignore_index, and
// replaces the logits by grad_scale * (softmax - onehot(target)) (zeros for ignored rows).
// Targets other than ignore_index must lie in [0, vocab).
double cross_entropy(float* logits, const int32_t* targets, int rows, int vocab, int32_t ignore_index,
                     float grad_scale);

// db[n] += sum over rows m of dy[m, n]   (dy [rows, n]).
void bias_backward(float* db, const float* dy, int rows, int n);

// dtable[ids[m], :] += dx[m, :] for m < rows (embedding rows, d wide).
void embedding_backward(float* dtable, const int32_t* ids, const float* dx, int rows, int d);

}  // namespace mtb::kernels
