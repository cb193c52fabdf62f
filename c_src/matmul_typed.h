/* matmul_typed.h: the element-type-generic half of matmul.c, included once per dtype.
 *
 * Not a public header: matmul.c includes it twice, once with SY_T = double and once with
 * SY_T = float, the way NumPy's .c.src templates work, so the loop orders, the tiling, the packing
 * and the five BLIS loops are written once. The hand-written SIMD micro-kernels stay in matmul.c,
 * because their intrinsics differ per type. Before including, matmul.c defines:
 *   SY_T                   element type
 *   SY_FN(name)            name with the dtype suffix (loop_ijk → loop_ijk_f64)
 *   SY_UKR_REF             name of the scalar reference micro-kernel (dgemm_ref_4x8)
 *   SY_UKR_AVX512, SY_UKR_AVX2, SY_AXPY_AVX512, SY_AXPY_AVX2   the SIMD routines of this type
 *   SY_AVX512_MR, SY_AVX512_NR, SY_AVX2_NR   their tiles (SY_AVX2_MR is shared by both types)
 */

/* Operands of one call: A (m×k) and B (k×n) by element strides, C (m×n) row-major with ldc. */
struct SY_FN(gemm) {
    int64_t m, n, k;
    const SY_T *a;
    int64_t a_rs, a_cs;
    const SY_T *b;
    int64_t b_rs, b_cs;
    SY_T *c;
    int64_t ldc;
};

#define SY_A(g, i, p) ((g)->a[(i) * (g)->a_rs + (p) * (g)->a_cs])
#define SY_B(g, p, j) ((g)->b[(p) * (g)->b_rs + (j) * (g)->b_cs])
#define SY_C(g, i, j) ((g)->c[(i) * (g)->ldc + (j)])

/* The operands as restrict-qualified locals, for the loops: read through `g`, every store to C
 * could (as far as the compiler knows) change g's own fields, so it would reload the strides and
 * pointers after each one and never vectorise. Locals plus restrict promise no such aliasing. */
#define SY_LOCAL_OPERANDS(g)                                                                       \
    const int64_t m = (g)->m, n = (g)->n, k = (g)->k;                                              \
    const SY_T *restrict a = (g)->a;                                                               \
    const SY_T *restrict b = (g)->b;                                                               \
    SY_T *restrict c = (g)->c;                                                                     \
    const int64_t a_rs = (g)->a_rs, a_cs = (g)->a_cs, b_rs = (g)->b_rs, b_cs = (g)->b_cs;          \
    const int64_t ldc = (g)->ldc
#define SY_A_(i, p) a[(i) * a_rs + (p) * a_cs]
#define SY_B_(p, j) b[(p) * b_rs + (j) * b_cs]
#define SY_C_(i, j) c[(i) * ldc + (j)]

static void SY_FN(zero_c)(const struct SY_FN(gemm) *g) {
    for (int64_t i = 0; i < g->m; ++i)
        memset(&SY_C(g, i, 0), 0, (size_t)g->n * sizeof(SY_T));
}

/* ---- rung 1: the six loop orders ------------------------------------------------------------
 * The same triple loop, C[i][j] += A[i][p] * B[p][j], with the loops nested six ways. What changes
 * is the stride of the innermost loop through each matrix, and so how many of the bytes each
 * fetched cache line brings are used before it is evicted. Row-major: the inner index should be j. */
SY_NAIVE static void SY_FN(loop_ijk)(const struct SY_FN(gemm) *g) {
    SY_LOCAL_OPERANDS(g);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            for (int64_t p = 0; p < k; ++p)
                SY_C_(i, j) += SY_A_(i, p) * SY_B_(p, j);
}

SY_NAIVE static void SY_FN(loop_ikj)(const struct SY_FN(gemm) *g) {
    SY_LOCAL_OPERANDS(g);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p)
            for (int64_t j = 0; j < n; ++j)
                SY_C_(i, j) += SY_A_(i, p) * SY_B_(p, j);
}

SY_NAIVE static void SY_FN(loop_jik)(const struct SY_FN(gemm) *g) {
    SY_LOCAL_OPERANDS(g);
    for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i)
            for (int64_t p = 0; p < k; ++p)
                SY_C_(i, j) += SY_A_(i, p) * SY_B_(p, j);
}

SY_NAIVE static void SY_FN(loop_jki)(const struct SY_FN(gemm) *g) {
    SY_LOCAL_OPERANDS(g);
    for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p)
            for (int64_t i = 0; i < m; ++i)
                SY_C_(i, j) += SY_A_(i, p) * SY_B_(p, j);
}

