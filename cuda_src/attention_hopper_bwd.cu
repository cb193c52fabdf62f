// `hopper` backward: FlashAttention-3 class attention backward for sm_90a (H100/H200), fp16/bf16, d 64/128.
//
// Hardware fact exploited: wgmma reads either operand from shared memory in K-major or MN-major order
// (the descriptor's transpose bit), and its fp32 accumulator, rounded to 16 bits, is its own A-register
// fragment. So the five GEMMs of a query tile need no data reshuffling at all:
//   S^T  = K Q^T     and  dP^T = V dO^T    keys as rows: K, V (A) and Q, dO (B) all K-major in smem
//   dV  += P^T dO    and  dK  += dS^T Q    P^T, dS^T from registers; dO, Q read MN-major (the same tiles)
//   dQ   = dS K                            dS^T stored once to smem, read MN-major (transposed A); K MN-major
// with P = exp2(S * scale * log2(e) - LSE * log2(e)) and dS = P o (dP - D), D = rowsum(dO o O).
// The copy engine (TMA) brings K and V once and Q, dO, LSE, D per query tile through a ring of stages
// completing on mbarriers; one producer thread issues it while two consumer warpgroups compute, each
// owning 64 of the block's 128 keys (wgmma's M is 64 per warpgroup). Each GEMM is issued as soon as its
// operands exist and waited for only when its result is needed, so it runs under the issuing
// warpgroup's own work (dP^T under P^T's exponentials, dV under dS^T, dK under the dQ atomics) and
// under the other warpgroup's.
//
// dQ: fp32 atomics into dq_accum (B, Hq, Nq, d), each element added once per query tile and key block
// (128 keys): each warpgroup multiplies all 128 keys of dS into a 64 x 64 share of the tile's dQ (both
// warpgroups' dS^T in shared memory: one named barrier per tile). Kernels per call: preprocess
// (attention_bwd_common.cuh), this one, then reduce (dq_accum * scale -> dq; dK, dV summed over a GQA
// group).
//
// The sm_90a body exists only where the arch-specific features do (as in attention_hopper.cu); the
// launcher answers SY_EUNSUPPORTED elsewhere, and for deterministic calls (the mma backward's separate
// dQ pass serves those).
#include "attention_band.cuh"
#include "attention_bwd_common.cuh"
#include "attention_dropout.cuh"   // dropout: the forward's keep-mask, regenerated
#include "hopper_primitives.cuh"
#include "softmax.cuh"   // fast_exp2

// Query-tile stages per head dim, measured (bf16, H100, same run, docs/notes-attention-bwd.md): d = 64
// three (same speed not causal, +1-4 % causal, and the two-stage build spilled 40 bytes in one fp16
// instantiation); d = 128 two (three: +5 % not causal, -7 % causal at N = 4096). Overridable for
// same-run comparisons: scripts/bwd_device.py --variant NAME=FILE@-DSY_HOPPER_BWD_D64_STAGES=2
#ifndef SY_HOPPER_BWD_D64_STAGES
#define SY_HOPPER_BWD_D64_STAGES 3
#endif
#ifndef SY_HOPPER_BWD_D128_STAGES
#define SY_HOPPER_BWD_D128_STAGES 2
#endif

namespace sy_attn {
namespace {

// A kernel's mode: the band's (attention_band.cuh) in the low bits, plus kVarlenFlag for a packed
// variable-length batch (as in attention_hopper.cu).
constexpr int kVarlenFlag = 4;
// kDropoutFlag: dropout (p.dropout_p, attention_dropout.cuh), instantiated with kBandNone and kBandCausal only:
// dV += (P o Z)^T dO, dS = P o (Z o dP / (1 - p) - D).
constexpr int kDropoutFlag = 8;

// A block owns kBlockN = 128 keys of one (batch, query head); consumer warpgroup w owns keys 64w..64w+63
// and walks the query tiles kBlockM at a time: 64 at d = 128, 128 at d = 64. Registers per consumer
// thread, d = 128: dV, dK 64 fp32 each, S^T, dP^T 32 each, P^T, dS^T 16 b32 each, dQ 32; d = 64: dV,
// dK 32, S^T, dP^T 64, P^T, dS^T 32, dQ 32. setmaxnreg gives 240; ptxas -v: no spill. Against 64-query
// tiles at d = 64 the 128-query ones measured 1.1-1.2x (half the tiles, barriers and dQ adds per key).
template <int kHeadDim_, int kStages_>
struct HopperBwdTraits {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kConsumerWGs = 2;
    static constexpr int kKeysPerWG = 64;
    static constexpr int kBlockN = kConsumerWGs * kKeysPerWG;
    static constexpr int kBlockM = kHeadDim == 64 ? 128 : 64;
    static constexpr int kStages = kStages_;   // Q, dO, LSE, D of later tiles land while this one is computed on
    static constexpr int kThreads = 128 * (1 + kConsumerWGs);

