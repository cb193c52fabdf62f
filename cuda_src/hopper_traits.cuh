// Tile sizes of the `hopper` kernel (attention_hopper.cu), each with the reason it has its value.
#pragma once

namespace sy_attn {

// A block owns kBlockM query rows of one (batch, head): one producer warpgroup issues the TMA copies
// of Q once and of K/V tiles through a kStages ring; kConsumerWGs consumer warpgroups own 64 rows
// each (wgmma's M is 64 per warpgroup) and walk the keys kBlockN at a time.
template <int kHeadDim_, int kBlockN_, int kStages_, int kConsumerWGs_, bool kQInRegisters_>
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
    // Q in registers (ldmatrix once per tile, S = Q K^T as a register-A wgmma): the tensor cores then
    // read only K from shared memory. Measured +1-3 % at d = 128 (docs/notes-hopper.md v8); at d = 64
    // the 16 extra registers do not fit three consumers' 160 (spills).
    static constexpr bool kQInRegisters = kQInRegisters_;
    // Lazy rescale (softmax.cuh, fold_lazy): a row's maximum moves only when it grows by more than
    // 2^8; otherwise O is not multiplied at all. 0 rescales on every growth (fold). Measured +3-4 %
    // at d = 128, +0-3 % at d = 64 (notes v8): the kernel runs at its power cap, where every
    // instruction saved is clock gained.
#ifndef SY_HOPPER_RESCALE_SLACK
#define SY_HOPPER_RESCALE_SLACK 8
#endif
    static constexpr int kRescaleSlackLog2 = SY_HOPPER_RESCALE_SLACK;

    static constexpr int kQBytes = kBlockM * kHeadDim * 2;
    static constexpr int kQPanelBytes = kBlockM * kRowBytes;
    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;  // one K or one V tile
    static constexpr int kKVPanelBytes = kBlockN * kRowBytes;
    // O leaves through shared memory and the copy engine (Consumer::store_staged): each warp stages its 16 rows
    // there, 128B-swizzled as Q, and one lane issues the tensor stores, so a warpgroup writes O with
    // kHeadDim / 16 stmatrix a thread instead of kHeadDim / 4 scattered 4-byte global stores and goes back to the
    // tensor cores sooner: at d = 128 +4-8 % at N = 1024 and +1-4 % at N = 4096, causal or not, in two runs
    // (docs/notes-hopper.md fwd21c); level at d = 64 on three consumers. Not on d = 64's 128-row tiles
    // (HopperTraitsD64Short), where it measured -3.5 % causal at N = 1024 in both runs; nor where it does not
    // fit beside one Q buffer and the ring (d = 256: 192 KiB already).
#ifndef SY_HOPPER_STAGE_O
#define SY_HOPPER_STAGE_O 1
#endif
    static constexpr int kOBytesPerWG = kRowsPerWG * kHeadDim * 2;
    static constexpr bool kStageO = SY_HOPPER_STAGE_O && !(kHeadDim == 64 && kConsumerWGs == 2) &&
                                    1024 + 2 * kStages * kKVBytes + kConsumerWGs * kOBytesPerWG + 256 +
                                    8 * 128 * kConsumerWGs + kQBytes <= 227 * 1024;
    static constexpr int kOBytes = kStageO ? kConsumerWGs * kOBytesPerWG : 0;
    // 1024 bytes of slack: the dynamic shared memory base is only 16-byte aligned, the swizzle atoms
    // must start on 1024-byte boundaries (wgmma descriptors carry no base offset); 256 for the
    // mbarriers; 8 bytes per consumer thread for the stores that pin the softmax before a wait
    // (hopper_fwd_consumer.cuh, Consumer::pin_softmax).
    static constexpr int kSmemBytesButQ = 1024 + 2 * kStages * kKVBytes + kOBytes + 256 + 8 * 128 * kConsumerWGs;
    // Tiles alternate between two Q buffers, so that the next tile's Q lands while the current one's S
    // GEMMs still read theirs, where shared memory has room (d = 64). Q in registers frees its buffer
    // at the start of a tile, so one is enough (d = 128); d = 256 has room for one only (there the
    // consumers wait for the next tile's Q at each tile boundary).
    static constexpr int kQBuffers = kQInRegisters || kSmemBytesButQ + 2 * kQBytes > 227 * 1024 ? 1 : 2;
    static constexpr int kSmemBytes = kSmemBytesButQ + kQBuffers * kQBytes;

