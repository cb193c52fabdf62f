// `hopper` backward at d = 256: wgmma and TMA for sm_90a (H100/H200), fp16/bf16, dense or causal (any
// causal_offset, a window open on the left), GQA; dQ by atomics, so not deterministic (the mma backward,
// attention_mma_bwd.cu, serves deterministic calls; sympathy/attention/cuda.py routes).
//
// The budget decides the shape (docs/notes-attention-bwd.md, session d256w21). A block owns 64 keys of one
// (batch, query head): their dK and dV over all 256 columns are 2 x 64 x 256 fp32 = 128 KiB of
// accumulators, half the register file. One warpgroup holding both (256 registers a thread) cannot fit
// in setmaxnreg's 240, so the two consumer warpgroups split the five GEMMs of a 64-query tile by gradient,
// keys as rows everywhere (wgmma's M = 64 = the block's keys):
//   warpgroup 0 (P):  S^T = K Q^T (n64, over d), P^T = exp2(S^T scale log2e - LSE), dV += P^T dO (n256,
//                     P^T straight from the registers), dQ[:, 0:128] += dS K (n128)
//   warpgroup 1 (dS): dP^T = V dO^T (n64, over d), dS^T = P^T o (dP^T - D), dK += dS^T Q (n256, dS^T
//                     from the registers), dQ[:, 128:256] += dS K (n128)
// Each warpgroup then issues 2.5 of the tile's 5 GEMM units (64 x 64 x 256 each), and each accumulator is
// 128 (dV or dK) + 64 (dQ half) + 32 (S^T or dP^T) registers at most, never all at once. Warpgroup 0 makes
// S^T and P^T one tile ahead (SY_HOPPER_BWD256_P_AHEAD below), between this tile's dV and dQ. P^T crosses from
// warpgroup 0 to 1 through shared memory in the registers' own fragment order (each thread reads what its
// twin thread wrote: 16 contiguous bytes a lane, conflict-free), dS^T is stored once 128B-swizzled and
// read by both warpgroups' dQ GEMMs as wgmma's transposed A (the hopper backward's dS^T layout). Every
// GEMM has N >= 64: at N = 32 (splitting S^T by queries instead) an SS wgmma reads 3 KiB of shared memory
// per 16 cycles of math, above the 128 bytes a clock an SM's shared memory delivers.
//
// Shared memory: K, V 32 KiB each, Q and dO two stages of 32 KiB each, P^T and dS^T two buffers of 8 KiB
// each (a warpgroup may write tile i+1's while the other still reads tile i's), LSE and D: 226.3 KiB of
// the 227. dQ by red.global.add.v4 (as FlashAttention-3 at d = 256: dQ's 64 KiB of fp32 shares do not fit), into
// a tile-major dq_accum in the registers' order (SY_HOPPER_BWD256_DQ_TILED below).
// Kernels per call: the preprocess (D, the log2 LSE; attention_bwd_common.cuh), this one, the dQ
// conversion, and for GQA the dK, dV sums over a group.
#include "attention_band.cuh"
#include "attention_bwd_common.cuh"
#include "hopper_primitives.cuh"
#include "softmax.cuh"   // fast_exp2

// Two schedule levers of issue 21 (docs/notes-attention-bwd.md, session d256o), each 1 by default and 0 for
// the previous schedule in a same-run A/B (-DSY_HOPPER_BWD256_P_AHEAD=0 -DSY_HOPPER_BWD256_LPT=0):
// P_AHEAD: the P warpgroup makes the next tile's S^T and P^T between this tile's dV and dQ, while the dS
//   warpgroup computes this tile's dS^T, dQ and dK, so the dS warpgroup finds P^T stored when its dP^T is
//   done (before, it waited there for S^T and the exponentials, and its tensor-core work stood still).
// LPT: causal grids (query heads, key blocks, batch): the block scheduler takes blocks in index order, so key
//   block 0 of every head (the one that sees every query tile) starts first and the last wave holds the
//   shortest blocks, not the last head's longest one.
#ifndef SY_HOPPER_BWD256_P_AHEAD
#define SY_HOPPER_BWD256_P_AHEAD 1
#endif
#ifndef SY_HOPPER_BWD256_LPT
#define SY_HOPPER_BWD256_LPT 1
#endif
// DQ_TILED: dq_accum tile-major in the accumulators' order (atomic_add_tiled: each warp's add is 512 contiguous
// bytes of whole sectors, no shuffles), read back by dq_tiled_convert_kernel; 0: row-major (atomic_add_rows, two
// 16-byte halves of a sector from two lanes), the previous version, for same-run comparisons.
#ifndef SY_HOPPER_BWD256_DQ_TILED
#define SY_HOPPER_BWD256_DQ_TILED 1
#endif

