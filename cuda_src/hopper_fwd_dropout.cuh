// The `hopper` forward's dropout bits (attention_hopper.cu, kDropoutFlag), drawn by the producer warpgroup.
//
// Hardware fact served: the forward without dropout keeps the tensor cores ~67 % busy only because one
// consumer warpgroup's softmax fits inside the other's GEMMs. Philox4x32-10 (attention_dropout.cuh) is
// ~50 integer instructions per 16 scores, 20 of them 32 x 32 -> 64-bit multiplies in a serial chain of ten
// rounds: in the consumers it lengthened that softmax past the other warpgroup's GEMMs (0.65-0.70x of the
// speed without dropout). Three of the producer warpgroup's four warps are idle (one thread issues every
// TMA copy), each on its own SM sub-partition, so they draw the bits instead, into a shared-memory ring
// that runs one to kSlots key blocks ahead of the consumers; a consumer thread then pays one 16-byte
// shared load per 32 of its scores (conflict-free: a warp reads 512 contiguous bytes) and the masking.
//
// The bits are the same function of (seed, offset, b, h, i, j) as before, bit for bit: each generator warp
// plays one consumer warp's 32 lanes through keep_rows_at (same Philox groups, same lane pairing and
// shuffles, same byte compare), so the backward and the test-only mask kernel keep agreeing with the forward.
// The consumers keep the masking of P's fragments (dropout_rows_apply) and the 1 / (1 - p) at the store.
//
// Hand-offs (mbarriers; arrive = release, wait = acquire):
//   tile_full / tile_empty [2]: the producer thread posts each tile index it hands the consumers (and the
//     final "no more tiles") before loading it; the generators read it. The consumers' own tile word cannot
//     serve: with one Q buffer it can be overwritten before a lagging generator reads it.
//   full / empty [kSlots]: slot kv % kSlots holds the bits of the kv-th K/V block this block consumes (the
//     same count as the K/V ring's); the 96 generator threads fill it, every consumer thread frees it.
#pragma once

#include <type_traits>

#include "attention_dropout.cuh"
#include "hopper_fwd_pipeline.cuh"

namespace sy_attn {
namespace {

#ifndef SY_HOPPER_DROPOUT_RING
#define SY_HOPPER_DROPOUT_RING 1
#endif
constexpr bool kDropoutRing = SY_HOPPER_DROPOUT_RING != 0;

// The launch's dropout for the generators, a kernel parameter (constant bank: every round key an operand,
// no register): the ten round keys, the byte threshold in all four bytes and its low seven bits, and the
// counter base dropout_offset / 4 (make_dropout's).
struct DropKeys {
    RoundKeys round;
    uint32_t threshold4, low7, ctr_lo, ctr_hi;
};

inline DropKeys make_drop_keys(const sy_attn_params &p) {
    DropKeys k;
    k.round = round_keys(p.dropout_seed);
    k.threshold4 = dropout_threshold(p.dropout_p) * 0x01010101u;
    k.low7 = k.threshold4 & 0x7F7F7F7Fu;
    k.ctr_lo = static_cast<uint32_t>(p.dropout_offset / 4);
    k.ctr_hi = static_cast<uint32_t>(p.dropout_offset / 4 >> 32);
    return k;
}

template <class Tr>
struct DropRing {
    static constexpr int kSpans = Tr::kBlockN / 32;                      // keep_rows words per thread per block
#ifndef SY_HOPPER_DROPOUT_CONSUMER_SPANS_D64
#define SY_HOPPER_DROPOUT_CONSUMER_SPANS_D64 0
#endif
#ifndef SY_HOPPER_DROPOUT_CONSUMER_SPANS_D128
#define SY_HOPPER_DROPOUT_CONSUMER_SPANS_D128 0
#endif
    // Spans 0 .. kOwnSpans - 1 of a block the consumers draw themselves (keep_rows), the rest come from the ring.
    static constexpr int kOwnSpans = Tr::kHeadDim == 64 ? SY_HOPPER_DROPOUT_CONSUMER_SPANS_D64 : SY_HOPPER_DROPOUT_CONSUMER_SPANS_D128;
    static constexpr int kGenSpans = kSpans - kOwnSpans;
    static constexpr int kUnits = Tr::kConsumerWGs * 4 * kGenSpans;      // (consumer warp, ring span) pairs per block
    static constexpr int kSlotBytes = kUnits * 32 * 16;                  // a byte per score: 16 KiB at d = 128, 24 at 64
    static constexpr int kGenWarps = 3;                                  // producer warps 1..3
    static constexpr int kHeaderBytes = 128;
    // As many slots (up to 4) as the shared memory left over holds: 3 at d = 128, 4 at d = 64 (2 K/V stages there).
    static constexpr int kRoom = 227 * 1024 - Tr::kSmemBytes - kHeaderBytes;
    static constexpr int kSlots = kRoom / kSlotBytes < 4 ? kRoom / kSlotBytes : 4;
    static constexpr int kBytes = kHeaderBytes + kSlots * kSlotBytes;   // added to Tr::kSmemBytes by the launch
    static_assert(kSlots >= 2, "the ring must let the generators run a block ahead");

