// llama.cpp's GGUF tensor names <-> mtb's canonical (Hugging Face Llama / DeepSeek) names.
// Internal to the GGUF reader and writer.
#pragma once
#include <string>

namespace mtb {

// "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight" (and *layer = 3);
// "" for a name mtb does not know. Non-layer names leave *layer at -1.
std::string gguf_to_canonical(const std::string& gguf_name, int* layer);
// The inverse; "" for a canonical name GGUF has no name for (e.g. learned positions).
std::string canonical_to_gguf(const std::string& canonical);

}  // namespace mtb
