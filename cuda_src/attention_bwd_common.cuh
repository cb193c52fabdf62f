// What the backward families (attention_bwd.cu: fp32 `tiled`; attention_mma_bwd.cu and
// attention_hopper_bwd.cu: tensor cores) share: the preprocess pass D = rowsum(dO o O), the
// fp32-workspace -> dtype reduce, and the writers of accumulator tiles.
#pragma once

#include <algorithm>
#include <utility>   // std::integer_sequence

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

// ---- the hopper backward's preprocess: D, the log2 LSE and dq_accum's zeros in one pass ---------------
// The same rows as preprocess_kernel, but kHeadDim / 8 lanes per row, each loading 16 bytes of O and
// of dO (one vector load instead of kHeadDim / 32 two-byte loads per lane) and writing 8 zero floats of
// the row's dq_accum (the memset launch it replaces wrote the same bytes in a pass of its own).
// Needs O and dO rows 16-byte aligned (launch_preprocess_zero_dq checks and otherwise falls back).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kPreprocessThreads)
preprocess_vec_kernel(const sy_attn_bwd_params p, int rows_per_head, bool dq_tiled) {
    constexpr int kLanes = kHeadDim / 8, kRowsPerBlock = kPreprocessThreads / kLanes;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kLanes, sub = threadIdx.x % kLanes;
    const int h = blockIdx.y, b = blockIdx.z;
    if (row >= rows_per_head) return;   // rows_per_head is a multiple of kRowsPerBlock: whole groups leave
    const int64_t out = bwd_row_index(p, b, h, row, rows_per_head);
    int len_q = p.seqlen_q, row0 = 0, head_b = b;
    int64_t lse_at = bwd_row_index(p, b, h, row, p.seqlen_q), dq_row = lse_at;
    if (p.cu_seqlens_q) {
        row0 = p.cu_seqlens_q[b];
        len_q = p.cu_seqlens_q[b + 1] - row0;
        head_b = 0;
        lse_at = dq_row = static_cast<int64_t>(h) * p.seqlen_q + row0 + row;
    }
    const bool real = row < len_q;
    // Row-major dq_accum: the sequence's rows; tile-major (hopper's dQ through shared memory): every one
    // of the head's rows_per_head * d floats, in any order.
    if (dq_tiled || real) {
        float4 *dq = reinterpret_cast<float4 *>(p.dq_accum + (dq_tiled ? out : dq_row) * kHeadDim + sub * 8);
        dq[0] = dq[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float sum = 0.f;
    if (real) {
        const T *o = head_base(static_cast<const T *>(p.o), p.o_strides, head_b, h) + int64_t(row0 + row) * p.o_strides[2];
        const T *dout = head_base(static_cast<const T *>(p.dout), p.dout_strides, head_b, h) +
                        int64_t(row0 + row) * p.dout_strides[2];
        const uint4 ov = *reinterpret_cast<const uint4 *>(o + sub * 8), dv = *reinterpret_cast<const uint4 *>(dout + sub * 8);
        const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 a = MmaOp<T>::unpack(ow[i]), c = MmaOp<T>::unpack(dw[i]);
            sum += a.x * c.x + a.y * c.y;
        }
    }
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (sub == 0) {
        p.delta[out] = real ? sum : 0.f;
        const float lse = real ? p.lse[lse_at] : INFINITY;
        p.lse_log2[out] = isfinite(lse) ? lse * kLog2e : INFINITY;
    }
}

// A (B, H, N, d) view whose rows start 16-byte aligned (the batch stride is unused in a varlen call).
inline bool rows_aligned16(const void *ptr, const int64_t strides[3], bool varlen) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
    for (int i = varlen ? 1 : 0; i < 3; ++i)
        if (strides[i] % 8 != 0) return false;
    return true;
}

