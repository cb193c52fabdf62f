/* matmul.c: the matrix-multiplication ladder, from loop order to a packed, vectorised, threaded kernel.
 *
 * Rungs (each its own small function, all tested against numpy.matmul at odd sizes):
 *   1. six loop orders    the inner loop's stride decides how much of each cache line is used
 *   2. tiled              a block of B that fits L2 is reused by many rows of C before eviction
 *   3. simd               the tiled inner loop in 512/256-bit vectors (AVX-512 or AVX2 at run time)
 *   4. packed             BLIS: A and B copied into panels in the order the micro-kernel reads them,
 *                         an MR×NR tile of C held in registers for a whole KC-deep panel, MC/KC/NC
 *                         blocks sized from the measured caches, the ic loop split across threads.
 * The element-type-generic code is in matmul_typed.h, included here once per dtype.
 */
#include "matmul.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "platform.h"

#if defined(__x86_64__) || defined(__i386__)
#define SY_X86 1
#include <immintrin.h>
#define SY_TARGET_AVX512 __attribute__((target("avx512f")))
#define SY_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define SY_X86 0
#endif

/* The naive loop orders must stay the loop orders they are named after: GCC's -O3 includes
 * -floop-interchange, which may legally turn ijk into ikj and erase the lesson. noinline keeps each
 * in its own frame so callgrind can attribute cost to it. */
#if defined(__GNUC__) && !defined(__clang__)
#define SY_NAIVE __attribute__((noinline, optimize("no-loop-interchange")))
#else
#define SY_NAIVE __attribute__((noinline))
#endif

/* Caches assumed when the caller knows none (a modest laptop core). */
#define SY_DEFAULT_L1D (32 << 10)
#define SY_DEFAULT_L2 (1 << 20)
#define SY_DEFAULT_L3 (8 << 20)
/* The largest blocking parameter accepted from a caller: keeps every buffer size far from overflow. */
#define SY_BLOCK_MAX (1 << 16)
#define SY_MAX_THREADS 256

/* Micro-kernel tiles. MR rows of A are broadcast, NR columns of B are whole vectors:
 *   AVX-512 (32 zmm): 14 rows × 2 vectors = 28 accumulators + 2 B vectors + 1 broadcast = 31 of 32
 *                     registers; 28 independent FMA chains cover 2 ports × 4-cycle latency 3.5 times.
 *   AVX2 (16 ymm):    6 rows × 2 vectors = 12 accumulators + 2 B + 1 broadcast = 15 of 16.
 *   reference:        4×8 in plain C, small enough for any register file. */
#define SY_DGEMM_AVX512_MR 14
#define SY_DGEMM_AVX512_NR 16
#define SY_SGEMM_AVX512_MR 14
#define SY_SGEMM_AVX512_NR 32
#define SY_AVX2_MR 6
#define SY_DGEMM_AVX2_NR 8
#define SY_SGEMM_AVX2_NR 16
#define SY_REF_MR 4
#define SY_REF_NR 8
#define SY_MAX_MR 14
#define SY_MAX_NR 32
_Static_assert(SY_DGEMM_AVX512_MR <= SY_MAX_MR && SY_SGEMM_AVX512_MR <= SY_MAX_MR, "MR bound");
_Static_assert(SY_AVX2_MR <= SY_MAX_MR && SY_REF_MR <= SY_MAX_MR, "MR bound");
_Static_assert(SY_DGEMM_AVX512_NR <= SY_MAX_NR && SY_SGEMM_AVX512_NR <= SY_MAX_NR, "NR bound");
_Static_assert(SY_SGEMM_AVX2_NR <= SY_MAX_NR && SY_REF_NR <= SY_MAX_NR, "NR bound");

/* How far ahead (in k steps) the micro-kernel prefetches its A and B micro-panels, which both stream
 * from L2 at KC=512 (see sy_blocking). One k step is ~14 cycles (28 FMAs on 2 ports); L2 latency
 * alone would need 2 steps, but the requests queue behind each other. Measured on Sapphire Rapids,
 * float64 n=2048: A only, 8 steps 0.88× OpenBLAS, 32 steps 0.91×; A and B at 32 steps 0.96×. */
