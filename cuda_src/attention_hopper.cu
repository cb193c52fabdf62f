// `hopper`: FlashAttention-3 class forward attention for sm_90a (H100/H200), fp16/bf16, d 64/128.
//
// Hardware fact exploited: on Hopper the tensor cores are fed by asynchronous engines, so the work
// splits by role. The copy engine (TMA, cp.async.bulk.tensor) brings Q once and K/V tiles through
// a shared-memory ring, completing on mbarriers; one thread issues it. wgmma.mma_async runs whole
// warpgroup GEMMs out of shared memory (S = Q K^T) and from registers (O += P V: the fp32
// accumulator of S, rounded to 16 bits, is exactly wgmma's A-register fragment) while the issuing
// threads go on with other work: the softmax of block j runs while P V of block j-1 is on the
// tensor cores (intra-warpgroup overlap), and the consumer warpgroups take turns at issuing GEMMs
// (ping-pong on named barriers) so one's exponentials overlap another's GEMMs.
//
// Grid: blocks walking tiles (a query block of one head) in TileScheduler's order: persistent (one
// block per SM, tiles drawn from an atomic counter) when tiles are short, one block per tile
// otherwise. Block: a producer warpgroup and kConsumerWGs (2 or 3) consumer warpgroups of 64 query
// rows each.
//
// The sm_90a body is compiled only where the arch-specific features exist (__CUDA_ARCH_FEAT_SM90_ALL);
// other targets (CI compiles every file for sm_80) get an empty kernel that the launcher never runs:
// it answers SY_EUNSUPPORTED unless the device is sm_90 and the loaded kernel was built for it.
#include "attention_common.cuh"
#include "hopper_primitives.cuh"   // PTX wrappers, tensor maps, SY_HOPPER_DEVICE_CODE
#include "hopper_traits.cuh"
#include "mma_primitives.cuh"      // MmaOp<T>::pack (two fp32 to one 16-bit pair), smem_addr
#include "softmax.cuh"

namespace sy_attn {
namespace {

// ---- the tile order ------------------------------------------------------------------------------------
// Tile t: query block m of head (b, h), heads one after another, so the ~132 tiles in flight cover a
// few heads and re-read their K/V from L2. Causal: inside a head from the last query block, which
// sees the most keys, to the first, so long tiles start first and short ones fill the end.
//
// With a tile counter (p.tile_counter) and short tiles (at most kPersistentMaxKeyBlocks key blocks)
// the grid is persistent, one block per SM: block i starts on tile i and then takes the next
// untaken tile from the counter (a dynamic schedule: a block that drew short causal tiles takes
// more), and its producer loads the next tile's Q and K/V while the consumers finish the current
// one. Otherwise the grid has a block per tile, which the hardware hands to SMs as they free up.
struct TileScheduler {
    int n_mblocks;   // query blocks per head
    int heads_q;
    int n_tiles;

    struct Tile { int m_block, h, b; };

#ifdef SY_HOPPER_DEVICE_CODE   // the kernel's only callers exist in the sm_90a device pass
    __device__ __forceinline__ Tile tile(int t, bool reverse_m) const {
        const int head = t / n_mblocks, m_index = t % n_mblocks;
        return {reverse_m ? n_mblocks - 1 - m_index : m_index, head % heads_q, head / heads_q};
    }

    // The tile after this block's current one; n_tiles or more means none is left.
    __device__ __forceinline__ int next(int *counter) const {
        return counter ? static_cast<int>(gridDim.x) + atomicAdd(counter, 1) : n_tiles;
    }
#endif
};

#ifdef SY_HOPPER_DEVICE_CODE

// ---- shared memory ----------------------------------------------------------------------------------
// The ring's barriers. Every consumer thread arrives on an empty barrier (128 x kConsumerWGs arrivals): it
// releases the stage once its own wait_group returned, with no extra warpgroup barrier.
template <class Tr>
struct Barriers {
    uint64_t q_full, q_empty;
    uint64_t k_full[Tr::kStages], v_full[Tr::kStages];
    uint64_t k_empty[Tr::kStages], v_empty[Tr::kStages];
    // The tile whose Q the q_full phase brings (n_tiles or more: no more tiles), written by the
    // producer before its q_full arrival (release), read by consumers after their wait (acquire).
    int tile;
};

template <class Tr>
struct SharedTiles {
    unsigned char *q;   // [kPanels][kBlockM][64], 128B-swizzled
    unsigned char *k;   // [kStages][kPanels][kBlockN][64]
    unsigned char *v;   // [kStages][kPanels][kBlockN][64]
    Barriers<Tr> *bars;
    float2 *sink;       // [128 * kConsumerWGs]: Consumer::pin_softmax's stores, never read

