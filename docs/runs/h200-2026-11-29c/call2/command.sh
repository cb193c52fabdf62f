#!/bin/bash
# call 2 (2026-11-29c): half blocks in the forward. Correctness (the whole GPU suite on half2, the superset of the new
# code paths; hopper_check's own check on half2 and half), then the two-process A/B half / half0 / half2, two rounds.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/half2 timeout 150 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests > $OUT/gpu_suite_half2.txt 2>&1
echo "suite half2 rc=$?"; tail -2 $OUT/gpu_suite_half2.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_suite_half2.txt | head
for lib in half2 half; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 100 python3 scripts/hopper_check.py --sizes 1000 1024 2048 --kernels hopper --repeat 1 > $OUT/check_$lib.txt 2>&1
  echo "check $lib rc=$?"; grep -iE "fail|max err|error|ok" $OUT/check_$lib.txt | head -8
done
for round in 1 2; do for lib in half half0 half2; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 120 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$?"; grep -A14 "^| d | N" $OUT/ab_${lib}_r$round.txt | grep "| yes" 
done; done