#define SY_PREFETCH_K 32

static inline int64_t sy_min64(int64_t x, int64_t y) { return x < y ? x : y; }
static inline int64_t sy_max64(int64_t x, int64_t y) { return x > y ? x : y; }
static inline int64_t sy_ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }
static inline int64_t sy_round_up(int64_t x, int64_t y) { return sy_ceil_div(x, y) * y; }
static inline int64_t sy_round_down(int64_t x, int64_t y) { return x / y * y; }

/* Packed panels start on a cache line: one zmm load never straddles two lines. Buffers of 2 MiB
 * and more are 2 MiB-aligned and offered to the kernel as transparent huge pages: the micro-kernel
 * walks the whole packed block of B, and one TLB entry then covers 2 MiB of it instead of 4 KiB. */
#define SY_HUGE_PAGE (2 << 20)
static void *sy_alloc_aligned(size_t bytes) {
    bytes = bytes ? bytes : 1;
    if (bytes < SY_HUGE_PAGE)
        return aligned_alloc(SY_CACHE_LINE, (size_t)sy_round_up((int64_t)bytes, SY_CACHE_LINE));
    bytes = (size_t)sy_round_up((int64_t)bytes, SY_HUGE_PAGE);
    void *buffer = aligned_alloc(SY_HUGE_PAGE, bytes);
#ifdef MADV_HUGEPAGE
    if (buffer)
        madvise(buffer, bytes, MADV_HUGEPAGE); /* a hint: without THP the buffer simply stays 4 KiB */
#endif
    return buffer;
}

/* ---- workspace -------------------------------------------------------------------------------
 * The packed kernel's buffers, grown on demand and kept for the next call. Without it every call
 * maps, faults in and zeroes its B block buffer afresh (glibc returns such large blocks to the OS). */
struct sy_matmul_workspace {
    void *b_packed;
    size_t b_bytes;
    void *a_packed[SY_MAX_THREADS]; /* one per team member: each thread packs its own A blocks */
    size_t a_bytes[SY_MAX_THREADS];
};

struct sy_matmul_workspace *sy_matmul_workspace_new(void) {
    return calloc(1, sizeof(struct sy_matmul_workspace));
}

void sy_matmul_workspace_free(struct sy_matmul_workspace *workspace) {
    if (!workspace)
        return;
    free(workspace->b_packed);
    for (int t = 0; t < SY_MAX_THREADS; ++t)
        free(workspace->a_packed[t]);
    free(workspace);
}

/* A buffer of at least `bytes` in *slot (capacity *capacity), reallocated only when it must grow. */
static void *sy_workspace_buffer(void **slot, size_t *capacity, size_t bytes) {
    if (*slot && *capacity >= bytes)
        return *slot;
    free(*slot);
    *slot = sy_alloc_aligned(bytes);
    *capacity = *slot ? bytes : 0;
    return *slot;
}

/* ---- threads ---------------------------------------------------------------------------------
 * A team lives for one call: the caller is member 0, the others are created here and joined before
 * the call returns. Members start only once the team size is final (creation may fail part-way;
 * the team then runs with the members it got), so the barrier count is always right. */
typedef void (*sy_team_body)(void *job, int id, int nthreads, pthread_barrier_t *barrier);

struct sy_team {
    pthread_mutex_t lock;
    pthread_cond_t start;
    int go;                    /* under lock: nthreads and barrier are final */
    int nthreads;
    pthread_barrier_t barrier; /* the members' rendezvous around each shared packed B block */
    sy_team_body body;
    void *job;
};

struct sy_team_member {
    struct sy_team *team;
    int id;
};