    __device__ explicit SharedTiles(unsigned char *raw) {
        unsigned char *base = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
        q = base;
        k = q + Tr::kQBytes;
        v = k + Tr::kStages * Tr::kKVBytes;
        bars = reinterpret_cast<Barriers<Tr> *>(v + Tr::kStages * Tr::kKVBytes);
        sink = reinterpret_cast<float2 *>(reinterpret_cast<unsigned char *>(bars) + 256);
        static_assert(sizeof(Barriers<Tr>) <= 256, "kSmemBytes reserves 256 bytes for the barriers");
    }
};

// ---- the producer: one thread issues every copy ---------------------------------------------------
// kv_iter counts K/V blocks over all tiles of this block: it names the ring stage and its lap.
template <class Tr>
__device__ __forceinline__ void produce_tile(const SharedTiles<Tr> &sm, const CUtensorMap *tm_q, const CUtensorMap *tm_k,
                                             const CUtensorMap *tm_v, int &kv_iter, int m0, int h,
                                             int h_kv, int b, int n_blocks) {
    Barriers<Tr> &bar = *sm.bars;
    mbar_arrive_expect_tx(smem_addr(&bar.q_full), Tr::kQBytes);
#pragma unroll
    for (int p = 0; p < Tr::kPanels; ++p)
        tma_load_4d(smem_addr(sm.q + p * Tr::kQPanelBytes), tm_q, smem_addr(&bar.q_full), p * Tr::kPanelCols, m0, h, b);
    for (int j = 0; j < n_blocks; ++j, ++kv_iter) {
        const int stage = kv_iter % Tr::kStages;
        // A fresh barrier counts as having completed the phase before its first, so the first lap
        // waits on parity 1 and passes at once; lap L waits for the consumers' release of lap L-1.
        const uint32_t empty_parity = ((kv_iter / Tr::kStages) & 1) ^ 1;
        const int row = j * Tr::kBlockN;
        mbar_wait(smem_addr(&bar.k_empty[stage]), empty_parity);
        mbar_arrive_expect_tx(smem_addr(&bar.k_full[stage]), Tr::kKVBytes);
#pragma unroll
        for (int p = 0; p < Tr::kPanels; ++p)
            tma_load_4d(smem_addr(sm.k + stage * Tr::kKVBytes + p * Tr::kKVPanelBytes), tm_k, smem_addr(&bar.k_full[stage]),
                        p * Tr::kPanelCols, row, h_kv, b);
        mbar_wait(smem_addr(&bar.v_empty[stage]), empty_parity);
        mbar_arrive_expect_tx(smem_addr(&bar.v_full[stage]), Tr::kKVBytes);
#pragma unroll
        for (int p = 0; p < Tr::kPanels; ++p)
            tma_load_4d(smem_addr(sm.v + stage * Tr::kKVBytes + p * Tr::kKVPanelBytes), tm_v, smem_addr(&bar.v_full[stage]),
                        p * Tr::kPanelCols, row, h_kv, b);
    }
}

// ---- a consumer warpgroup: 64 query rows ------------------------------------------------------------
template <class Tr, typename T, bool kCausal>
struct Consumer {
    static constexpr int kNTilesS = Tr::kBlockN / 8;   // n8 column tiles of S
    static constexpr int kNTilesO = Tr::kHeadDim / 8;  // n8 column tiles of O
    using GemmS = typename WgmmaN<Tr::kBlockN>::template Op<T>;
    using GemmO = typename WgmmaN<Tr::kHeadDim>::template Op<T>;