SY_NAIVE static void SY_FN(loop_kij)(const struct SY_FN(gemm) *g) {
    SY_LOCAL_OPERANDS(g);
    for (int64_t p = 0; p < k; ++p)
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j)
                SY_C_(i, j) += SY_A_(i, p) * SY_B_(p, j);
}

SY_NAIVE static void SY_FN(loop_kji)(const struct SY_FN(gemm) *g) {
    SY_LOCAL_OPERANDS(g);
    for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j)
            for (int64_t i = 0; i < m; ++i)
                SY_C_(i, j) += SY_A_(i, p) * SY_B_(p, j);
}

/* ---- rungs 2 and 3: tiled, then vectorised --------------------------------------------------
 * ikj over tile×tile blocks: the B tile stays in L2 while every row of the C tile passes over it,
 * instead of all of B streaming in from L3 or DRAM once per row of C as in plain ikj. */
static void SY_FN(tiled)(const struct SY_FN(gemm) *g, int64_t tile) {
    SY_LOCAL_OPERANDS(g);
    for (int64_t i0 = 0; i0 < m; i0 += tile)
        for (int64_t p0 = 0; p0 < k; p0 += tile)
            for (int64_t j0 = 0; j0 < n; j0 += tile) {
                const int64_t i1 = sy_min64(i0 + tile, m), p1 = sy_min64(p0 + tile, k);
                const int64_t j1 = sy_min64(j0 + tile, n);
                for (int64_t i = i0; i < i1; ++i)
                    for (int64_t p = p0; p < p1; ++p) {
                        const SY_T a_ip = SY_A_(i, p);
                        for (int64_t j = j0; j < j1; ++j)
                            SY_C_(i, j) += a_ip * SY_B_(p, j);
                    }
            }
}

typedef void (*SY_FN(axpy_fn))(int64_t n, SY_T alpha, const SY_T *restrict x, SY_T *restrict y);

/* y += alpha·x in plain C (the compiler vectorises it for the baseline ISA: SSE2 on x86-64). */
static void SY_FN(axpy_scalar)(int64_t n, SY_T alpha, const SY_T *restrict x, SY_T *restrict y) {
    for (int64_t j = 0; j < n; ++j)
        y[j] += alpha * x[j];
}

/* The tiled loop nest with its inner j loop as an explicit vector axpy. The vectors need the B row
 * contiguous: a B with strided rows (a transposed view) has each tile copied into tile_buf first. */
static void SY_FN(simd)(const struct SY_FN(gemm) *g, int64_t tile, SY_FN(axpy_fn) axpy, SY_T *tile_buf) {
    for (int64_t i0 = 0; i0 < g->m; i0 += tile)
        for (int64_t p0 = 0; p0 < g->k; p0 += tile)
            for (int64_t j0 = 0; j0 < g->n; j0 += tile) {
                const int64_t i1 = sy_min64(i0 + tile, g->m), p1 = sy_min64(p0 + tile, g->k);
                const int64_t jn = sy_min64(j0 + tile, g->n) - j0;
                const SY_T *b_rows = &SY_B(g, p0, j0);
                int64_t b_ld = g->b_rs;
                if (g->b_cs != 1) {
                    for (int64_t p = p0; p < p1; ++p)
                        for (int64_t j = 0; j < jn; ++j)
                            tile_buf[(p - p0) * tile + j] = SY_B(g, p, j0 + j);
                    b_rows = tile_buf;
                    b_ld = tile;
                }
                for (int64_t i = i0; i < i1; ++i)
                    for (int64_t p = p0; p < p1; ++p)
                        axpy(jn, SY_A(g, i, p), b_rows + (p - p0) * b_ld, &SY_C(g, i, j0));
            }
}

/* ---- rung 4: packed (BLIS) ------------------------------------------------------------------
 * Assumptions, the contract between the packing routines and every micro-kernel:
 *   - A block (mc×kc) is packed as ceil(mc/MR) micro-panels of MR×kc, one after the other. Within
 *     a micro-panel, column p of the MR rows is stored contiguously: a_packed[p*MR + r] = A(i+r, p).
 *   - B block (kc×nc) is packed as ceil(nc/NR) micro-panels of kc×NR: b_packed[p*NR + c] = B(p, j+c).
 *   - Rows of A past m and columns of B past n are zero in the packed panels, so a micro-kernel
 *     always runs the full MR×NR tile; edge tiles are written through a scratch tile (see below).
 *   - Packed buffers start 64-byte aligned (one cache line, one zmm); the micro-kernel reads both
 *     panels strictly forwards, one p per step, which is what the hardware prefetchers follow best.
 *   - ukr(kc, a, b, c, ldc, accumulate): C_tile = (accumulate ? C_tile : 0) + a·b, with C_tile row
 *     r at c + r*ldc, unit stride along a row. kc may be 0 (then it only zeroes or keeps C_tile).
 */
