#!/bin/bash
# call 2 (2026-11-29e): the backward's 80-query tiles at d = 128 without a band (t80, the working tree) -- the new
# tests first, the whole GPU suite, the backward's check against float64 -- then t80 against b64
# (-DSY_HOPPER_BWD_D128_BLOCK_M=64: today's 64-query tiles) in two rounds, d = 128, each library in its own process.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/t80
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu_backward.py -k "80_query or bwd_rows" -x > $OUT/new_tests.txt 2>&1
echo "new tests rc=$?"; tail -1 $OUT/new_tests.txt; grep -E "^E |Error|assert" $OUT/new_tests.txt | head -12
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/gpu_suite.txt 2>&1
echo "suite rc=$?"; tail -1 /tmp/gpu_suite.txt | tee $OUT/gpu_suite_summary.txt; grep -E "^FAILED|^ERROR" /tmp/gpu_suite.txt | head
timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/check.txt 2>&1
echo "check rc=$?"; grep -E "^correctness" /tmp/check.txt | tee $OUT/check_summary.txt
(cd /tmp && timeout 120 python3 -m sympathy.cli demo attention_train > /tmp/train.txt 2>&1; echo "train rc=$?"); tail -6 /tmp/train.txt | tee $OUT/train_tail.txt
ab() {
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$1 timeout 90 python3 scripts/bwd_device.py --only-hopper --skip-check --dims 128 \
    --sizes 1024 2048 4096 8192 > $OUT/ab_$1_r$2.txt 2>&1
  echo "$1 r$2 rc=$?"; grep -E "^ +128 +[0-9]+ +(True|False)" $OUT/ab_$1_r$2.txt | head -8
}
unset SYMPATHY_CACHE_DIR
ab t80 1; ab b64 1; ab t80 2; ab b64 2
