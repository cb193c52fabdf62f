// The `hopper` forward's (attention_hopper.cu) pipeline around the consumers: the kernel's mode flags, the
// tile order (TileScheduler), the shared-memory layout (the K/V ring, the Q buffers and their mbarriers),
// the tile a block works on (TileWork: its band's key blocks, varlen lengths, kBandMask's list) and the
// producer, one thread issuing every copy. Hardware fact it serves: on Hopper the copy engine (TMA) moves
// tiles into shared memory asynchronously and completes them on mbarriers, so one producer thread keeps
// the consumers' wgmma GEMMs fed through a ring of stages. The consumer warpgroups, the kernel and its
// launch stay in attention_hopper.cu; the tile sizes are in hopper_traits.cuh.
#pragma once

#include "attention_band.cuh"       // the causal / sliding-window band: Band, band_blocks
#include "attention_common.cuh"
#include "attention_mask.cuh"       // kBandMask: attn_mask tile by tile
#include "hopper_primitives.cuh"   // PTX wrappers, tensor maps, SY_HOPPER_DEVICE_CODE
#include "hopper_traits.cuh"
#include "tile_order.cuh"        // TileOrder: which tile a block takes next

namespace sy_attn {
namespace {

// A kernel's mode: the band's (attention_band.cuh) in the low bits, plus kVarlenFlag for a packed
// variable-length batch (p.cu_seqlens_q: each tile reads its sequence's offsets and lengths).
constexpr int kVarlenFlag = 4;
// kDropoutFlag: dropout (p.dropout_p, attention_dropout.cuh), instantiated with every band mode and kBandMask.
constexpr int kDropoutFlag = 8;

// ---- the tile order ------------------------------------------------------------------------------------
// Tile t: query block m of head (b, h) in TileOrder's order (tile_order.cuh): full rectangles head-major, so
// the ~132 tiles in flight cover a few heads and re-read their K/V from L2; bands (causal, windows; not
// varlen or mask lists) longest first inside sections of heads whose K/V fit a share of L2, so the grid's
// last draws are its shortest tiles; varlen and mask lists head-major with each head's last query block
// (the longest when causal) first.
//
// With a tile counter (p.tile_counter) the grid is persistent, one block per SM: block i starts on
// tile i and then takes the next untaken tile from the counter (a dynamic schedule: a block that
// drew short causal tiles takes more); its producer loads the next tile's Q and K/V while the
// consumers finish the current one, and the consumers go from tile to tile in one turn
// (Consumer::next_tile). Measured against one block per tile (docs/notes-hopper.md v10): +1-8 % not
// causal, +4-12 % causal at N = 4096-8192. Without a counter (a C caller's choice) the grid has a
// block per tile, which the hardware hands to SMs as they free up.
// Full rectangles (kBandNone, not varlen) are tiles of one length: there a static stride (block i takes
// tiles i, i + grid, ...) deals them as the counter would, and the launch needs no memset of the counter
// before the kernel (a second operation on the stream, and a gap between the two, in every call: a few
// microseconds beside the 235 us of d = 128, N = 1024, B * N = 16384). Measured once (docs/notes-hopper.md
// fwd21c): d = 128 N = 1024 +3 %, level at N = 4096 and at d = 64.
struct TileScheduler {
    TileOrder order;
    int heads_q;
    int n_tiles;
    int stride;      // 1: persistent with the static stride (no counter)

    struct Tile { int m_block, h, b; };

#ifdef SY_HOPPER_DEVICE_CODE   // the kernel's only callers exist in the sm_90a device pass
    __device__ __forceinline__ Tile tile(int t, bool reverse_m) const {
        const TileCoord c = order.at(t, reverse_m);
        return {c.m_block, c.head % heads_q, c.head / heads_q};
    }

