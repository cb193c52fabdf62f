// `mma`: FlashAttention-2 class forward attention on tensor cores (fp16/bf16 in, fp32 accumulate).
//
// Hardware fact exploited: mma.sync m16n8k16 runs on the tensor cores, an order of magnitude above
// the FP32 FMA rate, so the kernel keeps them fed: K/V tiles arrive by cp.async while the previous
// tile is computed on, ldmatrix moves operands from a swizzled (bank-conflict-free) shared memory,
// and P never leaves the registers (the accumulator layout of S = Q K^T is exactly the A-operand
// layout of P V).
//
// Grid: (query blocks, query heads, batch). Block: kNWarps warps, each owning kMAtoms x 16 rows.
#include "attention_band.cuh"
#include "attention_common.cuh"
#include "attention_mask.cuh"   // kBandMask: attn_mask tile by tile
#include "attention_dropout.cuh"   // dropout: Philox keep-masks on P's fragments
#include "kernel_traits.cuh"
#include "mma_primitives.cuh"
#include "softmax.cuh"

namespace sy_attn {
namespace {

// kDropout: p.dropout_p (attention_dropout.cuh), instantiated with every band mode and kBandMask.
template <class Tr, typename T, int kMode, bool kDropout = false>
__global__ void __launch_bounds__(Tr::kNThreads, Tr::kMinBlocksPerSm)
mma_fwd_kernel(const sy_attn_params p, const Band band) {
    using Mma = MmaOp<T>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);                   // [kBlockM][kHeadDim], swizzled
    T *sK = sQ + Tr::kSmemQ;                                    // [kStages][kBlockN][kHeadDim]
    T *sV = sK + Tr::kStages * Tr::kSmemKV;                     // [kStages][kBlockN][kHeadDim]

    // Causal: the last query blocks do the most key blocks; launching them first keeps the tail of
    // the grid made of short blocks, so SMs finish together.
    const int m_block = kMode != kBandNone ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int m0 = m_block * Tr::kBlockM;
    const int warp_row0 = warp * Tr::kRowsPerWarp;

    const T *gQ = head_base(static_cast<const T *>(p.q), p.q_strides, b, h);
    const T *gK = head_base(static_cast<const T *>(p.k), p.k_strides, b, h_kv);
    const T *gV = head_base(static_cast<const T *>(p.v), p.v_strides, b, h_kv);

    // Key blocks this query block needs (attention_band.cuh): all of them, or those the band reaches
    // (causal: up to its last row's diagonal; local: from its first row's window start). Blocks in
    // [r.unmasked_begin, r.unmasked_end) need no mask at all: every key exists and every row sees it.
    // No block at all (no row sees a key): acc and l_i stay 0, rows give 0 and an LSE of -inf.
    const int last_row = min(m0 + Tr::kBlockM, p.seqlen_q) - 1;
    // kBandMask: j counts the entries of this query block's list (attention_mask.cuh), key_row0(j) is
    // the key block it names; otherwise j is the key block itself.
    const MaskWalk walk = kMode == kBandMask ? mask_walk(p, b, h, m_block) : MaskWalk{nullptr, 0};
    const BlockRange r = kMode == kBandMask ? BlockRange{0, walk.count, 0, 0}
                                            : band_blocks_in<kMode>(m0, last_row, p.seqlen_k, Tr::kBlockN, band);
    const int n_total = r.end;
    auto key_row0 = [&](int j) { return (kMode == kBandMask ? MaskWalk::block(walk.entry(j)) : j) * Tr::kBlockN; };

    // ---- prologue: Q, then the first kStages - 1 K/V tiles, each its own cp.async group
    load_tile_async<Tr, Tr::kBlockM>(smem_addr(sQ), gQ, p.q_strides[2], m0, p.seqlen_q);
    cp_async_commit();
#pragma unroll
    // Block j lives in stage j % kStages, whatever block the band starts at.
    for (int s = 0; s < Tr::kStages - 1; ++s) {
        const int j = r.begin + s, stage = j % Tr::kStages;
        if (j < n_total) {
            load_tile_async<Tr, Tr::kBlockN>(smem_addr(sK + stage * Tr::kSmemKV), gK, p.k_strides[2], key_row0(j), p.seqlen_k);
            load_tile_async<Tr, Tr::kBlockN>(smem_addr(sV + stage * Tr::kSmemKV), gV, p.v_strides[2], key_row0(j), p.seqlen_k);
        }
        cp_async_commit();   // empty groups keep the group count per tile uniform
    }

