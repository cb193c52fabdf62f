// `decode`: attention of a few new query rows against a KV cache (Flash-Decoding), fp16/bf16.
//
// Hardware fact exploited: decode reads every cached key and value once and does ~1 FLOP per byte,
// so its limit is HBM bandwidth (~3 TB/s on the H100), reached only with enough bytes in flight on
// every SM. Three things get it there:
//   - GQA packing: the Hq / Hkv query heads that share a KV head (times the Nq new rows) are the rows
//     of one tile, so each K/V byte is read from HBM once per group, not once per query head;
//   - split-KV: when B x Hkv blocks cannot fill the SMs, each sequence's keys are split over
//     num_splits blocks whose partial outputs and log-sum-exps are merged exactly by a second kernel;
//   - a kStages-deep cp.async pipeline of 16-byte copies, two or more blocks per SM: 64 KiB or more
//     of K/V in flight per SM, past the latency x bandwidth product (~3 TB/s x ~2 us / 132 SMs).
// The math is the `mma` kernel's (mma.sync, ldmatrix, online softmax in registers); with 16 packed
// rows the 4 warps split the keys of each tile instead of the rows, and merge at the end.
//
// Grid: (num_splits x row blocks, Hkv, B). Block: 4 warps = kWarpsM (rows) x kWarpsN (keys).
#include "attention_common.cuh"
#include "mma_primitives.cuh"
#include "softmax.cuh"

