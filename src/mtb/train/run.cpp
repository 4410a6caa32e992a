// A training run (see run.h): the loop, batches, validation, metrics, progress, and
// checkpoints that are written atomically and resume exactly.
#include "mtb/train/run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"
#include "mtb/io/hf.h"
#include "mtb/io/safetensors.h"
#include "mtb/tools/init.h"
#include "mtb/train/forward_backward.h"
#include "mtb/train/optim.h"
#include "mtb/train/trainable.h"

namespace mtb::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- options ----------------------------------------------------------------------------

json TrainOptions::to_json() const {
  return json{{"steps", steps},         {"batch", batch},
              {"seq_len", seq_len},     {"grad_accum", grad_accum},
              {"lr", lr},               {"min_lr", min_lr},
              {"warmup", warmup},       {"weight_decay", weight_decay},
              {"beta1", beta1},         {"beta2", beta2},
              {"eps", eps},             {"clip", clip},
              {"eval_every", eval_every}, {"eval_batches", eval_batches},
              {"save_every", save_every}, {"seed", seed},
              {"init_std", init_std},   {"corpus", corpus},
              {"val_fraction", val_fraction}};
}

TrainOptions TrainOptions::from_json(const json& j, const std::string& where) {
  TrainOptions o;
  auto get = [&](const char* key, auto& v) {
    if (!j.contains(key)) throw Error(where + ": missing key 'options." + key + "'");
    try {
      j.at(key).get_to(v);
    } catch (const json::exception&) {
      throw Error(where + ": key 'options." + key + "' has the wrong type");
    }
  };
  get("steps", o.steps), get("batch", o.batch), get("seq_len", o.seq_len), get("grad_accum", o.grad_accum);
  get("lr", o.lr), get("min_lr", o.min_lr), get("warmup", o.warmup), get("weight_decay", o.weight_decay);
  get("beta1", o.beta1), get("beta2", o.beta2), get("eps", o.eps), get("clip", o.clip);
  get("eval_every", o.eval_every), get("eval_batches", o.eval_batches), get("save_every", o.save_every);
  get("seed", o.seed), get("init_std", o.init_std), get("corpus", o.corpus), get("val_fraction", o.val_fraction);
  return o;
}

void TrainOptions::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error(what);
  };
  need(steps >= 1, "--steps must be at least 1, got " + std::to_string(steps));
  need(batch >= 1, "--batch must be at least 1, got " + std::to_string(batch));
  need(seq_len >= 1, "--seq-len must be at least 1, got " + std::to_string(seq_len));
  need(grad_accum >= 1, "--grad-accum must be at least 1, got " + std::to_string(grad_accum));
  need(std::isfinite(lr) && lr > 0, "--lr must be positive");
  need(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr, "--min-lr must be in [0, --lr]");
  need(warmup >= 0, "--warmup must not be negative");
  need(std::isfinite(weight_decay) && weight_decay >= 0, "--weight-decay must not be negative");
  need(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "AdamW betas must be in [0, 1)");
  need(eval_every >= 0, "--eval-every must not be negative");
  need(eval_batches >= 1, "--eval-batches must be at least 1");
  need(save_every >= 0, "--save-every must not be negative");
  need(std::isfinite(clip), "--clip must be a number");
}

// ---- configs as JSON ---------------------------------------------------------------------

