#!/bin/bash
# call 5 (2026-11-29c): the softmax's row maximum in four chains (SY_SOFTMAX_MAX_CHAINS=4) against one (=1, the code
# before): the whole GPU suite on mx4, then the two-process A/B mx4 / mx1, two rounds.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/mx4 timeout 120 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests > $OUT/gpu_suite_mx4.txt 2>&1
echo "suite mx4 rc=$?"; tail -1 $OUT/gpu_suite_mx4.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_suite_mx4.txt | head
for round in 1 2; do for lib in mx4 mx1; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 100 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$?"; grep -A14 "^| d | N" $OUT/ab_${lib}_r$round.txt | grep "^| [0-9]"
done; done
