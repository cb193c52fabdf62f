// Every tile size of the attention kernels, in one place, each with the reason it has its value.
#pragma once

namespace sy_attn {

// ---- naive: three kernels, S and P materialised in HBM ---------------------------------------------
struct NaiveTraits {
    // 16 x 16 output tiles per block of 16 x 16 threads: the textbook shared-memory GEMM; the point of
    // this rung is the N x N traffic, not the GEMM.
    static constexpr int kTile = 16;
    // One block of 256 threads per softmax row: enough loads in flight to stream a row of up to
    // 16384 floats at bandwidth with three passes (max, sum, write).
    static constexpr int kSoftmaxThreads = 256;
};

// ---- tiled: one fused kernel, fp32 math, one query row per thread ----------------------------------
template <int kHeadDim_>
struct TiledTraits {
    static constexpr int kHeadDim = kHeadDim_;
    // 64 query rows per block, one per thread: each thread keeps acc[kHeadDim] in registers
    // (128 floats at d = 128), so more rows per thread would spill.
    static constexpr int kBlockM = 64;
    // 32 keys per shared-memory tile: the 32 scores of a tile stay in registers next to acc, and a
    // tile of K and V in fp32 is 2 * 32 * 128 * 4 = 32 KiB at d = 128.
    static constexpr int kBlockN = 32;
    // sQ rows are padded by one float: each thread reads its own row, and a row stride of
    // kHeadDim + 1 words puts the 32 rows of a warp in 32 different banks.
    static constexpr int kQRowStride = kHeadDim + 1;
    static constexpr int kThreads = kBlockM;
    // sQ, sK, sV, and sP: each row's probabilities of the current tile, so the P V loop can run over
    // keys without unrolling (registers cannot be indexed by a rolled loop).
    static constexpr int kSmemBytes = (kBlockM * kQRowStride + 2 * kBlockN * kHeadDim + kBlockN * kBlockM) * 4;
    static_assert(kHeadDim % 4 == 0 && kHeadDim <= 128, "acc[kHeadDim] must fit in registers");
    static_assert(kSmemBytes <= 227 * 1024, "sm_80/sm_90 give a block at most 227 KiB of shared memory");
};

// ---- mma: FlashAttention-2 class, tensor cores --------------------------------------------------------
// A block owns kBlockM query rows of one (batch, head) and walks the keys kBlockN at a time. Each of
// kNWarps warps owns kBlockM / kNWarps rows = kMAtoms m16 row blocks; a warp computes its S = Q K^T
// slice, does the online softmax on the accumulator fragments and multiplies P (still in registers)
// by the shared V tile. Q, K and V live in shared memory with 16-byte chunks XOR-swizzled by row.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kStages_, bool kQInRegs_, int kMinBlocksPerSm_,
          bool kSkipUnitAlpha_ = false>
struct MmaTraits {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kNWarps = kNWarps_;
    static constexpr int kStages = kStages_;     // K/V tiles in flight: tile j+kStages-1 loads during tile j
    static constexpr bool kQInRegs = kQInRegs_;  // Q fragments loaded once instead of every key block
    static constexpr int kNThreads = 32 * kNWarps;
    // __launch_bounds__ occupancy hint: the register cap is 65536 / (kNThreads * kMinBlocksPerSm).
    static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
    // Skip acc *= alpha when a warp vote finds every alpha == 1 (softmax.cuh says when it pays).
    static constexpr bool kSkipUnitAlpha = kSkipUnitAlpha_;

    static constexpr int kRowsPerWarp = kBlockM / kNWarps;
    static constexpr int kMAtoms = kRowsPerWarp / 16;    // m16n8k16: 16 rows per A fragment
    static constexpr int kNTilesS = kBlockN / 8;         // n8 tiles of S per warp
    static constexpr int kKStepsQK = kHeadDim / 16;      // k16 steps of Q K^T
    static constexpr int kNTilesO = kHeadDim / 8;        // n8 tiles of O per warp
    static constexpr int kKStepsPV = kBlockN / 16;       // k16 steps of P V

