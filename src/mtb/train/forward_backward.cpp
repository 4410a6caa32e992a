#include "mtb/train/forward_backward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mtb/core/error.h"
#include "mtb/kernels/attention_grad.h"
#include "mtb/kernels/matmul_grad.h"
#include "mtb/kernels/ops.h"
#include "mtb/kernels/ops_grad.h"
#include "mtb/model/weights.h"

namespace mtb::train {
namespace {

namespace k = kernels;

// A parameter's value and gradient (null when the model has no such tensor).
struct PV {
  const float* w = nullptr;
  float* g = nullptr;
  explicit operator bool() const { return w != nullptr; }
};

class Pass {
 public:
  Pass(Trainable& t, Activations& a, int B, int T, bool backward)
      : t_(t), c_(t.config()), a_(a), B_(B), T_(T), M_(B * T), backward_(backward) {}

  LossSum run(const int32_t* ids, const int32_t* targets, float grad_scale, int32_t ignore_index);

 private:
  PV p(const std::string& name) {
    const Param* q = t_.find(name);
    if (!q) return {};
    return {t_.values().data() + q->offset, t_.grads().data() + q->offset};
  }
  float eps() const { return float(c_.norm_eps); }

  void size_buffers();
  void rope_tables();
  void norm_forward(const std::string& base, const float* x, float* out);
  void norm_backward(const std::string& base, const float* x, const float* dy, float* dx, bool accumulate);
  // Linear layers y = x W^T + b as GEMM jobs (several run as one parallel call):
  // y = x W^T (the bias is added by add_bias); dW += dy^T x; the term dy W of dx.
  kernels::GemmJob forward_job(const std::string& base, const float* x, float* y, int n_out, int n_in);
  void add_bias(const std::string& base, float* y, int n_out);
  kernels::GemmJob weight_grad_job(const std::string& base, const float* x, const float* dy, int n_out, int n_in);
  kernels::GemmTerm input_grad_term(const std::string& base, const float* dy, int n_out, int n_in);
  kernels::GemmJob output_job(float* c, int n, bool accumulate) const;  // a [M, n] result, terms added by the caller
  void bias_grad(const std::string& base, const float* dy, int n_out);  // db += colsum(dy), when there is a bias
  void linear_forward(const std::string& base, const float* x, float* y, int n_out, int n_in);
  void rope(float* x, int64_t token_stride, int n_heads, int64_t head_stride, bool backward);

  void attention_forward(int l);
  void attention_backward(int l);
  void mla_forward(int l);
  void mla_backward(int l);
  void ffn_forward(int l);
  void ffn_backward(int l);

