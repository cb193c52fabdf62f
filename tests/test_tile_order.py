"""The `hopper` forward's tile order (cuda_src/tile_order.cuh), compiled for the CPU with g++ from the header itself.

A wrong order is a silent defect: a tile taken twice writes its rows twice and another is never computed, so its
rows keep whatever the output held. The GPU tests see that only for the shapes they run; here every order of a
few thousand grids is walked tile by tile: each (query block, head) exactly once, sections contiguous, longest
first inside a section, head-major without sections; and the section size's bounds.
"""
import pathlib
import shutil
import subprocess

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "cuda_src"

DRIVER = r"""
#include <cstdio>
#include <vector>
#define __host__
#define __device__
#define __forceinline__ inline
using std::max; using std::min;
#include "tile_order.cuh"
using namespace sy_attn;

static long long checked = 0, wrong = 0;
static void fail(const char *what, int heads, int mblocks, int section, int t) {
    if (wrong++ < 10) std::printf("WRONG %s heads=%d mblocks=%d section=%d t=%d\n", what, heads, mblocks, section, t);
}

static void walk(int heads, int mblocks, int section, bool reverse_m) {
    const TileOrder order{mblocks, heads, section};
    std::vector<int> seen(size_t(heads) * mblocks, 0);
    int prev_section = -1, prev_m = 0;
    for (int t = 0; t < heads * mblocks; ++t) {
        const TileCoord c = order.at(t, reverse_m);
        ++checked;
        if (c.m_block < 0 || c.m_block >= mblocks || c.head < 0 || c.head >= heads) { fail("range", heads, mblocks, section, t); continue; }
        if (seen[size_t(c.head) * mblocks + c.m_block]++) fail("twice", heads, mblocks, section, t);
        if (section == 0) {   // head-major
            const int m = t % mblocks;
            if (c.head != t / mblocks || c.m_block != (reverse_m ? mblocks - 1 - m : m)) fail("head-major", heads, mblocks, section, t);
            continue;
        }
        const int sections = heads / section;
        const int s = std::min(c.head / section, sections - 1);   // the section c.head belongs to
        if (s < prev_section) fail("section order", heads, mblocks, section, t);
        if (s == prev_section && c.m_block > prev_m) fail("longest first", heads, mblocks, section, t);
        prev_section = s;
        prev_m = c.m_block;
    }
    for (size_t i = 0; i < seen.size(); ++i)
        if (seen[i] != 1) fail("missed", heads, mblocks, section, int(i));
}

int main() {
    for (int heads = 1; heads <= 70; ++heads)
        for (int mblocks = 1; mblocks <= 20; ++mblocks) {
            walk(heads, mblocks, 0, false);
            walk(heads, mblocks, 0, true);
            for (int section = 1; section <= heads; ++section) walk(heads, mblocks, section, true);
        }
    // The benchmark grids: d = 64 and 128 at B * N = 16384 tokens, H * d = 2048 (128- and 192-row tiles).
    const int grids[][2] = {{512, 8}, {256, 8}, {256, 16}, {128, 32}, {64, 22}, {64, 64}, {32, 128}, {16, 256}};
    for (const auto &g : grids)
        walk(g[0], g[1], section_heads_for(g[0], g[1], 132, 256LL << 10, 12LL << 20), true);
    // section_heads_for: at least the heads in flight, at most every head, and more only while the K/V fit.
    for (int heads = 1; heads <= 600; heads += 7)
        for (int mblocks = 1; mblocks <= 300; mblocks += 13)
            for (long long kv = 1; kv <= (64LL << 20); kv *= 5) {
                const long long budget = 12LL << 20;
                const int s = section_heads_for(heads, mblocks, 132, kv, budget);
                const int in_flight = (132 + mblocks - 1) / mblocks;
                ++checked;
                if (s < 1 || s > heads) fail("section range", heads, mblocks, s, 0);
                else if (s < std::min(in_flight, heads)) fail("section below the heads in flight", heads, mblocks, s, 0);
                else if (s > in_flight && s * kv > budget) fail("section over the L2 budget", heads, mblocks, s, 0);
            }
    std::printf("checked %lld wrong %lld\n", checked, wrong);
    return wrong != 0;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="the header is compiled for the CPU with g++")
def test_every_tile_is_taken_once_longest_first_inside_its_section(tmp_path):
    (tmp_path / "order.cpp").write_text(DRIVER)
    exe = tmp_path / "order"
    subprocess.run(["g++", "-std=c++17", "-O2", f"-I{SRC}", str(tmp_path / "order.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    last = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 0, run.stdout[-2000:]
    checked, wrong = int(last.split()[1]), int(last.split()[3])
    assert wrong == 0 and checked > 10_000_000, last