/* Named sy_matmul_* so `callgrind --toggle-collect=sy_matmul*` counts the workers' costs too. */
__attribute__((noinline)) static void *sy_matmul_worker(void *arg) {
    const struct sy_team_member *me = arg;
    struct sy_team *team = me->team;
    pthread_mutex_lock(&team->lock);
    while (!team->go)
        pthread_cond_wait(&team->start, &team->lock);
    pthread_mutex_unlock(&team->lock);
    if (me->id < team->nthreads)
        team->body(team->job, me->id, team->nthreads, &team->barrier);
    return NULL;
}

static int sy_team_run(int threads, sy_team_body body, void *job) {
    if (threads <= 1) {
        body(job, 0, 1, NULL);
        return SY_OK;
    }
    struct sy_team team = {.body = body, .job = job};
    pthread_t workers[SY_MAX_THREADS];
    struct sy_team_member members[SY_MAX_THREADS];
    if (pthread_mutex_init(&team.lock, NULL) != 0)
        return SY_EOS;
    if (pthread_cond_init(&team.start, NULL) != 0) {
        pthread_mutex_destroy(&team.lock);
        return SY_EOS;
    }
    int created = 0;
    while (created + 1 < threads) {
        members[created + 1] = (struct sy_team_member){&team, created + 1};
        if (pthread_create(&workers[created + 1], NULL, sy_matmul_worker, &members[created + 1]) != 0)
            break;
        ++created;
    }
    int nthreads = created + 1;
    if (nthreads > 1 && pthread_barrier_init(&team.barrier, NULL, (unsigned)nthreads) != 0)
        nthreads = 1; /* the workers see they are surplus and return */
    pthread_mutex_lock(&team.lock);
    team.nthreads = nthreads;
    team.go = 1;
    pthread_cond_broadcast(&team.start);
    pthread_mutex_unlock(&team.lock);
    body(job, 0, nthreads, &team.barrier);
    for (int t = 1; t <= created; ++t)
        pthread_join(workers[t], NULL);
    if (nthreads > 1)
        pthread_barrier_destroy(&team.barrier);
    pthread_cond_destroy(&team.start);
    pthread_mutex_destroy(&team.lock);
    return SY_OK;
}

/* ---- the plan: instruction set and blocking -------------------------------------------------- */
static int sy_choose_isa(int requested, int *isa) {
    int have_avx512 = 0, have_avx2 = 0;
#if SY_X86
    have_avx512 = __builtin_cpu_supports("avx512f");
    have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    switch (requested) {
    case SY_MATMUL_ISA_AUTO:
        *isa = have_avx512 ? SY_MATMUL_ISA_AVX512 : have_avx2 ? SY_MATMUL_ISA_AVX2 : SY_MATMUL_ISA_SCALAR;
        return SY_OK;
    case SY_MATMUL_ISA_SCALAR: *isa = requested; return SY_OK;
    case SY_MATMUL_ISA_AVX2: *isa = requested; return have_avx2 ? SY_OK : SY_EUNSUPPORTED;
    case SY_MATMUL_ISA_AVX512: *isa = requested; return have_avx512 ? SY_OK : SY_EUNSUPPORTED;
    default: return SY_EINVAL;
    }
}

static void sy_tile_of(int isa, int elem_bytes, int64_t *mr, int64_t *nr) {
    const int f64 = elem_bytes == 8;
    switch (isa) {
    case SY_MATMUL_ISA_AVX512:
        *mr = f64 ? SY_DGEMM_AVX512_MR : SY_SGEMM_AVX512_MR;
        *nr = f64 ? SY_DGEMM_AVX512_NR : SY_SGEMM_AVX512_NR;
        break;
    case SY_MATMUL_ISA_AVX2: *mr = SY_AVX2_MR; *nr = f64 ? SY_DGEMM_AVX2_NR : SY_SGEMM_AVX2_NR; break;
    default: *mr = SY_REF_MR; *nr = SY_REF_NR; break;
    }
}