  Trainable& t_;
  const ModelConfig& c_;
  Activations& a_;
  const int B_, T_, M_;
  const bool backward_;
};

void resize(std::vector<float>& v, size_t n) {
  if (v.size() != n) v.assign(n, 0.0f);
}

void Pass::size_buffers() {
  const size_t M = size_t(M_), d = size_t(c_.d_model), H = size_t(c_.n_heads), ff = size_t(c_.d_ff);
  const size_t qk = size_t(c_.qk_head_dim()), dv = size_t(c_.v_dim());
  const size_t kvh = c_.is_mla() ? H : size_t(c_.n_kv_heads);
  a_.layers.resize(size_t(c_.n_layers));
  for (LayerActivations& L : a_.layers) {
    resize(L.x, M * d), resize(L.mid, M * d), resize(L.h1, M * d), resize(L.h2, M * d);
    resize(L.q, M * H * qk), resize(L.k, M * kvh * qk), resize(L.v, M * kvh * dv);
    resize(L.lse, M * H), resize(L.att, M * H * dv);
    if (c_.qk_norm && !c_.is_mla()) resize(L.q_raw, M * H * qk), resize(L.k_raw, M * kvh * qk);
    if (c_.is_mla()) {
      resize(L.kva, M * size_t(c_.kv_lora_rank + c_.qk_rope_head_dim)), resize(L.lat, M * size_t(c_.kv_lora_rank));
      if (c_.q_lora_rank > 0) resize(L.qa_raw, M * size_t(c_.q_lora_rank)), resize(L.qa, M * size_t(c_.q_lora_rank));
    }
    if (c_.ffn == FfnKind::SwiGLU) resize(L.gate, M * ff);
    resize(L.up, M * ff), resize(L.act, M * ff);
  }
  resize(a_.x_final, M * d), resize(a_.h_final, M * d), resize(a_.logits, M * size_t(c_.vocab));
  a_.positions.resize(M);
  for (int m = 0; m < M_; ++m) a_.positions[size_t(m)] = m % T_;
  if (c_.is_mla()) {
    resize(a_.kv, M * H * size_t(c_.qk_nope_head_dim + c_.v_head_dim));
    resize(a_.dkr, M * size_t(c_.qk_rope_head_dim));
  }
  if (!backward_) return;
  resize(a_.dx, M * d), resize(a_.dh, M * d), resize(a_.datt, M * H * dv);
  resize(a_.dq, M * H * qk), resize(a_.dk, M * kvh * qk), resize(a_.dv, M * kvh * dv);
  resize(a_.dact, M * ff), resize(a_.dup, M * ff);
  if (c_.ffn == FfnKind::SwiGLU) resize(a_.dgate, M * ff);
  if (c_.is_mla()) {
    resize(a_.dkv, M * H * size_t(c_.qk_nope_head_dim + c_.v_head_dim));
    resize(a_.dkva, M * size_t(c_.kv_lora_rank + c_.qk_rope_head_dim));
    resize(a_.dlat, M * size_t(c_.kv_lora_rank));
    if (c_.q_lora_rank > 0) resize(a_.dqa, M * size_t(c_.q_lora_rank));
  }
}

void Pass::rope_tables() {
  if (c_.position != PositionKind::RoPE) return;
  const std::vector<double> inv = c_.rope_inv_freq();
  const size_t half = inv.size();
  a_.cos.resize(size_t(T_) * half), a_.sin.resize(size_t(T_) * half);
  for (int t = 0; t < T_; ++t)
    for (size_t i = 0; i < half; ++i) {
      const double angle = double(t) * inv[i];
      a_.cos[size_t(t) * half + i] = float(std::cos(angle));
      a_.sin[size_t(t) * half + i] = float(std::sin(angle));
    }
}

void Pass::norm_forward(const std::string& base, const float* x, float* out) {
  const int d = c_.d_model;
  const PV g = p(base + ".weight");
  if (c_.norm == NormKind::RMSNorm) k::rmsnorm(out, d, x, d, g.w, M_, d, eps());
  else k::layernorm(out, x, g.w, p(base + ".bias").w, M_, d, eps());
}

void Pass::norm_backward(const std::string& base, const float* x, const float* dy, float* dx, bool accumulate) {
  const int d = c_.d_model;
  const PV g = p(base + ".weight");
  if (c_.norm == NormKind::RMSNorm) k::rmsnorm_backward(dx, d, x, d, g.w, dy, d, g.g, M_, d, eps(), accumulate);
  else k::layernorm_backward(dx, x, g.w, dy, g.g, p(base + ".bias").g, M_, d, eps(), accumulate);
}

kernels::GemmJob Pass::forward_job(const std::string& base, const float* x, float* y, int n_out, int n_in) {
  return k::linear_forward_job(y, x, p(base + ".weight").w, M_, n_out, n_in);
}

void Pass::add_bias(const std::string& base, float* y, int n_out) {
  if (const PV b = p(base + ".bias")) k::add_bias(y, b.w, M_, n_out);
}

kernels::GemmJob Pass::weight_grad_job(const std::string& base, const float* x, const float* dy, int n_out, int n_in) {
  return k::linear_backward_w_job(p(base + ".weight").g, dy, x, M_, n_out, n_in);
}

kernels::GemmTerm Pass::input_grad_term(const std::string& base, const float* dy, int n_out, int n_in) {
  return k::linear_backward_x_term(dy, p(base + ".weight").w, n_out, n_in);
}

kernels::GemmJob Pass::output_job(float* c, int n, bool accumulate) const {
  kernels::GemmJob j;
  j.M = M_, j.N = n, j.C = c, j.ldc = n, j.accumulate = accumulate;
  return j;
}

void Pass::bias_grad(const std::string& base, const float* dy, int n_out) {
  if (const PV b = p(base + ".bias")) k::bias_backward(b.g, dy, M_, n_out);
}

void Pass::linear_forward(const std::string& base, const float* x, float* y, int n_out, int n_in) {
  const kernels::GemmJob j = forward_job(base, x, y, n_out, n_in);
  k::gemm_jobs(&j, 1);
  add_bias(base, y, n_out);
}

void Pass::rope(float* x, int64_t token_stride, int n_heads, int64_t head_stride, bool backward) {
  for (int b = 0; b < B_; ++b) {
    float* xb = x + int64_t(b) * T_ * token_stride;
    if (backward)
      k::rope_backward(xb, T_, token_stride, n_heads, head_stride, c_.rope_dim(), a_.cos.data(), a_.sin.data(),
                       c_.rope_layout);
    else
      k::rope(xb, T_, token_stride, n_heads, head_stride, c_.rope_dim(), a_.cos.data(), a_.sin.data(), c_.rope_layout);
  }
}

kernels::AttentionTrainArgs attention_args(const ModelConfig& c, LayerActivations& L, int B, int T, int n_kv) {
  kernels::AttentionTrainArgs a;
  const int H = c.n_heads, qk = c.qk_head_dim(), dv = c.v_dim();
  a.n_seqs = B, a.seq_len = T, a.n_heads = H, a.n_kv_heads = n_kv, a.qk_dim = qk, a.v_dim = dv;
  a.scale = float(c.attention_scale());
  a.q = L.q.data(), a.q_stride = int64_t(H) * qk;
  a.k = L.k.data(), a.k_stride = int64_t(n_kv) * qk;
  a.v = L.v.data(), a.v_stride = int64_t(n_kv) * dv;
  a.out = L.att.data(), a.out_stride = int64_t(H) * dv;
  a.lse = L.lse.data();
  return a;
}

// ---------------------------------------------------------------- standard attention

void Pass::attention_forward(int l) {
  LayerActivations& L = a_.layers[size_t(l)];
  const std::string a = layer_prefix(l) + "self_attn.";
  const int H = c_.n_heads, KV = c_.n_kv_heads, dh = c_.head_dim, d = c_.d_model;
  float* q = c_.qk_norm ? L.q_raw.data() : L.q.data();
  float* kk = c_.qk_norm ? L.k_raw.data() : L.k.data();
  const kernels::GemmJob qkv[] = {forward_job(a + "q_proj", L.h1.data(), q, H * dh, d),
                                  forward_job(a + "k_proj", L.h1.data(), kk, KV * dh, d),
                                  forward_job(a + "v_proj", L.h1.data(), L.v.data(), KV * dh, d)};
  k::gemm_jobs(qkv, 3);
  add_bias(a + "q_proj", q, H * dh), add_bias(a + "k_proj", kk, KV * dh), add_bias(a + "v_proj", L.v.data(), KV * dh);
  if (c_.qk_norm) {
    k::rmsnorm(L.q.data(), dh, q, dh, p(a + "q_norm.weight").w, M_ * H, dh, eps());
    k::rmsnorm(L.k.data(), dh, kk, dh, p(a + "k_norm.weight").w, M_ * KV, dh, eps());
  }
  if (c_.layer_uses_rope(l)) {
    rope(L.q.data(), int64_t(H) * dh, H, dh, false);
    rope(L.k.data(), int64_t(KV) * dh, KV, dh, false);
  }
  k::attention_train_forward(attention_args(c_, L, B_, T_, KV));
  linear_forward(a + "o_proj", L.att.data(), L.mid.data(), d, H * dh);
}

void Pass::attention_backward(int l) {
  LayerActivations& L = a_.layers[size_t(l)];
  const std::string a = layer_prefix(l) + "self_attn.";
  const int H = c_.n_heads, KV = c_.n_kv_heads, dh = c_.head_dim, d = c_.d_model;
  // The branch output's gradient is the residual stream's, a_.dx.
  {
    kernels::GemmJob jobs[] = {weight_grad_job(a + "o_proj", L.att.data(), a_.dx.data(), d, H * dh),
                               output_job(a_.datt.data(), H * dh, false)};
    jobs[1].add(input_grad_term(a + "o_proj", a_.dx.data(), d, H * dh));
    k::gemm_jobs(jobs, 2);
    bias_grad(a + "o_proj", a_.dx.data(), d);
  }
  kernels::AttentionTrainArgs args = attention_args(c_, L, B_, T_, KV);
  args.dout = a_.datt.data(), args.dout_stride = int64_t(H) * dh;
  args.dq = a_.dq.data(), args.dk = a_.dk.data(), args.dv = a_.dv.data();
  k::attention_train_backward(args);
  if (c_.layer_uses_rope(l)) {
    rope(a_.dq.data(), int64_t(H) * dh, H, dh, true);
    rope(a_.dk.data(), int64_t(KV) * dh, KV, dh, true);
  }
  if (c_.qk_norm) {  // in place: dq, dk become the gradients of the raw projections
    const PV qn = p(a + "q_norm.weight"), kn = p(a + "k_norm.weight");
    k::rmsnorm_backward(a_.dq.data(), dh, L.q_raw.data(), dh, qn.w, a_.dq.data(), dh, qn.g, M_ * H, dh, eps(), false);
    k::rmsnorm_backward(a_.dk.data(), dh, L.k_raw.data(), dh, kn.w, a_.dk.data(), dh, kn.g, M_ * KV, dh, eps(), false);
  }
  kernels::GemmJob jobs[] = {weight_grad_job(a + "q_proj", L.h1.data(), a_.dq.data(), H * dh, d),
                             weight_grad_job(a + "k_proj", L.h1.data(), a_.dk.data(), KV * dh, d),
                             weight_grad_job(a + "v_proj", L.h1.data(), a_.dv.data(), KV * dh, d),
                             output_job(a_.dh.data(), d, false)};
  jobs[3].add(input_grad_term(a + "q_proj", a_.dq.data(), H * dh, d));
  jobs[3].add(input_grad_term(a + "k_proj", a_.dk.data(), KV * dh, d));
  jobs[3].add(input_grad_term(a + "v_proj", a_.dv.data(), KV * dh, d));
  k::gemm_jobs(jobs, 4);
  bias_grad(a + "q_proj", a_.dq.data(), H * dh);
  bias_grad(a + "k_proj", a_.dk.data(), KV * dh);
  bias_grad(a + "v_proj", a_.dv.data(), KV * dh);
}

// ---------------------------------------------------------------- MLA (plain form)

void Pass::mla_forward(int l) {
  LayerActivations& L = a_.layers[size_t(l)];
  const std::string a = layer_prefix(l) + "self_attn.";
  const int H = c_.n_heads, nope = c_.qk_nope_head_dim, dr = c_.qk_rope_head_dim, dv = c_.v_head_dim;
  const int qk = nope + dr, dc = c_.kv_lora_rank, d = c_.d_model, crow = dc + dr, ql = c_.q_lora_rank;
  {  // q (or q_a) and kv_a both read h1: one call
    const kernels::GemmJob jobs[] = {
        ql > 0 ? forward_job(a + "q_a_proj", L.h1.data(), L.qa_raw.data(), ql, d)
               : forward_job(a + "q_proj", L.h1.data(), L.q.data(), H * qk, d),
        forward_job(a + "kv_a_proj_with_mqa", L.h1.data(), L.kva.data(), crow, d)};
    k::gemm_jobs(jobs, 2);
  }
  if (ql > 0) {
    k::rmsnorm(L.qa.data(), ql, L.qa_raw.data(), ql, p(a + "q_a_layernorm.weight").w, M_, ql, eps());
    k::linear_forward(L.q.data(), L.qa.data(), p(a + "q_b_proj.weight").w, nullptr, M_, H * qk, ql);
  }
  k::rmsnorm(L.lat.data(), dc, L.kva.data(), crow, p(a + "kv_a_layernorm.weight").w, M_, dc, eps());
  k::linear_forward(a_.kv.data(), L.lat.data(), p(a + "kv_b_proj.weight").w, nullptr, M_, H * (nope + dv), dc);
  float* kr = a_.dkr.data();  // the shared RoPE key, [M, dr] (scratch, rebuilt in the backward)
  for (int m = 0; m < M_; ++m) std::copy_n(L.kva.data() + size_t(m) * crow + dc, dr, kr + size_t(m) * dr);
  if (c_.layer_uses_rope(l)) {
    rope(L.q.data() + nope, int64_t(H) * qk, H, qk, false);
    rope(kr, dr, 1, 0, false);
  }
  for (int m = 0; m < M_; ++m)
    for (int h = 0; h < H; ++h) {
      const float* src = a_.kv.data() + (size_t(m) * H + h) * (nope + dv);
      float* kd = L.k.data() + (size_t(m) * H + h) * qk;
      std::copy_n(src, nope, kd);
      std::copy_n(kr + size_t(m) * dr, dr, kd + nope);
      std::copy_n(src + nope, dv, L.v.data() + (size_t(m) * H + h) * dv);
    }
  k::attention_train_forward(attention_args(c_, L, B_, T_, H));
  linear_forward(a + "o_proj", L.att.data(), L.mid.data(), d, H * dv);
}

void Pass::mla_backward(int l) {
  LayerActivations& L = a_.layers[size_t(l)];
  const std::string a = layer_prefix(l) + "self_attn.";
  const int H = c_.n_heads, nope = c_.qk_nope_head_dim, dr = c_.qk_rope_head_dim, dv = c_.v_head_dim;
  const int qk = nope + dr, dc = c_.kv_lora_rank, d = c_.d_model, crow = dc + dr, ql = c_.q_lora_rank;
  {
    kernels::GemmJob jobs[] = {weight_grad_job(a + "o_proj", L.att.data(), a_.dx.data(), d, H * dv),
                               output_job(a_.datt.data(), H * dv, false)};
    jobs[1].add(input_grad_term(a + "o_proj", a_.dx.data(), d, H * dv));
    k::gemm_jobs(jobs, 2);
  }
  kernels::AttentionTrainArgs args = attention_args(c_, L, B_, T_, H);
  args.dout = a_.datt.data(), args.dout_stride = int64_t(H) * dv;
  args.dq = a_.dq.data(), args.dk = a_.dk.data(), args.dv = a_.dv.data();
  k::attention_train_backward(args);
  // Per-head key/value gradients back to kv_b's output; the shared RoPE key sums over heads.
  float* dkr = a_.dkr.data();
  std::fill(dkr, dkr + size_t(M_) * dr, 0.0f);
  for (int m = 0; m < M_; ++m)
    for (int h = 0; h < H; ++h) {
      const float* dk = a_.dk.data() + (size_t(m) * H + h) * qk;
      float* dst = a_.dkv.data() + (size_t(m) * H + h) * (nope + dv);
      std::copy_n(dk, nope, dst);
      std::copy_n(a_.dv.data() + (size_t(m) * H + h) * dv, dv, dst + nope);
      for (int i = 0; i < dr; ++i) dkr[size_t(m) * dr + i] += dk[nope + i];
    }
  if (c_.layer_uses_rope(l)) {
    rope(a_.dq.data() + nope, int64_t(H) * qk, H, qk, true);
    rope(dkr, dr, 1, 0, true);
  }
  // kv_b's gradients, and q_b's when there is a q-lora path: one call.
  {
    kernels::GemmJob jobs[4] = {weight_grad_job(a + "kv_b_proj", L.lat.data(), a_.dkv.data(), H * (nope + dv), dc),
                                output_job(a_.dlat.data(), dc, false)};
    jobs[1].add(input_grad_term(a + "kv_b_proj", a_.dkv.data(), H * (nope + dv), dc));
    int n = 2;
    if (ql > 0) {
      jobs[n++] = weight_grad_job(a + "q_b_proj", L.qa.data(), a_.dq.data(), H * qk, ql);
      jobs[n] = output_job(a_.dqa.data(), ql, false);
      jobs[n++].add(input_grad_term(a + "q_b_proj", a_.dq.data(), H * qk, ql));
    }
    k::gemm_jobs(jobs, n);
  }
  const PV kvn = p(a + "kv_a_layernorm.weight");
  k::rmsnorm_backward(a_.dkva.data(), crow, L.kva.data(), crow, kvn.w, a_.dlat.data(), dc, kvn.g, M_, dc, eps(), false);
  for (int m = 0; m < M_; ++m) std::copy_n(dkr + size_t(m) * dr, dr, a_.dkva.data() + size_t(m) * crow + dc);
  if (ql > 0) {
    const PV qn = p(a + "q_a_layernorm.weight");
    k::rmsnorm_backward(a_.dqa.data(), ql, L.qa_raw.data(), ql, qn.w, a_.dqa.data(), ql, qn.g, M_, ql, eps(), false);
  }
  // kv_a's and q's (or q_a's) gradients, and dh from both: one call.
  const std::string qname = ql > 0 ? a + "q_a_proj" : a + "q_proj";
  const float* dqin = ql > 0 ? a_.dqa.data() : a_.dq.data();
  const int qout = ql > 0 ? ql : H * qk;
  kernels::GemmJob jobs[] = {weight_grad_job(a + "kv_a_proj_with_mqa", L.h1.data(), a_.dkva.data(), crow, d),
                             weight_grad_job(qname, L.h1.data(), dqin, qout, d), output_job(a_.dh.data(), d, false)};
  jobs[2].add(input_grad_term(a + "kv_a_proj_with_mqa", a_.dkva.data(), crow, d));
  jobs[2].add(input_grad_term(qname, dqin, qout, d));
  k::gemm_jobs(jobs, 3);
}

// ---------------------------------------------------------------- FFN

void Pass::ffn_forward(int l) {
  LayerActivations& L = a_.layers[size_t(l)];
  const std::string m = layer_prefix(l) + "mlp.";
  const int d = c_.d_model, ff = c_.d_ff;
  const int64_t n = int64_t(M_) * ff;
  if (c_.ffn == FfnKind::SwiGLU) {
    const kernels::GemmJob jobs[] = {forward_job(m + "gate_proj", L.h2.data(), L.gate.data(), ff, d),
                                     forward_job(m + "up_proj", L.h2.data(), L.up.data(), ff, d)};
    k::gemm_jobs(jobs, 2);
    add_bias(m + "gate_proj", L.gate.data(), ff), add_bias(m + "up_proj", L.up.data(), ff);
    k::swiglu_forward(L.act.data(), L.gate.data(), L.up.data(), n);
  } else {
    linear_forward(m + "up_proj", L.h2.data(), L.up.data(), ff, d);
    k::gelu_tanh_forward(L.act.data(), L.up.data(), n);
  }
}

void Pass::ffn_backward(int l) {
  LayerActivations& L = a_.layers[size_t(l)];
  const std::string m = layer_prefix(l) + "mlp.";
  const int d = c_.d_model, ff = c_.d_ff;
  const int64_t n = int64_t(M_) * ff;
  {
    kernels::GemmJob jobs[] = {weight_grad_job(m + "down_proj", L.act.data(), a_.dx.data(), d, ff),
                               output_job(a_.dact.data(), ff, false)};
    jobs[1].add(input_grad_term(m + "down_proj", a_.dx.data(), d, ff));
    k::gemm_jobs(jobs, 2);
    bias_grad(m + "down_proj", a_.dx.data(), d);
  }
  kernels::GemmJob jobs[3];
  int nj = 0;
  if (c_.ffn == FfnKind::SwiGLU) {
    k::swiglu_backward(a_.dgate.data(), a_.dup.data(), L.gate.data(), L.up.data(), a_.dact.data(), n);
    jobs[nj++] = weight_grad_job(m + "gate_proj", L.h2.data(), a_.dgate.data(), ff, d);
    bias_grad(m + "gate_proj", a_.dgate.data(), ff);
  } else {
    k::gelu_tanh_backward(a_.dup.data(), L.up.data(), a_.dact.data(), n);
  }
  jobs[nj++] = weight_grad_job(m + "up_proj", L.h2.data(), a_.dup.data(), ff, d);
  bias_grad(m + "up_proj", a_.dup.data(), ff);
  kernels::GemmJob& dh = jobs[nj++] = output_job(a_.dh.data(), d, false);
  if (c_.ffn == FfnKind::SwiGLU) dh.add(input_grad_term(m + "gate_proj", a_.dgate.data(), ff, d));
  dh.add(input_grad_term(m + "up_proj", a_.dup.data(), ff, d));
  k::gemm_jobs(jobs, nj);
}

// ---------------------------------------------------------------- the pass

LossSum Pass::run(const int32_t* ids, const int32_t* targets, float grad_scale, int32_t ignore_index) {
  const int d = c_.d_model, V = c_.vocab;
  if (B_ <= 0 || T_ <= 0) throw Error("empty batch: " + std::to_string(B_) + " x " + std::to_string(T_) + " tokens");
  if (c_.position == PositionKind::Learned && T_ > c_.max_context)
    throw Error("sequences of " + std::to_string(T_) + " tokens exceed the learned position table (" +
                std::to_string(c_.max_context) + ")");
  for (int m = 0; m < M_; ++m) {
    if (ids[m] < 0 || ids[m] >= V)
      throw Error("token id " + std::to_string(ids[m]) + " at batch row " + std::to_string(m / T_) + ", position " +
                  std::to_string(m % T_) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    if (targets[m] != ignore_index && (targets[m] < 0 || targets[m] >= V))
      throw Error("target " + std::to_string(targets[m]) + " at batch row " + std::to_string(m / T_) + ", position " +
                  std::to_string(m % T_) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
  }
  size_buffers();
  a_.batch = B_, a_.seq_len = T_;
  rope_tables();

  // Embedding (+ learned positions).
  const PV emb = p(kTokenEmbedding), pos = p(kPositionEmbedding);
  float* x = a_.layers.empty() ? a_.x_final.data() : a_.layers[0].x.data();
  for (int m = 0; m < M_; ++m) {
    std::copy_n(emb.w + size_t(ids[m]) * d, d, x + size_t(m) * d);
    if (pos)
      for (int i = 0; i < d; ++i) x[size_t(m) * d + i] += pos.w[size_t(m % T_) * d + i];
  }
  const size_t n = size_t(M_) * d;
  for (int l = 0; l < c_.n_layers; ++l) {
    LayerActivations& L = a_.layers[size_t(l)];
    const std::string pre = layer_prefix(l);
    norm_forward(pre + "input_layernorm", L.x.data(), L.h1.data());
    if (c_.is_mla()) mla_forward(l);
    else attention_forward(l);
    for (size_t i = 0; i < n; ++i) L.mid[i] += L.x[i];  // mid = x + attention(norm(x))
    norm_forward(pre + "post_attention_layernorm", L.mid.data(), L.h2.data());
    ffn_forward(l);
    float* next = l + 1 < c_.n_layers ? a_.layers[size_t(l + 1)].x.data() : a_.x_final.data();
    const PV down = p(pre + "mlp.down_proj.weight");
    k::linear_forward(next, L.act.data(), down.w, p(pre + "mlp.down_proj.bias").w, M_, d, c_.d_ff);
    for (size_t i = 0; i < n; ++i) next[i] += L.mid[i];
  }
  norm_forward("model.norm", a_.x_final.data(), a_.h_final.data());
  const PV head = c_.tied_embeddings ? emb : p(kLmHead);
  k::linear_forward(a_.logits.data(), a_.h_final.data(), head.w, nullptr, M_, V, d);
  LossSum loss;
  loss.count = count_targets(targets, M_, ignore_index);
  loss.sum = k::cross_entropy(a_.logits.data(), targets, M_, V, ignore_index, grad_scale);
  if (!backward_) return loss;

  // Backward. a_.dx is the gradient of the residual stream, a_.dh of a norm's output.
  {
    kernels::GemmJob jobs[] = {k::linear_backward_w_job(head.g, a_.logits.data(), a_.h_final.data(), M_, V, d),
                               output_job(a_.dh.data(), d, false)};
    jobs[1].add(k::linear_backward_x_term(a_.logits.data(), head.w, V, d));
    k::gemm_jobs(jobs, 2);
  }
  norm_backward("model.norm", a_.x_final.data(), a_.dh.data(), a_.dx.data(), false);
  for (int l = c_.n_layers - 1; l >= 0; --l) {
    LayerActivations& L = a_.layers[size_t(l)];
    const std::string pre = layer_prefix(l);
    ffn_backward(l);
    norm_backward(pre + "post_attention_layernorm", L.mid.data(), a_.dh.data(), a_.dx.data(), true);
    if (c_.is_mla()) mla_backward(l);
    else attention_backward(l);
    norm_backward(pre + "input_layernorm", L.x.data(), a_.dh.data(), a_.dx.data(), true);
  }
  k::embedding_backward(emb.g, ids, a_.dx.data(), M_, d);
  if (pos) k::embedding_backward(pos.g, a_.positions.data(), a_.dx.data(), M_, d);
  return loss;
}

}  // namespace

int64_t count_targets(const int32_t* targets, int64_t n, int32_t ignore_index) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += targets[i] != ignore_index;
  return c;
}

LossSum forward_backward(Trainable& t, const int32_t* ids, const int32_t* targets, int B, int T,
                         Activations& acts, float grad_scale, int32_t ignore_index) {
  return Pass(t, acts, B, T, true).run(ids, targets, grad_scale, ignore_index);
}

double forward_backward_mean(Trainable& t, const int32_t* ids, const int32_t* targets, int B, int T,
                             Activations& acts, int32_t ignore_index) {
  const int64_t n = count_targets(targets, int64_t(B) * T, ignore_index);
  return forward_backward(t, ids, targets, B, T, acts, n ? 1.0f / float(n) : 0.0f, ignore_index).mean();
}

LossSum evaluate(const Trainable& t, const int32_t* ids, const int32_t* targets, int B, int T, Activations& acts,
                 int32_t ignore_index) {
  // The forward only reads parameters; the pass needs a mutable reference for its backward.
  return Pass(const_cast<Trainable&>(t), acts, B, T, false).run(ids, targets, 0.0f, ignore_index);
}

double train_step_flops(const ModelConfig& c, int B, int T) {
  double mat = 0;
  for (const TensorSpec& s : expected_tensors(c))
    if (s.role == TensorRole::Matrix && s.name != kTokenEmbedding && s.name != kPositionEmbedding)
      mat += double(shape_numel(s.shape));
  if (c.tied_embeddings) mat += double(c.vocab) * c.d_model;
  const double tokens = double(B) * T, pairs = double(T) * (T + 1) / 2;
  const double attn_fwd = 2.0 * pairs * c.n_heads * (c.qk_head_dim() + c.v_dim()) * c.n_layers * B;
  return 6.0 * mat * tokens + 3.0 * attn_fwd;
}

}  // namespace mtb::train
