// Dropout inside the fused attention kernels (hopper and mma, forward and backward): the keep-mask of
// every score is a pure function of (seed, offset, batch b, query head h, query row i, key column j),
// drawn from a counter-based generator, so the backward regenerates it instead of storing N^2 bits.
//
// Generator: Philox4x32-7 (Salmon et al., SC'11; the round count of FlashAttention-2's dropout, see
// kPhiloxRounds), keyed by the seed. One call gives 128 bits; one byte decides one score: kept iff byte < threshold,
// threshold = 256 - round(256 p) (at least one of 256 values dropped), so the drop probability is p
// rounded to a multiple of 1/256, FlashAttention-2's granularity (torch's flash backend); kept
// probabilities are scaled by 1 / (1 - p) as torch's dropout does.
//
// Counter: words 0-1 = offset / 4 + b * Hq + h (64-bit; torch's CUDA generator hands out offsets in
// 32-bit values, 4 per counter step: the launch reserves 4 * B * Hq of them, so its counters are
// disjoint from those of every other torch kernel that draws from the same generator), word 2 the
// row group, word 3 the column group:
//   row group = (i / 16) * 4 + (i % 8) / 2      column group = (j / 16) * 4 + (j % 8) / 2
// A group is 16 scores: rows {i0, i0 + 1} + {0, 8}, columns {j0, j0 + 1} + {0, 8}. Score (i, j) is
//   byte (i % 16 / 8) * 2 + j % 2   of word ((i % 2) ^ (j / 16 % 2)) * 2 + j % 16 / 8.
//
// Hardware fact served: Philox is seven rounds of two 32 x 32 -> 64-bit multiplies, the expensive
// part, so each call must feed 16 scores, and the tensor-core fragments decide which 16 a thread
// holds. In the m16n8 accumulator layout (mma.sync, and each warp of a wgmma m64 tile) lane l holds
// rows l/4, l/4 + 8 and columns 2(l%4), 2(l%4) + 1 of every n8 tile: the forward's S (rows = queries)
// gives a thread two query rows, the backward's S^T (rows = keys) two key rows, and the only 16
// scores both see whole are a group shared by lanes l and l ^ 4. So lane l makes one group's 16
// bytes, lane l ^ 4 the next span's, and they swap the halves the other holds (two shuffles): every
// lane pays one Philox call per 16 of its scores in either layout. The word index's XOR with the group's
// 16-column parity makes the forward's split static: a lane keeps words 0-1 of its own group and sends
// words 2-3 whichever its row parity (no select before or after the shuffle). The 16-bit P of a
// wgmma/mma A fragment is masked two scores at a time: PRMT's sign-replicate mode widens a byte's keep
// bit to a 16-bit half (taking the own or the received word by its selector), one AND per pair, no
// per-score branch.
#pragma once

#include "attention_common.cuh"

