#!/bin/bash
# call 5 (2026-11-29f): the final tree (causal 80-query tiles from 8192 query rows): the new and changed tests, the whole
# GPU suite, the backward's check against float64, the 300-step training check, and one round of forward + backward
# against cuDNN at N = 2048 .. 16384.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx
export SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/fin PYTHONUNBUFFERED=1
echo "ready $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu_backward.py -k "causal_long or 80_query or bwd_rows" > /tmp/new_tests.txt 2>&1
echo "new tests rc=$?"; tail -1 /tmp/new_tests.txt | tee $OUT/new_tests.txt; grep -E "^FAILED|^E  " /tmp/new_tests.txt | head -12
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite.txt 2>&1
echo "suite rc=$?"; tail -1 /tmp/suite.txt | tee $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" /tmp/suite.txt | tee -a $OUT/gpu_suite.txt | head
timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/check.txt 2>&1
echo "check rc=$?"; grep -E "^correctness" /tmp/check.txt | tee $OUT/check.txt
(cd /tmp && timeout 120 python3 -m sympathy.cli demo attention_train > /tmp/train.txt 2>&1; echo "train rc=$?"); tail -4 /tmp/train.txt | tee $OUT/train_tail.txt
echo "tests done $(( $(date +%s) - t0 )) s"
timeout 120 python3 scripts/bwd_device.py --only-hopper --skip-check --sizes 2048 4096 8192 16384 > $OUT/bwd_final.txt 2>&1
echo "bwd rc=$?"; grep -E "^ +(64|128) +[0-9]+ +(True|False)" $OUT/bwd_final.txt
echo "done $(( $(date +%s) - t0 )) s"