    // setmaxnreg: the generators need more than the producer's 24 registers (Philox's state, the shuffled
    // halves, the keep words). The launch allocates 65536 / threads, rounded down to 8, per thread (168 x 384
    // at d = 128, 128 x 512 at d = 64); the split must stay within it: 40 + 2 x 232 at d = 128, where the
    // consumers no longer hold Philox's temporaries; 32 + 3 x 160 at d = 64 uses the 1 KiB the split without
    // dropout leaves.
    static constexpr int kProducerRegs = Tr::kConsumerWGs == 2 ? 40 : 32;
    static constexpr int kConsumerRegs = Tr::kConsumerWGs == 2 ? 232 : 160;
    static_assert(128 * kProducerRegs + 128 * Tr::kConsumerWGs * kConsumerRegs <= (65536 / Tr::kThreads) / 8 * 8 * Tr::kThreads,
                  "the register split exceeds the launch's allocation");

    struct Header {
        uint64_t tile_full[2], tile_empty[2];
        uint64_t full[kSlots], empty[kSlots];
        int tile[2];
    };
    static_assert(sizeof(Header) <= kHeaderBytes, "header");

#ifdef SY_HOPPER_DEVICE_CODE
    Header *hdr;
    unsigned char *data;

    // The ring sits after the consumers' sink (SharedTiles), 16-byte aligned like it.
    __device__ explicit DropRing(const SharedTiles<Tr> &sm)
        : hdr(reinterpret_cast<Header *>(reinterpret_cast<unsigned char *>(sm.sink) + 8 * 128 * Tr::kConsumerWGs)),
          data(reinterpret_cast<unsigned char *>(hdr) + kHeaderBytes) {}

    __device__ void init() const {
        for (int i = 0; i < 2; ++i) {
            mbar_init(smem_addr(&hdr->tile_full[i]), 1);
            mbar_init(smem_addr(&hdr->tile_empty[i]), 32 * kGenWarps);
        }
        for (int s = 0; s < kSlots; ++s) {
            mbar_init(smem_addr(&hdr->full[s]), 32 * kGenWarps);
            mbar_init(smem_addr(&hdr->empty[s]), 128 * Tr::kConsumerWGs);
        }
    }

    // The producer thread: tile t (n_tiles or more: stop) is the tile_iter-th this block walks.
    __device__ void post_tile(int tile_iter, int t) const {
        const int i = tile_iter & 1;
        mbar_wait(smem_addr(&hdr->tile_empty[i]), ((tile_iter >> 1) & 1) ^ 1);
        hdr->tile[i] = t;
        mbar_arrive(smem_addr(&hdr->tile_full[i]));
    }

