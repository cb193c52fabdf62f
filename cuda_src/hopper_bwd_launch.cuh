// The hopper backward's host launch (attention_hopper_bwd.cu, included there after hopper_bwd_kernel): one
// instantiation's tensor maps, workspaces and kernels (preprocess, the backward, the dQ conversion, GQA's
// dK / dV sums), the head dim, band, mask, dropout or varlen mode picked at run time (launch_head_dim), and the
// entry point's checks of a call (check_hopper_bwd).
#pragma once

namespace sy_attn {
namespace {

template <class Tr, typename T, int kMode>
int launch(const sy_attn_bwd_params &p, int rows_per_head, Band band, cudaStream_t stream) {
    constexpr auto kernel = hopper_bwd_kernel<Tr, T, kMode>;
    int status = prepare_kernel<kernel>(Tr::kSmemBytes);   // the body exists only in an sm_90a build
    if (status != kOk) return status;

    constexpr bool kVarlen = (kMode & kVarlenFlag) != 0;
    const int map_batch = kVarlen ? 1 : p.batch;   // varlen: the packed rows as one batch
    CUtensorMap tm_q, tm_do, tm_k, tm_v;
    status = encode_map(&tm_q, p.q, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, map_batch, p.q_strides, Tr::kBlockM);
    if (status == kOk)
        status = encode_map(&tm_do, p.dout, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, map_batch, p.dout_strides,
                            Tr::kBlockM);
    if (status == kOk)
        status = encode_map(&tm_k, p.k, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, map_batch, p.k_strides, Tr::kBlockN);
    if (status == kOk)
        status = encode_map(&tm_v, p.v, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, map_batch, p.v_strides, Tr::kBlockN);
    if (status != kOk) return status;

    // dQ through shared memory: dq_accum tile-major over rows_per_head rows a head (attention_api.h).
    constexpr bool kDqTiled = (Tr::kDqViaSmem || Tr::kDqTiledAdds) && !kVarlen;
    const size_t dq_bytes = static_cast<size_t>(map_batch) * p.heads_q * (kDqTiled ? rows_per_head : p.seqlen_q) *
                            Tr::kHeadDim * sizeof(float);
    if ((status = launch_preprocess_zero_dq<T, Tr::kHeadDim>(p, rows_per_head, dq_bytes, kDqTiled, stream)) != kOk)
        return status;
    if (p.deterministic) {   // the per-tile counters after dq_accum (only tile-major launches get here)
        const size_t sem_bytes = static_cast<size_t>(p.batch) * p.heads_q * (rows_per_head / Tr::kBlockM) * sizeof(int);
        const cudaError_t err = cudaMemsetAsync(reinterpret_cast<char *>(p.dq_accum) + dq_bytes, 0, sem_bytes, stream);
        if (err != cudaSuccess)
            return static_cast<int>(err);
    }
    const int key_blocks = ceil_div(kVarlen ? p.max_seqlen_k : p.seqlen_k, Tr::kBlockN);
    const dim3 grid = lpt_grid<kMode>(p) ? dim3(p.heads_q, key_blocks, p.batch) : dim3(key_blocks, p.heads_q, p.batch);
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(tm_q, tm_do, tm_k, tm_v, p, rows_per_head, band);
    if ((status = launch_status()) != kOk) return status;

    if (Tr::kDqTransposed)
        status = launch_dq_tiled_convert_t<T>(p.dq_accum, p.dq, p.dq_strides, p.batch, p.heads_q, p.seqlen_q,
                                              rows_per_head, p.scale, stream);
    else if (kDqTiled)
        status = launch_dq_tiled_convert<T, Tr::kHeadDim>(p.dq_accum, p.dq, p.dq_strides, p.batch, p.heads_q, p.seqlen_q,
                                                          rows_per_head, p.scale, stream);
    else
        status = launch_dq_convert<T, Tr::kHeadDim>(p.dq_accum, p.dq, p.dq_strides, map_batch, p.heads_q, p.seqlen_q,
                                                    p.scale, kVarlen, stream);
    if (status != kOk || p.heads_q == p.heads_kv) return status;   // the kernel wrote dk and dv itself
    const int group = p.heads_q / p.heads_kv;
    status = launch_reduce<T>(p.dk_accum, p.dk, p.dk_strides, map_batch, p.heads_kv, group, p.seqlen_k, Tr::kHeadDim,
                              1.f, stream);
    if (status != kOk) return status;
    return launch_reduce<T>(p.dv_accum, p.dv, p.dv_strides, map_batch, p.heads_kv, group, p.seqlen_k, Tr::kHeadDim, 1.f,
                            stream);
}

template <class Tr, typename T, int kVarlen>
int launch_causal(const sy_attn_bwd_params &p, int rows_per_head, cudaStream_t stream) {
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode, kVarlen != 0);
    if (mode == kBandLocal) return launch<Tr, T, kBandLocal | kVarlen>(p, rows_per_head, band, stream);
    return mode == kBandCausal ? launch<Tr, T, kBandCausal | kVarlen>(p, rows_per_head, band, stream)
                               : launch<Tr, T, kBandNone | kVarlen>(p, rows_per_head, band, stream);
}

// Dropout: every band mode (the keep bits do not depend on it), no varlen; d = 64 and 128.
template <class Tr, typename T>
int launch_dropout(const sy_attn_bwd_params &p, int rows_per_head, cudaStream_t stream) {
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode);
    if (p.cu_seqlens_q) return kUnsupported;
    if (mode == kBandLocal) return launch<Tr, T, kBandLocal | kDropoutFlag>(p, rows_per_head, band, stream);
    return mode == kBandCausal ? launch<Tr, T, kBandCausal | kDropoutFlag>(p, rows_per_head, band, stream)
                               : launch<Tr, T, kBandNone | kDropoutFlag>(p, rows_per_head, band, stream);
}


