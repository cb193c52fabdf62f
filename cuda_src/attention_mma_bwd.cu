// `mma` backward: FlashAttention-2's backward on tensor cores (fp16/bf16 in, fp32 accumulate).
//
// Hardware fact exploited: the backward is five GEMMs per tile (S, dP, dV, dK, dQ), so it runs at
// the speed of mma.sync m16n8k16 only if operands come from swizzled shared memory by ldmatrix and
// the N x N tiles P and dS stay in registers: computing S and dP transposed (keys as rows) makes their
// accumulator fragments the A operands of dV += P^T dO and dK += dS^T Q with no data movement.
//
// Kernels per call (kernel_traits.cuh, MmaBwdTraits, has the tiles and why):
//   preprocess   D = rowsum(dO o O) and LSE * log2(e), padded rows: P = 0 there (attention_bwd_common.cuh)
//   dkdv         grid (key blocks, query heads, batch): K/V-block outer loop over query tiles,
//                dV += P^T dO, dK += dS^T Q, and (atomic mode) dq_accum += dS K with fp32 atomics
//   dq           deterministic mode (which the Python layer also picks for short key sequences):
//                grid (query blocks, ...), dQ = dS K over the key blocks in order, no atomics
//   reduce       dq_accum * scale -> dq (atomic mode); dK, dV summed over a GQA group (Hq != Hkv)
// with P = exp2(S * scale * log2(e) - LSE * log2(e)) and dS = P o (dP - D).
// d = 256 (MmaBwdDkdvTraitsD256): a warp's dK and dV over all of d would need 256 accumulator registers,
// so two warps share each 16 keys and own half the columns each (kColSplits); one computes S^T, the other
// dP^T, and P^T, dS^T cross through shared memory. Dense and causal only (launch_d256), on GPUs granting
// a block 217 KiB of shared memory.
#include <climits>

#include "attention_band.cuh"
#include "attention_bwd_common.cuh"
#include "attention_mask.cuh"   // kBandMask: attn_mask tile by tile
#include "attention_dropout.cuh"   // dropout: the forward's keep-mask, regenerated
#include "kernel_traits.cuh"
#include "mma_primitives.cuh"
#include "softmax.cuh"

