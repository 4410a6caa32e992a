#include "mtb/train/optim.h"

#include <algorithm>
#include <cmath>

namespace mtb::train {

AdamW::AdamW(const Trainable& t, AdamWConfig config) : config_(config) {
  m_.assign(size_t(t.size()), 0.0f);
  v_.assign(size_t(t.size()), 0.0f);
  for (const Param& p : t.params()) decay_.push_back(p.spec.role == TensorRole::Matrix);
}

void AdamW::step(Trainable& t, double lr) {
  ++steps_;
  const double b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  const double bc1 = 1.0 - std::pow(b1, double(steps_)), bc2_sqrt = std::sqrt(1.0 - std::pow(b2, double(steps_)));
  const double step_size = lr / bc1;
  float* w = t.values().data();
  const float* g = t.grads().data();
  for (size_t pi = 0; pi < t.params().size(); ++pi) {
    const Param& p = t.params()[pi];
    const double decay = decay_[pi] ? 1.0 - lr * config_.weight_decay : 1.0;
    for (size_t i = p.offset; i < p.offset + size_t(p.numel); ++i) {
      const double gi = g[i];
      const double m = b1 * double(m_[i]) + (1.0 - b1) * gi;
      const double v = b2 * double(v_[i]) + (1.0 - b2) * gi * gi;
      m_[i] = float(m), v_[i] = float(v);
      const double wi = double(w[i]) * decay;
      w[i] = float(wi - step_size * m / (std::sqrt(v) / bc2_sqrt + eps));
    }
  }
}

double grad_norm(const Trainable& t) {
  double s = 0.0;
  for (float g : t.grads()) s += double(g) * double(g);
  return std::sqrt(s);
}

double clip_grad_norm(Trainable& t, double max_norm) {
  const double norm = grad_norm(t);
  if (max_norm > 0 && norm > max_norm) {
    const float scale = float(max_norm / (norm + 1e-6));
    for (float& g : t.grads()) g *= scale;
  }
  return norm;
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup) return lr_max * double(step + 1) / double(warmup);
  const double span = double(std::max<int64_t>(1, int64_t(total) - 1 - warmup));
  const double progress = std::min(1.0, double(step - warmup) / span);
  return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace mtb::train
