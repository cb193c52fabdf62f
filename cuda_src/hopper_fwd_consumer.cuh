// The `hopper` forward's consumer warpgroup (64 query rows): S = Q K^T by wgmma, the online softmax
// (with the mask, band and dropout of its mode), O += P V from registers, ping-pong turns with the other
// consumers, and the tile's epilogue. attention_hopper.cu holds the kernel that runs it and the launch;
// the tile order, the shared-memory layout and the producer are in hopper_fwd_pipeline.cuh.
#pragma once

#include "hopper_fwd_pipeline.cuh"   // mode flags, tile order, shared memory, TileWork, the producer
#include "hopper_fwd_epilogue.cuh"   // O out through shared memory and the copy engine
#include "hopper_fwd_dropout.cuh"   // dropout: Philox keep bits drawn under P V, P's dropped scores zeroed
#include "mma_primitives.cuh"      // MmaOp<T>::pack (two fp32 to one 16-bit pair), smem_addr
#include "softmax.cuh"

namespace sy_attn {
namespace {

#ifdef SY_HOPPER_DEVICE_CODE

// ---- a consumer warpgroup: 64 query rows ------------------------------------------------------------
template <class Tr, typename T, int kMode>
struct Consumer : ConsumerDropout<Consumer<Tr, T, kMode>, Tr, T, kMode> {
    using Dropping = ConsumerDropout<Consumer, Tr, T, kMode>;
    using Dropping::draw_early, Dropping::drop, Dropping::drop_s, Dropping::key_block;
    static constexpr int kBand = kMode & 3;
    static constexpr bool kDropout = (kMode & kDropoutFlag) != 0;
    static constexpr int kNTilesS = Tr::kBlockN / 8;   // n8 column tiles of S
    static constexpr int kNTilesO = Tr::kHeadDim / 8;  // n8 column tiles of O
    using GemmS = typename WgmmaN<Tr::kBlockN>::template Op<T>;
    using GemmO = typename WgmmaN<Tr::kHeadDim>::template Op<T>;

    const SharedTiles<Tr> &sm;
    const int wg;                // which consumer: 0 .. kConsumerWGs - 1
    int row0;                    // first query row of this warpgroup in the tile being folded
    const int thread_row;        // this thread's first row inside the warpgroup's 64 (second: +8)
    const int thread_col;        // this thread's first column inside an n8 tile
    const float scale_log2;
    // wgmma descriptors of this warpgroup's Q rows and of ring stage 0 of K and V (desc_at steps on).
    const uint64_t q_desc, k_desc, v_desc;
    // kStageO: O's tensor map, where the launch made one (o TMA-aligned, not varlen); nullptr: direct stores.
    const CUtensorMap *const tm_o;
    const DropoutConsts &dropout_consts;   // kDropout: the launch's (a kernel parameter, in the constant bank)

    float rS[1][kNTilesS][4];    // S, then P in fp32: the warpgroup's 64 x kBlockN scores
    uint32_t rP[Tr::kPVSteps][4];   // P in 16 bits: one m64k16 A fragment per k16 step of P V
    uint32_t rQ[Tr::kKSteps][4];    // kQInRegisters: the warpgroup's 64 Q rows, one A fragment per k16 step
    float acc[1][kNTilesO][4];   // O, un-normalised
    float alpha[2];              // the O rescale of the block just folded, applied before the next P V
    bool rescale_pending;        // some row of this warp has alpha != 1 (lazy rescale: mostly not)
    OnlineSoftmaxFragment<1> softmax;

    __device__ Consumer(const SharedTiles<Tr> &sm_, int wg_, float scale, const CUtensorMap *tm_o_, const DropoutConsts &dc)
        : sm(sm_), wg(wg_), row0(0),
          thread_row((threadIdx.x % 128) / 32 * 16 + (threadIdx.x % 32) / 4), thread_col((threadIdx.x % 4) * 2),
          scale_log2(scale * kLog2e),
          q_desc(smem_desc(smem_addr(sm_.q) + wg_ * Tr::kRowsPerWG * Tr::kRowBytes, 16, Tr::kAtomBytes)),
          k_desc(smem_desc(smem_addr(sm_.k), 16, Tr::kAtomBytes)),
          v_desc(smem_desc(smem_addr(sm_.v), Tr::kKVPanelBytes, Tr::kAtomBytes)), tm_o(Tr::kStageO ? tm_o_ : nullptr),
          dropout_consts(dc) {}

