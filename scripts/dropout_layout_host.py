"""Host check of the dropout keep-bit layouts (cuda_src/attention_dropout.cuh, hopper_bwd_dropout.cuh).

    python3 scripts/dropout_layout_host.py        # needs g++ (C++17); no GPU, no CUDA toolkit

The fragment functions (keep_rows / keep_rows_all + dropout_rows_apply for the forwards' S, and the hopper
forward's bytes_rows_all + bytes_to_drop_bits + dropout_rows_apply_bytes (the compare in bf16), keep_cols +
dropout_cols_packed / dropout_cols_scale / pack_keep / keep_bit / drop_packed for the backwards' S^T) are
compiled for the CPU from the headers themselves: the few PTX statements are replaced by C equivalents
(prmt, %laneid; the volatile pins dropped) and a warp is played lane by lane, its shuffles in two passes
(every lane records what it sends, then reads its partner's). Each score's bit is compared with the
layout's definition read straight off Philox's words (byte (i % 16 / 8) * 2 + j % 2 of word
((i % 2) ^ (j / 16 % 2)) * 2 + j % 16 / 8). Run it after any change to the layout: the GPU tests catch the
same errors, this catches them without a device call.
"""
import pathlib
import subprocess
import sys
import tempfile

SRC = pathlib.Path(__file__).resolve().parent.parent / "cuda_src"

STUBS = r"""
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#define __host__
#define __device__
#define __forceinline__ inline
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
using std::max; using std::min;
static int g_lane, g_pass, g_call;
static std::map<std::pair<int, int>, uint32_t> g_sent;
inline uint32_t __shfl_xor_sync(uint32_t, uint32_t v, int m) {   // pass 0 records, pass 1 reads the partner's
    const int c = g_call++;
    if (g_pass == 0) { g_sent[{g_lane, c}] = v; return 0; }
    return g_sent.at({g_lane ^ m, c});
}
inline uint32_t host_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    const uint64_t v = (uint64_t(b) << 32) | a;
    uint32_t r = 0;
    for (int n = 0; n < 4; ++n) {
        const int s = (sel >> (4 * n)) & 15;
        uint32_t byte = (v >> (8 * (s & 7))) & 0xFF;
        if (s & 8) byte = byte & 0x80 ? 0xFF : 0;
        r |= byte << (8 * n);
    }
    return r;
}
inline uint32_t __byte_perm(uint32_t a, uint32_t b, uint32_t s) { return host_prmt(a, b, s & 0x7777); }
inline float host_bf16(uint32_t half) {   // a bf16's bits to the float it is (subnormals, infinities, NaN kept)
    const uint32_t bits = half << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}
inline uint32_t host_bf16_ge(uint32_t x, uint32_t bound) {   // set.ge.u32.bf16x2: 0xFFFF per half, NaN false
    uint32_t r = 0;
    for (int h = 0; h < 2; ++h)
        if (host_bf16((x >> (16 * h)) & 0xFFFF) >= host_bf16((bound >> (16 * h)) & 0xFFFF)) r |= 0xFFFFu << (16 * h);
    return r;
}
"""

