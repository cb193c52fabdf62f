// Dropout inside the fused attention kernels (hopper and mma, forward and backward): the keep-mask of
// every score is a pure function of (seed, offset, batch b, query head h, query row i, key column j),
// drawn from a counter-based generator, so the backward regenerates it instead of storing N^2 bits.
//
// Generator: Philox4x32-10 (Salmon et al., SC'11; the generator of torch's CUDA RNG and of curand),
// keyed by the seed. One call gives 128 bits; one byte decides one score: kept iff byte < threshold,
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
//   byte (i % 16 / 8) * 2 + j % 2   of word (i % 2) * 2 + j % 16 / 8.
//
// Hardware fact served: Philox is ten rounds of two 32 x 32 -> 64-bit multiplies, the expensive
// part, so each call must feed 16 scores, and the tensor-core fragments decide which 16 a thread
// holds. In the m16n8 accumulator layout (mma.sync, and each warp of a wgmma m64 tile) lane l holds
// rows l/4, l/4 + 8 and columns 2(l%4), 2(l%4) + 1 of every n8 tile: the forward's S (rows = queries)
// gives a thread two query rows, the backward's S^T (rows = keys) two key rows, and the only 16
// scores both see whole are a group shared by lanes l and l ^ 4. So lane l makes one group's 16
// bytes, lane l ^ 4 the next span's, and they swap the halves the other holds (two shuffles): every
// lane pays one Philox call per 16 of its scores in either layout. The 16-bit P of a wgmma/mma A
// fragment is masked two scores at a time: PRMT's sign-replicate mode widens a byte's keep bit to a
// 16-bit half, one AND per pair, no per-score branch.
#pragma once

#include "attention_common.cuh"

namespace sy_attn {

__host__ __device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint32_t k0, uint32_t k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        const uint32_t lo0 = 0xD2511F53u * c.x, lo1 = 0xCD9E8D57u * c.z;
#ifdef __CUDA_ARCH__
        const uint32_t hi0 = __umulhi(0xD2511F53u, c.x), hi1 = __umulhi(0xCD9E8D57u, c.z);
#else
        const uint32_t hi0 = static_cast<uint32_t>((uint64_t(0xD2511F53u) * c.x) >> 32);
        const uint32_t hi1 = static_cast<uint32_t>((uint64_t(0xCD9E8D57u) * c.z) >> 32);
#endif
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;   // the Weyl key schedule
        k1 += 0xBB67AE85u;
    }
    return c;
}

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
template <class Params>
__device__ __forceinline__ Dropout make_dropout(const Params &p, int b, int h) {
    Dropout d;
    d.k0 = static_cast<uint32_t>(p.dropout_seed);
    d.k1 = static_cast<uint32_t>(p.dropout_seed >> 32);
    const uint64_t ctr = p.dropout_offset / 4 + static_cast<uint64_t>(b) * p.heads_q + h;
    d.ctr0 = static_cast<uint32_t>(ctr);
    d.ctr1 = static_cast<uint32_t>(ctr >> 32);
    d.threshold4 = dropout_threshold(p.dropout_p) * 0x01010101u;
    d.rp = 1.f / (1.f - p.dropout_p);
    return d;
}

__host__ __device__ __forceinline__ uint4 dropout_group(const Dropout &d, uint32_t row_group, uint32_t col_group) {
    return philox4x32_10(make_uint4(d.ctr0, d.ctr1, row_group, col_group), d.k0, d.k1);
}

__host__ __device__ __forceinline__ uint32_t row_group_of(int i) { return (i / 16) * 4 + (i % 8) / 2; }

// Per byte of x: its top bit set iff byte < the threshold's byte (SWAR unsigned compare, no borrow
// crosses a byte: (x | 0x80) - (t & 0x7f) stays in 1..255 per byte).
__device__ __forceinline__ uint32_t keep_bits(uint32_t x, uint32_t t4) {
    constexpr uint32_t kHigh = 0x80808080u;
    const uint32_t low_ge = (x | kHigh) - (t4 & ~kHigh);   // top bit: x's low 7 bits >= t's
    return ((~x & t4) | (~(x ^ t4) & ~low_ge)) & kHigh;
}

// PRMT, sign-replicate mode (a selector nibble with bit 3 set copies the top bit of its byte).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
    return r;
}