    // setmaxnreg: the producer only computes coordinates; the consumers hold O (d/2 fp32), S and P
    // (kBlockN/2 fp32 + kBlockN/4 b32). 128 x 24 + 256 x 240 = 64512 (two consumers) or
    // 128 x 24 + 384 x 160 = 64512 (three) <= the SM's 65536 registers; counts are multiples of 8.
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 240 : 160;
    // (O, S, P and Q: 64 + 64 + 32 + 32 at d = 128, two consumers; 32 + 64 + 32 at d = 64, three.)

    static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head dims 64, 128 and 256 are instantiated");
    static_assert(kBlockN == 64 || kBlockN == 128 || kBlockN == 176 || kBlockN == 192 || kBlockN == 256,
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
// d = 64: 192 x 128 tiles (three consumer warpgroups), 4 stages: Q 2 x 24 KiB + 4 x 2 x 16 KiB = 176 KiB.
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
#ifndef SY_HOPPER_D64_Q_IN_REGISTERS
#define SY_HOPPER_D64_Q_IN_REGISTERS 0
#endif
using HopperTraitsD64 = HopperTraits<64, SY_HOPPER_D64_BLOCK_N, SY_HOPPER_D64_STAGES, SY_HOPPER_D64_CONSUMERS,
                                     SY_HOPPER_D64_Q_IN_REGISTERS>;
// d = 64 at short query lengths: 128 x 128 tiles (two consumers, Q in registers, 4 stages: Q 16 KiB + 4 x 2 x
// 16 KiB = 144 KiB). 192-row tiles waste the most where sequences are short: at N = 1024 the last query
// block holds 64 rows of 192 (12.5 % of the work is padding), and causal, the tall tiles' diagonal blocks
// compute 1.5x the scores 128-row tiles do (32 blocks of 192 x 128 against 36 of 128 x 128 for 524 K
// visible scores per head). Used up to SY_HOPPER_D64_SHORT_MAX_Q query rows (0: never), not varlen or dropout.
// Measured (docs/notes-hopper.md, fwd21) at N = 1024: +15 % causal, +3 % not; at N = 2048 it loses 7 % not
// causal (the third consumer's overlap is worth more than 3 % of padding there), so the switch is at 1024.
#ifndef SY_HOPPER_D64_SHORT_MAX_Q
#define SY_HOPPER_D64_SHORT_MAX_Q 1024
#endif
constexpr int kHopperD64ShortMaxQ = SY_HOPPER_D64_SHORT_MAX_Q;
using HopperTraitsD64Short = HopperTraits<64, 128, 4, 2, true>;
// d = 128: 128 x 128 tiles, 2 stages (FlashAttention-3's choice), Q in registers: Q 32 KiB + 2 x 2 x 32 KiB
// = 160 KiB.
// Measured against 128 x 176 (+0-4% not causal, -3-9% causal: within run-to-run noise at N >= 4096)
// and 3 stages (no gain).
#ifndef SY_HOPPER_D128_BLOCK_N
#define SY_HOPPER_D128_BLOCK_N 128
#endif
#ifndef SY_HOPPER_D128_STAGES
#define SY_HOPPER_D128_STAGES 2
#endif
#ifndef SY_HOPPER_D128_Q_IN_REGISTERS
#define SY_HOPPER_D128_Q_IN_REGISTERS 1
#endif
using HopperTraitsD128 = HopperTraits<128, SY_HOPPER_D128_BLOCK_N, SY_HOPPER_D128_STAGES, 2, SY_HOPPER_D128_Q_IN_REGISTERS>;
// d = 256: 128 x 64 tiles, 2 stages, Q in shared memory (one buffer): Q 64 KiB + 2 x 2 x 32 KiB = 192 KiB.
// O alone is 128 registers a thread (64 x 256 fp32 over 128 threads); S and P of 64 keys add 48, Q in
// registers would add 64 more: over 240. FlashAttention-3 takes 128 x 80 here.
#ifndef SY_HOPPER_D256_BLOCK_N
#define SY_HOPPER_D256_BLOCK_N 64
#endif
using HopperTraitsD256 = HopperTraits<256, SY_HOPPER_D256_BLOCK_N, 2, 2, false>;

}  // namespace sy_attn
