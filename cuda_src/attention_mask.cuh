// attn_mask tile by tile in the tensor-core kernels (mma, hopper, and their backwards): a boolean or
// additive mask broadcastable to (B, Hq, Nq, Nk), as torch's SDPA takes it.
//
// Hardware fact served: a padding or block-sparse mask is mostly whole tiles, empty or full, so the
// per-score work (a global load, an add or select per score) is paid only where a tile is mixed. A
// pre-pass in torch (sympathy/attention/mask_tiles.py) reads the mask once and lists, per (mask batch,
// mask head, row block) of the kernel's own tile shape, the blocks of the other axis that hold some key
// taking part, in order, each with its class:
//     lists[b][h][row block] = [count, e_0, e_1, ...],  e = block << 2 | class
// (forward: row blocks are query blocks and entries key blocks; backward: key blocks and query blocks).
// Empty blocks are not listed: never loaded, no MMA. A full block (every element True or 0.0) runs the
// kernel's unmasked path; only a partial one reads the mask. Entries past count are the empty blocks in
// order, so entry 0 of a row with nothing to see is block 0, empty: the hopper forward, whose pipeline
// walks at least one block per tile, walks that one fully masked (rows give 0 and an LSE of -inf).
//
// A kernel mode beside the band's (attention_band.cuh), one instantiation per kernel, dtype and head dim.
// It takes the launch's band too (a sliding window, a moved diagonal; open when none): the pre-pass
// classifies each tile by the mask and the band together (empty if either hides it all, full only if
// both show it all), so the band costs nothing outside the partial tiles, and a partial tile tests it
// per score beside the mask's element (in_band: one compare). The lists must be built with the same
// band as the launch's (make_band of the parameters): a full tile is run without any test.
//
// Scores: the kernels scale raw scores q.k later (exp2(s * scale * log2 e - m)), so the mask enters in
// raw units, s + mask / scale (torch: s * scale + mask); a bool mask gives s or -inf. scale > 0 here (the
// Python layer turns a negative scale into -q, and keeps masks with a zero or tiny scale on `naive`).
#pragma once

#include "attention_band.cuh"
#include "attention_common.cuh"

namespace sy_attn {

constexpr int kBandMask = 3;   // the mode: lists of mask tiles instead of a band (kMode & 3 in hopper)

// sy_attn_params.mask_kind. The kernels read float32 and bool; a float16/bfloat16 mask is converted to float32
// by the Python layer (mask_tiles.py; a copy of the mask's own, unbroadcast elements).
enum MaskKind { kMaskF32 = 0, kMaskBool = 1 };
enum TileClass { kTileEmpty = 0, kTileFull = 1, kTilePartial = 2 };

// One row block's list: count, then the entries.
struct MaskWalk {
    const int *entries;
    int count;

    __device__ __forceinline__ int entry(int i) const { return __ldg(entries + i); }
    static __device__ __forceinline__ int block(int e) { return e >> 2; }
    static __device__ __forceinline__ int cls(int e) { return e & 3; }
};

template <class P>
__device__ __forceinline__ int64_t mask_list_offset(const P &p, int b, int h, int row_block) {
    return b * p.mask_list_strides[0] + h * p.mask_list_strides[1] + row_block * p.mask_list_strides[2];
}

template <class P>
__device__ __forceinline__ MaskWalk mask_walk(const P &p, int b, int h, int row_block) {
    const int *list = p.mask_lists + mask_list_offset(p, b, h, row_block);
    return MaskWalk{list + 1, __ldg(list)};
}

// What a tile needs to read its mask elements: the head's base, the strides (0: broadcast), the class.
struct MaskTile {
    const void *data;
    int64_t base, row_stride, col_stride;
    int kind, cls, n_rows, n_cols;
    float inv_scale;

    // Applies the tile to a fragment of scores (raw q.k): each_score(op) calls op(s, row, col) for every
    // score s the thread holds (row: query, col: key, absolute). Scores past the edges and in an empty
    // tile become -inf; a full tile changes no other; a partial one reads the mask. The class and the kind
    // are settled once per tile, outside the loop (one select-or-add per score; a per-score switch made
    // ptxas keep every load path live and spill a kilobyte in the hopper consumer).
    // score() without the mask's elements: the edges and an empty tile only (no load).
    __device__ __forceinline__ float edge(float s, int row, int col) const {
        return row >= n_rows || col >= n_cols || cls == kTileEmpty ? -INFINITY : s;
    }

    // Score s (raw q.k) of element (row, col) of the mask (row: query, col: key) with the mask applied:
    // -inf past the edges and in an empty tile; a full tile leaves every other score as it is; a partial
    // one gives -inf outside the band (no load) and reads the mask inside it.
    __device__ __forceinline__ float score(float s, int row, int col, Band band) const {
        if (row >= n_rows || col >= n_cols || cls == kTileEmpty) return -INFINITY;
        if (cls == kTileFull) return s;
        if (!in_band(band, row, col)) return -INFINITY;
        const int64_t at = base + row * row_stride + col * col_stride;
        if (kind == kMaskBool) return __ldg(static_cast<const unsigned char *>(data) + at) ? s : -INFINITY;
        return s + __ldg(static_cast<const float *>(data) + at) * inv_scale;
    }
};

// The MaskTile of head (b, h) for entry e of a walk.
template <class P>
__device__ __forceinline__ MaskTile mask_tile(const P &p, int b, int h, int e) {
    return MaskTile{p.mask, b * p.mask_strides[0] + h * p.mask_strides[1], p.mask_strides[2], p.mask_strides[3],
                    p.mask_kind, MaskWalk::cls(e), p.seqlen_q, p.seqlen_k, 1.f / p.scale};
}

// A direct C caller's mistakes: lists without a mask, a kind out of range, tiles of another shape.
template <class P>
inline bool check_mask(const P &p, int block_q, int block_k) {
    if (!p.mask || (p.mask_kind != kMaskF32 && p.mask_kind != kMaskBool) || !(p.scale > 0.f)) return false;
    return p.mask_block_q == block_q && p.mask_block_k == block_k;
}

}  // namespace sy_attn