    const SharedTiles<Tr> &sm;
    const int wg;                // 0 or 1: which consumer
    int row0;                    // first query row of this warpgroup in the current tile
    int kv_base;                 // the ring index (kv_iter) of the current tile's key block 0
    const int thread_row;        // this thread's first row inside the warpgroup's 64 (second: +8)
    const int thread_col;        // this thread's first column inside an n8 tile
    const float scale_log2;

    float rS[1][kNTilesS][4];    // S, then P in fp32: the warpgroup's 64 x kBlockN scores
    uint32_t rP[Tr::kPVSteps][4];   // P in 16 bits: one m64k16 A fragment per k16 step of P V
    float acc[1][kNTilesO][4];   // O, un-normalised
    float alpha[2];              // the O rescale of the block just folded, applied before the next P V
    OnlineSoftmaxFragment<1> softmax;

    __device__ Consumer(const SharedTiles<Tr> &sm_, int wg_, float scale)
        : sm(sm_), wg(wg_), row0(0), kv_base(0),
          thread_row((threadIdx.x % 128) / 32 * 16 + (threadIdx.x % 32) / 4), thread_col((threadIdx.x % 4) * 2),
          scale_log2(scale * kLog2e) {}

    __device__ __forceinline__ void begin_tile(int m0, int kv_iter) {
        row0 = m0 + wg * Tr::kRowsPerWG;
        kv_base = kv_iter;
        softmax = OnlineSoftmaxFragment<1>();
#pragma unroll
        for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[0][nt][c] = 0.f;
    }
    __device__ __forceinline__ int stage_of(int j) const { return (kv_base + j) % Tr::kStages; }
    __device__ __forceinline__ uint32_t full_parity(int j) const { return ((kv_base + j) / Tr::kStages) & 1; }

    __device__ __forceinline__ float (&flat_s())[Tr::kBlockN / 2] { return reinterpret_cast<float(&)[Tr::kBlockN / 2]>(rS); }
    __device__ __forceinline__ float (&flat_acc())[Tr::kHeadDim / 2] { return reinterpret_cast<float(&)[Tr::kHeadDim / 2]>(acc); }

    // Ping-pong: warpgroup wg issues its GEMMs only after the previous one has issued its own.
    // Round robin over the consumers on named barriers 1..kConsumerWGs: barrier 1 + w completes when
    // warpgroup w waits on it and its predecessor has passed (2 x 128 threads).
    static constexpr int kLastWG = Tr::kConsumerWGs - 1;
    __device__ __forceinline__ void wait_turn() { named_bar_sync(1 + wg, 256); }
    __device__ __forceinline__ void pass_turn() { named_bar_arrive(1 + (wg + 1) % Tr::kConsumerWGs, 256); }

    // S = Q K^T of key block j (stage j % kStages), issued, not waited for.
    __device__ __forceinline__ void issue_s(int j) {
        const int stage = stage_of(j);
        mbar_wait(smem_addr(&sm.bars->k_full[stage]), full_parity(j));
        const uint32_t q_base = smem_addr(sm.q) + wg * Tr::kRowsPerWG * Tr::kRowBytes;
        const uint32_t k_base = smem_addr(sm.k) + stage * Tr::kKVBytes;
        fence_regs(flat_s());
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKSteps; ++kk) {
            // Step kk reads columns 16kk.. of panel kk / 4: 32 bytes further along the swizzled
            // 128-byte rows for each step inside a panel (the hardware applies the XOR).
            const int panel = kk / Tr::kKStepsPerPanel, in_panel = (kk % Tr::kKStepsPerPanel) * 32;
            const uint64_t desc_q = smem_desc(q_base + panel * Tr::kQPanelBytes + in_panel, 16, Tr::kAtomBytes);
            const uint64_t desc_k = smem_desc(k_base + panel * Tr::kKVPanelBytes + in_panel, 16, Tr::kAtomBytes);
            GemmS::ss(flat_s(), desc_q, desc_k, kk > 0);
        }
        wgmma_commit();
    }