    // 128-byte swizzled panels of 64 columns, as in the forward (hopper_traits.cuh).
    static constexpr int kPanelCols = 64;
    static constexpr int kRowBytes = kPanelCols * 2;
    static constexpr int kAtomBytes = 8 * kRowBytes;
    static constexpr int kPanels = kHeadDim / kPanelCols;
    static constexpr int kKStepsD = kHeadDim / 16;        // k16 steps of S^T, dP^T (over d)
    static constexpr int kKStepsPerPanel = kPanelCols / 16;
    static constexpr int kKStepsM = kBlockM / 16;         // k16 steps of dV, dK (over the tile's queries)

    // dQ = dS K is an m64n64 GEMM per warpgroup over all kBlockN keys: at d = 128 warpgroup w makes
    // columns 64w.. of the 64-query tile, at d = 64 query rows 64w.. of the 128-query tile.
    static constexpr bool kDqSplitColumns = kHeadDim == 128;
    static constexpr int kDqKSteps = kBlockN / 16;

    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;     // K or V
    static constexpr int kKVPanelBytes = kBlockN * kRowBytes;
    static constexpr int kQBytes = kBlockM * kHeadDim * 2;      // one stage of Q or dO
    static constexpr int kQPanelBytes = kBlockM * kRowBytes;
    static constexpr int kDsPanelBytes = kBlockN * kRowBytes;   // dS^T: [kBlockM / 64][keys][64 queries]
    static constexpr int kDsBytes = kBlockN * kBlockM * 2;
    static constexpr int kVecBytes = kBlockM * 4;               // one stage of LSE or D
    // 1024 bytes of slack to align the swizzle atoms; two dS^T buffers (a warpgroup may store tile i+1's
    // while the other still reads tile i's); 256 bytes of barriers.
    static constexpr int kSmemBytes = 1024 + 2 * kKVBytes + 2 * kStages * kQBytes + 2 * kDsBytes +
                                      2 * kStages * kVecBytes + 256;

    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;

    static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims 64 and 128");
    static_assert(kStages >= 2, "one query tile must load while another is computed on");
    static_assert(kSmemBytes <= 227 * 1024, "sm_90 gives a block at most 227 KiB of shared memory");
    static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= 65536, "register file");
    static_assert(SY_ATTN_BWD_ROW_ALIGN % kBlockM == 0, "the padded LSE and D rows cover whole query tiles");
};

#ifdef SY_HOPPER_DEVICE_CODE
template <class Tr>
struct BwdBarriers {
    uint64_t kv_full;                                // K and V of the block
    uint64_t q_full[Tr::kStages], q_empty[Tr::kStages];   // Q, dO, LSE, D of a query tile
};

template <class Tr>
struct BwdSmem {
    unsigned char *k, *v;     // [kPanels][kBlockN][64], 128B-swizzled
    unsigned char *q, *dout;  // [kStages][kPanels][kBlockM][64]
    unsigned char *ds;        // [2][kBlockM / 64][kBlockN][64]: dS^T, 128B-swizzled like the tiles
    float *lse, *delta;       // [kStages][kBlockM]: log2-scaled LSE (+inf on padding rows), D
    BwdBarriers<Tr> *bars;

