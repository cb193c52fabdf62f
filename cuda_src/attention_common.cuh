// What every attention kernel file shares: status codes, element conversion, parameter checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "attention_api.h"

namespace sy_attn {

// The sy_status values of c_src/platform.h (this tree ships alone in a wheel, so they are restated).
constexpr int kOk = 0;
constexpr int kInvalid = -1;       // SY_EINVAL
constexpr int kUnsupported = -5;   // SY_EUNSUPPORTED

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Checks shared by every kernel family: the Python layer validates first, this keeps a direct C
// caller from launching out-of-bounds work. CUDA grids cap y and z at 65535 (heads, batch).
inline int check_params(const sy_attn_params *p) {
    if (!p || !p->q || !p->k || !p->v || !p->o || !p->lse) return kInvalid;
    if (p->batch < 1 || p->batch > 65535 || p->heads_q < 1 || p->heads_q > 65535) return kInvalid;
    if (p->heads_kv < 1 || p->heads_q % p->heads_kv != 0) return kInvalid;
    if (p->seqlen_q < 1 || p->seqlen_k < 1 || p->head_dim < 1) return kInvalid;
    if (p->dtype != SY_ATTN_F32 && p->dtype != SY_ATTN_F16 && p->dtype != SY_ATTN_BF16) return kInvalid;
    if (!(p->dropout_p >= 0.f && p->dropout_p < 1.f)) return kInvalid;   // NaN too
    return kOk;
}

// The status of the launches just enqueued: 0 or the cudaError_t (positive) that the caller names
// with sy_attn_error_string. Asynchronous faults surface at the caller's next synchronisation.
inline int launch_status() {
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? kOk : static_cast<int>(err);
}

// 16-byte cp.async (and TMA) needs every row start 16-byte aligned: the base pointer and the
// batch/head/row strides (in 2-byte elements, multiples of 8).
inline bool aligned16(const void *ptr, const int64_t strides[3]) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
    for (int i = 0; i < 3; ++i)
        if (strides[i] % 8 != 0) return false;
    return true;
}

// The base of head (b, h) in a (B, H, N, d) tensor given by strides in elements.
template <typename T>
__device__ __forceinline__ T *head_base(T *ptr, const int64_t strides[3], int b, int h) {
    return ptr + b * strides[0] + h * strides[1];
}

}  // namespace sy_attn