    // Shared memory rows are kHeadDim 2-byte elements = kChunks 16-byte chunks (cp.async and
    // ldmatrix both move 16 bytes per thread). Chunk c of row r is stored at c ^ (r & 7): an
    // ldmatrix phase reads one logical chunk of 8 consecutive rows, which the XOR spreads over the
    // 8 different 16-byte bank groups of a 128-byte line, so no phase has a bank conflict (the
    // unswizzled layout, a 128- or 256-byte row stride, would be an 8-way conflict).
    static constexpr int kChunks = kHeadDim / 8;
    static constexpr int kSwizzleRows = 8;

    static constexpr int kSmemQ = kBlockM * kHeadDim;    // elements
    static constexpr int kSmemKV = kBlockN * kHeadDim;   // elements, one K or V tile
    static constexpr int kSmemBytes = 2 * (kSmemQ + 2 * kStages * kSmemKV);

    static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims 64 and 128 are instantiated");
    static_assert(kRowsPerWarp % 16 == 0 && kMAtoms >= 1, "a warp owns whole m16 row blocks");
    static_assert(kBlockN % 16 == 0, "P V steps over k16 slices of the key block");
    static_assert(kChunks % kSwizzleRows == 0, "the XOR swizzle permutes chunks within 128-byte lines");
    static_assert((kBlockM * kChunks) % kNThreads == 0 && (kBlockN * kChunks) % kNThreads == 0,
                  "every thread copies the same number of 16-byte chunks per tile");
    static_assert(kStages >= 2, "one K/V tile must load while another is computed on");
    static_assert(kSmemBytes <= 227 * 1024, "sm_80/sm_90 give a block at most 227 KiB of shared memory");
    // Registers per thread: acc kMAtoms*kNTilesO*4 + S kMAtoms*kNTilesS*4 (+ Q kMAtoms*kKStepsQK*4
    // when kept): under the 255 cap with room for addresses, or the kernel spills.
    static_assert(kMAtoms * (kNTilesO + kNTilesS) * 4 + (kQInRegs ? kMAtoms * kKStepsQK * 4 : 0) <= 200,
                  "fragments would not fit in 255 registers");
};

// The chosen tiles: the best of the sweep in docs/attention-gpu.md (H100, bf16, against SDPA flash),
// registers and spills from ptxas -v for sm_90a. Both use 4 warps of 2 m16 row blocks (32 query rows
// per warp): each K or V fragment that ldmatrix brings from shared memory feeds two mma, halving
// shared-memory reads per mma against 16 rows per warp (64-row blocks measured 5-15% slower).
//
// d = 64: 128 x 64 tiles, Q kept in registers: acc 64 + S 64 + Q 32 registers, no spills.
// 16 KiB Q + 2 stages x 2 x 8 KiB K/V = 48 KiB of shared memory; 2 blocks (8 warps) per SM by
// registers. 128 x 128 tiles spill (S alone is 128 registers); 128 x 32 tiles are 8% slower.
#ifndef SY_MMA_TRAITS_D64   // a definition before this header overrides, for the tile sweep only
#define SY_MMA_TRAITS_D64 MmaTraits<64, 128, 64, 4, 2, true, 2>
#endif
using MmaTraitsD64 = SY_MMA_TRAITS_D64;
// d = 128, causal: 128 x 64 tiles, Q re-read from shared memory each k16 step: acc alone is 128
// registers and S 64. It measured 1-3% faster than 128 x 32 tiles (no spills, twice the block
// iterations and barriers). Skipping unit-alpha rescales cut ptxas' spill from ~100 to ~50 bytes
// per thread and measured 3-5% faster here (neutral for the 256-row tile, a loss for d = 64).
// 32 KiB Q + 2 x 2 x 16 KiB K/V = 96 KiB.
#ifndef SY_MMA_TRAITS_D128_CAUSAL
#define SY_MMA_TRAITS_D128_CAUSAL MmaTraits<128, 128, 64, 4, 2, false, 2, true>
#endif
using MmaTraitsD128Causal = SY_MMA_TRAITS_D128_CAUSAL;
// d = 128, not causal: the same warp tile, 8 warps: 256 query rows share every K/V tile, halving
// the L2 -> shared traffic and cp.async work per row; 64 + 64 KiB of shared memory, one block of 8
// warps per SM (as many warps as 2 x 4 at 255 registers). Measured 2-8% faster at N >= 4096 not
// causal; causal it is 5-10% slower (256-row diagonal blocks leave more of the block idle).
#ifndef SY_MMA_TRAITS_D128
#define SY_MMA_TRAITS_D128 MmaTraits<128, 256, 64, 8, 2, false, 1>
#endif
using MmaTraitsD128 = SY_MMA_TRAITS_D128;
// With an attn_mask (attention_mask.cuh): 64 x 64 tiles, one m16 row block per warp, Q in registers (d = 128:
// acc 64 + S 32 + Q 32). The 128-row tiles spilled with the mask's loads on top (d = 128: 88 bytes,
// d = 64: 80-104); the mask lists are built at 64 x 64 granularity, so 128 x 32 is not an option.
#ifndef SY_MMA_TRAITS_D64_MASK
#define SY_MMA_TRAITS_D64_MASK MmaTraits<64, 64, 64, 4, 2, true, 2>
#endif
#ifndef SY_MMA_TRAITS_D128_MASK
#define SY_MMA_TRAITS_D128_MASK MmaTraits<128, 64, 64, 4, 2, true, 2>
#endif
using MmaTraitsD64Mask = SY_MMA_TRAITS_D64_MASK;
using MmaTraitsD128Mask = SY_MMA_TRAITS_D128_MASK;

// ---- backward (attention_bwd.cu): fp32 math, one thread per (row, 64 columns) ----------------------
// Shared-memory tile geometry of a head dim. A thread owns kCols = min(d, 64) columns of one row,
// so its dK and dV accumulators (2 * 64 floats) fit in registers; at d = 128 two neighbouring lanes
// share a row and add their partial dot products with one shuffle.
template <int kHeadDim_>
struct BwdTraits {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kSplit = kHeadDim > 64 ? kHeadDim / 64 : 1;
    static constexpr int kCols = kHeadDim / kSplit;
    // Rows are padded by one word after each kCols chunk: a row stride of kHeadDim + kSplit words
    // sends the 32 (row, chunk) pairs of a warp to 32 different banks, and the two chunks of one
    // broadcast row to two different banks.
    static constexpr int kRowStride = kHeadDim + kSplit;
    // dkdv: 64 keys per block (one per thread, or per lane pair), query tiles of 32 rows.
    static constexpr int kKeysPerBlock = 64;
    static constexpr int kQueryTile = 32;
    static constexpr int kDkdvThreads = kKeysPerBlock * kSplit;
    // sK, sV (the block's keys), sQ, sdO (one query tile), sdS (the tile's dS for dQ), LSE and D.
    static constexpr int kDkdvSmemBytes =
        (2 * kKeysPerBlock * kRowStride + 2 * kQueryTile * kRowStride + kQueryTile * kKeysPerBlock + 2 * kQueryTile) * 4;
    // dq: 64 query rows per block, key tiles of 32.
    static constexpr int kRowsPerBlock = 64;
    static constexpr int kKeyTile = 32;
    static constexpr int kDqThreads = kRowsPerBlock * kSplit;
    static constexpr int kDqSmemBytes = (2 * kRowsPerBlock * kRowStride + 2 * kKeyTile * kRowStride) * 4;
    static_assert(kHeadDim % 16 == 0 && kHeadDim <= 128, "kCols and the padding assume d in 16, 32, 64, 128");
    static_assert(kDkdvSmemBytes <= 227 * 1024 && kDqSmemBytes <= 227 * 1024, "227 KiB of shared memory per block");
};

// ---- backward (attention_mma_bwd.cu): tensor cores ---------------------------------------------------
// dkdv: a block owns kBlockN = 16 x kNWarps keys of one (batch, query head) and walks the query rows
// kBlockM at a time. Warp w owns keys 16w .. 16w + 15 and computes the transposed tiles S^T = K Q^T
// and dP^T = V dO^T directly: in the m16n8 accumulator layout the rows are keys, which is exactly the
// A-operand layout of dV += P^T dO and dK += dS^T Q, so P^T and dS^T never leave registers for those
// two products. dQ += dS K needs dS with queries as rows: dS^T goes through shared memory once
// (ldmatrix.trans reads it back transposed) and the warps split the tile's dQ into kDqRowBlocks m16
// row blocks x kDqColSplits column ranges, each added to dq_accum with fp32 atomics.
// dq (deterministic mode): a block owns kBlockM = 16 x kNWarps query rows and walks the keys kBlockN at
// a time, all in registers.
// d = 256 (kColSplits = 2): a warp's dK and dV over all of d would be 256 registers, so kColSplits warps
// share each 16 keys, warp w owning columns (w / kKeyWarps) * kHeadDim / kColSplits.. of dK and dV; of the
// pair, one computes the keys' S^T, the other dP^T, and they swap P^T and dS^T through shared memory.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kSlicesM_, int kMinBlocksPerSm_,
          int kColSplits_ = 1, int kDqPasses_ = 1>
struct MmaBwdTraits {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = kBlockM_;    // query rows per step (dkdv) or per block (dq)
    static constexpr int kBlockN = kBlockN_;    // keys per block (dkdv) or per step (dq)
    static constexpr int kNWarps = kNWarps_;
    static constexpr int kNThreads = 32 * kNWarps;
    static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;

