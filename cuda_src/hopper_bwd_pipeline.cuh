// The hopper backward's (attention_hopper_bwd.cu) tiles, shared-memory layout and producer warpgroup:
// the traits per head dim, the query tiles a key block walks, the copies in (one thread issuing TMA into
// a ring of query-tile stages) and dQ out (a warp adding the consumers' dQ shares to dq_accum by bulk
// reduce-adds, in a fixed order when deterministic). The consumer warpgroups, the kernel and its launch
// stay in attention_hopper_bwd.cu.
#pragma once

#include "attention_band.cuh"
#include "attention_bwd_common.cuh"
#include "attention_mask.cuh"   // kBandMask: attn_mask tile by tile (the key block's list of query tiles)
#include "hopper_bwd_config.cuh"  // SY_HOPPER_BWD_LPT
#include "hopper_primitives.cuh"

namespace sy_attn {
namespace {

// A kernel's mode: the band's (attention_band.cuh) or kBandMask (attention_mask.cuh) in the low bits, plus
// kVarlenFlag for a packed variable-length batch (as in attention_hopper.cu) and kDropoutFlag (attention_hopper_bwd.cu
// says what it changes).
constexpr int kVarlenFlag = 4;
constexpr int kDropoutFlag = 8;

// A block owns kBlockN = 128 keys of one (batch, query head); consumer warpgroup w owns keys 64w..64w+63
// and walks the query tiles kBlockM at a time: 64 at d = 128, 128 at d = 64. Registers per consumer
// thread, d = 128: dV, dK 64 fp32 each, S^T, dP^T 32 each, P^T, dS^T 16 b32 each, dQ 32; d = 64: dV,
// dK 32, S^T, dP^T 64, P^T, dS^T 32, dQ 32. setmaxnreg gives 240; ptxas -v: no spill. Against 64-query
// tiles at d = 64 the 128-query ones measured 1.1-1.2x (half the tiles, barriers and dQ adds per key).
// kBlockM_ = 80 (d = 128; FlashAttention-3's and -4's tile without a band): a fifth fewer tiles, so fewer
// barriers, fences and dQ adds per query, and n = 80 GEMMs for S^T and dP^T. wgmma's M is 64, so dQ = dS K
// over 80 query rows is no single GEMM: the warpgroups make dQ^T = K^T dS^T instead (kDqTransposed, below).
template <int kHeadDim_, int kStages_, bool kDqViaSmem_, bool kDqTiledAdds_ = false, int kBlockM_ = 0>
struct HopperBwdTraits {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kConsumerWGs = 2;
    static constexpr int kKeysPerWG = 64;
    static constexpr int kBlockN = kConsumerWGs * kKeysPerWG;
    static constexpr int kBlockM = kBlockM_ != 0 ? kBlockM_ : kHeadDim == 64 ? 128 : 64;
    static constexpr int kStages = kStages_;   // Q, dO, LSE, D of later tiles land while this one is computed on
    static constexpr int kThreads = 128 * (1 + kConsumerWGs);

    // 128-byte swizzled panels of 64 columns, as in the forward (hopper_traits.cuh).
    static constexpr int kPanelCols = 64;
    static constexpr int kRowBytes = kPanelCols * 2;
    static constexpr int kAtomBytes = 8 * kRowBytes;
    static constexpr int kPanels = kHeadDim / kPanelCols;
    static constexpr int kKStepsD = kHeadDim / 16;        // k16 steps of S^T, dP^T (over d)
    static constexpr int kKStepsPerPanel = kPanelCols / 16;
    static constexpr int kKStepsM = kBlockM / 16;         // k16 steps of dV, dK (over the tile's queries)