namespace sy_attn {
namespace {

// Accumulator fragments of one m16 x (kNTiles * 8) tile, packed to 16-bit A fragments of the next
// product (k16 step kk is n8 tiles 2kk and 2kk + 1): the forward's P -> P V conversion, no shuffle.
template <typename T, int kNTiles>
__device__ __forceinline__ void pack_a(uint32_t (&a)[kNTiles / 2][4], const float (&acc)[kNTiles][4]) {
    using Mma = MmaOp<T>;
#pragma unroll
    for (int kk = 0; kk < kNTiles / 2; ++kk) {
        a[kk][0] = Mma::pack(acc[2 * kk][0], acc[2 * kk][1]);
        a[kk][1] = Mma::pack(acc[2 * kk][2], acc[2 * kk][3]);
        a[kk][2] = Mma::pack(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
        a[kk][3] = Mma::pack(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
    }
}

template <int kNTiles>
__device__ __forceinline__ void zero(float (&acc)[kNTiles][4]) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[nt][c] = 0.f;
}

// acc (m16 x kNTiles*8) += A B^T over d, both operands [rows][kHeadDim] swizzled tiles: A's 16 rows
// at a_lane (lane_chunk_addr of row lane % 16, chunk lane / 16), B's rows at b_lane (row
// lane % 8 + (lane / 16) * 8, chunk (lane / 8) % 2): ldmatrix x4 gives two n8 tiles of B.
template <class Tr, typename T, int kNTiles>
__device__ __forceinline__ void gemm_abt(float (&acc)[kNTiles][4], uint32_t a_lane, uint32_t b_lane) {
#pragma unroll
    for (int kk = 0; kk < Tr::kKStepsD; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, step_addr(a_lane, 2 * kk));
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, step_addr(b_lane, 2 * kk) + np * 16 * Tr::kRowBytes);
            MmaOp<T>::run(acc[2 * np], a, b[0], b[1]);
            MmaOp<T>::run(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// acc (m16 x kNTiles*8) += A B with A in registers (kKSteps k16 fragments) and B a [k][kHeadDim]
// swizzled tile read transposed: b_lane is lane_chunk_addr of row lane % 16, chunk lane / 16;
// chunk0 (even) is the first of B's column chunks that acc covers.
template <class Tr, typename T, int kNTiles, int kKSteps>
__device__ __forceinline__ void gemm_ab(float (&acc)[kNTiles][4], const uint32_t (&a)[kKSteps][4], uint32_t b_lane,
                                        int chunk0 = 0) {
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
        for (int dp = 0; dp < kNTiles / 2; ++dp) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, step_addr(b_lane, chunk0 + 2 * dp) + kk * 16 * Tr::kRowBytes);
            MmaOp<T>::run(acc[2 * dp], a[kk], b[0], b[1]);
            MmaOp<T>::run(acc[2 * dp + 1], a[kk], b[2], b[3]);
        }
    }
}

// A named barrier of `threads` threads (ids 1..: __syncthreads takes 0), with the memory ordering of bar.sync.
__device__ __forceinline__ void pair_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- dkdv: the K/V-block outer loop ------------------------------------------------------------------------
// kDropout: p.dropout_p (attention_dropout.cuh): dV += (P o Z)^T dO, dS = P o (Z o dP / (1 - p) - D).
template <class Tr, typename T, int kMode, bool kAtomicDq, bool kDropout = false>
__global__ void __launch_bounds__(Tr::kNThreads, Tr::kMinBlocksPerSm)
dkdv_kernel(const sy_attn_bwd_params p, int rows_per_head, const Band band) {
    static_assert(Tr::kBlockN == 16 * Tr::kKeyWarps, "warp w owns keys 16 (w % kKeyWarps) .. + 15");
    static_assert(Tr::kBlockM * 2 == 128, "sdS rows are one 128-byte line: 8 chunks, the swizzle's period");
    static_assert(Tr::kDkdvSmemBytes <= 227 * 1024, "sm_90 gives a block at most 227 KiB of shared memory");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sK = reinterpret_cast<T *>(smem_raw);                  // [kBlockN][d]
    T *sV = sK + Tr::kBlockN * Tr::kHeadDim;                  // [kBlockN][d]
    T *sQ = sV + Tr::kBlockN * Tr::kHeadDim;                  // [kStages][kBlockM][d]
    T *sdO = sQ + Tr::kStages * Tr::kBlockM * Tr::kHeadDim;   // [kStages][kBlockM][d]
    T *sdS = sdO + Tr::kStages * Tr::kBlockM * Tr::kHeadDim;  // [kBlockN][kBlockM]: dS^T, one 128-byte line per key
    float *sLse = reinterpret_cast<float *>(sdS + Tr::kBlockN * Tr::kBlockM);   // [kStages][kBlockM], log2 units
    float *sD = sLse + Tr::kStages * Tr::kBlockM;                                // [kStages][kBlockM]
    // d = 256: per key group, P^T and dS^T of a slice as kPairFrags x 32 lanes of 16 bytes (the warp pair's exchange).
    constexpr int kPairFrags = Tr::kNTilesSlice / 2;
    uint4 *pair_x = reinterpret_cast<uint4 *>(sD + Tr::kStages * Tr::kBlockM);
    static_assert(Tr::kColSplits == 1 || (Tr::kColSplits == 2 && !kDropout && kMode != kBandMask),
                  "the warp-pair split has no dropout or mask path");
    constexpr int kStageBytes = Tr::kBlockM * Tr::kRowBytes;

    const int n_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // This warp's 16 keys and its columns of dK, dV (d = 256: two warps per keys, kNTilesDkv n8 tiles each).
    // (Compile-time 0 and warp for one split: a runtime 0 cost d = 128's causal dropout kernel a 16-byte spill.)
    const int key_warp = Tr::kColSplits == 1 ? warp : warp % Tr::kKeyWarps;
    const int dkv_col0 = Tr::kColSplits == 1 ? 0 : (warp / Tr::kKeyWarps) * Tr::kNTilesDkv * 8;
    const int n0 = n_block * Tr::kBlockN;

    const T *gQ = head_base(static_cast<const T *>(p.q), p.q_strides, b, h);
    const T *gdO = head_base(static_cast<const T *>(p.dout), p.dout_strides, b, h);
    const float *gLse = p.lse_log2 + bwd_row_index(p, b, h, 0, rows_per_head);
    const float *gD = p.delta + bwd_row_index(p, b, h, 0, rows_per_head);

    // Row i sees key j iff j - hi <= i <= j - lo (the band transposed, attention_band.cuh): query tiles
    // outside [m_first, m_total) see none of these keys; tiles in [unmasked_begin, unmasked_end) see
    // them all (causal: every row at or below the block's last key) and need no mask.
    // kBandMask: the key block's list of query tiles (attention_mask.cuh); m counts its entries and
    // query_block(m) is the tile an entry names.
    const MaskWalk walk = kMode == kBandMask ? mask_walk(p, b, h, n_block) : MaskWalk{nullptr, 0};
    const BlockRange queries = kMode == kBandMask ? BlockRange{0, walk.count, 0, 0}
        : band_blocks_in<kMode>(n0, min(n0 + Tr::kBlockN, p.seqlen_k) - 1, p.seqlen_q, Tr::kBlockM, Band{-band.hi, -band.lo});
    const int m_first = queries.begin;
    const int m_total = queries.end;
    auto query_block = [&](int m) { return kMode == kBandMask ? MaskWalk::block(walk.entry(m)) : m; };
    const bool ragged_keys = n0 + Tr::kBlockN > p.seqlen_k;

    // One query tile's Q, dO (zero-filled past seqlen_q) and its padded LSE, D rows: one cp.async group.
    auto load_query_tile = [&](int m_block, int stage) {
        const int m0 = m_block * Tr::kBlockM;
        load_tile_async<Tr, Tr::kBlockM>(smem_addr(sQ) + stage * kStageBytes, gQ, p.q_strides[2], m0, p.seqlen_q);
        load_tile_async<Tr, Tr::kBlockM>(smem_addr(sdO) + stage * kStageBytes, gdO, p.dout_strides[2], m0, p.seqlen_q);
        constexpr int kVecChunks = Tr::kBlockM / 4;   // 16-byte chunks of one row vector
        static_assert(2 * kVecChunks <= Tr::kNThreads, "one chunk per thread");
        if (threadIdx.x < 2 * kVecChunks) {            // rows_per_head is a multiple of kBlockM: no bounds
            const int vec = threadIdx.x / kVecChunks, chunk = threadIdx.x % kVecChunks;
            const float *src = (vec == 0 ? gLse : gD) + m0 + chunk * 4;
            float *dst = (vec == 0 ? sLse : sD) + stage * Tr::kBlockM + chunk * 4;
            cp_async_16(smem_addr(dst), src, 16);
        }
        cp_async_commit();
    };

    load_tile_async<Tr, Tr::kBlockN>(smem_addr(sK), head_base(static_cast<const T *>(p.k), p.k_strides, b, h_kv),
                                     p.k_strides[2], n0, p.seqlen_k);
    load_tile_async<Tr, Tr::kBlockN>(smem_addr(sV), head_base(static_cast<const T *>(p.v), p.v_strides, b, h_kv),
                                     p.v_strides[2], n0, p.seqlen_k);
    cp_async_commit();
    if (m_first < m_total) load_query_tile(query_block(m_first), 0);

    // Lane addresses (mma_primitives.cuh): K and V as A operands (this warp's 16 keys), Q and dO as
    // B operands of S^T, dP^T (non-transposed) and of dK, dV (transposed), K of dQ (transposed).
    const uint32_t sK_a = lane_chunk_addr<Tr>(smem_addr(sK), key_warp * 16 + lane % 16, lane / 16);
    const uint32_t sV_a = lane_chunk_addr<Tr>(smem_addr(sV), key_warp * 16 + lane % 16, lane / 16);
    const uint32_t sQ_b = lane_chunk_addr<Tr>(smem_addr(sQ), lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
    const uint32_t sdO_b = lane_chunk_addr<Tr>(smem_addr(sdO), lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
    const uint32_t sQ_bt = lane_chunk_addr<Tr>(smem_addr(sQ), lane % 16, lane / 16);
    const uint32_t sdO_bt = lane_chunk_addr<Tr>(smem_addr(sdO), lane % 16, lane / 16);
    const uint32_t sK_bt = lane_chunk_addr<Tr>(smem_addr(sK), lane % 16, lane / 16);
    // dS^T tile: key rows of kBlockM queries = 8 chunks, chunk c of row r at c ^ (r % 8). Warp w adds
    // dQ of query rows dq_row0 .. + 15, columns dq_col0 .. + kDqCols - 1. The A operand (k = keys) is
    // read transposed: matrix i = lane / 8 holds keys (i / 2) * 8 .. + 7 at query chunk dq_row0 / 8 + i % 2.
    constexpr int kDsRowBytes = Tr::kBlockM * 2;
    const int dq_row0 = (warp % Tr::kDqRowBlocks) * 16, dq_col0 = (warp / Tr::kDqRowBlocks) * Tr::kDqCols;
    const int ds_row = lane % 8 + (lane / 16) * 8;
    const uint32_t sdS_a = smem_addr(sdS) + ds_row * kDsRowBytes + (((dq_row0 / 8 + (lane / 8) % 2) ^ (ds_row % 8)) << 4);

    float dK[Tr::kNTilesDkv][4], dV[Tr::kNTilesDkv][4];   // this warp's 16 keys x its kNTilesDkv * 8 columns
    zero(dK);
    zero(dV);
    const float scale_log2 = p.scale * kLog2e;
    const int key_row0 = n0 + key_warp * 16;   // this lane's keys: key_row0 + Fragment::row(reg, lane)

    // One query tile: S^T, P^T, dV, dP^T, dS^T, dK over kSlicesM slices of kSliceM queries (the
    // products over the queries add up slice by slice), then dS^T's dQ contribution.
    auto query_tile = [&](int m_block, int stage, auto mask_tag, int entry) {
        constexpr bool kMask = decltype(mask_tag)::value;
        const int m0 = m_block * Tr::kBlockM;
        const MaskTile mask_t = mask_tile(p, b, h, entry);   // kBandMask only
#pragma unroll 1   // a slice's fragments die before the next slice's: no interleaving across slices
        for (int slice = 0; slice < Tr::kSlicesM; ++slice) {
            const int q0 = slice * Tr::kSliceM;   // first query of the slice within the tile
            const uint32_t tile_offset = stage * kStageBytes + q0 * Tr::kRowBytes;
            const float *sLse_t = sLse + stage * Tr::kBlockM + q0;
            const float *sD_t = sD + stage * Tr::kBlockM + q0;

            // P^T = exp2(S^T * scale * log2 e - LSE_log2[query]); masked (key, query) pairs give 0. A
            // key row sees the queries of its band (key - query <= hi, and >= lo when local), or none
            // if it is past seqlen_k.
            auto scores_to_p = [&](float (&rS)[Tr::kNTilesSlice][4]) {
#pragma unroll
                for (int nt = 0; nt < Tr::kNTilesSlice; ++nt) {
                    const float2 lse = *reinterpret_cast<const float2 *>(sLse_t + Fragment::col(nt, 0, lane));
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        float s = rS[nt][r];
                        if constexpr (kMask && kMode == kBandMask) {
                            s = mask_t.score(s, m0 + q0 + Fragment::col(nt, r % 2, lane), key_row0 + Fragment::row(r, lane),
                                             band);
                        } else if constexpr (kMask) {
                            const int key = key_row0 + Fragment::row(r, lane);
                            const int ahead = key - (m0 + q0 + Fragment::col(nt, r % 2, lane));   // key - query
                            if (key >= p.seqlen_k || (kMode != kBandNone && ahead > band.hi) ||
                                (kMode == kBandLocal && ahead < band.lo))
                                s = -INFINITY;
                        }
                        rS[nt][r] = fast_exp2(s * scale_log2 - (r % 2 ? lse.y : lse.x));
                    }
                }
            };
            uint32_t rdS[Tr::kNTilesSlice / 2][4];   // dS^T as A fragments (dK, and sdS for dQ)
            if constexpr (Tr::kColSplits == 2) {
                // d = 256: the two warps of these 16 keys split the slice's score GEMMs (each over all of d):
                // the first computes S^T -> P^T, the second dP^T -> dS^T from the first's rounded P^T (the
                // P^T that dV multiplies). P^T and dS^T cross as packed A fragments in shared memory, a
                // lane's 16 bytes contiguous (conflict-free), behind the pair's 64-thread named barrier.
                uint4 *xP = pair_x + key_warp * 2 * kPairFrags * 32, *xS = xP + kPairFrags * 32;
                uint32_t rP[kPairFrags][4];
                if (warp < Tr::kKeyWarps) {
                    float rS[Tr::kNTilesSlice][4];
                    zero(rS);
                    gemm_abt<Tr, T>(rS, sK_a, sQ_b + tile_offset);
                    scores_to_p(rS);
                    pack_a<T>(rP, rS);
#pragma unroll
                    for (int kk = 0; kk < kPairFrags; ++kk) xP[kk * 32 + lane] = make_uint4(rP[kk][0], rP[kk][1], rP[kk][2], rP[kk][3]);
                    pair_bar_sync(1 + key_warp, 64);   // P^T in place
                    gemm_ab<Tr, T>(dV, rP, sdO_bt + tile_offset, dkv_col0 / 8);
                    pair_bar_sync(1 + key_warp, 64);   // dS^T in place
#pragma unroll
                    for (int kk = 0; kk < kPairFrags; ++kk) {
                        const uint4 w = xS[kk * 32 + lane];
                        rdS[kk][0] = w.x, rdS[kk][1] = w.y, rdS[kk][2] = w.z, rdS[kk][3] = w.w;
                    }
                } else {
                    float rdP[Tr::kNTilesSlice][4];
                    zero(rdP);
                    gemm_abt<Tr, T>(rdP, sV_a, sdO_b + tile_offset);
                    pair_bar_sync(1 + key_warp, 64);   // P^T in place
#pragma unroll
                    for (int kk = 0; kk < kPairFrags; ++kk) {
                        const uint4 w = xP[kk * 32 + lane];
                        rP[kk][0] = w.x, rP[kk][1] = w.y, rP[kk][2] = w.z, rP[kk][3] = w.w;
                    }
                    // dS^T = P^T o (dP^T - D): element r of n8 tile nt is half r % 2 of word (nt % 2) * 2 + r / 2
                    // of fragment nt / 2 (pack_a's order).
#pragma unroll
                    for (int nt = 0; nt < Tr::kNTilesSlice; ++nt) {
                        const float2 d = *reinterpret_cast<const float2 *>(sD_t + Fragment::col(nt, 0, lane));
#pragma unroll
                        for (int half = 0; half < 2; ++half) {
                            const float2 pp = MmaOp<T>::unpack(rP[nt / 2][(nt % 2) * 2 + half]);
                            rdP[nt][2 * half] = pp.x * (rdP[nt][2 * half] - d.x);
                            rdP[nt][2 * half + 1] = pp.y * (rdP[nt][2 * half + 1] - d.y);
                        }
                    }
                    pack_a<T>(rdS, rdP);
#pragma unroll
                    for (int kk = 0; kk < kPairFrags; ++kk) xS[kk * 32 + lane] = make_uint4(rdS[kk][0], rdS[kk][1], rdS[kk][2], rdS[kk][3]);
                    pair_bar_sync(1 + key_warp, 64);   // dS^T in place
                    gemm_ab<Tr, T>(dV, rP, sdO_bt + tile_offset, dkv_col0 / 8);
                }
                gemm_ab<Tr, T>(dK, rdS, sQ_bt + tile_offset, dkv_col0 / 8);
            } else {
                // S^T = K Q^T: [16 keys][kSliceM queries] of this warp.
                float rS[Tr::kNTilesSlice][4];
                zero(rS);
                gemm_abt<Tr, T>(rS, sK_a, sQ_b + tile_offset);
                scores_to_p(rS);
                // Dropout: the slice's keep bits, for P^T (dV) and dP^T (dS).
                [[maybe_unused]] uint4 keep[Tr::kNTilesSlice / 4];   // dropout only
                if constexpr (kDropout) keep_cols_all(keep, make_dropout(p, b, h), key_row0 + lane / 4, m0 + q0, lane);
                // dV += P^T dO
                {
                    uint32_t rP[Tr::kNTilesSlice / 2][4];
                    pack_a<T>(rP, rS);
                    if constexpr (kDropout) dropout_cols_packed(rP, keep);
                    gemm_ab<Tr, T>(dV, rP, sdO_bt + tile_offset, dkv_col0 / 8);
                }
                // dP^T = V dO^T, then dS^T = P^T o (dP^T - D[query]) in place.
                float rdP[Tr::kNTilesSlice][4];
                zero(rdP);
                gemm_abt<Tr, T>(rdP, sV_a, sdO_b + tile_offset);
                if constexpr (kDropout) dropout_cols_scale(rdP, keep, 1.f / (1.f - p.dropout_p));
#pragma unroll
                for (int nt = 0; nt < Tr::kNTilesSlice; ++nt) {
                    const float2 d = *reinterpret_cast<const float2 *>(sD_t + Fragment::col(nt, 0, lane));
#pragma unroll
                    for (int r = 0; r < 4; ++r) rdP[nt][r] = rS[nt][r] * (rdP[nt][r] - (r % 2 ? d.y : d.x));
                }
                pack_a<T>(rdS, rdP);
                // dK += dS^T Q (scaled once at the end)
                gemm_ab<Tr, T>(dK, rdS, sQ_bt + tile_offset, dkv_col0 / 8);
            }

            if (kAtomicDq && (Tr::kColSplits == 1 || warp >= Tr::kKeyWarps)) {   // the warp that made dS^T
                // dS^T to shared memory: fragment (key g, queries 2t, 2t+1 of chunk 2kk (+1)) as one
                // word. A warp's 32 words hit 32 banks: 8 rows x (chunk ^ row) x 4 words.
#pragma unroll
                for (int kk = 0; kk < Tr::kNTilesSlice / 2; ++kk)
#pragma unroll
                    for (int reg = 0; reg < 4; ++reg) {
                        const int row = key_warp * 16 + Fragment::row(reg % 2 * 2, lane), chunk = q0 / 8 + 2 * kk + reg / 2;
                        const int offset = row * kDsRowBytes + ((chunk ^ (row % 8)) << 4) + (lane % 4) * 4;
                        *reinterpret_cast<uint32_t *>(reinterpret_cast<unsigned char *>(sdS) + offset) = rdS[kk][reg];
                    }
            }
        }

        if constexpr (kAtomicDq) {
            __syncthreads();   // every warp's keys of dS^T are in place
            // dQ[this warp's 16 queries x kDqCols columns] = dS K over the block's keys, added to
            // dq_accum unscaled.
            uint32_t rdSq[Tr::kKStepsN][4];
#pragma unroll
            for (int kk = 0; kk < Tr::kKStepsN; ++kk) ldmatrix_x4_trans(rdSq[kk], sdS_a + kk * 16 * kDsRowBytes);
#pragma unroll 1   // one pass's dQ registers at a time (d = 256: beside dK and dV's 128)
            for (int pass = 0; pass < Tr::kDqPasses; ++pass) {
                const int col0 = dq_col0 + pass * Tr::kNTilesDq * 8;
                float dQ[Tr::kNTilesDq][4];
                zero(dQ);
                gemm_ab<Tr, T>(dQ, rdSq, sK_bt, col0 / 8);
                atomic_add_rows(p.dq_accum + bwd_row_index(p, b, h, 0, p.seqlen_q) * Tr::kHeadDim + col0, Tr::kHeadDim,
                                m0 + dq_row0, p.seqlen_q, dQ, lane);
            }
        }
    };

    // Masked and unmasked tiles run as two instantiations: only the band's edge tiles (the causal
    // diagonal, a window's end) and a ragged last key block need the per-element test (2 of 64 tiles
    // per key block at N = 4096 causal).
#pragma unroll 1   // the dK, dV accumulators take the registers
    for (int m_block = m_first; m_block < m_total; ++m_block) {
        const int stage = (m_block - m_first) % Tr::kStages;
        cp_async_wait<0>();   // this tile (and, first time, K and V) has landed for this thread ...
        __syncthreads();      // ... and for all; the other stage and sdS are free again
        if (m_block + 1 < m_total) load_query_tile(query_block(m_block + 1), (stage + 1) % Tr::kStages);
        if constexpr (kMode == kBandMask) {   // a partial tile (or the ragged keys) reads the mask; a full one not
            const int e = walk.entry(m_block);
            if (ragged_keys || MaskWalk::cls(e) != kTileFull) query_tile(MaskWalk::block(e), stage, std::true_type{}, e);
            else query_tile(MaskWalk::block(e), stage, std::false_type{}, e);
        } else if (ragged_keys || (kMode != kBandNone && (m_block < queries.unmasked_begin || m_block >= queries.unmasked_end)))
            query_tile(m_block, stage, std::true_type{}, 0);
        else query_tile(m_block, stage, std::false_type{}, 0);
    }
    cp_async_wait<0>();   // no copy may still target shared memory when the block exits

    // dK carries the softmax scale (S = scale * Q K^T); dV does not (dropout: 1 / (1 - p), which P o Z left out).
    const float dv_scale = kDropout ? 1.f / (1.f - p.dropout_p) : 1.f;
    if (p.heads_q == p.heads_kv) {
        store_rows<T>(head_base(static_cast<T *>(p.dk), p.dk_strides, b, h) + dkv_col0, p.dk_strides[2], key_row0,
                      p.seqlen_k, dK, p.scale, lane);
        store_rows<T>(head_base(static_cast<T *>(p.dv), p.dv_strides, b, h) + dkv_col0, p.dv_strides[2], key_row0,
                      p.seqlen_k, dV, dv_scale, lane);
    } else {
        const int64_t head = bwd_row_index(p, b, h, 0, p.seqlen_k) * Tr::kHeadDim + dkv_col0;
        store_rows<float>(p.dk_accum + head, Tr::kHeadDim, key_row0, p.seqlen_k, dK, p.scale, lane);
        store_rows<float>(p.dv_accum + head, Tr::kHeadDim, key_row0, p.seqlen_k, dV, dv_scale, lane);
    }
}

// ---- dq: the Q-block outer loop (deterministic mode) -----------------------------------------------------
// Warp w owns query rows 16w .. 16w + 15 and walks the key blocks in order: S = Q K^T and dP = dO V^T
// in registers, dS packed straight into the A operand of dQ += dS K. No atomics: fixed bits.
template <class Tr, typename T, int kMode, bool kDropout = false>
__global__ void __launch_bounds__(Tr::kNThreads, Tr::kMinBlocksPerSm)
dq_kernel(const sy_attn_bwd_params p, int rows_per_head, const Band band) {
    static_assert(Tr::kBlockM == 16 * Tr::kNWarps, "warp w owns query rows 16w .. 16w + 15");
    static_assert(Tr::kDqSmemBytes <= 227 * 1024, "sm_90 gives a block at most 227 KiB of shared memory");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);                  // [kBlockM][d]
    T *sdO = sQ + Tr::kBlockM * Tr::kHeadDim;                 // [kBlockM][d]
    T *sK = sdO + Tr::kBlockM * Tr::kHeadDim;                 // [kStages][kBlockN][d]
    T *sV = sK + Tr::kStages * Tr::kBlockN * Tr::kHeadDim;    // [kStages][kBlockN][d]
    constexpr int kStageBytes = Tr::kBlockN * Tr::kRowBytes;

    // Causal: the last query blocks see the most keys; launch them first so the grid's tail is short.
    const int m_block = kMode != kBandNone ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int m0 = m_block * Tr::kBlockM;
    const T *gK = head_base(static_cast<const T *>(p.k), p.k_strides, b, h_kv);
    const T *gV = head_base(static_cast<const T *>(p.v), p.v_strides, b, h_kv);

    // The key blocks the band reaches; those in [keys.unmasked_begin, keys.unmasked_end) are wholly
    // present and seen whole by every row (attention_band.cuh).
    const int last_row = min(m0 + Tr::kBlockM, p.seqlen_q) - 1;
    const BlockRange keys = band_blocks_in<kMode>(m0, last_row, p.seqlen_k, Tr::kBlockN, band);

    auto load_key_tile = [&](int n_block, int stage) {
        load_tile_async<Tr, Tr::kBlockN>(smem_addr(sK) + stage * kStageBytes, gK, p.k_strides[2], n_block * Tr::kBlockN, p.seqlen_k);
        load_tile_async<Tr, Tr::kBlockN>(smem_addr(sV) + stage * kStageBytes, gV, p.v_strides[2], n_block * Tr::kBlockN, p.seqlen_k);
        cp_async_commit();
    };
    load_tile_async<Tr, Tr::kBlockM>(smem_addr(sQ), head_base(static_cast<const T *>(p.q), p.q_strides, b, h),
                                     p.q_strides[2], m0, p.seqlen_q);
    load_tile_async<Tr, Tr::kBlockM>(smem_addr(sdO), head_base(static_cast<const T *>(p.dout), p.dout_strides, b, h),
                                     p.dout_strides[2], m0, p.seqlen_q);
    cp_async_commit();
    if (keys.begin < keys.end) load_key_tile(keys.begin, keys.begin % Tr::kStages);

    // This lane's two rows: LSE (log2 units, +inf on padding rows) and D.
    const int64_t row_base = bwd_row_index(p, b, h, m0 + warp * 16 + lane / 4, rows_per_head);
    const float lse[2] = {p.lse_log2[row_base], p.lse_log2[row_base + 8]};
    const float delta[2] = {p.delta[row_base], p.delta[row_base + 8]};

    const uint32_t sQ_a = lane_chunk_addr<Tr>(smem_addr(sQ), warp * 16 + lane % 16, lane / 16);
    const uint32_t sdO_a = lane_chunk_addr<Tr>(smem_addr(sdO), warp * 16 + lane % 16, lane / 16);
    const uint32_t sK_b = lane_chunk_addr<Tr>(smem_addr(sK), lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
    const uint32_t sV_b = lane_chunk_addr<Tr>(smem_addr(sV), lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
    const uint32_t sK_bt = lane_chunk_addr<Tr>(smem_addr(sK), lane % 16, lane / 16);

    float dQ[Tr::kNTilesD][4];
    zero(dQ);
    const float scale_log2 = p.scale * kLog2e;
    const int query_row0 = m0 + warp * 16;

    auto key_tile = [&](int n_block, auto mask_tag) {
        constexpr bool kMask = decltype(mask_tag)::value;
        const int stage = n_block % Tr::kStages;
        float rS[Tr::kNTilesN][4];
        zero(rS);
        gemm_abt<Tr, T>(rS, sQ_a, sK_b + stage * kStageBytes);
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesN; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                float s = rS[nt][r];
                if constexpr (kMask) {
                    const int key = n_block * Tr::kBlockN + Fragment::col(nt, r % 2, lane);
                    const int ahead = key - (query_row0 + Fragment::row(r, lane));   // key - query
                    if (key >= p.seqlen_k || (kMode != kBandNone && ahead > band.hi) ||
                        (kMode == kBandLocal && ahead < band.lo))
                        s = -INFINITY;
                }
                rS[nt][r] = fast_exp2(s * scale_log2 - lse[r / 2]);
            }
        float rdP[Tr::kNTilesN][4];
        zero(rdP);
        gemm_abt<Tr, T>(rdP, sdO_a, sV_b + stage * kStageBytes);
        if constexpr (kDropout)   // dS = P o (Z o dP / (1 - p) - D)
            dropout_rows_scale(rdP, make_dropout(p, b, h), query_row0 + lane / 4, n_block * Tr::kBlockN, lane);
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesN; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) rdP[nt][r] = rS[nt][r] * (rdP[nt][r] - delta[r / 2]);
        uint32_t rdS[Tr::kKStepsN][4];
        pack_a<T>(rdS, rdP);
        gemm_ab<Tr, T>(dQ, rdS, sK_bt + stage * kStageBytes);
    };

    for (int n_block = keys.begin; n_block < keys.end; ++n_block) {
        cp_async_wait<0>();   // this key tile (and, first time, Q and dO) has landed for this thread ...
        __syncthreads();      // ... and for all; the other stage is free again
        if (n_block + 1 < keys.end) load_key_tile(n_block + 1, (n_block + 1) % Tr::kStages);
        if (n_block < keys.unmasked_begin || n_block >= keys.unmasked_end) key_tile(n_block, std::true_type{});
        else key_tile(n_block, std::false_type{});
    }
    cp_async_wait<0>();
    store_rows<T>(head_base(static_cast<T *>(p.dq), p.dq_strides, b, h), p.dq_strides[2], query_row0, p.seqlen_q,
                      dQ, p.scale, lane);
}

// ---- launch ---------------------------------------------------------------------------------------------
template <class Tr, class TrDq, typename T, int kMode, bool kDropout = false>
int launch(const sy_attn_bwd_params &p, int rows_per_head, Band band, cudaStream_t stream) {
    int status;
    if ((status = launch_preprocess<T>(p, rows_per_head, stream)) != kOk) return status;
    cudaError_t err;
    if (!p.deterministic) {
        const size_t bytes = static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q * Tr::kHeadDim * sizeof(float);
        if ((err = cudaMemsetAsync(p.dq_accum, 0, bytes, stream)) != cudaSuccess) return static_cast<int>(err);
    }
    // Above 48 KiB a block's dynamic shared memory must be opted into, per kernel.
    // kBandMask: atomic dQ only (the deterministic dq pass has no mask mode: the launcher refuses it).
    auto dkdv = kMode == kBandMask || !p.deterministic
                    ? dkdv_kernel<Tr, T, kMode, true, kDropout>
                    : dkdv_kernel<Tr, T, kMode == kBandMask ? kBandNone : kMode, false, kDropout>;
    err = cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kDkdvSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    dim3 kv_grid(ceil_div(p.seqlen_k, Tr::kBlockN), p.heads_q, p.batch);
    dkdv<<<kv_grid, Tr::kNThreads, Tr::kDkdvSmemBytes, stream>>>(p, rows_per_head, band);
    if ((status = launch_status()) != kOk) return status;

    if (kMode != kBandMask && p.deterministic) {
        auto dq = dq_kernel<TrDq, T, kMode == kBandMask ? kBandNone : kMode, kDropout>;
        err = cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, TrDq::kDqSmemBytes);
        if (err != cudaSuccess) return static_cast<int>(err);
        dim3 q_grid(ceil_div(p.seqlen_q, TrDq::kBlockM), p.heads_q, p.batch);
        dq<<<q_grid, TrDq::kNThreads, TrDq::kDqSmemBytes, stream>>>(p, rows_per_head, band);
        if ((status = launch_status()) != kOk) return status;
    } else {
        status = launch_reduce<T>(p.dq_accum, p.dq, p.dq_strides, p.batch, p.heads_q, 1, p.seqlen_q, Tr::kHeadDim,
                                  p.scale, stream);
        if (status != kOk) return status;
    }
    if (p.heads_q == p.heads_kv) return kOk;   // dkdv wrote dk and dv
    return launch_reduce_dk_dv<T>(p, Tr::kHeadDim, stream);
}

