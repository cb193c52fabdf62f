// The `hopper` forward's (attention_hopper.cu) way out for O: a consumer warpgroup's normalised 64 x d tile
// through shared memory and the copy engine. Hardware fact it serves: a warp's register fragment of O maps onto
// 8 x 8 matrices that stmatrix writes whole, and one TMA tensor store moves 16 rows x 128 bytes to global memory
// asynchronously, where direct stores take d / 4 scattered 4-byte stores a thread (8 rows x 16 bytes a warp
// instruction); the warpgroup is back at the tensor cores sooner. The buffer layout and its size are
// hopper_traits.cuh's (kStageO, kOBytesPerWG) and hopper_fwd_pipeline.cuh's (SharedTiles::o).
#pragma once

#include "hopper_primitives.cuh"   // bulk groups, fence_proxy_async_shared, stmatrix_x4, SY_HOPPER_DEVICE_CODE
#include "hopper_traits.cuh"
#include "mma_primitives.cuh"      // MmaOp<T>::pack

namespace sy_attn {
namespace {

#ifdef SY_HOPPER_DEVICE_CODE
// One box of shared memory into a 4-d tensor map (d, N, heads, batch) by the copy engine, in this thread's bulk
// group; rows past the map's N are not written.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, uint32_t src, int col, int row, int head, int batch) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(col), "r"(row), "r"(head), "r"(batch)
                 : "memory");
}

// The warpgroup's normalised O (acc, its wgmma accumulator fragments) out through its shared buffer wg_buf
// ([kPanels][64][64], 128B-swizzled), each warp its own 16 rows: 16 x 16 blocks by stmatrix into the panels
// (16-byte chunk index XOR the row inside its 8-row atom, as TMA reads them), then, once the warp's stores are
// visible to the copy engine, its lane 0 issues a tensor store of 16 rows per 64-column panel (rows
// first_row.., head h, batch b of tm_o; the copy engine clips rows past the map's N). Per warp, so no barrier
// makes a warp wait for the other three (one buffer per warpgroup behind a 128-thread barrier measured level:
// docs/notes-hopper.md fwd21c). The caller has made sure the store of the tile before has read the buffer.
template <class Tr, typename T>
__device__ __forceinline__ void store_o_staged(uint32_t wg_buf, const CUtensorMap *tm_o, const float (&acc)[1][Tr::kHeadDim / 8][4],
                                               int first_row, int h, int b) {
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32, m = lane / 8;
    const uint32_t buf = wg_buf + warp * 16 * Tr::kRowBytes;
    const int row = (m % 2) * 8 + lane % 8;   // this lane's address row among the warp's 16
#pragma unroll
    for (int i = 0; i < Tr::kHeadDim / 16; ++i) {
        const int col = 16 * i + (m / 2) * 8;
        const uint32_t addr = buf + (col / Tr::kPanelCols) * (Tr::kRowsPerWG * Tr::kRowBytes) + row * Tr::kRowBytes +
                              ((((col % Tr::kPanelCols) / 8) ^ (row % 8)) * 16);
        stmatrix_x4(addr, MmaOp<T>::pack(acc[0][2 * i][0], acc[0][2 * i][1]), MmaOp<T>::pack(acc[0][2 * i][2], acc[0][2 * i][3]),
                    MmaOp<T>::pack(acc[0][2 * i + 1][0], acc[0][2 * i + 1][1]),
                    MmaOp<T>::pack(acc[0][2 * i + 1][2], acc[0][2 * i + 1][3]));
    }
    fence_proxy_async_shared();   // the generic-proxy stores, visible to the copy engine's reads
    __syncwarp();
    if (lane == 0) {
#pragma unroll
        for (int panel = 0; panel < Tr::kPanels; ++panel)
            tma_store_4d(tm_o, buf + panel * Tr::kRowsPerWG * Tr::kRowBytes, panel * Tr::kPanelCols, first_row + warp * 16, h, b);
        bulk_commit();
    }
}
#endif  // SY_HOPPER_DEVICE_CODE

}  // namespace
}  // namespace sy_attn