// Whether a launch takes the 80-query tiles (SY_HOPPER_BWD_D128_BLOCK_M): d = 128 without a band (or causal from
// SY_HOPPER_BWD_D128_CAUSAL_WIDE_MIN_Q query rows on), attn_mask, dropout or varlen, dQ through shared memory
// (SY_HOPPER_BWD_DQ_TMA = 1).
inline bool wide_tiles(const sy_attn_bwd_params &p) {
    if (SY_HOPPER_BWD_D128_BLOCK_M != 80 || SY_HOPPER_BWD_DQ_TMA != 1 || p.head_dim != 128 || p.mask_lists ||
        p.dropout_p > 0.f || p.cu_seqlens_q)
        return false;
    int mode;
    make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q, p.seqlen_k, &mode);
    return mode == kBandNone || (mode == kBandCausal && SY_HOPPER_BWD_D128_CAUSAL_WIDE_MIN_Q > 0 &&
                                 p.seqlen_q >= SY_HOPPER_BWD_D128_CAUSAL_WIDE_MIN_Q);
}

// Rows per head of the delta, lse_log2 and dq_accum workspaces (sy_attn_hopper_bwd_rows): Nq (varlen:
// max_seqlen_q) rounded up to SY_ATTN_BWD_ROW_ALIGN, after rounding up to whole 80-query tiles where they are
// used (wide: wide_tiles(p)): the last tile's LSE and D loads and its dQ shares stay inside the head's rows.
inline int hopper_bwd_rows(const sy_attn_bwd_params &p, bool wide) {
    const int rows = p.cu_seqlens_q ? p.max_seqlen_q : p.seqlen_q;
    return ceil_div(wide ? ceil_div(rows, 80) * 80 : rows, SY_ATTN_BWD_ROW_ALIGN) * SY_ATTN_BWD_ROW_ALIGN;
}

