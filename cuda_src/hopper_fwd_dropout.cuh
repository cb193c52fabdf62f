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

#include "attention_dropout.cuh"
#include "hopper_fwd_pipeline.cuh"

namespace sy_attn {
namespace {

template <class Tr>
struct DropRing {
    static constexpr int kSpans = Tr::kBlockN / 32;                      // keep_rows words per thread per block
    static constexpr int kUnits = Tr::kConsumerWGs * 4 * kSpans;         // (consumer warp, span) pairs per block
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
        uint32_t key[4];        // the seed and the byte threshold (x4), for the generators' per-call reads
        uint32_t ctr_base[2];   // dropout_offset / 4, the counter base of make_dropout
    };
    static_assert(sizeof(Header) <= kHeaderBytes, "header");

#ifdef SY_HOPPER_DEVICE_CODE
    Header *hdr;
    unsigned char *data;

    // The ring sits after the consumers' sink (SharedTiles), 16-byte aligned like it.
    __device__ explicit DropRing(const SharedTiles<Tr> &sm)
        : hdr(reinterpret_cast<Header *>(reinterpret_cast<unsigned char *>(sm.sink) + 8 * 128 * Tr::kConsumerWGs)),
          data(reinterpret_cast<unsigned char *>(hdr) + kHeaderBytes) {}

    __device__ void init(const sy_attn_params &p) const {
        hdr->key[0] = static_cast<uint32_t>(p.dropout_seed);
        hdr->key[1] = static_cast<uint32_t>(p.dropout_seed >> 32);
        hdr->key[2] = dropout_threshold(p.dropout_p) * 0x01010101u;
        hdr->ctr_base[0] = static_cast<uint32_t>(p.dropout_offset / 4);
        hdr->ctr_base[1] = static_cast<uint32_t>(p.dropout_offset / 4 >> 32);
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
    __device__ __forceinline__ void load(uint4 (&keep)[kSpans], int kv, int wg) const {
        const int slot = kv % kSlots;
        mbar_wait(smem_addr(&hdr->full[slot]), (kv / kSlots) & 1);
        const uint32_t base = smem_addr(data + slot * kSlotBytes) +
                              ((wg * 4 + (threadIdx.x % 128) / 32) * kSpans * 32 + threadIdx.x % 32) * 16;
#pragma unroll
        for (int s = 0; s < kSpans; ++s)
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(keep[s].x), "=r"(keep[s].y), "=r"(keep[s].z), "=r"(keep[s].w)
                         : "r"(base + s * 32 * 16));
        mbar_arrive(smem_addr(&hdr->empty[slot]));
    }

    // The seed and threshold re-read per Philox call (a volatile shared load ptxas cannot hoist): from the
    // parameters it hoists Philox's 18 round keys out of every loop into live registers, which spilled the
    // producer's.
    __device__ __forceinline__ void load_key(Dropout &d) const {
        asm volatile("ld.volatile.shared.v2.u32 {%0, %1}, [%3];\n\tld.volatile.shared.u32 %2, [%3 + 8];\n"
                     : "=r"(d.k0), "=r"(d.k1), "=r"(d.threshold4)
                     : "r"(smem_addr(hdr->key)));
    }
    static __device__ __forceinline__ void store(uint32_t addr, uint4 k) {
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(k.x), "r"(k.y), "r"(k.z), "r"(k.w)
                     : "memory");
    }

