// What the two sm_90a kernels (attention_hopper.cu forward, attention_hopper_bwd.cu backward) share:
// PTX wrappers for mbarriers, the bulk copy engine (TMA), wgmma, named barriers and register
// reconfiguration (device side, only where the sm_90a features exist), and on the host the tensor
// maps and the checks that decide whether a call can take these kernels.
#pragma once

#include <atomic>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "attention_common.cuh"
#include "hopper_wgmma.cuh"
#include "mma_primitives.cuh"   // smem_addr

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SY_HOPPER_DEVICE_CODE 1
#endif

namespace sy_attn {
namespace {

#ifdef SY_HOPPER_DEVICE_CODE
// ---- PTX wrappers: mbarriers, TMA, wgmma, named barriers, register reconfiguration -----------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals));
}
// The producer's own arrival, announcing that `bytes` will land on this barrier's phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
// Release: this thread's reads of the stage (its wgmma completed) happen before the producer's refill.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Acquire: the copy engine's writes of the completed phase are visible after this returns.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done) {
        asm volatile(
            "{\n.reg .pred p;\n"
            "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}

// One box of a 4-d tensor map (d, N, heads, batch) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int col, int row,
                                            int head, int batch) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(col), "r"(row), "r"(head), "r"(batch)
        : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned) into shared memory by
// the copy engine, completing on `bar` like a tensor copy.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// `bytes` (a multiple of 16) of fp32 in shared memory added element-wise into global memory by the copy
// engine (the adds happen at L2, as red.global's do), in this thread's bulk group.
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// At most kPending of this thread's bulk groups still read their shared-memory source.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// A counter in global memory other blocks wait on (the deterministic backward's per-tile turns):
// acquire load and release add at GPU scope.
__device__ __forceinline__ int ld_acquire_gpu(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release_gpu_add(int *p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// This thread's generic-proxy shared-memory stores become visible to the async proxy (wgmma operands
// read through descriptors) once the threads that wgmma's warpgroup waits for have synchronised.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// wgmma shared-memory matrix descriptor for a 128-byte-swizzled tile: start address, leading and
// stride byte offsets (all >> 4) and the swizzle mode (1 = 128B, bits 62-63). K-major (the forward's
// Q, K; the backward's K, V, Q, dO for S^T and dP^T): SBO = 1024 bytes from one 8-row atom to the next,
// LBO unused (encoded 1) since a k16 slice (32 bytes) lies inside one 128-byte row. MN-major (the
// forward's V; the backward's dO, Q, K and dS^T): LBO = the stride between 64-column panels along M or
// N, SBO = 1024 bytes between groups of 8 rows along K.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo_bytes >> 4) << 16) |
           (static_cast<uint64_t>(sbo_bytes >> 4) << 32) | (1ull << 62);
}

// The descriptor of addr + offset_bytes, from addr's: the start address field (bits 0-13) is
// addr >> 4, and shared-memory addresses stay below 2^18, so the add never carries out of it. A
// kernel builds each tile's descriptor once and steps through it with constants (one integer add
// per wgmma instead of the mask, shift and or of smem_desc on every address).
__device__ __forceinline__ uint64_t desc_at(uint64_t desc, uint32_t offset_bytes) { return desc + (offset_bytes >> 4); }

// Shared-memory accesses by 32-bit shared address: LDS / STS / STSM. Through a generic pointer the compiler emits
// LD / ST with 64-bit address arithmetic and the state-space check, a few instructions more per access.
__device__ __forceinline__ float2 lds_float2(uint32_t addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void sts_float4(uint32_t addr, float x, float y, float z, float w) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}
__device__ __forceinline__ void sts_u32x4(uint32_t addr, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
__device__ __forceinline__ uint4 lds_u32x4(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
    return v;
}
// Four 8 x 8 16-bit matrices from registers into shared memory (lane l addresses row l % 8 of matrix l / 8):
// register i of each lane holds its two elements of matrix i as an mma accumulator fragment does.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3) : "memory");
}
// The same with each matrix transposed (.trans): lane l addresses row l % 8 of matrix l / 8 of the transpose.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3) : "memory");
}

// Order this warp's earlier register writes (O rescale, P) before the wgmma that reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins a register array in place across the asynchronous GEMM: the compiler may neither read it
// before the wait that completes the wgmma writing it nor move writes past the wgmma reading it.
template <int kN>
__device__ __forceinline__ void fence_regs(float (&r)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kN>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[kN][4]) {
#pragma unroll
    for (int i = 0; i < kN; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) asm volatile("" : "+r"(r[i][c])::"memory");
}

// Named barriers 1 and 2 (0 is __syncthreads) order the two consumer warpgroups' GEMM issue.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int kRegs>
__device__ __forceinline__ void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
template <int kRegs>
__device__ __forceinline__ void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }

