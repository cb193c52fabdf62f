// Tensor-core building blocks shared by the `mma` forward and backward kernels: PTX wrappers
// (cp.async, ldmatrix, mma.sync m16n8k16), the swizzled tile copy and the ldmatrix lane addressing.
//
// A traits class `Tr` passed to the templates below provides kHeadDim, kChunks (16-byte chunks per
// row), kSwizzleRows (8) and kNThreads: the tiles are [rows][kHeadDim] 2-byte elements with chunk c
// of row r stored at c ^ (r % 8) (kernel_traits.cuh says why).
#pragma once

#include "attention_common.cuh"

namespace sy_attn {

// ---- PTX wrappers ---------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1 (.cg); src_bytes = 0 zero-fills (rows past the end).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D += A (16x16, row) * B (16x8, col); fp32 accumulate.
template <typename T> struct MmaOp;
template <> struct MmaOp<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t pair) {
        return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&pair));
    }
};
template <> struct MmaOp<__half> {
    static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t pair) {
        return __half22float2(*reinterpret_cast<const __half2 *>(&pair));
    }
};

// Issue the cp.async copies of rows [row0, row0 + kRows) of a (N, d) head slice into a swizzled
// shared tile; rows at or past n_rows are zero-filled (their scores are masked, their values unused).
// Thread t copies chunk t % kChunks of rows t / kChunks + i * kRowsPerPass: consecutive threads read
// consecutive 16 bytes of a row, and since kRowsPerPass is a multiple of 8 a thread's rows share
// row % 8, so its swizzled destination is one base plus a constant per pass (no address registers).
template <class Tr, int kRows, typename T>
__device__ __forceinline__ void load_tile_async(uint32_t sTile_addr, const T *gHead, int64_t row_stride, int row0,
                                                int n_rows) {
    constexpr int kRowsPerPass = Tr::kNThreads / Tr::kChunks;
    static_assert(kRowsPerPass % Tr::kSwizzleRows == 0 && kRows % kRowsPerPass == 0, "see above");
    const int row = threadIdx.x / Tr::kChunks, chunk = threadIdx.x % Tr::kChunks;
    const uint32_t dst = sTile_addr + row * Tr::kHeadDim * 2 + ((chunk ^ (row % Tr::kSwizzleRows)) << 4);
    const T *src = gHead + (row0 + row) * row_stride + chunk * 8;
#pragma unroll
    for (int i = 0; i < kRows / kRowsPerPass; ++i) {
        const bool inside = row0 + row + i * kRowsPerPass < n_rows;
        cp_async_16(dst + i * kRowsPerPass * Tr::kHeadDim * 2, inside ? src + i * kRowsPerPass * row_stride : gHead,
                    inside ? 16 : 0);
    }
}

// ldmatrix addressing without per-step address registers. A lane reads logical chunk 2k + b
// (b = 0 or 1, fixed per lane; k a compile-time step) of a row whose index is r modulo 8. Its
// physical chunk is (2k + b) ^ r = 2k ^ (b ^ r) within the 128-byte line, so the lane computes
// once lane_addr = row start + ((b ^ r) << 4), and each step is lane_addr ^ ((2k & 7) << 4) plus
// the whole lines (2k >> 3) * 128: one LOP3 with an immediate. Exact because tiles, stages and rows
// all start 128-byte aligned (row strides are 128 or 256 bytes), so the XOR touches only bits 4-6.
template <class Tr>
__device__ __forceinline__ uint32_t lane_chunk_addr(uint32_t tile_addr, int row, int b) {
    return tile_addr + row * Tr::kHeadDim * 2 + ((b ^ (row % Tr::kSwizzleRows)) << 4);
}
__device__ __forceinline__ uint32_t step_addr(uint32_t lane_addr, int even_chunk) {
    return (lane_addr ^ ((even_chunk & 7) << 4)) + ((even_chunk >> 3) << 7);
}

}  // namespace sy_attn