// D, lse_log2 and dq_accum (B, Hq, Nq, d) zeroed (varlen: (Hq, total_q, d); dq_tiled: every one of the
// rows_per_head rows, dq_bytes in all); falls back to the warp-per-row preprocess and a memset where O or dO
// rows are not 16-byte aligned. kHeadDim: the caller's (64, 128, 256), so no other width is instantiated.
template <typename T, int kHeadDim>
int launch_preprocess_zero_dq(const sy_attn_bwd_params &p, int rows_per_head, size_t dq_bytes, bool dq_tiled,
                              cudaStream_t stream) {
    constexpr int kRowsPerBlock = kPreprocessThreads / (kHeadDim / 8);
    static_assert(SY_ATTN_BWD_ROW_ALIGN % kRowsPerBlock == 0, "whole row groups per block");
    const bool varlen = p.cu_seqlens_q != nullptr;
    if (!rows_aligned16(p.o, p.o_strides, varlen) || !rows_aligned16(p.dout, p.dout_strides, varlen)) {
        const cudaError_t err = cudaMemsetAsync(p.dq_accum, 0, dq_bytes, stream);
        if (err != cudaSuccess) return static_cast<int>(err);
        return launch_preprocess<T>(p, rows_per_head, stream);
    }
    const dim3 grid(ceil_div(rows_per_head, kRowsPerBlock), p.heads_q, p.batch);
    preprocess_vec_kernel<T, kHeadDim><<<grid, kPreprocessThreads, 0, stream>>>(p, rows_per_head, dq_tiled);
    return launch_status();
}

// ---- dQ: scale * dq_accum (rows, d) fp32 -> dq in T, 8 elements per thread -------------------------
// dq_accum rows are (B, Hq, Nq) in order (varlen: (Hq, total_q), batch 1); each thread reads two float4
// and writes one 16-byte vector of T: 32-bit index arithmetic once per 8 elements instead of the generic
// reduce's 64-bit divisions per element. Needs dq rows 16-byte aligned (launch_dq_convert checks).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kReduceThreads)
dq_convert_kernel(const float *src, T *dst, int64_t s0, int64_t s1, int64_t s2, int heads, int n_rows, int total,
                  float scale) {
    constexpr int kChunks = kHeadDim / 8;
    const int idx = blockIdx.x * kReduceThreads + threadIdx.x;
    if (idx >= total) return;
    const int row = idx / kChunks, c = (idx % kChunks) * 8;
    const int n = row % n_rows, bh = row / n_rows;
    const float4 *s = reinterpret_cast<const float4 *>(src + static_cast<int64_t>(row) * kHeadDim + c);
    const float4 a = s[0], b = s[1];
    uint4 packed;
    packed.x = MmaOp<T>::pack(a.x * scale, a.y * scale);
    packed.y = MmaOp<T>::pack(a.z * scale, a.w * scale);
    packed.z = MmaOp<T>::pack(b.x * scale, b.y * scale);
    packed.w = MmaOp<T>::pack(b.z * scale, b.w * scale);
    *reinterpret_cast<uint4 *>(dst + (bh / heads) * s0 + (bh % heads) * s1 + n * s2 + c) = packed;
}

