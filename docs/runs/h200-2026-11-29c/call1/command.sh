#!/bin/bash
# call 1 (2026-11-29c): ncu --set full of our backward and cuDNN's (d = 128, N = 4096, not causal) and of the
# forward at d = 64, N = 1024 causal, ours and cuDNN's; plus the metric names for shared memory and wgmma.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/ship
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
ncu --query-metrics 2>/dev/null | grep -iE "shared|gmma|bank|smem" > $OUT/metric_names.txt
S="--set full --import-source no"
timeout 150 ncu -k regex:hopper_bwd --launch-skip 1 --launch-count 1 $S python3 scripts/hopper_ncu.py --backward --d 128 > $OUT/bwd_ours.txt 2>&1; echo "bwd ours rc=$?"
timeout 150 ncu -k regex:bprop --launch-skip 1 --launch-count 1 $S python3 scripts/hopper_ncu.py --backward --cudnn --d 128 > $OUT/bwd_cudnn.txt 2>&1; echo "bwd cudnn rc=$?"
timeout 100 ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 $S python3 scripts/hopper_ncu.py --d 64 --n 1024 --causal > $OUT/fwd_ours.txt 2>&1; echo "fwd ours rc=$?"
timeout 100 ncu -k regex:fprop --launch-skip 1 --launch-count 1 $S python3 scripts/hopper_ncu.py --cudnn --d 64 --n 1024 --causal > $OUT/fwd_cudnn.txt 2>&1; echo "fwd cudnn rc=$?"
for f in bwd_ours bwd_cudnn fwd_ours fwd_cudnn; do echo "== $f"; grep -E "^  [a-zA-Z_].*\(|Duration|Shared Memory|Tensor|Issued Warp|No Eligible|Eligible Warps|Registers|Throughput" $OUT/$f.txt | head -30; done
