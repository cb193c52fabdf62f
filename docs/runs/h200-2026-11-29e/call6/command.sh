#!/bin/bash
# call 6 (2026-11-29e): SY_HOPPER_BWD_DQ_HALVES -- the 80-query tiles' dQ^T share in two halves, one buffer each
# (h1) against one whole share in one buffer (h0, the default) -- the whole GPU suite under each, then three rounds
# of h1 against h0 at d = 128, then the backward's check under h1.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
suite() {
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$1 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite_$1.txt 2>&1
  echo "suite $1 rc=$?"; tail -1 /tmp/suite_$1.txt | tee $OUT/gpu_suite_$1.txt; grep -E "^FAILED|^ERROR" /tmp/suite_$1.txt | head -5
}
ab() {
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$1 timeout 90 python3 scripts/bwd_device.py --only-hopper --skip-check --dims 128 \
    --sizes 1024 2048 4096 8192 > $OUT/ab_$1_r$2.txt 2>&1
  echo "$1 r$2 rc=$?"; grep -E "^ +128 +[0-9]+ +False" $OUT/ab_$1_r$2.txt | head -4
}
suite h1
ab h1 1; ab h0 1
suite h0
ab h1 2; ab h0 2; ab h1 3; ab h0 3
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/h1 timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/check.txt 2>&1
echo "check h1 rc=$?"; grep -E "^correctness" /tmp/check.txt | tee $OUT/check_h1.txt