    // Ring index kv (the count of K/V blocks this block has consumed before) names the stage and its lap.
    static __device__ __forceinline__ int stage_of(int kv) { return kv % Tr::kStages; }
    static __device__ __forceinline__ uint32_t full_parity(int kv) { return (kv / Tr::kStages) & 1; }

    __device__ __forceinline__ float (&flat_s())[Tr::kBlockN / 2] { return reinterpret_cast<float(&)[Tr::kBlockN / 2]>(rS); }
    __device__ __forceinline__ float (&flat_acc())[Tr::kHeadDim / 2] { return reinterpret_cast<float(&)[Tr::kHeadDim / 2]>(acc); }

    // Ping-pong: warpgroup wg issues its GEMMs only after the previous one has issued its own.
    // Round robin over the consumers on named barriers 1..kConsumerWGs: barrier 1 + w completes when
    // warpgroup w waits on it and its predecessor has passed (2 x 128 threads).
    static constexpr int kLastWG = Tr::kConsumerWGs - 1;
    // SY_HOPPER_FWD_MID_WAIT: key blocks wait for the P V in flight between their two rows'
    // exponentials (step, fold_split); 0: after both, pinned there by pin_softmax. FlashAttention-4's SASS
    // waits inside its exponential stream and packs P between the MUFUs; ours ran all 66 MUFU.EX2, then the
    // wait, then 32 F2FP in a row, and freed V's stage last. Left to itself ptxas kept 52 of the 66 ahead of
    // the wait at d = 128 and 65 at d = 64 (it hoists the second row's register-only work; a volatile move on
    // its maximum did not stop it); kRowOrder below holds it after the first row. Measured on the H200 against
    // the code before it (docs/notes-hopper.md, 2026-11-29h): d = 128 not causal +3-4 % at N = 1024 and 4096
    // (ncu, clocks locked, N = 4096: 986 us against 1030; FlashAttention-4's kernel 999).
#ifndef SY_HOPPER_FWD_MID_WAIT
#define SY_HOPPER_FWD_MID_WAIT 1
#endif
    static constexpr bool kMidWait = SY_HOPPER_FWD_MID_WAIT;
    // SY_HOPPER_FWD_ROW_ORDER (with kMidWait): the second row's exponentials follow the first row's packing,
    // which follows the wait (packing writes rP, which the P V in flight reads). Without it ptxas hoists the
    // second row's register-only work above the wait: at d = 64 it kept 65 of the 66 MUFU.EX2 ahead of it and
    // packed P in a row after them. With it the wait follows 33 (d = 64 and 128) and 30 of the 32 F2FP sit
    // between the second row's MUFUs. Measured on the H200 with kMidWaitMasked against the code before
    // (docs/notes-hopper.md, 2026-11-29i): d = 128 +2.6-5 % not causal, +1.7-2.8 % causal (N = 4096 not
    // causal 677-698 TFLOP/s, FlashAttention-4's kernel 648-651 in the same processes); d = 64 +1.3 % causal
    // at N = 1024, -0.6 to -1.6 % not causal at N = 4096. Waiting after half the first row: kShortCausal below.
#ifndef SY_HOPPER_FWD_ROW_ORDER
#define SY_HOPPER_FWD_ROW_ORDER 1
#endif
    static constexpr bool kRowOrder = SY_HOPPER_FWD_ROW_ORDER;
    // SY_HOPPER_FWD_MID_WAIT_MASKED: the same wait between the rows on blocks masked by compares (the causal
    // diagonal, a window's edges, a ragged end); 0: unmasked blocks only. attn_mask's partial blocks wait
    // before their loads instead (kMaskWaits).
#ifndef SY_HOPPER_FWD_MID_WAIT_MASKED
#define SY_HOPPER_FWD_MID_WAIT_MASKED 1
#endif
    static constexpr bool kMidWaitMasked = SY_HOPPER_FWD_MID_WAIT_MASKED;
    // d = 64's 128 x 128 tiles, causal (HopperTraitsD64Short: N <= 1024, where the tiles average 4.5 key
    // blocks and the exponentials set the pace): SY_HOPPER_FWD_SHORT_WAIT_AFTER_TILES, the wait follows that
    // many of the first row's kBlockN / 8 n8 tiles (FlashAttention-4's d = 64 loop waits after 12 of its 66
    // MUFU.EX2; 4 and 6 measured no better); SY_HOPPER_FWD_SHORT_SPLIT_FIRST, a tile's first block (next_tile)
    // waits for the previous tile's last P V between its rows too. Each cost 1.5-2 % at d = 128 or not causal
    // (docs/notes-hopper.md, 2026-11-29i), so they apply here only: together +1.3-1.6 % (2026-11-29k).
#ifndef SY_HOPPER_FWD_SHORT_WAIT_AFTER_TILES
#define SY_HOPPER_FWD_SHORT_WAIT_AFTER_TILES 8
#endif
#ifndef SY_HOPPER_FWD_SHORT_SPLIT_FIRST
#define SY_HOPPER_FWD_SHORT_SPLIT_FIRST 1
#endif
    static constexpr bool kShortCausal = Tr::kHeadDim == 64 && Tr::kConsumerWGs == 2 && kBand == kBandCausal &&
                                         (kMode & kVarlenFlag) == 0 && !kDropout;
    static constexpr int kWaitAfter =
        kShortCausal && SY_HOPPER_FWD_SHORT_WAIT_AFTER_TILES < kNTilesS ? SY_HOPPER_FWD_SHORT_WAIT_AFTER_TILES : kNTilesS;
    static_assert(kWaitAfter % 2 == 0 && kWaitAfter > 0, "P packs n8 tiles in pairs; the pin needs one");
    static constexpr bool kSplitFirst = kShortCausal && SY_HOPPER_FWD_SHORT_SPLIT_FIRST && kMidWait && kRowOrder &&
                                        Tr::kRescaleSlackLog2 > 0;
    __device__ __forceinline__ void wait_turn() { named_bar_sync(1 + wg, 256); }
    __device__ __forceinline__ void pass_turn() { named_bar_arrive(1 + (wg + 1) % Tr::kConsumerWGs, 256); }

