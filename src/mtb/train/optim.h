// The optimizer side of training: AdamW, global-norm gradient clipping, the learning-rate
// schedule (linear warmup, then cosine decay), all over a Trainable's fp32 slabs.
#pragma once
#include <cstdint>
#include <vector>

#include "mtb/train/trainable.h"

namespace mtb::train {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
};

// AdamW exactly as torch.optim.AdamW (amsgrad off) computes it, per element:
//   p -= lr * wd * p                       (decoupled decay, matrices only: see below)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Weight decay applies to the parameters whose role is TensorRole::Matrix (every projection,
// the token embedding, the learned position table, an untied head) and never to vectors
// (norm scales and biases). PyTorch's AdamW decays whatever it is given; the reference
// (python/reference/grad_fixtures.py) passes it these two groups. The arithmetic is double
// per element; parameters and state stay fp32.
class AdamW {
 public:
  AdamW(const Trainable& t, AdamWConfig config);
  // One update with the gradients in t.grads() at learning rate lr.
  void step(Trainable& t, double lr);

  const AdamWConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }
  // The state, for checkpoints: first and second moments, one per parameter element.
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  void set_steps(int64_t s) { steps_ = s; }

 private:
  AdamWConfig config_;
  std::vector<float> m_, v_;
  std::vector<uint8_t> decay_;  // per parameter (params() order): 1 = weight decay applies
  int64_t steps_ = 0;
};

// The global L2 norm of every gradient (double accumulation).
double grad_norm(const Trainable& t);
// PyTorch's clip_grad_norm_: when the norm exceeds max_norm, scales every gradient by
// max_norm / (norm + 1e-6). Returns the norm before clipping. max_norm <= 0: no clipping.
double clip_grad_norm(Trainable& t, double max_norm);

// Learning rate at step s (0-based) of `total`: linear warmup to lr_max over `warmup`
// steps ((s + 1) / warmup x lr_max), then cosine decay from lr_max to lr_min at step total - 1:
//   lr_min + (lr_max - lr_min) (1 + cos(pi (s - warmup) / max(1, total - 1 - warmup))) / 2.
struct LrSchedule {
  double lr_max = 1e-3, lr_min = 1e-4;
  int warmup = 0, total = 1;
  double at(int64_t step) const;
};

}  // namespace mtb::train