    __device__ explicit BwdSmem(unsigned char *raw) {
        unsigned char *base = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
        k = base;
        v = k + Tr::kKVBytes;
        q = v + Tr::kKVBytes;
        dout = q + Tr::kStages * Tr::kQBytes;
        ds = dout + Tr::kStages * Tr::kQBytes;
        lse = reinterpret_cast<float *>(ds + 2 * Tr::kDsBytes);
        delta = lse + Tr::kStages * Tr::kBlockM;
        bars = reinterpret_cast<BwdBarriers<Tr> *>(delta + Tr::kStages * Tr::kBlockM);
        static_assert(sizeof(BwdBarriers<Tr>) <= 256, "kSmemBytes reserves 256 bytes for the barriers");
    }
};

// The query tiles a key block sees: all, or those the band reaches. Row i sees key j iff
// j - hi <= i <= j - lo: the forward's band transposed (band_blocks with keys as rows and (-hi, -lo)).
// Tiles outside [unmasked_begin, unmasked_end) sit on the band's edges and need the per-element mask.
// Keys past seqlen_k need none (see compute_p), so the block's last key is its last real one; neither do
// query rows past seqlen_q (their LSE is +inf: P = 0), so without a band every tile runs unmasked from
// tile 0, and causal only the tiles before unmasked_begin are masked. (Constants where the mode allows:
// at d = 64 the consumer sits at its 240 registers, and a runtime loop start spilled 24-36 bytes.)
template <class Tr, int kMode>
__device__ __forceinline__ BlockRange query_tiles(int n0, int len_q, int len_k, Band band) {
    if constexpr ((kMode & 3) == kBandNone) {
        const int total = ceil_div(len_q, Tr::kBlockM);
        return BlockRange{0, total, 0, total};
    }
    return band_blocks(n0, min(n0 + Tr::kBlockN, len_k) - 1, len_q, Tr::kBlockM, Band{-band.hi, -band.lo});
}

// The sequence a block works in: without varlen the launch's lengths, row 0 of batch b; varlen its rows
// of the packed tensors (tensor-map batch 0) and its own band (from its bottom right).
struct Sequence {
    int q_row0, k_row0, len_q, len_k, map_b;
    Band band;
};

template <int kMode>
__device__ __forceinline__ Sequence sequence_of(const sy_attn_bwd_params &p, int b, Band band) {
    if constexpr ((kMode & kVarlenFlag) != 0) {
        const int q_row0 = __ldg(p.cu_seqlens_q + b), k_row0 = __ldg(p.cu_seqlens_k + b);
        const int len_q = __ldg(p.cu_seqlens_q + b + 1) - q_row0, len_k = __ldg(p.cu_seqlens_k + b + 1) - k_row0;
        return Sequence{q_row0, k_row0, len_q, len_k, 0, sequence_band(band, len_q, len_k)};
    }
    return Sequence{0, 0, p.seqlen_q, p.seqlen_k, b, band};
}

// ---- the producer: one thread issues every copy ---------------------------------------------------------
// q_row0, k_row0: the sequence's first rows in the tensor maps (varlen; else 0), b its map batch.
template <class Tr>
__device__ __forceinline__ void produce(const BwdSmem<Tr> &sm, const CUtensorMap *tm_q, const CUtensorMap *tm_do,
                                        const CUtensorMap *tm_k, const CUtensorMap *tm_v, const float *gLse,
                                        const float *gD, int n0, int h, int h_kv, int b, int m_first, int m_total,
                                        int q_row0, int k_row0) {
    BwdBarriers<Tr> &bar = *sm.bars;
    mbar_arrive_expect_tx(smem_addr(&bar.kv_full), 2 * Tr::kKVBytes);
#pragma unroll
    for (int p = 0; p < Tr::kPanels; ++p) {
        tma_load_4d(smem_addr(sm.k + p * Tr::kKVPanelBytes), tm_k, smem_addr(&bar.kv_full), p * Tr::kPanelCols,
                    k_row0 + n0, h_kv, b);
        tma_load_4d(smem_addr(sm.v + p * Tr::kKVPanelBytes), tm_v, smem_addr(&bar.kv_full), p * Tr::kPanelCols,
                    k_row0 + n0, h_kv, b);
    }
    for (int m = m_first, i = 0; m < m_total; ++m, ++i) {
        const int stage = i % Tr::kStages;
        // A fresh barrier counts as having completed the phase before its first: lap 0 passes at once.
        mbar_wait(smem_addr(&bar.q_empty[stage]), ((i / Tr::kStages) & 1) ^ 1);
        const uint32_t full = smem_addr(&bar.q_full[stage]);
        mbar_arrive_expect_tx(full, 2 * Tr::kQBytes + 2 * Tr::kVecBytes);
        const int m0 = m * Tr::kBlockM;
#pragma unroll
        for (int p = 0; p < Tr::kPanels; ++p) {
            const int offset = stage * Tr::kQBytes + p * Tr::kQPanelBytes;
            tma_load_4d(smem_addr(sm.q + offset), tm_q, full, p * Tr::kPanelCols, q_row0 + m0, h, b);
            tma_load_4d(smem_addr(sm.dout + offset), tm_do, full, p * Tr::kPanelCols, q_row0 + m0, h, b);
        }
        // The LSE and D rows are padded to SY_ATTN_BWD_ROW_ALIGN: whole tiles, 16-byte aligned.
        bulk_load(smem_addr(sm.lse + stage * Tr::kBlockM), gLse + m0, Tr::kVecBytes, full);
        bulk_load(smem_addr(sm.delta + stage * Tr::kBlockM), gD + m0, Tr::kVecBytes, full);
    }
}

// ---- a consumer warpgroup: 64 keys ------------------------------------------------------------------------
template <class Tr, typename T, int kMode>
struct BwdConsumer {
    static constexpr int kBand = kMode & 3;
    static constexpr bool kDropout = (kMode & kDropoutFlag) != 0;
    static constexpr bool kVarlen = (kMode & kVarlenFlag) != 0;
    using GemmTile = typename WgmmaN<Tr::kBlockM>::template Op<T>;   // S^T, dP^T (n = the tile's queries)
    using GemmDq = WgmmaM64N64<T>;                                    // dQ: a 64 x 64 share per warpgroup
    using GemmHead = typename WgmmaN<Tr::kHeadDim>::template Op<T>;   // dV, dK (n = d)
    static constexpr int kNTilesM = Tr::kBlockM / 8;                  // n8 tiles of S^T

    const BwdSmem<Tr> &sm;
    const int wg;            // 0 or 1: keys 64 wg .. of the block
    const int warp, lane;    // inside the warpgroup: warp owns the warpgroup's rows 16 warp ..
    const float scale_log2;

    float dV[Tr::kHeadDim / 2], dK[Tr::kHeadDim / 2];   // this warpgroup's 64 keys x d
    float s[Tr::kBlockM / 2], dp[Tr::kBlockM / 2];      // S^T then P^T; dP^T then dS^T (64 keys x kBlockM queries)
    uint32_t rP[Tr::kKStepsM][4], rdS[Tr::kKStepsM][4]; // P^T, dS^T as A fragments of dV, dK
    float dq[32];                                       // 64 queries x 64 columns of dQ