    // Q's A fragments out of the swizzled tile: ldmatrix.x4, lane l addressing row l % 16 of its
    // warp's 16 and the 16-byte chunk l / 16 of the k16 step (the 128-byte swizzle XORs the chunk
    // index with the row inside its 8-row atom).
    __device__ __forceinline__ void load_q(int q_buf) {
        const uint32_t q = smem_addr(sm.q + q_buf * Tr::kQBytes);
        const int lane = threadIdx.x % 32;
        const int row = wg * Tr::kRowsPerWG + (threadIdx.x % 128) / 32 * 16 + lane % 16;
#pragma unroll
        for (int kk = 0; kk < Tr::kKSteps; ++kk) {
            const int panel = kk / Tr::kKStepsPerPanel;
            const int chunk = (kk % Tr::kKStepsPerPanel) * 2 + lane / 16;
            ldmatrix_x4(rQ[kk], q + panel * Tr::kQPanelBytes + row * Tr::kRowBytes + ((chunk ^ (row % 8)) * 16));
        }
    }

    // S = Q K^T of ring block kv, issued, not waited for.
    __device__ __forceinline__ void issue_s(int kv, int q_buf) {
        const int stage = stage_of(kv);
        mbar_wait(smem_addr(&sm.bars->k_full[stage]), full_parity(kv));
        const uint64_t k_stage = desc_at(k_desc, stage * Tr::kKVBytes);
        fence_regs(flat_s());
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKSteps; ++kk) {
            // Step kk reads columns 16kk.. of panel kk / 4: 32 bytes further along the swizzled
            // 128-byte rows for each step inside a panel (the hardware applies the XOR).
            const int panel = kk / Tr::kKStepsPerPanel, in_panel = (kk % Tr::kKStepsPerPanel) * 32;
            const uint64_t desc_k = desc_at(k_stage, panel * Tr::kKVPanelBytes + in_panel);
            if constexpr (Tr::kQInRegisters) {
                GemmS::template rs<0>(flat_s(), rQ[kk], desc_k, kk > 0);
            } else {
                GemmS::ss(flat_s(), desc_at(q_desc, q_buf * Tr::kQBytes + panel * Tr::kQPanelBytes + in_panel), desc_k, kk > 0);
            }
        }
        wgmma_commit();
    }