/* Blocking from the caches, after BLIS's analytical model (Low et al., 2016), tuned by measurement:
 *   KC: each micro-kernel call loads and stores its C tile once per KC rank-1 updates, so KC should
 *       be long. The textbook bound keeps the KC×NR micro-panel of B in half of L1 (KC=192 on a
 *       48 KiB L1); with both panels prefetched SY_PREFETCH_K steps ahead, the B panel streams from
 *       L2 at no visible cost and a longer KC wins. Measured on Sapphire Rapids, float64 n=2048,
 *       against OpenBLAS (best of 10, machine shared): KC/MC = 192/672 0.80×, 384/168 0.94×,
 *       512/126 0.93×. 384 and 512 tie within the noise; 4/3 of L1 (512) is kept.
 *   MC: the MC×KC block of A is reused for every NR panel of B: a quarter of L2, leaving the rest to
 *       the B micro-panels passing through and to C (half of L2 measured no better).
 *   NC: the KC×NC block of B is reused for every MC block: a quarter of the shared L3, capped so
 *       the packing buffer stays modest (the L3 here is 260 MiB and shared with the other cores). */
static void sy_blocking(const struct sy_matmul_config *cfg, int elem_bytes, struct sy_matmul_plan *plan) {
    const int64_t l1 = cfg->l1d_bytes > 0 ? cfg->l1d_bytes : SY_DEFAULT_L1D;
    const int64_t l2 = cfg->l2_bytes > 0 ? cfg->l2_bytes : SY_DEFAULT_L2;
    const int64_t l3 = cfg->l3_bytes > 0 ? cfg->l3_bytes : SY_DEFAULT_L3;
    const int64_t kc = cfg->kc > 0 ? cfg->kc
                                   : sy_max64(64, sy_round_down(4 * l1 / 3 / (plan->nr * elem_bytes), 64));
    plan->kc = sy_min64(kc, SY_BLOCK_MAX);
    const int64_t mc = l2 / 4 / (plan->kc * elem_bytes);
    plan->mc = cfg->mc > 0 ? sy_round_up(cfg->mc, plan->mr)
                           : sy_max64(plan->mr, sy_round_down(sy_min64(mc, SY_BLOCK_MAX), plan->mr));
    plan->nc = cfg->nc > 0 ? sy_round_up(cfg->nc, plan->nr)
                           : sy_max64(plan->nr, sy_round_down(sy_min64(l3 / 4 / (plan->kc * elem_bytes), 4096),
                                                              plan->nr));
    /* tiled/simd: the tile×tile block of B in half of L2, reused by every row of the C tile, while
     * the tile-long row of C it updates sits in L1 (360 doubles = 2.8 KiB for a 2 MiB L2). */
    const int64_t tile = (int64_t)sqrt((double)(l2 / 2 / elem_bytes));
    plan->tile = cfg->tile > 0 ? cfg->tile : sy_max64(8, sy_round_down(sy_min64(tile, SY_BLOCK_MAX), 8));
}

int sy_matmul_plan(int kernel, int elem_bytes, const struct sy_matmul_config *config,
                   struct sy_matmul_plan *plan) {
    if (!config || !plan || kernel < SY_MATMUL_IJK || kernel > SY_MATMUL_PACKED)
        return SY_EINVAL;
    if (elem_bytes != 4 && elem_bytes != 8)
        return SY_EINVAL;
    if (config->threads < 1 || config->threads > SY_MAX_THREADS)
        return SY_EINVAL;
    const int64_t fields[] = {config->l1d_bytes, config->l2_bytes, config->l3_bytes, config->mc,
                              config->kc, config->nc, config->tile};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i)
        if (fields[i] < 0)
            return SY_EINVAL;
    if (config->mc > SY_BLOCK_MAX || config->kc > SY_BLOCK_MAX || config->nc > SY_BLOCK_MAX ||
        config->tile > SY_BLOCK_MAX)
        return SY_EINVAL;
    int status = sy_choose_isa(config->isa, &plan->isa);
    if (status != SY_OK)
        return status;
    sy_tile_of(plan->isa, elem_bytes, &plan->mr, &plan->nr);
    sy_blocking(config, elem_bytes, plan);
    return SY_OK;
}

