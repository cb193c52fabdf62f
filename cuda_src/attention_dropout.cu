// The dropout keep-mask as a tensor, for tests only: each thread makes one Philox group of
// attention_dropout.cuh (16 scores: rows {i0, i0 + 1} + {0, 8}, columns {j0, j0 + 1} + {0, 8}) with the
// kernels' own generator and byte threshold, and writes its 16 keep flags. The fused kernels never
// store a mask; a test compares them against a float64 reference that applies this one.
//
// Hardware fact served: none worth a tuning (it is O(N^2) bytes of output by design); one thread per
// group so that the bytes come from exactly the calls the kernels make, not from a re-derivation.
#include <algorithm>

#include "attention_dropout.cuh"

namespace sy_attn {
namespace {

constexpr int kMaskThreads = 256;

__global__ void __launch_bounds__(kMaskThreads)
dropout_mask_kernel(unsigned char *mask, int heads, int seqlen_q, int seqlen_k, float dropout_p, uint64_t seed,
                    uint64_t offset) {
    struct {
        float dropout_p;
        uint64_t dropout_seed, dropout_offset;
        int heads_q;
    } p{dropout_p, seed, offset, heads};
    const int h = blockIdx.y, b = blockIdx.z;
    const Dropout d = make_dropout(p, b, h);
    const int64_t row_groups = int64_t(ceil_div(seqlen_q, 16)) * 4, col_groups = int64_t(ceil_div(seqlen_k, 16)) * 4;
    unsigned char *head = mask + (int64_t(b) * heads + h) * seqlen_q * seqlen_k;
    for (int64_t g = blockIdx.x * int64_t(kMaskThreads) + threadIdx.x; g < row_groups * col_groups;
         g += int64_t(gridDim.x) * kMaskThreads) {
        const int rg = static_cast<int>(g / col_groups), cg = static_cast<int>(g % col_groups);
        const int i0 = (rg / 4) * 16 + (rg % 4) * 2, j0 = (cg / 4) * 16 + (cg % 4) * 2;
        const uint4 w = dropout_group(d, rg, cg);
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
        // Score (i, j): byte (i % 16 / 8) * 2 + j % 2 of word ((i % 2) ^ (j / 16 % 2)) * 2 + j % 16 / 8.
#pragma unroll
        for (int word = 0; word < 4; ++word)
#pragma unroll
            for (int byte = 0; byte < 4; ++byte) {
                const int i = i0 + ((word / 2) ^ (cg / 4 % 2)) + (byte / 2) * 8, j = j0 + byte % 2 + (word % 2) * 8;
                if (i < seqlen_q && j < seqlen_k)
                    head[int64_t(i) * seqlen_k + j] = ((words[word] >> (8 * byte)) & 0xFFu) < (d.threshold4 & 0xFFu);
            }
    }
}

}  // namespace
}  // namespace sy_attn

extern "C" int sy_attn_dropout_mask(unsigned char *mask, int batch, int heads, int seqlen_q, int seqlen_k,
                                    float dropout_p, uint64_t dropout_seed, uint64_t dropout_offset, void *stream) {
    using namespace sy_attn;
    if (!mask || batch < 1 || batch > 65535 || heads < 1 || heads > 65535 || seqlen_q < 1 || seqlen_k < 1) return kInvalid;
    if (!(dropout_p > 0.f && dropout_p < 1.f)) return kInvalid;
    const int64_t groups = int64_t(ceil_div(seqlen_q, 16)) * 4 * ceil_div(seqlen_k, 16) * 4;
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(static_cast<int>(std::min<int64_t>(groups, 1 << 30)), kMaskThreads), 4096)),
                    heads, batch);
    dropout_mask_kernel<<<grid, kMaskThreads, 0, static_cast<cudaStream_t>(stream)>>>(mask, heads, seqlen_q, seqlen_k,
                                                                                      dropout_p, dropout_seed, dropout_offset);
    return launch_status();
}
