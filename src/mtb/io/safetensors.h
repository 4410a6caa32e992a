// safetensors: an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range (relative to the end of the header), then the raw bytes.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mtb/core/tensor.h"

namespace mtb {

// Maps `path` and adds each of its tensors to `out` as a view into the mapping.
// Errors (one line, naming the file and the tensor or key): truncated file, corrupt or
// oversized header, unknown dtype, byte range outside the data or not matching the shape.
void read_safetensors(const std::string& path, TensorMap& out);

// Reads a model directory's weights: model.safetensors.index.json (sharded) when present,
// else every *.safetensors file in it. Every tensor the index names must be found.
void read_safetensors_dir(const std::string& dir, TensorMap& out);

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes tensors (in the order given) to `path`, through a temporary file and a rename.
void write_safetensors(const std::string& path, const NamedTensors& tensors);

// Writes model.safetensors, or, when the total exceeds max_shard_bytes (> 0), shards
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json.
void write_safetensors_dir(const std::string& dir, const NamedTensors& tensors, size_t max_shard_bytes = 0);

}  // namespace mtb