/* ---- SIMD routines ---------------------------------------------------------------------------
 * Micro-kernels follow the assumptions block in matmul_typed.h: a = MR-row micro-panel (MR values
 * per k step), b = NR-column micro-panel (NR values per k step), C tile row r at c + r*ldc.
 * Each k step is one rank-1 update: every A value broadcast against the NR-wide B row. */
#if SY_X86
/* The C tile is read (and written) only after the whole KC loop: asking for its lines now lets the
 * hundreds of cycles of that loop hide their L3/DRAM latency. A row may straddle one extra line. */
static inline void sy_prefetch_c_row(const void *row, size_t bytes) {
    const char *p = row;
    for (size_t off = 0; off < bytes; off += SY_CACHE_LINE)
        _mm_prefetch(p + off, _MM_HINT_T0);
    _mm_prefetch(p + bytes - 1, _MM_HINT_T0);
}

/* Hardware fact: two 512-bit FMA ports; 28 accumulators hide their 4-cycle latency. */
SY_TARGET_AVX512 static void dgemm_avx512_14x16(int64_t kc, const double *restrict a, const double *restrict b,
                                                double *restrict c, int64_t ldc, int accumulate) {
    __m512d acc[SY_DGEMM_AVX512_MR][2];
#pragma GCC unroll 14
    for (int r = 0; r < SY_DGEMM_AVX512_MR; ++r) {
        acc[r][0] = acc[r][1] = _mm512_setzero_pd();
        sy_prefetch_c_row(c + r * ldc, SY_DGEMM_AVX512_NR * sizeof(double));
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; ++p) {
        const __m512d b0 = _mm512_loadu_pd(b), b1 = _mm512_loadu_pd(b + 8);
        _mm_prefetch((const char *)(a + SY_PREFETCH_K * SY_DGEMM_AVX512_MR), _MM_HINT_T0);
        _mm_prefetch((const char *)(a + SY_PREFETCH_K * SY_DGEMM_AVX512_MR + 8), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + SY_PREFETCH_K * SY_DGEMM_AVX512_NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + SY_PREFETCH_K * SY_DGEMM_AVX512_NR + 8), _MM_HINT_T0);
#pragma GCC unroll 14
        for (int r = 0; r < SY_DGEMM_AVX512_MR; ++r) {
            const __m512d a_r = _mm512_set1_pd(a[r]);
            acc[r][0] = _mm512_fmadd_pd(a_r, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_pd(a_r, b1, acc[r][1]);
        }
        a += SY_DGEMM_AVX512_MR;
        b += SY_DGEMM_AVX512_NR;
    }
#pragma GCC unroll 14
    for (int r = 0; r < SY_DGEMM_AVX512_MR; ++r) {
        double *row = c + r * ldc;
        if (accumulate) {
            acc[r][0] = _mm512_add_pd(acc[r][0], _mm512_loadu_pd(row));
            acc[r][1] = _mm512_add_pd(acc[r][1], _mm512_loadu_pd(row + 8));
        }
        _mm512_storeu_pd(row, acc[r][0]);
        _mm512_storeu_pd(row + 8, acc[r][1]);
    }
}

/* Same shape in float32: a zmm holds 16 lanes, so NR doubles to 32 at the same register cost. */
SY_TARGET_AVX512 static void sgemm_avx512_14x32(int64_t kc, const float *restrict a, const float *restrict b,
                                                float *restrict c, int64_t ldc, int accumulate) {
    __m512 acc[SY_SGEMM_AVX512_MR][2];
#pragma GCC unroll 14
    for (int r = 0; r < SY_SGEMM_AVX512_MR; ++r) {
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        sy_prefetch_c_row(c + r * ldc, SY_SGEMM_AVX512_NR * sizeof(float));
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; ++p) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        _mm_prefetch((const char *)(a + SY_PREFETCH_K * SY_SGEMM_AVX512_MR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + SY_PREFETCH_K * SY_SGEMM_AVX512_NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + SY_PREFETCH_K * SY_SGEMM_AVX512_NR + 16), _MM_HINT_T0);
#pragma GCC unroll 14
        for (int r = 0; r < SY_SGEMM_AVX512_MR; ++r) {
            const __m512 a_r = _mm512_set1_ps(a[r]);
            acc[r][0] = _mm512_fmadd_ps(a_r, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a_r, b1, acc[r][1]);
        }
        a += SY_SGEMM_AVX512_MR;
        b += SY_SGEMM_AVX512_NR;
    }
