#include "mtb/io/llama2c.h"

#include <cstring>

#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"
#include "mtb/model/weights.h"

namespace mtb {

LoadedModel load_llama2c(const std::string& path) {
  auto file = MappedFile::open(path);
  if (file->size() < 28) throw Error(path + ": truncated llama2.c checkpoint (no 28-byte header)");
  int32_t h[7];
  std::memcpy(h, file->data(), sizeof h);
  const int dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4], seq_len = h[6];
  const bool shared = h[5] > 0;
  const int vocab = h[5] > 0 ? h[5] : -h[5];
  for (int i = 0; i < 7; ++i)
    if (h[i] == 0 || (i != 5 && h[i] < 0) || h[i] == INT32_MIN)
      throw Error(path + ": corrupt llama2.c header (field " + std::to_string(i) + " = " + std::to_string(h[i]) + ")");
  if (dim % heads) throw Error(path + ": corrupt llama2.c header: dim " + std::to_string(dim) + " not divisible by heads");

  LoadedModel m;
  m.where = path;
  ModelConfig& c = m.config;
  c.family = "llama";
  c.vocab = vocab, c.d_model = dim, c.n_layers = layers, c.n_heads = heads, c.n_kv_heads = kv_heads;
  c.head_dim = dim / heads, c.d_ff = hidden, c.norm_eps = 1e-5, c.rope_base = 10000.0;
  c.rope_layout = RopeLayout::Interleaved, c.tied_embeddings = shared, c.max_context = seq_len;
  c.bos_id = 1, c.eos_ids = {2};  // llama2.c's tokenizers: <s> = 1, </s> = 2
  c.validate(path);

  const int64_t hd = c.head_dim, kv = int64_t(kv_heads) * hd, L = layers;
  // Total size first, so a truncated file fails before any view is made.
  const int64_t floats = int64_t(vocab) * dim + L * dim + L * dim * dim + 2 * L * kv * dim + L * dim * dim +
                         L * dim + 3 * L * int64_t(hidden) * dim + dim + int64_t(seq_len) * hd +
                         (shared ? 0 : int64_t(vocab) * dim);
  const uint64_t need = 28 + uint64_t(floats) * 4;
  if (file->size() < need)
    throw Error(path + ": truncated llama2.c checkpoint: " + std::to_string(file->size()) + " bytes, the header implies " +
                std::to_string(need));

  const uint8_t* p = file->data() + 28;
  auto take = [&](int64_t n) {
    const uint8_t* at = p;
    p += n * 4;
    return at;
  };
  auto add = [&](const std::string& name, Shape shape, const uint8_t* data) {
    m.tensors.add(name, Tensor{DType::F32, std::move(shape), data}, path);
  };
  auto per_layer = [&](const std::string& suffix, Shape shape) {
    const int64_t n = shape_numel(shape);
    const uint8_t* base = take(n * L);
    for (int l = 0; l < layers; ++l) add(layer_prefix(l) + suffix, shape, base + l * n * 4);
  };
  add(kTokenEmbedding, {vocab, dim}, take(int64_t(vocab) * dim));
  per_layer("input_layernorm.weight", {dim});
  per_layer("self_attn.q_proj.weight", {dim, dim});
  per_layer("self_attn.k_proj.weight", {kv, dim});
  per_layer("self_attn.v_proj.weight", {kv, dim});
  per_layer("self_attn.o_proj.weight", {dim, dim});
  per_layer("post_attention_layernorm.weight", {dim});
  per_layer("mlp.gate_proj.weight", {hidden, dim});
  per_layer("mlp.down_proj.weight", {dim, hidden});
  per_layer("mlp.up_proj.weight", {hidden, dim});
  add(kFinalNorm, {dim}, take(dim));
  take(int64_t(seq_len) * hd);  // legacy RoPE tables (cos and sin), unused
  if (!shared) add(kLmHead, {vocab, dim}, take(int64_t(vocab) * dim));
  m.tensors.keep_alive(file);
  return m;
}

}  // namespace mtb