template <class Tr, class TrDq, typename T>
int launch_causal(const sy_attn_bwd_params &p, int rows_per_head, cudaStream_t stream) {
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode);
    if (p.mask_lists) {   // attn_mask tile by tile: key-major lists of (kBlockM-query) tiles per kBlockN keys, the band
        if (p.deterministic || !check_mask(p, Tr::kBlockM, Tr::kBlockN)) return p.deterministic ? kUnsupported : kInvalid;
        return p.dropout_p > 0.f ? launch<Tr, TrDq, T, kBandMask, true>(p, rows_per_head, band, stream)
                                 : launch<Tr, TrDq, T, kBandMask>(p, rows_per_head, band, stream);
    }
    if (p.dropout_p > 0.f) {   // dropout: every band mode (the keep bits do not depend on it)
        if (mode == kBandLocal) return launch<Tr, TrDq, T, kBandLocal, true>(p, rows_per_head, band, stream);
        return mode == kBandCausal ? launch<Tr, TrDq, T, kBandCausal, true>(p, rows_per_head, band, stream)
                                   : launch<Tr, TrDq, T, kBandNone, true>(p, rows_per_head, band, stream);
    }
    if (mode == kBandLocal) return launch<Tr, TrDq, T, kBandLocal>(p, rows_per_head, band, stream);
    return mode == kBandCausal ? launch<Tr, TrDq, T, kBandCausal>(p, rows_per_head, band, stream)
                               : launch<Tr, TrDq, T, kBandNone>(p, rows_per_head, band, stream);
}