    // dkdv computes S^T and dP^T over kSliceM queries at a time (kSlicesM slices per query tile):
    // each slice's fragments die before the next slice's are made.
    static constexpr int kSlicesM = kSlicesM_;
    static constexpr int kSliceM = kBlockM / kSlicesM;
    static constexpr int kNTilesSlice = kSliceM / 8;   // n8 tiles over a slice's queries (S^T, dP^T)
    static constexpr int kNTilesN = kBlockN / 8;       // n8 tiles over the keys (S, dP in dq)
    static constexpr int kNTilesD = kHeadDim / 8;      // n8 tiles over d (dQ in dq)
    // dkdv: warps per key group, warps per column split; a warp's n8 tiles of dK and of dV.
    static constexpr int kColSplits = kColSplits_;
    static constexpr int kKeyWarps = kNWarps / kColSplits;
    static constexpr int kNTilesDkv = kHeadDim / kColSplits / 8;
    static constexpr int kKStepsD = kHeadDim / 16;     // k16 steps over d (S, dP)
    static constexpr int kKStepsN = kBlockN / 16;      // k16 steps over the keys (dQ)
    // dkdv's dQ warp layout: m16 row blocks of the query tile x column ranges of d.
    static constexpr int kDqRowBlocks = kBlockM / 16;
    static constexpr int kDqColSplits = kNWarps / kDqRowBlocks > 0 ? kNWarps / kDqRowBlocks : 1;
    static constexpr int kDqCols = kHeadDim / kDqColSplits;
    // A warp's dQ columns go in kDqPasses passes (d = 256: 2 x 32 registers beside dK and dV's 128).
    static constexpr int kDqPasses = kDqPasses_;
    static constexpr int kNTilesDq = kDqCols / kDqPasses / 8;

