#include "mtb/io/model_file.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"
#include "mtb/io/gguf.h"
#include "mtb/io/gguf_tokenizer.h"
#include "mtb/io/llama2c.h"

namespace mtb {
namespace fs = std::filesystem;

namespace {

bool has_gguf_magic(const std::string& path) {
  char magic[4] = {0};
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    if (std::fread(magic, 1, 4, f) != 4) std::memset(magic, 0, 4);
    std::fclose(f);
  }
  return std::memcmp(magic, "GGUF", 4) == 0;
}

// The Hugging Face directory a path names (the directory, or a file in it).
std::string hf_dir(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return path;
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

}  // namespace

LoadedModel load_model_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": no such file or directory");
  if (fs::is_directory(path, ec)) return load_hf_dir(path);
  const fs::path p(path);
  if (p.filename() == "config.json" || p.extension() == ".safetensors") return load_hf_dir(hf_dir(path));
  if (has_gguf_magic(path) || p.extension() == ".gguf") return load_gguf(path);
  if (p.extension() == ".bin") return load_llama2c(path);
  throw Error(path + ": unknown model format (expected a Hugging Face directory or a llama2.c .bin file)");
}

Model open_model(const std::string& path) {
  const HugePageReads huge;  // the weights are about to be streamed, token after token
  LoadedModel m = load_model_file(path);
  return Model(std::move(m.config), std::move(m.tensors), m.where);
}

Tokenizer load_model_tokenizer(const std::string& model_path) {
  std::error_code ec;
  if (!fs::exists(model_path, ec)) throw Error(model_path + ": no such file or directory");
  if (!fs::is_directory(model_path, ec)) {
    if (has_gguf_magic(model_path)) return load_gguf_tokenizer(model_path);
    if (fs::path(model_path).extension() == ".json" && fs::path(model_path).filename() != "config.json")
      return Tokenizer::load(model_path);  // tokenizer.json (or a copy under another name)
  }
  const std::string dir = hf_dir(model_path);
  if (!fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec))
    throw Error(model_path + ": no tokenizer for this model (no tokenizer.json in " + dir + "): it takes token ids only");
  return Tokenizer::load(dir);
}

ModelTextInfo load_model_text_info(const std::string& model_path) {
  using json = nlohmann::json;
  ModelTextInfo info;
  std::error_code ec;
  if (!fs::exists(model_path, ec)) throw Error(model_path + ": no such file or directory");
  if (!fs::is_directory(model_path, ec) && has_gguf_magic(model_path)) {
    const GgufTokenizer t = read_gguf_tokenizer(GgufFile::open(model_path));
    info.origin = model_path;
    info.chat_template = t.chat_template;
    if (t.bos >= 0) info.bos_token = t.tokens[size_t(t.bos)];
    if (t.eos >= 0) info.eos_token = t.tokens[size_t(t.eos)];
    return info;
  }
  const std::string dir = hf_dir(model_path);
  const fs::path config = fs::path(dir) / "tokenizer_config.json";
  if (fs::is_regular_file(config, ec)) {
    info.origin = config.string();
    json j;
    try {
      j = json::parse(read_text_file(config.string()));
    } catch (const json::exception& e) {
      throw Error(config.string() + ": not valid JSON: " + e.what());
    }
    auto token = [&](const char* key) -> std::string {
      auto it = j.find(key);
      if (it == j.end()) return "";
      if (it->is_string()) return it->get<std::string>();
      if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
      return "";
    };
    info.bos_token = token("bos_token");
    info.eos_token = token("eos_token");
    if (auto ct = j.find("chat_template"); ct != j.end()) {
      if (ct->is_string()) info.chat_template = ct->get<std::string>();
      else if (ct->is_array())
        for (const json& e : *ct)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
            info.chat_template = e["template"].get<std::string>();
    }
  }
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";  // wins, as in transformers
  if (fs::is_regular_file(jinja, ec)) {
    info.chat_template = read_text_file(jinja.string());
    info.origin = jinja.string();
  }
  return info;
}

}  // namespace mtb