namespace sy_attn {
namespace {

// A template (of the one head dim it serves) so that an sm_80 build, where the device code is absent, does
// not warn about the members only that code reads.
template <int kHeadDim_>
struct Bwd256Traits {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockN = 64;    // keys of a block (wgmma's M)
    static constexpr int kBlockM = 64;    // queries of a tile
    static constexpr int kStages = 2;     // Q, dO, LSE, D of the next tile land while this one is computed on
    static constexpr int kThreads = 384;  // producer warpgroup + the P and dS warpgroups

    // 128-byte swizzled panels of 64 columns (the TMA box row limit), as in the other hopper kernels.
    static constexpr int kPanelCols = 64;
    static constexpr int kRowBytes = 128;
    static constexpr int kAtomBytes = 8 * kRowBytes;
    static constexpr int kPanels = kHeadDim / kPanelCols;
    static constexpr int kKStepsD = kHeadDim / 16;     // k16 steps of S^T, dP^T
    static constexpr int kKStepsM = kBlockM / 16;      // k16 steps of dV, dK (the tile's queries)
    static constexpr int kKStepsN = kBlockN / 16;      // k16 steps of dQ (the block's keys)
    static constexpr int kNTilesM = kBlockM / 8;       // n8 tiles of S^T, dP^T

    static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
    static constexpr int kKVPanelBytes = kBlockN * kRowBytes;
    static constexpr int kQBytes = kBlockM * kHeadDim * 2;
    static constexpr int kQPanelBytes = kBlockM * kRowBytes;
    static constexpr int kPBytes = kBlockN * kBlockM * 2;     // P^T in fragment order, one buffer
    static constexpr int kDsBytes = kBlockN * kBlockM * 2;    // dS^T [keys][64 queries], swizzled, one buffer
    static constexpr int kVecBytes = kBlockM * 4;
    static constexpr int kSmemBytes = 1024 + 2 * kKVBytes + 2 * kStages * kQBytes + 2 * kPBytes + 2 * kDsBytes +
                                      2 * kStages * kVecBytes + 256;

    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;

    static_assert(kSmemBytes <= 227 * 1024, "sm_90 gives a block at most 227 KiB of shared memory");
    static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "register file");
    static_assert(SY_ATTN_BWD_ROW_ALIGN % kBlockM == 0, "the padded LSE and D rows cover whole query tiles");
    static_assert(kBlockM == 64, "dS^T is one 64-query panel");
    static_assert(kHeadDim == 256, "the split by gradient is sized for d = 256");
};
using Tr = Bwd256Traits<256>;
static_assert(Tr::kPanels * Tr::kPanelCols == Tr::kHeadDim && Tr::kAtomBytes == 8 * Tr::kRowBytes &&
                  Tr::kKStepsD * 16 == Tr::kHeadDim && Tr::kKStepsN * 16 == Tr::kBlockN && Tr::kNTilesM * 8 == Tr::kBlockM &&
                  Tr::kKStepsM * 16 == Tr::kBlockM && Tr::kKVPanelBytes * Tr::kPanels == Tr::kKVBytes &&
                  Tr::kQPanelBytes * Tr::kPanels == Tr::kQBytes && Tr::kPBytes == Tr::kKStepsM * 128 * 16,
              "panels of 64 columns, k16 steps, P^T's fragment order");

// Named barriers (0 is __syncthreads): P^T stored (warpgroup 0 arrives, 1 waits), dS^T stored (both; with
// kPAhead warpgroup 1 arrives and meets its own four warps at kBarDsOwn256: its dQ GEMM reads every warp's rows).
enum Bwd256Barrier { kBarP256 = 1, kBarDs256 = 2, kBarDsOwn256 = 3 };

#ifdef SY_HOPPER_DEVICE_CODE
struct Bwd256Smem {
    unsigned char *k, *v;        // [kPanels][kBlockN][64], 128B-swizzled
    unsigned char *q, *dout;     // [kStages][kPanels][kBlockM][64]
    unsigned char *p, *ds;       // [2][kKStepsM][128 threads][16 bytes]; [2][kBlockN][64 queries] swizzled
    float *lse, *delta;          // [kStages][kBlockM]
    uint64_t *kv_full, *q_full, *q_empty;