typedef void (*SY_FN(ukr_fn))(int64_t kc, const SY_T *restrict a, const SY_T *restrict b,
                              SY_T *restrict c, int64_t ldc, int accumulate);

struct SY_FN(ukr) {
    SY_FN(ukr_fn) run;
    int64_t mr, nr;
};

/* The reference micro-kernel: plain C, any machine. Every SIMD kernel must agree with it. */
static void SY_UKR_REF(int64_t kc, const SY_T *restrict a, const SY_T *restrict b, SY_T *restrict c,
                       int64_t ldc, int accumulate) {
    SY_T acc[SY_REF_MR][SY_REF_NR] = {{0}};
    for (int64_t p = 0; p < kc; ++p)
        for (int r = 0; r < SY_REF_MR; ++r)
            for (int col = 0; col < SY_REF_NR; ++col)
                acc[r][col] += a[p * SY_REF_MR + r] * b[p * SY_REF_NR + col];
    for (int r = 0; r < SY_REF_MR; ++r)
        for (int col = 0; col < SY_REF_NR; ++col)
            c[r * ldc + col] = (accumulate ? c[r * ldc + col] : 0) + acc[r][col];
}

/* Pack rows [i0, i0+mc) × columns [p0, p0+kc) of A into MR-row micro-panels (zero-padded). Column by
 * column: the writes are sequential and the MR source rows are MR streams the prefetchers follow.
 * (Row by row, reading each source row in one sequential run, measured 25% slower on n=2048.) */
static void SY_FN(pack_a)(const struct SY_FN(gemm) *g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                          int64_t mr, SY_T *restrict dst) {
    for (int64_t ir = 0; ir < mc; ir += mr) {
        const int64_t rows = sy_min64(mr, mc - ir);
        for (int64_t p = 0; p < kc; ++p) {
            int64_t r = 0;
            for (; r < rows; ++r)
                dst[p * mr + r] = SY_A(g, i0 + ir + r, p0 + p);
            for (; r < mr; ++r)
                dst[p * mr + r] = 0;
        }
        dst += mr * kc;
    }
}

/* Pack micro-panels [first, end) of B rows [p0, p0+kc) × columns [j0, j0+nc) (zero-padded): threads
 * share a B block, each packing its own run of panels. Row by row of B, so a row-major B is read in
 * sequential runs across all the panels instead of one short run per page (rows are n·elt apart). */
static void SY_FN(pack_b)(const struct SY_FN(gemm) *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                          int64_t nr, int64_t first, int64_t end, SY_T *restrict packed) {
    for (int64_t p = 0; p < kc; ++p) {
        for (int64_t panel = first; panel < end; ++panel) {
            const int64_t jr = panel * nr, cols = sy_min64(nr, nc - jr);
            SY_T *restrict dst = packed + panel * nr * kc + p * nr;
            if (g->b_cs == 1) {
                memcpy(dst, &SY_B(g, p0 + p, j0 + jr), (size_t)cols * sizeof(SY_T));
            } else {
                for (int64_t col = 0; col < cols; ++col)
                    dst[col] = SY_B(g, p0 + p, j0 + jr + col);
            }
            for (int64_t col = cols; col < nr; ++col)
                dst[col] = 0;
        }
    }
}

