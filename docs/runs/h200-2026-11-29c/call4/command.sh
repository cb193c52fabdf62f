#!/bin/bash
# call 4 (2026-11-29c): counters on the shipped library -- shared-memory wavefronts (wgmma operands included) and the
# warps' stall reasons -- of our backward beside cuDNN's (d = 128, N = 4096, not causal) and of our forward beside
# cuDNN's (d = 64, N = 1024, causal).
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/half0
M="--metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_gmma.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,sm__cycles_elapsed.avg,gpu__time_duration.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
timeout 100 ncu -k regex:hopper_bwd --launch-skip 1 --launch-count 1 $M python3 scripts/hopper_ncu.py --backward --d 128 > $OUT/bwd_ours.txt 2>&1; echo "bwd ours rc=$?"
timeout 100 ncu -k regex:bprop --launch-skip 1 --launch-count 1 $M python3 scripts/hopper_ncu.py --backward --cudnn --d 128 > $OUT/bwd_cudnn.txt 2>&1; echo "bwd cudnn rc=$?"
timeout 80 ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 $M python3 scripts/hopper_ncu.py --d 64 --n 1024 --causal > $OUT/fwd_ours.txt 2>&1; echo "fwd ours rc=$?"
timeout 80 ncu -k regex:fprop --launch-skip 1 --launch-count 1 $M python3 scripts/hopper_ncu.py --cudnn --d 64 --n 1024 --causal > $OUT/fwd_cudnn.txt 2>&1; echo "fwd cudnn rc=$?"
for f in bwd_ours bwd_cudnn fwd_ours fwd_cudnn; do echo "== $f"; grep -E "hmma|wavefronts|conflicts|duration|stalled" $OUT/$f.txt | awk '$NF+0 > 0.05 || /hmma|wavefronts|conflicts|duration/' | head -30; done