namespace sy_attn {

// Philox4x32 with kRounds rounds (the kernels use kPhiloxRounds). Each round's two products are one
// 32 x 32 -> 64-bit multiply each (IMAD.WIDE.U32: both halves in one instruction, where __umulhi plus a
// low multiply issue two).
// kAsm: PTX mul.wide.u32 and a mov.b64 split. Written as a 64-bit C product and shifted, ptxas adds a
// VIADD of a zero uniform register per product (two more instructions a round); the C form is kept for the
// d = 64 hopper forward without a band, whose register allocation it suits (ptxas -v: 0 bytes spilled
// there, 28 with kAsm).
template <bool kAsm>
__host__ __device__ __forceinline__ uint2 mul_wide(uint32_t a, uint32_t b) {   // (low, high) words of a * b
#ifdef __CUDA_ARCH__
    if constexpr (kAsm) {
        uint2 r;
        asm("{\n\t.reg .b64 t;\n\tmul.wide.u32 t, %2, %3;\n\tmov.b64 {%0, %1}, t;\n\t}" : "=r"(r.x), "=r"(r.y) : "r"(a), "r"(b));
        return r;
    }
#endif
    const uint64_t t = static_cast<uint64_t>(a) * b;
    return make_uint2(static_cast<uint32_t>(t), static_cast<uint32_t>(t >> 32));
}

template <int kRounds, bool kAsm = true>
__host__ __device__ __forceinline__ uint4 philox4x32(uint4 c, uint32_t k0, uint32_t k1) {
#pragma unroll
    for (int round = 0; round < kRounds; ++round) {
        const uint2 p0 = mul_wide<kAsm>(0xD2511F53u, c.x), p1 = mul_wide<kAsm>(0xCD9E8D57u, c.z);
        c = make_uint4(p1.y ^ c.y ^ k0, p1.x, p0.y ^ c.w ^ k1, p0.x);
        k0 += 0x9E3779B9u;   // the Weyl key schedule
        k1 += 0xBB67AE85u;
    }
    return c;
}

// The same rounds with the keys of each round given (DropoutConsts): the same words.
template <int kRounds, bool kAsm = true>
__host__ __device__ __forceinline__ uint4 philox4x32_keyed(uint4 c, const uint32_t (&k0)[kRounds], const uint32_t (&k1)[kRounds]) {
#pragma unroll
    for (int round = 0; round < kRounds; ++round) {
        const uint2 p0 = mul_wide<kAsm>(0xD2511F53u, c.x), p1 = mul_wide<kAsm>(0xCD9E8D57u, c.z);
        c = make_uint4(p1.y ^ c.y ^ k0[round], p1.x, p0.y ^ c.w ^ k1[round], p0.x);
    }
    return c;
}

// Seven rounds: Philox4x32-7, the round count of FlashAttention-2's dropout (csrc/flash_attn/src/philox.cuh,
// torch's flash backend), which Salmon et al. (SC'11) report passing TestU01's BigCrush; ten is Random123's
// default, the extra rounds a safety margin. The rounds are most of the dropout's integer work (docs/
// notes-dropout.md, session dropfwd20b).
constexpr int kPhiloxRounds = 7;

// The launch's dropout: key, the head's counter base, the byte threshold in all four bytes, 1 / (1 - p).
struct Dropout {
    uint32_t k0, k1, ctr0, ctr1, threshold4;
    float rp;
};

// threshold = 256 - round(256 p), in [0, 255] for p in (0, 1).
__host__ __device__ __forceinline__ uint32_t dropout_threshold(float p) {
    const int dropped = min(max(static_cast<int>(p * 256.f + 0.5f), 1), 256);
    return static_cast<uint32_t>(256 - dropped);
}

// From a launch's parameters (either struct: dropout_p, dropout_seed, dropout_offset) for head (b, h).
// kPin: p and the offset pass a volatile move on the device, so the threshold's float-to-int steps and the
// counter's 64-bit arithmetic run per call (a few instructions a tile) instead of being hoisted into
// registers live across the kernel's loops (the hopper backward: 4-16 bytes spilled with them hoisted).
template <bool kPin = false, class Params>
__device__ __forceinline__ Dropout make_dropout(const Params &p, int b, int h) {
    float dropout_p = p.dropout_p;
    uint64_t offset = p.dropout_offset;
#ifdef __CUDA_ARCH__
    if constexpr (kPin) asm volatile("mov.b32 %0, %0;\n\tmov.b64 %1, %1;" : "+f"(dropout_p), "+l"(offset));
#endif
    Dropout d;
    d.k0 = static_cast<uint32_t>(p.dropout_seed);
    d.k1 = static_cast<uint32_t>(p.dropout_seed >> 32);
    const uint64_t ctr = offset / 4 + static_cast<uint64_t>(b) * p.heads_q + h;
    d.ctr0 = static_cast<uint32_t>(ctr);
    d.ctr1 = static_cast<uint32_t>(ctr >> 32);
    d.threshold4 = dropout_threshold(dropout_p) * 0x01010101u;
    d.rp = 1.f / (1.f - dropout_p);
    return d;
}

// The hopper forward's launch constants (a kernel parameter, made on the host by dropout_consts): Philox's
// round keys and the byte compare's bounds. Hardware fact served: a kernel parameter lives in the constant
// bank, which LOP3 and HSET2 read as an operand, so the Weyl key schedule costs neither an add per round nor
// a uniform register (ptxas held the 14 keys in uniform registers, and recomputed them in the loop, 13 adds
// an iteration, wherever a branch changed its allocation).
struct DropoutConsts {
    uint32_t k0[kPhiloxRounds], k1[kPhiloxRounds];   // round r: seed + r * (0x9E3779B9, 0xBB67AE85)
    uint32_t threshold4;                             // make_dropout's
    uint32_t bound;                                  // bf16_bound's
    uint64_t counter0;                               // offset / 4: head (b, h) counts on from it by b * Hq + h
};

template <bool kAsm = true>
__host__ __device__ __forceinline__ uint4 dropout_group(const Dropout &d, uint32_t row_group, uint32_t col_group) {
    return philox4x32<kPhiloxRounds, kAsm>(make_uint4(d.ctr0, d.ctr1, row_group, col_group), d.k0, d.k1);
}

__host__ __device__ __forceinline__ uint32_t row_group_of(int i) { return (i / 16) * 4 + (i % 8) / 2; }

// Per byte of x: its top bit set iff byte < the threshold's byte (SWAR unsigned compare, no borrow
// crosses a byte: (x | 0x80) - (t & 0x7f) stays in 1..255 per byte). Only the top bits are defined (every
// reader takes bit 7 of a byte: PRMT's sign-replicate mode or a shift): three instructions a word.
__device__ __forceinline__ uint32_t keep_bits(uint32_t x, uint32_t t4) {
    constexpr uint32_t kHigh = 0x80808080u;
    const uint32_t low_ge = (x | kHigh) - (t4 & ~kHigh);   // top bit: x's low 7 bits >= t's
    return (~x & t4) | (~(x ^ t4) & ~low_ge);
}

// PRMT, sign-replicate mode (a selector nibble with bit 3 set copies the top bit of its byte).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
    return r;
}

