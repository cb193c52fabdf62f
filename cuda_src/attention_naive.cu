// `naive`: standard attention as three kernels, S = scale * Q K^T and P = softmax(S) in HBM.
//
// Hardware fact exposed: HBM bandwidth. Each kernel is reasonable on its own, but the N x N matrix
// makes the round trip S write, S read, P write, P read: O(N^2) bytes against the O(N d) of the
// inputs, which is the traffic FlashAttention removes (docs/attention-gpu.md has the Nsight figures).
#include "attention_common.cuh"
#include "kernel_traits.cuh"

namespace sy_attn {
namespace {

using Tr = NaiveTraits;

// S[bh][i][j] = scale * q_i . k_j: a 16 x 16 tile per block, d walked 16 at a time through shared
// memory. Grid (key tiles, query tiles, B * Hq); block (16, 16).
template <typename T>
__global__ void scores_kernel(const sy_attn_params p) {
    __shared__ float sQ[Tr::kTile][Tr::kTile];
    __shared__ float sK[Tr::kTile][Tr::kTile + 1];   // +1: column reads sK[tx][dd] hit 16 banks
    const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int i0 = blockIdx.y * Tr::kTile, j0 = blockIdx.x * Tr::kTile;
    const T *gQ = head_base(static_cast<const T *>(p.q), p.q_strides, b, h);
    const T *gK = head_base(static_cast<const T *>(p.k), p.k_strides, b, h_kv);

    float dot = 0.f;
    for (int d0 = 0; d0 < p.head_dim; d0 += Tr::kTile) {
        const int d = d0 + tx;
        const bool d_in = d < p.head_dim;
        sQ[ty][tx] = (i0 + ty < p.seqlen_q && d_in) ? to_float(gQ[(i0 + ty) * p.q_strides[2] + d]) : 0.f;
        sK[ty][tx] = (j0 + ty < p.seqlen_k && d_in) ? to_float(gK[(j0 + ty) * p.k_strides[2] + d]) : 0.f;
        __syncthreads();
#pragma unroll
        for (int dd = 0; dd < Tr::kTile; ++dd) dot += sQ[ty][dd] * sK[tx][dd];
        __syncthreads();
    }
    const int i = i0 + ty, j = j0 + tx;
    if (i < p.seqlen_q && j < p.seqlen_k)
        p.workspace[(static_cast<int64_t>(bh) * p.seqlen_q + i) * p.seqlen_k + j] = dot * p.scale;
}

// Block-wide reduction of one float per thread (max or sum) through one float per warp.
template <bool kMax>
__device__ float block_reduce(float x, float *sWarp) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        const float y = __shfl_xor_sync(0xffffffffu, x, off);
        x = kMax ? fmaxf(x, y) : x + y;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();   // sWarp may still be read by the previous reduction
    if (lane == 0) sWarp[warp] = x;
    __syncthreads();
    x = kMax ? -INFINITY : 0.f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) x = kMax ? fmaxf(x, sWarp[w]) : x + sWarp[w];
    return x;
}

// The masked score of (bh, i, j): mask added, causal (top-left) and out-of-row keys at -inf.
__device__ __forceinline__ float masked_score(const sy_attn_params &p, const float *sRow, int b, int h, int i, int j) {
    float s = sRow[j];
    if (p.mask) s += p.mask[b * p.mask_strides[0] + h * p.mask_strides[1] + i * p.mask_strides[2] + j * p.mask_strides[3]];
    if (p.is_causal && j > i) s = -INFINITY;
    return s;
}

// P row = softmax of the masked S row, in place; one block per row, three passes over HBM (max,
// sum, write). A row with every score masked gets P = 0 and lse = -inf (torch's convention).
__global__ void softmax_kernel(const sy_attn_params p) {
    __shared__ float sWarp[Tr::kSoftmaxThreads / 32];
    const int64_t row = blockIdx.x;   // (bh, i) flattened
    const int i = static_cast<int>(row % p.seqlen_q);
    const int bh = static_cast<int>(row / p.seqlen_q), b = bh / p.heads_q, h = bh % p.heads_q;
    float *gRow = p.workspace + row * p.seqlen_k;

    float m_i = -INFINITY;
    for (int j = threadIdx.x; j < p.seqlen_k; j += blockDim.x) m_i = fmaxf(m_i, masked_score(p, gRow, b, h, i, j));
    m_i = block_reduce<true>(m_i, sWarp);
    const float m_safe = m_i == -INFINITY ? 0.f : m_i;   // -inf guard: exp(-inf - 0) = 0, not NaN

    float l_i = 0.f;
    for (int j = threadIdx.x; j < p.seqlen_k; j += blockDim.x) l_i += expf(masked_score(p, gRow, b, h, i, j) - m_safe);
    l_i = block_reduce<false>(l_i, sWarp);
    const float inv_l = l_i == 0.f ? 0.f : 1.f / l_i;

    // All threads read their scores before any writes; each thread rewrites only its own columns.
    for (int j = threadIdx.x; j < p.seqlen_k; j += blockDim.x)
        gRow[j] = expf(masked_score(p, gRow, b, h, i, j) - m_safe) * inv_l;
    if (threadIdx.x == 0) p.lse[row] = l_i == 0.f ? -INFINITY : m_i + logf(l_i);
}