    // A consumer thread of warpgroup wg: the keep words of its scores in the kv-th block, as keep_rows_all.
    // (row: the thread's first row; col0: the block's first key; p for the spans the consumers draw.)
    __device__ __forceinline__ void load(uint4 (&keep)[kSpans], int kv, int wg, const sy_attn_params &p, int b, int h,
                                         int row, int col0) const {
        if constexpr (kOwnSpans > 0) {
            const Dropout d = make_dropout(p, b, h);
            const RoundKeys k = round_keys(p.dropout_seed);
#pragma unroll
            for (int s = 0; s < kOwnSpans; ++s) keep[s] = keep_rows(d, k, row, col0 + 32 * s, threadIdx.x % 32);
        }
        const int slot = kv % kSlots;
        mbar_wait(smem_addr(&hdr->full[slot]), (kv / kSlots) & 1);
        const uint32_t base = smem_addr(data + slot * kSlotBytes) +
                              ((wg * 4 + (threadIdx.x % 128) / 32) * kGenSpans * 32 + threadIdx.x % 32) * 16;
#pragma unroll
        for (int s = kOwnSpans; s < kSpans; ++s)
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(keep[s].x), "=r"(keep[s].y), "=r"(keep[s].z), "=r"(keep[s].w)
                         : "r"(base + (s - kOwnSpans) * 32 * 16));
        mbar_arrive(smem_addr(&hdr->empty[slot]));
    }

    // Per byte of x, its top bit: byte < the threshold's (keep_bits's SWAR compare without its final AND; the
    // consumers read only the top bits: dropout_rows_apply's sign-replicating PRMT).
    static __device__ __forceinline__ uint32_t keep_top(uint32_t x, uint32_t t4, uint32_t t4_low7) {
        const uint32_t low_ge = (x | 0x80808080u) - t4_low7;
        return (~x & t4) | (~(x ^ t4) & ~low_ge);
    }
    static __device__ __forceinline__ void store2(uint32_t addr, uint32_t a, uint32_t b) {
        asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(addr), "r"(a), "r"(b) : "memory");
    }
    // Group (row group rg, column group cg) of the head's counter into unit `unit` of a slot: its row-parity-0
    // words (x, y) belong to consumer lane l & ~4, its parity-1 words (z, w) to lane l | 4, each at byte 8 e of
    // the lane's 16 (the span half this lane's group is) -- where keep_rows's shuffle would have put them.
    static __device__ __forceinline__ void store_group(uint32_t unit, uint32_t off0, uint32_t off1, uint4 w,
                                                       const DropKeys &keys) {
        store2(unit + off0, keep_top(w.x, keys.threshold4, keys.low7), keep_top(w.y, keys.threshold4, keys.low7));
        store2(unit + off1, keep_top(w.z, keys.threshold4, keys.low7), keep_top(w.w, keys.threshold4, keys.low7));
    }
    static __device__ __forceinline__ void make_group(uint32_t unit, uint32_t off0, uint32_t off1, uint32_t ctr0,
                                                      uint32_t ctr1, uint32_t rg, uint32_t cg, const DropKeys &keys) {
        store_group(unit, off0, off1, philox4x32_10_keys(make_uint4(ctr0, ctr1, rg, cg), keys.round), keys);
    }

