/* matmul.h: C = A·B for float64 and float32, from the naive triple loop to a packed, threaded kernel.
 *
 * Every kernel computes C = A·B (C is overwritten, never read first) for A (m×k) and B (k×n) given
 * by element strides, so transposed and sliced NumPy views are read in place: element (i, p) of A
 * lives at a[i*a_rs + p*a_cs]. C is written row-major with leading dimension ldc (>= n) and must not
 * overlap A or B (the kernels read the inputs through restrict pointers).
 * The Python layer (sympathy/matmul.py) validates shapes, dtypes and strides before any call.
 */
#ifndef SYMPATHY_MATMUL_H
#define SYMPATHY_MATMUL_H

#include <stdint.h>

/* CDEF BEGIN */
/* The ladder of kernels, in the order the article climbs it. */
enum sy_matmul_kernel {
    SY_MATMUL_IJK = 0,   /* naive: dot product per C element; B walked down a column (cache-hostile) */
    SY_MATMUL_IKJ = 1,   /* naive: row of B streamed into a row of C; unit stride in the inner loop */
    SY_MATMUL_JIK = 2,
    SY_MATMUL_JKI = 3,   /* naive: inner loop walks columns of A and C: the worst order row-major */
    SY_MATMUL_KIJ = 4,
    SY_MATMUL_KJI = 5,
    SY_MATMUL_TILED = 6, /* ikj in square tiles: a B tile stays in L2 while the C tile's rows pass */
    SY_MATMUL_SIMD = 7,  /* tiled, inner loop in AVX-512 / AVX2 vectors chosen at run time */
    SY_MATMUL_PACKED = 8 /* BLIS: packed panels, MR×NR register micro-kernel, MC/KC/NC blocking */
};

/* Instruction sets a kernel may use; AUTO takes the widest this CPU supports. */
enum sy_matmul_isa {
    SY_MATMUL_ISA_AUTO = 0,
    SY_MATMUL_ISA_SCALAR = 1,
    SY_MATMUL_ISA_AVX2 = 2,   /* AVX2 + FMA: 256-bit vectors */
    SY_MATMUL_ISA_AVX512 = 3  /* AVX-512F: 512-bit vectors, 32 vector registers */
};

/* Packing buffers kept between packed calls, so a call does not page-fault a fresh 8-16 MiB buffer
 * in each time (~1.5% of an n=2048 product). Opaque; one call at a time may use a workspace. */
struct sy_matmul_workspace;
struct sy_matmul_workspace *sy_matmul_workspace_new(void);
void sy_matmul_workspace_free(struct sy_matmul_workspace *workspace);

/* What a call may know about the machine and how it wants to block; zeros mean "derive it". */
struct sy_matmul_config {
    int64_t l1d_bytes;  /* per-core L1 data cache (topology().cache(1)); 0: assume 32 KiB */
    int64_t l2_bytes;   /* per-core L2; 0: assume 1 MiB */
    int64_t l3_bytes;   /* last level, shared; 0: assume 8 MiB */
    int64_t mc, kc, nc; /* packed blocking; 0: sized from the caches */
    int64_t tile;       /* tiled/simd tile edge; 0: sized from L2 */
    int isa;            /* enum sy_matmul_isa */
    int threads;        /* packed only: threads sharing the ic loop (>= 1) */
    struct sy_matmul_workspace *workspace; /* packed only: reused buffers; NULL allocates per call */
};

/* The blocking a call with this config would use (for docs, tests and the benchmark's notes). */
struct sy_matmul_plan {
    int64_t mr, nr;     /* micro-kernel tile (packed) */
    int64_t mc, kc, nc; /* cache blocks (packed) */
    int64_t tile;       /* tile edge (tiled, simd) */
    int isa;            /* the instruction set actually chosen */
};

/* SY_OK, SY_EINVAL (bad kernel, size or config), SY_ENOMEM, SY_EUNSUPPORTED (isa not available on
 * this CPU) or SY_EOS (no mutex/condition variable for the team). Threads that cannot be created
 * are done without: the team runs with the members it got, and the result is the same. */
int sy_matmul_f64(int kernel, int64_t m, int64_t n, int64_t k,
                  const double *a, int64_t a_rs, int64_t a_cs,
                  const double *b, int64_t b_rs, int64_t b_cs,
                  double *c, int64_t ldc, const struct sy_matmul_config *config);
int sy_matmul_f32(int kernel, int64_t m, int64_t n, int64_t k,
                  const float *a, int64_t a_rs, int64_t a_cs,
                  const float *b, int64_t b_rs, int64_t b_cs,
                  float *c, int64_t ldc, const struct sy_matmul_config *config);
/* Fill plan for kernel and element size (4 or 8 bytes): SY_OK, SY_EINVAL or SY_EUNSUPPORTED. */
int sy_matmul_plan(int kernel, int elem_bytes, const struct sy_matmul_config *config,
                   struct sy_matmul_plan *plan);
/* CDEF END */

#endif /* SYMPATHY_MATMUL_H */