namespace sy_attn {
namespace {

template <int kHeadDim_, int kWarpsM_, int kStages_>
struct DecodeTraits {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kNWarps = 4;
    static constexpr int kNThreads = 32 * kNWarps;
    static constexpr int kWarpsM = kWarpsM_;             // warps over rows: 16 rows each
    static constexpr int kWarpsN = kNWarps / kWarpsM;    // warps over the keys of a tile
    static constexpr int kBlockM = 16 * kWarpsM;         // packed query rows per block
    // 64 keys per tile: 32 KiB of K+V at d = 128 per stage. A page must hold whole tiles (one page
    // lookup per tile), so this is also SY_DECODE_PAGE_MULTIPLE.
    static constexpr int kBlockN = SY_DECODE_PAGE_MULTIPLE;
    static constexpr int kKeysPerWarp = kBlockN / kWarpsN;
    static constexpr int kStages = kStages_;
    static constexpr int kChunks = kHeadDim / 8;
    static constexpr int kSwizzleRows = 8;
    static constexpr int kNTilesS = kKeysPerWarp / 8;
    static constexpr int kKStepsQK = kHeadDim / 16;
    static constexpr int kNTilesO = kHeadDim / 8;
    static constexpr int kKStepsPV = kKeysPerWarp / 16;
    static constexpr int kSmemQ = kBlockM * kHeadDim;     // elements
    static constexpr int kSmemKV = kBlockN * kHeadDim;    // elements, one K or V tile
    // The merge of the kWarpsN warps' partial rows reuses the K/V stages: fp32 acc with rows padded
    // by 8 floats (a half-warp's float2 stores of 4 rows x 4 quads land in distinct banks), then m, l.
    static constexpr int kAccStride = kHeadDim + 8;
    static constexpr int kMergeBytes = (kWarpsN * kBlockM * kAccStride + 2 * kWarpsN * kBlockM) * 4;
    static constexpr int kSmemBytes = 2 * (kSmemQ + 2 * kStages * kSmemKV);
    static_assert(kKeysPerWarp % 16 == 0, "P V steps over k16 slices of a warp's keys");
    static_assert(kMergeBytes <= 2 * 2 * kStages * kSmemKV, "the merge fits in the K/V stages");
    static_assert((kBlockN * kChunks) % kNThreads == 0 && (kNThreads / kChunks) % kSwizzleRows == 0,
                  "load_tile_async: whole passes of rows sharing row % 8");
    static_assert(kSmemBytes <= 227 * 1024, "227 KiB of shared memory per block");
};

// d = 128: 3 stages (96 KiB K/V), two blocks per SM (2 stages, three per SM, for unsplit grids: below);
// d = 64: 4 stages of 16 KiB, three per SM.
// Decode (<= 16 packed rows): 1 x 4 warps, 16 keys per warp per tile; longer chunks: 4 x 1.
#ifndef SY_DECODE_STAGES_D128   // a definition before this point overrides, for the variant sweep only
#define SY_DECODE_STAGES_D128 3
#endif
// Unsplit decode grids (B x Hkv fills the GPU) measured 1.4-2.4 % faster with 2 stages (70 KiB, three
// blocks per SM) than with 3; split grids 1-6 % slower (scripts/decode_variants.py, docs/notes-decode.md).
#ifndef SY_DECODE_STAGES_D128_UNSPLIT
#define SY_DECODE_STAGES_D128_UNSPLIT 2
#endif
#ifndef SY_DECODE_STAGES_D64
#define SY_DECODE_STAGES_D64 4
#endif
template <int kHeadDim, int kWarpsM, bool kUnsplit = false>
using DecodeTraitsFor = DecodeTraits<kHeadDim, kWarpsM, kHeadDim == 128 ? (kUnsplit ? SY_DECODE_STAGES_D128_UNSPLIT
                                                                                    : SY_DECODE_STAGES_D128)
                                                                        : SY_DECODE_STAGES_D64>;

// Programmatic dependent launch (sm_90): the merge kernel is launched while the split blocks still run
// and waits on the device (griddepcontrol.wait) for their completion and memory, instead of the host
// stream's kernel boundary: the merge's launch latency hides behind the splits' tail.
#ifndef SY_DECODE_PDL
#define SY_DECODE_PDL 1
#endif
__device__ __forceinline__ void allow_dependent_launch() {
#if SY_DECODE_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if SY_DECODE_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Per-sequence facts every block of the sequence computes the same way.
__device__ __forceinline__ int seqlen_k_of(const sy_decode_params &p, int b) {
    const int n = p.cache_seqlens ? p.cache_seqlens[b] + p.seqlen_new : p.capacity;
    return max(0, min(n, p.capacity));   // never past the cache, whatever the caller passed
}

// The first element of key row `key` (a tile start) of KV head h: a page lookup per tile.
template <typename T>
__device__ __forceinline__ const T *kv_tile_base(const T *cache, const int64_t strides[3], const sy_decode_params &p,
                                                 int b, int h, int key) {
    int64_t outer, row;
    if (p.block_table) {
        const int page = p.block_table[b * p.block_table_stride + key / p.page_size];
        outer = min(max(page, 0), p.num_pages - 1);
        row = key % p.page_size;
    } else {
        outer = p.cache_batch_idx ? min(max(p.cache_batch_idx[b], 0), p.num_pages - 1) : b;
        row = key;
    }
    return cache + outer * strides[0] + row * strides[1] + h * strides[2];
}

template <class Tr, typename T>
__global__ void __launch_bounds__(Tr::kNThreads)
decode_kernel(const sy_decode_params p) {
    using Mma = MmaOp<T>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sK = sQ + Tr::kSmemQ;
    T *sV = sK + Tr::kStages * Tr::kSmemKV;

    allow_dependent_launch();   // the merge may be scheduled now; it waits for this grid to finish
    const int split = blockIdx.x % p.num_splits, m_block = blockIdx.x / p.num_splits;
    const int h_kv = blockIdx.y, b = blockIdx.z;
    const int group = p.heads_q / p.heads_kv;
    const int rows = group * p.seqlen_q;   // packed rows of (b, h_kv): row = qi * group + head in group
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / Tr::kWarpsN, wn = warp % Tr::kWarpsN;
    const int row0 = m_block * Tr::kBlockM;

    const int seqlen_k = seqlen_k_of(p, b);
    // Bottom-right causal: query qi sees keys < seqlen_k - Nq + qi + 1.
    auto key_limit = [&](int row) {
        return p.is_causal ? min(seqlen_k, seqlen_k - p.seqlen_q + row / group + 1) : seqlen_k;
    };
    const int block_limit = max(0, key_limit(min(row0 + Tr::kBlockM, rows) - 1));
    const int block_min_limit = max(0, key_limit(row0));
    const int n_tiles = ceil_div(block_limit, Tr::kBlockN);
    const int per_split = ceil_div(n_tiles, p.num_splits);
    const int tile_begin = min(n_tiles, split * per_split), tile_end = min(n_tiles, tile_begin + per_split);

    const T *gK = static_cast<const T *>(p.k);
    const T *gV = static_cast<const T *>(p.v);
    auto load_kv = [&](int tile, int stage) {
        const int key0 = tile * Tr::kBlockN;
        const int valid = min(Tr::kBlockN, seqlen_k - key0);   // rows past it zero-filled (V must not be NaN)
        load_tile_async<Tr, Tr::kBlockN>(smem_addr(sK + stage * Tr::kSmemKV), kv_tile_base(gK, p.k_strides, p, b, h_kv, key0),
                                         p.k_strides[1], 0, valid);
        load_tile_async<Tr, Tr::kBlockN>(smem_addr(sV + stage * Tr::kSmemKV), kv_tile_base(gV, p.v_strides, p, b, h_kv, key0),
                                         p.v_strides[1], 0, valid);
    };

    // ---- prologue: the packed Q rows (one cp.async group), then kStages - 1 K/V tiles
    {
        const T *gQ = static_cast<const T *>(p.q) + b * p.q_strides[0];
        for (int i = threadIdx.x; i < Tr::kBlockM * Tr::kChunks; i += Tr::kNThreads) {
            const int r = i / Tr::kChunks, c = i % Tr::kChunks, pr = row0 + r;
            const bool inside = pr < rows;
            const T *src = inside ? gQ + (pr / group) * p.q_strides[1] + (h_kv * group + pr % group) * p.q_strides[2] + c * 8 : gQ;
            cp_async_16(smem_addr(sQ) + r * Tr::kHeadDim * 2 + ((c ^ (r % Tr::kSwizzleRows)) << 4), src, inside ? 16 : 0);
        }
        cp_async_commit();
    }
#pragma unroll
    for (int s = 0; s < Tr::kStages - 1; ++s) {
        if (tile_begin + s < tile_end) load_kv(tile_begin + s, s);
        cp_async_commit();
    }

    const int warp_row0 = wm * 16;
    const uint32_t sQ_lane = lane_chunk_addr<Tr>(smem_addr(sQ), warp_row0 + lane % 16, lane / 16);
    // This warp's keys of a tile start kKeysPerWarp * wn rows in (a multiple of 16: same swizzle).
    const uint32_t sK_lane = lane_chunk_addr<Tr>(smem_addr(sK), (lane % 8) + (lane / 16) * 8, (lane / 8) % 2)
                             + wn * Tr::kKeysPerWarp * Tr::kHeadDim * 2;
    const uint32_t sV_lane = lane_chunk_addr<Tr>(smem_addr(sV), lane % 16, lane / 16) + wn * Tr::kKeysPerWarp * Tr::kHeadDim * 2;
    constexpr int kStageBytes = Tr::kSmemKV * 2;

    cp_async_wait<Tr::kStages - 1>();   // the Q group
    __syncthreads();
    uint32_t rQ[Tr::kKStepsQK][4];
#pragma unroll
    for (int kk = 0; kk < Tr::kKStepsQK; ++kk) ldmatrix_x4(rQ[kk], step_addr(sQ_lane, 2 * kk));

    float acc[1][Tr::kNTilesO][4];
#pragma unroll
    for (int nt = 0; nt < Tr::kNTilesO; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[0][nt][c] = 0.f;
    OnlineSoftmaxFragment<1> softmax;
    const float scale_log2 = p.scale * kLog2e;
    // The two rows this thread holds in the accumulator layout, and their key limits.
    const int my_row = row0 + warp_row0 + lane / 4;
    const int my_limit[2] = {key_limit(my_row), key_limit(my_row + 8)};

    for (int tile = tile_begin; tile < tile_end; ++tile) {
        const int t = tile - tile_begin;
        cp_async_wait<Tr::kStages - 2>();
        __syncthreads();   // tile t landed for every thread; stage (t - 1) is free
        if (tile + Tr::kStages - 1 < tile_end) load_kv(tile + Tr::kStages - 1, (t + Tr::kStages - 1) % Tr::kStages);
        cp_async_commit();
        const uint32_t sKt = sK_lane + (t % Tr::kStages) * kStageBytes;
        const uint32_t sVt = sV_lane + (t % Tr::kStages) * kStageBytes;

        float rS[1][Tr::kNTilesS][4];
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesS; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) rS[0][nt][c] = 0.f;
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsQK; ++kk)
#pragma unroll
            for (int np = 0; np < Tr::kNTilesS / 2; ++np) {
                uint32_t bK[4];
                ldmatrix_x4(bK, step_addr(sKt, 2 * kk) + np * 16 * Tr::kHeadDim * 2);
                Mma::run(rS[0][2 * np], rQ[kk], bK[0], bK[1]);
                Mma::run(rS[0][2 * np + 1], rQ[kk], bK[2], bK[3]);
            }

        const int key0 = tile * Tr::kBlockN;
        if (key0 + Tr::kBlockN > block_min_limit) {   // the ragged end, or the causal edge of some row
            const int col0 = key0 + wn * Tr::kKeysPerWarp + (lane % 4) * 2;
#pragma unroll
            for (int half = 0; half < 2; ++half)
#pragma unroll
                for (int nt = 0; nt < Tr::kNTilesS; ++nt)
#pragma unroll
                    for (int c = 0; c < 2; ++c)
                        if (col0 + nt * 8 + c >= my_limit[half]) rS[0][nt][2 * half + c] = -INFINITY;
        }
        softmax.template rescale<false>(rS, acc, scale_log2);

        uint32_t rP[Tr::kKStepsPV][4];
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
            rP[kk][0] = Mma::pack(rS[0][2 * kk][0], rS[0][2 * kk][1]);
            rP[kk][1] = Mma::pack(rS[0][2 * kk][2], rS[0][2 * kk][3]);
            rP[kk][2] = Mma::pack(rS[0][2 * kk + 1][0], rS[0][2 * kk + 1][1]);
            rP[kk][3] = Mma::pack(rS[0][2 * kk + 1][2], rS[0][2 * kk + 1][3]);
        }
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsPV; ++kk)
#pragma unroll
            for (int dp = 0; dp < Tr::kNTilesO / 2; ++dp) {
                uint32_t bV[4];
                ldmatrix_x4_trans(bV, step_addr(sVt, 2 * dp) + kk * 16 * Tr::kHeadDim * 2);
                Mma::run(acc[0][2 * dp], rP[kk], bV[0], bV[1]);
                Mma::run(acc[0][2 * dp + 1], rP[kk], bV[2], bV[3]);
            }
    }
    cp_async_wait<0>();
    __syncthreads();   // every warp is done with the stages: they hold the merge now