/* Loops 2 and 1 (jr, ir) over one packed A block and one packed B block: every MR×NR tile of C. */
static void SY_FN(macro_kernel)(const struct SY_FN(gemm) *g, const struct SY_FN(ukr) *ukr,
                                int64_t ic, int64_t mc, int64_t jc, int64_t nc, int64_t kc, int accumulate,
                                const SY_T *a_packed, const SY_T *b_packed) {
    const int64_t mr = ukr->mr, nr = ukr->nr;
    /* Edge tiles: the kernel writes a full MR×NR tile, so a partial one goes through this scratch
     * tile and only its valid part is copied out; C is never touched past m or n. */
    SY_T edge[SY_MAX_MR * SY_MAX_NR] SY_ALIGNED(SY_CACHE_LINE);
    for (int64_t jr = 0; jr < nc; jr += nr) {                 /* loop 2: NR-column panels of B */
        const int64_t cols = sy_min64(nr, nc - jr);
        const SY_T *b_panel = b_packed + jr * kc;
        for (int64_t ir = 0; ir < mc; ir += mr) {             /* loop 1: MR-row panels of A */
            const int64_t rows = sy_min64(mr, mc - ir);
            const SY_T *a_panel = a_packed + ir * kc;
            SY_T *c_tile = &SY_C(g, ic + ir, jc + jr);
            if (SY_LIKELY(rows == mr && cols == nr)) {
                ukr->run(kc, a_panel, b_panel, c_tile, g->ldc, accumulate);
                continue;
            }
            ukr->run(kc, a_panel, b_panel, edge, nr, 0);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t col = 0; col < cols; ++col)
                    c_tile[r * g->ldc + col] = (accumulate ? c_tile[r * g->ldc + col] : 0) + edge[r * nr + col];
        }
    }
}

/* One packed call, shared by its threads. The job owns every buffer (no static state: reentrant). */
struct SY_FN(packed_job) {
    const struct SY_FN(gemm) *g;
    struct SY_FN(ukr) ukr;
    int64_t mc, kc, nc;
    SY_T *b_packed;        /* KC×NC, shared: packed by all threads together */
    SY_T **a_packed;       /* one MC×KC buffer per thread (each thread's own L2) */
};

/* The work of thread `id` of `nthreads`: loops 5, 4 and 3 (jc, pc, ic), the ic range split. */
static void SY_FN(packed_body)(void *arg, int id, int nthreads, pthread_barrier_t *barrier) {
    const struct SY_FN(packed_job) *job = arg;
    const struct SY_FN(gemm) *g = job->g;
    const int64_t mr = job->ukr.mr, nr = job->ukr.nr;
    /* This thread's rows of C, whole MR panels so no tile is split between threads. */
    const int64_t a_panels = sy_ceil_div(g->m, mr), per_thread = sy_ceil_div(a_panels, nthreads);
    const int64_t m_lo = sy_min64(g->m, id * per_thread * mr);
    const int64_t m_hi = sy_min64(g->m, (id + 1) * per_thread * mr);
    /* Equal MC blocks over this range: 1024 rows at MC=504 would become 350+350+324, not 504+504+16. */
    const int64_t blocks = sy_ceil_div(m_hi - m_lo, job->mc);
    const int64_t mc_even = blocks ? sy_round_up(sy_ceil_div(m_hi - m_lo, blocks), mr) : 0;
    SY_T *a_packed = job->a_packed[id];

    for (int64_t jc = 0; jc < g->n; jc += job->nc) {              /* loop 5: NC columns (L3) */
        const int64_t nc = sy_min64(job->nc, g->n - jc);
        for (int64_t pc = 0; pc < g->k; pc += job->kc) {          /* loop 4: KC deep (micro-panels) */
            const int64_t kc = sy_min64(job->kc, g->k - pc);
            const int64_t b_panels = sy_ceil_div(nc, nr);
            SY_FN(pack_b)(g, pc, kc, jc, nc, nr, b_panels * id / nthreads, b_panels * (id + 1) / nthreads,
                          job->b_packed);
            if (nthreads > 1)
                pthread_barrier_wait(barrier);                    /* B block complete before use */
            for (int64_t ic = m_lo; ic < m_hi; ic += mc_even) {   /* loop 3: MC rows (L2) */
                const int64_t mc = sy_min64(mc_even, m_hi - ic);
                SY_FN(pack_a)(g, ic, mc, pc, kc, mr, a_packed);
                SY_FN(macro_kernel)(g, &job->ukr, ic, mc, jc, nc, kc, pc > 0, a_packed, job->b_packed);
            }
            if (nthreads > 1)
                pthread_barrier_wait(barrier);                    /* all done reading B before repack */
        }
    }
}

static struct SY_FN(ukr) SY_FN(choose_ukr)(int isa) {
    switch (isa) {
#if SY_X86
    case SY_MATMUL_ISA_AVX512: return (struct SY_FN(ukr)){SY_UKR_AVX512, SY_AVX512_MR, SY_AVX512_NR};
    case SY_MATMUL_ISA_AVX2: return (struct SY_FN(ukr)){SY_UKR_AVX2, SY_AVX2_MR, SY_AVX2_NR};
#endif
    default: return (struct SY_FN(ukr)){SY_UKR_REF, SY_REF_MR, SY_REF_NR};
    }
}

