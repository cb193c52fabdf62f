// `tiled` backward: FlashAttention-2's backward algorithm with fp32 math on CUDA cores.
//
// Hardware fact exploited: as in the forward, shared memory is ~10x closer than HBM, and the N x N
// probabilities never reach HBM: each tile of P is recomputed from Q, K and the forward's
// log-sum-exp (P = exp(S - LSE)), so the extra memory is O(N d) and the traffic O(N^2 d / tile).
//
// Four kernels per call:
//   preprocess   D = rowsum(dO o O)                                    one warp per query row
//   dkdv         K/V-block outer loop: dV += P^T dO, dK += dS^T Q;    one thread per (key, 64 columns)
//                dQ += dS K with fp32 atomicAdd (non-deterministic)
//   dq           deterministic mode only: Q-block outer loop, dQ = dS K without atomics
//   reduce       fp32 workspaces -> input dtype; dK, dV summed over the query heads of a GQA group
// with dS = P o (dP - D), dP = dO V^T. This is the correct-first rung: no tensor cores yet.
#include "attention_bwd_common.cuh"
#include "kernel_traits.cuh"

namespace sy_attn {
namespace {

// The word offset of element (row, col) in a padded tile.
template <typename Tr>
__device__ __forceinline__ int padded(int row, int col) {
    return row * Tr::kRowStride + col + col / Tr::kCols;
}

// Rows [row0, row0 + kRows) of a (N, d) head slice into a padded float tile; rows past n_rows are 0.
template <typename Tr, int kRows, int kThreads, typename T>
__device__ __forceinline__ void load_tile(float *sTile, const T *gHead, int64_t row_stride, int row0, int n_rows) {
    for (int idx = threadIdx.x; idx < kRows * Tr::kHeadDim; idx += kThreads) {
        const int r = idx / Tr::kHeadDim, c = idx % Tr::kHeadDim;
        sTile[padded<Tr>(r, c)] = row0 + r < n_rows ? to_float(gHead[(row0 + r) * row_stride + c]) : 0.f;
    }
}

// The full dot product of a row split over kSplit neighbouring lanes.
template <typename Tr>
__device__ __forceinline__ float sum_over_split(float partial) {
#pragma unroll
    for (int offset = 1; offset < Tr::kSplit; offset *= 2) partial += __shfl_xor_sync(0xffffffffu, partial, offset);
    return partial;
}

// ---- dkdv: the K/V-block outer loop ------------------------------------------------------------------------
// Grid: (key blocks, query heads, batch). Thread t owns key n0 + t / kSplit, columns
// (t % kSplit) * kCols ...; it walks the query tiles that can see its block, one row at a time.
template <int kHeadDim, typename T>
__global__ void __launch_bounds__(BwdTraits<kHeadDim>::kDkdvThreads)
dkdv_kernel(const sy_attn_bwd_params p) {
    using Tr = BwdTraits<kHeadDim>;
    extern __shared__ float smem[];
    float *sK = smem;                                         // [kKeysPerBlock] padded rows
    float *sV = sK + Tr::kKeysPerBlock * Tr::kRowStride;
    float *sQ = sV + Tr::kKeysPerBlock * Tr::kRowStride;      // [kQueryTile] padded rows
    float *sdO = sQ + Tr::kQueryTile * Tr::kRowStride;
    float *sdS = sdO + Tr::kQueryTile * Tr::kRowStride;      // [kQueryTile][kKeysPerBlock]
    float *sLse = sdS + Tr::kQueryTile * Tr::kKeysPerBlock;   // log2-scaled LSE of the tile's rows
    float *sD = sLse + Tr::kQueryTile;

    const int h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int n0 = blockIdx.x * Tr::kKeysPerBlock;
    const int local_key = threadIdx.x / Tr::kSplit, chunk = threadIdx.x % Tr::kSplit;
    const int key = n0 + local_key;
    const int col0 = chunk * Tr::kCols;
    const T *gQ = head_base(static_cast<const T *>(p.q), p.q_strides, b, h);
    const T *gdO = head_base(static_cast<const T *>(p.dout), p.dout_strides, b, h);
    load_tile<Tr, Tr::kKeysPerBlock, Tr::kDkdvThreads>(sK, head_base(static_cast<const T *>(p.k), p.k_strides, b, h_kv),
                                                      p.k_strides[2], n0, p.seqlen_k);
    load_tile<Tr, Tr::kKeysPerBlock, Tr::kDkdvThreads>(sV, head_base(static_cast<const T *>(p.v), p.v_strides, b, h_kv),
                                                      p.v_strides[2], n0, p.seqlen_k);
    const float *sKrow = sK + padded<Tr>(local_key, col0);
    const float *sVrow = sV + padded<Tr>(local_key, col0);

    float dk[Tr::kCols], dv[Tr::kCols];
#pragma unroll
    for (int c = 0; c < Tr::kCols; ++c) dk[c] = dv[c] = 0.f;
    const float scale_log2 = p.scale * kLog2e;

    // Causal (top-left): row i sees key j iff j <= i, so rows before n0 see none of this block.
    const int m_begin = p.is_causal ? (n0 / Tr::kQueryTile) * Tr::kQueryTile : 0;
    for (int m0 = m_begin; m0 < p.seqlen_q; m0 += Tr::kQueryTile) {
        __syncthreads();   // the previous tile's sQ, sdO, sdS are consumed (and sK, sV written)
        load_tile<Tr, Tr::kQueryTile, Tr::kDkdvThreads>(sQ, gQ, p.q_strides[2], m0, p.seqlen_q);
        load_tile<Tr, Tr::kQueryTile, Tr::kDkdvThreads>(sdO, gdO, p.dout_strides[2], m0, p.seqlen_q);
        for (int r = threadIdx.x; r < Tr::kQueryTile; r += Tr::kDkdvThreads) {
            const bool in = m0 + r < p.seqlen_q;
            sLse[r] = in ? p.lse[bwd_row_index(p, b, h, m0 + r, p.seqlen_q)] * kLog2e : 0.f;
            sD[r] = in ? p.delta[bwd_row_index(p, b, h, m0 + r, p.seqlen_q)] : 0.f;
        }
        __syncthreads();

#pragma unroll 1   // rolled: the dK, dV accumulators take the registers
        for (int r = 0; r < Tr::kQueryTile; ++r) {
            const int row = m0 + r;
            const float *sQrow = sQ + padded<Tr>(r, col0);
            const float *sdOrow = sdO + padded<Tr>(r, col0);
            float s = 0.f, dp = 0.f;
#pragma unroll
            for (int c = 0; c < Tr::kCols; ++c) {
                s += sQrow[c] * sKrow[c];
                dp += sdOrow[c] * sVrow[c];
            }
            s = sum_over_split<Tr>(s);
            dp = sum_over_split<Tr>(dp);
            // A row whose LSE is -inf saw no key: its P is 0, not exp(+inf).
            const bool visible = row < p.seqlen_q && key < p.seqlen_k && !(p.is_causal && key > row) && isfinite(sLse[r]);
            const float prob = visible ? exp2f(s * scale_log2 - sLse[r]) : 0.f;
            const float ds = prob * (dp - sD[r]);
#pragma unroll
            for (int c = 0; c < Tr::kCols; ++c) {
                dv[c] += prob * sdOrow[c];
                dk[c] += ds * sQrow[c];
            }
            if (chunk == 0) sdS[r * Tr::kKeysPerBlock + local_key] = ds;
        }

        if (p.deterministic) continue;   // dQ comes from dq_kernel
        __syncthreads();   // sdS complete
        // dQ[tile] += scale * dS K: each output element is one thread's sum over the block's keys.
        for (int idx = threadIdx.x; idx < Tr::kQueryTile * kHeadDim; idx += Tr::kDkdvThreads) {
            const int r = idx / kHeadDim, c = idx % kHeadDim;
            if (m0 + r >= p.seqlen_q) break;   // idx only grows: every later element is past the end too
            float acc = 0.f;
            for (int j = 0; j < Tr::kKeysPerBlock; ++j) acc += sdS[r * Tr::kKeysPerBlock + j] * sK[padded<Tr>(j, c)];
            // Relaxed device-scope float add: the blocks of other key blocks add to the same element
            // in any order, and nothing reads dq_accum before the kernel boundary that ends this pass.
            atomicAdd(p.dq_accum + bwd_row_index(p, b, h, m0 + r, p.seqlen_q) * kHeadDim + c, acc * p.scale);
        }
    }

    if (key >= p.seqlen_k) return;
    const int64_t out = bwd_row_index(p, b, h, key, p.seqlen_k) * kHeadDim + col0;
#pragma unroll
    for (int c = 0; c < Tr::kCols; ++c) {
        p.dk_accum[out + c] = dk[c] * p.scale;
        p.dv_accum[out + c] = dv[c];
    }
}

// ---- dq: the Q-block outer loop (deterministic mode) ---------------------------------------------------------
// Grid: (query blocks, query heads, batch). Thread t owns query row m0 + t / kSplit, columns
// (t % kSplit) * kCols ...; keys are added in one fixed order, so the result has fixed bits.
template <int kHeadDim, typename T>
__global__ void __launch_bounds__(BwdTraits<kHeadDim>::kDqThreads)
dq_kernel(const sy_attn_bwd_params p) {
    using Tr = BwdTraits<kHeadDim>;
    extern __shared__ float smem[];
    float *sQ = smem;
    float *sdO = sQ + Tr::kRowsPerBlock * Tr::kRowStride;
    float *sK = sdO + Tr::kRowsPerBlock * Tr::kRowStride;
    float *sV = sK + Tr::kKeyTile * Tr::kRowStride;

    const int h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int m0 = blockIdx.x * Tr::kRowsPerBlock;
    const int local_row = threadIdx.x / Tr::kSplit, chunk = threadIdx.x % Tr::kSplit;
    const int row = m0 + local_row;
    const int col0 = chunk * Tr::kCols;
    const T *gK = head_base(static_cast<const T *>(p.k), p.k_strides, b, h_kv);
    const T *gV = head_base(static_cast<const T *>(p.v), p.v_strides, b, h_kv);
    load_tile<Tr, Tr::kRowsPerBlock, Tr::kDqThreads>(sQ, head_base(static_cast<const T *>(p.q), p.q_strides, b, h),
                                                    p.q_strides[2], m0, p.seqlen_q);
    load_tile<Tr, Tr::kRowsPerBlock, Tr::kDqThreads>(sdO, head_base(static_cast<const T *>(p.dout), p.dout_strides, b, h),
                                                    p.dout_strides[2], m0, p.seqlen_q);
    const float *sQrow = sQ + padded<Tr>(local_row, col0);
    const float *sdOrow = sdO + padded<Tr>(local_row, col0);
    const bool row_in = row < p.seqlen_q;
    const float lse_log2 = row_in ? p.lse[bwd_row_index(p, b, h, row, p.seqlen_q)] * kLog2e : 0.f;
    const float delta = row_in ? p.delta[bwd_row_index(p, b, h, row, p.seqlen_q)] : 0.f;
    const float scale_log2 = p.scale * kLog2e;

    float dq[Tr::kCols];
#pragma unroll
    for (int c = 0; c < Tr::kCols; ++c) dq[c] = 0.f;

    const int n_end = p.is_causal ? min(p.seqlen_k, m0 + Tr::kRowsPerBlock) : p.seqlen_k;
    for (int n0 = 0; n0 < n_end; n0 += Tr::kKeyTile) {
        __syncthreads();   // the previous key tile is consumed (and sQ, sdO written)
        load_tile<Tr, Tr::kKeyTile, Tr::kDqThreads>(sK, gK, p.k_strides[2], n0, p.seqlen_k);
        load_tile<Tr, Tr::kKeyTile, Tr::kDqThreads>(sV, gV, p.v_strides[2], n0, p.seqlen_k);
        __syncthreads();
#pragma unroll 1   // rolled: the dQ accumulators take the registers
        for (int j = 0; j < Tr::kKeyTile; ++j) {
            const int key = n0 + j;
            const float *sKrow = sK + padded<Tr>(j, col0);
            const float *sVrow = sV + padded<Tr>(j, col0);
            float s = 0.f, dp = 0.f;
#pragma unroll
            for (int c = 0; c < Tr::kCols; ++c) {
                s += sQrow[c] * sKrow[c];
                dp += sdOrow[c] * sVrow[c];
            }
            s = sum_over_split<Tr>(s);
            dp = sum_over_split<Tr>(dp);
            const bool visible = row_in && key < p.seqlen_k && !(p.is_causal && key > row) && isfinite(lse_log2);
            const float ds = visible ? exp2f(s * scale_log2 - lse_log2) * (dp - delta) : 0.f;
#pragma unroll
            for (int c = 0; c < Tr::kCols; ++c) dq[c] += ds * sKrow[c];
        }
    }
    if (!row_in) return;
    const int64_t out = bwd_row_index(p, b, h, row, p.seqlen_q) * kHeadDim + col0;
#pragma unroll
    for (int c = 0; c < Tr::kCols; ++c) p.dq_accum[out + c] = dq[c] * p.scale;
}

template <int kHeadDim, typename T>
int launch(const sy_attn_bwd_params &p, cudaStream_t stream) {
    using Tr = BwdTraits<kHeadDim>;
    int status;
    if ((status = launch_preprocess<T>(p, p.seqlen_q, stream)) != kOk) return status;

    if (!p.deterministic) {
        const size_t bytes = static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q * kHeadDim * sizeof(float);
        cudaError_t err = cudaMemsetAsync(p.dq_accum, 0, bytes, stream);   // the atomics add into it
        if (err != cudaSuccess) return static_cast<int>(err);
    }
    auto dkdv = dkdv_kernel<kHeadDim, T>;
    // Above 48 KiB a block's dynamic shared memory must be opted into, per kernel.
    cudaError_t err = cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kDkdvSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    dim3 kv_grid(ceil_div(p.seqlen_k, Tr::kKeysPerBlock), p.heads_q, p.batch);
    dkdv<<<kv_grid, Tr::kDkdvThreads, Tr::kDkdvSmemBytes, stream>>>(p);
    if ((status = launch_status()) != kOk) return status;

    if (p.deterministic) {
        auto dq = dq_kernel<kHeadDim, T>;
        err = cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kDqSmemBytes);
        if (err != cudaSuccess) return static_cast<int>(err);
        dim3 q_grid(ceil_div(p.seqlen_q, Tr::kRowsPerBlock), p.heads_q, p.batch);
        dq<<<q_grid, Tr::kDqThreads, Tr::kDqSmemBytes, stream>>>(p);
        if ((status = launch_status()) != kOk) return status;
    }