    // ---- merge the kWarpsN warps that share rows: un-normalised acc, raw maxima m, sums l
    float *sAcc = reinterpret_cast<float *>(sK);                       // [kWarpsN][kBlockM][kAccStride]
    float *sM = sAcc + Tr::kWarpsN * Tr::kBlockM * Tr::kAccStride;     // [kWarpsN][kBlockM]
    float *sL = sM + Tr::kWarpsN * Tr::kBlockM;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float l = softmax.l_i[half];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int r = warp_row0 + lane / 4 + half * 8;
        float *dst = sAcc + (wn * Tr::kBlockM + r) * Tr::kAccStride + (lane % 4) * 2;
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesO; ++nt)
            *reinterpret_cast<float2 *>(dst + nt * 8) = make_float2(acc[0][nt][2 * half], acc[0][nt][2 * half + 1]);
        if (lane % 4 == 0) {
            sM[wn * Tr::kBlockM + r] = softmax.m_i[half];
            sL[wn * Tr::kBlockM + r] = l;
        }
    }
    __syncthreads();

    // Each thread finishes 8 columns of a row: O = sum_w acc_w 2^((m_w - M) s) / L; a row with no key
    // (L = 0) gives O = 0 and a log-sum-exp of -inf (the merge kernel weighs such a split by 0).
    for (int i = threadIdx.x; i < Tr::kBlockM * Tr::kChunks; i += Tr::kNThreads) {
        const int r = i / Tr::kChunks, c = i % Tr::kChunks, pr = row0 + r;
        if (pr >= rows) continue;
        float m_max = -INFINITY;
#pragma unroll
        for (int w = 0; w < Tr::kWarpsN; ++w) m_max = fmaxf(m_max, sM[w * Tr::kBlockM + r]);
        const float m_scaled = scaled_max(m_max, scale_log2);
        float l = 0.f, o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int w = 0; w < Tr::kWarpsN; ++w) {
            const float f = fast_exp2(sM[w * Tr::kBlockM + r] * scale_log2 - m_scaled);   // -inf -> 0
            l += sL[w * Tr::kBlockM + r] * f;
            const float4 *src = reinterpret_cast<const float4 *>(sAcc + (w * Tr::kBlockM + r) * Tr::kAccStride + c * 8);
            const float4 lo = src[0], hi = src[1];
            o[0] += f * lo.x; o[1] += f * lo.y; o[2] += f * lo.z; o[3] += f * lo.w;
            o[4] += f * hi.x; o[5] += f * hi.y; o[6] += f * hi.z; o[7] += f * hi.w;
        }
        const float inv_l = l == 0.f ? 0.f : 1.f / l;
        const float lse = l == 0.f ? -INFINITY : m_max * p.scale + logf(l);
        const int qi = pr / group, h = h_kv * group + pr % group;
        const int64_t lse_index = (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + qi;
        if (p.num_splits == 1) {
            uint4 packed;
            packed.x = Mma::pack(o[0] * inv_l, o[1] * inv_l);
            packed.y = Mma::pack(o[2] * inv_l, o[3] * inv_l);
            packed.z = Mma::pack(o[4] * inv_l, o[5] * inv_l);
            packed.w = Mma::pack(o[6] * inv_l, o[7] * inv_l);
            T *dst = static_cast<T *>(p.o) + b * p.o_strides[0] + qi * p.o_strides[1] + h * p.o_strides[2] + c * 8;
            *reinterpret_cast<uint4 *>(dst) = packed;
            if (c == 0) p.lse[lse_index] = lse;
        } else {
            const int64_t part = static_cast<int64_t>(split) * p.batch * p.heads_q * p.seqlen_q + lse_index;
            float4 *dst = reinterpret_cast<float4 *>(p.partial_o + part * Tr::kHeadDim + c * 8);
            dst[0] = make_float4(o[0] * inv_l, o[1] * inv_l, o[2] * inv_l, o[3] * inv_l);
            dst[1] = make_float4(o[4] * inv_l, o[5] * inv_l, o[6] * inv_l, o[7] * inv_l);
            if (c == 0) p.partial_lse[part] = lse;
        }
    }
}