    __device__ BwdConsumer(const BwdSmem<Tr> &sm_, int wg_, float scale)
        : sm(sm_), wg(wg_), warp((threadIdx.x % 128) / 32), lane(threadIdx.x % 32), scale_log2(scale * kLog2e) {
#pragma unroll
        for (int i = 0; i < Tr::kHeadDim / 2; ++i) dV[i] = dK[i] = 0.f;
    }

    template <int kN>
    static __device__ __forceinline__ float (&tiles(float (&flat)[kN]))[kN / 4][4] {
        return reinterpret_cast<float(&)[kN / 4][4]>(flat);
    }

    // acc = A B^T over d: A this warpgroup's 64 key rows of K or V, B the tile's queries of Q or dO, both
    // K-major; step kk reads columns 16kk.. of panel kk / 4 (32 bytes on inside the swizzled rows).
    __device__ __forceinline__ void issue_over_d(float (&acc)[Tr::kBlockM / 2], uint32_t a_base, uint32_t b_base) {
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsD; ++kk) {
            const int panel = kk / Tr::kKStepsPerPanel, in_panel = (kk % Tr::kKStepsPerPanel) * 32;
            GemmTile::ss(acc, smem_desc(a_base + panel * Tr::kKVPanelBytes + in_panel, 16, Tr::kAtomBytes),
                         smem_desc(b_base + panel * Tr::kQPanelBytes + in_panel, 16, Tr::kAtomBytes), kk > 0);
        }
        wgmma_commit();
    }

    // S^T = K Q^T and dP^T = V dO^T: two commit groups, so P^T can start while dP^T still runs.
    __device__ __forceinline__ void issue_s_dp(int stage) {
        const uint32_t key_rows = wg * Tr::kKeysPerWG * Tr::kRowBytes, tile = stage * Tr::kQBytes;
        fence_regs(s);
        fence_regs(dp);
        wgmma_fence();
        issue_over_d(s, smem_addr(sm.k) + key_rows, smem_addr(sm.q) + tile);
        issue_over_d(dp, smem_addr(sm.v) + key_rows, smem_addr(sm.dout) + tile);
    }