// The head dim, the mask's lists, dropout and varlen pick the instantiation.
template <typename T>
int launch_head_dim(const sy_attn_bwd_params &p, cudaStream_t stream) {
    const bool wide = wide_tiles(p);
    const int rows_per_head = hopper_bwd_rows(p, wide);
    // dQ through shared memory except fp16 at d = 64 (SY_HOPPER_BWD_DQ_TMA says why), which adds tile-major.
    constexpr bool kTmaD64 = SY_HOPPER_BWD_DQ_TMA == 1 && !std::is_same<T, __half>::value;
    using TraitsD64 = HopperBwdTraits<64, kTmaD64 ? SY_HOPPER_BWD_D64_TMA_STAGES : SY_HOPPER_BWD_D64_STAGES, kTmaD64,
                                      SY_HOPPER_BWD_DQ_TMA != 0 && !kTmaD64>;
    using TraitsD128 = HopperBwdTraits<128, SY_HOPPER_BWD_D128_STAGES, SY_HOPPER_BWD_DQ_TMA == 1, SY_HOPPER_BWD_DQ_TMA == 2>;
    // Dropout: d = 128 with dQ through shared memory (SY_HOPPER_BWD_DROPOUT_TMA), so deterministic calls are
    // served too; d = 64 with TraitsD64 (bf16 dQ through shared memory, deterministic too; fp16 the tile-major
    // atomics, refused deterministic as without dropout; tile says how its 128-query tile fits).
    // attn_mask tile by tile (kBandMask): the key-major lists of this kernel's (kBlockM, kBlockN) tiles, with
    // the launch's band (its classes in the lists, its test in partial tiles); no varlen or deterministic
    // order (sy_attn_hopper_bwd refuses them).
    if (p.mask_lists) {
        int mode;
        const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                    p.seqlen_k, &mode);
        const bool tiles_ok = p.head_dim == 64 ? check_mask(p, TraitsD64::kBlockM, TraitsD64::kBlockN)
                                               : check_mask(p, TraitsD128::kBlockM, TraitsD128::kBlockN);
        if (!tiles_ok) return kInvalid;
        // With dropout: d = 128 without a band (the mma backward serves d = 64 and a band).
        if (p.dropout_p > 0.f) {
            if (p.head_dim != 128 || mode != kBandNone) return kUnsupported;
            return launch<TraitsD128, T, kBandMask | kDropoutFlag>(p, rows_per_head, band, stream);
        }
        if (p.head_dim == 64)
            return mode == kBandNone ? launch<TraitsD64, T, kBandMask>(p, rows_per_head, band, stream)
                                     : launch<TraitsD64, T, kBandMask | kMaskBandFlag>(p, rows_per_head, band, stream);
        return mode == kBandNone ? launch<TraitsD128, T, kBandMask>(p, rows_per_head, band, stream)
                                 : launch<TraitsD128, T, kBandMask | kMaskBandFlag>(p, rows_per_head, band, stream);
    }
    if (p.dropout_p > 0.f) {
        using TraitsDropout = HopperBwdTraits<128, SY_HOPPER_BWD_D128_STAGES, SY_HOPPER_BWD_DROPOUT_TMA != 0>;
        if (p.deterministic && !(p.head_dim == 64 ? TraitsD64::kDqViaSmem : TraitsDropout::kDqViaSmem))
            return kUnsupported;
        return p.head_dim == 64 ? launch_dropout<TraitsD64, T>(p, rows_per_head, stream)
                                : launch_dropout<TraitsDropout, T>(p, rows_per_head, stream);
    }
    if (p.cu_seqlens_q)
        return p.head_dim == 64 ? launch_causal<TraitsD64, T, kVarlenFlag>(p, rows_per_head, stream)
                                : launch_causal<TraitsD128, T, kVarlenFlag>(p, rows_per_head, stream);
    if (wide) {
        using TraitsWide = HopperBwdTraits<128, SY_HOPPER_BWD_D128_STAGES, true, false, 80>;
        int mode;
        const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right,
                                    p.seqlen_q, p.seqlen_k, &mode);
        if constexpr (SY_HOPPER_BWD_D128_CAUSAL_WIDE_MIN_Q > 0)
            if (mode == kBandCausal) return launch<TraitsWide, T, kBandCausal>(p, rows_per_head, band, stream);
        return launch<TraitsWide, T, kBandNone>(p, rows_per_head, band, stream);
    }
    return p.head_dim == 64 ? launch_causal<TraitsD64, T, 0>(p, rows_per_head, stream)
                            : launch_causal<TraitsD128, T, 0>(p, rows_per_head, stream);
}

