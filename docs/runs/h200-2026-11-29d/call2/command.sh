#!/bin/bash
# call 2 (2026-11-29d): the d = 128 backward's LSE / D preload and double-buffered dQ shares with the late fence
# (all = defaults), against base (-DSY_HOPPER_BWD_PRELOAD=0 -DSY_HOPPER_BWD_DQ_BUFFERS=1 -DSY_HOPPER_BWD_DQ_LATE_FENCE=0,
# the shipped code's behaviour), pre (preload only) and buf2 (preload + two buffers, fence in place).
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
ab() {
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$1 timeout 80 python3 scripts/bwd_device.py --only-hopper --skip-check --sizes 2048 4096 > $OUT/ab_$1_r$2.txt 2>&1
  echo "$1 r$2 rc=$?"; grep -E "^ +(64|128) +[0-9]+ +(True|False)" $OUT/ab_$1_r$2.txt | head -12
}
ab base 1; ab all 1
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/all timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > $OUT/check_all.txt 2>&1
echo "check all rc=$?"; grep -E "^correctness|^check|worst|FAIL" $OUT/check_all.txt | head
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/all timeout 100 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests > $OUT/gpu_suite_all.txt 2>&1
echo "suite all rc=$?"; tail -1 $OUT/gpu_suite_all.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_suite_all.txt | head
ab pre 1; ab buf2 1; ab all 2; ab base 2
