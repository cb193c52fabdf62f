/* attention.c: FlashAttention's forward pass on the CPU, float32, one pass over K and V per block
 * of queries, the N×N score matrix never stored.
 *
 * Hardware fact exploited: a block of queries whose accumulators stay in L2 reads each K/V tile
 * from memory once and reuses it for every query, while the scores of one panel of queries live
 * only in L1, so memory traffic is O(N·d) per block instead of the O(N²) of materialised scores.
 *
 * Structure (names as in FlashAttention and Triton's _attn_fwd_inner; m_i, l_i, acc as everywhere
 * in sympathy):
 *
 *   for each work item (batch, head, block of block_q queries)          threads share a queue
 *     pack Q of the block, transposed and scaled by scale·log2(e)        qT[panel][d][PANEL]
 *     for each K/V tile of block_k keys (causal: only up to the block's last query)
 *       for each panel of PANEL queries
 *         sT   = K_tile · qT_panel                 scores, transposed: sT[key][query]
 *         mask the diagonal tile (causal)          split from unmasked tiles: most tiles need none
 *         rescale: m_i, l_i, alpha; sT <- P       the online-softmax step, down the columns
 *         acc  = alpha · acc + Vᵀ_tile · P         accT[dv][PANEL]
 *     finalize: out = acc / l_i, lse = m_i + log(l_i)
 *
 * Why transposed: with queries along the SIMD lanes, one panel's running maximum and sum are plain
 * vectors and the softmax needs no horizontal reduction; K and V are read in place (a key's value
 * is broadcast), so only the small Q block is ever repacked.
 *
 * Assumptions (the packed-layout contract, written once):
 *   qT   panel p holds queries p·PANEL .. p·PANEL+PANEL-1 of the block; element [k][c] is
 *        q[query c][k] · scale · log2(e); lanes past the last query are zero.
 *   sT   [key][PANEL], rows padded to a multiple of the key micro-tile; rows past n_keys are
 *        scratch that nothing reads.
 *   accT [dv][PANEL] per panel, unnormalised; m_i (log2 units) and l_i [PANEL] per panel.
 *   Scores are kept in log2 units so exp is exp2, whose exponent part is a bit shift or scalef.
 */
#include "attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "attention_kernels.h"
#include "platform.h"

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

static inline int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* ---- the plan: tile sizes from the cache sizes ------------------------------------------------------ */

static bool problem_valid(const struct sy_attn_problem *p) {
    if (!p || !p->q || !p->k || !p->v || !p->out) return false;
    if (p->batch < 1 || p->heads_q < 1 || p->heads_kv < 1 || p->n_q < 1 || p->n_kv < 1) return false;
    if (p->head_dim < 1 || p->head_dim > SY_ATTN_MAX_HEAD_DIM) return false;
    if (p->value_dim < 1 || p->value_dim > SY_ATTN_MAX_HEAD_DIM) return false;
    if (p->heads_q % p->heads_kv != 0) return false;
    return isfinite(p->scale);
}

int sy_attn_plan(const struct sy_attn_problem *p, int64_t l1d_bytes, int64_t l2_bytes, struct sy_attn_plan *plan) {
    if (!problem_valid(p) || !plan || plan->block_q < 0 || plan->block_k < 0 || plan->threads < 0) return SY_EINVAL;
    if (plan->isa == SY_ATTN_ISA_AUTO) plan->isa = sy_attn_isa_best();
    const struct attn_kernels *ker = sy_attn_kernels_for(plan->isa);
    if (!ker) return SY_EUNSUPPORTED;
    const int64_t panel = ker->panel, row_bytes = (p->head_dim + p->value_dim) * (int64_t)sizeof(float);
    if (l1d_bytes <= 0) l1d_bytes = 32 << 10;    /* unknown caches: the smallest common sizes */
    if (l2_bytes <= 0) l2_bytes = 256 << 10;
    if (plan->block_k == 0) {
        /* One panel's scores, block_k × panel floats, take half of L1d; the other half streams the
         * K rows and V rows being broadcast. Multiples of 16 keep sT rows whole cache lines apart. */
        int64_t bk = l1d_bytes / 2 / (panel * (int64_t)sizeof(float)) / 16 * 16;
        plan->block_k = (int)max_i64(16, min_i64(bk, 512));
    }
    if (plan->block_q == 0) {
        /* The block's Q and acc (block_q rows of d + dv) plus one K/V tile fill half of L2, so the tile
         * is read from memory once per block and hits L2 for every panel after the first. */
        int64_t bq = (l2_bytes / 2 - plan->block_k * row_bytes) / row_bytes / panel * panel;
        bq = max_i64(panel, min_i64(bq, 512));
        bq = min_i64(bq, round_up(p->n_q, panel));
        /* Enough work items for every thread to stay busy to the end (causal items differ in size). */
        const int64_t want = 4 * (int64_t)max_i64(1, plan->threads);
        while (bq > panel && p->batch * p->heads_q * ((p->n_q + bq - 1) / bq) < want)
            bq = max_i64(panel, bq / 2 / panel * panel);
        plan->block_q = (int)bq;
    }
    if (plan->block_q > SY_ATTN_MAX_BLOCK || plan->block_k > SY_ATTN_MAX_BLOCK) return SY_EINVAL;
    const int64_t items = p->batch * p->heads_q * ((p->n_q + plan->block_q - 1) / plan->block_q);
    if (plan->threads == 0) plan->threads = 1;
    plan->threads = (int)min_i64(plan->threads, items);
    return SY_OK;
}