// sy_attn_hopper_bwd's checks of a call: kOk, or the status it answers (kUnsupported where another backward serves
// the call, kInvalid for parameters no backward takes).
inline int check_hopper_bwd(const sy_attn_bwd_params *params) {
    int status = check_bwd_params(params);
    if (status != kOk) return status;
    const sy_attn_bwd_params &p = *params;
    if (p.head_dim != 64 && p.head_dim != 128) return kUnsupported;
    if (p.dtype == SY_ATTN_F32) return kUnsupported;
    if (p.mask && !p.mask_lists) return kUnsupported;   // attn_mask: tile by tile only (its lists)
    // A mask with varlen or the deterministic order: not instantiated (the mma backward or the torch-math
    // backward serves them). A band beside the mask is served (kBandMask takes the launch's band), with
    // dropout not (launch_head_dim).
    if (p.mask_lists && (p.cu_seqlens_q || p.deterministic)) return kUnsupported;
    // Deterministic: dQ through shared memory only (not varlen, not fp16 at d = 64: SY_HOPPER_BWD_DQ_TMA).
    if (p.deterministic && (SY_HOPPER_BWD_DQ_TMA != 1 || p.cu_seqlens_q || (p.dtype == SY_ATTN_F16 && p.head_dim == 64) ||
                            (p.dropout_p != 0.f && !SY_HOPPER_BWD_DROPOUT_TMA)))
        return kUnsupported;
    if (!check_band(p.has_window, p.window_left, p.window_right, p.seqlen_q, p.seqlen_k)) return kInvalid;
    if (!device_is_sm90()) return kUnsupported;
    if (!p.lse_log2 || !p.dq_accum) return kInvalid;
    if (p.heads_q != p.heads_kv && (!p.dk_accum || !p.dv_accum)) return kInvalid;
    // Misaligned views: the Python layer copies them first; a direct C caller gets SY_EUNSUPPORTED.
    const int map_batch = p.cu_seqlens_q ? 1 : p.batch;   // varlen: one packed "batch"
    if (!tma_aligned(p.q, p.q_strides, map_batch, p.heads_q, p.seqlen_q) ||
        !tma_aligned(p.dout, p.dout_strides, map_batch, p.heads_q, p.seqlen_q) ||
        !tma_aligned(p.k, p.k_strides, map_batch, p.heads_kv, p.seqlen_k) ||
        !tma_aligned(p.v, p.v_strides, map_batch, p.heads_kv, p.seqlen_k))
        return kUnsupported;
    if ((p.cu_seqlens_q == nullptr) != (p.cu_seqlens_k == nullptr) ||
        (p.cu_seqlens_q && (p.max_seqlen_q < 1 || p.max_seqlen_k < 1)))
        return kInvalid;
    const int64_t *out_strides[3] = {p.dq_strides, p.dk_strides, p.dv_strides};
    const void *outs[3] = {p.dq, p.dk, p.dv};
    for (int i = 0; i < 3; ++i)
        if (reinterpret_cast<uintptr_t>(outs[i]) % 4 != 0 || out_strides[i][2] % 2 != 0) return kInvalid;
    return kOk;
}


}  // namespace
}  // namespace sy_attn