    __device__ explicit Bwd256Smem(unsigned char *raw) {
        unsigned char *base = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
        k = base;
        v = k + Tr::kKVBytes;
        q = v + Tr::kKVBytes;
        dout = q + Tr::kStages * Tr::kQBytes;
        p = dout + Tr::kStages * Tr::kQBytes;
        ds = p + 2 * Tr::kPBytes;
        lse = reinterpret_cast<float *>(ds + 2 * Tr::kDsBytes);
        delta = lse + Tr::kStages * Tr::kBlockM;
        kv_full = reinterpret_cast<uint64_t *>(delta + Tr::kStages * Tr::kBlockM);
        q_full = kv_full + 1;
        q_empty = q_full + Tr::kStages;
    }
};

// The query tiles key block n0 sees: all without a band; with one, the band transposed (keys as rows).
template <int kBand>
__device__ __forceinline__ BlockRange query_tiles256(int n0, int len_q, int len_k, Band band) {
    if constexpr (kBand == kBandNone) {
        const int total = ceil_div(len_q, Tr::kBlockM);
        return BlockRange{0, total, 0, total};
    }
    return band_blocks(n0, min(n0 + Tr::kBlockN, len_k) - 1, len_q, Tr::kBlockM, Band{-band.hi, -band.lo});
}

// ---- the producer: one thread issues every copy ---------------------------------------------------------
__device__ __forceinline__ void produce256(const Bwd256Smem &sm, const CUtensorMap *tm_q, const CUtensorMap *tm_do,
                                           const CUtensorMap *tm_k, const CUtensorMap *tm_v, const float *gLse,
                                           const float *gD, int n0, int h, int h_kv, int b, BlockRange tiles) {
    mbar_arrive_expect_tx(smem_addr(sm.kv_full), 2 * Tr::kKVBytes);
#pragma unroll
    for (int pn = 0; pn < Tr::kPanels; ++pn) {
        tma_load_4d(smem_addr(sm.k + pn * Tr::kKVPanelBytes), tm_k, smem_addr(sm.kv_full), pn * Tr::kPanelCols, n0, h_kv, b);
        tma_load_4d(smem_addr(sm.v + pn * Tr::kKVPanelBytes), tm_v, smem_addr(sm.kv_full), pn * Tr::kPanelCols, n0, h_kv, b);
    }
    for (int m = tiles.begin, i = 0; m < tiles.end; ++m, ++i) {
        const int stage = i % Tr::kStages;
        mbar_wait(smem_addr(sm.q_empty + stage), ((i / Tr::kStages) & 1) ^ 1);   // lap 0 passes at once
        const uint32_t full = smem_addr(sm.q_full + stage);
        mbar_arrive_expect_tx(full, 2 * Tr::kQBytes + 2 * Tr::kVecBytes);
        const int m0 = m * Tr::kBlockM;
#pragma unroll
        for (int pn = 0; pn < Tr::kPanels; ++pn) {
            const int offset = stage * Tr::kQBytes + pn * Tr::kQPanelBytes;
            tma_load_4d(smem_addr(sm.q + offset), tm_q, full, pn * Tr::kPanelCols, m0, h, b);
            tma_load_4d(smem_addr(sm.dout + offset), tm_do, full, pn * Tr::kPanelCols, m0, h, b);
        }
        bulk_load(smem_addr(sm.lse + stage * Tr::kBlockM), gLse + m0, Tr::kVecBytes, full);
        bulk_load(smem_addr(sm.delta + stage * Tr::kBlockM), gD + m0, Tr::kVecBytes, full);
    }
}

// ---- the consumers ----------------------------------------------------------------------------------------
// kRole 0: the P warpgroup (S^T, P^T, dV, dQ columns 0..127); 1: the dS warpgroup (dP^T, dS^T, dK, dQ
// columns 128..255). Both own all 64 keys as rows: warp w rows 16w .. 16w + 15 (wgmma's fragment layout).
template <typename T, int kBand, int kRole>
struct Bwd256Consumer {
    using GemmTile = WgmmaM64N64<T>;    // S^T, dP^T
    using GemmHead = WgmmaM64N256<T>;   // dV, dK
    using GemmDq = WgmmaM64N128<T>;     // this warpgroup's half of dQ
    static constexpr bool kPAhead = SY_HOPPER_BWD256_P_AHEAD != 0;

    const Bwd256Smem &sm;
    const int warp, lane, tid;
    const float scale_log2;

    float acc[128];                  // dV (role 0) or dK (role 1): 64 keys x 256
    float sc[32];                    // S^T then nothing (role 0); dP^T then dS^T (role 1)
    uint32_t rP[Tr::kKStepsM][4];    // P^T as A fragments (role 1: loaded from warpgroup 0)
    uint32_t rdS[Tr::kKStepsM][4];   // dS^T as A fragments (role 1)
    float dq[64];                    // 64 queries x 128 columns of dQ

    __device__ Bwd256Consumer(const Bwd256Smem &sm_, float scale)
        : sm(sm_), warp((threadIdx.x % 128) / 32), lane(threadIdx.x % 32), tid(threadIdx.x % 128),
          scale_log2(scale * kLog2e) {
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    }

    template <int kN>
    static __device__ __forceinline__ float (&tiles(float (&flat)[kN]))[kN / 4][4] {
        return reinterpret_cast<float(&)[kN / 4][4]>(flat);
    }