    // O (+)= P V of ring block kv, P from registers, issued, not waited for. A tile's first P V
    // overwrites O (scale_d = 0): no zeroing, no rescale of the previous tile's values.
    __device__ __forceinline__ void issue_pv(int kv, bool accumulate) {
        const int stage = stage_of(kv);
        mbar_wait(smem_addr(&sm.bars->v_full[stage]), full_parity(kv));
        const uint64_t v_stage = desc_at(v_desc, stage * Tr::kKVBytes);
        fence_regs(flat_acc());
        fence_regs(rP);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kPVSteps; ++kk) {
            // Step kk reads keys 16kk..16kk+15: two 8-key atoms, 16 rows of 128 bytes further on.
            GemmO::rs(flat_acc(), rP[kk], desc_at(v_stage, kk * 16 * Tr::kRowBytes), kk > 0 || accumulate);
        }
        wgmma_commit();
    }

    __device__ __forceinline__ void release(uint64_t *empty) { mbar_arrive(smem_addr(empty)); }

    // O moved onto the last folded block's maxima (only if some row's alpha is not 1), then
    // P V of ring block kv issued: O is never rescaled while a P V writes it.
    __device__ __forceinline__ void rescale_and_issue_pv(int kv, bool accumulate) {
        if (rescale_pending) softmax.scale_acc(acc, alpha);
        issue_pv(kv, accumulate);
    }

    // After the wait for P V of ring block kv: O and P are free again, and so is V's stage.
    __device__ __forceinline__ void retire_pv(int kv) {
        fence_regs(flat_acc());
        fence_regs(rP);
        release(&sm.bars->v_empty[stage_of(kv)]);
    }

