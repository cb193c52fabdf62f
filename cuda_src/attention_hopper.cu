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
// This file holds the kernel and its launch; the consumer warpgroup is in hopper_fwd_consumer.cuh, the
// tile order, the shared-memory layout and the producer in hopper_fwd_pipeline.cuh, the tile sizes in
// hopper_traits.cuh.
//
// The sm_90a body is compiled only where the arch-specific features exist (__CUDA_ARCH_FEAT_SM90_ALL);
// other targets (CI compiles every file for sm_80) get an empty kernel that the launcher never runs:
// it answers SY_EUNSUPPORTED unless the device is sm_90 and the loaded kernel was built for it.
#include "hopper_fwd_consumer.cuh"   // the consumer warpgroup (and the pipeline, epilogue, dropout it uses)

namespace sy_attn {
namespace {

template <class Tr, typename T, int kMode>
__global__ void __launch_bounds__(Tr::kThreads, 1)
hopper_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                  const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o, const int o_by_tma,
                  const sy_attn_params p, const TileScheduler sched, const Band band,
                  const __grid_constant__ DropoutConsts dropout) {
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
        Consumer<Tr, T, kMode> consumer(sm, warpgroup - 1, p.scale, o_by_tma ? &tm_o : nullptr, dropout);
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
// Bands' tiles longest first inside sections of heads whose K/V fit SY_HOPPER_LPT_L2_KIB (tile_order.cuh); 0: the
// order before it (head-major, each head's query blocks reversed), for a same-run A/B.
#ifndef SY_HOPPER_FWD_LPT
#define SY_HOPPER_FWD_LPT 1
#endif
#ifndef SY_HOPPER_LPT_L2_KIB
#define SY_HOPPER_LPT_L2_KIB 12288   // a quarter of the H100's 50 MiB L2: 8-10 MiB in flight measured good, 24 bad
#endif
template <class Tr, typename T, int kMode>
int launch(const sy_attn_params &p, Band band, cudaStream_t stream) {
    constexpr auto kernel = hopper_fwd_kernel<Tr, T, kMode>;
    // The kernel body exists only in an sm_90a build: a library built for another arch has none.
    int status = prepare_kernel<kernel>(Tr::kSmemBytes);
    if (status != kOk) return status;

    // Varlen: one "batch" of total rows; each tile addresses its sequence's rows.
    constexpr bool kVarlen = (kMode & kVarlenFlag) != 0;
    const int map_batch = kVarlen ? 1 : p.batch;
    CUtensorMap tm_q, tm_k, tm_v, tm_o = {};
    status = encode_map(&tm_q, p.q, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, map_batch, p.q_strides, Tr::kBlockM);
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

    cudaError_t err = cudaSuccess;
    const int sms = current_sm_count(&err);
    if (err != cudaSuccess) return static_cast<int>(err);
    TileScheduler sched;
    sched.order.n_mblocks = ceil_div(kVarlen ? p.max_seqlen_q : p.seqlen_q, Tr::kBlockM);
    sched.heads_q = p.heads_q;
    const int64_t n_tiles = int64_t(sched.order.n_mblocks) * p.heads_q * p.batch;
    if (n_tiles > INT32_MAX) return kInvalid;
    sched.n_tiles = static_cast<int>(n_tiles);
    sched.order.n_heads = p.heads_q * p.batch;
    // Bands longest first in L2-sized sections of heads (tile_order.cuh); varlen and mask lists head-major.
    sched.order.section_heads = 0;
    if (SY_HOPPER_FWD_LPT && (kMode & 3) != kBandNone && (kMode & 3) != kBandMask && !kVarlen && n_tiles > 0) {
        const long long kv_bytes = 2LL * p.seqlen_k * Tr::kHeadDim * sizeof(T) / (p.heads_q / p.heads_kv);
        sched.order.section_heads = section_heads_for(sched.order.n_heads, sched.order.n_mblocks, sms, kv_bytes,
                                                      SY_HOPPER_LPT_L2_KIB * 1024LL);
    }

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
    const DropoutConsts dropout = dropout_consts(p.dropout_p, p.dropout_seed, p.dropout_offset);   // read by kDropoutFlag modes only
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, tm_o, o_by_tma ? 1 : 0, kp, sched, band, dropout);
    return launch_status();
}

template <class Tr, typename T, int kVarlen>
int launch_causal(const sy_attn_params &p, cudaStream_t stream) {
    // attn_mask tile by tile, not varlen: d = 128, and d = 64 on the 128 x 128 tiles of HopperTraitsD64Short
    // (two consumers at 240 registers; the three of HopperTraitsD64 at 160 spilled 68 bytes around the
    // mask's loads).
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode, kVarlen != 0);
    if constexpr (kVarlen == 0 && Tr::kBlockM == 128 && Tr::kBlockN == 128 && Tr::kHeadDim <= 128) {
        if (p.mask_lists) {   // the band rides along: the lists hold its classes, partial tiles test it
            if (!check_mask(p, Tr::kBlockM, Tr::kBlockN)) return kInvalid;
            return launch<Tr, T, kBandMask>(p, band, stream);
        }
    }
    if (p.mask_lists) return kUnsupported;
    if (mode == kBandLocal) return launch<Tr, T, kBandLocal | kVarlen>(p, band, stream);
    return mode == kBandCausal ? launch<Tr, T, kBandCausal | kVarlen>(p, band, stream)
                               : launch<Tr, T, kBandNone | kVarlen>(p, band, stream);
}

// Dropout: every band mode (a window's keep bits are those of the unbanded call: the band only decides which
// scores exist), and attn_mask tile by tile on the mask's tiles, with the band as without dropout (d = 128, and
// d = 64 on HopperTraitsD64Short's two consumers at 240 registers; Tr is then that traits).
template <class Tr, typename T>
int launch_dropout(const sy_attn_params &p, cudaStream_t stream) {
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode);
    if constexpr (Tr::kBlockM == 128 && Tr::kBlockN == 128) {
        if (p.mask_lists) {   // the band rides along: the lists hold its classes, partial tiles test it
            if (!check_mask(p, Tr::kBlockM, Tr::kBlockN)) return kInvalid;
            return launch<Tr, T, kBandMask | kDropoutFlag>(p, band, stream);
        }
    }
    if constexpr (std::is_same<Tr, HopperTraitsD64Short>::value) {   // taken for a mask's tiles only
        return kUnsupported;
    } else {
        if (p.mask_lists) return kUnsupported;
        if (mode == kBandLocal) return launch<Tr, T, kBandLocal | kDropoutFlag>(p, band, stream);
        return mode == kBandCausal ? launch<Tr, T, kBandCausal | kDropoutFlag>(p, band, stream)
                                   : launch<Tr, T, kBandNone | kDropoutFlag>(p, band, stream);
    }
}

// Varlen at d = 64 and 128 (d = 256 answers SY_EUNSUPPORTED: not instantiated); dropout likewise, not varlen.
template <typename T>
int launch_dtype(const sy_attn_params &p, cudaStream_t stream) {
    if (p.dropout_p > 0.f) {
        if (p.cu_seqlens_q || (p.head_dim != 64 && p.head_dim != 128)) return kUnsupported;
        if (p.head_dim == 128) return launch_dropout<HopperTraitsD128, T>(p, stream);
        return p.mask_lists ? launch_dropout<HopperTraitsD64Short, T>(p, stream) : launch_dropout<HopperTraitsD64, T>(p, stream);
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