/* ---- one thread's scratch: the block in flight ------------------------------------------------------ */

struct scratch {
    float *qT;       /* [panels][d][panel] */
    float *accT;     /* [panels][dv][panel] */
    float *m_i;      /* [panels][panel], log2 units */
    float *l_i;      /* [panels][panel] */
    float *sT;       /* [block_k padded][panel] */
    float *alpha;    /* [panel] */
    void *memory;
};

static int64_t scratch_floats(const struct sy_attn_problem *p, const struct sy_attn_plan *plan,
                              const struct attn_kernels *ker, int64_t *sizes) {
    const int64_t panel = ker->panel;
    const int64_t panels = (plan->block_q + panel - 1) / panel;
    sizes[0] = panels * p->head_dim * panel;
    sizes[1] = panels * p->value_dim * panel;
    sizes[2] = panels * panel;
    sizes[3] = panels * panel;
    sizes[4] = round_up(plan->block_k, ker->key_tile) * panel;   /* whole key micro-tiles */
    sizes[5] = panel;
    int64_t total = 0;
    for (int i = 0; i < 6; i++) total += round_up(sizes[i], SY_CACHE_LINE / sizeof(float));
    return total;
}

int sy_attn_scratch_bytes(const struct sy_attn_problem *p, const struct sy_attn_plan *plan, int64_t *bytes) {
    const struct attn_kernels *ker = plan ? sy_attn_kernels_for(plan->isa) : NULL;
    if (!ker || !problem_valid(p) || plan->block_q < 1 || plan->block_k < 1 || !bytes) return SY_EINVAL;
    int64_t sizes[6];
    *bytes = scratch_floats(p, plan, ker, sizes) * (int64_t)sizeof(float);
    return SY_OK;
}

static int scratch_alloc(struct scratch *s, const struct sy_attn_problem *p, const struct sy_attn_plan *plan,
                         const struct attn_kernels *ker) {
    int64_t sizes[6];
    const int64_t total = scratch_floats(p, plan, ker, sizes);
    /* Cache-line aligned: the kernels use aligned vector loads on every panel row. */
    float *base = aligned_alloc(SY_CACHE_LINE, (size_t)total * sizeof(float));
    if (!base) return SY_ENOMEM;
    float **slots[6] = {&s->qT, &s->accT, &s->m_i, &s->l_i, &s->sT, &s->alpha};
    float *cursor = base;
    for (int i = 0; i < 6; i++) {
        *slots[i] = cursor;
        cursor += round_up(sizes[i], SY_CACHE_LINE / sizeof(float));
    }
    memset(s->sT, 0, (size_t)sizes[4] * sizeof(float));   /* padding rows are computed but never read */
    s->memory = base;
    return SY_OK;
}

/* ---- one work item: a block of queries of one (batch, head) ---------------------------------------- */

struct block {
    const float *q, *k, *v;  /* this head's rows (k, v: its kv head) */
    float *out, *lse;
    int64_t q0, rows;        /* first query of the block, queries in it */
};

/* Q of the block into qT, transposed and scaled by scale·log2(e) so the scores come out in log2
 * units; lanes past the last query are zero (their scores are finite and never written out). */
