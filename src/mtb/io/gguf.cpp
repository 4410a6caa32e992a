// GGUF reading: the bounds-checked parser (GgufFile) and the mapping of llama.cpp's
// architectures onto mtb's ModelConfig and canonical tensor names (load_gguf).
#include "mtb/io/gguf.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "mtb/core/error.h"
#include "mtb/io/gguf_names.h"
#include "mtb/model/weights.h"

namespace mtb {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "uint8";
    case GgufType::I8: return "int8";
    case GgufType::U16: return "uint16";
    case GgufType::I16: return "int16";
    case GgufType::U32: return "uint32";
    case GgufType::I32: return "int32";
    case GgufType::F32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "uint64";
    case GgufType::I64: return "int64";
    case GgufType::F64: return "float64";
  }
  return "unknown";
}

const char* ggml_type_name(uint32_t type) {
  static const char* names[] = {"F32",     "F16",    "Q4_0",   "Q4_1",   "Q4_2",   "Q4_3",  "Q5_0",    "Q5_1",
                                "Q8_0",    "Q8_1",   "Q2_K",   "Q3_K",   "Q4_K",   "Q5_K",  "Q6_K",    "Q8_K",
                                "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",   "IQ4_XS",
                                "I8",      "I16",    "I32",    "I64",    "F64",    "IQ1_M", "BF16",    "Q4_0_4_4",
                                "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8",
                                "MXFP4"};
  if (type < sizeof(names) / sizeof(names[0])) return names[type];
  return nullptr;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

Shape GgufTensorInfo::shape() const { return Shape(ne.rbegin(), ne.rend()); }

namespace {

std::string type_str(uint32_t type) {
  const char* n = ggml_type_name(type);
  return n ? std::string(n) + " (" + std::to_string(type) + ")" : "unknown type " + std::to_string(type);
}

bool is_read_type(uint32_t t) {
  return t == uint32_t(GgmlType::F32) || t == uint32_t(GgmlType::F16) || t == uint32_t(GgmlType::BF16) ||
         t == uint32_t(GgmlType::Q8_0);
}

// A float32 metadata value as the shortest decimal that reads back as the same float
// (1e-05f -> 1e-5, not 9.99999974737875e-06), so configs round-trip through GGUF.
double widen_f32(float f) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = f;
  std::from_chars(buf, r.ptr, d);
  return d;
}

// Sequential, bounds-checked reads over the mapping.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path) : p_(data), size_(size), path_(path) {}
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }
  std::string context = "header";  // what is being read, for errors

  [[noreturn]] void fail(const std::string& msg) const { throw Error(path_ + ": " + msg); }
  [[noreturn]] void truncated(const char* item) const {
    fail("truncated GGUF file: " + context + ": " + item + " at byte " + std::to_string(pos_) +
         " runs past the end of the file (" + std::to_string(size_) + " bytes)");
  }
  template <class T>
  T get(const char* item) {
    if (left() < sizeof(T)) truncated(item);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const uint8_t* skip(size_t n) {  // n <= left(), checked by the caller
    const uint8_t* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  std::string_view str(const char* item) {
    const uint64_t n = get<uint64_t>(item);
    if (n > left())
      fail("truncated or corrupt GGUF file: " + context + ": " + item + " of " + std::to_string(n) +
           " bytes at byte " + std::to_string(pos_) + " runs past the end of the file (" + std::to_string(size_) +
           " bytes)");
    std::string_view s(reinterpret_cast<const char*>(p_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

size_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

GgufValue read_value(Reader& r, GgufType type, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8: v.u = r.get<uint8_t>("value"); break;
    case GgufType::I8: v.i = r.get<int8_t>("value"); break;
    case GgufType::U16: v.u = r.get<uint16_t>("value"); break;
    case GgufType::I16: v.i = r.get<int16_t>("value"); break;
    case GgufType::U32: v.u = r.get<uint32_t>("value"); break;
    case GgufType::I32: v.i = r.get<int32_t>("value"); break;
    case GgufType::U64: v.u = r.get<uint64_t>("value"); break;
    case GgufType::I64: v.i = r.get<int64_t>("value"); break;
    case GgufType::F32: v.f = widen_f32(r.get<float>("value")); break;
    case GgufType::F64: v.f = r.get<double>("value"); break;
    case GgufType::BOOL: {
      const uint8_t b = r.get<uint8_t>("value");
      if (b > 1) r.fail("corrupt GGUF file: " + r.context + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
      v.u = b;
      break;
    }
    case GgufType::STRING: v.s = r.str("string length"); break;
    case GgufType::ARRAY: {
      if (depth >= 4) r.fail("corrupt GGUF file: " + r.context + ": arrays nested deeper than 4 levels");
      const uint32_t et = r.get<uint32_t>("array element type");
      if (!valid_type(et)) r.fail("corrupt GGUF file: " + r.context + ": unknown array element type " + std::to_string(et));
      v.elem_type = GgufType(et);
      const uint64_t n = r.get<uint64_t>("array length");
      if (n > r.left() / min_value_bytes(v.elem_type))
        r.fail("truncated or corrupt GGUF file: " + r.context + ": an array of " + std::to_string(n) + " " +
               gguf_type_name(v.elem_type) + " values cannot fit in the " + std::to_string(r.left()) +
               " bytes left in the file");
      v.count = n;
      if (v.elem_type == GgufType::STRING) {
        v.strings.reserve(size_t(n));
        for (uint64_t k = 0; k < n; ++k) v.strings.push_back(r.str("string length"));
      } else if (v.elem_type == GgufType::ARRAY) {
        for (uint64_t k = 0; k < n; ++k) v.arrays.push_back(read_value(r, v.elem_type, depth + 1));
      } else {
        v.raw = r.skip(size_t(n) * min_value_bytes(v.elem_type));
        if (v.elem_type == GgufType::BOOL)
          for (uint64_t k = 0; k < n; ++k)
            if (v.raw[k] > 1) r.fail("corrupt GGUF file: " + r.context + ": bool value " + std::to_string(v.raw[k]) + " is neither 0 nor 1");
      }
      break;
    }
  }
  return v;
}

std::string ne_str(const std::vector<int64_t>& ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

}  // namespace

GgufValue GgufValue::at(uint64_t k) const {
  if (type != GgufType::ARRAY || k >= count) throw Error("GGUF metadata: array index out of range");
  if (elem_type == GgufType::STRING) {
    GgufValue v;
    v.type = GgufType::STRING, v.s = strings[size_t(k)];
    return v;
  }
  if (elem_type == GgufType::ARRAY) return arrays[size_t(k)];
  GgufValue v;
  v.type = elem_type;
  const uint8_t* p = raw;
  auto get = [&](auto x) {
    std::memcpy(&x, p + k * sizeof(x), sizeof(x));
    return x;
  };
  switch (elem_type) {
    case GgufType::U8: v.u = get(uint8_t()); break;
    case GgufType::BOOL: v.u = get(uint8_t()); break;
    case GgufType::I8: v.i = get(int8_t()); break;
    case GgufType::U16: v.u = get(uint16_t()); break;
    case GgufType::I16: v.i = get(int16_t()); break;
    case GgufType::U32: v.u = get(uint32_t()); break;
    case GgufType::I32: v.i = get(int32_t()); break;
    case GgufType::U64: v.u = get(uint64_t()); break;
    case GgufType::I64: v.i = get(int64_t()); break;
    case GgufType::F32: v.f = widen_f32(get(float())); break;
    case GgufType::F64: v.f = get(double()); break;
    default: break;
  }
  return v;
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile g;
  g.path_ = path;
  g.file_ = MappedFile::open(path);
  Reader r(g.file_->data(), g.file_->size(), path);
  if (g.file_->size() < 4 || std::memcmp(g.file_->data(), "GGUF", 4) != 0)
    r.fail("not a GGUF file (the first 4 bytes are not the magic 'GGUF')");
  r.get<uint32_t>("magic");
  g.version_ = r.get<uint32_t>("version");
  if (g.version_ != 2 && g.version_ != 3) {
    std::string why = "unsupported GGUF version " + std::to_string(g.version_) + " (mtb reads versions 2 and 3)";
    if (g.version_ > 0xffff) why += "; a big-endian file?";
    r.fail(why);
  }
  const uint64_t n_tensors = r.get<uint64_t>("tensor count");
  const uint64_t n_kv = r.get<uint64_t>("metadata count");
  // Each metadata pair takes at least 13 bytes, each tensor info at least 24.
  if (n_kv > r.left() / 13)
    r.fail("truncated or corrupt GGUF header: " + std::to_string(n_kv) + " metadata pairs cannot fit in a file of " +
           std::to_string(g.file_->size()) + " bytes");
  if (n_tensors > r.left() / 24)
    r.fail("truncated or corrupt GGUF header: " + std::to_string(n_tensors) + " tensors cannot fit in a file of " +
           std::to_string(g.file_->size()) + " bytes");

  for (uint64_t k = 0; k < n_kv; ++k) {
    r.context = "metadata pair " + std::to_string(k) + " of " + std::to_string(n_kv);
    const std::string key(r.str("key length"));
    r.context = "metadata key '" + key + "'";
    const uint32_t t = r.get<uint32_t>("value type");
    if (!valid_type(t)) r.fail("corrupt GGUF file: metadata key '" + key + "' has unknown value type " + std::to_string(t));
    GgufValue v = read_value(r, GgufType(t), 0);
    if (g.meta_index_.count(key)) r.fail("corrupt GGUF file: metadata key '" + key + "' appears twice");
    g.meta_index_[key] = g.meta_.size();
    g.meta_.emplace_back(key, std::move(v));
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    if (!a->is_integer() || a->type == GgufType::I8 || a->type == GgufType::I16 || a->type == GgufType::I32 ||
        a->type == GgufType::I64)
      r.fail("metadata key 'general.alignment' has type " + std::string(gguf_type_name(a->type)) + ", expected uint32");
    if (a->u == 0 || (a->u & (a->u - 1)) || a->u > (uint64_t(1) << 30))
      r.fail("metadata key 'general.alignment' = " + std::to_string(a->u) + " is not a power of two up to 2^30");
    g.alignment_ = a->u;
  }

  for (uint64_t k = 0; k < n_tensors; ++k) {
    r.context = "tensor info " + std::to_string(k) + " of " + std::to_string(n_tensors);
    GgufTensorInfo ti;
    ti.name = std::string(r.str("name length"));
    r.context = "tensor '" + ti.name + "'";
    const uint32_t nd = r.get<uint32_t>("dimension count");
    if (nd < 1 || nd > 4)
      r.fail("corrupt GGUF file: tensor '" + ti.name + "' has " + std::to_string(nd) + " dimensions (ggml allows 1 to 4)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t n = r.get<uint64_t>("dimension");
      if (n == 0 || n > (uint64_t(1) << 40) || numel > (uint64_t(1) << 50) / n)
        r.fail("corrupt GGUF file: tensor '" + ti.name + "' has an impossible dimension " + std::to_string(n));
      numel *= n;
      ti.ne.push_back(int64_t(n));
    }
    ti.type = r.get<uint32_t>("type");
    ti.offset = r.get<uint64_t>("offset");
    if (!is_read_type(ti.type))
      r.fail("tensor '" + ti.name + "' has ggml type " + type_str(ti.type) +
             ", which mtb does not read (it reads F32, F16, BF16 and Q8_0)");
    if (ti.type == uint32_t(GgmlType::Q8_0)) {
      if (ti.ne[0] % 32)
        r.fail("corrupt GGUF file: Q8_0 tensor '" + ti.name + "' has rows of " + std::to_string(ti.ne[0]) +
               " values, not a multiple of the block size 32");
      ti.nbytes = numel / 32 * 34;
    } else {
      ti.nbytes = numel * (ti.type == uint32_t(GgmlType::F32) ? 4 : 2);
    }
    if (g.tensor_index_.count(ti.name)) r.fail("corrupt GGUF file: tensor '" + ti.name + "' appears twice");
    g.tensor_index_[ti.name] = g.tensors_.size();
    g.tensors_.push_back(std::move(ti));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t size = g.file_->size();
  const uint64_t end = r.pos();
  g.data_offset_ = (end + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  for (GgufTensorInfo& ti : g.tensors_) {
    if (ti.offset % g.alignment_)
      r.fail("corrupt GGUF file: tensor '" + ti.name + "' has offset " + std::to_string(ti.offset) +
             ", not a multiple of the alignment " + std::to_string(g.alignment_));
    const uint64_t avail = size > g.data_offset_ ? size - g.data_offset_ : 0;
    if (ti.offset > avail || ti.nbytes > avail - ti.offset)
      r.fail("truncated or corrupt GGUF file: tensor '" + ti.name + "' (" + type_str(ti.type) + ", ne " +
             ne_str(ti.ne) + ", " + std::to_string(ti.nbytes) + " bytes at data offset " + std::to_string(ti.offset) +
             ") runs past the end of the file (" + std::to_string(size) + " bytes, data from byte " +
             std::to_string(g.data_offset_) + ")");
    ti.data = g.file_->data() + g.data_offset_ + ti.offset;
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = meta_index_.find(key);
  return it == meta_index_.end() ? nullptr : &meta_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw Error(path_ + ": missing metadata key '" + key + "'");
  if (v->type == GgufType::ARRAY)
    throw Error(path_ + ": metadata key '" + key + "' is an array (a per-layer value?); mtb needs one integer");
  if (!v->is_integer())
    throw Error(path_ + ": metadata key '" + key + "' has type " + gguf_type_name(v->type) + ", expected an integer");
  const bool is_unsigned = v->type == GgufType::U8 || v->type == GgufType::U16 || v->type == GgufType::U32 ||
                           v->type == GgufType::U64;
  if (is_unsigned && v->u > uint64_t(INT64_MAX))
    throw Error(path_ + ": metadata key '" + key + "' is out of range: " + std::to_string(v->u));
  return is_unsigned ? int64_t(v->u) : v->i;
}

int64_t GgufFile::get_int(const std::string& key, int64_t dflt) const { return has(key) ? get_int(key) : dflt; }

double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw Error(path_ + ": missing metadata key '" + key + "'");
  if (v->is_float()) return v->f;
  if (v->is_integer()) return double(get_int(key));
  throw Error(path_ + ": metadata key '" + key + "' has type " + gguf_type_name(v->type) + ", expected a number");
}

double GgufFile::get_float(const std::string& key, double dflt) const { return has(key) ? get_float(key) : dflt; }

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw Error(path_ + ": missing metadata key '" + key + "'");
  if (v->type != GgufType::STRING)
    throw Error(path_ + ": metadata key '" + key + "' has type " + gguf_type_name(v->type) + ", expected a string");
  return std::string(v->s);
}

std::string GgufFile::get_string(const std::string& key, const std::string& dflt) const {
  return has(key) ? get_string(key) : dflt;
}

// ---------------------------------------------------------------------------------------
// GGUF -> ModelConfig + canonical tensors.

namespace {

const char* kArchs = "llama, qwen2, qwen3, deepseek2";

// Tensor elements as float (F32/F16/BF16 widened, Q8_0 dequantized).
std::vector<float> gguf_floats(const GgufTensorInfo& ti) {
  int64_t n = 1;
  for (int64_t d : ti.ne) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  switch (GgmlType(ti.type)) {
    case GgmlType::F32: to_f32(DType::F32, ti.data, out.data(), out.size()); break;
    case GgmlType::F16: to_f32(DType::F16, ti.data, out.data(), out.size()); break;
    case GgmlType::BF16: to_f32(DType::BF16, ti.data, out.data(), out.size()); break;
    case GgmlType::Q8_0: dequantize_q8_0(ti.data, out.data(), n); break;
  }
  return out;
}

// Fits Llama 3 RoPE scaling to llama.cpp's per-frequency factors (rope_freqs.weight:
// theta_i is divided by factor_i). The formula depends on original_max_position,
// low_freq_factor and high_freq_factor only through their ratios, so the original context
// comes from metadata (or 8192) and the two factors from the smooth band; the fit is
// then checked against every factor.
RopeScaling fit_llama3(const ModelConfig& base, const std::vector<float>& f, int64_t orig, const std::string& where) {
  RopeScaling s;
  bool all_one = true;
  for (float x : f) all_one = all_one && std::fabs(x - 1.0f) < 1e-6f;
  if (all_one) return s;
  auto refuse = [&] {
    throw Error(where + ": tensor 'rope_freqs.weight' holds per-frequency RoPE factors that are not Llama 3 "
                        "rope scaling; mtb cannot run them");
  };
  ModelConfig c = base;
  c.rope_scaling = RopeScaling{};
  const std::vector<double> theta = c.rope_inv_freq();
  if (theta.size() != f.size()) refuse();
  const double F = f.back();
  if (!(F > 1.0)) refuse();
  s.type = RopeScaling::Type::Llama3;
  s.factor = std::round(F * 1e5) / 1e5;
  s.original_max_position = int(orig);
  // Smooth band: 1/f = (1 - sm)/F + sm with sm = (orig/wavelen - lo)/(hi - lo), linear in theta.
  std::vector<std::pair<double, double>> pts;  // (orig / wavelen, sm)
  for (size_t i = 0; i < f.size(); ++i)
    if (f[i] > 1.0f + 1e-5f && f[i] < float(F) * (1.0f - 1e-5f))
      pts.emplace_back(double(orig) * theta[i] / (2 * M_PI), (1.0 / f[i] - 1.0 / F) / (1.0 - 1.0 / F));
  if (pts.size() >= 2) {
    const auto [x0, y0] = pts.front();
    const auto [x1, y1] = pts.back();
    const double a = (y1 - y0) / (x1 - x0), b = y0 - a * x0;  // sm = a x + b
    if (!(a > 0)) refuse();
    const double lo = -b / a, hi = lo + 1.0 / a;
    auto nice = [](double v) { return std::round(v * 1e4) / 1e4; };
    s.low_freq_factor = nice(lo), s.high_freq_factor = nice(hi);
  } else {
    s.low_freq_factor = 1.0, s.high_freq_factor = 4.0;
  }
  c.rope_scaling = s;
  if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor)) refuse();
  const std::vector<double> scaled = c.rope_inv_freq();
  for (size_t i = 0; i < f.size(); ++i)
    if (std::fabs(theta[i] / scaled[i] - double(f[i])) > 1e-4 * double(f[i])) refuse();
  return s;
}

}  // namespace

LoadedModel load_gguf(const std::string& path) {
  GgufFile g = GgufFile::open(path);
  const std::string arch = g.get_string("general.architecture");
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "deepseek2")
    throw Error(path + ": unknown architecture '" + arch + "' (mtb reads " + kArchs + ")");
  auto key = [&](const std::string& k) { return arch + "." + k; };
  auto dim = [&](const std::string& k, int64_t dflt = -1) {
    const int64_t v = dflt < 0 ? g.get_int(key(k)) : g.get_int(key(k), dflt);
    if (v < 0 || v > (int64_t(1) << 31) - 1)
      throw Error(path + ": metadata key '" + key(k) + "' is out of range: " + std::to_string(v));
    return int(v);
  };

  LoadedModel m;
  m.where = path;
  ModelConfig& c = m.config;
  c.n_layers = dim("block_count");
  c.d_model = dim("embedding_length");
  c.n_heads = dim("attention.head_count");
  c.d_ff = dim("feed_forward_length");
  c.norm_eps = g.get_float(key("attention.layer_norm_rms_epsilon"));
  c.rope_base = g.get_float(key("rope.freq_base"), 10000.0);
  c.max_context = dim("context_length", 2048);
  const GgufTensorInfo* embd = g.find_tensor("token_embd.weight");
  if (!embd) throw Error(path + ": missing tensor 'token_embd.weight'");
  if (g.has(key("vocab_size"))) c.vocab = dim("vocab_size");
  else if (const GgufValue* toks = g.find("tokenizer.ggml.tokens"); toks && toks->type == GgufType::ARRAY)
    c.vocab = int(std::min<uint64_t>(toks->count, INT32_MAX));
  else c.vocab = int(embd->ne.back());
  c.tied_embeddings = g.find_tensor("output.weight") == nullptr;

  // RoPE scaling: llama.cpp's default type is linear, applied when a factor is given.
  const std::string scaling = g.get_string(key("rope.scaling.type"), "linear");
  const double factor = g.has(key("rope.scale_linear")) ? g.get_float(key("rope.scale_linear"))
                                                        : g.get_float(key("rope.scaling.factor"), 1.0);
  if (scaling == "yarn") {
    c.rope_scaling.type = RopeScaling::Type::Yarn;
    c.rope_scaling.factor = factor;
    c.rope_scaling.original_max_position = dim("rope.scaling.original_context_length", 0);
  } else if (scaling == "linear" || scaling == "none") {
    if (scaling == "linear" && factor != 1.0 && factor != 0.0)
      throw Error(path + ": linear RoPE scaling (factor " + std::to_string(factor) + ") is not supported");
  } else {
    throw Error(path + ": unsupported RoPE scaling type '" + scaling + "' (mtb runs none; yarn is read but not run)");
  }

  // The Hugging Face model_type to write this model back as: mtb's own key when present.
  std::string family = g.get_string("mtb.hf_model_type", "");
  if (arch == "deepseek2") {
    c.attention = AttentionKind::MLA;
    c.rope_layout = RopeLayout::Interleaved;
    c.n_kv_heads = c.n_heads;
    c.kv_lora_rank = dim("attention.kv_lora_rank");
    c.q_lora_rank = dim("attention.q_lora_rank", 0);
    c.qk_rope_head_dim = dim("rope.dimension_count");
    const bool split = g.find_tensor("blk.0.attn_k_b.weight") != nullptr;
    int qk = 0;
    if (g.has(key("attention.key_length_mla"))) {
      qk = dim("attention.key_length_mla");
      c.v_head_dim = dim("attention.value_length_mla");
    } else {  // older files: the per-head sizes are key_length / value_length
      qk = dim("attention.key_length");
      c.v_head_dim = dim("attention.value_length");
    }
    c.qk_nope_head_dim = qk - c.qk_rope_head_dim;
    if (c.qk_nope_head_dim < 0)
      throw Error(path + ": metadata: key length " + std::to_string(qk) + " is smaller than the RoPE dimension " +
                  std::to_string(c.qk_rope_head_dim));
    if (split && g.has(key("attention.key_length_mla"))) {  // the absorbed form: one latent "head"
      const int kl = dim("attention.key_length", c.kv_lora_rank + c.qk_rope_head_dim);
      const int vl = dim("attention.value_length", c.kv_lora_rank);
      const int hkv = dim("attention.head_count_kv", 1);
      std::string bad;
      auto expect_eq = [&](const char* what, int found, int want, const std::string& rule) {
        if (found != want)
          bad += std::string(bad.empty() ? "" : "; ") + what + " is " + std::to_string(found) + ", but " + rule +
                 " = " + std::to_string(want);
      };
      expect_eq("attention.head_count_kv", hkv, 1, "the latent is one shared head");
      expect_eq("attention.key_length", kl, c.kv_lora_rank + c.qk_rope_head_dim, "kv_lora_rank + rope");
      expect_eq("attention.value_length", vl, c.kv_lora_rank, "kv_lora_rank");
      if (!bad.empty()) throw Error(path + ": metadata contradicts itself (split MLA form): " + bad);
    }
    const int experts = dim("expert_count", 0);
    const int dense = dim("leading_dense_block_count", 0);
    if (experts > 0 && dense < c.n_layers)
      throw Error(path + ": layers " + std::to_string(dense) + ".." + std::to_string(c.n_layers - 1) +
                  " are mixture-of-experts layers (expert_count = " + std::to_string(experts) +
                  "); mtb runs dense FFN layers only for now");
    if (family.empty()) family = g.get_int(key("expert_gating_func"), 0) == 2 ? "deepseek_v3" : "deepseek_v2";
    if (family != "deepseek_v2" && family != "deepseek_v3") family = "deepseek_v3";
  } else {
    c.n_kv_heads = dim("attention.head_count_kv", c.n_heads);
    c.head_dim = dim("attention.key_length", c.n_heads > 0 ? c.d_model / c.n_heads : 0);
    const int vl = dim("attention.value_length", c.head_dim);
    if (vl != c.head_dim)
      throw Error(path + ": attention.value_length " + std::to_string(vl) + " differs from key_length " +
                  std::to_string(c.head_dim) + "; mtb needs one head size");
    const int rot = dim("rope.dimension_count", c.head_dim);
    if (rot != c.head_dim)
      throw Error(path + ": rope.dimension_count " + std::to_string(rot) + " differs from the head size " +
                  std::to_string(c.head_dim) + "; partial RoPE is not supported");
    c.rope_layout = arch == "llama" ? RopeLayout::Interleaved : RopeLayout::RotateHalf;
    if (arch == "qwen2") c.bias = BiasKind::QKV;
    if (arch == "qwen3") c.qk_norm = true;
    if (arch == "llama") {
      if (family != "llama" && family != "mistral") family = "llama";
    } else {
      family = arch;
    }
  }
  c.family = family;
  if (const GgufTensorInfo* rf = g.find_tensor("rope_freqs.weight")) {
    if (arch != "llama") throw Error(path + ": tensor 'rope_freqs.weight' is only supported for arch llama");
    if (rf->ne.size() != 1 || rf->ne[0] * 2 != int64_t(c.rope_dim()))
      throw Error(path + ": tensor 'rope_freqs.weight' has ne " + ne_str(rf->ne) + ", expected {" +
                  std::to_string(c.rope_dim() / 2) + "}");
    if (c.rope_scaling.type != RopeScaling::Type::None)
      throw Error(path + ": both rope.scaling.type and rope_freqs.weight are given");
    c.rope_scaling = fit_llama3(c, gguf_floats(*rf), g.get_int(key("rope.scaling.original_context_length"), 8192), path);
  }
  // Every layer needs at least 5 tensors: refuse an absurd block_count before listing them.
  if (uint64_t(c.n_layers) * 5 > g.tensors().size())
    throw Error(path + ": metadata key '" + key("block_count") + "' = " + std::to_string(c.n_layers) +
                " layers, but the file holds only " + std::to_string(g.tensors().size()) + " tensors");
  c.validate(path);

  // Tensors: expected by canonical name, found by GGUF name.
  std::map<std::string, Shape> want;
  for (const TensorSpec& s : expected_tensors(c)) want[s.name] = s.shape;
  const bool mla_split = c.is_mla() && g.find_tensor("blk.0.attn_k_b.weight") != nullptr;
  std::set<std::string> seen;
  auto fail_shape = [&](const GgufTensorInfo& ti, const Shape& expected, const std::string& canonical) {
    throw Error(path + ": tensor '" + ti.name + "' has ne " + ne_str(ti.ne) + " (shape " + shape_str(ti.shape()) +
                "), but the metadata implies shape " + shape_str(expected) + " (" + canonical + ")");
  };
  auto add = [&](const GgufTensorInfo& ti, const std::string& canonical) {
    if (ti.type == uint32_t(GgmlType::Q8_0)) {  // used in place: the kernels read Q8_0 blocks
      m.tensors.add(canonical, Tensor{DType::Q8_0, ti.shape(), ti.data}, path);
    } else {
      const DType dt = ti.type == uint32_t(GgmlType::F32) ? DType::F32
                       : ti.type == uint32_t(GgmlType::F16) ? DType::F16 : DType::BF16;
      m.tensors.add(canonical, Tensor{dt, ti.shape(), ti.data}, path);
    }
  };
  for (const GgufTensorInfo& ti : g.tensors()) {
    if (ti.name == "rope_freqs.weight") continue;
    int layer = -1;
    const std::string canonical = gguf_to_canonical(ti.name, &layer);
    if (layer >= c.n_layers)
      throw Error(path + ": tensor '" + ti.name + "' is for layer " + std::to_string(layer) + ", but block_count is " +
                  std::to_string(c.n_layers));
    if (mla_split && (ti.name.ends_with(".attn_k_b.weight") || ti.name.ends_with(".attn_v_b.weight"))) continue;
    auto it = want.find(canonical);
    if (canonical.empty() || it == want.end())
      throw Error(path + ": unexpected tensor '" + ti.name + "' for arch " + arch + " with this metadata");
    if (ti.shape() != it->second) fail_shape(ti, it->second, canonical);
    add(ti, canonical);
    seen.insert(canonical);
  }
  if (mla_split) {  // kv_b [H*(nope+v), kv_lora] from k_b ne {nope, kv_lora, H} and v_b ne {kv_lora, v, H}
    const int64_t H = c.n_heads, nope = c.qk_nope_head_dim, dv = c.v_head_dim, dc = c.kv_lora_rank;
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      const std::string canonical = layer_prefix(l) + "self_attn.kv_b_proj.weight";
      if (seen.count(canonical)) continue;  // the file has attn_kv_b too (both forms): use it
      const GgufTensorInfo* kb = g.find_tensor(b + "attn_k_b.weight");
      const GgufTensorInfo* vb = g.find_tensor(b + "attn_v_b.weight");
      if (!kb) throw Error(path + ": missing tensor '" + b + "attn_k_b.weight'");
      if (!vb) throw Error(path + ": missing tensor '" + b + "attn_v_b.weight'");
      if (kb->ne != std::vector<int64_t>{nope, dc, H}) fail_shape(*kb, {H, dc, nope}, "k_b of " + canonical);
      if (vb->ne != std::vector<int64_t>{dc, dv, H}) fail_shape(*vb, {H, dv, dc}, "v_b of " + canonical);
      const std::vector<float> k = gguf_floats(*kb), v = gguf_floats(*vb);
      std::vector<float> kv(size_t(H * (nope + dv) * dc));
      for (int64_t h = 0; h < H; ++h) {
        float* head = kv.data() + h * (nope + dv) * dc;
        for (int64_t j = 0; j < nope; ++j)
          for (int64_t x = 0; x < dc; ++x) head[j * dc + x] = k[size_t((h * dc + x) * nope + j)];
        std::copy(v.begin() + h * dv * dc, v.begin() + (h + 1) * dv * dc, head + nope * dc);
      }
      // Keep the file's element type where it is a plain float type both halves share.
      if (kb->type == vb->type && (kb->type == uint32_t(GgmlType::BF16) || kb->type == uint32_t(GgmlType::F16))) {
        std::vector<uint8_t> bytes(kv.size() * 2);
        auto* o = reinterpret_cast<uint16_t*>(bytes.data());
        const bool bf = kb->type == uint32_t(GgmlType::BF16);
        for (size_t i = 0; i < kv.size(); ++i) o[i] = bf ? f32_to_bf16(kv[i]) : f32_to_f16(kv[i]);
        m.tensors.add_owned(canonical, bf ? DType::BF16 : DType::F16, {H * (nope + dv), dc}, std::move(bytes), path);
      } else {
        m.tensors.add_owned_f32(canonical, {H * (nope + dv), dc}, std::move(kv), path);
      }
      seen.insert(canonical);
    }
  }
  for (const TensorSpec& s : expected_tensors(c))
    if (!seen.count(s.name))
      throw Error(path + ": missing tensor '" + canonical_to_gguf(s.name) + "' (expected shape " + shape_str(s.shape) +
                  ", mtb's " + s.name + ")");
  m.tensors.keep_alive(g.mapping());
  return m;
}

}  // namespace mtb