    // ptxas schedules wgmma.wait_group as early as it may, and register-only arithmetic is free to
    // move below it: it moved the 64 exponentials of fold() after the wait for P V, so nothing
    // overlapped that GEMM (seen in the SASS: WARPGROUP.DEPBAR then 66 MUFU.EX2). A shared-memory
    // store keeps its place before the wait, and l_i depends on every exponential, so storing l_i
    // pins the softmax ahead of the wait. The values are never read.
    __device__ __forceinline__ void pin_softmax() {
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(smem_addr(sm.sink + threadIdx.x - 128)),
                     "f"(softmax.l_i[0]), "f"(softmax.l_i[1])
                     : "memory");
    }
    // The same for the first row alone (fold_split: the wait follows that row's exponentials).
    __device__ __forceinline__ void pin_first_row(float l) {
        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(smem_addr(sm.sink + threadIdx.x - 128)), "f"(l) : "memory");
    }

    // Scores of key block j (absolute) at or past seqlen_k, and outside a row's band (causal: right of
    // its diagonal; local: also left of its window), become -inf. A row keeps keys below one bound (and,
    // local, from another), so one compare per score (two).
    __device__ __forceinline__ void mask(const TileWork &x, int j, const sy_attn_params &p, Band band) {
        if constexpr (kBand == kBandMask) {   // j: the list entry (first_block is 0)
            // With dropout the band's bounds pass through volatile moves here, so what the per-score test derives
            // from them is made in the partial tile, not hoisted across the tile loop (4 bytes spilled at d = 128).
            if constexpr (kDropout) {
                asm volatile("mov.b32 %0, %0;" : "+r"(band.lo));
                asm volatile("mov.b32 %0, %0;" : "+r"(band.hi));
            }
            mask_entry<true>(x, j, p, band);
            return;
        }
        int len_q, seqlen_k;
        sequence<kMode>(p, x.b, len_q, seqlen_k, band);   // varlen: reads the offsets (edge blocks only)
        const int col0 = j * Tr::kBlockN + thread_col;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = row0 + thread_row + half * 8;
            const int limit = (kBand != kBandNone ? min(seqlen_k, row + band.hi + 1) : seqlen_k) - col0;
            const int start = row + band.lo - col0;   // used by kBandLocal only
#pragma unroll
            for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c)
                    if (nt * 8 + c >= limit || (kBand == kBandLocal && nt * 8 + c < start)) rS[0][nt][2 * half + c] = -INFINITY;
        }
    }

    // kBandMask: entry j of tile x's list applied to S (attention_mask.cuh). kRead: a partial tile reads the
    // mask (and tests the band); without it only the edges and an empty tile are masked, with no load. A
    // tile's first block (fold_first) is never partial (mask_tiles.py puts a full or an empty block first):
    // there the previous tile's O, its last P V in flight and the saved softmax are all live, and the loads
    // spilled 500 bytes.
    template <bool kRead>
    __device__ __forceinline__ void mask_entry(const TileWork &x, int j, const sy_attn_params &p, Band band = Band{}) {
        const int e = __ldg(p.mask_lists + x.list + 1 + j);
        const int col0 = MaskWalk::block(e) * Tr::kBlockN + thread_col, row = row0 + thread_row;
        const MaskTile t = mask_tile(p, x.b, x.h, e);
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
            for (int half = 0; half < 2; ++half)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    float &s = rS[0][nt][2 * half + c];
                    s = kRead ? t.score(s, row + half * 8, col0 + nt * 8 + c, band) : t.edge(s, row + half * 8, col0 + nt * 8 + c);
                }
    }

    // kBandMask: entry j of tile x's list needs the mask (not a full block, or one holding the ragged end).
    static __device__ __forceinline__ bool mask_needed(const TileWork &x, int j, const sy_attn_params &p) {
        const int e = __ldg(p.mask_lists + x.list + 1 + j);
        return MaskWalk::cls(e) != kTileFull || (MaskWalk::block(e) + 1) * Tr::kBlockN > p.seqlen_k;
    }

    // S_j's scores into the running softmax; alpha (and whether any row of the warp needs it) waits
    // for O until P_{j-1} V_{j-1} has completed.
    __device__ __forceinline__ void fold() {
        if constexpr (Tr::kRescaleSlackLog2 > 0) {
            rescale_pending = softmax.fold_lazy(rS, scale_log2, Tr::kRescaleSlackLog2, alpha);
        } else {
            softmax.fold(rS, scale_log2, alpha);
            rescale_pending = true;
        }
    }

    // fold_lazy_row's order for the second row (kRowOrder): m unchanged, computed after `bits` exist.
    // bits | 0x7fc00000 is a quiet NaN whatever the bits, and min.f32 returns its other operand (NaN only if
    // both are), so the result is m; ptxas does not fold it, and every exponential of the row depends on it.
    struct After {
        uint32_t bits;
        __device__ __forceinline__ float operator()(float m) const {
            float r;
            asm("{\n\t.reg .b32 nan;\n\tor.b32 nan, %2, 0x7fc00000;\n\tmin.f32 %0, %1, nan;\n\t}" : "=f"(r) : "f"(m), "r"(bits));
            return r;
        }
    };

    // fold() (lazy) with the wait for P V of ring block kv between the first row's exponentials and the
    // second's (kMidWait), then P packed. kRowOrder: the wait follows the first row's first kWaitAfter n8 tiles
    // (all but on kShortCausal), the rest of that row and the second row follow its packed P.
    __device__ __forceinline__ void fold_split(int kv) {
        if constexpr (!kRowOrder) {
            bool rescaled = softmax.fold_lazy_row(rS, 0, 0, scale_log2, Tr::kRescaleSlackLog2, alpha[0]);
            pin_first_row(softmax.l_i[0]);
            wgmma_wait<0>();
            retire_pv(kv);
            rescaled |= softmax.fold_lazy_row(rS, 0, 1, scale_log2, Tr::kRescaleSlackLog2, alpha[1]);
            convert_p();
            rescale_pending = __any_sync(0xffffffffu, rescaled);
            return;
        }
        bool rescaled;
        float l;
        const float m = softmax.lazy_row_max(rS, 0, 0, scale_log2, Tr::kRescaleSlackLog2, alpha[0], rescaled, l);
        softmax.template exponentiate_tiles<0, kWaitAfter>(rS, 0, 0, scale_log2, m, l);
        pin_first_row(l);
        wgmma_wait<0>();
        retire_pv(kv);
        convert_p_tiles<0, kWaitAfter>(0);
        softmax.template exponentiate_tiles<kWaitAfter, kNTilesS>(rS, 0, 0, scale_log2, After{rP[0][0]}(m), l);
        softmax.l_i[0] = l;
        convert_p_tiles<kWaitAfter, kNTilesS>(0);
        rescaled |= softmax.fold_lazy_row(rS, 0, 1, scale_log2, Tr::kRescaleSlackLog2, alpha[1], After{rP[0][0]});
        convert_p_tiles<0, kNTilesS>(1);
        rescale_pending = __any_sync(0xffffffffu, rescaled);
    }

    // P to 16 bits: A fragment kk of P V is S tiles 2kk (keys +0..7) and 2kk+1 (keys +8..15); its registers
    // 0 and 2 hold the thread's first row, 1 and 3 its second.
    __device__ __forceinline__ void pack_p(int kk, int reg) {
        const float(&s)[4] = rS[0][2 * kk + reg / 2];
        rP[kk][reg] = MmaOp<T>::pack(s[2 * (reg % 2)], s[2 * (reg % 2) + 1]);
    }
    template <int kFrom, int kTo>   // n8 tiles kFrom..kTo-1 of the thread's row `half` (kFrom, kTo even)
    __device__ __forceinline__ void convert_p_tiles(int half) {
#pragma unroll
        for (int kk = kFrom / 2; kk < kTo / 2; ++kk) {
            pack_p(kk, half);
            pack_p(kk, 2 + half);
        }
    }
    // Both rows, register by register (row by row puts the F2FP in another order in the SASS).
    __device__ __forceinline__ void convert_p() {
#pragma unroll
        for (int kk = 0; kk < Tr::kPVSteps; ++kk)
#pragma unroll
            for (int reg = 0; reg < 4; ++reg) pack_p(kk, reg);
    }

    // The tile's first S, once complete: the block with no P V of this tile before it.
    __device__ __forceinline__ void fold_first(const TileWork &x, const sy_attn_params &p, Band band) {
        start_tile(x, p, band);
        fold();
        rescale_pending = false;   // O has no values yet: the first P V overwrites it
    }
    // fold_first's part before the softmax: K's stage freed, the rows and softmax reset, the first block masked.
    __device__ __forceinline__ void start_tile(const TileWork &x, const sy_attn_params &p, Band band) {
        fence_regs(flat_s());
        release(&sm.bars->k_empty[stage_of(x.kv0)]);
        row0 = x.m0 + wg * Tr::kRowsPerWG;
        softmax = OnlineSoftmaxFragment<1>();
        if constexpr (kBand == kBandMask) {
            if (mask_needed(x, 0, p)) mask_entry<false>(x, 0, p);
        } else if ((kBand == kBandLocal && x.unmasked_begin > 0) || x.unmasked_end == 0) {
            mask(x, x.first_block, p, band);
        }
    }

    // Q of tile x to registers (kQInRegisters), its buffer released at once.
    __device__ __forceinline__ void take_q(const TileWork &x) {
        if constexpr (Tr::kQInRegisters) {
            load_q(x.q_buf);
            release(&sm.bars->q_empty[x.q_buf]);
        }
    }

    // The block's first tile (warpgroup 0 issues first: the last warpgroup gives it the turn).
    __device__ void begin(const TileWork &x, const sy_attn_params &p, Band band) {
        take_q(x);
        if (wg == kLastWG) pass_turn();
        wait_turn();
        issue_s(x.kv0, x.q_buf);
        pass_turn();
        wgmma_wait<0>();
        fold_first(x, p, band);
        draw_early(x, key_block(x, 0, p), p);   // dropout (the block's first tile: no P V in flight to draw under)
        convert_p();
        drop(x, key_block(x, 0, p), p);
    }

    // One key block j >= 1 of tile c: S_j and P_{j-1} V_{j-1} are issued back to back; S_j's
    // softmax then runs while P V is still on the tensor cores, so O is rescaled (by the alpha of
    // block j-1) only before that GEMM is issued, never while it runs. The other warpgroups issue
    // their pairs while this one does the exponentials.
    template <bool kMask>
    __device__ __forceinline__ void step(const TileWork &c, int j, const sy_attn_params &p, Band band) {
        wait_turn();
        issue_s(c.kv0 + j, c.q_buf);
        rescale_and_issue_pv(c.kv0 + j - 1, j > 1);
        pass_turn();
        wgmma_wait<1>();   // S_j is done (P V may still run)
        fence_regs(flat_s());
        release(&sm.bars->k_empty[stage_of(c.kv0 + j)]);
        // A partial tile of attn_mask: P V has completed before its loads; with dropout its scores are dropped
        // in fp32 (drop_s), not in rP as elsewhere.
        constexpr bool kMaskWaits = kMask && kBand == kBandMask;
        if constexpr (kMaskWaits) wgmma_wait<0>();   // rP free for the mask's loads (no spill)
        if (kMask) mask(c, c.first_block + j, p, band);
        if constexpr (kMidWait && !kMaskWaits && (!kMask || kMidWaitMasked) && !kDropout && Tr::kRescaleSlackLog2 > 0) {
            // The wait for P_{j-1} V_{j-1} between the two rows' exponentials (FlashAttention-4's SASS has it
            // there): V's stage is freed half a softmax sooner, and P's packing fills the second row's
            // exponential stream instead of trailing it.
            fold_split(c.kv0 + j - 1);
            return;
        }
        fold();
        pin_softmax();
        if constexpr (kMaskWaits && kDropout) drop_s(c, key_block(c, j, p), p);
        else draw_early(c, key_block(c, j, p), p);   // dropout
        wgmma_wait<0>();   // P_{j-1} V_{j-1} is done: rP and acc are free
        retire_pv(c.kv0 + j - 1);
        convert_p();
        if constexpr (!(kMaskWaits && kDropout)) drop(c, key_block(c, j, p), p);   // dropout
    }

    // Blocks 1.. of tile c: (local) the window's left edge, the unmasked ones, then the diagonal
    // (causal) and ragged last blocks (the mask costs a compare and a select per score, and only the
    // edges need it).
    __device__ void steps(const TileWork &c, const sy_attn_params &p, Band band) {
        int j = 1;
        // The list: runs of full blocks unmasked, of partial, empty or ragged ones masked; each run its own
        // loop, as the band's (a branch between the two steps inside one loop body spilled kilobytes).
        if constexpr (kBand == kBandMask)
            while (j < c.n_blocks) {
                for (; j < c.n_blocks && !mask_needed(c, j, p); ++j) step<false>(c, j, p, band);
                for (; j < c.n_blocks && mask_needed(c, j, p); ++j) step<true>(c, j, p, band);
            }
        if constexpr (kBand == kBandLocal)
            for (; j < c.unmasked_begin; ++j) step<true>(c, j, p, band);
        for (; j < c.unmasked_end; ++j) step<false>(c, j, p, band);
        for (; j < c.n_blocks; ++j) step<true>(c, j, p, band);
        // Every S GEMM of the tile has completed: the producer may load a later tile's Q here.
        if constexpr (!Tr::kQInRegisters) release(&sm.bars->q_empty[c.q_buf]);
    }

    // From tile c to tile x in one turn: x's first S and c's last P V are issued back to back, x's
    // first softmax runs while that P V does, and c's O is stored once it has completed. Without
    // this every warpgroup drained its last P V, stored, and only then issued the next S, all three
    // at once: the tensor cores idled at every tile boundary, which weighs most where tiles are short
    // (causal: half the key blocks on average). Measured +5-14 % causal (docs/notes-hopper.md v10).
    __device__ void next_tile(const sy_attn_params &p, Band band, const TileWork &c, const TileWork &x) {
        take_q(x);
        o_buffer_free();
        wait_turn();
        issue_s(x.kv0, x.q_buf);
        rescale_and_issue_pv(c.kv0 + c.n_blocks - 1, c.n_blocks > 1);
        pass_turn();
        const OnlineSoftmaxFragment<1> done = softmax;   // c's row maxima and sums
        const int c_row0 = row0;
        wgmma_wait<1>();   // x's S is done (c's P V may still run)
        if constexpr (kSplitFirst) {
            // The wait for c's last P V between x's two rows, as in step; c's O is stored after x's P is packed
            // (rP, not S's fp32 scores, live across the store).
            start_tile(x, p, band);
            fold_split(c.kv0 + c.n_blocks - 1);
            rescale_pending = false;   // O has no values yet: the first P V overwrites it
            store(p, c, c_row0, done);
            return;
        }
        fold_first(x, p, band);
        pin_softmax();
        draw_early(x, key_block(x, 0, p), p);   // dropout
        wgmma_wait<0>();
        retire_pv(c.kv0 + c.n_blocks - 1);
        store(p, c, c_row0, done);
        convert_p();
        drop(x, key_block(x, 0, p), p);   // dropout
    }

    // The block's last tile c: its last P V (the last warpgroup passes no turn after it: warpgroup 0
    // waits for no further one), then the store.
    __device__ void finish(const sy_attn_params &p, const TileWork &c) {
        o_buffer_free();
        wait_turn();
        rescale_and_issue_pv(c.kv0 + c.n_blocks - 1, c.n_blocks > 1);
        if (wg != kLastWG) pass_turn();
        wgmma_wait<0>();
        retire_pv(c.kv0 + c.n_blocks - 1);
        store(p, c, row0, softmax);
        if (Tr::kStageO && tm_o && threadIdx.x % 32 == 0) bulk_wait_all();   // shared memory outlives the last store
    }

    // kStageO: the copy engine has read this warp's rows of the O buffer (the store of the tile before). The
    // warp's issuing lane waits (at once: that store went out a whole tile ago) before the turn barrier,
    // which every lane passes before it writes the buffer again in store().
    __device__ __forceinline__ void o_buffer_free() {
        if (Tr::kStageO && tm_o && threadIdx.x % 32 == 0) bulk_wait_read<0>();
    }

    // O / l and the log-sum-exp of tile c (state: its rows' maxima and sums, a copy that finalize
    // may change); rows at or past seqlen_q were computed on TMA's zero fill and are not stored.
    __device__ void store(const sy_attn_params &p, const TileWork &c, int first_row, OnlineSoftmaxFragment<1> state) {
        float lse[2];
        state.finalize(acc, p.scale, lse);
        if constexpr (kDropout) dropout_scale_acc(acc, 1.f / (1.f - p.dropout_p));
        if constexpr (Tr::kStageO) {
            if (tm_o) {
                store_staged(p, c, first_row, lse);
                return;
            }
        }
        T *gO = head_base(static_cast<T *>(p.o), p.o_strides, c.b, c.h);
        float *gLse = p.lse + (static_cast<int64_t>(c.b) * p.heads_q + c.h) * p.seqlen_q;
        int len_q = p.seqlen_q;
        if constexpr ((kMode & kVarlenFlag) != 0) {   // o (total_q, Hq, d) from the sequence's row; lse (Hq, total_q)
            const int q_row0 = __ldg(p.cu_seqlens_q + c.b);
            len_q = __ldg(p.cu_seqlens_q + c.b + 1) - q_row0;
            gO = head_base(static_cast<T *>(p.o), p.o_strides, 0, c.h) + static_cast<int64_t>(q_row0) * p.o_strides[2];
            gLse = p.lse + static_cast<int64_t>(c.h) * p.seqlen_q + q_row0;
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = first_row + thread_row + half * 8;
            if (row >= len_q) continue;
            T *gRow = gO + row * p.o_strides[2] + thread_col;
#pragma unroll
            for (int nt = 0; nt < kNTilesO; ++nt)
                *reinterpret_cast<uint32_t *>(gRow + nt * 8) = MmaOp<T>::pack(acc[0][nt][2 * half], acc[0][nt][2 * half + 1]);
            if (thread_col == 0) gLse[row] = lse[half];
        }
    }

    // O of tile c (normalised, in acc) through this warpgroup's shared buffer and the copy engine
    // (hopper_fwd_epilogue.cuh); the LSE directly (4 bytes a row).
    __device__ __forceinline__ void store_staged(const sy_attn_params &p, const TileWork &c, int first_row, const float (&lse)[2]) {
        store_o_staged<Tr, T>(smem_addr(sm.o + wg * Tr::kOBytesPerWG), tm_o, acc, first_row, c.h, c.b);
        float *gLse = p.lse + (static_cast<int64_t>(c.b) * p.heads_q + c.h) * p.seqlen_q;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = first_row + thread_row + half * 8;
            if (thread_col == 0 && r < p.seqlen_q) gLse[r] = lse[half];
        }
    }
};
#endif  // SY_HOPPER_DEVICE_CODE

}  // namespace
}  // namespace sy_attn