    // O += P V of key block j, P from registers, issued, not waited for.
    __device__ __forceinline__ void issue_pv(int j) {
        const int stage = stage_of(j);
        mbar_wait(smem_addr(&sm.bars->v_full[stage]), full_parity(j));
        const uint32_t v_base = smem_addr(sm.v) + stage * Tr::kKVBytes;
        fence_regs(flat_acc());
        fence_regs(rP);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kPVSteps; ++kk) {
            // Step kk reads keys 16kk..16kk+15: two 8-key atoms, 16 rows of 128 bytes further on.
            const uint64_t desc_v = smem_desc(v_base + kk * 16 * Tr::kRowBytes, Tr::kKVPanelBytes, Tr::kAtomBytes);
            GemmO::rs(flat_acc(), rP[kk], desc_v);
        }
        wgmma_commit();
    }

    __device__ __forceinline__ void release(uint64_t *empty) { mbar_arrive(smem_addr(empty)); }

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

    // Scores of keys at or past seqlen_k, and (causal) right of a row's diagonal, become -inf. A row
    // keeps keys below one bound, so one compare per score.
    __device__ __forceinline__ void mask(int j, int seqlen_k) {
        const int col0 = j * Tr::kBlockN + thread_col;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = row0 + thread_row + half * 8;
            const int limit = (kCausal ? min(seqlen_k, row + 1) : seqlen_k) - col0;
#pragma unroll
            for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c)
                    if (nt * 8 + c >= limit) rS[0][nt][2 * half + c] = -INFINITY;
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

    // One key block j >= 1: S_j and P_{j-1} V_{j-1} are issued back to back; S_j's softmax then runs
    // while P V is still on the tensor cores, so O is rescaled (by the alpha of block j-1) only
    // before that GEMM is issued, never while it runs. The other warpgroup issues its pair while
    // this one does the exponentials.
    template <bool kMask>
    __device__ __forceinline__ void step(int j, int seqlen_k) {
        wait_turn();
        issue_s(j);
        softmax.scale_acc(acc, alpha);
        issue_pv(j - 1);
        pass_turn();
        wgmma_wait<1>();   // S_j is done (P V may still run)
        fence_regs(flat_s());
        release(&sm.bars->k_empty[stage_of(j)]);
        if (kMask) mask(j, seqlen_k);
        softmax.fold(rS, scale_log2, alpha);
        pin_softmax();
        wgmma_wait<0>();   // P_{j-1} V_{j-1} is done: rP and acc are free
        fence_regs(flat_acc());
        fence_regs(rP);
        release(&sm.bars->v_empty[stage_of(j - 1)]);
        convert_p();
    }

    // One tile, its Q already in shared memory.
    __device__ void run(int n_blocks, int n_unmasked, int seqlen_k) {
        // The first turn of every tile is warpgroup 0's: the last warpgroup gives it up front.
        if (wg == kLastWG) pass_turn();

        // Block 0 has no previous P V to overlap with.
        wait_turn();
        issue_s(0);
        pass_turn();
        wgmma_wait<0>();
        fence_regs(flat_s());
        release(&sm.bars->k_empty[stage_of(0)]);
        if (n_unmasked == 0) mask(0, seqlen_k);
        softmax.fold(rS, scale_log2, alpha);
        convert_p();

        // Unmasked blocks, then the diagonal (causal) and ragged last blocks: the mask costs a compare
        // and a select per score, and only those need it.
        int j = 1;
        for (; j < n_unmasked; ++j) step<false>(j, seqlen_k);
        for (; j < n_blocks; ++j) step<true>(j, seqlen_k);
        // Every S GEMM of the tile has completed: the producer may load the next tile's Q.
        release(&sm.bars->q_empty);

        // The last P V. The last warpgroup passes no turn after it: warpgroup 0 waits for no further one.
        wait_turn();
        softmax.scale_acc(acc, alpha);
        issue_pv(n_blocks - 1);
        if (wg != kLastWG) pass_turn();
        wgmma_wait<0>();
        fence_regs(flat_acc());
        release(&sm.bars->v_empty[stage_of(n_blocks - 1)]);
    }

