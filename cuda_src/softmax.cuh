// Online softmax as a named unit, shared by the `tiled` and `mma` kernels.
//
// Same names as the NumPy reference and the C kernel: per query row, m_i is the running maximum of
// the raw scores seen so far, l_i the running sum of exp(scale * (s - m_i)), acc the running
// un-normalised output. Each new block of scores is folded in by `rescale` (grow m_i, shrink l_i
// and acc by exp(scale * (m_old - m_new)), turn the scores into probabilities) and the row is
// closed by `finalize` (acc / l_i and the log-sum-exp). Exponentials are exp2 of pre-scaled scores:
// one FFMA plus one MUFU.EX2 per score, since scale * log2(e) is folded into a single multiplier.
//
// The -inf guard: while every score a row has seen is masked, m_i is -inf and m_old - m_new is
// -inf - (-inf) = NaN. Such a row subtracts 0 instead, so its masked scores give exp2(-inf) = 0 and
// its (empty) acc and l_i stay 0; finalize then writes 0 and a log-sum-exp of -inf.
#pragma once

#include "attention_common.cuh"

namespace sy_attn {

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The maximum in exp2 units that a row subtracts, with the -inf guard.
__device__ __forceinline__ float scaled_max(float m, float scale_log2) {
    return m == -INFINITY ? 0.f : m * scale_log2;
}

// ---- one row per thread (the `tiled` kernel) ------------------------------------------------------
struct OnlineSoftmaxRow {
    float m_i = -INFINITY;
    float l_i = 0.f;

    // Fold kCols new raw scores into the row; they become probabilities relative to the new m_i.
    // Returns the factor the caller multiplies its acc by.
    template <int kCols>
    __device__ __forceinline__ float rescale(float (&s)[kCols], float scale_log2) {
        float m_new = m_i;
#pragma unroll
        for (int c = 0; c < kCols; ++c) m_new = fmaxf(m_new, s[c]);
        const float m_scaled = scaled_max(m_new, scale_log2);
        const float alpha = fast_exp2(m_i * scale_log2 - m_scaled);   // m_i = -inf gives 0
        l_i *= alpha;
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            s[c] = fast_exp2(s[c] * scale_log2 - m_scaled);
            l_i += s[c];
        }
        m_i = m_new;
        return alpha;
    }

    // 1 / l_i (0 for a row that saw only masked scores) and its natural log-sum-exp.
    __device__ __forceinline__ float finalize(float scale, float *lse) const {
        if (l_i == 0.f) {
            *lse = -INFINITY;
            return 0.f;
        }
        *lse = m_i * scale + logf(l_i);
        return 1.f / l_i;
    }
};

// fold_lazy_row's default order: none.
struct Unordered {
    __device__ __forceinline__ float operator()(float m) const { return m; }
};

// ---- tensor-core fragments (the `mma` kernel) -------------------------------------------------------
// A warp holds kMAtoms blocks of 16 query rows; in the m16n8 accumulator layout a thread owns two
// rows of each (lane/4 and lane/4 + 8), so it keeps 2 * kMAtoms (m_i, l_i) pairs. A row's columns
// are spread over the 4 threads of a quad: maxima are reduced across the quad with two shuffles
// every block, l_i stays a per-thread partial sum until finalize (one reduction per row in total).
template <int kMAtoms>
struct OnlineSoftmaxFragment {
    static constexpr int kRows = 2 * kMAtoms;
    float m_i[kRows];
    float l_i[kRows];

    __device__ __forceinline__ OnlineSoftmaxFragment() {
#pragma unroll
        for (int r = 0; r < kRows; ++r) { m_i[r] = -INFINITY; l_i[r] = 0.f; }
    }