    // Q (A operand): ldmatrix matrices 0..3 = (rows 0-7, 8-15) x (chunk 2kk, 2kk+1): lane l
    // addresses row l % 16 of its m16 block, chunk 2kk + l / 16.
    const uint32_t sQ_lane = lane_chunk_addr<Tr>(smem_addr(sQ), warp_row0 + lane % 16, lane / 16);
    auto load_q_frag = [&](uint32_t(&a)[4], int ma, int kk) {
        ldmatrix_x4(a, step_addr(sQ_lane, 2 * kk) + ma * 16 * Tr::kHeadDim * 2);
    };
    // K (B operand of Q K^T, two n8 tiles per ldmatrix): matrices (keys 0-7, 8-15 of a 16-key pair)
    // x (chunk 2kk, 2kk+1) in the order b0, b1 of tile 0, b0, b1 of tile 1.
    const uint32_t sK_lane = lane_chunk_addr<Tr>(smem_addr(sK), (lane % 8) + (lane / 16) * 8, (lane / 8) % 2);
    // V (B operand of P V, transposed): matrices (keys 0-7, 8-15) x (chunk 2dp, 2dp+1).
    const uint32_t sV_lane = lane_chunk_addr<Tr>(smem_addr(sV), lane % 16, lane / 16);
    constexpr int kStageBytes = Tr::kSmemKV * 2;

    uint32_t rQ[Tr::kQInRegs ? Tr::kMAtoms : 1][Tr::kQInRegs ? Tr::kKStepsQK : 1][4];
    if constexpr (Tr::kQInRegs) {
        cp_async_wait<Tr::kStages - 1>();   // the Q group only
        __syncthreads();
#pragma unroll
        for (int ma = 0; ma < Tr::kMAtoms; ++ma)
#pragma unroll
            for (int kk = 0; kk < Tr::kKStepsQK; ++kk) load_q_frag(rQ[ma][kk], ma, kk);
    }

    float acc[Tr::kMAtoms][Tr::kNTilesO][4];   // O rows of this warp, m16n8 accumulator fragments
#pragma unroll
    for (int ma = 0; ma < Tr::kMAtoms; ++ma)
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesO; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[ma][nt][c] = 0.f;
    OnlineSoftmaxFragment<Tr::kMAtoms> softmax;
    const float scale_log2 = p.scale * kLog2e;

