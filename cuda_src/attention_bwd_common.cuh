// What the backward families (attention_bwd.cu: fp32 `tiled`; attention_mma_bwd.cu and
// attention_hopper_bwd.cu: tensor cores) share: the preprocess pass D = rowsum(dO o O), the
// fp32-workspace -> dtype reduce, and the writers of accumulator tiles.
#pragma once

#include <algorithm>

#include "attention_common.cuh"
#include "mma_primitives.cuh"   // MmaOp<T>::pack

namespace sy_attn {

// The row (b, h, row) of a (B, Hq, rows_per_head) workspace.
__device__ __forceinline__ int64_t bwd_row_index(const sy_attn_bwd_params &p, int b, int h, int row, int rows_per_head) {
    return (static_cast<int64_t>(b) * p.heads_q + h) * rows_per_head + row;
}

// ---- preprocess: D = rowsum(dO o O), and the log2-scaled LSE the mma backward reads ------------------
// One warp per row of a (B, Hq, rows_per_head) workspace. Rows at or past seqlen_q (padding, mma only)
// get D = 0 and an LSE of +inf, so their P = exp2(s - inf) = 0 needs no bounds test in the kernel;
// so does a row whose LSE is -inf (it saw no key: P is 0, not exp(+inf)).
constexpr int kPreprocessThreads = 256;   // 8 warps, one row each

template <typename T>
__global__ void __launch_bounds__(kPreprocessThreads)
preprocess_kernel(const sy_attn_bwd_params p, int rows_per_head) {
    const int warps = kPreprocessThreads / 32;
    const int row = blockIdx.x * warps + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y, b = blockIdx.z;
    if (row >= rows_per_head) return;
    const int64_t out = bwd_row_index(p, b, h, row, rows_per_head);
    // Varlen (hopper): sequence b's rows of the packed o, dout and lse (Hq, total_q).
    int len_q = p.seqlen_q, row0 = 0, head_b = b;
    int64_t lse_at = bwd_row_index(p, b, h, row, p.seqlen_q);
    if (p.cu_seqlens_q) {
        row0 = p.cu_seqlens_q[b];
        len_q = p.cu_seqlens_q[b + 1] - row0;
        head_b = 0;
        lse_at = static_cast<int64_t>(h) * p.seqlen_q + row0 + row;
    }
    if (row >= len_q) {
        if (lane == 0) {
            p.delta[out] = 0.f;
            if (p.lse_log2) p.lse_log2[out] = INFINITY;
        }
        return;
    }
    const T *o = head_base(static_cast<const T *>(p.o), p.o_strides, head_b, h) + int64_t(row0 + row) * p.o_strides[2];
    const T *dout = head_base(static_cast<const T *>(p.dout), p.dout_strides, head_b, h) +
                    int64_t(row0 + row) * p.dout_strides[2];
    float sum = 0.f;
    for (int c = lane; c < p.head_dim; c += 32) sum += to_float(o[c]) * to_float(dout[c]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) {
        p.delta[out] = sum;
        if (p.lse_log2) {
            const float lse = p.lse[lse_at];
            p.lse_log2[out] = isfinite(lse) ? lse * kLog2e : INFINITY;
        }
    }
}

template <typename T>
int launch_preprocess(const sy_attn_bwd_params &p, int rows_per_head, cudaStream_t stream) {
    dim3 grid(ceil_div(rows_per_head, kPreprocessThreads / 32), p.heads_q, p.batch);
    preprocess_kernel<T><<<grid, kPreprocessThreads, 0, stream>>>(p, rows_per_head);
    return launch_status();
}

// ---- reduce: scale * fp32 workspace (B, Hsrc, N, d) -> dst (B, Hsrc / group, N, d) in T -------------
constexpr int kReduceThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
reduce_kernel(const float *src, T *dst, int64_t dst_s0, int64_t dst_s1, int64_t dst_s2,
              int batch, int heads_dst, int group, int n_rows, int head_dim, float scale) {
    const int64_t total = static_cast<int64_t>(batch) * heads_dst * n_rows * head_dim;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int c = idx % head_dim;
        const int row = (idx / head_dim) % n_rows;
        const int h = (idx / (static_cast<int64_t>(head_dim) * n_rows)) % heads_dst;
        const int b = idx / (static_cast<int64_t>(head_dim) * n_rows * heads_dst);
        float sum = 0.f;
        for (int g = 0; g < group; ++g)   // fixed order: deterministic
            sum += src[((static_cast<int64_t>(b) * heads_dst * group + h * group + g) * n_rows + row) * head_dim + c];
        dst[b * dst_s0 + h * dst_s1 + row * dst_s2 + c] = from_float<T>(sum * scale);
    }
}

template <typename T>
int launch_reduce(const float *src, void *dst, const int64_t strides[3], int batch, int heads_dst, int group,
                  int n_rows, int head_dim, float scale, cudaStream_t stream) {
    const int64_t total = static_cast<int64_t>(batch) * heads_dst * n_rows * head_dim;
    // A grid-stride loop: enough blocks to fill any GPU, no more (the kernel is bandwidth bound).
    const int blocks = static_cast<int>(std::min<int64_t>((total + kReduceThreads - 1) / kReduceThreads, 4096));
    reduce_kernel<T><<<blocks, kReduceThreads, 0, stream>>>(src, static_cast<T *>(dst), strides[0], strides[1],
                                                           strides[2], batch, heads_dst, group, n_rows, head_dim, scale);
    return launch_status();
}