    // Producer warps 1..3: the bits of every block of every tile the producer thread posts, in its order.
    // Unit u (a consumer warp's span) is made by generator warp u % 3: its lanes stand for that consumer
    // warp's lanes, so keep_rows_at's shuffles pair the same lanes and the stored uint4 is the consumer
    // lane's. Registers are few here (setmaxnreg above): the groups are stepped, not recomputed from rows.
    template <int kMode>
    __device__ void generate(const TileScheduler &sched, const sy_attn_params &p, Band band) const {
        const int gen = threadIdx.x / 32 - 1, lane = threadIdx.x % 32, e = (lane >> 2) & 1;
        int kv = 0;
        for (int tile_iter = 0;; ++tile_iter) {
            const int i = tile_iter & 1;
            mbar_wait(smem_addr(&hdr->tile_full[i]), (tile_iter >> 1) & 1);
            const int t = __shfl_sync(0xffffffffu, *reinterpret_cast<volatile int *>(&hdr->tile[i]), 0);
            mbar_arrive(smem_addr(&hdr->tile_empty[i]));
            if (t >= sched.n_tiles) return;
            const TileWork w = uniform(tile_work<Tr, kMode>(sched, t, p, band, 0, 0));
            // The head's counter (make_dropout's), its launch base offset / 4 read from shared memory per tile
            // (from the parameters ptxas hoists it out of every loop, and spilled it).
            Dropout d;
            uint32_t base_lo, base_hi;
            asm volatile("ld.volatile.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(base_lo), "=r"(base_hi)
                         : "r"(smem_addr(hdr->ctr_base)));
            const uint64_t ctr = (uint64_t(base_hi) << 32 | base_lo) + static_cast<uint64_t>(w.b) * p.heads_q + w.h;
            d.ctr0 = static_cast<uint32_t>(ctr);
            d.ctr1 = static_cast<uint32_t>(ctr >> 32);
            // Row group of consumer warp 0's rows (m0 is a multiple of 64, so row / 16 = m0 / 16 + warp), and
            // column group of the tile's first block's first span (col0 / 16 = block * kBlockN / 16).
            const uint32_t rg0 = w.m0 / 4 + ((lane >> 2) & 7) / 2;
            uint32_t cg0 = w.first_block * (Tr::kBlockN / 4) + e * 4 + lane % 4;
            for (const int kv_end = kv + w.n_blocks; kv < kv_end; ++kv, cg0 += Tr::kBlockN / 4) {
                const int slot = kv % kSlots;
                mbar_wait(smem_addr(&hdr->empty[slot]), ((kv / kSlots) & 1) ^ 1);
                const uint32_t base = smem_addr(data + slot * kSlotBytes) + lane * 16;
                // One Philox call per pass: two interleaved chains (more in flight while each waits on its
                // multiplies) need ~16 registers more, which spilled the consumers they were taken from.
                for (int u = gen; u < kUnits; u += kGenWarps) {
                    load_key(d);
                    store(base + u * 32 * 16, keep_rows_at(d, rg0 + (u / kSpans) * 4, cg0 + (u % kSpans) * 8, e));
                }
                mbar_arrive(smem_addr(&hdr->full[slot]));
            }
        }
    }
#endif  // SY_HOPPER_DEVICE_CODE
};

// d = 64 with dropout: 2 K/V stages instead of 4 (the same speed without dropout: hopper_traits.cuh), which
// frees 64 KiB for the ring's 24 KiB slots (with 4 stages one slot fits: the generators could not run ahead).
using HopperTraitsD64Dropout = HopperTraits<64, SY_HOPPER_D64_BLOCK_N, 2, SY_HOPPER_D64_CONSUMERS, SY_HOPPER_D64_Q_IN_REGISTERS>;

// The launch's extra shared memory (the ring with dropout, none without) and the setmaxnreg split; without
// dropout DropRing<Tr> is never instantiated (its traits may leave no room for it).
template <class Tr, int kMode>
__host__ __device__ constexpr int drop_ring_bytes() {
    if constexpr ((kMode & kDropoutFlag) != 0) return DropRing<Tr>::kBytes;
    else return 0;
}
template <class Tr, int kMode>
__host__ __device__ constexpr int producer_regs() {
    if constexpr ((kMode & kDropoutFlag) != 0) return DropRing<Tr>::kProducerRegs;
    else return Tr::kProducerRegs;
}
template <class Tr, int kMode>
__host__ __device__ constexpr int consumer_regs() {
    if constexpr ((kMode & kDropoutFlag) != 0) return DropRing<Tr>::kConsumerRegs;
    else return Tr::kConsumerRegs;
}

}  // namespace
}  // namespace sy_attn