    // One key block: wait for its tile, prefetch the tile kStages - 1 ahead into the stage freed by
    // the previous block, S = Q K^T, mask (if kMask), online softmax, acc += P V.
    auto key_block = [&](int j, auto mask_tag) {
        constexpr bool kMask = decltype(mask_tag)::value;
        cp_async_wait<Tr::kStages - 2>();   // tile j has landed (later tiles may be in flight)
        __syncthreads();                     // ... for every thread's copies, and stage (j-1) is free
        {
            const int jn = j + Tr::kStages - 1;
            const int stage = jn % Tr::kStages;
            if (jn < n_total) {
                load_tile_async<Tr, Tr::kBlockN>(smem_addr(sK + stage * Tr::kSmemKV), gK, p.k_strides[2], key_row0(jn), p.seqlen_k);
                load_tile_async<Tr, Tr::kBlockN>(smem_addr(sV + stage * Tr::kSmemKV), gV, p.v_strides[2], key_row0(jn), p.seqlen_k);
            }
            cp_async_commit();
        }
        const uint32_t sKj_lane = sK_lane + (j % Tr::kStages) * kStageBytes;   // tile j: [kBlockN][kHeadDim]
        const uint32_t sVj_lane = sV_lane + (j % Tr::kStages) * kStageBytes;

        // Dropout: the block's keep bits, drawn before S exists (Philox's temporaries never meet S's registers)
        // or after P is packed: ptxas -v (sm_80, sm_90a) spilled least drawing early except for the 128-row
        // d = 128 tile with a band (28 bytes late, 100 early; its no-dropout build spills 56 already).
        constexpr bool kDrawEarly = !(Tr::kHeadDim == 128 && kMode != kBandNone);
        [[maybe_unused]] uint4 keep[Tr::kMAtoms][kDropout ? Tr::kKStepsPV / 2 : 1];   // dropout only
        if constexpr (kDropout && kDrawEarly) {
#pragma unroll
            for (int ma = 0; ma < Tr::kMAtoms; ++ma)
                keep_rows_all(keep[ma], make_dropout(p, b, h), m0 + warp_row0 + ma * 16 + lane / 4, key_row0(j), lane);
        }

        // S = Q K^T: [kMAtoms][kNTilesS] m16n8 fragments of this warp's rows x the block's keys.
        float rS[Tr::kMAtoms][Tr::kNTilesS][4];
#pragma unroll
        for (int ma = 0; ma < Tr::kMAtoms; ++ma)
#pragma unroll
            for (int nt = 0; nt < Tr::kNTilesS; ++nt)
#pragma unroll
                for (int c = 0; c < 4; ++c) rS[ma][nt][c] = 0.f;
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsQK; ++kk) {
            uint32_t a[Tr::kMAtoms][4];
#pragma unroll
            for (int ma = 0; ma < Tr::kMAtoms; ++ma) {
                if constexpr (Tr::kQInRegs) {
#pragma unroll
                    for (int c = 0; c < 4; ++c) a[ma][c] = rQ[ma][kk][c];
                } else {
                    load_q_frag(a[ma], ma, kk);
                }
            }
#pragma unroll
            for (int np = 0; np < Tr::kNTilesS / 2; ++np) {
                uint32_t bK[4];   // b0, b1 of n8 tiles 2np and 2np + 1
                ldmatrix_x4(bK, step_addr(sKj_lane, 2 * kk) + np * 16 * Tr::kHeadDim * 2);
#pragma unroll
                for (int ma = 0; ma < Tr::kMAtoms; ++ma) {
                    Mma::run(rS[ma][2 * np], a[ma], bK[0], bK[1]);
                    Mma::run(rS[ma][2 * np + 1], a[ma], bK[2], bK[3]);
                }
            }
        }

        if constexpr (kMask && kMode == kBandMask) {   // attention_mask.cuh: the list entry's tile
            const int col0 = key_row0(j) + (lane % 4) * 2, row0 = m0 + warp_row0 + lane / 4;
            const MaskTile t = mask_tile(p, b, h, walk.entry(j));
#pragma unroll
            for (int ma = 0; ma < Tr::kMAtoms; ++ma)
#pragma unroll
                for (int half = 0; half < 2; ++half)
#pragma unroll
                    for (int nt = 0; nt < Tr::kNTilesS; ++nt)
#pragma unroll
                        for (int c = 0; c < 2; ++c) {
                            float &s = rS[ma][nt][2 * half + c];
                            s = t.score(s, row0 + ma * 16 + half * 8, col0 + nt * 8 + c, band);
                        }
        } else if constexpr (kMask) {
            // Thread (lane) holds rows lane/4 (+8) and columns 2 (lane%4) (+1) of every n8 tile; a
            // row keeps keys below min(seqlen_k, row + band.hi + 1) (causal) and (local) from
            // row + band.lo, so one bound per row (two) suffices.
            const int col0 = j * Tr::kBlockN + (lane % 4) * 2;
#pragma unroll
            for (int ma = 0; ma < Tr::kMAtoms; ++ma)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int row = m0 + warp_row0 + ma * 16 + lane / 4 + half * 8;
                    const int limit = (kMode != kBandNone ? min(p.seqlen_k, row + band.hi + 1) : p.seqlen_k) - col0;
                    const int start = row + band.lo - col0;   // kBandLocal only
#pragma unroll
                    for (int nt = 0; nt < Tr::kNTilesS; ++nt)
#pragma unroll
                        for (int c = 0; c < 2; ++c)
                            if (nt * 8 + c >= limit || (kMode == kBandLocal && nt * 8 + c < start))
                                rS[ma][nt][2 * half + c] = -INFINITY;
                }
        }