MAIN = r"""
#include "bwd_host.h"
using namespace sy_attn;
struct P { float dropout_p; uint64_t dropout_seed, dropout_offset; int heads_q; };
static bool ref_keep(const Dropout &d, int i, int j) {   // the layout's definition
    const uint4 w = dropout_group(d, (i / 16) * 4 + (i % 8) / 2, (j / 16) * 4 + (j % 8) / 2);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    const int word = ((i % 2) ^ (j / 16 % 2)) * 2 + j % 16 / 8, byte = (i % 16 / 8) * 2 + j % 2;
    return ((words[word] >> (8 * byte)) & 0xFF) < (d.threshold4 & 0xFF);
}
// The backward's S^T (keys as rows): kSpans 32-query spans a tile (2 at d = 128's 64-query tiles, 4 at
// d = 64's 128-query tiles), keep_cols_all / pack_keep / keep_bit / drop_packed / dropout_cols_* over it.
template <int kSpans>
static void check_cols(const Dropout &d, long &bad, long &checked) {
    constexpr int kSteps = 2 * kSpans, kTiles = 4 * kSpans;
    for (int key0 : {0, 16, 80}) for (int q0 : {0, 64, 128, 192}) {
        if (q0 % (32 * kSpans) != 0) continue;   // tiles start at multiples of their size
        uint4 k[32][kSpans];
        for (g_pass = 0; g_pass < 2; ++g_pass)
            for (g_lane = 0; g_lane < 32; ++g_lane) { g_call = 0; keep_cols_all<kSpans, true>(k[g_lane], d, key0 + g_lane / 4, q0, g_lane); }
        for (g_lane = 0; g_lane < 32; ++g_lane) {
            uint32_t bits[kSpans / 2], a[kSteps][4], b[kSteps][4], c[kSteps][4];
            float x[kTiles][4];
            pack_keep<kSpans>(bits, k[g_lane]);
            for (auto &s : a) for (auto &r : s) r = 0xFFFFFFFFu;
            for (auto &s : b) for (auto &r : s) r = 0xFFFFFFFFu;
            for (auto &s : c) for (auto &r : s) r = 0xFFFFFFFFu;
            for (auto &s : x) for (auto &r : s) r = 1.f;
            dropout_cols_packed<kSteps>(a, k[g_lane]);
            drop_packed(b, bits);
            drop_packed<true>(c, bits);   // the per-half form (the fp16 hopper backward)
            dropout_cols_scale<kTiles>(x, k[g_lane], 2.f);
            for (int nt = 0; nt < kTiles; ++nt) for (int r = 0; r < 4; ++r) {
                const int j = key0 + g_lane / 4 + 8 * (r / 2), i = q0 + 8 * nt + 2 * (g_lane % 4) + r % 2;
                const bool want = ref_keep(d, i, j);
                bad += ((x[nt][r] != 0.f) != want) + (keep_bit(bits, nt, r) != want);
                checked += 2;
            }
            for (int kk = 0; kk < kSteps; ++kk) for (int reg = 0; reg < 4; ++reg) for (int h = 0; h < 2; ++h) {
                const int nt = 2 * kk + reg / 2, j = key0 + g_lane / 4 + 8 * (reg % 2), i = q0 + 8 * nt + 2 * (g_lane % 4) + h;
                const bool want = ref_keep(d, i, j);
                const uint32_t ha = (a[kk][reg] >> (16 * h)) & 0xFFFF, hb = (b[kk][reg] >> (16 * h)) & 0xFFFF;
                const uint32_t hc = (c[kk][reg] >> (16 * h)) & 0xFFFF;
                bad += ((ha != 0) != want) + ((hb != 0) != want) + (ha != 0 && ha != 0xFFFF) + (hc != hb);
                checked += 3;
            }
        }
    }
}

// The hopper forward's path: bytes_rows_all (the keys and counter of DropoutConsts, head (1, 2) as make_dropout's
// d, the row group as the consumer makes it)
// + bytes_to_drop_bits + dropout_rows_apply_bytes (the byte compare in bf16 after the shuffle).
template <class Params>
static void check_rows_bf16(const Params &p, const Dropout &d, long &bad, long &checked) {
    const DropoutConsts c = dropout_consts(p.dropout_p, p.dropout_seed, p.dropout_offset);
    for (int row0 : {0, 64, 192}) for (int block : {0, 1, 3}) {   // a warpgroup's rows (warps 0..3), 128 keys
        for (int warp = 0; warp < 4; ++warp) {
            uint4 bytes[32][4];
            uint32_t a[32][8][4];
            for (g_pass = 0; g_pass < 2; ++g_pass)
                for (g_lane = 0; g_lane < 32; ++g_lane) {
                    g_call = 0;
                    const uint32_t tid = warp * 32 + g_lane;   // threadIdx.x % 128
                    bytes_rows_all<4, true>(bytes[g_lane], c, 1 * p.heads_q + 2, row0 / 4 + tid / 8, block * 128, g_lane);
                }
            for (g_lane = 0; g_lane < 32; ++g_lane) {
                for (auto &s : a[g_lane]) for (auto &r : s) r = 0xFFFFFFFFu;
                bytes_to_drop_bits(bytes[g_lane], c);
                dropout_rows_apply_bytes(a[g_lane], bytes[g_lane], c.bound);
                for (int kk = 0; kk < 8; ++kk) for (int reg = 0; reg < 4; ++reg) for (int h = 0; h < 2; ++h) {
                    const int i = row0 + warp * 16 + g_lane / 4 + 8 * (reg % 2), j = block * 128 + 8 * (2 * kk + reg / 2) + 2 * (g_lane % 4) + h;
                    const uint32_t half = (a[g_lane][kk][reg] >> (16 * h)) & 0xFFFF;
                    bad += (half != 0 && half != 0xFFFF) + ((half != 0) != ref_keep(d, i, j));
                    ++checked;
                }
            }
        }
    }
}

int main() {
    long bad = 0, checked = 0;
    // t = 230, 179, 128 (the bf16 compare's two regimes meet at 128 / 129), 255, 129, 127, 0.
    for (float prob : {0.1f, 0.3f, 0.5f, 0.001f, 0.496f, 0.504f, 0.999f}) {
    const P p{prob, 0x123456789abcdefull, 40, 3};
    const Dropout d = make_dropout(p, 1, 2);
    for (int row0 : {0, 16, 48}) for (int col0 : {0, 128, 384}) {   // forward: a warp's 16 rows, 128 keys
        uint4 keep[32][4];
        uint32_t a[32][8][4];
        for (g_pass = 0; g_pass < 2; ++g_pass)
            for (g_lane = 0; g_lane < 32; ++g_lane) {
                g_call = 0;
                keep_rows_all<4>(keep[g_lane], d, row0 + g_lane / 4, col0, g_lane);
            }
        for (g_lane = 0; g_lane < 32; ++g_lane) {
            for (auto &s : a[g_lane]) for (auto &r : s) r = 0xFFFFFFFFu;
            dropout_rows_apply(a[g_lane], keep[g_lane]);
            for (int kk = 0; kk < 8; ++kk) for (int reg = 0; reg < 4; ++reg) for (int h = 0; h < 2; ++h) {
                const int i = row0 + g_lane / 4 + 8 * (reg % 2), j = col0 + 8 * (2 * kk + reg / 2) + 2 * (g_lane % 4) + h;
                const uint32_t half = (a[g_lane][kk][reg] >> (16 * h)) & 0xFFFF;
                bad += (half != 0 && half != 0xFFFF) + ((half != 0) != ref_keep(d, i, j));
                ++checked;
            }
        }
        for (int s = 0; s < 4; ++s) {   // keep_rows (key order: dropout_rows_scale)
            uint4 k[32];
            for (g_pass = 0; g_pass < 2; ++g_pass)
                for (g_lane = 0; g_lane < 32; ++g_lane) { g_call = 0; k[g_lane] = keep_rows(d, row0 + g_lane / 4, col0 + 32 * s, g_lane); }
            for (g_lane = 0; g_lane < 32; ++g_lane) {
                const uint32_t words[4] = {k[g_lane].x, k[g_lane].y, k[g_lane].z, k[g_lane].w};
                for (int t = 0; t < 4; ++t) for (int r = 0; r < 4; ++r) {
                    const int i = row0 + g_lane / 4 + 8 * (r / 2), j = col0 + 32 * s + 8 * t + 2 * (g_lane % 4) + r % 2;
                    bad += ((words[t] >> (8 * r + 7)) & 1) != ref_keep(d, i, j);
                    ++checked;
                }
            }
        }
    }
    check_rows_bf16(p, d, bad, checked);
    const P carry{prob, 0x123456789abcdefull, 4 * 0xFFFFFFFCull, 3};   // offset / 4 + 5 carries into word 1
    check_rows_bf16(carry, make_dropout(carry, 1, 2), bad, checked);
    check_cols<2>(d, bad, checked);   // d = 128: a warp's 16 keys, a 64-query tile
    check_cols<4>(d, bad, checked);   // d = 64: a warp's 16 keys, a 128-query tile
    }
    printf("dropout layouts: %ld scores checked, %ld wrong\n", checked, bad);
    return bad != 0;
}
"""

