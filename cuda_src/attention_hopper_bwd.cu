// `hopper` backward: FlashAttention-3 class attention backward for sm_90a (H100/H200), fp16/bf16, d 64/128.
//
// Hardware fact exploited: wgmma reads either operand from shared memory in K-major or MN-major order
// (the descriptor's transpose bit), and its fp32 accumulator, rounded to 16 bits, is its own A-register
// fragment. So the five GEMMs of a query tile need no data reshuffling at all:
//   S^T  = K Q^T     and  dP^T = V dO^T    keys as rows: K, V (A) and Q, dO (B) all K-major in smem
//   dV  += P^T dO    and  dK  += dS^T Q    P^T, dS^T from registers; dO, Q read MN-major (the same tiles)
//   dQ   = dS K                            dS^T stored once to smem, read MN-major (transposed A); K MN-major
//   (80-query tiles, d = 128 without a band: dQ^T = K^T dS^T, K read MN-major as A, dS stored [query][key]
//   by stmatrix .trans as a K-major B: wgmma's M is 64, and the tile's 80 queries become its N)
// with P = exp2(S * scale * log2(e) - LSE * log2(e)) and dS = P o (dP - D), D = rowsum(dO o O).
// The copy engine (TMA) brings K and V once and Q, dO, LSE, D per query tile through a ring of stages
// completing on mbarriers; one producer thread issues it while two consumer warpgroups compute, each
// owning 64 of the block's 128 keys (wgmma's M is 64 per warpgroup). Each GEMM is issued as soon as its
// operands exist and waited for only when its result is needed, so it runs under the issuing
// warpgroup's own work (dP^T under P^T's exponentials, dV under dS^T, dK under the dQ share's store) and
// under the other warpgroup's.
//
// dQ: each warpgroup multiplies all 128 keys of dS into a 64 x 64 fp32 share of the tile's dQ (both
// warpgroups' dS^T in shared memory: one named barrier per tile), stores it to shared memory (two buffers by
// tile parity at d = 128), and a warp of the producer warpgroup adds it to dq_accum with one bulk reduce-add
// (hopper_bwd_pipeline.cuh);
// fp16 at d = 64 adds it from the registers with red.global.add.v4 into the same tile-major layout, varlen calls
// row by row (SY_HOPPER_BWD_DQ_TMA).
// Each element of dQ is added once per query tile and key block (128 keys). Kernels per call: preprocess
// (D, the log2 LSE and dq_accum's zeros; attention_bwd_common.cuh), this one, then the dQ conversion
// (dq_accum * scale -> dq) and, for GQA, the dK, dV sums over a group.
//
// The sm_90a body exists only where the arch-specific features do (as in attention_hopper.cu); the
// launcher answers SY_EUNSUPPORTED elsewhere, and for the deterministic calls it cannot order (varlen,
// fp16 at d = 64: the mma backward's separate dQ pass serves those).
#include "hopper_bwd_config.cuh"     // stages and the dQ path, per head dim (-D overridable)
#include "hopper_bwd_dropout.cuh"    // dropout: the forward's keep-mask, regenerated (attention_dropout.cuh), packed
#include "hopper_bwd_mask.cuh"       // kBandMask: a partial attn_mask tile's P^T
#include "hopper_bwd_pipeline.cuh"   // traits, shared memory, the producer warpgroup
#include "softmax.cuh"                // fast_exp2

namespace sy_attn {
namespace {

// kDropoutFlag (hopper_bwd_pipeline.cuh): dropout (p.dropout_p, attention_dropout.cuh), instantiated with every
// band mode and kBandMask (no band; d = 128 only): dV += (P o Z)^T dO, dS = P o (Z o dP / (1 - p) - D).

#ifdef SY_HOPPER_DEVICE_CODE
// blockIdx.y (kDim 1) or .z (2), read where it is used: a volatile read cannot be hoisted out of the query
// tile loop, so neither can what is computed from it (dropout's per-head Philox counter: hoisted, its
// registers lived across the whole loop and pushed the loop bounds to local memory, 16-24 bytes).
// ---- a consumer warpgroup: 64 keys ------------------------------------------------------------------------
template <class Tr, typename T, int kMode>
struct BwdConsumer {
    static constexpr int kBand = kMode & 3;
    static constexpr bool kDropout = (kMode & kDropoutFlag) != 0;
    static constexpr bool kMaskBand = (kMode & kMaskBandFlag) != 0;
    static constexpr bool kVarlen = (kMode & kVarlenFlag) != 0;
    static constexpr bool kDqTma = Tr::kDqViaSmem && !kVarlen;
    using GemmTile = typename WgmmaN<Tr::kBlockM>::template Op<T>;   // S^T, dP^T (n = the tile's queries)
    using GemmDq = typename WgmmaN<Tr::kDqN>::template Op<T>;         // dQ: a 64 x 64 (dQ^T: 64 x 80) share
    using GemmHead = typename WgmmaN<Tr::kHeadDim>::template Op<T>;   // dV, dK (n = d)
    static constexpr int kNTilesM = Tr::kBlockM / 8;                  // n8 tiles of S^T
    // SY_HOPPER_BWD_PRELOAD: the tile's LSE and D in registers, read before the waits for S^T and dP^T.
    static constexpr bool kPreload = SY_HOPPER_BWD_PRELOAD != 0 && Tr::kHeadDim == 128 && !kDropout;