    // P^T = exp2(S^T * scale log2 e - LSE_log2[query]); a (key, query) pair outside the band gives 0:
    // key - query > hi (causal: a query before the key) or (local) < lo. Keys past seqlen_k need no mask:
    // TMA filled their K and V rows with zeros, so their dK, dV rows (never stored) are all they touch,
    // and dQ gets dS * 0 from them.
    // Varlen: keys past the sequence's len_k are the next sequence's (not TMA's zeros): masked too.
    template <bool kMask>
    __device__ __forceinline__ void compute_p(int stage, int n0, int m0, Band band, int len_k) {
        const float *lse = sm.lse + stage * Tr::kBlockM;
        const int key0 = n0 + wg * Tr::kKeysPerWG + warp * 16 + lane / 4;
        // This lane's key row sees queries key - hi .. key - lo; relative to the tile's first query.
        const int first = key0 - band.hi - m0, last = key0 - band.lo - m0;
#pragma unroll
        for (int nt = 0; nt < kNTilesM; ++nt) {
            const int col = nt * 8 + 2 * (lane % 4);
            const float2 l = *reinterpret_cast<const float2 *>(lse + col);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                float x = tiles(s)[nt][c];
                const int query = col + c % 2 - (c / 2) * 8;   // against the key row of c / 2
                if (kMask && (query < first || (kBand == kBandLocal && query > last) ||
                              (kVarlen && key0 + (c / 2) * 8 >= len_k)))
                    x = -INFINITY;
                tiles(s)[nt][c] = fast_exp2(x * scale_log2 - (c % 2 ? l.y : l.x));
            }
            if (nt % 2 == 1) pack_step(rP[nt / 2], s, nt / 2);   // this tile pair's registers die here
        }
    }

    // dS^T = P^T o (dP^T - D[query]), with P^T as rounded for dV: the fp32 S^T registers are free once
    // P^T is packed (what lets a 128-query tile fit at d = 64), and dS is then the gradient of the P
    // that dV used. A pair of rP holds tile nt = 2kk + reg / 2, elements 2 (reg % 2) + {0, 1}.
    __device__ __forceinline__ void compute_ds(int stage) {
        const float *delta = sm.delta + stage * Tr::kBlockM;
#pragma unroll
        for (int nt = 0; nt < kNTilesM; ++nt) {
            const float2 d = *reinterpret_cast<const float2 *>(delta + nt * 8 + 2 * (lane % 4));
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const float2 pr = MmaOp<T>::unpack((kDropout ? rdS : rP)[nt / 2][(nt % 2) * 2 + half]);   // P, undropped
                tiles(dp)[nt][2 * half] = pr.x * (tiles(dp)[nt][2 * half] - d.x);
                tiles(dp)[nt][2 * half + 1] = pr.y * (tiles(dp)[nt][2 * half + 1] - d.y);
            }
            if (nt % 2 == 1) pack_step(rdS[nt / 2], dp, nt / 2);
        }
    }

    // Dropout, once P^T is packed: rdS keeps P (compute_ds reads it there, then overwrites it with dS^T) and
    // rP becomes P o Z for dV's GEMM (dV is scaled by 1 / (1 - p) at the store). A block's keys are the
    // grid's (b = blockIdx.z, h = blockIdx.y; no varlen).
    __device__ __forceinline__ void drop_p(const sy_attn_bwd_params &p, int n0, int m0) {
        const Dropout d = make_dropout(p, blockIdx.z, blockIdx.y);
        const int key = n0 + wg * Tr::kKeysPerWG + warp * 16 + lane / 4;
        uint4 keep[Tr::kKStepsM / 2];
        keep_cols_all(keep, d, key, m0, lane);
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk)
#pragma unroll
            for (int reg = 0; reg < 4; ++reg) rdS[kk][reg] = rP[kk][reg];
        dropout_cols_packed(rP, keep);
    }

    // Accumulator n8 tiles 2kk, 2kk+1 -> the k16 A fragment kk (the forward's P conversion).
    static __device__ __forceinline__ void pack_step(uint32_t (&a)[4], float (&acc)[Tr::kBlockM / 2], int kk) {
        a[0] = MmaOp<T>::pack(tiles(acc)[2 * kk][0], tiles(acc)[2 * kk][1]);
        a[1] = MmaOp<T>::pack(tiles(acc)[2 * kk][2], tiles(acc)[2 * kk][3]);
        a[2] = MmaOp<T>::pack(tiles(acc)[2 * kk + 1][0], tiles(acc)[2 * kk + 1][1]);
        a[3] = MmaOp<T>::pack(tiles(acc)[2 * kk + 1][2], tiles(acc)[2 * kk + 1][3]);
    }

    // acc += A B over the tile's queries, A (P^T or dS^T) from registers, B (dO or Q) MN-major: a k16
    // step is 16 query rows further on; LBO steps from one 64-column panel of d to the next.
    __device__ __forceinline__ void issue_head_gemm(float (&acc)[Tr::kHeadDim / 2], uint32_t (&a)[Tr::kKStepsM][4],
                                                    const unsigned char *tile_base, int stage) {
        const uint32_t b_base = smem_addr(tile_base) + stage * Tr::kQBytes;
        fence_regs(acc);
        fence_regs(a);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk)
            GemmHead::rs(acc, a[kk], smem_desc(b_base + kk * 16 * Tr::kRowBytes, Tr::kQPanelBytes, Tr::kAtomBytes));
        wgmma_commit();
    }

    // dS^T (this warpgroup's 64 key rows) to shared memory with the 128-byte swizzle: 16-byte chunk c of
    // row r at c ^ (r % 8). A warp's 32 word stores hit 32 banks (8 rows x 4 words, chunks all distinct).
    __device__ __forceinline__ void store_ds(int buffer) {
        unsigned char *base = sm.ds + buffer * Tr::kDsBytes;
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk)
#pragma unroll
            for (int reg = 0; reg < 4; ++reg) {
                const int row = wg * Tr::kKeysPerWG + warp * 16 + lane / 4 + (reg % 2) * 8;
                const int chunk = 2 * kk + reg / 2, panel = chunk / 8;
                *reinterpret_cast<uint32_t *>(base + panel * Tr::kDsPanelBytes + row * Tr::kRowBytes +
                                              (((chunk % 8) ^ (row % 8)) << 4) + (lane % 4) * 4) = rdS[kk][reg];
            }
    }

    // This warpgroup's 64 x 64 share of dQ = dS K (Traits::kDqSplitColumns): A = dS^T read MN-major
    // (queries contiguous; panel wg at d = 64), B = K MN-major (panel wg at d = 128).
    __device__ __forceinline__ void issue_dq(int buffer) {
        const int ds_panel = Tr::kDqSplitColumns ? 0 : wg, k_panel = Tr::kDqSplitColumns ? wg : 0;
        const uint32_t ds_base = smem_addr(sm.ds) + buffer * Tr::kDsBytes + ds_panel * Tr::kDsPanelBytes;
        const uint32_t k_base = smem_addr(sm.k) + k_panel * Tr::kKVPanelBytes;
        fence_regs(dq);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kDqKSteps; ++kk)
            GemmDq::template ss<1, 1>(dq, smem_desc(ds_base + kk * 16 * Tr::kRowBytes, Tr::kDsPanelBytes, Tr::kAtomBytes),
                                      smem_desc(k_base + kk * 16 * Tr::kRowBytes, Tr::kKVPanelBytes, Tr::kAtomBytes),
                                      kk > 0);
        wgmma_commit();
    }

    // The i-th query tile this block walks. Each GEMM is issued as soon as its operands exist and waited
    // for only when its result is needed, so the tensor cores run under this warpgroup's own work:
    // dP^T under P^T's exponentials, dV under dS^T and its store, dK under the dQ atomics.
    template <bool kMask>
    __device__ __forceinline__ void tile(int i, int m0, int n0, int seqlen_q, float *gDqHead, Band band, int len_k,
                                         const sy_attn_bwd_params &p) {
        const int stage = i % Tr::kStages, buffer = i & 1;
        mbar_wait(smem_addr(&sm.bars->q_full[stage]), (i / Tr::kStages) & 1);
        issue_s_dp(stage);
        wgmma_wait<1>();   // S^T done; dP^T may still run
        fence_regs(s);
        compute_p<kMask>(stage, n0, m0, band, len_k);
        if constexpr (kDropout) drop_p(p, n0, m0);
        issue_head_gemm(dV, rP, sm.dout, stage);   // dV += P^T dO
        wgmma_wait<1>();   // dP^T done; dV may still run
        fence_regs(dp);
        if constexpr (kDropout) dropout_scale_by_packed(tiles(dp), rP, 1.f / (1.f - p.dropout_p));
        compute_ds(stage);
        store_ds(buffer);
        // The stores reach wgmma's proxy, then every thread whose dS^T rows the dQ GEMM reads has stored.
        fence_proxy_async_shared();
        named_bar_sync(1, 256);
        issue_dq(buffer);
        issue_head_gemm(dK, rdS, sm.q, stage);     // dK += dS^T Q
        wgmma_wait<1>();   // dV and dQ done; dK may still run
        fence_regs(dV);
        fence_regs(rP);
        fence_regs(dq);
        // This warp's 16 rows of the warpgroup's 64 x 64 share.
        const int row0 = m0 + (Tr::kDqSplitColumns ? 0 : wg * 64) + warp * 16;
        const int col0 = Tr::kDqSplitColumns ? wg * 64 : 0;
        atomic_add_rows(gDqHead + col0, Tr::kHeadDim, row0, seqlen_q, tiles(dq), lane);
        wgmma_wait<0>();   // dK done: the stage's Q and dO are free
        fence_regs(dK);
        fence_regs(rdS);
        mbar_arrive(smem_addr(&sm.bars->q_empty[stage]));
    }

    // dK carries the softmax scale (S = scale * Q K^T); dV does not. GQA: fp32 per query head, summed later.
    // Varlen: the sequence's rows (seq.k_row0 ..) of dk, dv or of the (Hq, total_k, d) workspaces.
    __device__ void store(const sy_attn_bwd_params &p, int n0, int h, int b, const Sequence &seq) {
        const int row0 = n0 + wg * Tr::kKeysPerWG + warp * 16;
        const float dv_scale = kDropout ? 1.f / (1.f - p.dropout_p) : 1.f;   // dropout: P o Z left it out
        if (p.heads_q == p.heads_kv) {
            T *gDk = head_base(static_cast<T *>(p.dk), p.dk_strides, seq.map_b, h) + int64_t(seq.k_row0) * p.dk_strides[2];
            T *gDv = head_base(static_cast<T *>(p.dv), p.dv_strides, seq.map_b, h) + int64_t(seq.k_row0) * p.dv_strides[2];
            store_rows<T>(gDk, p.dk_strides[2], row0, seq.len_k, tiles(dK), p.scale, lane);
            store_rows<T>(gDv, p.dv_strides[2], row0, seq.len_k, tiles(dV), dv_scale, lane);
        } else {
            const int64_t head = (kVarlen ? int64_t(h) * p.seqlen_k + seq.k_row0 : bwd_row_index(p, b, h, 0, p.seqlen_k)) *
                                 Tr::kHeadDim;
            store_rows<float>(p.dk_accum + head, Tr::kHeadDim, row0, seq.len_k, tiles(dK), p.scale, lane);
            store_rows<float>(p.dv_accum + head, Tr::kHeadDim, row0, seq.len_k, tiles(dV), dv_scale, lane);
        }
    }
};
#endif  // SY_HOPPER_DEVICE_CODE