namespace {

template <typename E>
struct EnumNames {
  std::vector<std::pair<E, const char*>> items;
  const char* name(E e) const {
    for (const auto& [v, n] : items)
      if (v == e) return n;
    return "?";
  }
  E parse(const std::string& s, const std::string& where, const std::string& key) const {
    std::string known;
    for (const auto& [v, n] : items) {
      if (s == n) return v;
      known += (known.empty() ? "" : ", ") + std::string(n);
    }
    throw Error(where + ": key '" + key + "' is '" + s + "' (expected one of " + known + ")");
  }
};

const EnumNames<NormKind> kNorms{{{NormKind::RMSNorm, "rmsnorm"}, {NormKind::LayerNorm, "layernorm"}}};
const EnumNames<FfnKind> kFfns{{{FfnKind::SwiGLU, "swiglu"}, {FfnKind::GeluMlp, "gelu"}}};
const EnumNames<PositionKind> kPositions{
    {{PositionKind::RoPE, "rope"}, {PositionKind::Learned, "learned"}, {PositionKind::None, "none"}}};
const EnumNames<RopeLayout> kLayouts{{{RopeLayout::RotateHalf, "rotate_half"}, {RopeLayout::Interleaved, "interleaved"}}};
const EnumNames<AttentionKind> kAttentions{{{AttentionKind::Standard, "standard"}, {AttentionKind::MLA, "mla"}}};
const EnumNames<BiasKind> kBiases{{{BiasKind::None, "none"}, {BiasKind::QKV, "qkv"}, {BiasKind::All, "all"}}};

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

json config_to_json(const ModelConfig& c) {
  if (c.moe.enabled()) throw Error("config: mixture-of-experts configs cannot be written in mtb's config form");
  if (c.rope_scaling.type == RopeScaling::Type::Yarn) throw Error("config: YaRN cannot be written in mtb's config form");
  json j{{"family", c.family},
         {"vocab", c.vocab},
         {"d_model", c.d_model},
         {"n_layers", c.n_layers},
         {"n_heads", c.n_heads},
         {"n_kv_heads", c.n_kv_heads},
         {"head_dim", c.head_dim},
         {"d_ff", c.d_ff},
         {"norm", kNorms.name(c.norm)},
         {"norm_eps", c.norm_eps},
         {"ffn", kFfns.name(c.ffn)},
         {"position", kPositions.name(c.position)},
         {"rope_layout", kLayouts.name(c.rope_layout)},
         {"rope_base", c.rope_base},
         {"attention", kAttentions.name(c.attention)},
         {"q_lora_rank", c.q_lora_rank},
         {"kv_lora_rank", c.kv_lora_rank},
         {"qk_nope_head_dim", c.qk_nope_head_dim},
         {"qk_rope_head_dim", c.qk_rope_head_dim},
         {"v_head_dim", c.v_head_dim},
         {"qk_norm", c.qk_norm},
         {"tied_embeddings", c.tied_embeddings},
         {"bias", kBiases.name(c.bias)},
         {"max_context", c.max_context},
         {"bos_id", c.bos_id},
         {"eos_ids", c.eos_ids}};
  if (c.rope_scaling.type == RopeScaling::Type::Llama3)
    j["rope_scaling"] = {{"type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position", c.rope_scaling.original_max_position}};
  if (!c.nope_layers.empty()) {
    json n = json::array();
    for (bool b : c.nope_layers) n.push_back(b);
    j["nope_layers"] = n;
  }
  return j;
}

ModelConfig config_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": not a JSON object");
  static const std::vector<std::string> known = {
      "family", "vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "norm",
      "norm_eps", "ffn", "position", "rope_layout", "rope_base", "attention", "q_lora_rank", "kv_lora_rank",
      "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "qk_norm", "tied_embeddings", "bias", "max_context",
      "bos_id", "eos_ids", "rope_scaling", "nope_layers", "comment"};
  for (const auto& [k, v] : j.items())
    if (std::find(known.begin(), known.end(), k) == known.end()) throw Error(where + ": unknown key '" + k + "'");
  ModelConfig c;
  auto get = [&](const char* key, auto& v, bool required) {
    if (!j.contains(key)) {
      if (required) throw Error(where + ": missing key '" + std::string(key) + "'");
      return;
    }
    try {
      j.at(key).get_to(v);
    } catch (const json::exception&) {
      throw Error(where + ": key '" + std::string(key) + "' has the wrong type");
    }
  };
  auto get_enum = [&](const char* key, const auto& names, auto& v) {
    std::string s;
    get(key, s, false);
    if (!s.empty()) v = names.parse(s, where, key);
  };
  get("family", c.family, false);
  get("vocab", c.vocab, true), get("d_model", c.d_model, true), get("n_layers", c.n_layers, true);
  get("n_heads", c.n_heads, true);
  c.n_kv_heads = c.n_heads;
  get("n_kv_heads", c.n_kv_heads, false);
  c.head_dim = c.n_heads > 0 ? c.d_model / c.n_heads : 0;
  get("head_dim", c.head_dim, false);
  get("d_ff", c.d_ff, true);
  get_enum("norm", kNorms, c.norm);
  get("norm_eps", c.norm_eps, false);
  get_enum("ffn", kFfns, c.ffn);
  get_enum("position", kPositions, c.position);
  get_enum("rope_layout", kLayouts, c.rope_layout);
  get("rope_base", c.rope_base, false);
  get_enum("attention", kAttentions, c.attention);
  get("q_lora_rank", c.q_lora_rank, false), get("kv_lora_rank", c.kv_lora_rank, false);
  get("qk_nope_head_dim", c.qk_nope_head_dim, false), get("qk_rope_head_dim", c.qk_rope_head_dim, false);
  get("v_head_dim", c.v_head_dim, false);
  get("qk_norm", c.qk_norm, false), get("tied_embeddings", c.tied_embeddings, false);
  get_enum("bias", kBiases, c.bias);
  get("max_context", c.max_context, false);
  get("bos_id", c.bos_id, false);
  get("eos_ids", c.eos_ids, false);
  if (j.contains("nope_layers")) {
    std::vector<bool> n;
    get("nope_layers", n, false);
    c.nope_layers = n;
  }
  if (j.contains("rope_scaling")) {
    const json& s = j["rope_scaling"];
    if (!s.is_object() || s.value("type", "") != "llama3")
      throw Error(where + ": key 'rope_scaling' must be {\"type\": \"llama3\", ...}");
    c.rope_scaling.type = RopeScaling::Type::Llama3;
    c.rope_scaling.factor = s.value("factor", 1.0);
    c.rope_scaling.low_freq_factor = s.value("low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = s.value("high_freq_factor", 4.0);
    c.rope_scaling.original_max_position = s.value("original_max_position", 0);
  }
  c.validate(where);
  return c;
}

