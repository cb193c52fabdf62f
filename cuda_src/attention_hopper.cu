// `hopper`: FlashAttention-3 class forward attention for sm_90a (H100/H200), fp16/bf16, d 64/128/256.
//
// Hardware fact exploited: on Hopper the tensor cores are fed by asynchronous engines, so the work
// splits by role. The copy engine (TMA, cp.async.bulk.tensor) brings Q once and K/V tiles through
// a shared-memory ring, completing on mbarriers; one thread issues it. wgmma.mma_async runs whole
// warpgroup GEMMs out of shared memory (S = Q K^T) and from registers (O += P V: the fp32
// accumulator of S, rounded to 16 bits, is exactly wgmma's A-register fragment) while the issuing
// threads go on with other work: the softmax of block j runs while P V of block j-1 is on the
// tensor cores (intra-warpgroup overlap), and the consumer warpgroups take turns at issuing GEMMs
// (ping-pong on named barriers) so one's exponentials overlap another's GEMMs. Tiles follow one
// another without a pause: the next tile's first S GEMM is issued with the current tile's last P V.
//
// Grid: persistent, one block per SM walking tiles (a query block of one head) in TileScheduler's
// order, drawn from an atomic counter. Block: a producer warpgroup and kConsumerWGs (2 or 3)
// consumer warpgroups of 64 query rows each.
// This file holds the consumer warpgroups, the kernel and its launch; the tile order, the shared-memory
// layout and the producer are in hopper_fwd_pipeline.cuh, the tile sizes in hopper_traits.cuh.
//
// The sm_90a body is compiled only where the arch-specific features exist (__CUDA_ARCH_FEAT_SM90_ALL);
// other targets (CI compiles every file for sm_80) get an empty kernel that the launcher never runs:
// it answers SY_EUNSUPPORTED unless the device is sm_90 and the loaded kernel was built for it.
#include "hopper_fwd_pipeline.cuh"   // mode flags, tile order, shared memory, TileWork, the producer
#include "hopper_fwd_epilogue.cuh"   // O out through shared memory and the copy engine
#include "attention_dropout.cuh"     // dropout: Philox keep-masks on P's fragments
#include "mma_primitives.cuh"      // MmaOp<T>::pack (two fp32 to one 16-bit pair), smem_addr
#include "softmax.cuh"

namespace sy_attn {
namespace {

#ifdef SY_HOPPER_DEVICE_CODE

// ---- a consumer warpgroup: 64 query rows ------------------------------------------------------------
template <class Tr, typename T, int kMode>
struct Consumer {
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

    float rS[1][kNTilesS][4];    // S, then P in fp32: the warpgroup's 64 x kBlockN scores
    uint32_t rP[Tr::kPVSteps][4];   // P in 16 bits: one m64k16 A fragment per k16 step of P V
    uint32_t rQ[Tr::kKSteps][4];    // kQInRegisters: the warpgroup's 64 Q rows, one A fragment per k16 step
    float acc[1][kNTilesO][4];   // O, un-normalised
    float alpha[2];              // the O rescale of the block just folded, applied before the next P V
    bool rescale_pending;        // some row of this warp has alpha != 1 (lazy rescale: mostly not)
    OnlineSoftmaxFragment<1> softmax;

    __device__ Consumer(const SharedTiles<Tr> &sm_, int wg_, float scale, const CUtensorMap *tm_o_)
        : sm(sm_), wg(wg_), row0(0),
          thread_row((threadIdx.x % 128) / 32 * 16 + (threadIdx.x % 32) / 4), thread_col((threadIdx.x % 4) * 2),
          scale_log2(scale * kLog2e),
          q_desc(smem_desc(smem_addr(sm_.q) + wg_ * Tr::kRowsPerWG * Tr::kRowBytes, 16, Tr::kAtomBytes)),
          k_desc(smem_desc(smem_addr(sm_.k), 16, Tr::kAtomBytes)),
          v_desc(smem_desc(smem_addr(sm_.v), Tr::kKVPanelBytes, Tr::kAtomBytes)), tm_o(Tr::kStageO ? tm_o_ : nullptr) {}

    // Ring index kv (the count of K/V blocks this block has consumed before) names the stage and its lap.
    static __device__ __forceinline__ int stage_of(int kv) { return kv % Tr::kStages; }
    static __device__ __forceinline__ uint32_t full_parity(int kv) { return (kv / Tr::kStages) & 1; }

