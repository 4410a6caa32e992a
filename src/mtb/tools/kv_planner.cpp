#include "mtb/tools/kv_planner.h"

#include <cstring>

#include "mtb/model/kv_cache.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "mtb/core/error.h"
#include "mtb/tools/report.h"

namespace mtb {

std::vector<KvVariant> kv_variants(const ModelConfig& c, const KvPlanRequest& r) {
  const int64_t L = c.n_layers, B = r.bytes_per_element;
  std::vector<KvVariant> out;
  auto add = [&](std::string name, bool configured, int kv_heads, int64_t elements) {
    for (const auto& v : out)
      if (v.name == name) return;
    out.push_back({std::move(name), configured, kv_heads, elements, elements * L * B});
  };
  // Per-head key and value sizes, and the MLA latent and RoPE key sizes.
  int64_t dk, dvv, dc, dr;
  if (c.is_mla()) {
    dk = c.qk_head_dim(), dvv = c.v_head_dim, dc = c.kv_lora_rank, dr = c.qk_rope_head_dim;
  } else {
    dk = dvv = c.head_dim, dc = 4 * int64_t(c.head_dim), dr = c.head_dim / 2;
  }
  auto gqa_name = [&](int k) {
    return k == c.n_heads ? std::string("MHA") : k == 1 ? std::string("MQA") : "GQA-" + std::to_string(k);
  };
  if (c.is_mla()) add("MLA", true, 0, dc + dr);
  else add(gqa_name(c.n_kv_heads), true, c.n_kv_heads, int64_t(c.n_kv_heads) * (dk + dvv));
  add("MHA", false, c.n_heads, int64_t(c.n_heads) * (dk + dvv));
  if (r.gqa_groups > 1 && r.gqa_groups < c.n_heads && c.n_heads % r.gqa_groups == 0)
    add(gqa_name(r.gqa_groups), false, r.gqa_groups, int64_t(r.gqa_groups) * (dk + dvv));
  add("MQA", false, 1, dk + dvv);
  add("MLA", false, 0, dc + dr);
  return out;
}

int64_t max_context_for_budget(int64_t budget_bytes, int64_t bytes_per_token) {
  if (budget_bytes <= 0 || bytes_per_token <= 0) return 0;
  return budget_bytes / bytes_per_token;
}

int64_t parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string num = text.substr(0, i), unit;
  for (size_t j = i; j < text.size(); ++j)
    if (text[j] != ' ') unit += char(std::tolower(static_cast<unsigned char>(text[j])));
  char* end = nullptr;
  const double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  double mult = -1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "kib" || unit == "k") mult = 1024.0;
  else if (unit == "mib" || unit == "m") mult = 1048576.0;
  else if (unit == "gib" || unit == "g") mult = 1073741824.0;
  else if (unit == "tib" || unit == "t") mult = 1099511627776.0;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "tb") mult = 1e12;
  if (v < 0 || mult < 0 || (end && *end) || !std::isfinite(v * mult) || v * mult > 9e18)
    throw Error("'" + text + "' is not a size (examples: 24GiB, 80GB, 512MiB, 1048576)");
  return int64_t(std::llround(v * mult));
}

int64_t parse_kv_budget(const std::string& text, const ModelConfig& c, DType type) {
  std::string t;
  for (char ch : text)
    if (ch != ' ') t += char(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* unit : {"tokens", "token", "tok"}) {
    const size_t n = std::strlen(unit);
    if (t.size() > n && t.compare(t.size() - n, n, unit) == 0) {
      const std::string num = t.substr(0, t.size() - n);
      char* end = nullptr;
      const long long v = std::strtoll(num.c_str(), &end, 10);
      if (num.empty() || *end || v <= 0 || v > (1ll << 40))
        throw Error("--kv-budget '" + text + "': not a positive count of tokens");
      return v;
    }
  }
  const int64_t bytes = parse_bytes(text);
  const int64_t per = KVCache::bytes_per_token(c, type);
  if (bytes < per)
    throw Error("--kv-budget '" + text + "' holds no token: one takes " + std::to_string(per) + " bytes of KV cache");
  return bytes / per;
}