    const BwdSmem<Tr> &sm;
    // 0 or 1: keys 64 wg .. of the block. Passed through a shuffle from lane 0 the compiler knows it is warp-uniform
    // and builds the wgmma descriptors in uniform registers (bf16 d = 128: 535 -> 429 SASS instructions a warp and
    // tile, no R2UR); the dropout kernels keep the plain value (4-8 bytes of spill at d = 128 with the shuffle).
    const int wg;
    const int warp, lane;    // inside the warpgroup: warp owns the warpgroup's rows 16 warp ..
    const float scale_log2;

    float dV[Tr::kHeadDim / 2], dK[Tr::kHeadDim / 2];   // this warpgroup's 64 keys x d
    float s[Tr::kBlockM / 2], dp[Tr::kBlockM / 2];      // S^T then P^T; dP^T then dS^T (64 keys x kBlockM queries)
    uint32_t rP[Tr::kKStepsM][4], rdS[Tr::kKStepsM][4]; // P^T, dS^T as A fragments of dV, dK
    float dq[Tr::kDqShareFloats / 128];                 // 64 queries x 64 columns of dQ (dQ^T: 64 x 80)
    static constexpr int kKeySpans = Tr::kKStepsM / 2;   // dropout: 32-query spans of keep words a tile
    uint32_t keep_bits[kKeySpans / 2];                  // dropout: the next tile's keep bits, packed
    float2 lse_r[kPreload ? kNTilesM : 1], delta_r[kPreload ? kNTilesM : 1];   // kPreload: this lane's columns

    __device__ BwdConsumer(const BwdSmem<Tr> &sm_, int wg_, float scale)
        : sm(sm_), wg(kDropout ? wg_ : __shfl_sync(0xffffffffu, wg_, 0)), warp((threadIdx.x % 128) / 32),
          lane(threadIdx.x % 32), scale_log2(scale * kLog2e) {
#pragma unroll
        for (int i = 0; i < Tr::kHeadDim / 2; ++i) dV[i] = dK[i] = 0.f;
    }

    template <int kN>
    static __device__ __forceinline__ float (&tiles(float (&flat)[kN]))[kN / 4][4] {
        return reinterpret_cast<float(&)[kN / 4][4]>(flat);
    }

    // acc = A B^T over d: A this warpgroup's 64 key rows of K or V, B the tile's queries of Q or dO, both
    // K-major; step kk reads columns 16kk.. of panel kk / 4 (32 bytes on inside the swizzled rows).
    // wgmma descriptors: each GEMM builds its two once and steps through the k-steps with constant adds (desc_at):
    // smem_desc's mask, shift and or on every k-step's address was ~14 instructions a wgmma, 450 of the loop's 765
    // a warp and tile (SASS, bf16 d = 128: 616 after this, 429 with wg uniform; d = 64: 881 -> 665).
    __device__ __forceinline__ void issue_over_d(float (&acc)[Tr::kBlockM / 2], uint32_t a_base, uint32_t b_base) {
        const uint64_t a = smem_desc(a_base, 16, Tr::kAtomBytes), b = smem_desc(b_base, 16, Tr::kAtomBytes);
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsD; ++kk) {
            const int panel = kk / Tr::kKStepsPerPanel, in_panel = (kk % Tr::kKStepsPerPanel) * 32;
            GemmTile::ss(acc, desc_at(a, panel * Tr::kKVPanelBytes + in_panel),
                         desc_at(b, panel * Tr::kQPanelBytes + in_panel), kk > 0);
        }
        wgmma_commit();
    }

    // S^T = K Q^T and dP^T = V dO^T: two commit groups, so P^T can start while dP^T still runs. kS, kDp:
    // which of the two to issue (a partial mask tile at d = 64 issues dP^T after P^T: mask_first).
    template <bool kS = true, bool kDp = true>
    __device__ __forceinline__ void issue_s_dp(int stage, uint32_t dep = 0) {
        const uint32_t key_rows = wg * Tr::kKeysPerWG * Tr::kRowBytes, tile = stage * Tr::kQBytes;
        if (kS) fence_regs(s);
        if (kDp) fence_regs(dp);
        wgmma_fence();
        if (kS) issue_over_d(s, smem_addr(sm.k) + key_rows, smem_addr(sm.q) + tile);
        if (kDp) issue_over_d(dp, smem_addr(sm.v) + key_rows, smem_addr(sm.dout) + tile + dep);
    }

    // P^T = exp2(S^T * scale log2 e - LSE_log2[query]); a (key, query) pair outside the band gives 0:
    // key - query > hi (causal: a query before the key) or (local) < lo. Keys past seqlen_k need no mask:
    // TMA filled their K and V rows with zeros, so their dK, dV rows (never stored) are all they touch,
    // and dQ gets dS * 0 from them.
    // Varlen: keys past the sequence's len_k are the next sequence's (not TMA's zeros): masked too.
    // kBandMask, a partial tile (kMask): mask_p.
    template <bool kMask>
    __device__ __forceinline__ void compute_p(int stage, int n0, int m0, Band band, int len_k,
                                              const sy_attn_bwd_params &p) {
        if constexpr (kBand == kBandMask && kMask) {
            mask_p(stage, n0, m0, p);
            return;
        }
        const uint32_t lse = smem_addr(sm.lse + stage * Tr::kBlockM);
        const int key0 = n0 + wg * Tr::kKeysPerWG + warp * 16 + lane / 4;
        // This lane's key row sees queries key - hi .. key - lo; relative to the tile's first query.
        const int first = key0 - band.hi - m0, last = key0 - band.lo - m0;
#pragma unroll
        for (int nt = 0; nt < kNTilesM; ++nt) {
            const int col = nt * 8 + 2 * (lane % 4);
            const float2 l = kPreload ? lse_r[nt] : lds_float2(lse + col * 4);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                float x = tiles(s)[nt][c];
                const int query = col + c % 2 - (c / 2) * 8;   // against the key row of c / 2
                if (kMask && (query < first || (kBand == kBandLocal && query > last) ||
                              (kVarlen && key0 + (c / 2) * 8 >= len_k)))
                    x = -INFINITY;
                tiles(s)[nt][c] = fast_exp2(x * scale_log2 - (c % 2 ? l.y : l.x));
            }
            if (nt % 2 == 1) pack_step(rP[nt / 2], s, nt / 2);   // this tile pair's registers die here
        }
    }

