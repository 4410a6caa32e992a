// GGUF (llama.cpp's single-file format), version 3 as llama.cpp writes it (version 2, the
// same little-endian layout, is read too): a header, typed metadata (scalars, strings and
// arrays of them), tensor infos (ggml dims innermost first: ne = {in, out} is an [out, in]
// matrix) and the tensor data, each tensor aligned to general.alignment (default 32).
//
// Reading maps the file once; F32 / F16 / BF16 / Q8_0 tensors are views into the mapping
// (the kernels read Q8_0 blocks in place). Architectures: llama (also
// Mistral-style llama), qwen2, qwen3, deepseek2 (MLA with attn_kv_b or the split absorbed
// attn_k_b / attn_v_b, all-dense, with or without q-lora).
//
// RoPE: llama.cpp rotates adjacent pairs for llama and deepseek2 ("normal" mode; its
// converter permuted Llama's Q/K rows so that this equals Hugging Face's rotate-half) and
// halves for qwen2 / qwen3 ("neox" mode). mtb runs a GGUF file in the file's own layout:
// llama and deepseek2 load with RopeLayout::Interleaved, the Qwens with RotateHalf, so no
// weight is touched at load. set_rope_layout() moves Q/K rows between the layouts exactly
// (a row permutation), which conversions use: HF llama -> GGUF gets llama.cpp's
// permutation, GGUF llama -> HF gets it undone.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mtb/core/mapped_file.h"
#include "mtb/io/hf.h"

namespace mtb {

// Metadata value types, numbered as in the GGUF spec.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);  // "uint32", "string", ...

// ggml tensor types mtb reads (others are named in errors and refused).
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q8_0 = 8, BF16 = 30 };
const char* ggml_type_name(uint32_t type);  // "F32", "Q4_K", ... or "type 99"

// One metadata value. Strings and arrays of numbers point into the mapping (a vocabulary
// of 150k tokens costs a view each, an array of numbers nothing).
struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t u = 0;      // unsigned integers and bool
  int64_t i = 0;       // signed integers
  double f = 0;        // floats (F32 widened to its shortest decimal)
  std::string_view s;  // STRING
  // ARRAY: `count` elements of `elem_type`, held as raw little-endian bytes (numbers and
  // bools), string views, or nested values (arrays of arrays).
  GgufType elem_type = GgufType::U8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> arrays;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::F32 || type == GgufType::F64; }
  GgufValue at(uint64_t k) const;  // element k of an array (k < count)
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: innermost first
  uint32_t type = 0;        // ggml type
  uint64_t offset = 0;      // relative to the data section
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  Shape shape() const;  // row-major, outermost first: ne reversed
};

// A parsed, mapped GGUF file. Every count, length and offset is checked against the
// file's size before it is used: a bad file gives a one-line mtb::Error naming the path
// and what is wrong, never an out-of-bounds read.
class GgufFile {
 public:
  static GgufFile open(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return meta_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  std::shared_ptr<MappedFile> mapping() const { return file_; }

  // Typed metadata access; errors name the path, the key and the type found.
  bool has(const std::string& key) const { return find(key) != nullptr; }
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t dflt) const;
  double get_float(const std::string& key) const;  // also accepts integers
  double get_float(const std::string& key, double dflt) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& dflt) const;

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> meta_;
  std::map<std::string, size_t> meta_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// A GGUF file as mtb's config and canonical tensors (see model/weights.h). The tensors are
// checked against the metadata here, by their GGUF names.
LoadedModel load_gguf(const std::string& path);

// Element types mtb writes in GGUF: matrices in `type`, vectors (norms, biases) in F32.
enum class GgufOutType { F32, F16, BF16, Q8_0 };

struct GgufTokenizer;  // gguf_tokenizer.h

// Writes a model as GGUF the way llama.cpp's converter lays it out for the family's
// architecture (llama, mistral -> llama; qwen2; qwen3; deepseek_v2/v3 -> deepseek2 in
// the split absorbed MLA form): RoPE rows permuted into the architecture's layout, and the
// tokenizer keys of `tokenizer` (none given: tokenizer.ggml.model = "none"). Throws
// mtb::Error for what GGUF cannot express.
void save_gguf(const std::string& path, const ModelConfig& c, const TensorMap& tensors, GgufOutType type,
               const std::string& name = "", const GgufTokenizer* tokenizer = nullptr);

// Q8_0: blocks of 32 values = fp16 scale max|x|/127 + 32 int8 rounded to nearest (ties
// away from zero), as ggml's quantize_row_q8_0_ref. n must be a multiple of 32.
void quantize_q8_0(const float* x, uint8_t* out, int64_t n);
void dequantize_q8_0(const uint8_t* in, float* out, int64_t n);

// Returns `tensors` with the Q/K rows that RoPE rotates permuted from c.rope_layout into
// `target` (q/k weights, biases and QK-norm scales; MLA: the rope part of each q head and
// the shared rope key rows of kv_a); sets c.rope_layout. Exact: rows are moved, not recomputed.
TensorMap set_rope_layout(ModelConfig& c, const TensorMap& tensors, RopeLayout target);

// `mtb convert`: any model load_model_file reads -> GGUF (out ends in .gguf) or a Hugging
// Face directory. The tokenizer goes along: a Hugging Face directory's tokenizer.json (and
// tokenizer_config.json's chat template and BOS/EOS) into the GGUF keys, a GGUF file's keys
// into tokenizer.json + tokenizer_config.json; a tokenizer GGUF cannot express is left out
// with a warning in the summary. dtype: "f32", "f16", "bf16", "q8_0" (GGUF only) or "" (as the input's
// matrices, Q8_0 read back as f32 for Hugging Face). Returns a one-line summary.
std::string convert_model(const std::string& in, const std::string& out, const std::string& dtype);

}  // namespace mtb
