#include "mtb/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mtb/core/error.h"
#include "mtb/kernels/attention.h"
#include "mtb/kernels/matmul.h"
#include "mtb/kernels/ops.h"
#include "mtb/model/weights.h"

namespace mtb {
namespace {

void linear(const Linear& l, const float* x, int T, float* y) {
  kernels::matmul(y, x, l.w.data, l.w.dtype, l.b.empty() ? nullptr : l.b.data(), T, l.out(), l.in());
}

// y = x W^T + b as one job of a batch (contiguous x [T, in] and y [T, out]).
kernels::MatmulJob job(const Linear& l, const float* x, int T, float* y) {
  return {y, l.out(), x, l.in(), l.w.data, l.w.dtype, l.b.empty() ? nullptr : l.b.data(), T, l.out(), l.in()};
}

}  // namespace

Model::Model(ModelConfig config, TensorMap tensors, const std::string& where)
    : config_(std::move(config)), tensors_(std::move(tensors)) {
  config_.validate(where);
  if (config_.rope_scaling.type == RopeScaling::Type::Yarn)
    throw Error(where + ": YaRN rope_scaling is not supported yet");
  check_tensors(config_, tensors_, where);
  auto get = [&](const std::string& name) { return tensors_.find(name)->tensor; };
  auto opt_vec = [&](const std::string& name) {
    const NamedTensor* t = tensors_.find(name);
    return t ? t->tensor.to_vector() : std::vector<float>{};
  };
  auto lin = [&](const std::string& base) {
    return Linear{get(base + ".weight"), opt_vec(base + ".bias")};
  };
  auto nrm = [&](const std::string& base) { return Norm{opt_vec(base + ".weight"), opt_vec(base + ".bias")}; };

  tok_embed_ = get(kTokenEmbedding);
  if (config_.position == PositionKind::Learned) pos_embed_ = get(kPositionEmbedding);
  lm_head_ = config_.tied_embeddings ? tok_embed_ : get(kLmHead);
  final_norm_ = nrm("model.norm");
  for (int l = 0; l < config_.n_layers; ++l) {
    const std::string p = layer_prefix(l), a = p + "self_attn.", m = p + "mlp.";
    LayerWeights w;
    w.attn_norm = nrm(p + "input_layernorm");
    w.ffn_norm = nrm(p + "post_attention_layernorm");
    if (config_.is_mla()) {
      if (config_.q_lora_rank > 0) {
        w.wq_a = lin(a + "q_a_proj");
        w.q_a_norm = nrm(a + "q_a_layernorm");
        w.wq_b = lin(a + "q_b_proj");
      } else {
        w.wq = lin(a + "q_proj");
      }
      w.wkv_a = lin(a + "kv_a_proj_with_mqa");
      w.kv_a_norm = nrm(a + "kv_a_layernorm");
      w.wkv_b = lin(a + "kv_b_proj");
    } else {
      w.wq = lin(a + "q_proj"), w.wk = lin(a + "k_proj"), w.wv = lin(a + "v_proj");
      if (config_.qk_norm) w.q_norm = nrm(a + "q_norm"), w.k_norm = nrm(a + "k_norm");
    }
    w.wo = lin(a + "o_proj");
    if (config_.is_mla()) {
      // W_UK of head h is rows [h(nope+dv), h(nope+dv)+nope) of kv_b: [nope, dc]. The absorbed
      // form needs it transposed, [dc, nope] per head, kept in the weight's own type.
      const int H = config_.n_heads, nope = config_.qk_nope_head_dim, dv = config_.v_head_dim;
      const int dc = config_.kv_lora_rank;
      // A Q8_0 kv_b's blocks run along dc, so its transpose is kept in F32.
      const Tensor& kvb = w.wkv_b.w;
      const DType tt = kvb.dtype == DType::Q8_0 ? DType::F32 : kvb.dtype;
      const size_t esz = dtype_size(tt);
      std::vector<uint8_t> t(size_t(H) * dc * nope * esz);
      std::vector<float> row(static_cast<size_t>(dc));
      std::vector<uint8_t> row_t(size_t(dc) * esz);
      const uint8_t* src = static_cast<const uint8_t*>(kvb.data);
      for (int hh = 0; hh < H; ++hh)
        for (int i = 0; i < nope; ++i) {
          to_f32(kvb.dtype, src + dtype_bytes(kvb.dtype, (int64_t(hh) * (nope + dv) + i) * dc), row.data(), size_t(dc));
          from_f32(tt, row.data(), row_t.data(), size_t(dc));
          for (int cc = 0; cc < dc; ++cc)
            std::memcpy(&t[((size_t(hh) * dc + cc) * nope + i) * esz], &row_t[size_t(cc) * esz], esz);
        }
      w.w_uk_t = tensors_.add_owned(p + "self_attn.w_uk_t (derived)", tt, {int64_t(H) * dc, nope}, std::move(t), where);
    }
    if (config_.ffn == FfnKind::SwiGLU) w.w_gate = lin(m + "gate_proj");
    w.w_up = lin(m + "up_proj");
    w.w_down = lin(m + "down_proj");
    layers_.push_back(std::move(w));
  }
  if (config_.position == PositionKind::RoPE) inv_freq_ = config_.rope_inv_freq();
}

void Model::norm(const Norm& n, const float* x, int T, float* out) const {
  const int d = config_.d_model;
  if (config_.norm == NormKind::RMSNorm)
    kernels::rmsnorm(out, d, x, d, n.g.data(), T, d, float(config_.norm_eps));
  else
    kernels::layernorm(out, x, n.g.data(), n.b.empty() ? nullptr : n.b.data(), T, d, float(config_.norm_eps));
}

void Model::rope_tables(int T, Workspace& ws) const {
  const size_t half = inv_freq_.size();
  for (int t = 0; t < T; ++t)
    for (size_t i = 0; i < half; ++i) {
      const double angle = double(ws.pos[size_t(t)]) * inv_freq_[i];
      ws.cos[size_t(t) * half + i] = float(std::cos(angle));
      ws.sin[size_t(t) * half + i] = float(std::sin(angle));
    }
}

void Model::embed(const int32_t* ids, int T, const int32_t* pos, float* x, float* scratch) const {
  const int d = config_.d_model;
  const size_t row_bytes = dtype_bytes(tok_embed_.dtype, d);
  const size_t pos_row_bytes = pos_embed_.empty() ? 0 : dtype_bytes(pos_embed_.dtype, d);
  for (int t = 0; t < T; ++t) {
    float* xt = x + size_t(t) * d;
    to_f32(tok_embed_.dtype, static_cast<const uint8_t*>(tok_embed_.data) + size_t(ids[t]) * row_bytes, xt, size_t(d));
    if (pos_row_bytes) {  // learned positions: x += P[pos] (the row widened in `scratch`, [d])
      to_f32(pos_embed_.dtype, static_cast<const uint8_t*>(pos_embed_.data) + size_t(pos[t]) * pos_row_bytes, scratch, size_t(d));
      kernels::add(xt, scratch, d);
    }
  }
}

Workspace Model::make_workspace(int max_tokens, int capacity, MlaForm mla, bool all_logits, int logit_rows) const {
  const ModelConfig& c = config_;
  const size_t T = size_t(max_tokens), d = size_t(c.d_model), H = size_t(c.n_heads);
  Workspace ws;
  ws.max_tokens = max_tokens, ws.capacity = capacity;
  ws.x.resize(T * d), ws.h.resize(T * d), ws.y.resize(T * d);
  ws.gate.resize(T * size_t(c.d_ff)), ws.up.resize(T * size_t(c.d_ff));
  ws.max_logit_rows = std::min(max_tokens, all_logits ? max_tokens : std::max(1, logit_rows));
  ws.logits.resize(size_t(c.vocab) * size_t(ws.max_logit_rows));
  ws.pos.resize(T);
  ws.cos.resize(T * size_t(c.rope_dim() / 2 + 1)), ws.sin.resize(ws.cos.size());
  ws.scores.resize(kernels::attention_scratch_floats(capacity, c.n_heads));
  if (!c.is_mla()) {
    ws.q.resize(T * H * size_t(c.head_dim));
    ws.k.resize(T * size_t(c.n_kv_heads) * size_t(c.head_dim));
    ws.v.resize(ws.k.size());
    ws.att.resize(T * H * size_t(c.head_dim));
  } else {
    const size_t nope = size_t(c.qk_nope_head_dim), qk = size_t(c.qk_head_dim()), dv = size_t(c.v_head_dim);
    const size_t dc = size_t(c.kv_lora_rank), dr = size_t(c.qk_rope_head_dim);
    ws.q.resize(T * H * qk);
    ws.qa.resize(T * size_t(c.q_lora_rank));
    ws.kva.resize(T * (dc + dr));
    ws.att.resize(T * H * dv);
    // Plain form (MlaForm::Plain): room to up-project a whole sequence's cache.
    ws.plain_mla_over_cache = mla == MlaForm::Plain;
    const size_t n = ws.plain_mla_over_cache ? size_t(capacity) : 0;
    ws.lat.resize(n * dc), ws.kv_all.resize(n * H * (nope + dv));
    ws.k_all.resize(n * H * qk), ws.v_all.resize(n * H * dv);
    // Absorbed form.
    ws.q_abs.resize(T * H * (dc + dr)), ws.att_lat.resize(T * H * dc);
  }
  return ws;
}

namespace {

// The cache row of key j of a segment.
int64_t cache_row(const BatchSegment& s, int j) {
  return s.block_table ? int64_t(s.block_table[j / s.block_size]) * s.block_size + j % s.block_size : j;
}

void set_pages(kernels::AttentionArgs& a, const BatchSegment& s) {
  a.block_table = s.block_table, a.block_size = s.block_size;
}

}  // namespace

// Standard attention (MHA / MQA / GQA), optional QK-norm and RoPE. Reads ws.h, writes ws.y.
void Model::attention(const LayerWeights& w, int layer, const BatchSegment* segs, int n_segs, int T, KVCache& cache,
                      Workspace& ws) const {
  const ModelConfig& c = config_;
  const int H = c.n_heads, KV = c.n_kv_heads, dh = c.head_dim;
  float *q = ws.q.data(), *k = ws.k.data(), *v = ws.v.data();  // [T, H, dh], [T, KV, dh], [T, KV, dh]
  const kernels::MatmulJob qkv[3] = {job(w.wq, ws.h.data(), T, q), job(w.wk, ws.h.data(), T, k), job(w.wv, ws.h.data(), T, v)};
  kernels::matmul_jobs(qkv, 3);
  if (c.qk_norm) {  // per head, before RoPE
    kernels::rmsnorm(q, dh, q, dh, w.q_norm.g.data(), T * H, dh, float(c.norm_eps));
    kernels::rmsnorm(k, dh, k, dh, w.k_norm.g.data(), T * KV, dh, float(c.norm_eps));
  }
  if (c.layer_uses_rope(layer)) {
    kernels::rope(q, T, int64_t(H) * dh, H, dh, dh, ws.cos.data(), ws.sin.data(), c.rope_layout);
    kernels::rope(k, T, int64_t(KV) * dh, KV, dh, dh, ws.cos.data(), ws.sin.data(), c.rope_layout);
  }
  // Write this step's keys and values into their cache rows, in the cache's element type.
  const size_t row = size_t(KV) * dh, stride = size_t(cache.row_stride()), esz = dtype_size(cache.type());
  int t0 = 0;
  for (int si = 0; si < n_segs; ++si) {
    const BatchSegment& s = segs[si];
    for (int i = 0; i < s.n; ++i) {
      const size_t r = size_t(cache_row(s, s.pos0 + i)), t = size_t(t0 + i);
      from_f32(cache.type(), k + t * row, static_cast<uint8_t*>(cache.k(layer)) + r * stride * esz, row);
      from_f32(cache.type(), v + t * row, static_cast<uint8_t*>(cache.v(layer)) + r * stride * esz, row);
    }
    t0 += s.n;
  }
  t0 = 0;
  for (int si = 0; si < n_segs; ++si) {  // each sequence over its own keys
    const BatchSegment& s = segs[si];
    kernels::AttentionArgs a;
    a.n_queries = s.n, a.q_pos0 = s.pos0, a.n_heads = H, a.n_kv_heads = KV, a.qk_dim = dh, a.v_dim = dh;
    a.scale = float(c.attention_scale());
    a.q = q + size_t(t0) * H * dh, a.q_stride = int64_t(H) * dh;
    a.kv_type = cache.type();
    a.k = cache.k(layer), a.k_stride = int64_t(stride);
    a.v = cache.v(layer), a.v_stride = int64_t(stride);
    a.out = ws.att.data() + size_t(t0) * H * dh, a.out_stride = int64_t(H) * dh;
    a.scratch = ws.scores.data();
    set_pages(a, s);
    kernels::attention(a);
    t0 += s.n;
  }
  linear(w.wo, ws.att.data(), T, ws.y.data());
}

// MLA. Reads ws.h, writes ws.y. The cache holds [normalized latent | RoPE'd key] per token.
void Model::attention_mla(const LayerWeights& w, int layer, const BatchSegment* segs, int n_segs, int T,
                          KVCache& cache, Workspace& ws, bool plain) const {
  const ModelConfig& c = config_;
  const int H = c.n_heads, nope = c.qk_nope_head_dim, dr = c.qk_rope_head_dim;
  const int qk = nope + dr, dv = c.v_head_dim, dc = c.kv_lora_rank;
  const int64_t crow = dc + dr;  // cache row
  float* q = ws.q.data();      // [T, H, nope | rope]
  float* kva = ws.kva.data();  // [T, latent | rope key]
  if (c.q_lora_rank > 0) {
    const kernels::MatmulJob jobs[2] = {job(w.wq_a, ws.h.data(), T, ws.qa.data()), job(w.wkv_a, ws.h.data(), T, kva)};
    kernels::matmul_jobs(jobs, 2);  // [T, q_lora_rank], [T, dc + dr]
    kernels::rmsnorm(ws.qa.data(), c.q_lora_rank, ws.qa.data(), c.q_lora_rank, w.q_a_norm.g.data(), T,
                     c.q_lora_rank, float(c.norm_eps));
    linear(w.wq_b, ws.qa.data(), T, q);
  } else {
    const kernels::MatmulJob jobs[2] = {job(w.wq, ws.h.data(), T, q), job(w.wkv_a, ws.h.data(), T, kva)};
    kernels::matmul_jobs(jobs, 2);
  }
  kernels::rmsnorm(kva, crow, kva, crow, w.kv_a_norm.g.data(), T, dc, float(c.norm_eps));
  if (c.layer_uses_rope(layer)) {
    kernels::rope(q + nope, T, int64_t(H) * qk, H, qk, dr, ws.cos.data(), ws.sin.data(), c.rope_layout);
    kernels::rope(kva + dc, T, crow, 1, 0, dr, ws.cos.data(), ws.sin.data(), c.rope_layout);
  }
  const size_t esz = dtype_size(cache.type());
  uint8_t* rows = static_cast<uint8_t*>(cache.latent(layer));
  const size_t cstride = size_t(cache.row_stride());  // elements from one cached row to the next
  int t0 = 0;
  for (int si = 0; si < n_segs; ++si) {
    const BatchSegment& s = segs[si];
    for (int i = 0; i < s.n; ++i)
      from_f32(cache.type(), kva + size_t(t0 + i) * crow, rows + size_t(cache_row(s, s.pos0 + i)) * cstride * esz,
               size_t(crow));
    t0 += s.n;
  }

  kernels::AttentionArgs a;
  a.n_heads = H, a.scale = float(c.attention_scale());
  a.scratch = ws.scores.data();
  if (plain) {
    t0 = 0;
    for (int si = 0; si < n_segs; ++si) {
      const BatchSegment& s = segs[si];
      const int n = s.pos0 + s.n;  // keys to attend over
      // Up-project every cached latent to per-head keys and values: K [n, H, nope | rope], V [n, H, dv].
      float* lat = ws.lat.data();  // [n, dc]
      for (int j = 0; j < n; ++j)
        to_f32(cache.type(), rows + size_t(cache_row(s, j)) * cstride * esz, lat + size_t(j) * dc, size_t(dc));
      linear(w.wkv_b, lat, n, ws.kv_all.data());  // [n, H, k_nope | v]
      for (int j = 0; j < n; ++j) {
        float* krow = ws.k_all.data() + size_t(j) * H * qk;
        to_f32(cache.type(), rows + (size_t(cache_row(s, j)) * cstride + size_t(dc)) * esz, krow + nope, size_t(dr));
        for (int hh = 0; hh < H; ++hh) {
          const float* src = ws.kv_all.data() + (size_t(j) * H + hh) * (nope + dv);
          float* kd = krow + size_t(hh) * qk;
          std::copy(src, src + nope, kd);
          if (hh) std::copy(krow + nope, krow + nope + dr, kd + nope);  // the shared RoPE key
          std::copy(src + nope, src + nope + dv, ws.v_all.data() + (size_t(j) * H + hh) * dv);
        }
      }
      a.n_queries = s.n, a.q_pos0 = s.pos0;
      a.n_kv_heads = H, a.qk_dim = qk, a.v_dim = dv;
      a.q = q + size_t(t0) * H * qk, a.q_stride = int64_t(H) * qk;
      a.kv_type = DType::F32;
      a.k = ws.k_all.data(), a.k_stride = int64_t(H) * qk;
      a.v = ws.v_all.data(), a.v_stride = int64_t(H) * dv;
      a.out = ws.att.data() + size_t(t0) * H * dv, a.out_stride = int64_t(H) * dv;
      kernels::attention(a);  // keys in consecutive rows here
      t0 += s.n;
    }
  } else {
    // Absorbed: q_abs[h] = [W_UK[h]^T q_nope[h] | q_rope[h]]; one shared "KV head": the cache rows.
    // The per-head products run as one batch, reading q and writing q_abs in place (strided).
    float* q_abs = ws.q_abs.data();  // [T, H, dc | dr]
    const size_t uk_bytes = dtype_bytes(w.w_uk_t.dtype, int64_t(dc) * nope);
    thread_local std::vector<kernels::MatmulJob> jobs;  // grows once
    jobs.resize(size_t(H));
    for (int hh = 0; hh < H; ++hh)
      jobs[size_t(hh)] = {q_abs + size_t(hh) * crow, int64_t(H) * crow, q + size_t(hh) * qk, int64_t(H) * qk,
                          static_cast<const uint8_t*>(w.w_uk_t.data) + size_t(hh) * uk_bytes, w.w_uk_t.dtype, nullptr,
                          T, dc, nope};  // [T, dc] of head hh
    kernels::matmul_jobs(jobs.data(), H);
    for (int t = 0; t < T; ++t)
      for (int hh = 0; hh < H; ++hh) {
        const float* qr = q + (size_t(t) * H + hh) * qk + nope;
        std::copy(qr, qr + dr, q_abs + (size_t(t) * H + hh) * crow + dc);
      }
    t0 = 0;
    for (int si = 0; si < n_segs; ++si) {
      const BatchSegment& s = segs[si];
      a.n_queries = s.n, a.q_pos0 = s.pos0;
      a.n_kv_heads = 1, a.qk_dim = int(crow), a.v_dim = dc;
      a.q = q_abs + size_t(t0) * H * crow, a.q_stride = int64_t(H) * crow;
      a.kv_type = cache.type();
      a.k = rows, a.k_stride = int64_t(cstride);
      a.v = rows, a.v_stride = int64_t(cstride);  // V is the latent: the first dc elements of each row
      a.out = ws.att_lat.data() + size_t(t0) * H * dc, a.out_stride = int64_t(H) * dc;
      set_pages(a, s);
      kernels::attention(a);
      t0 += s.n;
    }
    // W_UV after attention: out[h] = W_UV[h] o_lat[h], W_UV[h] = rows [h(nope+dv)+nope, +dv) of kv_b.
    const size_t kvb_row = dtype_bytes(w.wkv_b.w.dtype, dc);
    for (int hh = 0; hh < H; ++hh)
      jobs[size_t(hh)] = {ws.att.data() + size_t(hh) * dv, int64_t(H) * dv, ws.att_lat.data() + size_t(hh) * dc,
                          int64_t(H) * dc,
                          static_cast<const uint8_t*>(w.wkv_b.w.data) + (size_t(hh) * (nope + dv) + nope) * kvb_row,
                          w.wkv_b.w.dtype, nullptr, T, dv, dc};  // [T, dv] of head hh
    kernels::matmul_jobs(jobs.data(), H);
  }
  linear(w.wo, ws.att.data(), T, ws.y.data());
}

void Model::ffn(const LayerWeights& w, int T, Workspace& ws) const {
  const int64_t n = int64_t(T) * config_.d_ff;
  if (config_.ffn == FfnKind::SwiGLU) {
    const kernels::MatmulJob jobs[2] = {job(w.w_gate, ws.h.data(), T, ws.gate.data()),
                                        job(w.w_up, ws.h.data(), T, ws.up.data())};  // [T, d_ff] each
    kernels::matmul_jobs(jobs, 2);
    kernels::silu_mul(ws.gate.data(), ws.up.data(), n);
    linear(w.w_down, ws.gate.data(), T, ws.y.data());
  } else {
    linear(w.w_up, ws.h.data(), T, ws.up.data());  // [T, d_ff]
    kernels::gelu_tanh(ws.up.data(), n);
    linear(w.w_down, ws.up.data(), T, ws.y.data());
  }
}

const float* Model::forward_batch(const BatchSegment* segs, int n_segs, KVCache& cache, Workspace& ws,
                                  MlaForm mla) const {
  const ModelConfig& c = config_;
  const int d = c.d_model;
  if (n_segs <= 0) throw Error("empty batch");
  int T = 0, rows = 0;
  for (int si = 0; si < n_segs; ++si) {
    const BatchSegment& s = segs[si];
    if (s.n <= 0) throw Error("batch segment " + std::to_string(si) + ": empty token sequence");
    if (s.pos0 < 0) throw Error("batch segment " + std::to_string(si) + ": negative position");
    const int64_t end = int64_t(s.pos0) + s.n;
    if (!s.block_table && end > cache.capacity())
      throw Error("context full: " + std::to_string(s.pos0) + " cached + " + std::to_string(s.n) +
                  " new tokens exceed the context of " + std::to_string(cache.capacity()));
    if (s.block_table) {
      if (s.block_size <= 0) throw Error("batch segment " + std::to_string(si) + ": block size must be positive");
      const int64_t blocks = cache.capacity() / s.block_size;
      for (int64_t b = 0; b < (end + s.block_size - 1) / s.block_size; ++b)
        if (s.block_table[b] < 0 || s.block_table[b] >= blocks)
          throw Error("batch segment " + std::to_string(si) + ": block " + std::to_string(s.block_table[b]) +
                      " is outside the cache's " + std::to_string(blocks) + " blocks");
    }
    if (c.position == PositionKind::Learned && end > c.max_context)
      throw Error("position " + std::to_string(end - 1) + " is past the learned position table (" +
                  std::to_string(c.max_context) + ")");
    for (int t = 0; t < s.n; ++t)
      if (s.ids[t] < 0 || s.ids[t] >= c.vocab)
        throw Error("token id " + std::to_string(s.ids[t]) + " at position " + std::to_string(s.pos0 + t) +
                    " is outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
    T += s.n;
    rows += s.logits == BatchSegment::Logits::All ? s.n : s.logits == BatchSegment::Logits::Last ? 1 : 0;
  }
  if (T > ws.max_tokens)
    throw Error(std::to_string(T) + " tokens in one step exceed the workspace's " + std::to_string(ws.max_tokens));
  if (rows > ws.max_logit_rows)
    throw Error("workspace has no room for the logits of " + std::to_string(rows) + " tokens");
  const bool plain = c.is_mla() && mla == MlaForm::Plain;
  if (plain)
    for (int si = 0; si < n_segs; ++si)
      if (ws.lat.size() < size_t(segs[si].pos0 + segs[si].n) * size_t(c.kv_lora_rank))
        throw Error("workspace has no room for plain MLA over " + std::to_string(segs[si].pos0 + segs[si].n) + " tokens");
  float* x = ws.x.data();  // [T, d], the residual stream
  {
    int t = 0;
    for (int si = 0; si < n_segs; ++si)
      for (int i = 0; i < segs[si].n; ++i) ws.pos[size_t(t++)] = segs[si].pos0 + i;
    t = 0;
    for (int si = 0; si < n_segs; ++si) {
      embed(segs[si].ids, segs[si].n, ws.pos.data() + t, x + size_t(t) * d, ws.y.data());
      t += segs[si].n;
    }
  }
  if (c.position == PositionKind::RoPE) rope_tables(T, ws);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = layers_[size_t(l)];
    norm(w.attn_norm, x, T, ws.h.data());
    if (c.is_mla()) attention_mla(w, l, segs, n_segs, T, cache, ws, plain);
    else attention(w, l, segs, n_segs, T, cache, ws);
    kernels::add(x, ws.y.data(), int64_t(T) * d);
    norm(w.ffn_norm, x, T, ws.h.data());
    ffn(w, T, ws);
    kernels::add(x, ws.y.data(), int64_t(T) * d);
  }
  // The rows that want logits, gathered: final norm, then the LM head.
  int r = 0, t0 = 0;
  for (int si = 0; si < n_segs; ++si) {
    const BatchSegment& s = segs[si];
    const int first = s.logits == BatchSegment::Logits::All ? 0 : s.logits == BatchSegment::Logits::Last ? s.n - 1 : s.n;
    for (int i = first; i < s.n; ++i, ++r)
      std::copy(x + size_t(t0 + i) * d, x + size_t(t0 + i + 1) * d, ws.y.data() + size_t(r) * d);
    t0 += s.n;
  }
  if (rows > 0) {
    norm(final_norm_, ws.y.data(), rows, ws.h.data());
    kernels::matmul(ws.logits.data(), ws.h.data(), lm_head_.data, lm_head_.dtype, nullptr, rows, c.vocab, d);
  }
  return ws.logits.data();
}

const float* Model::forward(const int32_t* ids, int T, KVCache& cache, Workspace& ws,
                            const ForwardOptions& options) const {
  if (T <= 0) throw Error("empty token sequence");
  BatchSegment s;
  s.ids = ids, s.n = T, s.pos0 = cache.size();
  s.logits = options.all_logits ? BatchSegment::Logits::All : BatchSegment::Logits::Last;
  const float* logits = forward_batch(&s, 1, cache, ws, options.mla);
  cache.advance(T);
  return logits;
}

std::vector<float> Model::forward(const std::vector<int32_t>& ids) const {
  const int T = int(ids.size());
  if (T == 0) throw Error("empty token sequence");
  if (config_.max_context > 0 && T > config_.max_context)
    throw Error("sequence of " + std::to_string(T) + " tokens is longer than the model's context of " +
                std::to_string(config_.max_context));
  KVCache cache(config_, T, DType::F32);
  Workspace ws = make_workspace(T, T, MlaForm::Auto, true);
  ForwardOptions options;
  options.all_logits = true;
  const float* logits = forward(ids.data(), T, cache, ws, options);
  return std::vector<float>(logits, logits + size_t(T) * config_.vocab);
}

}  // namespace mtb