    // sc = A B^T over d: A = K or V (the block's 64 keys), B = the stage's Q or dO, both K-major; step kk
    // reads columns 16 kk .. of panel kk / 4. Each GEMM builds its two descriptors once and steps them by
    // constants (desc_at; smem_desc's mask, shift and or on each step's address were ~14 instructions a wgmma).
    __device__ __forceinline__ void issue_over_d(uint32_t a_base, uint32_t b_base) {
        const uint64_t a = smem_desc(a_base, 16, Tr::kAtomBytes), b = smem_desc(b_base, 16, Tr::kAtomBytes);
        fence_regs(sc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsD; ++kk) {
            const int panel = kk / 4, in_panel = (kk % 4) * 32;
            GemmTile::ss(sc, desc_at(a, panel * Tr::kKVPanelBytes + in_panel), desc_at(b, panel * Tr::kQPanelBytes + in_panel),
                         kk > 0);
        }
        wgmma_commit();
    }

    // acc += A B over the tile's queries: A (P^T or dS^T) from registers, B (dO or Q) MN-major, LBO the
    // step from one 64-column panel of d to the next.
    __device__ __forceinline__ void issue_head(uint32_t (&a)[Tr::kKStepsM][4], uint32_t b_base) {
        const uint64_t b = smem_desc(b_base, Tr::kQPanelBytes, Tr::kAtomBytes);
        fence_regs(acc);
        fence_regs(a);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk) GemmHead::rs(acc, a[kk], desc_at(b, kk * 16 * Tr::kRowBytes));
        wgmma_commit();
    }

