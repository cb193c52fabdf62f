// The hopper backward's dropout keep bits (attention_hopper_bwd.cu) held one bit per score between the
// Philox call and their use: keep_cols (attention_dropout.cuh) leaves each score's bit as the top bit of a
// byte, 4 scores a word, so a thread's 32 scores of a 64-query tile take 8 registers; packed, one.
//
// Hardware fact served: the consumer warpgroups sit at their 240 registers (dV, dK: 128; S^T, dP^T: 64),
// and the keep words live across P^T's exponentials, where the unmasked kernel already peaks at 232;
// with 8 words there the loop's own values went to local memory (8-28 bytes). A multiply gathers four
// bytes' bits into a nibble (no carries: every partial product lands on a bit of its own), 3 instructions
// a word; each use then tests its bit.
#pragma once

#include "attention_dropout.cuh"

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

// A fragments of P^T (k16 step kk: n8 tiles 2 kk + reg / 2, fp32 registers 2 (reg % 2) + {0, 1} as the
// 16-bit halves) to P^T o Z, two scores a register, off pack_keep's bits (keep_bit).
// kPerHalf: each dropped half cleared by its own conditional AND instead of one AND with a two-bit mask
// (the same result). Which form ptxas schedules without local memory depends on the rest of the kernel:
// the fp16 hopper backward spilled 16 bytes with the mask form, the bf16 one 4 bytes with kPerHalf.
template <bool kPerHalf = false, int kSteps, int kRegs>
__device__ __forceinline__ void drop_packed(uint32_t (&a)[kSteps][4], const uint32_t (&bits)[kRegs]) {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
        for (int reg = 0; reg < 4; ++reg) {
            const int nt = 2 * kk + reg / 2;
            if constexpr (kPerHalf) {
                if (!keep_bit(bits, nt, 2 * (reg % 2))) a[kk][reg] &= 0xFFFF0000u;
                if (!keep_bit(bits, nt, 2 * (reg % 2) + 1)) a[kk][reg] &= 0x0000FFFFu;
            } else {
                a[kk][reg] &= (keep_bit(bits, nt, 2 * (reg % 2)) ? 0x0000FFFFu : 0u) |
                              (keep_bit(bits, nt, 2 * (reg % 2) + 1) ? 0xFFFF0000u : 0u);
            }
        }
}

// 0, computed from every register of a (P^T's A fragments: non-negative, so the top bit of each high half is
// 0), added to the address of a GEMM issued after a is made (dropout at d = 64: dP^T's), so that ptxas cannot
// sink a's exponentials below that issue, beside the GEMM's accumulators.
template <int kSteps>
__device__ __forceinline__ uint32_t nonnegative_dep(const uint32_t (&a)[kSteps][4]) {
    uint32_t x = 0;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) x |= a[kk][0] | a[kk][1] | a[kk][2] | a[kk][3];
    return x >> 31;
}

}  // namespace sy_attn