// d = 256: dense, causal or a moved diagonal (causal_offset); no mask, dropout or window (not instantiated).
template <class Tr, class TrDq, typename T>
int launch_d256(const sy_attn_bwd_params &p, int rows_per_head, cudaStream_t stream) {
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right,
                                p.seqlen_q, p.seqlen_k, &mode);
    if (p.mask_lists || p.dropout_p > 0.f || mode == kBandLocal) return kUnsupported;
    // 217 KiB of shared memory a block: a GPU that grants less (A100: 163 KiB) is refused before any launch.
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
        optin < Tr::kDkdvSmemBytes || optin < TrDq::kDqSmemBytes)
        return kUnsupported;
    return mode == kBandCausal ? launch<Tr, TrDq, T, kBandCausal>(p, rows_per_head, band, stream)
                               : launch<Tr, TrDq, T, kBandNone>(p, rows_per_head, band, stream);
}

template <typename T>
int launch_head_dim(const sy_attn_bwd_params &p, cudaStream_t stream) {
    const int rows_per_head = ceil_div(p.seqlen_q, SY_ATTN_BWD_ROW_ALIGN) * SY_ATTN_BWD_ROW_ALIGN;
    static_assert(SY_ATTN_BWD_ROW_ALIGN % MmaBwdDkdvTraitsD64::kBlockM == 0 && SY_ATTN_BWD_ROW_ALIGN % MmaBwdDkdvTraitsD128::kBlockM == 0 &&
                  SY_ATTN_BWD_ROW_ALIGN % MmaBwdDqTraitsD64::kBlockM == 0 && SY_ATTN_BWD_ROW_ALIGN % MmaBwdDqTraitsD128::kBlockM == 0 &&
                  SY_ATTN_BWD_ROW_ALIGN % MmaBwdDkdvTraitsD256::kBlockM == 0 && SY_ATTN_BWD_ROW_ALIGN % MmaBwdDqTraitsD256::kBlockM == 0,
                  "the padded LSE and D rows cover whole query tiles");
    if (p.head_dim == 256) return launch_d256<MmaBwdDkdvTraitsD256, MmaBwdDqTraitsD256, T>(p, rows_per_head, stream);
    return p.head_dim == 64 ? launch_causal<MmaBwdDkdvTraitsD64, MmaBwdDqTraitsD64, T>(p, rows_per_head, stream)
                            : launch_causal<MmaBwdDkdvTraitsD128, MmaBwdDqTraitsD128, T>(p, rows_per_head, stream);
}