    // dQ = dS K is an m64n64 GEMM per warpgroup over all kBlockN keys: at d = 128 warpgroup w makes
    // columns 64w.. of the 64-query tile, at d = 64 query rows 64w.. of the 128-query tile.
    // kDqTransposed (80-query tiles): warpgroup w makes rows 64w.. of dQ^T = K^T dS^T, an m64n80 GEMM (A = K
    // read MN-major, B = dS stored [query][key], K-major), and its share is dQ^T's 64 x 80 in the registers' order.
    static constexpr bool kDqTransposed = kBlockM % 64 != 0;
    static constexpr bool kDqSplitColumns = kHeadDim == 128;
    static constexpr int kDqKSteps = kBlockN / 16;
    static constexpr int kDqN = kDqTransposed ? kBlockM : 64;   // the dQ GEMM's n
    static constexpr bool kDqViaSmem = kDqViaSmem_;   // SY_HOPPER_BWD_DQ_TMA
    // Else (not varlen) the consumers' atomics into the tile-major dq_accum (atomic_add_tiled), or row-major ones.
    static constexpr bool kDqTiledAdds = kDqTiledAdds_;
    static_assert(!(kDqViaSmem && kDqTiledAdds), "one way for dQ");
    static constexpr int kDqShareFloats = kBlockM * kHeadDim / kConsumerWGs;   // 64 x 64 (80 tiles: 64 x 80)

    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;     // K or V
    static constexpr int kKVPanelBytes = kBlockN * kRowBytes;
    static constexpr int kQBytes = kBlockM * kHeadDim * 2;      // one stage of Q or dO
    static constexpr int kQPanelBytes = kBlockM * kRowBytes;
    // dS^T: [kBlockM / 64][keys][64 queries]; kDqTransposed dS: [kBlockN / 64][queries][64 keys].
    static constexpr int kDsPanelBytes = (kDqTransposed ? kBlockM : kBlockN) * kRowBytes;
    static constexpr int kDsBytes = kBlockN * kBlockM * 2;
    static constexpr int kVecBytes = kBlockM * 4;               // one stage of LSE or D
    // 1024 bytes of slack to align the swizzle atoms; two dS^T buffers (a warpgroup may store tile i+1's
    // while the other still reads tile i's); 256 bytes of barriers.
    static constexpr int kSmemBytesBeforeDq = 1024 + 2 * kKVBytes + 2 * kStages * kQBytes + 2 * kDsBytes +
                                              2 * kStages * kVecBytes + 256;
    // dQ shares: one per consumer warpgroup, or two (tile parity) where they fit -- SY_HOPPER_BWD_DQ_BUFFERS: then a
    // share is stored while the copy engine still reads the previous tile's (d = 128 with two stages: 226.3 KiB).
    static constexpr int kDqBuffers = kDqViaSmem && SY_HOPPER_BWD_DQ_BUFFERS >= 2 &&
                                              kSmemBytesBeforeDq + 2 * kConsumerWGs * kDqShareFloats * 4 <= 227 * 1024
                                          ? 2 : 1;
    static constexpr int kDqSmemBytes = kDqViaSmem ? kDqBuffers * kConsumerWGs * kDqShareFloats * 4 : 0;
    static constexpr int kSmemBytes = kSmemBytesBeforeDq + kDqSmemBytes;

    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;

