// Randomly initialized weights for a config: matrices ~ N(0, std), norm scales 1,
// biases 0. Deterministic for a seed, whatever the thread count.
#pragma once
#include <cstdint>

#include "mtb/core/tensor.h"
#include "mtb/model/config.h"

namespace mtb {

TensorMap init_weights(const ModelConfig& c, uint64_t seed, DType dtype, float std = 0.02f);

}  // namespace mtb