template <int kN> struct WgmmaN;
template <> struct WgmmaN<64> { template <typename T> using Op = WgmmaM64N64<T>; };
template <> struct WgmmaN<80> { template <typename T> using Op = WgmmaM64N80<T>; };
template <> struct WgmmaN<128> { template <typename T> using Op = WgmmaM64N128<T>; };
template <> struct WgmmaN<176> { template <typename T> using Op = WgmmaM64N176<T>; };
template <> struct WgmmaN<192> { template <typename T> using Op = WgmmaM64N192<T>; };
template <> struct WgmmaN<256> { template <typename T> using Op = WgmmaM64N256<T>; };

#endif  // SY_HOPPER_DEVICE_CODE

// ---- host: tensor maps and launch -------------------------------------------------------------------
// cuTensorMapEncodeTiled lives in the driver library; asking the runtime for its entry point avoids
// linking -lcuda. The pointer is looked up once (a function-local static: thread-safe, immutable).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            fn = nullptr;
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }();
    return encode;
}

// A (B, H, N, d) tensor as the 4-d map (d, N, H, B) with boxes of 64 columns x box_rows rows,
// 128B-swizzled; rows past N read as zeros. A dimension of extent 1 is never stepped along, so its
// stride (torch allows any there) is replaced by the packed one.
inline int encode_map(CUtensorMap *map, const void *base, int dtype, int d, int n, int heads, int batch,
               const int64_t strides[3], int box_rows) {
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode) return kUnsupported;
    const cuuint64_t dims[4] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(n), static_cast<cuuint64_t>(heads),
                                static_cast<cuuint64_t>(batch)};
    cuuint64_t row = strides[2] * 2;
    cuuint64_t head = heads > 1 ? strides[1] * 2 : row * n;
    cuuint64_t batch_stride = batch > 1 ? strides[0] * 2 : head * heads;
    if (n == 1) row = d * 2;
    const cuuint64_t byte_strides[3] = {row, head, batch_stride};
    const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    const CUtensorMapDataType type =
        dtype == SY_ATTN_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const CUresult r = encode(map, type, 4, const_cast<void *>(base), dims, byte_strides, box, element_strides,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? kOk : kInvalid;
}

// TMA reads from 16-byte aligned addresses with 16-byte multiple strides; the stride of a dimension
// of extent 1 is never used (encode_map replaces it).
inline bool tma_aligned(const void *ptr, const int64_t strides[3], int batch, int heads, int rows) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
    const int extents[3] = {batch, heads, rows};
    for (int i = 0; i < 3; ++i)
        if (extents[i] > 1 && strides[i] % 8 != 0) return false;
    return true;
}

inline bool device_is_sm90() {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) return false;
    return major == 9 && minor == 0;
}

// Host fact served: cudaFuncGetAttributes, cudaFuncSetAttribute and cudaDeviceGetAttribute are runtime
// calls of a microsecond or more each, and at N <= 1024 a whole kernel runs tens of microseconds: what
// cannot change between calls is asked once per kernel (or per process) and device, then read from a
// word of bits (one per device; devices past 63 ask every time).
inline unsigned long long device_bit(int device) { return device >= 0 && device < 64 ? 1ull << device : 0; }

// kKernel's sm_90a body exists (a library built for another arch has an empty kernel) and its dynamic
// shared memory may grow to smem_bytes, on the current device: kOk, kUnsupported or a CUDA error.
template <auto kKernel>
int prepare_kernel(int smem_bytes) {
    static std::atomic<unsigned long long> ready{0};
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return static_cast<int>(err);
    const unsigned long long bit = device_bit(device);
    if (ready.load(std::memory_order_acquire) & bit) return kOk;
    cudaFuncAttributes attrs;
    if ((err = cudaFuncGetAttributes(&attrs, kKernel)) != cudaSuccess) return static_cast<int>(err);
    if (attrs.binaryVersion != 90) return kUnsupported;
    if ((err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes)) != cudaSuccess)
        return static_cast<int>(err);
    ready.fetch_or(bit, std::memory_order_release);
    return kOk;
}

// The current device's SM count (0 with *err set on failure).
inline int current_sm_count(cudaError_t *err) {
    static std::atomic<int> known[64];   // zero-initialised: 0 means not asked yet
    int device = 0, sms = 0;
    if ((*err = cudaGetDevice(&device)) != cudaSuccess) return 0;
    if (device_bit(device) && (sms = known[device].load(std::memory_order_relaxed)) > 0) return sms;
    if ((*err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return 0;
    if (device_bit(device)) known[device].store(sms, std::memory_order_relaxed);
    return sms;
}


}  // namespace
}  // namespace sy_attn