int parse_element_bytes(const std::string& text) {
  if (text == "fp32" || text == "f32") return 4;
  if (text == "bf16" || text == "fp16" || text == "f16") return 2;
  if (text == "fp8" || text == "int8" || text == "q8") return 1;
  throw Error("'" + text + "' is not an element type (fp32, bf16, fp16, fp8, int8)");
}

namespace {

int64_t effective_budget(const ModelConfig& c, const KvPlanRequest& r, int64_t* weights) {
  *weights = r.weight_bytes_per_element > 0 ? count_params(c).total() * r.weight_bytes_per_element : 0;
  return r.budget_bytes > 0 ? r.budget_bytes - *weights : 0;
}

const char* type_name(int bytes) { return bytes == 4 ? "fp32" : bytes == 2 ? "bf16/fp16" : "fp8/int8"; }

}  // namespace

std::string kv_plan_text(const ModelConfig& c, const std::string& name, const KvPlanRequest& r) {
  const int64_t ctx = r.context > 0 ? r.context : c.max_context;
  int64_t weights = 0;
  const int64_t budget = effective_budget(c, r, &weights);
  const auto vars = kv_variants(c, r);
  std::ostringstream o;
  o << "KV cache of " << name << ": " << c.n_layers << " layers, " << type_name(r.bytes_per_element) << " ("
    << r.bytes_per_element << " B per element), context " << with_commas(ctx) << " tokens";
  if (r.budget_bytes > 0) {
    o << ", budget " << human_bytes(double(r.budget_bytes));
    if (weights) o << " minus " << human_bytes(double(weights)) << " of weights = " << human_bytes(double(std::max<int64_t>(budget, 0)));
  }
  o << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-18s %8s %14s %26s %16s", "variant", "kv heads", "elems/tok/layer", "bytes per token",
                ("at " + with_commas(ctx)).c_str());
  o << line;
  if (r.budget_bytes > 0) o << "   max context in budget";
  o << "   vs configured\n";
  const double base = double(vars[0].bytes_per_token);
  for (const auto& v : vars) {
    const std::string per = with_commas(v.bytes_per_token) + " B (" + human_bytes(double(v.bytes_per_token)) + ")";
    std::snprintf(line, sizeof line, "%-18s %8s %14s %26s %16s", (v.name + (v.configured ? " *" : "")).c_str(),
                  v.kv_heads ? std::to_string(v.kv_heads).c_str() : "-", with_commas(v.elements_per_token_per_layer).c_str(),
                  per.c_str(), human_bytes(double(v.bytes_per_token) * double(ctx)).c_str());
    o << line;
    if (r.budget_bytes > 0) {
      std::snprintf(line, sizeof line, "   %23s", with_commas(max_context_for_budget(budget, v.bytes_per_token)).c_str());
      o << line;
    }
    std::snprintf(line, sizeof line, "   %.2fx\n", double(v.bytes_per_token) / base);
    o << line;
  }
  o << "* as configured. Bytes per token = elements per token per layer x layers x bytes per element.\n";
  return o.str();
}

nlohmann::json kv_plan_json(const ModelConfig& c, const std::string& name, const KvPlanRequest& r) {
  const int64_t ctx = r.context > 0 ? r.context : c.max_context;
  int64_t weights = 0;
  const int64_t budget = effective_budget(c, r, &weights);
  nlohmann::json j = {{"model", name}, {"layers", c.n_layers}, {"bytes_per_element", r.bytes_per_element},
                      {"context", ctx}, {"variants", nlohmann::json::array()}};
  if (r.budget_bytes > 0) j["budget_bytes"] = r.budget_bytes, j["weights_bytes"] = weights;
  for (const auto& v : kv_variants(c, r)) {
    nlohmann::json e = {{"name", v.name}, {"configured", v.configured}, {"kv_heads", v.kv_heads},
                        {"elements_per_token_per_layer", v.elements_per_token_per_layer},
                        {"bytes_per_token", v.bytes_per_token}, {"bytes_at_context", v.bytes_per_token * ctx}};
    if (r.budget_bytes > 0) e["max_context"] = max_context_for_budget(budget, v.bytes_per_token);
    j["variants"].push_back(e);
  }
  return j;
}

}  // namespace mtb
