// Measuring the machine's limits: read bandwidth and FMA peak, with all threads.
#pragma once
#include <cstddef>

namespace mtb::kernels {

// GB/s (1e9 bytes) reading a `bytes` buffer with every thread, best of `reps` passes (and of
// plain and software-prefetched streams).
double measure_read_gb_per_s(size_t bytes = size_t(1) << 30, int reps = 5);
// GFLOP/s of fp32 fused multiply-adds (2 flops each) with every thread, best of `reps`, at
// the widest vector width the GEMM uses (512 bits where gemm_avx512(), else 256).
double measure_fma_gflops(int reps = 5);

}  // namespace mtb::kernels