// Grid (key blocks, query heads, batch): causal key block 0 sees the most query tiles and starts first.
template <class Tr, typename T, int kMode>
__global__ void __launch_bounds__(Tr::kThreads, 1)
hopper_bwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                  const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                  const sy_attn_bwd_params p, int rows_per_head, const Band band) {
#ifdef SY_HOPPER_DEVICE_CODE
    extern __shared__ unsigned char smem_raw[];
    const BwdSmem<Tr> sm(smem_raw);
    const int n0 = blockIdx.x * Tr::kBlockN, h = blockIdx.y, b = blockIdx.z;
    // Varlen: the grid covers max_seqlen_k keys of every sequence; a block past its sequence's keys has
    // nothing to do (the whole block leaves before any barrier exists).
    if ((kMode & kVarlenFlag) != 0 && n0 >= sequence_of<kMode>(p, b, band).len_k) return;

    if (threadIdx.x == 0) {
        BwdBarriers<Tr> &bar = *sm.bars;
        mbar_init(smem_addr(&bar.kv_full), 1);
        for (int s = 0; s < Tr::kStages; ++s) {
            mbar_init(smem_addr(&bar.q_full[s]), 1);   // the producer's expect_tx arrival; the bytes complete it
            mbar_init(smem_addr(&bar.q_empty[s]), 128 * Tr::kConsumerWGs);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    const int warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
        regs_dec<Tr::kProducerRegs>();
        if (threadIdx.x == 0) {
            tma_prefetch_map(&tm_q);
            tma_prefetch_map(&tm_do);
            tma_prefetch_map(&tm_k);
            tma_prefetch_map(&tm_v);
            const Sequence seq = sequence_of<kMode>(p, b, band);
            const BlockRange queries = query_tiles<Tr, kMode>(n0, seq.len_q, seq.len_k, seq.band);
            produce<Tr>(sm, &tm_q, &tm_do, &tm_k, &tm_v, p.lse_log2 + bwd_row_index(p, b, h, 0, rows_per_head),
                        p.delta + bwd_row_index(p, b, h, 0, rows_per_head), n0, h, h / (p.heads_q / p.heads_kv),
                        seq.map_b, queries.begin, queries.end, seq.q_row0, seq.k_row0);
        }
    } else {
        regs_inc<Tr::kConsumerRegs>();
        BwdConsumer<Tr, T, kMode> consumer(sm, warpgroup - 1, p.scale);
        mbar_wait(smem_addr(&sm.bars->kv_full), 0);   // also when no tile follows: no copy may outlive the block
        int i = 0;
        // The range is computed after setmaxnreg, in each role (live across it, it cost the d = 64
        // consumers 16-24 bytes of spill).
        const Sequence seq = sequence_of<kMode>(p, b, band);
        // dq_accum: (B, Hq, Nq, d), varlen (Hq, total_q, d) from the sequence's first row.
        float *gDqHead = p.dq_accum + ((kMode & kVarlenFlag) != 0 ? int64_t(h) * p.seqlen_q + seq.q_row0
                                                                   : bwd_row_index(p, b, h, 0, p.seqlen_q)) * Tr::kHeadDim;
        const BlockRange queries = query_tiles<Tr, kMode>(n0, seq.len_q, seq.len_k, seq.band);
        // Varlen: a block holding the sequence's last, ragged keys masks every tile (the keys after them
        // belong to the next sequence).
        const bool ragged = (kMode & kVarlenFlag) != 0 && n0 + Tr::kBlockN > seq.len_k;
        for (int m = queries.begin; m < queries.end; ++m, ++i) {
            // Without a band nothing is masked (ragged keys and queries: see query_tiles).
            constexpr int kBand = kMode & 3;
            const bool masked = ragged || (kBand == kBandCausal ? m < queries.unmasked_begin
                                          : kBand == kBandLocal && (m < queries.unmasked_begin || m >= queries.unmasked_end));
            if (masked)
                consumer.template tile<true>(i, m * Tr::kBlockM, n0, seq.len_q, gDqHead, seq.band, seq.len_k, p);
            else
                consumer.template tile<false>(i, m * Tr::kBlockM, n0, seq.len_q, gDqHead, seq.band, seq.len_k, p);
        }
        consumer.store(p, n0, h, b, seq);
    }
#endif
}

// ---- host -----------------------------------------------------------------------------------------------
template <class Tr, typename T, int kMode>
int launch(const sy_attn_bwd_params &p, int rows_per_head, Band band, cudaStream_t stream) {
    auto kernel = hopper_bwd_kernel<Tr, T, kMode>;
    cudaFuncAttributes attrs;
    cudaError_t err = cudaFuncGetAttributes(&attrs, kernel);
    if (err != cudaSuccess) return static_cast<int>(err);
    if (attrs.binaryVersion != 90) return kUnsupported;   // the body exists only in an sm_90a build

    constexpr bool kVarlen = (kMode & kVarlenFlag) != 0;
    const int map_batch = kVarlen ? 1 : p.batch;   // varlen: the packed rows as one batch
    CUtensorMap tm_q, tm_do, tm_k, tm_v;
    int status = encode_map(&tm_q, p.q, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, map_batch, p.q_strides, Tr::kBlockM);
    if (status == kOk)
        status = encode_map(&tm_do, p.dout, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, map_batch, p.dout_strides,
                            Tr::kBlockM);
    if (status == kOk)
        status = encode_map(&tm_k, p.k, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, map_batch, p.k_strides, Tr::kBlockN);
    if (status == kOk)
        status = encode_map(&tm_v, p.v, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, map_batch, p.v_strides, Tr::kBlockN);
    if (status != kOk) return status;

    if ((status = launch_preprocess<T>(p, rows_per_head, stream)) != kOk) return status;
    const size_t dq_bytes = static_cast<size_t>(map_batch) * p.heads_q * p.seqlen_q * Tr::kHeadDim * sizeof(float);
    if ((err = cudaMemsetAsync(p.dq_accum, 0, dq_bytes, stream)) != cudaSuccess) return static_cast<int>(err);
    if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes)) != cudaSuccess)
        return static_cast<int>(err);
    dim3 grid(ceil_div(kVarlen ? p.max_seqlen_k : p.seqlen_k, Tr::kBlockN), p.heads_q, p.batch);
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(tm_q, tm_do, tm_k, tm_v, p, rows_per_head, band);
    if ((status = launch_status()) != kOk) return status;

    status = launch_reduce<T>(p.dq_accum, p.dq, p.dq_strides, map_batch, p.heads_q, 1, p.seqlen_q, Tr::kHeadDim, p.scale,
                              stream);
    if (status != kOk || p.heads_q == p.heads_kv) return status;   // the kernel wrote dk and dv itself
    const int group = p.heads_q / p.heads_kv;
    status = launch_reduce<T>(p.dk_accum, p.dk, p.dk_strides, map_batch, p.heads_kv, group, p.seqlen_k, Tr::kHeadDim,
                              1.f, stream);
    if (status != kOk) return status;
    return launch_reduce<T>(p.dv_accum, p.dv, p.dv_strides, map_batch, p.heads_kv, group, p.seqlen_k, Tr::kHeadDim, 1.f,
                            stream);
}

