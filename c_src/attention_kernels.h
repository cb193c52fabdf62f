/* attention_kernels.h: private to the CPU attention: the interface between the driver (attention.c:
 * plan, scratch, blocks, threads) and the per-instruction-set inner kernels (attention_simd.c). */
#pragma once

#include <stdint.h>

#include "attention.h"

static inline int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

/* sT[r][c] = sum_k k[r][k] · qT[k][c] for r < n_keys (rows up to the micro-tile multiple are scratch). */
typedef void (*scores_fn)(const float *qT, int64_t d, const float *k, int64_t k_row_stride,
                          int64_t n_keys, float *sT);
/* The online-softmax step for one panel: m_i, l_i updated, sT overwritten by P, alpha written. */
typedef void (*rescale_fn)(float *sT, int64_t n_keys, float *m_i, float *l_i, float *alpha);
/* accT = alpha · accT + Vᵀ · P over n_keys keys (accT [dv][PANEL], P = sT). */
typedef void (*accumulate_fn)(const float *pT, const float *v, int64_t v_row_stride, int64_t n_keys,
                              int64_t dv, const float *alpha, float *accT);

struct attn_kernels {
    const char *name;
    int panel;             /* queries per panel (SIMD lanes × 2) */
    int key_tile;          /* keys per score micro-tile: the padding of sT rows */
    scores_fn scores;
    rescale_fn rescale;
    accumulate_fn accumulate;
};

/* The kernels of one instruction set, or NULL when this CPU lacks it. */
const struct attn_kernels *sy_attn_kernels_for(int isa);