#pragma GCC unroll 14
    for (int r = 0; r < SY_SGEMM_AVX512_MR; ++r) {
        float *row = c + r * ldc;
        if (accumulate) {
            acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_loadu_ps(row));
            acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_loadu_ps(row + 16));
        }
        _mm512_storeu_ps(row, acc[r][0]);
        _mm512_storeu_ps(row + 16, acc[r][1]);
    }
}

/* Hardware fact: 16 ymm registers; 12 accumulators leave room for B and one broadcast. */
SY_TARGET_AVX2 static void dgemm_avx2_6x8(int64_t kc, const double *restrict a, const double *restrict b,
                                          double *restrict c, int64_t ldc, int accumulate) {
    __m256d acc[SY_AVX2_MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < SY_AVX2_MR; ++r)
        acc[r][0] = acc[r][1] = _mm256_setzero_pd();
    for (int64_t p = 0; p < kc; ++p) {
        const __m256d b0 = _mm256_loadu_pd(b), b1 = _mm256_loadu_pd(b + 4);
#pragma GCC unroll 6
        for (int r = 0; r < SY_AVX2_MR; ++r) {
            const __m256d a_r = _mm256_broadcast_sd(a + r);
            acc[r][0] = _mm256_fmadd_pd(a_r, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_pd(a_r, b1, acc[r][1]);
        }
        a += SY_AVX2_MR;
        b += SY_DGEMM_AVX2_NR;
    }
#pragma GCC unroll 6
    for (int r = 0; r < SY_AVX2_MR; ++r) {
        double *row = c + r * ldc;
        if (accumulate) {
            acc[r][0] = _mm256_add_pd(acc[r][0], _mm256_loadu_pd(row));
            acc[r][1] = _mm256_add_pd(acc[r][1], _mm256_loadu_pd(row + 4));
        }
        _mm256_storeu_pd(row, acc[r][0]);
        _mm256_storeu_pd(row + 4, acc[r][1]);
    }
}

SY_TARGET_AVX2 static void sgemm_avx2_6x16(int64_t kc, const float *restrict a, const float *restrict b,
                                           float *restrict c, int64_t ldc, int accumulate) {
    __m256 acc[SY_AVX2_MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < SY_AVX2_MR; ++r)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < kc; ++p) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
        for (int r = 0; r < SY_AVX2_MR; ++r) {
            const __m256 a_r = _mm256_broadcast_ss(a + r);
            acc[r][0] = _mm256_fmadd_ps(a_r, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a_r, b1, acc[r][1]);
        }
        a += SY_AVX2_MR;
        b += SY_SGEMM_AVX2_NR;
    }
#pragma GCC unroll 6
    for (int r = 0; r < SY_AVX2_MR; ++r) {
        float *row = c + r * ldc;
        if (accumulate) {
            acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(row));
            acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(row + 8));
        }
        _mm256_storeu_ps(row, acc[r][0]);
        _mm256_storeu_ps(row + 8, acc[r][1]);
    }
}

/* The simd rung's inner loop, y += alpha·x: AVX-512 finishes the row with one masked vector. */
SY_TARGET_AVX512 static void daxpy_avx512(int64_t n, double alpha, const double *restrict x, double *restrict y) {
    const __m512d va = _mm512_set1_pd(alpha);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm512_storeu_pd(y + j, _mm512_fmadd_pd(va, _mm512_loadu_pd(x + j), _mm512_loadu_pd(y + j)));
    if (j < n) {
        const __mmask8 tail = (__mmask8)((1u << (n - j)) - 1);
        const __m512d sum = _mm512_fmadd_pd(va, _mm512_maskz_loadu_pd(tail, x + j), _mm512_maskz_loadu_pd(tail, y + j));
        _mm512_mask_storeu_pd(y + j, tail, sum);
    }
}