    // O / l and the log-sum-exp; rows at or past seqlen_q were computed on TMA's zero fill and are not stored.
    __device__ void store(const sy_attn_params &p, int h, int b) {
        float lse[2];
        softmax.finalize(acc, p.scale, lse);
        T *gO = head_base(static_cast<T *>(p.o), p.o_strides, b, h);
        float *gLse = p.lse + (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = row0 + thread_row + half * 8;
            if (row >= p.seqlen_q) continue;
            T *gRow = gO + row * p.o_strides[2] + thread_col;
#pragma unroll
            for (int nt = 0; nt < kNTilesO; ++nt)
                *reinterpret_cast<uint32_t *>(gRow + nt * 8) = MmaOp<T>::pack(acc[0][nt][2 * half], acc[0][nt][2 * half + 1]);
            if (thread_col == 0) gLse[row] = lse[half];
        }
    }
};
#endif  // SY_HOPPER_DEVICE_CODE

#ifdef SY_HOPPER_DEVICE_CODE
// Key blocks of query block m0: all, or (causal) up to its last row's diagonal; those below
// n_unmasked have every key present and (causal) lie left of the first row's diagonal. Both consumer
// warpgroups walk the same blocks (the ring is shared); a block fully above the diagonal for
// warpgroup 0's rows is masked to zero weight, at most one per query block.
template <class Tr, bool kCausal>
struct KeyBlocks {
    int n_blocks, n_unmasked;
    __device__ KeyBlocks(int m0, int seqlen_q, int seqlen_k) {
        const int last_row = min(m0 + Tr::kBlockM, seqlen_q) - 1;
        n_blocks = ceil_div(seqlen_k, Tr::kBlockN);
        n_unmasked = seqlen_k / Tr::kBlockN;
        if (kCausal) {
            n_blocks = min(n_blocks, last_row / Tr::kBlockN + 1);
            n_unmasked = min(n_unmasked, (m0 + 1) / Tr::kBlockN);
        }
    }
};
#endif

template <class Tr, typename T, bool kCausal>
__global__ void __launch_bounds__(Tr::kThreads, 1)
hopper_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                  const __grid_constant__ CUtensorMap tm_v, const sy_attn_params p, const TileScheduler sched) {
#ifdef SY_HOPPER_DEVICE_CODE
    extern __shared__ unsigned char smem_raw[];
    const SharedTiles<Tr> sm(smem_raw);
    const int warpgroup = threadIdx.x / 128;
    const int group = p.heads_q / p.heads_kv;

    if (threadIdx.x == 0) {
        Barriers<Tr> &bar = *sm.bars;
        mbar_init(smem_addr(&bar.q_full), 1);
        mbar_init(smem_addr(&bar.q_empty), 128 * Tr::kConsumerWGs);
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
            Barriers<Tr> &bar = *sm.bars;
            int kv_iter = 0;
            for (int t = blockIdx.x, tile_iter = 0;; ++tile_iter) {
                // The Q buffer is free once every consumer has finished the previous tile's S GEMMs.
                mbar_wait(smem_addr(&bar.q_empty), (tile_iter & 1) ^ 1);
                bar.tile = t;
                if (t >= sched.n_tiles) {
                    mbar_arrive(smem_addr(&bar.q_full));   // completes the phase with no bytes: "stop"
                    break;
                }
                const TileScheduler::Tile tile = sched.tile(t, kCausal);
                const int m0 = tile.m_block * Tr::kBlockM;
                const KeyBlocks<Tr, kCausal> blocks(m0, p.seqlen_q, p.seqlen_k);
                produce_tile<Tr>(sm, &tm_q, &tm_k, &tm_v, kv_iter, m0, tile.h, tile.h / group, tile.b,
                                 blocks.n_blocks);
                t = sched.next(p.tile_counter);
            }
        }
    } else {
        regs_inc<Tr::kConsumerRegs>();
        Consumer<Tr, T, kCausal> consumer(sm, warpgroup - 1, p.scale);
        int kv_iter = 0;
        for (int tile_iter = 0;; ++tile_iter) {
            mbar_wait(smem_addr(&sm.bars->q_full), tile_iter & 1);
            const int t = *reinterpret_cast<volatile int *>(&sm.bars->tile);
            if (t >= sched.n_tiles) break;
            const TileScheduler::Tile tile = sched.tile(t, kCausal);
            const int m0 = tile.m_block * Tr::kBlockM;
            const KeyBlocks<Tr, kCausal> blocks(m0, p.seqlen_q, p.seqlen_k);
            consumer.begin_tile(m0, kv_iter);
            consumer.run(blocks.n_blocks, blocks.n_unmasked, p.seqlen_k);
            consumer.store(p, tile.h, tile.b);
            kv_iter += blocks.n_blocks;
        }
    }
