/* The extern "C" launch API of the CUDA attention kernels (loaded by sympathy/attention/cuda.py).
 *
 * One parameter block describes a forward pass; each kernel family has one launch function that
 * checks what the Python layer cannot (head dim, dtype support, launch limits), enqueues its
 * kernels on the caller's stream and returns a status: 0, a negative sy_status (platform.h), or a
 * positive cudaError_t that sy_attn_error_string() names. Nothing here exits the process.
 *
 * Layouts: q (B, Hq, Nq, d), k and v (B, Hkv, Nk, d), any strides in elements whose last dimension
 * is 1; o (B, Hq, Nq, d) with its own strides; lse (B, Hq, Nq) float32 contiguous. Query head h
 * reads key/value head h / (Hq / Hkv) (GQA). Causal masking is top-left aligned (torch's SDPA):
 * query row i sees keys 0..i.
 */
#ifndef SY_ATTENTION_API_H
#define SY_ATTENTION_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */
enum sy_attn_dtype { SY_ATTN_F32 = 0, SY_ATTN_F16 = 1, SY_ATTN_BF16 = 2 };

typedef struct sy_attn_params {
    const void *q, *k, *v;          /* device pointers, element type `dtype` */
    void *o;                        /* output, element type `dtype` */
    float *lse;                     /* (B, Hq, Nq) natural-log log-sum-exp of each scaled score row */
    const float *mask;              /* additive float mask (B, Hq, Nq, Nk) by strides, or NULL (naive only) */
    float *workspace;               /* naive only: B*Hq*Nq*Nk floats for S, then P */
    int64_t q_strides[3], k_strides[3], v_strides[3], o_strides[3];   /* batch, head, row */
    int64_t mask_strides[4];        /* batch, head, row, col; 0 broadcasts */
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    float scale;                    /* multiplies q . k */
    int is_causal;                  /* top-left aligned */
    int dtype;                      /* enum sy_attn_dtype */
    int *tile_counter;              /* hopper only: one int of device scratch (no initial value) for its
                                       persistent tile scheduler, or NULL for one block per tile */
} sy_attn_params;

int sy_attn_naive_fwd(const sy_attn_params *params, void *stream);
int sy_attn_tiled_fwd(const sy_attn_params *params, void *stream);
int sy_attn_mma_fwd(const sy_attn_params *params, void *stream);
int sy_attn_hopper_fwd(const sy_attn_params *params, void *stream);   /* sm_90a: attention_hopper.cu */
const char *sy_attn_error_string(int status);

/* Backward: sy_attn_hopper_bwd (cuda_src/attention_hopper_bwd.cu: wgmma and TMA, sm_90a, fp16/bf16, the
   mma workspaces; SY_EUNSUPPORTED when deterministic), sy_attn_mma_bwd (cuda_src/attention_mma_bwd.cu:
   tensor cores, fp16/bf16) and
   sy_attn_tiled_bwd (cuda_src/attention_bwd.cu: fp32 math, any of the three dtypes). q, k, v, o,
   dout as in the forward (dout: o's shape, its own strides); lse the forward's. dq (B, Hq, Nq, d),
   dk and dv (B, Hkv, Nk, d): outputs, element type `dtype`, own strides. The float workspaces are
   the caller's, contiguous, no initial value:
     tiled: dq_accum (B, Hq, Nq, d), dk_accum and dv_accum (B, Hq, Nk, d) (per query head: a GQA
            group is summed after), delta (B, Hq, Nq); lse_log2 unused.
     mma:   delta and lse_log2 (B, Hq, Nq rounded up to SY_ATTN_BWD_ROW_ALIGN); dq_accum
            (B, Hq, Nq, d) unless deterministic; dk_accum and dv_accum (B, Hq, Nk, d) only when
            Hq != Hkv (otherwise NULL: dK and dV go straight to dk and dv).
   deterministic: dQ by a separate query-block pass (no atomics), so two runs give identical bits.
   Head dims 64 and 128; no mask. mma also needs q, k, v, dout rows 16-byte aligned and dq, dk, dv
   rows 4-byte aligned. */
enum { SY_ATTN_BWD_ROW_ALIGN = 128 };

typedef struct sy_attn_bwd_params {
    const void *q, *k, *v, *o, *dout;
    const float *lse;
    void *dq, *dk, *dv;
    float *dq_accum, *dk_accum, *dv_accum, *delta, *lse_log2;
    int64_t q_strides[3], k_strides[3], v_strides[3], o_strides[3], dout_strides[3];
    int64_t dq_strides[3], dk_strides[3], dv_strides[3];
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    float scale;
    int is_causal;
    int deterministic;
    int dtype;
} sy_attn_bwd_params;

int sy_attn_tiled_bwd(const sy_attn_bwd_params *params, void *stream);
int sy_attn_mma_bwd(const sy_attn_bwd_params *params, void *stream);
int sy_attn_hopper_bwd(const sy_attn_bwd_params *params, void *stream);   /* sm_90a, not deterministic: attention_hopper_bwd.cu */
/* CDEF END */

#ifdef __cplusplus
}
#endif

#endif /* SY_ATTENTION_API_H */