    // dQ[:, 128 kRole ..] = dS K over the block's keys: A = dS^T read MN-major (transposed), B = K panels
    // 2 kRole, 2 kRole + 1 MN-major.
    __device__ __forceinline__ void issue_dq(int buffer) {
        const uint64_t a = smem_desc(smem_addr(sm.ds) + buffer * Tr::kDsBytes, Tr::kDsBytes, Tr::kAtomBytes);
        const uint64_t b = smem_desc(smem_addr(sm.k) + 2 * kRole * Tr::kKVPanelBytes, Tr::kKVPanelBytes, Tr::kAtomBytes);
        fence_regs(dq);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsN; ++kk)
            GemmDq::template ss<1, 1>(dq, desc_at(a, kk * 16 * Tr::kRowBytes), desc_at(b, kk * 16 * Tr::kRowBytes), kk > 0);
        wgmma_commit();
    }

    // Accumulator n8 tiles 2kk, 2kk+1 -> the k16 A fragment kk (the forward's P conversion).
    static __device__ __forceinline__ void pack_step(uint32_t (&a)[4], float (&s)[32], int kk) {
        a[0] = MmaOp<T>::pack(tiles(s)[2 * kk][0], tiles(s)[2 * kk][1]);
        a[1] = MmaOp<T>::pack(tiles(s)[2 * kk][2], tiles(s)[2 * kk][3]);
        a[2] = MmaOp<T>::pack(tiles(s)[2 * kk + 1][0], tiles(s)[2 * kk + 1][1]);
        a[3] = MmaOp<T>::pack(tiles(s)[2 * kk + 1][2], tiles(s)[2 * kk + 1][3]);
    }

    // P^T = exp2(S^T * scale log2 e - LSE_log2[query]); a (key, query) pair outside the band gives 0. Keys
    // past seqlen_k need no mask (TMA's zero rows of K and V: their dK, dV rows are never stored, and dQ
    // gets dS * 0 from them); query rows past seqlen_q have LSE = +inf (P = 0).
    template <bool kMask>
    __device__ __forceinline__ void compute_p(int stage, int n0, int m0, Band band) {
        const uint32_t lse = smem_addr(sm.lse + stage * Tr::kBlockM);   // LDS by shared address (no 64-bit math)
        const int key0 = n0 + warp * 16 + lane / 4;
        const int first = key0 - band.hi - m0;   // this lane's key row sees queries >= first (relative)
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesM; ++nt) {
            const int col = nt * 8 + 2 * (lane % 4);
            const float2 l = lds_float2(lse + col * 4);
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                float x = tiles(sc)[nt][c];
                if (kMask && col + c % 2 - (c / 2) * 8 < first) x = -INFINITY;
                tiles(sc)[nt][c] = fast_exp2(x * scale_log2 - (c % 2 ? l.y : l.x));
            }
            if (nt % 2 == 1) pack_step(rP[nt / 2], sc, nt / 2);
        }
    }

    // dS^T = P^T o (dP^T - D[query]), with P^T as rounded for dV (the gradient of the P that dV used).
    __device__ __forceinline__ void compute_ds(int stage) {
        const uint32_t delta = smem_addr(sm.delta + stage * Tr::kBlockM) + (2 * (lane % 4)) * 4;
#pragma unroll
        for (int nt = 0; nt < Tr::kNTilesM; ++nt) {
            const float2 d = lds_float2(delta + nt * 8 * 4);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const float2 pr = MmaOp<T>::unpack(rP[nt / 2][(nt % 2) * 2 + half]);
                tiles(sc)[nt][2 * half] = pr.x * (tiles(sc)[nt][2 * half] - d.x);
                tiles(sc)[nt][2 * half + 1] = pr.y * (tiles(sc)[nt][2 * half + 1] - d.y);
            }
            if (nt % 2 == 1) pack_step(rdS[nt / 2], sc, nt / 2);
        }
    }

    // P^T in fragment order: k-step kk of thread t at (kk * 128 + t) * 16 bytes (a warp's 32 lanes write
    // 512 contiguous bytes: no bank conflict); the dS warpgroup's thread t reads it back as its own. STS / LDS
    // by 32-bit shared address: through a generic pointer each access was ST / LD with 64-bit address math.
    __device__ __forceinline__ void store_p(int buffer) {
        const uint32_t dst = smem_addr(sm.p) + buffer * Tr::kPBytes + tid * 16;
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk) sts_u32x4(dst + kk * 128 * 16, rP[kk][0], rP[kk][1], rP[kk][2], rP[kk][3]);
    }
    __device__ __forceinline__ void load_p(int buffer) {
        const uint32_t src = smem_addr(sm.p) + buffer * Tr::kPBytes + tid * 16;
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk) {
            const uint4 w = lds_u32x4(src + kk * 128 * 16);
            rP[kk][0] = w.x, rP[kk][1] = w.y, rP[kk][2] = w.z, rP[kk][3] = w.w;
        }
    }

    // dS^T to shared memory with the 128-byte swizzle: 16-byte chunk c of key row r at c ^ (r % 8). k16 step kk
    // (queries 16 kk ..) is one stmatrix of its four 8 x 8 matrices (rdS[kk][i] is matrix i: rows + 8 (i % 2),
    // queries + 8 (i / 2)); lane l addresses row l % 8 of matrix l / 8, a whole 16-byte chunk. One STSM a step
    // instead of four 4-byte generic stores with 64-bit address math; each writes 512 bytes without bank
    // conflict (the chunks of 8 rows differ). The bytes stored are the same as four word stores' would be.
    __device__ __forceinline__ void store_ds(int buffer) {
        const int m = lane / 8, row = warp * 16 + (m % 2) * 8 + lane % 8;
        const uint32_t base = smem_addr(sm.ds) + buffer * Tr::kDsBytes + row * Tr::kRowBytes;
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsM; ++kk)
            stmatrix_x4(base + (((2 * kk + m / 2) ^ (row % 8)) << 4), rdS[kk][0], rdS[kk][1], rdS[kk][2], rdS[kk][3]);
    }

    // The P warpgroup's S^T and P^T of the tile at m0 (stage, P^T buffer), stored and left in rP for dV.
    template <bool kMask>
    __device__ __forceinline__ void next_p(int stage, int buffer, int m0, int n0, Band band) {
        issue_over_d(smem_addr(sm.k), smem_addr(sm.q) + stage * Tr::kQBytes);
        wgmma_wait<0>();
        fence_regs(sc);
        compute_p<kMask>(stage, n0, m0, band);
        store_p(buffer);
    }

    // One query tile (the i-th this block walks, queries m0 ..; has_next: another follows). With kPAhead the
    // P warpgroup runs one tile ahead in its exponentials: it enters with this tile's P^T stored, announced
    // and in rP (from the previous tile, or run's prologue), and makes the next tile's between this tile's
    // dV and dQ, while the dS warpgroup computes this tile's dS^T, dQ and dK; kMask is then the next tile's.
    // Registers peak as before at dQ: dV 128 + dQ 64 + the next P^T 16 (S^T's 32 are dead by then).
    template <bool kMask>
    __device__ __forceinline__ void tile(int i, int m0, int n0, int seqlen_q, float *gDqHead, Band band, bool has_next) {
        // i through a lane-0 shuffle: the compiler then knows it is warp-uniform and keeps stage, buffer and every
        // descriptor built from them in uniform registers (HGMMA reads its descriptors there: no R2UR a wgmma).
        i = __shfl_sync(0xffffffffu, i, 0);
        const int stage = i % Tr::kStages, buffer = i & 1;
        const uint32_t q_stage = smem_addr(sm.q) + stage * Tr::kQBytes, do_stage = smem_addr(sm.dout) + stage * Tr::kQBytes;
        if (kRole == 1 || !kPAhead) mbar_wait(smem_addr(sm.q_full + stage), (i / Tr::kStages) & 1);
        if constexpr (kRole == 0 && kPAhead) {
            issue_head(rP, do_stage);                  // dV += P^T dO
            wgmma_wait<0>();
            fence_regs(acc);
            fence_regs(rP);
            // This stage is read (Q by the S^T of the previous tile, LSE by its exponentials, dO by dV): freed
            // now, so the next copy into it waits for the dS warpgroup's dK only, never for the wait below.
            mbar_arrive(smem_addr(sm.q_empty + stage));
            if (has_next) {
                const int next = (i + 1) % Tr::kStages;
                mbar_wait(smem_addr(sm.q_full + next), ((i + 1) / Tr::kStages) & 1);
                // P^T buffer buffer ^ 1 was last read by the dS warpgroup before its dS^T of tile i - 1,
                // which this warpgroup met at kBarDs256 in that tile.
                next_p<kMask>(next, buffer ^ 1, m0 + Tr::kBlockM, n0, band);
            }
            // dS^T stored and fenced by the dS warpgroup, which only arrives here. The next P^T is announced
            // after this meeting, not before: each warpgroup's next arrival on either barrier then follows
            // the other's wait on the previous one, so neither barrier is arrived on twice in one phase.
            named_bar_sync(kBarDs256, 256);
            if (has_next) named_bar_arrive(kBarP256, 256);   // bar.arrive orders the P^T stores before it
            issue_dq(buffer);
            wgmma_wait<0>();                           // dQ done
        } else if constexpr (kRole == 0) {
            issue_over_d(smem_addr(sm.k), q_stage);   // S^T
            wgmma_wait<0>();
            fence_regs(sc);
            compute_p<kMask>(stage, n0, m0, band);
            store_p(buffer);
            named_bar_arrive(kBarP256, 256);           // P^T to the dS warpgroup (bar.arrive orders the stores)
            issue_head(rP, do_stage);                  // dV += P^T dO, under the dS warpgroup's dS^T
            named_bar_sync(kBarDs256, 256);            // dS^T stored and fenced by the dS warpgroup
            issue_dq(buffer);
            wgmma_wait<0>();                           // dV and dQ done: dO read
            fence_regs(acc);
            fence_regs(rP);
        } else {
            issue_over_d(smem_addr(sm.v), do_stage);   // dP^T
            wgmma_wait<0>();
            fence_regs(sc);
            named_bar_sync(kBarP256, 256);             // P^T stored by the P warpgroup
            load_p(buffer);
            compute_ds(stage);
            store_ds(buffer);
            fence_proxy_async_shared();                // the stores reach wgmma's proxy before the barrier
            if constexpr (kPAhead) {
                // The P warpgroup waits here after its next tile's exponentials; this one need not wait for
                // them, only for its own four warps' rows (its dQ GEMM reads all 64).
                named_bar_arrive(kBarDs256, 256);
                named_bar_sync(kBarDsOwn256, 128);
            } else {
                named_bar_sync(kBarDs256, 256);
            }
            issue_dq(buffer);
            issue_head(rdS, q_stage);                  // dK += dS^T Q, under the dQ atomics
            wgmma_wait<1>();                           // dQ done; dK may still run
        }
        fence_regs(dq);
        if constexpr (SY_HOPPER_BWD256_DQ_TILED) {
            // The warpgroup's 64 x 128 half of the tile's dQ: shares 2 kRole, 2 kRole + 1 of the tile's four.
            atomic_add_tiled(gDqHead + static_cast<int64_t>(m0) * Tr::kHeadDim + kRole * Tr::kBlockM * 128, tiles(dq), tid);
        } else {
            // This warp's 16 query rows of the warpgroup's 64 x 128 half of dQ (row-major dq_accum).
            atomic_add_rows(gDqHead + 128 * kRole, Tr::kHeadDim, m0 + warp * 16, seqlen_q, tiles(dq), lane);
        }
        if constexpr (kRole == 1) {
            wgmma_wait<0>();   // dK done: Q read
            fence_regs(acc);
            fence_regs(rdS);
        }
        if (kRole == 1 || !kPAhead) mbar_arrive(smem_addr(sm.q_empty + stage));
    }

    // dK carries the softmax scale (S = scale * Q K^T); dV does not. GQA: fp32 per query head, summed later.
    __device__ void store(const sy_attn_bwd_params &p, int n0, int h, int b) {
        const int row0 = n0 + warp * 16;
        const float scale = kRole == 1 ? p.scale : 1.f;
        if (p.heads_q == p.heads_kv) {
            T *out = kRole == 1 ? head_base(static_cast<T *>(p.dk), p.dk_strides, b, h)
                                : head_base(static_cast<T *>(p.dv), p.dv_strides, b, h);
            const int64_t stride = kRole == 1 ? p.dk_strides[2] : p.dv_strides[2];
            store_rows<T>(out, stride, row0, p.seqlen_k, tiles(acc), scale, lane);
        } else {
            float *ws = (kRole == 1 ? p.dk_accum : p.dv_accum) + bwd_row_index(p, b, h, 0, p.seqlen_k) * Tr::kHeadDim;
            store_rows<float>(ws, Tr::kHeadDim, row0, p.seqlen_k, tiles(acc), scale, lane);
        }
    }

    __device__ void run(const sy_attn_bwd_params &p, int rows_per_head, int n0, int h, int b, Band band) {
        const int dq_rows = SY_HOPPER_BWD256_DQ_TILED ? rows_per_head : p.seqlen_q;   // dq_accum's rows a head
        float *gDqHead = p.dq_accum + bwd_row_index(p, b, h, 0, dq_rows) * Tr::kHeadDim;
        const BlockRange tiles = query_tiles256<kBand>(n0, p.seqlen_q, p.seqlen_k, band);
        constexpr bool kAhead = kRole == 0 && kPAhead;   // this warpgroup's P^T one tile ahead
        if (kAhead && tiles.begin < tiles.end) {               // the first tile's P^T (stage 0, lap 0, buffer 0)
            mbar_wait(smem_addr(sm.q_full), 0);
            if (kBand == kBandCausal && tiles.begin < tiles.unmasked_begin)
                next_p<true>(0, 0, tiles.begin * Tr::kBlockM, n0, band);
            else
                next_p<false>(0, 0, tiles.begin * Tr::kBlockM, n0, band);
            named_bar_arrive(kBarP256, 256);
        }
        for (int m = tiles.begin, i = 0; m < tiles.end; ++m, ++i) {
            const bool has_next = m + 1 < tiles.end;
            if (kBand == kBandCausal && (kAhead ? m + 1 : m) < tiles.unmasked_begin)   // the exponentials' tile
                tile<true>(i, m * Tr::kBlockM, n0, p.seqlen_q, gDqHead, band, has_next);
            else
                tile<false>(i, m * Tr::kBlockM, n0, p.seqlen_q, gDqHead, band, has_next);
        }
        store(p, n0, h, b);
    }
};
#endif  // SY_HOPPER_DEVICE_CODE

