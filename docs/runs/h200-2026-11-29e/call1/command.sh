#!/bin/bash
# call 1 (2026-11-29e): 05e62aa (ship) on the GPU -- the whole GPU suite and the backward's check against float64 --
# then the prepared d = 64 forward patch (docs/runs/h200-2026-11-29d/next/fwd-exp2-fma-d64.patch) at
# SY_HOPPER_FWD_EXP2_FMA_EVERY = 0 (today's kernel), 8 and 4: correctness of 8 and 4, then two rounds of timing.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/ship
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests > $OUT/gpu_suite.txt 2>&1
echo "suite rc=$?"; tail -1 $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_suite.txt | head
timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > $OUT/check_ship.txt 2>&1
echo "check rc=$?"; grep -E "^correctness|determin" $OUT/check_ship.txt | head -5
git apply docs/runs/h200-2026-11-29d/next/fwd-exp2-fma-d64.patch && echo patched
for lib in p8 p4; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 2048 --head-dims 64 \
    --kernels hopper > $OUT/check_$lib.txt 2>&1; echo "check $lib rc=$?"; grep -iE "fail|max|worst|within" $OUT/check_$lib.txt | head -4
done
for round in 1 2; do for lib in p0 p8 p4; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --head-dims 64 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$?"; grep -A8 "^| d | N" $OUT/ab_${lib}_r$round.txt | tail -6
done; done
