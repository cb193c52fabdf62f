/* attention_simd.c: the inner kernels of the CPU attention (attention.c) for one instruction set each:
 * scalar (the reference, and the fallback on any CPU), AVX2 + FMA and AVX-512F, chosen at run time.
 *
 * Hardware fact exploited: with queries along the SIMD lanes (the transposed layout attention.c packs),
 * the online softmax of one panel is plain lane-wise vector work with no horizontal reduction, and a
 * key's value is one broadcast; exp2 is a polynomial plus an exponent-field shift (AVX2) or scalef
 * (AVX-512), never a libm call. Each set is compiled with a target attribute, so one build of the
 * package runs on any x86-64 (and on Arm through the scalar kernels).
 *
 * The packed-layout contract these kernels assume is written once, at the top of attention.c.
 */
#include "attention_kernels.h"

#include <math.h>
#include <string.h>

#include "platform.h"   /* SY_EUNSUPPORTED */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SY_ATTN_X86 1
#else
#define SY_ATTN_X86 0
#endif

/* 2^f = e^(f·ln2) on f in [-0.5, 0.5]: Taylor coefficients ln2^k / k!, k = 0..7. The first term
 * left out, ln2^8/8!·0.5^8, is 5e-9: below float32 rounding, so exp2 is exact to ~1 ulp. */
#define EXP2_C0 1.0f
#define EXP2_C1 0.69314718055994531f
#define EXP2_C2 0.24022650695910071f
#define EXP2_C3 0.05550410866482158f
#define EXP2_C4 0.00961812910762848f
#define EXP2_C5 0.00133335581464284f
#define EXP2_C6 0.00015403530393381609f
#define EXP2_C7 0.00001525273380405984f

/* ---- scalar: the reference kernels, and the fallback on any CPU --------------------------------- */

static void scores_scalar(const float *qT, int64_t d, const float *k, int64_t ks, int64_t n_keys, float *sT) {
    const int P = SY_ATTN_SCALAR_PANEL;
    for (int64_t r = 0; r < n_keys; r++) {
        float row[SY_ATTN_SCALAR_PANEL] = {0};
        const float *kr = k + r * ks;
        for (int64_t kk = 0; kk < d; kk++)
            for (int c = 0; c < P; c++) row[c] += kr[kk] * qT[kk * P + c];
        memcpy(sT + r * P, row, sizeof row);
    }
}

/* The -inf guard, shared by every instruction set: a lane that has seen only masked keys has
 * m_new = -inf, and s - m_new would be -inf - -inf = NaN. Measuring against 0 instead makes
 * p = exp2(-inf) = 0 and alpha = 0, so the lane keeps l_i = 0 and acc = 0 until a real key comes,
 * and finalize writes zeros if none ever does. */
static inline float guarded(float m_new) { return m_new == -INFINITY ? 0.0f : m_new; }

static void rescale_scalar(float *sT, int64_t n_keys, float *m_i, float *l_i, float *alpha) {
    const int P = SY_ATTN_SCALAR_PANEL;
    for (int c = 0; c < P; c++) {
        float m_new = m_i[c];
        for (int64_t r = 0; r < n_keys; r++) m_new = fmaxf(m_new, sT[r * P + c]);
        const float m_ref = guarded(m_new);
        const float a = exp2f(m_i[c] - m_ref);
        float l = l_i[c] * a;
        for (int64_t r = 0; r < n_keys; r++) {
            const float p = exp2f(sT[r * P + c] - m_ref);
            sT[r * P + c] = p;
            l += p;
        }
        m_i[c] = m_new;
        l_i[c] = l;
        alpha[c] = a;
    }
}

static void accumulate_scalar(const float *pT, const float *v, int64_t vs, int64_t n_keys, int64_t dv,
                              const float *alpha, float *accT) {
    const int P = SY_ATTN_SCALAR_PANEL;
    for (int64_t col = 0; col < dv; col++) {
        float acc[SY_ATTN_SCALAR_PANEL];
        for (int c = 0; c < P; c++) acc[c] = accT[col * P + c] * alpha[c];
        for (int64_t j = 0; j < n_keys; j++) {
            const float vj = v[j * vs + col];
            for (int c = 0; c < P; c++) acc[c] += vj * pT[j * P + c];
        }
        memcpy(accT + col * P, acc, sizeof acc);
    }
}

static const struct attn_kernels KERNELS_SCALAR = {
    "scalar", SY_ATTN_SCALAR_PANEL, 1, scores_scalar, rescale_scalar, accumulate_scalar,
};

#if SY_ATTN_X86
/* ---- AVX2 + FMA: 8 lanes, a panel row is two ymm --------------------------------------------------- */