    // The tile after this block's current one t; n_tiles or more means none is left.
    __device__ __forceinline__ int next(int *counter, int t) const {
        if (stride) return t + static_cast<int>(gridDim.x);
        return counter ? static_cast<int>(gridDim.x) + atomicAdd(counter, 1) : n_tiles;
    }
#endif
};

#ifdef SY_HOPPER_DEVICE_CODE

// ---- shared memory ----------------------------------------------------------------------------------
// Where one block's K or V comes from: its key rows in the tensor map.
struct KVBlock {
    int row, h_kv, batch;
};

// The ring's barriers. Every consumer thread arrives on an empty barrier (128 x kConsumerWGs arrivals): it
// releases the stage once its own wait_group returned, with no extra warpgroup barrier.
template <class Tr>
struct Barriers {
    uint64_t q_full[Tr::kQBuffers], q_empty[Tr::kQBuffers];
    uint64_t k_full[Tr::kStages], v_full[Tr::kStages];
    uint64_t k_empty[Tr::kStages], v_empty[Tr::kStages];
    // The tile whose Q a q_full phase brings (n_tiles or more: no more tiles), written by the
    // producer before its q_full arrival (release), read by consumers after their wait (acquire).
    int tile[Tr::kQBuffers];
    // SY_HOPPER_FWD_V_LAG: the block whose V the producer issues after the next block's K (ring index
    // kv_iter - 1 then), kept here rather than in the producer thread's 24 registers (held there across a
    // tile it spilled 8 bytes in the varlen and mask-list kernels).
    KVBlock v_next;
};

template <class Tr>
struct SharedTiles {
    unsigned char *q;   // [kQBuffers][kPanels][kBlockM][64], 128B-swizzled
    unsigned char *k;   // [kStages][kPanels][kBlockN][64]
    unsigned char *v;   // [kStages][kPanels][kBlockN][64]
    unsigned char *o;   // kStageO: [kConsumerWGs][kPanels][64][64], 128B-swizzled (Consumer::store_staged)
    Barriers<Tr> *bars;
    float2 *sink;       // [128 * kConsumerWGs]: Consumer::pin_softmax's stores, never read