// O[bh][i][c] = sum_j P[bh][i][j] v_j[c]: 16 x 16 output tiles, keys walked 16 at a time.
// Grid (d tiles, query tiles, B * Hq); block (16, 16).
template <typename T>
__global__ void pv_kernel(const sy_attn_params p) {
    __shared__ float sP[Tr::kTile][Tr::kTile];
    __shared__ float sV[Tr::kTile][Tr::kTile];
    const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int i0 = blockIdx.y * Tr::kTile, c0 = blockIdx.x * Tr::kTile;
    const float *gP = p.workspace + static_cast<int64_t>(bh) * p.seqlen_q * p.seqlen_k;
    const T *gV = head_base(static_cast<const T *>(p.v), p.v_strides, b, h_kv);

    float acc = 0.f;
    for (int j0 = 0; j0 < p.seqlen_k; j0 += Tr::kTile) {
        sP[ty][tx] = (i0 + ty < p.seqlen_q && j0 + tx < p.seqlen_k)
                         ? gP[static_cast<int64_t>(i0 + ty) * p.seqlen_k + j0 + tx] : 0.f;
        sV[ty][tx] = (j0 + ty < p.seqlen_k && c0 + tx < p.head_dim)
                         ? to_float(gV[(j0 + ty) * p.v_strides[2] + c0 + tx]) : 0.f;
        __syncthreads();
#pragma unroll
        for (int jj = 0; jj < Tr::kTile; ++jj) acc += sP[ty][jj] * sV[jj][tx];
        __syncthreads();
    }
    const int i = i0 + ty, c = c0 + tx;
    if (i < p.seqlen_q && c < p.head_dim) {
        T *gO = head_base(static_cast<T *>(p.o), p.o_strides, b, h);
        gO[i * p.o_strides[2] + c] = from_float<T>(acc);
    }
}

template <typename T>
int launch(const sy_attn_params &p, cudaStream_t stream) {
    const int bh = p.batch * p.heads_q;
    const dim3 block(Tr::kTile, Tr::kTile);
    scores_kernel<T><<<dim3(ceil_div(p.seqlen_k, Tr::kTile), ceil_div(p.seqlen_q, Tr::kTile), bh), block, 0, stream>>>(p);
    softmax_kernel<<<static_cast<unsigned>(static_cast<int64_t>(bh) * p.seqlen_q), Tr::kSoftmaxThreads, 0, stream>>>(p);
    pv_kernel<T><<<dim3(ceil_div(p.head_dim, Tr::kTile), ceil_div(p.seqlen_q, Tr::kTile), bh), block, 0, stream>>>(p);
    return launch_status();
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_naive_fwd(const sy_attn_params *params, void *stream) {
    using namespace sy_attn;
    int status = check_params(params);
    if (status != kOk) return status;
    const sy_attn_params &p = *params;
    if (!p.workspace) return kInvalid;
    if (p.causal_offset || p.has_window) return kUnsupported;   // the band: mma and hopper (a mask here)
    if (p.mask_kind != 0 || p.mask_lists) return kUnsupported;   // float32 masks only (attention_mask.cuh: the tiled kinds)
    if (p.dropout_p != 0.f) return kUnsupported;                // dropout: mma and hopper
    // Grid limits: B * Hq blocks in z, and (B * Hq * Nq) softmax rows in x.
    if (static_cast<int64_t>(p.batch) * p.heads_q > 65535 || p.seqlen_q / Tr::kTile + 1 > 65535) return kUnsupported;
    if (static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q > 0x7fffffffLL) return kUnsupported;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (p.dtype) {
        case SY_ATTN_F32: return launch<float>(p, s);
        case SY_ATTN_F16: return launch<__half>(p, s);
        default: return launch<__nv_bfloat16>(p, s);
    }
}

extern "C" const char *sy_attn_error_string(int status) {
    using namespace sy_attn;
    if (status == kOk) return "ok";
    if (status == kInvalid) return "invalid argument";
    if (status == kUnsupported) return "not supported by this kernel";
    if (status > 0) return cudaGetErrorString(static_cast<cudaError_t>(status));
    return "unknown status";
}
