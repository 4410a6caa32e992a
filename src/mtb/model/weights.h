// The tensors a config calls for, under mtb's canonical names (Hugging Face's Llama and
// DeepSeek names; GPT-2's are mapped onto them at load), with the shapes they must have.
#pragma once
#include <string>
#include <vector>

#include "mtb/core/tensor.h"
#include "mtb/model/config.h"

namespace mtb {

enum class TensorRole { Matrix, Vector };  // Vector: norm scales and biases (kept in fp32)

struct TensorSpec {
  std::string name;
  Shape shape;  // [out, in] for matrices
  TensorRole role;
};

// Every tensor the model needs, in a stable order (embeddings, layers, final norm, head).
// Tied configs list no lm_head.weight.
std::vector<TensorSpec> expected_tensors(const ModelConfig& c);

// Canonical names.
std::string layer_prefix(int layer);  // "model.layers.{i}."
inline const char* kTokenEmbedding = "model.embed_tokens.weight";
inline const char* kPositionEmbedding = "model.embed_positions.weight";
inline const char* kFinalNorm = "model.norm.weight";
inline const char* kFinalNormBias = "model.norm.bias";
inline const char* kLmHead = "lm_head.weight";

// Checks that `tensors` holds exactly what `c` needs (a redundant lm_head.weight is
// allowed when tied and must match the embedding's shape). Errors name `where` or the
// tensor's source file, the tensor, and the expected and found shapes.
void check_tensors(const ModelConfig& c, const TensorMap& tensors, const std::string& where);

}  // namespace mtb