ModelConfig read_config_file(const std::string& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw Error(path + ": invalid JSON: " + std::string(e.what()).substr(0, 200));
  }
  if (j.is_object() && j.contains("model_type")) return config_from_hf_json(j, path);
  return config_from_json(j, path);
}

uint64_t config_hash(const ModelConfig& c) {
  const std::string s = config_to_json(c).dump();
  return fnv1a(s.data(), s.size());
}

uint64_t data_hash(const TokenData& d) {
  uint64_t h = fnv1a(d.train.data(), d.train.size() * sizeof(int32_t));
  const uint64_t n = d.train.size();
  h = fnv1a(&n, sizeof n, h);
  return fnv1a(d.val.data(), d.val.size() * sizeof(int32_t), h);
}

// ---- checkpoints ---------------------------------------------------------------------------

namespace {

const char* kTmpDir = ".checkpoint.tmp";
const char* kReadyDir = ".checkpoint.ready";
const char* kState = "trainer_state.json";
const char* kMetrics = "metrics.jsonl";

// splitmix64: the batch sampler's generator; its one word of state is checkpointed.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool hf_can_express(const ModelConfig& c) {
  try {
    config_to_hf_json(c, DType::F32);
    return true;
  } catch (const Error&) {
    return false;
  }
}

void fsync_dir(const fs::path& dir) {
  FILE* f = std::fopen(dir.c_str(), "r");
  if (f) {
    fsync(fileno(f));
    std::fclose(f);
  }
}

void write_text(const fs::path& path, const std::string& text) { write_file_atomic(path.string(), text.data(), text.size()); }

