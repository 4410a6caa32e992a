// AVX2+FMA causal attention, blocked like flash attention: a task takes a few query rows of
// one kv head (all the query heads that share it: "query vectors") and a range of keys, and
// walks the keys in blocks of KB. Per block it computes the scores of every query vector,
// updates a running softmax (max, sum), and adds the block's values to per-vector
// accumulators (tiles of query vectors x 16..64 value dims, the weights broadcast). So K and
// V are streamed once per task, each key row reused from L1/L2 by every query vector of the
// task, and nothing of size keys x heads is stored.
// A task transposes its queries once and computes S^T = K · Q^T: each key element broadcast
// against a vector of query vectors (tiles of 6-8 keys x 1-2 vectors; decoding fills only a
// few lanes), no horizontal sums, and the softmax runs across the lanes. Keys come in chunks
// of kChunk, each a task of its own, and a row that sees several merges their partial
// softmaxes after ("flash decoding"), so decoding spreads a long cache over both threads.
// Every query vector's arithmetic is fixed by its query and its keys alone (batch
// invariance). Key j's row is j, or block_table[j / block_size] · block_size + j % block_size
// in a paged cache. Tasks go out dynamically (tasks.h).
// The tiles are written once for a vector width (vec_avx.h) and compiled for 256 and 512
// bits; 512 where the GEMM uses AVX-512.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mtb/core/parallel.h"
#include "mtb/kernels/attention.h"
#include "mtb/kernels/load_avx2.h"
#include "mtb/kernels/matmul_grad.h"
#include "mtb/kernels/vec_avx.h"
#include "mtb/kernels/tasks.h"

namespace mtb::kernels {
namespace {

using avx2::exp8;
using avx2::load1;
using avx2::transpose8;

constexpr int KB = 64;          // keys per block
constexpr int kChunk = 512;     // keys per chunk (a multiple of KB): fixed, for batch invariance
constexpr int64_t kMaxPartFloats = int64_t(8) << 20;  // chunk partials held at once (32 MiB)

// One task's query vectors: where each reads q, how many keys it sees, where its output goes.
struct Task {
  int nq = 0;
  const float* q[64];
  int limit[64];  // keys visible: 0 .. limit-1
  float* o[64];   // unnormalized accumulators [v_dim]
  float m[64], l[64];  // running max and sum of the softmax
  // The fewest keys any of the n query vectors from g sees.
  int min_limit(int g, int n) const { return *std::min_element(limit + g, limit + g + n); }
};

struct Scratch {
  std::vector<float> s, o, qt, kw;  // scores, outputs, transposed queries, widened keys
};

// The kernel proper, compiled twice from one source: for 256-bit registers, and for 512-bit
// ones under the AVX-512 target (each copy in its own namespace; see vec_avx.h).
namespace w256 {
using V = Vec256;
#include "mtb/kernels/attention_avx2.inc"
}  // namespace w256

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
namespace w512 {
using V = Vec512;
#include "mtb/kernels/attention_avx2.inc"
}  // namespace w512
#pragma GCC pop_options

}  // namespace

void attention_avx2(const AttentionArgs& a) {
  // 512 bits where the GEMM uses them, for heads of whole 512-bit vectors (the usual 64, 128,
  // 576 ...); other head sizes would spend their last half-vector in scalar code.
  const bool wide = gemm_avx512() && a.qk_dim % 16 == 0 && a.v_dim % 16 == 0;
  switch (a.kv_type) {
    case DType::F32: return wide ? w512::run<DType::F32>(a) : w256::run<DType::F32>(a);
    case DType::BF16: return wide ? w512::run<DType::BF16>(a) : w256::run<DType::BF16>(a);
    case DType::F16: return wide ? w512::run<DType::F16>(a) : w256::run<DType::F16>(a);
    case DType::Q8_0: break;  // never a KV cache type
  }
}

}  // namespace mtb::kernels
