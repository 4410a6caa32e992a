#include "mtb/kernels/cpu.h"

#include <cstdlib>
#include <cstring>

namespace mtb::kernels {

bool use_avx2() {
  static const bool yes = [] {
    const char* force = std::getenv("MTB_FORCE_SCALAR");
    if (force && *force && std::strcmp(force, "0") != 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return yes;
}

}  // namespace mtb::kernels