// 16-byte cp.async needs every row start 16-byte aligned: base pointers and row/head/batch strides.
bool rows_aligned(const void *ptr, const int64_t strides[3], int bytes) {
    if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0) return false;
    for (int i = 0; i < 3; ++i)
        if (strides[i] * 2 % bytes != 0) return false;
    return true;
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_mma_bwd(const sy_attn_bwd_params *params, void *stream) {
    using namespace sy_attn;
    int status = check_bwd_params(params);
    if (status != kOk) return status;
    const sy_attn_bwd_params &p = *params;
    if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return kUnsupported;
    if (p.dtype == SY_ATTN_F32 || p.cu_seqlens_q || p.cu_seqlens_k) return kUnsupported;   // varlen: hopper only
    if (!check_band(p.has_window, p.window_left, p.window_right, p.seqlen_q, p.seqlen_k)) return kInvalid;
    if (!p.lse_log2 || (!p.deterministic && !p.dq_accum)) return kInvalid;
    if (p.heads_q != p.heads_kv && (!p.dk_accum || !p.dv_accum)) return kInvalid;
    if (!rows_aligned(p.q, p.q_strides, 16) || !rows_aligned(p.k, p.k_strides, 16) ||
        !rows_aligned(p.v, p.v_strides, 16) || !rows_aligned(p.dout, p.dout_strides, 16))
        return kInvalid;
    if (!rows_aligned(p.dq, p.dq_strides, 4) || !rows_aligned(p.dk, p.dk_strides, 4) || !rows_aligned(p.dv, p.dv_strides, 4))
        return kInvalid;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    return p.dtype == SY_ATTN_BF16 ? launch_head_dim<__nv_bfloat16>(p, s) : launch_head_dim<__half>(p, s);
}