#define AVX2 __attribute__((target("avx2,fma")))

/* exp2 for x <= 0 (and NaN): split x = n + f with |f| <= 0.5, 2^f by polynomial, 2^n built in the
 * exponent bits. Below -126 the exponent field cannot hold n, so those lanes (masked -inf among
 * them) are set to 0 instead: they are under 2^-126 of the row maximum and vanish in the sum. */
AVX2 static inline __m256 exp2_avx2(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-126.0f);
    const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);   /* false for NaN: NaN propagates */
    const __m256 xc = _mm256_max_ps(lo, x);                        /* second operand wins on NaN */
    const __m256 n = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(xc, n);
    __m256 p = _mm256_set1_ps(EXP2_C7);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(EXP2_C6));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(EXP2_C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(EXP2_C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(EXP2_C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(EXP2_C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(EXP2_C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(EXP2_C0));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

AVX2 static void scores_avx2(const float *qT, int64_t d, const float *k, int64_t ks, int64_t n_keys, float *sT) {
    enum { KEYS = SY_ATTN_AVX2_KEYS, P = SY_ATTN_AVX2_PANEL };
    for (int64_t r0 = 0; r0 < n_keys; r0 += KEYS) {
        /* A short last tile re-reads the last key: its extra rows land in sT padding. */
        const float *kr[KEYS];
        for (int t = 0; t < KEYS; t++) kr[t] = k + min_i64(r0 + t, n_keys - 1) * ks;
        __m256 acc[KEYS][2];
        for (int t = 0; t < KEYS; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
        for (int64_t kk = 0; kk < d; kk++) {
            const __m256 q0 = _mm256_load_ps(qT + kk * P), q1 = _mm256_load_ps(qT + kk * P + 8);
#pragma GCC unroll 8
            for (int t = 0; t < KEYS; t++) {
                const __m256 kb = _mm256_broadcast_ss(kr[t] + kk);
                acc[t][0] = _mm256_fmadd_ps(kb, q0, acc[t][0]);
                acc[t][1] = _mm256_fmadd_ps(kb, q1, acc[t][1]);
            }
        }
        for (int t = 0; t < KEYS; t++) {
            _mm256_store_ps(sT + (r0 + t) * P, acc[t][0]);
            _mm256_store_ps(sT + (r0 + t) * P + 8, acc[t][1]);
        }
    }
}

AVX2 static void rescale_avx2(float *sT, int64_t n_keys, float *m_i, float *l_i, float *alpha) {
    enum { P = SY_ATTN_AVX2_PANEL };
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    for (int h = 0; h < P; h += 8) {
        const __m256 m_old = _mm256_load_ps(m_i + h);
        __m256 m_new = m_old;
        for (int64_t r = 0; r < n_keys; r++) m_new = _mm256_max_ps(_mm256_load_ps(sT + r * P + h), m_new);
        const __m256 m_ref = _mm256_blendv_ps(m_new, _mm256_setzero_ps(),            /* -inf guard */
                                              _mm256_cmp_ps(m_new, neg_inf, _CMP_EQ_OQ));
        const __m256 a = exp2_avx2(_mm256_sub_ps(m_old, m_ref));
        __m256 l = _mm256_mul_ps(_mm256_load_ps(l_i + h), a);
        for (int64_t r = 0; r < n_keys; r++) {
            const __m256 p = exp2_avx2(_mm256_sub_ps(_mm256_load_ps(sT + r * P + h), m_ref));
            _mm256_store_ps(sT + r * P + h, p);
            l = _mm256_add_ps(l, p);
        }
        _mm256_store_ps(m_i + h, m_new);
        _mm256_store_ps(l_i + h, l);
        _mm256_store_ps(alpha + h, a);
    }
}

AVX2 static void accumulate_avx2(const float *pT, const float *v, int64_t vs, int64_t n_keys, int64_t dv,
                                 const float *alpha, float *accT) {
    enum { COLS = SY_ATTN_AVX2_VCOLS, P = SY_ATTN_AVX2_PANEL };
    const __m256 a0 = _mm256_load_ps(alpha), a1 = _mm256_load_ps(alpha + 8);
    int64_t col = 0;
    for (; col + COLS <= dv; col += COLS) {
        __m256 acc[COLS][2];
        for (int t = 0; t < COLS; t++) {
            acc[t][0] = _mm256_mul_ps(_mm256_load_ps(accT + (col + t) * P), a0);
            acc[t][1] = _mm256_mul_ps(_mm256_load_ps(accT + (col + t) * P + 8), a1);
        }
        for (int64_t j = 0; j < n_keys; j++) {
            const __m256 p0 = _mm256_load_ps(pT + j * P), p1 = _mm256_load_ps(pT + j * P + 8);
            const float *vj = v + j * vs + col;
#pragma GCC unroll 8
            for (int t = 0; t < COLS; t++) {
                const __m256 vb = _mm256_broadcast_ss(vj + t);
                acc[t][0] = _mm256_fmadd_ps(vb, p0, acc[t][0]);
                acc[t][1] = _mm256_fmadd_ps(vb, p1, acc[t][1]);
            }
        }
        for (int t = 0; t < COLS; t++) {
            _mm256_store_ps(accT + (col + t) * P, acc[t][0]);
            _mm256_store_ps(accT + (col + t) * P + 8, acc[t][1]);
        }
    }
    for (; col < dv; col++) {   /* dv not a multiple of COLS: one value column at a time */
        __m256 c0 = _mm256_mul_ps(_mm256_load_ps(accT + col * P), a0);
        __m256 c1 = _mm256_mul_ps(_mm256_load_ps(accT + col * P + 8), a1);
        for (int64_t j = 0; j < n_keys; j++) {
            const __m256 vb = _mm256_broadcast_ss(v + j * vs + col);
            c0 = _mm256_fmadd_ps(vb, _mm256_load_ps(pT + j * P), c0);
            c1 = _mm256_fmadd_ps(vb, _mm256_load_ps(pT + j * P + 8), c1);
        }
        _mm256_store_ps(accT + col * P, c0);
        _mm256_store_ps(accT + col * P + 8, c1);
    }
}

static const struct attn_kernels KERNELS_AVX2 = {
    "avx2", SY_ATTN_AVX2_PANEL, SY_ATTN_AVX2_KEYS, scores_avx2, rescale_avx2, accumulate_avx2,
};

/* ---- AVX-512F: 16 lanes, a panel row is two zmm ------------------------------------------------------ */

#define AVX512 __attribute__((target("avx512f")))

/* exp2 for x <= 0 (and NaN): 2^f by polynomial, times 2^n with scalef, which flushes x <= -150
 * (masked -inf clamps there) to exactly 0 and needs no exponent-field arithmetic. */
AVX512 static inline __m512 exp2_avx512(__m512 x) {
    const __m512 xc = _mm512_max_ps(_mm512_set1_ps(-150.0f), x);   /* second operand wins on NaN */
    const __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(xc, n);
    __m512 p = _mm512_set1_ps(EXP2_C7);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C6));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C0));
    return _mm512_scalef_ps(p, n);
}

AVX512 static void scores_avx512(const float *qT, int64_t d, const float *k, int64_t ks, int64_t n_keys,
                                 float *sT) {
    enum { KEYS = SY_ATTN_AVX512_KEYS, P = SY_ATTN_AVX512_PANEL };
    for (int64_t r0 = 0; r0 < n_keys; r0 += KEYS) {
        const float *kr[KEYS];   /* a short last tile re-reads the last key into sT padding */
        for (int t = 0; t < KEYS; t++) kr[t] = k + min_i64(r0 + t, n_keys - 1) * ks;
        __m512 acc[KEYS][2];
        for (int t = 0; t < KEYS; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
        for (int64_t kk = 0; kk < d; kk++) {
            const __m512 q0 = _mm512_load_ps(qT + kk * P), q1 = _mm512_load_ps(qT + kk * P + 16);
#pragma GCC unroll 8
            for (int t = 0; t < KEYS; t++) {
                const __m512 kb = _mm512_set1_ps(kr[t][kk]);
                acc[t][0] = _mm512_fmadd_ps(kb, q0, acc[t][0]);
                acc[t][1] = _mm512_fmadd_ps(kb, q1, acc[t][1]);
            }
        }
        for (int t = 0; t < KEYS; t++) {
            _mm512_store_ps(sT + (r0 + t) * P, acc[t][0]);
            _mm512_store_ps(sT + (r0 + t) * P + 16, acc[t][1]);
        }
    }
}

AVX512 static void rescale_avx512(float *sT, int64_t n_keys, float *m_i, float *l_i, float *alpha) {
    enum { P = SY_ATTN_AVX512_PANEL };
    for (int h = 0; h < P; h += 16) {
        const __m512 m_old = _mm512_load_ps(m_i + h);
        __m512 m_new = m_old;
        for (int64_t r = 0; r < n_keys; r++) m_new = _mm512_max_ps(_mm512_load_ps(sT + r * P + h), m_new);
        const __mmask16 all_masked = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
        const __m512 m_ref = _mm512_mask_mov_ps(m_new, all_masked, _mm512_setzero_ps());  /* -inf guard */
        const __m512 a = exp2_avx512(_mm512_sub_ps(m_old, m_ref));
        __m512 l = _mm512_mul_ps(_mm512_load_ps(l_i + h), a);
        for (int64_t r = 0; r < n_keys; r++) {
            const __m512 p = exp2_avx512(_mm512_sub_ps(_mm512_load_ps(sT + r * P + h), m_ref));
            _mm512_store_ps(sT + r * P + h, p);
            l = _mm512_add_ps(l, p);
        }
        _mm512_store_ps(m_i + h, m_new);
        _mm512_store_ps(l_i + h, l);
        _mm512_store_ps(alpha + h, a);
    }
}

AVX512 static void accumulate_avx512(const float *pT, const float *v, int64_t vs, int64_t n_keys, int64_t dv,
                                     const float *alpha, float *accT) {
    enum { COLS = SY_ATTN_AVX512_VCOLS, P = SY_ATTN_AVX512_PANEL };
    const __m512 a0 = _mm512_load_ps(alpha), a1 = _mm512_load_ps(alpha + 16);
    int64_t col = 0;
    for (; col + COLS <= dv; col += COLS) {
        __m512 acc[COLS][2];
        for (int t = 0; t < COLS; t++) {
            acc[t][0] = _mm512_mul_ps(_mm512_load_ps(accT + (col + t) * P), a0);
            acc[t][1] = _mm512_mul_ps(_mm512_load_ps(accT + (col + t) * P + 16), a1);
        }
        for (int64_t j = 0; j < n_keys; j++) {
            const __m512 p0 = _mm512_load_ps(pT + j * P), p1 = _mm512_load_ps(pT + j * P + 16);
            const float *vj = v + j * vs + col;
#pragma GCC unroll 8
            for (int t = 0; t < COLS; t++) {
                const __m512 vb = _mm512_set1_ps(vj[t]);
                acc[t][0] = _mm512_fmadd_ps(vb, p0, acc[t][0]);
                acc[t][1] = _mm512_fmadd_ps(vb, p1, acc[t][1]);
            }
        }
        for (int t = 0; t < COLS; t++) {
            _mm512_store_ps(accT + (col + t) * P, acc[t][0]);
            _mm512_store_ps(accT + (col + t) * P + 16, acc[t][1]);
        }
    }
    for (; col < dv; col++) {   /* dv not a multiple of COLS: one value column at a time */
        __m512 c0 = _mm512_mul_ps(_mm512_load_ps(accT + col * P), a0);
        __m512 c1 = _mm512_mul_ps(_mm512_load_ps(accT + col * P + 16), a1);
        for (int64_t j = 0; j < n_keys; j++) {
            const __m512 vb = _mm512_set1_ps(v[j * vs + col]);
            c0 = _mm512_fmadd_ps(vb, _mm512_load_ps(pT + j * P), c0);
            c1 = _mm512_fmadd_ps(vb, _mm512_load_ps(pT + j * P + 16), c1);
        }
        _mm512_store_ps(accT + col * P, c0);
        _mm512_store_ps(accT + col * P + 16, c1);
    }
}

static const struct attn_kernels KERNELS_AVX512 = {
    "avx512", SY_ATTN_AVX512_PANEL, SY_ATTN_AVX512_KEYS, scores_avx512, rescale_avx512, accumulate_avx512,
};
#endif /* SY_ATTN_X86 */

/* ---- choosing the instruction set ------------------------------------------------------------------- */

int sy_attn_isa_supported(int isa) {
    switch (isa) {
    case SY_ATTN_ISA_SCALAR: return 1;
#if SY_ATTN_X86
    case SY_ATTN_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SY_ATTN_ISA_AVX512: return __builtin_cpu_supports("avx512f");
#endif
    default: return 0;
    }
}

int sy_attn_isa_best(void) {
    if (sy_attn_isa_supported(SY_ATTN_ISA_AVX512)) return SY_ATTN_ISA_AVX512;
    if (sy_attn_isa_supported(SY_ATTN_ISA_AVX2)) return SY_ATTN_ISA_AVX2;
    return SY_ATTN_ISA_SCALAR;
}

const struct attn_kernels *sy_attn_kernels_for(int isa) {
    if (!sy_attn_isa_supported(isa)) return NULL;
#if SY_ATTN_X86
    if (isa == SY_ATTN_ISA_AVX512) return &KERNELS_AVX512;
    if (isa == SY_ATTN_ISA_AVX2) return &KERNELS_AVX2;
#endif
    return &KERNELS_SCALAR;
}

int sy_attn_panel_width(int isa) {
    const struct attn_kernels *ker = sy_attn_kernels_for(isa == SY_ATTN_ISA_AUTO ? sy_attn_isa_best() : isa);
    return ker ? ker->panel : SY_EUNSUPPORTED;
}
