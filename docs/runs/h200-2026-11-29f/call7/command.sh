#!/bin/bash
# call 7 (2026-11-29f): the d = 128 forward on 128 x 176 tiles with Q in shared memory (n176: -DSY_HOPPER_D128_BLOCK_N=176
# -DSY_HOPPER_D128_Q_IN_REGISTERS=0, FlashAttention-3's C++ non-causal tile) against the shipped 128 x 128 (fin), alternating.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx
echo "ready $(( $(date +%s) - t0 )) s"
SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/n176 timeout 40 python3 scripts/hopper_check.py --sizes 1024 --head-dims 128 --kernels hopper > $OUT/check_n176.txt 2>&1
echo "check n176 rc=$?"; grep -iE "fail|ok|within|max err" $OUT/check_n176.txt | tail -4
ab() {
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/$1 timeout 45 python3 scripts/hopper_check.py --sizes 2048 4096 8192 --head-dims 128 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/fwd_$1_r$2.txt 2>&1
  echo "$1 r$2 rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^\| 128 " $OUT/fwd_$1_r$2.txt
}
ab n176 1; ab fin 1
[ $(( $(date +%s) - t0 )) -lt 330 ] && { ab n176 2; ab fin 2; }
echo "done $(( $(date +%s) - t0 )) s"
