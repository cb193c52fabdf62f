#!/bin/bash
# call 1 (2026-11-29f): causal 80-query backward tiles at d = 128 (wc: -DSY_HOPPER_BWD_D128_CAUSAL_WIDE_MIN_Q=1, every
# causal length) against base (the tree's default, 0: causal keeps 64-query tiles; the device code of HEAD 0752d46):
# the new tests, both libraries' whole GPU suite, wc's check against float64, then three rounds of A/B at d = 128.
# Also stages the first part of FlashAttention-4's wheels for call 2.
t0=$(date +%s)
mkdir -p /tmp/fa4in && cp .xfer/fa4a/* /tmp/fa4in/
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx
cp -r .xfer/abx /tmp/abkeep
echo "ready $(( $(date +%s) - t0 )) s"
export SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/wc
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu_backward.py -k "causal_long or 80_query or bwd_rows" > $OUT/new_tests_wc.txt 2>&1
echo "new tests wc rc=$?"; tail -1 $OUT/new_tests_wc.txt; grep -E "^FAILED|^E  " $OUT/new_tests_wc.txt | head -12
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite_wc.txt 2>&1
echo "suite wc rc=$?"; tail -1 /tmp/suite_wc.txt | tee $OUT/gpu_suite_wc.txt; grep -E "^FAILED|^ERROR" /tmp/suite_wc.txt | tee -a $OUT/gpu_suite_wc.txt | head
timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/check_wc.txt 2>&1
echo "check wc rc=$?"; grep -E "^correctness|determin" /tmp/check_wc.txt | tee $OUT/check_wc.txt | head -5
export SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/base
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite_base.txt 2>&1
echo "suite base rc=$?"; tail -1 /tmp/suite_base.txt | tee $OUT/gpu_suite_base.txt; grep -E "^FAILED|^ERROR" /tmp/suite_base.txt | tee -a $OUT/gpu_suite_base.txt | head
echo "tests done $(( $(date +%s) - t0 )) s"
ab() {
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/$1 timeout 80 python3 scripts/bwd_device.py --only-hopper --skip-check --dims 128 \
    --sizes 1024 2048 4096 8192 > $OUT/ab_$1_r$2.txt 2>&1
  echo "$1 r$2 rc=$?"; grep -E "^ +128 +[0-9]+ +True" $OUT/ab_$1_r$2.txt | head -4
}
unset SYMPATHY_CACHE_DIR
ab wc 1; ab base 1; ab wc 2; ab base 2
[ $(( $(date +%s) - t0 )) -lt 480 ] && { ab wc 3; ab base 3; }
echo "done $(( $(date +%s) - t0 )) s"
