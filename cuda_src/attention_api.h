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
 * query row i sees keys 0..i, unless causal_offset moves the diagonal (the band: sy_attn_params).
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
    const float *mask;              /* naive: additive float32 mask (B, Hq, Nq, Nk) by strides, or NULL; mma and
                                       hopper: any mask_kind, with mask_lists (below) */
    float *workspace;               /* naive only: B*Hq*Nq*Nk floats for S, then P */
    int64_t q_strides[3], k_strides[3], v_strides[3], o_strides[3];   /* batch, head, row */
    int64_t mask_strides[4];        /* batch, head, row, col; 0 broadcasts */
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    float scale;                    /* multiplies q . k */
    int is_causal;                  /* top-left aligned */
    int dtype;                      /* enum sy_attn_dtype */
    int *tile_counter;              /* hopper only: one int of device scratch (no initial value) for its
                                       persistent tile scheduler, or NULL for one block per tile */
    /* The band (mma and hopper, forward and backward; naive and tiled answer SY_EUNSUPPORTED unless
       all three are 0): query row i sees key j iff
           i + causal_offset - window_left <= j <= i + causal_offset + window_right.
       causal_offset: 0 is torch's top-left alignment, Nk - Nq bottom-right (flash-attn's, KV-cache
       prefill). is_causal sets window_right to 0. The window counts only when has_window is set; a
       side of -1 is unbounded (flash-attn's window_size). A row that sees no key gives 0, LSE -inf. */
    int causal_offset;
    int has_window, window_left, window_right;
    /* A packed variable-length batch (hopper only, d 64/128; flash_attn_varlen_func's layout), or NULL:
       sequence b holds rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q, o and each lse row, and rows
       cu_seqlens_k[b] .. of k and v (batch sequences, int32 on the device, non-decreasing from 0). q and
       o are then (total_q, Hq, d) and k, v (total_k, Hkv, d): the strides give (unused, head, row),
       seqlen_q and seqlen_k are the totals, lse is (Hq, total_q), max_seqlen_q is at least the longest
       sequence's queries. The band counts from each sequence's bottom right: causal_offset is added to
       len_k - len_q (flash-attn's alignment). */
    const int *cu_seqlens_q, *cu_seqlens_k;
    int max_seqlen_q;
    /* attn_mask tile by tile (mma forward and backward, hopper forward: attention_mask.cuh), or mask_lists
       NULL. mask: the element mask by mask_strides (batch, head, row, col; 0 broadcasts), of type
       mask_kind: 0 float32 (additive; naive's only kind), 1 bool (one byte, nonzero takes part).
       mask_lists: int32, per (mask batch, mask head, row block) [count, block << 2 | class,
       ...] by mask_list_strides (0 broadcasts); row blocks are query blocks of mask_block_q rows in the
       forward (entries: key blocks of mask_block_k) and key blocks in the backward (entries: query
       blocks); a kernel refuses tiles of another shape. With a band (is_causal, causal_offset, window) the
       lists must classify the mask and the band together (mask_tiles.py): partial tiles test the band per
       score, full ones nothing. Not with varlen or (mma) deterministic. */
    int mask_kind;
    const int *mask_lists;
    int64_t mask_list_strides[3];
    int mask_block_q, mask_block_k;
    /* Dropout (hopper and mma, not varlen, no window; cuda_src/attention_dropout.cuh): dropout_p in [0, 1),
       0 for none. Score (b, h, i, j) is kept by Philox4x32-7 keyed by dropout_seed at counter
       offset / 4 + b * Hq + h (dropout_offset: torch's CUDA generator offset, a multiple of 4; a launch
       takes 4 * B * Hq of it); kept probabilities are scaled by 1 / (1 - p). The backward takes the same
       three values and regenerates the mask. */
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
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
     hopper: as mma, but over R = sy_attn_hopper_bwd_rows(params) rows a head (below; at d = 128 it can
            exceed Nq rounded up to SY_ATTN_BWD_ROW_ALIGN): delta and lse_log2 (B, Hq, R), dq_accum
            (B, Hq, R, d) (its layout inside is the kernel's own) also when deterministic, then followed
            by B * Hq * R / 64 ints (per-tile counters); deterministic needs bf16 or d = 128 and no
            varlen (else SY_EUNSUPPORTED); varlen as below.
   deterministic: dQ by a separate query-block pass (no atomics), so two runs give identical bits.
   Head dims 64 and 128; a mask tile by tile (mma, hopper: the fields below). mma also needs q, k, v,
   dout rows 16-byte aligned and dq, dk, dv rows 4-byte aligned. */
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
    int causal_offset;                          /* the band, as in sy_attn_params */
    int has_window, window_left, window_right;
    /* A packed variable-length batch (hopper only), as in sy_attn_params: q, o, dout, dq (total_q, Hq, d)
       and k, v, dk, dv (total_k, Hkv, d) by (unused, head, row) strides, lse (Hq, total_q); seqlen_q and
       seqlen_k the totals, batch the sequences. Workspaces: delta and lse_log2 (B, Hq, max_seqlen_q rounded
       up to SY_ATTN_BWD_ROW_ALIGN), dq_accum (Hq, total_q, d), dk_accum and dv_accum (Hq, total_k, d). */
    const int *cu_seqlens_q, *cu_seqlens_k;
    int max_seqlen_q, max_seqlen_k;
    /* attn_mask tile by tile, as in sy_attn_params; here mask_lists are the backward's (per key block, entries
       query blocks). The mma backward only: the hopper backward answers SY_EUNSUPPORTED. */
    const void *mask;
    int64_t mask_strides[4];
    int mask_kind;
    const int *mask_lists;
    int64_t mask_list_strides[3];
    int mask_block_q, mask_block_k;
    float dropout_p;                            /* dropout, as in sy_attn_params: the forward's values */
    uint64_t dropout_seed, dropout_offset;
} sy_attn_bwd_params;