        softmax.template rescale<Tr::kSkipUnitAlpha>(rS, acc, scale_log2);

        // P to 16 bits, all at once: rS (fp32) dies here, so the P V loop below holds half the
        // registers. P's A fragment for k16 step kk is S tiles 2kk and 2kk+1: (row g, keys 2t..) =
        // tile 2kk regs 0,1; (row g+8) = regs 2,3; keys +8 = tile 2kk+1. No shuffle, no smem.
        uint32_t rP[Tr::kMAtoms][Tr::kKStepsPV][4];
#pragma unroll
        for (int ma = 0; ma < Tr::kMAtoms; ++ma)
#pragma unroll
            for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
                rP[ma][kk][0] = Mma::pack(rS[ma][2 * kk][0], rS[ma][2 * kk][1]);
                rP[ma][kk][1] = Mma::pack(rS[ma][2 * kk][2], rS[ma][2 * kk][3]);
                rP[ma][kk][2] = Mma::pack(rS[ma][2 * kk + 1][0], rS[ma][2 * kk + 1][1]);
                rP[ma][kk][3] = Mma::pack(rS[ma][2 * kk + 1][2], rS[ma][2 * kk + 1][3]);
            }
        if constexpr (kDropout) {   // after the softmax summed P: l_i and the LSE are the undropped ones
#pragma unroll
            for (int ma = 0; ma < Tr::kMAtoms; ++ma) {
                if constexpr (!kDrawEarly)
                    keep_rows_all(keep[ma], make_dropout(p, b, h), m0 + warp_row0 + ma * 16 + lane / 4, key_row0(j), lane);
                dropout_rows_apply(rP[ma], keep[ma]);
            }
        }

        // acc += P V
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
#pragma unroll
            for (int dp = 0; dp < Tr::kNTilesO / 2; ++dp) {
                uint32_t bV[4];   // b0, b1 of d n8 tiles 2dp and 2dp + 1
                ldmatrix_x4_trans(bV, step_addr(sVj_lane, 2 * dp) + kk * 16 * Tr::kHeadDim * 2);
#pragma unroll
                for (int ma = 0; ma < Tr::kMAtoms; ++ma) {
                    Mma::run(acc[ma][2 * dp], rP[ma][kk], bV[0], bV[1]);
                    Mma::run(acc[ma][2 * dp + 1], rP[ma][kk], bV[2], bV[3]);
                }
            }
        }
    };

    // Masked and unmasked key blocks run as separate loops: the mask costs a compare and a select per
    // score plus the index registers, and only the band's edges (the causal diagonal, a window's
    // start) and the ragged last block (N % kBlockN) need it: at N = 4096 causal that is 2 of up to
    // 64 blocks per query block.
    int j = r.begin;
    if constexpr (kMode == kBandMask) {   // the list: a full block runs unmasked unless it holds the ragged end
        for (; j < n_total; ++j) {
            const int e = walk.entry(j);
            if (MaskWalk::cls(e) == kTileFull && (MaskWalk::block(e) + 1) * Tr::kBlockN <= p.seqlen_k)
                key_block(j, std::integral_constant<bool, false>{});
            else
                key_block(j, std::integral_constant<bool, true>{});
        }
    }
    if constexpr (kMode == kBandLocal)
        for (; j < r.unmasked_begin; ++j) key_block(j, std::integral_constant<bool, true>{});
    for (; j < r.unmasked_end; ++j) key_block(j, std::integral_constant<bool, false>{});
    for (; j < n_total; ++j) key_block(j, std::integral_constant<bool, true>{});
    cp_async_wait<0>();   // no copy may still target shared memory when the block exits

    float lse[2 * Tr::kMAtoms];
    softmax.finalize(acc, p.scale, lse);
    if constexpr (kDropout) dropout_scale_acc(acc, 1.f / (1.f - p.dropout_p));

    // Epilogue: rows at or past seqlen_q were computed on zero-filled Q and are not stored.
    T *gO = head_base(static_cast<T *>(p.o), p.o_strides, b, h);
    float *gLse = p.lse + (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q;
#pragma unroll
    for (int ma = 0; ma < Tr::kMAtoms; ++ma)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = m0 + warp_row0 + ma * 16 + lane / 4 + half * 8;
            if (row >= p.seqlen_q) continue;
            T *gRow = gO + row * p.o_strides[2];
#pragma unroll
            for (int nt = 0; nt < Tr::kNTilesO; ++nt) {
                const uint32_t packed = Mma::pack(acc[ma][nt][2 * half], acc[ma][nt][2 * half + 1]);
                *reinterpret_cast<uint32_t *>(gRow + nt * 8 + (lane % 4) * 2) = packed;
            }
            if (lane % 4 == 0) gLse[row] = lse[2 * ma + half];
        }
}