    if ((status = launch_reduce<T>(p.dq_accum, p.dq, p.dq_strides, p.batch, p.heads_q, 1, p.seqlen_q, kHeadDim, 1.f, stream)) != kOk)
        return status;
    return launch_reduce_dk_dv<T>(p, kHeadDim, stream);
}

template <typename T>
int launch_head_dim(const sy_attn_bwd_params &p, cudaStream_t stream) {
    switch (p.head_dim) {
        // The head dims of the mma forward; the Python layer sends others to its torch-math backward
        // (each instantiation costs CI compile time).
        case 64: return launch<64, T>(p, stream);
        case 128: return launch<128, T>(p, stream);
        default: return kUnsupported;
    }
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_tiled_bwd(const sy_attn_bwd_params *params, void *stream) {
    using namespace sy_attn;
    int status = check_bwd_params(params);
    if (status != kOk) return status;
    if (!params->dq_accum || !params->dk_accum || !params->dv_accum) return kInvalid;
    if (params->causal_offset || params->has_window) return kUnsupported;   // the band: mma and hopper
    if (params->dropout_p != 0.f) return kUnsupported;                      // dropout: mma and hopper
    if (params->cu_seqlens_q || params->cu_seqlens_k) return kUnsupported;  // varlen: hopper only
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (params->dtype) {
        case SY_ATTN_F32: return launch_head_dim<float>(*params, s);
        case SY_ATTN_F16: return launch_head_dim<__half>(*params, s);
        default: return launch_head_dim<__nv_bfloat16>(*params, s);
    }
}