static void pack_queries(const struct sy_attn_problem *p, const struct block *blk, int panel, float *qT) {
    const int64_t d = p->head_dim, panels = (blk->rows + panel - 1) / panel;
    const float scale = p->scale * LOG2E;
    for (int64_t pn = 0; pn < panels; pn++) {
        float *dst = qT + pn * d * panel;
        for (int c = 0; c < panel; c++) {
            const int64_t row = pn * panel + c;
            if (row < blk->rows) {
                const float *src = blk->q + (blk->q0 + row) * p->q_stride[2];
                for (int64_t kk = 0; kk < d; kk++) dst[kk * panel + c] = src[kk] * scale;
            } else {
                for (int64_t kk = 0; kk < d; kk++) dst[kk * panel + c] = 0.0f;
            }
        }
    }
}

/* Causal diagonal tile: key r of the tile is global key kv0 + r, lane c is query i0 + c; the key is
 * hidden from every lane with i0 + c < kv0 + r. Only tiles that cross the diagonal come here. */
static void mask_causal(float *sT, int64_t n_keys, int panel, int64_t kv0_minus_i0) {
    for (int64_t r = 0; r < n_keys; r++) {
        const int64_t hidden = min_i64(panel, max_i64(0, r + kv0_minus_i0));
        for (int64_t c = 0; c < hidden; c++) sT[r * panel + c] = -INFINITY;
    }
}

/* out = acc / l_i and lse = (m_i + log2 l_i)·ln 2, back in the caller's layout. A lane with
 * l_i = 0 saw only masked keys: zeros and lse = -inf, sympathy's fully-masked-row policy. */
static void finalize(const struct sy_attn_problem *p, const struct block *blk, const struct scratch *s, int panel) {
    const int64_t dv = p->value_dim;
    for (int64_t row = 0; row < blk->rows; row++) {
        const int64_t pn = row / panel, c = row % panel;
        const float l = s->l_i[pn * panel + c];
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        const float *acc = s->accT + pn * dv * panel + c;
        float *dst = blk->out + (blk->q0 + row) * p->out_stride[2];
        for (int64_t col = 0; col < dv; col++) dst[col] = acc[col * panel] * inv;
        if (blk->lse)
            blk->lse[blk->q0 + row] = l == 0.0f ? -INFINITY : (s->m_i[pn * panel + c] + log2f(l)) * LN2;
    }
}

static void run_block(const struct sy_attn_problem *p, const struct sy_attn_plan *plan,
                      const struct attn_kernels *ker, const struct block *blk, struct scratch *s) {
    const int panel = ker->panel;
    const int64_t d = p->head_dim, dv = p->value_dim, panels = (blk->rows + panel - 1) / panel;
    const int64_t ks = p->k_stride[2], vs = p->v_stride[2];
    pack_queries(p, blk, panel, s->qT);
    for (int64_t i = 0; i < panels * panel; i++) {
        s->m_i[i] = -INFINITY;
        s->l_i[i] = 0.0f;
    }
    memset(s->accT, 0, (size_t)(panels * dv * panel) * sizeof(float));

    const int64_t last_query = blk->q0 + blk->rows - 1;
    /* Causal: no query of the block sees a key after its last query, so those tiles are skipped. */
    const int64_t kv_end = p->causal ? min_i64(p->n_kv, last_query + 1) : p->n_kv;
    for (int64_t kv0 = 0; kv0 < kv_end; kv0 += plan->block_k) {
        const int64_t kv_len = min_i64(plan->block_k, kv_end - kv0);
        for (int64_t pn = 0; pn < panels; pn++) {
            const int64_t i0 = blk->q0 + pn * panel;
            const int64_t i_last = min_i64(i0 + panel, blk->q0 + blk->rows) - 1;
            const int64_t n_keys = p->causal ? min_i64(kv_len, i_last + 1 - kv0) : kv_len;
            if (n_keys <= 0) continue;   /* the whole tile is after this panel's last query */
            ker->scores(s->qT + pn * d * panel, d, blk->k + kv0 * ks, ks, n_keys, s->sT);
            if (p->causal && kv0 + n_keys - 1 > i0)   /* a diagonal tile: some key follows some query */
                mask_causal(s->sT, n_keys, panel, kv0 - i0);
            ker->rescale(s->sT, n_keys, s->m_i + pn * panel, s->l_i + pn * panel, s->alpha);
            ker->accumulate(s->sT, blk->v + kv0 * vs, vs, n_keys, dv, s->alpha, s->accT + pn * dv * panel);
        }
    }
    finalize(p, blk, s, panel);
}

