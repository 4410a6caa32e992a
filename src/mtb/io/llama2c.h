// llama2.c checkpoints (.bin): a 7-int32 header, then fp32 weights in a fixed order.
#pragma once
#include <string>

#include "mtb/io/hf.h"

namespace mtb {

// Maps the file; tensors are views into the mapping under canonical names. The config:
// RMSNorm eps 1e-5, interleaved RoPE with base 10000, tied unless vocab_size < 0.
LoadedModel load_llama2c(const std::string& path);

}  // namespace mtb