template <class Tr, typename T, int kMode, bool kDropout = false>
int launch(const sy_attn_params &p, Band band, cudaStream_t stream) {
    auto kernel = mma_fwd_kernel<Tr, T, kMode, kDropout>;
    // Above 48 KiB a block's dynamic shared memory must be opted into, per kernel.
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    dim3 grid(ceil_div(p.seqlen_q, Tr::kBlockM), p.heads_q, p.batch);
    kernel<<<grid, Tr::kNThreads, Tr::kSmemBytes, stream>>>(p, band);
    return launch_status();
}

// d = 128 takes the 128-row causal tile for any band (MmaTraitsD128Causal: the 256-row tile leaves more
// of the block idle on the band's edges) and the 256-row tile without one.
template <class Tr, class TrBand, class TrMask, typename T>
int launch_band(const sy_attn_params &p, cudaStream_t stream) {
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode);
    if (p.mask_lists) {   // attn_mask tile by tile (attention_mask.cuh), with the band in its partial tiles, dropout or not
        if (!check_mask(p, TrMask::kBlockM, TrMask::kBlockN)) return kInvalid;
        return p.dropout_p > 0.f ? launch<TrMask, T, kBandMask, true>(p, band, stream) : launch<TrMask, T, kBandMask>(p, band, stream);
    }
    if (p.dropout_p > 0.f) {   // dropout: every band mode (the keep bits do not depend on it)
        // A window on the mask's 64 x 64 tiles (Q in registers, S 32 registers): on the band's 128-row tiles its
        // two bounds beside Philox spilled 28-164 bytes (ptxas -v, sm_80 / sm_90a, d 64 / 128); 0 here.
        if (mode == kBandLocal) return launch<TrMask, T, kBandLocal, true>(p, band, stream);
        return mode == kBandCausal ? launch<TrBand, T, kBandCausal, true>(p, band, stream)
                                   : launch<Tr, T, kBandNone, true>(p, band, stream);
    }
    if (mode == kBandLocal) return launch<TrBand, T, kBandLocal>(p, band, stream);
    return mode == kBandCausal ? launch<TrBand, T, kBandCausal>(p, band, stream) : launch<Tr, T, kBandNone>(p, band, stream);
}

template <typename T>
int launch_dtype(const sy_attn_params &p, cudaStream_t stream) {
    if (p.head_dim == 64) return launch_band<MmaTraitsD64, MmaTraitsD64, MmaTraitsD64Mask, T>(p, stream);
    return launch_band<MmaTraitsD128, MmaTraitsD128Causal, MmaTraitsD128Mask, T>(p, stream);
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_mma_fwd(const sy_attn_params *params, void *stream) {
    using namespace sy_attn;
    int status = check_params(params);
    if (status != kOk) return status;
    const sy_attn_params &p = *params;
    if (p.head_dim != 64 && p.head_dim != 128) return kUnsupported;
    if (p.dtype == SY_ATTN_F32 || (p.mask != nullptr && !p.mask_lists)) return kUnsupported;
    if (!check_band(p.has_window, p.window_left, p.window_right, p.seqlen_q, p.seqlen_k)) return kInvalid;
    if (!aligned16(p.q, p.q_strides) || !aligned16(p.k, p.k_strides) || !aligned16(p.v, p.v_strides))
        return kInvalid;
    if (reinterpret_cast<uintptr_t>(p.o) % 4 != 0 || p.o_strides[2] % 2 != 0) return kInvalid;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    return p.dtype == SY_ATTN_BF16 ? launch_dtype<__nv_bfloat16>(p, s) : launch_dtype<__half>(p, s);
}
