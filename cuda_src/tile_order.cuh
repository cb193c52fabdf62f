// The order in which the `hopper` forward's blocks take their tiles (TileScheduler, hopper_fwd_pipeline.cuh):
// tile t -> (query block, head), head = b * heads_q + h. Host and device code, so the order is checked on the
// CPU (tests/test_tile_order.py compiles this header with g++) before any device sees it.
//
// Head-major (full rectangles): the query blocks of one head one after another, so the ~132 tiles in flight
// cover a few heads and re-read their K/V from L2 rather than HBM.
//
// Bands (causal, windows): tiles differ in length (query block m of a causal head walks m + 1 key blocks), and
// a persistent grid that draws tiles from a counter is a greedy list schedule: it ends well when the last tiles
// drawn are the shortest (longest processing time first), since the blocks then finish within a short tile of
// one another. Head-major with the query blocks reversed (the order before this header) ends every head on its
// shortest tile but starts the next head on its longest, so the grid's last draws mix long and short tiles: at
// d = 64, N = 1024, B * H = 512 (4 096 tiles on 132 SMs) a list-schedule model of the two gives 96.7 % and
// 99.4 % of the SMs' time busy. Measured on the H200 (docs/notes-hopper.md, 2026-11-29b), three interleaved runs:
// causal +1-2 % at N = 2048 and 4096 (d = 64 and 128), level at N = 1024, where the model's tail did not show.
// Longest first over the whole grid would spread the tiles of a head over the whole run, and its K/V would be
// read from HBM once per query block (v2 of docs/notes-hopper.md: 12 heads of d = 128, N = 4096, 24 MiB of K/V,
// in flight at once read 2.6x the inputs from HBM). So the heads are cut into sections whose K/V fit a share of
// L2, and inside a section the tiles go longest first: query block n_mblocks - 1 of every head of the section,
// then n_mblocks - 2, and so on. The last section takes the heads left over, so no section is shorter than the
// others.
#pragma once

#include <algorithm>

namespace sy_attn {

struct TileCoord {
    int m_block;   // query block of the head
    int head;      // b * heads_q + h
};

struct TileOrder {
    int n_mblocks;       // query blocks per head
    int n_heads;         // batch x query heads
    int section_heads;   // 0: head-major; otherwise longest first inside sections of this many heads

    // reverse_m (head-major only): a head's query blocks from the last, which sees the most keys when causal.
    __host__ __device__ __forceinline__ TileCoord at(int t, bool reverse_m) const {
        if (section_heads > 0) {
            const int n_sections = n_heads / section_heads;
            const int s = min(t / (section_heads * n_mblocks), n_sections - 1);
            const int h0 = s * section_heads;
            const int heads_here = s == n_sections - 1 ? n_heads - h0 : section_heads;
            const int r = t - h0 * n_mblocks;
            return {n_mblocks - 1 - r / heads_here, h0 + r % heads_here};
        }
        const int m = t % n_mblocks;
        return {reverse_m ? n_mblocks - 1 - m : m, t / n_mblocks};
    }
};

// Host: how many heads a section holds. At least the heads the resident blocks span at once (head-major keeps
// that many in flight anyway), more while their K/V (kv_bytes_per_head: K and V of one query head's share of
// its KV head) fit l2_budget bytes, at most every head.
inline int section_heads_for(int n_heads, int n_mblocks, int resident_blocks, long long kv_bytes_per_head,
                             long long l2_budget) {
    const int in_flight = (resident_blocks + n_mblocks - 1) / n_mblocks;
    const long long fit = l2_budget / std::max(kv_bytes_per_head, 1LL);
    const long long heads = std::max<long long>(fit, in_flight);
    return static_cast<int>(std::max<long long>(1, std::min<long long>(heads, n_heads)));
}

}  // namespace sy_attn