    static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims 64 and 128");
    static_assert(kStages >= 2, "one query tile must load while another is computed on");
    static_assert(kSmemBytes <= 227 * 1024, "sm_90 gives a block at most 227 KiB of shared memory");
    // setmaxnreg only moves registers inside the block's launch allocation: __launch_bounds__(kThreads, 1)
    // gives each thread 65536 / kThreads rounded down to 8 (168 at 384 threads), not the whole register
    // file. Asking for more (producer 32 + consumers 2 x 240 = 65536 > 64512) left the consumers waiting in
    // setmaxnreg.inc for good: a hung kernel on the H100 (docs/notes-attention-bwd.md, session bwd21p).
    static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= 65536 / kThreads / 8 * 8 * kThreads,
                  "register file: the launch allocation");
    // The padded LSE, D and dq_accum rows cover whole query tiles: SY_ATTN_BWD_ROW_ALIGN's, and 80-query tiles'
    // through hopper_bwd_rows (hopper_bwd_launch.cuh).
    static_assert(kDqTransposed || SY_ATTN_BWD_ROW_ALIGN % kBlockM == 0, "whole query tiles");
    static_assert(!kDqTransposed || (kHeadDim == 128 && kBlockM == 80 && kDqViaSmem),
                  "80-query tiles: d = 128, dQ through shared memory");
};

// Named barriers (0 is __syncthreads): both consumer warpgroups' dS^T stored (256 threads); dQ through
// shared memory: share w of buffer b full, and empty (dq_bar; warpgroup w and the dQ warp, 160). One pair per
// buffer: a warpgroup two tiles ahead of the dQ warp would otherwise arrive twice on one barrier before the warp
// synced on it once (an arrival count past the barrier's 160: the launch failed, session 2026-11-29d).
enum BwdNamedBarrier { kBarDs = 1, kBarDqFull = 2, kBarDqEmpty = 6 };
constexpr int kDqBarThreads = 128 + 32;

// The share buffers a kernel of mode kMode uses: Tr::kDqBuffers, but one with dropout, and the id of warpgroup wg's
// full or empty barrier (kind) for one of them. With dropout the ids are the previous kernel's expression (kind + wg):
// the bf16 d = 128 dropout kernel with an attn_mask sits at its register limit, and kind + 2 wg + buffer there
// spilled 8 bytes (ptxas -v, session 2026-11-29d).
template <class Tr, int kMode>
__host__ __device__ constexpr int dq_buffers() {
    return (kMode & kDropoutFlag) != 0 ? 1 : Tr::kDqBuffers;
}
template <class Tr, int kMode>
__device__ __forceinline__ int dq_bar(BwdNamedBarrier kind, int wg, int buffer) {
    return kind + wg * dq_buffers<Tr, kMode>() + buffer;
}

// The grid's launch order (hopper_bwd_kernel). The block scheduler starts blocks in index order (x fastest) and
// each SM takes the next when one finishes, so the last blocks launched decide the tail. Causal and local key
// blocks differ in work (causal key block 0 sees every query tile, the last block one or two): launched as
// (key blocks, heads, batch) the last head's longest block starts in the last wave, and some SMs run it alone.
// Launched as (heads, key blocks, batch) -- SY_HOPPER_BWD_LPT -- each batch element's blocks start longest first
// (block 0 of every head, then block 1, ...), and the last to start are the shortest; the blocks running together
// still share their batch element's Q, dO and dq_accum lines in L2. Not where the order is fixed by other needs:
// deterministic calls (write_dq's turns: high key blocks first), varlen (key blocks past a sequence leave at
// once) and dropout (its Philox counter reads the head from blockIdx.y, where it is used).
template <int kMode>
__host__ __device__ __forceinline__ bool lpt_grid(const sy_attn_bwd_params &p) {
    constexpr bool kBanded = (kMode & 3) == kBandCausal || (kMode & 3) == kBandLocal;
    return SY_HOPPER_BWD_LPT != 0 && kBanded && (kMode & (kVarlenFlag | kDropoutFlag)) == 0 && !p.deterministic;
}

#ifdef SY_HOPPER_DEVICE_CODE
template <class Tr>
struct BwdBarriers {
    uint64_t kv_full;                                // K and V of the block
    uint64_t q_full[Tr::kStages], q_empty[Tr::kStages];   // Q, dO, LSE, D of a query tile
};

template <class Tr>
struct BwdSmem {
    unsigned char *k, *v;     // [kPanels][kBlockN][64], 128B-swizzled
    unsigned char *q, *dout;  // [kStages][kPanels][kBlockM][64]
    unsigned char *ds;        // [2][kBlockM / 64][kBlockN][64]: dS^T, 128B-swizzled like the tiles
    float *lse, *delta;       // [kStages][kBlockM]: log2-scaled LSE (+inf on padding rows), D
    BwdBarriers<Tr> *bars;

