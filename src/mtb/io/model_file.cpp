#include "mtb/io/model_file.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mtb/core/error.h"
#include "mtb/io/gguf.h"
#include "mtb/io/llama2c.h"

namespace mtb {
namespace fs = std::filesystem;

LoadedModel load_model_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": no such file or directory");
  if (fs::is_directory(path, ec)) return load_hf_dir(path);
  const fs::path p(path);
  if (p.filename() == "config.json" || p.extension() == ".safetensors")
    return load_hf_dir(p.has_parent_path() ? p.parent_path().string() : ".");
  char magic[4] = {0};
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    if (std::fread(magic, 1, 4, f) != 4) std::memset(magic, 0, 4);
    std::fclose(f);
  }
  if (std::memcmp(magic, "GGUF", 4) == 0 || p.extension() == ".gguf") return load_gguf(path);
  if (p.extension() == ".bin") return load_llama2c(path);
  throw Error(path + ": unknown model format (expected a Hugging Face directory or a llama2.c .bin file)");
}

Model open_model(const std::string& path) {
  LoadedModel m = load_model_file(path);
  return Model(std::move(m.config), std::move(m.tensors), m.where);
}

}  // namespace mtb