template <typename T, int kHeadDim>
int launch_dq_convert(const float *src, void *dst, const int64_t strides[3], int batch, int heads, int n_rows,
                      float scale, bool varlen, cudaStream_t stream) {
    const int64_t total = static_cast<int64_t>(batch) * heads * n_rows * (kHeadDim / 8);
    if (!rows_aligned16(dst, strides, varlen) || total >= (int64_t(1) << 31))
        return launch_reduce<T>(src, dst, strides, batch, heads, 1, n_rows, kHeadDim, scale, stream);
    const int blocks = static_cast<int>((total + kReduceThreads - 1) / kReduceThreads);
    dq_convert_kernel<T, kHeadDim><<<blocks, kReduceThreads, 0, stream>>>(
        src, static_cast<T *>(dst), varlen ? 0 : strides[0], strides[1], strides[2], heads, n_rows, static_cast<int>(total),
        scale);
    return launch_status();
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

// dQ from the hopper backwards' tile-major dq_accum (SY_HOPPER_BWD_DQ_TMA, and the d = 256 kernel's atomics): per
// head rows_per_head / kBlockM tiles (kBlockM = 64 at d = 128 and 256, 128 at d = 64), each d / 64 shares of
// 64 x 64 (columns 64 w..; d = 64: two, rows 64 w..), a share 8 x 128 float4 in the accumulator's order: float4
// nt * 128 + t holds thread t's n8 tile nt, i.e. columns 8 nt + 2 (t % 4) + {0, 1} of rows 16 (t / 32) +
// (t % 32) / 4 (+ 8).
// A memory-bound pass (reads 4 bytes, writes 2 a value) that must stay under the SM's issue rate: grid (chunks
// of a head, heads, batch), so every index below divides by a power of 2 (one thread a float4 with the head
// and batch divided out at run time was ~100 instructions per 16 bytes: at the HBM rate per SM, about 70 % of
// the schedulers' issue slots). Each thread takes n8 tiles 2q and 2q + 1 of one accumulator thread: two
// coalesced 16-byte reads, and 16 contiguous bytes of each row written by a quad of lanes.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kReduceThreads)
dq_tiled_convert_kernel(const float *src, T *dst, int64_t s0, int64_t s1, int64_t s2, int batch, int heads,
                        int seqlen_q, int rows_per_head, float scale) {
    constexpr int kShare4 = 64 * 64 / 4, kPairs = kShare4 / 2, kBlockM = kHeadDim == 64 ? 128 : 64;
    constexpr unsigned kShares = kHeadDim == 64 ? 2 : kHeadDim / 64;   // a tile's shares
    // Unsigned: the divisions by powers of 2 are single shifts and masks.
    const unsigned pair = blockIdx.x * kReduceThreads + threadIdx.x;   // launch: a head's pairs are whole blocks
    const unsigned share = pair / kPairs, q = (pair % kPairs) / 128, t = pair % 128;
    const int tile = share / kShares, w = share % kShares;
    const int r = 16 * (t / 32) + (t % 32) / 4, c = 16 * q + 2 * (t % 4);
    const int row = tile * kBlockM + (kHeadDim == 64 ? 64 * w : 0) + r, col = (kHeadDim == 64 ? 0 : 64 * w) + c;
    // (h, b) from the grid; past the grid's 65535 a dimension the blocks take further heads / batches in turn.
    for (int b = blockIdx.z; b < batch; b += gridDim.z)
        for (int h = blockIdx.y; h < heads; h += gridDim.y) {
            const float4 *in = reinterpret_cast<const float4 *>(src) +
                               (int64_t(b) * heads + h) * (int64_t(rows_per_head) * kHeadDim / 4) + share * kShare4 +
                               2 * q * 128 + t;
            const float4 lo = in[0], hi = in[128];   // n8 tiles 2q (columns c, c + 1) and 2q + 1 (c + 8, c + 9)
            T *base = dst + b * s0 + h * s1 + col;
            if (row < seqlen_q) {
                store_pair(base + row * s2, lo.x * scale, lo.y * scale);
                store_pair(base + row * s2 + 8, hi.x * scale, hi.y * scale);
            }
            if (row + 8 < seqlen_q) {
                store_pair(base + (row + 8) * s2, lo.z * scale, lo.w * scale);
                store_pair(base + (row + 8) * s2 + 8, hi.z * scale, hi.w * scale);
            }
        }
}

// The same for the 80-query tiles' transposed shares (hopper backward, d = 128, kDqTransposed): share w of tile m
// is dQ^T's rows 64 w.. (head columns) by the tile's 80 queries, float4 nt * 128 + t holding thread t's n8 tile nt
// (queries 8 nt + 2 (t % 4) + {0, 1} of head columns 16 (t / 32) + (t % 32) / 4 (+ 8)). A block a share: the
// coalesced float4 reads go to a [query][column] array in shared memory (rows padded by 4 floats, so a warp's
// stores, 4 queries two apart x 8 columns, hit 32 distinct banks), and each warp writes whole query rows of dQ
// (64 columns: 128 contiguous bytes in 16-bit types).
template <typename T>
__global__ void __launch_bounds__(128)
dq_tiled_convert_t_kernel(const float *src, T *dst, int64_t s0, int64_t s1, int64_t s2, int seqlen_q, int rows_per_head,
                          float scale) {
    constexpr int kQueries = 80, kCols = 64, kPitch = kCols + 4, kHeadDim = 128;
    __shared__ float tile[kQueries * kPitch];
    const int share = blockIdx.x, t = threadIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int m0 = (share / 2) * kQueries, col0 = (share % 2) * kCols;
    const float4 *in = reinterpret_cast<const float4 *>(src) +
                       (int64_t(b) * gridDim.y + h) * (int64_t(rows_per_head) * kHeadDim / 4) + share * (kQueries * kCols / 4);
    const int r = 16 * (t / 32) + (t % 32) / 4, q = 2 * (t % 4);
#pragma unroll
    for (int nt = 0; nt < kQueries / 8; ++nt) {
        const float4 v = in[nt * 128 + t];
        float *at = tile + (8 * nt + q) * kPitch + r;
        at[0] = v.x;
        at[kPitch] = v.y;
        at[8] = v.z;
        at[kPitch + 8] = v.w;
    }
    __syncthreads();
    T *base = dst + b * s0 + h * s1 + col0;
#pragma unroll 4
    for (int pair = t; pair < kQueries * kCols / 2; pair += 128) {
        const int query = pair / (kCols / 2), col = 2 * (pair % (kCols / 2));
        if (m0 + query >= seqlen_q) break;   // pair order is query order: the rest of the block's are past it too
        const float2 v = *reinterpret_cast<const float2 *>(tile + query * kPitch + col);
        store_pair(base + (m0 + query) * s2 + col, v.x * scale, v.y * scale);
    }
}

template <typename T>
int launch_dq_tiled_convert_t(const float *src, void *dst, const int64_t strides[3], int batch, int heads, int seqlen_q,
                              int rows_per_head, float scale, cudaStream_t stream) {
    // heads and batch fit the grid's 65535: the backward kernel before it was launched on them.
    const dim3 grid(2 * ceil_div(seqlen_q, 80), heads, batch);
    dq_tiled_convert_t_kernel<T><<<grid, 128, 0, stream>>>(src, static_cast<T *>(dst), strides[0], strides[1], strides[2],
                                                          seqlen_q, rows_per_head, scale);
    return launch_status();
}

template <typename T, int kHeadDim>
int launch_dq_tiled_convert(const float *src, void *dst, const int64_t strides[3], int batch, int heads, int seqlen_q,
                            int rows_per_head, float scale, cudaStream_t stream) {
    // A head's pairs: rows_per_head * head_dim / 8, whole blocks (rows_per_head is a multiple of
    // SY_ATTN_BWD_ROW_ALIGN: 16 K pairs at d = 128, 8 K at d = 64, per 128 rows).
    static_assert(SY_ATTN_BWD_ROW_ALIGN * 64 / 8 % kReduceThreads == 0, "a head's pairs fill whole blocks");
    const int64_t pairs = static_cast<int64_t>(rows_per_head) * kHeadDim / 8;
    const dim3 grid(static_cast<unsigned>(pairs / kReduceThreads), heads < 65535 ? heads : 65535,
                    batch < 65535 ? batch : 65535);
    dq_tiled_convert_kernel<T, kHeadDim><<<grid, kReduceThreads, 0, stream>>>(
        src, static_cast<T *>(dst), strides[0], strides[1], strides[2], batch, heads, seqlen_q, rows_per_head, scale);
    return launch_status();
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
// On sm_90 each add is red_add_v4_if, the row address and its test made once for all kNTiles adds: through
// `if (row < n_rows) atomicAdd(float4 *)` ptxas rebuilt the 64-bit row address for every add and made the float4
// by conditional moves (22 instructions an add against 13; the d = 256 backward's 16 adds a tile, session d256o.2).
#if __CUDA_ARCH__ >= 900
// red.global.add.v4.f32 at addr where pred holds: what atomicAdd(float4 *) compiles to (relaxed, gpu scope, round
// to nearest: REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU), under a PTX predicate (ptxas still makes it a branch around the
// add, but over the add and its four selects only).
__device__ __forceinline__ void red_add_v4_if(const float *addr, float x, float y, float z, float w, bool pred) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n@p red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n}\n"
                 ::"l"(addr), "f"(x), "f"(y), "f"(z), "f"(w), "r"(static_cast<int>(pred)) : "memory");
}

