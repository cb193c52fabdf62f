#!/bin/bash
# call 8 (2026-11-29h): the committed tree's library (cb20fb1; its SASS is call 3-7's fin/nolag kernels but for one
# IADD3 operand order in four mask-list kernels): the float64 check, the mask and band tests, and one forward table.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx8
export SYMPATHY_CACHE_DIR=$PWD/.xfer/abx8/tree
echo "ready $(( $(date +%s) - t0 )) s"
timeout 60 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper > $OUT/check.txt 2>&1
echo "check rc=$? ok $(grep -c "^ok" $OUT/check.txt) FAIL $(grep -c "^FAIL" $OUT/check.txt)"
timeout 80 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_masks.py > $OUT/mask_tests.txt 2>&1
echo "mask tests rc=$?"; tail -1 $OUT/mask_tests.txt
[ $(( $(date +%s) - t0 )) -lt 290 ] && timeout 50 python3 scripts/hopper_check.py --sizes 1024 4096 --head-dims 64 128 \
  --kernels sdpa-cudnn hopper --no-check > $OUT/fwd.txt 2>&1 && grep -A10 "^| d | N" $OUT/fwd.txt
echo "done $(( $(date +%s) - t0 )) s"