    __device__ __forceinline__ float (&flat_s())[Tr::kBlockN / 2] { return reinterpret_cast<float(&)[Tr::kBlockN / 2]>(rS); }
    __device__ __forceinline__ float (&flat_acc())[Tr::kHeadDim / 2] { return reinterpret_cast<float(&)[Tr::kHeadDim / 2]>(acc); }

    // Ping-pong: warpgroup wg issues its GEMMs only after the previous one has issued its own.
    // Round robin over the consumers on named barriers 1..kConsumerWGs: barrier 1 + w completes when
    // warpgroup w waits on it and its predecessor has passed (2 x 128 threads).
    static constexpr int kLastWG = Tr::kConsumerWGs - 1;
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

    // Scores of key block j (absolute) at or past seqlen_k, and outside a row's band (causal: right of
    // its diagonal; local: also left of its window), become -inf. A row keeps keys below one bound (and,
    // local, from another), so one compare per score (two).
    __device__ __forceinline__ void mask(const TileWork &x, int j, const sy_attn_params &p, Band band) {
        if constexpr (kBand == kBandMask) {   // j: the list entry (first_block is 0)
            mask_entry<true>(x, j, p);
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
    // mask; without it only the edges and an empty tile are masked, with no load. A tile's first block
    // (fold_first) is never partial (mask_tiles.py puts a full or an empty block first): there the previous
    // tile's O, its last P V in flight and the saved softmax are all live, and the loads spilled 500 bytes.
    template <bool kRead>
    __device__ __forceinline__ void mask_entry(const TileWork &x, int j, const sy_attn_params &p) {
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
                    s = kRead ? t.score(s, row + half * 8, col0 + nt * 8 + c) : t.edge(s, row + half * 8, col0 + nt * 8 + c);
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

    // P to 16 bits: A fragment kk of P V is S tiles 2kk (keys +0..7) and 2kk+1 (keys +8..15).
    __device__ __forceinline__ void convert_p() {
#pragma unroll
        for (int kk = 0; kk < Tr::kPVSteps; ++kk) {
            rP[kk][0] = MmaOp<T>::pack(rS[0][2 * kk][0], rS[0][2 * kk][1]);
            rP[kk][1] = MmaOp<T>::pack(rS[0][2 * kk][2], rS[0][2 * kk][3]);
            rP[kk][2] = MmaOp<T>::pack(rS[0][2 * kk + 1][0], rS[0][2 * kk + 1][1]);
            rP[kk][3] = MmaOp<T>::pack(rS[0][2 * kk + 1][2], rS[0][2 * kk + 1][3]);
        }
    }

    // Dropout (attention_dropout.cuh) in two parts. draw: the keep bits of key block `block` (absolute) of
    // tile w, made while the previous block's P V runs on the tensor cores (Philox is integer multiplies,
    // off the wgmma's path) where registers allow: d = 64 (three consumers at 160 registers) draws after the
    // wait (ptxas -v: drawing early spilled 8-12 bytes there; drawing late, 4 not causal and none causal).
    // drop: P's dropped scores to 0 in rP, after the softmax summed them (l_i and the LSE are those of the
    // undropped P, as torch's).
    static constexpr bool kDrawEarly = Tr::kConsumerWGs == 2;
    // Philox's products as PTX mul.wide (attention_dropout.cuh's mul_wide) except at d = 64 without a band,
    // where the C form is what ptxas allocates without spilling (28 bytes with PTX; measured H100 call 1 of
    // session dropfwd20b: d = 64 causal 3.47 against 3.85 ms with PTX, not causal 6.42 against 6.51 with C).
    static constexpr bool kDropoutAsmMul = kDrawEarly || kBand == kBandCausal;
    uint4 keep[kDropout ? Tr::kPVSteps / 2 : 1];
    __device__ __forceinline__ void draw(const TileWork &w, int block, const sy_attn_params &p) {
        if constexpr (kDropout)
            keep_rows_all<Tr::kPVSteps / 2, kDrawEarly, kDropoutAsmMul>(keep, make_dropout(p, w.b, w.h), row0 + thread_row,
                                                                        block * Tr::kBlockN, threadIdx.x % 32);
    }
    __device__ __forceinline__ void draw_early(const TileWork &w, int block, const sy_attn_params &p) {
        if constexpr (kDrawEarly) draw(w, block, p);
    }
    template <bool kDrawNow = !kDrawEarly>
    __device__ __forceinline__ void drop(const TileWork &w, int block, const sy_attn_params &p) {
        if constexpr (kDrawNow) draw(w, block, p);
        if constexpr (kDropout) dropout_rows_apply(rP, keep);
    }

    // The tile's first S, once complete: the block with no P V of this tile before it.
    __device__ __forceinline__ void fold_first(const TileWork &x, const sy_attn_params &p, Band band) {
        fence_regs(flat_s());
        release(&sm.bars->k_empty[stage_of(x.kv0)]);
        row0 = x.m0 + wg * Tr::kRowsPerWG;
        softmax = OnlineSoftmaxFragment<1>();
        if constexpr (kBand == kBandMask) {
            if (mask_needed(x, 0, p)) mask_entry<false>(x, 0, p);
        } else if ((kBand == kBandLocal && x.unmasked_begin > 0) || x.unmasked_end == 0) {
            mask(x, x.first_block, p, band);
        }
        fold();
        rescale_pending = false;   // O has no values yet: the first P V overwrites it
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
        draw_early(x, x.first_block, p);   // dropout (the block's first tile: no P V in flight to draw under)
        convert_p();
        drop(x, x.first_block, p);
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
        if constexpr (kMask && kBand == kBandMask) wgmma_wait<0>();   // rP free for the mask's loads (no spill)
        if (kMask) mask(c, c.first_block + j, p, band);
        fold();
        pin_softmax();
        draw_early(c, c.first_block + j, p);   // dropout
        wgmma_wait<0>();   // P_{j-1} V_{j-1} is done: rP and acc are free
        retire_pv(c.kv0 + j - 1);
        convert_p();
        drop(c, c.first_block + j, p);   // dropout
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
        fold_first(x, p, band);
        pin_softmax();
        draw_early(x, x.first_block, p);   // dropout
        wgmma_wait<0>();
        retire_pv(c.kv0 + c.n_blocks - 1);
        store(p, c, c_row0, done);
        convert_p();
        drop(x, x.first_block, p);   // dropout
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

template <class Tr, typename T, int kMode>
__global__ void __launch_bounds__(Tr::kThreads, 1)
hopper_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                  const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o, const int o_by_tma,
                  const sy_attn_params p, const TileScheduler sched, const Band band) {
#ifdef SY_HOPPER_DEVICE_CODE
    extern __shared__ unsigned char smem_raw[];
    const SharedTiles<Tr> sm(smem_raw);
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        Barriers<Tr> &bar = *sm.bars;
        for (int i = 0; i < Tr::kQBuffers; ++i) {
            mbar_init(smem_addr(&bar.q_full[i]), 1);
            mbar_init(smem_addr(&bar.q_empty[i]), 128 * Tr::kConsumerWGs);
        }
        for (int s = 0; s < Tr::kStages; ++s) {
            mbar_init(smem_addr(&bar.k_full[s]), 1);   // the producer's expect_tx arrival; the bytes complete it
            mbar_init(smem_addr(&bar.v_full[s]), 1);
            mbar_init(smem_addr(&bar.k_empty[s]), 128 * Tr::kConsumerWGs);
            mbar_init(smem_addr(&bar.v_empty[s]), 128 * Tr::kConsumerWGs);
        }
        // Make the initialised barriers visible to the copy engine (the async proxy) too.
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        regs_dec<Tr::kProducerRegs>();
        if (threadIdx.x == 0) {
            tma_prefetch_map(&tm_q);
            tma_prefetch_map(&tm_k);
            tma_prefetch_map(&tm_v);
            if (o_by_tma) tma_prefetch_map(&tm_o);
            produce<Tr, kMode>(sm, &tm_q, &tm_k, &tm_v, sched, p, band);
        }
    } else {
        regs_inc<Tr::kConsumerRegs>();
        Consumer<Tr, T, kMode> consumer(sm, warpgroup - 1, p.scale, o_by_tma ? &tm_o : nullptr);
        // The tile of iteration i, once its Q has landed (n_tiles or more: none).
        auto wait_tile = [&](int tile_iter) {
            const int buf = tile_iter % Tr::kQBuffers;
            mbar_wait(smem_addr(&sm.bars->q_full[buf]), (tile_iter / Tr::kQBuffers) & 1);
            return __shfl_sync(0xffffffffu, *reinterpret_cast<volatile int *>(&sm.bars->tile[buf]), 0);
        };
        // The grid never exceeds the tile count: the first tile exists (varlen: unless the producer
        // skipped every tile this block drew).
        const int t0 = wait_tile(0);
        if ((kMode & kVarlenFlag) != 0 && t0 >= sched.n_tiles) return;
        TileWork c = uniform(tile_work<Tr, kMode>(sched, t0, p, band, 0, 0));
        consumer.begin(c, p, band);
        for (int tile_iter = 1;; ++tile_iter) {
            consumer.steps(c, p, band);
            const int t = wait_tile(tile_iter);
            if (t >= sched.n_tiles) {
                consumer.finish(p, c);
                break;
            }
            const TileWork x = uniform(tile_work<Tr, kMode>(sched, t, p, band, c.kv0 + c.n_blocks, tile_iter));
            consumer.next_tile(p, band, c, x);
            c = x;
        }
    }
#endif
}

// ---- host: launch (tensor maps: hopper_primitives.cuh) ----------------------------------------------
#ifndef SY_HOPPER_STATIC_NONE
#define SY_HOPPER_STATIC_NONE 1   // full rectangles on the static stride (TileScheduler); 0: the counter too
#endif
template <class Tr, typename T, int kMode>
int launch(const sy_attn_params &p, Band band, cudaStream_t stream) {
    auto kernel = hopper_fwd_kernel<Tr, T, kMode>;
    // The kernel body exists only in an sm_90a build: a library built for another arch has none.
    cudaFuncAttributes attrs;
    cudaError_t err = cudaFuncGetAttributes(&attrs, kernel);
    if (err != cudaSuccess) return static_cast<int>(err);
    if (attrs.binaryVersion != 90) return kUnsupported;

    // Varlen: one "batch" of total rows; each tile addresses its sequence's rows.
    constexpr bool kVarlen = (kMode & kVarlenFlag) != 0;
    const int map_batch = kVarlen ? 1 : p.batch;
    CUtensorMap tm_q, tm_k, tm_v, tm_o = {};
    int status = encode_map(&tm_q, p.q, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, map_batch, p.q_strides, Tr::kBlockM);
    if (status == kOk)
        status = encode_map(&tm_k, p.k, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, map_batch, p.k_strides, Tr::kBlockN);
    if (status == kOk)
        status = encode_map(&tm_v, p.v, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, map_batch, p.v_strides, Tr::kBlockN);
    // O by the copy engine (Consumer::store_staged) where its box cannot cross into another sequence (not varlen)
    // and o's base and strides suit TMA; otherwise direct stores.
    const bool o_by_tma = Tr::kStageO && !kVarlen && tma_aligned(p.o, p.o_strides, p.batch, p.heads_q, p.seqlen_q);
    if (status == kOk && o_by_tma)
        status = encode_map(&tm_o, p.o, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, p.batch, p.o_strides, 16);   // a warp's rows
    if (status != kOk) return status;

    int device = 0, sms = 0;
    if ((err = cudaGetDevice(&device)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return static_cast<int>(err);
    TileScheduler sched;
    sched.n_mblocks = ceil_div(kVarlen ? p.max_seqlen_q : p.seqlen_q, Tr::kBlockM);
    sched.heads_q = p.heads_q;
    const int64_t n_tiles = int64_t(sched.n_mblocks) * p.heads_q * p.batch;
    if (n_tiles > INT32_MAX) return kInvalid;
    sched.n_tiles = static_cast<int>(n_tiles);

    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    // Persistent: one resident block per SM (shared memory and registers allow no second), the
    // counter zeroed on the stream, or for tiles of one length (TileScheduler) the static stride and no
    // counter. Otherwise a block per tile and no counter: the kernel must not draw tiles from a counter
    // nobody zeroed.
    sy_attn_params kp = p;
    int grid = sched.n_tiles;
    sched.stride = 0;
    if (p.tile_counter) {
        grid = static_cast<int>(min(n_tiles, int64_t(sms)));
        if (SY_HOPPER_STATIC_NONE && (kMode & (3 | kVarlenFlag)) == kBandNone) {
            sched.stride = 1;
            kp.tile_counter = nullptr;
        } else if ((err = cudaMemsetAsync(p.tile_counter, 0, sizeof(int), stream)) != cudaSuccess) {
            return static_cast<int>(err);
        }
    } else {
        kp.tile_counter = nullptr;
    }
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, tm_o, o_by_tma ? 1 : 0, kp, sched, band);
    return launch_status();
}

template <class Tr, typename T, int kVarlen>
int launch_causal(const sy_attn_params &p, cudaStream_t stream) {
    // attn_mask tile by tile, not varlen: d = 128, and d = 64 on the 128 x 128 tiles of HopperTraitsD64Short
    // (two consumers at 240 registers; the three of HopperTraitsD64 at 160 spilled 68 bytes around the
    // mask's loads).
    if constexpr (kVarlen == 0 && Tr::kBlockM == 128 && Tr::kBlockN == 128 && Tr::kHeadDim <= 128) {
        if (p.mask_lists) {
            if (!check_mask(p, Tr::kBlockM, Tr::kBlockN)) return kInvalid;
            return launch<Tr, T, kBandMask>(p, Band{-(p.seqlen_q + 1), p.seqlen_k}, stream);
        }
    }
    if (p.mask_lists) return kUnsupported;
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode, kVarlen != 0);
    if (mode == kBandLocal) return launch<Tr, T, kBandLocal | kVarlen>(p, band, stream);
    return mode == kBandCausal ? launch<Tr, T, kBandCausal | kVarlen>(p, band, stream)
                               : launch<Tr, T, kBandNone | kVarlen>(p, band, stream);
}

// Dropout: the band's none and causal modes (a window answers SY_EUNSUPPORTED: not instantiated).
template <class Tr, typename T>
int launch_dropout(const sy_attn_params &p, cudaStream_t stream) {
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode);
    if (mode == kBandLocal) return kUnsupported;
    return mode == kBandCausal ? launch<Tr, T, kBandCausal | kDropoutFlag>(p, band, stream)
                               : launch<Tr, T, kBandNone | kDropoutFlag>(p, band, stream);
}

// Varlen at d = 64 and 128 (d = 256 answers SY_EUNSUPPORTED: not instantiated); dropout likewise, not varlen.
template <typename T>
int launch_dtype(const sy_attn_params &p, cudaStream_t stream) {
    if (p.dropout_p > 0.f) {
        if (p.cu_seqlens_q || (p.head_dim != 64 && p.head_dim != 128)) return kUnsupported;
        return p.head_dim == 64 ? launch_dropout<HopperTraitsD64, T>(p, stream) : launch_dropout<HopperTraitsD128, T>(p, stream);
    }
    if (p.cu_seqlens_q) {
        if (p.head_dim == 64) return launch_causal<HopperTraitsD64, T, kVarlenFlag>(p, stream);
        if (p.head_dim == 128) return launch_causal<HopperTraitsD128, T, kVarlenFlag>(p, stream);
        return kUnsupported;
    }
    if (p.head_dim == 64)
        return p.seqlen_q <= kHopperD64ShortMaxQ || p.mask_lists ? launch_causal<HopperTraitsD64Short, T, 0>(p, stream)
                                                                 : launch_causal<HopperTraitsD64, T, 0>(p, stream);
    if (p.head_dim == 128) return launch_causal<HopperTraitsD128, T, 0>(p, stream);
    return launch_causal<HopperTraitsD256, T, 0>(p, stream);
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_hopper_fwd(const sy_attn_params *params, void *stream) {
    using namespace sy_attn;
    int status = check_params(params);
    if (status != kOk) return status;
    const sy_attn_params &p = *params;
    if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return kUnsupported;
    if (p.dtype == SY_ATTN_F32 || (p.mask != nullptr && !p.mask_lists)) return kUnsupported;
    if (p.mask_lists && (p.is_causal || p.causal_offset || p.has_window)) return kUnsupported;   // a mask or a band
    if (p.mask_lists && p.dropout_p != 0.f) return kUnsupported;   // a mask or dropout: no kernel has both
    if (!check_band(p.has_window, p.window_left, p.window_right, p.seqlen_q, p.seqlen_k)) return kInvalid;
    if (!device_is_sm90()) return kUnsupported;
    // Misaligned views: the Python layer copies them first; a direct C caller gets SY_EUNSUPPORTED.
    const int map_batch = p.cu_seqlens_q ? 1 : p.batch;   // varlen: one packed "batch"
    if (!tma_aligned(p.q, p.q_strides, map_batch, p.heads_q, p.seqlen_q) ||
        !tma_aligned(p.k, p.k_strides, map_batch, p.heads_kv, p.seqlen_k) ||
        !tma_aligned(p.v, p.v_strides, map_batch, p.heads_kv, p.seqlen_k))
        return kUnsupported;
    if ((p.cu_seqlens_q == nullptr) != (p.cu_seqlens_k == nullptr) || (p.cu_seqlens_q && p.max_seqlen_q < 1))
        return kInvalid;
    if (reinterpret_cast<uintptr_t>(p.o) % 4 != 0 || p.o_strides[2] % 2 != 0) return kInvalid;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    return p.dtype == SY_ATTN_BF16 ? launch_dtype<__nv_bfloat16>(p, s) : launch_dtype<__half>(p, s);
}