int sy_attn_tiled_bwd(const sy_attn_bwd_params *params, void *stream);
int sy_attn_mma_bwd(const sy_attn_bwd_params *params, void *stream);
int sy_attn_hopper_bwd(const sy_attn_bwd_params *params, void *stream);   /* sm_90a: attention_hopper_bwd.cu */
/* The rows per head ("Nq rounded up" above) of sy_attn_hopper_bwd's workspaces for these parameters (the sizes,
   band, mask, dropout and varlen fields are read): Nq, or max_seqlen_q with varlen, rounded up to
   SY_ATTN_BWD_ROW_ALIGN, after rounding up to whole 80-query tiles where the kernel uses them (d = 128 without a
   band, mask, dropout or varlen). */
int sy_attn_hopper_bwd_rows(const sy_attn_bwd_params *params);
/* sm_90a, d = 256 only (attention_hopper_bwd256.cu: wgmma and TMA): the hopper workspaces (dq_accum (B, Hq, Nq rounded
   up to SY_ATTN_BWD_ROW_ALIGN, d), its layout inside the kernel's own; no counters);
   dense or causal (a window open on the left), GQA; SY_EUNSUPPORTED when deterministic, masked, dropout, varlen. */
int sy_attn_hopper_bwd256(const sy_attn_bwd_params *params, void *stream);
/* Test-only: the keep-mask (1 kept, 0 dropped) that the kernels use for dropout_p, dropout_seed and
   dropout_offset, written to mask (B, H, Nq, Nk) uint8 contiguous by the kernels' own Philox groups
   (cuda_src/attention_dropout.cu). */
int sy_attn_dropout_mask(unsigned char *mask, int batch, int heads, int seqlen_q, int seqlen_k, float dropout_p,
                         uint64_t dropout_seed, uint64_t dropout_offset, void *stream);
/* Decode / KV-cache attention (cuda_src/attention_decode.cu, fp16/bf16, d 64/128; sm_80 and newer).
   Layouts as flash_attn_with_kvcache: q (B, Nq, Hq, d) and o (B, Nq, Hq, d), strides (batch, row, head)
   in elements; k_cache, v_cache (cache batch or page, row, head) strides, last dim contiguous, every
   row 16-byte aligned. Sequence b attends to keys [0, min(cache_seqlens[b] + seqlen_new, capacity))
   (cache_seqlens NULL: capacity), capacity = seqlen_cache or block_table_cols * page_size. Causal is
   bottom-right aligned: query row i sees keys j <= i + seqlen_k - Nq. With block_table (B rows of
   block_table_stride int32) row j of sequence b lives in page block_table[b][j / page_size] at row
   j % page_size; page_size a multiple of SY_DECODE_PAGE_MULTIPLE. cache_batch_idx (contiguous only)
   maps b to its cache batch. num_pages: k_cache's first dim; page and batch indices are clamped to it. lse (B, Hq, Nq) f32.
   num_splits > 1 splits each sequence's keys over that many blocks: partial_o (num_splits, B, Hq,
   Nq, d) (16-byte aligned) and partial_lse (num_splits, B, Hq, Nq), f32 scratch, are merged by a
   second kernel. */
enum { SY_DECODE_PAGE_MULTIPLE = 64 };

typedef struct sy_decode_params {
    const void *q, *k, *v;
    void *o;
    float *lse;
    float *partial_o, *partial_lse;
    const int *cache_seqlens, *cache_batch_idx, *block_table;
    int64_t q_strides[3], k_strides[3], v_strides[3], o_strides[3];
    int64_t block_table_stride;
    int batch, heads_q, heads_kv, seqlen_q, head_dim;
    int seqlen_new;         /* added to cache_seqlens[b] (keys appended before the launch) */
    int capacity;           /* keys a sequence can hold: seqlen_cache, or block_table_cols * page_size */
    int page_size, num_pages;   /* num_pages: k_cache.shape[0] (pages, or cache batch rows) */
    int num_splits;
    float scale;
    int is_causal;
    int dtype;
} sy_decode_params;

int sy_attn_decode_fwd(const sy_decode_params *params, void *stream);
/* CDEF END */

#ifdef __cplusplus
}
#endif

#endif /* SY_ATTENTION_API_H */