// ---- rows = queries (the forwards' S, the mma dQ pass) ----------------------------------------------------
// A thread's keep bits in row `row` (its first: l/4 of a 16-row block; the second is +8) over the 32 keys
// from col0 (a multiple of 32), as drawn: (own0, own1) = words 0, 1 of the group this lane makes (keys col0
// + 16 e .. + 15, e = row % 2 = (lane / 4) % 2), (got0, got1) = the partner's words 2, 3 (the other 16
// keys). Word t is n8 tile t of its 16 keys, byte r for fragment register r of that tile (rows r / 2,
// columns r % 2), as keep_bits.
template <bool kAsm = true>
__device__ __forceinline__ uint4 keep_rows_drawn(const Dropout &d, int row, int col0, int lane) {
    const int e = (lane >> 2) & 1;
    const uint4 w = dropout_group<kAsm>(d, row_group_of(row), (col0 / 16 + e) * 4 + lane % 4);
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, keep_bits(w.z, d.threshold4), 4);
    const uint32_t got1 = __shfl_xor_sync(0xffffffffu, keep_bits(w.w, d.threshold4), 4);
    return make_uint4(keep_bits(w.x, d.threshold4), keep_bits(w.y, d.threshold4), got0, got1);
}

// The same in key order: word nt = n8 tile nt of the span (keys col0 + 8 nt ..).
__device__ __forceinline__ uint4 keep_rows(const Dropout &d, int row, int col0, int lane) {
    const uint4 k = keep_rows_drawn(d, row, col0, lane);
    return (lane >> 2) & 1 ? make_uint4(k.z, k.w, k.x, k.y) : k;
}