// Grid (key blocks, query heads, batch), or with heads_first (causal, LPT) (query heads, key blocks, batch):
// causal key block 0 sees the most query tiles, and heads_first starts it first in every head.
template <typename T, int kBand>
__global__ void __launch_bounds__(Tr::kThreads, 1)
hopper_bwd256_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                     const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                     const sy_attn_bwd_params p, int rows_per_head, const Band band, bool heads_first) {
#ifdef SY_HOPPER_DEVICE_CODE
    extern __shared__ unsigned char smem_raw[];
    const Bwd256Smem sm(smem_raw);
    const int n0 = (heads_first ? blockIdx.y : blockIdx.x) * Tr::kBlockN, h = heads_first ? blockIdx.x : blockIdx.y,
              b = blockIdx.z;
    if (threadIdx.x == 0) {
        mbar_init(smem_addr(sm.kv_full), 1);
        for (int s = 0; s < Tr::kStages; ++s) {
            mbar_init(smem_addr(sm.q_full + s), 1);      // the producer's expect_tx arrival; the bytes complete it
            mbar_init(smem_addr(sm.q_empty + s), 256);   // every consumer thread of both warpgroups
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
            const BlockRange tiles = query_tiles256<kBand>(n0, p.seqlen_q, p.seqlen_k, band);
            produce256(sm, &tm_q, &tm_do, &tm_k, &tm_v, p.lse_log2 + bwd_row_index(p, b, h, 0, rows_per_head),
                       p.delta + bwd_row_index(p, b, h, 0, rows_per_head), n0, h, h / (p.heads_q / p.heads_kv), b,
                       tiles);
        }
    } else {
        regs_inc<Tr::kConsumerRegs>();
        mbar_wait(smem_addr(sm.kv_full), 0);   // also when no tile follows: no copy may outlive the block
        if (warpgroup == 1) {
            Bwd256Consumer<T, kBand, 0> consumer(sm, p.scale);
            consumer.run(p, rows_per_head, n0, h, b, band);
        } else {
            Bwd256Consumer<T, kBand, 1> consumer(sm, p.scale);
            consumer.run(p, rows_per_head, n0, h, b, band);
        }
    }
#endif
}

