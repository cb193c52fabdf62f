#!/bin/bash
# call 3 (2026-11-29f): call 2's FlashAttention-4 timings again on the same warm machine (its wheels and the base
# library still in /tmp), a second round.
. .device/bootstrap.sh > /dev/null 2>&1; export PYTHONPATH=$PYTHONPATH:/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 SYMPATHY_CACHE_DIR=/tmp/abkeep/base; timeout 200 python3 scripts/hopper_check.py --sizes 1024 4096 8192 --head-dims 64 128 --kernels sdpa-cudnn hopper --fa4 --repeat 2 --no-check > $OUT/fwd_fa4_r2.txt 2>&1; echo "fwd rc=$?"; grep -A14 "^| d | N" $OUT/fwd_fa4_r2.txt; timeout 250 python3 scripts/bwd_device.py --only-hopper --skip-check --sizes 2048 4096 8192 --fa4 > $OUT/bwd_fa4_r2.txt 2>&1; echo "bwd rc=$?"; grep -E "^ +(64|128) +[0-9]+ +(True|False)" $OUT/bwd_fa4_r2.txt
