#!/bin/bash
# call 7 (2026-11-29i, the review): the producer keeps only the pending V's coordinates (its ring index is
# kv_iter - 1, pending once kv_iter > 0) and the consumer's packing and masking written once; the float64
# check, the whole GPU suite and one forward table on that library (review).
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx7
export SYMPATHY_CACHE_DIR=$PWD/.xfer/abx7/review PYTHONUNBUFFERED=1
echo "ready $(( $(date +%s) - t0 )) s"
timeout 40 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper > $OUT/check.txt 2>&1
echo "check rc=$? ok $(grep -c "^ok" $OUT/check.txt) FAIL $(grep -c "^FAIL" $OUT/check.txt) $(( $(date +%s) - t0 )) s"
timeout 75 python3 -m pytest -m gpu -q -p no:cacheprovider tests > $OUT/suite_full.txt 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -1 $OUT/suite_full.txt; grep -E "^FAILED|^ERROR" $OUT/suite_full.txt | head
timeout 25 python3 scripts/hopper_check.py --sizes 1024 4096 --head-dims 64 128 --kernels sdpa-cudnn hopper --no-check > $OUT/fwd.txt 2>&1
grep -A10 "^| d | N" $OUT/fwd.txt
echo "done $(( $(date +%s) - t0 )) s"