    // [kDqBuffers][kConsumerWGs][kDqShareFloats / 512][128 threads][4]: the dQ shares (SY_HOPPER_BWD_DQ_TMA), after
    // dS^T (computed, not a member: the consumers keep the members in registers). Tile t of a block uses buffer
    // t % dq_buffers().
    __device__ __forceinline__ float *dq(int buffer, int wg) const {
        return reinterpret_cast<float *>(ds + 2 * Tr::kDsBytes) +
               (buffer * Tr::kConsumerWGs + wg) * Tr::kDqShareFloats;
    }

    __device__ explicit BwdSmem(unsigned char *raw) {
        unsigned char *base = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
        k = base;
        v = k + Tr::kKVBytes;
        q = v + Tr::kKVBytes;
        dout = q + Tr::kStages * Tr::kQBytes;
        ds = dout + Tr::kStages * Tr::kQBytes;
        lse = reinterpret_cast<float *>(ds + 2 * Tr::kDsBytes + Tr::kDqSmemBytes);
        delta = lse + Tr::kStages * Tr::kBlockM;
        bars = reinterpret_cast<BwdBarriers<Tr> *>(delta + Tr::kStages * Tr::kBlockM);
        static_assert(sizeof(BwdBarriers<Tr>) <= 256, "kSmemBytes reserves 256 bytes for the barriers");
    }
};

// The query tiles a key block sees: all, or those the band reaches. Row i sees key j iff
// j - hi <= i <= j - lo: the forward's band transposed (band_blocks with keys as rows and (-hi, -lo)).
// Tiles outside [unmasked_begin, unmasked_end) sit on the band's edges and need the per-element mask.
// Keys past seqlen_k need none (see compute_p), so the block's last key is its last real one; neither do
// query rows past seqlen_q (their LSE is +inf: P = 0), so without a band every tile runs unmasked from
// tile 0, and causal only the tiles before unmasked_begin are masked. (Constants where the mode allows:
// at d = 64 the consumer sits at its 240 registers, and a runtime loop start spilled 24-36 bytes.)
// kBandMask: the key block's list (mask_list): tiles 0 .. count - 1 are its entries, each classed on its own.
template <class Tr, int kMode>
__device__ __forceinline__ BlockRange query_tiles(int n0, int len_q, int len_k, Band band, const int *list) {
    if constexpr ((kMode & 3) == kBandMask) {
        const int count = __ldg(list);
        return BlockRange{0, count, 0, 0};
    }
    if constexpr ((kMode & 3) == kBandNone) {
        const int total = ceil_div(len_q, Tr::kBlockM);
        return BlockRange{0, total, 0, total};
    }
    return band_blocks(n0, min(n0 + Tr::kBlockN, len_k) - 1, len_q, Tr::kBlockM, Band{-band.hi, -band.lo});
}

// ceil_div(len, kBlockM) with len through a volatile move: made where it is used, not hoisted (dropout at d = 64
// without a band: the loop's end, which ptxas otherwise kept in local memory).
template <class Tr>
__device__ __forceinline__ int pinned_tiles(int len) {
    asm volatile("mov.b32 %0, %0;" : "+r"(len));
    return ceil_div(len, Tr::kBlockM);
}

// kBandMask: key block n_block's list of query tiles in head (b, h) ([count, entries...], attention_mask.cuh);
// other modes: null.
template <int kMode>
__device__ __forceinline__ const int *mask_list(const sy_attn_bwd_params &p, int b, int h, int n_block) {
    if constexpr ((kMode & 3) == kBandMask) return p.mask_lists + mask_list_offset(p, b, h, n_block);
    return nullptr;
}

// The sequence a block works in: without varlen the launch's lengths, row 0 of batch b; varlen its rows
// of the packed tensors (tensor-map batch 0) and its own band (from its bottom right).
struct Sequence {
    int q_row0, k_row0, len_q, len_k, map_b;
    Band band;
};

template <int kMode>
__device__ __forceinline__ Sequence sequence_of(const sy_attn_bwd_params &p, int b, Band band) {
    if constexpr ((kMode & kVarlenFlag) != 0) {
        const int q_row0 = __ldg(p.cu_seqlens_q + b), k_row0 = __ldg(p.cu_seqlens_k + b);
        const int len_q = __ldg(p.cu_seqlens_q + b + 1) - q_row0, len_k = __ldg(p.cu_seqlens_k + b + 1) - k_row0;
        return Sequence{q_row0, k_row0, len_q, len_k, 0, sequence_band(band, len_q, len_k)};
    }
    return Sequence{0, 0, p.seqlen_q, p.seqlen_k, b, band};
}

// ---- the producer: one thread issues every copy ---------------------------------------------------------
// q_row0, k_row0: the sequence's first rows in the tensor maps (varlen; else 0), b its map batch.
// list (kBandMask, else null): the key block's entries; tile i is then query block MaskWalk::block(list[i]).
template <class Tr>
__device__ __forceinline__ void produce(const BwdSmem<Tr> &sm, const CUtensorMap *tm_q, const CUtensorMap *tm_do,
                                        const CUtensorMap *tm_k, const CUtensorMap *tm_v, const float *gLse,
                                        const float *gD, int n0, int h, int h_kv, int b, int m_first, int m_total,
                                        int q_row0, int k_row0, const int *list) {
    BwdBarriers<Tr> &bar = *sm.bars;
    mbar_arrive_expect_tx(smem_addr(&bar.kv_full), 2 * Tr::kKVBytes);
#pragma unroll
    for (int p = 0; p < Tr::kPanels; ++p) {
        tma_load_4d(smem_addr(sm.k + p * Tr::kKVPanelBytes), tm_k, smem_addr(&bar.kv_full), p * Tr::kPanelCols,
                    k_row0 + n0, h_kv, b);
        tma_load_4d(smem_addr(sm.v + p * Tr::kKVPanelBytes), tm_v, smem_addr(&bar.kv_full), p * Tr::kPanelCols,
                    k_row0 + n0, h_kv, b);
    }
    for (int m = m_first, i = 0; m < m_total; ++m, ++i) {
        const int stage = i % Tr::kStages;
        // A fresh barrier counts as having completed the phase before its first: lap 0 passes at once.
        mbar_wait(smem_addr(&bar.q_empty[stage]), ((i / Tr::kStages) & 1) ^ 1);
        const uint32_t full = smem_addr(&bar.q_full[stage]);
        mbar_arrive_expect_tx(full, 2 * Tr::kQBytes + 2 * Tr::kVecBytes);
        const int m0 = (list ? MaskWalk::block(__ldg(list + i)) : m) * Tr::kBlockM;
#pragma unroll
        for (int p = 0; p < Tr::kPanels; ++p) {
            const int offset = stage * Tr::kQBytes + p * Tr::kQPanelBytes;
            tma_load_4d(smem_addr(sm.q + offset), tm_q, full, p * Tr::kPanelCols, q_row0 + m0, h, b);
            tma_load_4d(smem_addr(sm.dout + offset), tm_do, full, p * Tr::kPanelCols, q_row0 + m0, h, b);
        }
        // The LSE and D rows are padded to SY_ATTN_BWD_ROW_ALIGN: whole tiles, 16-byte aligned.
        bulk_load(smem_addr(sm.lse + stage * Tr::kBlockM), gLse + m0, Tr::kVecBytes, full);
        bulk_load(smem_addr(sm.delta + stage * Tr::kBlockM), gD + m0, Tr::kVecBytes, full);
    }
}

// ---- the dQ warp (SY_HOPPER_BWD_DQ_TMA): shares to dq_accum by bulk reduce-adds ---------------------
// gDqHead: the head's tile-major dq_accum; tile m's share w is the 4096 floats at (m * 2 + w) * 4096.
// Deterministic calls (sems: the head's per-tile counters, zeroed): the key blocks add a query tile's
// shares in a fixed order, so every run sums dQ in the same order. Without a band ascending key blocks
// (all see every tile); with one descending from the last block that sees the tile (the diagonal's
// block reaches a tile first: its own first tile), and the grid launches high key blocks first
// (hopper_bwd_kernel), so a block only ever waits for blocks launched before it: no deadlock.
// list (kBandMask, else null): the key block's entries, as in produce (never deterministic: no turns).
template <class Tr, int kMode>
__device__ __forceinline__ void write_dq(const BwdSmem<Tr> &sm, float *gDqHead, int m_first, int m_total, int lane,
                                         int *sems, int n_block, const Sequence &seq, const int *list) {
    for (int i = m_first; i < m_total; ++i) {
        const int m = list ? MaskWalk::block(__ldg(list + i)) : i;
        const int buffer = (i - m_first) % dq_buffers<Tr, kMode>();   // the consumers' tile counter starts at 0
#pragma unroll
        for (int w = 0; w < Tr::kConsumerWGs; ++w) {
            named_bar_sync(dq_bar<Tr, kMode>(kBarDqFull, w, buffer), kDqBarThreads);   // share w stored and fenced
            if (sems != nullptr && w == 0 && lane == 0) {
                int turn = n_block;
                if constexpr ((kMode & 3) == kBandCausal || (kMode & 3) == kBandLocal) {
                    const int row0 = m * Tr::kBlockM, row1 = min(row0 + Tr::kBlockM, seq.len_q) - 1;
                    turn = band_blocks(row0, row1, seq.len_k, Tr::kBlockN, seq.band).end - 1 - n_block;
                }
                // Acquire: the previous block's adds (completed before its release) come first. A turn that
                // never comes would hang the GPU: after ~2^24 polls (seconds) trap instead (an error, not a hang).
                for (uint32_t polls = 0; ld_acquire_gpu(sems + m) != turn; ++polls) {
                    if (polls > (1u << 24)) __trap();
                    __nanosleep(64);
                }
            }
            if (lane == 0) {
                bulk_reduce_add_f32(gDqHead + (m * Tr::kConsumerWGs + w) * Tr::kDqShareFloats,
                                    smem_addr(sm.dq(buffer, w)), Tr::kDqShareFloats * 4);
                bulk_commit();
            }
        }
        if (sems != nullptr) {
            // Both adds performed at L2 (not only read) before the next block's turn: release.
            if (lane == 0) {
                bulk_wait_all();
                red_release_gpu_add(sems + m, 1);
            }
            __syncwarp();
            named_bar_arrive(dq_bar<Tr, kMode>(kBarDqEmpty, 0, buffer), kDqBarThreads);
            named_bar_arrive(dq_bar<Tr, kMode>(kBarDqEmpty, 1, buffer), kDqBarThreads);
            continue;
        }
        // Share w may be overwritten once the copy engine has read it (not yet added it).
        if (lane == 0) bulk_wait_read<1>();
        __syncwarp();
        named_bar_arrive(dq_bar<Tr, kMode>(kBarDqEmpty, 0, buffer), kDqBarThreads);
        if (lane == 0) bulk_wait_read<0>();
        __syncwarp();
        named_bar_arrive(dq_bar<Tr, kMode>(kBarDqEmpty, 1, buffer), kDqBarThreads);
    }
    if (lane == 0) bulk_wait_all();
}
#endif  // SY_HOPPER_DEVICE_CODE

}  // namespace
}  // namespace sy_attn