// Keep bits of the keys col0 .. col0 + 32 * kSpans - 1 for row `row`: kSpans keep_rows_drawn words.
// kPinRow: the row passes a volatile move. Philox's first three rounds depend on the row group only, and
// ptxas hoists them out of the key-block loop, registers live across the whole tile (the d = 128 hopper
// forward spilled 12 bytes); recomputed per call they are shared by its kSpans groups. (The d = 64
// forward, drawing after the P V wait, spills 8 bytes with it and none without.) kAsm: mul_wide's.
template <int kSpans, bool kPinRow = false, bool kAsm = true>
__device__ __forceinline__ void keep_rows_all(uint4 (&k)[kSpans], const Dropout &d, int row, int col0, int lane) {
    if constexpr (kPinRow) asm volatile("mov.b32 %0, %0;" : "+r"(row));
#pragma unroll
    for (int s = 0; s < kSpans; ++s) k[s] = keep_rows_drawn<kAsm>(d, row, col0 + 32 * s, lane);
}

// ---- the byte compare in bf16 (the hopper forward) --------------------------------------------------
// keep_rows_drawn compares every word before the shuffle, four bytes in three integer instructions
// (keep_bits), and a PRMT per register then widens the bits. The hopper forward instead shuffles the raw
// words (bytes_rows_all) and compares after its PRMT: the selector copies each byte r into both bytes of
// its 16-bit half, (r, r), and one HSET2 (set.ge.u32.bf16x2) compares a register's two halves at once,
// 0xFFFF or 0. Hardware fact served: the compare drops from 12 instructions a call (8 of them integer-ALU
// LOP3s) to 8 half-precision ones (the FMA pipe), off the ALU that the Philox XORs, the masking ANDs and the
// softmax's FMNMX share.
// As a bf16, (r, r) is +0 for r = 0, positive and growing with r for r < 128, negative and falling with r
// for 128 <= r <= 254 (never -0, never subnormal), NaN for r = 255 only. So for t > 128 (p < 0.5):
// r < t  <=>  (r, r) >= (t - 1, t - 1), and r = 255 (never kept) compares false. For t <= 128 no bound
// separates [0, t) from the negative half: there the words are compared as keep_rows_drawn does, inverted
// (top bit = drop), and (d, d) >= +0 reads a byte's clear top bit (a rare branch: p >= 0.5).

// The bound bf16_keep compares with: (t - 1, t - 1) in both halves for t > 128, +0 where the words hold
// drop bits (t <= 128).
__host__ __device__ __forceinline__ uint32_t bf16_bound(uint32_t threshold4) {
    return (threshold4 & 0xFFu) > 128u ? threshold4 - 0x01010101u : 0u;
}

// DropoutConsts for dropout_p, the seed and the offset (host, at the launch).
__host__ __device__ __forceinline__ DropoutConsts dropout_consts(float dropout_p, uint64_t seed, uint64_t offset) {
    DropoutConsts c;
    for (int r = 0; r < kPhiloxRounds; ++r) {
        c.k0[r] = static_cast<uint32_t>(seed) + r * 0x9E3779B9u;
        c.k1[r] = static_cast<uint32_t>(seed >> 32) + r * 0xBB67AE85u;
    }
    c.threshold4 = dropout_threshold(dropout_p) * 0x01010101u;
    c.bound = bf16_bound(c.threshold4);
    c.counter0 = offset / 4;
    return c;
}