#endif
}

// ---- host: launch (tensor maps: hopper_primitives.cuh) ----------------------------------------------
template <class Tr, typename T, bool kCausal>
int launch(const sy_attn_params &p, cudaStream_t stream) {
    auto kernel = hopper_fwd_kernel<Tr, T, kCausal>;
    // The kernel body exists only in an sm_90a build: a library built for another arch has none.
    cudaFuncAttributes attrs;
    cudaError_t err = cudaFuncGetAttributes(&attrs, kernel);
    if (err != cudaSuccess) return static_cast<int>(err);
    if (attrs.binaryVersion != 90) return kUnsupported;

    CUtensorMap tm_q, tm_k, tm_v;
    int status = encode_map(&tm_q, p.q, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, p.batch, p.q_strides, Tr::kBlockM);
    if (status == kOk)
        status = encode_map(&tm_k, p.k, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, p.batch, p.k_strides, Tr::kBlockN);
    if (status == kOk)
        status = encode_map(&tm_v, p.v, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, p.batch, p.v_strides, Tr::kBlockN);
    if (status != kOk) return status;

    int device = 0, sms = 0;
    if ((err = cudaGetDevice(&device)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return static_cast<int>(err);
    TileScheduler sched;
    sched.n_mblocks = ceil_div(p.seqlen_q, Tr::kBlockM);
    sched.heads_q = p.heads_q;
    const int64_t n_tiles = int64_t(sched.n_mblocks) * p.heads_q * p.batch;
    if (n_tiles > INT32_MAX) return kInvalid;
    sched.n_tiles = static_cast<int>(n_tiles);

    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    // Persistent: one resident block per SM (shared memory and registers allow no second), the
    // counter zeroed on the stream. Otherwise a block per tile and no counter: the kernel must not
    // draw tiles from a counter nobody zeroed.
    sy_attn_params kp = p;
    int grid = sched.n_tiles;
    if (p.tile_counter && ceil_div(p.seqlen_k, Tr::kBlockN) <= Tr::kPersistentMaxKeyBlocks) {
        if ((err = cudaMemsetAsync(p.tile_counter, 0, sizeof(int), stream)) != cudaSuccess) return static_cast<int>(err);
        grid = static_cast<int>(min(n_tiles, int64_t(sms)));
    } else {
        kp.tile_counter = nullptr;
    }
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, kp, sched);
    return launch_status();
}

template <class Tr, typename T>
int launch_causal(const sy_attn_params &p, cudaStream_t stream) {
    return p.is_causal ? launch<Tr, T, true>(p, stream) : launch<Tr, T, false>(p, stream);
}

template <typename T>
int launch_dtype(const sy_attn_params &p, cudaStream_t stream) {
    return p.head_dim == 64 ? launch_causal<HopperTraitsD64, T>(p, stream) : launch_causal<HopperTraitsD128, T>(p, stream);
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_hopper_fwd(const sy_attn_params *params, void *stream) {
    using namespace sy_attn;
    int status = check_params(params);
    if (status != kOk) return status;
    const sy_attn_params &p = *params;
    if (p.head_dim != 64 && p.head_dim != 128) return kUnsupported;
    if (p.dtype == SY_ATTN_F32 || p.mask != nullptr) return kUnsupported;
    if (!device_is_sm90()) return kUnsupported;
    // Misaligned views: the Python layer copies them first; a direct C caller gets SY_EUNSUPPORTED.
    if (!tma_aligned(p.q, p.q_strides, p.batch, p.heads_q, p.seqlen_q) ||
        !tma_aligned(p.k, p.k_strides, p.batch, p.heads_kv, p.seqlen_k) ||
        !tma_aligned(p.v, p.v_strides, p.batch, p.heads_kv, p.seqlen_k))
        return kUnsupported;
    if (reinterpret_cast<uintptr_t>(p.o) % 4 != 0 || p.o_strides[2] % 2 != 0) return kInvalid;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    return p.dtype == SY_ATTN_BF16 ? launch_dtype<__nv_bfloat16>(p, s) : launch_dtype<__half>(p, s);
}