// red.global.add.v4.f32 at base + kOffset bytes, the offset in the instruction's immediate.
template <int kOffset>
__device__ __forceinline__ void red_add_v4_at(const float *base, const float (&v)[4]) {
    asm volatile("red.global.add.v4.f32 [%0+%5], {%1, %2, %3, %4};\n" ::"l"(base), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]),
                 "n"(kOffset) : "memory");
}
template <int kNTiles, int... kNt>
__device__ __forceinline__ void atomic_add_tiled(const float *base, const float (&acc)[kNTiles][4],
                                                 std::integer_sequence<int, kNt...>) {
    (red_add_v4_at<kNt * 128 * 16>(base, acc[kNt]), ...);
}
// Add one warpgroup's m64 x (kNTiles * 8) wgmma accumulator (t = its thread, 0..127) to a tile-major dq_accum in
// the registers' order: n8 tile nt of thread t is float4 nt * 128 + t, the layout dq_tiled_convert_kernel reads.
// A warp's add is 512 contiguous bytes, four whole 128-byte lines, so L2 receives whole 32-byte sectors (a
// row-major add gives each sector two 16-byte halves from two lanes, after a shuffle to pair them: the d = 256
// backward's profile had L2 at 81 % and half its warps' stall samples on those shuffles and selects). Tiles are
// whole in a tile-major workspace (rows past seqlen_q are the head's padding), so no add needs a row test. One
// base register and immediate offsets: with an address operand per add, ptxas built a 64-bit address for each
// (and the d = 256 kernels spilled 12-16 bytes).
template <int kNTiles>
__device__ __forceinline__ void atomic_add_tiled(float *gShare, const float (&acc)[kNTiles][4], int t) {
    atomic_add_tiled(gShare + t * 4, acc, std::make_integer_sequence<int, kNTiles>{});
}
#endif
template <int kNTiles>
__device__ __forceinline__ void atomic_add_rows(float *gHead, int row_stride, int row0, int n_rows,
                                                const float (&acc)[kNTiles][4], int lane) {
#if __CUDA_ARCH__ >= 900
    const bool even = lane % 2 == 0;
    const int row = row0 + lane / 4 + (even ? 0 : 8);
    const float *gRow = gHead + static_cast<int64_t>(row) * row_stride + (lane % 4 - (even ? 0 : 1)) * 2;
    const bool in = row < n_rows;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
        // even lanes give away their row-(g+8) pair, odd lanes their row-g pair
        const float give0 = even ? acc[nt][2] : acc[nt][0], give1 = even ? acc[nt][3] : acc[nt][1];
        const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
        red_add_v4_if(gRow + nt * 8, even ? acc[nt][0] : got0, even ? acc[nt][1] : got1, even ? got0 : acc[nt][2],
                      even ? got1 : acc[nt][3], in);
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
