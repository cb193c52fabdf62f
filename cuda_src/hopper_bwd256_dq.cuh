// The d = 256 wgmma backward's dQ atomics (attention_hopper_bwd256.cu): atomic_add_rows' adds in fewer instructions.
#pragma once

#include "hopper_primitives.cuh"

namespace sy_attn {
namespace {

#ifdef SY_HOPPER_DEVICE_CODE
// red.global.add.v4.f32 at addr where pred holds: what atomicAdd(float4 *) compiles to (relaxed, gpu scope, round
// to nearest: REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU), under a PTX predicate (ptxas still makes it a branch around the
// add, but over the add and its four selects only, the address and the test computed once).
__device__ __forceinline__ void red_add_v4_if(const float *addr, float x, float y, float z, float w, bool pred) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n@p red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n}\n"
                 ::"l"(addr), "f"(x), "f"(y), "f"(z), "f"(w), "r"(static_cast<int>(pred)) : "memory");
}

// This warp's 16 rows (row0 ..) of an m64 accumulator's kNTiles n8 tiles added to row-major fp32 rows (row_stride
// floats apart), rows >= n_rows left out: atomic_add_rows (attention_bwd_common.cuh), the same float4 adds at the
// same addresses. There the row's 64-bit address was rebuilt for each add (six instructions) and the float4 made
// by conditional moves; here one address (each n8 tile's offset lands in the RED's immediate) and test serve all
// kNTiles adds, and the float4 is four selects (d = 256: 22 -> 13 instructions an add).
template <int kNTiles>
__device__ __forceinline__ void dq_add_rows(float *gHead, int row_stride, int row0, int n_rows,
                                            const float (&acc)[kNTiles][4], int lane) {
    const bool even = lane % 2 == 0;
    const int row = row0 + lane / 4 + (even ? 0 : 8);
    const float *gRow = gHead + static_cast<int64_t>(row) * row_stride + (lane % 4 - (even ? 0 : 1)) * 2;
    const bool in = row < n_rows;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
        // even lanes give away their row-(g+8) pair, odd lanes their row-g pair
        const float give0 = even ? acc[nt][2] : acc[nt][0], give1 = even ? acc[nt][3] : acc[nt][1];
        const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
        red_add_v4_if(gRow + nt * 8, even ? acc[nt][0] : got0, even ? acc[nt][1] : got1, even ? got0 : acc[nt][2],
                      even ? got1 : acc[nt][3], in);
    }
}
#endif  // SY_HOPPER_DEVICE_CODE

}  // namespace
}  // namespace sy_attn