    // Producer warps 1..3: the bits of every block of every tile the producer thread posts, in its order.
    // Unit u (a consumer warp's 32-key span) is made by generator warp u % 3, its lane l making the group that
    // consumer lane l's keep_rows would make (same Philox counter) and storing both halves where they belong,
    // with no shuffle. Two units per pass where the warp has two left: their Philox chains interleave (one is
    // ten dependent multiply-xor rounds; a generator warp is alone on its sub-partition's integer work).
    template <int kMode>
    __device__ void generate(const TileScheduler &sched, const sy_attn_params &p, Band band, const DropKeys &keys) const {
        const int gen = threadIdx.x / 32 - 1, lane = threadIdx.x % 32, e = (lane >> 2) & 1;
        const uint32_t off0 = (lane & ~4) * 16 + 8 * e, off1 = (lane | 4) * 16 + 8 * e;
        int kv = 0;
        for (int tile_iter = 0;; ++tile_iter) {
            const int i = tile_iter & 1;
            mbar_wait(smem_addr(&hdr->tile_full[i]), (tile_iter >> 1) & 1);
            const int t = __shfl_sync(0xffffffffu, *reinterpret_cast<volatile int *>(&hdr->tile[i]), 0);
            mbar_arrive(smem_addr(&hdr->tile_empty[i]));
            if (t >= sched.n_tiles) return;
            const TileWork w = uniform(tile_work<Tr, kMode>(sched, t, p, band, 0, 0));
            // make_dropout's counter for head (b, h).
            const uint64_t ctr = (uint64_t(keys.ctr_hi) << 32 | keys.ctr_lo) + static_cast<uint64_t>(w.b) * p.heads_q + w.h;
            const uint32_t ctr0 = static_cast<uint32_t>(ctr), ctr1 = static_cast<uint32_t>(ctr >> 32);
            // Row group of consumer warp 0's rows (m0 is a multiple of 64, so row / 16 = m0 / 16 + warp), and
            // column group of the tile's first block's first span (col0 / 16 = block * kBlockN / 16).
            const uint32_t rg0 = w.m0 / 4 + ((lane >> 2) & 7) / 2;
            uint32_t cg0 = w.first_block * (Tr::kBlockN / 4) + e * 4 + lane % 4;
            for (const int kv_end = kv + w.n_blocks; kv < kv_end; ++kv, cg0 += Tr::kBlockN / 4) {
                const int slot = kv % kSlots;
                mbar_wait(smem_addr(&hdr->empty[slot]), ((kv / kSlots) & 1) ^ 1);
                const uint32_t base = smem_addr(data + slot * kSlotBytes);
                int u = gen;
                for (; u + kGenWarps < kUnits; u += 2 * kGenWarps) {
                    const int v = u + kGenWarps;
                    uint4 a = make_uint4(ctr0, ctr1, rg0 + (u / kGenSpans) * 4, cg0 + (kOwnSpans + u % kGenSpans) * 8);
                    uint4 b = make_uint4(ctr0, ctr1, rg0 + (v / kGenSpans) * 4, cg0 + (kOwnSpans + v % kGenSpans) * 8);
                    philox4x32_10_keys2(a, b, keys.round);
                    store_group(base + u * 512, off0, off1, a, keys);
                    store_group(base + v * 512, off0, off1, b, keys);
                }
                if (u < kUnits)
                    make_group(base + u * 512, off0, off1, ctr0, ctr1, rg0 + (u / kGenSpans) * 4, cg0 + (kOwnSpans + u % kGenSpans) * 8, keys);
                mbar_arrive(smem_addr(&hdr->full[slot]));
            }
        }
    }
#endif  // SY_HOPPER_DEVICE_CODE
};

// d = 64 with dropout: 2 K/V stages instead of 4 (the same speed without dropout: hopper_traits.cuh), which
// frees 64 KiB for the ring's 24 KiB slots (with 4 stages one slot fits: the generators could not run ahead).
using HopperTraitsD64Dropout =
    std::conditional_t<kDropoutRing, HopperTraits<64, SY_HOPPER_D64_BLOCK_N, 2, SY_HOPPER_D64_CONSUMERS, SY_HOPPER_D64_Q_IN_REGISTERS>,
                       HopperTraitsD64>;

// The launch's extra shared memory (the ring with dropout, none without) and the setmaxnreg split; without
// dropout DropRing<Tr> is never instantiated (its traits may leave no room for it).
template <class Tr, int kMode>
__host__ __device__ constexpr int drop_ring_bytes() {
    if constexpr ((kMode & kDropoutFlag) != 0 && kDropoutRing) return DropRing<Tr>::kBytes;
    else return 0;
}
template <class Tr, int kMode>
__host__ __device__ constexpr int producer_regs() {
    if constexpr ((kMode & kDropoutFlag) != 0 && kDropoutRing) return DropRing<Tr>::kProducerRegs;
    else return Tr::kProducerRegs;
}
template <class Tr, int kMode>
__host__ __device__ constexpr int consumer_regs() {
    if constexpr ((kMode & kDropoutFlag) != 0 && kDropoutRing) return DropRing<Tr>::kConsumerRegs;
    else return Tr::kConsumerRegs;
}

}  // namespace
}  // namespace sy_attn