    // P^T of a partial attn_mask tile (kBandMask): hopper_bwd_mask.cuh.
    __device__ __forceinline__ void mask_p(int stage, int n0, int m0, const sy_attn_bwd_params &p) {
        masked_p_tile<kMaskBand>(tiles(s), sm.lse + stage * Tr::kBlockM, n0 + wg * Tr::kKeysPerWG + warp * 16 + lane / 4,
                                 m0, lane, scale_log2, p, [&](int kk) { pack_step(rP[kk], s, kk); });
    }

    // dS^T = P^T o (dP^T - D[query]), with P^T as rounded for dV: the fp32 S^T registers are free once
    // P^T is packed (what lets a 128-query tile fit at d = 64), and dS is then the gradient of the P
    // that dV used. A pair of rP holds tile nt = 2kk + reg / 2, elements 2 (reg % 2) + {0, 1}.
    // Dropout (rp = 1 / (1 - p)): dS^T = P^T o (Z o dP^T rp - D), Z read bit by bit off keep_bits (no
    // expanded keep words: 8 more registers beside P^T's exponentials, where ptxas moves this work).
    // kDsViaSmem (dropout at d = 64): dS^T stored step by step as compute_ds makes it, dK's GEMM reading it
    // back from shared memory (issue_dk_smem) instead of rdS: with rdS's 32 registers beside dP^T (64),
    // P^T (32, kept for drop_packed) and dV, dK (64) the kernels spilled 40-148 bytes.
    static constexpr bool kDsViaSmem = kDropout && Tr::kHeadDim == 64;
    __device__ __forceinline__ void compute_ds(int stage, float rp = 1.f, int buffer = 0) {
        const uint32_t delta = smem_addr(sm.delta + stage * Tr::kBlockM) + (2 * (lane % 4)) * 4;
#pragma unroll
        for (int nt = 0; nt < kNTilesM; ++nt) {
            const float2 d = kPreload ? delta_r[nt] : lds_float2(delta + nt * 8 * 4);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const float2 pr = MmaOp<T>::unpack(rP[nt / 2][(nt % 2) * 2 + half]);   // P, undropped (dropout too)
                float dp0 = tiles(dp)[nt][2 * half], dp1 = tiles(dp)[nt][2 * half + 1];
                if constexpr (kDsViaSmem) {   // the same operations, bits named first (d = 64: written
                    // as below, ptxas's schedule of the bf16 causal kernel spilled 12 bytes)
                    const bool keep0 = keep_bit(keep_bits, nt, 2 * half), keep1 = keep_bit(keep_bits, nt, 2 * half + 1);
                    dp0 = keep0 ? dp0 * rp : 0.f;
                    dp1 = keep1 ? dp1 * rp : 0.f;
                } else if constexpr (kDropout) {   // register 2 half + c of tile nt
                    dp0 = keep_bit(keep_bits, nt, 2 * half) ? dp0 * rp : 0.f;
                    dp1 = keep_bit(keep_bits, nt, 2 * half + 1) ? dp1 * rp : 0.f;
                }
                tiles(dp)[nt][2 * half] = pr.x * (dp0 - d.x);
                tiles(dp)[nt][2 * half + 1] = pr.y * (dp1 - d.y);
            }
            if (nt % 2 == 1) {
                if constexpr (kDsViaSmem) {   // stored as made: no 32 registers of dS^T beside dP^T and P^T
                    uint32_t a[4];
                    pack_step(a, dp, nt / 2);
                    store_ds_step(buffer, nt / 2, a);
                } else {
                    pack_step(rdS[nt / 2], dp, nt / 2);
                }
            }
        }
    }

    // Dropout: the keep bits of the tile at query m0 (Philox, one call per 16 scores), packed into keep_bits.
    // Drawn for the next tile at the end of this one, where only dV and dK are live (about 150 registers):
    // drawn beside S^T and dP^T, or beside P^T's exponentials, they peaked at 234-238 and the loop's own
    // values went to local memory (8-64 bytes).
    __device__ __forceinline__ void draw_keep(const sy_attn_bwd_params &p, int n0, int m0) {
        uint4 keep[kKeySpans];
        keep_cols_all<kKeySpans, true>(keep, make_dropout<true>(p, blockIdx.z, blockIdx.y),
                                       n0 + wg * Tr::kKeysPerWG + warp * 16 + lane / 4, m0, lane);
        pack_keep(keep_bits, keep);
    }

    // kPreload: this lane's LSE (columns 8 nt + 2 (lane % 4) ..) or D of the tile, issued before the wait for S^T
    // or dP^T. Read after it, the loads queued behind those GEMMs' operand reads and the first FFMA waited for them
    // (PC sampling, 2026-11-29d: short-scoreboard stalls, almost all on LSE and D, 12.9 % of the block's samples).
    __device__ __forceinline__ void preload(float2 (&r)[kPreload ? kNTilesM : 1], const float *vec) {
        if constexpr (kPreload) {
            const uint32_t base = smem_addr(vec) + (2 * (lane % 4)) * 4;
#pragma unroll
            for (int nt = 0; nt < kNTilesM; ++nt) r[nt] = lds_float2(base + nt * 8 * 4);
        }
    }

    // Accumulator n8 tiles 2kk, 2kk+1 -> the k16 A fragment kk (the forward's P conversion).
    static __device__ __forceinline__ void pack_step(uint32_t (&a)[4], float (&acc)[Tr::kBlockM / 2], int kk) {
        a[0] = MmaOp<T>::pack(tiles(acc)[2 * kk][0], tiles(acc)[2 * kk][1]);
        a[1] = MmaOp<T>::pack(tiles(acc)[2 * kk][2], tiles(acc)[2 * kk][3]);
        a[2] = MmaOp<T>::pack(tiles(acc)[2 * kk + 1][0], tiles(acc)[2 * kk + 1][1]);
        a[3] = MmaOp<T>::pack(tiles(acc)[2 * kk + 1][2], tiles(acc)[2 * kk + 1][3]);
    }

    // acc += A B over the tile's queries, A (P^T or dS^T) from registers, B (dO or Q) MN-major: a k16
    // step is 16 query rows further on; LBO steps from one 64-column panel of d to the next.
    __device__ __forceinline__ void issue_head_gemm(float (&acc)[Tr::kHeadDim / 2], uint32_t (&a)[Tr::kKStepsM][4],
                                                    const unsigned char *tile_base, int stage) {
        const uint32_t b_base = smem_addr(tile_base) + stage * Tr::kQBytes;
        const uint64_t b = smem_desc(b_base, Tr::kQPanelBytes, Tr::kAtomBytes);
        fence_regs(acc);
        fence_regs(a);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk) GemmHead::rs(acc, a[kk], desc_at(b, kk * 16 * Tr::kRowBytes));
        wgmma_commit();
    }

    // dS^T (this warpgroup's 64 key rows) to shared memory with the 128-byte swizzle: 16-byte chunk c of
    // row r at c ^ (r % 8). A warp's 32 word stores hit 32 banks (8 rows x 4 words, chunks all distinct).
    __device__ __forceinline__ void store_ds(int buffer) {
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk) store_ds_step(buffer, kk, rdS[kk]);
    }

    // k16 step kk of dS^T (queries 16 kk ..): one stmatrix of the step's four 8 x 8 matrices (a[i] is matrix i:
    // rows + 8 (i % 2), queries + 8 (i / 2)); lane l addresses row l % 8 of matrix l / 8, a whole 16-byte chunk
    // of the swizzled row. One store instruction a step instead of four 4-byte generic stores (with their
    // 64-bit address arithmetic), and each writes 512 bytes without bank conflict (the chunks of 8 rows differ).
    // kDqTransposed: dS, [key panel wg][query][64 keys], by stmatrix .trans (matrix i stored transposed: lane l
    // addresses query row l % 8 of matrix l / 8, its 8 keys one 16-byte chunk); the 8 rows of a matrix are 8
    // consecutive queries, so their chunks land in 8 distinct swizzled positions: no bank conflict either.
    __device__ __forceinline__ void store_ds_step(int buffer, int kk, const uint32_t (&a)[4]) {
        const int m = lane / 8;
        if constexpr (Tr::kDqTransposed) {
            const int query = 16 * kk + (m / 2) * 8 + lane % 8, chunk = 2 * warp + m % 2;
            stmatrix_x4_trans(smem_addr(sm.ds) + buffer * Tr::kDsBytes + wg * Tr::kDsPanelBytes + query * Tr::kRowBytes +
                                  ((chunk ^ (query % 8)) << 4),
                              a[0], a[1], a[2], a[3]);
            return;
        }
        const int row = wg * Tr::kKeysPerWG + warp * 16 + (m % 2) * 8 + lane % 8;
        const int chunk = 2 * kk + m / 2, panel = chunk / 8;
        stmatrix_x4(smem_addr(sm.ds) + buffer * Tr::kDsBytes + panel * Tr::kDsPanelBytes + row * Tr::kRowBytes +
                        (((chunk % 8) ^ (row % 8)) << 4),
                    a[0], a[1], a[2], a[3]);
    }

    // kDsViaSmem: dK += dS^T Q with dS^T read from shared memory (this warpgroup's 64 key rows, K-major
    // as K is in issue_over_d), Q MN-major as in issue_head_gemm.
    __device__ __forceinline__ void issue_dk_smem(int buffer, int stage) {
        const uint32_t a_base = smem_addr(sm.ds) + buffer * Tr::kDsBytes + wg * Tr::kKeysPerWG * Tr::kRowBytes;
        const uint32_t b_base = smem_addr(sm.q) + stage * Tr::kQBytes;
        const uint64_t a = smem_desc(a_base, 16, Tr::kAtomBytes), b = smem_desc(b_base, Tr::kQPanelBytes, Tr::kAtomBytes);
        fence_regs(dK);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk) {
            const int panel = kk / Tr::kKStepsPerPanel, in_panel = (kk % Tr::kKStepsPerPanel) * 32;
            GemmHead::template ss<0, 1>(dK, desc_at(a, panel * Tr::kDsPanelBytes + in_panel),
                                        desc_at(b, kk * 16 * Tr::kRowBytes), 1);
        }
        wgmma_commit();
    }

    // This warpgroup's 64 x 64 share of dQ = dS K (Traits::kDqSplitColumns): A = dS^T read MN-major
    // (queries contiguous; panel wg at d = 64), B = K MN-major (panel wg at d = 128).
    // kDqTransposed: rows 64 wg.. of dQ^T = K^T dS^T, A = K's panel wg read MN-major (d contiguous), B = dS
    // K-major (keys contiguous; k-step kk in key panel kk / 4).
    __device__ __forceinline__ void issue_dq(int buffer) {
        if constexpr (Tr::kDqTransposed) {
            const uint64_t a = smem_desc(smem_addr(sm.k) + wg * Tr::kKVPanelBytes, Tr::kKVPanelBytes, Tr::kAtomBytes);
            const uint64_t b = smem_desc(smem_addr(sm.ds) + buffer * Tr::kDsBytes, 16, Tr::kAtomBytes);
            fence_regs(dq);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Tr::kDqKSteps; ++kk) {
                const int panel = kk / Tr::kKStepsPerPanel, in_panel = (kk % Tr::kKStepsPerPanel) * 32;
                GemmDq::template ss<1, 0>(dq, desc_at(a, kk * 16 * Tr::kRowBytes),
                                          desc_at(b, panel * Tr::kDsPanelBytes + in_panel), kk > 0);
            }
            wgmma_commit();
            return;
        }
        const int ds_panel = Tr::kDqSplitColumns ? 0 : wg, k_panel = Tr::kDqSplitColumns ? wg : 0;
        const uint32_t ds_base = smem_addr(sm.ds) + buffer * Tr::kDsBytes + ds_panel * Tr::kDsPanelBytes;
        const uint32_t k_base = smem_addr(sm.k) + k_panel * Tr::kKVPanelBytes;
        const uint64_t a = smem_desc(ds_base, Tr::kDsPanelBytes, Tr::kAtomBytes);
        const uint64_t b = smem_desc(k_base, Tr::kKVPanelBytes, Tr::kAtomBytes);
        fence_regs(dq);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kDqKSteps; ++kk)
            GemmDq::template ss<1, 1>(dq, desc_at(a, kk * 16 * Tr::kRowBytes), desc_at(b, kk * 16 * Tr::kRowBytes), kk > 0);
        wgmma_commit();
    }

    // The i-th query tile this block walks. Each GEMM is issued as soon as its operands exist and waited
    // for only when its result is needed, so the tensor cores run under this warpgroup's own work:
    // dP^T under P^T's exponentials, dV under dS^T and its store, dK under the dQ atomics.
    // list, m, end: kBandMask, the block's list, this tile's entry and the entry count (dropout draws the next
    // entry's keep bits at the end). The loop holds all three anyway; the next tile's row computed before the
    // tile and passed in spilled 28 bytes at bf16 (re-read from the parameters: 136).
    template <bool kMask>
    __device__ __forceinline__ void tile(int i, int m0, int n0, int seqlen_q, float *gDqHead, Band band, int len_k,
                                         const sy_attn_bwd_params &p, const int *list = nullptr, int m = 0, int end = 0) {
        // Dropout, causal or a window: bits 26.. of i hold the masked count (the loop says why); a power-of-2
        // kStages reads only the low bits, fp16 at d = 64 (3 stages) clears them.
        if constexpr (kDropout && kBand != kBandNone && kBand != kBandMask && (Tr::kStages & (Tr::kStages - 1)) != 0)
            i &= (1 << 26) - 1;
        const int stage = i % Tr::kStages, buffer = i & 1;
        mbar_wait(smem_addr(&sm.bars->q_full[stage]), (i / Tr::kStages) & 1);
        // A partial mask tile at d = 64: dP^T's 64 registers stay free while the mask is read (S^T, P^T,
        // then dP^T and dV): issued together, dP^T's in-flight accumulators left no room for the mask's
        // addresses (20 bytes of spill). Partial tiles are a mask's edges; the full ones keep the overlap. At
        // d = 128 too with a band (kMaskBand: the band's test beside the loads spilled 12-24 bytes there).
        // Dropout at d = 64 too: issued together, ptxas hoists dP^T's wait above P^T's exponentials and
        // runs dS^T's dropout work beside them, both 128-query accumulators live (44-128 bytes spilled).
        constexpr bool kMaskFirst = (kBand == kBandMask && kMask && (Tr::kHeadDim == 64 || kMaskBand)) ||
                                    (kDropout && Tr::kHeadDim == 64);
        // Dropout: the tile's keep bits were drawn at the end of the previous tile (draw_keep); dS^T is made
        // from P^T (undropped, in rP) and Z o dP^T / (1 - p), and only then rP becomes P^T o Z for dV
        // (scaled by 1 / (1 - p) at the store), so no copy of P^T is kept (16 / 32 registers at d = 128 /
        // 64: beside the dQ shares that copy spilled 16-24 bytes); dV then runs under dS^T's store and barrier.
        if constexpr (kMaskFirst) {
            issue_s_dp<true, false>(stage);
            if constexpr (!(kBand == kBandMask && kMask)) preload(lse_r, sm.lse + stage * Tr::kBlockM);
            wgmma_wait<0>();
        } else {
            issue_s_dp(stage);
            if constexpr (!(kBand == kBandMask && kMask)) preload(lse_r, sm.lse + stage * Tr::kBlockM);
            wgmma_wait<1>();   // S^T done; dP^T may still run
        }
        fence_regs(s);
        compute_p<kMask>(stage, n0, m0, band, len_k, p);
        if constexpr (kDropout) {
            if constexpr (kMaskFirst) issue_s_dp<false, true>(stage, nonnegative_dep(rP));
            wgmma_wait<0>();   // dP^T done
            fence_regs(dp);
            compute_ds(stage, 1.f / (1.f - p.dropout_p), buffer);
            fence_regs(rP);   // P^T o Z made here, not beside P^T (both alive: the copy again)
            // The form ptxas keeps in registers (kBandMask bf16: 4 bytes spilled with the two-bit mask; a window
            // at fp16 d = 128: 8 with the per-half form).
            drop_packed<(std::is_same<T, __half>::value && kBand != kBandLocal) || kBand == kBandMask>(rP, keep_bits);
            issue_head_gemm(dV, rP, sm.dout, stage);   // dV += (P^T o Z) dO
        } else {
            if constexpr (kMaskFirst) issue_s_dp<false, true>(stage);
            issue_head_gemm(dV, rP, sm.dout, stage);   // dV += P^T dO
            preload(delta_r, sm.delta + stage * Tr::kBlockM);
            wgmma_wait<1>();   // dP^T done; dV may still run
            fence_regs(dp);
            compute_ds(stage);
        }
        if constexpr (!kDsViaSmem) store_ds(buffer);
        // The stores reach wgmma's proxy, then every thread whose dS^T rows the dQ GEMM reads has stored.
        fence_proxy_async_shared();
        named_bar_sync(kBarDs, 256);
        issue_dq(buffer);
        if constexpr (kDsViaSmem)
            issue_dk_smem(buffer, stage);
        else
            issue_head_gemm(dK, rdS, sm.q, stage);     // dK += dS^T Q
        wgmma_wait<1>();   // dV and dQ done; dK may still run
        fence_regs(dV);
        fence_regs(rP);
        fence_regs(dq);
        if constexpr (kDqTma) {
            // The share in the registers' order: n8 tile nt of thread t as float4 nt * 128 + t (a
            // warp's 32 stores are 512 contiguous bytes: no bank conflict).
            const int dq_buffer = i % dq_buffers<Tr, kMode>();   // i's bits 26.. (dropout) leave its parity alone
            named_bar_sync(dq_bar<Tr, kMode>(kBarDqEmpty, wg, dq_buffer), kDqBarThreads);
            const uint32_t share = smem_addr(sm.dq(dq_buffer, wg)) + (threadIdx.x % 128) * 16;
#pragma unroll
            for (int nt = 0; nt < Tr::kDqShareFloats / 512; ++nt)
                sts_float4(share + nt * 128 * 16, tiles(dq)[nt][0], tiles(dq)[nt][1], tiles(dq)[nt][2], tiles(dq)[nt][3]);
            fence_proxy_async_shared();
            named_bar_arrive(dq_bar<Tr, kMode>(kBarDqFull, wg, dq_buffer), kDqBarThreads);
        } else if constexpr (Tr::kDqTiledAdds && !kVarlen) {
            // The share straight from the registers into the tile-major dq_accum (whole lines a warp; gDqHead is
            // then the head's tile-major base).
            atomic_add_tiled(gDqHead + static_cast<int64_t>(m0) * Tr::kHeadDim + wg * Tr::kDqShareFloats, tiles(dq),
                             threadIdx.x % 128);
        } else {
            // This warp's 16 rows of the warpgroup's 64 x 64 share.
            const int row0 = m0 + (Tr::kDqSplitColumns ? 0 : wg * 64) + warp * 16;
            const int col0 = Tr::kDqSplitColumns ? wg * 64 : 0;
            atomic_add_rows(gDqHead + col0, Tr::kHeadDim, row0, seqlen_q, tiles(dq), lane);
        }
        if constexpr (kDropout && kBand == kBandMask)   // the list's next tile (past the end: the last, unused)
            draw_keep(p, n0, MaskWalk::block(__ldg(list + 1 + min(m + 1, end - 1))) * Tr::kBlockM);
        else if constexpr (kDropout)
            draw_keep(p, n0, m0 + Tr::kBlockM);   // under dK's GEMM (dropout: tiles in order)
        wgmma_wait<0>();   // dK done: the stage's Q and dO are free
        fence_regs(dK);
        fence_regs(rdS);
        mbar_arrive(smem_addr(&sm.bars->q_empty[stage]));
    }

    // dK carries the softmax scale (S = scale * Q K^T); dV does not. GQA: fp32 per query head, summed later.
    // Varlen: the sequence's rows (seq.k_row0 ..) of dk, dv or of the (Hq, total_k, d) workspaces.
    __device__ void store(const sy_attn_bwd_params &p, int n0, int h, int b, const Sequence &seq) {
        const int row0 = n0 + wg * Tr::kKeysPerWG + warp * 16;
        const float dv_scale = kDropout ? 1.f / (1.f - p.dropout_p) : 1.f;   // dropout: P o Z left it out
        if (p.heads_q == p.heads_kv) {
            T *gDk = head_base(static_cast<T *>(p.dk), p.dk_strides, seq.map_b, h) + int64_t(seq.k_row0) * p.dk_strides[2];
            T *gDv = head_base(static_cast<T *>(p.dv), p.dv_strides, seq.map_b, h) + int64_t(seq.k_row0) * p.dv_strides[2];
            store_rows<T>(gDk, p.dk_strides[2], row0, seq.len_k, tiles(dK), p.scale, lane);
            store_rows<T>(gDv, p.dv_strides[2], row0, seq.len_k, tiles(dV), dv_scale, lane);
        } else {
            const int64_t head = (kVarlen ? int64_t(h) * p.seqlen_k + seq.k_row0 : bwd_row_index(p, b, h, 0, p.seqlen_k)) *
                                 Tr::kHeadDim;
            store_rows<float>(p.dk_accum + head, Tr::kHeadDim, row0, seq.len_k, tiles(dK), p.scale, lane);
            store_rows<float>(p.dv_accum + head, Tr::kHeadDim, row0, seq.len_k, tiles(dV), dv_scale, lane);
        }
    }
};
#endif  // SY_HOPPER_DEVICE_CODE