// ---- host -----------------------------------------------------------------------------------------------
template <typename T, int kBand>
int launch256(const sy_attn_bwd_params &p, int rows_per_head, Band band, cudaStream_t stream) {
    auto kernel = hopper_bwd256_kernel<T, kBand>;
    cudaFuncAttributes attrs;
    cudaError_t err = cudaFuncGetAttributes(&attrs, kernel);
    if (err != cudaSuccess) return static_cast<int>(err);
    if (attrs.binaryVersion != 90) return kUnsupported;   // the body exists only in an sm_90a build

    CUtensorMap tm_q, tm_do, tm_k, tm_v;
    int status = encode_map(&tm_q, p.q, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, p.batch, p.q_strides, Tr::kBlockM);
    if (status == kOk)
        status = encode_map(&tm_do, p.dout, p.dtype, Tr::kHeadDim, p.seqlen_q, p.heads_q, p.batch, p.dout_strides,
                            Tr::kBlockM);
    if (status == kOk)
        status = encode_map(&tm_k, p.k, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, p.batch, p.k_strides, Tr::kBlockN);
    if (status == kOk)
        status = encode_map(&tm_v, p.v, p.dtype, Tr::kHeadDim, p.seqlen_k, p.heads_kv, p.batch, p.v_strides, Tr::kBlockN);
    if (status != kOk) return status;

    // D, the log2 LSE and dq_accum's zeros: tile-major over rows_per_head rows a head (attention_api.h), row-major
    // (B, Hq, Nq, d) without DQ_TILED.
    constexpr bool kTiled = SY_HOPPER_BWD256_DQ_TILED != 0;
    const size_t dq_bytes = static_cast<size_t>(p.batch) * p.heads_q * (kTiled ? rows_per_head : p.seqlen_q) *
                            Tr::kHeadDim * sizeof(float);
    if ((status = launch_preprocess_zero_dq<T, Tr::kHeadDim>(p, rows_per_head, dq_bytes, kTiled, stream)) != kOk)
        return status;

    if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes)) != cudaSuccess)
        return static_cast<int>(err);
    // Causal: every head's key block 0 first (LPT above), where the key blocks fit gridDim.y (65535).
    const int key_blocks = ceil_div(p.seqlen_k, Tr::kBlockN);
    const bool heads_first = SY_HOPPER_BWD256_LPT && kBand == kBandCausal && key_blocks <= 65535;
    const dim3 grid = heads_first ? dim3(p.heads_q, key_blocks, p.batch) : dim3(key_blocks, p.heads_q, p.batch);
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(tm_q, tm_do, tm_k, tm_v, p, rows_per_head, band, heads_first);
    if ((status = launch_status()) != kOk) return status;

    // dQ = scale * dq_accum.
    if (kTiled)
        status = launch_dq_tiled_convert<T, Tr::kHeadDim>(p.dq_accum, p.dq, p.dq_strides, p.batch, p.heads_q, p.seqlen_q,
                                                          rows_per_head, p.scale, stream);
    else
        status = launch_dq_convert<T, Tr::kHeadDim>(p.dq_accum, p.dq, p.dq_strides, p.batch, p.heads_q, p.seqlen_q,
                                                    p.scale, false, stream);
    if (status != kOk || p.heads_q == p.heads_kv) return status;   // the kernel wrote dk and dv itself
    return launch_reduce_dk_dv<T>(p, Tr::kHeadDim, stream);
}

