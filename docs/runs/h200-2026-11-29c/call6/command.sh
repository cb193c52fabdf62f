#!/bin/bash
# call 6 (2026-11-29c): a quarter of the backward's P^T exponentials on the FMA pipe (SY_HOPPER_BWD_EXP2_FMA=1, e1)
# against all on MUFU (=0, e0): timings first (one run each), then the backward's check against float64, then the
# whole GPU suite, all on e1.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
for lib in e1 e0; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 70 python3 scripts/bwd_device.py --only-hopper --skip-check --sizes 2048 4096 > $OUT/ab_$lib.txt 2>&1
  echo "$lib rc=$?"; grep -E "^ +(64|128) +[0-9]+ +(True|False)" $OUT/ab_$lib.txt | head -12
done
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/e1 timeout 70 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > $OUT/check_e1.txt 2>&1
echo "check e1 rc=$?"; grep -E "^correctness|^check" $OUT/check_e1.txt
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/e1 timeout 80 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests > $OUT/gpu_suite_e1.txt 2>&1
echo "suite e1 rc=$?"; tail -1 $OUT/gpu_suite_e1.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_suite_e1.txt | head