    __device__ explicit SharedTiles(unsigned char *raw) {
        unsigned char *base = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
        q = base;
        k = q + Tr::kQBuffers * Tr::kQBytes;
        v = k + Tr::kStages * Tr::kKVBytes;
        o = v + Tr::kStages * Tr::kKVBytes;
        bars = reinterpret_cast<Barriers<Tr> *>(o + Tr::kOBytes);
        sink = reinterpret_cast<float2 *>(reinterpret_cast<unsigned char *>(bars) + 256);
        static_assert(sizeof(Barriers<Tr>) <= 256, "kSmemBytes reserves 256 bytes for the barriers");
    }
};

// ---- one tile as producer and consumers walk it ------------------------------------------------------
// Query block m0 of head (b, h); its key blocks first_block .. first_block + n_blocks - 1: all, or
// those the band reaches (attention_band.cuh: up to the last row's diagonal when causal, from the first
// row's window start when local). Blocks j (counted from first_block) in [unmasked_begin, unmasked_end)
// are seen whole by every row; the others sit on the band's edges or hold the ragged end and are
// masked. Every consumer warpgroup walks the same blocks (the ring is shared); a block fully above the
// diagonal for warpgroup 0's rows is masked to zero weight, at most one per query block. (Letting each
// warpgroup stop at its own rows' diagonal, which at d = 64 cuts the causal work masked away from
// 11-16 % to 3-6 %, measured no faster: docs/notes-hopper.md v9.) A tile none of whose rows sees a key
// still walks one block, fully masked: its rows give 0 and an LSE of -inf through the softmax's guard,
// and the pipeline keeps its shape. kv0: the ring index of block 0; q_buf: the Q buffer (tiles
// alternate between kQBuffers).
struct TileWork {
    int m0, h, b;
    int first_block, n_blocks, unmasked_begin, unmasked_end;
    int kv0, q_buf;
    int list;   // kBandMask: the tile's mask list at p.mask_lists + list (blocks j are its entries; first_block 0)
};

// Varlen: sequence b's query and key lengths and its band (from its bottom right); otherwise the launch's.
template <int kMode>
__device__ __forceinline__ void sequence(const sy_attn_params &p, int b, int &len_q, int &len_k, Band &band) {
    len_q = p.seqlen_q;
    len_k = p.seqlen_k;
    if constexpr ((kMode & kVarlenFlag) != 0) {
        len_q = __ldg(p.cu_seqlens_q + b + 1) - __ldg(p.cu_seqlens_q + b);
        len_k = __ldg(p.cu_seqlens_k + b + 1) - __ldg(p.cu_seqlens_k + b);
        band = sequence_band(band, len_q, len_k);
    }
}

template <class Tr, int kMode>
__device__ __forceinline__ TileWork tile_work(const TileScheduler &sched, int t, const sy_attn_params &p, Band band,
                                              int kv0, int tile_iter) {
    constexpr int kBand = kMode & 3;
    const TileScheduler::Tile tile = sched.tile(t, kBand != kBandNone);
    TileWork w;
    w.list = 0;
    w.m0 = tile.m_block * Tr::kBlockM;
    w.h = tile.h;
    w.b = tile.b;
    int len_q, len_k;
    sequence<kMode>(p, w.b, len_q, len_k, band);
    const int last_row = min(w.m0 + Tr::kBlockM, len_q) - 1;
    const BlockRange r = kBand == kBandMask ? BlockRange{0, 0, 0, 0} : band_blocks_in<kBand>(w.m0, last_row, len_k, Tr::kBlockN, band);
    if constexpr (kBand == kBandMask) {   // the list's entries (attention_mask.cuh); none: entry 0, block 0 empty
        w.list = static_cast<int>(mask_list_offset(p, w.b, w.h, tile.m_block));
        w.first_block = w.unmasked_begin = w.unmasked_end = 0;
        w.n_blocks = max(__ldg(p.mask_lists + w.list), 1);
        w.kv0 = kv0;
        w.q_buf = tile_iter % Tr::kQBuffers;
        return w;
    }
    w.first_block = r.begin;
    w.n_blocks = max(r.end - r.begin, 1);
    w.unmasked_begin = r.unmasked_begin - r.begin;
    w.unmasked_end = r.unmasked_end - r.begin;
    w.kv0 = kv0;
    w.q_buf = tile_iter % Tr::kQBuffers;
    return w;
}

// The ring and loop fields of a consumer's tile, as values the compiler knows are the same in every
// lane. They are (the tile index comes from one shared-memory word), but unproven they stay in
// vector registers, and so do the stage arithmetic and wgmma descriptors built from them: two R2UR
// and four integer instructions more per wgmma (the SASS of the first cut). A shuffle from lane 0
// per tile settles it.
__device__ __forceinline__ TileWork uniform(TileWork w) {
    w.first_block = __shfl_sync(0xffffffffu, w.first_block, 0);
    w.n_blocks = __shfl_sync(0xffffffffu, w.n_blocks, 0);
    w.unmasked_begin = __shfl_sync(0xffffffffu, w.unmasked_begin, 0);
    w.unmasked_end = __shfl_sync(0xffffffffu, w.unmasked_end, 0);
    w.kv0 = __shfl_sync(0xffffffffu, w.kv0, 0);
    w.q_buf = __shfl_sync(0xffffffffu, w.q_buf, 0);
    w.list = __shfl_sync(0xffffffffu, w.list, 0);
    return w;
}

// ---- the producer: one thread issues every copy ---------------------------------------------------
// Varlen: the grid walks every sequence as if it had max_seqlen_q queries; tiles past a sequence's end
// are skipped here (each skip draws again), so no consumer ever sees one. Otherwise t itself.
template <class Tr, int kMode>
__device__ __forceinline__ int skip_past_ends(const TileScheduler &sched, const sy_attn_params &p, int t) {
    if constexpr ((kMode & kVarlenFlag) != 0) {
        for (; t < sched.n_tiles; t = sched.next(p.tile_counter, t)) {
            const TileScheduler::Tile tl = sched.tile(t, (kMode & 3) != kBandNone);
            if (tl.m_block * Tr::kBlockM < __ldg(p.cu_seqlens_q + tl.b + 1) - __ldg(p.cu_seqlens_q + tl.b)) break;
        }
    }
    return t;
}

// Q of tile t (iteration tile_iter of this block) into its buffer, once every consumer has freed it:
// finished the S GEMMs of the tile the buffer held, or (kQInRegisters) read it into registers. t at
// or past n_tiles completes the phase with no bytes: "stop". The tile index is written before the
// arrival (release), read by the consumers after their wait (acquire).
template <class Tr, int kMode>
__device__ __forceinline__ void produce_q(const SharedTiles<Tr> &sm, const CUtensorMap *tm_q, const TileScheduler &sched,
                                          const sy_attn_params &p, int tile_iter, int t) {
    Barriers<Tr> &bar = *sm.bars;
    const int buf = tile_iter % Tr::kQBuffers;
    mbar_wait(smem_addr(&bar.q_empty[buf]), ((tile_iter / Tr::kQBuffers) & 1) ^ 1);
    bar.tile[buf] = t;
    if (t >= sched.n_tiles) {
        mbar_arrive(smem_addr(&bar.q_full[buf]));
        return;
    }
    constexpr bool kVarlen = (kMode & kVarlenFlag) != 0;
    const TileScheduler::Tile tl = sched.tile(t, (kMode & 3) != kBandNone);
    const int row = (kVarlen ? __ldg(p.cu_seqlens_q + tl.b) : 0) + tl.m_block * Tr::kBlockM;
    unsigned char *q = sm.q + buf * Tr::kQBytes;
    mbar_arrive_expect_tx(smem_addr(&bar.q_full[buf]), Tr::kQBytes);
#pragma unroll
    for (int c = 0; c < Tr::kPanels; ++c)
        tma_load_4d(smem_addr(q + c * Tr::kQPanelBytes), tm_q, smem_addr(&bar.q_full[buf]), c * Tr::kPanelCols, row,
                    tl.h, kVarlen ? 0 : tl.b);
}

// K or V of block b, ring index kv_iter (counted over all tiles of this block: it names the ring stage and
// its lap), into ring stage kv_iter % kStages, once the consumers released it. A fresh
// barrier counts as having completed the phase before its first, so the first lap waits on parity 1
// and passes at once; lap L waits for the consumers' release of lap L-1.
template <class Tr>
__device__ __forceinline__ void produce_tile(const CUtensorMap *tm, unsigned char *ring, uint64_t *empty, uint64_t *full,
                                             int kv_iter, const KVBlock &b) {
    const int stage = kv_iter % Tr::kStages;
    mbar_wait(smem_addr(&empty[stage]), ((kv_iter / Tr::kStages) & 1) ^ 1);
    mbar_arrive_expect_tx(smem_addr(&full[stage]), Tr::kKVBytes);
#pragma unroll
    for (int c = 0; c < Tr::kPanels; ++c)
        tma_load_4d(smem_addr(ring + stage * Tr::kKVBytes + c * Tr::kKVPanelBytes), tm, smem_addr(&full[stage]),
                    c * Tr::kPanelCols, b.row, b.h_kv, b.batch);
}

// The producer thread's whole walk: each tile's K/V blocks through the ring (kv_iter counts blocks over
// all tiles of this block: it names the ring stage and its lap), and the next tile's Q ahead of them.
// Full rectangles (kBandNone, not varlen) draw the next tile as a tile starts, so the counter's round
// trip to L2 (an atomic) overlaps the copies; with Q in registers the consumers free the single Q buffer
// as a tile starts (take_q), so the next tile's Q is issued right after the tile's first K/V block, a
// whole tile before the boundary where it is needed, rather than after the tile's last block (at 2
// stages, about one block before it). Measured (docs/notes-hopper.md, fwd21) in three runs: d = 128
// not causal +3 % at N = 1024, +1.6 % at 4096; d = 64 (draw only: Q in shared memory waits for the last
// S GEMM of a tile, and with one buffer issuing it earlier would deadlock) +0-2 %. Bands (causal,
// windows, mask lists) keep the late draw. On the head-major order a block that reserved its next tile a
// tile early left the dynamic schedule less to balance at the end (-1.4 % at d = 128 N = 4096 causal,
// -1.8 % at d = 64 N = 1024, fwd21). On the sectioned order (tile_order.cuh), d = 128 causal measured
// +1.5-3.3 % at N = 1024, +1 % at 2048, -0.6 to -2.4 % at 4096 over two calls of three rounds, and d = 64
// -3 % at N = 1024 (docs/notes-hopper.md, 2026-11-29b): level overall, so not taken. Varlen keeps the late
// draw too: its producer holds the sequence offsets, and the next tile held across the blocks spilled
// 16-24 bytes at 24 registers.
#ifndef SY_HOPPER_BAND_DRAW_EARLY
#define SY_HOPPER_BAND_DRAW_EARLY 0   // a head dim whose bands (not mask lists) draw early, for a same-run A/B
#endif
// V one block behind K (FlashAttention-3/4's order with the intra-warpgroup overlap) on two-stage rings:
// the consumers take block i's K with block i-1's V in one turn (S_i and P_{i-1} V_{i-1}), and free a K
// stage as soon as its S GEMM completes but a V stage only after the softmax that follows its P V. Issued
// K_i, V_i, K_{i+1}, the copy of K_{i+1} waited behind V_i's stage, freed about a softmax later than K_{i+1}'s
// own; issued K_{i+1}, V_i, it leaves as soon as its stage is free. Measured on the H200 (docs/notes-hopper.md,
// 2026-11-29h), d = 128: +3-4 % causal at N = 1024 (with the wait between the rows or without), level at
// 2048-8192; the four-stage d = 64 rings load far enough ahead without it, and there it measured -0.7 to -1.5 %
// causal at N = 2048-4096 (level at 1024), so they keep K and V together. 0: K and V together everywhere.
#ifndef SY_HOPPER_FWD_V_LAG
#define SY_HOPPER_FWD_V_LAG 1
#endif
template <class Tr, int kMode>
__device__ void produce(const SharedTiles<Tr> &sm, const CUtensorMap *tm_q, const CUtensorMap *tm_k,
                        const CUtensorMap *tm_v, const TileScheduler &sched, const sy_attn_params &p, Band band) {
    constexpr bool kVarlen = (kMode & kVarlenFlag) != 0;
    constexpr bool kDrawEarly =
        !kVarlen && ((kMode & 3) == kBandNone || (Tr::kHeadDim == SY_HOPPER_BAND_DRAW_EARLY && (kMode & 3) != kBandMask));
    constexpr bool kQAhead = Tr::kQInRegisters && kDrawEarly;
    constexpr bool kVLag = SY_HOPPER_FWD_V_LAG && Tr::kStages == 2;
    const int group = p.heads_q / p.heads_kv;
    int kv_iter = 0;
    Barriers<Tr> &bar = *sm.bars;
    KVBlock &v_next = bar.v_next;   // pending once a block has been issued (kv_iter > 0)
    int t = skip_past_ends<Tr, kMode>(sched, p, blockIdx.x);
    produce_q<Tr, kMode>(sm, tm_q, sched, p, 0, t);
    for (int tile_iter = 0; t < sched.n_tiles; ++tile_iter) {
        const TileWork w = tile_work<Tr, kMode>(sched, t, p, band, kv_iter, tile_iter);
        int next = kDrawEarly ? sched.next(p.tile_counter, t) : 0;
        // Where the tile's sequence starts in the tensor maps (varlen: its first packed row, batch 0;
        // otherwise row 0 of batch w.b); kBandMask: block j is entry j of the tile's list.
        const int k_row0 = kVarlen ? __ldg(p.cu_seqlens_k + w.b) : 0, batch = kVarlen ? 0 : w.b;
        const int *entries = (kMode & 3) == kBandMask ? p.mask_lists + w.list + 1 : nullptr;
        for (int j = 0; j < w.n_blocks; ++j, ++kv_iter) {
            const int block = entries ? MaskWalk::block(__ldg(entries + j)) : w.first_block + j;
            const KVBlock kv{k_row0 + block * Tr::kBlockN, w.h / group, batch};
            produce_tile<Tr>(tm_k, sm.k, bar.k_empty, bar.k_full, kv_iter, kv);
            if (!kVLag) {
                produce_tile<Tr>(tm_v, sm.v, bar.v_empty, bar.v_full, kv_iter, kv);
            } else {   // the previous block's V, then this one's waits for the next block's K
                if (kv_iter > 0) produce_tile<Tr>(tm_v, sm.v, bar.v_empty, bar.v_full, kv_iter - 1, v_next);
                v_next = kv;
            }
            if (kQAhead && j == 0) produce_q<Tr, kMode>(sm, tm_q, sched, p, tile_iter + 1, next);
        }
        if constexpr (!kDrawEarly) next = skip_past_ends<Tr, kMode>(sched, p, sched.next(p.tile_counter, t));
        if (!kQAhead) produce_q<Tr, kMode>(sm, tm_q, sched, p, tile_iter + 1, next);
        t = next;
    }
    if (kVLag && kv_iter > 0) produce_tile<Tr>(tm_v, sm.v, bar.v_empty, bar.v_full, kv_iter - 1, v_next);   // the last block's V
}
#endif  // SY_HOPPER_DEVICE_CODE

}  // namespace
}  // namespace sy_attn
