/* attention.h: FlashAttention's forward pass on the CPU (c_src/attention.c), float32.
 *
 * Semantics are torch's scaled_dot_product_attention: q (B, Hq, Nq, d), k (B, Hk, Nk, d),
 * v (B, Hk, Nk, dv) -> out (B, Hq, Nq, dv); Hq a multiple of Hk (grouped-query attention);
 * top-left causal (query i sees keys j <= i); scale defaults to 1/sqrt(d) in Python.
 * A row whose scores are all masked gives zeros (and lse = -inf); NaN inputs give NaN rows.
 *
 * Extra memory is O(block_q · (d + dv) + block_k · panel) per thread, whatever N is: the N×N
 * score matrix never exists.
 */
#ifndef SYMPATHY_ATTENTION_H
#define SYMPATHY_ATTENTION_H

#include <stdint.h>

/* ---- tile traits: every size the kernel is built around, with the reason for it ---------------- */

/* A query's accumulator row (dv floats) and its transposed Q column live in the L1/L2-resident
 * per-thread block; 256 floats per row keeps one block of 512 queries inside a 2 MiB L2. */
#define SY_ATTN_MAX_HEAD_DIM 256

/* AVX-512: a panel is 32 queries = two zmm per row of the transposed score tile sT[key][query],
 * so the online softmax runs down the columns with no horizontal reduction. */
#define SY_ATTN_AVX512_PANEL 32
/* Keys per score micro-tile: 8 keys × 2 zmm = 16 accumulators, leaving 16 of the 32 zmm for the
 * two Q loads and the key broadcasts; 16 independent FMA chains cover 4-cycle latency × 2 ports. */
#define SY_ATTN_AVX512_KEYS 8
/* Value columns per P·V micro-tile: 8 columns × 2 zmm = 16 accumulators, same budget as above. */
#define SY_ATTN_AVX512_VCOLS 8

/* AVX2 has 16 ymm: 6 × 2 accumulators + 2 loads + 1 broadcast = 15 (the classic 6×16 sgemm tile). */
#define SY_ATTN_AVX2_PANEL 16
#define SY_ATTN_AVX2_KEYS 6
#define SY_ATTN_AVX2_VCOLS 6

/* The scalar fallback: 8 queries a panel keeps the same loop structure; the compiler may vectorise. */
#define SY_ATTN_SCALAR_PANEL 8

#define SY_ATTN_MAX_BLOCK 4096      /* block_q and block_k bounds: keeps the per-thread block small */

_Static_assert(SY_ATTN_AVX512_PANEL == 2 * 16 && SY_ATTN_AVX2_PANEL == 2 * 8,
               "the micro-kernels hold one panel row in exactly two vector registers");

/* CDEF BEGIN */
enum sy_attn_isa {
    SY_ATTN_ISA_AUTO = 0,    /* the widest this CPU runs */
    SY_ATTN_ISA_SCALAR = 1,
    SY_ATTN_ISA_AVX2 = 2,    /* AVX2 + FMA */
    SY_ATTN_ISA_AVX512 = 3   /* AVX-512F */
};

/* One attention call. Strides are in floats for the batch, head and row dimensions; the last
 * dimension of every tensor is contiguous. */
struct sy_attn_problem {
    const float *q; int64_t q_stride[3];
    const float *k; int64_t k_stride[3];
    const float *v; int64_t v_stride[3];
    float *out; int64_t out_stride[3];
    float *lse;              /* NULL, or (B, Hq, Nq) contiguous: each row's log-sum-exp (natural log) */
    int64_t batch, heads_q, heads_kv, n_q, n_kv, head_dim, value_dim;
    float scale;
    int causal;
};

/* How a call is cut up. Zero fields are filled by sy_attn_plan; non-zero ones are kept. */
struct sy_attn_plan {
    int isa;                 /* enum sy_attn_isa, never AUTO once planned */
    int block_q;             /* queries per work item (rows of Q whose acc stays in L2) */
    int block_k;             /* keys per K/V tile (sT panel in L1) */
    int threads;             /* workers, the calling thread included */
};

int sy_attn_isa_best(void);
int sy_attn_isa_supported(int isa);
int sy_attn_panel_width(int isa);
int sy_attn_plan(const struct sy_attn_problem *problem, int64_t l1d_bytes, int64_t l2_bytes,
                 struct sy_attn_plan *plan);
int sy_attn_scratch_bytes(const struct sy_attn_problem *problem, const struct sy_attn_plan *plan,
                          int64_t *bytes_per_thread);
int sy_attn_forward(const struct sy_attn_problem *problem, const struct sy_attn_plan *plan);
/* CDEF END */

#endif /* SYMPATHY_ATTENTION_H */
