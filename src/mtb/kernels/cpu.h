// Run-time choice between the AVX2+FMA kernels and their scalar twins.
#pragma once

namespace mtb::kernels {

// True when the CPU has AVX2, FMA and F16C and MTB_FORCE_SCALAR is not set in the environment.
bool use_avx2();

}  // namespace mtb::kernels
