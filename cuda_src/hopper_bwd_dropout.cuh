// The hopper backward's dropout keep bits (attention_hopper_bwd.cu): drawn by two idle warps of the producer
// warpgroup (produce_keep) into shared memory, one packed word per consumer thread and tile, read by the
// consumers bit by bit. keep_cols (attention_dropout.cuh) leaves each score's bit as the top bit of a byte,
// 4 scores a word: a thread's 32 scores of a 64-query tile take 8 registers; packed, one.
//
// Hardware facts served: the consumer warpgroups sit at their register limit (dV, dK: 128; S^T, dP^T: 64;
// the unmasked kernel peaks at 232), and Philox drawn there (8 keep words live across P^T's
// exponentials, ptxas interleaving both) sent the loop's own values to local memory (8-64 bytes in the
// versions tried); Philox is also integer-multiply issue work that the consumers' softmax competes for,
// while three of the producer warpgroup's four warps were idle. A multiply gathers four bytes' bits into
// a nibble (no carries: every partial product lands on a bit of its own), 3 instructions a word.
#pragma once

#include "attention_dropout.cuh"
#include "hopper_bwd_pipeline.cuh"

namespace sy_attn {

// Nibble of word w: byte b's keep bit (bit 8b + 7) at bit b. (t * 0x01020408) puts byte b's bit 8b at
// bit 24 + b, and every other product on a bit of its own below 24 or past 31.
__device__ __forceinline__ uint32_t keep_nibble(uint32_t w) {
    return (((w >> 7) & 0x01010101u) * 0x01020408u) >> 24;
}

// kSpans keep_cols words (one 32-query span each) in kSpans / 2 registers: span s, word w at bits
// 16 (s % 2) + 4 w of register s / 2.
template <int kSpans>
__device__ __forceinline__ void pack_keep(uint32_t (&bits)[kSpans / 2], const uint4 (&k)[kSpans]) {
    static_assert(kSpans % 2 == 0, "two spans a register");
#pragma unroll
    for (int s = 0; s < kSpans; ++s) {
        const uint32_t half = keep_nibble(k[s].x) | keep_nibble(k[s].y) << 4 | keep_nibble(k[s].z) << 8 |
                              keep_nibble(k[s].w) << 12;
        bits[s / 2] = s % 2 ? bits[s / 2] | half << 16 : half;
    }
}

// Score (n8 tile nt, register r) of a thread's S^T fragment (keep_cols's layout: span nt / 4, word
// cols_word, byte cols_byte) in pack_keep's bits.
template <int kRegs>
__device__ __forceinline__ bool keep_bit(const uint32_t (&bits)[kRegs], int nt, int r) {
    const int span = nt / 4;
    return (bits[span / 2] >> (16 * (span % 2) + 4 * cols_word(nt % 4, r) + cols_byte(nt % 4, r))) & 1u;
}

#ifdef SY_HOPPER_DEVICE_CODE
// Two idle warps of the producer warpgroup (warps 2 and 3) draw every tile's keep bits into shared memory,
// so the consumers pay no Philox at all: each stands in for one consumer warpgroup's four warps in turn
// (same lanes, so keep_cols's lane pairs and shuffles are the consumers' own) and stores each consumer
// thread's packed word where that thread reads it. A stage's words are written once the consumers have
// freed it (q_empty, as for the copies) and published by keep_full (64 arrivals: release, the consumers'
// wait acquires). Hardware fact: Philox is integer multiplies (the consumers' FMA/ALU issue slots, which
// the softmax already fills); these warps' issue slots are otherwise idle.
template <class Tr>
__device__ __forceinline__ void produce_keep(const BwdSmem<Tr> &sm, const Dropout &d, int n0, int m_first, int m_total,
                                             int wg, int lane) {
    constexpr int kSpans = Tr::kKStepsM / 2;
    BwdBarriers<Tr> &bar = *sm.bars;
    const int key0 = n0 + wg * Tr::kKeysPerWG + lane / 4;
    uint32_t *words0 = sm.keep() + wg * 128 + lane;
    for (int m = m_first, i = 0; m < m_total; ++m, ++i) {
        const int stage = i % Tr::kStages;
        mbar_wait(smem_addr(&bar.q_empty[stage]), ((i / Tr::kStages) & 1) ^ 1);
        uint32_t *words = words0 + stage * Tr::kKeepWords;
        // One Philox call at a time (a span of one consumer warp): these warps run at kProducerRegs.
#pragma unroll 1
        for (int warp = 0; warp < 4; ++warp) {
            uint32_t word = 0;
#pragma unroll 1
            for (int span = 0; span < kSpans; ++span) {
                const uint4 k = keep_cols(d, key0 + warp * 16, m * Tr::kBlockM + 32 * span, lane);
                word |= (keep_nibble(k.x) | keep_nibble(k.y) << 4 | keep_nibble(k.z) << 8 | keep_nibble(k.w) << 12)
                        << (16 * span);   // pack_keep's layout
            }
            words[warp * 32] = word;
        }
        mbar_arrive(smem_addr(&bar.keep_full[stage]));
    }
}
#endif  // SY_HOPPER_DEVICE_CODE

}  // namespace sy_attn