template <typename T>
int launch_band256(const sy_attn_bwd_params &p, cudaStream_t stream) {
    const int rows_per_head = ceil_div(p.seqlen_q, SY_ATTN_BWD_ROW_ALIGN) * SY_ATTN_BWD_ROW_ALIGN;
    int mode;
    const Band band = make_band(p.is_causal, p.causal_offset, p.has_window, p.window_left, p.window_right, p.seqlen_q,
                                p.seqlen_k, &mode);
    if (mode == kBandLocal) return kUnsupported;   // a window bounded on the left: not instantiated
    // 226 KiB of shared memory a block: a GPU that grants less is refused before any launch.
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
        optin < Tr::kSmemBytes)
        return kUnsupported;
    return mode == kBandCausal ? launch256<T, kBandCausal>(p, rows_per_head, band, stream)
                               : launch256<T, kBandNone>(p, rows_per_head, band, stream);
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_hopper_bwd256(const sy_attn_bwd_params *params, void *stream) {
    using namespace sy_attn;
    int status = check_bwd_params(params);
    if (status != kOk) return status;
    const sy_attn_bwd_params &p = *params;
    if (p.head_dim != 256 || p.dtype == SY_ATTN_F32) return kUnsupported;
    // Not instantiated: a mask, dropout, varlen, the deterministic order (dQ by atomics).
    if (p.mask || p.mask_lists || p.dropout_p != 0.f || p.cu_seqlens_q || p.cu_seqlens_k || p.deterministic)
        return kUnsupported;
    if (!check_band(p.has_window, p.window_left, p.window_right, p.seqlen_q, p.seqlen_k)) return kInvalid;
    if (!device_is_sm90()) return kUnsupported;
    if (!p.lse_log2 || !p.dq_accum) return kInvalid;
    if (p.heads_q != p.heads_kv && (!p.dk_accum || !p.dv_accum)) return kInvalid;
    // Misaligned views: the Python layer copies them first; a direct C caller gets SY_EUNSUPPORTED.
    if (!tma_aligned(p.q, p.q_strides, p.batch, p.heads_q, p.seqlen_q) ||
        !tma_aligned(p.dout, p.dout_strides, p.batch, p.heads_q, p.seqlen_q) ||
        !tma_aligned(p.k, p.k_strides, p.batch, p.heads_kv, p.seqlen_k) ||
        !tma_aligned(p.v, p.v_strides, p.batch, p.heads_kv, p.seqlen_k))
        return kUnsupported;
    const int64_t *out_strides[3] = {p.dq_strides, p.dk_strides, p.dv_strides};
    const void *outs[3] = {p.dq, p.dk, p.dv};
    for (int i = 0; i < 3; ++i)
        if (reinterpret_cast<uintptr_t>(outs[i]) % 4 != 0 || out_strides[i][2] % 2 != 0) return kInvalid;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    return p.dtype == SY_ATTN_BF16 ? launch_band256<__nv_bfloat16>(p, s) : launch_band256<__half>(p, s);
}
