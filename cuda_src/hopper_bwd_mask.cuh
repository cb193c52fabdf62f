// The hopper backward's (attention_hopper_bwd.cu) partial attn_mask tile (kBandMask, attention_mask.cuh):
// P^T of one consumer thread's fragment with the mask's elements read in place.
//
// Each (key, query) of the fragment reads the mask's element by strides (b = blockIdx.z, h = blockIdx.y;
// stride 0 broadcasts): bool -> 0 or -inf, float m -> m, and P^T = exp2(S^T * scale log2 e + m log2 e -
// LSE_log2), torch's scale * s + m in log2 units (the forward adds m / scale to raw scores: the same sum,
// without the division). Keys past Nk, queries past Nq and (kMaskBandFlag) pairs outside the launch's band
// (a window, a moved diagonal: in_band, one compare) read nothing (-inf).
//
// Hardware fact served: the consumer warpgroups sit at their 240 registers (dV, dK: 128; S^T, dP^T in
// flight: 64), so everything about the mask comes from the kernel parameters (constant bank) inside this
// function, and only two key-row addresses and the query stride live across its loop (0 spills; a mask
// tile built once per tile and kept, as in the forward, spilled 8-16 bytes here). Only partial tiles pay
// the loads: a padding mask's tiles are nearly all empty (never computed) or full (the unmasked code).
#pragma once

#include "attention_bwd_common.cuh"
#include "attention_mask.cuh"
#include "softmax.cuh"   // fast_exp2

namespace sy_attn {

// A mode flag of the hopper backward, with kBandMask: the launch has a band beside the mask (a window, a moved
// diagonal), which its partial tiles test per score here. Its own instantiation, so that a mask without a band
// keeps the code it had (the test, and the order it needs at d = 128: dP^T after P^T, cost partial tiles
// their overlap; beside dP^T's accumulators the test spilled 12-24 bytes).
constexpr int kMaskBandFlag = 16;

// s: the S^T fragment (n8 tiles over the tile's queries; registers c: key row c / 2 (+8), query c % 2),
// lse: the tile's log2 LSE rows in shared memory, key0: this lane's first key row, m0: the tile's first
// query. pack(kk) packs n8 tiles 2kk, 2kk + 1 (P^T's A fragment kk) once they are done.
// kTestBand: the launch has a band (kMaskBandFlag), tested too, from the parameters where it is used (param_band:
// nothing held across the consumer's loop).
template <bool kTestBand, int kNTiles, class Pack>
__device__ __forceinline__ void masked_p_tile(float (&s)[kNTiles][4], const float *lse, int key0, int m0, int lane,
                                              float scale_log2, const sy_attn_bwd_params &p, Pack pack) {
    const Band band = kTestBand ? param_band(p) : Band{};
    const bool is_bool = p.mask_kind == kMaskBool;
    const int shift = is_bool ? 0 : 2;   // bytes per element: 1 or 4
    const char *head = static_cast<const char *>(p.mask) +
                       ((blockIdx.z * p.mask_strides[0] + blockIdx.y * p.mask_strides[1]) << shift);
    const char *rows[2] = {head + ((key0 * p.mask_strides[3]) << shift), head + (((key0 + 8) * p.mask_strides[3]) << shift)};
    const int64_t query_bytes = p.mask_strides[2] << shift;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
        const int col = nt * 8 + 2 * (lane % 4);
        const float2 l = *reinterpret_cast<const float2 *>(lse + col);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int query = m0 + col + c % 2, key = key0 + (c / 2) * 8;
            float m = -INFINITY;
            if (query < p.seqlen_q && key < p.seqlen_k && (!kTestBand || in_band(band, query, key))) {
                const char *at = rows[c / 2] + query * query_bytes;
                m = is_bool ? (__ldg(reinterpret_cast<const unsigned char *>(at)) ? 0.f : -INFINITY)
                            : __ldg(reinterpret_cast<const float *>(at));
            }
            s[nt][c] = fast_exp2(fmaf(s[nt][c], scale_log2, m * kLog2e) - (c % 2 ? l.y : l.x));
        }
        if (nt % 2 == 1) pack(nt / 2);   // this tile pair's registers die here
    }
}

}  // namespace sy_attn
