#include "mtb/io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "mtb/core/error.h"
#include "mtb/core/mapped_file.h"

namespace mtb {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own limit is 100 MB
}

void read_safetensors(const std::string& path, TensorMap& out) {
  auto file = MappedFile::open(path);
  const uint8_t* base = file->data();
  const size_t size = file->size();
  if (size < 8) throw Error(path + ": truncated safetensors file (" + std::to_string(size) + " bytes, no header)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > kMaxHeader || header_len > size - 8)
    throw Error(path + ": corrupt safetensors header length " + std::to_string(header_len) + " (file has " +
                std::to_string(size) + " bytes)");
  json header;
  try {
    header = json::parse(base + 8, base + 8 + header_len);
  } catch (const json::exception& e) {
    throw Error(path + ": corrupt safetensors header: " + std::string(e.what()).substr(0, 200));
  }
  if (!header.is_object()) throw Error(path + ": corrupt safetensors header: not a JSON object");
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = path + ": tensor '" + name + "'";
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
      throw Error(where + ": header entry needs dtype, shape and data_offsets");
    const json& jd = info["dtype"];
    const json& js = info["shape"];
    const json& jo = info["data_offsets"];
    DType dtype;
    if (!jd.is_string()) throw Error(where + ": dtype is not a string");
    if (!dtype_from_name(jd.get<std::string>(), &dtype))
      throw Error(where + ": unsupported dtype " + jd.get<std::string>() + " (mtb reads F32, F16, BF16)");
    if (!js.is_array()) throw Error(where + ": shape is not an array");
    Shape shape;
    uint64_t numel = 1;
    for (const auto& d : js) {
      if (!d.is_number_unsigned()) throw Error(where + ": shape has a non-integer or negative dimension");
      const uint64_t n = d.get<uint64_t>();
      if (n > (1ull << 40) || (n && numel > (1ull << 40) / n)) throw Error(where + ": shape too large");
      numel *= n;
      shape.push_back(int64_t(n));
    }
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      throw Error(where + ": data_offsets must be two non-negative integers");
    const uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw Error(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                  "] run past the data (" + std::to_string(data_size) + " bytes); file truncated?");
    if (end - begin != numel * dtype_size(dtype))
      throw Error(where + ": " + std::to_string(end - begin) + " bytes do not hold shape " + shape_str(shape) +
                  " of " + dtype_name(dtype));
    out.add(name, Tensor{dtype, shape, data + begin}, path);
  }
  out.keep_alive(file);
}

void read_safetensors_dir(const std::string& dir, TensorMap& out) {
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    json j;
    try {
      j = json::parse(read_text_file(index.string()));
    } catch (const json::exception& e) {
      throw Error(index.string() + ": invalid JSON: " + std::string(e.what()).substr(0, 200));
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index.string() + ": missing key 'weight_map'");
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw Error(index.string() + ": weight_map entry '" + name + "' is not a file name");
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        throw Error(index.string() + ": weight_map entry '" + name + "' names a file outside the directory");
      shards.insert(f);
    }
    for (const auto& f : shards) read_safetensors((fs::path(dir) / f).string(), out);
    for (const auto& [name, file] : j["weight_map"].items()) {
      const NamedTensor* t = out.find(name);
      if (!t) throw Error(index.string() + ": tensor '" + name + "' is not in " + file.get<std::string>());
    }
    return;
  }
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  if (files.empty()) throw Error(dir + ": no *.safetensors files");
  std::sort(files.begin(), files.end());
  for (const auto& f : files) read_safetensors(f, out);
}

namespace {

// The header for `tensors`, padded with spaces to a multiple of 8 bytes.
std::string make_header(const NamedTensors& tensors, uint64_t* data_bytes) {
  json h = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    h[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  h["__metadata__"] = {{"format", "pt"}};
  std::string s = h.dump();
  while (s.size() % 8) s.push_back(' ');
  *data_bytes = offset;
  return s;
}

}  // namespace

void write_safetensors(const std::string& path, const NamedTensors& tensors) {
  uint64_t data_bytes = 0;
  const std::string header = make_header(tensors, &data_bytes);
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(path + ": cannot write: " + std::strerror(errno));
  const uint64_t len = header.size();
  bool ok = std::fwrite(&len, 8, 1, f) == 1 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const auto& [name, t] : tensors)
    ok = ok && (t.nbytes() == 0 || std::fwrite(t.data, 1, t.nbytes(), f) == t.nbytes());
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": write failed");
  }
}

void write_safetensors_dir(const std::string& dir, const NamedTensors& tensors, size_t max_shard_bytes) {
  fs::create_directories(dir);
  std::vector<NamedTensors> shards(1);
  size_t in_shard = 0, total = 0;
  for (const auto& nt : tensors) {
    if (max_shard_bytes > 0 && in_shard > 0 && in_shard + nt.second.nbytes() > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(nt);
    in_shard += nt.second.nbytes();
    total += nt.second.nbytes();
  }
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
    return;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors((fs::path(dir) / name).string(), shards[i]);
    for (const auto& [tname, t] : shards[i]) index["weight_map"][tname] = name;
  }
  const std::string text = index.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), text.data(), text.size());
}

}  // namespace mtb
