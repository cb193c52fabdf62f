// `tiled`: the FlashAttention algorithm made plain. One fused kernel, fp32 math, no tensor cores.
//
// Hardware fact exploited: shared memory is ~10x closer than HBM. A block stages kBlockN keys and
// values at a time in shared memory and every one of its kBlockM query rows reuses them; with the
// online softmax the N x N scores never exist beyond one tile, so HBM traffic is O(N d) per row
// block and extra memory O(N) (the log-sum-exp).
//
// Grid: (query blocks, query heads, batch); one thread per query row.
#include "attention_common.cuh"
#include "kernel_traits.cuh"
#include "softmax.cuh"

namespace sy_attn {
namespace {

// Rows [row0, row0 + kRows) of a (N, d) head slice into a float tile with row stride kStride;
// rows past n_rows read as zero. Consecutive threads read consecutive elements of a row.
template <int kRows, int kHeadDim, int kStride, int kThreads, typename T>
__device__ __forceinline__ void load_tile(float *sTile, const T *gHead, int64_t row_stride, int row0, int n_rows) {
    for (int idx = threadIdx.x; idx < kRows * kHeadDim; idx += kThreads) {
        const int r = idx / kHeadDim, c = idx % kHeadDim;
        sTile[r * kStride + c] = row0 + r < n_rows ? to_float(gHead[(row0 + r) * row_stride + c]) : 0.f;
    }
}

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(TiledTraits<kHeadDim>::kThreads)
tiled_fwd_kernel(const sy_attn_params p) {
    using Tr = TiledTraits<kHeadDim>;
    extern __shared__ float smem[];
    float *sQ = smem;                                   // [kBlockM][kQRowStride]
    float *sK = sQ + Tr::kBlockM * Tr::kQRowStride;     // [kBlockN][kHeadDim]
    float *sV = sK + Tr::kBlockN * kHeadDim;            // [kBlockN][kHeadDim]
    float *sP = sV + Tr::kBlockN * kHeadDim;            // [kBlockN][kBlockM]: column c of thread t at c * kBlockM + t

    const int h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int m0 = blockIdx.x * Tr::kBlockM;
    const int row = m0 + threadIdx.x;
    const T *gQ = head_base(static_cast<const T *>(p.q), p.q_strides, b, h);
    const T *gK = head_base(static_cast<const T *>(p.k), p.k_strides, b, h_kv);
    const T *gV = head_base(static_cast<const T *>(p.v), p.v_strides, b, h_kv);

    load_tile<Tr::kBlockM, kHeadDim, Tr::kQRowStride, Tr::kThreads>(sQ, gQ, p.q_strides[2], m0, p.seqlen_q);
    const float *sQrow = sQ + threadIdx.x * Tr::kQRowStride;
    float *sPcol = sP + threadIdx.x;   // this row's probabilities: consecutive threads, consecutive banks

    float acc[kHeadDim];
#pragma unroll
    for (int c = 0; c < kHeadDim; ++c) acc[c] = 0.f;
    OnlineSoftmaxRow softmax;
    const float scale_log2 = p.scale * kLog2e;

    // Causal: no row of this block sees a key past its last row.
    const int n_end = p.is_causal ? min(p.seqlen_k, m0 + Tr::kBlockM) : p.seqlen_k;
    for (int n0 = 0; n0 < n_end; n0 += Tr::kBlockN) {
        __syncthreads();   // every thread is done with the previous tile (and sQ is written)
        load_tile<Tr::kBlockN, kHeadDim, kHeadDim, Tr::kThreads>(sK, gK, p.k_strides[2], n0, p.seqlen_k);
        load_tile<Tr::kBlockN, kHeadDim, kHeadDim, Tr::kThreads>(sV, gV, p.v_strides[2], n0, p.seqlen_k);
        __syncthreads();

        // Scores of this row against the tile's keys. d is the outer, rolled loop and the kBlockN
        // keys the inner, unrolled one: s[] stays in registers and the kernel body stays small.
        float s[Tr::kBlockN];
#pragma unroll
        for (int c = 0; c < Tr::kBlockN; ++c) s[c] = 0.f;
        for (int d = 0; d < kHeadDim; ++d) {
            const float q = sQrow[d];
#pragma unroll
            for (int c = 0; c < Tr::kBlockN; ++c) s[c] += q * sK[c * kHeadDim + d];   // sK: broadcast
        }
#pragma unroll
        for (int c = 0; c < Tr::kBlockN; ++c) {
            const int key = n0 + c;
            if (key >= p.seqlen_k || (p.is_causal && key > row)) s[c] = -INFINITY;
        }
        const float alpha = softmax.rescale(s, scale_log2);   // s now holds probabilities
#pragma unroll
        for (int c = 0; c < Tr::kBlockN; ++c) sPcol[c * Tr::kBlockM] = s[c];
#pragma unroll
        for (int d = 0; d < kHeadDim; ++d) acc[d] *= alpha;
        // acc += P V with the keys as the rolled loop: acc[] is indexed by the unrolled d only.
        for (int c = 0; c < Tr::kBlockN; ++c) {
            const float pc = sPcol[c * Tr::kBlockM];
#pragma unroll
            for (int d = 0; d < kHeadDim; ++d) acc[d] += pc * sV[c * kHeadDim + d];   // sV: broadcast
        }
    }

    if (row >= p.seqlen_q) return;
    float lse;
    const float inv_l = softmax.finalize(p.scale, &lse);
    T *gO = head_base(static_cast<T *>(p.o), p.o_strides, b, h) + row * p.o_strides[2];
#pragma unroll
    for (int d = 0; d < kHeadDim; ++d) gO[d] = from_float<T>(acc[d] * inv_l);
    p.lse[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + row] = lse;
}

template <int kHeadDim, typename T>
int launch(const sy_attn_params &p, cudaStream_t stream) {
    using Tr = TiledTraits<kHeadDim>;
    auto kernel = tiled_fwd_kernel<kHeadDim, T>;
    // Above 48 KiB a block's dynamic shared memory must be opted into, per kernel.
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    dim3 grid(ceil_div(p.seqlen_q, Tr::kBlockM), p.heads_q, p.batch);
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
    return launch_status();
}

template <typename T>
int launch_head_dim(const sy_attn_params &p, cudaStream_t stream) {
    switch (p.head_dim) {
        case 16: return launch<16, T>(p, stream);
        case 32: return launch<32, T>(p, stream);
        case 64: return launch<64, T>(p, stream);
        case 128: return launch<128, T>(p, stream);
        default: return kUnsupported;
    }
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_tiled_fwd(const sy_attn_params *params, void *stream) {
    using namespace sy_attn;
    int status = check_params(params);
    if (status != kOk) return status;
    if (params->mask != nullptr) return kUnsupported;
    if (params->causal_offset || params->has_window) return kUnsupported;   // the band: mma and hopper
    if (params->dropout_p != 0.f) return kUnsupported;                      // dropout: mma and hopper
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (params->dtype) {
        case SY_ATTN_F32: return launch_head_dim<float>(*params, s);
        case SY_ATTN_F16: return launch_head_dim<__half>(*params, s);
        default: return launch_head_dim<__nv_bfloat16>(*params, s);
    }
}