// 0xFFFF in each 16-bit half of x that is, as a bf16, >= the same half of bound (NaN: 0). cuda_bf16.hpp's
// __hge2_mask is this instruction on sm_90 (its fallback spells out the meaning: half 0 = .x, __hge).
__device__ __forceinline__ uint32_t bf16_keep(uint32_t x, uint32_t bound) {
    uint32_t r;
    asm("set.ge.u32.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(bound));
    return r;
}

// kSpans calls' words for the keys col0 .. col0 + 32 * kSpans - 1 (col0 a multiple of 32) of row group
// row_group of head = b * Hq + h, in keep_rows_drawn's order, not compared (bytes_to_drop_bits does that where
// t <= 128). Span s's column group is (col0 / 16 + e) * 4 + lane % 4 + 8 s = col0 / 4 + lane % 8, XOR 8 s
// (bits 3-4 are clear): one LOP3 a call. kPinRow, kAsm: keep_rows_all's.
template <int kSpans, bool kPinRow = false, bool kAsm = true>
__device__ __forceinline__ void bytes_rows_all(uint4 (&k)[kSpans], const DropoutConsts &c, uint32_t head, uint32_t row_group,
                                               uint32_t col0, uint32_t lane) {
    if constexpr (kPinRow) asm volatile("mov.b32 %0, %0;" : "+r"(row_group));
    const uint64_t counter = c.counter0 + head;   // make_dropout's, offset / 4 made on the host
    const uint32_t ctr0 = static_cast<uint32_t>(counter), ctr1 = static_cast<uint32_t>(counter >> 32);
    const uint32_t col_group0 = col0 / 4 + lane % 8;
#pragma unroll
    for (int s = 0; s < kSpans; ++s) {
        const uint4 w =
            philox4x32_keyed<kPhiloxRounds, kAsm>(make_uint4(ctr0, ctr1, row_group, col_group0 ^ (8u * s)), c.k0, c.k1);
        k[s] = make_uint4(w.x, w.y, __shfl_xor_sync(0xffffffffu, w.z, 4), __shfl_xor_sync(0xffffffffu, w.w, 4));
    }
}

// t <= 128 (p >= 0.5): bytes_rows_all's words to drop bits (keep_bits inverted), for bf16_keep against +0. A
// rare branch, at the masking (after the P V wait), where it leaves the draw one basic block with the
// softmax; at the end of the draw it split that block (ptxas -v, d = 128, round keys then in uniform
// registers: 61 instructions more an iteration, the keys recomputed in the loop).
template <int kSpans>
__device__ __forceinline__ void bytes_to_drop_bits(uint4 (&k)[kSpans], const DropoutConsts &d) {
    if (d.bound != 0u) return;
#pragma unroll
    for (int s = 0; s < kSpans; ++s)
        k[s] = make_uint4(~keep_bits(k[s].x, d.threshold4), ~keep_bits(k[s].y, d.threshold4), ~keep_bits(k[s].z, d.threshold4),
                          ~keep_bits(k[s].w, d.threshold4));
}

// 1.0 in each bf16 half of x that is >= the same half of bound, 0.0 otherwise (NaN: 0.0): bf16_keep's compare with
// a number for a result, for a multiply on the FMA pipe instead of an AND on the integer ALU.
__device__ __forceinline__ uint32_t bf16_keep_one(uint32_t x, uint32_t bound) {
    uint32_t r;
    asm("set.ge.bf16x2.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(bound));
    return r;
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

// One register's mask from words a, b: the selected bytes' keep bits widened (keep_rows_drawn's words), or
// the selected bytes as (r, r) halves compared with bound (bytes_rows_all's).
template <bool kBf16Compare>
__device__ __forceinline__ uint32_t rows_mask(uint32_t a, uint32_t b, uint32_t selector, uint32_t bound) {
    if constexpr (kBf16Compare) return bf16_keep(prmt(a, b, selector), bound);
    else return prmt(a, b, selector);
}

// One register x of P with its dropped halves zeroed: AND with rows_mask's mask; kMul (bytes_rows_all's words, bf16 P
// only): a bf16x2 multiply with bf16_keep_one's 1.0 / 0.0 (P is finite and >= 0: P * 1 = P, P * 0 = +0, the AND's
// results), an FMA-pipe instruction in place of an integer-ALU one.
template <bool kBf16Compare, bool kMul>
__device__ __forceinline__ void drop_register(uint32_t &x, uint32_t a, uint32_t b, uint32_t selector, uint32_t bound) {
    if constexpr (kMul) x = bf16x2_mul(x, bf16_keep_one(prmt(a, b, selector), bound));
    else x &= rows_mask<kBf16Compare>(a, b, selector, bound);
}

// A fragments of P (k16 steps, 16-bit pairs: step kk = n8 tiles 2kk, 2kk + 1, registers (tile, rows) =
// (2kk, g), (2kk, g+8), (2kk+1, g), (2kk+1, g+8)) masked by keep_rows_drawn's words: dropped scores to 0.
// Step 2s takes the own words on lanes of e = 0 and the received ones on e = 1, step 2s + 1 the reverse:
// PRMT picks from {a, b} by its selector (bytes 4-7 = b), so the choice is the selector's, set per lane
// once (no select per word). kBf16Compare: the words are bytes_rows_all's (not compared yet) and each
// register's mask is its PRMT's two (r, r) halves compared at once (bf16_keep, below); kMul: drop_register.
template <int kSteps, bool kBf16Compare = false, bool kMul = false>
__device__ __forceinline__ void dropout_rows_apply_span(uint32_t (&a)[kSteps][4], int s, uint4 k, uint32_t lo, uint32_t hi,
                                                        uint32_t bound = 0) {
    drop_register<kBf16Compare, kMul>(a[2 * s][0], k.x, k.z, lo, bound);
    drop_register<kBf16Compare, kMul>(a[2 * s][1], k.x, k.z, hi, bound);
    drop_register<kBf16Compare, kMul>(a[2 * s][2], k.y, k.w, lo, bound);
    drop_register<kBf16Compare, kMul>(a[2 * s][3], k.y, k.w, hi, bound);
    drop_register<kBf16Compare, kMul>(a[2 * s + 1][0], k.z, k.x, lo, bound);
    drop_register<kBf16Compare, kMul>(a[2 * s + 1][1], k.z, k.x, hi, bound);
    drop_register<kBf16Compare, kMul>(a[2 * s + 1][2], k.w, k.y, lo, bound);
    drop_register<kBf16Compare, kMul>(a[2 * s + 1][3], k.w, k.y, hi, bound);
}

// The selectors (bytes 0, 1 / 2, 3 of a, or of b on lanes of e = 1), made from %laneid at each call
// (volatile: ptxas would otherwise hoist them out of every loop, two registers live throughout, and the
// d = 128 forward spilled 8-24 bytes for them). base: 0x9988 widens each byte's top bit to a 16-bit half
// (sign-replicate nibbles), 0x1100 copies each byte into both bytes of its half (bf16_keep's (r, r)).
__device__ __forceinline__ uint2 rows_selectors(uint32_t base = 0x9988u) {
    uint32_t lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    const uint32_t lo = base | (lane & 4u) * 0x1111u;
    return make_uint2(lo, lo + 0x2222u);
}

template <int kSteps>
__device__ __forceinline__ void dropout_rows_apply(uint32_t (&a)[kSteps][4], const uint4 (&keep)[kSteps / 2]) {
    const uint2 sel = rows_selectors();
#pragma unroll
    for (int s = 0; s < kSteps / 2; ++s) dropout_rows_apply_span(a, s, keep[s], sel.x, sel.y);
}

// The same for bytes_rows_all's words: one PRMT, one HSET2 and one AND a register (kMul: a multiply, drop_register).
template <int kSteps, bool kMul = false>
__device__ __forceinline__ void dropout_rows_apply_bytes(uint32_t (&a)[kSteps][4], const uint4 (&bytes)[kSteps / 2],
                                                         uint32_t bound) {
    const uint2 sel = rows_selectors(0x1100u);
#pragma unroll
    for (int s = 0; s < kSteps / 2; ++s) dropout_rows_apply_span<kSteps, true, kMul>(a, s, bytes[s], sel.x, sel.y, bound);
}

// fp32 fragments x[nt][r] over the keys from col0: kept -> x * rp, dropped -> 0 (dP in the dQ pass).
template <int kNTiles>
__device__ __forceinline__ void dropout_rows_scale(float (&x)[kNTiles][4], const Dropout &d, int row, int col0, int lane) {
    static_assert(kNTiles % 4 == 0, "whole 32-key spans");
#pragma unroll
    for (int s = 0; s < kNTiles / 4; ++s) {
        const uint4 k = keep_rows(d, row, col0 + 32 * s, lane);
        const uint32_t words[4] = {k.x, k.y, k.z, k.w};
#pragma unroll
        for (int t = 0; t < 4; ++t)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                x[4 * s + t][r] = (words[t] >> (8 * r + 7)) & 1u ? x[4 * s + t][r] * d.rp : 0.f;
    }
}

// ---- rows = keys (the backwards' S^T) ----------------------------------------------------------------
// Keep bits of a thread's scores in key row `key` (its first; the second is +8) over the 32 queries from
// q0 (a multiple of 32): words (K0, K1) for queries q0 .. q0 + 15, then (K0, K1) for the next 16; K_h is
// key half h (key, key + 8), byte (query column parity) * 2 + (query half).
// Group words 0 and 2 hold key half 0, words 1 and 3 key half 1; of each pair, the first holds the query
// parity equal to the key's 16-block parity (the word index's XOR). One byte_perm per word pair takes this
// lane's bytes (key parity e: bytes e, 2 + e) of both: its selector, set per lane from e and that parity,
// does the reordering (no select).
__device__ __forceinline__ uint4 keep_cols(const Dropout &d, int key, int q0, int lane) {
    const int e = (lane >> 2) & 1;   // key % 2: which bytes of the group this lane keeps, and which span it makes
    const uint4 w = dropout_group(d, (q0 / 16 + e) * 4 + lane % 4, row_group_of(key));
    const uint32_t mine = (0x6420u + (e ? 0x1111u : 0u)) ^ ((key >> 4) & 1 ? 0x4444u : 0u), other = mine ^ 0x1111u;
    const uint32_t keep0 = __byte_perm(w.x, w.z, mine), keep1 = __byte_perm(w.y, w.w, mine);
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, __byte_perm(w.x, w.z, other), 4);
    const uint32_t got1 = __shfl_xor_sync(0xffffffffu, __byte_perm(w.y, w.w, other), 4);
    const uint4 span = e ? make_uint4(got0, got1, keep0, keep1) : make_uint4(keep0, keep1, got0, got1);
    return make_uint4(keep_bits(span.x, d.threshold4), keep_bits(span.y, d.threshold4), keep_bits(span.z, d.threshold4),
                      keep_bits(span.w, d.threshold4));
}

// Register r of n8 tile nt (queries: span (nt % 4) / 2, half nt % 2; key half r / 2, column r % 2):
// the word index in keep_cols's uint4 and the byte.
__host__ __device__ constexpr int cols_word(int nt, int r) { return (nt % 4) / 2 * 2 + r / 2; }
__host__ __device__ constexpr int cols_byte(int nt, int r) { return (r % 2) * 2 + nt % 2; }

// Keep bits of the queries q0 .. q0 + 32 * kSpans - 1 for key row `key`: kSpans keep_cols words.
// kPinKey: key and lane pass a volatile move, so that what depends on them only (the column group's part
// of Philox's first round, the byte_perm selectors) is made per call, not hoisted out of the query-tile
// loop into registers live throughout (the d = 128 hopper backward spilled 4-16 bytes with them).
template <int kSpans, bool kPinKey = false>
__device__ __forceinline__ void keep_cols_all(uint4 (&k)[kSpans], const Dropout &d, int key, int q0, int lane) {
    if constexpr (kPinKey) asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;" : "+r"(key), "+r"(lane));
#pragma unroll
    for (int s = 0; s < kSpans; ++s) k[s] = keep_cols(d, key, q0 + 32 * s, lane);
}

// A fragments of P^T (step kk = n8 tiles 2kk, 2kk + 1 over the queries; register reg holds tile
// 2kk + reg / 2, key half reg % 2, both query columns as its 16-bit halves): steps 2s, 2s + 1 (32
// queries) masked by keep_cols word k, dropped scores to 0.
template <int kSteps>
__device__ __forceinline__ void dropout_cols_span(uint32_t (&a)[kSteps][4], int s, uint4 k) {
    const uint32_t words[4] = {k.x, k.y, k.z, k.w};
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int reg = 0; reg < 4; ++reg) {
            // The register's two scores: query columns 0 and 1 of (tile, key half): cols_word / cols_byte.
            const int nt = 2 * half + reg / 2, r0 = 2 * (reg % 2), r1 = r0 + 1;
            const int w0 = cols_word(nt, r0), w1 = cols_word(nt, r1);
            const uint32_t b0 = cols_byte(nt, r0), b1 = cols_byte(nt, r1) + (w0 == w1 ? 0 : 4);
            a[2 * s + half][reg] &= prmt(words[w0], words[w1], (8 | b0) * 0x11u | (8 | b1) * 0x1100u);
        }
}

template <int kSteps>
__device__ __forceinline__ void dropout_cols_packed(uint32_t (&a)[kSteps][4], const uint4 (&k)[kSteps / 2]) {
    static_assert(kSteps % 2 == 0, "whole 32-query spans");
#pragma unroll
    for (int s = 0; s < kSteps / 2; ++s) dropout_cols_span(a, s, k[s]);
}

// fp32 fragments x[nt][r] over the queries: kept -> x * rp, dropped -> 0 (dP^T).
template <int kNTiles>
__device__ __forceinline__ void dropout_cols_scale(float (&x)[kNTiles][4], const uint4 (&k)[kNTiles / 4], float rp) {
    static_assert(kNTiles % 4 == 0, "whole 32-query spans");
#pragma unroll
    for (int s = 0; s < kNTiles / 4; ++s) {
        const uint32_t words[4] = {k[s].x, k[s].y, k[s].z, k[s].w};
#pragma unroll
        for (int t = 0; t < 4; ++t)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                x[4 * s + t][r] = (words[cols_word(t, r)] >> (8 * cols_byte(t, r) + 7)) & 1u ? x[4 * s + t][r] * rp : 0.f;
    }
}

// dP^T in fp32 after dropout_cols_packed made pz (the A fragments of P^T o Z): kept -> dP * rp, dropped
// -> 0, read off pz's 16-bit halves (a kept P that rounded to 0 gives dS = 0 either way). No Philox call:
// the hopper backward regenerates nothing a second time.
template <int kNTiles>
__device__ __forceinline__ void dropout_scale_by_packed(float (&x)[kNTiles][4], const uint32_t (&pz)[kNTiles / 2][4],
                                                        float rp) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const uint32_t pair = pz[nt / 2][(nt % 2) * 2 + half];
            x[nt][2 * half] = (pair & 0xFFFFu) ? x[nt][2 * half] * rp : 0.f;
            x[nt][2 * half + 1] = (pair >> 16) ? x[nt][2 * half + 1] * rp : 0.f;
        }
}

// O's fragments times 1 / (1 - p) (the softmax's finalize divided by the undropped sum l).
template <int kM, int kN>
__device__ __forceinline__ void dropout_scale_acc(float (&acc)[kM][kN][4], float rp) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[m][n][c] *= rp;
}

}  // namespace sy_attn
