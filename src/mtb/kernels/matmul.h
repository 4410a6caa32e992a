// Matrix products with the weight on the right, transposed, as every linear layer uses them.
#pragma once
#include <cstdint>

#include "mtb/core/dtype.h"

namespace mtb::kernels {

// y[M,N] = x[M,K] · W[N,K]^T (+ bias[N] when bias is not null).
// W is row-major [N,K] with elements of type wtype (F32, F16, BF16, or Q8_0 with K a
// multiple of 32), used as stored.
// Picks the AVX2 kernel (threaded) when available, else matmul_ref.
void matmul(float* y, const float* x, const void* w, DType wtype, const float* bias,
            int M, int N, int K);

// The scalar twin: plain loops, one thread, float accumulation in index order.
void matmul_ref(float* y, const float* x, const void* w, DType wtype, const float* bias,
                int M, int N, int K);

// The AVX2+FMA kernel itself (callers use matmul); threads from core/parallel.h.
void matmul_avx2(float* y, const float* x, const void* w, DType wtype, const float* bias,
                 int M, int N, int K);

}  // namespace mtb::kernels