json parse_json_file(const fs::path& path) {
  try {
    return json::parse(read_text_file(path.string()));
  } catch (const json::exception& e) {
    throw Error(path.string() + ": invalid JSON: " + std::string(e.what()).substr(0, 200));
  }
}

// Moves a committed checkpoint's files into dir (trainer_state.json last) and removes the
// ready directory; drops an uncommitted one.
void finish_checkpoint(const fs::path& dir, const RunHooks& hooks) {
  const fs::path tmp = dir / kTmpDir, ready = dir / kReadyDir;
  if (fs::exists(ready)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(ready)) files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
      return std::make_pair(a == kState, a) < std::make_pair(b == kState, b);
    });
    for (const std::string& f : files) {
      fs::rename(ready / f, dir / f);
      if (hooks.on_checkpoint) hooks.on_checkpoint("moved:" + f);
    }
    fsync_dir(dir);
    fs::remove_all(ready);
  }
  fs::remove_all(tmp);
}

struct Checkpoint {
  int64_t step = 0, tokens = 0;
  uint64_t rng = 0;
  double elapsed_s = 0;
};

// Writes the model, the optimizer and the state into dir/.checkpoint.tmp, commits it by a
// rename and moves its files into dir (trainer_state.json last).
void write_checkpoint(const fs::path& dir, const Trainable& t, const AdamW& opt, const TrainOptions& o,
                      const Checkpoint& ck, uint64_t dhash, const RunHooks& hooks) {
  const fs::path tmp = dir / kTmpDir, ready = dir / kReadyDir;
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const ModelConfig& c = t.config();
  const TensorMap tensors = t.to_tensors();
  if (hf_can_express(c)) {
    save_hf_dir(tmp.string(), c, tensors, DType::F32);
  } else {  // canonical names, and the config in mtb's own form
    NamedTensors out;
    for (const TensorSpec& s : expected_tensors(c)) out.emplace_back(s.name, tensors.find(s.name)->tensor);
    write_safetensors((tmp / "model.safetensors").string(), out);
    write_text(tmp / "config.json", config_to_json(c).dump(2) + "\n");
  }
  {  // an index, so that readers of the directory take only model.safetensors as weights
    TensorMap written;
    read_safetensors((tmp / "model.safetensors").string(), written);
    json index{{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
    uint64_t total = 0;
    for (const auto& [name, nt] : written.items()) {
      index["weight_map"][name] = "model.safetensors";
      total += nt.tensor.nbytes();
    }
    index["metadata"]["total_size"] = total;
    write_text(tmp / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  const Shape shape{t.size()};
  write_safetensors((tmp / "optimizer.safetensors").string(),
                    {{"exp_avg", Tensor{DType::F32, shape, opt.m().data()}},
                     {"exp_avg_sq", Tensor{DType::F32, shape, opt.v().data()}}});
  const json state{{"format", "mtb-train-1"},
                   {"step", ck.step},
                   {"tokens", ck.tokens},
                   {"optimizer_steps", opt.steps()},
                   {"rng_state", hex64(ck.rng)},
                   {"elapsed_s", ck.elapsed_s},
                   {"options", o.to_json()},
                   {"config", config_to_json(c)},
                   {"config_hash", hex64(config_hash(c))},
                   {"data_hash", hex64(dhash)}};
  write_text(tmp / kState, state.dump(2) + "\n");
  fsync_dir(tmp);
  if (hooks.on_checkpoint) hooks.on_checkpoint("written");
  fs::remove_all(ready);
  fs::rename(tmp, ready);  // the commit point
  fsync_dir(dir);
  if (hooks.on_checkpoint) hooks.on_checkpoint("committed");
  finish_checkpoint(dir, hooks);
}

}  // namespace

void recover_run_dir(const std::string& dir) {
  try {
    finish_checkpoint(dir, RunHooks{});
  } catch (const fs::filesystem_error& e) {
    throw Error(dir + ": cannot finish the interrupted checkpoint: " + e.code().message());
  }
}


// ---- the run -------------------------------------------------------------------------------

namespace {

struct StateFile {
  json j;
  Checkpoint ck;
  TrainOptions options;
  ModelConfig config;
  uint64_t config_hash = 0, data_hash = 0;
  int64_t optimizer_steps = 0;
};

uint64_t parse_hex64(const json& j, const std::string& key, const std::string& where) {
  const std::string s = j.value(key, "");
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw Error(where + ": key '" + key + "' is not a 16-digit hex number");
  return std::stoull(s, nullptr, 16);
}

StateFile read_state_file(const fs::path& dir) {
  const fs::path path = dir / kState;
  if (!fs::exists(path)) throw Error(dir.string() + ": no " + kState + " (not a training run directory)");
  StateFile s;
  const std::string where = path.string();
  s.j = parse_json_file(path);
  if (!s.j.is_object() || s.j.value("format", "") != "mtb-train-1")
    throw Error(where + ": not an mtb training state (key 'format' is not 'mtb-train-1')");
  try {
    s.ck.step = s.j.at("step").get<int64_t>();
    s.ck.tokens = s.j.at("tokens").get<int64_t>();
    s.ck.elapsed_s = s.j.at("elapsed_s").get<double>();
    s.optimizer_steps = s.j.at("optimizer_steps").get<int64_t>();
  } catch (const json::exception&) {
    throw Error(where + ": missing or mistyped key among step, tokens, elapsed_s, optimizer_steps");
  }
  s.ck.rng = parse_hex64(s.j, "rng_state", where);
  s.config_hash = parse_hex64(s.j, "config_hash", where);
  s.data_hash = parse_hex64(s.j, "data_hash", where);
  if (!s.j.contains("options")) throw Error(where + ": missing key 'options'");
  s.options = TrainOptions::from_json(s.j["options"], where);
  if (!s.j.contains("config")) throw Error(where + ": missing key 'config'");
  s.config = config_from_json(s.j["config"], where + " (config)");
  return s;
}

// "key: checkpoint X, given Y" for the first differing key of two JSON objects.
std::string first_difference(const json& ckpt, const json& given) {
  for (const auto& [k, v] : given.items())
    if (!ckpt.contains(k) || ckpt[k] != v)
      return k + " " + (ckpt.contains(k) ? ckpt[k].dump() : "absent") + " in the checkpoint, " + v.dump() + " given";
  for (const auto& [k, v] : ckpt.items())
    if (!given.contains(k)) return k + " " + v.dump() + " in the checkpoint, absent given";
  return "no visible difference";
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600), (long long)(t / 60 % 60));
  else std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  return buf;
}

// Progress on stderr: one line redrawn with \r on a terminal, plain lines every 5% otherwise.
class Progress {
 public:
  Progress(FILE* f, bool quiet, int64_t total) : f_(quiet ? nullptr : f), total_(total) {
    tty_ = f_ && isatty(fileno(f_));
  }
  void step(int64_t step, double loss, double lr, double tok_s, double eta_s) {
    if (!f_) return;
    const int64_t every = std::max<int64_t>(1, total_ / 20);
    if (!tty_ && step % every != 0 && step != total_ && step != 1) return;
    const int width = 20;
    const int fill = int(double(step) / double(total_) * width);
    std::string bar = "[" + std::string(size_t(fill), '#') + std::string(size_t(width - fill), '.') + "]";
    std::fprintf(f_, "%sstep %lld/%lld %s loss %.4f | lr %.2e | %.0f tok/s | ETA %s%s", tty_ ? "\r" : "",
                 (long long)step, (long long)total_, bar.c_str(), loss, lr, tok_s, duration(eta_s).c_str(),
                 tty_ ? "   " : "\n");
    std::fflush(f_);
    open_line_ = tty_;
  }
  void line(const std::string& text) {
    if (!f_) return;
    std::fprintf(f_, "%s%s\n", open_line_ ? "\n" : "", text.c_str());
    std::fflush(f_);
    open_line_ = false;
  }
  void done() {
    if (f_ && open_line_) std::fprintf(f_, "\n");
    open_line_ = false;
  }

 private:
  FILE* f_;
  int64_t total_;
  bool tty_ = false, open_line_ = false;
};

void copy_file_atomic(const std::string& from, const fs::path& to) {
  const std::string bytes = read_text_file(from);
  write_file_atomic(to.string(), bytes.data(), bytes.size());
}

}  // namespace

RunState read_run_state(const std::string& dir) {
  recover_run_dir(dir);
  const StateFile s = read_state_file(dir);
  return RunState{s.options, s.config, s.ck.step};
}

RunResult run_training(const ModelConfig& config, const TokenData& data, const TrainOptions& options,
                       const RunSettings& settings) {
  const fs::path dir = settings.dir;
  const RunHooks& hooks = settings.hooks;
  options.validate();
  config.validate("config");
  const TrainOptions& o = options;
  const int B = o.batch, T = o.seq_len, accum = o.grad_accum;
  if (T > config.max_context)
    throw Error("--seq-len " + std::to_string(T) + " exceeds the config's max_context of " + std::to_string(config.max_context));
  const int64_t batch_tokens = int64_t(B) * (T + 1);
  if (int64_t(data.train.size()) < batch_tokens)
    throw Error("corpus: the training split has " + std::to_string(data.train.size()) +
                " tokens, fewer than one batch (batch " + std::to_string(B) + " x (seq_len " + std::to_string(T) +
                " + 1) = " + std::to_string(batch_tokens) + ")");
  if (int64_t(data.val.size()) < T + 1)
    throw Error("corpus: the validation split has " + std::to_string(data.val.size()) +
                " tokens, fewer than one sequence of seq_len + 1 = " + std::to_string(T + 1));
  for (const auto* stream : {&data.train, &data.val})
    for (int32_t id : *stream)
      if (id < 0 || id >= config.vocab)
        throw Error("corpus: token id " + std::to_string(id) + " is outside the config's vocabulary of " +
                    std::to_string(config.vocab) + " (the tokenizer and the config disagree)");
  const uint64_t dhash = data_hash(data);

  Trainable t(config);
  AdamW opt(t, AdamWConfig{o.beta1, o.beta2, o.eps, o.weight_decay});
  Checkpoint ck;
  int64_t last_saved = -1;
  try {
    if (!settings.resume) {
      if (fs::exists(dir) && !(fs::is_directory(dir) && fs::is_empty(dir)))
        throw Error(dir.string() + ": exists and is not empty (pass --resume to continue the run in it, or choose another directory)");
      fs::create_directories(dir);
      if (!settings.tokenizer_file.empty()) copy_file_atomic(settings.tokenizer_file, dir / "tokenizer.json");
      write_text(dir / kMetrics, "");
      t = Trainable::from_tensors(config, init_weights(config, o.seed, DType::F32, o.init_std), "init");
      ck.rng = o.seed ^ 0x6A09E667F3BCC908ull;
    } else {
      recover_run_dir(dir.string());
      const StateFile s = read_state_file(dir);
      const std::string where = (dir / kState).string();
      if (s.config_hash != config_hash(config))
        throw Error("resume: " + dir.string() + " holds a run of a different config (" +
                    first_difference(config_to_json(s.config), config_to_json(config)) + ")");
      json a = s.options.to_json(), b = o.to_json();
      for (const char* k : {"steps", "eval_every", "save_every", "corpus"}) a.erase(k), b.erase(k);
      if (a != b) throw Error("resume: options differ from the checkpoint's (" + first_difference(a, b) + ")");
      if (s.data_hash != dhash)
        throw Error("resume: the corpus and tokenizer give other tokens than the run in " + dir.string() + " was trained on");
      LoadedModel m;
      if (parse_json_file(dir / "config.json").contains("model_type")) {
        m = load_hf_dir(dir.string());
      } else {
        read_safetensors((dir / "model.safetensors").string(), m.tensors);
      }
      t = Trainable::from_tensors(config, m.tensors, dir.string());
      TensorMap om;
      read_safetensors((dir / "optimizer.safetensors").string(), om);
      for (const char* name : {"exp_avg", "exp_avg_sq"}) {
        const NamedTensor* nt = om.find(name);
        if (!nt || nt->tensor.dtype != DType::F32 || nt->tensor.numel() != t.size())
          throw Error((dir / "optimizer.safetensors").string() + ": tensor '" + name + "' is missing or not F32 [" +
                      std::to_string(t.size()) + "]");
        std::vector<float>& dst = std::string(name) == "exp_avg" ? opt.m() : opt.v();
        std::copy(nt->tensor.f32(), nt->tensor.f32() + t.size(), dst.begin());
      }
      opt.set_steps(s.optimizer_steps);
      ck = s.ck;
      last_saved = ck.step;
      // Metrics past the checkpoint belong to steps that will be redone.
      std::string kept;
      if (fs::exists(dir / kMetrics)) {
        std::istringstream in(read_text_file((dir / kMetrics).string()));
        for (std::string line; std::getline(in, line);) {
          if (line.empty()) continue;
          json lj;
          try {
            lj = json::parse(line);
          } catch (const json::exception&) {
            continue;  // a line cut by a kill
          }
          if (lj.is_object() && lj.value("step", int64_t(-1)) <= ck.step) kept += line + "\n";
        }
      }
      write_text(dir / kMetrics, kept);
    }
  } catch (const fs::filesystem_error& e) {
    throw Error(dir.string() + ": " + e.code().message());
  }

  RunResult r;
  r.step = ck.step, r.tokens = ck.tokens, r.elapsed_s = ck.elapsed_s;
  FILE* metrics = std::fopen((dir / kMetrics).c_str(), "ab");
  if (!metrics) throw Error((dir / kMetrics).string() + ": cannot append");
  std::unique_ptr<FILE, int (*)(FILE*)> metrics_guard(metrics, &std::fclose);
  auto log = [&](const nlohmann::ordered_json& j) {
    const std::string line = j.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), metrics);
    std::fflush(metrics);
  };

  Activations acts, eval_acts;
  std::vector<int32_t> ids(size_t(B) * T), targets(size_t(B) * T);
  // Validation: the first eval_batches x B windows of the validation stream, end to end.
  auto validate = [&]() -> double {
    const int64_t windows = std::min<int64_t>(int64_t(o.eval_batches) * B, int64_t(data.val.size() - 1) / T);
    LossSum total;
    for (int64_t w0 = 0; w0 < windows; w0 += B) {
      const int nb = int(std::min<int64_t>(B, windows - w0));
      for (int b = 0; b < nb; ++b) {
        const int32_t* src = data.val.data() + (w0 + b) * T;
        std::copy(src, src + T, ids.begin() + int64_t(b) * T);
        std::copy(src + 1, src + T + 1, targets.begin() + int64_t(b) * T);
      }
      const LossSum l = evaluate(t, ids.data(), targets.data(), nb, T, eval_acts);
      total.sum += l.sum, total.count += l.count;
    }
    return total.mean();
  };
  Progress progress(settings.progress, settings.quiet, o.steps);
  auto save = [&] {
    write_checkpoint(dir, t, opt, o, ck, dhash, hooks);
    last_saved = ck.step;
  };
  if (!settings.resume) {
    r.val_loss = validate();
    log({{"step", 0}, {"tokens", 0}, {"val_loss", r.val_loss}});
    progress.line("step 0: val loss " + fmt("%.4f", r.val_loss));
    save();
  } else if (ck.step >= o.steps) {
    progress.line(dir.string() + ": already finished at step " + std::to_string(ck.step) + " (raise --steps to continue)");
    r.finished = true;
    return r;
  }

  const LrSchedule sched{o.lr, o.min_lr, o.warmup, int(std::min<int64_t>(o.steps, INT32_MAX))};
  const float scale = float(1.0 / double(int64_t(B) * T * accum));
  const int64_t n_starts = int64_t(data.train.size()) - T;  // window starts in [0, n_starts)
  const int64_t save_every = o.save_every > 0 ? o.save_every : o.eval_every;
  const auto t0 = std::chrono::steady_clock::now();
  const double elapsed0 = ck.elapsed_s;
  const int64_t step0 = ck.step;
  while (ck.step < o.steps) {
    const int64_t s = ck.step;
    const double lr = sched.at(s);
    t.zero_grads();
    LossSum total;
    for (int a = 0; a < accum; ++a) {
      for (int b = 0; b < B; ++b) {
        const int64_t start = int64_t(splitmix64(ck.rng) % uint64_t(n_starts));
        const int32_t* src = data.train.data() + start;
        std::copy(src, src + T, ids.begin() + int64_t(b) * T);
        std::copy(src + 1, src + T + 1, targets.begin() + int64_t(b) * T);
      }
      const LossSum l = forward_backward(t, ids.data(), targets.data(), B, T, acts, scale);
      total.sum += l.sum, total.count += l.count;
    }
    double loss = total.mean();
    if (hooks.on_loss) hooks.on_loss(s + 1, loss);
    const std::string kept = last_saved >= 0 ? "; the checkpoint of step " + std::to_string(last_saved) + " in " +
                                                   dir.string() + " is kept"
                                             : "";
    if (!std::isfinite(loss))
      throw Error("step " + std::to_string(s + 1) + ": the training loss is " + fmt("%g", loss) +
                  " (diverged; try a lower --lr than " + fmt("%g", lr) + ")" + kept);
    const double norm = clip_grad_norm(t, o.clip);
    if (!std::isfinite(norm))
      throw Error("step " + std::to_string(s + 1) + ": the gradient norm is " + fmt("%g", norm) +
                  " (diverged; try a lower --lr than " + fmt("%g", lr) + ")" + kept);
    opt.step(t, lr);
    ck.step = s + 1;
    ck.tokens += int64_t(B) * T * accum;
    const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ck.elapsed_s = elapsed0 + run_s;
    r.tokens_per_s = run_s > 0 ? double((ck.step - step0) * int64_t(B) * T * accum) / run_s : 0.0;
    r.train_loss = loss;
    log({{"step", ck.step},
         {"tokens", ck.tokens},
         {"train_loss", loss},
         {"lr", lr},
         {"tokens_per_s", r.tokens_per_s},
         {"elapsed_s", ck.elapsed_s}});
    const double eta = run_s / double(ck.step - step0) * double(o.steps - ck.step);
    progress.step(ck.step, loss, lr, r.tokens_per_s, eta);
    const bool last = ck.step == o.steps;
    const bool stop = (settings.stop_at > 0 && ck.step >= settings.stop_at) || (hooks.stop_requested && hooks.stop_requested());
    if (last || (o.eval_every > 0 && ck.step % o.eval_every == 0)) {
      r.val_loss = validate();
      log({{"step", ck.step}, {"tokens", ck.tokens}, {"val_loss", r.val_loss}});
      progress.line("step " + std::to_string(ck.step) + ": val loss " + fmt("%.4f", r.val_loss) + " (train " +
                    fmt("%.4f", loss) + ")");
    }
    if (last || stop || (save_every > 0 && ck.step % save_every == 0)) save();
    if (stop) break;
  }
  progress.done();
  r.step = ck.step, r.tokens = ck.tokens, r.elapsed_s = ck.elapsed_s;
  r.finished = ck.step >= o.steps;
  return r;
}

}  // namespace mtb::train
