// The band mask of the tensor-core kernels (mma, hopper, and their backwards): causal attention at any
// alignment and sliding-window (local) attention as one family.
//
// Query row i sees key j iff i + lo <= j <= i + hi. From the launch parameters (attention_api.h):
//   off = causal_offset (0: torch's top-left, Nk - Nq: bottom-right, flash-attn's and KV-cache prefill's)
//   is_causal                 hi = off
//   has_window (left, right)  lo = off - left, hi = off + right (is_causal: hi = off); -1 leaves a side open
// An open side takes a bound no row can reach, so one formula serves every mode: lo = -(Nq + 1) puts
// i + lo below key 0 for every row, hi = Nk puts i + hi past the last key. Bounds are clamped into
// [-(Nq + 1), Nk]: beyond it a bound says the same, and row + bound cannot overflow an int (check_band).
//
// Hardware fact served: a key block wholly outside the band is never loaded (the loop bounds, from
// band_blocks), a block wholly inside runs without a single compare, and only the blocks on the band's
// two edges pay for the per-score test (a compare and a select per score); the kernels keep the three
// ranges as separate loops, as they already did for the causal diagonal.
#pragma once

#include <algorithm>

#include "attention_common.cuh"

namespace sy_attn {

// kNone: every key (no compare outside the ragged last block); kCausal: an upper bound only (any
// alignment; also a window open on the left); kLocal: both bounds. Kernels are instantiated per mode,
// so the causal kernel pays no lower-bound compare.
enum BandMode { kBandNone = 0, kBandCausal = 1, kBandLocal = 2 };

struct Band {
    int lo, hi;   // row i sees keys i + lo .. i + hi (then clipped to 0 .. Nk - 1)
};

// Rows first..last of a tile (row and key indices may be swapped: the backward walks query tiles per key
// block with the transposed band) against keys in blocks of block_n: blocks [begin, end) hold every key
// some row sees; blocks [unmasked_begin, unmasked_end) are seen whole by every row and hold no key at or
// past n_keys. begin <= unmasked_begin <= unmasked_end <= end; begin == end when no row sees any key.
struct BlockRange {
    int begin, end, unmasked_begin, unmasked_end;
};

__host__ __device__ __forceinline__ int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

__host__ __device__ __forceinline__ BlockRange band_blocks(int first, int last, int n_keys, int block_n, Band band) {
    BlockRange r;
    const int key_lo = max(0, first + band.lo), key_hi = min(n_keys - 1, last + band.hi);
    if (key_hi < key_lo) {
        r.begin = r.end = r.unmasked_begin = r.unmasked_end = 0;
        return r;
    }
    r.begin = key_lo / block_n;
    r.end = key_hi / block_n + 1;
    // Block jb is seen whole by every row when jb * block_n >= last + lo (the last row's first key) and
    // (jb + 1) * block_n - 1 <= first + hi (the first row's last key), inside n_keys.
    r.unmasked_begin = min(max(r.begin, -floor_div(-(last + band.lo), block_n)), r.end);
    r.unmasked_end = min(max(floor_div(min(first + band.hi + 1, n_keys), block_n), r.unmasked_begin), r.end);
    return r;
}

// Whether (row, col) lies inside the band, lo <= col - row <= hi, as one unsigned compare (make_band keeps
// lo <= hi, and |col - row - lo| stays far below 2^31: check_band): a partial attn_mask tile's per-score
// test, where the mask and a band meet (attention_mask.cuh).
__host__ __device__ __forceinline__ bool in_band(Band band, int row, int col) {
    return static_cast<unsigned>(col - row - band.lo) <= static_cast<unsigned>(band.hi - band.lo);
}

// band_blocks with the mode known at compile time: without a band the range is every block from 0, which
// the compiler then knows (a runtime loop start cost the sm_80 256-row mma kernel 16 more bytes of spill).
template <int kMode>
__host__ __device__ __forceinline__ BlockRange band_blocks_in(int first, int last, int n_keys, int block_n, Band band) {
    if constexpr (kMode == kBandNone) {
        return BlockRange{0, ceil_div(n_keys, block_n), 0, n_keys / block_n};
    }
    return band_blocks(first, last, n_keys, block_n, band);
}

// Whether query tile m (rows m * block_m ..) reaches past the transposed band's far edge for key block n0 (a key
// sees queries up to key - lo) or past the queries' end: m >= unmasked_end of band_blocks with the band (-hi, -lo),
// for m in [begin, end), without holding unmasked_end. n0 through a volatile move: the bound made per tile.
template <int block_m>
__device__ __forceinline__ bool past_band_edge(int m, int n0, int len_q, Band band) {
    asm volatile("mov.b32 %0, %0;" : "+r"(n0));
    return (m + 1) * block_m > min(n0 - band.lo + 1, len_q);
}

// The band of a launch, and its mode. seqlen_q and seqlen_k were checked by check_band.
inline Band make_band(int is_causal, int causal_offset, int has_window, int window_left, int window_right,
                      int seqlen_q, int seqlen_k, int *mode, bool wide = false) {
    const int64_t spare = wide ? static_cast<int64_t>(seqlen_q) + seqlen_k : 0;   // varlen: see sequence_band
    const int64_t open_lo = -(static_cast<int64_t>(seqlen_q) + 1) - spare, open_hi = seqlen_k + spare;
    int64_t lo = open_lo, hi = open_hi;
    if (has_window && window_left >= 0) lo = static_cast<int64_t>(causal_offset) - window_left;
    if (is_causal) hi = causal_offset;
    else if (has_window && window_right >= 0) hi = static_cast<int64_t>(causal_offset) + window_right;
    lo = std::min(std::max(lo, open_lo), open_hi);
    hi = std::min(std::max(hi, open_lo), open_hi);
    *mode = lo > open_lo ? kBandLocal : hi < open_hi ? kBandCausal : kBandNone;
    return Band{static_cast<int>(lo), static_cast<int>(hi)};
}

// make_band's band (not varlen) in int arithmetic, for a kernel that reads it off its parameters where it is used
// (constant bank) rather than holding it in registers across its loops; check_band keeps every value in range.
template <class P>
__device__ __forceinline__ Band param_band(const P &p) {
    const int open_lo = -(p.seqlen_q + 1), open_hi = p.seqlen_k;
    const int lo = p.has_window && p.window_left >= 0 ? p.causal_offset - p.window_left : open_lo;
    const int hi = p.is_causal ? p.causal_offset : p.has_window && p.window_right >= 0 ? p.causal_offset + p.window_right : open_hi;
    return Band{min(max(lo, open_lo), open_hi), min(max(hi, open_lo), open_hi)};
}

// One sequence's band in a packed variable-length batch: the launch's band counts from the sequence's
// bottom right (shift = len_k - len_q); make_band's open sides (wide = true: +-(Nq + Nk + 1) for the
// totals) stay open after any shift, and the result is clamped into the sequence's own range.
__host__ __device__ __forceinline__ Band sequence_band(Band band, int len_q, int len_k) {
    const int shift = len_k - len_q;
    return Band{min(max(band.lo + shift, -(len_q + 1)), len_k), min(max(band.hi + shift, -(len_q + 1)), len_k)};
}

// What a direct C caller could get wrong: windows below -1, and lengths whose row + bound would overflow.
inline bool check_band(int has_window, int window_left, int window_right, int seqlen_q, int seqlen_k) {
    if (has_window && (window_left < -1 || window_right < -1)) return false;
    return static_cast<int64_t>(seqlen_q) + seqlen_k + 1024 < (int64_t(1) << 29);   // varlen: 3x plus a row
}

}  // namespace sy_attn
