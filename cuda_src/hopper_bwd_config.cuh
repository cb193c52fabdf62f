// The `hopper` backward's compile-time knobs (attention_hopper_bwd.cu): query-tile stages per head dim and
// how dQ reaches dq_accum, each with what was measured. Overridable with -D for same-run comparisons.
#pragma once

// Query-tile stages per head dim, measured (bf16, H100, same run, docs/notes-attention-bwd.md): d = 64
// three with the atomics (same speed not causal, +1-4 % causal, and the two-stage build spilled 40 bytes
// in one fp16 instantiation), two with dQ through shared memory (three and the dQ shares exceed
// 227 KiB); d = 128 two (three: +5 % not causal, -7 % causal at N = 4096; with dQ through shared memory
// -6 % not causal). Overridable for same-run comparisons:
// scripts/bwd_device.py --variant NAME=FILE@-DSY_HOPPER_BWD_D64_STAGES=2
#ifndef SY_HOPPER_BWD_D64_STAGES
#define SY_HOPPER_BWD_D64_STAGES 3
#endif
#ifndef SY_HOPPER_BWD_D64_TMA_STAGES
#define SY_HOPPER_BWD_D64_TMA_STAGES 2
#endif
#ifndef SY_HOPPER_BWD_D128_STAGES
#define SY_HOPPER_BWD_D128_STAGES 2
#endif
// dQ through shared memory (1, FlashAttention-3's way): each consumer warpgroup stores its 64 x 64 fp32
// share of the tile's dQ to shared memory and goes on; a warp of the producer warpgroup adds it to
// dq_accum with one 16 KiB bulk reduce-add (the copy engine), so the consumers issue no atomics. dq_accum
// is then tile-major (a share's 4096 floats contiguous in the registers' order) and read back by
// dq_tiled_convert_kernel. Measured 1.04-1.18x the atomics (docs/notes-attention-bwd.md, session b1).
// The fp16 d = 64 kernels add dQ from the consumers (red.global.add.v4) into the same tile-major dq_accum
// (atomic_add_tiled: a warp's add is 512 contiguous bytes, no shuffles): at d = 64 the shares leave room for two
// query-tile stages only, and the fp16 causal and local kernels then spilled 16 bytes. Varlen calls add
// row-major (atomic_add_rows). 0: the row-major atomics everywhere, 2: the tile-major adds everywhere but varlen
// (no shares in shared memory; deterministic calls refused); both for same-run comparisons.
#ifndef SY_HOPPER_BWD_DQ_TMA
#define SY_HOPPER_BWD_DQ_TMA 1
#endif
// Dropout's dQ (d = 128): 1 through shared memory as above (and a deterministic order), 0 the atomics
// (the previous version; for same-run comparisons).
#ifndef SY_HOPPER_BWD_DROPOUT_TMA
#define SY_HOPPER_BWD_DROPOUT_TMA SY_HOPPER_BWD_DQ_TMA
#endif
// Causal and local grids launched longest key blocks first within each batch element (lpt_grid in
// hopper_bwd_pipeline.cuh); 0 the previous order, for same-run comparisons.
#ifndef SY_HOPPER_BWD_LPT
#define SY_HOPPER_BWD_LPT 1
#endif
// Where the d = 128 consumer waited (ncu's PC sampling, session 2026-11-29d, docs/notes-attention-bwd.md): on the
// LSE and D loads, issued after the waits for S^T and dP^T and queued behind those GEMMs' operand reads, and on
// its dQ share's single buffer, still being read by the previous tile's reduce-add. Together the two changes below
// measured +1-2 % forward + backward at d = 128 (same run); 0 and 1 build the previous kernel, for comparisons.
// 1: LSE and D read into registers before those waits (d = 128 without dropout: at d = 64 their 32 registers each
// do not fit beside the 128-query accumulators).
#ifndef SY_HOPPER_BWD_PRELOAD
#define SY_HOPPER_BWD_PRELOAD 1
#endif
// Buffers of dQ shares per warpgroup, at most (two where shared memory holds them: d = 128 with two stages).
#ifndef SY_HOPPER_BWD_DQ_BUFFERS
#define SY_HOPPER_BWD_DQ_BUFFERS 2
#endif
// Query tile rows at d = 128 without a band, attn_mask, dropout or varlen: 80 (FlashAttention-3's and -4's
// non-causal tile; HopperBwdTraits says what changes) or 64, the tile of every other d = 128 launch. 80 measured
// +0.3 / +0.8 / +1.1 / +2.0 % forward + backward at N = 1024 / 2048 / 4096 / 8192 (bf16, H200, three rounds each
// in the same calls; docs/notes-attention-bwd.md, session 2026-11-29e), the deterministic mode level to +1.3 %.
#ifndef SY_HOPPER_BWD_D128_BLOCK_M
#define SY_HOPPER_BWD_D128_BLOCK_M 80
#endif
// Causal launches at d = 128 (no window, mask, dropout or varlen) take the 80-query tiles too from this many query
// rows on (0: never; below it they keep the 64-query tiles, FlashAttention-4's causal choice). Causal, the key block's
// diagonal crosses up to three 80-row tiles instead of three 64-row ones, so the masked work grows while the
// unmasked tiles gain what they gain without a band; the gain wins once the unmasked tiles dominate. Measured
// forward + backward at every causal length against 64 (bf16, H200, same calls, docs/notes-attention-bwd.md, session
// 2026-11-29f): N = 1024 / 2048 / 4096 -2.6 / -1.8 / -0.8 %, 8192 +1.0 and +1.9 % (two calls), 16384 +2.6 %.
#ifndef SY_HOPPER_BWD_D128_CAUSAL_WIDE_MIN_Q
#define SY_HOPPER_BWD_D128_CAUSAL_WIDE_MIN_Q 8192
#endif