// dK and dV from per-query-head fp32 workspaces (B, Hq, Nk, d), each summed over its GQA group.
template <typename T>
int launch_reduce_dk_dv(const sy_attn_bwd_params &p, int head_dim, cudaStream_t stream) {
    const int group = p.heads_q / p.heads_kv;
    const int status = launch_reduce<T>(p.dk_accum, p.dk, p.dk_strides, p.batch, p.heads_kv, group, p.seqlen_k,
                                        head_dim, 1.f, stream);
    if (status != kOk) return status;
    return launch_reduce<T>(p.dv_accum, p.dv, p.dv_strides, p.batch, p.heads_kv, group, p.seqlen_k, head_dim, 1.f, stream);
}

// ---- accumulator tiles to global memory (the mma and hopper backwards) -------------------------------------
// mma.sync's m16n8 accumulator and each warp's 16 rows of a wgmma m64nN accumulator share one layout.
// Where a lane's m16n8 accumulator elements sit: element c (0..3) of n8 tile nt is in column
// nt * 8 + 2 * (lane % 4) + c % 2 and row lane / 4 + (c / 2) * 8.
struct Fragment {
    static __device__ __forceinline__ int col(int nt, int c, int lane) { return nt * 8 + 2 * (lane % 4) + c % 2; }
    static __device__ __forceinline__ int row(int reg, int lane) { return lane / 4 + (reg / 2) * 8; }
};

// Two adjacent elements of a row: one 32-bit word in fp16/bf16, one float2 in fp32.
template <typename T>
__device__ __forceinline__ void store_pair(T *dst, float lo, float hi) {
    *reinterpret_cast<uint32_t *>(dst) = MmaOp<T>::pack(lo, hi);
}
template <>
__device__ __forceinline__ void store_pair<float>(float *dst, float lo, float hi) {
    *reinterpret_cast<float2 *>(dst) = make_float2(lo, hi);
}

// Store an m16 x (kNTiles * 8) accumulator tile (rows row0 + lane/4 (+8)) to a (rows, d) head slice
// in T (fp32: a GQA workspace, summed by reduce later), times scale; rows at or past n_rows are dropped.
template <typename T, int kNTiles>
__device__ __forceinline__ void store_rows(T *gHead, int64_t row_stride, int row0, int n_rows,
                                           const float (&acc)[kNTiles][4], float scale, int lane) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = row0 + lane / 4 + half * 8;
        if (row >= n_rows) continue;
        T *gRow = gHead + row * row_stride;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
            store_pair(gRow + Fragment::col(nt, 0, lane), acc[nt][2 * half] * scale, acc[nt][2 * half + 1] * scale);
    }
}

// Add an m16 x (kNTiles * 8) accumulator tile to rows row0 + lane / 4 (+ 8) of a (rows, row_stride)
// fp32 workspace, rows at or past n_rows dropped. Relaxed device-scope adds: the blocks of other key
// blocks add to the same elements in any order, and nothing reads the workspace before the kernel
// boundary. sm_90 has 16-byte float atomics: lanes t and t ^ 1 of a quad swap one row half's pair,
// so the even lane adds 4 consecutive floats of row lane / 4 and the odd lane 4 of row lane / 4 + 8
// (a quarter of the atomic instructions of one add per float); sm_80 adds float by float.
template <int kNTiles>
__device__ __forceinline__ void atomic_add_rows(float *gHead, int row_stride, int row0, int n_rows,
                                                const float (&acc)[kNTiles][4], int lane) {
#if __CUDA_ARCH__ >= 900
    const bool even = lane % 2 == 0;
    const int row = row0 + lane / 4 + (even ? 0 : 8);
    float *gRow = gHead + static_cast<int64_t>(row) * row_stride + (lane % 4 - (even ? 0 : 1)) * 2;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
        // even lanes give away their row-(g+8) pair, odd lanes their row-g pair
        const float give0 = even ? acc[nt][2] : acc[nt][0], give1 = even ? acc[nt][3] : acc[nt][1];
        const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
        const float4 sum = even ? make_float4(acc[nt][0], acc[nt][1], got0, got1)
                                : make_float4(got0, got1, acc[nt][2], acc[nt][3]);
        if (row < n_rows) atomicAdd(reinterpret_cast<float4 *>(gRow + nt * 8), sum);
    }
#else
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = row0 + lane / 4 + half * 8;
        if (row >= n_rows) continue;
        float *gRow = gHead + static_cast<int64_t>(row) * row_stride;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
            atomicAdd(gRow + Fragment::col(nt, 0, lane), acc[nt][2 * half]);
            atomicAdd(gRow + Fragment::col(nt, 1, lane), acc[nt][2 * half + 1]);
        }
    }
#endif
}

// Pointers and sizes a direct C caller could get wrong; the Python layer validates first.
inline int check_bwd_params(const sy_attn_bwd_params *p) {
    if (!p || !p->q || !p->k || !p->v || !p->o || !p->dout || !p->lse || !p->delta) return kInvalid;
    if (!p->dq || !p->dk || !p->dv) return kInvalid;
    if (p->batch < 1 || p->batch > 65535 || p->heads_q < 1 || p->heads_q > 65535) return kInvalid;
    if (p->heads_kv < 1 || p->heads_q % p->heads_kv != 0) return kInvalid;
    if (p->seqlen_q < 1 || p->seqlen_k < 1 || p->head_dim < 1) return kInvalid;
    if (p->dtype != SY_ATTN_F32 && p->dtype != SY_ATTN_F16 && p->dtype != SY_ATTN_BF16) return kInvalid;
    if (!(p->dropout_p >= 0.f && p->dropout_p < 1.f)) return kInvalid;   // NaN too
    return kOk;
}

}  // namespace sy_attn