static int SY_FN(packed)(const struct SY_FN(gemm) *g, const struct sy_matmul_plan *plan, int threads,
                         struct sy_matmul_workspace *workspace) {
    if (g->k == 0) {
        SY_FN(zero_c)(g);
        return SY_OK;
    }
    struct SY_FN(packed_job) job = {.g = g, .ukr = SY_FN(choose_ukr)(plan->isa),
                                    .mc = plan->mc, .kc = sy_min64(plan->kc, g->k)};
    job.nc = sy_min64(plan->nc, sy_round_up(g->n, job.ukr.nr));
    /* No thread gets fewer than one MR panel of rows; extra threads would only wait at barriers. */
    threads = (int)sy_min64(threads, sy_ceil_div(g->m, job.ukr.mr));
    const int64_t mc_cap = sy_min64(job.mc, sy_round_up(sy_ceil_div(g->m, threads), job.ukr.mr));
    const size_t b_bytes = (size_t)(job.kc * sy_round_up(job.nc, job.ukr.nr)) * sizeof(SY_T);
    const size_t a_bytes = (size_t)(sy_round_up(mc_cap, job.ukr.mr) * job.kc) * sizeof(SY_T);
    /* Without a workspace the buffers live for this call only, in a local one. */
    struct sy_matmul_workspace *local = NULL;
    if (!workspace && !(workspace = local = sy_matmul_workspace_new()))
        return SY_ENOMEM;
    int status = SY_ENOMEM;
    SY_T *a_bufs[SY_MAX_THREADS];
    job.a_packed = a_bufs;
    job.b_packed = sy_workspace_buffer(&workspace->b_packed, &workspace->b_bytes, b_bytes);
    if (!job.b_packed)
        goto out;
    for (int t = 0; t < threads; ++t)
        if (!(a_bufs[t] = sy_workspace_buffer(&workspace->a_packed[t], &workspace->a_bytes[t], a_bytes)))
            goto out;
    status = sy_team_run(threads, SY_FN(packed_body), &job);
out:
    sy_matmul_workspace_free(local);
    return status;
}

/* One public entry point per dtype: validate what C must not trust, then run the chosen rung. */
static int SY_FN(matmul)(int kernel, const struct SY_FN(gemm) *g, const struct sy_matmul_config *config) {
    struct sy_matmul_plan plan;
    int status = sy_matmul_plan(kernel, (int)sizeof(SY_T), config, &plan);
    if (status != SY_OK)
        return status;
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->ldc < g->n || (!g->c && g->m && g->n))
        return SY_EINVAL;
    if (g->m == 0 || g->n == 0)
        return SY_OK;
    if (kernel == SY_MATMUL_PACKED)
        return SY_FN(packed)(g, &plan, config->threads, config->workspace);
    SY_FN(zero_c)(g);
    switch (kernel) {
    case SY_MATMUL_IJK: SY_FN(loop_ijk)(g); break;
    case SY_MATMUL_IKJ: SY_FN(loop_ikj)(g); break;
    case SY_MATMUL_JIK: SY_FN(loop_jik)(g); break;
    case SY_MATMUL_JKI: SY_FN(loop_jki)(g); break;
    case SY_MATMUL_KIJ: SY_FN(loop_kij)(g); break;
    case SY_MATMUL_KJI: SY_FN(loop_kji)(g); break;
    case SY_MATMUL_TILED: SY_FN(tiled)(g, plan.tile); break;
    case SY_MATMUL_SIMD: {
        SY_FN(axpy_fn) axpy = SY_FN(axpy_scalar);
#if SY_X86
        if (plan.isa == SY_MATMUL_ISA_AVX512)
            axpy = SY_AXPY_AVX512;
        else if (plan.isa == SY_MATMUL_ISA_AVX2)
            axpy = SY_AXPY_AVX2;
#endif
        SY_T *tile_buf = NULL;
        if (g->b_cs != 1 && !(tile_buf = sy_alloc_aligned((size_t)(plan.tile * plan.tile) * sizeof(SY_T))))
            return SY_ENOMEM;
        SY_FN(simd)(g, plan.tile, axpy, tile_buf);
        free(tile_buf);
        break;
    }
    default: return SY_EINVAL;
    }
    return SY_OK;
}

#undef SY_A
#undef SY_B
#undef SY_C
#undef SY_LOCAL_OPERANDS
#undef SY_A_
#undef SY_B_
#undef SY_C_