template <class Tr, typename T, int kVarlen>
int launch_causal(const sy_attn_bwd_params &p, int rows_per_head, cudaStream_t stream) {
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode, kVarlen != 0);
    if (mode == kBandLocal) return launch<Tr, T, kBandLocal | kVarlen>(p, rows_per_head, band, stream);
    return mode == kBandCausal ? launch<Tr, T, kBandCausal | kVarlen>(p, rows_per_head, band, stream)
                               : launch<Tr, T, kBandNone | kVarlen>(p, rows_per_head, band, stream);
}

// Dropout: the band's none and causal modes (a window answers SY_EUNSUPPORTED: not instantiated), no varlen.
template <class Tr, typename T>
int launch_dropout(const sy_attn_bwd_params &p, int rows_per_head, cudaStream_t stream) {
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode);
    if (mode == kBandLocal || p.cu_seqlens_q) return kUnsupported;
    return mode == kBandCausal ? launch<Tr, T, kBandCausal | kDropoutFlag>(p, rows_per_head, band, stream)
                               : launch<Tr, T, kBandNone | kDropoutFlag>(p, rows_per_head, band, stream);
}

template <typename T>
int launch_head_dim(const sy_attn_bwd_params &p, cudaStream_t stream) {
    const int rows_per_head = ceil_div(p.cu_seqlens_q ? p.max_seqlen_q : p.seqlen_q, SY_ATTN_BWD_ROW_ALIGN) *
                              SY_ATTN_BWD_ROW_ALIGN;
    using TraitsD64 = HopperBwdTraits<64, SY_HOPPER_BWD_D64_STAGES>;
    using TraitsD128 = HopperBwdTraits<128, SY_HOPPER_BWD_D128_STAGES>;
    // Dropout at d = 64 is not instantiated: P's second copy (drop_p) over the 128-query tile's registers
    // spilled 60-176 bytes; the mma backward serves it (sympathy/attention/cuda.py picks it).
    if (p.dropout_p > 0.f) return p.head_dim == 128 ? launch_dropout<TraitsD128, T>(p, rows_per_head, stream) : kUnsupported;
    if (p.cu_seqlens_q)
        return p.head_dim == 64 ? launch_causal<TraitsD64, T, kVarlenFlag>(p, rows_per_head, stream)
                                : launch_causal<TraitsD128, T, kVarlenFlag>(p, rows_per_head, stream);
    return p.head_dim == 64 ? launch_causal<TraitsD64, T, 0>(p, rows_per_head, stream)
                            : launch_causal<TraitsD128, T, 0>(p, rows_per_head, stream);
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_hopper_bwd(const sy_attn_bwd_params *params, void *stream) {
    using namespace sy_attn;
    int status = check_bwd_params(params);
    if (status != kOk) return status;
    const sy_attn_bwd_params &p = *params;
    if (p.head_dim != 64 && p.head_dim != 128) return kUnsupported;
    if (p.dtype == SY_ATTN_F32 || p.deterministic) return kUnsupported;
    if (!check_band(p.has_window, p.window_left, p.window_right, p.seqlen_q, p.seqlen_k)) return kInvalid;
    if (!device_is_sm90()) return kUnsupported;
    if (!p.lse_log2 || !p.dq_accum) return kInvalid;
    if (p.heads_q != p.heads_kv && (!p.dk_accum || !p.dv_accum)) return kInvalid;
    // Misaligned views: the Python layer copies them first; a direct C caller gets SY_EUNSUPPORTED.
    const int map_batch = p.cu_seqlens_q ? 1 : p.batch;   // varlen: one packed "batch"
    if (!tma_aligned(p.q, p.q_strides, map_batch, p.heads_q, p.seqlen_q) ||
        !tma_aligned(p.dout, p.dout_strides, map_batch, p.heads_q, p.seqlen_q) ||
        !tma_aligned(p.k, p.k_strides, map_batch, p.heads_kv, p.seqlen_k) ||
        !tma_aligned(p.v, p.v_strides, map_batch, p.heads_kv, p.seqlen_k))
        return kUnsupported;
    if ((p.cu_seqlens_q == nullptr) != (p.cu_seqlens_k == nullptr) ||
        (p.cu_seqlens_q && (p.max_seqlen_q < 1 || p.max_seqlen_k < 1)))
        return kInvalid;
    const int64_t *out_strides[3] = {p.dq_strides, p.dk_strides, p.dv_strides};
    const void *outs[3] = {p.dq, p.dk, p.dv};
    for (int i = 0; i < 3; ++i)
        if (reinterpret_cast<uintptr_t>(outs[i]) % 4 != 0 || out_strides[i][2] % 2 != 0) return kInvalid;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    return p.dtype == SY_ATTN_BF16 ? launch_head_dim<__nv_bfloat16>(p, s) : launch_head_dim<__half>(p, s);
}