/* ---- threads: a shared queue of work items --------------------------------------------------------- */

struct attn_job {
    const struct sy_attn_problem *problem;
    const struct sy_attn_plan *plan;
    const struct attn_kernels *kernels;
    int64_t blocks_per_head, items;
    /* The queue head. Items take milliseconds, so one fetch_add per item never contends; relaxed is
     * enough because items share no data and pthread_join publishes every result to the caller. */
    atomic_int_fast64_t next_item;
    atomic_int status;      /* SY_OK, or the first failure (relaxed: read after join) */
};

static void item_block(const struct attn_job *job, int64_t item, struct block *blk) {
    const struct sy_attn_problem *p = job->problem;
    const int64_t heads = p->batch * p->heads_q;
    /* Causal blocks near the end of the sequence carry the most keys: hand them out first, so the
     * short ones fill the gaps at the end instead of one long block finishing alone. */
    int64_t chunk = item / heads;
    if (p->causal) chunk = job->blocks_per_head - 1 - chunk;
    const int64_t bh = item % heads, b = bh / p->heads_q, h = bh % p->heads_q;
    const int64_t hk = h / (p->heads_q / p->heads_kv);   /* GQA: query head h reads kv head h / group */
    blk->q = p->q + b * p->q_stride[0] + h * p->q_stride[1];
    blk->k = p->k + b * p->k_stride[0] + hk * p->k_stride[1];
    blk->v = p->v + b * p->v_stride[0] + hk * p->v_stride[1];
    blk->out = p->out + b * p->out_stride[0] + h * p->out_stride[1];
    blk->lse = p->lse ? p->lse + bh * p->n_q : NULL;
    blk->q0 = chunk * job->plan->block_q;
    blk->rows = min_i64(job->plan->block_q, p->n_q - blk->q0);
}

static void *attn_worker(void *arg) {
    struct attn_job *job = arg;
    struct scratch s;
    const int status = scratch_alloc(&s, job->problem, job->plan, job->kernels);
    if (status != SY_OK) {
        int expected = SY_OK;
        atomic_compare_exchange_strong_explicit(&job->status, &expected, status, memory_order_relaxed,
                                                memory_order_relaxed);
        return NULL;   /* the other threads drain the queue */
    }
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&job->next_item, 1, memory_order_relaxed);
        if (item >= job->items) break;
        struct block blk;
        item_block(job, item, &blk);
        run_block(job->problem, job->plan, job->kernels, &blk, &s);
    }
    free(s.memory);
    return NULL;
}

int sy_attn_forward(const struct sy_attn_problem *p, const struct sy_attn_plan *plan) {
    if (!problem_valid(p) || !plan || plan->block_q < 1 || plan->block_k < 1 || plan->threads < 1 ||
        plan->block_q > SY_ATTN_MAX_BLOCK || plan->block_k > SY_ATTN_MAX_BLOCK)
        return SY_EINVAL;
    const struct attn_kernels *ker = sy_attn_kernels_for(plan->isa);
    if (!ker) return SY_EUNSUPPORTED;
    struct attn_job job = {.problem = p, .plan = plan, .kernels = ker};
    job.blocks_per_head = (p->n_q + plan->block_q - 1) / plan->block_q;
    job.items = p->batch * p->heads_q * job.blocks_per_head;
    atomic_init(&job.next_item, 0);
    atomic_init(&job.status, SY_OK);

    enum { MAX_THREADS = 1024 };
    pthread_t workers[MAX_THREADS];
    const int wanted = (int)min_i64(min_i64(plan->threads, MAX_THREADS), job.items);
    int started = 0;
    for (int t = 1; t < wanted; t++) {   /* the calling thread is worker 0 */
        if (pthread_create(&workers[started], NULL, attn_worker, &job) != 0) break;   /* fewer is fine */
        started++;
    }
    SY_MEASURE_BEGIN();
    attn_worker(&job);
    for (int t = 0; t < started; t++) pthread_join(workers[t], NULL);
    SY_MEASURE_END();
    /* Every worker that failed to allocate left its items to the others; only if all failed is
     * anything left undone. */
    if (atomic_load_explicit(&job.next_item, memory_order_relaxed) < job.items)
        return atomic_load_explicit(&job.status, memory_order_relaxed);
    return SY_OK;
}