// Grid (key blocks, query heads, batch), or (query heads, key blocks, batch) where lpt_grid says so.
template <class Tr, typename T, int kMode>
__global__ void __launch_bounds__(Tr::kThreads, 1)
hopper_bwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                  const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                  const sy_attn_bwd_params p, int rows_per_head, const Band band) {
#ifdef SY_HOPPER_DEVICE_CODE
    extern __shared__ unsigned char smem_raw[];
    const BwdSmem<Tr> sm(smem_raw);
    // Deterministic with a band: high key blocks first (write_dq says why; never varlen).
    constexpr bool kReversible = ((kMode & 3) == kBandCausal || (kMode & 3) == kBandLocal) && (kMode & kVarlenFlag) == 0;
    const bool lpt = lpt_grid<kMode>(p);
    const int n_block = lpt ? blockIdx.y : kReversible && p.deterministic ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int n0 = n_block * Tr::kBlockN, h = lpt ? blockIdx.x : blockIdx.y, b = blockIdx.z;
    // Varlen: the grid covers max_seqlen_k keys of every sequence; a block past its sequence's keys has
    // nothing to do (the whole block leaves before any barrier exists).
    if ((kMode & kVarlenFlag) != 0 && n0 >= sequence_of<kMode>(p, b, band).len_k) return;

    if (threadIdx.x == 0) {
        BwdBarriers<Tr> &bar = *sm.bars;
        mbar_init(smem_addr(&bar.kv_full), 1);
        for (int s = 0; s < Tr::kStages; ++s) {
            mbar_init(smem_addr(&bar.q_full[s]), 1);   // the producer's expect_tx arrival; the bytes complete it
            mbar_init(smem_addr(&bar.q_empty[s]), 128 * Tr::kConsumerWGs);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    const int warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
        regs_dec<Tr::kProducerRegs>();
        if (threadIdx.x == 0) {
            tma_prefetch_map(&tm_q);
            tma_prefetch_map(&tm_do);
            tma_prefetch_map(&tm_k);
            tma_prefetch_map(&tm_v);
            const Sequence seq = sequence_of<kMode>(p, b, band);
            const int *list = mask_list<kMode>(p, b, h, n_block);
            const BlockRange queries = query_tiles<Tr, kMode>(n0, seq.len_q, seq.len_k, seq.band, list);
            produce<Tr>(sm, &tm_q, &tm_do, &tm_k, &tm_v, p.lse_log2 + bwd_row_index(p, b, h, 0, rows_per_head),
                        p.delta + bwd_row_index(p, b, h, 0, rows_per_head), n0, h, h / (p.heads_q / p.heads_kv),
                        seq.map_b, queries.begin, queries.end, seq.q_row0, seq.k_row0, list ? list + 1 : nullptr);
        } else if (Tr::kDqViaSmem && (kMode & kVarlenFlag) == 0 && threadIdx.x / 32 == 1) {
            const Sequence seq = sequence_of<kMode>(p, b, band);
            const int *list = mask_list<kMode>(p, b, h, n_block);
            const BlockRange queries = query_tiles<Tr, kMode>(n0, seq.len_q, seq.len_k, seq.band, list);
            // Deterministic: the per-tile counters after the tile-major dq_accum (attention_api.h).
            const int tiles_per_head = rows_per_head / Tr::kBlockM;
            int *sems = p.deterministic ? reinterpret_cast<int *>(p.dq_accum + int64_t(p.batch) * p.heads_q *
                                                                                   rows_per_head * Tr::kHeadDim) +
                                              (int64_t(b) * p.heads_q + h) * tiles_per_head
                                        : nullptr;
            write_dq<Tr, kMode>(sm, p.dq_accum + bwd_row_index(p, b, h, 0, rows_per_head) * Tr::kHeadDim, queries.begin,
                                queries.end, threadIdx.x % 32, sems, n_block, seq, list ? list + 1 : nullptr);
        }
    } else {
        regs_inc<Tr::kConsumerRegs>();
        BwdConsumer<Tr, T, kMode> consumer(sm, warpgroup - 1, p.scale);
        mbar_wait(smem_addr(&sm.bars->kv_full), 0);   // also when no tile follows: no copy may outlive the block
        // The dQ shares start empty: one warp stands in for the dQ warp's first arrival on each buffer.
        if (Tr::kDqViaSmem && (kMode & kVarlenFlag) == 0 && threadIdx.x % 128 < 32)
            for (int buffer = 0; buffer < dq_buffers<Tr, kMode>(); ++buffer)
                named_bar_arrive(dq_bar<Tr, kMode>(kBarDqEmpty, warpgroup - 1, buffer), kDqBarThreads);
        int i = 0;
        // The range is computed after setmaxnreg, in each role (live across it, it cost the d = 64
        // consumers 16-24 bytes of spill).
        const Sequence seq = sequence_of<kMode>(p, b, band);
        // dq_accum: (B, Hq, Nq, d), varlen (Hq, total_q, d) from the sequence's first row; tile-major (B, Hq,
        // rows_per_head, d) for the tiled adds.
        float *gDqHead = p.dq_accum + ((kMode & kVarlenFlag) != 0 ? int64_t(h) * p.seqlen_q + seq.q_row0
                                       : bwd_row_index(p, b, h, 0, Tr::kDqTiledAdds ? rows_per_head : p.seqlen_q)) *
                                          Tr::kHeadDim;
        const int *list = mask_list<kMode>(p, b, h, n_block);
        const BlockRange queries = query_tiles<Tr, kMode>(n0, seq.len_q, seq.len_k, seq.band, list);
        // Varlen: a block holding the sequence's last, ragged keys masks every tile (the keys after them
        // belong to the next sequence).
        const bool ragged = (kMode & kVarlenFlag) != 0 && n0 + Tr::kBlockN > seq.len_k;
        if constexpr ((kMode & kDropoutFlag) != 0 && (kMode & 3) == kBandMask) {   // the list's first tile
            if (queries.begin < queries.end) consumer.draw_keep(p, n0, MaskWalk::block(__ldg(list + 1 + queries.begin)) * Tr::kBlockM);
        } else if constexpr ((kMode & kDropoutFlag) != 0) {
            consumer.draw_keep(p, n0, queries.begin * Tr::kBlockM);
        }
        // Dropout, causal: the count of masked tiles (at most 3: the key block's 128 keys cross the diagonal
        // in 3 query tiles of 64, 2 of 128 at d = 64) rides in bits 26.. of the tile counter i, whose low
        // bits alone pick the stage and phase (tile clears them where kStages is not a power of 2):
        // unmasked_begin held on its own across the loop was the one value in local memory (8 bytes at the
        // consumers' 240 registers).
        // A window: the leading masked count the same way (at most 3 again: the tiles before unmasked_begin hold
        // the key block's diagonal side), the far edge tested per tile (past_band_edge); unmasked_begin and
        // unmasked_end held across the loop spilled 8-24 bytes.
        constexpr bool kLocalDropout = (kMode & kDropoutFlag) != 0 && (kMode & 3) == kBandLocal;
        constexpr bool kCountMasked = (kMode & kDropoutFlag) != 0 && ((kMode & 3) == kBandCausal || kLocalDropout);
        if constexpr (kCountMasked) i = (min(queries.unmasked_begin, queries.end) - queries.begin) << 26;
        // Dropout at d = 64 without a band, and causal 80-query tiles: the loop's end read from the launch's
        // parameters at each test (a volatile move), not held in a register across the loop (ptxas put it, or
        // unmasked_begin beside it, in local memory: 4-8 bytes). Causal: a nonempty range ends at the last tile
        // (the open side of the band), an empty one starts there.
        constexpr bool kCausalWide = Tr::kDqTransposed && kMode == kBandCausal;
        constexpr bool kEndFromParams =
            ((kMode & kDropoutFlag) != 0 && Tr::kHeadDim == 64 && (kMode & 3) == kBandNone) || kCausalWide;
        const int m_begin = kCausalWide && queries.begin == queries.end ? ceil_div(p.seqlen_q, Tr::kBlockM)
                                                                         : queries.begin;
        for (int m = m_begin; m < (kEndFromParams ? pinned_tiles<Tr>(p.seqlen_q) : queries.end); ++m, ++i) {
            constexpr int kBand = kMode & 3;
            if constexpr (kBand == kBandMask) {   // entry m of the list: a full tile unmasked, a partial one masked
                const int e = __ldg(list + 1 + m);
                // Dropout: the next entry's tile (past the list's end: its last, drawn and never used).
                if (MaskWalk::cls(e) == kTileFull)
                    consumer.template tile<false>(i, MaskWalk::block(e) * Tr::kBlockM, n0, seq.len_q, gDqHead, seq.band,
                                                  seq.len_k, p, list, m, queries.end);
                else
                    consumer.template tile<true>(i, MaskWalk::block(e) * Tr::kBlockM, n0, seq.len_q, gDqHead, seq.band,
                                                 seq.len_k, p, list, m, queries.end);
                continue;
            }
            // Without a band nothing is masked (ragged keys and queries: see query_tiles).
            const bool masked = ragged || (kCountMasked ? (i & ((1 << 26) - 1)) < (i >> 26) ||
                                               (kLocalDropout && past_band_edge<Tr::kBlockM>(m, n0, seq.len_q, seq.band))
                                          : kBand == kBandCausal ? m < queries.unmasked_begin
                                          : kBand == kBandLocal && (m < queries.unmasked_begin || m >= queries.unmasked_end));
            if (masked)
                consumer.template tile<true>(i, m * Tr::kBlockM, n0, seq.len_q, gDqHead, seq.band, seq.len_k, p);
            else
                consumer.template tile<false>(i, m * Tr::kBlockM, n0, seq.len_q, gDqHead, seq.band, seq.len_k, p);
        }
        consumer.store(p, n0, h, b, seq);
    }
#endif
}

}  // namespace
}  // namespace sy_attn

// ---- host -----------------------------------------------------------------------------------------------
#include "hopper_bwd_launch.cuh"   // the launch (it names hopper_bwd_kernel) and the entry point's checks

extern "C" int sy_attn_hopper_bwd_rows(const sy_attn_bwd_params *params) {
    return sy_attn::hopper_bwd_rows(*params, sy_attn::wide_tiles(*params));
}

extern "C" int sy_attn_hopper_bwd(const sy_attn_bwd_params *params, void *stream) {
    using namespace sy_attn;
    const int status = check_hopper_bwd(params);
    if (status != kOk) return status;
    const sy_attn_bwd_params &p = *params;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    return p.dtype == SY_ATTN_BF16 ? launch_head_dim<__nv_bfloat16>(p, s) : launch_head_dim<__half>(p, s);
}
