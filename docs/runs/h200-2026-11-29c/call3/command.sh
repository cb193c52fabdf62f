#!/bin/bash
# call 3 (2026-11-29c): half blocks, S and its softmax only (P V whole). Correctness (the forward GPU tests and
# hopper_check's check on halfs), then the two-process A/B halfs / half0, three rounds.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/halfs timeout 150 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests > $OUT/gpu_suite_halfs.txt 2>&1
echo "suite halfs rc=$?"; tail -1 $OUT/gpu_suite_halfs.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_suite_halfs.txt | head
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/halfs timeout 100 python3 scripts/hopper_check.py --sizes 1024 --kernels hopper --repeat 1 > $OUT/check_halfs.txt 2>&1
echo "check halfs rc=$?"; grep -c "^ok" $OUT/check_halfs.txt; grep FAIL $OUT/check_halfs.txt | head
for round in 1 2 3; do for lib in halfs half0; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 120 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$?"; grep -A14 "^| d | N" $OUT/ab_${lib}_r$round.txt | grep "| yes"
done; done