// Merge the splits of one (b, h, qi) row per warp: O = sum_s 2^(lse_s - LSE) O_s, exact (Flash-
// Decoding's reduction). Lane s holds split s's weight (32 splits per pass), handed to the others by
// shuffle, so the partial outputs' loads are independent of each other and of any lse load: the
// compiler issues them back to back, and the merge costs about one L2 round trip per 32 splits.
template <int kHeadDim, typename T>
__global__ void __launch_bounds__(128) merge_splits_kernel(const sy_decode_params p) {
    constexpr int kCols = kHeadDim / 32;
    wait_for_prerequisite_grid();   // every split's partial output written and visible (PDL)
    const int lane = threadIdx.x % 32;
    const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * 4 + threadIdx.x / 32;   // (b, h, qi) flattened
    if (row >= rows) return;
    float m = -INFINITY;
    for (int s = lane; s < p.num_splits; s += 32) m = fmaxf(m, p.partial_lse[s * rows + row]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    const float m_safe = m == -INFINITY ? 0.f : m;
    float o[kCols] = {};
    float sum = 0.f;
    for (int s0 = 0; s0 < p.num_splits; s0 += 32) {
        const int n = min(32, p.num_splits - s0);
        const float w_lane = lane < n ? __expf(p.partial_lse[(s0 + lane) * rows + row] - m_safe) : 0.f;   // empty: 0
        sum += w_lane;
#pragma unroll 8
        for (int i = 0; i < n; ++i) {
            const float w = __shfl_sync(0xffffffffu, w_lane, i);
            const float *src = p.partial_o + ((s0 + i) * rows + row) * kHeadDim + lane * kCols;
            if constexpr (kCols % 4 == 0) {   // d = 128: one float4 per lane
#pragma unroll
                for (int c = 0; c < kCols; c += 4) {
                    const float4 x = *reinterpret_cast<const float4 *>(src + c);
                    o[c] += w * x.x; o[c + 1] += w * x.y; o[c + 2] += w * x.z; o[c + 3] += w * x.w;
                }
            } else {   // d = 64: one float2
#pragma unroll
                for (int c = 0; c < kCols; c += 2) {
                    const float2 x = *reinterpret_cast<const float2 *>(src + c);
                    o[c] += w * x.x; o[c + 1] += w * x.y;
                }
            }
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float inv = sum == 0.f ? 0.f : 1.f / sum;
    const int qi = static_cast<int>(row % p.seqlen_q);
    const int h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
    const int b = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
    T *dst = static_cast<T *>(p.o) + b * p.o_strides[0] + qi * p.o_strides[1] + h * p.o_strides[2] + lane * kCols;
#pragma unroll
    for (int c = 0; c < kCols; c += 2)
        *reinterpret_cast<uint32_t *>(dst + c) = MmaOp<T>::pack(o[c] * inv, o[c + 1] * inv);
    if (lane == 0) p.lse[row] = sum == 0.f ? -INFINITY : m + logf(sum);
}

// Programmatic dependent launch needs compute capability 9.0 (the current device's, asked per launch:
// two cached runtime queries).
bool device_has_pdl() {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major >= 9;
}

template <class Tr, typename T>
int launch(const sy_decode_params &p, cudaStream_t stream) {
    auto kernel = decode_kernel<Tr, T>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    const int rows = p.heads_q / p.heads_kv * p.seqlen_q;
    const int64_t blocks_x = static_cast<int64_t>(ceil_div(rows, Tr::kBlockM)) * p.num_splits;
    if (blocks_x > 0x7fffffff) return kUnsupported;
    kernel<<<dim3(static_cast<unsigned>(blocks_x), p.heads_kv, p.batch), Tr::kNThreads, Tr::kSmemBytes, stream>>>(p);
    if (p.num_splits > 1) {
        const int64_t rows_total = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(static_cast<unsigned>((rows_total + 3) / 4));
        config.blockDim = dim3(128);
        config.stream = stream;
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute[0].val.programmaticStreamSerializationAllowed = 1;
        config.attrs = attribute;
        config.numAttrs = SY_DECODE_PDL && device_has_pdl() ? 1 : 0;
        err = cudaLaunchKernelEx(&config, merge_splits_kernel<Tr::kHeadDim, T>, p);
        if (err != cudaSuccess) return static_cast<int>(err);
    }
    return launch_status();
}

template <int kHeadDim, typename T>
int launch_rows(const sy_decode_params &p, cudaStream_t stream) {
    // Up to 16 packed rows (decode: one token x a GQA group of <= 16) take one m16 block with the
    // warps over the keys; more rows take 64-row blocks with the warps over the rows.
    const int rows = p.heads_q / p.heads_kv * p.seqlen_q;
    if (rows > 16) return launch<DecodeTraitsFor<kHeadDim, 4>, T>(p, stream);
    return p.num_splits == 1 ? launch<DecodeTraitsFor<kHeadDim, 1, true>, T>(p, stream)
                             : launch<DecodeTraitsFor<kHeadDim, 1>, T>(p, stream);
}

template <typename T>
int launch_dtype(const sy_decode_params &p, cudaStream_t stream) {
    return p.head_dim == 64 ? launch_rows<64, T>(p, stream) : launch_rows<128, T>(p, stream);
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_decode_fwd(const sy_decode_params *params, void *stream) {
    using namespace sy_attn;
    if (!params) return kInvalid;
    const sy_decode_params &p = *params;
    if (!p.q || !p.k || !p.v || !p.o || !p.lse) return kInvalid;
    if (p.batch < 1 || p.batch > 65535 || p.heads_kv < 1 || p.heads_kv > 65535 || p.heads_q % p.heads_kv != 0)
        return kInvalid;
    if (p.seqlen_q < 1 || p.capacity < 0 || p.seqlen_new < 0 || p.num_splits < 1) return kInvalid;
    if (p.head_dim != 64 && p.head_dim != 128) return kUnsupported;
    if (p.dtype != SY_ATTN_F16 && p.dtype != SY_ATTN_BF16) return kUnsupported;
    if (p.block_table && (p.page_size < 1 || p.page_size % SY_DECODE_PAGE_MULTIPLE != 0)) return kInvalid;
    if ((p.block_table || p.cache_batch_idx) && p.num_pages < 1) return kInvalid;
    // The partial outputs are written as float4: a misaligned workspace would fault, not just slow down.
    if (p.num_splits > 1 && (!p.partial_o || !p.partial_lse || reinterpret_cast<uintptr_t>(p.partial_o) % 16 != 0))
        return kInvalid;
    if (!aligned16(p.q, p.q_strides) || !aligned16(p.k, p.k_strides) || !aligned16(p.v, p.v_strides) ||
        !aligned16(p.o, p.o_strides))
        return kInvalid;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    return p.dtype == SY_ATTN_BF16 ? launch_dtype<__nv_bfloat16>(p, s) : launch_dtype<__half>(p, s);
}
