// The `hopper` forward consumer's dropout (hopper_fwd_consumer.cuh): the keep bits of a key block from
// Philox (attention_dropout.cuh), drawn while the tensor cores run the previous block's P V where registers
// allow, and P's dropped scores zeroed in the registers the next P V reads. A CRTP base of Consumer, which
// holds the rows, P and S it works on; the choices below are per kernel mode and head dimension.
#pragma once

#include "hopper_fwd_pipeline.cuh"   // mode flags, TileWork, MaskWalk
#include "attention_dropout.cuh"     // Philox keep-masks on P's fragments

namespace sy_attn {
namespace {

#ifdef SY_HOPPER_DEVICE_CODE

template <class Consumer, class Tr, typename T, int kMode>
struct ConsumerDropout {
    static constexpr int kBand = kMode & 3;
    static constexpr bool kDropout = (kMode & kDropoutFlag) != 0;
    static constexpr int kNTilesS = Tr::kBlockN / 8;   // n8 column tiles of S
    __device__ __forceinline__ Consumer &self() { return *static_cast<Consumer *>(this); }

    // Dropout (attention_dropout.cuh) in two parts. draw: the keep bits of key block `block` (absolute) of
    // tile w, made while the previous block's P V runs on the tensor cores (Philox is integer multiplies,
    // off the wgmma's path) where registers allow: d = 64 (three consumers at 160 registers) draws after the
    // wait (ptxas -v: drawing early spilled 8-12 bytes there; drawing late, 4 not causal and none causal).
    // drop: P's dropped scores to 0 in rP, after the softmax summed them (l_i and the LSE are those of the
    // undropped P, as torch's).
    static constexpr bool kDrawEarly = Tr::kConsumerWGs == 2;
    // The absolute key block of entry j of tile x, the keep bits' column: kBandMask's blocks are its list's
    // entries (in the list's order, a full block first), the band's count on from first_block. Read only
    // with dropout (other modes never load the entry here).
    static __device__ __forceinline__ int key_block(const TileWork &x, int j, const sy_attn_params &p) {
        if constexpr (!kDropout) return 0;
        else if constexpr (kBand == kBandMask) return MaskWalk::block(__ldg(p.mask_lists + x.list + 1 + j));
        else return x.first_block + j;
    }
    // Philox's products as PTX mul.wide (attention_dropout.cuh's mul_wide) except at d = 64 without a band,
    // where the C form is what ptxas allocates without spilling (28 bytes with PTX; measured H100 call 1 of
    // session dropfwd20b: d = 64 causal 3.47 against 3.85 ms with PTX, not causal 6.42 against 6.51 with C).
    static constexpr bool kDropoutAsmMul = kDrawEarly || kBand == kBandCausal;
    // The byte compare after the shuffle, in bf16, with the launch's round keys (attention_dropout.cuh,
    // bytes_rows_all; docs/notes-dropout.md, session philox20); 0 builds the integer compare before it
    // (keep_rows_all, the code before that session), the same keep bits, for same-run comparisons.
#ifndef SY_DROPOUT_BF16_COMPARE
#define SY_DROPOUT_BF16_COMPARE 1
#endif
    static constexpr bool kBf16Compare = SY_DROPOUT_BF16_COMPARE;
    // SY_HOPPER_DROPOUT_MUL_KEEP (bf16, causal): P's kept / dropped halves by a bf16x2 multiply with 1.0 / 0.0 (the
    // FMA pipe) instead of an AND with 0xFFFF / 0 (the integer ALU, which Philox's XORs and the softmax's FMNMX load
    // most). Measured on the H200 in two calls (docs/notes-dropout.md, session 2026-11-28e), d = 128, N = 4096 / 16384:
    // causal 3-4 % faster in both; not causal 1-2 % slower in both, so not there (2: every band mode, for A/B runs).
#ifndef SY_HOPPER_DROPOUT_MUL_KEEP
#define SY_HOPPER_DROPOUT_MUL_KEEP 1
#endif
    static constexpr bool kMulKeep = std::is_same<T, __nv_bfloat16>::value &&
                                     ((SY_HOPPER_DROPOUT_MUL_KEEP == 1 && kBand == kBandCausal) || SY_HOPPER_DROPOUT_MUL_KEEP == 2);
    uint4 keep[kDropout ? Tr::kPVSteps / 2 : 1];
    __device__ __forceinline__ void draw(const TileWork &w, int block, const sy_attn_params &p) {
        if constexpr (kDropout && kBf16Compare) {
            // row_group_of(row0 + thread_row), row0 a multiple of 16: row0 / 4 + (warp * 16 + lane / 4) / 16 * 4 +
            // (lane / 4) % 8 / 2 = row0 / 4 + (threadIdx.x % 128) / 8 (unsigned: shifts, no signed division).
            const uint32_t row_group = static_cast<uint32_t>(self().row0) / 4 + (threadIdx.x % 128) / 8;
            bytes_rows_all<Tr::kPVSteps / 2, kDrawEarly, kDropoutAsmMul>(keep, self().dropout_consts, w.b * p.heads_q + w.h,
                                                                         row_group, static_cast<uint32_t>(block * Tr::kBlockN),
                                                                         threadIdx.x % 32);
        } else if constexpr (kDropout) {
            keep_rows_all<Tr::kPVSteps / 2, kDrawEarly, kDropoutAsmMul>(keep, make_dropout(p, w.b, w.h),
                                                                        self().row0 + self().thread_row, block * Tr::kBlockN,
                                                                        threadIdx.x % 32);
        }
    }
    __device__ __forceinline__ void draw_early(const TileWork &w, int block, const sy_attn_params &p) {
        if constexpr (kDrawEarly) draw(w, block, p);
    }
    template <bool kDrawNow = !kDrawEarly>
    __device__ __forceinline__ void drop(const TileWork &w, int block, const sy_attn_params &p) {
        if constexpr (kDrawNow) draw(w, block, p);
        if constexpr (kDropout && kBf16Compare) {
            bytes_to_drop_bits(keep, self().dropout_consts);
            dropout_rows_apply_bytes<Tr::kPVSteps, kMulKeep>(self().rP, keep, self().dropout_consts.bound);
        } else if constexpr (kDropout) {
            dropout_rows_apply(self().rP, keep);
        }
    }

    // Dropout on S's fp32 probabilities (dropped to 0 before P is packed, a select per score), span by span
    // (one Philox call per 32 keys, its words consumed at once): a partial attn_mask tile. Its keep words
    // drawn whole and applied to rP, as other tiles do, spilled 16 bytes at d = 128 (ptxas -v, sm_90a),
    // wherever the draw sat; here the registers of one span's words are all it adds over the mask.
    // kPin: the launch's dropout terms are remade per call, not held across the tile loop.
    __device__ __forceinline__ void drop_s(const TileWork &w, int block, const sy_attn_params &p) {
        const Dropout d = make_dropout<true>(p, w.b, w.h);
#pragma unroll
        for (int s = 0; s < kNTilesS / 4; ++s) {
            const uint4 k = keep_rows(d, self().row0 + self().thread_row, block * Tr::kBlockN + 32 * s,
                                      threadIdx.x % 32);
            const uint32_t words[4] = {k.x, k.y, k.z, k.w};
#pragma unroll
            for (int t = 0; t < 4; ++t)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    if (!((words[t] >> (8 * r + 7)) & 1u)) self().rS[0][4 * s + t][r] = 0.f;
        }
    }
};
#endif  // SY_HOPPER_DEVICE_CODE

}  // namespace
}  // namespace sy_attn