// ---- rows = queries (the forwards' S, the mma dQ pass) ----------------------------------------------------
// Keep bits of a thread's scores in row `row` (its first: l/4 of a 16-row block; the second is +8) over
// the 32 keys from col0 (a multiple of 32): word nt (n8 tile nt of the span) holds byte r for
// fragment register r of that tile (rows r / 2, columns r % 2), as keep_bits.
__device__ __forceinline__ uint4 keep_rows(const Dropout &d, int row, int col0, int lane) {
    const int e = (lane >> 2) & 1;   // row % 2: which half of the group this lane keeps, and which span it makes
    const uint4 w = dropout_group(d, row_group_of(row), (col0 / 16 + e) * 4 + lane % 4);
    const uint32_t keep0 = e ? w.z : w.x, keep1 = e ? w.w : w.y;
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, e ? w.x : w.z, 4);
    const uint32_t got1 = __shfl_xor_sync(0xffffffffu, e ? w.y : w.w, 4);
    const uint4 span = e ? make_uint4(got0, got1, keep0, keep1) : make_uint4(keep0, keep1, got0, got1);
    return make_uint4(keep_bits(span.x, d.threshold4), keep_bits(span.y, d.threshold4), keep_bits(span.z, d.threshold4),
                      keep_bits(span.w, d.threshold4));
}

// Keep bits of the keys col0 .. col0 + 32 * kSpans - 1 for row `row`: kSpans keep_rows words.
template <int kSpans>
__device__ __forceinline__ void keep_rows_all(uint4 (&k)[kSpans], const Dropout &d, int row, int col0, int lane) {
#pragma unroll
    for (int s = 0; s < kSpans; ++s) k[s] = keep_rows(d, row, col0 + 32 * s, lane);
}

// A fragments of P (k16 steps, 16-bit pairs: step kk = n8 tiles 2kk, 2kk + 1, registers (tile, rows) =
// (2kk, g), (2kk, g+8), (2kk+1, g), (2kk+1, g+8)) masked by keep_rows_all's words: dropped scores to 0.
template <int kSteps>
__device__ __forceinline__ void dropout_rows_apply(uint32_t (&a)[kSteps][4], const uint4 (&keep)[kSteps / 2]) {
#pragma unroll
    for (int s = 0; s < kSteps / 2; ++s) {
        const uint4 k = keep[s];
        const uint32_t words[4] = {k.x, k.y, k.z, k.w};
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            uint32_t(&step)[4] = a[2 * s + half];
            step[0] &= prmt(words[2 * half], 0, 0x9988);       // bytes 0, 1 -> 16-bit halves
            step[1] &= prmt(words[2 * half], 0, 0xBBAA);       // bytes 2, 3
            step[2] &= prmt(words[2 * half + 1], 0, 0x9988);
            step[3] &= prmt(words[2 * half + 1], 0, 0xBBAA);
        }
    }
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
// q0 (a multiple of 32): words (A0, B0, A1, B1), span s = queries q0 + 16 s ..: A_s the even query
// column of each pair, B_s the odd one, byte (key half) * 2 + (query half).
__device__ __forceinline__ uint4 keep_cols(const Dropout &d, int key, int q0, int lane) {
    const int e = (lane >> 2) & 1;   // key % 2: which bytes of the group this lane keeps, and which span it makes
    const uint4 w = dropout_group(d, (q0 / 16 + e) * 4 + lane % 4, row_group_of(key));
    // The bytes of column parity e (bytes e, 2 + e of each word) and of the other parity, packed.
    const uint32_t mine = e ? 0x7531 : 0x6420, other = e ? 0x6420 : 0x7531;
    const uint32_t keep0 = __byte_perm(w.x, w.y, mine), keep1 = __byte_perm(w.z, w.w, mine);
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, __byte_perm(w.x, w.y, other), 4);
    const uint32_t got1 = __shfl_xor_sync(0xffffffffu, __byte_perm(w.z, w.w, other), 4);
    const uint4 span = e ? make_uint4(got0, got1, keep0, keep1) : make_uint4(keep0, keep1, got0, got1);
    return make_uint4(keep_bits(span.x, d.threshold4), keep_bits(span.y, d.threshold4), keep_bits(span.z, d.threshold4),
                      keep_bits(span.w, d.threshold4));
}

// Register r of n8 tile nt (queries: span (nt % 4) / 2, half nt % 2; key half r / 2, column r % 2):
// the word index in keep_cols's uint4 and the byte.
__host__ __device__ constexpr int cols_word(int nt, int r) { return (nt % 4) / 2 * 2 + r % 2; }
__host__ __device__ constexpr int cols_byte(int nt, int r) { return (r / 2) * 2 + nt % 2; }

// Keep bits of the queries q0 .. q0 + 32 * kSpans - 1 for key row `key`: kSpans keep_cols words.
template <int kSpans>
__device__ __forceinline__ void keep_cols_all(uint4 (&k)[kSpans], const Dropout &d, int key, int q0, int lane) {
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
            const uint32_t byte = cols_byte(2 * half + reg / 2, 2 * (reg % 2));
            a[2 * s + half][reg] &= prmt(words[2 * half], words[2 * half + 1], (8 | byte) * 0x11u | (12 | byte) * 0x1100u);
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