    // rS: raw scores, [kMAtoms][kNTilesS][4] accumulator fragments; acc: [kMAtoms][kNTilesO][4].
    // kSkipUnitAlpha: once a row's maximum settles (after the first few key blocks) alpha is exactly
    // 1; skip acc's multiplies when it is 1 for every row of the warp (a vote, so the branch never
    // diverges). It shortens register lifetimes (d = 128 spills less) but splits the basic block the
    // scheduler interleaves exps and mma in, which cost d = 64 ~5 %: a per-tile choice.
    // Row r (= 2 ma + half): the larger of its running maximum and a new block's scores. Quad-wide:
    // the row's columns are spread over 4 threads.
    template <int kNTilesS>
    __device__ __forceinline__ float row_max(const float (&rS)[kMAtoms][kNTilesS][4], int ma, int half) const {
        float m_new = m_i[2 * ma + half];
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt)
            m_new = fmaxf(m_new, fmaxf(rS[ma][nt][2 * half], rS[ma][nt][2 * half + 1]));
        m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
        return fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
    }

    // Row r (= 2 ma + half) of a new block of scores: its running maximum grows to cover them; returns
    // the grown maximum pre-scaled for exp2 and sets alpha, the factor that moves the old sums
    // (l_i, acc) onto it.
    template <int kNTilesS>
    __device__ __forceinline__ float grow_max(const float (&rS)[kMAtoms][kNTilesS][4], int ma, int half,
                                              float scale_log2, float &alpha) {
        const int r = 2 * ma + half;
        const float m_new = row_max(rS, ma, half);
        const float m_scaled = scaled_max(m_new, scale_log2);
        alpha = fast_exp2(m_i[r] * scale_log2 - m_scaled);
        m_i[r] = m_new;
        return m_scaled;
    }

    // The row's scores become probabilities (relative to the grown maximum), added to the sum l.
    template <int kNTilesS>
    __device__ __forceinline__ void exponentiate(float (&rS)[kMAtoms][kNTilesS][4], int ma, int half,
                                                 float scale_log2, float m_scaled, float &l) {
        exponentiate_tiles<0, kNTilesS>(rS, ma, half, scale_log2, m_scaled, l);
    }
    // The same for the row's n8 tiles kFrom..kTo-1 only.
    template <int kFrom, int kTo, int kNTilesS>
    __device__ __forceinline__ void exponentiate_tiles(float (&rS)[kMAtoms][kNTilesS][4], int ma, int half,
                                                       float scale_log2, float m_scaled, float &l) {
#pragma unroll
        for (int nt = kFrom; nt < kTo; ++nt) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                float &s = rS[ma][nt][2 * half + c];
                s = fast_exp2(s * scale_log2 - m_scaled);
                l += s;
            }
        }
    }

    template <bool kSkipUnitAlpha, int kNTilesS, int kNTilesO>
    __device__ __forceinline__ void rescale(float (&rS)[kMAtoms][kNTilesS][4],
                                            float (&acc)[kMAtoms][kNTilesO][4], float scale_log2) {
#pragma unroll
        for (int ma = 0; ma < kMAtoms; ++ma) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {   // rows lane/4 (regs 0,1) and lane/4 + 8 (regs 2,3)
                const int r = 2 * ma + half;
                float alpha;
                const float m_scaled = grow_max(rS, ma, half, scale_log2, alpha);
                l_i[r] *= alpha;
                if (!kSkipUnitAlpha || __any_sync(0xffffffffu, alpha != 1.f)) {
#pragma unroll
                    for (int nt = 0; nt < kNTilesO; ++nt) {
                        acc[ma][nt][2 * half] *= alpha;
                        acc[ma][nt][2 * half + 1] *= alpha;
                    }
                }
                exponentiate(rS, ma, half, scale_log2, m_scaled, l_i[r]);
            }
        }
    }

    // rescale, split in two for a kernel whose acc is still being written by an asynchronous GEMM
    // when the next scores arrive (hopper: P V of block j-1 runs on the tensor cores while block j's
    // softmax runs). fold() grows m_i and l_i and turns rS into probabilities exactly as rescale
    // does, but hands each row's alpha back instead of touching acc; scale_acc() applies it once that
    // GEMM has completed.
    template <int kNTilesS>
    __device__ __forceinline__ void fold(float (&rS)[kMAtoms][kNTilesS][4], float scale_log2, float (&alpha)[kRows]) {
#pragma unroll
        for (int ma = 0; ma < kMAtoms; ++ma) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = 2 * ma + half;
                const float m_scaled = grow_max(rS, ma, half, scale_log2, alpha[r]);
                float l = l_i[r] * alpha[r];
                exponentiate(rS, ma, half, scale_log2, m_scaled, l);
                l_i[r] = l;
            }
        }
    }

    // fold() with FlashAttention-4's lazy rescale: a row's maximum moves only when the new scores
    // pass it by more than slack_log2 in exp2 units. Otherwise alpha is exactly 1 and the new scores
    // are exponentiated against the old maximum, so probabilities reach up to 2^slack_log2 (fp32
    // sums, 16-bit P: far from overflow). O / l and the log-sum-exp are the same whichever maximum
    // was subtracted. Returns whether this warp has a row with alpha != 1, i.e. whether acc needs
    // scale_acc at all: once the maxima settle, a whole warp skips its d / 2 multiplies per row pair.
    template <int kNTilesS>
    __device__ __forceinline__ bool fold_lazy(float (&rS)[kMAtoms][kNTilesS][4], float scale_log2, float slack_log2,
                                              float (&alpha)[kRows]) {
        bool rescaled = false;
#pragma unroll
        for (int ma = 0; ma < kMAtoms; ++ma)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                rescaled |= fold_lazy_row(rS, ma, half, scale_log2, slack_log2, alpha[2 * ma + half]);
        return __any_sync(0xffffffffu, rescaled);
    }

    // One row (r = 2 ma + half) of fold_lazy, for a caller that puts other work between its rows (the hopper
    // forward waits for its P V GEMM there: Consumer::fold_split). Returns whether the row's maximum moved;
    // the warp-wide vote is the caller's. order(m) returns the row's new maximum unchanged; a caller passes
    // one that ties it to a value made elsewhere, so the row's exponentials cannot be scheduled before it.
    template <int kNTilesS, class Order = Unordered>
    __device__ __forceinline__ bool fold_lazy_row(float (&rS)[kMAtoms][kNTilesS][4], int ma, int half, float scale_log2,
                                                  float slack_log2, float &alpha, Order order = {}) {
        bool grow;
        float l;
        const float m_scaled = lazy_row_max(rS, ma, half, scale_log2, slack_log2, alpha, grow, l, order);
        exponentiate(rS, ma, half, scale_log2, m_scaled, l);
        l_i[2 * ma + half] = l;
        return grow;
    }

    // fold_lazy_row up to its exponentials, for a caller that exponentiates the row in parts
    // (exponentiate_tiles): sets alpha, grow (the maximum moved) and l (the row's old sum moved onto the
    // maximum) and returns the maximum to subtract, in exp2 units. The caller stores the row's final l to l_i.
    template <int kNTilesS, class Order = Unordered>
    __device__ __forceinline__ float lazy_row_max(const float (&rS)[kMAtoms][kNTilesS][4], int ma, int half,
                                                  float scale_log2, float slack_log2, float &alpha, bool &grow,
                                                  float &l, Order order = {}) {
        const int r = 2 * ma + half;
        const float m_new = order(row_max(rS, ma, half));
        // m_i = -inf: +inf > slack, the row takes its first finite maximum (or stays -inf,
        // NaN > slack_log2 being false, while every score it saw is masked).
        grow = (m_new - m_i[r]) * scale_log2 > slack_log2;
        const float m_scaled = scaled_max(grow ? m_new : m_i[r], scale_log2);
        alpha = grow ? fast_exp2(m_i[r] * scale_log2 - m_scaled) : 1.f;
        if (grow) m_i[r] = m_new;
        l = l_i[r] * alpha;
        return m_scaled;
    }

    template <int kNTilesO>
    __device__ __forceinline__ void scale_acc(float (&acc)[kMAtoms][kNTilesO][4], const float (&alpha)[kRows]) const {
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int nt = 0; nt < kNTilesO; ++nt) {
                acc[r / 2][nt][2 * (r % 2)] *= alpha[r];
                acc[r / 2][nt][2 * (r % 2) + 1] *= alpha[r];
            }
    }

    // Reduce l_i over the quad, scale acc by 1 / l_i, and give each row's natural log-sum-exp.
    template <int kNTilesO>
    __device__ __forceinline__ void finalize(float (&acc)[kMAtoms][kNTilesO][4], float scale,
                                             float (&lse)[kRows]) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            float l = l_i[r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv_l = l == 0.f ? 0.f : 1.f / l;
            lse[r] = l == 0.f ? -INFINITY : m_i[r] * scale + logf(l);
            const int ma = r / 2, half = r % 2;
#pragma unroll
            for (int nt = 0; nt < kNTilesO; ++nt) {
                acc[ma][nt][2 * half] *= inv_l;
                acc[ma][nt][2 * half + 1] *= inv_l;
            }
        }
    }
};

}  // namespace sy_attn
