// Tile sizes of the `hopper` kernel (attention_hopper.cu), each with the reason it has its value.
#pragma once

namespace sy_attn {

// A block owns kBlockM query rows of one (batch, head): one producer warpgroup issues the TMA copies
// of Q once and of K/V tiles through a kStages ring; kConsumerWGs consumer warpgroups own 64 rows
// each (wgmma's M is 64 per warpgroup) and walk the keys kBlockN at a time.
template <int kHeadDim_, int kBlockN_, int kStages_, int kConsumerWGs_ = 2>
struct HopperTraits {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kStages = kStages_;
    // Consumer warpgroups take turns at the tensor cores: while one runs its softmax (MUFU/FMA
    // pipes), the others' GEMMs keep the tensor cores busy. Two at d = 128 (a third would not fit
    // O's 64 registers in 160); three fit at d = 64, where exponentials weigh as much as the GEMMs.
    static constexpr int kConsumerWGs = kConsumerWGs_;
    static constexpr int kRowsPerWG = 64;
    static constexpr int kBlockM = kConsumerWGs * kRowsPerWG;
    static constexpr int kThreads = 128 * (1 + kConsumerWGs);

    // 128-byte swizzle (the bank-conflict-free layout both TMA and wgmma speak) caps a TMA box row
    // at 128 bytes = 64 16-bit elements: a head of d columns is kept as d / 64 panels of
    // [rows][64], each row 128 bytes, 8-row swizzle atoms of 1024 bytes.
    static constexpr int kPanelCols = 64;
    static constexpr int kRowBytes = kPanelCols * 2;
    static constexpr int kAtomBytes = 8 * kRowBytes;
    static constexpr int kPanels = kHeadDim / kPanelCols;
    static constexpr int kKSteps = kHeadDim / 16;          // k16 steps of S = Q K^T
    static constexpr int kKStepsPerPanel = kPanelCols / 16;
    static constexpr int kPVSteps = kBlockN / 16;           // k16 steps of O += P V

    static constexpr int kQBytes = kBlockM * kHeadDim * 2;
    static constexpr int kQPanelBytes = kBlockM * kRowBytes;
    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;  // one K or one V tile
    static constexpr int kKVPanelBytes = kBlockN * kRowBytes;
    // 1024 bytes of slack: the dynamic shared memory base is only 16-byte aligned, the swizzle atoms
    // must start on 1024-byte boundaries (wgmma descriptors carry no base offset); 256 for the
    // mbarriers; 8 bytes per consumer thread for the stores that pin the softmax before a wait
    // (attention_hopper.cu, Consumer::pin_softmax).
    static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kKVBytes + 256 + 8 * 128 * kConsumerWGs;

    // The persistent grid hides a tile's prologue (Q load, the first S GEMM with nothing to overlap)
    // and epilogue behind the next tile's loads; that pays where tiles are short. Measured (bf16,
    // H100, both head dims, docs/notes-hopper.md v4) against one block per tile: +2-10% at N <= 2048
    // (<= 16 key blocks), even at 4096, -1-7% at 8192.
    static constexpr int kPersistentMaxKeyBlocks = 16;

    // setmaxnreg: the producer only computes coordinates; the consumers hold O (d/2 fp32), S and P
    // (kBlockN/2 fp32 + kBlockN/4 b32). 128 x 24 + 256 x 240 = 64512 (two consumers) or
    // 128 x 24 + 384 x 160 = 64512 (three) <= the SM's 65536 registers; counts are multiples of 8.
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 240 : 160;

    static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims 64 and 128 are instantiated");
    static_assert(kBlockN == 64 || kBlockN == 128 || kBlockN == 176 || kBlockN == 192,
                  "the S GEMM is generated for n = 64, 128, 176 and 192 (hopper_wgmma.cuh)");
    static_assert(kStages >= 2, "one K/V tile must load while another is computed on");
    static_assert(kConsumerWGs == 2 || kConsumerWGs == 3, "named barriers 1..kConsumerWGs, registers above");
    static_assert(kSmemBytes <= 227 * 1024, "sm_90 gives a block at most 227 KiB of shared memory");
    static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= 65536, "register file");
    static_assert(kBlockN <= 256 && kBlockM <= 256, "a TMA box spans at most 256 rows");
};

// The defaults can be overridden at compile time (-DSY_HOPPER_D128_BLOCK_N=176 ...) for the tile
// sweep only: one macro per number, since nvcc splits a -D value at commas.
//
// d = 64: 192 x 128 tiles (three consumer warpgroups), 4 stages: Q 24 KiB + 4 x 2 x 16 KiB = 152 KiB.
// The third consumer measured +8-13% at N >= 4096 over two (exponentials cost as much as the GEMMs
// at d = 64, so a third warpgroup's softmax has tensor-core time to hide behind); 2 stages measured
// the same as 4; 192 x 176 spills at 160 registers.
#ifndef SY_HOPPER_D64_BLOCK_N
#define SY_HOPPER_D64_BLOCK_N 128
#endif
#ifndef SY_HOPPER_D64_STAGES
#define SY_HOPPER_D64_STAGES 4
#endif
#ifndef SY_HOPPER_D64_CONSUMERS
#define SY_HOPPER_D64_CONSUMERS 3
#endif
using HopperTraitsD64 = HopperTraits<64, SY_HOPPER_D64_BLOCK_N, SY_HOPPER_D64_STAGES, SY_HOPPER_D64_CONSUMERS>;
// d = 128: 128 x 128 tiles, 2 stages (FlashAttention-3's choice): Q 32 KiB + 2 x 2 x 32 KiB = 160 KiB.
// Measured against 128 x 176 (+0-4% not causal, -3-9% causal: within run-to-run noise at N >= 4096)
// and 3 stages (no gain).
#ifndef SY_HOPPER_D128_BLOCK_N
#define SY_HOPPER_D128_BLOCK_N 128
#endif
#ifndef SY_HOPPER_D128_STAGES
#define SY_HOPPER_D128_STAGES 2
#endif
using HopperTraitsD128 = HopperTraits<128, SY_HOPPER_D128_BLOCK_N, SY_HOPPER_D128_STAGES>;

}  // namespace sy_attn