SY_TARGET_AVX512 static void saxpy_avx512(int64_t n, float alpha, const float *restrict x, float *restrict y) {
    const __m512 va = _mm512_set1_ps(alpha);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(y + j, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + j), _mm512_loadu_ps(y + j)));
    if (j < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - j)) - 1);
        const __m512 sum = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(tail, x + j), _mm512_maskz_loadu_ps(tail, y + j));
        _mm512_mask_storeu_ps(y + j, tail, sum);
    }
}

SY_TARGET_AVX2 static void daxpy_avx2(int64_t n, double alpha, const double *restrict x, double *restrict y) {
    const __m256d va = _mm256_set1_pd(alpha);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
        _mm256_storeu_pd(y + j, _mm256_fmadd_pd(va, _mm256_loadu_pd(x + j), _mm256_loadu_pd(y + j)));
    for (; j < n; ++j)
        y[j] += alpha * x[j];
}

SY_TARGET_AVX2 static void saxpy_avx2(int64_t n, float alpha, const float *restrict x, float *restrict y) {
    const __m256 va = _mm256_set1_ps(alpha);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(y + j, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j)));
    for (; j < n; ++j)
        y[j] += alpha * x[j];
}
#endif /* SY_X86 */

/* ---- the typed half, once per dtype ---------------------------------------------------------- */
#define SY_CAT_(x, y) x##y
#define SY_CAT(x, y) SY_CAT_(x, y)

#define SY_T double
#define SY_FN(name) SY_CAT(name, _f64)
#define SY_UKR_REF dgemm_ref_4x8
#define SY_UKR_AVX512 dgemm_avx512_14x16
#define SY_UKR_AVX2 dgemm_avx2_6x8
#define SY_AXPY_AVX512 daxpy_avx512
#define SY_AXPY_AVX2 daxpy_avx2
#define SY_AVX512_MR SY_DGEMM_AVX512_MR
#define SY_AVX512_NR SY_DGEMM_AVX512_NR
#define SY_AVX2_NR SY_DGEMM_AVX2_NR
#include "matmul_typed.h"
#undef SY_T
#undef SY_FN
#undef SY_UKR_REF
#undef SY_UKR_AVX512
#undef SY_UKR_AVX2
#undef SY_AXPY_AVX512
#undef SY_AXPY_AVX2
#undef SY_AVX512_NR
#undef SY_AVX512_MR
#undef SY_AVX2_NR

#define SY_T float
#define SY_FN(name) SY_CAT(name, _f32)
#define SY_UKR_REF sgemm_ref_4x8
#define SY_UKR_AVX512 sgemm_avx512_14x32
#define SY_UKR_AVX2 sgemm_avx2_6x16
#define SY_AXPY_AVX512 saxpy_avx512
#define SY_AXPY_AVX2 saxpy_avx2
#define SY_AVX512_MR SY_SGEMM_AVX512_MR
#define SY_AVX512_NR SY_SGEMM_AVX512_NR
#define SY_AVX2_NR SY_SGEMM_AVX2_NR
#include "matmul_typed.h"

/* ---- public entry points --------------------------------------------------------------------- */
int sy_matmul_f64(int kernel, int64_t m, int64_t n, int64_t k,
                  const double *a, int64_t a_rs, int64_t a_cs,
                  const double *b, int64_t b_rs, int64_t b_cs,
                  double *c, int64_t ldc, const struct sy_matmul_config *config) {
    const struct gemm_f64 g = {m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc};
    return matmul_f64(kernel, &g, config);
}

int sy_matmul_f32(int kernel, int64_t m, int64_t n, int64_t k,
                  const float *a, int64_t a_rs, int64_t a_cs,
                  const float *b, int64_t b_rs, int64_t b_cs,
                  float *c, int64_t ldc, const struct sy_matmul_config *config) {
    const struct gemm_f32 g = {m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc};
    return matmul_f32(kernel, &g, config);
}