    // Tiles are swizzled as the forward's (MmaTraits): 16-byte chunks XOR row % 8.
    static constexpr int kChunks = kHeadDim / 8;
    static constexpr int kSwizzleRows = 8;
    static constexpr int kRowBytes = kHeadDim * 2;
    static constexpr int kStages = 2;   // the next Q/dO (dkdv) or K/V (dq) tile loads during this one

    // dkdv: sK, sV [kBlockN][d] for the whole block; sQ, sdO [kStages][kBlockM][d]; sdS [kBlockN][kBlockM];
    // the log2-scaled LSE and D of the kStages query tiles.
    // (kColSplits = 2: the warp pairs' exchange of P^T and dS^T, 2 x 16 x kSliceM x 2 bytes per key group.)
    static constexpr int kDkdvSmemBytes = 2 * (2 * kBlockN * kHeadDim + 2 * kStages * kBlockM * kHeadDim + kBlockN * kBlockM)
                                          + 2 * kStages * kBlockM * 4 + (kColSplits > 1 ? kKeyWarps * 2 * 16 * kSliceM * 2 : 0);
    // dq: sQ, sdO [kBlockM][d]; sK, sV [kStages][kBlockN][d].
    static constexpr int kDqSmemBytes = 2 * (2 * kBlockM * kHeadDim + 2 * kStages * kBlockN * kHeadDim);

