// The KV-cache planner: bytes per token, the cache at a context length, and the longest
// context that fits a memory budget, for a config and for its MHA / GQA-k / MQA / MLA
// alternatives of the same dimensions (the chapter's worked examples).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mtb/core/dtype.h"
#include "mtb/model/config.h"

namespace mtb {

struct KvVariant {
  std::string name;                  // "MHA", "GQA-8", "MQA", "MLA"
  bool configured = false;           // the model as configured
  int kv_heads = 0;                  // 0 for MLA
  int64_t elements_per_token_per_layer = 0;
  int64_t bytes_per_token = 0;
};

struct KvPlanRequest {
  int bytes_per_element = 2;  // fp32 4, bf16/fp16 2, fp8/int8 1
  int64_t context = 0;        // tokens; 0: the config's max_context
  int64_t budget_bytes = 0;   // 0: no budget
  int weight_bytes_per_element = 0;  // > 0: subtract the weights at this size from the budget
  int gqa_groups = 8;         // k of the GQA-k alternative
};

// The configured variant first, then the alternatives (no duplicate of the configured one).
// Standard attention: 2·L·n_kv·dh elements per token; MLA alternatives of a standard model
// use DeepSeek's proportions d_c = 4·dh, d_R = dh/2. For an MLA model the per-head
// alternatives cache keys of qk_nope + qk_rope and values of v_head_dim elements per head.
std::vector<KvVariant> kv_variants(const ModelConfig& c, const KvPlanRequest& r);

// The longest context whose cache fits `budget` bytes (0 when nothing fits).
int64_t max_context_for_budget(int64_t budget_bytes, int64_t bytes_per_token);

// "24GiB", "80 GB", "512MiB", "1048576": bytes. Throws mtb::Error naming the text.
int64_t parse_bytes(const std::string& text);

// A KV pool budget as token rows: "2GiB" (bytes, divided by the rows' size for this model and
// element type, padding included) or "4096 tokens" / "4096t". Throws mtb::Error naming the
// text for anything else or a budget under one token.
int64_t parse_kv_budget(const std::string& text, const ModelConfig& c, DType type);
// "fp32" / "f32" -> 4, "bf16" / "fp16" / "f16" -> 2, "fp8" / "int8" -> 1. Throws mtb::Error.
int parse_element_bytes(const std::string& text);

std::string kv_plan_text(const ModelConfig& c, const std::string& name, const KvPlanRequest& r);
nlohmann::json kv_plan_json(const ModelConfig& c, const std::string& name, const KvPlanRequest& r);

}  // namespace mtb