# The PTX statements and their host equivalents (each must be found: a header change shows up here).
REPLACE = [
    ('asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));', "r = host_prmt(a, b, selector);"),
    ('asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));', "lane = g_lane;"),
    ('if constexpr (kPinRow) asm volatile("mov.b32 %0, %0;" : "+r"(row));', ""),
    ('if constexpr (kPinRow) asm volatile("mov.b32 %0, %0;" : "+r"(row_group));', ""),
    ('asm("set.ge.u32.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(bound));', "r = host_bf16_ge(x, bound);"),
    ('if constexpr (kPinKey) asm volatile("mov.b32 %0, %0;\\n\\tmov.b32 %1, %1;" : "+r"(key), "+r"(lane));', ""),
    ('if constexpr (kPin) asm volatile("mov.b32 %0, %0;\\n\\tmov.b64 %1, %1;" : "+f"(dropout_p), "+l"(offset));', ""),
]


def main() -> int:
    header = (SRC / "attention_dropout.cuh").read_text().replace('#include "attention_common.cuh"', '#include "stubs.h"')
    for old, new in REPLACE:
        if old not in header:
            sys.exit(f"dropout_layout_host: the header no longer has {old!r}: update REPLACE")
        header = header.replace(old, new)
    if "asm volatile" in header:
        sys.exit("dropout_layout_host: a volatile asm statement this script does not know: update REPLACE")
    bwd = (SRC / "hopper_bwd_dropout.cuh").read_text().replace('#include "attention_dropout.cuh"', '#include "dropout_host.h"')
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        (d / "stubs.h").write_text(STUBS)
        (d / "dropout_host.h").write_text(header)
        (d / "bwd_host.h").write_text(bwd)
        (d / "main.cpp").write_text(MAIN)
        subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(d / "check"), str(d / "main.cpp")], check=True)
        return subprocess.run([str(d / "check")]).returncode


if __name__ == "__main__":
    sys.exit(main())