    static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head dims 64, 128 and 256 are instantiated");
    static_assert(kBlockM % 16 == 0 && kBlockN % 16 == 0 && kSliceM % 16 == 0, "whole m16 / k16 blocks");
    static_assert(kDqRowBlocks * kDqColSplits == kNWarps && kNTilesDq % 2 == 0 && kDqCols % (8 * kDqPasses) == 0,
                  "dQ: every warp one m16 x (16k) piece");
    static_assert(kNWarps % kColSplits == 0 && kNTilesDkv % 2 == 0, "whole warps per column split");
    static_assert((kNThreads / kChunks) % kSwizzleRows == 0 && kBlockM % (kNThreads / kChunks) == 0 &&
                  kBlockN % (kNThreads / kChunks) == 0, "load_tile_async: whole passes of rows that share row % 8");
    // The shared-memory budgets (227 KiB a block) and dS^T's row of one 128-byte line are asserted by the
    // kernel that uses the traits: d = 256's dq tiles would not fit dkdv's layout, nor the reverse.
};

// dkdv: 128 keys per block (8 warps of 16) x query tiles of 64. A warp cannot own a second m16 block
// of keys: its dK and dV accumulators are 2 x kNTilesD x 4 floats (128 registers at d = 128) and the
// transient S^T, dP^T or dQ come on top. 128 rather than 64 keys per block halves the dq_accum
// atomics (each block adds dS K over all its keys first) and the Q/dO traffic per key. At d = 128 a
// query tile runs as two slices of 32 queries, each slice's S^T and dP^T dying before the next (the
// whole tile's 32 + 32 registers over the 128 accumulators made ptxas spill). Shared memory: 145 KiB
// at d = 128, 81 KiB at d = 64; one block of 8 warps per SM either way (registers: 8 x 32 x ~230).
#ifndef SY_MMA_BWD_DKDV_TRAITS_D64   // a definition before this header overrides, for the tile sweep only
#define SY_MMA_BWD_DKDV_TRAITS_D64 MmaBwdTraits<64, 64, 128, 8, 1, 1>
#endif
#ifndef SY_MMA_BWD_DKDV_TRAITS_D128
#define SY_MMA_BWD_DKDV_TRAITS_D128 MmaBwdTraits<128, 64, 128, 8, 2, 1>
#endif
using MmaBwdDkdvTraitsD64 = SY_MMA_BWD_DKDV_TRAITS_D64;
using MmaBwdDkdvTraitsD128 = SY_MMA_BWD_DKDV_TRAITS_D128;
// dq: 64 query rows (4 warps of 16) x key tiles of 64: S and dP 32 registers each, dQ 64 at d = 128.
using MmaBwdDqTraitsD64 = MmaBwdTraits<64, 64, 64, 4, 1, 2>;
using MmaBwdDqTraitsD128 = MmaBwdTraits<128, 64, 64, 4, 1, 2>;
// d = 256, dkdv: 64 keys x query tiles of 64 on 8 warps, two per 16 keys (kColSplits: dK, dV 128 registers
// per warp as at d = 128), S^T or dP^T over the whole tile (one slice: 32 registers, each K or V fragment
// feeding 8 mma; two slices of 32 queries measured 2-5 % slower), dQ in two passes of 64 columns (one pass
// of 128: 0-3 % slower). Shared memory: K, V 2 x 32 KiB, Q, dO 2 stages x 2 x 32 KiB, dS^T 8 KiB, the
// pairs' exchange 16 KiB = 217 KiB (sm_90's 227 KiB per block; A100's 163 KiB would need smaller tiles).
// dkdv 249-251 registers, dq 249-252, 0 spill (ptxas -v, sm_90a).
#ifndef SY_MMA_BWD_DKDV_TRAITS_D256
#define SY_MMA_BWD_DKDV_TRAITS_D256 MmaBwdTraits<256, 64, 64, 8, 1, 1, 2, 2>
#endif
using MmaBwdDkdvTraitsD256 = SY_MMA_BWD_DKDV_TRAITS_D256;
// d = 256, dq: 128 query rows (8 warps of 16: 256 threads copy 8 rows of 32 chunks per pass, the swizzle's
// period) x key tiles of 32: dQ 128 registers, S and dP 16 each. 128 + 64 KiB of shared memory.
using MmaBwdDqTraitsD256 = MmaBwdTraits<256, 128, 32, 8, 1, 1>;

}  // namespace sy_attn
