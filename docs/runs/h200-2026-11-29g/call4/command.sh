#!/bin/bash
# call 4 (2026-11-29g): the final tree, HEAD 159e859 (no device code changed this session; its library is ac642ab's
# sources): the 80-query-tile backward tests refactored in 159e859 (never run on a GPU before), the whole GPU suite,
# the backward's check against float64 and the 300-step training check.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx
export SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/head PYTHONUNBUFFERED=1
echo "ready $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu_backward.py -k "causal_long or 80_query or bwd_rows" > /tmp/new_tests.txt 2>&1
echo "80-query tests rc=$?"; tail -1 /tmp/new_tests.txt | tee $OUT/new_tests.txt; grep -E "^FAILED|^E  " /tmp/new_tests.txt | head -12
timeout 220 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite.txt 2>&1
echo "suite rc=$?"; tail -1 /tmp/suite.txt | tee $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" /tmp/suite.txt | tee -a $OUT/gpu_suite.txt | head
timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/check.txt 2>&1
echo "check rc=$?"; grep -E "^correctness|determin" /tmp/check.txt | tee $OUT/check.txt | head -5
(cd /tmp && timeout 120 python3 -m sympathy.cli demo attention_train > /tmp/train.txt 2>&1; echo "train rc=$?"); tail -4 /tmp/train.txt | tee $OUT/train_tail.txt
if [ $(( $(date +%s) - t0 )) -lt 470 ]; then
  timeout 90 python3 scripts/hopper_check.py --sizes 1024 4096 --head-dims 64 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/fwd.txt 2>&1
  echo "fwd rc=$?"; grep -A10 "^| d | N" $OUT/fwd.txt
fi
echo "done $(( $(date +%s) - t0 )) s"
