// The hopper backward's host launch (attention_hopper_bwd.cu, included there after hopper_bwd_kernel): one
// instantiation's tensor maps, workspaces and kernels (preprocess, the backward, the dQ conversion, GQA's
// dK / dV sums), and the band or dropout mode picked at run time.
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
    constexpr bool kDqTiled = Tr::kDqViaSmem && !kVarlen;
    const size_t dq_bytes = static_cast<size_t>(map_batch) * p.heads_q * (kDqTiled ? rows_per_head : p.seqlen_q) *
                            Tr::kHeadDim * sizeof(float);
    if ((status = launch_preprocess_zero_dq<T>(p, rows_per_head, dq_bytes, kDqTiled, stream)) != kOk) return status;
    if (p.deterministic) {   // the per-tile counters after dq_accum (only tile-major launches get here)
        const size_t sem_bytes = static_cast<size_t>(p.batch) * p.heads_q * (rows_per_head / Tr::kBlockM) * sizeof(int);
        const cudaError_t err = cudaMemsetAsync(reinterpret_cast<char *>(p.dq_accum) + dq_bytes, 0, sem_bytes, stream);
        if (err != cudaSuccess)
            return static_cast<int>(err);
    }
    dim3 grid(ceil_div(kVarlen ? p.max_seqlen_k : p.seqlen_k, Tr::kBlockN), p.heads_q, p.batch);
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(tm_q, tm_do, tm_k, tm_v, p, rows_per_head, band);
    if ((status = launch_status()) != kOk) return status;

    if (kDqTiled)
        status = launch_dq_tiled_convert<T>(p.dq_accum, p.dq, p.dq_strides, p.batch, p.heads_q, p.seqlen_q, rows_per_head,
                                            Tr::kHeadDim, p.scale, stream);
    else
        status = launch_dq_convert<T>(p.dq_accum, p.dq, p.dq_strides, map_batch, p.heads_q, p.seqlen_q, Tr::kHeadDim, p.scale,
                                  kVarlen, stream);
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

}  // namespace
}  // namespace sy_attn
