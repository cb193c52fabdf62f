#!/bin/bash
# call 5 (2026-11-29e): the final tree (t80 library; the lse test now compares the deterministic mode's bits): the
# whole GPU suite and the backward's check against float64.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/t80
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/gpu_suite.txt 2>&1
echo "suite rc=$?"; tail -1 /tmp/gpu_suite.txt | tee $OUT/gpu_suite_summary.txt; grep -E "^FAILED|^ERROR" /tmp/gpu_suite.txt | head
grep -E "^E " /tmp/gpu_suite.txt | head -5
timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/check.txt 2>&1
echo "check rc=$?"; grep -E "^correctness" /tmp/check.txt | tee $OUT/check_summary.txt
